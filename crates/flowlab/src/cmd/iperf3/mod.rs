//! `flowlab iperf3 ARGS…`, and this binary run under the name `iperf3`: iperf3's own
//! command line — `-s` or `-c HOST` and every option of iperf 3.12, spelt, defaulted and
//! meant as iperf3 has them — turned into the `flowlab serve` or `flowlab test` line that
//! does the same, with the client's `-J` in iperf3's JSON shape. Every iperf3 option is
//! known here: one flowlab does not take is refused by name with the reason
//! (docs/iperf3.md), never dropped.

use std::ffi::OsString;

use clap::ArgMatches;

use crate::usage::Usage;

mod options;

use options::To::{Flag, Other, Refused, Special};
use options::{OPTIONS, Opt, command};

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
                // An optional value left off (`--cntl-ka`).
                Some(v) if v.is_empty() => out.push(format!("--{long}").into()),
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
            Some(b) if flowlab_results::units::parse_rate(&rate_part(b)) == Ok(0) => {
                out.push("--no-backoff".into());
            }
            // Paced as iperf3 paces: never waiting for the receiver.
            Some(_) => out.push("--no-window".into()),
        }
    }
    if !server && !m.get_flag("json") && !m.get_flag("json-stream") {
        // iperf3's own lines, for the scripts that read them.
        out.push("--iperf3-text".into());
    }
    if server && !m.contains_id("server-max-duration") {
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
        // A server's -m: flowlab serve takes MPTCP always where the kernel makes it.
        "mptcp" => {}
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
        // iperf3's JSON lines; -J beside it changes nothing, as in iperf3.
        "json-stream" => {
            if !m.get_flag("json") {
                out.push("--iperf3-json".into());
            }
            out.push("--json-stream".into());
        }
        // iperf3 refuses a test longer than this, or of no time (-t 0, -n, -k); flowlab's
        // --max-duration refuses the first and ends the others there.
        "server-max-duration" => {
            let v = value.unwrap_or_default();
            match v.parse::<u64>() {
                // 0: no limit, as iperf3's.
                Ok(n) => out.push(format!("--max-duration={n}").into()),
                Err(_) => return refuse(format!("{name} {v}: a whole number of seconds")),
            }
        }
        "no-fq-socket-pacing" => {
            if m.contains_id("fq-rate") {
                return refuse(format!("{name} and --fq-rate: give one"));
            }
            eprintln!("warning: {name} is deprecated (iperf3's word): no --fq-rate is the same");
        }
        // flowlab's UDP streams use GSO and GRO wherever the kernel has them.
        "gsro" => {}
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
                "flowlab test h --time=5 --parallel=4 --reverse --iperf3-text",
            ),
            ("-ch -t5 -J", "flowlab test h --iperf3-json --time=5"),
            (
                "-c h -u",
                "flowlab test h --udp --bitrate=1M --no-window --iperf3-text",
            ),
            (
                "-c h -u -b 0",
                "flowlab test h --udp --bitrate=0 --no-backoff --iperf3-text",
            ),
            (
                "-c h -u -b 20M -l 1400",
                "flowlab test h --udp --bitrate=20M --length=1400 --no-window --iperf3-text",
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
            ("-c h -m", "flowlab test h --mptcp --iperf3-text"),
            // serve takes MPTCP always where the kernel makes it.
            ("-s --mptcp", "flowlab serve --max-duration=0"),
            (
                "-c h --timestamps",
                "flowlab test h --timestamps --iperf3-text",
            ),
            (
                "-c h --title=-x -k 1K",
                "flowlab test h --blockcount=1K --title=-x --iperf3-text",
            ),
            (
                "-c h --timestamps=%T",
                "flowlab test h --timestamps=%T --iperf3-text",
            ),
            (
                "-c h%lo -B 127.0.0.1 --cport 5000",
                "flowlab test h%lo --bind=127.0.0.1 --cport=5000 --iperf3-text",
            ),
            // Spellings iperf3 still takes, not in its help.
            (
                "-c h --bandwidth 5M --linux-congestion cubic",
                "flowlab test h --bitrate=5M --congestion=cubic --iperf3-text",
            ),
            ("-c h --no-fq-socket-pacing", "flowlab test h --iperf3-text"),
            // Added after 3.12.
            (
                "-c h --json-stream",
                "flowlab test h --iperf3-json --json-stream",
            ),
            (
                "-c h -J --json-stream --json-stream-full-output",
                "flowlab test h --iperf3-json --json-stream --json-stream-full-output",
            ),
            (
                "-s --server-max-duration 30",
                "flowlab serve --max-duration=30",
            ),
            (
                "-s --server-max-duration 0",
                "flowlab serve --max-duration=0",
            ),
            (
                "-s --rsa-private-key-path k --authorized-users-path u --use-pkcs1-padding",
                "flowlab serve --rsa-private-key-path=k --authorized-users-path=u \
                 --use-pkcs1-padding --max-duration=0",
            ),
            (
                "-c h --username u --rsa-public-key-path k --use-pkcs1-padding",
                "flowlab test h --username=u --rsa-public-key-path=k --use-pkcs1-padding \
                 --iperf3-text",
            ),
            (
                "-c h -u --gsro",
                "flowlab test h --udp --bitrate=1M --no-window --iperf3-text",
            ),
            (
                "-c h --cntl-ka=60/5/3 --skip-rx-copy",
                "flowlab test h --cntl-ka=60/5/3 --skip-rx-copy --iperf3-text",
            ),
            ("-s --cntl-ka", "flowlab serve --cntl-ka --max-duration=0"),
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
            ("-s --skip-rx-copy", "--skip-rx-copy is a client option"),
            (
                "-s --json-stream",
                "--json-stream: flowlab serve writes one JSON",
            ),
            (
                "-s --server-max-duration 1m",
                "--server-max-duration 1m: a whole number of seconds",
            ),
            (
                "-c h --no-fq-socket-pacing --fq-rate 1M",
                "--no-fq-socket-pacing and --fq-rate: give one",
            ),
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

    /// Every long option iperf 3.21 takes (its `longopts` table, esnet/iperf
    /// src/iperf_api.c at tag 3.21, hidden spellings included) is parsed: translated or
    /// refused by name, never "unexpected argument". No 3.21 binary is on a registry here.
    #[test]
    fn every_option_of_iperf_3_21_is_parsed() {
        const IPERF_3_21: &str = "port format interval daemon one-off verbose json \
            json-stream json-stream-full-output version server client udp bitrate bandwidth \
            server-bitrate-limit server-max-duration time bytes blockcount length parallel \
            reverse bidir window bind bind-dev cport set-mss no-delay version4 version6 tos \
            dscp extra-data flowlabel zerocopy omit file repeating-payload timestamps \
            affinity title congestion linux-congestion sctp nstreams xbind pidfile logfile \
            forceflush get-server-output udp-counters-64bit no-fq-socket-pacing \
            dont-fragment skip-rx-copy username rsa-public-key-path rsa-private-key-path \
            authorized-users-path time-skew-threshold use-pkcs1-padding fq-rate pacing-timer \
            connect-timeout idle-timeout rcv-timeout snd-timeout cntl-ka mptcp gsro debug \
            help";
        let cmd = command();
        for long in IPERF_3_21.split_whitespace() {
            let known = long == "help"
                || cmd.get_arguments().any(|a| {
                    a.get_long() == Some(long)
                        || a.get_all_aliases().into_iter().flatten().any(|x| x == long)
                });
            assert!(known, "iperf 3.21's --{long} is not parsed");
        }
    }
}
