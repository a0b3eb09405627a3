//! Trace-driven links (sans-IO): a link direction whose capacity follows a recorded
//! trace in mahimahi's delivery-opportunity format, replayed by the user-space emulator.
//!
//! The format (mahimahi's `mm-link`): one line per opportunity to deliver one packet of up
//! to [`OPPORTUNITY_BYTES`], each line the opportunity's time in milliseconds from the
//! start, in order; several opportunities in one millisecond are several lines with the
//! same time. At its end the trace starts again, shifted by its last time (its period).
//! A packet waits in the link's queue (drop-tail, by packets or bytes) for opportunities;
//! one larger than what an opportunity has left goes on in the next ones, as mahimahi
//! sends it, and an opportunity that finds the queue empty goes unused.
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

/// One direction of a trace-driven link: a drop-tail queue emptied at the trace's
/// opportunities. The trace's time 0 is the queue's time 0.
#[derive(Debug)]
pub struct TraceQueue<T> {
    trace: DeliveryTrace,
    limit: QueueLimit,
    /// The packets waiting, each with its size and the bytes it has still to be sent.
    queue: VecDeque<(T, u64, u64)>,
    bytes: u64,
    /// The next opportunity to use (an index over every repetition), and the bytes it
    /// has left.
    next: u64,
    left: u64,
    /// Opportunities that found the queue empty, in the time it has covered.
    unused: u64,
}

impl<T> TraceQueue<T> {
    pub fn new(trace: DeliveryTrace, limit: QueueLimit) -> Self {
        TraceQueue {
            trace,
            limit,
            queue: VecDeque::new(),
            bytes: 0,
            next: 0,
            left: OPPORTUNITY_BYTES,
            unused: 0,
        }
    }

    /// Offers `packet` of `bytes` (its IP length) at `now`: queued, or handed back when
    /// the queue holds its limit. Call [`TraceQueue::deliver`] up to `now` first, so
    /// that the opportunities before it are spent on what was waiting then.
    pub fn push(&mut self, now: u64, packet: T, bytes: u64) -> Result<(), T> {
        let full = match self.limit {
            QueueLimit::Packets(n) => self.queue.len() as u64 >= n,
            QueueLimit::Bytes(n) => self.bytes + bytes > n,
        };
        if full {
            return Err(packet);
        }
        if self.queue.is_empty() {
            // The opportunities that came while nothing waited went unused.
            let first = self.trace.first_from(now);
            if first > self.next {
                self.unused += first - self.next;
                self.next = first;
                self.left = OPPORTUNITY_BYTES;
            }
        }
        self.queue.push_back((packet, bytes, bytes.max(1)));
        self.bytes += bytes;
        Ok(())
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
            while self.left > 0 {
                let Some((_, _, remaining)) = self.queue.front_mut() else {
                    break;
                };
                if *remaining <= self.left {
                    self.left -= *remaining;
                    let (p, size, _) = self.queue.pop_front().expect("a front packet");
                    self.bytes -= size;
                    out(when, p);
                } else {
                    *remaining -= self.left;
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
}
