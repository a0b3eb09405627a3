//! Watching networks over time. A server's own counters for Prometheus, counted from the
//! events its log already receives (`flowlab serve --metrics`, [`server`]); and, for
//! `flowlab monitor`, the mesh file ([`mesh`]) and the schedule of its runs
//! ([`schedule`]), both sans-IO, and each path's figures from the runs it reports
//! ([`path`]). Metrics are written in Prometheus's text format
//! (0.0.4), which every Prometheus scrapes and its `promtool check metrics` reads, and
//! served by `flowlab-web`'s one HTTP listener per process.

pub mod mesh;
pub mod path;
pub mod schedule;
pub mod server;

/// The content type of [`server::ServerMetrics::encode`]'s text.
pub const CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;
