//! `flowlab fetch`: a fragment set from several servers at once, or a whole ratio sweep.

use std::io::IsTerminal;
use std::time::Duration;

use clap::Args as ClapArgs;
use flowlab_fragments::fetch::{self, FetchSpec, Progress, Silent};
use flowlab_fragments::schedule;
use flowlab_report::{json, table};

use crate::cli::Usage;
use crate::progress::Bars;

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// A server, `host[:port]` (port 5201 by default); give one per server.
    #[arg(long = "from", required = true, value_name = "HOST[:PORT]")]
    pub from: Vec<String>,
    /// Split the fragments between the servers in this ratio, e.g. 1:5 (one per --from).
    #[arg(long, conflicts_with = "adaptive")]
    pub ratio: Option<String>,
    /// Servers take work as they finish (the default without --ratio).
    #[arg(long)]
    pub adaptive: bool,
    /// Directory for the fragments (and the manifest).
    #[arg(long, value_name = "DIR")]
    pub out: std::path::PathBuf,
    /// Connections per server.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=16))]
    pub connections: u64,
    /// Requests kept outstanding per connection.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub depth: u64,
    /// Seconds without data after which a connection counts as failed (a server fails
    /// with its last connection).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub stall_timeout: u64,
    /// Run the whole study: fetch once per ratio (e.g. 1:5,1:4,1:3,1:2,1:1,2:1,3:1,4:1,5:1)
    /// and adaptively, into a scratch directory, and print a table of transfer times.
    #[arg(long, value_name = "RATIOS", conflicts_with_all = ["ratio", "adaptive"])]
    pub sweep_ratios: Option<String>,
    /// Runs per ratio in a sweep.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100), requires = "sweep_ratios")]
    pub repeat: u64,
    /// With --sweep-ratios: also draw transfer time against ratio into FILE (.svg/.png).
    #[arg(long, value_name = "FILE", requires = "sweep_ratios")]
    pub chart: Option<std::path::PathBuf>,
    /// Print one JSON document (schema flowlab.fetch/1), no progress bars.
    #[arg(short = 'J', long)]
    pub json: bool,
}

/// Ratios to sweep, each with one part per `--from`.
pub type Ratios = Vec<Vec<u32>>;

impl Args {
    /// One ratio given with `flag`, checked: one part per `--from`.
    fn ratio(&self, flag: &str, text: &str) -> Result<Vec<u32>, Usage> {
        let r = schedule::parse_ratio(text).map_err(|e| Usage(format!("{flag}: {e}")))?;
        if r.len() != self.from.len() {
            return Err(Usage(format!(
                "{flag}: {text} has {} parts but {} --from servers were given",
                r.len(),
                self.from.len()
            )));
        }
        Ok(r)
    }

    /// The fetch, and the ratios of `--sweep-ratios` when a sweep was asked for.
    pub fn to_spec(&self) -> Result<(FetchSpec, Option<Ratios>), Usage> {
        let mut s = FetchSpec::new(self.from.clone(), self.out.clone());
        if let Some(r) = &self.ratio {
            s.mode = schedule::Mode::Ratio(self.ratio("--ratio", r)?);
        }
        let sweep = match &self.sweep_ratios {
            Some(list) => Some(
                list.split(',')
                    .map(|r| self.ratio("--sweep-ratios", r))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            None => None,
        };
        s.connections = self.connections as usize;
        s.depth = self.depth as usize;
        s.stall_timeout = Duration::from_secs(self.stall_timeout);
        Ok((s, sweep))
    }
}

pub fn run(a: &Args) -> anyhow::Result<()> {
    let (spec, sweep) = a.to_spec()?;
    // Progress bars only for a person watching, never into a pipe or beside JSON.
    let bars;
    let progress: &dyn Progress = if a.json || !std::io::stderr().is_terminal() {
        &Silent
    } else {
        bars = Bars::new();
        &bars
    };
    match sweep {
        None => {
            let result = fetch::fetch(&spec, progress)?;
            if a.json {
                println!("{}", json::document(&result)?);
            } else {
                print!("{}", table::fetch(&result));
            }
        }
        Some(ratios) => {
            let result = fetch::sweep(&spec, &ratios, a.repeat as usize, progress)?;
            if let Some(path) = &a.chart {
                chart(&result, path)?;
            }
            if a.json {
                println!("{}", json::document(&result)?);
            } else {
                print!("{}", table::sweep(&result));
            }
        }
    }
    Ok(())
}

/// A sweep's mean transfer time per ratio, drawn into `path`.
fn chart(
    result: &flowlab_report::fetch::SweepResult,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    let modes: Vec<String> = result.rows.iter().map(|r| r.mode.clone()).collect();
    let means: Vec<f64> = result.rows.iter().map(|r| r.mean_seconds).collect();
    let panel = flowlab_plot::category_panel(
        &format!(
            "Total transfer time per load-distribution ratio ({} runs each)",
            result.repeat
        ),
        "load-distribution ratio (server A : server B)",
        "transfer time (s)",
        &modes,
        "mean transfer time",
        &means,
    );
    flowlab_plot::render_file(&[panel], path)?;
    Ok(())
}
