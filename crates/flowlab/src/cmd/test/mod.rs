//! `flowlab test`: one throughput test against a flowlab or iperf3 server, printed as it
//! runs (table or JSON-stream lines) or as one JSON document at the end.

mod args;
mod spec;

pub use args::Args;

use anyhow::Context;
use flowlab_engine::client::{self, Observer};
use flowlab_report::{TestFormat, iperf3_text, json, table};
use flowlab_results::diagnose::PathRates;
use flowlab_results::result::{Interval, StartInfo};
use flowlab_results::spec::TestSpec;

use super::{emit, emit_json};

pub fn run(a: &Args) -> anyhow::Result<()> {
    let mut spec = a.to_spec()?;
    if spec.trace.is_some() {
        spec.path_rates = topology_path_rates(&spec.host);
    }
    let interrupt = super::install_ctrl_c();
    let output = a.output();
    let mut printer = Printer { output, spec: None };
    let outcome = if spec.protocol == flowlab_results::spec::Transport::Quic {
        flowlab_quic::measure::run(&spec, &mut printer, &interrupt).map_err(anyhow::Error::from)
    } else {
        client::run(&spec, &mut printer, &interrupt).map_err(anyhow::Error::from)
    };
    let result = match outcome {
        Ok(result) => result,
        Err(e) => {
            match output {
                TestFormat::Json => println!("{}", json::test_error(&e.to_string())?),
                TestFormat::Iperf3Json => {
                    let doc = flowlab_report::iperf3_json::error_document(&e.to_string());
                    println!("{}", serde_json::to_string_pretty(&doc)?);
                }
                TestFormat::JsonStream => emit_json(&json::test_error_event(&e.to_string())),
                TestFormat::Iperf3JsonStream => {
                    emit_json(&flowlab_report::iperf3_json::error_events(&e.to_string()));
                }
                TestFormat::Table(_) | TestFormat::Iperf3Text(_) => {}
            }
            return Err(e);
        }
    };
    if let (Some(path), Some(trace)) = (&a.trace_csv, &result.trace) {
        let write = || -> std::io::Result<()> {
            let file = std::fs::File::create(path)?;
            flowlab_report::csv::write(trace, std::io::BufWriter::new(file))
        };
        write().with_context(|| format!("--trace-csv {}", path.display()))?;
    }
    match output {
        TestFormat::Json => println!("{}", json::test_document(&result)?),
        TestFormat::Iperf3Json => {
            let doc = flowlab_report::iperf3_json::document(&result);
            println!("{}", serde_json::to_string_pretty(&doc)?);
        }
        TestFormat::JsonStream => emit_json(&json::finish(&result)?),
        TestFormat::Iperf3JsonStream => {
            emit_json(&flowlab_report::iperf3_json::end_events(&result));
        }
        TestFormat::Table(f) => emit(&table::finish(&result, a.udp, f)),
        TestFormat::Iperf3Text(f) => emit(&iperf3_text::finish(&result, f)),
    }
    if a.json_stream_full_output {
        // After the stream, the document of the same shape.
        match output {
            TestFormat::Iperf3JsonStream => {
                let doc = flowlab_report::iperf3_json::document(&result);
                println!("{}", serde_json::to_string_pretty(&doc)?);
            }
            _ => println!("{}", json::test_document(&result)?),
        }
    }
    if let Some(path) = &spec.file {
        file_moved_whole(path, &result)?;
    }
    if let Some(end) = result.end.as_ref().filter(|e| e.every_stream_failed()) {
        // Printed whole above; a script learns from the status that nothing ran to the
        // end (docs/cli.md, exit codes).
        let why: Vec<String> = end
            .failed_streams
            .iter()
            .map(|f| format!("stream {}: {}", f.id, f.error))
            .collect();
        anyhow::bail!("every stream failed ({})", why.join("; "));
    }
    let multicast = result.end.as_ref().and_then(|e| e.multicast.as_ref());
    if let Some(m) = multicast.filter(|m| m.receivers.iter().all(|r| r.totals.is_none())) {
        // Some receivers' figures are a result; none is a failed test.
        let why: Vec<String> = m
            .receivers
            .iter()
            .map(|r| format!("{}: {}", r.name, r.error.as_deref().unwrap_or("no results")))
            .collect();
        anyhow::bail!("no receiver reported what reached it ({})", why.join("; "));
    }
    Ok(())
}

/// `-F`: the whole file went (sending), or all that came is in it (receiving) — else the
/// file changed under the test, or a read or write failed (a full disk); the result is
/// printed all the same.
fn file_moved_whole(
    path: &std::path::Path,
    result: &flowlab_results::result::TestResult,
) -> anyhow::Result<()> {
    use flowlab_results::result::StreamDirection;
    let Some(end) = &result.end else {
        return Ok(());
    };
    let count = |d: StreamDirection, sender: bool| {
        end.sums.iter().find(|s| s.direction == d).and_then(|s| {
            if sender { &s.sender } else { &s.receiver }
                .as_ref()
                .map(|t| t.bytes)
        })
    };
    let on_disk = std::fs::metadata(path).map_or(0, |m| m.len());
    if let Some(sent) = count(StreamDirection::Up, true) {
        let whole = match result.start.spec.amount {
            flowlab_results::spec::Amount::Bytes(n) => n,
            _ => 0,
        };
        if sent < whole && !end.interrupted {
            anyhow::bail!("-F {}: sent {sent} of its {whole} bytes", path.display());
        }
    }
    if let Some(received) = count(StreamDirection::Down, false) {
        if on_disk < received {
            anyhow::bail!(
                "-F {}: {on_disk} of the {received} bytes received were written",
                path.display()
            );
        }
    }
    Ok(())
}

/// Prints as the test runs, in the format asked for.
struct Printer {
    output: TestFormat,
    /// The test's, once it started (iperf3's text heads its first interval by it).
    spec: Option<TestSpec>,
}

impl Observer for Printer {
    fn started(&mut self, s: &StartInfo) {
        match self.output {
            TestFormat::JsonStream => emit_json(&json::event_line("start", s)),
            TestFormat::Iperf3JsonStream => {
                emit_json(&flowlab_report::iperf3_json::start_event(s));
            }
            TestFormat::Table(_) => emit(&(table::start(s) + &table::interval_header(&s.spec))),
            TestFormat::Iperf3Text(_) => emit(&iperf3_text::start(s)),
            TestFormat::Json | TestFormat::Iperf3Json => {}
        }
        self.spec = Some(s.spec.clone());
    }

    fn interval(&mut self, iv: &Interval) {
        match (self.output, &self.spec) {
            (TestFormat::JsonStream, _) => emit_json(&json::event_line("interval", iv)),
            (TestFormat::Iperf3JsonStream, Some(spec)) => {
                emit_json(&flowlab_report::iperf3_json::interval_event(iv, spec));
            }
            (TestFormat::Table(f), _) => emit(&table::interval(iv, f)),
            (TestFormat::Iperf3Text(f), Some(spec)) => emit(&iperf3_text::interval(iv, spec, f)),
            _ => {}
        }
    }
}

/// The bottleneck each way to `host` when this process runs inside a flowlab topology
/// (what `--trace` sizes its advice for); nothing elsewhere.
fn topology_path_rates(host: &str) -> PathRates {
    use std::net::{IpAddr, ToSocketAddrs};
    let peer = (host, 0).to_socket_addrs().ok().and_then(|mut a| {
        a.find_map(|a| match a.ip() {
            IpAddr::V4(v4) => Some(v4),
            IpAddr::V6(_) => None,
        })
    });
    match (
        peer,
        flowlab_net::locate::here(&flowlab_net::build::state_dir()),
    ) {
        (Some(peer), Some((t, node))) => flowlab_net::locate::path_rates(&t, &node, peer),
        _ => Default::default(),
    }
}
