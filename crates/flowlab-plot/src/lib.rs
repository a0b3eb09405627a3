//! flowlab's graphs, drawn from test results (`flowlab plot`).
//!
//! Data flows one way: results → [`panels`] (plain numbers: series, bands, markers, with
//! titles and units; no drawing) → [`render_svg`] / [`render_file`] (plotters, SVG or
//! PNG, with a built-in font so no system font is needed). The graphs:
//!
//! - [`Graph::Throughput`]: bit rate per interval, per stream and summed (seed 002).
//! - [`Graph::Window`]: congestion window, bytes in flight and the receiver's window, with
//!   the samples where the sender was at the receiver's window marked on it (seed 002's
//!   "window full", `flowlab_results::diagnose::window_full`).
//! - [`Graph::Rtt`]: smoothed RTT with a ±rttvar band, and the minimum RTT.
//! - [`Graph::TimeSeq`]: bytes sent and acknowledged over time, retransmissions marked
//!   (seed 004's time/sequence graph).
//! - [`Graph::Io`]: data segments per second, sent and received (seed 004's I/O graph).
//! - [`Graph::Latency`]: the round trip of each latency probe over the test's time, the
//!   intervals' medians and the idle median (the RRUL picture beside throughput).
//! - [`Graph::LatencyCdf`]: the distribution of the loaded round trips, and the idle ones.
//!
//! A trace-driven link's capacity is drawn apart, from its bins ([`capacity_panel`]), as
//! are its log's throughput and queueing delay ([`link_log_panels`]).
//!
//! A topology is drawn apart, from plain data ([`Diagram`] → [`topology_svg`]):
//! nodes in columns by their distance from the first host, links labelled.
//!
//! Several results are overlaid, each series labelled by the options in which the
//! results differ ([`labels`]). The window, RTT, time/sequence and I/O graphs need a
//! `--trace`d result, the latency graphs a `--latency` one.

mod draw;
mod series;
mod study;
mod topology;

pub use draw::{render_file, render_svg};
pub use series::{
    Band, LinkLogSeries, Panel, Series, capacity_panel, labels, link_log_panels, panels,
};
pub use study::{metric_panel, scatter_panel, spread_ellipse};
pub use topology::{Diagram, DiagramLink, NodeKind, topology_svg};

use flowlab_results::result::TestResult;

/// Which graph to draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Graph {
    Throughput,
    Window,
    Rtt,
    TimeSeq,
    Io,
    Latency,
    LatencyCdf,
    /// Every graph the results allow, stacked.
    All,
}

impl Graph {
    pub const NAMES: &'static [&'static str] = &[
        "throughput",
        "window",
        "rtt",
        "tseq",
        "io",
        "latency",
        "latency-cdf",
        "all",
    ];

    pub fn parse(name: &str) -> Option<Graph> {
        Some(match name {
            "throughput" => Graph::Throughput,
            "window" => Graph::Window,
            "rtt" => Graph::Rtt,
            "tseq" => Graph::TimeSeq,
            "io" => Graph::Io,
            "latency" => Graph::Latency,
            "latency-cdf" => Graph::LatencyCdf,
            "all" => Graph::All,
            _ => return None,
        })
    }
}

/// One result to draw: its name in a legend, where it came from (its file, as an error
/// names it), and the result.
#[derive(Debug, Clone)]
pub struct Input {
    pub name: String,
    pub from: String,
    pub result: TestResult,
}

/// Why a graph could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("{0} has no trace: run the test with --trace to draw this graph")]
    NoTrace(String),
    #[error("{0} has no latency probes: run the test with --latency to draw this graph")]
    NoLatency(String),
    #[error("{0} has no intervals: run the test with -i to draw throughput")]
    NoIntervals(String),
    #[error("the output must end in .svg or .png, not '{0}'")]
    Format(String),
    #[error("drawing failed: {0}")]
    Draw(String),
}
