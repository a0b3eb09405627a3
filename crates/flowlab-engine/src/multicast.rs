//! A multicast test's sockets: the client's, which sends one UDP stream to a group, and
//! each receiving server's, which joins the group for the test.

use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, UdpSocket};

use flowlab_proto::params::Multicast;
use socket2::{Domain, Protocol, Socket, Type};

/// The sending socket: its datagrams leave by the interface holding `via` (the address
/// it is bound to, so it is their source too), at most `ttl` routers far, to `group`.
/// On `dev` when given (`--bind-dev`).
pub fn sender(
    group: SocketAddr,
    via: IpAddr,
    ttl: u32,
    dev: Option<&str>,
) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(group), Type::DGRAM, Some(Protocol::UDP))?;
    if let Some(dev) = dev {
        s.bind_device(Some(dev.as_bytes()))
            .map_err(|e| said(format!("--bind-dev {dev}"), e))?;
    }
    let via = via.to_canonical();
    match (group.ip(), via) {
        (IpAddr::V4(_), IpAddr::V4(v)) => {
            s.set_multicast_if_v4(&v)?;
            s.set_multicast_ttl_v4(ttl)?;
        }
        (IpAddr::V6(_), IpAddr::V6(v)) => {
            s.set_multicast_if_v6(interface_index(v)?)?;
            s.set_multicast_hops_v6(ttl)?;
        }
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "group {} and source address {via} are of different families",
                    group.ip()
                ),
            ));
        }
    }
    s.bind(&SocketAddr::new(via, 0).into())
        .map_err(|e| said(format!("cannot bind {via}"), e))?;
    s.connect(&group.into()).map_err(|e| {
        said(
            format!(
                "sending to group {} by the interface holding {via}",
                group.ip()
            ),
            e,
        )
    })?;
    Ok(s.into())
}

/// A receiver's socket: bound to the group's address and port, joined on the interface
/// holding `local` (the address the client reached this server at) — for the client's
/// address alone when `m.source_specific` — and connected to the client's socket, so it
/// takes no other sender's datagrams. On `dev` when given (`serve --bind-dev`).
pub fn join(m: &Multicast, local: IpAddr, dev: Option<&str>) -> io::Result<UdpSocket> {
    let s = Socket::new(
        Domain::for_address(m.group),
        Type::DGRAM,
        Some(Protocol::UDP),
    )?;
    // The server's own UDP listener may hold the group's port number (its wildcard
    // address overlaps the group's); it takes no group's datagrams (`quiet_listener`).
    s.set_reuse_address(true)?;
    if let Some(dev) = dev {
        s.bind_device(Some(dev.as_bytes()))?;
    }
    s.bind(&m.group.into())?;
    match (m.group.ip(), local.to_canonical(), m.source.ip()) {
        (IpAddr::V4(group), IpAddr::V4(local), IpAddr::V4(source)) => {
            if m.source_specific {
                s.join_ssm_v4(&source, &group, &local)?;
            } else {
                s.join_multicast_v4(&group, &local)?;
            }
        }
        (IpAddr::V6(group), IpAddr::V6(local), IpAddr::V6(source)) => {
            let index = interface_index(local)?;
            if m.source_specific {
                join_ssm_v6(&s, source, group, index)?;
            } else {
                s.join_multicast_v6(&group, index)?;
            }
        }
        (_, local, _) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "the client reached this server at {local}, not an address of group {}'s family",
                    m.group.ip()
                ),
            ));
        }
    }
    s.connect(&m.source.into())?;
    Ok(s.into())
}

/// Keeps a server's wildcard UDP listener out of every group the host joins for a test:
/// by default Linux hands a socket bound to the wildcard address the datagrams of every
/// group any socket of the host joined.
pub fn quiet_listener(s: &Socket, ipv6: bool) {
    let _ = s.set_multicast_all_v4(false);
    if ipv6 {
        let _ = s.set_multicast_all_v6(false);
    }
}

/// MCAST_JOIN_SOURCE_GROUP: socket2 joins source-specific groups for IPv4 only.
fn join_ssm_v6(s: &Socket, source: Ipv6Addr, group: Ipv6Addr, index: u32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    fn put(storage: &mut libc::sockaddr_storage, ip: Ipv6Addr) {
        // SAFETY: a sockaddr_storage is large and aligned enough for any sockaddr.
        let sin6 =
            unsafe { &mut *(storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
        sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        sin6.sin6_addr.s6_addr = ip.octets();
    }
    // SAFETY: all-zero is a valid group_source_req (integers and byte arrays).
    let mut req: libc::group_source_req = unsafe { std::mem::zeroed() };
    req.gsr_interface = index;
    put(&mut req.gsr_group, group);
    put(&mut req.gsr_source, source);
    // SAFETY: a valid socket, and a pointer to an initialised struct of the length given.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_IPV6,
            libc::MCAST_JOIN_SOURCE_GROUP,
            (&req as *const libc::group_source_req).cast::<libc::c_void>(),
            std::mem::size_of::<libc::group_source_req>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The index of the interface holding IPv6 address `addr`.
fn interface_index(addr: Ipv6Addr) -> io::Result<u32> {
    let name = nix::ifaddrs::getifaddrs()
        .map_err(io::Error::from)?
        .find(|i| {
            i.address
                .and_then(|a| a.as_sockaddr_in6().map(|s| s.ip()))
                .is_some_and(|ip| ip == addr)
        })
        .map(|i| i.interface_name)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("no interface holds {addr}"),
            )
        })?;
    nix::net::if_::if_nametoindex(name.as_str()).map_err(io::Error::from)
}

fn said(what: String, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}
