//! `flowlab test`'s arguments, and the parsers of their values.

use std::str::FromStr;

use clap::Args as ClapArgs;
use flowlab_report::TestFormat;
use flowlab_report::units::UnitFormat;
use flowlab_results::units;

#[derive(Debug, ClapArgs)]
#[command(group(clap::ArgGroup::new("to").args(["host", "client"]).required(true)))]
pub struct Args {
    /// Server to test against (name, IPv4 or IPv6 address).
    pub host: Option<String>,
    /// The server, spelt as iperf3's client takes it (`-c HOST`): the same as HOST.
    #[arg(short = 'c', long = "client", value_name = "HOST")]
    pub client: Option<String>,
    /// Server port [default: 5201; with --quic 4433].
    #[arg(short, long)]
    pub port: Option<u16>,
    /// Seconds to send (default 10), fractions allowed (1.5, or 1500ms); at most a day.
    #[arg(short, long, value_name = "SECONDS", group = "amount")]
    pub time: Option<String>,
    /// Parallel streams.
    #[arg(short = 'P', long, default_value_t = 1, value_name = "N")]
    pub parallel: u32,
    /// The server sends, the client receives.
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    pub reverse: bool,
    /// Both directions at once.
    #[arg(long)]
    pub bidir: bool,
    /// UDP instead of TCP.
    #[arg(short, long)]
    pub udp: bool,
    /// QUIC instead of TCP: the QUIC performance protocol (ALPN "perf"), against
    /// `flowlab serve --quic` or another stack's perf server; -P streams share one
    /// connection; -C picks the stack's congestion control (cubic, reno, bbr).
    #[arg(long, conflicts_with = "udp")]
    pub quic: bool,
    /// With --quic: each stream on a QUIC connection of its own.
    #[arg(long, requires = "quic")]
    pub quic_connections: bool,
    /// Target rate per stream, bits/s (e.g. 100M); 0 = unlimited. UDP default: unlimited.
    /// `/N` sends N blocks back to back at a time (iperf3's burst, 1 to 1000).
    #[arg(short = 'b', long = "bitrate", value_parser = parse_bitrate, value_name = "RATE[/BURST]")]
    pub bitrate: Option<Bitrate>,
    /// Seconds between interval reports; 0 for none.
    #[arg(short, long, default_value_t = 1.0, value_name = "SECONDS")]
    pub interval: f64,
    /// Sample TCP_INFO of every stream on both ends this often (1ms…1s; default 10ms)
    /// and explain what limited the transfer.
    #[arg(help_heading = "Diagnosis", long, value_name = "PERIOD", num_args = 0..=1, default_missing_value = "10ms", require_equals = true)]
    pub trace: Option<String>,
    /// Write the trace samples to FILE as CSV (implies --trace).
    #[arg(help_heading = "Diagnosis", long, value_name = "FILE")]
    pub trace_csv: Option<std::path::PathBuf>,
    /// Measure round trips under load: UDP probes to the server's echo this often
    /// (1ms…1s; default 10ms), 20 before the load (idle) and beside it all along; each
    /// interval and the summary show their percentiles and what the load added.
    #[arg(help_heading = "Diagnosis", long, value_name = "INTERVAL", num_args = 0..=1, default_missing_value = "10ms", require_equals = true)]
    pub latency: Option<String>,
    /// Bytes to send in total per direction, exactly (e.g. 100M).
    #[arg(help_heading = "Load", short = 'n', long = "bytes", value_parser = units::parse_size, value_name = "SIZE", group = "amount")]
    pub bytes: Option<u64>,
    /// Writes or datagrams to send in total per direction (K = 1024, as iperf3's).
    #[arg(help_heading = "Load", 
        short = 'k',
        long = "blockcount",
        value_name = "COUNT",
        value_parser = units::parse_size,
        group = "amount"
    )]
    pub blocks: Option<u64>,
    /// Bytes per write (TCP, default 128K) or per datagram (UDP, default 1460).
    #[arg(help_heading = "Load", short = 'l', long = "length", value_parser = units::parse_size, value_name = "SIZE")]
    pub length: Option<u64>,
    /// Seconds at the start not counted (TCP slow start).
    #[arg(
        help_heading = "Load",
        short = 'O',
        long,
        default_value_t = 0,
        value_name = "SECONDS"
    )]
    pub omit: u64,
    /// Socket buffer size on both ends (e.g. 4M).
    #[arg(help_heading = "Load", short = 'w', long = "window", value_parser = units::parse_size, value_name = "SIZE")]
    pub window: Option<u64>,
    /// TCP, one stream: send FILE's content, once, as the test's data (its size is the
    /// amount); with -R, write what is received to FILE (iperf3's -F).
    #[arg(help_heading = "Load", short = 'F', long, value_name = "FILE")]
    pub file: Option<std::path::PathBuf>,
    /// Send with sendfile(2) (zero copy).
    #[arg(help_heading = "Load", short = 'Z', long)]
    pub zerocopy: bool,
    /// Senders fill their writes with the digits 0 to 9 over and over (iperf3's pattern)
    /// instead of flowlab's 251-byte one; both ends.
    #[arg(help_heading = "Load", long)]
    pub repeating_payload: bool,
    /// UDP at unlimited rate: do not slow down when the receiving socket overflows, nor
    /// wait for the receiver's progress (send blindly, as iperf3 does). Only a flowlab
    /// server reports either.
    #[arg(help_heading = "UDP", long)]
    pub no_backoff: bool,
    /// UDP: do not wait for the flowlab receiver's progress (keep no more unread than its
    /// window); at unlimited rate slow down only when its socket overflows, paced (-b)
    /// send at the rate whatever the receiver does.
    #[arg(help_heading = "UDP", long)]
    pub no_window: bool,
    /// Each message waits for the receiver's acknowledgement before the next.
    #[arg(help_heading = "UDP", long)]
    pub stop_and_wait: bool,
    /// Stop-and-wait over UDP: retransmission timeout, milliseconds [default: 1000].
    #[arg(help_heading = "UDP", long, value_name = "MS")]
    pub rto: Option<u64>,
    /// UDP: set the IPv4 Don't Fragment bit (path MTU discovery) on both ends' data
    /// sockets: a datagram larger than the path's MTU fails instead of being fragmented.
    #[arg(help_heading = "UDP", long)]
    pub dont_fragment: bool,
    /// Multicast: HOST is a group address (e.g. 239.255.0.1, ff15::1) to which the
    /// client sends one UDP stream (to -p's port); these flowlab servers (HOST or
    /// HOST:PORT, comma-separated) join the group for the test and report what reached
    /// each: its own loss, jitter, duplicates and reordering.
    #[arg(
        help_heading = "UDP",
        long,
        value_name = "HOST[:PORT],...",
        value_delimiter = ',',
        requires = "udp"
    )]
    pub receivers: Vec<String>,
    /// Multicast: the datagrams' TTL (IPv4) or hop limit (IPv6), 1 to 255: how many
    /// routers they may cross [default: 1, the sender's own network].
    #[arg(help_heading = "UDP", long, value_name = "N", requires = "receivers")]
    pub ttl: Option<u32>,
    /// Multicast: receivers join for this client's address only (source-specific
    /// multicast: IGMPv3, MLDv2), not for any sender to the group.
    #[arg(help_heading = "UDP", long, requires = "receivers")]
    pub source_specific: bool,
    /// MPTCP instead of plain TCP (iperf3 3.19's -m): each data stream, and the control
    /// connection, an MPTCP connection, whose subflows the kernel's path manager opens
    /// over the paths it knows; the end says each one's subflows and what each carried.
    #[arg(help_heading = "TCP", short = 'm', long, conflicts_with_all = ["udp", "quic"])]
    pub mptcp: bool,
    /// TCP congestion control algorithm (sender and receiver sockets).
    #[arg(
        help_heading = "TCP",
        short = 'C',
        long = "congestion",
        value_name = "ALGO"
    )]
    pub congestion: Option<String>,
    /// TCP congestion control of each stream's receiving end (replaces -C there).
    #[arg(help_heading = "TCP", long, value_name = "ALGO")]
    pub recv_congestion: Option<String>,
    /// Socket buffer of each stream's receiving end (replaces -w there), e.g. 8M.
    #[arg(help_heading = "TCP", long, value_parser = units::parse_size, value_name = "SIZE")]
    pub recv_window: Option<u64>,
    /// TCP maximum segment size.
    #[arg(
        help_heading = "TCP",
        short = 'M',
        long = "set-mss",
        value_name = "BYTES"
    )]
    pub mss: Option<u32>,
    /// TCP_NODELAY: no Nagle.
    #[arg(help_heading = "TCP", short = 'N', long)]
    pub no_delay: bool,
    /// The most each data socket sends, bit/s (e.g. 100M), paced by the kernel
    /// (SO_MAX_PACING_RATE) on both ends; TCP always, UDP where the interface's queueing
    /// discipline is fq.
    #[arg(help_heading = "TCP", long, value_parser = units::parse_rate, value_name = "RATE")]
    pub fq_rate: Option<u64>,
    /// TCP: a data stream whose data goes unacknowledged this many milliseconds fails
    /// (TCP_USER_TIMEOUT; iperf3's --snd-timeout).
    #[arg(help_heading = "TCP", long, value_name = "MS")]
    pub snd_timeout: Option<u64>,
    /// End the test, keeping what it measured, when its receiving streams get nothing for
    /// this many milliseconds (iperf3's --rcv-timeout; default: never).
    #[arg(help_heading = "TCP", long, value_name = "MS")]
    pub rcv_timeout: Option<u64>,
    /// Receivers, both ends, discard what they read in the kernel (recv(2) with
    /// MSG_TRUNC) instead of copying it: less CPU on the receiving side, the same bytes
    /// counted. UDP: each datagram read alone (no GRO), its header only copied.
    #[arg(help_heading = "Load", long)]
    pub skip_rx_copy: bool,
    /// TCP keepalive on the control connection (a long, quiet UDP test through a NAT or
    /// firewall that forgets idle connections): seconds idle before the first probe,
    /// seconds between probes, probes unanswered before it is dropped; any left off are
    /// the kernel's.
    #[arg(
        help_heading = "Connection",
        long = "cntl-ka",
        value_name = "IDLE/INTERVAL/COUNT",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "",
        value_parser = flowlab_results::spec::Keepalive::parse
    )]
    pub cntl_ka: Option<flowlab_results::spec::Keepalive>,
    /// Milliseconds to wait for the server to accept a connection.
    #[arg(
        help_heading = "Connection",
        long,
        default_value_t = 5000,
        value_name = "MS"
    )]
    pub connect_timeout: u64,
    /// The local address of the client's connections, with %DEV binding them to device DEV
    /// too (iperf3's -B).
    #[arg(
        help_heading = "Connection",
        short = 'B',
        long = "bind",
        value_name = "ADDRESS[%DEV]"
    )]
    pub bind: Option<String>,
    /// Data stream N (from 0, client-send streams first) leaves from local port PORT + N
    /// (iperf3's --cport).
    #[arg(help_heading = "Connection", long, value_name = "PORT")]
    pub cport: Option<u16>,
    /// Bind the client's connections to network device DEV (SO_BINDTODEVICE; iperf3's
    /// --bind-dev, also written HOST%DEV).
    #[arg(help_heading = "Connection", long, value_name = "DEV")]
    pub bind_dev: Option<String>,
    #[command(flatten, next_help_heading = "Connection")]
    pub family: crate::args::FamilyArgs,
    /// The IP type of service of the data streams, both ends, 0 to 255: decimal, octal
    /// (064) or hex (0x34), as iperf3's -S.
    #[arg(help_heading = "Connection", short = 'S', long = "tos", value_name = "N", value_parser = parse_tos, conflicts_with = "dscp")]
    pub tos: Option<u8>,
    /// The DSCP of the data streams: 0 to 63 (decimal, octal or hex) or a name (EF,
    /// AF11…AF43, CS0…CS7, LE, VOICE-ADMIT); the type of service is it shifted left by 2.
    #[arg(help_heading = "Connection", long, value_name = "N|NAME", value_parser = parse_dscp)]
    pub dscp: Option<u8>,
    /// The IPv6 flow label of the data streams, 1 to 1048575 (decimal, octal or hex; as
    /// iperf3's -L); the server must be reached over IPv6.
    #[arg(help_heading = "Connection", short = 'L', long, value_name = "N", value_parser = parse_flowlabel)]
    pub flowlabel: Option<u32>,
    /// Run the data streams on CPU N (iperf3's -A); `N,M` also runs the server's on its
    /// CPU M.
    #[arg(help_heading = "Connection", short = 'A', long, value_name = "N[,M]")]
    pub affinity: Option<String>,
    #[command(flatten, next_help_heading = "Connection")]
    pub credentials: crate::args::CredentialArgs,
    /// Units: k m g t (bits), K M G T (bytes), a (adaptive).
    #[arg(help_heading = "Output", short = 'f', long = "format", value_parser = UnitFormat::from_str, default_value = "a")]
    pub format: UnitFormat,
    /// Print one JSON document at the end.
    #[arg(help_heading = "Output", short = 'J', long, conflicts_with_all = ["json_stream", "iperf3_json"])]
    pub json: bool,
    /// Print one JSON line per event as it happens (with --iperf3-json: iperf3's
    /// --json-stream lines).
    #[arg(help_heading = "Output", long)]
    pub json_stream: bool,
    /// With --json-stream, print the whole JSON document as well at the end (-J's, or
    /// --iperf3-json's), as iperf3's --json-stream-full-output.
    #[arg(help_heading = "Output", long, requires = "json_stream")]
    pub json_stream_full_output: bool,
    /// Print one JSON document at the end in iperf3's shape (iperf3 -J's keys), for tools
    /// written for iperf3 (docs/json-schema.md).
    #[arg(help_heading = "Output", long)]
    pub iperf3_json: bool,
    /// Print iperf3's own text (iperf 3.12's lines and columns), for scripts that read
    /// iperf3's output; `flowlab iperf3 -c` prints it (docs/iperf3.md).
    #[arg(help_heading = "Output", long, conflicts_with_all = ["json", "json_stream", "iperf3_json"])]
    pub iperf3_text: bool,
    /// A title recorded with the result.
    #[arg(help_heading = "Output", short = 'T', long)]
    pub title: Option<String>,
    /// A string sent to the server and recorded with the result (iperf3's, which puts it
    /// in both ends' JSON); at most 1024 bytes.
    #[arg(help_heading = "Output", long, value_name = "STR")]
    pub extra_data: Option<String>,
    /// Ask for the server's own output for the test, printed after the result (iperf3's
    /// "Server output:"); in the JSON, `end.server_output`.
    #[arg(help_heading = "Output", long)]
    pub get_server_output: bool,
    #[command(flatten, next_help_heading = "Output")]
    pub output: crate::args::OutputArgs,
    /// iperf3's pacing timer, microseconds: a sender paced by -b sends what this long
    /// moves at once (flowlab paces each write, as finely as iperf3's default 1000).
    #[arg(help_heading = "iperf3 compatibility", long, value_name = "US")]
    pub pacing_timer: Option<u64>,
    /// Accepted for iperf3's command line: flowlab's UDP datagrams always carry 64-bit
    /// counters.
    #[arg(help_heading = "iperf3 compatibility", long)]
    pub udp_counters_64bit: bool,
}

impl Args {
    /// What the test prints, from `-J`, `--json-stream`, `--iperf3-json`, `--iperf3-text`
    /// and `-f` (`--json-stream-full-output` is the caller's).
    pub fn output(&self) -> TestFormat {
        if self.json {
            TestFormat::Json
        } else if self.iperf3_json && self.json_stream {
            TestFormat::Iperf3JsonStream
        } else if self.iperf3_json {
            TestFormat::Iperf3Json
        } else if self.json_stream {
            TestFormat::JsonStream
        } else if self.iperf3_text {
            TestFormat::Iperf3Text(self.format)
        } else {
            TestFormat::Table(self.format)
        }
    }
}

/// `-b`'s value: the rate per stream and the blocks of a burst (0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bitrate {
    pub bps: u64,
    pub burst: u64,
}

/// `-b RATE[/BURST]`, as iperf3 takes it: a rate in flowlab's units, and at most 1000
/// blocks a burst (iperf3's limit).
fn parse_bitrate(text: &str) -> Result<Bitrate, String> {
    // The burst is digits after the last `/`; `100Mbit/s` is a rate alone.
    let (rate, burst) = match text.rsplit_once('/') {
        Some((r, b)) if !b.is_empty() && b.trim().bytes().all(|c| c.is_ascii_digit()) => {
            (r, Some(b))
        }
        _ => (text, None),
    };
    let bps = units::parse_rate(rate).map_err(|e| e.to_string())?;
    let burst = match burst {
        None => 0,
        Some(b) => b
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .ok_or_else(|| format!("'{b}' after the / is not a burst of 1 to 1000 blocks"))?,
    };
    Ok(Bitrate { bps, burst })
}

/// Longest `-t`: a day, iperf3's limit too.
pub(super) const MAX_TIME: f64 = 86_400.0;

/// A number as iperf3 reads `-S`: decimal, octal with a leading 0, hex with 0x.
fn c_number(text: &str) -> Option<u32> {
    let t = text.trim();
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u32::from_str_radix(hex, 16).ok()
    } else if t.len() > 1 && t.starts_with('0') {
        u32::from_str_radix(&t[1..], 8).ok()
    } else {
        t.parse().ok()
    }
}

/// `-L`/`--flowlabel`: 1 to 2^20 − 1.
fn parse_flowlabel(text: &str) -> Result<u32, String> {
    c_number(text)
        .filter(|n| (1..=0x000F_FFFF).contains(n))
        .ok_or_else(|| format!("'{text}' is not a flow label, 1 to 1048575 (0xFFFFF)"))
}

/// `-S`/`--tos`: 0 to 255.
fn parse_tos(text: &str) -> Result<u8, String> {
    c_number(text)
        .and_then(|n| u8::try_from(n).ok())
        .ok_or_else(|| format!("'{text}' is not a type of service 0 to 255 (52, 064 or 0x34)"))
}

/// `--dscp`: 0 to 63, or a code point's name (RFC 2474, 2597, 3246, 5865, 8622).
fn parse_dscp(text: &str) -> Result<u8, String> {
    let name = text.trim().to_ascii_uppercase();
    let named = match name.as_str() {
        "EF" => Some(46),
        "VOICE-ADMIT" => Some(44),
        "LE" => Some(1),
        n => n
            .strip_prefix("CS")
            .and_then(|c| c.parse::<u8>().ok())
            .filter(|c| *c <= 7)
            .map(|c| c * 8)
            .or_else(|| {
                let af = n.strip_prefix("AF")?.as_bytes();
                match af {
                    [c @ b'1'..=b'4', d @ b'1'..=b'3'] => Some((c - b'0') * 8 + (d - b'0') * 2),
                    _ => None,
                }
            }),
    };
    named
        .or_else(|| {
            c_number(text)
                .and_then(|n| u8::try_from(n).ok())
                .filter(|n| *n <= 63)
        })
        .ok_or_else(|| {
            format!("'{text}' is not a DSCP: 0 to 63, or EF, AF11…AF43, CS0…CS7, LE, VOICE-ADMIT")
        })
}

#[cfg(test)]
mod tos_tests {
    use super::{parse_dscp, parse_tos};

    #[test]
    fn tos_is_read_as_iperf3_reads_it() {
        for text in ["52", "064", "0x34", "0X34"] {
            assert_eq!(parse_tos(text), Ok(52), "{text}");
        }
        assert_eq!(parse_tos("255"), Ok(255));
        for bad in ["256", "-1", "0x100", "ef", "09"] {
            assert!(parse_tos(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn dscp_takes_numbers_and_code_point_names() {
        for (text, dscp) in [
            ("46", 46),
            ("ef", 46),
            ("EF", 46),
            ("af11", 10),
            ("AF43", 38),
            ("cs0", 0),
            ("CS7", 56),
            ("le", 1),
            ("voice-admit", 44),
            ("0x2e", 46),
        ] {
            assert_eq!(parse_dscp(text), Ok(dscp), "{text}");
        }
        for bad in ["64", "af44", "af51", "cs8", "best"] {
            let e = parse_dscp(bad).expect_err(bad);
            assert!(e.contains("0 to 63, or EF"), "{e}");
        }
    }
}

#[cfg(test)]
mod bitrate_tests {
    use super::{Bitrate, parse_bitrate};

    #[test]
    fn a_burst_is_the_digits_after_the_last_slash() {
        let b = |bps, burst| Ok(Bitrate { bps, burst });
        assert_eq!(parse_bitrate("10M"), b(10_000_000, 0));
        assert_eq!(parse_bitrate("10M/20"), b(10_000_000, 20));
        assert_eq!(parse_bitrate("40Mbit/s"), b(40_000_000, 0));
        assert_eq!(parse_bitrate("40Mbit/s/5"), b(40_000_000, 5));
        assert_eq!(parse_bitrate("12.5MB/s"), b(100_000_000, 0));
        for bad in ["10M/0", "10M/1001", "10M/x"] {
            assert!(parse_bitrate(bad).is_err(), "{bad}");
        }
    }
}
