//! This machine: flowlab run again as a child process, in a namespace through `ip netns
//! exec`.
//!
//! Children, not threads: a step that hangs is killed at its deadline or when the run
//! stops, and a step in a namespace runs there. Each child is killed by the kernel if
//! the runner dies first, so a runner killed outright leaves no server or client behind.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use flowlab_results::rtt::RttResult;

use super::{Echoes, Exit, Job, Output, Place, Process, Written};

/// This machine, running the flowlab binary at `flowlab`.
#[derive(Debug, Clone)]
pub struct Local {
    flowlab: PathBuf,
}

impl Local {
    /// Runs the binary at `flowlab` (the caller's own, usually: `/proc/self/exe` reaches
    /// it even after the file was replaced mid-study).
    pub fn new(flowlab: PathBuf) -> Local {
        Local { flowlab }
    }

    fn command(&self, ns: Option<&str>) -> Command {
        let mut cmd = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&self.flowlab);
                c
            }
            None => {
                let mut c = Command::new(&self.flowlab);
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
        cmd
    }
}

/// A child process: killed and reaped when dropped.
#[derive(Debug)]
struct Running {
    child: Child,
    /// The stdin this end holds open (see [`spawn`]).
    _lifeline: Option<std::process::ChildStdin>,
    out: Option<JoinHandle<Vec<u8>>>,
    err: Option<JoinHandle<Vec<u8>>>,
    first: Option<mpsc::Receiver<String>>,
    /// What a [`Output::FirstLine`] process said on stderr (its first 4 KiB).
    said: Arc<Mutex<Vec<u8>>>,
}

/// Starts `cmd`, its output kept as `output` says, as a [`Process`] killed and reaped
/// when dropped. With `hold_stdin`, its stdin is a pipe this end holds open for as long
/// as the process is kept (over SSH, the remote command's lifeline); else it is null.
pub(super) fn spawn(
    mut cmd: Command,
    output: Output,
    hold_stdin: bool,
) -> std::io::Result<Box<dyn Process>> {
    cmd.stdin(if hold_stdin {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    let lifeline = child.stdin.take();
    let stdout = child.stdout.take().ok_or(std::io::ErrorKind::BrokenPipe);
    let stderr = child.stderr.take().ok_or(std::io::ErrorKind::BrokenPipe);
    let (stdout, stderr) = match (stdout, stderr) {
        (Ok(o), Ok(e)) => (o, e),
        _ => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::ErrorKind::BrokenPipe.into());
        }
    };
    let said = Arc::new(Mutex::new(Vec::new()));
    let mut running = Running {
        child,
        _lifeline: lifeline,
        out: None,
        err: None,
        first: None,
        said: Arc::clone(&said),
    };
    match output {
        Output::Keep => {
            running.out = Some(drain(stdout));
            running.err = Some(drain(stderr));
        }
        Output::FirstLine => {
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let mut lines = BufReader::new(stdout).lines();
                if let Some(Ok(first)) = lines.next() {
                    let _ = tx.send(first);
                }
                for _ in lines {}
            });
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if let Ok(mut s) = said.lock() {
                        if s.len() < 4096 {
                            s.extend_from_slice(line.as_bytes());
                            s.push(b'\n');
                        }
                    }
                }
            });
            running.first = Some(rx);
        }
    }
    Ok(Box::new(running))
}

impl Place for Local {
    fn start(&self, job: &Job<'_>, output: Output) -> std::io::Result<Box<dyn Process>> {
        let mut cmd = self.command(job.ns);
        cmd.args(job.argv).current_dir(job.dir);
        spawn(cmd, output, false)
    }

    fn put(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        std::fs::copy(from, to).map(|_| ())
    }

    fn get(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        std::fs::copy(from, to).map(|_| ())
    }

    fn now(&self) -> f64 {
        flowlab_db::now()
    }

    fn echo(&self, e: &Echoes, ns: Option<&str>, stop: &AtomicBool) -> Result<RttResult, String> {
        // A thread of its own: entering a namespace moves the calling thread for good.
        std::thread::scope(|s| {
            s.spawn(|| {
                if let Some(ns) = ns {
                    flowlab_net::netns::enter(ns).map_err(|err| format!("entering {ns}: {err}"))?;
                }
                echo_here(e, stop)
            })
            .join()
            .unwrap_or_else(|_| Err("the echo thread panicked".into()))
        })
    }
}

/// `to`, an IPv4 address or a name this machine resolves to one.
fn resolve(to: &str) -> Result<std::net::Ipv4Addr, String> {
    if let Ok(a) = to.parse() {
        return Ok(a);
    }
    use std::net::ToSocketAddrs;
    let found = (to, 0)
        .to_socket_addrs()
        .map_err(|err| format!("cannot resolve {to}: {err}"))?
        .find_map(|a| match a.ip() {
            std::net::IpAddr::V4(v4) => Some(v4),
            std::net::IpAddr::V6(_) => None,
        });
    found.ok_or_else(|| format!("{to} has no IPv4 address (echoes are ICMPv4)"))
}

/// Sends `e`'s echoes from this thread's namespace, one at a time, until all are sent or
/// `stop` is set (`flowlab net _echo`, and the local place's [`Place::echo`]).
pub fn echo_here(e: &Echoes, stop: &AtomicBool) -> Result<RttResult, String> {
    let to = resolve(&e.to)?;
    let mut pinger = flowlab_net::probe::Pinger::open(None)
        .map_err(|err| format!("cannot open an ICMP socket (root needed): {err}"))?;
    let started = flowlab_db::now();
    let t0 = Instant::now();
    let mut samples = Vec::new();
    let mut sent = 0;
    for i in 0..e.count {
        if stop.load(Ordering::Acquire) {
            break;
        }
        // Echoes on a fixed schedule: a late reply does not shift the next.
        let due = e.interval * i as u32;
        std::thread::sleep(due.saturating_sub(t0.elapsed()));
        sent += 1;
        match pinger.ping(to, e.timeout) {
            Ok(Some(rtt)) => samples.push(rtt.as_secs_f64() * 1000.0),
            Ok(None) => {}
            Err(err) => return Err(format!("echo to {}: {err}", e.to)),
        }
    }
    Ok(RttResult::new(
        &e.to,
        sent,
        (
            e.interval.as_secs_f64() * 1000.0,
            e.timeout.as_secs_f64() * 1000.0,
        ),
        samples,
        started,
    ))
}

fn drain(mut r: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        buf
    })
}

impl Process for Running {
    fn try_wait(&mut self) -> std::io::Result<Option<Exit>> {
        use std::os::unix::process::ExitStatusExt;
        Ok(self.child.try_wait()?.map(|s| Exit {
            code: s.code(),
            signal: s.signal(),
        }))
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
    }

    fn first_line(&mut self, within: Duration) -> Option<String> {
        self.first.as_ref()?.recv_timeout(within).ok()
    }

    fn finish(mut self: Box<Self>) -> Written {
        let stdout = self
            .out
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        let mut stderr = self
            .err
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        if stderr.is_empty() {
            // A server's: the reader ends with the process.
            let _ = self.child.kill();
            let _ = self.child.wait();
            let deadline = Instant::now() + Duration::from_millis(200);
            while Arc::strong_count(&self.said) > 1 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            stderr = self.said.lock().map(|s| s.clone()).unwrap_or_default();
        }
        Written { stdout, stderr }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shell in flowlab's place: the mechanics without the binary.
    fn sh(script: &str, output: Output) -> Box<dyn Process> {
        let argv = ["-c".to_string(), script.to_string()];
        let job = Job {
            argv: &argv,
            dir: Path::new("/"),
            ns: None,
        };
        Local::new("/bin/sh".into())
            .start(&job, output)
            .expect("start sh")
    }

    fn wait(p: &mut Box<dyn Process>) -> Exit {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(exit) = p.try_wait().expect("try_wait") {
                return exit;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("the process did not end");
    }

    #[test]
    fn a_step_keeps_what_it_wrote_and_how_it_ended() {
        let mut p = sh("pwd; echo oops >&2; exit 3", Output::Keep);
        let exit = wait(&mut p);
        assert_eq!(
            exit,
            Exit {
                code: Some(3),
                signal: None
            }
        );
        assert_eq!(exit.to_string(), "exit status: 3");
        let w = p.finish();
        assert_eq!(
            (w.stdout.as_slice(), w.stderr.as_slice()),
            (&b"/\n"[..], &b"oops\n"[..])
        );
    }

    #[test]
    fn a_killed_step_ends_by_its_signal() {
        let mut p = sh("exec sleep 30", Output::Keep);
        p.kill();
        let exit = wait(&mut p);
        assert_eq!(
            exit,
            Exit {
                code: None,
                signal: Some(9)
            }
        );
        assert!(!exit.success());
    }

    #[test]
    fn a_server_says_its_first_line_and_why_it_did_not_start() {
        let mut p = sh(
            "echo listening; seq 100000; exec sleep 30",
            Output::FirstLine,
        );
        assert_eq!(
            p.first_line(Duration::from_secs(10)).as_deref(),
            Some("listening")
        );
        // The rest is read and dropped: it never blocks on a full pipe.
        drop(p);
        let mut p = sh("echo 'cannot bind' >&2; exit 1", Output::FirstLine);
        assert_eq!(p.first_line(Duration::from_secs(10)), None);
        assert_eq!(p.finish().stderr, b"cannot bind\n");
    }
}
