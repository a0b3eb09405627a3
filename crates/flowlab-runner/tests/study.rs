//! The study runner's decisions, checked at an in-process place: no binary, no network,
//! a real results database. What flowlab's own commands do with the same studies is
//! checked by the binary's tests (`crates/flowlab/tests/run.rs`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use flowlab_db::Db;
use flowlab_results::spec::Amount;
use flowlab_results::study::{Outcome, RunSummary, TrialEvent, TrialStatus};
use flowlab_runner::place::{Call, Echoes, Ended, InProcess};
use flowlab_runner::study::{self, Commands, Event, Options, Run, RunError, Setup, TestLine};

/// A grammar of a few flags: `test HOST [-t SECONDS]`, `serve` with anything, `rtt HOST`.
#[derive(Debug)]
struct Grammar;

impl Commands for Grammar {
    fn test(&self, argv: Vec<String>) -> Result<TestLine, String> {
        if argv.iter().any(|a| a == "--bogus") {
            return Err("unexpected argument '--bogus' found".into());
        }
        let seconds = match argv.iter().position(|a| a == "-t") {
            Some(i) => argv
                .get(i + 1)
                .and_then(|v| v.parse().ok())
                .ok_or("-t: a number of seconds")?,
            None => 10.0,
        };
        Ok(TestLine {
            argv,
            amount: Amount::Seconds(seconds),
            omit: 0,
        })
    }

    fn fetch(&self, _: &[String]) -> Result<(), String> {
        Ok(())
    }

    fn serve(&self, _: &[String]) -> Result<(), String> {
        Ok(())
    }

    fn rtt(&self, argv: &[String]) -> Result<Echoes, String> {
        Ok(Echoes {
            to: argv[0].clone(),
            count: 3,
            interval: Duration::from_millis(1),
            timeout: Duration::from_millis(1),
        })
    }

    fn setup(&self, _: &[String]) -> Result<Setup, String> {
        Ok(Setup::Other)
    }
}

/// The port the in-process server says it listens on.
const PORT: u16 = 5999;

/// flowlab as the tests play it: a server that says where it listens and waits to be
/// stopped; a test that writes a document naming its arguments, fails when its host is
/// `fail`, and runs until killed when it is `hang`.
fn flowlab(call: &Call<'_>) -> Ended {
    match call.argv[0].as_str() {
        "serve" => {
            (call.say)(&format!(
                r#"{{"event":"listening","address":"127.0.0.1:{PORT}"}}"#
            ));
            while !call.killed.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(1));
            }
            (0, String::new())
        }
        "test" => match call.argv[1].as_str() {
            "fail" => (1, "error: cannot connect to fail: refused\n".into()),
            "hang" => {
                while !call.killed.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                (1, String::new())
            }
            _ => {
                (call.say)(&serde_json::json!({ "args": call.argv }).to_string());
                (0, String::new())
            }
        },
        other => (2, format!("error: no command {other}\n")),
    }
}

struct Lab {
    dir: tempfile::TempDir,
    study: PathBuf,
    place: InProcess,
}

impl Lab {
    fn new(text: &str) -> Lab {
        let dir = tempfile::tempdir().expect("tempdir");
        let study = dir.path().join("study.toml");
        std::fs::write(&study, text).expect("write the study");
        Lab {
            dir,
            study,
            place: InProcess::new(flowlab),
        }
    }

    fn db(&self) -> PathBuf {
        self.dir.path().join("results.db")
    }

    fn prepare(&self) -> Result<study::Prepared, RunError> {
        study::prepare(&self.study, &Options::default(), &Grammar)
    }

    /// Runs the study with `stop`; its summary and every trial event.
    fn run_with(&self, stop: Arc<AtomicBool>) -> (RunSummary, Vec<TrialEvent>) {
        let prepared = self.prepare().expect("a valid study");
        let db = self.db();
        let run = Run {
            db: &db,
            resume: false,
            retry_failed: false,
            place: Arc::new(self.place.clone()),
            emulator: Path::new("/nonexistent"),
            commands: &Grammar,
            stop,
            version: "test",
        };
        let mut events = Vec::new();
        let summary = study::execute(&prepared, &run, &mut |e| {
            if let Event::Trial(t) = e {
                events.push(t.clone());
            }
        })
        .expect("the run");
        (summary, events)
    }

    fn run(&self) -> (RunSummary, Vec<TrialEvent>) {
        self.run_with(Arc::default())
    }

    fn trials(&self, name: &str) -> Vec<flowlab_db::TrialRow> {
        let db = Db::open_existing(&self.db()).expect("the database");
        let s = db.find_study(name).expect("query").expect("recorded");
        db.trials(s.id).expect("trials")
    }

    fn started(&self, command: &str) -> Vec<Vec<String>> {
        let started = self.place.started.lock().expect("lock");
        started
            .iter()
            .filter(|(argv, _)| argv[0] == command)
            .map(|(argv, _)| argv.clone())
            .collect()
    }
}

const SWEEP: &str = r#"
name = "sweep"
repeat = 2
order = "sequential"
[params]
length = ["8K", "64K"]
[[server]]
name = "a"
[[step]]
name = "up"
kind = "test"
args = "{a.host} -p {a.port} -l {length} -t 1"
"#;

/// [`SWEEP`] with its two cells testing hosts `a` and `b` instead ([`flowlab`] fails
/// against `fail`, hangs against `hang`).
fn sweep_of_hosts(a: &str, b: &str) -> String {
    SWEEP.replace("{a.host}", "{length}").replace(
        r#"length = ["8K", "64K"]"#,
        &format!(r#"length = ["{a}", "{b}"]"#),
    )
}

#[test]
fn every_trial_runs_at_the_place_and_is_recorded_in_the_plans_order() {
    let lab = Lab::new(SWEEP);
    let (summary, events) = lab.run();
    assert_eq!((summary.ok, summary.failed, summary.not_run), (4, 0, 0));
    let order: Vec<(String, u32)> = events
        .iter()
        .map(|e| (e.cell.clone(), e.repetition))
        .collect();
    assert_eq!(
        order,
        [
            ("length=8K".to_string(), 1),
            ("length=8K".to_string(), 2),
            ("length=64K".to_string(), 1),
            ("length=64K".to_string(), 2)
        ]
    );
    assert!(
        events.iter().all(|e| e.status == TrialStatus::Ok),
        "{events:?}"
    );
    // One server for the whole run, on a port the kernel picks, on loopback.
    let serves = lab.started("serve");
    assert_eq!(serves.len(), 1, "{serves:?}");
    assert_eq!(serves[0][..4], ["serve", "-J", "-p", "0"]);
    // Each step reached the port the server said, and its document was recorded.
    let tests = lab.started("test");
    assert_eq!(tests.len(), 4);
    for t in &tests {
        assert_eq!(t[1..4], ["127.0.0.1", "-p", &PORT.to_string()]);
        assert_eq!(t.last().map(String::as_str), Some("-J"));
    }
    let trials = lab.trials("sweep");
    assert_eq!(trials.len(), 4);
    for t in &trials {
        assert_eq!(t.status, Outcome::Ok);
        let step = &t.steps[0];
        assert_eq!((step.name.as_str(), step.kind.as_str()), ("up", "test"));
        let doc: serde_json::Value =
            serde_json::from_str(step.result.as_deref().expect("a document")).expect("JSON");
        assert!(
            doc["args"][5].as_str().is_some_and(|l| t.cell.ends_with(l)),
            "{doc}"
        );
        // Stamped by the place's clock (the in-process one counts from 2023), not this
        // machine's.
        assert!(
            step.started < 1.8e9 && step.started <= step.ended,
            "{step:?}"
        );
    }
    // A second run finds everything done and runs nothing.
    let (again, events) = lab.run();
    assert_eq!((again.ok, again.done_before), (0, 4));
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(lab.started("test").len(), 4);
}

#[test]
fn a_failed_step_fails_its_trial_and_the_rest_run_unless_the_study_stops_on_error() {
    let text = sweep_of_hosts("fail", "ok");
    let lab = Lab::new(&text);
    let (summary, events) = lab.run();
    assert_eq!((summary.ok, summary.failed), (2, 2), "{events:?}");
    let failed: Vec<_> = lab
        .trials("sweep")
        .into_iter()
        .filter(|t| t.status == Outcome::Failed)
        .collect();
    assert_eq!(failed.len(), 2);
    for t in failed {
        assert_eq!(
            t.error.as_deref(),
            Some("step 'up': cannot connect to fail: refused")
        );
        assert_eq!(
            t.steps[0].error.as_deref(),
            Some("cannot connect to fail: refused")
        );
    }

    let lab = Lab::new(&format!("on_error = \"stop\"\n{text}"));
    let (summary, _) = lab.run();
    assert!(summary.stopped_on_error);
    assert_eq!((summary.ok, summary.failed, summary.not_run), (0, 1, 3));
}

#[test]
fn warm_up_trials_run_first_and_are_not_recorded() {
    let lab = Lab::new(&format!("warmup = 2\n{SWEEP}"));
    let (summary, events) = lab.run();
    let warm: Vec<_> = events
        .iter()
        .filter(|e| e.status == TrialStatus::Warmup)
        .collect();
    assert_eq!(warm.len(), 2, "{events:?}");
    assert!(
        events[..2].iter().all(|e| e.status == TrialStatus::Warmup),
        "{events:?}"
    );
    assert_eq!(summary.ok, 4);
    assert_eq!(lab.started("test").len(), 6);
    assert_eq!(lab.trials("sweep").len(), 4);
}

#[test]
fn a_stop_kills_the_running_step_and_gives_its_trial_back() {
    let text = sweep_of_hosts("ok", "hang");
    let lab = Lab::new(&text);
    let stop = Arc::new(AtomicBool::new(false));
    let stopper = {
        let (stop, place) = (Arc::clone(&stop), lab.place.clone());
        std::thread::spawn(move || {
            // Stopped once the hanging step started.
            while !place
                .started
                .lock()
                .expect("lock")
                .iter()
                .any(|(a, _)| a[1] == "hang")
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            stop.store(true, Ordering::Release);
        })
    };
    let (summary, _) = lab.run_with(stop);
    stopper.join().expect("stopper");
    assert!(summary.interrupted);
    assert_eq!((summary.ok, summary.not_run), (2, 2));
    let trials = lab.trials("sweep");
    // The trial it stopped is given back: no row of it stays running, and it runs on
    // the next run.
    assert!(trials.iter().all(|t| t.status == Outcome::Ok), "{trials:?}");
    assert_eq!(trials.len(), 2);
}

#[test]
fn a_bad_step_is_refused_before_anything_runs() {
    let lab = Lab::new(&SWEEP.replace("-t 1", "-t 1 --bogus"));
    let e = lab.prepare().expect_err("refused");
    assert!(e.is_refusal(), "{e:?}");
    assert_eq!(
        e.to_string(),
        format!(
            "{}: step 'up', cell length=8K: unexpected argument '--bogus' found",
            lab.study.display()
        )
    );
    assert!(lab.place.started.lock().expect("lock").is_empty());
    assert!(!lab.db().exists());
}

#[test]
fn echoes_are_sent_by_the_place_from_the_steps_namespace() {
    let lab = Lab {
        place: InProcess::new(flowlab).echoing(|e, ns| {
            assert_eq!(ns, None);
            Ok(flowlab_results::rtt::RttResult::new(
                &e.to.to_string(),
                e.count,
                (1.0, 1.0),
                vec![0.5; e.count as usize],
                1.7e9,
            ))
        }),
        ..Lab::new("name = \"echo\"\n[[step]]\nkind = \"rtt\"\nargs = \"127.0.0.1\"\n")
    };
    let (summary, _) = lab.run();
    assert_eq!(summary.ok, 1);
    let step = &lab.trials("echo")[0].steps[0];
    assert_eq!(
        (step.kind.as_str(), step.args.as_str()),
        ("rtt", "127.0.0.1 -c 3 -i 1ms --timeout 1ms")
    );
    let doc: serde_json::Value =
        serde_json::from_str(step.result.as_deref().expect("document")).expect("JSON");
    assert_eq!(doc["sent"], 3, "{doc}");
}
