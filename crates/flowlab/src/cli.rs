//! The command line: the top-level parser and its subcommands. Each command's own
//! arguments live with the command (`cmd::*::Args`), and so does their validation into
//! library types (`to_spec`, `to_config`), which refuses an invalid combination with a
//! [`Usage`](crate::usage::Usage) error naming the flag; parsing itself makes no system
//! calls. The argument groups several commands share are in [`crate::args`].

use clap::{Parser, Subcommand};

use crate::args::OutputArgs;
use crate::cmd;

#[derive(Debug, Parser)]
#[command(
    name = "flowlab",
    // The commit too, so a report of a problem says exactly which build it was.
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("FLOWLAB_COMMIT"), ")"),
    about = "A laboratory for network transfers: throughput, loss, jitter, and why.",
    // As iperf3: -v is the version, -V verbose.
    disable_version_flag = true
)]
pub struct Cli {
    /// Print the version (as iperf3's -v).
    #[arg(short = 'v', long, action = clap::ArgAction::Version)]
    version: (),
    /// More diagnostics on stderr (-V, -VV; as iperf3's -V).
    #[arg(short = 'V', long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve throughput tests to flowlab and iperf3 clients, many at once.
    Serve(Box<cmd::serve::Args>),
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
    /// Watch a mesh of hosts: latency and throughput runs between them on a schedule, a
    /// line per run, each path's figures for Prometheus (`--metrics`).
    Monitor(cmd::monitor::Args),
    /// Print a shell completion script: `flowlab completions bash > …` (docs/cli.md).
    Completions(cmd::completions::Args),
    /// Print the manual page, or write one per command with `--dir` (docs/cli.md).
    Man(cmd::completions::ManArgs),
    /// iperf3's own command line (`-s`, `-c HOST`, iperf3's options and defaults; -J in
    /// iperf3's JSON shape): `alias iperf3='flowlab iperf3'` (docs/iperf3.md).
    Iperf3(cmd::iperf3::RawArgs),
}

impl Command {
    /// The output options (`--logfile`, `--timestamps`, `-I`, …) of a command that takes
    /// them.
    pub fn output(&self) -> Option<&OutputArgs> {
        match self {
            Command::Serve(a) => Some(&a.output),
            Command::Test(a) => Some(&a.output),
            Command::Ping(a) => Some(&a.output),
            Command::Rpm(a) => Some(&a.output),
            Command::Quick(a) => Some(&a.output),
            Command::Fetch(a) => Some(&a.output),
            Command::Run(a) => Some(&a.output),
            Command::Monitor(a) => Some(&a.output),
            _ => None,
        }
    }
}

/// A hint for a command line that starts as iperf3's does (`-s`, `-c HOST`): flowlab
/// takes its command first.
pub fn iperf3_habit(args: &[std::ffi::OsString]) -> Option<&'static str> {
    match args.get(1)?.to_str()? {
        "-s" | "--server" => Some("to serve tests as iperf3 -s does, type `flowlab serve`"),
        "-c" | "--client" => Some(
            "to test against a server as iperf3 -c HOST does, type `flowlab test HOST` \
             (or `flowlab test -c HOST`)",
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::{join_optional_values, one_line};
    use clap::CommandFactory;
    use std::ffi::OsString;

    /// Every argument of every command, built-in ones aside: `command path: --long/<NAME>`.
    fn unexplained(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
        for arg in cmd.get_arguments() {
            let builtin = matches!(arg.get_id().as_str(), "help" | "version");
            if !builtin && !arg.is_hide_set() && arg.get_help().is_none() {
                out.push(format!("{path}: {}", arg.get_id()));
            }
        }
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            unexplained(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }

    #[test]
    fn every_option_and_argument_has_a_help_line() {
        let mut missing = Vec::new();
        unexplained(&Cli::command(), "flowlab", &mut missing);
        assert!(missing.is_empty(), "no help line: {missing:#?}");
    }

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn both_spellings_of_an_optional_value_parse_alike() {
        let parse = |a: &[&str]| {
            let cli = Cli::try_parse_from(join_optional_values(os(a))).expect("parses");
            match cli.command {
                Command::Test(t) => (t.host, t.trace),
                _ => unreachable!(),
            }
        };
        let want = (Some("h".to_string()), Some("5ms".to_string()));
        assert_eq!(parse(&["flowlab", "test", "--trace", "5ms", "h"]), want);
        assert_eq!(parse(&["flowlab", "test", "--trace=5ms", "h"]), want);
        assert_eq!(
            parse(&["flowlab", "test", "h", "--trace"]),
            (Some("h".to_string()), Some("10ms".to_string()))
        );
    }

    #[test]
    fn a_refusal_keeps_clap_s_suggestion() {
        let e = Cli::try_parse_from(["flowlab", "test", "--trce", "h"]).unwrap_err();
        assert_eq!(
            one_line(&e),
            "error: unexpected argument '--trce' found; \
             tip: a similar argument exists: '--trace'"
        );
        let e = Cli::try_parse_from(["flowlab", "tset"]).unwrap_err();
        assert!(
            one_line(&e).contains("tip: some similar subcommands exist: 'net', 'test'"),
            "{}",
            one_line(&e)
        );
    }

    #[test]
    fn v_is_the_version_and_capital_v_verbose_as_in_iperf3() {
        let e = Cli::try_parse_from(["flowlab", "-v"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::DisplayVersion);
        let shown = e.to_string();
        assert!(
            shown.starts_with(concat!("flowlab ", env!("CARGO_PKG_VERSION"), " ("))
                && (shown.contains("commit ") || shown.contains("outside a git checkout")),
            "{shown}"
        );
        let cli = Cli::try_parse_from(["flowlab", "test", "-VV", "h"]).expect("parses");
        assert_eq!(cli.verbose, 2);
    }

    #[test]
    fn iperf3_s_first_words_get_the_flowlab_command() {
        assert!(iperf3_habit(&os(&["flowlab", "-s"])).is_some_and(|h| h.contains("flowlab serve")));
        assert!(
            iperf3_habit(&os(&["flowlab", "-c", "h"]))
                .is_some_and(|h| h.contains("flowlab test HOST"))
        );
        assert_eq!(iperf3_habit(&os(&["flowlab", "test", "-c", "h"])), None);
    }
}
