//! The one-byte control states, sent alone on the control connection.
//!
//! Values are iperf3's (`iperf.h`); [`State::FlowlabHello`] is flowlab's own and is only
//! ever sent to a client that announced flowlab extensions, so stock iperf3 never sees it.

use crate::ProtoError;

/// A control state, as one signed byte on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    TestStart,
    TestRunning,
    TestEnd,
    ParamExchange,
    CreateStreams,
    ServerTerminate,
    ClientTerminate,
    ExchangeResults,
    DisplayResults,
    IperfDone,
    /// A busy server refusing a test; nothing follows.
    AccessDenied,
    /// Followed by two big-endian i32: iperf3's error code and an errno.
    ServerError,
    /// flowlab: followed by a JSON frame holding a [`crate::hello::ServerHello`].
    FlowlabHello,
}

impl State {
    /// The byte on the wire.
    pub fn to_byte(self) -> u8 {
        let v: i8 = match self {
            State::TestStart => 1,
            State::TestRunning => 2,
            State::TestEnd => 4,
            State::ParamExchange => 9,
            State::CreateStreams => 10,
            State::ServerTerminate => 11,
            State::ClientTerminate => 12,
            State::ExchangeResults => 13,
            State::DisplayResults => 14,
            State::IperfDone => 16,
            State::FlowlabHello => 100,
            State::AccessDenied => -1,
            State::ServerError => -2,
        };
        v as u8
    }

    /// Judges one byte read from the control connection.
    pub fn from_byte(b: u8) -> Result<State, ProtoError> {
        Ok(match b as i8 {
            1 => State::TestStart,
            2 => State::TestRunning,
            4 => State::TestEnd,
            9 => State::ParamExchange,
            10 => State::CreateStreams,
            11 => State::ServerTerminate,
            12 => State::ClientTerminate,
            13 => State::ExchangeResults,
            14 => State::DisplayResults,
            16 => State::IperfDone,
            100 => State::FlowlabHello,
            -1 => State::AccessDenied,
            -2 => State::ServerError,
            other => return Err(ProtoError::UnknownState(other)),
        })
    }
}

/// iperf3's error codes (`iperf_api.h`, `enum iperf_error`) that flowlab's server sends
/// after [`State::ServerError`], so stock clients print a meaningful message.
pub mod error_code {
    /// "the server is busy running a test"
    pub const SERVER_BUSY: i32 = 4;
    /// "parameter exchange failed" — iperf3 clients print it with the errno.
    pub const RECV_PARAMS: i32 = 114;
    /// "the server has terminated" (used for limits flowlab enforces)
    pub const SERVER_TERMINATED: i32 = 1;
    /// "test authorization failed"
    pub const AUTH_FAILED: i32 = 142;
    /// "unable to accept stream connection" — with the errno.
    pub const STREAM_ACCEPT: i32 = 204;
}

/// Encodes the body that follows [`State::ServerError`].
pub fn encode_server_error(code: i32, errno: i32) -> [u8; 8] {
    let mut out = [0u8; 8];
    out[..4].copy_from_slice(&code.to_be_bytes());
    out[4..].copy_from_slice(&errno.to_be_bytes());
    out
}

/// Decodes the body that follows [`State::ServerError`] into (code, errno).
pub fn decode_server_error(body: &[u8; 8]) -> (i32, i32) {
    let code = i32::from_be_bytes([body[0], body[1], body[2], body[3]]);
    let errno = i32::from_be_bytes([body[4], body[5], body[6], body[7]]);
    (code, errno)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_round_trips() {
        for b in 0..=255u8 {
            if let Ok(s) = State::from_byte(b) {
                assert_eq!(s.to_byte(), b);
            }
        }
        assert_eq!(State::AccessDenied.to_byte(), 0xff);
        assert_eq!(State::ServerError.to_byte(), 0xfe);
        assert_eq!(State::from_byte(9), Ok(State::ParamExchange));
    }

    #[test]
    fn unknown_bytes_are_errors() {
        for b in [0u8, 3, 5, 8, 15, 17, 99, 101, 0x80, 0xfd] {
            assert!(State::from_byte(b).is_err(), "byte {b}");
        }
    }

    #[test]
    fn server_error_body_round_trips() {
        let body = encode_server_error(114, -5);
        assert_eq!(body, [0, 0, 0, 114, 0xff, 0xff, 0xff, 0xfb]);
        assert_eq!(decode_server_error(&body), (114, -5));
    }
}
