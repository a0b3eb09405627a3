//! `flowlab net`: emulated networks from a topology file: show its plan, bring it up and
//! down, list what is up, run commands in its nodes, check it against its file.

use std::path::Path;

use crate::usage::Usage;
use anyhow::Context;
use clap::{Args, Subcommand};
use flowlab_net::build;
use flowlab_net::topology::{Plan, Topology};
use flowlab_report::table;
use flowlab_results::units;
use flowlab_runner::net_check;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check a topology file and show its plan: subnets, addresses, and for every pair of
    /// hosts (of up to 16; else for the two named) the path, RTT and bottleneck rate the
    /// file implies (no root needed).
    Show {
        /// The topology file (TOML; docs/net.md), or the name of a topology that is up.
        #[arg(value_name = "FILE|NAME")]
        file: std::path::PathBuf,
        /// Two hosts: show only the path between them (a topology of more than 16 hosts
        /// lists no paths otherwise).
        #[arg(value_name = "HOST", num_args = 2)]
        hosts: Vec<String>,
        /// Also draw the topology into FILE (SVG): hosts, routers and switches, each link
        /// labelled with its rate, delay, queue and loss.
        #[arg(long, value_name = "FILE")]
        svg: Option<std::path::PathBuf>,
    },
    /// Build the topology in network namespaces (root): nodes, links, addresses, routes,
    /// rate and queue limits (tbf), delay, jitter and loss (netem or the user-space
    /// emulator).
    Up {
        /// The topology file (TOML; docs/net.md).
        file: std::path::PathBuf,
        #[command(flatten)]
        backend: BackendArg,
    },
    /// Remove everything a topology's `up` created (also after a crash).
    Down {
        /// The topology's name (or its file).
        name: String,
    },
    /// List the topologies that are up and their namespaces (or only NAME's).
    Status {
        /// Only this topology.
        name: Option<String>,
    },
    /// Measure each host pair's RTT and bottleneck throughput and print them beside what
    /// the file implies, flagging deviations (builds the topology if it is not up).
    Check {
        /// The topology file (TOML; docs/net.md), or the name of a topology that is up.
        #[arg(value_name = "FILE|NAME")]
        file: std::path::PathBuf,
        /// Only these pairs, e.g. h1-h4,h1-h9 (default: every pair of hosts). Routers may
        /// be ends too; `A-B:N` runs N parallel connections.
        #[arg(long, value_name = "A-B[:N],...")]
        pairs: Option<String>,
        /// Seconds of TCP per pair.
        #[arg(short, long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=60))]
        time: u64,
        /// Pace the TCP load at this rate (e.g. 1G) instead of as fast as it goes.
        #[arg(short, long, value_parser = units::parse_rate)]
        bitrate: Option<u64>,
        /// TCP congestion control of the load, both ends (e.g. cubic; default: the
        /// system's, see `flowlab sysinfo`).
        #[arg(short = 'C', long, value_name = "ALGO")]
        congestion: Option<String>,
        /// Run the pairs' TCP tests at the same time (sharing links), and show each
        /// pair's max-min fair share and Jain's fairness index instead of judging rates.
        #[arg(long)]
        together: bool,
        /// Random-loss measurement: UDP datagrams per pair whose path has loss.
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=1_000_000))]
        loss_packets: u64,
        #[command(flatten)]
        backend: BackendArg,
        /// Print one JSON document.
        #[arg(short = 'J', long)]
        json: bool,
    },
    /// The user-space link emulator (started by `up`; reads its links as JSON on stdin).
    #[command(name = "_emulate", hide = true)]
    Emulate {
        /// Hold the CPUs out of deep idle states while it runs.
        #[arg(long)]
        keep_cpus_awake: bool,
        /// Where its counters go (the `up`'s state directory).
        #[arg(long)]
        state_dir: std::path::PathBuf,
        topology: String,
    },
    /// The schedule of a topology's changing links (started by `up`; logs to its stdout).
    #[command(name = "_schedule", hide = true)]
    Schedule {
        /// The `up`'s state directory.
        #[arg(long)]
        state_dir: std::path::PathBuf,
        topology: String,
    },
    /// ICMP echoes from here, one at a time on a fixed schedule, their result printed as
    /// JSON (a study's RTT step on a host over SSH).
    #[command(name = "_echo", hide = true)]
    Echo {
        #[arg(long)]
        count: u64,
        #[arg(long)]
        interval_us: u64,
        #[arg(long)]
        timeout_us: u64,
        to: String,
    },
    /// Run a command inside a node: `flowlab net exec h1 -- flowlab test 10.0.5.1`.
    Exec {
        /// Topology name (needed when more than one is up).
        #[arg(short, long)]
        topology: Option<String>,
        /// The node (host, router or switch) to run it in.
        node: String,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Change a link of a topology that is up, both ways, in place: rate, delay, jitter,
    /// loss, queue or queue_bytes, written as the file writes them (rate=10M
    /// delay=40ms). What is queued stays queued, and tests crossing it go on.
    Set {
        /// Topology name (needed when more than one is up).
        #[arg(short, long)]
        topology: Option<String>,
        /// The link, by its name in the file ("link N" for the Nth unnamed one).
        link: String,
        /// KEY=VALUE, one or more.
        #[arg(value_name = "KEY=VALUE", required = true)]
        values: Vec<String>,
    },
}

#[derive(Debug, Args)]
pub struct BackendArg {
    /// Where delay, jitter and loss are emulated: the kernel's netem, flowlab's user-space
    /// emulator, or auto (netem when the kernel has it). Rate and queue are always tbf.
    #[arg(long, default_value = "auto", value_name = "auto|netem|userspace")]
    pub backend: build::Backend,
    /// Keep every CPU out of its deep idle states while the user-space emulator runs (a
    /// CPU latency request of 0 µs, /dev/cpu_dma_latency): its timer wake-ups come sooner
    /// and its frames leave closer to their time, while idle CPUs poll instead of
    /// sleeping (power; a VM's host sees its vCPUs busy). docs/net.md.
    #[arg(long)]
    pub keep_cpus_awake: bool,
    /// Log each trace-driven link direction's queue to DIR (mahimahi's format: arrivals,
    /// opportunities, deliveries with their wait, drops), as LINK.a-b.log and
    /// LINK.b-a.log; `flowlab plot --link-log` draws one.
    #[arg(long, value_name = "DIR")]
    pub link_logs: Option<std::path::PathBuf>,
}

pub fn run(c: Command) -> anyhow::Result<()> {
    match c {
        Command::Show { file, hosts, svg } => {
            let t = file_or_up(&file)?;
            if let Some(out) = &svg {
                let drawing = flowlab_plot::topology_svg(&diagram(&t))?;
                std::fs::write(out, drawing).with_context(|| format!("--svg {}", out.display()))?;
            }
            let plan = Plan::of(&t);
            let summary = match hosts.as_slice() {
                [a, b] => plan
                    .summary_for(a, b)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?,
                _ => plan.summary(),
            };
            print!("{}", table::net_plan(&summary));
        }
        Command::Up { file, backend } => {
            let t = load_topology(&file)?;
            let state = build::up(&t, &build::state_dir(), &up_options(&backend)?)?;
            say_if_holding_changes_nothing(&state);
            let built = flowlab_net::status::built(&state, &t.name);
            print!("{}", table::net_up(&t.name, t.nodes.len(), &built));
            // `net show` describes the path manager the file asks for; where it was not
            // set, say so (a file's [mptcp] table on such a kernel is refused instead).
            let multi = t.multi_homed();
            if !multi.is_empty() && t.mptcp_table.is_none() && !build::mptcp_available() {
                eprintln!(
                    "note: this kernel makes no MPTCP socket (built without it, or \
                     net.mptcp.enabled = 0): {} built without MPTCP's path manager, each \
                     address routed by its own link all the same",
                    multi.join(", ")
                );
            }
        }
        Command::Down { name } => {
            // A file names its topology.
            let name = if Path::new(&name).is_file() {
                load_topology(Path::new(&name))?.name
            } else {
                name
            };
            build::preflight()?;
            let dir = build::state_dir();
            // A typo is said, not reported as a topology with nothing to remove; what a
            // crash left (state files, namespaces) is removed all the same.
            if !build::is_left(&name, &dir) {
                anyhow::bail!("no topology named '{name}' is up (flowlab net status lists them)");
            }
            let removed = build::down(&name, &dir)?;
            print!("{}", table::net_down(&name, removed.len()));
        }
        Command::Status { name } => {
            let mut up = flowlab_net::status::topologies(&build::state_dir());
            if let Some(name) = name {
                up.retain(|t| t.name == name);
                if up.is_empty() {
                    anyhow::bail!(
                        "no topology named '{name}' is up (flowlab net status lists them)"
                    );
                }
            }
            print!("{}", table::net_status(&up));
        }
        Command::Exec {
            topology,
            node,
            command,
        } => exec(topology, &node, &command)?,
        Command::Set {
            topology,
            link,
            values,
        } => {
            build::preflight()?;
            let topo = the_topology(topology)?;
            let mut pairs = Vec::new();
            for v in &values {
                let Some(pair) = v.split_once('=') else {
                    return Err(Usage(format!(
                        "flowlab net set: '{v}' is not KEY=VALUE (rate=10M, delay=40ms, loss=0.01, …)"
                    ))
                    .into());
                };
                pairs.push(pair);
            }
            let changed = build::set(&build::state_dir(), &topo, &link, &pairs)?;
            for k in &changed.kept {
                eprintln!("note: {}", table::kept_bucket_note(&link, k));
            }
            if let Some(st) = &changed.station {
                print!(
                    "{}",
                    table::net_set_station(&topo, &link, &st.ap, &st.before, &st.after)
                );
                return Ok(());
            }
            let (b, a) = (&changed.before, &changed.after);
            let direction = |from, to, before, after| table::SetDirection {
                from,
                to,
                before,
                after,
            };
            print!(
                "{}",
                table::net_set(
                    &topo,
                    &link,
                    &[
                        direction(&b.a, &b.b, &b.a_to_b, &a.a_to_b),
                        direction(&b.b, &b.a, &b.b_to_a, &a.b_to_a),
                    ]
                )
            );
        }
        Command::Check {
            file,
            pairs,
            time,
            bitrate,
            congestion,
            together,
            loss_packets,
            backend,
            json,
        } => {
            let t = file_or_up(&file)?;
            let load = net_check::Load {
                seconds: time,
                bitrate,
                congestion,
                loss_packets,
                together,
            };
            let place = flowlab_runner::Local::new(crate::cmd::own_binary()?);
            let check = net_check::check(
                &t,
                pairs.as_deref(),
                load,
                up_options(&backend)?,
                &place,
                &mut |note| eprintln!("note: {note}"),
            )?;
            if json {
                println!("{}", flowlab_report::json::document(&check)?);
            } else {
                print!("{}", table::net_check(&check));
            }
        }
        Command::Emulate {
            keep_cpus_awake,
            state_dir,
            topology,
        } => emulate(&state_dir, &topology, keep_cpus_awake)?,
        Command::Schedule {
            state_dir,
            topology,
        } => build::run_schedule(&state_dir, &topology, &mut std::io::stdout())?,
        Command::Echo {
            count,
            interval_us,
            timeout_us,
            to,
        } => {
            let echoes = flowlab_runner::place::Echoes {
                to,
                count,
                interval: std::time::Duration::from_micros(interval_us),
                timeout: std::time::Duration::from_micros(timeout_us),
            };
            let stop = std::sync::atomic::AtomicBool::new(false);
            let result =
                flowlab_runner::place::echo_here(&echoes, &stop).map_err(anyhow::Error::msg)?;
            println!("{}", serde_json::to_string(&result)?);
        }
    }
    Ok(())
}

/// The topology in `file`; an error names the file.
fn load_topology(file: &Path) -> anyhow::Result<Topology> {
    let text = std::fs::read_to_string(file).with_context(|| file.display().to_string())?;
    let dir = file.parent().unwrap_or(Path::new("."));
    Topology::parse_with(&text, &flowlab_net::build::beside(dir)).map_err(|e| {
        let place =
            e.at.map(|(line, column)| crate::usage::snippet(&text, line, column));
        anyhow::anyhow!("{}: {e}{}", file.display(), place.unwrap_or_default())
    })
}

/// The topology in file `arg`, or, where there is no such file, the one of that name
/// that is up (as it was brought up).
fn file_or_up(arg: &Path) -> anyhow::Result<Topology> {
    if arg.is_file() {
        return load_topology(arg);
    }
    let name = arg.to_string_lossy();
    build::state(&build::state_dir(), &name)
        .and_then(|s| s.topology)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "{name}: no such topology file, and no topology of that name is up \
                 (flowlab net status lists them)"
            )
        })
}

/// Once a topology is up with the CPUs held awake: a note when that changes nothing on
/// this machine (no cpuidle driver).
fn say_if_holding_changes_nothing(state: &build::State) {
    if state.cpus_kept_awake {
        if let Some(why) = flowlab_net::awake::changes_nothing_here() {
            eprintln!("note: --keep-cpus-awake: {why}");
        }
    }
}

/// How `up` builds: as `backend` asks, with this binary as the user-space emulator.
fn up_options(backend: &BackendArg) -> anyhow::Result<build::UpOptions> {
    Ok(build::UpOptions {
        backend: backend.backend,
        emulator: crate::cmd::own_binary().context("finding flowlab's own binary")?,
        keep_cpus_awake: backend.keep_cpus_awake,
        link_logs: backend
            .link_logs
            .as_ref()
            .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.clone())),
    })
}

/// `net exec`: this process becomes `command` inside `node`'s namespace.
/// The topology `-t` names, or the only one up.
fn the_topology(topology: Option<String>) -> anyhow::Result<String> {
    Ok(match topology {
        Some(t) => t,
        None => match build::status().as_slice() {
            [(t, _)] => t.clone(),
            [] => anyhow::bail!("no topology is up (flowlab net up FILE)"),
            several => {
                let names: Vec<&str> = several.iter().map(|(t, _)| t.as_str()).collect();
                anyhow::bail!(
                    "several topologies are up ({}): name one with -t",
                    names.join(", ")
                )
            }
        },
    })
}

fn exec(topology: Option<String>, node: &str, command: &[String]) -> anyhow::Result<()> {
    build::preflight()?;
    let topo = the_topology(topology)?;
    let ns = build::ns_name(&topo, node);
    if !build::namespaces().contains(&ns) {
        anyhow::bail!("topology {topo} has no node '{node}' up");
    }
    // Replaced by `ip netns exec`, which execs the command in turn: a signal sent to this
    // process reaches the command, and its exit status is ours.
    use std::os::unix::process::CommandExt;
    let e = std::process::Command::new("ip")
        .args(["netns", "exec", &ns])
        .args(command)
        .exec();
    Err(e).context("ip netns exec")
}

/// The user-space link emulator: reads its links from stdin, says `ready` on stdout once
/// it forwards, and writes its counters to the stats file until the links go away; with
/// `keep_cpus_awake`, holds the CPUs out of deep idle states meanwhile (or fails to
/// start, saying why).
fn emulate(state_dir: &Path, topology: &str, keep_cpus_awake: bool) -> anyhow::Result<()> {
    use std::io::{Read, Write};
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input)?;
    let links: Vec<flowlab_net::forward::EmulatedLink> =
        serde_json::from_str(&input).context("the emulator's links on stdin")?;
    // After the links are read: `up` is done writing them, and reads why from the log.
    let _awake = keep_cpus_awake
        .then(flowlab_net::awake::CpusAwake::hold)
        .transpose()
        .context("--keep-cpus-awake")?;
    let stats = build::stats_file(state_dir, topology);
    let tmp = stats.with_extension("json.tmp");
    flowlab_net::forward::run(
        links,
        &build::control_socket(state_dir, topology),
        || {
            let mut out = std::io::stdout();
            let _ = writeln!(out, "ready");
            let _ = out.flush();
            // Nothing more is written to stdout: the `up` that reads it is gone soon.
        },
        |s| {
            if let Ok(text) = serde_json::to_string_pretty(s) {
                if std::fs::write(&tmp, text).is_ok() {
                    let _ = std::fs::rename(&tmp, &stats);
                }
            }
        },
    )?;
    Ok(())
}

/// A topology as its drawing shows it: every node with its kind, hosts first, then
/// routers and switches, each in name order, and each link labelled with its name and
/// shape, one line each way when the two directions differ.
fn diagram(t: &Topology) -> flowlab_plot::Diagram {
    use flowlab_net::topology::Kind;
    use flowlab_plot::{DiagramLink, NodeKind};
    let mut nodes: Vec<(String, NodeKind)> = t
        .nodes
        .iter()
        .map(|(name, kind)| {
            let kind = match kind {
                Kind::Host => NodeKind::Host,
                Kind::Router => NodeKind::Router,
                Kind::Switch => NodeKind::Switch,
            };
            (name.clone(), kind)
        })
        .collect();
    nodes.sort_by_key(|(_, k)| match k {
        NodeKind::Host => 0,
        NodeKind::Router => 1,
        NodeKind::Switch => 2,
    });
    let links = t
        .links
        .iter()
        .map(|l| {
            // A link the file names is labelled with its name; one it does not, with
            // its shape alone (a part a line: the labels stay narrow).
            let mut label: Vec<String> = if l.named {
                vec![l.name.clone()]
            } else {
                Vec::new()
            };
            match (l.a_to_b.is_plain(), l.b_to_a.is_plain()) {
                (true, true) => {}
                _ if l.a_to_b == l.b_to_a => {
                    label.extend(table::shape_text(&l.a_to_b).split(", ").map(str::to_owned))
                }
                _ => label.extend([
                    format!("→ {}: {}", l.b, table::shape_text(&l.a_to_b)),
                    format!("→ {}: {}", l.a, table::shape_text(&l.b_to_a)),
                ]),
            }
            DiagramLink {
                a: l.a.clone(),
                b: l.b.clone(),
                label,
            }
        })
        .collect();
    flowlab_plot::Diagram {
        title: t.name.clone(),
        nodes,
        links,
    }
}
