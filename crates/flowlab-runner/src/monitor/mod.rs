//! `flowlab monitor`: a mesh's probes run between its hosts on their schedule, for as
//! long as asked. The mesh file and the schedule are `flowlab_monitor`'s (sans-IO); this
//! brings the mesh's topology up (or uses it as it is) or connects to its hosts over SSH
//! (their flowlab's version checked, their clocks read), starts a `flowlab serve` on each
//! host a probe measures to, starts each run at its source when the schedule says, and
//! when it ends records it in the results database (`monitor_run`) and reports it as a
//! typed [`PathRun`]. Every process it started is stopped when the watch ends — by
//! `--for`, by the stop flag, or on an error.
//!
//! Each run is a flowlab command at its source's [`Place`] (this machine, in the
//! source's namespace; or the host over SSH): `flowlab ping` for latency, `flowlab test`
//! for throughput, each with `-J`, read back into the run's figures (`runs.rs`).

mod runs;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use flowlab_db::Db;
use flowlab_monitor::mesh::{self, Kind, Mesh};
use flowlab_monitor::schedule::{self, Schedule};
use flowlab_results::monitor::{MonitorStart, MonitorSummary, PathRun};

use crate::Error as RunError;
use crate::place::{Job, Output, Place, Process, Remote};
use crate::servers;
use crate::study::topology::{self, Net};

/// Readings of each SSH host's clock; the one with the shortest round trip is kept.
const CLOCK_TRIES: u32 = 5;

/// How often running processes are looked at, and the most a due run waits to start.
const POLL: Duration = Duration::from_millis(20);

/// A mesh read and checked against its topology, ready to watch.
#[derive(Debug)]
pub struct Prepared {
    pub mesh: Mesh,
    pub file: PathBuf,
    hosts: Hosts,
}

/// Where a mesh's hosts are.
#[derive(Debug)]
enum Hosts {
    /// Nodes of an emulated topology: namespaces of this machine.
    Topology(Net),
    /// Hosts over SSH, in the mesh's order.
    Ssh(Vec<Remote>),
}

/// Where each host's runs start, and the address of each as the others reach it.
struct Placed<'a> {
    /// Each host's place and namespace, in the mesh's order.
    at: Vec<(&'a dyn Place, Option<String>)>,
    /// The directory a job runs in: the mesh file's here, the login's over SSH.
    dir: &'a Path,
}

/// Reads the mesh `file` and its topology (beside it), and checks that every host is a
/// node of the topology and every pair has a path.
pub fn prepare(file: &Path) -> Result<Prepared, RunError> {
    let text = std::fs::read_to_string(file).map_err(|source| RunError::Read {
        file: file.into(),
        source,
    })?;
    let mesh = mesh::parse(&text).map_err(|error| RunError::Mesh {
        file: file.into(),
        text: text.clone(),
        error,
    })?;
    if !mesh.ssh.is_empty() {
        let mut hosts = Vec::new();
        for (name, h) in mesh.hosts.iter().zip(&mesh.ssh) {
            hosts.push(Remote::of(h).map_err(|e| {
                RunError::Refused(format!("{}: [ssh] {name}: {e}", file.display()))
            })?);
        }
        return Ok(Prepared {
            mesh,
            file: file.into(),
            hosts: Hosts::Ssh(hosts),
        });
    }
    let Some(topo) = &mesh.topology else {
        return Err(RunError::Refused(format!(
            "{}: no hosts to reach: name the emulated topology whose nodes they are (topology = \"lab.toml\"), or each host's SSH address ([ssh])",
            file.display()
        )));
    };
    let dir = file.parent().unwrap_or(Path::new(""));
    let net = Net::load(&dir.join(topo)).map_err(RunError::Refused)?;
    for host in &mesh.hosts {
        net.node(host, &format!("{}: host '{host}'", file.display()))
            .map_err(RunError::Refused)?;
    }
    for (from, to) in mesh.probes.iter().flat_map(|p| &p.pairs) {
        net.address(from, to)
            .map_err(|e| RunError::Refused(format!("{}: pair {from}-{to}: {e}", file.display())))?;
    }
    Ok(Prepared {
        mesh,
        file: file.into(),
        hosts: Hosts::Topology(net),
    })
}

impl Prepared {
    /// The address `to` is reached at from `from`.
    fn address(&self, from: &str, to: &str) -> Result<String, RunError> {
        match &self.hosts {
            Hosts::Topology(net) => net
                .address(from, to)
                .map(|a| a.to_string())
                .map_err(RunError::Failed),
            Hosts::Ssh(hosts) => Ok(hosts[self.index(to)?].address.clone()),
        }
    }

    /// Host `name`'s place in the mesh's order (the mesh's pairs name only its hosts).
    fn index(&self, name: &str) -> Result<usize, RunError> {
        self.mesh
            .hosts
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| RunError::Failed(format!("'{name}' is not a host of the mesh")))
    }
}

/// How to watch.
#[derive(Debug)]
pub struct Watch<'a> {
    /// Where a topology's namespaces are (this machine); hosts over SSH are places of
    /// their own ([`Ssh`](crate::place::Ssh)), connected as the watch starts.
    pub place: &'a dyn Place,
    /// The flowlab binary that emulates the topology's links where the kernel cannot.
    pub emulator: &'a Path,
    /// Set to stop: runs under way are killed and not reported.
    pub stop: &'a AtomicBool,
    /// Start no run after this long; the runs under way are let end. `None`: until
    /// stopped.
    pub until: Option<Duration>,
    /// Draws each run's jitter.
    pub seed: u64,
    /// The results database each run is recorded in, the moment it ends (before it is
    /// reported).
    pub db: Option<&'a Path>,
    /// This flowlab's version, recorded with its runs.
    pub version: &'a str,
}

/// What the watch says as it goes.
#[derive(Debug)]
pub enum Event<'a> {
    /// The servers listen and the schedule starts.
    Started(&'a MonitorStart),
    /// A run ended (measured, or failed with why).
    Ran(&'a PathRun),
    /// Something to tell the user that is no run's (a topology left up).
    Note(String),
}

/// A run under way.
#[derive(Debug)]
struct Under {
    run: schedule::Run,
    kind: Kind,
    argv: Vec<String>,
    process: Box<dyn Process>,
    started_unix: f64,
    begun: Instant,
    deadline: Duration,
}

/// The runs reported so far, each recorded first where there is a database.
#[derive(Debug)]
struct Tally {
    db: Option<(Db, i64)>,
    runs: u64,
    failed: u64,
    /// Why a run could not be recorded: it ends the watch, and what was recorded stays.
    unrecorded: Option<flowlab_db::DbError>,
}

impl Tally {
    fn report(&mut self, run: &PathRun, on: &mut dyn FnMut(Event<'_>)) {
        if let Some((db, runner)) = &self.db {
            if let Err(e) = db.record_monitor_run(*runner, run) {
                self.unrecorded.get_or_insert(e);
                return;
            }
        }
        self.runs += 1;
        self.failed += u64::from(!run.ok());
        on(Event::Ran(run));
    }
}

/// Watches `p`'s mesh until `w.until` or `w.stop`, reporting to `on`.
pub fn watch(
    p: &Prepared,
    w: &Watch<'_>,
    on: &mut dyn FnMut(Event<'_>),
) -> Result<MonitorSummary, RunError> {
    let mesh = &p.mesh;
    // The database first: one that cannot be written is said before anything starts.
    let db = match w.db {
        Some(path) => {
            let db = Db::open(path)?;
            let system = serde_json::to_string(&flowlab_engine::sysinfo::collect())
                .map_err(|e| RunError::Failed(format!("describing this system: {e}")))?;
            let runner = db.register_runner(w.version, &system)?;
            Some((db, runner))
        }
        None => None,
    };
    let here = p
        .file
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    // The topology up, or a connection to each host (its flowlab's version checked,
    // its clock read).
    let mut clocks = Vec::new();
    let (up, reached) = match &p.hosts {
        Hosts::Topology(net) => (Some(topology::up_as_is(net, w.emulator)?), Vec::new()),
        Hosts::Ssh(hosts) => {
            let mut reached = Vec::new();
            for h in hosts {
                let ssh = h
                    .connect(&mesh.ssh_options, w.version)
                    .map_err(|e| RunError::Failed(e.to_string()))?;
                reached.push(ssh);
            }
            for (name, ssh) in mesh.hosts.iter().zip(&reached) {
                clocks.push(
                    ssh.clock_offset(name, CLOCK_TRIES)
                        .map_err(RunError::Failed)?,
                );
            }
            (None, reached)
        }
    };
    let placed = match &p.hosts {
        Hosts::Topology(net) => Placed {
            at: mesh
                .hosts
                .iter()
                .map(|h| (w.place, Some(net.ns(h))))
                .collect(),
            dir: here,
        },
        Hosts::Ssh(_) => Placed {
            at: reached.iter().map(|s| (s as &dyn Place, None)).collect(),
            dir: Path::new("."),
        },
    };
    let dir = placed.dir;
    // A server on each host a probe measures to.
    let mut ports = std::collections::BTreeMap::new();
    let mut serving = Vec::new();
    for (_, to) in mesh.probes.iter().flat_map(|p| &p.pairs) {
        if ports.contains_key(to) {
            continue;
        }
        let argv = runs::serve_line();
        let (place, ns) = &placed.at[p.index(to)?];
        let server = servers::start(*place, to, &argv, ns.as_deref(), dir)?;
        ports.insert(to.clone(), server.port);
        serving.push(server);
    }
    let started = Instant::now();
    let start = MonitorStart {
        mesh: mesh.name.clone(),
        topology: match &p.hosts {
            Hosts::Topology(net) => Some(net.topo.name.clone()),
            Hosts::Ssh(_) => None,
        },
        topology_ours: up.as_ref().is_some_and(|u| u.ours()),
        hosts: mesh.hosts.clone(),
        probes: mesh.probes.iter().map(runs::describe).collect(),
        seed: w.seed,
        started_unix: w.place.now(),
        clocks,
    };
    on(Event::Started(&start));
    let mut schedule = Schedule::new(mesh, w.seed);
    let mut under: Vec<Under> = Vec::new();
    let mut tally = Tally {
        db,
        runs: 0,
        failed: 0,
        unrecorded: None,
    };
    loop {
        let stopping = w.stop.load(Ordering::Acquire) || tally.unrecorded.is_some();
        let mut i = 0;
        while i < under.len() {
            let u = &mut under[i];
            let exit = match u.process.try_wait() {
                Ok(Some(exit)) => Some(exit),
                Ok(None) if stopping => {
                    u.process.kill();
                    None
                }
                Ok(None) if u.begun.elapsed() > u.deadline => {
                    u.process.kill();
                    None
                }
                Ok(None) => {
                    i += 1;
                    continue;
                }
                Err(_) => None,
            };
            let u = under.swap_remove(i);
            schedule.ended(&u.run, started.elapsed());
            if stopping {
                // Killed by the stop: it measured nothing worth a row.
                continue;
            }
            let ended_unix = w.place.now();
            let took = u.begun.elapsed();
            let written = u.process.finish();
            let run = runs::path_run(
                mesh,
                &u.run,
                u.kind,
                &u.argv,
                (u.started_unix, ended_unix),
                runs::outcome(u.kind, exit, &written, took, u.deadline),
            );
            tally.report(&run, on);
        }
        let now = started.elapsed();
        if stopping || w.until.is_some_and(|until| now >= until) {
            if under.is_empty() {
                break;
            }
            std::thread::sleep(POLL);
            continue;
        }
        for run in schedule.start(now) {
            let kind = mesh.probes[run.probe].kind;
            let address = p.address(&run.from, &run.to)?;
            let argv = runs::run_line(kind, &address, ports[&run.to]);
            let (place, ns) = &placed.at[p.index(&run.from)?];
            let job = Job {
                argv: &argv,
                dir,
                ns: ns.as_deref(),
            };
            let started_unix = place.now();
            match place.start(&job, Output::Keep) {
                Ok(process) => under.push(Under {
                    deadline: runs::deadline(kind),
                    run,
                    kind,
                    argv,
                    process,
                    started_unix,
                    begun: Instant::now(),
                }),
                Err(e) => {
                    schedule.ended(&run, started.elapsed());
                    let run = runs::path_run(
                        mesh,
                        &run,
                        kind,
                        &argv,
                        (started_unix, started_unix),
                        Err(format!("starting flowlab: {e}")),
                    );
                    tally.report(&run, on);
                }
            }
        }
        let now = started.elapsed();
        let wait = schedule
            .next_due_after(now)
            .map_or(POLL, |due| due.saturating_sub(now).min(POLL));
        std::thread::sleep(wait.max(Duration::from_millis(1)));
    }
    drop(serving);
    drop(placed);
    drop(reached);
    if let Some(why) = up.and_then(|u| u.down()) {
        on(Event::Note(why));
    }
    if let Some(e) = tally.unrecorded {
        return Err(e.into());
    }
    Ok(MonitorSummary {
        mesh: mesh.name.clone(),
        runs: tally.runs,
        failed: tally.failed,
        skipped_rounds: schedule.skipped(),
        seconds: started.elapsed().as_secs_f64(),
        interrupted: w.stop.load(Ordering::Acquire),
    })
}
