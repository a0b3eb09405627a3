//! From results to numbers to draw (no drawing here).

use flowlab_proto::trace::TraceSample;
use flowlab_report::units::unit_name;
use flowlab_results::diagnose::window_full;
use flowlab_results::latency::TestLatency;
use flowlab_results::result::{StreamDirection, TracedStream};

use crate::{Graph, Input, PlotError};

/// A line: name for the legend and (x, y) points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Its colour, as an index into the palette (`GREY` for a neutral line); `None`:
    /// by its place among its kind (the i-th series the i-th colour).
    pub colour: Option<usize>,
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// The palette index of a neutral grey (a line joining points coloured each their own).
pub const GREY: usize = usize::MAX;

/// A shaded band between `lo` and `hi` at each x.
#[derive(Debug, Clone, PartialEq)]
pub struct Band {
    /// As a [`Series`]'s.
    pub colour: Option<usize>,
    pub name: String,
    pub points: Vec<(f64, f64, f64)>,
}

/// One chart: title, axes with units, lines, bands and marked points.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    pub bands: Vec<Band>,
    /// Points drawn as dots, e.g. "window full".
    pub markers: Vec<Series>,
    /// Vertical bars from `lo` to `hi` at each x (a confidence interval), the i-th in
    /// the colour of the i-th series.
    pub error_bars: Vec<Band>,
    /// Points drawn as dots, the i-th set in the colour of the i-th series (a scatter's
    /// trials).
    pub dots: Vec<Series>,
    /// Lines drawn dashed, the i-th in the colour of the i-th series (a model's ideal
    /// beside what was measured); a NaN y breaks the line, as in `series`.
    pub dashed: Vec<Series>,
    /// Names of the x positions 0, 1, 2, … when the x axis is categorical (a sweep's
    /// ratios); empty for a numeric axis.
    pub x_ticks: Vec<String>,
    /// The x values are the base-10 logarithms of what the axis shows (a numeric sweep
    /// over decades: message lengths of 100 to 65 000 bytes); its ticks say 10^x.
    pub x_log: bool,
}

/// Labels telling the inputs apart: their titles (`--title`) when each has its own,
/// else the test options in which they differ (`C=cubic`, `recv_window=8388608`; plain
/// values only), else their names. A single input gets an empty label.
pub fn labels(inputs: &[Input]) -> Vec<String> {
    if inputs.len() < 2 {
        return vec![String::new(); inputs.len()];
    }
    let specs: Vec<serde_json::Map<String, serde_json::Value>> = inputs
        .iter()
        .map(|i| match serde_json::to_value(&i.result.start.spec) {
            Ok(serde_json::Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        })
        .collect();
    let titles: Vec<String> = specs
        .iter()
        .filter_map(|s| s.get("title").and_then(|t| t.as_str()).map(str::to_string))
        .collect();
    let mut unique = titles.clone();
    unique.sort();
    unique.dedup();
    if titles.len() == inputs.len() && unique.len() == titles.len() {
        return titles;
    }
    let mut keys: Vec<&String> = specs.iter().flat_map(|s| s.keys()).collect();
    keys.sort();
    keys.dedup();
    let differing: Vec<&String> = keys
        .into_iter()
        .filter(|k| specs.iter().any(|s| s.get(*k) != specs[0].get(*k)))
        .filter(|k| !matches!(k.as_str(), "port" | "host" | "title"))
        // Objects and lists would show as raw JSON in a legend.
        .filter(|k| {
            specs.iter().all(|s| {
                !matches!(
                    s.get(*k),
                    Some(serde_json::Value::Object(_) | serde_json::Value::Array(_))
                )
            })
        })
        .collect();
    let out: Vec<String> = specs
        .iter()
        .map(|s| {
            differing
                .iter()
                .map(|k| {
                    let v = s.get(*k).unwrap_or(&serde_json::Value::Null);
                    let v = v.as_str().map_or_else(|| v.to_string(), String::from);
                    format!("{k}={v}")
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let distinct = {
        let mut o = out.clone();
        o.sort();
        o.dedup();
        o.len() == out.len()
    };
    if differing.is_empty() || !distinct {
        inputs.iter().map(|i| i.name.clone()).collect()
    } else {
        out
    }
}

fn prefixed(label: &str, name: &str) -> String {
    if label.is_empty() {
        name.to_string()
    } else {
        format!("{label}, {name}")
    }
}

fn dir(d: StreamDirection) -> &'static str {
    d.as_str()
}

/// A unit that keeps the largest value readable: (divisor, name).
/// The divisor (a power of `base`, at most the third) that brings `max` below `base`, and
/// the name `name(power)` gives that power.
fn scale(max: f64, base: f64, name: impl Fn(usize) -> String) -> (f64, String) {
    let mut div = 1.0;
    for power in 0..3 {
        if max < div * base {
            return (div, name(power));
        }
        div *= base;
    }
    (div, name(3))
}

fn rescale(series: &mut [Series], div: f64) {
    for s in series {
        for p in &mut s.points {
            p.1 /= div;
        }
    }
}

/// Puts lines and markers counted in bytes into a binary unit that suits them; returns
/// the unit's name.
fn byte_axis(series: &mut [Series], markers: &mut [Series]) -> String {
    // Binary, as the tables print transfers and windows ("KBytes" = 1024 bytes).
    let (div, unit) = scale(max_y(series), 1024.0, |p| unit_name(p, "Bytes"));
    rescale(series, div);
    rescale(markers, div);
    unit
}

fn max_y(series: &[Series]) -> f64 {
    series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0, f64::max)
}

/// The panels of `graph` for these inputs.
pub fn panels(graph: Graph, inputs: &[Input]) -> Result<Vec<Panel>, PlotError> {
    let labels = labels(inputs);
    let one = |g: Graph| -> Result<Panel, PlotError> {
        match g {
            Graph::Throughput => throughput(inputs, &labels),
            Graph::Window => window(inputs, &labels),
            Graph::Rtt => rtt(inputs, &labels),
            Graph::TimeSeq => time_seq(inputs, &labels),
            Graph::Io => io(inputs, &labels),
            Graph::Latency => latency(inputs, &labels),
            Graph::LatencyCdf => latency_cdf(inputs, &labels),
            Graph::All => unreachable!("All is expanded below"),
        }
    };
    match graph {
        Graph::All => {
            let traced = inputs.iter().all(|i| i.result.trace.is_some());
            let probed = inputs.iter().all(|i| i.result.latency.is_some());
            let mut out = vec![one(Graph::Throughput)?];
            // Latency right under throughput, on the same time axis.
            if probed {
                out.push(one(Graph::Latency)?);
                out.push(one(Graph::LatencyCdf)?);
            }
            if traced {
                for g in [Graph::Window, Graph::Rtt, Graph::TimeSeq, Graph::Io] {
                    out.push(one(g)?);
                }
            }
            Ok(out)
        }
        g => Ok(vec![one(g)?]),
    }
}

/// An interval's rate drawn over the whole interval (a step, from its start to its end),
/// so the line starts at the test's start, not at the end of its first interval.
fn span(start: f64, end: f64, rate: f64) -> [(f64, f64); 2] {
    [(start, rate), (end, rate)]
}

fn throughput(inputs: &[Input], labels: &[String]) -> Result<Panel, PlotError> {
    let mut series = Vec::new();
    for (input, label) in inputs.iter().zip(labels) {
        let ivs = &input.result.intervals;
        if ivs.is_empty() {
            return Err(PlotError::NoIntervals(input.from.clone()));
        }
        let mut ids: Vec<(i64, StreamDirection)> =
            ivs[0].streams.iter().map(|s| (s.id, s.direction)).collect();
        ids.dedup();
        // With several inputs only the sums, so the overlay stays readable.
        if inputs.len() == 1 && ids.len() > 1 {
            for &(id, d) in &ids {
                series.push(Series {
                    colour: None,
                    name: prefixed(label, &format!("stream {id} {}", dir(d))),
                    points: ivs
                        .iter()
                        .filter_map(|iv| {
                            let s = iv.streams.iter().find(|s| s.id == id)?;
                            Some(span(iv.start, iv.end, s.bits_per_second))
                        })
                        .flatten()
                        .collect(),
                });
            }
        }
        for d in [StreamDirection::Up, StreamDirection::Down] {
            let points: Vec<(f64, f64)> = ivs
                .iter()
                .filter_map(|iv| {
                    let s = iv.sums.iter().find(|s| s.direction == d)?;
                    Some(span(iv.start, iv.end, s.bits_per_second))
                })
                .flatten()
                .collect();
            if !points.is_empty() {
                let name = if ids.len() > 1 {
                    format!("sum {}", dir(d))
                } else {
                    dir(d).to_string()
                };
                series.push(Series {
                    colour: None,
                    name: prefixed(label, &name),
                    points,
                });
            }
        }
    }
    // Decimal, as the tables print rates ("Mbits/sec" = 10^6 bits/s).
    let (div, unit) = scale(max_y(&series), 1000.0, |p| unit_name(p, "bits/sec"));
    rescale(&mut series, div);
    Ok(Panel {
        title: "Throughput (receiver-side bytes per interval)".into(),
        x_label: "time (s)".into(),
        y_label: format!("throughput ({unit})"),
        series,
        bands: Vec::new(),
        error_bars: Vec::new(),
        dots: Vec::new(),
        dashed: Vec::new(),
        markers: Vec::new(),
        x_ticks: Vec::new(),
        x_log: false,
    })
}

/// A trace-driven link's capacity over one period of each trace (`flowlab plot
/// --capacity`): each trace's name and its bins, each bin's start (s) and bits per second,
/// `bin_s` long; drawn as steps.
pub fn capacity_panel(traces: &[(String, Vec<(f64, f64)>)], bin_s: f64) -> Panel {
    let mut series: Vec<Series> = traces
        .iter()
        .map(|(name, bins)| Series {
            colour: None,
            name: name.clone(),
            points: bins
                .iter()
                .flat_map(|&(t, bps)| span(t, t + bin_s, bps))
                .collect(),
        })
        .collect();
    let (div, unit) = scale(max_y(&series), 1000.0, |p| unit_name(p, "bits/sec"));
    rescale(&mut series, div);
    Panel {
        title: format!(
            "Capacity of the trace (its opportunities per {} ms)",
            (bin_s * 1000.0).round()
        ),
        x_label: "time (s)".into(),
        y_label: format!("capacity ({unit})"),
        series,
        bands: Vec::new(),
        error_bars: Vec::new(),
        dots: Vec::new(),
        dashed: Vec::new(),
        markers: Vec::new(),
        x_ticks: Vec::new(),
        x_log: false,
    }
}

/// A trace-driven link direction's log, binned (what flowlab_net's `LinkLog` reads):
/// per bin, its start (s) and bits per second of capacity, ingress and throughput; each
/// delivered packet's departure (s) and wait (ms).
#[derive(Debug, Clone, Copy)]
pub struct LinkLogSeries<'a> {
    pub name: &'a str,
    pub bin_s: f64,
    pub capacity: &'a [(f64, f64)],
    pub ingress: &'a [(f64, f64)],
    pub throughput: &'a [(f64, f64)],
    pub delays: &'a [(f64, f64)],
}

/// The two graphs of a link's log that mahimahi's `mm-throughput-graph` and
/// `mm-delay-graph` draw: capacity, ingress and throughput over time; and each packet's
/// queueing delay at its departure.
pub fn link_log_panels(log: &LinkLogSeries<'_>) -> [Panel; 2] {
    let steps = |name: &str, colour: usize, bins: &[(f64, f64)]| Series {
        colour: Some(colour),
        name: format!("{} {name}", log.name),
        points: bins
            .iter()
            .flat_map(|&(t, bps)| span(t, t + log.bin_s, bps))
            .collect(),
    };
    let mut series = vec![
        steps("capacity", GREY, log.capacity),
        steps("ingress", 1, log.ingress),
        steps("throughput", 0, log.throughput),
    ];
    let (div, unit) = scale(max_y(&series), 1000.0, |p| unit_name(p, "bits/sec"));
    rescale(&mut series, div);
    let empty = |title: String, y_label: String, series: Vec<Series>| Panel {
        title,
        x_label: "time (s)".into(),
        y_label,
        series,
        bands: Vec::new(),
        error_bars: Vec::new(),
        dots: Vec::new(),
        dashed: Vec::new(),
        markers: Vec::new(),
        x_ticks: Vec::new(),
        x_log: false,
    };
    let throughput = empty(
        format!(
            "Capacity, ingress and throughput of the link (per {} ms)",
            (log.bin_s * 1000.0).round()
        ),
        format!("rate ({unit})"),
        series,
    );
    let mut delay = empty(
        "Per-packet queueing delay (each delivered packet's wait, at its departure)".into(),
        "queueing delay (ms)".into(),
        Vec::new(),
    );
    delay.dots.push(Series {
        colour: Some(0),
        name: format!("{} queueing delay", log.name),
        points: log.delays.to_vec(),
    });
    [throughput, delay]
}

/// The traced senders of an input (the sending end's samples of each stream).
fn senders(input: &Input) -> Result<Vec<&TracedStream>, PlotError> {
    let t = input
        .result
        .trace
        .as_ref()
        .ok_or_else(|| PlotError::NoTrace(input.from.clone()))?;
    Ok(t.streams.iter().filter(|s| s.sender).collect())
}

fn secs(s: &TraceSample) -> f64 {
    s.t_us as f64 / 1e6
}

fn stream_name(label: &str, s: &TracedStream, what: &str, streams: usize) -> String {
    if streams > 1 {
        prefixed(
            label,
            &format!("{what} (stream {} {})", s.trace.id, dir(s.direction)),
        )
    } else {
        prefixed(label, what)
    }
}

fn line(s: &TracedStream, f: impl Fn(&TraceSample) -> Option<f64>) -> Vec<(f64, f64)> {
    s.trace
        .samples
        .iter()
        .filter_map(|x| Some((secs(x), f(x)?)))
        .collect()
}

fn window(inputs: &[Input], labels: &[String]) -> Result<Panel, PlotError> {
    let mut series = Vec::new();
    let mut markers = Vec::new();
    for (input, label) in inputs.iter().zip(labels) {
        let senders = senders(input)?;
        let n = senders.len();
        for s in senders {
            series.push(Series {
                colour: None,
                name: stream_name(label, s, "congestion window", n),
                points: line(s, |x| x.cwnd_bytes().map(|v| v as f64)),
            });
            series.push(Series {
                colour: None,
                name: stream_name(label, s, "bytes in flight", n),
                points: line(s, |x| x.in_flight_bytes().map(|v| v as f64)),
            });
            series.push(Series {
                colour: None,
                name: stream_name(label, s, "receive window", n),
                points: line(s, |x| x.snd_wnd.map(|v| v as f64)),
            });
            markers.push(Series {
                colour: None,
                name: stream_name(label, s, "window full", n),
                points: s
                    .trace
                    .samples
                    .iter()
                    .filter_map(|x| window_full(x)?.then_some((secs(x), x.snd_wnd? as f64)))
                    .collect(),
            });
        }
    }
    let unit = byte_axis(&mut series, &mut markers);
    Ok(Panel {
        title: "Sender windows: congestion window, bytes in flight, receiver's window".into(),
        x_label: "time (s)".into(),
        y_label: unit,
        series,
        bands: Vec::new(),
        error_bars: Vec::new(),
        dots: Vec::new(),
        dashed: Vec::new(),
        markers,
        x_ticks: Vec::new(),
        x_log: false,
    })
}

fn rtt(inputs: &[Input], labels: &[String]) -> Result<Panel, PlotError> {
    let mut series = Vec::new();
    let mut bands = Vec::new();
    let ms = |us: u64| us as f64 / 1000.0;
    for (input, label) in inputs.iter().zip(labels) {
        let senders = senders(input)?;
        let n = senders.len();
        for s in senders {
            bands.push(Band {
                colour: None,
                name: stream_name(label, s, "srtt ± rttvar", n),
                points: s
                    .trace
                    .samples
                    .iter()
                    .filter_map(|x| {
                        let (r, v) = (x.srtt_us?, x.rttvar_us?);
                        Some((secs(x), ms(r.saturating_sub(v)), ms(r + v)))
                    })
                    .collect(),
            });
            series.push(Series {
                colour: None,
                name: stream_name(label, s, "smoothed RTT", n),
                points: line(s, |x| x.srtt_us.map(ms)),
            });
            series.push(Series {
                colour: None,
                name: stream_name(label, s, "minimum RTT", n),
                points: line(s, |x| x.min_rtt_us.map(ms)),
            });
        }
    }
    Ok(Panel {
        title: "Round-trip time seen by the sender".into(),
        x_label: "time (s)".into(),
        y_label: "RTT (ms)".into(),
        series,
        bands,
        error_bars: Vec::new(),
        dots: Vec::new(),
        dashed: Vec::new(),
        markers: Vec::new(),
        x_ticks: Vec::new(),
        x_log: false,
    })
}

fn time_seq(inputs: &[Input], labels: &[String]) -> Result<Panel, PlotError> {
    let mut series = Vec::new();
    let mut acked = Vec::new();
    let mut markers = Vec::new();
    // Highest byte sent: every byte sent once, i.e. minus retransmitted bytes.
    let sent = |x: &TraceSample| Some(x.bytes_sent?.saturating_sub(x.bytes_retrans?) as f64);
    for (input, label) in inputs.iter().zip(labels) {
        let senders = senders(input)?;
        let n = senders.len();
        for s in senders {
            // Sent solid, acknowledged dashed in the next colour on top of it: on a fast
            // path the two lie on each other, and each stays visible.
            let k = 2 * series.len();
            series.push(Series {
                colour: Some(k),
                name: stream_name(label, s, "sent", n),
                points: line(s, sent),
            });
            acked.push(Series {
                colour: Some(k + 1),
                name: stream_name(label, s, "acknowledged", n),
                points: line(s, |x| x.bytes_acked.map(|v| v as f64)),
            });
            markers.push(Series {
                colour: None,
                name: stream_name(label, s, "retransmission", n),
                points: s
                    .trace
                    .samples
                    .windows(2)
                    .filter_map(|w| {
                        (w[1].bytes_retrans? > w[0].bytes_retrans?)
                            .then(|| Some((secs(&w[1]), sent(&w[1])?)))
                            .flatten()
                    })
                    .collect(),
            });
        }
    }
    let (div, unit) = scale(max_y(&series).max(max_y(&acked)), 1024.0, |p| {
        unit_name(p, "Bytes")
    });
    for lines in [&mut series, &mut acked, &mut markers] {
        rescale(lines, div);
    }
    Ok(Panel {
        title: "Time/sequence: bytes sent and acknowledged".into(),
        x_label: "time (s)".into(),
        y_label: format!("sequence ({unit})"),
        series,
        bands: Vec::new(),
        error_bars: Vec::new(),
        dots: Vec::new(),
        dashed: acked,
        markers,
        x_ticks: Vec::new(),
        x_log: false,
    })
}

/// Per-second rate of a counter between consecutive samples.
fn rate(s: &TracedStream, f: impl Fn(&TraceSample) -> Option<u64>) -> Vec<(f64, f64)> {
    s.trace
        .samples
        .windows(2)
        .filter_map(|w| {
            let dt = secs(&w[1]) - secs(&w[0]);
            let dv = f(&w[1])?.checked_sub(f(&w[0])?)?;
            (dt > 0.0).then(|| (secs(&w[1]), dv as f64 / dt))
        })
        .collect()
}

fn io(inputs: &[Input], labels: &[String]) -> Result<Panel, PlotError> {
    let mut series = Vec::new();
    for (input, label) in inputs.iter().zip(labels) {
        let t = input
            .result
            .trace
            .as_ref()
            .ok_or_else(|| PlotError::NoTrace(input.from.clone()))?;
        let n = t.streams.iter().filter(|s| s.sender).count();
        for s in &t.streams {
            let (what, counter): (&str, fn(&TraceSample) -> Option<u64>) = if s.sender {
                ("segments sent", |x| x.data_segs_out)
            } else {
                ("segments received", |x| x.data_segs_in)
            };
            series.push(Series {
                colour: None,
                name: stream_name(label, s, what, n),
                points: rate(s, counter),
            });
        }
    }
    let (div, unit) = scale(max_y(&series), 1000.0, |p| unit_name(p, ""));
    rescale(&mut series, div);
    Ok(Panel {
        title: "I/O: data segments per second".into(),
        x_label: "time (s)".into(),
        y_label: format!("{unit}segments/s"),
        series,
        bands: Vec::new(),
        error_bars: Vec::new(),
        dots: Vec::new(),
        dashed: Vec::new(),
        markers: Vec::new(),
        x_ticks: Vec::new(),
        x_log: false,
    })
}

/// The latency probes of an input.
fn probes(input: &Input) -> Result<&TestLatency, PlotError> {
    input
        .result
        .latency
        .as_ref()
        .ok_or_else(|| PlotError::NoLatency(input.from.clone()))
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Each loaded probe's round trip at the time its reply arrived (dots: the moment it was
/// observed, as the intervals count it), each interval's median (a step, as
/// throughput's), and the idle median across the test (dashed).
fn latency(inputs: &[Input], labels: &[String]) -> Result<Panel, PlotError> {
    let mut series = Vec::new();
    let mut dots = Vec::new();
    let mut dashed = Vec::new();
    for (input, label) in inputs.iter().zip(labels) {
        let l = probes(input)?;
        series.push(Series {
            colour: None,
            name: prefixed(label, "interval median"),
            points: input
                .result
                .intervals
                .iter()
                .filter_map(|iv| Some(span(iv.start, iv.end, iv.latency.as_ref()?.median_ms)))
                .flatten()
                .collect(),
        });
        dots.push(Series {
            colour: None,
            name: prefixed(label, "probe"),
            points: l
                .probes
                .iter()
                .filter_map(|p| Some((ms(p.received_ns?) / 1e3, ms(p.rtt_ns()?))))
                .collect(),
        });
        let end = input.result.intervals.last().map_or_else(
            || l.probes.last().map_or(0.0, |p| ms(p.sent_ns) / 1e3),
            |iv| iv.end,
        );
        if let Some(idle) = &l.idle.rtt {
            dashed.push(Series {
                colour: None,
                name: prefixed("idle median", label),
                points: vec![(0.0, idle.median_ms), (end, idle.median_ms)],
            });
        }
    }
    Ok(Panel {
        title: "Round trips under load (latency probes; the server's time taken out)".into(),
        x_label: "time (s)".into(),
        y_label: "RTT (ms)".into(),
        series,
        bands: Vec::new(),
        error_bars: Vec::new(),
        dots,
        dashed,
        markers: Vec::new(),
        x_ticks: Vec::new(),
        x_log: false,
    })
}

/// The share of round trips at or below each value: (ms, 0…1), one point per probe.
fn cdf(probes: &[flowlab_results::ping::Probe]) -> Vec<(f64, f64)> {
    let mut rtts: Vec<f64> = probes.iter().filter_map(|p| p.rtt_ns().map(ms)).collect();
    rtts.sort_by(f64::total_cmp);
    let n = rtts.len() as f64;
    rtts.iter()
        .enumerate()
        .map(|(i, &r)| (r, (i + 1) as f64 / n))
        .collect()
}

/// The distribution of the loaded round trips (a line per input), the idle ones dashed.
fn latency_cdf(inputs: &[Input], labels: &[String]) -> Result<Panel, PlotError> {
    let mut series = Vec::new();
    let mut dashed = Vec::new();
    for (input, label) in inputs.iter().zip(labels) {
        let l = probes(input)?;
        series.push(Series {
            colour: None,
            name: prefixed(label, "loaded"),
            points: cdf(&l.probes),
        });
        dashed.push(Series {
            colour: None,
            name: prefixed("idle", label),
            points: cdf(&l.idle_probes),
        });
    }
    Ok(Panel {
        title: "Distribution of round trips: loaded, and idle (dashed)".into(),
        x_label: "RTT (ms)".into(),
        y_label: "share of probes at or below".into(),
        series,
        bands: Vec::new(),
        error_bars: Vec::new(),
        dots: Vec::new(),
        dashed,
        markers: Vec::new(),
        x_ticks: Vec::new(),
        x_log: false,
    })
}
