//! Fragment transfer on loopback: servers with different rates, fetch by ratio and
//! adaptively, hostile requests, and faults (a server killed, a corrupt fragment, a
//! client killed and re-run).

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flowlab_engine::server::ServerConfig;
use flowlab_fragments::fetch::{FetchSpec, Silent, fetch};
use flowlab_fragments::manifest::{self, Manifest};
use flowlab_fragments::schedule::{Mode, assign_ratio};
use flowlab_fragments::serve::FragmentService;
use flowlab_proto::fragment::{Admission, Decoder, MAGIC, Reply, Request, hello};
use flowlab_results::fetch::FetchResult;
use support::Reaped;

/// An in-process server on a free loopback port serving `dir` at `rate_bps` (0: no limit).
fn fragment_server(dir: &Path, rate_bps: u64) -> u16 {
    let service = FragmentService::open(dir, rate_bps, Duration::from_secs(5)).expect("service");
    support::start_server(ServerConfig {
        extra: Some(Arc::new(service)),
        ..ServerConfig::default()
    })
}

fn addr(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

fn run_fetch(ports: &[u16], mode: Mode, out: &Path) -> FetchResult {
    let mut spec = FetchSpec::new(ports.iter().map(|&p| addr(p)).collect(), out.to_path_buf());
    spec.mode = mode;
    spec.stall_timeout = Duration::from_secs(3);
    fetch(&spec, &Silent).expect("the fetch completes")
}

/// Every fragment in `out` is the source's, byte for byte, and joins to the file.
fn assert_complete(src: &Path, out: &Path) {
    let m = Manifest::load(src).expect("manifest");
    for f in &m.fragments {
        let a = std::fs::read(src.join(&f.name)).expect("source fragment");
        let b = std::fs::read(out.join(&f.name)).expect("fetched fragment");
        assert!(a == b, "{} differs", f.name);
    }
    let leftovers: Vec<_> = std::fs::read_dir(out)
        .expect("out dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".part"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn a_ratio_fetch_gets_exactly_the_assigned_fragments_and_joins_to_the_source() {
    let tmp = tempfile::tempdir().expect("tmp");
    // A real file, split, served by two servers; fetched 1:3 and joined again.
    let original = tmp.path().join("original.bin");
    let data: Vec<u8> = (0..3_000_017u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&original, &data).expect("write");
    let src = tmp.path().join("src");
    let m = manifest::split(&original, 40, &src).expect("split");
    let a = fragment_server(&src, 0);
    let b = fragment_server(&src, 0);
    let out = tmp.path().join("out");
    let r = run_fetch(&[a, b], Mode::Ratio(vec![1, 3]), &out);
    let dealt = assign_ratio(40, &[1, 3]);
    // 1:3 of 40 fragments is 10 and 30 (not taken from the code under test).
    assert_eq!(
        r.servers.iter().map(|s| s.fragments).collect::<Vec<_>>(),
        [10, 30]
    );
    for (server, stats) in r.servers.iter().enumerate() {
        let assigned = dealt.iter().filter(|&&s| s == server).count();
        assert_eq!(stats.fragments, assigned, "{}", stats.address);
        let bytes: u64 = m
            .fragments
            .iter()
            .zip(&dealt)
            .filter(|(_, s)| **s == server)
            .map(|(f, _)| f.size)
            .sum();
        assert_eq!(stats.bytes, bytes);
        assert_eq!((stats.corrupt, stats.duplicates), (0, 0));
    }
    assert_complete(&src, &out);
    let joined = tmp.path().join("joined.bin");
    manifest::join(&out, &joined).expect("join");
    assert!(
        std::fs::read(&joined).expect("joined") == data,
        "byte-identical to the source"
    );
}

/// Two servers at 100 and 300 Mbit/s: the adaptive fetch is as fast as the best ratio
/// and close to the ideal S / (rA + rB). The comparison is of the scheduling, not of this
/// machine's speed: beside the suite's other lanes the host gives the servers less than
/// their rates, and unevenly (once 86 and 111 Mbit/s delivered; a run of 1:3 from 0.505
/// to 0.651 s within one test). So the modes run in rounds, one run each, and each run
/// is judged against its round's ideal: S·8 / (rA′ + rB′), where a server's rate is the
/// most it delivered in any run of the round (at most its configured rate) — 1:2 keeps
/// the slower server busy to the end, 1:4 the faster. A run's `efficiency` is that ideal
/// over its time: 1 when both servers were busy to the end. Not the rates of the run
/// itself: a scheduler that leaves a server idle lowers that server's rate in its own
/// run, and so the ideal it would be judged by. Three rounds; each mode's best is
/// compared.
#[test]
fn adaptive_fetch_is_as_fast_as_the_best_ratio_and_near_the_ideal() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = tmp.path().join("src");
    let m = manifest::make(24 << 20, 96, &src).expect("make");
    let rates = [100_000_000f64, 300_000_000f64];
    let a = fragment_server(&src, rates[0] as u64);
    let b = fragment_server(&src, rates[1] as u64);
    let modes = ["1:2", "1:3", "1:4", "adaptive"];
    let mut best = [0.0f64; 4];
    let mut seen = Vec::new();
    for round in 0..3 {
        let mut runs = Vec::new();
        for mode in modes {
            let out = tmp
                .path()
                .join(format!("{}-{round}", mode.replace(':', "-")));
            let r = match mode.split_once(':') {
                Some((x, y)) => {
                    let ratio = vec![x.parse().expect("ratio"), y.parse().expect("ratio")];
                    run_fetch(&[a, b], Mode::Ratio(ratio), &out)
                }
                None => {
                    let r = run_fetch(&[a, b], Mode::Adaptive, &out);
                    assert_complete(&src, &out);
                    // Each server's share follows the rate it delivered in this run.
                    let (fa, fb) = (r.servers[0].fragments as f64, r.servers[1].fragments as f64);
                    let (sa, sb) = (r.servers[0].bits_per_second, r.servers[1].bits_per_second);
                    assert!(
                        (fb / (fa + fb) - sb / (sa + sb)).abs() < 0.15,
                        "{:?}",
                        r.servers
                    );
                    r
                }
            };
            runs.push(r);
        }
        let capacity: f64 = (0..2)
            .map(|i| {
                runs.iter()
                    .map(|r| r.servers[i].bits_per_second)
                    .fold(0.0, f64::max)
                    .min(rates[i])
            })
            .sum();
        let ideal = m.file.size as f64 * 8.0 / capacity;
        for (i, (mode, r)) in modes.iter().zip(&runs).enumerate() {
            let efficiency = ideal / r.seconds;
            best[i] = best[i].max(efficiency);
            let delivered: Vec<u64> = r
                .servers
                .iter()
                .map(|s| (s.bits_per_second / 1e6) as u64)
                .collect();
            seen.push(format!(
                "round {round} {mode}: {:.3} s, {delivered:?} Mbit/s, ideal {ideal:.3} s, efficiency {efficiency:.3}",
                r.seconds
            ));
        }
    }
    let adaptive = best[3];
    let best_ratio = best[..3].iter().copied().fold(0.0, f64::max);
    // 5 % for the granularity of the end game (one fragment is ~1 % of the data).
    assert!(
        adaptive >= best_ratio / 1.05,
        "adaptive {adaptive:.3}, best ratio {best_ratio:.3}: {seen:#?}"
    );
    assert!(adaptive >= 1.0 / 1.10, "adaptive {adaptive:.3}: {seen:#?}");
}

/// Sends a hello with `token` and reads the server's admission.
fn raw_hello(c: &mut TcpStream, token: &[u8]) -> Admission {
    c.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    c.write_all(&hello(token)).expect("hello");
    let mut d = Decoder::default();
    let mut b = [0u8; 1];
    loop {
        if let Some(a) = d.next_admission().expect("a well-formed admission") {
            return a;
        }
        c.read_exact(&mut b).expect("the admission");
        d.push(&b);
    }
}

/// Talks the fragment protocol by hand.
fn raw_client(port: u16) -> (TcpStream, Decoder) {
    let mut c = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    assert_eq!(raw_hello(&mut c, b""), Admission::Welcome);
    let mut len = [0u8; 4];
    c.read_exact(&mut len).expect("manifest length");
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    c.read_exact(&mut body).expect("manifest");
    (c, Decoder::default())
}

fn reply(c: &mut TcpStream, d: &mut Decoder) -> Reply {
    let mut buf = [0u8; 65536];
    loop {
        if let Some(r) = d.next_reply().expect("well-formed") {
            return r;
        }
        let n = c.read(&mut buf).expect("read");
        assert!(n > 0, "server closed");
        d.push(&buf[..n]);
    }
}

#[test]
fn only_fragments_of_the_set_are_ever_served() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = tmp.path().join("src");
    let m = manifest::make(10_000, 4, &src).expect("make");
    // As long as a fragment, so only O_NOFOLLOW (not the size check) can refuse it.
    std::fs::write(
        tmp.path().join("secret"),
        vec![b's'; m.fragments[1].size as usize],
    )
    .expect("secret");
    let port = fragment_server(&src, 0);
    let (mut c, mut d) = raw_client(port);
    // Each hostile name and the reason the server gives (docs/fragments.md).
    let hostile = [
        ("../secret", "refused: name contains a path separator"),
        ("..", "refused: name contains '..'"),
        ("/etc/passwd", "refused: name contains a path separator"),
        ("manifest.json", "no such fragment in this set"),
        ("a/../../secret", "refused: name contains a path separator"),
        ("nul\0byte", "refused: name contains NUL"),
        ("testdata.bin.999", "no such fragment in this set"),
    ];
    for (name, why) in hostile {
        c.write_all(&Request::Get(name.into()).encode())
            .expect("request");
        match reply(&mut c, &mut d) {
            Reply::Refused { name: n, message } => {
                assert_eq!(n, name);
                assert_eq!(message, why, "{name:?}");
            }
            other => panic!("{name:?} was answered with {other:?}"),
        }
    }
    // A fragment replaced by a symlink after the server started is not followed.
    let victim = src.join(&m.fragments[1].name);
    std::fs::remove_file(&victim).expect("rm");
    std::os::unix::fs::symlink(tmp.path().join("secret"), &victim).expect("symlink");
    c.write_all(&Request::Get(m.fragments[1].name.clone()).encode())
        .expect("request");
    match reply(&mut c, &mut d) {
        Reply::Refused { message, .. } => {
            assert_eq!(message, "not a regular file")
        }
        other => panic!("a symlink was answered with {other:?}"),
    }
    // The connection still serves real fragments, with their hash.
    c.write_all(&Request::Get(m.fragments[0].name.clone()).encode())
        .expect("request");
    match reply(&mut c, &mut d) {
        Reply::Fragment { name, size, hash } => {
            assert_eq!(name, m.fragments[0].name);
            assert_eq!(size, m.fragments[0].size);
            assert_eq!(manifest::hex(&hash), m.fragments[0].blake3);
        }
        other => panic!("{other:?}"),
    }
    // A garbage request ends that connection; the server serves the next one.
    let (mut g, _) = raw_client(port);
    g.write_all(b"Z\x00\x01x").expect("garbage");
    let mut buf = [0u8; 16];
    // Closed (end of file, or a reset) at once — not left open until the read times out.
    let r = g.read(&mut buf);
    assert!(
        matches!(&r, Ok(0))
            || r.as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "garbage closes the connection: {r:?}"
    );
    let out = tmp.path().join("out");
    // The symlinked fragment is refused by this server: nobody else has it.
    let mut spec = FetchSpec::new(vec![addr(port)], out);
    spec.stall_timeout = Duration::from_secs(3);
    let err = fetch(&spec, &Silent).expect_err("one fragment cannot be had");
    assert!(
        err.to_string()
            .contains("1 fragment(s) could not be fetched"),
        "{err}"
    );
}

/// A server whose copy of a fragment does not match the manifest's hash.
#[test]
fn a_corrupt_fragment_is_detected_refetched_and_reported() {
    let tmp = tempfile::tempdir().expect("tmp");
    let good = tmp.path().join("good");
    let m = manifest::make(400_000, 8, &good).expect("make");
    let bad = tmp.path().join("bad");
    manifest::make(400_000, 8, &bad).expect("make");
    let victim = bad.join(&m.fragments[3].name);
    let mut bytes = std::fs::read(&victim).expect("read");
    bytes[100] ^= 0xff;
    std::fs::write(&victim, bytes).expect("corrupt");
    let a = fragment_server(&bad, 0);
    let b = fragment_server(&good, 0);
    let out = tmp.path().join("out");
    // 8:1 gives the corrupt fragment to the bad server.
    let r = run_fetch(&[a, b], Mode::Ratio(vec![8, 1]), &out);
    assert_eq!(r.servers[0].corrupt, 1, "{:?}", r.servers[0]);
    assert!(r.servers[0].errors[0].contains(&m.fragments[3].name));
    assert_complete(&good, &out);
}

fn flowlab() -> Command {
    Command::new(assert_cmd::cargo::cargo_bin("flowlab"))
}

fn serve_process(dir: &Path, rate: &str) -> (Reaped, u16) {
    serve_with(dir, &["--rate", rate])
}

/// Where `serve_with` writes the log of the server on `port`.
fn serve_log(dir: &Path, port: u16) -> std::path::PathBuf {
    dir.with_file_name(format!("serve-{port}.log"))
}

/// `flowlab serve --fragments DIR` with more arguments, its log beside DIR.
fn serve_with(dir: &Path, args: &[&str]) -> (Reaped, u16) {
    let port = support::free_port();
    let log = std::fs::File::create(serve_log(dir, port)).expect("log file");
    let child = flowlab()
        .args(["serve", "-B", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .arg("--fragments")
        .arg(dir)
        .stdout(log)
        .stderr(Stdio::null())
        .spawn()
        .expect("flowlab serve");
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    (Reaped(child), port)
}

#[test]
fn a_server_killed_mid_fetch_leaves_its_work_to_the_other() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = tmp.path().join("src");
    manifest::make(16 << 20, 64, &src).expect("make");
    // Both slow enough that the fetch takes a second or so.
    let (mut a, pa) = serve_process(&src, "100M");
    let (_b, pb) = serve_process(&src, "100M");
    let out = tmp.path().join("out");
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let _ = a.0.kill();
        let _ = a.0.wait();
    });
    let r = run_fetch(&[pa, pb], Mode::Ratio(vec![1, 1]), &out);
    killer.join().expect("killer");
    assert!(r.servers[0].failed.is_some(), "{:?}", r.servers[0]);
    assert!(
        r.servers[0].fragments < 32,
        "A died before its share was done"
    );
    assert_eq!(r.servers[0].fragments + r.servers[1].fragments, 64);
    assert_complete(&src, &out);
}

#[test]
fn a_client_killed_mid_fetch_resumes_without_refetching_or_corruption() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = tmp.path().join("src");
    let m = manifest::make(16 << 20, 64, &src).expect("make");
    let (_a, pa) = serve_process(&src, "100M");
    let out = tmp.path().join("out");
    let mut client = Reaped(
        flowlab()
            .args(["fetch", "--from", &addr(pa), "--out"])
            .arg(&out)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("flowlab fetch"),
    );
    std::thread::sleep(Duration::from_millis(500));
    let _ = client.0.kill();
    let _ = client.0.wait();
    // Whatever has its final name is whole and verified.
    let present: Vec<_> = m
        .fragments
        .iter()
        .filter(|f| out.join(&f.name).exists())
        .collect();
    assert!(
        !present.is_empty() && present.len() < 64,
        "{} present",
        present.len()
    );
    for f in &present {
        manifest::verify_fragment(&out, f).expect("a kept fragment is intact");
    }
    let r = run_fetch(&[pa], Mode::Adaptive, &out);
    assert_eq!(
        r.skipped,
        present.len(),
        "verified fragments are not fetched again"
    );
    assert_eq!(r.servers[0].fragments, 64 - present.len());
    assert_complete(&src, &out);
}

#[test]
fn a_client_that_stops_reading_does_not_hold_up_the_others() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = tmp.path().join("src");
    let m = manifest::make(8 << 20, 8, &src).expect("make");
    let port = fragment_server(&src, 0);
    // Asks for everything, many times over, and never reads a byte.
    let (mut stalled, _) = raw_client(port);
    for _ in 0..20 {
        for f in &m.fragments {
            stalled
                .write_all(&Request::Get(f.name.clone()).encode())
                .expect("request");
        }
    }
    let out = tmp.path().join("out");
    let r = run_fetch(&[port], Mode::Adaptive, &out);
    assert_eq!(r.servers[0].fragments, 8);
    assert_complete(&src, &out);
    drop(stalled);
}

/// A server with a token serves only clients that send it; the client is told
/// "authentication failed" and nothing more, the server's log says why.
#[test]
fn a_token_protected_service_serves_only_holders_of_its_token() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().expect("tmp");
    let src = tmp.path().join("src");
    manifest::make(1 << 20, 8, &src).expect("make");
    let token = tmp.path().join("token");
    std::fs::write(&token, "correct-horse-battery-staple\n").expect("token file");
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let (_server, port) = serve_with(&src, &["--token-file", token.to_str().expect("utf-8")]);
    let from = addr(port);
    let fetch_with = |out: &str, env: Option<&str>, file: Option<&Path>| {
        let mut c = flowlab();
        c.args(["fetch", "--from", &from, "--out"])
            .arg(tmp.path().join(out))
            .env_remove("FLOWLAB_TOKEN");
        if let Some(t) = env {
            c.env("FLOWLAB_TOKEN", t);
        }
        if let Some(f) = file {
            c.arg("--token-file").arg(f);
        }
        c.output().expect("flowlab fetch")
    };
    for (out, env) in [("none", None), ("wrong", Some("not-the-token-at-all"))] {
        let o = fetch_with(out, env, None);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{out}: {err}");
        assert!(err.contains("authentication failed"), "{out}: {err}");
        assert!(
            !tmp.path().join(out).join("manifest.json").exists(),
            "{out}"
        );
    }
    let o = fetch_with("short", Some("short"), None);
    assert_eq!(o.status.code(), Some(2), "a usage error");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("FLOWLAB_TOKEN") && err.contains("16"), "{err}");
    let o = fetch_with("right", None, Some(&token));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_complete(&src, &tmp.path().join("right"));
    let o = fetch_with("right-env", Some("correct-horse-battery-staple"), None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let log = std::fs::read_to_string(serve_log(&src, port)).expect("server log");
    assert!(log.contains("without a token"), "{log}");
    assert!(log.contains("wrong token"), "{log}");
    assert!(
        !log.contains("correct-horse"),
        "the log never shows a token: {log}"
    );
}

#[test]
fn a_short_or_missing_token_file_is_refused_naming_the_file() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = tmp.path().join("src");
    manifest::make(4096, 2, &src).expect("make");
    let short = tmp.path().join("short");
    std::fs::write(&short, "abc\n").expect("token");
    for (file, says) in [
        (short.clone(), "3 bytes"),
        (tmp.path().join("absent"), "absent"),
    ] {
        let o = flowlab()
            .args(["serve", "-p", "0", "--fragments"])
            .arg(&src)
            .arg("--token-file")
            .arg(&file)
            .output()
            .expect("flowlab serve");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains("--token-file") && err.contains(says), "{err}");
    }
}

/// The service's connection limits, in all and per source: beyond them a client is told
/// the server is busy and which limit (when every connection is fetching: one that has
/// requested nothing gives way); a closed connection frees its place.
#[test]
fn fragment_connections_beyond_the_limits_are_told_busy() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = tmp.path().join("src");
    let m = manifest::make(4096, 2, &src).expect("make");
    // A connection is fetching once a fragment's reply has reached it (the server marks
    // it before it writes the reply).
    let fetching = |c: &mut TcpStream| {
        let mut len = [0u8; 4];
        c.read_exact(&mut len).expect("manifest length");
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        c.read_exact(&mut body).expect("manifest");
        c.write_all(&Request::Get(m.fragments[0].name.clone()).encode())
            .expect("a request");
        let mut d = Decoder::default();
        assert!(matches!(reply(c, &mut d), Reply::Fragment { .. }));
    };
    let service = FragmentService::open(&src, 0, Duration::from_secs(5))
        .expect("service")
        .with_limits(2, 1);
    let port = support::start_server(ServerConfig {
        extra: Some(Arc::new(service)),
        ..ServerConfig::default()
    });
    let mut a = support::connect_from([127, 0, 0, 2], port);
    assert_eq!(raw_hello(&mut a, b""), Admission::Welcome);
    let mut a2 = support::connect_from([127, 0, 0, 2], port);
    match raw_hello(&mut a2, b"") {
        Admission::Busy(m) => assert!(m.contains("per-source"), "{m}"),
        other => panic!("{other:?}"),
    }
    let mut b = support::connect_from([127, 0, 0, 3], port);
    assert_eq!(raw_hello(&mut b, b""), Admission::Welcome);
    fetching(&mut a);
    fetching(&mut b);
    let mut c = support::connect_from([127, 0, 0, 4], port);
    match raw_hello(&mut c, b"") {
        Admission::Busy(m) => assert!(m.contains("--max-fragment-connections"), "{m}"),
        other => panic!("{other:?}"),
    }
    drop(a);
    // The server notices the close when its reader sees the end of the stream.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut c = support::connect_from([127, 0, 0, 4], port);
        match raw_hello(&mut c, b"") {
            Admission::Welcome => break,
            Admission::Busy(_) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50))
            }
            other => panic!("a place was not freed: {other:?}"),
        }
    }
}

/// A fragment hello dripped slowly counts as a handshake (the per-source limit holds
/// against it) and is cut at the handshake deadline.
#[test]
fn a_slow_fragment_hello_is_a_handshake_and_is_cut_at_its_deadline() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = tmp.path().join("src");
    manifest::make(4096, 2, &src).expect("make");
    let service = FragmentService::open(&src, 0, Duration::from_secs(30)).expect("service");
    let port = support::start_server(ServerConfig {
        extra: Some(Arc::new(service)),
        handshake_timeout: Duration::from_secs(2),
        max_handshakes_per_source: 1,
        ..ServerConfig::default()
    });
    let started = Instant::now();
    let mut drip = support::connect_from([127, 0, 0, 2], port);
    drip.write_all(&MAGIC).expect("magic");
    std::thread::sleep(Duration::from_millis(300));
    let mut second = support::connect_from([127, 0, 0, 2], port);
    assert!(
        support::closed_within(&mut second, Duration::from_secs(1)),
        "a second connection from the same address was held beside the dripping hello"
    );
    let mut sent = 0;
    while !support::closed_within(&mut drip, Duration::from_millis(400)) {
        // One byte of the version and the token length every 0.4 s, then nothing.
        if sent < 2 {
            let _ = drip.write_all(&[2]);
            sent += 1;
        }
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "held past the deadline"
        );
    }
    assert!(
        started.elapsed() >= Duration::from_millis(1900),
        "{:?}",
        started.elapsed()
    );
}

/// `serve --fragments DIR --http`: the set by HTTP as a page fetching it from several
/// servers needs it — the manifest, each fragment whole or by byte range, readable from
/// any origin, behind the set's token, paced to its rate — and nothing else: no listing,
/// no name outside the set, no range past the end.
#[test]
fn a_fragment_set_is_served_over_http_by_range_to_any_origin() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().expect("tmp");
    let src = tmp.path().join("src");
    manifest::make(1 << 20, 4, &src).expect("make");
    let token = tmp.path().join("token");
    std::fs::write(&token, "correct-horse-battery-staple\n").expect("token file");
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let http = support::free_port();
    let (_server, _) = serve_with(
        &src,
        &[
            "--token-file",
            token.to_str().expect("utf-8"),
            "--rate",
            "16M",
            "--http",
            &format!("127.0.0.1:{http}"),
        ],
    );
    support::await_listening(http, None, "serve --http");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let url = |name: &str| format!("http://127.0.0.1:{http}/fragments/{name}");
    let get = |name: &str, headers: &[(&str, &str)]| {
        let mut r = agent.get(url(name));
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        let mut answer = r.call().expect("an answer");
        let head = |k: &str| {
            answer
                .headers()
                .get(k)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).to_string())
        };
        let cors = head("access-control-allow-origin");
        let range = head("content-range");
        let status = answer.status().as_u16();
        let mut body = Vec::new();
        answer
            .body_mut()
            .as_reader()
            .read_to_end(&mut body)
            .expect("a body");
        (status, body, cors, range)
    };
    let bearer = [("Authorization", "Bearer correct-horse-battery-staple")];
    // The token is the set's, as for its own protocol.
    for wrong in [
        &[][..],
        &[("Authorization", "Bearer not-the-token-at-all")][..],
    ] {
        let (status, body, cors, _) = get(manifest::MANIFEST, wrong);
        assert_eq!(status, 401, "{}", String::from_utf8_lossy(&body));
        assert_eq!(cors.as_deref(), Some("*"));
    }
    let (status, body, _, _) = get(manifest::MANIFEST, &bearer);
    assert_eq!(status, 200);
    let served = Manifest::parse(&body, Path::new("served")).expect("the manifest");
    assert_eq!(served, Manifest::load(&src).expect("the set's manifest"));
    let first = &served.fragments[0];
    let on_disk = std::fs::read(src.join(&first.name)).expect("the fragment");
    // Whole, paced: 256 KiB at 16 Mbit/s takes at least 0.13 s.
    let began = Instant::now();
    let (status, body, _, range) = get(&first.name, &bearer);
    assert_eq!((status, range), (200, None));
    assert!(body == on_disk, "the whole fragment");
    let took = began.elapsed().as_secs_f64();
    let floor = on_disk.len() as f64 * 8.0 / 16e6;
    assert!(
        took >= 0.9 * floor,
        "{took:.3} s, under --rate's {floor:.3} s"
    );
    // A range, and one past the end.
    let (status, body, _, range) = get(&first.name, &[bearer[0], ("Range", "bytes=1000-1999")]);
    assert_eq!(status, 206);
    assert_eq!(range.as_deref(), Some("bytes 1000-1999/262144"));
    assert!(body == on_disk[1000..2000], "the range's bytes");
    let (status, _, _, range) = get(&first.name, &[bearer[0], ("Range", "bytes=262144-")]);
    assert_eq!((status, range.as_deref()), (416, Some("bytes */262144")));
    // Nothing outside the set, and no listing.
    std::fs::write(tmp.path().join("secret"), "not served").expect("a file beside");
    for name in ["..%2Fsecret", "secret", "nothing.000", ".hidden", ""] {
        let (status, body, _, _) = get(name, &bearer);
        assert_eq!(status, 404, "{name}: {}", String::from_utf8_lossy(&body));
    }
    // A page of another origin may ask for a range (the preflight allows it).
    let preflight = agent
        .options(url(&first.name))
        .header("Origin", "http://elsewhere.example")
        .header("Access-Control-Request-Method", "GET")
        .header("Access-Control-Request-Headers", "range, authorization")
        .call()
        .expect("a preflight");
    assert_eq!(preflight.status().as_u16(), 204);
    let allowed = preflight
        .headers()
        .get("access-control-allow-headers")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).to_lowercase());
    assert_eq!(allowed.as_deref(), Some("range, authorization"));
}
