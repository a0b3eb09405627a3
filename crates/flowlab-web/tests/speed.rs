//! The speed-test endpoints over a real listener on loopback, as Cloudflare's and
//! LibreSpeed's clients ask them (a plain HTTP/1.1 client, `ureq`), and as abusive
//! clients do: too many bytes, too many transfers, bodies that stall, heads that never
//! end, more connections than allowed. Each refused with the right status, the server
//! serving the next request as before.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flowlab_results::server::HttpRefusal;
use flowlab_web::speed::{Event, Limits};
use flowlab_web::{Listener, Routes, Serving};

/// A listener serving the endpoints under `limits`, and its address.
fn serve(limits: Limits) -> (Serving, SocketAddr) {
    serve_with(limits, |l| l)
}

fn serve_with(limits: Limits, tune: impl FnOnce(Listener) -> Listener) -> (Serving, SocketAddr) {
    let listener = tune(Listener::bind(([127, 0, 0, 1], 0).into()).expect("bind"));
    let addr = listener.local_addr().expect("address");
    let serving = listener
        .serve(Routes::new().speed_test(limits, None, None))
        .expect("serve");
    (serving, addr)
}

/// A listener serving the endpoints under default limits, its address, and the events
/// they told.
fn serve_observed() -> (Serving, SocketAddr, Arc<Mutex<Vec<Event>>>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let told = Arc::clone(&events);
    let listener = Listener::bind(([127, 0, 0, 1], 0).into()).expect("bind");
    let addr = listener.local_addr().expect("address");
    let observer = Arc::new(move |e| told.lock().expect("events").push(e));
    let serving = listener
        .serve(Routes::new().speed_test(Limits::default(), Some(observer), None))
        .expect("serve");
    (serving, addr, events)
}

/// A client that hands 4xx and 5xx answers back rather than failing on them.
fn client() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

fn header(r: &ureq::http::Response<ureq::Body>, name: &str) -> String {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

/// The whole body of an answer.
fn body(r: &mut ureq::http::Response<ureq::Body>) -> Vec<u8> {
    let mut b = Vec::new();
    r.body_mut()
        .as_reader()
        .read_to_end(&mut b)
        .expect("the body");
    b
}

/// How many different 8-byte words `block` holds: all of them for bytes no link
/// compresses (the payload is one 1 MiB block sent again and again).
fn distinct_words(block: &[u8]) -> usize {
    block
        .chunks_exact(8)
        .collect::<std::collections::HashSet<_>>()
        .len()
}

/// Cloudflare's download sends exactly the bytes asked, of no repeating pattern, with
/// the headers its engine reads across origins: `Server-Timing` in its form, readable
/// (`Access-Control-Expose-Headers`) and timeable (`Timing-Allow-Origin`).
#[test]
fn cloudflare_down_sends_what_is_asked_with_the_engines_headers() {
    let (_serving, addr) = serve(Limits::default());
    let agent = client();
    for n in [0usize, 1, 1000, (1 << 20) + 7, 3 << 20] {
        let mut r = agent
            .get(format!("http://{addr}/__down?bytes={n}&measId=7"))
            .call()
            .expect("down");
        assert_eq!(r.status(), 200, "bytes={n}");
        assert_eq!(header(&r, "content-length"), n.to_string());
        assert_eq!(header(&r, "access-control-allow-origin"), "*");
        assert_eq!(header(&r, "timing-allow-origin"), "*");
        assert!(
            header(&r, "access-control-expose-headers").contains("Server-Timing"),
            "{:?}",
            r.headers()
        );
        let timing = header(&r, "server-timing");
        let dur: f64 = timing
            .strip_prefix("cfRequestDuration;dur=")
            .and_then(|d| d.parse().ok())
            .unwrap_or_else(|| panic!("server-timing: {timing}"));
        assert!((0.0..1000.0).contains(&dur), "{timing}");
        assert!(header(&r, "cache-control").contains("no-store"));
        let got = body(&mut r);
        assert_eq!(got.len(), n);
        let block = &got[..n.min(1 << 20)];
        assert_eq!(distinct_words(block), block.len() / 8, "a word repeats");
    }
}

/// A download's size is a number within the limit; otherwise 400, saying why; the
/// server goes on serving.
#[test]
fn a_bad_or_too_large_download_is_refused_with_why() {
    let limits = Limits {
        max_bytes: 1 << 20,
        ..Limits::default()
    };
    let (_serving, addr) = serve(limits);
    let agent = client();
    for (query, says) in [
        ("", "no bytes=N: say how many bytes to send"),
        ("?bytes=lots", "bytes=lots: not a number of bytes"),
        ("?bytes=-1", "bytes=-1: not a number of bytes"),
        (
            "?bytes=1048577",
            "bytes=1048577: this server sends at most 1048576 a request",
        ),
    ] {
        let mut r = agent
            .get(format!("http://{addr}/__down{query}"))
            .call()
            .expect("down");
        assert_eq!(r.status(), 400, "{query}");
        let text = String::from_utf8(body(&mut r)).expect("text");
        assert_eq!(text.trim(), says, "{query}");
    }
    let mut r = agent
        .get(format!("http://{addr}/__down?bytes=1048576"))
        .call()
        .expect("down");
    assert_eq!((r.status().as_u16(), body(&mut r).len()), (200, 1 << 20));
}

/// An upload is read to its end (sized or chunked) and answered with the server's time;
/// one larger than the limit is refused 413, before its body when its size says so.
#[test]
fn uploads_are_taken_and_a_too_large_one_refused() {
    let limits = Limits {
        max_bytes: 4 << 20,
        ..Limits::default()
    };
    let (_serving, addr) = serve(limits);
    let agent = client();
    let data = vec![7u8; 3 << 20];
    let mut r = agent
        .post(format!("http://{addr}/__up?bytes={}", data.len()))
        .send(&data[..])
        .expect("up");
    assert_eq!(r.status(), 200);
    assert!(header(&r, "server-timing").starts_with("cfRequestDuration;dur="));
    assert_eq!(header(&r, "access-control-allow-origin"), "*");
    assert!(body(&mut r).is_empty());
    // Too large, said by its Content-Length: refused before a byte of it is read.
    let mut raw = TcpStream::connect(addr).expect("connect");
    write!(
        raw,
        "POST /__up HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        (4 << 20) + 1
    )
    .expect("head");
    raw.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut answer = [0u8; 512];
    let n = raw.read(&mut answer).expect("an answer before the body");
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        answer.contains(
            "an upload of 4194305 bytes: this server takes at most 4194304 bytes a request"
        ),
        "{answer}"
    );
    // Too large, sent chunked (no size said): refused once past the limit.
    let big = std::io::Cursor::new(vec![1u8; (4 << 20) + 4096]);
    let r = agent
        .post(format!("http://{addr}/__up"))
        .send(ureq::SendBody::from_reader(&mut big.clone()))
        .expect("up");
    assert_eq!(r.status(), 413);
    // And the next upload is taken as before.
    let r = agent
        .post(format!("http://{addr}/__up"))
        .send(&data[..1000])
        .expect("up");
    assert_eq!(r.status(), 200);
}

/// Transfers beyond the limit are refused 503 with Retry-After while the others run; a
/// client that goes away mid-download frees its transfer.
#[test]
fn transfers_beyond_the_limit_are_busy_until_one_ends() {
    let limits = Limits {
        max_transfers: 2,
        ..Limits::default()
    };
    let (_serving, addr) = serve(limits);
    let agent = client();
    // Two downloads of a gigabyte each, read a little and held.
    let mut held: Vec<_> = (0..2)
        .map(|_| {
            let mut r = agent
                .get(format!("http://{addr}/__down?bytes={}", 1u64 << 30))
                .call()
                .expect("down");
            assert_eq!(r.status(), 200);
            let mut first = [0u8; 4096];
            r.body_mut()
                .as_reader()
                .read_exact(&mut first)
                .expect("the first bytes");
            r
        })
        .collect();
    let mut r = agent
        .get(format!("http://{addr}/__down?bytes=10"))
        .call()
        .expect("down");
    assert_eq!(r.status(), 503);
    assert_eq!(header(&r, "retry-after"), "1");
    let text = String::from_utf8(body(&mut r)).expect("text");
    assert!(text.contains("busy: 2 transfers under way"), "{text}");
    let r = agent
        .post(format!("http://{addr}/__up"))
        .send(&b"x"[..])
        .expect("up");
    assert_eq!(r.status(), 503, "uploads count too");
    // One client goes away: its transfer ends, and another may start.
    drop(held.pop());
    let started = Instant::now();
    loop {
        let mut r = agent
            .get(format!("http://{addr}/__down?bytes=10"))
            .call()
            .expect("down");
        if r.status() == 200 {
            assert_eq!(body(&mut r).len(), 10);
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the gone client's transfer was never freed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An upload whose body stops coming is dropped after the stall limit with 408, and
/// frees its transfer.
#[test]
fn a_stalled_upload_is_dropped() {
    let limits = Limits {
        max_transfers: 1,
        stall: Duration::from_millis(500),
        ..Limits::default()
    };
    let (_serving, addr) = serve(limits);
    let mut raw = TcpStream::connect(addr).expect("connect");
    raw.write_all(b"POST /__up HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n0123456789")
        .expect("a start");
    raw.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let began = Instant::now();
    let mut answer = [0u8; 512];
    let n = raw.read(&mut answer).expect("an answer");
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        answer.contains("the upload stalled: no byte in 500ms after 10"),
        "{answer}"
    );
    assert!(began.elapsed() >= Duration::from_millis(400), "{answer}");
    let r = client()
        .get(format!("http://{addr}/__down?bytes=10"))
        .call()
        .expect("down");
    assert_eq!(r.status(), 200, "the stalled upload's transfer freed");
}

/// A large upload raises its socket's low-water mark (one wake-up per half MiB): one
/// that comes slower than that a stall's time is still read to its end, and one that
/// stops is still dropped, after two stalls' time at most.
#[test]
fn a_large_upload_slower_than_its_batches_is_read_and_a_stopped_one_dropped() {
    let limits = Limits {
        stall: Duration::from_millis(300),
        ..Limits::default()
    };
    let (_serving, addr) = serve(limits);
    let length = 3 << 20;
    let mut raw = TcpStream::connect(addr).expect("connect");
    raw.write_all(
        format!("POST /__up HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n").as_bytes(),
    )
    .expect("a head");
    // 64 KiB every 50 ms: 1.25 MiB a second, a batch in 400 ms, past the stall.
    let piece = vec![7u8; 64 << 10];
    for _ in 0..length / piece.len() {
        raw.write_all(&piece).expect("a piece");
        std::thread::sleep(Duration::from_millis(50));
    }
    raw.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut buf = [0u8; 512];
    let n = raw.read(&mut buf).expect("an answer");
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    let mut raw = TcpStream::connect(addr).expect("connect");
    raw.write_all(
        format!("POST /__up HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n").as_bytes(),
    )
    .expect("a head");
    raw.write_all(&piece).expect("a piece");
    raw.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let began = Instant::now();
    let n = raw.read(&mut buf).expect("an answer");
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        answer.contains("the upload stalled: no byte in 300ms after 65536"),
        "{answer}"
    );
    assert!(began.elapsed() < Duration::from_secs(5), "{answer}");
}

/// A client that sends nothing at all, or never finishes its request's head, is cut off
/// after the head's time; connections beyond the limit wait (the kernel's backlog) until
/// one ends.
#[test]
fn slow_heads_are_cut_off_and_connections_beyond_the_limit_wait() {
    let (_serving, addr) = serve_with(Limits::default(), |l| {
        l.head_timeout(Duration::from_millis(500))
            .max_connections(2)
    });
    let began = Instant::now();
    let mut silent = TcpStream::connect(addr).expect("connect");
    silent
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut rest = Vec::new();
    let _ = silent.read_to_end(&mut rest);
    let took = began.elapsed();
    assert!(
        (Duration::from_millis(400)..Duration::from_secs(5)).contains(&took),
        "a silent connection cut off after {took:?}"
    );
    let began = Instant::now();
    let mut slow = TcpStream::connect(addr).expect("connect");
    slow.write_all(b"GET /__down?bytes=1 HTTP/1.1\r\nHost:")
        .expect("part of a head");
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut rest = Vec::new();
    let _ = slow.read_to_end(&mut rest);
    let took = began.elapsed();
    assert!(
        (Duration::from_millis(400)..Duration::from_secs(5)).contains(&took),
        "cut off after {took:?}: {}",
        String::from_utf8_lossy(&rest)
    );
    // Two connections held (each with a request under way), a third waits.
    let agent = client();
    let held: Vec<_> = (0..2)
        .map(|_| {
            let mut c = TcpStream::connect(addr).expect("connect");
            c.write_all(b"POST /__up HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n1")
                .expect("a start");
            c
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let mut third = TcpStream::connect(addr).expect("connect: the backlog takes it");
    third
        .write_all(b"GET /__down?bytes=3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .expect("request");
    third
        .set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    let mut b = [0u8; 64];
    assert!(
        third.read(&mut b).is_err(),
        "answered beyond the limit of two"
    );
    drop(held);
    third
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut answer = Vec::new();
    third.read_to_end(&mut answer).expect("an answer");
    assert!(
        String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    let r = agent
        .get(format!("http://{addr}/__down?bytes=1"))
        .call()
        .expect("down");
    assert_eq!(r.status(), 200);
}

/// LibreSpeed's backend as its client asks it: garbage in chunks of 1 MiB (4 unless a
/// positive number, 1 024 at most, and never beyond the server's limit), empty taking
/// an upload and a ping, getIP saying the address; cross-origin headers only with
/// `?cors`.
#[test]
fn librespeed_backend_answers_as_its_php_does() {
    let limits = Limits {
        max_bytes: 6 << 20,
        ..Limits::default()
    };
    let (_serving, addr) = serve(limits);
    let agent = client();
    for (query, mib) in [
        ("r=0.1", 4),
        ("ckSize=2&r=0.2", 2),
        ("ckSize=0", 4),
        ("ckSize=abc", 4),
        ("ckSize=100", 6),
    ] {
        let mut r = agent
            .get(format!("http://{addr}/backend/garbage.php?{query}"))
            .call()
            .expect("garbage");
        assert_eq!(r.status(), 200, "{query}");
        assert_eq!(header(&r, "content-type"), "application/octet-stream");
        assert!(header(&r, "cache-control").contains("no-store"));
        assert_eq!(header(&r, "access-control-allow-origin"), "", "{query}");
        assert_eq!(body(&mut r).len(), mib << 20, "{query}");
    }
    let r = agent
        .get(format!(
            "http://{addr}/backend/garbage.php?cors=true&ckSize=1"
        ))
        .call()
        .expect("garbage");
    assert_eq!(header(&r, "access-control-allow-origin"), "*");
    assert_eq!(header(&r, "access-control-allow-methods"), "GET, POST");

    let r = agent
        .post(format!("http://{addr}/backend/empty.php?cors=true&r=0.3"))
        .send(&vec![0u8; 1 << 20][..])
        .expect("empty");
    assert_eq!(r.status(), 200);
    assert_eq!(
        header(&r, "access-control-allow-headers"),
        "Content-Encoding, Content-Type"
    );
    let r = agent
        .get(format!("http://{addr}/backend/empty.php?r=0.4"))
        .call()
        .expect("ping");
    assert_eq!(r.status(), 200);

    for (query, shown) in [
        ("r=1", "127.0.0.1"),
        ("isp=true&r=2", "127.0.0.1 - localhost IPv4 access"),
    ] {
        let mut r = agent
            .get(format!("http://{addr}/backend/getIP.php?{query}"))
            .call()
            .expect("getIP");
        assert_eq!(
            header(&r, "content-type"),
            "application/json; charset=utf-8"
        );
        let doc: serde_json::Value = serde_json::from_slice(&body(&mut r)).expect("JSON");
        assert_eq!(
            doc,
            serde_json::json!({ "processedString": shown, "rawIspInfo": "" }),
            "{query}"
        );
    }
}

/// A client that stops reading a download holds its connection and its transfer's place
/// only until the connection has moved no byte for the idle time; then both are freed.
#[test]
fn a_client_that_stops_reading_is_let_go_after_the_idle_time() {
    let limits = Limits {
        max_transfers: 1,
        ..Limits::default()
    };
    let idle = Duration::from_secs(2);
    let (_serving, addr) = serve_with(limits, |l| l.idle_timeout(idle));
    let mut stuck = TcpStream::connect(addr).expect("connect");
    stuck
        .write_all(b"GET /large HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("request");
    let mut first = [0u8; 4096];
    stuck.read_exact(&mut first).expect("the download began");
    // Read no more: the socket buffers fill, the server's writes stop, at the earliest
    // now.
    let began = Instant::now();
    let agent = client();
    let r = agent
        .get(format!("http://{addr}/__down?bytes=1"))
        .call()
        .expect("down");
    assert_eq!(r.status(), 503, "the one place is the stuck client's");
    loop {
        let r = agent
            .get(format!("http://{addr}/__down?bytes=1"))
            .call()
            .expect("down");
        if r.status() == 200 {
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(15),
            "the stuck client's place was never freed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        began.elapsed() >= idle - Duration::from_millis(100),
        "freed after {:?}, before the idle time",
        began.elapsed()
    );
}

/// One address holds at most its share of the transfers; another address (here ::1
/// beside 127.0.0.1) still gets one. A LibreSpeed ping (an empty request) takes none.
#[test]
fn one_address_holds_at_most_its_share_of_the_transfers() {
    let limits = Limits {
        max_transfers_per_source: 1,
        ..Limits::default()
    };
    let listener = Listener::bind("[::]:0".parse().expect("address")).expect("bind");
    let port = listener.local_addr().expect("address").port();
    let _serving = listener
        .serve(Routes::new().speed_test(limits, None, None))
        .expect("serve");
    let agent = client();
    let mut held = agent
        .get(format!("http://127.0.0.1:{port}/large"))
        .call()
        .expect("large");
    assert_eq!(held.status(), 200);
    let mut first = [0u8; 4096];
    held.body_mut()
        .as_reader()
        .read_exact(&mut first)
        .expect("the first bytes");
    let mut r = agent
        .get(format!("http://127.0.0.1:{port}/__down?bytes=10"))
        .call()
        .expect("down");
    assert_eq!(r.status(), 503);
    let text = String::from_utf8(body(&mut r)).expect("text");
    assert!(
        text.contains("busy: 1 transfers under way from 127.0.0.1"),
        "{text}"
    );
    let r = agent
        .get(format!("http://127.0.0.1:{port}/backend/empty.php?r=1"))
        .call()
        .expect("ping");
    assert_eq!(r.status(), 200, "a ping takes no transfer's place");
    let mut r = agent
        .get(format!("http://[::1]:{port}/__down?bytes=10"))
        .call()
        .expect("down from ::1");
    assert_eq!((r.status().as_u16(), body(&mut r).len()), (200, 10));
}

/// A transfer takes at most the limit's time: an endless download ends there, an upload
/// still sending is refused 408, and their places are free again.
#[test]
fn a_transfer_takes_at_most_the_limits_time() {
    let limits = Limits {
        max_transfers: 1,
        max_duration: Duration::from_millis(800),
        ..Limits::default()
    };
    let (_serving, addr) = serve(limits);
    let agent = client();
    let began = Instant::now();
    let mut r = agent
        .get(format!("http://{addr}/large"))
        .call()
        .expect("large");
    assert_eq!(r.status(), 200);
    let got = body(&mut r).len();
    assert!(got > 0, "nothing sent");
    assert!(
        began.elapsed() < Duration::from_secs(10),
        "the endless download went on for {:?}",
        began.elapsed()
    );
    // An upload that sends a byte every 100 ms: never stalled, but too long.
    let mut raw = TcpStream::connect(addr).expect("connect");
    raw.write_all(b"POST /slurp HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
        .expect("head");
    raw.set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    let began = Instant::now();
    let mut answer = Vec::new();
    while began.elapsed() < Duration::from_secs(10) {
        let _ = raw.write_all(b"x");
        let mut b = [0u8; 512];
        match raw.read(&mut b) {
            Ok(0) => break,
            Ok(n) => {
                answer.extend_from_slice(&b[..n]);
                break;
            }
            Err(_) => {}
        }
    }
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        answer.contains("the upload took longer than 800ms"),
        "{answer}"
    );
    let r = agent
        .get(format!("http://{addr}/__down?bytes=10"))
        .call()
        .expect("down");
    assert_eq!(r.status(), 200, "the places freed");
}

/// The responsiveness configuration names the endpoints at the address the client asked
/// for, in the clear here (http), and refuses a Host that is no address (told as a bad
/// request).
#[test]
fn the_configuration_names_the_server_as_reached() {
    let (_serving, addr, events) = serve_observed();
    let ask = |host: &str| {
        let mut c = TcpStream::connect(addr).expect("connect");
        write!(
            c,
            "GET /config HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        )
        .expect("request");
        let mut answer = String::new();
        c.read_to_string(&mut answer).expect("answer");
        answer
    };
    let answer = ask("speed.example:8080");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let doc: serde_json::Value =
        serde_json::from_str(answer.split("\r\n\r\n").nth(1).expect("body")).expect("JSON");
    assert_eq!(
        doc["urls"]["large_download_url"],
        "http://speed.example:8080/large"
    );
    assert_eq!(
        doc["urls"]["https_upload_url"],
        "http://speed.example:8080/slurp"
    );
    assert_eq!(*events.lock().expect("events"), []);
    let answer = ask("a b\"<x>");
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert_eq!(
        *events.lock().expect("events"),
        [Event::Refused(HttpRefusal::Bad)]
    );
}

/// The live view's events go to 32 pages at once; the next is told the server is busy,
/// and is let in once one of them leaves.
#[test]
fn the_live_view_is_watched_by_32_pages_at_most() {
    let listener = Listener::bind(([127, 0, 0, 1], 0).into()).expect("bind");
    let addr = listener.local_addr().expect("address");
    let hub = flowlab_web::status::StatusHub::new();
    let _serving = listener.serve(Routes::new().status(hub)).expect("serve");
    let watch = || {
        let mut c = TcpStream::connect(addr).expect("connect");
        c.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        write!(c, "GET /status/events HTTP/1.1\r\nHost: x\r\n\r\n").expect("request");
        let mut head = [0u8; 12];
        c.read_exact(&mut head).expect("an answer");
        (c, String::from_utf8_lossy(&head).into_owned())
    };
    let mut watching: Vec<TcpStream> = (0..32)
        .map(|_| {
            let (c, head) = watch();
            assert_eq!(head, "HTTP/1.1 200");
            c
        })
        .collect();
    assert_eq!(watch().1, "HTTP/1.1 503");
    drop(watching.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    while watch().1 != "HTTP/1.1 200" {
        assert!(Instant::now() < deadline, "the place was not given back");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A run's document the page could not have sent is refused naming the field, and told
/// as a bad request; a good one is judged, kept for its sender, and told as a page run.
#[test]
fn the_page_results_are_judged_and_bad_ones_refused() {
    let (_serving, addr, events) = serve_observed();
    let agent = client();
    let run = r#"{"streams": 1, "seconds": 1, "probe_interval_seconds": 0.1,
        "idle": [{"sent_ms": 0, "rtt_ms": 1}],
        "download": {"seconds": 1, "bytes": 1000, "intervals": [], "probes": []},
        "upload": {"seconds": 1, "bytes": 1000, "intervals": [], "probes": []}}"#;
    let post = |body: &str| {
        let mut r = agent
            .post(format!("http://{addr}/results"))
            .header("Content-Type", "application/json")
            .send(body)
            .expect("post");
        (
            r.status().as_u16(),
            r.body_mut().read_to_string().expect("body"),
        )
    };
    let (status, body) = post(&run.replace(r#""streams": 1"#, r#""streams": 0"#));
    assert_eq!(status, 400);
    assert!(body.contains("streams: 0 (1 to 64)"), "{body}");
    assert_eq!(
        *events.lock().expect("events"),
        [Event::Refused(HttpRefusal::Bad)]
    );
    let (status, body) = post(run);
    assert_eq!(status, 200, "{body}");
    let doc: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(doc["schema"], "flowlab.web/1");
    assert_eq!(events.lock().expect("events").last(), Some(&Event::PageRun));
    let mut kept = agent
        .get(format!("http://{addr}/results"))
        .call()
        .expect("results");
    let kept: serde_json::Value =
        serde_json::from_str(&kept.body_mut().read_to_string().expect("body")).expect("JSON");
    assert_eq!(kept.as_array().map(Vec::len), Some(1));
}
