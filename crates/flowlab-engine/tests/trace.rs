//! `--trace`: TCP_INFO sampled on both ends, and the diagnosis drawn from it.

use std::time::Duration;

use flowlab_proto::cookie::COOKIE_LEN;
use flowlab_results::diagnose::{Limit, NOTABLE};
use flowlab_results::result::{Side, StreamDirection, TestResult, Trace, TracedStream};
use flowlab_results::spec::{Amount, Direction};
use flowlab_testkit::*;

fn traced(period: Duration, amount: Amount) -> flowlab_results::spec::TestSpec {
    let mut s = spec(default_server());
    s.trace = Some(period);
    s.amount = amount;
    s
}

fn trace(r: &TestResult) -> &Trace {
    r.trace.as_ref().expect("a traced test carries its trace")
}

fn stream(t: &Trace, side: Side) -> &TracedStream {
    t.streams
        .iter()
        .find(|s| s.side == side)
        .unwrap_or_else(|| panic!("no {side:?} samples"))
}

#[test]
fn both_ends_sample_every_period_and_the_counters_match_the_bytes() {
    // 1 ms for 2 s: the server's samples alone are larger than an untraced result may be.
    let r = run(&traced(Duration::from_millis(1), Amount::Seconds(2.0))).expect("test runs");
    let t = trace(&r);
    assert_eq!(t.period_us, 1000);
    assert_eq!(t.streams.len(), 2, "one stream, sampled on both ends");
    let (snd, rcv) = sum(&r, StreamDirection::Up);
    let client = stream(t, Side::Client);
    let server = stream(t, Side::Server);
    assert!(client.sender && !server.sender);
    for s in [client, server] {
        let samples = &s.trace.samples;
        assert!(
            samples.len() >= 500,
            "{:?}: {} samples",
            s.side,
            samples.len()
        );
        assert!(
            samples.windows(2).all(|w| w[0].t_us <= w[1].t_us),
            "in time order"
        );
        // This kernel (≥ 5.4) has every field the diagnosis uses.
        let last = samples.last().expect("samples");
        for (name, v) in [
            ("snd_cwnd", last.snd_cwnd),
            ("srtt_us", last.srtt_us),
            ("snd_wnd", last.snd_wnd),
            ("busy_time_us", last.busy_time_us),
            ("sndbuf", last.sndbuf),
        ] {
            assert!(v.is_some(), "{:?}: {name} missing", s.side);
        }
    }
    // The last samples are taken when the streams stop: the kernel's byte counters then
    // hold every byte counted, plus the cookie that opened the connection and the FIN
    // that closed it (the kernel counts sequence numbers, and a FIN takes one).
    let cookie = COOKIE_LEN as u64;
    let received = stream(t, Side::Server).trace.samples.last().unwrap();
    assert_eq!(received.bytes_received, Some(rcv.bytes + cookie + 1));
    // On the sender: first transmissions plus what still waits in the buffer is every
    // byte written.
    let sent = stream(t, Side::Client).trace.samples.last().unwrap();
    let written =
        sent.bytes_sent.unwrap() - sent.bytes_retrans.unwrap() + sent.notsent_bytes.unwrap();
    assert_eq!(written, snd.bytes + cookie);
    // Each bytes_acked sample never goes back.
    let acked: Vec<u64> = client
        .trace
        .samples
        .iter()
        .filter_map(|s| s.bytes_acked)
        .collect();
    assert!(acked.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn every_stream_of_a_reverse_test_is_traced_on_both_ends() {
    let mut s = traced(Duration::from_millis(20), Amount::Bytes(20 << 20));
    s.direction = Direction::Reverse;
    s.parallel = 2;
    let r = run(&s).expect("test runs");
    let t = trace(&r);
    assert_eq!(t.streams.len(), 4);
    for st in &t.streams {
        assert_eq!(st.direction, StreamDirection::Down);
        assert_eq!(st.sender, st.side == Side::Server);
        assert!(!st.trace.samples.is_empty());
    }
    assert_eq!(t.diagnosis.len(), 1);
    assert_eq!(t.diagnosis[0].direction, StreamDirection::Down);
}

/// Seed 002: bytes in flight keep hitting a small receive window.
#[test]
fn a_small_receive_window_is_diagnosed_as_the_limit() {
    let mut s = traced(Duration::from_millis(10), Amount::Seconds(1.0));
    s.recv_window = 4 * 1024;
    let r = run(&s).expect("test runs");
    let d = &trace(&r).diagnosis[0];
    assert_eq!(d.primary, Limit::ReceiveWindow, "{d:?}");
    assert!(d.shares.receive_window >= 0.5, "{d:?}");
    assert!(d.evidence.window_full_samples > 0, "{d:?}");
    // A sender held back by the window is still sampled about every period: its writes
    // time out part-way, and those count as blocked too (they used to be skipped, leaving
    // gaps of 35 ms). Blocking timeouts run in kernel ticks, so a 10 ms one takes up to
    // ~16 ms at HZ 250 and 20 ms at HZ 100. Judged on the 95th percentile of the gaps
    // (the skipped timeouts made every blocked write's gap 35 ms): the widest alone is the
    // host's, whose scheduler may hold the sampling thread once (31.2 ms in a fresh-clone
    // run beside two other lanes).
    let sender = &stream(trace(&r), Side::Client).trace.samples;
    let mut gaps: Vec<u64> = sender.windows(2).map(|w| w[1].t_us - w[0].t_us).collect();
    gaps.sort_unstable();
    assert!(
        gaps.len() >= 20,
        "{} samples in 1 s at 10 ms",
        gaps.len() + 1
    );
    let p95 = gaps[gaps.len() * 95 / 100];
    assert!(
        p95 < 30_000,
        "95th percentile of the gaps {p95} µs (widest {:?} µs)",
        gaps.last()
    );
    let advice = flowlab_report::advice::of_test(&r, d);
    assert!(
        advice[0].starts_with("receive-window limited") && advice[0].contains("--recv-window"),
        "{advice:?}"
    );
}

/// A 4 MiB receive buffer is never the limit on loopback. On a busy machine the
/// receiving application can fall behind, and its unread data then shrinks the window
/// it advertises to almost nothing, which the sender does fill (the kernel counts it as
/// receive-window limited, rightly): then the reader is named, and no larger buffer is
/// advised.
#[test]
fn a_large_receive_buffer_is_not_blamed() {
    let mut s = traced(Duration::from_millis(10), Amount::Seconds(1.0));
    s.recv_window = 4 << 20;
    let r = run(&s).expect("test runs");
    let d = &trace(&r).diagnosis[0];
    let advice = flowlab_report::advice::of_test(&r, d);
    assert!(
        advice
            .iter()
            .all(|a| !a.contains("--recv-window") && !a.contains("tcp_rmem")),
        "{d:?} {advice:?}"
    );
    if d.shares.receive_window >= NOTABLE {
        let blamed = advice
            .iter()
            .find(|a| a.starts_with("receive-window limited"))
            .expect("advice for a notable limit");
        assert!(
            blamed.contains("so the reader (its CPU, on loopback) is the limit"),
            "{d:?}"
        );
    }
}

#[test]
fn receiver_tuning_reaches_the_receiving_socket() {
    // 96 KiB: doubled by the kernel to 192 KiB, under a stock net.core.rmem_max (208 KiB)
    // and unlike the default tcp_rmem of 128 KiB.
    const ASKED: u64 = 96 * 1024;
    // An algorithm other than this machine's default (reno is in every kernel).
    let read = |f: &str| std::fs::read_to_string(format!("/proc/sys/net/ipv4/{f}")).expect(f);
    let default = read("tcp_congestion_control").trim().to_string();
    let other = read("tcp_available_congestion_control")
        .split_whitespace()
        .find(|a| *a != default)
        .map(String::from);
    let mut s = traced(Duration::from_millis(50), Amount::Bytes(4 << 20));
    s.recv_window = ASKED;
    s.recv_congestion = other.clone();
    let r = run(&s).expect("test runs");
    let t = trace(&r);
    let receiver = stream(t, Side::Server);
    let sender = stream(t, Side::Client);
    // The kernel doubles SO_RCVBUF for its bookkeeping.
    assert_eq!(receiver.trace.samples[0].rcvbuf, Some(2 * ASKED));
    assert_eq!(receiver.trace.congestion, other);
    assert_ne!(
        sender.trace.samples[0].rcvbuf,
        Some(2 * ASKED),
        "sender untouched"
    );
    // Without a trace too, the result records what the server's socket was granted.
    s.trace = None;
    let r = run(&s).expect("test runs");
    let granted = end(&r).streams[0]
        .server_socket
        .clone()
        .expect("a flowlab server reports its socket");
    assert_eq!(granted.rcvbuf, 2 * ASKED);
    assert_eq!(granted.congestion, other);
    // ...and the client's own socket (the sender) kept the kernel's default algorithm.
    let client = &r.start.streams[0];
    assert_eq!(
        client.congestion.as_deref(),
        Some(default.as_str()),
        "{client:?}"
    );
}

#[test]
fn untraced_tests_carry_no_trace() {
    let r = run(&spec(default_server())).expect("test runs");
    assert!(r.trace.is_none());
}
