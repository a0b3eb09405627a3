//! Doing things inside a named network namespace from this process: a thread enters the
//! namespace (setns(2) changes only the calling thread), and sockets it opens there stay
//! bound to that namespace wherever they are used later.

use std::io;
use std::os::fd::AsRawFd;

/// Where `ip netns add` keeps named namespaces.
pub const DIR: &str = "/run/netns";

/// Moves the calling thread into namespace `name` (as made by `ip netns add`).
pub fn enter(name: &str) -> io::Result<()> {
    let path = format!("{DIR}/{name}");
    let f =
        std::fs::File::open(&path).map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?;
    // SAFETY: setns takes a descriptor that stays open for the call.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Runs `f` on a thread inside namespace `name` and returns its result.
pub fn run_in<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let name = name.to_string();
    std::thread::spawn(move || {
        enter(&name)?;
        f()
    })
    .join()
    .unwrap_or_else(|_| Err(io::Error::other("namespace thread panicked")))
}

/// The legacy ethtool "set" commands (include/uapi/linux/ethtool.h).
const ETHTOOL_STXCSUM: u32 = 0x17;
const ETHTOOL_SGRO: u32 = 0x2c;

fn ethtool_set(dev: &str, cmd: u32, on: bool) -> io::Result<()> {
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    let bytes = dev.as_bytes();
    if bytes.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface name too long",
        ));
    }
    let sock = std::net::UdpSocket::bind("127.0.0.1:0")
        .or_else(|_| std::net::UdpSocket::bind("0.0.0.0:0"))?;
    let mut value = EthtoolValue {
        cmd,
        data: u32::from(on),
    };
    // SAFETY: ifreq is plain old data; zeroed is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, &src) in req.ifr_name.iter_mut().zip(bytes) {
        *dst = src as libc::c_char;
    }
    req.ifr_ifru.ifru_data = (&mut value as *mut EthtoolValue).cast();
    // SAFETY: SIOCETHTOOL reads the request and `value` through its pointer; both live
    // for the call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL as _, &mut req) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("ethtool on {dev}: {e}")));
    }
    Ok(())
}

/// Makes `dev` (in the calling thread's namespace) hand the emulator complete frames:
/// checksums computed in software instead of left to "hardware" (turning the checksum
/// offload off also turns TSO off, so GSO cuts segments to the MTU before the wire).
pub fn complete_frames(dev: &str) -> io::Result<()> {
    ethtool_set(dev, ETHTOOL_STXCSUM, false)
}

/// Makes `dev` deliver frames as they came, not merged by GRO (veths merge only when
/// GRO was turned on, so an error here is ignored by the caller).
pub fn no_gro(dev: &str) -> io::Result<()> {
    ethtool_set(dev, ETHTOOL_SGRO, false)
}
