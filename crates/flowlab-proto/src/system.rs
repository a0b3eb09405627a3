//! The machine state a result was produced on (`flowlab sysinfo`, `start.system`).
//!
//! A flowlab server sends its own in the hello, so a result records both ends. Every
//! field is optional: what could not be read is absent.

use serde::{Deserialize, Serialize};

/// The kernel's CPU latency request device (PM QoS): a process that writes a latency to
/// it, µs, and keeps it open holds idle CPUs to states that exit within it; reading it
/// gives the least any process holds ([`SystemInfo::cpu_latency_us`]).
pub const CPU_LATENCY_DEVICE: &str = "/dev/cpu_dma_latency";

/// Where the kernel names its cpuidle driver ([`SystemInfo::cpuidle_driver`]).
pub const CPUIDLE_DRIVER_FILE: &str = "/sys/devices/system/cpu/cpuidle/current_driver";

/// Whether CPUs under cpuidle driver `driver` (as `current_driver` reads) idle the same
/// whatever latency is requested: without a driver (`none`) the kernel halts them, the
/// request being read by the cpuidle governors only.
pub fn idle_ignores_latency_requests(driver: &str) -> bool {
    driver.trim() == "none"
}

/// The CPU latency in force when no process holds a request, µs (the kernel's
/// `PM_QOS_CPU_LATENCY_DEFAULT_VALUE`, 2 000 s).
pub const NO_CPU_LATENCY_REQUEST: i64 = 2_000_000_000;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SystemInfo {
    /// `uname -r`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u64>,
    /// How idle CPUs sleep: the cpuidle driver
    /// (`/sys/devices/system/cpu/cpuidle/current_driver`: `intel_idle`, `acpi_idle`,
    /// `haltpoll`, `none`, …). A wake-up's lateness depends on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpuidle_driver: Option<String>,
    /// The CPU latency request in force (PM QoS, `/dev/cpu_dma_latency`), µs: the least
    /// any process holds, [`NO_CPU_LATENCY_REQUEST`] when none does, 0 while one keeps
    /// every CPU in its shallowest idle state (`flowlab net up --keep-cpus-awake`,
    /// cyclictest). Readable by root only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_latency_us: Option<i64>,
    /// net.ipv4.tcp_available_congestion_control and tcp_congestion_control.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub congestion_available: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion_default: Option<String>,
    /// net.ipv4.tcp_rmem and tcp_wmem: min, default, max bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_rmem: Option<[u64; 3]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_wmem: Option<[u64; 3]>,
    /// net.core.rmem_max, wmem_max, rmem_default, wmem_default: bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rmem_max: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wmem_max: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rmem_default: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wmem_default: Option<u64>,
    /// Other TCP switches, as the sysctl reads (e.g. `tcp_window_scaling: 1`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tcp: std::collections::BTreeMap<String, String>,
    /// net.core.default_qdisc.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_qdisc: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceInfo>,
}

/// One network interface.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InterfaceInfo {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u64>,
    /// The root queueing discipline (from `tc`; absent when tc is not installed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qdisc: Option<String>,
    /// Offloads on (true) or off (false): tso, gso, gro, sg, tx-checksum, rx-checksum;
    /// those the driver does not report are absent.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub offloads: std::collections::BTreeMap<String, bool>,
    /// Receive packet steering: for each receive queue, rx-0 first, the CPUs its packets
    /// are queued to as `/sys/class/net/DEV/queues/rx-N/rps_cpus` reads (a hex mask, in
    /// comma-separated groups of 32 bits); all zeros: not steered, each packet queued on
    /// the CPU that received it. Empty where the kernel has no RPS.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rps_cpus: Vec<String>,
}
