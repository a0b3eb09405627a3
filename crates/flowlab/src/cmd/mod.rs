//! One module per command: its arguments, their validation, and what it does with the
//! libraries' results (each output made by `flowlab_report`).

pub mod completions;
pub mod fetch;
pub mod fragments;
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

/// A flag that the first Ctrl-C sets, to end a measurement cleanly with what it has; a
/// second Ctrl-C exits at once.
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

/// Writes `text` to stdout at once (a log or JSON-stream line, table rows as they come).
pub fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// A child process killed and reaped when dropped (servers, and clients on an early
/// return).
#[derive(Debug)]
pub struct Reaped(pub std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
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

/// A command that runs this flowlab binary again (in network namespace `ns` when
/// given, through `ip netns exec`), killed by the kernel if this process dies first: a
/// runner killed outright leaves no server or client behind.
pub fn flowlab_child(ns: Option<&str>) -> std::io::Result<std::process::Command> {
    use std::os::unix::process::CommandExt;
    let exe = own_binary()?;
    let mut cmd = match ns {
        Some(ns) => {
            let mut c = std::process::Command::new("ip");
            c.args(["netns", "exec", ns]).arg(exe);
            c
        }
        None => {
            let mut c = std::process::Command::new(exe);
            c.arg0("flowlab");
            c
        }
    };
    // SAFETY: between fork and exec only prctl(2) runs, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)
        });
    }
    Ok(cmd)
}

/// A fragment service's token from `--token-file FILE`: the file's text without its
/// trailing newline, checked for length. With `warn_if_readable`, says so when others
/// than the owner can read the file.
pub fn read_token(
    path: &std::path::Path,
    warn_if_readable: bool,
) -> Result<Vec<u8>, crate::cli::Usage> {
    use std::os::unix::fs::PermissionsExt;
    let at = |e: &dyn std::fmt::Display| {
        crate::cli::Usage(format!("--token-file {}: {e}", path.display()))
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
