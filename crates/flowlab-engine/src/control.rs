//! Blocking reads and writes of control messages, with the timeouts that keep a silent or
//! vanished peer from wedging either end.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use flowlab_proto::{Cookie, ProtoError, State, cookie::COOKIE_LEN, frame};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// What went wrong on a control connection.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("the peer closed the control connection")]
    Closed,
    #[error("no answer from the peer within {0:?}")]
    Timeout(Duration),
    #[error("control connection: {0}")]
    Io(#[from] io::Error),
    #[error("protocol error: {0}")]
    Proto(#[from] ProtoError),
}

fn map_read(e: io::Error, timeout: Option<Duration>) -> ControlError {
    match e.kind() {
        io::ErrorKind::UnexpectedEof => ControlError::Closed,
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            ControlError::Timeout(timeout.unwrap_or_default())
        }
        _ => ControlError::Io(e),
    }
}

/// Reads exactly `buf.len()` bytes within the socket's read timeout.
pub fn read_exact(sock: &mut TcpStream, buf: &mut [u8]) -> Result<(), ControlError> {
    let timeout = sock.read_timeout().ok().flatten();
    sock.read_exact(buf).map_err(|e| map_read(e, timeout))
}

/// When a whole message must have arrived, and the allowance it was given (for the
/// error that says so).
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    pub at: Instant,
    pub allowed: Duration,
}

impl Deadline {
    /// `allowed` from now.
    pub fn after(allowed: Duration) -> Deadline {
        Deadline {
            at: Instant::now() + allowed,
            allowed,
        }
    }
}

/// Reads exactly `buf.len()` bytes by `deadline`, however the peer spaces them: a peer
/// that drips a byte at a time, each just inside a read timeout, still runs out of time.
pub fn read_exact_by(
    sock: &mut TcpStream,
    buf: &mut [u8],
    deadline: Deadline,
) -> Result<(), ControlError> {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ControlError::Timeout(deadline.allowed));
        }
        sock.set_read_timeout(Some(left))?;
        match sock.read(&mut buf[got..]) {
            Ok(0) => return Err(ControlError::Closed),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(map_read(e, Some(deadline.allowed))),
        }
    }
    Ok(())
}

/// Reads a cookie, whole by `deadline`.
pub fn read_cookie(sock: &mut TcpStream, deadline: Deadline) -> Result<Cookie, ControlError> {
    let mut wire = [0u8; COOKIE_LEN];
    read_exact_by(sock, &mut wire, deadline)?;
    Ok(Cookie::decode(&wire)?)
}

pub fn read_state(sock: &mut TcpStream) -> Result<State, ControlError> {
    let mut b = [0u8; 1];
    read_exact(sock, &mut b)?;
    Ok(State::from_byte(b[0])?)
}

pub fn write_state(sock: &mut TcpStream, state: State) -> Result<(), ControlError> {
    sock.write_all(&[state.to_byte()])?;
    Ok(())
}

/// Reads a length-prefixed JSON message no longer than `max` bytes, each part within
/// the socket's read timeout.
pub fn read_frame<T: DeserializeOwned>(sock: &mut TcpStream, max: u32) -> Result<T, ControlError> {
    frame_from(|buf| read_exact(sock, buf), max)
}

/// [`read_frame`], the whole message by `deadline` (see [`read_exact_by`]).
pub fn read_frame_by<T: DeserializeOwned>(
    sock: &mut TcpStream,
    max: u32,
    deadline: Deadline,
) -> Result<T, ControlError> {
    frame_from(|buf| read_exact_by(sock, buf, deadline), max)
}

/// A frame read with `read`: the length prefix, checked against `max` before anything is
/// allocated, then the body.
fn frame_from<T: DeserializeOwned>(
    mut read: impl FnMut(&mut [u8]) -> Result<(), ControlError>,
    max: u32,
) -> Result<T, ControlError> {
    let mut prefix = [0u8; 4];
    read(&mut prefix)?;
    let len = frame::check(prefix, max)?;
    let mut body = vec![0u8; len];
    read(&mut body)?;
    Ok(frame::decode(&body)?)
}

pub fn write_frame<T: Serialize>(sock: &mut TcpStream, value: &T) -> Result<(), ControlError> {
    sock.write_all(&frame::encode(value))?;
    Ok(())
}

/// What ended a [`wait_state`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The peer sent a state byte.
    State(State),
    /// `also` became readable (it is drained).
    Other,
    /// Nothing happened within the timeout.
    Timeout,
}

/// Sleeps until a state byte arrives on `sock`, `also` becomes readable, or `timeout`
/// passes — one system call, no polling loop, so an idle controller never wakes the
/// CPUs that move the data.
pub fn wait_state(
    sock: &mut TcpStream,
    also: Option<&nix::sys::eventfd::EventFd>,
    timeout: Duration,
) -> Result<Wake, ControlError> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let ms = u16::try_from(timeout.as_millis().max(1)).unwrap_or(u16::MAX);
    let (sock_ready, other_ready) = {
        let mut fds = vec![PollFd::new(sock.as_fd(), PollFlags::POLLIN)];
        if let Some(e) = also {
            fds.push(PollFd::new(e.as_fd(), PollFlags::POLLIN));
        }
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(_) | Err(nix::Error::EINTR) => {}
            Err(e) => return Err(ControlError::Io(e.into())),
        }
        let ready = |f: &PollFd<'_>| f.revents().is_some_and(|r| !r.is_empty());
        (ready(&fds[0]), fds.get(1).is_some_and(ready))
    };
    if sock_ready {
        // Readable: a byte, end of file or an error is waiting, so this does not block.
        let mut b = [0u8; 1];
        return match sock.read(&mut b) {
            Ok(0) => Err(ControlError::Closed),
            Ok(_) => Ok(Wake::State(State::from_byte(b[0])?)),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => Err(ControlError::Closed),
            Err(e) => Err(map_read(e, None)),
        };
    }
    if other_ready {
        if let Some(e) = also {
            let _ = e.read();
        }
        return Ok(Wake::Other);
    }
    Ok(Wake::Timeout)
}
