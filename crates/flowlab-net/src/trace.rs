//! Trace-driven links (sans-IO): a link direction whose capacity follows a recorded
//! trace in mahimahi's delivery-opportunity format, replayed by the user-space emulator.
//!
//! The format (mahimahi's `mm-link`): one line per opportunity to deliver one packet of up
//! to [`OPPORTUNITY_BYTES`], each line the opportunity's time in milliseconds from the
//! start, in order; several opportunities in one millisecond are several lines with the
//! same time. At its end the trace starts again, shifted by its last time (its period).
//! A packet waits in the link's queue (by packets or bytes) for opportunities; one larger
//! than what an opportunity has left goes on in the next ones, as mahimahi sends it, and
//! an opportunity that finds the queue empty goes unused. The queue drops as one of
//! mahimahi's does ([`QueuePolicy`]): at its tail or its head when full, or early, by
//! CoDel (RFC 8289) or PIE (RFC 8033).
//!
//! Times are nanoseconds on the caller's clock, so the model is tested without one.

use std::collections::VecDeque;
use std::sync::Arc;

/// Bytes one opportunity delivers: one full IP packet of a 1500-byte MTU.
pub const OPPORTUNITY_BYTES: u64 = 1500;
/// Most opportunities a trace may hold (mahimahi's published traces hold up to a few
/// million).
pub const MAX_OPPORTUNITIES: usize = 50_000_000;

/// Why a trace was refused: its 1-based line, and what is wrong there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", line.map(|l| format!("line {l}: ")).unwrap_or_default())]
pub struct TraceError {
    pub line: Option<usize>,
    pub message: String,
}

/// A delivery-opportunity trace: each opportunity's time in ms, and the period after
/// which it repeats (its last time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryTrace {
    ms: Arc<[u32]>,
}

impl DeliveryTrace {
    /// Reads a trace in mahimahi's format. Blank lines are skipped; anything else that
    /// is not a whole number of ms, a time before the line above it, a trace without an
    /// opportunity or whose last time is 0 (it would repeat with no time passing) is
    /// refused with its line.
    pub fn parse(text: &str) -> Result<DeliveryTrace, TraceError> {
        let mut ms: Vec<u32> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let t = line.trim();
            if t.is_empty() {
                continue;
            }
            let at = |message: String| TraceError {
                line: Some(i + 1),
                message,
            };
            let v: u32 = t.parse().map_err(|_| {
                at(format!(
                    "'{}' is not a time in whole milliseconds (one opportunity per line)",
                    t.escape_default()
                ))
            })?;
            if let Some(&before) = ms.last() {
                if v < before {
                    return Err(at(format!(
                        "{v} ms comes before the line above it ({before} ms): times must not go back"
                    )));
                }
            }
            if ms.len() == MAX_OPPORTUNITIES {
                return Err(at(format!("more than {MAX_OPPORTUNITIES} opportunities")));
            }
            ms.push(v);
        }
        match ms.last() {
            None => Err(TraceError {
                line: None,
                message: "no opportunity: a trace has a line per opportunity, its time in ms"
                    .into(),
            }),
            Some(0) => Err(TraceError {
                line: Some(text.lines().count()),
                message: "the last time is 0 ms: a trace repeats after its last time, which must be later than 0".into(),
            }),
            Some(_) => Ok(DeliveryTrace { ms: ms.into() }),
        }
    }

    /// How long before it repeats, ns.
    pub fn period_ns(&self) -> u64 {
        u64::from(*self.ms.last().unwrap_or(&1)) * 1_000_000
    }

    /// Opportunities in one period.
    pub fn len(&self) -> usize {
        self.ms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ms.is_empty()
    }

    /// The mean capacity over a period, bits per second (IP packets' bytes).
    pub fn mean_bps(&self) -> u64 {
        let bits = self.ms.len() as u128 * u128::from(OPPORTUNITY_BYTES) * 8;
        (bits * 1_000_000_000 / u128::from(self.period_ns())) as u64
    }

    /// The capacity over one period in bins of `bin_ms`: each bin's start (s) and the
    /// bits per second its opportunities carry (a graph of the trace).
    pub fn capacity(&self, bin_ms: u32) -> Vec<(f64, f64)> {
        let bin_ms = bin_ms.max(1);
        let period_ms = *self.ms.last().unwrap_or(&0);
        let bins = period_ms.div_ceil(bin_ms) as usize;
        let last = bins.max(1) - 1;
        let mut count = vec![0u64; last + 1];
        for &t in self.ms.iter() {
            // An opportunity at a bin's end time belongs to that bin (times count from 1).
            let i = (t.saturating_sub(1) / bin_ms) as usize;
            count[i.min(last)] += 1;
        }
        let bits_per_bin_to_bps = OPPORTUNITY_BYTES as f64 * 8.0 * 1000.0 / f64::from(bin_ms);
        count
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                (
                    (i as u64 * u64::from(bin_ms)) as f64 / 1000.0,
                    n as f64 * bits_per_bin_to_bps,
                )
            })
            .collect()
    }

    /// Opportunity `k` (counted from the start over every repetition): when it comes, ns.
    fn at(&self, k: u64) -> u64 {
        let n = self.ms.len() as u64;
        (k / n) * self.period_ns() + u64::from(self.ms[(k % n) as usize]) * 1_000_000
    }

    /// The first opportunity at `t` ns or later.
    fn first_from(&self, t: u64) -> u64 {
        let n = self.ms.len() as u64;
        let period = self.period_ns();
        let (round, within) = (t / period, t % period);
        let i = self
            .ms
            .partition_point(|&m| u64::from(m) * 1_000_000 < within) as u64;
        round * n + i
    }
}

/// A trace-driven queue's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueLimit {
    Packets(u64),
    Bytes(u64),
}

/// How a trace-driven queue drops, as mahimahi's queues do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueuePolicy {
    /// A packet that finds the queue full is dropped.
    DropTail,
    /// A packet that finds the queue full takes the place of the oldest, which is
    /// dropped.
    DropHead,
    /// CoDel (RFC 8289): a packet about to leave after waiting longer than `target_ns`,
    /// when the queue has not been below it for `interval_ns`, is dropped, and then one
    /// each interval / √count while that lasts.
    Codel { target_ns: u64, interval_ns: u64 },
    /// PIE (RFC 8033): a packet arriving is dropped with a probability steered every
    /// [`PIE_UPDATE_NS`] towards a queueing delay of `target_ns` (by the oldest packet's
    /// wait), none dropped for `max_burst_ns` after the queue was last short.
    Pie { target_ns: u64, max_burst_ns: u64 },
}

impl QueuePolicy {
    /// CoDel with RFC 8289's target (5 ms) and interval (100 ms), or `target`.
    pub fn codel(target_ns: Option<u64>) -> Self {
        QueuePolicy::Codel {
            target_ns: target_ns.unwrap_or(5_000_000),
            interval_ns: 100_000_000,
        }
    }

    /// PIE with RFC 8033's target (15 ms) and burst allowance (150 ms), or `target`.
    pub fn pie(target_ns: Option<u64>) -> Self {
        QueuePolicy::Pie {
            target_ns: target_ns.unwrap_or(15_000_000),
            max_burst_ns: 150_000_000,
        }
    }

    /// What `net show` says of it beside the queue's limit (nothing for drop-tail, what
    /// every other queue does).
    pub fn said(&self) -> Option<String> {
        let ms = |ns: u64| ns as f64 / 1e6;
        match *self {
            QueuePolicy::DropTail => None,
            QueuePolicy::DropHead => Some("drop-head".into()),
            QueuePolicy::Codel {
                target_ns,
                interval_ns,
            } => Some(format!(
                "CoDel (target {} ms, interval {} ms)",
                ms(target_ns),
                ms(interval_ns)
            )),
            QueuePolicy::Pie {
                target_ns,
                max_burst_ns,
            } => Some(format!(
                "PIE (target {} ms, burst {} ms)",
                ms(target_ns),
                ms(max_burst_ns)
            )),
        }
    }

    /// Its name as a topology file gives it.
    pub fn name(&self) -> &'static str {
        match self {
            QueuePolicy::DropTail => "droptail",
            QueuePolicy::DropHead => "drophead",
            QueuePolicy::Codel { .. } => "codel",
            QueuePolicy::Pie { .. } => "pie",
        }
    }
}

/// How often PIE steers its drop probability (RFC 8033's T_UPDATE).
pub const PIE_UPDATE_NS: u64 = 15_000_000;

/// CoDel's state (RFC 8289's names).
#[derive(Debug, Default)]
struct Codel {
    /// When the queue's delay, above target since, will have been so for an interval
    /// (0: not above target).
    first_above_time: u64,
    drop_next: u64,
    count: u64,
    lastcount: u64,
    dropping: bool,
}

/// PIE's state (RFC 8033's names).
#[derive(Debug, Default)]
struct Pie {
    drop_prob: f64,
    qdelay_old: u64,
    burst_allowance: u64,
    next_update: u64,
}

/// One direction of a trace-driven link: a queue emptied at the trace's opportunities,
/// dropping by its [`QueuePolicy`]. The trace's time 0 is the queue's time 0.
#[derive(Debug)]
pub struct TraceQueue<T> {
    trace: DeliveryTrace,
    limit: QueueLimit,
    policy: QueuePolicy,
    /// The packets waiting, each with its size, the bytes it has still to be sent, and
    /// when it came.
    queue: VecDeque<Waiting<T>>,
    bytes: u64,
    /// The next opportunity to use (an index over every repetition), and the bytes it
    /// has left.
    next: u64,
    left: u64,
    /// Opportunities that found the queue empty, in the time it has covered.
    unused: u64,
    /// Packets its policy dropped early (CoDel's, PIE's).
    early_drops: u64,
    codel: Codel,
    pie: Pie,
    rng: crate::emulator::Rng,
    /// What happened, in order, when it is recorded ([`TraceQueue::record`]).
    log: Option<Vec<LogEvent>>,
}

/// One event of a trace-driven queue, as mahimahi's `mm-link` logs them (times ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogEvent {
    /// A packet of `bytes` came (whether or not it was queued).
    Arrival { at: u64, bytes: u64 },
    /// An opportunity to deliver [`OPPORTUNITY_BYTES`] came (used or not).
    Opportunity { at: u64 },
    /// A packet of `bytes` that came at `came` was delivered.
    Departure { at: u64, bytes: u64, came: u64 },
    /// A packet of `bytes` was dropped (the queue full, or by its policy).
    Drop { at: u64, bytes: u64 },
}

impl LogEvent {
    /// Its line in mahimahi's log format, ms from the start: "T + BYTES", "T # 1500",
    /// "T - BYTES DELAY", "T d 1 BYTES".
    pub fn line(&self) -> String {
        let ms = |ns: u64| ns / 1_000_000;
        match *self {
            LogEvent::Arrival { at, bytes } => format!("{} + {bytes}", ms(at)),
            LogEvent::Opportunity { at } => format!("{} # {OPPORTUNITY_BYTES}", ms(at)),
            LogEvent::Departure { at, bytes, came } => {
                format!("{} - {bytes} {}", ms(at), ms(at).saturating_sub(ms(came)))
            }
            LogEvent::Drop { at, bytes } => format!("{} d 1 {bytes}", ms(at)),
        }
    }
}

/// A packet in a [`TraceQueue`].
#[derive(Debug)]
struct Waiting<T> {
    packet: T,
    size: u64,
    /// Bytes still to be sent (less than `size` once an opportunity sent part of it).
    remaining: u64,
    came: u64,
}

impl<T> TraceQueue<T> {
    /// A drop-tail queue.
    pub fn new(trace: DeliveryTrace, limit: QueueLimit) -> Self {
        Self::with_policy(trace, limit, QueuePolicy::DropTail, 1)
    }

    /// A queue dropping by `policy` (PIE's random drops drawn from `seed`).
    pub fn with_policy(
        trace: DeliveryTrace,
        limit: QueueLimit,
        policy: QueuePolicy,
        seed: u64,
    ) -> Self {
        TraceQueue {
            trace,
            limit,
            policy,
            queue: VecDeque::new(),
            bytes: 0,
            next: 0,
            left: OPPORTUNITY_BYTES,
            unused: 0,
            early_drops: 0,
            codel: Codel::default(),
            pie: Pie::default(),
            rng: crate::emulator::Rng::new(seed),
            log: None,
        }
    }

    /// Records its events from now on ([`TraceQueue::take_log`]).
    pub fn record(&mut self) {
        self.log.get_or_insert_with(Vec::new);
    }

    /// The events recorded since the last call.
    pub fn take_log(&mut self) -> Vec<LogEvent> {
        self.log.as_mut().map(std::mem::take).unwrap_or_default()
    }

    fn note(&mut self, e: LogEvent) {
        if let Some(log) = &mut self.log {
            log.push(e);
        }
    }

    /// Counts the opportunities before `now` that found the queue empty as unused (an
    /// idle queue's are otherwise counted when the next packet comes): for counts and
    /// logs that keep up with the time.
    pub fn idle_until(&mut self, now: u64) {
        if self.queue.is_empty() {
            self.skip_to(now);
        }
    }

    /// The queue being empty, the opportunities before `now` go unused.
    fn skip_to(&mut self, now: u64) {
        let first = self.trace.first_from(now);
        if first > self.next {
            if self.log.is_some() {
                for k in self.next..first {
                    let at = self.trace.at(k);
                    self.note(LogEvent::Opportunity { at });
                }
            }
            self.unused += first - self.next;
            self.next = first;
            self.left = OPPORTUNITY_BYTES;
        }
    }

    fn full_with(&self, bytes: u64) -> bool {
        match self.limit {
            QueueLimit::Packets(n) => self.queue.len() as u64 >= n,
            QueueLimit::Bytes(n) => self.bytes + bytes > n,
        }
    }

    /// Offers `packet` of `bytes` (its IP length) at `now`: queued, or handed back when
    /// it is dropped — the queue being full (under drop-head, the oldest packet is
    /// handed back and this one queued), or by PIE's chance. Call
    /// [`TraceQueue::deliver`] up to `now` first, so that the opportunities before it
    /// are spent on what was waiting then.
    pub fn push(&mut self, now: u64, packet: T, bytes: u64) -> Result<(), T> {
        if self.queue.is_empty() {
            // The opportunities that came while nothing waited went unused.
            self.skip_to(now);
        }
        self.note(LogEvent::Arrival { at: now, bytes });
        if let QueuePolicy::Pie { .. } = self.policy {
            self.pie_update(now);
            if self.pie_drops() {
                self.early_drops += 1;
                self.note(LogEvent::Drop { at: now, bytes });
                return Err(packet);
            }
        }
        let mut evicted = None;
        if self.full_with(bytes) {
            if self.policy != QueuePolicy::DropHead {
                self.note(LogEvent::Drop { at: now, bytes });
                return Err(packet);
            }
            // The oldest packets go until this one fits (one, but by bytes a large
            // packet may need more than one small one's room); one part-sent stays.
            while self.full_with(bytes) {
                let sending = self.queue.front().is_some_and(|w| w.remaining < w.size);
                let at = usize::from(sending);
                let Some(w) = self.queue.remove(at) else {
                    return Err(packet);
                };
                self.bytes -= w.size;
                self.note(LogEvent::Drop {
                    at: now,
                    bytes: w.size,
                });
                // The first one evicted is handed back; any others are dropped here.
                if evicted.is_none() {
                    evicted = Some(w.packet);
                } else {
                    self.early_drops += 1;
                }
            }
        }
        self.queue.push_back(Waiting {
            packet,
            size: bytes,
            remaining: bytes.max(1),
            came: now,
        });
        self.bytes += bytes;
        evicted.map_or(Ok(()), Err)
    }

    /// Whether PIE drops a packet arriving now (RFC 8033's drop_early).
    fn pie_drops(&mut self) -> bool {
        let QueuePolicy::Pie { target_ns, .. } = self.policy else {
            return false;
        };
        let pie = &self.pie;
        if pie.burst_allowance > 0
            || (pie.qdelay_old < target_ns / 2 && pie.drop_prob < 0.2)
            || self.bytes < 2 * OPPORTUNITY_BYTES
        {
            return false;
        }
        let draw = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        draw < pie.drop_prob
    }

    /// Brings PIE's drop probability up to `now`: every [`PIE_UPDATE_NS`], a step
    /// towards the target by the oldest packet's wait (RFC 8033's calculate_drop_prob,
    /// its queueing delay taken from timestamps).
    fn pie_update(&mut self, now: u64) {
        let QueuePolicy::Pie {
            target_ns,
            max_burst_ns,
        } = self.policy
        else {
            return;
        };
        if self.pie.next_update == 0 {
            self.pie.next_update = now + PIE_UPDATE_NS;
            self.pie.burst_allowance = max_burst_ns;
            return;
        }
        while now >= self.pie.next_update {
            let at = self.pie.next_update;
            let qdelay = self.queue.front().map_or(0, |w| at.saturating_sub(w.came));
            let pie = &mut self.pie;
            let s = 1e-9;
            let mut delta = 0.125 * (qdelay as f64 - target_ns as f64) * s
                + 1.25 * (qdelay as f64 - pie.qdelay_old as f64) * s;
            // Small probabilities move in small steps (RFC 8033, 4.2).
            let p = pie.drop_prob;
            delta /= match p {
                p if p < 0.000_001 => 2048.0,
                p if p < 0.000_01 => 512.0,
                p if p < 0.000_1 => 128.0,
                p if p < 0.001 => 32.0,
                p if p < 0.01 => 8.0,
                p if p < 0.1 => 2.0,
                _ => 1.0,
            };
            pie.drop_prob = (pie.drop_prob + delta).clamp(0.0, 1.0);
            if qdelay == 0 && pie.qdelay_old == 0 {
                pie.drop_prob *= 0.98;
            }
            pie.burst_allowance = pie.burst_allowance.saturating_sub(PIE_UPDATE_NS);
            if pie.drop_prob == 0.0 && qdelay < target_ns / 2 && pie.qdelay_old < target_ns / 2 {
                pie.burst_allowance = max_burst_ns;
            }
            pie.qdelay_old = qdelay;
            pie.next_update += PIE_UPDATE_NS;
        }
    }

    /// Whether CoDel drops the head packet, about to begin leaving at `now` (RFC 8289's
    /// dequeue, its drops at the head): the control law spaces the drops interval /
    /// √count apart while the wait stays above target.
    fn codel_drops(&mut self, now: u64) -> bool {
        let QueuePolicy::Codel {
            target_ns,
            interval_ns,
        } = self.policy
        else {
            return false;
        };
        let Some(head) = self.queue.front() else {
            return false;
        };
        let sojourn = now.saturating_sub(head.came);
        // What would be left behind it: under a packet's worth, the queue is short.
        let behind = self.bytes - head.size;
        let c = &mut self.codel;
        let ok_to_drop = if sojourn < target_ns || behind <= OPPORTUNITY_BYTES {
            c.first_above_time = 0;
            false
        } else if c.first_above_time == 0 {
            c.first_above_time = now + interval_ns;
            false
        } else {
            now >= c.first_above_time
        };
        let law =
            |t: u64, count: u64| t + (interval_ns as f64 / (count.max(1) as f64).sqrt()) as u64;
        if c.dropping {
            if !ok_to_drop {
                c.dropping = false;
                return false;
            }
            if now >= c.drop_next {
                c.count += 1;
                c.drop_next = law(c.drop_next, c.count);
                return true;
            }
            false
        } else if ok_to_drop {
            c.dropping = true;
            let delta = c.count.saturating_sub(c.lastcount);
            c.count = if delta > 1 && now.saturating_sub(c.drop_next) < 16 * interval_ns {
                delta
            } else {
                1
            };
            c.drop_next = law(now, c.count);
            c.lastcount = c.count;
            true
        } else {
            false
        }
    }

    /// Packets its policy dropped early so far (CoDel's, PIE's; and drop-head's second
    /// and later evictions for one arrival).
    pub fn early_drops(&self) -> u64 {
        self.early_drops
    }

    /// Its policy.
    pub fn policy(&self) -> QueuePolicy {
        self.policy
    }

    /// When the next waiting packet (if any) can go out at the earliest: the next
    /// opportunity.
    pub fn next_opportunity(&self) -> Option<u64> {
        (!self.queue.is_empty()).then(|| self.trace.at(self.next))
    }

    /// Hands `out` each packet the opportunities up to `upto` deliver, with the time of
    /// the opportunity that sent its last byte.
    pub fn deliver(&mut self, upto: u64, out: &mut impl FnMut(u64, T)) {
        while !self.queue.is_empty() {
            let when = self.trace.at(self.next);
            if when > upto {
                return;
            }
            self.note(LogEvent::Opportunity { at: when });
            while self.left > 0 {
                let starts = self.queue.front().is_some_and(|w| w.remaining >= w.size);
                if starts && self.codel_drops(when) {
                    // Dropped as it was to begin leaving: the opportunity goes on to the
                    // next.
                    let w = self.queue.pop_front().expect("a front packet");
                    self.bytes -= w.size;
                    self.early_drops += 1;
                    self.note(LogEvent::Drop {
                        at: when,
                        bytes: w.size,
                    });
                    continue;
                }
                let Some(w) = self.queue.front_mut() else {
                    break;
                };
                if w.remaining <= self.left {
                    self.left -= w.remaining;
                    let w = self.queue.pop_front().expect("a front packet");
                    self.bytes -= w.size;
                    self.note(LogEvent::Departure {
                        at: when,
                        bytes: w.size,
                        came: w.came,
                    });
                    out(when, w.packet);
                } else {
                    w.remaining -= self.left;
                    self.left = 0;
                }
            }
            if self.queue.is_empty() && self.left > 0 {
                // Its rest goes unused; the next packet starts on a new opportunity.
                self.unused += 1;
            }
            self.next += 1;
            self.left = OPPORTUNITY_BYTES;
        }
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Opportunities unused so far (the queue was empty, or emptied part-way).
    pub fn unused(&self) -> u64 {
        self.unused
    }
}

/// A trace-driven link's log (mahimahi's format, as `mm-link` and flowlab's emulator
/// write it) binned for graphs, as mahimahi's `mm-throughput-graph` and `mm-delay-graph`
/// read it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LinkLog {
    /// Per bin of the time: its start (s from the first event) and the bits per second
    /// of opportunities (capacity), of packets that came (ingress), and of packets
    /// delivered (throughput).
    pub capacity: Vec<(f64, f64)>,
    pub ingress: Vec<(f64, f64)>,
    pub throughput: Vec<(f64, f64)>,
    /// Each delivered packet: when it left (s) and how long it waited (ms).
    pub delays: Vec<(f64, f64)>,
    /// Packets dropped.
    pub drops: u64,
    /// Over the whole log: the mean capacity and throughput, bits per second, and the
    /// 95th percentile of the packets' waits, ms.
    pub mean_capacity_bps: f64,
    pub mean_throughput_bps: f64,
    pub p95_delay_ms: Option<f64>,
}

impl LinkLog {
    /// Reads a log in bins of `bin_ms`. Lines starting with `#` are comments (a `# base
    /// timestamp: T` is taken off every time); every other line is `T + BYTES`, `T #
    /// BYTES`, `T - BYTES DELAY` or `T d COUNT BYTES`, times in ms. A line that is not is
    /// refused with its number.
    pub fn parse(text: &str, bin_ms: u64) -> Result<LinkLog, TraceError> {
        let bin_ms = bin_ms.max(1);
        let mut base = 0u64;
        // (ms, kind, bytes, delay)
        let mut events: Vec<(u64, char, u64, u64)> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let t = line.trim();
            let at = |message: String| TraceError {
                line: Some(i + 1),
                message,
            };
            if let Some(comment) = t.strip_prefix('#') {
                if let Some(b) = comment.trim().strip_prefix("base timestamp:") {
                    base = b
                        .trim()
                        .parse()
                        .map_err(|_| at(format!("'{}' is not a base timestamp in ms", b.trim())))?;
                }
                continue;
            }
            if t.is_empty() {
                continue;
            }
            let fields: Vec<&str> = t.split_whitespace().collect();
            let number = |k: usize, what: &str| -> Result<u64, TraceError> {
                let f = fields.get(k).ok_or_else(|| {
                    at(format!("'{t}': {what} missing (T + BYTES, T # BYTES, T - BYTES DELAY or T d COUNT BYTES)"))
                })?;
                f.parse()
                    .map_err(|_| at(format!("'{f}' is not {what}, a whole number")))
            };
            let ms = number(0, "a time in ms")?;
            let kind = fields.get(1).copied().unwrap_or("");
            let (bytes, delay) = match kind {
                "+" | "#" => (number(2, "a byte count")?, 0),
                "-" => (number(2, "a byte count")?, number(3, "a delay in ms")?),
                "d" => (number(3, "a byte count")?, 0),
                other => {
                    return Err(at(format!(
                        "'{other}' is not an event (+ arrival, # opportunity, - departure, d drop)"
                    )));
                }
            };
            let ms = ms
                .checked_sub(base)
                .ok_or_else(|| at(format!("{ms} ms is before the base timestamp ({base} ms)")))?;
            events.push((ms, kind.chars().next().unwrap_or('?'), bytes, delay));
        }
        let (Some(first), Some(last)) = (
            events.iter().map(|e| e.0).min(),
            events.iter().map(|e| e.0).max(),
        ) else {
            return Err(TraceError {
                line: None,
                message: "no event: a log has lines T + BYTES, T # BYTES, T - BYTES DELAY".into(),
            });
        };
        let bins = ((last - first) / bin_ms + 1) as usize;
        let mut sums = [vec![0u64; bins], vec![0u64; bins], vec![0u64; bins]];
        let mut out = LinkLog::default();
        let mut totals = [0u64; 3];
        for &(ms, kind, bytes, delay) in &events {
            let bin = ((ms - first) / bin_ms) as usize;
            let which = match kind {
                '#' => 0,
                '+' => 1,
                '-' => {
                    out.delays
                        .push(((ms - first) as f64 / 1000.0, delay as f64));
                    2
                }
                _ => {
                    out.drops += 1;
                    continue;
                }
            };
            sums[which][bin] += bytes * 8;
            totals[which] += bytes * 8;
        }
        let per_second = 1000.0 / bin_ms as f64;
        let series = |v: &[u64]| -> Vec<(f64, f64)> {
            v.iter()
                .enumerate()
                .map(|(i, &bits)| {
                    (
                        (i as u64 * bin_ms) as f64 / 1000.0,
                        bits as f64 * per_second,
                    )
                })
                .collect()
        };
        out.capacity = series(&sums[0]);
        out.ingress = series(&sums[1]);
        out.throughput = series(&sums[2]);
        let seconds = ((last - first).max(1)) as f64 / 1000.0;
        out.mean_capacity_bps = totals[0] as f64 / seconds;
        out.mean_throughput_bps = totals[2] as f64 / seconds;
        let mut waits: Vec<f64> = out.delays.iter().map(|d| d.1).collect();
        waits.sort_by(f64::total_cmp);
        out.p95_delay_ms = (!waits.is_empty())
            .then(|| waits[((waits.len() as f64 * 0.95) as usize).min(waits.len() - 1)]);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn delivered(q: &mut TraceQueue<u32>, upto: u64) -> Vec<(u64, u32)> {
        let mut out = Vec::new();
        q.deliver(upto, &mut |t, p| out.push((t, p)));
        out
    }

    #[test]
    fn a_trace_is_read_with_its_period_and_mean_rate() {
        let t = DeliveryTrace::parse("1\n1\n\n2\n4\n").unwrap();
        assert_eq!(t.len(), 4);
        assert_eq!(t.period_ns(), 4 * MS);
        // 4 opportunities of 1500 bytes every 4 ms: 12 Mbit/s.
        assert_eq!(t.mean_bps(), 12_000_000);
        // Round after round, shifted by the period.
        let at: Vec<u64> = (0..7).map(|k| t.at(k) / MS).collect();
        assert_eq!(at, [1, 1, 2, 4, 5, 5, 6]);
        assert_eq!(t.first_from(0), 0);
        assert_eq!(t.first_from(MS + 1), 2);
        assert_eq!(t.first_from(4 * MS + 1), 4);
        for (text, line, says) in [
            ("1\nx\n", Some(2), "'x' is not a time in whole milliseconds"),
            (
                "5\n3\n",
                Some(2),
                "3 ms comes before the line above it (5 ms)",
            ),
            ("-1\n", Some(1), "'-1' is not a time"),
            ("1.5\n", Some(1), "'1.5' is not a time"),
            ("\n\n", None, "no opportunity"),
            ("0\n0\n", Some(2), "the last time is 0 ms"),
        ] {
            let e = DeliveryTrace::parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.message.contains(says), "{text:?}: {e}");
        }
    }

    #[test]
    fn the_capacity_is_binned_over_a_period() {
        // 2 ms at 2 opportunities a ms (24 Mbit/s), then 2 ms with none.
        let t = DeliveryTrace::parse("1\n1\n2\n2\n4\n").unwrap();
        assert_eq!(
            t.capacity(2),
            [(0.0, 24_000_000.0), (0.002, 6_000_000.0)],
            "the 4 ms opportunity closes the period in its last bin"
        );
        let steady =
            DeliveryTrace::parse(&(1..=1000).map(|i| format!("{i}\n")).collect::<String>())
                .unwrap();
        let bins = steady.capacity(100);
        assert_eq!(bins.len(), 10);
        assert!(bins.iter().all(|&(_, bps)| bps == 12_000_000.0), "{bins:?}");
    }

    #[test]
    fn packets_leave_at_opportunities_and_large_ones_span_several() {
        // One opportunity a millisecond.
        let trace = DeliveryTrace::parse("1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n").unwrap();
        let mut q = TraceQueue::new(trace, QueueLimit::Packets(10));
        // Two 500-byte packets share the first opportunity; a 2000-byte one needs the
        // rest of it and all of the next.
        q.push(0, 0, 500).unwrap();
        q.push(0, 1, 500).unwrap();
        q.push(0, 2, 2000).unwrap();
        q.push(0, 3, 1000).unwrap();
        assert_eq!(q.next_opportunity(), Some(MS));
        assert_eq!(delivered(&mut q, MS), [(MS, 0), (MS, 1)]);
        assert_eq!(delivered(&mut q, 2 * MS), [(2 * MS, 2)]);
        // Packet 3 has 1000 bytes; opportunity 3 sends it with 500 to spare, unused.
        assert_eq!(delivered(&mut q, 5 * MS), [(3 * MS, 3)]);
        assert_eq!(q.unused(), 1);
        assert!(q.is_empty() && q.next_opportunity().is_none());
        // Nothing waits from 3 ms to 7.5 ms: those opportunities go unused, and the next
        // packet leaves at 8 ms.
        q.push(7 * MS + MS / 2, 4, 1500).unwrap();
        assert_eq!(q.unused(), 1 + 4);
        assert_eq!(delivered(&mut q, 20 * MS), [(8 * MS, 4)]);
    }

    #[test]
    fn the_queue_drops_at_its_tail_by_packets_or_bytes() {
        let trace = DeliveryTrace::parse("1\n").unwrap();
        let mut q = TraceQueue::new(trace.clone(), QueueLimit::Packets(2));
        assert!(q.push(0, 1, 1500).is_ok());
        assert!(q.push(0, 2, 1500).is_ok());
        assert_eq!(q.push(0, 3, 1500), Err(3));
        let mut q = TraceQueue::new(trace, QueueLimit::Bytes(3000));
        assert!(q.push(0, 1, 1500).is_ok());
        assert!(q.push(0, 2, 1400).is_ok());
        assert_eq!(q.push(0, 3, 200), Err(3));
        assert!(q.push(0, 4, 100).is_ok());
        // Delivered, the bytes free room again.
        assert_eq!(delivered(&mut q, MS), [(MS, 1)]);
        assert!(q.push(MS, 5, 1500).is_ok());
    }

    /// A steady trace's capacity: over a long busy stretch, every opportunity is used,
    /// and the bytes delivered are the opportunities' bytes.
    #[test]
    fn a_busy_queue_uses_every_opportunity() {
        let trace = DeliveryTrace::parse("1\n1\n2\n").unwrap();
        let mut q = TraceQueue::new(trace, QueueLimit::Packets(100_000));
        for p in 0..30_000u32 {
            q.push(0, p, 1500).unwrap();
        }
        let out = delivered(&mut q, 10_000 * MS);
        // 3 opportunities per 2 ms over 10 s: 15 000 packets of 1500 bytes.
        assert_eq!(out.len(), 15_000);
        assert_eq!(q.unused(), 0);
        assert_eq!(out.last().map(|o| o.0), Some(10_000 * MS));
    }

    fn every_ms(ms: u32) -> DeliveryTrace {
        DeliveryTrace::parse(&(1..=ms).map(|i| format!("{i}\n")).collect::<String>()).unwrap()
    }

    #[test]
    fn drop_head_makes_room_for_the_newest_by_dropping_the_oldest() {
        let mut q = TraceQueue::with_policy(
            every_ms(10),
            QueueLimit::Packets(2),
            QueuePolicy::DropHead,
            1,
        );
        q.push(0, 1, 1500).unwrap();
        q.push(0, 2, 1500).unwrap();
        assert_eq!(q.push(0, 3, 1500), Err(1));
        assert_eq!(delivered(&mut q, 2 * MS), [(MS, 2), (2 * MS, 3)]);
        // By bytes, as many of the oldest as the newest needs; a packet part-sent stays.
        let mut q = TraceQueue::with_policy(
            every_ms(10),
            QueueLimit::Bytes(3000),
            QueuePolicy::DropHead,
            1,
        );
        q.push(0, 1, 2000).unwrap();
        q.push(0, 2, 500).unwrap();
        q.push(0, 3, 500).unwrap();
        // At 1 ms packet 1 has 500 bytes left to send.
        assert_eq!(delivered(&mut q, MS), []);
        assert_eq!(q.push(MS, 4, 1000), Err(2));
        assert_eq!(q.early_drops(), 1, "packet 3 went too");
        assert_eq!(delivered(&mut q, 3 * MS), [(2 * MS, 1), (2 * MS, 4)]);
    }

    /// A queue kept 20 packets long (20 ms at one opportunity a millisecond, one packet
    /// arriving each): CoDel drops a packet once the wait has been above its target for
    /// an interval, the next interval / √2 later, then interval / √3, and so on until the
    /// wait is back under the target.
    #[test]
    fn codel_drops_once_the_wait_stays_above_target_for_an_interval() {
        let mut q = TraceQueue::with_policy(
            every_ms(1000),
            QueueLimit::Packets(1000),
            QueuePolicy::codel(None),
            1,
        );
        for p in 0..20 {
            q.push(0, p, 1500).unwrap();
        }
        let mut out = Vec::new();
        for ms in 1..=2000u32 {
            let now = u64::from(ms) * MS;
            q.deliver(now, &mut |_, p| out.push(p));
            q.push(now, 19 + ms, 1500).unwrap();
        }
        let last = *out.last().expect("delivered");
        let gone: Vec<u32> = (0..last).filter(|p| !out.contains(p)).collect();
        assert_eq!(gone.len() as u64, q.early_drops());
        // Packet p begins leaving at p + 1 ms, less one for each drop before it. The
        // wait first reaches the target at 5 ms (the 5th packet's): the first drop is an
        // interval later, the next ones 100, 70.7 and 57.7 ms apart (±1: one
        // opportunity a millisecond).
        let at: Vec<i64> = gone
            .iter()
            .enumerate()
            .map(|(k, &p)| i64::from(p) + 1 - k as i64)
            .collect();
        eprintln!("CoDel: drops at {at:?} ms, {} waiting at the end", q.len());
        assert!((at[0] - 105).abs() <= 1, "{at:?}");
        for (k, want) in [(1, 100), (2, 71), (3, 58)] {
            assert!((at[k] - at[k - 1] - want).abs() <= 1, "{at:?}");
        }
        // Then the wait is back near the target: about 5 packets waiting.
        assert!(q.len() <= 6, "{} waiting, drops at {at:?}", q.len());
    }

    /// Twice what a steady trace carries, offered for 20 s: PIE drops about half of it,
    /// early, and holds the wait near its 15 ms target where drop-tail would fill the
    /// queue (10 s of it).
    #[test]
    fn pie_holds_the_wait_near_its_target() {
        let mut q = TraceQueue::with_policy(
            every_ms(1000),
            QueueLimit::Packets(10_000),
            QueuePolicy::pie(None),
            7,
        );
        let mut waits = Vec::new();
        let mut came = std::collections::HashMap::new();
        for ms in 0..20_000u64 {
            let now = ms * MS;
            q.deliver(now, &mut |t, p| {
                if t >= 15_000 * MS {
                    waits.push(t - came[&p]);
                }
            });
            for k in 0..2 {
                let p = ms * 2 + k;
                came.insert(p, now);
                let _ = q.push(now, p, 1500);
            }
        }
        waits.sort_unstable();
        let median = waits[waits.len() / 2] as f64 / 1e6;
        eprintln!(
            "PIE: median wait {median} ms, {} dropped early",
            q.early_drops()
        );
        assert!((10.0..=25.0).contains(&median), "median wait {median} ms");
        // 40 000 offered to 20 000 opportunities: the rest dropped early, none for want
        // of room (the queue holds 10 000).
        assert!(q.early_drops() >= 19_000, "{}", q.early_drops());
    }

    /// The events a queue records are mahimahi's log lines, and read back they give its
    /// capacity, throughput and waits.
    #[test]
    fn a_recorded_queue_writes_mahimahis_log_and_reads_it_back() {
        // An opportunity every ms; two packets at 0 ms, one 1500-byte packet too many for
        // a queue of 2, then nothing until 5 ms.
        let mut q = TraceQueue::with_policy(
            every_ms(10),
            QueueLimit::Packets(2),
            QueuePolicy::DropTail,
            1,
        );
        q.record();
        q.push(0, 1, 1500).unwrap();
        q.push(0, 2, 1500).unwrap();
        assert_eq!(q.push(0, 3, 1500), Err(3));
        let _ = delivered(&mut q, 2 * MS);
        q.idle_until(5 * MS + 1);
        let lines: Vec<String> = q.take_log().iter().map(LogEvent::line).collect();
        assert_eq!(
            lines,
            [
                "0 + 1500",
                "0 + 1500",
                "0 + 1500",
                "0 d 1 1500",
                "1 # 1500",
                "1 - 1500 1",
                "2 # 1500",
                "2 - 1500 2",
                "3 # 1500",
                "4 # 1500",
                "5 # 1500",
            ]
        );
        assert_eq!(q.unused(), 3);
        let text = format!(
            "# base timestamp: 100\n{}\n",
            lines
                .iter()
                .map(|l| {
                    let (t, rest) = l.split_once(' ').unwrap();
                    format!("{} {rest}", t.parse::<u64>().unwrap() + 100)
                })
                .collect::<Vec<_>>()
                .join("\n")
        );
        let log = LinkLog::parse(&text, 1).unwrap();
        assert_eq!(log.drops, 1);
        assert_eq!(log.delays, [(0.001, 1.0), (0.002, 2.0)]);
        // Five opportunities over 5 ms of log: 12 Mbit/s; two packets delivered.
        assert!(
            (log.mean_capacity_bps - 12e6).abs() < 1.0,
            "{}",
            log.mean_capacity_bps
        );
        assert!(
            (log.mean_throughput_bps - 4.8e6).abs() < 1.0,
            "{}",
            log.mean_throughput_bps
        );
        assert_eq!(log.capacity[1], (0.001, 12e6));
        assert_eq!(log.p95_delay_ms, Some(2.0));
        for (bad, line, says) in [
            ("1 + x\n", 1, "'x' is not a byte count"),
            ("1 * 1500\n", 1, "'*' is not an event"),
            (
                "# base timestamp: 5\n1 + 1500\n",
                2,
                "before the base timestamp",
            ),
            ("1 - 1500\n", 1, "a delay in ms missing"),
        ] {
            let e = LinkLog::parse(bad, 100).unwrap_err();
            assert_eq!(e.line, Some(line), "{bad:?}: {e}");
            assert!(e.message.contains(says), "{bad:?}: {e}");
        }
    }
}
