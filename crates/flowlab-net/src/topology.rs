//! Topology files: hosts, routers, switches and the links between them (sans-IO).
//!
//! ```toml
//! name = "portfolio"              # prefix of everything `flowlab net up` creates
//!
//! hosts = ["h1", "h2", "h9"]
//! routers = ["r1", "r2"]
//! switches = ["s1"]               # optional: one shared segment for the nodes on it
//!
//! [[link]]
//! ends = ["h1", "s1"]             # no properties: an unshaped link
//!
//! [[link]]
//! name = "L1"
//! ends = ["r1", "r2"]
//! rate = "40M"                    # bit/s, both directions
//! delay = "10ms"                  # one way
//! jitter = "1ms"                  # optional
//! queue = 67                      # packets (or queue_bytes = 100000)
//! loss = 0.001                    # random loss, fraction (optional)
//! reverse = { rate = "10M" }      # b → a differs (any of the properties)
//! schedule_repeat = "20s"         # optional: the steps below start again every 20 s
//!
//! [[link.schedule]]               # L1 changes while it is up: at 5 s …
//! at = "5s"
//! rate = "10M"
//! delay = "40ms"
//!
//! [[link.schedule]]               # … and at 12 s
//! at = "12s"
//! rate = "40M"
//!
//! [[medium]]                      # a shared Wi-Fi channel: its stations share the air
//! name = "wlan"
//! ap = "r1"                       # the access point: a router
//! standard = "802.11n"            # timings: 802.11b, 802.11a, 802.11g, 802.11n, 802.11ac
//! fairness = "frames"             # the access point's downlink: "frames" or "airtime"
//!
//! [[medium.station]]              # a host on it, with its PHY rate
//! host = "h9"
//! rate = "300M"
//!
//! [[medium.station.schedule]]     # h9's PHY rates change while it is up (it walks away)
//! at = "10s"
//! rate = "65M"                    # rate: both ways; down_rate: the access point's alone
//! ```
//!
//! [`Topology::parse`] checks the file and says what is wrong in one line (with the line
//! and column where the TOML itself is at fault); the
//! [`Plan`] gives every segment its IPv4 subnet, every interface its address, and every
//! host pair its path (fewest hops, then least delay), with the RTT and bottleneck rate
//! the file implies.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::time::Duration;

use flowlab_results::net::{
    LinkSchedule, MediumSummary, PathSummary, PlanSummary, Shape, ShapedDirection, StationExpected,
    Subnet,
};
use flowlab_results::units::{parse_duration, parse_rate};
use serde::{Deserialize, Serialize};

/// Longest topology name (it prefixes every namespace name, and is typed often).
pub const MAX_NAME: usize = 6;
/// Longest node name, for the same reason.
pub const MAX_NODE: usize = 6;
/// The largest queue a link may have, bytes: tc's queue limits are 32-bit byte counts.
pub const MAX_QUEUE_BYTES: u64 = u32::MAX as u64;
/// Most nodes (hosts, routers and switches) in a topology: each is a namespace.
pub const MAX_NODES: usize = 2048;
/// Most links in a topology: each link without a switch takes one of the 65 535 /24
/// subnets of 10.0.0.0/8, as each switch does.
pub const MAX_LINKS: usize = 4096;
/// Most stations on one medium.
pub const MAX_STATIONS: usize = 64;
/// A medium's queues hold this many frames each unless the file says otherwise.
pub const DEFAULT_MEDIUM_QUEUE: u64 = 1000;
/// `net show` lists every pair's path up to this many hosts (120 pairs); beyond it, the
/// path of a pair named on the command line.
pub const MAX_LISTED_HOSTS: usize = 16;

/// Why a topology file was refused: one line naming the part at fault, and where the
/// TOML itself was at fault, the line and column (1-based, in characters).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", at.map(|(l, c)| format!("line {l}, column {c}: ")).unwrap_or_default())]
pub struct TopologyError {
    pub message: String,
    pub at: Option<(usize, usize)>,
}

impl TopologyError {
    /// An error saying `message` on one line: a control character it quotes from the file
    /// (a name written as a multi-line string) is shown escaped (`\n`).
    pub(crate) fn new(message: impl Into<String>) -> TopologyError {
        let message: String = message.into();
        TopologyError {
            message: if message.contains(char::is_control) {
                message
                    .chars()
                    .map(|c| {
                        if c.is_control() {
                            c.escape_default().to_string()
                        } else {
                            c.to_string()
                        }
                    })
                    .collect()
            } else {
                message
            },
            at: None,
        }
    }
}

fn err<T>(msg: impl Into<String>) -> Result<T, TopologyError> {
    Err(TopologyError::new(msg))
}

/// Most steps in one link's schedule.
pub const MAX_STEPS: usize = 10_000;

/// Every key a topology file has, at the top, in a `[[link]]` and in its
/// `[[link.schedule]]` (docs/net.md).
const KEYS: [&str; 17] = [
    "trace",
    "schedule",
    "schedule_repeat",
    "at",
    "name",
    "hosts",
    "routers",
    "switches",
    "link",
    "ends",
    "rate",
    "delay",
    "jitter",
    "queue",
    "queue_bytes",
    "loss",
    "reverse",
];

/// `rat` of serde's "unknown field `rat`…".
fn unknown_key(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("unknown field `")?;
    rest.split_once('`').map(|(key, _)| key)
}

/// The known key `key` is most likely a misspelling of, if any is close.
fn did_you_mean(key: &str) -> Option<&'static str> {
    KEYS.iter()
        .map(|k| (strsim::jaro_winkler(key, k), *k))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

/// The byte where `key` is given (`key =` at a line's start or in an inline table) in
/// the table that begins at byte `from` of `text` (up to the next table's header).
fn key_at(text: &str, from: usize, key: &str) -> Option<usize> {
    // An empty key (`"" = …`) is found everywhere and nowhere: the search below would
    // not move on from it.
    if key.is_empty() {
        return None;
    }
    let rest = text.get(from..)?;
    // The table's own lines: past its header line, up to the next `[` line.
    let body = rest.find('\n').map_or(rest.len(), |n| n + 1);
    let end = rest[body..]
        .match_indices('\n')
        .find(|(i, _)| rest[body + i + 1..].trim_start().starts_with('['))
        .map_or(rest.len(), |(i, _)| body + i);
    let region = &rest[..end];
    let mut at = 0;
    while let Some(found) = region[at..].find(key) {
        let start = at + found;
        let before = region[..start].chars().next_back();
        let after = region[start + key.len()..].trim_start_matches([' ', '\t']);
        if before.is_none_or(|c| c.is_whitespace() || c == '{' || c == ',')
            && after.starts_with('=')
        {
            return Some(from + start);
        }
        at = start + key.len();
    }
    None
}

/// The 1-based line and column (in characters) of byte `at` of `text`.
fn line_column(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProps {
    /// A delivery-opportunity trace's file (mahimahi's format) the capacity follows.
    trace: Option<String>,
    rate: Option<String>,
    delay: Option<String>,
    jitter: Option<String>,
    queue: Option<i64>,
    queue_bytes: Option<i64>,
    loss: Option<f64>,
    /// A trace-driven direction's queue: droptail, drophead, codel or pie.
    queue_policy: Option<String>,
    /// CoDel's target, or PIE's reference delay.
    queue_target: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    name: Option<String>,
    ends: Vec<String>,
    #[serde(flatten)]
    props: RawProps,
    reverse: Option<RawProps>,
    #[serde(default)]
    schedule: Vec<RawStep>,
    schedule_repeat: Option<toml::Spanned<String>>,
}

/// A `[[link.schedule]]` step: when, and the properties it sets (both ways).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    at: toml::Spanned<String>,
    #[serde(flatten)]
    props: RawProps,
    /// The b → a direction's own changes, over those above.
    reverse: Option<RawProps>,
}

impl RawProps {
    /// The properties it sets but a trace, as `(key, value)` the way the file writes
    /// them.
    fn changes(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut put = |key: &str, value: Option<String>| {
            if let Some(v) = value {
                out.push((key.to_string(), v));
            }
        };
        put("rate", self.rate.clone());
        put("delay", self.delay.clone());
        put("jitter", self.jitter.clone());
        put("queue", self.queue.map(|q| q.to_string()));
        put("queue_bytes", self.queue_bytes.map(|q| q.to_string()));
        put("loss", self.loss.map(|l| l.to_string()));
        out
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTopology {
    name: String,
    #[serde(default)]
    hosts: Vec<String>,
    #[serde(default)]
    routers: Vec<String>,
    #[serde(default)]
    switches: Vec<String>,
    #[serde(default, rename = "link")]
    links: Vec<RawLink>,
    #[serde(default, rename = "medium")]
    media: Vec<RawMedium>,
    mptcp: Option<RawMptcp>,
}

/// The `[mptcp]` table: MPTCP's in-kernel path manager on every host.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMptcp {
    subflows: Option<toml::Spanned<i64>>,
    add_addr_accepted: Option<toml::Spanned<i64>>,
    endpoints: Option<toml::Spanned<String>>,
}

/// A `[[medium]]`: a shared Wi-Fi channel.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMedium {
    name: toml::Spanned<String>,
    ap: toml::Spanned<String>,
    standard: toml::Spanned<String>,
    fairness: Option<toml::Spanned<String>>,
    queue: Option<toml::Spanned<i64>>,
    busy_stations: Option<toml::Spanned<i64>>,
    busy_rate: Option<toml::Spanned<String>>,
    #[serde(default, rename = "station")]
    stations: Vec<RawStation>,
}

/// A `[[medium.station]]`: a host on the channel and its PHY rates.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStation {
    host: toml::Spanned<String>,
    rate: toml::Spanned<String>,
    down_rate: Option<toml::Spanned<String>>,
    schedule_repeat: Option<toml::Spanned<String>>,
    #[serde(default)]
    schedule: Vec<RawStationStep>,
}

/// A `[[medium.station.schedule]]` step: when, and the station's PHY rates from then on.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStationStep {
    at: toml::Spanned<String>,
    rate: Option<toml::Spanned<String>>,
    down_rate: Option<toml::Spanned<String>>,
}

/// What a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Kind {
    Host,
    Router,
    Switch,
}

/// The queue limit of a link direction in bytes: `queue_bytes`, else `queue` packets of
/// 1514 bytes, else 1000 such packets (what tbf is given, and what bounds the queueing
/// delay).
pub fn queue_limit_bytes(s: &Shape) -> u64 {
    s.queue_bytes.unwrap_or(
        s.queue_packets.unwrap_or(crate::build::DEFAULT_QUEUE) * crate::build::PACKET_BYTES,
    )
}

/// A link between two nodes, with its shape in each direction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// The name the file gives it, else "link N" (N its place in the file, from 1).
    pub name: String,
    /// Whether the file names it (`name = …`), so that a drawing labels it with its name.
    #[serde(default)]
    pub named: bool,
    pub a: String,
    pub b: String,
    pub a_to_b: Shape,
    pub b_to_a: Shape,
    /// How it changes while it is up (`[[link.schedule]]`); empty: never.
    #[serde(default, skip_serializing_if = "Schedule::is_empty")]
    pub schedule: Schedule,
    /// The trace each direction's capacity follows (`trace = "FILE"`), if any; such a
    /// direction's `rate_bps` is the trace's mean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a_to_b_trace: Option<LinkTrace>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub b_to_a_trace: Option<LinkTrace>,
    /// The shared medium this link is a station's hop on (a: the station, b: its access
    /// point), if any: the air carries it, and its rates are the medium's expectation of
    /// a TCP flow alone on it ([`SharedMedium`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub medium: Option<String>,
}

/// A shared Wi-Fi channel (`[[medium]]`): an access point and its stations, each
/// station's hop a link of [`Topology::links`] that the medium's air carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SharedMedium {
    pub name: String,
    /// The access point: a router.
    pub ap: String,
    /// The standard whose timings it has ([`crate::medium::Preset::named`]).
    pub standard: String,
    /// How the access point shares its downlink between busy stations.
    pub fairness: Fairness,
    /// Frames each queue holds: each station's, and the access point's to each station.
    pub queue: u64,
    pub stations: Vec<Station>,
    /// Other devices on the channel, always sending ([`Busy`]); none unless given.
    #[serde(default)]
    pub busy: Option<Busy>,
}

/// A medium's busy stations (`busy_stations`, `busy_rate`): devices on the channel that
/// are not hosts of the topology and always have 1500-byte packets for the access point
/// ([`crate::medium::Medium::busy_station`]), contending for the air as its stations do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Busy {
    pub count: u32,
    /// Their PHY rate, bits per second.
    pub rate_bps: u64,
}

/// How an access point shares its downlink ([`crate::medium::Policy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fairness {
    /// A transmission to each busy station in turn, as DCF gives each sender.
    Frames,
    /// Equal air time for each busy station (deficit round robin on air time, as
    /// Linux's mac80211 schedules it).
    Airtime,
}

impl Fairness {
    /// The access point's policy: airtime's quantum is mac80211's default weight.
    pub fn policy(self) -> crate::medium::Policy {
        match self {
            Fairness::Frames => crate::medium::Policy::RoundRobin,
            Fairness::Airtime => crate::medium::Policy::Airtime {
                quantum_ns: 256_000,
                charge: crate::medium::Charge::Ppdu,
            },
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Fairness::Frames => "frames",
            Fairness::Airtime => "airtime",
        }
    }
}

/// One station of a [`SharedMedium`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Station {
    pub host: String,
    /// Its link's name in [`Topology::links`].
    pub link: String,
    /// Its PHY rate to the access point, and the access point's to it, bits per second.
    pub up_bps: u64,
    pub down_bps: u64,
}

impl SharedMedium {
    pub fn preset(&self) -> crate::medium::Preset {
        crate::medium::Preset::named(&self.standard).unwrap_or(crate::medium::Preset::N)
    }

    /// What it is expected to carry: each station alone (TCP each way) and all busy at
    /// once (1500-byte packets, each station sending, and the access point sending to
    /// each), by the model of [`crate::medium`].
    ///
    /// With busy stations ([`Busy`]) on the channel, each figure is among them: a TCP
    /// flow's transmissions each one of a DCF round in which every busy station makes one
    /// too ([`crate::medium::Preset::tcp_among_bps`]), the stations' uplinks sharing the
    /// air with them, the access point one more sender among them.
    pub fn expected(&self) -> Vec<StationExpected> {
        let p = self.preset();
        let up: Vec<_> = self.stations.iter().map(|s| p.rate(s.up_bps)).collect();
        let down: Vec<_> = self.stations.iter().map(|s| p.rate(s.down_bps)).collect();
        let others = self.busy_rates();
        let mut senders = up.clone();
        senders.extend(&others);
        let busy_up = p.busy_shares(&senders, 1500);
        let busy_down: Vec<f64> = match self.fairness {
            // The access point sends, a transmission to each in turn.
            Fairness::Frames => p.round_robin_shares(&down, 1500, &others),
            // Equal air time as the access point charges it, each transmission's PPDU
            // and a SIFS: x_i transmissions a second to station i with x_i · c_i the
            // same for all, and Σ x_i · t_i = 1 (t_i: a transmission's channel time).
            Fairness::Airtime => p.airtime_shares_among(&down, 1500, &others),
        };
        self.stations
            .iter()
            .enumerate()
            .map(|(i, s)| StationExpected {
                host: s.host.clone(),
                up_phy_bps: s.up_bps,
                down_phy_bps: s.down_bps,
                tcp_up_bps: p.tcp_among_bps(&up[i], &down[i], 1448, &others),
                tcp_down_bps: p.tcp_among_bps(&down[i], &up[i], 1448, &others),
                busy_up_bps: busy_up[i],
                busy_down_bps: busy_down[i],
            })
            .collect()
    }

    /// How many busy stations it has.
    pub fn busy_count(&self) -> u32 {
        self.busy.map_or(0, |b| b.count)
    }

    /// Each busy station's rate, none without them.
    pub fn busy_rates(&self) -> Vec<crate::medium::Rate> {
        let p = self.preset();
        self.busy
            .map_or_else(Vec::new, |b| vec![p.rate(b.rate_bps); b.count as usize])
    }

    /// The longest a frame may wait for this medium's air behind another sender's
    /// transmission (the slowest station's fullest, either way).
    pub fn air_wait(&self) -> Duration {
        let p = self.preset();
        let ns = self
            .stations
            .iter()
            .flat_map(|s| [s.up_bps, s.down_bps])
            .chain(self.busy.filter(|b| b.count > 0).map(|b| b.rate_bps))
            .map(|bps| p.air_wait_ns(&p.rate(bps), 1500))
            .max()
            .unwrap_or(0);
        Duration::from_nanos(ns)
    }

    /// Gives each of its stations' hops among `links` the rates its air allows a TCP
    /// flow alone, each way, and its queue.
    fn shape_hops(&self, links: &mut [Link]) {
        for (s, e) in self.stations.iter().zip(self.expected()) {
            if let Some(l) = links.iter_mut().find(|l| l.name == s.link) {
                l.a_to_b.rate_bps = Some(e.tcp_up_bps as u64);
                l.b_to_a.rate_bps = Some(e.tcp_down_bps as u64);
                l.a_to_b.queue_packets = Some(self.queue);
                l.b_to_a.queue_packets = Some(self.queue);
            }
        }
    }

    /// What `net show` says of it.
    pub fn summary(&self) -> MediumSummary {
        MediumSummary {
            name: self.name.clone(),
            ap: self.ap.clone(),
            standard: self.standard.clone(),
            fairness: self.fairness.as_str().to_string(),
            queue: self.queue,
            stations: self.expected(),
            busy: self.busy.filter(|b| b.count > 0).map(|b| {
                let p = self.preset();
                let mut senders: Vec<_> = self.stations.iter().map(|s| p.rate(s.up_bps)).collect();
                senders.extend(self.busy_rates());
                flowlab_results::net::BusyExpected {
                    count: b.count,
                    phy_bps: b.rate_bps,
                    busy_up_bps: p.busy_shares(&senders, 1500)[self.stations.len()],
                }
            }),
        }
    }
}

/// A trace a link direction's capacity follows ([`crate::trace`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkTrace {
    /// The file, as the topology names it.
    pub name: String,
    /// Where it was read: the emulator reads it there again.
    pub path: std::path::PathBuf,
    /// Its mean capacity, bits per second.
    pub mean_bps: u64,
    /// How its queue drops (`queue_policy`).
    #[serde(default = "drop_tail")]
    pub policy: crate::trace::QueuePolicy,
}

fn drop_tail() -> crate::trace::QueuePolicy {
    crate::trace::QueuePolicy::DropTail
}

/// Reads a trace file the topology names: where it is, and its text (or why not).
pub type ReadTrace<'a> = &'a dyn Fn(&str) -> Result<(std::path::PathBuf, String), String>;

/// A link's changes over time: steps at times from the moment the topology is up,
/// optionally repeated.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// In time order, at most one a time.
    pub steps: Vec<Step>,
    /// The steps start again this long after the start of each round, from the link's
    /// own values (the file's), for as long as the topology is up.
    pub repeat: Option<Duration>,
}

/// One step of a [`Schedule`]: from `at` on, the link has its own values with this
/// step's and its round's earlier steps' changes applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub at: Duration,
    /// `(key, value)` as the file writes them ([`Topology::set_link`]'s keys), both ways.
    pub set: Vec<(String, String)>,
    /// The b → a direction's own, over `set` (a step's `reverse = { … }`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reverse: Vec<(String, String)>,
}

impl Step {
    /// "rate=10M delay=40ms", as `flowlab net set` takes it; "… (reverse rate=50M)" with
    /// the b → a direction's own.
    pub fn said(&self) -> String {
        let words = |pairs: &[(String, String)]| {
            let w: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            w.join(" ")
        };
        match (self.set.is_empty(), self.reverse.is_empty()) {
            (_, true) => words(&self.set),
            (true, false) => format!("reverse {}", words(&self.reverse)),
            (false, false) => format!("{} (reverse {})", words(&self.set), words(&self.reverse)),
        }
    }

    /// Applies this step to link `l`: `set` both ways, then `reverse` to b → a.
    fn apply(&self, l: &mut Link) -> Result<(), TopologyError> {
        change(l, self.set.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
        if !self.reverse.is_empty() {
            let p = props(
                &l.name,
                self.reverse.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            )?;
            l.b_to_a = shape(&p, Some(&l.b_to_a), &format!("{} (reverse)", l.name))?;
        }
        Ok(())
    }
}

/// A moment when a scheduled link changes: at `at` after the start, in round `round`
/// (from 0), it takes the values of step `step` (its own values with that step and the
/// round's earlier ones applied), or, with `step` `None`, its own values again (a round
/// after the first begins without a step at 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moment {
    pub at: Duration,
    pub round: u64,
    pub step: Option<usize>,
}

impl Schedule {
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Every moment the link changes, in time order: finite without `repeat`, endless
    /// with it.
    pub fn moments(&self) -> impl Iterator<Item = Moment> + '_ {
        let rounds = match self.repeat {
            Some(_) if !self.steps.is_empty() => u64::MAX,
            _ => 1,
        };
        (0..rounds).flat_map(move |round| {
            let start = self
                .repeat
                .map_or(Duration::ZERO, |r| r.saturating_mul(round as u32));
            let reset = (round > 0 && self.steps.first().is_some_and(|s| !s.at.is_zero()))
                .then_some(Moment {
                    at: start,
                    round,
                    step: None,
                });
            reset
                .into_iter()
                .chain(self.steps.iter().enumerate().map(move |(i, s)| Moment {
                    at: start + s.at,
                    round,
                    step: Some(i),
                }))
        })
    }
}

impl Link {
    /// Sets property `key` to `value` as [`Topology::set_link`] does.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), TopologyError> {
        change(self, [(key, value)])
    }

    /// The link as it is from step `step` of its schedule on, within a round: its own
    /// values with steps `0..=step` applied (`None`: its own values).
    pub fn at_step(&self, step: Option<usize>) -> Result<Link, TopologyError> {
        let mut l = self.clone();
        for s in &self.schedule.steps[..step.map_or(0, |i| i + 1)] {
            s.apply(&mut l)?;
        }
        Ok(l)
    }

    /// Every shape each direction takes: its own, then at each step of its schedule.
    pub fn shapes(&self) -> Vec<(Shape, Shape)> {
        let mut out = vec![(self.a_to_b, self.b_to_a)];
        // A station's schedule changes its PHY rates, which its medium's air turns into
        // rates (Topology::station_at).
        if self.medium.is_some() {
            return out;
        }
        for i in 0..self.schedule.steps.len() {
            // Each step was applied when the file was read.
            if let Ok(l) = self.at_step(Some(i)) {
                out.push((l.a_to_b, l.b_to_a));
            }
        }
        out
    }
}

/// A checked topology (serialisable so that `up` can record what it built).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Topology {
    pub name: String,
    /// Every node and its kind, in name order.
    pub nodes: BTreeMap<String, Kind>,
    pub links: Vec<Link>,
    /// The shared media (`[[medium]]`), whose stations' hops are among `links`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub media: Vec<SharedMedium>,
    /// The file's `[mptcp]` table, if it has one ([`Topology::mptcp`] says what is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mptcp_table: Option<Mptcp>,
}

pub use flowlab_results::net::Mptcp;

/// The endpoint flags `ip mptcp endpoint` takes.
const MPTCP_FLAGS: [&str; 4] = ["subflow", "signal", "backup", "fullmesh"];

fn mptcp(text: &str, raw: &RawMptcp) -> Result<Mptcp, TopologyError> {
    let at = |span: std::ops::Range<usize>, message: String| TopologyError {
        at: Some(line_column(text, span.start)),
        ..TopologyError::new(message)
    };
    let mut m = Mptcp::default();
    for (value, name, into) in [
        (&raw.subflows, "subflows", &mut m.subflows),
        (
            &raw.add_addr_accepted,
            "add_addr_accepted",
            &mut m.add_addr_accepted,
        ),
    ] {
        if let Some(v) = value {
            *into = u8::try_from(*v.get_ref())
                .ok()
                .filter(|n| *n <= 8)
                .ok_or_else(|| {
                    at(
                        v.span(),
                        format!(
                            "mptcp: {name} {}: from 0 to 8 (the kernel's most)",
                            v.get_ref()
                        ),
                    )
                })?;
        }
    }
    if let Some(e) = &raw.endpoints {
        let flags: Vec<String> = e.get_ref().split_whitespace().map(String::from).collect();
        if let Some(bad) = flags.iter().find(|f| !MPTCP_FLAGS.contains(&f.as_str())) {
            return Err(at(
                e.span(),
                format!(
                    "mptcp: endpoints: unknown flag '{bad}' (flags: {})",
                    MPTCP_FLAGS.join(", ")
                ),
            ));
        }
        let has = |f: &str| flags.iter().any(|x| x == f);
        if has("fullmesh") && has("signal") {
            return Err(at(
                e.span(),
                "mptcp: endpoints: fullmesh and signal together (the kernel refuses them)".into(),
            ));
        }
        if !flags.is_empty() && !has("subflow") && !has("signal") {
            return Err(at(
                e.span(),
                "mptcp: endpoints: give subflow, signal or both (or \"\" for none)".into(),
            ));
        }
        m.endpoint_flags = flags;
    }
    Ok(m)
}

fn shape(p: &RawProps, base: Option<&Shape>, at: &str) -> Result<Shape, TopologyError> {
    let mut s = base.copied().unwrap_or_default();
    if let Some(r) = &p.rate {
        let bps = parse_rate(r).map_err(|e| TopologyError::new(format!("{at}: rate: {e}")))?;
        if bps == 0 {
            return err(format!("{at}: rate must be more than 0"));
        }
        s.rate_bps = Some(bps);
    }
    let time = |t: &str, what: &str| -> Result<Duration, TopologyError> {
        if t.trim_start().starts_with('-') {
            return err(format!("{at}: {what} {t} is negative"));
        }
        parse_duration(t).map_err(|e| TopologyError::new(format!("{at}: {what}: {e}")))
    };
    if let Some(d) = &p.delay {
        s.delay = time(d, "delay")?;
    }
    if let Some(j) = &p.jitter {
        s.jitter = time(j, "jitter")?;
    }
    if p.queue.is_some() && p.queue_bytes.is_some() {
        return err(format!(
            "{at}: give queue (packets) or queue_bytes, not both"
        ));
    }
    let max_packets = MAX_QUEUE_BYTES / crate::build::PACKET_BYTES;
    if let Some(q) = p.queue {
        if q <= 0 {
            return err(format!("{at}: queue must be at least 1 packet, got {q}"));
        }
        if q as u64 > max_packets {
            return err(format!(
                "{at}: queue {q} is more than tc can hold ({max_packets} packets of {} bytes)",
                crate::build::PACKET_BYTES
            ));
        }
        (s.queue_packets, s.queue_bytes) = (Some(q as u64), None);
    }
    if let Some(q) = p.queue_bytes {
        if q < 1500 {
            return err(format!(
                "{at}: queue_bytes must hold a packet (≥ 1500), got {q}"
            ));
        }
        if q as u64 > MAX_QUEUE_BYTES {
            return err(format!(
                "{at}: queue_bytes {q} is more than tc can hold ({MAX_QUEUE_BYTES})"
            ));
        }
        (s.queue_packets, s.queue_bytes) = (None, Some(q as u64));
    }
    if let Some(l) = p.loss {
        if !(0.0..1.0).contains(&l) {
            return err(format!(
                "{at}: loss must be a fraction from 0 up to 1, got {l}"
            ));
        }
        s.loss = l;
    }
    if s.jitter > s.delay {
        return err(format!("{at}: jitter is larger than the delay"));
    }
    Ok(s)
}

/// Sets properties of link `l`, each `(key, value)` as the file writes it, both ways and
/// at once (a step may lower delay and jitter together; see [`Topology::set_link`]).
fn change<'a>(
    l: &mut Link,
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<(), TopologyError> {
    let p = props(&l.name, pairs)?;
    let link = l.name.as_str();
    // One of queue and queue_bytes replaces the other.
    let (a_to_b, b_to_a) = (
        shape(&p, Some(&l.a_to_b), link)?,
        shape(&p, Some(&l.b_to_a), &format!("{link} (reverse)"))?,
    );
    (l.a_to_b, l.b_to_a) = (a_to_b, b_to_a);
    Ok(())
}

/// Properties `(key, value)` of link `link`, as the file writes them, read.
fn props<'a>(
    link: &str,
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<RawProps, TopologyError> {
    let mut p = RawProps::default();
    for (key, value) in pairs {
        let number =
            |what: &str| TopologyError::new(format!("{link}: {key} '{value}' is not {what}"));
        let v = value.trim();
        match key {
            "rate" => p.rate = Some(v.into()),
            "delay" => p.delay = Some(v.into()),
            "jitter" => p.jitter = Some(v.into()),
            "loss" => p.loss = Some(v.parse().map_err(|_| number("a fraction"))?),
            "queue" => p.queue = Some(v.parse().map_err(|_| number("a packet count"))?),
            "queue_bytes" => {
                p.queue_bytes = Some(v.parse().map_err(|_| number("a byte count"))?);
            }
            "trace" => {
                return err(format!(
                    "{link}: a link's trace is given in its topology file, and stays while it is up"
                ));
            }
            _ => {
                return err(format!(
                    "{link}: '{key}' is not a link property (rate, delay, jitter, loss, queue, queue_bytes)"
                ));
            }
        }
    }
    Ok(p)
}

/// The schedule of link `link`, read as `raw` gives it, each step checked by applying
/// it: a bad step is refused with its line (that of its `at`).
fn schedule(text: &str, raw: &RawLink, link: &Link) -> Result<Schedule, TopologyError> {
    let name = &link.name;
    let at_line = |span: std::ops::Range<usize>, message: String| TopologyError {
        at: Some(line_column(text, span.start)),
        ..TopologyError::new(message)
    };
    let mut steps_given = Vec::new();
    for raw_step in &raw.schedule {
        if raw_step.props.trace.is_some()
            || raw_step.reverse.as_ref().is_some_and(|r| r.trace.is_some())
        {
            return Err(at_line(
                raw_step.at.span(),
                format!(
                    "{name}: a schedule step changes no trace (a link follows one trace, given with the link)"
                ),
            ));
        }
        let queue_policy = |p: &RawProps| p.queue_policy.is_some() || p.queue_target.is_some();
        if queue_policy(&raw_step.props) || raw_step.reverse.as_ref().is_some_and(queue_policy) {
            return Err(at_line(
                raw_step.at.span(),
                format!(
                    "{name}: a schedule step changes no queue_policy (a trace's queue keeps the one given with the link)"
                ),
            ));
        }
        let reverse = raw_step
            .reverse
            .as_ref()
            .map(RawProps::changes)
            .unwrap_or_default();
        steps_given.push((given(&raw_step.at), raw_step.props.changes(), reverse));
    }
    let (steps, repeat) = timed_steps(
        text,
        name,
        ("[[link.schedule]]", LINK_STEP_KEYS),
        steps_given,
        raw.schedule_repeat.as_ref().map(given),
    )?;
    checked_in_turn(text, link, steps, repeat)
}

/// What a link's schedule step may set.
const LINK_STEP_KEYS: &str = "rate, delay, jitter, loss, queue or queue_bytes";

/// What a station's schedule step may set.
const STATION_STEP_KEYS: &str = "rate or down_rate";

/// The schedule of `steps`, each applied to `link` in turn, as the round applies them: a
/// step the link refuses is refused at its line.
fn checked_in_turn(
    text: &str,
    link: &Link,
    steps: TimedSteps,
    repeat: Option<Duration>,
) -> Result<Schedule, TopologyError> {
    let mut now = link.clone();
    for (step, span) in &steps {
        step.apply(&mut now).map_err(|e| TopologyError {
            at: span.as_ref().map(|s| line_column(text, s.start)),
            ..TopologyError::new(format!(
                "schedule step at {} s: {}",
                step.at.as_secs_f64(),
                e.message
            ))
        })?;
    }
    Ok(Schedule {
        steps: steps.into_iter().map(|(s, _)| s).collect(),
        repeat,
    })
}

/// A time as given: its text, and where it is in the file (a study's `[[link]]` gives
/// a schedule in one string).
type Given<'a> = (&'a str, Option<std::ops::Range<usize>>);

/// A file's time as [`Given`].
fn given(v: &toml::Spanned<String>) -> Given<'_> {
    (v.get_ref().as_str(), Some(v.span()))
}

/// Steps in time order, each with where its `at` is in the file.
type TimedSteps = Vec<(Step, Option<std::ops::Range<usize>>)>;

/// A schedule's steps as given: each one's `at`, what it sets both ways, and what it
/// sets b → a alone.
type GivenSteps<'a> = Vec<(Given<'a>, Vec<(String, String)>, Vec<(String, String)>)>;

/// The steps of `name`'s schedule (its table and the keys a step may set in `kind`) in
/// time order, and the time its rounds repeat, if they do: a step that sets nothing,
/// comes at a bad or repeated time, or not before the repeat is refused at its line.
fn timed_steps(
    text: &str,
    name: &str,
    (table, keys): (&str, &str),
    given: GivenSteps<'_>,
    repeat: Option<Given<'_>>,
) -> Result<(TimedSteps, Option<Duration>), TopologyError> {
    let at_line = |span: Option<std::ops::Range<usize>>, message: String| TopologyError {
        at: span.map(|s| line_column(text, s.start)),
        ..TopologyError::new(message)
    };
    let time = |(v, span): &Given<'_>, what: &str| {
        let bad = |why: String| at_line(span.clone(), format!("{name}: {what} '{v}': {why}"));
        if v.trim_start().starts_with('-') {
            return Err(bad("a time from the start cannot be negative".into()));
        }
        parse_duration(v).map_err(|e| bad(e.to_string()))
    };
    if given.len() > MAX_STEPS {
        return err(format!(
            "{name}: {} schedule steps; a schedule has at most {MAX_STEPS}",
            given.len()
        ));
    }
    let repeat = match repeat {
        Some(r) if given.is_empty() => {
            return Err(at_line(
                r.1,
                format!("{name}: schedule_repeat without a {table} step to repeat"),
            ));
        }
        Some(r) => Some(time(&r, "schedule_repeat")?),
        None => None,
    };
    let mut steps: TimedSteps = Vec::new();
    for (raw_at, set, reverse) in given {
        if set.is_empty() && reverse.is_empty() {
            return Err(at_line(
                raw_at.1,
                format!(
                    "{name}: the schedule step at {} changes nothing: give it {keys}",
                    raw_at.0
                ),
            ));
        }
        let at = time(&raw_at, "schedule step at")?;
        if let Some(r) = repeat.filter(|r| at >= *r) {
            return Err(at_line(
                raw_at.1,
                format!(
                    "{name}: the schedule step at {} is not before schedule_repeat ({} s): a round must hold its steps",
                    raw_at.0,
                    r.as_secs_f64()
                ),
            ));
        }
        steps.push((Step { at, set, reverse }, raw_at.1));
    }
    steps.sort_by_key(|(s, _)| s.at);
    for pair in steps.windows(2) {
        if pair[0].0.at == pair[1].0.at {
            return Err(at_line(
                pair[1].1.clone(),
                format!(
                    "{name}: two schedule steps at {} s: give them one step",
                    pair[1].0.at.as_secs_f64()
                ),
            ));
        }
    }
    if repeat.is_some_and(|r| r.is_zero()) {
        return err(format!("{name}: schedule_repeat must be longer than 0"));
    }
    Ok((steps, repeat))
}

/// The traces link `link` follows (`trace = "FILE"`, each way or in `reverse`), read and
/// checked with `read`; each such direction gets the trace's mean as its rate.
fn traces(link: &mut Link, raw: &RawLink, read: ReadTrace<'_>) -> Result<(), TopologyError> {
    let name = link.name.clone();
    let one = |file: &str, way: &str| -> Result<LinkTrace, TopologyError> {
        let (path, text) =
            read(file).map_err(|e| TopologyError::new(format!("{name}: trace{way}: {e}")))?;
        let trace = crate::trace::DeliveryTrace::parse(&text).map_err(|e| {
            TopologyError::new(format!("{name}: trace{way}: {}: {e}", path.display()))
        })?;
        Ok(LinkTrace {
            name: file.to_string(),
            path,
            mean_bps: trace.mean_bps(),
            policy: crate::trace::QueuePolicy::DropTail,
        })
    };
    // Each direction's own policy; b → a follows a → b's where it says none.
    let forward_policy = queue_policy(&raw.props, &name)?;
    let reverse_own = match &raw.reverse {
        Some(r) => queue_policy(r, &format!("{name} (reverse)"))?,
        None => None,
    };
    let forward = raw.props.trace.as_deref();
    let reverse = match &raw.reverse {
        Some(r) if r.trace.is_some() => r.trace.as_deref(),
        // A reverse with a rate of its own follows no trace.
        Some(r) if r.rate.is_some() => None,
        _ => forward,
    };
    if forward.is_some() && raw.props.rate.is_some() {
        return err(format!("{name}: give rate or trace, not both"));
    }
    if raw
        .reverse
        .as_ref()
        .is_some_and(|r| r.trace.is_some() && r.rate.is_some())
    {
        return err(format!("{name} (reverse): give rate or trace, not both"));
    }
    if (forward.is_some() || reverse.is_some()) && !link.schedule.is_empty() {
        return err(format!(
            "{name}: a link whose capacity follows a trace has no schedule (the trace is its schedule)"
        ));
    }
    for (file, policy, way) in [
        (forward, forward_policy, ""),
        (reverse, reverse_own, " (reverse)"),
    ] {
        if file.is_none() && policy.is_some() {
            return err(format!(
                "{name}{way}: queue_policy is for a direction that follows a trace, whose queue is the emulator's (a fixed-rate link's queue is tbf's, drop-tail)"
            ));
        }
    }
    if let Some(f) = forward {
        let mut t = one(f, "")?;
        t.policy = forward_policy.unwrap_or(t.policy);
        link.a_to_b.rate_bps = Some(t.mean_bps);
        link.a_to_b_trace = Some(t);
    }
    if let Some(f) = reverse {
        let mut t = one(f, " (reverse)")?;
        t.policy = reverse_own.or(forward_policy).unwrap_or(t.policy);
        link.b_to_a.rate_bps = Some(t.mean_bps);
        link.b_to_a_trace = Some(t);
    }
    Ok(())
}

/// The queue policy `p` gives (`queue_policy`, `queue_target`), if any.
fn queue_policy(
    p: &RawProps,
    at: &str,
) -> Result<Option<crate::trace::QueuePolicy>, TopologyError> {
    use crate::trace::QueuePolicy;
    let target = match &p.queue_target {
        Some(t) => {
            let d = parse_duration(t)
                .map_err(|e| TopologyError::new(format!("{at}: queue_target: {e}")))?;
            if d.is_zero() {
                return err(format!("{at}: queue_target must be longer than 0"));
            }
            Some(d.as_nanos() as u64)
        }
        None => None,
    };
    let policy = match p.queue_policy.as_deref() {
        None if target.is_some() => {
            return err(format!(
                "{at}: queue_target is CoDel's or PIE's: give queue_policy = \"codel\" or \"pie\""
            ));
        }
        None => return Ok(None),
        Some("droptail") => QueuePolicy::DropTail,
        Some("drophead") => QueuePolicy::DropHead,
        Some("codel") => QueuePolicy::codel(target),
        Some("pie") => QueuePolicy::pie(target),
        Some(other) => {
            return err(format!(
                "{at}: queue_policy '{other}' is not droptail, drophead, codel or pie"
            ));
        }
    };
    if target.is_some() && matches!(policy, QueuePolicy::DropTail | QueuePolicy::DropHead) {
        return err(format!(
            "{at}: queue_target is CoDel's or PIE's, not {}'s",
            policy.name()
        ));
    }
    Ok(Some(policy))
}

impl Link {
    /// Whether either direction's capacity follows a trace.
    pub fn follows_a_trace(&self) -> bool {
        self.a_to_b_trace.is_some() || self.b_to_a_trace.is_some()
    }
}

/// Medium `raw` checked, its stations' hops added to `links` (a: the station, b: the
/// access point); a mistake is refused at its line.
fn medium(
    text: &str,
    raw: &RawMedium,
    nodes: &BTreeMap<String, Kind>,
    pairs: &mut BTreeSet<(String, String)>,
    links: &mut Vec<Link>,
) -> Result<SharedMedium, TopologyError> {
    use crate::medium::Preset;
    let at = |span: std::ops::Range<usize>, message: String| TopologyError {
        at: Some(line_column(text, span.start)),
        ..TopologyError::new(message)
    };
    let name = raw.name.get_ref().clone();
    check_name(&name, "medium", MAX_NODE).map_err(|e| at(raw.name.span(), e.message))?;
    if links.iter().any(|l| l.medium.as_deref() == Some(&name)) {
        return Err(at(
            raw.name.span(),
            format!("medium '{name}' is defined twice"),
        ));
    }
    let ap = raw.ap.get_ref().clone();
    match nodes.get(&ap) {
        Some(Kind::Router) => {}
        Some(_) => {
            return Err(at(
                raw.ap.span(),
                format!(
                    "medium {name}: its access point '{ap}' must be a router (it forwards between its stations and the rest)"
                ),
            ));
        }
        None => {
            return Err(at(
                raw.ap.span(),
                format!("medium {name}: unknown node '{ap}'"),
            ));
        }
    }
    let preset = Preset::named(raw.standard.get_ref()).ok_or_else(|| {
        let names: Vec<&str> = Preset::ALL.iter().map(|p| p.name).collect();
        at(
            raw.standard.span(),
            format!(
                "medium {name}: standard '{}' is not one of {}",
                raw.standard.get_ref(),
                names.join(", ")
            ),
        )
    })?;
    let fairness = match raw
        .fairness
        .as_ref()
        .map(|f| (f.get_ref().as_str(), f.span()))
    {
        None | Some(("frames", _)) => Fairness::Frames,
        Some(("airtime", _)) => Fairness::Airtime,
        Some((other, span)) => {
            return Err(at(
                span,
                format!("medium {name}: fairness '{other}' is not frames or airtime"),
            ));
        }
    };
    let queue = match &raw.queue {
        None => DEFAULT_MEDIUM_QUEUE,
        Some(q) if (1..=100_000).contains(q.get_ref()) => *q.get_ref() as u64,
        Some(q) => {
            return Err(at(
                q.span(),
                format!(
                    "medium {name}: queue {} must be 1 to 100000 frames",
                    q.get_ref()
                ),
            ));
        }
    };
    if raw.stations.is_empty() {
        return Err(at(
            raw.name.span(),
            format!("medium {name} has no [[medium.station]]"),
        ));
    }
    if raw.stations.len() > MAX_STATIONS {
        return Err(at(
            raw.name.span(),
            format!(
                "medium {name} has {} stations; a medium has at most {MAX_STATIONS}",
                raw.stations.len()
            ),
        ));
    }
    let rate = |r: &toml::Spanned<String>, host: &str| -> Result<u64, TopologyError> {
        phy_rate(&preset, r.get_ref()).map_err(|why| {
            at(
                r.span(),
                format!(
                    "medium {name}: station {host}: rate '{}': {why}",
                    r.get_ref()
                ),
            )
        })
    };
    let mut stations = Vec::new();
    for st in &raw.stations {
        let host = st.host.get_ref().clone();
        match nodes.get(&host) {
            Some(Kind::Host) => {}
            Some(_) => {
                return Err(at(
                    st.host.span(),
                    format!("medium {name}: station '{host}' must be a host"),
                ));
            }
            None => {
                return Err(at(
                    st.host.span(),
                    format!("medium {name}: unknown node '{host}'"),
                ));
            }
        }
        let key = if host < ap {
            (host.clone(), ap.clone())
        } else {
            (ap.clone(), host.clone())
        };
        if !pairs.insert(key) {
            return Err(at(
                st.host.span(),
                format!("medium {name}: '{host}' and '{ap}' are already linked"),
            ));
        }
        let up_bps = rate(&st.rate, &host)?;
        let down_bps = match &st.down_rate {
            Some(r) => rate(r, &host)?,
            None => up_bps,
        };
        let link = format!("{name}.{host}");
        // Its schedule: each step's rates checked as the station's own are.
        let mut steps_given = Vec::new();
        for step in &st.schedule {
            let mut set = Vec::new();
            for (key, r) in [("rate", &step.rate), ("down_rate", &step.down_rate)] {
                if let Some(r) = r {
                    rate(r, &host)?;
                    set.push((key.to_string(), r.get_ref().clone()));
                }
            }
            steps_given.push((given(&step.at), set, Vec::new()));
        }
        let (steps, repeat) = timed_steps(
            text,
            &link,
            ("[[medium.station.schedule]]", STATION_STEP_KEYS),
            steps_given,
            st.schedule_repeat.as_ref().map(given),
        )?;
        let schedule = Schedule {
            steps: steps.into_iter().map(|(s, _)| s).collect(),
            repeat,
        };
        stations.push(Station {
            host: host.clone(),
            link: link.clone(),
            up_bps,
            down_bps,
        });
        links.push(Link {
            name: link,
            named: true,
            a: host,
            b: ap.clone(),
            a_to_b: Shape::default(),
            b_to_a: Shape::default(),
            schedule,
            a_to_b_trace: None,
            b_to_a_trace: None,
            medium: Some(name.clone()),
        });
    }
    let busy = busy_of(text, &name, raw, &preset, stations.len())?;
    let medium = SharedMedium {
        name,
        ap,
        standard: preset.name.to_string(),
        fairness,
        queue,
        stations,
        busy,
    };
    medium.shape_hops(links);
    Ok(medium)
}

/// A medium's busy stations: `busy_stations` from 0 (none) to what [`MAX_STATIONS`]
/// leaves beside its stations, at `busy_rate` (the standard's PHY rates; needed with
/// any).
fn busy_of(
    text: &str,
    name: &str,
    raw: &RawMedium,
    preset: &crate::medium::Preset,
    stations: usize,
) -> Result<Option<Busy>, TopologyError> {
    let at = |span: std::ops::Range<usize>, message: String| TopologyError {
        at: Some(line_column(text, span.start)),
        ..TopologyError::new(message)
    };
    let count = match &raw.busy_stations {
        None => 0,
        Some(n) => busy_count(&n.get_ref().to_string(), stations).map_err(|why| {
            at(
                n.span(),
                format!("medium {name}: busy_stations {} {why}", n.get_ref()),
            )
        })?,
    };
    let rate_bps = match &raw.busy_rate {
        None if count > 0 => {
            return Err(at(
                raw.busy_stations
                    .as_ref()
                    .map_or(raw.name.span(), |n| n.span()),
                format!(
                    "medium {name}: busy_stations needs busy_rate, their PHY rate (e.g. \"54M\")"
                ),
            ));
        }
        None => return Ok(None),
        Some(r) => phy_rate(preset, r.get_ref()).map_err(|why| {
            at(
                r.span(),
                format!("medium {name}: busy_rate '{}': {why}", r.get_ref()),
            )
        })?,
    };
    Ok(Some(Busy { count, rate_bps }))
}

/// A medium's busy stations written as `value`, beside its `stations`: 0 to what
/// [`MAX_STATIONS`] leaves, or why not ("must be …", to follow the value).
fn busy_count(value: &str, stations: usize) -> Result<u32, String> {
    let room = MAX_STATIONS - stations;
    value
        .trim()
        .parse::<u32>()
        .ok()
        .filter(|n| *n as usize <= room)
        .ok_or_else(|| {
            format!(
                "must be 0 to {room} (a medium has at most {MAX_STATIONS} stations, busy ones included)"
            )
        })
}

/// A PHY rate of `preset`'s standard written as `value` ("54M"), bits per second, or why
/// not.
fn phy_rate(preset: &crate::medium::Preset, value: &str) -> Result<u64, String> {
    let bps = parse_rate(value).map_err(|e| e.to_string())?;
    if !(1_000_000..=preset.max_bps).contains(&bps) {
        return Err(format!(
            "{} PHY rates run from 1 Mbit/s to {} Mbit/s",
            preset.name,
            preset.max_bps as f64 / 1e6
        ));
    }
    Ok(bps)
}

fn check_name(name: &str, what: &str, max: usize) -> Result<(), TopologyError> {
    let ok = !name.is_empty()
        && name.len() <= max
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        err(format!(
            "{what} name '{name}': use 1 to {max} lower-case letters and digits, starting with a letter"
        ))
    }
}

impl Topology {
    /// Parses and checks a topology file that names no trace file (one that does is
    /// refused: see [`Topology::parse_with`]).
    pub fn parse(text: &str) -> Result<Topology, TopologyError> {
        Self::parse_with(text, &|name| {
            Err(format!(
                "{name}: a topology's trace files are read beside its file (flowlab reads it from one)"
            ))
        })
    }

    /// Parses and checks a topology file, reading the trace files it names with `read`
    /// (see [`crate::build::beside`]).
    pub fn parse_with(text: &str, read: ReadTrace<'_>) -> Result<Topology, TopologyError> {
        let raw: RawTopology = toml::from_str(text).map_err(|e| {
            let span = e.span();
            let message = e.message().trim_end().to_string();
            match unknown_key(&message) {
                // The error spans the key's whole table: point at the key, and name the
                // key meant.
                Some(key) => {
                    let from = span.as_ref().map_or(0, |s| s.start);
                    TopologyError {
                        at: Some(line_column(text, key_at(text, from, key).unwrap_or(from))),
                        ..TopologyError::new(match did_you_mean(key) {
                            Some(meant) => format!("{message}; did you mean `{meant}`?"),
                            None => format!("{message}; a topology's keys: docs/net.md"),
                        })
                    }
                }
                None => TopologyError {
                    at: span.map(|s| line_column(text, s.start)),
                    ..TopologyError::new(message)
                },
            }
        })?;
        check_name(&raw.name, "topology", MAX_NAME)?;
        let count = raw.hosts.len() + raw.routers.len() + raw.switches.len();
        if count > MAX_NODES {
            return err(format!(
                "{count} nodes; a topology has at most {MAX_NODES} (each is a namespace)"
            ));
        }
        if raw.links.len() > MAX_LINKS {
            return err(format!(
                "{} links; a topology has at most {MAX_LINKS}",
                raw.links.len()
            ));
        }
        let mut nodes = BTreeMap::new();
        for (list, kind) in [
            (&raw.hosts, Kind::Host),
            (&raw.routers, Kind::Router),
            (&raw.switches, Kind::Switch),
        ] {
            for n in list {
                check_name(n, "node", MAX_NODE)?;
                if nodes.insert(n.clone(), kind).is_some() {
                    return err(format!("node '{n}' is defined twice"));
                }
            }
        }
        if !nodes.values().any(|k| *k == Kind::Host) {
            return err("a topology needs at least one host");
        }
        let mut links = Vec::new();
        let mut pairs = BTreeSet::new();
        for (i, l) in raw.links.iter().enumerate() {
            let label = l.name.clone().unwrap_or_else(|| format!("link {}", i + 1));
            let [a, b] = l.ends.as_slice() else {
                return err(format!("{label}: ends must name exactly two nodes"));
            };
            for n in [a, b] {
                if !nodes.contains_key(n) {
                    return err(format!("{label}: unknown node '{n}'"));
                }
            }
            if a == b {
                return err(format!("{label}: a link cannot join '{a}' to itself"));
            }
            if nodes[a] == Kind::Switch && nodes[b] == Kind::Switch {
                return err(format!("{label}: switches cannot be linked to switches"));
            }
            let key = if a < b {
                (a.clone(), b.clone())
            } else {
                (b.clone(), a.clone())
            };
            if !pairs.insert(key) {
                return err(format!("{label}: '{a}' and '{b}' are already linked"));
            }
            let a_to_b = shape(&l.props, None, &label)?;
            let b_to_a = match &l.reverse {
                Some(r) => shape(r, Some(&a_to_b), &format!("{label} (reverse)"))?,
                None => a_to_b,
            };
            let mut link = Link {
                named: l.name.is_some(),
                name: label,
                a: a.clone(),
                b: b.clone(),
                a_to_b,
                b_to_a,
                schedule: Schedule::default(),
                a_to_b_trace: None,
                b_to_a_trace: None,
                medium: None,
            };
            link.schedule = schedule(text, l, &link)?;
            traces(&mut link, l, read)?;
            links.push(link);
        }
        let mut media = Vec::new();
        for m in &raw.media {
            media.push(medium(text, m, &nodes, &mut pairs, &mut links)?);
        }
        if links.len() > MAX_LINKS {
            return err(format!(
                "{} links with the media's stations; a topology has at most {MAX_LINKS}",
                links.len()
            ));
        }
        let mut degrees: HashMap<&str, usize> = HashMap::new();
        for l in &links {
            *degrees.entry(&l.a).or_default() += 1;
            *degrees.entry(&l.b).or_default() += 1;
        }
        for (n, k) in &nodes {
            let degree = degrees.get(n.as_str()).copied().unwrap_or(0);
            if degree == 0 {
                return err(format!("node '{n}' has no link"));
            }
            if *k == Kind::Switch && degree > 253 {
                return err(format!(
                    "switch '{n}' has {degree} links; a /24 holds at most 253"
                ));
            }
        }
        let mptcp_table = raw.mptcp.as_ref().map(|m| mptcp(text, m)).transpose()?;
        let t = Topology {
            name: raw.name,
            nodes,
            links,
            media,
            mptcp_table,
        };
        if let Some((a, b)) = Plan::of(&t).unreachable_host() {
            return err(format!("hosts '{a}' and '{b}' are not connected"));
        }
        Ok(t)
    }

    /// What station hop `l`'s schedule sets from step `step` on, within a round, as
    /// `flowlab net set` takes it: the station's own rates (the file's), then each step's
    /// up to `step`, in order; `None` for a link of the file.
    pub fn station_at(&self, l: &Link, step: Option<usize>) -> Option<Vec<(String, String)>> {
        let (_, s) = self.station_of(l)?;
        let mut pairs = vec![
            ("rate".to_string(), s.up_bps.to_string()),
            ("down_rate".to_string(), s.down_bps.to_string()),
        ];
        for st in &l.schedule.steps[..step.map_or(0, |i| i + 1)] {
            pairs.extend(st.set.iter().cloned());
        }
        Some(pairs)
    }

    /// The shared medium and station whose hop link `l` is; `None` for a link of the file.
    pub fn station_of(&self, l: &Link) -> Option<(&SharedMedium, &Station)> {
        let m = self
            .media
            .iter()
            .find(|m| Some(&m.name) == l.medium.as_ref())?;
        Some((m, m.stations.iter().find(|s| s.link == l.name)?))
    }

    /// Sets property `key` of link `link` (`rate`, `delay`, `jitter`, `loss`, `queue`
    /// or `queue_bytes`) to `value`, written as the file would, in both directions; the
    /// link's other properties stay. A study's `[[link]]` changes a link this way for
    /// each cell.
    ///
    /// A station's hop on a shared medium (`MEDIUM.HOST`) takes `rate` (its PHY rate,
    /// both ways) and `down_rate` (the access point's to it), as its `[[medium.station]]`
    /// would.
    pub fn set_link(&mut self, link: &str, key: &str, value: &str) -> Result<(), TopologyError> {
        let i = self.link_index(link)?;
        let Some(m) = self.links[i].medium.clone() else {
            return self.links[i].set(key, value);
        };
        let medium = self
            .media
            .iter_mut()
            .find(|x| x.name == m)
            .ok_or_else(|| TopologyError::new(format!("{link}: no medium '{m}'")))?;
        if !matches!(key, "rate" | "down_rate") {
            return err(format!(
                "{link}: '{key}' is not a station's property (rate, down_rate)"
            ));
        }
        let bps = phy_rate(&medium.preset(), value)
            .map_err(|why| TopologyError::new(format!("{link}: {key} '{value}': {why}")))?;
        let station = medium
            .stations
            .iter_mut()
            .find(|s| s.link == link)
            .ok_or_else(|| TopologyError::new(format!("{link}: not a station of {m}")))?;
        if key == "rate" {
            station.up_bps = bps;
        }
        station.down_bps = bps;
        medium.shape_hops(&mut self.links);
        Ok(())
    }

    /// Sets property `key` of shared medium `medium` to `value`, as its `[[medium]]`
    /// would: `busy_stations` (0 to what 64 stations leave) or `busy_rate` (a PHY rate of
    /// its standard); its stations' hops take the rates the air then allows. A study's
    /// `[[medium]]` changes a medium this way for each cell.
    pub fn set_medium(
        &mut self,
        medium: &str,
        key: &str,
        value: &str,
    ) -> Result<(), TopologyError> {
        let names: Vec<String> = self.media.iter().map(|m| m.name.clone()).collect();
        let Some(m) = self.media.iter_mut().find(|m| m.name == medium) else {
            return err(format!(
                "no medium '{medium}' (the topology has: {})",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ));
        };
        let preset = m.preset();
        let mut busy = m.busy.unwrap_or(Busy {
            count: 0,
            rate_bps: 0,
        });
        match key {
            "busy_stations" => {
                busy.count = busy_count(value, m.stations.len()).map_err(|why| {
                    TopologyError::new(format!("medium {medium}: busy_stations '{value}' {why}"))
                })?;
            }
            "busy_rate" => {
                busy.rate_bps = phy_rate(&preset, value).map_err(|why| {
                    TopologyError::new(format!("medium {medium}: busy_rate '{value}': {why}"))
                })?;
            }
            _ => {
                return err(format!(
                    "medium {medium}: '{key}' is not a property a study sets (busy_stations, busy_rate)"
                ));
            }
        }
        if busy.count > 0 && busy.rate_bps == 0 {
            return err(format!(
                "medium {medium}: busy_stations needs busy_rate, their PHY rate (in the topology's [[medium]] or beside it)"
            ));
        }
        m.busy = Some(busy);
        m.shape_hops(&mut self.links);
        Ok(())
    }

    /// Gives link `link` the schedule `text` says, as a study's `[[link]]` `schedule`
    /// does: steps separated by `;`, each a time from the start and what it sets, as
    /// `flowlab net set` takes it (`"2s rate=10M delay=40ms; 5s rate=50M"`), and, for
    /// rounds, `repeat TIME`; `none` for no schedule. A station's hop (`MEDIUM.HOST`)
    /// takes `rate` and `down_rate`. Refused as the file would refuse the steps, and for
    /// a link that follows a trace.
    pub fn set_schedule(&mut self, link: &str, text: &str) -> Result<(), TopologyError> {
        let i = self.link_index(link)?;
        if self.links[i].follows_a_trace() {
            return err(format!(
                "{link}: a link whose capacity follows a trace has no schedule (the trace is its schedule)"
            ));
        }
        let station = self.links[i].medium.is_some();
        let mut steps_given = Vec::new();
        let mut repeat = None;
        if text.trim() != "none" {
            for part in text.split(';').map(str::trim) {
                let mut words = part.split_whitespace();
                let Some(first) = words.next() else {
                    return err(format!(
                        "{link}: schedule '{text}': an empty step (steps are 'TIME KEY=VALUE …; …')"
                    ));
                };
                if first == "repeat" {
                    repeat = Some((words.next().unwrap_or(""), None));
                    continue;
                }
                let mut set = Vec::new();
                for w in words {
                    let Some((k, v)) = w.split_once('=') else {
                        return err(format!(
                            "{link}: schedule step at {first}: '{w}' is not KEY=VALUE"
                        ));
                    };
                    set.push((k.to_string(), v.to_string()));
                }
                steps_given.push(((first, None), set, Vec::new()));
            }
        }
        let keys = if station {
            STATION_STEP_KEYS
        } else {
            LINK_STEP_KEYS
        };
        let (steps, repeat) =
            timed_steps("", link, ("'TIME KEY=VALUE'", keys), steps_given, repeat)?;
        let schedule = if station {
            // Each step as `net set` would set it, on a copy.
            let mut check = self.clone();
            for (step, _) in &steps {
                for (k, v) in &step.set {
                    check.set_link(link, k, v).map_err(|e| {
                        TopologyError::new(format!(
                            "schedule step at {} s: {}",
                            step.at.as_secs_f64(),
                            e.message
                        ))
                    })?;
                }
            }
            Schedule {
                steps: steps.into_iter().map(|(s, _)| s).collect(),
                repeat,
            }
        } else {
            let mut own = self.links[i].clone();
            own.schedule = Schedule::default();
            checked_in_turn("", &own, steps, repeat)?
        };
        self.links[i].schedule = schedule;
        Ok(())
    }

    /// Makes link `link` follow trace `file` both ways (read with `read`), as a study's
    /// `[[link]]` `trace` does: its capacity the trace's, each direction keeping its
    /// delay, queue and queue policy. Refused for a station's hop and a link with a
    /// schedule, as the file would refuse them.
    pub fn set_trace(
        &mut self,
        link: &str,
        file: &str,
        read: ReadTrace<'_>,
    ) -> Result<(), TopologyError> {
        let i = self.link_index(link)?;
        let l = &mut self.links[i];
        if l.medium.is_some() {
            return err(format!(
                "{link}: a station's hop follows its medium's air, not a trace"
            ));
        }
        if !l.schedule.is_empty() {
            return err(format!(
                "{link}: a link whose capacity follows a trace has no schedule (the trace is its schedule)"
            ));
        }
        let (path, text) =
            read(file).map_err(|e| TopologyError::new(format!("{link}: trace: {e}")))?;
        let trace = crate::trace::DeliveryTrace::parse(&text)
            .map_err(|e| TopologyError::new(format!("{link}: trace: {}: {e}", path.display())))?;
        for (shape, traced) in [
            (&mut l.a_to_b, &mut l.a_to_b_trace),
            (&mut l.b_to_a, &mut l.b_to_a_trace),
        ] {
            let policy = traced
                .as_ref()
                .map_or(crate::trace::QueuePolicy::DropTail, |t| t.policy);
            shape.rate_bps = Some(trace.mean_bps());
            *traced = Some(LinkTrace {
                name: file.to_string(),
                path: path.clone(),
                mean_bps: trace.mean_bps(),
                policy,
            });
        }
        Ok(())
    }

    /// Where link `link` is in [`Topology::links`]; refused with the links there are.
    pub fn link_index(&self, link: &str) -> Result<usize, TopologyError> {
        self.links
            .iter()
            .position(|l| l.name == link)
            .ok_or_else(|| {
                let names: Vec<&str> = self.links.iter().map(|l| l.name.as_str()).collect();
                TopologyError::new(format!(
                    "topology {} has no link '{link}' (it has: {})",
                    self.name,
                    names.join(", ")
                ))
            })
    }

    pub fn hosts(&self) -> impl Iterator<Item = &String> {
        self.nodes
            .iter()
            .filter(|(_, k)| **k == Kind::Host)
            .map(|(n, _)| n)
    }

    /// The hosts with more than one link (an address on each), in name order.
    pub fn multi_homed(&self) -> Vec<&str> {
        self.hosts()
            .filter(|h| {
                self.links
                    .iter()
                    .filter(|l| &l.a == *h || &l.b == *h)
                    .count()
                    > 1
            })
            .map(String::as_str)
            .collect()
    }

    /// What MPTCP's path manager is set to on every host: the file's `[mptcp]` table,
    /// else the defaults where a host is multi-homed; `None`: as the kernel has it.
    pub fn mptcp(&self) -> Option<Mptcp> {
        self.mptcp_table
            .clone()
            .or_else(|| (!self.multi_homed().is_empty()).then(Mptcp::default))
    }
}

/// One hop of a path: the link and the direction it is crossed in.
#[derive(Debug, Clone, PartialEq)]
pub struct Hop {
    pub link: usize,
    pub forward: bool,
}

/// What a topology implies for a path between two hosts.
#[derive(Debug, Clone, PartialEq)]
pub struct PathInfo {
    /// Nodes from source to destination (switches included).
    pub nodes: Vec<String>,
    pub hops: Vec<Hop>,
    /// 2 × the sum of one-way delays (there and back).
    pub rtt: Duration,
    /// The slowest emulated link in the direction of travel (`None`: none is limited).
    pub bottleneck_bps: Option<u64>,
    /// The most queueing the path can add in the direction of travel: for every
    /// rate-limited hop, its full queue (Q packets × 1514 bytes, or its bytes) at its rate
    /// (the two hops of a flow relayed across a shared medium at that relayed flow's
    /// rate, which [`PathInfo::rate_floor_bps`] takes too); and for every hop on a shared
    /// medium, the wait for
    /// its air behind another sender's fullest transmission, there and back
    /// ([`SharedMedium::air_wait`]).
    pub queue_delay: Duration,
    /// The bottleneck's own full queue at its rate (what decides whether TCP can keep
    /// the path busy).
    pub bottleneck_queue_delay: Duration,
    /// Random loss in the direction of travel: 1 − Π (1 − loss of each hop).
    pub loss: f64,
    /// On a path across a shared medium, the most a TCP flow may carry: the bottleneck
    /// with the medium's hops at their payload rate with no acknowledgement on the air
    /// (`bottleneck_bps` counts one for every two segments, and a receiver may send
    /// fewer). `None` on other paths: their ceiling is the bottleneck.
    pub rate_ceiling_bps: Option<u64>,
    /// On a path that crosses one shared medium twice (a station to another, relayed by
    /// the access point), the least a TCP flow should carry: the bottleneck with those
    /// two hops at what the relayed flow gets when the sender and the access point
    /// contend for every transmission, which `bottleneck_bps` (their air times added)
    /// leaves out. `None` on other paths: their floor is the bottleneck.
    pub rate_floor_bps: Option<u64>,
    /// The busy stations (`busy_stations`) of the media the path crosses: their
    /// transmissions hold its packets for as long as DCF's backoff decides (802.11g, 8
    /// busy stations: tens of ms), so its RTTs are shown and not judged. 0 on most.
    pub busy_stations: u32,
    /// Whether the path crosses a shared medium's air.
    pub on_air: bool,
}

/// How a node was reached in the path search: hops, delay, and the link and node it was
/// reached from.
type Reached<'n> = (usize, Duration, Option<(usize, &'n str)>);

/// Addresses and routes of a topology.
#[derive(Debug, Clone)]
pub struct Plan<'a> {
    pub topology: &'a Topology,
    /// Segments (a switch and its links, or one link between two non-switch nodes) and
    /// their /24: `10.{index / 256}.{index % 256}.0/24` counted from 1.
    pub segments: Vec<Segment>,
    adjacency: HashMap<&'a str, Vec<(usize, &'a str)>>,
}

/// One IPv4 subnet and the node interfaces on it.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    pub subnet: [u8; 3],
    /// What the segment is: a switch, or one link (by index).
    pub switch: Option<String>,
    pub link: Option<usize>,
    /// Node and its address on this segment.
    pub members: Vec<(String, [u8; 4])>,
}

impl<'a> Plan<'a> {
    /// What `flowlab net show` prints: nodes, subnets, shaped links, and every host
    /// pair's path.
    /// A host that the first host cannot reach (hosts do not forward), with the first:
    /// one search over the whole graph.
    fn unreachable_host(&self) -> Option<(&'a str, &'a str)> {
        let t = self.topology;
        let first = t.hosts().next()?;
        let mut seen: BTreeSet<&str> = BTreeSet::from([first.as_str()]);
        let mut todo = vec![first.as_str()];
        while let Some(node) = todo.pop() {
            if node != first && t.nodes.get(node) == Some(&Kind::Host) {
                continue;
            }
            for &(_, next) in self.adjacency.get(node).into_iter().flatten() {
                if seen.insert(next) {
                    todo.push(next);
                }
            }
        }
        t.hosts()
            .find(|h| !seen.contains(h.as_str()))
            .map(|h| (first.as_str(), h.as_str()))
    }

    /// The summary with every pair's path when there are at most [`MAX_LISTED_HOSTS`]
    /// hosts, else with none (see [`Self::summary_for`]).
    pub fn summary(&self) -> PlanSummary {
        let hosts: Vec<&String> = self.topology.hosts().collect();
        let mut s = self.summary_without_paths();
        if hosts.len() <= MAX_LISTED_HOSTS {
            for (i, a) in hosts.iter().enumerate() {
                for b in &hosts[i + 1..] {
                    s.paths.extend(self.path_summary(a, b));
                }
            }
            s.all_paths = true;
        }
        s
    }

    /// The summary with the path between hosts `from` and `to` only.
    pub fn summary_for(&self, from: &str, to: &str) -> Result<PlanSummary, TopologyError> {
        let t = self.topology;
        for h in [from, to] {
            if t.nodes.get(h) != Some(&Kind::Host) {
                let hosts: Vec<&str> = t.hosts().take(8).map(String::as_str).collect();
                let more = if t.hosts().count() > 8 { ", …" } else { "" };
                return err(format!(
                    "'{h}' is not a host of topology {} (its hosts: {}{more})",
                    t.name,
                    hosts.join(", ")
                ));
            }
        }
        let mut s = self.summary_without_paths();
        s.paths.extend(self.path_summary(from, to));
        Ok(s)
    }

    fn path_summary(&self, from: &str, to: &str) -> Option<PathSummary> {
        let path = self.path(from, to)?;
        Some(PathSummary {
            from: from.to_string(),
            to: to.to_string(),
            rtt: path.rtt,
            bottleneck_bps: path.bottleneck_bps,
            nodes: path.nodes,
        })
    }

    fn summary_without_paths(&self) -> PlanSummary {
        let t = self.topology;
        let count = |k: Kind| t.nodes.values().filter(|x| **x == k).count();
        let direction = |l: &Link, from: &str, to: &str, shape: Shape| ShapedDirection {
            link: l.name.clone(),
            from: from.to_string(),
            to: to.to_string(),
            shape,
            trace: if from == l.a {
                &l.a_to_b_trace
            } else {
                &l.b_to_a_trace
            }
            .as_ref()
            .map(|t| t.name.clone()),
            queue_policy: if from == l.a {
                &l.a_to_b_trace
            } else {
                &l.b_to_a_trace
            }
            .as_ref()
            .and_then(|t| t.policy.said()),
        };
        let mut shaped = Vec::new();
        for l in t
            .links
            .iter()
            .filter(|l| !l.a_to_b.is_plain() || !l.b_to_a.is_plain())
            // A station's hop is said with its medium.
            .filter(|l| l.medium.is_none())
        {
            shaped.push(direction(l, &l.a, &l.b, l.a_to_b));
            if l.b_to_a != l.a_to_b || l.b_to_a_trace != l.a_to_b_trace {
                shaped.push(direction(l, &l.b, &l.a, l.b_to_a));
            }
        }
        let hosts = count(Kind::Host);
        PlanSummary {
            name: t.name.clone(),
            hosts,
            routers: count(Kind::Router),
            switches: count(Kind::Switch),
            links: t.links.len(),
            subnets: self
                .segments
                .iter()
                .map(|s| Subnet {
                    prefix: s.subnet,
                    members: s
                        .members
                        .iter()
                        .map(|(n, a)| (n.clone(), Ipv4Addr::from(*a)))
                        .collect(),
                })
                .collect(),
            shaped,
            paths: Vec::new(),
            host_pairs: hosts * hosts.saturating_sub(1) / 2,
            all_paths: false,
            schedules: t
                .links
                .iter()
                .filter(|l| !l.schedule.is_empty())
                .map(|l| LinkSchedule {
                    link: l.name.clone(),
                    steps: l.schedule.steps.iter().map(|s| (s.at, s.said())).collect(),
                    repeat: l.schedule.repeat,
                })
                .collect(),
            media: t.media.iter().map(SharedMedium::summary).collect(),
            multi_homed: t.multi_homed().into_iter().map(String::from).collect(),
            mptcp: t.mptcp(),
        }
    }

    pub fn of(t: &'a Topology) -> Plan<'a> {
        let mut adjacency: HashMap<&str, Vec<(usize, &str)>> = HashMap::new();
        for (i, l) in t.links.iter().enumerate() {
            adjacency.entry(&l.a).or_default().push((i, &l.b));
            adjacency.entry(&l.b).or_default().push((i, &l.a));
        }
        let mut segments = Vec::new();
        let mut next = 1u32;
        let mut subnet = || {
            let s = [10, (next / 256) as u8, (next % 256) as u8];
            next += 1;
            s
        };
        let address = |s: [u8; 3], i: usize| [s[0], s[1], s[2], (i + 1) as u8];
        for (n, k) in &t.nodes {
            if *k == Kind::Switch {
                let s = subnet();
                let members = adjacency[n.as_str()]
                    .iter()
                    .enumerate()
                    .map(|(i, (_, m))| (m.to_string(), address(s, i)))
                    .collect();
                segments.push(Segment {
                    subnet: s,
                    switch: Some(n.clone()),
                    link: None,
                    members,
                });
            }
        }
        for (i, l) in t.links.iter().enumerate() {
            if t.nodes[&l.a] != Kind::Switch && t.nodes[&l.b] != Kind::Switch {
                let s = subnet();
                segments.push(Segment {
                    subnet: s,
                    switch: None,
                    link: Some(i),
                    members: vec![(l.a.clone(), address(s, 0)), (l.b.clone(), address(s, 1))],
                });
            }
        }
        Plan {
            topology: t,
            segments,
            adjacency,
        }
    }

    /// The path from host `from` to host `to`: fewest links, then least delay (ties by
    /// name order, so the same file always gives the same routes).
    /// The last node of `path` at its address on the segment the path arrives by (a
    /// router has several).
    pub fn address_towards(&self, path: &PathInfo) -> Option<std::net::Ipv4Addr> {
        let to = path.nodes.last()?;
        let prev = path.nodes.get(path.nodes.len().checked_sub(2)?)?;
        self.segments.iter().find_map(|s| {
            let here = s.members.iter().find(|(n, _)| n == to)?;
            let joins = s.members.iter().any(|(n, _)| n == prev) || s.switch.as_ref() == Some(prev);
            joins.then(|| std::net::Ipv4Addr::from(here.1))
        })
    }

    /// The node that holds address `addr`, if any.
    pub fn node_at(&self, addr: std::net::Ipv4Addr) -> Option<&str> {
        self.segments
            .iter()
            .flat_map(|s| s.members.iter())
            .find(|(_, a)| std::net::Ipv4Addr::from(*a) == addr)
            .map(|(n, _)| n.as_str())
    }

    pub fn path(&self, from: &str, to: &str) -> Option<PathInfo> {
        self.path_leaving(from, to, None)
    }

    /// [`Plan::path`] leaving `from` by link `first` (by index): the path a packet from
    /// `from`'s address on that link takes (a multi-homed host's per-source routes).
    pub fn path_through(&self, from: &str, to: &str, first: usize) -> Option<PathInfo> {
        self.path_leaving(from, to, Some(first))
    }

    fn path_leaving(&self, from: &str, to: &str, first: Option<usize>) -> Option<PathInfo> {
        let t = self.topology;
        // Dijkstra on (links, delay); hosts do not forward.
        let mut best: HashMap<&str, Reached<'_>> = HashMap::new();
        let mut frontier: BTreeSet<(usize, Duration, &str)> = BTreeSet::new();
        best.insert(from, (0, Duration::ZERO, None));
        frontier.insert((0, Duration::ZERO, from));
        while let Some(cur) = frontier.pop_first() {
            let (hops, delay, node) = cur;
            if node == to {
                break;
            }
            if node != from && t.nodes.get(node) == Some(&Kind::Host) {
                continue;
            }
            for &(li, next) in self.adjacency.get(node).into_iter().flatten() {
                if node == from && first.is_some_and(|f| f != li) {
                    continue;
                }
                let l = &t.links[li];
                let d = if l.a == node {
                    l.a_to_b.delay
                } else {
                    l.b_to_a.delay
                };
                let cand = (hops + 1, delay + d);
                let better = best
                    .get(next)
                    .is_none_or(|&(h, dd, _)| (cand.0, cand.1) < (h, dd));
                if better {
                    best.insert(next, (cand.0, cand.1, Some((li, node))));
                    frontier.insert((cand.0, cand.1, next));
                }
            }
        }
        best.get(to)?;
        let mut nodes = vec![to.to_string()];
        let mut hops = Vec::new();
        let mut at = to;
        while let Some(&(_, _, Some((li, prev)))) = best.get(at) {
            hops.push(Hop {
                link: li,
                forward: t.links[li].a == prev,
            });
            nodes.push(prev.to_string());
            at = prev;
        }
        nodes.reverse();
        hops.reverse();
        let there: Duration = hops.iter().map(|h| self.shape(h).delay).sum();
        let back: Duration = hops
            .iter()
            .map(|h| {
                let l = &t.links[h.link];
                if h.forward {
                    l.b_to_a.delay
                } else {
                    l.a_to_b.delay
                }
            })
            .sum();
        // Each crossing of a shared medium's air, there and back, by a small packet.
        let air: Duration = hops.iter().map(|h| self.air_latency(h)).sum();
        let bottleneck_bps = self.bottleneck(&hops);
        // A relayed flow's two queues on the air drain at the flow's rate, not at each
        // hop's alone.
        let relayed = self.relayed(&hops);
        let queue_delay = hops
            .iter()
            .filter_map(|h| {
                let s = self.shape(h);
                let rate = match (&t.links[h.link].medium, relayed) {
                    (Some(m), Some((on, bps))) if m == on => bps,
                    _ => s.rate_bps?,
                };
                let bytes = queue_limit_bytes(&s) as f64;
                Some(Duration::from_secs_f64(bytes * 8.0 / rate as f64))
            })
            .sum::<Duration>()
            + self.air_waits(&hops);
        // The slowest link's own queue (the first of equals), drained at its rate; where
        // the bottleneck is a medium's hops together, the deepest of their queues.
        let queue_of = |s: Shape| {
            let bytes = queue_limit_bytes(&s) as f64;
            Some(Duration::from_secs_f64(bytes * 8.0 / s.rate_bps? as f64))
        };
        let bottleneck_queue_delay = hops
            .iter()
            .map(|h| self.shape(h))
            .filter(|s| s.rate_bps.is_some() && s.rate_bps == bottleneck_bps)
            .find_map(queue_of)
            .or_else(|| {
                hops.iter()
                    .filter(|h| t.links[h.link].medium.is_some())
                    .filter_map(|h| queue_of(self.shape(h)))
                    .max()
            })
            .unwrap_or_default();
        let kept: f64 = hops.iter().map(|h| 1.0 - self.shape(h).loss).product();
        let rate_ceiling_bps = self.ceiling(&hops);
        let rate_floor_bps = self.floor(&hops);
        let busy_stations = hops
            .iter()
            .filter_map(|h| t.station_of(&t.links[h.link]))
            .map(|(m, _)| (m.name.as_str(), m.busy_count()))
            .collect::<BTreeMap<_, _>>()
            .values()
            .sum();
        let on_air = hops.iter().any(|h| t.links[h.link].medium.is_some());
        Some(PathInfo {
            nodes,
            hops,
            rtt: there + back + air,
            bottleneck_bps,
            queue_delay,
            bottleneck_queue_delay,
            loss: 1.0 - kept,
            rate_ceiling_bps,
            rate_floor_bps,
            busy_stations,
            on_air,
        })
    }

    /// The slowest of `hops`' rates, where the hops a path makes on one shared medium
    /// (a station to its access point, then to another station) count as one, at the
    /// rate of their air time added: 1 / (1/r₁ + 1/r₂).
    fn bottleneck(&self, hops: &[Hop]) -> Option<u64> {
        self.slowest(hops, |h| self.shape(h).rate_bps)
    }

    /// [`Plan::bottleneck`] with the two hops a path makes on one shared medium at the
    /// relayed flow's rate ([`Plan::relayed`]), [`PathInfo::rate_floor_bps`]; `None` on a
    /// path that is not relayed so.
    fn floor(&self, hops: &[Hop]) -> Option<u64> {
        let (medium, bps) = self.relayed(hops)?;
        let on = |legs: &[&Hop]| {
            legs.first()
                .is_some_and(|h| self.topology.links[h.link].medium.as_deref() == Some(medium))
        };
        self.slowest_with(
            hops,
            |h| self.shape(h).rate_bps,
            |legs| on(legs).then_some(bps),
        )
    }

    /// Where `hops` cross one shared medium twice (a station to its access point, then
    /// to another station), the medium's name and what one TCP flow relayed so carries
    /// ([`crate::medium::Preset::tcp_relayed_bps`]: both legs' air times and the two busy
    /// senders' contention).
    fn relayed(&self, hops: &[Hop]) -> Option<(&'a str, u64)> {
        let t = self.topology;
        let on_air: Vec<&Hop> = hops
            .iter()
            .filter(|h| t.links[h.link].medium.is_some())
            .collect();
        let [there, on] = on_air[..] else {
            return None;
        };
        if !there.forward || on.forward {
            return None;
        }
        let (m, from) = t.station_of(&t.links[there.link])?;
        let (m_on, to) = t.station_of(&t.links[on.link])?;
        // Among busy stations the hops' rates (each among them) are the floor.
        if m.name != m_on.name || m.busy_count() > 0 {
            return None;
        }
        let p = m.preset();
        let (from_up, from_down, to_up, to_down) = (
            p.rate(from.up_bps),
            p.rate(from.down_bps),
            p.rate(to.up_bps),
            p.rate(to.down_bps),
        );
        let bps = p.tcp_relayed_bps([&from_up, &from_down], [&to_up, &to_down], 1448);
        Some((m.name.as_str(), bps as u64))
    }

    /// How long a small packet (100 bytes, an echo) takes across hop `h` of a shared
    /// medium's air and back, idle ([`crate::medium::Preset::latency_ns`]); zero for a
    /// link's hop.
    fn air_latency(&self, h: &Hop) -> Duration {
        let t = self.topology;
        let Some((m, s)) = t.station_of(&t.links[h.link]) else {
            return Duration::ZERO;
        };
        let p = m.preset();
        let ns = p.latency_ns(&p.rate(s.up_bps), 100) + p.latency_ns(&p.rate(s.down_bps), 100);
        Duration::from_nanos(ns)
    }

    /// What waiting for a shared medium's air may add to a round trip across `hops`: on
    /// each hop on a medium, there and back, another sender's fullest transmission.
    fn air_waits(&self, hops: &[Hop]) -> Duration {
        let t = self.topology;
        hops.iter()
            .filter_map(|h| Some(2 * t.station_of(&t.links[h.link])?.0.air_wait()))
            .sum()
    }

    /// [`Plan::bottleneck`] with each hop on a shared medium at the payload rate of TCP
    /// segments alone on the air, without acknowledgements ([`PathInfo::rate_ceiling_bps`]).
    fn ceiling(&self, hops: &[Hop]) -> Option<u64> {
        let t = self.topology;
        let on_air = |h: &Hop| -> Option<u64> {
            let (m, s) = t.station_of(&t.links[h.link])?;
            let p = m.preset();
            let bps = if h.forward { s.up_bps } else { s.down_bps };
            // One sender among the busy stations, if any: a transmission each a round.
            let mut senders = vec![p.rate(bps)];
            senders.extend(m.busy_rates());
            Some((p.busy_shares(&senders, 1500)[0] * 1448.0 / 1500.0) as u64)
        };
        if !hops.iter().any(|h| t.links[h.link].medium.is_some()) {
            return None;
        }
        self.slowest(hops, |h| on_air(h).or(self.shape(h).rate_bps))
    }

    /// The slowest of `hops` at the rates `rate` gives, a shared medium's hops counted
    /// together at the rate of their air times added: 1 / (1/r₁ + 1/r₂).
    fn slowest(&self, hops: &[Hop], rate: impl Fn(&Hop) -> Option<u64>) -> Option<u64> {
        self.slowest_with(hops, rate, |_| None)
    }

    /// [`Plan::slowest`], where `together` may give a medium's hops' rate as one (from
    /// the hops in the path's order), else their air times add up.
    fn slowest_with(
        &self,
        hops: &[Hop],
        rate: impl Fn(&Hop) -> Option<u64>,
        mut together: impl FnMut(&[&Hop]) -> Option<u64>,
    ) -> Option<u64> {
        let mut rates: Vec<u64> = Vec::new();
        let mut air: BTreeMap<&str, (f64, Vec<&Hop>)> = BTreeMap::new();
        for h in hops {
            let Some(r) = rate(h) else {
                continue;
            };
            match &self.topology.links[h.link].medium {
                Some(m) => {
                    let (inverse, legs) = air.entry(m.as_str()).or_default();
                    *inverse += 1.0 / r as f64;
                    legs.push(h);
                }
                None => rates.push(r),
            }
        }
        rates.extend(
            air.values()
                .map(|(inverse, legs)| together(legs).unwrap_or((1.0 / inverse).round() as u64)),
        );
        rates.into_iter().min()
    }

    /// The shape of a hop in its direction of travel.
    pub fn shape(&self, h: &Hop) -> Shape {
        let l = &self.topology.links[h.link];
        if h.forward { l.a_to_b } else { l.b_to_a }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The line (from 1) of `text` that starts with `needle`.
    fn line_of(text: &str, needle: &str) -> usize {
        text.lines()
            .position(|l| l.trim_start().starts_with(needle))
            .unwrap()
            + 1
    }

    const SMALL: &str = r#"
        name = "t"
        hosts = ["h1", "h2"]
        routers = ["r1", "r2"]
        [[link]]
        ends = ["h1", "r1"]
        [[link]]
        name = "wan"
        ends = ["r1", "r2"]
        rate = "30M"
        delay = "20ms"
        queue = 100
        reverse = { rate = "10M", delay = "5ms" }
        [[link]]
        ends = ["r2", "h2"]
    "#;

    #[test]
    fn parses_links_with_per_direction_properties() {
        let t = Topology::parse(SMALL).unwrap();
        let wan = &t.links[1];
        assert_eq!(wan.a_to_b.rate_bps, Some(30_000_000));
        assert_eq!(wan.b_to_a.rate_bps, Some(10_000_000));
        assert_eq!(wan.b_to_a.delay, Duration::from_millis(5));
        assert_eq!(
            wan.b_to_a.queue_packets,
            Some(100),
            "reverse inherits the rest"
        );
        assert!(t.links[0].a_to_b.is_plain());
        let plan = Plan::of(&t);
        let p = plan.path("h1", "h2").unwrap();
        assert_eq!(p.nodes, ["h1", "r1", "r2", "h2"]);
        assert_eq!(p.rtt, Duration::from_millis(25));
        assert_eq!(p.bottleneck_bps, Some(30_000_000));
        let back = plan.path("h2", "h1").unwrap();
        assert_eq!(back.bottleneck_bps, Some(10_000_000));
        assert_eq!(plan.segments.len(), 3);
        assert_eq!(
            plan.segments[1].members[0],
            ("r1".to_string(), [10, 0, 2, 1])
        );
    }

    #[test]
    fn set_link_changes_one_property_both_ways_and_refuses_what_the_file_would() {
        let mut t = Topology::parse(SMALL).unwrap();
        t.set_link("wan", "rate", "100M").unwrap();
        t.set_link("wan", "loss", "0.01").unwrap();
        let wan = &t.links[1];
        assert_eq!(wan.a_to_b.rate_bps, Some(100_000_000));
        assert_eq!(wan.b_to_a.rate_bps, Some(100_000_000));
        assert_eq!(wan.a_to_b.loss, 0.01);
        // The rest stays as the file had it, each way.
        assert_eq!(wan.a_to_b.delay, Duration::from_millis(20));
        assert_eq!(wan.b_to_a.delay, Duration::from_millis(5));
        assert_eq!(wan.a_to_b.queue_packets, Some(100));
        t.set_link("wan", "queue_bytes", "30000").unwrap();
        assert_eq!(
            (
                t.links[1].a_to_b.queue_packets,
                t.links[1].a_to_b.queue_bytes
            ),
            (None, Some(30000))
        );
        for (link, key, value, message) in [
            (
                "lan",
                "rate",
                "1M",
                "topology t has no link 'lan' (it has: link 1, wan, link 3)",
            ),
            (
                "wan",
                "mtu",
                "9000",
                "wan: 'mtu' is not a link property (rate, delay, jitter, loss, queue, queue_bytes)",
            ),
            ("wan", "rate", "0", "wan: rate must be more than 0"),
            ("wan", "loss", "2%", "wan: loss '2%' is not a fraction"),
            (
                "wan",
                "queue",
                "many",
                "wan: queue 'many' is not a packet count",
            ),
            (
                "wan",
                "jitter",
                "30ms",
                "wan: jitter is larger than the delay",
            ),
        ] {
            let e = Topology::parse(SMALL)
                .unwrap()
                .set_link(link, key, value)
                .unwrap_err();
            assert_eq!(e.message, message, "{link} {key} {value}");
        }
    }

    /// SMALL with a schedule on wan: `extra` goes into the wan link, `steps` after it.
    fn scheduled(extra: &str, steps: &str) -> String {
        SMALL.replace(
            "reverse = { rate = \"10M\", delay = \"5ms\" }\n",
            &format!("reverse = {{ rate = \"10M\", delay = \"5ms\" }}\n{extra}\n{steps}\n"),
        )
    }

    #[test]
    fn a_schedule_changes_a_link_step_by_step_and_round_by_round() {
        let text = scheduled(
            "schedule_repeat = \"10s\"",
            "[[link.schedule]]\nat = \"6s\"\nrate = \"50M\"\n\
             [[link.schedule]]\nat = \"2s\"\nrate = \"5M\"\ndelay = \"2ms\"\njitter = \"1ms\"\n",
        );
        let t = Topology::parse(&text).unwrap();
        let wan = &t.links[1];
        // In time order, whatever the file's.
        let ats: Vec<f64> = wan
            .schedule
            .steps
            .iter()
            .map(|s| s.at.as_secs_f64())
            .collect();
        assert_eq!(ats, [2.0, 6.0]);
        assert_eq!(wan.schedule.steps[0].said(), "rate=5M delay=2ms jitter=1ms");
        assert_eq!(wan.schedule.repeat, Some(Duration::from_secs(10)));
        // Step by step within a round: each step on top of the earlier ones, both ways.
        let first = wan.at_step(Some(0)).unwrap();
        assert_eq!(first.a_to_b.rate_bps, Some(5_000_000));
        assert_eq!(first.b_to_a.rate_bps, Some(5_000_000));
        assert_eq!(first.a_to_b.delay, Duration::from_millis(2));
        assert_eq!(first.a_to_b.queue_packets, Some(100), "the rest stays");
        let second = wan.at_step(Some(1)).unwrap();
        assert_eq!(second.a_to_b.rate_bps, Some(50_000_000));
        assert_eq!(
            second.a_to_b.delay,
            Duration::from_millis(2),
            "step 0's delay holds"
        );
        assert_eq!(wan.at_step(None).unwrap().a_to_b, wan.a_to_b);
        assert_eq!(wan.shapes().len(), 3);
        // Round after round: each later round starts from the link's own values.
        let moments: Vec<(f64, u64, Option<usize>)> = wan
            .schedule
            .moments()
            .take(7)
            .map(|m| (m.at.as_secs_f64(), m.round, m.step))
            .collect();
        assert_eq!(
            moments,
            [
                (2.0, 0, Some(0)),
                (6.0, 0, Some(1)),
                (10.0, 1, None),
                (12.0, 1, Some(0)),
                (16.0, 1, Some(1)),
                (20.0, 2, None),
                (22.0, 2, Some(0)),
            ]
        );
        // A step at 0 begins each round itself; without repeat the moments end.
        let text = scheduled(
            "schedule_repeat = \"4s\"",
            "[[link.schedule]]\nat = \"0s\"\nloss = 0.01\n[[link.schedule]]\nat = \"1s\"\nloss = 0\n",
        );
        let t = Topology::parse(&text).unwrap();
        let at: Vec<f64> = t.links[1]
            .schedule
            .moments()
            .take(4)
            .map(|m| m.at.as_secs_f64())
            .collect();
        assert_eq!(at, [0.0, 1.0, 4.0, 5.0]);
        // A step's reverse changes b → a alone, over what the step sets both ways.
        let text = scheduled(
            "",
            "[[link.schedule]]\nat = \"1s\"\nrate = \"150M\"\nreverse = { rate = \"600M\" }\n\
             [[link.schedule]]\nat = \"2s\"\nreverse = { delay = \"1ms\" }\n",
        );
        let t = Topology::parse(&text).unwrap();
        let wan = &t.links[1];
        assert_eq!(
            wan.schedule.steps[0].said(),
            "rate=150M (reverse rate=600M)"
        );
        assert_eq!(wan.schedule.steps[1].said(), "reverse delay=1ms");
        let l = wan.at_step(Some(1)).unwrap();
        assert_eq!(l.a_to_b.rate_bps, Some(150_000_000));
        assert_eq!(l.b_to_a.rate_bps, Some(600_000_000));
        assert_eq!(l.a_to_b.delay, Duration::from_millis(20), "a → b as it was");
        assert_eq!(l.b_to_a.delay, Duration::from_millis(1));
        let once = Topology::parse(&scheduled(
            "",
            "[[link.schedule]]\nat = \"1s\"\nrate = \"1M\"\n",
        ))
        .unwrap();
        assert_eq!(once.links[1].schedule.moments().count(), 1);
        assert!(t.links[0].schedule.is_empty());
    }

    const WLAN: &str = r#"
name = "w"
hosts = ["a", "b", "srv"]
routers = ["ap"]
[[link]]
ends = ["srv", "ap"]
[[medium]]
name = "wlan"
ap = "ap"
standard = "802.11n"
[[medium.station]]
host = "a"
rate = "300M"
[[medium.station]]
host = "b"
rate = "65M"
down_rate = "130M"
"#;

    #[test]
    fn a_medium_gives_each_station_a_hop_at_the_rates_its_air_allows() {
        let t = Topology::parse(WLAN).unwrap();
        assert_eq!(t.media.len(), 1);
        let m = &t.media[0];
        assert_eq!(
            (m.ap.as_str(), m.fairness, m.queue),
            ("ap", Fairness::Frames, 1000)
        );
        let hop = &t.links[t.link_index("wlan.b").unwrap()];
        assert_eq!((hop.a.as_str(), hop.b.as_str()), ("b", "ap"));
        assert_eq!(hop.medium.as_deref(), Some("wlan"));
        // Each way, a TCP flow's rate alone on the air.
        let p = crate::medium::Preset::N;
        let (up, down) = (p.rate(65_000_000), p.rate(130_000_000));
        assert_eq!(
            hop.a_to_b.rate_bps,
            Some(p.tcp_alone_bps(&up, &down, 1448) as u64)
        );
        assert_eq!(
            hop.b_to_a.rate_bps,
            Some(p.tcp_alone_bps(&down, &up, 1448) as u64)
        );
        // Station to station crosses the air twice: the two hops' air times add up.
        let plan = Plan::of(&t);
        let path = plan.path("a", "b").unwrap();
        let ab = path.bottleneck_bps.unwrap() as f64;
        let r1 = t.links[t.link_index("wlan.a").unwrap()]
            .a_to_b
            .rate_bps
            .unwrap() as f64;
        let r2 = hop.b_to_a.rate_bps.unwrap() as f64;
        assert!((ab - 1.0 / (1.0 / r1 + 1.0 / r2)).abs() < 1.0, "{ab}");
        // Its floor: the flow relayed by the access point, the sender and the access
        // point contending for every transmission; each way at its own stations' rates.
        let a = p.rate(300_000_000);
        let relayed = |from: [&crate::medium::Rate; 2], to: [&crate::medium::Rate; 2]| {
            p.tcp_relayed_bps(from, to, 1448) as u64
        };
        assert_eq!(path.rate_floor_bps, Some(relayed([&a, &a], [&up, &down])));
        assert!(path.rate_floor_bps.unwrap() < ab as u64);
        let ba = plan.path("b", "a").unwrap();
        assert_eq!(ba.rate_floor_bps, Some(relayed([&up, &down], [&a, &a])));
        // Its queues on the air drain at the relayed flow's rate.
        let floor = path.rate_floor_bps.unwrap() as f64;
        let queues: Duration = path
            .hops
            .iter()
            .map(|h| {
                Duration::from_secs_f64(queue_limit_bytes(&plan.shape(h)) as f64 * 8.0 / floor)
            })
            .sum();
        assert_eq!(path.queue_delay, queues + plan.air_waits(&path.hops));
        // One hop on the air, or none: no floor but the bottleneck.
        assert_eq!(plan.path("a", "srv").map(|p| p.rate_floor_bps), Some(None));
        // net show lists the medium, not its hops as links.
        let summary = plan.summary();
        assert!(summary.shaped.is_empty(), "{:?}", summary.shaped);
        assert_eq!(summary.media[0].stations.len(), 2);
    }

    #[test]
    fn busy_stations_take_their_share_of_the_air_from_every_station() {
        let text = WLAN.replacen(
            "standard = \"802.11n\"",
            "standard = \"802.11n\"\nbusy_stations = 3\nbusy_rate = \"65M\"",
            1,
        );
        let t = Topology::parse(&text).unwrap();
        let m = &t.media[0];
        assert_eq!(
            m.busy,
            Some(Busy {
                count: 3,
                rate_bps: 65_000_000
            })
        );
        let p = crate::medium::Preset::N;
        let others = vec![p.rate(65_000_000); 3];
        let (a, b_up, b_down) = (p.rate(300_000_000), p.rate(65_000_000), p.rate(130_000_000));
        // Each hop's TCP among them, below its rate alone.
        let hop = &t.links[t.link_index("wlan.b").unwrap()];
        let among = p.tcp_among_bps(&b_up, &b_down, 1448, &others);
        assert_eq!(hop.a_to_b.rate_bps, Some(among as u64));
        assert!(among < p.tcp_alone_bps(&b_up, &b_down, 1448));
        // All busy: five senders up, the busy ones among them.
        let e = m.expected();
        let mut senders = vec![a, b_up];
        senders.extend(&others);
        let shares = p.busy_shares(&senders, 1500);
        assert_eq!((e[0].busy_up_bps, e[1].busy_up_bps), (shares[0], shares[1]));
        let summary = m.summary();
        let busy = summary.busy.expect("busy stations in the summary");
        assert_eq!(
            (busy.count, busy.phy_bps, busy.busy_up_bps),
            (3, 65_000_000, shares[2])
        );
        // A path across the air: RTTs not judged, no relayed floor (each hop's rate is
        // among the busy stations already).
        let plan = Plan::of(&t);
        let ab = plan.path("a", "b").unwrap();
        assert_eq!((ab.busy_stations, ab.rate_floor_bps), (3, None));
        assert_eq!(plan.path("a", "srv").unwrap().busy_stations, 3);
        // A study sets them per cell; none is as the file without them.
        let mut u = t.clone();
        u.set_medium("wlan", "busy_stations", "0").unwrap();
        let plain = Topology::parse(WLAN).unwrap();
        assert_eq!(u.links, plain.links);
        u.set_medium("wlan", "busy_rate", "13M").unwrap();
        u.set_medium("wlan", "busy_stations", "1").unwrap();
        assert_eq!(
            u.media[0].busy,
            Some(Busy {
                count: 1,
                rate_bps: 13_000_000
            })
        );
        for (key, value, want) in [
            (
                "busy_stations",
                "63",
                "medium wlan: busy_stations '63' must be 0 to 62",
            ),
            (
                "busy_stations",
                "x",
                "medium wlan: busy_stations 'x' must be 0 to 62",
            ),
            (
                "busy_rate",
                "1G",
                "medium wlan: busy_rate '1G': 802.11n PHY rates run",
            ),
            (
                "queue",
                "5",
                "medium wlan: 'queue' is not a property a study sets",
            ),
        ] {
            let e = u.set_medium("wlan", key, value).unwrap_err();
            assert!(e.message.starts_with(want), "{e}");
        }
        let e = u.set_medium("lan", "busy_stations", "1").unwrap_err();
        assert_eq!(e.message, "no medium 'lan' (the topology has: wlan)");
        let mut v = Topology::parse(WLAN).unwrap();
        let e = v.set_medium("wlan", "busy_stations", "2").unwrap_err();
        assert!(e.message.contains("busy_stations needs busy_rate"), "{e}");
    }

    #[test]
    fn a_bad_medium_is_refused_at_its_line_with_the_reason() {
        for (from, to, want) in [
            (
                "standard = \"802.11n\"",
                "standard = \"802.11x\"",
                "medium wlan: standard '802.11x' is not one of 802.11b, 802.11a, 802.11g, 802.11n, 802.11ac",
            ),
            (
                "ap = \"ap\"",
                "ap = \"srv\"",
                "medium wlan: its access point 'srv' must be a router",
            ),
            (
                "ap = \"ap\"",
                "ap = \"nope\"",
                "medium wlan: unknown node 'nope'",
            ),
            (
                "host = \"a\"",
                "host = \"ap\"",
                "medium wlan: station 'ap' must be a host",
            ),
            (
                "host = \"b\"",
                "host = \"srv\"",
                "medium wlan: 'srv' and 'ap' are already linked",
            ),
            (
                "rate = \"300M\"",
                "rate = \"900M\"",
                "medium wlan: station a: rate '900M': 802.11n PHY rates run from 1 Mbit/s to 600 Mbit/s",
            ),
            (
                "down_rate = \"130M\"",
                "down_rate = \"fast\"",
                "medium wlan: station b: rate 'fast'",
            ),
            (
                "standard = \"802.11n\"",
                "standard = \"802.11n\"\nfairness = \"fair\"",
                "medium wlan: fairness 'fair' is not frames or airtime",
            ),
            (
                "standard = \"802.11n\"",
                "standard = \"802.11n\"\nqueue = 0",
                "medium wlan: queue 0 must be 1 to 100000 frames",
            ),
            (
                "standard = \"802.11n\"",
                "standard = \"802.11n\"\nbusy_stations = 2",
                "medium wlan: busy_stations needs busy_rate, their PHY rate",
            ),
            (
                "standard = \"802.11n\"",
                "standard = \"802.11n\"\nbusy_rate = \"65M\"\nbusy_stations = 63",
                "medium wlan: busy_stations 63 must be 0 to 62 (a medium has at most 64 stations",
            ),
            (
                "standard = \"802.11n\"",
                "standard = \"802.11n\"\nbusy_stations = 1\nbusy_rate = \"1G\"",
                "medium wlan: busy_rate '1G': 802.11n PHY rates run from 1 Mbit/s to 600 Mbit/s",
            ),
        ] {
            let text = WLAN.replacen(from, to, 1);
            let e = Topology::parse(&text).unwrap_err();
            let needle = to.lines().last().unwrap();
            assert_eq!(e.at.map(|(l, _)| l), Some(line_of(&text, needle)), "{e}");
            assert!(e.message.starts_with(want), "{e}");
        }
        // A station with a link of its own beside its hop is multi-homed (a phone's
        // Wi-Fi and cellular), as is srv, now on two links.
        let text = format!("{WLAN}[[link]]\nends = [\"a\", \"srv\"]\n");
        assert_eq!(Topology::parse(&text).unwrap().multi_homed(), ["a", "srv"]);
        let text = WLAN
            .replace(
                "[[medium.station]]\nhost = \"b\"\nrate = \"65M\"\ndown_rate = \"130M\"\n",
                "",
            )
            .replace("[[medium.station]]\nhost = \"a\"\nrate = \"300M\"\n", "");
        let e = Topology::parse(&text).unwrap_err();
        assert!(
            e.message.contains("medium wlan has no [[medium.station]]"),
            "{e}"
        );
    }

    #[test]
    fn a_bad_schedule_is_refused_at_its_line_with_the_reason() {
        // Line (1-based) of the first line that begins with `needle`.
        for (extra, steps, needle, want) in [
            (
                "",
                "[[link.schedule]]\nat = \"3s\"\njitter = \"30ms\"\n",
                "at = \"3s\"",
                "schedule step at 3 s: wan: jitter is larger than the delay",
            ),
            (
                "",
                "[[link.schedule]]\nat = \"soon\"\nrate = \"1M\"\n",
                "at = \"soon\"",
                "wan: schedule step at 'soon': 'soon' is not a duration",
            ),
            (
                "",
                "[[link.schedule]]\nat = \"-1s\"\nrate = \"1M\"\n",
                "at = \"-1s\"",
                "cannot be negative",
            ),
            (
                "",
                "[[link.schedule]]\nat = \"1s\"\n",
                "at = \"1s\"",
                "wan: the schedule step at 1s changes nothing",
            ),
            (
                "",
                "[[link.schedule]]\nat = \"2s\"\nqueue_policy = \"codel\"\n",
                "at = \"2s\"",
                "wan: a schedule step changes no queue_policy",
            ),
            (
                "",
                "[[link.schedule]]\nat = \"1s\"\nrate = \"1M\"\n[[link.schedule]]\nat = \"1000ms\"\nrate = \"2M\"\n",
                "at = \"1000ms\"",
                "wan: two schedule steps at 1 s",
            ),
            (
                "schedule_repeat = \"2s\"",
                "[[link.schedule]]\nat = \"2s\"\nrate = \"1M\"\n",
                "at = \"2s\"",
                "is not before schedule_repeat (2 s)",
            ),
            (
                "schedule_repeat = \"2s\"",
                "",
                "schedule_repeat",
                "wan: schedule_repeat without a [[link.schedule]] step",
            ),
            (
                "",
                "[[link.schedule]]\nat = \"1s\"\nrate = \"0\"\n",
                "at = \"1s\"",
                "wan: rate must be more than 0",
            ),
            (
                "",
                "[[link.schedule]]\nat = \"1s\"\ntrace = \"x.trace\"\n",
                "at = \"1s\"",
                "wan: a schedule step changes no trace",
            ),
        ] {
            let text = scheduled(extra, steps);
            let e = Topology::parse(&text).unwrap_err();
            assert!(e.message.contains(want), "wanted '{want}' in: {e}");
            assert_eq!(
                e.at.map(|(l, _)| l),
                Some(line_of(&text, needle)),
                "{e}\n{text}"
            );
        }
        // A misspelt key in a step is pointed at, with the key meant.
        let text = scheduled("", "[[link.schedule]]\nat = \"1s\"\nrtae = \"1M\"\n");
        let e = Topology::parse(&text).unwrap_err();
        assert!(e.message.ends_with("did you mean `rate`?"), "{e}");
        assert_eq!(e.at.map(|(l, _)| l), Some(line_of(&text, "rtae")));
    }

    /// A station's schedule changes its PHY rates: its steps in time order, what each
    /// sets as `net set` takes it (the station's own rates first), listed by `net show`;
    /// a bad step is refused at its line.
    #[test]
    fn a_stations_schedule_sets_its_rates_step_by_step() {
        let air = |steps: &str| {
            format!(
                "name = \"t\"\nhosts = [\"s\", \"h\"]\nrouters = [\"ap\"]\n\
                 [[link]]\nends = [\"h\", \"ap\"]\n\
                 [[medium]]\nname = \"w\"\nap = \"ap\"\nstandard = \"802.11g\"\n\
                 [[medium.station]]\nhost = \"s\"\nrate = \"54M\"\nschedule_repeat = \"10s\"\n{steps}"
            )
        };
        let t = Topology::parse(&air(
            "[[medium.station.schedule]]\nat = \"6s\"\nrate = \"54M\"\n\
             [[medium.station.schedule]]\nat = \"2s\"\nrate = \"6M\"\ndown_rate = \"12M\"\n",
        ))
        .expect("parses");
        let hop = t.links.iter().find(|l| l.name == "w.s").expect("the hop");
        let said: Vec<String> = hop.schedule.steps.iter().map(Step::said).collect();
        assert_eq!(said, ["rate=6M down_rate=12M", "rate=54M"]);
        assert_eq!(hop.schedule.repeat, Some(Duration::from_secs(10)));
        let pairs = |step| {
            t.station_at(hop, step)
                .expect("a station")
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(pairs(None), "rate=54000000 down_rate=54000000");
        assert_eq!(
            pairs(Some(0)),
            "rate=54000000 down_rate=54000000 rate=6M down_rate=12M"
        );
        assert_eq!(t.station_at(&t.links[0], None), None);
        // Its hop's shapes are its air's, whatever the steps.
        assert_eq!(hop.shapes().len(), 1);
        assert_eq!(Plan::of(&t).summary().schedules[0].link, "w.s");
        for (steps, needle, want) in [
            (
                "[[medium.station.schedule]]\nat = \"1s\"\ndelay = \"5ms\"\n",
                "delay",
                "unknown field `delay`",
            ),
            (
                "[[medium.station.schedule]]\nat = \"1s\"\nrate = \"100M\"\n",
                "rate = \"100M\"",
                "medium w: station s: rate '100M': 802.11g PHY rates run from 1 Mbit/s to 54 Mbit/s",
            ),
            (
                "[[medium.station.schedule]]\nat = \"1s\"\n",
                "at = \"1s\"",
                "w.s: the schedule step at 1s changes nothing: give it rate or down_rate",
            ),
            (
                "[[medium.station.schedule]]\nat = \"12s\"\nrate = \"6M\"\n",
                "at = \"12s\"",
                "is not before schedule_repeat (10 s)",
            ),
        ] {
            let text = air(steps);
            let e = Topology::parse(&text).unwrap_err();
            assert!(e.message.contains(want), "wanted '{want}' in: {e}");
            assert_eq!(
                e.at.map(|(l, _)| l),
                Some(line_of(&text, needle)),
                "{e}\n{text}"
            );
        }
    }

    /// A study's `[[link]]` `schedule`: steps in one string, as `net set` takes them, in
    /// time order whatever the order given, with `repeat`; `none` takes a schedule away;
    /// each step checked as the file's are, on a link and on a station's hop.
    #[test]
    fn a_schedule_given_in_one_string_is_the_files() {
        let mut t = Topology::parse(SMALL).unwrap();
        t.set_schedule("wan", "5s rate=50M; 2s rate=10M delay=40ms; repeat 20s")
            .expect("a schedule");
        let wan = &t.links[1];
        let said: Vec<String> = wan.schedule.steps.iter().map(Step::said).collect();
        assert_eq!(said, ["rate=10M delay=40ms", "rate=50M"]);
        assert_eq!(wan.schedule.steps[0].at, Duration::from_secs(2));
        assert_eq!(wan.schedule.repeat, Some(Duration::from_secs(20)));
        assert_eq!(
            wan.at_step(Some(0)).unwrap().a_to_b.delay,
            Duration::from_millis(40)
        );
        t.set_schedule("wan", "none").expect("none");
        assert!(t.links[1].schedule.is_empty());
        for (text, want) in [
            (
                "2s rate",
                "wan: schedule step at 2s: 'rate' is not KEY=VALUE",
            ),
            (
                "2s mtu=1400",
                "schedule step at 2 s: wan: 'mtu' is not a link property",
            ),
            (
                "2s jitter=30ms",
                "schedule step at 2 s: wan: jitter is larger than the delay",
            ),
            (
                "soon rate=1M",
                "wan: schedule step at 'soon': 'soon' is not a duration",
            ),
            ("2s rate=1M;", "wan: schedule '2s rate=1M;': an empty step"),
            (
                "25s rate=1M; repeat 20s",
                "wan: the schedule step at 25s is not before schedule_repeat (20 s)",
            ),
            (
                "2s",
                "wan: the schedule step at 2s changes nothing: give it rate, delay",
            ),
        ] {
            let e = t.set_schedule("wan", text).unwrap_err();
            assert!(e.message.contains(want), "{text}: wanted '{want}' in: {e}");
            assert!(e.at.is_none(), "no line in a study's string: {e}");
        }
        let e = t.set_schedule("lan", "1s rate=1M").unwrap_err();
        assert!(e.message.contains("no link 'lan'"), "{e}");
        // A station's hop: its rates.
        let mut air = Topology::parse(
            "name = \"t\"\nhosts = [\"s\", \"h\"]\nrouters = [\"ap\"]\n\
             [[link]]\nends = [\"h\", \"ap\"]\n\
             [[medium]]\nname = \"w\"\nap = \"ap\"\nstandard = \"802.11g\"\n\
             [[medium.station]]\nhost = \"s\"\nrate = \"54M\"\n",
        )
        .unwrap();
        air.set_schedule("w.s", "3s rate=6M down_rate=12M")
            .expect("rates");
        let hop = air.links.iter().find(|l| l.name == "w.s").unwrap();
        assert_eq!(
            air.station_at(hop, Some(0)).unwrap().last().unwrap(),
            &("down_rate".to_string(), "12M".to_string())
        );
        for (text, want) in [
            (
                "3s delay=5ms",
                "w.s: 'delay' is not a station's property (rate, down_rate)",
            ),
            (
                "3s rate=100M",
                "802.11g PHY rates run from 1 Mbit/s to 54 Mbit/s",
            ),
            ("3s", "changes nothing: give it rate or down_rate"),
        ] {
            let e = air.set_schedule("w.s", text).unwrap_err();
            assert!(e.message.contains(want), "{text}: wanted '{want}' in: {e}");
        }
    }

    /// A reader of in-memory trace files, for [`Topology::parse_with`].
    fn files<'a>(
        files: &'a [(&'a str, &'a str)],
    ) -> impl Fn(&str) -> Result<(std::path::PathBuf, String), String> + 'a {
        move |name| {
            files
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(n, text)| {
                    (
                        std::path::PathBuf::from(format!("/t/{n}")),
                        text.to_string(),
                    )
                })
                .ok_or_else(|| format!("/t/{name}: No such file or directory"))
        }
    }

    #[test]
    fn a_link_follows_its_traces_each_way_at_their_mean_rate() {
        // 1 opportunity a ms: 12 Mbit/s; 1 every 2 ms: 6 Mbit/s.
        let steady: String = (1..=10).map(|i| format!("{i}\n")).collect();
        let slow: String = (1..=5).map(|i| format!("{}\n", 2 * i)).collect();
        let traces = [("down.tr", steady.as_str()), ("up.tr", slow.as_str())];
        let read = files(&traces);
        let with = |props: &str| {
            let text = SMALL.replace(
                "rate = \"30M\"\n        delay = \"20ms\"\n        queue = 100\n        reverse = { rate = \"10M\", delay = \"5ms\" }",
                props,
            );
            Topology::parse_with(&text, &read)
        };
        let t =
            with("trace = \"down.tr\"\ndelay = \"5ms\"\nreverse = { trace = \"up.tr\" }").unwrap();
        let wan = &t.links[1];
        assert!(wan.follows_a_trace());
        assert_eq!(wan.a_to_b.rate_bps, Some(12_000_000));
        assert_eq!(wan.b_to_a.rate_bps, Some(6_000_000));
        assert_eq!(
            wan.a_to_b_trace.as_ref().unwrap().path,
            std::path::Path::new("/t/down.tr")
        );
        assert_eq!(wan.b_to_a_trace.as_ref().unwrap().name, "up.tr");
        assert_eq!(
            wan.b_to_a.delay,
            Duration::from_millis(5),
            "the rest inherited"
        );
        // The plan's bottleneck is the trace's mean.
        let plan = Plan::of(&t);
        assert_eq!(
            plan.path("h1", "h2").unwrap().bottleneck_bps,
            Some(12_000_000)
        );
        // Both ways the same trace; or a reverse of fixed rate.
        let t = with("trace = \"down.tr\"").unwrap();
        assert_eq!(t.links[1].b_to_a_trace, t.links[1].a_to_b_trace);
        let t = with("trace = \"down.tr\"\nreverse = { rate = \"1M\" }").unwrap();
        assert!(t.links[1].b_to_a_trace.is_none());
        assert_eq!(t.links[1].b_to_a.rate_bps, Some(1_000_000));
        // A trace's queue policy, b → a following a → b's unless it says its own; a
        // reverse of fixed rate has none.
        use crate::trace::QueuePolicy;
        let t = with("trace = \"down.tr\"\nqueue_policy = \"codel\"\nqueue_target = \"10ms\"\nreverse = { trace = \"up.tr\", queue_policy = \"pie\" }").unwrap();
        let wan = &t.links[1];
        assert_eq!(
            wan.a_to_b_trace.as_ref().unwrap().policy,
            QueuePolicy::codel(Some(10_000_000))
        );
        assert_eq!(
            wan.b_to_a_trace.as_ref().unwrap().policy,
            QueuePolicy::pie(None)
        );
        let t = with("trace = \"down.tr\"\nqueue_policy = \"drophead\"").unwrap();
        assert_eq!(
            t.links[1].b_to_a_trace.as_ref().unwrap().policy,
            QueuePolicy::DropHead
        );
        let t = with("trace = \"down.tr\"\nqueue_policy = \"pie\"\nreverse = { rate = \"1M\" }")
            .unwrap();
        assert!(t.links[1].b_to_a_trace.is_none());
        let shaped = Plan::of(&t).summary().shaped;
        assert_eq!(
            shaped[0].queue_policy.as_deref(),
            Some("PIE (target 15 ms, burst 150 ms)")
        );
        // Refused, naming the link, the file and the line.
        for (props, says) in [
            (
                "rate = \"5M\"\nqueue_policy = \"codel\"",
                "wan: queue_policy is for a direction that follows a trace",
            ),
            (
                "trace = \"down.tr\"\nqueue_policy = \"red\"",
                "wan: queue_policy 'red' is not droptail, drophead, codel or pie",
            ),
            (
                "trace = \"down.tr\"\nqueue_target = \"5ms\"",
                "wan: queue_target is CoDel's or PIE's: give queue_policy",
            ),
            (
                "trace = \"down.tr\"\nqueue_policy = \"drophead\"\nqueue_target = \"5ms\"",
                "wan: queue_target is CoDel's or PIE's, not drophead's",
            ),
            (
                "trace = \"down.tr\"\nreverse = { rate = \"1M\", queue_policy = \"codel\" }",
                "wan (reverse): queue_policy is for a direction that follows a trace",
            ),
            (
                "trace = \"down.tr\"\nrate = \"5M\"",
                "wan: give rate or trace, not both",
            ),
            (
                "trace = \"none.tr\"",
                "wan: trace: /t/none.tr: No such file or directory",
            ),
            (
                "trace = \"down.tr\"\n[[link.schedule]]\nat = \"1s\"\ndelay = \"1ms\"",
                "wan: a link whose capacity follows a trace has no schedule",
            ),
        ] {
            let e = with(props).unwrap_err();
            assert!(e.message.contains(says), "wanted '{says}' in: {e}");
        }
        let bad_files = [("bad.tr", "1\n2\nthree\n")];
        let bad = files(&bad_files);
        let text = SMALL.replace("rate = \"30M\"", "trace = \"bad.tr\"");
        let e = Topology::parse_with(&text, &bad).unwrap_err();
        assert_eq!(
            e.message,
            "wan: trace: /t/bad.tr: line 3: 'three' is not a time in whole milliseconds (one opportunity per line)"
        );
        // Without a file to read beside, a trace is refused; nothing else needs one.
        assert!(
            Topology::parse(&text)
                .unwrap_err()
                .message
                .contains("read beside its file")
        );
        // A study's cell sets a trace both ways, each keeping its queue policy.
        let mut t =
            with("trace = \"down.tr\"\nqueue_policy = \"codel\"\nreverse = { rate = \"1M\" }")
                .unwrap();
        t.set_trace("wan", "up.tr", &read).unwrap();
        let wan = &t.links[1];
        assert_eq!(
            (wan.a_to_b.rate_bps, wan.b_to_a.rate_bps),
            (Some(6_000_000), Some(6_000_000))
        );
        assert_eq!(
            wan.a_to_b_trace.as_ref().unwrap().policy,
            crate::trace::QueuePolicy::codel(None)
        );
        assert_eq!(
            wan.b_to_a_trace.as_ref().unwrap().policy,
            crate::trace::QueuePolicy::DropTail
        );
        let e = t.set_trace("wan", "bad.tr", &bad).unwrap_err();
        assert!(e.message.contains("line 3"), "{e}");
        // A trace is the file's, not changed live.
        let mut t = with("trace = \"down.tr\"").unwrap();
        assert!(
            t.set_link("wan", "trace", "up.tr")
                .unwrap_err()
                .message
                .contains("given in its topology file")
        );
    }

    #[test]
    fn every_mistake_gets_one_clear_line() {
        let cases = [
            (
                SMALL.replace("ends = [\"r2\", \"h2\"]", "ends = [\"r2\", \"h3\"]"),
                "unknown node 'h3'",
            ),
            (
                SMALL.replace("routers = [\"r1\", \"r2\"]", "routers = [\"r1\", \"h1\"]"),
                "node 'h1' is defined twice",
            ),
            (
                SMALL.replace("rate = \"30M\"", "rate = \"fast\""),
                "wan: rate",
            ),
            (
                SMALL.replace("rate = \"30M\"", "rate = \"0\""),
                "wan: rate must be more than 0",
            ),
            (
                SMALL.replace("delay = \"20ms\"", "delay = \"-20ms\""),
                "wan: delay -20ms is negative",
            ),
            (
                SMALL.replace("queue = 100", "queue = 0"),
                "wan: queue must be at least 1",
            ),
            (
                SMALL.replace("queue = 100", "loss = 1.5"),
                "wan: loss must be a fraction",
            ),
            (
                SMALL.replace("name = \"t\"", "name = \"much-too-long\""),
                "topology name",
            ),
            (
                SMALL.replace("queue = 100", "colour = 3"),
                "unknown field `colour`; a topology's keys: docs/net.md",
            ),
            (
                SMALL.replace("ends = [\"r2\", \"h2\"]", "ends = [\"r2\", \"r2\"]"),
                "to itself",
            ),
            (
                SMALL.replace("ends = [\"r2\", \"h2\"]", "ends = [\"r2\"]"),
                "exactly two nodes",
            ),
        ];
        for (text, want) in cases {
            let e = Topology::parse(&text).unwrap_err().to_string();
            assert!(e.contains(want), "wanted '{want}' in: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }

    /// A misspelt key is pointed at where it is written, not at its table's header, with
    /// the key meant (issue 46).
    #[test]
    fn a_misspelt_key_is_pointed_at_with_the_key_meant() {
        // Line and column (1-based) of `needle` in `text`.
        let place = |text: &str, needle: &str| {
            text.lines()
                .enumerate()
                .find_map(|(i, l)| l.find(needle).map(|c| (i + 1, c + 1)))
                .unwrap()
        };
        let text = SMALL.replace("queue = 100", "qeue = 100");
        let e = Topology::parse(&text).unwrap_err();
        assert_eq!(e.message, "unknown field `qeue`; did you mean `queue`?");
        assert_eq!(e.at, Some(place(&text, "qeue")), "{text}");
        // In a reverse direction's inline table too.
        let text = SMALL.replace("{ rate = ", "{ rat = ");
        let e = Topology::parse(&text).unwrap_err();
        assert!(
            e.message.starts_with("unknown field `rat`")
                && e.message.ends_with("; did you mean `rate`?"),
            "{}",
            e.message
        );
        assert_eq!(e.at, Some(place(&text, "rat =")), "{text}");
    }

    /// Regression (found by the topology fuzz target): a name written as a multi-line
    /// string is refused on one line, its line break shown escaped.
    #[test]
    fn a_name_with_a_line_break_is_refused_on_one_line() {
        let e = Topology::parse("name=\"\"\"\r\n\".\nname=\"\"\"\r\n").unwrap_err();
        let said = e.to_string();
        assert!(!said.contains('\n') && !said.contains('\r'), "{said}");
        assert!(said.contains("topology name '\".\\nname='"), "{said}");
    }

    /// Regression (found by the topology fuzz target): an empty quoted key, unknown,
    /// sent the search for where it is written round for ever.
    #[test]
    fn an_empty_key_is_refused_where_its_table_begins() {
        let e = Topology::parse("\"\"=\"\"\"\"\"\"\n").unwrap_err();
        assert!(e.message.starts_with("unknown field ``"), "{}", e.message);
        assert_eq!(e.at, Some((1, 1)));
    }

    #[test]
    fn a_switch_holds_at_most_what_a_24_can_address() {
        let text = |n: usize| {
            let hosts: Vec<String> = (1..=n).map(|i| format!("\"h{i}\"")).collect();
            let links: String = (1..=n)
                .map(|i| format!("[[link]]\nends = [\"h{i}\", \"s1\"]\n"))
                .collect();
            format!(
                "name = \"big\"\nhosts = [{}]\nswitches = [\"s1\"]\n{links}",
                hosts.join(",")
            )
        };
        assert!(Topology::parse(&text(253)).is_ok());
        let e = Topology::parse(&text(254)).err().map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.contains("switch 's1' has 254 links")));
    }

    #[test]
    fn the_shipped_topologies_parse_and_imply_the_seed_values() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../topologies");
        let text = std::fs::read_to_string(dir.join("portfolio.toml")).unwrap();
        let t = Topology::parse(&text).unwrap();
        assert_eq!(t.hosts().count(), 9);
        assert_eq!(t.nodes.values().filter(|k| **k == Kind::Router).count(), 4);
        let plan = Plan::of(&t);
        let ms = Duration::from_millis;
        for (a, b, rtt, rate) in [
            ("h1", "h4", ms(60), 30_000_000),
            ("h1", "h9", ms(80), 20_000_000),
            ("h7", "h9", ms(60), 20_000_000),
            ("h8", "h9", ms(20), 20_000_000),
        ] {
            let p = plan.path(a, b).unwrap();
            assert_eq!(
                (p.rtt, p.bottleneck_bps),
                (rtt, Some(rate)),
                "{a}-{b}: {:?}",
                p.nodes
            );
        }
        for f in [
            "two-servers.toml",
            "two-servers-b85.toml",
            "bufferbloat.toml",
        ] {
            let text = std::fs::read_to_string(dir.join(f)).unwrap();
            Topology::parse(&text).unwrap_or_else(|e| panic!("{f}: {e}"));
        }
    }

    #[test]
    fn the_shared_air_topologies_give_the_seeds_rates_alone() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../topologies");
        let read = |f: &str| Topology::parse(&std::fs::read_to_string(dir.join(f)).unwrap());
        let near = |got: Option<u64>, want: f64| {
            let got = got.unwrap() as f64 / 1e6;
            assert!((got - want).abs() <= 0.005 * want, "{got} against {want}");
        };
        // Scenario 1 (Table 1): A 164, B 135 at the medium distance; the study sets B's
        // other distances as a `[[link]]` would.
        let mut t = read("two-servers-air.toml").unwrap();
        let plan = Plan::of(&t);
        near(plan.path("sa", "client").unwrap().bottleneck_bps, 164.0);
        near(plan.path("sb", "client").unwrap().bottleneck_bps, 135.0);
        for (rate, want) in [("201.0M", 169.0), ("99.0M", 85.0)] {
            t.set_link("wlan.sb", "rate", rate).unwrap();
            near(
                Plan::of(&t).path("sb", "client").unwrap().bottleneck_bps,
                want,
            );
        }
        let e = t.set_link("wlan.sb", "delay", "1ms").unwrap_err();
        assert!(
            e.message.contains("'delay' is not a station's property"),
            "{e}"
        );
        let e = t.set_link("wlan.sb", "rate", "5G").unwrap_err();
        assert!(e.message.contains("802.11ac PHY rates run from"), "{e}");
        // Scenario 2 (Table 5, short distance): A to the client 301, B 154 across the air
        // twice.
        let t = read("wifi-client-air.toml").unwrap();
        let plan = Plan::of(&t);
        near(plan.path("sa", "client").unwrap().bottleneck_bps, 301.0);
        near(plan.path("sb", "client").unwrap().bottleneck_bps, 154.0);
    }

    #[test]
    fn a_phy_rate_is_found_for_a_measured_tcp_rate() {
        let p = crate::medium::Preset::AC;
        let kbps = p.phy_for_tcp(164e6).unwrap();
        let r = p.rate(kbps * 1000);
        let tcp = p.tcp_alone_bps(&r, &r, 1448) / 1e6;
        assert!((164.0..164.2).contains(&tcp), "{kbps} kbit/s: {tcp}");
        // The least such rate: a symbol's bit less falls short.
        let less = p.rate((kbps - 3) * 1000);
        assert!(p.tcp_alone_bps(&less, &less, 1448) < 164e6);
        assert_eq!(crate::medium::Preset::B.phy_for_tcp(10e6), None);
    }

    /// A phone with two paths to a server: multi-homed, with MPTCP's defaults.
    const PHONE: &str = "name = \"p\"\nhosts = [\"c\", \"s\"]\nrouters = [\"r1\", \"r2\"]\n\
        [[link]]\nends = [\"c\", \"r1\"]\n[[link]]\nends = [\"c\", \"r2\"]\n\
        [[link]]\nends = [\"r1\", \"s\"]\n[[link]]\nends = [\"r2\", \"s\"]\n";

    #[test]
    fn a_multi_homed_host_gets_mptcp_unless_the_file_says_otherwise() {
        let t = Topology::parse(PHONE).unwrap();
        // s is on two links too: both ends multi-homed.
        assert_eq!(t.multi_homed(), ["c", "s"]);
        assert_eq!(t.mptcp(), Some(Mptcp::default()));
        assert_eq!(t.mptcp_table, None);
        // Hosts do not forward: c reaches s in two links, and r2 not at all by its link
        // to r1 (that way leads through s).
        let plan = Plan::of(&t);
        assert_eq!(plan.path("c", "s").map(|p| p.nodes.len()), Some(3));
        assert!(plan.path_through("c", "r2", 0).is_none());
        let text = format!(
            "{PHONE}[mptcp]\nsubflows = 4\nadd_addr_accepted = 0\nendpoints = \"subflow backup\"\n"
        );
        let m = Topology::parse(&text).unwrap().mptcp().unwrap();
        assert_eq!((m.subflows, m.add_addr_accepted), (4, 0));
        assert_eq!(m.endpoint_flags, ["subflow", "backup"]);
        let none = format!("{PHONE}[mptcp]\nendpoints = \"\"\n");
        assert!(
            Topology::parse(&none)
                .unwrap()
                .mptcp()
                .unwrap()
                .endpoint_flags
                .is_empty()
        );
        // One link a host: no MPTCP set up unless asked.
        let single = Topology::parse(SMALL).unwrap();
        assert!(single.multi_homed().is_empty());
        assert_eq!(single.mptcp(), None);
    }

    #[test]
    fn a_bad_mptcp_table_is_refused_at_its_line() {
        for (line, want) in [
            ("subflows = 9", "mptcp: subflows 9: from 0 to 8"),
            (
                "add_addr_accepted = -1",
                "mptcp: add_addr_accepted -1: from 0 to 8",
            ),
            (
                "endpoints = \"subflow mesh\"",
                "mptcp: endpoints: unknown flag 'mesh'",
            ),
            (
                "endpoints = \"signal fullmesh\"",
                "mptcp: endpoints: fullmesh and signal together",
            ),
            (
                "endpoints = \"backup\"",
                "mptcp: endpoints: give subflow, signal or both",
            ),
            ("subflow = 2", "unknown field `subflow`"),
        ] {
            let text = format!("{PHONE}[mptcp]\n{line}\n");
            let e = Topology::parse(&text).unwrap_err();
            assert_eq!(e.at.map(|(l, _)| l), Some(line_of(&text, line)), "{e}");
            assert!(e.message.starts_with(want), "{line}: {e}");
        }
    }
}
