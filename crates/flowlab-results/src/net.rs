//! Emulated topologies: what one implies, as `flowlab net show` prints it
//! ([`PlanSummary`], filled in by `flowlab_net`'s plan), what `flowlab net check`
//! measured beside it ([`NetCheck`]), and how the topologies that are up were built and
//! what their emulator did ([`TopologyStatus`], for `net up` and `net status`).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A topology's nodes, subnets, shaped links and host-to-host paths.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanSummary {
    pub name: String,
    pub hosts: usize,
    pub routers: usize,
    pub switches: usize,
    pub links: usize,
    /// Each /24 and its members' addresses.
    pub subnets: Vec<Subnet>,
    /// Each direction of a link that is shaped (a link's second direction only where it
    /// differs from its first).
    pub shaped: Vec<ShapedDirection>,
    /// Every pair of hosts, in the file's host order, when there are few enough hosts to
    /// list them all; else only the pair asked for (or none).
    pub paths: Vec<PathSummary>,
    /// Pairs of hosts in the topology.
    pub host_pairs: usize,
    /// Whether `paths` holds every pair.
    pub all_paths: bool,
    /// The links that change on a schedule, in the file's order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub schedules: Vec<LinkSchedule>,
    /// The shared media (`[[medium]]`), in the file's order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub media: Vec<MediumSummary>,
    /// The hosts with an address on more than one segment (in name order): the packets
    /// from each address leave by that address's own link.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub multi_homed: Vec<String>,
    /// MPTCP's in-kernel path manager as `net up` sets it on every host (`None`: left as
    /// each namespace's kernel has it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mptcp: Option<Mptcp>,
}

/// MPTCP's in-kernel path manager on every host of a topology (`ip mptcp limits` and
/// `ip mptcp endpoint`), set when the file has an `[mptcp]` table or a multi-homed host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mptcp {
    /// Additional subflows a connection may open (the kernel's limit, 0–8).
    pub subflows: u8,
    /// Addresses the peer announces (ADD_ADDR) that a connection may use (0–8).
    pub add_addr_accepted: u8,
    /// The flags of a multi-homed host's endpoints, one endpoint per address of the
    /// host: `subflow` (open a subflow from it), `signal` (announce it), `backup`,
    /// `fullmesh`; none: no endpoint.
    pub endpoint_flags: Vec<String>,
}

impl Default for Mptcp {
    /// Subflows and announced addresses up to 2 each, every address of a multi-homed
    /// host an endpoint that opens subflows and is announced: one connection uses every
    /// path whichever end is multi-homed.
    fn default() -> Mptcp {
        Mptcp {
            subflows: 2,
            add_addr_accepted: 2,
            endpoint_flags: vec!["subflow".into(), "signal".into()],
        }
    }
}

/// A shared Wi-Fi medium and what its model expects of it (docs/net.md, "Shared media").
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MediumSummary {
    pub name: String,
    /// Its access point (a router).
    pub ap: String,
    /// "802.11n", …
    pub standard: String,
    /// How the access point shares its downlink: "frames" or "airtime".
    pub fairness: String,
    /// Frames each of its queues holds.
    pub queue: u64,
    pub stations: Vec<StationExpected>,
    /// Its busy stations (`busy_stations`; absent where none): other devices on the
    /// channel, always sending.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busy: Option<BusyExpected>,
}

/// A medium's busy stations and what each carries while every station sends at once.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BusyExpected {
    pub count: u32,
    /// Their PHY rate.
    pub phy_bps: u64,
    /// What each carries, 1500-byte packets, while every station (busy or not) sends.
    pub busy_up_bps: f64,
}

/// One station of a shared medium: its PHY rates and what the medium's model expects it
/// to carry, bits per second.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StationExpected {
    pub host: String,
    /// PHY rate to the access point, and the access point's to it.
    pub up_phy_bps: u64,
    pub down_phy_bps: u64,
    /// A TCP flow's payload alone on the air (with the medium's busy stations, among
    /// them), up and down.
    pub tcp_up_bps: f64,
    pub tcp_down_bps: f64,
    /// 1500-byte packets while every station sends at once (DCF's per-transmission
    /// fairness), and while the access point sends to every station at once (by its
    /// fairness).
    pub busy_up_bps: f64,
    pub busy_down_bps: f64,
}

/// How a link changes while it is up (`[[link.schedule]]`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkSchedule {
    pub link: String,
    /// Each step: its time from the start, and what it sets ("rate=10M delay=40ms").
    pub steps: Vec<(Duration, String)>,
    /// The steps start again this often, from the file's values.
    pub repeat: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Subnet {
    /// The first three octets of the /24.
    pub prefix: [u8; 3],
    pub members: Vec<(String, Ipv4Addr)>,
}

/// The properties of one direction of a link, as a topology file gives them; `None` is
/// "not emulated".
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Shape {
    /// Bits per second.
    pub rate_bps: Option<u64>,
    pub delay: Duration,
    pub jitter: Duration,
    /// Queue limit in packets or bytes (at most one is set).
    pub queue_packets: Option<u64>,
    pub queue_bytes: Option<u64>,
    /// Random loss, 0 … 1.
    pub loss: f64,
}

impl Shape {
    /// Nothing about this direction is emulated.
    pub fn is_plain(&self) -> bool {
        *self == Shape::default()
    }
}

/// One direction of a shaped link.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShapedDirection {
    pub link: String,
    pub from: String,
    pub to: String,
    pub shape: Shape,
    /// The trace file its capacity follows (its rate is then the trace's mean).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    /// How a trace's queue drops, where not at its tail ("CoDel (target 5 ms, interval
    /// 100 ms)").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_policy: Option<String>,
}

/// What a path between two hosts implies.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathSummary {
    pub from: String,
    pub to: String,
    /// One-way delays there and back.
    pub rtt: Duration,
    /// The slowest link in the direction of travel (`None`: none is limited).
    pub bottleneck_bps: Option<u64>,
    /// Nodes from `from` to `to`, switches included.
    pub nodes: Vec<String>,
}

/// The congestion control that pairs run together are judged under (loss-based, as
/// seed 001's kernels ran them).
pub const FAIRNESS_CC: &str = "cubic";

/// What `flowlab net check` measured: its `-J` document, and what its table is made of.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetCheck {
    pub topology: String,
    /// The emulation backend, or "none needed (tbf only)".
    pub backend: String,
    /// The user-space emulator held the CPUs out of deep idle states
    /// (`--keep-cpus-awake`); false in documents from before it existed.
    #[serde(default)]
    pub cpus_kept_awake: bool,
    /// Every pair's TCP test ran at once.
    pub together: bool,
    /// The system's default congestion control.
    pub congestion_default: String,
    /// Seconds of TCP per pair (after one left out).
    pub load_seconds: u64,
    /// Jain's index under the first round's congestion control (null unless together).
    pub jain_index: Option<f64>,
    /// Jain's index under each round's congestion control.
    pub jain_index_by_congestion: BTreeMap<String, f64>,
    /// Every round's rows, in order.
    pub paths: Vec<CheckedPath>,
    /// Each round's congestion control (`None`: the system's, not chosen) — for the
    /// table's header, not in the document.
    #[serde(skip)]
    pub rounds: Vec<Option<String>>,
    /// The user chose the congestion control (`-C`).
    #[serde(skip)]
    pub congestion_chosen: bool,
    /// The idle RTT's tolerance, and the loss's (relative, percent): for the header.
    #[serde(skip)]
    pub rtt_tolerance_ms: f64,
    #[serde(skip)]
    pub loss_tolerance_percent: f64,
}

/// One measured path of a [`NetCheck`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckedPath {
    pub from: String,
    pub to: String,
    pub connections: u32,
    /// TCP congestion control of the load (the client's, which sends).
    pub congestion: Option<String>,
    pub implied_rtt_ms: f64,
    /// Median of 20 echoes on the idle path (of the run closest to the file's RTT,
    /// where one was off by more than the tolerance and another was taken).
    pub measured_rtt_ms: Option<f64>,
    /// How many runs of 20 echoes that took: 1, or up to 3 where a median was off by
    /// more than the tolerance (a second apart; a burst of the host's passes, an
    /// emulation that is off is off in every run). 1 in documents of flowlab before it.
    #[serde(default = "one_run")]
    pub measured_rtt_runs: u32,
    /// The idle RTT measured (the file's where not measured), plus every full queue on
    /// the way there, plus `host_delay_p95_ms` and `emulator_late_p95_ms`.
    pub queue_bound_ms: f64,
    /// 95th percentile of echoes to the source's own loopback during the TCP test: the
    /// busy host's own delay, which the queue bound allows.
    pub host_delay_p95_ms: Option<f64>,
    /// The user-space emulator's lateness during the TCP test: the 95th percentile of
    /// its sum over the links an echo crosses, there and back (null without an
    /// emulator): the time its thread waited for a CPU, which the queue bound allows too.
    pub emulator_late_p95_ms: Option<f64>,
    /// The same sum's 99th percentile (reported, not judged; absent without an
    /// emulator, and in documents of flowlab before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emulator_late_p99_ms: Option<f64>,
    /// The part of that lateness the emulator's wake-ups account for: the 99th
    /// percentile of the same sum taken over the part of each frame's lateness that
    /// passed while the emulator's thread was in its poll. At most
    /// `emulator_late_p99_ms`; the rest passed while the thread was up (its own work, or
    /// the CPU taken from it). Reported, not judged; absent without an emulator, and
    /// from an emulator older than the split.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emulator_woke_late_p99_ms: Option<f64>,
    /// How late the emulator's threads of the links an echo crosses came back from
    /// their sleeps after the time each asked to be woken (by the timer, or by a socket
    /// event that ended a sleep at or after that time): the 99th percentile of their
    /// wake-ups during the
    /// TCP test, pooled (each link's thread once). What the host's scheduler gave the
    /// emulator under the load, to read beside `emulator_woke_late_p99_ms` (a wake-up
    /// later than the thread's margin makes its frames late) and beside another
    /// program's wake-ups (cyclictest's). Reported, not judged; absent without an
    /// emulator, when no sleep of theirs ended at or after its time, and from an
    /// emulator older than it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emulator_wakeup_late_p99_ms: Option<f64>,
    /// Highest and median ICMP echo RTT during the TCP test.
    pub loaded_rtt_ms: Option<f64>,
    pub loaded_rtt_median_ms: Option<f64>,
    /// 95th percentile of the same (what the queue bound is judged on).
    pub loaded_rtt_p95_ms: Option<f64>,
    pub implied_bps: Option<u64>,
    pub measured_bps: f64,
    /// Each connection's throughput (receiver), when there are several.
    pub connection_bps: Vec<f64>,
    /// With --together: the pair's max-min fair share of the links it shares.
    pub fair_share_bps: Option<f64>,
    pub implied_loss_percent: f64,
    /// UDP datagrams lost of those sent (only where the path has loss).
    pub measured_loss_percent: Option<f64>,
    /// The bounds each figure was judged by, tolerances included: idle RTT within
    /// `rtt_tolerance_ms` of the file's; loaded RTT (p95) at most `queue_bound_ms` +
    /// `rtt_tolerance_ms`; rate within `rate_bounds_bps` (absent where not judged: no
    /// rate limit, random loss, or pairs run together); loss within
    /// `loss_bounds_percent` (absent without configured loss).
    pub rtt_tolerance_ms: f64,
    pub rate_bounds_bps: Option<[f64; 2]>,
    pub loss_bounds_percent: Option<[f64; 2]>,
    /// What falls outside those bounds.
    pub deviations: Vec<String>,
    /// The busy stations on the path's shared media (absent where none): their
    /// transmissions hold its packets as long as DCF's backoff decides, so its RTTs, idle
    /// and loaded, are shown and not judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_stations: Option<u32>,
    /// Share of the machine's CPU time its hypervisor took ("steal") while the load ran
    /// (null where /proc/stat cannot be read): on a virtual machine whose host is busy,
    /// the emulator and the probes wait too, and the figures with them.
    pub host_steal_percent: Option<f64>,
}

/// What documents written before `measured_rtt_runs` took: one run.
fn one_run() -> u32 {
    1
}

/// An emulator lateness (added up over a path) from this on (ms) is noted under the
/// check's table.
pub const EMULATOR_LATE_NOTED_MS: f64 = 1.0;

/// Steal from this share of the CPU time on (percent) is noted under the check's table.
pub const STEAL_NOTED: f64 = 1.0;

/// How a topology that is up was built.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Built {
    /// No state recorded: its `up` is still building, or failed before the end.
    Unknown,
    /// Rate and queue by tbf only: no link has delay, jitter or loss.
    TbfOnly,
    /// Delay, jitter and loss emulated by `backend` (`netem` or `userspace`), on `links`
    /// by the emulator process `emulator_pid` (user-space backend only), which holds the
    /// CPUs out of deep idle states when `cpus_kept_awake` (`--keep-cpus-awake`). An
    /// emulator that is not `emulator_running` was lost (killed, or ended with its
    /// session): the emulated links carry nothing.
    Emulated {
        backend: String,
        emulator_pid: Option<u32>,
        emulator_running: bool,
        links: Vec<String>,
        cpus_kept_awake: bool,
    },
}

/// A tbf bucket `flowlab net set` kept larger than its new rate's: tbf never sends a
/// packet longer than its bucket, and may hold packets as long as the old one was.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KeptBucket {
    /// The direction: its sending node, and the other end.
    pub from: String,
    pub to: String,
    /// The bucket kept, bytes.
    pub bytes: u64,
    /// The new rate, and the bucket it alone would get (10 ms of it).
    pub rate_bps: u64,
    pub bucket_at_rate: u64,
}

/// A topology that is up (`net status`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopologyStatus {
    pub name: String,
    pub built: Built,
    pub namespaces: Vec<String>,
    /// The user-space emulator's counters, two per link it forwards (empty without one).
    pub emulated: Vec<EmulatedDirection>,
    /// The process changing its links on their schedule, when some link has one.
    pub schedule: Option<ScheduleStatus>,
    /// What each shared medium's busy stations sent, for the media that have some.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub busy_air: Vec<BusyAir>,
}

/// What a medium's busy stations sent the access point, all of them together, since the
/// emulator started.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BusyAir {
    pub medium: String,
    pub stations: u32,
    /// Packets sent (of `packet_bytes` IP bytes each).
    pub packets: u64,
    pub packet_bytes: u64,
    /// The air their transmissions took (each from its PPDU's start to its
    /// acknowledgement's end), seconds.
    pub airtime_s: f64,
}

/// The schedule of a topology that is up: its process, and the last line of its log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScheduleStatus {
    pub pid: u32,
    pub running: bool,
    /// Its log: when it started and each change it made.
    pub log: String,
    /// The log's last change (or its start, before any), as the log says it.
    pub last: Option<String>,
    /// It made every change it had (none repeats), and ended.
    pub done: bool,
}

/// What the user-space emulator did in one direction of one link, since it started.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EmulatedDirection {
    pub link: String,
    /// `a→b` or `b→a`, the link's ends as the topology file names them.
    pub way: String,
    pub forwarded: u64,
    /// Bytes of the frames forwarded, link-layer headers included: over `forwarded`,
    /// the mean frame (above the MTU when the link carries GSO super-frames).
    pub forwarded_bytes: u64,
    /// Dropped by the link's random loss.
    pub lost: u64,
    /// Dropped because the line's queue was full.
    pub line_full: u64,
    /// Dropped by the emulator itself (its socket or its own buffers overflowed).
    pub emulator_drops: u64,
    /// Frames too long to forward.
    pub oversize: u64,
    /// Mean lateness of a forwarded frame against its due time, µs.
    pub mean_late_us: f64,
    /// Frames sent late by more than the emulator's tolerance.
    pub late: u64,
    pub max_late_us: u64,
    /// How early frames are written to make up for the cost of sending them, µs.
    pub send_cost_us: f64,
    /// A direction that follows a trace: its opportunities that went unused (nothing
    /// waited for them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unused_opportunities: Option<u64>,
    /// A direction that follows a trace: packets its queue dropped early (CoDel's,
    /// PIE's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub early_drops: Option<u64>,
    /// A station's direction on a shared medium: the air its transmissions took (each
    /// from its PPDU's start to its acknowledgement's end), seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub airtime_s: Option<f64>,
}
