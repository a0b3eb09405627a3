//! A study's topology: read and checked against the study (every node it names exists,
//! every step reaches the servers it names), shaped into the networks its `[[link]]`s
//! make, brought up before the first trial (and again with each new network) and down
//! after the last — also on Ctrl-C or an error — unless it was up already.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use flowlab_net::build::{self, UpOptions};
use flowlab_net::topology::{Kind, Plan, Topology};
use flowlab_study::{Cell, MEDIUM_PROPERTIES, Study};

use super::RunError;

/// The topology a study runs on.
#[derive(Debug)]
pub struct Net {
    /// As the file has it (the nodes, links and addresses every network shares).
    pub topo: Topology,
    pub file: PathBuf,
    /// Each network the study brings up: the file's topology with the `[[link]]` values
    /// of its cells ([`Study::networks`]); the file's alone when the study changes no
    /// link.
    pub networks: Vec<Topology>,
}

/// Where a server is reached from a step: this machine's loopback, or a node.
fn place(node: Option<&str>) -> &str {
    node.unwrap_or("this machine")
}

impl Net {
    /// Reads `file`; its errors name it.
    pub fn load(file: &Path) -> Result<Net, String> {
        let text = std::fs::read_to_string(file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let dir = file.parent().unwrap_or(Path::new("."));
        let topo = Topology::parse_with(&text, &flowlab_net::build::beside(dir))
            .map_err(|e| format!("{}: {e}", file.display()))?;
        Ok(Net {
            networks: vec![topo.clone()],
            topo,
            file: file.into(),
        })
    }

    /// Makes each network of `cells` (numbered by `network`, from
    /// [`Study::networks`]): the file's topology with the cell's `[[link]]` values.
    /// Refuses a link the topology lacks or a value it would refuse, naming the cell,
    /// and, when the study keeps the CPUs awake, a network with nothing to emulate.
    pub fn shape(
        &mut self,
        study: &Study,
        cells: &[Cell],
        network: &[usize],
    ) -> Result<(), String> {
        self.networks.clear();
        for (cell, &n) in cells.iter().zip(network) {
            if n < self.networks.len() {
                continue;
            }
            let mut topo = self.topo.clone();
            // A trace is read beside the topology file, as the file's own are.
            let dir = self.file.parent().unwrap_or(Path::new("."));
            for (link, key, value) in study.link_values(cell) {
                let (section, set) = match key.as_str() {
                    "trace" => (
                        "[[link]]",
                        topo.set_trace(&link, &value, &build::beside(dir)),
                    ),
                    "schedule" => ("[[link]]", topo.set_schedule(&link, &value)),
                    k if MEDIUM_PROPERTIES.contains(&k) => {
                        ("[[medium]]", topo.set_medium(&link, &key, &value))
                    }
                    _ => ("[[link]]", topo.set_link(&link, &key, &value)),
                };
                set.map_err(|e| {
                    format!("{section} '{link}', cell {}: {e}", study.cell_label(cell))
                })?;
            }
            if study.keep_cpus_awake && !build::has_emulated_links(&topo) {
                let whose = if study.links.is_empty() {
                    String::new()
                } else {
                    format!(", cell {},", study.cell_label(cell))
                };
                return Err(format!(
                    "keep_cpus_awake: no link of topology {} ({}){whose} has delay, jitter or loss, so there is no emulator to keep the CPUs awake for",
                    topo.name,
                    self.file.display()
                ));
            }
            self.networks.push(topo);
        }
        Ok(())
    }

    /// The namespace of `node`.
    pub fn ns(&self, node: &str) -> String {
        build::ns_name(&self.topo.name, node)
    }

    /// Refuses a node that is not a host or router of the topology.
    pub(crate) fn node(&self, node: &str, what: &str) -> Result<(), String> {
        match self.topo.nodes.get(node) {
            Some(Kind::Switch) => Err(format!(
                "{what}: '{node}' is a switch; name a host or a router"
            )),
            Some(_) => Ok(()),
            None => Err(format!(
                "{what}: '{node}' is not a node of topology {} ({}; it has: {})",
                self.topo.name,
                self.file.display(),
                self.topo
                    .nodes
                    .iter()
                    .filter(|(_, k)| **k != Kind::Switch)
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    /// The address of `to` as reached from `from`, or why there is none.
    pub fn address(&self, from: &str, to: &str) -> Result<Ipv4Addr, String> {
        let plan = Plan::of(&self.topo);
        plan.path(from, to)
            .and_then(|p| plan.address_towards(&p))
            .ok_or_else(|| format!("no path from {from} to {to} in topology {}", self.topo.name))
    }
}

/// Checks the nodes `study` names and that every step reaches its servers: a step on a
/// node reaches servers on nodes; a step on this machine, servers on its loopback.
pub fn check(study: &Study, net: Option<&Net>) -> Result<(), String> {
    if let Some(net) = net {
        for s in &study.servers {
            if let Some(node) = &s.node {
                net.node(node, &format!("server {}", s.name))?;
            }
        }
        for step in &study.steps {
            if let Some(from) = &step.from {
                net.node(from, &format!("step '{}'", step.name))?;
            }
        }
    }
    for step in &study.steps {
        for s in step.args.servers() {
            let server = &study.servers[s];
            match (&step.from, &server.node, net) {
                (Some(from), Some(node), Some(net)) => {
                    net.address(from, node).map_err(|e| {
                        format!(
                            "step '{}' cannot reach server {}: {e}",
                            step.name, server.name
                        )
                    })?;
                }
                (None, None, _) => {}
                // Over SSH: every host reaches every other at its address (the user's
                // network), and this machine reaches them too.
                (_, Some(_), None) if !study.ssh.is_empty() => {}
                (Some(from), None, None) => {
                    return Err(format!(
                        "step '{}' runs on host {from} but server {} on this machine's loopback, which {from} cannot reach: run the server on a host too (`node`)",
                        step.name, server.name
                    ));
                }
                (from, node, _) => {
                    return Err(format!(
                        "step '{}' runs on {} but server {} on {}: give both a node of the topology (`from` and `node`), or neither",
                        step.name,
                        place(from.as_deref()),
                        server.name,
                        place(node.as_deref())
                    ));
                }
            }
        }
    }
    Ok(())
}

/// A topology brought up for a study: taken down when dropped, unless it was up before.
#[derive(Debug)]
pub struct Up {
    name: String,
    ours: bool,
}

impl Up {
    /// The topology's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the study brought it up (else it was up already and stays up).
    pub fn ours(&self) -> bool {
        self.ours
    }

    /// Takes it down, if the study brought it up; what went wrong, to be said.
    pub fn down(mut self) -> Option<String> {
        self.take_down()
    }

    fn take_down(&mut self) -> Option<String> {
        if !std::mem::take(&mut self.ours) {
            return None;
        }
        build::down(&self.name, &build::state_dir())
            .err()
            .map(|e| format!("taking topology {} down: {e}", self.name))
    }
}

impl Drop for Up {
    /// On an early return: taken down all the same.
    fn drop(&mut self) {
        if let Some(why) = self.take_down() {
            tracing::warn!("{why}");
        }
    }
}

/// Refuses `net`'s topology when it is up already and `study` cannot use it as it is:
/// its emulator is lost ([`build::unusable`]), the study changes its links (they would
/// not be the cell's), or keeps the CPUs awake and the topology's emulator does not.
/// Whether it is up: the study uses it as it is.
pub fn refuse_if_unusable(net: &Net, study: &Study) -> Result<bool, RunError> {
    let name = &net.topo.name;
    let dir = build::state_dir();
    let Some(state) = build::state(&dir, name) else {
        return Ok(false);
    };
    if let Some(why) = build::unusable(&dir, name) {
        return Err(RunError::Failed(why));
    }
    if !study.links.is_empty() {
        return Err(RunError::Failed(format!(
            "topology {name} is up already, but the study changes its links ([[link]]) and must build it itself: take it down first (flowlab net down {})",
            net.file.display()
        )));
    }
    if study.schedule_per_trial {
        return Err(RunError::Failed(format!(
            "topology {name} is up already, but the study starts its schedules again at each trial (schedule_per_trial) and must build it itself: take it down first (flowlab net down {})",
            net.file.display()
        )));
    }
    if study.keep_cpus_awake && !state.cpus_kept_awake {
        return Err(RunError::Failed(format!(
            "topology {name} is up without --keep-cpus-awake, and the study asks for keep_cpus_awake: take it down first (flowlab net down {}), or bring it up with --keep-cpus-awake",
            net.file.display()
        )));
    }
    Ok(true)
}

/// Brings `net`'s network `network` up for `study`, its links emulated by the flowlab
/// binary `emulator` where the kernel cannot, or uses the topology as it is when it is
/// up already ([`refuse_if_unusable`]).
pub fn up(net: &Net, network: usize, study: &Study, emulator: &Path) -> Result<Up, RunError> {
    if refuse_if_unusable(net, study)? {
        return Ok(Up {
            name: net.topo.name.clone(),
            ours: false,
        });
    }
    build_up(net, &net.networks[network], study.keep_cpus_awake, emulator)
}

/// Brings `net`'s topology up as its file has it, or uses it as it is when it is up
/// already (and its emulator is not lost): what a mesh watches.
pub fn up_as_is(net: &Net, emulator: &Path) -> Result<Up, RunError> {
    let name = &net.topo.name;
    let dir = build::state_dir();
    if build::state(&dir, name).is_some() {
        if let Some(why) = build::unusable(&dir, name) {
            return Err(RunError::Failed(why));
        }
        return Ok(Up {
            name: name.clone(),
            ours: false,
        });
    }
    build_up(net, &net.topo, false, emulator)
}

fn build_up(
    net: &Net,
    topo: &Topology,
    keep_cpus_awake: bool,
    emulator: &Path,
) -> Result<Up, RunError> {
    let name = net.topo.name.clone();
    let opts = UpOptions {
        // Only the user-space emulator keeps the CPUs awake.
        backend: if keep_cpus_awake {
            build::Backend::Userspace
        } else {
            build::Backend::Auto
        },
        emulator: emulator.to_path_buf(),
        keep_cpus_awake,
        link_logs: None,
    };
    build::up(topo, &build::state_dir(), &opts).map_err(|source| RunError::Up {
        name: name.clone(),
        file: net.file.clone(),
        source,
    })?;
    Ok(Up { name, ours: true })
}
