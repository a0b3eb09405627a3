//! Emulated networks (`flowlab net`): topology files of hosts, routers, switches and
//! links with rate, delay, jitter, queue and loss.
//!
//! - [`topology`]: the file format, its checks, addresses and routes, and what a file
//!   implies for each path (RTT and bottleneck rate).
//! - [`check`]: the verdict of `net check` on a measured path.
//! - [`build`]: namespaces, veths, bridges, addresses, routes and `tc` shaping, and their
//!   removal.
//!
//! Still to come (issue 5): the user-space link emulator for kernels without netem, and
//! `net check`.

pub mod build;
pub mod check;
pub mod topology;
