//! How flowlab shows what it measured: the human tables, JSON documents, JSON-stream
//! lines and CSV. Every function here takes results and returns text (or writes to a
//! writer it is given); none reads a clock, a socket or a file, so every output can be
//! pinned by a snapshot from a fixed result (`tests/snapshots.rs`).
//!
//! - [`table`]: the human-readable tables of every command.
//! - [`json`]: JSON documents and JSON-stream lines.
//! - [`csv`]: `--trace-csv`, the trace samples as one flat table.
//! - [`test_output`]: a finished test whole, in the format `flowlab test` was asked for.

pub mod csv;
pub mod json;
pub mod table;

use flowlab_engine::result::TestResult;
use flowlab_engine::units::UnitFormat;

/// The formats `flowlab test` writes to standard output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestFormat {
    /// The human table, rates and sizes in the given units (`-f`).
    Table(UnitFormat),
    /// One JSON document at the end (`-J`).
    Json,
    /// One JSON object per line as the test runs (`--json-stream`).
    JsonStream,
}

/// Whether `r` is of a UDP test (its columns differ).
pub fn is_udp(r: &TestResult) -> bool {
    r.start.spec["protocol"] == "udp"
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
        TestFormat::JsonStream => {
            let mut out = json::event("start", &r.start) + "\n";
            for iv in &r.intervals {
                out += &(json::event("interval", iv) + "\n");
            }
            out += &json::finish(r);
            out
        }
    })
}
