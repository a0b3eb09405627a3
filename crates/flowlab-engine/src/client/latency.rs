//! `flowlab test --latency`: UDP probes to the server's echo service, first with nothing
//! else running (idle), then beside the load from its first byte to its end, on a thread
//! of their own. Each interval of the test gets the round trips of the replies that
//! arrived in it; the whole run becomes the result's [`TestLatency`].

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use flowlab_results::latency::{self, TestLatency};
use flowlab_results::ping::{Latency, PingResult, Probe};

use super::ClientError;
use crate::cpu;
use crate::ping::{PingError, PingObserver, PingSpec, Quiet, ping};

/// Idle probes sent before the load.
pub const IDLE_PROBES: u64 = 20;
/// The longest gap between idle probes (a slower `--latency` interval still measures the
/// idle round trip in under a second).
const IDLE_GAP: Duration = Duration::from_millis(20);
/// Bytes per probe.
const SIZE: usize = 64;
/// How long a probe's reply is waited for after the load ended.
const REPLY_WAIT: Duration = Duration::from_secs(1);

/// The probe settings for the server at `server`.
fn spec(server: SocketAddr, interval: Duration) -> PingSpec {
    let mut s = PingSpec::new(&server.ip().to_string(), server.port());
    s.size = SIZE;
    s.interval = interval;
    s.timeout = REPLY_WAIT;
    s
}

/// The idle round trips: [`IDLE_PROBES`] probes. A server that answers none of them has
/// no echo service (a stock iperf3, an older flowlab) or its UDP port is blocked: the test
/// is refused before any load is sent.
pub(super) fn idle(
    server: SocketAddr,
    interval: Duration,
    interrupt: &AtomicBool,
) -> Result<PingResult, ClientError> {
    let mut s = spec(server, interval.min(IDLE_GAP));
    s.count = Some(IDLE_PROBES);
    let run = ping(&s, interrupt, &Quiet).map_err(|e| probe_error(server, e))?;
    if run.summary.received == 0 && !interrupt.load(Ordering::Acquire) {
        return Err(ClientError::NoEcho(server));
    }
    Ok(run)
}

fn probe_error(server: SocketAddr, e: PingError) -> ClientError {
    ClientError::Probes(format!("latency probes to {server}: {e}"))
}

/// Loaded probes as their replies come, timed from the load's start.
struct Feed {
    /// The load's start, ns since the Unix epoch.
    load_epoch_ns: u64,
    /// The probing run's start, ns since the Unix epoch (0 until it starts).
    run_epoch_ns: AtomicU64,
    answered: Mutex<Vec<Probe>>,
}

impl Feed {
    /// ns to add to a probe's times (since the run's start) to time it from the load's.
    fn shift(&self) -> u64 {
        self.run_epoch_ns
            .load(Ordering::Acquire)
            .saturating_sub(self.load_epoch_ns)
    }
}

impl PingObserver for Feed {
    fn started(&self, epoch_ns: u64) {
        self.run_epoch_ns.store(epoch_ns, Ordering::Release);
    }

    fn reply(&self, probe: &Probe, _from: SocketAddr, _size: usize) {
        let p = shifted(probe.clone(), self.shift());
        self.answered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(p);
    }
}

fn shifted(mut p: Probe, by: u64) -> Probe {
    p.sent_ns += by;
    p.received_ns = p.received_ns.map(|r| r + by);
    p
}

/// Probes running beside the load.
pub(super) struct LoadProber {
    feed: Arc<Feed>,
    /// Set when the load ends: no more probes; outstanding replies are still awaited.
    enough: Arc<AtomicBool>,
    /// Set to end at once (an error ended the test).
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<PingResult, PingError>>>,
    server: SocketAddr,
    interval: Duration,
    idle: PingResult,
}

impl LoadProber {
    /// Starts probing `server` every `interval`; `load_epoch` is the instant the load
    /// started (the test's time zero).
    pub(super) fn start(
        server: SocketAddr,
        interval: Duration,
        idle: PingResult,
        load_epoch: Instant,
    ) -> Result<LoadProber, ClientError> {
        let feed = Arc::new(Feed {
            load_epoch_ns: cpu::unix_now_ns()
                .saturating_sub(load_epoch.elapsed().as_nanos() as u64),
            run_epoch_ns: AtomicU64::new(0),
            answered: Mutex::new(Vec::new()),
        });
        let enough = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let mut s = spec(server, interval);
        s.until = Some(Arc::clone(&enough));
        let thread = {
            let (feed, stop) = (Arc::clone(&feed), Arc::clone(&stop));
            std::thread::Builder::new()
                .name("flowlab-latency".into())
                .spawn(move || ping(&s, &stop, feed.as_ref()))
                .map_err(|e| ClientError::Probes(format!("starting the latency probes: {e}")))?
        };
        Ok(LoadProber {
            feed,
            enough,
            stop,
            thread: Some(thread),
            server,
            interval,
            idle,
        })
    }

    /// The round trips of the replies that arrived from `start` to `end`, seconds since
    /// the load started.
    pub(super) fn between(&self, start: f64, end: f64) -> Option<Latency> {
        let answered = self
            .feed
            .answered
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        latency::arrived_between(&answered, start, end)
    }

    /// Stops sending probes (the load is over); replies still on their way are awaited
    /// by [`finish`](Self::finish).
    pub(super) fn load_ended(&self) {
        self.enough.store(true, Ordering::Release);
    }

    /// Waits for the last replies (at most a second) and sums the run up.
    pub(super) fn finish(mut self) -> Result<TestLatency, ClientError> {
        self.load_ended();
        let run = match self.thread.take().map(JoinHandle::join) {
            Some(Ok(run)) => run.map_err(|e| probe_error(self.server, e))?,
            _ => {
                return Err(ClientError::Probes(
                    "the latency probes' thread failed".into(),
                ));
            }
        };
        let by = self.feed.shift();
        let loaded = run.probes.into_iter().map(|p| shifted(p, by)).collect();
        Ok(TestLatency::of(
            SIZE,
            self.interval.as_secs_f64(),
            &run.start.timestamps,
            std::mem::take(&mut self.idle.probes),
            loaded,
        ))
    }
}

impl Drop for LoadProber {
    fn drop(&mut self) {
        // A test that failed: the thread sees this within 100 ms.
        self.stop.store(true, Ordering::Release);
        self.enough.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
