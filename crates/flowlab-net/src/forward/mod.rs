//! The user-space link emulator's I/O: for each emulated link, one thread in the link's
//! middle namespace reads every frame arriving on one of its two veths with an AF_PACKET
//! socket, passes it through that direction's [`DelayLine`](crate::emulator::DelayLine), and writes it, when due, to
//! the other veth. The middle namespace has no addresses and no forwarding, so its kernel
//! drops the frames itself; the emulator is the only way across.
//!
//! ```text
//!  node a: l<i> ⇄ a │ fl-<topo>-link.<i> │ b ⇄ l<i> :node b
//!   tbf (rate,queue) │  emulator thread  │ tbf (rate,queue)
//! ```

mod air;
mod relay;
mod socket;
mod stats;

use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use relay::forward;
use socket::PacketSocket;
pub(crate) use socket::{arrival_ns, set_int, wall_ns};
pub use stats::{
    Counters, DirectionStats, LATE, LATE_BUCKETS, LinkCounters, LinkStats, late_bucket,
};

/// One direction's emulation, as the `up` process hands it to the emulator.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LineSpec {
    pub delay_us: u64,
    pub jitter_us: u64,
    pub loss: f64,
    pub limit: u64,
}

impl LineSpec {
    /// The emulation of one direction shaped `s`.
    pub fn of(s: &flowlab_results::net::Shape) -> Self {
        LineSpec {
            delay_us: s.delay.as_micros() as u64,
            jitter_us: s.jitter.as_micros() as u64,
            loss: s.loss,
            limit: crate::emulator::line_limit(s),
        }
    }
}

/// One link for the emulator: its middle namespace and the two veths there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmulatedLink {
    pub name: String,
    pub namespace: String,
    /// Frames from node a arrive on this device.
    pub a: String,
    pub b: String,
    pub a_to_b: LineSpec,
    pub b_to_a: LineSpec,
    /// Carry TCP's and UDP's GSO super-frames whole (up to 64 KiB, with a virtio-net
    /// header saying how the kernel is to cut them later: PACKET_VNET_HDR) instead of
    /// frames cut to the MTU before the emulator. Set for links without random loss and
    /// jitter, where a frame's fate applies to all its segments alike; the nodes' ends
    /// keep their offloads on.
    #[serde(default)]
    pub gso: bool,
    /// The trace each direction's capacity follows, if any: the emulator then owns that
    /// direction's rate and queue ([`crate::trace`]).
    #[serde(default)]
    pub a_to_b_trace: Option<TraceSpec>,
    #[serde(default)]
    pub b_to_a_trace: Option<TraceSpec>,
    /// A station's hop on a shared medium (a: the station, b: its access point): the
    /// air carries it, with every other hop of the same medium, in one thread.
    #[serde(default)]
    pub station: Option<StationSpec>,
}

/// A station's hop on a shared medium, as the emulator builds the medium from its
/// hops (each names the medium and repeats its standard, fairness and queue).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StationSpec {
    pub medium: String,
    pub standard: String,
    pub fairness: crate::topology::Fairness,
    pub queue: u64,
    /// The station's PHY rate, and the access point's to it, bits per second.
    pub up_bps: u64,
    pub down_bps: u64,
    /// The medium's busy stations, if any (each station's spec carries them, as it does
    /// the standard).
    #[serde(default)]
    pub busy: Option<crate::topology::Busy>,
}

/// A trace-driven direction: its trace file (mahimahi's format) and its queue's limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceSpec {
    pub file: std::path::PathBuf,
    pub queue_packets: Option<u64>,
    pub queue_bytes: Option<u64>,
    /// How its queue drops.
    #[serde(default = "drop_tail")]
    pub policy: crate::trace::QueuePolicy,
    /// Where to log its queue's events (mahimahi's format), if anywhere.
    #[serde(default)]
    pub log: Option<std::path::PathBuf>,
}

fn drop_tail() -> crate::trace::QueuePolicy {
    crate::trace::QueuePolicy::DropTail
}

impl TraceSpec {
    /// Opens its log, if it has one, and writes its header: for link `link`'s direction
    /// `way` ("a→b").
    pub(crate) fn open_log(
        &self,
        link: &str,
        way: &str,
    ) -> io::Result<Option<io::BufWriter<std::fs::File>>> {
        use std::io::Write;
        let Some(path) = &self.log else {
            return Ok(None);
        };
        let file = std::fs::File::create(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        let mut w = io::BufWriter::new(file);
        let limit = match (self.queue_bytes, self.queue_packets) {
            (Some(b), _) => format!("bytes={b}"),
            (None, p) => format!("packets={}", p.unwrap_or(crate::build::DEFAULT_QUEUE)),
        };
        writeln!(
            w,
            "# flowlab net emulator: link {link} {way} [{}] > {}",
            self.file.display(),
            path.display()
        )?;
        writeln!(w, "# queue: {} [{limit}]", self.policy.name())?;
        writeln!(w, "# init timestamp: 0")?;
        writeln!(w, "# base timestamp: 0")?;
        Ok(Some(w))
    }

    /// The queue in front of the trace's opportunities, behind which `line` delays (its
    /// random drops, PIE's, drawn from `seed`).
    pub fn queue<T>(&self, seed: u64) -> io::Result<crate::trace::TraceQueue<T>> {
        use crate::trace::{DeliveryTrace, QueueLimit, TraceQueue};
        let text = std::fs::read_to_string(&self.file)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", self.file.display())))?;
        let trace = DeliveryTrace::parse(&text)
            .map_err(|e| io::Error::other(format!("{}: {e}", self.file.display())))?;
        let limit = match (self.queue_bytes, self.queue_packets) {
            (Some(b), _) => QueueLimit::Bytes(b),
            (None, p) => QueueLimit::Packets(p.unwrap_or(crate::build::DEFAULT_QUEUE)),
        };
        Ok(TraceQueue::with_policy(trace, limit, self.policy, seed))
    }
}

impl EmulatedLink {
    /// Whether a link with these directions can carry super-frames ([`Self::gso`]):
    /// loss and jitter are decided per frame, and a super-frame would lose or reorder
    /// up to 44 segments together.
    pub fn gso_fits(a_to_b: &LineSpec, b_to_a: &LineSpec) -> bool {
        [a_to_b, b_to_a]
            .iter()
            .all(|s| s.loss == 0.0 && s.jitter_us == 0)
    }
}

/// A change of a link's two directions (`flowlab net set`), as `set` sends it to the
/// emulator's control socket: one JSON line, answered by one line, `ok` or why not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkChange {
    pub link: String,
    pub a_to_b: LineSpec,
    pub b_to_a: LineSpec,
    /// A station's new PHY rates (its hop on a shared medium): the medium's air, not its
    /// lines, sets how fast it goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub station: Option<StationRates>,
}

/// A station's PHY rates, bits per second: its own, and the access point's to it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StationRates {
    pub up_bps: u64,
    pub down_bps: u64,
}

/// A station's new rates for a medium's thread: its hop (from 0), and the rates.
pub(crate) type StationChange = (usize, StationRates);

/// What the control socket hands a change to: a link's thread, or the thread of the
/// medium whose hop `hop` the link is.
enum Control {
    Line(Arc<Pending<(LineSpec, LineSpec)>>),
    Air {
        pending: Arc<Pending<StationChange>>,
        hop: usize,
    },
}

/// Changes waiting for a thread (a link's, or a medium's), and the eventfd that wakes it
/// from its poll (a thread asleep towards the other direction's frame would otherwise
/// judge arrivals by the old values until it woke).
#[derive(Debug)]
pub(crate) struct Pending<T> {
    changes: std::sync::Mutex<Vec<T>>,
    wake: std::os::fd::OwnedFd,
}

impl<T> Pending<T> {
    fn new() -> io::Result<Self> {
        // SAFETY: eventfd(2) with flags; the descriptor is owned at once.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Pending {
            changes: std::sync::Mutex::new(Vec::new()),
            // SAFETY: a fresh descriptor owned by nothing else.
            wake: unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) },
        })
    }

    fn offer(&self, change: T) {
        self.changes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(change);
        let one = 1u64.to_ne_bytes();
        // SAFETY: an 8-byte write to an eventfd this value owns.
        unsafe { libc::write(self.wake.as_raw_fd(), one.as_ptr().cast(), 8) };
    }

    /// The descriptor the thread polls.
    pub(crate) fn fd(&self) -> std::os::fd::RawFd {
        self.wake.as_raw_fd()
    }

    /// The changes offered since the last call, oldest first.
    pub(crate) fn take(&self) -> Vec<T> {
        let mut count = [0u8; 8];
        // SAFETY: an 8-byte read from a non-blocking eventfd this value owns.
        unsafe { libc::read(self.wake.as_raw_fd(), count.as_mut_ptr().cast(), 8) };
        std::mem::take(&mut *self.changes.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Serves the control socket at `path` (`set` connects to it): each connection sends one
/// [`LinkChange`] line and reads `ok`, or why the change was refused.
fn serve_control(path: &std::path::Path, links: Vec<(EmulatedLink, Control)>) -> io::Result<()> {
    use std::io::{BufRead, Write};
    let _ = std::fs::remove_file(path);
    let listener = std::os::unix::net::UnixListener::bind(path)?;
    // Root's alone: a change reaches every test crossing the link.
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let mut line = String::new();
            let mut reader = io::BufReader::new(&stream);
            let answer = match reader.read_line(&mut line) {
                Ok(_) => match serde_json::from_str::<LinkChange>(&line) {
                    Ok(c) => match links.iter().find(|(l, _)| l.name == c.link) {
                        Some((l, control)) => answer(l, control, c),
                        None => format!("the emulator forwards no link named '{}'", c.link),
                    },
                    Err(e) => format!("not a link change: {e}"),
                },
                Err(e) => format!("reading the change: {e}"),
            };
            let _ = (&stream).write_all(format!("{answer}\n").as_bytes());
        }
    });
    Ok(())
}

/// Hands change `c` of link `l` to the thread that forwards it: "ok", or why not.
fn answer(l: &EmulatedLink, control: &Control, c: LinkChange) -> String {
    match (control, c.station) {
        (Control::Line(_), Some(_)) => format!("link {} is no station's hop", c.link),
        (Control::Line(_), None) if l.gso && !EmulatedLink::gso_fits(&c.a_to_b, &c.b_to_a) => {
            format!(
                "link {} was brought up without loss or jitter, and carries TCP's super-frames whole: it cannot take them live (give it some in the file and bring it up again)",
                c.link
            )
        }
        (Control::Line(pending), None) => {
            pending.offer((c.a_to_b, c.b_to_a));
            "ok".into()
        }
        (Control::Air { .. }, None) => format!(
            "link {} is a station's hop on a shared medium: its rate and down_rate change",
            c.link
        ),
        (Control::Air { pending, hop }, Some(rates)) => {
            pending.offer((*hop, rates));
            "ok".into()
        }
    }
}

/// A link to forward, with the counters its thread keeps.
type CountedLink = (EmulatedLink, Arc<LinkCounters>);

/// A shared medium's hops, gathered for its thread, and the changes of its stations'
/// rates waiting for it.
struct Medium {
    name: String,
    hops: Vec<CountedLink>,
    pending: Arc<Pending<StationChange>>,
    /// What its busy stations sent (their air time, their packets), when it has some.
    busy: Option<Arc<LinkCounters>>,
}

/// A medium's hops opened: each hop's sockets in its own middle namespace (a socket
/// stays bound to its interface after the thread moves on to the next namespace), and
/// the medium they share.
fn open_medium(
    hops: &[CountedLink],
    seed: u64,
) -> io::Result<(crate::medium::Medium<socket::Frame>, Vec<air::Hop>)> {
    let specs: Vec<&StationSpec> = hops
        .iter()
        .filter_map(|(l, _)| l.station.as_ref())
        .collect();
    let medium = air::medium_of(&specs, seed)?;
    let mut opened = Vec::new();
    for (i, (link, counters)) in hops.iter().enumerate() {
        crate::netns::enter(&link.namespace)
            .map_err(|e| io::Error::new(e.kind(), format!("link {}: {e}", link.name)))?;
        let open = |dev: &str| {
            PacketSocket::open(dev, false)
                .map_err(|e| io::Error::new(e.kind(), format!("link {}: {e}", link.name)))
        };
        let (a, b) = (open(&link.a)?, open(&link.b)?);
        let hop_seed = seed.wrapping_add((i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        opened.push(air::Hop::new(a, b, link, counters.clone(), hop_seed));
    }
    Ok((medium, opened))
}

/// Runs the emulator for `links`: one thread per link, each in its namespace, and a
/// control socket at `control` through which their delay, jitter, loss and limit change
/// live. Calls `ready` once every link's sockets are open (or returns the first link's
/// error), then calls `report` with the counters about once a second until every link
/// has ended.
pub fn run(
    links: Vec<EmulatedLink>,
    control: &std::path::Path,
    ready: impl FnOnce(),
    mut report: impl FnMut(&[LinkStats]),
) -> io::Result<()> {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id());
    let (tx, rx) = std::sync::mpsc::channel::<io::Result<()>>();
    let mut threads = Vec::new();
    let mut all = Vec::new();
    let mut controlled = Vec::new();
    // A shared medium's hops go to one thread, in the order of their links.
    let mut media: Vec<Medium> = Vec::new();
    let mut busy_lines: Vec<(String, u32, Arc<LinkCounters>)> = Vec::new();
    for (i, link) in links.into_iter().enumerate() {
        let counters = Arc::new(LinkCounters::default());
        all.push((link.name.clone(), counters.clone()));
        if let Some(st) = &link.station {
            let k = match media.iter().position(|m| m.name == st.medium) {
                Some(k) => k,
                None => {
                    // Its busy stations' transmissions are counted on a line of
                    // their own in the stats file.
                    let busy = st.busy.filter(|b| b.count > 0).map(|b| {
                        let counters = Arc::new(LinkCounters::default());
                        counters
                            .a_to_b
                            .on_air
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                        busy_lines.push((st.medium.clone(), b.count, counters.clone()));
                        counters
                    });
                    media.push(Medium {
                        name: st.medium.clone(),
                        hops: Vec::new(),
                        pending: Arc::new(Pending::new()?),
                        busy,
                    });
                    media.len() - 1
                }
            };
            let m = &mut media[k];
            let control = Control::Air {
                pending: m.pending.clone(),
                hop: m.hops.len(),
            };
            controlled.push((link.clone(), control));
            m.hops.push((link, counters));
            continue;
        }
        let pending = Arc::new(Pending::new()?);
        controlled.push((link.clone(), Control::Line(pending.clone())));
        let tx = tx.clone();
        let link_seed = seed.wrapping_add((i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        threads.push(std::thread::spawn(move || {
            if let Err(e) = crate::netns::enter(&link.namespace) {
                let _ = tx.send(Err(e));
                return;
            }
            let open = |dev: &str| PacketSocket::open(dev, link.gso);
            match open(&link.a).and_then(|a| Ok((a, open(&link.b)?))) {
                Ok((a, b)) => {
                    let _ = tx.send(Ok(()));
                    // Not held while forwarding: if any thread dies early, `run` sees
                    // the channel close instead of waiting for ever.
                    drop(tx);
                    match forward(a, b, &link, &counters, &pending, link_seed) {
                        Ok(()) => eprintln!(
                            "flowlab net emulator: link {}: its interfaces went away",
                            link.name
                        ),
                        Err(e) => {
                            eprintln!("flowlab net emulator: link {}: stopped: {e}", link.name)
                        }
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(io::Error::new(
                        e.kind(),
                        format!("link {}: {e}", link.name),
                    )));
                }
            }
        }));
    }
    for (
        k,
        Medium {
            name,
            hops,
            pending,
            busy,
        },
    ) in media.into_iter().enumerate()
    {
        let tx = tx.clone();
        let medium_seed = seed ^ (k as u64 + 1).wrapping_mul(0xd1b5_4a32_d192_ed03);
        threads.push(std::thread::spawn(move || {
            match open_medium(&hops, medium_seed) {
                Ok((medium, opened)) => {
                    let _ = tx.send(Ok(()));
                    drop(tx);
                    match air::forward_air(&name, medium, opened, busy, &pending) {
                        Ok(()) => eprintln!(
                            "flowlab net emulator: medium {name}: its interfaces went away"
                        ),
                        Err(e) => eprintln!("flowlab net emulator: medium {name}: stopped: {e}"),
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(io::Error::new(e.kind(), format!("medium {name}: {e}"))));
                }
            }
        }));
    }
    drop(tx);
    for _ in 0..threads.len() {
        match rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(io::Error::other("an emulator thread ended early")),
        }
    }
    serve_control(control, controlled)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", control.display())))?;
    ready();
    let snapshot = || -> Vec<LinkStats> {
        let links = all.iter().map(|(name, c)| LinkStats::of(name, c));
        let busy = busy_lines
            .iter()
            .map(|(medium, count, c)| LinkStats::of_busy(medium, *count, c));
        links.chain(busy).collect()
    };
    while !threads.iter().all(|t| t.is_finished()) {
        std::thread::sleep(Duration::from_secs(1));
        report(&snapshot());
    }
    report(&snapshot());
    Ok(())
}
