//! The check's `flowlab test` clients and `flowlab serve` servers, each flowlab at the
//! place in its node's namespace, and the results they hand back.
//!
//! They run as processes, not as threads of this one: a client that hangs on a path
//! that stopped is killed on an early return (a [`Process`] dropped), which a thread
//! cannot be. What they exchange is the result itself: the `-J` document is read back
//! into the [`TestResult`] it was written from, no field picked by name.

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;

use flowlab_net::build::ns_name;
use flowlab_net::topology::PathInfo;
use flowlab_results::result::{SideTotals, TestResult};

use super::pairs::Pair;
use crate::Error;
use crate::error::io;
use crate::place::{Job as Run, Output, Place, Process};
use crate::servers::{self, Running};

/// One pair's measurement, with what it needs.
#[derive(Debug)]
pub struct Job<'a> {
    pub topo: &'a str,
    pub pair: &'a Pair,
    pub implied: &'a PathInfo,
    pub to: Ipv4Addr,
    pub port: u16,
    /// The links an echo crosses, there and back, and whether each is crossed from its
    /// `a` end (for the emulator's counters of that direction).
    pub crossings: Vec<(&'a str, bool)>,
    /// Where its server and clients run.
    pub place: &'a dyn Place,
}

impl Job<'_> {
    /// `from -> to`, as errors name the pair.
    pub fn name(&self) -> String {
        format!("{} -> {}", self.pair.from, self.pair.to)
    }
}

/// A `flowlab test` from `job`'s source to its server, started (not waited for).
pub fn client(job: &Job<'_>, args: &[String]) -> Result<Box<dyn Process>, Error> {
    let mut argv = vec![
        "test".to_string(),
        job.to.to_string(),
        "-p".into(),
        job.port.to_string(),
        "-J".into(),
    ];
    argv.extend_from_slice(args);
    let ns = ns_name(job.topo, &job.pair.from);
    let run = Run {
        argv: &argv,
        dir: Path::new("/"),
        ns: Some(&ns),
    };
    job.place
        .start(&run, Output::Keep)
        .map_err(io(format!("{}: starting flowlab test", job.name())))
}

/// A `flowlab serve` in `job`'s destination namespace on the job's port, listening when
/// this returns; stopped when dropped. Its handshake deadline and end grace are
/// generous: the paths checked may lose a share of every packet on purpose, and a lost
/// TEST_END waits for its retransmission (seconds, with backoff) where the public
/// defaults (5 s, 2 s) would end the test first.
pub fn server(job: &Job<'_>) -> Result<Running, Error> {
    let argv: Vec<String> = ["serve", "-J", "-p", &job.port.to_string()]
        .into_iter()
        .chain(["--handshake-timeout", "30", "--end-grace", "15"])
        .map(String::from)
        .collect();
    let ns = ns_name(job.topo, &job.pair.to);
    let name = format!("on {} for {}", job.pair.to, job.name());
    servers::start(job.place, &name, &argv, Some(&ns), Path::new("/"))
}

/// Waits for a client and reads its result; `Ok(Err(..))` when it could not connect (the
/// server may not be listening yet: the caller decides whether to retry).
pub fn result(
    job: &Job<'_>,
    mut client: Box<dyn Process>,
) -> Result<Result<TestResult, TestFailed>, Error> {
    while client
        .try_wait()
        .map_err(io(format!("{}: waiting for the test", job.name())))?
        .is_none()
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = client.finish().stdout;
    if let Ok(failed) = serde_json::from_slice::<TestFailed>(&out) {
        if failed.error.contains("cannot connect") {
            return Ok(Err(failed));
        }
        return Err(Error::Failed(format!("{}: {failed}", job.name())));
    }
    serde_json::from_slice(&out)
        .map(Ok)
        .map_err(io(format!("{}: reading the test's result", job.name())))
}

/// The `-J` document of a test that failed: its error.
#[derive(Debug, serde::Deserialize, thiserror::Error)]
#[error("{error}")]
pub struct TestFailed {
    error: String,
}

/// The receiver's totals of a test's first direction: all its streams together, and
/// each stream (`None`: the test produced no totals).
pub fn received(r: &TestResult) -> Option<(&SideTotals, Vec<&SideTotals>)> {
    let end = r.end.as_ref()?;
    let sum = end.sums.first()?.receiver.as_ref()?;
    let streams = end
        .streams
        .iter()
        .filter_map(|s| s.receiver.as_ref())
        .collect();
    Some((sum, streams))
}

/// Runs a client to completion, retrying while its server cannot be reached (5 s).
pub fn run_client(job: &Job<'_>, args: &[String]) -> Result<TestResult, Error> {
    let mut why = None;
    for _ in 0..50 {
        match result(job, client(job, args)?)? {
            Ok(v) => return Ok(v),
            Err(e) => why = Some(e),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(Error::Failed(format!(
        "{}: the server did not start ({})",
        job.name(),
        why.map(|e| e.to_string()).unwrap_or_default()
    )))
}
