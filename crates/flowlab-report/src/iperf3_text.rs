//! A test's human output as iperf 3.12 prints it (`flowlab iperf3 -c …`, `flowlab test
//! --iperf3-text`): "Connecting to host", the connected lines, the interval rows, the
//! sender and receiver summary and "iperf Done.", column for column, so that a script
//! written for iperf3's text (`awk '/receiver/ {print $7}'`) reads flowlab's the same.
//!
//! The figures are flowlab's own, as its JSON has them; only the layout is iperf3's. Two
//! things differ by design: a stream's id is flowlab's (iperf3 prints its socket's file
//! descriptor, 5, 7, …), and a figure that would round to a whole next unit is printed
//! in that unit ("1.00 Gbits/sec", where iperf3 may print "1000 Mbits/sec").

use flowlab_results::result::{
    EndStream, Interval, IntervalStream, ServerOutput, SideTotals, StartInfo, StreamDirection,
    TestResult,
};
use flowlab_results::spec::{Direction, TestSpec};

use crate::units::{Bytes, Rate, UnitFormat};

/// iperf3's line between the intervals and the summary (and between intervals of several
/// streams).
const SEPARATOR: &str = "- - - - - - - - - - - - - - - - - - - - - - - - -\n";

/// The lines iperf3 prints as the test starts: whom it connects to, the direction of a
/// reverse test, and each stream's addresses.
pub fn start(s: &StartInfo) -> String {
    let spec = &s.spec;
    let mut out = format!("Connecting to host {}, port {}\n", spec.host, spec.port);
    if spec.direction == Direction::Reverse {
        out += &format!("Reverse mode, remote host {} is sending\n", spec.host);
    }
    for st in &s.streams {
        let (local, local_port) = host_port(&st.local);
        let (remote, remote_port) = host_port(&st.remote);
        out += &format!(
            "[{:3}] local {local} port {local_port} connected to {remote} port {remote_port}\n",
            st.id
        );
    }
    out
}

/// One interval: its header before the first (the one that begins at 0, as iperf3 decides,
/// so again after `-O`'s omitted seconds), a separator before each later one of a test
/// of several streams, then each stream's row and, with several streams, each
/// direction's sum.
pub fn interval(iv: &Interval, spec: &TestSpec, f: UnitFormat) -> String {
    let udp = udp(spec);
    let bidir = spec.direction == Direction::Bidir;
    let mut out = String::new();
    if iv.start <= 0.0 {
        let client_sends = spec.direction != Direction::Reverse;
        out += &header(
            match (udp, spec.direction) {
                (false, _) if client_sends => "Retr  Cwnd",
                (false, _) => "",
                (true, Direction::Forward) => "Total Datagrams",
                (true, _) => "Jitter    Lost/Total Datagrams",
            },
            bidir,
        );
    } else if spec.parallel > 1 {
        out += SEPARATOR;
    }
    let len = datagram(spec);
    for direction in [StreamDirection::Up, StreamDirection::Down] {
        let role = role(bidir, direction);
        for s in iv.streams.iter().filter(|s| s.direction == direction) {
            let lead = format!("[{:3}]{role}", s.id);
            out += &interval_row(&lead, iv, s.bytes, s.bits_per_second, f);
            out += &interval_tail(s, direction, len, bidir);
            out += &omitted(iv);
        }
        let Some(sum) = iv.sums.iter().find(|s| s.direction == direction) else {
            continue;
        };
        if spec.parallel < 2 {
            continue;
        }
        out += &interval_row(
            &format!("[SUM]{role}"),
            iv,
            sum.bytes,
            sum.bits_per_second,
            f,
        );
        match (len, &sum.udp) {
            (None, _) => match sum.retransmits.filter(|_| sends(direction)) {
                Some(r) => out += &format!("  {r:3}             "),
                None => out += &" ".repeat(18),
            },
            (Some(len), counted) if sends(direction) => {
                let packets = counted.map_or(sum.bytes / len, |u| u.packets);
                out += &format!(" {} {packets}  ", pad(bidir));
            }
            (Some(_), counted) => {
                let u = counted.unwrap_or_default();
                out += &loss(u.jitter_ms, u.lost, u.expected, u.lost_percent);
            }
        }
        out += &omitted(iv);
    }
    out
}

/// The summary, the server's output when asked for, and "iperf Done." — which, as
/// iperf3's, a test cut short (Ctrl-C) does not print.
pub fn finish(r: &TestResult, f: UnitFormat) -> String {
    let spec = &r.start.spec;
    let udp = udp(spec);
    let bidir = spec.direction == Direction::Bidir;
    let len = datagram(spec).unwrap_or(1);
    let mut out = String::new();
    if let Some(end) = &r.end {
        out += SEPARATOR;
        out += &header(
            if udp {
                "Jitter    Lost/Total Datagrams"
            } else {
                "Retr"
            },
            bidir,
        );
        for direction in [StreamDirection::Up, StreamDirection::Down] {
            let role = role(bidir, direction);
            for s in end.streams.iter().filter(|s| s.direction == direction) {
                out += &summary_stream(s, &format!("[{:3}]{role}", s.id), udp, len, f);
            }
            let Some(sum) = end.sums.iter().find(|s| s.direction == direction) else {
                continue;
            };
            if spec.parallel < 2 {
                continue;
            }
            let lead = format!("[SUM]{role}");
            if let Some(t) = &sum.sender {
                out += &summary_row(&lead, t, f);
                out += &sender_tail(t, udp, len);
            }
            if let Some(t) = &sum.receiver {
                out += &summary_row(&lead, t, f);
                out += &receiver_tail(t, udp);
            }
        }
        match &end.server_output {
            Some(ServerOutput::Text(t)) => out += &format!("\nServer output:\n{t}\n"),
            Some(ServerOutput::Json(v)) => {
                let pretty = serde_json::to_string_pretty(v).unwrap_or_default();
                out += &format!("\nServer JSON output:\n{pretty}\n");
            }
            None => {}
        }
    }
    if r.end.as_ref().is_some_and(|e| e.interrupted) {
        return out;
    }
    out + "\niperf Done.\n"
}

/// A stream's sender and receiver lines (and its out-of-order count, as iperf3 prints
/// it, under `[SUM]`).
fn summary_stream(s: &EndStream, lead: &str, udp: bool, len: u64, f: UnitFormat) -> String {
    let mut out = String::new();
    if let Some(t) = &s.sender {
        out += &summary_row(lead, t, f);
        out += &sender_tail(t, udp, len);
    }
    let reordered = s
        .receiver
        .as_ref()
        .and_then(|t| t.udp)
        .map_or(0, |u| u.out_of_order);
    if reordered > 0 {
        let seconds = s
            .sender
            .as_ref()
            .or(s.receiver.as_ref())
            .map_or(0.0, |t| t.seconds);
        let role = &lead[5..];
        out += &format!(
            "[SUM]{role} {:4.1}-{seconds:4.1} sec  {reordered} datagrams received out-of-order\n",
            0.0
        );
    }
    if let Some(t) = &s.receiver {
        out += &summary_row(lead, t, f);
        out += &receiver_tail(t, udp);
    }
    out
}

/// `[ID] Interval           Transfer     Bitrate` and the columns after it.
fn header(columns: &str, bidir: bool) -> String {
    let id = if bidir { "[ ID][Role]" } else { "[ ID]" };
    if columns.is_empty() {
        format!("{id} Interval           Transfer     Bitrate\n")
    } else {
        format!("{id} Interval           Transfer     Bitrate         {columns}\n")
    }
}

/// A row's interval, transfer and bit rate, after its lead (`[  5]`, `[SUM][TX-C]`).
fn interval_row(lead: &str, iv: &Interval, bytes: u64, bps: f64, f: UnitFormat) -> String {
    format!(
        "{lead} {:6.2}-{:<6.2} sec  {:#}  {:#}",
        iv.start,
        iv.end,
        Bytes(bytes, UnitFormat::Adaptive),
        Rate(bps, f)
    )
}

/// A stream's columns after its bit rate, as its end sees it: a TCP sender's
/// retransmissions and window, a UDP sender's datagrams, a UDP receiver's loss.
fn interval_tail(
    s: &IntervalStream,
    direction: StreamDirection,
    len: Option<u64>,
    bidir: bool,
) -> String {
    match (len, &s.tcp) {
        (None, Some(t)) if sends(direction) => format!(
            "  {:3}   {:#}       ",
            t.retransmits,
            Bytes(t.cwnd_bytes, UnitFormat::Adaptive)
        ),
        (None, _) => " ".repeat(18),
        (Some(len), _) if sends(direction) => {
            let packets = s.udp.map_or(s.bytes / len, |u| u.packets);
            format!(" {} {packets}  ", pad(bidir))
        }
        (Some(_), _) => {
            let u = s.udp.unwrap_or_default();
            loss(u.jitter_ms, u.lost, u.expected, u.lost_percent)
        }
    }
}

/// A summary row's interval (from 0), transfer and bit rate.
fn summary_row(lead: &str, t: &SideTotals, f: UnitFormat) -> String {
    format!(
        "{lead} {:6.2}-{:<6.2} sec  {:#}  {:#}",
        0.0,
        t.seconds,
        Bytes(t.bytes, UnitFormat::Adaptive),
        Rate(t.bits_per_second, f)
    )
}

/// A sender's summary columns: TCP's retransmissions, UDP's datagrams sent (and no loss,
/// which the sender cannot see).
fn sender_tail(t: &SideTotals, udp: bool, len: u64) -> String {
    if udp {
        let packets = t.packets.unwrap_or(t.bytes / len);
        loss(0.0, 0, packets, 0.0) + "sender\n"
    } else {
        match t.retransmits {
            Some(r) => format!("  {r:3}             sender\n"),
            None => format!("{}sender\n", " ".repeat(18)),
        }
    }
}

/// A receiver's summary columns: UDP's jitter and loss.
fn receiver_tail(t: &SideTotals, udp: bool) -> String {
    match t.udp.filter(|_| udp) {
        Some(u) => loss(u.jitter_ms, u.lost, u.expected, u.lost_percent) + "receiver\n",
        None if udp => loss(0.0, 0, 0, 0.0) + "receiver\n",
        None => format!("{}receiver\n", " ".repeat(18)),
    }
}

/// `  0.036 ms  0/77 (0%)  `: jitter, datagrams lost of those sent, and the share lost.
fn loss(jitter_ms: f64, lost: u64, total: u64, percent: f64) -> String {
    format!(
        "  {jitter_ms:5.3} ms  {lost}/{total} ({})  ",
        g2(percent) + "%"
    )
}

/// `(omitted)` after a row inside `-O`'s seconds, and the line's end.
fn omitted(iv: &Interval) -> String {
    if iv.omitted { "(omitted)\n" } else { "\n" }.into()
}

/// `[TX-C]` or `[RX-C]` in a bidirectional test, nothing otherwise.
fn role(bidir: bool, direction: StreamDirection) -> &'static str {
    match (bidir, sends(direction)) {
        (false, _) => "",
        (true, true) => "[TX-C]",
        (true, false) => "[RX-C]",
    }
}

/// The blank column a bidirectional test's UDP sender rows keep under "Jitter".
fn pad(bidir: bool) -> &'static str {
    if bidir { "          " } else { "" }
}

/// Whether this end (the client) sends in `d`.
fn sends(d: StreamDirection) -> bool {
    d == StreamDirection::Up
}

fn udp(spec: &TestSpec) -> bool {
    spec.protocol == flowlab_results::spec::Transport::Udp
}

/// A UDP test's datagram length, never 0.
fn datagram(spec: &TestSpec) -> Option<u64> {
    udp(spec).then(|| (spec.len as u64).max(1))
}

fn host_port(address: &str) -> (String, u16) {
    match address.parse::<std::net::SocketAddr>() {
        // A v4 peer of a dual-stack socket, as iperf3 names it.
        Ok(a) => (a.ip().to_canonical().to_string(), a.port()),
        Err(_) => (address.to_string(), 0),
    }
}

/// `v` as C's `%.2g` writes it: two significant digits, no trailing zeros, an exponent
/// outside 1e-4 ≤ |v| < 100 ("0", "0.5", "12", "1e+02").
fn g2(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return if v.is_nan() {
            "nan".into()
        } else {
            format!("{v}")
        };
    }
    // The exponent after rounding to two digits, as C decides between the two forms.
    let rounded: f64 = format!("{v:.1e}").parse().unwrap_or(v);
    let exp = rounded.abs().log10().floor() as i32;
    if !(-4..2).contains(&exp) {
        let (mantissa, e) = format!("{v:.1e}")
            .split_once('e')
            .map(|(m, e)| (m.to_string(), e.parse::<i32>().unwrap_or(0)))
            .unwrap_or_default();
        let mantissa = mantissa.trim_end_matches('0').trim_end_matches('.');
        let sign = if e < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", e.abs());
    }
    let decimals = (1 - exp).max(0) as usize;
    let text = format!("{v:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_are_written_as_c_writes_two_significant_digits() {
        for (v, c) in [
            (0.0, "0"),
            (0.5, "0.5"),
            (12.3, "12"),
            (12.5, "12"),
            (9.96, "10"),
            (99.6, "1e+02"),
            (100.0, "1e+02"),
            (0.0012, "0.0012"),
            (0.000012, "1.2e-05"),
            (1.0, "1"),
            (3.25, "3.2"),
            (0.099, "0.099"),
            (0.000_099_96, "0.0001"),
        ] {
            assert_eq!(g2(v), c, "{v}");
        }
    }
}
