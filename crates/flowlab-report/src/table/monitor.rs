//! `flowlab monitor`'s lines: the mesh watched, a line per run as it ends, and how the
//! watch ended.

use std::fmt::Write as _;

use flowlab_results::monitor::{MonitorStart, MonitorSummary, PathRun};

use super::study::wait;
use crate::units::{Rate, UnitFormat, rtt};

/// The mesh, its topology, its probes and the seed of its jitter.
pub fn monitor_start(s: &MonitorStart) -> String {
    let hosts = super::count(s.hosts.len(), "host", "hosts");
    let mut out = match &s.topology {
        Some(t) => format!(
            "monitor {}: {hosts} on topology {t} ({}), seed {}\n",
            s.mesh,
            if s.topology_ours {
                "brought up; taken down at the end"
            } else {
                "up already; left up"
            },
            s.seed
        ),
        None => format!(
            "monitor {}: {hosts} over SSH ({}), seed {}\n",
            s.mesh,
            s.hosts.join(", "),
            s.seed
        ),
    };
    for p in &s.probes {
        let _ = writeln!(out, "  {p}");
    }
    for c in &s.clocks {
        let _ = writeln!(
            out,
            "  clock of {}: {:+.1} ms ± {:.1} ms against this one's (best of {} readings)",
            c.host, c.offset_ms, c.uncertainty_ms, c.samples
        );
    }
    out
}

/// A ms figure as [`rtt`] prints one.
fn ms(v: f64) -> String {
    rtt((v * 1e3).round() as u64)
}

/// One run: its kind, its path, and its figures or why it failed.
pub fn monitor_run(r: &PathRun) -> String {
    let mut out = format!(
        "{:<10} {} → {} #{}: ",
        r.kind.name(),
        r.source,
        r.target,
        r.round
    );
    match (&r.error, &r.latency, &r.throughput) {
        (Some(why), ..) => {
            let _ = write!(out, "failed: {why}");
        }
        (None, Some(l), _) => {
            match &l.rtt {
                Some(rtt) => {
                    let _ = write!(
                        out,
                        "rtt median {}, p90 {}, max {}; ",
                        ms(rtt.median_ms),
                        ms(rtt.p90_ms),
                        ms(rtt.max_ms)
                    );
                }
                None => out.push_str("no reply; "),
            }
            let _ = write!(
                out,
                "{} of {} echoes lost ({:.1} %)",
                l.sent - l.received.min(l.sent),
                l.sent,
                l.loss_percent
            );
        }
        (None, _, Some(t)) => {
            let _ = write!(
                out,
                "{} received",
                Rate(t.bits_per_second, UnitFormat::Adaptive)
            );
            if let Some(n) = t.retransmits {
                let _ = write!(
                    out,
                    ", {}",
                    super::count(n as usize, "retransmit", "retransmits")
                );
            }
            if let Some(cc) = &t.congestion {
                let _ = write!(out, ", {cc}");
            }
        }
        (None, None, None) => out.push_str("nothing measured"),
    }
    if r.late_seconds >= 1.0 {
        let _ = write!(out, " ({} late)", wait(r.late_seconds));
    }
    out.push('\n');
    out
}

/// How the watch ended.
pub fn monitor_summary(s: &MonitorSummary) -> String {
    let mut out = format!(
        "monitor {}: {} in {}, {} failed",
        s.mesh,
        super::count(s.runs as usize, "run", "runs"),
        wait(s.seconds),
        s.failed
    );
    if s.skipped_rounds > 0 {
        let _ = write!(
            out,
            "; {} skipped (a run ended after its next slot)",
            super::count(s.skipped_rounds as usize, "round", "rounds")
        );
    }
    if s.interrupted {
        out.push_str("; interrupted");
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowlab_results::monitor::{PathKind, PathThroughput};

    #[test]
    fn a_run_line_says_its_path_and_figures() {
        let mut r = PathRun {
            mesh: "lab".into(),
            probe: 1,
            kind: PathKind::Throughput,
            source: "h1".into(),
            target: "h9".into(),
            direction: "forward".into(),
            round: 3,
            started_unix: 0.0,
            ended_unix: 2.0,
            late_seconds: 4.2,
            error: None,
            latency: None,
            throughput: Some(PathThroughput {
                sent_bytes: 1,
                sent_seconds: 1.0,
                received_bytes: 1,
                received_seconds: 1.0,
                bits_per_second: 18.94e6,
                retransmits: Some(1),
                congestion: Some("cubic".into()),
            }),
            command: String::new(),
        };
        assert_eq!(
            monitor_run(&r),
            "throughput h1 → h9 #3: 18.9 Mbits/sec received, 1 retransmit, cubic (4 s late)\n"
        );
        r.error = Some("unable to connect".into());
        r.late_seconds = 0.0;
        assert_eq!(
            monitor_run(&r),
            "throughput h1 → h9 #3: failed: unable to connect\n"
        );
    }
}
