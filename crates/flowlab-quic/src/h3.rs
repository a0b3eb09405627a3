//! HTTP/3 (RFC 9114) on the QUIC server's connections whose ALPN is `h3`: each request
//! handed to flowlab-web's routes ([`flowlab_web::Handler`]), the same speed-test
//! endpoints and pages `serve --http` answers over TCP, bodies streamed both ways.

use std::net::SocketAddr;

use bytes::{Buf, Bytes};
use flowlab_web::Handler;
use http_body_util::BodyExt;

/// The ALPN HTTP/3 is spoken under.
pub const ALPN: &[u8] = b"h3";

/// Serves one connection's requests until it closes.
pub(crate) async fn serve_connection(conn: quinn::Connection, handler: Handler) {
    let peer = conn.remote_address();
    let mut h3: h3::server::Connection<h3_quinn::Connection, Bytes> =
        match h3::server::Connection::new(h3_quinn::Connection::new(conn)).await {
            Ok(c) => c,
            Err(e) => return tracing::debug!("HTTP/3: {peer}: {e}"),
        };
    loop {
        match h3.accept().await {
            Ok(Some(resolver)) => {
                let handler = handler.clone();
                tokio::spawn(async move {
                    let answered = match resolver.resolve_request().await {
                        Ok((request, stream)) => answer(request, stream, &handler, peer).await,
                        Err(e) => Err(e.to_string()),
                    };
                    if let Err(e) = answered {
                        tracing::debug!("HTTP/3: {peer}: a request: {e}");
                    }
                });
            }
            Ok(None) => break,
            Err(e) => {
                tracing::debug!("HTTP/3: {peer}: {e}");
                break;
            }
        }
    }
}

type Stream = h3::server::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>;

/// One request: its body read as the routes ask for it, the answer sent as they make it.
async fn answer(
    request: http::Request<()>,
    stream: Stream,
    handler: &Handler,
    peer: SocketAddr,
) -> Result<(), String> {
    let (mut send, recv) = stream.split();
    // The request's body: the stream's data until its end (or an error, which ends it).
    let body = futures_util::stream::unfold(Some(recv), |recv| async move {
        let mut recv = recv?;
        match recv.recv_data().await {
            Ok(Some(mut data)) => {
                let bytes = data.copy_to_bytes(data.remaining());
                Some((Ok(http_body::Frame::data(bytes)), Some(recv)))
            }
            Ok(None) => None,
            Err(e) => Some((Err(std::io::Error::other(e.to_string())), None)),
        }
    });
    let request = request.map(|()| http_body_util::StreamBody::new(body));
    let response = handler.call(request, peer).await;
    let (head, mut body) = response.into_parts();
    send.send_response(http::Response::from_parts(head, ()))
        .await
        .map_err(|e| format!("its head: {e}"))?;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("its body: {e}"))?;
        if let Ok(data) = frame.into_data() {
            send.send_data(data)
                .await
                .map_err(|e| format!("its body: {e}"))?;
        }
    }
    send.finish().await.map_err(|e| format!("its end: {e}"))
}
