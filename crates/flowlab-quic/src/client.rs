//! A measuring client of the QUIC performance protocol: streams that upload or download
//! a number of bytes or for a time, on one connection or a connection each, timed as the
//! draft times them (from the stream's opening to the server's end of it) with the
//! stack's own figures for each connection (round trip, congestion window, losses).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flowlab_web::tls::AnyCertificate;
use quinn::crypto::rustls::QuicClientConfig;

use crate::{CHUNK, DATA, QuicError, transport};
use flowlab_proto::quic_perf::{Ask, code};

/// Which way a stream's bytes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Client to server: the stream asks for nothing back.
    Upload,
    /// Server to client: the stream asks for the bytes and sends nothing.
    Download,
}

/// How much each stream moves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Amount {
    Bytes(u64),
    Time(Duration),
}

/// A test to run against a perf server.
#[derive(Debug, Clone)]
pub struct Spec {
    pub server: SocketAddr,
    /// The name the server's certificate is asked for (SNI).
    pub server_name: String,
    pub direction: Direction,
    pub amount: Amount,
    /// Streams at once.
    pub streams: u32,
    /// Each stream on a connection of its own (else all on one).
    pub connection_each: bool,
}

/// One stream's figures, at the client.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamFigures {
    /// Which connection carried it (from 0).
    pub connection: usize,
    pub bytes: u64,
    /// From the stream's opening to the server's end of it.
    pub seconds: f64,
}

/// What the QUIC stack says of a connection once its streams are done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathFigures {
    /// The smoothed round trip.
    pub rtt: Duration,
    /// The congestion window, bytes.
    pub cwnd: u64,
    pub congestion_events: u64,
    pub lost_packets: u64,
    pub lost_bytes: u64,
    pub sent_packets: u64,
    /// The path's MTU as discovered.
    pub mtu: u16,
    /// UDP datagrams and bytes sent and received, QUIC's overhead included.
    pub udp_tx_bytes: u64,
    pub udp_rx_bytes: u64,
}

/// A test's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    pub streams: Vec<StreamFigures>,
    pub connections: Vec<PathFigures>,
    /// Each connection's handshake.
    pub handshakes: Vec<Duration>,
}

impl Figures {
    /// All the streams' bytes.
    pub fn bytes(&self) -> u64 {
        self.streams.iter().map(|s| s.bytes).sum()
    }

    /// The streams' bytes over the longest stream's time, bits/s.
    pub fn bits_per_second(&self) -> f64 {
        let longest = self.streams.iter().map(|s| s.seconds).fold(0.0, f64::max);
        if longest > 0.0 {
            self.bytes() as f64 * 8.0 / longest
        } else {
            0.0
        }
    }
}

/// Runs `spec` on a runtime of its own.
pub fn run(spec: &Spec) -> Result<Figures, QuicError> {
    let runtime = crate::runtime("the QUIC client")?;
    runtime.block_on(run_async(spec))
}

async fn run_async(spec: &Spec) -> Result<Figures, QuicError> {
    let bind: SocketAddr = if spec.server.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    }
    .parse()
    .map_err(|_| QuicError::Tls("a wildcard address".into()))?;
    let endpoint = quinn::Endpoint::client(bind)
        .map_err(|e| QuicError::Io("a UDP socket for QUIC".into(), e))?;
    let config = client_config()?;
    let n_conns = if spec.connection_each {
        spec.streams.max(1) as usize
    } else {
        1
    };
    let mut conns = Vec::with_capacity(n_conns);
    let mut handshakes = Vec::with_capacity(n_conns);
    for _ in 0..n_conns {
        let t0 = Instant::now();
        let connecting = endpoint
            .connect_with(config.clone(), spec.server, &spec.server_name)
            .map_err(|e| QuicError::Connect(spec.server, e.to_string()))?;
        let conn = connecting
            .await
            .map_err(|e| QuicError::Connect(spec.server, e.to_string()))?;
        handshakes.push(t0.elapsed());
        conns.push(conn);
    }
    let mut tasks = Vec::new();
    for i in 0..spec.streams.max(1) as usize {
        let which = if spec.connection_each { i } else { 0 };
        let conn = conns[which].clone();
        let (direction, amount) = (spec.direction, spec.amount);
        tasks.push(tokio::spawn(async move {
            let (bytes, seconds) = one_stream(&conn, direction, amount).await?;
            Ok::<_, QuicError>(StreamFigures {
                connection: which,
                bytes,
                seconds,
            })
        }));
    }
    let mut streams = Vec::with_capacity(tasks.len());
    for t in tasks {
        streams.push(t.await.map_err(|e| QuicError::Stream(e.to_string()))??);
    }
    let connections = conns.iter().map(path_figures).collect();
    for c in &conns {
        c.close(code::OK.into(), b"done");
    }
    endpoint.wait_idle().await;
    Ok(Figures {
        streams,
        connections,
        handshakes,
    })
}

async fn one_stream(
    conn: &quinn::Connection,
    direction: Direction,
    amount: Amount,
) -> Result<(u64, f64), QuicError> {
    let stream_error =
        |what: &str, e: &dyn std::fmt::Display| QuicError::Stream(format!("{what}: {e}"));
    let t0 = Instant::now();
    let (mut send, mut recv) = conn
        .open_bi()
        .await
        .map_err(|e| stream_error("opening a stream", &e))?;
    let ask = match (direction, amount) {
        (Direction::Upload, _) => Ask::Bytes(0),
        (Direction::Download, Amount::Bytes(n)) => Ask::Bytes(n),
        (Direction::Download, Amount::Time(_)) => Ask::Unlimited,
    };
    send.write_all(&ask.encode())
        .await
        .map_err(|e| stream_error("sending the ask", &e))?;
    let deadline = match amount {
        Amount::Time(d) => Some(t0 + d),
        Amount::Bytes(_) => None,
    };
    let mut moved = 0u64;
    if direction == Direction::Upload {
        loop {
            let n = match amount {
                Amount::Bytes(total) => (total - moved).min(CHUNK as u64) as usize,
                Amount::Time(_) if deadline.is_some_and(|d| Instant::now() >= d) => 0,
                Amount::Time(_) => CHUNK,
            };
            if n == 0 {
                break;
            }
            send.write_chunk(Bytes::from_static(&DATA[..n]))
                .await
                .map_err(|e| stream_error("uploading", &e))?;
            moved += n as u64;
        }
    }
    send.finish()
        .map_err(|e| stream_error("ending the stream", &e))?;
    // The answer: nothing for an upload (its end says the server has read it all), the
    // bytes for a download.
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d) && direction == Direction::Download {
            let _ = recv.stop(code::OK.into());
            break;
        }
        let read = match deadline.filter(|_| direction == Direction::Download) {
            Some(d) => match tokio::time::timeout_at(d.into(), recv.read_chunk(CHUNK, false)).await
            {
                Ok(r) => r,
                Err(_) => continue,
            },
            None => recv.read_chunk(CHUNK, false).await,
        };
        match read.map_err(|e| stream_error("reading the answer", &e))? {
            Some(chunk) if direction == Direction::Download => moved += chunk.bytes.len() as u64,
            Some(_) => {}
            None => break,
        }
    }
    Ok((moved, t0.elapsed().as_secs_f64()))
}

fn path_figures(conn: &quinn::Connection) -> PathFigures {
    let s = conn.stats();
    PathFigures {
        rtt: s.path.rtt,
        cwnd: s.path.cwnd,
        congestion_events: s.path.congestion_events,
        lost_packets: s.path.lost_packets,
        lost_bytes: s.path.lost_bytes,
        sent_packets: s.path.sent_packets,
        mtu: s.path.current_mtu,
        udp_tx_bytes: s.udp_tx.bytes,
        udp_rx_bytes: s.udp_rx.bytes,
    }
}

/// A client configuration speaking `perf` that takes any certificate the server shows:
/// the connection is encrypted and its handshake signed by the certificate's key, but
/// the certificate is not checked against a trusted root (a measurement server's is
/// mostly self-signed, and flowlab's own protocol over TCP authenticates nothing).
fn client_config() -> Result<quinn::ClientConfig, QuicError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| QuicError::Tls(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate::new(provider)))
        .with_no_client_auth();
    tls.alpn_protocols = vec![flowlab_proto::quic_perf::ALPN.to_vec()];
    let crypto = QuicClientConfig::try_from(tls).map_err(|e| QuicError::Tls(e.to_string()))?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    config.transport_config(Arc::new(transport()));
    Ok(config)
}
