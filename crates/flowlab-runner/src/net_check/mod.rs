//! `net check`'s measuring: paths of a topology that is up (or built for the check),
//! measured and set beside what its file implies (the verdicts are
//! [`flowlab_net::check`]'s). Servers and clients are flowlab at a [`Place`], in their
//! nodes' namespaces; echoes are sent from this process, from inside the namespaces.
//!
//! Per pair: the idle RTT (median of 20 ICMP echoes from a raw socket in the source's
//! namespace), TCP throughput (`flowlab test` in the source against `flowlab serve` in the
//! destination, the first second left out) with ICMP echoes alongside it, each 10 ms
//! after the previous reply (the RTT under load), and, on paths with random loss, the loss of paced UDP. With
//! `--together`, every pair's TCP test runs at once, and each pair's max-min fair share
//! is given instead of judging its rate.

mod clients;
mod measure;
pub mod pairs;
mod round;

use flowlab_net::build::{self, UpOptions};
use flowlab_net::check::{LOSS_TOLERANCE, RTT_TOLERANCE};
use flowlab_net::topology::{Plan, Topology};
use flowlab_results::net::{FAIRNESS_CC, NetCheck};

use crate::{Error, Place};

/// What a check says as it goes, changing nothing: a setting with no effect here.
pub type Note<'a> = &'a mut dyn FnMut(String);

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

/// Takes the topology down when dropped, if the check built it.
struct Teardown(Option<String>);

impl Drop for Teardown {
    fn drop(&mut self) {
        if let Some(name) = &self.0 {
            if let Err(e) = build::down(name, &build::state_dir()) {
                tracing::warn!("taking {name} down again failed: {e} (flowlab net down {name})");
            }
        }
    }
}

/// Checks topology `t` (brought up with `up` unless it is up already, and then taken
/// down) over `pairs` (`--pairs`: every pair of hosts when `None`) under `load`, its
/// servers and clients at `place`.
pub fn check(
    t: &Topology,
    pairs: Option<&str>,
    load: Load,
    up: UpOptions,
    place: &dyn Place,
    note: Note<'_>,
) -> Result<NetCheck, Error> {
    let plan = Plan::of(t);
    let pairs = pairs::parse(pairs, t)?;
    build::preflight()?;
    let mut paths = Vec::new();
    for p in &pairs {
        let path = plan
            .path(&p.from, &p.to)
            .ok_or_else(|| Error::Failed(format!("no path from {} to {}", p.from, p.to)))?;
        let to = plan
            .address_towards(&path)
            .ok_or_else(|| Error::Failed(format!("{} has no address", p.to)))?;
        paths.push((path, to));
    }
    for l in t.links.iter().filter(|l| !l.schedule.is_empty()) {
        note(format!(
            "link {} changes on a schedule: the check judges paths across it by the values it was given (the file's, or those of the topology that is up, as they are now), so a scheduled change while it runs shows as a deviation",
            l.name
        ));
    }
    let up_already = build::status().iter().any(|(n, _)| *n == t.name);
    let (_teardown, state) = if up_already {
        if let Some(why) = build::unusable(&build::state_dir(), &t.name) {
            return Err(Error::Failed(why));
        }
        let state = build::state(&build::state_dir(), &t.name);
        // A backend asked for explicitly must be the one it runs on.
        let running = state.as_ref().and_then(|s| s.backend);
        if up.backend != build::Backend::Auto && running.is_some_and(|b| b != up.backend) {
            return Err(Error::Failed(format!(
                "topology {} is up on the {} backend, not {}: measure it without --backend, or take it down first",
                t.name,
                running.map_or(String::new(), |b| b.to_string()),
                up.backend
            )));
        }
        let awake = state.as_ref().is_some_and(|s| s.cpus_kept_awake);
        if up.keep_cpus_awake && !awake {
            return Err(Error::Failed(match running {
                Some(build::Backend::Userspace) => format!(
                    "topology {} is up without --keep-cpus-awake: measure it without the flag, or take it down first",
                    t.name
                ),
                // Brought up again, it would be refused the flag all the same.
                _ => format!(
                    "--keep-cpus-awake: topology {} is up on {}, and only the user-space emulator keeps the CPUs awake",
                    t.name,
                    running.map_or("tbf alone (nothing to emulate)".to_string(), |b| b
                        .to_string())
                ),
            }));
        }
        (Teardown(None), state)
    } else {
        let state = build::up(t, &build::state_dir(), &up)?;
        if let Some(why) = holding_changes_nothing(&state) {
            note(why);
        }
        (Teardown(Some(t.name.clone())), Some(state))
    };
    if load.together && pairs.len() > 1000 {
        return Err(Error::Refused(
            "--together runs at most 1000 pairs at once (one server port each)".into(),
        ));
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
        let (round, jain) = round::measure(t, &pairs, &paths, &load, place).map_err(|e| {
            // A path that stopped carrying traffic: say whether the emulator did.
            match build::emulator_trouble(&build::state_dir(), &t.name) {
                Some(why) => Error::Failed(format!("{e} (the link emulator: {why})")),
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
        cpus_kept_awake: state.as_ref().is_some_and(|s| s.cpus_kept_awake),
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
    Ok(check)
}

/// Why `--keep-cpus-awake` changes nothing on this machine, when it does not.
pub fn holding_changes_nothing(state: &build::State) -> Option<String> {
    if !state.cpus_kept_awake {
        return None;
    }
    flowlab_net::awake::changes_nothing_here().map(|why| format!("--keep-cpus-awake: {why}"))
}
