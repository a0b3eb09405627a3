//! Where a study's setup, servers and steps run: this machine (in a topology node's
//! namespace when the study names one), or a host over SSH (`[ssh]`), each host with a
//! directory of the run's own there, made when it connects and removed when the run
//! ends. A step on a host runs in that directory; `{run}` is that directory, and a
//! trial's `{scratch}` a directory in it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use flowlab_results::monitor::ClockOffset;

use super::RunError;
use super::prepare::Prepared;
use crate::place::{Job, Output, Place, Ssh};

/// Readings of each host's clock as a trial begins; the one with the shortest round
/// trip is kept.
const CLOCK_TRIES: u32 = 3;

/// Where a job of a node runs.
pub(crate) struct At<'a> {
    pub place: &'a Arc<dyn Place>,
    /// The namespace there (a topology node's).
    pub ns: Option<String>,
    /// The directory it runs in.
    pub dir: &'a Path,
    /// `{run}` there.
    pub run: &'a Path,
}

/// A host over SSH the study uses.
struct Host {
    node: String,
    ssh: Arc<Ssh>,
    place: Arc<dyn Place>,
    /// The run's directory there.
    run: PathBuf,
}

impl Drop for Host {
    /// Removes the run's directory there while the connection lasts (a lost host keeps
    /// it: `mktemp`'s name in its TMPDIR says whose it was).
    fn drop(&mut self) {
        if self.ssh.alive() {
            let _ = self.ssh.remove_dir(&self.run);
        }
    }
}

/// The places of a study's run.
pub(crate) struct Places {
    here: Arc<dyn Place>,
    /// The study file's directory: jobs on this machine run there.
    here_dir: PathBuf,
    /// The run's directory on this machine.
    here_run: PathBuf,
    /// The topology whose nodes' namespaces jobs run in.
    topology: Option<String>,
    hosts: Vec<Host>,
}

impl Places {
    /// This machine (`here`, its run directory `run`), and each of `p`'s hosts over
    /// SSH connected (its flowlab's version checked) with a directory made there.
    pub fn connect(
        p: &Prepared,
        here: Arc<dyn Place>,
        run: &Path,
        version: &str,
    ) -> Result<Places, RunError> {
        // Each host at once: a connection costs a few round trips and a login's shell,
        // which add up over many hosts one after the other.
        let connected: Vec<Result<Host, RunError>> = std::thread::scope(|scope| {
            let threads: Vec<_> = p
                .remotes
                .iter()
                .map(|(node, remote)| {
                    scope.spawn(move || {
                        let failed = |e: &dyn std::fmt::Display| {
                            RunError::Failed(format!("host {node}: {e}"))
                        };
                        let ssh = remote
                            .connect(&p.study.ssh_options, version)
                            .map_err(|e| failed(&e))?;
                        let dir = ssh.make_temp_dir().map_err(|e| failed(&e))?;
                        let ssh = Arc::new(ssh);
                        Ok(Host {
                            node: node.clone(),
                            place: ssh.clone(),
                            ssh,
                            run: dir,
                        })
                    })
                })
                .collect();
            threads
                .into_iter()
                .map(|t| t.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect()
        });
        // The first failure, in the hosts' order; the hosts reached are dropped, which
        // removes their run directories.
        let hosts = connected.into_iter().collect::<Result<Vec<_>, _>>()?;
        Ok(Places {
            here,
            here_dir: p.dir.clone(),
            here_run: run.to_path_buf(),
            topology: p.net.as_ref().map(|n| n.topo.name.clone()),
            hosts,
        })
    }

    /// Where `node`'s jobs run (`None`: this machine's own).
    pub fn at(&self, node: Option<&str>) -> At<'_> {
        if let Some(h) = node.and_then(|n| self.hosts.iter().find(|h| h.node == n)) {
            return At {
                place: &h.place,
                ns: None,
                dir: &h.run,
                run: &h.run,
            };
        }
        At {
            place: &self.here,
            ns: match (node, &self.topology) {
                (Some(n), Some(t)) => Some(flowlab_net::build::ns_name(t, n)),
                _ => None,
            },
            dir: &self.here_dir,
            run: &self.here_run,
        }
    }

    /// Runs setup command `argv` (with `{run}` made each place's) at every place of
    /// `used` at once (`None`: this machine), and waits for all; the first failure,
    /// naming the place.
    pub fn setup(
        &self,
        text: &str,
        argv: &[String],
        used: &[Option<&str>],
    ) -> Result<(), RunError> {
        let mut running = Vec::new();
        for &node in used {
            let at = self.at(node);
            let argv = super::lines::with_run_dir(argv, &at.run.display().to_string());
            let job = Job {
                argv: &argv,
                dir: at.dir,
                ns: None,
            };
            let whose = node.map_or_else(String::new, |n| format!(" on host {n}"));
            let process = at.place.start(&job, Output::Keep).map_err(|e| {
                RunError::Failed(format!("setup '{text}'{whose}: cannot start: {e}"))
            })?;
            running.push((whose, process));
        }
        let mut failed = None;
        for (whose, mut process) in running {
            let exit = loop {
                match process.try_wait() {
                    Ok(Some(exit)) => break Some(exit),
                    Ok(None) => std::thread::sleep(std::time::Duration::from_millis(5)),
                    Err(_) => break None,
                }
            };
            let out = process.finish();
            if failed.is_none() && !exit.is_some_and(|e| e.success()) {
                let err = String::from_utf8_lossy(&out.stderr);
                let why = err
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("it could not be waited for");
                failed = Some(RunError::Failed(format!(
                    "setup '{text}'{whose} failed: {}",
                    why.trim_start_matches("error: ")
                )));
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// A trial's `{scratch}`: a directory named `name` in the run's directory at each
    /// host of `at` (the hosts of the steps that name it; this machine's is the
    /// caller's), removed when dropped.
    pub fn scratch(&self, name: &str, at: &[&str]) -> Result<RemoteScratch<'_>, RunError> {
        let mut made = RemoteScratch { dirs: Vec::new() };
        for h in self.hosts.iter().filter(|h| at.contains(&h.node.as_str())) {
            let dir = h.run.join(name);
            h.ssh
                .make_dir(&dir)
                .map_err(|e| RunError::Failed(format!("host {}: {e}", h.node)))?;
            made.dirs.push((h, dir));
        }
        Ok(made)
    }

    /// Each host's clock against this machine's, read now: all hosts at once, each on a
    /// thread of its own (a trial waits for the slowest, not for their sum).
    pub fn clocks(&self) -> Result<Vec<ClockOffset>, RunError> {
        std::thread::scope(|s| {
            let readings: Vec<_> = self
                .hosts
                .iter()
                .map(|h| s.spawn(move || h.ssh.clock_offset(&h.node, CLOCK_TRIES)))
                .collect();
            self.hosts
                .iter()
                .zip(readings)
                .map(|(h, r)| {
                    r.join()
                        .unwrap_or_else(|_| Err("the reading's thread panicked".into()))
                        .map_err(|e| RunError::Failed(format!("host {}: {e}", h.node)))
                })
                .collect()
        })
    }

    /// The first host whose connection was lost, said as an error.
    pub fn lost(&self) -> Option<RunError> {
        self.lost_host().map(|why| {
            RunError::Failed(format!(
                "{why}; the trials recorded so far are kept, and `flowlab run` again runs the rest"
            ))
        })
    }

    /// The first host whose connection was lost: "host b (lab@b): the connection was
    /// lost".
    pub fn lost_host(&self) -> Option<String> {
        self.hosts.iter().find(|h| !h.ssh.alive()).map(|h| {
            format!(
                "host {} ({}): the connection was lost",
                h.node,
                h.ssh.host()
            )
        })
    }
}

/// A trial's directories at the hosts over SSH: removed when dropped.
pub(crate) struct RemoteScratch<'a> {
    dirs: Vec<(&'a Host, PathBuf)>,
}

impl RemoteScratch<'_> {
    /// `node`'s directory, if it is a host over SSH.
    pub fn of(&self, node: Option<&str>) -> Option<String> {
        let node = node?;
        self.dirs
            .iter()
            .find(|(h, _)| h.node == node)
            .map(|(_, d)| d.display().to_string())
    }
}

impl Drop for RemoteScratch<'_> {
    fn drop(&mut self) {
        for (h, dir) in &self.dirs {
            let _ = h.ssh.remove_dir(dir);
        }
    }
}
