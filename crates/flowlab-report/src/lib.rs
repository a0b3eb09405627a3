//! How flowlab shows what it measured ([`flowlab_results`]): every output format —
//! the human tables, JSON documents, JSON-stream lines, iperf3's JSON, CSV, markdown
//! and HTML. Nothing here reads a clock, a socket or a file, and every output can be
//! pinned by a snapshot from a fixed result (`tests/snapshots.rs`).
//!
//! - [`table`]: the human-readable tables of every command.
//! - [`advice`]: what a diagnosis advises, in sentences.
//! - [`json`]: JSON documents and JSON-stream lines.
//! - [`iperf3_json`]: a test's JSON document in iperf3's shape.
//! - [`iperf3_text`]: a test's human output as iperf3 prints it.
//! - [`csv`]: `--trace-csv`, the trace samples as one flat table.
//! - [`study_report`]: a study's report as markdown and CSV.
//! - [`html`]: a study's report as one self-contained page.
//! - [`units`]: sizes and rates as flowlab prints them.
//! - [`Format`]: the one trait every format of a finished result implements, and
//!   [`TestFormat`], those of `flowlab test`.

pub mod advice;
pub mod csv;
pub mod html;
pub mod iperf3_json;
pub mod iperf3_text;
pub mod json;
pub mod study_report;
pub mod table;
pub mod units;

use flowlab_results::result::TestResult;
use flowlab_results::study_report::{Comparison, StudyReport};

use crate::units::UnitFormat;

/// What every output format of a finished result does, as hyperfine's exporters do: it
/// writes the whole of `value`. Each format implements it for the results it can show —
/// a test's ([`TestFormat`]), a study's report and a comparison of two of its cells
/// ([`ReportFormat`], [`html::Page`]) — and the binary only asks for the text.
pub trait Format<T: ?Sized> {
    /// `value` whole, as this format writes it.
    fn write(&self, value: &T) -> Result<String, Error>;
}

/// Why a format could not write a result.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot write JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("cannot write CSV: {0}")]
    Csv(#[from] ::csv::Error),
    /// The format does not show this kind of result (a comparison as CSV).
    #[error("{0}")]
    Unsupported(&'static str),
}

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
    /// One JSON line per event as the test runs, in iperf3's shape (`--iperf3-json
    /// --json-stream`: iperf3's own `--json-stream`).
    Iperf3JsonStream,
    /// iperf3's own text, rates in the given units (`--iperf3-text`).
    Iperf3Text(UnitFormat),
}

/// Whether `r` is of a UDP test (its columns differ).
pub fn is_udp(r: &TestResult) -> bool {
    r.start.spec.protocol == flowlab_results::spec::Transport::Udp
}

/// Everything `flowlab test` prints for the finished test: what it prints piece by piece
/// as the test runs (start, intervals), then at the end, joined.
impl Format<TestResult> for TestFormat {
    fn write(&self, r: &TestResult) -> Result<String, Error> {
        Ok(match *self {
            TestFormat::Table(f) => {
                let udp = is_udp(r);
                let mut out = table::start(&r.start) + &table::interval_header(&r.start.spec);
                for iv in &r.intervals {
                    out += &table::interval(iv, f);
                }
                out += &table::finish(r, udp, f);
                out
            }
            TestFormat::Json => json::test_document(r)? + "\n",
            TestFormat::Iperf3Json => {
                serde_json::to_string_pretty(&iperf3_json::document(r))? + "\n"
            }
            TestFormat::Iperf3Text(f) => {
                let mut out = iperf3_text::start(&r.start);
                for iv in &r.intervals {
                    out += &iperf3_text::interval(iv, &r.start.spec, f);
                }
                out + &iperf3_text::finish(r, f)
            }
            TestFormat::Iperf3JsonStream => {
                let mut out = iperf3_json::start_event(&r.start);
                for iv in &r.intervals {
                    out += &iperf3_json::interval_event(iv, &r.start.spec);
                }
                out + &iperf3_json::end_events(r)
            }
            TestFormat::JsonStream => {
                let mut out = json::event_line("start", &r.start);
                for iv in &r.intervals {
                    out += &json::event_line("interval", iv);
                }
                out += &json::finish(r)?;
                out
            }
        })
    }
}

/// The formats of a study's report (`flowlab report`) but HTML, which needs its charts
/// and traces ([`html::Page`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportFormat {
    Markdown,
    Csv,
    Json,
}

impl Format<StudyReport> for ReportFormat {
    fn write(&self, r: &StudyReport) -> Result<String, Error> {
        Ok(match self {
            ReportFormat::Markdown => study_report::markdown(r),
            ReportFormat::Csv => study_report::csv(r)?,
            ReportFormat::Json => json::document(r)? + "\n",
        })
    }
}

/// Two cells compared: markdown or JSON; a comparison has no CSV.
impl Format<Comparison> for ReportFormat {
    fn write(&self, c: &Comparison) -> Result<String, Error> {
        Ok(match self {
            ReportFormat::Markdown => study_report::comparison_markdown(c),
            ReportFormat::Json => json::document(c)? + "\n",
            ReportFormat::Csv => return Err(Error::Unsupported("a comparison has no CSV")),
        })
    }
}
