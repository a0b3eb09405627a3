//! Which pairs a check measures, and the address each is measured at.

use flowlab_net::topology::{Kind, Topology};
use flowlab_proto::params::MAX_PARALLEL;

use crate::Error;

/// One pair to measure: from, to, parallel connections.
#[derive(Debug, Clone, PartialEq)]
pub struct Pair {
    pub from: String,
    pub to: String,
    pub connections: u32,
}

/// The pairs `--pairs` names (every pair of hosts without it), checked against `t`.
pub fn parse(list: Option<&str>, t: &Topology) -> Result<Vec<Pair>, Error> {
    let hosts: Vec<String> = t.hosts().cloned().collect();
    let Some(list) = list else {
        return Ok(hosts
            .iter()
            .enumerate()
            .flat_map(|(i, a)| {
                hosts[i + 1..].iter().map(move |b| Pair {
                    from: a.clone(),
                    to: b.clone(),
                    connections: 1,
                })
            })
            .collect());
    };
    list.split(',')
        .map(|p| {
            let (ends, n) = match p.split_once(':') {
                Some((ends, n)) => (
                    ends,
                    n.parse::<u32>()
                        .ok()
                        .filter(|n| (1..=MAX_PARALLEL).contains(&u64::from(*n)))
                        .ok_or_else(|| {
                            Error::Failed(format!(
                                "--pairs: '{p}': connections are 1 to {MAX_PARALLEL}"
                            ))
                        })?,
                ),
                None => (p, 1),
            };
            let (a, b) = ends
                .split_once('-')
                .ok_or_else(|| Error::Failed(format!("--pairs: '{p}' is not A-B or A-B:N")))?;
            for n in [a, b] {
                match t.nodes.get(n) {
                    Some(Kind::Host | Kind::Router) => {}
                    Some(Kind::Switch) => {
                        return Err(Error::Failed(format!(
                            "--pairs: '{n}' is a switch (it has no address)"
                        )));
                    }
                    None => {
                        return Err(Error::Failed(format!(
                            "--pairs: '{n}' is not a node of {}",
                            t.name
                        )));
                    }
                }
            }
            if a == b {
                return Err(Error::Failed(format!(
                    "--pairs: '{p}' has the same node at both ends"
                )));
            }
            Ok(Pair {
                from: a.to_string(),
                to: b.to_string(),
                connections: n,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowlab_net::topology::Plan;
    use std::net::Ipv4Addr;

    fn portfolio() -> Topology {
        let text = include_str!("../../../../topologies/portfolio.toml");
        Topology::parse(text).expect("portfolio parses")
    }

    #[test]
    fn pairs_take_hosts_and_routers_with_optional_connections() {
        let t = portfolio();
        let p = parse(Some("h1-h4:2,r1-r2"), &t).expect("pairs");
        assert_eq!(
            p,
            [
                Pair {
                    from: "h1".into(),
                    to: "h4".into(),
                    connections: 2
                },
                Pair {
                    from: "r1".into(),
                    to: "r2".into(),
                    connections: 1
                },
            ]
        );
        // Every pair of the nine hosts by default.
        assert_eq!(parse(None, &t).expect("all").len(), 36);
        for (bad, says) in [
            ("h1-s1", "'s1' is a switch"),
            ("h1-x9", "'x9' is not a node of port"),
            ("h1", "'h1' is not A-B or A-B:N"),
            ("h1-h4:0", "connections are 1 to 128"),
            ("h1-h4:x", "connections are 1 to 128"),
            ("h1-h1", "same node at both ends"),
        ] {
            let e = parse(Some(bad), &t).expect_err(bad).to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn a_router_is_reached_at_its_address_on_the_arriving_link() {
        let t = portfolio();
        let plan = Plan::of(&t);
        let at = |a: &str, b: &str| plan.address_towards(&plan.path(a, b).expect("path"));
        // r1 → r2 arrives over L1 (10.0.6.0/24, r1 .1, r2 .2); r3 → r2 over L2.
        assert_eq!(at("r1", "r2"), Some(Ipv4Addr::new(10, 0, 6, 2)));
        assert_eq!(at("r3", "r2"), Some(Ipv4Addr::new(10, 0, 7, 1)));
        // A host behind a switch: its address on the switch's segment.
        assert_eq!(at("h1", "h4"), Some(Ipv4Addr::new(10, 0, 2, 1)));
    }
}
