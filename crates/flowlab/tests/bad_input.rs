//! Hostile and broken peers: after each, the same server still completes a normal test.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use flowlab_engine::client::ClientError;
use flowlab_engine::server::ServerConfig;
use flowlab_proto::params::TestParams;
use flowlab_proto::{Cookie, State, frame};
use flowlab_results::result::StreamDirection;
use flowlab_results::spec::Amount;
use support::*;

fn server() -> u16 {
    start_server(ServerConfig {
        idle_timeout: Duration::from_secs(1),
        handshake_timeout: Duration::from_secs(1),
        ..ServerConfig::default()
    })
}

/// A normal test that must still pass.
fn still_serves(port: u16) {
    let mut s = spec(port);
    s.amount = Amount::Bytes(1 << 20);
    let r = run(&s).expect("the server still serves");
    let (snd, rcv) = sum(&r, StreamDirection::Up);
    assert_eq!((snd.bytes, rcv.bytes), (1 << 20, 1 << 20));
}

fn connect(port: u16) -> TcpStream {
    let c = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    c
}

#[test]
fn garbage_on_the_port() {
    let port = server();
    let mut c = connect(port);
    c.write_all(b"GET / HTTP/1.1\r\nHost: flowlab\r\nUser-Agent: scanner\r\n\r\n")
        .expect("write");
    assert!(
        closed_within(&mut c, Duration::from_secs(5)),
        "garbage must be dropped"
    );
    still_serves(port);
}

#[test]
fn wrong_cookie_alphabet() {
    let port = server();
    let mut c = connect(port);
    let mut cookie = Cookie::from_random([1; 36]).encode();
    cookie[0] = b'!';
    c.write_all(&cookie).expect("write");
    assert!(closed_within(&mut c, Duration::from_secs(5)));
    still_serves(port);
}

#[test]
fn oversized_json_length() {
    let port = server();
    let mut c = at_param_exchange(port, 7);
    c.write_all(&u32::MAX.to_be_bytes()).expect("write");
    assert!(closed_within(&mut c, Duration::from_secs(5)));
    still_serves(port);
}

#[test]
fn zero_json_length() {
    let port = server();
    let mut c = at_param_exchange(port, 7);
    c.write_all(&0u32.to_be_bytes()).expect("write");
    assert!(closed_within(&mut c, Duration::from_secs(5)));
    still_serves(port);
}

#[test]
fn invalid_json_parameters() {
    let port = server();
    for body in [
        &b"{\"tcp\": tru"[..],
        b"[1,2,3]",
        b"{\"udp\":true,\"parallel\":\"many\"}",
        b"\xff\xfe\xfd",
    ] {
        let mut c = at_param_exchange(port, 7);
        c.write_all(&(body.len() as u32).to_be_bytes())
            .expect("write");
        c.write_all(body).expect("write");
        assert!(closed_within(&mut c, Duration::from_secs(5)));
    }
    still_serves(port);
}

/// An iperf3 3.21 client's `-m` (its parameters as it sends them) is never served as
/// plain TCP: a server that makes MPTCP sockets takes the parameters, then refuses the
/// test when its stream arrives as plain TCP ("unable to accept stream connection:
/// protocol not supported"); one that makes none refuses the parameters so. The server
/// serves on.
#[test]
fn an_mptcp_client_is_never_served_as_plain_tcp() {
    let port = server();
    let mut c = at_param_exchange(port, 8);
    send_iperf3_params(&mut c, "3.21-mptcp");
    // SAFETY: socket(2) and close(2) on a descriptor of this test's own.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_MPTCP) };
    let mptcp = fd >= 0;
    if mptcp {
        unsafe { libc::close(fd) };
        let mut state = [0u8; 1];
        c.read_exact(&mut state).expect("a state");
        assert_eq!(State::from_byte(state[0]), Ok(State::CreateStreams));
        // The stream, by its cookie, as plain TCP: what an MPTCP connection that fell
        // back on the way arrives as.
        let mut stream = connect(port);
        stream
            .write_all(&Cookie::from_random([8; 36]).encode())
            .expect("the stream's cookie");
    }
    let mut b = [0u8; 9];
    c.read_exact(&mut b).expect("server error");
    assert_eq!(State::from_byte(b[0]), Ok(State::ServerError));
    let body: [u8; 8] = b[1..].try_into().expect("8 bytes");
    let code = match mptcp {
        true => flowlab_proto::state::error_code::STREAM_ACCEPT,
        false => flowlab_proto::state::error_code::RECV_PARAMS,
    };
    assert_eq!(
        flowlab_proto::state::decode_server_error(&body),
        (code, libc::EPROTONOSUPPORT)
    );
    still_serves(port);
}

#[test]
fn parameters_out_of_range_get_a_server_error() {
    let port = server();
    let mut c = at_param_exchange(port, 7);
    let p = TestParams {
        tcp: Some(true),
        time: 1,
        parallel: 1000,
        ..TestParams::default()
    };
    c.write_all(&frame::encode(&p)).expect("write");
    let mut b = [0u8; 9];
    c.read_exact(&mut b).expect("server error");
    assert_eq!(State::from_byte(b[0]), Ok(State::ServerError));
    still_serves(port);
}

#[test]
fn a_stalled_client_does_not_wedge_the_server() {
    let port = server();
    // Connected, silent: no cookie at all, and another that stops after the cookie.
    let mut silent = connect(port);
    let mut half = at_param_exchange(port, 7);
    // Others are served meanwhile.
    still_serves(port);
    // And the stalled ones are dropped at the handshake deadline.
    assert!(closed_within(&mut silent, Duration::from_secs(5)));
    assert!(closed_within(&mut half, Duration::from_secs(5)));
    still_serves(port);
}

#[test]
fn a_client_that_vanishes_mid_test() {
    let port = server();
    let mut c = at_param_exchange(port, 7);
    let p = TestParams {
        tcp: Some(true),
        time: 30,
        parallel: 1,
        len: 1000,
        ..TestParams::default()
    };
    c.write_all(&frame::encode(&p)).expect("params");
    let mut b = [0u8; 1];
    c.read_exact(&mut b).expect("state");
    assert_eq!(State::from_byte(b[0]), Ok(State::CreateStreams));
    let mut data = connect(port);
    data.write_all(&Cookie::from_random([7; 36]).encode())
        .expect("stream cookie");
    let mut two = [0u8; 2];
    c.read_exact(&mut two).expect("start and running");
    assert_eq!(
        two,
        [State::TestStart.to_byte(), State::TestRunning.to_byte()]
    );
    data.write_all(&[0u8; 10_000]).expect("some data");
    // Gone without a word.
    drop(data);
    drop(c);
    still_serves(port);
    // A client that never opens its streams is dropped too.
    let mut c = at_param_exchange(port, 7);
    c.write_all(&frame::encode(&p)).expect("params");
    c.read_exact(&mut b).expect("create streams");
    assert!(
        closed_within(&mut c, Duration::from_secs(5)),
        "a test whose streams never come is dropped"
    );
    still_serves(port);
}

#[test]
fn busy_beyond_max_tests() {
    let (port, log) = start_server_logging(ServerConfig {
        max_tests: 1,
        idle_timeout: Duration::from_secs(2),
        ..ServerConfig::default()
    });
    // A test that runs for two seconds holds the only slot (a connection that has not
    // sent its parameters holds none).
    let mut long = spec(port);
    long.amount = Amount::Seconds(2.0);
    long.bitrate = 10_000_000;
    let hold = std::thread::spawn(move || run(&long));
    let _idle = at_param_exchange(port, 7);
    await_test_started(&log);
    let mut s = spec(port);
    s.amount = Amount::Bytes(1000);
    let err = run(&s).expect_err("the only slot is taken");
    assert!(matches!(err, ClientError::Busy), "{err}");
    hold.join()
        .expect("holder")
        .expect("the holder's test ends well");
    still_serves(port);
}

#[test]
fn server_limits_are_enforced_with_a_clear_message() {
    let port = start_server(ServerConfig {
        max_duration: Some(Duration::from_secs(2)),
        max_bitrate: Some(100_000_000),
        max_bytes: Some(10 << 20),
        idle_timeout: Duration::from_secs(2),
        ..ServerConfig::default()
    });
    let mut s = spec(port);
    s.amount = Amount::Seconds(5.0);
    s.bitrate = 10_000_000;
    let err = run(&s).expect_err("too long").to_string();
    assert!(err.contains("--max-duration"), "{err}");
    s.amount = Amount::Seconds(1.0);
    s.bitrate = 0;
    let err = run(&s).expect_err("unlimited rate").to_string();
    assert!(err.contains("--max-bitrate"), "{err}");
    s.amount = Amount::Bytes(20 << 20);
    s.bitrate = 50_000_000;
    let err = run(&s).expect_err("too many bytes").to_string();
    assert!(err.contains("--max-bytes"), "{err}");
    s.amount = Amount::Bytes(1 << 20);
    let r = run(&s).expect("within the limits");
    assert_eq!(sum(&r, StreamDirection::Up).1.bytes, 1 << 20);
}

/// A UDP client that missed the server's handshake reply sends the handshake again; the
/// server answers again, before and after the test started.
#[test]
fn a_repeated_udp_handshake_is_answered_again() {
    let port = server();
    let mut c = at_param_exchange(port, 7);
    let p = TestParams {
        udp: Some(true),
        time: 2,
        parallel: 2,
        len: 1000,
        bandwidth: 1_000_000,
        ..TestParams::default()
    };
    c.write_all(&frame::encode(&p)).expect("params");
    let mut b = [0u8; 1];
    c.read_exact(&mut b).expect("state");
    assert_eq!(State::from_byte(b[0]), Ok(State::CreateStreams));
    let handshake = |u: &std::net::UdpSocket, what: &str| {
        udp_handshake(u).unwrap_or_else(|e| panic!("{what}: {e}"));
    };
    let first = udp_to(port);
    handshake(&first, "first stream");
    handshake(
        &first,
        "first stream, asked again while the server waits for the second",
    );
    let second = udp_to(port);
    handshake(&second, "second stream");
    let mut two = [0u8; 2];
    c.read_exact(&mut two).expect("start and running");
    assert_eq!(
        two,
        [State::TestStart.to_byte(), State::TestRunning.to_byte()]
    );
    handshake(&second, "second stream, asked again once the test runs");
    drop((first, second, c));
    still_serves(port);
}

/// `-w 4G` used to wrap around to a send buffer of a few KiB (the kernel takes an int).
#[test]
fn a_window_of_2_gib_or_more_is_refused_not_wrapped() {
    for w in ["2G", "4G", "8G", "100T"] {
        let out = assert_cmd::Command::cargo_bin("flowlab")
            .expect("the flowlab binary")
            .args(["test", "127.0.0.1", "-p", "9", "-t", "1", "-w", w])
            .output()
            .expect("run flowlab");
        let text = said(&out);
        assert_eq!(out.status.code(), Some(2), "-w {w}: {text}");
        assert!(
            text.contains("-w/--window") && text.contains("2147483647"),
            "-w {w}: {text}"
        );
    }
    let out = assert_cmd::Command::cargo_bin("flowlab")
        .expect("the flowlab binary")
        .args(["test", "127.0.0.1", "-p", "9", "--recv-window", "3G"])
        .output()
        .expect("run flowlab");
    assert!(said(&out).contains("--recv-window"), "{}", said(&out));
}

/// `-t 18446744073709551615` used to be accepted (a test of 585 billion years).
#[test]
fn a_test_longer_than_a_day_is_refused() {
    for t in ["86401", "18446744073709551615"] {
        let out = assert_cmd::Command::cargo_bin("flowlab")
            .expect("the flowlab binary")
            .args(["test", "127.0.0.1", "-p", "9", "-t", t])
            .output()
            .expect("run flowlab");
        let text = said(&out);
        assert_eq!(out.status.code(), Some(2), "-t {t}: {text}");
        assert!(text.contains("at most 86400 seconds"), "-t {t}: {text}");
    }
}
