//! `flowlab net check`: measures paths of a topology that is up (or built for the check)
//! and sets them beside what its file implies.
//!
//! Per pair: the idle RTT (median of 20 ICMP echoes from a raw socket in the source's
//! namespace), TCP throughput (`flowlab test` in the source against `flowlab serve` in the
//! destination, the first second left out) with ICMP echoes alongside it, each 10 ms
//! after the previous reply (the RTT under load), and, on paths with random loss, the loss of paced UDP. With
//! `--together`, every pair's TCP test runs at once, and each pair's max-min fair share
//! is given instead of judging its rate.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use flowlab_engine::sysinfo::CpuTimes;
use flowlab_net::build::{self, UpOptions, ns_name};
use flowlab_net::check::{
    LOSS_TOLERANCE, Measured, RATE_HIGH, RATE_LOW, RTT_TOLERANCE, deviations, jain_index,
    judged_rate, loss_bounds, max_min_shares, quantile_of_sum, queue_bound,
};
use flowlab_net::forward::LinkStats;
use flowlab_net::probe::{Pinger, median, percentile};
use flowlab_net::topology::{Kind, PathInfo, Plan, Topology};
use flowlab_report::net::{CheckedPath, FAIRNESS_CC, NetCheck};
use flowlab_report::result::{SideTotals, TestResult};
use flowlab_report::{json, table};

/// What `net check` sends over each path.
#[derive(Debug, Clone)]
pub struct Load {
    /// Seconds of TCP (after one left out).
    pub seconds: u64,
    /// TCP pacing rate; unlimited when `None`.
    pub bitrate: Option<u64>,
    /// TCP congestion control (both ends); the system's when `None`.
    pub congestion: Option<String>,
    /// UDP datagrams for the loss measurement.
    pub loss_packets: u64,
    /// All pairs' TCP tests at once.
    pub together: bool,
}

/// One pair to measure: from, to, parallel connections.
#[derive(Debug, Clone, PartialEq)]
struct Pair {
    from: String,
    to: String,
    connections: u32,
}

fn parse_pairs(list: Option<&str>, t: &Topology) -> anyhow::Result<Vec<Pair>> {
    let hosts: Vec<String> = t.hosts().cloned().collect();
    let Some(list) = list else {
        return Ok(hosts
            .iter()
            .enumerate()
            .flat_map(|(i, a)| {
                hosts[i + 1..].iter().map(move |b| Pair {
                    from: a.clone(),
                    to: b.clone(),
                    connections: 1,
                })
            })
            .collect());
    };
    list.split(',')
        .map(|p| {
            let (ends, n) = match p.split_once(':') {
                Some((ends, n)) => (
                    ends,
                    n.parse::<u32>()
                        .ok()
                        .filter(|n| (1..=128).contains(n))
                        .ok_or_else(|| {
                            anyhow::anyhow!("--pairs: '{p}': connections are 1 to 128")
                        })?,
                ),
                None => (p, 1),
            };
            let (a, b) = ends
                .split_once('-')
                .ok_or_else(|| anyhow::anyhow!("--pairs: '{p}' is not A-B or A-B:N"))?;
            for n in [a, b] {
                match t.nodes.get(n) {
                    Some(Kind::Host | Kind::Router) => {}
                    Some(Kind::Switch) => {
                        anyhow::bail!("--pairs: '{n}' is a switch (it has no address)")
                    }
                    None => anyhow::bail!("--pairs: '{n}' is not a node of {}", t.name),
                }
            }
            if a == b {
                anyhow::bail!("--pairs: '{p}' has the same node at both ends");
            }
            Ok(Pair {
                from: a.to_string(),
                to: b.to_string(),
                connections: n,
            })
        })
        .collect()
}

/// `to`'s address on the segment the path arrives by (a router has several).
fn address_towards(plan: &Plan<'_>, path: &PathInfo) -> Option<Ipv4Addr> {
    let to = path.nodes.last()?;
    let prev = path.nodes.get(path.nodes.len().checked_sub(2)?)?;
    plan.segments.iter().find_map(|s| {
        let here = s.members.iter().find(|(n, _)| n == to)?;
        let joins = s.members.iter().any(|(n, _)| n == prev) || s.switch.as_ref() == Some(prev);
        joins.then(|| Ipv4Addr::from(here.1))
    })
}

/// Takes the topology down when dropped, if the check built it.
struct Teardown(Option<String>);

impl Drop for Teardown {
    fn drop(&mut self) {
        if let Some(name) = &self.0 {
            if let Err(e) = build::down(name, &build::state_dir()) {
                eprintln!(
                    "flowlab: taking {name} down again failed: {e} (flowlab net down {name})"
                );
            }
        }
    }
}

/// A process killed and reaped when dropped (servers, and clients on an early return).
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn run(
    file: &Path,
    pairs: Option<&str>,
    load: Load,
    up: UpOptions,
    json: bool,
) -> anyhow::Result<()> {
    let t = crate::load_topology(file)?;
    let plan = Plan::of(&t);
    let pairs = parse_pairs(pairs, &t)?;
    build::preflight()?;
    let mut paths = Vec::new();
    for p in &pairs {
        let path = plan
            .path(&p.from, &p.to)
            .ok_or_else(|| anyhow::anyhow!("no path from {} to {}", p.from, p.to))?;
        let to = address_towards(&plan, &path)
            .ok_or_else(|| anyhow::anyhow!("{} has no address", p.to))?;
        paths.push((path, to));
    }
    let up_already = build::status().iter().any(|(n, _)| *n == t.name);
    let (_teardown, state) = if up_already {
        let state = build::state(&build::state_dir(), &t.name);
        // A backend asked for explicitly must be the one it runs on.
        let running = state.as_ref().and_then(|s| s.backend);
        if up.backend != build::Backend::Auto && running.is_some_and(|b| b != up.backend) {
            anyhow::bail!(
                "topology {} is up on the {} backend, not {}: measure it without --backend, or take it down first",
                t.name,
                running.map_or(String::new(), |b| b.to_string()),
                up.backend
            );
        }
        (Teardown(None), state)
    } else {
        let state = build::up(&t, &build::state_dir(), &up)?;
        (Teardown(Some(t.name.clone())), Some(state))
    };
    if load.together && pairs.len() > 1000 {
        anyhow::bail!("--together runs at most 1000 pairs at once (one server port each)");
    }
    let default_cc = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    // Which congestion control each round of measurements runs. Pairs that share links
    // are judged under cubic, as the seed's kernels ran them (a loss-based algorithm
    // shares fairly); where the system's default differs (bbr), a second round shows
    // what the default does, starvation included, rather than hide it.
    let rounds: Vec<Option<String>> = match (&load.congestion, load.together) {
        (Some(cc), _) => vec![Some(cc.clone())],
        (None, true) if default_cc != FAIRNESS_CC => {
            vec![Some(FAIRNESS_CC.into()), Some(default_cc.clone())]
        }
        (None, true) => vec![Some(FAIRNESS_CC.into())],
        (None, false) => vec![None],
    };
    let mut rows = Vec::new();
    let mut jain_by_cc = Vec::new();
    for cc in &rounds {
        let load = Load {
            congestion: cc.clone(),
            ..load.clone()
        };
        let (round, jain) = measure_round(&t, &pairs, &paths, &load).map_err(|e| {
            // A path that stopped carrying traffic: say whether the emulator did.
            match build::emulator_trouble(&build::state_dir(), &t.name) {
                Some(why) => anyhow::anyhow!("{e} (the link emulator: {why})"),
                None => e,
            }
        })?;
        if let (Some(cc), Some(j)) = (cc, jain) {
            jain_by_cc.push((cc.clone(), j));
        }
        rows.extend(round);
    }
    let backend = state
        .as_ref()
        .and_then(|s| s.backend)
        .map_or("none needed (tbf only)".to_string(), |b| b.to_string());
    let check = NetCheck {
        topology: t.name.clone(),
        backend,
        together: load.together,
        congestion_default: default_cc,
        load_seconds: load.seconds,
        // Under the first round's congestion control (cubic for pairs together unless
        // -C says otherwise); every round's in jain_index_by_congestion.
        jain_index: jain_by_cc.first().map(|(_, j)| *j),
        jain_index_by_congestion: jain_by_cc.into_iter().collect(),
        paths: rows,
        rounds,
        congestion_chosen: load.congestion.is_some(),
        rtt_tolerance_ms: RTT_TOLERANCE.as_secs_f64() * 1000.0,
        loss_tolerance_percent: LOSS_TOLERANCE * 100.0,
    };
    if json {
        println!("{}", json::document(&check)?);
    } else {
        print!("{}", table::net_check(&check));
    }
    Ok(())
}

/// Measures every pair (one at a time, or all at once with `--together`) under `load`,
/// into rows; with `--together`, also Jain's index over the pairs.
fn measure_round(
    t: &Topology,
    pairs: &[Pair],
    paths: &[(PathInfo, Ipv4Addr)],
    load: &Load,
) -> anyhow::Result<(Vec<CheckedPath>, Option<f64>)> {
    let groups: Vec<Vec<usize>> = if load.together {
        vec![(0..pairs.len()).collect()]
    } else {
        (0..pairs.len()).map(|i| vec![i]).collect()
    };
    let mut measured: Vec<Option<PairResult>> = (0..pairs.len()).map(|_| None).collect();
    let plan = Plan::of(t);
    let crossings: Vec<Vec<(&str, bool)>> = pairs
        .iter()
        .zip(paths)
        .map(|(p, (there, _))| {
            let back = plan
                .path(&p.to, &p.from)
                .map(|b| b.hops)
                .unwrap_or_default();
            there
                .hops
                .iter()
                .chain(&back)
                .map(|h| (t.links[h.link].name.as_str(), h.forward))
                .collect()
        })
        .collect();
    for group in groups {
        let jobs: Vec<Job<'_>> = group
            .iter()
            .enumerate()
            .map(|(k, &i)| Job {
                topo: &t.name,
                pair: &pairs[i],
                implied: &paths[i].0,
                to: paths[i].1,
                // One server port per pair of the group: 5201, 5202, …
                port: 5201 + k as u16,
                crossings: crossings[i].clone(),
            })
            .collect();
        for (i, m) in group.iter().zip(measure(&jobs, load)?) {
            measured[*i] = Some(m);
        }
    }
    // Fair shares: every connection is a flow over its pair's hops.
    let fair: Vec<Option<f64>> = if load.together {
        let mut flows = Vec::new();
        let mut owner = Vec::new();
        for (i, p) in pairs.iter().enumerate() {
            for _ in 0..p.connections {
                flows.push(
                    paths[i]
                        .0
                        .hops
                        .iter()
                        .map(|h| (h.link, h.forward))
                        .collect(),
                );
                owner.push(i);
            }
        }
        let shares = max_min_shares(&flows, |l, fwd| {
            let link = &t.links[l];
            if fwd {
                link.a_to_b.rate_bps
            } else {
                link.b_to_a.rate_bps
            }
        });
        (0..pairs.len())
            .map(|i| {
                owner
                    .iter()
                    .zip(&shares)
                    .filter(|(o, _)| **o == i)
                    .map(|(_, s)| *s)
                    .sum()
            })
            .collect()
    } else {
        vec![None; pairs.len()]
    };
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut rows = Vec::new();
    for (i, p) in pairs.iter().enumerate() {
        let implied = &paths[i].0;
        let Some(PairResult {
            measured: m,
            connection_bps,
            congestion,
            host_steal_percent,
        }) = measured[i].take()
        else {
            continue;
        };
        rows.push(CheckedPath {
            from: p.from.clone(),
            to: p.to.clone(),
            connections: p.connections,
            congestion,
            implied_rtt_ms: ms(implied.rtt),
            measured_rtt_ms: m.rtt.map(ms),
            queue_bound_ms: ms(queue_bound(implied, &m)),
            host_delay_p95_ms: m.host_delay_p95.map(ms),
            emulator_late_p95_ms: m.emulator_late_p95.map(ms),
            loaded_rtt_ms: m.loaded_rtt.map(ms),
            loaded_rtt_median_ms: m.loaded_rtt_median.map(ms),
            loaded_rtt_p95_ms: m.loaded_rtt_p95.map(ms),
            implied_bps: implied.bottleneck_bps,
            measured_bps: m.bps,
            connection_bps: if p.connections > 1 {
                connection_bps
            } else {
                Vec::new()
            },
            fair_share_bps: fair[i],
            host_steal_percent,
            implied_loss_percent: implied.loss * 100.0,
            measured_loss_percent: m.loss.map(|l| l * 100.0),
            rtt_tolerance_ms: ms(RTT_TOLERANCE),
            rate_bounds_bps: judged_rate(implied, &m)
                .map(|r| [RATE_LOW * r as f64, RATE_HIGH * r as f64]),
            loss_bounds_percent: loss_bounds(implied).map(|b| b.map(|l| l * 100.0)),
            deviations: deviations(implied, &m),
        });
    }
    // Jain's index over pairs, each rate taken relative to its fair share.
    let jain = if load.together {
        let relative: Vec<f64> = rows
            .iter()
            .filter_map(|r| Some(r.measured_bps / r.fair_share_bps?))
            .collect();
        jain_index(&relative)
    } else {
        None
    };
    Ok((rows, jain))
}

/// One pair's measurement, with what it needs.
struct Job<'a> {
    topo: &'a str,
    pair: &'a Pair,
    implied: &'a PathInfo,
    to: Ipv4Addr,
    port: u16,
    /// The links an echo crosses, there and back, and whether each is crossed from its
    /// `a` end (for the emulator's counters of that direction).
    crossings: Vec<(&'a str, bool)>,
}

/// A `flowlab test` from `job`'s source to its server, started (not waited for).
fn client(job: &Job<'_>, args: &[String]) -> anyhow::Result<Child> {
    Ok(Command::new("ip")
        .args(["netns", "exec", &ns_name(job.topo, &job.pair.from)])
        .arg(std::env::current_exe()?)
        .args([
            "test",
            &job.to.to_string(),
            "-p",
            &job.port.to_string(),
            "-J",
        ])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?)
}

/// Waits for a client and reads its result; `Err(why)` when it could not connect (the
/// server may not be listening yet: the caller decides whether to retry).
///
/// The clients (and servers) run as child processes in their namespaces, not as threads
/// of this one: a client that hangs on a path that stopped is killed on an early return
/// ([`Reaped`]), which a thread cannot be. What they exchange is the result itself: the
/// `-J` document is read back into the [`TestResult`] it was written from.
fn result(job: &Job<'_>, child: &mut Child) -> anyhow::Result<Result<TestResult, String>> {
    use std::io::Read;
    let mut out = Vec::new();
    if let Some(mut stdout) = child.stdout.take() {
        stdout.read_to_end(&mut out)?;
    }
    child.wait()?;
    let pair = || format!("{} -> {}", job.pair.from, job.pair.to);
    if let Ok(TestError { error }) = serde_json::from_slice::<TestError>(&out) {
        if error.contains("cannot connect") {
            return Ok(Err(error));
        }
        anyhow::bail!("{}: {error}", pair());
    }
    let r: TestResult = serde_json::from_slice(&out)
        .with_context(|| format!("{}: reading the test's result", pair()))?;
    Ok(Ok(r))
}

/// The `-J` document of a test that failed.
#[derive(serde::Deserialize)]
struct TestError {
    error: String,
}

/// The receiver's totals of a test's first direction: all its streams together, and
/// each stream (`None`: the test produced no totals).
fn received(r: &TestResult) -> Option<(&SideTotals, Vec<&SideTotals>)> {
    let end = r.end.as_ref()?;
    let sum = end.sums.first()?.receiver.as_ref()?;
    let streams = end
        .streams
        .iter()
        .filter_map(|s| s.receiver.as_ref())
        .collect();
    Some((sum, streams))
}

/// Whether a TCP socket listens on `port` in namespace `ns` (read from the namespace's
/// own /proc/thread-self/net/tcp and tcp6, without connecting to it).
fn listening(ns: &str, port: u16) -> bool {
    let hex = format!(":{port:04X} ");
    flowlab_net::netns::run_in(ns, move || {
        // The server may listen on IPv4 or on a dual-stack IPv6 socket.
        let mut table = std::fs::read_to_string("/proc/thread-self/net/tcp")?;
        table.push_str(&std::fs::read_to_string("/proc/thread-self/net/tcp6").unwrap_or_default());
        // Fields: sl local_address rem_address st …; st 0A is LISTEN.
        Ok(table.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && format!("{} ", f[1]).ends_with(&hex) && f[3] == "0A"
        }))
    })
    .unwrap_or(false)
}

/// Runs a client to completion, retrying while its server is not listening yet (5 s).
fn run_client(job: &Job<'_>, args: &[String]) -> anyhow::Result<TestResult> {
    let mut why = String::new();
    for _ in 0..50 {
        match result(job, &mut Reaped(client(job, args)?).0)? {
            Ok(v) => return Ok(v),
            Err(e) => why = e,
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    anyhow::bail!(
        "{} -> {}: the server did not start ({why})",
        job.pair.from,
        job.pair.to
    )
}

/// What [`measure`] found for one pair.
struct PairResult {
    measured: Measured,
    /// Each connection's throughput (receiver).
    connection_bps: Vec<f64>,
    /// The congestion control the sender used.
    congestion: Option<String>,
    /// Share of the machine's CPU time the hypervisor took during the load.
    host_steal_percent: Option<f64>,
}

/// Measures `jobs` together: idle RTTs one by one, then every TCP test at once with
/// probes alongside, then the loss of each lossy path one by one. Returns each job's
/// measurement and its connections' rates.
fn measure(jobs: &[Job<'_>], load: &Load) -> anyhow::Result<Vec<PairResult>> {
    let probe_timeout = Duration::from_secs(2);
    let mut pingers = Vec::new();
    let mut idle = Vec::new();
    for job in jobs {
        let mut pinger = Pinger::new(&ns_name(job.topo, &job.pair.from))
            .map_err(|e| anyhow::anyhow!("ICMP socket in {}: {e}", job.pair.from))?;
        // The first echo is not counted (it meets cold caches along the path). A path
        // that answers none of three carries nothing: said now, not after twenty more.
        let mut answered = false;
        for _ in 0..3 {
            if pinger.ping(job.to, probe_timeout)?.is_some() {
                answered = true;
                break;
            }
        }
        if !answered {
            anyhow::bail!(
                "{} -> {}: no reply to 3 echoes ({} s each)",
                job.pair.from,
                job.pair.to,
                probe_timeout.as_secs()
            );
        }
        let mut rtts = Vec::new();
        for _ in 0..20 {
            rtts.extend(pinger.ping(job.to, probe_timeout)?);
            std::thread::sleep(Duration::from_millis(10));
        }
        idle.push(median(&rtts));
        pingers.push(pinger);
    }
    let me = std::env::current_exe()?;
    let _servers: Vec<Reaped> = jobs
        .iter()
        .map(|job| {
            Ok(Reaped(
                Command::new("ip")
                    .args(["netns", "exec", &ns_name(job.topo, &job.pair.to)])
                    .arg(&me)
                    .args(["serve", "-p", &job.port.to_string()])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()?,
            ))
        })
        .collect::<anyhow::Result<_>>()?;
    // Wait until every server listens (up to 5 s).
    for job in jobs {
        let ns = ns_name(job.topo, &job.pair.to);
        let mut tries = 0;
        while !listening(&ns, job.port) {
            tries += 1;
            if tries == 100 {
                anyhow::bail!(
                    "{} -> {}: the server did not start",
                    job.pair.from,
                    job.pair.to
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // TCP, all at once, with echoes per pair alongside (10 ms after each reply), each
    // followed by one to the source's own loopback: what the busy host alone adds.
    let stop = Arc::new(AtomicBool::new(false));
    let probers: Vec<_> = pingers
        .into_iter()
        .zip(jobs)
        .map(|(mut pinger, job)| {
            let stop = stop.clone();
            let to = job.to;
            std::thread::spawn(move || {
                let (mut loaded, mut host) = (Vec::new(), Vec::new());
                while !stop.load(Ordering::Acquire) {
                    if let Ok(Some(rtt)) = pinger.ping(to, probe_timeout) {
                        loaded.push(rtt);
                    }
                    if let Ok(Some(rtt)) = pinger.ping(Ipv4Addr::LOCALHOST, probe_timeout) {
                        host.push(rtt);
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                (loaded, host)
            })
        })
        .collect();
    let cpu_before = CpuTimes::now();
    let topo = jobs.first().map_or("", |j| j.topo);
    // Any snapshot will do before (the first one once the emulator has written it).
    let emulator_before = emulator_stats(topo, std::time::SystemTime::UNIX_EPOCH);
    let tcp: anyhow::Result<Vec<TestResult>> = (|| {
        // Reaped: on an early return the other clients are killed, not left running.
        let clients: Vec<(Reaped, &Job<'_>)> = jobs
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
                Ok((Reaped(client(job, &args)?), job))
            })
            .collect::<anyhow::Result<_>>()?;
        clients
            .into_iter()
            .map(|(mut c, job)| {
                result(job, &mut c.0)?
                    .map_err(|e| anyhow::anyhow!("{} -> {}: {e}", job.pair.from, job.pair.to))
            })
            .collect()
    })();
    stop.store(true, Ordering::Release);
    let emulator_after = emulator_before
        .as_ref()
        .and_then(|_| emulator_stats(topo, std::time::SystemTime::now()));
    let steal = CpuTimes::now()
        .zip(cpu_before)
        .and_then(|(after, before)| after.steal_percent_since(&before));
    let loaded: Vec<(Vec<Duration>, Vec<Duration>)> = probers
        .into_iter()
        .map(|p| p.join().unwrap_or_default())
        .collect();
    let tcp = tcp?;
    let mut out = Vec::new();
    for (((job, v), (loaded, host)), idle) in jobs.iter().zip(&tcp).zip(&loaded).zip(&idle) {
        let no_totals = || {
            anyhow::anyhow!(
                "{} -> {}: the TCP test produced no totals",
                job.pair.from,
                job.pair.to
            )
        };
        let (sum, streams) = received(v).ok_or_else(no_totals)?;
        let bps = sum.bits_per_second;
        let connections: Vec<f64> = streams.iter().map(|s| s.bits_per_second).collect();
        // Loss: small datagrams at half the bottleneck, so the queues stay empty and
        // every loss is the configured one.
        let loss = if job.implied.loss > 0.0 {
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
                anyhow::bail!(
                    "{} -> {}: the UDP test produced no totals",
                    job.pair.from,
                    job.pair.to
                );
            };
            let received = counted.expected.saturating_sub(counted.lost);
            (sent > 0).then(|| sent.saturating_sub(received) as f64 / sent as f64)
        } else {
            None
        };
        out.push(PairResult {
            measured: Measured {
                rtt: *idle,
                bps,
                loaded_rtt: loaded.iter().max().copied(),
                loaded_rtt_median: median(loaded),
                loaded_rtt_p95: percentile(loaded, 0.95),
                host_delay_p95: percentile(host, 0.95),
                emulator_late_p95: emulator_before
                    .as_deref()
                    .zip(emulator_after.as_deref())
                    .and_then(|(before, after)| emulator_late_p95(&job.crossings, before, after)),
                loss,
                shared: jobs.len() > 1,
            },
            connection_bps: connections,
            host_steal_percent: steal,
            congestion: v.end.as_ref().and_then(|e| e.congestion_local.clone()),
        });
    }
    Ok(out)
}

/// The emulator's counters of `topo` (`None` without an emulator), as its stats file
/// has them, once it has been written after `written_after` (the emulator writes it
/// about once a second, the first time a second after it started; at most 3 s are
/// waited).
fn emulator_stats(topo: &str, written_after: std::time::SystemTime) -> Option<Vec<LinkStats>> {
    let dir = build::state_dir();
    build::state(&dir, topo)?.emulator_pid?;
    let file = build::stats_file(&dir, topo);
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while std::fs::metadata(&file)
        .and_then(|m| m.modified())
        .map_or(true, |m| m <= written_after)
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    serde_json::from_str(&std::fs::read_to_string(file).ok()?).ok()
}

/// The 95th percentile of the emulator's lateness added up over `crossings`, from each
/// crossing's frames between the two snapshots ([`quantile_of_sum`]): what its waiting
/// for a CPU may have added to an echo. A crossing that carried no frame meanwhile adds
/// nothing.
fn emulator_late_p95(
    crossings: &[(&str, bool)],
    before: &[LinkStats],
    after: &[LinkStats],
) -> Option<Duration> {
    let stages: Vec<Vec<(Duration, u64)>> = crossings
        .iter()
        .filter_map(|&(link, from_a)| {
            let find = |all: &[LinkStats]| all.iter().find(|l| l.link == link).cloned();
            let (b, a) = (find(before)?, find(after)?);
            let late = if from_a {
                a.a_to_b.late_since(&b.a_to_b)
            } else {
                a.b_to_a.late_since(&b.b_to_a)
            };
            (!late.is_empty()).then_some(late)
        })
        .collect();
    quantile_of_sum(&stages, 0.95)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn portfolio() -> Topology {
        let text = include_str!("../../../topologies/portfolio.toml");
        Topology::parse(text).expect("portfolio parses")
    }

    #[test]
    fn pairs_take_hosts_and_routers_with_optional_connections() {
        let t = portfolio();
        let p = parse_pairs(Some("h1-h4:2,r1-r2"), &t).expect("pairs");
        assert_eq!(
            p,
            [
                Pair {
                    from: "h1".into(),
                    to: "h4".into(),
                    connections: 2
                },
                Pair {
                    from: "r1".into(),
                    to: "r2".into(),
                    connections: 1
                },
            ]
        );
        // Every pair of the nine hosts by default.
        assert_eq!(parse_pairs(None, &t).expect("all").len(), 36);
        for (bad, says) in [
            ("h1-s1", "'s1' is a switch"),
            ("h1-x9", "'x9' is not a node of port"),
            ("h1", "'h1' is not A-B or A-B:N"),
            ("h1-h4:0", "connections are 1 to 128"),
            ("h1-h4:x", "connections are 1 to 128"),
            ("h1-h1", "same node at both ends"),
        ] {
            let e = parse_pairs(Some(bad), &t).expect_err(bad).to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn a_router_is_reached_at_its_address_on_the_arriving_link() {
        let t = portfolio();
        let plan = Plan::of(&t);
        let at = |a: &str, b: &str| address_towards(&plan, &plan.path(a, b).expect("path"));
        // r1 → r2 arrives over L1 (10.0.6.0/24, r1 .1, r2 .2); r3 → r2 over L2.
        assert_eq!(at("r1", "r2"), Some(Ipv4Addr::new(10, 0, 6, 2)));
        assert_eq!(at("r3", "r2"), Some(Ipv4Addr::new(10, 0, 7, 1)));
        // A host behind a switch: its address on the switch's segment.
        assert_eq!(at("h1", "h4"), Some(Ipv4Addr::new(10, 0, 2, 1)));
    }
}
