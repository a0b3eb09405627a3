//! A server on the open internet, and a client talking to servers it does not control:
//! forged datagrams, absurd sizes, slow drips and clients that never end. Each test here
//! failed before the hardening it pins (issue 15).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use flowlab_engine::server::ServerConfig;
use flowlab_proto::params::TestParams;
use flowlab_proto::{Cookie, State, frame};
use flowlab_results::result::StreamDirection;
use flowlab_results::spec::{Amount, Direction};
use flowlab_testkit::*;

/// The (local port, remote port) of every connected UDP socket on this machine.
fn connected_udp_sockets() -> Vec<(u16, u16)> {
    let port = |field: &str| {
        let hex = field.rsplit(':').next().unwrap_or("0");
        u16::from_str_radix(hex, 16).unwrap_or(0)
    };
    ["/proc/net/udp", "/proc/net/udp6"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    let (local, remote) = (port(f.get(1)?), port(f.get(2)?));
                    (remote != 0).then_some((local, remote))
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Waits (up to 3 s) for a UDP data stream between the server's `port` and a client port,
/// and returns the client's port.
fn client_udp_port(server_port: u16) -> u16 {
    for _ in 0..300 {
        let found = connected_udp_sockets().into_iter().find_map(|(l, r)| {
            if l == server_port && r != server_port {
                Some(r)
            } else if r == server_port && l != server_port {
                Some(l)
            } else {
                None
            }
        });
        if let Some(p) = found {
            return p;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("no UDP data stream to port {server_port} appeared");
}

/// Forged data datagrams for a stream of `len`-byte datagrams: one with the highest
/// sequence number (every sequence byte 0xff, whatever the counter width), one a byte too
/// long, one with sequence number 0.
fn forgeries(len: usize) -> Vec<Vec<u8>> {
    let mut top = vec![0u8; len];
    top[8..16].fill(0xff);
    let mut long = vec![0u8; len + 1];
    long[15] = 5;
    vec![top, long, vec![0u8; len]]
}

/// Checks a UDP receiver's totals after the forgeries: each counted foreign, nothing else
/// disturbed, loss never negative, integrity never above 100 %.
fn assert_untouched(r: &flowlab_results::result::TestResult, d: StreamDirection, n: u64) {
    let (snd, rcv) = sum(r, d);
    let u = rcv.udp.expect("UDP receiver totals");
    assert_eq!(
        u.foreign,
        Some(n),
        "each forged datagram counted foreign: {u:?}"
    );
    assert_eq!(
        snd.bytes, rcv.bytes,
        "the forged datagrams' bytes were counted as received"
    );
    assert_eq!(
        snd.packets,
        Some(u.expected),
        "datagrams sent vs expected: {u:?}"
    );
    assert!(u.lost_percent >= 0.0 && u.lost <= u.expected, "{u:?}");
    let i = u.integrity_percent.expect("integrity");
    assert!(i <= 100.0, "integrity {i} above 100 %");
}

/// Tells `tx` when the client's data phase begins: the server has sent TEST_RUNNING, so
/// both ends' data sessions read their stream sockets. Before, what reaches a stream
/// socket is the stream set-up's to read: the server answers a client's repeated UDP
/// handshakes from it, and drops whatever else it finds there.
struct SignalsStart(std::sync::mpsc::Sender<()>);

impl flowlab_engine::client::Observer for SignalsStart {
    fn started(&mut self, _: &flowlab_results::result::StartInfo) {
        let _ = self.0.send(());
    }
}

/// Runs `spec` on a thread of its own; the receiver hears when its data phase begins.
fn run_telling_start(
    spec: flowlab_results::spec::TestSpec,
) -> (
    std::thread::JoinHandle<
        Result<flowlab_results::result::TestResult, flowlab_engine::client::ClientError>,
    >,
    std::sync::mpsc::Receiver<()>,
) {
    let (tx, rx) = std::sync::mpsc::channel();
    let test = std::thread::spawn(move || {
        flowlab_engine::client::run(
            &spec,
            &mut SignalsStart(tx),
            &std::sync::atomic::AtomicBool::new(false),
        )
    });
    (test, rx)
}

/// Waits (up to 10 s) until the client's data phase began.
fn await_data_phase(started: &std::sync::mpsc::Receiver<()>) {
    started
        .recv_timeout(Duration::from_secs(10))
        .expect("the client's data phase began within 10 s");
}

fn udp_spec(port: u16, direction: Direction) -> flowlab_results::spec::TestSpec {
    let mut s = spec(port);
    s.protocol = flowlab_results::spec::Transport::Udp;
    s.len = 1400;
    s.bitrate = 20_000_000;
    s.direction = direction;
    s.amount = Amount::Seconds(2.0);
    s
}

/// A datagram forged from the server's own port to the client's stream (the client
/// receives, `-R`). The server's UDP sockets allow the port to be shared, as any host on
/// the path could spoof it; no privilege needed.
#[test]
fn forged_datagrams_to_a_receiving_client_are_foreign() {
    let port = default_server();
    let (test, started) = run_telling_start(udp_spec(port, Direction::Reverse));
    let client = client_udp_port(port);
    let forger = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)
        .expect("a UDP socket");
    forger.set_reuse_address(true).expect("SO_REUSEADDR");
    let from: SocketAddr = ([127, 0, 0, 1], port).into();
    forger.bind(&from.into()).expect("bind the server's port");
    let forger: UdpSocket = forger.into();
    // Forged while the test's data flows.
    await_data_phase(&started);
    let n = forgeries(1400);
    for d in &n {
        forger
            .send_to(d, ("127.0.0.1", client))
            .expect("send a forged datagram");
    }
    let r = test
        .join()
        .expect("client thread")
        .expect("the test completes");
    assert_untouched(&r, StreamDirection::Down, n.len() as u64);
}

/// A storm of forged datagrams that goes on after the test's end: the receiver neither
/// waits for it to stop nor counts its time. Before, every forged datagram kept the
/// receiver's drain waiting (up to 3 s) and moved its end, so a 1 s test reported its
/// rate over 4 s.
#[test]
fn a_forged_storm_past_the_end_neither_stretches_nor_holds_the_receiver() {
    let port = default_server();
    let mut s = udp_spec(port, Direction::Reverse);
    s.amount = Amount::Seconds(1.0);
    let started = Instant::now();
    let test = std::thread::spawn(move || run(&s));
    let client = client_udp_port(port);
    let forger = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)
        .expect("a UDP socket");
    forger.set_reuse_address(true).expect("SO_REUSEADDR");
    let from: SocketAddr = ([127, 0, 0, 1], port).into();
    forger.bind(&from.into()).expect("bind the server's port");
    let forger: UdpSocket = forger.into();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let storm = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let forged = forgeries(1400);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for d in &forged {
                    let _ = forger.send_to(d, ("127.0.0.1", client));
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };
    let r = test.join().expect("client thread");
    let took = started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    storm.join().expect("storm thread");
    let r = r.expect("the test completes");
    let (snd, rcv) = sum(&r, StreamDirection::Down);
    let u = rcv.udp.expect("UDP receiver totals");
    assert!(
        u.foreign.unwrap_or(0) > 0,
        "the storm reached the receiver: {u:?}"
    );
    assert_eq!(snd.bytes, rcv.bytes, "{u:?}");
    assert!(
        rcv.seconds < snd.seconds + 0.5,
        "the receiver's time {} s against the sender's {} s",
        rcv.seconds,
        snd.seconds
    );
    assert!(took < Duration::from_millis(3500), "the test took {took:?}");
}

/// A datagram forged from the client's address and port to the server's receiving stream
/// (a raw socket writes the UDP header with the client's port: root).
#[test]
fn forged_datagrams_to_a_receiving_server_are_foreign() {
    if !is_root("forging the client's source port with a raw socket") {
        return;
    }
    let port = default_server();
    let (test, started) = run_telling_start(udp_spec(port, Direction::Forward));
    let client = client_udp_port(port);
    let raw = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::RAW,
        Some(socket2::Protocol::UDP),
    )
    .expect("a raw socket");
    // Forged while the test's data flows: once the client's data phase began, the
    // server's stream socket is connected to the client's and its data session reads it
    // (forged earlier, they reached the listening socket, or the stream socket while the
    // set-up still drained it, and counted nowhere).
    await_data_phase(&started);
    let n = forgeries(1400);
    for d in &n {
        // UDP header: source port, destination port, length, checksum 0 (none, IPv4).
        let mut wire = Vec::with_capacity(8 + d.len());
        wire.extend_from_slice(&client.to_be_bytes());
        wire.extend_from_slice(&port.to_be_bytes());
        wire.extend_from_slice(&u16::try_from(8 + d.len()).unwrap().to_be_bytes());
        wire.extend_from_slice(&[0, 0]);
        wire.extend_from_slice(d);
        let to: SocketAddr = ([127, 0, 0, 1], 0).into();
        raw.send_to(&wire, &to.into())
            .expect("send a forged datagram");
    }
    let r = test
        .join()
        .expect("client thread")
        .expect("the test completes");
    assert_untouched(&r, StreamDirection::Up, n.len() as u64);
}

/// A peer that asks the server for a window of 2^62 bytes is refused, and a window just
/// under the limit is served (the kernel caps it; the result says what it granted).
#[test]
fn a_peers_absurd_window_is_refused_and_a_large_one_reported_as_granted() {
    let port = default_server();
    let mut s = spec(port);
    s.amount = Amount::Bytes(1 << 20);
    s.window = 1 << 62;
    let err = run(&s).expect_err("a window of 2^62").to_string();
    assert!(err.contains("socket buffer") && err.contains("-w"), "{err}");
    s.window = flowlab_results::spec::MAX_WINDOW;
    let r = run(&s).expect("the largest window is served");
    let granted = end(&r).streams[0]
        .server_socket
        .as_ref()
        .expect("the server reports its socket");
    assert!(
        granted.rcvbuf > 0 && granted.rcvbuf < flowlab_results::spec::MAX_WINDOW,
        "granted {granted:?}"
    );
}

/// Clients that send their parameters a byte every 200 ms, each byte well inside the
/// read timeout, used to hold a slot each for as long as they liked: now they hold none,
/// and each is cut off at the handshake deadline.
#[test]
fn a_slow_drip_holds_no_slot_and_is_cut_at_the_handshake_deadline() {
    let handshake = Duration::from_secs(2);
    let port = start_server(ServerConfig {
        max_tests: 2,
        idle_timeout: Duration::from_secs(2),
        handshake_timeout: handshake,
        ..ServerConfig::default()
    });
    let drips: Vec<_> = (1..=3u8)
        .map(|tag| {
            std::thread::spawn(move || {
                let mut c = at_param_exchange(port, tag);
                let start = Instant::now();
                let params = TestParams {
                    time: 1,
                    parallel: 1,
                    tcp: Some(true),
                    ..TestParams::default()
                };
                for b in frame::encode(&params) {
                    if c.write_all(&[b]).is_err() || start.elapsed() > Duration::from_secs(10) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
                start.elapsed()
            })
        })
        .collect();
    // The three drips connected and dripping before the real test comes.
    assert!(
        wait_until(Duration::from_secs(5), || established_to(port) >= 3),
        "the drips did not connect"
    );
    // Three drips, two slots: a real test still runs.
    let mut s = spec(port);
    s.amount = Amount::Bytes(1 << 20);
    let r = run(&s).expect("a slow drip holds no slot");
    assert_eq!(sum(&r, StreamDirection::Up).1.bytes, 1 << 20);
    for d in drips {
        let held = d.join().expect("drip thread");
        // Cut at the deadline; the dripping client notices at its next write or two.
        assert!(
            held < handshake + Duration::from_millis(1500),
            "a drip held its connection for {held:?}"
        );
    }
}

/// A reverse UDP test whose client froze once the test started (never reads its control
/// connection, never sends TEST_END): the server stops sending at the test's time plus
/// the grace, not 40 s later.
#[test]
fn a_frozen_clients_reverse_udp_test_ends_at_its_time_plus_the_grace() {
    let grace = ServerConfig::default().end_grace;
    let port = start_server(ServerConfig {
        idle_timeout: Duration::from_secs(30),
        ..ServerConfig::default()
    });
    let mut c = at_param_exchange(port, 9);
    let p = TestParams {
        udp: Some(true),
        reverse: true,
        time: 1,
        parallel: 1,
        len: 1000,
        bandwidth: 2_000_000,
        ..TestParams::default()
    };
    c.write_all(&frame::encode(&p)).expect("params");
    let mut b = [0u8; 1];
    c.read_exact(&mut b).expect("state");
    assert_eq!(State::from_byte(b[0]), Ok(State::CreateStreams));
    let u = udp_to(port);
    udp_handshake(&u).expect("the UDP stream opens");
    // A second of silence means the server stopped sending.
    u.set_read_timeout(Some(Duration::from_secs(1)))
        .expect("timeout");
    let mut buf = [0u8; 2048];
    let mut two = [0u8; 2];
    c.read_exact(&mut two).expect("start and running");
    let started = Instant::now();
    // The client is frozen from here on; it only watches the datagrams come.
    let mut last = started;
    while let Ok(n) = u.recv(&mut buf) {
        assert!(n > 0);
        last = Instant::now();
        if started.elapsed() > Duration::from_secs(15) {
            break;
        }
    }
    let sent_for = last - started;
    assert!(
        sent_for > Duration::from_millis(900),
        "the test ran its time: {sent_for:?}"
    );
    assert!(
        sent_for < Duration::from_secs(1) + grace + Duration::from_millis(1000),
        "the server sent for {sent_for:?} to a client that stopped answering"
    );
    // And it said so on the control connection.
    c.read_exact(&mut b).expect("a message before the close");
    assert_eq!(State::from_byte(b[0]), Ok(State::ServerTerminate));
}

/// An upload of more bytes than fit in `--max-duration` ends at that duration plus the
/// grace (the docs promise it), on the server and at the client.
#[test]
fn an_upload_ends_at_max_duration_plus_the_grace() {
    let max = Duration::from_secs(2);
    let grace = ServerConfig::default().end_grace;
    let port = start_server(ServerConfig {
        max_duration: Some(max),
        idle_timeout: Duration::from_secs(5),
        ..ServerConfig::default()
    });
    let mut s = spec(port);
    s.amount = Amount::Bytes(1 << 40);
    s.bitrate = 100_000_000;
    let started = Instant::now();
    let outcome = run(&s);
    let took = started.elapsed();
    assert!(
        took < max + grace + Duration::from_millis(1500),
        "the upload ran {took:?} under --max-duration {max:?}: {outcome:?}"
    );
    match outcome {
        Ok(r) => assert!(end(&r).interrupted, "the result says it was cut short"),
        Err(e) => assert!(e.to_string().contains("max-duration"), "{e}"),
    }
}

/// Two hundred idle connections from one address: beyond the per-source limit each is
/// closed at once (no thread, no wait), the rest at the handshake deadline; then idle
/// connections from six more addresses fill every place; a real test from another
/// address completes byte-exact meanwhile. Before the limits, every connection got a
/// thread and was held for the idle timeout.
#[test]
fn a_flood_of_idle_connections_is_bounded_and_a_real_test_still_runs() {
    let handshake = Duration::from_secs(3);
    let port = start_server(ServerConfig {
        handshake_timeout: handshake,
        max_handshakes: 32,
        max_handshakes_per_source: 8,
        ..ServerConfig::default()
    });
    let mut flood: Vec<TcpStream> = (0..200)
        .map(|_| connect_from([127, 0, 0, 2], port))
        .collect();
    let from_three: Vec<TcpStream> = (0..30)
        .map(|_| connect_from([127, 0, 0, 3], port))
        .collect();
    // Those beyond the limit are closed as soon as the server accepts them; the held ones
    // stay open until the handshake deadline (3 s), well after this wait.
    let wait = Instant::now() + Duration::from_secs(2);
    loop {
        flood.retain_mut(|c| !closed_within(c, Duration::from_millis(1)));
        if flood.len() <= 8 || Instant::now() > wait {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(flood.len(), 8, "connections from one address held at once");
    // Many addresses fill every place (32): the oldest give way to the newest, so an
    // honest client still gets in.
    let many: Vec<TcpStream> = (4..10u8)
        .flat_map(|a| (0..8).map(move |_| connect_from([127, 0, 0, a], port)))
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut s = spec(port);
    s.amount = Amount::Bytes(3_000_007);
    let r = run(&s).expect("a real test runs beside the flood");
    let (snd, rcv) = sum(&r, StreamDirection::Up);
    assert_eq!((snd.bytes, rcv.bytes), (3_000_007, 3_000_007));
    // The held ones are closed at the deadline.
    let still = flood
        .iter_mut()
        .map(|c| closed_within(c, handshake + Duration::from_secs(1)))
        .filter(|closed| !closed)
        .count();
    assert_eq!(still, 0, "connections held past the handshake deadline");
    drop((from_three, many));
}

/// A hundred and twenty connections from one address as fast as it can open them: the
/// first forty (four seconds' worth at --handshake-rate 10) and what the rate refills
/// meanwhile are held, the rest closed at accept; a real test from another address
/// completes byte-exact meanwhile. Before the rate limit, every one was held.
#[test]
fn connections_beyond_the_handshake_rate_are_closed_at_accept() {
    let port = start_server(ServerConfig {
        handshake_timeout: Duration::from_secs(10),
        max_handshakes_per_source: 1000,
        handshake_rate: 10,
        ..ServerConfig::default()
    });
    let t0 = Instant::now();
    // Under the listen backlog (128), so every connect completes at once.
    let mut flood: Vec<TcpStream> = (0..120)
        .map(|_| connect_from([127, 0, 0, 2], port))
        .collect();
    let mut s = spec(port);
    s.amount = Amount::Bytes(2_000_003);
    let r = run(&s).expect("a real test runs beside the flood");
    let (snd, rcv) = sum(&r, StreamDirection::Up);
    assert_eq!((snd.bytes, rcv.bytes), (2_000_003, 2_000_003));
    // The refused are closed as soon as the server has accepted them.
    let settle = Instant::now() + Duration::from_secs(2);
    loop {
        flood.retain_mut(|c| !closed_within(c, Duration::from_millis(1)));
        if flood.len() <= 40 || Instant::now() > settle {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Every accept happened within `t0.elapsed()`: the bucket (40, refilled at 10/s
    // from t0) cannot have let more through.
    let bound = 40 + (10.0 * t0.elapsed().as_secs_f64()).ceil() as usize;
    assert!(
        (40..=bound).contains(&flood.len()),
        "{} connections held; the burst is 40, the bound {bound}",
        flood.len()
    );
}

/// xorshift64: the fuzz harness's generator, seeded so a failure replays exactly.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn bytes(&mut self, max: u64) -> Vec<u8> {
        let n = self.below(max + 1);
        (0..n).map(|_| self.next() as u8).collect()
    }
    /// Bytes that look like protocol: state bytes, a length prefix, JSON punctuation, or
    /// anything.
    fn protocolish(&mut self, max: u64) -> Vec<u8> {
        const STATES: [u8; 14] = [1, 2, 4, 9, 10, 11, 12, 13, 14, 16, 0xff, 0xfe, 50, 0];
        match self.below(4) {
            0 => (0..self.below(max) + 1)
                .map(|_| STATES[self.below(STATES.len() as u64) as usize])
                .collect(),
            1 => {
                let mut v = (self.next() as u32 % 100_000).to_be_bytes().to_vec();
                v.extend(self.bytes(max));
                v
            }
            2 => {
                let body: Vec<u8> = (0..self.below(max) + 1)
                    .map(|_| b"{}[]\":,0123456789truefalsenul-e.\\ "[self.below(34) as usize])
                    .collect();
                let mut v = (body.len() as u32).to_be_bytes().to_vec();
                v.extend(body);
                v
            }
            _ => self.bytes(max),
        }
    }
}

/// Where the harness starts sending garbage.
#[derive(Debug, Clone, Copy)]
enum Stage {
    /// Instead of a cookie.
    Cookie,
    /// Instead of the parameters.
    Parameters,
    /// On a data connection, instead of its cookie.
    DataCookie,
    /// On the control connection while the test runs.
    Running,
    /// Instead of the client's results.
    Results,
    /// Datagrams to the server's UDP port.
    Udp,
}

/// A hand-driven client up to `stage`, then `garbage` on the connection that stage is
/// about; everything is dropped at the end (the server must clean up after it).
fn attack(port: u16, stage: Stage, tag: u8, garbage: &[u8]) {
    let send = |c: &mut TcpStream, b: &[u8]| {
        let _ = c.write_all(b);
    };
    let state = |c: &mut TcpStream| -> Option<State> {
        let mut b = [0u8; 1];
        c.read_exact(&mut b).ok()?;
        State::from_byte(b[0]).ok()
    };
    if let Stage::Udp = stage {
        let u = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let _ = u.send_to(garbage, ("127.0.0.1", port));
        return;
    }
    let Ok(mut c) = TcpStream::connect(("127.0.0.1", port)) else {
        return;
    };
    c.set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    if let Stage::Cookie = stage {
        return send(&mut c, garbage);
    }
    let cookie = Cookie::from_random([tag; 36]).encode();
    send(&mut c, &cookie);
    if state(&mut c) != Some(State::ParamExchange) {
        return;
    }
    if let Stage::Parameters = stage {
        return send(&mut c, garbage);
    }
    let p = TestParams {
        tcp: Some(true),
        time: 1,
        parallel: 1,
        len: 16 * 1024,
        ..TestParams::default()
    };
    send(&mut c, &frame::encode(&p));
    if state(&mut c) != Some(State::CreateStreams) {
        return;
    }
    let Ok(mut data) = TcpStream::connect(("127.0.0.1", port)) else {
        return;
    };
    if let Stage::DataCookie = stage {
        return send(&mut data, garbage);
    }
    send(&mut data, &cookie);
    if state(&mut c) != Some(State::TestStart) || state(&mut c) != Some(State::TestRunning) {
        return;
    }
    send(&mut data, &[0u8; 64 * 1024]);
    if let Stage::Running = stage {
        return send(&mut c, garbage);
    }
    send(&mut c, &[State::TestEnd.to_byte()]);
    while let Some(st) = state(&mut c) {
        if st == State::ExchangeResults {
            return send(&mut c, garbage);
        }
    }
}

/// The server end to end under generated input at every protocol state (a fixed seed,
/// so a failure replays): after each attack it still answers an honest client correctly,
/// and its only test slot is free again (with one slot, an honest test that runs proves
/// the attack's test let go of it).
#[test]
fn generated_garbage_at_every_protocol_state_leaves_the_server_serving() {
    let port = start_server(ServerConfig {
        max_tests: 1,
        idle_timeout: Duration::from_secs(1),
        handshake_timeout: Duration::from_secs(1),
        end_grace: Duration::from_secs(1),
        ..ServerConfig::default()
    });
    let stages = [
        Stage::Cookie,
        Stage::Parameters,
        Stage::DataCookie,
        Stage::Running,
        Stage::Results,
        Stage::Udp,
    ];
    let mut rng = Rng(0x5eed_f10f_1ab5_0001);
    for round in 0..60u32 {
        let stage = stages[round as usize % stages.len()];
        let garbage = rng.protocolish(300);
        attack(port, stage, (round % 200) as u8 + 1, &garbage);
        // The attack's connections are closed: an honest test must get the slot within
        // the server's timeouts (1 s each), and run byte-exact.
        let mut s = spec(port);
        s.amount = Amount::Bytes(100_003);
        let started = Instant::now();
        let r = loop {
            match run(&s) {
                Ok(r) => break r,
                Err(flowlab_engine::client::ClientError::Busy)
                    if started.elapsed() < Duration::from_secs(4) =>
                {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("round {round}, {stage:?}, {garbage:?}: {e}"),
            }
        };
        let (snd, rcv) = sum(&r, StreamDirection::Up);
        assert_eq!(
            (snd.bytes, rcv.bytes),
            (100_003, 100_003),
            "round {round}, {stage:?}"
        );
    }
}

/// A client that has its results but has not yet said IPERF_DONE (it is printing, or
/// slow, or gone) holds no slot: with one slot, the next test runs at once. Were the slot
/// held until IPERF_DONE, that test would be told the server is busy until the idle
/// timeout ended the first.
#[test]
fn a_client_that_has_its_results_holds_no_slot() {
    let port = start_server(ServerConfig {
        max_tests: 1,
        idle_timeout: Duration::from_secs(30),
        ..ServerConfig::default()
    });
    let state = |c: &mut TcpStream| -> State {
        let mut b = [0u8; 1];
        c.read_exact(&mut b).expect("a state from the server");
        State::from_byte(b[0]).expect("a known state")
    };
    let mut c = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let cookie = Cookie::from_random([7; 36]).encode();
    c.write_all(&cookie).expect("cookie");
    assert_eq!(state(&mut c), State::ParamExchange);
    let p = TestParams {
        tcp: Some(true),
        time: 10,
        parallel: 1,
        len: 16 * 1024,
        ..TestParams::default()
    };
    c.write_all(&frame::encode(&p)).expect("parameters");
    assert_eq!(state(&mut c), State::CreateStreams);
    let mut data = TcpStream::connect(("127.0.0.1", port)).expect("data connection");
    data.write_all(&cookie).expect("data cookie");
    assert_eq!(state(&mut c), State::TestStart);
    assert_eq!(state(&mut c), State::TestRunning);
    data.write_all(&[0u8; 64 * 1024]).expect("data");
    c.write_all(&[State::TestEnd.to_byte()]).expect("TEST_END");
    assert_eq!(state(&mut c), State::ExchangeResults);
    let mine = flowlab_proto::results::PeerResults {
        sender_has_retransmits: 0,
        streams: vec![flowlab_proto::results::StreamResults {
            id: 1,
            bytes: 64 * 1024,
            ..Default::default()
        }],
        ..Default::default()
    };
    c.write_all(&frame::encode(&mine))
        .expect("the client's results");
    let mut len = [0u8; 4];
    c.read_exact(&mut len)
        .expect("the server's results' length");
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    c.read_exact(&mut body).expect("the server's results");
    let theirs: flowlab_proto::results::PeerResults =
        frame::decode(&body).expect("the server's results parse");
    assert_eq!(
        theirs.streams[0].bytes,
        64 * 1024,
        "the server counted it all"
    );
    assert_eq!(state(&mut c), State::DisplayResults);
    // No IPERF_DONE yet: `c` and `data` stay open while the next test runs.
    let mut s = spec(port);
    s.amount = Amount::Bytes(100_003);
    let r = run(&s).expect("the slot was free");
    assert_eq!(sum(&r, StreamDirection::Up).1.bytes, 100_003);
    c.write_all(&[State::IperfDone.to_byte()])
        .expect("IPERF_DONE");
    drop(data);
}
