//! A shared medium's thread: every station's hop of one `[[medium]]` forwarded through
//! one [`Medium`], so that the stations and their access point take turns on one air.
//! Frames read from a station's veth queue at the station, those read from the access
//! point's veth for that station queue at the access point; each transmission the medium
//! makes hands its frames, at the PPDU's end, to the hop's delay line towards the other
//! side, which writes them when due as a link's thread does.
//!
//! ```text
//!  station s: l<i> ⇄ a │ fl-<topo>-link.<i> │ b ⇄ l<i> :access point
//!              (every station's a and b)  ⇄  one thread, one Medium
//! ```

use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::relay::{
    Pass, Refused, Slept, error_queue, link_gone, receive_into, sleep, spin_to, transmit,
};
use super::socket::*;
use super::stats::*;
use super::{EmulatedLink, Pending, StationChange, StationSpec};
use crate::emulator::{DelayLine, RecentPolls, SendCost, WakeMargin};
use crate::medium::{Medium, Preset, Txop};

/// One station's hop as the thread holds it: its two sockets (`a` on the station's
/// side, `b` on the access point's), the delay line towards each, what they cost to
/// write to, and its counters.
pub(super) struct Hop {
    pub(super) a: PacketSocket,
    pub(super) b: PacketSocket,
    /// Frames the air delivered to the access point (written to `b`), and to the
    /// station (written to `a`).
    up: DelayLine<Frame>,
    down: DelayLine<Frame>,
    cost_up: SendCost,
    cost_down: SendCost,
    counters: Arc<LinkCounters>,
}

impl Hop {
    pub(super) fn new(
        a: PacketSocket,
        b: PacketSocket,
        link: &EmulatedLink,
        counters: Arc<LinkCounters>,
        seed: u64,
    ) -> Self {
        let line = |s: &super::LineSpec, seed| {
            DelayLine::<Frame>::new(
                Duration::from_micros(s.delay_us),
                Duration::from_micros(s.jitter_us),
                s.loss,
                s.limit,
                seed,
            )
        };
        counters.a_to_b.on_air.store(true, Relaxed);
        counters.b_to_a.on_air.store(true, Relaxed);
        Hop {
            a,
            b,
            up: line(&link.a_to_b, seed),
            down: line(&link.b_to_a, seed.rotate_left(32)),
            cost_up: SendCost::new(),
            cost_down: SendCost::new(),
            counters,
        }
    }
}

/// The medium a topology's `[[medium]]` describes, its stations in `specs`' order
/// (station `i + 1` of the medium is hop `i`).
pub(super) fn medium_of(specs: &[&StationSpec], seed: u64) -> io::Result<Medium<Frame>> {
    let first = specs
        .first()
        .ok_or_else(|| io::Error::other("a medium without stations"))?;
    let preset = Preset::named(&first.standard)
        .ok_or_else(|| io::Error::other(format!("no standard '{}'", first.standard)))?;
    let queue = usize::try_from(first.queue).unwrap_or(usize::MAX);
    let mut m = Medium::new(preset, first.fairness.policy(), queue, seed);
    for s in specs {
        m.station(preset.rate(s.up_bps), preset.rate(s.down_bps));
    }
    Ok(m)
}

/// Forwards a medium's hops until their interfaces go away (the topology was taken
/// down) or an error occurs; a station's rates change when `pending` has them
/// (`flowlab net set`).
pub(super) fn forward_air(
    name: &str,
    mut medium: Medium<Frame>,
    mut hops: Vec<Hop>,
    pending: &Pending<StationChange>,
) -> io::Result<()> {
    for h in &hops {
        set_int(&h.a.fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
        set_int(&h.b.fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
    }
    // As a link's thread: its timer on time, its nice level the highest (relay.rs says
    // why).
    // SAFETY: prctl with an integer argument.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    // SAFETY: plain calls; on Linux a nice level belongs to one thread, named by its id.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, -20) };
    let clock = Clock {
        start: Instant::now(),
    };
    let mut batch = Batch::new(FRAME);
    let mut wake = WakeMargin::new();
    let mut polls = RecentPolls::default();
    let mut stats_due = Duration::from_secs(1);
    // The medium's time: how far it has run its transmissions. A frame read later but
    // stamped earlier joins its queue now, not in the past the medium has already made.
    let mut air_now = 0u64;
    let mut fds: Vec<libc::pollfd> = Vec::with_capacity(2 * hops.len() + 1);
    loop {
        let now = clock.now();
        let next = hops
            .iter()
            .flat_map(|h| {
                [
                    h.up.next_due()
                        .map(|d| d.saturating_sub(h.cost_up.estimate())),
                    h.down
                        .next_due()
                        .map(|d| d.saturating_sub(h.cost_down.estimate())),
                ]
            })
            .flatten()
            .chain(medium.next_due())
            .min();
        let margin = wake.margin();
        let target = next.map(|due| due.saturating_sub(margin));
        fds.clear();
        for h in &hops {
            for s in [&h.a, &h.b] {
                fds.push(libc::pollfd {
                    fd: s.fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
        }
        fds.push(libc::pollfd {
            fd: pending.fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        let rc = sleep(&mut fds, target, now);
        let woke = clock.now();
        polls.record(now, woke);
        let slept = Slept {
            asked: target.filter(|&t| t > now),
            woke,
            rc,
        };
        // The margin learns from the wake-up once; each hop counts it, as its thread's.
        let before = wake;
        slept.settle(&mut wake, &hops[0].counters.wakeup_late_histogram);
        for h in &hops[1..] {
            slept.settle(&mut before.clone(), &h.counters.wakeup_late_histogram);
        }
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        if fds
            .iter()
            .any(|f| f.revents & (libc::POLLHUP | libc::POLLNVAL) != 0)
        {
            return Ok(());
        }
        // Before this pass reads: the transmissions from now on are at the new rates.
        if fds[2 * hops.len()].revents & libc::POLLIN != 0 {
            let preset = medium.preset();
            for (hop, r) in pending.take() {
                medium.set_rates(hop + 1, preset.rate(r.up_bps), preset.rate(r.down_bps));
            }
        }
        for (i, h) in hops.iter_mut().enumerate() {
            let station = i + 1;
            for (side, fd) in [(0, fds[2 * i]), (1, fds[2 * i + 1])] {
                let socket = if side == 0 { &h.a } else { &h.b };
                // Written to `a`: towards the station, the downlink's stamps.
                let (cost, c) = if side == 0 {
                    (&mut h.cost_down, &h.counters.b_to_a)
                } else {
                    (&mut h.cost_up, &h.counters.a_to_b)
                };
                if fd.revents & libc::POLLERR != 0
                    && !error_queue(socket, cost, c, &clock, &format!("medium {name}"))?
                {
                    return Ok(());
                }
                if fd.revents & libc::POLLIN == 0 {
                    continue;
                }
                // From the station's side: its uplink; from the access point's: the
                // access point's queue to this station.
                let (from, to, counters) = if side == 0 {
                    (station, 0, &h.counters.a_to_b)
                } else {
                    (0, station, &h.counters.b_to_a)
                };
                let read = receive_into(
                    socket,
                    counters,
                    &mut batch,
                    &clock,
                    &mut |arrived, frame, ip_bytes| {
                        let bytes = u32::try_from(ip_bytes).unwrap_or(u32::MAX);
                        medium
                            .push(arrived.max(air_now), from, to, frame, bytes)
                            .map_err(|f| (Refused::Full, f))
                    },
                );
                match read {
                    Err(e) if link_gone(&e) => return Ok(()),
                    r => {
                        r?;
                    }
                }
            }
        }
        // Woken by the timer: spin to the due time.
        let now = spin_to(&clock, clock.now(), rc, next, margin);
        // The transmissions that begin by now: their frames leave the air at the
        // PPDU's end, into the hop's line towards the receiver.
        medium.poll(now, &mut |tx: Txop<Frame>| {
            let (i, upward) = if tx.from == 0 {
                (tx.to - 1, false)
            } else {
                (tx.from - 1, true)
            };
            let h = &mut hops[i];
            let (line, c) = if upward {
                (&mut h.up, &h.counters.a_to_b)
            } else {
                (&mut h.down, &h.counters.b_to_a)
            };
            c.airtime_ns.fetch_add(tx.end - tx.start, Relaxed);
            for f in tx.frames {
                if let (_, Some(f)) = line.push(tx.deliver, f) {
                    c.line_full.fetch_add(1, Relaxed);
                    batch.give(f.buf);
                }
            }
        });
        air_now = air_now.max(now);
        let at = Pass { now, polls: &polls };
        for h in &mut hops {
            let c = &h.counters;
            transmit(
                &mut h.up,
                at,
                &h.b,
                &mut h.cost_up,
                &c.a_to_b,
                &mut batch,
                &clock,
            )?;
            transmit(
                &mut h.down,
                at,
                &h.a,
                &mut h.cost_down,
                &c.b_to_a,
                &mut batch,
                &clock,
            )?;
        }
        if Duration::from_nanos(now) >= stats_due {
            stats_due += Duration::from_secs(1);
            for h in &hops {
                let c = &h.counters;
                c.a_to_b
                    .emulator_drops
                    .fetch_add(h.a.kernel_drops(), Relaxed);
                c.b_to_a
                    .emulator_drops
                    .fetch_add(h.b.kernel_drops(), Relaxed);
            }
        }
    }
}
