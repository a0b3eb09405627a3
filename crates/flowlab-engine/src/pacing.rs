//! Smooth pacing to a target bit rate (sans-clock: callers pass the elapsed time).
//!
//! The pacer keeps the long-run rate exact by scheduling byte `n` at `n × 8 / rate`
//! seconds after the start, and never lets a sender "catch up" by more than
//! [`MAX_BURST`] of lost time, so a stall is not followed by a burst.

use std::time::Duration;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
