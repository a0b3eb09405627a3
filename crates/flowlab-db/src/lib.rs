//! The results database: every trial of a study, each step's full result (the `-J`
//! document, one result type), and a mesh's runs (`flowlab monitor --db`), in SQLite
//! (bundled: nothing to install) or in PostgreSQL, which several controllers share
//! (`postgres://…`; its `sql` module speaks to either with the same statements).
//!
//! - Each trial is **claimed** before it runs (a row in state `running`, in one
//!   transaction that holds other writers off: SQLite's `BEGIN IMMEDIATE`, a lock on
//!   PostgreSQL's `trial` table), so two runners sharing a database never run the same
//!   trial; and **finished** in one transaction the moment it ends, so a crash loses at
//!   most the trial that was running. A runner elsewhere holds its claims by a lease its
//!   [`Heartbeat`] renews.
//! - SQLite's WAL journal: readers (a report) never block the runner.
//! - The schema is versioned ([`schema`]); an older database is migrated in place, a
//!   newer one refused untouched.

mod monitor;
pub mod report;
pub mod schema;
mod sql;
mod trials;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use sql::{Conn, values};
pub use sql::{Dialect, SqlError};

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
    Sql { path: PathBuf, source: SqlError },
}

/// An open results database: a SQLite file, or a PostgreSQL database
/// (`postgres://USER@HOST:PORT/NAME`).
#[derive(Debug)]
pub struct Db {
    conn: RefCell<Conn>,
    /// The file, or the database's URL without its password.
    path: PathBuf,
}

/// Whether `--db` names a PostgreSQL database rather than a file.
pub fn is_postgres(db: &Path) -> bool {
    let s = db.to_string_lossy();
    s.starts_with("postgres://") || s.starts_with("postgresql://")
}

/// How `--db` is shown: a file's path, or a PostgreSQL URL without its password.
pub fn display_name(db: &Path) -> String {
    if is_postgres(db) {
        shown(&db.to_string_lossy())
    } else {
        db.display().to_string()
    }
}

/// A PostgreSQL URL as it may be shown: without its password.
fn shown(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('@') {
            Some((user, host)) => {
                let user = user.split_once(':').map_or(user, |(u, _)| u);
                format!("{scheme}://{user}@{host}")
            }
            None => url.to_string(),
        },
        None => url.to_string(),
    }
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
    /// Opens `path` (a file, created when missing; or a PostgreSQL URL), and brings its
    /// schema up to date.
    pub fn open(path: &Path) -> Result<Db, DbError> {
        if is_postgres(path) {
            return Db::open_postgres(&path.to_string_lossy());
        }
        Db::open_with(path, OpenFlags::default())
    }

    /// Opens an existing database (a report reads; it never creates one). Its schema is
    /// still brought up to date.
    pub fn open_existing(path: &Path) -> Result<Db, DbError> {
        if is_postgres(path) {
            return Db::open_postgres(&path.to_string_lossy());
        }
        if !path.exists() {
            return Err(DbError::Missing { path: path.into() });
        }
        Db::open_with(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
    }

    fn open_with(path: &Path, flags: OpenFlags) -> Result<Db, DbError> {
        let conn = Connection::open_with_flags(path, flags).map_err(|e| DbError::Sql {
            path: path.into(),
            source: e.into(),
        })?;
        let mut db = Db {
            conn: RefCell::new(Conn::Sqlite(conn)),
            path: path.into(),
        };
        db.setup()?;
        Ok(db)
    }

    fn open_postgres(url: &str) -> Result<Db, DbError> {
        let path = PathBuf::from(shown(url));
        let client = postgres::Client::connect(url, postgres::NoTls).map_err(|e| DbError::Sql {
            path: path.clone(),
            source: e.into(),
        })?;
        let mut db = Db {
            conn: RefCell::new(Conn::Postgres(Box::new(sql::Pg::new(client)))),
            path,
        };
        db.setup()?;
        Ok(db)
    }

    /// The file it was opened from (or the database's URL, without a password).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Which database it is.
    pub fn dialect(&self) -> Dialect {
        self.conn.borrow().dialect()
    }

    /// An error of this database's, naming it; SQLite's "not a database" is a foreign
    /// file.
    fn err(&self, source: SqlError) -> DbError {
        if let SqlError::Sqlite(e) = &source {
            if e.sqlite_error_code() == Some(rusqlite::ErrorCode::NotADatabase) {
                return DbError::Foreign {
                    path: self.path.clone(),
                    why: e.to_string(),
                };
            }
        }
        DbError::Sql {
            path: self.path.clone(),
            source,
        }
    }

    /// Runs `f` on the connection; its error names the database.
    fn with<T>(&self, f: impl FnOnce(&mut Conn) -> Result<T, SqlError>) -> Result<T, DbError> {
        let mut conn = self.conn.borrow_mut();
        f(&mut conn).map_err(|e| self.err(e))
    }

    fn setup(&mut self) -> Result<(), DbError> {
        let dialect = self.dialect();
        if dialect == Dialect::Sqlite {
            self.sqlite_setup()?;
        }
        // Migrations one at a time, each in a transaction that holds the others off
        // (SQLite's write lock; PostgreSQL's lock on the version table), each skipped
        // when another process applied it meanwhile.
        loop {
            let (version, tables) = self.version_and_tables()?;
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
            if version == schema::VERSION {
                return Ok(());
            }
            self.with(|c| {
                if dialect == Dialect::Postgres {
                    c.batch("CREATE TABLE IF NOT EXISTS flowlab_schema (version BIGINT NOT NULL)")?;
                }
                c.transaction(Some(schema::VERSION_TABLE), |c| {
                    let now = schema::read_version(c)?;
                    if now != version {
                        return Ok(());
                    }
                    let m = &schema::MIGRATIONS[version as usize];
                    match dialect {
                        Dialect::Sqlite => c.batch(m.sql)?,
                        Dialect::Postgres => c.batch(&sql::postgres_ddl(m.sql))?,
                    }
                    // Statements prepared before may read what the migration changed.
                    c.forget_prepared();
                    if let Some(fill) = m.fill {
                        fill(c)?;
                    }
                    schema::write_version(c, version + 1)
                })
            })?;
        }
    }

    /// SQLite's settings: a busy timeout, the WAL journal, foreign keys.
    fn sqlite_setup(&mut self) -> Result<(), DbError> {
        let conn = self.conn.get_mut();
        let Conn::Sqlite(lite) = conn else {
            return Ok(());
        };
        let path = self.path.clone();
        let err = |e: rusqlite::Error| {
            if e.sqlite_error_code() == Some(rusqlite::ErrorCode::NotADatabase) {
                return DbError::Foreign {
                    path: path.clone(),
                    why: e.to_string(),
                };
            }
            DbError::Sql {
                path: path.clone(),
                source: e.into(),
            }
        };
        // Another runner may hold the write lock for the length of one transaction.
        lite.busy_timeout(Duration::from_secs(30)).map_err(err)?;
        // A foreign file is said before anything is written to it.
        lite.query_row("SELECT count(*) FROM sqlite_master", [], |r| {
            r.get::<_, i64>(0)
        })
        .map_err(err)?;
        // Switching to WAL takes the database whole, and SQLite does not wait for a
        // busy one there: another runner opening it at the same moment is waited for
        // here.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            match lite
                .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0))
            {
                Ok(_) => break,
                Err(e)
                    if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(err(e)),
            }
        }
        lite.pragma_update(None, "foreign_keys", "ON").map_err(err)
    }

    /// The schema version and how many tables there are, read in one statement (so
    /// from one snapshot: read apart, another runner creating the schema between the
    /// two reads would make a new database look like a foreign one).
    fn version_and_tables(&self) -> Result<(i64, i64), DbError> {
        let sql = match self.dialect() {
            Dialect::Sqlite => {
                "SELECT (SELECT user_version FROM pragma_user_version), \
                        (SELECT count(*) FROM sqlite_master)"
            }
            Dialect::Postgres => {
                "SELECT coalesce((SELECT max(version) FROM flowlab_schema), 0), \
                        (SELECT count(*) FROM information_schema.tables \
                         WHERE table_schema = current_schema() AND table_name <> 'flowlab_schema')"
            }
        };
        // PostgreSQL: the version table may not be there yet (a new database).
        if self.dialect() == Dialect::Postgres {
            let has = self.with(|c| {
                c.query_one(
                    "SELECT count(*) FROM information_schema.tables \
                     WHERE table_schema = current_schema() AND table_name = 'flowlab_schema'",
                    &[],
                )?
                .int(0)
            })?;
            if has == 0 {
                let tables = self.with(|c| {
                    c.query_one(
                        "SELECT count(*) FROM information_schema.tables \
                         WHERE table_schema = current_schema()",
                        &[],
                    )?
                    .int(0)
                })?;
                return Ok((0, tables));
            }
        }
        self.with(|c| {
            let r = c.query_one(sql, &[])?;
            Ok((r.int(0)?, r.int(1)?))
        })
    }

    /// The schema version the database is at.
    pub fn version(&self) -> Result<i64, DbError> {
        self.with(schema::read_version)
    }

    /// The study called `name`, as recorded.
    pub fn find_study(&self, name: &str) -> Result<Option<StudyRow>, DbError> {
        self.with(|c| {
            c.query_opt(
                "SELECT id, name, hash, file, seed, created FROM study WHERE name = ?1",
                values![name],
            )?
            .map(|r| study_row(&r))
            .transpose()
        })
    }

    /// Every study, oldest first.
    pub fn studies(&self) -> Result<Vec<StudyRow>, DbError> {
        self.with(|c| {
            c.query(
                "SELECT id, name, hash, file, seed, created FROM study ORDER BY id",
                &[],
            )?
            .iter()
            .map(study_row)
            .collect()
        })
    }

    /// The study `name` recorded from `file`: recorded now with `seed` if it is new;
    /// refused if it was recorded from a different file.
    pub fn study(&self, name: &str, file: &str, seed: u64) -> Result<StudyRow, DbError> {
        let hash = study_hash(file);
        self.with(|c| {
            c.execute(
                "INSERT INTO study (name, hash, file, seed, created) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (name) DO NOTHING",
                values![name, &hash, file, seed as i64, now()],
            )
        })?;
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

fn study_row(r: &sql::Row) -> Result<StudyRow, SqlError> {
    Ok(StudyRow {
        id: r.int(0)?,
        name: r.text(1)?,
        hash: r.text(2)?,
        file: r.text(3)?,
        seed: r.int(4)? as u64,
        created: r.real(5)?,
    })
}
