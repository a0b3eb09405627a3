//! The server's load-generating connections (`flowlab rpm`): a connection that opens with
//! [`load::MAGIC`] gets data frames sent to it as fast as TCP takes them (download) or has
//! its data frames read and dropped (upload); probe frames on it are answered with the
//! server's times, behind whatever data the server has already written. A server that
//! authenticates admits only a connection whose hello carries a valid credential.

use crate::cpu;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use flowlab_proto::credential::ticket_reply;
use flowlab_proto::fragment::Admission;
use flowlab_proto::load::{self, Direction, Event, FrameReader, HELLO_LEN};
use flowlab_proto::probe::{self, HEADER_LEN};
use flowlab_results::server::RefusalKind;

use super::auth::{ServerAuth, Unadmitted, admit, ticket_due};
use super::{Greeting, Places};
use crate::{control, sock};

/// Bytes of a data frame's payload: HTTP/2's default largest frame, so a probe's reply
/// waits behind at most one frame being written, as on an HTTP/2 connection.
const FRAME: usize = 16 * 1024;
/// The longest a load connection lasts when the server sets no `--max-duration`.
pub const MAX_LIFETIME: Duration = Duration::from_secs(60);

/// Load-generating connections served at once, in all and from one source (a run of
/// `flowlab rpm` in both directions at once opens up to 32).
pub(super) fn places() -> Places {
    Places::new(
        64,
        32,
        "load-generating connections",
        [
            "the server's limit of 64",
            "the server's limit of 32 per address",
        ],
    )
}

/// What the server's load service allows.
pub(super) struct Service<'a> {
    pub places: &'a Places,
    /// The server's authentication, if it authenticates.
    pub auth: Option<&'a ServerAuth>,
    /// Why every load connection is refused, if they are.
    pub refusal: Option<&'a str>,
    /// The longest a connection lasts.
    pub lifetime: Duration,
    /// How long a stalled connection is waited for.
    pub idle: Duration,
}

/// Serves one load connection until the client closes it, stops reading, or its
/// lifetime is over.
pub(super) fn serve(
    mut conn: TcpStream,
    peer: SocketAddr,
    mut greeting: Greeting,
    service: &Service,
) {
    let mut hello = [0u8; HELLO_LEN];
    let mut name = [0u8; load::MAX_CONGESTION_LEN];
    let hello = control::read_exact_by(&mut conn, &mut hello, greeting.deadline)
        .map_err(|e| e.to_string())
        .and_then(|()| load::hello_head(&hello).map_err(|e| e.to_string()))
        .and_then(|h| {
            let len = h.name_len;
            control::read_exact_by(&mut conn, &mut name[..len], greeting.deadline)
                .map_err(|e| e.to_string())?;
            load::check_congestion(&name[..len]).map_err(|e| e.to_string())?;
            Ok((h, String::from_utf8_lossy(&name[..len]).into_owned()))
        });
    let (head, congestion) = match hello {
        Ok(h) => h,
        Err(e) => return greeting.refuse(peer, RefusalKind::Handshake, format!("load hello: {e}")),
    };
    let (direction, follows) = (head.direction, head.credential);
    // Refused whoever asks: said before a credential costs a decryption.
    if let Some(why) = service.refusal {
        return greeting.turn_away(&mut conn, peer, why.to_string());
    }
    let token_accepted = match admit(&mut conn, greeting.deadline, follows, service.auth, peer) {
        Ok(accepted) => accepted,
        Err(Unadmitted::Unreadable(e)) => {
            return greeting.refuse(
                peer,
                RefusalKind::Credentials,
                format!("load credential: {e}"),
            );
        }
        Err(Unadmitted::Refused(why)) => {
            return greeting.deny(&mut conn, peer, format!("load connection: {why}"));
        }
    };
    if !congestion.is_empty() {
        if let Err(e) = sock::set_congestion(&conn, &congestion) {
            let why = format!("congestion control {congestion}: {e}");
            return greeting.turn_away(&mut conn, peer, why);
        }
    }
    let _place = match service.places.take(peer.ip()) {
        Ok(p) => p,
        Err(why) => return greeting.turn_away(&mut conn, peer, why),
    };
    greeting.done();
    let ticket = ticket_due(token_accepted, service.auth, peer);
    let _ = conn.set_nodelay(true);
    let _ = conn.set_write_timeout(Some(service.idle));
    if conn.write_all(&Admission::Welcome.encode()).is_err() {
        return;
    }
    if follows && conn.write_all(&ticket_reply(ticket.as_ref())).is_err() {
        return;
    }
    let end = Instant::now() + service.lifetime;
    match direction {
        Direction::Download => download(conn, end),
        Direction::Upload => upload(conn, end, service.idle),
    }
}

/// The probe's reply frame, its times filled in: received at `rx_ns`, sent now.
fn reply(mut p: [u8; HEADER_LEN], rx_ns: u64) -> [u8; load::FRAME_HEAD + HEADER_LEN] {
    probe::answer_in_place(&mut p, rx_ns, cpu::unix_now_ns());
    load::probe_frame(&p)
}

/// A probe read on a download connection and the time it came, waiting to be answered.
type Pending = ([u8; HEADER_LEN], u64);

/// Sends data frames until the end; probes read on another thread are answered between
/// frames.
fn download(conn: TcpStream, end: Instant) {
    let Ok(mut reader) = conn.try_clone() else {
        return;
    };
    let pending: Arc<Mutex<Vec<Pending>>> = Arc::default();
    let closed = Arc::new(AtomicBool::new(false));
    let reading = {
        let (pending, closed) = (Arc::clone(&pending), Arc::clone(&closed));
        std::thread::Builder::new()
            .name("flowlab-load-rx".into())
            .spawn(move || {
                // Wake often enough to see the connection end; a quiet client is normal.
                let _ = reader.set_read_timeout(Some(Duration::from_millis(200)));
                let mut frames = FrameReader::default();
                let mut buf = [0u8; 4096];
                while !closed.load(Ordering::Acquire) {
                    let n = match reader.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => n,
                        Err(e) if crate::stream::is_timeout(&e) => continue,
                        Err(_) => break,
                    };
                    let now = cpu::unix_now_ns();
                    let pushed = frames.push(&buf[..n], &mut |e| {
                        if let Event::Probe(p) = e {
                            if probe::has_request_header(&p) {
                                pending
                                    .lock()
                                    .unwrap_or_else(PoisonError::into_inner)
                                    .push((p, now));
                            }
                        }
                    });
                    if pushed.is_err() {
                        break;
                    }
                }
                closed.store(true, Ordering::Release);
            })
    };
    let mut conn = conn;
    let mut frame = vec![0u8; load::FRAME_HEAD + FRAME];
    frame[..load::FRAME_HEAD].copy_from_slice(&load::data_head(FRAME as u32));
    let mut frames = 0u64;
    while !closed.load(Ordering::Acquire) && Instant::now() < end {
        // The not-sent queue follows the delivery rate (every 64 frames, and at once).
        if frames % 64 == 0 {
            sock::pace_notsent(&conn);
        }
        frames += 1;
        let due: Vec<_> =
            std::mem::take(&mut *pending.lock().unwrap_or_else(PoisonError::into_inner));
        for (p, rx) in due {
            if conn.write_all(&reply(p, rx)).is_err() {
                break;
            }
        }
        if conn.write_all(&frame).is_err() {
            break;
        }
    }
    closed.store(true, Ordering::Release);
    let _ = conn.shutdown(std::net::Shutdown::Both);
    if let Ok(t) = reading {
        let _ = t.join();
    }
}

/// Reads and drops data frames until the end; answers probes at once.
fn upload(mut conn: TcpStream, end: Instant, idle: Duration) {
    let _ = conn.set_read_timeout(Some(
        idle.min(end.saturating_duration_since(Instant::now())),
    ));
    let mut frames = FrameReader::default();
    let mut buf = vec![0u8; 256 * 1024];
    let mut replies = Vec::new();
    while Instant::now() < end {
        let n = match conn.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let now = cpu::unix_now_ns();
        let pushed = frames.push(&buf[..n], &mut |e| {
            if let Event::Probe(p) = e {
                if probe::has_request_header(&p) {
                    replies.push(p);
                }
            }
        });
        if pushed.is_err() {
            break;
        }
        for p in replies.drain(..) {
            if conn.write_all(&reply(p, now)).is_err() {
                return;
            }
        }
    }
    let _ = conn.shutdown(std::net::Shutdown::Both);
}
