//! A set of files served by name under a prefix (`serve --fragments DIR` with `--http`:
//! `/fragments/NAME`), as a page fetching them from several servers at once needs them:
//! byte ranges (`Range: bytes=A-B`, one range a request: 206 with `Content-Range`; a
//! range past the end: 416), readable from pages of any origin (CORS, the `Range` and
//! `Authorization` headers allowed, `Content-Range` exposed), never cached, and paced to
//! the set's rate when it has one. The set says which names exist and opens them
//! ([`FileSet`]): nothing here reads a path, so nothing is listed and no name escapes.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::Semaphore;

/// Files a listener serves by name: the set decides what exists and may be read.
pub trait FileSet: Send + Sync + 'static {
    /// The name of the set's index (its manifest), answered from [`FileSet::index`].
    fn index_name(&self) -> &str;
    /// The index's bytes (JSON).
    fn index(&self) -> Vec<u8>;
    /// Opens file `name` of the set: the file and its size, or why not (no such file in
    /// the set, or it cannot be read as it was when the set was loaded).
    fn open(&self, name: &str) -> Result<(std::fs::File, u64), String>;
    /// Whether a request carrying this bearer token (none: `None`) may read the set.
    fn authorized(&self, bearer: Option<&[u8]>) -> bool;
    /// Bits a second one response is sent at, at most (0: as fast as it goes).
    fn rate_bps(&self) -> u64;
}

/// Responses sent at once; more are answered 503 with `Retry-After` until one ends (as
/// the native fragment service holds 64 connections).
const AT_ONCE: usize = 64;

/// Bytes read and sent at a time (and the pacing's step).
const PIECE: usize = 64 * 1024;

#[derive(Clone)]
struct Served {
    set: Arc<dyn FileSet>,
    at_once: Arc<Semaphore>,
}

/// The set's routes under `prefix` (`/fragments`).
pub(crate) fn routes(prefix: &str, set: Arc<dyn FileSet>) -> axum::Router {
    axum::Router::new()
        .route(
            &format!("{prefix}/{{name}}"),
            get(file).options(|| async { preflight() }),
        )
        .with_state(Served {
            set,
            at_once: Arc::new(Semaphore::new(AT_ONCE)),
        })
}

/// The cross-origin headers of every answer: any page may read a fragment (a fetch from
/// several servers is cross-origin to all but one), and the range it was sent.
fn cors(h: &mut HeaderMap) {
    h.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    h.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("Content-Range, Content-Length, Accept-Ranges"),
    );
}

fn preflight() -> Response {
    let mut r = StatusCode::NO_CONTENT.into_response();
    let h = r.headers_mut();
    cors(h);
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("Range, Authorization"),
    );
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    r
}

fn said(status: StatusCode, why: String) -> Response {
    let mut r = (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        why + "\n",
    )
        .into_response();
    cors(r.headers_mut());
    r
}

async fn file(State(s): State<Served>, Path(name): Path<String>, headers: HeaderMap) -> Response {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
    if !s.set.authorized(bearer) {
        let mut r = said(
            StatusCode::UNAUTHORIZED,
            "this set is served to holders of its token: send it as \
             `Authorization: Bearer TOKEN`"
                .into(),
        );
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return r;
    }
    if name == s.set.index_name() {
        let mut r = ([(header::CONTENT_TYPE, "application/json")], s.set.index()).into_response();
        cors(r.headers_mut());
        r.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        return r;
    }
    let Ok(permit) = Arc::clone(&s.at_once).try_acquire_owned() else {
        let mut r = said(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("busy: {AT_ONCE} files are being sent, the most this server sends at once"),
        );
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return r;
    };
    let set = Arc::clone(&s.set);
    let opened = tokio::task::spawn_blocking(move || set.open(&name)).await;
    let (file, size) = match opened {
        Ok(Ok(opened)) => opened,
        Ok(Err(why)) => return said(StatusCode::NOT_FOUND, why),
        Err(e) => return said(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let range = match headers.get(header::RANGE).map(|v| v.to_str()) {
        None => None,
        Some(text) => {
            let ranges = text.map_err(|e| e.to_string()).and_then(|t| {
                http_range_header::parse_range_header(t)
                    .and_then(|r| r.validate(size))
                    .map_err(|e| e.to_string())
            });
            match ranges.as_deref() {
                Ok([one]) => Some(one.clone()),
                // Several ranges at once: the whole file, as RFC 9110 allows.
                Ok(_) => None,
                Err(why) => {
                    let mut r = said(
                        StatusCode::RANGE_NOT_SATISFIABLE,
                        format!("Range: {why} (the file has {size} bytes)"),
                    );
                    if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                        r.headers_mut().insert(header::CONTENT_RANGE, v);
                    }
                    return r;
                }
            }
        }
    };
    let (start, len) = match &range {
        Some(r) => (*r.start(), r.end() - r.start() + 1),
        None => (0, size),
    };
    let mut file = tokio::fs::File::from_std(file);
    if let Err(e) = file.seek(std::io::SeekFrom::Start(start)).await {
        return said(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
    }
    let rate = s.set.rate_bps();
    let body = futures_util::stream::unfold(
        (file, len, tokio::time::Instant::now(), 0u64, permit),
        move |(mut file, left, began, sent, permit)| async move {
            if left == 0 {
                return None;
            }
            let mut buf = vec![0u8; (left as usize).min(PIECE)];
            let n = match file.read(&mut buf).await {
                Ok(0) => {
                    let e = std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the file is shorter than when it was opened",
                    );
                    return Some((Err(e), (file, 0, began, sent, permit)));
                }
                Ok(n) => n,
                Err(e) => return Some((Err(e), (file, 0, began, sent, permit))),
            };
            buf.truncate(n);
            let sent = sent + n as u64;
            if rate > 0 {
                // Never ahead of the rate: a piece leaves once the rate allows every byte
                // up to its end.
                let due = began + Duration::from_secs_f64(sent as f64 * 8.0 / rate as f64);
                tokio::time::sleep_until(due).await;
            }
            Some((
                Ok(Bytes::from(buf)),
                (file, left - n as u64, began, sent, permit),
            ))
        },
    );
    let mut r = Response::new(Body::from_stream(body));
    let h = r.headers_mut();
    cors(h);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(r_) = &range {
        *r.status_mut() = StatusCode::PARTIAL_CONTENT;
        if let Ok(v) = HeaderValue::from_str(&format!("bytes {}-{}/{size}", r_.start(), r_.end())) {
            r.headers_mut().insert(header::CONTENT_RANGE, v);
        }
    }
    r
}
