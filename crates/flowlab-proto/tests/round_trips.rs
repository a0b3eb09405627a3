//! Round trips of the messages the two ends exchange as JSON: whatever flowlab sends,
//! the other end reads back as the same value, every field and every float exactly
//! (results exchanged after a test, the server's hello with its machine's state).

use std::collections::BTreeMap;

use flowlab_proto::frame;
use flowlab_proto::hello::ServerHello;
use flowlab_proto::results::{PeerResults, SocketSettings, StreamResults};
use flowlab_proto::system::{InterfaceInfo, SystemInfo};
use flowlab_proto::trace::{StreamTrace, TraceSample};
use proptest::prelude::*;

fn finite() -> impl Strategy<Value = f64> {
    any::<f64>().prop_filter("JSON has no NaN or infinity", |f| f.is_finite())
}

fn text() -> impl Strategy<Value = String> {
    ".{0,12}"
}

fn sample() -> impl Strategy<Value = TraceSample> {
    (
        any::<u64>(),
        any::<Option<u8>>(),
        prop::collection::vec(any::<Option<u64>>(), 8),
    )
        .prop_map(|(t_us, state, v)| TraceSample {
            t_us,
            state,
            sndbuf: v[0],
            snd_cwnd: v[1],
            srtt_us: v[2],
            bytes_acked: v[3],
            delivery_rate: v[4],
            rwnd_limited_us: v[5],
            snd_wnd: v[6],
            rcv_wnd: v[7],
            ..TraceSample::default()
        })
}

fn trace() -> impl Strategy<Value = StreamTrace> {
    (
        any::<i64>(),
        any::<u64>(),
        prop::option::of(text()),
        any::<bool>(),
        prop::collection::vec(sample(), 0..4),
    )
        .prop_map(
            |(id, period_us, congestion, truncated, samples)| StreamTrace {
                id,
                period_us,
                congestion,
                truncated,
                samples,
            },
        )
}

fn stream() -> impl Strategy<Value = StreamResults> {
    (
        (
            any::<i64>(),
            any::<u64>(),
            any::<i64>(),
            finite(),
            any::<i64>(),
            any::<i64>(),
            any::<i64>(),
            any::<i64>(),
            finite(),
            finite(),
        ),
        (
            prop::collection::vec(any::<Option<u64>>(), 10),
            prop::option::of((
                any::<u64>(),
                any::<u64>(),
                prop::option::of(text()),
                any::<Option<u8>>(),
                any::<Option<bool>>(),
                any::<Option<u64>>(),
            )),
            prop::option::of(trace()),
        ),
    )
        .prop_map(|(a, (extra, socket, trace))| StreamResults {
            id: a.0,
            bytes: a.1,
            retransmits: a.2,
            jitter: a.3,
            errors: a.4,
            packets: a.5,
            omitted_errors: a.6,
            omitted_packets: a.7,
            start_time: a.8,
            end_time: a.9,
            out_of_order: extra[0],
            duplicates: extra[1],
            delivered_bytes: extra[2],
            sw_retransmits: extra[3],
            rcvbuf_drops: extra[4],
            backoff_cuts: extra[5],
            foreign: extra[6],
            dsack_dups: extra[7],
            reordering: extra[8],
            receiver_holds: extra[9],
            socket: socket.map(
                |(sndbuf, rcvbuf, congestion, tos, dont_fragment, snd_timeout_ms)| SocketSettings {
                    sndbuf,
                    rcvbuf,
                    congestion,
                    tos,
                    dont_fragment,
                    snd_timeout_ms,
                },
            ),
            trace,
        })
}

fn peer_results() -> impl Strategy<Value = PeerResults> {
    (
        finite(),
        finite(),
        finite(),
        any::<i64>(),
        prop::option::of(text()),
        prop::collection::vec(stream(), 0..4),
        prop::option::of(text()),
    )
        .prop_map(
            |(total, user, system, retr, congestion_used, streams, server_output_text)| {
                PeerResults {
                    cpu_util_total: total,
                    cpu_util_user: user,
                    cpu_util_system: system,
                    sender_has_retransmits: retr,
                    congestion_used,
                    streams,
                    server_output_json: None,
                    server_output_text,
                }
            },
        )
}

fn system() -> impl Strategy<Value = SystemInfo> {
    (
        (
            prop::option::of(text()),
            any::<Option<u64>>(),
            prop::collection::vec(text(), 0..3),
            prop::option::of(text()),
            any::<Option<[u64; 3]>>(),
            any::<Option<[u64; 3]>>(),
        ),
        prop::collection::vec(any::<Option<u64>>(), 4),
        prop::collection::btree_map(text(), text(), 0..3),
        (prop::option::of(text()), prop::option::of(text())),
        any::<Option<i64>>(),
        prop::collection::vec(
            (
                text(),
                any::<Option<u64>>(),
                prop::option::of(text()),
                prop::collection::btree_map(text(), any::<bool>(), 0..3),
                prop::collection::vec(text(), 0..3),
            ),
            0..3,
        ),
    )
        .prop_map(
            |(a, mem, tcp, (default_qdisc, cpuidle_driver), cpu_latency_us, ifs)| SystemInfo {
                kernel: a.0,
                cpus: a.1,
                cpuidle_driver,
                cpu_latency_us,
                congestion_available: a.2,
                congestion_default: a.3,
                tcp_rmem: a.4,
                tcp_wmem: a.5,
                rmem_max: mem[0],
                wmem_max: mem[1],
                rmem_default: mem[2],
                wmem_default: mem[3],
                tcp,
                default_qdisc,
                interfaces: ifs
                    .into_iter()
                    .map(|(name, mtu, qdisc, offloads, rps_cpus)| InterfaceInfo {
                        name,
                        mtu,
                        qdisc,
                        offloads,
                        rps_cpus,
                    })
                    .collect(),
            },
        )
}

fn hello() -> impl Strategy<Value = ServerHello> {
    (
        any::<u32>(),
        text(),
        prop::collection::vec(text(), 0..6),
        prop::option::of(text()),
        prop::option::of(system()),
    )
        .prop_map(
            |(version, server_version, features, error, system)| ServerHello {
                version,
                server_version,
                features,
                error,
                system,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn results_read_back_as_sent(r in peer_results()) {
        let wire = frame::encode(&r);
        prop_assert_eq!(frame::decode::<PeerResults>(&wire[4..]), Ok(r));
    }

    #[test]
    fn a_hello_reads_back_as_sent(h in hello()) {
        let wire = frame::encode(&h);
        prop_assert_eq!(frame::decode::<ServerHello>(&wire[4..]), Ok(h));
    }
}

#[test]
fn an_empty_map_of_settings_is_left_out_and_read_back_empty() {
    let h = ServerHello {
        version: 1,
        server_version: "0.1.0".into(),
        features: Vec::new(),
        error: None,
        system: Some(SystemInfo {
            tcp: BTreeMap::new(),
            ..SystemInfo::default()
        }),
    };
    let wire = frame::encode(&h);
    let body = std::str::from_utf8(&wire[4..]).expect("UTF-8");
    assert!(!body.contains("\"tcp\""), "{body}");
    assert_eq!(frame::decode::<ServerHello>(&wire[4..]), Ok(h));
}
