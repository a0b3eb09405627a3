//! The client's data phase: the streams run, intervals are reported as they end, and the
//! phase ends at the test's time or amount, on Ctrl-C, or when the server ends it.

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use flowlab_proto::State;
use flowlab_results::result::{
    self, Interval, IntervalStream, IntervalSum, StreamDirection, TcpInterval, UdpInterval,
};
use flowlab_results::spec::Transport;
use flowlab_results::spec::{Amount, TestSpec};

use super::latency::LoadProber;
use super::{ClientError, IDLE_WAKE, Observer, TICK, UDP_IDLE_END, refusal};
use crate::control::{self, Wake};
use crate::session::{DataSession, Snapshot};
use crate::stream::Role;

/// How the data phase ended.
pub(super) enum PhaseEnd {
    Normal,
    ServerTerminated,
    /// The receiving streams got nothing for `--rcv-timeout`.
    Stalled(Duration),
}

/// Where the data phase's intervals go: to the observer as they end, into `intervals`,
/// each with the round trips `latency`'s probes saw in it.
pub(super) struct Reports<'a> {
    pub obs: &'a mut dyn Observer,
    pub intervals: &'a mut Vec<Interval>,
    pub latency: Option<&'a LoadProber>,
}

/// The data phase: intervals reported as they end, until the test's time or amount is
/// done, Ctrl-C, or the server terminates it.
pub(super) fn run_data_phase(
    spec: &TestSpec,
    session: &mut DataSession,
    ctrl: &mut TcpStream,
    directions: &[(i64, StreamDirection)],
    reports: Reports<'_>,
    interrupt: &AtomicBool,
) -> Result<PhaseEnd, ClientError> {
    let Reports {
        obs,
        intervals,
        latency,
    } = reports;
    // Each interval gets the round trips of the probe replies that arrived in it.
    let with_latency = |mut iv: Interval| {
        iv.latency = latency.and_then(|l| l.between(iv.start, iv.end));
        iv
    };
    let omit = Duration::from_secs(spec.omit);
    // Intervals start from zero, not from a snapshot taken after the streams started.
    let mut last = vec![Snapshot::default(); session.streams.len()];
    let mut next_tick = spec.interval;
    let mut last_data = Instant::now();
    let mut last_rx = 0u64;
    // The tail of a UDP transfer may be lost: a receiver that has heard nothing for this
    // long (at least four datagram gaps at the target rate) is done.
    let gap = if spec.bitrate > 0 {
        Duration::from_secs_f64(spec.len as f64 * 8.0 / spec.bitrate as f64)
    } else {
        Duration::ZERO
    };
    let udp_idle_end = UDP_IDLE_END.max(gap * 4);
    // The loop sleeps until the next thing it must do: an interval report, the end of
    // the omitted seconds or of the test, a stream ending (the eventfd), or a message
    // from the server. Only a byte-bounded test whose end this side can tell only by
    // counting received bytes (UDP, or a peer that does not close its senders) looks at
    // the counters every TICK. Periodic wake-ups cost measurable throughput on loopback.
    let counts_to_end = !matches!(spec.amount, Amount::Seconds(_))
        && session.has(Role::Receive)
        && (spec.protocol == Transport::Udp || !session.cfg.drain_to_eof);
    let cap = if counts_to_end { TICK } else { IDLE_WAKE };
    loop {
        let now = session.ctl.epoch.elapsed();
        let mut deadline = now + cap;
        if let Some(tick) = next_tick {
            deadline = deadline.min(tick);
        }
        if session.omitting() {
            deadline = deadline.min(omit);
        }
        if let Amount::Seconds(t) = spec.amount {
            deadline = deadline.min(omit + Duration::from_secs_f64(t));
        }
        match control::wait_state(
            ctrl,
            session.ctl.ended.as_ref(),
            deadline.saturating_sub(now),
        ) {
            Ok(Wake::Timeout | Wake::Other) => {}
            Ok(Wake::State(State::ServerTerminate)) => return Ok(PhaseEnd::ServerTerminated),
            Ok(Wake::State(other)) => return Err(refusal(ctrl, other)),
            Err(e) => return Err(e.into()),
        }
        let now = session.ctl.epoch.elapsed();
        session.end_omit_if_due();
        if interrupt.load(Ordering::Acquire) {
            break;
        }
        if let (Some(iv), Some(tick)) = (spec.interval, next_tick) {
            if now >= tick {
                let snap = session.snapshot();
                let interval = with_latency(build_interval(
                    session,
                    &last,
                    &snap,
                    directions,
                    tick <= omit,
                ));
                obs.interval(&interval);
                intervals.push(interval);
                last = snap;
                next_tick = Some(tick + iv);
            }
        }
        let rx = session.total_bytes(Role::Receive);
        if rx > last_rx {
            last_rx = rx;
            last_data = Instant::now();
        }
        if let Some(limit) = spec.rcv_timeout {
            if session.has(Role::Receive) && last_data.elapsed() > limit {
                return Ok(PhaseEnd::Stalled(limit));
            }
        }
        let done = match spec.amount {
            Amount::Seconds(t) => now >= omit + Duration::from_secs_f64(t),
            Amount::Bytes(_) | Amount::Blocks(_) => {
                let target = match spec.amount {
                    Amount::Bytes(n) => n,
                    Amount::Blocks(k) => k.saturating_mul(spec.len as u64),
                    Amount::Seconds(_) => u64::MAX,
                };
                let sent_all = !session.has(Role::Send) || session.all_finished(Role::Send);
                let got_all = !session.has(Role::Receive)
                    || rx >= target
                    || session.all_finished(Role::Receive)
                    || (spec.protocol == Transport::Udp && last_data.elapsed() > udp_idle_end);
                // Bidirectional tests end when both directions are done.
                sent_all && got_all
            }
        };
        if done {
            break;
        }
    }
    // The last, partial interval, when it is long enough to mean something.
    if let Some(iv) = spec.interval {
        let snap = session.snapshot();
        let len_us = snap.first().map_or(0, |s| s.at_us) - last.first().map_or(0, |s| s.at_us);
        if len_us as f64 > iv.as_micros() as f64 * 0.1 {
            let interval = with_latency(build_interval(
                session,
                &last,
                &snap,
                directions,
                session.omitting(),
            ));
            obs.interval(&interval);
            intervals.push(interval);
        }
    }
    Ok(PhaseEnd::Normal)
}

/// The interval between two snapshots of every stream, per stream and summed per
/// direction.
fn build_interval(
    session: &DataSession,
    a: &[Snapshot],
    b: &[Snapshot],
    directions: &[(i64, StreamDirection)],
    omitted: bool,
) -> Interval {
    let start = a.first().map_or(0, |s| s.at_us) as f64 / 1e6;
    let end = b.first().map_or(0, |s| s.at_us) as f64 / 1e6;
    let secs = end - start;
    let mut streams = Vec::new();
    for ((s, (x, y)), &(_, direction)) in
        session.streams.iter().zip(a.iter().zip(b)).zip(directions)
    {
        let bytes = y.bytes - x.bytes;
        let tcp = y.tcp.map(|t| TcpInterval {
            retransmits: t.total_retrans - x.tcp.map_or(0, |p| p.total_retrans),
            cwnd_bytes: t.snd_cwnd_bytes,
            rtt_us: t.rtt_us,
            rttvar_us: t.rttvar_us,
        });
        let udp = y
            .udp
            .map(|u| u.since(&x.udp.unwrap_or_default()).interval());
        streams.push(IntervalStream {
            id: s.id,
            direction,
            bytes,
            bits_per_second: result::bps(bytes, secs),
            tcp,
            udp,
        });
    }
    let mut sums = Vec::new();
    for direction in [StreamDirection::Up, StreamDirection::Down] {
        let of: Vec<&IntervalStream> = streams
            .iter()
            .filter(|s| s.direction == direction)
            .collect();
        if of.is_empty() {
            continue;
        }
        let bytes = of.iter().map(|s| s.bytes).sum();
        let retransmits = of
            .iter()
            .map(|s| s.tcp.map(|t| t.retransmits))
            .sum::<Option<u64>>();
        let udp = of
            .iter()
            .map(|s| s.udp)
            .collect::<Option<Vec<_>>>()
            .map(|u| UdpInterval::sum(&u));
        sums.push(IntervalSum {
            direction,
            bytes,
            bits_per_second: result::bps(bytes, secs),
            retransmits,
            udp,
        });
    }
    Interval {
        start,
        end,
        omitted,
        streams,
        sums,
        latency: None,
    }
}
