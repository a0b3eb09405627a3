//! The results database in PostgreSQL (a real server of the test's own, Debian
//! `postgresql`): the same data model as SQLite — what one keeps the other keeps, and a
//! report reads the same from both — claims that two runners never share, a lease that
//! frees a dead controller's trial, a migration from the previous version, and a
//! database that is not flowlab's refused untouched.

mod common;

use common::{TCP_P2, step};
use flowlab_db::{Claim, Db, DbError, Retake, schema};
use flowlab_results::monitor::{ClockOffset, PathKind, PathRun, PathThroughput};
use flowlab_testkit::Postgres;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

/// A study whose cells the data below fills: two lengths, two repetitions.
const STUDY: &str = "name = \"s\"\nrepeat = 2\n[params]\nlength = [1000, 2000]\n\
                     [[step]]\nname = \"up\"\nkind = \"test\"\nargs = \"127.0.0.1 -t 1\"\n";

/// A server of the test's own, one at a time in this binary (each takes a CPU while
/// it starts and runs; four at once slowed the suite's measuring lanes). Bound as
/// `(guard, server)`, the server is dropped first: stopped before the next one starts.
fn pg(what: &str) -> Option<(MutexGuard<'static, ()>, Postgres)> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    Postgres::start(&format!("{what} (a PostgreSQL server of the test's own)")).map(|pg| (one, pg))
}

fn cell(length: u32) -> (String, String) {
    (
        format!("length={length}"),
        format!("{{\"length\":\"{length}\"}}"),
    )
}

/// The same history written to `db`: every trial run (one fails and is run again),
/// the hosts' clocks of one, and a mesh's run.
fn fill(db: &mut Db) {
    let study = db.study("s", STUDY, 7).expect("study");
    let runner = db.register_runner("0.1.0", "{}").expect("runner");
    for length in [1000, 2000] {
        let (label, params) = cell(length);
        for repetition in [1, 2] {
            let Claim::Mine(t) = db
                .claim(
                    study.id,
                    runner,
                    (&label, &params),
                    repetition,
                    Retake::default(),
                )
                .expect("claim")
            else {
                panic!("a fresh trial is ours");
            };
            if length == 2000 && repetition == 2 {
                db.finish(t, Some("server gone"), &[step("up", None, Some("refused"))])
                    .expect("a failure");
                let retake = Retake {
                    abandoned: false,
                    failed: true,
                };
                assert_eq!(
                    db.claim(study.id, runner, (&label, &params), repetition, retake)
                        .expect("run again"),
                    Claim::Mine(t)
                );
            }
            db.record_clocks(
                t,
                &[ClockOffset {
                    host: "b".into(),
                    offset_ms: -1.25,
                    uncertainty_ms: 0.5,
                    samples: 3,
                }],
            )
            .expect("clocks");
            db.finish(t, None, &[step("up", Some(TCP_P2), None)])
                .expect("finish");
        }
    }
    db.record_monitor_run(runner, &mesh_run())
        .expect("a mesh's run");
}

fn mesh_run() -> PathRun {
    PathRun {
        mesh: "wan".into(),
        probe: 1,
        kind: PathKind::Throughput,
        source: "a".into(),
        target: "b".into(),
        direction: "a->b".into(),
        round: 3,
        started_unix: 1_700_000_000.5,
        ended_unix: 1_700_000_002.0,
        late_seconds: 0.01,
        command: "flowlab test b -t 1".into(),
        error: None,
        latency: None,
        throughput: Some(PathThroughput {
            sent_bytes: 12_345_678,
            sent_seconds: 1.0,
            received_bytes: 12_300_000,
            received_seconds: 1.01,
            bits_per_second: 97_400_000.0,
            retransmits: Some(4),
            congestion: Some("cubic".into()),
        }),
    }
}

#[test]
fn postgres_keeps_what_sqlite_keeps_and_a_report_reads_the_same_from_both() {
    let Some((_one, pg)) = pg("the same data in both databases") else {
        return;
    };
    pg.create("same");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut lite = Db::open(&dir.path().join("r.db")).expect("sqlite");
    let mut post = Db::open(Path::new(&pg.url("same"))).expect("postgres");
    assert_eq!(post.version().expect("version"), schema::VERSION);
    fill(&mut lite);
    fill(&mut post);
    let (l, p) = (
        flowlab_db::report::input(&lite, None).expect("sqlite's report"),
        flowlab_db::report::input(&post, None).expect("postgres's report"),
    );
    assert_eq!(p, l);
    assert_eq!(p.trials.len(), 4);
    assert!(p.trials.iter().all(|t| !t.metrics.is_empty()));
    assert_eq!(p.attempts.len(), 1, "the failed attempt run again");
    let trials = |db: &Db| {
        let id = db.find_study("s").expect("find").expect("there").id;
        db.trials(id)
            .expect("trials")
            .into_iter()
            .map(|mut t| {
                // Stamped as each database recorded it.
                t.id = 0;
                t.started = 0.0;
                t.ended = None;
                t
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(trials(&post), trials(&lite));
    assert_eq!(
        post.clocks(1).expect("clocks"),
        lite.clocks(1).expect("clocks")
    );
    assert_eq!(post.monitor_runs("wan").expect("runs"), [mesh_run()]);
    assert_eq!(lite.monitor_runs("wan").expect("runs"), [mesh_run()]);
    // The views answer the same.
    assert_eq!(
        pg.psql(
            "same",
            "SELECT count(*), round(sum(throughput_bps)) FROM trial_summary WHERE status = 'ok'"
        ),
        {
            let raw = rusqlite::Connection::open(dir.path().join("r.db")).expect("raw");
            let (n, sum): (i64, f64) = raw
                .query_row(
                    "SELECT count(*), sum(throughput_bps) FROM trial_summary WHERE status = 'ok'",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .expect("sqlite's view");
            format!("{n}|{}", sum.round())
        }
    );
}

/// Two runners claiming every trial of a study at once: each trial is claimed by one.
#[test]
fn two_runners_on_postgres_never_claim_one_trial_twice() {
    let Some((_one, pg)) = pg("two runners at once") else {
        return;
    };
    pg.create("two");
    let url = pg.url("two");
    let study = Db::open(Path::new(&url))
        .expect("db")
        .study("s", STUDY, 1)
        .expect("study")
        .id;
    let claimers: Vec<_> = (0..2)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut db = Db::open(Path::new(&url)).expect("db");
                let runner = db.register_runner("0.1.0", "{}").expect("runner");
                let mut mine = Vec::new();
                for repetition in 1..=40 {
                    let (label, params) = cell(1000);
                    if let Claim::Mine(t) = db
                        .claim(
                            study,
                            runner,
                            (&label, &params),
                            repetition,
                            Retake::default(),
                        )
                        .expect("claim")
                    {
                        mine.push(t);
                    }
                }
                mine
            })
        })
        .collect();
    let mut all: Vec<i64> = claimers
        .into_iter()
        .flat_map(|c| c.join().expect("a claimer"))
        .collect();
    all.sort_unstable();
    let claimed = all.len();
    all.dedup();
    assert_eq!(claimed, 40, "every trial claimed");
    assert_eq!(all.len(), 40, "none twice");
}

/// A controller on another machine that died holding a trial: its claim holds for its
/// lease, then `--resume` takes it over.
#[test]
fn a_dead_controllers_claim_comes_free_after_its_lease_on_postgres() {
    let Some((_one, pg)) = pg("a lease") else {
        return;
    };
    pg.create("lease");
    let url = pg.url("lease");
    let mut db = Db::open(Path::new(&url)).expect("db");
    let study = db.study("s", STUDY, 1).expect("study").id;
    let (label, params) = cell(1000);
    let dead = db.register_runner("0.1.0", "{}").expect("runner");
    let Claim::Mine(t) = db
        .claim(study, dead, (&label, &params), 1, Retake::default())
        .expect("claim")
    else {
        panic!("free");
    };
    let beat = |ago: f64| {
        pg.psql(
            "lease",
            &format!(
                "UPDATE runner SET host = 'elsewhere', \
                 heartbeat = extract(epoch FROM now()) - {ago} WHERE id = {dead}"
            ),
        );
    };
    let me = db.register_runner("0.1.0", "{}").expect("runner");
    let resume = Retake {
        abandoned: true,
        failed: false,
    };
    beat(flowlab_db::LEASE - 10.0);
    assert_eq!(
        db.claim(study, me, (&label, &params), 1, resume)
            .expect("claim"),
        Claim::Busy
    );
    beat(flowlab_db::LEASE + 10.0);
    assert_eq!(
        db.claim(study, me, (&label, &params), 1, resume)
            .expect("claim"),
        Claim::Mine(t)
    );
}

/// A database at the previous version (version 7's column and view as version 6 had
/// them) is migrated when opened; one holding tables that are not flowlab's is refused
/// untouched.
#[test]
fn a_postgres_database_is_migrated_and_a_foreign_one_refused() {
    let Some((_one, pg)) = pg("migrations") else {
        return;
    };
    pg.create("old");
    let url = pg.url("old");
    drop(Db::open(Path::new(&url)).expect("made"));
    assert_eq!(
        pg.psql("old", "SELECT version FROM flowlab_schema"),
        schema::VERSION.to_string()
    );
    pg.psql(
        "old",
        &format!(
            "ALTER TABLE runner DROP COLUMN heartbeat; \
             UPDATE flowlab_schema SET version = {}",
            schema::VERSION - 1
        ),
    );
    let db = Db::open(Path::new(&url)).expect("migrated");
    assert_eq!(db.version().expect("version"), schema::VERSION);
    let runner = db.register_runner("0.1.0", "{}").expect("runner");
    db.heartbeat(runner).expect("version 7's column is back");

    pg.create("theirs");
    pg.psql("theirs", "CREATE TABLE orders (id BIGINT)");
    let e = Db::open(Path::new(&pg.url("theirs"))).expect_err("not ours");
    assert!(matches!(e, DbError::Foreign { .. }), "{e}");
    assert!(
        e.to_string().starts_with("postgres://flowlab@127.0.0.1:"),
        "named without a password: {e}"
    );
    assert_eq!(
        pg.psql(
            "theirs",
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ),
        "1"
    );
}
