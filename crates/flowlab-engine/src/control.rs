//! Blocking reads and writes of control messages, with the timeouts that keep a silent or
//! vanished peer from wedging either end.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

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

pub fn read_cookie(sock: &mut TcpStream) -> Result<Cookie, ControlError> {
    let mut wire = [0u8; COOKIE_LEN];
    read_exact(sock, &mut wire)?;
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

/// Reads a length-prefixed JSON message no longer than `max` bytes.
pub fn read_frame<T: DeserializeOwned>(sock: &mut TcpStream, max: u32) -> Result<T, ControlError> {
    let mut prefix = [0u8; 4];
    read_exact(sock, &mut prefix)?;
    let len = frame::check(prefix, max)?;
    let mut body = vec![0u8; len];
    read_exact(sock, &mut body)?;
    Ok(frame::decode(&body)?)
}

pub fn write_frame<T: Serialize>(sock: &mut TcpStream, value: &T) -> Result<(), ControlError> {
    sock.write_all(&frame::encode(value))?;
    Ok(())
}

/// Polls for a state byte without blocking: `Ok(None)` when nothing has arrived.
pub fn poll_state(sock: &mut TcpStream) -> Result<Option<State>, ControlError> {
    sock.set_nonblocking(true)?;
    let mut b = [0u8; 1];
    let r = sock.read(&mut b);
    sock.set_nonblocking(false)?;
    match r {
        Ok(0) => Err(ControlError::Closed),
        Ok(_) => Ok(Some(State::from_byte(b[0])?)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => Err(ControlError::Closed),
        Err(e) => Err(e.into()),
    }
}
