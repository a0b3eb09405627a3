//! Keeping the CPUs out of their deep idle states while the user-space emulator runs
//! (`flowlab net up --keep-cpus-awake`).
//!
//! The emulator sleeps until a frame is due (less its wake margin) and spins the rest, so
//! a timer wake-up later than the margin makes its frames late. An idle CPU woken from a
//! deep idle state comes back late: on a virtual machine the vCPU halts, and the
//! hypervisor must schedule it again. A process that holds a request of 0 µs on the
//! kernel's CPU latency (PM QoS, `/dev/cpu_dma_latency`, as cyclictest and tuned's
//! latency-performance profile do) keeps every idle CPU in its shallowest state, polling,
//! until it closes the file: wake-ups come sooner, at the cost of idle CPUs that poll
//! instead of sleeping (power; on a VM the host sees its vCPUs busy). docs/net.md and
//! docs/lab-notes/performance.md measure both.

use std::fs::File;
use std::io::{self, Write};

use flowlab_proto::system::{
    CPU_LATENCY_DEVICE, CPUIDLE_DRIVER_FILE, idle_ignores_latency_requests,
};

/// Why holding the CPUs awake changes nothing on this machine, when it does not (said
/// beside `--keep-cpus-awake`): see [`changes_nothing_with`].
pub fn changes_nothing_here() -> Option<String> {
    let driver = std::fs::read_to_string(CPUIDLE_DRIVER_FILE).ok();
    changes_nothing_with(driver.as_deref())
}

/// Why a latency request changes nothing under cpuidle driver `driver`, if it does not
/// ([`idle_ignores_latency_requests`]; measured: docs/lab-notes/performance.md, "On a host without
/// a cpuidle driver the option changes nothing").
pub fn changes_nothing_with(driver: Option<&str>) -> Option<String> {
    driver.is_some_and(idle_ignores_latency_requests).then(|| {
        format!(
            "this machine has no cpuidle driver ({CPUIDLE_DRIVER_FILE}: none): an idle CPU halts whatever latency is requested, so keeping the CPUs awake changes nothing here"
        )
    })
}

/// A request for no idle-state exit latency, held while this lives.
#[derive(Debug)]
pub struct CpusAwake {
    _request: File,
}

impl CpusAwake {
    /// Holds the request (root). An error names the device.
    pub fn hold() -> io::Result<Self> {
        let named = |e: io::Error| io::Error::new(e.kind(), format!("{CPU_LATENCY_DEVICE}: {e}"));
        let mut request = File::options()
            .write(true)
            .open(CPU_LATENCY_DEVICE)
            .map_err(named)?;
        // The device takes the latency, µs, as a binary 32-bit integer.
        request.write_all(&0i32.to_ne_bytes()).map_err(named)?;
        Ok(CpusAwake { _request: request })
    }
}

#[cfg(test)]
mod tests {
    use super::changes_nothing_with;

    #[test]
    fn only_a_machine_without_a_cpuidle_driver_is_told_the_flag_changes_nothing() {
        let said = changes_nothing_with(Some("none\n")).expect("none: nothing to hold");
        assert!(said.contains("no cpuidle driver"), "{said}");
        for driver in [
            Some("haltpoll"),
            Some("intel_idle"),
            Some("acpi_idle"),
            None,
        ] {
            assert_eq!(changes_nothing_with(driver), None, "{driver:?}");
        }
    }
}
