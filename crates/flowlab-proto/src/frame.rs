//! Length-prefixed JSON on the control connection: a big-endian u32 length, then that
//! many bytes of JSON (no NUL).
//!
//! [`check`] tells how long a whole frame is from its 4-byte prefix, refusing a zero or
//! oversized length before anything is allocated; [`decode`] parses the body.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::ProtoError;

/// Largest parameter message accepted (iperf3's own cap).
pub const MAX_PARAMS_LEN: u32 = 8 * 1024;
/// Largest results or hello message accepted. Results grow with the stream count and
/// flowlab's per-stream extras; 1 MiB holds thousands of streams.
pub const MAX_RESULTS_LEN: u32 = 1024 * 1024;
/// Largest results a client that asked for `--trace` accepts: the server's TCP_INFO
/// samples travel with them (a minute at 1 ms on 4 streams is ~150 MB of JSON).
pub const MAX_TRACED_RESULTS_LEN: u32 = 512 * 1024 * 1024;

/// Bytes of JSON one TCP_INFO sample takes at most in results (~625 on average).
const MAX_SAMPLE_JSON: u64 = 1024;

/// Largest results a client accepts from a server for a traced test that ran `elapsed`
/// by the client's clock with `streams` streams sampled every `period`: what such a test
/// can have produced (its time plus 10 s, for the server's clock starting earlier, plus
/// the untraced limit), never more than [`MAX_TRACED_RESULTS_LEN`] — a server's length
/// prefix cannot make the client allocate more than the test could fill.
pub fn traced_results_limit(
    elapsed: std::time::Duration,
    period: std::time::Duration,
    streams: usize,
) -> u32 {
    let span = elapsed + std::time::Duration::from_secs(10);
    let per_stream = span.as_micros() / period.as_micros().max(1) + 1;
    let samples = per_stream.saturating_mul(streams as u128);
    let bytes = u128::from(MAX_RESULTS_LEN) + samples.saturating_mul(u128::from(MAX_SAMPLE_JSON));
    u32::try_from(bytes.min(u128::from(MAX_TRACED_RESULTS_LEN))).unwrap_or(MAX_TRACED_RESULTS_LEN)
}

/// Judges the 4-byte length prefix of a frame and returns the body length.
pub fn check(prefix: [u8; 4], max: u32) -> Result<usize, ProtoError> {
    let len = u32::from_be_bytes(prefix);
    if len == 0 || len > max {
        return Err(ProtoError::BadLength { len, max });
    }
    // A u32 always fits a usize on the 32- and 64-bit targets flowlab supports.
    Ok(len as usize)
}

/// Parses a frame body, which must be a JSON object.
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, ProtoError> {
    // serde would also accept a struct written as an array; no peer sends that.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ProtoError::BadJson("not a JSON object".into()));
    }
    serde_json::from_slice(body).map_err(|e| ProtoError::BadJson(e.to_string()))
}

/// Encodes a value as a whole frame (prefix and body).
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing plain data structs to a Vec cannot fail: no maps with non-string keys.
    let body = serde_json::to_vec(value).unwrap_or_default();
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_traced_tests_results_are_bounded_by_what_it_can_have_produced() {
        use std::time::Duration;
        let ms = Duration::from_millis;
        // 2 s at 10 ms on 1 stream: 1201 samples of at most 1 KiB beside the 1 MiB.
        assert_eq!(
            traced_results_limit(Duration::from_secs(2), ms(10), 1),
            MAX_RESULTS_LEN + 1201 * 1024
        );
        // A day at 1 ms on 128 streams would be terabytes: the hard limit holds.
        assert_eq!(
            traced_results_limit(Duration::from_secs(86_400), ms(1), 128),
            MAX_TRACED_RESULTS_LEN
        );
    }

    use super::*;
    use crate::params::TestParams;

    #[test]
    fn round_trip() {
        let p = TestParams {
            tcp: Some(true),
            time: 3,
            parallel: 2,
            ..TestParams::default()
        };
        let wire = encode(&p);
        let len = check(wire[..4].try_into().unwrap(), MAX_PARAMS_LEN).unwrap();
        assert_eq!(len, wire.len() - 4);
        let back: TestParams = decode(&wire[4..]).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn refuses_zero_and_oversized_lengths() {
        assert_eq!(
            check([0; 4], 10),
            Err(ProtoError::BadLength { len: 0, max: 10 })
        );
        assert!(check(11u32.to_be_bytes(), 10).is_err());
        assert!(check(u32::MAX.to_be_bytes(), MAX_RESULTS_LEN).is_err());
        assert_eq!(check(10u32.to_be_bytes(), 10), Ok(10));
    }

    #[test]
    fn refuses_invalid_json() {
        assert!(decode::<TestParams>(b"{\"tcp\": tru").is_err());
        assert!(decode::<TestParams>(b"\xff\xfe").is_err());
        assert!(decode::<TestParams>(b"[1,2,3]").is_err());
        assert!(decode::<TestParams>(b"{\"time\": \"ten\"}").is_err());
    }
}
