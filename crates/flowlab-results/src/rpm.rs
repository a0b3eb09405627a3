//! Responsiveness under working conditions (`flowlab rpm`): the IETF IPPM method of
//! [`DRAFT`], its judgements (moving averages, saturation, stability, trimmed means, RPM)
//! as pure functions over what the engine measured, and the result. docs/rpm.md maps each
//! step of the draft to what flowlab does.

use serde::{Deserialize, Serialize};

/// Schema tag of an RPM result.
pub const SCHEMA: &str = "flowlab.rpm/1";
/// The revision of the method implemented.
pub const DRAFT: &str = "draft-ietf-ippm-responsiveness-08";

/// Foreign probes on the idle path before any load: enough that a few delayed ones
/// (a busy host, a busy emulator) leave the idle median on the path's RTT.
pub const IDLE_PROBES: usize = 20;

/// Which load a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Load {
    Download,
    Upload,
    /// Both at once: one connection each way per step.
    Both,
}

impl Load {
    pub fn name(self) -> &'static str {
        match self {
            Load::Download => "download",
            Load::Upload => "upload",
            Load::Both => "both",
        }
    }

    /// Whether its connections download, upload.
    pub fn ways(self) -> (bool, bool) {
        match self {
            Load::Download => (true, false),
            Load::Upload => (false, true),
            Load::Both => (true, true),
        }
    }
}

/// The method's parameters (the draft's §5.2 names in brackets).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// Intervals in a moving average (`MAD`).
    pub mad: usize,
    /// Interval duration, seconds (`ID`).
    pub interval_seconds: f64,
    /// Share of the samples a trimmed mean keeps, the fastest ones (`TMP`).
    pub trimmed_share: f64,
    /// Largest standard deviation, as a share of the current value, that is stable (`SDT`).
    pub stability_share: f64,
    /// Load-generating connections to start with (`INP`) and to add per interval (`INC`).
    pub initial_connections: usize,
    pub added_connections: usize,
    /// Most load-generating connections (`MNP`).
    pub max_connections: usize,
    /// Most probes a second of each kind (`MPS`).
    pub max_probes_per_second: u32,
    /// Longest a direction runs, seconds (the draft leaves it to the implementation).
    pub max_seconds: f64,
}

impl Default for Params {
    fn default() -> Params {
        Params {
            mad: 4,
            interval_seconds: 1.0,
            trimmed_share: 0.95,
            stability_share: 0.05,
            initial_connections: 1,
            added_connections: 1,
            max_connections: 16,
            max_probes_per_second: 100,
            max_seconds: 20.0,
        }
    }
}

/// One round trip of a probe: when it started (seconds since its direction's load
/// started) and how long it took, ms.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub t: f64,
    pub ms: f64,
}

/// The round trips the probes measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Samples {
    /// Foreign probes: TCP connection set-up on a new connection (`tcp_f`).
    pub tcp_foreign: Vec<Sample>,
    /// Foreign probes over TLS: the TLS handshake on that new connection (`tls_f`);
    /// none without TLS.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tls_foreign: Vec<Sample>,
    /// Foreign probes: a 1-byte request/response on that new connection (`http_f`).
    pub request_foreign: Vec<Sample>,
    /// Self probes: a request/response on a load-generating connection (`http_l`).
    pub request_loaded: Vec<Sample>,
}

impl Samples {
    /// The samples of probes started in `(from, to]`.
    pub fn between(&self, from: f64, to: f64) -> Samples {
        let pick = |v: &[Sample]| -> Vec<Sample> {
            v.iter()
                .filter(|s| s.t > from && s.t <= to)
                .copied()
                .collect()
        };
        Samples {
            tcp_foreign: pick(&self.tcp_foreign),
            tls_foreign: pick(&self.tls_foreign),
            request_foreign: pick(&self.request_foreign),
            request_loaded: pick(&self.request_loaded),
        }
    }
}

/// The one-sided trimmed mean: the mean of the fastest `keep` share of `values` (at least
/// one); `None` when there are none.
pub fn trimmed_mean(values: &[f64], keep: f64) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = ((v.len() as f64 * keep).floor() as usize).clamp(1, v.len());
    Some(v[..n].iter().sum::<f64>() / n as f64)
}

/// Population standard deviation.
fn stdev(values: &[f64]) -> f64 {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt()
}

/// The draft's stability rule: the standard deviation of the last `mad` values is below
/// `share` of the last one (false with fewer than `mad` values).
pub fn stable(values: &[f64], mad: usize, share: f64) -> bool {
    if mad == 0 || values.len() < mad {
        return false;
    }
    let last = &values[values.len() - mad..];
    let current = last[mad - 1];
    current > 0.0 && stdev(last) < share * current
}

/// Responsiveness from a set of round trips (§5.3.1.2): the foreign latency is the mean
/// of the trimmed means of TCP set-up, TLS handshake (over TLS) and request, the loaded
/// one the trimmed mean of the self probes; RPM = (60000 / foreign + 60000 / loaded) / 2.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Responsiveness {
    /// Trimmed means, ms.
    pub tcp_foreign_ms: f64,
    /// Over TLS only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_foreign_ms: Option<f64>,
    pub request_foreign_ms: f64,
    pub request_loaded_ms: f64,
    /// (tcp_foreign + request_foreign) / 2, over TLS (tcp_foreign + tls_foreign +
    /// request_foreign) / 3: the working latency on separate connections.
    pub foreign_ms: f64,
    pub rpm_foreign: f64,
    pub rpm_loaded: f64,
    /// The draft's RPM: the mean of the two.
    pub rpm: f64,
}

impl Responsiveness {
    /// `None` unless every kind of probe has a round trip.
    pub fn of(s: &Samples, keep: f64) -> Option<Responsiveness> {
        let tm = |v: &[Sample]| trimmed_mean(&v.iter().map(|x| x.ms).collect::<Vec<_>>(), keep);
        let (tcp, req, loaded) = (
            tm(&s.tcp_foreign)?,
            tm(&s.request_foreign)?,
            tm(&s.request_loaded)?,
        );
        let tls = match s.tls_foreign.as_slice() {
            [] => None,
            v => Some(tm(v)?),
        };
        let foreign = match tls {
            Some(tls) => (tcp + tls + req) / 3.0,
            None => (tcp + req) / 2.0,
        };
        let per_minute = |ms: f64| 60_000.0 / ms.max(1e-6);
        let (rpm_foreign, rpm_loaded) = (per_minute(foreign), per_minute(loaded));
        Some(Responsiveness {
            tcp_foreign_ms: tcp,
            tls_foreign_ms: tls,
            request_foreign_ms: req,
            request_loaded_ms: loaded,
            foreign_ms: foreign,
            rpm_foreign,
            rpm_loaded,
            rpm: (rpm_foreign + rpm_loaded) / 2.0,
        })
    }
}

/// What one interval of a direction showed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Its end, seconds since the direction's load started.
    pub end: f64,
    /// Load-generating connections open during it.
    pub connections: usize,
    /// Goodput in it, and the moving average over the last MAD intervals (once there
    /// are MAD), bit/s.
    pub goodput_bps: f64,
    pub moving_goodput_bps: Option<f64>,
    /// Goodput was saturated (stable) by the end of it.
    pub saturated: bool,
    /// Responsiveness over the probes of the last MAD intervals (after saturation).
    pub rpm: Option<f64>,
}

/// How sure a direction's result is (the draft's §4): `high` when responsiveness was
/// stable, `medium` when at least MAD intervals had a responsiveness but it never
/// settled, `low` otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Confidence {
    High,
    Medium,
    Low,
}

/// The ramp of one direction: fed an interval at a time, it says whether to add
/// connections and when to stop (§5.4).
#[derive(Debug, Clone)]
pub struct Ramp {
    p: Params,
    bytes: Vec<u64>,
    moving: Vec<f64>,
    rpms: Vec<f64>,
    pub intervals: Vec<Interval>,
    saturated: bool,
    stable: bool,
    last: Option<Responsiveness>,
    /// Why connections stopped being added before saturation.
    stopped: Option<String>,
}

impl Ramp {
    pub fn new(p: Params) -> Ramp {
        Ramp {
            p,
            bytes: Vec::new(),
            moving: Vec::new(),
            rpms: Vec::new(),
            intervals: Vec::new(),
            saturated: false,
            stable: false,
            last: None,
            stopped: None,
        }
    }

    /// No more connections can be added (the server refused one): the ramp goes on
    /// with those open, and the result says why.
    pub fn stop_adding(&mut self, why: String) {
        self.stopped.get_or_insert(why);
    }

    /// An interval ended at `end` (seconds since the load started) having moved `bytes`
    /// over `connections`; `samples` are all the probes so far.
    pub fn interval(&mut self, end: f64, bytes: u64, connections: usize, samples: &Samples) {
        let p = self.p;
        let id = p.interval_seconds;
        self.bytes.push(bytes);
        let moving = (self.bytes.len() >= p.mad).then(|| {
            let sum: u64 = self.bytes[self.bytes.len() - p.mad..].iter().sum();
            sum as f64 * 8.0 / (p.mad as f64 * id)
        });
        if let Some(m) = moving {
            self.moving.push(m);
        }
        self.saturated = self.saturated || stable(&self.moving, p.mad, p.stability_share);
        let mut rpm = None;
        if self.saturated {
            let window = samples.between(end - p.mad as f64 * id, end);
            if let Some(r) = Responsiveness::of(&window, p.trimmed_share) {
                self.rpms.push(r.rpm);
                self.last = Some(r);
                rpm = Some(r.rpm);
                self.stable = stable(&self.rpms, p.mad, p.stability_share);
            }
        }
        self.intervals.push(Interval {
            end,
            connections,
            goodput_bps: bytes as f64 * 8.0 / id,
            moving_goodput_bps: moving,
            saturated: self.saturated,
            rpm,
        });
    }

    /// Connections to add before the next interval: INC while goodput is not saturated,
    /// up to MNP in all.
    pub fn to_add(&self, open: usize) -> usize {
        if self.saturated || self.stopped.is_some() {
            0
        } else {
            self.p
                .added_connections
                .min(self.p.max_connections.saturating_sub(open))
        }
    }

    /// Responsiveness is stable: the direction is done.
    pub fn done(&self) -> bool {
        self.stable
    }

    pub fn confidence(&self) -> Confidence {
        if self.stable {
            Confidence::High
        } else if self.rpms.len() >= self.p.mad {
            Confidence::Medium
        } else {
            Confidence::Low
        }
    }

    /// The result: the last responsiveness (when the stop came before saturation, over
    /// the probes of the last MAD intervals all the same).
    pub fn finish(self, direction: &str, samples: Samples, end: f64) -> DirectionResult {
        let p = self.p;
        let confidence = self.confidence();
        let responsiveness = self.last.or_else(|| {
            let window = samples.between(end - p.mad as f64 * p.interval_seconds, end);
            Responsiveness::of(&window, p.trimmed_share)
        });
        DirectionResult {
            direction: direction.into(),
            goodput_bps: self.moving.last().copied().or_else(|| {
                let secs = self.bytes.len() as f64 * p.interval_seconds;
                (secs > 0.0).then(|| self.bytes.iter().sum::<u64>() as f64 * 8.0 / secs)
            }),
            connections: self.intervals.last().map_or(0, |i| i.connections),
            saturated: self.saturated,
            confidence,
            responsiveness,
            seconds: end,
            stopped_adding: self.stopped,
            intervals: self.intervals,
            samples,
        }
    }
}

/// One direction's result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DirectionResult {
    /// `download`, `upload` or `both` (at once).
    pub direction: String,
    /// The last moving average of goodput, bit/s.
    pub goodput_bps: Option<f64>,
    /// Load-generating connections at the end.
    pub connections: usize,
    pub saturated: bool,
    pub confidence: Confidence,
    pub responsiveness: Option<Responsiveness>,
    /// How long it ran.
    pub seconds: f64,
    /// Why no more connections could be added before saturation (the server refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_adding: Option<String>,
    pub intervals: Vec<Interval>,
    pub samples: Samples,
}

/// Round trips with nothing else running: foreign probes on an idle path.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Idle {
    pub probes: usize,
    pub tcp_foreign_ms: Option<f64>,
    /// Over TLS only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_foreign_ms: Option<f64>,
    pub request_foreign_ms: Option<f64>,
    /// (set-up + request) / 2, over TLS (set-up + handshake + request) / 3, and its RPM.
    pub latency_ms: Option<f64>,
    pub rpm: Option<f64>,
    /// The median of each probe's own latency (its set-up and request, and handshake
    /// over TLS, averaged as `latency_ms` averages their means): the idle path's RTT
    /// however a few probes were delayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_ms: Option<f64>,
}

impl Idle {
    pub fn of(s: &Samples, keep: f64) -> Idle {
        let tm = |v: &[Sample]| trimmed_mean(&v.iter().map(|x| x.ms).collect::<Vec<_>>(), keep);
        let (tcp, tls, req) = (
            tm(&s.tcp_foreign),
            tm(&s.tls_foreign),
            tm(&s.request_foreign),
        );
        let latency = match tls {
            Some(tls) => tcp.zip(req).map(|(a, b)| (a + tls + b) / 3.0),
            None => tcp.zip(req).map(|(a, b)| (a + b) / 2.0),
        };
        let each: Vec<f64> = (0..s.tcp_foreign.len().min(s.request_foreign.len()))
            .filter_map(|i| {
                let (tcp, req) = (s.tcp_foreign[i].ms, s.request_foreign[i].ms);
                match s.tls_foreign.get(i) {
                    Some(tls) => Some((tcp + tls.ms + req) / 3.0),
                    None if s.tls_foreign.is_empty() => Some((tcp + req) / 2.0),
                    None => None,
                }
            })
            .collect();
        Idle {
            median_ms: crate::stats::summary(&each).map(|s| s.median),
            probes: s.tcp_foreign.len(),
            tcp_foreign_ms: tcp,
            tls_foreign_ms: tls,
            request_foreign_ms: req,
            latency_ms: latency,
            rpm: latency.map(|l| 60_000.0 / l.max(1e-6)),
        }
    }
}

/// What was asked and against what.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RpmStart {
    pub host: String,
    pub address: String,
    pub draft: String,
    pub params: Params,
    /// The load connections' congestion control (the kernel default unless `-C`).
    pub congestion: Option<String>,
    /// How each probe of the draft is made here.
    pub probes: String,
    pub started_unix: f64,
}

/// A `flowlab rpm` run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RpmResult {
    pub schema: String,
    pub start: RpmStart,
    pub idle: Idle,
    pub directions: Vec<DirectionResult>,
    /// Ended by Ctrl-C before every direction was done.
    pub interrupted: bool,
    /// Why a later load could not run (the earlier ones' results are kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(t0: f64, t1: f64, every: f64, ms: (f64, f64, f64)) -> Samples {
        let mut s = Samples::default();
        let mut t = t0 + every;
        while t <= t1 {
            s.tcp_foreign.push(Sample { t, ms: ms.0 });
            s.request_foreign.push(Sample { t, ms: ms.1 });
            s.request_loaded.push(Sample { t, ms: ms.2 });
            t += every;
        }
        s
    }

    #[test]
    fn the_trimmed_mean_drops_the_slowest_share() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        // Keeps 1..=95: mean 48.
        assert_eq!(trimmed_mean(&v, 0.95), Some(48.0));
        assert_eq!(trimmed_mean(&[7.0], 0.95), Some(7.0));
        assert_eq!(trimmed_mean(&[], 0.95), None);
        assert_eq!(trimmed_mean(&[3.0, 1.0, 1000.0], 0.95), Some(2.0));
    }

    #[test]
    fn the_idle_median_is_each_probes_latency_in_the_middle() {
        let mut s = Samples::default();
        // Ten probes on a 20 ms path, one 50 ms late in each part.
        for (i, late) in [0.0, 0.0, 0.0, 0.0, 50.0, 0.0, 0.0, 0.0, 0.0, 0.0]
            .into_iter()
            .enumerate()
        {
            let t = i as f64;
            s.tcp_foreign.push(Sample { t, ms: 20.0 + late });
            s.request_foreign.push(Sample { t, ms: 21.0 + late });
        }
        let idle = Idle::of(&s, 0.95);
        assert_eq!(idle.median_ms, Some(20.5));
        // The trimmed mean drops the slowest share only: here the one late probe.
        assert_eq!(idle.latency_ms, Some(20.5));
        s.tcp_foreign[2].ms += 30.0;
        s.request_foreign[2].ms += 30.0;
        let idle = Idle::of(&s, 0.95);
        assert_eq!(idle.median_ms, Some(20.5));
        assert!(idle.latency_ms > Some(23.0), "{:?}", idle.latency_ms);
        // Over TLS each probe's latency is the mean of its three parts.
        for i in 0..10 {
            s.tls_foreign.push(Sample {
                t: i as f64,
                ms: 23.5,
            });
        }
        assert_eq!(Idle::of(&s, 0.95).median_ms, Some(21.5));
        assert_eq!(Idle::of(&Samples::default(), 0.95).median_ms, None);
    }

    #[test]
    fn rpm_is_the_mean_of_the_foreign_and_the_loaded_rpm() {
        let s = samples(0.0, 1.0, 0.1, (20.0, 40.0, 60.0));
        let r = Responsiveness::of(&s, 0.95).expect("samples of each kind");
        assert_eq!(r.foreign_ms, 30.0);
        assert_eq!((r.rpm_foreign, r.rpm_loaded), (2000.0, 1000.0));
        assert_eq!(r.rpm, 1500.0);
        let mut partial = s.clone();
        partial.request_loaded.clear();
        assert_eq!(Responsiveness::of(&partial, 0.95), None);
    }

    #[test]
    fn stability_compares_the_spread_of_the_last_mad_values_to_the_current_one() {
        assert!(!stable(&[100.0, 100.0, 100.0], 4, 0.05));
        assert!(stable(&[1.0, 100.0, 101.0, 99.0, 100.0], 4, 0.05));
        // Spread 10 % of the current value: not stable.
        assert!(!stable(&[80.0, 100.0, 120.0, 100.0], 4, 0.05));
    }

    #[test]
    fn a_ramp_adds_connections_until_goodput_saturates_then_waits_for_stable_rpm() {
        let p = Params::default();
        let mut ramp = Ramp::new(p);
        let s = samples(0.0, 30.0, 0.01, (10.0, 10.0, 30.0));
        let mut open = p.initial_connections;
        let mut i = 0;
        while !ramp.done() {
            i += 1;
            // Goodput grows with the connections up to 4, then stays at 100 Mbit/s.
            let bytes = 12_500_000 * open.min(4) as u64 / 4;
            ramp.interval(i as f64, bytes, open, &s);
            open += ramp.to_add(open);
            assert!(i < 30, "never stable: {:?}", ramp.intervals);
        }
        let r = ramp.finish("download", Samples::default(), i as f64);
        assert_eq!(r.confidence, Confidence::High);
        // Full from the 4th interval; moving averages 62.5, 81.25, 93.75, then 100 Mbit/s
        // from the 7th: at the 9th the last four spread by 2.7 % of the current one,
        // saturated; then four equal RPMs by the 12th.
        let first_saturated = r
            .intervals
            .iter()
            .position(|x| x.saturated)
            .expect("saturated");
        assert_eq!(first_saturated + 1, 9, "{:?}", r.intervals);
        assert_eq!(r.seconds, 12.0);
        assert_eq!(r.connections, 9);
        let resp = r.responsiveness.expect("responsiveness");
        assert_eq!((resp.foreign_ms, resp.request_loaded_ms), (10.0, 30.0));
        assert!((r.goodput_bps.expect("goodput") - 100e6).abs() < 1.0);
        // Not stable in time: medium or low.
        let mut short = Ramp::new(p);
        short.interval(1.0, 1000, 1, &s);
        assert_eq!(short.confidence(), Confidence::Low);
        assert_eq!(short.to_add(16), 0);
        assert_eq!(short.to_add(3), 1);
        short.stop_adding("busy".into());
        assert_eq!(short.to_add(3), 0);
        let r = short.finish("upload", Samples::default(), 1.0);
        assert_eq!(r.stopped_adding.as_deref(), Some("busy"));
    }
}
