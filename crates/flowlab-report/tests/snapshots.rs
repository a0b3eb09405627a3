//! Every output of every result kind, pinned from fixed results: a change to a table, a
//! JSON document, a JSON-stream line or the trace CSV shows as a snapshot diff. Review
//! one with `cargo insta review` (see CONTRIBUTING.md); accept it only when the change
//! is meant, and say so in the commit.
//!
//! The results are recorded runs (tests/fixtures/README.md says how each was made); the
//! edge cases are made from them here, each edit visible: a stream whose receiver is
//! unknown, an interrupted test, an omitted interval, an interval with no bytes, UDP with
//! loss, reordering and duplicates, and a trace with a gap in its samples.

use std::path::PathBuf;

use flowlab_report::units::UnitFormat;
use flowlab_report::{Format, TestFormat, csv, json, table};
use flowlab_results::fetch::{FetchResult, FileEntry, ServerStats, SweepResult, SweepRow};
use flowlab_results::net::{Built, EmulatedDirection, NetCheck, TopologyStatus};
use flowlab_results::result::{ServerOutput, TestResult};
use flowlab_results::server::ServerEvent;
use flowlab_results::study::Outcome;

/// Snapshots are named by the test alone (not its module), in tests/snapshots/, so that
/// they survive code moving between modules.
macro_rules! pin {
    ($name:expr, $text:expr) => {
        insta::with_settings!({ prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!($name, $text);
        })
    };
}

fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A recorded test result (tests/fixtures/).
fn result(name: &str) -> TestResult {
    let path = fixture_path(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

/// A result's spec is read into today's `TestSpec` whatever flowlab wrote it: each
/// older shape, as recorded, reads as what its flowlab did — a field it did not write is
/// off, none or zero — and today's shape reads back as it was written.
#[test]
fn every_shape_of_a_spec_reads_as_what_its_flowlab_did() {
    use flowlab_results::spec::{Amount, TestSpec};
    // The first shape: no `udp_window` (it kept within no window), no `latency`.
    let first = result("tcp-p2.json");
    let raw: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture_path("tcp-p2.json")).expect("read"))
            .expect("JSON");
    assert!(raw["start"]["spec"].get("udp_window").is_none());
    assert!(raw["start"]["spec"].get("latency").is_none());
    let s = &first.start.spec;
    assert_eq!((s.parallel, s.amount), (2, Amount::Seconds(1.0)));
    assert_eq!(s.title.as_deref(), Some("two streams"));
    assert!(!s.udp_window && s.latency.is_none() && s.trace.is_none());
    assert!(s.udp_backoff, "written in the first shape, read as written");
    // The shape with `latency`, still without `udp_window`.
    let latency = result("tcp-latency.json");
    let s = &latency.start.spec;
    assert_eq!(s.latency, Some(std::time::Duration::from_millis(100)));
    assert_eq!(s.congestion.as_deref(), Some("cubic"));
    assert!(!s.udp_window);
    // Today's: written and read back, the same document.
    let mut today = TestSpec::new("192.0.2.7");
    today.trace = Some(std::time::Duration::from_millis(5));
    today.tos = 0x28;
    today.affinity.server = Some(1);
    let text = serde_json::to_string(&today).expect("write");
    let back: TestSpec = serde_json::from_str(&text).expect("read");
    assert_eq!(serde_json::to_string(&back).expect("write again"), text);
    // A spec that is not one is refused, naming the field.
    let e = serde_json::from_str::<TestSpec>(r#"{"host":"h"}"#).expect_err("no port");
    assert!(e.to_string().contains("missing field `port`"), "{e}");
}

/// Every format `flowlab test` writes, for `r`, pinned as `<tag>-<format>`.
fn pin_test_formats(r: &TestResult, tag: &str, json_document: bool) {
    let out = |f: TestFormat| f.write(r).expect("serialisable");
    pin!(
        format!("{tag}-table"),
        out(TestFormat::Table(UnitFormat::Adaptive))
    );
    pin!(
        format!("{tag}-table-mbits"),
        out(TestFormat::Table(UnitFormat::Bits(2)))
    );
    pin!(format!("{tag}-json-stream"), out(TestFormat::JsonStream));
    pin!(
        format!("{tag}-iperf3-text"),
        out(TestFormat::Iperf3Text(UnitFormat::Adaptive))
    );
    if json_document {
        pin!(format!("{tag}-json"), out(TestFormat::Json));
        pin!(format!("{tag}-iperf3-json"), out(TestFormat::Iperf3Json));
        pin!(
            format!("{tag}-iperf3-json-stream"),
            out(TestFormat::Iperf3JsonStream)
        );
    }
}

#[test]
fn a_traced_tcp_test_limited_by_the_receive_window() {
    // The JSON document is the JSON-stream's objects, pretty-printed; pinned for the
    // untraced and UDP results (this one's would be 2 000 lines of samples).
    let r = result("tcp-traced.json");
    pin_test_formats(&r, "tcp-traced", false);
    let mut rows = Vec::new();
    csv::write(r.trace.as_ref().expect("traced"), &mut rows).expect("CSV");
    pin!("tcp-traced-csv", String::from_utf8(rows).expect("UTF-8"));
}

#[test]
fn latency_under_load_through_a_queue() {
    let r = result("tcp-latency.json");
    assert_eq!(
        r.latency.as_ref().map(|l| l.queue_building),
        Some(Some(true))
    );
    pin_test_formats(&r, "tcp-latency", true);
}

#[test]
fn two_parallel_tcp_streams_untraced() {
    pin_test_formats(&result("tcp-p2.json"), "tcp-p2", true);
}

#[test]
fn a_quic_test_both_ways_on_one_connection() {
    let r = result("quic-bidir.json");
    let q = r.end.as_ref().and_then(|e| e.quic.as_ref()).expect("QUIC");
    assert_eq!(q.connections.len(), 1);
    pin_test_formats(&r, "quic-bidir", true);
}

#[test]
fn an_interrupted_test_with_an_unknown_receiver_and_an_empty_interval() {
    // Two streams ended by Ctrl-C: the first interval omitted, stream 3 silent in the
    // last one, and no results from the server for stream 3.
    let mut r = result("tcp-p2.json");
    r.intervals[0].omitted = true;
    let last = r.intervals.last_mut().expect("intervals");
    let silent = &mut last.streams[1];
    last.sums[0].bytes -= silent.bytes;
    last.sums[0].bits_per_second -= silent.bits_per_second;
    (silent.bytes, silent.bits_per_second) = (0, 0.0);
    let end = r.end.as_mut().expect("totals");
    end.streams[1].receiver = None;
    end.sums[0].receiver = None;
    end.interrupted = true;
    pin_test_formats(&r, "tcp-interrupted", true);
}

#[test]
fn udp_with_loss_reordering_and_duplicates() {
    // A recorded loopback run (it lost nothing), with loss, reordering, duplicates and
    // receive-buffer drops written into stream 3's counters and the sums.
    let mut r = result("udp-run.json");
    let damage = |u: &mut flowlab_results::result::UdpInterval, lost: u64| {
        (u.lost, u.out_of_order, u.duplicates) = (lost, lost / 2, lost / 7);
        u.lost_percent = 100.0 * lost as f64 / u.expected as f64;
    };
    for iv in &mut r.intervals {
        damage(iv.streams[1].udp.as_mut().expect("UDP"), 7);
        damage(iv.sums[0].udp.as_mut().expect("UDP"), 7);
    }
    let end = r.end.as_mut().expect("totals");
    for side in [&mut end.streams[1].receiver, &mut end.sums[0].receiver] {
        let u = side
            .as_mut()
            .and_then(|t| t.udp.as_mut())
            .expect("UDP totals");
        (u.lost, u.out_of_order, u.duplicates) = (14, 6, 2);
        u.lost_percent = 100.0 * 14.0 / u.expected as f64;
        u.integrity_percent = Some(100.0 * (u.expected - 14) as f64 / u.expected as f64);
        u.rcvbuf_drops = Some(5);
    }
    pin_test_formats(&r, "udp-loss", true);
}

#[test]
fn a_multicast_test_and_a_receiver_without_results() {
    // Three receivers, the third behind 5 % loss; then the second's results lost (its
    // control connection broke at the end) and nothing reaching the third, as the table
    // must show them.
    let r = result("udp-multicast.json");
    pin_test_formats(&r, "udp-multicast", true);
    let mut r = r;
    let m = r
        .end
        .as_mut()
        .and_then(|e| e.multicast.as_mut())
        .expect("a multicast test");
    m.receivers[1].totals = None;
    m.receivers[1].cpu_percent = None;
    m.receivers[1].error = Some("the control connection closed".into());
    // And the third reached by nothing at all.
    if let Some(t) = m.receivers[2].totals.as_mut() {
        t.bytes = 0;
    }
    let table = TestFormat::Table(UnitFormat::Adaptive)
        .write(&r)
        .expect("a table");
    pin!("udp-multicast-receiver-lost-table", table);
}

#[test]
fn a_trace_with_a_gap_in_its_samples() {
    // A tracer that fell behind: the client's samples 6–11 and the server's 8–9 missing.
    let mut r = result("tcp-traced.json");
    for s in &mut r.trace.as_mut().expect("traced").streams {
        let gap = if s.side == flowlab_results::result::Side::Client {
            6..12
        } else {
            8..10
        };
        let mut i = 0;
        s.trace.samples.retain(|_| {
            i += 1;
            !gap.contains(&(i - 1))
        });
    }
    let trace = r.trace.as_ref().expect("traced");
    pin!("trace-gap-diagnosis", table::diagnosis(&r));
    let mut rows = Vec::new();
    csv::write(trace, &mut rows).expect("CSV");
    pin!("trace-gap-csv", String::from_utf8(rows).expect("UTF-8"));
}

#[test]
fn a_failed_test_as_json_and_json_stream() {
    let message = "connecting to 10.0.0.4:5201: Connection refused (os error 111)";
    pin!("test-error-json", json::test_error(message).expect("JSON"));
    pin!("test-error-json-stream", json::test_error_event(message));
    pin!(
        "test-error-iperf3-json-stream",
        flowlab_report::iperf3_json::error_events(message)
    );
}

/// iperf3's `--json-stream` holds `-J`'s document in pieces: the start event's data is
/// its `start`, the intervals' its `intervals`, the end's its `end` (as iperf3 builds
/// both from the same objects); every line is one compact object.
#[test]
fn the_iperf3_json_stream_is_the_iperf3_document_in_pieces() {
    for name in ["tcp-p2.json", "udp-run.json"] {
        let mut r = result(name);
        r.end.as_mut().expect("ended").server_output = Some(
            flowlab_results::result::ServerOutput::Text("a line\n".into()),
        );
        let doc = flowlab_report::iperf3_json::document(&r);
        let out = TestFormat::Iperf3JsonStream.write(&r).expect("the stream");
        let events: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).expect("one object a line"))
            .collect();
        let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
        let intervals = r.intervals.len();
        assert_eq!(names.len(), intervals + 3, "{name}: {names:?}");
        assert_eq!(names[0], "start");
        assert!(names[1..=intervals].iter().all(|n| *n == "interval"));
        assert_eq!(names[intervals + 1..], ["server_output_text", "end"]);
        assert_eq!(events[0]["data"], doc["start"], "{name}");
        let streamed: Vec<&serde_json::Value> =
            events[1..=intervals].iter().map(|e| &e["data"]).collect();
        let documented: Vec<&serde_json::Value> = doc["intervals"]
            .as_array()
            .expect("intervals")
            .iter()
            .collect();
        assert_eq!(streamed, documented, "{name}");
        assert_eq!(events[intervals + 1]["data"], doc["server_output_text"]);
        assert_eq!(events[intervals + 2]["data"], doc["end"], "{name}");
    }
}

#[test]
fn the_system_a_test_ran_on() {
    let r = result("tcp-p2.json");
    pin!("system-table", table::system(&r.start.system));
    pin!(
        "system-json",
        json::document(&r.start.system).expect("JSON")
    );
}

/// Issue 14: on loopback, with lo steering no packets, a sender's retransmissions are
/// reordering between the CPUs' queues (docs/lab-notes/performance.md): the table says so under the
/// totals, with what removes them — and says nothing where that is not the explanation.
#[test]
fn retransmissions_across_unsteered_loopback_are_called_reordering() {
    let mut r = result("tcp-p2.json");
    assert_eq!(r.start.remote, "127.0.0.1:6012");
    r.start.system.cpus = Some(2);
    let lo_masks = |r: &mut TestResult, masks: &[&str]| {
        r.start
            .system
            .interfaces
            .iter_mut()
            .find(|i| i.name == "lo")
            .expect("lo in the fixture")
            .rps_cpus = masks.iter().map(|m| m.to_string()).collect();
    };
    lo_masks(&mut r, &["0"]);
    let sender = |r: &mut TestResult, retr: u64, dsack: Option<u64>| {
        let s = r.end.as_mut().expect("end").sums[0]
            .sender
            .as_mut()
            .expect("sender");
        s.retransmits = Some(retr);
        s.dsack_dups = dsack;
        s.reordering = dsack.map(|_| 7);
    };
    sender(&mut r, 4, Some(3));
    r.end.as_mut().expect("end").server_output =
        Some(ServerOutput::Text("the server's own lines\n".to_string()));
    let tables = |r: &TestResult| {
        [
            table::test::finish(r, false, UnitFormat::Adaptive),
            table::whole(r, UnitFormat::Adaptive),
        ]
    };
    let line = "Loopback: 3 of the 4 retransmissions were not needed (D-SACK): lo queues each \
                packet on the CPU that sent it (no receive packet steering), so one flow's \
                segments sent from two CPUs can overtake each other; running both ends on one \
                CPU (-A N,N), or steering lo's packets (as root: echo 3 > \
                /sys/class/net/lo/queues/rx-0/rps_cpus), prevents it.\n";
    for t in tables(&r) {
        // Under the totals, before what the server printed.
        let at = t.find(line).unwrap_or_else(|| panic!("{t}"));
        assert!(at < t.find("Server output:").expect("server output"), "{t}");
        assert!(
            at > t.find("TCP congestion control:").expect("totals"),
            "{t}"
        );
    }
    let said = |r: &TestResult| tables(r).iter().any(|t| t.contains("Loopback:"));
    let opening = |retr: u64, dsack: Option<u64>| {
        let mut r = r.clone();
        sender(&mut r, retr, dsack);
        let t = &tables(&r)[0];
        t.lines()
            .find_map(|l| l.strip_prefix("Loopback: "))
            .and_then(|l| l.split(": lo queues").next())
            .unwrap_or_else(|| panic!("no Loopback line: {t}"))
            .to_string()
    };
    for (retr, dsack, want) in [
        // A sender that does not say what was needed (iperf3), or saw reordering but
        // had nothing D-SACKed (yet): "may".
        (
            4,
            None,
            "the 4 retransmissions may all come from reordering",
        ),
        (1, None, "the one retransmission may come from reordering"),
        (
            2,
            Some(0),
            "the 2 retransmissions may all come from reordering",
        ),
        // Counted in words where the numbers alone read badly; D-SACKs of
        // retransmissions made before an omitted start can outnumber those counted.
        (
            4,
            Some(4),
            "none of the 4 retransmissions was needed (D-SACK)",
        ),
        (
            4,
            Some(5),
            "none of the 4 retransmissions was needed (D-SACK)",
        ),
        (2, Some(2), "neither retransmission was needed (D-SACK)"),
        (1, Some(1), "the one retransmission was not needed (D-SACK)"),
    ] {
        assert_eq!(opening(retr, dsack), want);
    }
    // 40 CPUs: the mask in two groups, as sysfs takes it.
    let mut many = r.clone();
    many.start.system.cpus = Some(40);
    assert!(tables(&many)[0].contains("echo ff,ffffffff > "));
    // A multi-queue mask of zeros, and loopback written as IPv6 or IPv4-mapped: said.
    let mut queues = r.clone();
    lo_masks(&mut queues, &["00000000,00000000", "0"]);
    let mut v6 = r.clone();
    v6.start.remote = "[::1]:6012".to_string();
    let mut mapped = r.clone();
    mapped.start.remote = "[::ffff:127.0.0.1]:6012".to_string();
    for (case, r) in [("queues", &queues), ("::1", &v6), ("mapped", &mapped)] {
        assert!(said(r), "{case}: {}", tables(r)[0]);
    }
    // Not said: nothing retransmitted; none of it reported twice and no reordering seen
    // (loss); lo steered (on one queue of two); another address; lo's masks not recorded
    // (a document from before they were, or a kernel without RPS); no lo; CPUs unknown.
    let mut quiet = r.clone();
    sender(&mut quiet, 0, Some(0));
    let mut lost = r.clone();
    sender(&mut lost, 4, Some(0));
    lost.end.as_mut().expect("end").sums[0]
        .sender
        .as_mut()
        .expect("sender")
        .reordering = Some(0);
    let mut steered = r.clone();
    lo_masks(&mut steered, &["0", "3"]);
    let mut remote = r.clone();
    remote.start.remote = "10.0.3.2:5201".to_string();
    let mut unrecorded = r.clone();
    lo_masks(&mut unrecorded, &[]);
    let mut no_lo = r.clone();
    no_lo.start.system.interfaces.clear();
    let mut no_cpus = r.clone();
    no_cpus.start.system.cpus = None;
    for (case, r) in [
        ("nothing retransmitted", &quiet),
        ("no D-SACK, no reordering", &lost),
        ("steered", &steered),
        ("not loopback", &remote),
        ("masks not recorded", &unrecorded),
        ("no lo", &no_lo),
        ("CPUs unknown", &no_cpus),
    ] {
        assert!(!said(r), "{case}: {}", tables(r)[0]);
    }
    // The system table shows the masks.
    assert!(
        table::system(&r.start.system).contains("qdisc noqueue  rps_cpus 0  offloads:"),
        "{}",
        table::system(&r.start.system)
    );
}

#[test]
fn quick_prints_the_totals_alone() {
    pin!(
        "quick-whole",
        table::whole(&result("tcp-p2.json"), UnitFormat::Adaptive)
    );
    // With latency probes, as quick runs every test: one line more.
    pin!(
        "quick-whole-latency",
        table::whole(&result("tcp-latency.json"), UnitFormat::Adaptive)
    );
}

#[test]
fn quick_headings_name_each_test_and_its_target() {
    let text = table::quick_heading(2, 40123)
        + &table::quick_case("TCP", false, None)
        + &table::quick_case("TCP", true, None)
        + &table::quick_case("UDP", false, Some(1_000_000_000))
        + &table::quick_case("UDP", true, Some(2_500_000));
    pin!("quick-headings", text);
}

#[test]
fn every_server_event_as_text_and_as_json() {
    let events = [
        ServerEvent::Listening {
            address: "[::]:5201".into(),
            quic: None,
        },
        ServerEvent::TestStarted {
            test: 1,
            peer: "10.0.0.1:40000".into(),
            protocol: "tcp".into(),
            streams: 2,
            reverse: true,
            bidir: false,
            client: Some("iperf 3.12".into()),
            multicast: None,
        },
        ServerEvent::TestStarted {
            test: 2,
            peer: "[::1]:40002".into(),
            protocol: "udp".into(),
            streams: 1,
            reverse: false,
            bidir: true,
            client: None,
            multicast: None,
        },
        ServerEvent::TestStarted {
            test: 3,
            peer: "[::ffff:10.0.0.3]:50000".into(),
            protocol: "quic".into(),
            streams: 0,
            reverse: false,
            bidir: false,
            client: Some("QUIC perf".into()),
            multicast: None,
        },
        ServerEvent::TestFinished {
            test: 1,
            peer: "10.0.0.1:40000".into(),
            bytes_received: 0,
            bytes_sent: 1_250_000_000,
            seconds: 10.004,
            mptcp_subflows: None,
        },
        ServerEvent::TestFailed {
            test: Some(2),
            peer: "[::1]:40002".into(),
            error: "control connection: connection reset by peer".into(),
        },
        ServerEvent::TestFailed {
            test: None,
            peer: "10.0.0.9:1".into(),
            error: "invalid cookie".into(),
        },
        ServerEvent::Refused {
            peer: "10.0.0.7:5555".into(),
            kind: flowlab_results::server::RefusalKind::Busy,
            reason: "busy: 16 tests running".into(),
        },
    ];
    let text: String = events
        .iter()
        .map(|e| table::server_event(e) + "\n")
        .collect();
    pin!("serve-log-table", text);
    let lines: String = events.iter().map(json::line).collect();
    pin!("serve-log-json", lines);
}

#[test]
fn fragment_sets_made_and_served() {
    let dir = std::path::Path::new("sets/seed");
    let text = table::fragment_set(&file(), 160, "wrote to sets/seed")
        + &table::fragment_set(
            &FileEntry {
                name: "empty".into(),
                size: 0,
                blake3: "af".repeat(32),
            },
            1,
            "verified and joined into out/empty",
        )
        + &table::serving_fragments(160, dir, None)
        + &table::serving_fragments(160, dir, Some(100_000_000));
    pin!("fragments-lines", text);
}

#[test]
fn net_up_down_and_status_of_each_kind_of_topology() {
    let emulated = Built::Emulated {
        backend: "userspace".into(),
        emulator_pid: Some(4242),
        emulator_running: true,
        links: vec!["L1".into(), "L2".into()],
        cpus_kept_awake: false,
    };
    let awake = Built::Emulated {
        backend: "userspace".into(),
        emulator_pid: Some(4243),
        emulator_running: true,
        links: vec!["L1".into()],
        cpus_kept_awake: true,
    };
    let netem = Built::Emulated {
        backend: "netem".into(),
        emulator_pid: None,
        emulator_running: true,
        links: Vec::new(),
        cpus_kept_awake: false,
    };
    // Up, but its emulator gone (killed, or ended with its session).
    let lost = Built::Emulated {
        backend: "userspace".into(),
        emulator_pid: Some(4244),
        emulator_running: false,
        links: vec!["L1".into(), "L2".into()],
        cpus_kept_awake: false,
    };
    let mut text = String::new();
    for built in [&Built::TbfOnly, &emulated, &awake, &netem] {
        text += &table::net_up("port", 14, built);
    }
    text += &table::net_down("port", 14);
    text += &table::net_status(&[]);
    let direction = |way: &str, forwarded| EmulatedDirection {
        link: "L1".into(),
        way: way.into(),
        forwarded,
        forwarded_bytes: forwarded * 1514,
        lost: forwarded / 100,
        line_full: 3,
        emulator_drops: 0,
        oversize: 1,
        mean_late_us: 12.4,
        late: 2,
        max_late_us: 1350,
        send_cost_us: 2.25,
        unused_opportunities: None,
        early_drops: None,
        airtime_s: None,
    };
    text += &table::net_status(&[
        TopologyStatus {
            name: "port".into(),
            built: emulated,
            namespaces: vec!["fl-port-h1".into(), "fl-port-link.0".into()],
            emulated: vec![
                direction("a→b", 120_000),
                // A direction that follows a trace counts its unused opportunities.
                EmulatedDirection {
                    unused_opportunities: Some(4_700),
                    ..direction("b→a", 0)
                },
            ],
            schedule: Some(flowlab_results::net::ScheduleStatus {
                pid: 4321,
                running: true,
                log: "/run/flowlab/net/port.schedule.log".into(),
                last: Some(
                    "2026-11-29T02:08:26.358Z +1.008 s  wan: rate=10M delay=40ms (round 1)".into(),
                ),
                done: false,
            }),
            // A medium's busy stations, all of them together.
            busy_air: vec![flowlab_results::net::BusyAir {
                medium: "wlan".into(),
                stations: 4,
                packets: 13_210,
                packet_bytes: 1500,
                airtime_s: 8.052,
            }],
        },
        TopologyStatus {
            name: "left".into(),
            built: lost,
            namespaces: vec!["fl-left-h1".into(), "fl-left-link.0".into()],
            emulated: Vec::new(),
            schedule: Some(flowlab_results::net::ScheduleStatus {
                pid: 4322,
                running: false,
                log: "/run/flowlab/net/left.schedule.log".into(),
                last: Some(
                    "2026-11-29T02:08:25.350Z +0.000 s  schedule of topology left started".into(),
                ),
                done: false,
            }),
            busy_air: Vec::new(),
        },
        TopologyStatus {
            name: "half".into(),
            built: Built::Unknown,
            namespaces: vec!["fl-half-h1".into()],
            emulated: Vec::new(),
            schedule: None,
            busy_air: Vec::new(),
        },
    ]);
    pin!("net-up-down-status", text);
}

fn file() -> FileEntry {
    FileEntry {
        name: "seed.bin".into(),
        size: 104_857_600,
        blake3: "a1".repeat(32),
    }
}

#[test]
fn a_fetch_with_a_corrupt_a_refusing_and_a_failed_server() {
    let server = |address: &str, fragments: usize, seconds: f64| ServerStats {
        address: address.into(),
        fragments,
        bytes: fragments as u64 * 1_048_576,
        busy_seconds: seconds,
        bits_per_second: if seconds > 0.0 {
            fragments as f64 * 1_048_576.0 * 8.0 / seconds
        } else {
            0.0
        },
        ..ServerStats::default()
    };
    let r = FetchResult {
        schema: "flowlab.fetch/1".into(),
        file: file(),
        mode: "1:5".into(),
        fragments: 100,
        skipped: 4,
        bytes: 96 * 1_048_576,
        seconds: 9.87,
        bits_per_second: 96.0 * 1_048_576.0 * 8.0 / 9.87,
        servers: vec![
            ServerStats {
                corrupt: 2,
                duplicates: 1,
                ..server("10.0.1.2:5201", 16, 9.5)
            },
            ServerStats {
                refused: 3,
                errors: vec!["fragment seed.bin.017: refused: no such fragment".into()],
                ..server("10.0.2.2:5201", 80, 9.8)
            },
            ServerStats {
                failed: Some("connection reset by peer".into()),
                ..server("10.0.3.2:5201", 0, 0.0)
            },
        ],
    };
    pin!("fetch-table", table::fetch(&r));
    pin!("fetch-json", json::document(&r).expect("JSON"));
}

#[test]
fn a_sweep_of_ratios_repeated() {
    let row = |mode: &str, seconds: Vec<f64>| SweepRow {
        mode: mode.into(),
        mean_seconds: seconds.iter().sum::<f64>() / seconds.len() as f64,
        seconds,
    };
    let r = SweepResult {
        schema: flowlab_results::fetch::SWEEP_SCHEMA.into(),
        file: file(),
        servers: vec!["10.0.1.2:5201".into(), "10.0.2.2:5201".into()],
        repeat: 3,
        rows: vec![
            row("1:5", vec![20.1, 20.4, 19.9]),
            row("1:1", vec![11.0, 10.8, 11.3]),
            row("adaptive", vec![9.9, 10.2, 10.0]),
        ],
    };
    pin!("sweep-table", table::sweep(&r));
    pin!("sweep-json", json::document(&r).expect("JSON"));
}

#[test]
fn net_show_plans_every_shipped_topology() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../topologies");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .expect("topologies/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    names.sort();
    assert!(names.len() >= 3, "{names:?}");
    for path in names {
        let text = std::fs::read_to_string(&path).expect("topology");
        let t =
            flowlab_net::topology::Topology::parse_with(&text, &flowlab_net::build::beside(&dir))
                .unwrap_or_else(|e| panic!("{path:?}: {e}"));
        let stem = path.file_stem().expect("stem").to_string_lossy();
        pin!(
            format!("net-show-{stem}"),
            table::net_plan(&flowlab_net::topology::Plan::of(&t).summary())
        );
    }
}

/// A recorded `net check -J` (tests/fixtures/), its text and what it holds, with what the
/// table needs beside the document: the rounds' congestion control (`None`: the
/// system's, not chosen) and the tolerances `net check` judges by.
fn net_check(name: &str, rounds: &[Option<&str>]) -> (String, NetCheck) {
    let path = fixture_path(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let mut c: NetCheck = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    c.rounds = rounds.iter().map(|r| r.map(String::from)).collect();
    c.congestion_chosen = false;
    c.rtt_tolerance_ms = 1.0;
    c.loss_tolerance_percent = 20.0;
    (text, c)
}

/// `net check`'s table fits 100 columns and ends its rows with the verdict (issue 46).
fn net_check_table(c: &NetCheck) -> String {
    let t = table::net_check(c);
    for line in t.lines() {
        assert!(
            line.chars().count() <= 100,
            "{} columns: {line}",
            line.chars().count()
        );
    }
    assert!(
        t.lines().any(|l| l.starts_with("verdict: ")),
        "no verdict: {t}"
    );
    t
}

#[test]
fn net_check_one_pair_at_a_time_under_the_default() {
    let (text, c) = net_check("net-check.json", &[None]);
    // The document is the result as recorded, byte for byte.
    assert_eq!(json::document(&c).expect("serialisable"), text.trim_end());
    pin!("net-check-table", net_check_table(&c));
}

#[test]
fn net_check_pairs_together_under_cubic_then_the_default() {
    let (text, c) = net_check("net-check-together.json", &[Some("cubic"), Some("bbr")]);
    assert_eq!(json::document(&c).expect("serialisable"), text.trim_end());
    pin!("net-check-together-table", net_check_table(&c));
}

#[test]
fn net_check_with_deviations_loss_an_unlimited_path_and_a_quiet_host() {
    let (_, mut c) = net_check("net-check.json", &[Some("cubic")]);
    c.congestion_chosen = true;
    c.cpus_kept_awake = true;
    let p = &mut c.paths;
    // r1–r2 missed its rate and its queue bound; its idle RTT went unmeasured.
    p[0].measured_rtt_ms = None;
    p[0].measured_bps = 30e6;
    p[0].loaded_rtt_p95_ms = Some(40.0);
    p[0].loaded_rtt_ms = Some(44.1);
    p[0].deviations = vec![
        "throughput 75 % of the bottleneck".into(),
        "RTT under load (95th percentile) 40.0 ms, above the queue bound 33.3 ms".into(),
    ];
    // h1–h4 with configured loss: its rate is not judged, its loss is.
    p[1].implied_loss_percent = 1.0;
    p[1].measured_loss_percent = Some(1.37);
    p[1].loss_bounds_percent = Some([0.8, 1.2]);
    p[1].rate_bounds_bps = None;
    p[1].deviations = vec!["loss 1.37 % instead of 1.00 %".into()];
    // h1–h9 without a rate limit: no bound.
    p[2].implied_bps = None;
    p[2].rate_bounds_bps = None;
    // Under -C cubic; nothing stolen, the emulator on time: no notes.
    for p in p.iter_mut() {
        p.congestion = Some("cubic".into());
        p.host_steal_percent = Some(0.0);
        p.emulator_late_p95_ms = Some(0.2);
        p.emulator_late_p99_ms = Some(0.35);
    }
    pin!("net-check-edges-table", net_check_table(&c));
}

/// A pair's name longer than the path column widens it: every row's columns still
/// start under their headings.
#[test]
fn net_check_widens_its_path_column_for_long_host_names() {
    let (_, mut c) = net_check("net-check.json", &[None]);
    c.paths[0].from = "laptop".into();
    c.paths[0].to = "server".into();
    let t = net_check_table(&c);
    let header = t.lines().find(|l| l.starts_with("path ")).expect("header");
    let cc = header.find("cc").expect("the cc heading");
    let rows = t
        .lines()
        .skip_while(|l| !l.starts_with("path "))
        .skip(1)
        .take_while(|l| !l.starts_with("verdict"))
        .filter(|l| !l.starts_with(' '));
    for row in rows {
        let b = row.as_bytes();
        assert!(
            b[cc - 1] == b' ' && b[cc] != b' ',
            "the cc column is not under its heading:\n{t}"
        );
    }
}

/// A study's flat metrics of each recorded result: names, values and units.
#[test]
fn metrics_of_each_result() {
    use flowlab_results::metrics;
    for name in ["tcp-p2", "udp-run", "tcp-traced", "udp-multicast"] {
        let r = result(&format!("{name}.json"));
        let text: String = metrics::of_test(&r)
            .iter()
            .map(|m| format!("{} = {} {}\n", m.name, m.value, metrics::unit(&m.name)))
            .collect();
        pin!(format!("metrics-{name}"), text);
    }
    // A failed step's document (its error) has none.
    assert!(metrics::of_document("test", r#"{"error":"refused"}"#).is_empty());
}

/// A small study's report from fixed trials: two lengths × two methods, three
/// repetitions each, one trial failed (listed, not averaged).
fn study_input() -> flowlab_results::study_report::ReportInput {
    use flowlab_results::metrics::Metric;
    use flowlab_results::study_report::{Axis, ReportInput, TrialData};
    let params = vec![
        Axis {
            name: "length".into(),
            labels: vec!["1000".into(), "65000".into()],
        },
        Axis {
            name: "method".into(),
            labels: vec!["stream".into(), "stop-and-wait".into()],
        },
    ];
    let mut cells = Vec::new();
    let mut trials = Vec::new();
    // Transfer times (s) per cell, repetitions 1..3: worked in the assertions below.
    let times = [
        ("1000", "stream", [0.010, 0.012, 0.011]),
        ("1000", "stop-and-wait", [0.071, 0.080, 0.062]),
        ("65000", "stream", [0.006, 0.007, 0.005]),
        ("65000", "stop-and-wait", [0.007, 0.009, 0.008]),
    ];
    for (length, method, values) in times {
        let cell = format!("length={length} method={method}");
        cells.push(cell.clone());
        for (i, v) in values.iter().enumerate() {
            let failed = length == "65000" && method == "stream" && i == 2;
            trials.push(TrialData {
                cell: cell.clone(),
                labels: vec![length.into(), method.into()],
                repetition: i as u32 + 1,
                status: if failed { Outcome::Failed } else { Outcome::Ok },
                error: failed.then(|| "step 'transfer': connection refused".into()),
                metrics: if failed {
                    Vec::new()
                } else {
                    vec![
                        (
                            "transfer".into(),
                            Metric {
                                name: "transfer_s".into(),
                                value: *v,
                            },
                        ),
                        (
                            "transfer".into(),
                            Metric {
                                name: "throughput_bps".into(),
                                value: 8e6 / v,
                            },
                        ),
                        (
                            "transfer".into(),
                            Metric {
                                name: "retransmits".into(),
                                value: 0.0,
                            },
                        ),
                        (
                            "transfer".into(),
                            Metric {
                                name: "rtt_ms".into(),
                                value: v * 10.0,
                            },
                        ),
                    ]
                },
            });
        }
    }
    ReportInput {
        study: "seed-003".into(),
        description: "stream against stop-and-wait, by message size".into(),
        order: "random".into(),
        seed: 7,
        repeat: 3,
        params,
        cells,
        trials,
        machines: vec![
            "vm: kernel 6.18, 2 CPUs, default congestion control bbr, flowlab 0.1.0".into(),
        ],
        groups: vec![("transfer".into(), None)],
        attempts: vec![flowlab_results::study_report::Failure {
            cell: "length=1000 method=tcp-stream".into(),
            repetition: 2,
            error: "step 'transfer': connecting to 127.0.0.1:5201: Connection refused".into(),
        }],
    }
}

#[test]
fn a_study_report_in_every_format() {
    use flowlab_report::study_report::{comparison_markdown, csv, markdown};
    use flowlab_results::study_report::{build, compare};
    let r = build(&study_input());
    // By hand: 0.071, 0.080, 0.062: mean 0.071, sd 0.009, CI ± 4.3027 · 0.009 / √3.
    let row = &r.metrics[0].rows[1];
    assert_eq!(r.metrics[0].metric, "transfer_s");
    assert!((row.summary.mean - 0.071).abs() < 1e-12);
    assert!((row.summary.sd - 0.009).abs() < 1e-12);
    let half = 4.302_652_7 * 0.009 / 3f64.sqrt();
    let ci = row.summary.ci.expect("n = 3");
    assert!((ci.1 - 0.071 - half).abs() < 1e-7, "{ci:?}");
    // The failed trial is listed, and its cell averages the two that ran.
    assert_eq!(r.metrics[0].rows[2].summary.n, 2);
    assert_eq!((r.ok, r.failed, r.planned), (11, 1, 12));
    // Retransmits were zero throughout: no table.
    assert!(r.metrics.iter().all(|m| m.metric != "retransmits"));
    pin!("study-report-markdown", markdown(&r));
    pin!("study-report-csv", csv(&r).expect("csv"));
    pin!(
        "study-report-json",
        flowlab_report::json::document(&r).expect("json")
    );
    let c = compare(
        &r,
        "length=1000 method=stream",
        "length=1000 method=stop-and-wait",
    );
    pin!("study-report-compare", comparison_markdown(&c));
}

/// Seed 000's shape, small: a fetch of 1.2 GB from two servers, two distances × three
/// splits × two repetitions. Server 1 keeps 100 Mbit/s; server 2 keeps 100 Mbit/s near
/// and 50 far, except one far trial where it was slower (busy 104 s instead of 96).
fn fetch_study_input() -> flowlab_results::study_report::ReportInput {
    use flowlab_results::metrics::Metric;
    use flowlab_results::study_report::{Axis, ReportInput, TrialData};
    let axis = |name: &str, labels: &[&str]| Axis {
        name: name.into(),
        labels: labels.iter().map(|l| l.to_string()).collect(),
    };
    let params = vec![
        axis("distance", &["near", "far"]),
        axis("ratio", &["1:1", "2:1", "adaptive"]),
    ];
    // (distance, ratio, server 1's bytes, server 2's bytes, server 2's rate in bit/s)
    let splits = [
        ("near", "1:1", 6e8, 6e8, 100e6),
        ("near", "2:1", 8e8, 4e8, 100e6),
        ("near", "adaptive", 6e8, 6e8, 100e6),
        ("far", "1:1", 6e8, 6e8, 50e6),
        ("far", "2:1", 8e8, 4e8, 50e6),
        ("far", "adaptive", 8e8, 4e8, 50e6),
    ];
    let mut cells = Vec::new();
    let mut trials = Vec::new();
    for (distance, ratio, b1, b2, rate2) in splits {
        let cell = format!("distance={distance} ratio={ratio}");
        cells.push(cell.clone());
        for repetition in 1..=2 {
            let busy1: f64 = b1 * 8.0 / 100e6;
            let mut busy2 = b2 * 8.0 / rate2;
            if (distance, ratio, repetition) == ("far", "1:1", 2) {
                busy2 = 104.0;
            }
            let m = |name: &str, value: f64| {
                (
                    "fetch".to_string(),
                    Metric {
                        name: name.into(),
                        value,
                    },
                )
            };
            trials.push(TrialData {
                cell: cell.clone(),
                labels: vec![distance.into(), ratio.into()],
                repetition,
                status: Outcome::Ok,
                error: None,
                metrics: vec![
                    m("transfer_s", busy1.max(busy2) + 1.0),
                    m("server1_bytes", b1),
                    m("server1_busy_s", busy1),
                    m("server1_bps", b1 * 8.0 / busy1),
                    m("server2_bytes", b2),
                    m("server2_busy_s", busy2),
                    m("server2_bps", b2 * 8.0 / busy2),
                ],
            });
        }
    }
    ReportInput {
        study: "seed-000-small".into(),
        description: "two servers, the load split".into(),
        order: "random".into(),
        seed: 1,
        repeat: 2,
        params,
        cells,
        trials,
        machines: Vec::new(),
        groups: vec![("fetch".into(), None)],
        attempts: Vec::new(),
    }
}

/// A fetch's transfer time from two servers gets its ideal: per series (distance) the
/// servers' capacities from their bytes and busy seconds, per cell the time its split
/// would take at them, and the capacity-proportional split's time.
#[test]
fn a_fetch_from_two_servers_has_its_ideal() {
    use flowlab_report::study_report::{csv, markdown};
    use flowlab_results::study_report::build;
    let r = build(&fetch_study_input());
    let transfer = r
        .metrics
        .iter()
        .find(|m| m.metric == "transfer_s")
        .expect("transfer_s");
    // Byte counts are not reported; the per-server busy time and rate are.
    let names: Vec<&str> = r.metrics.iter().map(|m| m.metric.as_str()).collect();
    assert_eq!(
        names,
        [
            "transfer_s",
            "server1_busy_s",
            "server1_bps",
            "server2_busy_s",
            "server2_bps"
        ]
    );
    assert!(r.metrics[1..].iter().all(|m| m.ideals.is_empty()));
    let near = &transfer.ideals[0];
    assert_eq!(near.series, "distance=near");
    assert_eq!(near.capacities_bps, [100e6, 100e6]);
    // 1.2 GB = 9.6 Gbit over 200 Mbit/s.
    assert!((near.best_s - 48.0).abs() < 1e-9, "{}", near.best_s);
    // Far: server 2 moved 6+6+4+4+4+4 = 28e8 bytes in 96+104+64·4 = 456 s.
    let far = &transfer.ideals[1];
    let c2 = 28e8 * 8.0 / 456.0;
    assert_eq!(far.series, "distance=far");
    assert!((far.capacities_bps[0] - 100e6).abs() < 1e-3);
    assert!((far.capacities_bps[1] - c2).abs() < 1e-3, "{far:?}");
    assert!((far.best_s - 9.6e9 / (100e6 + c2)).abs() < 1e-9);
    let ideal = |cell: &str| {
        transfer
            .rows
            .iter()
            .find(|r| r.cell == cell)
            .and_then(|r| r.ideal)
            .expect("an ideal")
    };
    // Near: 1:1 gives each 4.8 Gbit at 100 Mbit/s; 2:1 gives server 1 6.4 Gbit.
    assert!((ideal("distance=near ratio=1:1") - 48.0).abs() < 1e-9);
    assert!((ideal("distance=near ratio=2:1") - 64.0).abs() < 1e-9);
    // Far 1:1: server 2's 4.8 Gbit at its capacity decides; 2:1: 6.4 Gbit over 100
    // Mbit/s against 3.2 Gbit over c2 (65.1 s) for server 2.
    assert!((ideal("distance=far ratio=1:1") - 4.8e9 / c2).abs() < 1e-9);
    assert!((ideal("distance=far ratio=2:1") - 3.2e9 / c2).abs() < 1e-9);
    assert!(3.2e9 / c2 > 64.0);
    pin!("study-report-ideal-markdown", markdown(&r));
    let text = csv(&r).expect("csv");
    let line = text
        .lines()
        .find(|l| l.contains("transfer_s") && l.contains("distance=near ratio=2:1"))
        .expect("row");
    assert!(line.ends_with(",64"), "{line}");
}

/// A ping run made by hand: 20 probes, round trips 100 µs to 2 ms, probe 6 lost, probe
/// 9 answered twice, probe 12's reply after 13's.
fn ping_result() -> flowlab_results::ping::PingResult {
    use flowlab_results::ping::{PingResult, PingStart, PingSummary, Probe, SCHEMA};
    let probes: Vec<Probe> = (1..=20u64)
        .map(|seq| {
            let sent = (seq - 1) * 10_000_000;
            let rtt = 100_000 * seq;
            let answered = seq != 6;
            let received = match seq {
                12 => sent + rtt + 15_000_000,
                _ => sent + rtt + 2_000,
            };
            Probe {
                seq,
                sent_ns: sent,
                received_ns: answered.then_some(received),
                server_ns: answered.then_some(2_000),
                forward_ns: answered.then_some(3_000_000 + (rtt / 2) as i64),
                backward_ns: answered.then_some(-3_000_000 + (rtt / 2) as i64),
                duplicates: u32::from(seq == 9),
                reordered: seq == 12,
            }
        })
        .collect();
    PingResult {
        schema: SCHEMA.into(),
        start: PingStart {
            host: "server.example".into(),
            address: "192.0.2.1:5201".into(),
            protocol: "udp".into(),
            size: 64,
            interval_seconds: 0.01,
            timestamps: "send: system clock before send(2); receive: kernel (SO_TIMESTAMPNS)"
                .into(),
            clocks_synced: false,
            started_unix: 1_795_000_000.0,
        },
        summary: PingSummary::of(&probes),
        interrupted: false,
        probes,
    }
}

#[test]
fn a_ping_run_in_every_format() {
    let r = ping_result();
    let mut text = table::ping_header("server.example", 5201, "udp", 64, 0.01);
    for p in r.probes.iter().filter(|p| p.received_ns.is_some()) {
        text += &table::ping_reply(p, "192.0.2.1:5201", "udp", 64);
    }
    text += &table::ping_summary(&r);
    text += &table::ping_histogram(&r);
    pin!("ping-table", text);
    pin!("ping-json", json::document(&r).expect("JSON"));
}

/// A recorded `flowlab rpm` run (tests/fixtures/rpm-queue.json): the heading, a line per
/// interval, the summary; and the same run cut short before a kind of probe completed.
#[test]
fn an_rpm_run_as_a_table() {
    let path = fixture_path("rpm-queue.json");
    let text = std::fs::read_to_string(&path).expect("fixture");
    let r: flowlab_results::rpm::RpmResult = serde_json::from_str(&text).expect("an RPM result");
    let loads: Vec<&str> = r.directions.iter().map(|d| d.direction.as_str()).collect();
    let mut out = table::rpm_header(
        &format!("{} port 5201", r.start.host),
        &r.start.params,
        &loads,
    );
    for d in &r.directions {
        for iv in &d.intervals {
            out += &table::rpm_interval(&d.direction, iv);
        }
    }
    out += &table::rpm_summary(&r);
    let mut cut = r.clone();
    cut.interrupted = true;
    cut.directions.truncate(1);
    cut.directions[0].responsiveness = None;
    cut.idle.latency_ms = None;
    cut.directions[0].stopped_adding = Some("10.0.3.2:5201 refused the load: busy".into());
    cut.error = Some("upload: cannot connect to 10.0.3.2:5201: refused".into());
    out += &table::rpm_summary(&cut);
    pin!("rpm-table", out);
    // An idle round trip above the loaded ones (busy CPUs on loopback answer sooner):
    // said as what the load took off, never as a negative addition.
    let mut quick = r.clone();
    let loaded = quick.directions[0]
        .responsiveness
        .as_ref()
        .expect("responsiveness")
        .request_loaded_ms;
    quick.idle.latency_ms = Some(loaded + 1.0);
    let text = table::rpm_summary(&quick);
    assert!(text.contains("took 1.000 ms off on its own"), "{text}");
    assert!(!text.contains("added -"), "{text}");
}
