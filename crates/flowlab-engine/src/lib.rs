//! flowlab's measuring engine: sockets, senders and receivers, interval accounting, and
//! the client and server sessions that drive them over iperf3's control protocol.
//!
//! What a test is asked to do (`flowlab_results::spec`) and what it produced
//! (`flowlab_results::result`) are the report crate's: the engine fills them in, and never
//! formats them.
//!
//! # Layout
//! - [`client`]: runs a test against a server (flowlab or iperf3).
//! - [`server`]: serves many tests at once, and answers latency probes.
//! - [`ping`]: latency probes to a server (`flowlab ping`).
//! - [`rpm`]: the responsiveness method (`flowlab rpm`).
//! - [`reach`]: what every client does first: resolve, a session number, admission.
//! - [`credentials`]: a client's token, and the tickets of an authenticating server.
//! - [`stream`], `tcp_data`, `udp_data`: the data streams and their threads.
//! - [`buf`]: the page-aligned buffers their data is copied from and to.
//! - [`session`]: one side's streams of a test, their snapshots and results.
//! - [`control`]: control-connection reads and writes with timeouts.
//! - [`udp_stats`]: loss, reordering, duplicates and jitter of a UDP receiver.
//! - [`pacing`]: smooth rate limiting.
//! - [`sock`]: socket options and kernel counters.
//! - [`sysinfo`]: this machine's network state, recorded with every result.
//! - [`tcpinfo`]: the kernel's `struct tcp_info`, decoded field by field (`--trace`).
//! - [`trace`]: when and how streams sample it.

pub mod buf;
pub mod client;
pub mod control;
pub mod cpu;
pub mod credentials;
pub mod mptcp;
pub mod multicast;
pub mod negotiate;
pub mod pacing;
pub mod ping;
pub mod reach;
pub mod rpm;
pub mod server;
pub mod session;
pub mod sock;
pub mod stream;
pub mod sysinfo;
pub mod tcpinfo;
pub mod trace;
pub mod udp_stats;

mod speed;
mod tcp_data;
mod udp_data;
