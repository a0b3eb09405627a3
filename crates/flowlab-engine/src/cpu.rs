//! The threads' CPUs, scheduling and clocks: pinning (`-A`), the CPUs a thread may run
//! on, its CPU time, the scheduling slice a receiver asks for, the system clock.

use std::io;

/// The system clock (CLOCK_REALTIME), ns since the Unix epoch.
pub fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// CPU time used by the calling thread, microseconds (user, system).
pub fn thread_cpu_us() -> (u64, u64) {
    // SAFETY: getrusage fills the struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
        return (0, 0);
    }
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    (us(ru.ru_utime), us(ru.ru_stime))
}

/// The CPUs the calling thread may run on (its affinity mask; a thread inherits its
/// process's), in order.
pub fn allowed_cpus() -> Vec<usize> {
    use nix::sched::{CpuSet, sched_getaffinity};
    use nix::unistd::Pid;
    match sched_getaffinity(Pid::from_raw(0)) {
        Ok(set) => (0..CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// The CPUs online on this machine (whatever this process may use of them).
pub fn online_cpus() -> usize {
    // SAFETY: sysconf(3) reads a system value; it has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    n.max(1) as usize
}

/// True when the calling thread may run on one CPU only (pinned: `-A`, a server's
/// `server_affinity`, `serve -A`, `taskset`) and the machine has others online, where a
/// peer on this host may run. Other threads may share that CPU (a test's other streams,
/// a whole server pinned with `serve -A`); nothing here knows.
pub fn pinned_to_one_cpu() -> bool {
    allowed_cpus().len() == 1 && online_cpus() > 1
}

/// CPUs as a list: `0-3, 6`.
pub fn cpu_list(cpus: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}-{}", cpus[i], cpus[j])
        } else {
            cpus[i].to_string()
        });
        i = j + 1;
    }
    parts.join(", ")
}

/// For tests of a pinned thread: the CPU to pin to (the last this process may use) when
/// others are online too, else `None` after saying why the test is skipped; CI must have
/// two CPUs or more.
#[cfg(test)]
pub(crate) fn cpu_to_pin_or_skip(what: &str) -> Option<usize> {
    if online_cpus() < 2 {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have two CPUs or more"
        );
        eprintln!("skipped: one CPU online, so {what}");
        return None;
    }
    allowed_cpus().last().copied()
}

/// Sets `sock`'s receive buffer to `bytes` past `net.core.rmem_max` (SO_RCVBUFFORCE,
/// which needs CAP_NET_ADMIN, as CI has); false when refused. For tests that need a
/// buffer of a known size whatever the host's sysctls.
/// Pins the calling thread to `cpu` (`-A`).
pub fn pin_thread(cpu: usize) -> io::Result<()> {
    use nix::sched::{CpuSet, sched_setaffinity};
    use nix::unistd::Pid;
    let mut set = CpuSet::new();
    set.set(cpu).map_err(io::Error::from)?;
    // Pid 0: the calling thread (sched_setaffinity(2) takes a thread id).
    sched_setaffinity(Pid::from_raw(0), &set).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("cannot run on CPU {cpu}: {e}"),
        )
    })
}

/// The scheduling slice a UDP receiving thread asks for: 100 µs, the shortest the
/// kernel grants. See [`request_slice`].
pub const RECEIVER_SLICE_NS: u64 = 100_000;

/// What became of a thread's request for a scheduling slice ([`request_slice`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slice {
    /// The kernel keeps this slice for the thread now, ns.
    Granted(u64),
    /// The kernel took the request but keeps no slices (before Linux 6.12).
    NotKept,
    /// The thread is not of the normal policy (batch, idle, real-time): left alone.
    NotNormal,
}

/// Asks the scheduler for slices of `ns` for the calling thread (a normal thread's
/// `sched_runtime` in `sched_setattr(2)`, EEVDF's custom slice: Linux 6.12 and later;
/// the kernel keeps it within 0.1–100 ms). A thread with a shorter slice gets an earlier
/// deadline, so when it wakes it preempts a thread that has been running, instead of
/// waiting out that thread's slice: what a receiver needs when it shares the CPUs with
/// senders that never sleep (`-u -b 0 -P 2` on two cores), since its socket overflows
/// while it waits. It gets no more CPU time, only sooner. Its nice value, policy and
/// reset-on-fork flag are kept; a thread not of the normal policy is left alone. An
/// error is the kernel refusing (a seccomp filter, a sandbox).
pub fn request_slice(ns: u64) -> io::Result<Slice> {
    let mut attr = thread_attr(0)?;
    if attr.sched_policy != libc::SCHED_OTHER as u32 {
        return Ok(Slice::NotNormal);
    }
    attr.size = std::mem::size_of::<libc::sched_attr>() as u32;
    attr.sched_flags &= libc::SCHED_FLAG_RESET_ON_FORK as u64;
    attr.sched_runtime = ns;
    // SAFETY: a valid sched_attr of the size it declares; pid 0 is this thread.
    let r = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const _, 0) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(thread_slice(0).map_or(Slice::NotKept, Slice::Granted))
}

/// The slice the kernel keeps for thread `tid` (0: the calling thread), `None` where it
/// reports none (before Linux 6.12) or the thread is gone.
pub fn thread_slice(tid: i32) -> Option<u64> {
    thread_attr(tid)
        .ok()
        .map(|a| a.sched_runtime)
        .filter(|&ns| ns > 0)
}

/// Thread `tid`'s scheduling attributes (`sched_getattr(2)`; 0: the calling thread).
pub fn thread_attr(tid: i32) -> io::Result<libc::sched_attr> {
    let size = std::mem::size_of::<libc::sched_attr>();
    // SAFETY: all-zero is a valid sched_attr (integers only).
    let mut attr: libc::sched_attr = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes at most `size` bytes into `attr`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            tid,
            &mut attr as *mut _,
            size as u32,
            0,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(attr)
}

#[cfg(test)]
mod tests {
    /// What a normal thread asking for a slice must get here: the slice where the
    /// kernel keeps slices (it reports one for every normal thread then), `NotKept`
    /// where it does not (said, as a test that checks less); never an error.
    fn expected_for_a_normal_thread() -> super::Slice {
        match super::thread_slice(0) {
            Some(_) => super::Slice::Granted(super::RECEIVER_SLICE_NS),
            None => {
                eprintln!("this kernel keeps no scheduling slices: only the call is checked");
                super::Slice::NotKept
            }
        }
    }

    /// Runs `f` in a new thread of the normal policy at nice 0 or more (whatever this
    /// test runs under), with the calling thread's policy and nice afterwards.
    fn in_thread<T: Send + 'static>(
        f: impl FnOnce() -> T + Send + 'static,
    ) -> (T, libc::sched_attr) {
        std::thread::spawn(move || {
            let mut attr = super::thread_attr(0).expect("sched_getattr");
            if attr.sched_policy != libc::SCHED_OTHER as u32 {
                // A test run under `chrt -b`/`-i`: back to normal, which needs no
                // privilege for a thread's own policy at the same nice.
                attr.sched_policy = libc::SCHED_OTHER as u32;
                attr.sched_flags = 0;
                attr.sched_priority = 0;
                attr.sched_runtime = 0;
                // SAFETY: a valid sched_attr of the size it declares.
                let r = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const _, 0) };
                assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
            }
            let out = f();
            (out, super::thread_attr(0).expect("sched_getattr"))
        })
        .join()
        .expect("thread")
    }

    /// A normal thread gets the slice it asks for (where the kernel keeps slices), keeps
    /// its nice value, and the slice is its own, not its process's.
    #[test]
    fn a_thread_gets_the_slice_it_asks_for_and_keeps_its_nice() {
        let want = in_thread(expected_for_a_normal_thread).0;
        let before = super::thread_slice(0);
        // Five above the nice this test runs at (raising one's own nice needs no
        // privilege; scripts/test.sh runs some test binaries at 10).
        let nice = (super::thread_attr(0).expect("sched_getattr").sched_nice + 5).min(19);
        let (asked, after) = in_thread(move || {
            // SAFETY: setpriority on this thread (its id from gettid).
            let tid = nix::unistd::gettid().as_raw() as libc::id_t;
            assert_eq!(
                unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) },
                0
            );
            super::request_slice(super::RECEIVER_SLICE_NS).expect("the kernel takes it")
        });
        assert_eq!(asked, want);
        assert_eq!(after.sched_nice, nice, "nice kept");
        assert_eq!(after.sched_policy, libc::SCHED_OTHER as u32);
        assert_eq!(
            super::thread_slice(0),
            before,
            "the asking thread's own only"
        );
    }

    /// A batch thread is left as it is: it never preempts on waking, whatever its slice.
    #[test]
    fn a_batch_thread_is_left_alone() {
        let (asked, after) = in_thread(|| {
            let mut attr = super::thread_attr(0).expect("sched_getattr");
            attr.sched_policy = libc::SCHED_BATCH as u32;
            attr.sched_flags = 0;
            // SAFETY: a valid sched_attr of the size it declares.
            let r = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const _, 0) };
            assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
            let before = super::thread_attr(0).expect("sched_getattr").sched_runtime;
            (
                super::request_slice(super::RECEIVER_SLICE_NS).expect("no error"),
                before,
            )
        });
        assert_eq!(asked.0, super::Slice::NotNormal);
        assert_eq!(after.sched_policy, libc::SCHED_BATCH as u32);
        assert_eq!(after.sched_runtime, asked.1, "slice unchanged");
    }

    /// A thread pinned to one CPU says so when others are online; one that may run on
    /// several does not.
    #[test]
    fn a_thread_pinned_to_one_cpu_of_several_says_so() {
        let cpus = super::allowed_cpus();
        let online = super::online_cpus();
        let first = cpus[0];
        let (before, after) = std::thread::spawn(move || {
            let before = super::pinned_to_one_cpu();
            super::pin_thread(first).expect("pin");
            (before, super::pinned_to_one_cpu())
        })
        .join()
        .expect("thread");
        assert_eq!(before, cpus.len() == 1 && online > 1);
        assert_eq!(after, online > 1);
    }

    #[test]
    fn cpu_lists_join_runs() {
        assert_eq!(super::cpu_list(&[0, 1, 2, 3, 6]), "0-3, 6");
        assert_eq!(super::cpu_list(&[1]), "1");
        assert_eq!(super::cpu_list(&[0, 2, 3]), "0, 2-3");
        assert_eq!(super::cpu_list(&[]), "");
    }
}
