//! Building a topology in network namespaces (`flowlab net up/down/status/exec`), with
//! iproute2's `ip` and `tc`.
//!
//! Everything `up` creates lives inside namespaces named `fl-<topology>-<node>`: one per
//! host and router, one per switch (holding a bridge). A link is a veth pair whose ends are
//! created directly in the two nodes' namespaces, both named `l<index>` (the link's index
//! in the file). Deleting the namespaces therefore removes every interface, bridge and
//! qdisc, so `down` needs nothing but the names — it reads the state file that `up`
//! appends each namespace to *before* creating it, and also removes any namespace with the
//! topology's prefix, so a crashed or killed `up` is cleaned up too.
//!
//! Link emulation: rate and queue with `tbf` on the sending interface, in every kernel and
//! with either backend. Delay, jitter and loss with one of two [`Backend`]s:
//! - `netem` as the root qdisc of the sending interface, `tbf` as its child;
//! - the user-space emulator ([`crate::forward`]): the link gets a middle namespace
//!   `fl-<topology>-link.<index>` between its two ends, and one emulator process per
//!   topology forwards frames across it, delayed and dropped as the file says.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::topology::{Kind, Plan, Topology};
use flowlab_report::net::Shape;

/// Bytes a queued packet is counted as when a queue is given in packets.
pub const PACKET_BYTES: u64 = 1514;

/// tbf's bucket holds 1/this of a second at the link's rate (10 ms; see [`shaping`]).
const TBF_BUCKET_PER_SECOND: u64 = 100;
/// Queue limit of a rate-limited link that gives none, packets.
pub const DEFAULT_QUEUE: u64 = 1000;

/// Why building or removing a topology failed.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("{0}")]
    Topology(#[from] crate::topology::TopologyError),
    #[error("`{command}` failed: {message}")]
    Command { command: String, message: String },
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("a topology named '{0}' is up already (flowlab net down {0})")]
    Exists(String),
    #[error("the link emulator did not start: {0}")]
    Emulator(String),
    #[error("{0}")]
    Preflight(String),
}

/// Checks what building and measuring need before anything is tried: root
/// (CAP_NET_ADMIN) and iproute2's `ip` and `tc`.
pub fn preflight() -> Result<(), NetError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(NetError::Preflight(
            "flowlab net needs root (CAP_NET_ADMIN) to build and measure namespaces; try sudo"
                .into(),
        ));
    }
    for tool in ["ip", "tc"] {
        let found = Command::new(tool)
            .arg("-V")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok();
        if !found {
            return Err(NetError::Preflight(format!(
                "flowlab net needs iproute2's `{tool}`, which is not on PATH (Debian: apt-get install iproute2)"
            )));
        }
    }
    Ok(())
}

/// Where delay, jitter and loss are emulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// netem where the kernel has it, else the user-space emulator.
    Auto,
    /// The kernel's `sch_netem`.
    Netem,
    /// flowlab's user-space emulator (every kernel).
    Userspace,
}

/// A `--backend` that is none of flowlab's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}': choose auto, netem or userspace")]
pub struct UnknownBackend(pub String);

impl std::str::FromStr for Backend {
    type Err = UnknownBackend;
    fn from_str(s: &str) -> Result<Self, UnknownBackend> {
        match s {
            "auto" => Ok(Backend::Auto),
            "netem" => Ok(Backend::Netem),
            "userspace" => Ok(Backend::Userspace),
            _ => Err(UnknownBackend(s.into())),
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::Auto => "auto",
            Backend::Netem => "netem",
            Backend::Userspace => "userspace",
        })
    }
}

/// How `up` builds.
#[derive(Debug, Clone)]
pub struct UpOptions {
    pub backend: Backend,
    /// The program run as the user-space emulator: `PROGRAM net _emulate TOPOLOGY`, with
    /// the links as JSON ([`crate::forward::EmulatedLink`]) on its stdin; it prints
    /// `ready` once it forwards.
    pub emulator: PathBuf,
}

/// What `up` built, kept in `<state dir>/<topology>.json` for `status` and `down`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct State {
    /// `netem` or `userspace` when some link needed emulation, else `None` (tbf only).
    pub backend: Option<Backend>,
    /// The emulator process, when there is one.
    pub emulator_pid: Option<u32>,
    /// The links the emulator forwards.
    pub emulated_links: Vec<String>,
    /// The topology as it was brought up (older states lack it).
    #[serde(default)]
    pub topology: Option<Topology>,
}

/// Whether a direction needs more than tbf.
fn needs_emulation(s: &Shape) -> bool {
    !s.delay.is_zero() || !s.jitter.is_zero() || s.loss > 0.0
}

/// The middle namespace of link `index` under the user-space backend (a dot cannot
/// appear in a node name, so it never collides with one).
pub fn link_ns_name(topo: &str, index: usize) -> String {
    format!("fl-{topo}-link.{index}")
}

/// The namespace of `node` in topology `topo`.
pub fn ns_name(topo: &str, node: &str) -> String {
    format!("fl-{topo}-{node}")
}

fn prefix(topo: &str) -> String {
    format!("fl-{topo}-")
}

/// Runs a command, turning a failure into an error that shows it and its stderr.
fn run(program: &str, args: &[&str]) -> Result<String, NetError> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| NetError::Command {
            command: format!("{program} {}", args.join(" ")),
            message: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(NetError::Command {
            command: format!("{program} {}", args.join(" ")),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Namespaces that exist now.
pub fn namespaces() -> Vec<String> {
    run("ip", &["netns", "list"])
        .map(|s| {
            s.lines()
                .filter_map(|l| l.split_whitespace().next().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Prefix of the scratch namespaces of [`netem_available`] (a dot cannot start a
/// topology name, so `status` and `down` never take them for one).
const PROBE_PREFIX: &str = "fl-.probe-";

/// Whether this kernel has `sch_netem` (tried in a scratch namespace).
pub fn netem_available() -> bool {
    // Scratch namespaces of probes that died half-way go first.
    for ns in namespaces() {
        if let Some(pid) = ns.strip_prefix(PROBE_PREFIX) {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = run("ip", &["netns", "del", &ns]);
            }
        }
    }
    let scratch = format!("{PROBE_PREFIX}{}", std::process::id());
    if run("ip", &["netns", "add", &scratch]).is_err() {
        return false;
    }
    let ok = run(
        "ip",
        &[
            "netns", "exec", &scratch, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay",
            "1ms",
        ],
    )
    .is_ok();
    let _ = run("ip", &["netns", "del", &scratch]);
    ok
}

/// Where `up` records what it created.
pub fn state_dir() -> PathBuf {
    PathBuf::from("/run/flowlab/net")
}

fn state_file(dir: &Path, topo: &str) -> PathBuf {
    dir.join(format!("{topo}.list"))
}

fn record(dir: &Path, topo: &str, ns: &str) -> Result<(), NetError> {
    use std::io::Write;
    std::fs::create_dir_all(dir).map_err(|e| NetError::Io(dir.to_path_buf(), e))?;
    let path = state_file(dir, topo);
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| NetError::Io(path.clone(), e))?;
    writeln!(f, "{ns}").map_err(|e| NetError::Io(path, e))
}

/// The `tc` arguments that shape one direction of a link on interface `dev`: `tbf` for
/// rate and queue; with `netem`, netem for delay, jitter and loss at the root and tbf as
/// its child. Without `netem`, delay, jitter and loss are left to the user-space emulator.
pub fn shaping(dev: &str, s: &Shape, netem: bool) -> Vec<Vec<String>> {
    let mut cmds = Vec::new();
    let limit_bytes = crate::topology::queue_limit_bytes(s);
    let tbf = |parent: &[&str], rate: u64| -> Vec<String> {
        // Burst: tbf sends only when the kernel runs it, and tokens beyond the bucket are
        // lost, so a bucket shorter than the longest time the host leaves it unserved
        // loses rate and stretches the queue's delay beyond limit/rate. A 1 ms bucket
        // lost up to 0.7 % of the rate on a VM whose timers were 1–6 ms late (15 ms at
        // times) at 0.3 % CPU steal, and 1–7 % while 2–12 % was stolen (docs/net.md);
        // tc-tbf(8)'s rule, rate/HZ, at the coarsest tick (100 Hz) is 10 ms. At least
        // two full packets.
        let burst = (rate / 8 / TBF_BUCKET_PER_SECOND).max(2 * PACKET_BYTES);
        let mut v: Vec<String> = ["qdisc", "add", "dev", dev]
            .iter()
            .map(|x| x.to_string())
            .collect();
        v.extend(parent.iter().map(|x| x.to_string()));
        v.extend([
            "tbf".to_string(),
            "rate".into(),
            format!("{rate}bit"),
            "burst".into(),
            burst.to_string(),
            "limit".into(),
            limit_bytes.to_string(),
        ]);
        v
    };
    if netem && needs_emulation(s) {
        let mut v: Vec<String> = ["qdisc", "add", "dev", dev, "root", "handle", "1:", "netem"]
            .iter()
            .map(|x| x.to_string())
            .collect();
        v.extend([
            "delay".into(),
            format!("{}us", s.delay.as_micros()),
            format!("{}us", s.jitter.as_micros()),
        ]);
        if s.loss > 0.0 {
            v.extend(["loss".into(), format!("{}%", s.loss * 100.0)]);
        }
        // netem's limit counts the packets on its delay line: as many as the user-space
        // emulator's line holds.
        v.extend(["limit".into(), crate::emulator::line_limit(s).to_string()]);
        cmds.push(v);
        if let Some(rate) = s.rate_bps {
            cmds.push(tbf(&["parent", "1:", "handle", "2:"], rate));
        }
    } else if let Some(rate) = s.rate_bps {
        cmds.push(tbf(&["root"], rate));
    }
    cmds
}

/// Builds `t`. On failure everything created so far is removed again. Returns what was
/// built.
pub fn up(t: &Topology, dir: &Path, opts: &UpOptions) -> Result<State, NetError> {
    preflight()?;
    if namespaces().iter().any(|n| n.starts_with(&prefix(&t.name))) {
        return Err(NetError::Exists(t.name.clone()));
    }
    let emulated: Vec<usize> = t
        .links
        .iter()
        .enumerate()
        .filter(|(_, l)| needs_emulation(&l.a_to_b) || needs_emulation(&l.b_to_a))
        .map(|(i, _)| i)
        .collect();
    let backend = if emulated.is_empty() {
        None
    } else {
        Some(match opts.backend {
            Backend::Auto if netem_available() => Backend::Netem,
            Backend::Auto | Backend::Userspace => Backend::Userspace,
            Backend::Netem if netem_available() => Backend::Netem,
            Backend::Netem => {
                return Err(NetError::Unsupported(format!(
                    "link {} needs delay, jitter or loss, and this kernel has no netem (sch_netem); use --backend userspace (or auto)",
                    t.links[emulated[0]].name
                )));
            }
        })
    };
    let result = build(t, dir, backend, &emulated, opts);
    if result.is_err() {
        let _ = down(&t.name, dir);
    }
    result
}

fn build(
    t: &Topology,
    dir: &Path,
    backend: Option<Backend>,
    emulated: &[usize],
    opts: &UpOptions,
) -> Result<State, NetError> {
    let ns = |n: &str| ns_name(&t.name, n);
    let userspace = backend == Some(Backend::Userspace);
    for n in t.nodes.keys() {
        record(dir, &t.name, &ns(n))?;
        run("ip", &["netns", "add", &ns(n)])?;
        run("ip", &["-n", &ns(n), "link", "set", "lo", "up"])?;
    }
    for (n, k) in &t.nodes {
        if *k == Kind::Switch {
            run(
                "ip",
                &["-n", &ns(n), "link", "add", "br0", "type", "bridge"],
            )?;
            run("ip", &["-n", &ns(n), "link", "set", "br0", "up"])?;
        }
        if *k == Kind::Router {
            sysctl(&ns(n), "net.ipv4.ip_forward=1")?;
        }
    }
    let mut links = Vec::new();
    for (i, l) in t.links.iter().enumerate() {
        let dev = format!("l{i}");
        let (na, nb) = (ns(&l.a), ns(&l.b));
        if userspace && emulated.contains(&i) {
            // a's l<i> ⇄ "a" in the middle ⇄ emulator ⇄ "b" in the middle ⇄ b's l<i>.
            let mid = link_ns_name(&t.name, i);
            record(dir, &t.name, &mid)?;
            run("ip", &["netns", "add", &mid])?;
            // Its kernel must not talk on the link: no IPv6 (IPv4 has no address).
            sysctl(&mid, "net.ipv6.conf.all.disable_ipv6=1")?;
            sysctl(&mid, "net.ipv6.conf.default.disable_ipv6=1")?;
            run(
                "ip",
                &[
                    "link", "add", "name", &dev, "netns", &na, "type", "veth", "peer", "name", "a",
                    "netns", &mid,
                ],
            )?;
            run(
                "ip",
                &[
                    "link", "add", "name", "b", "netns", &mid, "type", "veth", "peer", "name",
                    &dev, "netns", &nb,
                ],
            )?;
            for end in ["a", "b"] {
                let _ = crate::netns::run_in(&mid, move || crate::netns::no_gro(end));
                run("ip", &["-n", &mid, "link", "set", "dev", end, "up"])?;
            }
            for n in [&na, &nb] {
                let d = dev.clone();
                crate::netns::run_in(n, move || crate::netns::complete_frames(&d)).map_err(
                    |e| NetError::Command {
                        command: format!("ethtool -K {dev} tx off (in {n})"),
                        message: e.to_string(),
                    },
                )?;
            }
            let spec = |s: &Shape| crate::forward::LineSpec {
                delay_us: s.delay.as_micros() as u64,
                jitter_us: s.jitter.as_micros() as u64,
                loss: s.loss,
                limit: crate::emulator::line_limit(s),
            };
            links.push(crate::forward::EmulatedLink {
                name: l.name.clone(),
                namespace: mid,
                a: "a".into(),
                b: "b".into(),
                a_to_b: spec(&l.a_to_b),
                b_to_a: spec(&l.b_to_a),
            });
        } else {
            run(
                "ip",
                &[
                    "link", "add", "name", &dev, "netns", &na, "type", "veth", "peer", "name",
                    &dev, "netns", &nb,
                ],
            )?;
        }
        for (node, n) in [(&l.a, &na), (&l.b, &nb)] {
            if t.nodes[node] == Kind::Switch {
                run(
                    "ip",
                    &["-n", n, "link", "set", "dev", &dev, "master", "br0"],
                )?;
            }
            run("ip", &["-n", n, "link", "set", "dev", &dev, "up"])?;
        }
        for (s, n) in [(&l.a_to_b, &na), (&l.b_to_a, &nb)] {
            for cmd in shaping(&dev, s, backend == Some(Backend::Netem)) {
                let mut args = vec!["-n", n.as_str()];
                args.extend(cmd.iter().map(String::as_str));
                run("tc", &args)?;
            }
        }
    }
    let plan = Plan::of(t);
    for (node, addr, dev) in interfaces(&plan) {
        let a = format!("{}/24", std::net::Ipv4Addr::from(addr));
        run("ip", &["-n", &ns(&node), "addr", "add", &a, "dev", &dev])?;
    }
    for (node, subnet, via) in routes(&plan) {
        run(
            "ip",
            &["-n", &ns(&node), "route", "add", &subnet, "via", &via],
        )?;
    }
    static_neighbours(t, &plan)?;
    let mut state = State {
        backend,
        emulator_pid: None,
        emulated_links: links.iter().map(|l| l.name.clone()).collect(),
        topology: Some(t.clone()),
    };
    if !links.is_empty() {
        state.emulator_pid = Some(start_emulator(&t.name, dir, &links, opts)?);
    }
    write_state(dir, &t.name, &state)?;
    Ok(state)
}

fn sysctl(ns: &str, setting: &str) -> Result<(), NetError> {
    let (key, value) = setting.split_once('=').unwrap_or((setting, "1"));
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    let value = value.to_string();
    crate::netns::run_in(ns, move || std::fs::write(&path, value)).map_err(|e| NetError::Command {
        command: format!("sysctl {setting} (in {ns})"),
        message: e.to_string(),
    })
}

fn state_json(dir: &Path, topo: &str) -> PathBuf {
    dir.join(format!("{topo}.json"))
}

/// Where the emulator of `topo` writes its counters (about once a second).
pub fn stats_file(dir: &Path, topo: &str) -> PathBuf {
    dir.join(format!("{topo}.stats.json"))
}

fn emulator_log(dir: &Path, topo: &str) -> PathBuf {
    dir.join(format!("{topo}.emulator.log"))
}

/// What is wrong with the emulator of `topo`, if anything: the lines it wrote (it writes
/// only when a link stops or fails), or that it no longer runs. `None` when all is well
/// or the topology has no emulator.
pub fn emulator_trouble(dir: &Path, topo: &str) -> Option<String> {
    let pid = state(dir, topo)?.emulator_pid?;
    let log = std::fs::read_to_string(emulator_log(dir, topo)).unwrap_or_default();
    let mut trouble = last_words(&log);
    if !running(pid) {
        trouble.push(format!("the link emulator (pid {pid}) is not running"));
    }
    (!trouble.is_empty()).then(|| trouble.join("; "))
}

/// What the emulator's log says went wrong: a panic's place and message (the lines
/// after it are a backtrace), else its last three lines.
fn last_words(log: &str) -> Vec<String> {
    let lines: Vec<&str> = log.lines().collect();
    let said = match lines.iter().position(|l| l.contains("panicked at")) {
        Some(i) => &lines[i..(i + 2).min(lines.len())],
        None => &lines[lines.len().saturating_sub(3)..],
    };
    said.iter().map(|l| l.to_string()).collect()
}

fn write_state(dir: &Path, topo: &str, state: &State) -> Result<(), NetError> {
    let path = state_json(dir, topo);
    let text = serde_json::to_string_pretty(state).unwrap_or_default();
    std::fs::write(&path, text).map_err(|e| NetError::Io(path, e))
}

/// What `up` recorded about `topo`, if it finished.
pub fn state(dir: &Path, topo: &str) -> Option<State> {
    let text = std::fs::read_to_string(state_json(dir, topo)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Starts the emulator process and waits until it forwards. Its pid is recorded first,
/// so `down` finds it even if this process dies now.
fn start_emulator(
    topo: &str,
    dir: &Path,
    links: &[crate::forward::EmulatedLink],
    opts: &UpOptions,
) -> Result<u32, NetError> {
    use std::io::{BufRead, Write};
    use std::os::unix::process::CommandExt;
    let log_path = emulator_log(dir, topo);
    let log = std::fs::File::create(&log_path).map_err(|e| NetError::Io(log_path.clone(), e))?;
    let mut child = std::process::Command::new(&opts.emulator)
        .args(["net", "_emulate", "--state-dir"])
        .arg(dir)
        .arg(topo)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(log)
        // Its own process group: a Ctrl-C meant for the caller does not stop the links.
        .process_group(0)
        .spawn()
        .map_err(|e| NetError::Emulator(format!("{}: {e}", opts.emulator.display())))?;
    let pid = child.id();
    record(dir, topo, &format!("pid {pid}"))?;
    let json = serde_json::to_string(links).unwrap_or_default();
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(json.as_bytes())
            .map_err(|e| NetError::Emulator(e.to_string()))?;
    }
    // Its answer, or none within 10 s (a thread reads it: a read has no timeout).
    let (tx, rx) = std::sync::mpsc::channel();
    if let Some(out) = child.stdout.take() {
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::BufReader::new(out).read_line(&mut line);
            let _ = tx.send(line);
        });
    }
    let line = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .unwrap_or_default();
    if line.trim() != "ready" {
        let _ = child.kill();
        let _ = child.wait();
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        return Err(NetError::Emulator(
            log.lines()
                .last()
                .unwrap_or("it exited without a word")
                .to_string(),
        ));
    }
    // The child lives on; it is not waited for (down stops it).
    std::mem::forget(child);
    Ok(pid)
}

/// Every node interface with an address: (node, address, device).
pub fn interfaces(plan: &Plan<'_>) -> Vec<(String, [u8; 4], String)> {
    segment_interfaces(plan).into_iter().flatten().collect()
}

/// [`interfaces`], per segment (in the plan's order).
pub fn segment_interfaces(plan: &Plan<'_>) -> Vec<Vec<(String, [u8; 4], String)>> {
    let t = plan.topology;
    let mut all = Vec::new();
    for seg in &plan.segments {
        let mut out = Vec::new();
        for (node, addr) in &seg.members {
            // A link segment is its own link; on a switch, the member's link to it.
            let link = seg.link.or_else(|| {
                let sw = seg.switch.as_ref()?;
                t.links
                    .iter()
                    .position(|l| (&l.a == node && &l.b == sw) || (&l.b == node && &l.a == sw))
            });
            if let Some(i) = link {
                out.push((node.clone(), *addr, format!("l{i}")));
            }
        }
        all.push(out);
    }
    all
}

/// The MAC address of `dev` in namespace `ns`.
fn mac(ns: &str, dev: &str) -> Result<String, NetError> {
    let out = run("ip", &["-n", ns, "-j", "link", "show", "dev", dev])?;
    let v: serde_json::Value = serde_json::from_str(&out).map_err(|e| NetError::Command {
        command: format!("ip -n {ns} -j link show dev {dev}"),
        message: e.to_string(),
    })?;
    v[0]["address"]
        .as_str()
        .map(String::from)
        .ok_or_else(|| NetError::Command {
            command: format!("ip -n {ns} -j link show dev {dev}"),
            message: "no address in its answer".into(),
        })
}

/// Permanent neighbour entries between all the interfaces of every segment, so no ARP
/// crosses an emulated link: an ARP probe lost in a full queue would otherwise stall a
/// path until it is resolved again (Mininet's `--arp` does the same).
fn static_neighbours(t: &Topology, plan: &Plan<'_>) -> Result<(), NetError> {
    use std::io::Write;
    let mut batches: std::collections::BTreeMap<String, String> = Default::default();
    for seg in segment_interfaces(plan) {
        let macs: Vec<String> = seg
            .iter()
            .map(|(node, _, dev)| mac(&ns_name(&t.name, node), dev))
            .collect::<Result<_, _>>()?;
        for (node, _, dev) in &seg {
            for ((other, addr, _), m) in seg.iter().zip(&macs) {
                if other != node {
                    let line = format!(
                        "neigh replace {} lladdr {m} dev {dev} nud permanent\n",
                        std::net::Ipv4Addr::from(*addr)
                    );
                    batches
                        .entry(ns_name(&t.name, node))
                        .or_default()
                        .push_str(&line);
                }
            }
        }
    }
    for (ns, batch) in batches {
        let command = format!("ip -n {ns} -batch -");
        let fail = |message: String| NetError::Command {
            command: command.clone(),
            message,
        };
        let mut child = Command::new("ip")
            .args(["-n", &ns, "-batch", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| fail(e.to_string()))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(batch.as_bytes())
                .map_err(|e| fail(e.to_string()))?;
        }
        let out = child.wait_with_output().map_err(|e| fail(e.to_string()))?;
        if !out.status.success() {
            return Err(fail(
                String::from_utf8_lossy(&out.stderr).trim().to_string(),
            ));
        }
    }
    Ok(())
}

/// Routes to add: (node, "10.x.y.0/24", next-hop address), for every non-switch node and
/// every subnet it is not on, via the first node of its shortest path there.
pub fn routes(plan: &Plan<'_>) -> Vec<(String, String, String)> {
    let t = plan.topology;
    let mut out = Vec::new();
    for (node, kind) in &t.nodes {
        if *kind == Kind::Switch {
            continue;
        }
        for seg in &plan.segments {
            if seg.members.iter().any(|(n, _)| n == node) {
                continue;
            }
            let best = seg
                .members
                .iter()
                .filter_map(|(m, _)| plan.path(node, m))
                .min_by_key(|p| (p.hops.len(), p.rtt));
            let Some(path) = best else { continue };
            let Some(next) = path
                .nodes
                .iter()
                .skip(1)
                .find(|n| t.nodes[*n] != Kind::Switch)
            else {
                continue;
            };
            // The next hop's address on the segment it shares with `node`.
            let via = plan.segments.iter().find_map(|s| {
                let mine = s.members.iter().any(|(n, _)| n == node);
                let theirs = s.members.iter().find(|(n, _)| n == next);
                if mine {
                    theirs.map(|(_, a)| std::net::Ipv4Addr::from(*a).to_string())
                } else {
                    None
                }
            });
            if let Some(via) = via {
                let subnet = format!("{}.{}.{}.0/24", seg.subnet[0], seg.subnet[1], seg.subnet[2]);
                out.push((node.clone(), subnet, via));
            }
        }
    }
    out
}

/// Whether process `pid` is the emulator of topology `topo` (its command line ends in
/// `net _emulate --state-dir DIR <topo>`).
fn is_emulator(pid: u32, topo: &str) -> bool {
    let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = raw.split(|&b| b == 0).filter(|a| !a.is_empty()).collect();
    let n = args.len();
    n >= 5
        && args[n - 5..n - 2] == [b"net".as_slice(), b"_emulate", b"--state-dir"]
        && args[n - 1] == topo.as_bytes()
}

/// Emulator processes of `topo` running now: the recorded ones and any other found in
/// /proc (one started by an `up` that died before recording it).
pub fn emulators(recorded: &[u32], topo: &str) -> Vec<u32> {
    let mut pids: Vec<u32> = recorded.to_vec();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        pids.extend(dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()));
    }
    pids.sort_unstable();
    pids.dedup();
    pids.retain(|&p| is_emulator(p, topo));
    pids
}

/// Whether `pid` still runs: it exists and is not a zombie (a zombie child of this
/// process — the emulator when `up` ran in this process — is reaped here).
fn running(pid: u32) -> bool {
    // SAFETY: waitpid with WNOHANG on a pid; fails harmlessly if it is not our child.
    unsafe { libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), libc::WNOHANG) };
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// Sends SIGTERM, then SIGKILL to what still runs after a second; waits until gone. The
/// signals go through pidfds opened first, so a pid reused meanwhile is never hit.
fn stop(pids: &[u32]) {
    let handles: Vec<(u32, Option<std::os::fd::OwnedFd>)> = pids
        .iter()
        .map(|&p| {
            // SAFETY: pidfd_open(2) with a pid and no flags; the descriptor is owned at
            // once.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, p as libc::pid_t, 0) };
            let fd = (fd >= 0).then(|| {
                // SAFETY: a fresh descriptor owned by nothing else.
                unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) }
            });
            (p, fd)
        })
        .collect();
    let signal = |sig: libc::c_int| {
        for (p, fd) in &handles {
            match fd {
                Some(fd) => {
                    use std::os::fd::AsRawFd;
                    // SAFETY: pidfd_send_signal(2) on a live pidfd, no info, no flags.
                    unsafe {
                        libc::syscall(
                            libc::SYS_pidfd_send_signal,
                            fd.as_raw_fd(),
                            sig,
                            std::ptr::null::<libc::siginfo_t>(),
                            0,
                        )
                    };
                }
                // Kernels before 5.3 have no pidfds; the pid was just checked.
                // SAFETY: kill(2) with a pid and a signal number.
                None => unsafe {
                    libc::kill(*p as libc::pid_t, sig);
                },
            }
        }
    };
    signal(libc::SIGTERM);
    for round in 0..40 {
        if !pids.iter().any(|&p| running(p)) {
            return;
        }
        if round == 10 {
            signal(libc::SIGKILL);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Removes topology `name`: stops its emulator and every process still running in its
/// namespaces, then removes the namespaces in its state file and any with its prefix.
/// Returns the namespaces removed.
pub fn down(name: &str, dir: &Path) -> Result<Vec<String>, NetError> {
    preflight()?;
    let path = state_file(dir, name);
    let mut listed = Vec::new();
    let mut pids = Vec::new();
    for line in std::fs::read_to_string(&path).unwrap_or_default().lines() {
        match line.strip_prefix("pid ") {
            Some(p) => pids.extend(p.trim().parse::<u32>()),
            None => listed.push(line.to_string()),
        }
    }
    listed.extend(
        namespaces()
            .into_iter()
            .filter(|n| n.starts_with(&prefix(name))),
    );
    listed.sort();
    listed.dedup();
    let existing = namespaces();
    let listed: Vec<String> = listed
        .into_iter()
        .filter(|n| existing.contains(n))
        .collect();
    stop(&emulators(&pids, name));
    // Servers and shells started with `net exec` would keep a namespace alive.
    let inside: Vec<u32> = listed
        .iter()
        .flat_map(|ns| {
            run("ip", &["netns", "pids", ns])
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect();
    stop(&inside);
    let mut removed = Vec::new();
    let mut failed = None;
    for ns in listed {
        // A namespace still being entered or left can refuse once: try again briefly.
        let mut result = run("ip", &["netns", "del", &ns]);
        for _ in 0..20 {
            if result.is_ok() || !namespaces().contains(&ns) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
            result = run("ip", &["netns", "del", &ns]);
        }
        match result {
            Ok(_) => removed.push(ns),
            Err(e) if namespaces().contains(&ns) => failed = failed.or(Some(e)),
            Err(_) => removed.push(ns),
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    for p in [
        path,
        state_json(dir, name),
        stats_file(dir, name),
        stats_file(dir, name).with_extension("json.tmp"),
        emulator_log(dir, name),
    ] {
        let _ = std::fs::remove_file(p);
    }
    // The state directories go too, once no other topology is recorded in them.
    if std::fs::remove_dir(dir).is_ok() {
        if let Some(parent) = dir.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
    Ok(removed)
}

/// Topologies that are up (by namespace prefix), with their namespaces.
pub fn status() -> Vec<(String, Vec<String>)> {
    let mut by_topo: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for ns in namespaces() {
        if let Some(rest) = ns.strip_prefix("fl-") {
            if let Some((topo, _)) = rest.split_once('-').filter(|(t, _)| !t.starts_with('.')) {
                by_topo
                    .entry(topo.to_string())
                    .or_default()
                    .push(ns.clone());
            }
        }
    }
    by_topo.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_emulators_last_words_are_its_panic_not_the_backtrace() {
        let log = "flowlab net emulator: link l2: stopped: gone\n\
                   thread '<unnamed>' panicked at crates/flowlab-net/src/x.rs:1:2:\n\
                   attempt to add with overflow\n\
                   stack backtrace:\n   0: rust_begin_unwind\n   1: core::panicking\n";
        assert_eq!(
            last_words(log),
            [
                "thread '<unnamed>' panicked at crates/flowlab-net/src/x.rs:1:2:",
                "attempt to add with overflow"
            ]
        );
        assert_eq!(last_words("a\nb\nc\nd\n"), ["b", "c", "d"]);
        assert!(last_words("").is_empty());
    }

    #[test]
    fn tbf_alone_when_only_rate_and_queue_are_asked() {
        let s = Shape {
            rate_bps: Some(40_000_000),
            queue_packets: Some(67),
            ..Shape::default()
        };
        let cmds = shaping("l3", &s, false);
        assert_eq!(cmds.len(), 1);
        assert_eq!(
            cmds[0].join(" "),
            "qdisc add dev l3 root tbf rate 40000000bit burst 50000 limit 101438"
        );
        assert!(shaping("l3", &Shape::default(), false).is_empty());
    }

    #[test]
    fn delay_goes_to_netem_or_is_left_to_the_emulator() {
        let s = Shape {
            rate_bps: Some(30_000_000),
            delay: std::time::Duration::from_millis(20),
            queue_packets: Some(100),
            ..Shape::default()
        };
        // User-space backend: tbf alone here; the emulator delays.
        let cmds = shaping("l1", &s, false);
        assert_eq!(cmds.len(), 1);
        assert!(
            cmds[0]
                .join(" ")
                .starts_with("qdisc add dev l1 root tbf rate 30000000bit")
        );
        // netem backend: netem at the root with the same line limit, tbf as its child.
        let cmds = shaping("l1", &s, true);
        assert_eq!(
            cmds[0].join(" "),
            format!(
                "qdisc add dev l1 root handle 1: netem delay 20000us 0us limit {}",
                crate::emulator::line_limit(&s)
            )
        );
        assert!(
            cmds[1]
                .join(" ")
                .starts_with("qdisc add dev l1 parent 1: handle 2: tbf rate 30000000bit")
        );
    }

    #[test]
    fn backends_parse_and_link_namespaces_cannot_be_node_names() {
        assert_eq!("userspace".parse::<Backend>(), Ok(Backend::Userspace));
        assert_eq!("auto".parse::<Backend>(), Ok(Backend::Auto));
        assert!(
            "tc".parse::<Backend>()
                .unwrap_err()
                .to_string()
                .contains("auto, netem or userspace")
        );
        let name = link_ns_name("port", 11);
        assert_eq!(name, "fl-port-link.11");
        let node = name.strip_prefix("fl-port-").unwrap();
        let t = format!("name = \"port\"\nhosts = [\"{node}\"]\n");
        assert!(Topology::parse(&t).is_err());
    }

    #[test]
    fn every_node_gets_addresses_and_routes_to_every_subnet() {
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../topologies/portfolio.toml"),
        )
        .unwrap();
        let t = Topology::parse(&text).unwrap();
        let plan = Plan::of(&t);
        let ifs = interfaces(&plan);
        // Every member of every segment has exactly one interface there.
        let members: usize = plan.segments.iter().map(|s| s.members.len()).sum();
        assert_eq!(ifs.len(), members);
        let h1 = ifs.iter().find(|(n, _, _)| n == "h1").unwrap();
        assert_eq!((h1.1, h1.2.as_str()), ([10, 0, 1, 1], "l0"));
        let r = routes(&plan);
        // h1 reaches h9's subnet through r1 (10.0.1.4, its switch segment).
        assert!(
            r.contains(&("h1".into(), "10.0.5.0/24".into(), "10.0.1.4".into())),
            "{r:?}"
        );
        // r1 reaches it through r2 on L1.
        assert!(
            r.contains(&("r1".into(), "10.0.5.0/24".into(), "10.0.6.2".into())),
            "{r:?}"
        );
        // 8 segments: each of the 13 non-switch nodes routes to those it is not on.
        let on: usize = members;
        assert_eq!(r.len(), 13 * 8 - on);
    }
}
