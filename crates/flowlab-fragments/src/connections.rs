//! The fragment service's connections: at most `max` at once, and `per_source` from one
//! source (an IPv4 address, an IPv6 /64). Each costs two threads while it lasts, and may
//! by design stay silent for minutes once it has been sent a fragment (a fetch's
//! connection to a fast server waits for a slow one). When every place is taken, the
//! oldest connection that has been sent no fragment yet is closed to make room:
//! connections that only say hello, or ask for what is not in the set, cannot keep an
//! honest fetch out, whose first requests follow its hello at once.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::{Mutex, PoisonError};

use flowlab_proto::source::source_key;

/// The connections being served.
#[derive(Debug)]
pub(crate) struct Connections {
    max: usize,
    per_source: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Each connection by the order it was admitted in.
    open: BTreeMap<u64, Entry>,
    per_source: HashMap<IpAddr, usize>,
    next: u64,
}

#[derive(Debug)]
struct Entry {
    source: IpAddr,
    /// Who it is, for the log when it is closed to make room.
    peer: SocketAddr,
    /// A handle to close it by.
    handle: TcpStream,
    requested: bool,
}

impl State {
    fn forget(&mut self, seq: u64) -> Option<Entry> {
        let entry = self.open.remove(&seq)?;
        if let Some(n) = self.per_source.get_mut(&entry.source) {
            *n -= 1;
            if *n == 0 {
                self.per_source.remove(&entry.source);
            }
        }
        Some(entry)
    }
}

/// A connection's place, given back when dropped (or taken by [`Connections::admit`]
/// when it has been sent nothing and a place is needed).
#[derive(Debug)]
pub(crate) struct Place<'a> {
    conns: &'a Connections,
    seq: u64,
}

impl Connections {
    /// `max` places, `per_source` from one source (both at least 1).
    pub(crate) fn new(max: usize, per_source: usize) -> Connections {
        Connections {
            max: max.max(1),
            per_source: per_source.max(1),
            state: Mutex::default(),
        }
    }

    /// A place for `conn` from `peer`, and the peer of a connection closed to make room
    /// for it, if one was; or the busy message that says which limit is reached. When
    /// every place is taken, the oldest connection that has been sent no fragment is
    /// shut down and gives up its place; when every one has, the newcomer is refused.
    pub(crate) fn admit(
        &self,
        peer: SocketAddr,
        conn: &TcpStream,
    ) -> Result<(Place<'_>, Option<SocketAddr>), String> {
        let source = source_key(peer.ip());
        let handle = conn.try_clone().map_err(|e| e.to_string())?;
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mine = s.per_source.get(&source).copied().unwrap_or(0);
        if mine >= self.per_source {
            return Err(format!(
                "busy: {mine} fragment connections open from this address \
                 (--max-fragment-connections-per-source)"
            ));
        }
        let mut evicted = None;
        if s.open.len() >= self.max {
            let idle = s.open.iter().find(|(_, e)| !e.requested).map(|(&k, _)| k);
            let Some(oldest) = idle else {
                return Err(format!(
                    "busy: {} fragment connections open, each fetching \
                     (--max-fragment-connections)",
                    s.open.len()
                ));
            };
            if let Some(e) = s.forget(oldest) {
                let _ = e.handle.shutdown(std::net::Shutdown::Both);
                evicted = Some(e.peer);
            }
        }
        let seq = s.next;
        s.next += 1;
        *s.per_source.entry(source).or_default() += 1;
        s.open.insert(
            seq,
            Entry {
                source,
                peer,
                handle,
                requested: false,
            },
        );
        Ok((Place { conns: self, seq }, evicted))
    }

    /// Connections open now.
    #[cfg(test)]
    fn open(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .open
            .len()
    }
}

impl Place<'_> {
    /// The connection is being sent a fragment: it is no longer the first to go.
    pub(crate) fn requested(&self) {
        let mut s = self
            .conns
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(e) = s.open.get_mut(&self.seq) {
            e.requested = true;
        }
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let mut s = self
            .conns
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        s.forget(self.seq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::TcpListener;

    /// A connected pair: (the server's end, the client's end).
    fn pair(l: &TcpListener) -> (TcpStream, TcpStream) {
        let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (server, _) = l.accept().unwrap();
        (server, client)
    }

    #[test]
    fn the_oldest_silent_connection_makes_room_and_a_fetching_one_never_does() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let conns = Connections::new(2, 2);
        let a: SocketAddr = "192.0.2.1:1".parse().unwrap();
        let b: SocketAddr = "192.0.2.2:1".parse().unwrap();
        let c: SocketAddr = "192.0.2.3:1".parse().unwrap();
        let (s1, mut c1) = pair(&l);
        let (s2, _c2) = pair(&l);
        let (first, none) = conns.admit(a, &s1).unwrap();
        assert_eq!(none, None);
        let (second, _) = conns.admit(a, &s2).unwrap();
        second.requested();
        // Full: the first (silent) connection is closed for a third.
        let (s3, _c3) = pair(&l);
        let (third, evicted) = conns.admit(b, &s3).unwrap();
        assert_eq!(evicted, Some(a), "the log hears whom");
        assert_eq!(conns.open(), 2);
        let mut byte = [0u8; 1];
        assert_eq!(
            c1.read(&mut byte).unwrap(),
            0,
            "the evicted one is shut down"
        );
        drop(first); // Its thread ends: nothing more is given back.
        assert_eq!(conns.open(), 2);
        // Both fetching now: a fourth is refused.
        third.requested();
        let (s4, _c4) = pair(&l);
        let busy = conns.admit(c, &s4).unwrap_err();
        assert!(busy.contains("--max-fragment-connections"), "{busy}");
        drop(second);
        assert!(conns.admit(c, &s4).is_ok());
    }

    #[test]
    fn a_source_gets_its_share_and_no_more() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let conns = Connections::new(8, 1);
        let a: SocketAddr = "[2001:db8::1]:1".parse().unwrap();
        let same_64: SocketAddr = "[2001:db8::2]:1".parse().unwrap();
        let (s1, _c1) = pair(&l);
        let (s2, _c2) = pair(&l);
        let _held = conns.admit(a, &s1).unwrap();
        let busy = conns.admit(same_64, &s2).unwrap_err();
        assert!(busy.contains("per-source"), "{busy}");
    }
}
