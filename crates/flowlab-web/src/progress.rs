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
    /// The last report made, and the progress's version it was made at: the database
    /// changes only as trials end (which change the progress), so a page reloading
    /// every few seconds costs the runner's machine nothing between them — it measures.
    made: Arc<tokio::sync::Mutex<Option<(u64, Made)>>>,
}

/// A report made, or why it could not be.
type Made = Arc<Result<String, String>>;

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
        .with_state(Progress {
            hub,
            report,
            made: Arc::default(),
        })
}

/// The report as recorded now (made on a thread of its own, one at a time: it reads the
/// database and draws every chart; made again only once a trial has ended since),
/// reloading itself every [`REPORT_REFRESH`] seconds while the run goes on.
async fn report_now(State(p): State<Progress>) -> Response {
    let mut last = p.made.lock().await;
    let version = p.hub.watched.version();
    let made = match &*last {
        Some((at, made)) if *at == version => Arc::clone(made),
        _ => {
            let report = p.report.clone();
            let made = Arc::new(
                tokio::task::spawn_blocking(move || report())
                    .await
                    .unwrap_or_else(|e| Err(format!("the report could not be made: {e}"))),
            );
            // A report that could not be made (the study not written yet) is asked
            // again next time.
            if made.is_ok() {
                *last = Some((version, Arc::clone(&made)));
            }
            made
        }
    };
    drop(last);
    let mut r = match &*made {
        Ok(html) => (
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            html.clone(),
        )
            .into_response(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use flowlab_results::study::{PlanSummary, TrialEvent, TrialStatus};
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn plan() -> PlanSummary {
        PlanSummary {
            study: "s".into(),
            description: String::new(),
            order: "random".into(),
            seed: 1,
            repeat: 1,
            warmup: 0,
            scale: 1.0,
            setup: Vec::new(),
            servers: Vec::new(),
            cells: Vec::new(),
            planned: 2,
            trials: 2,
            first: Vec::new(),
            estimated_seconds: 0.0,
            estimate_is_floor: false,
        }
    }

    /// The report is made once per change of the progress, however often pages reload
    /// it (the runner's machine measures meanwhile); one that could not be made is
    /// asked again; it reloads itself only while the run goes on.
    #[test]
    fn the_report_is_made_again_only_when_a_trial_ended() {
        let hub = ProgressHub::new(StudyProgress::new(&plan(), "r.db", 0.0));
        let made = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&made);
        let report: Report = Arc::new(move || {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            if n == 0 {
                Err("no study yet".into())
            } else {
                Ok(format!("<p>report {n}</p>"))
            }
        });
        let listener = crate::Listener::bind(([127, 0, 0, 1], 0).into()).expect("bind");
        let at = listener.local_addr().expect("address");
        let _serving = listener
            .serve(crate::Routes::new().progress(Arc::clone(&hub), report))
            .expect("serve");
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let get = || {
            let mut r = agent
                .get(format!("http://{at}/report"))
                .call()
                .expect("/report");
            let refresh = r.headers().get("refresh").is_some();
            let body = r.body_mut().read_to_string().expect("a body");
            (r.status().as_u16(), body, refresh)
        };
        let (status, body, refresh) = get();
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("no study yet") && refresh);
        assert_eq!(get().1, "<p>report 1</p>", "an error is not kept");
        assert_eq!(
            get().1,
            "<p>report 1</p>",
            "nothing changed: the same report"
        );
        assert_eq!(made.load(Ordering::SeqCst), 2);
        hub.update(|p| {
            p.trial(&TrialEvent {
                index: 1,
                of: 2,
                cell: String::new(),
                repetition: 1,
                status: TrialStatus::Ok,
                seconds: 1.0,
                error: None,
                eta_seconds: None,
            })
        });
        assert_eq!(get().1, "<p>report 2</p>", "a trial ended: made again");
        hub.update(|p| p.ended(Default::default()));
        let (_, body, refresh) = get();
        assert_eq!(body, "<p>report 3</p>");
        assert!(!refresh, "the run ended: no more reloading");
        assert_eq!(made.load(Ordering::SeqCst), 4);
    }
}
