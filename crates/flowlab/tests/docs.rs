//! The docs' examples cannot drift from the binary: every `$ flowlab …` line in
//! README.md and docs/*.md still parses (its flags exist, its values are accepted), and
//! the loopback examples (`flowlab test 127.0.0.1 …`, `flowlab ping 127.0.0.1 …`), run
//! against a server here, print lines of the shapes the docs show.
//!
//! Shapes, not numbers: a measurement differs from run to run and machine to machine, so
//! numbers, unit prefixes, time units and congestion-control names are masked before
//! lines are compared. What the run decides — the diagnosis, which advice applies,
//! whether retransmissions were D-SACKed — is left out (tests/trace.rs and the table's
//! unit tests check those).

mod support;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use flowlab_engine::server::ServerConfig;

/// One `$ …` line of a fenced block and the output lines under it.
#[derive(Debug)]
struct Example {
    /// `FILE:LINE`, for failures.
    at: String,
    /// The command's words (after `$`, up to a pipe, a redirection, `&` or a comment).
    words: Vec<String>,
    /// Whether a pipe or a redirection followed: the output shown is not flowlab's own.
    piped: bool,
    output: Vec<String>,
}

fn docs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = vec![root.join("README.md")];
    let mut more: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    more.sort();
    files.extend(more);
    files
}

/// The words of a shell command line, cut at the first pipe, redirection, `&`, `;` or
/// comment (`(excerpt)` and the like after it dropped), and whether it was cut at a pipe
/// or a redirection.
fn words(line: &str) -> (Vec<String>, bool) {
    let line = line.split(" #").next().unwrap_or(line);
    let line = line.split(" (").next().unwrap_or(line);
    let mut out = Vec::new();
    for w in shlex::split(line).unwrap_or_default() {
        if w.starts_with(['|', '>', '&']) || w.starts_with("2>") {
            return (out, w != "&");
        }
        if w == ";" {
            break;
        }
        out.push(w);
    }
    (out, false)
}

fn examples() -> Vec<Example> {
    let mut out = Vec::new();
    for file in docs() {
        let text = std::fs::read_to_string(&file).expect("read");
        let name = file
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let mut in_block = false;
        let mut current: Option<Example> = None;
        let mut continued = false;
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                in_block = !in_block;
                out.extend(current.take());
                continue;
            }
            if !in_block {
                continue;
            }
            if continued {
                if let Some(e) = current.as_mut() {
                    let (more, piped) = words(line.trim_end_matches('\\'));
                    e.words.extend(more);
                    e.piped |= piped;
                }
                continued = line.ends_with('\\');
                continue;
            }
            if let Some(command) = line.strip_prefix("$ ") {
                out.extend(current.take());
                continued = command.ends_with('\\');
                let (words, piped) = words(command.trim_end_matches('\\'));
                current = Some(Example {
                    at: format!("{name}:{}", i + 1),
                    words,
                    piped,
                    output: Vec::new(),
                });
            } else if let Some(e) = current.as_mut() {
                e.output.push(line.to_string());
            }
        }
    }
    out
}

/// The flowlab arguments of an example (`cargo run --release -- quick` is `quick`), and
/// of the command `net exec` runs when that is flowlab too.
fn flowlab_lines(e: &Example) -> Vec<Vec<String>> {
    let w = &e.words;
    let args: Vec<String> = match w.first().map(String::as_str) {
        Some("flowlab") => w[1..].to_vec(),
        Some("cargo") => match w.iter().position(|x| x == "--") {
            Some(i) => w[i + 1..].to_vec(),
            None => return Vec::new(),
        },
        _ => return Vec::new(),
    };
    let mut lines = Vec::new();
    match args.iter().position(|x| x == "--") {
        Some(i) if args.get(i + 1).is_some_and(|x| x == "flowlab") => {
            lines.push(args[..i].to_vec());
            lines.push(args[i + 2..].to_vec());
        }
        _ => lines.push(args),
    }
    lines
}

fn flowlab() -> Command {
    Command::cargo_bin("flowlab").expect("the flowlab binary")
}

/// Every flowlab command line in the docs parses: its flags exist and its values are
/// accepted (run with `--help` after them, which prints help only once everything
/// before it parsed; a renamed flag or a refused value exits 2).
#[test]
fn every_command_in_the_docs_parses() {
    let examples = examples();
    let lines: Vec<(String, Vec<String>)> = examples
        .iter()
        .flat_map(|e| flowlab_lines(e).into_iter().map(|l| (e.at.clone(), l)))
        .collect();
    assert!(lines.len() > 60, "only {} commands found", lines.len());
    let mut refused = Vec::new();
    for (at, args) in &lines {
        let mut args = args.clone();
        // `net exec NODE -- CMD`: the part before `--` is checked.
        if let Some(i) = args.iter().position(|x| x == "--") {
            args.truncate(i);
        }
        let out = flowlab()
            .args(&args)
            .arg("--help")
            .timeout(std::time::Duration::from_secs(10))
            .output()
            .expect("runs");
        if !out.status.success() {
            refused.push(format!(
                "{at}: flowlab {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    assert!(refused.is_empty(), "{}", refused.join("\n"));
}

/// A line's shape: numbers, unit prefixes, time units and congestion-control names
/// masked, runs of spaces and of dashes made one; the parts of a summary row that a run
/// may or may not have left out (`retr 6 (5 not needed: D-SACK, reordered 9x)`, `slowed
/// 23x for the receiver`, `rcvbuf drops 6199`, `foreign 2`: the row's parts are two
/// spaces apart).
fn shape(line: &str) -> String {
    const OPTIONAL: [&str; 5] = ["retr ", "slowed ", "held ", "rcvbuf drops ", "foreign "];
    let line: Vec<&str> = line
        .split("  ")
        .filter(|part| !OPTIONAL.iter().any(|o| part.starts_with(o)))
        .collect();
    let line = line.join("  ");
    let mut s = String::new();
    let mut chars = line.trim().chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            while chars
                .peek()
                .is_some_and(|c| c.is_ascii_digit() || *c == '.')
            {
                chars.next();
            }
            s.push('#');
        } else {
            s.push(c);
        }
    }
    let mut words: Vec<String> = Vec::new();
    for w in s.split_whitespace() {
        let w = match w {
            "bbr" | "cubic" | "reno" | "bbr," | "cubic," | "reno," => "CC",
            "us" | "ms" | "µs" | "s" => "T",
            "#us" | "#ms" | "#s" => "#T",
            w if ["Bytes", "bits/sec", "Bytes/sec"]
                .iter()
                .any(|u| w.trim_start_matches(['K', 'M', 'G', 'T']) == *u) =>
            {
                "U"
            }
            w => w,
        };
        // "#.#.#.#:#" and "[::ffff:#.#.#.#]:#": an address.
        let w = if w.contains("#.#.#.#") { "ADDR" } else { w };
        if words.last().is_some_and(|l| l == "-" && w == "-") {
            continue;
        }
        words.push(w.to_string());
    }
    words.join(" ")
}

/// Lines whose content the run decides (which limit, which advice, D-SACK or not, whether
/// a loopback test retransmitted), or that are the docs' own elisions.
fn run_decides(line: &str) -> bool {
    let t = line.trim_start();
    t.is_empty()
        || t.starts_with("...")
        || t.starts_with('…')
        || t.starts_with("What limited")
        || t.starts_with("Loopback:")
        || t.starts_with("evidence:")
        || t.starts_with("- ")
}

/// The loopback examples, run here against a server (flowlab's in-process one, or a
/// stock iperf3 where the docs' output shows one): each line the docs show has the shape
/// of a line flowlab prints now. JSON examples are left to the schema tests
/// (tests/cli.rs, docs/json-schema.md), and output shown through a pipe is not
/// flowlab's own.
#[test]
fn loopback_examples_print_what_the_docs_show() {
    if !support::require_tool("iperf3") {
        return;
    }
    let port = support::start_server(ServerConfig::default());
    let mut drifted = Vec::new();
    let mut ran = 0;
    for e in examples() {
        let Some(args) = flowlab_lines(&e).into_iter().next() else {
            continue;
        };
        let runnable = matches!(
            (
                args.first().map(String::as_str),
                args.get(1).map(String::as_str)
            ),
            (Some("test" | "ping"), Some("127.0.0.1"))
        );
        let json = args
            .iter()
            .any(|a| a == "-J" || a == "--json" || a == "--json-stream");
        if !runnable || json || e.piped || e.output.iter().all(|l| run_decides(l)) {
            continue;
        }
        let iperf3 = e
            .output
            .iter()
            .any(|l| l.contains("(iperf3)") || l.contains("not flowlab"))
            .then(|| {
                let p = support::free_port();
                (support::Iperf3Server::start(p), p)
            });
        // The server here, and at most 2 seconds of each.
        let port = iperf3.as_ref().map_or(port, |s| s.1);
        let mut args: Vec<String> = args.clone();
        match args.iter().position(|x| x == "-p") {
            Some(i) => args[i + 1] = port.to_string(),
            None => args.extend(["-p".into(), port.to_string()]),
        }
        if let Some(i) = args.iter().position(|x| x == "-t") {
            let t: f64 = args[i + 1].parse().expect("-t N");
            args[i + 1] = t.min(2.0).to_string();
        }
        let out = flowlab()
            .args(&args)
            .timeout(std::time::Duration::from_secs(60))
            .output()
            .expect("runs");
        ran += 1;
        drop(iperf3);
        // Refusals are shown as the terminal shows them: stderr after stdout.
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let shapes: Vec<String> = printed.lines().map(shape).collect();
        for line in e.output.iter().filter(|l| !run_decides(l)) {
            if !shapes.contains(&shape(line)) {
                drifted.push(format!(
                    "{}: flowlab {}\n  docs:    {line}\n  shape:   {}\n  printed:\n{printed}",
                    e.at,
                    args.join(" "),
                    shape(line),
                ));
                break;
            }
        }
    }
    assert!(ran >= 10, "only {ran} loopback examples ran");
    assert!(drifted.is_empty(), "{}", drifted.join("\n\n"));
}
