//! Whether a test is served: a client's parameters checked against what the server can
//! and may do (`--max-duration`, `--max-bitrate`, `--max-bytes`).

use flowlab_proto::params::{MAX_PARALLEL, Mode, Multicast, Protocol, TestParams};
use flowlab_results::spec::{MAX_UDP_LEN, MAX_WINDOW};

use super::ServerConfig;
use crate::negotiate::block_len;

/// Why a test is refused: told to a flowlab client in its hello, logged by the server.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum Refusal {
    #[error("only TCP and UDP tests are served")]
    Protocol,
    #[error("{0} parallel streams asked for; 1 to {MAX_PARALLEL} are served")]
    Parallel(u64),
    #[error("block length {asked} is above the largest served ({max})")]
    BlockLength { asked: u64, max: u64 },
    #[error("stop-and-wait needs a message length")]
    NoMessageLength,
    #[error("tests are limited to {max} s here (--max-duration); asked for {asked} s")]
    Duration { max: u64, asked: u64 },
    #[error("tests are limited to {max} bit/s here (--max-bitrate); ask for less with -b")]
    Bitrate { max: u64 },
    #[error("tests are limited to {max} bytes here (--max-bytes); asked for {asked}")]
    Bytes { max: u64, asked: u64 },
    #[error("this server lacks the extension '{0}'")]
    Extension(String),
    #[error("a socket buffer of {0} bytes asked for (-w); at most {max} can be set", max = MAX_WINDOW)]
    Window(u64),
    #[error(
        "this server moves a file (-F): it serves TCP tests of one stream one way, without \
         stop-and-wait"
    )]
    FileTest,
    #[error("CPU {asked} asked for (-A); this server runs on CPUs {allowed}")]
    Affinity { asked: u64, allowed: String },
    #[error(
        "MPTCP (-m) is not served here: this server's system makes no MPTCP socket (a \
         kernel without MPTCP, or net.mptcp.enabled = 0), and an MPTCP client's streams \
         would fall back to plain TCP without saying so"
    )]
    Mptcp,
    #[error(
        "UDP segments of {dg} bytes asked for (gso_dg_size) in a test of {len}-byte \
         datagrams: the two must be one"
    )]
    GsoDatagram { dg: u64, len: u64 },
    #[error(
        "this server writes what it receives to its file (-F): --skip-rx-copy would \
         discard it"
    )]
    SkipWithFile,
    #[error("a multicast test {0}")]
    Multicast(&'static str),
    #[error("multicast: {0}")]
    Join(String),
}

impl Refusal {
    /// The errno an iperf3 client is told with the refusal (it prints its text after
    /// "unable to receive parameters from client").
    pub(super) fn errno(&self) -> i32 {
        match self {
            Refusal::Protocol | Refusal::Mptcp => libc::EPROTONOSUPPORT,
            _ => libc::EINVAL,
        }
    }
}

/// Checks a client's parameters against what the server can and may do (`mptcp`: its
/// TCP listener is MPTCP).
pub(super) fn validate(
    p: &TestParams,
    cfg: &ServerConfig,
    mptcp: bool,
) -> Result<Protocol, Refusal> {
    let proto = p.protocol().ok_or(Refusal::Protocol)?;
    if p.mptcp && !mptcp {
        return Err(Refusal::Mptcp);
    }
    let len = block_len(p, proto) as u64;
    if proto == Protocol::Udp && p.gso_dg_size != 0 && p.gso_dg_size != len {
        return Err(Refusal::GsoDatagram {
            dg: p.gso_dg_size,
            len,
        });
    }
    if !(1..=MAX_PARALLEL).contains(&p.parallel) {
        return Err(Refusal::Parallel(p.parallel));
    }
    let max_len = if proto == Protocol::Udp {
        MAX_UDP_LEN as u64
    } else {
        16 << 20
    };
    if p.len > max_len {
        return Err(Refusal::BlockLength {
            asked: p.len,
            max: max_len,
        });
    }
    if p.flowlab
        .as_ref()
        .is_some_and(|f| f.mode == Mode::StopAndWait)
        && p.len == 0
    {
        return Err(Refusal::NoMessageLength);
    }
    let windows = [
        p.window,
        p.flowlab.as_ref().and_then(|f| f.recv_window).unwrap_or(0),
    ];
    if let Some(&w) = windows.iter().find(|&&w| w > MAX_WINDOW) {
        return Err(Refusal::Window(w));
    }
    let seconds = p.time.saturating_add(p.omit);
    if let Some(max) = cfg.max_duration {
        if p.time == 0 && p.num == 0 && p.blockcount == 0 || seconds > max.as_secs() {
            return Err(Refusal::Duration {
                max: max.as_secs(),
                asked: seconds,
            });
        }
    }
    let stop_and_wait = p
        .flowlab
        .as_ref()
        .is_some_and(|f| f.mode == Mode::StopAndWait);
    if cfg.file.is_some()
        && (proto != Protocol::Tcp || p.parallel != 1 || p.bidirectional || stop_and_wait)
    {
        return Err(Refusal::FileTest);
    }
    if cfg.file.is_some() && p.skip_rx_copy && !p.reverse {
        return Err(Refusal::SkipWithFile);
    }
    if let Some(m) = p.flowlab.as_ref().and_then(|f| f.multicast.as_ref()) {
        multicast(p, proto, m)?;
    }
    if let Some(cpu) = p.server_affinity {
        let allowed = crate::cpu::allowed_cpus();
        if !allowed.contains(&(cpu as usize)) {
            return Err(Refusal::Affinity {
                asked: cpu,
                allowed: crate::cpu::cpu_list(&allowed),
            });
        }
    }
    if let Some(max) = cfg.max_bitrate {
        let asked = p.bandwidth.saturating_mul(p.stream_count());
        if p.bandwidth == 0 || asked > max {
            return Err(Refusal::Bitrate { max });
        }
    }
    if let Some(max) = cfg.max_bytes {
        // -n and -k count per direction; the limit, like its enforcement in
        // `wait_for_end`, counts both directions of a --bidir test.
        let per_direction = p
            .num
            .max(p.blockcount.saturating_mul(block_len(p, proto) as u64));
        let asked = per_direction.saturating_mul(if p.bidirectional { 2 } else { 1 });
        if asked > max {
            return Err(Refusal::Bytes { max, asked });
        }
    }
    Ok(proto)
}

/// What a multicast test must be for this server to join its group: one UDP stream the
/// client sends, to a group, from an address of the group's family. A server never
/// sends to a group: a client could not make it flood a network.
fn multicast(p: &TestParams, proto: Protocol, m: &Multicast) -> Result<(), Refusal> {
    let why = if proto != Protocol::Udp {
        Some("is UDP")
    } else if p.reverse || p.bidirectional {
        Some("is sent by the client: a server never sends to a group")
    } else if p.parallel != 1 {
        Some("is one stream")
    } else if p
        .flowlab
        .as_ref()
        .is_some_and(|f| f.mode != Mode::Streaming)
    {
        Some("streams (a group cannot acknowledge)")
    } else if !m.group.ip().is_multicast() || m.group.port() == 0 {
        Some("needs a multicast group address and a port")
    } else if m.source.is_ipv4() != m.group.is_ipv4() || m.source.ip().is_unspecified() {
        Some("needs the sender's address, of the group's family")
    } else {
        None
    };
    why.map_or(Ok(()), |w| Err(Refusal::Multicast(w)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowlab_proto::params::FlowlabParams;

    #[test]
    fn a_multicast_test_is_one_udp_stream_the_client_sends_to_a_group() {
        let cfg = ServerConfig::default();
        let m = Multicast {
            group: "239.255.0.1:5201".parse().unwrap(),
            source: "10.0.0.1:40000".parse().unwrap(),
            source_specific: false,
        };
        let p = |m: Multicast, edit: fn(&mut TestParams)| {
            let mut p = TestParams {
                udp: Some(true),
                time: 1,
                parallel: 1,
                flowlab: Some(FlowlabParams {
                    version: 1,
                    multicast: Some(m),
                    ..FlowlabParams::default()
                }),
                ..TestParams::default()
            };
            edit(&mut p);
            validate(&p, &cfg, false)
        };
        assert_eq!(p(m.clone(), |_| {}), Ok(Protocol::Udp));
        let refused = |r: Result<Protocol, Refusal>| r.unwrap_err().to_string();
        assert!(refused(p(m.clone(), |p| p.reverse = true)).contains("never sends"));
        assert!(refused(p(m.clone(), |p| p.bidirectional = true)).contains("never sends"));
        assert!(refused(p(m.clone(), |p| p.parallel = 2)).contains("one stream"));
        assert!(
            refused(p(m.clone(), |p| {
                p.udp = None;
                p.tcp = Some(true);
            }))
            .contains("is UDP")
        );
        let unicast = Multicast {
            group: "10.0.0.2:5201".parse().unwrap(),
            ..m.clone()
        };
        assert!(refused(p(unicast, |_| {})).contains("multicast group address"));
        let mixed = Multicast {
            source: "[fd00::1]:40000".parse().unwrap(),
            ..m.clone()
        };
        assert!(refused(p(mixed, |_| {})).contains("group's family"));
    }

    #[test]
    fn max_bytes_counts_both_directions_of_a_bidir_test_and_the_default_length() {
        let cfg = ServerConfig {
            max_bytes: Some(1_000_000),
            ..ServerConfig::default()
        };
        let p = |num, blockcount, bidirectional| TestParams {
            udp: Some(true),
            num,
            blockcount,
            bidirectional,
            parallel: 1,
            ..TestParams::default()
        };
        assert!(validate(&p(600_000, 0, false), &cfg, false).is_ok());
        let e = validate(&p(600_000, 0, true), &cfg, false).unwrap_err();
        assert_eq!(
            e,
            Refusal::Bytes {
                max: 1_000_000,
                asked: 1_200_000
            }
        );
        assert!(e.to_string().contains("asked for 1200000"), "{e}");
        // -k with UDP's default 1460-byte datagrams: 700 × 1460 = 1 022 000.
        assert!(validate(&p(0, 600, false), &cfg, false).is_ok());
        assert!(validate(&p(0, 700, false), &cfg, false).is_err());
    }
}
