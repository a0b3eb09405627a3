//! A link's thread: frames read from either veth into their direction's delay line,
//! written out when due, the thread asleep in between, everything counted.

use std::io;
use std::mem::zeroed;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use super::socket::*;
use super::stats::*;
use super::{EmulatedLink, LineSpec, Pending};
use crate::emulator::{DelayLine, RecentPolls, SendCost, Verdict, WakeMargin, arrivals_can_wait};

/// Why a frame read was not kept: lost at random, or its queue was full.
pub(super) enum Refused {
    Lost,
    Full,
}

/// Reads every frame waiting on `from` (up to a few batches, so that due frames are not
/// held back behind a flood) into `line`, stamped with its arrival time. Says whether
/// it read them all (false: a flood, more are waiting).
pub(super) fn receive(
    from: &PacketSocket,
    line: &mut DelayLine<Frame>,
    counters: &Counters,
    batch: &mut Batch,
    clock: &Clock,
) -> io::Result<bool> {
    receive_into(
        from,
        counters,
        batch,
        clock,
        &mut |arrived, frame, ip_bytes| match line.push_sized(arrived, frame, ip_bytes) {
            (Verdict::Lost, Some(f)) => Err((Refused::Lost, f)),
            (Verdict::Full, Some(f)) => Err((Refused::Full, f)),
            _ => Ok(()),
        },
    )
}

/// Reads every frame waiting on `from`, as [`receive`] does, handing each to `put` with
/// its arrival time and its IP packet's bytes; a frame `put` hands back is counted as
/// lost or as a full queue's.
pub(super) fn receive_into(
    from: &PacketSocket,
    counters: &Counters,
    batch: &mut Batch,
    clock: &Clock,
    put: &mut dyn FnMut(u64, Frame, u64) -> Result<(), (Refused, Frame)>,
) -> io::Result<bool> {
    for _ in 0..8 {
        for i in 0..BATCH {
            batch.iov[i] = libc::iovec {
                iov_base: batch.ready[i].as_mut_ptr().cast(),
                iov_len: batch.frame,
            };
            // SAFETY: plain old data.
            let mut h: libc::msghdr = unsafe { zeroed() };
            h.msg_name = (&mut batch.addrs[i] as *mut libc::sockaddr_ll).cast();
            h.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            h.msg_iov = &mut batch.iov[i];
            h.msg_iovlen = 1;
            h.msg_control = batch.control[i].as_mut_ptr().cast();
            h.msg_controllen = CONTROL as _;
            batch.msgs[i] = libc::mmsghdr {
                msg_hdr: h,
                msg_len: 0,
            };
        }
        // SAFETY: every header points into buffers, iovecs, addresses and control
        // buffers that live in `batch` for the call; the count is the arrays' length.
        let n = unsafe {
            libc::recvmmsg(
                from.fd.as_raw_fd(),
                batch.msgs.as_mut_ptr(),
                BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        let now = clock.now();
        let offset = clock.wall_offset();
        let got = if n < 0 {
            let e = io::Error::last_os_error();
            if !matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) {
                return Err(e);
            }
            0
        } else {
            n as usize
        };
        for i in 0..got {
            let m = &batch.msgs[i];
            if batch.addrs[i].sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                counters.oversize.fetch_add(1, Relaxed);
                continue;
            }
            // The delay runs from when the frame arrived, not from when this thread got
            // round to reading it (a sleeping vCPU can take 100 µs to wake).
            let arrived = arrival_ns(&m.msg_hdr).map_or(now, |wall| on_clock(wall, offset, now));
            let len = m.msg_len as usize;
            let frame = if batch.frame > FRAME && len <= FRAME {
                // A short frame on a GSO link moves to a small buffer; the large one
                // stays ready for the next receive.
                let mut small = batch.small.take();
                small[..len].copy_from_slice(&batch.ready[i][..len]);
                Frame { buf: small, len }
            } else {
                Frame {
                    buf: std::mem::replace(&mut batch.ready[i], batch.pool.take()),
                    len,
                }
            };
            // A trace counts IP packets' bytes: the frame less its Ethernet header.
            let ip_bytes = (len as u64).saturating_sub(14);
            match put(arrived, frame, ip_bytes) {
                Ok(()) => {}
                Err((Refused::Lost, f)) => {
                    counters.lost.fetch_add(1, Relaxed);
                    batch.give(f.buf);
                }
                Err((Refused::Full, f)) => {
                    counters.line_full.fetch_add(1, Relaxed);
                    batch.give(f.buf);
                }
            }
        }
        if got < BATCH {
            return Ok(true);
        }
    }
    Ok(false)
}

/// [`receive`] from `from`, saying since when the socket is known to be empty (None: a
/// flood is left waiting).
pub(super) fn read_all(
    from: &PacketSocket,
    line: &mut DelayLine<Frame>,
    counters: &Counters,
    batch: &mut Batch,
    clock: &Clock,
) -> io::Result<Option<u64>> {
    let before = clock.now();
    Ok(receive(from, line, counters, batch, clock)?.then_some(before))
}

/// When a frame stamped `wall` (wall-clock ns) by the kernel arrived, on the emulator's
/// clock, read at `now` when the wall clock was `offset` ahead of it. A clock step could
/// put the stamp anywhere, and a frame that came before the clock started (between the
/// socket's opening and the first read) has no time on it: such stamps, and any more
/// than 10 ms old, count as `now`. (A negative time once wrapped to 2^64 − x: that
/// frame, and every frame behind it, would have left never.)
pub(super) fn on_clock(wall: i128, offset: i128, now: u64) -> u64 {
    let mono = wall - offset;
    let earliest = (i128::from(now) - 10_000_000).max(0);
    if (earliest..=i128::from(now)).contains(&mono) {
        mono as u64
    } else {
        now
    }
}

/// Writes to `to` every frame of `line` that will be due by the time it reaches the next
/// node if written at `now` (`cost` estimates how long that takes), and asks for a
/// transmit stamp on one frame now and then to keep that estimate up to date. Each
/// frame's lateness is counted, and the part of it that passed while the thread was in
/// its poll.
pub(super) fn transmit(
    line: &mut DelayLine<Frame>,
    at: Pass<'_>,
    to: &PacketSocket,
    cost: &mut SendCost,
    counters: &Counters,
    batch: &mut Batch,
    clock: &Clock,
) -> io::Result<()> {
    let Pass { now, polls } = at;
    let arrives = now + cost.estimate();
    loop {
        batch.out.clear();
        let mut late_ns = 0;
        while batch.out.len() < BATCH {
            match line.pop_due(arrives) {
                Some((due, f)) => {
                    let late = arrives - due;
                    late_ns += late;
                    counters.late_histogram[late_bucket(late)].fetch_add(1, Relaxed);
                    let woke_late = polls.overdue_within(late, now);
                    counters.woke_late_histogram[late_bucket(woke_late)].fetch_add(1, Relaxed);
                    if late > LATE {
                        counters.late.fetch_add(1, Relaxed);
                        counters.max_late_us.fetch_max(late / 1000, Relaxed);
                    }
                    batch.out.push(f)
                }
                None => break,
            }
        }
        if batch.out.is_empty() {
            return Ok(());
        }
        counters.late_total_ns.fetch_add(late_ns, Relaxed);
        for (i, f) in batch.out.iter_mut().enumerate() {
            batch.iov[i] = libc::iovec {
                iov_base: f.buf.as_mut_ptr().cast(),
                iov_len: f.len,
            };
            // SAFETY: plain old data.
            let mut h: libc::msghdr = unsafe { zeroed() };
            h.msg_iov = &mut batch.iov[i];
            h.msg_iovlen = 1;
            batch.msgs[i] = libc::mmsghdr {
                msg_hdr: h,
                msg_len: 0,
            };
        }
        let total = batch.out.len();
        if cost.wants_sample(now) {
            // The first frame carries a control message asking for a software transmit
            // stamp, which the veth driver takes as it hands the frame on.
            let c = &mut batch.control[0];
            c.fill(0);
            let h = &mut batch.msgs[0].msg_hdr;
            h.msg_control = c.as_mut_ptr().cast();
            // SAFETY: CMSG_SPACE is arithmetic; the buffer is CONTROL bytes, far more.
            h.msg_controllen = unsafe { libc::CMSG_SPACE(size_of::<u32>() as u32) } as _;
            // SAFETY: the header points at a zeroed, aligned buffer large enough for one
            // control message carrying a u32.
            unsafe {
                let cm = libc::CMSG_FIRSTHDR(h);
                (*cm).cmsg_level = libc::SOL_SOCKET;
                (*cm).cmsg_type = SO_TIMESTAMPING;
                (*cm).cmsg_len = libc::CMSG_LEN(size_of::<u32>() as u32) as _;
                std::ptr::write_unaligned(
                    libc::CMSG_DATA(cm).cast::<u32>(),
                    libc::SOF_TIMESTAMPING_TX_SOFTWARE,
                );
            }
            cost.sent_sample(clock.now());
        }
        let mut sent = 0;
        while sent < total {
            // SAFETY: the headers from `sent` on point into frames and iovecs that live
            // in `batch` for the call.
            let n = unsafe {
                libc::sendmmsg(
                    to.fd.as_raw_fd(),
                    batch.msgs.as_mut_ptr().add(sent),
                    (total - sent) as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if n > 0 {
                let n = n as usize;
                let head = if batch.frame > FRAME { VNET_HDR } else { 0 };
                let bytes: usize = batch.out[sent..sent + n].iter().map(|f| f.len - head).sum();
                counters.forwarded.fetch_add(n as u64, Relaxed);
                counters.forwarded_bytes.fetch_add(bytes as u64, Relaxed);
                sent += n;
                continue;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => {}
                // The device or its queue refused this frame: count it and go on.
                Some(libc::EAGAIN | libc::ENOBUFS | libc::EMSGSIZE) => {
                    counters.emulator_drops.fetch_add(1, Relaxed);
                    sent += 1;
                }
                _ => return Err(e),
            }
        }
        let mut out = std::mem::take(&mut batch.out);
        for f in out.drain(..) {
            batch.give(f.buf);
        }
        batch.out = out;
    }
}

/// A pass of the forwarding loop writing its due frames: when (each frame's lateness is
/// measured at it), and when the thread was last in its poll.
#[derive(Clone, Copy)]
pub(super) struct Pass<'a> {
    pub(super) now: u64,
    pub(super) polls: &'a RecentPolls,
}

/// A poll of the forwarding loop, as it ended.
pub(super) struct Slept {
    /// When it asked to be woken: None without a timeout, or when that time had passed
    /// as it began (a backlog's pass, not a sleep).
    pub(super) asked: Option<u64>,
    /// When it returned.
    pub(super) woke: u64,
    /// What it returned: 0 when the timer ended it, more when a socket did, less when a
    /// signal interrupted it.
    pub(super) rc: libc::c_int,
}

impl Slept {
    /// How late the thread came back after the time it asked for: learnt for the margin
    /// when the timer woke it, and counted in `wakeups` whenever it came back at or
    /// after that time — by the timer, or by a socket event (a frame, a transmit stamp)
    /// that ended the poll then, as when the thread got a CPU only after its time
    /// (the poll then returns the event, not the timeout: leaving it out would leave
    /// out the wake-ups that waited longest on a busy host). A poll a socket ended
    /// before its time, or a signal interrupted, was no late wake-up.
    pub(super) fn settle(&self, wake: &mut WakeMargin, wakeups: &[AtomicU64; LATE_BUCKETS]) {
        let Some(t) = self.asked else {
            return;
        };
        if self.rc < 0 || (self.rc > 0 && self.woke < t) {
            return;
        }
        let late = self.woke.saturating_sub(t);
        if self.rc == 0 {
            wake.learn(late);
        }
        wakeups[late_bucket(late)].fetch_add(1, Relaxed);
    }
}

/// Sleeps in a poll of `fds` from `now` until `target` on the clock (None: until an
/// event): what ppoll returned.
pub(super) fn sleep(fds: &mut [libc::pollfd], target: Option<u64>, now: u64) -> libc::c_int {
    let timeout = target.map(|t| {
        let wait = t.saturating_sub(now);
        libc::timespec {
            tv_sec: (wait / 1_000_000_000) as libc::time_t,
            tv_nsec: (wait % 1_000_000_000) as libc::c_long,
        }
    });
    // SAFETY: `fds` and the optional timeout live for the call.
    unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            timeout.as_ref().map_or(std::ptr::null(), |t| t as *const _),
            std::ptr::null(),
        )
    }
}

/// After a poll said `socket` has an error queued: a transmit stamp updates `cost` (the
/// cost of writing to it) and `counters.send_cost_ns`; an error saying its interface
/// went away is `Ok(false)` (the topology was taken down); any other error is said, on
/// behalf of `what` ("link l1"), and forwarding goes on.
pub(super) fn error_queue(
    socket: &PacketSocket,
    cost: &mut SendCost,
    counters: &Counters,
    clock: &Clock,
    what: &str,
) -> io::Result<bool> {
    match socket.transmit_stamps()? {
        Some(wall) => {
            cost.stamped((wall - clock.wall_offset()).max(0) as u64);
            counters.send_cost_ns.store(cost.estimate(), Relaxed);
        }
        None => match socket.error() {
            0 => {}
            e if link_gone(&io::Error::from_raw_os_error(e)) => return Ok(false),
            e => eprintln!(
                "flowlab net emulator: {what}: {}",
                io::Error::from_raw_os_error(e)
            ),
        },
    }
    Ok(true)
}

/// After a poll the timer ended (`rc` 0), spins from `now` to `next`, the due time it
/// woke `margin` early for: the clock's time when it stops.
pub(super) fn spin_to(
    clock: &Clock,
    now: u64,
    rc: libc::c_int,
    next: Option<u64>,
    margin: u64,
) -> u64 {
    let mut now = now;
    if let (0, Some(due)) = (rc, next) {
        while now < due && due - now <= margin {
            std::hint::spin_loop();
            now = clock.now();
        }
    }
    now
}

/// Appends `events` to a trace-driven direction's log, and flushes it (a log that cannot
/// be written is given up: forwarding goes on).
fn write_log(w: &mut io::BufWriter<std::fs::File>, events: &[crate::trace::LogEvent]) {
    use std::io::Write;
    let mut write = || -> io::Result<()> {
        for e in events {
            writeln!(w, "{}", e.line())?;
        }
        w.flush()
    };
    if let Err(e) = write() {
        eprintln!("flowlab net emulator: writing a link's log: {e}");
    }
}

/// Whether `e` says the socket's interface went away (the topology was taken down).
pub(super) fn link_gone(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENETDOWN | libc::ENODEV | libc::ENXIO)
    )
}

/// Forwards one link's frames both ways between sockets `a` and `b` until their
/// interfaces go away (the topology was taken down) or an error occurs.
pub(super) fn forward(
    a: PacketSocket,
    b: PacketSocket,
    link: &EmulatedLink,
    counters: &LinkCounters,
    pending: &Pending<(LineSpec, LineSpec)>,
    seed: u64,
) -> io::Result<()> {
    let line = |s: &LineSpec, seed| {
        DelayLine::<Frame>::new(
            Duration::from_micros(s.delay_us),
            Duration::from_micros(s.jitter_us),
            s.loss,
            s.limit,
            seed,
        )
    };
    let mut ab = line(&link.a_to_b, seed);
    let mut ba = line(&link.b_to_a, seed.rotate_left(32) ^ 0x9e37_79b9);
    // A trace-driven direction's queue, and its log if one is asked for.
    if let Some(t) = &link.a_to_b_trace {
        ab = ab.behind(t.queue(seed ^ 0x5eed)?);
    }
    if let Some(t) = &link.b_to_a_trace {
        ba = ba.behind(t.queue(seed.rotate_left(17))?);
    }
    let mut logs = [None, None];
    for (k, (trace, line, c, way)) in [
        (&link.a_to_b_trace, &mut ab, &counters.a_to_b, "a→b"),
        (&link.b_to_a_trace, &mut ba, &counters.b_to_a, "b→a"),
    ]
    .into_iter()
    .enumerate()
    {
        let Some(t) = trace else {
            continue;
        };
        c.traced.store(true, Relaxed);
        logs[k] = t.open_log(&link.name, way)?;
        if logs[k].is_some() {
            line.record();
        }
    }
    set_int(&a.fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
    set_int(&b.fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
    // Wake on time: the default 50 µs timer slack would add to every delay.
    // SAFETY: prctl with an integer argument.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    // The highest nice level (root may take it): on a machine whose CPUs are busy with
    // other work, an ordinary thread waits its turn, often milliseconds, and a path's
    // 95th-percentile RTT through three links rose 3.5 ms over the topology's on the
    // 2-vCPU development machine under `stress-ng --cpu 2`; at −20 it stays within
    // 0.3 ms. Not real-time priority (SCHED_FIFO): that cut late frames at 85 Mbit/s
    // too, but made every crossing ~45 µs slower when idle, and when the thread kept a
    // CPU busy (1 Gbit/s and more) the kernel's protection of ordinary tasks stopped it
    // for 45–65 ms at a time. Late frames are counted (`late`, `max_late_us`) for
    // `net status`.
    // SAFETY: plain calls; on Linux a nice level belongs to one thread, named by its id.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, -20) };
    let clock = Clock {
        start: Instant::now(),
    };
    let mut batch = Batch::new(if link.gso { SUPER_FRAME } else { FRAME });
    let mut stats_due = Duration::from_secs(1);
    // Timer wake-ups come late (25 µs at the median, 95 µs at the 99th percentile from an
    // idle vCPU on the development VM, more than the configured delay can absorb when a
    // path crosses several links): the thread asks to be woken early by a margin learnt
    // as it goes, and spins the rest.
    let mut wake = WakeMargin::new();
    // Frames a→b are written to `b`, whose transmit stamps measure that direction.
    let (mut cost_ab, mut cost_ba) = (SendCost::new(), SendCost::new());
    // When each socket was last seen empty (by a read that left nothing, or a poll that
    // found nothing), on the emulator's clock: what arrived since may be unread. None
    // when not known (a read left a flood waiting, a poll was interrupted).
    let (mut empty_a, mut empty_b) = (Some(0), Some(0));
    let mut polls = RecentPolls::default();
    loop {
        let now = clock.now();
        let slept_at = now;
        // When the next frame must be written to reach the next node on time.
        let next = [
            ab.next_due().map(|d| d.saturating_sub(cost_ab.estimate())),
            ba.next_due().map(|d| d.saturating_sub(cost_ba.estimate())),
        ]
        .into_iter()
        .flatten()
        .min();
        let margin = wake.margin();
        let target = next.map(|due| due.saturating_sub(margin));
        // A socket whose frames cannot be due before the thread wakes anyway is not
        // watched for them (`arrivals_can_wait`); it is read once the thread is up and
        // the frames then due have gone.
        let waits = |line: &DelayLine<Frame>, cost: &SendCost, empty: Option<u64>| {
            let (Some(since), Some(next)) = (empty, next) else {
                return false;
            };
            arrivals_can_wait(since, next, line.least_delay_ns(), cost.estimate())
        };
        let (wait_a, wait_b) = (waits(&ab, &cost_ab, empty_a), waits(&ba, &cost_ba, empty_b));
        let watch = |waits: bool| if waits { 0 } else { libc::POLLIN };
        // POLLERR comes back whether asked for or not: transmit stamps on the error
        // queue, or the socket's error when its interface went away.
        let mut fds = [
            libc::pollfd {
                fd: a.fd.as_raw_fd(),
                events: watch(wait_a),
                revents: 0,
            },
            libc::pollfd {
                fd: b.fd.as_raw_fd(),
                events: watch(wait_b),
                revents: 0,
            },
            // A change from `net set`.
            libc::pollfd {
                fd: pending.fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let rc = sleep(&mut fds, target, now);
        let woke = clock.now();
        // From the top of the pass: its setup before the poll (well under a µs) is
        // counted in rather than read off the clock a second time.
        polls.record(slept_at, woke);
        let slept = Slept {
            asked: target.filter(|&t| t > slept_at),
            woke,
            rc,
        };
        slept.settle(&mut wake, &counters.wakeup_late_histogram);
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        if fds[..2]
            .iter()
            .any(|f| f.revents & (libc::POLLHUP | libc::POLLNVAL) != 0)
        {
            return Ok(());
        }
        // Before this pass reads: what arrived from now on meets the new line.
        if fds[2].revents & libc::POLLIN != 0 {
            if let Some((to_b, to_a)) = pending.take().pop() {
                for (line, s) in [(&mut ab, to_b), (&mut ba, to_a)] {
                    line.set(
                        Duration::from_micros(s.delay_us),
                        Duration::from_micros(s.jitter_us),
                        s.loss,
                        s.limit,
                    );
                }
            }
        }
        // Frames written to `a` go b → a: its stamps measure that direction.
        let what = format!("link {}", link.name);
        for (i, socket, cost, c) in [
            (0, &a, &mut cost_ba, &counters.b_to_a),
            (1, &b, &mut cost_ab, &counters.a_to_b),
        ] {
            if fds[i].revents & libc::POLLERR != 0 && !error_queue(socket, cost, c, &clock, &what)?
            {
                return Ok(());
            }
        }
        // A watched socket is read if the poll said so, and was otherwise empty when the
        // poll returned (an interrupted poll said nothing). Unwatched ones wait until the
        // due frames have gone: nothing on them can be due sooner.
        for (waited, fd, socket, line, c, empty) in [
            (wait_a, &fds[0], &a, &mut ab, &counters.a_to_b, &mut empty_a),
            (wait_b, &fds[1], &b, &mut ba, &counters.b_to_a, &mut empty_b),
        ] {
            if waited {
                continue;
            }
            *empty = if fd.revents & libc::POLLIN != 0 {
                match read_all(socket, line, c, &mut batch, &clock) {
                    Err(e) if link_gone(&e) => return Ok(()),
                    r => r?,
                }
            } else {
                (rc >= 0).then_some(woke)
            };
        }
        // Woken by the timer: spin to the due time.
        let now = spin_to(&clock, clock.now(), rc, next, margin);
        let at = Pass { now, polls: &polls };
        let mut send =
            |line, to, cost, counters| transmit(line, at, to, cost, counters, &mut batch, &clock);
        send(&mut ab, &b, &mut cost_ab, &counters.a_to_b)?;
        send(&mut ba, &a, &mut cost_ba, &counters.b_to_a)?;
        for (waited, socket, line, c, empty) in [
            (wait_a, &a, &mut ab, &counters.a_to_b, &mut empty_a),
            (wait_b, &b, &mut ba, &counters.b_to_a, &mut empty_b),
        ] {
            if waited {
                *empty = match read_all(socket, line, c, &mut batch, &clock) {
                    Err(e) if link_gone(&e) => return Ok(()),
                    r => r?,
                };
            }
        }
        if Duration::from_nanos(now) >= stats_due {
            stats_due += Duration::from_secs(1);
            let [log_ab, log_ba] = &mut logs;
            for (line, c, log) in [
                (&mut ab, &counters.a_to_b, log_ab),
                (&mut ba, &counters.b_to_a, log_ba),
            ] {
                line.idle_until(now);
                if let Some(w) = log {
                    write_log(w, &line.take_log());
                }
                c.unused_opportunities
                    .store(line.unused_opportunities(), Relaxed);
                c.early_drops.store(line.early_drops(), Relaxed);
            }
            counters
                .a_to_b
                .emulator_drops
                .fetch_add(a.kernel_drops(), Relaxed);
            counters
                .b_to_a
                .emulator_drops
                .fetch_add(b.kernel_drops(), Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::OwnedFd;

    const MS: i128 = 1_000_000;

    #[test]
    fn arrival_stamps_are_trusted_only_within_the_last_10_ms_of_the_clock() {
        let offset = 1_700_000_000_000 * MS;
        let now = 50_000_000u64;
        // Stamped 3 ms before the read: kept.
        assert_eq!(on_clock(offset + 47 * MS, offset, now), 47_000_000);
        // From the future or older than 10 ms (a clock step): the read's time.
        assert_eq!(on_clock(offset + 51 * MS, offset, now), now);
        assert_eq!(on_clock(offset + 39 * MS, offset, now), now);
    }

    #[test]
    fn a_frame_from_before_the_clock_started_arrives_now_not_at_the_end_of_time() {
        let offset = 1_700_000_000_000 * MS;
        // Read 2 ms after the clock started; the frame came 1 ms before it did.
        assert_eq!(on_clock(offset - MS, offset, 2_000_000), 2_000_000);
        assert_eq!(on_clock(offset, offset, 2_000_000), 0);
    }

    #[test]
    fn transmit_writes_the_due_frames_and_books_their_lateness_and_its_polls_part() {
        use std::os::unix::net::UnixDatagram;
        const US: u64 = 1_000;
        // Any datagram socket takes sendmmsg: a pair stands in for the next node's.
        let (ours, theirs) = UnixDatagram::pair().expect("socket pair");
        let to = PacketSocket {
            fd: OwnedFd::from(ours),
        };
        let mut line = DelayLine::new(Duration::from_millis(1), Duration::ZERO, 0.0, 16, 1);
        let frame = |byte: u8| {
            let mut buf = new_buffer(FRAME);
            buf[..3].fill(byte);
            Frame { buf, len: 3 }
        };
        // Due at 1.0 ms and at 1.3 ms.
        line.push(0, frame(b'a'));
        line.push(300 * US, frame(b'b'));
        // The thread was in its poll until 1.15 ms (woken late), up since: at 1.2 ms
        // the first frame is 200 µs late, 150 of them passed in the poll.
        let mut polls = RecentPolls::default();
        polls.record(400 * US, 1_150 * US);
        let now = 1_200 * US;
        let mut cost = SendCost::new();
        // A stamp already pending: no control message (a Unix socket refuses one).
        cost.sent_sample(now);
        let counters = Counters::default();
        let mut batch = Batch::new(FRAME);
        let clock = Clock {
            start: Instant::now(),
        };
        let pass = Pass { now, polls: &polls };
        transmit(
            &mut line, pass, &to, &mut cost, &counters, &mut batch, &clock,
        )
        .expect("transmit");
        let mut got = [0u8; 16];
        assert_eq!(theirs.recv(&mut got).expect("the due frame"), 3);
        assert_eq!(&got[..3], b"aaa");
        theirs.set_nonblocking(true).expect("nonblocking");
        assert!(
            theirs.recv(&mut got).is_err(),
            "a frame not yet due was written"
        );
        assert_eq!(line.len(), 1);
        let stats = DirectionStats::from(&counters);
        assert_eq!((stats.forwarded, stats.forwarded_bytes), (1, 3));
        assert_eq!(stats.late_total_ns, 200 * US);
        let only = |bucket: usize| {
            let mut h = vec![0; bucket + 1];
            h[bucket] = 1;
            h
        };
        assert_eq!(stats.late_histogram, only(late_bucket(200 * US)));
        assert_eq!(stats.woke_late_histogram, only(late_bucket(150 * US)));
        // Not late enough to count as late.
        assert_eq!((stats.late, stats.max_late_us), (0, 0));
    }

    #[test]
    fn a_wake_up_is_counted_when_the_thread_came_back_at_or_after_its_time() {
        const US: u64 = 1_000;
        let counted = |slept: Slept| {
            let mut wake = WakeMargin::new();
            let before = wake.margin();
            let wakeups = LinkCounters::default().wakeup_late_histogram;
            slept.settle(&mut wake, &wakeups);
            let h = trimmed(&wakeups);
            (
                h.iter().sum::<u64>(),
                h.len().checked_sub(1),
                wake.margin() != before,
            )
        };
        let asked = Some(1_000 * US);
        let at = |woke: u64, rc| Slept { asked, woke, rc };
        let bucket = |late| Some(late_bucket(late));
        // The timer, 30 µs late: counted, and learnt for the margin.
        assert_eq!(counted(at(1_030 * US, 0)), (1, bucket(30 * US), true));
        // A frame woke it after its time (the timer had fired while it waited for a
        // CPU): counted, not learnt (a frame's wake-up says nothing of the timer's).
        assert_eq!(counted(at(1_200 * US, 1)), (1, bucket(200 * US), false));
        // A frame woke it before its time, a signal interrupted it, or it never slept
        // (no timeout, or one already past): no wake-up to count.
        assert_eq!(counted(at(900 * US, 1)), (0, None, false));
        assert_eq!(counted(at(1_200 * US, -1)), (0, None, false));
        let never = |asked| Slept {
            asked,
            woke: 1_200 * US,
            rc: 0,
        };
        assert_eq!(counted(never(None)), (0, None, false));
    }
}
