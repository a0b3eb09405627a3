//! `flowlab plot`: graphs drawn from `flowlab test --json` results.

use anyhow::Context;
use clap::Args as ClapArgs;
use flowlab_results::result::{SCHEMA, TestResult};

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Result files written by `flowlab test --json` (several are overlaid).
    #[arg(required_unless_present_any = ["capacity", "link_log"], value_name = "RESULT.json")]
    pub results: Vec<std::path::PathBuf>,
    /// Also draw the capacity of this trace (mahimahi's format, as a topology's `trace`
    /// takes it) over one period, in 100 ms steps; several are overlaid.
    #[arg(long, value_name = "TRACE")]
    pub capacity: Vec<std::path::PathBuf>,
    /// Also draw a trace-driven link's log (mahimahi's format, as `flowlab net up
    /// --link-logs` or mahimahi's mm-link writes it): capacity, ingress and throughput
    /// over time in 100 ms steps, and each packet's queueing delay; it says the means and
    /// the 95th percentile of the delay on stderr.
    #[arg(long, value_name = "LOG")]
    pub link_log: Option<std::path::PathBuf>,
    /// Output file; .svg or .png.
    #[arg(short, long, value_name = "FILE")]
    pub output: std::path::PathBuf,
    /// Which graph: throughput, window, rtt, tseq, io, latency, latency-cdf, or all
    /// (stacked).
    #[arg(short, long, default_value = "throughput", value_parser = clap::builder::PossibleValuesParser::new(flowlab_plot::Graph::NAMES))]
    pub graph: String,
}

pub fn run(a: &Args) -> anyhow::Result<()> {
    let graph = flowlab_plot::Graph::parse(&a.graph)
        .ok_or_else(|| anyhow::anyhow!("unknown graph '{}'", a.graph))?;
    let inputs = a
        .results
        .iter()
        .map(|path| {
            let name = path.file_stem().map_or_else(
                || path.display().to_string(),
                |s| s.to_string_lossy().into(),
            );
            let result = read_result(path).with_context(|| path.display().to_string())?;
            Ok(flowlab_plot::Input {
                name,
                from: path.display().to_string(),
                result,
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut panels = if inputs.is_empty() {
        Vec::new()
    } else {
        flowlab_plot::panels(graph, &inputs)?
    };
    if !a.capacity.is_empty() {
        let traces = a
            .capacity
            .iter()
            .map(|path| {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("--capacity {}", path.display()))?;
                let trace = flowlab_net::trace::DeliveryTrace::parse(&text)
                    .with_context(|| format!("--capacity {}", path.display()))?;
                let name = path.file_name().map_or_else(
                    || path.display().to_string(),
                    |s| s.to_string_lossy().into(),
                );
                Ok((name, trace.capacity(CAPACITY_BIN_MS)))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        panels.push(flowlab_plot::capacity_panel(
            &traces,
            f64::from(CAPACITY_BIN_MS) / 1000.0,
        ));
    }
    if let Some(path) = &a.link_log {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--link-log {}", path.display()))?;
        let log = flowlab_net::trace::LinkLog::parse(&text, u64::from(CAPACITY_BIN_MS))
            .with_context(|| format!("--link-log {}", path.display()))?;
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |s| s.to_string_lossy().into(),
        );
        eprintln!(
            "{name}: mean capacity {:.2} Mbit/s, mean throughput {:.2} Mbit/s ({:.1} % used), 95th percentile queueing delay {}, {} drops",
            log.mean_capacity_bps / 1e6,
            log.mean_throughput_bps / 1e6,
            100.0 * log.mean_throughput_bps / log.mean_capacity_bps.max(1.0),
            log.p95_delay_ms
                .map_or("none (nothing delivered)".into(), |d| format!("{d:.0} ms")),
            log.drops
        );
        panels.extend(flowlab_plot::link_log_panels(
            &flowlab_plot::LinkLogSeries {
                name: &name,
                bin_s: f64::from(CAPACITY_BIN_MS) / 1000.0,
                capacity: &log.capacity,
                ingress: &log.ingress,
                throughput: &log.throughput,
                delays: &log.delays,
            },
        ));
    }
    flowlab_plot::render_file(&panels, &a.output)?;
    eprintln!("wrote {}", a.output.display());
    Ok(())
}

/// How much of a trace each step of its capacity graph covers, ms.
const CAPACITY_BIN_MS: u32 = 100;

/// A finished test's result from a `flowlab test --json` file.
fn read_result(path: &std::path::Path) -> anyhow::Result<TestResult> {
    let text = std::fs::read_to_string(path)?;
    let value: serde_json::Value = serde_json::from_str(&text).context("not JSON")?;
    if value["schema"] != SCHEMA {
        anyhow::bail!(
            "not a flowlab test result (schema {}, expected {SCHEMA})",
            value["schema"]
        );
    }
    if let Some(e) = value["error"].as_str() {
        anyhow::bail!("the test failed ({e}): nothing to draw");
    }
    Ok(serde_json::from_value(value)?)
}
