//! The fragment service (`flowlab serve --fragments DIR`), on the test port.
//!
//! Per connection: one thread reads requests (so the client can pipeline them and cancel
//! ones that have not started), the connection's own thread answers them in order,
//! sending each fragment with `sendfile(2)` straight from the page cache. Only fragments
//! of the served set can be read: a requested name must pass
//! [`flowlab_proto::fragment::check_name`], be in the manifest, and open — relative to
//! the directory, without following symlinks and without blocking (a FIFO put in a
//! fragment's place would hang `open(2)`) — as a regular file of the manifest's size.
//!
//! A connection is served only after its hello (whole by the server's handshake
//! deadline) carries the service's token, when it has one, and while the service holds
//! fewer than its limit of connections from the client's source; when every place is
//! taken, the oldest connection that has been sent no fragment makes room
//! (`connections.rs`). Each connection costs two threads for as long as it lasts,
//! and must be sent its first fragment within [`FIRST_REQUEST`].

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flowlab_engine::control;
use flowlab_engine::pacing::Pacer;
use flowlab_engine::server::{ConnectionHandler, Greeting, ServerLog};
use flowlab_proto::fragment::{
    Admission, Decoder, HELLO_HEAD, MAGIC, MAX_MANIFEST_LEN, Reply, Request, check_name,
    hello_token_len,
};
use flowlab_results::server::{RefusalKind, ServerEvent};

use crate::connections::{Connections, Place};
use crate::manifest::{Manifest, ManifestError, hex32};

/// Requests a client may have queued on one connection; more wait in its socket.
const QUEUE: usize = 1024;
/// How long a fragment connection may stay silent (nothing requested) before it is
/// closed: longer than `--idle-timeout`, because a fetching client's connection to a
/// fast server legitimately waits while a slow server sends the last fragments.
const SILENT_CLIENT: Duration = Duration::from_secs(300);
/// How long a new connection has, from its admission, until a fragment of the set is
/// sent on it: `flowlab fetch` opens every connection to every server before it requests
/// anything, and gives up on a server that does not answer within its connect timeout
/// (5 s), so a fetch from a few servers one of which is down asks within this.
pub const FIRST_REQUEST: Duration = Duration::from_secs(30);
/// How often a connection's reader looks at the clock while its client is silent.
const READ_SLICE: Duration = Duration::from_secs(1);
/// Bytes per `sendfile` call when the connection is rate-limited (pacing granularity).
const PACED_CHUNK: usize = 64 * 1024;
/// Shortest token a service accepts: anything shorter could be guessed.
pub const MIN_TOKEN_LEN: usize = 16;

/// Why a requested fragment is not sent: the refusal's message to the client.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    #[error("refused: {0}")]
    BadName(&'static str),
    #[error("no such fragment in this set")]
    NotInSet,
    #[error("cannot open: {0}")]
    Open(nix::Error),
    #[error("not a regular file")]
    NotAFile,
    #[error("{0}")]
    Stat(#[from] std::io::Error),
    #[error("changed on disk since the server started")]
    Changed,
}

/// A fragment set being served.
#[derive(Debug)]
pub struct FragmentService {
    dir_fd: OwnedFd,
    /// The manifest as sent: length prefix and JSON.
    manifest_frame: Vec<u8>,
    entries: HashMap<String, (u64, [u8; 32])>,
    /// Per-connection rate limit, bits/s (0: none).
    rate_bps: u64,
    /// How long a connection may stay silent with nothing requested.
    idle_timeout: Duration,
    /// The BLAKE3 hash of the token a client must send (`--token-file`), if any: of a
    /// fixed length whatever the token's, and compared in constant time (`blake3::Hash`'s
    /// equality is).
    token: Option<blake3::Hash>,
    /// Connections served at once, in all and per source (IPv4 address, IPv6 /64).
    conns: Connections,
}

/// Why a token cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("the token is {0} bytes; it must be {MIN_TOKEN_LEN} to {MAX} bytes", MAX = flowlab_proto::fragment::MAX_TOKEN_LEN)]
    Length(usize),
}

/// Checks a token's length (what `serve --token-file` and `fetch --token-file` read).
pub fn check_token(token: &[u8]) -> Result<(), TokenError> {
    if (MIN_TOKEN_LEN..=flowlab_proto::fragment::MAX_TOKEN_LEN).contains(&token.len()) {
        Ok(())
    } else {
        Err(TokenError::Length(token.len()))
    }
}

/// Opens a directory for `openat`, refusing a symlink.
fn open_dir(dir: &Path) -> std::io::Result<OwnedFd> {
    let fd = nix::fcntl::open(
        dir,
        nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_RDONLY,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(std::io::Error::from)?;
    Ok(fd)
}

impl FragmentService {
    /// Loads `DIR/manifest.json` and checks that every fragment is a regular file (not a
    /// symlink) of the right size. Hashes are the client's to check.
    pub fn open(
        dir: &Path,
        rate_bps: u64,
        idle_timeout: Duration,
    ) -> Result<FragmentService, ManifestError> {
        let manifest = Manifest::load(dir)?;
        let dir_fd = open_dir(dir).map_err(|source| ManifestError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let mut entries = HashMap::new();
        for f in &manifest.fragments {
            let meta = std::fs::symlink_metadata(dir.join(&f.name)).map_err(|e| {
                ManifestError::Fragment {
                    name: f.name.clone(),
                    problem: e.to_string(),
                }
            })?;
            if !meta.is_file() || meta.len() != f.size {
                return Err(ManifestError::Fragment {
                    name: f.name.clone(),
                    problem: format!(
                        "must be a regular file of {} bytes (symlinks are not served)",
                        f.size
                    ),
                });
            }
            let hash = hex32(&f.blake3).unwrap_or_default();
            entries.insert(f.name.clone(), (f.size, hash));
        }
        let json = serde_json::to_vec(&manifest).unwrap_or_default();
        let mut manifest_frame = (json.len() as u32).to_be_bytes().to_vec();
        manifest_frame.extend(json);
        Ok(FragmentService {
            dir_fd,
            manifest_frame,
            entries,
            rate_bps,
            idle_timeout,
            token: None,
            conns: Connections::new(64, 16),
        })
    }

    /// Serves only clients that send `token` (checked with [`check_token`]).
    pub fn with_token(mut self, token: &[u8]) -> Result<FragmentService, TokenError> {
        check_token(token)?;
        self.token = Some(blake3::hash(token));
        Ok(self)
    }

    /// Serves at most `max` connections at once, and `per_source` from one source
    /// (defaults: 64 and 16, the most connections one `flowlab fetch` opens to a server).
    pub fn with_limits(mut self, max: usize, per_source: usize) -> FragmentService {
        self.conns = Connections::new(max, per_source);
        self
    }

    /// Reads the client's hello by the handshake deadline and returns its token.
    fn read_hello(conn: &mut TcpStream, deadline: control::Deadline) -> Result<Vec<u8>, String> {
        let mut head = [0u8; HELLO_HEAD];
        control::read_exact_by(conn, &mut head, deadline).map_err(|e| e.to_string())?;
        let len = hello_token_len(&head).map_err(|e| e.to_string())?;
        let mut token = vec![0u8; len];
        control::read_exact_by(conn, &mut token, deadline).map_err(|e| e.to_string())?;
        Ok(token)
    }

    /// Whether `token` is the service's (any token when it has none).
    fn token_ok(&self, token: &[u8]) -> bool {
        match &self.token {
            None => true,
            Some(want) => blake3::hash(token) == *want,
        }
    }

    pub fn fragments(&self) -> usize {
        self.entries.len()
    }

    /// The manifest as the service sends it (JSON).
    pub fn manifest_json(&self) -> &[u8] {
        self.manifest_frame.get(4..).unwrap_or_default()
    }

    /// Fragment `name` opened as the service opens it for its own protocol (a name of
    /// the set, a regular file of its manifest size, no symlink followed, nothing
    /// waited on), for another way of sending it (HTTP): the file and its size, or why
    /// not.
    pub fn open_named(&self, name: &str) -> Result<(File, u64), String> {
        self.open_fragment(name)
            .map(|(file, size, _)| (file, size))
            .map_err(|e| format!("{name}: {e}"))
    }

    /// Whether `token` opens the set (any, when it has none).
    pub fn admits(&self, token: Option<&[u8]>) -> bool {
        self.token.is_none() || token.is_some_and(|t| self.token_ok(t))
    }

    /// The per-connection rate, bits/s (0: none).
    pub fn rate_bps(&self) -> u64 {
        self.rate_bps
    }

    /// Opens a requested fragment, or says why not. Only a regular file is opened, and
    /// without blocking: whatever has taken a fragment's name (a FIFO, a device, a
    /// symlink) is refused, not waited on.
    fn open_fragment(&self, name: &str) -> Result<(File, u64, [u8; 32]), Refusal> {
        use nix::fcntl::{AtFlags, OFlag};
        check_name(name).map_err(Refusal::BadName)?;
        let &(size, hash) = self.entries.get(name).ok_or(Refusal::NotInSet)?;
        let st = nix::sys::stat::fstatat(self.dir_fd.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_err(Refusal::Open)?;
        if nix::sys::stat::SFlag::from_bits_truncate(st.st_mode) & nix::sys::stat::SFlag::S_IFMT
            != nix::sys::stat::SFlag::S_IFREG
        {
            return Err(Refusal::NotAFile);
        }
        // Swapped for something else since the look: O_NONBLOCK still keeps open(2)
        // from waiting on it, and the look at the open file below refuses it.
        let fd = nix::fcntl::openat(
            self.dir_fd.as_fd(),
            name,
            OFlag::O_RDONLY
                | OFlag::O_NOFOLLOW
                | OFlag::O_CLOEXEC
                | OFlag::O_NONBLOCK
                | OFlag::O_NOCTTY,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(Refusal::Open)?;
        let file = File::from(fd);
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(Refusal::NotAFile);
        }
        if meta.len() != size {
            return Err(Refusal::Changed);
        }
        Ok((file, size, hash))
    }

    /// Admits a connection (hello, token, limits) and serves it; what was refused, and
    /// why, goes to the server's log.
    fn admit_and_serve(
        &self,
        mut conn: TcpStream,
        peer: SocketAddr,
        mut greeting: Greeting,
    ) -> std::io::Result<()> {
        let token = match Self::read_hello(&mut conn, greeting.deadline) {
            Ok(t) => t,
            Err(e) => {
                greeting.refuse(peer, RefusalKind::Handshake, format!("fragment hello: {e}"));
                return Ok(());
            }
        };
        greeting.done();
        if !self.token_ok(&token) {
            // The client learns only that it was denied; the log says why.
            greeting.refuse(
                peer,
                RefusalKind::Credentials,
                if token.is_empty() {
                    "fragment connection without a token (serve --token-file)".into()
                } else {
                    "fragment connection with a wrong token".into()
                },
            );
            return conn.write_all(&Admission::Denied.encode());
        }
        let place = match self.conns.admit(peer, &conn) {
            Ok((place, evicted)) => {
                if let Some(who) = evicted {
                    greeting.refuse(
                        who,
                        RefusalKind::Idle,
                        "fragment connection closed to make room: it had been sent no \
                         fragment (--max-fragment-connections)"
                            .into(),
                    );
                }
                place
            }
            Err(why) => {
                greeting.turn_away(&mut conn, peer, why);
                return Ok(());
            }
        };
        conn.write_all(&Admission::Welcome.encode())?;
        let log = Arc::clone(&greeting.log);
        self.serve(conn, &place, (peer, log))
    }

    fn serve(
        &self,
        mut conn: TcpStream,
        place: &Place<'_>,
        (peer, log): (SocketAddr, Arc<dyn ServerLog>),
    ) -> std::io::Result<()> {
        if self.manifest_frame.len() > MAX_MANIFEST_LEN as usize + 4 {
            return Ok(());
        }
        // Each reply is a header write and a body: without this, Nagle holds a small body
        // back until the header is acknowledged, and the client's delayed ACK (up to
        // 40 ms) then paces every fragment.
        conn.set_nodelay(true)?;
        conn.write_all(&self.manifest_frame)?;
        // `--rate`: the kernel paces the connection (SO_MAX_PACING_RATE: TCP's own pacing,
        // or fq's), segment by segment, across fragments. Only where it refuses the cap
        // does this thread pace its writes itself.
        let paced_by_kernel = self.rate_bps > 0
            && flowlab_engine::sock::set_max_pacing_rate(&conn, self.rate_bps / 8).is_ok();
        let pace_here = self.rate_bps > 0 && !paced_by_kernel;
        let cancelled: Arc<Mutex<HashSet<String>>> = Arc::default();
        let served = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::sync_channel::<String>(QUEUE);
        let reader = {
            let mut conn = conn.try_clone()?;
            let (cancelled, served) = (Arc::clone(&cancelled), Arc::clone(&served));
            let idle = self.idle_timeout.max(SILENT_CLIENT);
            std::thread::Builder::new()
                .name("fragment-requests".into())
                .spawn(move || {
                    // Until a fragment of the set is being sent, the connection has
                    // FIRST_REQUEST from its admission (requests for nothing do not
                    // count); then it may stay silent as long as a fetching client may.
                    let admitted = Instant::now();
                    let mut heard = admitted;
                    let _ = conn.set_read_timeout(Some(READ_SLICE));
                    let mut d = Decoder::default();
                    let mut buf = [0u8; 4096];
                    loop {
                        let n = match conn.read(&mut buf) {
                            Ok(0) => return,
                            Ok(n) => n,
                            Err(e) if flowlab_engine::stream::is_timeout(&e) => {
                                let over = if served.load(Ordering::Acquire) {
                                    heard.elapsed() > idle
                                } else {
                                    admitted.elapsed() > FIRST_REQUEST.min(idle)
                                };
                                if over {
                                    if !served.load(Ordering::Acquire) {
                                        log.event(ServerEvent::Refused {
                                            peer: peer.to_string(),
                                            kind: RefusalKind::Idle,
                                            reason: format!(
                                                "fragment connection closed: no fragment \
                                                 sent within {} s of its admission",
                                                FIRST_REQUEST.as_secs()
                                            ),
                                        });
                                    }
                                    let _ = conn.shutdown(std::net::Shutdown::Both);
                                    return;
                                }
                                continue;
                            }
                            Err(_) => return,
                        };
                        heard = Instant::now();
                        d.push(&buf[..n]);
                        loop {
                            match d.next_request() {
                                Ok(Some(Request::Get(name))) => {
                                    if tx.send(name).is_err() {
                                        return;
                                    }
                                }
                                Ok(Some(Request::Cancel(name))) => {
                                    if let Ok(mut c) = cancelled.lock() {
                                        c.insert(name);
                                    }
                                }
                                Ok(None) => break,
                                // A malformed request ends the connection.
                                Err(_) => {
                                    let _ = conn.shutdown(std::net::Shutdown::Both);
                                    return;
                                }
                            }
                        }
                    }
                })?
        };
        let result = self.answer(&mut conn, &rx, &cancelled, pace_here, (place, &served));
        let _ = conn.shutdown(std::net::Shutdown::Both);
        let _ = reader.join();
        result
    }

    fn answer(
        &self,
        conn: &mut TcpStream,
        rx: &Receiver<String>,
        cancelled: &Mutex<HashSet<String>>,
        pace: bool,
        (place, served): (&Place<'_>, &AtomicBool),
    ) -> std::io::Result<()> {
        // A client that stops reading cannot hold this thread longer than the timeout.
        conn.set_write_timeout(Some(self.idle_timeout))?;
        while let Ok(name) = rx.recv() {
            let was_cancelled = cancelled
                .lock()
                .map(|mut c| c.remove(&name))
                .unwrap_or(false);
            if was_cancelled {
                conn.write_all(&Reply::Cancelled(name).encode())?;
                continue;
            }
            match self.open_fragment(&name) {
                Ok((file, size, hash)) => {
                    // Fetching: no longer the first to make room, nor on the first
                    // request's deadline (said before the reply, which the client may
                    // be waiting for to know it).
                    if !served.swap(true, Ordering::AcqRel) {
                        place.requested();
                    }
                    conn.write_all(&Reply::Fragment { name, size, hash }.encode())?;
                    self.send_body(conn, &file, size, pace)?;
                }
                Err(why) => {
                    let message = why.to_string();
                    conn.write_all(&Reply::Refused { name, message }.encode())?
                }
            }
        }
        Ok(())
    }

    /// Sends `size` bytes of `file` with sendfile(2); with `pace`, paced here to the rate
    /// limit (where the kernel would not pace the connection).
    fn send_body(
        &self,
        conn: &TcpStream,
        file: &File,
        size: u64,
        pace: bool,
    ) -> std::io::Result<()> {
        let mut pacer = pace.then(|| Pacer::new(self.rate_bps, Duration::ZERO));
        let start = std::time::Instant::now();
        let mut off: libc::off_t = 0;
        while (off as u64) < size {
            let left = (size - off as u64) as usize;
            let chunk = if let Some(p) = pacer.as_mut() {
                let wait = p.wait(start.elapsed());
                if !wait.is_zero() {
                    std::thread::sleep(wait);
                    continue;
                }
                left.min(PACED_CHUNK)
            } else {
                left
            };
            match nix::sys::sendfile::sendfile(conn.as_fd(), file.as_fd(), Some(&mut off), chunk) {
                Ok(0) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "fragment shrank while being sent",
                    ));
                }
                Ok(n) => {
                    if let Some(p) = pacer.as_mut() {
                        p.sent(n);
                    }
                }
                Err(nix::Error::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

impl ConnectionHandler for FragmentService {
    fn magic(&self) -> [u8; 4] {
        MAGIC
    }

    fn handle(&self, conn: TcpStream, peer: SocketAddr, greeting: Greeting) {
        if let Err(e) = self.admit_and_serve(conn, peer, greeting) {
            tracing::debug!(%peer, "fragment connection ended: {e}");
        }
    }
}
