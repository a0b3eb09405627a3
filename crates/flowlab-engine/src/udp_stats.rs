//! What a UDP receiver counts, computed from the datagrams it sees (sans-IO).
//!
//! - **packets**: datagrams received, duplicates included.
//! - **lost**: sequence numbers never received. A gap counts as lost when it is seen; a
//!   datagram that fills part of a gap later is *out of order* and is taken off `lost`
//!   (iperf3's rule).
//! - **duplicates**: a sequence number received again. iperf3 counts these as
//!   out-of-order and takes them off `lost`, which can push loss below zero; flowlab
//!   remembers the last [`WINDOW`] sequence numbers and counts them apart.
//! - **jitter**: RFC 3550 §6.4.1 on the unique datagrams, in arrival order:
//!   `D = |transit_i − transit_{i−1}|`, `J += (D − J) / 16`, with transit = arrival time
//!   minus the sender's timestamp (the clocks need not agree: only differences count).
//! - **unique_bytes**: bytes of first copies — the "integrity" numerator.
//! - **foreign**: datagrams that cannot belong to the stream, counted apart and changing
//!   nothing else: longer than the stream's datagrams (a last datagram may be shorter
//!   when the test ends at a byte count), sequence number 0
//!   (streams start at 1), a sequence number [`WINDOW`] or more behind the highest one
//!   (it cannot be told from a replay), or one further ahead than the sender could have
//!   got since the previous datagram arrived ([`WINDOW`] plus [`MAX_RATE_PER_US`] per
//!   microsecond). One forged datagram with a huge sequence number would otherwise
//!   count billions of datagrams lost.

/// How many sequence numbers behind the highest one duplicates are recognised.
pub const WINDOW: u64 = 1 << 16;

/// The most datagrams per microsecond any sender is credited with when judging how far
/// ahead a sequence number may jump: 50 million a second, over ten times what a 100
/// Gbit/s link carries in 1460-byte datagrams.
pub const MAX_RATE_PER_US: u64 = 50;

/// What a receiver made of one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Counted: new, late or filling a gap.
    Counted,
    /// A copy of a datagram already counted.
    Duplicate,
    /// Cannot belong to the stream (see the module docs); changed nothing but `foreign`.
    Foreign,
}

/// Running counters of one UDP receiver: the counts, plus what it takes to keep them.
#[derive(Debug, Clone)]
pub struct UdpReceiverStats {
    counts: UdpCounts,
    prev_transit: Option<i64>,
    /// Bit i of `seen[(seq % WINDOW) / 64]` is set when `seq` was received.
    seen: Vec<u64>,
    /// No datagram of the stream is longer.
    datagram_len: usize,
    /// When the last datagram that was not foreign arrived, µs.
    last_arrival_us: u64,
}

impl UdpReceiverStats {
    /// Counters for a stream whose datagrams are at most `datagram_len` bytes long.
    pub fn new(datagram_len: usize) -> Self {
        UdpReceiverStats {
            counts: UdpCounts::default(),
            prev_transit: None,
            seen: vec![0; (WINDOW / 64) as usize],
            datagram_len,
            last_arrival_us: 0,
        }
    }

    /// Whether a datagram can belong to the stream (see the module docs).
    fn is_foreign(&self, seq: u64, len: usize, arrival_us: u64) -> bool {
        let highest = self.counts.highest_seq;
        let since = arrival_us.saturating_sub(self.last_arrival_us);
        let reach = WINDOW.saturating_add(since.saturating_mul(MAX_RATE_PER_US));
        len > self.datagram_len
            || seq == 0
            || (seq <= highest && highest - seq >= WINDOW)
            || (seq > highest && seq - highest > reach)
    }

    /// Accounts one datagram of `len` bytes with sequence `seq`, stamped `sent_us` by the
    /// sender and received at `arrival_us` by this side's clock.
    pub fn on_datagram(&mut self, seq: u64, len: usize, sent_us: u64, arrival_us: u64) -> Verdict {
        if self.is_foreign(seq, len, arrival_us) {
            self.counts.foreign += 1;
            return Verdict::Foreign;
        }
        self.last_arrival_us = arrival_us;
        let c = &mut self.counts;
        c.packets += 1;
        c.bytes += len as u64;
        if seq > c.highest_seq {
            // Clear the bits of the sequence numbers the window slides over.
            let start = c.highest_seq + 1;
            c.lost += seq - start;
            let jump = seq - c.highest_seq;
            c.highest_seq = seq;
            if jump >= WINDOW {
                self.seen.iter_mut().for_each(|w| *w = 0);
            } else {
                clear_seen(&mut self.seen, start, seq);
            }
        } else if is_seen(&self.seen, seq) {
            c.duplicates += 1;
            return Verdict::Duplicate;
        } else {
            c.out_of_order += 1;
            c.lost = c.lost.saturating_sub(1);
        }
        set_seen(&mut self.seen, seq, true);
        let c = &mut self.counts;
        c.unique_bytes += len as u64;
        let transit = arrival_us as i64 - sent_us as i64;
        if let Some(prev) = self.prev_transit {
            let d = (transit - prev).unsigned_abs() as f64;
            c.jitter_us += (d - c.jitter_us) / 16.0;
        }
        self.prev_transit = Some(transit);
        Verdict::Counted
    }

    /// The counters now, for snapshots.
    pub fn counts(&self) -> UdpCounts {
        self.counts
    }
}

fn is_seen(seen: &[u64], seq: u64) -> bool {
    let bit = seq % WINDOW;
    seen[(bit / 64) as usize] & (1 << (bit % 64)) != 0
}

fn set_seen(seen: &mut [u64], seq: u64, on: bool) {
    let bit = seq % WINDOW;
    let word = &mut seen[(bit / 64) as usize];
    if on {
        *word |= 1 << (bit % 64);
    } else {
        *word &= !(1 << (bit % 64));
    }
}

/// Clears the bits of sequence numbers `start..end` (at most [`WINDOW`] of them), a
/// word at a time: a gap costs a few word writes, not one per lost datagram.
fn clear_seen(seen: &mut [u64], start: u64, end: u64) {
    let mut s = start;
    while s < end {
        let bit = s % WINDOW;
        let from = bit % 64;
        let n = (64 - from).min(end - s);
        let mask = if n == 64 {
            u64::MAX
        } else {
            ((1u64 << n) - 1) << from
        };
        seen[(bit / 64) as usize] &= !mask;
        s += n;
    }
}

/// What a UDP receiver counted (see the module docs for each field).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct UdpCounts {
    pub packets: u64,
    pub bytes: u64,
    pub unique_bytes: u64,
    pub lost: u64,
    pub out_of_order: u64,
    pub duplicates: u64,
    pub jitter_us: f64,
    pub highest_seq: u64,
    pub foreign: u64,
}

impl UdpCounts {
    /// These counts as a result's interval.
    pub fn interval(&self) -> flowlab_results::result::UdpInterval {
        flowlab_results::result::UdpInterval::from_receiver(
            self.packets,
            self.lost,
            self.out_of_order,
            self.duplicates,
            self.jitter_us,
        )
    }

    /// Counts between an earlier snapshot and this one (jitter is the current value).
    pub fn since(&self, earlier: &UdpCounts) -> UdpCounts {
        UdpCounts {
            packets: self.packets - earlier.packets,
            bytes: self.bytes - earlier.bytes,
            unique_bytes: self.unique_bytes - earlier.unique_bytes,
            lost: self.lost.saturating_sub(earlier.lost),
            out_of_order: self.out_of_order - earlier.out_of_order,
            duplicates: self.duplicates - earlier.duplicates,
            jitter_us: self.jitter_us,
            highest_seq: self.highest_seq,
            foreign: self.foreign - earlier.foreign,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(seqs: &[u64]) -> UdpReceiverStats {
        let mut s = UdpReceiverStats::new(100);
        for (i, &q) in seqs.iter().enumerate() {
            s.on_datagram(q, 100, 0, i as u64 * 1000);
        }
        s
    }

    #[test]
    fn a_gap_is_cleared_as_bit_by_bit_would() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for _ in 0..2000 {
            let words = (WINDOW / 64) as usize;
            let fill: Vec<u64> = (0..words).map(|_| next()).collect();
            let start = next() % (4 * WINDOW);
            let end = start + next() % WINDOW;
            let (mut fast, mut slow) = (fill.clone(), fill);
            clear_seen(&mut fast, start, end);
            for s in start..end {
                set_seen(&mut slow, s, false);
            }
            assert!(fast == slow, "{start}..{end}");
        }
    }

    #[test]
    fn in_order_has_no_loss() {
        let s = feed(&[1, 2, 3, 4, 5]).counts();
        assert_eq!(
            (s.packets, s.lost, s.out_of_order, s.duplicates),
            (5, 0, 0, 0)
        );
        assert_eq!(s.unique_bytes, 500);
    }

    #[test]
    fn gaps_are_lost() {
        let s = feed(&[1, 2, 5, 6, 10]).counts();
        assert_eq!(s.lost, 2 + 3);
        assert_eq!(s.out_of_order, 0);
    }

    #[test]
    fn late_datagrams_are_reordered_not_lost() {
        let s = feed(&[1, 3, 2, 4]).counts();
        assert_eq!((s.lost, s.out_of_order, s.duplicates), (0, 1, 0));
    }

    #[test]
    fn duplicates_are_counted_apart() {
        // iperf3 would report lost = -2 here (each copy taken off the loss count).
        let s = feed(&[1, 2, 2, 3, 3, 3]).counts();
        assert_eq!(
            (s.packets, s.lost, s.out_of_order, s.duplicates),
            (6, 0, 0, 3)
        );
        assert_eq!((s.bytes, s.unique_bytes), (600, 300));
        let s = feed(&[1, 4, 2, 2, 4]).counts();
        assert_eq!((s.lost, s.out_of_order, s.duplicates), (1, 1, 2));
    }

    #[test]
    fn window_slides_without_false_duplicates() {
        let mut s = UdpReceiverStats::new(1);
        s.on_datagram(1, 1, 0, 0);
        s.on_datagram(1 + WINDOW, 1, 0, 0);
        // seq 1 + WINDOW shares seq 1's bit; seq 1 + 2*WINDOW - 1 must not look seen.
        s.on_datagram(1 + 2 * WINDOW - 1, 1, 0, 0);
        s.on_datagram(1 + WINDOW + 5, 1, 0, 0);
        assert_eq!(s.counts().duplicates, 0);
        assert_eq!(s.counts().out_of_order, 1);
    }

    #[test]
    fn jitter_follows_rfc3550() {
        // Transits: 0, 10, 10, 30 µs → D = 10, 0, 20.
        let mut s = UdpReceiverStats::new(10);
        for (seq, sent, arrival) in [(1, 0, 0), (2, 100, 110), (3, 200, 210), (4, 300, 330)] {
            s.on_datagram(seq, 10, sent, arrival);
        }
        let mut j = 0.0f64;
        for d in [10.0, 0.0, 20.0] {
            j += (d - j) / 16.0;
        }
        let got = s.counts().jitter_us;
        assert!((got - j).abs() < 1e-9, "{got} vs {j}");
        assert!((j - 1.799_316_406_25).abs() < 1e-9, "hand-computed: {j}");
    }

    #[test]
    fn forged_datagrams_are_foreign_and_change_nothing_else() {
        // A live stream at one datagram per 10 µs; then a forged datagram at the top of
        // the 64-bit range, one far behind (a replay), one of the wrong length and one
        // with sequence 0; then the stream goes on.
        let mut s = UdpReceiverStats::new(100);
        for q in 1..=100_000u64 {
            assert_eq!(s.on_datagram(q, 100, q * 10, q * 10), Verdict::Counted);
        }
        let before = s.counts();
        let t = 1_000_005;
        for (seq, len) in [(u64::MAX, 100), (u64::MAX / 2, 100), (1 << 32, 100)] {
            assert_eq!(s.on_datagram(seq, len, 0, t), Verdict::Foreign, "{seq}");
        }
        assert_eq!(s.on_datagram(100_000 - WINDOW, 100, 0, t), Verdict::Foreign);
        assert_eq!(s.on_datagram(100_001, 101, 0, t), Verdict::Foreign);
        assert_eq!(s.on_datagram(0, 100, 0, t), Verdict::Foreign);
        let after = s.counts();
        assert_eq!(after.foreign, 6);
        assert_eq!(
            UdpCounts {
                foreign: 0,
                ..after
            },
            before,
            "a foreign datagram changed the stream's counts"
        );
        for q in 100_001..=100_010u64 {
            assert_eq!(s.on_datagram(q, 100, q * 10, q * 10), Verdict::Counted);
        }
        let c = s.counts();
        assert_eq!((c.packets, c.lost, c.highest_seq), (100_010, 0, 100_010));
    }

    #[test]
    fn a_long_silence_allows_a_long_jump() {
        // A second of silence (an outage that lost everything in it) may skip as many
        // sequence numbers as the fastest sender could have sent meanwhile.
        let mut s = UdpReceiverStats::new(100);
        s.on_datagram(1, 100, 0, 0);
        let jump = WINDOW + MAX_RATE_PER_US * 1_000_000;
        assert_eq!(s.on_datagram(1 + jump, 100, 0, 1_000_000), Verdict::Counted);
        assert_eq!(s.counts().lost, jump - 1);
        assert_eq!(
            s.on_datagram(2 + 2 * jump, 100, 0, 1_000_000),
            Verdict::Foreign
        );
    }

    #[test]
    fn snapshot_differences() {
        let mut s = feed(&[1, 2, 4]);
        let a = s.counts();
        s.on_datagram(3, 100, 0, 0);
        s.on_datagram(3, 100, 0, 0);
        let d = s.counts().since(&a);
        assert_eq!(
            (d.packets, d.out_of_order, d.duplicates, d.lost),
            (2, 1, 1, 0)
        );
    }
}
