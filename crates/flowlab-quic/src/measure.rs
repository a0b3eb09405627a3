//! `flowlab test --quic`: a QUIC test run as the engine runs a TCP or UDP one — the same
//! [`TestSpec`] in, the same start, intervals and end out (so the same tables, JSON and
//! study steps) — by the perf protocol's client.
//!
//! What QUIC adds to a TCP test's figures, and what it cannot say:
//! - an upload stream's receiver totals are the server's: its end of the stream comes
//!   once it has read every byte, so the bytes are the ones sent and the time is the
//!   draft's, from the stream's opening to the server's end;
//! - a download's sender is the server, which the protocol does not hear from: its
//!   totals are unknown, as is the server's CPU;
//! - the columns a TCP sender's rows fill come from the client's QUIC stack, per
//!   connection: packets declared lost (QUIC sends lost data again in new packets), the
//!   congestion window and the smoothed round trip. Streams sharing a connection show
//!   its figures on each row; a `[SUM]` row counts each connection once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use flowlab_engine::client::Observer;
use flowlab_proto::results::{PeerResults, StreamResults};
use flowlab_proto::trace::{StreamTrace, TraceSample};
use flowlab_results::result::{
    self, Interval, IntervalStream, IntervalSum, PeerInfo, PeerKind, QuicConnection, QuicEnd,
    StartInfo, StreamDirection, StreamFailure, StreamInfo, TcpInterval, TestResult,
};
use flowlab_results::spec::{Amount, Direction, TestSpec};

use crate::QuicError;
use crate::client::{self, Congestion, Figures, PathFigures, Running, StreamSpec};

/// The stack, as results name it.
pub const STACK: &str = "quinn 0.11";

/// How often the test looks for its streams' end and Ctrl-C between intervals.
const TICK: Duration = Duration::from_millis(10);

/// Runs the QUIC test `spec` asks for. `interrupt` (Ctrl-C) ends it early; what was
/// measured is still returned.
pub fn run(
    spec: &TestSpec,
    obs: &mut dyn Observer,
    interrupt: &AtomicBool,
) -> Result<TestResult, QuicError> {
    let congestion = match &spec.congestion {
        None => Congestion::default(),
        Some(name) => Congestion::parse(name).ok_or_else(|| QuicError::Congestion(name.clone()))?,
    };
    let server = flowlab_engine::reach::addresses(&spec.host, spec.port, spec.family)?[0];
    let streams = stream_specs(spec)?;
    let ids: Vec<(i64, StreamDirection)> = streams
        .iter()
        .enumerate()
        .map(|(i, s)| (flowlab_engine::stream::stream_id(i), direction_of(s)))
        .collect();
    // Read before the streams start, which the clock of the intervals starts with.
    let system = flowlab_engine::sysinfo::collect();
    let cpu0 = process_cpu_us();
    let wall0 = Instant::now();
    let running = Running::start(&client::Spec {
        server,
        server_name: spec.host.clone(),
        streams: streams.clone(),
        connection_each: spec.quic_connection_each,
        congestion,
        connect_timeout: spec.connect_timeout,
    })?;
    let t0 = Instant::now();
    let local = running
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let start = StartInfo {
        timestamp: SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        flowlab_version: env!("CARGO_PKG_VERSION").into(),
        spec: TestSpec {
            credentials: None,
            ..spec.clone()
        },
        local: local.clone(),
        remote: server.to_string(),
        peer: PeerInfo {
            kind: PeerKind::QuicPerf,
            version: None,
            features: Vec::new(),
            system: None,
        },
        cookie: String::new(),
        streams: ids
            .iter()
            .map(|&(id, direction)| StreamInfo {
                id,
                direction,
                local: local.clone(),
                remote: server.to_string(),
                sndbuf: running.buffers().sndbuf,
                rcvbuf: running.buffers().rcvbuf,
                congestion: Some(congestion.name().into()),
                mss: None,
                tos: None,
                snd_timeout_ms: None,
            })
            .collect(),
        system,
    };
    obs.started(&start);

    let mut intervals = Intervals::new(&ids, &streams, spec.quic_connection_each);
    let mut tracer = spec
        .trace
        .map(|period| Tracer::new(period, t0, &ids, &intervals.connection, congestion));
    let mut next = spec.interval.map(|p| t0 + p);
    let mut interrupted = false;
    // Ctrl-C ends the streams early, once.
    let mut heed = |running: &Running| {
        if interrupt.load(Ordering::Relaxed) && !interrupted {
            interrupted = true;
            running.stop();
        }
    };
    // Intervals run while the streams move bytes: an upload's last bytes then still on
    // their way (the stack holds up to twice its window) are the end's, as a TCP
    // sender's socket buffer is.
    while !running.moved_all() {
        heed(&running);
        let now = Instant::now();
        if let Some(t) = tracer.as_mut() {
            t.sample_if_due(&running, now);
        }
        if let (Some(due), Some(period)) = (next, spec.interval) {
            if now >= due {
                let iv = intervals.take(&running, (due - t0).as_secs_f64());
                obs.interval(&iv);
                next = Some(due + period);
                continue;
            }
        }
        let mut nap = next.map_or(TICK, |due| due.saturating_duration_since(now).min(TICK));
        if let Some(t) = &tracer {
            nap = nap.min(t.next.saturating_duration_since(now));
        }
        std::thread::sleep(nap);
    }
    // The figures as the last byte was handed over (or read), as a TCP stream's trace
    // ends with its socket's at its end.
    if let Some(t) = tracer.as_mut() {
        t.sample(&running, Instant::now());
    }
    // The last part of an interval, unless it is a sliver of one.
    if let Some(period) = spec.interval {
        let end = t0.elapsed().as_secs_f64();
        if end - intervals.last_end > period.as_secs_f64() / 10.0 {
            let iv = intervals.take(&running, end);
            obs.interval(&iv);
        }
    }
    while !running.done() {
        heed(&running);
        std::thread::sleep(TICK);
    }
    heed(&running);
    let figures = running.finish()?;
    let cpu = cpu0
        .zip(process_cpu_us())
        .map(|((u0, s0), (u1, s1))| CpuSpent {
            user_us: u1.saturating_sub(u0),
            system_us: s1.saturating_sub(s0),
            wall: wall0.elapsed(),
        });
    Ok(TestResult {
        schema: result::SCHEMA.into(),
        start,
        intervals: intervals.done,
        end: Some(end_info(
            &ids,
            &figures,
            congestion,
            spec.quic_connection_each,
            interrupted,
            cpu,
        )),
        trace: tracer.map(|t| t.finish(&ids, spec)),
        latency: None,
    })
}

/// `--trace` of a QUIC test: every period, each stream's connection's figures from its
/// stack ([`TraceSample`]'s RTT, UDP bytes and QUIC fields), on this end only (the perf
/// protocol carries nothing back from the server). Streams sharing a connection share
/// its samples; quinn's statistics have no bytes in flight, so no sample says what
/// limited the sender.
struct Tracer {
    period: Duration,
    t0: Instant,
    next: Instant,
    /// Which connection carries each stream.
    connection: Vec<usize>,
    streams: Vec<StreamTrace>,
}

impl Tracer {
    fn new(
        period: Duration,
        t0: Instant,
        ids: &[(i64, StreamDirection)],
        connection: &[usize],
        congestion: Congestion,
    ) -> Tracer {
        Tracer {
            period,
            t0,
            next: t0,
            connection: connection.to_vec(),
            streams: ids
                .iter()
                .map(|&(id, _)| StreamTrace {
                    id,
                    period_us: period.as_micros() as u64,
                    congestion: Some(congestion.name().into()),
                    truncated: false,
                    samples: Vec::new(),
                })
                .collect(),
        }
    }

    fn sample_if_due(&mut self, running: &Running, now: Instant) {
        if now >= self.next {
            self.sample(running, now);
            // A late wake-up takes one sample, not the ones it missed.
            while self.next <= now {
                self.next += self.period;
            }
        }
    }

    fn sample(&mut self, running: &Running, now: Instant) {
        let t_us = now.saturating_duration_since(self.t0).as_micros() as u64;
        let paths = running.paths();
        for (st, &c) in self.streams.iter_mut().zip(&self.connection) {
            let Some(p) = paths.get(c) else { continue };
            if st.samples.len() >= flowlab_engine::trace::MAX_SAMPLES {
                st.truncated = true;
                continue;
            }
            st.samples.push(trace_sample(p, t_us));
        }
    }

    fn finish(self, ids: &[(i64, StreamDirection)], spec: &TestSpec) -> result::Trace {
        let mut t = result::Trace::assemble(
            self.period.as_micros() as u64,
            ids,
            self.streams,
            Vec::new(),
        );
        t.diagnose(&spec.window_rates());
        t
    }
}

/// One sample of a QUIC connection's figures at `t_us`.
fn trace_sample(p: &PathFigures, t_us: u64) -> TraceSample {
    TraceSample {
        t_us,
        srtt_us: Some(p.rtt.as_micros() as u64),
        min_rtt_us: Some(p.min_rtt.as_micros() as u64),
        bytes_sent: Some(p.udp_tx_bytes),
        bytes_received: Some(p.udp_rx_bytes),
        quic_cwnd_bytes: Some(p.cwnd),
        quic_lost_packets: Some(p.lost_packets),
        quic_congestion_events: Some(p.congestion_events),
        ..TraceSample::default()
    }
}

/// Each stream of `spec`: `-P` of them each way it runs, the uploads first (as TCP's
/// streams are ordered); `-n` split between a direction's streams.
fn stream_specs(spec: &TestSpec) -> Result<Vec<StreamSpec>, QuicError> {
    let p = spec.parallel.max(1) as usize;
    let directions: Vec<client::Direction> = match spec.direction {
        Direction::Forward => vec![client::Direction::Upload; p],
        Direction::Reverse => vec![client::Direction::Download; p],
        Direction::Bidir => [
            vec![client::Direction::Upload; p],
            vec![client::Direction::Download; p],
        ]
        .concat(),
    };
    let amount = |i: usize| match spec.amount {
        Amount::Seconds(s) => Ok(client::Amount::Time(Duration::from_secs_f64(s))),
        // The first streams carry the remainder.
        Amount::Bytes(n) => {
            let (each, rest) = (n / p as u64, n % p as u64);
            Ok(client::Amount::Bytes(
                each + u64::from(((i % p) as u64) < rest),
            ))
        }
        Amount::Blocks(_) => Err(QuicError::Blocks),
    };
    directions
        .into_iter()
        .enumerate()
        .map(|(i, direction)| {
            Ok(StreamSpec {
                direction,
                amount: amount(i)?,
            })
        })
        .collect()
}

fn direction_of(s: &StreamSpec) -> StreamDirection {
    match s.direction {
        client::Direction::Upload => StreamDirection::Up,
        client::Direction::Download => StreamDirection::Down,
    }
}

/// Intervals made from the streams' counts and the connections' figures as they run.
struct Intervals {
    ids: Vec<(i64, StreamDirection)>,
    /// Which connection carries each stream.
    connection: Vec<usize>,
    last_end: f64,
    last_bytes: Vec<u64>,
    last_lost: Vec<u64>,
    done: Vec<Interval>,
}

impl Intervals {
    fn new(
        ids: &[(i64, StreamDirection)],
        streams: &[StreamSpec],
        connection_each: bool,
    ) -> Intervals {
        let n_conns = if connection_each { streams.len() } else { 1 };
        Intervals {
            ids: ids.to_vec(),
            connection: (0..streams.len())
                .map(|i| if connection_each { i } else { 0 })
                .collect(),
            last_end: 0.0,
            last_bytes: vec![0; streams.len()],
            last_lost: vec![0; n_conns],
            done: Vec::new(),
        }
    }

    /// The interval from the last one's end to `end` (seconds since the streams opened).
    fn take(&mut self, running: &Running, end: f64) -> Interval {
        let moved = running.moved();
        let paths = running.paths();
        let seconds = end - self.last_end;
        let lost: Vec<u64> = paths
            .iter()
            .zip(&self.last_lost)
            .map(|(p, last)| p.lost_packets.saturating_sub(*last))
            .collect();
        let mut streams = Vec::with_capacity(self.ids.len());
        for (i, &(id, direction)) in self.ids.iter().enumerate() {
            let bytes = moved[i].saturating_sub(self.last_bytes[i]);
            let c = self.connection[i];
            // The client's stack knows its own sending: an upload's.
            let tcp = (direction == StreamDirection::Up)
                .then(|| paths.get(c).map(|p| tcp_columns(p, lost[c])))
                .flatten();
            streams.push(IntervalStream {
                id,
                direction,
                bytes,
                bits_per_second: result::bps(bytes, seconds),
                tcp,
                udp: None,
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
            let retransmits = (direction == StreamDirection::Up)
                .then(|| connections_of(&self.connection, &self.ids, direction))
                .map(|cs| cs.iter().map(|&c| lost[c]).sum());
            sums.push(IntervalSum {
                direction,
                bytes,
                bits_per_second: result::bps(bytes, seconds),
                retransmits,
                udp: None,
            });
        }
        let iv = Interval {
            start: self.last_end,
            end,
            omitted: false,
            streams,
            sums,
            latency: None,
        };
        self.last_end = end;
        self.last_bytes = moved;
        self.last_lost = paths.iter().map(|p| p.lost_packets).collect();
        self.done.push(iv.clone());
        iv
    }
}

/// The connections carrying streams of `direction`, each once.
fn connections_of(
    connection: &[usize],
    ids: &[(i64, StreamDirection)],
    direction: StreamDirection,
) -> Vec<usize> {
    let mut cs: Vec<usize> = connection
        .iter()
        .zip(ids)
        .filter(|(_, (_, d))| *d == direction)
        .map(|(&c, _)| c)
        .collect();
    cs.sort_unstable();
    cs.dedup();
    cs
}

/// A TCP sender's columns, from a QUIC connection's figures (no RTT variation: the
/// stack does not report one).
fn tcp_columns(p: &PathFigures, lost: u64) -> TcpInterval {
    TcpInterval {
        retransmits: lost,
        cwnd_bytes: p.cwnd,
        rtt_us: p.rtt.as_micros() as u64,
        rttvar_us: 0,
    }
}

/// The test's end: each stream's totals as this end knows them, the connections'
/// figures, this process's CPU.
fn end_info(
    ids: &[(i64, StreamDirection)],
    f: &Figures,
    congestion: Congestion,
    connection_each: bool,
    interrupted: bool,
    cpu: Option<CpuSpent>,
) -> result::EndInfo {
    let mut local = Vec::new();
    let mut remote = Vec::new();
    let mut failed = Vec::new();
    let one_each = connection_each || f.streams.len() == 1;
    for (&(id, direction), st) in ids.iter().zip(&f.streams) {
        let lost = f.connections.get(st.connection).map(|p| p.lost_packets);
        let mine = StreamResults {
            id,
            bytes: st.bytes,
            retransmits: match (direction, lost) {
                (StreamDirection::Up, Some(lost)) if one_each => lost as i64,
                _ => -1,
            },
            start_time: 0.0,
            end_time: st.sent_seconds,
            ..StreamResults::default()
        };
        if direction == StreamDirection::Up && st.error.is_none() {
            // The server ended its side once it had read every byte.
            remote.push(StreamResults {
                id,
                bytes: st.bytes,
                retransmits: -1,
                start_time: 0.0,
                end_time: st.seconds,
                ..StreamResults::default()
            });
        }
        local.push(mine);
        if let (Some(e), false) = (&st.error, interrupted) {
            failed.push(StreamFailure {
                id,
                error: e.clone(),
            });
        }
    }
    let CpuSpent {
        user_us: user,
        system_us: system,
        wall,
    } = cpu.unwrap_or_default();
    let pct = |us: u64| us as f64 / wall.as_micros().max(1) as f64 * 100.0;
    let local = PeerResults {
        cpu_util_total: pct(user + system),
        cpu_util_user: pct(user),
        cpu_util_system: pct(system),
        sender_has_retransmits: 1,
        congestion_used: Some(congestion.name().into()),
        streams: local,
        server_output_json: None,
        server_output_text: None,
    };
    let remote = PeerResults {
        cpu_util_total: 0.0,
        cpu_util_user: 0.0,
        cpu_util_system: 0.0,
        sender_has_retransmits: -1,
        congestion_used: None,
        streams: remote,
        server_output_json: None,
        server_output_text: None,
    };
    let mut end = result::summarize(ids, false, &local, Some(&remote), interrupted);
    // Streams sharing a connection share its losses: the sum counts each connection once.
    let up_connections: Vec<usize> = {
        let connection: Vec<usize> = f.streams.iter().map(|s| s.connection).collect();
        connections_of(&connection, ids, StreamDirection::Up)
    };
    if let Some(sum) = end
        .sums
        .iter_mut()
        .find(|s| s.direction == StreamDirection::Up)
    {
        if let Some(sender) = sum.sender.as_mut() {
            sender.retransmits = Some(
                up_connections
                    .iter()
                    .filter_map(|&c| f.connections.get(c))
                    .map(|p| p.lost_packets)
                    .sum(),
            );
        }
    }
    end.failed_streams = failed;
    end.quic = Some(QuicEnd {
        stack: STACK.into(),
        congestion: congestion.name().into(),
        connection_each,
        connections: f
            .connections
            .iter()
            .zip(&f.handshakes)
            .map(|(p, h)| QuicConnection {
                handshake_ms: h.as_secs_f64() * 1000.0,
                rtt_us: p.rtt.as_micros() as u64,
                min_rtt_us: p.min_rtt.as_micros() as u64,
                cwnd_bytes: p.cwnd,
                lost_packets: p.lost_packets,
                lost_bytes: p.lost_bytes,
                congestion_events: p.congestion_events,
                sent_packets: p.sent_packets,
                mtu: p.mtu,
                udp_sent_bytes: p.udp_tx_bytes,
                udp_received_bytes: p.udp_rx_bytes,
            })
            .collect(),
    });
    end
}

/// The CPU time this process spent on a test, and the test's wall time.
#[derive(Debug, Clone, Copy, Default)]
struct CpuSpent {
    user_us: u64,
    system_us: u64,
    wall: Duration,
}

/// This process's user and system CPU time so far, µs: the QUIC stack's threads are
/// the test's (the caller only waits).
fn process_cpu_us() -> Option<(u64, u64)> {
    // SAFETY: an all-zero rusage is a valid value, and getrusage fills the one we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return None;
    }
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Some((us(ru.ru_utime), us(ru.ru_stime)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(direction: Direction, parallel: u32, amount: Amount) -> TestSpec {
        let mut s = TestSpec::new("localhost");
        s.direction = direction;
        s.parallel = parallel;
        s.amount = amount;
        s
    }

    #[test]
    fn a_directions_bytes_are_split_between_its_streams_to_the_byte() {
        let streams = stream_specs(&spec(Direction::Bidir, 3, Amount::Bytes(10))).expect("streams");
        let up: Vec<_> = streams
            .iter()
            .filter(|s| s.direction == client::Direction::Upload)
            .map(|s| s.amount)
            .collect();
        let down: Vec<_> = streams[3..].iter().map(|s| s.amount).collect();
        let b = client::Amount::Bytes;
        assert_eq!(up, [b(4), b(3), b(3)]);
        assert_eq!(down, [b(4), b(3), b(3)]);
        assert!(
            streams[..3]
                .iter()
                .all(|s| s.direction == client::Direction::Upload)
        );
        let timed = stream_specs(&spec(Direction::Reverse, 2, Amount::Seconds(1.5))).expect("ok");
        assert_eq!(
            timed,
            [StreamSpec {
                direction: client::Direction::Download,
                amount: client::Amount::Time(Duration::from_millis(1500)),
            }; 2]
        );
        assert!(matches!(
            stream_specs(&spec(Direction::Forward, 1, Amount::Blocks(5))),
            Err(QuicError::Blocks)
        ));
    }

    #[test]
    fn streams_sharing_a_connection_count_its_losses_once() {
        let ids = [
            (1, StreamDirection::Up),
            (3, StreamDirection::Up),
            (4, StreamDirection::Down),
        ];
        let stream = |direction, connection| client::StreamFigures {
            direction,
            connection,
            bytes: 1000,
            sent_seconds: 1.0,
            seconds: 1.1,
            error: None,
        };
        let path = |lost| PathFigures {
            lost_packets: lost,
            ..PathFigures::default()
        };
        let shared = Figures {
            streams: vec![
                stream(client::Direction::Upload, 0),
                stream(client::Direction::Upload, 0),
                stream(client::Direction::Download, 0),
            ],
            connections: vec![path(7)],
            handshakes: vec![Duration::from_millis(1)],
        };
        let e = end_info(&ids, &shared, Congestion::Cubic, false, false, None);
        let up = |e: &result::EndInfo| {
            e.sums
                .iter()
                .find(|s| s.direction == StreamDirection::Up)
                .and_then(|s| s.sender.as_ref())
                .and_then(|s| s.retransmits)
        };
        assert_eq!(up(&e), Some(7));
        // Per stream, a shared connection's losses are no one stream's.
        assert_eq!(
            e.streams[0].sender.as_ref().and_then(|s| s.retransmits),
            None
        );
        // The upload's receiver is the server's end: its time, the bytes sent.
        let rcv = e.streams[0].receiver.as_ref().expect("the server's end");
        assert_eq!((rcv.bytes, rcv.seconds), (1000, 1.1));
        // The download's sender is unknown.
        assert!(e.streams[2].sender.is_none());

        let each = Figures {
            streams: vec![
                stream(client::Direction::Upload, 0),
                stream(client::Direction::Upload, 1),
                stream(client::Direction::Download, 2),
            ],
            connections: vec![path(2), path(3), path(50)],
            handshakes: vec![Duration::from_millis(1); 3],
        };
        let e = end_info(&ids, &each, Congestion::Cubic, true, false, None);
        // The download's connection's losses are the client's acknowledgements', not
        // the upload's.
        assert_eq!(up(&e), Some(5));
        assert_eq!(
            e.streams[1].sender.as_ref().and_then(|s| s.retransmits),
            Some(3)
        );
        assert_eq!(e.quic.as_ref().map(|q| q.connections.len()), Some(3));
    }
}
