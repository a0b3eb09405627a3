//! The schema, one migration per version, written once for both databases (the DDL
//! as SQLite takes it, made PostgreSQL's by `sql::postgres_ddl`). A SQLite
//! file records its version in `PRAGMA user_version`, a PostgreSQL database in the table
//! `flowlab_schema`; opening either applies the migrations it lacks, in one transaction
//! each, and a migration's computation for the rows already there runs on both.
//! docs/results-db.md describes every table and column.

use crate::sql::{Conn, Dialect, SqlError, values};

/// What a migration computes for the rows already there.
pub(crate) type Fill = fn(&mut Conn) -> Result<(), SqlError>;

/// One version's change: its SQL, then what must be computed for rows already there.
#[derive(Debug)]
pub(crate) struct Migration {
    pub(crate) sql: &'static str,
    pub(crate) fill: Option<Fill>,
}

/// The table a migration locks against other processes migrating at once (SQLite takes
/// its whole file's write lock instead).
pub(crate) const VERSION_TABLE: &str = "flowlab_schema";

/// The version the database is at.
pub(crate) fn read_version(c: &mut Conn) -> Result<i64, SqlError> {
    match c.dialect() {
        Dialect::Sqlite => c.query_one("PRAGMA user_version", &[])?.int(0),
        Dialect::Postgres => c
            .query_one("SELECT coalesce(max(version), 0) FROM flowlab_schema", &[])?
            .int(0),
    }
}

/// Records `version` as the database's.
pub(crate) fn write_version(c: &mut Conn, version: i64) -> Result<(), SqlError> {
    match c.dialect() {
        // A pragma takes no parameters.
        Dialect::Sqlite => c.batch(&format!("PRAGMA user_version = {version}")),
        Dialect::Postgres => {
            c.execute("DELETE FROM flowlab_schema", &[])?;
            c.execute(
                "INSERT INTO flowlab_schema (version) VALUES (?1)",
                values![version],
            )
            .map(|_| ())
        }
    }
}

/// The migrations, oldest first: entry `i` takes a database from version `i` to `i + 1`.
pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        sql: V1,
        fill: None,
    },
    Migration {
        sql: V2,
        fill: Some(fill_metrics),
    },
    // 3: a fetch's per-server metrics (`serverN_bytes`, `serverN_busy_s`, `serverN_bps`),
    // computed for the steps already recorded; no table changes.
    Migration {
        sql: "",
        fill: Some(fill_metrics),
    },
    Migration {
        sql: V4,
        fill: None,
    },
    Migration {
        sql: V5,
        fill: None,
    },
    Migration {
        sql: V6,
        fill: None,
    },
    Migration {
        sql: V7,
        fill: None,
    },
];

/// Version 7: each runner's lease. A runner stamps `heartbeat` while it runs trials, so
/// a trial claimed by a runner on another machine comes free once the stamp is older
/// than the lease (a runner on this machine is judged by its process). And
/// `trial_summary` groups by every column it shows, as standard SQL (and PostgreSQL)
/// asks; its rows are those of version 2's.
const V7: &str = r#"
    ALTER TABLE runner ADD COLUMN heartbeat REAL;
    DROP VIEW trial_summary;
    CREATE VIEW trial_summary AS
        SELECT s.name AS study, t.id AS trial_id, t.cell, t.params, t.repetition,
               t.status, st.name AS step, st.kind, st.ended - st.started AS step_s,
               max(CASE WHEN m.name = 'throughput_bps' THEN m.value END) AS throughput_bps,
               max(CASE WHEN m.name = 'transfer_s' THEN m.value END) AS transfer_s,
               max(CASE WHEN m.name = 'retransmits' THEN m.value END) AS retransmits,
               max(CASE WHEN m.name = 'loss_percent' THEN m.value END) AS loss_percent,
               max(CASE WHEN m.name = 'jitter_ms' THEN m.value END) AS jitter_ms,
               max(CASE WHEN m.name = 'rtt_ms' THEN m.value END) AS rtt_ms,
               st.error
        FROM trial t JOIN study s ON s.id = t.study_id
             JOIN step st ON st.trial_id = t.id
             LEFT JOIN metric m ON m.trial_id = t.id AND m.step = st.name
        GROUP BY s.name, t.id, t.cell, t.params, t.repetition, t.status, st.idx, st.name,
                 st.kind, st.started, st.ended, st.error;
"#;

/// Version 6: each trial's reading of its hosts' clocks over SSH (a row per host), the
/// offset of the host's clock from the runner's and its uncertainty (half the reading's
/// round trip), best of `samples` readings taken as the trial began.
const V6: &str = r#"
    CREATE TABLE trial_clock (
        trial_id        INTEGER NOT NULL REFERENCES trial(id) ON DELETE CASCADE,
        host            TEXT NOT NULL,
        offset_ms       REAL NOT NULL,
        uncertainty_ms  REAL NOT NULL,
        samples         INTEGER NOT NULL,
        PRIMARY KEY (trial_id, host)
    );
"#;

/// Version 5: a mesh's runs (`flowlab monitor --db`), one row each, its figures as
/// columns: a throughput run's (`sent_bytes` … `congestion`) or a latency run's
/// (`echoes_sent` … `jitter_ms`), the other's null, and none for a run that failed.
const V5: &str = r#"
    CREATE TABLE monitor_run (
        id               INTEGER PRIMARY KEY,
        runner_id        INTEGER NOT NULL REFERENCES runner(id),
        mesh             TEXT NOT NULL,
        probe            INTEGER NOT NULL,
        kind             TEXT NOT NULL CHECK (kind IN ('latency', 'throughput')),
        source           TEXT NOT NULL,
        target           TEXT NOT NULL,
        direction        TEXT NOT NULL,
        round            INTEGER NOT NULL,
        started          REAL NOT NULL,
        ended            REAL NOT NULL,
        late_s           REAL NOT NULL,
        command          TEXT NOT NULL,
        error            TEXT,
        sent_bytes       INTEGER,
        sent_s           REAL,
        received_bytes   INTEGER,
        received_s       REAL,
        throughput_bps   REAL,
        retransmits      INTEGER,
        congestion       TEXT,
        echoes_sent      INTEGER,
        echoes_received  INTEGER,
        loss_percent     REAL,
        rtt_samples      INTEGER,
        rtt_min_ms       REAL,
        rtt_mean_ms      REAL,
        rtt_median_ms    REAL,
        rtt_p90_ms       REAL,
        rtt_p99_ms       REAL,
        rtt_p999_ms      REAL,
        rtt_max_ms       REAL,
        rtt_stdev_ms     REAL,
        jitter_ms        REAL
    );
    CREATE INDEX monitor_run_path ON monitor_run (mesh, source, target, kind, ended);
"#;

/// Version 4: a failed trial run again (`flowlab run --retry-failed`) keeps its failed
/// attempt, with the steps it had recorded (`steps`: a JSON array of the `step` rows'
/// columns), so that nothing recorded is lost.
const V4: &str = r#"
    CREATE TABLE attempt (
        id         INTEGER PRIMARY KEY,
        trial_id   INTEGER NOT NULL REFERENCES trial(id) ON DELETE CASCADE,
        runner_id  INTEGER NOT NULL REFERENCES runner(id),
        started    REAL NOT NULL,
        ended      REAL,
        error      TEXT,
        steps      TEXT NOT NULL
    );
"#;

/// The SQL of version 1, as it was (a test builds a version-1 database with it).
pub const V1: &str =
    // 1: studies, the runners that ran them, trials and their steps.
    r#"
    CREATE TABLE study (
        id       INTEGER PRIMARY KEY,
        name     TEXT NOT NULL UNIQUE,
        hash     TEXT NOT NULL,
        file     TEXT NOT NULL,
        seed     INTEGER NOT NULL,
        created  REAL NOT NULL
    );
    CREATE TABLE runner (
        id               INTEGER PRIMARY KEY,
        host             TEXT NOT NULL,
        pid              INTEGER NOT NULL,
        pid_start        INTEGER NOT NULL,
        started          REAL NOT NULL,
        flowlab_version  TEXT NOT NULL,
        system           TEXT NOT NULL
    );
    CREATE TABLE trial (
        id          INTEGER PRIMARY KEY,
        study_id    INTEGER NOT NULL REFERENCES study(id),
        cell        TEXT NOT NULL,
        params      TEXT NOT NULL,
        repetition  INTEGER NOT NULL,
        status      TEXT NOT NULL CHECK (status IN ('running', 'ok', 'failed')),
        runner_id   INTEGER NOT NULL REFERENCES runner(id),
        started     REAL NOT NULL,
        ended       REAL,
        error       TEXT,
        UNIQUE (study_id, cell, repetition)
    );
    CREATE TABLE step (
        trial_id  INTEGER NOT NULL REFERENCES trial(id) ON DELETE CASCADE,
        idx       INTEGER NOT NULL,
        name      TEXT NOT NULL,
        kind      TEXT NOT NULL,
        args      TEXT NOT NULL,
        started   REAL NOT NULL,
        ended     REAL NOT NULL,
        error     TEXT,
        result    TEXT,
        PRIMARY KEY (trial_id, idx)
    );
    "#;

/// Version 2: each step's metrics as rows (`metric`), and two views that join them to
/// their study and cell: `trial_metric` (long: one row per metric) and `trial_summary`
/// (wide: one row per step, the common metrics as columns).
const V2: &str = r#"
    CREATE TABLE metric (
        trial_id  INTEGER NOT NULL REFERENCES trial(id) ON DELETE CASCADE,
        step      TEXT NOT NULL,
        name      TEXT NOT NULL,
        value     REAL NOT NULL,
        PRIMARY KEY (trial_id, step, name)
    );
    CREATE VIEW trial_metric AS
        SELECT s.name AS study, t.id AS trial_id, t.cell, t.params, t.repetition,
               t.status, m.step, m.name AS metric, m.value
        FROM metric m JOIN trial t ON t.id = m.trial_id JOIN study s ON s.id = t.study_id;
    CREATE VIEW trial_summary AS
        SELECT s.name AS study, t.id AS trial_id, t.cell, t.params, t.repetition,
               t.status, st.name AS step, st.kind, st.ended - st.started AS step_s,
               max(CASE WHEN m.name = 'throughput_bps' THEN m.value END) AS throughput_bps,
               max(CASE WHEN m.name = 'transfer_s' THEN m.value END) AS transfer_s,
               max(CASE WHEN m.name = 'retransmits' THEN m.value END) AS retransmits,
               max(CASE WHEN m.name = 'loss_percent' THEN m.value END) AS loss_percent,
               max(CASE WHEN m.name = 'jitter_ms' THEN m.value END) AS jitter_ms,
               max(CASE WHEN m.name = 'rtt_ms' THEN m.value END) AS rtt_ms,
               st.error
        FROM trial t JOIN study s ON s.id = t.study_id
             JOIN step st ON st.trial_id = t.id
             LEFT JOIN metric m ON m.trial_id = t.id AND m.step = st.name
        GROUP BY t.id, st.idx;
"#;

/// Computes the metrics of every step already recorded (a database from before a version
/// that adds metrics); those already there are replaced by the same values.
fn fill_metrics(c: &mut Conn) -> Result<(), SqlError> {
    let steps = c.query(
        "SELECT trial_id, name, kind, result FROM step WHERE result IS NOT NULL",
        &[],
    )?;
    for r in steps {
        crate::trials::insert_metrics(c, r.int(0)?, &r.text(1)?, &r.text(2)?, &r.text(3)?)?;
    }
    Ok(())
}

/// The version this build writes: the number of migrations.
pub const VERSION: i64 = MIGRATIONS.len() as i64;
