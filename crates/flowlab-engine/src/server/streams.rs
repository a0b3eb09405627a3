//! A test's data streams: collected as the client opens them, and set up as it asked.

use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use flowlab_proto::params::{Protocol, TestParams};
use flowlab_proto::state::{encode_server_error, error_code};
use flowlab_proto::udp::handshake_reply;
use flowlab_proto::{Cookie, State};
use socket2::SockRef;

use super::error::TestError;
use super::{Shared, UdpPending};
use crate::control;
use crate::sock;
use crate::stream::{Role, Transport};

/// The test's `n` data streams, in the client's order: TCP connections handed over by
/// their cookie (each an MPTCP connection when the client asked for `mptcp`, or the
/// test refused), or UDP sockets opened by their handshake, by [`streams_deadline`].
pub(super) fn collect_streams(
    ctrl: &mut TcpStream,
    peer: SocketAddr,
    cookie: Cookie,
    proto: Protocol,
    mptcp: bool,
    n: usize,
    shared: &Arc<Shared>,
) -> Result<Vec<Transport>, TestError> {
    let rtt = crate::sock::least_rtt(ctrl).unwrap_or_default();
    let deadline = Instant::now() + streams_deadline(shared.cfg.handshake_timeout, rtt, n);
    let mut out = Vec::with_capacity(n);
    match proto {
        Protocol::Tcp => {
            let (tx, rx) = mpsc::channel();
            shared
                .tcp_streams
                .lock()
                .map_err(|_| TestError::Streams("lock poisoned".into()))?
                .insert(cookie, tx);
            control::write_state(ctrl, State::CreateStreams)?;
            let mut conns = Vec::with_capacity(n);
            while conns.len() < n {
                conns.push(recv_until(&rx, deadline, n - conns.len())?);
            }
            if let Ok(mut m) = shared.tcp_streams.lock() {
                m.remove(&cookie);
            }
            conns.sort_by_key(|(order, _)| *order);
            if mptcp {
                // Never run as plain TCP what the client asked to be MPTCP.
                let plain = conns
                    .iter()
                    .position(|(_, s)| sock::mptcp_connection(s, 0).is_none_or(|c| c.fallback));
                if let Some(i) = plain {
                    ctrl.write_all(&[State::ServerError.to_byte()])?;
                    ctrl.write_all(&encode_server_error(
                        error_code::STREAM_ACCEPT,
                        libc::EPROTONOSUPPORT,
                    ))?;
                    return Err(TestError::Streams(format!(
                        "stream {} of an MPTCP test (-m) arrived as plain TCP (MPTCP fell \
                         back between client and server): the test is not run as plain TCP",
                        i + 1
                    )));
                }
            }
            out.extend(conns.into_iter().map(|(_, s)| Transport::Tcp(Arc::new(s))));
        }
        Protocol::Udp => {
            // One test at a time from an address creates UDP streams (they carry no
            // cookie); tests from other addresses go on meanwhile.
            let client = peer.ip().to_canonical();
            let (tx, rx) = mpsc::channel();
            let pending = UdpPending {
                tx,
                seen: Vec::new(),
            };
            take_udp_turn(shared, client, pending, deadline)?;
            let result = (|| -> Result<(), TestError> {
                control::write_state(ctrl, State::CreateStreams)?;
                let mut opened: Vec<UdpSocket> = Vec::with_capacity(n);
                while opened.len() < n {
                    // A stream socket, once connected, receives the client's repeated
                    // handshakes (the kernel prefers it to the listener): answer them
                    // while waiting, or a client that missed a reply waits forever.
                    let slice = deadline.min(Instant::now() + Duration::from_millis(20));
                    match recv_until(&rx, slice, n - opened.len()) {
                        Ok(s) => opened.push(s),
                        Err(e) if Instant::now() >= deadline => return Err(e),
                        Err(_) => opened.iter().for_each(answer_repeated_handshakes),
                    }
                }
                opened.iter().for_each(answer_repeated_handshakes);
                out.extend(opened.into_iter().map(|s| Transport::Udp(Arc::new(s))));
                Ok(())
            })();
            if let Ok(mut w) = shared.udp_waiting.lock() {
                w.remove(&client);
            }
            shared.udp_turn.notify_all();
            result?;
        }
    }
    Ok(out)
}

/// How long a client has to open `n` data streams once told to: the handshake deadline,
/// and a round trip of the control connection (`rtt`, its least) twice over for each
/// stream, so that a client far away opening many streams one after another (as
/// iperf3's does) is not cut off, while one that opens none holds its slot no longer
/// than a handshake. The round trip counts up to a second: a client can stretch its
/// own by holding back acknowledgements.
pub(super) fn streams_deadline(handshake: Duration, rtt: Duration, n: usize) -> Duration {
    let per_stream = rtt.min(Duration::from_secs(1)).saturating_mul(2);
    handshake.saturating_add(per_stream.saturating_mul(n as u32))
}

/// Registers `pending` as the test opening UDP streams from `client`, once no other test
/// from that address is (waiting for that, at most until `deadline`).
fn take_udp_turn(
    shared: &Shared,
    client: IpAddr,
    pending: UdpPending,
    deadline: Instant,
) -> Result<(), TestError> {
    let poisoned = |_| TestError::Streams("lock poisoned".into());
    let mut waiting = shared.udp_waiting.lock().map_err(poisoned)?;
    while waiting.contains_key(&client) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(TestError::Streams(
                "another test from this address was opening its UDP streams until the \
                 deadline"
                    .into(),
            ));
        }
        waiting = shared
            .udp_turn
            .wait_timeout(waiting, left)
            .map_err(|_| TestError::Streams("lock poisoned".into()))?
            .0;
    }
    waiting.insert(client, pending);
    Ok(())
}

/// Answers, without blocking, the handshakes waiting on a connected UDP stream socket.
fn answer_repeated_handshakes(s: &UdpSocket) {
    let mut buf = [0u8; 64];
    while let Ok(n) = crate::sock::recv_now(s, &mut buf) {
        if let Some(reply) = handshake_reply(&buf[..n]) {
            let _ = s.send(&reply);
        }
    }
}

/// The next stream from `rx`, or an error saying how many never came by `deadline`.
fn recv_until<T>(rx: &Receiver<T>, deadline: Instant, missing: usize) -> Result<T, TestError> {
    let left = deadline.saturating_duration_since(Instant::now());
    rx.recv_timeout(left)
        .map_err(|_| TestError::Streams(format!("{missing} data stream(s) never arrived")))
}

/// The socket options the client asked for, on a stream the server plays `role` on.
pub(super) fn apply_options(t: &Transport, p: &TestParams, role: Role) {
    let tuning = p.flowlab.as_ref().filter(|_| role == Role::Receive);
    let recv_window = tuning.and_then(|f| f.recv_window);
    let recv_congestion = tuning.and_then(|f| f.recv_congestion.as_ref());
    let window = if let (Some(w), Transport::Tcp(_)) = (recv_window, t) {
        w
    } else if p.window > 0 {
        p.window
    } else if matches!(t, Transport::Udp(_)) {
        crate::stream::UDP_DEFAULT_BUFFER
    } else {
        0
    };
    match u8::try_from(p.tos) {
        Ok(0) => {}
        Ok(tos) => {
            let (sock, peer) = match t {
                Transport::Tcp(s) => (SockRef::from(s.as_ref()), s.peer_addr()),
                Transport::Udp(u) => (SockRef::from(u.as_ref()), u.peer_addr()),
            };
            if let Err(e) = peer.and_then(|peer| sock::set_tos(&sock, peer, tos)) {
                tracing::warn!("TOS {tos}: {e}");
            }
        }
        // As any option this end cannot honour: a warning, and the test runs without.
        Err(_) => tracing::warn!("TOS {} asked for is not 0 to 255: not set", p.tos),
    }
    if let (true, Transport::Udp(u)) = (p.dont_fragment, t) {
        if let Err(e) = u
            .peer_addr()
            .and_then(|peer| sock::set_dont_fragment(u.as_ref(), peer))
        {
            tracing::warn!("--dont-fragment: {e}");
        }
    }
    match t {
        Transport::Tcp(s) => {
            let _ = sock::set_buffers(&SockRef::from(s.as_ref()), window);
            if p.nodelay {
                let _ = s.set_nodelay(true);
            }
            if p.mss > 0 && role == Role::Send {
                let _ = sock::set_mss(s.as_ref(), p.mss as u32);
            }
            if let Some(cc) = recv_congestion.or(p.congestion.as_ref()) {
                // As iperf3: an algorithm this kernel lacks is a warning on the server.
                if let Err(e) = sock::set_congestion(s.as_ref(), cc) {
                    tracing::warn!("{e}");
                }
            }
        }
        Transport::Udp(u) => {
            let _ = sock::set_buffers(&SockRef::from(u.as_ref()), window);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_have_the_handshake_deadline_and_two_round_trips_each() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        assert_eq!(streams_deadline(s(5), Duration::ZERO, 128), s(5));
        assert_eq!(streams_deadline(s(5), ms(1), 1), ms(5002));
        // -P 128 across an ocean: 128 connections one after another, 100 ms each.
        assert_eq!(streams_deadline(s(5), ms(100), 128), ms(30_600));
        assert_eq!(
            streams_deadline(s(5), s(30), 1),
            s(7),
            "a round trip counts up to 1 s"
        );
    }
}
