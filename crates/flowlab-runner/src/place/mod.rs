//! Where a step runs: the seam between what the runners decide (which command, when,
//! for how long, with what deadline) and how a machine carries it out.
//!
//! A [`Place`] is a machine: this one ([`Local`]), an in-process stand-in for the
//! runners' own tests ([`InProcess`]), and — the seam's reason to be — a host reached
//! over SSH ([`Ssh`]). On it, a [`Job`] runs flowlab with some arguments, in a directory, inside
//! one of the machine's network namespaces when it names one. What the seam says:
//!
//! - **Started**: [`Place::start`] returns a [`Process`] at once; the caller polls it
//!   ([`Process::try_wait`]) and reads what it wrote once it ended ([`Process::finish`]).
//!   A server's first line ([`Output::FirstLine`]) says where it listens.
//! - **Cancelled and timed out**: the caller owns the deadline and the stop flag, and
//!   ends a process with [`Process::kill`]; a process dropped is killed and reaped, so an
//!   early return leaves nothing running.
//! - **Files**: a step's files (a fetch's output, a trace, a key) move with
//!   [`Place::put`] and [`Place::get`].
//! - **Clock**: steps are stamped with [`Place::now`], the clock of the machine they
//!   ran on.
//! - **Echoes**: an RTT step's ICMP echoes are sent by the place itself
//!   ([`Place::echo`]), from the job's namespace.

mod in_process;
mod local;
mod ssh;

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use flowlab_results::rtt::RttResult;

pub use in_process::{Call, Ended, InProcess};
pub use local::Local;
pub use local::echo_here;
pub use ssh::{ALIVE, ALIVE_COUNT, EXIT_WITH_STDIN, Remote, Ssh, SshError, SshTarget, echo_line};

/// One run of flowlab at a place.
#[derive(Debug, Clone, Copy)]
pub struct Job<'a> {
    /// flowlab's arguments (the subcommand first).
    pub argv: &'a [String],
    /// The directory it runs in (relative paths in its arguments are read from there).
    pub dir: &'a Path,
    /// The network namespace it runs in; the machine's own when `None`.
    pub ns: Option<&'a str>,
}

/// What a process's output is kept for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// All of stdout and stderr, read once it ended (a step's document and its error).
    Keep,
    /// The first line of stdout ([`Process::first_line`]); the rest is read and dropped,
    /// so a server that logs for hours never blocks on a full pipe. The first 4 KiB of
    /// stderr are kept: why it did not start.
    FirstLine,
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// Its exit status; `None` when a signal ended it.
    pub code: Option<i32>,
    /// The signal that ended it.
    pub signal: Option<i32>,
}

impl Exit {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.code, self.signal) {
            (Some(c), _) => write!(f, "exit status: {c}"),
            (None, Some(s)) => write!(f, "signal: {s}"),
            (None, None) => f.write_str("an unknown status"),
        }
    }
}

/// What a process wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Written {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// A flowlab process at a place. Dropped, it is killed and reaped.
pub trait Process: Send + std::fmt::Debug {
    /// How it ended, or `None` while it runs.
    fn try_wait(&mut self) -> std::io::Result<Option<Exit>>;
    /// Ends it now (a deadline passed, or the run was stopped).
    fn kill(&mut self);
    /// The first line it wrote to stdout within `within` ([`Output::FirstLine`]).
    fn first_line(&mut self, within: Duration) -> Option<String>;
    /// What it wrote, once it ended.
    fn finish(self: Box<Self>) -> Written;
}

/// A machine where flowlab runs: see the [module](self).
pub trait Place: Send + Sync + std::fmt::Debug {
    /// Starts `job`; its output is kept as `output` says.
    fn start(&self, job: &Job<'_>, output: Output) -> std::io::Result<Box<dyn Process>>;
    /// Copies `from` on this machine to `to` at the place.
    fn put(&self, from: &Path, to: &Path) -> std::io::Result<()>;
    /// Copies `from` at the place to `to` on this machine.
    fn get(&self, from: &Path, to: &Path) -> std::io::Result<()>;
    /// The place's clock: seconds since the Unix epoch.
    fn now(&self) -> f64;
    /// Sends `echoes` from namespace `ns` at the place, one at a time, until all are
    /// sent or `stop` is set; their result, or why they could not be sent.
    fn echo(
        &self,
        echoes: &Echoes,
        ns: Option<&str>,
        stop: &AtomicBool,
    ) -> Result<RttResult, String>;
}

/// ICMP echoes, one at a time, on a fixed schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Echoes {
    /// An IPv4 address, or a name resolved where the echoes are sent from.
    pub to: String,
    pub count: u64,
    pub interval: Duration,
    pub timeout: Duration,
}
