//! Emulated networks (`flowlab net`): topology files of hosts, routers, switches and
//! links with rate, delay, jitter, queue and loss.
//!
//! - [`topology`]: the file format, its checks, addresses and routes, and what a file
//!   implies for each path (RTT and bottleneck rate).
//! - [`check`]: the verdict of `net check` on a measured path.
//! - [`build`]: namespaces, veths, bridges, addresses, routes and `tc` shaping, the
//!   choice of backend, and their removal.
//! - [`emulator`]: the user-space emulator's model of a link direction (delay, jitter,
//!   loss), sans-IO; [`forward`]: its AF_PACKET forwarding threads; [`awake`]: keeping
//!   the CPUs out of deep idle states while it runs, when asked.
//! - [`netns`]: doing things inside a namespace from this process; [`probe`]: ICMP RTT
//!   probes from inside one.
//! - [`locate`]: which topology and node a process runs in, and its paths' bottlenecks.
//! - [`status`]: the topologies that are up, how they were built, what their emulator did.
//! - [`trace`]: links whose capacity follows a recorded trace (mahimahi's format), sans-IO.
//! - [`medium`]: a shared Wi-Fi medium's model (DCF, A-MPDU, airtime fairness), sans-IO;
//!   not yet part of a topology.

pub mod awake;
pub mod build;
pub mod check;
pub mod emulator;
pub mod forward;
pub mod locate;
pub mod medium;
pub mod netns;
pub mod probe;
pub mod status;
pub mod topology;
pub mod trace;
