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
//! Link emulation: rate and queue with `tbf` (every kernel). Delay, jitter and loss need
//! `netem`; on a kernel without `sch_netem` such links are refused with a clear error
//! (the user-space emulator is the next step).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::topology::{Kind, Plan, Shape, Topology};

/// Bytes a queued packet is counted as when a queue is given in packets.
pub const PACKET_BYTES: u64 = 1514;
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

/// Whether this kernel has `sch_netem` (tried in a scratch namespace).
pub fn netem_available() -> bool {
    let scratch = format!("fl-probe-{}", std::process::id());
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

/// The `tc` arguments that shape one direction of a link on interface `dev`.
pub fn shaping(dev: &str, s: &Shape, netem: bool) -> Result<Vec<Vec<String>>, String> {
    let mut cmds = Vec::new();
    let limit_bytes = s
        .queue_bytes
        .unwrap_or(s.queue_packets.unwrap_or(DEFAULT_QUEUE) * PACKET_BYTES);
    let needs_netem = !s.delay.is_zero() || !s.jitter.is_zero() || s.loss > 0.0;
    let tbf = |parent: &[&str], rate: u64| -> Vec<String> {
        // Burst: a millisecond at the rate, but at least two full packets.
        let burst = (rate / 8 / 1000).max(2 * PACKET_BYTES);
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
    if needs_netem {
        if !netem {
            return Err("needs netem (delay, jitter or loss), which this kernel lacks (no sch_netem); the user-space emulator is not built yet".into());
        }
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
        let packets = limit_bytes / PACKET_BYTES;
        v.extend(["limit".into(), packets.max(1).to_string()]);
        cmds.push(v);
        if let Some(rate) = s.rate_bps {
            cmds.push(tbf(&["parent", "1:", "handle", "2:"], rate));
        }
    } else if let Some(rate) = s.rate_bps {
        cmds.push(tbf(&["root"], rate));
    }
    Ok(cmds)
}

/// Builds `t`. On failure everything created so far is removed again.
pub fn up(t: &Topology, dir: &Path) -> Result<(), NetError> {
    if namespaces().iter().any(|n| n.starts_with(&prefix(&t.name))) {
        return Err(NetError::Exists(t.name.clone()));
    }
    let netem = t.links.iter().any(|l| {
        [l.a_to_b, l.b_to_a]
            .iter()
            .any(|s| !s.delay.is_zero() || !s.jitter.is_zero() || s.loss > 0.0)
    }) && netem_available();
    // Check all shaping before creating anything.
    for l in &t.links {
        for s in [&l.a_to_b, &l.b_to_a] {
            shaping("x", s, netem)
                .map_err(|e| NetError::Unsupported(format!("link {}: {e}", l.name)))?;
        }
    }
    let result = build(t, dir, netem);
    if result.is_err() {
        let _ = down(&t.name, dir);
    }
    result
}

fn build(t: &Topology, dir: &Path, netem: bool) -> Result<(), NetError> {
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
            run(
                "ip",
                &[
                    "netns",
                    "exec",
                    &ns(n),
                    "sysctl",
                    "-qw",
                    "net.ipv4.ip_forward=1",
                ],
            )?;
        }
    }
    for (i, l) in t.links.iter().enumerate() {
        let dev = format!("l{i}");
        let (na, nb) = (ns(&l.a), ns(&l.b));
        run(
            "ip",
            &[
                "link", "add", &dev, "netns", &na, "type", "veth", "peer", "name", &dev, "netns",
                &nb,
            ],
        )?;
        for (node, n) in [(&l.a, &na), (&l.b, &nb)] {
            if t.nodes[node] == Kind::Switch {
                run("ip", &["-n", n, "link", "set", &dev, "master", "br0"])?;
            }
            run("ip", &["-n", n, "link", "set", &dev, "up"])?;
        }
        for (s, n) in [(&l.a_to_b, &na), (&l.b_to_a, &nb)] {
            for cmd in shaping(&dev, s, netem).map_err(NetError::Unsupported)? {
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
    Ok(())
}

/// Every node interface with an address: (node, address, device).
pub fn interfaces(plan: &Plan<'_>) -> Vec<(String, [u8; 4], String)> {
    let t = plan.topology;
    let mut out = Vec::new();
    for seg in &plan.segments {
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
    }
    out
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

/// Removes topology `name`: the namespaces in its state file and any with its prefix.
/// Returns the namespaces removed.
pub fn down(name: &str, dir: &Path) -> Result<Vec<String>, NetError> {
    let path = state_file(dir, name);
    let mut listed: Vec<String> = std::fs::read_to_string(&path)
        .map(|s| s.lines().map(String::from).collect())
        .unwrap_or_default();
    listed.extend(
        namespaces()
            .into_iter()
            .filter(|n| n.starts_with(&prefix(name))),
    );
    listed.sort();
    listed.dedup();
    let existing = namespaces();
    let mut removed = Vec::new();
    for ns in listed {
        if existing.contains(&ns) {
            run("ip", &["netns", "del", &ns])?;
            removed.push(ns);
        }
    }
    let _ = std::fs::remove_file(&path);
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
            if let Some((topo, _)) = rest.split_once('-') {
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
    fn tbf_alone_when_only_rate_and_queue_are_asked() {
        let s = Shape {
            rate_bps: Some(40_000_000),
            queue_packets: Some(67),
            ..Shape::default()
        };
        let cmds = shaping("l3", &s, false).unwrap();
        assert_eq!(cmds.len(), 1);
        assert_eq!(
            cmds[0].join(" "),
            "qdisc add dev l3 root tbf rate 40000000bit burst 5000 limit 101438"
        );
        assert!(shaping("l3", &Shape::default(), false).unwrap().is_empty());
    }

    #[test]
    fn delay_needs_netem_and_says_so() {
        let s = Shape {
            rate_bps: Some(30_000_000),
            delay: std::time::Duration::from_millis(20),
            ..Shape::default()
        };
        let e = shaping("l1", &s, false).unwrap_err();
        assert!(e.contains("netem"), "{e}");
        let cmds = shaping("l1", &s, true).unwrap();
        assert_eq!(
            cmds[0].join(" "),
            "qdisc add dev l1 root handle 1: netem delay 20000us 0us limit 1000"
        );
        assert!(
            cmds[1]
                .join(" ")
                .starts_with("qdisc add dev l1 parent 1: handle 2: tbf rate 30000000bit")
        );
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
