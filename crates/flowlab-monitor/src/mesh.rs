//! The mesh file (TOML): which hosts `flowlab monitor` tests between, which probes it
//! runs on each pair and how often. Sans-IO: text in, a checked [`Mesh`] or a
//! [`MeshError`] naming the line and column out.
//!
//! ```toml
//! name = "lab"                  # names the mesh's rows and metrics
//! topology = "lab.toml"         # the emulated topology it runs on (beside this file)
//! hosts = ["h1", "h4", "h9"]    # its members: nodes of the topology
//!
//! # or, instead of `topology`, real hosts over SSH: each member's address (and,
//! # optionally, the address the others reach it at and the flowlab to run there)
//! # ssh_options = ["-i", "/etc/flowlab/lab_key"]   # more of ssh's options, for all
//! # [ssh]
//! # h1 = "ssh://lab@h1.example"
//! # h4 = { url = "ssh://lab@h4.example:2222", address = "192.0.2.4", flowlab = "/opt/flowlab" }
//!
//! [[probe]]
//! kind = "latency"              # echoes: each pair of the mesh, every 5 minutes
//! every = "5m"                  # s, m or h; 10 s at least
//! jitter = "30s"                # optional: up to this much later each time (default:
//!                               # a tenth of `every`)
//! pairs = "mesh"                # every ordered pair of hosts, or a list: ["h1-h4"]
//! count = 20                    # latency: echoes a run, 10 ms apart
//!
//! [[probe]]
//! kind = "throughput"           # a TCP test; throughput runs one at a time, in turn
//! every = "30m"                 # each pair once in this time
//! pairs = ["h1-h9", "h9-h1"]
//! seconds = 5                   # throughput: the test's length
//! ```

use std::ops::Range;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

pub use flowlab_study::ssh::{self, SshHost};

/// A mesh file that was refused: where, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct MeshError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// A checked mesh.
#[derive(Debug, Clone, PartialEq)]
pub struct Mesh {
    pub name: String,
    /// The topology file whose nodes the hosts are, as written (relative to the mesh
    /// file).
    pub topology: Option<String>,
    pub hosts: Vec<String>,
    /// Or how each host is reached over SSH, in the order of `hosts` (empty on a
    /// topology).
    pub ssh: Vec<SshHost>,
    /// More of `ssh`'s options, for every host.
    pub ssh_options: Vec<String>,
    pub probes: Vec<Probe>,
}

/// One kind of test on a schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    pub kind: Kind,
    /// Each pair runs once in this time.
    pub every: Duration,
    /// Each run is up to this much later than its slot, drawn afresh each time.
    pub jitter: Duration,
    /// Ordered pairs of hosts (from, to).
    pub pairs: Vec<(String, String)>,
}

/// What a probe runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `count` echoes 10 ms apart (`flowlab ping`): RTT percentiles and loss. Latency
    /// runs on different paths may run at once.
    Latency { count: u32 },
    /// A TCP test of `seconds` (`flowlab test`): throughput, retransmits. Throughput
    /// runs one at a time in the whole mesh (two at once would share links and measure
    /// each other), its pairs in turn.
    Throughput { seconds: u32 },
}

/// Longest mesh name (it names rows in a results database and a label in metrics).
pub const MAX_NAME: usize = 64;
/// Most hosts in a mesh: a full mesh of them is 2 450 ordered pairs.
pub const MAX_HOSTS: usize = 50;
/// What a throughput run takes beyond its seconds (connecting, the results' exchange),
/// for the check that the throughput probes fit their time.
pub const RUN_OVERHEAD_S: u32 = 1;
/// The shortest `every`: a probe more often than this measures its own load.
pub const MIN_EVERY: Duration = Duration::from_secs(10);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMesh {
    name: Spanned<String>,
    topology: Option<Spanned<String>>,
    ssh: Option<ssh::RawTable>,
    ssh_options: Option<Spanned<Vec<String>>>,
    hosts: Spanned<Vec<Spanned<String>>>,
    #[serde(default, rename = "probe")]
    probes: Vec<Spanned<RawProbe>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProbe {
    kind: Spanned<String>,
    every: Spanned<String>,
    jitter: Option<Spanned<String>>,
    /// "mesh", or a list of "FROM-TO" (read by hand: spanned strings cannot sit in an
    /// untagged enum).
    pairs: Spanned<toml::Value>,
    count: Option<Spanned<i64>>,
    seconds: Option<Spanned<i64>>,
}

/// The line and column (from 1) of byte `at` of `text`.
fn line_column(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// A time between runs: a whole number of seconds, minutes or hours (`90s`, `5m`, `1h`).
fn interval(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (digits, unit) = match t.char_indices().last() {
        Some((i, c @ ('s' | 'm' | 'h'))) => (&t[..i], c),
        _ => return Err(format!("'{text}' is not a time like 90s, 5m or 1h")),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("'{text}' is not a time like 90s, 5m or 1h"))?;
    let secs = match unit {
        's' => Some(n),
        'm' => n.checked_mul(60),
        _ => n.checked_mul(3600),
    };
    secs.filter(|&s| s <= 7 * 24 * 3600)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("'{text}' is more than a week"))
}

/// Checks a mesh file.
pub fn parse(text: &str) -> Result<Mesh, MeshError> {
    let at = |span: Range<usize>, message: String| {
        let (line, column) = line_column(text, span.start);
        MeshError {
            line,
            column,
            message,
        }
    };
    let raw: RawMesh = toml::from_str(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        at(span, e.message().trim_end().to_string())
    })?;
    let name = raw.name.get_ref();
    let word = |s: &str, max: usize| {
        !s.is_empty()
            && s.len() <= max
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    if !word(name, MAX_NAME) {
        return Err(at(
            raw.name.span(),
            format!("name '{name}': use 1 to {MAX_NAME} letters, digits, '-' and '_'"),
        ));
    }
    let mut hosts: Vec<String> = Vec::new();
    for h in raw.hosts.get_ref() {
        let host = h.get_ref();
        if !word(host, 64) {
            return Err(at(
                h.span(),
                format!("host '{host}': use 1 to 64 letters, digits, '-' and '_'"),
            ));
        }
        if hosts.contains(host) {
            return Err(at(h.span(), format!("host '{host}' is listed twice")));
        }
        hosts.push(host.clone());
    }
    if !(2..=MAX_HOSTS).contains(&hosts.len()) {
        return Err(at(
            raw.hosts.span(),
            format!(
                "a mesh has 2 to {MAX_HOSTS} hosts; this one has {}",
                hosts.len()
            ),
        ));
    }
    if raw.probes.is_empty() {
        return Err(at(
            0..0,
            "no [[probe]]: a mesh runs at least one (kind = \"latency\" or \"throughput\")".into(),
        ));
    }
    let mut probes = Vec::new();
    for p in &raw.probes {
        let p = p.get_ref();
        let number = |v: &Option<Spanned<i64>>, key: &str, max: i64, default: u32| match v {
            None => Ok(default),
            Some(n) if (1..=max).contains(n.get_ref()) => Ok(*n.get_ref() as u32),
            Some(n) => Err(at(n.span(), format!("{key} {}: 1 to {max}", n.get_ref()))),
        };
        let kind = match p.kind.get_ref().as_str() {
            "latency" => {
                if let Some(s) = &p.seconds {
                    return Err(at(s.span(), "seconds: for a throughput probe".into()));
                }
                Kind::Latency {
                    count: number(&p.count, "count", 1000, 20)?,
                }
            }
            "throughput" => {
                if let Some(c) = &p.count {
                    return Err(at(c.span(), "count: for a latency probe".into()));
                }
                Kind::Throughput {
                    seconds: number(&p.seconds, "seconds", 600, 5)?,
                }
            }
            other => {
                return Err(at(
                    p.kind.span(),
                    format!("kind '{other}': \"latency\" or \"throughput\""),
                ));
            }
        };
        let every =
            interval(p.every.get_ref()).map_err(|e| at(p.every.span(), format!("every: {e}")))?;
        if every < MIN_EVERY {
            return Err(at(
                p.every.span(),
                format!(
                    "every: {} s; {} s at least",
                    every.as_secs(),
                    MIN_EVERY.as_secs()
                ),
            ));
        }
        let jitter = match &p.jitter {
            None => every / 10,
            Some(j) => {
                let d = interval(j.get_ref()).map_err(|e| at(j.span(), format!("jitter: {e}")))?;
                if d > every / 2 {
                    return Err(at(
                        j.span(),
                        format!(
                            "jitter: {} s; at most half of every ({} s)",
                            d.as_secs(),
                            (every / 2).as_secs()
                        ),
                    ));
                }
                d
            }
        };
        let pairs_at = p.pairs.span();
        let pairs = match p.pairs.get_ref() {
            toml::Value::String(n) if n == "mesh" => hosts
                .iter()
                .flat_map(|a| {
                    hosts
                        .iter()
                        .filter(move |b| *b != a)
                        .map(move |b| (a.clone(), b.clone()))
                })
                .collect(),
            toml::Value::Array(list) => {
                let mut pairs: Vec<(String, String)> = Vec::new();
                for item in list {
                    let Some(text) = item.as_str() else {
                        return Err(at(
                            pairs_at.clone(),
                            format!("pairs: {item} is not a \"FROM-TO\" string"),
                        ));
                    };
                    let bad = |why: String| at(pairs_at.clone(), format!("pair '{text}': {why}"));
                    let (a, b) = text
                        .split_once('-')
                        .ok_or_else(|| bad("write it FROM-TO, e.g. \"h1-h4\"".into()))?;
                    for h in [a, b] {
                        if !hosts.iter().any(|x| x == h) {
                            return Err(bad(format!(
                                "'{h}' is not a host of the mesh ({})",
                                hosts.join(", ")
                            )));
                        }
                    }
                    if a == b {
                        return Err(bad("a host to itself".into()));
                    }
                    let pair = (a.to_string(), b.to_string());
                    if pairs.contains(&pair) {
                        return Err(bad("listed twice".into()));
                    }
                    pairs.push(pair);
                }
                if pairs.is_empty() {
                    return Err(at(pairs_at, "pairs: none given".into()));
                }
                pairs
            }
            other => {
                return Err(at(
                    pairs_at,
                    format!(
                        "pairs {other}: \"mesh\" (every ordered pair) or a list like [\"h1-h4\"]"
                    ),
                ));
            }
        };
        probes.push(Probe {
            kind,
            every,
            jitter,
            pairs,
        });
    }
    // Throughput runs one at a time: all of them must fit in the time.
    let busy: f64 = probes
        .iter()
        .filter_map(|p| match p.kind {
            Kind::Throughput { seconds } => Some(
                p.pairs.len() as f64 * f64::from(seconds + RUN_OVERHEAD_S) / p.every.as_secs_f64(),
            ),
            Kind::Latency { .. } => None,
        })
        .sum();
    if busy > 1.0 {
        return Err(at(
            0..0,
            format!(
                "the throughput probes need {:.0} % of the time (each pair's test and about \
                 {RUN_OVERHEAD_S} s to set it up, one at a time): make `every` longer, the tests \
                 shorter, or the pairs fewer",
                busy * 100.0
            ),
        ));
    }
    let topology = match &raw.topology {
        Some(t) if t.get_ref().trim().is_empty() => {
            return Err(at(t.span(), "topology: name a topology file".into()));
        }
        t => t.as_ref().map(|t| t.get_ref().clone()),
    };
    let ssh = match (&raw.ssh, &raw.topology) {
        (Some(table), Some(t)) => {
            return Err(at(
                t.span().start.min(table.span().start)..t.span().end,
                "topology and [ssh]: the hosts are nodes of a topology or hosts over SSH, not both"
                    .into(),
            ));
        }
        (Some(table), None) => ssh::hosts(table, &hosts, "host", "a host of the mesh", &at)?,
        (None, _) => Vec::new(),
    };
    let ssh_options = ssh::options(raw.ssh_options.as_ref(), !ssh.is_empty(), &at)?;
    Ok(Mesh {
        name: name.clone(),
        topology,
        hosts,
        ssh,
        ssh_options,
        probes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAB: &str = r#"name = "lab"
hosts = ["h1", "h4", "h9"]

[[probe]]
kind = "latency"
every = "5m"
pairs = "mesh"

[[probe]]
kind = "throughput"
every = "1h"
jitter = "2m"
pairs = ["h1-h9", "h9-h1"]
seconds = 10
"#;

    #[test]
    fn a_mesh_reads_back_with_its_defaults() {
        let m = parse(LAB).expect("a good mesh");
        assert_eq!(m.name, "lab");
        assert_eq!(m.topology, None);
        let on = parse(&LAB.replace("hosts", "topology = \"lab.toml\"\nhosts")).expect("mesh");
        assert_eq!(on.topology.as_deref(), Some("lab.toml"));
        let empty = LAB.replace("hosts", "topology = \" \"\nhosts");
        assert_eq!(
            parse(&empty)
                .map_err(|e| e.to_string())
                .expect_err("refused"),
            "line 2, column 12: topology: name a topology file"
        );
        assert_eq!(m.hosts, ["h1", "h4", "h9"]);
        let [latency, throughput] = &m.probes[..] else {
            panic!("two probes: {m:?}");
        };
        assert_eq!(latency.kind, Kind::Latency { count: 20 });
        assert_eq!(latency.every, Duration::from_secs(300));
        assert_eq!(latency.jitter, Duration::from_secs(30));
        // Every ordered pair.
        assert_eq!(latency.pairs.len(), 6);
        assert!(latency.pairs.contains(&("h9".into(), "h4".into())));
        assert_eq!(throughput.kind, Kind::Throughput { seconds: 10 });
        assert_eq!(throughput.every, Duration::from_secs(3600));
        assert_eq!(throughput.jitter, Duration::from_secs(120));
        assert_eq!(
            throughput.pairs,
            [("h1".into(), "h9".into()), ("h9".into(), "h1".into())]
        );
    }

    /// Hosts over SSH instead of a topology: each one's address, in the order of
    /// `hosts`; every mistake in the table refused where it is.
    #[test]
    fn hosts_over_ssh_are_read_in_order_and_checked() {
        let ssh = LAB.replace(
            "hosts = [\"h1\", \"h4\", \"h9\"]",
            "hosts = [\"h1\", \"h4\", \"h9\"]\nssh_options = [\"-i\", \"key\"]\n[ssh]\nh9 = \"ssh://lab@h9.example\"\nh1 = { url = \"ssh://h1:2222\", address = \"192.0.2.1\", flowlab = \"/opt/flowlab\" }\nh4 = \"ssh://h4\"",
        );
        // The probes follow the table: TOML puts them under [ssh] otherwise.
        let ssh = ssh.replacen("[[probe]]", "\n[[probe]]", 1);
        let m = parse(&ssh).expect("a mesh over SSH");
        assert_eq!(m.topology, None);
        assert_eq!(m.ssh_options, ["-i", "key"]);
        assert_eq!(
            m.ssh,
            vec![
                SshHost {
                    url: "ssh://h1:2222".into(),
                    address: Some("192.0.2.1".into()),
                    flowlab: Some("/opt/flowlab".into()),
                },
                SshHost {
                    url: "ssh://h4".into(),
                    address: None,
                    flowlab: None,
                },
                SshHost {
                    url: "ssh://lab@h9.example".into(),
                    address: None,
                    flowlab: None,
                },
            ]
        );
        for (from, to, says) in [
            (
                "h4 = \"ssh://h4\"",
                "h4 = \"h4\"",
                "[ssh] h4: 'h4' is not an ssh:// address",
            ),
            (
                "h4 = \"ssh://h4\"",
                "h7 = \"ssh://h7\"",
                "[ssh] h7: not a host of the mesh (h1, h4, h9)",
            ),
            ("h4 = \"ssh://h4\"", "", "[ssh]: host 'h4' has no address"),
            (
                "h4 = \"ssh://h4\"",
                "h4 = { url = \"ssh://h4\", port = 22 }",
                "[ssh] h4: unknown key 'port'",
            ),
            (
                "[ssh]",
                "topology = \"lab.toml\"\n[ssh]",
                "topology and [ssh]: the hosts are nodes",
            ),
        ] {
            let text = ssh.replace(from, to);
            let e = parse(&text).expect_err(says).to_string();
            assert!(e.contains(says), "{e}\n{text}");
        }
        let e = parse(&LAB.replace("hosts =", "ssh_options = [\"-v\"]\nhosts ="))
            .expect_err("ssh_options on a topology")
            .to_string();
        assert!(e.contains("ssh_options: for hosts over SSH"), "{e}");
    }

    /// Each mistake is refused at its line, saying what is wrong and what would do.
    #[test]
    fn every_mistake_is_refused_at_its_line() {
        for (from, to, line, says) in [
            (
                "hosts = [\"h1\", \"h4\", \"h9\"]",
                "hosts = [\"h1\", \"h1\"]",
                2,
                "host 'h1' is listed twice",
            ),
            (
                "hosts = [\"h1\", \"h4\", \"h9\"]",
                "hosts = [\"h1\"]",
                2,
                "2 to 50 hosts; this one has 1",
            ),
            (
                "kind = \"latency\"",
                "kind = \"jitter\"",
                5,
                "kind 'jitter': \"latency\" or \"throughput\"",
            ),
            (
                "every = \"5m\"",
                "every = \"5\"",
                6,
                "every: '5' is not a time like 90s, 5m or 1h",
            ),
            (
                "every = \"5m\"",
                "every = \"5s\"",
                6,
                "every: 5 s; 10 s at least",
            ),
            (
                "jitter = \"2m\"",
                "jitter = \"31m\"",
                12,
                "jitter: 1860 s; at most half of every (1800 s)",
            ),
            (
                "pairs = \"mesh\"",
                "pairs = \"all\"",
                7,
                "pairs \"all\": \"mesh\"",
            ),
            (
                "[\"h1-h9\", \"h9-h1\"]",
                "[\"h1-h2\"]",
                13,
                "pair 'h1-h2': 'h2' is not a host of the mesh (h1, h4, h9)",
            ),
            (
                "[\"h1-h9\", \"h9-h1\"]",
                "[\"h1-h1\"]",
                13,
                "pair 'h1-h1': a host to itself",
            ),
            (
                "[\"h1-h9\", \"h9-h1\"]",
                "[\"h1-h9\", \"h1-h9\"]",
                13,
                "pair 'h1-h9': listed twice",
            ),
            (
                "[\"h1-h9\", \"h9-h1\"]",
                "[\"h1\"]",
                13,
                "pair 'h1': write it FROM-TO",
            ),
            ("seconds = 10", "seconds = 0", 14, "seconds 0: 1 to 600"),
            (
                "seconds = 10",
                "count = 10",
                14,
                "count: for a latency probe",
            ),
            (
                "name = \"lab\"",
                "name = \"a lab\"",
                1,
                "name 'a lab': use 1 to 64",
            ),
            ("seconds = 10", "second = 10", 14, "unknown field `second`"),
        ] {
            assert!(LAB.contains(from), "{from}");
            let text = LAB.replacen(from, to, 1);
            let e = parse(&text).expect_err(to);
            assert_eq!(e.line, line, "{to}: {e}");
            assert!(e.message.contains(says), "{to}: {e}");
        }
        let e = parse("name = \"lab\"\nhosts = [\"a\", \"b\"]\n").expect_err("no probe");
        assert!(e.message.starts_with("no [[probe]]"), "{e}");
        // Six pairs of 10-s throughput tests take 66 s: not every 60 s, one at a time.
        let e = parse(
            "name = \"m\"\nhosts = [\"a\", \"b\", \"c\"]\n[[probe]]\nkind = \"throughput\"\n\
             every = \"60s\"\npairs = \"mesh\"\nseconds = 10\n",
        )
        .expect_err("too busy");
        assert!(
            e.message
                .starts_with("the throughput probes need 110 % of the time"),
            "{e}"
        );
    }
}
