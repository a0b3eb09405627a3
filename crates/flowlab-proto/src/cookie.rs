//! The test cookie: 36 characters of a base-32 alphabet and a NUL, 37 bytes on the wire.
//!
//! iperf3 sends it first on the control connection and first on every TCP data stream;
//! the server tells a new test from a data stream of a running test by it. flowlab's server
//! serves many tests at once, so the cookie is also the key that routes a data stream to
//! its test.

use crate::ProtoError;

/// Bytes of a cookie on the wire, including the trailing NUL.
pub const COOKIE_LEN: usize = 37;
const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// A validated test cookie.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cookie([u8; COOKIE_LEN - 1]);

impl Cookie {
    /// Builds a cookie from 36 random bytes (the caller owns the randomness source).
    pub fn from_random(random: [u8; COOKIE_LEN - 1]) -> Self {
        Cookie(random.map(|b| ALPHABET[usize::from(b % 32)]))
    }

    /// Judges the first 37 bytes read from a connection.
    pub fn decode(wire: &[u8; COOKIE_LEN]) -> Result<Self, ProtoError> {
        if wire[COOKIE_LEN - 1] != 0 {
            return Err(ProtoError::BadCookie("not NUL-terminated"));
        }
        let mut chars = [0u8; COOKIE_LEN - 1];
        chars.copy_from_slice(&wire[..COOKIE_LEN - 1]);
        if !chars.iter().all(|c| ALPHABET.contains(c)) {
            return Err(ProtoError::BadCookie(
                "characters outside the cookie alphabet",
            ));
        }
        Ok(Cookie(chars))
    }

    /// The 37 bytes to send.
    pub fn encode(&self) -> [u8; COOKIE_LEN] {
        let mut wire = [0u8; COOKIE_LEN];
        wire[..COOKIE_LEN - 1].copy_from_slice(&self.0);
        wire
    }

    /// The cookie as text (always ASCII).
    pub fn as_str(&self) -> &str {
        // Invariant: every byte comes from ALPHABET, which is ASCII.
        std::str::from_utf8(&self.0).unwrap_or("")
    }
}

impl std::fmt::Debug for Cookie {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cookie({})", self.as_str())
    }
}

impl std::fmt::Display for Cookie {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let c = Cookie::from_random(std::array::from_fn(|i| (i * 7) as u8));
        let wire = c.encode();
        assert_eq!(wire[36], 0);
        assert_eq!(Cookie::decode(&wire), Ok(c));
        assert_eq!(c.as_str().len(), 36);
    }

    #[test]
    fn maps_every_byte_into_the_alphabet() {
        let c = Cookie::from_random([255; 36]);
        assert_eq!(c.as_str(), "7".repeat(36));
    }

    #[test]
    fn refuses_missing_nul() {
        let mut wire = Cookie::from_random([0; 36]).encode();
        wire[36] = b'a';
        assert!(matches!(
            Cookie::decode(&wire),
            Err(ProtoError::BadCookie(_))
        ));
    }

    #[test]
    fn refuses_garbage() {
        let mut wire = *b"GET / HTTP/1.1\r\nHost: example\r\n\r\n\0\0\0\0";
        wire[36] = 0;
        assert!(Cookie::decode(&wire).is_err());
        let mut upper = Cookie::from_random([1; 36]).encode();
        upper[3] = b'A';
        assert!(Cookie::decode(&upper).is_err());
    }
}
