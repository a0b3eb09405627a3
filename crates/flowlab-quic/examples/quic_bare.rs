//! A bare quinn client of the QUIC performance protocol, for bench/quic.sh: one stream
//! that uploads or downloads BYTES, and nothing else — no counters, intervals, send
//! window that follows the congestion window, statistics or result — with the transport
//! settings flowlab's client uses (8 MiB stream windows, a 32 MiB send window, 4 MiB UDP
//! socket buffers, cubic), so that what the benchmark compares is the measuring.
//!
//! Usage: quic_bare ADDRESS:PORT upload|download BYTES

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use flowlab_proto::quic_perf::{ALPN, Ask};
use quinn::crypto::rustls::QuicClientConfig;

const CHUNK: usize = 1 << 20;
static DATA: [u8; CHUNK] = [0x2a; CHUNK];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, server, way, bytes] = args.as_slice() else {
        return Err("usage: quic_bare ADDRESS:PORT upload|download BYTES".into());
    };
    let server: SocketAddr = server.parse()?;
    let upload = match way.as_str() {
        "upload" => true,
        "download" => false,
        _ => return Err("upload or download".into()),
    };
    let bytes: u64 = bytes.parse()?;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(transfer(server, upload, bytes))
}

async fn transfer(
    server: SocketAddr,
    upload: bool,
    bytes: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let socket = std::net::UdpSocket::bind(SocketAddr::from(([0, 0, 0, 0], 0)))?;
    let s = socket2::SockRef::from(&socket);
    s.set_send_buffer_size(4 << 20)?;
    s.set_recv_buffer_size(4 << 20)?;
    let endpoint = quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        None,
        socket,
        Arc::new(quinn::TokioRuntime),
    )?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(flowlab_web::tls::AnyCertificate::new(provider)))
        .with_no_client_auth();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let mut config = quinn::ClientConfig::new(Arc::new(QuicClientConfig::try_from(tls)?));
    let mut transport = quinn::TransportConfig::default();
    transport
        .stream_receive_window(quinn::VarInt::from_u32(8 << 20))
        .send_window(32 << 20);
    config.transport_config(Arc::new(transport));
    let conn = endpoint.connect_with(config, server, "localhost")?.await?;
    let (mut send, mut recv) = conn.open_bi().await?;
    let ask = if upload {
        Ask::Bytes(0)
    } else {
        Ask::Bytes(bytes)
    };
    send.write_all(&ask.encode()).await?;
    let mut left = if upload { bytes } else { 0 };
    while left > 0 {
        let n = left.min(CHUNK as u64) as usize;
        send.write_chunk(Bytes::from_static(&DATA[..n])).await?;
        left -= n as u64;
    }
    send.finish()?;
    let mut received = 0u64;
    while let Some(chunk) = recv.read_chunk(CHUNK, false).await? {
        received += chunk.bytes.len() as u64;
    }
    if !upload && received != bytes {
        return Err(format!("{received} of {bytes} bytes came").into());
    }
    conn.close(0u8.into(), b"done");
    endpoint.wait_idle().await;
    Ok(())
}
