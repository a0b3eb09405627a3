//! iperf3's options: each one's spelling, value, what it becomes at either end and its
//! help line ([`OPTIONS`]), and the parser made from them ([`command`]).

use std::ffi::OsString;

use clap::{Arg, ArgAction, Command};

/// What becomes of an option at one end.
#[derive(Debug, Clone, Copy)]
pub(super) enum To {
    /// flowlab's option of this long name takes it as it is.
    Flag(&'static str),
    /// Worked out in [`super::translate`] itself.
    Special,
    /// Refused, with why.
    Refused(&'static str),
    /// An option of the other end.
    Other,
}

/// One iperf3 option: its spelling, its value (`None`: a flag), what it becomes at the
/// server and at the client, and iperf3's help line.
pub(super) struct Opt {
    pub(super) short: Option<char>,
    pub(super) long: &'static str,
    pub(super) value: Option<&'static str>,
    pub(super) server: To,
    pub(super) client: To,
    pub(super) help: &'static str,
}

const SCTP: &str = "flowlab does not measure SCTP";
const ONE_LINE: &str = "flowlab serve logs one line per test, not intervals";
const IDLE: &str = "flowlab serve's --idle-timeout SECONDS ends a test whose peer falls silent";
const STREAM: &str = "flowlab serve writes one JSON document per test (-J), not a stream of events";

const fn opt(
    short: Option<char>,
    long: &'static str,
    value: Option<&'static str>,
    server: To,
    client: To,
    help: &'static str,
) -> Opt {
    Opt {
        short,
        long,
        value,
        server,
        client,
        help,
    }
}

use To::{Flag, Other, Refused, Special};

/// Every option of iperf 3.12 (`iperf3 --help` of Debian's package), in its order, then
/// those added up to 3.21.
#[rustfmt::skip]
pub(super) const OPTIONS: &[Opt] = &[
    // Server or client.
    opt(Some('p'), "port", Some("#"), Flag("port"), Flag("port"), "server port to listen on/connect to"),
    opt(Some('f'), "format", Some("kmgtKMGT"), Refused(ONE_LINE), Flag("format"), "format to report: Kbits, Mbits, Gbits, Tbits"),
    opt(Some('i'), "interval", Some("#"), Refused(ONE_LINE), Flag("interval"), "seconds between periodic throughput reports"),
    opt(Some('I'), "pidfile", Some("file"), Flag("pidfile"), Flag("pidfile"), "write PID file"),
    opt(Some('F'), "file", Some("name"), Flag("file"), Flag("file"), "xmit/recv the specified file"),
    opt(Some('A'), "affinity", Some("n/n,m"), Flag("affinity"), Flag("affinity"), "set CPU affinity"),
    opt(Some('B'), "bind", Some("host[%dev]"), Flag("bind"), Flag("bind"), "bind to the interface associated with the address <host>"),
    opt(None, "bind-dev", Some("dev"), Flag("bind-dev"), Flag("bind-dev"), "bind to the network interface with SO_BINDTODEVICE"),
    opt(Some('V'), "verbose", None, Special, Special, "more detailed output"),
    opt(Some('J'), "json", None, Flag("iperf3-json"), Flag("iperf3-json"), "output in JSON format"),
    opt(None, "logfile", Some("f"), Flag("logfile"), Flag("logfile"), "send output to a log file"),
    opt(None, "forceflush", None, Flag("forceflush"), Flag("forceflush"), "force flushing output at every interval"),
    opt(None, "timestamps", Some("format"), Special, Special, "emit a timestamp at the start of each output line"),
    opt(None, "rcv-timeout", Some("#"), Refused(IDLE), Flag("rcv-timeout"), "idle timeout for receiving data (ms)"),
    opt(None, "snd-timeout", Some("#"), Flag("snd-timeout"), Flag("snd-timeout"), "timeout for unacknowledged TCP data (ms)"),
    opt(Some('d'), "debug", Some("#"), Special, Special, "emit debugging output"),
    opt(Some('v'), "version", None, Special, Special, "show version information and quit"),
    // Server.
    opt(Some('s'), "server", None, Special, Other, "run in server mode"),
    opt(Some('D'), "daemon", None, Flag("daemon"), Other, "run the server as a daemon"),
    opt(Some('1'), "one-off", None, Flag("one-off"), Other, "handle one client connection then exit"),
    opt(None, "server-bitrate-limit", Some("#[KMG][/#]"), Special, Other, "the highest rate a test may ask for (flowlab: per test)"),
    opt(None, "idle-timeout", Some("#"), Flag("idle-timeout"), Other, "seconds a silent peer is waited for"),
    opt(None, "rsa-private-key-path", Some("file"), Flag("rsa-private-key-path"), Other, "path to the RSA private key used to decrypt authentication credentials"),
    opt(None, "authorized-users-path", Some("file"), Flag("authorized-users-path"), Other, "path to the configuration file containing user credentials"),
    opt(None, "time-skew-threshold", Some("#"), Flag("time-skew-threshold"), Other, "time skew threshold (in seconds) between the server and client during the authentication process"),
    // Client.
    opt(Some('c'), "client", Some("host[%dev]"), Other, Special, "run in client mode, connecting to <host>"),
    opt(None, "sctp", None, Other, Refused(SCTP), "use SCTP rather than TCP"),
    opt(Some('X'), "xbind", Some("name"), Other, Refused(SCTP), "bind SCTP association to links"),
    opt(None, "nstreams", Some("#"), Other, Refused(SCTP), "number of SCTP streams"),
    opt(Some('u'), "udp", None, Other, Flag("udp"), "use UDP rather than TCP"),
    opt(None, "connect-timeout", Some("#"), Other, Flag("connect-timeout"), "timeout for control connection setup (ms)"),
    opt(Some('b'), "bitrate", Some("#[KMG][/#]"), Other, Flag("bitrate"), "target bitrate in bits/sec (0 for unlimited; default 1 Mbit/sec for UDP, unlimited for TCP)"),
    opt(None, "pacing-timer", Some("#[KMG]"), Other, Flag("pacing-timer"), "set the timing for pacing, in microseconds"),
    opt(None, "fq-rate", Some("#[KMG]"), Other, Flag("fq-rate"), "enable fair-queuing based socket pacing in bits/sec"),
    opt(Some('t'), "time", Some("#"), Other, Flag("time"), "time in seconds to transmit for (default 10 secs)"),
    opt(Some('n'), "bytes", Some("#[KMG]"), Other, Flag("bytes"), "number of bytes to transmit (instead of -t)"),
    opt(Some('k'), "blockcount", Some("#[KMG]"), Other, Flag("blockcount"), "number of blocks (packets) to transmit (instead of -t or -n)"),
    opt(Some('l'), "length", Some("#[KMG]"), Other, Flag("length"), "length of buffer to read or write"),
    opt(None, "cport", Some("port"), Other, Flag("cport"), "bind to a specific client port"),
    opt(Some('P'), "parallel", Some("#"), Other, Flag("parallel"), "number of parallel client streams to run"),
    opt(Some('R'), "reverse", None, Other, Flag("reverse"), "run in reverse mode (server sends, client receives)"),
    opt(None, "bidir", None, Other, Flag("bidir"), "run in bidirectional mode"),
    opt(Some('w'), "window", Some("#[KMG]"), Other, Flag("window"), "set send/receive socket buffer sizes"),
    opt(Some('C'), "congestion", Some("algo"), Other, Flag("congestion"), "set TCP congestion control algorithm"),
    opt(Some('M'), "set-mss", Some("#"), Other, Flag("set-mss"), "set TCP maximum segment size (MTU - 40 bytes)"),
    opt(Some('N'), "no-delay", None, Other, Flag("no-delay"), "set TCP no delay, disabling Nagle's Algorithm"),
    opt(Some('4'), "version4", None, Other, Flag("version4"), "only use IPv4"),
    opt(Some('6'), "version6", None, Other, Flag("version6"), "only use IPv6"),
    opt(Some('S'), "tos", Some("N"), Other, Flag("tos"), "set the IP type of service, 0-255 (52, 064, 0x34)"),
    opt(None, "dscp", Some("N"), Other, Flag("dscp"), "set the IP dscp value, either 0-63 or symbolic"),
    opt(Some('L'), "flowlabel", Some("N"), Other, Flag("flowlabel"), "set the IPv6 flow label"),
    opt(Some('Z'), "zerocopy", None, Other, Flag("zerocopy"), "use a 'zero copy' method of sending data"),
    opt(Some('O'), "omit", Some("N"), Other, Flag("omit"), "perform pre-test for N seconds and omit the pre-test statistics"),
    opt(Some('T'), "title", Some("str"), Other, Flag("title"), "a title (flowlab: recorded with the result)"),
    opt(None, "extra-data", Some("str"), Other, Flag("extra-data"), "data string to include in client and server JSON"),
    opt(None, "get-server-output", None, Other, Flag("get-server-output"), "get results from server"),
    opt(None, "udp-counters-64bit", None, Other, Flag("udp-counters-64bit"), "use 64-bit counters in UDP test packets"),
    opt(None, "repeating-payload", None, Other, Flag("repeating-payload"), "use repeating pattern in payload"),
    opt(None, "dont-fragment", None, Other, Flag("dont-fragment"), "set IPv4 Don't Fragment flag"),
    opt(None, "username", Some("name"), Other, Flag("username"), "username for authentication"),
    opt(None, "rsa-public-key-path", Some("file"), Other, Flag("rsa-public-key-path"), "path to the RSA public key used to encrypt authentication credentials"),
    // Deprecated in 3.12 already, and not in its help: --fq-rate 0.
    opt(None, "no-fq-socket-pacing", None, Other, Special, "disable fair-queuing based socket pacing (deprecated: no --fq-rate)"),
    // Added after 3.12 (3.17 to 3.21), as 3.21's help lists them.
    opt(None, "json-stream", None, Refused(STREAM), Special, "output in line-delimited JSON format (3.17)"),
    opt(None, "json-stream-full-output", None, Refused(STREAM), Flag("json-stream-full-output"), "with --json-stream, the whole JSON document as well (3.20)"),
    opt(None, "cntl-ka", Some("#/#/#"), Flag("cntl-ka"), Flag("cntl-ka"), "control connection TCP keepalive: KEEPIDLE/KEEPINTV/KEEPCNT (3.19)"),
    opt(Some('m'), "mptcp", None, Special, Flag("mptcp"), "use MPTCP rather than plain TCP (3.19)"),
    opt(None, "server-max-duration", Some("#"), Special, Other, "max time, in seconds, that a test can run against the server (3.20)"),
    opt(None, "use-pkcs1-padding", None, Flag("use-pkcs1-padding"), Flag("use-pkcs1-padding"), "use PKCS#1 v1.5 padding for authentication, at your own risk (3.17)"),
    opt(None, "skip-rx-copy", None, Other, Flag("skip-rx-copy"), "ignore received messages using MSG_TRUNC (3.19)"),
    opt(None, "gsro", None, Other, Special, "enable UDP GSO/GRO on both client and server (3.21; flowlab: always on where the kernel has them)"),
];

/// iperf3's parser: every option of [`OPTIONS`], grouped as iperf3's help groups them.
pub(super) fn command() -> Command {
    let mut cmd = Command::new("iperf3")
        .bin_name("flowlab iperf3")
        .about(
            "iperf3's command line, run by flowlab: `alias iperf3='flowlab iperf3'`. \
             -J writes iperf3's JSON shape; options flowlab does not take are refused \
             with the reason (docs/iperf3.md).",
        )
        .override_usage("flowlab iperf3 [-s|-c host] [options]")
        .disable_version_flag(true)
        .args_override_self(true);
    for (i, o) in OPTIONS.iter().enumerate() {
        let heading = match (o.server, o.client) {
            (Other, _) => "Client specific",
            (_, Other) => "Server specific",
            _ => "Server or client",
        };
        let refused = match (o.server, o.client) {
            (Refused(why), Refused(_) | Other) | (Other, Refused(why)) => Some(why),
            _ => None,
        };
        let help = match refused {
            Some(why) => format!("{} [refused: {why}]", o.help),
            None => o.help.to_string(),
        };
        let mut arg = Arg::new(o.long)
            .long(o.long)
            .help(help)
            .help_heading(heading)
            .display_order(i);
        if let Some(s) = o.short {
            arg = arg.short(s);
        }
        // Older spellings iperf3 still takes, left out of its help.
        arg = match o.long {
            "bitrate" => arg.alias("bandwidth"),
            "congestion" => arg.alias("linux-congestion"),
            _ => arg,
        };
        arg = match (o.long, o.value) {
            ("verbose", _) => arg.action(ArgAction::Count),
            ("version", _) => arg.action(ArgAction::SetTrue),

            // iperf3's optional values, given with `=` only.
            ("timestamps" | "debug" | "cntl-ka", Some(v)) => arg
                .value_name(v)
                .num_args(0..=1)
                .require_equals(true)
                .default_missing_value("")
                .value_parser(clap::value_parser!(OsString)),
            (_, Some(v)) => arg
                .value_name(v)
                .value_parser(clap::value_parser!(OsString)),
            (_, None) => arg.action(ArgAction::SetTrue),
        };
        cmd = cmd.arg(arg);
    }
    cmd.group(clap::ArgGroup::new("end").args(["server", "client"]))
}
