//! The `flowlab` binary, a thin shell: parse the arguments (`cli`), run the command
//! (`cmd::*`, one module each, calling the libraries and handing their results to
//! `flowlab_report`'s formats), and map errors to exit codes.

mod cli;
mod cmd;
mod progress;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command, Usage};

/// Exit code of a usage error (as clap's).
const USAGE: u8 = 2;

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(cli::join_optional_values(args.clone())) {
        Ok(c) => c,
        // Bare `flowlab` or `flowlab net`: the commands there are, as git and cargo do.
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            return ExitCode::from(USAGE);
        }
        Err(e) if e.use_stderr() => {
            eprintln!("{}", cli::one_line(&e));
            if let Some(hint) = cli::iperf3_habit(&args) {
                eprintln!("hint: flowlab takes a command first: {hint}");
            }
            return ExitCode::from(USAGE);
        }
        Err(e) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
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
        Command::Report(a) => cmd::report::run(&a),
        Command::Completions(a) => cmd::completions::run(&a),
        Command::Man(a) => cmd::completions::man(&a),
    };
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
