//! A mesh's runs (`flowlab monitor --db`): one row each, written the moment it ends,
//! its figures as columns (no document: a mesh of 20 hosts runs thousands a day).

use flowlab_results::monitor::{PathKind, PathLatency, PathRun, PathThroughput};
use flowlab_results::ping::Latency;
use rusqlite::Row;

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
        let values: Vec<Box<dyn rusqlite::ToSql + '_>> = vec![
            Box::new(&run.mesh),
            Box::new(run.probe as i64),
            Box::new(run.kind.name()),
            Box::new(&run.source),
            Box::new(&run.target),
            Box::new(&run.direction),
            Box::new(run.round as i64),
            Box::new(run.started_unix),
            Box::new(run.ended_unix),
            Box::new(run.late_seconds),
            Box::new(&run.command),
            Box::new(&run.error),
            Box::new(t.map(|t| t.sent_bytes as i64)),
            Box::new(t.map(|t| t.sent_seconds)),
            Box::new(t.map(|t| t.received_bytes as i64)),
            Box::new(t.map(|t| t.received_seconds)),
            Box::new(t.map(|t| t.bits_per_second)),
            Box::new(t.and_then(|t| t.retransmits).map(|r| r as i64)),
            Box::new(t.and_then(|t| t.congestion.clone())),
            Box::new(l.map(|l| l.sent as i64)),
            Box::new(l.map(|l| l.received as i64)),
            Box::new(l.map(|l| l.loss_percent)),
            Box::new(rtt.map(|r| r.samples as i64)),
            Box::new(rtt.map(|r| r.min_ms)),
            Box::new(rtt.map(|r| r.mean_ms)),
            Box::new(rtt.map(|r| r.median_ms)),
            Box::new(rtt.map(|r| r.p90_ms)),
            Box::new(rtt.map(|r| r.p99_ms)),
            Box::new(rtt.map(|r| r.p999_ms)),
            Box::new(rtt.map(|r| r.max_ms)),
            Box::new(rtt.map(|r| r.stdev_ms)),
            Box::new(l.and_then(|l| l.jitter_ms)),
        ];
        let marks = (2..=values.len() + 1)
            .map(|i| format!("?{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut params: Vec<&dyn rusqlite::ToSql> = vec![&runner];
        params.extend(values.iter().map(|v| v.as_ref()));
        self.conn
            .execute(
                &format!("INSERT INTO monitor_run (runner_id, {COLUMNS}) VALUES (?1, {marks})"),
                params.as_slice(),
            )
            .map_err(|e| self.err(e))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Every run of mesh `mesh`, in the order they ended (each echo's round trip is not
    /// kept: `rtts_ms` is empty).
    pub fn monitor_runs(&self, mesh: &str) -> Result<Vec<PathRun>, DbError> {
        let mut q = self
            .conn
            .prepare(&format!(
                "SELECT {COLUMNS} FROM monitor_run WHERE mesh = ?1 ORDER BY ended, id"
            ))
            .map_err(|e| self.err(e))?;
        q.query_map([mesh], path_run)
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(|e| self.err(e))
    }
}

/// A row of [`COLUMNS`] read back.
fn path_run(r: &Row<'_>) -> rusqlite::Result<PathRun> {
    let kind: String = r.get(2)?;
    let kind = match kind.as_str() {
        "latency" => PathKind::Latency,
        "throughput" => PathKind::Throughput,
        other => {
            return Err(rusqlite::Error::FromSqlConversionFailure(
                2,
                rusqlite::types::Type::Text,
                format!("run kind '{other}' is not latency or throughput").into(),
            ));
        }
    };
    let throughput = match r.get::<_, Option<i64>>(12)? {
        Some(sent_bytes) => Some(PathThroughput {
            sent_bytes: sent_bytes as u64,
            sent_seconds: r.get(13)?,
            received_bytes: r.get::<_, i64>(14)? as u64,
            received_seconds: r.get(15)?,
            bits_per_second: r.get(16)?,
            retransmits: r.get::<_, Option<i64>>(17)?.map(|v| v as u64),
            congestion: r.get(18)?,
        }),
        None => None,
    };
    let rtt = match r.get::<_, Option<i64>>(22)? {
        Some(samples) => Some(Latency {
            samples: samples as u64,
            min_ms: r.get(23)?,
            mean_ms: r.get(24)?,
            median_ms: r.get(25)?,
            p90_ms: r.get(26)?,
            p99_ms: r.get(27)?,
            p999_ms: r.get(28)?,
            max_ms: r.get(29)?,
            stdev_ms: r.get(30)?,
        }),
        None => None,
    };
    let latency = match r.get::<_, Option<i64>>(19)? {
        Some(sent) => Some(PathLatency {
            sent: sent as u64,
            received: r.get::<_, i64>(20)? as u64,
            loss_percent: r.get(21)?,
            rtt,
            jitter_ms: r.get(31)?,
            rtts_ms: Vec::new(),
        }),
        None => None,
    };
    Ok(PathRun {
        mesh: r.get(0)?,
        probe: r.get::<_, i64>(1)? as usize,
        kind,
        source: r.get(3)?,
        target: r.get(4)?,
        direction: r.get(5)?,
        round: r.get::<_, i64>(6)? as u64,
        started_unix: r.get(7)?,
        ended_unix: r.get(8)?,
        late_seconds: r.get(9)?,
        command: r.get(10)?,
        error: r.get(11)?,
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
