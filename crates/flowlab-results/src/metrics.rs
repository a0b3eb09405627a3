//! The flat metrics of a result: a few numbers per step that a study compares across
//! cells (and that the results database keeps beside the full document, for SQL and
//! notebooks). Each is defined in docs/metrics.md ("Study metrics"); every one is read
//! from the result, none measured again.

use serde::Serialize;

use crate::fetch::FetchResult;
use crate::result::TestResult;
use crate::rtt::RttResult;

/// One number of a step's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metric {
    /// e.g. `throughput_bps`, `transfer_s`; `…_up_…`/`…_down_…` for a `--bidir` test.
    pub name: String,
    pub value: f64,
}

/// The unit of metric `name`, for axes and tables: from its suffix.
pub fn unit(name: &str) -> &'static str {
    match name.rsplit('_').next() {
        Some("bps") => "bit/s",
        Some("s") => "s",
        Some("ms") => "ms",
        Some("percent") => "%",
        Some("bytes") => "B",
        _ => "",
    }
}

/// The values metric `name` can take: none is negative (rates, times, counts, RTTs,
/// CPU), and a loss or integrity percentage is at most 100.
pub fn range(name: &str) -> (f64, f64) {
    let share = ["loss", "integrity", "echo_loss"]
        .iter()
        .any(|p| name.starts_with(p) && name.ends_with("_percent"));
    (0.0, if share { 100.0 } else { f64::INFINITY })
}

/// Whether more of metric `name` is better (throughput) or worse (time, loss, delay);
/// `None` when it is neither (a count of bytes).
pub fn higher_is_better(name: &str) -> Option<bool> {
    if name.starts_with("throughput") || name.starts_with("integrity") {
        Some(true)
    } else if name.starts_with("bytes") {
        None
    } else {
        Some(false)
    }
}

fn push(out: &mut Vec<Metric>, name: String, value: Option<f64>) {
    if let Some(value) = value.filter(|v| v.is_finite()) {
        out.push(Metric { name, value });
    }
}

/// A test's metrics: per direction (named plainly for a one-way test), the receiver's
/// throughput, transfer time and bytes, the sender's retransmissions; UDP loss, jitter
/// and integrity; the median smoothed RTT of the intervals; with `--latency` the idle
/// and loaded round trips; both ends' CPU.
pub fn of_test(r: &TestResult) -> Vec<Metric> {
    let mut out = Vec::new();
    let Some(end) = &r.end else { return out };
    let both = end.sums.len() > 1;
    for sum in &end.sums {
        let d = |name: &str, unit: &str| {
            if both {
                format!("{name}_{}{unit}", sum.direction.as_str())
            } else {
                format!("{name}{unit}")
            }
        };
        if let Some(rx) = &sum.receiver {
            push(&mut out, d("throughput", "_bps"), Some(rx.bits_per_second));
            push(&mut out, d("transfer", "_s"), Some(rx.seconds));
            push(&mut out, d("received", "_bytes"), Some(rx.bytes as f64));
            if let Some(u) = &rx.udp {
                push(&mut out, d("loss", "_percent"), Some(u.lost_percent));
                push(&mut out, d("jitter", "_ms"), Some(u.jitter_ms));
                push(&mut out, d("integrity", "_percent"), u.integrity_percent);
            }
        }
        if let Some(tx) = &sum.sender {
            push(
                &mut out,
                d("retransmits", ""),
                tx.retransmits.map(|n| n as f64),
            );
            push(
                &mut out,
                d("resent_messages", ""),
                tx.sw_retransmits.map(|n| n as f64),
            );
        }
        let mut rtts: Vec<u64> = r
            .intervals
            .iter()
            .filter(|iv| !iv.omitted)
            .flat_map(|iv| &iv.streams)
            .filter(|s| s.direction == sum.direction)
            .filter_map(|s| s.tcp.as_ref().map(|t| t.rtt_us))
            .filter(|&us| us > 0)
            .collect();
        rtts.sort_unstable();
        push(
            &mut out,
            d("rtt", "_ms"),
            (!rtts.is_empty()).then(|| rtts[rtts.len() / 2] as f64 / 1000.0),
        );
    }
    if let Some(l) = &r.latency {
        let rtt = |s: &crate::ping::PingSummary, f: fn(&crate::ping::Latency) -> f64| {
            s.rtt.as_ref().map(f)
        };
        push(
            &mut out,
            "latency_idle_ms".into(),
            rtt(&l.idle, |r| r.median_ms),
        );
        push(
            &mut out,
            "latency_loaded_ms".into(),
            rtt(&l.loaded, |r| r.median_ms),
        );
        push(
            &mut out,
            "latency_loaded_p99_ms".into(),
            rtt(&l.loaded, |r| r.p99_ms),
        );
    }
    if let Some(m) = &end.multicast {
        multicast(&mut out, m);
    }
    push(
        &mut out,
        "cpu_local_percent".into(),
        Some(end.cpu.local_total),
    );
    push(
        &mut out,
        "cpu_remote_percent".into(),
        Some(end.cpu.remote_total).filter(|&c| c > 0.0),
    );
    out
}

/// A multicast test's receivers, numbered from 1 in the order of `--receivers`: each
/// one's throughput, loss and jitter, and the worst of them (the least throughput, the
/// most loss) over those that returned results.
fn multicast(out: &mut Vec<Metric>, m: &crate::result::MulticastEnd) {
    let mut least: Option<f64> = None;
    let mut worst: Option<f64> = None;
    for (i, r) in m.receivers.iter().enumerate() {
        let Some(t) = &r.totals else { continue };
        let n = i + 1;
        push(
            out,
            format!("throughput_receiver{n}_bps"),
            Some(t.bits_per_second),
        );
        least = Some(least.map_or(t.bits_per_second, |l| l.min(t.bits_per_second)));
        if let Some(u) = &t.udp {
            push(
                out,
                format!("loss_receiver{n}_percent"),
                Some(u.lost_percent),
            );
            push(out, format!("jitter_receiver{n}_ms"), Some(u.jitter_ms));
            worst = Some(worst.map_or(u.lost_percent, |w| w.max(u.lost_percent)));
        }
    }
    push(out, "throughput_least_bps".into(), least);
    push(out, "loss_worst_percent".into(), worst);
}

/// A fetch's metrics: its transfer time, throughput, and fragments that arrived corrupt;
/// per server, numbered from 1 in the order of its `--from` options, the bytes it
/// delivered, the seconds it was busy and its rate while busy.
pub fn of_fetch(r: &FetchResult) -> Vec<Metric> {
    let mut out = Vec::new();
    push(&mut out, "transfer_s".into(), Some(r.seconds));
    push(&mut out, "throughput_bps".into(), Some(r.bits_per_second));
    push(
        &mut out,
        "corrupt_fragments".into(),
        Some(r.servers.iter().map(|s| s.corrupt as f64).sum()),
    );
    for (i, s) in r.servers.iter().enumerate() {
        let n = i + 1;
        push(&mut out, format!("server{n}_bytes"), Some(s.bytes as f64));
        push(&mut out, format!("server{n}_busy_s"), Some(s.busy_seconds));
        push(&mut out, format!("server{n}_bps"), Some(s.bits_per_second));
    }
    out
}

/// An RTT step's metrics: its echoes' median, 95th percentile and largest RTT, and the
/// share lost.
pub fn of_rtt(r: &RttResult) -> Vec<Metric> {
    let mut out = Vec::new();
    push(&mut out, "rtt_median_ms".into(), r.median_ms);
    push(&mut out, "rtt_p95_ms".into(), r.p95_ms);
    push(&mut out, "rtt_max_ms".into(), r.max_ms);
    push(&mut out, "echo_loss_percent".into(), Some(r.lost_percent));
    out
}

/// The metrics of a step of `kind` (`test`, `fetch` or `rtt`) from its `-J` document; none
/// when the document is not that kind's result (a failed step's error).
pub fn of_document(kind: &str, document: &str) -> Vec<Metric> {
    match kind {
        "test" => serde_json::from_str::<TestResult>(document)
            .map(|r| of_test(&r))
            .unwrap_or_default(),
        "fetch" => serde_json::from_str::<FetchResult>(document)
            .map(|r| of_fetch(&r))
            .unwrap_or_default(),
        "rtt" => serde_json::from_str::<RttResult>(document)
            .map(|r| of_rtt(&r))
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}
