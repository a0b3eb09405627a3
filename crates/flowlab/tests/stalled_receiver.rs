//! A flowlab client and server, both the binary, with the receiving end stopped
//! (SIGSTOP) in the middle of a paced UDP test: the sender stops with it, and keeps
//! within the receiver's window once it runs again.

mod support;

use flowlab_results::spec::Direction;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::time::{Duration, Instant};
use support::*;

fn flowlab() -> std::process::Command {
    std::process::Command::new(assert_cmd::cargo::cargo_bin("flowlab"))
}

/// `flowlab serve -1` on a free port of 127.0.0.1, listening.
fn one_off_server() -> (Reaped, u16) {
    let port = free_port();
    let mut server = Reaped(
        flowlab()
            .args(["serve", "-1", "-B", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start flowlab serve"),
    );
    await_listening(port, Some(&mut server.0), "flowlab serve");
    (server, port)
}

/// Reads `p` to its end on a thread of its own, while the test runs (a full pipe would
/// hold the child up).
fn read_all<R: std::io::Read + Send + 'static>(p: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut text = Vec::new();
        if let Some(mut p) = p {
            let _ = p.read_to_end(&mut text);
        }
        text
    })
}

/// Waits (at most 30 s) for `child` to exit.
fn exit_of(child: &mut Reaped) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.0.try_wait().expect("wait for flowlab test") {
            return status;
        }
        assert!(Instant::now() < deadline, "no result within 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A paced test (`-b 20M`, `-w 128K`: room for ~110 datagrams, 65 ms at the rate) whose
/// receiving end is stopped (SIGSTOP) for 150 ms three times — a receiver held off its
/// CPU, as on a busy host with the kernel's default buffers. `(lost, rcvbuf drops, holds)` from
/// the client's JSON, and how often the receiver held the sender back. The margin for a busy machine: with the window the sender may have
/// 42 datagrams + the path's share + a probe every wait (8 each: 10, 30, 70, 150 ms)
/// unread, so the socket overflows only if its smoothed round trip passes ~10 ms.
fn paced_into_a_stalled_receiver(direction: Direction, window: bool) -> (u64, u64, Option<u64>) {
    let (server, port) = one_off_server();
    let port_text = port.to_string();
    let mut args = vec!["test", "127.0.0.1", "-p", &port_text, "-u", "-b", "20M"];
    args.extend(["-w", "128K", "-t", "3", "-J"]);
    if direction == Direction::Reverse {
        args.push("-R");
    }
    if !window {
        args.push("--no-window");
    }
    let mut client = Reaped(
        flowlab()
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start flowlab test"),
    );
    let (stdout, stderr) = (
        read_all(client.0.stdout.take()),
        read_all(client.0.stderr.take()),
    );
    let receiver = match direction {
        Direction::Reverse => Pid::from_raw(client.pid()),
        _ => Pid::from_raw(server.pid()),
    };
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(500));
        kill(receiver, Signal::SIGSTOP).expect("stop the receiver");
        std::thread::sleep(Duration::from_millis(150));
        kill(receiver, Signal::SIGCONT).expect("continue the receiver");
    }
    let status = exit_of(&mut client);
    drop(server);
    let (stdout, stderr) = (
        stdout.join().expect("stdout"),
        stderr.join().expect("stderr"),
    );
    assert!(
        status.success(),
        "{args:?}: {status}: {}",
        String::from_utf8_lossy(&stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&stdout).expect("JSON");
    let u = &r["end"]["sums"][0]["receiver"]["udp"];
    let n = |k: &str| {
        u[k].as_u64()
            .unwrap_or_else(|| panic!("{args:?}: no {k} in {u}"))
    };
    let holds = r["end"]["sums"][0]["sender"]["receiver_holds"].as_u64();
    (n("lost"), n("rcvbuf_drops"), holds)
}

/// A paced sender keeps within its receiver's window, both ways: a receiver stopped for
/// longer than its buffer lasts at the rate loses nothing, where without the window
/// (`--no-window`, the same stalls) its socket overflows — the loss the README's `quick`
/// showed on a host with the kernel's default `rmem_max` (docs/lab-notes/performance.md).
#[test]
fn a_paced_sender_stops_while_its_receiver_is_stopped_both_ways() {
    for direction in [Direction::Forward, Direction::Reverse] {
        let (lost, drops, holds) = paced_into_a_stalled_receiver(direction, false);
        assert!(
            lost > 0 && drops > 0,
            "{direction:?}: without the window, 150 ms stalls at 20 Mbit/s should overflow \
             a buffer of ~110 datagrams (lost {lost}, dropped {drops}): the test proves nothing"
        );
        assert_eq!(holds, None, "{direction:?}: held without a window");
        let (lost, drops, holds) = paced_into_a_stalled_receiver(direction, true);
        assert_eq!(
            (lost, drops),
            (0, 0),
            "{direction:?}: the paced sender overran its stopped receiver"
        );
        // Each of the three stops held it at least once, and the result says so.
        assert!(
            holds.is_some_and(|n| n >= 3),
            "{direction:?}: the sender says it was held {holds:?} times"
        );
    }
}

/// A test whose every stream failed is a failed test: the receiving server is stopped
/// for longer than the sender's `--snd-timeout` (TCP_USER_TIMEOUT), its one stream
/// dies of it, and the client still prints what ran (the JSON names the stream and
/// why) but exits 1, saying every stream failed (issue 46).
#[test]
fn a_test_whose_every_stream_failed_exits_non_zero() {
    let (server, port) = one_off_server();
    let mut client = Reaped(
        flowlab()
            .args([
                "test",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-t",
                "4",
                "-J",
            ])
            .args(["--snd-timeout", "300"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start flowlab test"),
    );
    let (stdout, stderr) = (
        read_all(client.0.stdout.take()),
        read_all(client.0.stderr.take()),
    );
    // Data flows by then; stopped five times the user timeout, the stream dies.
    std::thread::sleep(Duration::from_millis(1000));
    kill(Pid::from_raw(server.pid()), Signal::SIGSTOP).expect("stop the server");
    std::thread::sleep(Duration::from_millis(1500));
    kill(Pid::from_raw(server.pid()), Signal::SIGCONT).expect("continue the server");
    let status = exit_of(&mut client);
    let (stdout, stderr) = (
        stdout.join().expect("stdout"),
        String::from_utf8_lossy(&stderr.join().expect("stderr")).into_owned(),
    );
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("error: every stream failed (stream 1: "),
        "{stderr}"
    );
    let r: serde_json::Value = serde_json::from_slice(&stdout).expect("the result, printed whole");
    let failed = &r["end"]["failed_streams"];
    assert_eq!(failed[0]["id"], 1, "{failed}");
    assert!(
        failed[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("timed out")),
        "{failed}"
    );
    assert!(
        r["end"]["sums"][0]["sender"]["bytes"].as_u64() > Some(0),
        "{r}"
    );
}
