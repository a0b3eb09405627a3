//! flowlab's Prometheus metrics, counted from the events flowlab's parts already report
//! (no part measures anything twice): a server's own counters, from its log's events
//! (`flowlab serve --metrics`). Exposed in Prometheus's text format (0.0.4), which every
//! Prometheus scrapes and its `promtool check metrics` reads; served by `flowlab-web`'s
//! one HTTP listener per process.

pub mod server;

/// The content type of [`server::ServerMetrics::encode`]'s text.
pub const CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;
