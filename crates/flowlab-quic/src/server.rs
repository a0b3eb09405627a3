//! A QUIC performance protocol server (`flowlab_proto::quic_perf`) on a runtime of its own, beside
//! the blocking servers of `flowlab serve`: every stream is read to its end and answered
//! with the bytes it asked for, within the server's limits.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use flowlab_engine::server::Reporter;
use flowlab_results::server::{RefusalKind, ServerEvent};

use bytes::Bytes;
use quinn::crypto::rustls::QuicServerConfig;
use tokio::time::Instant;

use crate::{CHUNK, DATA, QuicError, transport};
use flowlab_proto::quic_perf::{ASK_LEN, Ask, code};

/// What a server allows a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections at once; more are refused at the handshake.
    pub max_connections: usize,
    /// Streams a connection may have open at once.
    pub max_streams: u32,
    /// The most a stream may ask for or send (bytes); `None`: no limit.
    pub max_bytes: Option<u64>,
    /// The longest a stream may run, its answer included; `None`: no limit.
    pub max_duration: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 16,
            // -P's most, both ways (--bidir) on one connection.
            max_streams: 2 * flowlab_proto::params::MAX_PARALLEL as u32,
            max_bytes: None,
            max_duration: Some(Duration::from_secs(600)),
        }
    }
}

/// A running server; dropping it closes every connection and stops it.
#[derive(Debug)]
pub struct Server {
    endpoint: quinn::Endpoint,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Server {
    /// Listens on `addr` (UDP) with `tls` (whose ALPN must offer [`flowlab_proto::quic_perf::ALPN`]).
    pub fn start(
        addr: SocketAddr,
        tls: Arc<rustls::ServerConfig>,
        limits: Limits,
    ) -> Result<Server, QuicError> {
        let socket = std::net::UdpSocket::bind(addr)
            .map_err(|e| QuicError::Io(format!("listening on UDP {addr}"), e))?;
        Server::start_on(socket, tls, limits, Beside::default())
    }

    /// Serves on `socket`, bound already (so that a port in use is said before a daemon
    /// detaches, and the server's threads start after), its buffers enlarged as
    /// [`Server::start`]'s are; with what `beside` asks for.
    pub fn start_on(
        socket: std::net::UdpSocket,
        tls: Arc<rustls::ServerConfig>,
        limits: Limits,
        beside: Beside,
    ) -> Result<Server, QuicError> {
        let Beside { report, http3 } = beside;
        let addr = socket
            .local_addr()
            .map_err(|e| QuicError::Io("a QUIC server's socket".into(), e))?;
        flowlab_engine::sock::set_buffers(
            &socket2::SockRef::from(&socket),
            flowlab_engine::stream::UDP_DEFAULT_BUFFER,
        )
        .map_err(|e| QuicError::Socket(format!("UDP {addr}"), e))?;
        let runtime = crate::runtime("the QUIC server")?;
        let crypto = QuicServerConfig::try_from(tls).map_err(|e| QuicError::Tls(e.to_string()))?;
        let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        let mut t = transport();
        // HTTP/3 opens three unidirectional streams each way (control, QPACK's encoder
        // and decoder); the perf protocol none.
        let uni: u8 = if http3.is_some() { 3 } else { 0 };
        t.max_concurrent_bidi_streams(limits.max_streams.into())
            .max_concurrent_uni_streams(uni.into());
        config.transport_config(Arc::new(t));
        let endpoint = {
            let _entered = runtime.enter();
            quinn::Endpoint::new(
                quinn::EndpointConfig::default(),
                Some(config),
                socket,
                Arc::new(quinn::TokioRuntime),
            )
            .map_err(|e| QuicError::Io(format!("serving QUIC on UDP {addr}"), e))?
        };
        let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
        let accepting = endpoint.clone();
        runtime.spawn(async move {
            while let Some(incoming) = accepting.accept().await {
                let peer = incoming.remote_address();
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    let reason = format!(
                        "QUIC: {} connections at once already (--max-tests)",
                        limits.max_connections
                    );
                    tell(&report, || ServerEvent::Refused {
                        peer: peer.to_string(),
                        kind: RefusalKind::Busy,
                        reason,
                    });
                    incoming.refuse();
                    continue;
                };
                let (report, http3) = (report.clone(), http3.clone());
                tokio::spawn(async move {
                    match incoming.await {
                        Ok(conn) => match http3.filter(|_| alpn(&conn) == Some(crate::h3::ALPN)) {
                            Some(handler) => crate::h3::serve_connection(conn, handler).await,
                            None => serve_connection(conn, limits, report).await,
                        },
                        Err(e) => tell(&report, || ServerEvent::Refused {
                            peer: peer.to_string(),
                            kind: RefusalKind::Handshake,
                            reason: format!("QUIC handshake: {e}"),
                        }),
                    }
                    drop(slot);
                });
            }
        });
        Ok(Server {
            endpoint,
            runtime: Some(runtime),
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.endpoint.local_addr()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.endpoint.close(0u8.into(), b"the server stops");
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

/// What a server does beside the perf protocol.
#[derive(Debug, Clone, Default)]
pub struct Beside {
    /// Each perf connection is a test of this server's log: started, failed streams,
    /// refused, done with its bytes.
    pub report: Option<Reporter>,
    /// HTTP/3 on the connections whose ALPN is `h3` (the TLS configuration must offer
    /// it), answered by these routes.
    pub http3: Option<flowlab_web::Handler>,
}

/// The protocol a connection's handshake agreed on.
fn alpn(conn: &quinn::Connection) -> Option<&'static [u8]> {
    let data = conn.handshake_data()?;
    let data = data
        .downcast::<quinn::crypto::rustls::HandshakeData>()
        .ok()?;
    match data.protocol.as_deref() {
        Some(crate::h3::ALPN) => Some(crate::h3::ALPN),
        Some(flowlab_proto::quic_perf::ALPN) => Some(flowlab_proto::quic_perf::ALPN),
        _ => None,
    }
}

/// Tells `report` of `event`, or the debug log when there is no server log.
fn tell(report: &Option<Reporter>, event: impl FnOnce() -> ServerEvent) {
    match report {
        Some(r) => r.event(event()),
        None => tracing::debug!("QUIC: {:?}", event()),
    }
}

/// What a connection's streams moved.
#[derive(Debug, Default)]
struct Moved {
    received: AtomicU64,
    sent: AtomicU64,
}

async fn serve_connection(conn: quinn::Connection, limits: Limits, report: Option<Reporter>) {
    let peer = conn.remote_address();
    let test = report.as_ref().map_or(0, Reporter::next_test);
    tell(&report, || ServerEvent::TestStarted {
        test,
        peer: peer.to_string(),
        protocol: "quic".into(),
        streams: 0,
        reverse: false,
        bidir: false,
        client: Some("QUIC perf".into()),
        multicast: None,
    });
    let began = Instant::now();
    let moved = Arc::new(Moved::default());
    tokio::spawn(crate::send_window_follows_cwnd(conn.clone()));
    while let Ok((send, recv)) = conn.accept_bi().await {
        let (report, moved) = (report.clone(), moved.clone());
        tokio::spawn(async move {
            if let Err(e) = serve_stream(send, recv, limits, &moved).await {
                tell(&report, || ServerEvent::TestFailed {
                    test: Some(test),
                    peer: peer.to_string(),
                    error: format!("a QUIC stream: {e}"),
                });
            }
        });
    }
    tell(&report, || ServerEvent::TestFinished {
        test,
        peer: peer.to_string(),
        bytes_received: moved.received.load(Ordering::Acquire),
        bytes_sent: moved.sent.load(Ordering::Acquire),
        seconds: began.elapsed().as_secs_f64(),
        mptcp_subflows: None,
    });
}

/// One stream: its ask, its payload to the end, then the answer.
async fn serve_stream(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    limits: Limits,
    moved: &Moved,
) -> Result<(), String> {
    let deadline = limits.max_duration.map(|d| Instant::now() + d);
    let mut head = [0u8; ASK_LEN];
    within(deadline, recv.read_exact(&mut head))
        .await?
        .map_err(|e| format!("its ask: {e}"))?;
    let ask = Ask::decode(head);
    let reject = |send: &mut quinn::SendStream, recv: &mut quinn::RecvStream, why: String| {
        let _ = recv.stop(code::REJECTED.into());
        let _ = send.reset(code::REJECTED.into());
        Err(why)
    };
    if let (Ask::Bytes(n), Some(max)) = (ask, limits.max_bytes) {
        if n > max {
            return reject(
                &mut send,
                &mut recv,
                format!("asked for {n} bytes; at most {max}"),
            );
        }
    }
    let mut received = 0u64;
    loop {
        match within(deadline, recv.read_chunk(CHUNK, false)).await {
            Err(why) => return reject(&mut send, &mut recv, why),
            Ok(Ok(Some(chunk))) => {
                received += chunk.bytes.len() as u64;
                moved
                    .received
                    .fetch_add(chunk.bytes.len() as u64, Ordering::Relaxed);
                if let Some(max) = limits.max_bytes.filter(|&max| received > max) {
                    return reject(
                        &mut send,
                        &mut recv,
                        format!("sent more than {max} bytes, the most a stream may"),
                    );
                }
            }
            Ok(Ok(None)) => break,
            Ok(Err(e)) => return Err(format!("its payload: {e}")),
        }
    }
    let mut left = match ask {
        Ask::Bytes(n) => n,
        // Until the client stops it, or the limits do.
        Ask::Unlimited => limits.max_bytes.unwrap_or(u64::MAX),
    };
    while left > 0 {
        let n = left.min(CHUNK as u64) as usize;
        match within(deadline, send.write_chunk(Bytes::from_static(&DATA[..n]))).await {
            Ok(Ok(())) => {
                left -= n as u64;
                moved.sent.fetch_add(n as u64, Ordering::Relaxed);
            }
            // The client has had enough of an unlimited answer.
            Ok(Err(quinn::WriteError::Stopped(_))) if ask == Ask::Unlimited => return Ok(()),
            Ok(Err(e)) => return Err(format!("its answer: {e}")),
            Err(why) => {
                let _ = send.reset(code::REJECTED.into());
                return Err(why);
            }
        }
    }
    send.finish()
        .map_err(|e| format!("ending its answer: {e}"))?;
    // The stream's end must reach the client before the connection may go.
    let _ = send.stopped().await;
    Ok(())
}

/// `f`, unless the stream's deadline comes first.
async fn within<T>(
    deadline: Option<Instant>,
    f: impl std::future::Future<Output = T>,
) -> Result<T, String> {
    match deadline {
        None => Ok(f.await),
        Some(d) => tokio::time::timeout_at(d, f)
            .await
            .map_err(|_| "the stream ran past the server's --max-duration".to_string()),
    }
}
