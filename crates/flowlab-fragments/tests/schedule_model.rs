//! The scheduler against a model: the first, obviously correct version, which scanned
//! every fragment on every call. Random sequences of requests, deliveries (good and
//! corrupt), refusals, cancels and failed connections must get the same answers from
//! both, in both modes, with one or two connections per server.

use flowlab_fragments::schedule::{
    FragmentId, MAX_TRIES, Mode, Outcome, Scheduler, ServerId, WorkerId, assign_ratio,
};
use proptest::prelude::*;

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Pending,
    InFlight(Vec<WorkerId>),
    Done,
}

/// The scheduler's state.
#[derive(Debug, Clone)]
struct Model {
    mode: Mode,
    states: Vec<State>,
    /// Ratio mode: each worker's share, in order.
    shares: Vec<Vec<FragmentId>>,
    /// Each worker's server.
    owner: Vec<ServerId>,
    /// Per worker: not failed.
    alive: Vec<bool>,
    /// Per fragment: servers whose copy failed verification, once per failure.
    corrupt_from: Vec<Vec<ServerId>>,
    /// Per fragment: servers that refused it.
    refused_by: Vec<Vec<ServerId>>,
}

impl Model {
    /// A schedule for `fragments` fragments over one worker per entry of `owner` (the
    /// worker's server). In ratio mode the ratio has one part per server; each server's
    /// share is dealt among its workers in turn (a server with no worker leaves its share
    /// to the others). `done` marks the fragments already verified on disk (a resumed
    /// fetch).
    fn new(mode: Mode, fragments: usize, owner: &[ServerId], done: &[bool]) -> Model {
        let workers = owner.len();
        let states: Vec<State> = (0..fragments)
            .map(|i| {
                if done.get(i).copied().unwrap_or(false) {
                    State::Done
                } else {
                    State::Pending
                }
            })
            .collect();
        let mut shares = vec![Vec::new(); workers];
        if let Mode::Ratio(r) = &mode {
            let mut next_of = vec![0usize; r.len()];
            for (frag, server) in assign_ratio(fragments, r).into_iter().enumerate() {
                let own: Vec<WorkerId> = (0..workers).filter(|&w| owner[w] == server).collect();
                if own.is_empty() {
                    continue;
                }
                shares[own[next_of[server] % own.len()]].push(frag);
                next_of[server] += 1;
            }
        }
        Model {
            mode,
            states,
            shares,
            owner: owner.to_vec(),
            alive: vec![true; workers],
            corrupt_from: vec![Vec::new(); fragments],
            refused_by: vec![Vec::new(); fragments],
        }
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
            s => *s = State::InFlight(vec![worker]),
        }
        frag
    }

    /// Whether any of `server`'s workers still runs.
    fn server_alive(&self, server: ServerId) -> bool {
        self.owner
            .iter()
            .zip(&self.alive)
            .any(|(&o, &alive)| o == server && alive)
    }

    /// The fragment `worker` should request next, if any.
    fn next(&mut self, worker: WorkerId) -> Option<FragmentId> {
        if !self.alive.get(worker).copied().unwrap_or(false) {
            return None;
        }
        let server = self.owner[worker];
        let pending =
            |s: &Model, f: FragmentId| s.states[f] == State::Pending && s.eligible(worker, f);
        // Its own share first (ratio mode), then anything pending (work put back by a
        // failed server, or everything in adaptive mode).
        if let Some(&f) = self.shares[worker].iter().find(|&&f| pending(self, f)) {
            return Some(self.claim(worker, f));
        }
        let from_queue = match self.mode {
            Mode::Adaptive => true,
            // Ratio mode: only fragments whose assigned server is gone or refused them.
            Mode::Ratio(_) => false,
        };
        let orphaned = |s: &Model, f: FragmentId| {
            !s.shares
                .iter()
                .enumerate()
                .any(|(w, share)| w != worker && share.contains(&f) && s.eligible(w, f))
        };
        if let Some(f) =
            (0..self.states.len()).find(|&f| pending(self, f) && (from_queue || orphaned(self, f)))
        {
            return Some(self.claim(worker, f));
        }
        // End game (adaptive): a second copy of something in flight on another server —
        // the one handed out last (fragments go out in order), which will finish last. Not
        // from another connection to the same server: that copy would race the first on
        // the same path.
        if self.mode == Mode::Adaptive {
            let candidate = (0..self.states.len())
                .rev()
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
                self.states[frag] = State::Pending;
            }
        }
    }

    /// `worker` delivered `frag`; `verified` says whether its hash matched.
    fn delivered(&mut self, worker: WorkerId, frag: FragmentId, verified: bool) -> Outcome {
        if self.states[frag] == State::Done {
            return Outcome::Duplicate;
        }
        if !verified {
            self.corrupt_from[frag].push(self.owner[worker]);
            self.release(worker, frag);
            return Outcome::Corrupt;
        }
        let cancel = match &self.states[frag] {
            State::InFlight(h) => h.iter().copied().filter(|&w| w != worker).collect(),
            _ => Vec::new(),
        };
        self.states[frag] = State::Done;
        Outcome::Accepted { cancel }
    }

    /// `worker` will not deliver `frag` (cancelled, or refused by its server).
    fn dropped(&mut self, worker: WorkerId, frag: FragmentId, refused: bool) {
        if refused {
            self.refused_by[frag].push(self.owner[worker]);
        }
        self.release(worker, frag);
    }

    /// `worker`'s connection failed or stalled: everything it held goes back to the
    /// others (its server's other connections included).
    fn failed(&mut self, worker: WorkerId) {
        self.alive[worker] = false;
        for f in 0..self.states.len() {
            self.release(worker, f);
        }
    }

    fn is_done(&self) -> bool {
        self.states.iter().all(|s| *s == State::Done)
    }

    /// True when nothing can make progress any more: fragments left, no live server that
    /// may fetch them.
    fn is_stuck(&self) -> bool {
        !self.is_done()
            && self.states.iter().enumerate().all(|(f, s)| match s {
                State::Done => true,
                State::InFlight(_) => false,
                State::Pending => (0..self.alive.len()).all(|w| !self.eligible(w, f)),
            })
    }

    fn remaining(&self) -> usize {
        self.states.iter().filter(|s| **s != State::Done).count()
    }
}

#[derive(Debug, Clone)]
enum Op {
    Next(WorkerId),
    /// Deliver the worker's oldest fragment in flight, verified or not.
    Deliver(WorkerId, bool),
    /// Drop the worker's oldest fragment in flight, refused or cancelled.
    Drop(WorkerId, bool),
    Fail(WorkerId),
}

fn op(workers: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..workers).prop_map(Op::Next),
        6 => (0..workers, prop::bool::weighted(0.85)).prop_map(|(w, ok)| Op::Deliver(w, ok)),
        1 => (0..workers, any::<bool>()).prop_map(|(w, r)| Op::Drop(w, r)),
        1 => (0..workers).prop_map(Op::Fail),
    ]
}

fn setup() -> impl Strategy<Value = (Mode, Vec<ServerId>, usize, Vec<bool>)> {
    let mode = prop_oneof![
        Just(Mode::Adaptive),
        (1u32..4, 1u32..4).prop_map(|(a, b)| Mode::Ratio(vec![a, b])),
    ];
    let owner = prop_oneof![
        Just(vec![0, 1]),
        Just(vec![0, 0, 1, 1]),
        Just(vec![0, 1, 1]),
        Just(vec![1]),
    ];
    (mode, owner, 1usize..24).prop_flat_map(|(mode, owner, n)| {
        (
            Just(mode),
            Just(owner),
            Just(n),
            prop::collection::vec(prop::bool::weighted(0.2), n),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn the_scheduler_answers_as_the_model_does(
        (mode, owner, n, done) in setup(),
        ops in prop::collection::vec(op(4), 1..200),
    ) {
        let workers = owner.len();
        let mut s = Scheduler::new(mode.clone(), n, &owner, &done);
        let mut m = Model::new(mode, n, &owner, &done);
        // What each worker holds, oldest first (as a connection's requests).
        let mut held: Vec<Vec<FragmentId>> = vec![Vec::new(); workers];
        for op in ops {
            match op {
                Op::Next(w) if w < workers => {
                    let got = s.next(w);
                    prop_assert_eq!(got, m.next(w), "next({})", w);
                    held[w].extend(got);
                }
                Op::Deliver(w, ok) if w < workers && !held[w].is_empty() => {
                    let f = held[w].remove(0);
                    let got = s.delivered(w, f, ok);
                    prop_assert_eq!(&got, &m.delivered(w, f, ok), "delivered({}, {}, {})", w, f, ok);
                    if let Outcome::Accepted { cancel } = got {
                        for c in cancel {
                            held[c].retain(|&x| x != f);
                            s.dropped(c, f, false);
                            m.dropped(c, f, false);
                        }
                    }
                }
                Op::Drop(w, refused) if w < workers && !held[w].is_empty() => {
                    let f = held[w].remove(0);
                    s.dropped(w, f, refused);
                    m.dropped(w, f, refused);
                }
                Op::Fail(w) if w < workers => {
                    held[w].clear();
                    s.failed(w);
                    m.failed(w);
                }
                _ => continue,
            }
            prop_assert_eq!(s.is_done(), m.is_done());
            prop_assert_eq!(s.is_stuck(), m.is_stuck());
            prop_assert_eq!(s.remaining(), m.remaining());
            for server in 0..2 {
                prop_assert_eq!(s.server_alive(server), m.server_alive(server));
            }
        }
    }
}
