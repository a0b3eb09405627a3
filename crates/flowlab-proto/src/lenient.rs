//! Lenient number and flag readers for JSON written by iperf3.
//!
//! iperf3 builds its JSON with cJSON, which prints large integers in floating-point
//! notation (`1e+10`) and some flags as `1` instead of `true`. These readers accept any of
//! those spellings and refuse everything else (strings, arrays, negative counts).

use serde::{Deserialize, Deserializer};

pub(crate) fn num<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    use serde::de::Error;
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::Number(n) => match n.as_u64() {
            Some(v) => Ok(v),
            None => match n.as_f64() {
                Some(f) if f.is_finite() && f >= 0.0 && f < u64::MAX as f64 => Ok(f as u64),
                _ => Err(D::Error::custom(format!("number {n} out of range"))),
            },
        },
        serde_json::Value::Bool(b) => Ok(u64::from(b)),
        other => Err(D::Error::custom(format!("expected a number, got {other}"))),
    }
}

/// Reads a signed count. iperf3 3.12 prints negative numbers as their unsigned 64-bit
/// two's complement (`-1` arrives as `18446744073709551615`), so values above `i64::MAX`
/// wrap back to negative.
pub(crate) fn signed<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    use serde::de::Error;
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(v), _) => Ok(v),
            (None, Some(u)) => Ok(u as i64),
            (None, None) => match n.as_f64() {
                Some(f) if f.is_finite() && f.abs() < i64::MAX as f64 => Ok(f as i64),
                _ => Err(D::Error::custom(format!("number {n} out of range"))),
            },
        },
        other => Err(D::Error::custom(format!("expected a number, got {other}"))),
    }
}

pub(crate) fn flag<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    use serde::de::Error;
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::Bool(b) => Ok(b),
        serde_json::Value::Number(n) => Ok(n.as_f64().is_some_and(|f| f != 0.0)),
        other => Err(D::Error::custom(format!("expected a boolean, got {other}"))),
    }
}

pub(crate) fn opt_num<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    num(d).map(Some)
}

pub(crate) fn opt_flag<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    flag(d).map(Some)
}
