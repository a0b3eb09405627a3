//! Decoding what Linux says of an MPTCP connection (sans-IO: bytes in, figures out).
//!
//! Three `SOL_MPTCP` options of `include/uapi/linux/mptcp.h`: `MPTCP_INFO`, the
//! connection's `struct mptcp_info`; `MPTCP_TCPINFO` and `MPTCP_SUBFLOW_ADDRS`, each a
//! `struct mptcp_subflow_data` header followed by one element per subflow (a
//! `struct tcp_info`, a pair of socket addresses). As with `tcp_info`, the kernel copies
//! as much as both sides know: a field past what it returned is `None`, never a zero.

use flowlab_results::result::MptcpSubflow;

use crate::tcpinfo::{u32_at, u64_at};

/// `SOL_MPTCP` and its options (not in the libc crate).
pub const SOL_MPTCP: libc::c_int = 284;
pub const MPTCP_INFO: libc::c_int = 1;
pub const MPTCP_TCPINFO: libc::c_int = 2;
pub const MPTCP_SUBFLOW_ADDRS: libc::c_int = 3;

/// Bytes of the largest `struct mptcp_info` read (Linux 6.10: up to
/// `mptcpi_last_ack_recv`).
pub const INFO_MAX: usize = 96;

/// `struct mptcp_subflow_data`: four u32s, 8-byte aligned.
pub const HEADER: usize = 16;

/// One element of `MPTCP_SUBFLOW_ADDRS`: two `sockaddr_storage`s.
pub const ADDRS_LEN: usize = 256;

/// Field offsets in `struct mptcp_info`.
mod off {
    pub const FLAGS: usize = 8; // u32, 5.16
    pub const BYTES_RETRANS: usize = 48; // u64, 6.5
    pub const BYTES_SENT: usize = 56; // u64, 6.5
    pub const BYTES_RECEIVED: usize = 64; // u64, 6.5
}

/// `MPTCP_INFO_FLAG_FALLBACK`.
const FLAG_FALLBACK: u64 = 1;

/// What a test's end takes from `struct mptcp_info`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MptcpInfo {
    pub fallback: bool,
    pub bytes_sent: Option<u64>,
    pub bytes_retransmitted: Option<u64>,
    pub bytes_received: Option<u64>,
}

fn u16_be_at(raw: &[u8], at: usize) -> Option<u16> {
    let b: [u8; 2] = raw.get(at..at + 2)?.try_into().ok()?;
    Some(u16::from_be_bytes(b))
}

/// Decodes the bytes of `struct mptcp_info` the kernel returned.
pub fn info(raw: &[u8]) -> MptcpInfo {
    use off::*;
    MptcpInfo {
        fallback: u32_at(raw, FLAGS).unwrap_or(0) & FLAG_FALLBACK != 0,
        bytes_sent: u64_at(raw, BYTES_SENT),
        bytes_retransmitted: u64_at(raw, BYTES_RETRANS),
        bytes_received: u64_at(raw, BYTES_RECEIVED),
    }
}

/// A `struct mptcp_subflow_data` header asking for elements of `element` bytes.
pub fn request(element: usize) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[0..4].copy_from_slice(&(HEADER as u32).to_ne_bytes());
    h[12..16].copy_from_slice(&(element as u32).to_ne_bytes());
    h
}

/// The elements of a reply to [`request`]: as many as the kernel has subflows and the
/// reply holds, each as many bytes as both the kernel and the request know.
pub fn elements(reply: &[u8]) -> Vec<&[u8]> {
    let (Some(count), Some(kernel), Some(user)) =
        (u32_at(reply, 4), u32_at(reply, 8), u32_at(reply, 12))
    else {
        return Vec::new();
    };
    let (kernel, user) = (kernel as usize, user as usize);
    if user == 0 {
        return Vec::new();
    }
    let body = reply.get(HEADER..).unwrap_or_default();
    body.chunks(user)
        .take(count as usize)
        .filter(|e| e.len() == user)
        .map(|e| &e[..user.min(kernel)])
        .collect()
}

/// A `sockaddr_in` or `sockaddr_in6` as `address:port` (`[v6]:port`).
fn socket_address(raw: &[u8]) -> Option<String> {
    let family = u16::from_ne_bytes(raw.get(0..2)?.try_into().ok()?);
    let port = u16_be_at(raw, 2)?;
    let ip: std::net::IpAddr = match libc::c_int::from(family) {
        libc::AF_INET => <[u8; 4]>::try_from(raw.get(4..8)?).ok()?.into(),
        libc::AF_INET6 => <[u8; 16]>::try_from(raw.get(8..24)?).ok()?.into(),
        _ => return None,
    };
    Some(std::net::SocketAddr::new(ip, port).to_string())
}

/// One subflow from its `tcp_info` and its addresses (an `MPTCP_SUBFLOW_ADDRS`
/// element).
pub fn subflow(tcp_info: &[u8], addrs: &[u8]) -> MptcpSubflow {
    let info = crate::tcpinfo::totals(tcp_info);
    let half = ADDRS_LEN / 2;
    let side = |at: usize| {
        addrs
            .get(at..at + half)
            .and_then(socket_address)
            .unwrap_or_else(|| "unknown".into())
    };
    MptcpSubflow {
        local: side(0),
        remote: side(half),
        bytes_acked: crate::tcpinfo::bytes_acked(tcp_info).unwrap_or(0),
        bytes_received: crate::tcpinfo::bytes_received(tcp_info).unwrap_or(0),
        retransmits: info.total_retrans,
        rtt_us: info.rtt_us,
        cwnd_bytes: info.snd_cwnd_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_info_leaves_the_newer_counts_unknown() {
        let mut raw = vec![0u8; INFO_MAX];
        raw[off::BYTES_SENT..off::BYTES_SENT + 8].copy_from_slice(&7_000u64.to_ne_bytes());
        raw[off::BYTES_RECEIVED..off::BYTES_RECEIVED + 8].copy_from_slice(&9u64.to_ne_bytes());
        let full = info(&raw);
        assert_eq!(
            (
                full.bytes_sent,
                full.bytes_received,
                full.bytes_retransmitted
            ),
            (Some(7_000), Some(9), Some(0))
        );
        assert!(!full.fallback);
        // Linux 5.16's struct ends after mptcpi_csum_enabled (at 43).
        let old = info(&raw[..44]);
        assert_eq!((old.bytes_sent, old.bytes_received), (None, None));
        raw[off::FLAGS] = 1;
        assert!(info(&raw).fallback);
    }

    #[test]
    fn elements_are_cut_to_what_both_sides_know() {
        let mut reply = request(8).to_vec();
        reply[4..8].copy_from_slice(&2u32.to_ne_bytes());
        reply[8..12].copy_from_slice(&6u32.to_ne_bytes()); // the kernel's are shorter
        reply.extend_from_slice(&[1, 1, 1, 1, 1, 1, 0, 0, 2, 2, 2, 2, 2, 2, 0, 0, 9, 9]);
        assert_eq!(elements(&reply), vec![&[1u8; 6][..], &[2u8; 6][..]]);
        // More subflows than the reply holds: those it holds.
        reply[4..8].copy_from_slice(&5u32.to_ne_bytes());
        assert_eq!(elements(&reply).len(), 2);
        assert!(elements(&reply[..10]).is_empty());
    }

    #[test]
    fn addresses_read_in_both_families() {
        let mut addrs = vec![0u8; ADDRS_LEN];
        addrs[0..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        addrs[2..4].copy_from_slice(&5201u16.to_be_bytes());
        addrs[4..8].copy_from_slice(&[10, 0, 1, 2]);
        let r = ADDRS_LEN / 2;
        addrs[r..r + 2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        addrs[r + 2..r + 4].copy_from_slice(&80u16.to_be_bytes());
        addrs[r + 8..r + 24].copy_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
        let s = subflow(&[], &addrs);
        assert_eq!(
            (s.local.as_str(), s.remote.as_str()),
            ("10.0.1.2:5201", "[::1]:80")
        );
        assert_eq!(subflow(&[], &[]).local, "unknown");
    }
}
