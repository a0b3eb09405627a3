//! Emulated networks (`flowlab net`): topology files of hosts, routers, switches and
//! links with rate, delay, jitter, queue and loss.
//!
//! - [`topology`]: the file format, its checks, addresses and routes, and what a file
//!   implies for each path (RTT and bottleneck rate).
//!
//! Building topologies in network namespaces and emulating links is the next step
//! (issue 5); this crate holds the part that needs neither root nor a kernel feature.

pub mod topology;
