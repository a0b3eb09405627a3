//! The responsiveness method (`flowlab_results::rpm`, draft-ietf-ippm-responsiveness)
//! over HTTP/2, against any server that publishes the method's configuration (Apple's
//! reference server's shape: `urls.small_https_download_url`, `large_https_download_url`,
//! `https_upload_url`), flowlab's `serve --http` included:
//!
//! - load-generating connections: each its own HTTP/2 connection, carrying one `GET` of
//!   the large object (again when it ends) or `POST`s of 128 MiB to the upload URL, one
//!   after the other; one more each way per interval until goodput is stable (the ramp is
//!   `flowlab_results::rpm::Ramp`, as the native method's);
//! - foreign probes: a new connection each — TCP set-up (`tcp_f`), TLS handshake (`tls_f`)
//!   (https), a `GET` of the small object (`http_f`) — one after the other;
//! - self probes: a `GET` of the small object on a load-generating connection, as a
//!   stream of its own beside the load's (`http_l`), one after the other.
//!
//! https URLs speak HTTP/2 by ALPN (a server that does not offer it is refused); http
//! URLs speak HTTP/2 with prior knowledge (h2c), as flowlab's server answers them.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, Uri};
use bytes::Bytes;
use flowlab_results::rpm::{
    self, DirectionResult, Idle, Interval, Load, Params, Ramp, RpmResult, RpmStart, Sample, Samples,
};
use futures_util::StreamExt;
use hyper::client::conn::http2::{self, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// What to measure.
#[derive(Debug, Clone)]
pub struct HttpRpmSpec {
    /// The configuration's URL (`https://HOST/config`).
    pub config: String,
    /// Accept any certificate (a server's self-signed one, on a path one trusts).
    pub insecure: bool,
    pub params: Params,
    /// The loads, one after the other.
    pub loads: Vec<Load>,
    /// Foreign probes before any load.
    pub idle_probes: usize,
}

/// Why a run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum HttpRpmError {
    #[error("{url}: {why}")]
    Url { url: String, why: String },
    #[error("{url}: cannot connect: {why}")]
    Connect { url: String, why: String },
    #[error("{url}: {why}")]
    Refused { url: String, why: String },
    #[error("{url}: not the responsiveness method's configuration: {why}")]
    Config { url: String, why: String },
    #[error("starting the HTTP client: {0}")]
    Runtime(std::io::Error),
}

/// How long a probe (and a connection's set-up) is waited for before it is given up (it
/// is then not counted: the draft counts only probes that completed).
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Bytes of each piece of an upload's body.
const PIECE: usize = 64 * 1024;

/// Pieces in one upload's body (128 MiB): a connection then sends the next. Bounded, as
/// servers bound what one request may carry (Apple's reference configuration: 250 MB).
const PIECES: u32 = 2048;

/// The three URLs a configuration names.
#[derive(Debug, Clone)]
struct Urls {
    small: Target,
    large: Target,
    upload: Target,
}

/// A URL and where it is reached.
#[derive(Debug, Clone)]
struct Target {
    uri: Uri,
    address: SocketAddr,
    tls: bool,
}

impl Target {
    async fn of(url: &str) -> Result<Target, HttpRpmError> {
        let bad = |why: String| HttpRpmError::Url {
            url: url.into(),
            why,
        };
        let uri: Uri = url.parse().map_err(|e| bad(format!("not a URL: {e}")))?;
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(bad("not an http:// or https:// URL".into())),
        };
        let host = uri.host().ok_or_else(|| bad("no host".into()))?;
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        // Resolved once: a probe's set-up is the connection's, not the resolver's.
        let address = tokio::net::lookup_host((host.trim_matches(['[', ']']), port))
            .await
            .map_err(|e| bad(format!("cannot resolve {host}: {e}")))?
            .next()
            .ok_or_else(|| bad(format!("{host} has no address")))?;
        Ok(Target { uri, address, tls })
    }

    fn server_name(&self) -> Result<rustls::pki_types::ServerName<'static>, HttpRpmError> {
        let host = self.uri.host().unwrap_or_default().trim_matches(['[', ']']);
        rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| HttpRpmError::Url {
            url: self.uri.to_string(),
            why: format!("no name a certificate can have: {e}"),
        })
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// An HTTP/2 connection open, and what its set-up took (ms).
struct Opened {
    send: SendRequest<Body>,
    tcp_ms: f64,
    tls_ms: Option<f64>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The client's TLS: HTTP/2 by ALPN, the system's roots (or, insecure, any certificate).
fn tls_client(insecure: bool) -> Result<tokio_rustls::TlsConnector, HttpRpmError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| HttpRpmError::Runtime(std::io::Error::other(e)))?;
    let mut config = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(crate::tls::AnyCertificate::new(provider)))
            .with_no_client_auth()
    } else {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_native_certs::load_native_certs().certs {
            // A root the system has that rustls cannot read is one fewer to trust.
            let _ = roots.add(cert);
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// What every task of a run shares.
struct Client {
    tls: tokio_rustls::TlsConnector,
}

impl Client {
    /// A new HTTP/2 connection to `t`, its set-up timed (TCP, then TLS).
    async fn open(&self, t: &Target) -> Result<Opened, String> {
        let t0 = Instant::now();
        let tcp = tokio::time::timeout(PROBE_TIMEOUT, TcpStream::connect(t.address))
            .await
            .map_err(|_| format!("no connection within {PROBE_TIMEOUT:?}"))?
            .map_err(|e| why(&e))?;
        let tcp_ms = ms(t0.elapsed());
        tcp.set_nodelay(true).map_err(|e| why(&e))?;
        let (io, tls_ms): (Box<dyn Io>, _) = if t.tls {
            let t1 = Instant::now();
            let name = t.server_name().map_err(|e| why(&e))?;
            let s = tokio::time::timeout(PROBE_TIMEOUT, self.tls.connect(name, tcp))
                .await
                .map_err(|_| format!("no TLS handshake within {PROBE_TIMEOUT:?}"))?
                .map_err(|e| {
                    let hint = if e.to_string().contains("certificate") {
                        " (a self-signed certificate? -k/--insecure accepts any)"
                    } else {
                        ""
                    };
                    format!("TLS: {e}{hint}")
                })?;
            let tls_ms = ms(t1.elapsed());
            if s.get_ref().1.alpn_protocol() != Some(b"h2") {
                return Err(
                    "the server does not offer HTTP/2 over TLS (ALPN h2), which the \
                            method needs"
                        .into(),
                );
            }
            (Box::new(s), Some(tls_ms))
        } else {
            (Box::new(tcp), None)
        };
        let (send, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(io))
            .await
            .map_err(|e| format!("HTTP/2: {e}"))?;
        // The connection is driven until its last handle goes.
        tokio::spawn(connection);
        Ok(Opened {
            send,
            tcp_ms,
            tls_ms,
        })
    }
}

/// An error with its causes ("http2 error: stream error received: …").
fn why(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out = format!("{out}: {c}");
        cause = c.source();
    }
    out
}

fn request(method: Method, t: &Target, body: Body) -> Request<Body> {
    let mut r = Request::new(body);
    *r.method_mut() = method;
    *r.uri_mut() = t.uri.clone();
    r
}

/// `GET` of `t` on `send`, read to its end: its time (ms) from the request to the last
/// byte, or why it failed.
async fn get_small(send: &mut SendRequest<Body>, t: &Target) -> Result<f64, String> {
    let t0 = Instant::now();
    let fetch = async {
        send.ready().await.map_err(|e| why(&e))?;
        let r = send
            .send_request(request(Method::GET, t, Body::empty()))
            .await
            .map_err(|e| why(&e))?;
        if r.status() != StatusCode::OK {
            return Err(format!("{} answered {}", t.uri, r.status()));
        }
        let mut body = Body::new(r.into_body()).into_data_stream();
        while let Some(piece) = body.next().await {
            piece.map_err(|e| why(&e))?;
        }
        Ok(ms(t0.elapsed()))
    };
    tokio::time::timeout(PROBE_TIMEOUT, fetch)
        .await
        .map_err(|_| format!("no answer within {PROBE_TIMEOUT:?}"))?
}

/// One foreign probe: a new connection, the small object on it. (tcp, tls, request) ms.
async fn foreign_probe(client: &Client, small: &Target) -> Result<(f64, Option<f64>, f64), String> {
    let mut c = client.open(small).await?;
    let request = get_small(&mut c.send, small).await?;
    Ok((c.tcp_ms, c.tls_ms, request))
}

/// The configuration at `url`: the three URLs it names.
async fn config(client: &Client, url: &str) -> Result<Urls, HttpRpmError> {
    let target = Target::of(url).await?;
    let refused = |why: String| HttpRpmError::Refused {
        url: url.into(),
        why,
    };
    let mut c = client
        .open(&target)
        .await
        .map_err(|why| HttpRpmError::Connect {
            url: url.into(),
            why,
        })?;
    c.send.ready().await.map_err(|e| refused(e.to_string()))?;
    let r = c
        .send
        .send_request(request(Method::GET, &target, Body::empty()))
        .await
        .map_err(|e| refused(e.to_string()))?;
    if r.status() != StatusCode::OK {
        return Err(refused(format!("answered {}", r.status())));
    }
    let bytes = axum::body::to_bytes(Body::new(r.into_body()), 1 << 20)
        .await
        .map_err(|e| refused(format!("reading the configuration: {e}")))?;
    let doc: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| HttpRpmError::Config {
            url: url.into(),
            why: format!("not JSON: {e}"),
        })?;
    let named = |key: &str| {
        doc["urls"][key]
            .as_str()
            .map(String::from)
            .ok_or_else(|| HttpRpmError::Config {
                url: url.into(),
                why: format!("no urls.{key}"),
            })
    };
    Ok(Urls {
        small: Target::of(&named("small_https_download_url")?).await?,
        large: Target::of(&named("large_https_download_url")?).await?,
        upload: Target::of(&named("https_upload_url")?).await?,
    })
}

/// What a direction's tasks share.
struct Shared {
    epoch: Instant,
    done: AtomicBool,
    /// Bytes read of downloads and handed to the HTTP/2 stack of uploads.
    moved: AtomicU64,
    samples: Mutex<Samples>,
    /// The load connections, for the self probes.
    loads: Mutex<Vec<SendRequest<Body>>>,
}

impl Shared {
    fn t(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    fn push(&self, f: impl FnOnce(&mut Samples)) {
        f(&mut self.samples.lock().unwrap_or_else(PoisonError::into_inner));
    }
}

/// One load-generating connection, its transfer run until the direction ends: a
/// download again and again, or uploads one after the other.
async fn load(
    client: Arc<Client>,
    urls: Arc<Urls>,
    upload: bool,
    shared: Arc<Shared>,
) -> Result<(), String> {
    let t = if upload { &urls.upload } else { &urls.large };
    let mut c = client
        .open(t)
        .await
        .map_err(|e| format!("{}: {e}", t.uri))?;
    shared
        .loads
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(c.send.clone());
    while !shared.done.load(Ordering::Acquire) {
        c.send.ready().await.map_err(|e| why(&e))?;
        let body = if upload {
            let piece = Bytes::from(vec![0x5a; PIECE]);
            let shared = Arc::clone(&shared);
            Body::from_stream(futures_util::stream::unfold(0, move |sent| {
                let (piece, shared) = (piece.clone(), Arc::clone(&shared));
                async move {
                    if sent == PIECES || shared.done.load(Ordering::Acquire) {
                        return None;
                    }
                    shared
                        .moved
                        .fetch_add(piece.len() as u64, Ordering::Relaxed);
                    Some((Ok::<_, std::convert::Infallible>(piece), sent + 1))
                }
            }))
        } else {
            Body::empty()
        };
        let method = if upload { Method::POST } else { Method::GET };
        let r = c
            .send
            .send_request(request(method, t, body))
            .await
            .map_err(|e| why(&e))?;
        if !r.status().is_success() {
            let status = r.status();
            let text = axum::body::to_bytes(Body::new(r.into_body()), 4096)
                .await
                .unwrap_or_default();
            return Err(format!(
                "{} answered {status}: {}",
                t.uri,
                String::from_utf8_lossy(&text).trim()
            ));
        }
        let mut body = Body::new(r.into_body()).into_data_stream();
        while let Some(piece) = body.next().await {
            let piece = piece.map_err(|e| why(&e))?;
            if !upload {
                shared
                    .moved
                    .fetch_add(piece.len() as u64, Ordering::Relaxed);
            }
            if shared.done.load(Ordering::Acquire) {
                break;
            }
        }
    }
    Ok(())
}

/// Runs the spec's loads one after the other, after the idle probes, telling `interval`
/// each load's intervals as they end.
pub fn run(
    spec: &HttpRpmSpec,
    stop: &AtomicBool,
    interval: &(dyn Fn(&str, &Interval) + Sync),
) -> Result<RpmResult, HttpRpmError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("rpm-http")
        .enable_all()
        .build()
        .map_err(HttpRpmError::Runtime)?;
    runtime.block_on(run_async(spec, stop, interval))
}

async fn run_async(
    spec: &HttpRpmSpec,
    stop: &AtomicBool,
    interval: &(dyn Fn(&str, &Interval) + Sync),
) -> Result<RpmResult, HttpRpmError> {
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let client = Arc::new(Client {
        tls: tls_client(spec.insecure)?,
    });
    let urls = Arc::new(config(&client, &spec.config).await?);
    // Idle: foreign probes one after the other, with nothing else running.
    let epoch = Instant::now();
    let mut idle = Samples::default();
    for _ in 0..spec.idle_probes {
        if stop.load(Ordering::Acquire) {
            break;
        }
        let (tcp, tls, request) =
            foreign_probe(&client, &urls.small)
                .await
                .map_err(|why| HttpRpmError::Refused {
                    url: urls.small.uri.to_string(),
                    why,
                })?;
        let t = epoch.elapsed().as_secs_f64();
        push_foreign(&mut idle, t, tcp, tls, request);
    }
    let mut directions = Vec::new();
    let mut error = None;
    for &l in &spec.loads {
        if stop.load(Ordering::Acquire) {
            break;
        }
        let d = run_load(spec, &client, &urls, l, stop, interval).await;
        match d {
            Ok(d) => directions.push(d),
            Err(e) if !directions.is_empty() => {
                error = Some(format!("{}: {e}", l.name()));
                break;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(RpmResult {
        schema: rpm::SCHEMA.into(),
        start: RpmStart {
            host: spec.config.clone(),
            address: urls.small.address.to_string(),
            draft: rpm::DRAFT.into(),
            params: spec.params,
            // This machine's default: the uploads' (the downloads are the server's).
            congestion: std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
                .ok()
                .map(|s| s.trim().to_string()),
            probes: format!(
                "HTTP/2{} to the configuration's URLs: foreign: a new connection, TCP set-up \
                 (`tcp_f`){}, then GET {} on it (`http_f`); self: GET {} as a stream of its own \
                 on a load-generating connection (`http_l`); loads: GET {} again and again, \
                 POST {} of 128 MiB again and again",
                if urls.small.tls {
                    " over TLS"
                } else {
                    " with prior knowledge (h2c)"
                },
                if urls.small.tls {
                    ", TLS handshake (`tls_f`)"
                } else {
                    ""
                },
                urls.small.uri,
                urls.small.uri,
                urls.large.uri,
                urls.upload.uri,
            ),
            started_unix,
        },
        idle: Idle::of(&idle, spec.params.trimmed_share),
        interrupted: stop.load(Ordering::Acquire),
        error,
        directions,
    })
}

fn push_foreign(s: &mut Samples, t: f64, tcp: f64, tls: Option<f64>, request: f64) {
    s.tcp_foreign.push(Sample { t, ms: tcp });
    if let Some(tls) = tls {
        s.tls_foreign.push(Sample { t, ms: tls });
    }
    s.request_foreign.push(Sample { t, ms: request });
}

/// One load: the ramp of connections until goodput and responsiveness are stable, or
/// the time is up.
async fn run_load(
    spec: &HttpRpmSpec,
    client: &Arc<Client>,
    urls: &Arc<Urls>,
    l: Load,
    stop: &AtomicBool,
    interval: &(dyn Fn(&str, &Interval) + Sync),
) -> Result<DirectionResult, HttpRpmError> {
    let p = spec.params;
    let shared = Arc::new(Shared {
        epoch: Instant::now(),
        done: AtomicBool::new(false),
        moved: AtomicU64::new(0),
        samples: Mutex::new(Samples::default()),
        loads: Mutex::new(Vec::new()),
    });
    let (down, up) = l.ways();
    let mut tasks = tokio::task::JoinSet::new();
    let (failed_tx, mut failed_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let open = |n: usize, tasks: &mut tokio::task::JoinSet<()>| {
        for _ in 0..n {
            for (way, upload) in [(down, false), (up, true)] {
                if !way {
                    continue;
                }
                let (client, urls, shared, failed) = (
                    Arc::clone(client),
                    Arc::clone(urls),
                    Arc::clone(&shared),
                    failed_tx.clone(),
                );
                tasks.spawn(async move {
                    if let Err(why) = load(client, urls, upload, Arc::clone(&shared)).await {
                        if !shared.done.load(Ordering::Acquire) {
                            let _ = failed.send(why);
                        }
                    }
                });
            }
        }
    };
    open(p.initial_connections, &mut tasks);
    let gap = Duration::from_secs_f64(1.0 / f64::from(p.max_probes_per_second.max(1)));
    // Foreign probes, one after the other.
    {
        let (client, urls, shared) = (Arc::clone(client), Arc::clone(urls), Arc::clone(&shared));
        tasks.spawn(async move {
            while !shared.done.load(Ordering::Acquire) {
                let start = Instant::now();
                let t = shared.t();
                if let Ok((tcp, tls, request)) = foreign_probe(&client, &urls.small).await {
                    shared.push(|s| push_foreign(s, t, tcp, tls, request));
                }
                tokio::time::sleep(gap.saturating_sub(start.elapsed())).await;
            }
        });
    }
    // Self probes, one after the other, each on the next load connection in turn.
    {
        let (urls, shared) = (Arc::clone(urls), Arc::clone(&shared));
        tasks.spawn(async move {
            let mut next = 0usize;
            while !shared.done.load(Ordering::Acquire) {
                let start = Instant::now();
                let send = {
                    let loads = shared.loads.lock().unwrap_or_else(PoisonError::into_inner);
                    (!loads.is_empty()).then(|| loads[next % loads.len()].clone())
                };
                next = next.wrapping_add(1);
                if let Some(mut send) = send {
                    let t = shared.t();
                    if let Ok(request) = get_small(&mut send, &urls.small).await {
                        shared.push(|s| s.request_loaded.push(Sample { t, ms: request }));
                    }
                }
                tokio::time::sleep(gap.saturating_sub(start.elapsed())).await;
            }
        });
    }
    let mut ramp = Ramp::new(p);
    let id = Duration::from_secs_f64(p.interval_seconds);
    let epoch = tokio::time::Instant::from_std(shared.epoch);
    let mut last = 0u64;
    let mut k = 0u32;
    let ways = usize::from(down) + usize::from(up);
    loop {
        k += 1;
        let due = epoch + id * k;
        while tokio::time::Instant::now() < due && !stop.load(Ordering::Acquire) {
            tokio::time::sleep_until(
                due.min(tokio::time::Instant::now() + Duration::from_millis(100)),
            )
            .await;
        }
        if stop.load(Ordering::Acquire) {
            break;
        }
        let moved = shared.moved.load(Ordering::Relaxed);
        let bytes = moved - last;
        last = moved;
        let samples = shared
            .samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let end = (id * k).as_secs_f64();
        // Connections open each way (one that failed to open is not).
        let open_now = shared
            .loads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
            / ways;
        ramp.interval(end, bytes, open_now, &samples);
        if let Some(iv) = ramp.intervals.last() {
            interval(l.name(), iv);
        }
        if ramp.done() || end >= p.max_seconds {
            break;
        }
        // A connection the server would not carry (busy, gone) ends the ramp, not the
        // load: what is open goes on being measured, and the result says why.
        while let Ok(why) = failed_rx.try_recv() {
            ramp.stop_adding(why);
        }
        let n = ramp.to_add(open_now);
        if n > 0 {
            open(n, &mut tasks);
        }
    }
    shared.done.store(true, Ordering::Release);
    // Every transfer ends with its connection: nothing is waited for.
    tasks.abort_all();
    shared
        .loads
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clear();
    let end = shared.t().min((id * k).as_secs_f64());
    let samples = shared
        .samples
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    Ok(ramp.finish(l.name(), samples, end))
}
