//! flowlab's measuring engine: sockets, senders and receivers, interval accounting, and
//! the client and server sessions that drive them over iperf3's control protocol.
//!
//! # Layout
//! - [`spec`]: what a client is asked to measure ([`spec::TestSpec`]).
//! - [`result`]: what a test produced ([`result::TestResult`]), the one result type every
//!   output format is made from.
//! - [`client`]: runs a test against a server (flowlab or iperf3).
//! - [`server`]: serves many tests at once.
//! - [`stream`], `tcp_data`, `udp_data`: the data streams and their threads.
//! - [`session`]: one side's streams of a test, their snapshots and results.
//! - [`control`]: control-connection reads and writes with timeouts.
//! - [`diagnose`]: what limited a traced transfer, with evidence and advice.
//! - [`udp_stats`]: loss, reordering, duplicates and jitter of a UDP receiver.
//! - [`pacing`]: smooth rate limiting.
//! - [`sock`]: socket options and kernel counters.
//! - [`sysinfo`]: this machine's network state, recorded with every result.
//! - [`tcpinfo`]: the kernel's `struct tcp_info`, decoded field by field (`--trace`).
//! - [`trace`]: when and how streams sample it.
//! - [`units`]: sizes and rates, parsed and printed.

pub mod client;
pub mod control;
pub mod diagnose;
pub mod pacing;
pub mod result;
pub mod server;
pub mod session;
pub mod sock;
pub mod spec;
pub mod stream;
pub mod sysinfo;
pub mod tcpinfo;
pub mod trace;
pub mod udp_stats;
pub mod units;

mod tcp_data;
mod udp_data;
