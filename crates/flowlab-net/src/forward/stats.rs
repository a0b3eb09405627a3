//! What the emulator counts for each link and direction, and the snapshots of it the
//! stats file holds: frames forwarded and dropped, how late, the threads' wake-ups.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What happened to the frames of one direction.
#[derive(Debug)]
pub struct Counters {
    pub forwarded: AtomicU64,
    /// Bytes of the frames forwarded (with their link-layer header).
    pub forwarded_bytes: AtomicU64,
    /// Dropped by the configured random loss.
    pub lost: AtomicU64,
    /// Dropped because the delay line was full.
    pub line_full: AtomicU64,
    /// Dropped by the kernel before the emulator read them (its socket buffer overflowed:
    /// the emulator could not keep up), or refused when written.
    pub emulator_drops: AtomicU64,
    /// Frames longer than the receive buffer (an offload left on).
    pub oversize: AtomicU64,
    /// Frames written more than [`LATE`] after they were due (the emulator's thread did
    /// not get a CPU in time), and the latest of them, µs.
    pub late: AtomicU64,
    pub max_late_us: AtomicU64,
    /// The lateness of every forwarded frame added up, ns (its mean is what an emulated
    /// crossing adds to the configured delay).
    pub late_total_ns: AtomicU64,
    /// The current estimate of what handing a frame on costs, ns ([`SendCost`](crate::emulator::SendCost)): frames
    /// are written that much before they are due.
    pub send_cost_ns: AtomicU64,
    /// Forwarded frames by lateness ([`late_bucket`]): its quantiles are what the
    /// emulator's own waiting for a CPU added to a crossing.
    pub late_histogram: [AtomicU64; LATE_BUCKETS],
    /// Forwarded frames by the part of their lateness that passed while the emulator's
    /// thread was in its poll ([`RecentPolls`](crate::emulator::RecentPolls)): its wake-ups'. The rest passed while
    /// the thread was up (its own work on other frames, or the CPU taken from it).
    pub woke_late_histogram: [AtomicU64; LATE_BUCKETS],
    /// A trace-driven direction ([`crate::trace`]): its opportunities that went unused
    /// (its queue was empty), as its thread last counted them.
    pub traced: std::sync::atomic::AtomicBool,
    pub unused_opportunities: AtomicU64,
    /// A trace-driven direction: packets its queue's policy dropped early (CoDel's,
    /// PIE's), as its thread last counted them.
    pub early_drops: AtomicU64,
    /// A station's direction on a shared medium: the air its transmissions took, from
    /// each PPDU's start to its acknowledgement's end, ns.
    pub on_air: std::sync::atomic::AtomicBool,
    pub airtime_ns: AtomicU64,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            forwarded: AtomicU64::new(0),
            forwarded_bytes: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            line_full: AtomicU64::new(0),
            emulator_drops: AtomicU64::new(0),
            oversize: AtomicU64::new(0),
            late: AtomicU64::new(0),
            max_late_us: AtomicU64::new(0),
            late_total_ns: AtomicU64::new(0),
            send_cost_ns: AtomicU64::new(0),
            late_histogram: std::array::from_fn(|_| AtomicU64::new(0)),
            woke_late_histogram: std::array::from_fn(|_| AtomicU64::new(0)),
            traced: std::sync::atomic::AtomicBool::new(false),
            unused_opportunities: AtomicU64::new(0),
            early_drops: AtomicU64::new(0),
            on_air: std::sync::atomic::AtomicBool::new(false),
            airtime_ns: AtomicU64::new(0),
        }
    }
}

/// Buckets of the lateness histogram: under 1 µs, then a quarter octave each from 1 µs
/// to 2^16.75 µs (110 ms), the last one holding everything later.
pub const LATE_BUCKETS: usize = 1 + 4 * 17;

/// The histogram bucket of a frame written `late_ns` after it was due:
/// 1 + ⌊4 · log2(late_ns / 1000)⌋ from 1 µs on, without floating point (it runs for
/// every frame). With o = ⌊log2 late_ns⌋ and m = late_ns / 2^o in [1, 2), that is
/// 1 + 4o − 40 + j, where j counts the thresholds 2^((j − 40 + 4·log2 1000) / 4) that m
/// reaches (log2 1000 = 9.966: 4·log2 1000 is 0.137 short of 40), here in 16-bit fixed
/// point.
pub fn late_bucket(late_ns: u64) -> usize {
    const THRESHOLDS: [u64; 4] = [76_110, 90_510, 107_635, 128_000];
    if late_ns < 1000 {
        return 0;
    }
    let octave = 63 - late_ns.leading_zeros() as usize;
    let mantissa = ((u128::from(late_ns) << 16) >> octave) as u64;
    let j = THRESHOLDS.iter().filter(|&&t| mantissa >= t).count();
    (1 + 4 * octave + j - 40).min(LATE_BUCKETS - 1)
}

/// The upper edge of bucket `i`, µs (bucket 0: 1 µs; the last: unbounded, `None`).
pub(super) fn late_bucket_edge_us(i: usize) -> Option<f64> {
    (i < LATE_BUCKETS - 1).then(|| 2f64.powf(i as f64 / 4.0))
}

/// A frame written this much after its due time counts as late, ns.
pub const LATE: u64 = 500_000;

/// The counters of one link, both directions, and of its thread.
#[derive(Debug)]
pub struct LinkCounters {
    pub a_to_b: Counters,
    pub b_to_a: Counters,
    /// The thread's wake-ups by how late it came back from a sleep after the time it
    /// asked for ([`late_bucket`]; which sleeps count: `Slept::settle`): what the host's
    /// scheduler gave it, to compare with the frames'
    /// lateness (a wake-up later than the margin makes its frames late by the
    /// overshoot) and with another program's wake-ups on the same host.
    pub wakeup_late_histogram: [AtomicU64; LATE_BUCKETS],
}

impl Default for LinkCounters {
    fn default() -> Self {
        LinkCounters {
            a_to_b: Counters::default(),
            b_to_a: Counters::default(),
            wakeup_late_histogram: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// A snapshot of [`Counters`], for the stats file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DirectionStats {
    pub forwarded: u64,
    #[serde(default)]
    pub forwarded_bytes: u64,
    pub lost: u64,
    pub line_full: u64,
    pub emulator_drops: u64,
    pub oversize: u64,
    #[serde(default)]
    pub late: u64,
    #[serde(default)]
    pub max_late_us: u64,
    #[serde(default)]
    pub late_total_ns: u64,
    #[serde(default)]
    pub send_cost_ns: u64,
    /// Forwarded frames per lateness bucket ([`late_bucket`]), trailing empty buckets
    /// left out.
    #[serde(default)]
    pub late_histogram: Vec<u64>,
    /// Forwarded frames per bucket of the part of their lateness that passed while the
    /// thread was in its poll ([`Counters::woke_late_histogram`]), trailing empty
    /// buckets left out (empty from an emulator older than it).
    #[serde(default)]
    pub woke_late_histogram: Vec<u64>,
    /// A trace-driven direction's unused opportunities (absent for a fixed-rate one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unused_opportunities: Option<u64>,
    /// A trace-driven direction's early drops ([`Counters::early_drops`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub early_drops: Option<u64>,
    /// A station's direction on a shared medium: the air its transmissions took, ns
    /// ([`Counters::airtime_ns`]; absent for a link's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub airtime_ns: Option<u64>,
}

impl DirectionStats {
    /// The mean lateness of a forwarded frame, µs.
    pub fn mean_late_us(&self) -> f64 {
        self.late_total_ns as f64 / 1000.0 / self.forwarded.max(1) as f64
    }

    /// How late the frames forwarded since `earlier` (a snapshot of the same direction)
    /// were: (lateness, frames) per non-empty bucket, each lateness its bucket's upper
    /// edge (at most 19 % over; for the last bucket the latest frame's, or its lower
    /// edge, 110 ms, if that is more).
    pub fn late_since(&self, earlier: &DirectionStats) -> Vec<(Duration, u64)> {
        self.buckets_since(&self.late_histogram, &earlier.late_histogram)
    }

    /// The part of that lateness that passed while the thread was in its poll, in the
    /// same form (None from an emulator that did not count it). A frame's part is at
    /// most its lateness, so each quantile of this is at most the same quantile of
    /// [`late_since`](Self::late_since), but for frames counted between the reads of
    /// the two histograms (a snapshot is not atomic).
    pub fn woke_late_since(&self, earlier: &DirectionStats) -> Option<Vec<(Duration, u64)>> {
        let uncounted = self.woke_late_histogram.is_empty() && !self.late_histogram.is_empty();
        (!uncounted)
            .then(|| self.buckets_since(&self.woke_late_histogram, &earlier.woke_late_histogram))
    }

    pub(super) fn buckets_since(&self, now: &[u64], earlier: &[u64]) -> Vec<(Duration, u64)> {
        buckets_between(now, earlier, self.max_late_us)
    }
}

/// The counts of histogram `now` less those of the same histogram's earlier snapshot,
/// as (lateness, count) per non-empty bucket, each lateness its bucket's upper edge; the
/// last bucket's at `latest_us` (the latest seen, which is read before the histograms
/// and so may lag them), never under the bucket's lower edge (110 ms).
pub(super) fn buckets_between(
    now: &[u64],
    earlier: &[u64],
    latest_us: u64,
) -> Vec<(Duration, u64)> {
    (0..LATE_BUCKETS)
        .filter_map(|i| {
            let at = |h: &[u64]| h.get(i).copied().unwrap_or(0);
            let n = at(now).saturating_sub(at(earlier));
            let us = late_bucket_edge_us(i).unwrap_or_else(|| {
                let lower = late_bucket_edge_us(LATE_BUCKETS - 2).unwrap_or(0.0);
                (latest_us as f64).max(lower)
            });
            (n > 0).then(|| (Duration::from_secs_f64(us / 1e6), n))
        })
        .collect()
}

impl From<&Counters> for DirectionStats {
    fn from(c: &Counters) -> Self {
        DirectionStats {
            forwarded: c.forwarded.load(Relaxed),
            forwarded_bytes: c.forwarded_bytes.load(Relaxed),
            lost: c.lost.load(Relaxed),
            line_full: c.line_full.load(Relaxed),
            emulator_drops: c.emulator_drops.load(Relaxed),
            oversize: c.oversize.load(Relaxed),
            late: c.late.load(Relaxed),
            max_late_us: c.max_late_us.load(Relaxed),
            late_total_ns: c.late_total_ns.load(Relaxed),
            send_cost_ns: c.send_cost_ns.load(Relaxed),
            late_histogram: trimmed(&c.late_histogram),
            woke_late_histogram: trimmed(&c.woke_late_histogram),
            unused_opportunities: c
                .traced
                .load(Relaxed)
                .then(|| c.unused_opportunities.load(Relaxed)),
            early_drops: c.traced.load(Relaxed).then(|| c.early_drops.load(Relaxed)),
            airtime_ns: c.on_air.load(Relaxed).then(|| c.airtime_ns.load(Relaxed)),
        }
    }
}

/// A histogram's counts without its trailing empty buckets.
pub(super) fn trimmed(histogram: &[AtomicU64]) -> Vec<u64> {
    let mut h: Vec<u64> = histogram.iter().map(|b| b.load(Relaxed)).collect();
    while h.last() == Some(&0) {
        h.pop();
    }
    h
}

/// One link's line in the stats file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkStats {
    pub link: String,
    pub a_to_b: DirectionStats,
    pub b_to_a: DirectionStats,
    /// The link thread's wake-ups per bucket of their lateness
    /// ([`LinkCounters::wakeup_late_histogram`]), trailing empty buckets left out; None
    /// from an emulator older than it.
    #[serde(default)]
    pub wakeup_late_histogram: Option<Vec<u64>>,
    /// Set on the line of a medium's busy stations (`link` is then the medium's name,
    /// `a_to_b` what they sent the access point, all of them together): how many there
    /// are. Absent on a link's line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_stations: Option<u32>,
}

impl LinkStats {
    /// A snapshot of link `name`'s counters.
    pub fn of(name: &str, c: &LinkCounters) -> Self {
        LinkStats {
            link: name.to_owned(),
            a_to_b: (&c.a_to_b).into(),
            b_to_a: (&c.b_to_a).into(),
            wakeup_late_histogram: Some(trimmed(&c.wakeup_late_histogram)),
            busy_stations: None,
        }
    }

    /// A snapshot of the counters of medium `name`'s `count` busy stations.
    pub fn of_busy(name: &str, count: u32, c: &LinkCounters) -> Self {
        LinkStats {
            busy_stations: Some(count),
            ..LinkStats::of(name, c)
        }
    }

    /// How late the thread came back from its sleeps since `earlier` (a snapshot of the
    /// same link) after the time it asked for: (lateness, wake-ups) per non-empty bucket, each
    /// lateness its bucket's upper edge (the last bucket's its lower edge, 110 ms: a
    /// lower bound there). None when either snapshot is from an emulator that did not
    /// count them.
    pub fn wakeup_late_since(&self, earlier: &LinkStats) -> Option<Vec<(Duration, u64)>> {
        let now = self.wakeup_late_histogram.as_deref()?;
        let before = earlier.wakeup_late_histogram.as_deref()?;
        Some(buckets_between(now, before, 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lateness_buckets_are_quarter_octaves_and_read_as_their_upper_edge() {
        assert_eq!(late_bucket(0), 0);
        assert_eq!(late_bucket(999), 0);
        assert_eq!(late_bucket(1_000), 1);
        // 2 µs starts the fifth quarter octave above 1 µs; 1 ms is 2^9.97 µs.
        assert_eq!(late_bucket(2_000), 5);
        assert_eq!(late_bucket(1_000_000), 1 + 39);
        assert_eq!(late_bucket(u64::MAX), LATE_BUCKETS - 1);
        // The same as 1 + ⌊4 · log2 µs⌋ in floating point, across the whole range.
        let mut ns = 1_000u64;
        while ns < 200_000_000 {
            let float =
                (1 + (4.0 * (ns as f64 / 1000.0).log2()).floor() as usize).min(LATE_BUCKETS - 1);
            assert_eq!(late_bucket(ns), float, "{ns} ns");
            ns += 1 + ns / 97;
        }
        let c = Counters::default();
        let record = |ns: u64, n: u64| {
            c.late_histogram[late_bucket(ns)].fetch_add(n, Relaxed);
        };
        record(50_000, 90);
        let earlier = DirectionStats::from(&c);
        // Since `earlier`: 95 frames 100 µs late, 5 frames 3 ms late.
        record(100_000, 95);
        record(3_000_000, 5);
        c.max_late_us.store(3_000, Relaxed);
        let now = DirectionStats::from(&c);
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let since: Vec<(f64, u64)> = now
            .late_since(&earlier)
            .iter()
            .map(|&(d, n)| (us(d), n))
            .collect();
        assert_eq!(since.len(), 2, "{since:?}");
        assert!(
            (100.0..=119.0).contains(&since[0].0) && since[0].1 == 95,
            "{since:?}"
        );
        assert!(
            (3_000.0..=3_568.0).contains(&since[1].0) && since[1].1 == 5,
            "{since:?}"
        );
        // Nothing forwarded in between: nothing.
        assert!(now.late_since(&now).is_empty());
        // The stats file leaves out trailing empty buckets.
        assert_eq!(now.late_histogram.len(), late_bucket(3_000_000) + 1);
    }

    #[test]
    fn the_polls_part_of_the_lateness_is_read_from_its_own_histogram() {
        const US: u64 = 1_000;
        // The two histograms are read apart: the polls' part from its own.
        let c = Counters::default();
        let earlier = DirectionStats::from(&c);
        for (late, woke) in [(200 * US, 150 * US), (200 * US, 0), (40 * US, 0)] {
            c.late_histogram[late_bucket(late)].fetch_add(1, Relaxed);
            c.woke_late_histogram[late_bucket(woke)].fetch_add(1, Relaxed);
        }
        let now = DirectionStats::from(&c);
        let us = |v: Vec<(Duration, u64)>| -> Vec<(u64, u64)> {
            v.iter().map(|&(d, n)| (d.as_micros() as u64, n)).collect()
        };
        let under_1us = 1;
        assert_eq!(
            us(now.woke_late_since(&earlier).expect("counted")),
            [(under_1us, 2), (152, 1)],
            "{now:?}"
        );
        assert_eq!(us(now.late_since(&earlier)), [(45, 1), (215, 2)], "{now:?}");
        assert_eq!(now.woke_late_histogram.len(), late_bucket(150 * US) + 1);
        // An emulator from before the split counted lateness only: its part is unknown,
        // not nothing.
        let older = DirectionStats {
            woke_late_histogram: Vec::new(),
            ..now.clone()
        };
        assert_eq!(older.woke_late_since(&earlier), None);
        // Nothing forwarded at all: nothing to split.
        assert_eq!(earlier.woke_late_since(&earlier), Some(Vec::new()));
    }

    #[test]
    fn the_threads_wake_ups_are_read_per_link_and_absent_from_an_older_emulator() {
        const US: u64 = 1_000;
        let c = LinkCounters::default();
        let stats = |c: &LinkCounters| LinkStats::of("l", c);
        c.wakeup_late_histogram[late_bucket(30 * US)].fetch_add(5, Relaxed);
        let earlier = stats(&c);
        for late in [30 * US, 30 * US, 400 * US] {
            c.wakeup_late_histogram[late_bucket(late)].fetch_add(1, Relaxed);
        }
        let now = stats(&c);
        let us = |v: Vec<(Duration, u64)>| -> Vec<(u64, u64)> {
            v.iter().map(|&(d, n)| (d.as_micros() as u64, n)).collect()
        };
        // Only the wake-ups since `earlier`, each at its bucket's upper edge.
        assert_eq!(
            us(now.wakeup_late_since(&earlier).expect("counted")),
            [(32, 2), (430, 1)]
        );
        // Either snapshot from an emulator without them: unknown, not none; and the
        // stats file of one reads so.
        let older = LinkStats {
            wakeup_late_histogram: None,
            ..earlier.clone()
        };
        assert_eq!(now.wakeup_late_since(&older), None);
        assert_eq!(older.wakeup_late_since(&earlier), None);
        let text = serde_json::to_string(&older).expect("json");
        let text = text.replace(",\"wakeup_late_histogram\":null", "");
        assert!(!text.contains("wakeup"), "{text}");
        let read: LinkStats = serde_json::from_str(&text).expect("an older line");
        assert_eq!(read.wakeup_late_histogram, None);
    }

    #[test]
    fn the_last_buckets_frames_are_never_read_as_under_its_lower_edge() {
        let c = Counters::default();
        let earlier = DirectionStats::from(&c);
        // A frame 200 ms late counted, the latest seen not yet raised (read before).
        c.late_histogram[LATE_BUCKETS - 1].fetch_add(1, Relaxed);
        c.max_late_us.store(600, Relaxed);
        let since = DirectionStats::from(&c).late_since(&earlier);
        assert_eq!(since.len(), 1);
        assert!(since[0].0 >= Duration::from_micros(110_000), "{since:?}");
    }
}
