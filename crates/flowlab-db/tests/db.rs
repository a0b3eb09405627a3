//! The results database: claims that never let two runners run one trial, a gone
//! runner's claim taken over only when asked, outcomes kept, and every file that is not
//! a database of this flowlab's refused untouched.

mod common;

use common::{TCP_P2, step};
use flowlab_db::{Claim, Db, DbError, Recorded, Retake, schema};
use flowlab_results::study::Outcome;
use std::time::Duration;

/// `--resume`: a gone runner's claim is taken over.
const RESUME: Retake = Retake {
    abandoned: true,
    failed: false,
};

const CELL: (&str, &str) = ("length=1000", r#"{"length":"1000"}"#);

#[test]
fn a_trial_is_claimed_once_and_its_outcome_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("results.db");
    let mut a = Db::open(&path).expect("create");
    let mut b = Db::open(&path).expect("second connection");
    assert_eq!(a.version().expect("version"), schema::VERSION);
    let study = a.study("s", "name = \"s\"", 7).expect("study");
    assert_eq!(b.study("s", "name = \"s\"", 99).expect("same").seed, 7);
    let ra = a.register_runner("0.1.0", "{}").expect("runner a");
    let rb = b.register_runner("0.1.0", "{}").expect("runner b");

    let Claim::Mine(t1) = a
        .claim(study.id, ra, CELL, 1, Retake::default())
        .expect("claim")
    else {
        panic!("a fresh trial is the first runner's")
    };
    // Both runners alive (this process): the second is told it is taken.
    assert_eq!(
        b.claim(study.id, rb, CELL, 1, RESUME).expect("claim"),
        Claim::Busy
    );
    assert_eq!(
        a.claim(study.id, ra, CELL, 1, Retake::default())
            .expect("again"),
        Claim::Mine(t1)
    );
    let Claim::Mine(t2) = b
        .claim(study.id, rb, CELL, 2, Retake::default())
        .expect("claim")
    else {
        panic!("another repetition is free")
    };
    a.finish(t1, None, &[step("up", Some("{\"x\":1}"), None)])
        .expect("finish");
    b.finish(
        t2,
        Some("server gone"),
        &[step("up", None, Some("refused"))],
    )
    .expect("finish");
    assert_eq!(
        a.claim(study.id, ra, CELL, 1, RESUME).expect("claim"),
        Claim::Done
    );
    assert_eq!(
        a.recorded(study.id).expect("recorded"),
        Recorded {
            ok: 1,
            failed: 1,
            running: 0,
            abandoned: 0
        }
    );
    let trials = b.trials(study.id).expect("trials");
    assert_eq!(trials.len(), 2);
    assert_eq!((trials[0].status.as_str(), trials[0].repetition), ("ok", 1));
    assert_eq!(trials[0].steps[0].result.as_deref(), Some("{\"x\":1}"));
    assert_eq!(trials[1].status, Outcome::Failed);
    assert_eq!(trials[1].error.as_deref(), Some("server gone"));
    assert_eq!(trials[1].steps[0].error.as_deref(), Some("refused"));
    assert_eq!(trials[1].params, CELL.1);
}

#[test]
fn a_released_trial_runs_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut db = Db::open(&dir.path().join("r.db")).expect("create");
    let study = db.study("s", "x", 1).expect("study");
    let r = db.register_runner("0.1.0", "{}").expect("runner");
    let Claim::Mine(t) = db
        .claim(study.id, r, CELL, 1, Retake::default())
        .expect("claim")
    else {
        panic!("free")
    };
    db.release(t).expect("release");
    assert_eq!(db.recorded(study.id).expect("recorded").total(), 0);
    assert!(matches!(
        db.claim(study.id, r, CELL, 1, Retake::default())
            .expect("claim"),
        Claim::Mine(_)
    ));
}

/// A runner on another machine holds its claims while its heartbeat is younger than the
/// lease, and loses them once it is older: a controller that died (or lost the
/// database) gives its trial back to the others.
#[test]
fn a_runner_elsewhere_holds_its_claim_for_its_lease() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("r.db");
    let mut db = Db::open(&path).expect("create");
    let study = db.study("s", "x", 1).expect("study");
    let elsewhere = db.register_runner("0.1.0", "{}").expect("runner");
    let Claim::Mine(t) = db
        .claim(study.id, elsewhere, CELL, 1, Retake::default())
        .expect("claim")
    else {
        panic!("free")
    };
    let raw = rusqlite::Connection::open(&path).expect("raw");
    let beat_ago = |seconds: f64| {
        raw.execute(
            "UPDATE runner SET host = 'elsewhere', heartbeat = ?1 WHERE id = ?2",
            rusqlite::params![flowlab_db::now() - seconds, elsewhere],
        )
        .expect("the runner's heartbeat");
    };
    let me = db.register_runner("0.1.0", "{}").expect("runner");
    beat_ago(flowlab_db::LEASE - 5.0);
    assert_eq!(
        db.claim(study.id, me, CELL, 1, RESUME).expect("claim"),
        Claim::Busy,
        "within its lease"
    );
    assert_eq!(db.recorded(study.id).expect("recorded").running, 1);
    beat_ago(flowlab_db::LEASE + 5.0);
    assert_eq!(db.recorded(study.id).expect("recorded").abandoned, 1);
    assert_eq!(
        db.claim(study.id, me, CELL, 1, Retake::default())
            .expect("claim"),
        Claim::Abandoned
    );
    assert_eq!(
        db.claim(study.id, me, CELL, 1, RESUME).expect("take over"),
        Claim::Mine(t)
    );
}

/// A heartbeat stamps its runner at once and then every beat, until dropped.
#[test]
fn a_heartbeat_stamps_its_runner_until_dropped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("r.db");
    let db = Db::open(&path).expect("create");
    let runner = db.register_runner("0.1.0", "{}").expect("runner");
    let stamp = || -> Option<f64> {
        rusqlite::Connection::open(&path)
            .expect("raw")
            .query_row(
                "SELECT heartbeat FROM runner WHERE id = ?1",
                [runner],
                |r| r.get(0),
            )
            .expect("heartbeat")
    };
    assert_eq!(stamp(), None, "no beat before it starts");
    let beat =
        flowlab_db::Heartbeat::start(&path, runner, Duration::from_millis(50)).expect("heartbeat");
    let first = stamp().expect("stamped as it starts");
    // Later beats move it on (bounded: a loaded host may delay one by seconds).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while stamp() == Some(first) {
        assert!(std::time::Instant::now() < deadline, "no second beat");
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(beat);
    let last = stamp();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(stamp(), last, "no beat once dropped");
}

/// A runner that died holding a claim: its pid names no process of its start time.
#[test]
fn a_gone_runners_claim_is_taken_over_only_on_resume() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("r.db");
    let mut db = Db::open(&path).expect("create");
    let study = db.study("s", "x", 1).expect("study");
    let gone = db.register_runner("0.1.0", "{}").expect("runner");
    let Claim::Mine(t) = db
        .claim(study.id, gone, CELL, 1, Retake::default())
        .expect("claim")
    else {
        panic!("free")
    };
    // The same pid, another start time: the process that claimed it is gone.
    let raw = rusqlite::Connection::open(&path).expect("raw");
    raw.execute(
        "UPDATE runner SET pid_start = pid_start + 1 WHERE id = ?1",
        [gone],
    )
    .expect("age the runner");
    let me = db.register_runner("0.1.0", "{}").expect("runner");
    assert_eq!(db.recorded(study.id).expect("recorded").abandoned, 1);
    assert_eq!(
        db.claim(study.id, me, CELL, 1, Retake::default())
            .expect("claim"),
        Claim::Abandoned
    );
    assert_eq!(
        db.claim(study.id, me, CELL, 1, RESUME).expect("take over"),
        Claim::Mine(t)
    );
    db.finish(t, None, &[]).expect("finish");
    assert_eq!(db.recorded(study.id).expect("recorded").ok, 1);
}

#[test]
fn a_trials_clock_readings_are_kept_per_host_and_a_retake_replaces_them() {
    use flowlab_results::monitor::ClockOffset;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut db = Db::open(&dir.path().join("r.db")).expect("create");
    let study = db.study("s", "x", 1).expect("study");
    let runner = db.register_runner("0.1.0", "{}").expect("runner");
    let Claim::Mine(t) = db
        .claim(study.id, runner, CELL, 1, Retake::default())
        .expect("claim")
    else {
        panic!("a fresh trial is ours");
    };
    let clock = |host: &str, offset_ms: f64| ClockOffset {
        host: host.into(),
        offset_ms,
        uncertainty_ms: 1.5,
        samples: 3,
    };
    db.record_clocks(t, &[clock("b", -2.0), clock("a", 4.25)])
        .expect("clocks");
    db.record_clocks(t, &[clock("a", 4.5)]).expect("again");
    db.finish(t, None, &[]).expect("finish");
    assert_eq!(
        db.clocks(t).expect("read"),
        [clock("a", 4.5), clock("b", -2.0)],
        "by host, the latest reading of each"
    );
}

#[test]
fn a_study_file_that_changed_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(&dir.path().join("r.db")).expect("create");
    db.study("s", "repeat = 3", 1).expect("study");
    let e = db.study("s", "repeat = 4", 1).expect_err("changed");
    assert!(matches!(e, DbError::StudyChanged { .. }), "{e}");
    assert!(e.to_string().contains("r.db: study 's'"), "{e}");
}

#[test]
fn files_that_are_not_ours_are_refused_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Not SQLite at all.
    let junk = dir.path().join("junk.db");
    let text = "this is not a database, but it is long enough to look like a header ".repeat(20);
    std::fs::write(&junk, &text).expect("write");
    let e = Db::open(&junk).expect_err("junk");
    assert!(matches!(e, DbError::Foreign { .. }), "{e}");
    assert!(
        e.to_string().starts_with(&format!(
            "{}: not a flowlab results database",
            junk.display()
        )),
        "{e}"
    );
    assert_eq!(std::fs::read_to_string(&junk).expect("read"), text);

    // SQLite, someone else's.
    let theirs = dir.path().join("theirs.db");
    rusqlite::Connection::open(&theirs)
        .expect("open")
        .execute_batch("CREATE TABLE notes (x TEXT); INSERT INTO notes VALUES ('keep');")
        .expect("theirs");
    let e = Db::open(&theirs).expect_err("foreign");
    assert!(
        e.to_string()
            .contains("holds 1 tables but no flowlab schema version"),
        "{e}"
    );

    // Ours, from a newer flowlab.
    let newer = dir.path().join("newer.db");
    drop(Db::open(&newer).expect("create"));
    rusqlite::Connection::open(&newer)
        .expect("open")
        .pragma_update(None, "user_version", schema::VERSION + 1)
        .expect("bump");
    let e = Db::open(&newer).expect_err("newer");
    assert!(
        e.to_string().contains(&format!(
            "newer flowlab (schema version {}; this flowlab knows up to {})",
            schema::VERSION + 1,
            schema::VERSION
        )),
        "{e}"
    );
    let v: i64 = rusqlite::Connection::open(&newer)
        .expect("open")
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("version");
    assert_eq!(v, schema::VERSION + 1, "left as it was");

    let e = Db::open_existing(&dir.path().join("none.db")).expect_err("missing");
    assert!(
        e.to_string().ends_with("none.db: no such results database"),
        "{e}"
    );
}

/// A recorded `flowlab test -J` document (flowlab-report's fixtures).

#[test]
fn a_version_1_database_is_migrated_with_its_metrics_computed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("v1.db");
    {
        let raw = rusqlite::Connection::open(&path).expect("create");
        raw.execute_batch(schema::V1).expect("version 1 schema");
        raw.pragma_update(None, "user_version", 1).expect("version");
        raw.execute_batch(
            "INSERT INTO study VALUES (1, 's', 'h', 'name = \"s\"', 3, 0);
             INSERT INTO runner VALUES (1, 'host', 1, 1, 0, '0.1.0', '{}');
             INSERT INTO trial VALUES (1, 1, 'l=1', '{\"l\":\"1\"}', 1, 'ok', 1, 0, 1, NULL);",
        )
        .expect("rows");
        raw.execute(
            "INSERT INTO step VALUES (1, 0, 'up', 'test', 'h -P 2', 0, 1, NULL, ?1)",
            [TCP_P2],
        )
        .expect("step");
    }
    let db = Db::open(&path).expect("migrated");
    assert_eq!(db.version().expect("version"), schema::VERSION);
    assert_eq!(
        db.trials(1).expect("trials")[0].steps[0].result.as_deref(),
        Some(TCP_P2)
    );
    let raw = rusqlite::Connection::open(&path).expect("raw");
    let (bps, transfer, study): (f64, f64, String) = raw
        .query_row(
            "SELECT throughput_bps, transfer_s, study FROM trial_summary WHERE trial_id = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .expect("summary row");
    let doc: serde_json::Value = serde_json::from_str(TCP_P2).expect("fixture");
    let receiver = &doc["end"]["sums"][0]["receiver"];
    assert_eq!(bps, receiver["bits_per_second"].as_f64().expect("bps"));
    assert_eq!(transfer, receiver["seconds"].as_f64().expect("seconds"));
    assert_eq!(study, "s");
}

#[test]
fn a_finished_trial_has_its_metrics_beside_its_document() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("m.db");
    let mut db = Db::open(&path).expect("create");
    let study = db.study("s", "x", 1).expect("study");
    let r = db.register_runner("0.1.0", "{}").expect("runner");
    let Claim::Mine(t) = db
        .claim(study.id, r, CELL, 1, Retake::default())
        .expect("claim")
    else {
        panic!("free")
    };
    db.finish(t, None, &[step("up", Some(TCP_P2), None)])
        .expect("finish");
    let raw = rusqlite::Connection::open(&path).expect("raw");
    let names: Vec<String> = raw
        .prepare("SELECT metric FROM trial_metric WHERE trial_id = ?1 ORDER BY metric")
        .expect("query")
        .query_map([t], |r| r.get(0))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("names");
    for want in [
        "throughput_bps",
        "transfer_s",
        "retransmits",
        "rtt_ms",
        "received_bytes",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
    }
}

/// A recorded `flowlab fetch -J` document from two servers (flowlab-report's fixtures).
const FETCH: &str = include_str!("../../flowlab-report/tests/fixtures/fetch-1to3.json");

/// Version 3 adds a fetch's per-server metrics: a version-2 database (the same tables,
/// without them) gets them computed for the fetches it holds.
#[test]
fn a_version_2_database_gets_a_fetchs_per_server_metrics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("v2.db");
    {
        let mut db = Db::open(&path).expect("create");
        let study = db.study("s", "name = \"s\"", 1).expect("study");
        let runner = db.register_runner("0.1.0", "{}").expect("runner");
        let Claim::Mine(t) = db
            .claim(study.id, runner, CELL, 1, Retake::default())
            .expect("claim")
        else {
            panic!("a fresh trial")
        };
        let mut fetch = step("fetch", Some(FETCH), None);
        fetch.kind = "fetch".into();
        db.finish(t, None, &[fetch]).expect("finish");
    }
    let metric_names = || -> Vec<String> {
        let raw = rusqlite::Connection::open(&path).expect("raw");
        let mut q = raw
            .prepare("SELECT name FROM metric ORDER BY name")
            .expect("query");
        q.query_map([], |r| r.get(0))
            .expect("rows")
            .collect::<Result<_, _>>()
            .expect("names")
    };
    assert!(metric_names().contains(&"server2_busy_s".to_string()));
    {
        // As version 2 left it: the same tables, no per-server metrics.
        let raw = rusqlite::Connection::open(&path).expect("raw");
        raw.execute("DELETE FROM metric WHERE name LIKE 'server%'", [])
            .expect("delete");
        raw.execute("DROP TABLE attempt", [])
            .expect("drop version 4's table");
        raw.execute("DROP TABLE monitor_run", [])
            .expect("drop version 5's table");
        raw.execute("DROP TABLE trial_clock", [])
            .expect("drop version 6's table");
        raw.execute("ALTER TABLE runner DROP COLUMN heartbeat", [])
            .expect("drop version 7's column");
        raw.pragma_update(None, "user_version", 2).expect("version");
    }
    assert!(!metric_names().iter().any(|n| n.starts_with("server")));
    let db = Db::open(&path).expect("migrated");
    assert_eq!(db.version().expect("version"), schema::VERSION);
    // Version 4's table of failed attempts, empty; version 5's of a mesh's runs and
    // version 6's of trials' clocks too.
    assert!(db.attempts(1).expect("attempts").is_empty());
    assert!(db.monitor_runs("any").expect("monitor runs").is_empty());
    assert!(db.clocks(1).expect("clocks").is_empty());
    assert_eq!(
        metric_names(),
        [
            "corrupt_fragments",
            "server1_bps",
            "server1_busy_s",
            "server1_bytes",
            "server2_bps",
            "server2_busy_s",
            "server2_bytes",
            "throughput_bps",
            "transfer_s"
        ]
    );
    let raw = rusqlite::Connection::open(&path).expect("raw");
    let busy: f64 = raw
        .query_row(
            "SELECT value FROM metric WHERE name = 'server2_busy_s'",
            [],
            |r| r.get(0),
        )
        .expect("busy");
    let doc: serde_json::Value = serde_json::from_str(FETCH).expect("fixture");
    assert_eq!(busy, doc["servers"][1]["busy_seconds"].as_f64().expect("s"));
}

/// `--retry-failed`: a failed trial runs again; its failed attempt, steps and all, is
/// kept in `attempt`; without it a failed trial is done. An interrupted retry stays
/// failed and says so.
#[test]
fn a_failed_trial_is_run_again_only_when_asked_and_its_failure_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut db = Db::open(&dir.path().join("r.db")).expect("create");
    let study = db.study("s", "name = \"s\"", 1).expect("study");
    let r = db.register_runner("0.1.0", "{}").expect("runner");
    let retry = Retake {
        abandoned: false,
        failed: true,
    };
    let Claim::Mine(t) = db.claim(study.id, r, CELL, 1, retry).expect("claim") else {
        panic!("a fresh trial")
    };
    db.finish(t, Some("server gone"), &[step("up", None, Some("refused"))])
        .expect("finish");
    assert_eq!(
        db.claim(study.id, r, CELL, 1, RESUME).expect("claim"),
        Claim::Done
    );
    assert_eq!(
        db.claim(study.id, r, CELL, 1, retry).expect("retry"),
        Claim::Mine(t)
    );
    // Running again: no steps, no error; the failure is an attempt.
    let row = &db.trials(study.id).expect("trials")[0];
    assert_eq!((row.status.as_str(), row.error.as_ref()), ("running", None));
    assert!(row.steps.is_empty());
    let attempts = db.attempts(study.id).expect("attempts");
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].error.as_deref(), Some("server gone"));
    assert_eq!(
        (attempts[0].cell.as_str(), attempts[0].repetition),
        ("length=1000", 1)
    );
    let raw = rusqlite::Connection::open(dir.path().join("r.db")).expect("raw");
    let steps: String = raw
        .query_row("SELECT steps FROM attempt", [], |q| q.get(0))
        .expect("steps");
    let steps: serde_json::Value = serde_json::from_str(&steps).expect("json");
    assert_eq!(steps[0]["error"], "refused");
    assert_eq!(steps[0]["args"], "127.0.0.1 -t 1");
    // Interrupted while run again: failed, saying so; taken again by the next retry.
    db.release(t).expect("release");
    let row = &db.trials(study.id).expect("trials")[0];
    assert_eq!(row.status, Outcome::Failed);
    assert!(
        row.error
            .as_deref()
            .is_some_and(|e| e.contains("interrupted while run again"))
    );
    assert_eq!(
        db.claim(study.id, r, CELL, 1, retry).expect("retry"),
        Claim::Mine(t)
    );
    db.finish(t, None, &[step("up", Some("{}"), None)])
        .expect("finish");
    assert_eq!(db.recorded(study.id).expect("recorded").ok, 1);
    assert_eq!(db.attempts(study.id).expect("attempts").len(), 2);
    // A retry that succeeds on its first claim leaves no attempt: fresh trials have none.
    let Claim::Mine(_) = db.claim(study.id, r, CELL, 2, retry).expect("claim") else {
        panic!("a fresh repetition")
    };
    assert_eq!(db.attempts(study.id).expect("attempts").len(), 2);
}

/// Runners started together on a new file: each one opens it whole, none takes the
/// schema another is creating for a foreign one (a race seen in CI: the version and the
/// tables were read apart).
#[test]
fn runners_opening_a_new_database_together_all_succeed() {
    for round in 0..20 {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("results.db");
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
        let opened: Vec<_> = (0..4)
            .map(|_| {
                let (path, barrier) = (path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    Db::open(&path).map(|db| db.version().expect("version"))
                })
            })
            .collect();
        for t in opened {
            let version = t.join().expect("thread");
            assert_eq!(
                version.as_ref().ok(),
                Some(&schema::VERSION),
                "round {round}: {version:?}"
            );
        }
    }
}
