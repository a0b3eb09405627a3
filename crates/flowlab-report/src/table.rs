//! The human-readable tables. A test's: one line per stream and interval, sum lines, the
//! final sender/receiver summary and the trace's diagnosis, built only from
//! [`TestResult`] parts, so it shows exactly what `--json` holds. Then `fetch`'s and the
//! ratio sweep's, `net show`'s plan and `sysinfo`'s.

use std::fmt::Write as _;

use flowlab_engine::result::{
    EndInfo, Interval, Side, SideTotals, StartInfo, StreamDirection, TestResult, Trace, UdpInterval,
};
use flowlab_engine::units::{Bytes, Rate, UnitFormat};

/// Prints start information.
pub fn start(s: &StartInfo) -> String {
    let mut out = String::new();
    let peer = match &s.peer.version {
        Some(v) => format!("{} {v}", s.peer.kind),
        None => s.peer.kind.clone(),
    };
    let _ = writeln!(out, "Connected to {} ({peer}) from {}", s.remote, s.local);
    for st in &s.streams {
        let _ = writeln!(
            out,
            "[{:>3}] {:<4} {} -> {}  sndbuf {} rcvbuf {}{}",
            st.id,
            st.direction.as_str(),
            st.local,
            st.remote,
            st.sndbuf,
            st.rcvbuf,
            st.congestion
                .as_ref()
                .map(|c| format!("  cc {c}"))
                .unwrap_or_default()
        );
    }
    out
}

/// The header line above interval rows.
pub fn interval_header(udp: bool) -> String {
    if udp {
        "[ ID] Dir  Interval           Transfer     Bitrate          Jitter     Lost/Total       OOO  Dup\n".into()
    } else {
        "[ ID] Dir  Interval           Transfer     Bitrate          Retr  Cwnd         RTT\n"
            .into()
    }
}

fn span(a: f64, b: f64) -> String {
    format!("{a:>6.2}-{b:<6.2} sec")
}

/// The columns every row starts with: id, direction, time span, transfer, bit rate.
fn row_head(
    id: &str,
    d: StreamDirection,
    from: f64,
    to: f64,
    bytes: u64,
    bps: f64,
    f: UnitFormat,
) -> String {
    format!(
        "[{id:>3}] {:<4} {}  {:>11}  {:>15}",
        d.as_str(),
        span(from, to),
        Bytes(bytes, f).to_string(),
        Rate(bps, f).to_string()
    )
}

fn udp_columns(u: &UdpInterval) -> String {
    format!(
        "  {:>7.3} ms  {:>6}/{:<6} ({:.2}%)  {:>3}  {:>3}",
        u.jitter_ms, u.lost, u.expected, u.lost_percent, u.out_of_order, u.duplicates
    )
}

/// Rows of one interval.
pub fn interval(iv: &Interval, f: UnitFormat) -> String {
    let mut out = String::new();
    let tag = if iv.omitted { "  (omitted)" } else { "" };
    for s in &iv.streams {
        out += &row_head(
            &s.id.to_string(),
            s.direction,
            iv.start,
            iv.end,
            s.bytes,
            s.bits_per_second,
            f,
        );
        if let Some(t) = s.tcp {
            let _ = write!(
                out,
                "  {:>4}  {:>11}  {:>6} us",
                t.retransmits,
                Bytes(t.cwnd_bytes, UnitFormat::Adaptive).to_string(),
                t.rtt_us
            );
        }
        if let Some(u) = &s.udp {
            out += &udp_columns(u);
        }
        let _ = writeln!(out, "{tag}");
    }
    if iv.streams.len() > 1 {
        for sum in &iv.sums {
            out += &row_head(
                "SUM",
                sum.direction,
                iv.start,
                iv.end,
                sum.bytes,
                sum.bits_per_second,
                f,
            );
            if let Some(r) = sum.retransmits {
                let _ = write!(out, "  {r:>4}");
            }
            if let Some(u) = &sum.udp {
                out += &udp_columns(u);
            }
            let _ = writeln!(out, "{tag}");
        }
    }
    out
}

fn side_row(
    out: &mut String,
    id: &str,
    d: StreamDirection,
    t: &SideTotals,
    who: &str,
    udp: bool,
    f: UnitFormat,
) {
    *out += &row_head(id, d, 0.0, t.seconds, t.bytes, t.bits_per_second, f);
    if let Some(r) = t.retransmits {
        let _ = write!(out, "  retr {r}");
    }
    if let Some(sw) = t.sw_retransmits {
        let _ = write!(out, "  resent {sw}");
    }
    if let Some(n) = t.backoff_cuts.filter(|&n| n > 0) {
        let _ = write!(out, "  slowed {n}x for the receiver");
    }
    if let Some(u) = t.udp {
        let _ = write!(
            out,
            "  jitter {:.3} ms  lost {}/{} ({:.2}%)  ooo {}  dup {}",
            u.jitter_ms, u.lost, u.expected, u.lost_percent, u.out_of_order, u.duplicates
        );
        if let Some(d) = u.rcvbuf_drops.filter(|&d| d > 0) {
            let _ = write!(out, "  rcvbuf drops {d}");
        }
        if let Some(i) = u.integrity_percent {
            let _ = write!(out, "  integrity {i:.2}%");
        }
    } else if who == "sender" && udp {
        // A UDP sender's count is of datagrams (a TCP sender's is of writes: not shown).
        if let Some(p) = t.packets {
            let _ = write!(out, "  {p} datagrams");
        }
    }
    let _ = writeln!(out, "  {who}");
}

/// The final summary of a TCP or (`udp`) UDP test.
pub fn end(e: &EndInfo, udp: bool, f: UnitFormat) -> String {
    let mut out = String::from("- - - - - - - - - - - - - - - - - - - - - - - - -\n");
    out.push_str("[ ID] Dir  Interval           Transfer     Bitrate\n");
    let many = e.streams.len() > 1;
    for s in &e.streams {
        let id = s.id.to_string();
        match &s.sender {
            Some(t) => side_row(&mut out, &id, s.direction, t, "sender", udp, f),
            None => {
                let _ = writeln!(out, "[{id:>3}] {:<4} sender: unknown", s.direction.as_str());
            }
        }
        match &s.receiver {
            Some(t) => side_row(&mut out, &id, s.direction, t, "receiver", udp, f),
            None => {
                let _ = writeln!(
                    out,
                    "[{id:>3}] {:<4} receiver: unknown (no results from the server)",
                    s.direction.as_str()
                );
            }
        }
    }
    if many {
        for sum in &e.sums {
            if let Some(t) = &sum.sender {
                side_row(&mut out, "SUM", sum.direction, t, "sender", udp, f);
            }
            if let Some(t) = &sum.receiver {
                side_row(&mut out, "SUM", sum.direction, t, "receiver", udp, f);
            }
        }
    }
    let c = &e.cpu;
    let _ = writeln!(
        out,
        "CPU: local {:.1}% (user {:.1}%, system {:.1}%), remote {:.1}% (user {:.1}%, system {:.1}%)",
        c.local_total, c.local_user, c.local_system, c.remote_total, c.remote_user, c.remote_system
    );
    if e.congestion_local.is_some() || e.congestion_remote.is_some() {
        let _ = writeln!(
            out,
            "TCP congestion control: local {}, remote {}",
            e.congestion_local.as_deref().unwrap_or("?"),
            e.congestion_remote.as_deref().unwrap_or("?")
        );
    }
    if e.interrupted {
        out.push_str("(interrupted: totals cover the part that ran)\n");
    }
    out
}

/// What the table ends with once a test is over: the totals (when there are any), then
/// the diagnosis (when traced).
pub fn finish(r: &TestResult, udp: bool, f: UnitFormat) -> String {
    let mut out = String::new();
    if let Some(e) = &r.end {
        out += &end(e, udp, f);
    }
    if let Some(t) = &r.trace {
        out += &diagnosis(t);
    }
    out
}

/// The whole table of a finished test (used by `quick`).
pub fn whole(r: &TestResult, f: UnitFormat) -> String {
    let mut out = String::new();
    if let Some(e) = &r.end {
        out.push_str(&end(e, crate::is_udp(r), f));
    }
    out
}

/// `--trace`: how much was sampled, and what limited each direction's senders.
pub fn diagnosis(t: &Trace) -> String {
    let mut out = String::new();
    let count = |side: Side| -> usize {
        t.streams
            .iter()
            .filter(|s| s.side == side)
            .map(|s| s.trace.samples.len())
            .sum()
    };
    let _ = writeln!(
        out,
        "Trace: every {} ms, {} samples on the client, {} on the server",
        t.period_us as f64 / 1000.0,
        count(Side::Client),
        count(Side::Server)
    );
    if t.streams.iter().any(|s| s.trace.truncated) {
        out.push_str("  (some streams had more samples than kept: traces truncated)\n");
    }
    for d in &t.diagnosis {
        let sh = &d.shares;
        let _ = writeln!(
            out,
            "What limited the sender ({}): {} — receive window {:.0} %, send buffer {:.0} %, network {:.0} %, application {:.0} %{}",
            d.direction.as_str(),
            d.primary.describe(),
            sh.receive_window * 100.0,
            sh.send_buffer * 100.0,
            sh.network * 100.0,
            sh.application * 100.0,
            if d.method == "kernel+samples" {
                " (receive window from the samples at the window: the kernel's own count missed them)"
            } else {
                ""
            }
        );
        let e = &d.evidence;
        let mut ev = Vec::new();
        if let Some(p) = e.peak_in_flight {
            ev.push(format!("peak in flight {}", Bytes(p, UnitFormat::Adaptive)));
        }
        if let Some(w) = e.max_receive_window {
            ev.push(format!(
                "receive window up to {}",
                Bytes(w, UnitFormat::Adaptive)
            ));
        }
        if e.window_full_samples > 0 {
            ev.push(format!(
                "window full in {} of {} samples",
                e.window_full_samples, e.window_samples
            ));
        }
        if let (Some(b), Some(r), Some(rtt)) = (e.bdp_bytes, e.delivery_rate, e.min_rtt_us) {
            ev.push(format!(
                "BDP {} ({} achieved × min RTT {:.3} ms)",
                Bytes(b, UnitFormat::Adaptive),
                Rate(r as f64 * 8.0, UnitFormat::Adaptive),
                rtt as f64 / 1000.0
            ));
        }
        if let (Some(b), Some(r)) = (e.path_bdp_bytes, e.path_rate_bps) {
            ev.push(format!(
                "path BDP {} ({} × min RTT)",
                Bytes(b, UnitFormat::Adaptive),
                Rate(r as f64, UnitFormat::Adaptive)
            ));
        }
        if let (Some(m), Some(x)) = (e.median_srtt_us, e.rtt_inflation) {
            ev.push(format!(
                "median RTT {:.3} ms ({x:.1}× min)",
                m as f64 / 1000.0
            ));
        }
        if let Some(r) = e.retransmits {
            let s = if r == 1 { "" } else { "s" };
            ev.push(format!("{r} retransmitted segment{s}"));
        }
        if !ev.is_empty() {
            let _ = writeln!(out, "  evidence: {}", ev.join(", "));
        }
        for a in &d.advice {
            let _ = writeln!(out, "  - {a}");
        }
    }
    if t.diagnosis.is_empty() {
        out.push_str("No sender was traced (the sending end is not flowlab): no diagnosis.\n");
    }
    out
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

/// `flowlab sysinfo`: the machine state, one setting per line (`?`: could not be read).
pub fn system(s: &flowlab_proto::system::SystemInfo) -> String {
    let mut out = String::new();
    // One column of names, then at least two spaces: a name as long as the column (e.g.
    // net.ipv4.tcp_slow_start_after_idle) is never glued to its value.
    let mut line = |k: &str, v: String| {
        let _ = writeln!(out, "{k:<34}  {v}");
    };
    let unknown = || "?".to_string();
    let or_unknown = |v: &Option<String>| v.clone().unwrap_or_else(unknown);
    let triple = |t: Option<[u64; 3]>| {
        t.map_or_else(unknown, |[a, b, c]| {
            format!("{a} {b} {c}  (min default max, bytes)")
        })
    };
    let n = |v: Option<u64>| v.map_or_else(unknown, |v| v.to_string());
    line("kernel", or_unknown(&s.kernel));
    line("cpus", n(s.cpus));
    line(
        "congestion control",
        format!(
            "{} (available: {})",
            or_unknown(&s.congestion_default),
            s.congestion_available.join(" ")
        ),
    );
    line("net.ipv4.tcp_rmem", triple(s.tcp_rmem));
    line("net.ipv4.tcp_wmem", triple(s.tcp_wmem));
    line("net.core.rmem_max", n(s.rmem_max));
    line("net.core.wmem_max", n(s.wmem_max));
    line("net.core.rmem_default", n(s.rmem_default));
    line("net.core.wmem_default", n(s.wmem_default));
    for (k, v) in &s.tcp {
        line(&format!("net.ipv4.{k}"), v.to_string());
    }
    line("net.core.default_qdisc", or_unknown(&s.default_qdisc));
    for i in &s.interfaces {
        let offloads: Vec<String> = i
            .offloads
            .iter()
            .map(|(k, on)| format!("{k} {}", if *on { "on" } else { "off" }))
            .collect();
        line(
            &format!("interface {}", i.name),
            format!(
                "mtu {}  qdisc {}  offloads: {}",
                n(i.mtu),
                or_unknown(&i.qdisc),
                if offloads.is_empty() {
                    "?".to_string()
                } else {
                    offloads.join(", ")
                }
            ),
        );
    }
    out
}

/// `flowlab fetch`: the whole transfer, then one line per server.
pub fn fetch(r: &flowlab_fragments::fetch::FetchResult) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "fetched {} of {} fragments ({} skipped, already verified) of {}: {} in {:.2} s, {} ({})",
        r.fragments - r.skipped,
        r.fragments,
        r.skipped,
        r.file.name,
        Bytes(r.bytes, UnitFormat::Adaptive),
        r.seconds,
        Rate(r.bits_per_second, UnitFormat::Adaptive),
        r.mode
    );
    for s in &r.servers {
        let _ = write!(
            out,
            "  {:<22} {:>4} fragments  {:>12}  busy {:>6.2} s  {:>16}",
            s.address,
            s.fragments,
            Bytes(s.bytes, UnitFormat::Adaptive).to_string(),
            s.busy_seconds,
            Rate(s.bits_per_second, UnitFormat::Adaptive).to_string()
        );
        if s.corrupt > 0 {
            let _ = write!(out, "  corrupt {} (fetched again)", s.corrupt);
        }
        if s.duplicates > 0 {
            let _ = write!(out, "  duplicates {}", s.duplicates);
        }
        if s.refused > 0 {
            let _ = write!(out, "  refused {}", s.refused);
        }
        if let Some(f) = &s.failed {
            let _ = write!(out, "  FAILED: {f}");
        }
        out.push('\n');
    }
    out
}

/// `flowlab fetch --sweep-ratios`: seed 000's Table 2 — total transfer time per ratio.
pub fn sweep(r: &flowlab_fragments::fetch::SweepResult) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} ({}) from {}: total transfer time, seconds",
        r.file.name,
        Bytes(r.file.size, UnitFormat::Adaptive),
        r.servers.join(" and ")
    );
    let mut head = format!("{:<10}", "ratio");
    for i in 1..=r.repeat {
        let _ = write!(head, " {:>8}", format!("run {i}"));
    }
    if r.repeat > 1 {
        let _ = write!(head, " {:>8}", "mean");
    }
    let _ = writeln!(out, "{head}");
    let best = r
        .rows
        .iter()
        .map(|row| row.mean_seconds)
        .fold(f64::INFINITY, f64::min);
    for row in &r.rows {
        let mut line = format!("{:<10}", row.mode);
        for s in &row.seconds {
            let _ = write!(line, " {s:>8.2}");
        }
        if r.repeat > 1 {
            let _ = write!(line, " {:>8.2}", row.mean_seconds);
        }
        if row.mean_seconds == best {
            line += "  <- fastest";
        }
        let _ = writeln!(out, "{line}");
    }
    out
}

/// `flowlab net show`: subnets and addresses, then what each host pair's path implies.
pub fn net_plan(p: &flowlab_net::topology::Plan<'_>) -> String {
    use flowlab_net::topology::Kind;
    let t = p.topology;
    let mut out = String::new();
    let count = |k: Kind| t.nodes.values().filter(|x| **x == k).count();
    let _ = writeln!(
        out,
        "topology {}: {} hosts, {} routers, {} switches, {} links",
        t.name,
        count(Kind::Host),
        count(Kind::Router),
        count(Kind::Switch),
        t.links.len()
    );
    for s in &p.segments {
        let members: Vec<String> = s
            .members
            .iter()
            .map(|(n, a)| format!("{n} {}", std::net::Ipv4Addr::from(*a)))
            .collect();
        let _ = writeln!(
            out,
            "  {}.{}.{}.0/24  {}",
            s.subnet[0],
            s.subnet[1],
            s.subnet[2],
            members.join(", ")
        );
    }
    for l in t
        .links
        .iter()
        .filter(|l| !l.a_to_b.is_plain() || !l.b_to_a.is_plain())
    {
        let shape = |s: &flowlab_net::topology::Shape| {
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
        };
        let _ = writeln!(
            out,
            "  link {} {} -> {}: {}",
            l.name,
            l.a,
            l.b,
            shape(&l.a_to_b)
        );
        if l.b_to_a != l.a_to_b {
            let _ = writeln!(
                out,
                "  link {} {} -> {}: {}",
                l.name,
                l.b,
                l.a,
                shape(&l.b_to_a)
            );
        }
    }
    let _ = writeln!(
        out,
        "paths (RTT = one-way delays there and back, rate = slowest link):"
    );
    let hosts: Vec<&String> = t.hosts().collect();
    for (i, a) in hosts.iter().enumerate() {
        for b in &hosts[i + 1..] {
            if let Some(path) = p.path(a, b) {
                let rate = path.bottleneck_bps.map_or("unlimited".to_string(), |r| {
                    Rate(r as f64, UnitFormat::Adaptive).to_string()
                });
                let _ = writeln!(
                    out,
                    "  {a:>6} - {b:<6} RTT {:>6.1} ms  {rate:>16}  via {}",
                    path.rtt.as_secs_f64() * 1000.0,
                    path.nodes.join(" ")
                );
            }
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

    #[test]
    fn only_a_udp_sender_counts_datagrams() {
        // An iperf3 TCP sender reports no retransmissions (-1) but a count of writes.
        let t = SideTotals {
            bytes: 1_000_000,
            seconds: 1.0,
            bits_per_second: 8e6,
            packets: Some(8),
            ..SideTotals::default()
        };
        let row = |udp| {
            let mut out = String::new();
            side_row(
                &mut out,
                "1",
                StreamDirection::Up,
                &t,
                "sender",
                udp,
                UnitFormat::Adaptive,
            );
            out
        };
        assert!(!row(false).contains("datagrams"), "{}", row(false));
        assert!(row(true).contains("  8 datagrams  sender"), "{}", row(true));
    }
}
