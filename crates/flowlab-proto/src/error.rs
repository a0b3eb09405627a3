//! The one error type of the protocol crate.

/// Why bytes from a peer were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    #[error("invalid cookie: {0}")]
    BadCookie(&'static str),
    #[error("unknown control state byte {0}")]
    UnknownState(i8),
    #[error("JSON message length {len} is invalid (must be 1..={max} bytes)")]
    BadLength { len: u32, max: u32 },
    #[error("invalid JSON message: {0}")]
    BadJson(String),
    #[error("datagram too short: {len} bytes, need at least {need}")]
    ShortDatagram { len: usize, need: usize },
    #[error("not a stop-and-wait acknowledgement")]
    NotAnAck,
    #[error("not a receiver-overflow message")]
    NotOverflow,
    #[error("not a receiver-queue message")]
    NotQueueHigh,
    #[error("not a receiver-progress message")]
    NotProgress,
    #[error("bad fragment-protocol message: {0}")]
    BadFragmentMessage(&'static str),
    #[error("bad latency probe: {0}")]
    BadProbe(&'static str),
    #[error("bad credential: {0}")]
    BadCredential(&'static str),
}
