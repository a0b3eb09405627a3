//! When `flowlab monitor` runs what (sans-IO): each probe's pairs spread evenly over its
//! period, each run up to its jitter later than its slot, never two runs on one path at
//! once (a path: two hosts, either way), and throughput runs one at a time in the whole
//! mesh. The clock is the caller's: it asks which runs are due at a time, and says when
//! each ended.
//!
//! A run that cannot start at its time (its path busy, or another throughput run under
//! way) starts as soon as it can, and says how late. A pair whose run ends after its next
//! slot has passed runs once at once, not once for every slot it missed: the rounds in
//! between are skipped, and counted.

use std::time::Duration;

use crate::mesh::{Kind, Mesh};

/// A run to start now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// Its slot in the schedule (for [`Schedule::ended`]).
    pub slot: usize,
    /// Its probe, by its place in the mesh file.
    pub probe: usize,
    pub from: String,
    pub to: String,
    /// Its pair's round: 0 for the first run, counting skipped rounds too.
    pub round: u64,
    /// When it was due (its slot and its jitter) and when it starts.
    pub due: Duration,
    pub starts: Duration,
}

impl Run {
    /// How late it starts: waiting for its path, or for another throughput run.
    pub fn late(&self) -> Duration {
        self.starts.saturating_sub(self.due)
    }
}

#[derive(Debug, Clone)]
struct Slot {
    probe: usize,
    from: String,
    to: String,
    throughput: bool,
    every: Duration,
    jitter: Duration,
    /// The round's slot before its jitter, and the round.
    base: Duration,
    round: u64,
    due: Duration,
    running: bool,
}

/// The schedule of a mesh's probes.
#[derive(Debug, Clone)]
pub struct Schedule {
    slots: Vec<Slot>,
    seed: u64,
    skipped: u64,
}

/// Mixes `x` into a well-spread 64-bit value (splitmix64's finaliser): a run's jitter
/// from the seed, its slot and its round, so the same seed gives the same schedule.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Schedule {
    /// Every pair of every probe, its first slot `every × k / n` into the first period
    /// (pair k of the probe's n), plus its jitter; `seed` draws the jitter.
    pub fn new(mesh: &Mesh, seed: u64) -> Schedule {
        let mut slots = Vec::new();
        for (probe, p) in mesh.probes.iter().enumerate() {
            let n = p.pairs.len() as u32;
            for (k, (from, to)) in p.pairs.iter().enumerate() {
                slots.push(Slot {
                    probe,
                    from: from.clone(),
                    to: to.clone(),
                    throughput: matches!(p.kind, Kind::Throughput { .. }),
                    every: p.every,
                    jitter: p.jitter,
                    base: p.every * k as u32 / n,
                    round: 0,
                    due: Duration::ZERO,
                    running: false,
                });
            }
        }
        let mut s = Schedule {
            slots,
            seed,
            skipped: 0,
        };
        for i in 0..s.slots.len() {
            s.slots[i].due = s.due_of(i);
        }
        s
    }

    /// Slot `i`'s due time in its round: its base and its jitter.
    fn due_of(&self, i: usize) -> Duration {
        let slot = &self.slots[i];
        let jitter = slot.jitter.as_nanos() as u64;
        let draw = mix(self.seed ^ mix((i as u64) << 32 ^ slot.round));
        slot.base + Duration::from_nanos(if jitter == 0 { 0 } else { draw % jitter })
    }

    /// Whether slot `i` may start now: its path free, and no other throughput run under
    /// way if it is one.
    fn free(&self, i: usize) -> bool {
        let s = &self.slots[i];
        let path =
            |a: &Slot| (a.from == s.from && a.to == s.to) || (a.from == s.to && a.to == s.from);
        !self
            .slots
            .iter()
            .any(|o| o.running && (path(o) || (s.throughput && o.throughput)))
    }

    /// The runs due by `now` that may start, earliest due first; each is running until
    /// [`Schedule::ended`].
    pub fn start(&mut self, now: Duration) -> Vec<Run> {
        let mut due: Vec<usize> = (0..self.slots.len())
            .filter(|&i| !self.slots[i].running && self.slots[i].due <= now)
            .collect();
        due.sort_by_key(|&i| (self.slots[i].due, i));
        let mut runs = Vec::new();
        for i in due {
            if !self.free(i) {
                continue;
            }
            let s = &mut self.slots[i];
            s.running = true;
            runs.push(Run {
                slot: i,
                probe: s.probe,
                from: s.from.clone(),
                to: s.to.clone(),
                round: s.round,
                due: s.due,
                starts: now,
            });
        }
        runs
    }

    /// `run` ended at `now`: its path is free, and its pair's next round is due one
    /// period after this one's slot (with its own jitter) — or, when that has passed by
    /// a whole period or more, the latest round whose slot has passed, the ones between
    /// skipped.
    pub fn ended(&mut self, run: &Run, now: Duration) {
        let Some(s) = self.slots.get_mut(run.slot) else {
            return;
        };
        s.running = false;
        s.base += s.every;
        s.round += 1;
        while s.base + s.every <= now {
            s.base += s.every;
            s.round += 1;
            self.skipped += 1;
        }
        self.slots[run.slot].due = self.due_of(run.slot);
    }

    /// The earliest time after `now` a run not under way falls due: when to ask
    /// [`Schedule::start`] next, unless a run ends first (a run already due and waiting
    /// for its path may start once one ends). None when no run falls due after `now`.
    pub fn next_due_after(&self, now: Duration) -> Option<Duration> {
        self.slots
            .iter()
            .filter(|s| !s.running && s.due > now)
            .map(|s| s.due)
            .min()
    }

    /// Rounds skipped because a pair's run ended after its next slot had passed.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::parse;

    /// Runs `schedule` on a simulated clock for `until`, each run lasting what `length`
    /// says: every run started, and when it ended.
    fn simulate(
        schedule: &mut Schedule,
        until: Duration,
        length: impl Fn(&Run) -> Duration,
    ) -> Vec<(Run, Duration)> {
        let mut now = Duration::ZERO;
        let mut running: Vec<(Run, Duration)> = Vec::new();
        let mut done = Vec::new();
        while now < until {
            // Ends first: what ends now frees its path for what is due now.
            running.sort_by_key(|(_, end)| *end);
            while running.first().is_some_and(|(_, end)| *end <= now) {
                let (run, end) = running.remove(0);
                schedule.ended(&run, end);
                done.push((run, end));
            }
            for run in schedule.start(now) {
                let end = now + length(&run);
                running.push((run, end));
            }
            let ends = running.iter().map(|(_, e)| *e).min();
            let due = schedule.next_due_after(now);
            now = match (ends, due) {
                (Some(e), Some(d)) => e.min(d),
                (Some(e), None) => e,
                (None, Some(d)) => d,
                (None, None) => break,
            };
        }
        done
    }

    fn mesh(text: &str) -> Mesh {
        parse(text).expect("mesh")
    }

    /// Whether two runs shared a path while both were under way.
    fn overlapped(a: &(Run, Duration), b: &(Run, Duration)) -> bool {
        a.0.starts < b.1 && b.0.starts < a.1
    }

    fn same_path(a: &Run, b: &Run) -> bool {
        (a.from == b.from && a.to == b.to) || (a.from == b.to && a.to == b.from)
    }

    /// A latency mesh of three hosts alone: each of its six pairs runs once a period,
    /// each run within its jitter after its slot, none late (the runs are short), and
    /// the same seed gives the same schedule.
    #[test]
    fn a_latency_mesh_runs_each_pair_once_a_period_within_its_jitter() {
        let m = mesh(
            "name = \"m\"\nhosts = [\"a\", \"b\", \"c\"]\n[[probe]]\nkind = \"latency\"\n\
             every = \"60s\"\njitter = \"6s\"\npairs = \"mesh\"\n",
        );
        let period = Duration::from_secs(60);
        let mut s = Schedule::new(&m, 7);
        let done = simulate(&mut s, period * 10, |_| Duration::from_secs(1));
        assert_eq!(done.len(), 60, "six pairs, ten periods");
        for (k, (from, to)) in m.probes[0].pairs.iter().enumerate() {
            let runs: Vec<&Run> = done
                .iter()
                .map(|(r, _)| r)
                .filter(|r| &r.from == from && &r.to == to)
                .collect();
            assert_eq!(runs.len(), 10, "{from}-{to}");
            for (round, r) in runs.iter().enumerate() {
                let slot = period * round as u32 + period * k as u32 / 6;
                assert_eq!(r.round, round as u64);
                assert!(
                    r.due >= slot && r.due < slot + Duration::from_secs(6),
                    "{from}-{to} round {round}: due {:?}, slot {slot:?}",
                    r.due
                );
                assert_eq!(r.late(), Duration::ZERO, "{r:?}");
            }
        }
        let mut again = Schedule::new(&m, 7);
        let same = simulate(&mut again, period * 10, |_| Duration::from_secs(1));
        assert_eq!(same, done);
        let mut other = Schedule::new(&m, 8);
        let differs = simulate(&mut other, period * 10, |_| Duration::from_secs(1));
        assert_ne!(differs, done, "another seed, other jitter");
    }

    /// Throughput beside a latency mesh: never two throughput runs at once, never two
    /// runs on one path at once; a latency run due while throughput holds its path waits
    /// for it and says how late; every pair still runs each period.
    #[test]
    fn throughput_runs_alone_and_no_path_carries_two_runs() {
        let m = mesh(
            "name = \"m\"\nhosts = [\"a\", \"b\", \"c\"]\n\
             [[probe]]\nkind = \"latency\"\nevery = \"20s\"\npairs = \"mesh\"\n\
             [[probe]]\nkind = \"throughput\"\nevery = \"120s\"\njitter = \"30s\"\npairs = \"mesh\"\nseconds = 10\n",
        );
        let mut s = Schedule::new(&m, 1);
        let length = |r: &Run| {
            if r.probe == 1 {
                Duration::from_secs(11)
            } else {
                Duration::from_millis(500)
            }
        };
        let done = simulate(&mut s, Duration::from_secs(600), length);
        let mut waited = 0;
        for (i, a) in done.iter().enumerate() {
            for b in &done[i + 1..] {
                if !overlapped(a, b) {
                    continue;
                }
                assert!(!same_path(&a.0, &b.0), "one path, two runs: {a:?} {b:?}");
                assert!(
                    a.0.probe == 0 || b.0.probe == 0,
                    "two throughput runs at once: {a:?} {b:?}"
                );
            }
            if a.0.probe == 0 && a.0.late() > Duration::ZERO {
                // It waited for another run on its path, and started as that ended.
                let blocker = done
                    .iter()
                    .find(|t| same_path(&t.0, &a.0) && t.1 == a.0.starts);
                assert!(blocker.is_some(), "{a:?} late for nothing");
                if blocker.is_some_and(|t| t.0.probe == 1) {
                    waited += 1;
                }
            }
        }
        assert!(
            waited > 0,
            "in ten minutes some latency run met a throughput run"
        );
        for (probe, runs_each) in [(0, 30), (1, 5)] {
            for (from, to) in &m.probes[probe].pairs {
                let n = done
                    .iter()
                    .filter(|(r, _)| r.probe == probe && &r.from == from && &r.to == to)
                    .count();
                assert!(
                    (runs_each - 1..=runs_each).contains(&n),
                    "probe {probe} {from}-{to}: {n} runs"
                );
            }
        }
        assert_eq!(s.skipped(), 0);
    }

    /// A run longer than two periods: its pair runs again at once when it ends, once,
    /// and the rounds it missed are skipped and counted, not run in a burst.
    #[test]
    fn a_run_longer_than_its_period_skips_rounds_instead_of_piling_them_up() {
        let m = mesh(
            "name = \"m\"\nhosts = [\"a\", \"b\"]\n[[probe]]\nkind = \"throughput\"\n\
             every = \"10s\"\njitter = \"0s\"\npairs = [\"a-b\"]\n",
        );
        let mut s = Schedule::new(&m, 0);
        let done = simulate(&mut s, Duration::from_secs(101), |_| {
            Duration::from_secs(25)
        });
        let starts: Vec<u64> = done.iter().map(|(r, _)| r.starts.as_secs()).collect();
        // The first run ends at 25 s, past the slots of 10 s and 20 s: it runs again at
        // once as the round of the latest slot passed (20 s), the one of 10 s skipped;
        // the next ends at 50 s, a slot's time: that round (50 s), 30 s and 40 s skipped.
        assert_eq!(starts, [0, 25, 50, 75]);
        let rounds: Vec<u64> = done.iter().map(|(r, _)| r.round).collect();
        assert_eq!(rounds, [0, 2, 5, 7]);
        // Rounds 1, 3, 4, 6, and at 100 s 8 and 9.
        assert_eq!(s.skipped(), 6);
    }
}
