//! A test's table: one line per stream and interval, sum lines, the final
//! sender/receiver summary, built only from [`TestResult`] parts, so it shows exactly
//! what `--json` holds; and `quick`'s headings.

use std::fmt::Write as _;

use crate::units::{Bytes, Rate, UnitFormat};
use flowlab_results::latency::TestLatency;
use flowlab_results::result::{
    EndInfo, Interval, LoopbackReordering, ServerOutput, SideTotals, StartInfo, StreamDirection,
    TestResult, UdpInterval, loopback_reordering,
};
use flowlab_results::spec::{Direction, TestSpec};

use super::diagnosis;

/// Prints start information.
pub fn start(s: &StartInfo) -> String {
    let mut out = String::new();
    let peer = match &s.peer.version {
        Some(v) => format!("{} {v}", s.peer.kind),
        None => s.peer.kind.to_string(),
    };
    match &s.spec.multicast {
        Some(m) => {
            let each: Vec<String> = m.receivers.iter().map(|r| r.to_string()).collect();
            let _ = writeln!(
                out,
                "Sending to multicast group {}:{}, TTL {}; receivers {} ({peer})",
                s.spec.host,
                s.spec.port,
                m.ttl,
                each.join(", ")
            );
        }
        None => {
            let _ = writeln!(out, "Connected to {} ({peer}) from {}", s.remote, s.local);
        }
    }
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
pub fn interval_header(spec: &TestSpec) -> String {
    // Only the columns this end's rows fill: a TCP sender's retransmissions, window and
    // RTT; a UDP receiver's jitter and loss. Without intervals (`-i 0`), no header.
    let udp = spec.protocol == flowlab_results::spec::Transport::Udp;
    let (sends, receives) = match spec.direction {
        Direction::Forward => (true, false),
        Direction::Reverse => (false, true),
        Direction::Bidir => (true, true),
    };
    let columns = match (udp, sends, receives) {
        _ if spec.interval.is_none() => return String::new(),
        (true, _, true) => "          Jitter     Lost/Total       OOO  Dup",
        (false, true, _) => "          Retr  Cwnd         RTT",
        _ => "",
    };
    format!("[ ID] Dir  Interval           Transfer     Bitrate{columns}\n")
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

/// A dash in each TCP column, for a row of a stream whose sender is the other end
/// (`--bidir`'s down rows): the columns the header names are not measured here.
const TCP_NOT_HERE: &str = "     -            -       -";

/// A dash in each UDP column, for a row of a stream this end sends (`--bidir`'s up rows).
const UDP_NOT_HERE: &str = "        -          -                   -    -";

/// Rows of one interval. With `--bidir`, where the header names a column one direction's
/// rows cannot fill (the sender's window, the receiver's loss), those rows carry a dash
/// there. A direction of one stream has no `[SUM]` row: it would repeat the stream's.
pub fn interval(iv: &Interval, f: UnitFormat) -> String {
    let mut out = String::new();
    let tag = if iv.omitted { "  (omitted)" } else { "" };
    let tcp_here = iv.streams.iter().any(|s| s.tcp.is_some());
    let udp_here = iv.streams.iter().any(|s| s.udp.is_some());
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
        match (s.tcp, &s.udp) {
            (Some(t), _) => {
                let _ = write!(
                    out,
                    "  {:>4}  {:>11}  {:>6} us",
                    t.retransmits,
                    Bytes(t.cwnd_bytes, UnitFormat::Adaptive).to_string(),
                    t.rtt_us
                );
            }
            (None, Some(u)) => out += &udp_columns(u),
            (None, None) if tcp_here => out += TCP_NOT_HERE,
            (None, None) if udp_here => out += UDP_NOT_HERE,
            (None, None) => {}
        }
        let _ = writeln!(out, "{}", tag);
    }
    for sum in &iv.sums {
        if iv
            .streams
            .iter()
            .filter(|s| s.direction == sum.direction)
            .count()
            < 2
        {
            continue;
        }
        out += &row_head(
            "SUM",
            sum.direction,
            iv.start,
            iv.end,
            sum.bytes,
            sum.bits_per_second,
            f,
        );
        match (sum.retransmits, &sum.udp) {
            (Some(r), _) => {
                let _ = write!(out, "  {r:>4}");
            }
            (None, Some(u)) => out += &udp_columns(u),
            (None, None) if tcp_here => out += "     -",
            (None, None) if udp_here => out += UDP_NOT_HERE,
            (None, None) => {}
        }
        let _ = writeln!(out, "{tag}");
    }
    if let Some(l) = &iv.latency {
        let _ = writeln!(
            out,
            "[RTT] {:<4} {}  median {:.3} ms  p90 {:.3}  p99 {:.3}  max {:.3}  ({} replies){tag}",
            "",
            span(iv.start, iv.end),
            l.median_ms,
            l.p90_ms,
            l.p99_ms,
            l.max_ms,
            l.samples
        );
    }
    out
}

/// The latency block of a `--latency` test: idle and loaded round trips, what the load
/// added.
pub fn latency(l: &TestLatency) -> String {
    let mut out = format!(
        "Latency: UDP probes of {} bytes every {} s, the server's time taken out\n",
        l.size, l.interval_seconds
    );
    out.push_str("          probes    lost      min   median      p90      p99      max  (ms)\n");
    for (name, s) in [("idle", &l.idle), ("loaded", &l.loaded)] {
        let _ = write!(out, "{name:<8}{:>8}{:>8}", s.sent, s.lost);
        match &s.rtt {
            Some(r) => {
                let _ = writeln!(
                    out,
                    " {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3}",
                    r.min_ms, r.median_ms, r.p90_ms, r.p99_ms, r.max_ms
                );
            }
            None => out.push_str("  no replies\n"),
        }
    }
    if let (Some(m), Some(p)) = (l.added.median_ms, l.added.p99_ms) {
        let verdict = if l.queue_building == Some(true) {
            "a queue builds under load (queue-building bottleneck)"
        } else {
            "no standing queue"
        };
        // Never a negative "added": where the load lowered the round trip (busy CPUs on
        // loopback answer sooner), say so.
        let lower = |v: f64| v < -0.0005;
        if lower(m) || lower(p) {
            let way = |v: f64| {
                if lower(v) {
                    format!("{:.3} ms lower", -v)
                } else {
                    format!("{:.3} ms higher", v.max(0.0))
                }
            };
            let _ = writeln!(
                out,
                "Under load the median was {}, p99 {}: {verdict}.",
                way(m),
                way(p)
            );
        } else {
            let _ = writeln!(
                out,
                "The load added {:.3} ms at the median, {:.3} ms at p99: {verdict}.",
                m.max(0.0),
                p.max(0.0)
            );
        }
    }
    let _ = writeln!(out, "timestamps: {}", l.timestamps);
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
        // How many were not needed, and why they may have been sent.
        if let Some(d) = t.dsack_dups.filter(|_| r > 0) {
            let _ = write!(out, " ({d} not needed: D-SACK");
            if let Some(n) = t.reordering.filter(|&n| n > 0) {
                let _ = write!(out, ", reordered {n}x");
            }
            out.push(')');
        }
    }
    if let Some(sw) = t.sw_retransmits {
        let _ = write!(out, "  resent {sw}");
    }
    if let Some(n) = t.backoff_cuts.filter(|&n| n > 0) {
        let _ = write!(out, "  slowed {n}x for the receiver");
    }
    if let Some(n) = t.receiver_holds.filter(|&n| n > 0) {
        let _ = write!(out, "  held {n}x by the receiver");
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
        if let Some(n) = u.foreign.filter(|&n| n > 0) {
            let _ = write!(out, "  foreign {n}");
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
            // Each receiver's row follows.
            None if e.multicast.is_some() => {}
            None => {
                let _ = writeln!(
                    out,
                    "[{id:>3}] {:<4} receiver: unknown (no results from the server)",
                    s.direction.as_str()
                );
            }
        }
    }
    // As in the intervals, a direction of one stream has no [SUM]: it would repeat it.
    for sum in &e.sums {
        let streams = e.streams.iter().filter(|s| s.direction == sum.direction);
        if streams.count() < 2 {
            continue;
        }
        if let Some(t) = &sum.sender {
            side_row(&mut out, "SUM", sum.direction, t, "sender", udp, f);
        }
        if let Some(t) = &sum.receiver {
            side_row(&mut out, "SUM", sum.direction, t, "receiver", udp, f);
        }
    }
    if let Some(m) = &e.multicast {
        out += &multicast_rows(m, &e.streams, f);
    }
    let c = &e.cpu;
    if let Some(m) = &e.multicast {
        let each: Vec<String> = m
            .receivers
            .iter()
            .map(|r| match r.cpu_percent {
                Some(p) => format!("{p:.1}%"),
                None => "?".into(),
            })
            .collect();
        let _ = writeln!(
            out,
            "CPU: local {:.1}% (user {:.1}%, system {:.1}%), receivers {}",
            c.local_total,
            c.local_user,
            c.local_system,
            each.join(", ")
        );
    } else if let Some(q) = &e.quic {
        let _ = writeln!(
            out,
            "CPU: local {:.1}% (user {:.1}%, system {:.1}%), remote unknown (a perf server reports none)",
            c.local_total, c.local_user, c.local_system
        );
        out += &quic(q, f);
    } else {
        let _ = writeln!(
            out,
            "CPU: local {:.1}% (user {:.1}%, system {:.1}%), remote {:.1}% (user {:.1}%, system {:.1}%)",
            c.local_total,
            c.local_user,
            c.local_system,
            c.remote_total,
            c.remote_user,
            c.remote_system
        );
    }
    if e.quic.is_none() && (e.congestion_local.is_some() || e.congestion_remote.is_some()) {
        let _ = writeln!(
            out,
            "TCP congestion control: local {}, remote {}",
            e.congestion_local.as_deref().unwrap_or("?"),
            e.congestion_remote.as_deref().unwrap_or("?")
        );
    }
    if let Some(m) = &e.mptcp {
        out += &mptcp(m, f);
    }
    if e.interrupted {
        out.push_str("(interrupted: totals cover the part that ran)\n");
    }
    for f in &e.failed_streams {
        let _ = writeln!(
            out,
            "stream {} failed while the test ran: {} (its totals cover the part that ran)",
            f.id, f.error
        );
    }
    out
}

/// A multicast test's group and one row for each receiver: what reached it.
fn multicast_rows(
    m: &flowlab_results::result::MulticastEnd,
    streams: &[flowlab_results::result::EndStream],
    f: UnitFormat,
) -> String {
    let mut out = format!(
        "Multicast to {} from {} ({}), TTL {}: {} receiver{}\n",
        m.group,
        m.source,
        if m.source_specific {
            "source-specific"
        } else {
            "any source"
        },
        m.ttl,
        m.receivers.len(),
        if m.receivers.len() == 1 { "" } else { "s" }
    );
    let Some(s) = streams.first() else {
        return out;
    };
    let id = s.id.to_string();
    for r in &m.receivers {
        let who = match r.address.as_str() {
            a if a == r.name => format!("receiver {a}"),
            a => format!("receiver {} ({a})", r.name),
        };
        match &r.totals {
            // Rather than a loss of every datagram sent: where to look.
            Some(t) if t.bytes == 0 => {
                let _ = writeln!(
                    out,
                    "[{id:>3}] {:<4} {who}: nothing reached it (is the group routed or \
                     flooded to it?)",
                    s.direction.as_str()
                );
            }
            Some(t) => side_row(&mut out, &id, s.direction, t, &who, true, f),
            None => {
                let _ = writeln!(
                    out,
                    "[{id:>3}] {:<4} {who}: no results ({})",
                    s.direction.as_str(),
                    r.error.as_deref().unwrap_or("none given")
                );
            }
        }
    }
    out
}

/// A QUIC test's stack and each connection's figures at the end.
fn quic(q: &flowlab_results::result::QuicEnd, f: UnitFormat) -> String {
    let mut out = format!(
        "QUIC congestion control: local {} ({}), remote unknown\n",
        q.congestion, q.stack
    );
    let ms = |us: u64| us as f64 / 1000.0;
    for (i, c) in q.connections.iter().enumerate() {
        let _ = writeln!(
            out,
            "QUIC connection {i}: handshake {:.2} ms, RTT {:.3} ms (least {:.3} ms), cwnd {}, \
             lost {} packets ({}) in {} congestion events, MTU {}, UDP {} sent, {} received",
            c.handshake_ms,
            ms(c.rtt_us),
            ms(c.min_rtt_us),
            Bytes(c.cwnd_bytes, f),
            c.lost_packets,
            Bytes(c.lost_bytes, f),
            c.congestion_events,
            c.mtu,
            Bytes(c.udp_sent_bytes, f),
            Bytes(c.udp_received_bytes, f),
        );
    }
    out
}

/// An MPTCP test's path manager and scheduler, and each connection's subflows at the end.
fn mptcp(m: &flowlab_results::result::MptcpEnd, f: UnitFormat) -> String {
    let mut out = format!(
        "MPTCP: path manager {}, scheduler {} (the client's)\n",
        m.path_manager.as_deref().unwrap_or("unknown"),
        m.scheduler.as_deref().unwrap_or("unknown")
    );
    for c in &m.connections {
        if c.fallback {
            let _ = writeln!(
                out,
                "MPTCP stream {}: fell back to plain TCP (the server, or something on the \
                 path, does not speak MPTCP)",
                c.stream
            );
            continue;
        }
        let _ = writeln!(
            out,
            "MPTCP stream {}: {} subflow{}{}",
            c.stream,
            c.subflows.len(),
            if c.subflows.len() == 1 { "" } else { "s" },
            match c.bytes_retransmitted {
                Some(n) => format!(", {} resent at the MPTCP level", Bytes(n, f)),
                None => String::new(),
            }
        );
        for s in &c.subflows {
            let _ = writeln!(
                out,
                "  subflow {} -> {}: {} acked, {} received, retr {}, RTT {:.3} ms, cwnd {}",
                s.local,
                s.remote,
                Bytes(s.bytes_acked, f),
                Bytes(s.bytes_received, f),
                s.retransmits,
                s.rtt_us as f64 / 1000.0,
                Bytes(s.cwnd_bytes, f)
            );
        }
    }
    out
}

/// What the server printed for the test (`--get-server-output`), as iperf3 shows it.
fn server_output(e: &EndInfo) -> String {
    let mut out = String::new();
    match &e.server_output {
        Some(ServerOutput::Text(text)) => {
            let _ = write!(out, "\nServer output:\n{text}");
        }
        Some(ServerOutput::Json(v)) => {
            let text = serde_json::to_string_pretty(v).unwrap_or_default();
            let _ = writeln!(out, "\nServer output:\n{text}");
        }
        None => {}
    }
    out
}

/// What the table ends with once a test is over: the totals (when there are any), then
/// the diagnosis (when traced).
pub fn finish(r: &TestResult, udp: bool, f: UnitFormat) -> String {
    let mut out = String::new();
    if let Some(e) = &r.end {
        out += &end(e, udp, f);
        if r.start.spec.skip_rx_copy {
            out.push_str(
                "--skip-rx-copy: receivers discard what they read (MSG_TRUNC), a flowlab or \
                 iperf3 3.19+ server's too: the receiving side's CPU has no copy in it\n",
            );
        }
    }
    if let Some(l) = loopback_reordering(r) {
        out += &loopback(&l);
    }
    if let Some(e) = &r.end {
        out += &server_output(e);
    }
    if let Some(l) = &r.latency {
        out += &latency(l);
    }
    out += &diagnosis(r);
    out
}

/// The whole table of a finished test (used by `quick`): the totals, and the round trips
/// in one line when they were probed.
pub fn whole(r: &TestResult, f: UnitFormat) -> String {
    let mut out = String::new();
    if let Some(e) = &r.end {
        out.push_str(&end(e, crate::is_udp(r), f));
    }
    if let Some(l) = loopback_reordering(r) {
        out += &loopback(&l);
    }
    if let Some(e) = &r.end {
        out += &server_output(e);
    }
    if let Some(l) = &r.latency {
        out += &latency_line(l);
    }
    out
}

/// Why a test across loopback retransmitted ([`loopback_reordering`]), and what removes it.
pub fn loopback(l: &LoopbackReordering) -> String {
    let r = l.retransmits;
    // D-SACKs of retransmissions made before an omitted start (-O) can count too.
    let said = match l.not_needed {
        Some(n) if n >= r && r == 1 => "the one retransmission was not needed (D-SACK)".into(),
        Some(n) if n >= r && r == 2 => "neither retransmission was needed (D-SACK)".into(),
        Some(n) if n >= r => format!("none of the {r} retransmissions was needed (D-SACK)"),
        Some(n) if n > 0 => format!("{n} of the {r} retransmissions were not needed (D-SACK)"),
        _ if r == 1 => "the one retransmission may come from reordering".to_string(),
        _ => format!("the {r} retransmissions may all come from reordering"),
    };
    format!(
        "Loopback: {said}: lo queues each packet on the CPU that sent it (no receive \
         packet steering), so one flow's segments sent from two CPUs can overtake each \
         other; running both ends on one CPU (-A N,N), or steering lo's packets (as root: \
         echo {} > /sys/class/net/lo/queues/rx-0/rps_cpus), prevents it.\n",
        l.steer_all
    )
}

/// A test's round trips in one line: idle and loaded median and p99, what the load added
/// (or, where the loaded median is the lower, by how much: busy CPUs on loopback answer
/// sooner than idle ones, which wake from sleep first).
pub fn latency_line(l: &TestLatency) -> String {
    match (&l.idle.rtt, &l.loaded.rtt) {
        (Some(i), Some(d)) => {
            let added = d.median_ms - i.median_ms;
            let change = if added < -0.0005 {
                format!("the median was {:.3} ms lower under load", -added)
            } else {
                format!("the load added {:+.3} ms at the median", added.max(0.0))
            };
            format!(
                "RTT: idle median {:.3} ms, p99 {:.3}; loaded median {:.3} ms, p99 {:.3} ({} probes, {} lost); {change}\n",
                i.median_ms, i.p99_ms, d.median_ms, d.p99_ms, l.loaded.sent, l.loaded.lost,
            )
        }
        _ => "RTT: no probe answered\n".into(),
    }
}

/// `flowlab quick`'s first lines.
pub fn quick_heading(seconds: u64, port: u16) -> String {
    format!("flowlab quick: {seconds} s per test on loopback (server on 127.0.0.1:{port})\n\n")
}

/// The heading of one of `flowlab quick`'s tests: `TCP client → server`, and a UDP
/// test's target rate (bits/s) when it has one.
pub fn quick_case(protocol: &str, reverse: bool, target: Option<u64>) -> String {
    let way = if reverse {
        "server → client"
    } else {
        "client → server"
    };
    let rate = target
        .map(|r| format!(", target {}", Rate(r as f64, UnitFormat::Adaptive)))
        .unwrap_or_default();
    format!("{protocol} {way}{rate}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fifty probes answered after `rtt_us` each.
    fn probes(rtt_us: u64) -> Vec<flowlab_results::ping::Probe> {
        (1..=50)
            .map(|i| flowlab_results::ping::Probe {
                seq: i,
                sent_ns: i * 10_000_000,
                received_ns: Some(i * 10_000_000 + rtt_us * 1000),
                server_ns: Some(0),
                forward_ns: None,
                backward_ns: None,
                duplicates: 0,
                reordered: false,
            })
            .collect()
    }

    /// The interval header names only the columns this end's rows fill (issue 46).
    #[test]
    fn the_interval_header_names_only_the_columns_filled() {
        use flowlab_results::spec::Transport;
        let header = |protocol, direction, interval: Option<std::time::Duration>| {
            let mut s = TestSpec::new("h");
            (s.protocol, s.direction, s.interval) = (protocol, direction, interval);
            interval_header(&s)
        };
        let second = Some(std::time::Duration::from_secs(1));
        let bare = "[ ID] Dir  Interval           Transfer     Bitrate\n";
        let tcp = header(Transport::Tcp, Direction::Forward, second);
        assert!(
            tcp.ends_with("Bitrate          Retr  Cwnd         RTT\n"),
            "{tcp}"
        );
        assert_eq!(header(Transport::Tcp, Direction::Bidir, second), tcp);
        assert_eq!(header(Transport::Tcp, Direction::Reverse, second), bare);
        let udp = header(Transport::Udp, Direction::Reverse, second);
        assert!(
            udp.ends_with("Jitter     Lost/Total       OOO  Dup\n"),
            "{udp}"
        );
        assert_eq!(header(Transport::Udp, Direction::Bidir, second), udp);
        assert_eq!(header(Transport::Udp, Direction::Forward, second), bare);
        assert_eq!(header(Transport::Tcp, Direction::Forward, None), "");
    }

    /// A bidir interval: each row fills every column the header names, with a dash where
    /// the figure is the other end's; a direction of one stream has no `[SUM]` row.
    #[test]
    fn bidir_rows_fill_every_column_with_a_figure_or_a_dash() {
        use flowlab_results::result::{IntervalStream, IntervalSum, TcpInterval, UdpInterval};
        let stream = |id, direction| IntervalStream {
            id,
            direction,
            bytes: 1 << 20,
            bits_per_second: 8e6,
            tcp: None,
            udp: None,
        };
        let sum = |direction| IntervalSum {
            direction,
            bytes: 1 << 20,
            bits_per_second: 8e6,
            retransmits: None,
            udp: None,
        };
        let mut iv = Interval {
            start: 0.0,
            end: 1.0,
            omitted: false,
            streams: vec![
                stream(1, StreamDirection::Up),
                stream(3, StreamDirection::Down),
            ],
            sums: vec![sum(StreamDirection::Up), sum(StreamDirection::Down)],
            latency: None,
        };
        iv.streams[0].tcp = Some(TcpInterval {
            retransmits: 0,
            cwnd_bytes: 2 << 20,
            rtt_us: 139,
            rttvar_us: 10,
        });
        let mut spec = TestSpec::new("h");
        spec.direction = Direction::Bidir;
        spec.interval = Some(std::time::Duration::from_secs(1));
        let header = interval_header(&spec);
        let rows = interval(&iv, UnitFormat::Adaptive);
        let lines: Vec<&str> = rows.lines().collect();
        assert_eq!(
            lines.len(),
            2,
            "no [SUM] for one stream a direction: {rows}"
        );
        assert!(lines[1].ends_with("     -            -       -"), "{rows}");
        // The dashes stand where the other row's figures end (right-aligned columns; the
        // lost count ends at its '/').
        let ends = |l: &str| -> Vec<usize> {
            l.char_indices()
                .filter(|&(i, c)| c != ' ' && l[i + c.len_utf8()..].starts_with([' ', '/']))
                .map(|(i, _)| i)
                .collect()
        };
        let up: Vec<usize> = ends(&(lines[0].to_string() + " "));
        for dash in ends(&(lines[1].to_string() + " "))
            .into_iter()
            .rev()
            .take(3)
        {
            assert!(up.contains(&dash), "{header}{rows}");
        }

        // UDP: the up (sending) row has no loss of its own.
        iv.streams[0].tcp = None;
        iv.streams[1].udp = Some(UdpInterval {
            packets: 863,
            expected: 863,
            ..UdpInterval::default()
        });
        let rows = interval(&iv, UnitFormat::Adaptive);
        let lines: Vec<&str> = rows.lines().collect();
        let ours = ends(&(lines[1].to_string() + " "));
        for dash in ends(&(lines[0].to_string() + " "))
            .into_iter()
            .rev()
            .take(4)
        {
            assert!(ours.contains(&dash), "{rows}");
        }
    }

    /// What the load added is never negative: a loaded median below the idle one (busy
    /// CPUs on loopback) is said as that; equal ones add nothing.
    #[test]
    fn a_lower_loaded_median_is_said_so_not_as_a_negative_addition() {
        let line = |idle, loaded| {
            latency_line(&TestLatency::of(
                64,
                0.01,
                "t",
                probes(idle),
                probes(loaded),
            ))
        };
        let lower = line(40, 20);
        assert!(
            lower.ends_with("; the median was 0.020 ms lower under load\n") && !lower.contains('-'),
            "{lower}"
        );
        assert!(line(20, 40).ends_with("; the load added +0.020 ms at the median\n"));
        assert!(line(20, 20).ends_with("; the load added +0.000 ms at the median\n"));
        // `flowlab test --latency`'s block likewise.
        let block = |idle, loaded| {
            latency(&TestLatency::of(
                64,
                0.01,
                "t",
                probes(idle),
                probes(loaded),
            ))
        };
        let lower = block(40, 20);
        assert!(
            lower.contains("Under load the median was 0.020 ms lower, p99 0.020 ms lower: "),
            "{lower}"
        );
        assert!(!lower.contains(" -0."), "{lower}");
        assert!(
            block(20, 40).contains("The load added 0.020 ms at the median, 0.020 ms at p99: "),
            "{}",
            block(20, 40)
        );
    }

    /// The summary, as the intervals: a `[SUM]` only for a direction of several streams.
    #[test]
    fn the_summary_sums_only_a_direction_of_several_streams() {
        use flowlab_results::result::{CpuInfo, EndStream, EndSum};
        let totals = SideTotals {
            bytes: 1_000_000,
            seconds: 1.0,
            bits_per_second: 8e6,
            ..SideTotals::default()
        };
        let stream = |id, direction| EndStream {
            id,
            direction,
            sender: Some(totals.clone()),
            receiver: Some(totals.clone()),
            server_socket: None,
        };
        let sum = |direction| EndSum {
            direction,
            sender: Some(totals.clone()),
            receiver: Some(totals.clone()),
        };
        let mut e = EndInfo {
            streams: vec![
                stream(1, StreamDirection::Up),
                stream(3, StreamDirection::Down),
            ],
            sums: vec![sum(StreamDirection::Up), sum(StreamDirection::Down)],
            cpu: CpuInfo::default(),
            congestion_local: None,
            congestion_remote: None,
            interrupted: false,
            server_output: None,
            failed_streams: Vec::new(),
            quic: None,
            mptcp: None,
            multicast: None,
        };
        let sums = |e: &EndInfo| {
            let text = end(e, false, UnitFormat::Adaptive);
            let rows: Vec<String> = text
                .lines()
                .filter(|l| l.starts_with("[SUM]"))
                .map(|l| l[..10].to_string())
                .collect();
            rows
        };
        // --bidir of one stream each way: nothing to sum.
        assert!(sums(&e).is_empty(), "{:?}", sums(&e));
        // Two streams up, one down: the up direction is summed, the down one is not.
        e.streams.insert(1, stream(2, StreamDirection::Up));
        assert_eq!(sums(&e), ["[SUM] up  ", "[SUM] up  "]);
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

    #[test]
    fn retransmissions_not_needed_are_said_beside_the_count() {
        let row = |t: &SideTotals| {
            let mut out = String::new();
            side_row(
                &mut out,
                "1",
                StreamDirection::Up,
                t,
                "sender",
                false,
                UnitFormat::Adaptive,
            );
            out
        };
        let mut t = SideTotals {
            bytes: 1_000_000,
            seconds: 1.0,
            bits_per_second: 8e6,
            retransmits: Some(4),
            dsack_dups: Some(2),
            reordering: Some(3),
            ..SideTotals::default()
        };
        assert!(
            row(&t).contains("retr 4 (2 not needed: D-SACK, reordered 3x)  sender"),
            "{}",
            row(&t)
        );
        t.reordering = Some(0);
        assert!(
            row(&t).contains("retr 4 (2 not needed: D-SACK)  sender"),
            "{}",
            row(&t)
        );
        // Nothing retransmitted, or a peer that does not say (iperf3): the count alone.
        t.retransmits = Some(0);
        assert!(row(&t).contains("retr 0  sender"), "{}", row(&t));
        t.retransmits = Some(4);
        t.dsack_dups = None;
        assert!(row(&t).contains("retr 4  sender"), "{}", row(&t));
    }
}
