//! Runners, their claims on trials, and the trials' outcomes.

use rusqlite::OptionalExtension;

use flowlab_results::monitor::ClockOffset;
use flowlab_results::study::Outcome;

use crate::{Db, DbError, now};

/// One step of a finished trial.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRecord {
    pub name: String,
    /// `test` or `fetch`.
    pub kind: String,
    /// The arguments it ran with, rendered.
    pub args: String,
    /// Unix seconds.
    pub started: f64,
    pub ended: f64,
    /// Why it failed, when it did.
    pub error: Option<String>,
    /// Its `-J` document, when it wrote one (a failed test writes its error as one too).
    pub result: Option<String>,
}

/// What a claim on a trial got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// The trial is this runner's to run: its row id.
    Mine(i64),
    /// It has run already (ok or failed).
    Done,
    /// Another runner is running it (its process lives, or, on another machine, its
    /// lease does).
    Busy,
    /// A runner that is gone had claimed it (its process ended, or its lease ran out);
    /// taken over only when asked.
    Abandoned,
}

/// Which trials recorded before a claim may take again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retake {
    /// A trial claimed by a runner that is gone (`--resume`).
    pub abandoned: bool,
    /// A trial that failed (`--retry-failed`): its failed attempt moves to the `attempt`
    /// table, steps and all.
    pub failed: bool,
}

/// A failed attempt of a trial that was run again.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub cell: String,
    pub repetition: u32,
    pub started: f64,
    pub error: Option<String>,
}

/// How many of a study's trials are recorded, by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recorded {
    pub ok: u64,
    pub failed: u64,
    /// Claimed by a runner that is still running (or holds its lease).
    pub running: u64,
    /// Claimed by a runner that is gone.
    pub abandoned: u64,
}

impl Recorded {
    pub fn total(&self) -> u64 {
        self.ok + self.failed + self.running + self.abandoned
    }
}

/// A recorded trial and its steps.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialRow {
    pub id: i64,
    pub cell: String,
    /// The cell's parameters: a JSON object of labels.
    pub params: String,
    pub repetition: u32,
    pub status: Outcome,
    pub started: f64,
    pub ended: Option<f64>,
    pub error: Option<String>,
    pub steps: Vec<StepRecord>,
}

/// Records the metrics of a step's document ([`flowlab_results::metrics`]).
pub(crate) fn insert_metrics(
    tx: &rusqlite::Transaction<'_>,
    trial: i64,
    step: &str,
    kind: &str,
    document: &str,
) -> rusqlite::Result<()> {
    let mut q = tx.prepare_cached(
        "INSERT OR REPLACE INTO metric (trial_id, step, name, value) VALUES (?1, ?2, ?3, ?4)",
    )?;
    for m in flowlab_results::metrics::of_document(kind, document) {
        q.execute(rusqlite::params![trial, step, m.name, m.value])?;
    }
    Ok(())
}

/// How long a runner on another machine holds its claims without a heartbeat: six
/// missed beats ([`HEARTBEAT`]), and room for the two machines' clocks to differ.
pub const LEASE: f64 = 60.0;
/// How often a running runner stamps its heartbeat ([`Heartbeat`]).
pub const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(10);

/// This host's name (a runner here is judged by its process; elsewhere, by its lease).
fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

/// When process `pid` started (clock ticks after boot): with its pid, it names one
/// process across pid reuse.
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command's closing parenthesis start at field 3; starttime is 22.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

impl Db {
    /// Records this process as a runner (its version and its machine's state, as
    /// `flowlab sysinfo --json` prints it); returns its id.
    pub fn register_runner(&self, flowlab_version: &str, system: &str) -> Result<i64, DbError> {
        let pid = std::process::id();
        self.conn
            .execute(
                "INSERT INTO runner (host, pid, pid_start, started, flowlab_version, system)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                rusqlite::params![
                    host(),
                    pid,
                    process_start(pid).unwrap_or(0) as i64,
                    now(),
                    flowlab_version,
                    system
                ],
            )
            .map_err(|e| self.err(e))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Whether runner `id` may still be running: here, its process is the one that
    /// registered; on another host, its heartbeat (or, before its first, its start) is
    /// younger than the [`LEASE`].
    fn runner_alive(&self, id: i64) -> Result<bool, DbError> {
        let (h, pid, start, beat): (String, u32, i64, f64) = self
            .conn
            .query_row(
                "SELECT host, pid, pid_start, coalesce(heartbeat, started) FROM runner
                 WHERE id = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .map_err(|e| self.err(e))?;
        if h == host() {
            return Ok(process_start(pid) == Some(start as u64));
        }
        Ok(now() - beat < LEASE)
    }

    /// Stamps runner `id`'s heartbeat: its claims hold for a [`LEASE`] from now.
    pub fn heartbeat(&self, id: i64) -> Result<(), DbError> {
        self.conn
            .execute(
                "UPDATE runner SET heartbeat = ?1 WHERE id = ?2",
                rusqlite::params![now(), id],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Claims repetition `repetition` of `cell` for `runner`; a claim of a runner that
    /// is gone, or a trial that failed, is taken again as `retake` allows.
    pub fn claim(
        &mut self,
        study: i64,
        runner: i64,
        (cell, params): (&str, &str),
        repetition: u32,
        retake: Retake,
    ) -> Result<Claim, DbError> {
        let path = self.path.clone();
        let sql = |source| DbError::Sqlite {
            path: path.clone(),
            source,
        };
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(sql)?;
        let existing: Option<(i64, String, i64)> = tx
            .query_row(
                "SELECT id, status, runner_id FROM trial
                 WHERE study_id = ?1 AND cell = ?2 AND repetition = ?3",
                rusqlite::params![study, cell, repetition],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map_err(sql)?;
        let claim = match existing {
            None => {
                tx.execute(
                    "INSERT INTO trial (study_id, cell, params, repetition, status, runner_id, started)
                     VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?6)",
                    rusqlite::params![study, cell, params, repetition, runner, now()],
                )
                .map_err(sql)?;
                Claim::Mine(tx.last_insert_rowid())
            }
            Some((id, status, _)) if status == "failed" && retake.failed => {
                // The failed attempt, steps and all, moves to `attempt`; the trial runs anew.
                tx.execute(
                    "INSERT INTO attempt (trial_id, runner_id, started, ended, error, steps)
                     SELECT t.id, t.runner_id, t.started, t.ended, t.error,
                            (SELECT json_group_array(json_object(
                                 'idx', st.idx, 'name', st.name, 'kind', st.kind,
                                 'args', st.args, 'started', st.started, 'ended', st.ended,
                                 'error', st.error, 'result', st.result))
                             FROM step st WHERE st.trial_id = t.id)
                     FROM trial t WHERE t.id = ?1",
                    [id],
                )
                .map_err(sql)?;
                tx.execute("DELETE FROM metric WHERE trial_id = ?1", [id])
                    .map_err(sql)?;
                tx.execute("DELETE FROM step WHERE trial_id = ?1", [id])
                    .map_err(sql)?;
                tx.execute(
                    "UPDATE trial SET status = 'running', runner_id = ?1, started = ?2,
                     ended = NULL, error = NULL WHERE id = ?3",
                    rusqlite::params![runner, now(), id],
                )
                .map_err(sql)?;
                Claim::Mine(id)
            }
            Some((_, status, _)) if status != "running" => Claim::Done,
            Some((id, _, owner)) if owner == runner => Claim::Mine(id),
            Some((id, _, owner)) => {
                // Judged outside the transaction's statements: /proc only.
                drop(tx);
                if self.runner_alive(owner)? {
                    return Ok(Claim::Busy);
                }
                if !retake.abandoned {
                    return Ok(Claim::Abandoned);
                }
                let tx = self
                    .conn
                    .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                    .map_err(sql)?;
                // Only if nobody took it over meanwhile.
                let n = tx
                    .execute(
                        "UPDATE trial SET runner_id = ?1, started = ?2
                         WHERE id = ?3 AND runner_id = ?4 AND status = 'running'",
                        rusqlite::params![runner, now(), id, owner],
                    )
                    .map_err(sql)?;
                tx.commit().map_err(sql)?;
                return Ok(if n == 1 { Claim::Mine(id) } else { Claim::Busy });
            }
        };
        tx.commit().map_err(sql)?;
        Ok(claim)
    }

    /// Records trial `trial`'s steps and its outcome, in one transaction: `ok` unless
    /// `error` says why it failed.
    pub fn finish(
        &mut self,
        trial: i64,
        error: Option<&str>,
        steps: &[StepRecord],
    ) -> Result<(), DbError> {
        let path = self.path.clone();
        let sql = |source| DbError::Sqlite {
            path: path.clone(),
            source,
        };
        let tx = self.conn.transaction().map_err(sql)?;
        for (i, s) in steps.iter().enumerate() {
            tx.execute(
                "INSERT OR REPLACE INTO step (trial_id, idx, name, kind, args, started, ended, error, result)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                rusqlite::params![
                    trial, i as i64, s.name, s.kind, s.args, s.started, s.ended, s.error, s.result
                ],
            )
            .map_err(sql)?;
            if let Some(result) = &s.result {
                insert_metrics(&tx, trial, &s.name, &s.kind, result).map_err(sql)?;
            }
        }
        tx.execute(
            "UPDATE trial SET status = ?1, ended = ?2, error = ?3 WHERE id = ?4",
            rusqlite::params![
                if error.is_some() { "failed" } else { "ok" },
                now(),
                error,
                trial
            ],
        )
        .map_err(sql)?;
        tx.commit().map_err(sql)
    }

    /// Records trial `trial`'s reading of its hosts' clocks (replacing an earlier
    /// attempt's for the same host).
    pub fn record_clocks(&self, trial: i64, clocks: &[ClockOffset]) -> Result<(), DbError> {
        for c in clocks {
            self.conn
                .execute(
                    "INSERT OR REPLACE INTO trial_clock (trial_id, host, offset_ms, uncertainty_ms, samples)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    rusqlite::params![trial, c.host, c.offset_ms, c.uncertainty_ms, c.samples],
                )
                .map_err(|source| DbError::Sqlite {
                    path: self.path.clone(),
                    source,
                })?;
        }
        Ok(())
    }

    /// Trial `trial`'s reading of its hosts' clocks, by host.
    pub fn clocks(&self, trial: i64) -> Result<Vec<ClockOffset>, DbError> {
        let sql = |source| DbError::Sqlite {
            path: self.path.clone(),
            source,
        };
        self.conn
            .prepare(
                "SELECT host, offset_ms, uncertainty_ms, samples FROM trial_clock
                 WHERE trial_id = ?1 ORDER BY host",
            )
            .map_err(sql)?
            .query_map([trial], |r| {
                Ok(ClockOffset {
                    host: r.get(0)?,
                    offset_ms: r.get(1)?,
                    uncertainty_ms: r.get(2)?,
                    samples: r.get(3)?,
                })
            })
            .map_err(sql)?
            .collect::<Result<_, _>>()
            .map_err(sql)
    }

    /// Gives a claimed trial back (it was interrupted: it runs again on a resume). A
    /// failed trial that was being run again stays failed, saying so: its earlier
    /// attempts are in `attempt`, and `--retry-failed` takes it again.
    pub fn release(&self, trial: i64) -> Result<(), DbError> {
        self.conn
            .execute(
                "UPDATE trial SET status = 'failed', ended = ?2,
                     error = 'interrupted while run again (--retry-failed); its failed attempts are in the attempt table'
                 WHERE id = ?1 AND status = 'running'
                   AND EXISTS (SELECT 1 FROM attempt WHERE trial_id = ?1)",
                rusqlite::params![trial, now()],
            )
            .map_err(|e| self.err(e))?;
        self.conn
            .execute(
                "DELETE FROM trial WHERE id = ?1 AND status = 'running'",
                [trial],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// How many of `study`'s trials are recorded, by state.
    pub fn recorded(&self, study: i64) -> Result<Recorded, DbError> {
        let mut q = self
            .conn
            .prepare("SELECT status, runner_id FROM trial WHERE study_id = ?1")
            .map_err(|e| self.err(e))?;
        let rows = q
            .query_map([study], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
            })
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(|e| self.err(e))?;
        let mut out = Recorded::default();
        for (status, runner) in rows {
            match status.as_str() {
                "ok" => out.ok += 1,
                "failed" => out.failed += 1,
                _ if self.runner_alive(runner)? => out.running += 1,
                _ => out.abandoned += 1,
            }
        }
        Ok(out)
    }

    /// The failed attempts of `study`'s trials that were run again, oldest first.
    pub fn attempts(&self, study: i64) -> Result<Vec<Attempt>, DbError> {
        let mut q = self
            .conn
            .prepare(
                "SELECT t.cell, t.repetition, a.started, a.error
                 FROM attempt a JOIN trial t ON t.id = a.trial_id
                 WHERE t.study_id = ?1 ORDER BY a.id",
            )
            .map_err(|e| self.err(e))?;
        q.query_map([study], |r| {
            Ok(Attempt {
                cell: r.get(0)?,
                repetition: r.get(1)?,
                started: r.get(2)?,
                error: r.get(3)?,
            })
        })
        .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
        .map_err(|e| self.err(e))
    }

    /// Every trial of `study` with its steps, in the order they were claimed.
    pub fn trials(&self, study: i64) -> Result<Vec<TrialRow>, DbError> {
        let mut q = self
            .conn
            .prepare(
                "SELECT id, cell, params, repetition, status, started, ended, error
                 FROM trial WHERE study_id = ?1 ORDER BY id",
            )
            .map_err(|e| self.err(e))?;
        let mut trials = q
            .query_map([study], |r| {
                Ok(TrialRow {
                    id: r.get(0)?,
                    cell: r.get(1)?,
                    params: r.get(2)?,
                    repetition: r.get(3)?,
                    status: outcome(r.get(4)?)?,
                    started: r.get(5)?,
                    ended: r.get(6)?,
                    error: r.get(7)?,
                    steps: Vec::new(),
                })
            })
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(|e| self.err(e))?;
        let mut q = self
            .conn
            .prepare(
                "SELECT name, kind, args, started, ended, error, result
                 FROM step WHERE trial_id = ?1 ORDER BY idx",
            )
            .map_err(|e| self.err(e))?;
        for t in &mut trials {
            t.steps = q
                .query_map([t.id], |r| {
                    Ok(StepRecord {
                        name: r.get(0)?,
                        kind: r.get(1)?,
                        args: r.get(2)?,
                        started: r.get(3)?,
                        ended: r.get(4)?,
                        error: r.get(5)?,
                        result: r.get(6)?,
                    })
                })
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(|e| self.err(e))?;
        }
        Ok(trials)
    }

    /// Every metric of `study`'s trials: (trial id, step, name, value).
    pub fn metrics(&self, study: i64) -> Result<Vec<(i64, String, String, f64)>, DbError> {
        let mut q = self
            .conn
            .prepare(
                "SELECT m.trial_id, m.step, m.name, m.value FROM metric m
                 JOIN trial t ON t.id = m.trial_id WHERE t.study_id = ?1
                 ORDER BY m.trial_id, m.rowid",
            )
            .map_err(|e| self.err(e))?;
        q.query_map([study], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
        .map_err(|e| self.err(e))
    }

    /// The runners that ran trials of `study`: (host, flowlab version, system document).
    pub fn runners(&self, study: i64) -> Result<Vec<(String, String, String)>, DbError> {
        let mut q = self
            .conn
            .prepare(
                "SELECT host, flowlab_version, system FROM runner WHERE id IN
                 (SELECT DISTINCT runner_id FROM trial WHERE study_id = ?1) ORDER BY id",
            )
            .map_err(|e| self.err(e))?;
        q.query_map([study], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(|e| self.err(e))
    }
}

/// A trial's `status` column read back.
fn outcome(text: String) -> rusqlite::Result<Outcome> {
    Outcome::parse(&text).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            4,
            rusqlite::types::Type::Text,
            format!("trial status '{text}' is not running, ok or failed").into(),
        )
    })
}

/// A runner's heartbeat, stamped every `every` on a connection of its own by a thread
/// that lives as long as this does.
#[derive(Debug)]
pub struct Heartbeat {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Heartbeat {
    /// Starts stamping runner `runner`'s heartbeat in the database at `path` (stamped
    /// once before this returns). A stamp that cannot be written is tried again at the
    /// next beat: the runner's own writes say what is wrong with the database.
    pub fn start(
        path: &std::path::Path,
        runner: i64,
        every: std::time::Duration,
    ) -> Result<Heartbeat, DbError> {
        let db = Db::open_existing(path)?;
        db.heartbeat(runner)?;
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(every)
            {
                let _ = db.heartbeat(runner);
            }
        });
        Ok(Heartbeat {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
