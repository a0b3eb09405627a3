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

use super::relay::{Pass, Refused, Slept, error_queue, link_gone, receive_into, spin_to, transmit};
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

/// The IP bytes of each packet a busy station sends.
const BUSY_PACKET: u32 = 1500;

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
    // The busy stations after the hops' (station `specs.len() + 1` on): they have no hop.
    if let Some(busy) = first.busy {
        for _ in 0..busy.count {
            m.busy_station(preset.rate(busy.rate_bps), BUSY_PACKET);
        }
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
    busy: Option<Arc<LinkCounters>>,
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
    // One epoll set for every hop's sockets (a key each: 2 × hop + side) and the change
    // channel: a pass costs the sockets that have something, not all of a medium's.
    let epoll = Epoll::new()?;
    for (i, h) in hops.iter().enumerate() {
        epoll.add(h.a.fd.as_raw_fd(), 2 * i as u64)?;
        epoll.add(h.b.fd.as_raw_fd(), 2 * i as u64 + 1)?;
    }
    epoll.add(pending.fd(), CHANGES)?;
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 2 * hops.len() + 1];
    // Less a nanosecond: a contender armed now whose backoff is zero begins exactly then.
    let ahead = medium.preset().aifs_ns().saturating_sub(1);
    loop {
        let now = clock.now();
        // A line's frame must leave at its time: the thread asks to be woken a margin
        // early and spins the rest. The medium's transmissions need no spin: a frame
        // that arrives from now on makes no contender that can begin before an AIFS from
        // now, so every transmission that begins by then is decided already and is made
        // now (`ahead`), its frames delivered at the model's times. The thread wakes an
        // AIFS before the next one and does not spin: a transmission costs one spin
        // (before its delivery), not two. A wake-up later than an AIFS delays a
        // transmission's frames by the rest only if it comes after the PPDU's end.
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
            .min();
        let margin = wake.margin();
        let target = next
            .map(|due| due.saturating_sub(margin))
            .into_iter()
            .chain(medium.next_due().map(|due| due.saturating_sub(ahead)))
            .min();
        let rc = epoll.wait(&mut events, target, now);
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
        // The events as (key, what happened); epoll_event is packed on some targets.
        let ready = events[..usize::try_from(rc).unwrap_or(0)]
            .iter()
            .map(|e| ({ e.u64 }, { e.events }));
        if ready
            .clone()
            .any(|(key, what)| key != CHANGES && what & libc::EPOLLHUP as u32 != 0)
        {
            return Ok(());
        }
        // Before this pass reads: the transmissions from now on are at the new rates.
        if ready.clone().any(|(key, _)| key == CHANGES) {
            let preset = medium.preset();
            for (hop, r) in pending.take() {
                medium.set_rates(hop + 1, preset.rate(r.up_bps), preset.rate(r.down_bps));
            }
        }
        for (key, what) in ready.filter(|&(key, _)| key != CHANGES) {
            let (i, side) = ((key / 2) as usize, key % 2);
            let station = i + 1;
            let h = &mut hops[i];
            {
                let socket = if side == 0 { &h.a } else { &h.b };
                // Written to `a`: towards the station, the downlink's stamps.
                let (cost, c) = if side == 0 {
                    (&mut h.cost_down, &h.counters.b_to_a)
                } else {
                    (&mut h.cost_up, &h.counters.a_to_b)
                };
                if what & libc::EPOLLERR as u32 != 0
                    && !error_queue(socket, cost, c, &clock, &format!("medium {name}"))?
                {
                    return Ok(());
                }
                if what & libc::EPOLLIN as u32 == 0 {
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
        // The transmissions that begin by an AIFS from now: their frames leave the air
        // at the PPDU's end, into the hop's line towards the receiver.
        let horizon = now + ahead;
        medium.poll(horizon, &mut |tx: Txop<Frame>| {
            let (i, upward) = if tx.from == 0 {
                (tx.to - 1, false)
            } else {
                (tx.from - 1, true)
            };
            // A busy station's: the air it took is the others' wait, and nothing to hand
            // on; counted on the medium's line for its busy stations.
            let Some(h) = hops.get_mut(i) else {
                if let Some(c) = &busy {
                    let carried = tx.carried as u64;
                    c.a_to_b.airtime_ns.fetch_add(tx.end - tx.start, Relaxed);
                    c.a_to_b.forwarded.fetch_add(carried, Relaxed);
                    c.a_to_b
                        .forwarded_bytes
                        .fetch_add(carried * u64::from(BUSY_PACKET), Relaxed);
                }
                return;
            };
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
        air_now = air_now.max(horizon);
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

/// The key of the change channel in a medium's epoll set.
const CHANGES: u64 = u64::MAX;

/// An epoll set: a medium's thread sleeps in it until one of its sockets has something
/// or its timer is due.
struct Epoll(std::os::fd::OwnedFd);

impl Epoll {
    fn new() -> io::Result<Self> {
        // SAFETY: epoll_create1(2) with a flag; the descriptor is owned at once.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor owned by nothing else.
        Ok(Epoll(unsafe {
            <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd)
        }))
    }

    /// Watches `fd` for input (errors and hang-ups come unasked), reported as `key`.
    fn add(&self, fd: std::os::fd::RawFd, key: u64) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: key,
        };
        // SAFETY: epoll_ctl(2) on this set with a live descriptor and an event it copies.
        if unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut event) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Sleeps until something is ready or, from `now`, until `target` on the clock
    /// (None: until something is ready): how many events it filled in (0: the time
    /// came; negative: an error, in errno). With nanoseconds (epoll_pwait2, Linux 5.11),
    /// else to the millisecond below (the caller spins the rest).
    fn wait(&self, events: &mut [libc::epoll_event], target: Option<u64>, now: u64) -> libc::c_int {
        let wait = target.map(|t| t.saturating_sub(now));
        let timeout = wait.map(|w| libc::timespec {
            tv_sec: (w / 1_000_000_000) as libc::time_t,
            tv_nsec: (w % 1_000_000_000) as libc::c_long,
        });
        let max = libc::c_int::try_from(events.len()).unwrap_or(libc::c_int::MAX);
        // SAFETY: `events` and the optional timeout live for the call.
        let rc = unsafe {
            libc::epoll_pwait2(
                self.0.as_raw_fd(),
                events.as_mut_ptr(),
                max,
                timeout.as_ref().map_or(std::ptr::null(), |t| t as *const _),
                std::ptr::null(),
            )
        };
        if rc >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ENOSYS) {
            return rc;
        }
        let ms = wait.map_or(-1, |w| {
            libc::c_int::try_from(w / 1_000_000).unwrap_or(libc::c_int::MAX)
        });
        // SAFETY: as above.
        unsafe { libc::epoll_wait(self.0.as_raw_fd(), events.as_mut_ptr(), max, ms) }
    }
}
