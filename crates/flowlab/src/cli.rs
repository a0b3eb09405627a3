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
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Where output goes and how its lines begin, for every command (iperf3's options of
/// these names).
#[derive(Debug, clap::Args)]
pub struct OutputArgs {
    /// Append everything printed, output and errors, to FILE instead (as iperf3's
    /// --logfile).
    #[arg(long, value_name = "FILE", global = true)]
    pub logfile: Option<std::path::PathBuf>,
    /// Flush output at every line (iperf3's --forceflush; flowlab always does).
    #[arg(long, global = true)]
    pub forceflush: bool,
    /// Begin each line of text output with the local time, as strftime(3) FORMAT (default
    /// "%c "; as iperf3's --timestamps). JSON output is left as it is.
    #[arg(long, value_name = "FORMAT", num_args = 0..=1, require_equals = true, default_missing_value = "%c ", global = true)]
    pub timestamps: Option<String>,
    /// Write this process's id to FILE while it runs, removed when it ends (as iperf3's
    /// -I).
    #[arg(short = 'I', long, value_name = "FILE", global = true)]
    pub pidfile: Option<std::path::PathBuf>,
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
    /// Print a shell completion script: `flowlab completions bash > …` (docs/cli.md).
    Completions(cmd::completions::Args),
    /// Print the manual page, or write one per command with `--dir` (docs/cli.md).
    Man(cmd::completions::ManArgs),
    /// iperf3's own command line (`-s`, `-c HOST`, iperf3's options and defaults; -J in
    /// iperf3's JSON shape): `alias iperf3='flowlab iperf3'` (docs/iperf3.md).
    Iperf3(cmd::iperf3::RawArgs),
}

/// A clap refusal as one line that names the flag, not clap's whole usage block, with
/// clap's tips kept ("a similar argument exists: '--trace'").
pub fn one_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let mut lines = text.lines().map(str::trim);
    let mut message: Vec<&str> = lines
        .by_ref()
        .take_while(|l| !l.is_empty() && !l.starts_with("Usage:"))
        .collect();
    message.extend(
        lines
            .take_while(|l| !l.starts_with("Usage:"))
            .filter(|l| l.starts_with("tip:")),
    );
    message.join("; ")
}

/// Line `line` of `text` with a caret under `column` (both 1-based, the column in
/// characters), as compilers show the place at fault, to follow a one-line error:
///
/// ```text
///   |
/// 3 | [[link]]
///   | ^
/// ```
///
/// Empty when `text` has no such line.
pub fn snippet(text: &str, line: usize, column: usize) -> String {
    let Some(source) = text.lines().nth(line.saturating_sub(1)) else {
        return String::new();
    };
    let number = line.to_string();
    let gutter = " ".repeat(number.len());
    // Tabs stay tabs under the caret, so it lines up however the terminal shows them.
    let pad: String = source
        .chars()
        .take(column.saturating_sub(1))
        .map(|c| if c == '\t' { '\t' } else { ' ' })
        .collect();
    format!("\n{gutter} |\n{number} | {source}\n{gutter} | {pad}^")
}

/// Flags whose value is optional (`--trace` alone samples every 10 ms) but may be given
/// as the next word as well as after `=`: `--trace 5ms` = `--trace=5ms`.
const OPTIONAL_VALUE: [&str; 2] = ["--trace", "--latency"];

/// The command line with `--trace 5ms` joined into `--trace=5ms` where the next word is
/// a duration (a host name or address never parses as one), so clap, which cannot tell
/// an optional value from the next argument, reads both spellings. Nothing after `--`
/// is touched (the command of `net exec`).
pub fn join_optional_values(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut out = Vec::with_capacity(args.len());
    let mut args = args.into_iter().peekable();
    while let Some(arg) = args.next() {
        if arg == "--" {
            out.push(arg);
            out.extend(args);
            break;
        }
        let joins = OPTIONAL_VALUE.iter().any(|f| arg == *f)
            && args
                .peek()
                .and_then(|next| next.to_str())
                .is_some_and(|next| {
                    next.starts_with(|c: char| c.is_ascii_digit())
                        && flowlab_report::units::parse_duration(next).is_ok()
                });
        match args.next_if(|_| joins) {
            Some(value) => {
                let mut joined = arg;
                joined.push("=");
                joined.push(value);
                out.push(joined);
            }
            None => out.push(arg),
        }
    }
    out
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

/// `-4`/`-6` (iperf3's, ping's): only the server's addresses of one family.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct FamilyArgs {
    /// Only the server's IPv4 addresses (iperf3's -4).
    #[arg(short = '4', long = "version4", conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// Only the server's IPv6 addresses (iperf3's -6).
    #[arg(short = '6', long = "version6")]
    pub ipv6: bool,
}

impl FamilyArgs {
    pub fn family(self) -> Option<flowlab_report::spec::IpFamily> {
        use flowlab_report::spec::IpFamily;
        match (self.ipv4, self.ipv6) {
            (true, _) => Some(IpFamily::Ipv4),
            (_, true) => Some(IpFamily::Ipv6),
            _ => None,
        }
    }
}

/// iperf3's authentication (`--username`), for a server that authenticates its clients.
#[derive(Debug, Clone, clap::Args)]
pub struct CredentialArgs {
    /// Authenticate as this user (iperf3's --username); the password comes from the
    /// IPERF3_PASSWORD environment variable, or is asked for on the terminal.
    #[arg(long, value_name = "NAME", requires = "rsa_public_key_path")]
    pub username: Option<String>,
    /// The server's RSA public key (PEM), for --username.
    #[arg(long, value_name = "FILE", requires = "username")]
    pub rsa_public_key_path: Option<std::path::PathBuf>,
    /// Encrypt the credentials with PKCS#1 v1.5 padding (iperf3 3.16 and older servers)
    /// instead of RSA-OAEP.
    #[arg(long, requires = "username")]
    pub use_pkcs1_padding: bool,
}

impl CredentialArgs {
    /// The credentials, the password read (IPERF3_PASSWORD, or asked for) and the key
    /// checked; `None` without `--username`.
    pub fn credentials(&self) -> Result<Option<flowlab_report::spec::Credentials>, Usage> {
        let (Some(user), Some(key)) = (&self.username, &self.rsa_public_key_path) else {
            return Ok(None);
        };
        let password = password()?;
        let public_key_pem = std::fs::read_to_string(key)
            .map_err(|e| Usage(format!("--rsa-public-key-path {}: {e}", key.display())))?;
        flowlab_proto::auth::public_key_from_pem(&public_key_pem)
            .map_err(|e| Usage(format!("--rsa-public-key-path {}: {e}", key.display())))?;
        Ok(Some(flowlab_report::spec::Credentials {
            user: user.clone(),
            password,
            public_key_pem,
            pkcs1: self.use_pkcs1_padding,
        }))
    }
}

/// The password for `--username`: IPERF3_PASSWORD, as iperf3 reads it, or else asked for
/// on the terminal without echo.
fn password() -> Result<String, Usage> {
    if let Ok(p) = std::env::var("IPERF3_PASSWORD") {
        return Ok(p);
    }
    rpassword::prompt_password("Password: ").map_err(|e| {
        Usage(format!(
            "--username: cannot ask for the password ({e}); set it in the IPERF3_PASSWORD \
             environment variable"
        ))
    })
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

#[cfg(test)]
mod tests {
    use super::*;
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
    fn an_optional_value_may_follow_as_the_next_word() {
        let joined = |a: &[&str]| join_optional_values(os(a));
        assert_eq!(
            joined(&["flowlab", "test", "--trace", "5ms", "h"]),
            os(&["flowlab", "test", "--trace=5ms", "h"])
        );
        assert_eq!(
            joined(&["flowlab", "test", "h", "--latency", "1ms"]),
            os(&["flowlab", "test", "h", "--latency=1ms"])
        );
        // The next word is the host, a flag or nothing: the flag keeps its default.
        for line in [
            &["flowlab", "test", "--trace", "10.0.0.1"][..],
            &["flowlab", "test", "--trace", "-t", "1", "h"],
            &["flowlab", "test", "h", "--trace"],
            &["flowlab", "test", "--trace", "5g.example"],
        ] {
            assert_eq!(joined(line), os(line));
        }
        // Nothing after `--` is touched.
        let exec = ["flowlab", "net", "exec", "h1", "--", "x", "--trace", "5ms"];
        assert_eq!(joined(&exec), os(&exec));
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
    fn a_snippet_puts_the_caret_under_the_column() {
        let text = "name = \"x\"\n\thosts = [\"a\" \"b\"]\n";
        assert_eq!(
            snippet(text, 2, 15),
            "\n  |\n2 | \thosts = [\"a\" \"b\"]\n  | \t             ^"
        );
        assert_eq!(snippet(text, 10, 1), "");
    }

    #[test]
    fn v_is_the_version_and_capital_v_verbose_as_in_iperf3() {
        let e = Cli::try_parse_from(["flowlab", "-v"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::DisplayVersion);
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
