//! Latency probes: `flowlab ping` and the server's echo service, sans-IO.
//!
//! A UDP probe is one datagram to the server's test port (the port iperf3 clients use for
//! their UDP stream handshakes, which are four bytes and never start with [`REQUEST`]).
//! The server answers it with a reply **of the same length** (an echo never amplifies),
//! made in place from the request: the magic becomes [`REPLY`] and the server's receive
//! and send times are filled in. All integers big-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 0–3 | magic: `FLPQ` (request) or `FLPR` (reply) |
//! | 4 | version ([`VERSION`]) |
//! | 5–7 | reserved, zero |
//! | 8–15 | `u64` session: the client's random number for one run, so that a late reply to an earlier run is never counted |
//! | 16–23 | `u64` sequence number, from 1 |
//! | 24–31 | `u64` the client's send time, ns (its own clock; echoed unchanged) |
//! | 32–39 | `u64` the server's receive time, ns since the Unix epoch (zero in a request) |
//! | 40–47 | `u64` the server's send time, ns since the Unix epoch (zero in a request) |
//! | 48– | padding up to the probe's size (the client's `-s`) |
//!
//! Over TCP (`flowlab ping --tcp`, `--connect`) a connection opens with a hello:
//! [`TCP_MAGIC`], the version and a `u32` message size (1 to [`MAX_TCP_LEN`]); version 2
//! ([`TCP_VERSION_CREDENTIAL`]) adds a credential ([`crate::credential`]), which a
//! server that authenticates requires. The server answers with an admission byte (the
//! fragment service's: `W`, `D` when the credential is refused, or `B` + message when
//! busy; after `W` to version 2 a ticket or zeros), then echoes every message of that size, one at a time. A message of at least
//! [`HEADER_LEN`] bytes that is a request is answered as over UDP (times filled in);
//! any other message (a 1-byte transaction) is echoed as it came.

use crate::ProtoError;
use crate::credential::Credential;

/// Magic of a probe request.
pub const REQUEST: [u8; 4] = *b"FLPQ";
/// Magic of a probe reply.
pub const REPLY: [u8; 4] = *b"FLPR";
/// Probe format version.
pub const VERSION: u8 = 1;
/// Bytes of a probe before its padding: the smallest probe.
pub const HEADER_LEN: usize = 48;
/// The largest probe: the most a UDP datagram over IPv4 carries.
pub const MAX_LEN: usize = 65_507;
/// First bytes of a TCP probe connection.
pub const TCP_MAGIC: [u8; 4] = *b"FLPT";
/// Bytes of a TCP probe hello: magic, version, `u32` message size.
pub const TCP_HELLO_LEN: usize = 9;
/// The largest TCP probe message.
pub const MAX_TCP_LEN: usize = 1 << 20;

/// Version of a TCP probe hello followed by a credential ([`crate::credential`]).
pub const TCP_VERSION_CREDENTIAL: u8 = 2;

/// A TCP probe connection's hello for messages of `size` bytes.
pub fn tcp_hello(size: u32) -> [u8; TCP_HELLO_LEN] {
    let mut h = [0u8; TCP_HELLO_LEN];
    h[..4].copy_from_slice(&TCP_MAGIC);
    h[4] = VERSION;
    h[5..].copy_from_slice(&size.to_be_bytes());
    h
}

/// A TCP probe hello followed by `credential` (version 2), for a server that
/// authenticates.
pub fn tcp_hello_with(size: u32, credential: &Credential) -> Result<Vec<u8>, ProtoError> {
    let mut h = tcp_hello(size).to_vec();
    h[4] = TCP_VERSION_CREDENTIAL;
    h.extend(credential.encode()?);
    Ok(h)
}

/// The message size a TCP probe hello asks for and whether a credential follows it, or
/// why it is refused.
pub fn tcp_hello_size(hello: &[u8; TCP_HELLO_LEN]) -> Result<(usize, bool), ProtoError> {
    if hello[..4] != TCP_MAGIC {
        return Err(ProtoError::BadProbe("not a TCP probe hello"));
    }
    let credential = match hello[4] {
        VERSION => false,
        TCP_VERSION_CREDENTIAL => true,
        _ => return Err(ProtoError::BadProbe("unknown probe version")),
    };
    let size = u32::from_be_bytes([hello[5], hello[6], hello[7], hello[8]]) as usize;
    if !(1..=MAX_TCP_LEN).contains(&size) {
        return Err(ProtoError::BadProbe("TCP probe size out of range"));
    }
    Ok((size, credential))
}

/// What a client puts in a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub session: u64,
    pub seq: u64,
    /// The client's send time, ns on its own clock.
    pub sent_ns: u64,
}

/// What a client reads back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    pub session: u64,
    pub seq: u64,
    /// The request's send time, echoed.
    pub sent_ns: u64,
    /// When the server received the request and sent the reply, ns since the Unix epoch
    /// on the server's clock.
    pub server_rx_ns: u64,
    pub server_tx_ns: u64,
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(x)
}

impl Request {
    /// Writes the probe into `buf` (its whole length is the probe's size: the header,
    /// then zeros). `buf` must hold at least [`HEADER_LEN`] bytes.
    pub fn encode_into(&self, buf: &mut [u8]) {
        assert!(
            buf.len() >= HEADER_LEN,
            "a probe has at least {HEADER_LEN} bytes"
        );
        buf.fill(0);
        buf[..4].copy_from_slice(&REQUEST);
        buf[4] = VERSION;
        buf[8..16].copy_from_slice(&self.session.to_be_bytes());
        buf[16..24].copy_from_slice(&self.seq.to_be_bytes());
        buf[24..32].copy_from_slice(&self.sent_ns.to_be_bytes());
    }
}

/// Is this datagram a probe request the server should answer? Only a whole header of
/// this version, no longer than [`MAX_LEN`], with sequence number ≥ 1.
pub fn is_request(datagram: &[u8]) -> bool {
    datagram.len() <= MAX_LEN && has_request_header(datagram)
}

/// Does this message start with a probe request's header (a whole one, this version,
/// sequence number ≥ 1)?
pub fn has_request_header(message: &[u8]) -> bool {
    message.len() >= HEADER_LEN
        && message[..4] == REQUEST
        && message[4] == VERSION
        && u64_at(message, 16) != 0
}

/// Turns a request (checked with [`is_request`]) into its reply, in place: same length,
/// same session, sequence and client time; the server's times filled in.
pub fn answer_in_place(datagram: &mut [u8], server_rx_ns: u64, server_tx_ns: u64) {
    datagram[..4].copy_from_slice(&REPLY);
    datagram[32..40].copy_from_slice(&server_rx_ns.to_be_bytes());
    datagram[40..48].copy_from_slice(&server_tx_ns.to_be_bytes());
}

impl Reply {
    /// Reads a reply; anything else is refused.
    pub fn decode(datagram: &[u8]) -> Result<Reply, ProtoError> {
        if datagram.len() < HEADER_LEN {
            return Err(ProtoError::BadProbe("shorter than a probe header"));
        }
        if datagram[..4] != REPLY {
            return Err(ProtoError::BadProbe("not a probe reply"));
        }
        if datagram[4] != VERSION {
            return Err(ProtoError::BadProbe("unknown probe version"));
        }
        Ok(Reply {
            session: u64_at(datagram, 8),
            seq: u64_at(datagram, 16),
            sent_ns: u64_at(datagram, 24),
            server_rx_ns: u64_at(datagram, 32),
            server_tx_ns: u64_at(datagram, 40),
        })
    }

    /// How long the server held the probe, ns (zero when its clock stepped back).
    pub fn server_ns(&self) -> u64 {
        self.server_tx_ns.saturating_sub(self.server_rx_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_becomes_its_reply_in_place_at_its_own_length() {
        for size in [HEADER_LEN, 64, 1400] {
            let mut d = vec![0xaa; size];
            let q = Request {
                session: 0x0102_0304_0506_0708,
                seq: 7,
                sent_ns: 1_700_000_000_123_456_789,
            };
            q.encode_into(&mut d);
            assert!(is_request(&d));
            assert!(d[HEADER_LEN..].iter().all(|&b| b == 0), "padding is zeros");
            assert!(Reply::decode(&d).is_err(), "a request is no reply");
            answer_in_place(&mut d, 10, 25);
            assert_eq!(d.len(), size);
            assert!(!is_request(&d), "a reply is not answered again");
            let r = Reply::decode(&d).expect("a reply");
            assert_eq!((r.session, r.seq, r.sent_ns), (q.session, q.seq, q.sent_ns));
            assert_eq!(
                (r.server_rx_ns, r.server_tx_ns, r.server_ns()),
                (10, 25, 15)
            );
        }
    }

    #[test]
    fn tcp_hellos_round_trip_and_bad_ones_are_refused() {
        assert_eq!(tcp_hello_size(&tcp_hello(1)), Ok((1, false)));
        assert_eq!(tcp_hello_size(&tcp_hello(1 << 20)), Ok((1 << 20, false)));
        assert!(tcp_hello_size(&tcp_hello(0)).is_err());
        assert!(tcp_hello_size(&tcp_hello((1 << 20) + 1)).is_err());
        let with = tcp_hello_with(64, &Credential::None).unwrap();
        let head: [u8; TCP_HELLO_LEN] = with[..TCP_HELLO_LEN].try_into().unwrap();
        assert_eq!(tcp_hello_size(&head), Ok((64, true)));
        assert_eq!(&with[TCP_HELLO_LEN..], b"N");
        let mut v3 = tcp_hello(64);
        v3[4] = 3;
        assert!(tcp_hello_size(&v3).is_err());
        assert!(tcp_hello_size(b"FLFR\x02\x00\x00\x00\x01").is_err());
    }

    #[test]
    fn what_is_not_a_request_is_left_alone() {
        let mut d = vec![0u8; HEADER_LEN];
        Request {
            session: 1,
            seq: 1,
            sent_ns: 1,
        }
        .encode_into(&mut d);
        assert!(!is_request(&d[..HEADER_LEN - 1]), "too short");
        assert!(!is_request(b"9876"), "a UDP stream handshake");
        let mut v2 = d.clone();
        v2[4] = 2;
        assert!(!is_request(&v2), "another version");
        let mut seq0 = d.clone();
        seq0[16..24].fill(0);
        assert!(!is_request(&seq0), "sequence 0");
        assert!(!is_request(&vec![0u8; MAX_LEN + 1]));
    }
}
