//! The user-space emulator's process: started by `up` once its links exist, found and
//! stopped by `down`.

use std::path::Path;

use super::files::{emulator_log, record, schedule_log};
use super::{NetError, UpOptions};

/// Starts the emulator process and waits until it forwards. Its pid is recorded first,
/// so `down` finds it even if this process dies now.
pub(super) fn start_emulator(
    topo: &str,
    dir: &Path,
    links: &[crate::forward::EmulatedLink],
    opts: &UpOptions,
) -> Result<u32, NetError> {
    use std::io::{BufRead, Write};
    use std::os::unix::process::CommandExt;
    let log_path = emulator_log(dir, topo);
    let log = std::fs::File::create(&log_path).map_err(|e| NetError::Io(log_path.clone(), e))?;
    let mut child = std::process::Command::new(&opts.emulator)
        // The emulator may be reached as /proc/<pid>/exe (flowlab's own binary): its
        // name in `ps` is still flowlab.
        .arg0("flowlab")
        .args(["net", EMULATE])
        .args(opts.keep_cpus_awake.then_some(KEEP_CPUS_AWAKE))
        .arg("--state-dir")
        .arg(dir)
        .arg(topo)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(log)
        // Its own process group: a Ctrl-C meant for the caller does not stop the links.
        .process_group(0)
        .spawn()
        .map_err(|e| NetError::Emulator(format!("{}: {e}", opts.emulator.display())))?;
    let pid = child.id();
    record(dir, topo, &format!("pid {pid}"))?;
    let json = serde_json::to_string(links).unwrap_or_default();
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(json.as_bytes())
            .map_err(|e| NetError::Emulator(e.to_string()))?;
    }
    // Its answer, or none within 10 s (a thread reads it: a read has no timeout).
    let (tx, rx) = std::sync::mpsc::channel();
    if let Some(out) = child.stdout.take() {
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::BufReader::new(out).read_line(&mut line);
            let _ = tx.send(line);
        });
    }
    let line = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .unwrap_or_default();
    if line.trim() != "ready" {
        let _ = child.kill();
        let _ = child.wait();
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        return Err(NetError::Emulator(
            log.lines()
                .last()
                .unwrap_or("it exited without a word")
                .to_string(),
        ));
    }
    // The child lives on; it is not waited for (down stops it).
    std::mem::forget(child);
    Ok(pid)
}

/// Starts the process that runs the schedule of topology `topo`, which is up
/// ([`super::schedule::run`]): `PROGRAM net _schedule --state-dir DIR TOPO`, logging to
/// [`schedule_log`]. Its pid is recorded first, so `down` stops it.
pub(super) fn start_scheduler(topo: &str, dir: &Path, program: &Path) -> Result<u32, NetError> {
    use std::os::unix::process::CommandExt;
    let log_path = schedule_log(dir, topo);
    let log = std::fs::File::create(&log_path).map_err(|e| NetError::Io(log_path.clone(), e))?;
    let mut child = std::process::Command::new(program)
        .arg0("flowlab")
        .args(["net", SCHEDULE])
        .arg("--state-dir")
        .arg(dir)
        .arg(topo)
        .stdin(std::process::Stdio::null())
        .stdout(
            log.try_clone()
                .map_err(|e| NetError::Io(log_path.clone(), e))?,
        )
        .stderr(log)
        // Its own process group, as the emulator's: a Ctrl-C meant for the caller does
        // not stop the schedule.
        .process_group(0)
        .spawn()
        .map_err(|e| {
            NetError::Unsupported(format!(
                "the schedule did not start: {}: {e}",
                program.display()
            ))
        })?;
    let pid = child.id();
    record(dir, topo, &format!("pid {pid}"))?;
    // `spawn` returns once the exec has begun, but the new command line is in place a
    // moment later: until then `down` (which knows the schedule by it) would pass it by.
    let since = std::time::Instant::now();
    while !is_scheduler(pid, topo) {
        if child.try_wait().ok().flatten().is_some()
            || since.elapsed() > std::time::Duration::from_secs(5)
        {
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            return Err(NetError::Unsupported(format!(
                "the schedule did not start: {}",
                log.lines().last().unwrap_or("it exited without a word")
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // The child lives on; it is not waited for (down stops it).
    std::mem::forget(child);
    Ok(pid)
}

/// The hidden subcommands of a topology's own processes.
const EMULATE: &str = "_emulate";
const SCHEDULE: &str = "_schedule";

/// The emulator's flag for holding the CPUs out of deep idle states.
const KEEP_CPUS_AWAKE: &str = "--keep-cpus-awake";

/// Whether process `pid` is the emulator of topology `topo`.
pub(super) fn is_emulator(pid: u32, topo: &str) -> bool {
    pid_runs(pid, EMULATE, topo)
}

/// Whether process `pid` runs the schedule of topology `topo`.
pub fn is_scheduler(pid: u32, topo: &str) -> bool {
    pid_runs(pid, SCHEDULE, topo)
}

/// Whether process `pid` is topology `topo`'s process `what` ([`runs`]).
fn pid_runs(pid: u32, what: &str, topo: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|raw| runs(&raw, what, topo))
}

/// Whether a command line (`/proc/PID/cmdline`: NUL-separated) is that of topology
/// `topo`'s process `what` (its emulator or its schedule): it ends in
/// `net WHAT [--keep-cpus-awake] --state-dir DIR <topo>`.
fn runs(cmdline: &[u8], what: &str, topo: &str) -> bool {
    let args: Vec<&[u8]> = cmdline
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .collect();
    let Some((&last, rest)) = args.split_last() else {
        return false;
    };
    let Some(head) = rest.len().checked_sub(2).map(|n| &rest[..n]) else {
        return false;
    };
    let head = head
        .strip_suffix(&[KEEP_CPUS_AWAKE.as_bytes()])
        .unwrap_or(head);
    last == topo.as_bytes()
        && rest[rest.len() - 2] == b"--state-dir"
        && head.ends_with(&[b"net".as_slice(), what.as_bytes()])
}

/// The processes of `topo` running now, its emulator and its schedule: the recorded ones
/// and any other found in /proc (one started by an `up` that died before recording it).
pub fn emulators(recorded: &[u32], topo: &str) -> Vec<u32> {
    let mut pids: Vec<u32> = recorded.to_vec();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        pids.extend(dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()));
    }
    pids.sort_unstable();
    pids.dedup();
    pids.retain(|&p| is_emulator(p, topo) || is_scheduler(p, topo));
    pids
}

/// Whether `pid` still runs: it exists and is not a zombie (a zombie child of this
/// process — the emulator when `up` ran in this process — is reaped here), or it is a
/// zombie whose other threads have not all exited: a thread-group leader that exits
/// first shows as a zombie while the rest still run, and they hold the process's files
/// (the emulator's CPU latency request among them) until the last one is gone.
pub(super) fn running(pid: u32) -> bool {
    // SAFETY: waitpid with WNOHANG on a pid; fails harmlessly if it is not our child.
    unsafe { libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), libc::WNOHANG) };
    let leader_runs = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    };
    leader_runs
        || std::fs::read_dir(format!("/proc/{pid}/task")).is_ok_and(|threads| threads.count() > 1)
}

/// Sends SIGTERM, then SIGKILL to what still runs after a second; waits until gone, or
/// returns what still runs ten seconds after the SIGKILL (a process in an uninterruptible
/// wait). The signals go through pidfds opened first, so a pid reused meanwhile is never
/// hit.
pub(super) fn stop(pids: &[u32]) -> Vec<u32> {
    let handles: Vec<(u32, Option<std::os::fd::OwnedFd>)> = pids
        .iter()
        .map(|&p| {
            // SAFETY: pidfd_open(2) with a pid and no flags; the descriptor is owned at
            // once.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, p as libc::pid_t, 0) };
            let fd = (fd >= 0).then(|| {
                // SAFETY: a fresh descriptor owned by nothing else.
                unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) }
            });
            (p, fd)
        })
        .collect();
    let signal = |sig: libc::c_int| {
        for (p, fd) in &handles {
            match fd {
                Some(fd) => {
                    use std::os::fd::AsRawFd;
                    // SAFETY: pidfd_send_signal(2) on a live pidfd, no info, no flags.
                    unsafe {
                        libc::syscall(
                            libc::SYS_pidfd_send_signal,
                            fd.as_raw_fd(),
                            sig,
                            std::ptr::null::<libc::siginfo_t>(),
                            0,
                        )
                    };
                }
                // Kernels before 5.3 have no pidfds; the pid was just checked.
                // SAFETY: kill(2) with a pid and a signal number.
                None => unsafe {
                    libc::kill(*p as libc::pid_t, sig);
                },
            }
        }
    };
    signal(libc::SIGTERM);
    for round in 0..110 {
        if !pids.iter().any(|&p| running(p)) {
            return Vec::new();
        }
        if round == 10 {
            signal(libc::SIGKILL);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    pids.iter().copied().filter(|&p| running(p)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emulator_is_known_by_its_command_line_with_or_without_the_awake_flag() {
        let line = |args: &[&str]| args.join("\0").into_bytes();
        let plain = line(&["flowlab", "net", "_emulate", "--state-dir", "/run/x", "lab"]);
        let awake = line(&[
            "flowlab",
            "net",
            "_emulate",
            "--keep-cpus-awake",
            "--state-dir",
            "/run/x",
            "lab",
        ]);
        let emulates = |raw: &[u8], topo| runs(raw, EMULATE, topo);
        assert!(emulates(&plain, "lab"));
        assert!(emulates(&awake, "lab"));
        assert!(!emulates(&plain, "lab2"), "another topology's");
        assert!(!emulates(&line(&["flowlab", "net", "up", "lab"]), "lab"));
        // The schedule's process is known as such, not as an emulator.
        let schedule = line(&[
            "flowlab",
            "net",
            "_schedule",
            "--state-dir",
            "/run/x",
            "lab",
        ]);
        assert!(runs(&schedule, SCHEDULE, "lab"));
        assert!(!emulates(&schedule, "lab"));
        assert!(!emulates(
            &line(&[
                "flowlab",
                "net",
                "_emulate",
                "--bogus",
                "--state-dir",
                "/run/x",
                "lab"
            ]),
            "lab"
        ));
        assert!(!emulates(&line(&["--state-dir", "/run/x", "lab"]), "lab"));
        assert!(!emulates(b"", "lab"));
    }
}
