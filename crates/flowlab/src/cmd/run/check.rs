//! A study's steps made into command lines and checked before anything runs: each
//! step's arguments, for every cell, parsed by the same parser as the command's own
//! (`flowlab test`, `flowlab fetch`), scaled by `--scale`, refused with the step, the
//! cell and the flag.

use std::time::Duration;

use clap::Parser;
use flowlab_report::spec::Amount;
use flowlab_study::file::StepKind;
use flowlab_study::{Cell, Study};

use crate::cli::one_line;
use crate::cmd;

#[derive(Debug, Parser)]
#[command(name = "flowlab test", no_binary_name = true)]
struct TestLine {
    #[command(flatten)]
    args: cmd::test::Args,
}

#[derive(Debug, Parser)]
#[command(name = "flowlab fetch", no_binary_name = true)]
struct FetchLine {
    #[command(flatten)]
    args: cmd::fetch::Args,
}

#[derive(Debug, Parser)]
#[command(name = "flowlab serve", no_binary_name = true)]
struct ServeLine {
    #[command(flatten)]
    args: cmd::serve::Args,
}

#[derive(Debug, Parser)]
#[command(name = "rtt", no_binary_name = true)]
struct RttLine {
    /// The host echoed (an IPv4 address: a server's `{NAME.host}`).
    host: std::net::Ipv4Addr,
    /// Echoes to send.
    #[arg(short = 'c', long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    count: u64,
    /// Between two echoes.
    #[arg(short = 'i', long, default_value = "100ms", value_parser = flowlab_report::units::parse_duration)]
    interval: Duration,
    /// How long a reply is waited for.
    #[arg(long, default_value = "1s", value_parser = flowlab_report::units::parse_duration)]
    timeout: Duration,
}

/// ICMP echoes, one at a time.
#[derive(Debug, Clone, PartialEq)]
pub struct Echoes {
    pub to: std::net::Ipv4Addr,
    pub count: u64,
    pub interval: Duration,
    pub timeout: Duration,
}

/// One step of one trial, ready to start.
#[derive(Debug, Clone)]
pub struct StepLine {
    /// The subcommand and its arguments (the runner adds `-J`); for an RTT step, its own
    /// arguments.
    pub argv: Vec<String>,
    /// An RTT step's echoes (run by the runner itself, not a child).
    pub echoes: Option<Echoes>,
    /// The time it takes when that is known before it runs (a timed test, the echoes).
    pub expected: Option<Duration>,
}

impl StepLine {
    /// How long it may run before it is judged hung and killed: twice its time and half
    /// a minute for a timed test; its own stall timeouts bound the rest.
    pub fn deadline(&self) -> Option<Duration> {
        self.expected.map(|d| d * 2 + Duration::from_secs(30))
    }
}

/// Splits `text` as a shell would (quotes, backslashes), or says why it cannot.
fn split(text: &str) -> Result<Vec<String>, String> {
    shlex::split(text).ok_or_else(|| format!("'{text}': an unbalanced quote"))
}

/// Step `step` of `cell` as a command line, servers at `address`, durations and sizes
/// multiplied by `scale`; or why it is refused.
pub fn step_line(
    study: &Study,
    step: usize,
    cell: &Cell,
    address: &dyn Fn(usize) -> (String, String),
    scratch: &str,
    scale: f64,
) -> Result<StepLine, String> {
    let text = study.args(step, cell, address, scratch);
    let mut argv = split(&text)?;
    match study.steps[step].kind {
        StepKind::Test => {
            // `--trace 5ms` read as the binary reads it (`--trace=5ms`).
            argv = crate::cli::join_optional_values(argv.into_iter().map(Into::into).collect())
                .into_iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            let parsed = TestLine::try_parse_from(&argv).map_err(|e| one_line(&e))?;
            let a = parsed.args;
            if a.json || a.json_stream || a.iperf3_json {
                return Err("the runner records each test's -J document itself: leave out -J, --json-stream and --iperf3-json".into());
            }
            let spec = a.to_spec().map_err(|e| e.to_string())?;
            let mut amount = spec.amount;
            if scale != 1.0 {
                amount = scaled(amount, scale);
                rewrite(&mut argv, amount);
                let again = TestLine::try_parse_from(&argv)
                    .ok()
                    .and_then(|l| l.args.to_spec().ok());
                if again.is_none_or(|s| s.amount != amount) {
                    return Err(format!(
                        "--scale: cannot find the amount in '{text}': give it as -t N, -n SIZE or -k COUNT, on its own"
                    ));
                }
            }
            let expected = match amount {
                Amount::Seconds(s) => Some(Duration::from_secs_f64(s + spec.omit as f64)),
                Amount::Bytes(_) | Amount::Blocks(_) => None,
            };
            argv.insert(0, "test".into());
            Ok(StepLine {
                argv,
                echoes: None,
                expected,
            })
        }
        StepKind::Fetch => {
            let parsed = FetchLine::try_parse_from(&argv).map_err(|e| one_line(&e))?;
            let a = parsed.args;
            if a.json || a.sweep_ratios.is_some() {
                return Err("a study's fetch is one fetch, recorded as its -J document: leave out -J and --sweep-ratios (sweep a ratio parameter instead)".into());
            }
            a.to_spec().map_err(|e| e.to_string())?;
            argv.insert(0, "fetch".into());
            Ok(StepLine {
                argv,
                echoes: None,
                expected: None,
            })
        }
        StepKind::Rtt => {
            let a = RttLine::try_parse_from(&argv).map_err(|e| one_line(&e))?;
            if a.interval.is_zero() || a.timeout.is_zero() {
                return Err("-i and --timeout must be above 0".into());
            }
            // --scale: fewer echoes, never below three.
            let count = if scale == 1.0 {
                a.count
            } else {
                ((a.count as f64 * scale).round() as u64).max(3)
            };
            let mut argv = vec![
                "rtt".to_string(),
                a.host.to_string(),
                "-c".into(),
                count.to_string(),
                "-i".into(),
                duration_text(a.interval),
            ];
            if a.timeout != Duration::from_secs(1) {
                argv.extend(["--timeout".into(), duration_text(a.timeout)]);
            }
            Ok(StepLine {
                argv,
                expected: Some(a.interval * count as u32),
                echoes: Some(Echoes {
                    to: a.host,
                    count,
                    interval: a.interval,
                    timeout: a.timeout,
                }),
            })
        }
    }
}

/// A duration as flowlab's options read it: whole milliseconds, else microseconds.
fn duration_text(d: Duration) -> String {
    if d.as_micros() % 1000 == 0 {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}us", d.as_micros())
    }
}

/// `amount` times `scale`, never below one byte or block, nor below a second (or the
/// study's own time, when that was shorter); seconds to the millisecond.
fn scaled(amount: Amount, scale: f64) -> Amount {
    let times = |n: u64| ((n as f64 * scale).round() as u64).max(1);
    match amount {
        Amount::Seconds(s) => {
            Amount::Seconds(((s * scale * 1000.0).round() / 1000.0).max(s.min(1.0)))
        }
        Amount::Bytes(b) => Amount::Bytes(times(b)),
        Amount::Blocks(k) => Amount::Blocks(times(k)),
    }
}

/// Puts `amount` in place of the amount `argv` gives (`-t 5`, `-t5`, `--time 5`,
/// `--time=5`, the same for `-n`/`--bytes` and `-k`/`--blockcount`); appends it when
/// none is given (the default ten seconds).
fn rewrite(argv: &mut Vec<String>, amount: Amount) {
    let (short, long, value) = match amount {
        Amount::Seconds(s) => ("-t", "--time", s.to_string()),
        Amount::Bytes(b) => ("-n", "--bytes", b.to_string()),
        Amount::Blocks(k) => ("-k", "--blockcount", k.to_string()),
    };
    let mut i = 0;
    while i < argv.len() {
        let a = argv[i].as_str();
        if a == "--" {
            break;
        }
        if a == short || a == long {
            if let Some(v) = argv.get_mut(i + 1) {
                *v = value;
            }
            return;
        }
        if let Some(rest) = a.strip_prefix(long) {
            if rest.starts_with('=') {
                argv[i] = format!("{long}={value}");
                return;
            }
        }
        if a.len() > 2 && a.starts_with(short) {
            argv[i] = format!("{short}{value}");
            return;
        }
        i += 1;
    }
    argv.push(short.into());
    argv.push(value);
}

/// A setup command (`fragments make …`, run once before the servers start) as the
/// arguments of this binary: only `fragments` commands, which make what servers serve;
/// `--scale` shrinks `fragments make --size` (never below a byte per fragment).
pub fn setup_line(text: &str, scale: f64) -> Result<Vec<String>, String> {
    use crate::cli::{Cli, Command};
    let mut argv = split(text)?;
    let checked = with_run_dir(&argv, "run");
    let cli =
        Cli::try_parse_from(std::iter::once("flowlab").chain(checked.iter().map(String::as_str)))
            .map_err(|e| one_line(&e))?;
    let Command::Fragments(ref f) = cli.command else {
        return Err(format!(
            "'{text}': a setup command is a `fragments` command (make, split), which makes what servers serve"
        ));
    };
    if let (cmd::fragments::Command::Make { size, count, .. }, true) = (f, scale != 1.0) {
        let scaled = ((*size as f64 * scale).round() as u64).max(*count);
        let at = argv.iter().position(|a| a == "--size").ok_or_else(|| {
            format!("--scale: cannot find --size in '{text}': give it as --size SIZE")
        })?;
        if let Some(v) = argv.get_mut(at + 1) {
            *v = scaled.to_string();
        }
    }
    Ok(argv)
}

/// `{run}` in setup commands and servers' options: a directory of the run's own (made
/// before the setup, removed at the end), e.g. for the fragment set they make and serve.
pub const RUN: &str = "{run}";

/// `argv` with `{run}` made `dir`.
pub fn with_run_dir(argv: &[String], dir: &str) -> Vec<String> {
    argv.iter().map(|a| a.replace(RUN, dir)).collect()
}

/// A study's server lets one host run this many tests at once (its `--max-tests` still
/// bounds them all).
const LAB_TESTS_PER_SOURCE: &str = "1024";

/// A server's `flowlab serve` command line: `-J`, port 0 (the kernel picks one), the
/// address (loopback unless it runs on a node), then the study's options for it, and a
/// laboratory's limits rather than a public server's where the study sets none: no cap
/// on a test's length, a host's tests limited only by `--max-tests`.
pub fn serve_line(args: &str, loopback: bool) -> Result<Vec<String>, String> {
    let mut argv: Vec<String> = ["-J", "-p", "0"].map(String::from).to_vec();
    if loopback {
        argv.extend(["-B".to_string(), "127.0.0.1".to_string()]);
    }
    let given = split(args)?;
    let sets = |flag: &str| given.iter().any(|a| a.split('=').next() == Some(flag));
    for (flag, lab) in [
        ("--max-duration", "0"),
        ("--max-tests-per-source", LAB_TESTS_PER_SOURCE),
    ] {
        if !sets(flag) {
            argv.extend([flag.to_string(), lab.to_string()]);
        }
    }
    argv.extend(given);
    let parsed = ServeLine::try_parse_from(with_run_dir(&argv, "run")).map_err(|e| one_line(&e))?;
    if parsed.args.one_off {
        return Err("--one-off: a study's server serves every trial".into());
    }
    parsed.args.to_config().map_err(|e| e.to_string())?;
    argv.insert(0, "serve".into());
    Ok(argv)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn study(args: &str) -> Study {
        flowlab_study::parse(&format!(
            "name = \"s\"\n[params]\nl = [\"1K\", \"9\"]\n[[step]]\nkind = \"test\"\nargs = \"{args}\"\n"
        ))
        .expect("valid")
    }

    fn line(args: &str, cell: usize, scale: f64) -> Result<StepLine, String> {
        let s = study(args);
        step_line(
            &s,
            0,
            &s.cells()[cell],
            &|_| ("h".into(), "1".into()),
            "s",
            scale,
        )
    }

    #[test]
    fn a_step_line_is_the_commands_own_arguments() {
        let l = line("127.0.0.1 -l {l} -t 4 -O 1", 0, 1.0).expect("valid");
        assert_eq!(
            l.argv,
            ["test", "127.0.0.1", "-l", "1K", "-t", "4", "-O", "1"]
        );
        assert_eq!(l.expected, Some(Duration::from_secs(5)));
        assert_eq!(l.deadline(), Some(Duration::from_secs(40)));
        let l = line("127.0.0.1 -n 10M", 0, 1.0).expect("valid");
        assert_eq!((l.expected, l.deadline()), (None, None));
    }

    #[test]
    fn scale_shrinks_every_form_of_the_amount() {
        let cases = [
            ("h -t 10", vec!["test", "h", "-t", "1"]),
            ("h -t10", vec!["test", "h", "-t1"]),
            ("h --time=20", vec!["test", "h", "--time=2"]),
            ("h --bytes 10M", vec!["test", "h", "--bytes", "1048576"]),
            ("h -k 3", vec!["test", "h", "-k", "1"]),
            // The default ten seconds, made explicit.
            ("h -u", vec!["test", "h", "-u", "-t", "1"]),
        ];
        for (args, want) in cases {
            assert_eq!(line(args, 0, 0.1).expect(args).argv, want, "{args}");
        }
        // A cluster hides the amount: refused, not run at full length.
        let e = line("h -ut10", 0, 0.1).expect_err("cluster");
        assert!(e.contains("--scale: cannot find the amount"), "{e}");
    }

    #[test]
    fn a_bad_step_names_the_flag() {
        let e = line("h -l {l} --bogus", 0, 1.0).expect_err("unknown flag");
        assert!(e.contains("unexpected argument '--bogus'"), "{e}");
        let e = line("h -l {l}", 1, 1.0);
        assert!(e.is_ok(), "{e:?}");
        let e = line("h -t 1 -n 1M", 0, 1.0).expect_err("two amounts");
        assert!(e.contains("cannot be used with"), "{e}");
        let e = line("h -J", 0, 1.0).expect_err("json");
        assert!(e.contains("leave out -J"), "{e}");
        let e = line("h -T 'x", 0, 1.0).expect_err("quote");
        assert!(e.contains("unbalanced quote"), "{e}");
    }

    #[test]
    fn a_setup_line_is_a_fragments_command_and_scales_its_size() {
        assert_eq!(
            setup_line("fragments make --size 1M --count 16 --out {run}/set", 0.5).expect("valid"),
            [
                "fragments",
                "make",
                "--size",
                "524288",
                "--count",
                "16",
                "--out",
                "{run}/set"
            ]
        );
        let e = setup_line("test 127.0.0.1", 1.0).expect_err("not fragments");
        assert!(
            e.contains("a setup command is a `fragments` command"),
            "{e}"
        );
        let e = setup_line("fragments make --out d", 1.0).expect_err("no size");
        assert!(e.contains("--size <SIZE>"), "{e}");
        assert_eq!(
            with_run_dir(&["--out".into(), "{run}/set".into()], "/tmp/r"),
            ["--out", "/tmp/r/set"]
        );
    }

    #[test]
    fn a_server_line_is_checked_too() {
        assert_eq!(
            serve_line("--max-tests 4", true).expect("valid"),
            [
                "serve",
                "-J",
                "-p",
                "0",
                "-B",
                "127.0.0.1",
                "--max-duration",
                "0",
                "--max-tests-per-source",
                LAB_TESTS_PER_SOURCE,
                "--max-tests",
                "4"
            ]
        );
        // A study's own limit stands.
        let line = serve_line("--max-duration=30", true).expect("valid");
        assert!(line.contains(&"--max-duration=30".to_string()), "{line:?}");
        assert_eq!(
            line.iter()
                .filter(|a| a.starts_with("--max-duration"))
                .count(),
            1
        );
        let e = serve_line("-p 5201", true).expect_err("port");
        assert!(
            e.contains("'--port <PORT>' cannot be used multiple times"),
            "{e}"
        );
        let e = serve_line("-1", true).expect_err("one-off");
        assert!(e.contains("--one-off"), "{e}");
    }
}
