//! The human-readable tables. A test's: one line per stream and interval, sum lines, the
//! final sender/receiver summary and the trace's diagnosis, built only from
//! [`TestResult`] parts, so it shows exactly what `--json` holds. Then `fetch`'s and the
//! ratio sweep's, `net show`'s plan and `sysinfo`'s.

use std::fmt::Write as _;

use crate::net::{EMULATOR_LATE_NOTED_MS, FAIRNESS_CC, NetCheck, STEAL_NOTED};
use crate::result::{
    EndInfo, Interval, Side, SideTotals, StartInfo, StreamDirection, TestResult, Trace, UdpInterval,
};
use crate::units::{Bytes, Rate, UnitFormat};

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
pub fn fetch(r: &crate::fetch::FetchResult) -> String {
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
pub fn sweep(r: &crate::fetch::SweepResult) -> String {
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
pub fn net_plan(p: &crate::net::PlanSummary) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "topology {}: {} hosts, {} routers, {} switches, {} links",
        p.name, p.hosts, p.routers, p.switches, p.links
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
        let s = &d.shape;
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
        let _ = writeln!(
            out,
            "  link {} {} -> {}: {}",
            d.link,
            d.from,
            d.to,
            v.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "paths (RTT = one-way delays there and back, rate = slowest link):"
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

/// `flowlab net check`: what it judged and how, then a row per path and round, Jain's
/// index after each round run together, and notes on the host's disturbances.
pub fn net_check(c: &NetCheck) -> String {
    let rows = &c.paths;
    let jain = &c.jain_index_by_congestion;
    let rate = |bps: f64| Rate(bps, UnitFormat::Adaptive).to_string();
    let opt =
        |v: Option<f64>, digits: usize| v.map_or("?".to_string(), |v| format!("{v:.digits$}"));
    let together = c.together;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "topology {}, emulation backend: {}",
        c.topology, c.backend
    );
    let what = if together {
        "every pair's TCP test at once"
    } else {
        "a TCP test per pair"
    };
    let ccs: Vec<String> = c
        .rounds
        .iter()
        .map(|cc| match cc.as_deref() {
            None => format!(
                "{} (the system's default; -C chooses)",
                c.congestion_default
            ),
            Some(FAIRNESS_CC) if together && !c.congestion_chosen => {
                format!("{FAIRNESS_CC} (loss-based, as the seed's kernels)")
            }
            Some(cc) if cc == c.congestion_default => format!("{cc} (the system's default)"),
            Some(cc) => cc.to_string(),
        })
        .collect();
    let _ = writeln!(
        out,
        "load: {what}, {} s after a first second left out, under {}",
        c.load_seconds,
        ccs.join(", then ")
    );
    let _ = writeln!(
        out,
        "judged: idle RTT (median of 20 echoes) within ±{:.1} ms of the file; loaded RTT (95th \
         percentile of echoes during the load) at most the queue bound + {:.1} ms; {}{}",
        c.rtt_tolerance_ms,
        c.rtt_tolerance_ms,
        if together {
            "rates not judged (shared links), shown beside their max-min fair share"
        } else {
            "rate within the bounds shown"
        },
        if rows.iter().any(|r| r.implied_loss_percent > 0.0) {
            format!(
                "; loss within ±{:.0} % of the file's",
                c.loss_tolerance_percent
            )
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        out,
        "{:<10} {:<6} {:>22} {:>32} {:>34} {:>18}  deviations",
        "path",
        "cc",
        "idle RTT (file ±tol)",
        "loaded RTT p95 ≤ bound (med/max)",
        if together {
            "rate (fair share)"
        } else {
            "rate (judged bounds)"
        },
        "loss (file bounds)",
    );
    let mut previous_cc: Option<&str> = None;
    let jain_line = |out: &mut String, cc: Option<&str>| {
        if let Some((cc, j)) = cc.and_then(|cc| jain.get_key_value(cc)) {
            let _ = writeln!(
                out,
                "Jain's fairness index over the pairs under {cc} (rate / fair share): {j:.3}"
            );
        }
    };
    for r in rows {
        let cc = r.congestion.as_deref().unwrap_or("?");
        if previous_cc.is_some_and(|p| p != cc) {
            jain_line(&mut out, previous_cc);
        }
        previous_cc = Some(cc);
        let name = if r.connections > 1 {
            format!("{}-{}:{}", r.from, r.to, r.connections)
        } else {
            format!("{}-{}", r.from, r.to)
        };
        let idle = format!(
            "{} ms ({:.1}±{:.1})",
            opt(r.measured_rtt_ms, 1),
            r.implied_rtt_ms,
            r.rtt_tolerance_ms
        );
        let loaded = match r.implied_bps {
            Some(_) => format!(
                "{} ≤ {:.1}+{:.0} ms ({}/{})",
                opt(r.loaded_rtt_p95_ms, 1),
                r.queue_bound_ms,
                r.rtt_tolerance_ms,
                opt(r.loaded_rtt_median_ms, 1),
                opt(r.loaded_rtt_ms, 1)
            ),
            // No rate limit, so no queue to bound.
            None => format!(
                "{} ms, no bound ({}/{})",
                opt(r.loaded_rtt_p95_ms, 1),
                opt(r.loaded_rtt_median_ms, 1),
                opt(r.loaded_rtt_ms, 1)
            ),
        };
        let reference = if together {
            r.fair_share_bps
                .map_or("(unlimited)".to_string(), |f| format!("({})", rate(f)))
        } else {
            match (r.rate_bounds_bps, r.implied_bps) {
                (Some([lo, hi]), _) => format!("({}–{})", rate(lo), rate(hi)),
                (None, None) => "(unlimited)".to_string(),
                (None, Some(_)) => "(random loss: not judged)".to_string(),
            }
        };
        let loss = match r.loss_bounds_percent {
            Some([lo, hi]) => format!("{} % ({lo:.2}–{hi:.2})", opt(r.measured_loss_percent, 2)),
            None => "-".to_string(),
        };
        let _ = writeln!(
            out,
            "{:<10} {:<6} {:>22} {:>32} {:>34} {:>18}  {}",
            name,
            cc,
            idle,
            loaded,
            format!("{} {reference}", rate(r.measured_bps)),
            loss,
            if r.deviations.is_empty() {
                "-".to_string()
            } else {
                r.deviations.join("; ")
            }
        );
        if !r.connection_bps.is_empty() {
            let each: Vec<String> = r.connection_bps.iter().map(|b| rate(*b)).collect();
            let _ = writeln!(out, "{:<10} connections: {}", "", each.join(", "));
        }
    }
    jain_line(&mut out, previous_cc);
    let disturbed: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            let steal = r.host_steal_percent.filter(|s| *s >= STEAL_NOTED)?;
            Some(format!("{}-{} ({steal:.0} %)", r.from, r.to))
        })
        .collect();
    if !disturbed.is_empty() {
        let _ = writeln!(
            out,
            "note: this machine's hypervisor took CPU time from it (steal) while these loads \
             ran: {}; their figures may be the host's, not the network's",
            disturbed.join(", ")
        );
    }
    let late: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            let late = r
                .emulator_late_p95_ms
                .filter(|l| *l >= EMULATOR_LATE_NOTED_MS)?;
            Some(format!("{}-{} ({late:.1} ms)", r.from, r.to))
        })
        .collect();
    if !late.is_empty() {
        let _ = writeln!(
            out,
            "note: the link emulator waited for a CPU while these loads ran, which their queue \
             bounds allow (95th percentile of its lateness summed over the links crossed, there \
             and back): {}; delays finer than that are the host's to decide, not the file's",
            late.join(", ")
        );
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
