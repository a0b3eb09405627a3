//! A study's steps made into command lines and checked before anything runs: each
//! step's arguments, for every cell, read by the command's own parser ([`Commands`]:
//! `flowlab test`, `flowlab fetch`, `flowlab serve`), scaled by `--scale`, refused with
//! the step, the cell and the flag.

use std::time::Duration;

use flowlab_results::spec::Amount;
use flowlab_study::file::StepKind;
use flowlab_study::{Cell, Study};

use crate::place::Echoes;

/// How flowlab reads its own command lines. The binary implements it with its parsers,
/// so that a study's step is refused exactly as the command would refuse it, and the
/// runner knows no flag but the amounts it scales. Each refusal is one line.
pub trait Commands: std::fmt::Debug {
    /// `flowlab test ARGV` as the binary reads it.
    fn test(&self, argv: Vec<String>) -> Result<TestLine, String>;
    /// Checks `flowlab fetch ARGV`.
    fn fetch(&self, argv: &[String]) -> Result<(), String>;
    /// Checks `flowlab serve ARGV`, a study's server.
    fn serve(&self, argv: &[String]) -> Result<(), String>;
    /// An RTT step's echoes (`HOST -c COUNT -i INTERVAL --timeout TIMEOUT`).
    fn rtt(&self, argv: &[String]) -> Result<Echoes, String>;
    /// What setup command `ARGV` (flowlab's arguments) is.
    fn setup(&self, argv: &[String]) -> Result<Setup, String>;
}

/// A `flowlab test` line as the binary reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct TestLine {
    /// The arguments as the binary reads them (`--trace 5ms` as `--trace=5ms`).
    pub argv: Vec<String>,
    /// How much it moves, or for how long.
    pub amount: Amount,
    /// Seconds left out at its start (`-O`).
    pub omit: u64,
}

/// What a setup command is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setup {
    /// `fragments make`: `size` bytes in `count` fragments (`--scale` shrinks the size).
    Make { size: u64, count: u64 },
    /// Another `fragments` command.
    Fragments,
    /// Not a `fragments` command.
    Other,
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
    commands: &dyn Commands,
    study: &Study,
    step: usize,
    cell: &Cell,
    address: &dyn Fn(usize) -> flowlab_study::ServerAddress,
    scratch: &str,
    scale: f64,
) -> Result<StepLine, String> {
    let text = study.args(step, cell, address, scratch);
    let mut argv = split(&text)?;
    match study.steps[step].kind {
        StepKind::Test => {
            let line = commands.test(argv)?;
            let mut argv = line.argv;
            let mut amount = line.amount;
            if scale != 1.0 {
                amount = scaled(amount, scale);
                rewrite(&mut argv, amount);
                let again = commands.test(argv.clone()).ok();
                if again.is_none_or(|l| l.amount != amount) {
                    return Err(format!(
                        "--scale: cannot find the amount in '{text}': give it as -t N, -n SIZE or -k COUNT, on its own"
                    ));
                }
            }
            let expected = match amount {
                Amount::Seconds(s) => Some(Duration::from_secs_f64(s + line.omit as f64)),
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
            commands.fetch(&argv)?;
            argv.insert(0, "fetch".into());
            Ok(StepLine {
                argv,
                echoes: None,
                expected: None,
            })
        }
        StepKind::Rtt => {
            let a = commands.rtt(&argv)?;
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
                a.to.to_string(),
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
                    to: a.to,
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
pub fn setup_line(commands: &dyn Commands, text: &str, scale: f64) -> Result<Vec<String>, String> {
    let mut argv = split(text)?;
    let size = match commands.setup(&with_run_dir(&argv, "run"))? {
        Setup::Make { size, count } => Some((size, count)),
        Setup::Fragments => None,
        Setup::Other => {
            return Err(format!(
                "'{text}': a setup command is a `fragments` command (make, split), which makes what servers serve"
            ));
        }
    };
    if let (Some((size, count)), true) = (size, scale != 1.0) {
        let scaled = ((size as f64 * scale).round() as u64).max(count);
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
pub const LAB_TESTS_PER_SOURCE: &str = "1024";

/// A server's `flowlab serve` command line: `-J`, port 0 (the kernel picks one), the
/// address (loopback unless it runs on a node), then the study's options for it, and a
/// laboratory's limits rather than a public server's where the study sets none: no cap
/// on a test's length, a host's tests limited only by `--max-tests`.
pub fn serve_line(
    commands: &dyn Commands,
    args: &str,
    loopback: bool,
) -> Result<Vec<String>, String> {
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
    commands.serve(&with_run_dir(&argv, "run"))?;
    argv.insert(0, "serve".into());
    Ok(argv)
}
