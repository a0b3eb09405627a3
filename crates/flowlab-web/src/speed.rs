//! The speed-test endpoints standard HTTP clients ask a server for, so that they measure
//! against flowlab (docs/web.md):
//!
//! - Cloudflare's (its open-source engine, npm `@cloudflare/speedtest`, and `mach`):
//!   `GET /__down?bytes=N` sends N bytes, `POST /__up` takes its body. Each answer says
//!   the server's own time in `Server-Timing` (`cfRequestDuration;dur=MS`), which the
//!   engine takes out of its latency, and allows any origin to read it and to time the
//!   request (`Timing-Allow-Origin`), as the engine runs from pages of other hosts.
//! - LibreSpeed's backend, at the paths its client asks by default:
//!   `/backend/garbage.php?ckSize=N` sends N MiB (4 when absent or not a positive number,
//!   at most 1 024, as the PHP), `/backend/empty.php` takes an upload (or nothing: its
//!   ping), `/backend/getIP.php` says the client's address as JSON
//!   (`{"processedString": …, "rawIspInfo": ""}`). Cross-origin headers only when asked
//!   (`?cors`), as the PHP.
//!
//! - The responsiveness method's (draft-ietf-ippm-responsiveness; Apple's
//!   `networkQuality -C URL`, Cloudflare's `mach`): `GET /config` names the other three
//!   in the shape of Apple's reference server (both its key sets), `GET /small` sends one
//!   byte, `GET /large` sends until the client stops reading (the method's load never
//!   reads it to an end), `POST /slurp` takes a body of any size. Over TLS, to a client
//!   that offers it, they are HTTP/2, as the method asks.
//!
//! Every transfer counts against the limits ([`Limits`]): bytes one request may move
//! (not `/large` and `/slurp`, whose size is the method's to choose), transfers at once
//! and from one address (more are refused `503 Service Unavailable`), the time one may
//! take, and how long a body may stall.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{ConnectInfo, Extension, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use flowlab_proto::source::source_key;
use flowlab_results::server::HttpRefusal;
use futures_util::StreamExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What the endpoints tell an observer (a server's metrics, its live view): the result
/// model's `flowlab_results::status::HttpActivity`, which the live view counts as it is.
pub use flowlab_results::status::HttpActivity as Event;

/// Who is told of each [`Event`].
pub type Observer = Arc<dyn Fn(Event) + Send + Sync>;

/// What one HTTP transfer may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes one download may ask for, and one upload may send (not `/large` and
    /// `/slurp`, whose size is the responsiveness method's to choose).
    pub max_bytes: u64,
    /// Downloads and uploads under way at once; more are refused as busy.
    pub max_transfers: usize,
    /// The same from one address (IPv6: its /64), so that one client cannot hold them
    /// all.
    pub max_transfers_per_source: usize,
    /// Time one transfer may take: a download is cut there, an upload refused.
    pub max_duration: Duration,
    /// Time an upload's body may go without a byte before it is dropped.
    pub stall: Duration,
}

impl Default for Limits {
    /// 1 GiB a request (LibreSpeed's largest, 1 024 chunks of 1 MiB), 32 transfers, 8
    /// from one address, 60 s each (a responsiveness run loads each way for 20 s at
    /// most; Cloudflare's and LibreSpeed's requests are shorter), a stall of 10 s.
    fn default() -> Limits {
        Limits {
            max_bytes: 1 << 30,
            max_transfers: 32,
            max_transfers_per_source: 8,
            max_duration: Duration::from_secs(60),
            stall: Duration::from_secs(10),
        }
    }
}

/// The transfers under way from each address (IPv6: its /64).
#[derive(Debug, Default)]
struct Sources {
    counts: std::sync::Mutex<HashMap<IpAddr, usize>>,
}

/// A transfer's place, one of the server's and one of its source's; both given back
/// when it is dropped (the transfer ended, or its client went away).
struct Slot {
    _all: OwnedSemaphorePermit,
    sources: Arc<Sources>,
    key: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self
            .sources
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = counts.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.key);
            }
        }
    }
}

/// The bytes a download sends: the same 1 MiB, again and again, of numbers no link
/// compresses (as LibreSpeed's, which a proxy would otherwise squeeze).
const CHUNK: usize = 1 << 20;

#[derive(Clone)]
struct Speed {
    limits: Limits,
    chunk: Bytes,
    transfers: Arc<Semaphore>,
    sources: Arc<Sources>,
    observer: Observer,
    tally: Tally,
}

/// The bytes the server received of each page run's uploads (`POST /__up?run=ID`), by
/// the sender's source and the run's id: what the page's result gives as the upload's
/// receiver. At most [`TALLIES`] runs are counted at once; a run's count is taken when
/// its result arrives.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tally(Arc<std::sync::Mutex<HashMap<RunKey, Arc<AtomicU64>>>>);

/// A page run, as its uploads are counted: the sender's source key and the run's id.
type RunKey = (IpAddr, String);

/// Page runs whose uploads are counted at once: beyond it, the oldest-looking is dropped.
const TALLIES: usize = 1024;

impl Tally {
    /// The count of run `run` from `source`, for an upload to add its bytes to as they
    /// arrive (the map is locked once an upload, not once a chunk).
    fn counter(&self, source: IpAddr, run: &str) -> Arc<AtomicU64> {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let key = (source_key(source), run.to_string());
        if !m.contains_key(&key) && m.len() >= TALLIES {
            if let Some(any) = m.keys().next().cloned() {
                m.remove(&any);
            }
        }
        Arc::clone(m.entry(key).or_default())
    }

    /// The bytes counted for run `run` from `source`, forgotten once taken.
    pub(crate) fn take(&self, source: IpAddr, run: &str) -> Option<u64> {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.remove(&(source_key(source), run.to_string()))
            .map(|n| n.load(Ordering::Relaxed))
    }
}

/// A page run's id as its uploads name it: 1 to 64 letters and digits.
pub(crate) fn run_id(text: &str) -> Option<&str> {
    let ok = (1..=64).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_alphanumeric());
    ok.then_some(text)
}

impl std::fmt::Debug for Speed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Speed")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// The endpoints, under `limits`, telling `observer` what they do.
pub(crate) fn routes(limits: Limits, observer: Observer, tally: Tally) -> axum::Router {
    let speed = Speed {
        tally,
        limits,
        chunk: incompressible(CHUNK),
        transfers: Arc::new(Semaphore::new(limits.max_transfers)),
        sources: Arc::new(Sources::default()),
        observer,
    };
    axum::Router::new()
        .route("/__down", get(cloudflare_down))
        .route("/__up", post(cloudflare_up))
        .route("/backend/garbage.php", get(librespeed_garbage))
        .route(
            "/backend/empty.php",
            get(librespeed_empty)
                .post(librespeed_empty)
                .options(librespeed_options),
        )
        .route("/backend/getIP.php", get(librespeed_ip))
        .route("/config", get(rpm_config))
        .route("/small", get(rpm_small))
        .route("/large", get(rpm_large))
        .route("/slurp", post(rpm_slurp))
        .with_state(speed)
}

/// `n` bytes of xorshift64*: no repetition a compressor could find within them.
fn incompressible(n: usize) -> Bytes {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(n);
    Bytes::from(out)
}

/// Why a request is refused: its kind (which gives its status), and one line the client
/// can show.
#[derive(Debug)]
struct Refusal {
    kind: HttpRefusal,
    why: String,
}

fn refuse(kind: HttpRefusal, why: String) -> Refusal {
    Refusal { kind, why }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.kind.status()).expect("a status code");
        let mut r = (status, format!("{}\n", self.why)).into_response();
        no_store(r.headers_mut());
        if self.kind == HttpRefusal::Busy {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        r
    }
}

fn no_store(h: &mut HeaderMap) {
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-store, no-cache, must-revalidate, max-age=0"),
    );
    h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
}

impl Speed {
    /// The answer that refuses, told to the observer.
    fn refused(&self, r: Refusal) -> Response {
        (self.observer)(Event::Refused(r.kind));
        r.into_response()
    }

    /// A transfer's place for a client at `peer`, or the busy answer.
    fn slot(&self, peer: IpAddr) -> Result<Slot, Refusal> {
        let key = source_key(peer);
        let busy = |why: String| refuse(HttpRefusal::Busy, why);
        let mut counts = self
            .sources
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mine = counts.entry(key).or_insert(0);
        if *mine >= self.limits.max_transfers_per_source {
            return Err(busy(format!(
                "busy: {} transfers under way from {key}, the most this server runs for one \
                 address at once",
                self.limits.max_transfers_per_source
            )));
        }
        let all = self.transfers.clone().try_acquire_owned().map_err(|_| {
            busy(format!(
                "busy: {} transfers under way, the most this server runs at once",
                self.limits.max_transfers
            ))
        })?;
        *mine += 1;
        Ok(Slot {
            _all: all,
            sources: self.sources.clone(),
            key,
        })
    }

    /// `bytes` of the payload (`None`: without end, until the client stops reading), sent
    /// as it is read, holding `slot` until the last, for the limit's time at most.
    fn download(&self, bytes: Option<u64>, slot: Slot) -> Response {
        (self.observer)(Event::Download);
        let chunk = self.chunk.clone();
        let observer = self.observer.clone();
        // Past its time the body ends where it is (short of a length it said: the client
        // sees the download cut).
        let deadline = Instant::now() + self.limits.max_duration;
        let body = futures_util::stream::unfold((bytes, slot), move |(left, slot)| {
            let (chunk, observer) = (chunk.clone(), observer.clone());
            async move {
                if Instant::now() >= deadline {
                    return None;
                }
                let n = match left {
                    Some(0) => return None,
                    Some(left) => left.min(chunk.len() as u64),
                    None => chunk.len() as u64,
                };
                observer(Event::Sent(n));
                Some((
                    Ok::<_, std::convert::Infallible>(chunk.slice(..n as usize)),
                    (left.map(|l| l - n), slot),
                ))
            }
        });
        let mut r = Response::new(Body::from_stream(body));
        let h = r.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        if let Some(bytes) = bytes {
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(bytes));
        }
        no_store(h);
        r
    }

    /// Reads an upload's body from a client at `peer` to its end and drops it
    /// (`bounded`: at most the limit's bytes): the bytes it held, or the answer that
    /// refuses it (too large, stalled, too long); `None` when the client went away.
    async fn upload(
        &self,
        peer: IpAddr,
        run: Option<&str>,
        headers: &HeaderMap,
        body: Body,
        bounded: bool,
        socket: Option<Extension<crate::Socket>>,
    ) -> Result<u64, Option<Refusal>> {
        let max = if bounded {
            self.limits.max_bytes
        } else {
            u64::MAX
        };
        let too_large = |what: String| {
            Some(refuse(
                HttpRefusal::TooLarge,
                format!("an upload of {what}: this server takes at most {max} bytes a request"),
            ))
        };
        let length = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if let Some(n) = length.filter(|&n| n > max) {
            return Err(too_large(format!("{n} bytes")));
        }
        let mut low_water = socket.zip(length).map(|(s, n)| LowWater::new(s.0.0, n));
        let _slot = self.slot(peer).map_err(Some)?;
        (self.observer)(Event::Upload);
        let deadline = tokio::time::Instant::now() + self.limits.max_duration;
        let mut stream = body.into_data_stream();
        let mut got = 0u64;
        let tally = run.map(|run| self.tally.counter(peer, run));
        loop {
            let stall = tokio::time::Instant::now() + self.limits.stall;
            match tokio::time::timeout_at(stall.min(deadline), stream.next()).await {
                Ok(Some(Ok(data))) => {
                    got += data.len() as u64;
                    if let Some(l) = low_water.as_mut() {
                        l.received(got);
                    }
                    (self.observer)(Event::Received(data.len() as u64));
                    if let Some(tally) = &tally {
                        tally.fetch_add(data.len() as u64, Ordering::Relaxed);
                    }
                    if got > max {
                        return Err(too_large(format!("more than {max} bytes")));
                    }
                }
                Ok(None) => return Ok(got),
                // The client went away (or broke its framing): no one to answer.
                Ok(Some(Err(_))) => return Err(None),
                Err(_) if tokio::time::Instant::now() >= deadline => {
                    return Err(Some(refuse(
                        HttpRefusal::Timeout,
                        format!(
                            "the upload took longer than {:?}, the most this server gives \
                             one ({got} bytes read)",
                            self.limits.max_duration
                        ),
                    )));
                }
                // Bytes may be waiting below the low-water mark.
                Err(_) if low_water.as_mut().is_some_and(LowWater::lower) => {}
                Err(_) => {
                    return Err(Some(refuse(
                        HttpRefusal::Timeout,
                        format!(
                            "the upload stalled: no byte in {:?} after {got}",
                            self.limits.stall
                        ),
                    )));
                }
            }
        }
    }

    /// The answer to an upload: 200, or why not.
    fn uploaded(&self, outcome: Result<u64, Option<Refusal>>) -> Response {
        match outcome {
            Ok(_) => {
                let mut r = StatusCode::OK.into_response();
                no_store(r.headers_mut());
                r
            }
            Err(Some(refused)) => self.refused(refused),
            Err(None) => StatusCode::BAD_REQUEST.into_response(),
        }
    }
}

/// Cloudflare's headers: any origin may read the answer, its timing and the server's
/// time (`Server-Timing`, `dur` in milliseconds: the server's own part of the request,
/// from its head read to its answer's head).
fn cloudflare_headers(r: &mut Response, began: Instant) {
    let h = r.headers_mut();
    let any = HeaderValue::from_static("*");
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, any.clone());
    h.insert("timing-allow-origin", any);
    h.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("Server-Timing"),
    );
    let dur = began.elapsed().as_secs_f64() * 1e3;
    if let Ok(v) = HeaderValue::from_str(&format!("cfRequestDuration;dur={dur:.3}")) {
        h.insert("server-timing", v);
    }
}

/// `bytes=N` of a query: N, or the answer that refuses it.
fn bytes_asked(query: &HashMap<String, String>, max: u64) -> Result<u64, Refusal> {
    let Some(text) = query.get("bytes") else {
        return Err(refuse(
            HttpRefusal::Bad,
            "no bytes=N: say how many bytes to send".into(),
        ));
    };
    let n: u64 = text.parse().map_err(|_| {
        refuse(
            HttpRefusal::Bad,
            format!("bytes={text}: not a number of bytes"),
        )
    })?;
    if n > max {
        return Err(refuse(
            HttpRefusal::Bad,
            format!("bytes={n}: this server sends at most {max} a request"),
        ));
    }
    Ok(n)
}

async fn cloudflare_down(
    State(speed): State<Speed>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let began = Instant::now();
    let mut r = match bytes_asked(&query, speed.limits.max_bytes).and_then(|n| {
        let slot = speed.slot(peer.ip())?;
        Ok(speed.download(Some(n), slot))
    }) {
        Ok(r) => r,
        Err(refused) => speed.refused(refused),
    };
    cloudflare_headers(&mut r, began);
    r
}

async fn cloudflare_up(
    State(speed): State<Speed>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Query(query): Query<HashMap<String, String>>,
    socket: Option<Extension<crate::Socket>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // The speed-test page names its run, so that its result can say what arrived.
    let run = query.get("run").and_then(|r| run_id(r));
    let upload = speed.upload(peer.ip(), run, &headers, body, true, socket);
    let mut r = speed.uploaded(upload.await);
    // The server's own time is what follows the body's last byte.
    cloudflare_headers(&mut r, Instant::now());
    r
}

/// LibreSpeed's cross-origin headers, when the client asked (`?cors`).
fn librespeed_cors(r: &mut Response, query: &HashMap<String, String>) {
    if query.contains_key("cors") {
        let h = r.headers_mut();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            HeaderValue::from_static("*"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static("Content-Encoding, Content-Type"),
        );
    }
}

/// LibreSpeed's `ckSize`: chunks of 1 MiB, 4 unless a positive number, 1 024 at most.
fn chunks_asked(query: &HashMap<String, String>) -> u64 {
    match query.get("ckSize").map(|t| t.parse::<u64>()) {
        Some(Ok(n)) if n > 0 => n.min(1024),
        _ => 4,
    }
}

async fn librespeed_garbage(
    State(speed): State<Speed>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    // A server whose --http-max-bytes is below what is asked sends what it allows: the
    // client measures the bytes it is sent, and knows no error here.
    let bytes = (chunks_asked(&query) * CHUNK as u64).min(speed.limits.max_bytes);
    let mut r = match speed.slot(peer.ip()) {
        Ok(slot) => speed.download(Some(bytes), slot),
        Err(refused) => speed.refused(refused),
    };
    r.headers_mut().insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_static("attachment; filename=random.dat"),
    );
    librespeed_cors(&mut r, &query);
    r
}

async fn librespeed_empty(
    State(speed): State<Speed>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Query(query): Query<HashMap<String, String>>,
    socket: Option<Extension<crate::Socket>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // Its ping: a request without a body, which takes no transfer's place.
    let mut r = if axum::body::HttpBody::size_hint(&body).exact() == Some(0) {
        speed.uploaded(Ok(0))
    } else {
        let upload = speed.upload(peer.ip(), None, &headers, body, true, socket);
        speed.uploaded(upload.await)
    };
    librespeed_cors(&mut r, &query);
    r
}

async fn librespeed_options(Query(query): Query<HashMap<String, String>>) -> Response {
    let mut r = StatusCode::OK.into_response();
    librespeed_cors(&mut r, &query);
    r
}

/// What LibreSpeed's getIP.php says of an address it looks up nowhere.
fn address_kind(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) if v4.is_loopback() => Some("localhost IPv4 access"),
        IpAddr::V4(v4) if v4.is_private() => Some("private IPv4 access"),
        IpAddr::V4(v4) if v4.is_link_local() => Some("link-local IPv4 access"),
        IpAddr::V6(v6) if v6.is_loopback() => Some("localhost IPv6 access"),
        IpAddr::V6(v6) if v6.is_unicast_link_local() => Some("link-local IPv6 access"),
        IpAddr::V6(v6) if v6.is_unique_local() => Some("ULA IPv6 access"),
        _ => None,
    }
}

async fn librespeed_ip(
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    // An IPv4 client of a dual-stack listener is seen as ::ffff:a.b.c.d.
    let ip = peer.ip().to_canonical();
    let shown = match address_kind(ip) {
        Some(kind) if query.contains_key("isp") => format!("{ip} - {kind}"),
        _ => ip.to_string(),
    };
    let body = serde_json::json!({ "processedString": shown, "rawIspInfo": "" }).to_string();
    let mut r = (
        [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
        body,
    )
        .into_response();
    no_store(r.headers_mut());
    librespeed_cors(&mut r, &query);
    r
}

/// The responsiveness method's configuration, naming this server's endpoints at the
/// address and scheme the client used: both key sets of Apple's reference server (its
/// client reads the `https_` ones, others the plain ones).
async fn rpm_config(
    State(speed): State<Speed>,
    axum::Extension(crate::Secure(tls)): axum::Extension<crate::Secure>,
    request: axum::extract::Request,
) -> Response {
    let authority = request
        .uri()
        .authority()
        .map(|a| a.to_string())
        .or_else(|| {
            // A Host that is not an authority (host and port) names no URL.
            request
                .headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .and_then(|h| h.parse::<axum::http::uri::Authority>().ok())
                .map(|a| a.to_string())
        });
    let Some(authority) = authority else {
        return speed.refused(refuse(
            HttpRefusal::Bad,
            "no Host (or not HOST[:PORT]): the configuration names this server as the \
             client reached it"
                .into(),
        ));
    };
    let scheme = if tls { "https" } else { "http" };
    let url = |path: &str| format!("{scheme}://{authority}/{path}");
    let doc = serde_json::json!({
        "version": 1,
        "urls": {
            "small_https_download_url": url("small"),
            "large_https_download_url": url("large"),
            "https_upload_url": url("slurp"),
            "small_download_url": url("small"),
            "large_download_url": url("large"),
            "upload_url": url("slurp"),
        },
    });
    let mut r = (
        [(header::CONTENT_TYPE, "application/json")],
        doc.to_string(),
    )
        .into_response();
    no_store(r.headers_mut());
    r
}

async fn rpm_small() -> Response {
    let mut r = (
        [(header::CONTENT_TYPE, "application/octet-stream")],
        Bytes::from_static(b"x"),
    )
        .into_response();
    no_store(r.headers_mut());
    r
}

async fn rpm_large(
    State(speed): State<Speed>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
) -> Response {
    match speed.slot(peer.ip()) {
        Ok(slot) => speed.download(None, slot),
        Err(refused) => speed.refused(refused),
    }
}

async fn rpm_slurp(
    State(speed): State<Speed>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    socket: Option<Extension<crate::Socket>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let upload = speed.upload(peer.ip(), None, &headers, body, false, socket);
    speed.uploaded(upload.await)
}

/// An upload's receive low-water mark (SO_RCVLOWAT): raised while much of the body is
/// still to come, so that the server is woken once for every [`LowWater::BATCH`] that
/// arrives, not for every 64 KiB (a bbr sender paces itself slower against the many
/// small wake-ups: lab-notes/http-upload.md); lowered for the body's last
/// [`LowWater::TAIL`], part of which the server's HTTP buffer may hold, and when the
/// upload ends however it ends, before the connection's next request.
struct LowWater {
    socket: Arc<std::os::fd::OwnedFd>,
    length: u64,
    raised: bool,
}

impl LowWater {
    const BATCH: usize = 512 << 10;
    /// More than the HTTP buffer holds (hyper's at most ~400 KiB) and a batch.
    const TAIL: u64 = 1 << 20;

    fn new(socket: Arc<std::os::fd::OwnedFd>, length: u64) -> LowWater {
        let raised = length > LowWater::TAIL && set_rcvlowat(&socket, LowWater::BATCH);
        LowWater {
            socket,
            length,
            raised,
        }
    }

    /// `got` bytes of the body have come.
    fn received(&mut self, got: u64) {
        if self.length.saturating_sub(got) <= LowWater::TAIL {
            self.lower();
        }
    }

    /// Back to a wake-up for every byte; whether it was raised (a body slower than a
    /// batch a stall's time is then given the stall's time again).
    fn lower(&mut self) -> bool {
        let was = self.raised;
        if was {
            set_rcvlowat(&self.socket, 1);
            self.raised = false;
        }
        was
    }
}

impl Drop for LowWater {
    fn drop(&mut self) {
        self.lower();
    }
}

/// Sets SO_RCVLOWAT; whether the kernel took it.
fn set_rcvlowat(socket: &std::os::fd::OwnedFd, bytes: usize) -> bool {
    use std::os::fd::AsRawFd;
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: the descriptor is open while borrowed, and `v` is a live c_int of the size
    // given.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&raw const v).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    rc == 0
}
