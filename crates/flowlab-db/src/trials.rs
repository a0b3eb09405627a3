//! Runners, their claims on trials, and the trials' outcomes.

use flowlab_results::monitor::ClockOffset;
use flowlab_results::study::Outcome;

use crate::sql::{Conn, Dialect, SqlError, values};
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
    c: &mut Conn,
    trial: i64,
    step: &str,
    kind: &str,
    document: &str,
) -> Result<(), SqlError> {
    for m in flowlab_results::metrics::of_document(kind, document) {
        c.execute(
            "INSERT INTO metric (trial_id, step, name, value) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (trial_id, step, name) DO UPDATE SET value = excluded.value",
            values![trial, step, &m.name, m.value],
        )?;
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
        self.with(|c| {
            c.query_one(
                "INSERT INTO runner (host, pid, pid_start, started, flowlab_version, system)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) RETURNING id",
                values![
                    host(),
                    pid,
                    process_start(pid).unwrap_or(0) as i64,
                    now(),
                    flowlab_version,
                    system
                ],
            )?
            .int(0)
        })
    }

    /// Whether runner `id` may still be running: here, its process is the one that
    /// registered; on another host, its heartbeat (or, before its first, its start) is
    /// younger than the [`LEASE`].
    fn runner_alive(&self, id: i64) -> Result<bool, DbError> {
        let (h, pid, start, beat) = self.with(|c| {
            let r = c.query_one(
                "SELECT host, pid, pid_start, coalesce(heartbeat, started) FROM runner
                 WHERE id = ?1",
                values![id],
            )?;
            Ok((r.text(0)?, r.int(1)?, r.int(2)?, r.real(3)?))
        })?;
        if h == host() {
            return Ok(process_start(pid as u32) == Some(start as u64));
        }
        Ok(now() - beat < LEASE)
    }

    /// Stamps runner `id`'s heartbeat: its claims hold for a [`LEASE`] from now.
    pub fn heartbeat(&self, id: i64) -> Result<(), DbError> {
        self.with(|c| {
            c.execute(
                "UPDATE runner SET heartbeat = ?1 WHERE id = ?2",
                values![now(), id],
            )
            .map(|_| ())
        })
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
        /// What the first look found to do.
        enum Next {
            Done(Claim),
            /// Claimed by another runner: whether it lives is judged outside the
            /// transaction (/proc, or its lease).
            Owned(i64, i64),
        }
        let next = self.with(|c| {
            c.transaction(Some("trial"), |c| -> Result<Next, SqlError> {
                let existing = c.query_opt(
                    "SELECT id, status, runner_id FROM trial
                     WHERE study_id = ?1 AND cell = ?2 AND repetition = ?3",
                    values![study, cell, repetition],
                )?;
                let Some(row) = existing else {
                    let id = c
                        .query_one(
                            "INSERT INTO trial (study_id, cell, params, repetition, status, runner_id, started)
                             VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?6) RETURNING id",
                            values![study, cell, params, repetition, runner, now()],
                        )?
                        .int(0)?;
                    return Ok(Next::Done(Claim::Mine(id)));
                };
                let (id, status, owner) = (row.int(0)?, row.text(1)?, row.int(2)?);
                if status == "failed" && retake.failed {
                    // The failed attempt, steps and all, moves to `attempt`; the trial
                    // runs anew.
                    c.execute(attempt_sql(c.dialect()), values![id])?;
                    c.execute("DELETE FROM metric WHERE trial_id = ?1", values![id])?;
                    c.execute("DELETE FROM step WHERE trial_id = ?1", values![id])?;
                    c.execute(
                        "UPDATE trial SET status = 'running', runner_id = ?1, started = ?2,
                         ended = NULL, error = NULL WHERE id = ?3",
                        values![runner, now(), id],
                    )?;
                    return Ok(Next::Done(Claim::Mine(id)));
                }
                if status != "running" {
                    return Ok(Next::Done(Claim::Done));
                }
                if owner == runner {
                    return Ok(Next::Done(Claim::Mine(id)));
                }
                Ok(Next::Owned(id, owner))
            })
        })?;
        let (id, owner) = match next {
            Next::Done(claim) => return Ok(claim),
            Next::Owned(id, owner) => (id, owner),
        };
        if self.runner_alive(owner)? {
            return Ok(Claim::Busy);
        }
        if !retake.abandoned {
            return Ok(Claim::Abandoned);
        }
        // Only if nobody took it over meanwhile.
        let n = self.with(|c| {
            c.transaction(Some("trial"), |c| {
                c.execute(
                    "UPDATE trial SET runner_id = ?1, started = ?2
                     WHERE id = ?3 AND runner_id = ?4 AND status = 'running'",
                    values![runner, now(), id, owner],
                )
            })
        })?;
        Ok(if n == 1 { Claim::Mine(id) } else { Claim::Busy })
    }

    /// Records trial `trial`'s steps and its outcome, in one transaction: `ok` unless
    /// `error` says why it failed.
    pub fn finish(
        &mut self,
        trial: i64,
        error: Option<&str>,
        steps: &[StepRecord],
    ) -> Result<(), DbError> {
        self.with(|c| {
            c.transaction(None, |c| {
                for (i, s) in steps.iter().enumerate() {
                    c.execute(
                        "INSERT INTO step (trial_id, idx, name, kind, args, started, ended, error, result)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                         ON CONFLICT (trial_id, idx) DO UPDATE SET name = excluded.name,
                             kind = excluded.kind, args = excluded.args,
                             started = excluded.started, ended = excluded.ended,
                             error = excluded.error, result = excluded.result",
                        values![
                            trial,
                            i as i64,
                            &s.name,
                            &s.kind,
                            &s.args,
                            s.started,
                            s.ended,
                            s.error.as_deref(),
                            s.result.as_deref()
                        ],
                    )?;
                    if let Some(result) = &s.result {
                        insert_metrics(c, trial, &s.name, &s.kind, result)?;
                    }
                }
                c.execute(
                    "UPDATE trial SET status = ?1, ended = ?2, error = ?3 WHERE id = ?4",
                    values![
                        if error.is_some() { "failed" } else { "ok" },
                        now(),
                        error,
                        trial
                    ],
                )
                .map(|_| ())
            })
        })
    }

    /// Records trial `trial`'s reading of its hosts' clocks (replacing an earlier
    /// attempt's for the same host).
    pub fn record_clocks(&self, trial: i64, clocks: &[ClockOffset]) -> Result<(), DbError> {
        self.with(|c| {
            for clock in clocks {
                c.execute(
                    "INSERT INTO trial_clock (trial_id, host, offset_ms, uncertainty_ms, samples)
                     VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (trial_id, host) DO UPDATE SET offset_ms = excluded.offset_ms,
                         uncertainty_ms = excluded.uncertainty_ms, samples = excluded.samples",
                    values![
                        trial,
                        &clock.host,
                        clock.offset_ms,
                        clock.uncertainty_ms,
                        clock.samples
                    ],
                )?;
            }
            Ok(())
        })
    }

    /// Trial `trial`'s reading of its hosts' clocks, by host.
    pub fn clocks(&self, trial: i64) -> Result<Vec<ClockOffset>, DbError> {
        self.with(|c| {
            c.query(
                "SELECT host, offset_ms, uncertainty_ms, samples FROM trial_clock
                 WHERE trial_id = ?1 ORDER BY host",
                values![trial],
            )?
            .iter()
            .map(|r| {
                Ok(ClockOffset {
                    host: r.text(0)?,
                    offset_ms: r.real(1)?,
                    uncertainty_ms: r.real(2)?,
                    samples: r.int(3)? as u32,
                })
            })
            .collect()
        })
    }

    /// Gives a claimed trial back (it was interrupted: it runs again on a resume). A
    /// failed trial that was being run again stays failed, saying so: its earlier
    /// attempts are in `attempt`, and `--retry-failed` takes it again.
    pub fn release(&self, trial: i64) -> Result<(), DbError> {
        self.with(|c| {
            c.execute(
                "UPDATE trial SET status = 'failed', ended = ?2,
                     error = 'interrupted while run again (--retry-failed); its failed attempts are in the attempt table'
                 WHERE id = ?1 AND status = 'running'
                   AND EXISTS (SELECT 1 FROM attempt WHERE trial_id = ?1)",
                values![trial, now()],
            )?;
            c.execute(
                "DELETE FROM trial WHERE id = ?1 AND status = 'running'",
                values![trial],
            )
            .map(|_| ())
        })
    }

    /// How many of `study`'s trials are recorded, by state.
    pub fn recorded(&self, study: i64) -> Result<Recorded, DbError> {
        let rows = self.with(|c| {
            c.query(
                "SELECT status, runner_id FROM trial WHERE study_id = ?1",
                values![study],
            )?
            .iter()
            .map(|r| Ok((r.text(0)?, r.int(1)?)))
            .collect::<Result<Vec<_>, SqlError>>()
        })?;
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
        self.with(|c| {
            c.query(
                "SELECT t.cell, t.repetition, a.started, a.error
                 FROM attempt a JOIN trial t ON t.id = a.trial_id
                 WHERE t.study_id = ?1 ORDER BY a.id",
                values![study],
            )?
            .iter()
            .map(|r| {
                Ok(Attempt {
                    cell: r.text(0)?,
                    repetition: r.int(1)? as u32,
                    started: r.real(2)?,
                    error: r.opt_text(3)?,
                })
            })
            .collect()
        })
    }

    /// Every trial of `study` with its steps, in the order they were claimed.
    pub fn trials(&self, study: i64) -> Result<Vec<TrialRow>, DbError> {
        self.with(|c| {
            let mut trials = c
                .query(
                    "SELECT id, cell, params, repetition, status, started, ended, error
                     FROM trial WHERE study_id = ?1 ORDER BY id",
                    values![study],
                )?
                .iter()
                .map(|r| {
                    Ok(TrialRow {
                        id: r.int(0)?,
                        cell: r.text(1)?,
                        params: r.text(2)?,
                        repetition: r.int(3)? as u32,
                        status: outcome(r.text(4)?)?,
                        started: r.real(5)?,
                        ended: r.opt_real(6)?,
                        error: r.opt_text(7)?,
                        steps: Vec::new(),
                    })
                })
                .collect::<Result<Vec<_>, SqlError>>()?;
            for t in &mut trials {
                t.steps = c
                    .query(
                        "SELECT name, kind, args, started, ended, error, result
                         FROM step WHERE trial_id = ?1 ORDER BY idx",
                        values![t.id],
                    )?
                    .iter()
                    .map(|r| {
                        Ok(StepRecord {
                            name: r.text(0)?,
                            kind: r.text(1)?,
                            args: r.text(2)?,
                            started: r.real(3)?,
                            ended: r.real(4)?,
                            error: r.opt_text(5)?,
                            result: r.opt_text(6)?,
                        })
                    })
                    .collect::<Result<Vec<_>, SqlError>>()?;
            }
            Ok(trials)
        })
    }

    /// Every metric of `study`'s trials: (trial id, step, name, value), each trial's
    /// in the order they were recorded.
    pub fn metrics(&self, study: i64) -> Result<Vec<(i64, String, String, f64)>, DbError> {
        self.with(|c| {
            // The order of insertion: SQLite's rowid; PostgreSQL's place of the row in
            // its table (metrics are written once, or deleted and written anew).
            let order = match c.dialect() {
                Dialect::Sqlite => "m.rowid",
                Dialect::Postgres => "m.ctid",
            };
            c.query(
                &format!(
                    "SELECT m.trial_id, m.step, m.name, m.value FROM metric m
                     JOIN trial t ON t.id = m.trial_id WHERE t.study_id = ?1
                     ORDER BY m.trial_id, {order}"
                ),
                values![study],
            )?
            .iter()
            .map(|r| Ok((r.int(0)?, r.text(1)?, r.text(2)?, r.real(3)?)))
            .collect()
        })
    }

    /// The runners that ran trials of `study`: (host, flowlab version, system document).
    pub fn runners(&self, study: i64) -> Result<Vec<(String, String, String)>, DbError> {
        self.with(|c| {
            c.query(
                "SELECT host, flowlab_version, system FROM runner WHERE id IN
                 (SELECT DISTINCT runner_id FROM trial WHERE study_id = ?1) ORDER BY id",
                values![study],
            )?
            .iter()
            .map(|r| Ok((r.text(0)?, r.text(1)?, r.text(2)?)))
            .collect()
        })
    }
}

/// A trial's `status` column read back.
fn outcome(text: String) -> Result<Outcome, SqlError> {
    Outcome::parse(&text).ok_or_else(|| {
        SqlError::Type(format!(
            "trial status '{text}' is not running, ok or failed"
        ))
    })
}

/// The statement that copies trial `?1`'s failed attempt, its steps as a JSON array, to
/// `attempt` (each database's own JSON functions).
fn attempt_sql(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => {
            "INSERT INTO attempt (trial_id, runner_id, started, ended, error, steps)
             SELECT t.id, t.runner_id, t.started, t.ended, t.error,
                    (SELECT json_group_array(json_object(
                         'idx', st.idx, 'name', st.name, 'kind', st.kind,
                         'args', st.args, 'started', st.started, 'ended', st.ended,
                         'error', st.error, 'result', st.result))
                     FROM step st WHERE st.trial_id = t.id)
             FROM trial t WHERE t.id = ?1"
        }
        Dialect::Postgres => {
            "INSERT INTO attempt (trial_id, runner_id, started, ended, error, steps)
             SELECT t.id, t.runner_id, t.started, t.ended, t.error,
                    (SELECT coalesce(json_agg(json_build_object(
                         'idx', st.idx, 'name', st.name, 'kind', st.kind,
                         'args', st.args, 'started', st.started, 'ended', st.ended,
                         'error', st.error, 'result', st.result) ORDER BY st.idx), '[]')::text
                     FROM step st WHERE st.trial_id = t.id)
             FROM trial t WHERE t.id = ?1"
        }
    }
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
