//! `flowlab test --quic` against `flowlab serve --quic` on loopback: the QUIC performance
//! protocol measured into the same result a TCP test gives — exact byte counts both
//! ways, intervals that add up to the totals, several streams on one connection or a
//! connection each, the stack's figures — and what a QUIC test cannot do refused, naming
//! the flag.

mod support;

use std::process::{Command, Stdio};

use serde_json::Value;
use support::{Reaped, await_listening, free_ports, usage_error};

/// A `flowlab serve`'s ports beside its TCP and UDP one: QUIC's and HTTP's (when asked
/// for).
struct Ports {
    quic: u16,
    http: u16,
}

/// `flowlab serve -p TCP --quic=QUIC [--http 127.0.0.1:HTTP] ARGS`, listening, its
/// standard output where `stdout` says.
fn start_serve(http: bool, args: &[&str], stdout: Stdio) -> (std::process::Child, Ports) {
    let tcp = free_ports(3);
    let ports = Ports {
        quic: tcp + 1,
        http: tcp + 2,
    };
    let mut command = Command::new(env!("CARGO_BIN_EXE_flowlab"));
    command
        .args(["serve", "-p", &tcp.to_string()])
        .arg(format!("--quic={}", ports.quic));
    if http {
        command.args(["--http", &format!("127.0.0.1:{}", ports.http)]);
    }
    let mut child = command
        .args(args)
        .stdout(stdout)
        .stderr(Stdio::null())
        .spawn()
        .expect("serve");
    // The QUIC socket is bound before the TCP listener: once this listens, a QUIC
    // client's first packets wait in the socket for the server to start. What it says
    // meanwhile waits in its pipe.
    await_listening(tcp, Some(&mut child), "flowlab serve --quic");
    (child, ports)
}

/// `flowlab serve --quic ARGS`, listening, silent: itself and its QUIC port.
fn serve(args: &[&str]) -> (Reaped, u16) {
    let (child, ports) = start_serve(false, args, Stdio::null());
    (Reaped(child), ports.quic)
}

/// aioquic's perf server on a port of its own with a certificate made in `dir`, listening
/// (`silent`: it never ends its side of a stream): itself and its port.
fn aioquic_server(python: &std::path::Path, dir: &std::path::Path, silent: bool) -> (Reaped, u16) {
    let (cert, key) = support::openssl_certificate(dir, "DNS:localhost,IP:127.0.0.1");
    let port = free_ports(1);
    let mut child = Command::new(python)
        .arg(AIOQUIC_PERF)
        .args(["server", &port.to_string()])
        .args([&cert, &key])
        .args(silent.then_some("silent"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("aioquic's server");
    let mut said = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().expect("its stdout")),
        &mut said,
    )
    .expect("its first line");
    assert_eq!(said.trim(), "listening", "aioquic's server");
    (Reaped(child), port)
}

/// `flowlab test 127.0.0.1 --quic -p PORT ARGS -J`: its status and document.
fn test(quic: u16, args: &[&str]) -> (std::process::ExitStatus, Value, String) {
    let out = test_command(quic)
        .arg("-J")
        .args(args)
        .output()
        .expect("test");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let doc = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {stderr}"));
    (out.status, doc, stderr)
}

/// `flowlab test 127.0.0.1 --quic -p QUIC`, to be given the rest.
fn test_command(quic: u16) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_flowlab"));
    c.args(["test", "127.0.0.1", "--quic", "-p", &quic.to_string()]);
    c
}

fn sum<'a>(doc: &'a Value, direction: &str) -> &'a Value {
    doc["end"]["sums"]
        .as_array()
        .expect("sums")
        .iter()
        .find(|s| s["direction"] == direction)
        .unwrap_or_else(|| panic!("no {direction} sum in {doc}"))
}

/// A direction's intervals add up to its `total`, but for a last part shorter than 10 %
/// of `-i`, which only the totals hold (docs/metrics.md, "Intervals"): never more than
/// the total, and short of it by less than a whole interval's bytes at the most — or,
/// when the bytes were all handed over within 10 % of `-i`, no interval at all.
fn intervals_add_up(doc: &Value, direction: &str, total: u64) {
    let per_interval: Vec<u64> = doc["intervals"]
        .as_array()
        .expect("intervals")
        .iter()
        .map(|iv| {
            iv["streams"]
                .as_array()
                .expect("streams")
                .iter()
                .filter(|s| s["direction"] == direction)
                .map(|s| s["bytes"].as_u64().expect("bytes"))
                .sum()
        })
        .collect();
    let counted: u64 = per_interval.iter().sum();
    let most = per_interval.iter().copied().max().unwrap_or(0);
    assert!(
        per_interval.is_empty() || (counted <= total && total - counted <= most),
        "{direction}: intervals {per_interval:?} against {total} bytes"
    );
}

#[test]
fn every_byte_asked_for_is_counted_both_ways_and_in_the_intervals() {
    let (_server, quic) = serve(&[]);
    for (way, args, direction) in [
        ("upload", &["-n", "24M", "-i", "0.1"][..], "up"),
        ("download", &["-n", "24M", "-i", "0.1", "-R"][..], "down"),
    ] {
        let (status, doc, stderr) = test(quic, args);
        assert!(status.success(), "{way}: {stderr}");
        assert_eq!(doc["start"]["spec"]["protocol"], "quic", "{way}");
        assert_eq!(doc["start"]["peer"]["kind"], "quic-perf", "{way}");
        let s = sum(&doc, direction);
        assert_eq!(s["receiver"]["bytes"], 24 << 20, "{way}: {s}");
        intervals_add_up(&doc, direction, 24 << 20);
        let q = &doc["end"]["quic"];
        assert_eq!(q["connections"].as_array().map(Vec::len), Some(1), "{way}");
        let c = &q["connections"][0];
        // The stack's own figures: a round trip measured, and at least the payload on
        // the wire the way it went.
        assert!(c["rtt_us"].as_u64().is_some_and(|r| r > 0), "{way}: {c}");
        let wire = match direction {
            "up" => &c["udp_sent_bytes"],
            _ => &c["udp_received_bytes"],
        };
        assert!(wire.as_u64().is_some_and(|w| w > 24 << 20), "{way}: {c}");
        match direction {
            // An upload's receiver is the server, which ended its side once it had read
            // every byte; its sender's time ends with the server's acknowledgement of
            // the last byte, not when the stack took it into its buffers (24 MiB fit
            // them: that was an instant, and a rate of terabits).
            "up" => {
                let (snd, rcv) = (&s["sender"], &s["receiver"]);
                assert_eq!(snd["bytes"], 24 << 20);
                let rate = |t: &Value| t["bits_per_second"].as_f64().expect("a rate");
                assert!(rate(snd) < 2.0 * rate(rcv), "{s}");
                assert!(snd["retransmits"].is_u64(), "{s}");
            }
            // A download's sender, the server, tells the client nothing.
            _ => assert!(s["sender"].is_null(), "{s}"),
        }
    }
}

#[test]
fn streams_share_a_connection_or_have_one_each_both_ways_at_once() {
    let (_server, quic) = serve(&[]);
    for (args, connections) in [
        (&["-t", "1", "-P", "2", "--bidir"][..], 1),
        (
            &["-t", "1", "-P", "2", "--bidir", "--quic-connections"][..],
            4,
        ),
    ] {
        let (status, doc, stderr) = test(quic, args);
        assert!(status.success(), "{args:?}: {stderr}");
        let streams = doc["end"]["streams"].as_array().expect("streams");
        assert_eq!(streams.len(), 4, "{args:?}");
        for s in streams {
            let moved = match s["direction"].as_str() {
                Some("up") => &s["sender"]["bytes"],
                _ => &s["receiver"]["bytes"],
            };
            assert!(moved.as_u64().is_some_and(|b| b > 0), "{args:?}: {s}");
        }
        let q = &doc["end"]["quic"];
        assert_eq!(
            q["connections"].as_array().map(Vec::len),
            Some(connections),
            "{args:?}"
        );
        assert_eq!(q["connection_each"], connections > 1, "{args:?}");
        // Each direction ran about its second.
        for direction in ["up", "down"] {
            let seconds = sum(&doc, direction)["receiver"]["seconds"]
                .as_f64()
                .expect("seconds");
            assert!(
                (0.9..5.0).contains(&seconds),
                "{args:?} {direction}: {seconds}"
            );
        }
    }
}

/// -C picks the stack's congestion controller, and the result says which ran.
#[test]
fn the_congestion_controller_asked_for_is_the_one_named() {
    let (_server, quic) = serve(&[]);
    for cc in ["cubic", "bbr", "reno"] {
        let (status, doc, stderr) = test(quic, &["-n", "4M", "-C", cc]);
        assert!(status.success(), "{cc}: {stderr}");
        let named = if cc == "reno" { "newreno" } else { cc };
        assert_eq!(doc["end"]["quic"]["congestion"], named, "{cc}");
        assert_eq!(doc["start"]["streams"][0]["congestion"], named, "{cc}");
    }
}

/// A stream the server refuses (more than its --max-bytes) fails the test with why.
#[test]
fn a_stream_the_server_refuses_fails_the_test() {
    let (_server, quic) = serve(&["--max-bytes", "1M"]);
    let (status, doc, stderr) = test(quic, &["-n", "2M", "-R"]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("every stream failed"), "{stderr}");
    let failed = &doc["end"]["failed_streams"][0];
    assert!(
        failed["error"]
            .as_str()
            .is_some_and(|e| e.contains("error 2")),
        "{failed}"
    );
}

#[test]
fn a_server_that_does_not_answer_is_named() {
    let port = free_ports(1);
    let out = Command::new(env!("CARGO_BIN_EXE_flowlab"))
        .args([
            "test",
            "127.0.0.1",
            "--quic",
            "-p",
            &port.to_string(),
            "-t",
            "1",
        ])
        .args(["--connect-timeout", "1000"])
        .output()
        .expect("test");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot connect to 127.0.0.1:{port} over QUIC: no handshake within 1.0 s"
        )),
        "{stderr}"
    );
}

/// `--trace-csv` of a QUIC upload on loopback: the table says how many samples were
/// taken and why there is no diagnosis; the CSV has the stack's columns filled on every
/// row; `flowlab plot` draws the window and RTT graphs from its document.
#[test]
fn a_quic_trace_is_written_as_csv_and_plotted() {
    let (_server, quic) = serve(&[]);
    let dir = tempfile::tempdir().expect("a directory");
    let csv = dir.path().join("t.csv");
    let out = test_command(quic)
        .args(["-t", "1", "--trace-csv"])
        .arg(&csv)
        .output()
        .expect("test");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(table.contains("Trace: every 10 ms, "), "{table}");
    assert!(
        table.contains(
            "A QUIC test traces this end's stack, which reports no bytes in flight: no diagnosis."
        ),
        "{table}"
    );
    let text = std::fs::read_to_string(&csv).expect("the CSV");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(rows.len() >= 10, "{} rows", rows.len());
    for column in [
        "srtt_us",
        "quic_cwnd_bytes",
        "quic_lost_packets",
        "bytes_sent",
    ] {
        let i = header.iter().position(|h| *h == column).expect(column);
        assert!(
            rows.iter().all(|r| r[i].parse::<u64>().is_ok()),
            "{column}: a row without it"
        );
    }
    let (status, doc, stderr) = test(quic, &["-t", "1", "--trace=50ms"]);
    assert!(status.success(), "{stderr}");
    let json = dir.path().join("t.json");
    std::fs::write(&json, doc.to_string()).expect("write");
    for graph in ["window", "rtt"] {
        let svg = dir.path().join(format!("{graph}.svg"));
        let plot = Command::new(env!("CARGO_BIN_EXE_flowlab"))
            .arg("plot")
            .arg(&json)
            .args(["-g", graph, "-o"])
            .arg(&svg)
            .output()
            .expect("plot");
        assert!(
            plot.status.success(),
            "{graph}: {}",
            String::from_utf8_lossy(&plot.stderr)
        );
        let drawn = std::fs::read_to_string(&svg).expect("the SVG");
        assert!(
            drawn.contains("<path") || drawn.contains("<polyline"),
            "{graph}: nothing drawn"
        );
    }
}

#[test]
fn what_a_quic_test_cannot_do_is_refused_naming_the_flag() {
    for (args, names) in [
        (&["-k", "10"][..], "-k/--blockcount"),
        (&["-b", "10M"][..], "-b/--bitrate"),
        (&["-w", "1M"][..], "-w/--window"),
        (&["-C", "vegas"][..], "-C/--congestion vegas"),
        (&["-u"][..], "--udp"),
    ] {
        let mut all = vec!["test", "127.0.0.1", "--quic"];
        all.extend_from_slice(args);
        usage_error(&all, names);
    }
    usage_error(&["test", "127.0.0.1", "--quic-connections"], "--quic");
    usage_error(
        &["serve", "--tls-cert", "a.pem", "--tls-key", "a.key"],
        "--tls-cert",
    );
    usage_error(&["serve", "--quic=70000"], "--quic");
}

/// The Python of a virtual environment holding aioquic, the second QUIC stack
/// (`$FLOWLAB_AIOQUIC_PYTHON`, as scripts/test.sh makes it, or `target/aioquic`); `None`
/// (the test skipped, saying why) outside CI when there is none.
fn aioquic() -> Option<std::path::PathBuf> {
    let python = std::env::var_os("FLOWLAB_AIOQUIC_PYTHON").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/aioquic/bin/python"),
        std::path::PathBuf::from,
    );
    let found = Command::new(&python)
        .args(["-c", "import aioquic"])
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some(python);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "aioquic is required in CI: scripts/test.sh installs it into target/aioquic"
    );
    support::skip("no aioquic: scripts/test.sh installs it into target/aioquic");
    None
}

const AIOQUIC_PERF: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/aioquic_perf.py"
);

/// aioquic's perf client against `flowlab serve --quic`: every byte asked for comes back,
/// every byte sent is read to the end (the server's end of the stream says so).
#[test]
fn aioquics_perf_client_is_served_both_ways() {
    let Some(python) = aioquic() else {
        return;
    };
    let (_server, quic) = serve(&[]);
    for way in ["upload", "download"] {
        let out = Command::new(&python)
            .args([AIOQUIC_PERF, "client", &quic.to_string(), way, "8000000"])
            .output()
            .expect("aioquic's client");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{way}: {stderr}");
        let r: Value = serde_json::from_slice(&out.stdout).expect("its JSON line");
        let (sent, received) = match way {
            "upload" => (8_000_000, 0),
            _ => (0, 8_000_000),
        };
        assert_eq!(
            (r["sent"].as_u64(), r["received"].as_u64()),
            (Some(sent), Some(received)),
            "{way}: {r}"
        );
    }
}

/// `flowlab test --quic` against aioquic's perf server: the same exact totals as against
/// flowlab's own, both ways.
#[test]
fn flowlab_measures_aioquics_perf_server_both_ways() {
    let Some(python) = aioquic() else {
        return;
    };
    let dir = tempfile::tempdir().expect("a directory");
    let (_server, port) = aioquic_server(&python, dir.path(), false);
    for (args, direction) in [(&["-n", "8M"][..], "up"), (&["-n", "8M", "-R"][..], "down")] {
        let (status, doc, stderr) = test(port, args);
        assert!(status.success(), "{args:?}: {stderr}");
        assert_eq!(
            sum(&doc, direction)["receiver"]["bytes"],
            8 << 20,
            "{args:?}"
        );
        intervals_add_up(&doc, direction, 8 << 20);
    }
}

/// QUIC across an emulated 50 Mbit/s link losing 1 % of its packets each way: under
/// quinn's cubic no interval counts more than the link carries (bytes only buffered
/// by the stack are not moved), and the transfer never stops, both ways — no two intervals in a row
/// without new bytes (one can be empty: a tail loss's probe timeouts double from three
/// round trips, 60 + 120 + 240 + 480 ms, when the host starves the emulator); under its
/// bbr too the test ends on time with its losses counted — but quinn's bbr
/// (experimental in quinn) overshoots there, to a 3 MB window and 260 ms of queue on a
/// 125 KB path, and a second of it may move nothing new while it resends
/// (docs/lab-notes/quic.md), so no interval is asked of it.
#[test]
fn quic_over_a_lossy_emulated_link_counts_its_losses_and_never_stops() {
    if !support::is_root_with_ip("the lossy link is emulated in namespaces") {
        return;
    }
    let _machine = support::machine_shared();
    let dir = tempfile::tempdir().expect("a directory");
    let topology = "name = \"tquic\"\nhosts = [\"c\", \"s\"]\n[[link]]\nends = [\"c\", \"s\"]\nrate = \"50M\"\ndelay = \"10ms\"\nloss = 0.01\n";
    let _down = support::net_up(dir.path(), "tquic", topology);
    let flowlab = env!("CARGO_BIN_EXE_flowlab");
    let mut serving = Reaped(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                "fl-tquic-s",
                flowlab,
                "serve",
                "-p",
                "5201",
            ])
            .arg("--quic")
            .stdout(Stdio::null())
            .spawn()
            .expect("serve"),
    );
    support::await_listening_in("fl-tquic-c", "10.0.1.2:5201", &mut serving.0);
    for (cc, reverse) in [("cubic", false), ("cubic", true), ("bbr", false)] {
        let what = format!("{cc}{}", if reverse { " -R" } else { "" });
        let mut c = Command::new("ip");
        c.args([
            "netns",
            "exec",
            "fl-tquic-c",
            flowlab,
            "test",
            "10.0.1.2",
            "--quic",
        ])
        .args(["-t", "4", "-C", cc, "-J", "--trace=100ms"]);
        if reverse {
            c.arg("-R");
        }
        let out = c.output().expect("flowlab test");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{what}: {stderr}");
        let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let intervals = doc["intervals"].as_array().expect("intervals");
        assert!(
            intervals.len() >= 4,
            "{what}: {} intervals",
            intervals.len()
        );
        let moved: Vec<u64> = intervals
            .iter()
            .map(|iv| iv["sums"][0]["bytes"].as_u64().expect("bytes"))
            .collect();
        assert!(
            cc != "cubic" || moved.windows(2).all(|w| w[0] + w[1] > 0),
            "{what}: stalled: {moved:?}"
        );
        // What an interval counts crossed the link, not only the stack's buffers: at
        // most the link's 50 Mbit/s for its time, and a send window of a lossy cubic's
        // small congestion window (bbr's overshoot, above, is let be).
        for (iv, &bytes) in intervals.iter().zip(&moved) {
            let seconds = iv["end"].as_f64().expect("end") - iv["start"].as_f64().expect("start");
            assert!(
                cc != "cubic" || bytes as f64 <= 50e6 / 8.0 * seconds + f64::from(1 << 20),
                "{what}: {bytes} bytes in {seconds} s: more than the link carries: {moved:?}"
            );
        }
        let c = &doc["end"]["quic"]["connections"][0];
        if !reverse {
            // ~1 % of the ~17 000 packets it sent at most: never none.
            let lost = c["lost_packets"].as_u64().expect("lost packets");
            assert!(lost > 0, "{what}: no loss counted: {c}");
            let retr = sum(&doc, "up")["sender"]["retransmits"].as_u64();
            assert_eq!(retr, Some(lost), "{what}");
        }
        let direction = if reverse { "down" } else { "up" };
        let received = sum(&doc, direction)["receiver"]["bytes"].as_u64();
        assert!(received.is_some_and(|b| b > 0), "{what}");
        traced_as_the_stack_saw_it(&doc, &what, !reverse);
    }
}

/// A QUIC test's `--trace=100ms` over 4 s: this end's samples of its one stream's
/// connection, at most one a period and most periods sampled until the stream stopped,
/// then one more; each with a window, the link's round trip (below), and counts of lost
/// packets that never fall and end at most at the end's (the stack may still lose
/// packets of the last bytes after the last sample); a sender's losses counted on this
/// lossy link. The round trip: quinn stamps every datagram its endpoint reads in one
/// pass with the time the pass began (quinn 0.11's `drive_recv`), so on a busy machine
/// an acknowledgement can be stamped a millisecond or more before it came and a round
/// trip measured short of the link's 20 ms (a least RTT of 18.99 ms, once in the whole
/// suite): each sample's least and smoothed RTT are at least three quarters of it —
/// the link's, not loopback's tens of µs — and the samples' median smoothed RTT all of
/// it.
fn traced_as_the_stack_saw_it(doc: &Value, what: &str, sender: bool) {
    let streams = doc["trace"]["streams"].as_array().expect("trace streams");
    assert_eq!(streams.len(), 1, "{what}");
    let st = &streams[0];
    assert_eq!(st["side"], "client", "{what}");
    assert_eq!(st["sender"], sender, "{what}");
    let samples = st["samples"].as_array().expect("samples");
    let field = |s: &Value, k: &str| {
        s[k].as_u64()
            .unwrap_or_else(|| panic!("{what}: no {k} in {s}"))
    };
    // The periodic samples run while the stream moves bytes (an upload's writer can
    // be held past -t by the stack's flow control): one a 100 ms slot at most, a late
    // wake-up taking one for the slots it missed, and the last sample at the end.
    assert!(samples.len() >= 3, "{what}: {} samples", samples.len());
    let periodic = &samples[..samples.len() - 1];
    let span = field(&periodic[periodic.len() - 1], "t_us");
    let slots = (span / 100_000 + 1) as usize;
    assert!(
        periodic.len() <= slots && periodic.len() * 2 >= slots,
        "{what}: {} periodic samples over {span} µs",
        periodic.len()
    );
    assert!(
        span >= 3_800_000,
        "{what}: sampled for {span} µs of a 4 s test"
    );
    let mut lost = 0;
    let mut t = 0;
    for s in samples {
        assert!(field(s, "t_us") >= t, "{what}: time went back: {s}");
        t = field(s, "t_us");
        assert!(field(s, "quic_cwnd_bytes") > 0, "{what}: {s}");
        assert!(field(s, "min_rtt_us") >= 15_000, "{what}: {s}");
        assert!(field(s, "srtt_us") >= 15_000, "{what}: {s}");
        assert!(field(s, "quic_lost_packets") >= lost, "{what}: {s}");
        lost = field(s, "quic_lost_packets");
    }
    let mut srtt: Vec<u64> = samples.iter().map(|s| field(s, "srtt_us")).collect();
    srtt.sort_unstable();
    assert!(
        srtt[srtt.len() / 2] >= 20_000,
        "{what}: median smoothed RTT {} µs on a 20 ms path",
        srtt[srtt.len() / 2]
    );
    let end = doc["end"]["quic"]["connections"][0]["lost_packets"]
        .as_u64()
        .expect("the end's lost packets");
    assert!(
        lost <= end,
        "{what}: {lost} lost by the last sample, {end} at the end"
    );
    assert!(!sender || lost > 0, "{what}: a sender's losses not traced");
}

/// Each QUIC connection is a test of the server's log, numbered with its TCP and UDP
/// tests: started, a stream refused by a limit as a failure, done with its bytes.
#[test]
fn each_quic_connection_is_a_test_of_the_servers_log() {
    let (mut child, Ports { quic, .. }) =
        start_serve(false, &["-J", "--max-bytes", "1M"], Stdio::piped());
    let mut log = child.stdout.take().expect("its log");
    let server = Reaped(child);
    let (status, _, stderr) = test(quic, &["-n", "1M"]);
    assert!(status.success(), "{stderr}");
    let (status, _, _) = test(quic, &["-n", "2M", "-R"]);
    assert_eq!(status.code(), Some(1));
    // The second connection's end is logged once its client has closed it.
    std::thread::sleep(std::time::Duration::from_millis(300));
    drop(server);
    let mut text = String::new();
    std::io::Read::read_to_string(&mut log, &mut text).expect("its log");
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let of = |kind: &str| -> Vec<&Value> { events.iter().filter(|e| e["event"] == kind).collect() };
    let started = of("test_started");
    assert_eq!(started.len(), 2, "{events:?}");
    assert!(
        started.iter().all(|e| e["protocol"] == "quic"),
        "{started:?}"
    );
    let finished = of("test_finished");
    assert_eq!(finished.len(), 2, "{events:?}");
    assert_eq!(finished[0]["test"], started[0]["test"]);
    assert_eq!(finished[0]["bytes_received"], 1 << 20, "{:?}", finished[0]);
    assert_eq!(finished[1]["bytes_sent"], 0, "{:?}", finished[1]);
    let failed = of("test_failed");
    assert_eq!(failed.len(), 1, "{events:?}");
    assert_eq!(failed[0]["test"], started[1]["test"]);
    assert!(
        failed[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("at most 1048576")),
        "{:?}",
        failed[0]
    );
}

/// `serve --http --quic` answers its routes over HTTP/3 on the QUIC port, and every
/// answer over TCP says so (Alt-Svc). A client: aioquic's HTTP/3, a download and an
/// upload, counted by the server's metrics as the TCP ones are.
#[test]
fn serve_answers_http3_on_its_quic_port() {
    let Some(python) = aioquic() else {
        return;
    };
    let (child, Ports { http, quic, .. }) =
        start_serve(true, &["--metrics", "--tls-self-signed"], Stdio::null());
    let _server = Reaped(child);
    let h3 = |args: &[&str]| -> Value {
        let out = Command::new(&python)
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/aioquic_h3.py"
            ))
            .arg(quic.to_string())
            .args(args)
            .output()
            .expect("aioquic's HTTP/3 client");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
        serde_json::from_slice(&out.stdout).expect("its JSON line")
    };
    let down = h3(&["GET", "/__down?bytes=3000000"]);
    assert_eq!(
        (down["status"].as_u64(), down["received"].as_u64()),
        (Some(200), Some(3_000_000)),
        "{down}"
    );
    let alt_svc = format!("h3=\":{quic}\"; ma=86400");
    assert_eq!(down["headers"]["alt-svc"], alt_svc.as_str());
    let up = h3(&["POST", "/__up", "5000000"]);
    assert_eq!(up["status"], 200, "{up}");
    // The same answers over TCP name the HTTP/3 port.
    let out = Command::new("curl")
        .args(["-sk", "-o", "/dev/null", "-D", "-"])
        .arg(format!("https://127.0.0.1:{http}/__down?bytes=10"))
        .output()
        .expect("curl");
    let head = String::from_utf8_lossy(&out.stdout).to_lowercase();
    assert!(
        head.contains(&format!("alt-svc: {}", alt_svc.to_lowercase())),
        "{head}"
    );
    // Counted as the server counts HTTP's bytes: both of aioquic's, and curl's 10.
    let (_, _, metrics) = support::scrape_metrics(([127, 0, 0, 1], http).into());
    let counter = |name: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in:\n{metrics}"))
    };
    assert_eq!(
        counter("flowlab_server_http_received_bytes_total"),
        5_000_000.0
    );
    assert_eq!(counter("flowlab_server_http_sent_bytes_total"), 3_000_010.0);
}

/// Chromium's own QUIC stack as a client: forced onto QUIC for the server's QUIC port,
/// trusting its self-signed certificate by the pin `serve` prints, the speed-test page
/// loads over HTTP/3 and fetches a download and posts an upload over it.
#[test]
fn chromium_downloads_and_uploads_over_http3() {
    if !support::require_tool("chromium") {
        return;
    }
    let (mut child, Ports { quic, .. }) = start_serve(true, &["--tls-self-signed"], Stdio::piped());
    let mut said = String::new();
    let mut out = std::io::BufReader::new(child.stdout.take().expect("its stdout"));
    let pin = loop {
        said.clear();
        let n = std::io::BufRead::read_line(&mut out, &mut said).expect("a line");
        assert!(n > 0, "serve said no pin");
        if let Some(rest) = said.split("SHA-256 ").nth(1) {
            break rest.split_whitespace().next().expect("the pin").to_string();
        }
    };
    // The rest of what it says is read and dropped.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let _server = Reaped(child);
    let dir = tempfile::tempdir().expect("a directory");
    let origin = format!("127.0.0.1:{quic}");
    let browser = support::Browser::open_with(
        &format!("https://{origin}/"),
        dir.path(),
        &[],
        &[
            format!("--origin-to-force-quic-on={origin}"),
            format!("--ignore-certificate-errors-spki-list={pin}"),
        ],
    );
    let protocol = browser.wait_for(
        std::time::Duration::from_secs(30),
        "the page loaded",
        |b| match b.eval(
            "document.readyState === 'complete' ? performance.getEntriesByType('navigation')[0].nextHopProtocol : ''",
        ) {
            Value::String(p) if !p.is_empty() => Ok(p),
            other => Err(other.to_string()),
        },
    );
    assert_eq!(protocol, "h3", "the page's protocol");
    browser.eval(
        "window.result = null; (async () => {
           const down = await (await fetch('/__down?bytes=4000000', {cache: 'no-store'})).arrayBuffer();
           const up = await fetch('/__up', {method: 'POST', body: new Uint8Array(3000000)});
           const protocols = performance.getEntriesByType('resource').map(r => r.nextHopProtocol);
           window.result = {down: down.byteLength, up: up.status, protocols};
         })().catch(e => { window.result = {error: String(e)}; }); 0",
    );
    let result = browser.wait_for(
        std::time::Duration::from_secs(30),
        "the transfers' end",
        |b| match b.eval("window.result") {
            Value::Null => Err("under way".into()),
            r => Ok(r),
        },
    );
    assert_eq!(result["down"], 4_000_000, "{result}");
    assert_eq!(result["up"], 200, "{result}");
    let protocols = result["protocols"].as_array().expect("protocols");
    assert!(
        !protocols.is_empty() && protocols.iter().all(|p| p == "h3"),
        "{result}"
    );
}

/// Ctrl-C ends a QUIC test with what it measured, also against a server that never ends
/// its side of a stream (aioquic's perf server told to stay silent): the upload waits a
/// moment for the server's end, then the test reports itself interrupted, the upload's
/// receiver unknown.
#[test]
fn ctrl_c_ends_a_quic_test_even_against_a_server_that_never_answers() {
    let Some(python) = aioquic() else {
        return;
    };
    let dir = tempfile::tempdir().expect("a directory");
    let (_server, port) = aioquic_server(&python, dir.path(), true);
    let dump = dir.path().join("test.json");
    let mut test = Command::new(env!("CARGO_BIN_EXE_flowlab"))
        .args([
            "test",
            "127.0.0.1",
            "--quic",
            "-p",
            &port.to_string(),
            "-n",
            "1M",
            "-J",
        ])
        .stdout(std::fs::File::create(&dump).expect("a file for its document"))
        .spawn()
        .expect("flowlab test");
    // The megabyte is sent at once; the server's end never comes.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(
        test.try_wait().expect("wait").is_none(),
        "it ended unanswered"
    );
    // SAFETY: kill(2) on this test's own child, not yet waited for.
    unsafe { libc::kill(test.id() as i32, libc::SIGINT) };
    // It ends on its own: the 2 s it waits for the server's end, then the closing.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let status = loop {
        if let Some(status) = test.try_wait().expect("wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = test.kill();
            panic!("flowlab test did not end within 10 s of Ctrl-C");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    let doc: Value =
        serde_json::from_slice(&std::fs::read(&dump).expect("its document")).expect("JSON");
    assert_eq!(doc["end"]["interrupted"], true, "{}", doc["end"]);
    let s = sum(&doc, "up");
    assert_eq!(s["sender"]["bytes"], 1 << 20, "{s}");
    assert!(s["receiver"].is_null(), "{s}");
}
