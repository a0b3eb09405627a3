//! The speed-test page at `/`: download, upload and latency (idle and under load) run
//! by the browser against [`speed`](crate::speed)'s endpoints, every file served from
//! here (no other origin: the page works offline on a LAN). The page sends what it
//! measured to `POST /results`, which answers the document of schema `flowlab.web/1`
//! (`flowlab_results::web`: `flowlab test`'s own intervals, totals and latency); the
//! page shows that document and offers it for download. `GET /results` gives back the
//! runs sent from the asker's own address (IPv6: its /64), newest last.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use axum::extract::{ConnectInfo, DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use flowlab_proto::source::source_key;
use flowlab_results::server::HttpRefusal;
use flowlab_results::web::{BrowserRun, WebResult, WebStart};

use crate::speed::{Event, Observer, Tally};

/// The page, its scripts and its style, built into the binary (the style and the units
/// are the live view's too).
const INDEX: &str = include_str!("../assets/index.html");
const SCRIPT: &str = include_str!("../assets/speed.js");
const STYLE: &str = include_str!("../assets/speed.css");
const UNITS: &str = include_str!("../assets/units.js");
/// The seed-000 page: a fragment set fetched from several servers, and its scheduler.
const FETCH: &str = include_str!("../assets/fetch.html");
const FETCH_SCRIPT: &str = include_str!("../assets/fetch.js");
const SCHEDULE: &str = include_str!("../assets/schedule.js");

/// Runs kept for `GET /results`: the newest, from any address.
const KEPT: usize = 64;

/// Bytes a run's document may take: an hour's intervals and probes fit.
const MAX_RUN_BYTES: usize = 4 << 20;

/// Where the page may load from and connect to: this server only. Inline scripts and
/// styles are refused too, so that nothing but the served files runs.
const POLICY: &str = "default-src 'self'; img-src 'self' data:; base-uri 'none'; \
                      form-action 'none'; frame-ancestors 'none'";

/// The fetch page's policy: [`POLICY`], but connecting to any http(s) server.
const FETCH_POLICY: &str = "default-src 'self'; connect-src 'self' http: https:; \
                            img-src 'self' data:; base-uri 'none'; form-action 'none'; \
                            frame-ancestors 'none'";

#[derive(Clone)]
struct Page {
    recent: Arc<Mutex<VecDeque<(IpAddr, WebResult)>>>,
    congestion: Option<String>,
    tally: Tally,
    observer: Observer,
}

/// The page's routes. `congestion` is the server's default TCP congestion control, said
/// in each run's document (it governs the downloads, which this server sends).
pub(crate) fn routes(congestion: Option<String>, tally: Tally, observer: Observer) -> axum::Router {
    let page = Page {
        recent: Arc::new(Mutex::new(VecDeque::with_capacity(KEPT))),
        congestion,
        tally,
        observer,
    };
    axum::Router::new()
        .route("/", serve_file(INDEX, "text/html; charset=utf-8", true))
        .route(
            "/speed.js",
            serve_file(SCRIPT, "text/javascript; charset=utf-8", true),
        )
        // Not cross-origin isolated, and connecting anywhere: it reads the fragments of
        // the servers its user names (its scripts are still only this server's).
        .route(
            "/fetch",
            get(|| async {
                let mut r = file(FETCH, "text/html; charset=utf-8", false);
                r.headers_mut().insert(
                    header::CONTENT_SECURITY_POLICY,
                    HeaderValue::from_static(FETCH_POLICY),
                );
                r
            }),
        )
        .route(
            "/fetch.js",
            serve_file(FETCH_SCRIPT, "text/javascript; charset=utf-8", false),
        )
        .route(
            "/schedule.js",
            serve_file(SCHEDULE, "text/javascript; charset=utf-8", false),
        )
        .route("/results", get(own_results).post(post_result))
        .layer(DefaultBodyLimit::max(MAX_RUN_BYTES))
        .with_state(page)
}

fn file(body: &'static str, content_type: &'static str, isolated: bool) -> Response {
    let mut r = ([(header::CONTENT_TYPE, content_type)], body).into_response();
    let h = r.headers_mut();
    protect(h);
    // Cross-origin isolated, the browser's clock reads to 5 µs rather than 100 µs,
    // which a round trip on a LAN needs. Browsers isolate only a trustworthy origin
    // (https, or loopback), and say so on the console for any other.
    if isolated {
        h.insert(
            "cross-origin-opener-policy",
            HeaderValue::from_static("same-origin"),
        );
        h.insert(
            "cross-origin-embedder-policy",
            HeaderValue::from_static("require-corp"),
        );
    }
    r
}

/// The headers of every page flowlab serves: nothing from elsewhere may load or run, the
/// type is as said, no referrer leaves, and the browser asks again each time (a new
/// flowlab may serve a new page).
fn protect(h: &mut HeaderMap) {
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
}

/// The page was asked for by a loopback name (`localhost`, `127.0.0.1`, `[::1]`).
fn loopback(headers: &HeaderMap) -> bool {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.parse::<axum::http::uri::Authority>().ok());
    host.is_some_and(|a| {
        let name = a.host().trim_start_matches('[').trim_end_matches(']');
        name.eq_ignore_ascii_case("localhost")
            || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
    })
}

/// The files every page of flowlab's uses: its style and its units.
pub(crate) fn shared() -> axum::Router {
    axum::Router::new()
        .route(
            "/speed.css",
            serve_file(STYLE, "text/css; charset=utf-8", true),
        )
        .route(
            "/units.js",
            serve_file(UNITS, "text/javascript; charset=utf-8", true),
        )
}

/// A GET route answering one of flowlab's pages or their files, under [`protect`]'s
/// headers; `isolated`: cross-origin isolated where a browser allows it (the speed-test
/// page, for its clock).
pub(crate) fn serve_file<S: Clone + Send + Sync + 'static>(
    body: &'static str,
    content_type: &'static str,
    isolated: bool,
) -> axum::routing::MethodRouter<S> {
    get(
        move |axum::Extension(crate::Secure(secure)): axum::Extension<crate::Secure>,
              headers: HeaderMap| async move {
            file(
                body,
                content_type,
                isolated && (secure || loopback(&headers)),
            )
        },
    )
}

fn json(status: StatusCode, body: Vec<u8>) -> Response {
    let mut r = (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        Bytes::from(body),
    )
        .into_response();
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// A run's document that cannot be a result: 400 with why, told to the observer as a
/// bad request.
fn refused(page: &Page, why: String) -> Response {
    (page.observer)(Event::Refused(HttpRefusal::Bad));
    let body = serde_json::to_vec(&serde_json::json!({ "error": why })).unwrap_or_default();
    json(StatusCode::BAD_REQUEST, body)
}

async fn post_result(
    State(page): State<Page>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    axum::Extension(crate::Secure(secure)): axum::Extension<crate::Secure>,
    request: axum::extract::Request,
) -> Response {
    let version = format!("{:?}", request.version());
    let user_agent = header_text(request.headers(), header::USER_AGENT);
    let body = match axum::body::to_bytes(request.into_body(), MAX_RUN_BYTES).await {
        Ok(b) => b,
        Err(e) => return refused(&page, format!("the run's document: {e}")),
    };
    let run: BrowserRun = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return refused(&page, format!("the run's document: {e}")),
    };
    let start = WebStart {
        timestamp: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        flowlab_version: env!("CARGO_PKG_VERSION").into(),
        client: peer.ip().to_canonical().to_string(),
        user_agent,
        http_version: version,
        secure,
        congestion_server: page.congestion.clone(),
        streams: run.streams,
        seconds: run.seconds,
    };
    let received = run
        .run
        .as_deref()
        .and_then(crate::speed::run_id)
        .and_then(|id| page.tally.take(peer.ip(), id));
    let doc = match run.judge(start, received) {
        Ok(d) => d,
        Err(e) => return refused(&page, format!("the run's document: {e}")),
    };
    let body = serde_json::to_vec_pretty(&doc).unwrap_or_default();
    let mut recent = page.recent.lock().unwrap_or_else(|e| e.into_inner());
    if recent.len() == KEPT {
        recent.pop_front();
    }
    recent.push_back((source_key(peer.ip()), doc));
    drop(recent);
    (page.observer)(Event::PageRun);
    json(StatusCode::OK, body)
}

async fn own_results(
    State(page): State<Page>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
) -> Response {
    let me = source_key(peer.ip());
    let recent = page.recent.lock().unwrap_or_else(|e| e.into_inner());
    let own: Vec<&WebResult> = recent
        .iter()
        .filter(|(from, _)| *from == me)
        .map(|(_, doc)| doc)
        .collect();
    json(
        StatusCode::OK,
        serde_json::to_vec_pretty(&own).unwrap_or_default(),
    )
}

fn header_text(headers: &HeaderMap, name: header::HeaderName) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .chars()
        .take(256)
        .collect()
}
