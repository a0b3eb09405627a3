//! A place inside this process: each job is a call of a function on a thread of its
//! own. It serves the runners' own tests (what they decide, checked without a binary
//! or a network) and an embedder that measures in-process.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use flowlab_results::rtt::RttResult;

use super::{Echoes, Exit, Job, Output, Place, Process, Written};

/// A job as the function sees it.
pub struct Call<'a> {
    /// flowlab's arguments (the subcommand first).
    pub argv: &'a [String],
    pub dir: &'a Path,
    pub ns: Option<&'a str>,
    /// Set when the process is killed: a call that runs long watches it and returns.
    pub killed: &'a AtomicBool,
    /// Its stdout: a server's first line, e.g. (a `FirstLine` job's later lines are
    /// dropped).
    pub say: &'a dyn Fn(&str),
}

impl std::fmt::Debug for Call<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call")
            .field("argv", &self.argv)
            .field("ns", &self.ns)
            .finish_non_exhaustive()
    }
}

/// What a call returns: its exit status and its stderr (its stdout went to `say`).
pub type Ended = (i32, String);

/// A job started: its arguments and namespace.
pub type Started = (Vec<String>, Option<String>);

type Body = dyn Fn(&Call<'_>) -> Ended + Send + Sync;
type EchoBody = dyn Fn(&Echoes, Option<&str>) -> Result<RttResult, String> + Send + Sync;

/// Jobs run by `body` in this process.
#[derive(Clone)]
pub struct InProcess {
    body: Arc<Body>,
    echo: Arc<EchoBody>,
    /// The clock: each reading one millisecond after the last, from `start`.
    clock: Arc<AtomicU64>,
    /// Every job started, in order.
    pub started: Arc<Mutex<Vec<Started>>>,
}

impl std::fmt::Debug for InProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcess").finish_non_exhaustive()
    }
}

impl InProcess {
    /// Runs every job with `body`; echoes are refused until [`InProcess::echoing`].
    pub fn new(body: impl Fn(&Call<'_>) -> Ended + Send + Sync + 'static) -> InProcess {
        InProcess {
            body: Arc::new(body),
            echo: Arc::new(|_, _| Err("this place sends no echoes".into())),
            clock: Arc::new(AtomicU64::new(1_700_000_000_000)),
            started: Arc::default(),
        }
    }

    /// Sends echoes with `body`.
    pub fn echoing(
        mut self,
        body: impl Fn(&Echoes, Option<&str>) -> Result<RttResult, String> + Send + Sync + 'static,
    ) -> InProcess {
        self.echo = Arc::new(body);
        self
    }
}

#[derive(Debug)]
struct Running {
    killed: Arc<AtomicBool>,
    handle: Option<JoinHandle<Ended>>,
    ended: Option<Ended>,
    lines: mpsc::Receiver<String>,
    stdout: Vec<u8>,
    output: Output,
}

impl Place for InProcess {
    fn start(&self, job: &Job<'_>, output: Output) -> std::io::Result<Box<dyn Process>> {
        let argv = job.argv.to_vec();
        let dir = job.dir.to_path_buf();
        let ns = job.ns.map(str::to_string);
        if let Ok(mut s) = self.started.lock() {
            s.push((argv.clone(), ns.clone()));
        }
        let killed = Arc::new(AtomicBool::new(false));
        let (tx, lines) = mpsc::channel::<String>();
        let body = Arc::clone(&self.body);
        let k = Arc::clone(&killed);
        let handle = std::thread::spawn(move || {
            let say = |line: &str| {
                let _ = tx.send(line.to_string());
            };
            body(&Call {
                argv: &argv,
                dir: &dir,
                ns: ns.as_deref(),
                killed: &k,
                say: &say,
            })
        });
        Ok(Box::new(Running {
            killed,
            handle: Some(handle),
            ended: None,
            lines,
            stdout: Vec::new(),
            output,
        }))
    }

    fn put(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        std::fs::copy(from, to).map(|_| ())
    }

    fn get(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        std::fs::copy(from, to).map(|_| ())
    }

    fn now(&self) -> f64 {
        self.clock.fetch_add(1, Ordering::AcqRel) as f64 / 1000.0
    }

    fn echo(&self, e: &Echoes, ns: Option<&str>, _stop: &AtomicBool) -> Result<RttResult, String> {
        (self.echo)(e, ns)
    }
}

impl Running {
    fn collect(&mut self) {
        if self.output == Output::Keep {
            for line in self.lines.try_iter() {
                self.stdout.extend_from_slice(line.as_bytes());
                self.stdout.push(b'\n');
            }
        }
    }
}

impl Process for Running {
    fn try_wait(&mut self) -> std::io::Result<Option<Exit>> {
        self.collect();
        if self.handle.as_ref().is_some_and(JoinHandle::is_finished) {
            if let Some(h) = self.handle.take() {
                self.ended = Some(h.join().unwrap_or((101, "the call panicked".into())));
            }
        }
        // A killed call ends as a killed process does: by SIGKILL.
        let killed = self.killed.load(Ordering::Acquire);
        Ok(self.ended.as_ref().map(|(code, _)| Exit {
            code: (!killed).then_some(*code),
            signal: killed.then_some(9),
        }))
    }

    fn kill(&mut self) {
        self.killed.store(true, Ordering::Release);
    }

    fn first_line(&mut self, within: Duration) -> Option<String> {
        self.lines.recv_timeout(within).ok()
    }

    fn finish(mut self: Box<Self>) -> Written {
        if let Some(h) = self.handle.take() {
            self.ended = Some(h.join().unwrap_or((101, "the call panicked".into())));
        }
        self.collect();
        Written {
            stdout: std::mem::take(&mut self.stdout),
            stderr: self
                .ended
                .take()
                .map(|(_, e)| e.into_bytes())
                .unwrap_or_default(),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.killed.store(true, Ordering::Release);
    }
}
