//! One module per command: its arguments, their validation, and what it does with the
//! libraries' results (each output made by `flowlab_report`).

pub mod completions;
pub mod fetch;
pub mod fragments;
pub mod iperf3;
pub mod monitor;
pub mod net;
pub mod ping;
pub mod plot;
pub mod quick;
pub mod report;
pub mod rpm;
pub mod run;
pub mod serve;
pub mod sysinfo;
pub mod test;

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Ends this process when its stdin closes: set (the variable
/// [`flowlab_runner::place::EXIT_WITH_STDIN`]) by a place that runs flowlab over SSH,
/// where killing the local `ssh` closes the remote command's stdin and nothing else
/// (without a terminal, sshd sends no signal). SIGTERM first, as `kill` would, so a
/// command ends as it does on one; if it has not ended 2 s later, exit.
pub fn exit_with_stdin() {
    let _ = std::thread::Builder::new()
        .name("stdin-watch".into())
        .spawn(|| {
            use std::io::Read;
            let mut stdin = std::io::stdin();
            let mut sink = [0u8; 512];
            while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGTERM);
            std::thread::sleep(std::time::Duration::from_secs(2));
            std::process::exit(143);
        });
}

/// A flag that the first Ctrl-C (SIGINT), SIGTERM or SIGHUP sets, to end a measurement
/// or a study cleanly with what it has (as iperf3 ends on each); a second one exits at
/// once.
pub fn install_ctrl_c() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let presses = AtomicUsize::new(0);
    let f = Arc::clone(&flag);
    let _ = ctrlc::set_handler(move || {
        if presses.fetch_add(1, Ordering::AcqRel) > 0 {
            std::process::exit(130);
        }
        f.store(true, Ordering::Release);
    });
    flag
}

/// Writes `text` to stdout at once (a log line, table rows as they come), each line
/// begun with the time under `--timestamps`.
pub fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    match TIMESTAMPS.get() {
        None => {
            let _ = out.write_all(text.as_bytes());
        }
        Some(format) => {
            let now = chrono::Local::now().format(format).to_string();
            let mut at_start = LINE_START.load(Ordering::Acquire);
            for piece in text.split_inclusive('\n') {
                if at_start {
                    let _ = out.write_all(now.as_bytes());
                }
                let _ = out.write_all(piece.as_bytes());
                at_start = piece.ends_with('\n');
            }
            LINE_START.store(at_start, Ordering::Release);
        }
    }
    let _ = out.flush();
}

/// Writes JSON text (a JSON-stream or log line) to stdout at once, as it is: never
/// timestamped, so every line stays a JSON document.
pub fn emit_json(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// A file holding this process's id while it runs (`-I/--pidfile`), removed when dropped.
#[derive(Debug)]
pub struct PidFile(std::path::PathBuf);

impl PidFile {
    /// Writes the id to `path`, which is removed when the guard is dropped. A file that
    /// names another process still running is left alone and refused (as iperf3 does):
    /// that is another server's, which would lose it. One naming no live process (a
    /// crash's leftover) is replaced.
    pub fn write(path: &std::path::Path) -> anyhow::Result<PidFile> {
        use anyhow::Context;
        let path = std::path::absolute(path)
            .with_context(|| format!("-I/--pidfile {}", path.display()))?;
        let held = std::fs::read_to_string(&path)
            .ok()
            .and_then(|text| text.trim().parse::<i32>().ok())
            .filter(|&pid| pid > 0 && pid as u32 != std::process::id());
        if let Some(pid) = held {
            let pid = nix::unistd::Pid::from_raw(pid);
            // Signal 0 checks the process exists; EPERM: it does, someone else's.
            if matches!(
                nix::sys::signal::kill(pid, None),
                Ok(()) | Err(nix::errno::Errno::EPERM)
            ) {
                anyhow::bail!(
                    "-I/--pidfile {}: process {pid} is running and holds it (another \
                     server?); stop it or name another file",
                    path.display()
                );
            }
        }
        std::fs::write(&path, format!("{}\n", std::process::id()))
            .with_context(|| format!("-I/--pidfile {}", path.display()))?;
        Ok(PidFile(path))
    }

    /// As [`PidFile::write`], and also removed when SIGINT, SIGTERM or SIGHUP ends the
    /// process (a server runs until one does): they are blocked in this thread, and so in
    /// every thread it starts from now on, and awaited by a thread of their own. Call it
    /// before starting any other thread.
    pub fn write_until_signalled(path: &std::path::Path) -> anyhow::Result<PidFile> {
        use nix::sys::signal::{SigSet, Signal};
        let file = PidFile::write(path)?;
        let mut signals = SigSet::empty();
        for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
            signals.add(s);
        }
        signals.thread_block()?;
        let path = file.0.clone();
        std::thread::Builder::new()
            .name("flowlab-signals".into())
            .spawn(move || {
                let Ok(signal) = signals.wait() else {
                    std::process::exit(1)
                };
                let _ = std::fs::remove_file(&path);
                // Then die of the signal, as without a pid file (a service manager takes
                // SIGTERM's death as a clean stop): its default action, unblocked here.
                // SAFETY: setting the default disposition installs no handler.
                let _ = unsafe {
                    nix::sys::signal::signal(signal, nix::sys::signal::SigHandler::SigDfl)
                };
                let mut only = SigSet::empty();
                only.add(signal);
                let _ = only.thread_unblock();
                let _ = nix::sys::signal::raise(signal);
                std::process::exit(128 + signal as i32);
            })?;
        Ok(file)
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Goes on in the background as daemon(3) does — a child in a session of its own, output
/// to /dev/null unless `keep_output` (--logfile) — but the command returns only once the
/// child has run `ready` (its pid file written): a script or systemd's `Type=forking`
/// finds the pid file the moment `flowlab serve -D` returns, and an error of the child's
/// is said on the terminal, with status 1. Call it before starting any thread: fork(2)
/// keeps only the calling one.
pub fn detach<T>(
    keep_output: bool,
    ready: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    use anyhow::Context;
    use nix::unistd::{ForkResult, fork, pipe, setsid};
    use std::io::Read;
    let threads = std::fs::read_dir("/proc/self/task").map_or(1, |d| d.count());
    anyhow::ensure!(
        threads == 1,
        "-D/--daemon: {threads} threads run already; fork(2) would keep one"
    );
    let (from_child, to_parent) = pipe().context("-D/--daemon")?;
    // SAFETY: no other thread runs (checked above), so the child is a whole process.
    match unsafe { fork() }.context("-D/--daemon")? {
        ForkResult::Parent { .. } => {
            drop(to_parent);
            let mut said = String::new();
            let _ = std::fs::File::from(from_child).read_to_string(&mut said);
            match said.as_str() {
                "ready" => std::process::exit(0),
                "" => anyhow::bail!("-D/--daemon: the background process ended at once"),
                error => {
                    eprintln!("error: {error}");
                    std::process::exit(1)
                }
            }
        }
        ForkResult::Child => {
            drop(from_child);
            let mut to_parent = std::fs::File::from(to_parent);
            let started = (|| {
                setsid()?;
                let null = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open("/dev/null")?;
                nix::unistd::dup2_stdin(&null)?;
                if !keep_output {
                    nix::unistd::dup2_stdout(&null)?;
                    nix::unistd::dup2_stderr(&null)?;
                }
                ready()
            })();
            let said = match &started {
                Ok(_) => "ready".to_string(),
                Err(e) => format!("{e:#}"),
            };
            let _ = to_parent.write_all(said.as_bytes());
            drop(to_parent);
            started
        }
    }
}

/// The strftime(3) format `--timestamps` begins each line of text output with.
static TIMESTAMPS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
/// Whether the next text [`emit`] writes begins a line.
static LINE_START: AtomicBool = AtomicBool::new(true);

/// Begins every line [`emit`] writes from now on with the local time in `format`
/// (strftime(3), as chrono reads it), or says what in the format is not understood.
pub fn timestamp_lines(format: &str) -> Result<(), crate::usage::Usage> {
    use chrono::format::{Item, StrftimeItems};
    if StrftimeItems::new(format).any(|i| matches!(i, Item::Error)) {
        return Err(crate::usage::Usage(format!(
            "--timestamps={format}: not a strftime(3) format (e.g. --timestamps='%F %T ')"
        )));
    }
    let _ = TIMESTAMPS.set(format.to_string());
    Ok(())
}

/// This flowlab binary, to run it again: `/proc/<pid>/exe`, which reaches this process's
/// own binary while it lives, even after the file was replaced or deleted (a rebuild or
/// an upgrade during a study of hours made every later trial fail: the path
/// `current_exe` gives then ends in " (deleted)"); where /proc is missing, that path.
pub fn own_binary() -> std::io::Result<std::path::PathBuf> {
    let exe = std::path::PathBuf::from(format!("/proc/{}/exe", std::process::id()));
    if exe.exists() {
        Ok(exe)
    } else {
        std::env::current_exe()
    }
}

/// A fragment service's token from `--token-file FILE`: the file's text without its
/// trailing newline, checked for length. With `warn_if_readable`, says so when others
/// than the owner can read the file.
pub fn read_token(
    path: &std::path::Path,
    warn_if_readable: bool,
) -> Result<Vec<u8>, crate::usage::Usage> {
    use std::os::unix::fs::PermissionsExt;
    let at = |e: &dyn std::fmt::Display| {
        crate::usage::Usage(format!("--token-file {}: {e}", path.display()))
    };
    let text = std::fs::read(path).map_err(|e| at(&e))?;
    let token = text.trim_ascii_end().to_vec();
    flowlab_fragments::serve::check_token(&token).map_err(|e| at(&e))?;
    if warn_if_readable {
        let mode = std::fs::metadata(path)
            .map_err(|e| at(&e))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            eprintln!(
                "warning: --token-file {}: readable by others (mode {:o}); `chmod 600` it",
                path.display(),
                mode & 0o777
            );
        }
    }
    Ok(token)
}

/// `-B ADDRESS[%DEV]` with the other ways to name a device (a test's `HOST%DEV` before
/// it, `--bind-dev DEV` after): the address to bind, and the one device they all name;
/// two different devices are refused.
pub fn bind_and_device(
    host_dev: Option<&str>,
    bind: Option<&str>,
    bind_dev: Option<&str>,
) -> Result<(Option<std::net::IpAddr>, Option<String>), crate::usage::Usage> {
    use crate::usage::Usage;
    let (address, dev) = match bind.map(|b| b.split_once('%').unwrap_or((b, ""))) {
        Some((a, dev)) => {
            let ip = a
                .parse()
                .map_err(|_| Usage(format!("-B/--bind {a}: not an IPv4 or IPv6 address")))?;
            (Some(ip), Some(dev).filter(|d| !d.is_empty()))
        }
        None => (None, None),
    };
    let devices: Vec<&str> = [host_dev, dev, bind_dev].into_iter().flatten().collect();
    if devices.windows(2).any(|w| w[0] != w[1]) {
        return Err(Usage(format!(
            "--bind-dev: two devices given ({}); give one",
            devices.join(", ")
        )));
    }
    Ok((address, devices.first().map(|d| d.to_string())))
}
