//! Addresses, routes and neighbour entries of a topology's nodes, from its plan.

use std::process::Command;

use crate::topology::{Kind, Plan, Topology};

use super::{NetError, ns_name, run};

/// Every node interface with an address: (node, address, device).
pub fn interfaces(plan: &Plan<'_>) -> Vec<(String, [u8; 4], String)> {
    segment_interfaces(plan).into_iter().flatten().collect()
}

/// The hosts file of a topology's namespaces: localhost, then every node at each of its
/// addresses (a router has one per segment), so that a command run with `net exec` can
/// name a node (`flowlab test h4`): `ip netns exec` mounts `/etc/netns/NS/hosts` over
/// `/etc/hosts`.
pub fn hosts_file(plan: &Plan<'_>) -> String {
    let mut out = format!(
        "# flowlab net up {}: every node of the topology (removed by net down)\n\
         127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
        plan.topology.name
    );
    for (node, addr, _) in interfaces(plan) {
        out += &format!("{}\t{node}\n", std::net::Ipv4Addr::from(addr));
    }
    out
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
pub(super) fn mac(ns: &str, dev: &str) -> Result<String, NetError> {
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
pub(super) fn static_neighbours(t: &Topology, plan: &Plan<'_>) -> Result<(), NetError> {
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

/// A multi-homed host's routes for the packets from one of its addresses: they leave by
/// that address's own link (as a phone's Wi-Fi address uses its Wi-Fi), so MPTCP's
/// subflows from each address take each path, and so does a socket bound to one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceRoutes {
    pub node: String,
    pub address: std::net::Ipv4Addr,
    pub dev: String,
    /// The routing table (`ip rule add from ADDRESS table TABLE`): 100 + the address's
    /// place among the host's.
    pub table: u32,
    /// Its own segment's subnet (reached directly), then every other subnet reachable
    /// through that link, with the next hop there: ("10.x.y.0/24", next hop).
    pub connected: String,
    pub via: Vec<(String, std::net::Ipv4Addr)>,
}

/// [`SourceRoutes`] of every multi-homed host, each address in turn.
pub fn source_routes(plan: &Plan<'_>) -> Vec<SourceRoutes> {
    let t = plan.topology;
    let subnet = |s: &crate::topology::Segment| {
        format!("{}.{}.{}.0/24", s.subnet[0], s.subnet[1], s.subnet[2])
    };
    let mut out = Vec::new();
    let all = interfaces(plan);
    for host in t.multi_homed() {
        let mine: Vec<&(String, [u8; 4], String)> =
            all.iter().filter(|(n, ..)| n == host).collect();
        for (k, (_, addr, dev)) in mine.iter().enumerate() {
            let link: usize = dev[1..].parse().expect("devices are l<index>");
            let Some(own) = plan
                .segments
                .iter()
                .find(|s| s.members.iter().any(|(n, a)| n == host && a == addr))
            else {
                continue;
            };
            let mut via = Vec::new();
            for seg in &plan.segments {
                if std::ptr::eq(seg, own) {
                    continue;
                }
                let best = seg
                    .members
                    .iter()
                    .filter(|(m, _)| m != host)
                    .filter_map(|(m, _)| plan.path_through(host, m, link))
                    .min_by_key(|p| (p.hops.len(), p.rtt));
                let next = best
                    .as_ref()
                    .and_then(|p| p.nodes.iter().skip(1).find(|n| t.nodes[*n] != Kind::Switch));
                let hop = next.and_then(|n| own.members.iter().find(|(m, _)| m == n));
                if let Some((_, a)) = hop {
                    via.push((subnet(seg), std::net::Ipv4Addr::from(*a)));
                }
            }
            out.push(SourceRoutes {
                node: host.to_string(),
                address: std::net::Ipv4Addr::from(*addr),
                dev: dev.clone(),
                table: 100 + k as u32,
                connected: subnet(own),
                via,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // Every addressed interface is a line of the hosts file, under its node's name.
        let hosts = hosts_file(&plan);
        assert!(hosts.contains("\n127.0.0.1\tlocalhost\n"), "{hosts}");
        assert!(hosts.contains("\n10.0.1.1\th1\n"), "{hosts}");
        assert!(hosts.contains("\n10.0.6.2\tr2\n"), "{hosts}");
        assert_eq!(
            hosts.lines().filter(|l| l.starts_with("10.")).count(),
            members
        );
    }

    /// A client with Wi-Fi (via r1) and LTE (via r2), both joined at r3 before the
    /// server: each of its addresses routes every other subnet through its own link,
    /// while the main table takes the shortest path (r1, by name).
    #[test]
    fn each_address_of_a_multi_homed_host_routes_by_its_own_link() {
        let text = "name = \"m\"\nhosts = [\"c\", \"s\"]\nrouters = [\"r1\", \"r2\", \"r3\"]\n\
            [[link]]\nends = [\"c\", \"r1\"]\n[[link]]\nends = [\"c\", \"r2\"]\n\
            [[link]]\nends = [\"r1\", \"r3\"]\n[[link]]\nends = [\"r2\", \"r3\"]\n\
            [[link]]\nends = [\"r3\", \"s\"]\n";
        let t = Topology::parse(text).unwrap();
        let plan = Plan::of(&t);
        let r = routes(&plan);
        assert!(
            r.contains(&("c".into(), "10.0.5.0/24".into(), "10.0.1.2".into())),
            "{r:?}"
        );
        let tables = source_routes(&plan);
        assert_eq!(tables.len(), 2, "{tables:?}");
        let lte = &tables[1];
        assert_eq!(
            (lte.node.as_str(), lte.address, lte.dev.as_str(), lte.table),
            ("c", std::net::Ipv4Addr::new(10, 0, 2, 1), "l1", 101)
        );
        assert_eq!(lte.connected, "10.0.2.0/24");
        let r2 = std::net::Ipv4Addr::new(10, 0, 2, 2);
        // Every other subnet, the Wi-Fi's own among them, through r2.
        let mut want: Vec<(String, std::net::Ipv4Addr)> = ["10.0.1.0/24", "10.0.3.0/24"]
            .into_iter()
            .chain(["10.0.4.0/24", "10.0.5.0/24"])
            .map(|s| (s.to_string(), r2))
            .collect();
        want.sort();
        let mut got = lte.via.clone();
        got.sort();
        assert_eq!(got, want);
        assert_eq!(tables[0].table, 100);
        assert!(
            tables[0]
                .via
                .iter()
                .all(|(_, v)| *v == std::net::Ipv4Addr::new(10, 0, 1, 2))
        );
        // A host of one link has no table of its own.
        assert!(tables.iter().all(|t| t.node == "c"));
    }
}
