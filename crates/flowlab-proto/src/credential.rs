//! What a connection to an authenticating server's TCP echo or load service shows after
//! its hello (version 2 of either hello, [`crate::probe::tcp_hello_with`] and
//! [`crate::load::hello`]): nothing, an iperf3 token ([`crate::auth`]), or a ticket that
//! the server gave an earlier connection of the same client.
//!
//! | kind | then | meaning |
//! |---|---|---|
//! | `N` | — | no credential (a server that authenticates refuses the connection) |
//! | `T` | `u16` big-endian length (1 to [`MAX_TOKEN_LEN`]) and the token, base64 | iperf3's token, as a test's `authtoken` |
//! | `K` | [`TICKET_LEN`] bytes | a ticket the server issued |
//!
//! A server answers a version 2 hello with its admission byte (`W`, `D` or `B` +
//! message, as the fragment service's) and, after `W`, [`TICKET_LEN`] more bytes: a
//! ticket when it accepted a token, zeros otherwise. A ticket admits connections from
//! the source it was issued to (its IPv4 address, or its IPv6 /64) for
//! [`TICKET_LIFETIME_SECS`], so a client that opens many
//! connections (`flowlab rpm`'s probes, `flowlab ping --connect`) costs the server one
//! RSA decryption, not one per connection.

use crate::ProtoError;

/// Bytes of a ticket.
pub const TICKET_LEN: usize = 32;
/// Seconds a ticket admits connections after it was issued.
pub const TICKET_LIFETIME_SECS: u64 = 300;
/// The longest token accepted: the base64 of a 8192-bit RSA ciphertext is 1368 bytes.
pub const MAX_TOKEN_LEN: usize = 2048;

const NONE: u8 = b'N';
const TOKEN: u8 = b'T';
const TICKET: u8 = b'K';

/// A connection's credential.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    None,
    /// iperf3's token: the user, password and time encrypted for the server, base64.
    Token(String),
    Ticket([u8; TICKET_LEN]),
}

impl std::fmt::Debug for Credential {
    /// Neither a token nor a ticket is shown: either admits its holder.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Credential::None => "Credential::None",
            Credential::Token(_) => "Credential::Token(..)",
            Credential::Ticket(_) => "Credential::Ticket(..)",
        })
    }
}

impl Credential {
    /// The credential's bytes on the wire; a token longer than [`MAX_TOKEN_LEN`], or
    /// empty, is refused.
    pub fn encode(&self) -> Result<Vec<u8>, ProtoError> {
        Ok(match self {
            Credential::None => vec![NONE],
            Credential::Token(t) => {
                if t.is_empty() || t.len() > MAX_TOKEN_LEN {
                    return Err(ProtoError::BadCredential("token length out of range"));
                }
                let mut out = vec![TOKEN];
                out.extend_from_slice(&(t.len() as u16).to_be_bytes());
                out.extend_from_slice(t.as_bytes());
                out
            }
            Credential::Ticket(k) => {
                let mut out = vec![TICKET];
                out.extend_from_slice(k);
                out
            }
        })
    }

    /// Reads a credential through `fill`, which fills the buffer it is given from the
    /// connection (or fails with the caller's error): the kind, then what it says
    /// follows, every length checked before anything is read into it. The outer error
    /// is `fill`'s, the inner one says why the bytes are refused.
    pub fn read<E>(
        mut fill: impl FnMut(&mut [u8]) -> Result<(), E>,
    ) -> Result<Result<Credential, ProtoError>, E> {
        let mut kind = [0u8; 1];
        fill(&mut kind)?;
        Ok(match kind[0] {
            NONE => Ok(Credential::None),
            TICKET => {
                let mut k = [0u8; TICKET_LEN];
                fill(&mut k)?;
                Ok(Credential::Ticket(k))
            }
            TOKEN => {
                let mut len = [0u8; 2];
                fill(&mut len)?;
                let len = u16::from_be_bytes(len) as usize;
                if !(1..=MAX_TOKEN_LEN).contains(&len) {
                    return Ok(Err(ProtoError::BadCredential("token length out of range")));
                }
                let mut t = vec![0u8; len];
                fill(&mut t)?;
                match String::from_utf8(t) {
                    Ok(t) => Ok(Credential::Token(t)),
                    Err(_) => Err(ProtoError::BadCredential("token is not text")),
                }
            }
            _ => Err(ProtoError::BadCredential("unknown credential kind")),
        })
    }
}

impl Credential {
    /// The credential at the start of `bytes` and how many bytes it took, as
    /// [`Credential::read`] reads it; `None` when `bytes` end before it does.
    pub fn decode(bytes: &[u8]) -> Option<Result<(Credential, usize), ProtoError>> {
        let mut rest = bytes;
        let read = Credential::read(|buf: &mut [u8]| {
            let (piece, after) = rest.split_at_checked(buf.len()).ok_or(())?;
            buf.copy_from_slice(piece);
            rest = after;
            Ok::<(), ()>(())
        });
        let used = bytes.len() - rest.len();
        read.ok().map(|r| r.map(|c| (c, used)))
    }
}

/// What follows a `W` admission to a version 2 hello: the ticket, or zeros.
pub fn ticket_reply(ticket: Option<&[u8; TICKET_LEN]>) -> [u8; TICKET_LEN] {
    ticket.copied().unwrap_or([0; TICKET_LEN])
}

/// The ticket in what followed a `W` admission, `None` if the server issued none.
pub fn ticket_of(reply: &[u8; TICKET_LEN]) -> Option<[u8; TICKET_LEN]> {
    (reply != &[0; TICKET_LEN]).then_some(*reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(bytes: &[u8]) -> Result<Result<Credential, ProtoError>, &'static str> {
        match Credential::decode(bytes) {
            None => Err("short"),
            Some(r) => Ok(r.map(|(c, _)| c)),
        }
    }

    #[test]
    fn credentials_round_trip() {
        for c in [
            Credential::None,
            Credential::Token("abc+/=".into()),
            Credential::Ticket([7; TICKET_LEN]),
        ] {
            let mut wire = c.encode().unwrap();
            let len = wire.len();
            wire.extend_from_slice(b"next");
            assert_eq!(
                Credential::decode(&wire),
                Some(Ok((c.clone(), len))),
                "{c:?}"
            );
        }
    }

    #[test]
    fn bad_credentials_are_refused_before_their_body_is_read() {
        assert!(Credential::Token(String::new()).encode().is_err());
        assert!(
            Credential::Token("x".repeat(MAX_TOKEN_LEN + 1))
                .encode()
                .is_err()
        );
        // A length of 65535 is refused before 65535 bytes are asked for.
        assert!(matches!(read_all(b"T\xff\xff"), Ok(Err(_))));
        assert!(matches!(read_all(b"T\x00\x00"), Ok(Err(_))));
        assert!(
            matches!(read_all(b"T\x00\x01\xff"), Ok(Err(_))),
            "not UTF-8"
        );
        assert!(matches!(read_all(b"X"), Ok(Err(_))));
        assert_eq!(read_all(b"K\x01"), Err("short"));
    }

    #[test]
    fn a_zero_ticket_reply_means_none() {
        assert_eq!(ticket_of(&ticket_reply(None)), None);
        let k = [1; TICKET_LEN];
        assert_eq!(ticket_of(&ticket_reply(Some(&k))), Some(k));
    }

    #[test]
    fn neither_token_nor_ticket_is_shown_in_debug() {
        let shown = format!(
            "{:?} {:?}",
            Credential::Token("secret".into()),
            Credential::Ticket([9; TICKET_LEN])
        );
        assert!(!shown.contains("secret") && !shown.contains('9'), "{shown}");
    }
}
