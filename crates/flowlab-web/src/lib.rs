//! flowlab's one HTTP listener per process. Each feature adds its routes to one
//! [`Routes`] (a server's metrics, the speed-test endpoints of [`speed`]), and the
//! process serves them all from one address, on threads of their own running an async
//! runtime, beside its blocking servers.
//!
//! The listener is bound before it serves ([`Listener::bind`]), so a port in use is said
//! at once, on the terminal, before a daemon detaches; serving starts the threads
//! ([`Listener::serve`]), which a daemon does only once detached. Its accept loop is its
//! own: at most [`MAX_CONNECTIONS`] at once, a request's head within [`HEAD_TIMEOUT`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::header::CONTENT_TYPE;
use axum::routing::get;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tower::Service;

pub mod files;
pub mod live;
pub mod page;
pub mod progress;
pub mod rpm;
pub mod speed;
pub mod status;
pub mod tls;

/// What a route answers: a body made when asked.
type Body = Arc<dyn Fn() -> String + Send + Sync>;

/// The routes of a process's listener.
#[derive(Debug)]
pub struct Routes {
    router: axum::Router,
}

impl Default for Routes {
    /// The style and the units script flowlab's pages share, and nothing else.
    fn default() -> Routes {
        Routes {
            router: page::shared(),
        }
    }
}

impl Routes {
    pub fn new() -> Routes {
        Routes::default()
    }

    /// What answers these routes' requests that come another way ([`Handler`]).
    pub fn handler(&self) -> Handler {
        Handler(self.router.clone())
    }

    /// Every answer says that HTTP/3 is served on UDP `port` of the same host
    /// (`Alt-Svc: h3=":PORT"; ma=86400`, RFC 7838), so a browser may move to it.
    pub fn alt_svc(self, port: u16) -> Routes {
        let value = hyper::header::HeaderValue::from_str(&format!("h3=\":{port}\"; ma=86400"));
        let Ok(value) = value else { return self };
        Routes {
            router: self.router.layer(axum::middleware::map_response(
                move |mut response: axum::response::Response| {
                    let value = value.clone();
                    async move {
                        response.headers_mut().insert(hyper::header::ALT_SVC, value);
                        response
                    }
                },
            )),
        }
    }

    /// `GET path` answers `body()`, made anew for each request, as `content_type`.
    pub fn text(
        self,
        path: &str,
        content_type: &'static str,
        body: impl Fn() -> String + Send + Sync + 'static,
    ) -> Routes {
        let body: Body = Arc::new(body);
        let handler = get(move || {
            let body = body.clone();
            async move { ([(CONTENT_TYPE, content_type)], body()) }
        });
        Routes {
            router: self.router.route(path, handler),
        }
    }

    /// The speed-test page at `/` ([`page`]) and the endpoints it and standard clients
    /// use ([`speed`]), under `limits`, telling `observer` what they do. `congestion` is
    /// the server's default TCP congestion control, said in each page run's document.
    pub fn speed_test(
        self,
        limits: speed::Limits,
        observer: Option<speed::Observer>,
        congestion: Option<String>,
    ) -> Routes {
        let tally = speed::Tally::default();
        let observer = observer.unwrap_or_else(|| Arc::new(|_| {}));
        let router = self
            .router
            .merge(speed::routes(limits, observer.clone(), tally.clone()))
            .merge(page::routes(congestion, tally, observer));
        Routes { router }
    }

    /// A study's progress at `/` and its report at `/report` ([`progress`]), told by
    /// `hub`; `report` makes the report from the database when asked.
    pub fn progress(self, hub: Arc<progress::ProgressHub>, report: progress::Report) -> Routes {
        Routes {
            router: self.router.merge(progress::routes(hub, report)),
        }
    }

    /// The files of `set` at `PREFIX/NAME` ([`files`]): ranges, any origin, paced.
    pub fn files(self, prefix: &str, set: Arc<dyn files::FileSet>) -> Routes {
        Routes {
            router: self.router.merge(files::routes(prefix, set)),
        }
    }

    /// The server's live view at `/status` ([`status`]), told by `hub`.
    pub fn status(self, hub: Arc<status::StatusHub>) -> Routes {
        Routes {
            router: self.router.merge(status::routes(hub)),
        }
    }
}

/// A bound listener, not yet serving.
#[derive(Debug)]
pub struct Listener {
    socket: std::net::TcpListener,
    head_timeout: Duration,
    idle_timeout: Duration,
    max_connections: usize,
    tls: Option<Arc<rustls::ServerConfig>>,
}

/// Connections served at once; more wait in the kernel's backlog until one ends.
pub const MAX_CONNECTIONS: usize = 512;

/// Time a client has to send a request's head (line and headers) once it has begun, and
/// a new connection its first request: a client that trickles them ties up no
/// connection for longer.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// Time a connection may move no byte either way before it is closed: a client that
/// stops reading a download (or an HTTP/2 connection left open and silent) holds its
/// connection, and its transfer's place, no longer.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

impl Listener {
    /// Binds `addr` (port 0: any free port).
    pub fn bind(addr: SocketAddr) -> std::io::Result<Listener> {
        let socket = std::net::TcpListener::bind(addr)?;
        socket.set_nonblocking(true)?;
        Ok(Listener {
            socket,
            head_timeout: HEAD_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
            tls: None,
        })
    }

    /// Serves TLS as well, on the same port, with `config` ([`tls`] makes it).
    pub fn tls(self, config: Arc<rustls::ServerConfig>) -> Listener {
        Listener {
            tls: Some(config),
            ..self
        }
    }

    /// Another time for a request's head than [`HEAD_TIMEOUT`].
    pub fn head_timeout(self, head_timeout: Duration) -> Listener {
        Listener {
            head_timeout,
            ..self
        }
    }

    /// Another time a connection may stay silent than [`IDLE_TIMEOUT`].
    pub fn idle_timeout(self, idle_timeout: Duration) -> Listener {
        Listener {
            idle_timeout,
            ..self
        }
    }

    /// Another most connections at once than [`MAX_CONNECTIONS`] (at least one).
    pub fn max_connections(self, n: usize) -> Listener {
        Listener {
            max_connections: n.max(1),
            ..self
        }
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Serves `routes` on threads of their own (a runtime of one worker per CPU, at most
    /// four: a download's bytes are copied by the kernel, not made) until the returned
    /// [`Serving`] is dropped.
    pub fn serve(self, routes: Routes) -> std::io::Result<Serving> {
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .thread_name("http")
            .enable_io()
            .enable_time()
            .build()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let Listener {
            socket,
            head_timeout,
            idle_timeout,
            max_connections,
            tls,
        } = self;
        let thread = std::thread::Builder::new()
            .name("http".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(socket) {
                        Ok(l) => l,
                        Err(e) => return eprintln!("flowlab: the HTTP listener: {e}"),
                    };
                    let deadlines = Deadlines {
                        head: head_timeout,
                        idle: idle_timeout,
                        max_connections,
                    };
                    accept(listener, routes.router, deadlines, tls, stopped).await;
                });
            })?;
        Ok(Serving {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

/// How the accept loop treats each connection.
#[derive(Debug, Clone, Copy)]
struct Deadlines {
    head: Duration,
    idle: Duration,
    max_connections: usize,
}

/// Streams one HTTP/2 connection may carry at once: a responsiveness client's load
/// flows and probes fit, and one connection cannot take every transfer's place.
const MAX_STREAMS: u32 = 16;

/// How long a stopped listener lets the requests under way finish (a download of
/// `/large` would never).
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Accepts connections until `stopped`, each served on a task of its own with the
/// client's address in every request's extensions ([`ConnectInfo`]): its first byte
/// (and with TLS, its whole handshake) within the head's deadline, then a request's head
/// within it once begun, at most `max_connections` at once, each closed once it has
/// moved no byte for the idle time. With `tls`, a connection that opens with a TLS
/// record (its first byte 22, a handshake) is served over TLS, HTTP/2 or HTTP/1.1 as
/// the client's ALPN says; the others in the clear, on the same port. Once stopped, the
/// requests under way are let finish for [`STOP_GRACE`].
async fn accept(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    deadlines: Deadlines,
    tls: Option<Arc<rustls::ServerConfig>>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let mut http = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    http.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(deadlines.head);
    http.http2().max_concurrent_streams(MAX_STREAMS);
    let tls = tls.map(tokio_rustls::TlsAcceptor::from);
    let slots = Arc::new(tokio::sync::Semaphore::new(deadlines.max_connections));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot,
            _ = &mut stopped => break,
        };
        let Ok(slot) = slot else { break };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                // Out of descriptors, or a connection reset before it was taken: the
                // listener itself is fine; a moment's pause lets descriptors free.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stopped => break,
        };
        let _ = stream.set_nodelay(true);
        // The connection's socket, for an upload to batch its wake-ups by (a second
        // descriptor of it: options set through it are the socket's).
        let socket = {
            use std::os::fd::AsFd;
            stream
                .as_fd()
                .try_clone_to_owned()
                .ok()
                .map(|fd| Socket(Arc::new(fd)))
        };
        let router = router.clone();
        let (http, tls, watcher) = (http.clone(), tls.clone(), graceful.watcher());
        tokio::spawn(async move {
            let _slot = slot;
            let moved = Arc::new(Moved::new());
            let stream = Watched::new(stream, moved.clone());
            // hyper-util waits for a connection's first bytes (to tell HTTP/1 from
            // HTTP/2) without a deadline, and hyper's own for a request's head starts
            // after them: the first byte, and a TLS handshake, have the head's time.
            let opened = tokio::time::timeout(deadlines.head, async {
                let mut first = [0u8; 1];
                match stream.io.peek(&mut first).await {
                    Ok(1) => {}
                    _ => return None,
                }
                match tls.filter(|_| first[0] == 22) {
                    Some(tls) => tls
                        .accept(stream)
                        .await
                        .ok()
                        .map(|s| Opened::Tls(Box::new(s))),
                    None => Some(Opened::Clear(stream)),
                }
            })
            .await;
            let Ok(Some(opened)) = opened else { return };
            let secure = Secure(matches!(opened, Opened::Tls(_)));
            let service =
                hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
                    request.extensions_mut().insert(ConnectInfo(peer));
                    request.extensions_mut().insert(secure);
                    // HTTP/1 only: an HTTP/2 connection's other streams share the socket.
                    if let Some(s) = socket
                        .clone()
                        .filter(|_| request.version() < hyper::Version::HTTP_2)
                    {
                        request.extensions_mut().insert(s);
                    }
                    router.clone().call(request)
                });
            match opened {
                Opened::Tls(io) => serve(&http, io, service, watcher, &moved, deadlines).await,
                Opened::Clear(io) => serve(&http, io, service, watcher, &moved, deadlines).await,
            }
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(STOP_GRACE, graceful.shutdown()).await;
}

/// A connection once its first byte (and TLS handshake) came.
enum Opened {
    Tls(Box<tokio_rustls::server::TlsStream<Watched<tokio::net::TcpStream>>>),
    Clear(Watched<tokio::net::TcpStream>),
}

/// Serves `io` until it ends or has moved no byte for the idle time.
async fn serve<I, S>(
    http: &hyper_util::server::conn::auto::Builder<TokioExecutor>,
    io: I,
    service: S,
    watcher: hyper_util::server::graceful::Watcher,
    moved: &Moved,
    deadlines: Deadlines,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<
            hyper::Request<Incoming>,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
        > + Send
        + 'static,
    S::Future: Send + 'static,
{
    let connection = http.serve_connection(TokioIo::new(io), service);
    let served = watcher.watch(connection.into_owned());
    until_idle(served, moved, deadlines.idle).await;
}

/// When a connection last moved a byte, in milliseconds since it was opened.
#[derive(Debug)]
struct Moved {
    opened: std::time::Instant,
    last_ms: std::sync::atomic::AtomicU64,
}

impl Moved {
    fn new() -> Moved {
        Moved {
            opened: std::time::Instant::now(),
            last_ms: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let now = self.opened.elapsed().as_millis() as u64;
        self.last_ms
            .store(now, std::sync::atomic::Ordering::Relaxed);
    }

    /// How long since the last byte.
    fn silent(&self) -> Duration {
        let last = self.last_ms.load(std::sync::atomic::Ordering::Relaxed);
        self.opened
            .elapsed()
            .saturating_sub(Duration::from_millis(last))
    }
}

/// A connection's stream, noting when it moves a byte.
#[derive(Debug)]
struct Watched<I> {
    io: I,
    moved: Arc<Moved>,
}

impl<I> Watched<I> {
    fn new(io: I, moved: Arc<Moved>) -> Watched<I> {
        Watched { io, moved }
    }
}

impl<I: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Watched<I> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.moved.touch();
        }
        polled
    }
}

impl<I: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Watched<I> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let polled = std::pin::Pin::new(&mut self.io).poll_write(cx, data);
        if matches!(polled, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.moved.touch();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let polled = std::pin::Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if matches!(polled, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.moved.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Runs `served` until it ends or its connection has moved no byte for `idle`; then it
/// is dropped, which closes the connection.
async fn until_idle(served: impl std::future::Future, moved: &Moved, idle: Duration) {
    let watch = async {
        loop {
            let silent = moved.silent();
            if silent >= idle {
                return;
            }
            tokio::time::sleep(idle - silent).await;
        }
    };
    tokio::select! {
        _ = served => {}
        _ = watch => {}
    }
}

/// The routes, for requests that come another way (HTTP/3, over QUIC: `flowlab_quic`),
/// each handed the client's address and marked secure, as a TLS connection's are.
#[derive(Debug, Clone)]
pub struct Handler(axum::Router);

impl Handler {
    /// The answer to `request` from `peer`.
    pub async fn call<B>(
        &self,
        mut request: hyper::Request<B>,
        peer: SocketAddr,
    ) -> hyper::Response<axum::body::Body>
    where
        B: hyper::body::Body<Data = bytes::Bytes> + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        use tower::ServiceExt;
        request.extensions_mut().insert(ConnectInfo(peer));
        request.extensions_mut().insert(Secure(true));
        let request = request.map(axum::body::Body::new);
        match self.0.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }
}

/// The socket an HTTP/1 request came on, in its extensions: an upload raises its
/// receive low-water mark while the body streams in (`speed`).
#[derive(Debug, Clone)]
pub(crate) struct Socket(pub(crate) Arc<std::os::fd::OwnedFd>);

/// Whether a request came over TLS: in every request's extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Secure(pub bool);

/// A listener serving; dropped, it stops (requests under way are let finish).
#[derive(Debug)]
pub struct Serving {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Serving {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A raw HTTP/1.1 GET of `path` from `addr`: the whole response.
    fn get(addr: SocketAddr, path: &str) -> String {
        let mut conn = std::net::TcpStream::connect(addr).expect("connect");
        write!(
            conn,
            "GET {path} HTTP/1.1\r\nHost: flowlab\r\nConnection: close\r\n\r\n"
        )
        .expect("request");
        let mut response = String::new();
        conn.read_to_string(&mut response).expect("response");
        response
    }

    /// A route answers with its body, made anew each time, and its content type; a path
    /// with no route is not found; once stopped, nothing listens.
    #[test]
    fn a_route_answers_each_request_anew_and_stops_with_its_listener() {
        let asked = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counted = asked.clone();
        let routes = Routes::new().text("/count", "text/plain; charset=utf-8", move || {
            let n = counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            format!("asked {n} times\n")
        });
        let listener = Listener::bind(([127, 0, 0, 1], 0).into()).expect("bind");
        let addr = listener.local_addr().expect("address");
        let serving = listener.serve(routes).expect("serve");
        for n in 1..=2 {
            let r = get(addr, "/count");
            assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
            assert!(
                r.to_ascii_lowercase()
                    .contains("content-type: text/plain; charset=utf-8\r\n"),
                "{r}"
            );
            assert!(r.ends_with(&format!("\r\n\r\nasked {n} times\n")), "{r}");
        }
        let r = get(addr, "/nothing");
        assert!(r.starts_with("HTTP/1.1 404 Not Found\r\n"), "{r}");
        drop(serving);
        assert!(
            std::net::TcpStream::connect(addr).is_err(),
            "still listening"
        );
    }

    /// An address in use is said at bind, before anything serves.
    #[test]
    fn an_address_in_use_is_refused_at_bind() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = taken.local_addr().expect("address");
        let err = Listener::bind(addr).expect_err("in use");
        assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    }
}
