//! The study file (TOML): what a study sweeps, how often, and what each trial runs.
//! Sans-IO: text in, a checked [`Study`] or a [`StudyError`] naming the line and column
//! out.
//!
//! ```toml
//! name = "seed-003"
//! description = "stream against stop-and-wait, by message size"
//! repeat = 5                  # trials per cell
//! order = "random"            # or "sequential"; random by default, its seed recorded
//! seed = 7                    # optional: the shuffle's seed
//! pause = "500ms"             # between trials
//!
//! [params]
//! length = [1000, 10000, 32500, 65000]          # a value is its own label and text
//! [params.method]                               # or labels and the text each stands for
//! tcp-stream = ""
//! tcp-stop-and-wait = "--stop-and-wait"
//!
//! [[exclude]]                 # cells that make no sense: every key matches
//! method = "tcp-stop-and-wait"
//! length = 65000
//!
//! [params.distance]           # a value may be a table of parts: {distance.rate}
//! short = { rate = "169M" }
//!
//! [[link]]                    # with a topology: a link's properties per cell
//! name = "b"
//! rate = "{distance.rate}"
//!
//! [[step]]
//! kind = "test"               # a `flowlab test`; its arguments with {param} templating
//! args = "127.0.0.1 -n 10M -l {length} {method}"
//! ```

use std::ops::Range;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::ssh::SshHost;

/// A study file that was refused: where, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct StudyError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// Longest study name (it names the study's rows in a results database).
pub const MAX_NAME: usize = 64;

/// A checked study.
#[derive(Debug, Clone, PartialEq)]
pub struct Study {
    pub name: String,
    pub description: String,
    /// Trials per cell.
    pub repeat: u32,
    pub order: Order,
    /// The random order's seed, when the file fixes it.
    pub seed: Option<u64>,
    /// Trials run first and not recorded (a cold cache, slow start of a fresh path).
    pub warmup: u32,
    /// Between two trials.
    pub pause: Duration,
    /// A topology file to bring up for the study (relative to the study file).
    pub topology: Option<String>,
    /// Or the hosts the servers' `node`s and steps' `from`s name, each reached over SSH
    /// (`[ssh]`), in the order the file first names them.
    pub ssh: Vec<(String, SshHost)>,
    /// More of `ssh`'s options, for every host.
    pub ssh_options: Vec<String>,
    /// The topology's links as each cell changes them (`[[link]]`).
    pub links: Vec<LinkChange>,
    /// The topology's emulator holds the CPUs out of deep idle states while the topology
    /// is up (`flowlab net up --keep-cpus-awake`; needs `topology`).
    pub keep_cpus_awake: bool,
    /// The topology's schedules (its file's, and `[[link]]` `schedule`s) start again
    /// at each trial, so that every trial meets their changes at the same times from its
    /// start (`schedule_per_trial = true`; else they run from when the network came up).
    pub schedule_per_trial: bool,
    pub on_error: OnError,
    /// flowlab commands run once before the servers start (`fragments make …`).
    pub setup: Vec<String>,
    /// Servers the runner starts before the first trial and stops after the last.
    pub servers: Vec<Server>,
    /// What is swept, in the file's order.
    pub params: Vec<Param>,
    /// Cells left out: each a list of (parameter, value) that must all match.
    pub excludes: Vec<Vec<(usize, usize)>>,
    /// What one trial runs, in order.
    pub steps: Vec<Step>,
}

/// A `flowlab serve` the runner starts for the study: steps reach it as `{NAME.host}`,
/// `{NAME.port}`, or `{NAME}` (`host:port`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub name: String,
    /// The topology node (or `[ssh]` host) it runs on; this machine's loopback when
    /// `None`.
    pub node: Option<String>,
    /// More `flowlab serve` options (`--fragments DIR`, `--max-tests 4`, …).
    pub args: String,
}

/// A link of the study's topology that the cells change (`[[link]]`), or a shared
/// medium (`[[medium]]`): for each property set, its value as a template of parameters
/// (`rate = "{distance}"`). The runner brings the topology up with each cell's values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkChange {
    /// The link's name in the topology file, or the medium's.
    pub link: String,
    /// Property (one of [`LINK_PROPERTIES`], or of [`MEDIUM_PROPERTIES`] for a medium)
    /// and value, in the file's order.
    pub set: Vec<(String, Template)>,
}

/// What a `[[medium]]` may change: a shared medium's busy stations (docs/net.md).
pub const MEDIUM_PROPERTIES: [&str; 2] = ["busy_rate", "busy_stations"];

/// What a `[[link]]` may change: a topology link's properties (docs/net.md).
pub const LINK_PROPERTIES: [&str; 8] = [
    "rate",
    "delay",
    "jitter",
    "loss",
    "queue",
    "queue_bytes",
    "trace",
    "schedule",
];

/// A swept parameter and its values, in the file's order.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    pub name: String,
    pub values: Vec<ParamValue>,
}

/// One value of a parameter: how results name it, and the text `{param}` becomes —
/// or, for a value given as a table, the named texts `{param.part}` become (a link
/// profile: `wifi = { rate = "50M", delay = "5ms" }`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamValue {
    pub label: String,
    pub text: String,
    /// The value's named parts, in the file's order (empty for a plain value).
    pub parts: Vec<(String, String)>,
}

impl ParamValue {
    /// The text `{param}` (`part` `None`) or `{param.part}` becomes (checked when the
    /// file is read: every value has the parts its templates name).
    pub fn get(&self, part: Option<&str>) -> &str {
        match part {
            None => &self.text,
            Some(name) => self
                .parts
                .iter()
                .find(|(n, _)| n == name)
                .map_or("", |(_, t)| t.as_str()),
        }
    }
}

/// The order trials run in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Every trial of the study shuffled (repetitions included), so that drift over time
    /// does not masquerade as an effect of a parameter.
    Random,
    /// Cell by cell, the last parameter varying fastest, each cell's repetitions together.
    Sequential,
}

/// What a failed trial does to the study.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    /// It is recorded as failed and the study goes on.
    Continue,
    /// The study stops (every finished trial kept).
    Stop,
}

/// One measurement of a trial.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub name: String,
    pub kind: StepKind,
    /// The command's arguments, `{param}` standing for the cell's value.
    pub args: Template,
    /// The topology node the step's client runs on; this machine when `None`.
    pub from: Option<String>,
    /// Steps with the same group run at the same time (the group starts where its first
    /// step is).
    pub group: Option<String>,
}

/// The measurement a step makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// A `flowlab test` (every one of its options).
    Test,
    /// A `flowlab fetch` of a fragment set.
    Fetch,
    /// ICMP echoes from the step's node to a host: the RTT (idle, or under load beside
    /// other steps of its group).
    Rtt,
}

/// Text with `{param}` holes (`{{` and `}}` are braces).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(Vec<Piece>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    /// A parameter, or one part of a parameter whose values are tables.
    Param(usize, Option<String>),
    Server(usize, ServerPart),
    /// `{scratch}`: an empty directory of the trial's own.
    Scratch,
}

/// What a `{server…}` hole stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerPart {
    /// `{a}`: `host:port`.
    Address,
    /// `{a.host}`.
    Host,
    /// `{a.port}`.
    Port,
    /// `{a.quic_port}`: where a server given `--quic` serves QUIC.
    QuicPort,
}

/// What fills a template's holes.
pub trait Fill {
    /// The value of parameter `param` (or of its part `part`).
    fn param(&self, param: usize, part: Option<&str>) -> String;
    /// Part of server `server`'s address.
    fn server(&self, server: usize, part: ServerPart) -> String;
    /// The trial's scratch directory.
    fn scratch(&self) -> String;
}

impl Template {
    /// The text with each hole filled.
    pub fn render(&self, fill: &dyn Fill) -> String {
        self.0
            .iter()
            .map(|p| match p {
                Piece::Text(t) => t.clone(),
                Piece::Param(i, part) => fill.param(*i, part.as_deref()),
                Piece::Server(i, part) => fill.server(*i, *part),
                Piece::Scratch => fill.scratch(),
            })
            .collect()
    }

    /// The parameters it refers to.
    pub fn params(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().filter_map(|p| match p {
            Piece::Param(i, _) => Some(*i),
            _ => None,
        })
    }

    /// The servers it refers to.
    pub fn servers(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().filter_map(|p| match p {
            Piece::Server(i, _) => Some(*i),
            _ => None,
        })
    }

    /// Whether it names `{scratch}`.
    pub fn uses_scratch(&self) -> bool {
        self.0.iter().any(|p| matches!(p, Piece::Scratch))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStudy {
    name: Spanned<String>,
    #[serde(default)]
    description: String,
    repeat: Option<Spanned<i64>>,
    order: Option<Spanned<String>>,
    seed: Option<Spanned<i64>>,
    warmup: Option<Spanned<i64>>,
    pause: Option<Spanned<String>>,
    topology: Option<String>,
    ssh: Option<crate::ssh::RawTable>,
    ssh_options: Option<Spanned<Vec<String>>>,
    keep_cpus_awake: Option<Spanned<bool>>,
    schedule_per_trial: Option<Spanned<bool>>,
    on_error: Option<Spanned<String>>,
    params: Option<Spanned<toml::Table>>,
    #[serde(default)]
    setup: Vec<String>,
    #[serde(default, rename = "server")]
    servers: Vec<Spanned<RawServer>>,
    #[serde(default, rename = "exclude")]
    excludes: Vec<Spanned<toml::Table>>,
    #[serde(default, rename = "link")]
    links: Vec<Spanned<toml::Table>>,
    #[serde(default, rename = "medium")]
    media: Vec<Spanned<toml::Table>>,
    #[serde(default, rename = "step")]
    steps: Vec<Spanned<RawStep>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    name: Option<String>,
    kind: Spanned<String>,
    args: Spanned<String>,
    from: Option<String>,
    group: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    name: Spanned<String>,
    node: Option<String>,
    #[serde(default)]
    args: String,
}

/// Where byte `at` of `text` is: line and column, from 1.
fn line_column(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// Checks a study file.
pub fn parse(text: &str) -> Result<Study, StudyError> {
    let at = |span: Range<usize>, message: String| {
        let (line, column) = line_column(text, span.start);
        StudyError {
            line,
            column,
            message,
        }
    };
    let raw: RawStudy = toml::from_str(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        at(span, e.message().to_string())
    })?;
    let name = raw.name.get_ref();
    let name_ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !name_ok {
        return Err(at(
            raw.name.span(),
            format!("name '{name}': use 1 to {MAX_NAME} lower-case letters, digits, '-' and '_'"),
        ));
    }
    let count = |v: &Option<Spanned<i64>>, key: &str, min: i64, default: i64| match v {
        None => Ok(default),
        Some(n) if (min..=1_000_000).contains(n.get_ref()) => Ok(*n.get_ref()),
        Some(n) => Err(at(
            n.span(),
            format!("{key} {}: give {min} to 1000000", n.get_ref()),
        )),
    };
    let repeat = count(&raw.repeat, "repeat", 1, 1)? as u32;
    let warmup = count(&raw.warmup, "warmup", 0, 0)? as u32;
    let seed = match &raw.seed {
        None => None,
        Some(s) if *s.get_ref() >= 0 => Some(*s.get_ref() as u64),
        Some(s) => {
            return Err(at(
                s.span(),
                format!("seed {}: give 0 or more", s.get_ref()),
            ));
        }
    };
    let order = match raw.order.as_ref().map(|o| (o.get_ref().as_str(), o.span())) {
        None | Some(("random", _)) => Order::Random,
        Some(("sequential", _)) => Order::Sequential,
        Some((o, span)) => {
            return Err(at(
                span,
                format!("order '{o}': choose random or sequential"),
            ));
        }
    };
    let on_error = match raw
        .on_error
        .as_ref()
        .map(|o| (o.get_ref().as_str(), o.span()))
    {
        None | Some(("continue", _)) => OnError::Continue,
        Some(("stop", _)) => OnError::Stop,
        Some((o, span)) => {
            return Err(at(span, format!("on_error '{o}': choose continue or stop")));
        }
    };
    let pause = match &raw.pause {
        None => Duration::ZERO,
        Some(p) => flowlab_results::units::parse_duration(p.get_ref())
            .map_err(|e| at(p.span(), format!("pause: {e}")))?,
    };
    let params = match &raw.params {
        None => Vec::new(),
        Some(t) => params(t.get_ref()).map_err(|m| at(t.span(), m))?,
    };
    let has_nodes = raw.topology.is_some() || raw.ssh.is_some();
    let mut servers: Vec<Server> = Vec::new();
    for sv in &raw.servers {
        let r = sv.get_ref();
        let name = r.name.get_ref();
        if !param_name_ok(name) {
            return Err(at(
                r.name.span(),
                format!(
                    "server '{name}': use lower-case letters, digits and '_', starting with a letter or '_'"
                ),
            ));
        }
        if name == SCRATCH
            || params.iter().any(|p| &p.name == name)
            || servers.iter().any(|s| &s.name == name)
        {
            return Err(at(
                r.name.span(),
                format!("server '{name}': the name is already a parameter's or a server's"),
            ));
        }
        if r.node.is_some() && !has_nodes {
            return Err(at(
                sv.span(),
                format!(
                    "server '{name}' runs on a node, but the study has no topology or [ssh] hosts"
                ),
            ));
        }
        servers.push(Server {
            name: name.clone(),
            node: r.node.clone(),
            args: r.args.clone(),
        });
    }
    let excludes = raw
        .excludes
        .iter()
        .map(|e| exclusion(e.get_ref(), &params).map_err(|m| at(e.span(), m)))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(k) = &raw.keep_cpus_awake {
        if *k.get_ref() && raw.topology.is_none() {
            return Err(at(
                k.span(),
                "keep_cpus_awake holds the CPUs awake for a topology's emulator, but the study has no topology".into(),
            ));
        }
    }
    if let Some(k) = raw.schedule_per_trial.as_ref().filter(|k| *k.get_ref()) {
        if raw.topology.is_none() {
            return Err(at(
                k.span(),
                "schedule_per_trial starts a topology's schedules again at each trial, but the study has no topology".into(),
            ));
        }
    }
    let mut links: Vec<LinkChange> = Vec::new();
    for l in &raw.links {
        if raw.topology.is_none() {
            return Err(at(
                l.span(),
                "a [[link]] changes a link of the topology, but the study has no topology".into(),
            ));
        }
        let change = link_change(l.get_ref(), &params, "[[link]]", "link", &LINK_PROPERTIES)
            .map_err(|m| at(l.span(), m))?;
        if links.iter().any(|c| c.link == change.link) {
            return Err(at(
                l.span(),
                format!("[[link]] '{}' is given twice", change.link),
            ));
        }
        links.push(change);
    }
    // A medium's changes go with the links' (their properties are its own, so the
    // runner tells them apart by key).
    let mut media: Vec<String> = Vec::new();
    for m in &raw.media {
        if raw.topology.is_none() {
            return Err(at(
                m.span(),
                "a [[medium]] changes a shared medium of the topology, but the study has no topology".into(),
            ));
        }
        let change = link_change(
            m.get_ref(),
            &params,
            "[[medium]]",
            "medium",
            &MEDIUM_PROPERTIES,
        )
        .map_err(|e| at(m.span(), e))?;
        if media.contains(&change.link) {
            return Err(at(
                m.span(),
                format!("[[medium]] '{}' is given twice", change.link),
            ));
        }
        media.push(change.link.clone());
        links.push(change);
    }
    if raw.steps.is_empty() {
        return Err(at(0..0, "a study needs at least one [[step]]".into()));
    }
    let mut steps = Vec::new();
    for (i, s) in raw.steps.iter().enumerate() {
        let r = s.get_ref();
        let kind = match r.kind.get_ref().as_str() {
            "test" => StepKind::Test,
            "fetch" => StepKind::Fetch,
            "rtt" => StepKind::Rtt,
            k => {
                return Err(at(
                    r.kind.span(),
                    format!("step kind '{k}': choose test, fetch or rtt"),
                ));
            }
        };
        let args = template("args", r.args.get_ref(), &params, &servers)
            .map_err(|m| at(r.args.span(), m))?;
        if r.from.is_some() && !has_nodes {
            return Err(at(
                s.span(),
                "a step runs 'from' a node, but the study has no topology or [ssh] hosts".into(),
            ));
        }
        let name = r.name.clone().unwrap_or_else(|| format!("step {}", i + 1));
        if steps.iter().any(|s: &Step| s.name == name) {
            return Err(at(s.span(), format!("step name '{name}' is given twice")));
        }
        steps.push(Step {
            name,
            kind,
            args,
            from: r.from.clone(),
            group: r.group.clone(),
        });
    }
    let ssh = match &raw.ssh {
        Some(table) if raw.topology.is_some() => {
            return Err(at(
                table.span(),
                "topology and [ssh]: the nodes are a topology's or hosts over SSH, not both".into(),
            ));
        }
        Some(table) => {
            let mut nodes: Vec<String> = Vec::new();
            let named = servers
                .iter()
                .map(|s| &s.node)
                .chain(steps.iter().map(|s| &s.from));
            for node in named.flatten() {
                if !nodes.contains(node) {
                    nodes.push(node.clone());
                }
            }
            let hosts = crate::ssh::hosts(
                table,
                &nodes,
                "node",
                "a node a server or step of the study runs on",
                &at,
            )?;
            nodes.into_iter().zip(hosts).collect()
        }
        None => Vec::new(),
    };
    let ssh_options = crate::ssh::options(raw.ssh_options.as_ref(), !ssh.is_empty(), &at)?;
    Ok(Study {
        name: name.clone(),
        description: raw.description,
        repeat,
        order,
        seed,
        warmup,
        pause,
        topology: raw.topology,
        ssh,
        ssh_options,
        keep_cpus_awake: raw.keep_cpus_awake.is_some_and(|k| *k.get_ref()),
        schedule_per_trial: raw.schedule_per_trial.is_some_and(|k| *k.get_ref()),
        links,
        on_error,
        setup: raw.setup,
        servers,
        params,
        excludes,
        steps,
    })
}

/// `{scratch}`: an empty directory the runner makes for each trial and removes after it
/// (a fetch's `--out`), so no trial sees another's files. Not a parameter's or a
/// server's name.
pub const SCRATCH: &str = "scratch";

/// A parameter name: what `{name}` is written with.
fn param_name_ok(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// A value as a label and a template's text: strings as written, numbers and booleans as
/// TOML writes them.
fn scalar(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

fn params(table: &toml::Table) -> Result<Vec<Param>, String> {
    let mut out = Vec::new();
    for (name, v) in table {
        if !param_name_ok(name) {
            return Err(format!(
                "parameter '{name}': use lower-case letters, digits and '_', starting with a letter or '_'"
            ));
        }
        let values: Vec<ParamValue> = match v {
            toml::Value::Array(list) => list
                .iter()
                .map(|v| {
                    scalar(v)
                        .map(|s| ParamValue {
                            label: s.clone(),
                            text: s,
                            parts: Vec::new(),
                        })
                        .ok_or_else(|| {
                            format!("parameter '{name}': values are strings, numbers or booleans")
                        })
                })
                .collect::<Result<_, _>>()?,
            toml::Value::Table(labels) => labels
                .iter()
                .map(|(label, value)| {
                    let bad = || {
                        format!(
                            "parameter '{name}': value '{label}' stands for a string, number or boolean, or a table of them"
                        )
                    };
                    match value {
                        toml::Value::Table(t) if !t.is_empty() => Ok(ParamValue {
                            label: label.clone(),
                            text: String::new(),
                            parts: t
                                .iter()
                                .map(|(part, v)| scalar(v).map(|s| (part.clone(), s)))
                                .collect::<Option<_>>()
                                .ok_or_else(bad)?,
                        }),
                        v => scalar(v)
                            .map(|text| ParamValue {
                                label: label.clone(),
                                text,
                                parts: Vec::new(),
                            })
                            .ok_or_else(bad),
                    }
                })
                .collect::<Result<_, _>>()?,
            _ => {
                return Err(format!(
                    "parameter '{name}': give a list of values, or a table of labels and the text each stands for"
                ));
            }
        };
        if values.is_empty() {
            return Err(format!("parameter '{name}' has no values"));
        }
        if name == SCRATCH {
            return Err(format!(
                "parameter '{name}': the name is {{{SCRATCH}}}'s, the trial's directory"
            ));
        }
        for (i, v) in values.iter().enumerate() {
            if values[..i].iter().any(|w| w.label == v.label) {
                return Err(format!("parameter '{name}': '{}' is given twice", v.label));
            }
        }
        out.push(Param {
            name: name.clone(),
            values,
        });
    }
    Ok(out)
}

fn exclusion(table: &toml::Table, params: &[Param]) -> Result<Vec<(usize, usize)>, String> {
    if table.is_empty() {
        return Err("an [[exclude]] needs at least one parameter".into());
    }
    table
        .iter()
        .map(|(name, v)| {
            let p = params
                .iter()
                .position(|p| &p.name == name)
                .ok_or_else(|| format!("[[exclude]]: '{name}' is not a parameter"))?;
            let label = scalar(v)
                .ok_or_else(|| format!("[[exclude]]: '{name}' must be one of its values"))?;
            let value = params[p]
                .values
                .iter()
                .position(|v| v.label == label)
                .ok_or_else(|| format!("[[exclude]]: '{label}' is not a value of '{name}'"))?;
            Ok((p, value))
        })
        .collect()
}

/// A `[[link]]` (`section`, of a topology's `thing`) or `[[medium]]`: its name and the
/// `properties` it sets, each a template of parameters.
fn link_change(
    table: &toml::Table,
    params: &[Param],
    section: &str,
    thing: &str,
    properties: &[&str],
) -> Result<LinkChange, String> {
    let link = match table.get("name") {
        Some(toml::Value::String(n)) => n.clone(),
        _ => {
            return Err(format!(
                "a {section} needs the name of a {thing} of the topology (name = \"…\")"
            ));
        }
    };
    let mut set = Vec::new();
    for (key, v) in table.iter().filter(|(k, _)| *k != "name") {
        if !properties.contains(&key.as_str()) {
            return Err(format!(
                "{section} '{link}': '{key}' is not a {thing} property ({})",
                properties.join(", ")
            ));
        }
        let what = format!("{section} '{link}': {key}");
        let text = scalar(v).ok_or_else(|| format!("{what}: give a string or a number"))?;
        let t = template(&what, &text, params, &[])?;
        if t.0.contains(&Piece::Scratch) {
            return Err(format!(
                "{what}: only parameters fill a {thing}'s properties"
            ));
        }
        set.push((key.clone(), t));
    }
    if set.is_empty() {
        return Err(format!(
            "{section} '{link}' changes nothing: give one or more of {}",
            properties.join(", ")
        ));
    }
    Ok(LinkChange { link, set })
}

/// `{name}` (`suffix` `None`) or `{name.suffix}` for parameter `p`: a plain
/// parameter's value, or a part every value of a parameter of tables has.
/// Whether a server's options serve QUIC (`--quic`, `--quic=PORT`).
fn serves_quic(server: &Server) -> bool {
    server
        .args
        .split_whitespace()
        .any(|a| a == "--quic" || a.starts_with("--quic="))
}

fn param_piece(
    what: &str,
    name: &str,
    p: usize,
    param: &Param,
    suffix: Option<&str>,
) -> Result<Piece, String> {
    let tables = param.values.iter().any(|v| !v.parts.is_empty());
    match suffix {
        None if tables => Err(format!(
            "{what}: '{{{name}}}': the values of '{name}' are tables; name a part, e.g. {{{name}.{}}}",
            param
                .values
                .iter()
                .flat_map(|v| &v.parts)
                .next()
                .map_or("", |(n, _)| n.as_str())
        )),
        None => Ok(Piece::Param(p, None)),
        Some(_) if !tables => Err(format!(
            "{what}: '{{{name}}}': '{}' is a parameter whose values have no parts (nor is it a server)",
            param.name
        )),
        Some(part) => match param
            .values
            .iter()
            .find(|v| !v.parts.iter().any(|(n, _)| n == part))
        {
            Some(v) => Err(format!(
                "{what}: '{{{name}}}': value '{}' of '{}' has no part '{part}'",
                v.label, param.name
            )),
            None => Ok(Piece::Param(p, Some(part.to_string()))),
        },
    }
}

fn template(
    what: &str,
    text: &str,
    params: &[Param],
    servers: &[Server],
) -> Result<Template, String> {
    let mut pieces = Vec::new();
    let mut plain = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                plain.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                plain.push('}');
            }
            '{' => {
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(c) => name.push(c),
                        None => return Err(format!("{what}: '{{{name}' is not closed")),
                    }
                }
                let (base, suffix) = match name.split_once('.') {
                    None => (name.as_str(), None),
                    Some((b, s)) => (b, Some(s)),
                };
                let piece = if name == SCRATCH {
                    Piece::Scratch
                } else if let Some(p) = params.iter().position(|p| p.name == base) {
                    param_piece(what, &name, p, &params[p], suffix)?
                } else if let Some(s) = servers.iter().position(|s| s.name == base) {
                    let part = match suffix {
                        None => ServerPart::Address,
                        Some("host") => ServerPart::Host,
                        Some("port") => ServerPart::Port,
                        Some("quic_port") if serves_quic(&servers[s]) => ServerPart::QuicPort,
                        Some("quic_port") => {
                            return Err(format!(
                                "{what}: '{{{name}}}': server {base} serves no QUIC: give it --quic=0 in its args"
                            ));
                        }
                        Some(_) => {
                            return Err(format!(
                                "{what}: '{{{name}}}': a server has .host, .port and .quic_port (write {{{{ for a brace)"
                            ));
                        }
                    };
                    Piece::Server(s, part)
                } else {
                    return Err(format!(
                        "{what}: '{{{name}}}' is neither a parameter nor a server (write {{{{ for a brace)"
                    ));
                };
                if !plain.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut plain)));
                }
                pieces.push(piece);
            }
            '}' => return Err(format!("{what}: a lone '}}' (write }}}} for a brace)")),
            c => plain.push(c),
        }
    }
    if !plain.is_empty() {
        pieces.push(Piece::Text(plain));
    }
    Ok(Template(pieces))
}
