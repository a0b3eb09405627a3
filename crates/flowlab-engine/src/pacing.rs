//! Smooth pacing to a target bit rate (sans-clock: callers pass the elapsed time).
//!
//! The pacer keeps the long-run rate exact by scheduling byte `n` at `n × 8 / rate`
//! seconds after the start, and never lets a sender "catch up" by more than
//! [`MAX_BURST`] of lost time, so a stall is not followed by a burst.

use std::time::Duration;

use flowlab_proto::udp::Progress;

/// Longest backlog a sender may send at once after falling behind.
pub const MAX_BURST: Duration = Duration::from_millis(5);

/// Schedules bytes at a fixed rate, byte by byte or in bursts.
#[derive(Debug, Clone)]
pub struct Pacer {
    bytes_per_sec: f64,
    /// Bytes already scheduled.
    scheduled: f64,
    /// Start of the schedule, shifted forward when the sender fell far behind.
    origin: Duration,
    /// Bytes that leave together, due when the first of them is (0: none).
    burst: f64,
}

impl Pacer {
    /// A pacer for `bits_per_sec` (> 0) starting at elapsed time `now`.
    pub fn new(bits_per_sec: u64, now: Duration) -> Self {
        Pacer {
            bytes_per_sec: bits_per_sec as f64 / 8.0,
            scheduled: 0.0,
            origin: now,
            burst: 0.0,
        }
    }

    /// Sends in bursts of `bytes` (iperf3's `-b RATE/BURST`, and its `--pacing-timer`): a
    /// burst is due when its first byte is, and its bytes leave back to back; the long-run
    /// rate is the same. 0 paces byte by byte.
    pub fn with_burst(mut self, bytes: u64) -> Self {
        self.burst = bytes as f64;
        self
    }

    /// The bytes left of the burst under way, when sending in bursts.
    pub fn burst_left(&self) -> Option<f64> {
        (self.burst > 0.0).then(|| self.burst - self.scheduled % self.burst)
    }

    /// How long to wait at `now` before `bytes` more may be sent; `Duration::ZERO` means
    /// send now. Call [`Pacer::sent`] after sending.
    pub fn wait(&mut self, now: Duration) -> Duration {
        // In bursts, a byte is due when its burst's first byte is.
        let at = if self.burst > 0.0 {
            (self.scheduled / self.burst).floor() * self.burst
        } else {
            self.scheduled
        };
        let due = self.origin + Duration::from_secs_f64(at / self.bytes_per_sec);
        if due > now {
            return due - now;
        }
        // Late: forget the lost time, but only at a burst's first byte (within a burst
        // every byte is due at its start, and a long burst is not late).
        if now - due > MAX_BURST && at == self.scheduled {
            // Forget the time lost beyond the burst allowance.
            self.origin += (now - due) - MAX_BURST;
        }
        Duration::ZERO
    }

    /// How many bytes are due at `now` (for batching datagrams).
    pub fn due_bytes(&self, now: Duration) -> f64 {
        let elapsed = now.saturating_sub(self.origin).as_secs_f64();
        elapsed * self.bytes_per_sec - self.scheduled
    }

    /// Records that `bytes` were sent.
    pub fn sent(&mut self, bytes: usize) {
        self.scheduled += bytes as f64;
    }

    /// Changes the rate from the schedule's current point on: a sender ahead of the
    /// schedule still waits until its next due time, one behind it keeps its credit (up
    /// to [`MAX_BURST`], as [`Pacer::wait`] allows). A new pacer instead would forgive
    /// the lead and, with nothing due yet, shrink the next batch to one datagram.
    pub fn set_rate(&mut self, bits_per_sec: u64, now: Duration) {
        let due = self.origin + Duration::from_secs_f64(self.scheduled / self.bytes_per_sec);
        self.origin = due.max(now.saturating_sub(MAX_BURST));
        self.scheduled = 0.0;
        self.bytes_per_sec = bits_per_sec as f64 / 8.0;
    }
}

/// Without reports, the limit rises this often...
pub const BACKOFF_RAISE_EVERY: Duration = Duration::from_millis(1);
/// ...by this share of its distance to the highest rate the sender ever reached (fast
/// when far below it, slowly near it), and by at least [`BACKOFF_RAISE_MIN`].
pub const BACKOFF_RAISE: f64 = 0.005;
/// Smallest raise, relative to the limit (×1.1 per 100 ms).
pub const BACKOFF_RAISE_MIN: f64 = 0.001;
/// A cut sets the limit to this share of what it was.
pub const BACKOFF_CUT: f64 = 0.8;
/// Highest limit, relative to the measured sending rate.
pub const BACKOFF_CEILING: f64 = 2.0;
/// Lowest limit, bits/s.
pub const BACKOFF_FLOOR: f64 = 1e6;
/// Span over which [`RateMeter`] measures.
pub const RATE_WINDOW: Duration = Duration::from_millis(1);

/// Bits per second over the last complete [`RATE_WINDOW`] (sans-clock).
#[derive(Debug, Clone)]
pub struct RateMeter {
    start: Duration,
    bytes: u64,
    bps: f64,
}

impl RateMeter {
    pub fn new(now: Duration) -> Self {
        RateMeter {
            start: now,
            bytes: 0,
            bps: 0.0,
        }
    }

    /// Records `bytes` moved at `now`.
    pub fn add(&mut self, now: Duration, bytes: usize) {
        self.bytes += bytes as u64;
        let span = now.saturating_sub(self.start);
        if span >= RATE_WINDOW {
            self.bps = self.bytes as f64 * 8.0 / span.as_secs_f64();
            self.start = now;
            self.bytes = 0;
        }
    }

    /// The rate of the last complete window (0 before the first).
    pub fn bps(&self) -> f64 {
        self.bps
    }
}

/// A UDP receiver's watch on its socket's queue (allocated bytes against the buffer,
/// SO_MEMINFO): [`Self::observe`] gives the count to report when the queue passes half
/// the buffer, then nothing until it has drained below a quarter. Sans-IO.
#[derive(Debug, Clone, Copy, Default)]
pub struct QueueWatch {
    count: u64,
    high: bool,
}

impl QueueWatch {
    /// `queued` bytes of a buffer of `capacity`: `Some(count)` when this is a new fill.
    pub fn observe(&mut self, queued: u64, capacity: u64) -> Option<u64> {
        if capacity == 0 {
            return None;
        }
        if !self.high && queued * 2 > capacity {
            self.high = true;
            self.count += 1;
            return Some(self.count);
        }
        if self.high && queued * 4 < capacity {
            self.high = false;
        }
        None
    }
}

/// An unlimited-rate UDP sender that slows down when its receiver reports that the
/// receiving *socket* overflowed (the host could not keep up), and speeds up again while
/// no report comes: multiplicative decrease to [`BACKOFF_CUT`] of the limit (the first
/// time, of the rate it was sending at), and every [`BACKOFF_RAISE_EVERY`] an increase
/// by [`BACKOFF_RAISE`] of the distance to the highest rate reached. A report counts only when it shows datagrams sent after
/// the last cut arriving (its sequence number is above the sender's at the cut), so one
/// overflow episode is answered by one cut. Loss in the network does not produce reports
/// and never slows the sender. Sans-clock: callers pass the elapsed time.
#[derive(Debug, Clone)]
pub struct Backoff {
    /// The current limit, `None` until the first report.
    pacer: Option<Pacer>,
    limit_bps: f64,
    last_drops: u64,
    last_queue_high: u64,
    /// The sender's sequence number at the last cut.
    cut_seq: u64,
    last_raise: Duration,
    sending: RateMeter,
    /// Highest sending rate measured so far.
    peak_bps: f64,
    cuts: u64,
}

impl Backoff {
    pub fn new(now: Duration) -> Self {
        Backoff {
            pacer: None,
            limit_bps: 0.0,
            last_drops: 0,
            last_queue_high: 0,
            cut_seq: 0,
            last_raise: now,
            sending: RateMeter::new(now),
            peak_bps: 0.0,
            cuts: 0,
        }
    }

    /// The pacer enforcing the current limit, if there is one; raises the limit first when
    /// it is due.
    pub fn pacer(&mut self, now: Duration) -> Option<&mut Pacer> {
        if self.pacer.is_some() && now.saturating_sub(self.last_raise) >= BACKOFF_RAISE_EVERY {
            self.last_raise = now;
            let ceiling = (self.sending.bps() * BACKOFF_CEILING).max(self.limit_bps);
            let step = ((self.peak_bps - self.limit_bps) * BACKOFF_RAISE)
                .max(self.limit_bps * BACKOFF_RAISE_MIN);
            self.limit_bps = (self.limit_bps + step).min(ceiling);
            if let Some(p) = self.pacer.as_mut() {
                p.set_rate(self.limit_bps as u64, now);
            }
        }
        self.pacer.as_mut()
    }

    /// Records `bytes` sent at `now`.
    pub fn sent(&mut self, now: Duration, bytes: usize) {
        self.sending.add(now, bytes);
        self.peak_bps = self.peak_bps.max(self.sending.bps());
        if let Some(p) = self.pacer.as_mut() {
            p.sent(bytes);
        }
    }

    /// The receiver reports `drops` overflow drops in total, having received up to
    /// sequence number `seq`; `sent_seq` is the last sequence number this sender sent.
    pub fn on_overflow(&mut self, now: Duration, drops: u64, seq: u64, sent_seq: u64) {
        if drops <= self.last_drops {
            return;
        }
        self.last_drops = drops;
        self.cut(now, seq, sent_seq);
    }

    /// The receiver reports its queue past half its buffer for the `count`-th time,
    /// having received up to `seq`: the same cut as an overflow, before anything is lost
    /// (one episode, one cut, whichever report comes first).
    pub fn on_queue_high(&mut self, now: Duration, count: u64, seq: u64, sent_seq: u64) {
        if count <= self.last_queue_high {
            return;
        }
        self.last_queue_high = count;
        self.cut(now, seq, sent_seq);
    }

    fn cut(&mut self, now: Duration, seq: u64, sent_seq: u64) {
        if self.cuts > 0 && seq <= self.cut_seq {
            return; // about datagrams sent before the last cut took effect
        }
        let base = if self.pacer.is_some() {
            self.limit_bps
        } else {
            self.sending.bps()
        };
        if base <= 0.0 {
            return; // nothing measured yet: no rate to cut from
        }
        self.limit_bps = (base * BACKOFF_CUT).max(BACKOFF_FLOOR);
        match self.pacer.as_mut() {
            Some(p) => p.set_rate(self.limit_bps as u64, now),
            None => self.pacer = Some(Pacer::new(self.limit_bps as u64, now)),
        }
        self.cut_seq = sent_seq;
        self.last_raise = now;
        self.cuts += 1;
    }

    /// The current limit in bits/s (`None`: unlimited so far).
    pub fn limit_bps(&self) -> Option<u64> {
        self.pacer.as_ref().map(|_| self.limit_bps as u64)
    }

    /// How many times the sender slowed down (overflow episodes).
    pub fn cuts(&self) -> u64 {
        self.cuts
    }
}

/// Datagrams of `len` bytes an unlimited-rate UDP sender may have unread before its
/// receiver's first progress report (which gives the receiver's own window), and what a
/// wait for a report that ran out lets go: 16 KiB of them, at most 8, at least one (a
/// small buffer's worth: the kernel's default gives 416 KiB).
pub fn first_window(len: usize) -> u64 {
    (16 * 1024 / len.max(1)).clamp(1, 8) as u64
}
/// How long a sender held back by its receiver's window waits for a progress report, at
/// least, before it lets a few more datagrams go ([`first_window`]; a report may be lost
/// on a lossy path): this or twice the least round trip, whichever is longer …
pub const WINDOW_WAIT: Duration = Duration::from_millis(10);
/// … but never longer than this.
pub const WINDOW_WAIT_MAX: Duration = Duration::from_secs(1);
/// The largest window a report may give, datagrams (a receive buffer of 2 GiB as the
/// kernel counts it, at the least truesize): more is not a window but a broken report.
pub const MAX_WINDOW: u64 = 1 << 21;
/// Delivery-rate samples [`ReceiverWindow`] keeps: the allowance for the path follows the
/// highest of the last few.
const RATE_SAMPLES: usize = 8;
/// Shortest span of a delivery-rate sample, µs (and at least the least round trip).
const RATE_SAMPLE_US: u64 = 1_000;

/// The receive buffer's share of datagrams a receiver offers as its window: half, so that
/// the reports' lag and the sender's allowance for the path fit in the other half.
pub fn receiver_window(rcvbuf: u64, len: usize) -> u64 {
    (rcvbuf / datagram_truesize(len) / 2).max(1)
}

/// What one queued datagram of `len` bytes costs a socket's receive buffer as the kernel
/// counts it (`skb->truesize`: the data's allocation, the `sk_buff` and its shared info),
/// estimated high: the next power of two plus 1 KiB. Measured on Linux 6.18 (SO_MEMINFO
/// after queueing 440 datagrams on loopback): 1460 bytes cost 2304 each sent one by one,
/// 1479 sent with GSO and read with GRO; 64 bytes cost 832. Estimated: 3072 and 1088.
fn datagram_truesize(len: usize) -> u64 {
    len.next_power_of_two() as u64 + 1024
}

/// The receiver reports its progress every this many datagrams read (at most one report
/// a read): a sixteenth of its window; a quarter for a paced sender, which is held only
/// when its receiver stops (every report costs the receiver a send: at a sixteenth of
/// the kernel's default buffer, one every 4 datagrams, a paced 1 Gbit/s receiver used
/// 40 % more CPU than without reports).
pub fn progress_every(window: u64, paced: bool) -> u64 {
    (window / if paced { 4 } else { 16 }).max(1)
}

/// The flow control of an unlimited-rate UDP sender whose receiver reports its progress
/// (`udp::Progress`): the sender keeps no more datagrams unread than the receiver's window
/// plus what the path holds, twice the highest delivery rate measured over the least
/// round trip (so that on a longer path the window alone does not cap the rate: each
/// round trip may deliver more, as in TCP's slow start, until the path or the receiver
/// limits it), at most the window again (the receiver's whole buffer). A paced sender's
/// share follows its rate instead ([`ReceiverWindow::paced`]).
/// A sender over its limit waits for the next report, so it yields the CPU to its
/// receiver instead of filling the socket while that receiver waits for one. Sans-IO:
/// callers pass the time in µs on the sender's test clock, the clock of the stamps the
/// reports echo.
#[derive(Debug, Clone)]
pub struct ReceiverWindow {
    /// The highest sequence number the receiver has read, as reported.
    read: u64,
    /// Datagrams the receiver can hold beyond `read`.
    window: u64,
    /// The window the receiver's reports gave (it offers one for the whole stream: a
    /// report of a larger one is not believed).
    reported_window: Option<u64>,
    /// Waits that ran out let the sender go up to this sequence number, whatever the
    /// reports say (a probe of [`first_window`] datagrams each).
    released: u64,
    /// What a wait that ran out lets go, datagrams.
    probe: u64,
    /// Waits that ran out since the last report of progress: each doubles the next.
    probes: u32,
    /// Least round trip seen: a datagram's send stamp to the report that echoed it.
    rtt_min_us: Option<u64>,
    /// Start of the current delivery-rate sample: (time, `read` then).
    sample_from: Option<(u64, u64)>,
    /// The last delivery rates, datagrams per µs (0: none yet).
    rates: [f64; RATE_SAMPLES],
    next_rate: usize,
    /// A paced sender's rate, datagrams per µs: what the path holds at it is allowed
    /// whatever the window ([`ReceiverWindow::paced`]).
    paced_per_us: Option<f64>,
    /// A paced sender's round trip until the reports measure one, µs.
    first_rtt_us: u64,
    /// The round trip smoothed as TCP's (gain 1/8, a sample counting at most twice it),
    /// µs: a paced sender's share follows it, queues on the path included.
    srtt_us: Option<f64>,
}

impl ReceiverWindow {
    /// A sender's window for datagrams of `len` bytes, before any report.
    pub fn new(len: usize) -> Self {
        ReceiverWindow {
            read: 0,
            window: first_window(len),
            reported_window: None,
            released: 0,
            probe: first_window(len),
            probes: 0,
            rtt_min_us: None,
            sample_from: None,
            rates: [0.0; RATE_SAMPLES],
            next_rate: 0,
            paced_per_us: None,
            first_rtt_us: 0,
            srtt_us: None,
        }
    }

    /// The window of a sender paced at `bits_per_sec` (`-b RATE`, > 0) with datagrams of
    /// `len` bytes, on a path whose round trip is about `rtt` (the control connection's
    /// least; zero if unknown). A paced test must send at the rate asked on any path, so
    /// the path's share is twice what the rate puts in flight over the smoothed round
    /// trip (less the waits in the receiver's socket), not capped at the window (the rate
    /// is the user's, not measured, so it cannot feed on itself), and not the least round
    /// trip: a queue on the path (a bloated bottleneck the test overruns on purpose) is
    /// path, and must not hold the sender. Until a report measures the round trip, `rtt`
    /// stands for it, so on a long path the first round trip goes at the rate while on
    /// loopback the sender waits for its receiver's first read (a receiver slow to start,
    /// as on a busy host, overflowed there). What the window keeps out is the overflow of a receiver that
    /// stops reading for longer than its buffer lasts at the rate: the sender stops soon
    /// after it, and the pacer's credit (at most `MAX_BURST`) is spent at the receiver's
    /// pace when it reads again.
    pub fn paced(len: usize, bits_per_sec: u64, rtt: Duration) -> Self {
        ReceiverWindow {
            paced_per_us: Some(bits_per_sec as f64 / 8.0 / len.max(1) as f64 / 1e6),
            first_rtt_us: u64::try_from(rtt.as_micros()).unwrap_or(u64::MAX),
            ..Self::new(len)
        }
    }

    /// The receiver has read up to `seq` (`p.seq`), last a datagram stamped `p.sent_us`
    /// that waited `p.held_us` in its socket, and can hold `p.window` datagrams more;
    /// `now_us` is when this sender learnt it, having sent up to `sent`. A report of
    /// datagrams not sent yet is not the receiver's (forged, or of another test) and is
    /// ignored; a window past [`MAX_WINDOW`] is taken as that.
    ///
    /// The round trip is the report's time less the datagram's wait in the receiver's
    /// socket: that wait is the window's own queue, not the path's. Counted in, a
    /// receiver that is behind would make its queue look like path, the path's share
    /// would grow with it and the queue with the share until the socket overflowed (a
    /// receiver behind by 700 µs grew the share from ~120 to 3 606 datagrams on a loaded
    /// machine).
    pub fn on_progress(&mut self, now_us: u64, p: &Progress, sent: u64) {
        let Progress {
            seq,
            sent_us,
            held_us,
            window,
        } = *p;
        if seq > sent {
            return;
        }
        if seq > self.read {
            self.read = seq;
            self.probes = 0;
        }
        let window = window.clamp(1, MAX_WINDOW);
        self.window = self.reported_window.map_or(window, |w| w.min(window));
        self.reported_window = Some(self.window);
        // A wait longer than the report took (a clock stepped, a forged report) leaves no
        // round trip to measure: no sample, rather than one of 0 kept for good.
        if let Some(rtt) = now_us
            .checked_sub(sent_us)
            .and_then(|t| t.checked_sub(held_us))
            .filter(|&t| t > 0)
        {
            self.rtt_min_us = Some(self.rtt_min_us.map_or(rtt, |m| m.min(rtt)));
            // One late sample (a report read late by a busy sender, a forged stamp) counts
            // at most twice the smoothed value: the share grows by at most an eighth a
            // report, a queue building on the path still gets its share within a few.
            let s = self.srtt_us.unwrap_or(rtt as f64);
            self.srtt_us = Some(s + ((rtt as f64).min(2.0 * s) - s) / 8.0);
        }
        let span = RATE_SAMPLE_US.max(self.rtt_min_us.unwrap_or(0));
        match self.sample_from {
            Some((t, from)) if now_us.saturating_sub(t) >= span => {
                self.rates[self.next_rate] =
                    self.read.saturating_sub(from) as f64 / (now_us - t) as f64;
                self.next_rate = (self.next_rate + 1) % RATE_SAMPLES;
                self.sample_from = Some((now_us, self.read));
            }
            Some(_) => {}
            None => self.sample_from = Some((now_us, self.read)),
        }
    }

    /// Whether a report of the receiver's has come (its window is known).
    pub fn has_reported(&self) -> bool {
        self.reported_window.is_some()
    }

    /// Datagrams this sender may send now, having sent up to sequence number `sent`.
    pub fn room(&self, sent: u64) -> u64 {
        self.read
            .saturating_add(self.window)
            .saturating_add(self.path_allowance())
            .max(self.released)
            .saturating_sub(sent)
    }

    /// How long to wait for a report while held: [`WINDOW_WAIT`] or twice the least round
    /// trip (a report cannot come sooner), doubled for every wait that ran out since the
    /// last progress (as TCP's persist timer), at most [`WINDOW_WAIT_MAX`].
    pub fn wait(&self) -> Duration {
        let rtts = Duration::from_micros(self.rtt_min_us.unwrap_or(0).saturating_mul(2));
        let first = rtts.clamp(WINDOW_WAIT, WINDOW_WAIT_MAX);
        first
            .saturating_mul(1 << self.probes.min(16))
            .min(WINDOW_WAIT_MAX)
    }

    /// What the path itself holds: twice the highest recent delivery rate over the least
    /// round trip, datagrams, but never more than the window: the receiver offers half its
    /// buffer, so window and path together stay within the whole of it whatever the
    /// measurements say (a receiver that stops reading gets all the path held). On a long
    /// path that caps the rate at twice the window a round trip, as a receive buffer caps
    /// TCP's; a larger `-w` lifts it. A paced sender's share is at least twice what its
    /// rate puts in flight over the smoothed round trip, uncapped.
    fn path_allowance(&self) -> u64 {
        let rtt = self.rtt_min_us.unwrap_or(0) as f64;
        let rate = self.rates.iter().copied().fold(0.0, f64::max);
        let measured = ((2.0 * rate * rtt) as u64).min(self.window);
        let srtt = self.srtt_us.unwrap_or(self.first_rtt_us as f64);
        let paced = self.paced_per_us.map_or(0, |r| (2.0 * r * srtt) as u64);
        measured.max(paced)
    }

    /// The wait ([`Self::wait`]) ran out with this sender held at `sent`: lets a probe of
    /// [`first_window`] datagrams go (as TCP probes a zero window), not a whole window: a
    /// receiver that has not run for that long must not be flooded, and the next wait is
    /// twice as long. What the reports said (progress, rate) is kept apart.
    pub fn timed_out(&mut self, sent: u64) {
        self.released = sent.saturating_add(self.probe);
        self.probes = self.probes.saturating_add(1);
    }
}

impl std::fmt::Display for ReceiverWindow {
    /// `N datagrams + M for the path (least round trip T µs)`, for the debug log; a paced
    /// sender's adds `, smoothed S µs`, which its share follows.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} datagrams + {} for the path (least round trip {} µs",
            self.window,
            self.path_allowance(),
            self.rtt_min_us.map_or("-".into(), |r| r.to_string())
        )?;
        if let (Some(_), Some(s)) = (self.paced_per_us, self.srtt_us) {
            write!(f, ", smoothed {s:.0} µs")?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A progress report of a datagram read as soon as it arrived.
    fn report(seq: u64, sent_us: u64, window: u64) -> Progress {
        Progress {
            seq,
            sent_us,
            held_us: 0,
            window,
        }
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn keeps_the_rate() {
        // 8 Mbit/s = 1000 bytes per ms.
        let mut p = Pacer::new(8_000_000, Duration::ZERO);
        assert_eq!(p.wait(Duration::ZERO), Duration::ZERO);
        p.sent(1000);
        assert_eq!(p.wait(Duration::ZERO), MS);
        assert_eq!(p.wait(MS), Duration::ZERO);
        p.sent(2000);
        assert_eq!(p.wait(MS), 2 * MS);
    }

    #[test]
    fn a_burst_leaves_back_to_back_and_keeps_the_rate() {
        // 8 Mbit/s = 1000 bytes per ms, bursts of 4000 bytes: 4 writes of 1000 at 0,
        // the next 4 at 4 ms.
        let mut p = Pacer::new(8_000_000, Duration::ZERO).with_burst(4000);
        for _ in 0..4 {
            assert_eq!(p.wait(Duration::ZERO), Duration::ZERO);
            p.sent(1000);
        }
        assert_eq!(p.burst_left(), Some(4000.0));
        assert_eq!(p.wait(Duration::ZERO), 4 * MS);
        assert_eq!(p.wait(4 * MS), Duration::ZERO);
        p.sent(1000);
        assert_eq!(p.burst_left(), Some(3000.0));
        assert_eq!(p.wait(4 * MS), Duration::ZERO);
        // Over a second: the rate, in bursts.
        let mut q = Pacer::new(8_000_000, Duration::ZERO).with_burst(10_000);
        let (mut now, mut sent) = (Duration::ZERO, 0);
        while now < Duration::from_secs(1) {
            let w = q.wait(now);
            if w.is_zero() {
                q.sent(1000);
                sent += 1000;
            } else {
                now += w;
            }
        }
        assert_eq!(sent, 1_000_000, "100 bursts, at 0, 10, … 990 ms");
        // A burst that takes longer than MAX_BURST to write (100 writes of 1000 bytes, 0.1
        // ms each, 100 KB due every 100 ms): the rate holds.
        let mut q = Pacer::new(8_000_000, Duration::ZERO).with_burst(100_000);
        let (mut now, mut sent) = (Duration::ZERO, 0u64);
        while now < Duration::from_secs(1) {
            let w = q.wait(now);
            if w.is_zero() {
                q.sent(1000);
                sent += 1000;
                now += Duration::from_micros(100);
            } else {
                now += w;
            }
        }
        assert_eq!(
            sent, 1_000_000,
            "10 bursts in a second, each written over 10 ms"
        );
    }

    #[test]
    fn a_new_rate_keeps_the_schedule() {
        // 8 Mbit/s = 1000 bytes per ms; 3000 bytes sent at 0: due again at 3 ms.
        let mut p = Pacer::new(8_000_000, Duration::ZERO);
        p.sent(3000);
        p.set_rate(16_000_000, MS);
        // Still ahead: wait until 3 ms, then 2000 bytes per ms.
        assert_eq!(p.wait(MS), 2 * MS);
        assert!((p.due_bytes(4 * MS) - 2000.0).abs() < 1.0);
        // Behind by 2 ms at 6 ms: the credit stays (2 ms at the new rate of 1000 B/ms).
        let mut q = Pacer::new(16_000_000, Duration::ZERO);
        q.sent(8000); // due again at 4 ms
        q.set_rate(8_000_000, 6 * MS);
        assert!(
            (q.due_bytes(6 * MS) - 2000.0).abs() < 1.0,
            "{}",
            q.due_bytes(6 * MS)
        );
        // Far behind: no more than MAX_BURST of credit.
        let mut r = Pacer::new(8_000_000, Duration::ZERO);
        r.set_rate(8_000_000, 100 * MS);
        let burst = MAX_BURST.as_secs_f64() * 1_000_000.0;
        assert!((r.due_bytes(100 * MS) - burst).abs() < 1.0);
    }

    #[test]
    fn no_burst_after_a_stall() {
        let mut p = Pacer::new(8_000_000, Duration::ZERO);
        p.sent(1000);
        // The sender stalls for 100 ms: only MAX_BURST worth may go at once.
        let now = 100 * MS;
        assert_eq!(p.wait(now), Duration::ZERO);
        let due = p.due_bytes(now);
        assert!((due - 5000.0).abs() < 1.0, "{due}");
    }

    /// Sends at `bytes_per_ms` for `ms` milliseconds, 1 ms at a time.
    fn run(b: &mut Backoff, from_ms: u32, ms: u32, bytes_per_ms: usize) {
        for t in from_ms..from_ms + ms {
            b.sent(t * MS, bytes_per_ms);
        }
    }

    #[test]
    fn rate_meter_reports_complete_windows() {
        let mut m = RateMeter::new(Duration::ZERO);
        m.add(MS / 2, 500);
        assert_eq!(m.bps(), 0.0, "no complete window yet");
        m.add(MS, 500);
        assert_eq!(m.bps(), 8_000_000.0);
        m.add(3 * MS, 1000);
        assert_eq!(m.bps(), 4_000_000.0);
    }

    #[test]
    fn backoff_is_unlimited_until_a_report() {
        let mut b = Backoff::new(Duration::ZERO);
        run(&mut b, 1, 50, 10_000);
        assert!(b.pacer(50 * MS).is_none());
        assert_eq!(b.limit_bps(), None);
        // A report that does not grow the count changes nothing.
        b.on_overflow(50 * MS, 0, 100, 200);
        assert_eq!(b.limit_bps(), None);
    }

    #[test]
    fn backoff_cuts_once_per_overflow_episode() {
        let mut b = Backoff::new(Duration::ZERO);
        run(&mut b, 1, 10, 10_000); // 10_000 bytes per ms = 80 Mbit/s
        b.on_overflow(10 * MS, 5, 900, 1000);
        assert_eq!(b.limit_bps(), Some(64_000_000));
        assert_eq!(b.cuts(), 1);
        // More drops, but the receiver is still reading datagrams sent before the cut.
        b.on_overflow(10 * MS, 9, 1000, 1100);
        assert_eq!(b.limit_bps(), Some(64_000_000));
        // Drops among datagrams sent after the cut: a new episode, cut from the limit.
        b.on_overflow(10 * MS, 12, 1001, 1200);
        assert_eq!(b.limit_bps(), Some(51_200_000));
        assert_eq!(b.cuts(), 2);
    }

    /// A queue report cuts like an overflow, once per episode whichever comes first.
    #[test]
    fn backoff_cuts_on_a_full_queue_before_any_drop() {
        let mut b = Backoff::new(Duration::ZERO);
        run(&mut b, 1, 10, 10_000);
        b.on_queue_high(10 * MS, 1, 900, 1000);
        assert_eq!(b.limit_bps(), Some(64_000_000));
        // The same episode's overflow, about datagrams sent before the cut: no second cut.
        b.on_overflow(10 * MS, 4, 990, 1050);
        assert_eq!(b.cuts(), 1);
        // A repeated report (same count) changes nothing; the next one, after the cut, cuts.
        b.on_queue_high(10 * MS, 1, 1100, 1150);
        assert_eq!(b.cuts(), 1);
        b.on_queue_high(10 * MS, 2, 1100, 1200);
        assert_eq!(b.limit_bps(), Some(51_200_000));
        assert_eq!(b.cuts(), 2);
    }

    /// The receiver's watch: a report when the queue passes half the buffer, then none
    /// until it has drained below a quarter.
    #[test]
    fn the_queue_watch_reports_each_fill_once() {
        let mut w = QueueWatch::default();
        assert_eq!(w.observe(100, 1000), None);
        assert_eq!(w.observe(501, 1000), Some(1));
        assert_eq!(w.observe(900, 1000), None);
        assert_eq!(w.observe(300, 1000), None);
        assert_eq!(w.observe(600, 1000), None);
        assert_eq!(w.observe(249, 1000), None);
        assert_eq!(w.observe(700, 1000), Some(2));
        assert_eq!(w.observe(0, 0), None);
    }

    #[test]
    fn backoff_raises_the_limit_while_no_report_comes_up_to_a_ceiling() {
        let mut b = Backoff::new(Duration::ZERO);
        run(&mut b, 1, 10, 10_000);
        b.on_overflow(10 * MS, 1, 1, 2);
        let cut = b.limit_bps().unwrap();
        assert!(b.pacer(10 * MS).is_some());
        assert_eq!(
            b.limit_bps(),
            Some(cut),
            "not raised before BACKOFF_RAISE_EVERY"
        );
        b.pacer(11 * MS);
        // BACKOFF_RAISE of the way from 64 to the 80 Mbit/s peak.
        assert_eq!(b.limit_bps(), Some(64_080_000));
        assert!(cut == 64_000_000);
        // A tenth of a second later it has closed a good part of the distance to the peak,
        // without overshooting it.
        for t in 12..111u32 {
            b.pacer(t * MS);
        }
        let near = b.limit_bps().unwrap();
        assert!((68_000_000..80_000_000).contains(&near), "{near}");
        // Long quiet: the limit climbs but stays within the ceiling of the measured rate.
        for t in 12..5_000u32 {
            b.sent(t * MS, 10_000);
            b.pacer(t * MS);
        }
        let limit = b.limit_bps().unwrap() as f64;
        assert!(limit <= 80e6 * BACKOFF_CEILING + 1.0, "{limit}");
        assert!(limit > 80e6 * 1.9, "{limit}");
    }

    #[test]
    fn backoff_never_goes_below_the_floor() {
        let mut b = Backoff::new(Duration::ZERO);
        run(&mut b, 1, 2, 10_000);
        for i in 1..200u64 {
            b.on_overflow(2 * MS, i, i * 10, i * 10);
        }
        assert_eq!(b.limit_bps(), Some(BACKOFF_FLOOR as u64));
    }

    #[test]
    fn a_window_holds_the_sender_until_the_receiver_reports() {
        let mut w = ReceiverWindow::new(1460);
        // Before any report: the first window, 8 datagrams of 1460 bytes (one of 64 KB).
        assert_eq!(w.room(0), 8);
        assert_eq!(w.room(8), 0);
        assert_eq!(ReceiverWindow::new(65_000).room(0), 1);
        assert_eq!(w.wait(), WINDOW_WAIT);
        // Read up to 50 of 64, room for 1000 more: 986 may go (no rate measured yet, so
        // nothing for the path).
        w.on_progress(100, &report(50, 90, 1000), 64);
        assert_eq!(w.room(64), 986);
        assert_eq!(w.room(1050), 0);
        // A report about older datagrams (reordered) does not take the progress back.
        w.on_progress(120, &report(40, 95, 1000), 64);
        assert_eq!(w.room(64), 986);
        // No report while held: after the wait a probe of the first window goes, no more.
        w.timed_out(1050);
        assert_eq!(w.room(1050), 8);
        assert_eq!(w.room(1058), 0);
        // The next report counts from what was read, probes or not.
        w.on_progress(200, &report(1058, 150, 1000), 1058);
        assert_eq!(w.room(1058), 1000);
    }

    /// Reports of datagrams not sent yet (forged, stray) are ignored; a window past any
    /// buffer is capped; nothing overflows.
    #[test]
    fn a_window_ignores_reports_it_cannot_believe() {
        let mut w = ReceiverWindow::new(1460);
        w.on_progress(100, &report(u64::MAX, 0, u64::MAX), 8);
        assert_eq!(
            w.room(8),
            0,
            "a report of unsent datagrams moved the window"
        );
        w.on_progress(100, &report(8, 0, u64::MAX), 8);
        assert_eq!(w.room(8), MAX_WINDOW);
        w.on_progress(u64::MAX, &report(8, 0, u64::MAX), 8);
        assert_eq!(w.room(u64::MAX), 0);
        // A round trip of 10 s waits at most 1 s.
        let mut far = ReceiverWindow::new(1460);
        far.on_progress(10_000_000, &report(1, 0, 10), 8);
        assert_eq!(far.wait(), WINDOW_WAIT_MAX);
    }

    #[test]
    fn a_long_path_gets_its_bandwidth_delay_product_up_to_the_window() {
        // A 10 ms round trip; the receiver reads a datagram a µs and reports every ms,
        // each report echoing the stamp of a datagram sent 10 ms before; its buffer is
        // large (a window of 30 000 datagrams, as with -w 64M).
        let mut w = ReceiverWindow::new(1460);
        for k in 0..=20u64 {
            let now = 10_000 + k * 1_000;
            w.on_progress(
                now,
                &report(k * 1_000, now - 10_000, 30_000),
                k * 1_000 + 10_000,
            );
        }
        // Samples span the least round trip (10 ms): one datagram a µs; the path holds
        // twice 10 000 datagrams beside the receiver's 30 000.
        assert_eq!(w.room(20_000), 30_000 + 20_000);
        // A report cannot come back sooner than a round trip: waits are two of them.
        assert_eq!(w.wait(), Duration::from_millis(20));
        // The same path into a receiver with room for 100: the path gets 100 more, not
        // 20 000 (the receiver's buffer must hold what the path held if it stops reading).
        w.on_progress(31_000, &report(21_000, 21_000, 100), 30_000);
        assert_eq!(w.room(21_000), 100 + 100);
        // A short path (loopback: a 12 µs round trip) adds little to the window.
        let mut l = ReceiverWindow::new(1460);
        for k in 0..=5u64 {
            let now = 12 + k * 1_000;
            l.on_progress(now, &report(k * 3_000, now - 12, 1365), k * 3_000 + 100);
        }
        assert_eq!(l.room(15_000), 1365 + 72);
    }

    /// A receiver that is behind (a loaded machine): every datagram it reports waited
    /// 690 µs in its socket of the report's 700 µs. That wait is the window's own queue:
    /// the path's share follows the 10 µs that remain, not 700 µs (which gave the path
    /// 2 × 2 × 700 = 2 800 datagrams beside a window of 1 365 and overflowed the socket).
    #[test]
    fn a_receivers_queue_is_not_taken_for_path() {
        let mut w = ReceiverWindow::new(1460);
        for k in 0..=20u64 {
            let now = 1_000 + k * 1_000;
            let p = Progress {
                held_us: 690,
                ..report(k * 2_000, now - 700, 1365)
            };
            w.on_progress(now, &p, k * 2_000 + 1365);
        }
        // Two datagrams a µs over a round trip of 10 µs: 40 for the path.
        assert_eq!(w.room(40_000), 1365 + 40);
        // A wait longer than the report's time (a clock stepped, a forged report) is no
        // round trip at all: no sample (not one of 0, kept as the least for good), and the
        // next true one counts.
        let mut z = ReceiverWindow::new(1460);
        let held = |held_us, p: Progress| Progress { held_us, ..p };
        z.on_progress(200, &held(5_000, report(8, 100, 1365)), 8);
        assert!(z.to_string().ends_with("(least round trip - µs)"), "{z}");
        assert_eq!(z.room(8), 1365);
        z.on_progress(300, &held(10, report(16, 250, 1365)), 16);
        assert!(z.to_string().ends_with("(least round trip 40 µs)"), "{z}");
    }

    /// The receiver offers one window for the whole stream: a later report of a larger one
    /// (forged, or stray) does not lift the limit; a smaller one lowers it.
    #[test]
    fn a_window_never_grows_once_reported() {
        let mut w = ReceiverWindow::new(1460);
        w.on_progress(100, &report(8, 50, 69), 8);
        assert_eq!(w.room(8), 69);
        w.on_progress(200, &report(8, 150, MAX_WINDOW), 8);
        assert_eq!(w.room(8), 69, "a larger window was believed");
        w.on_progress(300, &report(8, 250, 10), 8);
        assert_eq!(w.room(8), 10);
    }

    /// A receiver that does not report (stopped, or its reports lost) gets a probe after
    /// each wait, and each wait is twice the one before, up to 1 s: over a stall of 60 ms
    /// three probes go (10 + 20 + 40 ms), not six; progress starts over at 10 ms.
    #[test]
    fn waits_for_a_silent_receiver_double() {
        let mut w = ReceiverWindow::new(1460);
        w.on_progress(100, &report(8, 50, 100), 8);
        let mut sent = 8 + w.room(8);
        let waits: Vec<u64> = (0..9)
            .map(|_| {
                let ms = w.wait().as_millis() as u64;
                w.timed_out(sent);
                sent += w.room(sent);
                ms
            })
            .collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        assert_eq!(sent, 108 + 9 * 8, "a probe of 8 datagrams a wait");
        w.on_progress(2_000_000, &report(sent, 1_999_900, 100), sent);
        assert_eq!(w.wait(), WINDOW_WAIT, "progress starts the waits over");
    }

    /// On a path of 60 ms, the first report comes after the waits have run out several
    /// times: the probes they let go are not taken for the receiver's progress, so the
    /// delivery rate and the path's share are the receiver's, not the timer's.
    #[test]
    fn probes_on_a_long_path_do_not_inflate_the_window() {
        let mut w = ReceiverWindow::new(1460);
        let mut sent = 0u64;
        // 60 ms without a report: six waits of 10 ms run out, eight datagrams each.
        for _ in 0..6 {
            sent += w.room(sent);
            assert_eq!(w.room(sent), 0);
            w.timed_out(sent);
        }
        sent += w.room(sent);
        assert_eq!(sent, 56);
        // Then the receiver reads one datagram a µs, reports every ms what it read 60 ms
        // after it was sent, and the sender keeps its window full.
        for k in 0..=130u64 {
            let now = 60_000 + k * 1_000;
            w.on_progress(now, &report(8 + k * 1_000, now - 60_000, 150_000), sent);
            sent += w.room(sent);
        }
        // Rate samples span the least round trip: two of them so far, one datagram a µs
        // each. Twice that over 60 ms beside the window: not more.
        assert_eq!(w.room(130_008), 150_000 + 120_000);
        assert_eq!(w.wait(), Duration::from_millis(120));
    }

    /// A paced sender (`-b 1G`, 1460-byte datagrams: 85.6 a ms): on a long path its share
    /// is what the rate puts in flight, from the control connection's round trip before
    /// the first report, then from the reports', not capped at a small window, so the
    /// rate asked goes through; on loopback it waits for its receiver's first read, and
    /// a receiver that stops reading stops it within its window and a few datagrams.
    #[test]
    fn a_paced_sender_keeps_its_rate_and_stops_with_its_receiver() {
        let ms = Duration::from_millis(1);
        let mut w = ReceiverWindow::paced(1460, 1_000_000_000, 100 * ms);
        // Before any report: 8 datagrams for the receiver, twice 100 ms at the rate for
        // the path.
        assert_eq!(w.room(0), 8 + 17_123);
        // A 100 ms round trip into the kernel's default buffer (a window of 69): for 300
        // ms, reports every ms of what was sent 100 ms before, the receiver keeping up.
        let long_path = |w: &mut ReceiverWindow| {
            for k in 0..=300u64 {
                let now = 100_000 + k * 1_000;
                w.on_progress(now, &report(k * 86, now - 100_000, 69), k * 86 + 8_560);
            }
        };
        long_path(&mut w);
        // Twice the rate over 100 ms (17 123 datagrams) beside the window: the sender,
        // 8 560 ahead of what was read (what one round trip holds), is not held.
        assert_eq!(w.room(25_800 + 8_560), 69 + 17_123 - 8_560);
        // An unlimited sender's share on the same path is capped at the window: it is
        // held at twice the window a round trip, far below the rate.
        let mut u = ReceiverWindow::new(1460);
        long_path(&mut u);
        assert_eq!(u.room(25_800), 69 + 69);
        assert_eq!(u.room(25_800 + 8_560), 0);
        // Loopback, a 20 µs round trip: before the receiver's first read, 8 + 3 datagrams
        // (a receiver slow to start on a busy host overflowed when the sender was not
        // held); with the round trip unknown, 8.
        let mut l = ReceiverWindow::paced(1460, 1_000_000_000, Duration::from_micros(20));
        assert_eq!(l.room(0), 8 + 3);
        assert_eq!(
            ReceiverWindow::paced(1460, 1_000_000_000, Duration::ZERO).room(0),
            8
        );
        // It reads up to 500 and stops. The sender may have 69 + 3 unread, no more,
        // until the next report or a wait runs out.
        l.on_progress(1_000, &report(500, 980, 69), 510);
        assert_eq!(l.room(510), 500 + 69 + 3 - 510);
        assert_eq!(l.room(572), 0);
        assert_eq!(l.wait(), WINDOW_WAIT);
        l.timed_out(572);
        assert_eq!(l.room(572), first_window(1460), "a probe after the wait");
    }

    /// A report the sender read 100 ms late (it was busy, or sleeping between bursts)
    /// counts as twice the smoothed round trip, not as 100 ms: a paced sender's share on
    /// loopback stays a few datagrams instead of 2 000.
    #[test]
    fn a_late_report_barely_moves_a_paced_senders_share() {
        let mut w = ReceiverWindow::paced(1460, 1_000_000_000, Duration::from_micros(20));
        w.on_progress(1_000, &report(500, 980, 69), 510);
        assert_eq!(w.room(500), 69 + 3);
        w.on_progress(101_000, &report(600, 1_000, 69), 610);
        assert_eq!(w.room(600), 69 + 3);
    }

    /// A paced test overrunning a bloated bottleneck on purpose (`-b 100M` into less,
    /// the kernel's default buffers: a window of 69): the queue there grows by a ms
    /// every ms to 200 ms and stays, the round trip from 10 to 210 ms. What waits in that
    /// queue is path, not the receiver's: the sender is never held (with the least round
    /// trip for its share it would be, 1 800 datagrams unread against 69 + 171).
    #[test]
    fn a_queue_on_the_path_does_not_hold_a_paced_sender() {
        let per_ms = 100e6 / 8.0 / 1460.0 / 1e3;
        let mut w = ReceiverWindow::paced(1460, 100_000_000, Duration::from_millis(10));
        for t in 10..=400u64 {
            let rtt = 10 + (t - 10).min(200);
            let sent = (t as f64 * per_ms) as u64;
            if t >= rtt {
                let read = ((t - rtt) as f64 * per_ms) as u64;
                w.on_progress(t * 1_000, &report(read, (t - rtt) * 1_000, 69), sent);
            }
            assert!(w.room(sent) > 0, "held at {t} ms: {w}");
        }
    }

    #[test]
    fn a_receiver_offers_half_its_buffer_and_reports_sixteen_times_a_window_four_if_paced() {
        // 8 MiB as the kernel reports a 4 MiB SO_RCVBUF: 1460-byte datagrams estimated at
        // 3072 bytes each.
        assert_eq!(receiver_window(8 << 20, 1460), 1365);
        assert_eq!(progress_every(1365, false), 85);
        assert_eq!(progress_every(1365, true), 341);
        // The kernel's default buffer (rmem_max 212992, reported doubled).
        assert_eq!(receiver_window(425_984, 1460), 69);
        // Small datagrams still count their sk_buff; a buffer too small for two datagrams
        // still offers one.
        assert_eq!(receiver_window(425_984, 64), 195);
        assert_eq!(receiver_window(4096, 65_000), 1);
        assert_eq!(progress_every(10, false), 1);
        assert_eq!(progress_every(69, true), 17);
    }
}
