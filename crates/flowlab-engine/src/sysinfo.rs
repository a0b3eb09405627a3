//! Reading this machine's network state (`flowlab sysinfo`, and `start.system` of every
//! result): kernel, TCP congestion control and buffer limits, queueing disciplines and
//! offloads. Anything that cannot be read is left out, never guessed.

use std::collections::BTreeMap;
use std::fs;
use std::os::fd::AsRawFd;
use std::path::Path;

use flowlab_proto::system::{InterfaceInfo, SystemInfo};

/// TCP sysctls recorded as they read, besides those with fields of their own.
const TCP_SWITCHES: &[&str] = &[
    "tcp_window_scaling",
    "tcp_timestamps",
    "tcp_sack",
    "tcp_ecn",
    "tcp_adv_win_scale",
    "tcp_notsent_lowat",
    "tcp_slow_start_after_idle",
    "tcp_mtu_probing",
    "tcp_no_metrics_save",
];

fn read(path: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

fn number(path: impl AsRef<Path>) -> Option<u64> {
    read(path)?.parse().ok()
}

/// A number under `/proc/sys/net/core` (`rmem_max`, `wmem_max`, …), `None` where it is
/// not readable.
pub fn net_core(name: &str) -> Option<u64> {
    number(Path::new("/proc/sys/net/core").join(name))
}

/// Parses a sysctl of three numbers (`tcp_rmem`).
pub fn triple(text: &str) -> Option<[u64; 3]> {
    let v: Vec<u64> = text
        .split_whitespace()
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    v.try_into().ok()
}

/// The CPU time of all CPUs since boot, from the `cpu` line of /proc/stat (in the
/// kernel's clock ticks): all of it, and what the hypervisor took ("steal": time a
/// virtual CPU wanted to run and its host ran something else).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTimes {
    pub total: u64,
    pub steal: u64,
}

impl CpuTimes {
    /// Parses /proc/stat's text (`None` without a `cpu` line of at least eight numbers).
    pub fn parse(stat: &str) -> Option<CpuTimes> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().ok())
            .collect::<Option<_>>()?;
        // user nice system idle iowait irq softirq steal [guest guest_nice]: guest time
        // is counted in user time already.
        let fields = v.get(..8)?;
        Some(CpuTimes {
            // Saturating: a counter near 2^64 (none has been seen) must not wrap the total.
            total: fields.iter().fold(0u64, |sum, &v| sum.saturating_add(v)),
            steal: fields[7],
        })
    }

    /// This machine's, now (`None` where /proc/stat cannot be read).
    pub fn now() -> Option<CpuTimes> {
        CpuTimes::parse(&fs::read_to_string("/proc/stat").ok()?)
    }

    /// The share of CPU time stolen between `earlier` and `self`, in percent (`None`
    /// when no time passed).
    pub fn steal_percent_since(&self, earlier: &CpuTimes) -> Option<f64> {
        let total = self.total.checked_sub(earlier.total)?;
        let steal = self.steal.checked_sub(earlier.steal)?;
        (total > 0).then(|| steal as f64 * 100.0 / total as f64)
    }
}

/// The CPU latency in force now, µs: the least any process holds
/// ([`flowlab_proto::system::NO_CPU_LATENCY_REQUEST`] when none does). None where the
/// kernel has no such device or it cannot be read (root only).
pub fn cpu_latency_us() -> Option<i32> {
    use std::io::Read;
    // Opening it adds a request of the default value (no effect) until it is closed;
    // reading gives the value in force, a binary 32-bit integer.
    let mut raw = [0u8; 4];
    fs::File::open(flowlab_proto::system::CPU_LATENCY_DEVICE)
        .ok()?
        .read_exact(&mut raw)
        .ok()?;
    Some(i32::from_ne_bytes(raw))
}

/// Reads everything this module knows how to read.
pub fn collect() -> SystemInfo {
    let ipv4 = Path::new("/proc/sys/net/ipv4");
    let core = Path::new("/proc/sys/net/core");
    let tcp: BTreeMap<String, String> = TCP_SWITCHES
        .iter()
        .filter_map(|k| Some((k.to_string(), read(ipv4.join(k))?)))
        .collect();
    SystemInfo {
        kernel: read("/proc/sys/kernel/osrelease"),
        cpus: std::thread::available_parallelism()
            .ok()
            .map(|n| n.get() as u64),
        cpuidle_driver: read(flowlab_proto::system::CPUIDLE_DRIVER_FILE).filter(|d| !d.is_empty()),
        cpu_latency_us: cpu_latency_us().map(i64::from),
        congestion_available: read(ipv4.join("tcp_available_congestion_control"))
            .map(|s| s.split_whitespace().map(String::from).collect())
            .unwrap_or_default(),
        congestion_default: read(ipv4.join("tcp_congestion_control")),
        tcp_rmem: read(ipv4.join("tcp_rmem")).and_then(|s| triple(&s)),
        tcp_wmem: read(ipv4.join("tcp_wmem")).and_then(|s| triple(&s)),
        rmem_max: net_core("rmem_max"),
        wmem_max: net_core("wmem_max"),
        rmem_default: net_core("rmem_default"),
        wmem_default: net_core("wmem_default"),
        tcp,
        default_qdisc: read(core.join("default_qdisc")),
        interfaces: interfaces(),
    }
}

fn interfaces() -> Vec<InterfaceInfo> {
    let Ok(dir) = fs::read_dir("/sys/class/net") else {
        return Vec::new();
    };
    let qdiscs = root_qdiscs();
    let mut names: Vec<String> = dir
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| InterfaceInfo {
            mtu: number(format!("/sys/class/net/{name}/mtu")),
            qdisc: qdiscs.get(&name).cloned(),
            offloads: offloads(&name),
            rps_cpus: rps_masks(&name),
            name,
        })
        .collect()
}

/// Each receive queue's steering mask (`queues/rx-N/rps_cpus`), rx-0 first; none where
/// the kernel has no RPS.
fn rps_masks(name: &str) -> Vec<String> {
    let Ok(dir) = fs::read_dir(format!("/sys/class/net/{name}/queues")) else {
        return Vec::new();
    };
    let mut queues: Vec<(u32, String)> = dir
        .filter_map(|e| {
            let e = e.ok()?;
            let n = e.file_name().to_str()?.strip_prefix("rx-")?.parse().ok()?;
            Some((n, read(e.path().join("rps_cpus"))?))
        })
        .collect();
    queues.sort();
    queues.into_iter().map(|(_, mask)| mask).collect()
}

/// Root qdisc per interface, from `tc -j qdisc show` (iproute2).
fn root_qdiscs() -> BTreeMap<String, String> {
    let Ok(out) = std::process::Command::new("tc")
        .args(["-j", "qdisc", "show"])
        .stderr(std::process::Stdio::null())
        .output()
    else {
        return BTreeMap::new();
    };
    parse_tc_qdiscs(&out.stdout)
}

/// Parses `tc -j qdisc show`: the root qdisc's kind per device.
pub fn parse_tc_qdiscs(json: &[u8]) -> BTreeMap<String, String> {
    let Ok(serde_json::Value::Array(list)) = serde_json::from_slice(json) else {
        return BTreeMap::new();
    };
    list.iter()
        .filter(|q| q["root"] == serde_json::Value::Bool(true))
        .filter_map(|q| {
            Some((
                q["dev"].as_str()?.to_string(),
                q["kind"].as_str()?.to_string(),
            ))
        })
        .collect()
}

/// The legacy ethtool "get" commands (include/uapi/linux/ethtool.h), each answering one
/// offload's state in a `struct ethtool_value { u32 cmd; u32 data; }`.
const OFFLOADS: &[(&str, u32)] = &[
    ("rx-checksum", 0x14), // ETHTOOL_GRXCSUM
    ("tx-checksum", 0x16), // ETHTOOL_GTXCSUM
    ("sg", 0x18),          // ETHTOOL_GSG
    ("tso", 0x1e),         // ETHTOOL_GTSO
    ("gso", 0x23),         // ETHTOOL_GGSO
    ("gro", 0x2b),         // ETHTOOL_GGRO
];

fn offloads(name: &str) -> BTreeMap<String, bool> {
    let mut out = BTreeMap::new();
    let Ok(sock) = std::net::UdpSocket::bind("127.0.0.1:0") else {
        return out;
    };
    let bytes = name.as_bytes();
    if bytes.len() >= libc::IFNAMSIZ {
        return out;
    }
    for &(what, cmd) in OFFLOADS {
        #[repr(C)]
        struct EthtoolValue {
            cmd: u32,
            data: u32,
        }
        let mut value = EthtoolValue { cmd, data: 0 };
        // SAFETY: ifreq is plain old data; zeroed is a valid value.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        for (dst, &src) in req.ifr_name.iter_mut().zip(bytes) {
            *dst = src as libc::c_char;
        }
        req.ifr_ifru.ifru_data = (&mut value as *mut EthtoolValue).cast();
        // SAFETY: SIOCETHTOOL reads the request and writes `value` through the pointer,
        // both live for the call.
        let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL as _, &mut req) };
        if rc == 0 {
            out.insert(what.to_string(), value.data != 0);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysctl_triples_parse() {
        assert_eq!(
            triple("4096\t131072\t33554432"),
            Some([4096, 131_072, 33_554_432])
        );
        assert_eq!(triple("4096 131072"), None);
        assert_eq!(triple("a b c"), None);
    }

    #[test]
    fn steal_is_the_eighth_field_of_the_cpu_line() {
        let a = CpuTimes::parse("cpu  100 0 50 800 10 0 20 20 5 0\ncpu0 1 2 3 4 5 6 7 8\n")
            .expect("parses");
        assert_eq!(
            a,
            CpuTimes {
                total: 1000,
                steal: 20
            }
        );
        let b = CpuTimes::parse("cpu  150 0 60 900 10 0 20 60 9 0").expect("parses");
        assert_eq!(b.steal_percent_since(&a), Some(20.0));
        assert_eq!(a.steal_percent_since(&a), None);
        // Older kernels without steal, and garbage, are not guessed at.
        assert_eq!(CpuTimes::parse("cpu  1 2 3 4 5 6 7"), None);
        assert_eq!(CpuTimes::parse("cpu0 1 2 3 4 5 6 7 8"), None);
        assert_eq!(CpuTimes::parse("cpu  1 2 x 4 5 6 7 8"), None);
        assert!(CpuTimes::now().is_some());
    }

    #[test]
    fn tc_json_gives_root_qdiscs() {
        let json = br#"[{"kind":"noqueue","handle":"0:","dev":"lo","root":true},
            {"kind":"fq_codel","handle":"0:","dev":"eth0","parent":"1:1"},
            {"kind":"htb","handle":"1:","dev":"eth0","root":true}]"#;
        let q = parse_tc_qdiscs(json);
        assert_eq!(q.get("lo").map(String::as_str), Some("noqueue"));
        assert_eq!(q.get("eth0").map(String::as_str), Some("htb"));
        assert_eq!(q.len(), 2);
        assert!(parse_tc_qdiscs(b"not json").is_empty());
    }

    #[test]
    fn this_machine_is_described() {
        let s = collect();
        assert!(s.kernel.is_some());
        assert!(s.congestion_default.is_some());
        assert!(
            s.congestion_available
                .contains(s.congestion_default.as_ref().unwrap())
        );
        let lo = s
            .interfaces
            .iter()
            .find(|i| i.name == "lo")
            .expect("loopback is listed");
        assert_eq!(lo.mtu, Some(65_536));
    }
}
