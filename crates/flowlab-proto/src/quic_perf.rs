//! The QUIC performance protocol's wire format (draft-banks-quic-performance), without
//! I/O: the client opens a stream whose first 8 bytes, big-endian, ask the server for
//! that many bytes back; then it sends its payload, if any, and ends the stream. The
//! server reads to the end, then answers with the bytes asked for and ends its side.
//! An upload asks for 0; a download sends nothing after the ask; all ones asks for
//! bytes without end, which the client stops (STOP_SENDING) when it has had enough.

/// The UDP port perf servers listen on when none is given (quinn's perf and msquic's
/// secnetperf use it too).
pub const DEFAULT_PORT: u16 = 4433;

/// The ALPN the protocol is spoken under.
pub const ALPN: &[u8] = b"perf";

/// The ask for bytes without end.
pub const UNLIMITED: u64 = u64::MAX;

/// The length of a stream's ask.
pub const ASK_LEN: usize = 8;

/// Stream error codes of the draft's version 01 (0: no error).
pub mod code {
    /// The stream ended as asked (the client's STOP_SENDING of an unlimited ask).
    pub const OK: u32 = 0;
    /// The server refuses the stream (a limit of its own).
    pub const REJECTED: u32 = 2;
}

/// What a stream's first bytes ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// This many bytes back once the client's side has ended.
    Bytes(u64),
    /// Bytes until the client stops them.
    Unlimited,
}

impl Ask {
    /// The 8 bytes that open a stream.
    pub fn encode(self) -> [u8; ASK_LEN] {
        match self {
            Ask::Bytes(n) => n.to_be_bytes(),
            Ask::Unlimited => UNLIMITED.to_be_bytes(),
        }
    }

    pub fn decode(head: [u8; ASK_LEN]) -> Ask {
        match u64::from_be_bytes(head) {
            UNLIMITED => Ask::Unlimited,
            n => Ask::Bytes(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ask_is_eight_big_endian_bytes_and_all_ones_is_unlimited() {
        assert_eq!(Ask::Bytes(0).encode(), [0; 8]);
        assert_eq!(Ask::Bytes(1 << 20).encode(), [0, 0, 0, 0, 0, 0x10, 0, 0]);
        assert_eq!(Ask::Unlimited.encode(), [0xff; 8]);
        for ask in [Ask::Bytes(0), Ask::Bytes(12_345), Ask::Unlimited] {
            assert_eq!(Ask::decode(ask.encode()), ask);
        }
    }
}
