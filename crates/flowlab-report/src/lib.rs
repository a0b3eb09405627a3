//! What flowlab measures and how it is shown: the result types, their judgement (the
//! diagnosis), units, and every output format — the human tables, JSON documents,
//! JSON-stream lines and CSV. Nothing here reads a clock, a socket or a file: the
//! engine, the fragment fetcher and the emulator fill the results in, and every output
//! can be pinned by a snapshot from a fixed result (`tests/snapshots.rs`).
//!
//! What a measurement is:
//! - [`spec`]: what a test is asked to measure ([`spec::TestSpec`]).
//! - [`result`]: what a test produced ([`result::TestResult`]), the one result type every
//!   output of a test is made from.
//! - [`rtt`]: what a study's RTT step measured (ICMP echoes from one node).
//! - [`diagnose`]: what limited a traced transfer, with evidence and advice.
//! - [`fetch`]: what a fragment fetch or a ratio sweep produced.
//! - [`ping`]: what `flowlab ping` measured, probe by probe, and its summary.
//! - [`net`]: what an emulated topology implies (`net show`), what `net check` measured,
//!   how the topologies that are up were built (`net up`, `net status`).
//! - [`server`]: what a server did, for its log (`serve`).
//! - [`study`]: what `flowlab run` shows of a study: its plan, its trials, its outcome.
//! - [`units`]: sizes, rates and durations, parsed and printed.
//! - [`stats`]: repeated trials summarised (mean, median, sd, 95 % CI) and compared
//!   (Welch's t-test).
//! - [`study_report`]: a study's report (metrics per cell, failures, comparisons) and its
//!   markdown and CSV.
//! - [`metrics`]: the few numbers of a result a study compares (throughput, transfer
//!   time, loss, RTT, …).
//!
//! How it is shown:
//! - [`table`]: the human-readable tables of every command.
//! - [`json`]: JSON documents and JSON-stream lines.
//! - [`html`]: a study's report as one self-contained page.
//! - [`csv`]: `--trace-csv`, the trace samples as one flat table.
//! - [`test_output`]: a finished test whole, in the format `flowlab test` was asked for.

pub mod csv;
pub mod diagnose;
pub mod diagnosis;
pub mod fetch;
pub mod html;
pub mod iperf3_json;
pub mod json;
pub mod latency;
pub mod metrics;
pub mod net;
pub mod ping;
pub mod result;
pub mod rpm;
pub mod rtt;
pub mod server;
pub mod spec;
pub mod stats;
pub mod study;
pub mod study_report;
pub mod table;
pub mod units;

use crate::result::TestResult;
use crate::units::UnitFormat;

/// The formats `flowlab test` writes to standard output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestFormat {
    /// The human table, rates and sizes in the given units (`-f`).
    Table(UnitFormat),
    /// One JSON document at the end (`-J`).
    Json,
    /// One JSON object per line as the test runs (`--json-stream`).
    JsonStream,
    /// One JSON document at the end in iperf3's shape (`--iperf3-json`).
    Iperf3Json,
}

/// Whether `r` is of a UDP test (its columns differ).
pub fn is_udp(r: &TestResult) -> bool {
    r.start.spec.protocol == flowlab_proto::params::Protocol::Udp
}

/// Everything `flowlab test` prints for the finished test `r` in `format`: what it
/// prints piece by piece as the test runs (start, intervals), then at the end, joined.
pub fn test_output(r: &TestResult, format: TestFormat) -> serde_json::Result<String> {
    Ok(match format {
        TestFormat::Table(f) => {
            let udp = is_udp(r);
            let mut out = table::start(&r.start) + &table::interval_header(udp);
            for iv in &r.intervals {
                out += &table::interval(iv, f);
            }
            out += &table::finish(r, udp, f);
            out
        }
        TestFormat::Json => json::document(r)? + "\n",
        TestFormat::Iperf3Json => serde_json::to_string_pretty(&iperf3_json::document(r))? + "\n",
        TestFormat::JsonStream => {
            let mut out = json::event_line("start", &r.start);
            for iv in &r.intervals {
                out += &json::event_line("interval", iv);
            }
            out += &json::finish(r);
            out
        }
    })
}
