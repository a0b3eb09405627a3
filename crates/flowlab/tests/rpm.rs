//! `flowlab rpm` on loopback against an in-process server: every load's ramp, probes and
//! responsiveness hang together, refusals name the server, and the command's JSON and
//! usage errors. Through an emulated bottleneck: tests/net.rs.

mod support;

use std::process::Command;
use std::sync::atomic::AtomicBool;

use flowlab_engine::rpm::{Load, Quiet, RpmError, RpmSpec, run};
use flowlab_engine::server::ServerConfig;
use flowlab_results::rpm::{Confidence, trimmed_mean};
use support::*;

fn spec(port: u16, loads: Vec<Load>) -> RpmSpec {
    let mut s = RpmSpec::new("127.0.0.1", port);
    s.loads = loads;
    s.params.interval_seconds = 0.2;
    s.params.max_seconds = 3.0;
    s.params.max_connections = 6;
    s.idle_probes = 5;
    s
}

#[test]
fn every_load_ramps_probes_and_judges() {
    let port = default_server();
    let s = spec(port, vec![Load::Download, Load::Upload, Load::Both]);
    let r = run(&s, &AtomicBool::new(false), &Quiet).expect("a run");
    assert_eq!(r.start.draft, flowlab_results::rpm::DRAFT);
    assert_eq!(r.idle.probes, 5);
    assert!(r.idle.latency_ms.is_some_and(|l| l > 0.0), "{:?}", r.idle);
    let names: Vec<&str> = r.directions.iter().map(|d| d.direction.as_str()).collect();
    assert_eq!(names, ["download", "upload", "both"]);
    for d in &r.directions {
        let name = &d.direction;
        assert!(!d.intervals.is_empty(), "{name}");
        assert!(d.seconds <= 3.0 + 1e-9, "{name}: {}", d.seconds);
        // One connection to start with, one more per interval until saturated.
        assert_eq!(d.intervals[0].connections, 1, "{name}");
        for w in d.intervals.windows(2) {
            let step = w[1].connections - w[0].connections;
            assert!(step <= 1 && (step == 0 || !w[0].saturated), "{name}: {w:?}");
        }
        assert!(d.connections <= 6, "{name}");
        assert!(
            d.goodput_bps.is_some_and(|g| g > 1e8),
            "{name}: {:?}",
            d.goodput_bps
        );
        // Probes of every kind, started while the load ran.
        let s = &d.samples;
        for (kind, v) in [
            ("tcp_foreign", &s.tcp_foreign),
            ("request_foreign", &s.request_foreign),
            ("request_loaded", &s.request_loaded),
        ] {
            assert!(v.len() >= 5, "{name}: {} {kind} probes", v.len());
            assert!(
                v.iter()
                    .all(|x| x.t >= 0.0 && x.t <= d.seconds + 0.5 && x.ms > 0.0),
                "{name} {kind}"
            );
        }
        // The reported responsiveness is the last interval's (once judged), by the
        // draft's formula.
        let r = d.responsiveness.expect("responsiveness");
        if d.confidence != Confidence::Low {
            assert_eq!(
                d.intervals.last().and_then(|i| i.rpm),
                Some(r.rpm),
                "{name}"
            );
        }
        assert!(
            (r.rpm - (60_000.0 / r.foreign_ms + 60_000.0 / r.request_loaded_ms) / 2.0).abs() < 1e-6
        );
        assert!((r.foreign_ms - (r.tcp_foreign_ms + r.request_foreign_ms) / 2.0).abs() < 1e-9);
    }
    // A trimmed mean keeps the fastest 95 %.
    assert_eq!(trimmed_mean(&[1.0, 2.0, 3.0, 100.0], 0.95), Some(2.0));
}

#[test]
fn a_server_that_limits_tests_refuses_load_and_a_stranger_is_named() {
    let port = start_server(ServerConfig {
        max_bitrate: Some(100_000_000),
        ..ServerConfig::default()
    });
    match run(
        &spec(port, vec![Load::Download]),
        &AtomicBool::new(false),
        &Quiet,
    ) {
        Err(e @ RpmError::Refused { .. }) => {
            let text = e.to_string();
            assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
            assert!(text.contains("--max-bitrate"), "{text}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Something that accepts and closes: not a flowlab server.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let closer = std::thread::spawn(move || {
        for c in listener.incoming().take(1) {
            drop(c);
        }
    });
    match run(
        &spec(port, vec![Load::Download]),
        &AtomicBool::new(false),
        &Quiet,
    ) {
        Err(e @ RpmError::NotFlowlab { .. }) => {
            assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");
        }
        other => panic!("expected not-flowlab, got {other:?}"),
    }
    closer.join().expect("closer");
}

fn flowlab() -> Command {
    Command::new(assert_cmd::cargo::cargo_bin("flowlab"))
}

#[test]
fn the_command_prints_json_and_refuses_what_it_cannot_do() {
    let port = default_server();
    let out = flowlab()
        .args(["rpm", "127.0.0.1", "-p", &port.to_string(), "-l", "upload"])
        .args(["--interval", "0.2", "-t", "2", "-C", "cubic", "-J"])
        .output()
        .expect("run");
    // A busy machine may not settle in 2 s: then it says so, and the document is whole.
    assert!(
        out.status.success()
            || (out.status.code() == Some(1) && said(&out).contains("never saturated")),
        "{}",
        said(&out)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["schema"], "flowlab.rpm/1");
    assert_eq!(v["start"]["congestion"], "cubic");
    assert_eq!(v["start"]["params"]["interval_seconds"], 0.2);
    assert_eq!(v["directions"][0]["direction"], "upload");
    assert!(
        v["directions"][0]["responsiveness"]["rpm"]
            .as_f64()
            .is_some_and(|r| r > 0.0)
    );
    for (args, flag) in [
        (&["-l", "sideways"][..], "-l/--load"),
        (&["--interval", "0.01"], "--interval"),
        (
            &["--interval", "0ms"],
            "--interval 0ms: must be above 0 and at most 3600 seconds",
        ),
        (&["-t", "2"], "-t/--max-time"),
        (&["--max-connections", "0"], "--max-connections"),
        (&["-C", "Not A Name"], "-C/--congestion"),
    ] {
        let out = flowlab()
            .args(["rpm", "127.0.0.1", "-p", &port.to_string()])
            .args(args)
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", said(&out));
        assert!(said(&out).contains(flag), "{args:?}: {}", said(&out));
    }
}

/// A run whose load never saturated exits 1 after its summary: with 1 s intervals the
/// draft's moving averages need more than 4 s to settle, so `-t 4` cannot (issue 46).
#[test]
fn a_load_that_never_saturated_exits_non_zero() {
    let port = default_server();
    let out = flowlab()
        .args([
            "rpm",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-l",
            "download",
        ])
        .args(["-t", "4", "-q"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("(never saturated)"), "{stdout}");
    assert!(stdout.contains("responsiveness"), "printed whole: {stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("error: download never saturated: goodput did not settle within -t 4"),
        "{stderr}"
    );
}
