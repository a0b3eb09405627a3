//! A server's live view: `/status`, a page showing the tests running now, the last ones
//! that ended and totals since the server started, kept up to date by server-sent
//! events from `/status/events` (each a `flowlab_results::status::ServerStatus` as
//! JSON, sent when something changed, at most four times a second); `/status.json`
//! answers the same once.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use flowlab_results::server::ServerEvent;
use flowlab_results::status::{HttpActivity, ServerStatus};
use futures_util::Stream;
use tokio::sync::{Semaphore, watch};

const PAGE: &str = include_str!("../assets/status.html");
const SCRIPT: &str = include_str!("../assets/status.js");

/// Pages watching at once; more are answered 503 until one leaves.
const WATCHERS: usize = 32;

/// The least time between two updates a watcher is sent.
const EVERY: Duration = Duration::from_millis(250);

/// What a server is doing, told by the server as it happens and shown by `/status`.
#[derive(Debug)]
pub struct StatusHub {
    state: Mutex<ServerStatus>,
    changed: watch::Sender<u64>,
    watchers: Arc<Semaphore>,
}

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl StatusHub {
    /// The state of a server starting now.
    pub fn new() -> Arc<StatusHub> {
        Arc::new(StatusHub {
            state: Mutex::new(ServerStatus::new(env!("CARGO_PKG_VERSION"), now_unix())),
            changed: watch::Sender::new(0),
            watchers: Arc::new(Semaphore::new(WATCHERS)),
        })
    }

    /// Counts one of the server's events.
    pub fn observe(&self, event: &ServerEvent) {
        self.update(|s| s.observe(event, now_unix()));
    }

    /// Counts what the HTTP endpoints did.
    pub fn http(&self, activity: HttpActivity) {
        self.update(|s| s.http(activity));
    }

    fn update(&self, f: impl FnOnce(&mut ServerStatus)) {
        f(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()));
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    fn snapshot(&self) -> String {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        serde_json::to_string(&*state).unwrap_or_default()
    }
}

/// The live view's routes.
pub(crate) fn routes(hub: Arc<StatusHub>) -> axum::Router {
    axum::Router::new()
        .route(
            "/status",
            get(|| async { file(PAGE, "text/html; charset=utf-8") }),
        )
        .route(
            "/status.js",
            get(|| async { file(SCRIPT, "text/javascript; charset=utf-8") }),
        )
        .route("/status.json", get(snapshot))
        .route("/status/events", get(events))
        .with_state(hub)
}

fn file(body: &'static str, content_type: &'static str) -> Response {
    let mut r = ([(header::CONTENT_TYPE, content_type)], body).into_response();
    crate::page::protect(r.headers_mut());
    r
}

async fn snapshot(State(hub): State<Arc<StatusHub>>) -> Response {
    let mut r = ([(header::CONTENT_TYPE, "application/json")], hub.snapshot()).into_response();
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

async fn events(State(hub): State<Arc<StatusHub>>) -> Response {
    let Ok(permit) = Arc::clone(&hub.watchers).try_acquire_owned() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "5")],
            format!("{WATCHERS} pages watch this server already\n"),
        )
            .into_response();
    };
    let changed = hub.changed.subscribe();
    Sse::new(updates(hub, changed, permit))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// The state now, then again after each change, no sooner than [`EVERY`] apart; the
/// watcher's place is held until it leaves.
fn updates(
    hub: Arc<StatusHub>,
    changed: watch::Receiver<u64>,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> impl Stream<Item = Result<Event, Infallible>> {
    futures_util::stream::unfold(
        (hub, changed, permit, true),
        |(hub, mut changed, permit, first)| async move {
            if !first {
                tokio::time::sleep(EVERY).await;
                changed.changed().await.ok()?;
            }
            changed.mark_unchanged();
            let event = Event::default().data(hub.snapshot());
            Some((Ok(event), (hub, changed, permit, false)))
        },
    )
}
