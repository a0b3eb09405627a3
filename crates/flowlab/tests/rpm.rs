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
    assert!(r.idle.median_ms.is_some_and(|m| m > 0.0), "{:?}", r.idle);
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

/// `flowlab rpm URL -J`: its document (stdout), whatever its exit (a load that never
/// saturated on loopback exits 1, saying so), and what it said on stderr. Two
/// connections a direction at most and intervals of 0.5 s: on a busy machine (the suite's
/// lanes side by side) the last four intervals still hold finished probes of every kind.
fn rpm_over_http(url: &str, extra: &[&str]) -> (serde_json::Value, String) {
    let out = flowlab()
        .args(["rpm", url, "-J", "--interval", "0.5", "-t", "4"])
        .args(["--max-connections", "2"])
        .args(extra)
        .output()
        .expect("flowlab rpm");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        out.status.success() || stderr.contains("never saturated"),
        "{stderr}"
    );
    let doc = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{stderr}", String::from_utf8_lossy(&out.stdout)));
    (doc, stderr)
}

/// Over TLS: each foreign probe has its three parts, self probes ran beside the load on
/// its own connections (HTTP/2's streams: HTTP/1.1 could not), and the responsiveness
/// is the draft's formula with the TLS handshake in it.
fn assert_http2_over_tls(doc: &serde_json::Value, what: &str) {
    let ms = |v: &serde_json::Value| {
        v.as_f64()
            .unwrap_or_else(|| panic!("{what}: a number expected, {v} found in {doc}"))
    };
    assert!(
        ms(&doc["idle"]["tls_foreign_ms"]) > 0.0,
        "{what}: {}",
        doc["idle"]
    );
    assert!(
        ms(&doc["idle"]["median_ms"]) > 0.0,
        "{what}: {}",
        doc["idle"]
    );
    assert!(
        doc["start"]["probes"]
            .as_str()
            .is_some_and(|p| p.starts_with("HTTP/2 over TLS")),
        "{what}: {}",
        doc["start"]["probes"]
    );
    let directions = doc["directions"].as_array().expect("directions");
    let names: Vec<&str> = directions
        .iter()
        .map(|d| d["direction"].as_str().expect("a direction's name"))
        .collect();
    assert_eq!(names, ["download", "upload"], "{what}");
    for d in directions {
        let name = format!("{what} {}", d["direction"]);
        assert!(ms(&d["goodput_bps"]) > 1e7, "{name}: {}", d["goodput_bps"]);
        let c = d["connections"].as_u64().expect("connections");
        assert!((1..=2).contains(&c), "{name}: {c} connections");
        for kind in [
            "tcp_foreign",
            "tls_foreign",
            "request_foreign",
            "request_loaded",
        ] {
            let n = d["samples"][kind].as_array().map_or(0, |v| v.len());
            assert!(n >= 3, "{name}: {n} {kind} probes");
        }
        let r = &d["responsiveness"];
        let foreign =
            (ms(&r["tcp_foreign_ms"]) + ms(&r["tls_foreign_ms"]) + ms(&r["request_foreign_ms"]))
                / 3.0;
        assert!((ms(&r["foreign_ms"]) - foreign).abs() < 1e-9, "{name}: {r}");
        let rpm = (60_000.0 / foreign + 60_000.0 / ms(&r["request_loaded_ms"])) / 2.0;
        assert!((ms(&r["rpm"]) - rpm).abs() < 1e-6, "{name}: {r}");
    }
}

/// The method over HTTP/2 and TLS against flowlab's own `serve --http` (its
/// configuration at /config, a self-signed certificate taken with -k, refused without),
/// whose live view counts the load's transfers.
#[test]
fn rpm_over_http2_measures_flowlabs_http_server() {
    let port = free_ports(2);
    let http = format!("127.0.0.1:{}", port + 1);
    let mut server = Reaped(
        Command::new(env!("CARGO_BIN_EXE_flowlab"))
            .args(["serve", "-p", &port.to_string(), "--http", &http])
            .arg("--tls-self-signed")
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("serve"),
    );
    await_listening(port + 1, Some(&mut server.0), "serve --http");
    let url = format!("https://{http}/config");
    let refused = flowlab()
        .args(["rpm", &url, "-t", "1", "--interval", "0.2"])
        .output()
        .expect("rpm");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success()
            && said.contains(&format!("{url}: cannot connect: TLS"))
            && said.contains("-k/--insecure"),
        "{said}"
    );
    let (doc, _) = rpm_over_http(&url, &["-k"]);
    assert_http2_over_tls(&doc, "flowlab");
    let status: serde_json::Value = ureq::get(format!("http://{http}/status.json"))
        .call()
        .expect("status")
        .body_mut()
        .read_to_string()
        .map(|t| serde_json::from_str(&t).expect("JSON"))
        .expect("a body");
    let t = &status["totals"];
    assert!(t["http_downloads"].as_u64() >= Some(1), "{t}");
    assert!(t["http_uploads"].as_u64() >= Some(1), "{t}");
    // Nothing of flowlab's own protocol is asked of an HTTP server.
    for (flag, value) in [("-p", Some("80")), ("-C", Some("cubic")), ("-4", None)] {
        let mut args = vec!["rpm", url.as_str(), flag];
        args.extend(value);
        let out = flowlab().args(&args).output().expect("rpm");
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag}: {said}");
        assert!(said.contains("not with a URL"), "{flag}: {said}");
    }
}

/// The method against a stock server: nginx as Apple's reference configuration shapes
/// it (HTTP/2 over TLS, the configuration and objects files on disk, /slurp handed to a
/// backend: here a flowlab `serve --http` in the clear, without TLS).
#[test]
fn rpm_over_http2_measures_a_stock_nginx() {
    if !require_tool("nginx") || !require_tool("openssl") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let ports = free_ports(3);
    let (nginx_port, backend) = (ports, ports + 2);
    openssl_certificate(d, "IP:127.0.0.1");
    let root = d.join("root");
    std::fs::create_dir(&root).expect("root");
    std::fs::write(root.join("small"), "x").expect("small");
    // Large as the method asks: more than any load reads (sparse, no disk).
    std::fs::File::create(root.join("large"))
        .and_then(|f| f.set_len(64 << 30))
        .expect("large");
    let url = |path: &str| format!("https://127.0.0.1:{nginx_port}/{path}");
    std::fs::write(
        root.join("config"),
        serde_json::json!({"version": 1, "urls": {
            "small_https_download_url": url("small"),
            "large_https_download_url": url("large"),
            "https_upload_url": url("slurp"),
        }})
        .to_string(),
    )
    .expect("config");
    let d_ = d.display();
    std::fs::write(
        d.join("nginx.conf"),
        format!(
            // One process (no master and workers): the test's guard kills all of it.
            "master_process off;\npid {d_}/nginx.pid;\nerror_log {d_}/error.log;\n\
             daemon off;\nevents {{}}\nhttp {{\n  access_log off;\n  \
             client_body_temp_path {d_}/body;\n  proxy_temp_path {d_}/proxy;\n  \
             sendfile on;\n  server {{\n    listen 127.0.0.1:{nginx_port} ssl http2;\n    \
             ssl_certificate {d_}/cert.pem;\n    ssl_certificate_key {d_}/key.pem;\n    \
             root {d_}/root;\n    location = /slurp {{\n      client_max_body_size 250M;\n      \
             proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n      \
             proxy_buffering off;\n      proxy_request_buffering off;\n      \
             proxy_pass http://127.0.0.1:{backend}/slurp;\n    }}\n  }}\n}}\n"
        ),
    )
    .expect("nginx.conf");
    let mut flowlab_backend = Reaped(
        Command::new(env!("CARGO_BIN_EXE_flowlab"))
            .args(["serve", "-p", &(ports + 1).to_string()])
            .args(["--http", &format!("127.0.0.1:{backend}")])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("serve"),
    );
    await_listening(backend, Some(&mut flowlab_backend.0), "the backend");
    let mut nginx = Reaped(
        Command::new("nginx")
            .arg("-c")
            .arg(d.join("nginx.conf"))
            .arg("-e")
            .arg(d.join("error.log"))
            .spawn()
            .expect("nginx"),
    );
    await_listening(nginx_port, Some(&mut nginx.0), "nginx");
    let (doc, stderr) = rpm_over_http(&url("config"), &["-k"]);
    assert_http2_over_tls(&doc, &format!("nginx ({stderr})"));
}
