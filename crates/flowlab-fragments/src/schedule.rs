//! Which server fetches which fragment, and when (sans-IO: no sockets, no clock).
//!
//! - **Ratio** (`--ratio a:b[:c…]`): fragments are dealt to servers in the ratio's
//!   pattern, interleaved — for 1:2, A B B A B B … — and each server works through its
//!   share in order.
//! - **Adaptive** (the default): one shared queue; a server takes the next fragment
//!   whenever it has room, so faster servers take more. When the queue is empty, an idle
//!   server also asks for a fragment still in flight elsewhere (at most two copies); the
//!   first complete, verified copy wins and the other is cancelled.
//!
//! In both modes a server that fails or stalls has its fragments put back for the others,
//! and a fragment that fails verification is fetched again, from another server when
//! there is one (the same server is asked again only when no other can, and at most
//! [`MAX_TRIES`] times). A server that refuses a fragment is not asked for it again.
//!
//! The scheduler hands out work to *workers*, one per connection (`--connections N`
//! gives a server N), and judges *servers*: a refusal, a corrupt copy or an end-game
//! copy is a server's, whichever of its connections it came through; a connection that
//! fails takes only itself out.

use std::collections::BTreeSet;

/// Most times one server is asked for a fragment whose copies failed verification.
pub const MAX_TRIES: usize = 3;

/// Index of a server (in `--from` order), of a worker (a connection to a server, in the
/// order the fetch opened them) and of a fragment (in manifest order).
pub type ServerId = usize;
pub type WorkerId = usize;
pub type FragmentId = usize;

/// How the work is split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    Ratio(Vec<u32>),
    Adaptive,
}

/// A ratio that did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a ratio like 1:5 (two or more whole numbers, 1 to 1000)")]
pub struct BadRatio(pub String);

/// Parses `a:b[:c…]`: positive integers, one per server.
pub fn parse_ratio(text: &str) -> Result<Vec<u32>, BadRatio> {
    let parts: Result<Vec<u32>, _> = text.split(':').map(|p| p.trim().parse::<u32>()).collect();
    match parts {
        Ok(v) if v.len() >= 2 && v.iter().all(|&x| (1..=1000).contains(&x)) => Ok(v),
        _ => Err(BadRatio(text.into())),
    }
}

/// Deals `n` fragments to servers in the ratio's interleaved pattern: for each round, `r[0]`
/// fragments to server 0, then `r[1]` to server 1, and so on.
pub fn assign_ratio(n: usize, ratio: &[u32]) -> Vec<ServerId> {
    let mut out = Vec::with_capacity(n);
    'deal: loop {
        for (server, &k) in ratio.iter().enumerate() {
            for _ in 0..k {
                if out.len() == n {
                    break 'deal;
                }
                out.push(server);
            }
        }
        if ratio.iter().all(|&k| k == 0) {
            break;
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Pending,
    InFlight(Vec<WorkerId>),
    Done,
}

/// What happened to a fragment a server delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Verified and kept; these other workers still have it in flight: cancel it there.
    Accepted { cancel: Vec<WorkerId> },
    /// Another copy already won; this one is dropped.
    Duplicate,
    /// Failed verification; it will be fetched again.
    Corrupt,
}

/// The scheduler's state. Every call costs O(log n) in the number of fragments in the
/// common case (the worker's next fragment is the first it may take); sets of the
/// pending, in-flight and possibly orphaned fragments keep it from scanning them all.
#[derive(Debug, Clone)]
pub struct Scheduler {
    mode: Mode,
    states: Vec<State>,
    /// Fragments done.
    done: usize,
    /// Pending fragments, in order.
    pending: BTreeSet<FragmentId>,
    /// Fragments in flight, in order.
    in_flight: BTreeSet<FragmentId>,
    /// Ratio mode: the pending fragments of each worker's share, in order.
    shares: Vec<BTreeSet<FragmentId>>,
    /// Ratio mode: the worker whose share a fragment is in.
    assigned: Vec<Option<WorkerId>>,
    /// Ratio mode: fragments whose worker may no longer take them (it failed, its server
    /// refused them or sent a bad copy), which other workers then may. A superset: each
    /// is checked again when taken.
    orphans: BTreeSet<FragmentId>,
    /// Each worker's server.
    owner: Vec<ServerId>,
    /// Per worker: not failed.
    alive: Vec<bool>,
    /// Per fragment: servers whose copy failed verification, once per failure.
    corrupt_from: Vec<Vec<ServerId>>,
    /// Per fragment: servers that refused it.
    refused_by: Vec<Vec<ServerId>>,
}

impl Scheduler {
    /// A schedule for `fragments` fragments over one worker per entry of `owner` (the
    /// worker's server). In ratio mode the ratio has one part per server; each server's
    /// share is dealt among its workers in turn (a server with no worker leaves its share
    /// to the others). `done` marks the fragments already verified on disk (a resumed
    /// fetch).
    pub fn new(mode: Mode, fragments: usize, owner: &[ServerId], done: &[bool]) -> Scheduler {
        let workers = owner.len();
        let is_done = |i: usize| done.get(i).copied().unwrap_or(false);
        let states: Vec<State> = (0..fragments)
            .map(|i| {
                if is_done(i) {
                    State::Done
                } else {
                    State::Pending
                }
            })
            .collect();
        let mut shares = vec![BTreeSet::new(); workers];
        let mut assigned = vec![None; fragments];
        if let Mode::Ratio(r) = &mode {
            let own_of: Vec<Vec<WorkerId>> = (0..r.len())
                .map(|server| (0..workers).filter(|&w| owner[w] == server).collect())
                .collect();
            let mut next_of = vec![0usize; r.len()];
            for (frag, server) in assign_ratio(fragments, r).into_iter().enumerate() {
                let own = &own_of[server];
                if own.is_empty() {
                    continue;
                }
                let w = own[next_of[server] % own.len()];
                next_of[server] += 1;
                assigned[frag] = Some(w);
                if !is_done(frag) {
                    shares[w].insert(frag);
                }
            }
        }
        // A fragment no worker was dealt (its server has none) is everyone's.
        let orphans = (0..fragments)
            .filter(|&f| matches!(mode, Mode::Ratio(_)) && assigned[f].is_none() && !is_done(f))
            .collect();
        Scheduler {
            mode,
            done: states.iter().filter(|s| **s == State::Done).count(),
            pending: (0..fragments)
                .filter(|&f| states[f] == State::Pending)
                .collect(),
            states,
            in_flight: BTreeSet::new(),
            shares,
            assigned,
            orphans,
            owner: owner.to_vec(),
            alive: vec![true; workers],
            corrupt_from: vec![Vec::new(); fragments],
            refused_by: vec![Vec::new(); fragments],
        }
    }

    /// Moves `frag` to `state`, keeping the sets in step.
    fn set(&mut self, frag: FragmentId, state: State) {
        match self.states[frag] {
            State::Pending => {
                self.pending.remove(&frag);
                if let Some(w) = self.assigned[frag] {
                    self.shares[w].remove(&frag);
                }
            }
            State::InFlight(_) => {
                self.in_flight.remove(&frag);
            }
            State::Done => self.done -= 1,
        }
        match state {
            State::Pending => {
                self.pending.insert(frag);
                if let Some(w) = self.assigned[frag] {
                    self.shares[w].insert(frag);
                }
            }
            State::InFlight(_) => {
                self.in_flight.insert(frag);
            }
            State::Done => {
                self.done += 1;
                self.orphans.remove(&frag);
            }
        }
        self.states[frag] = state;
    }

    /// Whether `worker` may be asked for `frag` (whatever its state).
    fn eligible(&self, worker: WorkerId, frag: FragmentId) -> bool {
        let server = self.owner[worker];
        if !self.alive[worker] || self.refused_by[frag].contains(&server) {
            return false;
        }
        let failures = self.corrupt_from[frag]
            .iter()
            .filter(|&&s| s == server)
            .count();
        if failures == 0 {
            return true;
        }
        // Again from a server that sent a bad copy: only when no other one can, a few times.
        failures < MAX_TRIES
            && !(0..self.alive.len()).any(|w| {
                let o = self.owner[w];
                o != server
                    && self.alive[w]
                    && !self.refused_by[frag].contains(&o)
                    && !self.corrupt_from[frag].contains(&o)
            })
    }

    fn claim(&mut self, worker: WorkerId, frag: FragmentId) -> FragmentId {
        match &mut self.states[frag] {
            State::InFlight(holders) => holders.push(worker),
            _ => self.set(frag, State::InFlight(vec![worker])),
        }
        frag
    }

    /// Whether any of `server`'s workers still runs.
    pub fn server_alive(&self, server: ServerId) -> bool {
        self.owner
            .iter()
            .zip(&self.alive)
            .any(|(&o, &alive)| o == server && alive)
    }

    /// The fragment `worker` should request next, if any.
    pub fn next(&mut self, worker: WorkerId) -> Option<FragmentId> {
        if !self.alive.get(worker).copied().unwrap_or(false) {
            return None;
        }
        let server = self.owner[worker];
        // Its own share first (ratio mode), then anything pending (work put back by a
        // failed server, or everything in adaptive mode).
        if let Some(&f) = self.shares[worker]
            .iter()
            .find(|&&f| self.eligible(worker, f))
        {
            return Some(self.claim(worker, f));
        }
        let taken = match self.mode {
            Mode::Adaptive => self
                .pending
                .iter()
                .copied()
                .find(|&f| self.eligible(worker, f)),
            // Ratio mode: only fragments whose assigned worker may not take them.
            Mode::Ratio(_) => self.orphans.iter().copied().find(|&f| {
                self.states[f] == State::Pending
                    && self.eligible(worker, f)
                    && self.assigned[f].is_none_or(|w| w == worker || !self.eligible(w, f))
            }),
        };
        if let Some(f) = taken {
            return Some(self.claim(worker, f));
        }
        // End game (adaptive): a second copy of something in flight on another server —
        // the one handed out last (fragments go out in order), which will finish last. Not
        // from another connection to the same server: that copy would race the first on
        // the same path.
        if self.mode == Mode::Adaptive {
            let candidate = self
                .in_flight
                .iter()
                .rev()
                .copied()
                .find(|&f| match &self.states[f] {
                    State::InFlight(h) => {
                        h.len() == 1
                            && !h.iter().any(|&w| self.owner[w] == server)
                            && self.eligible(worker, f)
                    }
                    _ => false,
                });
            if let Some(f) = candidate {
                return Some(self.claim(worker, f));
            }
        }
        None
    }

    fn release(&mut self, worker: WorkerId, frag: FragmentId) {
        if let State::InFlight(holders) = &mut self.states[frag] {
            holders.retain(|&w| w != worker);
            if holders.is_empty() {
                self.set(frag, State::Pending);
            }
        }
    }

    /// In ratio mode, `frag` may now be for other workers than the one it was dealt to
    /// when that one's server is `server` (a refusal or a bad copy) or `server` is
    /// `None` (the worker failed).
    fn maybe_orphaned(&mut self, frag: FragmentId, server: Option<ServerId>) {
        if let (Mode::Ratio(_), Some(w)) = (&self.mode, self.assigned[frag]) {
            if server.is_none_or(|s| self.owner[w] == s) {
                self.orphans.insert(frag);
            }
        }
    }

    /// `worker` delivered `frag`; `verified` says whether its hash matched.
    pub fn delivered(&mut self, worker: WorkerId, frag: FragmentId, verified: bool) -> Outcome {
        if self.states[frag] == State::Done {
            return Outcome::Duplicate;
        }
        if !verified {
            let server = self.owner[worker];
            self.corrupt_from[frag].push(server);
            self.maybe_orphaned(frag, Some(server));
            self.release(worker, frag);
            return Outcome::Corrupt;
        }
        let cancel = match &self.states[frag] {
            State::InFlight(h) => h.iter().copied().filter(|&w| w != worker).collect(),
            _ => Vec::new(),
        };
        self.set(frag, State::Done);
        Outcome::Accepted { cancel }
    }

    /// `worker` will not deliver `frag` (cancelled, or refused by its server).
    pub fn dropped(&mut self, worker: WorkerId, frag: FragmentId, refused: bool) {
        if refused {
            let server = self.owner[worker];
            self.refused_by[frag].push(server);
            self.maybe_orphaned(frag, Some(server));
        }
        self.release(worker, frag);
    }

    /// `worker`'s connection failed or stalled: everything it held goes back to the
    /// others (its server's other connections included).
    pub fn failed(&mut self, worker: WorkerId) {
        self.alive[worker] = false;
        let held: Vec<FragmentId> = self.in_flight.iter().copied().collect();
        for f in held {
            self.release(worker, f);
        }
        // Its share, whether pending, in flight or put back later, is for the others.
        let dealt: Vec<FragmentId> = (0..self.assigned.len())
            .filter(|&f| self.assigned[f] == Some(worker) && self.states[f] != State::Done)
            .collect();
        for f in dealt {
            self.maybe_orphaned(f, None);
        }
    }

    pub fn is_done(&self) -> bool {
        self.done == self.states.len()
    }

    /// True when nothing can make progress any more: fragments left, no live server that
    /// may fetch them.
    pub fn is_stuck(&self) -> bool {
        !self.is_done()
            && self.in_flight.is_empty()
            && self
                .pending
                .iter()
                .all(|&f| (0..self.alive.len()).all(|w| !self.eligible(w, f)))
    }

    pub fn remaining(&self) -> usize {
        self.states.len() - self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_parse() {
        assert_eq!(parse_ratio("1:5"), Ok(vec![1, 5]));
        assert_eq!(parse_ratio("2:1:3"), Ok(vec![2, 1, 3]));
        for bad in ["", "1", "1:0", "a:b", "1:-2", "1::2", "1:5000"] {
            assert!(parse_ratio(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ratio_is_dealt_interleaved() {
        assert_eq!(assign_ratio(7, &[1, 2]), [0, 1, 1, 0, 1, 1, 0]);
        assert_eq!(assign_ratio(5, &[3, 1]), [0, 0, 0, 1, 0]);
        let a = assign_ratio(160, &[1, 5]);
        assert_eq!(a.iter().filter(|&&s| s == 0).count(), 27);
        assert_eq!(a.iter().filter(|&&s| s == 1).count(), 133);
    }

    #[test]
    fn ratio_mode_gives_each_server_its_share_in_order() {
        let mut s = Scheduler::new(Mode::Ratio(vec![1, 2]), 6, &[0, 1], &[]);
        assert_eq!(s.next(0), Some(0));
        assert_eq!(s.next(0), Some(3));
        assert_eq!(s.next(0), None, "server A's share is 0 and 3");
        assert_eq!(s.next(1), Some(1));
        assert_eq!(s.next(1), Some(2));
        assert_eq!(s.next(1), Some(4));
        assert_eq!(s.next(1), Some(5));
        assert_eq!(s.next(1), None);
        for f in 0..6 {
            let server = usize::from(![0, 3].contains(&f));
            assert!(matches!(
                s.delivered(server, f, true),
                Outcome::Accepted { .. }
            ));
        }
        assert!(s.is_done());
    }

    #[test]
    fn adaptive_lets_the_faster_server_take_more() {
        let mut s = Scheduler::new(Mode::Adaptive, 10, &[0, 1], &[]);
        // Server 1 completes three fragments in the time server 0 completes one.
        let mut got = [0usize; 2];
        let mut in_flight = [s.next(0), s.next(1)];
        let mut tick = 0;
        while !s.is_done() {
            tick += 1;
            for server in [0, 1] {
                if server == 0 && tick % 3 != 0 {
                    continue;
                }
                if let Some(f) = in_flight[server] {
                    if let Outcome::Accepted { .. } = s.delivered(server, f, true) {
                        got[server] += 1;
                    }
                }
                in_flight[server] = s.next(server);
            }
        }
        assert!(got[1] >= 2 * got[0], "{got:?}");
        assert_eq!(got[0] + got[1], 10);
    }

    #[test]
    fn end_game_doubles_the_last_fragment_and_cancels_the_loser() {
        let mut s = Scheduler::new(Mode::Adaptive, 2, &[0, 1], &[]);
        assert_eq!(s.next(0), Some(0));
        assert_eq!(s.next(1), Some(1));
        assert!(matches!(s.delivered(1, 1, true), Outcome::Accepted { .. }));
        // Server 1 is idle: it asks for fragment 0 too.
        assert_eq!(s.next(1), Some(0));
        assert_eq!(s.next(1), None, "at most two copies");
        assert_eq!(
            s.delivered(1, 0, true),
            Outcome::Accepted { cancel: vec![0] }
        );
        assert_eq!(s.delivered(0, 0, true), Outcome::Duplicate);
        assert!(s.is_done());
    }

    #[test]
    fn a_failed_server_gives_its_work_to_the_others() {
        for mode in [Mode::Adaptive, Mode::Ratio(vec![1, 1])] {
            let mut s = Scheduler::new(mode.clone(), 4, &[0, 1], &[]);
            let a = s.next(0).unwrap();
            s.failed(0);
            assert_eq!(s.next(0), None, "{mode:?}: a dead server gets nothing");
            let mut taken = Vec::new();
            while let Some(f) = s.next(1) {
                taken.push(f);
                s.delivered(1, f, true);
            }
            assert!(taken.contains(&a), "{mode:?}: {taken:?}");
            assert!(s.is_done(), "{mode:?}");
        }
    }

    #[test]
    fn a_corrupt_fragment_is_fetched_again_elsewhere() {
        let mut s = Scheduler::new(Mode::Adaptive, 1, &[0, 1], &[]);
        assert_eq!(s.next(0), Some(0));
        assert_eq!(s.delivered(0, 0, false), Outcome::Corrupt);
        assert_eq!(s.next(0), None, "not from the server that corrupted it");
        assert_eq!(s.next(1), Some(0));
        assert!(matches!(s.delivered(1, 0, true), Outcome::Accepted { .. }));
        // With one server only, it is asked again — a few times, then given up.
        let mut s = Scheduler::new(Mode::Adaptive, 1, &[0], &[]);
        for _ in 0..MAX_TRIES {
            assert_eq!(s.next(0), Some(0));
            assert_eq!(s.delivered(0, 0, false), Outcome::Corrupt);
        }
        assert_eq!(s.next(0), None);
        assert!(s.is_stuck());
    }

    #[test]
    fn a_refusing_server_is_not_asked_again() {
        let mut s = Scheduler::new(Mode::Adaptive, 1, &[0], &[]);
        assert_eq!(s.next(0), Some(0));
        s.dropped(0, 0, true);
        assert_eq!(s.next(0), None);
        assert!(s.is_stuck());
    }

    #[test]
    fn resumed_fetches_skip_what_is_done_and_stuck_is_detected() {
        let mut s = Scheduler::new(Mode::Adaptive, 3, &[0], &[true, false, true]);
        assert_eq!(s.remaining(), 1);
        assert_eq!(s.next(0), Some(1));
        assert_eq!(s.next(0), None);
        s.dropped(0, 1, true);
        s.failed(0);
        assert!(s.is_stuck());
    }

    // Two servers, two connections each: workers 0 and 1 are server 0's, 2 and 3
    // server 1's.
    const TWO_EACH: [ServerId; 4] = [0, 0, 1, 1];

    #[test]
    fn a_refusal_is_the_servers_not_the_connections() {
        let mut s = Scheduler::new(Mode::Adaptive, 1, &TWO_EACH, &[]);
        assert_eq!(s.next(0), Some(0));
        s.dropped(0, 0, true);
        assert_eq!(s.next(1), None, "server 0's other connection is not asked");
        assert_eq!(s.next(2), Some(0));
    }

    #[test]
    fn a_corrupt_copy_sends_the_fragment_to_another_server_not_another_connection() {
        let mut s = Scheduler::new(Mode::Adaptive, 1, &TWO_EACH, &[]);
        assert_eq!(s.next(1), Some(0));
        assert_eq!(s.delivered(1, 0, false), Outcome::Corrupt);
        assert_eq!(s.next(0), None, "not from the server that corrupted it");
        assert_eq!(s.next(3), Some(0));
    }

    #[test]
    fn the_end_game_copy_comes_from_another_server() {
        let mut s = Scheduler::new(Mode::Adaptive, 2, &TWO_EACH, &[]);
        assert_eq!(s.next(0), Some(0));
        assert_eq!(s.next(2), Some(1));
        assert!(matches!(s.delivered(2, 1, true), Outcome::Accepted { .. }));
        // Fragment 0 is in flight on server 0: its other connection does not double it.
        assert_eq!(s.next(1), None);
        assert_eq!(s.next(3), Some(0));
        assert_eq!(
            s.delivered(3, 0, true),
            Outcome::Accepted { cancel: vec![0] }
        );
    }

    #[test]
    fn a_failed_connection_leaves_its_server_working() {
        for mode in [Mode::Adaptive, Mode::Ratio(vec![1, 1])] {
            let mut s = Scheduler::new(mode.clone(), 8, &TWO_EACH, &[]);
            let held = s.next(0).expect("work");
            s.failed(0);
            assert!(s.server_alive(0), "{mode:?}");
            assert_eq!(
                s.next(0),
                None,
                "{mode:?}: the failed connection gets nothing"
            );
            // Server 0's other connection takes work, the failed one's included.
            let mut taken = Vec::new();
            for w in [1, 2, 3].into_iter().cycle().take(40) {
                if let Some(f) = s.next(w) {
                    taken.push((w, f));
                    s.delivered(w, f, true);
                }
            }
            assert!(taken.iter().any(|&(w, _)| w == 1), "{mode:?}: {taken:?}");
            assert!(taken.iter().any(|&(_, f)| f == held), "{mode:?}: {taken:?}");
            assert!(s.is_done(), "{mode:?}");
            s.failed(1);
            assert!(!s.server_alive(0), "{mode:?}");
            assert!(s.server_alive(1), "{mode:?}");
        }
    }

    #[test]
    fn a_ratio_is_the_servers_whatever_their_connections() {
        // 1:2 over server 0 with two connections and server 1 with one: server 0 gets a
        // third, dealt between its connections in turn.
        let mut s = Scheduler::new(Mode::Ratio(vec![1, 2]), 9, &[0, 0, 1], &[]);
        let mut got = [Vec::new(), Vec::new(), Vec::new()];
        for (w, got) in got.iter_mut().enumerate() {
            while let Some(f) = s.next(w) {
                got.push(f);
            }
        }
        assert_eq!(got, [vec![0, 6], vec![3], vec![1, 2, 4, 5, 7, 8]]);
        // A server with no connection leaves its share to the others.
        let mut s = Scheduler::new(Mode::Ratio(vec![1, 2]), 3, &[1], &[]);
        let mut taken = Vec::new();
        while let Some(f) = s.next(0) {
            taken.push(f);
        }
        assert_eq!(taken, [1, 2, 0]);
    }
}
