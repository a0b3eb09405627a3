//! `flowlab rpm`: responsiveness under working conditions against a flowlab server.

use std::time::Duration;

use clap::Args as ClapArgs;
use flowlab_engine::rpm::{RpmObserver, RpmSpec, run as rpm};
use flowlab_report::{json, table};
use flowlab_results::rpm::{DirectionResult, Interval, Load, Params};
use flowlab_web::rpm::HttpRpmSpec;

use crate::usage::Usage;

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// The server: a flowlab server's name or address, or the URL of any server's
    /// responsiveness configuration (https://HOST/config: the method over HTTP/2).
    #[arg(value_name = "HOST|URL")]
    pub host: String,
    #[command(flatten)]
    pub family: crate::args::FamilyArgs,
    /// The server's port [default: 5201] (not with a URL: it names its port).
    #[arg(short, long)]
    pub port: Option<u16>,
    /// With a URL: accept any certificate (a server's self-signed one, on a path you
    /// trust).
    #[arg(short = 'k', long)]
    pub insecure: bool,
    /// Which loads, one after the other: download, upload, both (at once), or a list
    /// (download,upload).
    #[arg(short, long, default_value = "download,upload", value_name = "LOADS")]
    pub load: String,
    /// Congestion control of the load connections at both ends (the server's socket
    /// too); default: each end's own.
    #[arg(short = 'C', long, value_name = "ALGO")]
    pub congestion: Option<String>,
    /// The draft's interval duration, ID (seconds, or with a unit).
    #[arg(long, default_value = "1", value_name = "DURATION")]
    pub interval: String,
    /// Longest each load runs before its result is reported as it stands.
    #[arg(
        short = 't',
        long = "max-time",
        default_value = "20",
        value_name = "DURATION"
    )]
    pub max_time: String,
    /// Most load-generating connections per direction (the draft's MNP).
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub max_connections: usize,
    /// Only the summary, no line per interval.
    #[arg(short, long)]
    pub quiet: bool,
    /// One JSON document (schema flowlab.rpm/1) with every interval and probe.
    #[arg(short = 'J', long)]
    pub json: bool,
    #[command(flatten)]
    pub credentials: crate::args::CredentialArgs,
    #[command(flatten, next_help_heading = "Output")]
    pub output: crate::args::OutputArgs,
}

/// Seconds as a plain number (`0.5`), or a number with a unit (`500ms`), up to an hour.
fn seconds(flag: &str, text: &str) -> Result<Duration, Usage> {
    crate::usage::seconds(flag, text, false, 3600.0)
}

/// The server named by a URL: the method over HTTP/2.
fn is_url(host: &str) -> bool {
    host.starts_with("https://") || host.starts_with("http://")
}

impl Args {
    pub fn to_spec(&self) -> Result<RpmSpec, Usage> {
        if self.insecure {
            return Err(Usage(format!(
                "-k/--insecure: {} is a flowlab server, which speaks no TLS; -k is for a \
                 configuration's https:// URL",
                self.host
            )));
        }
        let mut s = RpmSpec::new(&self.host, self.port.unwrap_or(flowlab_proto::DEFAULT_PORT));
        s.family = self.family.family();
        s.credentials = self.credentials.credentials()?;
        (s.params, s.loads) = self.method()?;
        if let Some(cc) = &self.congestion {
            flowlab_proto::load::check_congestion(cc.as_bytes()).map_err(|_| {
                Usage(format!(
                    "-C/--congestion {cc}: not a congestion control name (this machine has: {})",
                    flowlab_engine::sock::available_congestion()
                ))
            })?;
        }
        s.congestion = self.congestion.clone();
        Ok(s)
    }

    /// With a URL: the method over HTTP/2, whose server is any (so nothing of flowlab's
    /// own protocol may be asked of it).
    pub fn to_http_spec(&self) -> Result<HttpRpmSpec, Usage> {
        let not_with = |flag: &str, why: &str| {
            Err(Usage(format!(
                "{flag}: not with a URL ({}): {why}",
                self.host
            )))
        };
        if self.port.is_some() {
            return not_with("-p/--port", "the URL names its port");
        }
        if self.congestion.is_some() {
            return not_with(
                "-C/--congestion",
                "an HTTP server's congestion control is its own (the result names this \
                 machine's, which the uploads use)",
            );
        }
        if self.credentials.username.is_some() {
            return not_with("--username", "the credentials are flowlab's protocol's");
        }
        if self.family.family().is_some() {
            return not_with("-4/-6", "the URL's host is resolved as it is");
        }
        let (params, loads) = self.method()?;
        Ok(HttpRpmSpec {
            config: self.host.clone(),
            insecure: self.insecure,
            params,
            loads,
            idle_probes: flowlab_results::rpm::IDLE_PROBES,
        })
    }

    /// The method's parameters and loads, as asked.
    fn method(&self) -> Result<(Params, Vec<Load>), Usage> {
        let mut params = Params::default();
        let loads = self
            .load
            .split(',')
            .map(|l| match l.trim() {
                "download" | "down" => Ok(Load::Download),
                "upload" | "up" => Ok(Load::Upload),
                "both" => Ok(Load::Both),
                other => Err(Usage(format!(
                    "-l/--load {other}: a load is download, upload or both"
                ))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let id = seconds("--interval", &self.interval)?;
        if !(Duration::from_millis(100)..=Duration::from_secs(10)).contains(&id) {
            return Err(Usage(format!(
                "--interval {}: the interval is 0.1 to 10 seconds",
                self.interval
            )));
        }
        params.interval_seconds = id.as_secs_f64();
        let max = seconds("-t/--max-time", &self.max_time)?;
        if max < id * params.mad as u32 {
            return Err(Usage(format!(
                "-t/--max-time {}: at least {} intervals ({} s) to judge anything",
                self.max_time,
                params.mad,
                (id * params.mad as u32).as_secs_f64()
            )));
        }
        params.max_seconds = max.as_secs_f64();
        if !(1..=32).contains(&self.max_connections) {
            return Err(Usage(format!(
                "--max-connections {}: 1 to 32 (the server takes 32 per address)",
                self.max_connections
            )));
        }
        params.max_connections = self.max_connections;
        Ok((params, loads))
    }
}

/// A line per interval as it ends.
struct Lines;

impl RpmObserver for Lines {
    fn interval(&self, load: &str, iv: &Interval) {
        super::emit(&table::rpm_interval(load, iv));
    }
    fn done(&self, _d: &DirectionResult) {}
}

pub fn run(a: &Args) -> anyhow::Result<()> {
    let stop = super::install_ctrl_c();
    let header = |target: &str, params: &Params, loads: &[Load]| {
        if !a.json {
            let loads: Vec<&str> = loads.iter().map(|l| l.name()).collect();
            super::emit(&table::rpm_header(target, params, &loads));
        }
    };
    let result = if is_url(&a.host) {
        let spec = a.to_http_spec()?;
        header(&spec.config, &spec.params, &spec.loads);
        let lines = |load: &str, iv: &Interval| {
            if !(a.json || a.quiet) {
                super::emit(&table::rpm_interval(load, iv));
            }
        };
        flowlab_web::rpm::run(&spec, &stop, &lines)?
    } else {
        let spec = a.to_spec()?;
        header(
            &format!("{} port {}", spec.host, spec.port),
            &spec.params,
            &spec.loads,
        );
        if a.json || a.quiet {
            rpm(&spec, &stop, &flowlab_engine::rpm::Quiet)?
        } else {
            rpm(&spec, &stop, &Lines)?
        }
    };
    if a.json {
        println!("{}", json::document(&result)?);
    } else {
        super::emit(&table::rpm_summary(&result));
    }
    // Printed whole above; the status says the responsiveness is not of a saturated
    // path (docs/cli.md, exit codes). A run cut short says so itself.
    let unsaturated: Vec<&str> = result
        .directions
        .iter()
        .filter(|d| !d.saturated)
        .map(|d| d.direction.as_str())
        .collect();
    if !unsaturated.is_empty() && !result.interrupted && result.error.is_none() {
        anyhow::bail!(
            "{} never saturated: goodput did not settle within -t {}, so its responsiveness \
             is not of a working (saturated) path; give it longer (-t) or shorter intervals \
             (--interval)",
            unsaturated.join(" and "),
            a.max_time
        );
    }
    Ok(())
}
