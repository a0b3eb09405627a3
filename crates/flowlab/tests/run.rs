//! `flowlab run` end to end on loopback: a small study into a temporary database, its
//! rows checked against the plan; refusals before anything starts; a failing trial
//! recorded while the rest complete; a runner killed mid-study and resumed (no trial
//! lost or run twice); Ctrl-C keeping every finished trial; two runners sharing one
//! database.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use flowlab_db::Db;

fn flowlab() -> assert_cmd::Command {
    assert_cmd::Command::cargo_bin("flowlab").expect("the flowlab binary")
}

/// 2 parameters × 2 values × 3 repetitions, against a server the runner starts.
const SMALL: &str = r#"
name = "small"
description = "two lengths, two directions"
repeat = 3

[params]
length = ["8K", "64K"]
[params.direction]
up = ""
down = "-R"

[[server]]
name = "a"

[[step]]
name = "transfer"
kind = "test"
args = "{a.host} -p {a.port} -n 2M -l {length} {direction}"
"#;

fn write_study(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("study.toml");
    std::fs::write(&path, text).expect("write the study");
    path
}

fn run(dir: &Path, args: &[&str]) -> Output {
    flowlab()
        .current_dir(dir)
        .arg("run")
        .args(args)
        .timeout(Duration::from_secs(120))
        .output()
        .expect("run flowlab run")
}

fn text(out: &Output) -> String {
    support::said(out)
}

/// Each recorded trial as (cell, repetition, status).
fn rows(db: &Path, study: &str) -> Vec<(String, u32, String)> {
    let db = Db::open_existing(db).expect("open the results");
    let s = db
        .find_study(study)
        .expect("query")
        .expect("the study is recorded");
    let mut rows: Vec<_> = db
        .trials(s.id)
        .expect("trials")
        .into_iter()
        .map(|t| (t.cell, t.repetition, t.status.to_string()))
        .collect();
    rows.sort();
    rows
}

#[test]
fn a_small_study_is_recorded_trial_by_trial() {
    let dir = tempfile::tempdir().expect("tempdir");
    let study = write_study(dir.path(), SMALL);
    let out = run(dir.path(), &[study.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("[12/12] "), "{stdout}");
    assert!(stdout.contains("study small: 12 ok, 0 failed"), "{stdout}");

    let db_path = dir.path().join("results.db");
    let rows = rows(&db_path, "small");
    let mut want = Vec::new();
    for length in ["8K", "64K"] {
        for direction in ["down", "up"] {
            for rep in 1..=3 {
                want.push((
                    format!("length={length} direction={direction}"),
                    rep,
                    "ok".to_string(),
                ));
            }
        }
    }
    want.sort();
    assert_eq!(rows, want);

    // Each step's document is a test result of what the cell asked for, and its metrics
    // are the document's own numbers.
    let db = Db::open_existing(&db_path).expect("open");
    let s = db.find_study("small").expect("query").expect("recorded");
    assert_eq!(s.file, SMALL);
    for t in db.trials(s.id).expect("trials") {
        let step = &t.steps[0];
        assert!(step.args.contains("-n 2M"), "{}", step.args);
        assert_eq!(
            step.args.contains("-R"),
            t.cell.contains("down"),
            "{}",
            step.args
        );
        let doc: serde_json::Value =
            serde_json::from_str(step.result.as_deref().expect("a document")).expect("json");
        let received = doc["end"]["sums"][0]["receiver"]["bytes"]
            .as_u64()
            .expect("bytes");
        assert_eq!(received, 2 * 1024 * 1024, "{}: exactly -n 2M", t.cell);
        let len = doc["start"]["spec"]["len"].as_u64().expect("len");
        assert_eq!(len, if t.cell.contains("8K") { 8192 } else { 65536 });
    }
    let raw = rusqlite::Connection::open(&db_path).expect("raw");
    let (n, bytes): (i64, f64) = raw
        .query_row(
            "SELECT count(*), min(value) FROM trial_metric WHERE metric = 'received_bytes'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("metrics");
    assert_eq!((n, bytes), (12, 2.0 * 1024.0 * 1024.0));

    // Run again: every trial is recorded, none runs twice.
    let out = run(dir.path(), &[study.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("0 ok, 0 failed") && text(&out).contains("12 recorded before"),
        "{}",
        text(&out)
    );
    assert_eq!(self::rows(&db_path, "small").len(), 12);
}

/// A study's steps measure QUIC and MPTCP as they measure TCP: a server given
/// `--quic=0` says where it serves QUIC, `{a.quic_port}` names it, and each step's
/// document is of the transport it asked for. A server given no `--quic` has no QUIC
/// port to name: refused before anything runs.
#[test]
fn a_studys_steps_measure_quic_and_mptcp() {
    // SAFETY: socket(2) and close(2) on a descriptor of this test's own.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_MPTCP) };
    if fd < 0 {
        let why = "this system makes no MPTCP socket (net.mptcp.enabled = 0?)";
        assert!(std::env::var_os("CI").is_none(), "{why}: required in CI");
        support::skip(why);
        return;
    }
    unsafe { libc::close(fd) };
    let dir = tempfile::tempdir().expect("tempdir");
    let study = write_study(
        dir.path(),
        r#"name = "transports"
[[server]]
name = "a"
args = "--quic=0"
[[step]]
name = "quic"
kind = "test"
args = "{a.host} --quic -p {a.quic_port} -n 1M"
[[step]]
name = "mptcp"
kind = "test"
args = "{a.host} -m -p {a.port} -n 1M"
[[step]]
name = "tcp"
kind = "test"
args = "{a.host} -p {a.port} -n 1M"
"#,
    );
    let out = run(dir.path(), &[study.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", text(&out));
    let db = Db::open_existing(&dir.path().join("results.db")).expect("open");
    let s = db
        .find_study("transports")
        .expect("query")
        .expect("recorded");
    let trials = db.trials(s.id).expect("trials");
    assert_eq!(trials.len(), 1);
    let docs: Vec<serde_json::Value> = trials[0]
        .steps
        .iter()
        .map(|step| {
            serde_json::from_str(step.result.as_deref().expect("a document")).expect("json")
        })
        .collect();
    assert_eq!(docs.len(), 3);
    for doc in &docs {
        assert_eq!(doc["end"]["sums"][0]["receiver"]["bytes"], 1 << 20);
    }
    assert_eq!(docs[0]["start"]["spec"]["protocol"], "quic");
    assert!(docs[0]["end"]["quic"]["connections"].is_array());
    assert_eq!(docs[1]["start"]["spec"]["mptcp"], true);
    assert!(docs[1]["end"]["mptcp"]["connections"].is_array());
    assert_eq!(docs[2]["start"]["spec"]["protocol"], "tcp");
    assert!(docs[2]["end"]["mptcp"].is_null());
    let refused = write_study(
        dir.path(),
        "name = \"q\"\n[[server]]\nname = \"a\"\n[[step]]\nkind = \"test\"\nargs = \"{a.host} --quic -p {a.quic_port}\"\n",
    );
    let out = run(dir.path(), &[refused.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("server a serves no QUIC: give it --quic=0 in its args"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_dry_run_prints_the_plan_and_touches_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let study = write_study(
        dir.path(),
        &SMALL.replace("repeat = 3", "repeat = 3\nseed = 5"),
    );
    let out = run(
        dir.path(),
        &[
            "--dry-run",
            "--scale",
            "0.5",
            study.to_str().expect("utf-8"),
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("4 cells x 3 repetitions = 12 trials, order random (seed 5)"),
        "{stdout}"
    );
    // --scale halves the amount, written out in bytes.
    assert!(
        stdout.contains("transfer: flowlab test 127.0.0.1 -p 5201 -n 1048576 -l 64K -R"),
        "{stdout}"
    );
    assert!(
        !dir.path().join("results.db").exists(),
        "a dry run opens no database"
    );

    let out = run(
        dir.path(),
        &[
            "--dry-run",
            "--only",
            "length=8K,direction=up",
            study.to_str().expect("utf-8"),
        ],
    );
    assert!(
        text(&out).contains("= 12 trials (3 of them run: --only, --repeat)"),
        "{}",
        text(&out)
    );
    let out = run(
        dir.path(),
        &["--dry-run", "--repeat", "1", study.to_str().expect("utf-8")],
    );
    assert!(
        text(&out).contains("= 12 trials (4 of them run: --only, --repeat)"),
        "{}",
        text(&out)
    );
    let out = run(
        dir.path(),
        &[
            "--dry-run",
            "--only",
            "length=9K",
            study.to_str().expect("utf-8"),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).contains("--only length=9K: '9K' is not a value of 'length' (it has: 8K, 64K)"),
        "{}",
        text(&out)
    );
}

/// Refused before anything starts, naming the file and line, or the step, the cell and
/// the flag; no database is created.
#[test]
fn a_bad_study_is_refused_before_anything_runs() {
    let cases = [
        (
            SMALL.replace("{length}", "{lenght}"),
            "study.toml: line 18, column 8: args: '{lenght}' is neither a parameter nor a server",
        ),
        (
            SMALL.replace("-n 2M", "-n 2M --bogus"),
            "study.toml: step 'transfer', cell length=8K direction=up: error: unexpected argument '--bogus' found",
        ),
        (
            SMALL.replace("\"-R\"", "\"-R --bidir\""),
            "step 'transfer', cell length=8K direction=down: error: the argument '--reverse' cannot be used with '--bidir'",
        ),
        (
            SMALL.replace("name = \"a\"\n", "name = \"a\"\nargs = \"--max-tests 0\"\n"),
            "study.toml: server a: --max-tests must be at least 1",
        ),
    ];
    for (study_text, says) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        let study = write_study(dir.path(), &study_text);
        let out = run(dir.path(), &[study.to_str().expect("utf-8")]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains(says), "want {says}\ngot {}", text(&out));
        assert!(
            !dir.path().join("results.db").exists(),
            "{says}: nothing started"
        );
    }
}

/// A step against a port nobody listens on fails; its trial is recorded as failed with
/// the error, and the others still run. `on_error = "stop"` ends the study there.
#[test]
fn a_failed_trial_is_recorded_and_the_rest_complete() {
    let open = support::default_server();
    let closed = support::free_port();
    let faulty = |on_error: &str| {
        format!(
            r#"
name = "faulty"
repeat = 2
order = "sequential"
on_error = "{on_error}"
[params.port]
closed = "{closed}"
open = "{open}"
[[step]]
kind = "test"
args = "127.0.0.1 -p {{port}} -n 1M --connect-timeout 500"
"#
        )
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let study = write_study(dir.path(), &faulty("continue"));
    let out = run(dir.path(), &[study.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("2 ok, 2 failed"), "{}", text(&out));
    assert!(
        text(&out).contains("2 trials failed (recorded in results.db"),
        "{}",
        text(&out)
    );
    let db = Db::open_existing(&dir.path().join("results.db")).expect("open");
    let s = db.find_study("faulty").expect("q").expect("recorded");
    for t in db.trials(s.id).expect("trials") {
        if t.cell == "port=closed" {
            assert_eq!(t.status, flowlab_results::study::Outcome::Failed);
            let e = t.error.expect("an error");
            assert!(
                e.starts_with("step 'step 1': ") && e.contains(&closed.to_string()),
                "{e}"
            );
        } else {
            assert_eq!(
                t.status,
                flowlab_results::study::Outcome::Ok,
                "{:?}",
                t.error
            );
        }
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let study = write_study(dir.path(), &faulty("stop"));
    let out = run(dir.path(), &[study.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out)
            .contains("stopped at the first failure (on_error = \"stop\") (3 trials not run)"),
        "{}",
        text(&out)
    );
    assert_eq!(rows(&dir.path().join("results.db"), "faulty").len(), 1);
}

/// Timed trials, long enough to be interrupted in the middle of one.
const TIMED: &str = r#"
name = "timed"
repeat = 4
order = "sequential"
[[server]]
name = "a"
[[step]]
kind = "test"
args = "{a.host} -p {a.port} -t 1 -i 0"
"#;

fn wait_for_trials(db: &Path, at_least: usize, within: Duration) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if db.exists() {
            if let Ok(d) = Db::open_existing(db) {
                if let Ok(Some(s)) = d.find_study("timed") {
                    let r = d.recorded(s.id).expect("recorded");
                    if r.ok as usize >= at_least && r.running == 1 {
                        return;
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{at_least} trials did not finish within {within:?}");
}

/// Waits (up to 5 s) until no process works in `dir`: the runner's servers and
/// clients run there, so none may be left behind.
fn assert_no_process_in(dir: &Path) {
    let dir = dir.canonicalize().expect("canonical");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left: Vec<String> = std::fs::read_dir("/proc")
            .expect("/proc")
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .bytes()
                    .all(|b| b.is_ascii_digit())
            })
            .filter(|e| std::fs::read_link(e.path().join("cwd")).is_ok_and(|c| c.starts_with(&dir)))
            .map(|e| {
                std::fs::read_to_string(e.path().join("cmdline"))
                    .unwrap_or_default()
                    .replace('\0', " ")
            })
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "left behind: {left:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn spawn_runner(dir: &Path, study: &Path, resume: bool) -> std::process::Child {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("flowlab"));
    cmd.current_dir(dir).arg("run").arg(study);
    if resume {
        cmd.arg("--resume");
    }
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn")
}

#[test]
fn a_killed_runner_is_resumed_without_losing_or_repeating_a_trial() {
    let dir = tempfile::tempdir().expect("tempdir");
    let study = write_study(dir.path(), TIMED);
    let db = dir.path().join("results.db");
    let mut runner = spawn_runner(dir.path(), &study, false);
    // One trial recorded and the next one running: killed outright.
    wait_for_trials(&db, 1, Duration::from_secs(60));
    runner.kill().expect("kill");
    runner.wait().expect("reap");
    // Its server and client died with it.
    assert_no_process_in(dir.path());
    let before = {
        let d = Db::open_existing(&db).expect("open");
        let s = d.find_study("timed").expect("q").expect("recorded");
        d.recorded(s.id).expect("recorded")
    };
    assert_eq!(before.abandoned, 1, "{before:?}");

    // Without --resume the gone runner's trial is left, and said so.
    let out = run(dir.path(), &[study.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("1 trials were claimed by a runner that is gone: --resume runs them"),
        "{}",
        text(&out)
    );
    // With it, the study completes; the gone runner's directories are swept.
    let gone = runner.id();
    let out = run(dir.path(), &["--resume", study.to_str().expect("utf-8")]);
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .expect("temp dir")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("flowlab-{gone}-"))
        })
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("study timed: 1 ok, 0 failed"),
        "{}",
        text(&out)
    );
    let rows = rows(&db, "timed");
    assert_eq!(rows.len(), 4);
    assert!(rows.iter().all(|r| r.2 == "ok"), "{rows:?}");
}

/// Ctrl-C, SIGTERM (a service manager's stop) and SIGHUP (the terminal gone) each stop a
/// run the same way: the trial running is given back, every finished one kept, nothing
/// left running. Each runner is stopped one trial further on, and a last run finishes.
#[test]
fn a_stop_signal_keeps_every_finished_trial_and_gives_back_the_running_one() {
    use nix::sys::signal::Signal;
    let dir = tempfile::tempdir().expect("tempdir");
    let study = write_study(dir.path(), TIMED);
    let db = dir.path().join("results.db");
    for (finished, signal) in [
        (1, Signal::SIGINT),
        (2, Signal::SIGTERM),
        (3, Signal::SIGHUP),
    ] {
        let runner = spawn_runner(dir.path(), &study, false);
        wait_for_trials(&db, finished, Duration::from_secs(60));
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(runner.id() as i32), signal)
            .expect("signal");
        let out = runner.wait_with_output().expect("wait");
        assert_eq!(out.status.code(), Some(1), "{signal}: {}", text(&out));
        assert!(
            text(&out).contains("interrupted ("),
            "{signal}: {}",
            text(&out)
        );
        let d = Db::open_existing(&db).expect("open");
        let s = d.find_study("timed").expect("q").expect("recorded");
        let r = d.recorded(s.id).expect("recorded");
        assert!(
            r.ok as usize >= finished && r.running == 0 && r.abandoned == 0,
            "{signal}: {r:?}"
        );
        assert_no_process_in(dir.path());
    }
    let out = run(dir.path(), &[study.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(rows(&db, "timed").len(), 4);
}

#[test]
fn two_runners_share_a_database_and_never_run_a_trial_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let study = write_study(dir.path(), &SMALL.replace("repeat = 3", "repeat = 4"));
    let a = spawn_runner(dir.path(), &study, true);
    let b = spawn_runner(dir.path(), &study, true);
    let (a, b) = (
        a.wait_with_output().expect("a"),
        b.wait_with_output().expect("b"),
    );
    assert!(
        a.status.success() && b.status.success(),
        "{}\n{}",
        text(&a),
        text(&b)
    );
    let ran = |o: &Output| -> usize {
        let t = text(o);
        let line = t
            .lines()
            .find(|l| l.starts_with("study small: "))
            .expect("summary");
        line["study small: ".len()..]
            .split(' ')
            .next()
            .expect("n")
            .parse()
            .expect("count")
    };
    assert_eq!(ran(&a) + ran(&b), 16, "{}\n{}", text(&a), text(&b));
    let rows = rows(&dir.path().join("results.db"), "small");
    assert_eq!(rows.len(), 16);
    assert!(rows.iter().all(|r| r.2 == "ok"), "{rows:?}");
}

/// `--retry-failed`: trials that failed (their server was down) run again once it is up;
/// each failed attempt stays in the database and the report lists it apart.
#[test]
fn failed_trials_run_again_when_asked_and_their_failures_are_kept() {
    let port = support::free_port();
    let study_text = format!(
        r#"
name = "retry"
repeat = 2
order = "sequential"
[[step]]
kind = "test"
args = "127.0.0.1 -p {port} -n 1M --connect-timeout 500"
"#
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let study = write_study(dir.path(), &study_text);
    let s = study.to_str().expect("utf-8");
    let out = run(dir.path(), &[s]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("--retry-failed runs them again"),
        "{}",
        text(&out)
    );
    // Without --retry-failed a failed trial is recorded, not run again.
    let out = run(dir.path(), &[s]);
    assert!(text(&out).contains("2 recorded before"), "{}", text(&out));
    let db = dir.path().join("results.db");
    assert!(rows(&db, "retry").iter().all(|r| r.2 == "failed"));

    let mut server = Command::new(assert_cmd::cargo::cargo_bin("flowlab"))
        .args(["serve", "-B", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("a server");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !support::listening_here(port) {
        assert!(Instant::now() < deadline, "the server did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = run(dir.path(), &["--retry-failed", s]);
    let _ = server.kill();
    let _ = server.wait();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("study retry: 2 ok, 0 failed"),
        "{}",
        text(&out)
    );
    assert!(rows(&db, "retry").iter().all(|r| r.2 == "ok"));
    let d = Db::open_existing(&db).expect("open");
    let id = d.find_study("retry").expect("q").expect("recorded").id;
    let attempts = d.attempts(id).expect("attempts");
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert!(
        attempts.iter().all(|a| a
            .error
            .as_deref()
            .is_some_and(|e| e.contains(&port.to_string()))),
        "{attempts:?}"
    );
    let report = flowlab()
        .current_dir(dir.path())
        .args(["report", "results.db", "--format", "markdown"])
        .output()
        .expect("report");
    let md = String::from_utf8_lossy(&report.stdout);
    assert!(
        md.contains("2 of 2 trials ok") || md.contains("2 ok"),
        "{md}"
    );
    assert!(md.contains("## Failed attempts run again"), "{md}");
    assert_eq!(md.matches(&format!(":{port}")).count(), 2, "{md}");
}

/// Regression: a runner whose binary was replaced or deleted mid-study (a rebuild during
/// a study of hours) failed every later trial ("exec of …flowlab (deleted) failed"); it
/// runs its children from its own process's binary.
#[test]
fn a_study_outlives_its_binary_being_deleted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let copy = dir.path().join("flowlab-copy");
    std::fs::copy(assert_cmd::cargo::cargo_bin("flowlab"), &copy).expect("copy the binary");
    let study = write_study(dir.path(), TIMED);
    let db = dir.path().join("results.db");
    let runner = Command::new(&copy)
        .current_dir(dir.path())
        .arg("run")
        .arg(&study)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    wait_for_trials(&db, 1, Duration::from_secs(60));
    std::fs::remove_file(&copy).expect("delete the binary");
    let out = runner.wait_with_output().expect("wait");
    assert!(out.status.success(), "{}", text(&out));
    let rows = rows(&db, "timed");
    assert_eq!(rows.len(), 4);
    assert!(rows.iter().all(|r| r.2 == "ok"), "{rows:?}");
}

/// A study on a topology is checked against it before anything is built (no root
/// needed to be refused).
#[test]
fn nodes_and_paths_are_checked_before_anything_is_built() {
    let dir = tempfile::tempdir().expect("tempdir");
    let topo = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../topologies/small.toml"),
    )
    .expect("small.toml");
    std::fs::write(dir.path().join("net.toml"), topo).expect("write");
    let study = |server_node: &str, from: &str| {
        format!(
            "name = \"t\"\ntopology = \"net.toml\"\n[[server]]\nname = \"b\"\n{server_node}\n[[step]]\nkind = \"test\"\n{from}\nargs = \"{{b.host}} -p {{b.port}} -t 1\"\n"
        )
    };
    let cases = [
        (
            study("node = \"h9\"", "from = \"h1\""),
            "net.toml; it has: h1, h2, h3, r1, r2)",
        ),
        (
            study("node = \"s1\"", "from = \"h1\""),
            "server b: 's1' is a switch; name a host or a router",
        ),
        (
            study("node = \"h2\"", ""),
            "step 'step 1' runs on this machine but server b on h2: give both a node of the topology (`from` and `node`), or neither",
        ),
        (
            study("", "from = \"h1\""),
            "step 'step 1' runs on h1 but server b on this machine",
        ),
    ];
    for (study_text, says) in cases {
        let path = write_study(dir.path(), &study_text);
        let out = run(dir.path(), &["--dry-run", path.to_str().expect("utf-8")]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains(says), "want {says}\ngot {}", text(&out));
    }
    // A [[link]]'s values, checked cell by cell as the topology file would be.
    let linked = |link: &str, rate: &str| {
        study("node = \"h2\"", "from = \"h1\"").replace(
            "[[server]]",
            &format!("[params]\nr = [\"10M\", \"{rate}\"]\n[[link]]\nname = \"{link}\"\nrate = \"{{r}}\"\n[[server]]"),
        )
    };
    for (study_text, says) in [
        (
            linked("lan", "20M"),
            "[[link]] 'lan', cell r=10M: topology small has no link 'lan' (it has: link 1, link 2, link 3, wan, link 5)",
        ),
        (
            linked("wan", "0"),
            "[[link]] 'wan', cell r=0: wan: rate must be more than 0",
        ),
    ] {
        let path = write_study(dir.path(), &study_text);
        let out = run(dir.path(), &["--dry-run", path.to_str().expect("utf-8")]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains(says), "want {says}\ngot {}", text(&out));
    }
    let path = write_study(dir.path(), &linked("wan", "20M"));
    let out = run(dir.path(), &["--dry-run", path.to_str().expect("utf-8")]);
    assert!(
        text(&out).contains("cell r=20M\n  link wan: rate 20M\n"),
        "{}",
        text(&out)
    );
    // A trace per cell, read beside the topology file; a bad one refused with its cell,
    // file and line.
    std::fs::write(dir.path().join("one.trace"), "1\n2\n").expect("trace");
    std::fs::write(dir.path().join("bad.trace"), "1\nsoon\n").expect("trace");
    let traced = |traces: &str| {
        study("node = \"h2\"", "from = \"h1\"").replace(
            "[[server]]",
            &format!(
                "[params]\nt = [{traces}]\n[[link]]\nname = \"wan\"\ntrace = \"{{t}}\"\n[[server]]"
            ),
        )
    };
    let path = write_study(dir.path(), &traced("\"one.trace\""));
    let out = run(dir.path(), &["--dry-run", path.to_str().expect("utf-8")]);
    assert!(
        text(&out).contains("cell t=one.trace\n  link wan: trace one.trace\n"),
        "{}",
        text(&out)
    );
    let path = write_study(dir.path(), &traced("\"one.trace\", \"bad.trace\""));
    let out = run(dir.path(), &["--dry-run", path.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("[[link]] 'wan', cell t=bad.trace: wan: trace: ")
            && text(&out).contains("bad.trace: line 2: 'soon' is not a time in whole milliseconds"),
        "{}",
        text(&out)
    );
    // Keeping the CPUs awake needs an emulator in every network the study builds:
    // small.toml has no delay, and a cell may take it away.
    let awake = |study_text: String| {
        study_text.replace(
            "topology = \"net.toml\"",
            "topology = \"net.toml\"\nkeep_cpus_awake = true",
        )
    };
    let delayed = |delays: &str| {
        awake(study("node = \"h2\"", "from = \"h1\"")).replace(
            "[[server]]",
            &format!(
                "[params]\nd = [{delays}]\n[[link]]\nname = \"wan\"\ndelay = \"{{d}}\"\n[[server]]"
            ),
        )
    };
    for (study_text, says) in [
        (
            awake(study("node = \"h2\"", "from = \"h1\"")),
            "net.toml) has delay, jitter or loss, so there is no emulator to keep the CPUs awake for",
        ),
        (
            delayed("\"2ms\", \"0ms\""),
            "net.toml), cell d=0ms, has delay, jitter or loss",
        ),
    ] {
        let path = write_study(dir.path(), &study_text);
        let out = run(dir.path(), &["--dry-run", path.to_str().expect("utf-8")]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(
            text(&out).contains("keep_cpus_awake: no link of topology small ("),
            "{}",
            text(&out)
        );
        assert!(text(&out).contains(says), "want {says}\ngot {}", text(&out));
    }
    let path = write_study(dir.path(), &delayed("\"2ms\", \"5ms\""));
    let out = run(dir.path(), &["--dry-run", path.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", text(&out));
    // A valid one shows the path's real address in its plan, and whose it is.
    let path = write_study(dir.path(), &study("node = \"h2\"", "from = \"h1\""));
    let out = run(dir.path(), &["--dry-run", path.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", text(&out));
    let plan = text(&out);
    let step = plan
        .lines()
        .find(|l| l.contains("step 1: flowlab test 10.0."))
        .unwrap_or_else(|| panic!("{plan}"));
    let address = step
        .split_whitespace()
        .find(|w| w.starts_with("10.0."))
        .expect("an address");
    assert!(
        step.ends_with(&format!("  (from h1; {address} is h2)")),
        "{step}"
    );
}

/// The same study into PostgreSQL (a server of the test's own): `--db postgres://…`,
/// every trial recorded there, the run's lines naming the database without its
/// password, and `flowlab report` reading it back as it reads a file.
#[test]
fn a_study_runs_into_postgresql_and_reports_from_it() {
    let Some(pg) = support::Postgres::start("a study into PostgreSQL") else {
        return;
    };
    pg.create("results");
    let dir = tempfile::tempdir().expect("tempdir");
    write_study(dir.path(), SMALL);
    let url = pg.url("results");
    // A password the server does not ask for (it trusts loopback) and the run must
    // never print.
    let with_password = url.replace("flowlab@", "flowlab:s3cret@");
    let out = run(dir.path(), &["study.toml", "--db", &with_password]);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("study small: 12 ok, 0 failed"), "{said}");
    assert!(said.contains(&format!("results in {url}")), "{said}");
    assert!(!said.contains("s3cret"), "{said}");
    let recorded = rows(Path::new(&url), "small");
    assert_eq!(recorded.len(), 12, "{recorded:?}");
    assert!(recorded.iter().all(|(_, _, s)| s == "ok"), "{recorded:?}");
    // Run again: nothing left to run.
    let again = run(dir.path(), &["study.toml", "--db", &url]);
    assert!(
        text(&again).contains("12 recorded before"),
        "{}",
        text(&again)
    );
    let report = flowlab()
        .args(["report", &url])
        .timeout(Duration::from_secs(60))
        .output()
        .expect("report");
    let md = String::from_utf8_lossy(&report.stdout);
    assert!(report.status.success(), "{}", text(&report));
    assert!(md.starts_with("# Study small"), "{md}");
    assert!(md.contains("12 of 12 trials ok, 0 failed"), "{md}");
    assert!(
        md.contains("## Throughput (Gbit/s) — step transfer"),
        "{md}"
    );
}
