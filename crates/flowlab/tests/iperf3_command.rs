//! `flowlab iperf3 ARGS…` and the binary run under the name `iperf3`: iperf3's command
//! line, defaults and JSON, against stock iperf3 at the other end; and the options it
//! shares with every command (`-D`, `-I`, `--logfile`, `--timestamps`).

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

fn flowlab() -> Command {
    Command::new(assert_cmd::cargo::cargo_bin("flowlab"))
}

fn json_of(out: &std::process::Output) -> Value {
    assert!(out.status.success(), "{}", said(out));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not one JSON document ({e}): {}", said(out)))
}

/// iperf3's line, as an iperf3 user types it, against a stock `iperf3 -s`: iperf3's
/// UDP default rate (1 Mbit/s, where `flowlab test -u` is unlimited) and iperf3's JSON,
/// whose counts agree with the stock server's own.
#[test]
fn iperf3s_line_runs_with_iperf3s_defaults_against_a_stock_server() {
    if !require_tool("iperf3") {
        return;
    }
    let port = free_port();
    let server = Iperf3Server::start(port);
    let out = flowlab()
        .args(["iperf3", "-c", "127.0.0.1", "-p", &port.to_string()])
        .args(["-u", "-t", "2", "-l", "1000", "-J"])
        .output()
        .expect("flowlab runs");
    let ours = json_of(&out);
    let theirs = server.json();
    assert_eq!(ours["start"]["test_start"]["protocol"], "UDP", "{ours}");
    let rate = ours["end"]["sum_sent"]["bits_per_second"]
        .as_f64()
        .expect("rate");
    assert!(
        (0.9e6..1.1e6).contains(&rate),
        "iperf3's UDP default is 1 Mbit/s, sent {rate}"
    );
    let received = theirs["end"]["sum"]["packets"].as_u64().expect("packets");
    let sent = ours["end"]["sum_sent"]["packets"]
        .as_u64()
        .expect("packets");
    assert!(received > 0 && received <= sent, "{received} of {sent}");
}

/// iperf3 3.17's `--json-stream` (and 3.20's `--json-stream-full-output`) against a
/// stock server: one compact event a line — start, an interval a second, end — then the
/// whole document, whose parts the events are; the end's count is the server's own.
#[test]
fn iperf3s_json_stream_against_a_stock_server() {
    if !require_tool("iperf3") {
        return;
    }
    let port = free_port();
    let server = Iperf3Server::start(port);
    let out = flowlab()
        .args(["iperf3", "-c", "127.0.0.1", "-p", &port.to_string()])
        .args(["-t", "2", "--json-stream", "--json-stream-full-output"])
        .output()
        .expect("flowlab runs");
    assert!(out.status.success(), "{}", said(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    // The stream's lines, each one object, up to the document's opening brace.
    let (stream, document) = text
        .split_once("\n{\n")
        .expect("the document after the stream");
    let events: Vec<Value> = stream
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    let last = names.len() - 1;
    assert!(
        names[0] == "start"
            && names[last] == "end"
            && last >= 3
            && names[1..last].iter().all(|n| *n == "interval"),
        "{stream}"
    );
    let doc: Value = serde_json::from_str(&format!("{{\n{document}")).expect("the document");
    assert_eq!(events[0]["data"], doc["start"]);
    assert_eq!(events[last]["data"], doc["end"]);
    assert_eq!(
        events[last]["data"]["sum_received"]["bytes"],
        server.json()["end"]["sum_received"]["bytes"],
        "what the stock server received"
    );
}

/// A link named `iperf3` to flowlab is iperf3: `-s -1` serves a stock iperf3 client
/// one test and exits, `-c` tests against flowlab's own server, `-v` names flowlab.
#[test]
fn a_link_named_iperf3_takes_iperf3s_command_line() {
    if !require_tool("iperf3") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let link = dir.path().join("iperf3");
    std::os::unix::fs::symlink(assert_cmd::cargo::cargo_bin("flowlab"), &link).expect("link");
    let version = Command::new(&link).arg("-v").output().expect("runs");
    assert!(
        String::from_utf8_lossy(&version.stdout).starts_with("flowlab "),
        "{}",
        said(&version)
    );

    let port = free_port();
    let server = Command::new(&link)
        .args(["-s", "-1", "-J", "-p", &port.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve");
    let mut server = flowlab_server(server, port);
    let out = Command::new("iperf3")
        .args(["-c", "127.0.0.1", "-p", &port.to_string(), "-t", "1", "-J"])
        .output()
        .expect("iperf3 runs");
    let theirs: Value = serde_json::from_slice(&out.stdout).expect("iperf3 JSON");
    assert!(theirs.get("error").is_none(), "{theirs}");
    assert!(theirs["end"]["sum_received"]["bytes"].as_u64() > Some(0));
    let status = wait_for(&mut server.0, Duration::from_secs(10)).expect("-1: one test, then exit");
    assert!(status.success(), "{status}");
    // The server's `-J`: iperf3's shape, its count the one the client was told.
    let mut printed = String::new();
    std::io::Read::read_to_string(&mut server.0.stdout.take().expect("stdout"), &mut printed)
        .expect("read");
    let ours: Value = serde_json::from_str(&printed).expect("one JSON document");
    assert_eq!(
        ours["end"]["sum_received"]["bytes"], theirs["end"]["sum_received"]["bytes"],
        "{ours}"
    );
    assert_eq!(
        ours["start"]["accepted_connection"]["host"], "127.0.0.1",
        "{ours}"
    );
    assert_eq!(ours["start"]["test_start"]["protocol"], "TCP");

    let port = default_server();
    let out = Command::new(&link)
        .args([
            "-c",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-t",
            "1",
            "-R",
            "-J",
        ])
        .output()
        .expect("runs");
    let ours = json_of(&out);
    assert_eq!(ours["start"]["test_start"]["reverse"], 1, "{ours}");
    assert!(ours["end"]["sum_received"]["bytes"].as_u64() > Some(0));
}

/// `flowlab iperf3 -c` prints iperf3's own text: run beside a stock `iperf3 -c` against
/// a stock server, each case gives the same lines, the same fields in the same columns
/// (numbers aside), so that a line-oriented script reads both alike.
#[test]
fn iperf3s_text_is_printed_column_for_column() {
    if !require_tool("iperf3") {
        return;
    }
    for case in [
        &["-t", "2", "-P", "2"][..],
        // Two intervals: iperf3 heads a reverse test's only interval, printed after the
        // end, with the sender's columns ("Retr  Cwnd") its rows leave blank.
        &["-t", "2", "-R"],
        &["-t", "1", "--bidir"],
        &["-t", "1", "-u", "-b", "10M"],
        &["-t", "1", "-u", "-R", "-b", "10M"],
    ] {
        let run = |program: &mut Command| {
            let port = free_port();
            let _server = Iperf3Server::start(port);
            let out = program
                .args(["-c", "127.0.0.1", "-p", &port.to_string()])
                .args(case)
                .output()
                .expect("runs");
            assert!(out.status.success(), "{case:?}: {}", said(&out));
            String::from_utf8(out.stdout).expect("UTF-8")
        };
        let theirs = run(&mut Command::new("iperf3"));
        let ours = run(flowlab().arg("iperf3"));
        let (a, b) = (shape(&theirs), shape(&ours));
        assert_eq!(
            a, b,
            "{case:?}: iperf3's lines, then flowlab's:\n{theirs}\n{ours}"
        );
        // A classic: the receiver's rate is the 7th field (the 6th of a `[SUM]` row), its
        // unit the next.
        for text in [&theirs, &ours] {
            let receivers: Vec<Vec<&str>> = text
                .lines()
                .filter(|l| l.contains("receiver"))
                .map(|l| l.split_whitespace().collect())
                .collect();
            assert!(!receivers.is_empty(), "{text}");
            for f in receivers {
                let at = if f[0] == "[" { 6 } else { 5 };
                assert!(f[at].parse::<f64>().is_ok(), "{case:?}: {f:?}");
                assert!(f[at + 1].ends_with("bits/sec"), "{case:?}: {f:?}");
            }
        }
    }
}

/// `text`'s lines as a script sees them: each field with its numbers as `N` and its unit
/// without a prefix, and, on a row of figures, the column each field is aligned at up to
/// the bit rate (the fixed-width part of iperf3's rows). A run of like rows counts once: the
/// two ends need not print the same number of intervals.
fn shape(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for line in text.lines() {
        let mut fields = Vec::new();
        let mut column = 0;
        let mut fixed = line.starts_with('[');
        for piece in line.split_inclusive(char::is_whitespace) {
            let word = piece.trim_end();
            if !word.is_empty() {
                let mut kind = String::new();
                for c in word.chars() {
                    if c.is_ascii_digit() || c == '.' {
                        if !kind.ends_with('N') {
                            kind.push('N');
                        }
                    } else {
                        kind.push(c);
                    }
                }
                for prefix in ["KB", "MB", "GB", "TB", "Kb", "Mb", "Gb", "Tb"] {
                    if kind.starts_with(prefix) && kind.len() > 2 {
                        kind.remove(0);
                    }
                }
                if fixed && line.starts_with('[') && !line.starts_with("[ ID]") {
                    // A number is right-aligned in its column, a word left-aligned.
                    let at = if kind.starts_with('N') {
                        column + word.len()
                    } else {
                        column
                    };
                    kind = format!("{at}:{kind}");
                }
                fixed &= !word.ends_with("/sec");
                fields.push(kind);
            }
            column += piece.len();
        }
        let line = fields.join(" ");
        if lines.last() != Some(&line) {
            lines.push(line);
        }
    }
    lines
}

/// `-D -I FILE --logfile FILE`: the server detaches once listening, its id in the pid
/// file, its log lines (timestamped) in the log; SIGTERM stops it and removes the pid
/// file.
#[test]
fn a_daemon_leaves_its_pid_and_log_and_cleans_up_when_stopped() {
    if !require_tool("iperf3") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (pidfile, log) = (dir.path().join("s.pid"), dir.path().join("s.log"));
    let port = free_port();
    let started = flowlab()
        // iperf3's options before -s too, as iperf3 takes them (flowlab's own parse has
        // global options of these names).
        .args(["iperf3", "-I"])
        .arg(&pidfile)
        .arg("--logfile")
        .arg(&log)
        .args(["-s", "-D", "-B", "127.0.0.1", "-p", &port.to_string()])
        .arg("--timestamps=<%Y> ")
        .output()
        .expect("runs");
    assert!(started.status.success(), "{}", said(&started));
    // Written before the command returned (unlike iperf3's, which races its parent).
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .expect("pid file written")
        .trim()
        .parse()
        .expect("a pid");
    let daemon = Daemon(pid);
    assert!(alive(pid), "the daemon runs");
    await_listening(port, None, "the daemon");
    let out = Command::new("iperf3")
        .args(["-c", "127.0.0.1", "-p", &port.to_string(), "-t", "1"])
        .output()
        .expect("iperf3 runs");
    assert!(out.status.success(), "{}", said(&out));
    let year = format!("<{}> ", this_year());
    let deadline = Instant::now() + Duration::from_secs(5);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("test 1: done") || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(text.contains("test 1: done"), "{text}");
    for line in text.lines() {
        assert!(
            line.starts_with(&year),
            "{line:?} does not begin with {year:?}"
        );
    }
    drop(daemon);
    let deadline = Instant::now() + Duration::from_secs(5);
    while pidfile.exists() || alive(pid) {
        assert!(
            Instant::now() < deadline,
            "SIGTERM: pid file and process remain"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `-I FILE` naming a running process is refused, the file left to its owner; a leftover
/// naming no live process is replaced.
#[test]
fn a_pid_file_of_a_running_server_is_not_taken_over() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pidfile = dir.path().join("s.pid");
    let serve = |port: u16| {
        let mut c = flowlab();
        c.args(["serve", "-B", "127.0.0.1", "-p", &port.to_string(), "-I"])
            .arg(&pidfile);
        c
    };
    let port = free_port();
    let first = flowlab_server(serve(port).spawn().expect("spawns"), port);
    let first_pid = first.0.id().to_string();
    let held = || std::fs::read_to_string(&pidfile).unwrap_or_default();
    // A server writes its pid file once it listens, so a moment after the port shows.
    let holds = |pid: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while held().trim() != pid {
            assert!(
                Instant::now() < deadline,
                "{pid} never written: {:?}",
                held()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    holds(&first_pid);
    let mut second = Reaped(
        serve(free_port())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawns"),
    );
    let status = wait_for(&mut second.0, Duration::from_secs(10))
        .expect("a second server started on the first's pid file");
    assert!(!status.success());
    let mut err = String::new();
    std::io::Read::read_to_string(&mut second.0.stderr.take().expect("piped"), &mut err)
        .expect("stderr");
    assert!(
        err.contains(&pidfile.display().to_string()) && err.contains(&first_pid),
        "names neither the file nor its process: {err}"
    );
    assert_eq!(
        held().trim(),
        first_pid,
        "the first server's file was taken"
    );
    drop(first);
    // A leftover: the id of a process that has ended.
    let mut gone = std::process::Command::new("true").spawn().expect("true");
    gone.wait().expect("wait");
    std::fs::write(&pidfile, format!("{}\n", gone.id())).expect("write");
    let port = free_port();
    let third = flowlab_server(serve(port).spawn().expect("spawns"), port);
    holds(&third.0.id().to_string());
}

/// `--timestamps` begins every text line, never a JSON one; a format that is not
/// strftime's is refused by flag.
#[test]
fn timestamps_begin_text_lines_and_leave_json_alone() {
    let port = default_server();
    let out = flowlab()
        .args(["test", "127.0.0.1", "-p", &port.to_string(), "-t", "1"])
        .arg("--timestamps=%Y| ")
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", said(&out));
    let year = format!("{}| ", this_year());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().count() > 4, "{text}");
    for line in text.lines() {
        assert!(line.starts_with(&year), "{line:?}");
    }
    let out = flowlab()
        .args([
            "test",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-t",
            "1",
            "-J",
        ])
        .arg("--timestamps")
        .output()
        .expect("runs");
    json_of(&out);
    usage_error(
        &["test", "127.0.0.1", "--timestamps=%Q"],
        "--timestamps=%Q: not a strftime(3) format",
    );
}

/// What flowlab does not take is refused by iperf3's name for it, before anything runs.
#[test]
fn iperf3_options_flowlab_lacks_are_refused_by_name() {
    for (args, says) in [
        (
            &["-s", "--sctp"][..],
            "--sctp is a client option; drop it or -s",
        ),
        (&["-s", "-u"], "-u/--udp is a client option; drop it or -s"),
        (
            &["-c", "127.0.0.1", "--sctp"],
            "--sctp: flowlab does not measure SCTP",
        ),
        (&[], "give -s (serve) or -c HOST (test)"),
    ] {
        usage_error(&[&["iperf3"][..], args].concat(), says);
    }
}

/// The server child, waited for until it listens.
fn flowlab_server(child: std::process::Child, port: u16) -> Reaped {
    let mut child = Reaped(child);
    await_listening(port, Some(&mut child.0), "the server");
    child
}

fn wait_for(child: &mut std::process::Child, within: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().expect("wait") {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// A detached server, sent SIGTERM when dropped.
struct Daemon(i32);

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: kill(2) with a pid this test read from the daemon's pid file.
        unsafe {
            libc::kill(self.0, libc::SIGTERM);
        }
    }
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// This year, from date(1) (local time, as --timestamps prints it).
fn this_year() -> String {
    let out = Command::new("date").arg("+%Y").output().expect("date runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `flowlab iperf3 -s -B ADDRESS%DEV` (and `--bind-dev`): the server's sockets are bound to
/// the device and serve TCP and UDP there; a device that is not there is said by flag.
#[test]
fn a_server_bound_to_a_device_serves_there() {
    let port = free_port();
    let out = flowlab()
        .args([
            "iperf3",
            "-s",
            "-1",
            "-p",
            &port.to_string(),
            "--bind-dev",
            "nosuch0",
        ])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(said(&out).contains("--bind-dev nosuch0"), "{}", said(&out));
    if !is_root("binding to a device (CAP_NET_RAW)") {
        return;
    }
    for udp in [false, true] {
        let port = free_port();
        let server = flowlab()
            .args([
                "iperf3",
                "-s",
                "-1",
                "-p",
                &port.to_string(),
                "-B",
                "127.0.0.1%lo",
            ])
            .stdout(Stdio::null())
            .spawn()
            .expect("serve");
        let mut server = flowlab_server(server, port);
        let mut client = flowlab();
        client.args([
            "test",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-t",
            "0.5",
            "-J",
        ]);
        if udp {
            client.args(["-u", "-b", "10M"]);
        }
        let r = json_of(&client.output().expect("runs"));
        assert!(
            r["end"]["sums"][0]["receiver"]["bytes"].as_u64() > Some(0),
            "udp {udp}: {}",
            r["end"]
        );
        let status = wait_for(&mut server.0, Duration::from_secs(10)).expect("-1 exits");
        assert!(status.success(), "{status}");
    }
}

/// A server's `-A N` (iperf3's): every thread of the server runs on CPU N, those of a
/// test too; a CPU the machine does not give flowlab is refused by flag.
#[test]
fn a_servers_affinity_holds_for_all_its_threads() {
    let cpu = flowlab_engine::cpu::allowed_cpus()[0];
    let port = free_port();
    let server = flowlab()
        .args([
            "iperf3",
            "-s",
            "-1",
            "-A",
            &cpu.to_string(),
            "-p",
            &port.to_string(),
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("serve");
    let pid = server.id();
    let mut server = flowlab_server(server, port);
    let mut client = flowlab()
        .args([
            "test",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-t",
            "1",
            "-P",
            "2",
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("test");
    // The listeners and the test's threads, once the test runs.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut threads = 0;
    while threads < 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        threads = 0;
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks") {
            let status = std::fs::read_to_string(task.expect("task").path().join("status"))
                .unwrap_or_default();
            if let Some(list) = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            {
                assert_eq!(list.trim(), cpu.to_string(), "{status}");
                threads += 1;
            }
        }
    }
    assert!(
        threads >= 4,
        "the listeners and the test's streams: {threads} threads"
    );
    assert!(client.wait().expect("test").success());
    assert!(wait_for(&mut server.0, Duration::from_secs(10)).is_some_and(|s| s.success()));
    usage_error(&["serve", "-A", "100000"], "-A/--affinity 100000");
}
