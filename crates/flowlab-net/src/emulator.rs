//! The user-space link emulator's model of one direction of a link (sans-IO): random
//! loss, then a propagation delay with jitter, as netem applies them. Rate and queue are
//! not here for a link of fixed rate: both backends leave them to `tbf` on the sending
//! interface, so the two backends differ only in where delay, jitter and loss happen. A
//! trace-driven link's rate and queue are here, ahead of the delay ([`crate::trace`]).
//!
//! Time is nanoseconds on any monotonic clock the caller chooses, so the model is tested
//! without a clock.

use std::collections::VecDeque;
use std::time::Duration;

use flowlab_results::net::Shape;

use crate::trace::TraceQueue;

/// The delay line holds at most this many packets (netem's `limit` is set to the same
/// number, see [`line_limit`]), whatever the link's rate.
pub const MAX_LINE: u64 = 200_000;

/// Packets a direction must be able to hold in flight: the packets its rate can put on the
/// line during the longest delay, twice over, plus its queue, and never fewer than netem's
/// default of 1000. A link without a rate is counted as 10 Gbit/s.
pub fn line_limit(s: &Shape) -> u64 {
    let rate = s.rate_bps.unwrap_or(10_000_000_000) as f64;
    let longest = (s.delay + s.jitter).as_secs_f64();
    let in_flight = (rate * longest / 8.0 / crate::build::PACKET_BYTES as f64).ceil() as u64;
    let queue = crate::topology::queue_limit_bytes(s) / crate::build::PACKET_BYTES;
    (2 * in_flight + queue).clamp(1000, MAX_LINE)
}

/// xorshift64*: fast, and good enough to decide random loss and jitter.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        // Zero is xorshift's one fixed point.
        Rng(seed | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// How long before a packet is due the emulator's thread asks the kernel to wake it, so
/// that a late wake-up does not delay the packet: it spins the rest of the way. Every
/// microsecond of margin is a microsecond of spinning before every frame, so the margin
/// is not a bound on nearly every wake-up (the mean lateness plus three deviations) but
/// the 90th percentile of the wake-ups' lateness: nine in time for every one late
/// ([`WakeMargin::HITS_PER_MISS`]), learnt as it goes by a stochastic quantile estimate —
/// up that many [`WakeMargin::STEP`]s when a wake-up comes later than the margin, down
/// one step when it does not, so it settles where one in ten does. A late one makes its
/// frame late by what it overshot, which the lateness histogram counts. The 90th
/// percentile is where a lower one stopped saving CPU at the seed's 30 Mbit/s and
/// started to cost frames lateness (`bench/emulator.sh`; the runs:
/// docs/lab-notes/performance.md, "The emulator's CPU at 30 Mbit/s").
#[derive(Debug, Clone, Copy)]
pub struct WakeMargin {
    margin_ns: u64,
}

impl WakeMargin {
    /// The margin never exceeds this, ns: beyond it the spinning costs more than the
    /// precision is worth (a host that stalls threads for longer is reported instead, as
    /// late frames).
    pub const MAX: u64 = 400_000;
    /// How much one wake-up moves the margin, ns.
    pub const STEP: u64 = 1_000;
    /// Wake-ups in time for every one that is not.
    pub const HITS_PER_MISS: u64 = 9;

    pub fn new() -> Self {
        WakeMargin { margin_ns: 50_000 }
    }

    /// How long before a due time to ask to be woken, ns.
    pub fn margin(&self) -> u64 {
        self.margin_ns
    }

    /// Learns from one timer wake-up that came `late_ns` after the time asked for.
    pub fn learn(&mut self, late_ns: u64) {
        self.margin_ns = if late_ns > self.margin_ns {
            (self.margin_ns + Self::HITS_PER_MISS * Self::STEP).min(Self::MAX)
        } else {
            self.margin_ns.saturating_sub(Self::STEP)
        };
    }
}

impl Default for WakeMargin {
    fn default() -> Self {
        Self::new()
    }
}

/// When the emulator's thread was last in its poll (asleep, or asking whether anything
/// had come), on its clock: the part of a frame's lateness that passed while the thread
/// was there is its wake-up's, the host's timer and scheduler's; the rest passed while
/// the thread was up (its own work on other frames, or the CPU taken from it).
#[derive(Debug, Clone, Default)]
pub struct RecentPolls {
    /// (entered, returned), ns; the latest [`RecentPolls::KEPT`], oldest overwritten.
    spans: [(u64, u64); RecentPolls::KEPT],
    next: usize,
}

impl RecentPolls {
    /// Polls kept. A frame that became due while the thread slept leaves in that pass,
    /// or in the next one if it waited unread in its socket; only a backlog holds it
    /// over more polls, and a backlog's polls return at once. A backlog of more than
    /// four passes (a pass reads up to 512 frames a socket: after a stall of tens of
    /// milliseconds at 1 Gbit/s) leaves its later frames' wait in the stall's poll
    /// uncounted, as the thread's.
    pub const KEPT: usize = 4;

    /// Notes a poll entered at `entered` and returned at `returned`.
    pub fn record(&mut self, entered: u64, returned: u64) {
        self.spans[self.next] = (entered, returned.max(entered));
        self.next = (self.next + 1) % Self::KEPT;
    }

    /// How much of `from..to` the thread spent in its recent polls, ns: at most
    /// `to − from`, the polls being one after another.
    pub fn within(&self, from: u64, to: u64) -> u64 {
        self.spans
            .iter()
            .map(|&(entered, returned)| returned.min(to).saturating_sub(entered.max(from)))
            .sum()
    }

    /// The part of a frame's lateness `late` that passed in the recent polls, the frame
    /// being written at `now`: it has been overdue since `late` before `now`.
    pub fn overdue_within(&self, late: u64, now: u64) -> u64 {
        self.within(now.saturating_sub(late), now)
    }
}

/// Whether frames arriving for a line may wait in their socket, unread, while the
/// emulator's thread sleeps until `next` (ns on its clock), the socket having been seen
/// empty at `since`: yes when none of them could be due before the thread is up anyway.
/// A frame arriving at `since` or later is due to be written no sooner than `since +
/// least_delay − send_cost`; if `next` comes [`ARRIVAL_SLACK`] before that, the thread
/// reads the frame once it has woken for `next` and sent the frames then due, and the
/// kernel's arrival stamp keeps its delay exact. On a link carrying a steady flow this nearly halves the thread's
/// wake-ups (each frame woke it twice, arriving and leaving). Never through a sleep
/// ending more than [`ARRIVAL_HORIZON`] after `since`: a stamp older than 10 ms is taken
/// for a clock step and not believed, so a frame left waiting must be read long before.
pub fn arrivals_can_wait(since: u64, next: u64, least_delay: u64, send_cost: u64) -> bool {
    let earliest = least_delay.saturating_sub(send_cost).min(ARRIVAL_HORIZON);
    next.saturating_sub(since) + ARRIVAL_SLACK <= earliest
}

/// Time kept in hand between a wake-up and the earliest a frame left waiting in its
/// socket can be due, ns: for reading it and working out its time, far more than that
/// takes.
pub const ARRIVAL_SLACK: u64 = 100_000;
/// The longest that arrivals may wait unread, ns: a frame read at most this old leaves the
/// host 8 ms to stall the thread before the frame's stamp is disbelieved.
pub const ARRIVAL_HORIZON: u64 = 2_000_000;

/// What it costs the emulator to hand a frame on: from its send call to the moment the
/// veth driver passes the frame to the next node (the kernel's software transmit stamp,
/// taken there). Every crossing of an emulated link pays it on top of what a plain veth
/// costs — 10–30 µs on the development VM, so a path through three links, six crossings
/// a round trip, came out 0.1–0.2 ms longer than its topology — so frames are written
/// that much before they are due. One frame in every [`SendCost::EVERY`] asks for a
/// stamp; the estimate is their moving mean.
#[derive(Debug, Clone, Copy, Default)]
pub struct SendCost {
    mean_ns: u64,
    /// When the frame that asked for a stamp was written, until its stamp comes back.
    pending: Option<u64>,
    next_sample: u64,
}

impl SendCost {
    /// How often a frame asks for a stamp, ns.
    pub const EVERY: u64 = 10_000_000;
    /// A sample above this is a thread preempted on its way into the kernel, not a cost:
    /// it counts as this much.
    pub const MAX: u64 = 200_000;
    /// A stamp not back after this long never comes (the frame was refused).
    const GIVE_UP: u64 = 100_000_000;

    pub fn new() -> Self {
        Self::default()
    }

    /// How long before a frame is due to write it, ns.
    pub fn estimate(&self) -> u64 {
        self.mean_ns
    }

    /// Whether the next frame written at `now` should ask for a stamp.
    pub fn wants_sample(&mut self, now: u64) -> bool {
        if let Some(sent) = self.pending {
            if now < sent + Self::GIVE_UP {
                return false;
            }
            self.pending = None;
        }
        now >= self.next_sample
    }

    /// A frame that asked for a stamp is being written at `now`.
    pub fn sent_sample(&mut self, now: u64) {
        self.pending = Some(now);
        self.next_sample = now + Self::EVERY;
    }

    /// Its stamp came back: the driver passed it on at `at`.
    pub fn stamped(&mut self, at: u64) {
        let Some(sent) = self.pending.take() else {
            return;
        };
        let cost = at.saturating_sub(sent).min(Self::MAX);
        self.mean_ns = if self.mean_ns == 0 {
            cost
        } else {
            (7 * self.mean_ns + cost) / 8
        };
    }
}

/// What happened to a packet offered to the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It leaves at this time.
    Queued(u64),
    /// Dropped by the configured random loss.
    Lost,
    /// Dropped because the line already holds its limit.
    Full,
}

/// One direction of an emulated link.
#[derive(Debug)]
pub struct DelayLine<T> {
    delay_ns: u64,
    jitter_ns: u64,
    /// A packet is lost when a random u64 falls below this.
    loss_below: u64,
    limit: usize,
    rng: Rng,
    /// Departure time of the newest packet: packets never overtake each other.
    last_due: u64,
    line: VecDeque<(u64, T)>,
    /// A trace-driven link's queue ahead of the line: a packet enters the line when the
    /// trace's opportunities have delivered it ([`crate::trace`]).
    trace: Option<TraceQueue<T>>,
}

impl<T> DelayLine<T> {
    pub fn new(delay: Duration, jitter: Duration, loss: f64, limit: u64, seed: u64) -> Self {
        DelayLine {
            delay_ns: delay.as_nanos() as u64,
            jitter_ns: jitter.as_nanos() as u64,
            loss_below: (loss.clamp(0.0, 1.0) * u64::MAX as f64) as u64,
            limit: limit.max(1) as usize,
            rng: Rng::new(seed),
            last_due: 0,
            line: VecDeque::new(),
            trace: None,
        }
    }

    /// The line behind `queue`, a trace-driven link's queue: packets offered wait there
    /// for the trace's opportunities, then take the line's delay.
    pub fn behind(mut self, queue: TraceQueue<T>) -> Self {
        self.trace = Some(queue);
        self
    }

    /// The line for one direction of a link with shape `s`.
    pub fn for_shape(s: &Shape, seed: u64) -> Self {
        Self::new(s.delay, s.jitter, s.loss, line_limit(s), seed)
    }

    /// Offers `packet`, which arrived at `now`. A kept packet leaves at `now` + delay ±
    /// jitter (uniform, like netem without a distribution table), but never before the
    /// packet ahead of it: unlike netem, jitter does not reorder.
    pub fn push(&mut self, now: u64, packet: T) -> (Verdict, Option<T>) {
        self.push_sized(now, packet, crate::trace::OPPORTUNITY_BYTES)
    }

    /// [`DelayLine::push`] for a packet of `bytes` (its IP length), which a trace-driven
    /// link's queue counts: there it waits for the trace's opportunities, `Full` when the
    /// queue holds its limit, and `Queued` says the next opportunity.
    pub fn push_sized(&mut self, now: u64, packet: T, bytes: u64) -> (Verdict, Option<T>) {
        if self.loss_below > 0 && self.rng.next_u64() < self.loss_below {
            return (Verdict::Lost, Some(packet));
        }
        if self.trace.is_some() {
            self.deliver(now);
            let queue = self.trace.as_mut().expect("a trace queue");
            return match queue.push(now, packet, bytes) {
                Ok(()) => (
                    Verdict::Queued(queue.next_opportunity().unwrap_or(now)),
                    None,
                ),
                Err(p) => (Verdict::Full, Some(p)),
            };
        }
        if self.line.len() >= self.limit {
            return (Verdict::Full, Some(packet));
        }
        let due = self.due(now);
        self.line.push_back((due, packet));
        (Verdict::Queued(due), None)
    }

    /// When a packet entering the line at `now` leaves it: `now` + delay ± jitter, never
    /// before the one ahead.
    fn due(&mut self, now: u64) -> u64 {
        let mut due = now + self.delay_ns;
        if self.jitter_ns > 0 {
            let offset = self.rng.next_u64() % (2 * self.jitter_ns + 1);
            due = (due + offset).saturating_sub(self.jitter_ns).max(now);
        }
        let due = due.max(self.last_due);
        self.last_due = due;
        due
    }

    /// Moves what a trace-driven link's opportunities up to `upto` deliver into the line.
    fn deliver(&mut self, upto: u64) {
        let Some(mut queue) = self.trace.take() else {
            return;
        };
        queue.deliver(upto, &mut |when, p| {
            let due = self.due(when);
            self.line.push_back((due, p));
        });
        self.trace = Some(queue);
    }

    /// Records the events of a trace-driven link's queue from now on (mahimahi's log).
    pub fn record(&mut self) {
        if let Some(q) = &mut self.trace {
            q.record();
        }
    }

    /// The events of a trace-driven link's queue recorded since the last call (its idle
    /// opportunities among them once [`DelayLine::idle_until`] counted them).
    pub fn take_log(&mut self) -> Vec<crate::trace::LogEvent> {
        self.trace
            .as_mut()
            .map_or_else(Vec::new, TraceQueue::take_log)
    }

    /// Counts a trace-driven link's idle opportunities up to `now` as unused.
    pub fn idle_until(&mut self, now: u64) {
        if let Some(q) = &mut self.trace {
            q.idle_until(now);
        }
    }

    /// Packets a trace-driven link's queue dropped early so far (CoDel's, PIE's).
    pub fn early_drops(&self) -> u64 {
        self.trace.as_ref().map_or(0, TraceQueue::early_drops)
    }

    /// Opportunities of a trace-driven link that went unused so far (its queue empty).
    pub fn unused_opportunities(&self) -> u64 {
        self.trace.as_ref().map_or(0, TraceQueue::unused)
    }

    /// Changes the delay, jitter, loss and limit for the packets offered from now on
    /// (`flowlab net set`): those in the line keep their departure times, none is
    /// dropped (a line over its new limit refuses packets until it is under it), and a
    /// packet never overtakes one ahead of it, so a shorter delay takes effect once the
    /// packets sent under the longer one have left.
    pub fn set(&mut self, delay: Duration, jitter: Duration, loss: f64, limit: u64) {
        self.delay_ns = delay.as_nanos() as u64;
        self.jitter_ns = jitter.as_nanos() as u64;
        self.loss_below = (loss.clamp(0.0, 1.0) * u64::MAX as f64) as u64;
        self.limit = limit.max(1) as usize;
    }

    /// The least time a packet offered now can take to be due, ns (delay less jitter;
    /// none behind a trace's queue, whose next opportunity may be now).
    pub fn least_delay_ns(&self) -> u64 {
        if self.trace.is_some() {
            return 0;
        }
        self.delay_ns.saturating_sub(self.jitter_ns)
    }

    /// When the next packet is due, if any is waiting (behind a trace's queue: at the
    /// earliest, the next opportunity and the delay after it).
    pub fn next_due(&self) -> Option<u64> {
        let queued = self.trace.as_ref().and_then(TraceQueue::next_opportunity);
        let queued = queued.map(|t| t + self.delay_ns.saturating_sub(self.jitter_ns));
        let lined = self.line.front().map(|(due, _)| *due);
        lined.into_iter().chain(queued).min()
    }

    /// The next packet and when it was due, if it is due at `now`.
    pub fn pop_due(&mut self, now: u64) -> Option<(u64, T)> {
        self.deliver(now);
        match self.line.front() {
            Some((due, _)) if *due <= now => self.line.pop_front(),
            _ => None,
        }
    }

    pub fn len(&self) -> usize {
        self.line.len() + self.trace.as_ref().map_or(0, TraceQueue::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_line_keeps_what_it_holds_and_delays_what_comes_next() {
        let ms = Duration::from_millis;
        let mut line = DelayLine::new(ms(40), Duration::ZERO, 0.0, 3, 7);
        assert_eq!(line.push(0, 'a').0, Verdict::Queued(40_000_000));
        assert_eq!(line.push(1_000_000, 'b').0, Verdict::Queued(41_000_000));
        // Shorter, and a limit below what the line holds.
        line.set(ms(5), Duration::ZERO, 0.0, 1);
        assert_eq!(line.len(), 2, "nothing queued is dropped");
        assert_eq!(line.push(2_000_000, 'c').0, Verdict::Full);
        assert_eq!(line.pop_due(40_000_000), Some((40_000_000, 'a')));
        assert_eq!(line.pop_due(41_000_000), Some((41_000_000, 'b')));
        // Under the new limit again: the new delay, never before what went ahead.
        assert_eq!(line.push(41_000_000, 'd').0, Verdict::Queued(46_000_000));
        line.set(ms(80), Duration::ZERO, 0.0, 3);
        assert_eq!(line.push(42_000_000, 'e').0, Verdict::Queued(122_000_000));
        line.set(ms(5), Duration::ZERO, 0.0, 3);
        assert_eq!(
            line.push(43_000_000, 'f').0,
            Verdict::Queued(122_000_000),
            "not before the packet ahead"
        );
        line.set(ms(5), Duration::ZERO, 0.5, 3);
        let lost = (0..1000)
            .filter(|&i| {
                let verdict = line.push(200_000_000 + i, 'x');
                while line.pop_due(u64::MAX).is_some() {}
                verdict.0 == Verdict::Lost
            })
            .count();
        assert!((400..600).contains(&lost), "{lost} of 1000 lost at 0.5");
    }

    #[test]
    fn behind_a_trace_packets_wait_for_opportunities_then_take_the_delay() {
        use crate::trace::{DeliveryTrace, QueueLimit, TraceQueue};
        let ms = Duration::from_millis;
        // An opportunity at 2 ms and at 4 ms of every 4; a queue of 2 packets; 10 ms on.
        let trace = DeliveryTrace::parse("2\n4\n").unwrap();
        let mut line = DelayLine::new(ms(10), Duration::ZERO, 0.0, 1000, 7)
            .behind(TraceQueue::new(trace, QueueLimit::Packets(2)));
        assert_eq!(line.least_delay_ns(), 0, "an opportunity may come at once");
        assert_eq!(line.push_sized(0, 'a', 1500).0, Verdict::Queued(2_000_000));
        assert_eq!(line.push_sized(0, 'b', 1500).0, Verdict::Queued(2_000_000));
        assert_eq!(line.push_sized(0, 'c', 1500).0, Verdict::Full);
        // 'a' leaves the queue at 2 ms, the line at 12; 'b' at 4 and 14.
        assert_eq!(line.next_due(), Some(12_000_000));
        assert_eq!(line.pop_due(11_999_999), None);
        assert_eq!(line.len(), 2);
        assert_eq!(line.pop_due(12_000_000), Some((12_000_000, 'a')));
        assert_eq!(line.next_due(), Some(14_000_000));
        assert_eq!(line.pop_due(20_000_000), Some((14_000_000, 'b')));
        assert!(line.is_empty());
        // Nothing waited from 4 ms to 21 ms: the opportunities at 6 … 20 ms went unused.
        assert_eq!(
            line.push_sized(21_000_000, 'd', 1500).0,
            Verdict::Queued(22_000_000)
        );
        assert_eq!(line.unused_opportunities(), 8);
    }

    #[test]
    fn the_send_cost_is_the_mean_of_sampled_frames() {
        let mut c = SendCost::new();
        assert_eq!(c.estimate(), 0);
        assert!(c.wants_sample(0));
        c.sent_sample(0);
        // One sample at a time, and not before the next period.
        assert!(!c.wants_sample(1_000));
        c.stamped(20_000);
        assert_eq!(c.estimate(), 20_000);
        assert!(!c.wants_sample(SendCost::EVERY - 1));
        // A stamp nobody asked for changes nothing.
        c.stamped(SendCost::EVERY + 5_000_000);
        assert_eq!(c.estimate(), 20_000);
        let mut t = SendCost::EVERY;
        for _ in 0..100 {
            assert!(c.wants_sample(t));
            c.sent_sample(t);
            c.stamped(t + 30_000);
            t += SendCost::EVERY;
        }
        assert!(
            (29_000..=30_000).contains(&c.estimate()),
            "{}",
            c.estimate()
        );
        // A preempted writer counts as at most MAX.
        c.sent_sample(t);
        c.stamped(t + 50_000_000);
        assert!(c.estimate() <= (7 * 30_000 + SendCost::MAX) / 8);
        // A stamp that never comes is given up on.
        t += SendCost::EVERY;
        c.sent_sample(t);
        assert!(!c.wants_sample(t + SendCost::EVERY));
        assert!(c.wants_sample(t + SendCost::GIVE_UP));
    }

    /// The share of `n` wake-ups drawn by `late` that `w` covers, learning from each, and
    /// its mean margin meanwhile (what it spins), ns.
    fn covered(w: &mut WakeMargin, rng: &mut Rng, late: fn(&mut Rng) -> u64, n: u32) -> (f64, u64) {
        let (mut covered, mut margins) = (0, 0);
        for _ in 0..n {
            let l = late(rng);
            covered += u32::from(l <= w.margin());
            margins += w.margin();
            w.learn(l);
        }
        (f64::from(covered) / f64::from(n), margins / u64::from(n))
    }

    #[test]
    fn only_the_time_spent_in_polls_within_a_span_is_counted() {
        let mut polls = RecentPolls::default();
        assert_eq!(polls.within(0, 1_000), 0);
        // Asleep 100–400, up 400–450, asleep 450–600 (returned at once at 600–601).
        polls.record(100, 400);
        polls.record(450, 600);
        polls.record(600, 601);
        assert_eq!(polls.within(0, 1_000), 300 + 150 + 1);
        // A frame overdue from 350 and written at 500: 50 of it asleep before the thread
        // woke at 400, and 50 in the next poll; the 50 in between were the thread's.
        assert_eq!(polls.within(350, 500), 100);
        // Overdue only while the thread was up: none.
        assert_eq!(polls.within(410, 440), 0);
        // A frame written at 500, 150 late: overdue since 350, 50 of it in the first
        // poll and 50 in the second; one written at 700, 300 late (overdue since 400):
        // the second poll's 150 and the third's 1.
        assert_eq!(polls.overdue_within(150, 500), 100);
        assert_eq!(polls.overdue_within(300, 700), 151);
        // On time: none; overdue since before the clock began: every poll so far.
        assert_eq!(polls.overdue_within(0, 500), 0);
        assert_eq!(polls.overdue_within(u64::MAX, 700), 451);
        // Only the latest KEPT polls are remembered.
        for i in 0..RecentPolls::KEPT as u64 {
            polls.record(1_000 + 10 * i, 1_005 + 10 * i);
        }
        assert_eq!(polls.within(0, 400), 0);
        assert_eq!(polls.within(0, 2_000), 5 * RecentPolls::KEPT as u64);
    }

    #[test]
    fn the_wake_margin_covers_nine_wake_ups_in_ten_and_no_more() {
        // Wake-ups from an idle vCPU: 40–140 µs late, spread evenly.
        let mut rng = Rng::new(7);
        let mut w = WakeMargin::new();
        let idle = |rng: &mut Rng| 40_000 + rng.next_u64() % 100_001;
        covered(&mut w, &mut rng, idle, 1000);
        let (share, mean) = covered(&mut w, &mut rng, idle, 10_000);
        assert!((0.87..=0.93).contains(&share), "{share}");
        // The 90th percentile is 130 µs: the margin stays near it, not at the latest.
        assert!((120_000..=140_000).contains(&mean), "{mean}");
        // A busy CPU wakes promptly: the margin shrinks back, spinning less.
        for _ in 0..200 {
            w.learn(15_000);
        }
        assert!(w.margin() < 30_000, "{}", w.margin());
        // A stall of the whole host moves it as any late wake-up does, not to the cap.
        let before = w.margin();
        w.learn(50_000_000);
        assert_eq!(
            w.margin(),
            before + WakeMargin::HITS_PER_MISS * WakeMargin::STEP
        );
        for _ in 0..30 {
            w.learn(15_000);
        }
        assert!(w.margin() < 30_000, "{}", w.margin());
    }

    #[test]
    fn rare_very_late_wake_ups_do_not_drag_the_margin_up() {
        // 95 in 100 wake-ups 20–40 µs late, the rest 200–400 µs (the host ran something
        // else): those frames are late whatever the margin, and spinning 300 µs before
        // every frame to save them would cost ten times the CPU. (The mean plus three
        // deviations, the margin before, averages about 125 µs on such wake-ups.)
        let mut rng = Rng::new(11);
        let mut w = WakeMargin::new();
        let mixed = |rng: &mut Rng| {
            if rng.next_u64() % 100 < 5 {
                200_000 + rng.next_u64() % 200_001
            } else {
                20_000 + rng.next_u64() % 20_001
            }
        };
        covered(&mut w, &mut rng, mixed, 1000);
        let (share, mean) = covered(&mut w, &mut rng, mixed, 10_000);
        assert!((0.87..=0.93).contains(&share), "{share}");
        // The 90th percentile is 39 µs.
        assert!(mean <= 45_000, "{mean}");
    }

    #[test]
    fn arrivals_wait_only_through_sleeps_that_end_before_they_can_be_due() {
        let (ms, us) = (1_000_000, 1_000);
        // The socket was seen empty at `since`.
        let since = 7 * ms;
        // 1 ms each way, 20 µs to send: a frame arriving from `since` on is due to be
        // written 0.98 ms later at the earliest; the thread must be up 0.1 ms before.
        let cost = 20 * us;
        assert!(arrivals_can_wait(since, since + 400 * us, ms, cost));
        assert!(arrivals_can_wait(since, since + 880 * us, ms, cost));
        assert!(!arrivals_can_wait(since, since + 881 * us, ms, cost));
        // A frame overdue already: the thread is not going to sleep at all.
        assert!(arrivals_can_wait(since, since - ms, ms, cost));
        // 5 ms ± 4.6 ms of jitter: the caller passes the least delay, 0.4 ms.
        let line = DelayLine::<()>::new(
            Duration::from_millis(5),
            Duration::from_micros(4_600),
            0.0,
            10,
            1,
        );
        let least = line.least_delay_ns();
        assert_eq!(least, 400 * us);
        assert!(arrivals_can_wait(since, since + 280 * us, least, cost));
        assert!(!arrivals_can_wait(since, since + 281 * us, least, cost));
        // A link without delay: every arrival is due at once.
        assert!(!arrivals_can_wait(since, since, 0, 0));
        assert!(!arrivals_can_wait(since, since, ARRIVAL_SLACK - 1, 0));
        // A longer delay: never through a sleep ending past the horizon (2 ms), so that
        // no frame is read older than that.
        for delay in [5 * ms, 50 * ms] {
            let last = since + ARRIVAL_HORIZON - ARRIVAL_SLACK;
            assert!(arrivals_can_wait(since, last, delay, cost));
            assert!(!arrivals_can_wait(since, last + 1, delay, cost));
        }
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn a_packet_leaves_after_the_delay_and_not_before() {
        let mut l = DelayLine::new(Duration::from_millis(10), Duration::ZERO, 0.0, 10, 1);
        assert_eq!(l.push(5 * MS, "a").0, Verdict::Queued(15 * MS));
        assert_eq!(l.push(6 * MS, "b").0, Verdict::Queued(16 * MS));
        assert_eq!(l.next_due(), Some(15 * MS));
        assert_eq!(l.pop_due(15 * MS - 1), None);
        assert_eq!(l.pop_due(15 * MS), Some((15 * MS, "a")));
        assert_eq!(l.pop_due(15 * MS), None);
        assert_eq!(l.pop_due(20 * MS), Some((16 * MS, "b")));
        assert!(l.is_empty());
    }

    #[test]
    fn the_limit_drops_and_says_so() {
        let mut l = DelayLine::new(Duration::from_millis(1), Duration::ZERO, 0.0, 2, 1);
        assert!(matches!(l.push(0, 1).0, Verdict::Queued(_)));
        assert!(matches!(l.push(0, 2).0, Verdict::Queued(_)));
        assert_eq!(l.push(0, 3), (Verdict::Full, Some(3)));
        assert_eq!(l.len(), 2);
    }

    #[test]
    fn jitter_stays_within_its_bounds_and_never_reorders() {
        let mut l = DelayLine::new(
            Duration::from_millis(10),
            Duration::from_millis(2),
            0.0,
            1 << 20,
            7,
        );
        // Packets 5 ms apart cannot meet: each gets its own draw from 8 … 12 ms.
        assert_eq!(l.least_delay_ns(), 8 * MS);
        let mut spread = (u64::MAX, 0);
        for i in 0..2_000u64 {
            let now = i * 5 * MS;
            let Verdict::Queued(due) = l.push(now, i).0 else {
                panic!("dropped")
            };
            assert!(
                (8 * MS..=12 * MS).contains(&(due - now)),
                "{i}: {}",
                due - now
            );
            spread = (spread.0.min(due - now), spread.1.max(due - now));
        }
        assert!(spread.0 < 8 * MS + MS / 20, "{spread:?}");
        assert!(spread.1 > 12 * MS - MS / 20, "{spread:?}");
        // Packets 0.1 ms apart would overtake each other under netem; here they keep
        // their order (each leaves no earlier than the one before), none leaves before
        // its own earliest time, and the price is a longer mean delay: most packets wait
        // behind a predecessor that drew a long one (documented in docs/net.md).
        let start = 10_000 * MS;
        let mut last = 0;
        let mut total = 0;
        for i in 0..10_000u64 {
            let now = start + i * MS / 10;
            let Verdict::Queued(due) = l.push(now, 2_000 + i).0 else {
                panic!("dropped")
            };
            assert!(due >= now + 8 * MS && due >= last, "{i}");
            last = due;
            total += due - now;
        }
        let mean = total / 10_000;
        assert!(mean > 11 * MS && mean <= 12 * MS, "{mean}");
    }

    #[test]
    fn random_loss_matches_the_configured_rate() {
        for (loss, seed) in [(0.01, 3), (0.05, 11), (0.2, 99)] {
            let mut l = DelayLine::new(Duration::ZERO, Duration::ZERO, loss, 1 << 20, seed);
            let n = 100_000;
            let lost = (0..n).filter(|&i| l.push(i, ()).0 == Verdict::Lost).count();
            let share = lost as f64 / n as f64;
            // Binomial standard deviation at n = 100 000 is under 0.13 %; allow 5 of them.
            let sd = (loss * (1.0 - loss) / n as f64).sqrt();
            assert!((share - loss).abs() < 5.0 * sd, "{loss}: {share}");
        }
        let mut none = DelayLine::new(Duration::ZERO, Duration::ZERO, 0.0, 10, 5);
        assert!((0..10).all(|i| none.push(i, ()).0 != Verdict::Lost));
    }

    #[test]
    fn the_line_holds_twice_what_the_link_has_in_flight() {
        let s = Shape {
            rate_bps: Some(1_000_000_000),
            delay: Duration::from_millis(50),
            queue_packets: Some(100),
            ..Shape::default()
        };
        // 1 Gbit/s × 50 ms = 6.25 MB = 4129 full packets; twice plus the queue.
        assert_eq!(line_limit(&s), 2 * 4129 + 100);
        assert_eq!(line_limit(&Shape::default()), 1000);
        let slow = Shape {
            rate_bps: Some(1_000_000),
            delay: Duration::from_millis(5),
            ..Shape::default()
        };
        // 1 Mbit/s × 5 ms is under one packet: 2 × 1 + the default queue of 1000.
        assert_eq!(line_limit(&slow), 1002);
    }
}
