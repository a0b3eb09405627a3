//! `flowlab ping` on loopback: against a real server (counts, ordering of percentiles,
//! the probe rate limit, a throughput test beside a probe flood), against a server played
//! by the test (loss, duplicates and reordering made on purpose and counted apart), and
//! from the command line (JSON, refusals).

mod support;

use std::net::UdpSocket;
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use flowlab_engine::ping::{PingMode, PingSpec, Quiet, ping};
use flowlab_engine::server::ServerConfig;
use flowlab_proto::probe;
use flowlab_results::result::StreamDirection;
use flowlab_results::spec::Amount;
use support::*;

fn spec(port: u16, count: u64, interval: Duration) -> PingSpec {
    let mut s = PingSpec::new("127.0.0.1", port);
    s.count = Some(count);
    s.interval = interval;
    s.timeout = Duration::from_millis(500);
    s
}

#[test]
fn every_probe_is_answered_and_the_numbers_hang_together() {
    let port = default_server();
    let r = ping(
        &spec(port, 300, Duration::from_millis(2)),
        &AtomicBool::new(false),
        &Quiet,
    )
    .expect("a run");
    let s = &r.summary;
    assert_eq!(
        (s.sent, s.received, s.lost, s.duplicates, s.reordered),
        (300, 300, 0, 0, 0)
    );
    assert_eq!(r.probes.len(), 300);
    for p in &r.probes {
        let rx = p.received_ns.expect("answered");
        let server = p.server_ns.expect("server time");
        assert!(rx > p.sent_ns, "{p:?}");
        assert_eq!(p.rtt_ns(), Some(rx - p.sent_ns - server), "{p:?}");
    }
    let rtt = s.rtt.as_ref().expect("round trips");
    assert_eq!(rtt.samples, 300);
    let order = [
        rtt.min_ms,
        rtt.median_ms,
        rtt.p90_ms,
        rtt.p99_ms,
        rtt.p999_ms,
        rtt.max_ms,
    ];
    assert!(order.windows(2).all(|w| w[0] <= w[1]), "{rtt:?}");
    assert!(rtt.min_ms > 0.0 && rtt.mean_ms >= rtt.min_ms && rtt.mean_ms <= rtt.max_ms);
    assert!(s.jitter_ms.is_some() && s.forward.is_some() && s.backward.is_some());
    assert!(
        r.start.timestamps.contains("kernel"),
        "{}",
        r.start.timestamps
    );
    // Sent on schedule: 300 probes 2 ms apart take about 0.6 s.
    let span = r.probes[299].sent_ns - r.probes[0].sent_ns;
    assert!(span >= 598_000_000, "{span} ns");
}

/// A server played by the test: it drops probes 5 and 10, answers 3 twice, and answers 8
/// before 7. Back to back would wait for each reply, so probes go every 5 ms.
#[test]
fn loss_duplicates_and_reordering_are_counted_apart() {
    let server = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let port = server.local_addr().expect("addr").port();
    let player = std::thread::spawn(move || {
        server
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut buf = [0u8; 2048];
        let mut held: Option<(Vec<u8>, std::net::SocketAddr)> = None;
        for _ in 0..12 {
            let Ok((n, peer)) = server.recv_from(&mut buf) else {
                return;
            };
            let d = &mut buf[..n];
            assert!(probe::is_request(d));
            let seq = u64::from_be_bytes(d[16..24].try_into().unwrap());
            probe::answer_in_place(d, 1, 2);
            match seq {
                5 | 10 => {}
                3 => {
                    server.send_to(d, peer).unwrap();
                    server.send_to(d, peer).unwrap();
                }
                7 => held = Some((d.to_vec(), peer)),
                8 => {
                    server.send_to(d, peer).unwrap();
                    let (h, p) = held.take().unwrap();
                    server.send_to(&h, p).unwrap();
                }
                _ => {
                    server.send_to(d, peer).unwrap();
                }
            }
        }
    });
    let mut s = spec(port, 12, Duration::from_millis(5));
    s.timeout = Duration::from_millis(300);
    let r = ping(&s, &AtomicBool::new(false), &Quiet).expect("a run");
    player.join().expect("the server player");
    let s = &r.summary;
    assert_eq!((s.sent, s.received, s.lost), (12, 10, 2), "{s:?}");
    assert_eq!((s.duplicates, s.reordered), (1, 1), "{s:?}");
    let lost: Vec<u64> = r
        .probes
        .iter()
        .filter(|p| p.received_ns.is_none())
        .map(|p| p.seq)
        .collect();
    assert_eq!(lost, [5, 10]);
    assert!(r.probes[6].reordered, "probe 7's reply came after 8's");
    assert_eq!(r.probes[2].duplicates, 1);
}

/// Replies to another run (another session) and garbage are not counted.
#[test]
fn replies_to_another_run_are_ignored() {
    let server = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let port = server.local_addr().expect("addr").port();
    let player = std::thread::spawn(move || {
        server
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut buf = [0u8; 2048];
        for _ in 0..3 {
            let Ok((n, peer)) = server.recv_from(&mut buf) else {
                return;
            };
            let d = &mut buf[..n];
            probe::answer_in_place(d, 1, 2);
            let mut other = d.to_vec();
            other[8] ^= 0xff; // another session
            server.send_to(&other, peer).unwrap();
            server.send_to(b"FLPR garbage", peer).unwrap();
            server.send_to(d, peer).unwrap();
        }
    });
    let r = ping(
        &spec(port, 3, Duration::from_millis(5)),
        &AtomicBool::new(false),
        &Quiet,
    )
    .expect("a run");
    player.join().expect("player");
    assert_eq!(
        (r.summary.received, r.summary.duplicates),
        (3, 0),
        "{:?}",
        r.summary
    );
}

/// Probes beyond the server's --probe-rate go unanswered (a burst of four seconds'
/// worth, then the rate), while a throughput test from another address completes
/// byte-exact beside the flood.
#[test]
fn probes_beyond_the_probe_rate_go_unanswered_and_tests_go_on() {
    let port = start_server(ServerConfig {
        probe_rate: 10,
        ..ServerConfig::default()
    });
    let flood = std::thread::spawn(move || {
        // From another address, as fast as one thread sends: none of it may disturb
        // the test.
        let u = UdpSocket::bind("127.0.0.2:0").expect("bind");
        let mut d = vec![0u8; 64];
        let until = Instant::now() + Duration::from_secs(1);
        let mut seq = 1;
        while Instant::now() < until {
            probe::Request {
                session: 1,
                seq,
                sent_ns: 0,
            }
            .encode_into(&mut d);
            let _ = u.send_to(&d, ("127.0.0.1", port));
            seq += 1;
        }
    });
    let mut t = support::spec(port);
    t.amount = Amount::Bytes(5_000_011);
    let r = run(&t).expect("a test beside the probe flood");
    let (snd, rcv) = sum(&r, StreamDirection::Up);
    assert_eq!((snd.bytes, rcv.bytes), (5_000_011, 5_000_011));
    flood.join().expect("flood");
    let started = Instant::now();
    let p = ping(
        &spec(port, 100, Duration::from_millis(1)),
        &AtomicBool::new(false),
        &Quiet,
    )
    .expect("a run");
    let bound = 40 + (10.0 * started.elapsed().as_secs_f64()).ceil() as u64;
    assert!(
        (40..=bound).contains(&p.summary.received),
        "{} answered of 100; the burst is 40, the bound {bound}",
        p.summary.received
    );
}

fn flowlab() -> Command {
    Command::new(assert_cmd::cargo::cargo_bin("flowlab"))
}

/// A port where nothing answers: the summary, then an error that says what answers these
/// probes, and exit code 1 (iputils' ping exits 1 when no reply came), with `-J` too.
#[test]
fn no_reply_at_all_fails_and_says_what_answers() {
    let port = free_port().to_string();
    for json in [false, true] {
        let mut cmd = flowlab();
        cmd.args([
            "ping",
            "127.0.0.1",
            "-p",
            &port,
            "-c",
            "2",
            "-i",
            "10ms",
            "-W",
            "100ms",
        ]);
        if json {
            cmd.arg("-J");
        }
        let out = cmd.output().expect("flowlab ping");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
        assert!(
            stderr.contains(&format!("no reply from 127.0.0.1 port {port}"))
                && stderr.contains("`flowlab serve`"),
            "{stderr}"
        );
        if json {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
            assert_eq!(v["summary"]["received"], 0);
        } else {
            assert!(stdout.contains("2 sent, 0 received, 2 lost"), "{stdout}");
        }
    }
}

#[test]
fn the_command_prints_json_and_refuses_what_it_cannot_do() {
    let port = default_server().to_string();
    let out = flowlab()
        .args([
            "ping",
            "127.0.0.1",
            "-p",
            &port,
            "-c",
            "5",
            "-i",
            "10ms",
            "-s",
            "100",
            "-J",
        ])
        .output()
        .expect("flowlab ping");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["schema"], "flowlab.ping/1");
    assert_eq!(v["start"]["size"], 100);
    assert_eq!(v["start"]["interval_seconds"], 0.01);
    assert_eq!(v["summary"]["received"], 5);
    assert_eq!(v["probes"].as_array().map(Vec::len), Some(5));
    let out = flowlab()
        .args([
            "ping",
            "127.0.0.1",
            "-p",
            &port,
            "-c",
            "3",
            "-i",
            "0.01",
            "--histogram",
        ])
        .output()
        .expect("flowlab ping");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert_eq!(text.matches(" bytes from 127.0.0.1:").count(), 3, "{text}");
    assert!(text.contains("3 sent, 3 received, 0 lost"), "{text}");
    assert!(text.contains("percentile"), "{text}");
    let out = flowlab()
        .args([
            "ping",
            "127.0.0.1",
            "-p",
            &port,
            "-c",
            "3",
            "-i",
            "0",
            "--tcp",
        ])
        .output()
        .expect("flowlab ping --tcp");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1-byte TCP requests and responses"), "{text}");
    assert_eq!(text.matches("1 byte from 127.0.0.1:").count(), 3, "{text}");
    assert!(text.contains("transactions/s"), "{text}");
    // Back to back over TCP, each response is polled for before sleeping (200 µs by
    // default), and every output says so; --spin 0 sleeps at once, and so does a paced
    // run. The responses' times are the kernel's.
    for (args, polled) in [
        (vec!["-i", "0"], Some("200 µs")),
        (vec!["-i", "0", "--spin", "50us"], Some("50 µs")),
        (vec!["-i", "0", "--spin", "0"], None),
        (vec!["-i", "0.01"], None),
    ] {
        let out = flowlab()
            .args(["ping", "127.0.0.1", "-p", &port, "-c", "20", "--tcp", "-J"])
            .args(&args)
            .output()
            .expect("flowlab ping --tcp");
        assert!(out.status.success(), "{args:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(v["summary"]["received"], 20, "{args:?}");
        let stamps = v["start"]["timestamps"].as_str().unwrap_or_default();
        assert!(
            stamps.contains("receive: kernel (SO_TIMESTAMPNS)"),
            "{stamps}"
        );
        match polled {
            Some(us) => assert!(
                stamps.contains(&format!("polled for up to {us}")),
                "{stamps}"
            ),
            None => assert!(!stamps.contains("polled"), "{args:?}: {stamps}"),
        }
    }
    let out = flowlab()
        .args([
            "ping",
            "127.0.0.1",
            "-p",
            &port,
            "-c",
            "2",
            "-i",
            "0.01",
            "--connect",
        ])
        .output()
        .expect("flowlab ping --connect");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert_eq!(text.matches("connected to 127.0.0.1:").count(), 2, "{text}");
    for (args, says) in [
        (
            vec!["--tcp", "-s", "0"],
            "-s/--size 0: a tcp probe is 1 to 1048576 bytes",
        ),
        (vec!["--connect", "-s", "64"], "--connect"),
        (
            vec!["-s", "10"],
            "-s/--size 10: a udp probe is 48 to 65507 bytes",
        ),
        (vec!["-i", "0.0001"], "-i/--interval"),
        (vec!["-i", "soon"], "-i/--interval soon"),
        (vec!["-c", "0"], "-c/--count"),
        (vec!["-W", "0"], "-W/--timeout"),
        (
            vec!["--tcp", "--spin", "2s"],
            "--spin 2s: must be 0 to 1 seconds",
        ),
        (vec!["--spin", "1ms"], "--tcp"),
        // A duration with a unit is range-checked as a plain number is.
        (
            vec!["-t", "100000s"],
            "-t/--time 100000s: must be 0 to 86400 seconds",
        ),
    ] {
        let out = flowlab()
            .args(["ping", "127.0.0.1", "-p", &port])
            .args(&args)
            .output()
            .expect("flowlab ping");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn tcp_transactions_are_answered_one_at_a_time() {
    let port = default_server();
    for size in [1, 64] {
        let mut s = spec(port, 500, Duration::ZERO);
        s.mode = PingMode::Tcp;
        s.size = size;
        let r = ping(&s, &AtomicBool::new(false), &Quiet).expect("a TCP run");
        let sum = &r.summary;
        assert_eq!(
            (sum.sent, sum.received, sum.lost),
            (500, 500, 0),
            "size {size}"
        );
        assert_eq!(r.start.protocol, "tcp");
        assert!(sum.replies_per_second.is_some_and(|t| t > 0.0), "{sum:?}");
        // From 48 bytes on a message carries the server's times.
        assert_eq!(sum.server.is_some(), size >= 48, "size {size}");
        assert!(!r.interrupted);
    }
}

#[test]
fn connection_set_ups_are_timed() {
    let port = default_server();
    let mut s = spec(port, 20, Duration::from_millis(5));
    s.mode = PingMode::Connect;
    s.size = 1;
    let r = ping(&s, &AtomicBool::new(false), &Quiet).expect("a connect run");
    assert_eq!(
        (r.summary.sent, r.summary.received),
        (20, 20),
        "{:?}",
        r.summary
    );
    assert_eq!(r.start.protocol, "tcp-connect");
    // Nothing to connect to: every set-up fails, each is lost, the run goes on.
    let closed = free_port();
    let mut s = spec(closed, 3, Duration::from_millis(5));
    s.mode = PingMode::Connect;
    s.size = 1;
    let r = ping(&s, &AtomicBool::new(false), &Quiet).expect("a run");
    assert_eq!((r.summary.sent, r.summary.lost), (3, 3));
}

/// Sixteen TCP echo connections from one address at most: the seventeenth is told the
/// server is busy, and which limit.
#[test]
fn tcp_echo_connections_are_limited_per_address() {
    use std::io::{Read, Write};
    let port = default_server();
    let hello = |c: &mut std::net::TcpStream| {
        c.write_all(&probe::tcp_hello(1)).expect("hello");
        c.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut b = [0u8; 1];
        c.read_exact(&mut b).expect("admission");
        b[0]
    };
    let mut held: Vec<std::net::TcpStream> = (0..16)
        .map(|_| {
            let mut c = connect_from([127, 0, 0, 2], port);
            assert_eq!(hello(&mut c), b'W');
            c
        })
        .collect();
    let mut extra = connect_from([127, 0, 0, 2], port);
    assert_eq!(hello(&mut extra), b'B');
    let mut rest = Vec::new();
    extra.read_to_end(&mut rest).expect("the message");
    let message = String::from_utf8_lossy(&rest);
    assert!(message.contains("16 per address"), "{message}");
    // Another address still gets in, and a closed connection frees its place.
    let mut other = connect_from([127, 0, 0, 3], port);
    assert_eq!(hello(&mut other), b'W');
    held.pop();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut c = connect_from([127, 0, 0, 2], port);
        if hello(&mut c) == b'W' {
            break;
        }
        assert!(Instant::now() < deadline, "the place was not freed");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `flowlab test --latency`: idle probes before the load, loaded probes beside it in
/// every mode, each interval with the round trips of the replies that arrived in it.
#[test]
fn latency_under_load_is_measured_beside_every_kind_of_test() {
    use flowlab_results::spec::Direction;
    use flowlab_results::spec::Transport;
    let port = default_server();
    type Setup = fn(&mut flowlab_results::spec::TestSpec);
    let cases: &[(&str, Setup)] = &[
        ("tcp", |_| {}),
        ("tcp -R", |s| s.direction = Direction::Reverse),
        ("tcp --bidir", |s| s.direction = Direction::Bidir),
        ("tcp -P 2", |s| s.parallel = 2),
        ("udp -b", |s| {
            s.protocol = Transport::Udp;
            s.len = 1400;
            s.bitrate = 50_000_000;
        }),
    ];
    for (name, setup) in cases {
        let mut s = support::spec(port);
        s.amount = Amount::Seconds(2.0);
        s.interval = Some(Duration::from_millis(500));
        s.latency = Some(Duration::from_millis(10));
        setup(&mut s);
        let r = run(&s).unwrap_or_else(|e| panic!("{name}: {e}"));
        let l = r
            .latency
            .as_ref()
            .unwrap_or_else(|| panic!("{name}: no latency"));
        assert_eq!(l.idle.sent, 20, "{name}");
        assert!(l.idle.received >= 18, "{name}: {:?}", l.idle);
        // One every 10 ms from the load's start until it stopped: the test's last
        // interval ended at its 2 s (a few ms later), and the senders stop after that, so
        // at most one per 10 ms of that span plus 100 ms to stop them; about 200 (a busy
        // machine may fall behind its schedule, never ahead of it).
        let test_ns = (r.intervals.last().expect("intervals").end * 1e9) as u64;
        let most = (test_ns + 100_000_000) / 10_000_000 + 1;
        assert!(
            (100..=most).contains(&l.loaded.sent),
            "{name}: {} loaded probes, at most {most}",
            l.loaded.sent
        );
        assert!(l.loaded.loss_percent < 10.0, "{name}: {:?}", l.loaded);
        for p in &l.probes {
            // Timed from the load's start, the first probe goes at once, the last before
            // the load's end.
            assert!(
                p.sent_ns <= test_ns + 100_000_000,
                "{name}: {p:?} past {test_ns}"
            );
        }
        assert!(
            l.probes[0].sent_ns < 100_000_000,
            "{name}: {:?}",
            l.probes[0]
        );
        let mut in_intervals = 0;
        for iv in &r.intervals {
            let got = iv
                .latency
                .as_ref()
                .unwrap_or_else(|| panic!("{name}: no latency in {}-{}", iv.start, iv.end));
            assert!(got.samples >= 10, "{name}: {got:?}");
            in_intervals += got.samples;
        }
        assert!(in_intervals <= l.loaded.received, "{name}");
        let (idle, loaded) = (l.idle.rtt.as_ref().unwrap(), l.loaded.rtt.as_ref().unwrap());
        let added = l.added.median_ms.expect("added");
        assert!(
            (added - (loaded.median_ms - idle.median_ms)).abs() < 1e-9,
            "{name}"
        );
        // A study keeps the medians and the loaded p99 as flat metrics.
        let metrics = flowlab_results::metrics::of_test(&r);
        let metric = |n: &str| metrics.iter().find(|m| m.name == n).map(|m| m.value);
        assert_eq!(metric("latency_idle_ms"), Some(idle.median_ms), "{name}");
        assert_eq!(
            metric("latency_loaded_ms"),
            Some(loaded.median_ms),
            "{name}"
        );
        assert_eq!(
            metric("latency_loaded_p99_ms"),
            Some(loaded.p99_ms),
            "{name}"
        );
    }
}

#[test]
fn the_latency_flag_is_shown_and_checked() {
    let port = default_server();
    let out = flowlab()
        .args(["test", "127.0.0.1", "-p", &port.to_string(), "-t", "1"])
        .arg("--latency=20ms")
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", said(&out));
    assert!(text.contains("[RTT]"), "{text}");
    assert!(
        text.contains("Latency: UDP probes of 64 bytes every 0.02 s"),
        "{text}"
    );
    assert!(text.contains("idle          20"), "{text}");
    // What the load did to the round trip, never a negative addition: on loopback busy
    // CPUs can answer sooner under load.
    assert!(
        text.contains("The load added") || text.contains("Under load the median was"),
        "{text}"
    );
    assert!(!text.contains("added -"), "{text}");
    for bad in ["--latency=0", "--latency=2s", "--latency=fast"] {
        let out = flowlab()
            .args(["test", "127.0.0.1", "-p", &port.to_string(), bad])
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", said(&out));
        assert!(said(&out).contains("--latency"), "{bad}: {}", said(&out));
    }
}

/// A server without the echo service (here: nothing answers on the UDP port) is refused
/// before any load is sent, naming the server.
#[test]
fn a_server_without_the_echo_is_refused_before_the_load() {
    // A TCP listener that accepts and says nothing: any data sent would reach it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    listener.set_nonblocking(true).expect("nonblocking");
    let mut s = support::spec(port);
    s.amount = Amount::Seconds(1.0);
    s.latency = Some(Duration::from_millis(5));
    let e = run(&s).expect_err("no echo");
    let text = e.to_string();
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(text.contains("no data was sent"), "{text}");
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the client connected to a server without the echo"
    );
}
