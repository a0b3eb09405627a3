//! `flowlab serve --http`: the speed-test page and endpoints on a listener of the
//! server's own, beside its tests and with its metrics on the same listener; the page
//! run in headless Chromium; and every way of asking for it wrongly refused, naming the
//! flag.

mod support;

use std::io::Read;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::{Browser, Reaped, await_listening, free_ports, usage_error};

/// One listener serves the speed-test endpoints and, given `--metrics` without an
/// address, the metrics, which count the HTTP transfers too, while the server's own port
/// serves a test as before.
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
    let mut server = Reaped(child);
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
    // The HTTP requests are counted beside the tests: one download of 3 MB, one upload
    // of 1 MiB, one refusal of a download too large.
    for series in [
        "flowlab_server_tests_started_total{protocol=\"tcp\"} 1",
        "flowlab_server_http_transfers_total{direction=\"download\"} 1",
        "flowlab_server_http_transfers_total{direction=\"upload\"} 1",
        "flowlab_server_http_sent_bytes_total 3000000",
        "flowlab_server_http_received_bytes_total 1048576",
        "flowlab_server_http_refused_total{reason=\"bad\"} 1",
        "flowlab_server_http_refused_total{reason=\"busy\"} 0",
    ] {
        assert!(
            metrics.lines().any(|l| l == series),
            "{series} not in:\n{metrics}"
        );
    }
    if support::require_tool("promtool") {
        support::promtool_check_metrics(&metrics);
    }

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
            "speed test at http://{http}/, live status at http://{http}/status, and the endpoints of standard clients (docs/web.md)"
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
        "--http-max-transfers must be 1 to 1000000, not 0",
    );
}

/// An address already taken, for --http or --metrics, is refused before anything is
/// served, naming the flag.
#[test]
fn an_address_in_use_is_refused_naming_the_flag() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("address");
    for flag in ["--http", "--metrics"] {
        let port = free_ports(1);
        let out = Command::new(env!("CARGO_BIN_EXE_flowlab"))
            .args(["serve", "-p", &port.to_string(), flag, &addr.to_string()])
            .output()
            .expect("serve");
        assert_eq!(out.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("{flag} {addr}: cannot listen there")),
            "{stderr}"
        );
    }
}

/// `curl ARGS…` (Debian curl, HTTP/2 by nghttp2): its exit status, stdout and stderr.
fn curl(args: &[&str]) -> (bool, String, String) {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "30"])
        .args(args)
        .output()
        .expect("curl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A server with `--http` and `tls` flags, its HTTP port, and what it said on starting.
fn serve_tls(tls: &[&str]) -> (Reaped, u16, String) {
    let port = free_ports(2);
    let http = format!("127.0.0.1:{}", port + 1);
    let mut child = Command::new(env!("CARGO_BIN_EXE_flowlab"))
        .args(["serve", "-p", &port.to_string(), "--http", &http])
        .args(tls)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve");
    await_listening(port + 1, Some(&mut child), "the HTTP listener");
    let mut said = String::new();
    let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    // Its first lines: what it serves, TLS's last.
    loop {
        let mut line = String::new();
        let n = std::io::BufRead::read_line(&mut out, &mut line).expect("a line");
        assert!(n > 0, "serve said no TLS line: {said}");
        said += &line;
        if line.starts_with("TLS on the same port") {
            break;
        }
    }
    // Whatever it says later is read, so that it never writes to a closed pipe.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    (Reaped(child), port + 1, said)
}

/// The SHA-256 of the server's public key, as `serve --tls-self-signed` prints it.
fn pin_of(said: &str) -> &str {
    said.split("--ignore-certificate-errors-spki-list=")
        .nth(1)
        .and_then(|p| p.split(')').next())
        .unwrap_or_else(|| panic!("no pin in {said}"))
}

/// With a self-signed certificate the same port speaks TLS 1.3 and HTTP/2 (ALPN) to a
/// client that opens with TLS, and HTTP/1.1 in the clear to one that does not; the
/// responsiveness method's endpoints answer over it, its configuration naming them at
/// the https address the client used; the pin printed is the certificate's.
#[test]
fn tls_on_the_http_port_speaks_http2_and_the_responsiveness_endpoints() {
    if !support::require_tool("curl") {
        return;
    }
    // --http-max-bytes bounds neither /large nor /slurp: 20 MB and 50 MB pass it below.
    let (_server, port, said) = serve_tls(&["--tls-self-signed", "--http-max-bytes", "1M"]);
    let base = format!("https://127.0.0.1:{port}");
    assert!(
        said.contains(&format!(
            "TLS on the same port, https://127.0.0.1:{port}/: a self-signed certificate for localhost, 127.0.0.1, ::1"
        )),
        "{said}"
    );
    let pin = pin_of(&said);

    let (ok, out, err) = curl(&[
        "-k",
        "-v",
        "-o",
        "/dev/null",
        "-w",
        "%{http_version} %{http_code} %{size_download}",
        &format!("{base}/__down?bytes=1000000"),
    ]);
    assert!(ok, "{err}");
    assert_eq!(out, "2 200 1000000", "{err}");
    assert!(err.contains("SSL connection using TLSv1.3"), "{err}");
    assert!(err.contains("ALPN: server accepted h2"), "{err}");
    // The certificate's public key is the one pinned: curl's own pin check.
    let (ok, _, err) = curl(&[
        "-k",
        "--pinnedpubkey",
        &format!("sha256//{pin}"),
        "-o",
        "/dev/null",
        &format!("{base}/small"),
    ]);
    assert!(ok, "the printed pin is not the certificate's: {err}");
    // In the clear on the same port.
    let (ok, out, err) = curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_version} %{http_code} %{size_download}",
        &format!("http://127.0.0.1:{port}/__down?bytes=1000"),
    ]);
    assert!(ok, "{err}");
    assert_eq!(out, "1.1 200 1000");

    let (ok, config, err) = curl(&["-k", &format!("{base}/config")]);
    assert!(ok, "{err}");
    let config: serde_json::Value = serde_json::from_str(&config).expect("JSON");
    assert_eq!(config["version"], 1);
    for (key, path) in [
        ("small_https_download_url", "small"),
        ("large_https_download_url", "large"),
        ("https_upload_url", "slurp"),
        ("small_download_url", "small"),
        ("large_download_url", "large"),
        ("upload_url", "slurp"),
    ] {
        assert_eq!(config["urls"][key], format!("{base}/{path}"), "{config}");
    }
    let (ok, out, err) = curl(&["-k", "-w", " %{http_version}", &format!("{base}/small")]);
    assert!(ok, "{err}");
    assert_eq!(out.len(), 3, "one byte, then ' 2': {out:?}");
    assert!(out.ends_with(" 2"), "{out}");
    // The large download goes on past --http-max-bytes as long as it is read: 20 MB of
    // it read, and the client stops.
    let mut large = Command::new("curl")
        .args(["-sk", "--max-time", "30", &format!("{base}/large")])
        .stdout(Stdio::piped())
        .spawn()
        .expect("curl");
    let mut head = vec![0u8; 20_000_000];
    large
        .stdout
        .take()
        .expect("stdout")
        .read_exact(&mut head)
        .expect("20 MB of /large");
    let _ = large.kill();
    let _ = large.wait();
    // An upload of any size over HTTP/2.
    let data = tempfile::NamedTempFile::new().expect("tmp");
    std::fs::write(data.path(), vec![0u8; 50_000_000]).expect("data");
    let (ok, out, err) = curl(&[
        "-k",
        "-o",
        "/dev/null",
        "-w",
        "%{http_version} %{http_code} %{size_upload}",
        "--data-binary",
        &format!("@{}", data.path().display()),
        &format!("{base}/slurp"),
    ]);
    assert!(ok, "{err}");
    assert_eq!(out, "2 200 50000000");
}

/// A certificate and key of the user's (made by openssl) are served, and a client that
/// trusts that certificate verifies it; files that are missing or do not match are
/// refused, naming the flag and the file.
#[test]
fn a_certificate_of_ones_own_is_served_and_bad_ones_refused() {
    if !support::require_tool("curl") || !support::require_tool("openssl") {
        return;
    }
    let dir = tempfile::tempdir().expect("tmp");
    let (cert, key) = support::openssl_certificate(dir.path(), "DNS:localhost");
    let (cert_s, key_s) = (cert.display().to_string(), key.display().to_string());
    let (_server, port, said) = serve_tls(&["--tls-cert", &cert_s, "--tls-key", &key_s]);
    assert!(
        said.contains(&format!("the certificate in {cert_s}")),
        "{said}"
    );
    let (ok, out, err) = curl(&[
        "--cacert",
        &cert_s,
        "--resolve",
        &format!("localhost:{port}:127.0.0.1"),
        "-o",
        "/dev/null",
        "-w",
        "%{http_version} %{http_code}",
        &format!("https://localhost:{port}/__down?bytes=10"),
    ]);
    assert!(ok, "{err}");
    assert_eq!(out, "2 200");

    let refused = |tls: &[&str], says: &[&str]| {
        let port = free_ports(2);
        let out = Command::new(env!("CARGO_BIN_EXE_flowlab"))
            .args(["serve", "-p", &port.to_string()])
            .args(["--http", &format!("127.0.0.1:{}", port + 1)])
            .args(tls)
            .output()
            .expect("serve");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        for s in says {
            assert!(stderr.contains(s), "{s:?} not in: {stderr}");
        }
    };
    let missing = dir.path().join("none.pem").display().to_string();
    refused(
        &["--tls-cert", &missing, "--tls-key", &key_s],
        &["--tls-cert/--tls-key", &missing, "No such file"],
    );
    // The certificate given as its key too: no private key there.
    refused(
        &["--tls-cert", &cert_s, "--tls-key", &cert_s],
        &["--tls-cert/--tls-key", &cert_s, "no private key"],
    );
    // Another key than the certificate's.
    let other = dir.path().join("other.pem");
    let made = Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-out",
        ])
        .arg(&other)
        .output()
        .expect("openssl");
    assert!(made.status.success());
    refused(
        &[
            "--tls-cert",
            &cert_s,
            "--tls-key",
            &other.display().to_string(),
        ],
        &["--tls-cert/--tls-key", &cert_s],
    );
}

/// TLS asked for without --http, or half of a pair, is a usage error naming the flag.
#[test]
fn tls_flags_without_their_partners_are_refused() {
    usage_error(&["serve", "--tls-self-signed"], "--http");
    usage_error(
        &["serve", "--http", "8080", "--tls-cert", "c.pem"],
        "--tls-key",
    );
    usage_error(
        &[
            "serve",
            "--http",
            "8080",
            "--tls-self-signed",
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
        ],
        "--tls-self-signed",
    );
}

/// The speed-test page runs in a real browser against `serve --http`: it loads nothing
/// from elsewhere and logs nothing, its run reaches the server as a `flowlab.web/1`
/// document with both directions and both latencies, and what the page shows is that
/// document's figures, in flowlab's units.
#[test]
fn the_speed_test_page_runs_in_headless_chromium() {
    if !support::require_tool("chromium") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_ports(2);
    let http = format!("127.0.0.1:{}", port + 1);
    let child = Command::new(env!("CARGO_BIN_EXE_flowlab"))
        .args(["serve", "-p", &port.to_string(), "--http", &http])
        .stdout(Stdio::null())
        .spawn()
        .expect("serve");
    let mut server = Reaped(child);
    await_listening(port + 1, Some(&mut server.0), "serve --http");
    let browser = Browser::open(
        &format!("http://{http}/?auto=1&seconds=2&streams=2"),
        dir.path(),
        &[],
    );
    // Idle probes (2 s), 2 s each way, the result sent: done well within a minute.
    let state = browser.wait_for(Duration::from_secs(60), "its end", |b| {
        let state = b.eval("document.getElementById('state')?.textContent ?? 'loading'");
        // Null: the page not there yet (the browser opens on a blank one).
        let running = [
            "loading",
            "Ready.",
            "Idle latency…",
            "Download…",
            "Upload…",
            "Sending the result…",
        ];
        if !state.is_null() && !running.iter().any(|r| state == *r) {
            Ok(state)
        } else {
            Err(state.to_string())
        }
    });
    assert_eq!(state, "Done.", "console: {:?}", browser.console());
    assert_eq!(browser.console(), Vec::<String>::new(), "console messages");

    let runs: serde_json::Value = ureq::get(format!("http://{http}/results"))
        .call()
        .expect("results")
        .body_mut()
        .read_to_string()
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .expect("JSON");
    let [doc] = runs.as_array().expect("an array").as_slice() else {
        panic!("one run: {runs}")
    };
    let doc: flowlab_results::web::WebResult =
        serde_json::from_value(doc.clone()).expect("a flowlab.web/1 document");
    assert_eq!(doc.schema, "flowlab.web/1");
    assert_eq!((doc.start.streams, doc.start.seconds), (2, 2.0));
    assert_eq!(doc.start.http_version, "HTTP/1.1");
    assert!(
        doc.start.user_agent.contains("HeadlessChrome"),
        "{:?}",
        doc.start
    );
    let default_cc = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .expect("the default congestion control");
    assert_eq!(
        doc.start.congestion_server.as_deref(),
        Some(default_cc.trim())
    );
    let [down, up] = doc.tests.as_slice() else {
        panic!("download and upload: {:?}", doc.tests)
    };
    let received = down.sum.receiver.as_ref().expect("the page received");
    let sent = up.sum.sender.as_ref().expect("the page sent");
    // The server counted what arrived of the page's uploads, over the same time. (Not
    // bounded by the browser's count: its upload progress lags what it has sent.)
    let arrived = up.sum.receiver.as_ref().expect("the server received");
    assert!(
        arrived.bits_per_second > 1e6 && arrived.seconds == sent.seconds,
        "{arrived:?} of {sent:?}"
    );
    for (t, side) in [(down, received), (up, sent)] {
        // Two seconds' load, one interval a second, bytes as counted.
        assert!((1.9..3.0).contains(&side.seconds), "{side:?}");
        assert!(side.bits_per_second > 1e6, "{side:?}");
        assert!((2..=3).contains(&t.intervals.len()), "{:?}", t.intervals);
        let counted: u64 = t.intervals.iter().map(|i| i.sums[0].bytes).sum();
        assert_eq!(counted, side.bytes);
        assert_eq!(t.latency.protocol, "http");
        assert_eq!(t.latency.idle.sent, 20);
        assert_eq!(t.latency.idle.lost, 0);
        assert!(t.latency.loaded.received >= 5, "{:?}", t.latency.loaded);
    }

    // What the page shows is the document's figures, as flowlab prints them.
    let shown = |id: &str| browser.eval(&format!("document.getElementById('{id}').textContent"));
    let table = shown("table");
    let table = table.as_str().expect("the table");
    // The page's port of flowlab's units, held to flowlab-report's own.
    use flowlab_report::units::{Bytes, Rate, UnitFormat};
    // Values exactly half-way at each precision, which Rust rounds to even: an upload
    // counted in 512 KiB steps met 684.5 MiB.
    for bytes in [
        (1369u64 << 19),
        (45 << 18) + (1 << 16),
        (5 << 20) + (1 << 17),
        (7 << 20) + (5 << 17),
        999_500,
    ] {
        let page = browser.eval(&format!("size({bytes})"));
        assert_eq!(
            page,
            Bytes(bytes, UnitFormat::Adaptive).to_string().as_str(),
            "{bytes} B"
        );
    }
    for bps in [684.5e6, 12.25e6, 2.125e6, 2.5e6] {
        let page = browser.eval(&format!("rate({bps})"));
        assert_eq!(
            page,
            Rate(bps, UnitFormat::Adaptive).to_string().as_str(),
            "{bps} bit/s"
        );
    }
    for (side, end) in [
        (received, "receiver"),
        (sent, "sender"),
        (arrived, "receiver"),
    ] {
        let rate = format!(" {} ", Rate(side.bits_per_second, UnitFormat::Adaptive));
        let bytes = format!(" {} ", Bytes(side.bytes, UnitFormat::Adaptive));
        assert!(
            table
                .lines()
                .any(|l| l.contains(&bytes) && l.contains(&rate) && l.ends_with(end)),
            "{bytes}, {rate} ({end}) not in:\n{table}"
        );
    }
    assert!(table.contains(&format!(
        "TCP congestion control: server {}",
        default_cc.trim()
    )));
    assert_eq!(
        browser.eval("document.getElementById('json').hidden"),
        serde_json::Value::Bool(false),
        "the JSON offered for download"
    );
}

/// On an emulated 30 Mbit/s link (10 ms each way), the page in a browser at one end measures what
/// `flowlab test` measures between the same hosts, within 10 %: its download against
/// `-R`'s receiver, what arrived of its upload against the upload's receiver (both with
/// four transfers at once, five seconds each way); and so does Cloudflare's speed-test
/// engine, unmodified, pointed at flowlab's endpoints. Under cubic and under bbr, each
/// the default of both hosts (a browser cannot choose), as the result says.
#[test]
fn the_page_agrees_with_flowlab_test_on_an_emulated_30_mbit_link() {
    if !support::is_root_with_ip("the page's link is emulated in namespaces")
        || !support::require_tool("chromium")
    {
        return;
    }
    let _machine = support::machine_shared();
    let dir = tempfile::tempdir().expect("tempdir");
    // 10 ms each way: without a delay, the shaper's bucket lets a request after an idle
    // moment arrive faster than the rate, and the engine's small requests read high.
    let topology = "name = \"tpage\"\nhosts = [\"c\", \"s\"]\n[[link]]\nends = [\"c\", \"s\"]\nrate = \"30M\"\ndelay = \"10ms\"\n";
    let _down = support::net_up(dir.path(), "tpage", topology);
    let _allowed = AllowedCongestion::every_one();
    for cc in ["cubic", "bbr"] {
        let profile = dir.path().join(cc);
        std::fs::create_dir(&profile).expect("a profile directory");
        page_against_flowlab_test(("fl-tpage-c", "fl-tpage-s"), cc, &profile);
    }
}

/// While held, any congestion control this kernel has may be a network namespace's
/// default. The kernel lets a namespace other than the first default only to one listed
/// in `tcp_allowed_congestion_control`, and a kernel that boots with bbr lists reno and
/// bbr alone (sysctl says "Operation not permitted" for cubic). The list also says what
/// unprivileged sockets may choose; it is put back as it was when this is dropped.
struct AllowedCongestion(String);

impl AllowedCongestion {
    const ALLOWED: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";

    fn every_one() -> AllowedCongestion {
        let was = std::fs::read_to_string(Self::ALLOWED).expect("the allowed list");
        let available =
            std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
                .expect("the available list");
        std::fs::write(Self::ALLOWED, available.trim()).expect("allow every one");
        AllowedCongestion(was.trim().to_string())
    }
}

impl Drop for AllowedCongestion {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(Self::ALLOWED, &self.0) {
            eprintln!("{}: could not put back {:?}: {e}", Self::ALLOWED, self.0);
        }
    }
}

/// One run of the page and of `flowlab test` each way, from `hosts.0` to a server at
/// `hosts.1`, both hosts' default congestion control `cc`.
fn page_against_flowlab_test(hosts: (&str, &str), cc: &str, dir: &std::path::Path) {
    let (client, server) = hosts;
    for ns in [client, server] {
        let set = Command::new("ip")
            .args(["netns", "exec", ns, "sysctl", "-qw"])
            .arg(format!("net.ipv4.tcp_congestion_control={cc}"))
            .status()
            .expect("sysctl");
        assert!(set.success(), "{ns}: the default congestion control {cc}");
    }
    let flowlab = env!("CARGO_BIN_EXE_flowlab");
    let _serving = Reaped(
        Command::new("ip")
            .args(["netns", "exec", server, flowlab, "serve", "-p", "5201"])
            .args(["--http", "8080"])
            .stdout(Stdio::null())
            .spawn()
            .expect("serve"),
    );
    support::in_netns(Some(client), || {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect("10.0.1.2:8080").is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "serve --http did not listen"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    });

    let browser = Browser::open_in(
        Some(client),
        "http://10.0.1.2:8080/?auto=1&seconds=5&streams=4",
        dir,
        &[],
    );
    browser.wait_for(Duration::from_secs(60), &format!("its end ({cc})"), |b| {
        let state = b.eval("document.getElementById('state')?.textContent ?? ''");
        assert!(
            !state.as_str().unwrap_or_default().starts_with("Failed"),
            "{cc}: {state}; console: {:?}",
            b.console()
        );
        if state == "Done." {
            Ok(())
        } else {
            Err(state.to_string())
        }
    });
    assert_eq!(browser.console(), Vec::<String>::new(), "console messages");
    let runs = support::in_netns(Some(client), || {
        ureq::get("http://10.0.1.2:8080/results")
            .call()
            .expect("results")
            .body_mut()
            .read_to_string()
            .expect("results")
    });
    let runs: Vec<flowlab_results::web::WebResult> = serde_json::from_str(&runs).expect("JSON");
    let [doc] = runs.as_slice() else {
        panic!("one run: {runs:?}")
    };
    assert_eq!(doc.start.congestion_server.as_deref(), Some(cc));
    let page_down = doc.tests[0]
        .sum
        .receiver
        .as_ref()
        .expect("download")
        .bits_per_second;
    let page_up = doc.tests[1]
        .sum
        .receiver
        .as_ref()
        .expect("upload")
        .bits_per_second;

    let test = |reverse: bool| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", client, flowlab, "test", "10.0.1.2"])
            .args(["-p", "5201", "-t", "5", "-P", "4", "-J"]);
        if reverse {
            c.arg("-R");
        }
        let out = c.output().expect("flowlab test");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(doc["end"]["congestion_remote"], cc);
        doc["end"]["sums"][0]["receiver"]["bits_per_second"]
            .as_f64()
            .expect("the receiver's rate")
    };
    let (test_down, test_up) = (test(true), test(false));
    let (cf_down, cf_up) = cloudflare_engine(client, dir);
    for (what, page, flowlab) in [
        ("the page's download", page_down, test_down),
        ("the page's upload", page_up, test_up),
        ("Cloudflare's engine, download", cf_down, test_down),
        ("Cloudflare's engine, upload", cf_up, test_up),
    ] {
        let off = (page - flowlab).abs() / flowlab;
        let said = format!(
            "{cc}, {what}: {:.2} Mbit/s, flowlab test {:.2} Mbit/s ({:.1} % apart)",
            page / 1e6,
            flowlab / 1e6,
            off * 100.0
        );
        assert!(off <= 0.10, "{said}");
        eprintln!("{said}");
    }
}

/// Cloudflare's speed-test engine (npm `@cloudflare/speedtest`, vendored unmodified in
/// tests/fixtures) in headless Chromium in namespace `ns`, pointed at flowlab's
/// endpoints at 10.0.1.2:8080 from a page of another origin (127.0.0.1:8000 in the same
/// namespace, served by a listener of flowlab's), as a site embedding the engine would
/// be: its download and upload figures, bits/s. Its measurements are its defaults less
/// the packet-loss one (which needs a TURN server) and the sets of 10 MB and more (seconds
/// each at 30 Mbit/s; its figure, the 90th percentile of its requests' rates, comes from
/// the 1 MB ones); nothing is logged to Cloudflare (`logAimApiUrl: null`).
fn cloudflare_engine(ns: &str, dir: &std::path::Path) -> (f64, f64) {
    const ENGINE: &str = include_str!("fixtures/cloudflare-speedtest/speedtest.js");
    const PAGE: &str = r#"<!doctype html>
<meta charset="utf-8">
<title>Cloudflare's speed-test engine against flowlab</title>
<link rel="icon" href="data:,">
<script type="module">
import SpeedTest from '/speedtest.js';
const api = 'http://10.0.1.2:8080';
// The engine times each request by its Resource Timing entry; the browser keeps 250 by
// default, and a run with loaded-latency probes makes more: a lost entry failed a run
// ("reading 'transferSize'"). A page embedding the engine raises the limit.
performance.setResourceTimingBufferSize(100000);
// It reads the entry as soon as a request's body is read, and Chromium may add it a task
// later: the run then fails the same way (cloudflare/speedtest#36). The page's fetch
// hands the body over once the entry is there (at most ~0.5 s later); the engine's
// figures come from the entry's times, not from when it got the body.
const fetchNow = window.fetch.bind(window);
window.fetch = async (input, init) => {
  const r = await fetchNow(input, init);
  const url = typeof input === 'string' ? input : input.url;
  const before = performance.getEntriesByName(url).length;
  const text = r.text.bind(r);
  r.text = async () => {
    const body = await text();
    for (let i = 0; i < 100 && performance.getEntriesByName(url).length <= before; i++) {
      await new Promise((ok) => setTimeout(ok, 5));
    }
    return body;
  };
  return r;
};
const engine = new SpeedTest({
  downloadApiUrl: api + '/__down',
  uploadApiUrl: api + '/__up',
  logAimApiUrl: null,
  measurements: [
    { type: 'latency', numPackets: 2 },
    { type: 'download', bytes: 1e5, count: 1, bypassMinDuration: true },
    { type: 'latency', numPackets: 20 },
    { type: 'download', bytes: 1e5, count: 9 },
    { type: 'download', bytes: 1e6, count: 8 },
    { type: 'upload', bytes: 1e5, count: 8 },
    { type: 'upload', bytes: 1e6, count: 6 },
  ],
});
engine.onFinish = (results) => { window.summary = results.getSummary(); };
engine.onError = (e) => { window.failure = String(e); };
</script>
"#;
    let listener = support::in_netns(Some(ns), || {
        flowlab_web::Listener::bind(([127, 0, 0, 1], 8000).into()).expect("bind 127.0.0.1:8000")
    });
    let routes = flowlab_web::Routes::new()
        .text("/", "text/html; charset=utf-8", || PAGE.to_string())
        .text("/speedtest.js", "text/javascript; charset=utf-8", || {
            ENGINE.to_string()
        });
    let _pages = listener.serve(routes).expect("serve the page");
    let profile = dir.join("cloudflare");
    std::fs::create_dir(&profile).expect("a profile directory");
    let browser = Browser::open_in(Some(ns), "http://127.0.0.1:8000/", &profile, &["10.0.1.2"]);
    let summary = browser.wait_for(Duration::from_secs(90), "Cloudflare's summary", |b| {
        let state = b.eval("JSON.stringify([window.summary ?? null, window.failure ?? null])");
        let state: serde_json::Value =
            serde_json::from_str(state.as_str().unwrap_or("[null, null]")).expect("JSON");
        assert!(
            state[1].is_null(),
            "Cloudflare's engine failed: {}; console: {:?}",
            state[1],
            b.console()
        );
        if state[0].is_null() {
            Err("no summary yet".into())
        } else {
            Ok(state[0].clone())
        }
    });
    // The engine logs each measurement it takes ("latency …", "download …", "upload
    // …") and the clock offset it skips; anything else (an error, a refused load) fails.
    let progress = [
        "\"latency ",
        "\"download ",
        "\"upload ",
        "\"serverTimeDelta ",
    ];
    let other: Vec<String> = browser
        .console()
        .into_iter()
        .filter(|l| !progress.iter().any(|p| l.contains(p)))
        .collect();
    assert_eq!(other, Vec::<String>::new(), "console messages");
    let bps = |k: &str| {
        summary[k]
            .as_f64()
            .unwrap_or_else(|| panic!("no {k} in {summary}"))
    };
    (bps("download"), bps("upload"))
}

/// `/status` in a real browser shows a test while it runs and once it ended, kept up to
/// date by server-sent events, the client's address masked, with nothing logged.
#[test]
fn the_status_page_shows_a_test_live() {
    if !support::require_tool("chromium") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_ports(2);
    let http = format!("127.0.0.1:{}", port + 1);
    let mut server = Reaped(
        Command::new(env!("CARGO_BIN_EXE_flowlab"))
            .args(["serve", "-p", &port.to_string(), "--http", &http])
            .stdout(Stdio::null())
            .spawn()
            .expect("serve"),
    );
    await_listening(port + 1, Some(&mut server.0), "serve --http");
    let browser = Browser::open(&format!("http://{http}/status"), dir.path(), &[]);
    let text = |id: &str| {
        browser
            .eval(&format!("document.getElementById('{id}')?.innerText ?? ''"))
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let wait = |what: &str, done: &dyn Fn() -> bool| {
        browser.wait_for(Duration::from_secs(20), what, |_| {
            done().then_some(()).ok_or_else(|| "not yet".to_string())
        })
    };
    wait("that it is live", &|| text("state") == "Live.");
    let mut test = Reaped(
        Command::new(env!("CARGO_BIN_EXE_flowlab"))
            .args([
                "test",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-t",
                "3",
                "-R",
            ])
            .stdout(Stdio::null())
            .spawn()
            .expect("flowlab test"),
    );
    wait("the running test", &|| {
        let running = text("running");
        running.contains("127.0.0.x") && running.contains("tcp\tdown")
    });
    let status = test.0.wait().expect("the test's end");
    assert!(status.success());
    wait("the test ended", &|| {
        let recent = text("recent");
        recent.contains("127.0.0.x")
            && recent.contains("served")
            && text("running").lines().count() == 1
    });
    let totals = text("totals");
    assert!(totals.contains("Tests served\n1"), "{totals}");
    assert!(
        !text("recent").contains("127.0.0.1"),
        "the address is masked"
    );
    assert_eq!(browser.console(), Vec::<String>::new(), "console messages");
}

/// `flowlab run --http`: while a small study runs, its report is served as recorded so
/// far (reloading itself, its charts drawn, nothing refused by the page's policy), and
/// the progress page follows each trial as it ends to the run's summary, as the
/// terminal says them.
#[test]
fn a_studys_progress_and_report_are_watched_while_it_runs() {
    if !support::require_tool("chromium") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    // 2 cells × 3 repetitions of 2 s: long enough to look at it half-way.
    let study = dir.path().join("study.toml");
    std::fs::write(
        &study,
        r#"
name = "watched"
repeat = 3
[params]
length = ["8K", "64K"]
[[server]]
name = "a"
[[step]]
name = "transfer"
kind = "test"
args = "{a.host} -p {a.port} -t 2 -l {length}"
"#,
    )
    .expect("the study");
    let port = free_ports(1);
    let http = format!("127.0.0.1:{port}");
    let db = dir.path().join("r.db");
    let mut run = Reaped(
        Command::new(env!("CARGO_BIN_EXE_flowlab"))
            .arg("run")
            .arg(&study)
            .arg("--db")
            .arg(&db)
            .args(["--http", &http])
            .current_dir(dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("flowlab run"),
    );
    await_listening(port, Some(&mut run.0), "run --http");
    let progress = || -> serde_json::Value {
        ureq::get(format!("http://{http}/progress.json"))
            .call()
            .expect("/progress.json")
            .body_mut()
            .read_to_string()
            .map(|t| serde_json::from_str(&t).expect("JSON"))
            .expect("a body")
    };
    assert!(
        support::wait_until(Duration::from_secs(30), || progress()["ok"] == 1),
        "no trial recorded within 30 s: {}",
        progress()
    );
    // Half-way: the report as the database holds it, reloading itself.
    let mut report = ureq::get(format!("http://{http}/report"))
        .call()
        .expect("/report while the run goes on");
    let refresh = report
        .headers()
        .get("refresh")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).to_string());
    assert_eq!(
        refresh.as_deref(),
        Some("10"),
        "reloads while the run goes on"
    );
    let html = report.body_mut().read_to_string().expect("the report");
    assert!(
        html.contains("Study watched") && html.contains("<svg"),
        "{html}"
    );
    let browser = Browser::open(&format!("http://{http}/report"), dir.path(), &[]);
    let charts = browser.wait_for(Duration::from_secs(20), "the report's charts", |b| {
        let n = b.eval("document.querySelectorAll('svg').length");
        if n.as_u64().unwrap_or(0) > 0 {
            Ok(n)
        } else {
            Err(n.to_string())
        }
    });
    assert!(charts.as_u64() >= Some(1));
    assert_eq!(
        browser.console(),
        Vec::<String>::new(),
        "the report's console"
    );
    assert!(
        progress()["summary"].is_null(),
        "the study ended too soon to watch"
    );

    // The progress page, to the end of the run.
    browser.eval("location.assign('/')");
    let state = browser.wait_for(Duration::from_secs(60), "the run's end", |b| {
        let state = b.eval("document.getElementById('state')?.textContent ?? ''");
        let state = state.as_str().unwrap_or_default().to_string();
        if state.starts_with("Ended") {
            Ok(state)
        } else {
            Err(state)
        }
    });
    assert!(state.starts_with("Ended: 6 ok, 0 failed in "), "{state}");
    let rows = browser.eval(
        "[...document.querySelectorAll('#trials tbody tr')].map((r) => r.innerText).join('\\n')",
    );
    let rows: Vec<&str> = rows.as_str().unwrap_or_default().lines().collect();
    assert_eq!(rows.len(), 6, "{rows:?}");
    assert!(
        rows[0].starts_with("6/6\tlength="),
        "newest first: {rows:?}"
    );
    for cell in ["length=8K", "length=64K"] {
        assert_eq!(
            rows.iter().filter(|r| r.contains(cell)).count(),
            3,
            "{rows:?}"
        );
    }
    assert_eq!(
        browser.console(),
        Vec::<String>::new(),
        "the progress page's console"
    );

    let status = run.0.wait().expect("the run's end");
    let (mut stdout, mut stderr) = (String::new(), String::new());
    run.0
        .stdout
        .take()
        .expect("its stdout")
        .read_to_string(&mut stdout)
        .expect("stdout");
    run.0
        .stderr
        .take()
        .expect("its stderr")
        .read_to_string(&mut stderr)
        .expect("stderr");
    assert!(status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("study watched: 6 ok, 0 failed"), "{stdout}");
    assert!(
        stderr.contains(&format!("the run's progress at http://{http}/")),
        "{stderr}"
    );
}

/// The pages' scheduler (flowlab-web's assets/schedule.js, a port of
/// flowlab_fragments::schedule) gives, in the browser that runs it, the answers the Rust
/// scheduler recorded in the shared fixtures (crates/flowlab-fragments/tests/
/// schedule_fixtures.rs holds the Rust one to the same files).
#[test]
fn the_pages_scheduler_gives_the_rust_schedulers_recorded_answers() {
    if !support::require_tool("chromium") {
        return;
    }
    const REPLAY: &str = r#"
function replayFixture(f) {
  const s = new Scheduler(f.mode, f.fragments, f.owner, f.done);
  for (let i = 0; i < f.calls.length; i++) {
    const c = f.calls[i].call;
    let gives = null;
    if (c[0] === 'next') gives = s.next(c[1]);
    else if (c[0] === 'delivered') gives = s.delivered(c[1], c[2], c[3]);
    else if (c[0] === 'dropped') s.dropped(c[1], c[2], c[3]);
    else if (c[0] === 'failed') s.failed(c[1]);
    else return 'no call ' + c[0];
    const alive = [];
    for (let v = 0; v < f.servers; v++) alive.push(s.serverAlive(v));
    const then = [s.remaining(), s.isDone(), s.isStuck(), alive];
    const got = JSON.stringify([gives, then]);
    const want = JSON.stringify([f.calls[i].gives, f.calls[i].then]);
    if (got !== want) return 'call ' + i + ' ' + JSON.stringify(c) + ': gave ' + got + ', recorded ' + want;
  }
  return null;
}
"#;
    let script = include_str!("../../flowlab-web/assets/schedule.js");
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../flowlab-fragments/tests/fixtures/schedule");
    let dir = tempfile::tempdir().expect("tempdir");
    let browser = Browser::open("about:blank", dir.path(), &[]);
    let loaded = browser.eval(&format!("{script}\n{REPLAY}\n'loaded'"));
    assert_eq!(loaded, "loaded", "console: {:?}", browser.console());
    let mut replayed = 0;
    for entry in std::fs::read_dir(&fixtures).expect("the fixtures") {
        let path = entry.expect("an entry").path();
        let text = std::fs::read_to_string(&path).expect("a fixture");
        let diff = browser.eval(&format!("replayFixture({text})"));
        assert!(diff.is_null(), "{}: {diff}", path.display());
        replayed += 1;
    }
    assert!(replayed >= 7, "{replayed} fixtures");
    // The replay can fail: a fixture with one answer changed is caught.
    let text = std::fs::read_to_string(fixtures.join("ratio-1-2.json")).expect("a fixture");
    let changed = text.replacen(r#""gives":0,"#, r#""gives":1,"#, 1);
    assert_ne!(changed, text);
    assert!(!browser.eval(&format!("replayFixture({changed})")).is_null());
    assert_eq!(browser.console(), Vec::<String>::new(), "console messages");
}

/// Seed 000 in a browser: the page at /fetch fetches one fragment set from two flowlab
/// servers at once over HTTP (one sixteen times the other's rate), adaptively and then in
/// a fixed ratio, verifying every fragment by its SHA-256; the faster server delivers
/// more in the adaptive run, the ratio deals its shares exactly — but for the one
/// fragment the faster server holds corrupt, which is caught and fetched from the other.
#[test]
fn the_fetch_page_gets_a_set_from_two_servers_and_reports_the_split() {
    if !support::require_tool("chromium") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let set = dir.path().join("set");
    flowlab_fragments::manifest::make(8 << 20, 32, &set).expect("a set");
    // The second server's copy of the set, with fragment 5 (its share at 1:1) corrupt:
    // same size, one byte changed, so only the hash can tell.
    let copy = dir.path().join("copy");
    std::fs::create_dir(&copy).expect("a copy");
    for entry in std::fs::read_dir(&set).expect("the set") {
        let path = entry.expect("an entry").path();
        std::fs::copy(&path, copy.join(path.file_name().expect("a name"))).expect("copy");
    }
    let bad = copy.join("testdata.bin.005");
    let mut bytes = std::fs::read(&bad).expect("fragment 5");
    bytes[1000] ^= 0xff;
    std::fs::write(&bad, bytes).expect("corrupt it");
    let ports = free_ports(4);
    let mut servers = Vec::new();
    // Far apart, so that a fragment's time at each rate outweighs what a fetch costs the
    // browser on a busy machine (about a tenth of a second in CI at 40M against 120M, which
    // then split 16:16): 8M sends a fragment in 262 ms, 128M in 16 ms.
    for (i, rate, set) in [(0, "8M", &set), (2, "128M", &copy)] {
        let (port, http) = (ports + i, ports + i + 1);
        let mut child = Reaped(
            Command::new(env!("CARGO_BIN_EXE_flowlab"))
                .args(["serve", "-p", &port.to_string()])
                .args(["--http", &format!("127.0.0.1:{http}")])
                .arg("--fragments")
                .arg(set)
                .args(["--rate", rate])
                .stdout(Stdio::null())
                .spawn()
                .expect("serve"),
        );
        await_listening(http, Some(&mut child.0), "serve --http");
        servers.push((child, format!("http://127.0.0.1:{http}")));
    }
    let (a, b) = (&servers[0].1, &servers[1].1);
    let browser = Browser::open(
        &format!("{a}/fetch?from={a}&from={b}&sweep=1:1&auto=1"),
        dir.path(),
        &[],
    );
    let state = fetch_page_end(&browser);
    assert_eq!(state, "Done.", "console: {:?}", browser.console());
    let runs = browser.eval("JSON.stringify(window.fetchRuns)");
    let runs: serde_json::Value =
        serde_json::from_str(runs.as_str().unwrap_or("null")).expect("the runs");
    let runs = runs.as_array().expect("runs");
    assert_eq!(runs.len(), 2, "{runs:?}");
    for r in runs {
        assert_eq!((&r["verified"], &r["of"]), (&32.into(), &32.into()), "{r}");
        assert_eq!(
            r["corrupt"][0], 0,
            "the first server's copies are good: {r}"
        );
    }
    let share = |r: &serde_json::Value, i: usize| r["fragments"][i].as_u64().unwrap_or(0);
    let adaptive = &runs[0];
    assert_eq!(adaptive["split"], "adaptive");
    assert!(
        share(adaptive, 1) > share(adaptive, 0),
        "the 128M server delivered more: {adaptive}"
    );
    assert_eq!(runs[1]["split"], "1:1");
    // Fragment 5 is the second server's to send at 1:1 (A B A B …): its bad copy is
    // caught, and the first server sends it.
    assert_eq!(runs[1]["corrupt"][1], 1, "{}", runs[1]);
    assert_eq!(
        (share(&runs[1], 0), share(&runs[1], 1)),
        (17, 15),
        "{}",
        runs[1]
    );
    // The page's table says the same.
    let table = browser.eval("document.getElementById('runs').innerText");
    let table = table.as_str().unwrap_or_default();
    assert!(
        table.contains("adaptive") && table.contains("1:1") && table.contains("32 of 32"),
        "{table}"
    );
    assert_eq!(browser.console(), Vec::<String>::new(), "console messages");
}

/// The seed-000 page as a phone on a LAN meets it: each server over https with a
/// certificate of its own (`--tls-self-signed`). A browser that has accepted only the
/// page's server's certificate is told which other server to open and accept; once it
/// has accepted both, it fetches and verifies the set from both, over HTTP/2.
#[test]
fn the_fetch_page_over_https_names_the_certificate_to_accept_then_fetches() {
    if !support::require_tool("chromium") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let set = dir.path().join("set");
    flowlab_fragments::manifest::make(2 << 20, 8, &set).expect("a set");
    let set = set.to_str().expect("a UTF-8 path");
    let (_a, port_a, said_a) = serve_tls(&["--tls-self-signed", "--fragments", set]);
    let (_b, port_b, said_b) = serve_tls(&["--tls-self-signed", "--fragments", set]);
    let (a, b) = (
        format!("https://127.0.0.1:{port_a}"),
        format!("https://127.0.0.1:{port_b}"),
    );
    let page = format!("{a}/fetch?from={a}&from={b}&auto=1");

    let profile = dir.path().join("first");
    std::fs::create_dir(&profile).expect("a profile directory");
    let browser = Browser::open_trusting(&page, &profile, &[], &[pin_of(&said_a)]);
    let state = fetch_page_end(&browser);
    let state = state.as_str().unwrap_or_default();
    assert!(
        state.starts_with(&format!("Failed: {b}: no answer"))
            && state.contains(&format!("open {b}/ in this browser once and accept it")),
        "{state}"
    );
    drop(browser);

    let profile = dir.path().join("both");
    std::fs::create_dir(&profile).expect("a profile directory");
    let browser = Browser::open_trusting(&page, &profile, &[], &[pin_of(&said_a), pin_of(&said_b)]);
    assert_eq!(
        fetch_page_end(&browser),
        "Done.",
        "console: {:?}",
        browser.console()
    );
    let runs = browser.eval("JSON.stringify(window.fetchRuns)");
    let runs: serde_json::Value =
        serde_json::from_str(runs.as_str().unwrap_or("null")).expect("the runs");
    let run = &runs[0];
    assert_eq!(
        (&run["verified"], &run["of"]),
        (&8.into(), &8.into()),
        "{run}"
    );
    let from = |i: usize| run["fragments"][i].as_u64().unwrap_or(0);
    assert_eq!(from(0) + from(1), 8, "{run}");
    assert_eq!(run["bytes"][1].as_u64().map(|n| n > 0), Some(true), "{run}");
    // The page's own server's fragments came over HTTP/2 (the other's timing is
    // cross-origin, not shown to the page). A duplicate the endgame aborted has an
    // entry too, with no protocol: every fetch that delivered a kept fragment has one.
    let protocols = browser.eval(&format!(
        "JSON.stringify(performance.getEntriesByType('resource')\
           .filter((e) => e.name.startsWith('{a}/fragments/testdata'))\
           .map((e) => e.nextHopProtocol))"
    ));
    let protocols: Vec<String> =
        serde_json::from_str(protocols.as_str().unwrap_or("null")).expect("protocols");
    let named: Vec<&String> = protocols.iter().filter(|p| !p.is_empty()).collect();
    assert!(
        named.len() as u64 >= from(0).max(1) && named.iter().all(|p| *p == "h2"),
        "{protocols:?} for {} kept from {a}",
        from(0)
    );
    assert_eq!(browser.console(), Vec::<String>::new(), "console messages");
}

/// The fetch page's state line once it has ended (within 60 s).
fn fetch_page_end(browser: &Browser) -> serde_json::Value {
    browser.wait_for(Duration::from_secs(60), "the fetches' end", |b| {
        // Null while the browser still shows its blank page.
        let done = b.eval("document.documentElement?.dataset.done ?? ''");
        let state = b.eval("document.getElementById('state')?.textContent ?? ''");
        if done == "1" {
            Ok(state)
        } else {
            Err(state.to_string())
        }
    })
}
