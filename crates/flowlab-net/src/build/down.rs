//! `down` and `status`: what is up, and removing it (also after a crash).

use std::path::Path;

use super::files::{
    change_lock, control_socket, emulator_log, remove_hosts, schedule_log, state_file, state_json,
    stats_file,
};
use super::processes::{emulators, stop};
use super::{NetError, namespaces, prefix, preflight, run};

/// Whether anything of topology `name` is there for [`down`] to remove: its state files,
/// or namespaces of its prefix (a topology that is up, or what a crash or a killed
/// `up` left).
pub fn is_left(name: &str, dir: &Path) -> bool {
    state_file(dir, name).exists()
        || state_json(dir, name).exists()
        || namespaces().iter().any(|n| n.starts_with(&prefix(name)))
}

/// Removes topology `name`: stops its emulator and every process still running in its
/// namespaces, then removes the namespaces in its state file and any with its prefix.
/// Returns the namespaces removed.
pub fn down(name: &str, dir: &Path) -> Result<Vec<String>, NetError> {
    preflight()?;
    let path = state_file(dir, name);
    let mut listed = Vec::new();
    let mut pids = Vec::new();
    for line in std::fs::read_to_string(&path).unwrap_or_default().lines() {
        match line.strip_prefix("pid ") {
            Some(p) => pids.extend(p.trim().parse::<u32>()),
            None => listed.push(line.to_string()),
        }
    }
    listed.extend(
        namespaces()
            .into_iter()
            .filter(|n| n.starts_with(&prefix(name))),
    );
    listed.sort();
    listed.dedup();
    let existing = namespaces();
    let listed: Vec<String> = listed
        .into_iter()
        .filter(|n| existing.contains(n))
        .collect();
    let stuck = stop(&emulators(&pids, name));
    // Servers and shells started with `net exec` would keep a namespace alive.
    let inside: Vec<u32> = listed
        .iter()
        .flat_map(|ns| {
            run("ip", &["netns", "pids", ns])
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect();
    let stuck: Vec<u32> = stuck.into_iter().chain(stop(&inside)).collect();
    let mut removed = Vec::new();
    // What still runs is said, after the namespaces' names are gone all the same.
    let mut failed = (!stuck.is_empty()).then(|| NetError::Command {
        command: format!("kill -KILL {}", join(&stuck)),
        message: "still running ten seconds after SIGKILL (an uninterruptible wait?)".into(),
    });
    for ns in listed {
        // A namespace still being entered or left can refuse once: try again briefly.
        let mut result = run("ip", &["netns", "del", &ns]);
        for _ in 0..20 {
            if result.is_ok() || !namespaces().contains(&ns) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
            result = run("ip", &["netns", "del", &ns]);
        }
        match result {
            Ok(_) => removed.push(ns),
            Err(e) if namespaces().contains(&ns) => failed = failed.or(Some(e)),
            Err(_) => removed.push(ns),
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    remove_hosts(&prefix(name));
    for p in [
        path,
        state_json(dir, name),
        stats_file(dir, name),
        stats_file(dir, name).with_extension("json.tmp"),
        emulator_log(dir, name),
        control_socket(dir, name),
        schedule_log(dir, name),
        change_lock(dir, name),
    ] {
        let _ = std::fs::remove_file(p);
    }
    // The state directories go too, once no other topology is recorded in them.
    if std::fs::remove_dir(dir).is_ok() {
        if let Some(parent) = dir.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
    Ok(removed)
}

fn join(pids: &[u32]) -> String {
    pids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Topologies that are up (by namespace prefix), with their namespaces.
pub fn status() -> Vec<(String, Vec<String>)> {
    let mut by_topo: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for ns in namespaces() {
        if let Some(rest) = ns.strip_prefix("fl-") {
            if let Some((topo, _)) = rest.split_once('-').filter(|(t, _)| !t.starts_with('.')) {
                by_topo
                    .entry(topo.to_string())
                    .or_default()
                    .push(ns.clone());
            }
        }
    }
    by_topo.into_iter().collect()
}
