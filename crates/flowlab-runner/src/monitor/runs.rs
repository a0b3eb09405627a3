//! A mesh's runs as flowlab command lines, and their output read back into figures.

use std::time::Duration;

use flowlab_monitor::mesh::{Kind, Mesh, Probe};
use flowlab_monitor::schedule::Run;
use flowlab_results::monitor::{PathKind, PathLatency, PathRun, PathThroughput};
use flowlab_results::ping::PingResult;
use flowlab_results::result::TestResult;

use crate::place::{Exit, Written};

/// The echoes of a latency run go this far apart.
pub const ECHO_INTERVAL: Duration = Duration::from_millis(10);
/// A latency run waits this long for the last echo's reply.
const ECHO_TIMEOUT_S: u64 = 1;
/// What a run may take beyond what it measures (starting, connecting, a slow host)
/// before it is killed and reported as failed.
const SLACK: Duration = Duration::from_secs(15);

/// The server on each target host: `-J` (its first line says its port), a port the
/// kernel picks, and a laboratory's limits (no cap on a test's length, every host's tests
/// bounded only by `--max-tests`).
pub fn serve_line() -> Vec<String> {
    [
        "serve",
        "-J",
        "-p",
        "0",
        "--max-duration",
        "0",
        "--max-tests-per-source",
        crate::study::lines::LAB_TESTS_PER_SOURCE,
    ]
    .map(String::from)
    .to_vec()
}

/// A run's command at its source: to the target's `address` and server `port`.
pub fn run_line(kind: Kind, address: &str, port: u16) -> Vec<String> {
    let mut argv: Vec<String> = match kind {
        Kind::Latency { count } => vec![
            "ping".into(),
            address.to_string(),
            "-c".into(),
            count.to_string(),
            "-i".into(),
            format!("{}ms", ECHO_INTERVAL.as_millis()),
            "-W".into(),
            ECHO_TIMEOUT_S.to_string(),
        ],
        Kind::Throughput { seconds } => vec![
            "test".into(),
            address.to_string(),
            "-t".into(),
            seconds.to_string(),
        ],
    };
    argv.extend(["-p".into(), port.to_string(), "-J".into()]);
    argv
}

/// How long a run of `kind` may take before it is killed.
pub fn deadline(kind: Kind) -> Duration {
    SLACK
        + match kind {
            Kind::Latency { count } => ECHO_INTERVAL * count + Duration::from_secs(ECHO_TIMEOUT_S),
            Kind::Throughput { seconds } => Duration::from_secs(seconds.into()),
        }
}

/// A probe in words: "latency, 20 echoes, 6 pairs every 5 min".
pub fn describe(p: &Probe) -> String {
    let what = match p.kind {
        Kind::Latency { count } => format!("latency, {count} echoes"),
        Kind::Throughput { seconds } => format!("throughput, {seconds} s TCP"),
    };
    let every = p.every.as_secs();
    let every = if every % 3600 == 0 {
        format!("{} h", every / 3600)
    } else if every % 60 == 0 {
        format!("{} min", every / 60)
    } else {
        format!("{every} s")
    };
    let n = p.pairs.len();
    format!(
        "{what}, {n} pair{} every {every}",
        if n == 1 { "" } else { "s" }
    )
}

/// What a run measured.
#[derive(Debug, Clone, PartialEq)]
pub enum Figures {
    Latency(PathLatency),
    Throughput(PathThroughput),
}

/// What a run of `kind` left: its figures, or why it has none. A latency run whose
/// every echo was lost measured that (its document says so; `flowlab ping` exits 1).
pub fn outcome(
    kind: Kind,
    exit: Option<Exit>,
    written: &Written,
    took: Duration,
    deadline: Duration,
) -> Result<Figures, String> {
    let out = String::from_utf8_lossy(&written.stdout);
    let doc = out.trim();
    let Some(exit) = exit else {
        return Err(if took > deadline {
            format!(
                "killed after {:.0} s, past its deadline",
                took.as_secs_f64()
            )
        } else {
            "it could not be waited for".into()
        });
    };
    match kind {
        Kind::Latency { .. } => {
            if let Ok(r) = serde_json::from_str::<PingResult>(doc) {
                return Ok(Figures::Latency(latency(&r)));
            }
        }
        Kind::Throughput { .. } if exit.success() => {
            let r = serde_json::from_str::<TestResult>(doc)
                .map_err(|e| format!("its result does not read: {e}"))?;
            return throughput(&r).map(Figures::Throughput);
        }
        Kind::Throughput { .. } => {}
    }
    let from_json = serde_json::from_str::<serde_json::Value>(doc)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_string));
    let stderr = String::from_utf8_lossy(&written.stderr);
    let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
    Err(match (from_json, last) {
        (Some(e), _) => e,
        (None, Some(l)) => l.trim_start_matches("error: ").to_string(),
        (None, None) => format!("it exited with {exit}"),
    })
}

fn latency(r: &PingResult) -> PathLatency {
    PathLatency {
        sent: r.summary.sent,
        received: r.summary.received,
        loss_percent: r.summary.loss_percent,
        rtt: r.summary.rtt.clone(),
        jitter_ms: r.summary.jitter_ms,
        rtts_ms: r
            .probes
            .iter()
            .filter_map(|p| p.rtt_ns())
            .map(|ns| ns as f64 / 1e6)
            .collect(),
    }
}

fn throughput(r: &TestResult) -> Result<PathThroughput, String> {
    let end = r.end.as_ref().ok_or("its result has no end")?;
    if end.every_stream_failed() {
        let why = end
            .failed_streams
            .first()
            .map_or("every stream failed".into(), |f| f.error.clone());
        return Err(why);
    }
    let sum = end.sums.first().ok_or("its result has no sums")?;
    let (Some(sender), Some(receiver)) = (&sum.sender, &sum.receiver) else {
        return Err("its result lacks the sender's or the receiver's totals".into());
    };
    Ok(PathThroughput {
        sent_bytes: sender.bytes,
        sent_seconds: sender.seconds,
        received_bytes: receiver.bytes,
        received_seconds: receiver.seconds,
        bits_per_second: receiver.bits_per_second,
        retransmits: sender.retransmits,
        congestion: end.congestion_local.clone(),
    })
}

/// The run `run` of `mesh`, with what it measured or why it failed.
pub fn path_run(
    mesh: &Mesh,
    run: &Run,
    kind: Kind,
    argv: &[String],
    (started_unix, ended_unix): (f64, f64),
    outcome: Result<Figures, String>,
) -> PathRun {
    let (error, latency, throughput) = match outcome {
        Ok(Figures::Latency(l)) => (None, Some(l), None),
        Ok(Figures::Throughput(t)) => (None, None, Some(t)),
        Err(why) => (Some(why), None, None),
    };
    PathRun {
        mesh: mesh.name.clone(),
        probe: run.probe,
        kind: match kind {
            Kind::Latency { .. } => PathKind::Latency,
            Kind::Throughput { .. } => PathKind::Throughput,
        },
        source: run.from.clone(),
        target: run.to.clone(),
        direction: "forward".into(),
        round: run.round,
        started_unix,
        ended_unix,
        late_seconds: run.late().as_secs_f64(),
        error,
        latency,
        throughput,
        command: format!("flowlab {}", argv.join(" ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exited(code: i32) -> Option<Exit> {
        Some(Exit {
            code: Some(code),
            signal: None,
        })
    }

    #[test]
    fn a_run_is_the_command_its_kind_says() {
        let at = "10.0.0.2";
        assert_eq!(
            run_line(Kind::Latency { count: 20 }, at, 5201).join(" "),
            "ping 10.0.0.2 -c 20 -i 10ms -W 1 -p 5201 -J"
        );
        assert_eq!(
            run_line(Kind::Throughput { seconds: 5 }, at, 40000).join(" "),
            "test 10.0.0.2 -t 5 -p 40000 -J"
        );
        assert_eq!(
            deadline(Kind::Throughput { seconds: 5 }),
            Duration::from_secs(20)
        );
        assert_eq!(
            deadline(Kind::Latency { count: 100 }),
            Duration::from_secs(17)
        );
    }

    #[test]
    fn a_failed_run_says_why_from_its_document_or_its_last_words() {
        let kind = Kind::Throughput { seconds: 1 };
        let long = Duration::from_secs(60);
        let json_error = Written {
            stdout: br#"{"error": "unable to connect to server: Connection refused"}"#.to_vec(),
            stderr: Vec::new(),
        };
        assert_eq!(
            outcome(kind, exited(1), &json_error, Duration::ZERO, long),
            Err("unable to connect to server: Connection refused".into())
        );
        let stderr = Written {
            stdout: Vec::new(),
            stderr: b"error: something broke\n\n".to_vec(),
        };
        assert_eq!(
            outcome(kind, exited(2), &stderr, Duration::ZERO, long),
            Err("something broke".into())
        );
        assert_eq!(
            outcome(
                kind,
                None,
                &Written::default(),
                long,
                Duration::from_secs(1)
            ),
            Err("killed after 60 s, past its deadline".into())
        );
        assert_eq!(
            outcome(kind, exited(3), &Written::default(), Duration::ZERO, long),
            Err("it exited with exit status: 3".into())
        );
    }
}
