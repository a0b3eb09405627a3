//! What `up` records under the state directory, for `status`, `down` and `check`: the
//! namespaces it created (appended before each is made), the state it built, the
//! emulator's stats and log.

use std::path::{Path, PathBuf};

use super::processes::running;
use super::{NetError, State};

/// Where `up` records what it created.
pub fn state_dir() -> PathBuf {
    PathBuf::from("/run/flowlab/net")
}

pub(super) fn state_file(dir: &Path, topo: &str) -> PathBuf {
    dir.join(format!("{topo}.list"))
}

pub(super) fn record(dir: &Path, topo: &str, ns: &str) -> Result<(), NetError> {
    use std::io::Write;
    let path = state_file(dir, topo);
    let mut f = in_made_dir(dir, || {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
    })
    .map_err(|e| NetError::Io(path.clone(), e))?;
    writeln!(f, "{ns}").map_err(|e| NetError::Io(path, e))
}

/// Makes `dir` (and its parents), then runs `make`, which puts something in it. Another
/// topology coming down removes these directories once they are empty (the state
/// directory, `/etc/netns`), which they can be between the two steps: then both are done
/// again, a few times at most.
fn in_made_dir<T>(dir: &Path, mut make: impl FnMut() -> std::io::Result<T>) -> std::io::Result<T> {
    let mut tries = 0;
    loop {
        match std::fs::create_dir_all(dir).and_then(|()| make()) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && tries < 3 => tries += 1,
            done => return done,
        }
    }
}

/// Where `ip netns exec NS` finds the files it mounts over `/etc` (the hosts file).
pub(super) fn netns_etc(ns: &str) -> PathBuf {
    Path::new("/etc/netns").join(ns)
}

/// Writes `hosts` as namespace `ns`'s `/etc/hosts`.
pub(super) fn write_hosts(ns: &str, hosts: &str) -> Result<(), NetError> {
    let dir = netns_etc(ns);
    let path = dir.join("hosts");
    in_made_dir(&dir, || std::fs::write(&path, hosts)).map_err(|e| NetError::Io(path, e))
}

/// Removes what [`write_hosts`] wrote for every namespace starting with `prefix`, and
/// `/etc/netns` itself when that leaves it empty.
pub(super) fn remove_hosts(prefix: &str) {
    let Ok(entries) = std::fs::read_dir("/etc/netns") else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with(prefix) {
            let _ = std::fs::remove_file(e.path().join("hosts"));
            let _ = std::fs::remove_dir(e.path());
        }
    }
    let _ = std::fs::remove_dir("/etc/netns");
}

pub(super) fn state_json(dir: &Path, topo: &str) -> PathBuf {
    dir.join(format!("{topo}.json"))
}

/// Where the emulator of `topo` writes its counters (about once a second).
pub fn stats_file(dir: &Path, topo: &str) -> PathBuf {
    dir.join(format!("{topo}.stats.json"))
}

/// The emulator's control socket (`flowlab net set`).
pub fn control_socket(dir: &Path, topo: &str) -> PathBuf {
    dir.join(format!("{topo}.ctl"))
}

/// A [`ReadTrace`](crate::topology::ReadTrace) that reads the trace files a topology
/// names relative to directory `dir` (the topology file's): where each is, and its text.
pub fn beside(dir: &Path) -> impl Fn(&str) -> Result<(PathBuf, String), String> + '_ {
    move |name| {
        let path = dir.join(name);
        let path = path.canonicalize().unwrap_or(path);
        std::fs::read_to_string(&path)
            .map(|text| (path.clone(), text))
            .map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// Where the schedule of `topo` logs each change it makes.
pub fn schedule_log(dir: &Path, topo: &str) -> PathBuf {
    dir.join(format!("{topo}.schedule.log"))
}

/// The lock that makes a topology's link changes one at a time.
pub(super) fn change_lock(dir: &Path, topo: &str) -> PathBuf {
    dir.join(format!("{topo}.lock"))
}

pub(super) fn emulator_log(dir: &Path, topo: &str) -> PathBuf {
    dir.join(format!("{topo}.emulator.log"))
}

/// What is wrong with the emulator of `topo`, if anything: the lines it wrote (it writes
/// only when a link stops or fails), or that it no longer runs. `None` when all is well
/// or the topology has no emulator.
pub fn emulator_trouble(dir: &Path, topo: &str) -> Option<String> {
    let pid = state(dir, topo)?.emulator_pid?;
    let log = std::fs::read_to_string(emulator_log(dir, topo)).unwrap_or_default();
    let mut trouble = last_words(&log);
    if !running(pid) {
        trouble.push(format!("the link emulator (pid {pid}) is not running"));
    }
    (!trouble.is_empty()).then(|| trouble.join("; "))
}

/// The emulator `up` recorded for topology `topo`, when it no longer runs: killed, or
/// ended with every process of the session that started it while the topology stayed
/// up. The topology's emulated links then carry nothing.
pub fn lost_emulator(state: &State, topo: &str) -> Option<u32> {
    state
        .emulator_pid
        .filter(|&pid| !super::processes::is_emulator(pid, topo))
}

/// Why topology `topo`, which is up, cannot be measured as it is, if it cannot: its
/// emulator is lost ([`lost_emulator`]). Said by what would use it (a study, `net
/// check`) before anything runs, with the way out.
pub fn unusable(dir: &Path, topo: &str) -> Option<String> {
    let pid = lost_emulator(&state(dir, topo)?, topo)?;
    Some(format!(
        "topology {topo} is up, but its link emulator (pid {pid}) is not running, so its emulated links carry nothing (left by a run that ended without taking it down?): take it down first (flowlab net down {topo})"
    ))
}

/// What the emulator's log says went wrong: a panic's place and message (the lines
/// after it are a backtrace), else its last three lines.
pub(super) fn last_words(log: &str) -> Vec<String> {
    let lines: Vec<&str> = log.lines().collect();
    let said = match lines.iter().position(|l| l.contains("panicked at")) {
        Some(i) => &lines[i..(i + 2).min(lines.len())],
        None => &lines[lines.len().saturating_sub(3)..],
    };
    said.iter().map(|l| l.to_string()).collect()
}

/// An exclusive lock on topology `topo`'s state while its links change (a schedule's
/// change, `flowlab net set`, `up` recording its schedule), held while the returned file
/// is open.
pub(super) fn lock_changes(dir: &Path, topo: &str) -> Result<std::fs::File, NetError> {
    let path = change_lock(dir, topo);
    let failed = |e| NetError::Io(path.clone(), e);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(failed)?;
    use std::os::fd::AsRawFd;
    // SAFETY: flock(2) on a descriptor this function owns; released when it is closed.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(failed(std::io::Error::last_os_error()));
    }
    Ok(file)
}

/// Writes topology `topo`'s state whole, never in part: into a file of this process's
/// own, then renamed over the state. A reader (the schedule's process reading it as it
/// starts, while `up` records that process's pid) sees the old state or the new one,
/// never a truncated file it cannot parse.
pub(super) fn write_state(dir: &Path, topo: &str, state: &State) -> Result<(), NetError> {
    let path = state_json(dir, topo);
    let tmp = dir.join(format!("{topo}.json.{}.tmp", std::process::id()));
    let text = serde_json::to_string_pretty(state).unwrap_or_default();
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            NetError::Io(path, e)
        })
}

/// What `up` recorded about `topo`, if it finished.
pub fn state(dir: &Path, topo: &str) -> Option<State> {
    let text = std::fs::read_to_string(state_json(dir, topo)).ok()?;
    serde_json::from_str(&text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_emulators_last_words_are_its_panic_not_the_backtrace() {
        let log = "flowlab net emulator: link l2: stopped: gone\n\
                   thread '<unnamed>' panicked at crates/flowlab-net/src/x.rs:1:2:\n\
                   attempt to add with overflow\n\
                   stack backtrace:\n   0: rust_begin_unwind\n   1: core::panicking\n";
        assert_eq!(
            last_words(log),
            [
                "thread '<unnamed>' panicked at crates/flowlab-net/src/x.rs:1:2:",
                "attempt to add with overflow"
            ]
        );
        assert_eq!(last_words("a\nb\nc\nd\n"), ["b", "c", "d"]);
        assert!(last_words("").is_empty());
    }

    #[test]
    fn a_directory_removed_before_its_first_file_is_made_again() {
        let top = std::env::temp_dir().join(format!("flowlab-made-{}", std::process::id()));
        let dir = top.join("net");
        let path = dir.join("t.list");
        // The first attempt finds its directories gone, as when another topology's `net
        // down` removes them, emptied, between their making and the file's.
        let mut attempts = 0;
        in_made_dir(&dir, || {
            attempts += 1;
            if attempts == 1 {
                std::fs::remove_dir(&dir)?;
                std::fs::remove_dir(&top)?;
            }
            std::fs::write(&path, "fl-t-a\n")
        })
        .unwrap();
        assert_eq!(attempts, 2);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "fl-t-a\n");
        // Gone every time: the error, after a bounded number of tries.
        let mut attempts = 0;
        let err = in_made_dir(&dir, || {
            attempts += 1;
            std::fs::remove_file(&path).ok();
            std::fs::remove_dir(&dir)?;
            std::fs::write(&path, "x")
        })
        .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
        assert_eq!(attempts, 4);
        std::fs::remove_dir_all(&top).unwrap();
    }
}
