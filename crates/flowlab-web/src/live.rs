//! A state watched live by pages: server-sent events carrying the state as JSON, sent
//! when it changed and at most every [`EVERY`], to [`WATCHERS`] pages at once. The
//! server's live view ([`status`](crate::status)) and a study's progress
//! ([`progress`](crate::progress)) are told this way.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

/// Pages watching at once; more are answered 503 until one leaves.
pub const WATCHERS: usize = 32;

/// The least time between two updates a watcher is sent.
pub const EVERY: Duration = Duration::from_millis(250);

/// Who watches a state, and the news that it changed.
#[derive(Debug)]
pub(crate) struct Watched {
    changed: watch::Sender<u64>,
    watchers: Arc<Semaphore>,
}

impl Watched {
    pub(crate) fn new() -> Watched {
        Watched {
            changed: watch::Sender::new(0),
            watchers: Arc::new(Semaphore::new(WATCHERS)),
        }
    }

    /// The state changed: watchers are sent it on their next tick.
    pub(crate) fn changed(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// How many times the state changed: what was made of it at one count holds until
    /// the next.
    pub(crate) fn version(&self) -> u64 {
        *self.changed.borrow()
    }

    /// The events a page listens to: `document()` now, then again after each change.
    /// `mark()` tells what changes without [`changed`](Watched::changed) being said
    /// (counts kept apart from the state, too busy for a wake-up each): a tick that
    /// finds it moved sends the state too.
    pub(crate) fn events(
        &self,
        document: impl Fn() -> String + Send + Sync + 'static,
        mark: impl Fn() -> u64 + Send + Sync + 'static,
    ) -> Response {
        let Ok(permit) = Arc::clone(&self.watchers).try_acquire_owned() else {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, "5")],
                format!("{WATCHERS} pages watch this already\n"),
            )
                .into_response();
        };
        Sse::new(updates(self.changed.subscribe(), permit, document, mark))
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
            .into_response()
    }
}

/// A state's JSON, once (not to be cached).
pub(crate) fn snapshot(json: String) -> Response {
    let mut r = ([(header::CONTENT_TYPE, "application/json")], json).into_response();
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// The state now, then again after each change, no sooner than [`EVERY`] apart; the
/// watcher's place is held until it leaves.
fn updates<D, M>(
    changed: watch::Receiver<u64>,
    permit: OwnedSemaphorePermit,
    document: D,
    mark: M,
) -> impl Stream<Item = Result<Event, Infallible>>
where
    D: Fn() -> String + Send + Sync + 'static,
    M: Fn() -> u64 + Send + Sync + 'static,
{
    let look = Arc::new((document, mark));
    futures_util::stream::unfold(
        (changed, permit, None, look),
        |(mut changed, permit, shown, look)| async move {
            let (document, mark) = &*look;
            if shown.is_some() {
                loop {
                    tokio::time::sleep(EVERY).await;
                    if changed.has_changed().ok()? || Some(mark()) != shown {
                        break;
                    }
                }
            }
            changed.mark_unchanged();
            let now = mark();
            let event = Event::default().data(document());
            Some((Ok(event), (changed, permit, Some(now), look)))
        },
    )
}
