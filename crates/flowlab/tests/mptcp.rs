//! `flowlab test -m` (MPTCP) on loopback: against `flowlab serve`, which takes MPTCP
//! always where the kernel makes it, both ways with exact totals and each connection's
//! subflows in the result and the server's log; against a plain TCP server, whose
//! fallback is said; with stock iperf3 made MPTCP by `mptcpize` (Debian's mptcpd) at
//! either end; and what an MPTCP socket refuses, refused before a test.

mod support;

use std::process::{Command, Stdio};

use serde_json::Value;
use support::{Reaped, await_listening, free_ports, ip, usage_error};

/// Whether this system makes MPTCP sockets; a test without them fails in CI (whose
/// kernel has MPTCP) and is skipped elsewhere, saying why.
fn mptcp() -> bool {
    // SAFETY: socket(2) and close(2) on a descriptor of this function's own.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_MPTCP) };
    if fd >= 0 {
        unsafe { libc::close(fd) };
        return true;
    }
    let why = "this system makes no MPTCP socket (a kernel without MPTCP, or \
               net.mptcp.enabled = 0)";
    assert!(std::env::var_os("CI").is_none(), "{why}: required in CI");
    support::skip(why);
    false
}

/// A client with two paths to the server: Wi-Fi-like (10.0.1.1 via r1) and LTE-like
/// (10.0.2.1 via r2), 20 Mbit/s each (tbf), joined at r3 before the server (10.0.5.2).
const TWO_PATHS: &str = r#"name = "tmptcp"
hosts = ["c", "s"]
routers = ["r1", "r2", "r3"]
[[link]]
name = "wifi"
ends = ["c", "r1"]
rate = "20M"
[[link]]
name = "lte"
ends = ["c", "r2"]
rate = "20M"
[[link]]
ends = ["r1", "r3"]
[[link]]
ends = ["r2", "r3"]
[[link]]
ends = ["r3", "s"]
"#;

/// A `flowlab serve -J` listening on `port`, reaped however the test ends, and the
/// lines it has logged so far (read as they come).
struct Server {
    _process: Reaped,
    port: u16,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

fn serve() -> Server {
    let port = free_ports(1);
    let mut child = Command::new(env!("CARGO_BIN_EXE_flowlab"))
        .args(["serve", "-J", "-p", &port.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve");
    await_listening(port, Some(&mut child), "flowlab serve");
    let log = child.stdout.take().expect("its log");
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let into = std::sync::Arc::clone(&lines);
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(log)).map_while(Result::ok) {
            into.lock().expect("the lines").push(line);
        }
    });
    Server {
        _process: Reaped(child),
        port,
        lines,
    }
}

impl Server {
    /// Its events, once it has logged `finished` tests' ends (a test's end is logged
    /// as its client leaves: it may come just after the client has exited), or after
    /// 10 s.
    fn events(&self, finished: usize) -> Vec<Value> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let events: Vec<Value> = self
                .lines
                .lock()
                .expect("the lines")
                .iter()
                .map(|l| serde_json::from_str(l).expect("a JSON line"))
                .collect();
            let ended = events
                .iter()
                .filter(|e| e["event"] == "test_finished")
                .count();
            if ended >= finished || std::time::Instant::now() > deadline {
                return events;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// `flowlab test 127.0.0.1 -p PORT ARGS`: its status, standard output and error.
fn test(port: u16, args: &[&str]) -> (std::process::ExitStatus, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_flowlab"))
        .args(["test", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("flowlab test");
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(port: u16, args: &[&str]) -> Value {
    let (status, out, err) = test(port, &[args, &["-J"]].concat());
    assert!(status.success(), "{args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {err}"))
}

/// Each data stream an MPTCP connection with its subflows named, both ways at once and
/// each way alone; the totals exact; the subflows carried them; the server's log says
/// the test was MPTCP and counts the subflows.
#[test]
fn flowlab_to_flowlab_is_mptcp_both_ways_with_each_subflow_said() {
    if !mptcp() {
        return;
    }
    let server = serve();
    let port = server.port;
    let server_port = format!(":{port}");
    for (args, streams) in [
        (&["-n", "8M"][..], 1),
        (&["-n", "8M", "-R"][..], 1),
        (&["-n", "8M", "--bidir", "-P", "2"][..], 4),
    ] {
        let doc = json(port, &[args, &["-m"]].concat());
        assert_eq!(doc["start"]["spec"]["mptcp"], true, "{args:?}");
        // Each direction's 8 MiB (-n counts a direction), of one stream or two.
        for sum in doc["end"]["sums"].as_array().expect("sums") {
            assert_eq!(sum["receiver"]["bytes"], 8 << 20, "{args:?}: {sum}");
        }
        let m = &doc["end"]["mptcp"];
        assert!(m["path_manager"].is_string(), "{args:?}: {m}");
        assert!(m["scheduler"].is_string(), "{args:?}: {m}");
        let connections = m["connections"].as_array().expect("connections");
        assert_eq!(connections.len(), streams, "{args:?}: {m}");
        for (c, s) in connections
            .iter()
            .zip(doc["end"]["streams"].as_array().expect("streams"))
        {
            assert_eq!(c["stream"], s["id"], "{args:?}");
            assert_eq!(c["fallback"], false, "{args:?}: {c}");
            let subflows = c["subflows"].as_array().expect("subflows");
            assert_eq!(subflows.len(), 1, "loopback has one path: {c}");
            let sf = &subflows[0];
            assert!(
                sf["remote"]
                    .as_str()
                    .is_some_and(|r| r.ends_with(&server_port)),
                "{sf}"
            );
            // What the stream moved crossed its subflow (the cookie and the MPTCP
            // level's own bytes besides).
            let moved = s["receiver"]["bytes"].as_u64().expect("bytes");
            let carried = match s["direction"].as_str() {
                Some("up") => sf["bytes_acked"].as_u64(),
                _ => sf["bytes_received"].as_u64(),
            }
            .expect("subflow bytes");
            assert!(carried >= moved, "{args:?}: {carried} < {moved}: {c}");
        }
    }
    let (_, table, _) = test(port, &["-m", "-n", "1M"]);
    assert!(
        table.contains("MPTCP: path manager ") && table.contains("MPTCP stream 1: 1 subflow"),
        "{table}"
    );
    let events = server.events(4);
    let of = |kind: &str| -> Vec<&Value> { events.iter().filter(|e| e["event"] == kind).collect() };
    let started = of("test_started");
    assert!(
        started.iter().all(|e| e["protocol"] == "mptcp"),
        "{started:?}"
    );
    let subflows: Vec<u64> = of("test_finished")
        .iter()
        .map(|e| e["mptcp_subflows"].as_u64().expect("MPTCP subflows"))
        .collect();
    assert_eq!(subflows, [1, 1, 4, 1]);
}

/// Against a server whose streams are plain TCP (stock iperf3), each connection falls
/// back, and the result says so — in the JSON and the table.
#[test]
fn a_plain_tcp_servers_fallback_is_said() {
    if !mptcp() || !support::require_tool("iperf3") {
        return;
    }
    let port = free_ports(1);
    let mut child = Command::new("iperf3")
        .args(["-s", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .spawn()
        .expect("iperf3 -s");
    await_listening(port, Some(&mut child), "iperf3 -s");
    let _server = Reaped(child);
    let doc = json(port, &["-m", "-n", "4M"]);
    let c = &doc["end"]["mptcp"]["connections"][0];
    assert_eq!(c["fallback"], true, "{c}");
    assert_eq!(c["subflows"].as_array().map(Vec::len), Some(0), "{c}");
    let sum = &doc["end"]["sums"][0];
    assert_eq!(sum["sender"]["bytes"], 4 << 20);
    // The receiver's count is the stock server's own (interop.rs pins that it is
    // relayed as is). iperf3 3.12 closes its streams on TEST_END and drops what it has
    // not read by then (iperf_server_api.c); flowlab's client sends TEST_END only once
    // all is acknowledged, which makes a short count rare (a stock iperf3 client's is
    // short in about a third of such tests), not impossible.
    let received = sum["receiver"]["bytes"].as_u64().expect("bytes");
    assert!(received > 0 && received <= 4 << 20, "{sum}");
    let (status, table, err) = test(port, &["-m", "-n", "1M"]);
    assert!(status.success(), "{err}");
    assert!(
        table.contains("MPTCP stream 1: fell back to plain TCP"),
        "{table}"
    );
}

/// Stock iperf3 (3.12, without -m) made MPTCP by `mptcpize`, at either end: flowlab's
/// client keeps MPTCP with its server; its server logs an MPTCP-ized client's test as
/// MPTCP and a plain one's as not.
#[test]
fn an_mptcpized_iperf3_is_a_peer_at_either_end() {
    if !mptcp() || !support::require_tool("iperf3") || !support::require_tool("mptcpize") {
        return;
    }
    let port = free_ports(1);
    let mut child = Command::new("mptcpize")
        .args(["run", "iperf3", "-s", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .spawn()
        .expect("mptcpize run iperf3 -s");
    await_listening(port, Some(&mut child), "mptcpize run iperf3 -s");
    let iperf3_server = Reaped(child);
    for args in [&["-n", "4M"][..], &["-n", "4M", "-R"]] {
        let doc = json(port, &[args, &["-m"]].concat());
        let c = &doc["end"]["mptcp"]["connections"][0];
        assert_eq!(c["fallback"], false, "{args:?}: {c}");
        assert_eq!(
            doc["end"]["sums"][0]["receiver"]["bytes"],
            4 << 20,
            "{args:?}"
        );
    }
    drop(iperf3_server);

    let server = serve();
    let port = server.port;
    for mptcpized in [true, false] {
        let mut c = if mptcpized {
            let mut c = Command::new("mptcpize");
            c.args(["run", "iperf3"]);
            c
        } else {
            Command::new("iperf3")
        };
        let out = c
            .args(["-c", "127.0.0.1", "-p", &port.to_string(), "-n", "4M"])
            .output()
            .expect("iperf3 -c");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let finished: Vec<Value> = server
        .events(2)
        .into_iter()
        .filter(|e| e["event"] == "test_finished")
        .map(|e| e["mptcp_subflows"].clone())
        .collect();
    assert_eq!(finished, [Value::from(1), Value::Null]);
}

/// What an MPTCP socket refuses is refused before a test, naming the flag; -m is TCP's.
#[test]
fn what_an_mptcp_socket_refuses_is_refused_naming_the_flag() {
    for (flag, value) in [
        ("-Z", None),
        ("--fq-rate", Some("10M")),
        ("--snd-timeout", Some("5000")),
    ] {
        let mut args = vec!["test", "127.0.0.1", "-m", flag];
        args.extend(value);
        usage_error(&args, flag);
    }
    usage_error(&["test", "127.0.0.1", "-m", "-u"], "--mptcp");
    usage_error(&["test", "127.0.0.1", "-m", "--quic"], "--mptcp");
}

/// A topology's multi-homed client, its two paths to the server (Wi-Fi-like and
/// LTE-like, 20 Mbit/s each) through routers of their own: `flowlab net` gives each of
/// its addresses routes of its own and an MPTCP endpoint, so one connection opens a
/// subflow on each path. The first path is cut (its router's end down) 2.5 s into a 10 s
/// upload, under cubic and bbr: the test carries on over the second — its last three
/// intervals move data, the control connection (MPTCP too) ends the test — and the
/// end's subflows say the second path carried what moved after the cut. Without the
/// per-source routes the second subflow would leave by the first path too, and stall
/// with it. Carrying on is not at once: what the cut subflow held blocks the data behind
/// it until the kernel resends it on the other, after the cut subflow's retransmission
/// timeouts (`net.mptcp.stale_loss_cnt`, 4 by default, marks it stale): a stall of one to
/// three and a half seconds here with other tests running (in two of five runs of this
/// binary a whole second after the cut moved nothing).
#[test]
fn one_path_cut_mid_test_the_other_carries_on_and_the_subflows_say_so() {
    if !support::is_root_with_ip("the paths are a topology's namespaces") || !mptcp() {
        return;
    }
    let _machine = support::machine_shared();
    let dir = tempfile::tempdir().expect("a directory");
    let _down = support::net_up(dir.path(), "tmptcp", TWO_PATHS);
    let (c, r1) = ("fl-tmptcp-c".to_string(), "fl-tmptcp-r1");
    let flowlab = env!("CARGO_BIN_EXE_flowlab");
    let mut server = Reaped(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                "fl-tmptcp-s",
                flowlab,
                "serve",
                "-J",
                "-p",
                "5201",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("serve"),
    );
    let mut log = server.0.stdout.take().expect("its log");
    support::await_listening_in(&c, "10.0.5.2:5201", &mut server.0);
    for cc in ["cubic", "bbr"] {
        ip(&["-n", r1, "link", "set", "l0", "up"]);
        let client = Command::new("ip")
            .args([
                "netns", "exec", &c, flowlab, "test", "s", "-m", "-t", "10", "-J",
            ])
            .args(["-C", cc])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("flowlab test");
        std::thread::sleep(std::time::Duration::from_millis(2500));
        ip(&["-n", r1, "link", "set", "l0", "down"]);
        let out = client.wait_with_output().expect("its document");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{cc}: {stderr}");
        let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(doc["end"]["congestion_local"], cc);
        let moved: Vec<u64> = doc["intervals"]
            .as_array()
            .expect("intervals")
            .iter()
            .map(|iv| iv["sums"][0]["bytes"].as_u64().expect("bytes"))
            .collect();
        // The cut falls in the third interval; the fourth on are the second path's alone.
        assert!(moved.len() >= 10, "{cc}: {moved:?}");
        let after: u64 = moved[3..].iter().sum();
        assert!(
            moved[7..].iter().all(|&b| b > 0),
            "{cc}: no carrying on after the cut: {moved:?}"
        );
        let c0 = &doc["end"]["mptcp"]["connections"][0];
        assert_eq!(c0["fallback"], false, "{cc}: {c0}");
        let second = c0["subflows"]
            .as_array()
            .expect("subflows")
            .iter()
            .find(|sf| {
                sf["local"]
                    .as_str()
                    .is_some_and(|l| l.starts_with("10.0.2.1:"))
            })
            .unwrap_or_else(|| panic!("{cc}: no subflow on the second path: {c0}"));
        let carried = second["bytes_acked"].as_u64().expect("bytes acked");
        assert!(
            carried >= after,
            "{cc}: {carried} < {after} moved after the cut: {c0}"
        );
    }
    drop(server);
    let mut text = String::new();
    std::io::Read::read_to_string(&mut log, &mut text).expect("its log");
    let finished = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["event"] == "test_finished")
        .expect("the test's end in the server's log");
    assert!(finished["mptcp_subflows"].as_u64() >= Some(1), "{finished}");
}

/// Where the kernel makes no MPTCP socket (a namespace with `net.mptcp.enabled` = 0),
/// `-m` says so before any connection is tried, a server there refuses an MPTCP
/// client's test rather than serving it as plain TCP, and `net up` of a topology with a
/// multi-homed host says it built the host without MPTCP's path manager.
#[test]
fn without_mptcp_each_end_says_so() {
    if !support::is_root_with_ip("the namespace without MPTCP is made for the test") {
        return;
    }
    let ns = format!("mpoff{}", std::process::id() % 100_000);
    let _made = support::Namespaces(vec![ns.clone()]);
    ip(&["netns", "add", &ns]);
    ip(&["-n", &ns, "link", "set", "lo", "up"]);
    let off = Command::new("ip")
        .args(["netns", "exec", &ns, "sysctl", "-qw", "net.mptcp.enabled=0"])
        .status()
        .expect("sysctl");
    assert!(off.success(), "net.mptcp.enabled=0 in {ns}");
    let flowlab = env!("CARGO_BIN_EXE_flowlab");
    let mut server = Reaped(
        Command::new("ip")
            .args(["netns", "exec", &ns, flowlab, "serve", "-p", "5201"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("serve"),
    );
    support::await_listening_in(&ns, "127.0.0.1:5201", &mut server.0);
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns,
            flowlab,
            "test",
            "127.0.0.1",
            "-m",
            "-n",
            "1M",
        ])
        .output()
        .expect("flowlab test -m");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("error: -m/--mptcp: this system makes no MPTCP socket")
            && stderr.contains("net.mptcp.enabled = 0"),
        "{stderr}"
    );
    // An iperf3 3.21 client's -m, as it sends it, to that server: refused, never served
    // as plain TCP.
    let refused = support::in_netns(Some(&ns), || {
        use std::io::Read;
        let mut c = support::at_param_exchange(5201, 9);
        support::send_iperf3_params(&mut c, "3.21-mptcp");
        let mut b = [0u8; 9];
        c.read_exact(&mut b).expect("the server's answer");
        b
    });
    assert_eq!(
        flowlab_proto::State::from_byte(refused[0]),
        Ok(flowlab_proto::State::ServerError)
    );
    let body: [u8; 8] = refused[1..].try_into().expect("8 bytes");
    assert_eq!(
        flowlab_proto::state::decode_server_error(&body),
        (
            flowlab_proto::state::error_code::RECV_PARAMS,
            libc::EPROTONOSUPPORT
        )
    );
    let _machine = support::machine_shared();
    let dir = tempfile::tempdir().expect("a directory");
    let file = dir.path().join("tmpoff.toml");
    std::fs::write(&file, TWO_PATHS.replace("tmptcp", "tmpoff")).expect("the topology");
    let _down = support::NetDown::new("tmpoff");
    let up = Command::new("ip")
        .args(["netns", "exec", &ns, flowlab, "net", "up"])
        .arg(&file)
        .output()
        .expect("net up");
    let said = support::said(&up);
    assert!(up.status.success(), "{said}");
    assert!(
        said.contains("note: this kernel makes no MPTCP socket")
            && said.contains("c built without MPTCP's path manager"),
        "{said}"
    );
}
