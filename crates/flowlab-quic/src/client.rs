//! A measuring client of the QUIC performance protocol: streams that upload or download
//! a number of bytes or for a time, on one connection or a connection each, timed as the
//! draft times them (from the stream's opening to the server's end of it) with the
//! stack's own figures for each connection (round trip, congestion window, losses).
//!
//! [`Running`] is a test under way, whose counts and connection figures may be read as
//! it runs (what a test's intervals are made of); [`run`] waits for the end.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

/// The congestion controller of this end's connections (quinn's three).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Congestion {
    #[default]
    Cubic,
    NewReno,
    Bbr,
}

impl Congestion {
    /// Reads the name `-C` takes (`reno` for NewReno, as Linux names its own).
    pub fn parse(name: &str) -> Option<Congestion> {
        match name {
            "cubic" => Some(Congestion::Cubic),
            "reno" | "newreno" => Some(Congestion::NewReno),
            "bbr" => Some(Congestion::Bbr),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Congestion::Cubic => "cubic",
            Congestion::NewReno => "newreno",
            Congestion::Bbr => "bbr",
        }
    }

    pub(crate) fn factory(self) -> Arc<dyn quinn::congestion::ControllerFactory + Send + Sync> {
        use quinn::congestion::{BbrConfig, CubicConfig, NewRenoConfig};
        match self {
            Congestion::Cubic => Arc::new(CubicConfig::default()),
            Congestion::NewReno => Arc::new(NewRenoConfig::default()),
            Congestion::Bbr => Arc::new(BbrConfig::default()),
        }
    }
}

/// A test to run against a perf server.
#[derive(Debug, Clone)]
pub struct Spec {
    pub server: SocketAddr,
    /// The name the server's certificate is asked for (SNI).
    pub server_name: String,
    /// The streams, in the order they open.
    pub streams: Vec<StreamSpec>,
    /// Each stream on a connection of its own (else all on one).
    pub connection_each: bool,
    pub congestion: Congestion,
    /// The longest each handshake may take.
    pub connect_timeout: Duration,
}

/// One stream of a test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamSpec {
    pub direction: Direction,
    pub amount: Amount,
}

/// One stream's figures, at the client.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamFigures {
    pub direction: Direction,
    /// Which connection carried it (from 0).
    pub connection: usize,
    /// Bytes this end wrote (an upload) or read (a download).
    pub bytes: u64,
    /// From the stream's opening to the server's acknowledgement of the last byte (an
    /// upload; the last byte handed to the stack when none came) or the last byte read.
    pub sent_seconds: f64,
    /// From the stream's opening to the server's end of it: for an upload, the server
    /// has read every byte by then.
    pub seconds: f64,
    /// Why the stream failed, if it did (its counts cover the part that ran).
    pub error: Option<String>,
}

/// What the QUIC stack says of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PathFigures {
    /// The smoothed round trip, and the least seen.
    pub rtt: Duration,
    pub min_rtt: Duration,
    /// The congestion window, bytes.
    pub cwnd: u64,
    pub congestion_events: u64,
    pub lost_packets: u64,
    pub lost_bytes: u64,
    pub sent_packets: u64,
    /// The path's MTU as discovered.
    pub mtu: u16,
    /// UDP bytes sent and received, QUIC's overhead included.
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

/// Runs `spec` to its end.
pub fn run(spec: &Spec) -> Result<Figures, QuicError> {
    Running::start(spec)?.finish()
}

/// A stream's count as it runs.
#[derive(Debug, Default)]
struct Counter {
    bytes: AtomicU64,
    /// An upload has written its last byte (what is left is the stack's to deliver).
    written: AtomicBool,
}

/// A test under way: its connections are up and its streams running on a runtime of
/// their own.
#[derive(Debug)]
pub struct Running {
    runtime: tokio::runtime::Runtime,
    endpoint: quinn::Endpoint,
    connections: Vec<quinn::Connection>,
    handshakes: Vec<Duration>,
    counters: Vec<Arc<Counter>>,
    tasks: Vec<tokio::task::JoinHandle<StreamFigures>>,
    stop: Arc<AtomicBool>,
    buffers: flowlab_engine::sock::BufferSizes,
    source: Option<std::net::IpAddr>,
}

impl Running {
    /// Makes the connections (each handshake timed) and opens the streams.
    pub fn start(spec: &Spec) -> Result<Running, QuicError> {
        let runtime = crate::runtime("the QUIC client")?;
        let Connected {
            endpoint,
            connections,
            handshakes,
            buffers,
            source,
        } = runtime.block_on(connect(spec))?;
        for conn in &connections {
            runtime.spawn(crate::send_window_follows_cwnd(conn.clone()));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut counters = Vec::new();
        let mut tasks = Vec::new();
        for (i, &StreamSpec { direction, amount }) in spec.streams.iter().enumerate() {
            let which = if spec.connection_each { i } else { 0 };
            let conn = connections[which].clone();
            let counter = Arc::new(Counter::default());
            counters.push(counter.clone());
            let stop = stop.clone();
            tasks.push(runtime.spawn(async move {
                let mut st = StreamFigures {
                    direction,
                    connection: which,
                    bytes: 0,
                    sent_seconds: 0.0,
                    seconds: 0.0,
                    error: None,
                };
                let t0 = Instant::now();
                if let Err(e) = one_stream(&conn, direction, amount, &counter, &stop, &mut st).await
                {
                    st.error = Some(e.to_string());
                    st.seconds = t0.elapsed().as_secs_f64();
                }
                st.bytes = counter.bytes.load(Ordering::Acquire);
                st
            }));
        }
        Ok(Running {
            runtime,
            endpoint,
            connections,
            handshakes,
            counters,
            tasks,
            stop,
            buffers,
            source,
        })
    }

    /// The local address the connections use: the endpoint's port, and the address the
    /// route to the server leaves from (the endpoint itself is bound to every one).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        let bound = self.endpoint.local_addr().ok()?;
        Some(SocketAddr::new(
            self.source.unwrap_or(bound.ip()),
            bound.port(),
        ))
    }

    /// The UDP socket's buffers as the kernel granted them.
    pub fn buffers(&self) -> flowlab_engine::sock::BufferSizes {
        self.buffers
    }

    /// Each stream's bytes so far (written, for an upload; read, for a download).
    pub fn moved(&self) -> Vec<u64> {
        self.counters
            .iter()
            .map(|c| c.bytes.load(Ordering::Acquire))
            .collect()
    }

    /// Each connection's figures now.
    pub fn paths(&self) -> Vec<PathFigures> {
        self.connections.iter().map(path_figures).collect()
    }

    /// Whether every stream has ended.
    pub fn done(&self) -> bool {
        self.tasks.iter().all(|t| t.is_finished())
    }

    /// Whether no stream moves bytes of its own any more: every upload has written its
    /// last byte (the stack may still be delivering it), every download has ended.
    pub fn moved_all(&self) -> bool {
        self.tasks
            .iter()
            .zip(&self.counters)
            .all(|(t, c)| t.is_finished() || c.written.load(Ordering::Acquire))
    }

    /// Ends the streams early: uploads stop writing and end, downloads stop reading.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Waits for every stream's end, then closes the connections.
    pub fn finish(self) -> Result<Figures, QuicError> {
        let Running {
            runtime,
            endpoint,
            connections,
            handshakes,
            tasks,
            ..
        } = self;
        runtime.block_on(async move {
            let mut streams = Vec::with_capacity(tasks.len());
            for t in tasks {
                streams.push(t.await.map_err(|e| QuicError::Stream(e.to_string()))?);
            }
            let paths = connections.iter().map(path_figures).collect();
            for c in &connections {
                c.close(code::OK.into(), b"done");
            }
            // Bounded: a server that has gone answers no close.
            let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
            Ok(Figures {
                streams,
                connections: paths,
                handshakes,
            })
        })
    }
}

async fn connect(spec: &Spec) -> Result<Connected, QuicError> {
    let bind: SocketAddr = if spec.server.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let (socket, buffers) = crate::udp_socket(bind)?;
    // The address the route to the server leaves from (the socket is bound to every one).
    let source = std::net::UdpSocket::bind(bind)
        .and_then(|probe| probe.connect(spec.server).and(probe.local_addr()))
        .map(|a| a.ip())
        .ok();
    let endpoint = quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        None,
        socket,
        Arc::new(quinn::TokioRuntime),
    )
    .map_err(|e| QuicError::Io("a QUIC endpoint".into(), e))?;
    let config = client_config(spec.congestion)?;
    let n_conns = if spec.connection_each {
        spec.streams.len().max(1)
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
        let conn = tokio::time::timeout(spec.connect_timeout, connecting)
            .await
            .map_err(|_| {
                QuicError::Connect(
                    spec.server,
                    format!(
                        "no handshake within {:.1} s (--connect-timeout)",
                        spec.connect_timeout.as_secs_f64()
                    ),
                )
            })?
            .map_err(|e| QuicError::Connect(spec.server, e.to_string()))?;
        handshakes.push(t0.elapsed());
        conns.push(conn);
    }
    Ok(Connected {
        endpoint,
        connections: conns,
        handshakes,
        buffers,
        source,
    })
}

/// A test's connections, made.
struct Connected {
    endpoint: quinn::Endpoint,
    connections: Vec<quinn::Connection>,
    handshakes: Vec<Duration>,
    buffers: flowlab_engine::sock::BufferSizes,
    source: Option<std::net::IpAddr>,
}

/// How long a stream waits for what should come at once: an upload's last
/// acknowledgement once the server has ended its side, the server's end after Ctrl-C.
const STOPPED_GRACE: Duration = Duration::from_secs(2);

/// How often a waiting stream looks at the stop flag and its deadline.
const LOOK: Duration = Duration::from_millis(50);

async fn one_stream(
    conn: &quinn::Connection,
    direction: Direction,
    amount: Amount,
    counter: &Counter,
    stop: &AtomicBool,
    st: &mut StreamFigures,
) -> Result<(), QuicError> {
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
    let over = || stop.load(Ordering::Acquire) || deadline.is_some_and(|d| Instant::now() >= d);
    let mut moved = 0u64;
    if direction == Direction::Upload {
        loop {
            let n = match amount {
                _ if over() => 0,
                Amount::Bytes(total) => (total - moved).min(CHUNK as u64) as usize,
                Amount::Time(_) => CHUNK,
            };
            if n == 0 {
                break;
            }
            // As much as the stack takes now, counted as it goes (a whole chunk can wait
            // on a slow path for longer than an interval).
            let written = send
                .write_chunks(&mut [Bytes::from_static(&DATA[..n])])
                .await
                .map_err(|e| stream_error("uploading", &e))?;
            moved += written.bytes as u64;
            counter.bytes.store(moved, Ordering::Release);
        }
        st.sent_seconds = t0.elapsed().as_secs_f64();
        counter.written.store(true, Ordering::Release);
    }
    send.finish()
        .map_err(|e| stream_error("ending the stream", &e))?;
    // An upload's sending ends when the server has acknowledged its last byte (quinn's
    // buffers would otherwise end it as soon as the last byte is queued): timed as it
    // happens, by a task of its own.
    let acknowledged = (direction == Direction::Upload).then(|| {
        tokio::spawn(async move {
            match send.stopped().await {
                Ok(None) => Some(t0.elapsed().as_secs_f64()),
                _ => None,
            }
        })
    });
    // The answer: nothing for an upload (its end says the server has read it all), the
    // bytes for a download. Stopped (Ctrl-C), an upload waits for the server's end a
    // moment, not for ever.
    let mut stopped_at = None;
    loop {
        if direction == Direction::Download && over() {
            let _ = recv.stop(code::OK.into());
            break;
        }
        if direction == Direction::Upload && stop.load(Ordering::Acquire) {
            let since = *stopped_at.get_or_insert_with(Instant::now);
            if since.elapsed() > STOPPED_GRACE {
                return Err(stream_error(
                    "waiting for the server's end of the stream",
                    &"none came within 2 s of Ctrl-C",
                ));
            }
        }
        let read = match tokio::time::timeout(LOOK, recv.read_chunk(CHUNK, false)).await {
            Ok(read) => read,
            Err(_) => continue,
        };
        match read.map_err(|e| stream_error("reading the answer", &e))? {
            Some(chunk) if direction == Direction::Download => {
                moved += chunk.bytes.len() as u64;
                counter.bytes.store(moved, Ordering::Release);
            }
            Some(_) => {}
            None => break,
        }
    }
    st.seconds = t0.elapsed().as_secs_f64();
    // The last acknowledgement comes about when the server's end does (a delayed
    // acknowledgement's time at most after it).
    let acknowledged = match acknowledged {
        Some(task) => tokio::time::timeout(STOPPED_GRACE, task)
            .await
            .ok()
            .and_then(Result::ok)
            .flatten(),
        None => None,
    };
    st.sent_seconds = match direction {
        Direction::Upload => acknowledged.unwrap_or(st.sent_seconds),
        Direction::Download => st.seconds,
    };
    Ok(())
}

fn path_figures(conn: &quinn::Connection) -> PathFigures {
    let s = conn.stats();
    PathFigures {
        rtt: s.path.rtt,
        min_rtt: s.path.min_rtt,
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
fn client_config(congestion: Congestion) -> Result<quinn::ClientConfig, QuicError> {
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
    let mut t = transport();
    t.congestion_controller_factory(congestion.factory());
    config.transport_config(Arc::new(t));
    Ok(config)
}
