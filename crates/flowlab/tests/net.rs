//! `flowlab net` as root: build topologies in namespaces, measure through them, tear them
//! down — also after the builder was killed. Each test uses its own topology name and
//! removes it even when it fails. Outside CI, without root, the tests are skipped with a
//! printed reason; in CI (root) they must run.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The net tests measure timing and throughput: one at a time, so they do not compete
/// for the CPUs.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The locks every net test holds: this binary's one at a time, and the machine shared
/// with other binaries' tests; or `None` (the test returns) without root outside CI.
fn root_and_serial() -> Option<(std::sync::MutexGuard<'static, ()>, support::MachineLock)> {
    root_and_serial_with(support::machine_shared)
}

/// [`root_and_serial`] with no other binary's topology beside it (a study's, in the
/// suite's second lane): for the tests whose bounds are statistics of several flows on
/// the host's CPUs, Jain's index under cubic and the portfolio's RTT bounds, which a
/// fresh-clone run missed by a hair with a study's topology running meanwhile (Jain
/// 0.7985 against 0.8; h1–h9's idle RTT 81.06 ms against 80 ± 1). Waiting for the other
/// lane's topology test costs at most its length, once.
fn root_and_serial_alone() -> Option<(std::sync::MutexGuard<'static, ()>, support::MachineLock)> {
    root_and_serial_with(support::machine_alone)
}

/// [`root_and_serial`], the machine taken by `machine`.
fn root_and_serial_with(
    machine: fn() -> support::MachineLock,
) -> Option<(std::sync::MutexGuard<'static, ()>, support::MachineLock)> {
    is_root().then(|| (SERIAL.lock().unwrap_or_else(|e| e.into_inner()), machine()))
}

/// Whether the kernel has netem; says why the test is skipped when it has not (a kernel
/// capability, not a missing tool: the userspace backend is tested instead).
fn netem_or_skip() -> bool {
    let there = flowlab_net::build::netem_available();
    if !there {
        support::skip("this kernel has no sch_netem (the userspace backend is tested instead)");
    }
    there
}

/// The share of the CPU time this machine's hypervisor took since `since`, for failure
/// messages: a stolen vCPU stalls the kernel's qdiscs and the emulator with it, so a
/// rate or delay missed while much was stolen says more about the host than the code.
fn steal_since(since: Option<flowlab_engine::sysinfo::CpuTimes>) -> String {
    let now = flowlab_engine::sysinfo::CpuTimes::now();
    match since.zip(now).and_then(|(a, b)| b.steal_percent_since(&a)) {
        Some(p) => format!("(the hypervisor took {p:.1} % of the CPU time meanwhile)"),
        None => "(CPU steal unknown)".to_string(),
    }
}

fn flowlab() -> Command {
    Command::new(assert_cmd::cargo::cargo_bin("flowlab"))
}

fn is_root() -> bool {
    support::is_root_with_ip("the net tests")
}

use support::NetDown as Down;
use support::namespaces_of;

/// h1 and h3 on a switch behind r1; h2 behind r2; r1–r2 limited to 50 Mbit/s.
fn small(name: &str, dir: &Path) -> std::path::PathBuf {
    small_with(name, dir, "")
}

/// Emulator processes of topology `topo` still running.
fn emulators_of(topo: &str) -> Vec<u32> {
    flowlab_net::build::emulators(&[], topo)
}

/// topologies/small.toml under another name, with `wan` (extra properties of its
/// r1–r2 link, TOML) added.
fn small_with(name: &str, dir: &Path, wan: &str) -> std::path::PathBuf {
    small_at(name, dir, "50M", wan)
}

/// topologies/small.toml under another name, its r1–r2 link at `rate` with `wan` (extra
/// properties, TOML) added.
fn small_at(name: &str, dir: &Path, rate: &str, wan: &str) -> std::path::PathBuf {
    let shipped = include_str!("../../../topologies/small.toml");
    let text = shipped
        .replace("name = \"small\"", &format!("name = \"{name}\""))
        .replace("rate = \"50M\"", &format!("rate = \"{rate}\""))
        .replace("queue = 100\n", &format!("queue = 100\n{wan}\n"));
    assert!(
        text.contains(&format!("name = \"{name}\""))
            && text.contains(&format!("rate = \"{rate}\"")),
        "small.toml changed shape"
    );
    write_topology(dir, name, &text)
}

/// `flowlab net up FILE ARGS`, which must succeed.
fn up(file: &Path, args: &[&str]) {
    let out = flowlab()
        .args(["net", "up"])
        .args(args)
        .arg(file)
        .output()
        .expect("up");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes topology `name`'s `text` into `dir`, returning its path.
fn write_topology(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).expect("write topology");
    path
}

#[test]
fn a_topology_is_built_routed_shaped_and_removed() {
    let Some(_serial) = root_and_serial() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let file = small("tnet1", dir.path());
    let _guard = Down::new("tnet1");
    up(&file, &[]);
    assert_eq!(namespaces_of("tnet1").len(), 6);
    // Every node is named in every namespace (a router at each of its addresses).
    let out = flowlab()
        .args([
            "net", "exec", "-t", "tnet1", "h1", "--", "getent", "ahostsv4", "h2",
        ])
        .output()
        .expect("getent");
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("10.0.3.2 "),
        "{out:?}"
    );
    let hosts = std::fs::read_to_string("/etc/netns/fl-tnet1-h1/hosts").expect("hosts file");
    assert!(
        hosts.contains("10.0.1.1\th1\n") && hosts.contains("\tr2\n"),
        "{hosts}"
    );
    // `net exec` becomes its command: killing it stops the server it runs.
    let mut server = serve_in("tnet1", "h2", &[]);
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        !listening("tnet1", "h2", 5201),
        "the server outlived net exec"
    );
    let cpu = flowlab_engine::sysinfo::CpuTimes::now();
    // Five seconds: a three-second test once got 44.8 Mbit/s against the usual 47.9 (a
    // fresh-clone run, 2026-11-27), about what one retransmission timeout (200 ms at
    // least, after a tail drop at the tbf's queue) costs three seconds; it costs five 4 %.
    // The cause was not recorded: a failure now prints the retransmissions and each
    // second's rate.
    let v = test_h1_to_h2("tnet1", &["-t", "5"]);
    let rate = v["end"]["sums"][0]["receiver"]["bits_per_second"]
        .as_f64()
        .expect("a rate");
    // Issue 5's fidelity bound for a bottleneck R: 0.90 R … 1.02 R.
    assert!(
        (45e6..=51e6).contains(&rate),
        "TCP through a 50 Mbit/s bottleneck: {rate} ({} retransmissions; per second: {:?}) {}",
        v["end"]["sums"][0]["sender"]["retransmits"],
        v["intervals"].as_array().map(|i| i
            .iter()
            .map(|i| i["sums"][0]["bits_per_second"].as_f64().unwrap_or(0.0) / 1e6)
            .collect::<Vec<_>>()),
        steal_since(cpu)
    );
    let out = flowlab()
        .args(["net", "down", "tnet1"])
        .output()
        .expect("down");
    assert!(out.status.success());
    assert!(namespaces_of("tnet1").is_empty(), "nothing is left");
    assert!(
        !Path::new("/etc/netns/fl-tnet1-h1").exists(),
        "the hosts files are left"
    );
    // Once more, or a name never up: said, not "removed 0 namespaces".
    let again = flowlab()
        .args(["net", "down", "tnet1"])
        .output()
        .expect("down");
    assert_eq!(again.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&again.stderr),
        "error: no topology named 'tnet1' is up (flowlab net status lists them)\n"
    );
}

/// A topology that is up is named by its name: `net show NAME` shows its plan, `net
/// status NAME` only it, and `net exec` without `-t` while several are up names them, so
/// the user can pick one.
#[test]
fn topologies_that_are_up_are_named_by_show_status_and_exec() {
    let Some(_serial) = root_and_serial() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let (_one, _two) = (Down::new("tsev1"), Down::new("tsev2"));
    for name in ["tsev1", "tsev2"] {
        let text =
            format!("name = \"{name}\"\nhosts = [\"a\", \"b\"]\n[[link]]\nends = [\"a\", \"b\"]\n");
        up(&write_topology(dir.path(), name, &text), &[]);
    }
    let out = flowlab()
        .args(["net", "exec", "a", "--", "true"])
        .output()
        .expect("exec");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // Other binaries' topologies may be up too (scripts/test.sh runs them side by side).
    assert!(
        err.contains("several topologies are up (")
            && err.contains("tsev1")
            && err.contains("tsev2")
            && err.contains("name one with -t"),
        "{err}"
    );
    let text = |args: &[&str]| {
        let out = flowlab().args(args).output().expect("net");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code(), text)
    };
    let (code, shown) = text(&["net", "show", "tsev1"]);
    assert_eq!(code, Some(0), "{shown}");
    assert!(
        shown.starts_with("topology tsev1: 2 hosts, 0 routers, 0 switches, 1 link\n"),
        "{shown}"
    );
    let (code, status) = text(&["net", "status", "tsev2"]);
    assert_eq!(code, Some(0), "{status}");
    assert!(
        status.contains("tsev2") && !status.contains("tsev1"),
        "{status}"
    );
    let (code, none) = text(&["net", "status", "tsnone"]);
    assert_eq!(code, Some(1), "{none}");
    assert!(none.contains("no topology named 'tsnone' is up"), "{none}");
    // net check measures the topology that is up by that name, as it is.
    let (code, checked) = text(&["net", "check", "tsev1", "-t", "1"]);
    assert_eq!(code, Some(0), "{checked}");
    assert!(
        checked.contains("verdict: the one path is within bounds"),
        "{checked}"
    );
}

#[test]
fn down_cleans_up_after_a_killed_builder() {
    let Some(_serial) = root_and_serial() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    // A delayed link, so that the user-space backend starts its emulator process too.
    let file = small_with("tnet2", dir.path(), r#"delay = "5ms""#);
    let _guard = Down::new("tnet2");
    // Killed at various points of building; the last one long after it finished.
    for wait_ms in [0, 30, 200, 600, 5000] {
        let mut up = flowlab()
            .args(["net", "up", "--backend", "userspace"])
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("up");
        std::thread::sleep(Duration::from_millis(wait_ms));
        let _ = up.kill();
        let _ = up.wait();
        if wait_ms == 5000 {
            assert_eq!(
                namespaces_of("tnet2").len(),
                7,
                "built, with the link's middle"
            );
            assert_eq!(emulators_of("tnet2").len(), 1, "its emulator runs on");
        }
        // Killed before it made anything, nothing is left: `down` says it is not up.
        let left =
            !namespaces_of("tnet2").is_empty() || Path::new("/run/flowlab/net/tnet2.list").exists();
        let out = flowlab()
            .args(["net", "down", "tnet2"])
            .output()
            .expect("down");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() || (!left && stderr.contains("no topology named 'tnet2' is up")),
            "killed after {wait_ms} ms: {stderr}"
        );
        assert!(
            namespaces_of("tnet2").is_empty(),
            "killed after {wait_ms} ms: left over"
        );
        assert!(
            emulators_of("tnet2").is_empty(),
            "killed after {wait_ms} ms: emulator left running"
        );
    }
    assert!(
        !Path::new("/run/flowlab/net/tnet2.list").exists()
            && !Path::new("/run/flowlab/net/tnet2.json").exists(),
        "state files removed"
    );
}

/// Regression (issue 11): when a path stopped carrying traffic, `net check` said only
/// "connection refused", after waiting out forty seconds of echoes. A dead path is now
/// named after three (its emulator stopped here, SIGSTOP). And a topology whose emulator
/// is gone (SIGKILL here; the end of the session that brought it up does the same and
/// leaves the namespaces) is refused before anything is measured, naming the way out;
/// `net status` says so, and `down` takes it down.
#[test]
fn a_path_whose_emulator_stopped_is_named_at_once() {
    let Some(_serial) = root_and_serial() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let file = small_with("tnet7", dir.path(), r#"delay = "5ms""#);
    let _guard = Down::new("tnet7");
    up(&file, &["--backend", "userspace"]);
    let pids = emulators_of("tnet7");
    assert_eq!(pids.len(), 1);
    let pid = pids[0];
    let check = || {
        flowlab()
            .args(["net", "check", "--pairs", "h1-h2", "-t", "1"])
            .arg(&file)
            .output()
            .expect("check")
    };
    // SAFETY: kill(2) on the emulator this test started.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
    let out = check();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("h1 -> h2: no reply to 3 echoes (2 s each)"),
        "{err}"
    );
    // SAFETY: as above.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    let gone = std::time::Instant::now() + Duration::from_secs(10);
    while !emulators_of("tnet7").is_empty() && std::time::Instant::now() < gone {
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = flowlab().args(["net", "status"]).output().expect("status");
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains(&format!("its emulator (pid {pid}) is not running")),
        "{status}"
    );
    let out = check();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains(&format!(
                "topology tnet7 is up, but its link emulator (pid {pid}) is not running"
            ))
            && err.contains("(flowlab net down tnet7)")
            && out.stdout.is_empty(),
        "{err}"
    );
    let out = flowlab()
        .args(["net", "down", "tnet7"])
        .output()
        .expect("down");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(namespaces_of("tnet7").is_empty());
}

#[test]
fn the_netem_backend_is_used_where_present_and_refused_where_not() {
    let Some(_serial) = root_and_serial() else {
        return;
    };
    let portfolio = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../topologies/portfolio.toml"
    );
    let _guard = Down::new("port");
    let out = flowlab()
        .args(["net", "up", "--backend", "netem", portfolio])
        .output()
        .expect("up");
    if !flowlab_net::build::netem_available() {
        assert_eq!(out.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("link L1")
                && stderr.contains("netem")
                && stderr.contains("--backend userspace"),
            "{stderr}"
        );
        assert!(namespaces_of("port").is_empty());
        return;
    }
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // netem and tbf on L1 (link 11 of the file, r1's end); no emulator.
    let qdiscs = Command::new("tc")
        .args(["-n", "fl-port-r1", "qdisc", "show", "dev", "l11"])
        .output()
        .expect("tc");
    let qdiscs = String::from_utf8_lossy(&qdiscs.stdout);
    assert!(
        qdiscs.contains("netem") && qdiscs.contains("delay 10ms"),
        "{qdiscs}"
    );
    assert!(
        qdiscs.contains("tbf") && qdiscs.contains("40Mbit"),
        "{qdiscs}"
    );
    assert!(emulators_of("port").is_empty());
    let out = flowlab()
        .args(["net", "down", "port"])
        .output()
        .expect("down");
    assert!(out.status.success());
    assert!(namespaces_of("port").is_empty());
}

/// Runs `net check -J` and returns its document and stderr, asserting it succeeded.
fn check(args: &[&str]) -> (serde_json::Value, String) {
    let out = flowlab()
        .args(["net", "check", "-J"])
        .args(args)
        .output()
        .expect("check");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        serde_json::from_slice(&out.stdout).expect("JSON"),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issue 5's fidelity bounds on every path of a `net check` document, and the values the
/// seed's tables give (from, to, RTT ms, bottleneck bit/s), for a load under `cc`;
/// `judged_bps` is each path's rate to hold against its floor (the median over the checks
/// taken, [`portfolio_fidelity`]).
///
/// Every queue of the seed holds less than its path's bandwidth-delay product (0.12 to
/// 0.51 of it), which a loss-based sender needs to keep the link busy after it backs off.
/// So under bbr, which paces at the bottleneck's rate whatever the queue, TCP must fill
/// each path but h1–h9 (0.12 BDP; the seed's own TCP tool got 0.87 of it): that holds
/// the emulator's rate to the file. Under cubic how far TCP falls short is cubic's doing,
/// and depends on when its losses come (h1–h9 once 0.71 of its rate over 10 s in CI):
/// no floor is asserted, but a shortfall is allowed only where `check` says it is the
/// shallow queue's, in so many words, and no path may carry more than its rate.
fn assert_seed_paths(
    doc: &serde_json::Value,
    seed: &[(&str, &str, f64, f64)],
    cc: &str,
    judged_bps: &[f64],
) {
    let paths = doc["paths"].as_array().expect("paths");
    assert_eq!(paths.len(), seed.len());
    assert_eq!(judged_bps.len(), seed.len());
    for ((p, &(from, to, rtt, rate)), &judged) in paths.iter().zip(seed).zip(judged_bps) {
        assert_eq!(
            (p["from"].as_str(), p["to"].as_str()),
            (Some(from), Some(to))
        );
        assert_eq!(p["implied_rtt_ms"].as_f64(), Some(rtt));
        assert_eq!(p["implied_bps"].as_f64(), Some(rate));
        // The run of echoes closest to the file's, of at most three (a burst of the host's
        // passes; an emulation that is off is off in every run).
        let measured_rtt = p["measured_rtt_ms"].as_f64().expect("RTT");
        let runs = p["measured_rtt_runs"].as_u64().expect("runs");
        assert!(
            (measured_rtt - rtt).abs() <= 1.0 && (1..=3).contains(&runs),
            "{cc} {from}-{to}: RTT {measured_rtt} ms in {runs} runs"
        );
        let bps = p["measured_bps"].as_f64().expect("rate");
        // Above the rate in no check; below the floor not in the checks' median.
        assert!(bps <= 1.02 * rate, "{cc}: {p}");
        let low = rate_floor(cc, from, to) * rate;
        assert!(
            judged >= low,
            "{cc} {from}-{to}: median {judged} bit/s: {p}"
        );
        // So this check's shortfall, which `check` flags below 0.90 of the rate, is
        // allowed where the floor is lower or the checks' median meets it.
        let shortfall_allowed = judged >= low;
        // The queue bound holds for the 95th percentile; the highest echo alone can be
        // held up by the host's scheduling (see docs/net.md), so it is only reported.
        let loaded = p["loaded_rtt_p95_ms"].as_f64().expect("loaded RTT");
        let bound = p["queue_bound_ms"].as_f64().expect("bound");
        assert!(loaded <= bound + 1.0, "{cc}: {p}");
        // The bound took in the host's own delay and the CPU time stolen was read.
        assert!(
            p["host_delay_p95_ms"].as_f64().is_some_and(|d| d >= 0.0),
            "{p}"
        );
        assert!(
            p["host_steal_percent"]
                .as_f64()
                .is_some_and(|s| (0.0..=100.0).contains(&s)),
            "{p}"
        );
        // The emulator's own lateness is measured where there is one, and only there.
        // The part that passed while its thread was in its poll is a part of each
        // frame's, so of its quantile too, but for the frames counted between the reads
        // of the two histograms (a snapshot is not atomic): a bucket (19 %) and a step of
        // the 10 µs grid allowed for them.
        // The threads slept between frames under the load (the lines always held some
        // not yet due), so their wake-ups were counted too.
        let late = &p["emulator_late_p95_ms"];
        let (late_p99, woke_p99) = (&p["emulator_late_p99_ms"], &p["emulator_woke_late_p99_ms"]);
        let wakeup_p99 = &p["emulator_wakeup_late_p99_ms"];
        match doc["backend"].as_str() {
            Some("userspace") => {
                assert!(late.as_f64().is_some_and(|l| l >= 0.0), "{p}");
                let (all, woke) = (late_p99.as_f64(), woke_p99.as_f64());
                let within = |a: f64, w: f64| (0.0..=a * 2f64.powf(0.25) + 0.01).contains(&w);
                assert!(all.zip(woke).is_some_and(|(a, w)| within(a, w)), "{p}");
                // A figure on the 10 µs grid (a bucket's edge rounded up: 0.01 ms at least).
                assert!(wakeup_p99.as_f64().is_some_and(|w| w >= 0.01), "{p}");
            }
            _ => assert!(
                late.is_null() && late_p99.is_null() && woke_p99.is_null() && wakeup_p99.is_null(),
                "{p}"
            ),
        }
        let highest = p["loaded_rtt_ms"].as_f64().expect("highest loaded RTT");
        assert!(highest >= loaded);
        // The echoes ran while TCP loaded the path: some met a queue. (Not the 95th
        // percentile: bbr paces at the bottleneck's rate and queues only while it probes
        // for more. Not h1–h9: after its first loss cubic's window falls below the BDP
        // its 0.12-BDP queue adds, and grows back over seconds, so no queue need form.)
        assert!(
            (from, to) == ("h1", "h9") || highest > measured_rtt + 1.0,
            "{cc} {from}-{to}: {highest} ms"
        );
        let deviations = p["deviations"].as_array().expect("deviations");
        let explained = |d: &serde_json::Value| {
            shortfall_allowed
                && d.as_str().is_some_and(|d| {
                    d.ends_with(
                        "of the path's bandwidth-delay product: a loss-based TCP may not \
                         fill it)",
                    )
                })
        };
        assert!(deviations.iter().all(explained), "{cc}: {p}");
    }
}

const SEED_001: &[(&str, &str, f64, f64)] = &[
    ("r1", "r2", 20.0, 40e6),
    ("r2", "r3", 40.0, 30e6),
    ("r3", "r4", 20.0, 20e6),
    ("h1", "h4", 60.0, 30e6),
    ("h1", "h9", 80.0, 20e6),
    ("h7", "h9", 60.0, 20e6),
];

/// The least share of its rate a path of seed 001 carries with `cc`. Cubic: none (a
/// loss-based sender may not fill a path whose queue is short of its BDP, and the check
/// says so). BBR v1 paces at the rate it measures, but probes each eighth round trip with
/// a quarter of a BDP more, so where the bottleneck queue is shallower than that (L3's 16
/// packets: h7–h9 0.16 of its BDP, h1–h9 0.12) it loses some of each probe: h1–h9, whose
/// sender also sees the most loss-prone start, is held to 0.75.
fn rate_floor(cc: &str, from: &str, to: &str) -> f64 {
    match (cc, from, to) {
        ("cubic", ..) => 0.0,
        (_, "h1", "h9") => 0.75,
        _ => 0.90,
    }
}

/// A check is taken again when a path missed its bounds while the hypervisor took this
/// share of the CPU (percent) or more, or when a path's rate in that check, or its median
/// over the checks taken, is below its floor …
const STOLEN: f64 = 10.0;
/// … up to this many checks in all.
const STOLEN_ATTEMPTS: u32 = 3;

/// The lower median of `xs` (of two, the lower: a short check is not averaged away).
fn median_of(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v[(v.len() - 1) / 2]
}

/// The nearest-rank `q` quantile of `xs` (0 < q ≤ 1); 0 of none.
fn percentile(xs: &[f64], q: f64) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = (q * v.len() as f64).ceil() as usize;
    v.get(rank.saturating_sub(1)).copied().unwrap_or(0.0)
}

/// The highest share of the CPU stolen during any path's load of a `net check` document.
fn most_stolen(doc: &serde_json::Value) -> f64 {
    doc["paths"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["host_steal_percent"].as_f64())
        .fold(0.0, f64::max)
}

fn portfolio_fidelity(backend: &str) {
    let portfolio = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../topologies/portfolio.toml"
    );
    let _guard = Down::new("port");
    // The seed's kernels ran cubic; machines today default to cubic or bbr.
    for cc in ["cubic", "bbr"] {
        // A check during which the hypervisor took much of the CPU measures the host:
        // a stolen vCPU holds the emulator's frames (a CI run with 34 % stolen: 3 ms
        // over the queue bound) and bbr's pacing, which does not make up lost time
        // (86 % of r2–r3's rate with 29 % stolen on the development VM). Such a check is
        // taken again, at most twice; the last one is judged whatever its steal.
        // A path's rate over three seconds varies from check to check: bbr's h7–h9, in
        // twelve checks on the development VM, 0.905–0.970 of its rate, four of them
        // 0.905–0.917, and once in a CI-like run 0.897 (docs/net.md). So the floor is
        // held against the median of the checks taken (of two, the lower), and a rate
        // below it, in a check or that median, asks for another check (three at most: a
        // path short in two of them fails).
        let mut rates: Vec<Vec<f64>> = vec![Vec::new(); SEED_001.len()];
        for attempt in 1..=STOLEN_ATTEMPTS {
            let (doc, stderr) = check(&[
                portfolio,
                "--backend",
                backend,
                "--pairs",
                "r1-r2,r2-r3,r3-r4,h1-h4,h1-h9,h7-h9",
                "-t",
                "3",
                "-C",
                cc,
            ]);
            assert_eq!(doc["backend"], backend);
            assert!(
                doc["paths"]
                    .as_array()
                    .expect("paths")
                    .iter()
                    .all(|p| p["congestion"] == cc),
                "{stderr}"
            );
            let paths = doc["paths"].as_array().expect("paths");
            for (all, p) in rates.iter_mut().zip(paths) {
                all.push(p["measured_bps"].as_f64().expect("rate"));
            }
            let judged_bps: Vec<f64> = rates.iter().map(|r| median_of(r)).collect();
            // A path below its floor in this check or in the median: another check.
            let short = SEED_001.iter().zip(&judged_bps).zip(&rates).any(
                |((&(from, to, _, rate), &median), r)| {
                    let low = rate_floor(cc, from, to) * rate;
                    median < low || r.last().is_some_and(|&bps| bps < low)
                },
            );
            let judged = std::panic::catch_unwind(|| {
                assert_seed_paths(&doc, SEED_001, cc, &judged_bps);
            });
            let stolen = most_stolen(&doc);
            match judged {
                Ok(()) => break,
                Err(_) if attempt < STOLEN_ATTEMPTS && stolen >= STOLEN => eprintln!(
                    "{cc}: a path missed its bounds while the hypervisor took up to \
                     {stolen:.0} % of the CPU: checked again"
                ),
                Err(_) if attempt < STOLEN_ATTEMPTS && short => eprintln!(
                    "{cc}: a path's rate is below its floor in this check or the median \
                     of {attempt}: checked again"
                ),
                Err(e) => std::panic::resume_unwind(e),
            }
        }
    }
    assert!(
        namespaces_of("port").is_empty(),
        "{:?}",
        namespaces_of("port")
    );
    assert!(emulators_of("port").is_empty());
}

#[test]
fn portfolio_matches_the_seed_on_netem_where_the_kernel_has_it() {
    let Some(_serial) = root_and_serial() else {
        return;
    };
    if !netem_or_skip() {
        return;
    }
    portfolio_fidelity("netem");
}

fn random_loss(backend: &str) {
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("tloss.toml");
    std::fs::write(
        &file,
        r#"
name = "tloss"
hosts = ["a", "b"]
[[link]]
ends = ["a", "b"]
rate = "40M"
delay = "5ms"
jitter = "1ms"
loss = 0.05
"#,
    )
    .expect("write");
    let _guard = Down::new("tloss");
    let (doc, _) = check(&[
        file.to_str().expect("path"),
        "--backend",
        backend,
        "-t",
        "1",
    ]);
    assert_eq!(doc["backend"], backend);
    let p = &doc["paths"][0];
    assert!(
        p["implied_loss_percent"]
            .as_f64()
            .is_some_and(|l| (l - 5.0).abs() < 1e-9)
    );
    let loss = p["measured_loss_percent"].as_f64().expect("loss measured");
    // ±20 % relative over 10 000 datagrams (the binomial spread there is ±0.22 %).
    assert!((4.0..=6.0).contains(&loss), "{loss} %");
    assert_eq!(p["deviations"].as_array().map(Vec::len), Some(0), "{p}");
    assert!(namespaces_of("tloss").is_empty());
}

/// Issue 14: a link without random loss and jitter carries TCP's GSO super-frames whole
/// (the nodes keep their offloads; the emulator reads and writes them with a virtio-net
/// header), one with loss gets frames cut to the MTU; TCP crosses both. Read off `net
/// status`: the mean frame each direction forwarded.
#[test]
fn a_lossless_link_carries_super_frames_and_a_lossy_one_mtu_frames() {
    let Some(_serial) = root_and_serial() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let file = write_topology(
        dir.path(),
        "tgso",
        r#"
name = "tgso"
hosts = ["a", "b"]
routers = ["r"]
[[link]]
name = "clean"
ends = ["a", "r"]
delay = "1ms"
[[link]]
name = "lossy"
ends = ["r", "b"]
delay = "1ms"
loss = 0.0001
"#,
    );
    let _down = Down::new("tgso");
    up(&file, &["--backend", "userspace"]);
    let (doc, _) = check(&[file.to_str().expect("path"), "-t", "2"]);
    let p = &doc["paths"][0];
    assert!(p["measured_bps"].as_f64().is_some_and(|b| b > 0.0), "{p}");
    // The emulator writes its counters once a second.
    std::thread::sleep(Duration::from_millis(1500));
    let out = flowlab().args(["net", "status"]).output().expect("status");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mean = |link: &str, way: &str| -> (u64, u64) {
        let line = text
            .lines()
            .find(|l| l.contains(&format!("link {link} {way}:")))
            .unwrap_or_else(|| panic!("no {link} {way} in:\n{text}"));
        let n = |after: &str, before: &str| -> u64 {
            let rest = &line[line.find(after).expect("field") + after.len()..];
            rest[..rest.find(before).expect("end")]
                .trim()
                .parse()
                .expect("number")
        };
        (n(": ", " forwarded"), n("(mean ", " B)"))
    };
    // a→b of the clean link carries the data: segments of up to 64 KiB.
    let (frames, clean) = mean("clean", "a→b");
    assert!(
        frames > 0 && clean > 3000,
        "mean frame {clean} B over {frames}:\n{text}"
    );
    let (frames, lossy) = mean("lossy", "a→b");
    assert!(
        frames > 0 && lossy <= 1514,
        "mean frame {lossy} B over {frames}:\n{text}"
    );
}

#[test]
fn random_loss_holds_over_10000_packets_on_the_userspace_backend() {
    let Some(_serial) = root_and_serial() else {
        return;
    };
    random_loss("userspace");
}

#[test]
fn random_loss_holds_over_10000_packets_on_netem_where_the_kernel_has_it() {
    let Some(_serial) = root_and_serial() else {
        return;
    };
    if !netem_or_skip() {
        return;
    }
    random_loss("netem");
}

#[test]
fn check_measures_paths_beside_what_the_file_implies() {
    let Some(_serial) = root_and_serial() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let file = small("tnet3", dir.path());
    let _guard = Down::new("tnet3");
    let out = flowlab()
        .args(["net", "check"])
        .arg(&file)
        .args(["--pairs", "h1-h2,h1-h3", "-t", "2", "-J"])
        .output()
        .expect("check");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc["backend"], "none needed (tbf only)");
    let rows = doc["paths"].as_array().expect("rows");
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (rows[0]["from"].as_str(), rows[0]["to"].as_str()),
        (Some("h1"), Some("h2"))
    );
    assert_eq!(rows[0]["implied_bps"], 50_000_000);
    let measured = rows[0]["measured_bps"].as_f64().expect("rate");
    assert!((45e6..=51e6).contains(&measured), "{}", rows[0]);
    assert_eq!(
        rows[0]["deviations"].as_array().map(Vec::len),
        Some(0),
        "{rows:?}"
    );
    assert!(rows[0]["measured_rtt_ms"].as_f64().is_some_and(|r| r < 1.0));
    assert!(
        rows[1]["implied_bps"].is_null(),
        "h1-h3 share a switch: unlimited"
    );
    // It built the topology for the check and took it down again.
    assert!(namespaces_of("tnet3").is_empty());
}

/// A chain h1 – r1 – … – r5 – h2 whose four router links each add `delay` one way (none
/// when empty), under topology name `name`.
fn chain(name: &str, dir: &Path, delay: &str) -> std::path::PathBuf {
    let mut text = format!(
        "name = \"{name}\"\nhosts = [\"h1\", \"h2\"]\nrouters = [\"r1\", \"r2\", \"r3\", \"r4\", \"r5\"]\n\
         [[link]]\nends = [\"h1\", \"r1\"]\n[[link]]\nends = [\"r5\", \"h2\"]\n"
    );
    for i in 1..5 {
        text += &format!("[[link]]\nends = [\"r{i}\", \"r{}\"]\n", i + 1);
        if !delay.is_empty() {
            text += &format!("delay = \"{delay}\"\n");
        }
    }
    write_topology(dir, name, &text)
}

/// Regression (issue 11): every crossing of an emulated link added the emulator's late
/// wake-up (40–120 µs from an idle vCPU) and its cost of sending (10–30 µs), so a path's
/// idle RTT grew with the number of links on it — 80 ms across seed 001's three links
/// measured 80.6–81.5. Over four links (eight crossings a round trip) the emulated path
/// must take the configured delays plus what the same chain takes unemulated (the
/// measured baseline: the namespaces' own forwarding, which the emulator does not add),
/// at most 25 µs more a crossing and never more than 0.3 ms off in all.
///
/// What the emulator adds is its own; what a hypervisor takes meanwhile is not (a run
/// with 3.4 % of the CPU stolen measured 34 µs a crossing, the next run passed): both
/// chains are measured five times, alternately, and the lowest median of each is
/// judged — a systematic cost shows in every run, the host's interference only in some.
/// Five, not three: both medians move between two levels from run to run (unemulated
/// 0.073–0.078 or 0.108–0.114 ms, emulated 40.23 or 40.27–40.29 ms on the development
/// VM), and a fresh-clone run whose three unemulated runs reached the lower level once
/// and emulated ones never measured 27.0 µs a crossing where the same build measured
/// 19–21 µs four times in a row.
#[test]
fn the_rtt_through_the_emulator_does_not_grow_with_the_links_crossed() {
    let Some(_serial) = root_and_serial() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let plain_file = chain("tchn0", dir.path(), "");
    let emulated_file = chain("tchn4", dir.path(), "5ms");
    let (_plain_down, _emulated_down) = (Down::new("tchn0"), Down::new("tchn4"));
    up(&plain_file, &[]);
    up(&emulated_file, &[]);
    let idle_rtt = |file: &Path| -> (f64, f64) {
        let (doc, _) = check(&[file.to_str().expect("path"), "--pairs", "h1-h2", "-t", "1"]);
        let p = &doc["paths"][0];
        (
            p["implied_rtt_ms"].as_f64().expect("implied"),
            p["measured_rtt_ms"].as_f64().expect("measured"),
        )
    };
    let cpu = flowlab_engine::sysinfo::CpuTimes::now();
    let mut runs = Vec::new();
    for _ in 0..5 {
        let (_, plain) = idle_rtt(&plain_file);
        let (implied, emulated) = idle_rtt(&emulated_file);
        assert_eq!(implied, 40.0);
        runs.push((plain, emulated));
    }
    let lowest = |pick: fn(&(f64, f64)) -> f64| runs.iter().map(pick).fold(f64::INFINITY, f64::min);
    let (plain, emulated) = (lowest(|r| r.0), lowest(|r| r.1));
    let added = emulated - plain;
    let per_crossing_us = (added - 40.0) * 1000.0 / 8.0;
    let seen = format!(
        "lowest {emulated} ms emulated, {plain} ms unemulated: {per_crossing_us:.1} µs a \
         crossing; (unemulated, emulated) runs: {runs:?} {}",
        steal_since(cpu)
    );
    assert!(per_crossing_us <= 25.0, "{seen}");
    assert!((added - 40.0).abs() <= 0.3, "{seen}");
}

/// Sends `count` probes from `from` to `to` (a socket bound to its host's address), each carrying its sending time, wall clock
/// ns) 1.1–1.5 ms apart, and returns each one's time from its sending to the kernel's
/// arrival stamp on `to`, in µs, sorted.
fn one_way_us(from: &std::net::UdpSocket, to: &std::net::UdpSocket, count: usize) -> Vec<f64> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg, setsockopt, sockopt};
    use std::os::fd::AsRawFd;
    let wall = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_nanos() as i128
    };
    setsockopt(to, sockopt::ReceiveTimestampns, &true).expect("SO_TIMESTAMPNS");
    to.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let receiver = to.try_clone().expect("clone");
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        while got.len() < count {
            let mut iov = [std::io::IoSliceMut::new(&mut buf)];
            let mut space = nix::cmsg_space!(nix::sys::time::TimeSpec);
            let Ok(msg) = recvmsg::<()>(
                receiver.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                MsgFlags::empty(),
            ) else {
                break;
            };
            let stamp = msg
                .cmsgs()
                .expect("control messages")
                .find_map(|c| match c {
                    ControlMessageOwned::ScmTimestampns(t) => {
                        Some(i128::from(t.tv_sec()) * 1_000_000_000 + i128::from(t.tv_nsec()))
                    }
                    _ => None,
                });
            if msg.bytes == 16 {
                got.push((stamp.expect("an arrival stamp"), buf));
            }
        }
        got
    });
    let to_addr = to.local_addr().expect("addr");
    for i in 0..count {
        from.send_to(&wall().to_le_bytes(), to_addr).expect("probe");
        std::thread::sleep(Duration::from_micros(1_100 + (i as u64 * 137) % 400));
    }
    let got = reader.join().expect("reader");
    assert!(
        got.len() * 100 >= count * 99,
        "{} of {count} probes came",
        got.len()
    );
    let mut us: Vec<f64> = got
        .iter()
        .map(|(stamp, buf)| {
            let sent = i128::from_le_bytes(buf[..16].try_into().expect("16 bytes"));
            (stamp - sent) as f64 / 1000.0
        })
        .collect();
    us.sort_by(f64::total_cmp);
    us
}

/// Regression (issue 14): while the emulator's thread sleeps towards a frame, it leaves a
/// socket unwatched only if nothing arriving there could be due before it wakes — judged
/// by the delay of that socket's own direction. On a link 2 ms one way and 0.4 ms back,
/// with a sparse stream the long way keeping the thread asleep up to 1.6 ms at a time,
/// datagrams the short way must keep their 0.4 ms: a rule judging them by the long way's
/// delay would leave them in their socket until the stream's next frame left, most of
/// them late by up to 1.2 ms. Some do wait, legitimately: those arriving within 0.28 ms
/// of a departure (the delay less the send cost and 0.1 ms of slack).
///
/// Judged against the same probes without the stream (the thread then watches both
/// sockets all the time), measured alternately, a quiet round then a stream round: each
/// pair's difference of medians, two pairs or, when they disagree, four, and the upper
/// median of the differences. Such a rule delays most datagrams (its median shift is
/// hundreds of µs), while the host's interference reaches only a tail: the 90th
/// percentiles, judged before, spread 242–640 µs between quiet rounds alone while CI ran
/// the suite's three lanes, and failed a correct emulator. With the rule fed the long
/// way's delay for both sockets, the medians rose by 410–450 µs with the stream; a
/// correct rule moves them a few µs either way.
#[test]
fn arrivals_the_short_way_keep_their_delay_while_the_emulator_sleeps_for_the_long_way() {
    let Some(_serial) = root_and_serial() else {
        return;
    };
    let text = "name = \"tasym\"\nhosts = [\"a\", \"b\"]\n[[link]]\nends = [\"a\", \"b\"]\n\
                delay = \"2ms\"\nreverse = { delay = \"400us\" }\n";
    let dir = tempfile::tempdir().expect("tmp");
    let file = write_topology(dir.path(), "tasym", text);
    let _guard = Down::new("tasym");
    up(&file, &["--backend", "userspace"]);
    // A UDP socket in `node`'s namespace, bound to its address in the topology's plan.
    let topology = flowlab_net::topology::Topology::parse(text).expect("topology");
    let plan = flowlab_net::topology::Plan::of(&topology);
    let addresses = flowlab_net::build::interfaces(&plan);
    let bound = |node: &str| {
        let (_, ip, _) = addresses
            .iter()
            .find(|(n, _, _)| n == node)
            .unwrap_or_else(|| panic!("{node} in the plan"));
        let ip = std::net::Ipv4Addr::from(*ip);
        let ns = flowlab_net::build::ns_name("tasym", node);
        flowlab_net::netns::run_in(&ns, move || std::net::UdpSocket::bind((ip, 0)))
            .unwrap_or_else(|e| panic!("a UDP socket in {ns}: {e}"))
    };
    let at_a = bound("a");
    let at_b = bound("b");
    // The stream's frames are sent to a socket nobody reads (its overflow is silent).
    let sink = bound("b");
    let sink_addr = sink.local_addr().expect("addr");
    let cpu = flowlab_engine::sysinfo::CpuTimes::now();
    let p = |us: &[f64], q: f64| us[((us.len() - 1) as f64 * q) as usize] - 400.0;
    /// The stream's thread, stopped and joined when dropped (also when a round fails:
    /// its socket would keep the namespace alive).
    struct Stream(
        std::sync::Arc<std::sync::atomic::AtomicBool>,
        Option<std::thread::JoinHandle<()>>,
    );
    impl Drop for Stream {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::Relaxed);
            if let Some(t) = self.1.take() {
                let _ = t.join();
            }
        }
    }
    /// About a third of what that rule's error added to the median.
    const BOUND_US: f64 = 150.0;
    let mut rounds: Vec<(&str, f64, f64, f64)> = Vec::new();
    // Each pair's difference (a quiet round, then a stream round: the same phase of the
    // host), and their upper median: one lucky quiet round cannot fail a stream that was
    // no worse than the rest.
    let differences = |rounds: &[(&str, f64, f64, f64)]| {
        let mut d: Vec<f64> = rounds.chunks_exact(2).map(|p| p[1].2 - p[0].2).collect();
        d.sort_by(f64::total_cmp);
        d
    };
    let upper_median = |d: &[f64]| d.get(d.len() / 2).copied().unwrap_or(f64::INFINITY);
    // Two pairs, and two more when the first two's upper median is beyond the bound: a
    // noisy phase of the host can show in some rounds of either kind.
    for round in 0..8 {
        if round == 4 && upper_median(&differences(&rounds)) <= BOUND_US {
            break;
        }
        let streaming = round % 2 == 1;
        let stream = streaming.then(|| {
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let (stopped, from) = (stop.clone(), at_a.try_clone().expect("clone"));
            let thread = std::thread::spawn(move || {
                while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                    // A send refused (the namespace going away after a failure) ends it.
                    if from.send_to(&[0u8; 64], sink_addr).is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(1_500));
                }
            });
            Stream(stop, Some(thread))
        });
        // The stream's first frames reach the far end before the probes start.
        std::thread::sleep(Duration::from_millis(if streaming { 10 } else { 0 }));
        let us = one_way_us(&at_b, &at_a, 1000);
        drop(stream);
        let way = if streaming { "stream" } else { "quiet" };
        rounds.push((way, p(&us, 0.0), p(&us, 0.5), p(&us, 0.9)));
    }
    let d = differences(&rounds);
    let judged = upper_median(&d);
    let seen = format!(
        "median with the stream less without, per pair of rounds: {d:.0?} µs, \
         upper median {judged:.0}; (least, median, 90th) µs over the 0.4 ms per round: \
         {rounds:.0?} {}",
        steal_since(cpu)
    );
    eprintln!("{seen}");
    assert!(judged <= BOUND_US, "{seen}");
    // Open until here: a closed port would answer the stream the short way (ICMP).
    drop(sink);
}

/// Whether a TCP socket listens on `port` in `node` of `topo` (from the namespace's own
/// /proc/net/tcp and tcp6; st 0A is LISTEN).
fn listening(topo: &str, node: &str, port: u16) -> bool {
    let out = Command::new("ip")
        .args(["netns", "exec", &format!("fl-{topo}-{node}")])
        .args(["cat", "/proc/net/tcp", "/proc/net/tcp6"])
        .output()
        .expect("ip netns exec cat");
    support::listens_in(&String::from_utf8_lossy(&out.stdout), port)
}

/// `flowlab serve -p 5201 ARGS` in `node` of `topo` through `net exec`, once it listens
/// (a fixed sleep lost the race on a busy machine: "connection refused").
fn serve_in(topo: &str, node: &str, args: &[&str]) -> std::process::Child {
    serve_at(topo, node, 5201, args)
}

/// [`serve_in`] on `port`.
fn serve_at(topo: &str, node: &str, port: u16, args: &[&str]) -> std::process::Child {
    let mut server = flowlab()
        .args(["net", "exec", "-t", topo, node, "--"])
        .arg(assert_cmd::cargo::cargo_bin("flowlab"))
        .args(["serve", "-p", &port.to_string()])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("server");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !listening(topo, node, port) {
        if let Ok(Some(status)) = server.try_wait() {
            panic!("the server in {node} exited: {status}");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the server in {node} did not listen within 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server
}

/// `flowlab test ARGS -J` from h1 of topology `topo` to a server in h2 (10.0.3.2 in
/// small.toml's plan), as a JSON document.
fn test_h1_to_h2(topo: &str, args: &[&str]) -> serde_json::Value {
    test_across(topo, "h1", "h2", args)
}

/// `flowlab test ARGS -J` from node `from` of topology `topo` to a server in node `to`,
/// as a JSON document.
fn test_across(topo: &str, from: &str, to: &str, args: &[&str]) -> serde_json::Value {
    let mut server = serve_in(topo, to, &["-1"]);
    let out = flowlab()
        .args(["net", "exec", "-t", topo, from, "--"])
        .arg(assert_cmd::cargo::cargo_bin("flowlab"))
        // By name: `net up` wrote the namespaces' hosts files.
        .args(["test", to, "-J"])
        .args(args)
        .output()
        .expect("test across the topology");
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        out.status.success(),
        "{topo} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// Regression (issue 11): on a path limited by a small receive buffer, with bbr the
/// kernel's own count called it "network (congestion window)", and the advice was sized
/// from the rate the limited transfer achieved (159K where the path needed 312 KB).
/// Inside a topology the verdict is the receive window under bbr and cubic alike, the
/// advice is the path's lowest RTT × its bottleneck, and following it fills the path.
#[test]
fn a_small_receive_window_is_diagnosed_and_sized_for_the_path_under_bbr_and_cubic() {
    let Some(_serial) = root_and_serial() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    // 50 Mbit/s with 20 ms each way: 250 kB in flight to fill it.
    let file = small_with("tnet5", dir.path(), r#"delay = "20ms""#);
    let _guard = Down::new("tnet5");
    up(&file, &[]);
    let rate = |v: &serde_json::Value| {
        v["end"]["sums"][0]["receiver"]["bits_per_second"]
            .as_f64()
            .expect("a rate")
    };
    for cc in ["bbr", "cubic"] {
        let v = test_h1_to_h2(
            "tnet5",
            &["-t", "4", "--trace", "--recv-window", "32K", "-C", cc],
        );
        let d = &v["trace"]["diagnosis"][0];
        assert_eq!(d["primary"], "receive_window", "{cc}: {d}");
        assert!(
            d["shares"]["receive_window"].as_f64().expect("share") >= 0.8,
            "{cc}: {d}"
        );
        let rtt_us = d["evidence"]["min_rtt_us"].as_u64().expect("min RTT");
        // The emulator writes each frame early by its mean cost of sending (about 10 µs),
        // so a frame that cost less reaches the next node a few µs early: the lowest RTT
        // can fall that far below 40 ms (39 997 µs once in a fresh-clone run). Allowed:
        // 50 µs for each of the two crossings, five times the mean cost seen here.
        assert!((39_900..42_000).contains(&rtt_us), "{cc}: {rtt_us} µs");
        // The window the path needs, as `--recv-window` takes it (KiB, rounded up).
        let need = (50_000_000 * rtt_us).div_ceil(8_000_000);
        assert_eq!(d["evidence"]["path_bdp_bytes"], need, "{cc}: {d}");
        let size = format!("{}K", need.div_ceil(1024));
        let advice = d["advice"][0].as_str().expect("advice");
        assert!(
            advice.contains("50.0 Mbits/sec (the bottleneck of topology tnet5, h1 → h2)")
                && advice.contains(&format!("`--recv-window {size}`")),
            "{cc}: {advice}"
        );
        assert!(
            rate(&v) < 25e6,
            "{cc}: {} bit/s with a 32K window",
            rate(&v)
        );
        // Following the advice fills the path (0.85 R over 4 s, slow start included).
        let cpu = flowlab_engine::sysinfo::CpuTimes::now();
        let v = test_h1_to_h2("tnet5", &["-t", "4", "--recv-window", &size, "-C", cc]);
        assert!(
            rate(&v) >= 0.85 * 50e6,
            "{cc}: {} bit/s with {size} {}",
            rate(&v),
            steal_since(cpu)
        );
    }
}

/// Regression (issue 11): `net check`'s table did not say which congestion control a
/// path ran (the kernel's default unless `-C`, bbr on some machines and cubic on others),
/// nor the tolerance a bound was judged with. Every row names its algorithm, and the
/// bounds are printed with their tolerances.
#[test]
fn the_table_names_the_congestion_control_and_the_bounds_judged() {
    let Some(_serial) = root_and_serial() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let file = small("tnet6", dir.path());
    let _guard = Down::new("tnet6");
    let default = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .expect("the default congestion control")
        .trim()
        .to_string();
    let table = |args: &[&str]| {
        let out = flowlab()
            .args(["net", "check"])
            .arg(&file)
            .args(["--pairs", "h1-h2", "-t", "1"])
            .args(args)
            .output()
            .expect("check");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = table(&[]);
    // The header's lines wrap at 100 columns: read as one run of words.
    let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains(&format!(
            "under {default} (the system's default; -C chooses)"
        )),
        "{text}"
    );
    let row = text
        .lines()
        .find(|l| l.starts_with("h1-h2 "))
        .unwrap_or_else(|| panic!("no row for h1-h2: {text}"));
    assert_eq!(
        row.split_whitespace().nth(1),
        Some(default.as_str()),
        "{row}"
    );
    // The idle RTT beside the file's with its tolerance, the loaded RTT beside its bound
    // and tolerance, the rate beside the bounds it was judged by (50 Mbit/s: 45–51).
    assert!(row.contains("(0.0±1.0)") && row.contains("+1 ("), "{row}");
    assert!(
        text.contains("rate, Mbits/sec") && row.contains("(45.0–51.0)"),
        "{text}"
    );
    assert!(
        text.contains("verdict: the one path is within bounds"),
        "{text}"
    );
    let other = if default == "reno" { "cubic" } else { "reno" };
    let text = table(&["-C", other]);
    let row = text.lines().find(|l| l.starts_with("h1-h2 ")).expect("row");
    assert_eq!(row.split_whitespace().nth(1), Some(other), "{text}");
}

/// A directory everyone may enter and read, holding a copy of the flowlab binary and of
/// small.toml: the checkout itself may sit where other users cannot reach (a clone in a
/// 0700 `mktemp -d`, or a home directory), and the kernel then refuses to run the binary
/// for them at all.
fn open_to_all() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix("flowlab-nobody")
        .tempdir_in(std::env::temp_dir())
        .expect("tmp");
    let open = |p: &Path, mode| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod")
    };
    open(dir.path(), 0o755);
    let binary = dir.path().join("flowlab");
    std::fs::copy(assert_cmd::cargo::cargo_bin("flowlab"), &binary).expect("copy the binary");
    open(&binary, 0o755);
    let small = dir.path().join("small.toml");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../topologies/small.toml"),
        &small,
    )
    .expect("copy small.toml");
    open(&small, 0o644);
    (dir, binary, small)
}

#[test]
fn without_root_it_says_so_before_doing_anything() {
    let Some(_serial) = root_and_serial() else {
        return;
    };
    if !support::require_tool("setpriv") {
        return;
    }
    let (dir, binary, small) = open_to_all();
    let small = small.to_str().expect("path");
    // The same binary as an unprivileged user (setpriv from util-linux).
    let as_nobody = |args: &[&str]| {
        Command::new("setpriv")
            .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
            .arg(&binary)
            .args(args)
            .current_dir(dir.path())
            .output()
            .expect("setpriv")
    };
    for args in [
        &["net", "up", small][..],
        &["net", "check", small],
        &["net", "down", "small"],
        &["net", "exec", "h1", "--", "true"],
    ] {
        let out = as_nobody(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("needs root (CAP_NET_ADMIN)"),
            "{args:?}: {stderr}"
        );
    }
    assert!(namespaces_of("small").is_empty());
    // Showing a plan and listing what is up need no privileges.
    assert!(as_nobody(&["net", "show", small]).status.success());
    assert!(as_nobody(&["net", "status"]).status.success());
}

/// `--latency` through small.toml's bottleneck slowed to 30 Mbit/s (tbf, a queue of 100
/// packets: 100 × 1514 bytes take 40.4 ms to drain) with nothing else delayed. Cubic, loss-based,
/// fills the drop-tail queue: the loaded round trips sit in the upper part of it and none
/// waits much longer than it holds, and the verdict names a queue-building bottleneck.
/// Bbr keeps the queue shorter: its median is below cubic's, and reported as measured.
/// With `--trace`, cubic's diagnosis names the queue-building bottleneck.
#[test]
fn latency_under_load_shows_the_bottlenecks_queue() {
    let Some(_serial) = root_and_serial() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let file = small_at("tnet9", dir.path(), "30M", "");
    let _guard = Down::new("tnet9");
    up(&file, &[]);
    let queue_ms = 100.0 * 1514.0 * 8.0 / 30e6 * 1e3;
    let mut medians = Vec::new();
    for cc in ["cubic", "bbr"] {
        // No probe waits much longer than the queue holds (the probe's own 64 bytes and
        // a busy machine's scheduling on top). A host that leaves tbf unserved delays
        // what it queues beyond that (a fresh-clone run on a slow host: cubic's p99
        // 49.2 ms against 47.0), in some runs; a queue the link does not have would show
        // in every run. So a test whose p99 misses is taken again, up to three in all.
        let bound = |idle: f64| queue_ms * 1.1 + idle + 2.0;
        let mut attempt = 1;
        let v = loop {
            let v = test_h1_to_h2("tnet9", &["-t", "4", "-C", cc, "--latency", "--trace"]);
            let rtt = &v["latency"]["loaded"]["rtt"];
            let idle = v["latency"]["idle"]["rtt"]["p99_ms"]
                .as_f64()
                .unwrap_or(0.0);
            match rtt["p99_ms"].as_f64() {
                Some(p99) if p99 > bound(idle) && attempt < 3 => {
                    eprintln!(
                        "{cc}: loaded p99 {p99} ms over {} ms: run again",
                        bound(idle)
                    );
                    attempt += 1;
                }
                _ => break v,
            }
        };
        let l = &v["latency"];
        let ms = |part: &str, key: &str| l[part]["rtt"][key].as_f64().expect("a round trip");
        let (idle, median, p99) = (
            ms("idle", "p99_ms"),
            ms("loaded", "median_ms"),
            ms("loaded", "p99_ms"),
        );
        assert!(
            idle < 2.0,
            "{cc}: idle p99 {idle} ms on an undelayed path: {l}"
        );
        assert!(p99 <= bound(idle), "{cc}: p99 {p99} ms: {l}");
        if cc == "cubic" {
            assert!(median >= queue_ms * 0.5, "cubic: median {median} ms: {l}");
            assert_eq!(l["queue_building"], true, "{l}");
            // The trace's diagnosis names the queue: the sender is limited by the
            // network, and its first advice is about the queue the probes saw.
            let d = &v["trace"]["diagnosis"][0];
            assert_eq!(d["primary"], "network", "{d}");
            let advice = d["advice"][0].as_str().unwrap_or_default();
            assert!(advice.contains("queue-building bottleneck"), "{d}");
        }
        // Each interval shows the round trips of its replies.
        for iv in v["intervals"].as_array().expect("intervals") {
            assert!(iv["latency"]["samples"].as_u64() > Some(0), "{cc}: {iv}");
        }
        medians.push(median);
    }
    assert!(
        medians[1] < medians[0],
        "bbr's loaded median {} ms is not below cubic's {} ms",
        medians[1],
        medians[0]
    );
}

/// `flowlab rpm` through small.toml's bottleneck given a base delay: 50 Mbit/s, a tbf
/// queue of 100 packets (100 × 1514 bytes drain in 24.2 ms), 10 ms each way (D = 20 ms).
/// Under cubic, loss-based, the load fills the drop-tail queue: the working latency on
/// separate connections must be D + Q·MTU/R within docs/rpm.md's tolerance (−25 % … +5 %,
/// plus 1 ms). Under bbr whatever queue the ramp's flows keep is reported, not hidden:
/// the idle latency is D, the working latency is at least D, and the RPM agrees with
/// the latencies it comes from.
#[test]
fn rpm_working_latency_matches_the_bottlenecks_queue() {
    let Some(_serial) = root_and_serial() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let file = small_with("tnet10", dir.path(), r#"delay = "10ms""#);
    let _guard = Down::new("tnet10");
    up(&file, &[]);
    let (d, queue) = (20.0, 100.0 * 1514.0 * 8.0 / 50e6 * 1e3);
    let expected = d + queue;
    // Idle, `flowlab ping` (UDP, no root needed for it) reads the path's RTT within 1 ms.
    let mut server = serve_in("tnet10", "h2", &[]);
    let out = flowlab()
        .args(["net", "exec", "-t", "tnet10", "h1", "--"])
        .arg(assert_cmd::cargo::cargo_bin("flowlab"))
        .args(["ping", "10.0.3.2", "-c", "50", "-i", "0.02", "-J"])
        .output()
        .expect("ping from h1");
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let median = v["summary"]["rtt"]["median_ms"].as_f64().expect("a median");
    assert_eq!(v["summary"]["received"], 50, "{}", v["summary"]);
    assert!(
        (median - d).abs() <= 1.0,
        "ping: median {median} ms, the file's RTT {d} ms"
    );
    for cc in ["cubic", "bbr"] {
        let mut server = serve_in("tnet10", "h2", &[]);
        let out = flowlab()
            .args(["net", "exec", "-t", "tnet10", "h1", "--"])
            .arg(assert_cmd::cargo::cargo_bin("flowlab"))
            .args(["rpm", "10.0.3.2", "-l", "download", "-C", cc])
            .args(["--interval", "0.5", "-t", "8", "-J"])
            .output()
            .expect("rpm from h1");
        let _ = server.kill();
        let _ = server.wait();
        // A load that never saturated exits 1, its document printed whole (bbr's probes
        // of the RTT may keep its goodput from settling); any other failure fails here.
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success()
                || (out.status.code() == Some(1) && stderr.contains("never saturated")),
            "{cc}: {stderr}"
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(v["start"]["congestion"], cc);
        // The idle path's RTT is judged by the median of the idle probes, which a few
        // probes delayed on a busy machine do not move; the trimmed mean they feed can
        // only lie above the path's delay.
        let idle = v["idle"]["median_ms"].as_f64().expect("idle median");
        assert!(
            (d..d + 2.0).contains(&idle),
            "{cc}: idle median {idle} ms, D {d} ms: {}",
            v["idle"]
        );
        assert!(
            v["idle"]["latency_ms"].as_f64() >= Some(d),
            "{cc}: {}",
            v["idle"]
        );
        let dl = &v["directions"][0];
        let r = &dl["responsiveness"];
        let foreign = r["foreign_ms"].as_f64().expect("working latency");
        let rate = dl["goodput_bps"].as_f64().expect("goodput");
        assert!(rate > 0.0 && rate <= 51e6, "{cc}: goodput {rate}");
        // Each interval is counted over its own time. (A regression: under bbr a SYN lost
        // in the full queue held the interval clock for a second while a connection
        // opened, and intervals read 105 and 8 Mbit/s in turn on this 50 Mbit/s path.)
        for iv in dl["intervals"].as_array().expect("intervals") {
            let g = iv["goodput_bps"].as_f64().expect("interval goodput");
            assert!(g <= 1.5 * 50e6, "{cc}: an interval at {g} bit/s: {iv}");
        }
        if cc == "cubic" {
            // Cubic's flows keep the bottleneck full (bbr's may not: its probes of the
            // path's RTT drain it for 200 ms at a time).
            assert!(rate >= 45e6, "cubic: goodput {rate}");
            assert!(
                (0.75 * expected..=1.05 * expected + 1.0).contains(&foreign),
                "cubic: working latency {foreign} ms, D + Q·MTU/R = {expected} ms: {r}"
            );
        } else {
            // Never below the path's delay. Above the queue's bound it may be: bbr does
            // not back off on loss, so the ramp's flows overflow the queue, and a probe
            // that loses a segment waits for its retransmission (docs/rpm.md).
            assert!(foreign >= d, "bbr: {foreign} ms: {r}");
        }
        let rpm = r["rpm"].as_f64().expect("rpm");
        let loaded = r["request_loaded_ms"].as_f64().expect("self probes");
        assert!(
            (rpm - (60_000.0 / foreign + 60_000.0 / loaded) / 2.0).abs() < 1e-6,
            "{r}"
        );
    }
}

/// The tests that need the machine to themselves: no other binary's topology beside
/// them (`root_and_serial_alone`), or the CPU latency request theirs alone. Grouped so
/// that scripts/test.sh runs them first (`net machine_alone::`), while the second lane
/// runs the binaries that build no topology, and then the rest of this binary
/// (`net --skip machine_alone::`) beside the studies' topologies.
mod machine_alone {
    use super::*;

    /// `--keep-cpus-awake`: the emulator holds a CPU latency request of 0 µs while it runs
    /// (the kernel's /dev/cpu_dma_latency reads the least request held), `net status`,
    /// `net check` and `sysinfo` (every result's machine state) say so, and the request goes
    /// with the topology; without the flag none is held, and a topology with nothing to
    /// emulate refuses the flag, naming it.
    #[test]
    fn the_emulator_keeps_the_cpus_awake_only_when_asked_and_only_while_it_runs() {
        let Some(_serial) = root_and_serial_with(support::machine_alone) else {
            return;
        };
        let latency = flowlab_engine::sysinfo::cpu_latency_us;
        let Some(before) = support::cpu_latency_before_holding() else {
            return;
        };
        let dir = tempfile::tempdir().expect("tmp");
        let two = |name: &str, link: &str| {
            let text = format!(
                "name = \"{name}\"\nhosts = [\"a\", \"b\"]\n[[link]]\nends = [\"a\", \"b\"]\n{link}\n"
            );
            write_topology(dir.path(), name, &text)
        };
        // Nothing to emulate: refused before anything is built.
        let _plain = Down::new("tawak1");
        let out = flowlab()
            .args(["net", "up", "--keep-cpus-awake"])
            .arg(two("tawak1", r#"rate = "100M""#))
            .output()
            .expect("up");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("--keep-cpus-awake"),
            "{err}"
        );
        assert!(namespaces_of("tawak1").is_empty());
        // Asked for: held while the emulator runs, and said.
        let delayed = two("tawak2", r#"delay = "1ms""#);
        let _awake = Down::new("tawak2");
        let out = flowlab()
            .args(["net", "up", "--backend", "userspace", "--keep-cpus-awake"])
            .arg(&delayed)
            .output()
            .expect("up");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        // Said where the request changes nothing: a kernel without a cpuidle driver halts
        // idle CPUs whatever is requested.
        let driver = std::fs::read_to_string(flowlab_proto::system::CPUIDLE_DRIVER_FILE);
        assert_eq!(
            err.contains("keeping the CPUs awake changes nothing here"),
            driver.is_ok_and(|d| d.trim() == "none"),
            "{err}"
        );
        assert_eq!(latency(), Some(0), "held while the topology is up");
        // And every result made meanwhile records it (the machine state of `start.system`).
        let system = flowlab()
            .args(["sysinfo", "--json"])
            .output()
            .expect("sysinfo");
        assert!(system.status.success());
        let system: serde_json::Value = serde_json::from_slice(&system.stdout).expect("JSON");
        assert_eq!(system["cpu_latency_us"], 0, "{system}");
        let system = flowlab().arg("sysinfo").output().expect("sysinfo");
        assert!(system.status.success());
        let system = String::from_utf8_lossy(&system.stdout);
        assert!(
            system.lines().any(|l| l
                .strip_prefix("cpu latency request (PM QoS)")
                .is_some_and(|v| v.trim_start().starts_with("0 µs (held by a process"))),
            "{system}"
        );
        let status = flowlab().args(["net", "status"]).output().expect("status");
        let status = String::from_utf8_lossy(&status.stdout);
        assert!(status.contains("CPUs kept awake"), "{status}");
        // What a one-second check of a–b says about it.
        let checked = || {
            check(&[
                "--pairs",
                "a-b",
                "-t",
                "1",
                delayed.to_str().expect("utf-8"),
            ])
            .0
        };
        let doc = checked();
        assert_eq!(doc["cpus_kept_awake"], true, "{doc}");
        let out = flowlab()
            .args(["net", "down", "tawak2"])
            .output()
            .expect("down");
        assert!(out.status.success());
        assert_eq!(
            latency(),
            Some(before),
            "let go with the topology; held by {:?}",
            support::cpu_latency_holders()
        );
        // Not asked for: nothing held, and a check that asks for it is refused.
        up(&delayed, &["--backend", "userspace"]);
        assert_eq!(latency(), Some(before), "held only when asked for");
        let out = flowlab()
            .args([
                "net",
                "check",
                "--keep-cpus-awake",
                "--pairs",
                "a-b",
                "-t",
                "1",
            ])
            .arg(&delayed)
            .output()
            .expect("check");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("up without --keep-cpus-awake"),
            "{err}"
        );
        let doc = checked();
        assert_eq!(doc["cpus_kept_awake"], false, "{doc}");
    }

    #[test]
    fn portfolio_matches_the_seed_on_the_userspace_backend() {
        let Some(_serial) = root_and_serial_alone() else {
            return;
        };
        portfolio_fidelity("userspace");
    }

    #[test]
    fn pairs_run_together_share_the_bottleneck_and_routers_can_be_ends() {
        let Some(_serial) = root_and_serial_alone() else {
            return;
        };
        let dir = tempfile::tempdir().expect("tmp");
        let file = small("tnet4", dir.path());
        let _guard = Down::new("tnet4");
        let path = file.to_str().expect("path");
        // h1 (two connections) and h3 send to h2 at once over the 50 Mbit/s wan: judged under
        // cubic, and again under the system's default where that is another algorithm.
        let (doc, _) = check(&[path, "--together", "--pairs", "h1-h2:2,h3-h2", "-t", "3"]);
        assert_eq!(doc["together"], true);
        let default = doc["congestion_default"]
            .as_str()
            .expect("default")
            .to_string();
        let mut rounds = vec!["cubic".to_string()];
        if default != "cubic" {
            rounds.push(default);
        }
        let paths = doc["paths"].as_array().expect("paths");
        assert_eq!(paths.len(), 2 * rounds.len());
        for (round, cc) in paths.chunks(2).zip(&rounds) {
            assert!(
                round.iter().all(|p| p["congestion"] == cc.as_str()),
                "{cc}: {round:?}"
            );
            // Max-min: three connections over one 50 Mbit/s link, 16.7 each; h1 has two.
            let fair: Vec<f64> = round
                .iter()
                .map(|p| p["fair_share_bps"].as_f64().expect("fair share"))
                .collect();
            assert!((fair[0] - 50e6 * 2.0 / 3.0).abs() < 1.0, "{fair:?}");
            assert!((fair[1] - 50e6 / 3.0).abs() < 1.0, "{fair:?}");
            assert_eq!(round[0]["connections"], 2);
            let each = round[0]["connection_bps"]
                .as_array()
                .expect("per connection");
            assert_eq!(each.len(), 2);
            let total: f64 = round
                .iter()
                .map(|p| p["measured_bps"].as_f64().expect("rate"))
                .sum();
            // Together they fill the one bottleneck, as one flow would.
            assert!((45e6..=51e6).contains(&total), "{cc}: {total}: {round:?}");
            // Rates are not judged when pairs share links.
            for p in round {
                assert_eq!(p["deviations"].as_array().map(Vec::len), Some(0), "{p}");
                assert!(p["rate_bounds_bps"].is_null(), "{p}");
            }
        }
        // Over two pairs the index lies in 0.5 … 1; under cubic 0.8 means neither got less
        // than about half its fair share relative to the other. (bbr's is shown, not judged:
        // whether it starves a flow is what a user runs this to find out.)
        let jain = doc["jain_index_by_congestion"]["cubic"]
            .as_f64()
            .expect("Jain's index under cubic");
        assert!((0.8..=1.0).contains(&jain), "{jain}");
        assert_eq!(doc["jain_index"].as_f64(), Some(jain));
        for cc in &rounds {
            assert!(doc["jain_index_by_congestion"][cc].is_f64(), "{cc}: {doc}");
        }
        // A router pair: r1 to r2 across the wan itself, with the congestion control chosen.
        let (doc, _) = check(&[path, "--pairs", "r1-r2", "-t", "2", "-C", "reno"]);
        let p = &doc["paths"][0];
        assert_eq!(p["congestion"], "reno");
        assert_eq!(p["implied_bps"], 50_000_000);
        let bps = p["measured_bps"].as_f64().expect("rate");
        assert!((45e6..=51e6).contains(&bps), "{p}");
        assert!(namespaces_of("tnet4").is_empty());
    }
}

/// `net set` changes a link while a test crosses it: within an interval of the change
/// the test's rate falls to the new rate and its round trips rise to the new delay;
/// the sending end's tbf is changed in place (the same qdisc, its counters going on, no
/// drop at the change), and the test goes on to its end. Under cubic and bbr, whose
/// queues differ. Then what the change cannot do is refused, naming the link and why,
/// with nothing changed.
#[test]
fn a_link_changed_while_a_test_crosses_it_takes_effect_within_an_interval() {
    let Some(_serial) = root_and_serial() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    // A queue of 100 packets (24 ms at 50 Mbit/s): the RTT before the change stays well
    // under the 80 ms after it, whatever the congestion control keeps queued.
    let text = "name = \"tnset\"\nhosts = [\"a\", \"b\"]\n[[link]]\nname = \"wan\"\nends = [\"a\", \"b\"]\nrate = \"50M\"\ndelay = \"10ms\"\nqueue = 100\n";
    let file = write_topology(dir.path(), "tnset", text);
    let _guard = Down::new("tnset");
    let set = |values: &[&str]| {
        flowlab()
            .args(["net", "set", "-t", "tnset", "wan"])
            .args(values)
            .output()
            .expect("net set")
    };
    // The sending end's root qdisc (b sends: the test is a download to a): its handle
    // and what it counted.
    let tbf = || -> (String, u64, u64) {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                "fl-tnset-b",
                "tc",
                "-s",
                "-j",
                "qdisc",
                "show",
                "dev",
                "l0",
            ])
            .output()
            .expect("tc");
        let all: serde_json::Value = serde_json::from_slice(&out.stdout).expect("tc -j");
        let q = all
            .as_array()
            .and_then(|a| a.iter().find(|q| q["kind"] == "tbf"))
            .unwrap_or_else(|| panic!("no tbf on b's l0: {all}"));
        (
            q["handle"].as_str().expect("handle").to_string(),
            q["packets"].as_u64().expect("packets"),
            q["drops"].as_u64().expect("drops"),
        )
    };
    for cc in ["cubic", "bbr"] {
        up(&file, &[]);
        let mut server = serve_in("tnset", "b", &["-1"]);
        let client = flowlab()
            .args(["net", "exec", "-t", "tnset", "a", "--"])
            .arg(assert_cmd::cargo::cargo_bin("flowlab"))
            .args([
                "test", "b", "-J", "-t", "3", "-i", "0.5", "--trace", "-C", cc, "-R",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("test from a");
        let started = std::time::Instant::now();
        std::thread::sleep(Duration::from_millis(1500));
        let before = tbf();
        let changed_at = started.elapsed().as_secs_f64();
        let out = set(&["rate=10M", "delay=40ms"]);
        let after = tbf();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "topology tnset, link wan changed:\n  a → b: 10.0 Mbits/sec, delay 40 ms, queue 100 packets (was 50.0 Mbits/sec, delay 10 ms, queue 100 packets)\n  b → a: 10.0 Mbits/sec, delay 40 ms, queue 100 packets (was 50.0 Mbits/sec, delay 10 ms, queue 100 packets)\n"
        );
        assert_eq!(before.0, after.0, "{cc}: the same tbf, changed in place");
        assert!(
            after.1 >= before.1,
            "{cc}: its counters went on: {before:?} {after:?}"
        );
        assert_eq!(before.2, after.2, "{cc}: a drop at the change");
        let out = client.wait_with_output().expect("the test");
        let _ = server.kill();
        let _ = server.wait();
        assert!(
            out.status.success(),
            "{cc}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        // The change, on the test's clock: it started at most this much after `started`
        // (the exec and its connection), and the intervals count from its start.
        seen_within_an_interval(&v, changed_at, 0.3, cc);
        let out = flowlab()
            .args(["net", "down", "tnset"])
            .output()
            .expect("down");
        assert!(out.status.success());
    }
    // Refused, nothing changed: an emulation the link was not built with, a key the
    // file does not know, a link it does not have.
    let plain = write_topology(
        dir.path(),
        "tnset",
        "name = \"tnset\"\nhosts = [\"a\", \"b\"]\n[[link]]\nname = \"wan\"\nends = [\"a\", \"b\"]\nrate = \"50M\"\n",
    );
    up(&plain, &[]);
    for (values, says) in [
        (
            &["delay=5ms"][..],
            "link wan was brought up without delay, jitter or loss",
        ),
        (&["speed=5M"], "wan: 'speed' is not a link property"),
    ] {
        let out = set(values);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says),
            "{values:?}: {err}"
        );
    }
    let out = flowlab()
        .args(["net", "set", "-t", "tnset", "lan", "rate=1M"])
        .output()
        .expect("net set");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("topology tnset has no link 'lan' (it has: wan)"),
        "{err}"
    );
    let status = flowlab()
        .args(["net", "show", "tnset"])
        .output()
        .expect("show");
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("50.0 Mbits/sec"),
        "unchanged"
    );
}

/// A link that changes on its schedule (`[[link.schedule]]`) changes at its time from `net
/// up`: a traced test crossing it sees the new rate and round trip within an interval of
/// the time the schedule's log gives, under cubic and bbr. `net status` names the
/// schedule's process and its last change, and `down` stops it.
#[test]
fn a_scheduled_change_is_seen_by_a_test_within_an_interval_of_its_time() {
    let Some(_serial) = root_and_serial() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let text = "name = \"tsch\"\nhosts = [\"a\", \"b\"]\n[[link]]\nname = \"wan\"\nends = [\"a\", \"b\"]\nrate = \"50M\"\ndelay = \"10ms\"\nqueue = 100\n\
                [[link.schedule]]\nat = \"2.5s\"\nrate = \"10M\"\ndelay = \"40ms\"\n";
    let file = write_topology(dir.path(), "tsch", text);
    let _guard = Down::new("tsch");
    let schedulers = || -> Vec<String> {
        std::fs::read_dir("/proc")
            .expect("/proc")
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
            .filter(|line| line.contains("net _schedule") && line.trim_end().ends_with(" tsch"))
            .collect()
    };
    for cc in ["cubic", "bbr"] {
        up(&file, &[]);
        if schedulers().len() != 1 {
            let log =
                std::fs::read_to_string(flowlab_net::build::state_dir().join("tsch.schedule.log"));
            let status = flowlab()
                .args(["net", "status", "tsch"])
                .output()
                .expect("status");
            panic!(
                "{cc}: its schedule does not run ({} processes); its log: {log:?}; net status: {}",
                schedulers().len(),
                String::from_utf8_lossy(&status.stdout)
            );
        }
        let mut server = serve_in("tsch", "b", &["-1"]);
        let spawned = chrono::Utc::now();
        let client = flowlab()
            .args(["net", "exec", "-t", "tsch", "a", "--"])
            .arg(assert_cmd::cargo::cargo_bin("flowlab"))
            .args([
                "test", "b", "-J", "-t", "4", "-i", "0.5", "--trace", "-C", cc, "-R",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("test from a");
        let out = client.wait_with_output().expect("the test");
        let _ = server.kill();
        let _ = server.wait();
        assert!(
            out.status.success(),
            "{cc}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let status = flowlab()
            .args(["net", "status", "tsch"])
            .output()
            .expect("status");
        let status = String::from_utf8_lossy(&status.stdout).into_owned();
        // Its one change made, it ended.
        assert!(
            status.contains("  schedule: done (") && status.ends_with("wan: rate=10M delay=40ms\n"),
            "{status}"
        );
        // When the schedule made its change, by its log's clock.
        let changed_at = logged_at("tsch", "wan: rate=10M delay=40ms", spawned);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        seen_within_an_interval(&v, changed_at, 0.3, cc);
        let out = flowlab()
            .args(["net", "down", "tsch"])
            .output()
            .expect("down");
        assert!(out.status.success());
        assert!(schedulers().is_empty(), "{cc}: down stops the schedule");
    }
}

/// A link whose capacity follows a trace (mahimahi's format, replayed by the user-space
/// emulator): a steady trace of one 1500-byte opportunity a millisecond carries a TCP
/// download at its payload capacity, 1448 of each 1500 bytes (12 Mbit/s × 1448/1500),
/// within 5 %; a trace with a second of no opportunity every two stalls the transfer
/// for an interval. Under cubic and bbr.
#[test]
fn a_trace_driven_link_delivers_the_traces_capacity_and_its_outages() {
    let Some(_serial) = root_and_serial() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let steady: String = (1..=1000).map(|ms| format!("{ms}\n")).collect();
    let outage = format!("{steady}2000\n");
    std::fs::write(dir.path().join("steady.trace"), steady).expect("trace");
    std::fs::write(dir.path().join("outage.trace"), outage).expect("trace");
    let _guards = (Down::new("ttrs"), Down::new("ttro"));
    let test = |topo: &str, cc: &str, args: &[&str]| -> serde_json::Value {
        let args: Vec<&str> = ["-C", cc].iter().chain(args).copied().collect();
        test_across(topo, "a", "b", &args)
    };
    for (topo, trace) in [("ttrs", "steady.trace"), ("ttro", "outage.trace")] {
        let text = format!(
            "name = \"{topo}\"\nhosts = [\"a\", \"b\"]\n[[link]]\nname = \"air\"\nends = [\"a\", \"b\"]\ntrace = \"{trace}\"\ndelay = \"10ms\"\nqueue = 100\n"
        );
        let file = write_topology(dir.path(), topo, &text);
        up(&file, &[]);
        let shown = flowlab()
            .args(["net", "show", topo])
            .output()
            .expect("show");
        assert!(
            String::from_utf8_lossy(&shown.stdout).contains(&format!(
                "link air a -> b: trace {trace} (mean {})",
                if topo == "ttrs" {
                    "12.0 Mbits/sec"
                } else {
                    "6.01 Mbits/sec"
                }
            )),
            "{}",
            String::from_utf8_lossy(&shown.stdout)
        );
        for cc in ["cubic", "bbr"] {
            if topo == "ttrs" {
                let v = test(topo, cc, &["-t", "4", "-O", "1"]);
                let rate = v["end"]["sums"][0]["receiver"]["bits_per_second"]
                    .as_f64()
                    .expect("received rate");
                let capacity = 12e6 * 1448.0 / 1500.0;
                assert!(
                    (rate - capacity).abs() <= 0.05 * capacity,
                    "{cc}: {rate:.0} bit/s against a payload capacity of {capacity:.0}"
                );
            } else {
                let v = test(topo, cc, &["-t", "3", "-i", "0.25"]);
                let rates: Vec<f64> = v["intervals"]
                    .as_array()
                    .expect("intervals")
                    .iter()
                    .map(|i| i["sums"][0]["bits_per_second"].as_f64().expect("rate"))
                    .collect();
                // A quarter second inside an outage carries nothing; one outside carries
                // most of the capacity.
                assert!(rates.iter().any(|&r| r < 0.05 * 12e6), "{cc}: {rates:?}");
                assert!(rates.iter().any(|&r| r > 0.8 * 11.58e6), "{cc}: {rates:?}");
            }
        }
        // The emulator counts the opportunities that went unused: by the thousand on the
        // way of the acknowledgements, which find nothing waiting behind them.
        let status = flowlab()
            .args(["net", "status", topo])
            .output()
            .expect("status");
        let status = String::from_utf8_lossy(&status.stdout).into_owned();
        let unused: Vec<u64> = status
            .lines()
            .filter_map(|l| {
                let (head, _) = l.split_once(" trace opportunities unused")?;
                head.rsplit(' ').next()?.parse().ok()
            })
            .collect();
        assert_eq!(unused.len(), 2, "both ways follow the trace: {status}");
        assert!(unused[1] > 1000, "b→a: {status}");
        let down = flowlab()
            .args(["net", "down", topo])
            .output()
            .expect("down");
        assert!(down.status.success());
    }
}

/// A trace's queue under CoDel keeps a TCP flow's queueing delay near its target where
/// a drop-tail queue of the same 1000 packets would hold a second of it, and the link's
/// log (`net up --link-logs`) says so in mahimahi's format, which `flowlab plot
/// --link-log` draws.
#[test]
fn a_traces_codel_queue_keeps_the_wait_short_and_its_log_says_so() {
    let Some(_serial) = root_and_serial() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let steady: String = (1..=1000).map(|ms| format!("{ms}\n")).collect();
    std::fs::write(dir.path().join("steady.trace"), steady).expect("trace");
    let _guard = Down::new("ttrc");
    let text = "name = \"ttrc\"\nhosts = [\"a\", \"b\"]\n[[link]]\nname = \"air\"\nends = [\"a\", \"b\"]\ntrace = \"steady.trace\"\ndelay = \"10ms\"\nqueue = 1000\nqueue_policy = \"codel\"\n";
    let file = write_topology(dir.path(), "ttrc", text);
    let logs = dir.path().join("logs");
    std::fs::create_dir(&logs).expect("logs dir");
    up(&file, &["--link-logs", logs.to_str().expect("utf-8")]);
    let shown = flowlab()
        .args(["net", "show", "ttrc"])
        .output()
        .expect("show");
    assert!(
        String::from_utf8_lossy(&shown.stdout)
            .contains("queue 1000 packets, CoDel (target 5 ms, interval 100 ms)"),
        "{}",
        String::from_utf8_lossy(&shown.stdout)
    );
    let v = test_across("ttrc", "a", "b", &["-C", "cubic", "-t", "6"]);
    let rate = v["end"]["sums"][0]["receiver"]["bits_per_second"]
        .as_f64()
        .expect("received rate");
    // The emulator writes its logs once a second.
    std::thread::sleep(Duration::from_millis(1200));
    let status = flowlab()
        .args(["net", "status", "ttrc"])
        .output()
        .expect("status");
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    let down = flowlab()
        .args(["net", "down", "ttrc"])
        .output()
        .expect("down");
    assert!(down.status.success());
    let text = std::fs::read_to_string(logs.join("air.a-b.log")).expect("a → b's log");
    assert!(
        text.starts_with("# flowlab net emulator: link air a→b"),
        "{}",
        &text[..200.min(text.len())]
    );
    let log = flowlab_net::trace::LinkLog::parse(&text, 100).expect("mahimahi's format");
    // Slow start's first burst overshoots by design: CoDel lets a standing queue stand
    // for an interval (100 ms) before it drops, and TCP needs a round trip to answer,
    // so the first second's waits reach tens of ms. What CoDel promises is the steady
    // state: judged from the tenth interval on, over some 4 500 packets.
    let settled: Vec<f64> = log
        .delays
        .iter()
        .filter(|(left, _)| *left >= 1.0)
        .map(|(_, wait)| *wait)
        .collect();
    let p95 = percentile(&settled, 0.95);
    let first_max = log
        .delays
        .iter()
        .filter(|(left, _)| *left < 1.0)
        .map(|(_, wait)| *wait)
        .fold(0.0, f64::max);
    eprintln!(
        "CoDel: {rate:.0} bit/s received, log: capacity {:.0}, throughput {:.0}, \
         p95 wait {p95} ms after the first second ({} packets; whole run {} ms, \
         first second's longest {first_max} ms), {} drops",
        log.mean_capacity_bps,
        log.mean_throughput_bps,
        settled.len(),
        log.p95_delay_ms.unwrap_or(f64::NAN),
        log.drops
    );
    assert!(settled.len() >= 3000, "{} packets settled", settled.len());
    // CoDel's target is 5 ms: the wait stays within a few of it, the link busy.
    assert!(
        p95 <= 30.0,
        "95th percentile wait {p95} ms after the first second"
    );
    assert!(log.drops > 0, "CoDel dropped nothing: {status}");
    assert!(
        status.contains("dropped early by the queue's policy"),
        "{status}"
    );
    assert!(rate >= 0.85 * 12e6 * 1448.0 / 1500.0, "{rate:.0} bit/s");
    assert!(
        (log.mean_capacity_bps - 12e6).abs() <= 0.02 * 12e6,
        "{}",
        log.mean_capacity_bps
    );
    // And drawn as mahimahi's two graphs.
    let svg = dir.path().join("air.svg");
    let out = flowlab()
        .args(["plot", "--link-log"])
        .arg(logs.join("air.a-b.log"))
        .arg("-o")
        .arg(&svg)
        .output()
        .expect("plot");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let drawn = std::fs::read_to_string(&svg).expect("svg");
    assert!(
        drawn.contains("Per-packet queueing delay") && drawn.contains("air.a-b.log throughput")
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("95th percentile queueing delay"));
}

/// A test's intervals (its JSON): each one's start and end, seconds from the test's
/// start, and its rate, bit/s.
fn intervals_of(v: &serde_json::Value) -> Vec<(f64, f64, f64)> {
    v["intervals"]
        .as_array()
        .expect("intervals")
        .iter()
        .map(|i| {
            (
                i["start"].as_f64().expect("start"),
                i["end"].as_f64().expect("end"),
                i["sums"][0]["bits_per_second"].as_f64().expect("rate"),
            )
        })
        .collect()
}

/// When topology `topo`'s schedule logged the change that ends in `change`, by the log's
/// clock: seconds after `since`.
fn logged_at(topo: &str, change: &str, since: chrono::DateTime<chrono::Utc>) -> f64 {
    let log = std::fs::read_to_string(
        flowlab_net::build::state_dir().join(format!("{topo}.schedule.log")),
    )
    .expect("the schedule's log");
    let line = log
        .lines()
        .find(|l| l.ends_with(change))
        .unwrap_or_else(|| panic!("no '{change}' in the schedule's log: {log}"));
    let stamp = line.split_whitespace().next().expect("a timestamp");
    let at = chrono::DateTime::parse_from_rfc3339(stamp).expect("RFC 3339");
    (at.with_timezone(&chrono::Utc) - since)
        .to_std()
        .expect("logged after the test was started")
        .as_secs_f64()
}

/// A traced download's JSON `v` across link wan (50 Mbit/s, 10 ms each way, 100
/// packets) changed to 10 Mbit/s and 40 ms at `changed_at` s on the test's clock, or up
/// to `lead` s earlier (the test started at most that long after the moment its clock
/// was taken from): its intervals over 40 Mbit/s before the change and each under 10.5
/// Mbit/s from an interval after it, its round trips under 80 ms before and at least 80
/// ms an interval after.
fn seen_within_an_interval(v: &serde_json::Value, changed_at: f64, lead: f64, cc: &str) {
    let intervals = intervals_of(v);
    let seen = format!("{cc}: change at {changed_at:.2} s; intervals {intervals:?}");
    let before_change: Vec<f64> = intervals
        .iter()
        .filter(|(start, end, _)| *start >= 0.5 && *end <= changed_at - lead)
        .map(|i| i.2)
        .collect();
    let after_change: Vec<(f64, f64, f64)> = intervals
        .iter()
        .filter(|(start, _, _)| *start >= changed_at + 0.5)
        .copied()
        .collect();
    assert!(
        !before_change.is_empty() && !after_change.is_empty(),
        "{seen}"
    );
    assert!(before_change.iter().all(|&r| r > 40e6), "{seen}");
    // A download's intervals count what the receiver got (an upload's, what the sender
    // wrote, ran ahead of the link by what its socket buffer took in): from half a second
    // after the change, each at the new rate (10 Mbit/s of frames, 9.6 of payload).
    assert!(after_change.iter().all(|i| i.2 < 10.5e6), "{seen}");
    // Round trips: under 80 ms before the change, at least 80 ms an interval after.
    let samples = v["trace"]["streams"]
        .as_array()
        .expect("traced streams")
        .iter()
        .find(|s| s["sender"] == true)
        .expect("the sender's trace")["samples"]
        .as_array()
        .expect("samples")
        .iter()
        .map(|s| {
            (
                s["t_us"].as_f64().expect("t") / 1e6,
                s["srtt_us"].as_f64().expect("srtt") / 1e3,
            )
        })
        .collect::<Vec<_>>();
    assert!(
        samples
            .iter()
            .filter(|(t, _)| *t >= 0.5 && *t <= changed_at - lead)
            .all(|(_, ms)| *ms < 80.0),
        "{seen}: {samples:?}"
    );
    let late: Vec<f64> = samples
        .iter()
        .filter(|(t, _)| *t >= changed_at + 0.5)
        .map(|s| s.1)
        .collect();
    assert!(
        !late.is_empty() && late.iter().all(|&ms| ms >= 80.0),
        "{seen}: {samples:?}"
    );
}

/// UDP tests run at once, each `(client, server, port, args)` in topology `topo` with
/// `flowlab test SERVER -p PORT -J ARGS` from the client, a server on that port in the
/// server's node: their JSON documents, in order.
fn udp_at_once(topo: &str, runs: &[(&str, &str, u16, &[&str])]) -> Vec<serde_json::Value> {
    let mut servers: Vec<std::process::Child> = runs
        .iter()
        .map(|(_, to, port, _)| serve_at(topo, to, *port, &["-1"]))
        .collect();
    let clients: Vec<std::process::Child> = runs
        .iter()
        .map(|(from, to, port, args)| {
            flowlab()
                .args(["net", "exec", "-t", topo, from, "--"])
                .arg(assert_cmd::cargo::cargo_bin("flowlab"))
                .args(["test", to, "-p", &port.to_string(), "-J"])
                .args(*args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("client")
        })
        .collect();
    let docs = clients
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().expect("client output");
            assert!(
                out.status.success(),
                "{topo}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            serde_json::from_slice(&out.stdout).expect("JSON")
        })
        .collect();
    for s in &mut servers {
        let _ = s.kill();
        let _ = s.wait();
    }
    docs
}

/// The mean rate a receiving client measured over its one-second intervals but the first
/// two and the last, when every test started together is surely running (they start a
/// few tenths apart).
fn received_while_all_ran(v: &serde_json::Value) -> f64 {
    let intervals = v["intervals"].as_array().expect("intervals");
    assert!(intervals.len() >= 6, "too short a test: {intervals:?}");
    let rates: Vec<f64> = intervals[2..intervals.len() - 1]
        .iter()
        .map(|i| i["sums"][0]["bits_per_second"].as_f64().expect("rate"))
        .collect();
    rates.iter().sum::<f64>() / rates.len() as f64
}

/// Two busy 802.11b stations at 11 and 1 Mbit/s on one shared medium: each gets the share
/// Heusse et al.'s model gives (the fast one no more than the slow one), and with the
/// access point's airtime fairness each gets the same air time on the downlink (as
/// mac80211 charges it: its frames' PPDUs and a SIFS each), within 10 %.
#[test]
fn two_busy_stations_share_the_air_as_the_anomaly_model_and_airtime_fairness_say() {
    use flowlab_net::medium::{Preset, Rate, anomaly_model};
    let Some(_serial) = root_and_serial() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let _guards = (Down::new("tanom"), Down::new("tair"));
    let payload = 1472.0;
    let b = Preset::B;
    let (fast, slow) = (b.rate(11_000_000), b.rate(1_000_000));
    // UDP of 1472-byte datagrams: 1500-byte IP packets, of which the receiver counts
    // the payload.
    let udp = |ip_bps: f64| ip_bps * payload / 1500.0;
    for (topo, fairness) in [("tanom", "frames"), ("tair", "airtime")] {
        let text = format!(
            "name = \"{topo}\"\nhosts = [\"fast\", \"slow\", \"srv\"]\nrouters = [\"ap\"]\n\
             [[link]]\nends = [\"srv\", \"ap\"]\n\
             [[medium]]\nname = \"wlan\"\nap = \"ap\"\nstandard = \"802.11b\"\nfairness = \"{fairness}\"\nqueue = 30\n\
             [[medium.station]]\nhost = \"fast\"\nrate = \"11M\"\n\
             [[medium.station]]\nhost = \"slow\"\nrate = \"1M\"\n"
        );
        let file = write_topology(dir.path(), topo, &text);
        up(&file, &[]);
        let udp_args = |rate: &'static str, secs: &'static str| -> Vec<&'static str> {
            vec!["-u", "-b", rate, "-l", "1472", "-t", secs, "-R"]
        };
        if fairness == "frames" {
            // Both stations send to the server: each a receiving client there. Which
            // station wins the air is drawn frame by frame (each backoff at random), so a
            // station's share over a few hundred frames spreads by several per cent:
            // judged over 13 s, about 830 frames each.
            let (a, b_) = (udp_args("3M", "16"), udp_args("3M", "16"));
            let runs = udp_at_once(
                topo,
                &[("srv", "fast", 5201, &a), ("srv", "slow", 5201, &b_)],
            );
            let model = udp(anomaly_model(
                &b,
                &[Rate::dsss(11.0), Rate::dsss(1.0)],
                1500,
            ));
            for (who, v) in ["fast", "slow"].iter().zip(&runs) {
                let got = received_while_all_ran(v);
                eprintln!("{who}: {got:.0} bit/s, the anomaly model {model:.0}");
                assert!(
                    (got - model).abs() <= 0.10 * model,
                    "{who} sent {got:.0} bit/s; the anomaly model gives {model:.0}"
                );
            }
        } else {
            // The server sends to both stations, more than either can take.
            let (a, b_) = (udp_args("6M", "8"), udp_args("3M", "8"));
            let runs = udp_at_once(
                topo,
                &[("fast", "srv", 5201, &a), ("slow", "srv", 5202, &b_)],
            );
            let want = b.airtime_shares(&[fast, slow], 1500);
            let got: Vec<f64> = runs.iter().map(received_while_all_ran).collect();
            for (i, who) in ["fast", "slow"].iter().enumerate() {
                let w = udp(want[i]);
                eprintln!("{who}: {:.0} bit/s, equal air time {w:.0}", got[i]);
                assert!(
                    (got[i] - w).abs() <= 0.10 * w,
                    "{who} got {:.0} bit/s; equal air time gives {w:.0}",
                    got[i]
                );
            }
            // The air time each got a second: its frames' PPDUs and a SIFS.
            let air: Vec<f64> = [fast, slow]
                .iter()
                .zip(&got)
                .map(|(r, bps)| bps / (payload * 8.0) * (r.ppdu_ns(1534) + b.sifs_ns) as f64 / 1e9)
                .collect();
            assert!(
                (air[0] / air[1] - 1.0).abs() <= 0.10,
                "air time a second: fast {:.3} s, slow {:.3} s",
                air[0],
                air[1]
            );
        }
        // net status counts each station's time on the air, each way.
        let status = flowlab()
            .args(["net", "status", topo])
            .output()
            .expect("status");
        let status = String::from_utf8_lossy(&status.stdout).into_owned();
        assert_eq!(
            status.matches(" s on the air").count(),
            4,
            "two stations, two ways: {status}"
        );
        let down = flowlab()
            .args(["net", "down", topo])
            .output()
            .expect("down");
        assert!(down.status.success());
    }
}

/// Three busy 802.11g stations at 24 Mbit/s on a medium whose one host sends nothing:
/// between two of the emulator's snapshots a few seconds apart, `net status` counts the
/// packets they sent at the rate Bianchi's model of three saturated senders gives
/// (`Preset::busy_shares`; the medium's simulation follows it within 1.5 %, its unit
/// test), within 5 %, and the air their transmissions took at the air time of each
/// (its PPDU, a SIFS and the acknowledgement), within 1 %.
#[test]
fn net_status_counts_the_busy_stations_packets_and_air_at_the_models_rate() {
    use flowlab_net::build;
    use flowlab_net::medium::Preset;
    let Some(_serial) = root_and_serial() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let _guard = Down::new("tbsy");
    let text = "name = \"tbsy\"\nhosts = [\"sta\", \"srv\"]\nrouters = [\"ap\"]\n\
                [[link]]\nends = [\"srv\", \"ap\"]\n\
                [[medium]]\nname = \"wlan\"\nap = \"ap\"\nstandard = \"802.11g\"\n\
                busy_stations = 3\nbusy_rate = \"24M\"\n\
                [[medium.station]]\nhost = \"sta\"\nrate = \"54M\"\n";
    let file = write_topology(dir.path(), "tbsy", text);
    up(&file, &[]);
    // The busy stations' line of `net status` with the time its snapshot was written
    // (the stats file's, unchanged while status read it): (seconds, packets, bytes, air).
    let stats = build::stats_file(&build::state_dir(), "tbsy");
    let written = || std::fs::metadata(&stats).and_then(|m| m.modified()).ok();
    let snapshot = |after: Option<std::time::SystemTime>| {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            assert!(
                std::time::Instant::now() < deadline,
                "no new snapshot in 10 s"
            );
            let before = written();
            if before.is_none() || before == after {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            let out = flowlab()
                .args(["net", "status", "tbsy"])
                .output()
                .expect("status");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            if written() != before {
                continue;
            }
            let line = text
                .lines()
                .find(|l| l.starts_with("  medium wlan: 3 busy stations sent "))
                .unwrap_or_else(|| panic!("no busy stations' line: {text}"))
                .to_owned();
            let words: Vec<&str> = line.split_whitespace().collect();
            let number = |i: usize| words[i].parse::<f64>().expect(&line);
            // "medium wlan: 3 busy stations sent N packets of B bytes, S s on the air"
            return (before, number(6), number(9), number(11));
        }
    };
    let (t0, packets0, bytes, air0) = snapshot(None);
    assert_eq!(bytes, 1500.0);
    let mut later = snapshot(t0);
    for _ in 0..3 {
        later = snapshot(later.0);
    }
    let (t1, packets1, _, air1) = later;
    let seconds = t1
        .zip(t0)
        .and_then(|(a, b)| a.duration_since(b).ok())
        .expect("snapshot times")
        .as_secs_f64();
    let g = Preset::G;
    let r = g.rate(24_000_000);
    let each = g.busy_shares(&[r, r, r], 1500)[0];
    let model = 3.0 * each / 12_000.0;
    let got = (packets1 - packets0) / seconds;
    eprintln!("busy stations: {got:.0} packets/s over {seconds:.2} s, Bianchi's model {model:.0}");
    assert!(
        (got - model).abs() <= 0.05 * model,
        "{got:.0} packets/s over {seconds:.2} s; the model gives {model:.0}"
    );
    // Each transmission's air: the PPDU of a 1500-byte packet (with its MAC header and
    // FCS), a SIFS and the acknowledgement's PPDU at the basic rate.
    let per = (air1 - air0) / (packets1 - packets0);
    let want = (r.ppdu_ns(u64::from(1500 + g.mpdu_overhead)) + g.sifs_ns + g.ack_ns) as f64 / 1e9;
    assert!(
        (per - want).abs() <= 0.01 * want,
        "{:.1} µs of air a packet; an exchange takes {:.1} µs",
        per * 1e6,
        want * 1e6
    );
    let down = flowlab()
        .args(["net", "down", "tbsy"])
        .output()
        .expect("down");
    assert!(down.status.success());
}

/// `net check` across a shared medium (802.11g: a station at 54 Mbit/s, one at 6, a
/// server wired to the access point), under cubic and bbr. The path from the slow station
/// to the fast one crosses the air twice, relayed by the access point: its rate is held
/// from 90 % of the relayed flow's (the sender and the access point contending for every
/// transmission: `Preset::tcp_relayed_bps`) up to 102 % of its hops' rates with no
/// acknowledgement on the air, air times added; the server's path to the fast station,
/// one hop on the air, from 90 % of the station's TCP rate alone. Each path's TCP is
/// within its bounds, and so is every figure `net check` judges.
#[test]
fn a_path_relayed_across_a_medium_is_judged_within_its_floor_and_ceiling() {
    use flowlab_net::medium::Preset;
    let Some(_serial) = root_and_serial() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let _guard = Down::new("trel");
    let text = "name = \"trel\"\nhosts = [\"sta\", \"slow\", \"srv\"]\nrouters = [\"ap\"]\n\
                [[link]]\nends = [\"srv\", \"ap\"]\nrate = \"100M\"\n\
                [[medium]]\nname = \"wlan\"\nap = \"ap\"\nstandard = \"802.11g\"\nqueue = 100\n\
                [[medium.station]]\nhost = \"sta\"\nrate = \"54M\"\n\
                [[medium.station]]\nhost = \"slow\"\nrate = \"6M\"\n";
    let file = write_topology(dir.path(), "trel", text);
    up(&file, &[]);
    // What the medium's model gives each path, from the standard's timings alone.
    let g = Preset::G;
    let (fast, slow) = (g.rate(54_000_000), g.rate(6_000_000));
    let alone = |r| g.tcp_alone_bps(r, r, 1448).floor();
    let no_acks = |r| (g.alone_bps(r, 1500) * 1448.0 / 1500.0).floor();
    let added = |a: f64, b: f64| 1.0 / (1.0 / a + 1.0 / b);
    // (from, to): the rate `net show` gives, the floor and the ceiling.
    let model = [
        (
            ("slow", "sta"),
            added(alone(&slow), alone(&fast)),
            g.tcp_relayed_bps([&slow, &slow], [&fast, &fast], 1448)
                .floor(),
            added(no_acks(&slow), no_acks(&fast)),
        ),
        (("srv", "sta"), alone(&fast), alone(&fast), no_acks(&fast)),
    ];
    let near = |got: f64, want: f64| (got - want).abs() <= 2.0;
    for cc in ["cubic", "bbr"] {
        // A check during which the hypervisor took much of the CPU measures the host
        // (see portfolio_fidelity): taken again, once.
        for attempt in 1..=2 {
            let (doc, stderr) =
                check(&["trel", "--pairs", "slow-sta,srv-sta", "-t", "3", "-C", cc]);
            let paths = doc["paths"].as_array().expect("paths");
            assert_eq!(paths.len(), model.len(), "{stderr}");
            for (p, ((from, to), implied, floor, ceiling)) in paths.iter().zip(model) {
                assert_eq!(
                    (p["from"].as_str(), p["to"].as_str()),
                    (Some(from), Some(to))
                );
                assert_eq!(p["congestion"], cc);
                let bounds = p["rate_bounds_bps"].as_array().expect("rate bounds");
                let (low, high) = (
                    bounds[0].as_f64().expect("floor"),
                    bounds[1].as_f64().expect("ceiling"),
                );
                assert!(
                    near(p["implied_bps"].as_f64().expect("implied"), implied)
                        && near(low, 0.90 * floor)
                        && near(high, 1.02 * ceiling),
                    "{from}-{to}: implied {implied:.0}, floor {floor:.0}, ceiling \
                     {ceiling:.0}: {p}"
                );
            }
            let missed: Vec<&serde_json::Value> = paths
                .iter()
                .filter(|p| !p["deviations"].as_array().is_some_and(Vec::is_empty))
                .collect();
            if missed.is_empty() {
                break;
            }
            let stolen = most_stolen(&doc);
            assert!(
                attempt < 2 && stolen >= STOLEN,
                "{cc}: out of bounds (the hypervisor took up to {stolen:.0} % of the \
                 CPU): {missed:?}"
            );
            eprintln!("{cc}: a path missed its bounds with {stolen:.0} % stolen: checked again");
        }
    }
}

/// `net set` changes a station's PHY rate while a test crosses its hop of a shared
/// medium, and so does the station's schedule (`[[medium.station.schedule]]`): an
/// 802.11b station at 1 Mbit/s, sent more UDP than its air carries, receives what the
/// medium's model gives one station alone at that rate; from an interval after `net set
/// rate=11M`, what it gives at 11 Mbit/s; and from an interval after its schedule's step
/// back to 1 Mbit/s (at its log's time), the 1 Mbit/s figure again; each within 10 %.
/// `net set` says the station's rates and what TCP gets now, `net show` of the topology
/// has the new rate, and what a station's hop cannot take is refused with the reason.
#[test]
fn a_stations_rate_changed_live_takes_effect_within_an_interval() {
    use flowlab_net::medium::Preset;
    let Some(_serial) = root_and_serial() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let _guard = Down::new("tstat");
    let text = "name = \"tstat\"\nhosts = [\"sta\", \"srv\"]\nrouters = [\"ap\"]\n\
                [[link]]\nends = [\"srv\", \"ap\"]\n\
                [[medium]]\nname = \"wlan\"\nap = \"ap\"\nstandard = \"802.11b\"\nqueue = 30\n\
                [[medium.station]]\nhost = \"sta\"\nrate = \"1M\"\n\
                [[medium.station.schedule]]\nat = \"6s\"\nrate = \"1M\"\n";
    let file = write_topology(dir.path(), "tstat", text);
    up(&file, &[]);
    let set = |values: &[&str]| {
        flowlab()
            .args(["net", "set", "-t", "tstat", "wlan.sta"])
            .args(values)
            .output()
            .expect("net set")
    };
    let mut server = serve_in("tstat", "srv", &["-1"]);
    // The server sends: the access point's queue to the station fills, and the station
    // receives what the air carries.
    let spawned = chrono::Utc::now();
    let client = flowlab()
        .args(["net", "exec", "-t", "tstat", "sta", "--"])
        .arg(assert_cmd::cargo::cargo_bin("flowlab"))
        .args([
            "test", "srv", "-u", "-b", "10M", "-l", "1472", "-t", "8", "-i", "0.5", "-J", "-R",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("test from sta");
    let started = std::time::Instant::now();
    std::thread::sleep(Duration::from_millis(2500));
    let changed_at = started.elapsed().as_secs_f64();
    let out = set(&["rate=11M"]);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.starts_with(
            "topology tstat, link wlan.sta changed: station sta to access point ap, PHY rate up/down 11/11 Mbit/s (was 1/1 Mbit/s)\n  TCP alone up/down "
        ),
        "{said}"
    );
    // The topology as recorded has the new rate.
    let show = flowlab()
        .args(["net", "show", "tstat"])
        .output()
        .expect("show");
    let show = String::from_utf8_lossy(&show.stdout).into_owned();
    assert!(
        show.lines()
            .any(|l| l.trim_start().starts_with("sta ") && l.contains(" 11/11 Mbit/s ")),
        "{show}"
    );
    let out = client.wait_with_output().expect("the test");
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let intervals = intervals_of(&v);
    // The schedule's step, by its log's clock.
    let stepped_at = logged_at("tstat", "wlan.sta: rate=1M", spawned);
    let b = Preset::B;
    let udp = |mbit: u64| b.alone_bps(&b.rate(mbit * 1_000_000), 1500) * 1472.0 / 1500.0;
    let seen = format!(
        "set at {changed_at:.2} s, stepped at {stepped_at:.2} s; model {:.0} at 1 Mbit/s, {:.0} at 11; intervals {intervals:?}",
        udp(1),
        udp(11)
    );
    let near = |got: f64, model: f64| (got / model - 1.0).abs() <= 0.10;
    // Each window: from half a second after one change to 0.3 s before the next (the
    // test's clock starts after `started`, by its exec and connection).
    let within = |from: f64, to: f64| -> Vec<f64> {
        intervals
            .iter()
            .filter(|(start, end, _)| *start >= from && *end <= to)
            .map(|i| i.2)
            .collect()
    };
    let windows = [
        (within(0.5, changed_at - 0.3), udp(1)),
        (within(changed_at + 0.5, stepped_at - 0.3), udp(11)),
        (within(stepped_at + 0.5, f64::MAX), udp(1)),
    ];
    for (rates, model) in &windows {
        assert!(rates.len() >= 2, "{seen}");
        assert!(rates.iter().all(|&r| near(r, *model)), "{seen}");
    }
    // What a station's hop cannot take is refused, naming the link and the keys it
    // takes.
    let out = set(&["delay=5ms"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("wlan.sta: 'delay' is not a station's property (rate, down_rate)"),
        "{err}"
    );
}
