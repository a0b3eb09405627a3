//! A test's result in iperf3's JSON shape (`flowlab test --iperf3-json`), so that tools
//! written for `iperf3 -J` (plotters, collectors, scripts reading
//! `end.sum_received.bits_per_second`) read flowlab's results unchanged. The keys and
//! their meaning are iperf3 3.12's; flowlab's own `-J` schema (docs/json-schema.md) is
//! richer and stays the default.
//!
//! Where iperf3 writes 0 for what one end cannot know (the receiving client's RTT and
//! congestion window), so does this; what flowlab does not sample at all is left out
//! rather than made up: [`LEFT_OUT`].

use flowlab_results::spec::{Amount, Direction, TestSpec};
use std::net::SocketAddr;
use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use flowlab_results::result::{
    EndStream, Interval, IntervalStream, ServerOutput, SideTotals, StartInfo, StreamDirection,
    TestResult,
};

/// Keys of iperf3's document that flowlab does not fill (paths as `a.b[].c`): the send
/// window and path MTU, which it does not sample.
pub const LEFT_OUT: [&str; 3] = [
    "intervals[].streams[].snd_wnd",
    "intervals[].streams[].pmtu",
    "end.streams[].sender.max_snd_wnd",
];

/// The document for `r`.
pub fn document(r: &TestResult) -> Value {
    let udp = crate::is_udp(r);
    let datagram = datagram(&r.start.spec);
    let intervals: Vec<Value> = r
        .intervals
        .iter()
        .map(|iv| interval(iv, datagram))
        .collect();
    let mut doc = json!({
        "start": start(&r.start, udp),
        "intervals": intervals,
        "end": r.end.as_ref().map_or_else(|| json!({}), |_| end(r, udp)),
    });
    // Where iperf3 puts them: at the top, after the end.
    for (key, text) in [
        ("title", &r.start.spec.title),
        ("extra_data", &r.start.spec.extra_data),
    ] {
        if let Some(text) = text {
            doc[key] = json!(text);
        }
    }
    match r.end.as_ref().and_then(|e| e.server_output.as_ref()) {
        Some(ServerOutput::Json(v)) => doc["server_output_json"] = v.clone(),
        Some(ServerOutput::Text(t)) => doc["server_output_text"] = json!(t),
        None => {}
    }
    doc
}

/// iperf3's `--json-stream` (3.17 on): one compact line an event, `{"event": NAME,
/// "data": …}`, as the test runs — `start` and each `interval` holding what `-J`'s
/// document holds under those keys; at the end `server_output_json` or
/// `server_output_text` (when asked for) and `end`. These are the start's line.
pub fn start_event(s: &StartInfo) -> String {
    event("start", start(s, is_udp(&s.spec)))
}

/// An interval's line of iperf3's `--json-stream`.
pub fn interval_event(iv: &Interval, spec: &TestSpec) -> String {
    event("interval", interval(iv, datagram(spec)))
}

/// The last lines of iperf3's `--json-stream` for a finished test.
pub fn end_events(r: &TestResult) -> String {
    let mut out = String::new();
    match r.end.as_ref().and_then(|e| e.server_output.as_ref()) {
        Some(ServerOutput::Json(v)) => out += &event("server_output_json", v.clone()),
        Some(ServerOutput::Text(t)) => out += &event("server_output_text", json!(t)),
        None => {}
    }
    out + &event("end", end(r, is_udp(&r.start.spec)))
}

/// The lines of iperf3's `--json-stream` when the test could not run: the error, then
/// an empty end.
pub fn error_events(message: &str) -> String {
    event("error", json!(message)) + &event("end", json!({}))
}

fn event(name: &str, data: Value) -> String {
    json!({"event": name, "data": data}).to_string() + "\n"
}

fn is_udp(spec: &TestSpec) -> bool {
    spec.protocol == flowlab_results::spec::Transport::Udp
}

/// A UDP test's datagram length, for the intervals' packet counts.
fn datagram(spec: &TestSpec) -> Option<u64> {
    is_udp(spec).then(|| (spec.len as u64).max(1))
}

/// What iperf3 prints with `-J` when the test could not run.
pub fn error_document(message: &str) -> Value {
    json!({"start": {}, "intervals": [], "end": {}, "error": message})
}

/// Whether this end sends in `d` (the client sends up).
fn sends(d: StreamDirection) -> bool {
    d == StreamDirection::Up
}

fn host_port(address: &str) -> (String, u16) {
    match address.parse::<SocketAddr>() {
        Ok(a) => (a.ip().to_string(), a.port()),
        Err(_) => (address.to_string(), 0),
    }
}

fn start(s: &StartInfo, udp: bool) -> Value {
    let spec = &s.spec;
    let connected: Vec<Value> = s
        .streams
        .iter()
        .map(|st| {
            let (local_host, local_port) = host_port(&st.local);
            let (remote_host, remote_port) = host_port(&st.remote);
            json!({
                "socket": st.id, "local_host": local_host, "local_port": local_port,
                "remote_host": remote_host, "remote_port": remote_port,
            })
        })
        .collect();
    let (seconds, bytes, blocks) = match spec.amount {
        Amount::Seconds(t) => (t, 0, 0),
        Amount::Bytes(n) => (0.0, n, 0),
        Amount::Blocks(k) => (0.0, 0, k),
    };
    let when = UNIX_EPOCH + Duration::from_secs(s.timestamp);
    let mut out = json!({
        "connected": connected,
        "version": format!("flowlab {}", s.flowlab_version),
        "system_info": format!("Linux {}", s.system.kernel.as_deref().unwrap_or("")),
        "timestamp": {"time": httpdate::fmt_http_date(when), "timesecs": s.timestamp},
        "connecting_to": {"host": spec.host, "port": spec.port},
        "cookie": s.cookie,
        "target_bitrate": spec.bitrate,
        "sock_bufsize": spec.window,
        "sndbuf_actual": s.streams.first().map_or(0, |st| st.sndbuf),
        "rcvbuf_actual": s.streams.first().map_or(0, |st| st.rcvbuf),
        "test_start": {
            // iperf3 names no QUIC: flowlab's QUIC tests say what they are.
            "protocol": match spec.protocol {
                flowlab_results::spec::Transport::Tcp => "TCP",
                flowlab_results::spec::Transport::Udp => "UDP",
                flowlab_results::spec::Transport::Quic => "QUIC",
            },
            "num_streams": spec.parallel,
            "blksize": spec.len,
            "omit": spec.omit,
            // iperf3's duration is whole seconds (0 when the test is of bytes or blocks).
            "duration": seconds.ceil() as u64,
            "bytes": bytes,
            "blocks": blocks,
            "reverse": u8::from(spec.direction == Direction::Reverse),
            "tos": spec.tos,
            "target_bitrate": spec.bitrate,
        },
    });
    if !udp {
        out["tcp_mss_default"] = json!(s.streams.first().and_then(|st| st.mss).unwrap_or(0));
    }
    out
}

/// Datagrams in `bytes`: the receiver's count where it has one, else (the sending end)
/// the bytes over the datagram length, every datagram being that long.
fn packets(bytes: u64, udp: Option<&flowlab_results::result::UdpInterval>, len: u64) -> u64 {
    udp.map_or(bytes / len, |u| u.packets)
}

/// The end of an interval row (a stream's or a sum), in iperf3's order: a UDP test's
/// packets and, where this end received, loss and jitter; then `omitted` and `sender`.
/// `udp` is the datagram length of a UDP test.
fn interval_tail(
    v: &mut Value,
    iv: &Interval,
    (bytes, direction): (u64, StreamDirection),
    counted: Option<&flowlab_results::result::UdpInterval>,
    udp: Option<u64>,
) {
    if let Some(len) = udp {
        v["packets"] = json!(packets(bytes, counted, len));
        if let Some(u) = counted.filter(|_| !sends(direction)) {
            v["jitter_ms"] = json!(u.jitter_ms);
            v["lost_packets"] = json!(u.lost);
            v["lost_percent"] = json!(u.lost_percent);
        }
    }
    v["omitted"] = json!(iv.omitted);
    v["sender"] = json!(sends(direction));
}

/// One stream's interval; `udp` the datagram length of a UDP test.
fn interval_stream(s: &IntervalStream, iv: &Interval, udp: Option<u64>) -> Value {
    let mut v = json!({
        "socket": s.id, "start": iv.start, "end": iv.end, "seconds": iv.end - iv.start,
        "bytes": s.bytes, "bits_per_second": s.bits_per_second,
    });
    if let Some(t) = s.tcp.as_ref().filter(|_| sends(s.direction)) {
        v["retransmits"] = json!(t.retransmits);
        v["snd_cwnd"] = json!(t.cwnd_bytes);
        v["rtt"] = json!(t.rtt_us);
        v["rttvar"] = json!(t.rttvar_us);
    }
    interval_tail(&mut v, iv, (s.bytes, s.direction), s.udp.as_ref(), udp);
    v
}

/// An interval; `udp` the datagram length of a UDP test.
fn interval(iv: &Interval, udp: Option<u64>) -> Value {
    let streams: Vec<Value> = iv
        .streams
        .iter()
        .map(|s| interval_stream(s, iv, udp))
        .collect();
    let mut out = json!({ "streams": streams });
    for (i, sum) in iv.sums.iter().enumerate() {
        let mut v = json!({
            "start": iv.start, "end": iv.end, "seconds": iv.end - iv.start,
            "bytes": sum.bytes, "bits_per_second": sum.bits_per_second,
        });
        if let Some(r) = sum
            .retransmits
            .filter(|_| udp.is_none() && sends(sum.direction))
        {
            v["retransmits"] = json!(r);
        }
        interval_tail(
            &mut v,
            iv,
            (sum.bytes, sum.direction),
            sum.udp.as_ref(),
            udp,
        );
        // iperf3's --bidir: the second direction is `sum_bidir_reverse`.
        let key = if i == 0 { "sum" } else { "sum_bidir_reverse" };
        out[key] = v;
    }
    out
}

/// One side's totals as iperf3 writes them: `sender` is whether this end sent.
fn totals(t: &SideTotals, socket: Option<i64>, local_sends: bool) -> Map<String, Value> {
    let mut m = Map::new();
    if let Some(id) = socket {
        m.insert("socket".into(), json!(id));
    }
    m.insert("start".into(), json!(0));
    m.insert("end".into(), json!(t.seconds));
    m.insert("seconds".into(), json!(t.seconds));
    m.insert("bytes".into(), json!(t.bytes));
    m.insert("bits_per_second".into(), json!(t.bits_per_second));
    m.insert("sender".into(), json!(local_sends));
    m
}

/// The RTT and window maxima of a sending stream, over its intervals (µs and bytes), as
/// iperf3 takes them from its own samples; 0 where this end did not send.
fn tcp_extremes(r: &TestResult, id: i64, local_sends: bool) -> Map<String, Value> {
    let samples: Vec<_> = r
        .intervals
        .iter()
        .flat_map(|iv| iv.streams.iter())
        .filter(|s| s.id == id && local_sends)
        .filter_map(|s| s.tcp.as_ref())
        .collect();
    let rtts: Vec<u64> = samples
        .iter()
        .map(|t| t.rtt_us)
        .filter(|&r| r > 0)
        .collect();
    let mean = if rtts.is_empty() {
        0
    } else {
        rtts.iter().sum::<u64>() / rtts.len() as u64
    };
    let mut m = Map::new();
    m.insert(
        "max_snd_cwnd".into(),
        json!(samples.iter().map(|t| t.cwnd_bytes).max().unwrap_or(0)),
    );
    m.insert(
        "max_rtt".into(),
        json!(rtts.iter().max().copied().unwrap_or(0)),
    );
    m.insert(
        "min_rtt".into(),
        json!(rtts.iter().min().copied().unwrap_or(0)),
    );
    m.insert("mean_rtt".into(), json!(mean));
    m
}

fn end_stream(r: &TestResult, s: &EndStream, udp: bool) -> Value {
    let local_sends = sends(s.direction);
    if udp {
        // iperf3's one `udp` object: the sender's bytes, the receiver's loss and jitter.
        let mut m = s
            .sender
            .as_ref()
            .or(s.receiver.as_ref())
            .map(|t| totals(t, Some(s.id), local_sends))
            .unwrap_or_default();
        if let Some(u) = s.receiver.as_ref().and_then(|t| t.udp.as_ref()) {
            m.insert("jitter_ms".into(), json!(u.jitter_ms));
            m.insert("lost_packets".into(), json!(u.lost));
            m.insert("packets".into(), json!(u.expected));
            m.insert("lost_percent".into(), json!(u.lost_percent));
            m.insert("out_of_order".into(), json!(u.out_of_order));
        }
        return json!({ "udp": m });
    }
    let mut out = Map::new();
    if let Some(t) = &s.sender {
        let mut m = totals(t, Some(s.id), local_sends);
        m.insert("retransmits".into(), json!(t.retransmits.unwrap_or(0)));
        m.extend(tcp_extremes(r, s.id, local_sends));
        out.insert("sender".into(), Value::Object(m));
    }
    if let Some(t) = &s.receiver {
        out.insert(
            "receiver".into(),
            Value::Object(totals(t, Some(s.id), local_sends)),
        );
    }
    Value::Object(out)
}

fn end(r: &TestResult, udp: bool) -> Value {
    let Some(e) = &r.end else {
        return json!({});
    };
    let streams: Vec<Value> = e.streams.iter().map(|s| end_stream(r, s, udp)).collect();
    let mut out = json!({ "streams": streams });
    for (i, sum) in e.sums.iter().enumerate() {
        let local_sends = sends(sum.direction);
        let suffix = if i == 0 { "" } else { "_bidir_reverse" };
        let udp_totals = sum.receiver.as_ref().and_then(|t| t.udp.as_ref());
        let with_udp = |mut m: Map<String, Value>| {
            if let Some(u) = udp_totals.filter(|_| udp) {
                m.insert("jitter_ms".into(), json!(u.jitter_ms));
                m.insert("lost_packets".into(), json!(u.lost));
                m.insert("packets".into(), json!(u.expected));
                m.insert("lost_percent".into(), json!(u.lost_percent));
            }
            Value::Object(m)
        };
        if let Some(t) = &sum.sender {
            let mut m = totals(t, None, local_sends);
            if !udp {
                m.insert("retransmits".into(), json!(t.retransmits.unwrap_or(0)));
            }
            out[format!("sum_sent{suffix}")] = with_udp(m);
        }
        if let Some(t) = &sum.receiver {
            out[format!("sum_received{suffix}")] = with_udp(totals(t, None, local_sends));
            if udp && i == 0 {
                // iperf3's UDP `sum`: the sender's bytes with the receiver's loss.
                let base = sum.sender.as_ref().unwrap_or(t);
                out["sum"] = with_udp(totals(base, None, local_sends));
            }
        }
    }
    let c = &e.cpu;
    out["cpu_utilization_percent"] = json!({
        "host_total": c.local_total, "host_user": c.local_user, "host_system": c.local_system,
        "remote_total": c.remote_total, "remote_user": c.remote_user,
        "remote_system": c.remote_system,
    });
    if !udp {
        let up = e.sums.first().is_none_or(|s| sends(s.direction));
        let (local, remote) = (&e.congestion_local, &e.congestion_remote);
        let (sender, receiver) = if up { (local, remote) } else { (remote, local) };
        out["sender_tcp_congestion"] = json!(sender.as_deref().unwrap_or(""));
        out["receiver_tcp_congestion"] = json!(receiver.as_deref().unwrap_or(""));
    }
    out
}

/// A server's test in iperf3's shape (`flowlab serve --iperf3-json`, `flowlab iperf3 -s
/// -J`), from its log's two events: who connected and what was asked (`start`), and what
/// the server received and sent (`end.sum_received`, `end.sum_sent`). Reduced: the server
/// keeps no intervals or per-stream rows, so `intervals` is empty and `end.streams` is
/// left out. `None` unless `started` and `finished` are one test's.
pub fn server_document(
    started: &flowlab_results::server::ServerEvent,
    finished: &flowlab_results::server::ServerEvent,
) -> Option<Value> {
    use flowlab_results::server::ServerEvent::{TestFinished, TestStarted};
    let (
        TestStarted {
            test,
            peer,
            protocol,
            streams,
            reverse,
            bidir,
            client,
            ..
        },
        TestFinished {
            test: same,
            bytes_received,
            bytes_sent,
            seconds,
            ..
        },
    ) = (started, finished)
    else {
        return None;
    };
    if test != same {
        return None;
    }
    let (host, port) = host_port(peer);
    // An IPv4 client of a dual-stack server, as iperf3 names it.
    let host = host
        .parse::<std::net::IpAddr>()
        .map_or(host.clone(), |ip| ip.to_canonical().to_string());
    let sum = |bytes: u64, sender: bool| {
        json!({
            "start": 0, "end": seconds, "seconds": seconds, "bytes": bytes,
            "bits_per_second": if *seconds > 0.0 { bytes as f64 * 8.0 / seconds } else { 0.0 },
            "sender": sender,
        })
    };
    Some(json!({
        "start": {
            "version": format!("flowlab {}", env!("CARGO_PKG_VERSION")),
            "accepted_connection": {"host": host, "port": port},
            "client_version": client,
            "test_start": {
                "protocol": protocol.to_uppercase(),
                "num_streams": streams,
                "reverse": u8::from(*reverse),
                "bidir": u8::from(*bidir),
            },
        },
        "intervals": [],
        "end": {
            "sum_sent": sum(*bytes_sent, true),
            "sum_received": sum(*bytes_received, false),
        },
    }))
}
