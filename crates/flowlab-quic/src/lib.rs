//! flowlab's QUIC: the QUIC performance protocol (draft-banks-quic-performance, ALPN
//! `perf`: `flowlab_proto::quic_perf`) spoken by a server ([`server`]) and a measuring client
//! ([`client`]), on quinn with rustls. Other stacks' perf tools (quinn's, msquic's
//! secnetperf, s2n-quic's, picoquic's) speak the same protocol, so either end may be
//! theirs. Certificates come from the one place flowlab makes and loads them
//! (`flowlab_web::tls`).

pub mod client;
pub mod h3;
pub mod measure;
pub mod server;

use std::net::SocketAddr;
use std::time::Duration;

/// Why QUIC could not run.
#[derive(Debug, thiserror::Error)]
pub enum QuicError {
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("TLS for QUIC: {0}")]
    Tls(String),
    #[error("cannot connect to {0} over QUIC: {1}")]
    Connect(SocketAddr, String),
    #[error("{0}: {1}")]
    Socket(String, flowlab_engine::sock::SockError),
    #[error("a QUIC stream: {0}")]
    Stream(String),
    #[error(transparent)]
    Resolve(#[from] flowlab_engine::reach::ResolveError),
    #[error("-C {0}: QUIC's congestion controllers are cubic, reno (NewReno) and bbr")]
    Congestion(String),
    #[error("-k/--blockcount: a QUIC stream has no writes to count; give -n or -t")]
    Blocks,
}

/// The transport settings of both ends. quinn's default windows (a stream 1.25 MB, the
/// design of 100 Mbit/s at 100 ms) would cap a stream on a long fat path below what TCP
/// reaches there; these hold 1 Gbit/s at 64 ms a stream, and four streams' worth in
/// flight a connection.
pub(crate) fn transport() -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    t.stream_receive_window(quinn::VarInt::from_u32(STREAM_WINDOW))
        .send_window(4 * u64::from(STREAM_WINDOW));
    t
}

/// A UDP socket at `addr` with buffers that hold a fast sender's bursts between two
/// reads (the kernel's default of ~200 KiB overflows at a few Gbit/s), and the sizes the
/// kernel granted (capped by net.core.rmem_max and wmem_max).
pub(crate) fn udp_socket(
    addr: SocketAddr,
) -> Result<(std::net::UdpSocket, flowlab_engine::sock::BufferSizes), QuicError> {
    let socket = std::net::UdpSocket::bind(addr)
        .map_err(|e| QuicError::Io(format!("a UDP socket at {addr}"), e))?;
    let sizes = flowlab_engine::sock::set_buffers(
        &socket2::SockRef::from(&socket),
        flowlab_engine::stream::UDP_DEFAULT_BUFFER,
    )
    .map_err(|e| QuicError::Socket(format!("the UDP socket at {addr}"), e))?;
    Ok((socket, sizes))
}

/// Keeps what a connection takes from its streams and has not had acknowledged at
/// twice its congestion window (as Linux sizes a TCP socket's send buffer), at least
/// [`MIN_SEND_WINDOW`], until it closes. A fixed window (quinn's default, or the
/// 32 MiB a fast path needs) holds seconds of data on a slow or lossy path: a client's
/// upload would count bytes the stack has only buffered (its intervals reading as
/// stalls while the wire is busy), a server's answer bytes it has not sent.
///
/// The first fit is made at once, before the future is polled: a stream written to
/// before the task's first turn would otherwise take the transport's whole window (on a
/// lossy 50 Mbit/s path, 8 MiB: seconds of intervals with nothing new).
pub(crate) fn send_window_follows_cwnd(
    conn: quinn::Connection,
) -> impl std::future::Future<Output = ()> {
    fit_send_window(&conn);
    async move {
        while conn.close_reason().is_none() {
            tokio::time::sleep(Duration::from_millis(5)).await;
            fit_send_window(&conn);
        }
    }
}

fn fit_send_window(conn: &quinn::Connection) {
    let cwnd = conn.stats().path.cwnd;
    conn.set_send_window((2 * cwnd).max(MIN_SEND_WINDOW));
}

/// The least send window [`send_window_follows_cwnd`] gives a connection.
const MIN_SEND_WINDOW: u64 = 64 << 10;

/// A runtime of its own for `what`: a worker per CPU, at most four (the stack's
/// packets are what costs, not the tasks).
pub(crate) fn runtime(what: &str) -> Result<tokio::runtime::Runtime, QuicError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(std::thread::available_parallelism().map_or(1, |n| n.get().min(4)))
        .thread_name("quic")
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| QuicError::Io(format!("a runtime for {what}"), e))
}

/// The most a stream hands the stack at once, and the bytes it sends (both ends).
pub(crate) const CHUNK: usize = 1 << 20;
pub(crate) static DATA: [u8; CHUNK] = [0x2a; CHUNK];

/// A stream's flow-control window, bytes.
const STREAM_WINDOW: u32 = 8 << 20;
