//! A study's progress, as `flowlab run --http` serves it: `/` shows the run (trials done
//! of the plan, each as it ends, the time left, the summary once it ended), kept up to
//! date by server-sent events from `/progress/events` (each a
//! `flowlab_results::study::StudyProgress` as JSON, sent as [`live`](crate::live)
//! sends); `/progress.json` answers the same once; `/report` is the study's HTML report
//! as the database holds it at the moment it is asked for (made anew each time: a chart
//! fills in as trials are recorded), reloading itself while the run goes on.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use flowlab_results::study::StudyProgress;

use crate::live::{Watched, snapshot};
use crate::page::serve_file;

const PAGE: &str = include_str!("../assets/progress.html");
const SCRIPT: &str = include_str!("../assets/progress.js");

/// How often `/report` reloads itself while the run goes on, in seconds.
pub const REPORT_REFRESH: u32 = 10;

/// The report's own policy: its style and charts are inline (it is one file, as
/// `flowlab report -o report.html` writes it); nothing runs and nothing else loads.
const REPORT_POLICY: &str = "default-src 'none'; style-src 'unsafe-inline'; \
                             img-src data:; base-uri 'none'; form-action 'none'; \
                             frame-ancestors 'none'";

/// The study's HTML report as the database holds it now, or why there is none.
pub type Report = Arc<dyn Fn() -> Result<String, String> + Send + Sync>;

/// A study's run as it goes, told by the runner and shown by `/`.
#[derive(Debug)]
pub struct ProgressHub {
    state: Mutex<StudyProgress>,
    watched: Watched,
}

impl ProgressHub {
    pub fn new(progress: StudyProgress) -> Arc<ProgressHub> {
        Arc::new(ProgressHub {
            state: Mutex::new(progress),
            watched: Watched::new(),
        })
    }

    /// Changes the progress (a trial ended, the run ended) and tells the pages.
    pub fn update(&self, f: impl FnOnce(&mut StudyProgress)) {
        f(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()));
        self.watched.changed();
    }

    fn running(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .running()
    }

    fn snapshot(&self) -> String {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        serde_json::to_string(&*state).unwrap_or_default()
    }
}

#[derive(Clone)]
struct Progress {
    hub: Arc<ProgressHub>,
    report: Report,
}

/// The progress page's routes.
pub(crate) fn routes(hub: Arc<ProgressHub>, report: Report) -> axum::Router {
    axum::Router::new()
        .route("/", serve_file(PAGE, "text/html; charset=utf-8", false))
        .route(
            "/progress.js",
            serve_file(SCRIPT, "text/javascript; charset=utf-8", false),
        )
        .route(
            "/progress.json",
            get(|State(p): State<Progress>| async move { snapshot(p.hub.snapshot()) }),
        )
        .route(
            "/progress/events",
            get(|State(p): State<Progress>| async move {
                let hub = p.hub.clone();
                p.hub.watched.events(move || hub.snapshot(), || 0)
            }),
        )
        .route("/report", get(report_now))
        .with_state(Progress { hub, report })
}

/// The report made now (on a thread of its own: it reads the database and draws every
/// chart), reloading itself every [`REPORT_REFRESH`] seconds while the run goes on.
async fn report_now(State(p): State<Progress>) -> Response {
    let made = p.report.clone();
    let made = tokio::task::spawn_blocking(move || made())
        .await
        .unwrap_or_else(|e| Err(format!("the report could not be made: {e}")));
    let mut r = match made {
        Ok(html) => ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response(),
        // No trial recorded yet is no fault: said, and asked again.
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("no report yet: {why}\n"),
        )
            .into_response(),
    };
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(REPORT_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if p.hub.running() {
        h.insert("refresh", HeaderValue::from(REPORT_REFRESH));
    }
    r
}
