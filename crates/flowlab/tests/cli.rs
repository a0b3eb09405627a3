//! The `flowlab` binary end to end: usage errors, JSON output, and the README's quick run.

mod support;

use assert_cmd::Command;
use flowlab_engine::server::ServerConfig;

fn flowlab() -> Command {
    Command::cargo_bin("flowlab").expect("the flowlab binary")
}

/// `flowlab test 127.0.0.1 -p PORT ARGS…`, bounded in time.
fn flowlab_test(port: u16, args: &[&str]) -> std::process::Output {
    flowlab()
        .args(["test", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .timeout(std::time::Duration::from_secs(30))
        .output()
        .expect("run")
}

fn assert_success(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn invalid_flags_and_combinations() {
    support::usage_error(&["test"], "<HOST>");
    support::usage_error(&["test", "h", "--no-such-flag"], "--no-such-flag");
    support::usage_error(&["test", "h", "-t", "0"], "-t/--time");
    support::usage_error(&["test", "h", "-t", "ten"], "--time");
    support::usage_error(&["test", "h", "-t", "1", "-n", "1M"], "--bytes");
    support::usage_error(&["test", "h", "-R", "--bidir"], "--bidir");
    support::usage_error(&["test", "h", "-u", "-C", "cubic"], "-C/--congestion");
    support::usage_error(&["test", "h", "-u", "-l", "70000"], "-l/--length");
    support::usage_error(&["test", "h", "-P", "0"], "-P/--parallel");
    support::usage_error(&["test", "h", "-f", "x"], "--format");
    support::usage_error(&["test", "h", "-n", "12Q"], "--bytes");
    support::usage_error(&["test", "h", "--rto", "5"], "--rto");
    // The default value given explicitly is still a flag that does not apply.
    support::usage_error(&["test", "h", "--rto", "1000"], "--rto");
    support::usage_error(
        &["test", "h", "-u", "--stop-and-wait", "--rto", "0"],
        "--rto",
    );
    support::usage_error(&["test", "h", "--no-backoff"], "--no-backoff");
    support::usage_error(
        &["test", "h", "-u", "-b", "1G", "--no-backoff"],
        "--no-backoff",
    );
    support::usage_error(&["test", "h", "--no-window"], "--no-window");
    support::usage_error(
        &["test", "h", "-u", "--stop-and-wait", "--no-window"],
        "--no-window",
    );
    support::usage_error(&["test", "h", "--trace=0.5ms"], "--trace");
    support::usage_error(&["test", "h", "--trace=2s"], "--trace");
    support::usage_error(&["test", "h", "--trace=often"], "--trace");
    support::usage_error(&["test", "h", "-u", "--trace"], "--trace");
    support::usage_error(&["test", "h", "-u", "--trace-csv", "x.csv"], "--trace-csv");
    support::usage_error(&["test", "h", "--recv-window", "0"], "--recv-window");
    support::usage_error(
        &["test", "h", "-u", "--recv-congestion", "reno"],
        "--recv-congestion",
    );
    support::usage_error(&["plot", "r.json"], "--output");
    support::usage_error(&["plot", "r.json", "-o", "x.svg", "-g", "pie"], "--graph");
    support::usage_error(&["fetch", "--out", "d"], "--from");
    support::usage_error(
        &[
            "fetch", "--from", "a", "--from", "b", "--ratio", "1:2:3", "--out", "d",
        ],
        "--ratio",
    );
    support::usage_error(
        &[
            "fetch", "--from", "a", "--from", "b", "--ratio", "0:1", "--out", "d",
        ],
        "--ratio",
    );
    support::usage_error(
        &[
            "fetch",
            "--from",
            "a",
            "--from",
            "b",
            "--sweep-ratios",
            "1:1,x",
            "--out",
            "d",
        ],
        "--sweep-ratios",
    );
    support::usage_error(
        &["fetch", "--from", "a", "--repeat", "3", "--out", "d"],
        "--sweep-ratios",
    );
    support::usage_error(
        &[
            "fragments",
            "make",
            "--size",
            "1K",
            "--count",
            "0",
            "--out",
            "d",
        ],
        "--count",
    );
    support::usage_error(&["serve", "--rate", "1G"], "--fragments");
    support::usage_error(&["test", "h", "-i", "0.01"], "-i/--interval");
    support::usage_error(&["test", "h", "-J", "--json-stream"], "--json-stream");
    support::usage_error(&["test", "h", "-Z", "--stop-and-wait"], "-Z/--zerocopy");
    support::usage_error(&["serve", "--max-tests", "0"], "--max-tests");
    support::usage_error(&["serve", "-p", "70000"], "--port");
    support::usage_error(&["quick", "-t", "0"], "--time");
    // iperf3's options with their own rules.
    support::usage_error(
        &["test", "h", "-F", "no/such/file"],
        "-F no/such/file: No such file",
    );
    support::usage_error(
        &["test", "h", "-F", "Cargo.toml", "-u"],
        "-F Cargo.toml is TCP only",
    );
    support::usage_error(
        &["test", "h", "-F", "Cargo.toml", "-P", "2"],
        "-F Cargo.toml is one stream",
    );
    support::usage_error(
        &["test", "h", "-F", "Cargo.toml", "-t", "5"],
        "drop -t/-n/-k",
    );
    support::usage_error(&["test", "h", "-b", "10M/2000"], "--bitrate");
    support::usage_error(&["test", "h", "-b", "0/5"], "a burst needs a rate");
    support::usage_error(
        &["test", "h", "--cport", "65535", "-P", "2"],
        "--cport 65535",
    );
    support::usage_error(&["test", "h", "-B", "not-an-ip"], "-B/--bind not-an-ip");
    support::usage_error(
        &["test", "h%a", "--bind-dev", "b"],
        "two devices given (a, b)",
    );
    support::usage_error(
        &["test", "h", "--dont-fragment"],
        "--dont-fragment applies to UDP only",
    );
    support::usage_error(&["test", "h", "-u", "--snd-timeout", "5"], "--snd-timeout");
    support::usage_error(&["test", "h", "--rcv-timeout", "0"], "--rcv-timeout 0");
    support::usage_error(
        &["test", "h", "--cntl-ka=10/5/3"],
        "--cntl-ka: the idle time (10 s) must be longer than the probes take (5 s × 3)",
    );
    support::usage_error(
        &["test", "h", "--cntl-ka=x"],
        "'x' is not a number of seconds idle",
    );
    support::usage_error(
        &["test", "h", "--cntl-ka=1/2/3/4"],
        "more than IDLE/INTERVAL/COUNT",
    );
    support::usage_error(
        &["serve", "--cntl-ka=6/2/3"],
        "--cntl-ka: the idle time (6 s) must be longer than the probes take (2 s × 3)",
    );
    support::usage_error(
        &["test", "h", "-R", "-F", "f", "--skip-rx-copy"],
        "-F f -R writes what is received; drop --skip-rx-copy",
    );
}

/// `flowlab -v` names the commit it was built from: here, this checkout's HEAD (a
/// build outside a git checkout says so instead, as `build.rs` writes).
#[test]
fn the_version_names_the_commit_it_was_built_from() {
    let out = flowlab().arg("-v").output().expect("runs");
    assert_success(&out);
    let shown = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let head = std::process::Command::new("git")
        .args(["log", "-1", "--format=%h %cs", "--abbrev=12"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let expected = match head {
        Some(c) => format!("flowlab {} (commit {c})", env!("CARGO_PKG_VERSION")),
        None => format!(
            "flowlab {} (built outside a git checkout)",
            env!("CARGO_PKG_VERSION")
        ),
    };
    assert_eq!(shown, expected);
}

/// `net show --svg` draws the topology beside the plan it prints: every node, and each
/// link the file shapes labelled with its name and shape (no root needed).
#[test]
fn net_show_draws_the_topology_as_svg() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("port.svg");
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../topologies/portfolio.toml"
    );
    let run = flowlab()
        .args(["net", "show", file, "--svg"])
        .arg(&out)
        .output()
        .expect("runs");
    assert_success(&run);
    assert!(String::from_utf8_lossy(&run.stdout).contains("topology port: 9 hosts"));
    let svg = std::fs::read_to_string(&out).expect("the drawing");
    let text = |t: &str| svg.contains(&format!(">\n{t}\n</text>"));
    for node in ["h1", "h9", "r1", "r4", "s1", "s2"] {
        assert!(text(node), "{node} is not drawn");
    }
    for label in ["L1", "40.0 Mbits/sec", "delay 20 ms", "queue 16 packets"] {
        assert!(text(label), "{label} is not drawn");
    }
    // A link the file does not name is drawn with its shape alone, not "link N".
    assert!(
        !svg.contains(">\nlink "),
        "an unnamed link labelled by its number"
    );
    assert_eq!(svg.matches("<circle").count(), 9, "one circle a host");
    let refused = flowlab()
        .args(["net", "show", file, "--svg", "/nonexistent/dir/t.svg"])
        .output()
        .expect("runs");
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--svg /nonexistent/dir/t.svg"));
}

#[test]
fn json_output_is_one_versioned_document() {
    let port = support::start_server(ServerConfig::default());
    let out = flowlab_test(port, &["-n", "5M", "-J"]);
    assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(v["schema"], "flowlab.test/1");
    assert_eq!(v["end"]["sums"][0]["receiver"]["bytes"], 5 << 20);
    assert_eq!(v["start"]["peer"]["kind"], "flowlab");
    // Both machines' state is recorded with the result.
    assert!(v["start"]["system"]["kernel"].is_string(), "{}", v["start"]);
    assert!(v["start"]["peer"]["system"]["congestion_default"].is_string());
}

/// `--skip-rx-copy` and `--cntl-ka` as a user meets them: the result records both, and
/// the table says what the skipped copy does to the CPU figure.
#[test]
fn skip_rx_copy_and_cntl_ka_are_recorded_and_said() {
    let port = support::start_server(ServerConfig::default());
    let out = flowlab_test(
        port,
        &["-n", "5M", "-J", "--skip-rx-copy", "--cntl-ka=600/5/3"],
    );
    assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let spec = &v["start"]["spec"];
    assert_eq!(spec["skip_rx_copy"], true, "{spec}");
    assert_eq!(
        spec["control_keepalive"],
        serde_json::json!({"idle": 600, "interval": 5, "count": 3})
    );
    assert_eq!(v["end"]["sums"][0]["receiver"]["bytes"], 5 << 20);
    let out = flowlab_test(port, &["-n", "5M", "--skip-rx-copy"]);
    assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("--skip-rx-copy: receivers discard what they read (MSG_TRUNC)"),
        "{text}"
    );
}

/// `-R -F FILE` onto a disk that refuses the first write: the bytes received are
/// still reported, and the command fails naming the file (it exited 0 when not a byte
/// was written, as nothing had been counted either).
#[test]
fn a_receiving_file_that_cannot_be_written_fails_the_test() {
    let port = support::start_server(ServerConfig::default());
    let out = flowlab_test(port, &["-R", "-t", "1", "-F", "/dev/full", "-J"]);
    assert!(!out.status.success(), "exit 0 with nothing written");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("-F /dev/full") && err.contains("written"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the result");
    assert!(v["end"]["sums"][0]["receiver"]["bytes"].as_u64() > Some(0));
}

/// Sizes and rates as people write them: `-n 2MB` is SI (2 000 000 bytes), `-n 2MiB`
/// and `-n 2M` binary; `-b 40Mbit/s` and `-b 5MB/s` the same 40 Mbit/s; a size in bits
/// is refused with the forms that are accepted.
#[test]
fn units_as_people_write_them_end_to_end() {
    let port = support::start_server(ServerConfig::default());
    for (amount, bytes) in [("2MB", 2_000_000), ("2MiB", 2 << 20), ("2M", 2 << 20)] {
        let out = flowlab_test(port, &["-n", amount, "-J"]);
        assert_success(&out);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(
            v["end"]["sums"][0]["receiver"]["bytes"], bytes,
            "-n {amount}"
        );
    }
    for rate in ["40Mbit/s", "40Mbps", "5MB/s"] {
        let out = flowlab_test(port, &["-u", "-n", "100K", "-b", rate, "-J"]);
        assert_success(&out);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(v["start"]["spec"]["bitrate"], 40_000_000, "-b {rate}");
    }
    support::usage_error(
        &["test", "h", "-n", "10Mbit"],
        "a size in bytes: 1500, 64K or 64KiB",
    );
    support::usage_error(
        &["test", "h", "-b", "10MB"],
        "or bytes a second as 12.5MB/s",
    );
}

/// `-t 1.5` runs a second and a half and `-t 0.5` half a second (iperf3 3.12 truncates
/// the one to 1 s and makes the other endless); the time is in the result as asked.
#[test]
fn a_fractional_time_runs_that_long() {
    let port = support::start_server(ServerConfig::default());
    for (t, reverse) in [("1.5", false), ("0.5", false), ("500ms", true)] {
        let mut args = vec!["-t", t, "-J"];
        if reverse {
            args.push("-R");
        }
        let out = flowlab_test(port, &args);
        assert_success(&out);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let asked = v["start"]["spec"]["amount"]["seconds"]
            .as_f64()
            .expect("seconds");
        let ran = v["end"]["sums"][0]["sender"]["seconds"]
            .as_f64()
            .expect("seconds");
        let want = if t == "1.5" { 1.5 } else { 0.5 };
        assert_eq!(asked, want, "-t {t}");
        // Not a whole second more (the wire's own unit), not less than asked.
        assert!((want..want + 0.5).contains(&ran), "-t {t}: ran {ran} s");
    }
    support::usage_error(
        &["test", "h", "-t", "100000"],
        "-t/--time 100000: must be above 0",
    );
}

#[test]
fn sysinfo_describes_this_machine() {
    let out = flowlab()
        .args(["sysinfo", "--json"])
        .output()
        .expect("runs");
    assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let default = v["congestion_default"]
        .as_str()
        .expect("a default algorithm");
    // Read from the kernel, not from flowlab's own list.
    let kernel = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .expect("this Linux exposes its congestion control");
    assert_eq!(default, kernel.trim());
    let available = v["congestion_available"].as_array().expect("a list");
    assert!(
        available.iter().any(|a| a == "reno"),
        "reno is built into every kernel"
    );
    assert_eq!(v["tcp_rmem"].as_array().map(Vec::len), Some(3));
    assert!(
        v["interfaces"]
            .as_array()
            .is_some_and(|l| l.iter().any(|i| i["name"] == "lo" && i["mtu"] == 65536))
    );
    // lo's receive packet steering, as sysfs reads (absent on a kernel without RPS).
    let lo = v["interfaces"]
        .as_array()
        .and_then(|l| l.iter().find(|i| i["name"] == "lo"))
        .expect("lo");
    match std::fs::read_to_string("/sys/class/net/lo/queues/rx-0/rps_cpus") {
        Ok(mask) => assert_eq!(lo["rps_cpus"][0], mask.trim(), "{lo}"),
        Err(_) => assert!(lo.get("rps_cpus").is_none(), "{lo}"),
    }
    // How idle CPUs sleep, as sysfs reads; absent where it cannot be read.
    match std::fs::read_to_string(flowlab_proto::system::CPUIDLE_DRIVER_FILE) {
        Ok(driver) => assert_eq!(v["cpuidle_driver"], driver.trim(), "{v}"),
        Err(_) => assert!(v.get("cpuidle_driver").is_none(), "{v}"),
    }
    // The CPU latency request in force: there exactly when the device can be read here
    // (root only), and a latency the kernel can hold. (Machine-wide, so another process
    // may change it between the two reads: its value is not compared.)
    let readable = std::fs::File::open(flowlab_proto::system::CPU_LATENCY_DEVICE).is_ok();
    match v.get("cpu_latency_us") {
        Some(held) => {
            assert!(readable, "{v}");
            let held = held.as_i64().expect("an integer");
            assert!(
                (0..=flowlab_proto::system::NO_CPU_LATENCY_REQUEST).contains(&held),
                "{held}"
            );
        }
        None => assert!(!readable, "{v}"),
    }
    let text = flowlab().arg("sysinfo").output().expect("runs");
    assert_success(&text);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.lines().any(|l| l.starts_with("congestion control ")
            && l.contains(&format!("  {default} (available:"))),
        "{text}"
    );
    // Every line is a name, at least two spaces, and a value — even the longest name.
    for l in text.lines() {
        let (name, value) = l.split_once("  ").expect("name and value apart");
        assert!(!name.trim().is_empty() && !value.trim().is_empty(), "{l}");
    }
    assert!(
        text.contains("net.ipv4.tcp_slow_start_after_idle  "),
        "{text}"
    );
}

#[test]
fn json_stream_emits_events_as_lines() {
    let port = support::start_server(ServerConfig::default());
    let out = flowlab_test(
        port,
        &["-t", "1", "-i", "0.5", "-u", "-b", "10M", "--json-stream"],
    );
    assert_success(&out);
    let events: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).expect("a JSON line")["event"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    assert_eq!(events.first().map(String::as_str), Some("start"));
    assert_eq!(events.last().map(String::as_str), Some("end"));
    assert_eq!(
        events.iter().filter(|e| *e == "interval").count(),
        2,
        "{events:?}"
    );
}

#[test]
fn connection_errors_are_one_clear_line() {
    let port = support::free_port();
    let out = flowlab_test(port, &["-t", "1"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: cannot connect to 127.0.0.1:"),
        "{err}"
    );
    assert_eq!(
        err.matches("refused").count(),
        1,
        "cause printed once: {err}"
    );
}

/// The README's first command: a complete local measurement with no setup.
#[test]
fn quick_runs_tcp_and_udp_both_ways() {
    let out = flowlab()
        .args(["quick", "-t", "1"])
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for heading in [
        "TCP client → server",
        "TCP server → client",
        "UDP client → server",
        "UDP server → client",
    ] {
        assert!(text.contains(heading), "missing '{heading}' in:\n{text}");
    }
    let receiver_lines = text.lines().filter(|l| l.ends_with(" receiver"));
    assert_eq!(receiver_lines.count(), 4, "{text}");
    // Each test with its round trips, idle and loaded.
    assert_eq!(text.matches("RTT: idle median").count(), 4, "{text}");
    // The same as JSON: four results that moved data, the UDP ones without loss, each
    // with its latency probes answered.
    let out = flowlab()
        .args(["quick", "-t", "1", "-J"])
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .expect("run");
    let runs: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON array");
    let runs = runs.as_array().expect("array");
    assert_eq!(runs.len(), 4);
    for r in runs {
        let rcv = &r["end"]["sums"][0]["receiver"];
        assert!(rcv["bytes"].as_u64().is_some_and(|b| b > 0), "{rcv}");
        let loaded = &r["latency"]["loaded"];
        assert!(
            loaded["received"].as_u64().is_some_and(|n| n > 0),
            "{loaded}"
        );
        if r["start"]["spec"]["protocol"] == "udp" {
            assert_eq!(rcv["udp"]["lost"], 0, "{rcv}");
            assert_eq!(rcv["udp"]["integrity_percent"], 100.0, "{rcv}");
        }
    }
}

#[test]
fn trace_prints_a_diagnosis_and_writes_csv() {
    let port = support::start_server(ServerConfig::default());
    let dir = tempfile::tempdir().expect("temp dir");
    let csv = dir.path().join("trace.csv");
    let out = flowlab_test(
        port,
        &[
            "-t",
            "1",
            "--trace=20ms",
            "--recv-window",
            "4K",
            "--trace-csv",
            csv.to_str().expect("utf-8 path"),
        ],
    );
    assert_success(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Trace: every 20 ms"), "{stdout}");
    assert!(
        stdout.contains("What limited the sender (up): the receiver's window"),
        "{stdout}"
    );
    let text = std::fs::read_to_string(&csv).expect("the CSV was written");
    let mut lines = text.lines();
    let header = lines.next().expect("a header");
    assert!(
        header.starts_with("side,id,direction,sender,t_us,"),
        "{header}"
    );
    let rows: Vec<&str> = lines.collect();
    assert!(rows.iter().any(|r| r.starts_with("client,1,up,true,")));
    assert!(rows.iter().any(|r| r.starts_with("server,1,up,false,")));
    assert!(rows.len() >= 40, "{} rows", rows.len());
    // --json-stream: the trace is one more event, after `end`.
    let out = flowlab_test(port, &["-t", "1", "--trace=50ms", "--json-stream"]);
    assert_success(&out);
    let events: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).expect("a JSON line")["event"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    assert_eq!(events.first().map(String::as_str), Some("start"));
    assert_eq!(&events[events.len() - 2..], ["end", "trace"], "{events:?}");
}

#[test]
fn plot_draws_svg_and_png_from_results() {
    let port = support::start_server(ServerConfig::default());
    let dir = tempfile::tempdir().expect("temp dir");
    let result = dir.path().join("r.json");
    let out = flowlab_test(port, &["-t", "1", "-i", "0.25", "--trace=20ms", "-J"]);
    assert_success(&out);
    std::fs::write(&result, &out.stdout).expect("result saved");
    for (graph, file) in [("all", "all.svg"), ("window", "window.png")] {
        let path = dir.path().join(file);
        let out = flowlab()
            .args(["plot", "-g", graph, "-o"])
            .arg(&path)
            .arg(&result)
            .output()
            .expect("runs");
        assert_success(&out);
        let size = std::fs::metadata(&path).expect("written").len();
        assert!(size > 10_000, "{file}: {size} bytes");
    }
    // Graphs that need a trace say how to get one; bad output names are refused.
    let untraced = dir.path().join("u.json");
    let out = flowlab_test(port, &["-t", "1", "-i", "0.5", "-J"]);
    std::fs::write(&untraced, &out.stdout).expect("result saved");
    let out = flowlab()
        .args(["plot", "-g", "rtt", "-o"])
        .arg(dir.path().join("x.svg"))
        .arg(&untraced)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--trace"));
    let out = flowlab()
        .args(["plot", "-o", "x.gif"])
        .arg(&untraced)
        .output()
        .expect("runs");
    assert!(String::from_utf8_lossy(&out.stderr).contains(".svg or .png"));
}

/// `plot --capacity` draws a trace's capacity, alone or under a result's graphs; a bad
/// trace is refused with its file and line.
#[test]
fn plot_draws_a_traces_capacity_and_refuses_a_bad_trace_by_its_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let trace = dir.path().join("steady.trace");
    let steady: String = (1..=1000).map(|ms| format!("{ms}\n")).collect();
    std::fs::write(&trace, steady).expect("trace");
    let svg = dir.path().join("capacity.svg");
    let out = flowlab()
        .args(["plot", "-o"])
        .arg(&svg)
        .arg("--capacity")
        .arg(&trace)
        .output()
        .expect("runs");
    assert_success(&out);
    let drawn = std::fs::read_to_string(&svg).expect("written");
    assert!(
        drawn.contains("Capacity of the trace") && drawn.contains("steady.trace"),
        "title and legend"
    );
    assert!(
        drawn.contains("capacity (Mbits/sec)"),
        "12 Mbit/s in Mbit/s"
    );
    let bad = dir.path().join("bad.trace");
    std::fs::write(&bad, "1\n2\n1\n").expect("trace");
    let out = flowlab()
        .args(["plot", "-o"])
        .arg(&svg)
        .arg("--capacity")
        .arg(&bad)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.trace: line 3: 1 ms comes before the line above it (2 ms)"),
        "{err}"
    );
    // Neither a result nor a trace: nothing to draw.
    support::usage_error(&["plot", "-o", "x.svg"], "RESULT.json");
}

#[test]
fn fragments_make_serve_fetch_sweep_join_from_the_command_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path().join("src");
    let out = flowlab()
        .args([
            "fragments",
            "make",
            "--size",
            "2M",
            "--count",
            "16",
            "--out",
        ])
        .arg(&src)
        .output()
        .expect("runs");
    assert_success(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("16 fragments"));
    let service =
        flowlab_fragments::serve::FragmentService::open(&src, 0, std::time::Duration::from_secs(5))
            .expect("service");
    let port = support::start_server(ServerConfig {
        extra: Some(std::sync::Arc::new(service)),
        ..ServerConfig::default()
    });
    let from = format!("127.0.0.1:{port}");
    let fetched = dir.path().join("fetched");
    let out = flowlab()
        .args([
            "fetch", "--from", &from, "--from", &from, "--ratio", "1:3", "-J", "--out",
        ])
        .arg(&fetched)
        .output()
        .expect("runs");
    assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["schema"], "flowlab.fetch/1");
    assert_eq!(v["mode"], "1:3");
    assert_eq!(v["servers"][0]["fragments"], 4);
    assert_eq!(v["servers"][1]["fragments"], 12);
    let joined = dir.path().join("joined.bin");
    let out = flowlab()
        .args(["fragments", "join"])
        .arg(&fetched)
        .arg("--out")
        .arg(&joined)
        .output()
        .expect("runs");
    assert_success(&out);
    assert_eq!(std::fs::metadata(&joined).expect("joined").len(), 2 << 20);
    let chart = dir.path().join("sweep.svg");
    let out = flowlab()
        .args([
            "fetch",
            "--from",
            &from,
            "--from",
            &from,
            "--sweep-ratios",
            "1:3,1:1",
            "--repeat",
            "2",
            "--chart",
        ])
        .arg(&chart)
        .arg("--out")
        .arg(dir.path().join("sweep"))
        .output()
        .expect("runs");
    assert_success(&out);
    let table = String::from_utf8_lossy(&out.stdout);
    for row in ["1:3", "1:1", "adaptive", "run 2", "mean", "<- fastest"] {
        assert!(table.contains(row), "{row} missing in:\n{table}");
    }
    assert!(std::fs::metadata(&chart).expect("chart").len() > 5_000);
    // As JSON: one row per ratio and adaptive, each mean the average of its runs.
    let out = flowlab()
        .args([
            "fetch",
            "--from",
            &from,
            "--from",
            &from,
            "--sweep-ratios",
            "1:1",
            "--repeat",
            "2",
            "-J",
            "--out",
        ])
        .arg(dir.path().join("sweep"))
        .output()
        .expect("runs");
    assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["schema"], "flowlab.fetch-sweep/1");
    assert_eq!(v["repeat"], 2);
    let rows = v["rows"].as_array().expect("rows");
    let modes: Vec<&str> = rows.iter().filter_map(|r| r["mode"].as_str()).collect();
    assert_eq!(modes, ["1:1", "adaptive"]);
    for r in rows {
        let s: Vec<f64> = r["seconds"]
            .as_array()
            .expect("runs")
            .iter()
            .filter_map(|x| x.as_f64())
            .collect();
        assert_eq!(s.len(), 2);
        assert!(s.iter().all(|&x| x > 0.0));
        let mean = r["mean_seconds"].as_f64().expect("mean");
        assert!((mean - (s[0] + s[1]) / 2.0).abs() < 1e-9, "{r}");
    }
    assert!(
        !dir.path().join("sweep").join(".sweep-run").exists(),
        "scratch removed"
    );
}

/// The shipped multi-homed phone: `net show` names both of its addresses and what
/// MPTCP's path manager is set to, and its path takes the Wi-Fi, the one of least delay.
#[test]
fn net_show_says_a_host_is_multi_homed_and_how_mptcp_is_set() {
    let phone = concat!(env!("CARGO_MANIFEST_DIR"), "/../../topologies/phone.toml");
    let out = flowlab()
        .args(["net", "show", phone])
        .output()
        .expect("runs");
    assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    for line in [
        "  host phone is multi-homed (10.0.1.2, 10.0.2.2): each address's packets leave by its own link\n",
        "  MPTCP on every host: up to 2 more subflows a connection, 2 announced addresses taken; every address of phone an endpoint (subflow signal)\n",
        "phone - srv    RTT   24.0 ms    30.1 Mbits/sec  via phone ap core srv\n",
    ] {
        assert!(text.contains(line), "{line} missing in:\n{text}");
    }
}

#[test]
fn net_show_prints_the_plan_and_refuses_a_bad_file_in_one_line() {
    let portfolio = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../topologies/portfolio.toml"
    );
    let out = flowlab()
        .args(["net", "show", portfolio])
        .output()
        .expect("runs");
    assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    for line in [
        "topology port: 9 hosts, 4 routers, 2 switches, 14 links",
        "h1 - h4     RTT   60.0 ms    30.0 Mbits/sec",
        "h1 - h9     RTT   80.0 ms    20.0 Mbits/sec",
        "h7 - h9     RTT   60.0 ms    20.0 Mbits/sec",
    ] {
        assert!(text.contains(line), "{line} missing in:\n{text}");
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "name = \"x\"\nhosts = [\"h1\"]\n[[link]]\nends = [\"h1\", \"r9\"]\n",
    )
    .expect("write");
    // `net show` of the bad file: it fails (status 1); its stderr.
    let refused = || {
        let out = flowlab()
            .args(["net", "show"])
            .arg(&bad)
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(1));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let stderr = refused();
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("unknown node 'r9'"), "{stderr}");

    // Where the TOML itself is at fault: the file, line and column, then the line with a
    // caret under the place.
    std::fs::write(&bad, "name = \"x\"\nhosts = [\"h1\"]\n[[link]\n").expect("write");
    let stderr = refused();
    let lines: Vec<&str> = stderr.trim_end().lines().collect();
    assert_eq!(
        lines[1..],
        ["  |", "3 | [[link]", "  |        ^"],
        "{stderr}"
    );
    assert!(
        lines[0].starts_with("error: ")
            && lines[0].contains("bad.toml: line 3, column 8: unclosed array table"),
        "{stderr}"
    );
    // Neither a file nor a topology that is up: both are said, with where to look.
    let out = flowlab()
        .args(["net", "show", "no-such-topology"])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "no-such-topology: no such topology file, and no topology of that name is up \
             (flowlab net status lists them)"
        ),
        "{stderr}"
    );
}

/// Bare `flowlab` and `flowlab net` list their commands (as git and cargo do), with the
/// status of a usage error; `-v` is the version and `-V` verbose, as in iperf3.
#[test]
fn bare_commands_list_their_subcommands() {
    for (args, commands) in [
        (
            &[][..],
            &["serve", "test", "ping", "net", "run", "report"][..],
        ),
        (&["net"], &["show", "up", "down", "status", "check", "exec"]),
        (&["fragments"], &["split", "make", "join"]),
    ] {
        let out = flowlab().args(args).output().expect("runs");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("Commands:"), "{args:?}: {stderr}");
        for c in commands {
            assert!(
                stderr
                    .lines()
                    .any(|l| l.trim_start().starts_with(&format!("{c} "))),
                "{args:?}: {c} not listed in {stderr}"
            );
        }
    }
}

/// Habits from iperf3 and typos get the command to type: iperf3's first words, and
/// clap's "did you mean" kept in the one-line refusal.
#[test]
fn refusals_say_what_to_type_instead() {
    let out = flowlab().args(["-s"]).output().expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("type `flowlab serve`"), "{stderr}");
    let out = flowlab().args(["-c", "host"]).output().expect("runs");
    assert!(String::from_utf8_lossy(&out.stderr).contains("`flowlab test HOST`"));
    support::usage_error(
        &["test", "h", "--paralel", "2"],
        "tip: a similar argument exists: '--parallel'",
    );
    support::usage_error(&["tets"], "'test'");
}

/// Help is grouped by purpose, the basics first, and a command lists only the options
/// that apply to it: `plot` has no pid file or timestamps.
#[test]
fn help_is_grouped_and_lists_what_applies() {
    let help = |args: &[&str]| {
        let out = flowlab().args(args).arg("--help").output().expect("runs");
        assert_success(&out);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let test = help(&["test"]);
    let headings: Vec<&str> = test
        .lines()
        .filter(|l| !l.starts_with(' ') && l.ends_with(':'))
        .collect();
    assert_eq!(
        headings,
        [
            "Arguments:",
            "Options:",
            "Diagnosis:",
            "Load:",
            "UDP:",
            "TCP:",
            "Connection:",
            "Output:",
            "iperf3 compatibility:"
        ],
        "{test}"
    );
    // The first options are what a first test needs.
    let options: Vec<&str> = test
        .lines()
        .skip_while(|l| *l != "Options:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.trim_start().strip_prefix('-'))
        .map(|l| l.split_whitespace().next().unwrap_or(""))
        .collect();
    for basic in ["c,", "p,", "t,", "P,", "R,", "-bidir", "u,", "b,", "i,"] {
        assert!(options.contains(&basic), "{basic} not among {options:?}");
    }
    assert!(options.len() <= 13, "{options:?}");
    let output = test.split("\nOutput:\n").nth(1).expect("an Output heading");
    assert!(
        output.contains("--pidfile") && output.contains("--timestamps"),
        "{test}"
    );
    let serve = help(&["serve"]);
    assert!(serve.contains("\nServer limits:\n"), "{serve}");
    for command in [&["plot"][..], &["report"], &["sysinfo"], &["net", "up"]] {
        let text = help(command);
        for flag in ["--pidfile", "--timestamps", "--logfile", "--forceflush"] {
            assert!(!text.contains(flag), "{command:?} lists {flag}: {text}");
        }
    }
}

/// A missing argument is the one refusal of more than a line: what the command needs,
/// its usage, and where to read more (never clap's "not provided:; <FILE>").
#[test]
fn a_missing_argument_names_the_command_its_usage_and_help() {
    for (args, needs) in [
        (
            &["test"][..],
            "error: flowlab test needs <HOST|--client <HOST>>",
        ),
        (&["ping"], "error: flowlab ping needs <HOST>"),
        (&["net", "up"], "error: flowlab net up needs <FILE>"),
        (&["net", "down"], "error: flowlab net down needs <NAME>"),
        (
            &["fetch"],
            "error: flowlab fetch needs --from <HOST[:PORT]> and --out <DIR>",
        ),
    ] {
        let out = flowlab().args(args).output().expect("runs");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        let command = needs
            .trim_start_matches("error: ")
            .split(" needs")
            .next()
            .expect("a command");
        assert_eq!(
            lines,
            [
                needs,
                &format!("Usage: {}", &needs[needs.find("flowlab").expect("named")..])
                    .replacen(" needs", "", 1)
                    .replace(" and ", " "),
                &format!("For more, try '{command} --help'."),
            ],
            "{args:?}"
        );
    }
}

/// `-c HOST` is the same as HOST (iperf3's spelling), and `--trace 20ms` the same as
/// `--trace=20ms`.
#[test]
fn iperf3_spellings_of_the_server_and_of_an_optional_value() {
    let port = support::start_server(ServerConfig::default());
    let out = flowlab()
        .args(["test", "-c", "127.0.0.1", "-p", &port.to_string()])
        .args(["-t", "1", "--trace", "20ms", "-J"])
        .timeout(std::time::Duration::from_secs(30))
        .output()
        .expect("run");
    assert_success(&out);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc["start"]["spec"]["host"], "127.0.0.1");
    assert_eq!(doc["trace"]["period_us"], 20_000, "{}", doc["trace"]);
    support::usage_error(&["test", "h", "-c", "h"], "--client");
}

/// `-4`/`-6` (iperf3's): only the server's addresses of that family are tried, and a
/// server without one is refused by name and flag, before anything is sent.
#[test]
fn an_address_family_is_kept_to() {
    let port = support::start_server(ServerConfig::default());
    let out = flowlab_test(port, &["-4", "-t", "0.3", "-J"]);
    assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["start"]["spec"]["family"], "ipv4");
    let out = flowlab_test(port, &["-6", "-t", "0.3"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "error: '127.0.0.1' has no IPv6 address (-6)"
    );
    support::usage_error(&["test", "h", "-4", "-6"], "--version4");
    // ping and rpm keep to it too.
    let p = port.to_string();
    let out = flowlab()
        .args([
            "ping",
            "127.0.0.1",
            "-p",
            &p,
            "-4",
            "-c",
            "3",
            "-i",
            "0.01",
            "-J",
        ])
        .timeout(std::time::Duration::from_secs(20))
        .output()
        .expect("ping");
    assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["start"]["address"], format!("127.0.0.1:{p}"));
    for cmd in ["ping", "rpm"] {
        let out = flowlab()
            .args([cmd, "127.0.0.1", "-p", &p, "-6"])
            .timeout(std::time::Duration::from_secs(20))
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(1), "{cmd}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("'127.0.0.1' has no IPv6 address (-6)"),
            "{cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `-S`/`--dscp` set the type of service on the data sockets of both ends: read back
/// from the client's sockets and from the server's (its results), TCP both ways and UDP.
#[test]
fn the_type_of_service_is_set_on_both_ends() {
    let port = support::start_server(ServerConfig::default());
    for args in [
        &["-S", "0x28"][..],
        &["--dscp", "af11", "-R"],
        &["--tos", "40", "-u", "-b", "1M"],
    ] {
        let out = flowlab_test(port, &[args, &["-t", "0.3", "-J"]].concat());
        assert_success(&out);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(v["start"]["spec"]["tos"], 40, "{args:?}");
        assert_eq!(
            v["start"]["streams"][0]["tos"], 40,
            "{args:?}: the client's socket"
        );
        assert_eq!(
            v["end"]["streams"][0]["server_socket"]["tos"], 40,
            "{args:?}: the server's socket"
        );
    }
    support::usage_error(
        &["test", "h", "-S", "256"],
        "not a type of service 0 to 255",
    );
    support::usage_error(&["test", "h", "--dscp", "af51"], "not a DSCP");
    support::usage_error(&["test", "h", "-S", "1", "--dscp", "1"], "--dscp");
}

/// A server that cannot listen names the address and port it tried, and, when another
/// holds the port, what to do about it.
#[test]
fn a_bind_error_names_the_address_and_port() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let out = flowlab()
        .args(["serve", "-B", "127.0.0.1", "-p", &port.to_string()])
        .timeout(std::time::Duration::from_secs(10))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with(&format!(
            "error: cannot listen on 127.0.0.1:{port}, TCP and UDP (another server has that \
             port: stop it, or give this one another with -p): Address already in use"
        )),
        "{stderr}"
    );
}

/// A topology of `hosts` hosts on switches of 250, the switches joined by router `r`.
fn big_topology(dir: &std::path::Path, hosts: usize) -> std::path::PathBuf {
    use std::fmt::Write;
    let switches = hosts.div_ceil(250);
    let names = |p: &str, n: usize| {
        (1..=n)
            .map(|i| format!("\"{p}{i}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut text = format!(
        "name = \"big\"\nhosts = [{}]\nrouters = [\"r\"]\nswitches = [{}]\n",
        names("h", hosts),
        names("s", switches)
    );
    for h in 1..=hosts {
        let _ = writeln!(
            text,
            "[[link]]\nends = [\"h{h}\", \"s{}\"]",
            (h - 1) / 250 + 1
        );
    }
    for s in 1..=switches {
        let _ = writeln!(
            text,
            "[[link]]\nends = [\"s{s}\", \"r\"]\ndelay = \"{s}ms\""
        );
    }
    let file = dir.join("big.toml");
    std::fs::write(&file, text).expect("write the topology");
    file
}

/// Runs flowlab with `args`, killed if it has not finished within 30 s.
fn bounded(args: &[&std::ffi::OsStr]) -> std::process::Output {
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("flowlab"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start flowlab");
    let start = std::time::Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > std::time::Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("flowlab {args:?} had not returned after 30 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// 1000 hosts used to take forever (every pair's path computed before anything was
/// printed); now the plan lists no paths beyond 16 hosts and shows a pair's on demand.
#[test]
fn net_show_of_a_thousand_hosts_returns_and_shows_a_path_on_demand() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = big_topology(dir.path(), 1000);
    let f = file.as_os_str();
    let out = bounded(&["net".as_ref(), "show".as_ref(), f]);
    assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("topology big: 1000 hosts, 1 router, 4 switches, 1004 links"),
        "{text}"
    );
    assert!(
        text.contains("499500 pairs of hosts: too many to list"),
        "{text}"
    );
    let out = bounded(&[
        "net".as_ref(),
        "show".as_ref(),
        f,
        "h1".as_ref(),
        "h1000".as_ref(),
    ]);
    assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("h1 - h1000  RTT   10.0 ms") && text.contains("via h1 s1 r s4 h1000"),
        "{text}"
    );
    assert_eq!(text.matches(" RTT ").count(), 1, "one path: {text}");
    let out = bounded(&[
        "net".as_ref(),
        "show".as_ref(),
        f,
        "h1".as_ref(),
        "r".as_ref(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("'r' is not a host of topology big"),
        "{stderr}"
    );
    // Beyond the documented limit: refused at once, saying the limit.
    let file = big_topology(dir.path(), 2100);
    let out = bounded(&["net".as_ref(), "show".as_ref(), file.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("at most 2048"), "{stderr}");
}

/// The commands a `--help` lists under "Commands:" (`help` aside).
fn listed_commands(args: &[&str]) -> Vec<String> {
    let out = flowlab().args(args).arg("--help").output().expect("runs");
    assert_success(&out);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        // A wrapped description continues further in.
        .filter(|l| l.starts_with("  ") && !l.starts_with("    "))
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .filter(|c| c != "help")
        .collect()
}

/// Completion scripts come from the parser's own definitions: bash, sourced, completes
/// every command and subcommand from its prefix and a flag from its start; the other
/// shells' scripts name every command.
#[test]
fn completion_scripts_complete_every_command() {
    let top = listed_commands(&[]);
    assert!(
        top.len() >= 14 && top.contains(&"completions".to_string()),
        "{top:?}"
    );
    let net = listed_commands(&["net"]);
    assert!(net.contains(&"check".to_string()), "{net:?}");
    let script = |shell: &str| {
        let out = flowlab()
            .args(["completions", shell])
            .output()
            .expect("runs");
        assert_success(&out);
        String::from_utf8(out.stdout).expect("UTF-8")
    };
    // COMPREPLY for each (words so far, the word being completed).
    let mut cases: Vec<(String, String)> = top
        .iter()
        .map(|c| ("flowlab".to_string(), c.clone()))
        .chain(net.iter().map(|c| ("flowlab net".to_string(), c.clone())))
        .collect();
    cases.push(("flowlab test".into(), "--parallel".into()));
    let mut program = script("bash");
    for (before, word) in &cases {
        // Complete from all but the last character of the word.
        let prefix = &word[..word.len() - 1];
        let words = format!("{before} {prefix}");
        let n = words.split_whitespace().count() - 1;
        program += &format!(
            "\nCOMP_WORDS=({words}); COMP_CWORD={n}; COMPREPLY=(); \
             _flowlab flowlab {prefix} {}; echo \"{words} => ${{COMPREPLY[*]}}\"",
            before.split_whitespace().last().expect("a word")
        );
    }
    let out = std::process::Command::new("bash")
        .args(["-c", &program])
        .output()
        .expect("bash runs");
    let replies = String::from_utf8_lossy(&out.stdout);
    for (before, word) in &cases {
        let prefix = &word[..word.len() - 1];
        let line = replies
            .lines()
            .find(|l| l.starts_with(&format!("{before} {prefix} => ")))
            .unwrap_or_else(|| panic!("no reply for {before} {prefix}: {replies}"));
        assert!(
            line.split(" => ")
                .nth(1)
                .is_some_and(|r| r.split(' ').any(|w| w == word)),
            "{before} {prefix}<TAB> does not offer {word}: {line}"
        );
    }
    for shell in ["zsh", "fish"] {
        let text = script(shell);
        for c in top.iter().chain(&net) {
            assert!(text.contains(c.as_str()), "{shell}: {c} missing");
        }
    }
    let out = flowlab()
        .args(["completions", "tcsh"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
}

/// The manual pages come from the same definitions: one per command and subcommand,
/// each rendered by the system's nroff with its name, its one-line description and its
/// options; `flowlab man` prints the top page.
#[test]
fn man_pages_cover_every_command() {
    if !support::require_tool("nroff") {
        return;
    }
    let dir = tempfile::tempdir().expect("tmp");
    let out = flowlab()
        .args(["man", "--dir"])
        .arg(dir.path())
        .output()
        .expect("runs");
    assert_success(&out);
    let mut pages: Vec<String> = vec!["flowlab".into()];
    pages.extend(listed_commands(&[]).iter().map(|c| format!("flowlab-{c}")));
    pages.extend(
        listed_commands(&["net"])
            .iter()
            .map(|c| format!("flowlab-net-{c}")),
    );
    pages.extend(
        listed_commands(&["fragments"])
            .iter()
            .map(|c| format!("flowlab-fragments-{c}")),
    );
    for page in &pages {
        let file = dir.path().join(format!("{page}.1"));
        let out = std::process::Command::new("nroff")
            .args(["-man", "-Tutf8"])
            .arg(&file)
            .output()
            .unwrap_or_else(|e| panic!("nroff {}: {e}", file.display()));
        assert!(out.status.success(), "{page}");
        // nroff may hyphenate and embolden by overstriking; compare plain letters.
        let text = String::from_utf8_lossy(&out.stdout)
            .replace('\u{8}', "\u{0}")
            .replace("\u{2010}", "-")
            .replace("\u{2212}", "-");
        let plain: String = {
            let mut s = String::new();
            for c in text.chars() {
                if c == '\u{0}' {
                    s.pop();
                } else {
                    s.push(c);
                }
            }
            // Justified lines have runs of spaces.
            s.split_whitespace().collect::<Vec<_>>().join(" ")
        };
        assert!(
            plain.contains("NAME") && plain.contains(&format!("{page} - ")),
            "{page}:\n{plain}"
        );
        assert!(plain.contains("--help"), "{page}: no options:\n{plain}");
    }
    let test_page = std::fs::read_to_string(dir.path().join("flowlab-test.1")).expect("page");
    assert!(
        test_page.contains("\\-\\-parallel"),
        "flowlab-test.1 lacks -P"
    );
    let out = flowlab().arg("man").output().expect("runs");
    assert_success(&out);
    assert_eq!(
        out.stdout,
        std::fs::read(dir.path().join("flowlab.1")).expect("flowlab.1")
    );
}

/// The logs (`-VV`) are coloured on a terminal only, and not under `NO_COLOR`: a server
/// in a pseudo-terminal (`script`) logs a stray datagram.
#[test]
fn colour_only_on_a_terminal_and_never_under_no_color() {
    if !support::require_tool("script") {
        return;
    }
    let binary = assert_cmd::cargo::cargo_bin("flowlab");
    let logged = |terminal: bool, no_color: bool| {
        let port = support::free_port();
        let serve = format!(
            "timeout 2.5 {} -VV serve -B 127.0.0.1 -p {port}",
            binary.display()
        );
        let mut cmd = if terminal {
            let mut c = std::process::Command::new("script");
            c.args(["-qec", &serve, "/dev/null"]);
            c
        } else {
            let mut c = std::process::Command::new("sh");
            c.args(["-c", &format!("{serve} 2>&1")]);
            c
        };
        cmd.env_remove("NO_COLOR");
        if no_color {
            cmd.env("NO_COLOR", "1");
        }
        let child = cmd
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("starts");
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        for _ in 0..10 {
            std::thread::sleep(std::time::Duration::from_millis(150));
            let _ = udp.send_to(b"x", ("127.0.0.1", port));
        }
        let out = child.wait_with_output().expect("ends");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(text.contains("stray UDP datagram"), "{text}");
        text.contains('\u{1b}')
    };
    assert!(logged(true, false), "no colour on a terminal");
    assert!(!logged(true, true), "colour under NO_COLOR");
    assert!(!logged(false, false), "colour into a pipe");
}

/// `-w` past what the kernel grants without privilege (`net.core.wmem_max`/`rmem_max`,
/// whatever this host has them at): the test runs with what it got and says so, naming
/// what was granted; a window within them says nothing.
#[test]
fn a_window_the_kernel_cuts_short_is_told() {
    let cap = support::core_sysctl("rmem_max").max(support::core_sysctl("wmem_max"));
    let asked = cap + (1 << 20);
    if asked > flowlab_results::spec::MAX_WINDOW {
        // A -w past the cap would be refused as too large (the kernel takes an int).
        assert!(
            std::env::var_os("CI").is_none(),
            "CI's maxima are below 2 GiB"
        );
        support::skip("net.core.rmem_max/wmem_max within 1 MiB of 2 GiB");
        return;
    }
    let port = support::start_server(ServerConfig::default());
    let out = flowlab_test(port, &["-n", "1M", "-w", &asked.to_string(), "-J"]);
    assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let granted = v["start"]["streams"][0]["rcvbuf"].as_u64().expect("rcvbuf") / 2;
    assert_eq!(
        granted,
        support::core_sysctl("rmem_max"),
        "capped at rmem_max"
    );
    assert!(
        stderr.contains(&format!("-w {asked}: the kernel granted"))
            && stderr.contains(&format!("a receive buffer of {granted} bytes")),
        "{stderr}"
    );
    let out = flowlab_test(port, &["-n", "1M", "-w", "64K", "-J"]);
    assert_success(&out);
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("the kernel granted"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
