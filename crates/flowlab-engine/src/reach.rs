//! What every client of a flowlab server does first: resolve the server's name, draw a
//! random session number, and, on a side connection (TCP probes, load-generating
//! connections), read the server's admission.

use std::io::Read;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};

use flowlab_proto::credential::{TICKET_LEN, ticket_of};
use flowlab_proto::fragment::{Admission, Decoder};
use flowlab_results::spec::IpFamily;

use crate::credentials::ClientAuth;

/// A server name that gives no address to connect to.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("cannot resolve '{host}': {source}")]
    Lookup {
        host: String,
        source: std::io::Error,
    },
    #[error("cannot resolve '{0}': no address")]
    NoAddress(String),
    #[error("'{host}' has no {} address ({flag})", family.name())]
    NoAddressOf {
        host: String,
        family: IpFamily,
        flag: &'static str,
    },
}

/// Every address `host` resolves to, with `port` (at least one), of `family` alone when
/// one is given (`-4`, `-6`).
pub fn addresses(
    host: &str,
    port: u16,
    family: Option<IpFamily>,
) -> Result<Vec<SocketAddr>, ResolveError> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|source| ResolveError::Lookup {
            host: host.to_string(),
            source,
        })?
        .collect();
    if addrs.is_empty() {
        return Err(ResolveError::NoAddress(host.to_string()));
    }
    match family {
        None => Ok(addrs),
        Some(f) => {
            let of: Vec<SocketAddr> = addrs.into_iter().filter(|a| f.holds(a)).collect();
            if of.is_empty() {
                return Err(ResolveError::NoAddressOf {
                    host: host.to_string(),
                    family: f,
                    flag: if f == IpFamily::Ipv4 { "-4" } else { "-6" },
                });
            }
            Ok(of)
        }
    }
}

/// The first address `host` resolves to, with `port`.
pub fn address(host: &str, port: u16) -> Result<SocketAddr, ResolveError> {
    Ok(addresses(host, port, None)?[0])
}

/// A random session number, never zero, so that replies meant for another run are never
/// counted. Without an entropy source the clock still tells runs apart.
pub(crate) fn session() -> u64 {
    let mut b = [0u8; 8];
    if getrandom::fill(&mut b).is_err() {
        return crate::cpu::unix_now_ns() | 1;
    }
    u64::from_ne_bytes(b) | 1
}

/// Why a server did not admit a side connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Too many connections: the server's message says which limit.
    #[error("{0}")]
    Busy(String),
    /// The credential is missing or refused.
    #[error("{0}")]
    Denied(String),
}

/// Reads the admission a server answers a side connection's hello with, one byte at a
/// time, so that nothing after it is taken from the connection: `Ok(())` when welcome,
/// `Err(why)` when refused (busy, or denied). `auth` says whether the hello carried a
/// credential (version 2): then a ticket, or zeros, follows the welcome, and a ticket is
/// kept in it.
pub(crate) fn read_admission(
    c: &mut TcpStream,
    auth: Option<&ClientAuth>,
) -> std::io::Result<Result<(), Refusal>> {
    let mut d = Decoder::default();
    let mut b = [0u8; 1];
    let admission = loop {
        if let Some(a) = d.next_admission().map_err(std::io::Error::other)? {
            break a;
        }
        c.read_exact(&mut b)?;
        d.push(&b);
    };
    Ok(match admission {
        Admission::Welcome => {
            if let Some(auth) = auth {
                let mut reply = [0u8; TICKET_LEN];
                c.read_exact(&mut reply)?;
                if let Some(k) = ticket_of(&reply) {
                    auth.keep(k);
                }
            }
            Ok(())
        }
        Admission::Busy(message) => Err(Refusal::Busy(message)),
        Admission::Denied => Err(Refusal::Denied(match auth {
            Some(auth) => {
                // A ticket the server no longer knows: the next connection shows a token.
                auth.forget_ticket();
                "authentication failed".into()
            }
            None => {
                "the server authenticates its clients: give --username and --rsa-public-key-path"
                    .into()
            }
        })),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_keeps_its_addresses_or_says_there_are_none() {
        let v4 = addresses("127.0.0.1", 5201, Some(IpFamily::Ipv4)).expect("an IPv4 address");
        assert!(v4.iter().all(|a| a.is_ipv4()));
        let e = addresses("127.0.0.1", 5201, Some(IpFamily::Ipv6)).expect_err("no IPv6");
        assert_eq!(e.to_string(), "'127.0.0.1' has no IPv6 address (-6)");
        let e = addresses("::1", 5201, Some(IpFamily::Ipv4)).expect_err("no IPv4");
        assert_eq!(e.to_string(), "'::1' has no IPv4 address (-4)");
    }

    #[test]
    fn a_name_without_addresses_is_refused_by_name() {
        let e = address("no-such-host.invalid", 5201).expect_err("no address");
        assert!(e.to_string().contains("'no-such-host.invalid'"), "{e}");
        assert_eq!(
            address("127.0.0.1", 5201).expect("an address"),
            SocketAddr::from(([127, 0, 0, 1], 5201))
        );
    }

    #[test]
    fn sessions_are_never_zero_and_differ() {
        let (a, b) = (session(), session());
        assert!(a != 0 && b != 0 && a != b);
    }
}
