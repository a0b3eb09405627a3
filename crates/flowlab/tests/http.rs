//! `flowlab serve --http`: the speed-test endpoints on a listener of the server's own,
//! beside its tests and with its metrics on the same listener; and every way of asking
//! for it wrongly refused, naming the flag.

mod support;

use std::io::Read;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::{await_listening, free_ports, usage_error};

/// A `flowlab serve` killed when dropped.
struct Serving(Child);

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One listener serves the speed-test endpoints and, given `--metrics` without an
/// address, the metrics, while the server's own port serves a test as before.
#[test]
fn serve_http_answers_speed_tests_and_metrics_beside_its_tests() {
    let port = free_ports(2);
    let http: SocketAddr = ([127, 0, 0, 1], port + 1).into();
    let mut child = Command::new(env!("CARGO_BIN_EXE_flowlab"))
        .args([
            "serve",
            "-p",
            &port.to_string(),
            "--http",
            &http.to_string(),
        ])
        .args(["--metrics", "--http-max-bytes", "8M"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve");
    await_listening(port + 1, Some(&mut child), "the HTTP listener");
    await_listening(port, Some(&mut child), "flowlab serve");
    let mut server = Serving(child);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();

    let mut r = agent
        .get(format!("http://{http}/__down?bytes=3000000"))
        .call()
        .expect("down");
    assert_eq!(r.status(), 200);
    let mut bytes = Vec::new();
    r.body_mut()
        .as_reader()
        .read_to_end(&mut bytes)
        .expect("body");
    assert_eq!(bytes.len(), 3_000_000);
    // --http-max-bytes holds.
    let r = agent
        .get(format!("http://{http}/__down?bytes={}", (8 << 20) + 1))
        .call()
        .expect("down");
    assert_eq!(r.status(), 400);
    let r = agent
        .post(format!("http://{http}/__up"))
        .send(&vec![0u8; 1 << 20][..])
        .expect("up");
    assert_eq!(r.status(), 200);

    let test = Command::new(env!("CARGO_BIN_EXE_flowlab"))
        .args(["test", "127.0.0.1", "-p", &port.to_string(), "-n", "1M"])
        .output()
        .expect("test");
    assert!(
        test.status.success(),
        "{}",
        String::from_utf8_lossy(&test.stderr)
    );
    let (status, _, metrics) = support::scrape_metrics(http);
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        metrics.contains("flowlab_server_tests_started_total{protocol=\"tcp\"} 1"),
        "{metrics}"
    );

    // What it said on starting: where each is served.
    let _ = server.0.kill();
    let mut said = String::new();
    server
        .0
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut said)
        .expect("its output");
    assert!(
        said.contains(&format!(
            "HTTP speed-test endpoints at http://{http}/ (docs/web.md)"
        )) && said.contains(&format!("metrics at http://{http}/metrics")),
        "{said}"
    );
}

/// Each wrong way to ask is one line naming the flag.
#[test]
fn wrong_http_flags_are_refused_naming_them() {
    usage_error(&["serve", "--metrics"], "--metrics needs ADDRESS:PORT");
    usage_error(
        &["serve", "--metrics", "127.0.0.1:9100", "--http", "8080"],
        "--metrics 127.0.0.1:9100 and --http: one HTTP listener a process",
    );
    usage_error(
        &["serve", "--http", "web"],
        "'web' is neither a port nor ADDRESS:PORT",
    );
    usage_error(&["serve", "--http-max-bytes", "1M"], "--http");
    usage_error(
        &["serve", "--http", "8080", "--http-max-transfers", "0"],
        "--http-max-transfers must be at least 1",
    );
}

/// An address already taken is refused before anything is served, naming the flag.
#[test]
fn an_http_address_in_use_is_refused_naming_the_flag() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("address");
    let port = free_ports(1);
    let out = Command::new(env!("CARGO_BIN_EXE_flowlab"))
        .args([
            "serve",
            "-p",
            &port.to_string(),
            "--http",
            &addr.to_string(),
        ])
        .output()
        .expect("serve");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("--http {addr}: cannot listen there")),
        "{stderr}"
    );
}
