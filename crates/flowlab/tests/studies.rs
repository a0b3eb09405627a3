//! The studies shipped in studies/: each one checks, runs at a small scale (two
//! repetitions of each cell), and its report builds with a table per metric. And a study
//! on a topology: brought up, its group's steps started together, taken down; with
//! `keep_cpus_awake`, the CPUs held awake while it runs.

mod support;

use std::path::PathBuf;
use std::time::Duration;

fn studies() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../studies");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("studies/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no study in {}", dir.display());
    files
}

fn flowlab() -> assert_cmd::Command {
    assert_cmd::Command::cargo_bin("flowlab").expect("the flowlab binary")
}

/// Measuring runs at once in this binary: the shipped studies two at a time, alone, or
/// the other tests, whose bounds (a group's start spread, a link's rate) assume no more
/// than one other run beside them.
static RUNS: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Two studies run at a time (the six took three minutes one after another), each on its
/// own copy of its topology, and no other test of this binary beside them; a trial that
/// fails for any reason fails the test.
#[test]
fn every_shipped_study_runs_small_and_reports() {
    let _alone = RUNS.write().unwrap_or_else(|e| e.into_inner());
    let studies = studies();
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(study) = studies.get(i) else { break };
                    a_shipped_study_runs_small_and_reports(study, i);
                }
            });
        }
    });
}

fn a_shipped_study_runs_small_and_reports(study: &std::path::Path, i: usize) {
    let name = study
        .file_stem()
        .expect("name")
        .to_string_lossy()
        .to_string();
    // A study on a topology needs root: in CI it must run; elsewhere it is skipped
    // with a printed reason.
    let text = std::fs::read_to_string(study).expect("read");
    let is_on_topology = text.lines().any(|l| l.starts_with("topology"));
    if is_on_topology && !root() {
        return;
    }
    // A study on a topology holds the machine shared (support::MachineLock).
    let _machine = is_on_topology.then(support::machine_shared);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{name}: tempdir: {e}"));
    let study = beside_renamed_topology(study, &text, dir.path(), i);
    // The study takes its topology down; one an earlier, killed run left is taken down
    // first (else the study would find it up, its emulator gone, and refuse).
    let _down = is_on_topology.then(|| support::NetDown::new(&format!("shp{i}")));
    // Scenarios 1* and 2* of seed 000 wait on a 5 Mbit/s path for most of their grid:
    // the split closest to the seed's and the adaptive one show that they run.
    let only: &[&str] = if name.ends_with("-internet-a") {
        &["--only", "ratio=1:5", "--only", "ratio=adaptive"]
    } else {
        &[]
    };
    let out = flowlab()
        .current_dir(dir.path())
        .arg("run")
        .arg(&study)
        .args(["--scale", "0.01", "--repeat", "2"])
        .args(only)
        .timeout(Duration::from_secs(300))
        .output()
        .unwrap_or_else(|e| panic!("{name}: flowlab run: {e}"));
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name}: {said}");
    assert!(
        said.contains(&format!("study {name}: ")) && said.contains(" 0 failed"),
        "{name}: {said}"
    );
    let out = flowlab()
        .current_dir(dir.path())
        .args(["report", "results.db", "-o", "report.html"])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap_or_else(|e| panic!("{name}: flowlab report: {e}"));
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(dir.path().join("report.html")).expect("report.html");
    assert!(html.contains(&format!("<h1>Study {name}</h1>")), "{name}");
    assert!(
        html.matches("<section class=\"metric\">").count() >= 2,
        "{name}: tables per metric"
    );
}

/// A study on a topology runs from a copy in `dir` beside a copy of its topology renamed
/// `shpN` (the study's place in the list), so that a topology of the same name already up on
/// the machine (a user's, a long study's) neither refuses the run nor is taken down by
/// it (the trace files it names read where the original's are). Other studies run from
/// where they are.
fn beside_renamed_topology(
    study: &std::path::Path,
    text: &str,
    dir: &std::path::Path,
    index: usize,
) -> PathBuf {
    let Some(line) = text.lines().find(|l| l.starts_with("topology")) else {
        return study.to_path_buf();
    };
    let file = line
        .split('"')
        .nth(1)
        .unwrap_or_else(|| panic!("{}: {line}", study.display()));
    let topo_path = study.parent().expect("studies/").join(file);
    let topo = std::fs::read_to_string(&topo_path).expect("the study's topology");
    let name_line = topo
        .lines()
        .find(|l| l.starts_with("name = "))
        .unwrap_or_else(|| panic!("{}: no name", topo_path.display()));
    let stem = study.file_stem().expect("name").to_string_lossy();
    let renamed = topo.replacen(name_line, &format!("name = \"shp{index}\""), 1);
    // Its traces are where the original's are: each `trace = "FILE"` made absolute.
    let topo_dir = topo_path.parent().expect("topologies/");
    let mut copied = String::new();
    let mut rest = renamed.as_str();
    while let Some(at) = rest.find("trace = \"") {
        let (head, tail) = rest.split_at(at + "trace = \"".len());
        let end = tail.find('"').expect("a quoted trace file");
        copied += head;
        copied += &topo_dir.join(&tail[..end]).display().to_string();
        rest = &tail[end..];
    }
    copied += rest;
    std::fs::write(dir.join("topology.toml"), copied).expect("write");
    let copy = dir.join(format!("{stem}.toml"));
    std::fs::write(
        &copy,
        text.replacen(line, "topology = \"topology.toml\"", 1),
    )
    .expect("write");
    copy
}

/// Runs `study` (as study.toml) in a new directory beside topologies/small.toml renamed
/// `name` (so parallel tests build their own): the directory, what the run said, and
/// how it ended.
fn run_on_small(name: &str, study: &str) -> (tempfile::TempDir, String, std::process::Output) {
    let topo = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../topologies/small.toml"),
    )
    .expect("small.toml")
    .replace("name = \"small\"", &format!("name = \"{name}\""));
    run_on(name, &topo, study)
}

/// Runs `study` (study.toml in a new directory) on topology `name` (`name`.toml beside
/// it, `topo`): the directory, what the run said, and its output.
fn run_on(
    name: &str,
    topo: &str,
    study: &str,
) -> (tempfile::TempDir, String, std::process::Output) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join(format!("{name}.toml")), topo).expect("write");
    std::fs::write(dir.path().join("study.toml"), study).expect("write");
    let out = flowlab()
        .current_dir(dir.path())
        .args(["run", "study.toml"])
        .timeout(Duration::from_secs(120))
        .output()
        .expect("run");
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (dir, said, out)
}

fn root() -> bool {
    support::is_root_with_ip("studies on a topology")
}

use support::namespaces_of;

/// A small topology (no delays: any kernel) with a server on h2, and a trial of an idle
/// RTT, then a TCP test from h1 with echoes from h3 at the same time.
const TOPOLOGY_STUDY: &str = r#"
name = "on-a-topology"
repeat = 2
order = "sequential"
topology = "stsml.toml"
[params]
cc = ["cubic", "bbr"]
[[server]]
name = "b"
node = "h2"
[[step]]
name = "idle"
kind = "rtt"
from = "h1"
args = "{b.host} -c 5 -i 20ms"
[[step]]
name = "load"
kind = "test"
group = "g"
from = "h1"
args = "{b.host} -p {b.port} -t 1 -C {cc}"
[[step]]
name = "loaded"
kind = "rtt"
group = "g"
from = "h3"
args = "{b.host} -c 10 -i 100ms"
"#;

#[test]
fn a_study_brings_its_topology_up_runs_groups_together_and_takes_it_down() {
    if !root() {
        return;
    }
    let _beside_one_other = RUNS.read().unwrap_or_else(|e| e.into_inner());
    let _machine = support::machine_shared();
    let (dir, said, out) = run_on_small("stsml", TOPOLOGY_STUDY);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("study on-a-topology: 4 ok, 0 failed"),
        "{said}"
    );
    assert!(
        namespaces_of("stsml").is_empty(),
        "taken down: {:?}",
        namespaces_of("stsml")
    );

    let raw = rusqlite::Connection::open(dir.path().join("results.db")).expect("db");
    // The group's steps started together: within 10 ms, every trial.
    let spread: f64 = raw
        .query_row(
            "SELECT max(spread) FROM (SELECT max(started) - min(started) AS spread FROM step
             WHERE name IN ('load', 'loaded') GROUP BY trial_id)",
            [],
            |r| r.get(0),
        )
        .expect("spread");
    assert!(spread < 0.010, "group started {spread} s apart");
    // The echoes reached h2 from both nodes; the test ran from h1 to h2's address.
    let n: i64 = raw
        .query_row(
            "SELECT count(*) FROM trial_metric WHERE metric = 'rtt_median_ms' AND value > 0",
            [],
            |r| r.get(0),
        )
        .expect("rtt");
    assert_eq!(n, 8, "an idle and a loaded median per trial");
    let args: String = raw
        .query_row(
            "SELECT args FROM step WHERE name = 'load' LIMIT 1",
            [],
            |r| r.get(0),
        )
        .expect("args");
    assert!(args.starts_with("10.0."), "{args}");
    let out = flowlab()
        .current_dir(dir.path())
        .args(["report", "results.db"])
        .output()
        .expect("report");
    let md = String::from_utf8_lossy(&out.stdout);
    // Headed in words, the unit by the values' size (µs on loopback, ms on a path).
    assert!(
        md.lines()
            .any(|l| l.starts_with("## RTT median (") && l.ends_with(") — step loaded")),
        "{md}"
    );
    // The test and the echoes beside it give each trial a throughput and a delay.
    assert!(
        md.contains("throughput_bps of step load against rtt_p95_ms of step loaded"),
        "{md}"
    );
}

/// The small topology's router link at two rates (a `[[link]]` set from a parameter of
/// tables), sequential: each network built for its cells, torn down between them.
const LINK_STUDY: &str = r#"
name = "link-rates"
repeat = 2
topology = "stlnk.toml"
[params.wan]
slow = { rate = "10M", queue = 30 }
fast = { rate = "40M", queue = 60 }
[[link]]
name = "wan"
rate = "{wan.rate}"
queue = "{wan.queue}"
[[server]]
name = "b"
node = "h2"
[[step]]
name = "up"
kind = "test"
from = "h1"
args = "{b.host} -p {b.port} -t 2"
"#;

#[test]
fn a_study_builds_each_cells_network_with_its_link_values() {
    if !root() {
        return;
    }
    let _beside_one_other = RUNS.read().unwrap_or_else(|e| e.into_inner());
    let _machine = support::machine_shared();
    let (dir, said, out) = run_on_small("stlnk", LINK_STUDY);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("study link-rates: 4 ok, 0 failed"), "{said}");
    assert!(
        namespaces_of("stlnk").is_empty(),
        "taken down: {:?}",
        namespaces_of("stlnk")
    );
    // Each cell measured through its own link rate: the receiver's rate just under it
    // (tbf's rate is the wire's; the payload is ~95 % of it), never above.
    let raw = rusqlite::Connection::open(dir.path().join("results.db")).expect("db");
    let mut q = raw
        .prepare(
            "SELECT json_extract(params, '$.wan'), value FROM trial_metric
             WHERE metric = 'throughput_bps'",
        )
        .expect("query");
    let rows: Vec<(String, f64)> = q
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("rows")
        .map(|r| r.expect("row"))
        .collect();
    assert_eq!(rows.len(), 4, "{rows:?}");
    for (wan, bps) in rows {
        let rate = if wan == "slow" { 10e6 } else { 40e6 };
        assert!(bps > 0.8 * rate && bps < 1.01 * rate, "{wan}: {bps} bit/s");
    }
    // A topology that is up already cannot take a study's link values: refused, and
    // left as it was.
    let (err, still_up) = run_again_while_up(dir.path(), "stlnk", &[]);
    assert!(
        err.contains("topology stlnk is up already, but the study changes its links"),
        "{err}"
    );
    assert!(still_up, "the topology that was up stays up");
    assert!(
        !dir.path().join("again.db").exists(),
        "refused before the database"
    );
}

/// The small topology's router link cut from 50 to 10 Mbit/s 1.5 s into each trial: a
/// `[[link]]` schedule, started again at each trial (`schedule_per_trial`), on the kernel's
/// tbf (no delay on the link).
const SCHEDULE_STUDY: &str = r#"
name = "per-trial"
repeat = 2
order = "sequential"
topology = "stsch.toml"
schedule_per_trial = true
[[link]]
name = "wan"
schedule = "1500ms rate=10M"
[[server]]
name = "b"
node = "h2"
[[step]]
name = "down"
kind = "test"
from = "h1"
args = "{b.host} -p {b.port} -t 3 -R"
"#;

/// Both trials of a cell on one network meet its schedule at the same time from their
/// start: each 3 s download gets about half its time at 50 Mbit/s and half at 10 (the
/// payload 95 % of each; the cut within 0.3 s of 1.5 s gives 24.7 to 32.3 Mbit/s), where
/// a schedule run once from the network's start would leave the second trial at 10.
#[test]
fn a_schedule_per_trial_meets_every_trial_at_the_same_time() {
    if !root() {
        return;
    }
    let _beside_one_other = RUNS.read().unwrap_or_else(|e| e.into_inner());
    let _machine = support::machine_shared();
    let (dir, said, out) = run_on_small("stsch", SCHEDULE_STUDY);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("study per-trial: 2 ok, 0 failed"), "{said}");
    assert!(namespaces_of("stsch").is_empty(), "taken down");
    let raw = rusqlite::Connection::open(dir.path().join("results.db")).expect("db");
    let mut q = raw
        .prepare("SELECT value FROM trial_metric WHERE metric = 'throughput_bps' ORDER BY trial_id")
        .expect("query");
    let rates: Vec<f64> = q
        .query_map([], |r| r.get(0))
        .expect("rows")
        .map(|r| r.expect("row"))
        .collect();
    assert_eq!(rates.len(), 2, "{rates:?}");
    for bps in &rates {
        assert!((20e6..36e6).contains(bps), "{rates:?}");
    }
}

/// An 802.11g station at 54 Mbit/s and a server wired to its access point, and a study
/// that sweeps the medium's busy stations (at 24 Mbit/s): none, then three.
const BUSY_TOPOLOGY: &str = "name = \"stbsy\"\nhosts = [\"sta\", \"srv\"]\nrouters = [\"ap\"]\n\
    [[link]]\nends = [\"srv\", \"ap\"]\n\
    [[medium]]\nname = \"wlan\"\nap = \"ap\"\nstandard = \"802.11g\"\nqueue = 100\nbusy_rate = \"24M\"\n\
    [[medium.station]]\nhost = \"sta\"\nrate = \"54M\"\n";
const BUSY_STUDY: &str = r#"
name = "busy"
order = "sequential"
topology = "stbsy.toml"
[params.busy]
none = { n = 0, secs = 5 }
three = { n = 3, secs = 22 }
[[medium]]
name = "wlan"
busy_stations = "{busy.n}"
[[server]]
name = "sta"
node = "sta"
[[step]]
name = "up"
kind = "test"
from = "srv"
args = "{sta.host} -p {sta.port} -u -b 40M -l 1472 -t {busy.secs} -R"
"#;

/// A study sweeps a medium's busy stations per cell, as it sweeps a link's values: each
/// cell's network is built with its count, and the station's UDP uplink (more than the
/// air carries, from a server on the station to a receiving client on the wired side)
/// gets what the medium's model gives it there, within 10 %: alone on the air, then one
/// transmission in four beside three busy stations (Bianchi's round). Among busy
/// stations a station's share spreads by ±15 % from one second to the next (a station
/// that collides doubles its window while the others keep winning), so that cell is
/// judged over 20 s.
#[test]
fn a_study_sweeps_a_mediums_busy_stations_per_cell() {
    use flowlab_net::medium::Preset;
    if !root() {
        return;
    }
    let _beside_one_other = RUNS.read().unwrap_or_else(|e| e.into_inner());
    let _machine = support::machine_shared();
    let _down = support::NetDown::new("stbsy");
    let (dir, said, out) = run_on("stbsy", BUSY_TOPOLOGY, BUSY_STUDY);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("study busy: 2 ok, 0 failed"), "{said}");
    assert!(namespaces_of("stbsy").is_empty(), "taken down");
    let raw = rusqlite::Connection::open(dir.path().join("results.db")).expect("db");
    let mut q = raw
        .prepare(
            "SELECT t.cell, s.result FROM step s JOIN trial t ON t.id = s.trial_id ORDER BY t.id",
        )
        .expect("query");
    let rows: Vec<(String, String)> = q
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("rows")
        .map(|r| r.expect("row"))
        .collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    let g = Preset::G;
    let (sta, busy) = (g.rate(54_000_000), g.rate(24_000_000));
    for (cell, result) in &rows {
        let n: usize = if cell.contains("busy=three") { 3 } else { 0 };
        let mut senders = vec![sta];
        senders.extend(vec![busy; n]);
        // IP packets of 1500 bytes on the air; the receiver counts their 1472 of payload.
        let model = g.busy_shares(&senders, 1500)[0] * 1472.0 / 1500.0;
        // The client receives (the station's server sends, -R): its intervals are what
        // arrived each second; the first and the last left out (the queues filling, the
        // end's drain).
        let v: serde_json::Value = serde_json::from_str(result).expect("JSON");
        let intervals = v["intervals"].as_array().expect("intervals");
        let rates: Vec<f64> = intervals[1..intervals.len() - 1]
            .iter()
            .map(|i| i["sums"][0]["bits_per_second"].as_f64().expect("a rate"))
            .collect();
        let got = rates.iter().sum::<f64>() / rates.len() as f64;
        eprintln!("{cell}: {got:.0} bit/s, the model {model:.0}");
        assert!(
            (got - model).abs() <= 0.10 * model,
            "{cell}: {got:.0} bit/s against the model's {model:.0}"
        );
    }
}

/// Brings topology `name` (`name`.toml in `dir`) up with `up_args`, runs `dir`'s
/// study.toml into again.db, which must be refused, and takes the topology down again
/// (also when an assertion fails): what the run said, and whether the topology was
/// still up after it.
fn run_again_while_up(
    dir: &std::path::Path,
    name: &'static str,
    up_args: &[&str],
) -> (String, bool) {
    let file = format!("{name}.toml");
    let _down = support::NetDown::new(name);
    let up = flowlab()
        .current_dir(dir)
        .args(["net", "up"])
        .args(up_args)
        .arg(&file)
        .timeout(Duration::from_secs(60))
        .output()
        .expect("net up");
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );
    let out = flowlab()
        .current_dir(dir)
        .args(["run", "study.toml", "--db", "again.db"])
        .timeout(Duration::from_secs(60))
        .output()
        .expect("run");
    let still_up = !namespaces_of(name).is_empty();
    let down = flowlab()
        .current_dir(dir)
        .args(["net", "down", &file])
        .timeout(Duration::from_secs(60))
        .output()
        .expect("net down");
    assert!(down.status.success());
    assert!(!out.status.success(), "refused");
    (String::from_utf8_lossy(&out.stderr).to_string(), still_up)
}

/// A two-host topology whose link delays (so the user-space emulator runs it), and a
/// study on it that asks for the CPUs to be kept awake.
const AWAKE_TOPOLOGY: &str =
    "name = \"stawk\"\nhosts = [\"a\", \"b\"]\n[[link]]\nends = [\"a\", \"b\"]\ndelay = \"1ms\"\n";
const AWAKE_STUDY: &str = r#"
name = "awake"
topology = "stawk.toml"
keep_cpus_awake = true
[[server]]
name = "b"
node = "b"
[[step]]
kind = "test"
from = "a"
args = "{b.host} -p {b.port} -t 2"
"#;

#[test]
fn a_study_that_keeps_the_cpus_awake_holds_them_only_while_it_runs() {
    if !root() {
        return;
    }
    // Alone: the CPUs held awake and the emulator's spinning would change what the other
    // tests of this binary measure.
    let _alone = RUNS.write().unwrap_or_else(|e| e.into_inner());
    let _machine = support::machine_alone();
    let _down = support::NetDown::new("stawk");
    let latency = flowlab_engine::sysinfo::cpu_latency_us;
    let Some(before) = support::cpu_latency_before_holding() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("stawk.toml"), AWAKE_TOPOLOGY).expect("write");
    std::fs::write(dir.path().join("study.toml"), AWAKE_STUDY).expect("write");
    let said = dir.path().join("said.txt");
    let said_file = std::fs::File::create(&said).expect("said");
    let mut runner = std::process::Command::new(assert_cmd::cargo::cargo_bin("flowlab"))
        .current_dir(dir.path())
        .args(["run", "study.toml"])
        .stderr(said_file.try_clone().expect("said"))
        .stdout(said_file)
        .spawn()
        .expect("run");
    // Watched while it runs: held at 0 µs at some point (the test step lasts 2 s).
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let mut held = false;
    let status = loop {
        held |= latency() == Some(0);
        if let Some(status) = runner.try_wait().expect("wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = runner.kill();
            panic!("the study did not end within 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let said = std::fs::read_to_string(&said).expect("said");
    assert!(status.success(), "{said}");
    assert!(said.contains("study awake: 1 ok, 0 failed"), "{said}");
    assert!(held, "the CPUs were never held awake while the study ran");
    // Said where it changes nothing (no cpuidle driver: idle CPUs halt regardless).
    let driver = std::fs::read_to_string(flowlab_proto::system::CPUIDLE_DRIVER_FILE);
    assert_eq!(
        said.contains("note: keep_cpus_awake: this machine has no cpuidle driver"),
        driver.is_ok_and(|d| d.trim() == "none"),
        "{said}"
    );
    assert_eq!(
        latency(),
        Some(before),
        "let go with the topology; held by {:?}",
        support::cpu_latency_holders()
    );
    assert!(namespaces_of("stawk").is_empty(), "taken down");

    // Up already without the flag: refused before anything runs (no database made),
    // and the topology left up.
    let (err, still_up) = run_again_while_up(dir.path(), "stawk", &["--backend", "userspace"]);
    assert!(
        err.contains(
            "topology stawk is up without --keep-cpus-awake, and the study asks for keep_cpus_awake"
        ),
        "{err}"
    );
    assert!(still_up, "the topology that was up stays up");
    assert!(
        !dir.path().join("again.db").exists(),
        "refused before the database"
    );
}
