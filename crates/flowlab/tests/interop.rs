//! Wire compatibility with the real iperf3 binary (Debian's 3.12), both ways: stock
//! `iperf3 -c` against a flowlab server, and flowlab's client against `iperf3 -s`.
//! Each test parses iperf3's `-J` output and checks its byte counts against flowlab's.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use flowlab_engine::client::ClientError;
use flowlab_proto::params::{Mode, Protocol};
use flowlab_report::result::StreamDirection;
use flowlab_report::spec::{Amount, Direction};
use serde_json::Value;
use support::*;

/// Runs `iperf3 -c 127.0.0.1 -p PORT ARGS -J` and returns its JSON.
fn iperf3_client(port: u16, args: &[&str]) -> Value {
    let out = Command::new("iperf3")
        .args(["-c", "127.0.0.1", "-p", &port.to_string(), "-J"])
        .args(args)
        .output()
        .expect("run iperf3");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "iperf3 {args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    // iperf3 3.12 exits 0 even on errors with -J; the error is a top-level key.
    assert!(v.get("error").is_none(), "iperf3 {args:?}: {}", v["error"]);
    v
}

fn bytes(v: &Value, key: &str) -> u64 {
    v["end"][key]["bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("end.{key}.bytes missing"))
}

#[test]
fn iperf3_clients_against_flowlab_server() {
    if !require_tool("iperf3") {
        return;
    }
    let port = default_server();
    let cases: &[&[&str]] = &[
        &["-t", "1"],
        &["-t", "1", "-R"],
        &["-t", "1", "-P", "4"],
        &["-t", "1", "--bidir"],
        &["-n", "20M"],
        &["-n", "20M", "-R"],
        &["-t", "1", "-b", "200M"],
        &["-u", "-t", "1", "-b", "100M"],
        &["-u", "-t", "1", "-b", "100M", "-R"],
        &["-u", "-t", "1", "-b", "50M", "--bidir"],
        &["-u", "-t", "1", "-b", "50M", "-P", "4"],
    ];
    for args in cases {
        let v = iperf3_client(port, args);
        let sent = bytes(&v, "sum_sent");
        let received = bytes(&v, "sum_received");
        assert!(sent > 0, "{args:?}: nothing sent");
        let reverse = args.contains(&"-R");
        if args.contains(&"-u") {
            // Paced UDP on loopback: flowlab's receiver counts every datagram.
            assert_eq!(sent, received, "{args:?}");
            assert_eq!(
                v["end"]["sum"]["lost_packets"].as_u64(),
                Some(0),
                "{args:?}"
            );
        } else if reverse {
            // iperf3's client stops reading when it sends TEST_END; what was in flight
            // when it stopped is counted by flowlab's sender only (one stream here).
            assert!(
                received <= sent && sent - received <= max_in_flight_per_stream(),
                "{args:?}: {sent} vs {received}"
            );
        } else {
            // flowlab's receiver drains what was in flight: counts agree exactly.
            assert_eq!(sent, received, "{args:?}");
        }
        if args.contains(&"20M") {
            assert_eq!(sent, 20 << 20, "{args:?}: -n not exact");
        }
        if args.contains(&"--bidir") {
            assert!(bytes(&v, "sum_sent_bidir_reverse") > 0, "{args:?}");
        }
        if args.contains(&"-P") {
            assert_eq!(
                v["end"]["streams"].as_array().map(Vec::len),
                Some(4),
                "{args:?}"
            );
        }
    }
}

/// Tests that start `iperf3 -s` run one at a time: two could otherwise be handed the same
/// free port, and the second server would fail to bind while its test talks to the first.
static IPERF3_SERVERS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_iperf3_server_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    IPERF3_SERVERS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The most bytes one TCP stream can have in flight between a sender's write and the
/// receiver's read: the largest send buffer plus the largest receive buffer the kernel
/// grants (`tcp_wmem` and `tcp_rmem` maxima). A receiver that stops reading without
/// draining, as iperf3's server does at TEST_END, can miss at most this much per stream.
fn max_in_flight_per_stream() -> u64 {
    let max = |path: &str| -> u64 {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.split_whitespace().nth(2).and_then(|v| v.parse().ok()))
            .unwrap_or_else(|| panic!("cannot read {path}"))
    };
    max("/proc/sys/net/ipv4/tcp_rmem") + max("/proc/sys/net/ipv4/tcp_wmem")
}

/// A one-off `iperf3 -s` with JSON output, killed if the test fails.
struct Iperf3Server(Option<Child>);

impl Iperf3Server {
    fn start(port: u16) -> Self {
        let mut child = Command::new("iperf3")
            .args(["-s", "-1", "-J", "-p", &port.to_string(), "-B", "127.0.0.1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start iperf3 -s");
        // Wait until it listens, without connecting (a connection would use up the
        // one-off server's single test) and without binding the port to see whether it
        // is taken: iperf3's own bind failed while such a probe held it, once in a
        // fresh-clone run ("iperf3 -s did not start").
        let deadline = Instant::now() + Duration::from_secs(10);
        while !support::listening_here(port) {
            if let Ok(Some(status)) = child.try_wait() {
                let out = child.wait_with_output().expect("iperf3 -s output");
                panic!(
                    "iperf3 -s on port {port} exited ({status}) before listening: {}",
                    String::from_utf8_lossy(&out.stdout)
                );
            }
            assert!(
                Instant::now() < deadline,
                "iperf3 -s did not listen on port {port} within 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Iperf3Server(Some(child))
    }

    fn json(mut self) -> Value {
        let child = self.0.take().expect("child");
        let out = child.wait_with_output().expect("iperf3 -s output");
        serde_json::from_slice(&out.stdout).expect("iperf3 -s JSON")
    }
}

impl Drop for Iperf3Server {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn flowlab_client_against_iperf3_server() {
    if !require_tool("iperf3") {
        return;
    }
    type Setup = fn(&mut flowlab_report::spec::TestSpec);
    let cases: &[(&str, Setup)] = &[
        ("tcp", |_| {}),
        ("tcp -R", |s| s.direction = Direction::Reverse),
        ("tcp -P 4", |s| s.parallel = 4),
        ("tcp --bidir", |s| s.direction = Direction::Bidir),
        ("tcp -n", |s| s.amount = Amount::Bytes(20 << 20)),
        ("udp -b", |s| {
            s.protocol = Protocol::Udp;
            s.len = 1400;
            s.bitrate = 100_000_000;
        }),
        ("udp -b -R", |s| {
            s.protocol = Protocol::Udp;
            s.len = 1400;
            s.bitrate = 100_000_000;
            s.direction = Direction::Reverse;
        }),
        ("udp -b --bidir", |s| {
            s.protocol = Protocol::Udp;
            s.len = 1400;
            s.bitrate = 50_000_000;
            s.direction = Direction::Bidir;
        }),
    ];
    let _one_at_a_time = one_iperf3_server_at_a_time();
    for (name, setup) in cases {
        let port = free_port();
        // The iperf3 server counts for itself; its JSON is the reference.
        let server = Iperf3Server::start(port);
        let mut s = spec(port);
        s.amount = Amount::Seconds(1);
        setup(&mut s);
        let r = run(&s).unwrap_or_else(|e| panic!("{name}: {e}"));
        check_against(name, &r, server.json());
    }
}

fn check_against(name: &str, r: &flowlab_report::result::TestResult, server: Value) {
    assert_eq!(r.start.peer.kind, "iperf3", "{name}");
    for sum in &end(r).sums {
        let snd = sum.sender.as_ref().expect("sender totals");
        let rcv = sum.receiver.as_ref().expect("receiver totals");
        // What flowlab reports for the server's side must be what iperf3 itself printed.
        let (key, theirs) = match sum.direction {
            StreamDirection::Up => ("sum_received", rcv.bytes),
            StreamDirection::Down => ("sum_sent", snd.bytes),
        };
        let key = match (
            sum.direction,
            r.start.streams.len() > 1
                && r.start
                    .streams
                    .iter()
                    .any(|s| s.direction == StreamDirection::Down)
                && r.start
                    .streams
                    .iter()
                    .any(|s| s.direction == StreamDirection::Up),
        ) {
            (StreamDirection::Down, true) => "sum_sent_bidir_reverse",
            _ => key,
        };
        let iperf3_count = server["end"][key]["bytes"]
            .as_u64()
            .unwrap_or_else(|| panic!("{name}: {key} missing in iperf3 -s JSON"));
        assert_eq!(
            theirs, iperf3_count,
            "{name}: flowlab's copy of the server's count"
        );
        assert!(snd.bytes > 0, "{name}");
        // iperf3's server closes its streams without draining them, so the receiving
        // side may miss what was still in flight — never more than the buffers hold.
        let streams = r
            .start
            .streams
            .iter()
            .filter(|s| s.direction == sum.direction)
            .count() as u64;
        let bound = streams * max_in_flight_per_stream();
        assert!(
            rcv.bytes <= snd.bytes && snd.bytes - rcv.bytes <= bound,
            "{name}: sent {} received {} (at most {bound} may be in flight)",
            snd.bytes,
            rcv.bytes
        );
    }
}

#[test]
fn flowlab_only_features_stop_before_data_against_iperf3() {
    if !require_tool("iperf3") {
        return;
    }
    let _one_at_a_time = one_iperf3_server_at_a_time();
    let port = free_port();
    let _server = Iperf3Server::start(port);
    let mut s = spec(port);
    s.mode = Mode::StopAndWait;
    s.amount = Amount::Seconds(1);
    let err = run(&s).expect_err("iperf3 has no stop-and-wait");
    assert!(
        matches!(err, ClientError::Unsupported(ref f) if f == "stop-and-wait"),
        "{err}"
    );
    assert!(err.to_string().contains("no data was sent"), "{err}");
}
