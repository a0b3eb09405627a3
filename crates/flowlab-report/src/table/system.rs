//! `flowlab sysinfo`'s table.

use std::fmt::Write as _;

/// `flowlab sysinfo`: the machine state, one setting per line (`?`: could not be read).
pub fn system(s: &flowlab_proto::system::SystemInfo) -> String {
    let mut out = String::new();
    // One column of names, then at least two spaces: a name as long as the column (e.g.
    // net.ipv4.tcp_slow_start_after_idle) is never glued to its value.
    let mut line = |k: &str, v: String| {
        let _ = writeln!(out, "{k:<34}  {v}");
    };
    let unknown = || "?".to_string();
    let or_unknown = |v: &Option<String>| v.clone().unwrap_or_else(unknown);
    let triple = |t: Option<[u64; 3]>| {
        t.map_or_else(unknown, |[a, b, c]| {
            format!("{a} {b} {c}  (min default max, bytes)")
        })
    };
    let n = |v: Option<u64>| v.map_or_else(unknown, |v| v.to_string());
    line("kernel", or_unknown(&s.kernel));
    line("cpus", n(s.cpus));
    line("cpuidle driver", or_unknown(&s.cpuidle_driver));
    line(
        "cpu latency request (PM QoS)",
        match s.cpu_latency_us {
            None => "? (root only)".into(),
            Some(v) if v >= flowlab_proto::system::NO_CPU_LATENCY_REQUEST => "none held".into(),
            Some(v)
                if s.cpuidle_driver.as_deref().is_some_and(
                    flowlab_proto::system::idle_ignores_latency_requests,
                ) =>
            {
                format!("{v} µs (held by a process; no effect: no cpuidle driver)")
            }
            Some(0) => "0 µs (held by a process: idle CPUs stay in their shallowest state, every wake-up on the machine sooner)".into(),
            Some(v) => {
                format!("{v} µs (held by a process: idle CPUs use only states that exit within it)")
            }
        },
    );
    line(
        "congestion control",
        format!(
            "{} (available: {})",
            or_unknown(&s.congestion_default),
            s.congestion_available.join(" ")
        ),
    );
    line("net.ipv4.tcp_rmem", triple(s.tcp_rmem));
    line("net.ipv4.tcp_wmem", triple(s.tcp_wmem));
    line("net.core.rmem_max", n(s.rmem_max));
    line("net.core.wmem_max", n(s.wmem_max));
    line("net.core.rmem_default", n(s.rmem_default));
    line("net.core.wmem_default", n(s.wmem_default));
    for (k, v) in &s.tcp {
        line(&format!("net.ipv4.{k}"), v.to_string());
    }
    line("net.core.default_qdisc", or_unknown(&s.default_qdisc));
    for i in &s.interfaces {
        let offloads: Vec<String> = i
            .offloads
            .iter()
            .map(|(k, on)| format!("{k} {}", if *on { "on" } else { "off" }))
            .collect();
        // Receive packet steering, per receive queue (shown where the kernel has it).
        let rps = if i.rps_cpus.is_empty() {
            String::new()
        } else {
            format!("  rps_cpus {}", i.rps_cpus.join(" "))
        };
        line(
            &format!("interface {}", i.name),
            format!(
                "mtu {}  qdisc {}{rps}  offloads: {}",
                n(i.mtu),
                or_unknown(&i.qdisc),
                if offloads.is_empty() {
                    "?".to_string()
                } else {
                    offloads.join(", ")
                }
            ),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use flowlab_proto::system::{NO_CPU_LATENCY_REQUEST, SystemInfo};

    /// The CPU latency request line, as `system` prints it for `held` under `driver`.
    fn latency_line(held: Option<i64>, driver: Option<&str>) -> String {
        let s = SystemInfo {
            cpu_latency_us: held,
            cpuidle_driver: driver.map(String::from),
            ..SystemInfo::default()
        };
        super::system(&s)
            .lines()
            .find(|l| l.starts_with("cpu latency request (PM QoS)"))
            .expect("the line")
            .to_string()
    }

    #[test]
    fn the_cpu_latency_request_is_said_in_words() {
        let haltpoll = Some("haltpoll");
        assert!(latency_line(None, haltpoll).ends_with("  ? (root only)"));
        assert!(latency_line(Some(NO_CPU_LATENCY_REQUEST), haltpoll).ends_with("  none held"));
        assert!(latency_line(Some(0), haltpoll).ends_with(
            "  0 µs (held by a process: idle CPUs stay in their shallowest state, every wake-up on the machine sooner)"
        ));
        assert!(latency_line(Some(100), haltpoll).ends_with(
            "  100 µs (held by a process: idle CPUs use only states that exit within it)"
        ));
        // Held, but nothing to hold: said so.
        assert!(
            latency_line(Some(0), Some("none"))
                .ends_with("  0 µs (held by a process; no effect: no cpuidle driver)")
        );
    }
}
