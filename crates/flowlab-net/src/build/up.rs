//! `up`: a topology built in namespaces step by step (nodes, links, shaping, addresses
//! and routes, the emulator); on failure, everything created so far is removed again.

use std::path::Path;

use super::addresses::{hosts_file, interfaces, routes, source_routes, static_neighbours};
use super::files::{lock_changes, record, write_hosts, write_state};
use super::processes::{start_emulator, start_scheduler};
use super::shaping::{needs_emulation, shaping};
use super::{
    Backend, NetError, State, UpOptions, down, link_ns_name, namespaces, netem_available, ns_name,
    prefix, preflight, run,
};
use crate::forward::{EmulatedLink, LineSpec, StationSpec, TraceSpec};
use crate::topology::{Kind, Link, Plan, Topology};
use flowlab_results::net::Shape;

/// Whether link `l` needs more than tbf (delay, jitter or loss, either way, now or at a
/// step of its schedule): netem or the user-space emulator; or only the user-space
/// emulator can carry it (a trace, a shared medium).
pub(super) fn is_emulated(l: &Link) -> bool {
    l.follows_a_trace()
        || l.medium.is_some()
        || l.shapes()
            .iter()
            .any(|(a_to_b, b_to_a)| needs_emulation(a_to_b) || needs_emulation(b_to_a))
}

/// Whether each direction of `l` (a → b, b → a) needs netem, now or at a step of its
/// schedule.
fn netem_ways(l: &Link) -> (bool, bool) {
    l.shapes().iter().fold((false, false), |(a, b), (ab, ba)| {
        (a || needs_emulation(ab), b || needs_emulation(ba))
    })
}

/// Whether some link of `t` needs emulating: without one, `up` starts no emulator (and
/// refuses [`UpOptions::keep_cpus_awake`]).
pub fn has_emulated_links(t: &Topology) -> bool {
    t.links.iter().any(is_emulated)
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
        .filter(|(_, l)| is_emulated(l))
        .map(|(i, _)| i)
        .collect();
    let traced = t.links.iter().find(|l| l.follows_a_trace());
    let backend = if emulated.is_empty() {
        None
    } else {
        Some(match opts.backend {
            // Only the user-space emulator replays a trace or shares a medium's air.
            Backend::Auto if traced.is_some() || !t.media.is_empty() => Backend::Userspace,
            Backend::Netem if traced.is_some() => {
                return Err(NetError::Unsupported(format!(
                    "link {} follows a trace, which only the user-space emulator replays; use --backend userspace (or auto)",
                    traced.map_or("", |l| l.name.as_str())
                )));
            }
            Backend::Netem if !t.media.is_empty() => {
                return Err(NetError::Unsupported(format!(
                    "medium {} is a shared medium, which only the user-space emulator carries; use --backend userspace (or auto)",
                    t.media[0].name
                )));
            }
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
    if opts.keep_cpus_awake && backend != Some(Backend::Userspace) {
        return Err(NetError::Unsupported(match backend {
            None => "--keep-cpus-awake: no link of this topology has delay, jitter or loss, so it has no emulator to keep the CPUs awake for".to_string(),
            Some(b) => format!("--keep-cpus-awake: only the user-space emulator keeps the CPUs awake, and this topology's links would be emulated by {b}; add --backend userspace"),
        }));
    }
    let result = build(t, dir, backend, &emulated, opts);
    if result.is_err() {
        let _ = down(&t.name, dir);
    }
    result
}

/// Builds `t` with delay, jitter and loss on `backend`; `emulated`: the links that need
/// them.
fn build(
    t: &Topology,
    dir: &Path,
    backend: Option<Backend>,
    emulated: &[usize],
    opts: &UpOptions,
) -> Result<State, NetError> {
    add_nodes(t, dir)?;
    let mut links = Vec::new();
    for (i, l) in t.links.iter().enumerate() {
        if backend == Some(Backend::Userspace) && emulated.contains(&i) {
            links.push(add_emulated_link(t, dir, i, l, opts.link_logs.as_deref())?);
        } else {
            add_veth(t, i, l)?;
        }
        attach_and_shape(t, i, l, backend == Some(Backend::Netem))?;
    }
    address_and_route(t)?;
    let mut state = State {
        backend,
        emulator_pid: None,
        emulated_links: links.iter().map(|l| l.name.clone()).collect(),
        topology: Some(t.clone()),
        built: t
            .links
            .iter()
            .any(|l| !l.schedule.is_empty())
            .then(|| t.clone()),
        cpus_kept_awake: false,
        kept_buckets: Default::default(),
        scheduler_pid: None,
    };
    if !links.is_empty() {
        state.emulator_pid = Some(start_emulator(&t.name, dir, &links, opts)?);
        state.cpus_kept_awake = opts.keep_cpus_awake;
    }
    await_carriers(&t.name)?;
    write_state(dir, &t.name, &state)?;
    // The schedule last, once everything it changes is there: its times count from here.
    if t.links.iter().any(|l| !l.schedule.is_empty()) {
        // Its first change waits for its pid to be recorded.
        let _recording = lock_changes(dir, &t.name)?;
        state.scheduler_pid = Some(start_scheduler(&t.name, dir, &opts.emulator)?);
        write_state(dir, &t.name, &state)?;
    }
    Ok(state)
}

/// How long every interface of a topology is given to carry once it is built.
const CARRIER_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Waits until every interface of topology `topo` is up with its carrier and every
/// switch's port forwards. The kernel tells the bridge of a port's carrier through its
/// link watch, which may hold the news up to a second: until then the port drops what
/// it is given, and a test started at once (the emulator's veths come up last) lost
/// every packet of its first second.
fn await_carriers(topo: &str) -> Result<(), NetError> {
    let ours: Vec<String> = namespaces()
        .into_iter()
        .filter(|n| n.starts_with(&prefix(topo)))
        .collect();
    let started = std::time::Instant::now();
    loop {
        let mut waiting = None;
        for ns in &ours {
            let shown = run("ip", &["-n", ns, "-d", "-j", "link", "show"])?;
            let devices: Vec<serde_json::Value> = serde_json::from_str(&shown).unwrap_or_default();
            waiting = devices.iter().find_map(|d| {
                let name = d["ifname"].as_str().unwrap_or("?");
                let state = d["operstate"].as_str().unwrap_or("");
                let port = d["linkinfo"]["info_slave_data"]["state"].as_str();
                let ready =
                    name == "lo" || (state == "UP" && port.is_none_or(|p| p == "forwarding"));
                (!ready).then(|| {
                    format!(
                        "{name} in {ns}: {}{}",
                        state.to_lowercase(),
                        port.map_or(String::new(), |p| format!(", port {p}"))
                    )
                })
            });
            if waiting.is_some() {
                break;
            }
        }
        let Some(what) = waiting else {
            return Ok(());
        };
        if started.elapsed() > CARRIER_WAIT {
            return Err(NetError::Unsupported(format!(
                "interface {what} after {} s: the topology does not carry",
                CARRIER_WAIT.as_secs()
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A namespace per node (recorded before it is made), loopback up; a bridge in each
/// switch; forwarding on in each router.
fn add_nodes(t: &Topology, dir: &Path) -> Result<(), NetError> {
    let ns = |n: &str| ns_name(&t.name, n);
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
    Ok(())
}

/// Link `i` as one veth pair, `l<i>` at both ends.
fn add_veth(t: &Topology, i: usize, l: &Link) -> Result<(), NetError> {
    let dev = format!("l{i}");
    let (na, nb) = (ns_name(&t.name, &l.a), ns_name(&t.name, &l.b));
    run(
        "ip",
        &[
            "link", "add", "name", &dev, "netns", &na, "type", "veth", "peer", "name", &dev,
            "netns", &nb,
        ],
    )?;
    Ok(())
}

/// Link `i` through a middle namespace for the user-space emulator: a's `l<i>` ⇄ `a` in
/// the middle ⇄ emulator ⇄ `b` in the middle ⇄ b's `l<i>`. Returns what the emulator is
/// to forward.
fn add_emulated_link(
    t: &Topology,
    dir: &Path,
    i: usize,
    l: &Link,
    logs: Option<&Path>,
) -> Result<EmulatedLink, NetError> {
    let dev = format!("l{i}");
    let (na, nb) = (ns_name(&t.name, &l.a), ns_name(&t.name, &l.b));
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
            "link", "add", "name", "b", "netns", &mid, "type", "veth", "peer", "name", &dev,
            "netns", &nb,
        ],
    )?;
    for end in ["a", "b"] {
        let _ = crate::netns::run_in(&mid, move || crate::netns::no_gro(end));
        run("ip", &["-n", &mid, "link", "set", "dev", end, "up"])?;
    }
    let (a_to_b, b_to_a) = (LineSpec::of(&l.a_to_b), LineSpec::of(&l.b_to_a));
    // Super-frames only where no step of its schedule loses or reorders frames either,
    // and no trace counts its opportunities in packets of the MTU.
    let gso = !l.follows_a_trace()
        && l.medium.is_none()
        && l.shapes()
            .iter()
            .all(|(ab, ba)| EmulatedLink::gso_fits(&LineSpec::of(ab), &LineSpec::of(ba)));
    // A link that loses or reorders frames gets them cut to the MTU before the emulator;
    // one without keeps the nodes' offloads and carries super-frames.
    for n in [&na, &nb] {
        if gso {
            break;
        }
        let d = dev.clone();
        crate::netns::run_in(n, move || crate::netns::complete_frames(&d)).map_err(|e| {
            NetError::Command {
                command: format!("ethtool -K {dev} tx off (in {n})"),
                message: e.to_string(),
            }
        })?;
    }
    let trace =
        |t: &Option<crate::topology::LinkTrace>, s: &flowlab_results::net::Shape, way: &str| {
            t.as_ref().map(|t| TraceSpec {
                file: t.path.clone(),
                queue_packets: s.queue_packets,
                queue_bytes: s.queue_bytes,
                policy: t.policy,
                log: logs.map(|d| d.join(log_name(&l.name, way))),
            })
        };
    Ok(EmulatedLink {
        name: l.name.clone(),
        namespace: mid,
        a: "a".into(),
        b: "b".into(),
        a_to_b,
        b_to_a,
        gso,
        a_to_b_trace: trace(&l.a_to_b_trace, &l.a_to_b, "a-b"),
        b_to_a_trace: trace(&l.b_to_a_trace, &l.b_to_a, "b-a"),
        station: station(t, l),
    })
}

/// The file a trace-driven direction `way` ("a-b") of link `link` logs to: the link's
/// name with anything but letters, digits, '-' and '.' as '-'.
pub fn log_name(link: &str, way: &str) -> String {
    let safe: String = link
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("{safe}.{way}.log")
}

/// What the emulator needs of link `l` if it is a station's hop on a shared medium.
fn station(t: &Topology, l: &Link) -> Option<StationSpec> {
    let (m, s) = t.station_of(l)?;
    Some(StationSpec {
        medium: m.name.clone(),
        standard: m.standard.clone(),
        fairness: m.fairness,
        queue: m.queue,
        up_bps: s.up_bps,
        down_bps: s.down_bps,
        busy: m.busy,
    })
}

/// Link `i`'s ends up (on their switch's bridge where an end is a switch), each
/// direction shaped on its sending end (with netem too when `netem`).
fn attach_and_shape(t: &Topology, i: usize, l: &Link, netem: bool) -> Result<(), NetError> {
    let dev = format!("l{i}");
    let (na, nb) = (ns_name(&t.name, &l.a), ns_name(&t.name, &l.b));
    for (node, n) in [(&l.a, &na), (&l.b, &nb)] {
        if t.nodes[node] == Kind::Switch {
            run(
                "ip",
                &["-n", n, "link", "set", "dev", &dev, "master", "br0"],
            )?;
        }
        run("ip", &["-n", n, "link", "set", "dev", &dev, "up"])?;
    }
    let (netem_ab, netem_ba) = netem_ways(l);
    // A direction that follows a trace, or crosses a shared medium's air, gets its
    // rate and queue from the emulator.
    let own = |s: &Shape, traced: bool| {
        if traced || l.medium.is_some() {
            Shape::default()
        } else {
            *s
        }
    };
    for (s, n, netem_root) in [
        (
            own(&l.a_to_b, l.a_to_b_trace.is_some()),
            &na,
            netem && netem_ab,
        ),
        (
            own(&l.b_to_a, l.b_to_a_trace.is_some()),
            &nb,
            netem && netem_ba,
        ),
    ] {
        for cmd in shaping(&dev, &s, netem_root) {
            let mut args = vec!["-n", n.as_str()];
            args.extend(cmd.iter().map(String::as_str));
            run("tc", &args)?;
        }
    }
    Ok(())
}

/// Every interface's address, every node's routes, static neighbour entries, and the
/// hosts file that names every node.
fn address_and_route(t: &Topology) -> Result<(), NetError> {
    let ns = |n: &str| ns_name(&t.name, n);
    let plan = Plan::of(t);
    let hosts = hosts_file(&plan);
    for n in t.nodes.keys() {
        write_hosts(&ns(n), &hosts)?;
    }
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
    for r in source_routes(&plan) {
        let (n, table, from) = (ns(&r.node), r.table.to_string(), r.address.to_string());
        run(
            "ip",
            &[
                "-n",
                &n,
                "route",
                "add",
                &r.connected,
                "dev",
                &r.dev,
                "src",
                &from,
                "table",
                &table,
            ],
        )?;
        for (subnet, via) in &r.via {
            let via = via.to_string();
            run(
                "ip",
                &[
                    "-n", &n, "route", "add", subnet, "via", &via, "dev", &r.dev, "table", &table,
                ],
            )?;
        }
        run(
            "ip",
            &["-n", &n, "rule", "add", "from", &from, "table", &table],
        )?;
    }
    mptcp_path_manager(t, &plan)?;
    static_neighbours(t, &plan)
}

/// MPTCP's in-kernel path manager as the topology sets it ([`Topology::mptcp`]): the
/// limits on every host, an endpoint on each address of a multi-homed host. A file's
/// `[mptcp]` table on a kernel without MPTCP is refused; multi-homed hosts alone are
/// built without it.
fn mptcp_path_manager(t: &Topology, plan: &Plan<'_>) -> Result<(), NetError> {
    let Some(m) = t.mptcp() else {
        return Ok(());
    };
    if !mptcp_available() {
        return match t.mptcp_table {
            Some(_) => Err(NetError::Unsupported(
                "[mptcp]: this kernel makes no MPTCP socket (built without it, or net.mptcp.enabled = 0)"
                    .into(),
            )),
            None => Ok(()),
        };
    }
    let (subflows, accepted) = (m.subflows.to_string(), m.add_addr_accepted.to_string());
    for h in t.hosts() {
        run(
            "ip",
            &[
                "-n",
                &ns_name(&t.name, h),
                "mptcp",
                "limits",
                "set",
                "subflows",
                &subflows,
                "add_addr_accepted",
                &accepted,
            ],
        )?;
    }
    if m.endpoint_flags.is_empty() {
        return Ok(());
    }
    let multi = t.multi_homed();
    for (node, addr, dev) in interfaces(plan) {
        if !multi.contains(&node.as_str()) {
            continue;
        }
        let n = ns_name(&t.name, &node);
        let a = std::net::Ipv4Addr::from(addr).to_string();
        let mut args = vec!["-n", &n, "mptcp", "endpoint", "add", &a, "dev", &dev];
        args.extend(m.endpoint_flags.iter().map(String::as_str));
        run("ip", &args)?;
    }
    Ok(())
}

/// Whether this kernel makes MPTCP sockets (here, in the caller's namespace).
pub fn mptcp_available() -> bool {
    socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::STREAM,
        Some(socket2::Protocol::MPTCP),
    )
    .is_ok()
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
