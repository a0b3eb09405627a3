//! `flowlab fetch`: a fragment set from several servers at once, or a whole ratio sweep.

use std::io::IsTerminal;
use std::time::Duration;

use clap::Args as ClapArgs;
use flowlab_fragments::fetch::{self, FetchSpec, Progress, Silent};
use flowlab_fragments::schedule;
use flowlab_report::{json, table};

use crate::progress::Bars;
use crate::usage::Usage;

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
    /// The servers' token (`serve --token-file`), read from FILE; without it, from the
    /// FLOWLAB_TOKEN environment variable when set.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<std::path::PathBuf>,
    /// Print one JSON document (schema flowlab.fetch/1), no progress bars.
    #[arg(short = 'J', long)]
    pub json: bool,
    #[command(flatten, next_help_heading = "Output")]
    pub output: crate::args::OutputArgs,
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
        s.token = match (&self.token_file, std::env::var_os("FLOWLAB_TOKEN")) {
            (Some(path), _) => super::read_token(path, false)?,
            (None, Some(t)) => {
                let t = t.into_encoded_bytes();
                flowlab_fragments::serve::check_token(&t)
                    .map_err(|e| Usage(format!("FLOWLAB_TOKEN: {e}")))?;
                t
            }
            (None, None) => Vec::new(),
        };
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

/// A sweep's mean transfer time per ratio, drawn into `path`: the fixed ratios joined
/// by a line, adaptive apart at the right (it is not a ratio), each mean with its 95 %
/// confidence interval as an error bar when the sweep repeated.
fn chart(
    result: &flowlab_results::fetch::SweepResult,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    use flowlab_plot::{Band, Panel, Series};
    let modes: Vec<String> = result.rows.iter().map(|r| r.mode.clone()).collect();
    let mut line = Vec::new();
    let mut apart = Vec::new();
    let mut bars = (Vec::new(), Vec::new());
    for (i, row) in result.rows.iter().enumerate() {
        let x = i as f64;
        let adaptive = row.mode == "adaptive";
        if adaptive {
            apart.push((x, row.mean_seconds));
        } else {
            line.push((x, row.mean_seconds));
        }
        if let Some((lo, hi)) = flowlab_results::stats::summary(&row.seconds).and_then(|s| s.ci) {
            if adaptive {
                bars.1.push((x, lo, hi));
            } else {
                bars.0.push((x, lo, hi));
            }
        }
    }
    let runs = if result.repeat == 1 {
        "1 run each".to_string()
    } else {
        format!("{} runs each, 95 % CI", result.repeat)
    };
    let panel = Panel {
        title: format!("Total transfer time per load-distribution ratio ({runs})"),
        x_label: "load-distribution ratio (server A : server B)".into(),
        y_label: "transfer time (s)".into(),
        series: vec![
            Series {
                colour: None,
                name: "mean transfer time, fixed ratio".into(),
                points: line,
            },
            Series {
                colour: None,
                name: "adaptive".into(),
                points: Vec::new(),
            },
        ],
        bands: Vec::new(),
        markers: Vec::new(),
        error_bars: vec![
            Band {
                colour: None,
                name: "95 % CI".into(),
                points: bars.0,
            },
            Band {
                colour: None,
                name: "95 % CI".into(),
                points: bars.1,
            },
        ],
        dots: vec![
            Series {
                colour: None,
                name: String::new(),
                points: Vec::new(),
            },
            Series {
                colour: None,
                name: "adaptive".into(),
                points: apart,
            },
        ],
        dashed: Vec::new(),
        x_ticks: modes,
        x_log: false,
    };
    flowlab_plot::render_file(&[panel], path)?;
    Ok(())
}
