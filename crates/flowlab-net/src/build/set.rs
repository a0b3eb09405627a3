//! `set`: a link of a topology that is up, changed in place (`flowlab net set`): tbf and
//! netem changed with `tc qdisc change` (never deleted and added again, which would drop
//! what they queue), the user-space emulator's lines through its control socket.

use std::path::Path;

use super::files::{control_socket, lock_changes, state, unusable, write_state};
use super::shaping::{NETEM_CHILD, bucket, in_place, needs_emulation, netem_qdisc, tbf};
use super::up::is_emulated;
use super::{Backend, NetError, ns_name, preflight, run};
use crate::forward::{LineSpec, LinkChange, StationRates};
use crate::topology::{Link, Topology};

/// A link as it was and as `set` left it, and the tbf buckets kept larger than the new
/// rate's.
#[derive(Debug, Clone, PartialEq)]
pub struct Changed {
    pub before: Link,
    pub after: Link,
    pub kept: Vec<flowlab_results::net::KeptBucket>,
    /// A station's hop on a shared medium: the station as it was and is (its PHY rates,
    /// what TCP gets alone and while every station is busy), and its access point.
    pub station: Option<ChangedStation>,
}

/// A station whose rates `set` changed ([`Changed::station`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ChangedStation {
    pub ap: String,
    pub before: flowlab_results::net::StationExpected,
    pub after: flowlab_results::net::StationExpected,
}

/// Sets properties of link `link` of topology `topo` (each `(key, value)` as a study's
/// `[[link]]` or the file would write it: `rate`, `delay`, `jitter`, `loss`, `queue`,
/// `queue_bytes`; a station's hop on a shared medium takes `rate` and `down_rate`, its
/// PHY rates), both directions, while it is up. Refused, with nothing changed, when
/// the change needs what the link was not built with: delay, jitter or loss on a link
/// (or, with netem, a direction) that had none, or loss and jitter on a user-space link
/// that carries super-frames.
pub fn set(
    dir: &Path,
    topo: &str,
    link: &str,
    values: &[(&str, &str)],
) -> Result<Changed, NetError> {
    change(dir, topo, link, |t| {
        let mut t = t.clone();
        for (key, value) in values {
            t.set_link(link, key, value)?;
        }
        Ok(t)
    })
}

/// Sets link `link` of topology `topo` to the shapes of `to` (as a step of its schedule
/// has it), both directions, while it is up; refused as [`set`] refuses.
pub fn set_to(dir: &Path, topo: &str, link: &str, to: &Link) -> Result<Changed, NetError> {
    change(dir, topo, link, |t| {
        let mut t = t.clone();
        let i = t.link_index(link)?;
        let l = &mut t.links[i];
        if l.medium.is_some() {
            return Err(crate::topology::TopologyError::new(format!(
                "link {link} is a station's hop: its own values are its medium's"
            )));
        }
        (l.a_to_b, l.b_to_a) = (to.a_to_b, to.b_to_a);
        Ok(t)
    })
}

/// Changes link `link` of topology `topo`, which is up, to what `new` makes of the
/// topology as it is now; one change at a time (a schedule's and `flowlab net set`'s).
fn change(
    dir: &Path,
    topo: &str,
    link: &str,
    new: impl FnOnce(&Topology) -> Result<Topology, crate::topology::TopologyError>,
) -> Result<Changed, NetError> {
    preflight()?;
    let _one_at_a_time = lock_changes(dir, topo)?;
    let Some(mut recorded) = state(dir, topo) else {
        return Err(NetError::Unsupported(format!(
            "no topology named '{topo}' is up (flowlab net status lists them)"
        )));
    };
    if let Some(why) = unusable(dir, topo) {
        return Err(NetError::Unsupported(why));
    }
    let Some(mut topology) = recorded.topology.clone() else {
        return Err(NetError::Unsupported(format!(
            "topology {topo} was brought up by a flowlab that did not record its links: bring it up again to change them"
        )));
    };
    let i = topology.link_index(link)?;
    let before = topology.links[i].clone();
    if before.follows_a_trace() {
        return Err(NetError::Unsupported(format!(
            "link {link} follows a trace, which sets its rate and queue: it is changed in its file, and brought up again"
        )));
    }
    let changed = new(&topology)?;
    if before.medium.is_some() {
        return change_station(dir, topo, recorded, &topology, changed, i);
    }
    let after = changed.links[i].clone();
    let dev = format!("l{i}");
    let by_emulator = recorded.backend == Some(Backend::Userspace)
        && recorded.emulated_links.contains(&before.name);
    let netem = recorded.backend == Some(Backend::Netem);
    // Which directions have netem at their root: those that had delay, jitter or loss
    // when built, or were given netem for a schedule that has some.
    let netem_root = |node: &str| netem && has_netem_root(&ns_name(topo, node), &dev);
    let roots = (netem_root(&before.a), netem_root(&before.b));
    // Every refusal before anything changes.
    let gained = if netem {
        (needs_emulation(&after.a_to_b) && !roots.0) || (needs_emulation(&after.b_to_a) && !roots.1)
    } else {
        !by_emulator && is_emulated(&after)
    };
    if gained {
        return Err(NetError::Unsupported(format!(
            "link {link} was brought up without delay, jitter or loss{}, so nothing emulates them on it: give it some in the file (delay = \"1us\" is enough) and bring it up again",
            if netem { " that way" } else { "" }
        )));
    }
    let mut commands = Vec::new();
    let mut kept = Vec::new();
    for (was, now, node, other, netem_root) in [
        (&before.a_to_b, &after.a_to_b, &before.a, &before.b, roots.0),
        (&before.b_to_a, &after.b_to_a, &before.b, &before.a, roots.1),
    ] {
        let ns = ns_name(topo, node);
        if netem_root {
            commands.push((ns.clone(), in_place(netem_qdisc(&dev, now))));
        }
        let parent: &[&str] = if netem_root { &NETEM_CHILD } else { &["root"] };
        // tbf never sends a packet longer than its bucket, and it holds packets as long
        // as its bucket was (TCP's super-frames, up to 64 KB, where the bucket allowed):
        // a smaller bucket would strand them, and with them the connection. So a bucket
        // never shrinks in place.
        let key = format!("{ns} {dev}");
        let held = match (was.rate_bps, recorded.kept_buckets.get(&key)) {
            (_, Some(&kept)) => Some(kept),
            (Some(rate), None) => Some(bucket(rate)),
            (None, None) => None,
        };
        let burst = match (now.rate_bps, held) {
            (Some(rate), Some(held)) if held > bucket(rate) => {
                kept.push(flowlab_results::net::KeptBucket {
                    from: node.clone(),
                    to: other.clone(),
                    bytes: held,
                    rate_bps: rate,
                    bucket_at_rate: bucket(rate),
                });
                recorded.kept_buckets.insert(key, held);
                Some(held)
            }
            _ => {
                recorded.kept_buckets.remove(&key);
                None
            }
        };
        if let Some(t) = tbf(&dev, parent, now, burst) {
            let t = if was.rate_bps.is_some() {
                in_place(t)
            } else {
                t
            };
            commands.push((ns, t));
        }
    }
    // The emulator first: it may refuse (loss or jitter on a link that carries
    // super-frames), and then nothing has changed.
    if by_emulator {
        tell_emulator(
            &control_socket(dir, topo),
            &LinkChange {
                link: link.to_string(),
                a_to_b: LineSpec::of(&after.a_to_b),
                b_to_a: LineSpec::of(&after.b_to_a),
                station: None,
            },
        )?;
    }
    for (ns, cmd) in &commands {
        let mut args = vec!["-n", ns.as_str()];
        args.extend(cmd.iter().map(String::as_str));
        run("tc", &args)?;
    }
    topology.links[i] = after.clone();
    recorded.topology = Some(topology);
    write_state(dir, topo, &recorded)?;
    Ok(Changed {
        before,
        after,
        kept,
        station: None,
    })
}

/// Changes station hop `i` of topology `topo` from `was` to `now` (its PHY rates): told
/// to the emulator's medium, whose next transmissions to and from the station use them.
fn change_station(
    dir: &Path,
    topo: &str,
    mut recorded: super::State,
    was: &Topology,
    now: Topology,
    i: usize,
) -> Result<Changed, NetError> {
    let expected = |t: &Topology| {
        let l = &t.links[i];
        let (m, s) = t.station_of(l)?;
        let k = m.stations.iter().position(|x| x.link == s.link)?;
        Some((
            m.ap.clone(),
            m.expected().swap_remove(k),
            s.up_bps,
            s.down_bps,
        ))
    };
    let (Some((ap, before, ..)), Some((_, after, up_bps, down_bps))) =
        (expected(was), expected(&now))
    else {
        return Err(NetError::Unsupported(format!(
            "link {}: its medium is not recorded with the topology",
            was.links[i].name
        )));
    };
    let l = &now.links[i];
    tell_emulator(
        &control_socket(dir, topo),
        &LinkChange {
            link: l.name.clone(),
            a_to_b: LineSpec::of(&l.a_to_b),
            b_to_a: LineSpec::of(&l.b_to_a),
            station: Some(StationRates { up_bps, down_bps }),
        },
    )?;
    let changed = Changed {
        before: was.links[i].clone(),
        after: l.clone(),
        kept: Vec::new(),
        station: Some(ChangedStation { ap, before, after }),
    };
    recorded.topology = Some(now);
    write_state(dir, topo, &recorded)?;
    Ok(changed)
}

/// Whether interface `dev` in namespace `ns` has netem as its root qdisc.
fn has_netem_root(ns: &str, dev: &str) -> bool {
    run("tc", &["-n", ns, "qdisc", "show", "dev", dev, "root"])
        .is_ok_and(|out| out.trim_start().starts_with("qdisc netem"))
}

/// Sends `change` to the emulator listening on `socket` and waits for its answer: why it
/// refused the change, or that it could not be asked.
fn tell_emulator(socket: &Path, change: &LinkChange) -> Result<(), NetError> {
    use std::io::{BufRead, Write};
    let failed = |e: std::io::Error| NetError::Io(socket.to_path_buf(), e);
    let mut stream = std::os::unix::net::UnixStream::connect(socket).map_err(failed)?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .map_err(failed)?;
    let line = serde_json::to_string(change).unwrap_or_default();
    stream
        .write_all(format!("{line}\n").as_bytes())
        .map_err(failed)?;
    let mut answer = String::new();
    std::io::BufReader::new(&stream)
        .read_line(&mut answer)
        .map_err(failed)?;
    match answer.trim() {
        "ok" => Ok(()),
        "" => Err(NetError::Io(
            socket.to_path_buf(),
            std::io::Error::other("the link emulator did not answer within 5 s"),
        )),
        why => Err(NetError::Unsupported(why.to_string())),
    }
}
