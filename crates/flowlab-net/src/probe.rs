//! RTT probes for a study's RTT steps: ICMP echo from a raw socket opened inside the
//! source host's namespace (the destination's kernel answers; no server is needed).
//! (`net check` times UDP echoes of a `flowlab serve` instead, as `flowlab ping` does.) A probe is
//! 84 bytes on the wire, so its RTT is the path's delays plus next to no serialization.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

/// An ICMP echo client bound to one namespace.
#[derive(Debug)]
pub struct Pinger {
    socket: Socket,
    id: u16,
    seq: u16,
}

/// The Internet checksum (RFC 1071).
fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An echo request: type 8, code 0, checksum, identifier, sequence, 56 bytes of payload.
pub fn echo_request(id: u16, seq: u16) -> Vec<u8> {
    let mut p = vec![8, 0, 0, 0];
    p.extend(id.to_be_bytes());
    p.extend(seq.to_be_bytes());
    p.extend((0..56u8).map(|i| i.wrapping_mul(7)));
    let c = checksum(&p);
    p[2..4].copy_from_slice(&c.to_be_bytes());
    p
}

/// The (identifier, sequence) of an echo reply, given the IPv4 packet a raw socket reads.
pub fn echo_reply(packet: &[u8]) -> Option<(u16, u16)> {
    let ihl = usize::from(packet.first()? & 0x0f) * 4;
    let icmp = packet.get(ihl..)?;
    if icmp.len() < 8 || icmp[0] != 0 || icmp[1] != 0 {
        return None;
    }
    Some((
        u16::from_be_bytes([icmp[4], icmp[5]]),
        u16::from_be_bytes([icmp[6], icmp[7]]),
    ))
}

impl Pinger {
    /// Opens the raw socket inside namespace `ns` (root).
    pub fn new(ns: &str) -> io::Result<Pinger> {
        Pinger::open(Some(ns))
    }

    /// Opens the raw socket inside namespace `ns`, or in this thread's own when `None`
    /// (root).
    pub fn open(ns: Option<&str>) -> io::Result<Pinger> {
        let raw = || Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4));
        let socket = match ns {
            Some(ns) => crate::netns::run_in(ns, raw)?,
            None => raw()?,
        };
        // Replies carry the kernel's arrival time, so a late-scheduled prober does not
        // add to the RTT it reports.
        crate::forward::set_int(&socket, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
        let id = (std::process::id() as u16) ^ (crate::forward::wall_ns() as u16);
        Ok(Pinger { socket, id, seq: 0 })
    }

    /// Sends one echo request to `to` and waits up to `timeout` for its reply. The RTT
    /// runs from just before the send to the kernel's arrival stamp of the reply.
    pub fn ping(&mut self, to: Ipv4Addr, timeout: Duration) -> io::Result<Option<Duration>> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let started = Instant::now();
        let sent = crate::forward::wall_ns();
        self.socket.send_to(
            &echo_request(self.id, seq),
            &SocketAddrV4::new(to, 0).into(),
        )?;
        let mut buf = [0u8; 1500];
        let mut control = [0u64; 8];
        loop {
            let left = timeout.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Ok(None);
            }
            // At least 1 ms: a timeout that rounds down to zero would mean "wait for ever".
            self.socket
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
            let mut iov = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            };
            // SAFETY: plain old data.
            let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
            h.msg_iov = &mut iov;
            h.msg_iovlen = 1;
            h.msg_control = control.as_mut_ptr().cast();
            h.msg_controllen = std::mem::size_of_val(&control) as _;
            // SAFETY: the header points at `buf` and `control`, which live for the call.
            let n =
                unsafe { libc::recvmsg(std::os::fd::AsRawFd::as_raw_fd(&self.socket), &mut h, 0) };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => return Ok(None),
                    io::ErrorKind::Interrupted => continue,
                    _ => return Err(e),
                }
            }
            if echo_reply(&buf[..n as usize]) == Some((self.id, seq)) {
                let arrived =
                    crate::forward::arrival_ns(&h).unwrap_or_else(crate::forward::wall_ns);
                return Ok(Some(Duration::from_nanos(
                    arrived.saturating_sub(sent) as u64
                )));
            }
        }
    }
}

/// The `q` quantile of `samples` by nearest rank (0 < q ≤ 1; `None` when empty): the
/// smallest sample at or above which a share `q` of them lies.
pub fn percentile(samples: &[Duration], q: f64) -> Option<Duration> {
    let mut v = samples.to_vec();
    v.sort_unstable();
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len().max(1));
    v.get(rank - 1).copied()
}

/// The median of `samples` (the mean of the middle two for an even count; `None` when
/// empty).
pub fn median(samples: &[Duration]) -> Option<Duration> {
    let mut v = samples.to_vec();
    v.sort_unstable();
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_checksums_to_zero_and_a_reply_is_recognised() {
        let req = echo_request(0x1234, 7);
        assert_eq!(req.len(), 64);
        // A correct checksum makes the sum over the whole message come out as zero.
        assert_eq!(checksum(&req), 0);
        // The reply the peer sends: a 20-byte IPv4 header, then type 0 with the same ids.
        let mut reply = vec![0x45; 1];
        reply.extend([0u8; 19]);
        let mut icmp = req.clone();
        icmp[0] = 0;
        reply.extend(icmp);
        assert_eq!(echo_reply(&reply), Some((0x1234, 7)));
        // Our own request, seen by the raw socket, is not a reply.
        let mut own = vec![0x45];
        own.extend([0u8; 19]);
        own.extend(req);
        assert_eq!(echo_reply(&own), None);
        assert_eq!(echo_reply(&[0x45, 0]), None);
    }

    #[test]
    fn median_takes_the_middle() {
        let ms = Duration::from_millis;
        assert_eq!(median(&[ms(3), ms(1), ms(2)]), Some(ms(2)));
        assert_eq!(
            median(&[ms(4), ms(1), ms(2), ms(3)]),
            Some(Duration::from_micros(2500))
        );
        assert_eq!(median(&[]), None);
        let hundred: Vec<Duration> = (1..=100).rev().map(ms).collect();
        assert_eq!(percentile(&hundred, 0.95), Some(ms(95)));
        assert_eq!(percentile(&hundred, 1.0), Some(ms(100)));
        assert_eq!(percentile(&[ms(7)], 0.95), Some(ms(7)));
        assert_eq!(percentile(&[], 0.95), None);
    }
}
