//! A mesh's runs (`flowlab monitor --db`): one row each, written the moment it ends,
//! its figures as columns (no document: a mesh of 20 hosts runs thousands a day).

use flowlab_results::monitor::{PathKind, PathLatency, PathRun, PathThroughput};
use flowlab_results::ping::Latency;

use crate::sql::{Row, SqlError, Value};
use crate::{Db, DbError};

/// The columns of `monitor_run` after its id and runner, in the order
/// [`Db::record_monitor_run`] writes them and [`path_run`] reads them.
const COLUMNS: &str = "mesh, probe, kind, source, target, direction, round, started, ended, \
     late_s, command, error, sent_bytes, sent_s, received_bytes, received_s, throughput_bps, \
     retransmits, congestion, echoes_sent, echoes_received, loss_percent, rtt_samples, \
     rtt_min_ms, rtt_mean_ms, rtt_median_ms, rtt_p90_ms, rtt_p99_ms, rtt_p999_ms, rtt_max_ms, \
     rtt_stdev_ms, jitter_ms";

impl Db {
    /// Records `run`, reported by `runner` ([`Db::register_runner`]); returns its id.
    pub fn record_monitor_run(&self, runner: i64, run: &PathRun) -> Result<i64, DbError> {
        let t = run.throughput.as_ref();
        let l = run.latency.as_ref();
        let rtt = l.and_then(|l| l.rtt.as_ref());
        let int = |v: Option<u64>| v.map(|v| v as i64);
        let values: Vec<Value> = vec![
            runner.into(),
            (&run.mesh).into(),
            (run.probe as i64).into(),
            run.kind.name().into(),
            (&run.source).into(),
            (&run.target).into(),
            (&run.direction).into(),
            (run.round as i64).into(),
            run.started_unix.into(),
            run.ended_unix.into(),
            run.late_seconds.into(),
            (&run.command).into(),
            run.error.as_deref().into(),
            int(t.map(|t| t.sent_bytes)).into(),
            t.map(|t| t.sent_seconds).into(),
            int(t.map(|t| t.received_bytes)).into(),
            t.map(|t| t.received_seconds).into(),
            t.map(|t| t.bits_per_second).into(),
            int(t.and_then(|t| t.retransmits)).into(),
            t.and_then(|t| t.congestion.clone()).into(),
            int(l.map(|l| l.sent)).into(),
            int(l.map(|l| l.received)).into(),
            l.map(|l| l.loss_percent).into(),
            int(rtt.map(|r| r.samples)).into(),
            rtt.map(|r| r.min_ms).into(),
            rtt.map(|r| r.mean_ms).into(),
            rtt.map(|r| r.median_ms).into(),
            rtt.map(|r| r.p90_ms).into(),
            rtt.map(|r| r.p99_ms).into(),
            rtt.map(|r| r.p999_ms).into(),
            rtt.map(|r| r.max_ms).into(),
            rtt.map(|r| r.stdev_ms).into(),
            l.and_then(|l| l.jitter_ms).into(),
        ];
        let marks = (1..=values.len())
            .map(|i| format!("?{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        self.with(|c| {
            c.query_one(
                &format!(
                    "INSERT INTO monitor_run (runner_id, {COLUMNS}) VALUES ({marks}) RETURNING id"
                ),
                &values,
            )?
            .int(0)
        })
    }

    /// Every run of mesh `mesh`, in the order they ended (each echo's round trip is not
    /// kept: `rtts_ms` is empty).
    pub fn monitor_runs(&self, mesh: &str) -> Result<Vec<PathRun>, DbError> {
        self.with(|c| {
            c.query(
                &format!("SELECT {COLUMNS} FROM monitor_run WHERE mesh = ?1 ORDER BY ended, id"),
                &[mesh.into()],
            )?
            .iter()
            .map(path_run)
            .collect()
        })
    }
}

/// A row of [`COLUMNS`] read back.
fn path_run(r: &Row) -> Result<PathRun, SqlError> {
    let kind = match r.text(2)?.as_str() {
        "latency" => PathKind::Latency,
        "throughput" => PathKind::Throughput,
        other => {
            return Err(SqlError::Type(format!(
                "run kind '{other}' is not latency or throughput"
            )));
        }
    };
    let throughput = match r.opt_int(12)? {
        Some(sent_bytes) => Some(PathThroughput {
            sent_bytes: sent_bytes as u64,
            sent_seconds: r.real(13)?,
            received_bytes: r.int(14)? as u64,
            received_seconds: r.real(15)?,
            bits_per_second: r.real(16)?,
            retransmits: r.opt_int(17)?.map(|v| v as u64),
            congestion: r.opt_text(18)?,
        }),
        None => None,
    };
    let rtt = match r.opt_int(22)? {
        Some(samples) => Some(Latency {
            samples: samples as u64,
            min_ms: r.real(23)?,
            mean_ms: r.real(24)?,
            median_ms: r.real(25)?,
            p90_ms: r.real(26)?,
            p99_ms: r.real(27)?,
            p999_ms: r.real(28)?,
            max_ms: r.real(29)?,
            stdev_ms: r.real(30)?,
        }),
        None => None,
    };
    let latency = match r.opt_int(19)? {
        Some(sent) => Some(PathLatency {
            sent: sent as u64,
            received: r.int(20)? as u64,
            loss_percent: r.real(21)?,
            rtt,
            jitter_ms: r.opt_real(31)?,
            rtts_ms: Vec::new(),
        }),
        None => None,
    };
    Ok(PathRun {
        mesh: r.text(0)?,
        probe: r.int(1)? as usize,
        kind,
        source: r.text(3)?,
        target: r.text(4)?,
        direction: r.text(5)?,
        round: r.int(6)? as u64,
        started_unix: r.real(7)?,
        ended_unix: r.real(8)?,
        late_seconds: r.real(9)?,
        command: r.text(10)?,
        error: r.opt_text(11)?,
        latency,
        throughput,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(kind: PathKind, ended: f64) -> PathRun {
        PathRun {
            mesh: "lab".into(),
            probe: 1,
            kind,
            source: "h1".into(),
            target: "h9".into(),
            direction: "forward".into(),
            round: 3,
            started_unix: ended - 2.0,
            ended_unix: ended,
            late_seconds: 0.25,
            error: None,
            latency: None,
            throughput: None,
            command: "flowlab test 10.0.0.9 -t 2 -p 40000 -J".into(),
        }
    }

    /// Every figure of a run reads back as it was written, each kind in its columns, and
    /// a failed run with its reason and no figures.
    #[test]
    fn a_runs_figures_read_back_as_written() {
        let dir = tempfile::tempdir().expect("tmp");
        let db = Db::open(&dir.path().join("m.db")).expect("db");
        let runner = db.register_runner("0.1.0", "{}").expect("runner");
        let mut throughput = run(PathKind::Throughput, 1_000.5);
        throughput.throughput = Some(PathThroughput {
            sent_bytes: 31_064_064,
            sent_seconds: 5.016654,
            received_bytes: 31_064_000,
            received_seconds: 5.193264,
            bits_per_second: 47_852_855.545183145,
            retransmits: Some(410),
            congestion: Some("bbr".into()),
        });
        let mut latency = run(PathKind::Latency, 1_001.25);
        latency.latency = Some(PathLatency {
            sent: 20,
            received: 19,
            loss_percent: 5.0,
            rtt: Some(Latency {
                samples: 19,
                min_ms: 0.057858,
                mean_ms: 0.09203075,
                median_ms: 0.091262,
                p90_ms: 0.10611,
                p99_ms: 0.129201,
                p999_ms: 0.129201,
                max_ms: 0.129201,
                stdev_ms: 0.014244271402479664,
            }),
            jitter_ms: Some(0.009655338859092723),
            rtts_ms: Vec::new(),
        });
        let mut failed = run(PathKind::Latency, 1_002.0);
        failed.error = Some("unable to connect".into());
        let mut other = run(PathKind::Latency, 999.0);
        other.mesh = "elsewhere".into();
        for r in [&latency, &throughput, &failed, &other] {
            db.record_monitor_run(runner, r).expect("recorded");
        }
        assert_eq!(
            db.monitor_runs("lab").expect("read"),
            vec![throughput, latency, failed]
        );
    }
}
