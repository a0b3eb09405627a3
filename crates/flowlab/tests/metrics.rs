//! Prometheus metrics end to end: `flowlab serve --metrics` scraped over HTTP while real
//! clients test against it, its counts held to what the clients saw, and its text checked
//! by Prometheus's own parser and linter (`promtool check metrics`, Debian `prometheus`).

use std::io::Read;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use flowlab_testkit::{
    Reaped, await_listening, free_ports, promtool_check_metrics, scrape_metrics,
};

/// The value of series `name` (labels as written) in the metrics `text`.
fn value(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
}

/// `flowlab test 127.0.0.1 -p PORT ARGS… -J`, bounded in time.
fn client(port: u16, args: &[&str]) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_flowlab"))
        .args(["test", "127.0.0.1", "-p", &port.to_string(), "-J"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("client");
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = c.kill();
            panic!("the client did not end within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    c.wait_with_output().expect("client output")
}

/// A server allowing one test at a time: a test served, one refused as busy while it
/// ran, and one asking for longer than the server allows. The metrics count one TCP test
/// started and served, none running after it, one refusal for "busy", one test not
/// started, the bytes the server received as the client's report gives them;
/// they are Prometheus's text format as its parser reads it, and its linter finds
/// nothing to say.
#[test]
fn a_servers_metrics_count_what_its_clients_saw() {
    let port = free_ports(2);
    let metrics: SocketAddr = ([127, 0, 0, 1], port + 1).into();
    let mut child = Command::new(env!("CARGO_BIN_EXE_flowlab"))
        .args(["serve", "-p", &port.to_string(), "--max-tests", "1"])
        .args(["--metrics", &metrics.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve");
    await_listening(port + 1, Some(&mut child), "the metrics listener");
    await_listening(port, Some(&mut child), "flowlab serve");
    let mut server = Reaped(child);
    // Before any test: every series there, at 0.
    let (status, content_type, before) = scrape_metrics(metrics);
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(content_type, "text/plain; version=0.0.4");
    assert_eq!(
        value(
            &before,
            "flowlab_server_tests_started_total{protocol=\"tcp\"}"
        ),
        0.0
    );
    assert_eq!(
        value(&before, "flowlab_server_refused_total{reason=\"busy\"}"),
        0.0
    );

    let held = std::thread::spawn(move || client(port, &["-t", "3", "-b", "100M"]));
    // Once the metrics count it running, a second test finds the one place taken.
    let deadline = Instant::now() + Duration::from_secs(10);
    while value(&scrape_metrics(metrics).2, "flowlab_server_tests_running") < 1.0 {
        assert!(Instant::now() < deadline, "the first test never ran");
        std::thread::sleep(Duration::from_millis(50));
    }
    let busy = client(port, &["-n", "1K"]);
    assert!(!busy.status.success(), "the second test ran");
    let first = held.join().expect("the first client");
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&first.stdout).expect("JSON");
    // The receiver's count of the one direction, up: the server's own.
    let received = report["end"]["sums"][0]["receiver"]["bytes"]
        .as_f64()
        .expect("the bytes the server received");
    assert!(received > 0.0);

    // A test asking for longer than --max-duration (600 s) is refused at its start.
    let long = client(port, &["-t", "700"]);
    assert!(!long.status.success(), "a 700-s test ran");

    // The server logs a test's end once the client has its results: wait for the counts.
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let (_, _, text) = scrape_metrics(metrics);
        if value(&text, "flowlab_server_tests_served_total{protocol=\"tcp\"}") >= 1.0
            && value(&text, "flowlab_server_tests_not_started_total") >= 1.0
        {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "the test never counted served:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let v = |name: &str| value(&text, name);
    assert_eq!(
        v("flowlab_server_tests_started_total{protocol=\"tcp\"}"),
        1.0
    );
    assert_eq!(
        v("flowlab_server_tests_served_total{protocol=\"tcp\"}"),
        1.0
    );
    assert_eq!(
        v("flowlab_server_tests_failed_total{protocol=\"tcp\"}"),
        0.0
    );
    assert_eq!(
        v("flowlab_server_tests_started_total{protocol=\"udp\"}"),
        0.0
    );
    assert_eq!(v("flowlab_server_tests_running"), 0.0);
    assert_eq!(v("flowlab_server_tests_not_started_total"), 1.0);
    assert_eq!(v("flowlab_server_refused_total{reason=\"busy\"}"), 1.0);
    assert_eq!(v("flowlab_server_received_bytes_total"), received);
    assert!(
        text.contains(&format!(
            "flowlab_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )),
        "{text}"
    );

    // The text log names where the metrics are.
    let _ = server.0.kill();
    let mut log = String::new();
    if let Some(mut out) = server.0.stdout.take() {
        let _ = out.read_to_string(&mut log);
    }
    assert!(
        log.contains(&format!("metrics at http://{metrics}/metrics")),
        "{log}"
    );

    promtool_check_metrics(&text);
}
