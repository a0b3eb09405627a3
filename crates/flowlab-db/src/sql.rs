//! One way to speak to either database: SQLite (rusqlite, bundled) or PostgreSQL (the
//! `postgres` client). Statements are written once, in the SQL both accept (upserts as
//! `ON CONFLICT … DO UPDATE`, new rows' ids by `RETURNING id`), with `?N` placeholders
//! (made `$N` for PostgreSQL); values go in and come out as [`Value`]s, converted to and
//! from each column's type. Where the two differ (the schema's DDL, JSON functions,
//! the version's home, locking), the caller asks [`Conn::dialect`].

use std::collections::HashMap;
use std::fmt;

/// Which database a connection speaks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

/// A value in or out of a statement.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(v)
    }
}
impl From<u32> for Value {
    fn from(v: u32) -> Value {
        Value::Int(i64::from(v))
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Real(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Text(v.to_string())
    }
}
impl From<&String> for Value {
    fn from(v: &String) -> Value {
        Value::Text(v.clone())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Text(v)
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Value {
        v.map_or(Value::Null, Into::into)
    }
}

/// `[Value]` from a list of expressions of any type that converts.
macro_rules! values {
    ($($v:expr),* $(,)?) => { &[$($crate::sql::Value::from($v)),*] };
}
pub(crate) use values;

/// What went wrong with a statement.
#[derive(Debug)]
pub enum SqlError {
    Sqlite(rusqlite::Error),
    Postgres(postgres::Error),
    /// A value of the wrong kind for its column, or a column of a type flowlab does not
    /// read.
    Type(String),
}

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SqlError::Sqlite(e) => write!(f, "{e}"),
            // The server's own message (with its detail) rather than "db error".
            SqlError::Postgres(e) => match e.as_db_error() {
                Some(d) => write!(f, "{}: {}", d.severity(), d.message()),
                None => write!(f, "{e}"),
            },
            SqlError::Type(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for SqlError {}

impl From<rusqlite::Error> for SqlError {
    fn from(e: rusqlite::Error) -> SqlError {
        SqlError::Sqlite(e)
    }
}
impl From<postgres::Error> for SqlError {
    fn from(e: postgres::Error) -> SqlError {
        SqlError::Postgres(e)
    }
}

/// A row read: its columns in the statement's order.
#[derive(Debug, Clone, PartialEq)]
pub struct Row(pub Vec<Value>);

impl Row {
    fn at(&self, i: usize) -> Result<&Value, SqlError> {
        self.0
            .get(i)
            .ok_or_else(|| SqlError::Type(format!("no column {i}")))
    }

    pub fn int(&self, i: usize) -> Result<i64, SqlError> {
        match self.at(i)? {
            Value::Int(v) => Ok(*v),
            other => Err(SqlError::Type(format!(
                "column {i}: {other:?}, not an integer"
            ))),
        }
    }

    pub fn opt_int(&self, i: usize) -> Result<Option<i64>, SqlError> {
        match self.at(i)? {
            Value::Null => Ok(None),
            _ => self.int(i).map(Some),
        }
    }

    /// A number (an integer read as one too: SQLite keeps whole REALs as integers in
    /// expressions).
    pub fn real(&self, i: usize) -> Result<f64, SqlError> {
        match self.at(i)? {
            Value::Real(v) => Ok(*v),
            Value::Int(v) => Ok(*v as f64),
            other => Err(SqlError::Type(format!(
                "column {i}: {other:?}, not a number"
            ))),
        }
    }

    pub fn opt_real(&self, i: usize) -> Result<Option<f64>, SqlError> {
        match self.at(i)? {
            Value::Null => Ok(None),
            _ => self.real(i).map(Some),
        }
    }

    pub fn text(&self, i: usize) -> Result<String, SqlError> {
        match self.at(i)? {
            Value::Text(v) => Ok(v.clone()),
            other => Err(SqlError::Type(format!("column {i}: {other:?}, not text"))),
        }
    }

    pub fn opt_text(&self, i: usize) -> Result<Option<String>, SqlError> {
        match self.at(i)? {
            Value::Null => Ok(None),
            _ => self.text(i).map(Some),
        }
    }
}

/// A connection to either database.
pub enum Conn {
    Sqlite(rusqlite::Connection),
    Postgres(Box<Pg>),
}

/// A PostgreSQL connection and the statements it has prepared, by their text, as
/// rusqlite's `prepare_cached` keeps SQLite's: preparing costs a round trip to the
/// server, and flowlab runs the same few dozen statements again and again.
pub struct Pg {
    client: postgres::Client,
    prepared: HashMap<String, postgres::Statement>,
}

/// More statements than flowlab has are text made on the fly: the cache starts over.
const MOST_PREPARED: usize = 256;

impl Pg {
    pub fn new(client: postgres::Client) -> Pg {
        Pg {
            client,
            prepared: HashMap::new(),
        }
    }

    fn prepare(&mut self, sql: &str) -> Result<postgres::Statement, SqlError> {
        if let Some(q) = self.prepared.get(sql) {
            return Ok(q.clone());
        }
        let q = self.client.prepare(&dollars(sql))?;
        if self.prepared.len() >= MOST_PREPARED {
            self.prepared.clear();
        }
        self.prepared.insert(sql.to_owned(), q.clone());
        Ok(q)
    }
}

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Conn::Sqlite(_) => "Conn::Sqlite",
            Conn::Postgres(_) => "Conn::Postgres",
        })
    }
}

impl Conn {
    pub fn dialect(&self) -> Dialect {
        match self {
            Conn::Sqlite(_) => Dialect::Sqlite,
            Conn::Postgres(_) => Dialect::Postgres,
        }
    }

    /// Runs `sql` with `params`: the rows it changed.
    pub fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64, SqlError> {
        match self {
            Conn::Sqlite(c) => {
                let mut q = c.prepare_cached(sql)?;
                Ok(q.execute(rusqlite::params_from_iter(params.iter().map(lite_value)))? as u64)
            }
            Conn::Postgres(c) => {
                let q = c.prepare(sql)?;
                let bound = bind(q.params(), params)?;
                Ok(c.client.execute(&q, &refs(&bound))?)
            }
        }
    }

    /// The rows `sql` reads.
    pub fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>, SqlError> {
        match self {
            Conn::Sqlite(c) => {
                let mut q = c.prepare_cached(sql)?;
                let n = q.column_count();
                let rows = q.query_map(
                    rusqlite::params_from_iter(params.iter().map(lite_value)),
                    |r| {
                        (0..n)
                            .map(|i| {
                                Ok(match r.get_ref(i)? {
                                    rusqlite::types::ValueRef::Null => Value::Null,
                                    rusqlite::types::ValueRef::Integer(v) => Value::Int(v),
                                    rusqlite::types::ValueRef::Real(v) => Value::Real(v),
                                    rusqlite::types::ValueRef::Text(t) => {
                                        Value::Text(String::from_utf8_lossy(t).into_owned())
                                    }
                                    rusqlite::types::ValueRef::Blob(b) => {
                                        Value::Text(String::from_utf8_lossy(b).into_owned())
                                    }
                                })
                            })
                            .collect::<rusqlite::Result<Vec<_>>>()
                            .map(Row)
                    },
                )?;
                Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
            }
            Conn::Postgres(c) => {
                let q = c.prepare(sql)?;
                let bound = bind(q.params(), params)?;
                c.client
                    .query(&q, &refs(&bound))?
                    .iter()
                    .map(pg_row)
                    .collect()
            }
        }
    }

    /// The first row `sql` reads, if any.
    pub fn query_opt(&mut self, sql: &str, params: &[Value]) -> Result<Option<Row>, SqlError> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    /// The one row `sql` reads.
    pub fn query_one(&mut self, sql: &str, params: &[Value]) -> Result<Row, SqlError> {
        self.query_opt(sql, params)?
            .ok_or_else(|| SqlError::Type("the statement read no row".into()))
    }

    /// Runs statements separated by `;`, without parameters.
    pub fn batch(&mut self, sql: &str) -> Result<(), SqlError> {
        match self {
            Conn::Sqlite(c) => Ok(c.execute_batch(sql)?),
            Conn::Postgres(c) => Ok(c.client.batch_execute(sql)?),
        }
    }

    /// Drops the statements prepared so far: a migration changed what they read.
    /// (SQLite prepares again by itself when its schema changes.)
    pub fn forget_prepared(&mut self) {
        if let Conn::Postgres(c) = self {
            c.prepared.clear();
        }
    }

    /// Runs `f` in a transaction, committed when it returns `Ok`, else rolled back.
    /// `exclusive`: no other writer may start one meanwhile (SQLite's `BEGIN
    /// IMMEDIATE`; on PostgreSQL, `lock` — a table — is locked against other
    /// writers, so that two runners' claims are taken one after the other).
    pub fn transaction<T, E: From<SqlError>>(
        &mut self,
        lock: Option<&str>,
        f: impl FnOnce(&mut Conn) -> Result<T, E>,
    ) -> Result<T, E> {
        let begin = match (self.dialect(), lock) {
            (Dialect::Sqlite, Some(_)) => "BEGIN IMMEDIATE".to_string(),
            (Dialect::Sqlite, None) => "BEGIN".to_string(),
            (Dialect::Postgres, Some(table)) => {
                format!("BEGIN; LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE")
            }
            (Dialect::Postgres, None) => "BEGIN".to_string(),
        };
        if let Err(e) = self.batch(&begin) {
            // A lock refused after BEGIN leaves the transaction open (and aborted).
            let _ = self.batch("ROLLBACK");
            return Err(e.into());
        }
        match f(self) {
            Ok(v) => {
                self.batch("COMMIT")?;
                Ok(v)
            }
            Err(e) => {
                let _ = self.batch("ROLLBACK");
                Err(e)
            }
        }
    }
}

fn lite_value(v: &Value) -> rusqlite::types::Value {
    match v {
        Value::Null => rusqlite::types::Value::Null,
        Value::Int(i) => rusqlite::types::Value::Integer(*i),
        Value::Real(r) => rusqlite::types::Value::Real(*r),
        Value::Text(t) => rusqlite::types::Value::Text(t.clone()),
    }
}

/// `sql` with its `?N` placeholders as PostgreSQL's `$N` (flowlab's statements have no
/// `?` in a string).
fn dollars(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '?' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('$');
        } else {
            out.push(c);
        }
    }
    out
}

type Bound = Vec<Box<dyn postgres::types::ToSql + Sync>>;

/// `params` as the types the server inferred for the statement's placeholders.
fn bind(types: &[postgres::types::Type], params: &[Value]) -> Result<Bound, SqlError> {
    use postgres::types::Type;
    if types.len() != params.len() {
        return Err(SqlError::Type(format!(
            "{} values for {} placeholders",
            params.len(),
            types.len()
        )));
    }
    types
        .iter()
        .zip(params)
        .enumerate()
        .map(
            |(i, (t, v))| -> Result<Box<dyn postgres::types::ToSql + Sync>, SqlError> {
                let wrong = || SqlError::Type(format!("value {}: {v:?} for a {t} column", i + 1));
                Ok(match (t, v) {
                    (&Type::INT8, Value::Int(n)) => Box::new(*n),
                    (&Type::INT8, Value::Null) => Box::new(None::<i64>),
                    (&Type::INT4, Value::Int(n)) => {
                        Box::new(i32::try_from(*n).map_err(|_| wrong())?)
                    }
                    (&Type::INT4, Value::Null) => Box::new(None::<i32>),
                    (&Type::FLOAT8, Value::Real(r)) => Box::new(*r),
                    (&Type::FLOAT8, Value::Int(n)) => Box::new(*n as f64),
                    (&Type::FLOAT8, Value::Null) => Box::new(None::<f64>),
                    (&Type::TEXT | &Type::VARCHAR, Value::Text(s)) => Box::new(s.clone()),
                    (&Type::TEXT | &Type::VARCHAR, Value::Null) => Box::new(None::<String>),
                    _ => return Err(wrong()),
                })
            },
        )
        .collect()
}

fn refs(bound: &Bound) -> Vec<&(dyn postgres::types::ToSql + Sync)> {
    bound.iter().map(|b| b.as_ref()).collect()
}

fn pg_row(r: &postgres::Row) -> Result<Row, SqlError> {
    use postgres::types::Type;
    (0..r.len())
        .map(|i| {
            let t = r.columns()[i].type_();
            Ok(match *t {
                Type::INT8 => r.try_get::<_, Option<i64>>(i)?.map(Value::Int),
                Type::INT4 => r
                    .try_get::<_, Option<i32>>(i)?
                    .map(|v| Value::Int(v.into())),
                Type::INT2 => r
                    .try_get::<_, Option<i16>>(i)?
                    .map(|v| Value::Int(v.into())),
                Type::FLOAT8 => r.try_get::<_, Option<f64>>(i)?.map(Value::Real),
                Type::FLOAT4 => r
                    .try_get::<_, Option<f32>>(i)?
                    .map(|v| Value::Real(v.into())),
                Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR => {
                    r.try_get::<_, Option<String>>(i)?.map(Value::Text)
                }
                Type::BOOL => r
                    .try_get::<_, Option<bool>>(i)?
                    .map(|b| Value::Int(i64::from(b))),
                _ => {
                    return Err(SqlError::Type(format!(
                        "column {} is of type {t}, which flowlab does not read",
                        r.columns()[i].name()
                    )));
                }
            }
            .unwrap_or(Value::Null))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Row)
}

/// The schema's DDL (written for SQLite) as PostgreSQL takes it: 64-bit integers, row
/// ids from an identity, doubles for REAL, and the one view whose GROUP BY only SQLite
/// accepts written in full.
pub fn postgres_ddl(sqlite: &str) -> String {
    let mut out = String::with_capacity(sqlite.len() + 256);
    for line in sqlite.lines() {
        let line = line
            .replace(
                "INTEGER PRIMARY KEY",
                "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
            )
            .replace(" INTEGER", " BIGINT")
            .replace(" REAL", " DOUBLE PRECISION")
            .replace(
                "GROUP BY t.id, st.idx;",
                "GROUP BY s.name, t.id, t.cell, t.params, t.repetition, t.status, st.idx, \
                 st.name, st.kind, st.started, st.ended, st.error;",
            );
        out.push_str(&line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_dollars_and_nothing_else_changes() {
        assert_eq!(
            dollars("SELECT a FROM t WHERE b = ?1 AND c = ?12 OR d = '?'"),
            "SELECT a FROM t WHERE b = $1 AND c = $12 OR d = '?'"
        );
    }

    #[test]
    fn ddl_is_made_postgresql_s() {
        let ddl = postgres_ddl(
            "CREATE TABLE x (\n    id INTEGER PRIMARY KEY,\n    n  INTEGER NOT NULL,\n    v  REAL\n);",
        );
        assert_eq!(
            ddl,
            "CREATE TABLE x (\n    id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,\n    n  BIGINT NOT NULL,\n    v  DOUBLE PRECISION\n);\n"
        );
    }
}
