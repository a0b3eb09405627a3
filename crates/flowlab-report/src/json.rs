//! JSON documents (`-J`) and JSON-stream lines (`--json-stream`: one object per line,
//! `{"event": NAME, "data": …}`). The schema is documented in docs/json-schema.md.

use crate::result::TestResult;
use serde::Serialize;

/// `value` as a pretty-printed JSON document (no final newline).
pub fn document(value: &impl Serialize) -> serde_json::Result<String> {
    serde_json::to_string_pretty(value)
}

/// One JSON-stream line (no final newline): `{"event": name, "data": data}`.
pub fn event(name: &str, data: &impl Serialize) -> String {
    serde_json::json!({ "event": name, "data": data }).to_string()
}

/// One JSON-stream line with its newline: `{"event": name, "data": data}`.
pub fn event_line(name: &str, data: &impl Serialize) -> String {
    event(name, data) + "\n"
}

/// `value` as one compact JSON line with its newline (a log line of `serve -J`); an empty
/// line if it cannot be serialised (a map with non-string keys; none of flowlab's).
pub fn line(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_default() + "\n"
}

/// The JSON-stream lines that end a finished test: `end` (null when the test produced no
/// totals), then `latency` and `trace` when they were measured; each line ends in a
/// newline.
pub fn finish(r: &TestResult) -> String {
    let mut out = event_line("end", &r.end);
    if let Some(l) = &r.latency {
        out += &event_line("latency", l);
    }
    if let Some(t) = &r.trace {
        out += &event_line("trace", t);
    }
    out
}

/// The `-J` document of a test that failed: the schema and the error's message.
pub fn test_error(message: &str) -> serde_json::Result<String> {
    document(&serde_json::json!({
        "schema": crate::result::SCHEMA,
        "error": message,
    }))
}

/// The JSON-stream line of a test that failed, with its newline.
pub fn test_error_event(message: &str) -> String {
    event_line("error", &serde_json::json!({ "message": message }))
}
