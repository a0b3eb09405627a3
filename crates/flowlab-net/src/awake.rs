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
//! docs/PERFORMANCE.md measure both.

use std::fs::File;
use std::io::{self, Read, Write};

/// The kernel's CPU latency request device.
pub const CPU_LATENCY: &str = "/dev/cpu_dma_latency";

/// A request for no idle-state exit latency, held while this lives.
#[derive(Debug)]
pub struct CpusAwake {
    _request: File,
}

impl CpusAwake {
    /// Holds the request (root). An error names the device.
    pub fn hold() -> io::Result<Self> {
        let named = |e: io::Error| io::Error::new(e.kind(), format!("{CPU_LATENCY}: {e}"));
        let mut request = File::options()
            .write(true)
            .open(CPU_LATENCY)
            .map_err(named)?;
        // The device takes the latency, µs, as a binary 32-bit integer.
        request.write_all(&0i32.to_ne_bytes()).map_err(named)?;
        Ok(CpusAwake { _request: request })
    }
}

/// The CPU latency in force now, µs: the least any process holds (2 000 s when none
/// does). None where the kernel has no such device.
pub fn cpu_latency_us() -> Option<i32> {
    let mut raw = [0u8; 4];
    File::open(CPU_LATENCY).ok()?.read_exact(&mut raw).ok()?;
    Some(i32::from_ne_bytes(raw))
}
