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

mod relay;
mod socket;
mod stats;

use std::io;
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

/// Runs the emulator for `links`: one thread per link, each in its namespace. Calls
/// `ready` once every link's sockets are open (or returns the first link's error), then
/// calls `report` with the counters about once a second until every link has ended.
pub fn run(
    links: Vec<EmulatedLink>,
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
    for (i, link) in links.into_iter().enumerate() {
        let counters = Arc::new(LinkCounters::default());
        all.push((link.name.clone(), counters.clone()));
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
                    match forward(a, b, &link, &counters, link_seed) {
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
    drop(tx);
    for _ in 0..threads.len() {
        match rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(io::Error::other("an emulator thread ended early")),
        }
    }
    ready();
    let snapshot = |all: &[(String, Arc<LinkCounters>)]| -> Vec<LinkStats> {
        all.iter().map(|(name, c)| LinkStats::of(name, c)).collect()
    };
    while !threads.iter().all(|t| t.is_finished()) {
        std::thread::sleep(Duration::from_secs(1));
        report(&snapshot(&all));
    }
    report(&snapshot(&all));
    Ok(())
}
