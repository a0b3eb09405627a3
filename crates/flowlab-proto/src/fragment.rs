//! The fragment protocol (`flowlab serve --fragments`, `flowlab fetch`), sans-IO.
//!
//! It shares the server's TCP port with throughput tests: a throughput connection starts
//! with a 37-byte cookie of `[a-z2-7]`, a fragment connection with [`MAGIC`] (upper case,
//! so the two never collide), a version byte and a token ([`hello`]). Then:
//!
//! 1. the server admits the connection or not ([`Admission`]): `W` (welcome), `D` (denied:
//!    the token is wrong) or `B` + `u16` message length + UTF-8 message (busy), and closes
//!    the connection unless it said `W`;
//! 2. the server sends the manifest: `u32` big-endian length + JSON ([`MAX_MANIFEST_LEN`]);
//! 3. the client sends requests whenever it likes (pipelining), each one message:
//!    - `G` + `u16` name length + name: send this fragment;
//!    - `C` + `u16` name length + name: cancel it if it has not started;
//! 4. the server answers each `G` in order, with one of
//!    - `F` + `u16` name length + name + `u64` size + 32-byte BLAKE3 hash, then exactly
//!      `size` bytes of the fragment;
//!    - `X` + `u16` name length + name: cancelled before it started;
//!    - `E` + `u16` name length + name + `u16` message length + UTF-8 message: refused.
//!
//! Names are at most [`MAX_NAME_LEN`] bytes; every length is checked before anything is
//! allocated. [`check_name`] is the server's first gate for a requested name.

use crate::ProtoError;

/// First bytes of a fragment connection.
pub const MAGIC: [u8; 4] = *b"FLFR";
/// Protocol version the client sends after [`MAGIC`]. Version 1 had no token and no
/// admission byte; a server refuses it (closes the connection).
pub const VERSION: u8 = 2;
/// Bytes of a hello before its token: magic, version, `u16` token length.
pub const HELLO_HEAD: usize = 7;
/// Longest token accepted.
pub const MAX_TOKEN_LEN: usize = 256;
/// Longest fragment name accepted.
pub const MAX_NAME_LEN: usize = 255;
/// Longest manifest accepted (JSON bytes): ~100 000 fragments.
pub const MAX_MANIFEST_LEN: u32 = 16 * 1024 * 1024;
/// Longest error message a server sends.
pub const MAX_MESSAGE_LEN: usize = 1024;
/// Bytes of a BLAKE3 hash.
pub const HASH_LEN: usize = 32;

/// A message from client to server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Get(String),
    Cancel(String),
}

/// The head of a server's answer (the fragment's bytes follow an `F`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Fragment {
        name: String,
        size: u64,
        hash: [u8; HASH_LEN],
    },
    Cancelled(String),
    Refused {
        name: String,
        message: String,
    },
}

/// The server's first answer: is the connection served?
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// The manifest follows.
    Welcome,
    /// The token is wrong (or missing): nothing more is said.
    Denied,
    /// Too many connections; the message says which limit.
    Busy(String),
}

/// A client's first bytes: [`MAGIC`], [`VERSION`], `u16` token length and the token
/// (empty when the server asks for none; cut at [`MAX_TOKEN_LEN`]).
pub fn hello(token: &[u8]) -> Vec<u8> {
    let token = &token[..token.len().min(MAX_TOKEN_LEN)];
    let mut out = MAGIC.to_vec();
    out.push(VERSION);
    out.extend_from_slice(&(token.len() as u16).to_be_bytes());
    out.extend_from_slice(token);
    out
}

/// The length of the token that follows a hello's head, or why the head is refused.
pub fn hello_token_len(head: &[u8; HELLO_HEAD]) -> Result<usize, ProtoError> {
    if head[..4] != MAGIC {
        return Err(ProtoError::BadFragmentMessage("not a fragment hello"));
    }
    if head[4] != VERSION {
        return Err(ProtoError::BadFragmentMessage("unsupported version"));
    }
    let len = u16::from_be_bytes([head[5], head[6]]) as usize;
    if len > MAX_TOKEN_LEN {
        return Err(ProtoError::BadFragmentMessage("token too long"));
    }
    Ok(len)
}

fn put_message(out: &mut Vec<u8>, message: &str) {
    let m = &message.as_bytes()[..message.len().min(MAX_MESSAGE_LEN)];
    out.extend_from_slice(&(m.len() as u16).to_be_bytes());
    out.extend_from_slice(m);
}

/// A message (`u16` length + UTF-8) at `at`, once it is all buffered.
fn take_message(b: &[u8], at: usize) -> Result<Option<(String, usize)>, ProtoError> {
    let Some(len) = b.get(at..at + 2) else {
        return Ok(None);
    };
    let len = u16::from_be_bytes([len[0], len[1]]) as usize;
    if len > MAX_MESSAGE_LEN {
        return Err(ProtoError::BadFragmentMessage("message too long"));
    }
    let Some(raw) = b.get(at + 2..at + 2 + len) else {
        return Ok(None);
    };
    Ok(Some((
        String::from_utf8_lossy(raw).into_owned(),
        at + 2 + len,
    )))
}

impl Admission {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Admission::Welcome => vec![b'W'],
            Admission::Denied => vec![b'D'],
            Admission::Busy(message) => {
                let mut out = vec![b'B'];
                put_message(&mut out, message);
                out
            }
        }
    }
}

/// Why a name may not be served, before it is even looked up.
pub fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("empty name");
    }
    if name.len() > MAX_NAME_LEN {
        return Err("name too long");
    }
    if name.contains('\0') {
        return Err("name contains NUL");
    }
    if name.contains('/') || name.contains('\\') {
        return Err("name contains a path separator");
    }
    if name == "." || name == ".." || name.contains("..") {
        return Err("name contains '..'");
    }
    if name.chars().any(char::is_control) {
        return Err("name contains a control character");
    }
    Ok(())
}

fn put_name(out: &mut Vec<u8>, name: &str) {
    // Names are checked by their producers; a longer one is cut at the limit so the
    // frame stays well-formed (and the peer refuses the name).
    let b = &name.as_bytes()[..name.len().min(MAX_NAME_LEN)];
    out.extend_from_slice(&(b.len() as u16).to_be_bytes());
    out.extend_from_slice(b);
}

impl Request {
    pub fn encode(&self) -> Vec<u8> {
        let (tag, name) = match self {
            Request::Get(n) => (b'G', n),
            Request::Cancel(n) => (b'C', n),
        };
        let mut out = vec![tag];
        put_name(&mut out, name);
        out
    }
}

impl Reply {
    /// The head of the answer (for `Fragment`, the bytes follow it).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Reply::Fragment { name, size, hash } => {
                out.push(b'F');
                put_name(&mut out, name);
                out.extend_from_slice(&size.to_be_bytes());
                out.extend_from_slice(hash);
            }
            Reply::Cancelled(name) => {
                out.push(b'X');
                put_name(&mut out, name);
            }
            Reply::Refused { name, message } => {
                out.push(b'E');
                put_name(&mut out, name);
                put_message(&mut out, message);
            }
        }
        out
    }
}

/// Incremental decoding: feed bytes as they arrive, take whole messages out.
///
/// `next` returns `Ok(None)` until a whole message is buffered; it never allocates more
/// than a message's declared (and bounded) length.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
}

fn take_name(b: &[u8], at: usize) -> Result<Option<(String, usize)>, ProtoError> {
    let Some(len) = b.get(at..at + 2) else {
        return Ok(None);
    };
    let len = u16::from_be_bytes([len[0], len[1]]) as usize;
    if len == 0 || len > MAX_NAME_LEN {
        return Err(ProtoError::BadFragmentMessage("bad name length"));
    }
    let Some(raw) = b.get(at + 2..at + 2 + len) else {
        return Ok(None);
    };
    let name = std::str::from_utf8(raw)
        .map_err(|_| ProtoError::BadFragmentMessage("name is not UTF-8"))?;
    Ok(Some((name.to_string(), at + 2 + len)))
}

impl Decoder {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes buffered and not yet decoded.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    fn consume(&mut self, n: usize) {
        self.buf.drain(..n);
    }

    /// The next whole request, if one is buffered.
    pub fn next_request(&mut self) -> Result<Option<Request>, ProtoError> {
        let Some(&tag) = self.buf.first() else {
            return Ok(None);
        };
        if tag != b'G' && tag != b'C' {
            return Err(ProtoError::BadFragmentMessage("unknown request"));
        }
        let Some((name, end)) = take_name(&self.buf, 1)? else {
            return Ok(None);
        };
        self.consume(end);
        Ok(Some(if tag == b'G' {
            Request::Get(name)
        } else {
            Request::Cancel(name)
        }))
    }

    /// The server's admission, once it is buffered (the first thing a server sends).
    pub fn next_admission(&mut self) -> Result<Option<Admission>, ProtoError> {
        let Some(&tag) = self.buf.first() else {
            return Ok(None);
        };
        let (admission, end) = match tag {
            b'W' => (Admission::Welcome, 1),
            b'D' => (Admission::Denied, 1),
            b'B' => match take_message(&self.buf, 1)? {
                Some((message, end)) => (Admission::Busy(message), end),
                None => return Ok(None),
            },
            _ => return Err(ProtoError::BadFragmentMessage("unknown admission")),
        };
        self.consume(end);
        Ok(Some(admission))
    }

    /// The next whole reply head, if one is buffered (a fragment's bytes stay buffered
    /// for the caller to take with [`Decoder::take`]).
    pub fn next_reply(&mut self) -> Result<Option<Reply>, ProtoError> {
        let Some(&tag) = self.buf.first() else {
            return Ok(None);
        };
        let Some((name, end)) = take_name(&self.buf, 1)? else {
            return Ok(None);
        };
        let reply = match tag {
            b'F' => {
                let Some(rest) = self.buf.get(end..end + 8 + HASH_LEN) else {
                    return Ok(None);
                };
                let mut size = [0u8; 8];
                size.copy_from_slice(&rest[..8]);
                let mut hash = [0u8; HASH_LEN];
                hash.copy_from_slice(&rest[8..]);
                self.consume(end + 8 + HASH_LEN);
                Reply::Fragment {
                    name,
                    size: u64::from_be_bytes(size),
                    hash,
                }
            }
            b'X' => {
                self.consume(end);
                Reply::Cancelled(name)
            }
            b'E' => {
                let Some((message, end)) = take_message(&self.buf, end)? else {
                    return Ok(None);
                };
                self.consume(end);
                Reply::Refused { name, message }
            }
            _ => return Err(ProtoError::BadFragmentMessage("unknown reply")),
        };
        Ok(Some(reply))
    }

    /// Takes up to `n` buffered bytes (a fragment's body that arrived with its head).
    pub fn take(&mut self, n: usize) -> Vec<u8> {
        let n = n.min(self.buf.len());
        self.buf.drain(..n).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_even_split_anywhere() {
        let msgs = [
            Request::Get("big.bin.017".into()),
            Request::Cancel("big.bin.003".into()),
            Request::Get("ü-fragment".into()),
        ];
        let wire: Vec<u8> = msgs.iter().flat_map(Request::encode).collect();
        for split in 0..wire.len() {
            let mut d = Decoder::default();
            let mut got = Vec::new();
            for part in [&wire[..split], &wire[split..]] {
                d.push(part);
                while let Some(m) = d.next_request().unwrap() {
                    got.push(m);
                }
            }
            assert_eq!(got, msgs, "split at {split}");
        }
    }

    #[test]
    fn replies_round_trip_and_leave_the_body() {
        let f = Reply::Fragment {
            name: "a.000".into(),
            size: 3,
            hash: [7; HASH_LEN],
        };
        let e = Reply::Refused {
            name: "../etc/passwd".into(),
            message: "name contains '..'".into(),
        };
        let x = Reply::Cancelled("a.001".into());
        let mut wire = f.encode();
        wire.extend_from_slice(b"abc");
        wire.extend(e.encode());
        wire.extend(x.encode());
        let mut d = Decoder::default();
        d.push(&wire);
        assert_eq!(d.next_reply().unwrap(), Some(f));
        assert_eq!(d.take(3), b"abc");
        assert_eq!(d.next_reply().unwrap(), Some(e));
        assert_eq!(d.next_reply().unwrap(), Some(x));
        assert_eq!(d.next_reply().unwrap(), None);
    }

    #[test]
    fn malformed_messages_are_refused_without_allocating() {
        let mut d = Decoder::default();
        d.push(b"Q\x00\x01a");
        assert!(d.next_request().is_err());
        let mut d = Decoder::default();
        d.push(b"G\xff\xff");
        assert!(
            d.next_request().is_err(),
            "a 65535-byte name is refused from its length"
        );
        let mut d = Decoder::default();
        d.push(b"G\x00\x00");
        assert!(d.next_request().is_err());
        let mut d = Decoder::default();
        d.push(b"G\x00\x02\xff\xfe");
        assert!(d.next_request().is_err(), "not UTF-8");
    }

    #[test]
    fn hellos_and_admissions_round_trip_and_bad_ones_are_refused() {
        let h = hello(b"s3cret-token-0123");
        let head: [u8; HELLO_HEAD] = h[..HELLO_HEAD].try_into().unwrap();
        assert_eq!(hello_token_len(&head), Ok(17));
        assert_eq!(&h[HELLO_HEAD..], b"s3cret-token-0123");
        assert_eq!(hello(&[b'x'; 1000]).len(), HELLO_HEAD + MAX_TOKEN_LEN);
        let mut v1 = head;
        v1[4] = 1;
        assert!(hello_token_len(&v1).is_err(), "version 1 is refused");
        let mut long = head;
        long[5..7].copy_from_slice(&257u16.to_be_bytes());
        assert!(hello_token_len(&long).is_err());
        assert!(hello_token_len(b"GET / H").is_err());

        let all = [
            Admission::Welcome,
            Admission::Denied,
            Admission::Busy("64 connections open".into()),
        ];
        let wire: Vec<u8> = all.iter().flat_map(Admission::encode).collect();
        for split in 0..wire.len() {
            let mut d = Decoder::default();
            let mut got = Vec::new();
            for part in [&wire[..split], &wire[split..]] {
                d.push(part);
                while let Some(a) = d.next_admission().unwrap() {
                    got.push(a);
                }
            }
            assert_eq!(got, all, "split at {split}");
        }
        let mut d = Decoder::default();
        d.push(b"\x00\x00\x01");
        assert!(
            d.next_admission().is_err(),
            "a version-1 manifest length is no admission"
        );
    }

    #[test]
    fn hostile_names_are_refused() {
        for bad in [
            "",
            "..",
            ".",
            "../x",
            "a/../../etc/passwd",
            "/etc/passwd",
            "dir/file",
            "a\\b",
            "nul\0byte",
            "tab\tname",
            &"x".repeat(256),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        for good in ["big.bin.000", "fragment-1", "a.b.c", "ü"] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
    }
}
