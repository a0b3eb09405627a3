//! A study read and checked whole before anything starts: the file, its topology, every
//! server's options and every step of every cell (as the command's own parser reads
//! them), expanded into the trials to run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use flowlab_study::file::StepKind;
use flowlab_study::{Cell, Plan, Study, Trial};

use super::lines::{self, Commands, StepLine};
use super::topology::{self, Net};
use super::trial::Ready;
use super::{RunError, RunError::Refused};
use crate::place::Remote;

/// Which trials of a study run, and how long they take.
#[derive(Debug, Clone)]
pub struct Options {
    /// Only the cells that match one of these, each `PARAM=VALUE,…`.
    pub only: Vec<String>,
    /// Only the first N repetitions of each cell.
    pub repeat: Option<u32>,
    /// Every test's duration or size, and the pauses, multiplied by this.
    pub scale: f64,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            only: Vec::new(),
            repeat: None,
            scale: 1.0,
        }
    }
}

/// A study ready to run.
#[derive(Debug)]
pub struct Prepared {
    /// The study file's text (recorded with its results).
    pub text: String,
    pub study: Study,
    /// The study file's directory: servers and steps run there.
    pub dir: PathBuf,
    pub net: Option<Net>,
    /// Or the hosts over SSH the nodes are (`[ssh]`), in the study's order.
    pub remotes: Vec<(String, Remote)>,
    /// The setup commands' arguments (scaled).
    pub setup_lines: Vec<Vec<String>>,
    /// Each server's `flowlab serve` command line.
    pub serve_lines: Vec<Vec<String>>,
    /// Each cell's steps, checked (servers' ports as 5201).
    pub lines: Vec<Vec<StepLine>>,
    pub plan: Plan,
    /// The trials to run, in order (after `--only`).
    pub trials: Vec<Trial>,
    /// Each cell's network: the index into the topology's networks ([`Net::networks`]).
    pub network: Vec<usize>,
    /// Between two trials (scaled).
    pub pause: Duration,
    /// Durations and sizes multiplied by this (`--scale`).
    pub scale: f64,
}

/// Reads and checks the study in `path`, its command lines read by `commands`;
/// refusals name the file, and the step, cell and flag.
pub fn prepare(path: &Path, a: &Options, commands: &dyn Commands) -> Result<Prepared, RunError> {
    if !(a.scale > 0.0 && a.scale <= 100.0) {
        return Err(Refused(format!(
            "--scale {}: give a factor above 0, up to 100",
            a.scale
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|source| RunError::Read {
        file: path.into(),
        source,
    })?;
    let file = path.display();
    let study = match flowlab_study::parse(&text) {
        Ok(s) => s,
        Err(error) => {
            return Err(RunError::Parse {
                file: path.into(),
                text,
                error,
            });
        }
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let net = match &study.topology {
        Some(t) => {
            Some(Net::load(&dir.join(t)).map_err(|e| Refused(format!("{file}: topology: {e:#}")))?)
        }
        None => None,
    };
    let remotes = study
        .ssh
        .iter()
        .map(|(node, h)| {
            Remote::of(h)
                .map(|r| (node.clone(), r))
                .map_err(|e| Refused(format!("{file}: [ssh] {node}: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    topology::check(&study, net.as_ref()).map_err(|e| Refused(format!("{file}: {e}")))?;
    let only = only(&study, &a.only)?;
    let serve_lines = study
        .servers
        .iter()
        .map(|s| {
            lines::serve_line(commands, &s.args, s.node.is_none())
                .map_err(|e| Refused(format!("{file}: server {}: {e}", s.name)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let setup_lines = study
        .setup
        .iter()
        .map(|t| {
            lines::setup_line(commands, t, a.scale)
                .map_err(|e| Refused(format!("{file}: setup: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut p = Prepared {
        text,
        study,
        dir,
        net,
        remotes,
        setup_lines,
        serve_lines,
        lines: Vec::new(),
        plan: Plan {
            cells: Vec::new(),
            trials: Vec::new(),
            seed: 0,
        },
        trials: Vec::new(),
        network: Vec::new(),
        pause: Duration::ZERO,
        scale: a.scale,
    };
    let cells = p.study.cells();
    p.network = p.study.networks(&cells);
    if let Some(net) = &mut p.net {
        net.shape(&p.study, &cells, &p.network)
            .map_err(|e| Refused(format!("{file}: {e}")))?;
    }
    for cell in &cells {
        let mut steps = Vec::new();
        for (i, step) in p.study.steps.iter().enumerate() {
            // The ports are known once the server listens: 5201 and 4433 stand for them.
            let placeholder = |s: usize| flowlab_study::ServerAddress {
                host: p.host(i, s),
                port: 5201,
                quic_port: Some(4433),
            };
            let line = lines::step_line(
                commands,
                &p.study,
                i,
                cell,
                &placeholder,
                "<scratch>",
                a.scale,
            )
            .map_err(|e| {
                // A study that sweeps nothing has one cell, with no name.
                let label = p.study.cell_label(cell);
                let cell = if label.is_empty() {
                    String::new()
                } else {
                    format!(", cell {label}")
                };
                Refused(format!("{file}: step '{}'{cell}: {e}", step.name))
            })?;
            steps.push(line);
        }
        p.lines.push(steps);
    }
    // The order's seed, unless the file gives one: drawn from the file's text, so that
    // a dry run shows the order the run will take, and a re-run resumes it.
    p.plan = p.study.plan(default_seed(&p.text));
    p.trials = p
        .plan
        .trials
        .iter()
        .filter(|t| only.as_ref().is_none_or(|o| o.contains(&t.cell)))
        .filter(|t| a.repeat.is_none_or(|n| t.repetition <= n))
        .copied()
        .collect();
    p.pause = p.study.pause.mul_f64(a.scale);
    Ok(p)
}

impl Prepared {
    /// Where step `i` reaches server `s`: the server's node's address on the path from
    /// the step's node, or its host's address over SSH, or loopback (checked: every
    /// pair is one of these).
    pub fn host(&self, i: usize, s: usize) -> String {
        let node = &self.study.servers[s].node;
        if let Some((_, r)) = node
            .as_ref()
            .and_then(|n| self.remotes.iter().find(|(r, _)| r == n))
        {
            return r.address.clone();
        }
        match (
            &self.study.steps[i].from,
            &self.study.servers[s].node,
            &self.net,
        ) {
            (Some(from), Some(node), Some(net)) => net
                .address(from, node)
                .map(|a| a.to_string())
                .unwrap_or_default(),
            _ => "127.0.0.1".into(),
        }
    }

    /// `cell`'s stages ready to run, the servers listening on `ports`, `{scratch}` as
    /// `scratch` says for the step's node, durations and sizes scaled.
    pub(crate) fn ready(
        &self,
        commands: &dyn Commands,
        cell: &Cell,
        ports: &[(u16, Option<u16>)],
        scratch: &dyn Fn(Option<&str>) -> String,
    ) -> Result<Vec<Vec<Ready>>, String> {
        let study = &self.study;
        study
            .stages()
            .iter()
            .map(|stage| {
                stage
                    .iter()
                    .map(|&i| {
                        let address = |s: usize| flowlab_study::ServerAddress {
                            host: self.host(i, s),
                            port: ports[s].0,
                            quic_port: ports[s].1,
                        };
                        let step = &study.steps[i];
                        let line = lines::step_line(
                            commands,
                            study,
                            i,
                            cell,
                            &address,
                            &scratch(step.from.as_deref()),
                            self.scale,
                        )
                        .map_err(|e| format!("step '{}': {e}", step.name))?;
                        Ok(Ready {
                            name: step.name.clone(),
                            kind: kind_name(step.kind),
                            line,
                            from: step.from.clone(),
                        })
                    })
                    .collect()
            })
            .collect()
    }
}

fn kind_name(kind: StepKind) -> &'static str {
    match kind {
        StepKind::Test => "test",
        StepKind::Fetch => "fetch",
        StepKind::Rtt => "rtt",
    }
}

/// A seed from the study file's text (BLAKE3's first eight bytes, kept below 2^63 so
/// that SQLite's signed integers hold it).
fn default_seed(text: &str) -> u64 {
    let hash = flowlab_db::study_hash(text);
    u64::from_str_radix(&hash[..16], 16).unwrap_or(0) >> 1
}

/// The cells `--only` keeps (`None`: every cell), or which filter names nothing.
fn only(study: &Study, filters: &[String]) -> Result<Option<Vec<usize>>, RunError> {
    if filters.is_empty() {
        return Ok(None);
    }
    let mut wanted: Vec<Vec<(usize, usize)>> = Vec::new();
    for f in filters {
        let mut all = Vec::new();
        for pair in f.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').ok_or_else(|| {
                Refused(format!("--only {f}: write PARAM=VALUE, e.g. length=1000"))
            })?;
            let p = study
                .params
                .iter()
                .position(|p| p.name == name)
                .ok_or_else(|| {
                    Refused(format!(
                        "--only {f}: '{name}' is not a parameter of study {} (it has: {})",
                        study.name,
                        study
                            .params
                            .iter()
                            .map(|p| p.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?;
            let v = study.params[p]
                .values
                .iter()
                .position(|v| v.label == value)
                .ok_or_else(|| {
                    Refused(format!(
                        "--only {f}: '{value}' is not a value of '{name}' (it has: {})",
                        study.params[p]
                            .values
                            .iter()
                            .map(|v| v.label.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?;
            all.push((p, v));
        }
        wanted.push(all);
    }
    let cells: Vec<usize> = study
        .cells()
        .iter()
        .enumerate()
        .filter(|(_, c)| wanted.iter().any(|w| w.iter().all(|&(p, v)| c.0[p] == v)))
        .map(|(i, _)| i)
        .collect();
    if cells.is_empty() {
        return Err(Refused(format!(
            "--only {}: no cell of study {} matches",
            filters.join(" --only "),
            study.name
        )));
    }
    Ok(Some(cells))
}
