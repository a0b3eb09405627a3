//! The results database: every trial of a study, each step's full result (the `-J`
//! document, one result type), and a mesh's runs (`flowlab monitor --db`), in SQLite
//! (bundled: nothing to install).
//!
//! - Each trial is **claimed** before it runs (a row in state `running`, in one
//!   `BEGIN IMMEDIATE` transaction), so two runners sharing a database never run the
//!   same trial; and **finished** in one transaction the moment it ends, so a crash loses
//!   at most the trial that was running.
//! - WAL journal: readers (a report) never block the runner.
//! - The schema is versioned (`PRAGMA user_version`, [`schema`]); an older database is
//!   migrated in place, a newer one refused untouched.

mod monitor;
pub mod report;
pub mod schema;
mod trials;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension};

pub use trials::{
    Attempt, Claim, HEARTBEAT, Heartbeat, LEASE, Recorded, Retake, StepRecord, TrialRow,
};

/// What went wrong with a database; every message names its file.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("{path}: not a flowlab results database ({why})")]
    Foreign { path: PathBuf, why: String },
    #[error(
        "{path}: written by a newer flowlab (schema version {found}; this flowlab knows up to {known}): open it with that flowlab, or give another --db"
    )]
    Newer {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error("{path}: no such results database")]
    Missing { path: PathBuf },
    #[error(
        "{path}: study '{name}' is recorded from a different study file (it changed since its first trial): give another --db, or rename the study"
    )]
    StudyChanged { path: PathBuf, name: String },
    #[error("{path}: {source}")]
    Sqlite {
        path: PathBuf,
        source: rusqlite::Error,
    },
}

/// An open results database.
#[derive(Debug)]
pub struct Db {
    conn: Connection,
    path: PathBuf,
}

/// A study as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct StudyRow {
    pub id: i64,
    pub name: String,
    /// BLAKE3 of the study file's text, hex.
    pub hash: String,
    /// The study file's text.
    pub file: String,
    /// The seed its random order was drawn with.
    pub seed: u64,
    /// Unix seconds.
    pub created: f64,
}

/// The study file's hash as recorded: BLAKE3 of its text, hex.
pub fn study_hash(text: &str) -> String {
    blake3::hash(text.as_bytes()).to_hex().to_string()
}

/// Seconds since the Unix epoch.
pub fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl Db {
    /// Opens `path`, creating it when missing, and brings its schema up to date.
    pub fn open(path: &Path) -> Result<Db, DbError> {
        Db::open_with(path, OpenFlags::default())
    }

    /// Opens an existing database (a report reads; it never creates one). Its schema is
    /// still brought up to date.
    pub fn open_existing(path: &Path) -> Result<Db, DbError> {
        if !path.exists() {
            return Err(DbError::Missing { path: path.into() });
        }
        Db::open_with(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
    }

    fn open_with(path: &Path, flags: OpenFlags) -> Result<Db, DbError> {
        let conn = Connection::open_with_flags(path, flags).map_err(|source| DbError::Sqlite {
            path: path.into(),
            source,
        })?;
        let mut db = Db {
            conn,
            path: path.into(),
        };
        db.setup()?;
        Ok(db)
    }

    /// The file it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// An error of this database's, naming its file; SQLite's "not a database" is a
    /// foreign file.
    fn err(&self, source: rusqlite::Error) -> DbError {
        if source.sqlite_error_code() == Some(rusqlite::ErrorCode::NotADatabase) {
            return DbError::Foreign {
                path: self.path.clone(),
                why: source.to_string(),
            };
        }
        DbError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    fn setup(&mut self) -> Result<(), DbError> {
        // Another runner may hold the write lock for the length of one transaction.
        self.conn
            .busy_timeout(Duration::from_secs(30))
            .map_err(|e| self.err(e))?;
        // The version and the tables are read in one statement, so from one snapshot:
        // read apart, another runner creating the schema between the two reads would
        // make a new database look like a foreign one (version 0, tables there).
        let (version, tables): (i64, i64) = self
            .conn
            .query_row(
                "SELECT (SELECT user_version FROM pragma_user_version), \
                        (SELECT count(*) FROM sqlite_master)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(|e| self.err(e))?;
        if version > schema::VERSION {
            return Err(DbError::Newer {
                path: self.path.clone(),
                found: version,
                known: schema::VERSION,
            });
        }
        if version == 0 && tables > 0 {
            return Err(DbError::Foreign {
                path: self.path.clone(),
                why: format!("it holds {tables} tables but no flowlab schema version"),
            });
        }
        // Switching to WAL takes the database whole, and SQLite does not wait for a
        // busy one there: another runner opening it at the same moment is waited for
        // here.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            match self
                .conn
                .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0))
            {
                Ok(_) => break,
                Err(e)
                    if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(self.err(e)),
            }
        }
        self.conn
            .pragma_update(None, "foreign_keys", "ON")
            .map_err(|e| self.err(e))?;
        for (from, migration) in schema::MIGRATIONS.iter().enumerate().skip(version as usize) {
            let tx = self
                .conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(|e| DbError::Sqlite {
                    path: self.path.clone(),
                    source: e,
                })?;
            // Another process may have migrated meanwhile.
            let now: i64 = tx
                .query_row("PRAGMA user_version", [], |r| r.get(0))
                .map_err(|e| DbError::Sqlite {
                    path: self.path.clone(),
                    source: e,
                })?;
            if now > from as i64 {
                continue;
            }
            let step = || -> rusqlite::Result<()> {
                tx.execute_batch(migration.sql)?;
                if let Some(fill) = migration.fill {
                    fill(&tx)?;
                }
                tx.pragma_update(None, "user_version", from as i64 + 1)?;
                Ok(())
            };
            step().map_err(|e| DbError::Sqlite {
                path: self.path.clone(),
                source: e,
            })?;
            tx.commit().map_err(|e| DbError::Sqlite {
                path: self.path.clone(),
                source: e,
            })?;
        }
        Ok(())
    }

    /// The schema version the database is at.
    pub fn version(&self) -> Result<i64, DbError> {
        self.conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| self.err(e))
    }

    /// The study called `name`, as recorded.
    pub fn find_study(&self, name: &str) -> Result<Option<StudyRow>, DbError> {
        self.conn
            .query_row(
                "SELECT id, name, hash, file, seed, created FROM study WHERE name = ?1",
                [name],
                study_row,
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// Every study, oldest first.
    pub fn studies(&self) -> Result<Vec<StudyRow>, DbError> {
        let mut q = self
            .conn
            .prepare("SELECT id, name, hash, file, seed, created FROM study ORDER BY id")
            .map_err(|e| self.err(e))?;
        let rows = q
            .query_map([], study_row)
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(|e| self.err(e))?;
        Ok(rows)
    }

    /// The study `name` recorded from `file`: recorded now with `seed` if it is new;
    /// refused if it was recorded from a different file.
    pub fn study(&self, name: &str, file: &str, seed: u64) -> Result<StudyRow, DbError> {
        let hash = study_hash(file);
        self.conn
            .execute(
                "INSERT INTO study (name, hash, file, seed, created) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (name) DO NOTHING",
                rusqlite::params![name, hash, file, seed as i64, now()],
            )
            .map_err(|e| self.err(e))?;
        let row = self.find_study(name)?.ok_or_else(|| DbError::Missing {
            path: self.path.clone(),
        })?;
        if row.hash != hash {
            return Err(DbError::StudyChanged {
                path: self.path.clone(),
                name: name.into(),
            });
        }
        Ok(row)
    }
}

fn study_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<StudyRow> {
    Ok(StudyRow {
        id: r.get(0)?,
        name: r.get(1)?,
        hash: r.get(2)?,
        file: r.get(3)?,
        seed: r.get::<_, i64>(4)? as u64,
        created: r.get(5)?,
    })
}
