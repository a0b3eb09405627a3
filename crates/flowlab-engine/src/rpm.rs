//! `flowlab rpm`: responsiveness under working conditions, the method of
//! [`flowlab_results::rpm::DRAFT`] with flowlab's protocol in place of HTTP/2.
//!
//! Per direction: load-generating TCP connections to the server's load service (one to
//! start with, one more each interval until goodput is saturated, at most MNP), and from
//! the first byte of load, two probers: *foreign* probes on new connections to the
//! server's TCP echo (the set-up time, then a 1-byte request/response), and *self* probes
//! on a load connection picked at random (a probe frame queued behind the load's data,
//! its reply timed). Each prober has one probe outstanding and starts at most MPS a
//! second. Every interval the report crate's [`Ramp`] judges goodput and responsiveness;
//! the direction ends when responsiveness is stable or at its longest time.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use flowlab_proto::load::{self, Direction, Event, FrameReader};
use flowlab_proto::probe::{self, HEADER_LEN, Reply, Request};
use flowlab_results::rpm::{
    self, DirectionResult, Idle, Params, Ramp, RpmResult, RpmStart, Sample, Samples,
};

use crate::cpu;
use crate::credentials::ClientAuth;
use crate::reach::{self, ResolveError};
use crate::sock;

pub use flowlab_results::rpm::Load;

/// The load's connections, each way.
fn directions(l: Load) -> &'static [Direction] {
    match l {
        Load::Download => &[Direction::Download],
        Load::Upload => &[Direction::Upload],
        Load::Both => &[Direction::Download, Direction::Upload],
    }
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct RpmSpec {
    pub host: String,
    pub port: u16,
    pub params: Params,
    /// The loads, one after the other.
    pub loads: Vec<Load>,
    /// Both ends' congestion control on the load connections (`None`: each end's default).
    pub congestion: Option<String>,
    /// Foreign probes before any load.
    pub idle_probes: usize,
    /// `-4`/`-6`: only the server's addresses of this family.
    pub family: Option<flowlab_results::spec::IpFamily>,
    /// For a server that authenticates (`--username`): a token on the first
    /// connection, the ticket it gives on the others.
    pub credentials: Option<flowlab_results::spec::Credentials>,
}

impl RpmSpec {
    pub fn new(host: &str, port: u16) -> RpmSpec {
        RpmSpec {
            host: host.into(),
            port,
            params: Params::default(),
            loads: vec![Load::Download, Load::Upload],
            congestion: None,
            idle_probes: rpm::IDLE_PROBES,
            family: None,
            credentials: None,
        }
    }
}

/// What a caller is told as the run goes.
pub trait RpmObserver {
    fn interval(&self, _load: &str, _interval: &rpm::Interval) {}
    fn done(&self, _direction: &DirectionResult) {}
}

/// Tells nobody.
#[derive(Debug)]
pub struct Quiet;
impl RpmObserver for Quiet {}

/// Why a run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum RpmError {
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error("cannot connect to {address}: {source}")]
    Connect {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("{address} refused the load: {message}")]
    Refused {
        address: SocketAddr,
        message: String,
    },
    #[error(
        "{address}: not a flowlab server with responsiveness probes (no TCP echo or load \
         service: a stock iperf3, or an older flowlab): {source}"
    )]
    NotFlowlab {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("starting a thread: {0}")]
    Thread(std::io::Error),
    #[error("authentication: {0}")]
    Auth(String),
}

/// How long a probe's reply is waited for before the prober gives up on it (it is then
/// not counted: the draft counts only probes that completed).
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// Bytes of the data frames an upload connection writes.
const FRAME: usize = 16 * 1024;

/// Runs the spec's loads one after the other, after the idle probes.
pub fn run(
    spec: &RpmSpec,
    stop: &AtomicBool,
    observer: &dyn RpmObserver,
) -> Result<RpmResult, RpmError> {
    let address = reach::addresses(&spec.host, spec.port, spec.family)?[0];
    let started_unix = cpu::unix_now_ns() as f64 / 1e9;
    let auth = spec
        .credentials
        .clone()
        .map(|c| Arc::new(ClientAuth::new(c)));
    // Idle: foreign probes one after the other, with nothing else running.
    let epoch = Instant::now();
    let mut idle = Samples::default();
    for _ in 0..spec.idle_probes {
        if stop.load(Ordering::Acquire) {
            break;
        }
        let (tcp, request) = foreign_probe(address, auth.as_deref()).map_err(|e| match e {
            ForeignError::Connect(source) => RpmError::Connect { address, source },
            ForeignError::Busy(message) => RpmError::Refused { address, message },
            ForeignError::Io(source) => RpmError::NotFlowlab { address, source },
            ForeignError::Auth(why) => RpmError::Auth(why),
        })?;
        let t = epoch.elapsed().as_secs_f64();
        idle.tcp_foreign.push(Sample { t, ms: tcp });
        idle.request_foreign.push(Sample { t, ms: request });
    }
    let mut directions = Vec::new();
    let mut error = None;
    let mut congestion = spec.congestion.clone();
    for &l in &spec.loads {
        if stop.load(Ordering::Acquire) {
            break;
        }
        match run_load(spec, address, l, stop, observer, auth.as_ref()) {
            Ok((d, used)) => {
                congestion = congestion.or(used);
                observer.done(&d);
                directions.push(d);
            }
            // What the earlier loads measured is kept; the run says why it stopped.
            Err(e) if !directions.is_empty() => {
                error = Some(format!("{}: {e}", l.name()));
                break;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(RpmResult {
        schema: rpm::SCHEMA.into(),
        start: RpmStart {
            host: spec.host.clone(),
            address: address.to_string(),
            draft: rpm::DRAFT.into(),
            params: spec.params,
            congestion,
            probes: "foreign: TCP connect(2) to the server's port [tcp_f], then a 1-byte \
                     request/response on that connection through the TCP echo [http_f]; \
                     self: a 48-byte probe frame on a load-generating connection, behind \
                     its data, and the reply [http_l]; no TLS [tls_f]"
                .into(),
            started_unix,
        },
        idle: Idle::of(&idle, spec.params.trimmed_share),
        interrupted: stop.load(Ordering::Acquire),
        error,
        directions,
    })
}

enum ForeignError {
    Connect(std::io::Error),
    Busy(String),
    Io(std::io::Error),
    Auth(String),
}

/// A TCP echo hello for 1-byte messages, with a credential when the run has one.
fn echo_hello(auth: Option<&ClientAuth>) -> Result<Vec<u8>, String> {
    match auth {
        None => Ok(probe::tcp_hello(1).to_vec()),
        Some(a) => probe::tcp_hello_with(1, &a.credential()?).map_err(|e| e.to_string()),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One foreign probe: connect(2) timed, the echo's hello, then a 1-byte request and its
/// response timed. Returns (set-up, request) in ms.
fn foreign_probe(
    address: SocketAddr,
    auth: Option<&ClientAuth>,
) -> Result<(f64, f64), ForeignError> {
    let hello = echo_hello(auth).map_err(ForeignError::Auth)?;
    let t0 = Instant::now();
    let mut c =
        TcpStream::connect_timeout(&address, PROBE_TIMEOUT).map_err(ForeignError::Connect)?;
    let tcp = ms(t0.elapsed());
    let io = ForeignError::Io;
    c.set_nodelay(true).map_err(io)?;
    c.set_read_timeout(Some(PROBE_TIMEOUT)).map_err(io)?;
    c.write_all(&hello).map_err(io)?;
    reach::read_admission(&mut c, auth)
        .map_err(io)?
        .map_err(|r| ForeignError::Busy(r.to_string()))?;
    let t1 = Instant::now();
    c.write_all(&[1]).map_err(io)?;
    let mut b = [0u8; 1];
    c.read_exact(&mut b).map_err(io)?;
    Ok((tcp, ms(t1.elapsed())))
}

/// What a direction's threads share.
struct Shared {
    epoch: Instant,
    /// Set when the direction ends.
    done: AtomicBool,
    /// Data bytes the client read (download connections).
    downloaded: AtomicU64,
    samples: Mutex<Samples>,
    /// The self prober's probe session.
    session: u64,
    /// Replies to self probes, by sequence number.
    answered: Mutex<mpsc::Sender<u64>>,
}

impl Shared {
    fn t(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    fn push(&self, f: impl FnOnce(&mut Samples)) {
        f(&mut self.samples.lock().unwrap_or_else(PoisonError::into_inner));
    }
}

/// A load-generating connection.
struct LoadConn {
    direction: Direction,
    /// For TCP_INFO (upload's goodput) and shutting it down.
    sock: TcpStream,
    /// Upload: probes for the writer to send between data frames (on a download
    /// connection the self prober writes them itself: nothing else writes there).
    probes: Mutex<Vec<[u8; HEADER_LEN]>>,
    /// Upload: bytes acknowledged at the last interval's end.
    acked: AtomicU64,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// Opens one load connection and starts its threads.
fn open_load(
    address: SocketAddr,
    direction: Direction,
    congestion: Option<&str>,
    shared: &Arc<Shared>,
    auth: Option<&ClientAuth>,
) -> Result<Arc<LoadConn>, RpmError> {
    let credential = auth
        .map(ClientAuth::credential)
        .transpose()
        .map_err(RpmError::Auth)?;
    let mut c = TcpStream::connect_timeout(&address, PROBE_TIMEOUT)
        .map_err(|source| RpmError::Connect { address, source })?;
    let not_flowlab = |source| RpmError::NotFlowlab { address, source };
    if let Some(cc) = congestion {
        sock::set_congestion(&c, cc).map_err(|e| RpmError::Refused {
            address,
            message: format!("congestion control {cc} on this end: {e}"),
        })?;
    }
    c.set_nodelay(true).map_err(not_flowlab)?;
    c.set_read_timeout(Some(PROBE_TIMEOUT))
        .map_err(not_flowlab)?;
    let hello =
        load::hello(direction, congestion, credential.as_ref()).map_err(|e| RpmError::Refused {
            address,
            message: format!("the load hello: {e}"),
        })?;
    c.write_all(&hello).map_err(not_flowlab)?;
    reach::read_admission(&mut c, auth)
        .map_err(not_flowlab)?
        .map_err(|r| RpmError::Refused {
            address,
            message: r.to_string(),
        })?;
    let _ = c.set_read_timeout(Some(Duration::from_millis(200)));
    let conn = Arc::new(LoadConn {
        direction,
        sock: c.try_clone().map_err(not_flowlab)?,
        probes: Mutex::new(Vec::new()),
        acked: AtomicU64::new(0),
        threads: Mutex::new(Vec::new()),
    });
    let reader = {
        let (conn, shared) = (Arc::clone(&conn), Arc::clone(shared));
        let stream = c.try_clone().map_err(not_flowlab)?;
        spawn("flowlab-rpm-rx", move || read_load(stream, &conn, &shared))?
    };
    let mut threads = vec![reader];
    if direction == Direction::Upload {
        let (conn, shared) = (Arc::clone(&conn), Arc::clone(shared));
        threads.push(spawn("flowlab-rpm-tx", move || {
            write_upload(c, &conn, &shared)
        })?);
    }
    conn.threads
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .extend(threads);
    Ok(conn)
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>, RpmError> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map_err(RpmError::Thread)
}

/// Reads a load connection: counts downloaded data, times the replies to self probes.
fn read_load(mut s: TcpStream, conn: &LoadConn, shared: &Shared) {
    let mut frames = FrameReader::default();
    let mut buf = vec![0u8; 256 * 1024];
    while !shared.done.load(Ordering::Acquire) {
        let n = match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if crate::stream::is_timeout(&e) => continue,
            Err(_) => break,
        };
        let at_ns = cpu::unix_now_ns();
        let mut data = 0usize;
        let pushed = frames.push(&buf[..n], &mut |e| match e {
            Event::Data(n) => data += n,
            Event::Probe(p) => self_reply(&p, at_ns, shared),
        });
        if conn.direction == Direction::Download {
            shared.downloaded.fetch_add(data as u64, Ordering::Relaxed);
        }
        if pushed.is_err() {
            break;
        }
    }
}

/// A self probe's reply: its round trip, less the server's time.
fn self_reply(p: &[u8; HEADER_LEN], at_ns: u64, shared: &Shared) {
    let Ok(r) = Reply::decode(p) else { return };
    if r.session != shared.session {
        return;
    }
    let rtt_ns = at_ns
        .saturating_sub(r.sent_ns)
        .saturating_sub(r.server_ns());
    // The probe's start on the direction's clock: now less its round trip.
    let t = shared.t() - at_ns.saturating_sub(r.sent_ns) as f64 / 1e9;
    shared.push(|s| {
        s.request_loaded.push(Sample {
            t,
            ms: rtt_ns as f64 / 1e6,
        })
    });
    let _ = shared
        .answered
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .send(r.seq);
}

/// Writes an upload connection: data frames back to back, self probes between them as
/// they come (each waits for the frame being written, as an HTTP/2 request would).
fn write_upload(mut s: TcpStream, conn: &LoadConn, shared: &Shared) {
    let mut frame = vec![0u8; load::FRAME_HEAD + FRAME];
    frame[..load::FRAME_HEAD].copy_from_slice(&load::data_head(FRAME as u32));
    let _ = s.set_write_timeout(Some(Duration::from_millis(200)));
    let mut frames = 0u64;
    while !shared.done.load(Ordering::Acquire) {
        // The not-sent queue follows the delivery rate (every 64 frames, and at once).
        if frames % 64 == 0 {
            sock::pace_notsent(&s);
        }
        frames += 1;
        let due: Vec<_> =
            std::mem::take(&mut *conn.probes.lock().unwrap_or_else(PoisonError::into_inner));
        for p in due {
            if s.write_all(&load::probe_frame(&p)).is_err() {
                return;
            }
        }
        match s.write(&frame) {
            // A partial frame is finished before anything else goes.
            Ok(n) if n < frame.len() => {
                if write_rest(&mut s, &frame[n..], shared).is_err() {
                    return;
                }
            }
            Ok(_) => {}
            Err(e) if crate::stream::is_timeout(&e) => {}
            Err(_) => return,
        }
    }
}

/// Writes the rest of a frame, through write timeouts, until the direction ends.
fn write_rest(s: &mut TcpStream, mut rest: &[u8], shared: &Shared) -> std::io::Result<()> {
    while !rest.is_empty() {
        if shared.done.load(Ordering::Acquire) {
            return Err(std::io::ErrorKind::Interrupted.into());
        }
        match s.write(rest) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => rest = &rest[n..],
            Err(e) if crate::stream::is_timeout(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Runs one load until responsiveness is stable, its longest time, or Ctrl-C; returns
/// its result and the congestion control its connections used.
fn run_load(
    spec: &RpmSpec,
    address: SocketAddr,
    l: Load,
    stop: &AtomicBool,
    observer: &dyn RpmObserver,
    auth: Option<&Arc<ClientAuth>>,
) -> Result<(DirectionResult, Option<String>), RpmError> {
    let p = spec.params;
    let (answered_tx, answered_rx) = mpsc::channel();
    let shared = Arc::new(Shared {
        epoch: Instant::now(),
        done: AtomicBool::new(false),
        downloaded: AtomicU64::new(0),
        samples: Mutex::new(Samples::default()),
        session: reach::session(),
        answered: Mutex::new(answered_tx),
    });
    let conns: Arc<Mutex<Vec<Arc<LoadConn>>>> = Arc::default();
    let cc = spec.congestion.as_deref();
    let open = |n: usize| -> Result<(), RpmError> {
        for _ in 0..n {
            for &d in directions(l) {
                let c = open_load(address, d, cc, &shared, auth.map(|a| &**a))?;
                conns.lock().unwrap_or_else(PoisonError::into_inner).push(c);
            }
        }
        Ok(())
    };
    let outcome = (|| {
        open(p.initial_connections)?;
        let gap = Duration::from_secs_f64(1.0 / f64::from(p.max_probes_per_second.max(1)));
        let foreign = {
            let shared = Arc::clone(&shared);
            let auth = auth.cloned();
            spawn("flowlab-rpm-foreign", move || {
                while !shared.done.load(Ordering::Acquire) {
                    let start = Instant::now();
                    let t = shared.t();
                    if let Ok((tcp, request)) = foreign_probe(address, auth.as_deref()) {
                        shared.push(|s| {
                            s.tcp_foreign.push(Sample { t, ms: tcp });
                            s.request_foreign.push(Sample { t, ms: request });
                        });
                    }
                    std::thread::sleep(gap.saturating_sub(start.elapsed()));
                }
            })?
        };
        let selfp = {
            let (shared, conns) = (Arc::clone(&shared), Arc::clone(&conns));
            spawn("flowlab-rpm-self", move || {
                self_prober(&shared, &conns, &answered_rx, gap)
            })?
        };
        let mut ramp = Ramp::new(p);
        let id = Duration::from_secs_f64(p.interval_seconds);
        let mut last = 0u64;
        let mut k = 0u32;
        let used = conns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .first()
            .and_then(|c| sock::congestion(&c.sock));
        // Connections are added on a thread of their own: opening one can take a second
        // (a SYN lost in the full queue waits for its retransmission), and the intervals
        // must be counted on time, each over its own `id` seconds.
        let (add_tx, add_rx) = mpsc::channel::<usize>();
        let (failed_tx, failed_rx) = mpsc::channel::<String>();
        let adding = AtomicBool::new(false);
        std::thread::scope(|scope| -> Result<_, RpmError> {
            let adding = &adding;
            let open = &open;
            std::thread::Builder::new()
                .name("flowlab-rpm-open".into())
                .spawn_scoped(scope, move || {
                    for n in add_rx {
                        if let Err(e) = open(n) {
                            let _ = failed_tx.send(e.to_string());
                        }
                        adding.store(false, Ordering::Release);
                    }
                })
                .map_err(RpmError::Thread)?;
            loop {
                k += 1;
                let due = shared.epoch + id * k;
                while Instant::now() < due {
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    std::thread::sleep(
                        due.saturating_duration_since(Instant::now())
                            .min(Duration::from_millis(100)),
                    );
                }
                if stop.load(Ordering::Acquire) {
                    break;
                }
                let open_now = conns.lock().unwrap_or_else(PoisonError::into_inner).clone();
                // Download: bytes read; upload: bytes the server acknowledged.
                let downloaded = shared.downloaded.load(Ordering::Relaxed);
                let bytes = downloaded.saturating_sub(last)
                    + open_now.iter().map(|c| uploaded(c)).sum::<u64>();
                last = downloaded;
                let per_direction = open_now.len() / directions(l).len();
                let samples = shared
                    .samples
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone();
                let end = (id * k).as_secs_f64();
                ramp.interval(end, bytes, per_direction, &samples);
                if let Some(iv) = ramp.intervals.last() {
                    observer.interval(l.name(), iv);
                }
                if ramp.done() || end >= p.max_seconds {
                    break;
                }
                // A connection the server will not add (busy, gone) ends the ramp, not the
                // load: what is open goes on being measured, and the result says why.
                if let Ok(why) = failed_rx.try_recv() {
                    ramp.stop_adding(why);
                }
                // One addition at a time: one still opening is waited for, not doubled.
                let n = ramp.to_add(per_direction);
                if n > 0 && !adding.swap(true, Ordering::AcqRel) && add_tx.send(n).is_err() {
                    adding.store(false, Ordering::Release);
                }
            }
            shared.done.store(true, Ordering::Release);
            // The opener ends with its channel (after an opening under way).
            drop(add_tx);
            let _ = foreign.join();
            let _ = selfp.join();
            let end = shared.t().min((id * k).as_secs_f64());
            let samples = shared
                .samples
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            Ok((ramp.finish(l.name(), samples, end), used))
        })
    })();
    shared.done.store(true, Ordering::Release);
    let all = std::mem::take(&mut *conns.lock().unwrap_or_else(PoisonError::into_inner));
    for c in &all {
        let _ = c.sock.shutdown(std::net::Shutdown::Both);
    }
    for c in all {
        let threads =
            std::mem::take(&mut *c.threads.lock().unwrap_or_else(PoisonError::into_inner));
        for t in threads {
            let _ = t.join();
        }
    }
    outcome
}

/// Bytes an upload connection's peer acknowledged since the last call (0 for a download
/// connection).
fn uploaded(c: &LoadConn) -> u64 {
    if c.direction != Direction::Upload {
        return 0;
    }
    let acked = sock::trace_sample(&c.sock, 0)
        .and_then(|s| s.bytes_acked)
        .unwrap_or(0);
    let before = c.acked.swap(acked, Ordering::Relaxed);
    acked.saturating_sub(before)
}

/// Self probes: one outstanding at a time, on a load connection picked at random, at
/// most one per `gap`.
fn self_prober(
    shared: &Shared,
    conns: &Mutex<Vec<Arc<LoadConn>>>,
    answered: &mpsc::Receiver<u64>,
    gap: Duration,
) {
    let mut seq = 0u64;
    let mut pick = reach::session();
    while !shared.done.load(Ordering::Acquire) {
        let start = Instant::now();
        let target = {
            let all = conns.lock().unwrap_or_else(PoisonError::into_inner);
            if all.is_empty() {
                None
            } else {
                // xorshift: a uniform pick, no crate needed for it.
                pick ^= pick << 13;
                pick ^= pick >> 7;
                pick ^= pick << 17;
                Some(Arc::clone(&all[(pick % all.len() as u64) as usize]))
            }
        };
        if let Some(c) = target {
            seq += 1;
            let mut p = [0u8; HEADER_LEN];
            Request {
                session: shared.session,
                seq,
                sent_ns: cpu::unix_now_ns(),
            }
            .encode_into(&mut p);
            let sent = match c.direction {
                Direction::Upload => {
                    c.probes
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(p);
                    true
                }
                // The upstream of a download is idle: the request goes at once.
                Direction::Download => (&c.sock).write_all(&load::probe_frame(&p)).is_ok(),
            };
            // Its reply, or give up on it (a stalled connection).
            let deadline = Instant::now() + if sent { PROBE_TIMEOUT } else { Duration::ZERO };
            while let Ok(got) =
                answered.recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                if got >= seq || shared.done.load(Ordering::Acquire) {
                    break;
                }
            }
        }
        std::thread::sleep(gap.saturating_sub(start.elapsed()));
    }
}
