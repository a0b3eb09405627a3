//! `flowlab monitor` end to end: a mesh of three hosts of an emulated topology watched
//! on its schedule, each run's figures held to what the links imply, the schedule's
//! promises (one run per path at a time, one throughput run in the mesh) held to the
//! runs' own times, the results database and the metrics endpoint held to the runs, and
//! the metrics checked by Prometheus's own parser and linter. A mesh refused as given names its file.

mod support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use flowlab_results::monitor::{MonitorSummary, PathKind, PathRun};
use support::{
    NetDown, free_ports, is_root_with_ip, machine_shared, promtool_check_metrics, require_tool,
    scrape_metrics, usage_error,
};

/// Three hosts on a switch, each link 5 ms each way (a round trip between two hosts
/// crosses four: 20 ms), m2's at 20 Mbit/s.
const TOPOLOGY: &str = r#"name = "tmon"
hosts = ["m1", "m2", "m3"]
switches = ["s1"]
[[link]]
ends = ["m1", "s1"]
delay = "5ms"
[[link]]
ends = ["m2", "s1"]
delay = "5ms"
rate = "20M"
[[link]]
ends = ["m3", "s1"]
delay = "5ms"
"#;

/// Latency between every pair each 10 s; throughput into m2 from either side in turn.
const MESH: &str = r#"name = "lab"
topology = "tmon.toml"
hosts = ["m1", "m2", "m3"]

[[probe]]
kind = "latency"
every = "10s"
jitter = "1s"
pairs = "mesh"
count = 20

[[probe]]
kind = "throughput"
every = "10s"
jitter = "1s"
pairs = ["m1-m2", "m3-m2"]
seconds = 2
"#;

/// The value of series `name{labels}`, labels in the order the encoder sorts them.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

fn labels(r: &PathRun, kind: bool) -> String {
    let k = if kind {
        format!(",kind=\"{}\"", r.kind.name())
    } else {
        String::new()
    };
    format!(
        "{{direction=\"forward\"{k},mesh=\"lab\",source=\"{}\",target=\"{}\"}}",
        r.source, r.target
    )
}

/// Whether two runs' times overlap.
fn overlap(a: &PathRun, b: &PathRun) -> bool {
    a.started_unix < b.ended_unix && b.started_unix < a.ended_unix
}

#[test]
fn a_mesh_is_watched_on_its_schedule_and_its_figures_reach_prometheus() {
    if !is_root_with_ip("flowlab monitor brings a topology up") {
        return;
    }
    let _machine = machine_shared();
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(dir.path().join("tmon.toml"), TOPOLOGY).expect("topology");
    std::fs::write(dir.path().join("mesh.toml"), MESH).expect("mesh");
    let _down = NetDown::new("tmon");
    let port = free_ports(1);
    let metrics: SocketAddr = format!("127.0.0.1:{port}").parse().expect("address");
    let mut monitor = Command::new(env!("CARGO_BIN_EXE_flowlab"))
        .args([
            "monitor",
            "mesh.toml",
            "--json",
            "--for",
            "14s",
            "--seed",
            "1",
        ])
        .args(["--metrics", &metrics.to_string(), "--db", "runs.db"])
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("flowlab monitor");
    let stdout = monitor.stdout.take().expect("stdout");
    let (tx, lines) = std::sync::mpsc::channel::<serde_json::Value>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let v: serde_json::Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
            if tx.send(v).is_err() {
                break;
            }
        }
    });
    let next = |what: &str| {
        lines
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no {what} line within 30 s"))
    };
    assert_eq!(next("metrics")["event"], "metrics");
    let start = next("start");
    assert_eq!(start["event"], "start", "{start}");
    assert_eq!(start["data"]["topology_ours"], true, "{start}");
    // What runs in the topology's namespaces: gone when the watch ends.
    let pids: Vec<String> = support::namespaces_of("tmon")
        .iter()
        .flat_map(|ns| {
            let out = Command::new("ip")
                .args(["netns", "pids", ns])
                .output()
                .expect("ip netns pids");
            String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(!pids.is_empty(), "no server runs in the topology");

    // Scrape once at least 6 runs, two of them throughput, have ended.
    let mut before: Vec<PathRun> = Vec::new();
    let run_of = |v: &serde_json::Value| -> PathRun {
        serde_json::from_value(v["data"].clone()).unwrap_or_else(|e| panic!("{e}: {v}"))
    };
    while before.len() < 6
        || before
            .iter()
            .filter(|r| r.kind == PathKind::Throughput)
            .count()
            < 2
    {
        let v = next("run");
        assert_eq!(v["event"], "run", "{v}");
        before.push(run_of(&v));
    }
    let (status, _, text) = scrape_metrics(metrics);
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    let mut runs = before.clone();
    let summary: MonitorSummary = loop {
        let v = next("run or summary");
        match v["event"].as_str() {
            Some("run") => runs.push(run_of(&v)),
            Some("summary") => {
                break serde_json::from_value(v["data"].clone()).expect("summary");
            }
            _ => panic!("{v}"),
        }
    };
    let status = monitor.wait().expect("monitor ends");
    let mut stderr = String::new();
    monitor
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("stderr");
    reader.join().expect("reader");
    assert!(status.success(), "{status}: {stderr}");
    assert_eq!(summary.runs as usize, runs.len(), "{summary:?}");
    // Each run is in the database as it was reported (neither keeps each echo's round
    // trip: the JSON line has the percentiles).
    let db = flowlab_db::Db::open_existing(&dir.path().join("runs.db")).expect("the database");
    let mut reported = runs.clone();
    reported.sort_by(|a, b| a.ended_unix.total_cmp(&b.ended_unix));
    assert_eq!(db.monitor_runs("lab").expect("recorded runs"), reported);
    assert_eq!(summary.failed, 0, "{runs:#?}");

    // The figures are the links'.
    let mut medians = Vec::new();
    for r in &runs {
        assert!(r.ok(), "{r:?}");
        if let Some(l) = &r.latency {
            let rtt = l.rtt.as_ref().expect("round trips");
            assert_eq!(l.received, 20, "{r:?}");
            // Four crossings of 5 ms: no echo comes back sooner.
            assert!(rtt.min_ms >= 19.8, "{r:?}");
            medians.push(rtt.median_ms);
        }
        if let Some(t) = &r.throughput {
            assert_eq!(r.target, "m2");
            let floor = 0.8 * 20e6 * 1448.0 / 1500.0;
            assert!(
                (floor..=20e6).contains(&t.bits_per_second),
                "{} bit/s into a 20 Mbit/s link: {r:?}",
                t.bits_per_second
            );
            assert!(t.congestion.is_some(), "the congestion control is named");
        }
    }
    medians.sort_by(f64::total_cmp);
    let median = medians[medians.len() / 2];
    assert!(
        median <= 22.0,
        "median of the runs' median RTTs {median} ms over 20 ms of links: {medians:?}"
    );
    // Every pair measured; a path never carries two runs at once, nor the mesh two
    // throughput runs.
    let latency_paths: std::collections::HashSet<_> = runs
        .iter()
        .filter(|r| r.kind == PathKind::Latency)
        .map(|r| (r.source.clone(), r.target.clone()))
        .collect();
    assert_eq!(latency_paths.len(), 6, "{latency_paths:?}");
    for (i, a) in runs.iter().enumerate() {
        for b in &runs[i + 1..] {
            let same_path = (a.source == b.source && a.target == b.target)
                || (a.source == b.target && a.target == b.source);
            let both_throughput = a.kind == PathKind::Throughput && b.kind == PathKind::Throughput;
            assert!(
                !((same_path || both_throughput) && overlap(a, b)),
                "overlapping runs: {a:?} and {b:?}"
            );
        }
    }

    // The metrics are the runs': each path's latest figures those of the run that ended
    // last before the scrape; its totals between the runs seen before and after it.
    let mut latest: HashMap<(String, String, PathKind), &PathRun> = HashMap::new();
    for r in &runs {
        let key = (r.source.clone(), r.target.clone(), r.kind);
        let stamp = value(
            &text,
            &format!("flowlab_path_last_run_timestamp_seconds{}", labels(r, true)),
        );
        if stamp == Some(r.ended_unix) {
            latest.insert(key, r);
        }
    }
    let seen_throughput = latest
        .values()
        .filter(|r| r.kind == PathKind::Throughput)
        .count();
    assert!(
        latest.len() >= 4 && seen_throughput >= 1,
        "{} paths' latest runs found in the metrics:\n{text}",
        latest.len()
    );
    for r in latest.values() {
        let l = labels(r, false);
        let got = |name: &str| {
            value(&text, &format!("{name}{l}")).unwrap_or_else(|| panic!("no {name}{l}:\n{text}"))
        };
        assert_eq!(
            value(&text, &format!("flowlab_path_up{}", labels(r, true))),
            Some(1.0)
        );
        if let Some(t) = &r.throughput {
            assert_eq!(got("flowlab_path_sent_bytes"), t.sent_bytes as f64);
            assert_eq!(got("flowlab_path_received_bytes"), t.received_bytes as f64);
            assert_eq!(got("flowlab_path_sent_seconds"), t.sent_seconds);
            assert_eq!(
                got("flowlab_path_retransmits"),
                t.retransmits.expect("retransmits") as f64
            );
            assert_eq!(
                got("flowlab_path_throughput_bytes_per_second"),
                t.bits_per_second / 8.0
            );
        }
        if let Some(lat) = &r.latency {
            let rtt = lat.rtt.as_ref().expect("rtt");
            let median = format!(
                "flowlab_path_rtt_latest_seconds{{direction=\"forward\",mesh=\"lab\",source=\"{}\",stat=\"median\",target=\"{}\"}}",
                r.source, r.target
            );
            assert_eq!(value(&text, &median), Some(rtt.median_ms / 1e3));
            assert_eq!(got("flowlab_path_loss_ratio"), lat.loss_percent / 100.0);
            // Every echo of every run on the path so far is in the histogram.
            let echoes = |among: &[PathRun]| -> u64 {
                among
                    .iter()
                    .filter(|o| o.source == r.source && o.target == r.target)
                    .filter_map(|o| o.latency.as_ref())
                    .map(|o| o.received)
                    .sum()
            };
            let count = got("flowlab_path_rtt_seconds_count") as u64;
            assert!(
                (echoes(&before)..=echoes(&runs)).contains(&count),
                "{count} echoes in the histogram of {}→{}",
                r.source,
                r.target
            );
        }
    }

    promtool_check_metrics(&text);

    // Everything it started is gone, and the topology it brought up.
    assert!(
        support::namespaces_of("tmon").is_empty(),
        "the topology is left up"
    );
    for pid in &pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} outlived the watch"
        );
    }
}

/// A mesh that cannot run is refused before anything starts, naming its file and what
/// is wrong.
#[test]
fn a_mesh_that_cannot_run_is_refused_naming_its_file() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(dir.path().join("tmon.toml"), TOPOLOGY).expect("topology");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("mesh");
        path.to_str().expect("utf-8").to_string()
    };
    let no_topology = write("none.toml", &MESH.replace("topology = \"tmon.toml\"\n", ""));
    usage_error(
        &["monitor", &no_topology],
        "none.toml: no hosts to reach: name the emulated topology",
    );
    let stranger = write("stranger.toml", &MESH.replace("m3", "m4"));
    usage_error(
        &["monitor", &stranger],
        "host 'm4': 'm4' is not a node of topology tmon",
    );
    usage_error(&["monitor", &no_topology, "--for", "soon"], "--for");
    // A database it cannot write to is said before anything starts.
    let mesh = write("mesh.toml", MESH);
    let junk = dir.path().join("junk.db");
    std::fs::write(&junk, "not a database").expect("junk");
    let out = Command::new(env!("CARGO_BIN_EXE_flowlab"))
        .args(["monitor", &mesh, "--for", "10s", "--db"])
        .arg(&junk)
        .output()
        .expect("flowlab monitor");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("junk.db: not a flowlab results database"),
        "{said}"
    );
    assert!(out.stdout.is_empty(), "nothing started");
    // A mistake in the file is shown where it is.
    let typo = write(
        "typo.toml",
        &MESH.replacen("every = \"10s\"", "every = \"10\"", 1),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_flowlab"))
        .args(["monitor", &typo])
        .output()
        .expect("flowlab monitor");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.starts_with("error: ")
            && said.contains("typo.toml: line 7, column 9: every: '10' is not a time like 90s")
            && said.contains("7 | every = \"10\""),
        "{said}"
    );
}

/// A mesh of hosts over SSH: two namespaces of a topology, each with a real sshd
/// (Debian `openssh-server`), watched from a third through `flowlab net exec`, as a
/// controller reaches real hosts. The runs happen at the hosts, measure what the links
/// carry, and everything started there ends with the watch.
#[test]
fn a_mesh_over_ssh_runs_at_its_hosts_and_leaves_nothing_behind() {
    if !is_root_with_ip("hosts over SSH are namespaces of a topology")
        || !require_tool("sshd")
        || !require_tool("ssh")
    {
        return;
    }
    let _machine = machine_shared();
    let dir = tempfile::tempdir().expect("tmp");
    let topology = "name = \"tmsh\"\nhosts = [\"c\", \"a\", \"b\"]\nswitches = [\"s1\"]\n[[link]]\nends = [\"c\", \"s1\"]\n[[link]]\nends = [\"a\", \"s1\"]\n[[link]]\nends = [\"b\", \"s1\"]\nrate = \"20M\"\n";
    let _down = support::net_up(dir.path(), "tmsh", topology);
    // Both listen before the watch starts.
    let sshd: Vec<support::Sshd> = ["a", "b"]
        .iter()
        .map(|h| support::Sshd::listening_in(&format!("fl-tmsh-{h}")))
        .collect();
    // Each host has a key of its own sshd: the options name both.
    let mut options = sshd[0].options();
    options.extend([
        "-i".to_string(),
        sshd[1].dir.path().join("client").display().to_string(),
    ]);
    let quoted = |v: &[String]| {
        v.iter()
            .map(|o| format!("{o:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let flowlab = env!("CARGO_BIN_EXE_flowlab");
    let mesh = format!(
        "name = \"wan\"\nhosts = [\"a\", \"b\"]\nssh_options = [{}]\n\n[ssh]\na = {{ url = \"ssh://root@a\", flowlab = {flowlab:?} }}\nb = {{ url = \"ssh://root@b\", flowlab = {flowlab:?} }}\n\n[[probe]]\nkind = \"latency\"\nevery = \"10s\"\njitter = \"1s\"\npairs = \"mesh\"\ncount = 20\n\n[[probe]]\nkind = \"throughput\"\nevery = \"10s\"\njitter = \"1s\"\npairs = [\"a-b\"]\nseconds = 1\n",
        quoted(&options)
    );
    std::fs::write(dir.path().join("wan.toml"), mesh).expect("mesh");
    let out = Command::new(env!("CARGO_BIN_EXE_flowlab"))
        .args(["net", "exec", "-t", "tmsh", "c", "--", flowlab])
        .args([
            "monitor", "wan.toml", "--json", "--for", "8s", "--seed", "3",
        ])
        .current_dir(dir.path())
        .output()
        .expect("flowlab monitor");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines[0]["event"], "start");
    assert_eq!(lines[0]["data"]["topology"], serde_json::Value::Null);
    // Each host's clock, read as it connected: this machine's own, so within the
    // reading's uncertainty of no offset.
    let start: flowlab_results::monitor::MonitorStart =
        serde_json::from_value(lines[0]["data"].clone()).expect("start");
    let hosts: Vec<&str> = start.clocks.iter().map(|c| c.host.as_str()).collect();
    assert_eq!(hosts, ["a", "b"]);
    for c in &start.clocks {
        assert!(c.offset_ms.abs() <= c.uncertainty_ms + 0.001, "{c:?}");
    }
    let runs: Vec<PathRun> = lines
        .iter()
        .filter(|l| l["event"] == "run")
        .map(|l| serde_json::from_value(l["data"].clone()).expect("a run"))
        .collect();
    // In 8 s: both latency pairs and the throughput pair ran at least once.
    assert!(runs.len() >= 3, "{runs:#?}");
    for r in &runs {
        assert!(r.ok(), "{r:?}");
        let target = if r.source == "a" { "b" } else { "a" };
        assert_eq!(r.target, target);
        let verb = if r.kind == PathKind::Latency {
            "ping"
        } else {
            "test"
        };
        assert!(
            r.command.starts_with(&format!("flowlab {verb} {target} ")),
            "{}",
            r.command
        );
        if let Some(l) = &r.latency {
            assert_eq!(l.received, 20, "{r:?}");
        }
        if let Some(t) = &r.throughput {
            // Into b over its 20 Mbit/s link: what the link carries, measured at a.
            assert!(
                (0.8 * 20e6 * 1448.0 / 1500.0..=20e6).contains(&t.bits_per_second),
                "{r:?}"
            );
        }
    }
    assert!(runs.iter().any(|r| r.kind == PathKind::Throughput));
    // Everything it started at the hosts ended with it (each ends itself once its
    // connection closes: within a few seconds); their sshd goes on.
    for h in ["a", "b"] {
        let ns = format!("fl-tmsh-{h}");
        let started = std::time::Instant::now();
        while support::flowlab_running_in(&ns, "serve") > 0 {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "a server left in {h} 5 s after the watch"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    drop(sshd);
}
