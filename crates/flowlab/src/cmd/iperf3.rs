//! `flowlab iperf3 ARGS…`, and this binary run under the name `iperf3`: iperf3's own
//! command line — `-s` or `-c HOST` and every option of iperf 3.12, spelt, defaulted and
//! meant as iperf3 has them — turned into the `flowlab serve` or `flowlab test` line that
//! does the same, with the client's `-J` in iperf3's JSON shape. Every iperf3 option is
//! known here: one flowlab does not take is refused by name with the reason
//! (docs/iperf3.md), never dropped.

use std::ffi::OsString;

use clap::{Arg, ArgAction, ArgMatches, Command};

use crate::usage::Usage;

/// The words after `flowlab iperf3`, as they came: parsed by [`translate`], not by clap's
/// derive (iperf3's options are not flowlab's).
#[derive(Debug, clap::Args)]
#[command(disable_help_flag = true)]
pub struct RawArgs {
    /// iperf3's arguments: `-s`, or `-c HOST`, and iperf3's options (`flowlab iperf3
    /// --help` lists them).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<OsString>,
}

/// What becomes of an option at one end.
#[derive(Debug, Clone, Copy)]
enum To {
    /// flowlab's option of this long name takes it as it is.
    Flag(&'static str),
    /// Worked out in [`translate`] itself.
    Special,
    /// Refused, with why.
    Refused(&'static str),
    /// An option of the other end.
    Other,
}

/// One iperf3 option: its spelling, its value (`None`: a flag), what it becomes at the
/// server and at the client, and iperf3's help line.
struct Opt {
    short: Option<char>,
    long: &'static str,
    value: Option<&'static str>,
    server: To,
    client: To,
    help: &'static str,
}

const SCTP: &str = "flowlab does not measure SCTP";
const ONE_LINE: &str = "flowlab serve logs one line per test, not intervals";
const IDLE: &str = "flowlab serve's --idle-timeout SECONDS ends a test whose peer falls silent";

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

/// Every option of iperf 3.12 (`iperf3 --help` of Debian's package), in its order.
#[rustfmt::skip]
const OPTIONS: &[Opt] = &[
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
];

/// iperf3's parser: every option of [`OPTIONS`], grouped as iperf3's help groups them.
fn command() -> Command {
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
        arg = match (o.long, o.value) {
            ("verbose", _) => arg.action(ArgAction::Count),
            ("version", _) => arg.action(ArgAction::SetTrue),

            // iperf3's optional values, given with `=` only.
            ("timestamps" | "debug", Some(v)) => arg
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

/// The `flowlab` command line that does what iperf3's `args` ask, or why not. Clap's own
/// outcomes (help, the version, a parse error) come back as its error, to print as the
/// other commands' are.
pub fn translate(args: &[OsString]) -> Result<Vec<OsString>, Refusal> {
    let m = command()
        .try_get_matches_from(std::iter::once(OsString::from("iperf3")).chain(args.iter().cloned()))
        .map_err(Refusal::Clap)?;
    if m.get_flag("version") {
        return Ok(vec!["flowlab".into(), "--version".into()]);
    }
    let server = m.get_flag("server");
    if !server && !m.contains_id("client") {
        return Err(Refusal::Usage(Usage(
            "flowlab iperf3: give -s (serve) or -c HOST (test), as to iperf3".into(),
        )));
    }
    let mut global: Vec<OsString> = vec!["flowlab".into()];
    let mut out: Vec<OsString> = vec![if server { "serve" } else { "test" }.into()];
    for o in OPTIONS {
        if !given(&m, o) {
            continue;
        }
        let to = if server { o.server } else { o.client };
        let name = spelling(o);
        match to {
            // `--flag=value`, one word, so a value that begins with `-` stays a value.
            Flag(long) => match o.value.and_then(|_| m.get_one::<OsString>(o.long)) {
                Some(v) => {
                    let mut word = OsString::from(format!("--{long}="));
                    word.push(v);
                    out.push(word);
                }
                None => out.push(format!("--{long}").into()),
            },
            Refused(why) => {
                return Err(Refusal::Usage(Usage(format!(
                    "flowlab iperf3: {name}: {why}"
                ))));
            }
            Other if server => {
                return Err(Refusal::Usage(Usage(format!(
                    "flowlab iperf3: {name} is a client option; drop it or -s"
                ))));
            }
            Other => {
                return Err(Refusal::Usage(Usage(format!(
                    "flowlab iperf3: {name} is a server option; drop it or -c"
                ))));
            }
            Special => special(&m, o, &name, &mut global, &mut out)?,
        }
    }
    if !server && m.get_flag("udp") {
        match m.get_one::<OsString>("bitrate") {
            // iperf3's UDP default: 1 Mbit/s, at the rate whatever the receiver does.
            None => out.extend(["--bitrate=1M".into(), "--no-window".into()]),
            // Unlimited UDP as iperf3 sends it: blindly, never slowing for the receiver.
            Some(b) if flowlab_report::units::parse_rate(&rate_part(b)) == Ok(0) => {
                out.push("--no-backoff".into());
            }
            // Paced as iperf3 paces: never waiting for the receiver.
            Some(_) => out.push("--no-window".into()),
        }
    }
    if server {
        // iperf3's server caps no test's length: neither does this one, as iperf3's.
        out.push("--max-duration=0".into());
    }
    global.extend(out);
    Ok(global)
}

/// Why `flowlab iperf3` did not produce a command line.
#[derive(Debug)]
pub enum Refusal {
    /// Clap's: help, the version, or a parse error.
    Clap(clap::Error),
    /// An option flowlab does not take, or a combination iperf3 refuses as well.
    Usage(Usage),
}

/// Whether the user gave `o` (not a default).
fn given(m: &ArgMatches, o: &Opt) -> bool {
    match (o.long, o.value) {
        ("verbose", _) => m.get_count("verbose") > 0,
        ("version", _) => false,
        (_, None) => m.get_flag(o.long),
        (_, Some(_)) => m.contains_id(o.long),
    }
}

/// `-p/--port` or `--cport`: how an option is named in a refusal.
fn spelling(o: &Opt) -> String {
    match o.short {
        Some(s) => format!("-{s}/--{}", o.long),
        None => format!("--{}", o.long),
    }
}

/// `100M` of `100M/10`.
fn rate_part(v: &OsString) -> String {
    let v = v.to_string_lossy();
    v.split_once('/').map_or(&*v, |(r, _)| r).to_string()
}

/// The options whose translation is more than a rename.
fn special(
    m: &ArgMatches,
    o: &Opt,
    name: &str,
    global: &mut Vec<OsString>,
    out: &mut Vec<OsString>,
) -> Result<(), Refusal> {
    let value = match o.value {
        Some(_) => m
            .get_one::<OsString>(o.long)
            .map(|v| v.to_string_lossy().into_owned()),
        None => None,
    };
    let refuse = |why: String| Err(Refusal::Usage(Usage(format!("flowlab iperf3: {why}"))));
    match o.long {
        "server" => {}
        "verbose" => {
            for _ in 0..m.get_count("verbose") {
                global.push("-V".into());
            }
        }
        // iperf3's levels 1-4: flowlab has two, info (-V) and debug (-VV).
        "debug" => global.push("-VV".into()),
        "timestamps" => match value.as_deref() {
            Some("") | None => out.push("--timestamps".into()),
            Some(f) => out.push(format!("--timestamps={f}").into()),
        },
        // (A client's HOST%DEV is flowlab test's too.)
        "client" => {
            // The host first, as one writes `flowlab test HOST …`.
            out.insert(1, value.unwrap_or_default().into());
        }
        "server-bitrate-limit" => {
            let v = value.unwrap_or_default();
            if v.contains('/') {
                return refuse(format!(
                    "{name} {v}: flowlab refuses a test that asks for more than the limit \
                     rather than averaging over a period; drop /{}",
                    v.split_once('/').map_or("", |(_, p)| p)
                ));
            }
            out.push(format!("--max-bitrate={v}").into());
        }
        other => unreachable!("--{other} is not special"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flowlab(line: &str) -> Result<String, String> {
        let args: Vec<OsString> = line.split_whitespace().map(OsString::from).collect();
        match translate(&args) {
            Ok(v) => Ok(v
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ")),
            Err(Refusal::Usage(u)) => Err(u.0),
            Err(Refusal::Clap(e)) => Err(crate::usage::one_line(&e)),
        }
    }

    #[test]
    fn the_parser_is_well_formed() {
        command().debug_assert();
    }

    #[test]
    fn an_iperf3_line_becomes_the_flowlab_line_that_does_the_same() {
        for (iperf3, ours) in [
            (
                "-c h -t 5 -P 4 -R",
                "flowlab test h --time=5 --parallel=4 --reverse",
            ),
            ("-ch -t5 -J", "flowlab test h --iperf3-json --time=5"),
            ("-c h -u", "flowlab test h --udp --bitrate=1M --no-window"),
            (
                "-c h -u -b 0",
                "flowlab test h --udp --bitrate=0 --no-backoff",
            ),
            (
                "-c h -u -b 20M -l 1400",
                "flowlab test h --udp --bitrate=20M --length=1400 --no-window",
            ),
            (
                "-c h -J --bidir -VV",
                "flowlab -V -V test h --iperf3-json --bidir",
            ),
            (
                "-s -p 5202 -1",
                "flowlab serve --port=5202 --one-off --max-duration=0",
            ),
            (
                "-s -D -I /run/x.pid --logfile l",
                "flowlab serve --pidfile=/run/x.pid --logfile=l --daemon --max-duration=0",
            ),
            (
                "-s --server-bitrate-limit 100M",
                "flowlab serve --max-bitrate=100M --max-duration=0",
            ),
            (
                "-s -B 127.0.0.1 -d",
                "flowlab -VV serve --bind=127.0.0.1 --max-duration=0",
            ),
            (
                "-s -F f -A 1 --snd-timeout 9",
                "flowlab serve --file=f --affinity=1 --snd-timeout=9 --max-duration=0",
            ),
            (
                "-s -B ::1%lo",
                "flowlab serve --bind=::1%lo --max-duration=0",
            ),
            ("-c h --timestamps", "flowlab test h --timestamps"),
            (
                "-c h --title=-x -k 1K",
                "flowlab test h --blockcount=1K --title=-x",
            ),
            ("-c h --timestamps=%T", "flowlab test h --timestamps=%T"),
            (
                "-c h%lo -B 127.0.0.1 --cport 5000",
                "flowlab test h%lo --bind=127.0.0.1 --cport=5000",
            ),
        ] {
            assert_eq!(flowlab(iperf3).as_deref(), Ok(ours), "{iperf3}");
        }
    }

    #[test]
    fn what_flowlab_does_not_take_is_refused_by_name_and_reason() {
        for (iperf3, says) in [
            ("-c h -s", "cannot be used with"),
            ("-c h --sctp", "--sctp: flowlab does not measure SCTP"),
            ("-s -u", "-u/--udp is a client option; drop it or -s"),
            ("-c h -1", "-1/--one-off is a server option; drop it or -c"),
            (
                "-s -i 1",
                "-i/--interval: flowlab serve logs one line per test",
            ),
            ("-t 5", "give -s (serve) or -c HOST (test)"),
            ("-s -c h", "cannot be used with"),
            ("-c h --bogus", "unexpected argument '--bogus'"),
        ] {
            let e = flowlab(iperf3).expect_err(iperf3);
            assert!(e.contains(says), "{iperf3}: {e}");
        }
    }

    #[test]
    fn every_option_of_iperf3s_help_is_known() {
        // The long options of `iperf3 --help` (iperf 3.12), each of which must be either
        // translated or refused by name, never unknown.
        let help = std::process::Command::new("iperf3").arg("--help").output();
        let Ok(help) = help else {
            assert!(std::env::var_os("CI").is_none(), "CI installs iperf3");
            eprintln!("skipped: no iperf3 to read the options of");
            return;
        };
        let text = String::from_utf8_lossy(&help.stdout).into_owned()
            + &String::from_utf8_lossy(&help.stderr);
        let longs: Vec<&str> = text
            .split(|c: char| c.is_whitespace() || c == ',' || c == '<' || c == '[')
            .filter_map(|w| w.strip_prefix("--"))
            .filter(|w| w.len() > 1 && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
            .collect();
        assert!(longs.len() > 50, "{longs:?}");
        for long in longs {
            if long == "help" {
                continue;
            }
            assert!(
                OPTIONS.iter().any(|o| o.long == long),
                "iperf3's --{long} is not in OPTIONS"
            );
        }
    }
}
