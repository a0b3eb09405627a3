//! Building a topology in network namespaces (`flowlab net up/down/status/exec`), with
//! iproute2's `ip` and `tc`.
//!
//! Everything `up` creates lives inside namespaces named `fl-<topology>-<node>`: one per
//! host and router, one per switch (holding a bridge). A link is a veth pair whose ends are
//! created directly in the two nodes' namespaces, both named `l<index>` (the link's index
//! in the file). Deleting the namespaces therefore removes every interface, bridge and
//! qdisc, so `down` needs nothing but the names — it reads the state file that `up`
//! appends each namespace to *before* creating it, and also removes any namespace with the
//! topology's prefix, so a crashed or killed `up` is cleaned up too.
//!
//! Link emulation: rate and queue with `tbf` on the sending interface, in every kernel and
//! with either backend. Delay, jitter and loss with one of two [`Backend`]s:
//! - `netem` as the root qdisc of the sending interface, `tbf` as its child;
//! - the user-space emulator ([`crate::forward`]): the link gets a middle namespace
//!   `fl-<topology>-link.<index>` between its two ends, and one emulator process per
//!   topology forwards frames across it, delayed and dropped as the file says.

mod addresses;
mod down;
mod files;
mod processes;
mod schedule;
mod set;
mod shaping;
mod up;

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::topology::Topology;

pub use addresses::{hosts_file, interfaces, routes, segment_interfaces};
pub use down::{down, is_left, status};
pub use files::{
    beside, control_socket, emulator_trouble, lost_emulator, schedule_log, state, state_dir,
    stats_file, unusable,
};
pub use processes::{emulators, is_scheduler};
pub use schedule::{SCHEDULE_DONE, restart_schedule, run as run_schedule};
pub use set::{Changed, ChangedStation, set, set_to};
pub use shaping::{DEFAULT_QUEUE, PACKET_BYTES, shaping};
pub use up::{has_emulated_links, mptcp_available, up};

/// Why building or removing a topology failed.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("{0}")]
    Topology(#[from] crate::topology::TopologyError),
    #[error("`{command}` failed: {message}")]
    Command { command: String, message: String },
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("a topology named '{0}' is up already (flowlab net down {0})")]
    Exists(String),
    #[error("the link emulator did not start: {0}")]
    Emulator(String),
    #[error("{0}")]
    Preflight(String),
}

/// Checks what building and measuring need before anything is tried: root
/// (CAP_NET_ADMIN) and iproute2's `ip` and `tc`.
pub fn preflight() -> Result<(), NetError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(NetError::Preflight(
            "flowlab net needs root (CAP_NET_ADMIN) to build and measure namespaces; try sudo"
                .into(),
        ));
    }
    for tool in ["ip", "tc"] {
        let found = Command::new(tool)
            .arg("-V")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok();
        if !found {
            return Err(NetError::Preflight(format!(
                "flowlab net needs iproute2's `{tool}`, which is not on PATH (Debian: apt-get install iproute2)"
            )));
        }
    }
    Ok(())
}

/// Where delay, jitter and loss are emulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// netem where the kernel has it, else the user-space emulator.
    Auto,
    /// The kernel's `sch_netem`.
    Netem,
    /// flowlab's user-space emulator (every kernel).
    Userspace,
}

/// A `--backend` that is none of flowlab's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}': choose auto, netem or userspace")]
pub struct UnknownBackend(pub String);

impl std::str::FromStr for Backend {
    type Err = UnknownBackend;
    fn from_str(s: &str) -> Result<Self, UnknownBackend> {
        match s {
            "auto" => Ok(Backend::Auto),
            "netem" => Ok(Backend::Netem),
            "userspace" => Ok(Backend::Userspace),
            _ => Err(UnknownBackend(s.into())),
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::Auto => "auto",
            Backend::Netem => "netem",
            Backend::Userspace => "userspace",
        })
    }
}

/// How `up` builds.
#[derive(Debug, Clone)]
pub struct UpOptions {
    pub backend: Backend,
    /// The program run as the user-space emulator: `PROGRAM net _emulate TOPOLOGY`, with
    /// the links as JSON ([`crate::forward::EmulatedLink`]) on its stdin; it prints
    /// `ready` once it forwards. Also run as the schedule of links that change
    /// (`PROGRAM net _schedule TOPOLOGY`).
    pub emulator: PathBuf,
    /// The emulator holds the CPUs out of deep idle states while it runs
    /// ([`crate::awake`]); only the user-space backend can.
    pub keep_cpus_awake: bool,
    /// A directory to log each trace-driven direction's queue to (mahimahi's format), as
    /// `LINK.a-b.log` and `LINK.b-a.log`.
    pub link_logs: Option<PathBuf>,
}

/// What `up` built, kept in `<state dir>/<topology>.json` for `status` and `down`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct State {
    /// `netem` or `userspace` when some link needed emulation, else `None` (tbf only).
    pub backend: Option<Backend>,
    /// The emulator process, when there is one.
    pub emulator_pid: Option<u32>,
    /// The links the emulator forwards.
    pub emulated_links: Vec<String>,
    /// The topology as it is now: as it was brought up, with what `set` and its schedule
    /// changed since (older states lack it).
    #[serde(default)]
    pub topology: Option<Topology>,
    /// The topology as it was brought up, kept when its links change on a schedule: a
    /// schedule started again ([`restart_schedule`]) starts from its values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub built: Option<Topology>,
    /// Its emulator holds the CPUs out of deep idle states (`--keep-cpus-awake`).
    #[serde(default)]
    pub cpus_kept_awake: bool,
    /// tbf buckets kept larger than their rate's by `set` (bytes, by "NAMESPACE DEVICE"):
    /// a bucket smaller than a packet tbf holds would never send it.
    #[serde(default)]
    pub kept_buckets: std::collections::BTreeMap<String, u64>,
    /// The process running its links' schedule, when some link has one.
    #[serde(default)]
    pub scheduler_pid: Option<u32>,
}

/// The middle namespace of link `index` under the user-space backend (a dot cannot
/// appear in a node name, so it never collides with one).
pub fn link_ns_name(topo: &str, index: usize) -> String {
    format!("fl-{topo}-link.{index}")
}

/// The namespace of `node` in topology `topo`.
pub fn ns_name(topo: &str, node: &str) -> String {
    format!("fl-{topo}-{node}")
}

pub(super) fn prefix(topo: &str) -> String {
    format!("fl-{topo}-")
}

/// Runs a command, turning a failure into an error that shows it and its stderr.
pub(super) fn run(program: &str, args: &[&str]) -> Result<String, NetError> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| NetError::Command {
            command: format!("{program} {}", args.join(" ")),
            message: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(NetError::Command {
            command: format!("{program} {}", args.join(" ")),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Namespaces that exist now.
pub fn namespaces() -> Vec<String> {
    run("ip", &["netns", "list"])
        .map(|s| {
            s.lines()
                .filter_map(|l| l.split_whitespace().next().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Prefix of the scratch namespaces of [`netem_available`] (a dot cannot start a
/// topology name, so `status` and `down` never take them for one).
const PROBE_PREFIX: &str = "fl-.probe-";

/// Whether this kernel has `sch_netem` (tried in a scratch namespace).
pub fn netem_available() -> bool {
    // Scratch namespaces of probes that died half-way go first.
    for ns in namespaces() {
        if let Some(pid) = ns.strip_prefix(PROBE_PREFIX) {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = run("ip", &["netns", "del", &ns]);
            }
        }
    }
    let scratch = format!("{PROBE_PREFIX}{}", std::process::id());
    if run("ip", &["netns", "add", &scratch]).is_err() {
        return false;
    }
    let ok = run(
        "ip",
        &[
            "netns", "exec", &scratch, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay",
            "1ms",
        ],
    )
    .is_ok();
    let _ = run("ip", &["netns", "del", &scratch]);
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_parse_and_link_namespaces_cannot_be_node_names() {
        assert_eq!("userspace".parse::<Backend>(), Ok(Backend::Userspace));
        assert_eq!("auto".parse::<Backend>(), Ok(Backend::Auto));
        assert!(
            "tc".parse::<Backend>()
                .unwrap_err()
                .to_string()
                .contains("auto, netem or userspace")
        );
        let name = link_ns_name("port", 11);
        assert_eq!(name, "fl-port-link.11");
        let node = name.strip_prefix("fl-port-").unwrap();
        let t = format!("name = \"port\"\nhosts = [\"{node}\"]\n");
        assert!(Topology::parse(&t).is_err());
    }
}
