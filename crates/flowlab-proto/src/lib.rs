//! flowlab's wire formats, without I/O.
//!
//! Every byte flowlab exchanges with a peer — a stock iperf3 or another flowlab — is
//! encoded and first judged here. Nothing in this crate touches a socket or reads a clock:
//! callers hand in bytes (and times) and get values or a [`ProtoError`] back, so each
//! decoder can be unit-tested and fuzzed byte by byte.
//!
//! # Layout
//! - [`auth`]: iperf3's authentication token and authorized-users file.
//! - [`cookie`]: the 37-byte test cookie that opens every TCP connection.
//! - [`credential`]: what an authenticating server's echo and load connections show.
//! - [`state`]: the one-byte control states of iperf3's protocol, plus flowlab's own.
//! - [`frame`]: length-prefixed JSON messages on the control connection.
//! - [`params`]: the test parameters a client sends (iperf3 keys plus a `flowlab` object).
//! - [`hello`]: flowlab's answer to a client that announced flowlab extensions.
//! - [`results`]: the per-test results both ends exchange at the end of a test.
//! - [`udp`]: the UDP datagram header, the UDP stream handshake and stop-and-wait acks.
//! - [`trace`]: TCP_INFO samples of a traced test.
//! - [`system`]: the machine state a result was produced on.
//! - [`fragment`]: requests and replies of the fragment service (`serve --fragments`).
//! - [`probe`]: latency probes (`flowlab ping`) and the server's echo of them.
//! - [`load`]: load-generating connections (`flowlab rpm`).
//! - [`source`]: the address a per-source limit counts a peer under.
//! - [`quic_perf`]: the QUIC performance protocol's ask (`flowlab test --quic`).

pub mod auth;
pub mod cookie;
pub mod credential;
pub mod fragment;
pub mod frame;
pub mod hello;
pub mod load;
pub mod params;
pub mod probe;
pub mod quic_perf;
pub mod results;
pub mod source;
pub mod state;
pub mod system;
pub mod trace;
pub mod udp;

mod error;
mod lenient;

pub use cookie::Cookie;
pub use error::ProtoError;
pub use state::State;

/// Default TCP port of iperf3 and flowlab.
pub const DEFAULT_PORT: u16 = 5201;
