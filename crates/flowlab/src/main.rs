//! The `flowlab` binary, a thin shell: parse the arguments (`cli`), run the command
//! (`cmd::*`, one module each, calling the libraries and handing their results to
//! `flowlab_report`'s formats), and map errors to exit codes.

mod args;
mod cli;
mod cmd;
mod progress;
mod usage;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use cli::{Cli, Command};
use usage::Usage;

/// Exit code of a usage error (as clap's).
const USAGE: u8 = 2;

fn main() -> ExitCode {
    if std::env::var_os(flowlab_runner::place::EXIT_WITH_STDIN).is_some() {
        cmd::exit_with_stdin();
    }
    let mut args: Vec<_> = std::env::args_os().collect();
    // Run under the name `iperf3` (a link so named): iperf3's command line.
    if args.first().is_some_and(|a| {
        std::path::Path::new(a)
            .file_name()
            .is_some_and(|n| n == "iperf3")
    }) {
        args.splice(0..1, ["flowlab".into(), "iperf3".into()]);
    }
    let mut cli = match parse(args.clone()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if let Command::Iperf3(_) = &cli.command {
        // iperf3's words as they came: flowlab's own parse took `-V` for its global
        // option. flowlab's words before `iperf3` stay.
        let at = args
            .iter()
            .skip(1)
            .position(|a| a == "iperf3")
            .map_or(1, |i| i + 1);
        let line = match cmd::iperf3::translate(&args[at + 1..]) {
            Ok(line) => [&line[..1], &args[1..at], &line[1..]].concat(),
            Err(cmd::iperf3::Refusal::Clap(e)) => return clap_refusal(&e, &[]),
            Err(cmd::iperf3::Refusal::Usage(u)) => {
                eprintln!("error: {u}");
                return ExitCode::from(USAGE);
            }
        };
        cli = match parse(line) {
            Ok(c) => c,
            Err(code) => return code,
        };
    }
    let output = cli.command.output();
    if let Some(path) = output.and_then(|o| o.logfile.as_ref()) {
        if let Err(e) = log_to(path) {
            eprintln!("error: --logfile {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    if let Some(format) = output.and_then(|o| o.timestamps.as_ref()) {
        if let Err(e) = cmd::timestamp_lines(format) {
            eprintln!("error: {e}");
            return ExitCode::from(USAGE);
        }
    }
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| level.into()),
        )
        .with_writer(std::io::stderr)
        // Colour only on a terminal, and never under NO_COLOR (no-color.org).
        .with_ansi(
            std::io::IsTerminal::is_terminal(&std::io::stderr())
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        )
        .init();
    // A server writes its own, once detached (-D) and ready to remove it on a signal.
    let pidfile = match (output.and_then(|o| o.pidfile.as_ref()), &cli.command) {
        (Some(path), command) if !matches!(command, Command::Serve(_)) => {
            match cmd::PidFile::write(path) {
                Ok(p) => Some(p),
                Err(e) => {
                    eprintln!("error: {}", chain(&e));
                    return ExitCode::FAILURE;
                }
            }
        }
        _ => None,
    };
    let outcome = match cli.command {
        Command::Serve(a) => cmd::serve::run(&a),
        Command::Test(a) => cmd::test::run(&a),
        Command::Ping(a) => cmd::ping::run(&a),
        Command::Rpm(a) => cmd::rpm::run(&a),
        Command::Quick(a) => cmd::quick::run(&a),
        Command::Sysinfo(a) => cmd::sysinfo::run(&a),
        Command::Plot(a) => cmd::plot::run(&a),
        Command::Fragments(c) => cmd::fragments::run(&c),
        Command::Fetch(a) => cmd::fetch::run(&a),
        Command::Net(c) => cmd::net::run(c),
        Command::Run(a) => cmd::run::run(&a),
        Command::Monitor(a) => cmd::monitor::run(&a),
        Command::Report(a) => cmd::report::run(&a),
        Command::Completions(a) => cmd::completions::run(&a, Cli::command()),
        Command::Man(a) => cmd::completions::man(&a, Cli::command()),
        // Translated above into `serve` or `test`.
        Command::Iperf3(_) => unreachable!("flowlab iperf3 runs as serve or test"),
    };
    drop(pidfile);
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`flowlab man | head`): quiet, with the status of a
        // process ended by SIGPIPE, as C tools end.
        Err(e) if broken_pipe(&e) => ExitCode::from(128 + 13),
        Err(e) => {
            eprintln!("error: {}", chain(&e));
            if e.downcast_ref::<Usage>().is_some() {
                ExitCode::from(USAGE)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// The command line parsed, or the exit status after clap's help, version or refusal.
fn parse(args: Vec<std::ffi::OsString>) -> Result<Cli, ExitCode> {
    match Cli::try_parse_from(usage::join_optional_values(args.clone())) {
        Ok(c) => Ok(c),
        Err(e) => Err(clap_refusal(&e, &args)),
    }
}

/// Prints clap's outcome as flowlab prints it: help and the version on stdout (success);
/// the command list for a bare command, and a refusal in one line (usage status), with a
/// hint when the words were iperf3's.
fn clap_refusal(e: &clap::Error, args: &[std::ffi::OsString]) -> ExitCode {
    // Bare `flowlab` or `flowlab net`: the commands there are, as git and cargo do.
    if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        let _ = e.print();
        return ExitCode::from(USAGE);
    }
    if !e.use_stderr() {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    eprintln!("{}", usage::one_line(e));
    if let Some(hint) = usage::missing_hint(e) {
        eprintln!("{hint}");
    }
    if let Some(hint) = cli::iperf3_habit(args) {
        eprintln!("hint: flowlab takes a command first: {hint}");
    }
    ExitCode::from(USAGE)
}

/// Output and errors from now on appended to `path` (`--logfile`).
fn log_to(path: &std::path::Path) -> std::io::Result<()> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    nix::unistd::dup2_stdout(&file)?;
    nix::unistd::dup2_stderr(&file)?;
    Ok(())
}

fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// The error and its causes, outermost first, joined by `: ` (as anyhow's `{:#}`), but a
/// cause whose message its outer error already quotes is not repeated: the libraries'
/// errors carry their cause in their own message, since that message also goes into JSON
/// results and to peers, where no chain is printed.
fn chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out += ": ";
            }
            out += &text;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::chain;
    use anyhow::Context;

    #[test]
    fn a_chain_names_every_cause_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("control connection: {0}")]
        struct Control(#[from] std::io::Error);
        let io = std::io::Error::new(std::io::ErrorKind::BrokenPipe, "broken pipe");
        let e = Err::<(), _>(Control::from(io))
            .context("connecting to 10.0.0.4:5201")
            .unwrap_err();
        assert_eq!(
            chain(&e),
            "connecting to 10.0.0.4:5201: control connection: broken pipe"
        );
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(chain(&plain), "outer: inner");
    }
}
