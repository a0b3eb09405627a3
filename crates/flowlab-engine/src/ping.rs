//! `flowlab ping`: latency probes to a flowlab server's echo service, over UDP, over one
//! TCP connection (request/response, `--tcp`), or as TCP connection set-ups (`--connect`).
//!
//! UDP: one thread, one connected UDP socket: it sends each probe when it is due and,
//! until the next is due, reads replies. A probe's send time is the system clock read just
//! before `send(2)`; a reply's arrival time is the kernel's stamp (SO_TIMESTAMPNS) where
//! the kernel gives one, so the round trip does not include this thread's own wake-up
//! delay. The server stamps its own receive and send times (its kernel's arrival stamp,
//! then its clock just before it sends), and its time in between is subtracted.

use std::io::Write;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use flowlab_proto::probe::{self, HEADER_LEN, MAX_LEN, MAX_TCP_LEN, Reply, Request};
use flowlab_results::ping::{PingResult, PingStart, PingSummary, Probe, SCHEMA};

use crate::cpu;
use crate::credentials::ClientAuth;
use crate::reach::{self, ResolveError};
use crate::sock;

/// How probes travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PingMode {
    /// A datagram each (the default).
    Udp,
    /// A request and its response on one TCP connection, one at a time.
    Tcp,
    /// A new TCP connection each: the time connect(2) takes.
    Connect,
}

impl PingMode {
    /// The name in results (`start.protocol`).
    pub fn name(self) -> &'static str {
        match self {
            PingMode::Udp => "udp",
            PingMode::Tcp => "tcp",
            PingMode::Connect => "tcp-connect",
        }
    }

    /// The probe sizes this mode takes.
    pub fn sizes(self) -> std::ops::RangeInclusive<usize> {
        match self {
            PingMode::Udp => HEADER_LEN..=MAX_LEN,
            PingMode::Tcp => 1..=MAX_TCP_LEN,
            PingMode::Connect => 1..=1,
        }
    }
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct PingSpec {
    pub host: String,
    pub port: u16,
    pub mode: PingMode,
    /// Probes to send; `None`: until `duration`, the deadline or Ctrl-C.
    pub count: Option<u64>,
    /// Between probes; zero: back to back (the next when the last is answered or timed out).
    pub interval: Duration,
    /// Bytes per probe: a UDP payload ([`HEADER_LEN`] to [`MAX_LEN`]) or a TCP message
    /// (1 to [`MAX_TCP_LEN`]; from [`HEADER_LEN`] on it carries the server's times).
    pub size: usize,
    /// Send probes for this long.
    pub duration: Option<Duration>,
    /// End the run after this long, whatever is outstanding.
    pub deadline: Option<Duration>,
    /// How long a probe's reply is waited for after the last probe (and, back to back,
    /// before the next probe goes).
    pub timeout: Duration,
    /// The user says both clocks are synchronised: one-way delays are absolute.
    pub clocks_synced: bool,
    /// Sending ends when this is set (as at the end of `duration`); outstanding replies
    /// are still awaited. `flowlab test --latency` sets it when the load ends.
    pub until: Option<Arc<AtomicBool>>,
    /// TCP: how long to poll for each response before sleeping until it comes (zero:
    /// sleep at once). See [`sock::read_exact_stamped`].
    pub spin: Duration,
    /// `-4`/`-6`: only the server's addresses of this family.
    pub family: Option<flowlab_results::spec::IpFamily>,
    /// TCP probes to a server that authenticates (`--username`): a token on the first
    /// connection, the ticket it gives on the others.
    pub credentials: Option<flowlab_results::spec::Credentials>,
}

impl PingSpec {
    pub fn new(host: &str, port: u16) -> PingSpec {
        PingSpec {
            host: host.to_string(),
            port,
            mode: PingMode::Udp,
            count: None,
            interval: Duration::from_secs(1),
            size: 64,
            duration: None,
            deadline: None,
            timeout: Duration::from_secs(1),
            clocks_synced: false,
            until: None,
            spin: Duration::ZERO,
            family: None,
            credentials: None,
        }
    }
}

/// What a caller is told as replies come in.
pub trait PingObserver {
    /// The run starts; probes' times are since `epoch_ns` (ns since the Unix epoch).
    fn started(&self, _epoch_ns: u64) {}
    /// The first reply to a probe.
    fn reply(&self, _probe: &Probe, _from: SocketAddr, _size: usize) {}
}

/// Tells nobody.
#[derive(Debug)]
pub struct Quiet;
impl PingObserver for Quiet {}

/// Why a run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PingError {
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error("probe size {0} is outside what {1} probes take")]
    Size(usize, &'static str),
    #[error("cannot connect to {address}: {source}")]
    Connect {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("{address}: {message}")]
    Busy {
        address: SocketAddr,
        message: String,
    },
    #[error("{address}: not a flowlab server with TCP probes ({source})")]
    NotAnEchoServer {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("authentication: {0}")]
    Auth(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Runs probes until the count, the duration or the deadline is reached, or `stop` is
/// set (Ctrl-C); then, over UDP, waits up to `timeout` for outstanding replies (not
/// after `stop` or the deadline).
pub fn ping(
    spec: &PingSpec,
    stop: &AtomicBool,
    observer: &dyn PingObserver,
) -> Result<PingResult, PingError> {
    if !spec.mode.sizes().contains(&spec.size) {
        return Err(PingError::Size(spec.size, spec.mode.name()));
    }
    let address = reach::addresses(&spec.host, spec.port, spec.family)?[0];
    let run = match spec.mode {
        PingMode::Udp => ping_udp(spec, address, stop, observer)?,
        PingMode::Tcp | PingMode::Connect => ping_tcp(spec, address, stop, observer)?,
    };
    Ok(PingResult {
        schema: SCHEMA.to_string(),
        start: PingStart {
            host: spec.host.clone(),
            address: address.to_string(),
            protocol: spec.mode.name().into(),
            size: spec.size,
            interval_seconds: spec.interval.as_secs_f64(),
            timestamps: run.timestamps,
            clocks_synced: spec.clocks_synced,
            started_unix: run.epoch_ns as f64 / 1e9,
        },
        summary: PingSummary::of(&run.probes),
        interrupted: run.interrupted,
        probes: run.probes,
    })
}

/// What a run's loop produced.
struct Run {
    probes: Vec<Probe>,
    interrupted: bool,
    /// The client's clock at the run's start, ns since the Unix epoch.
    epoch_ns: u64,
    timestamps: String,
}

/// A probe just sent, not yet answered.
fn sent(seq: u64, sent_ns: u64) -> Probe {
    Probe {
        seq,
        sent_ns,
        received_ns: None,
        server_ns: None,
        forward_ns: None,
        backward_ns: None,
        duplicates: 0,
        reordered: false,
    }
}

/// Fills in a probe from its reply, received at `at_ns` (the client's clock).
fn answered(p: &mut Probe, reply: &Reply, at_ns: u64, epoch_ns: u64) {
    p.received_ns = Some(at_ns.saturating_sub(epoch_ns));
    p.server_ns = Some(reply.server_ns());
    p.forward_ns = Some(reply.server_rx_ns as i64 - reply.sent_ns as i64);
    p.backward_ns = Some(at_ns as i64 - reply.server_tx_ns as i64);
}

fn ping_udp(
    spec: &PingSpec,
    address: SocketAddr,
    stop: &AtomicBool,
    observer: &dyn PingObserver,
) -> Result<Run, PingError> {
    let local: SocketAddr = if address.is_ipv4() {
        ([0u8; 4], 0).into()
    } else {
        ([0u16; 8], 0).into()
    };
    let sock = UdpSocket::bind(local)?;
    sock.connect(address)?;
    let kernel_stamps = sock::enable_rx_timestamps(&sock);
    let session = reach::session();
    let epoch_ns = cpu::unix_now_ns();
    observer.started(epoch_ns);
    let start = Instant::now();
    let mut out = vec![0u8; spec.size];
    let mut buf = vec![0u8; MAX_LEN + 1];
    let mut probes: Vec<Probe> = Vec::new();
    let mut highest_answered = 0u64;
    let mut next_send = start;
    let mut last_send = start;
    let mut interrupted = false;
    loop {
        let now = Instant::now();
        if stop.load(Ordering::Acquire) || spec.deadline.is_some_and(|d| now - start >= d) {
            interrupted = !finished_sending(spec, &probes, now - start);
            break;
        }
        let done_sending = finished_sending(spec, &probes, now - start);
        let outstanding = probes.last().is_some_and(|p| p.received_ns.is_none());
        if !done_sending {
            let due = if spec.interval.is_zero() {
                !outstanding || now - last_send >= spec.timeout
            } else {
                now >= next_send
            };
            if due {
                let seq = probes.len() as u64 + 1;
                let sent_ns = cpu::unix_now_ns();
                Request {
                    session,
                    seq,
                    sent_ns,
                }
                .encode_into(&mut out);
                // A send that fails (no route for a moment) is a probe lost, as in ping.
                let _ = sock.send(&out);
                last_send = now;
                probes.push(sent(seq, sent_ns.saturating_sub(epoch_ns)));
                // Keep to the schedule, but never send a burst to catch up after a stall.
                next_send = (next_send + spec.interval).max(now);
                continue;
            }
        } else if probes.iter().all(|p| p.received_ns.is_some()) || now - last_send >= spec.timeout
        {
            // Every reply is in, or the last probe's wait is over.
            break;
        }
        // Read replies until the next thing is due.
        let until = if !done_sending && !spec.interval.is_zero() {
            next_send
        } else {
            last_send + spec.timeout
        };
        let mut wait = until.saturating_duration_since(now);
        if let Some(d) = spec.deadline {
            wait = wait.min((start + d).saturating_duration_since(now));
        }
        // Wake at least every 100 ms to see Ctrl-C.
        wait = wait.clamp(Duration::from_micros(1), Duration::from_millis(100));
        sock.set_read_timeout(Some(wait))?;
        let got = match sock::recv_stamped(&sock, &mut buf) {
            Ok(g) => g,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            // An ICMP port unreachable from an earlier probe: the server is not there
            // (yet); the probe is lost, the run goes on.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => continue,
            Err(e) => return Err(e.into()),
        };
        let Ok(reply) = Reply::decode(&buf[..got.len]) else {
            continue;
        };
        if reply.session != session || reply.seq == 0 || reply.seq > probes.len() as u64 {
            continue;
        }
        let p = &mut probes[(reply.seq - 1) as usize];
        if p.received_ns.is_some() {
            p.duplicates += 1;
            continue;
        }
        answered(p, &reply, got.at_ns, epoch_ns);
        p.reordered = reply.seq < highest_answered;
        highest_answered = highest_answered.max(reply.seq);
        observer.reply(p, address, got.len);
    }
    Ok(Run {
        probes,
        interrupted,
        epoch_ns,
        timestamps: if kernel_stamps {
            "send: system clock before send(2); receive: kernel (SO_TIMESTAMPNS)".into()
        } else {
            "send: system clock before send(2); receive: system clock after recvmsg(2)".into()
        },
    })
}

/// A TCP probe hello for messages of `size` bytes, with a credential when the run has
/// one.
fn tcp_hello(size: usize, auth: Option<&ClientAuth>) -> Result<Vec<u8>, PingError> {
    match auth {
        None => Ok(probe::tcp_hello(size as u32).to_vec()),
        Some(a) => probe::tcp_hello_with(size as u32, &a.credential().map_err(PingError::Auth)?)
            .map_err(|e| PingError::Auth(e.to_string())),
    }
}

/// Opens a TCP probe connection for messages of `size` bytes.
fn open_tcp(
    address: SocketAddr,
    size: usize,
    timeout: Duration,
    auth: Option<&ClientAuth>,
) -> Result<TcpStream, PingError> {
    let hello = tcp_hello(size, auth)?;
    let mut conn = TcpStream::connect_timeout(&address, timeout.max(Duration::from_secs(3)))
        .map_err(|source| PingError::Connect { address, source })?;
    let not_echo = |source| PingError::NotAnEchoServer { address, source };
    conn.set_nodelay(true).map_err(not_echo)?;
    conn.set_read_timeout(Some(timeout)).map_err(not_echo)?;
    sock::enable_rx_timestamps(&conn);
    conn.write_all(&hello).map_err(not_echo)?;
    match reach::read_admission(&mut conn, auth).map_err(not_echo)? {
        Ok(()) => Ok(conn),
        Err(refusal) => Err(PingError::Busy {
            address,
            message: refusal.to_string(),
        }),
    }
}

/// TCP probes: request/response on one connection (`Tcp`), or a connection set-up each
/// (`Connect`). One at a time, so nothing is reordered or duplicated; a request whose
/// response does not come within the timeout ends the run (the connection cannot be
/// trusted to line up again).
fn ping_tcp(
    spec: &PingSpec,
    address: SocketAddr,
    stop: &AtomicBool,
    observer: &dyn PingObserver,
) -> Result<Run, PingError> {
    let auth = spec.credentials.clone().map(ClientAuth::new);
    let auth = auth.as_ref();
    let mut conn = match spec.mode {
        PingMode::Tcp => Some(open_tcp(address, spec.size, spec.timeout, auth)?),
        _ => None,
    };
    let session = reach::session();
    let epoch_ns = cpu::unix_now_ns();
    observer.started(epoch_ns);
    let start = Instant::now();
    let mut message = vec![0u8; spec.size];
    let mut probes: Vec<Probe> = Vec::new();
    let mut next_send = start;
    let mut interrupted = false;
    let mut kernel_stamps = false;
    loop {
        let now = Instant::now();
        let done = finished_sending(spec, &probes, now - start);
        if done {
            break;
        }
        if stop.load(Ordering::Acquire) || spec.deadline.is_some_and(|d| now - start >= d) {
            interrupted = true;
            break;
        }
        if now < next_send {
            std::thread::sleep((next_send - now).min(Duration::from_millis(100)));
            continue;
        }
        let seq = probes.len() as u64 + 1;
        let sent_ns = cpu::unix_now_ns();
        let mut p = sent(seq, sent_ns.saturating_sub(epoch_ns));
        match conn.as_mut() {
            None => {
                // Connect, say hello (so the server does not log a failed handshake),
                // close; to a server that authenticates, with a credential, and its
                // admission read (for the ticket it gives) after the time is taken.
                if let Ok(mut c) = TcpStream::connect_timeout(&address, spec.timeout) {
                    let at = cpu::unix_now_ns();
                    p.received_ns = Some(at.saturating_sub(epoch_ns));
                    let _ = c.write_all(&tcp_hello(1, auth)?);
                    if auth.is_some() {
                        let _ = c.set_read_timeout(Some(spec.timeout));
                        // Refused credentials end the run; a busy echo does not matter to
                        // a probe that times the connection only.
                        if let Ok(Err(reach::Refusal::Denied(message))) =
                            reach::read_admission(&mut c, auth)
                        {
                            return Err(PingError::Busy { address, message });
                        }
                    }
                }
            }
            Some(c) => {
                if spec.size >= HEADER_LEN {
                    Request {
                        session,
                        seq,
                        sent_ns,
                    }
                    .encode_into(&mut message);
                } else {
                    message.fill(seq as u8);
                }
                let answer = c
                    .write_all(&message)
                    .and_then(|()| sock::read_exact_stamped(c, &mut message, spec.spin));
                let at = match &answer {
                    Ok(stamped) => {
                        kernel_stamps |= stamped.kernel;
                        stamped.at_ns
                    }
                    Err(_) => cpu::unix_now_ns(),
                };
                match answer {
                    Ok(_) if spec.size >= HEADER_LEN => match Reply::decode(&message) {
                        Ok(r) if r.session == session && r.seq == seq => {
                            answered(&mut p, &r, at, epoch_ns);
                        }
                        _ => interrupted = true,
                    },
                    Ok(_) => p.received_ns = Some(at.saturating_sub(epoch_ns)),
                    Err(_) => interrupted = true,
                }
            }
        }
        if p.received_ns.is_some() {
            observer.reply(&p, address, spec.size);
        }
        probes.push(p);
        if interrupted {
            // No response in time (or a wrong one): this connection is done.
            break;
        }
        next_send = (next_send + spec.interval).max(now);
    }
    Ok(Run {
        probes,
        interrupted,
        epoch_ns,
        timestamps: match spec.mode {
            PingMode::Connect => "system clock before connect(2) and after it returned".into(),
            _ => format!(
                "send: system clock before write(2); receive: {}{}",
                if kernel_stamps {
                    "kernel (SO_TIMESTAMPNS) of the response's last segment"
                } else {
                    "system clock after the response's last byte was read"
                },
                if spec.spin.is_zero() {
                    String::new()
                } else {
                    format!(
                        "; each response polled for up to {} µs before sleeping",
                        spec.spin.as_micros()
                    )
                }
            ),
        },
    })
}

/// Whether every probe asked for has been sent.
fn finished_sending(spec: &PingSpec, probes: &[Probe], elapsed: Duration) -> bool {
    spec.count.is_some_and(|c| probes.len() as u64 >= c)
        || spec.duration.is_some_and(|d| elapsed >= d)
        || spec
            .until
            .as_ref()
            .is_some_and(|u| u.load(Ordering::Acquire))
}

/// A UDP echo on this thread's loopback (in its network namespace), answering probes as
/// a server's echo service does: stamped with the kernel's arrival time and its own
/// send time, so a probe's round trip to it, the responder's own wake-up subtracted, is
/// what the local stack and its softirq processing alone add. `flowlab net check`
/// probes it beside every path to tell a busy host's delay from a queue's. Stops when
/// dropped.
#[derive(Debug)]
pub struct LocalEcho {
    address: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LocalEcho {
    /// Binds 127.0.0.1 on a free port (in the calling thread's namespace) and answers
    /// from a thread of its own.
    pub fn start() -> std::io::Result<LocalEcho> {
        let sock = UdpSocket::bind(("127.0.0.1", 0))?;
        let address = sock.local_addr()?;
        sock::enable_rx_timestamps(&sock);
        sock.set_read_timeout(Some(Duration::from_millis(50)))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; MAX_LEN + 1];
            while !stopped.load(Ordering::Acquire) {
                let Ok(got) = sock::recv_stamped(&sock, &mut buf) else {
                    continue;
                };
                let (Some(from), datagram) = (got.from, &mut buf[..got.len]) else {
                    continue;
                };
                if probe::is_request(datagram) {
                    probe::answer_in_place(datagram, got.at_ns, cpu::unix_now_ns());
                    let _ = sock.send_to(datagram, from);
                }
            }
        });
        Ok(LocalEcho {
            address,
            stop,
            thread: Some(thread),
        })
    }

    /// Where it answers.
    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

impl Drop for LocalEcho {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The local echo answers every probe of a run, with its own times in the reply, and
    /// nothing else: a datagram that is not a probe request gets no answer.
    #[test]
    fn the_local_echo_answers_probes_and_only_probes() {
        let echo = LocalEcho::start().expect("a loopback echo");
        let port = echo.address().port();
        let mut spec = PingSpec::new("127.0.0.1", port);
        spec.count = Some(20);
        spec.interval = Duration::ZERO;
        let r = ping(&spec, &AtomicBool::new(false), &Quiet).expect("a run");
        assert_eq!(r.summary.received, 20, "{:?}", r.summary);
        assert!(r.probes.iter().all(|p| p.server_ns.is_some()));
        let other = UdpSocket::bind(("127.0.0.1", 0)).expect("a socket");
        other
            .set_read_timeout(Some(Duration::from_millis(200)))
            .expect("a timeout");
        other
            .send_to(&[0u8; 64], echo.address())
            .expect("a datagram");
        assert!(other.recv(&mut [0u8; 100]).is_err(), "a non-probe answered");
    }
}
