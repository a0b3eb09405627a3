//! flowlab's QUIC perf client against its server on loopback: exact byte counts both
//! ways, time-bounded streams, several streams on one connection or a connection each,
//! the stack's figures, and the server's limits.

use std::time::Duration;

use flowlab_proto::quic_perf::ALPN;
use flowlab_quic::client::{self, Amount, Congestion, Direction, Spec, StreamSpec};
use flowlab_quic::server::{Limits, Server};
use flowlab_web::tls::Certificate;

fn server(limits: Limits) -> Server {
    let cert = Certificate::SelfSigned {
        names: vec!["localhost".into()],
    };
    let tls = cert
        .load()
        .expect("a certificate")
        .server_config(&[ALPN], &cert)
        .expect("a TLS configuration");
    Server::start("127.0.0.1:0".parse().expect("an address"), tls, limits).expect("a server")
}

fn spec(s: &Server, direction: Direction, amount: Amount) -> Spec {
    Spec {
        server: s.local_addr().expect("its address"),
        server_name: "localhost".into(),
        streams: vec![StreamSpec { direction, amount }],
        connection_each: false,
        congestion: Congestion::default(),
        connect_timeout: Duration::from_secs(5),
    }
}

#[test]
fn every_byte_asked_for_is_counted_both_ways() {
    let s = server(Limits::default());
    for direction in [Direction::Upload, Direction::Download] {
        let f = client::run(&spec(&s, direction, Amount::Bytes(32 << 20)))
            .unwrap_or_else(|e| panic!("{direction:?}: {e}"));
        assert_eq!(f.streams[0].error, None, "{direction:?}");
        assert_eq!(f.bytes(), 32 << 20, "{direction:?}");
        assert_eq!(f.streams.len(), 1);
        assert!(f.bits_per_second() > 0.0);
        let path = &f.connections[0];
        // At least the bytes moved crossed the wire, QUIC's headers on top.
        let wire = match direction {
            Direction::Upload => path.udp_tx_bytes,
            Direction::Download => path.udp_rx_bytes,
        };
        assert!(wire > 32 << 20, "{direction:?}: {wire} bytes on the wire");
        assert!(path.rtt > Duration::ZERO && path.cwnd > 0, "{path:?}");
        assert_eq!(f.handshakes.len(), 1);
    }
}

#[test]
fn streams_run_for_their_time_on_one_connection_or_a_connection_each() {
    let s = server(Limits::default());
    for (direction, connection_each) in [
        (Direction::Download, false),
        (Direction::Upload, false),
        (Direction::Download, true),
    ] {
        let mut sp = spec(&s, direction, Amount::Time(Duration::from_millis(700)));
        sp.streams = vec![sp.streams[0]; 3];
        sp.connection_each = connection_each;
        let what = format!("{direction:?}, a connection each: {connection_each}");
        let f = client::run(&sp).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(f.streams.len(), 3, "{what}");
        for st in &f.streams {
            assert!(st.bytes > 0 && st.error.is_none(), "{what}: {st:?}");
            // The stream ran its time, and not much more than the answer's tail.
            assert!(st.seconds >= 0.7 && st.seconds < 5.0, "{what}: {st:?}");
        }
        let connections: Vec<usize> = f.streams.iter().map(|s| s.connection).collect();
        let expected = if connection_each {
            vec![0, 1, 2]
        } else {
            vec![0, 0, 0]
        };
        assert_eq!(connections, expected, "{what}");
        assert_eq!(f.connections.len(), if connection_each { 3 } else { 1 });
    }
}

#[test]
fn a_stream_asking_for_more_than_the_server_allows_is_refused() {
    let s = server(Limits {
        max_bytes: Some(1 << 20),
        ..Limits::default()
    });
    let f = client::run(&spec(&s, Direction::Download, Amount::Bytes(2 << 20))).expect("a test");
    let e = f.streams[0].error.as_deref().expect("the stream refused");
    assert!(e.contains("reset by peer: error 2"), "{e}");
    assert_eq!(f.bytes(), 0);
    // Within the limit, served.
    let f = client::run(&spec(&s, Direction::Download, Amount::Bytes(1 << 20))).expect("served");
    assert_eq!(f.bytes(), 1 << 20);
}
