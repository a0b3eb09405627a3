//! Where a process runs, when it runs inside a topology that flowlab brought up, and
//! what that tells about its paths: a `flowlab test` there sizes its `--trace` advice
//! for the path's bottleneck, which it could not learn from a window-limited transfer.

use std::net::Ipv4Addr;
use std::path::Path;

use flowlab_results::diagnose::{PathRate, PathRates};

use crate::build::state;
use crate::topology::{Plan, Topology};

/// The topology that flowlab brought up and the node of it that this process runs in
/// (its network namespace is that node's), if it runs in one. Found by comparing this
/// process's namespace with the topologies' under /run/netns, so it holds however the
/// process got there (`flowlab net exec`, `ip netns exec`).
pub fn here(dir: &Path) -> Option<(Topology, String)> {
    use std::os::unix::fs::MetadataExt;
    let mine = std::fs::metadata("/proc/self/ns/net").ok()?;
    for entry in std::fs::read_dir(crate::netns::DIR).ok()?.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("fl-")) else {
            continue;
        };
        // fl-<topology>-<node>: neither name holds a '-', and link namespaces hold a '.'.
        let Some((topo, node)) = rest.split_once('-') else {
            continue;
        };
        if node.contains('.') {
            continue;
        }
        let Ok(m) = std::fs::metadata(entry.path()) else {
            continue;
        };
        if (m.dev(), m.ino()) == (mine.dev(), mine.ino()) {
            let t = state(dir, topo)?.topology?;
            return t.nodes.contains_key(node).then(|| (t, node.to_string()));
        }
    }
    None
}

/// The bottleneck each way between `node` of `t` and the node holding `peer`, as the
/// diagnosis words it.
pub fn path_rates(t: &Topology, node: &str, peer: Ipv4Addr) -> PathRates {
    let plan = Plan::of(t);
    let Some(other) = plan.node_at(peer) else {
        return PathRates::default();
    };
    let rate = |from: &str, to: &str| {
        let bps = plan.path(from, to)?.bottleneck_bps?;
        Some(PathRate {
            bps,
            source: format!("the bottleneck of topology {}, {from} → {to}", t.name),
        })
    };
    PathRates {
        up: rate(node, other),
        down: rate(other, node),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_direction_gets_its_own_bottleneck() {
        let t = Topology::parse(
            "name = \"t\"\nhosts = [\"h1\", \"h2\"]\nrouters = [\"r1\"]\n\
             [[link]]\nends = [\"h1\", \"r1\"]\nrate = \"50M\"\nreverse = { rate = \"10M\" }\n\
             [[link]]\nends = [\"r1\", \"h2\"]\n",
        )
        .expect("topology");
        let plan = Plan::of(&t);
        let h2 = plan
            .segments
            .iter()
            .flat_map(|s| s.members.iter())
            .find(|(n, _)| n == "h2")
            .map(|(_, a)| Ipv4Addr::from(*a))
            .expect("h2's address");
        let r = path_rates(&t, "h1", h2);
        assert_eq!(r.up.as_ref().map(|r| r.bps), Some(50_000_000));
        assert_eq!(r.down.as_ref().map(|r| r.bps), Some(10_000_000));
        assert_eq!(
            r.up.map(|r| r.source).as_deref(),
            Some("the bottleneck of topology t, h1 → h2")
        );
        // An address outside the topology tells nothing.
        assert!(path_rates(&t, "h1", Ipv4Addr::LOCALHOST).is_empty());
    }
}
