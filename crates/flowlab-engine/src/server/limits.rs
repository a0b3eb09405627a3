//! The server's limits on what peers may cost it: connections in their handshake (in
//! all and per source), new connections per second per source, and log lines per second.

use std::collections::HashMap;
use std::net::{IpAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flowlab_proto::source::source_key;
use flowlab_results::server::ServerEvent;

use super::{ServerLog, Shared};

/// The connections in their handshake: how many per source, and each one (a handle to
/// close it by, its source) in the order they came.
#[derive(Default)]
pub(super) struct Handshakes {
    per_source: HashMap<IpAddr, usize>,
    open: std::collections::BTreeMap<u64, (TcpStream, IpAddr)>,
    next: u64,
}

impl Handshakes {
    fn forget(&mut self, seq: u64) {
        if let Some((_, source)) = self.open.remove(&seq) {
            if let Some(n) = self.per_source.get_mut(&source) {
                *n -= 1;
                if *n == 0 {
                    self.per_source.remove(&source);
                }
            }
        }
    }
}

/// A connection counted as in its handshake (see `ServerConfig::max_handshakes`) until
/// this is dropped, or until a newer connection needs its place. It holds the server's
/// shared state for the connection's thread.
pub(super) struct Handshake {
    shared: Arc<Shared>,
    seq: u64,
}

impl Handshake {
    /// Counts a new connection from `source`; `None` when its source is at its limit.
    /// When every place is taken, the oldest connection in its handshake is shut down
    /// (its thread sees its read fail) and gives up its place.
    pub(super) fn admit(
        shared: &Arc<Shared>,
        conn: &TcpStream,
        source: IpAddr,
    ) -> Option<Handshake> {
        let source = source_key(source);
        let handle = conn.try_clone().ok()?;
        let mut h = shared.handshakes.lock().ok()?;
        if h.per_source.get(&source).copied().unwrap_or(0) >= shared.cfg.max_handshakes_per_source {
            return None;
        }
        while h.open.len() >= shared.cfg.max_handshakes.max(1) {
            let Some((&oldest, _)) = h.open.first_key_value() else {
                break;
            };
            if let Some((c, _)) = h.open.get(&oldest) {
                let _ = c.shutdown(std::net::Shutdown::Both);
            }
            h.forget(oldest);
        }
        let seq = h.next;
        h.next += 1;
        *h.per_source.entry(source).or_default() += 1;
        h.open.insert(seq, (handle, source));
        Some(Handshake {
            shared: Arc::clone(shared),
            seq,
        })
    }

    pub(super) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

impl Drop for Handshake {
    fn drop(&mut self) {
        if let Ok(mut h) = self.shared.handshakes.lock() {
            h.forget(self.seq);
        }
    }
}

/// A log that passes at most `per_second` refusals and failures a second (a flood of bad
/// handshakes, of failed authentications, of parameters refused, is a line per
/// connection), and says how many it left out with the next line it writes. A test that
/// started is always logged, and so is its end, however it ended: the pair is the record
/// of a test that held a slot (at most `--max-tests` at once), and a reader of the log
/// (`--iperf3-json`) waits for the end of every start it saw.
pub(super) struct RateLimited {
    inner: Arc<dyn ServerLog>,
    per_second: u32,
    state: Mutex<LogState>,
}

struct LogState {
    /// The current one-second window's start, and the lines passed in it.
    window: Instant,
    passed: u32,
    /// Lines left out since the last summary.
    left_out: u64,
    /// Tests whose start was logged and whose end was not yet.
    started: std::collections::HashSet<u64>,
}

impl RateLimited {
    pub(super) fn new(inner: Arc<dyn ServerLog>, per_second: u32) -> RateLimited {
        RateLimited {
            inner,
            per_second,
            state: Mutex::new(LogState {
                window: Instant::now(),
                passed: 0,
                left_out: 0,
                started: std::collections::HashSet::new(),
            }),
        }
    }
}

impl ServerLog for RateLimited {
    fn output(&self, events: &[ServerEvent]) -> flowlab_results::result::ServerOutput {
        self.inner.output(events)
    }

    fn event(&self, event: ServerEvent) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        // Refusals and failures before a test started are what a flood is made of.
        let limited = match &event {
            ServerEvent::TestStarted { test, .. } => {
                s.started.insert(*test);
                false
            }
            ServerEvent::TestFinished { test, .. } => {
                s.started.remove(test);
                false
            }
            ServerEvent::TestFailed { test: Some(id), .. } => !s.started.remove(id),
            ServerEvent::Refused { .. } | ServerEvent::TestFailed { test: None, .. } => true,
            _ => false,
        };
        if s.window.elapsed() >= Duration::from_secs(1) {
            s.window = Instant::now();
            s.passed = 0;
        }
        if limited && s.passed >= self.per_second {
            s.left_out += 1;
            return;
        }
        if limited {
            s.passed += 1;
        }
        let summary = std::mem::take(&mut s.left_out);
        drop(s);
        if summary > 0 {
            self.inner.event(ServerEvent::Suppressed { count: summary });
        }
        self.inner.event(event);
    }
}

/// Connections a service holds at once, in all and per source (the fragment service's,
/// the TCP echo's): each costs threads for as long as it lasts.
#[derive(Debug)]
pub struct Places {
    max: usize,
    per_source: usize,
    /// What the places are for, and the flags that set the two limits (for the refusal).
    what: &'static str,
    flags: [&'static str; 2],
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// A place among a service's connections, given back when dropped.
#[derive(Debug)]
pub struct Place<'a> {
    places: &'a Places,
    source: IpAddr,
}

impl Places {
    /// `max` places, `per_source` from one source (both at least 1); `what` names them
    /// and `flags` the options that set the two limits, in the refusal.
    pub fn new(
        max: usize,
        per_source: usize,
        what: &'static str,
        flags: [&'static str; 2],
    ) -> Places {
        Places {
            max: max.max(1),
            per_source: per_source.max(1),
            what,
            flags,
            open: Mutex::new(HashMap::new()),
        }
    }

    /// A place for a connection from `source`, or the busy message that says which
    /// limit is reached.
    pub fn take(&self, source: IpAddr) -> Result<Place<'_>, String> {
        let source = source_key(source);
        let mut open = self.open.lock().map_err(|_| "lock poisoned".to_string())?;
        let total: usize = open.values().sum();
        if total >= self.max {
            return Err(format!(
                "busy: {total} {} open ({})",
                self.what, self.flags[0]
            ));
        }
        let mine = open.entry(source).or_default();
        if *mine >= self.per_source {
            return Err(format!(
                "busy: {mine} {} open from this address ({})",
                self.what, self.flags[1]
            ));
        }
        *mine += 1;
        Ok(Place {
            places: self,
            source,
        })
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        if let Ok(mut open) = self.places.open.lock() {
            if let Some(n) = open.get_mut(&self.source) {
                *n -= 1;
                if *n == 0 {
                    open.remove(&self.source);
                }
            }
        }
    }
}

/// New connections per second per source (`--handshake-rate`): a token bucket per
/// source that holds `burst` connections and refills at `per_second`. A source whose
/// bucket is empty has its connections closed at accept.
pub(super) struct RateGate {
    per_second: f64,
    burst: f64,
    state: Mutex<GateState>,
}

struct GateState {
    /// Per source: connections left in its bucket, and when that was counted.
    buckets: HashMap<IpAddr, (f64, Instant)>,
    /// Sources tracked before the full buckets (sources quiet for a while) are forgotten.
    sweep_at: usize,
}

/// Sources tracked before the first sweep.
const SWEEP_AT: usize = 4096;
/// Sources tracked at most (about 3 MiB). Beyond it, connections from a source not yet
/// tracked are let through to the other limits (handshakes in all and per source), which
/// still bound what they cost.
const MAX_TRACKED: usize = 65_536;

impl RateGate {
    /// `per_second` connections a second per source, in bursts of up to four seconds' worth.
    pub(super) fn new(per_second: u32) -> RateGate {
        let per_second = f64::from(per_second.max(1));
        RateGate {
            per_second,
            burst: 4.0 * per_second,
            state: Mutex::new(GateState {
                buckets: HashMap::new(),
                sweep_at: SWEEP_AT,
            }),
        }
    }

    /// Whether a new connection from `source` may be served.
    pub(super) fn allow(&self, source: IpAddr) -> bool {
        self.allow_n(source, 1)
    }

    /// Whether something that costs `cost` from `source` may be served (taking `cost`
    /// from its bucket if so).
    pub(super) fn allow_n(&self, source: IpAddr, cost: u32) -> bool {
        self.allow_at(source_key(source), Instant::now(), cost)
    }

    fn allow_at(&self, source: IpAddr, now: Instant, cost: u32) -> bool {
        let Ok(mut s) = self.state.lock() else {
            return true;
        };
        let (rate, burst) = (self.per_second, self.burst);
        let level = |(left, at): (f64, Instant)| {
            (left + now.saturating_duration_since(at).as_secs_f64() * rate).min(burst)
        };
        if !s.buckets.contains_key(&source) && s.buckets.len() >= s.sweep_at {
            // A source whose bucket has refilled is as good as new: forget it. The next
            // sweep waits until the map has doubled, so sweeping stays cheap per accept.
            s.buckets.retain(|_, b| level(*b) < burst);
            s.sweep_at = (2 * s.buckets.len()).max(SWEEP_AT);
            if s.buckets.len() >= MAX_TRACKED {
                return true;
            }
        }
        let cost = f64::from(cost.max(1));
        let bucket = s.buckets.entry(source).or_insert((burst, now));
        let left = level(*bucket);
        let allowed = left >= cost;
        *bucket = (if allowed { left - cost } else { left }, now);
        allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[derive(Default)]
    struct Collect(Mutex<Vec<ServerEvent>>);
    impl ServerLog for Collect {
        fn event(&self, e: ServerEvent) {
            self.0.lock().unwrap().push(e);
        }

        fn output(&self, _: &[ServerEvent]) -> flowlab_results::result::ServerOutput {
            flowlab_results::result::ServerOutput::Text(String::new())
        }
    }

    #[test]
    fn a_source_gets_its_burst_then_its_rate() {
        let gate = RateGate::new(10);
        let a = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
        let b = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2));
        let t0 = Instant::now();
        let passed = (0..100).filter(|_| gate.allow_at(a, t0, 1)).count();
        assert_eq!(passed, 40, "a burst of four seconds' worth");
        assert!(gate.allow_at(b, t0, 1), "another source has its own bucket");
        let later = t0 + Duration::from_millis(500);
        let passed = (0..100).filter(|_| gate.allow_at(a, later, 1)).count();
        assert_eq!(passed, 5, "half a second refills five");
        let much_later = t0 + Duration::from_secs(60);
        let passed = (0..100).filter(|_| gate.allow_at(a, much_later, 1)).count();
        assert_eq!(passed, 40, "a bucket never holds more than the burst");
        let c = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 3));
        let passed = (0..100).filter(|_| gate.allow_at(c, t0, 7)).count();
        assert_eq!(passed, 5, "what costs 7 takes 7 of the 40");
    }

    #[test]
    fn quiet_sources_are_forgotten_and_the_map_stays_bounded() {
        let fill = |gate: &RateGate, t: Instant| {
            for i in 0..SWEEP_AT as u32 {
                assert!(gate.allow_at(IpAddr::V4(Ipv4Addr::from(i)), t, 1));
            }
        };
        let tracked = |gate: &RateGate| gate.state.lock().unwrap().buckets.len();
        let newcomer = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let t0 = Instant::now();
        // Busy sources (buckets not yet refilled) are all kept; the next sweep waits
        // until the map has doubled.
        let gate = RateGate::new(1);
        fill(&gate, t0);
        assert!(gate.allow_at(newcomer, t0, 1));
        assert_eq!(tracked(&gate), SWEEP_AT + 1);
        assert_eq!(gate.state.lock().unwrap().sweep_at, 2 * SWEEP_AT);
        // Ten seconds on, every bucket has refilled: the next new source sweeps them.
        let gate = RateGate::new(1);
        fill(&gate, t0);
        assert!(gate.allow_at(newcomer, t0 + Duration::from_secs(10), 1));
        assert_eq!(tracked(&gate), 1);
    }

    #[test]
    fn refusals_beyond_the_log_rate_are_counted_and_the_count_logged_next_and_a_test_never() {
        let inner = Arc::new(Collect::default());
        let log = RateLimited::new(inner.clone(), 5);
        let refused = |i: usize| ServerEvent::Refused {
            peer: format!("192.0.2.{i}:1"),
            kind: flowlab_results::server::RefusalKind::Flood,
            reason: "flood".into(),
        };
        for i in 0..50 {
            log.event(refused(i));
        }
        // A test's own events are never held back: its start, and its end however it
        // ended; a failure of a test that never started is a refusal like the others.
        log.event(ServerEvent::TestFailed {
            test: Some(7),
            peer: "p".into(),
            error: "authentication failed".into(),
        });
        log.event(ServerEvent::TestStarted {
            test: 8,
            peer: "p".into(),
            protocol: "tcp".into(),
            streams: 1,
            reverse: false,
            bidir: false,
            client: None,
            multicast: None,
        });
        log.event(ServerEvent::TestFailed {
            test: Some(8),
            peer: "p".into(),
            error: "the client vanished".into(),
        });
        log.event(ServerEvent::TestFinished {
            test: 1,
            peer: "p".into(),
            bytes_received: 1,
            bytes_sent: 0,
            seconds: 1.0,
            mptcp_subflows: None,
        });
        std::thread::sleep(Duration::from_millis(1050));
        log.event(refused(99));
        let got = inner.0.lock().unwrap();
        let kinds: Vec<String> = got
            .iter()
            .map(|e| match e {
                ServerEvent::Refused { peer, .. } => format!("refused {peer}"),
                ServerEvent::Suppressed { count } => format!("suppressed {count}"),
                ServerEvent::TestFinished { .. } => "finished".into(),
                ServerEvent::TestStarted { test, .. } => format!("started {test}"),
                ServerEvent::TestFailed { test, .. } => format!("failed {test:?}"),
                other => format!("{other:?}"),
            })
            .collect();
        let mut want: Vec<String> = (0..5).map(|i| format!("refused 192.0.2.{i}:1")).collect();
        want.extend([
            "suppressed 46".to_string(),
            "started 8".to_string(),
            "failed Some(8)".to_string(),
            "finished".to_string(),
            "refused 192.0.2.99:1".to_string(),
        ]);
        assert_eq!(kinds, want);
    }
}
