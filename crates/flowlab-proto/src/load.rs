//! Load-generating connections (`flowlab rpm`), sans-IO.
//!
//! A connection to a flowlab server's test port opens with a hello: [`MAGIC`], the
//! version ([`VERSION`]), the direction of the load, `D` (download: the server sends) or
//! `U` (upload: the client sends), and the congestion control the server's socket should
//! use: a length byte (0: the server's default; at most [`MAX_CONGESTION_LEN`]) and the
//! name (`[a-z0-9_]`). Version 2 ([`VERSION_CREDENTIAL`]) adds a credential after the
//! name ([`crate::credential`]), which a server that authenticates requires. The server
//! answers with an admission byte (the fragment service's: `W`, `D` when the credential
//! is refused, or `B` + message when busy), after `W` to version 2 a ticket or zeros.
//! Then both directions carry frames: a kind byte, a `u32` big-endian length and that
//! many bytes of payload.
//!
//! | kind | payload | meaning |
//! |---|---|---|
//! | `D` | 1 to [`MAX_DATA`] bytes | load: the receiver counts and drops it |
//! | `P` | a latency probe of [`HEADER_LEN`] bytes ([`crate::probe`]) | a request from the client, a reply (times filled in) from the server |
//!
//! The load's sender writes data frames back to back; a probe the client sends on a
//! download connection reaches the server at once (its direction is idle) and the reply
//! queues behind the data the server has already written, as an HTTP/2 response behind
//! a large download does; on an upload connection the request queues behind the client's
//! data and the reply comes back at once. So a probe's round trip on a load connection
//! includes the load's own queue in the connection's send buffer and the network: the
//! draft's "self" probe.

use crate::ProtoError;
use crate::credential::Credential;
use crate::probe::HEADER_LEN;

/// First bytes of a load connection.
pub const MAGIC: [u8; 4] = *b"FLPL";
/// Load protocol version of a hello without a credential.
pub const VERSION: u8 = 1;
/// Load protocol version of a hello with a credential after the congestion control.
pub const VERSION_CREDENTIAL: u8 = 2;
/// Bytes of the hello before the congestion control's name: magic, version, direction,
/// the name's length.
pub const HELLO_LEN: usize = 7;
/// The longest congestion control name (the kernel's TCP_CA_NAME_MAX, less its NUL).
pub const MAX_CONGESTION_LEN: usize = 15;
/// Bytes before a frame's payload: kind and `u32` length.
pub const FRAME_HEAD: usize = 5;
/// The largest data frame's payload.
pub const MAX_DATA: u32 = 1 << 20;
/// Kind of a data frame.
pub const DATA: u8 = b'D';
/// Kind of a probe frame.
pub const PROBE: u8 = b'P';

/// Which way the load flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// The server sends.
    Download,
    /// The client sends.
    Upload,
}

impl Direction {
    fn byte(self) -> u8 {
        match self {
            Direction::Download => b'D',
            Direction::Upload => b'U',
        }
    }
}

/// The hello of a load connection; `congestion` is the server socket's algorithm (`None`:
/// the server's default); with a `credential`, version 2.
pub fn hello(
    d: Direction,
    congestion: Option<&str>,
    credential: Option<&Credential>,
) -> Result<Vec<u8>, ProtoError> {
    let name = congestion.unwrap_or("").as_bytes();
    check_congestion(name)?;
    let version = match credential {
        Some(_) => VERSION_CREDENTIAL,
        None => VERSION,
    };
    let mut h = Vec::with_capacity(HELLO_LEN + name.len());
    h.extend_from_slice(&MAGIC);
    h.extend_from_slice(&[version, d.byte(), name.len() as u8]);
    h.extend_from_slice(name);
    if let Some(c) = credential {
        h.extend(c.encode()?);
    }
    Ok(h)
}

/// What the first [`HELLO_LEN`] bytes of a load hello say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelloHead {
    pub direction: Direction,
    /// Bytes of the congestion control's name that follow.
    pub name_len: usize,
    /// Whether a credential follows the name (version 2).
    pub credential: bool,
}

/// Whether `name` can be a congestion control's name.
pub fn check_congestion(name: &[u8]) -> Result<(), ProtoError> {
    if name.len() > MAX_CONGESTION_LEN
        || !name
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_')
    {
        return Err(ProtoError::BadProbe("not a congestion control name"));
    }
    Ok(())
}

/// What a hello's head asks for, or why it is refused.
pub fn hello_head(h: &[u8; HELLO_LEN]) -> Result<HelloHead, ProtoError> {
    if h[..4] != MAGIC {
        return Err(ProtoError::BadProbe("not a load hello"));
    }
    let credential = match h[4] {
        VERSION => false,
        VERSION_CREDENTIAL => true,
        _ => return Err(ProtoError::BadProbe("unknown load version")),
    };
    let d = match h[5] {
        b'D' => Direction::Download,
        b'U' => Direction::Upload,
        _ => return Err(ProtoError::BadProbe("unknown load direction")),
    };
    let len = h[6] as usize;
    if len > MAX_CONGESTION_LEN {
        return Err(ProtoError::BadProbe("congestion control name too long"));
    }
    Ok(HelloHead {
        direction: d,
        name_len: len,
        credential,
    })
}

/// The head of a data frame of `len` bytes.
pub fn data_head(len: u32) -> [u8; FRAME_HEAD] {
    let mut h = [DATA, 0, 0, 0, 0];
    h[1..].copy_from_slice(&len.to_be_bytes());
    h
}

/// A probe frame carrying `probe`.
pub fn probe_frame(probe: &[u8; HEADER_LEN]) -> [u8; FRAME_HEAD + HEADER_LEN] {
    let mut f = [0u8; FRAME_HEAD + HEADER_LEN];
    f[0] = PROBE;
    f[1..FRAME_HEAD].copy_from_slice(&(HEADER_LEN as u32).to_be_bytes());
    f[FRAME_HEAD..].copy_from_slice(probe);
    f
}

/// What a [`FrameReader`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// This many bytes of data payload (a frame's payload may come in several).
    Data(usize),
    /// A whole probe.
    Probe([u8; HEADER_LEN]),
}

/// Reads frames from a byte stream in pieces of any size; data payloads are counted,
/// never buffered.
#[derive(Debug, Default)]
pub struct FrameReader {
    head: [u8; FRAME_HEAD],
    head_len: usize,
    /// Data payload bytes still due in the current frame.
    data_left: usize,
    /// Inside a probe frame: its bytes so far.
    probe: Option<([u8; HEADER_LEN], usize)>,
}

impl FrameReader {
    /// Takes `input`, calling `event` for what it completes; an error leaves the stream
    /// unusable (a peer that does not speak the protocol).
    pub fn push(
        &mut self,
        mut input: &[u8],
        event: &mut impl FnMut(Event),
    ) -> Result<(), ProtoError> {
        while !input.is_empty() {
            if self.data_left > 0 {
                let n = self.data_left.min(input.len());
                self.data_left -= n;
                input = &input[n..];
                event(Event::Data(n));
                continue;
            }
            if let Some((buf, got)) = self.probe.as_mut() {
                let n = (HEADER_LEN - *got).min(input.len());
                buf[*got..*got + n].copy_from_slice(&input[..n]);
                *got += n;
                input = &input[n..];
                if *got == HEADER_LEN {
                    let probe = *buf;
                    self.probe = None;
                    event(Event::Probe(probe));
                }
                continue;
            }
            let n = (FRAME_HEAD - self.head_len).min(input.len());
            self.head[self.head_len..self.head_len + n].copy_from_slice(&input[..n]);
            self.head_len += n;
            input = &input[n..];
            if self.head_len < FRAME_HEAD {
                continue;
            }
            self.head_len = 0;
            let len = u32::from_be_bytes([self.head[1], self.head[2], self.head[3], self.head[4]]);
            match self.head[0] {
                DATA if (1..=MAX_DATA).contains(&len) => self.data_left = len as usize,
                DATA => return Err(ProtoError::BadProbe("load data frame length out of range")),
                PROBE if len as usize == HEADER_LEN => self.probe = Some(([0; HEADER_LEN], 0)),
                PROBE => return Err(ProtoError::BadProbe("load probe frame of the wrong length")),
                _ => return Err(ProtoError::BadProbe("unknown load frame")),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hellos_round_trip_and_strangers_are_refused() {
        let head = |h: &[u8]| -> [u8; HELLO_LEN] { h[..HELLO_LEN].try_into().unwrap() };
        let at = |direction, name_len, credential| {
            Ok(HelloHead {
                direction,
                name_len,
                credential,
            })
        };
        for d in [Direction::Download, Direction::Upload] {
            let h = hello(d, None, None).unwrap();
            assert_eq!(hello_head(&head(&h)), at(d, 0, false));
            let h = hello(d, Some("cubic"), None).unwrap();
            assert_eq!(hello_head(&head(&h)), at(d, 5, false));
            assert_eq!(&h[HELLO_LEN..], b"cubic");
            let ticket = Credential::Ticket([3; crate::credential::TICKET_LEN]);
            let h = hello(d, Some("bbr"), Some(&ticket)).unwrap();
            assert_eq!(hello_head(&head(&h)), at(d, 3, true));
            assert_eq!(&h[HELLO_LEN + 3..], ticket.encode().unwrap());
        }
        for bad in ["Cubic", "a b", "sixteen_letters_", "x;"] {
            assert!(hello(Direction::Upload, Some(bad), None).is_err(), "{bad}");
        }
        let mut h = head(&hello(Direction::Upload, None, None).unwrap());
        h[5] = b'X';
        assert!(hello_head(&h).is_err());
        h = head(&hello(Direction::Upload, None, None).unwrap());
        h[4] = 9;
        assert!(hello_head(&h).is_err());
        h = head(&hello(Direction::Upload, None, None).unwrap());
        h[6] = 16;
        assert!(hello_head(&h).is_err());
        assert!(hello_head(b"FLPT\x01U\0").is_err());
    }

    #[test]
    fn frames_split_anywhere_give_the_same_events() {
        let mut stream = Vec::new();
        stream.extend_from_slice(&data_head(1000));
        stream.extend(std::iter::repeat_n(7u8, 1000));
        let probe = [3u8; HEADER_LEN];
        stream.extend_from_slice(&probe_frame(&probe));
        stream.extend_from_slice(&data_head(10));
        stream.extend(std::iter::repeat_n(0u8, 10));
        for piece in [1, 2, 5, 7, 53, 4096] {
            let mut r = FrameReader::default();
            let (mut data, mut probes) = (0, Vec::new());
            for chunk in stream.chunks(piece) {
                r.push(chunk, &mut |e| match e {
                    Event::Data(n) => data += n,
                    Event::Probe(p) => probes.push(p),
                })
                .expect("valid frames");
            }
            assert_eq!(
                (data, probes.as_slice()),
                (1010, &[probe][..]),
                "pieces of {piece}"
            );
        }
    }

    #[test]
    fn bad_frames_are_refused() {
        let mut none = |_| {};
        for bad in [
            &data_head(0)[..],
            &data_head(MAX_DATA + 1),
            b"P\0\0\0\x05",
            b"X\0\0\0\x01",
        ] {
            assert!(
                FrameReader::default().push(bad, &mut none).is_err(),
                "{bad:?}"
            );
        }
    }
}
