//! `flowlab fetch`: fragments from several servers at once, verified, resumable.
//!
//! One thread per connection (`--connections` per server, default 1). Each keeps
//! `depth` requests outstanding, so a server always has the next fragment queued and no
//! connection idles between fragments; which fragment comes next is the
//! [`Scheduler`]'s decision. A fragment is written to `.NAME.N.part` (N: the connection) while it arrives,
//! hashed as it is written, and renamed to `NAME` only when its BLAKE3 hash matches the
//! manifest: an interrupted fetch leaves no corrupt fragment, and running the same fetch
//! again skips every fragment already there and verified.

use std::collections::VecDeque;
use std::fs::{self, File};
use std::io::{BufWriter, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use flowlab_proto::fragment::{Admission, Decoder, MAX_MANIFEST_LEN, Reply, Request, hello};
use flowlab_results::fetch::{
    FetchResult, SCHEMA, SWEEP_SCHEMA, ServerStats, SweepResult, SweepRow,
};

use crate::manifest::{Manifest, ManifestError, verify_fragment};
use crate::schedule::{Mode, Outcome, Scheduler};

/// What to fetch, from where, how.
#[derive(Debug, Clone)]
pub struct FetchSpec {
    /// `host[:port]` of each server (port 5201 when absent).
    pub servers: Vec<String>,
    pub mode: Mode,
    /// Connections per server.
    pub connections: usize,
    /// Requests outstanding per connection.
    pub depth: usize,
    pub out: PathBuf,
    /// A connection with requests outstanding that receives nothing for this long has
    /// failed; its fragments go to the others.
    pub stall_timeout: Duration,
    pub connect_timeout: Duration,
    /// The servers' token (`--token-file`), sent in every hello; empty for none.
    pub token: Vec<u8>,
}

impl FetchSpec {
    pub fn new(servers: Vec<String>, out: PathBuf) -> FetchSpec {
        FetchSpec {
            servers,
            mode: Mode::Adaptive,
            connections: 1,
            depth: 2,
            out,
            stall_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            token: Vec::new(),
        }
    }
}

/// Why a fetch failed as a whole.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{0}")]
    Manifest(#[from] ManifestError),
    #[error("no server could be used: {0}")]
    NoServer(String),
    #[error("the servers serve different fragment sets ({0} and {1} differ)")]
    DifferentSets(String, String),
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("{left} fragment(s) could not be fetched: {why}")]
    Incomplete { left: usize, why: String },
}

/// Why a connection to a server could not be used, or ended before the fetch did: the
/// server's `failed` in the result, and what its progress bar says.
#[derive(Debug, thiserror::Error)]
enum ConnectionError {
    #[error("cannot resolve {server}: {source}")]
    Resolve {
        server: String,
        source: std::io::Error,
    },
    #[error("{0}: no address")]
    NoAddress(String),
    #[error("cannot connect to {server}: {source}")]
    Connect {
        server: String,
        source: std::io::Error,
    },
    #[error(
        "{server}: not a flowlab fragment server ({source}); start it with `flowlab serve --fragments DIR`"
    )]
    NotAFragmentServer {
        server: String,
        source: std::io::Error,
    },
    #[error(
        "{server}: authentication failed (the server serves only clients with its token: \
         give it with --token-file FILE or FLOWLAB_TOKEN)"
    )]
    Denied { server: String },
    #[error("{server}: {message}")]
    Busy { server: String, message: String },
    #[error("{0}")]
    Manifest(#[from] ManifestError),
    #[error("the server closed the connection")]
    Closed,
    #[error("the server closed the connection mid-fragment")]
    ClosedMidFragment,
    #[error("stalled: nothing received within the stall timeout")]
    Stalled,
    #[error("stalled mid-fragment")]
    StalledMidFragment,
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Protocol(#[from] flowlab_proto::ProtoError),
    #[error("a reply nobody asked for")]
    UnaskedReply,
    #[error("protocol error: got {got} ({size} bytes) where {due} was due")]
    WrongFragment { got: String, size: u64, due: String },
    #[error("{}: {source}", path.display())]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("lock poisoned")]
    Poisoned,
}

/// What a caller is told while a fetch runs (progress bars).
pub trait Progress: Sync {
    /// Once, before data flows: fragments and bytes still to fetch.
    fn start(&self, _servers: &[String], _fragments: usize, _bytes: u64) {}
    fn bytes(&self, _server: usize, _n: u64) {}
    fn fragment(&self, _server: usize) {}
    fn failed(&self, _server: usize, _why: &str) {}
    fn finish(&self) {}
}

/// No progress reports.
#[derive(Debug)]
pub struct Silent;
impl Progress for Silent {}

/// Where connection `worker` writes its copy of fragment `name` while it arrives: each
/// copy has its own file, so a second copy (end game) never mixes with the first.
fn part_name(name: &str, worker: usize) -> String {
    format!(".{name}.{worker}.part")
}

/// Removes every partial copy in `out` (flowlab's `.NAME.N.part` files).
fn remove_parts(out: &Path) {
    let Ok(dir) = fs::read_dir(out) else { return };
    for e in dir.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') && name.ends_with(".part") {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// `host`, `host:port`, `1.2.3.4`, `[::1]:5201` or a bare IPv6 address, as something
/// `ToSocketAddrs` takes (port 5201 when none is given).
pub fn with_port(server: &str) -> String {
    let port = flowlab_proto::DEFAULT_PORT;
    if server.starts_with('[') {
        // [v6] or [v6]:port
        return if server.ends_with(']') {
            format!("{server}:{port}")
        } else {
            server.to_string()
        };
    }
    match server.matches(':').count() {
        0 => format!("{server}:{port}"),
        1 => server.to_string(),
        _ => format!("[{server}]:{port}"), // a bare IPv6 address
    }
}

/// Opens a fragment connection and reads the manifest.
fn connect(
    server: &str,
    timeout: Duration,
    token: &[u8],
) -> Result<(TcpStream, Manifest), ConnectionError> {
    let with_port = with_port(server);
    let addrs = with_port
        .to_socket_addrs()
        .map_err(|source| ConnectionError::Resolve {
            server: server.into(),
            source,
        })?;
    let mut last = ConnectionError::NoAddress(server.into());
    for a in addrs {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(mut s) => {
                let not_ours = |source| ConnectionError::NotAFragmentServer {
                    server: server.into(),
                    source,
                };
                // Requests leave at once, not after the previous reply's ACK (Nagle).
                s.set_nodelay(true).map_err(not_ours)?;
                s.set_read_timeout(Some(timeout.max(Duration::from_secs(5))))
                    .map_err(not_ours)?;
                s.write_all(&hello(token)).map_err(not_ours)?;
                match admission(&mut s).map_err(not_ours)? {
                    Admission::Welcome => {}
                    Admission::Denied => {
                        return Err(ConnectionError::Denied {
                            server: server.into(),
                        });
                    }
                    Admission::Busy(message) => {
                        return Err(ConnectionError::Busy {
                            server: server.into(),
                            message,
                        });
                    }
                }
                let body = read_manifest(&mut s).map_err(not_ours)?;
                let m = Manifest::parse(&body, Path::new(server))?;
                return Ok((s, m));
            }
            Err(source) => {
                last = ConnectionError::Connect {
                    server: server.into(),
                    source,
                }
            }
        }
    }
    Err(last)
}

/// The server's answer to a hello.
fn admission(s: &mut TcpStream) -> std::io::Result<Admission> {
    let mut d = Decoder::default();
    let mut byte = [0u8; 1];
    loop {
        if let Some(a) = d.next_admission().map_err(std::io::Error::other)? {
            return Ok(a);
        }
        s.read_exact(&mut byte)?;
        d.push(&byte);
    }
}

/// The manifest: `u32` length and JSON.
fn read_manifest(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len);
    if len == 0 || len > MAX_MANIFEST_LEN {
        return Err(std::io::Error::other(format!("manifest length {len}")));
    }
    let mut body = vec![0u8; len as usize];
    s.read_exact(&mut body)?;
    Ok(body)
}

struct Shared {
    sched: Scheduler,
    stats: Vec<ServerStats>,
    /// Per worker: fragments to cancel (done elsewhere).
    cancel: Vec<Vec<usize>>,
    first_request: Vec<Option<Instant>>,
    last_byte: Vec<Option<Instant>>,
}

struct Ctx<'a> {
    spec: &'a FetchSpec,
    manifest: &'a Manifest,
    hashes: Vec<[u8; 32]>,
    shared: Mutex<Shared>,
    wake: Condvar,
    progress: &'a dyn Progress,
    /// Set when the last fragment is verified: workers still receiving a losing copy
    /// stop at once instead of draining it.
    all_done: AtomicBool,
    /// When that happened.
    finished: Mutex<Option<Instant>>,
    /// A handle on every connection, shut down when all is done so no worker waits on a
    /// slow server for a copy nobody needs.
    handles: Vec<TcpStream>,
}

/// Runs a fetch to completion (or failure).
pub fn fetch(spec: &FetchSpec, progress: &dyn Progress) -> Result<FetchResult, FetchError> {
    if spec.servers.is_empty() {
        return Err(FetchError::NoServer("no --from given".into()));
    }
    // Connect every worker. A server none of whose connections could be opened is
    // reported failed; one that opened some works with those (the others' errors are
    // noted), and stops trying after its first refusal.
    let mut conns: Vec<(usize, TcpStream)> = Vec::new();
    let mut manifest: Option<(Manifest, String)> = None;
    let mut stats: Vec<ServerStats> = spec
        .servers
        .iter()
        .map(|s| ServerStats {
            address: s.clone(),
            ..ServerStats::default()
        })
        .collect();
    for (server, addr) in spec.servers.iter().enumerate() {
        for _ in 0..spec.connections.max(1) {
            match connect(addr, spec.connect_timeout, &spec.token) {
                Ok((s, m)) => {
                    match &manifest {
                        Some((first, from)) if first != &m => {
                            return Err(FetchError::DifferentSets(from.clone(), addr.clone()));
                        }
                        Some(_) => {}
                        None => manifest = Some((m, addr.clone())),
                    }
                    conns.push((server, s));
                }
                Err(e) => {
                    if conns.iter().any(|(s, _)| *s == server) {
                        note(
                            &mut stats[server],
                            format!("a connection could not open: {e}"),
                        );
                    } else {
                        stats[server].failed = Some(e.to_string());
                    }
                    break;
                }
            }
        }
    }
    let Some((manifest, _)) = manifest else {
        let why: Vec<String> = stats.iter().filter_map(|s| s.failed.clone()).collect();
        return Err(FetchError::NoServer(why.join("; ")));
    };
    let out = &spec.out;
    fs::create_dir_all(out).map_err(|e| FetchError::Io(out.clone(), e))?;
    manifest.save(out)?;
    // Resume: keep what is there and verified; drop leftovers of an interrupted run.
    remove_parts(out);
    let done: Vec<bool> = manifest
        .fragments
        .iter()
        .map(|f| out.join(&f.name).exists() && verify_fragment(out, f).is_ok())
        .collect();
    let skipped = done.iter().filter(|&&d| d).count();
    // Workers: each connection is one. A ratio is the servers' (the scheduler deals each
    // server's share among its connections).
    let workers = conns.len();
    let owners: Vec<usize> = conns.iter().map(|(server, _)| *server).collect();
    let sched = Scheduler::new(spec.mode.clone(), manifest.fragments.len(), &owners, &done);
    let hashes: Vec<[u8; 32]> = manifest
        .fragments
        .iter()
        .map(|f| crate::manifest::hex32(&f.blake3).unwrap_or_default())
        .collect();
    let left_bytes: u64 = manifest
        .fragments
        .iter()
        .zip(&done)
        .filter(|(_, d)| !**d)
        .map(|(f, _)| f.size)
        .sum();
    progress.start(
        &spec.servers,
        manifest.fragments.len() - skipped,
        left_bytes,
    );
    let ctx = Ctx {
        spec,
        manifest: &manifest,
        hashes,
        shared: Mutex::new(Shared {
            sched,
            stats,
            cancel: vec![Vec::new(); workers],
            first_request: vec![None; spec.servers.len()],
            last_byte: vec![None; spec.servers.len()],
        }),
        wake: Condvar::new(),
        progress,
        all_done: AtomicBool::new(false),
        finished: Mutex::new(None),
        handles: conns
            .iter()
            .filter_map(|(_, c)| c.try_clone().ok())
            .collect(),
    };
    let started = Instant::now();
    std::thread::scope(|scope| {
        for (worker, (server, conn)) in conns.into_iter().enumerate() {
            let ctx = &ctx;
            scope.spawn(move || {
                let result = run_worker(ctx, worker, server, conn);
                let mut sh = ctx.shared.lock().unwrap_or_else(|e| e.into_inner());
                // Once everything is verified, whatever ended a worker is no failure.
                let result = if ctx.all_done.load(Ordering::Acquire) {
                    Ok(())
                } else {
                    result
                };
                if let Err(why) = result {
                    let why = why.to_string();
                    sh.sched.failed(worker);
                    // A server fails with its last connection; until then its other
                    // connections carry on, and the error is noted.
                    if sh.sched.server_alive(server) {
                        note(&mut sh.stats[server], format!("a connection ended: {why}"));
                    } else if sh.stats[server].failed.is_none() {
                        sh.stats[server].failed = Some(why.clone());
                        ctx.progress.failed(server, &why);
                    }
                }
                ctx.wake.notify_all();
            });
        }
    });
    progress.finish();
    // Copies cut short (lost races, failed servers) leave their `.part` behind.
    remove_parts(out);
    let end = ctx
        .finished
        .lock()
        .ok()
        .and_then(|f| *f)
        .unwrap_or_else(Instant::now);
    let seconds = end.saturating_duration_since(started).as_secs_f64();
    let sh = ctx.shared.into_inner().unwrap_or_else(|e| e.into_inner());
    if !sh.sched.is_done() {
        return Err(FetchError::Incomplete {
            left: sh.sched.remaining(),
            why: why_incomplete(&sh.stats),
        });
    }
    let mut servers = sh.stats;
    for (i, s) in servers.iter_mut().enumerate() {
        if let (Some(a), Some(b)) = (sh.first_request[i], sh.last_byte[i]) {
            s.busy_seconds = (b - a).as_secs_f64();
        }
        if s.busy_seconds > 0.0 {
            s.bits_per_second = s.bytes as f64 * 8.0 / s.busy_seconds;
        }
    }
    let bytes = servers.iter().map(|s| s.bytes).sum();
    Ok(FetchResult {
        schema: SCHEMA.into(),
        file: manifest.file.clone(),
        mode: match &spec.mode {
            Mode::Adaptive => "adaptive".into(),
            Mode::Ratio(r) => r.iter().map(u32::to_string).collect::<Vec<_>>().join(":"),
        },
        fragments: manifest.fragments.len(),
        skipped,
        bytes,
        seconds,
        bits_per_second: if seconds > 0.0 {
            bytes as f64 * 8.0 / seconds
        } else {
            0.0
        },
        servers,
    })
}

/// Most error messages kept per server (the counts stay exact).
const MAX_ERRORS: usize = 20;

/// Why fragments were left: each server's failure, or what it did with the fragments it
/// was asked for (sent corrupt copies, refused them).
fn why_incomplete(stats: &[ServerStats]) -> String {
    let why: Vec<String> = stats
        .iter()
        .filter_map(|s| {
            if let Some(f) = &s.failed {
                return Some(format!("{}: {f}", s.address));
            }
            let mut did = Vec::new();
            if s.corrupt > 0 {
                did.push(format!(
                    "sent {} fragment(s) that failed verification",
                    s.corrupt
                ));
            }
            if s.refused > 0 {
                did.push(format!("refused {} request(s)", s.refused));
            }
            if did.is_empty() {
                return None;
            }
            let last = s
                .errors
                .last()
                .map(|e| format!(" (last: {e})"))
                .unwrap_or_default();
            Some(format!("{}: {}{last}", s.address, did.join(", ")))
        })
        .collect();
    if why.is_empty() {
        "no server delivered them".into()
    } else {
        why.join("; ")
    }
}

fn note(stats: &mut ServerStats, message: String) {
    if stats.errors.len() < MAX_ERRORS {
        stats.errors.push(message);
    }
}

/// Reads from the connection into the decoder.
fn fill(conn: &mut TcpStream, d: &mut Decoder, buf: &mut [u8]) -> Result<(), ConnectionError> {
    match conn.read(buf) {
        Ok(0) => Err(ConnectionError::Closed),
        Ok(n) => {
            d.push(&buf[..n]);
            Ok(())
        }
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Err(ConnectionError::Stalled)
        }
        Err(e) => Err(e.into()),
    }
}

/// One connection's loop: keep `depth` requests outstanding, receive, verify, store.
fn run_worker(
    ctx: &Ctx<'_>,
    worker: usize,
    server: usize,
    mut conn: TcpStream,
) -> Result<(), ConnectionError> {
    let names = &ctx.manifest.fragments;
    conn.set_read_timeout(Some(ctx.spec.stall_timeout))?;
    let mut outstanding: VecDeque<usize> = VecDeque::new();
    let mut d = Decoder::default();
    // Page-aligned: the kernel's copy into a misaligned buffer runs far slower
    // (flowlab_engine::buf).
    let mut buf = flowlab_engine::buf::PageBuf::zeroed(256 * 1024);
    loop {
        // Ask for more, send cancels, or wait for work to come back.
        {
            let mut sh = ctx.shared.lock().map_err(|_| ConnectionError::Poisoned)?;
            let cancels = std::mem::take(&mut sh.cancel[worker]);
            let mut wire = Vec::new();
            for f in cancels.into_iter().filter(|f| outstanding.contains(f)) {
                wire.extend(Request::Cancel(names[f].name.clone()).encode());
            }
            while outstanding.len() < ctx.spec.depth.max(1) {
                let Some(f) = sh.sched.next(worker) else {
                    break;
                };
                outstanding.push_back(f);
                wire.extend(Request::Get(names[f].name.clone()).encode());
                sh.first_request[server].get_or_insert_with(Instant::now);
            }
            if outstanding.is_empty() {
                if sh.sched.is_done() || sh.sched.is_stuck() {
                    return Ok(());
                }
                // Nothing for us now; a failing server or the end game may change that.
                let _ = ctx.wake.wait_timeout(sh, Duration::from_millis(50));
                continue;
            }
            drop(sh);
            if !wire.is_empty() {
                conn.write_all(&wire)?;
            }
        }
        // The next reply; the server answers in request order.
        let reply = loop {
            match d.next_reply()? {
                Some(r) => break r,
                None => fill(&mut conn, &mut d, &mut buf)?,
            }
        };
        let expected = outstanding
            .pop_front()
            .ok_or(ConnectionError::UnaskedReply)?;
        let entry = &names[expected];
        match reply {
            Reply::Fragment { name, size, hash } => {
                if name != entry.name || size != entry.size {
                    return Err(ConnectionError::WrongFragment {
                        got: name,
                        size,
                        due: entry.name.clone(),
                    });
                }
                let verified = receive_body(
                    ctx, server, worker, &mut conn, &mut d, &mut buf, expected, size,
                )? && hash == ctx.hashes[expected];
                let mut sh = ctx.shared.lock().map_err(|_| ConnectionError::Poisoned)?;
                sh.last_byte[server] = Some(Instant::now());
                let part = ctx.spec.out.join(part_name(&entry.name, worker));
                match sh.sched.delivered(worker, expected, verified) {
                    Outcome::Accepted { cancel } => {
                        fs::rename(&part, ctx.spec.out.join(&entry.name)).map_err(|source| {
                            ConnectionError::File {
                                path: entry.name.clone().into(),
                                source,
                            }
                        })?;
                        sh.stats[server].fragments += 1;
                        sh.stats[server].bytes += size;
                        for w in cancel {
                            sh.cancel[w].push(expected);
                        }
                        ctx.progress.fragment(server);
                        if sh.sched.is_done() {
                            if let Ok(mut f) = ctx.finished.lock() {
                                *f = Some(Instant::now());
                            }
                            ctx.all_done.store(true, Ordering::Release);
                            for h in &ctx.handles {
                                let _ = h.shutdown(std::net::Shutdown::Both);
                            }
                        }
                    }
                    Outcome::Duplicate => {
                        let _ = fs::remove_file(&part);
                        sh.stats[server].duplicates += 1;
                    }
                    Outcome::Corrupt => {
                        let _ = fs::remove_file(&part);
                        sh.stats[server].corrupt += 1;
                        let msg = format!("{}: failed verification", entry.name);
                        note(&mut sh.stats[server], msg);
                    }
                }
                ctx.wake.notify_all();
            }
            Reply::Cancelled(_) => {
                let mut sh = ctx.shared.lock().map_err(|_| ConnectionError::Poisoned)?;
                sh.sched.dropped(worker, expected, false);
                sh.stats[server].duplicates += 1;
            }
            Reply::Refused { name, message } => {
                let mut sh = ctx.shared.lock().map_err(|_| ConnectionError::Poisoned)?;
                sh.sched.dropped(worker, expected, true);
                sh.stats[server].refused += 1;
                note(&mut sh.stats[server], format!("{name}: {message}"));
                ctx.wake.notify_all();
            }
        }
    }
}

/// Receives a fragment's body into this connection's `.part` file for it, hashing it;
/// true when the bytes match the manifest's hash.
#[allow(clippy::too_many_arguments)]
fn receive_body(
    ctx: &Ctx<'_>,
    server: usize,
    worker: usize,
    conn: &mut TcpStream,
    d: &mut Decoder,
    buf: &mut [u8],
    frag: usize,
    size: u64,
) -> Result<bool, ConnectionError> {
    let entry = &ctx.manifest.fragments[frag];
    let part = ctx.spec.out.join(part_name(&entry.name, worker));
    let mut file = BufWriter::with_capacity(
        1 << 20,
        File::create(&part).map_err(|source| ConnectionError::File {
            path: part.clone(),
            source,
        })?,
    );
    let mut hasher = blake3::Hasher::new();
    let mut left = size;
    let file_error = |source| ConnectionError::File {
        path: part.clone(),
        source,
    };
    let mut store = |bytes: &[u8], hasher: &mut blake3::Hasher| -> Result<(), ConnectionError> {
        hasher.update(bytes);
        ctx.progress.bytes(server, bytes.len() as u64);
        file.write_all(bytes).map_err(file_error)
    };
    let early = d.take(left as usize);
    left -= early.len() as u64;
    store(&early, &mut hasher)?;
    while left > 0 {
        let want = (left as usize).min(buf.len());
        let n = match conn.read(&mut buf[..want]) {
            Ok(0) => return Err(ConnectionError::ClosedMidFragment),
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(ConnectionError::StalledMidFragment);
            }
            Err(e) => return Err(e.into()),
        };
        store(&buf[..n], &mut hasher)?;
        left -= n as u64;
    }
    file.flush().map_err(file_error)?;
    Ok(*hasher.finalize().as_bytes() == ctx.hashes[frag])
}

/// Fetches the whole set once per ratio (and adaptively) and `repeat` times each, into a
/// scratch directory under `spec.out` that is emptied before every run; a run that fails
/// fails the sweep.
pub fn sweep(
    spec: &FetchSpec,
    ratios: &[Vec<u32>],
    repeat: usize,
    progress: &dyn Progress,
) -> Result<SweepResult, FetchError> {
    let scratch = spec.out.join(".sweep-run");
    // Removed however the sweep ends: a failed run must not leave a copy of the set.
    struct Scratch<'a>(&'a Path);
    impl Drop for Scratch<'_> {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(self.0);
        }
    }
    let _cleanup = Scratch(&scratch);
    let mut rows = Vec::new();
    let mut file = None;
    let modes = ratios
        .iter()
        .map(|r| Mode::Ratio(r.clone()))
        .chain(std::iter::once(Mode::Adaptive));
    for mode in modes {
        let mut seconds = Vec::new();
        let mut name = String::new();
        for _ in 0..repeat.max(1) {
            let _ = fs::remove_dir_all(&scratch);
            let run = FetchSpec {
                mode: mode.clone(),
                out: scratch.clone(),
                ..spec.clone()
            };
            let r = fetch(&run, progress)?;
            seconds.push(r.seconds);
            name = r.mode.clone();
            file.get_or_insert(r.file);
        }
        let mean_seconds = seconds.iter().sum::<f64>() / seconds.len() as f64;
        rows.push(SweepRow {
            mode: name,
            seconds,
            mean_seconds,
        });
    }
    Ok(SweepResult {
        schema: SWEEP_SCHEMA.into(),
        file: file.ok_or_else(|| FetchError::NoServer("nothing ran".into()))?,
        servers: spec.servers.clone(),
        repeat: repeat.max(1),
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_incomplete_fetch_says_what_each_server_did() {
        let bad = ServerStats {
            address: "192.0.2.1:5201".into(),
            corrupt: 3,
            errors: vec!["f0007: failed verification".into()],
            ..ServerStats::default()
        };
        let gone = ServerStats {
            address: "192.0.2.2:5201".into(),
            failed: Some("connection refused".into()),
            ..ServerStats::default()
        };
        assert_eq!(
            why_incomplete(&[bad, gone]),
            "192.0.2.1:5201: sent 3 fragment(s) that failed verification \
             (last: f0007: failed verification); 192.0.2.2:5201: connection refused"
        );
        assert_eq!(why_incomplete(&[]), "no server delivered them");
    }

    /// Both ends of a fragment connection send without Nagle's delay: a reply is a
    /// header and a body, and a small body held back for the header's ACK waited for the
    /// client's delayed ACK on every fragment (10 000 fragments of 4 KiB took 105 s on
    /// loopback instead of 0.3 s).
    #[test]
    fn fragment_connections_are_nodelay_on_both_ends() {
        use crate::serve::FragmentService;
        use flowlab_engine::server::{ConnectionHandler, Greeting, NoLog};
        let dir = tempfile::tempdir().expect("tempdir");
        crate::manifest::make(8192, 2, dir.path()).expect("make");
        let service = FragmentService::open(dir.path(), 0, Duration::from_secs(2)).expect("open");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = std::sync::mpsc::channel();
        let server = std::thread::spawn(move || {
            let (conn, peer) = listener.accept().expect("accept");
            tx.send(conn.try_clone().expect("clone")).expect("send");
            let greeting = Greeting::new(Duration::from_secs(2), std::sync::Arc::new(NoLog));
            service.handle(conn, peer, greeting);
        });
        let (client, manifest) =
            connect(&addr.to_string(), Duration::from_secs(2), b"").expect("connect");
        assert_eq!(manifest.fragments.len(), 2);
        let served = rx.recv().expect("the server's socket");
        assert!(
            client.nodelay().expect("client option"),
            "the fetch's socket"
        );
        assert!(
            served.nodelay().expect("server option"),
            "the server's socket"
        );
        drop(client);
        server.join().expect("server thread");
    }

    #[test]
    fn server_addresses_get_the_default_port_when_they_have_none() {
        assert_eq!(with_port("example.net"), "example.net:5201");
        assert_eq!(with_port("example.net:6000"), "example.net:6000");
        assert_eq!(with_port("10.0.0.1"), "10.0.0.1:5201");
        assert_eq!(with_port("::1"), "[::1]:5201");
        assert_eq!(with_port("fe80::1:2"), "[fe80::1:2]:5201");
        assert_eq!(with_port("[::1]"), "[::1]:5201");
        assert_eq!(with_port("[::1]:6000"), "[::1]:6000");
    }
}
