//! Who a peer is for a limit per source: the one rule every flowlab server (the native
//! one, the fragment service, the HTTP listener) counts connections and transfers by.

use std::net::{IpAddr, Ipv6Addr};

/// The address a per-source limit counts a peer under: an IPv4 address (also when seen
/// through an IPv6 socket as `::ffff:a.b.c.d`), or an IPv6 address's /64 — one site's
/// prefix, so a host cannot slip past a per-source limit by walking the addresses of its
/// own /64.
pub fn source_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn an_ipv6_source_is_its_64_and_a_mapped_ipv4_address_is_itself() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff:1:2:3".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(source_key(a), source_key(b));
        assert_ne!(source_key(a), source_key(c));
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(source_key(mapped), IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7)));
        let v4: IpAddr = "192.0.2.8".parse().unwrap();
        assert_eq!(source_key(v4), v4);
    }
}
