//! What a diagnosis advises ([`flowlab_report::advice`]), from the diagnosis of
//! synthetic traces whose numbers are known: windows sized for the path's rate where it
//! is known and for named rates where it is not, microseconds on loopback, the reader
//! blamed for a window its application left full, loss and queueing named, and a queue
//! the latency probes saw put first where the network limited the sender.

use flowlab_proto::trace::TraceSample;
use flowlab_report::advice;
use flowlab_results::diagnose::{Limit, PathRate, diagnose_direction};
use flowlab_results::spec::StreamDirection;

/// A sender sample at `t_ms` with the kernel's chrono counters.
fn chrono(t_ms: u64, busy_ms: u64, rwnd_ms: u64, sndbuf_ms: u64) -> TraceSample {
    TraceSample {
        t_us: t_ms * 1000,
        busy_time_us: Some(busy_ms * 1000),
        rwnd_limited_us: Some(rwnd_ms * 1000),
        sndbuf_limited_us: Some(sndbuf_ms * 1000),
        ..TraceSample::default()
    }
}

/// A window-limited sender's samples as bbr leaves them: the kernel counts the whole
/// span as busy and none of it as receive-window limited, while bytes in flight sit at
/// the peer's 64 KiB window in `full` of `n` samples (RTT 40 ms, 1.6 MB/s).
fn window_limited_under_bbr(n: u64, full: u64) -> Vec<TraceSample> {
    (0..n)
        .map(|i| {
            let flight_segs = if i < full { 45 } else { 20 };
            TraceSample {
                t_us: i * 10_000,
                busy_time_us: Some(i * 10_000),
                rwnd_limited_us: Some(0),
                sndbuf_limited_us: Some(0),
                unacked: Some(flight_segs),
                sacked: Some(0),
                lost: Some(0),
                retrans: Some(0),
                snd_mss: Some(1448),
                snd_wnd: Some(65_536),
                snd_cwnd: Some(200),
                min_rtt_us: Some(40_000),
                srtt_us: Some(41_000),
                delivery_rate: Some(1_600_000),
                ..TraceSample::default()
            }
        })
        .collect()
}

/// What the diagnosis of `samples` (one direction, its rate `rate`) advises.
fn advised(samples: &[TraceSample], rate: Option<&PathRate>) -> Vec<String> {
    let d = diagnose_direction(StreamDirection::Up, &[samples], rate).expect("a diagnosis");
    advice::of(&d, rate, None)
}

#[test]
fn the_first_sentence_names_the_largest_limit_and_its_share() {
    // 1000 ms traced: busy 900 (rwnd 410, sndbuf 90), idle 100.
    let s = [chrono(100, 50, 10, 0), chrono(1100, 950, 420, 90)];
    let a = advised(&s, None);
    assert!(a[0].starts_with("receive-window limited 41 %"), "{a:?}");
}

#[test]
fn a_window_shrunk_by_unread_data_blames_the_reader_not_the_buffer() {
    // The window keeps reopening to 1 MB, then the receiving application falls behind
    // and it shrinks to 64 KiB, which bytes in flight then fill.
    let mut s = window_limited_under_bbr(100, 100);
    for x in s.iter_mut().step_by(5) {
        x.snd_wnd = Some(1_000_000);
        x.unacked = Some(10);
    }
    let a = advised(&s, None);
    assert!(
        a[0].contains("so the reader (its CPU, on loopback) is the limit")
            && !a[0].contains("--recv-window"),
        "{a:?}"
    );
    // A first window far larger than the later ones (a buffer set after the handshake)
    // is not that: the window never reopens.
    let mut small = window_limited_under_bbr(100, 100);
    small[0].snd_wnd = Some(1_000_000);
    small[0].unacked = Some(10);
    let a = advised(&small, None);
    assert!(a[0].contains("--recv-window"), "{a:?}");
}

/// A queue the probes saw build goes first in a network-limited direction's advice,
/// and nowhere else; without a queue nothing changes.
#[test]
fn a_queue_the_probes_saw_is_named_where_the_network_limits() {
    let probes = |rtt_ms: u64| -> Vec<flowlab_results::ping::Probe> {
        (1..=50)
            .map(|i| flowlab_results::ping::Probe {
                seq: i,
                sent_ns: i * 10_000_000,
                received_ns: Some((i * 10 + rtt_ms) * 1_000_000),
                server_ns: Some(0),
                forward_ns: None,
                backward_ns: None,
                duplicates: 0,
                reordered: false,
            })
            .collect()
    };
    let of = |loaded_ms| {
        flowlab_results::latency::TestLatency::of(64, 0.01, "t", probes(10), probes(loaded_ms))
    };
    // Busy the whole second, never window-limited: the network; and a direction
    // limited by the receiver's window.
    let network = [chrono(0, 0, 0, 0), chrono(1000, 1000, 0, 0)];
    let window = [chrono(0, 0, 0, 0), chrono(1000, 1000, 1000, 0)];
    let d = [
        diagnose_direction(StreamDirection::Up, &[&network], None).expect("up"),
        diagnose_direction(StreamDirection::Down, &[&window], None).expect("down"),
    ];
    assert_eq!(
        (d[0].primary, d[1].primary),
        (Limit::Network, Limit::ReceiveWindow)
    );
    let (queued, calm) = (of(60), of(10));
    let a = advice::of(&d[0], None, Some(&queued));
    assert!(a[0].contains("queue-building bottleneck"), "{a:?}");
    assert_eq!(&a[1..], advice::of(&d[0], None, None));
    assert_eq!(
        advice::of(&d[1], None, Some(&queued)),
        advice::of(&d[1], None, None)
    );
    assert_eq!(
        advice::of(&d[0], None, Some(&calm)),
        advice::of(&d[0], None, None)
    );
}

#[test]
fn advice_sizes_the_window_from_the_paths_rate_not_the_rate_achieved() {
    let s = window_limited_under_bbr(100, 95);
    let rate = PathRate {
        bps: 30_000_000,
        source: "the bottleneck of topology port, h1 → h4".into(),
    };
    // 30 Mbit/s × 40 ms = 150 000 bytes; the achieved 1.6 MB/s would give 64 000.
    let a = advised(&s, Some(&rate));
    let first = &a[0];
    // What to do, with its numbers, comes first; then why, in the table's units.
    assert!(
        first.starts_with(
            "receive-window limited 95 % of the time (at the receiver's window, 64.0 KBytes, \
             in 95 of 100 samples): raise the receiver's buffer to `--recv-window 147K` (or \
             `-w`), or net.ipv4.tcp_rmem's max to at least 300000 bytes, since"
        ) && first.contains(
            "40.0 ms (the lowest RTT) × 30.0 Mbits/sec (the bottleneck of topology port, \
             h1 → h4) = 146 KBytes"
        ),
        "{first}"
    );
    // Seed 002's numbers: 500 Mbit/s at 50 ms, a window of 3.125 MB.
    let mut seed = window_limited_under_bbr(10, 10);
    for x in &mut seed {
        x.min_rtt_us = Some(50_000);
    }
    let rate = PathRate {
        bps: 500_000_000,
        source: "the -b target".into(),
    };
    let a = advised(&seed, Some(&rate));
    assert!(a[0].contains("`--recv-window 3M`"), "{a:?}");
    assert!(a[0].contains("at least 6250000 bytes"), "{a:?}");
}

#[test]
fn an_unknown_rate_gets_sizes_for_named_rates() {
    let s = window_limited_under_bbr(100, 95);
    let a = advised(&s, None);
    let first = &a[0];
    // 40 ms × 100 Mbit/s = 500 kB, × 1 Gbit/s = 5 MB, × 10 Gbit/s = 50 MB.
    assert!(
        first.contains("the path's rate is unknown")
            && first.contains(
                "`--recv-window 489K` for 100 Mbits/sec, `--recv-window 5M` for 1.00 \
                 Gbits/sec, `--recv-window 48M` for 10.0 Gbits/sec"
            ),
        "{first}"
    );
}

/// Advice is worded in the table's units, the family `-f a` chooses: binary sizes
/// ("KBytes"), bit rates as "bits/sec", and a sysctl's value in bytes, never a second
/// spelling ("kB", "Mbit/s") beside the evidence's.
#[test]
fn advice_speaks_the_tables_units() {
    let s = window_limited_under_bbr(100, 95);
    let rate = PathRate {
        bps: 30_000_000,
        source: "the -b target".into(),
    };
    let mut loopback = window_limited_under_bbr(100, 95);
    for x in &mut loopback {
        x.min_rtt_us = Some(5);
        x.srtt_us = Some(35);
    }
    for a in [
        advised(&s, Some(&rate)),
        advised(&s, None),
        advised(&loopback, None),
    ]
    .concat()
    {
        for other in [" kB", " MB", " GB", "bit/s", " B "] {
            assert!(!a.contains(other), "{other:?} in {a}");
        }
        assert!(a.contains("Bytes") || !a.contains("window"), "{a}");
    }
}

#[test]
fn loopback_rtts_are_said_in_microseconds() {
    // 5 µs × even 100 Gbit/s is 62.5 kB, below the window: the RTT under load (35 µs)
    // filled it, and "0.0 ms" would say nothing.
    let mut s = window_limited_under_bbr(100, 95);
    for x in &mut s {
        x.min_rtt_us = Some(5);
        x.srtt_us = Some(35);
    }
    let a = advised(&s, None);
    let first = &a[0];
    assert!(
        first.contains("the window already holds the lowest RTT (5 µs)")
            && first.contains("(median 35 µs)"),
        "{first}"
    );
}

#[test]
fn a_window_that_holds_the_paths_bdp_is_not_to_be_raised() {
    // 1 Mbit/s × 40 ms = 5 kB, far below the 64 KiB window: a queue filled it.
    let s = window_limited_under_bbr(100, 95);
    let rate = PathRate {
        bps: 1_000_000,
        source: "the bottleneck of topology t, h1 → h2".into(),
    };
    let a = advised(&s, Some(&rate));
    let first = &a[0];
    assert!(
        first.contains("although the window already holds"),
        "{first}"
    );
    assert!(first.contains("would only lengthen that queue"), "{first}");
    assert!(!first.contains("--recv-window"), "{first}");
}

#[test]
fn network_advice_names_loss_or_queueing() {
    let mut a = chrono(0, 0, 0, 0);
    let mut b = chrono(1000, 1000, 0, 0);
    a.total_retrans = Some(0);
    b.total_retrans = Some(50);
    a.data_segs_out = Some(0);
    b.data_segs_out = Some(1000);
    let advice = advised(&[a, b], None);
    assert!(
        advice[0].starts_with("congestion-window (network) limited")
            && advice[0].contains("5.0 % of segments were retransmitted"),
        "{advice:?}"
    );
    let (mut a, mut b) = (chrono(0, 0, 0, 0), chrono(1000, 1000, 0, 0));
    a.min_rtt_us = Some(10_000);
    b.min_rtt_us = Some(10_000);
    a.srtt_us = Some(40_000);
    b.srtt_us = Some(40_000);
    let advice = advised(&[a, b], None);
    assert!(advice[0].contains("4.0× its minimum"), "{advice:?}");
}
