//! How fast a stream is, as its receiver judges it: the window its rate is measured
//! over, and when a stream is fast enough that a pinned receiver polls for it rather
//! than sleep (TCP's `SpinRead`, UDP's `NapRead`).

/// No mark below one 64 KiB super-packet (GRO, loopback): it would batch nothing.
pub(crate) const MIN_MARK: usize = 64 * 1024;
/// A pinned receiver polls (`SpinRead`; UDP's `NapRead` naps) when its stream carries
/// [`MIN_MARK`] in this long, µs (about 2.6 Gbit/s): a CPU kept busy only for streams
/// that fast.
const POLL_SPAN_US: u64 = 200;
/// The span over which `WakeBatch` and `SpinRead` (and UDP's `NapRead`) measure a
/// stream's rate, µs.
pub(crate) const RATE_WINDOW_US: u64 = 10_000;

/// Whether `bytes` over `span_us` is a stream fast enough to poll for: at least
/// [`MIN_MARK`] in [`POLL_SPAN_US`] (about 2.6 Gbit/s).
pub(crate) fn fast_enough(bytes: u64, span_us: u64) -> bool {
    span_us > 0 && bytes.saturating_mul(POLL_SPAN_US) / span_us >= MIN_MARK as u64
}
