//! The human-readable tables and lines, one module per command, every one a function
//! from a result to the text printed (no I/O): a test's table and its diagnosis
//! ([`mod@test`], [`mod@diagnosis`]), `fetch`'s and the sweep's ([`mod@fetch`]),
//! `net`'s ([`mod@net`], [`mod@net_check`]), `ping`'s ([`mod@ping`]), `rpm`'s ([`mod@rpm`]), `serve`'s log lines ([`mod@server`]), `run`'s ([`mod@study`]) and
//! `sysinfo`'s ([`mod@system`]). Each is re-exported here: `table::finish`,
//! `table::net_check`, ….

pub mod diagnosis;
pub mod fetch;
pub mod net;
pub mod net_check;
pub mod ping;
pub mod rpm;
pub mod server;
pub mod study;
pub mod system;
pub mod test;

pub use diagnosis::diagnosis;
pub use fetch::{fetch, fragment_set, serving_fragments, sweep};
pub use net::{net_down, net_plan, net_status, net_up};
pub use net_check::net_check;
pub use ping::{ping_header, ping_histogram, ping_reply, ping_summary};
pub use rpm::{rpm_header, rpm_interval, rpm_summary};
pub use server::{server_event, server_events};
pub use study::{study_plan, study_summary, study_trial};
pub use system::system;
pub use test::{end, finish, interval, interval_header, quick_case, quick_heading, start, whole};

/// `n` of a thing, in the singular for one: "1 router", "2 routers", "0 switches".
pub(crate) fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
