//! A host reached over SSH: the `ssh` binary with the user's own configuration, keys and
//! agent (a `ProxyJump` works because OpenSSH does it), one connection reused for every
//! command (`ControlMaster`), and the flowlab found there.
//!
//! - **Connected** ([`Ssh::connect`]): the master connection starts, and the remote
//!   flowlab's version must be this one's (`flowlab -v`), or the host is refused with
//!   both versions named.
//! - **Started**: a job is `ssh HOST -- cd DIR && exec [ip netns exec NS] FLOWLAB ARGS`
//!   with [`EXIT_WITH_STDIN`] set; its stdin is a pipe this end holds. Killing the local
//!   `ssh` closes that stdin, and the remote flowlab ends itself (without a terminal,
//!   sshd sends the command no signal), so a step killed at its deadline, a run stopped
//!   with Ctrl-C, or a place dropped leaves nothing running there.
//! - **Files** move through the connection (`cat` at the far end): no `scp` needed.
//! - **Lost connection**: the master gives up after [`ALIVE`] × [`ALIVE_COUNT`] without
//!   an answer, and every command on it ends with `ssh`'s status 255.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use flowlab_results::monitor::ClockOffset;
use flowlab_results::rtt::RttResult;

use super::local::spawn;
use super::{Echoes, Job, Output, Place, Process};

/// The environment variable that makes flowlab end when its stdin closes.
pub const EXIT_WITH_STDIN: &str = "FLOWLAB_EXIT_WITH_STDIN";
/// Seconds between the master connection's keep-alive probes …
pub const ALIVE: u32 = 5;
/// … and how many may go unanswered before it gives up.
pub const ALIVE_COUNT: u32 = 3;
/// How long connecting (and the version check) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// Why a host could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SshError {
    #[error("'{0}' is not an SSH address (ssh://[USER@]HOST[:PORT])")]
    Address(String),
    #[error("{host}: cannot connect: {why}")]
    Connect { host: String, why: String },
    #[error(
        "{host}: runs flowlab {theirs} ({path}), this is flowlab {ours}: install the same version there, or name its path"
    )]
    Version {
        host: String,
        path: String,
        theirs: String,
        ours: String,
    },
}

/// Where and how to reach a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshTarget {
    /// `[USER@]HOST`, as `ssh` takes it.
    pub destination: String,
    pub port: Option<u16>,
}

impl SshTarget {
    /// Reads `ssh://[USER@]HOST[:PORT]` (an IPv6 address in brackets).
    pub fn parse(address: &str) -> Result<SshTarget, SshError> {
        let bad = || SshError::Address(address.to_string());
        let url = url::Url::parse(address).map_err(|_| bad())?;
        if url.scheme() != "ssh"
            || url.password().is_some()
            || !matches!(url.path(), "" | "/")
            || url.query().is_some()
            || url.fragment().is_some()
        {
            return Err(bad());
        }
        let host = url.host_str().filter(|h| !h.is_empty()).ok_or_else(bad)?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let destination = match url.username() {
            "" => host.to_string(),
            user => format!("{user}@{host}"),
        };
        Ok(SshTarget {
            destination,
            port: url.port(),
        })
    }
}

/// A host as a study or a mesh names it (`[ssh]`): how to reach it, what the others
/// reach it at, and the flowlab to run there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    pub target: SshTarget,
    /// What the other hosts reach it at: the entry's `address`, else the URL's host.
    pub address: String,
    /// A path, or a name its `PATH` finds.
    pub flowlab: String,
}

impl Remote {
    /// Reads an `[ssh]` entry.
    pub fn of(host: &flowlab_study::ssh::SshHost) -> Result<Remote, SshError> {
        let target = SshTarget::parse(&host.url)?;
        let address = host.address.clone().unwrap_or_else(|| {
            let d = &target.destination;
            d.rsplit_once('@')
                .map_or(d.clone(), |(_, host)| host.to_string())
        });
        Ok(Remote {
            target,
            address,
            flowlab: host.flowlab.clone().unwrap_or_else(|| "flowlab".into()),
        })
    }

    /// Connects with `ssh`'s `options`, checking its flowlab is version `version`
    /// ([`Ssh::connect`]).
    pub fn connect(&self, options: &[String], version: &str) -> Result<Ssh, SshError> {
        Ssh::connect(self.target.clone(), &self.flowlab, options, version)
    }
}

/// A host over SSH, reached with the `ssh` binary and the user's own configuration,
/// keys and agent, one master connection reused for every command. A job runs there
/// as `cd DIR && exec [ip netns exec NS] FLOWLAB ARGS` with [`EXIT_WITH_STDIN`] set and
/// its stdin held here: killing the local `ssh` closes it, and the remote flowlab ends
/// itself (sshd sends a command without a terminal no signal). Files move through the
/// connection. Dropped, its connection closes, and every command on it ends.
#[derive(Debug)]
pub struct Ssh {
    target: SshTarget,
    /// The flowlab to run there: a path, or a name its `PATH` finds.
    flowlab: String,
    /// More of `ssh`'s options (`-i KEY`, `-F FILE`, `-o …`), ahead of flowlab's own:
    /// where both set one, the caller's holds.
    options: Vec<String>,
    /// Holds the master connection's socket.
    control: tempfile::TempDir,
    master: Mutex<Child>,
}

impl Ssh {
    /// Connects to `target` with `ssh`'s `options`, and checks that `flowlab` there is
    /// version `version` (as `flowlab -v` prints it: "flowlab 0.1.0 (…)").
    pub fn connect(
        target: SshTarget,
        flowlab: &str,
        options: &[String],
        version: &str,
    ) -> Result<Ssh, SshError> {
        let host = target.destination.clone();
        let failed = |why: String| SshError::Connect {
            host: host.clone(),
            why,
        };
        let control = tempfile::Builder::new()
            .prefix("flowlab-ssh-")
            .tempdir()
            .map_err(|e| failed(format!("a directory for its connection: {e}")))?;
        let mut master = Command::new("ssh");
        master
            .args(["-M", "-N", "-o", "ControlPersist=no"])
            .args(base_options(control.path(), &target, options))
            .arg(&target.destination)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let master = master
            .spawn()
            .map_err(|e| failed(format!("starting ssh: {e}")))?;
        let ssh = Ssh {
            target,
            flowlab: flowlab.to_string(),
            options: options.to_vec(),
            control,
            master: Mutex::new(master),
        };
        ssh.await_master().map_err(failed)?;
        let theirs = ssh.remote_version().map_err(failed)?;
        let word = |v: &str| v.split_whitespace().nth(1).unwrap_or("").to_string();
        if word(&theirs) != version {
            return Err(SshError::Version {
                host: ssh.target.destination.clone(),
                path: ssh.flowlab.clone(),
                theirs: word(&theirs),
                ours: version.to_string(),
            });
        }
        Ok(ssh)
    }

    /// Waits until the master connection answers, or says why it ended.
    fn await_master(&self) -> Result<(), String> {
        let started = Instant::now();
        loop {
            let exited = {
                let mut master = self.master.lock().unwrap_or_else(|e| e.into_inner());
                master.try_wait().map_err(|e| e.to_string())?
            };
            if let Some(status) = exited {
                let mut said = String::new();
                if let Some(mut err) = self
                    .master
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .stderr
                    .take()
                {
                    use std::io::Read;
                    let _ = err.read_to_string(&mut said);
                }
                let last = said.lines().rev().find(|l| !l.trim().is_empty());
                return Err(last.map_or_else(
                    || format!("ssh exited with {status}"),
                    |l| l.trim().to_string(),
                ));
            }
            if self.master_says("check").map_err(|e| e.to_string())? {
                return Ok(());
            }
            if started.elapsed() > CONNECT_TIMEOUT {
                return Err(format!(
                    "no connection within {} s",
                    CONNECT_TIMEOUT.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Asks the master connection `op` (`check`, `exit`): whether it answered yes.
    fn master_says(&self, op: &str) -> std::io::Result<bool> {
        Command::new("ssh")
            .args(["-O", op])
            .args(base_options(
                self.control.path(),
                &self.target,
                &self.options,
            ))
            .arg(&self.target.destination)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
    }

    /// `flowlab -v` there.
    fn remote_version(&self) -> Result<String, String> {
        let out = self
            .command(&format!("exec {} -v", quote(&self.flowlab)))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(format!("{} -v failed there: {}", self.flowlab, err.trim()));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// `ssh` on the master connection, running `remote` (a shell command line) there.
    /// Only on it: without its master (a lost connection) `ssh` would connect anew, and
    /// wait out its connect timeout on a host that is gone; a proxy command that fails
    /// at once (ahead of the caller's options, so it holds) makes that fallback fail.
    fn command(&self, remote: &str) -> Command {
        let mut cmd = Command::new("ssh");
        cmd.args(["-o", "ProxyCommand=false"])
            .args(base_options(
                self.control.path(),
                &self.target,
                &self.options,
            ))
            .arg("-T")
            .arg(&self.target.destination)
            .arg("--")
            .arg(remote);
        cmd
    }

    /// The host, as its address named it.
    pub fn host(&self) -> &str {
        &self.target.destination
    }

    /// Whether the master connection still stands: its `ssh`, this process's child,
    /// has not ended (a lost connection ends it). What `ssh -O check` says, without the
    /// 6.7 ms of CPU a process of its own costs: the runner asks twice a second per host.
    pub fn alive(&self) -> bool {
        let mut master = self.master.lock().unwrap_or_else(|e| e.into_inner());
        matches!(master.try_wait(), Ok(None))
    }

    /// `script` run by the shell there: what it printed, or why it failed, naming
    /// `doing`.
    fn run(&self, script: &str, doing: &str) -> std::io::Result<String> {
        let out = self.command(script).stdin(Stdio::null()).output()?;
        if !out.status.success() {
            let why = if self.alive() {
                String::from_utf8_lossy(&out.stderr).trim().to_string()
            } else {
                "the connection was lost".into()
            };
            return Err(std::io::Error::other(format!(
                "{}: {doing}: {why}",
                self.host()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// A new directory there of this run's own (`mktemp -d`, mode 0700, in its `TMPDIR`
    /// or /tmp).
    pub fn make_temp_dir(&self) -> std::io::Result<std::path::PathBuf> {
        let dir = self.run(
            "exec mktemp -d \"${TMPDIR:-/tmp}/flowlab-run.XXXXXXXX\"",
            "making a directory",
        )?;
        if !dir.starts_with('/') {
            return Err(std::io::Error::other(format!(
                "{}: mktemp -d said '{dir}', not a directory",
                self.host()
            )));
        }
        Ok(dir.into())
    }

    /// Makes directory `dir` there (and its parents).
    pub fn make_dir(&self, dir: &Path) -> std::io::Result<()> {
        let dir = quote(&dir.display().to_string());
        self.run(&format!("exec mkdir -p -- {dir}"), &format!("making {dir}"))
            .map(|_| ())
    }

    /// Removes directory `dir` there with everything in it.
    pub fn remove_dir(&self, dir: &Path) -> std::io::Result<()> {
        let dir = quote(&dir.display().to_string());
        self.run(&format!("exec rm -rf -- {dir}"), &format!("removing {dir}"))
            .map(|_| ())
    }

    /// Its clock against this machine's, best of `tries` readings (`date +%s.%N` there,
    /// through the connection, between two readings here): see [`ClockOffset`]. The
    /// round trip includes starting a command there, so the uncertainty is
    /// milliseconds, not the network's microseconds.
    pub fn clock_offset(&self, name: &str, tries: u32) -> Result<ClockOffset, String> {
        let mut readings = Vec::new();
        for _ in 0..tries.max(1) {
            let before = flowlab_db::now();
            let out = self
                .command("exec date +%s.%N")
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("{}: reading its clock: {e}", self.host()))?;
            let after = flowlab_db::now();
            let text = String::from_utf8_lossy(&out.stdout);
            let remote: f64 = text.trim().parse().map_err(|_| {
                format!(
                    "{}: reading its clock: `date +%s.%N` said '{}' {}",
                    self.host(),
                    text.trim(),
                    String::from_utf8_lossy(&out.stderr).trim()
                )
            })?;
            readings.push((before, remote, after));
        }
        ClockOffset::best_of(name, &readings).ok_or_else(|| "no reading".into())
    }
}

/// The options every `ssh` of a place takes: the caller's own first (for `ssh`, the
/// first value given for an option is the one it keeps), its master connection's
/// socket, no password prompt (keys and agent only), the keep-alive that notices a lost
/// connection, and the port.
fn base_options(control: &Path, target: &SshTarget, options: &[String]) -> Vec<String> {
    let mut o: Vec<String> = options.to_vec();
    o.extend::<[String; 10]>([
        "-S".into(),
        control.join("master").display().to_string(),
        "-o".into(),
        "BatchMode=yes".into(),
        "-o".into(),
        format!("ServerAliveInterval={ALIVE}"),
        "-o".into(),
        format!("ServerAliveCountMax={ALIVE_COUNT}"),
        "-o".into(),
        format!("ConnectTimeout={}", CONNECT_TIMEOUT.as_secs()),
    ]);
    if let Some(p) = target.port {
        o.extend(["-p".into(), p.to_string()]);
    }
    o
}

/// `word` quoted for the remote shell.
fn quote(word: &str) -> String {
    shlex::try_quote(word).map_or_else(|_| "''".into(), |q| q.into_owned())
}

impl Place for Ssh {
    fn start(&self, job: &Job<'_>, output: Output) -> std::io::Result<Box<dyn Process>> {
        let mut line = format!(
            "cd {} && {EXIT_WITH_STDIN}=1 exec ",
            quote(&job.dir.display().to_string())
        );
        if let Some(ns) = job.ns {
            line += &format!("ip netns exec {} ", quote(ns));
        }
        line += &quote(&self.flowlab);
        for a in job.argv {
            line.push(' ');
            line += &quote(a);
        }
        spawn(self.command(&line), output, true)
    }

    fn put(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        let file = std::fs::File::open(from)?;
        let remote = format!("cat > {}", quote(&to.display().to_string()));
        let out = self.command(&remote).stdin(file).output()?;
        transferred(out, "writing", to)
    }

    fn get(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        let file = std::fs::File::create(to)?;
        let remote = format!("cat {}", quote(&from.display().to_string()));
        let out = self
            .command(&remote)
            .stdin(Stdio::null())
            .stdout(file)
            .output()?;
        transferred(out, "reading", from)
    }

    fn now(&self) -> f64 {
        flowlab_db::now()
    }

    /// The echoes are sent there, by its flowlab (`flowlab net _echo`, which prints
    /// their result): a stop kills it.
    fn echo(&self, e: &Echoes, ns: Option<&str>, stop: &AtomicBool) -> Result<RttResult, String> {
        let argv = echo_line(e);
        let job = Job {
            argv: &argv,
            dir: Path::new("."),
            ns,
        };
        let failed = |why: String| format!("{}: echoes to {}: {why}", self.host(), e.to);
        let mut process = self
            .start(&job, Output::Keep)
            .map_err(|err| failed(err.to_string()))?;
        let exit = loop {
            if stop.load(std::sync::atomic::Ordering::Acquire) {
                process.kill();
                return Err(failed("stopped".into()));
            }
            match process.try_wait() {
                Ok(Some(exit)) => break exit,
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(err) => return Err(failed(err.to_string())),
            }
        };
        let out = process.finish();
        if !exit.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let last = err.lines().rev().find(|l| !l.trim().is_empty());
            return Err(failed(last.map_or_else(
                || format!("it exited with {exit}"),
                |l| l.trim_start_matches("error: ").to_string(),
            )));
        }
        serde_json::from_slice(&out.stdout).map_err(|err| failed(format!("its result: {err}")))
    }
}

/// The arguments of `flowlab net _echo` that send echoes `e`.
pub fn echo_line(e: &Echoes) -> Vec<String> {
    vec![
        "net".into(),
        "_echo".into(),
        "--count".into(),
        e.count.to_string(),
        "--interval-us".into(),
        e.interval.as_micros().to_string(),
        "--timeout-us".into(),
        e.timeout.as_micros().to_string(),
        e.to.clone(),
    ]
}

/// A file's move ended: an error naming it unless `ssh` said it succeeded.
fn transferred(out: std::process::Output, doing: &str, path: &Path) -> std::io::Result<()> {
    if out.status.success() {
        return Ok(());
    }
    Err(std::io::Error::other(format!(
        "{doing} {} there: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

impl Drop for Ssh {
    /// Closes the master connection (every command on it ends with it).
    fn drop(&mut self) {
        let _ = self.master_says("exit");
        let mut master = self.master.lock().unwrap_or_else(|e| e.into_inner());
        let _ = master.kill();
        let _ = master.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ssh_address_is_user_host_and_port() {
        let t = SshTarget::parse("ssh://lab@h1.example:2222").expect("address");
        assert_eq!(t.destination, "lab@h1.example");
        assert_eq!(t.port, Some(2222));
        let t = SshTarget::parse("ssh://[2001:db8::1]").expect("IPv6");
        assert_eq!(t.destination, "2001:db8::1");
        assert_eq!(t.port, None);
        for bad in [
            "h1",
            "http://h1",
            "ssh://",
            "ssh://u:secret@h1",
            "ssh://h1/path",
            "ssh://h1?x=1",
        ] {
            assert_eq!(
                SshTarget::parse(bad),
                Err(SshError::Address(bad.into())),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_remote_command_is_quoted_for_the_shell() {
        assert_eq!(quote("plain"), "plain");
        assert_eq!(quote("two words"), "'two words'");
        assert_eq!(quote("it's"), "\"it's\"");
    }
}
