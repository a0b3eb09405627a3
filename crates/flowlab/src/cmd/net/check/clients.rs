//! The check's `flowlab test` clients and `flowlab serve` servers, each a child process
//! in its node's namespace, and the results they hand back.
//!
//! They run as child processes, not as threads of this one: a client that hangs on a
//! path that stopped is killed on an early return ([`Reaped`]), which a thread cannot
//! be. What they exchange is the result itself: the `-J` document is read back into the
//! [`TestResult`] it was written from, no field picked by name.

use std::net::Ipv4Addr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use flowlab_net::build::ns_name;
use flowlab_net::topology::PathInfo;
use flowlab_report::result::{SideTotals, TestResult};

use super::pairs::Pair;
pub use crate::cmd::Reaped;

/// One pair's measurement, with what it needs.
pub struct Job<'a> {
    pub topo: &'a str,
    pub pair: &'a Pair,
    pub implied: &'a PathInfo,
    pub to: Ipv4Addr,
    pub port: u16,
    /// The links an echo crosses, there and back, and whether each is crossed from its
    /// `a` end (for the emulator's counters of that direction).
    pub crossings: Vec<(&'a str, bool)>,
}

/// A `flowlab test` from `job`'s source to its server, started (not waited for).
pub fn client(job: &Job<'_>, args: &[String]) -> anyhow::Result<Child> {
    Ok(Command::new("ip")
        .args(["netns", "exec", &ns_name(job.topo, &job.pair.from)])
        .arg(crate::cmd::own_binary()?)
        .args([
            "test",
            &job.to.to_string(),
            "-p",
            &job.port.to_string(),
            "-J",
        ])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?)
}

/// Waits for a client and reads its result; `Ok(Err(..))` when it could not connect (the
/// server may not be listening yet: the caller decides whether to retry).
pub fn result(job: &Job<'_>, child: &mut Child) -> anyhow::Result<Result<TestResult, TestFailed>> {
    use std::io::Read;
    let mut out = Vec::new();
    if let Some(mut stdout) = child.stdout.take() {
        stdout.read_to_end(&mut out)?;
    }
    child.wait()?;
    let pair = || format!("{} -> {}", job.pair.from, job.pair.to);
    if let Ok(failed) = serde_json::from_slice::<TestFailed>(&out) {
        if failed.error.contains("cannot connect") {
            return Ok(Err(failed));
        }
        anyhow::bail!("{}: {failed}", pair());
    }
    let r: TestResult = serde_json::from_slice(&out)
        .with_context(|| format!("{}: reading the test's result", pair()))?;
    Ok(Ok(r))
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

/// Whether a TCP socket listens on `port` in namespace `ns` (read from the namespace's
/// own /proc/thread-self/net/tcp and tcp6, without connecting to it).
pub fn listening(ns: &str, port: u16) -> bool {
    let hex = format!(":{port:04X} ");
    flowlab_net::netns::run_in(ns, move || {
        // The server may listen on IPv4 or on a dual-stack IPv6 socket.
        let mut table = std::fs::read_to_string("/proc/thread-self/net/tcp")?;
        table.push_str(&std::fs::read_to_string("/proc/thread-self/net/tcp6").unwrap_or_default());
        // Fields: sl local_address rem_address st …; st 0A is LISTEN.
        Ok(table.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && format!("{} ", f[1]).ends_with(&hex) && f[3] == "0A"
        }))
    })
    .unwrap_or(false)
}

/// Runs a client to completion, retrying while its server is not listening yet (5 s).
pub fn run_client(job: &Job<'_>, args: &[String]) -> anyhow::Result<TestResult> {
    let mut why = None;
    for _ in 0..50 {
        match result(job, &mut Reaped(client(job, args)?).0)? {
            Ok(v) => return Ok(v),
            Err(e) => why = Some(e),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    anyhow::bail!(
        "{} -> {}: the server did not start ({})",
        job.pair.from,
        job.pair.to,
        why.map(|e| e.to_string()).unwrap_or_default()
    )
}
