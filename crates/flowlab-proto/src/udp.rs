//! UDP on the wire: the stream handshake, the datagram header, and flowlab's
//! stop-and-wait acknowledgements.
//!
//! Every UDP data datagram starts with the sender's timestamp and a sequence number
//! (big-endian): `u32 seconds, u32 microseconds, u32 sequence` — or a `u64` sequence when
//! both ends agreed on 64-bit counters. The rest of the datagram is payload.

use crate::ProtoError;

/// What a client sends to open a UDP stream (iperf3 ≥ 3.12).
pub const CONNECT_MSG: [u8; 4] = *b"9876";
/// What the server answers (iperf3 ≥ 3.12).
pub const CONNECT_REPLY: [u8; 4] = *b"6789";
/// What iperf3 before 3.12 sends: 987654321 as a host-order (little-endian) u32.
pub const LEGACY_CONNECT_MSG: [u8; 4] = 987_654_321u32.to_le_bytes();
/// What iperf3 before 3.12 answers: 123456789, host order.
pub const LEGACY_CONNECT_REPLY: [u8; 4] = 123_456_789u32.to_le_bytes();

/// Is this 4-byte datagram a stream-opening message, and which reply does it want?
pub fn handshake_reply(datagram: &[u8]) -> Option<[u8; 4]> {
    match datagram {
        d if d == CONNECT_MSG => Some(CONNECT_REPLY),
        d if d == LEGACY_CONNECT_MSG => Some(LEGACY_CONNECT_REPLY),
        _ => None,
    }
}

/// Is this datagram a server's answer to the stream-opening message?
pub fn is_handshake_reply(datagram: &[u8]) -> bool {
    datagram == CONNECT_REPLY || datagram == LEGACY_CONNECT_REPLY
}

/// The header of a UDP data datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatagramHeader {
    /// Sender's clock when the datagram was sent; only differences matter.
    pub sec: u32,
    pub usec: u32,
    /// Starts at 1 on each stream.
    pub seq: u64,
}

impl DatagramHeader {
    /// Header length for the chosen counter width.
    pub const fn len(counters_64bit: bool) -> usize {
        if counters_64bit { 16 } else { 12 }
    }

    /// Writes the header at the start of `buf`, which must hold [`Self::len`] bytes.
    pub fn encode(&self, buf: &mut [u8], counters_64bit: bool) {
        buf[0..4].copy_from_slice(&self.sec.to_be_bytes());
        buf[4..8].copy_from_slice(&self.usec.to_be_bytes());
        if counters_64bit {
            buf[8..16].copy_from_slice(&self.seq.to_be_bytes());
        } else {
            // 32-bit counters wrap, as iperf3's do.
            buf[8..12].copy_from_slice(&(self.seq as u32).to_be_bytes());
        }
    }

    /// Reads the header at the start of a received datagram.
    pub fn decode(buf: &[u8], counters_64bit: bool) -> Result<Self, ProtoError> {
        let need = Self::len(counters_64bit);
        if buf.len() < need {
            return Err(ProtoError::ShortDatagram {
                len: buf.len(),
                need,
            });
        }
        let word = |i: usize| u32::from_be_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
        let seq = if counters_64bit {
            (u64::from(word(8)) << 32) | u64::from(word(12))
        } else {
            u64::from(word(8))
        };
        Ok(DatagramHeader {
            sec: word(0),
            usec: word(4),
            seq,
        })
    }

    /// The timestamp in microseconds.
    pub fn micros(&self) -> u64 {
        u64::from(self.sec) * 1_000_000 + u64::from(self.usec)
    }
}

/// flowlab stop-and-wait: the receiver's acknowledgement of message `seq`.
/// Over UDP it is a datagram of its own; over TCP the same 12 bytes travel back on the
/// data connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    pub seq: u64,
}

impl Ack {
    pub const LEN: usize = 12;
    const MAGIC: [u8; 4] = *b"FLAK";

    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        out[..4].copy_from_slice(&Self::MAGIC);
        out[4..].copy_from_slice(&self.seq.to_be_bytes());
        out
    }

    pub fn decode(buf: &[u8]) -> Result<Self, ProtoError> {
        if buf.len() != Self::LEN || buf[..4] != Self::MAGIC {
            return Err(ProtoError::NotAnAck);
        }
        let mut seq = [0u8; 8];
        seq.copy_from_slice(&buf[4..]);
        Ok(Ack {
            seq: u64::from_be_bytes(seq),
        })
    }
}

/// flowlab receiver-overflow feedback: the receiving socket has dropped `drops`
/// datagrams in total because its buffer was full (the kernel's SO_RXQ_OVFL count), and
/// the highest sequence number received so far is `seq`. Sent from a UDP receiver to its
/// sender when the count grows, if both ends negotiated
/// [`crate::hello::feature::UDP_BACKOFF`]; the sender then slows down (the engine's
/// `Backoff`). Loss anywhere else on the path never produces this message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overflow {
    pub drops: u64,
    pub seq: u64,
}

impl Overflow {
    pub const LEN: usize = 20;
    const MAGIC: [u8; 4] = *b"FLOV";

    pub fn encode(&self) -> [u8; Self::LEN] {
        report(Self::MAGIC, self.drops, self.seq)
    }

    pub fn decode(buf: &[u8]) -> Result<Self, ProtoError> {
        let (drops, seq) = read_report(buf, Self::MAGIC).ok_or(ProtoError::NotOverflow)?;
        Ok(Overflow { drops, seq })
    }
}

/// flowlab receiver-queue feedback, the early warning before [`Overflow`]: the receiving
/// socket's queue has filled past half its buffer `count` times so far (each time after
/// it had drained below a quarter), and the highest sequence number received so far is
/// `seq`. Sent like [`Overflow`], under the same negotiation; a sender that does not know
/// it ignores it (any datagram that does not decode is ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueHigh {
    pub count: u64,
    pub seq: u64,
}

impl QueueHigh {
    pub const LEN: usize = 20;
    const MAGIC: [u8; 4] = *b"FLQH";

    pub fn encode(&self) -> [u8; Self::LEN] {
        report(Self::MAGIC, self.count, self.seq)
    }

    pub fn decode(buf: &[u8]) -> Result<Self, ProtoError> {
        let (count, seq) = read_report(buf, Self::MAGIC).ok_or(ProtoError::NotQueueHigh)?;
        Ok(QueueHigh { count, seq })
    }
}

/// flowlab receiver progress, the flow control of a UDP sender (unlimited or paced): the
/// highest sequence number in the read this reports is `seq` (the sender keeps the
/// highest it heard), that datagram was stamped `sent_us` by its sender (echoed, so the
/// sender measures the round trip on its own clock) and had been `held_us` at the
/// receiver when the report was sent (from the kernel's arrival stamp: its wait in the
/// socket and any before the report; the sender takes it out of the round trip, which is
/// the path's, not the receiver's), and the
/// receiver can hold `window` datagrams beyond what it read. Sent every few datagrams
/// read, if both ends negotiated [`crate::hello::feature::UDP_WINDOW`] (and, in a paced
/// test, [`crate::hello::feature::UDP_WINDOW_PACED`]); the sender keeps
/// no more than the window (and what the path itself holds) unread (the engine's
/// `ReceiverWindow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub seq: u64,
    pub sent_us: u64,
    pub held_us: u64,
    pub window: u64,
}

impl Progress {
    pub const LEN: usize = 36;
    const MAGIC: [u8; 4] = *b"FLRP";

    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        out[..4].copy_from_slice(&Self::MAGIC);
        out[4..12].copy_from_slice(&self.seq.to_be_bytes());
        out[12..20].copy_from_slice(&self.sent_us.to_be_bytes());
        out[20..28].copy_from_slice(&self.held_us.to_be_bytes());
        out[28..].copy_from_slice(&self.window.to_be_bytes());
        out
    }

    pub fn decode(buf: &[u8]) -> Result<Self, ProtoError> {
        if buf.len() != Self::LEN || buf[..4] != Self::MAGIC {
            return Err(ProtoError::NotProgress);
        }
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&buf[at..at + 8]);
            u64::from_be_bytes(w)
        };
        Ok(Progress {
            seq: word(4),
            sent_us: word(12),
            held_us: word(20),
            window: word(28),
        })
    }
}

/// A receiver's 20-byte report: `magic`, then two big-endian u64s.
fn report(magic: [u8; 4], a: u64, b: u64) -> [u8; 20] {
    let mut out = [0u8; 20];
    out[..4].copy_from_slice(&magic);
    out[4..12].copy_from_slice(&a.to_be_bytes());
    out[12..].copy_from_slice(&b.to_be_bytes());
    out
}

/// The two numbers of a [`report`] with `magic`; `None` for anything else.
fn read_report(buf: &[u8], magic: [u8; 4]) -> Option<(u64, u64)> {
    if buf.len() != 20 || buf[..4] != magic {
        return None;
    }
    let word = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&buf[at..at + 8]);
        u64::from_be_bytes(b)
    };
    Some((word(4), word(12)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_high_round_trips_and_is_neither_an_overflow_nor_an_ack() {
        let q = QueueHigh {
            count: 3,
            seq: u64::MAX,
        };
        assert_eq!(QueueHigh::decode(&q.encode()), Ok(q));
        assert_eq!(Overflow::decode(&q.encode()), Err(ProtoError::NotOverflow));
        assert_eq!(Ack::decode(&q.encode()), Err(ProtoError::NotAnAck));
        let o = Overflow { drops: 3, seq: 9 };
        assert_eq!(
            QueueHigh::decode(&o.encode()),
            Err(ProtoError::NotQueueHigh)
        );
        assert_eq!(QueueHigh::decode(b"FLQH"), Err(ProtoError::NotQueueHigh));
    }

    #[test]
    fn progress_round_trips_and_is_no_other_report() {
        let p = Progress {
            seq: 1 << 40,
            sent_us: 3_000_000_007,
            held_us: 700,
            window: 1024,
        };
        assert_eq!(Progress::decode(&p.encode()), Ok(p));
        assert_eq!(Overflow::decode(&p.encode()), Err(ProtoError::NotOverflow));
        assert_eq!(
            QueueHigh::decode(&p.encode()),
            Err(ProtoError::NotQueueHigh)
        );
        assert_eq!(Ack::decode(&p.encode()), Err(ProtoError::NotAnAck));
        let o = Overflow { drops: 1, seq: 2 }.encode();
        assert_eq!(Progress::decode(&o), Err(ProtoError::NotProgress));
        assert_eq!(Progress::decode(b"FLRP"), Err(ProtoError::NotProgress));
    }

    #[test]
    fn overflow_round_trips_and_is_not_an_ack() {
        let o = Overflow {
            drops: 7_000_000_001,
            seq: 1 << 40,
        };
        assert_eq!(Overflow::decode(&o.encode()), Ok(o));
        assert_eq!(Ack::decode(&o.encode()), Err(ProtoError::NotAnAck));
        assert_eq!(
            Overflow::decode(&Ack { seq: 1 }.encode()),
            Err(ProtoError::NotOverflow)
        );
        assert_eq!(Overflow::decode(b"FLOV"), Err(ProtoError::NotOverflow));
    }

    #[test]
    fn header_round_trips_in_both_widths() {
        let h = DatagramHeader {
            sec: 17,
            usec: 999_999,
            seq: 0x1_0000_0005,
        };
        let mut buf = [0u8; 16];
        h.encode(&mut buf, true);
        assert_eq!(DatagramHeader::decode(&buf, true), Ok(h));
        h.encode(&mut buf, false);
        let short = DatagramHeader::decode(&buf, false).unwrap();
        assert_eq!(short.seq, 5, "32-bit counters wrap");
        assert_eq!(short.micros(), 17_999_999);
    }

    #[test]
    fn header_layout_is_iperf3s() {
        let h = DatagramHeader {
            sec: 1,
            usec: 2,
            seq: 3,
        };
        let mut buf = [0u8; 12];
        h.encode(&mut buf, false);
        assert_eq!(buf, [0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3]);
    }

    #[test]
    fn short_datagrams_are_refused() {
        assert_eq!(
            DatagramHeader::decode(&[0; 11], false),
            Err(ProtoError::ShortDatagram { len: 11, need: 12 })
        );
        assert!(DatagramHeader::decode(&[0; 15], true).is_err());
    }

    #[test]
    fn handshake_bytes() {
        assert_eq!(handshake_reply(b"9876"), Some(*b"6789"));
        assert_eq!(LEGACY_CONNECT_MSG, [0xb1, 0x68, 0xde, 0x3a]);
        assert_eq!(
            handshake_reply(&LEGACY_CONNECT_MSG),
            Some([0x15, 0xcd, 0x5b, 0x07])
        );
        assert_eq!(handshake_reply(b"9877"), None);
        assert_eq!(handshake_reply(b"98765"), None);
        assert!(is_handshake_reply(b"6789"));
    }

    #[test]
    fn ack_round_trips_and_refuses_others() {
        let a = Ack { seq: 42 };
        assert_eq!(Ack::decode(&a.encode()), Ok(a));
        assert_eq!(Ack::decode(b"FLAK1234"), Err(ProtoError::NotAnAck));
        let mut wrong = a.encode();
        wrong[0] = b'X';
        assert!(Ack::decode(&wrong).is_err());
    }
}
