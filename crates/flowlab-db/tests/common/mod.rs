//! What the database's test binaries share: a step's record and a real test result.

use flowlab_db::StepRecord;

/// A two-stream TCP test's `-J` document, as `flowlab test` writes it.
pub const TCP_P2: &str = include_str!("../../../flowlab-report/tests/fixtures/tcp-p2.json");

/// A `test` step named `name` that kept `result` or failed with `error`.
pub fn step(name: &str, result: Option<&str>, error: Option<&str>) -> StepRecord {
    StepRecord {
        name: name.into(),
        kind: "test".into(),
        args: "127.0.0.1 -t 1".into(),
        started: 10.0,
        ended: 11.5,
        error: error.map(str::to_string),
        result: result.map(str::to_string),
    }
}
