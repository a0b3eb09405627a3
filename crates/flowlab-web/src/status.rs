//! A server's live view: `/status`, a page showing the tests running now, the last ones
//! that ended and totals since the server started, kept up to date by server-sent
//! events from `/status/events` (each a `flowlab_results::status::ServerStatus` as
//! JSON, sent as [`live`](crate::live) sends); `/status.json` answers the same once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use flowlab_results::server::ServerEvent;
use flowlab_results::status::{HttpActivity, ServerStatus};

use crate::live::{Watched, snapshot};
use crate::page::serve_file;

const PAGE: &str = include_str!("../assets/status.html");
const SCRIPT: &str = include_str!("../assets/status.js");

/// What a server is doing, told by the server as it happens and shown by `/status`.
#[derive(Debug)]
pub struct StatusHub {
    state: Mutex<ServerStatus>,
    /// The HTTP bytes, counted apart from `state`: they come per chunk of a transfer,
    /// too often for a lock and a wake-up each; a watcher's tick reads them.
    http_sent: AtomicU64,
    http_received: AtomicU64,
    watched: Watched,
}

pub(crate) fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl StatusHub {
    /// The state of a server starting now.
    pub fn new() -> Arc<StatusHub> {
        Arc::new(StatusHub {
            state: Mutex::new(ServerStatus::new(env!("CARGO_PKG_VERSION"), now_unix())),
            http_sent: AtomicU64::new(0),
            http_received: AtomicU64::new(0),
            watched: Watched::new(),
        })
    }

    /// Counts one of the server's events.
    pub fn observe(&self, event: &ServerEvent) {
        self.update(|s| s.observe(event, now_unix()));
    }

    /// Counts what the HTTP endpoints did.
    pub fn http(&self, activity: HttpActivity) {
        match activity {
            HttpActivity::Sent(n) => _ = self.http_sent.fetch_add(n, Ordering::Relaxed),
            HttpActivity::Received(n) => _ = self.http_received.fetch_add(n, Ordering::Relaxed),
            other => self.update(|s| s.http(other)),
        }
    }

    /// The HTTP bytes sent and received so far.
    fn http_bytes(&self) -> (u64, u64) {
        (
            self.http_sent.load(Ordering::Relaxed),
            self.http_received.load(Ordering::Relaxed),
        )
    }

    fn update(&self, f: impl FnOnce(&mut ServerStatus)) {
        f(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()));
        self.watched.changed();
    }

    fn snapshot(&self) -> String {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner()).clone();
        (
            state.totals.http_bytes_sent,
            state.totals.http_bytes_received,
        ) = self.http_bytes();
        serde_json::to_string(&state).unwrap_or_default()
    }
}

/// The live view's routes.
pub(crate) fn routes(hub: Arc<StatusHub>) -> axum::Router {
    axum::Router::new()
        .route(
            "/status",
            serve_file(PAGE, "text/html; charset=utf-8", false),
        )
        .route(
            "/status.js",
            serve_file(SCRIPT, "text/javascript; charset=utf-8", false),
        )
        .route(
            "/status.json",
            get(|State(hub): State<Arc<StatusHub>>| async move { snapshot(hub.snapshot()) }),
        )
        .route("/status/events", get(events))
        .with_state(hub)
}

async fn events(State(hub): State<Arc<StatusHub>>) -> Response {
    let (a, b) = (hub.clone(), hub.clone());
    hub.watched.events(
        move || a.snapshot(),
        move || {
            let (sent, received) = b.http_bytes();
            sent.wrapping_add(received)
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::EVERY;
    use futures_util::StreamExt;

    fn received(json: &str) -> u64 {
        let v: serde_json::Value = serde_json::from_str(json).expect("a status document");
        v["totals"]["http_bytes_received"]
            .as_u64()
            .expect("http_bytes_received")
    }

    /// Bytes are counted without the state's lock or a wake-up, so a watcher's tick must
    /// find them itself: an upload's bytes alone (no test begun or ended) reach the page.
    #[tokio::test(start_paused = true)]
    async fn bytes_moved_alone_reach_a_watcher_on_its_next_tick() {
        let hub = StatusHub::new();
        let mut updates = events(State(hub.clone()))
            .await
            .into_body()
            .into_data_stream();
        let first = updates.next().await.unwrap().unwrap();
        assert!(String::from_utf8_lossy(&first).starts_with("data:"));
        hub.http(HttpActivity::Received(1500));
        hub.http(HttpActivity::Received(1500));
        let next = tokio::time::timeout(EVERY * 2, updates.next())
            .await
            .expect("an update within a tick")
            .unwrap()
            .unwrap();
        let next = String::from_utf8_lossy(&next);
        let json = next.trim().strip_prefix("data:").expect("an event").trim();
        assert_eq!(received(json), 3000);
        // Nothing moved since: no update on the next ticks.
        assert!(
            tokio::time::timeout(EVERY * 4, updates.next())
                .await
                .is_err()
        );
        // A transfer begun, with no bytes, wakes it too.
        hub.http(HttpActivity::Upload);
        assert!(
            tokio::time::timeout(EVERY * 2, updates.next())
                .await
                .is_ok()
        );
    }
}
