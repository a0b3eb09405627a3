//! The docs' examples cannot drift from the binary: every `$ flowlab …` line in
//! README.md and docs/*.md still parses (its flags exist, its values are accepted), and
//! the loopback examples (`flowlab test 127.0.0.1 …`, `flowlab ping 127.0.0.1 …`), run
//! against a server here, print lines of the shapes the docs show.
//!
//! The pages cannot rot either: every link between them leads to a file of the
//! repository and a heading that exist, every topology, study, picture and report the
//! repository ships is listed or linked where the docs list them, every error the docs
//! quote is one flowlab's sources print, and a refusal shown under its command is what
//! that command prints.
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
    // A refusal's example is run as it is (`refusals_in_the_docs_are_what_the_binary_prints`).
    let lines: Vec<(String, Vec<String>)> = examples
        .iter()
        .filter(|e| !e.output.iter().any(|l| l.starts_with("error: ")))
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
            // A unit, with the comma or parenthesis after it kept ("1.18 GBytes,").
            w if ["Bytes", "bits/sec", "Bytes/sec"].iter().any(|u| {
                w.trim_start_matches(['K', 'M', 'G', 'T'])
                    .trim_end_matches([',', ')'])
                    == *u
            }) =>
            {
                match w.chars().last() {
                    Some(',') => "U,",
                    Some(')') => "U)",
                    _ => "U",
                }
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

/// Whether an example is a loopback test or ping, which
/// `loopback_examples_print_what_the_docs_show` runs against a server here.
fn against_a_server_here(args: &[String]) -> bool {
    matches!(
        (
            args.first().map(String::as_str),
            args.get(1).map(String::as_str)
        ),
        (Some("test" | "ping"), Some("127.0.0.1"))
    )
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
        let runnable = against_a_server_here(&args);
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
        let quic = args.iter().any(|a| a == "--quic").then(quic_server);
        // The server here, and at most 2 seconds of each.
        let port = match (&quic, &iperf3) {
            (Some(q), _) => q.local_addr().expect("its address").port(),
            (None, Some(s)) => s.1,
            (None, None) => port,
        };
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
        drop(quic);
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

/// A QUIC perf server here, for the `--quic` examples.
fn quic_server() -> flowlab_quic::server::Server {
    let cert = flowlab_web::tls::Certificate::SelfSigned {
        names: vec!["localhost".into()],
    };
    let tls = cert
        .load()
        .and_then(|id| id.server_config(&[flowlab_proto::quic_perf::ALPN], &cert))
        .expect("a certificate");
    flowlab_quic::server::Server::start(
        "127.0.0.1:0".parse().expect("an address"),
        tls,
        flowlab_quic::server::Limits::default(),
    )
    .expect("a QUIC server")
}

/// The repository's root, as the links resolve against it.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository's root")
}

/// Every Markdown page a reader can be pointed to: the top-level ones and all of docs/.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("a docs directory").flatten() {
            let p = entry.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let root = root();
    let mut out: Vec<PathBuf> = ["README.md", "CONTRIBUTING.md", "CHANGELOG.md"]
        .iter()
        .map(|f| root.join(f))
        .collect();
    walk(&root.join("docs"), &mut out);
    out.sort();
    out
}

/// `FILE:LINE` of a byte offset in a page, for failures.
fn at(page: &Path, text: &str, offset: usize) -> String {
    let line = text[..offset].matches('\n').count() + 1;
    format!(
        "{}:{line}",
        page.strip_prefix(root()).unwrap_or(page).display()
    )
}

/// The anchors GitHub gives a page's headings: the heading's text in lower case, its
/// punctuation dropped, each space a hyphen, and `-1`, `-2`, … after a repeated one.
fn anchors(text: &str) -> std::collections::HashSet<String> {
    use pulldown_cmark::{Event, Parser, Tag, TagEnd};
    let mut seen = std::collections::HashMap::<String, usize>::new();
    let mut out = std::collections::HashSet::new();
    let mut heading: Option<String> = None;
    for event in Parser::new_ext(text, pulldown_cmark::Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                let h = heading.take().unwrap_or_default();
                let slug: String = h
                    .trim()
                    .to_lowercase()
                    .chars()
                    .filter_map(|c| match c {
                        ' ' => Some('-'),
                        c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                        _ => None,
                    })
                    .collect();
                let n = seen.entry(slug.clone()).or_default();
                out.insert(if *n == 0 {
                    slug.clone()
                } else {
                    format!("{slug}-{n}")
                });
                *n += 1;
            }
            _ => {}
        }
    }
    out
}

/// Every link and image of every page: (`FILE:LINE`, the page, its target as written).
fn links() -> Vec<(String, PathBuf, String)> {
    use pulldown_cmark::{Event, Parser, Tag};
    let mut out = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("read a page");
        let parser = Parser::new_ext(&text, pulldown_cmark::Options::ENABLE_TABLES);
        for (event, range) in parser.into_offset_iter() {
            if let Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) = event {
                out.push((
                    at(&page, &text, range.start),
                    page.clone(),
                    dest_url.to_string(),
                ));
            }
        }
    }
    out
}

/// Where a link inside the repository leads: the file, and the anchor if it names one.
/// `None` for a link to the web.
fn resolve(page: &Path, target: &str) -> Option<(PathBuf, Option<String>)> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a.to_string())),
        None => (target, None),
    };
    let file = if path.is_empty() {
        page.to_path_buf()
    } else {
        page.parent().expect("a page's directory").join(path)
    };
    Some((file, anchor))
}

/// Every link between the pages leads somewhere: to a file of the repository (none
/// leaves it: a reader of a clone or a package has nothing else), and where it names a
/// heading, to a heading of that page.
#[test]
fn every_link_in_the_docs_leads_to_a_file_and_heading_that_exist() {
    let root = root();
    let mut dead = Vec::new();
    let mut checked = 0;
    let mut headings = std::collections::HashMap::new();
    for (at, page, target) in links() {
        let Some((file, anchor)) = resolve(&page, &target) else {
            continue;
        };
        checked += 1;
        let Ok(file) = file.canonicalize() else {
            dead.push(format!("{at}: ({target}): no such file"));
            continue;
        };
        if !file.starts_with(&root) {
            dead.push(format!("{at}: ({target}): leads out of the repository"));
            continue;
        }
        let Some(anchor) = anchor.filter(|_| file.extension().is_some_and(|x| x == "md")) else {
            continue;
        };
        let known = headings.entry(file.clone()).or_insert_with(|| {
            anchors(&std::fs::read_to_string(&file).expect("read a linked page"))
        });
        if !known.contains(&anchor) {
            dead.push(format!("{at}: ({target}): no heading #{anchor} there"));
        }
    }
    assert!(checked > 100, "only {checked} links between pages found");
    assert!(dead.is_empty(), "{}", dead.join("\n"));
}

/// Every topology and study the repository ships is in its page's table, and every
/// picture and study report under docs/ is linked from some page.
#[test]
fn every_shipped_topology_study_and_picture_is_listed_where_the_docs_list_them() {
    let root = root();
    let files = |dir: &str| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(root.join(dir))
            .expect("a shipped directory")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let mut unlisted = Vec::new();
    for (dir, page) in [
        ("topologies", "docs/net.md"),
        ("studies", "docs/studies.md"),
    ] {
        let text = std::fs::read_to_string(root.join(page)).expect("read a page");
        for f in files(dir) {
            if !text.lines().any(|l| l.starts_with(&format!("| `{f}` |"))) {
                unlisted.push(format!("{dir}/{f}: no row `| `{f}` |` in {page}'s table"));
            }
        }
    }
    let linked: std::collections::HashSet<PathBuf> = links()
        .iter()
        .filter_map(|(_, page, target)| resolve(page, target))
        .filter_map(|(file, _)| file.canonicalize().ok())
        .collect();
    for dir in ["docs/img", "docs/studies"] {
        for f in files(dir) {
            let file = root.join(dir).join(&f);
            if !linked.contains(&file) {
                unlisted.push(format!("{dir}/{f}: no page links to it"));
            }
        }
    }
    assert!(unlisted.is_empty(), "{}", unlisted.join("\n"));
}

/// Every `error: …` the pages quote, in a code block's line or in inline code:
/// (`FILE:LINE`, the message after `error: `).
fn quoted_errors() -> Vec<(String, String)> {
    use pulldown_cmark::{Event, Parser, Tag, TagEnd};
    let mut out = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("read a page");
        let parser = Parser::new_ext(&text, pulldown_cmark::Options::ENABLE_TABLES);
        let mut in_block = false;
        for (event, range) in parser.into_offset_iter() {
            match event {
                Event::Start(Tag::CodeBlock(_)) => in_block = true,
                Event::End(TagEnd::CodeBlock) => in_block = false,
                Event::Code(t) => {
                    if let Some(m) = t.strip_prefix("error: ") {
                        out.push((at(&page, &text, range.start), m.to_string()));
                    }
                }
                Event::Text(t) if in_block => {
                    let mut offset = range.start;
                    for line in t.lines() {
                        if let Some(m) = line.trim_start().strip_prefix("error: ") {
                            out.push((at(&page, &text, offset), m.to_string()));
                        }
                        offset += line.len() + 1;
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// A message template of flowlab's sources, in pieces: literal text, and the holes a
/// format string fills (`{}`, `{name:?}`).
#[derive(Debug)]
enum Piece {
    Text(String),
    Hole,
}

/// Every string literal in flowlab's sources (`crates/*/src`) long enough to be a
/// message, read by a Rust lexer (so escapes and line continuations read as compiled),
/// cut into its literal text and format holes.
fn message_templates() -> Vec<Vec<Piece>> {
    fn literals(tokens: proc_macro2::TokenStream, out: &mut Vec<String>) {
        for t in tokens {
            match t {
                proc_macro2::TokenTree::Group(g) => literals(g.stream(), out),
                proc_macro2::TokenTree::Literal(l) => {
                    if let Ok(s) = syn::parse_str::<syn::LitStr>(&l.to_string()) {
                        out.push(s.value());
                    }
                }
                _ => {}
            }
        }
    }
    fn walk(dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir)
            .expect("a source directory")
            .flatten()
        {
            let p = entry.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let src = std::fs::read_to_string(&p).expect("read a source");
                let tokens: proc_macro2::TokenStream = src.parse().expect("a source lexes");
                literals(tokens, out);
            }
        }
    }
    let mut strings = Vec::new();
    for krate in std::fs::read_dir(root().join("crates"))
        .expect("crates/")
        .flatten()
    {
        let src = krate.path().join("src");
        if src.is_dir() {
            walk(&src, &mut strings);
        }
    }
    strings
        .iter()
        .map(|s| {
            let mut pieces = Vec::new();
            let mut text = String::new();
            let mut chars = s.chars().peekable();
            while let Some(c) = chars.next() {
                match (c, chars.peek()) {
                    ('{', Some('{')) | ('}', Some('}')) => {
                        chars.next();
                        text.push(c);
                    }
                    ('{', _) => {
                        for c in chars.by_ref() {
                            if c == '}' {
                                break;
                            }
                        }
                        pieces.push(Piece::Text(std::mem::take(&mut text)));
                        pieces.push(Piece::Hole);
                    }
                    _ => text.push(c),
                }
            }
            pieces.push(Piece::Text(text));
            pieces.retain(|p| !matches!(p, Piece::Text(t) if t.is_empty()));
            pieces
        })
        .filter(|pieces| {
            let literal: usize = pieces
                .iter()
                .map(|p| match p {
                    Piece::Text(t) => t.chars().count(),
                    Piece::Hole => 0,
                })
                .sum();
            literal >= 8
        })
        .collect()
}

/// A regular expression for what a template can print, or, `open_end`, any start of
/// it (the docs cut a message short with `…`): a hole is anything.
fn template_regex(pieces: &[Piece], open_end: bool) -> String {
    match (pieces.split_first(), open_end) {
        (None, _) => String::new(),
        (Some((Piece::Hole, _)), true) => ".*".into(),
        (Some((Piece::Hole, rest)), false) => format!(".*{}", template_regex(rest, false)),
        (Some((Piece::Text(t), rest)), false) => {
            format!("{}{}", regex::escape(t), template_regex(rest, false))
        }
        (Some((Piece::Text(t), rest)), true) => {
            // Any start of the text, or all of it and any start of the rest.
            let mut starts: Vec<String> = t
                .char_indices()
                .map(|(i, _)| regex::escape(&t[..i]))
                .collect();
            starts.push(format!(
                "{}{}",
                regex::escape(t),
                template_regex(rest, true)
            ));
            format!("(?:{})", starts.join("|"))
        }
    }
}

/// [`template_regex`], and with `open_start` any end of it (the docs cut a message's
/// start with `…`): from anywhere in one of its texts or holes on.
fn part_regex(pieces: &[Piece], open_start: bool, open_end: bool) -> String {
    if !open_start {
        return template_regex(pieces, open_end);
    }
    let ends: Vec<String> = pieces
        .iter()
        .enumerate()
        .map(|(k, piece)| {
            let rest = template_regex(&pieces[k + 1..], open_end);
            match piece {
                Piece::Hole => format!(".*{rest}"),
                Piece::Text(t) => {
                    let ends: Vec<String> = t
                        .char_indices()
                        .map(|(i, _)| regex::escape(&t[i..]))
                        .collect();
                    format!("(?:{}){rest}", ends.join("|"))
                }
            }
        })
        .collect();
    format!("(?:{})", ends.join("|"))
}

/// Every error message the docs quote is one flowlab prints: it matches a message of
/// flowlab's sources, its holes filled with anything (an address, a number, the
/// system's reason), or comes from the argument parser for a flag that exists. A
/// message whose wording changed, or that was never printed, fails here with the page
/// and line that quote it. (The examples with a `$ flowlab …` line above their
/// output are also run: see `loopback_examples_print_what_the_docs_show` and
/// `refusals_in_the_docs_are_what_the_binary_prints`.)
#[test]
fn every_error_the_docs_quote_is_one_flowlab_prints() {
    let quoted = quoted_errors();
    assert!(
        quoted.len() >= 30,
        "only {} quoted errors found",
        quoted.len()
    );
    let templates = message_templates();
    let words = |s: &str| -> Vec<String> {
        s.split(|c: char| !c.is_alphanumeric())
            .filter(|w| w.len() >= 3)
            .map(str::to_lowercase)
            .collect()
    };
    let mut unknown = Vec::new();
    for (at, message) in &quoted {
        // clap's own messages, for flags and values: the flag must exist (the examples'
        // commands are parsed in `every_command_in_the_docs_parses`).
        if message.starts_with("invalid value '")
            || message.starts_with("unexpected argument '")
            || message.starts_with("the argument '")
        {
            continue;
        }
        let parts: Vec<&str> = message.split('…').collect();
        let last = parts.len() - 1;
        let ok = parts.iter().enumerate().all(|(i, part)| {
            let part = if i < last {
                part.trim_start()
            } else {
                part.trim()
            };
            if part.chars().filter(|c| c.is_alphanumeric()).count() < 4 {
                return true;
            }
            let mine = words(part);
            templates
                .iter()
                .filter(|t| {
                    t.iter().any(|p| match p {
                        Piece::Text(x) => words(x).iter().any(|w| mine.contains(w)),
                        Piece::Hole => false,
                    })
                })
                .any(|t| {
                    // The message may be composed (`FILE: line N, column M: …`): the
                    // template is its end, or, before a `…`, what the quote stops in.
                    let re = format!("(?s)^.*{}$", part_regex(t, i > 0, i < last));
                    regex::RegexBuilder::new(&re)
                        .size_limit(1 << 26)
                        .build()
                        .is_ok_and(|re| re.is_match(part))
                })
        });
        if !ok {
            unknown.push(format!("{at}: error: {message}"));
        }
    }
    assert!(
        unknown.is_empty(),
        "the docs quote errors no source of flowlab prints:\n{}",
        unknown.join("\n")
    );
}

/// The refusals the docs show under a `$ flowlab …` line are what that command prints
/// on stderr now, line for line (`…` standing for what the docs leave out). Only
/// commands that stay on this machine run: a refusal at another address depends on the
/// network the test runs on, and one a server here gives is left to the loopback
/// examples' test, which starts that server.
#[test]
fn refusals_in_the_docs_are_what_the_binary_prints() {
    let mut drifted = Vec::new();
    let mut ran = 0;
    for e in examples() {
        let shown: Vec<&String> = e
            .output
            .iter()
            .filter(|l| {
                l.starts_with("error: ") || l.starts_with("Usage: ") || l.starts_with("For more")
            })
            .collect();
        let Some(args) = flowlab_lines(&e).into_iter().next() else {
            continue;
        };
        let elsewhere = args.iter().any(|a| {
            a.parse::<std::net::IpAddr>()
                .is_ok_and(|ip| !ip.is_loopback())
                || a.contains("example")
        });
        if shown.is_empty() || e.piped || elsewhere {
            continue;
        }
        let out = flowlab()
            .args(&args)
            .timeout(std::time::Duration::from_secs(20))
            .output()
            .expect("runs");
        // Refused by the server: the loopback examples' test runs it against one.
        if out.status.code() != Some(2) && against_a_server_here(&args) {
            continue;
        }
        ran += 1;
        let stderr = String::from_utf8_lossy(&out.stderr);
        for line in shown {
            let re = line
                .split('…')
                .map(regex::escape)
                .collect::<Vec<_>>()
                .join(".*");
            let re = regex::Regex::new(&format!("^{re}$")).expect("a pattern");
            if !stderr.lines().any(|l| re.is_match(l)) {
                drifted.push(format!(
                    "{}: flowlab {}\n  docs:    {line}\n  printed: {}",
                    e.at,
                    args.join(" "),
                    stderr.trim()
                ));
            }
        }
    }
    assert!(ran >= 15, "only {ran} refusals ran");
    assert!(drifted.is_empty(), "{}", drifted.join("\n\n"));
}
