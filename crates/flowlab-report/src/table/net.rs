//! `flowlab net`'s tables: the plan (`show`), what is up (`up`, `down`, `status`).

use std::fmt::Write as _;

use crate::units::{Rate, UnitFormat};
use flowlab_results::net::{Built, Shape, TopologyStatus};

/// One direction of a link as the file shapes it: "50.0 Mbits/sec, delay 10 ms, queue
/// 100 packets, loss 0.5 %" (`net show`'s lines, and its drawing's labels).
pub fn shape_text(s: &Shape) -> String {
    let mut v = Vec::new();
    if let Some(r) = s.rate_bps {
        v.push(Rate(r as f64, UnitFormat::Adaptive).to_string());
    }
    v.push(format!(
        "delay {} ms",
        short(s.delay.as_secs_f64() * 1000.0, 3)
    ));
    if !s.jitter.is_zero() {
        v.push(format!(
            "jitter {} ms",
            short(s.jitter.as_secs_f64() * 1000.0, 3)
        ));
    }
    if let Some(q) = s.queue_packets {
        v.push(format!("queue {q} packets"));
    }
    if let Some(q) = s.queue_bytes {
        v.push(format!("queue {q} bytes"));
    }
    if s.loss > 0.0 {
        v.push(format!("loss {} %", short(s.loss * 100.0, 4)));
    }
    v.join(", ")
}

/// `flowlab net show`: subnets and addresses, then what each host pair's path implies.
pub fn net_plan(p: &flowlab_results::net::PlanSummary) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "topology {}: {}, {}, {}, {}",
        p.name,
        super::count(p.hosts, "host", "hosts"),
        super::count(p.routers, "router", "routers"),
        super::count(p.switches, "switch", "switches"),
        super::count(p.links, "link", "links")
    );
    for s in &p.subnets {
        let members: Vec<String> = s.members.iter().map(|(n, a)| format!("{n} {a}")).collect();
        let _ = writeln!(
            out,
            "  {}.{}.{}.0/24  {}",
            s.prefix[0],
            s.prefix[1],
            s.prefix[2],
            members.join(", ")
        );
    }
    for d in &p.shaped {
        let shape = match &d.trace {
            Some(t) => {
                let mean = d.shape.rate_bps.unwrap_or(0) as f64;
                let rest = shape_text(&flowlab_results::net::Shape {
                    rate_bps: None,
                    ..d.shape
                });
                format!(
                    "trace {t} (mean {}), {rest}",
                    Rate(mean, UnitFormat::Adaptive)
                )
            }
            None => shape_text(&d.shape),
        };
        let policy = d
            .queue_policy
            .as_ref()
            .map_or(String::new(), |p| format!(", {p}"));
        let _ = writeln!(
            out,
            "  link {} {} -> {}: {shape}{policy}",
            d.link, d.from, d.to
        );
    }
    for sch in &p.schedules {
        let steps: Vec<String> = sch
            .steps
            .iter()
            .map(|(at, said)| format!("at {} s {said}", short(at.as_secs_f64(), 6)))
            .collect();
        let again = sch.repeat.map_or(String::new(), |r| {
            format!(
                "; again every {} s, from the file's values",
                short(r.as_secs_f64(), 6)
            )
        });
        let _ = writeln!(
            out,
            "  schedule of {}: {}{again}",
            sch.link,
            steps.join("; ")
        );
    }
    for m in &p.media {
        let fairness = match m.fairness.as_str() {
            "airtime" => "downlink shared by air time",
            _ => "downlink shared by frames",
        };
        let _ = writeln!(
            out,
            "  medium {}: {}, access point {}, {fairness}, queues of {} frames",
            m.name, m.standard, m.ap, m.queue
        );
        let tcp = if m.busy.is_some() {
            "TCP up/down"
        } else {
            "TCP alone up/down"
        };
        let _ = writeln!(
            out,
            "    {:<8} {:>17}  {:>19}  {:>19}",
            "station", "PHY up/down", tcp, "all busy up/down"
        );
        for s in &m.stations {
            let pair = |up: f64, down: f64| format!("{}/{} Mbit/s", mbit(up), mbit(down));
            let _ = writeln!(
                out,
                "    {:<8} {:>17}  {:>19}  {:>19}",
                s.host,
                pair(s.up_phy_bps as f64, s.down_phy_bps as f64),
                pair(s.tcp_up_bps, s.tcp_down_bps),
                pair(s.busy_up_bps, s.busy_down_bps)
            );
        }
        if let Some(b) = &m.busy {
            let _ = writeln!(
                out,
                "    and {} busy station{} at {} Mbit/s, always sending to the access point \
                 ({} Mbit/s each when all are busy); TCP beside them",
                b.count,
                if b.count == 1 { "" } else { "s" },
                mbit(b.phy_bps as f64),
                mbit(b.busy_up_bps)
            );
        }
    }
    for h in &p.multi_homed {
        let addresses: Vec<String> = p
            .subnets
            .iter()
            .flat_map(|s| s.members.iter())
            .filter(|(n, _)| n == h)
            .map(|(_, a)| a.to_string())
            .collect();
        let _ = writeln!(
            out,
            "  host {h} is multi-homed ({}): each address's packets leave by its own link",
            addresses.join(", ")
        );
    }
    if let Some(m) = &p.mptcp {
        let endpoints = if m.endpoint_flags.is_empty() || p.multi_homed.is_empty() {
            "no endpoints".to_string()
        } else {
            format!(
                "every address of {} an endpoint ({})",
                p.multi_homed.join(", "),
                m.endpoint_flags.join(" ")
            )
        };
        let _ = writeln!(
            out,
            "  MPTCP on every host: up to {} more subflows a connection, {} announced addresses taken; {endpoints}",
            m.subflows, m.add_addr_accepted
        );
    }
    if !p.all_paths && p.paths.is_empty() {
        let _ = writeln!(
            out,
            "{} pairs of hosts: too many to list; name two hosts to see their path \
             (flowlab net show FILE HOST HOST)",
            p.host_pairs
        );
        return out;
    }
    let _ = writeln!(
        out,
        "{}",
        if p.media.is_empty() {
            "paths (RTT = one-way delays there and back, rate = slowest link):"
        } else {
            "paths (RTT = one-way delays and a small packet's time on the air there and back, rate = slowest link, a medium's hops as one):"
        }
    );
    for path in &p.paths {
        let rate = path.bottleneck_bps.map_or("unlimited".to_string(), |r| {
            Rate(r as f64, UnitFormat::Adaptive).to_string()
        });
        let _ = writeln!(
            out,
            "  {:>6} - {:<6} RTT {:>6.1} ms  {rate:>16}  via {}",
            path.from,
            path.to,
            path.rtt.as_secs_f64() * 1000.0,
            path.nodes.join(" ")
        );
    }
    out
}

/// Bits per second as Mbit/s to three significant figures ("0.768", "5.2", "224").
fn mbit(bps: f64) -> String {
    let m = bps / 1e6;
    let digits = if m >= 100.0 {
        0
    } else if m >= 10.0 {
        1
    } else if m >= 1.0 {
        2
    } else {
        3
    };
    short(m, digits)
}

/// `x` with at most `digits` decimals and no trailing zeros ("10", "0.25", "7"): what a
/// topology file said, without the float's rounding noise (0.07 × 100 = 7.000000000000001).
fn short(x: f64, digits: usize) -> String {
    let s = format!("{x:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// How a topology was built, in a few words.
fn built(b: &Built) -> String {
    match b {
        Built::Unknown => "still building, or its up failed".to_string(),
        Built::TbfOnly => "rate and queue by tbf, no delay or loss to emulate".to_string(),
        Built::Emulated {
            backend,
            emulator_pid: Some(pid),
            emulator_running: false,
            links,
            ..
        } => format!(
            "{backend} backend, but its emulator (pid {pid}) is not running: links {} carry nothing (flowlab net down, then up again)",
            links.join(", ")
        ),
        Built::Emulated {
            backend,
            emulator_pid: Some(pid),
            links,
            cpus_kept_awake,
            ..
        } => format!(
            "{backend} backend (emulator pid {pid}, links {}{})",
            links.join(", "),
            if *cpus_kept_awake {
                "; CPUs kept awake"
            } else {
                ""
            }
        ),
        Built::Emulated { backend, .. } => format!("{backend} backend"),
    }
}

/// `flowlab net up`: what is up and how to use it.
pub fn net_up(name: &str, nodes: usize, how: &Built) -> String {
    format!(
        "topology {name} is up: {nodes} nodes, {} (flowlab net exec NODE -- CMD; flowlab net down {name})\n",
        built(how)
    )
}

/// One direction of a link changed by `flowlab net set`: its ends, and its shape before
/// and after.
#[derive(Debug, Clone, Copy)]
pub struct SetDirection<'a> {
    pub from: &'a str,
    pub to: &'a str,
    pub before: &'a Shape,
    pub after: &'a Shape,
}

/// `flowlab net set`: each direction of the link as it was and as it is now.
pub fn net_set(topology: &str, link: &str, directions: &[SetDirection<'_>]) -> String {
    let mut out = format!("topology {topology}, link {link} changed:\n");
    for d in directions {
        let (was, now) = (shape_text(d.before), shape_text(d.after));
        if was == now {
            let _ = writeln!(out, "  {} → {}: {now} (as it was)", d.from, d.to);
        } else {
            let _ = writeln!(out, "  {} → {}: {now} (was {was})", d.from, d.to);
        }
    }
    out
}

/// `flowlab net set` on a station's hop of a shared medium (access point `ap`): its PHY
/// rates as they were and are, and what TCP now gets alone and with every station busy.
pub fn net_set_station(
    topology: &str,
    link: &str,
    ap: &str,
    before: &flowlab_results::net::StationExpected,
    after: &flowlab_results::net::StationExpected,
) -> String {
    let pair = |up: f64, down: f64| format!("{}/{} Mbit/s", mbit(up), mbit(down));
    let phy = |s: &flowlab_results::net::StationExpected| {
        pair(s.up_phy_bps as f64, s.down_phy_bps as f64)
    };
    format!(
        "topology {topology}, link {link} changed: station {} to access point {ap}, \
         PHY rate up/down {} (was {})\n  TCP alone up/down {} (was {}); all busy {} (was {})\n",
        after.host,
        phy(after),
        phy(before),
        pair(after.tcp_up_bps, after.tcp_down_bps),
        pair(before.tcp_up_bps, before.tcp_down_bps),
        pair(after.busy_up_bps, after.busy_down_bps),
        pair(before.busy_up_bps, before.busy_down_bps),
    )
}

/// What `flowlab net set` says of a bucket it kept larger than the new rate's.
pub fn kept_bucket_note(link: &str, k: &flowlab_results::net::KeptBucket) -> String {
    format!(
        "link {link}, {} → {}: tbf's bucket stays {} bytes (10 ms at {} would be {}): a smaller one would strand the longer packets it may hold, so after an idle moment up to {} bytes pass at once",
        k.from,
        k.to,
        k.bytes,
        Rate(k.rate_bps as f64, UnitFormat::Adaptive),
        k.bucket_at_rate,
        k.bytes
    )
}

/// `flowlab net down`.
pub fn net_down(name: &str, namespaces_removed: usize) -> String {
    format!("topology {name}: removed {namespaces_removed} namespaces\n")
}

/// `flowlab net status`: each topology that is up, how it was built, its namespaces, and
/// what its user-space emulator did per link and direction.
pub fn net_status(up: &[TopologyStatus]) -> String {
    let mut out = String::new();
    if up.is_empty() {
        out += "no topology is up\n";
    }
    for t in up {
        let _ = writeln!(out, "{}: {}", t.name, built(&t.built));
        let _ = writeln!(out, "  namespaces: {}", t.namespaces.join(" "));
        for d in &t.emulated {
            let _ = writeln!(
                out,
                "  link {} {}: {} forwarded{}, {} lost (random), {} line full, {} emulator drops, {} oversize, mean lateness {:.0} µs, {} late (worst {} µs), written {:.0} µs early for the cost of sending{}{}{}",
                d.link,
                d.way,
                d.forwarded,
                // An emulator of an older flowlab does not count bytes.
                if d.forwarded_bytes > 0 {
                    format!(" (mean {} B)", d.forwarded_bytes / d.forwarded.max(1))
                } else {
                    String::new()
                },
                d.lost,
                d.line_full,
                d.emulator_drops,
                d.oversize,
                d.mean_late_us,
                d.late,
                d.max_late_us,
                d.send_cost_us,
                d.unused_opportunities.map_or(String::new(), |n| format!(
                    ", {n} trace opportunities unused"
                )),
                d.early_drops
                    .filter(|&n| n > 0)
                    .map_or(String::new(), |n| format!(
                        ", {n} dropped early by the queue's policy"
                    )),
                d.airtime_s
                    .map_or(String::new(), |s| format!(", {s:.3} s on the air"))
            );
        }
        for b in &t.busy_air {
            let _ = writeln!(
                out,
                "  medium {}: {} busy stations sent {} packets of {} bytes, {:.3} s on the air",
                b.medium, b.stations, b.packets, b.packet_bytes, b.airtime_s
            );
        }
        if let Some(sch) = &t.schedule {
            let last = sch.last.as_deref().unwrap_or("nothing yet");
            let _ = match (sch.running, sch.done) {
                (true, _) => writeln!(
                    out,
                    "  schedule: pid {} ({}), last: {last}",
                    sch.pid, sch.log
                ),
                (false, true) => writeln!(out, "  schedule: done ({}), last: {last}", sch.log),
                (false, false) => writeln!(
                    out,
                    "  schedule: its process (pid {}) is not running: its links no longer change ({}), last: {last}",
                    sch.pid, sch.log
                ),
            };
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topology_values_print_as_written() {
        assert_eq!(short(0.07 * 100.0, 4), "7");
        assert_eq!(short(0.29 * 100.0, 4), "29");
        assert_eq!(short(0.0125 * 100.0, 4), "1.25");
        assert_eq!(short(10.0, 3), "10");
        assert_eq!(short(0.5, 3), "0.5");
    }
}
