//! How a study's steps are read: [`Commands`] with the commands' own parsers
//! (`flowlab test`, `flowlab fetch`, `flowlab serve`, a setup's `fragments`), so that a
//! step is refused exactly as the command would refuse it.

use std::time::Duration;

use clap::Parser;
use flowlab_runner::place::Echoes;
use flowlab_runner::study::{Commands, Setup, TestLine};

use crate::cmd;
use crate::usage::one_line;

#[derive(Debug, Parser)]
#[command(name = "flowlab test", no_binary_name = true)]
struct TestArgs {
    #[command(flatten)]
    args: cmd::test::Args,
}

#[derive(Debug, Parser)]
#[command(name = "flowlab fetch", no_binary_name = true)]
struct FetchArgs {
    #[command(flatten)]
    args: cmd::fetch::Args,
}

#[derive(Debug, Parser)]
#[command(name = "flowlab serve", no_binary_name = true)]
struct ServeArgs {
    #[command(flatten)]
    args: cmd::serve::Args,
}

#[derive(Debug, Parser)]
#[command(name = "flowlab fragments", no_binary_name = true)]
struct FragmentsArgs {
    #[command(subcommand)]
    command: cmd::fragments::Command,
}

#[derive(Debug, Parser)]
#[command(name = "rtt", no_binary_name = true)]
struct RttArgs {
    /// The host echoed: an IPv4 address (a server's `{NAME.host}`), or a name the
    /// place the echoes are sent from resolves.
    host: String,
    /// Echoes to send.
    #[arg(short = 'c', long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    count: u64,
    /// Between two echoes.
    #[arg(short = 'i', long, default_value = "100ms", value_parser = flowlab_results::units::parse_duration)]
    interval: Duration,
    /// How long a reply is waited for.
    #[arg(long, default_value = "1s", value_parser = flowlab_results::units::parse_duration)]
    timeout: Duration,
}

/// flowlab's own parsers.
#[derive(Debug)]
pub struct Parsers;

impl Commands for Parsers {
    fn test(&self, argv: Vec<String>) -> Result<TestLine, String> {
        // `--trace 5ms` read as the binary reads it (`--trace=5ms`).
        let argv: Vec<String> =
            crate::usage::join_optional_values(argv.into_iter().map(Into::into).collect())
                .into_iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
        let a = TestArgs::try_parse_from(&argv)
            .map_err(|e| one_line(&e))?
            .args;
        if a.json || a.json_stream || a.iperf3_json || a.iperf3_text {
            return Err("the runner records each test's -J document itself: leave out -J, --json-stream, --iperf3-json and --iperf3-text".into());
        }
        let spec = a.to_spec().map_err(|e| e.to_string())?;
        Ok(TestLine {
            argv,
            amount: spec.amount,
            omit: spec.omit,
        })
    }

    fn fetch(&self, argv: &[String]) -> Result<(), String> {
        let a = FetchArgs::try_parse_from(argv)
            .map_err(|e| one_line(&e))?
            .args;
        if a.json || a.sweep_ratios.is_some() {
            return Err("a study's fetch is one fetch, recorded as its -J document: leave out -J and --sweep-ratios (sweep a ratio parameter instead)".into());
        }
        a.to_spec().map_err(|e| e.to_string())?;
        Ok(())
    }

    fn serve(&self, argv: &[String]) -> Result<(), String> {
        let a = ServeArgs::try_parse_from(argv)
            .map_err(|e| one_line(&e))?
            .args;
        if a.one_off {
            return Err("--one-off: a study's server serves every trial".into());
        }
        a.to_config().map_err(|e| e.to_string())?;
        Ok(())
    }

    fn rtt(&self, argv: &[String]) -> Result<Echoes, String> {
        let a = RttArgs::try_parse_from(argv).map_err(|e| one_line(&e))?;
        Ok(Echoes {
            to: a.host,
            count: a.count,
            interval: a.interval,
            timeout: a.timeout,
        })
    }

    fn setup(&self, argv: &[String]) -> Result<Setup, String> {
        let Some(("fragments", rest)) = argv.split_first().map(|(c, r)| (c.as_str(), r)) else {
            return Ok(Setup::Other);
        };
        let line = FragmentsArgs::try_parse_from(rest).map_err(|e| one_line(&e))?;
        Ok(match line.command {
            cmd::fragments::Command::Make { size, count, .. } => Setup::Make { size, count },
            _ => Setup::Fragments,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowlab_runner::study::lines::{LAB_TESTS_PER_SOURCE, StepLine, step_line, with_run_dir};
    use flowlab_study::Study;

    fn setup_line(text: &str, scale: f64) -> Result<Vec<String>, String> {
        flowlab_runner::study::lines::setup_line(&Parsers, text, scale)
    }

    fn serve_line(args: &str, loopback: bool) -> Result<Vec<String>, String> {
        flowlab_runner::study::lines::serve_line(&Parsers, args, loopback)
    }

    fn study(args: &str) -> Study {
        flowlab_study::parse(&format!(
            "name = \"s\"\n[params]\nl = [\"1K\", \"9\"]\n[[step]]\nkind = \"test\"\nargs = \"{args}\"\n"
        ))
        .expect("valid")
    }

    fn line(args: &str, cell: usize, scale: f64) -> Result<StepLine, String> {
        let s = study(args);
        step_line(
            &Parsers,
            &s,
            0,
            &s.cells()[cell],
            &|_| flowlab_study::ServerAddress {
                host: "h".into(),
                port: 1,
                quic_port: None,
            },
            "s",
            scale,
        )
    }

    #[test]
    fn a_step_line_is_the_commands_own_arguments() {
        let l = line("127.0.0.1 -l {l} -t 4 -O 1", 0, 1.0).expect("valid");
        assert_eq!(
            l.argv,
            ["test", "127.0.0.1", "-l", "1K", "-t", "4", "-O", "1"]
        );
        assert_eq!(l.expected, Some(Duration::from_secs(5)));
        assert_eq!(l.deadline(), Some(Duration::from_secs(40)));
        let l = line("127.0.0.1 -n 10M", 0, 1.0).expect("valid");
        assert_eq!((l.expected, l.deadline()), (None, None));
    }

    #[test]
    fn scale_shrinks_every_form_of_the_amount() {
        let cases = [
            ("h -t 10", vec!["test", "h", "-t", "1"]),
            ("h -t10", vec!["test", "h", "-t1"]),
            ("h --time=20", vec!["test", "h", "--time=2"]),
            ("h --bytes 10M", vec!["test", "h", "--bytes", "1048576"]),
            ("h -k 3", vec!["test", "h", "-k", "1"]),
            // The default ten seconds, made explicit.
            ("h -u", vec!["test", "h", "-u", "-t", "1"]),
        ];
        for (args, want) in cases {
            assert_eq!(line(args, 0, 0.1).expect(args).argv, want, "{args}");
        }
        // A cluster hides the amount: refused, not run at full length.
        let e = line("h -ut10", 0, 0.1).expect_err("cluster");
        assert!(e.contains("--scale: cannot find the amount"), "{e}");
    }

    #[test]
    fn a_bad_step_names_the_flag() {
        let e = line("h -l {l} --bogus", 0, 1.0).expect_err("unknown flag");
        assert!(e.contains("unexpected argument '--bogus'"), "{e}");
        let e = line("h -l {l}", 1, 1.0);
        assert!(e.is_ok(), "{e:?}");
        let e = line("h -t 1 -n 1M", 0, 1.0).expect_err("two amounts");
        assert!(e.contains("cannot be used with"), "{e}");
        let e = line("h -J", 0, 1.0).expect_err("json");
        assert!(e.contains("leave out -J"), "{e}");
        let e = line("h -T 'x", 0, 1.0).expect_err("quote");
        assert!(e.contains("unbalanced quote"), "{e}");
    }

    #[test]
    fn a_setup_line_is_a_fragments_command_and_scales_its_size() {
        assert_eq!(
            setup_line("fragments make --size 1M --count 16 --out {run}/set", 0.5).expect("valid"),
            [
                "fragments",
                "make",
                "--size",
                "524288",
                "--count",
                "16",
                "--out",
                "{run}/set"
            ]
        );
        let e = setup_line("test 127.0.0.1", 1.0).expect_err("not fragments");
        assert!(
            e.contains("a setup command is a `fragments` command"),
            "{e}"
        );
        let e = setup_line("fragments make --out d", 1.0).expect_err("no size");
        assert!(e.contains("--size <SIZE>"), "{e}");
        assert_eq!(
            with_run_dir(&["--out".into(), "{run}/set".into()], "/tmp/r"),
            ["--out", "/tmp/r/set"]
        );
    }

    #[test]
    fn a_server_line_is_checked_too() {
        assert_eq!(
            serve_line("--max-tests 4", true).expect("valid"),
            [
                "serve",
                "-J",
                "-p",
                "0",
                "-B",
                "127.0.0.1",
                "--max-duration",
                "0",
                "--max-tests-per-source",
                LAB_TESTS_PER_SOURCE,
                "--max-tests",
                "4"
            ]
        );
        // A study's own limit stands.
        let line = serve_line("--max-duration=30", true).expect("valid");
        assert!(line.contains(&"--max-duration=30".to_string()), "{line:?}");
        assert_eq!(
            line.iter()
                .filter(|a| a.starts_with("--max-duration"))
                .count(),
            1
        );
        let e = serve_line("-p 5201", true).expect_err("port");
        assert!(
            e.contains("'--port <PORT>' cannot be used multiple times"),
            "{e}"
        );
        let e = serve_line("-1", true).expect_err("one-off");
        assert!(e.contains("--one-off"), "{e}");
    }
}
