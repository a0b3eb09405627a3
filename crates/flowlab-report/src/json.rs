//! JSON documents (`-J`) and JSON-stream lines (`--json-stream`: one object per line,
//! `{"event": NAME, "data": …}`). The schema is documented in docs/json-schema.md.

use flowlab_results::result::TestResult;
use serde::Serialize;
use serde_json::Value;

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

/// A finished test as its JSON value: the result as serde writes it, and each of its
/// trace's diagnoses with what it advises ([`crate::advice`]) as its last field,
/// `advice`.
pub fn test_value(r: &TestResult) -> serde_json::Result<Value> {
    let mut v = serde_json::to_value(r)?;
    if let Some(trace) = v.get_mut("trace") {
        *trace = trace_value(r)?;
    }
    Ok(v)
}

/// A finished test's trace as its JSON value, its diagnoses advised ([`test_value`]);
/// null when the test was not traced.
fn trace_value(r: &TestResult) -> serde_json::Result<Value> {
    let mut v = serde_json::to_value(&r.trace)?;
    let diagnoses = r.trace.iter().flat_map(|t| &t.diagnosis);
    if let Some(Value::Array(shown)) = v.get_mut("diagnosis") {
        for (d, shown) in diagnoses.zip(shown) {
            if let Value::Object(fields) = shown {
                let advice = crate::advice::of_test(r, d);
                fields.insert("advice".into(), serde_json::to_value(advice)?);
            }
        }
    }
    Ok(v)
}

/// A finished test's `-J` document (no final newline): [`test_value`], pretty-printed.
pub fn test_document(r: &TestResult) -> serde_json::Result<String> {
    document(&test_value(r)?)
}

/// The JSON-stream lines that end a finished test: `end` (null when the test produced no
/// totals), then `latency` and `trace` when they were measured; each line ends in a
/// newline.
pub fn finish(r: &TestResult) -> serde_json::Result<String> {
    let mut out = event_line("end", &r.end);
    if let Some(l) = &r.latency {
        out += &event_line("latency", l);
    }
    if r.trace.is_some() {
        out += &event_line("trace", &trace_value(r)?);
    }
    Ok(out)
}

/// The `-J` document of a test that failed: the schema and the error's message.
pub fn test_error(message: &str) -> serde_json::Result<String> {
    document(&serde_json::json!({
        "schema": flowlab_results::result::SCHEMA,
        "error": message,
    }))
}

/// The JSON-stream line of a test that failed, with its newline.
pub fn test_error_event(message: &str) -> String {
    event_line("error", &serde_json::json!({ "message": message }))
}
