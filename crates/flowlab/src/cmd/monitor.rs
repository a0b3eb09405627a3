//! `flowlab monitor MESH.toml`: a mesh's probes on their schedule between its hosts, a
//! line per run as it ends, and each path's figures for Prometheus (`--metrics`).
//! [`flowlab_runner::monitor`] watches at this machine ([`flowlab_runner::Local`]); this
//! prints what it says and counts it into [`PathMetrics`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::Context as _;
use clap::Args as ClapArgs;
use flowlab_monitor::path::PathMetrics;
use flowlab_report::{json, table};
use flowlab_runner::Error as RunError;
use flowlab_runner::monitor::{self, Event, Watch};

use super::{emit, emit_json};
use crate::usage::Usage;

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// The mesh file (TOML; docs/monitor.md describes every key).
    pub mesh: PathBuf,
    /// Record each run in this results database (a SQLite file, created when missing, or
    /// a postgres:// URL) the moment it ends, in table `monitor_run` (docs/results-db.md).
    #[arg(long, value_name = "FILE|URL")]
    pub db: Option<PathBuf>,
    /// Serve each path's figures for Prometheus at http://ADDRESS:PORT/metrics.
    #[arg(long, value_name = "ADDRESS:PORT")]
    pub metrics: Option<SocketAddr>,
    /// Stop after this long (seconds, or with a unit: 90s, 30m, 12h), letting the runs
    /// under way end; without it, until Ctrl-C.
    #[arg(long = "for", value_name = "DURATION")]
    pub for_: Option<String>,
    /// Draw the runs' jitter from this seed (the same seed, the same schedule); without
    /// it, from the clock (and said).
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// One JSON object per line (the start, each run, the summary) instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten, next_help_heading = "Output")]
    pub output: crate::args::OutputArgs,
}

/// The longest `--for`: a year.
const LONGEST: f64 = 366.0 * 86_400.0;

pub fn run(a: &Args) -> anyhow::Result<()> {
    let until = a
        .for_
        .as_deref()
        .map(|t| crate::usage::seconds("--for", t, false, LONGEST))
        .transpose()?;
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64 & ((1 << 53) - 1))
    });
    let prepared = monitor::prepare(&a.mesh).map_err(refusal)?;
    let metrics = Arc::new(PathMetrics::new()?);
    let _serving = match a.metrics {
        Some(addr) => {
            let listener = flowlab_web::Listener::bind(addr)
                .with_context(|| format!("--metrics {addr}: cannot listen there"))?;
            let at = listener.local_addr()?;
            let m = metrics.clone();
            let routes = flowlab_web::Routes::new().text(
                "/metrics",
                flowlab_monitor::CONTENT_TYPE,
                move || m.encode(),
            );
            let serving = listener.serve(routes).context("--metrics")?;
            let url = format!("http://{at}/metrics");
            if a.json {
                emit_json(&json::event_line(
                    "metrics",
                    &serde_json::json!({ "url": url }),
                ));
            } else {
                emit(&format!("metrics at {url}\n"));
            }
            Some(serving)
        }
        None => None,
    };
    let flowlab =
        super::own_binary().map_err(|e| anyhow::anyhow!("finding flowlab's own binary: {e}"))?;
    let place = flowlab_runner::Local::new(flowlab.clone());
    let stop = super::install_ctrl_c();
    let watch = Watch {
        place: &place,
        emulator: &flowlab,
        stop: &stop,
        until,
        seed,
        db: a.db.as_deref(),
        version: env!("CARGO_PKG_VERSION"),
    };
    let summary = monitor::watch(&prepared, &watch, &mut |e| match e {
        Event::Started(s) if a.json => emit_json(&json::event_line("start", s)),
        Event::Started(s) => emit(&table::monitor_start(s)),
        Event::Ran(r) => {
            metrics.observe(r);
            if a.json {
                emit_json(&json::event_line("run", r));
            } else {
                emit(&table::monitor_run(r));
            }
        }
        Event::Note(n) => eprintln!("note: {n}"),
    })
    .map_err(refusal)?;
    if a.json {
        emit_json(&json::event_line("summary", &summary));
    } else {
        emit(&table::monitor_summary(&summary));
    }
    if stop.load(Ordering::Acquire) {
        anyhow::bail!("interrupted");
    }
    Ok(())
}

/// A mesh refused as given is a usage error (the parse error shown where it is).
fn refusal(e: RunError) -> anyhow::Error {
    match e {
        RunError::Mesh { file, text, error } => {
            let place = crate::usage::snippet(&text, error.line, error.column);
            Usage(format!("{}: {error}{place}", file.display())).into()
        }
        RunError::Refused(why) => Usage(why).into(),
        other => other.into(),
    }
}
