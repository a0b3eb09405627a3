//! What `flowlab ping` measured: every probe as the client saw it ([`Probe`]) and their
//! summary ([`PingSummary`]), filled in by the engine; docs/latency.md defines each number.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Schema tag of a ping result.
pub const SCHEMA: &str = "flowlab.ping/1";

/// What was asked for and how it was measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PingStart {
    /// As given on the command line.
    pub host: String,
    /// The address probed.
    pub address: String,
    /// `udp`.
    pub protocol: String,
    /// Bytes of each probe (UDP payload); replies are as long.
    pub size: usize,
    /// Seconds between probes; 0 is back to back (the next when the last is answered).
    pub interval_seconds: f64,
    /// Where the client's send and receive times come from.
    pub timestamps: String,
    /// Whether the user said both clocks are synchronised (`--clocks-synced`): only then
    /// are one-way delays absolute.
    pub clocks_synced: bool,
    /// The client's clock when the run started, seconds since the Unix epoch.
    pub started_unix: f64,
}

/// One probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    pub seq: u64,
    /// When it was sent, ns since the run started (the client's clock).
    pub sent_ns: u64,
    /// When its reply arrived (the first copy), ns since the run started; `None`: no
    /// reply in time (lost).
    pub received_ns: Option<u64>,
    /// How long the server held it (its send time minus its receive time), ns.
    pub server_ns: Option<u64>,
    /// Server receive time minus client send time, ns: the forward one-way delay plus
    /// the offset between the two clocks.
    pub forward_ns: Option<i64>,
    /// Client receive time minus server send time, ns: the backward one-way delay minus
    /// that offset.
    pub backward_ns: Option<i64>,
    /// Copies of its reply beyond the first.
    pub duplicates: u32,
    /// Its reply arrived after the reply to a later probe.
    pub reordered: bool,
}

impl Probe {
    /// The round trip without the server's time, ns.
    pub fn rtt_ns(&self) -> Option<u64> {
        let rx = self.received_ns?;
        Some(
            rx.saturating_sub(self.sent_ns)
                .saturating_sub(self.server_ns.unwrap_or(0)),
        )
    }
}

/// Percentiles of a set of times, ms. Percentiles come from an HDR histogram (exact to 3
/// significant digits at any count); min and max are exact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub samples: u64,
    pub min_ms: f64,
    pub mean_ms: f64,
    pub median_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub stdev_ms: f64,
}

/// A one-way delay's variation: each probe's delay minus the smallest of the run, ms
/// (the clocks' offset cancels); absolute delays only with synchronised clocks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Variation {
    pub median_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// The smallest one-way delay itself, ms: the true one only with synchronised clocks.
    pub min_raw_ms: f64,
}

/// The run in numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PingSummary {
    pub sent: u64,
    pub received: u64,
    pub lost: u64,
    pub loss_percent: f64,
    pub duplicates: u64,
    pub reordered: u64,
    /// Round trips without the server's time; `None` when nothing came back.
    pub rtt: Option<Latency>,
    /// The server's time per probe.
    pub server: Option<Latency>,
    /// RFC 3550's interarrival jitter over the round trips, in arrival order, ms.
    pub jitter_ms: Option<f64>,
    pub forward: Option<Variation>,
    pub backward: Option<Variation>,
    /// Replies a second, from the first send to the last reply: transactions per second
    /// of a back-to-back run (`-i 0`).
    pub replies_per_second: Option<f64>,
}

/// A whole run, as `-J` prints it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PingResult {
    pub schema: String,
    pub start: PingStart,
    pub summary: PingSummary,
    /// Ended by Ctrl-C or `--deadline` before its count or time.
    pub interrupted: bool,
    pub probes: Vec<Probe>,
}

/// Highest value a latency histogram holds, ns (an hour); larger values are clamped.
const HIST_MAX_NS: u64 = 3_600_000_000_000;

/// An HDR histogram of `values` (ns), 3 significant digits. It holds each value plus
/// one (its range starts at 1): read it with [`quantile`].
pub fn histogram(values: impl IntoIterator<Item = u64>) -> Histogram<u64> {
    let mut h =
        Histogram::<u64>::new_with_bounds(1, HIST_MAX_NS, 3).expect("constant bounds are valid");
    for v in values {
        h.saturating_record(v.saturating_add(1).min(HIST_MAX_NS));
    }
    h
}

/// The value at quantile `q` of a [`histogram`], ns.
pub fn quantile(h: &Histogram<u64>, q: f64) -> u64 {
    h.value_at_quantile(q).saturating_sub(1)
}

fn ms(ns: f64) -> f64 {
    ns / 1e6
}

/// The percentiles of `values` (ns); `None` when there are none.
pub fn latency(values: &[u64]) -> Option<Latency> {
    let (&min, &max) = (values.iter().min()?, values.iter().max()?);
    let h = histogram(values.iter().copied());
    let n = values.len() as f64;
    let mean = values.iter().map(|&v| v as f64).sum::<f64>() / n;
    let var = values
        .iter()
        .map(|&v| (v as f64 - mean).powi(2))
        .sum::<f64>()
        / n;
    let q = |q: f64| ms(quantile(&h, q) as f64).clamp(ms(min as f64), ms(max as f64));
    Some(Latency {
        samples: values.len() as u64,
        min_ms: ms(min as f64),
        mean_ms: ms(mean),
        median_ms: q(0.5),
        p90_ms: q(0.9),
        p99_ms: q(0.99),
        p999_ms: q(0.999),
        max_ms: ms(max as f64),
        stdev_ms: ms(var.sqrt()),
    })
}

/// RFC 3550 §6.4.1: J += (|D| − J) / 16 over consecutive round trips (ns), ms.
pub fn jitter(rtts_in_arrival_order: &[u64]) -> Option<f64> {
    let mut j = 0.0;
    for w in rtts_in_arrival_order.windows(2) {
        let d = (w[1] as f64 - w[0] as f64).abs();
        j += (d - j) / 16.0;
    }
    (rtts_in_arrival_order.len() >= 2).then_some(ms(j))
}

fn variation(raw: &[i64]) -> Option<Variation> {
    let &min = raw.iter().min()?;
    let above: Vec<u64> = raw.iter().map(|&v| v.abs_diff(min)).collect();
    let h = histogram(above.iter().copied());
    let max = above.iter().copied().max().unwrap_or(0);
    let q = |q: f64| ms(quantile(&h, q) as f64).min(ms(max as f64));
    Some(Variation {
        median_ms: q(0.5),
        p99_ms: q(0.99),
        max_ms: ms(max as f64),
        min_raw_ms: ms(min as f64),
    })
}

impl PingSummary {
    /// The summary of a run's probes (in the order they were sent).
    pub fn of(probes: &[Probe]) -> PingSummary {
        let sent = probes.len() as u64;
        let answered: Vec<&Probe> = probes.iter().filter(|p| p.received_ns.is_some()).collect();
        let received = answered.len() as u64;
        let lost = sent - received;
        let rtts: Vec<u64> = answered.iter().filter_map(|p| p.rtt_ns()).collect();
        let servers: Vec<u64> = answered.iter().filter_map(|p| p.server_ns).collect();
        let mut arrival: Vec<&Probe> = answered.clone();
        arrival.sort_by_key(|p| p.received_ns);
        let in_arrival: Vec<u64> = arrival.iter().filter_map(|p| p.rtt_ns()).collect();
        let forward: Vec<i64> = answered.iter().filter_map(|p| p.forward_ns).collect();
        let backward: Vec<i64> = answered.iter().filter_map(|p| p.backward_ns).collect();
        let first = probes.iter().map(|p| p.sent_ns).min();
        let last = answered.iter().filter_map(|p| p.received_ns).max();
        let replies_per_second = match (first, last) {
            (Some(a), Some(b)) if b > a => Some(received as f64 / ((b - a) as f64 / 1e9)),
            _ => None,
        };
        PingSummary {
            sent,
            received,
            lost,
            loss_percent: if sent == 0 {
                0.0
            } else {
                100.0 * lost as f64 / sent as f64
            },
            duplicates: probes.iter().map(|p| u64::from(p.duplicates)).sum(),
            reordered: probes.iter().filter(|p| p.reordered).count() as u64,
            rtt: latency(&rtts),
            server: latency(&servers),
            jitter_ms: jitter(&in_arrival),
            forward: variation(&forward),
            backward: variation(&backward),
            replies_per_second,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(seq: u64, sent: u64, rtt: Option<u64>) -> Probe {
        Probe {
            seq,
            sent_ns: sent,
            received_ns: rtt.map(|r| sent + r + 1_000),
            server_ns: rtt.map(|_| 1_000),
            forward_ns: rtt.map(|r| 5_000_000 + r as i64 / 2),
            backward_ns: rtt.map(|r| -5_000_000 + r as i64 / 2),
            duplicates: 0,
            reordered: false,
        }
    }

    #[test]
    fn percentiles_match_a_hand_computed_set() {
        // 1..=1000 µs: the median is 500 µs (or 501), p90 900, p99 990, p99.9 999.
        let values: Vec<u64> = (1..=1000u64).map(|us| us * 1_000).collect();
        let l = latency(&values).expect("values");
        let close = |got: f64, want: f64| (got - want).abs() <= want * 0.001 + 1e-9;
        assert_eq!(l.samples, 1000);
        assert!(close(l.min_ms, 0.001) && close(l.max_ms, 1.0), "{l:?}");
        assert!(close(l.mean_ms, 0.5005), "{l:?}");
        assert!(
            close(l.median_ms, 0.500) || close(l.median_ms, 0.501),
            "{l:?}"
        );
        assert!(close(l.p90_ms, 0.900), "{l:?}");
        assert!(close(l.p99_ms, 0.990), "{l:?}");
        assert!(close(l.p999_ms, 0.999), "{l:?}");
        // Population standard deviation of 1..=1000: sqrt((1000² − 1) / 12) = 288.675 µs.
        assert!(close(l.stdev_ms, 0.288675), "{l:?}");
    }

    #[test]
    fn jitter_follows_rfc_3550() {
        assert_eq!(jitter(&[]), None);
        assert_eq!(jitter(&[5]), None);
        // Alternating 1 ms and 2 ms: D = 1 ms each time; J after n steps is 1 − (15/16)^n.
        let rtts: Vec<u64> = (0..10)
            .map(|i| if i % 2 == 0 { 1_000_000 } else { 2_000_000 })
            .collect();
        let want = 1.0 - (15.0f64 / 16.0).powi(9);
        assert!((jitter(&rtts).unwrap() - want).abs() < 1e-12);
    }

    #[test]
    fn a_summary_counts_loss_duplicates_and_reordering_apart() {
        let mut probes: Vec<Probe> = (1..=10)
            .map(|i| probe(i, i * 1_000_000, (i != 4 && i != 7).then_some(100_000 * i)))
            .collect();
        probes[1].duplicates = 2;
        probes[5].reordered = true;
        let s = PingSummary::of(&probes);
        assert_eq!((s.sent, s.received, s.lost), (10, 8, 2));
        assert!((s.loss_percent - 20.0).abs() < 1e-12);
        assert_eq!((s.duplicates, s.reordered), (2, 1));
        let rtt = s.rtt.expect("round trips");
        assert!((rtt.min_ms - 0.1).abs() < 1e-9 && (rtt.max_ms - 1.0).abs() < 1e-9);
        let server = s.server.expect("server times");
        assert!((server.median_ms - 0.001).abs() < 1e-9);
        // Forward delays grow by half the round trip: 0.05 ms a step above the first.
        let f = s.forward.expect("forward");
        assert!((f.max_ms - 0.45).abs() < 1e-3, "{f:?}");
        assert!((f.min_raw_ms - 5.05).abs() < 1e-9, "{f:?}");
        let none = PingSummary::of(&[probe(1, 0, None)]);
        assert_eq!((none.lost, none.rtt, none.jitter_ms), (1, None, None));
        assert_eq!(none.loss_percent, 100.0);
    }
}
