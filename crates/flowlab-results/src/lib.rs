//! What flowlab measures, as data: the result types and their judgement (the
//! diagnosis, the statistics of repeated trials), and quantities as people write them.
//! Nothing here formats a number for a reader, reads a clock, a socket or a file: the
//! engine, the fragment fetcher and the emulator fill the results in, and the formats
//! (`flowlab-report`) show them.
//!
//! - [`spec`]: what a test is asked to measure ([`spec::TestSpec`]).
//! - [`result`]: what a test produced ([`result::TestResult`]), the one result type every
//!   output of a test is made from.
//! - [`rtt`]: what a study's RTT step measured (ICMP echoes from one node).
//! - [`diagnose`]: what limited a traced transfer, with its evidence ([`diagnosis`]).
//! - [`latency`]: the latency a test's probes saw, idle and under load.
//! - [`rpm`]: what `flowlab rpm` measured (round trips per minute under load).
//! - [`fetch`]: what a fragment fetch or a ratio sweep produced.
//! - [`ping`]: what `flowlab ping` measured, probe by probe, and its summary.
//! - [`net`]: what an emulated topology implies (`net show`), what `net check` measured,
//!   how the topologies that are up were built (`net up`, `net status`).
//! - [`server`]: what a server did, for its log (`serve`).
//! - [`monitor`]: what `flowlab monitor` reports: each run on a mesh's paths.
//! - [`study`]: what `flowlab run` reports of a study: its plan, its trials, its outcome.
//! - [`stats`]: repeated trials summarised (mean, median, sd, 95 % CI) and compared
//!   (Welch's t-test).
//! - [`metrics`]: the few numbers of a result a study compares (throughput, transfer
//!   time, loss, RTT, …).
//! - [`study_report`]: a study's report: metrics per cell, failures, comparisons.
//! - [`units`]: sizes, rates and durations read as people write them.
//! - [`web`]: what the speed-test page measured, as `flowlab test`'s types.
//! - [`status`]: what a server is doing, for its live view.

pub mod diagnose;
pub mod diagnosis;
pub mod fetch;
pub mod latency;
pub mod metrics;
pub mod monitor;
pub mod net;
pub mod ping;
pub mod result;
pub mod rpm;
pub mod rtt;
pub mod server;
pub mod spec;
pub mod stats;
pub mod status;
pub mod study;
pub mod study_report;
pub mod units;
pub mod web;
