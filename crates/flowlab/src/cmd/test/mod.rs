//! `flowlab test`: one throughput test against a flowlab or iperf3 server, printed as it
//! runs (table or JSON-stream lines) or as one JSON document at the end.

mod args;
mod spec;

pub use args::Args;

use anyhow::Context;
use flowlab_engine::client::{self, Observer};
use flowlab_report::units::UnitFormat;
use flowlab_report::{json, table};
use flowlab_results::diagnose::PathRates;
use flowlab_results::result::{Interval, StartInfo};

use super::{emit, emit_json};

pub fn run(a: &Args) -> anyhow::Result<()> {
    let mut spec = a.to_spec()?;
    if spec.trace.is_some() {
        spec.path_rates = topology_path_rates(&spec.host);
    }
    let interrupt = super::install_ctrl_c();
    let mut printer = Printer {
        format: a.format,
        json_stream: a.json_stream,
        quiet: a.json || a.iperf3_json,
    };
    let result = match client::run(&spec, &mut printer, &interrupt) {
        Ok(result) => result,
        Err(e) => {
            if a.json {
                println!("{}", json::test_error(&e.to_string())?);
            } else if a.iperf3_json {
                let doc = flowlab_report::iperf3_json::error_document(&e.to_string());
                println!("{}", serde_json::to_string_pretty(&doc)?);
            } else if a.json_stream {
                emit_json(&json::test_error_event(&e.to_string()));
            }
            return Err(e.into());
        }
    };
    if let (Some(path), Some(trace)) = (&a.trace_csv, &result.trace) {
        let write = || -> std::io::Result<()> {
            let file = std::fs::File::create(path)?;
            flowlab_report::csv::write(trace, std::io::BufWriter::new(file))
        };
        write().with_context(|| format!("--trace-csv {}", path.display()))?;
    }
    if a.json {
        println!("{}", json::test_document(&result)?);
    } else if a.iperf3_json {
        let doc = flowlab_report::iperf3_json::document(&result);
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else if a.json_stream {
        emit_json(&json::finish(&result)?);
    } else {
        emit(&table::finish(&result, a.udp, a.format));
    }
    if let Some(path) = &spec.file {
        file_moved_whole(path, &result)?;
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
    format: UnitFormat,
    json_stream: bool,
    quiet: bool,
}

impl Observer for Printer {
    fn started(&mut self, s: &StartInfo) {
        if self.json_stream {
            emit_json(&json::event_line("start", s));
        } else if !self.quiet {
            emit(&(table::start(s) + &table::interval_header(&s.spec)));
        }
    }

    fn interval(&mut self, iv: &Interval) {
        if self.json_stream {
            emit_json(&json::event_line("interval", iv));
        } else if !self.quiet {
            emit(&table::interval(iv, self.format));
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
