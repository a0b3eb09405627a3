//! What a check measures over a group of pairs at once: the idle RTT, the TCP load with
//! echoes alongside it (the RTT under load), the random loss of paced UDP, and what the
//! host and its emulator added meanwhile. Echoes are UDP probes to the destination's
//! `flowlab serve` (its echo service, as `flowlab ping` sends them): no raw socket.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use flowlab_engine::ping::{LocalEcho, PingSpec, Quiet, ping};
use flowlab_engine::sysinfo::CpuTimes;
use flowlab_net::build::{self, ns_name};
use flowlab_net::check::{Measured, RTT_TOLERANCE, quantile_of_sum};
use flowlab_net::forward::LinkStats;
use flowlab_net::probe::{median, percentile};
use flowlab_results::result::TestResult;

use super::Load;
use super::clients::{Job, client, received, result, run_client, server};
use crate::Error;
use crate::error::io;

/// How long an echo is waited for.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// What [`measure`] found for one pair.
pub struct PairResult {
    pub measured: Measured,
    /// Each connection's throughput (receiver).
    pub connection_bps: Vec<f64>,
    /// The congestion control the sender used.
    pub congestion: Option<String>,
    /// Share of the machine's CPU time the hypervisor took during the load.
    pub host_steal_percent: Option<f64>,
    /// How many runs of echoes the idle RTT took ([`idle_rtts`]).
    pub idle_runs: u32,
}

/// Measures `jobs` together: idle RTTs one by one, then every TCP test at once with
/// probes alongside, then the loss of each lossy path one by one. Returns each job's
/// measurement and its connections' rates.
pub fn measure(jobs: &[Job<'_>], load: &Load) -> Result<Vec<PairResult>, Error> {
    let _servers = jobs.iter().map(server).collect::<Result<Vec<_>, _>>()?;
    let idle = idle_rtts(jobs)?;
    let loaded = under_load(jobs, load)?;
    let mut out = Vec::new();
    for ((job, loaded), idle) in jobs.iter().zip(loaded).zip(idle) {
        let v = &loaded.result;
        let (sum, streams) = received(v).ok_or_else(|| {
            Error::Failed(format!("{}: the TCP test produced no totals", job.name()))
        })?;
        let loss = if job.implied.loss > 0.0 {
            Some(random_loss(job, load)?)
        } else {
            None
        };
        out.push(PairResult {
            measured: Measured {
                rtt: idle.0,
                bps: sum.bits_per_second,
                loaded_rtt: loaded.echoes.iter().max().copied(),
                loaded_rtt_median: median(&loaded.echoes),
                loaded_rtt_p95: percentile(&loaded.echoes, 0.95),
                host_delay_p95: percentile(&loaded.host_echoes, 0.95),
                emulator_late_p95: loaded.emulator_late.0,
                emulator_late_p99: loaded.emulator_late.1,
                emulator_woke_late_p99: loaded.emulator_woke_late,
                emulator_wakeup_late_p99: loaded.emulator_wakeup_late,
                loss: loss.flatten(),
                shared: jobs.len() > 1,
            },
            connection_bps: streams.iter().map(|s| s.bits_per_second).collect(),
            host_steal_percent: loaded.steal,
            idle_runs: idle.1,
            congestion: v.end.as_ref().and_then(|e| e.congestion_local.clone()),
        });
    }
    Ok(out)
}

/// A thread sending echoes: their round trips, or why it could not.
type Echoing = JoinHandle<Result<Vec<Duration>, Error>>;

/// Round trips (the server's time subtracted) of the probes of one `flowlab ping` run
/// from this thread's namespace to `to`: UDP probes of 64 bytes, `interval` apart,
/// `count` of them (or until `until` is set).
fn echo_run(
    to: std::net::SocketAddr,
    count: Option<u64>,
    interval: Duration,
    until: Option<Arc<AtomicBool>>,
) -> Result<Vec<Duration>, Error> {
    let mut spec = PingSpec::new(&to.ip().to_string(), to.port());
    spec.count = count;
    spec.interval = interval;
    spec.timeout = PROBE_TIMEOUT;
    spec.until = until;
    let run =
        ping(&spec, &AtomicBool::new(false), &Quiet).map_err(io(format!("echoes to {to}")))?;
    Ok(run
        .probes
        .iter()
        .filter_map(|p| p.rtt_ns().map(Duration::from_nanos))
        .collect())
}

/// [`echo_run`] on a thread of its own in namespace `ns`.
fn echoes(
    ns: String,
    to: std::net::SocketAddr,
    count: Option<u64>,
    interval: Duration,
    until: Option<Arc<AtomicBool>>,
) -> Echoing {
    std::thread::spawn(move || {
        enter(&ns)?;
        echo_run(to, count, interval, until)
    })
}

/// What a thread sending echoes returned.
fn joined<T>(h: JoinHandle<Result<T, Error>>) -> Result<T, Error> {
    h.join()
        .map_err(|_| Error::Failed("an echo thread panicked".into()))?
}

/// Moves this thread into namespace `ns`, for good.
fn enter(ns: &str) -> Result<(), Error> {
    flowlab_net::netns::enter(ns).map_err(io(format!("entering {ns}")))
}

/// How many runs of idle echoes a path gets at most, and the pause before each after
/// the first.
const IDLE_RUNS: u32 = 3;
const IDLE_PAUSE: Duration = Duration::from_secs(1);

/// The idle RTT of a path: the median of one run of echoes, and how many runs were taken.
type IdleRtt = (Option<Duration>, u32);

/// The median of 20 echoes from each job's source to its destination's server, the
/// path idle, 10 ms apart; one job after the other. A median more than the tolerance off
/// the file's RTT is measured again, a second apart, up to [`IDLE_RUNS`] runs in all,
/// and the run closest to the file's is kept: a burst of the host's (another process's
/// work, a stolen vCPU) holds 20 echoes over 200 ms and passes, while an emulation that
/// is off is off in every run.
fn idle_rtts(jobs: &[Job<'_>]) -> Result<Vec<IdleRtt>, Error> {
    jobs.iter()
        .map(|job| {
            let ns = ns_name(job.topo, &job.pair.from);
            let to: std::net::SocketAddr = (job.to, job.port).into();
            let name = job.name();
            let (implied, judged) = (job.implied.rtt, job.implied.busy_stations == 0);
            joined(std::thread::spawn(move || {
                enter(&ns)?;
                // The first echo is not counted (it meets cold caches along the path). A
                // path that answers none of three carries nothing: said now, not after
                // twenty more.
                let mut answered = false;
                for _ in 0..3 {
                    if !echo_run(to, Some(1), Duration::ZERO, None)?.is_empty() {
                        answered = true;
                        break;
                    }
                }
                if !answered {
                    return Err(Error::Failed(format!(
                        "{name}: no reply to 3 echoes ({} s each) from the server's echo service",
                        PROBE_TIMEOUT.as_secs()
                    )));
                }
                let mut kept: Option<Duration> = None;
                for run in 1..=IDLE_RUNS {
                    if run > 1 {
                        std::thread::sleep(IDLE_PAUSE);
                    }
                    let rtt = median(&echo_run(to, Some(20), Duration::from_millis(10), None)?);
                    kept = closer(kept, rtt, implied);
                    // Beside busy stations the RTT is shown, not judged: one run.
                    if !judged || kept.is_some_and(|k| k.abs_diff(implied) <= RTT_TOLERANCE) {
                        return Ok((kept, run));
                    }
                }
                Ok((kept, IDLE_RUNS))
            }))
        })
        .collect()
}

/// Of the idle RTT `kept` so far and a new run's `rtt`, the one closer to `implied`; a
/// run that measured nothing (every echo lost) never replaces one that did.
fn closer(kept: Option<Duration>, rtt: Option<Duration>, implied: Duration) -> Option<Duration> {
    match (kept, rtt) {
        (Some(k), Some(r)) if r.abs_diff(implied) < k.abs_diff(implied) => Some(r),
        (Some(k), _) => Some(k),
        (None, r) => r,
    }
}

/// One pair's TCP test and what was seen beside it.
struct Loaded {
    result: TestResult,
    /// Echoes to the destination during the load.
    echoes: Vec<Duration>,
    /// Echoes to the source's own loopback, each right after one of `echoes`: what the
    /// busy host alone adds.
    host_echoes: Vec<Duration>,
    /// Share of the CPU the hypervisor took during the load (the same for every pair).
    steal: Option<f64>,
    /// The emulator's lateness over the echo's crossings, 95th and 99th percentiles.
    emulator_late: (Option<Duration>, Option<Duration>),
    /// The part of it the emulator's wake-ups account for, 99th percentile.
    emulator_woke_late: Option<Duration>,
    /// How late the threads of the links crossed came back from their sleeps, 99th
    /// percentile.
    emulator_wakeup_late: Option<Duration>,
}

/// Every job's TCP test at once, with echoes per pair alongside (one every path RTT +
/// 10 ms to the destination, and as many to an echo on the source's own loopback), the
/// hypervisor's steal and the emulator's lateness over the same time.
fn under_load(jobs: &[Job<'_>], load: &Load) -> Result<Vec<Loaded>, Error> {
    let stop = Arc::new(AtomicBool::new(false));
    let probers: Vec<_> = jobs
        .iter()
        .map(|job| {
            // About one echo in flight at a time, as a ping that waits for each reply
            // would send them: on a shallow queue counted in packets, every echo takes
            // a place the load could have used. On a shared medium's air each echo
            // takes a transmission there and one back (1.6 ms of 802.11b's at 11
            // Mbit/s): one every 50 ms at most, or the echoes alone would take a
            // seventh of the air the load is judged by.
            let mut every = job.implied.rtt + Duration::from_millis(10);
            if job.implied.on_air {
                every = every.max(Duration::from_millis(50));
            }
            let (ns, to) = (ns_name(job.topo, &job.pair.from), (job.to, job.port).into());
            echo_until(ns, to, every, stop.clone())
        })
        .collect();
    let cpu_before = CpuTimes::now();
    let topo = jobs.first().map_or("", |j| j.topo);
    // Any snapshot will do before (the first one once the emulator has written it).
    let emulator_before = emulator_stats(topo, SystemTime::UNIX_EPOCH);
    let tcp = tcp_tests(jobs, load);
    stop.store(true, Ordering::Release);
    let emulator_after = emulator_before
        .as_ref()
        .and_then(|_| emulator_stats(topo, SystemTime::now()));
    let steal = CpuTimes::now()
        .zip(cpu_before)
        .and_then(|(after, before)| after.steal_percent_since(&before));
    let echoes: Vec<(Vec<Duration>, Vec<Duration>)> = probers
        .into_iter()
        .map(|(to, host)| Ok((joined(to)?, joined(host)?)))
        .collect::<Result<_, Error>>()?;
    Ok(jobs
        .iter()
        .zip(tcp?)
        .zip(echoes)
        .map(|((job, result), (echoes, host_echoes))| {
            let (emulator_late, emulator_woke_late, emulator_wakeup_late) = emulator_before
                .as_deref()
                .zip(emulator_after.as_deref())
                .map_or(((None, None), None, None), |(before, after)| {
                    let q = |part, p| emulator_late(&job.crossings, before, after, part, p);
                    (
                        (q(Part::All, 0.95), q(Part::All, 0.99)),
                        q(Part::Woke, 0.99),
                        emulator_wakeup_late(&job.crossings, before, after, 0.99),
                    )
                });
            Loaded {
                result,
                echoes,
                host_echoes,
                steal,
                emulator_late,
                emulator_woke_late,
                emulator_wakeup_late,
            }
        })
        .collect())
}

/// Echoes from namespace `ns` to `to` and to an echo on the namespace's own loopback,
/// one each `every`, until `stop`: (to `to`, to loopback).
fn echo_until(
    ns: String,
    to: std::net::SocketAddr,
    every: Duration,
    stop: Arc<AtomicBool>,
) -> (Echoing, Echoing) {
    let path = echoes(ns.clone(), to, None, every, Some(stop.clone()));
    let host = std::thread::spawn(move || {
        enter(&ns)?;
        let local = LocalEcho::start().map_err(io("an echo on the source's loopback"))?;
        echo_run(local.address(), None, every, Some(stop))
    });
    (path, host)
}

/// Every job's TCP test, all started before any is waited for.
fn tcp_tests(jobs: &[Job<'_>], load: &Load) -> Result<Vec<TestResult>, Error> {
    // On an early return the other clients are killed as they drop, not left running.
    let clients: Vec<_> = jobs
        .iter()
        .map(|job| {
            // The first second (slow start, BBR's startup) is left out.
            let mut args = vec![
                "-t".to_string(),
                (load.seconds + 1).to_string(),
                "-O".into(),
                "1".into(),
                "-P".into(),
                job.pair.connections.to_string(),
            ];
            if let Some(b) = load.bitrate {
                args.extend(["-b".into(), b.to_string()]);
            }
            if let Some(cc) = &load.congestion {
                args.extend(["-C".into(), cc.clone()]);
            }
            Ok((client(job, &args)?, job))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    clients
        .into_iter()
        .map(|(c, job)| result(job, c)?.map_err(io(job.name())))
        .collect()
}

/// The random loss of `job`'s path (`None` when nothing was sent): small datagrams at
/// half the bottleneck, so the queues stay empty and every loss is the configured one.
fn random_loss(job: &Job<'_>, load: &Load) -> Result<Option<f64>, Error> {
    let rate = job.implied.bottleneck_bps.map_or(20_000_000, |r| r / 2);
    let args: Vec<String> = [
        "-u",
        "-b",
        &rate.to_string(),
        "-l",
        "200",
        "-k",
        &load.loss_packets.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let udp = run_client(job, &args)?;
    let sum = udp.end.as_ref().and_then(|e| e.sums.first());
    let sent = sum.and_then(|s| s.sender.as_ref()?.packets);
    let counted = sum.and_then(|s| s.receiver.as_ref()?.udp);
    let (Some(sent), Some(counted)) = (sent, counted) else {
        return Err(Error::Failed(format!(
            "{}: the UDP test produced no totals",
            job.name()
        )));
    };
    let received = counted.expected.saturating_sub(counted.lost);
    Ok((sent > 0).then(|| sent.saturating_sub(received) as f64 / sent as f64))
}

/// The emulator's counters of `topo` (`None` without an emulator), as its stats file
/// has them, once it has been written after `written_after` (the emulator writes it
/// about once a second, the first time a second after it started; at most 3 s are
/// waited).
fn emulator_stats(topo: &str, written_after: SystemTime) -> Option<Vec<LinkStats>> {
    let dir = build::state_dir();
    build::state(&dir, topo)?.emulator_pid?;
    let file = build::stats_file(&dir, topo);
    let deadline = Instant::now() + Duration::from_secs(3);
    while std::fs::metadata(&file)
        .and_then(|m| m.modified())
        .map_or(true, |m| m <= written_after)
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    serde_json::from_str(&std::fs::read_to_string(file).ok()?).ok()
}

/// The `q` quantile of how late the emulator's threads of the links in `crossings` came
/// back from their sleeps (each link once, its wake-ups between the two snapshots pooled
/// with the others'), on [`quantile_of_sum`]'s grid. None when no sleep of theirs ended at
/// or after its time meanwhile, or an emulator did not count them.
fn emulator_wakeup_late<'a>(
    crossings: &[(&str, bool)],
    before: &'a [LinkStats],
    after: &'a [LinkStats],
    q: f64,
) -> Option<Duration> {
    let mut links: Vec<&str> = crossings.iter().map(|&(link, _)| link).collect();
    links.sort_unstable();
    links.dedup();
    let mut pooled = Vec::new();
    for link in links {
        // A link's line, not a medium's busy stations' (named by the medium).
        let find = |all: &'a [LinkStats]| {
            all.iter()
                .find(|l| l.link == link && l.busy_stations.is_none())
        };
        let (Some(b), Some(a)) = (find(before), find(after)) else {
            continue;
        };
        pooled.extend(a.wakeup_late_since(b)?);
    }
    quantile_of_sum(&[pooled], q)
}

/// Which part of the emulator's frames' lateness [`emulator_late`] adds up.
#[derive(Clone, Copy)]
enum Part {
    /// All of it.
    All,
    /// The part that passed while its thread was in its poll
    /// (`DirectionStats::woke_late_since`): its wake-ups'.
    Woke,
}

/// The `q` quantile of the emulator's lateness (or `part` of it) added up over
/// `crossings`, from each crossing's frames between the two snapshots
/// ([`quantile_of_sum`]): what its waiting for a CPU may have added to an echo. A
/// crossing that carried no frame meanwhile adds nothing; an emulator that did not count
/// the part asked for gives None.
fn emulator_late(
    crossings: &[(&str, bool)],
    before: &[LinkStats],
    after: &[LinkStats],
    part: Part,
    q: f64,
) -> Option<Duration> {
    let mut stages = Vec::new();
    for &(link, from_a) in crossings {
        let find = |all: &[LinkStats]| {
            all.iter()
                .find(|l| l.link == link && l.busy_stations.is_none())
                .cloned()
        };
        let (Some(b), Some(a)) = (find(before), find(after)) else {
            continue;
        };
        let (now, earlier) = if from_a {
            (&a.a_to_b, &b.a_to_b)
        } else {
            (&a.b_to_a, &b.b_to_a)
        };
        let late = match part {
            Part::All => now.late_since(earlier),
            Part::Woke => now.woke_late_since(earlier)?,
        };
        if !late.is_empty() {
            stages.push(late);
        }
    }
    quantile_of_sum(&stages, q)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The run closest to the file's RTT is kept, from either side; a run whose echoes
    /// were all lost does not erase one that was measured.
    #[test]
    fn the_idle_run_closest_to_the_file_is_kept_and_a_lost_one_never_replaces_it() {
        let ms = Duration::from_millis;
        let implied = ms(80);
        assert_eq!(closer(None, Some(ms(82)), implied), Some(ms(82)));
        assert_eq!(closer(Some(ms(82)), Some(ms(79)), implied), Some(ms(79)));
        assert_eq!(closer(Some(ms(79)), Some(ms(82)), implied), Some(ms(79)));
        assert_eq!(closer(Some(ms(82)), None, implied), Some(ms(82)));
        assert_eq!(closer(None, None, implied), None);
    }

    fn link(name: &str, wakeups: Option<&[(usize, u64)]>) -> LinkStats {
        LinkStats {
            link: name.into(),
            wakeup_late_histogram: wakeups.map(|w| {
                let mut h = vec![0; flowlab_net::forward::LATE_BUCKETS];
                for &(bucket, n) in w {
                    h[bucket] = n;
                }
                h
            }),
            ..LinkStats::default()
        }
    }

    #[test]
    fn each_crossed_links_wake_ups_are_pooled_once() {
        // Buckets 20 and 36: 32 and 512 µs at their upper edges, 40 and 520 µs on the
        // 10 µs grid.
        let before = [
            link("l1", Some(&[])),
            link("l2", Some(&[])),
            link("l3", Some(&[])),
        ];
        let after = [
            link("l1", Some(&[(20, 98)])),
            link("l2", Some(&[(36, 2)])),
            // Not crossed: its late wake-ups do not count.
            link("l3", Some(&[(36, 1000)])),
        ];
        let there_and_back = [("l1", true), ("l2", true), ("l2", false), ("l1", false)];
        let q = |q| emulator_wakeup_late(&there_and_back, &before, &after, q);
        // 100 wake-ups, 2 of them late.
        assert_eq!(q(0.98), Some(Duration::from_micros(40)));
        assert_eq!(q(0.99), Some(Duration::from_micros(520)));
        // Each link's thread counted once however often it is crossed: l2's twice and
        // l1's once would make 4 late in 102.
        let one_way = [("l1", true), ("l2", true)];
        let uneven = [("l1", true), ("l2", true), ("l2", false)];
        for crossings in [&one_way[..], &uneven[..]] {
            let at = |q| emulator_wakeup_late(crossings, &before, &after, q);
            assert_eq!((at(0.98), at(0.99)), (q(0.98), q(0.99)), "{crossings:?}");
        }
        // No timer wake-up meanwhile: nothing to say.
        assert_eq!(emulator_wakeup_late(&one_way, &before, &before, 0.99), None);
        // An emulator that did not count them: unknown.
        let older = [link("l1", None), link("l2", None)];
        assert_eq!(emulator_wakeup_late(&one_way, &older, &older, 0.99), None);
    }
}
