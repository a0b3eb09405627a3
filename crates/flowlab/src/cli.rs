//! The command line: the top-level parser and its subcommands. Each command's own
//! arguments live with the command (`cmd::*::Args`), and so does their validation into
//! library types (`to_spec`, `to_config`), which refuses an invalid combination with a
//! [`Usage`] error naming the flag; parsing itself makes no system calls.

use clap::{Parser, Subcommand};

use crate::cmd;

#[derive(Debug, Parser)]
#[command(
    name = "flowlab",
    version,
    about = "A laboratory for network transfers: throughput, loss, jitter, and why."
)]
pub struct Cli {
    /// More diagnostics on stderr (-v, -vv).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve throughput tests to flowlab and iperf3 clients, many at once.
    Serve(cmd::serve::Args),
    /// Run a throughput test against a flowlab or iperf3 server.
    Test(Box<cmd::test::Args>),
    /// Round trips to a flowlab server, probe by probe: percentiles, jitter, loss,
    /// one-way delay variation.
    Ping(cmd::ping::Args),
    /// Responsiveness under working conditions (IETF IPPM, RPM): round trips on separate
    /// and on load-generating connections while the load ramps up to saturation.
    Rpm(cmd::rpm::Args),
    /// Measure this machine's loopback with no setup: an in-process server and a short
    /// TCP and UDP test in each direction.
    Quick(cmd::quick::Args),
    /// Show this machine's network state: congestion control, TCP buffer limits,
    /// queueing disciplines, offloads (recorded in every result as well).
    Sysinfo(cmd::sysinfo::Args),
    /// Draw graphs from `flowlab test --json` results: throughput, windows, RTT,
    /// time/sequence, I/O; several results are overlaid.
    Plot(cmd::plot::Args),
    /// Make, split and join fragment sets (for `serve --fragments` and `fetch`).
    #[command(subcommand)]
    Fragments(cmd::fragments::Command),
    /// Fetch a fragment set from several servers at once, verified and resumable.
    Fetch(cmd::fetch::Args),
    /// Emulated networks from a topology file.
    #[command(subcommand)]
    Net(cmd::net::Command),
    /// Run a study: every trial a study file declares (parameters swept, repetitions),
    /// each recorded in a results database the moment it ends.
    Run(cmd::run::Args),
    /// Report a study from its results database: per cell and metric the mean, median,
    /// standard deviation and 95 % confidence interval, with charts (HTML), or two cells
    /// compared.
    Report(cmd::report::Args),
}

/// A clap refusal as one line that names the flag, not clap's whole usage block.
pub fn one_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let message: Vec<&str> = text
        .lines()
        .take_while(|l| !l.trim().is_empty() && !l.starts_with("Usage:"))
        .map(str::trim)
        .collect();
    message.join(" ")
}

/// Arguments that parse but do not go together, or a value out of range: the message
/// names the flag. Exits with status 2, as clap's own refusals do.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);

impl From<&str> for Usage {
    fn from(text: &str) -> Usage {
        Usage(text.to_string())
    }
}

/// A duration flag's value, seconds as a plain number (`0.2`) or a number with a unit
/// (`200ms`), from 0 (when `zero_ok`; else above it) to `max` seconds, either way it is
/// written. A refusal names the flag, the value and both forms.
pub fn seconds(
    flag: &str,
    text: &str,
    zero_ok: bool,
    max: f64,
) -> Result<std::time::Duration, Usage> {
    let parsed = match text.parse::<f64>() {
        Ok(s) if s.is_finite() => Ok(s),
        Ok(_) => Err("not a number of seconds".to_string()),
        Err(_) => flowlab_report::units::parse_duration(text)
            .map(|d| d.as_secs_f64())
            .map_err(|e| e.to_string()),
    };
    let range = if zero_ok {
        format!("must be 0 to {max} seconds")
    } else {
        format!("must be above 0 and at most {max} seconds")
    };
    parsed
        .and_then(|s| {
            if (s > 0.0 || (zero_ok && s == 0.0)) && s <= max {
                Ok(std::time::Duration::from_secs_f64(s))
            } else {
                Err(range)
            }
        })
        .map_err(|e| Usage(format!("{flag} {text}: {e} (seconds, e.g. 0.5, or 500ms)")))
}
