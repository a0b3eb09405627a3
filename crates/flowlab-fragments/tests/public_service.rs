//! The fragment service of a public server keeps its promises: connections that fetch
//! nothing cannot keep a fetch out, and a file in a fragment's place cannot hang a
//! connection. Each test here failed before the change it pins (issue 44).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use flowlab_engine::server::ServerConfig;
use flowlab_testkit::*;

/// A fragment set of `n` fragments in `dir/src` (their names), and a server of it with
/// the default limits.
fn fragment_set(dir: &Path, n: usize) -> (PathBuf, Vec<String>, u16) {
    let original = dir.join("original.bin");
    std::fs::write(&original, noise(n * 50_000)).expect("write");
    let src = dir.join("src");
    let m = flowlab_fragments::manifest::split(&original, n, &src).expect("split");
    let names = m.fragments.iter().map(|f| f.name.clone()).collect();
    let service = flowlab_fragments::serve::FragmentService::open(&src, 0, Duration::from_secs(5))
        .expect("service");
    let port = start_server(ServerConfig {
        extra: Some(Arc::new(service)),
        ..ServerConfig::default()
    });
    (src, names, port)
}

/// Sixty-four fragment connections, sixteen from each of 127.0.0.2–5, every place of the
/// service's defaults: each says hello, and the `i`th asks for a name not in the set
/// when `asks(i)`; none reads anything.
fn fill_fragment_places(port: u16, asks: fn(usize) -> bool) -> Vec<TcpStream> {
    (2..6u8)
        .flat_map(|a| (0..16).map(move |i| (a, i)))
        .map(|(a, i)| {
            let mut c = connect_from([127, 0, 0, a], port);
            c.write_all(&flowlab_proto::fragment::hello(b""))
                .expect("hello");
            if asks(i) {
                let ask = flowlab_proto::fragment::Request::Get("not-in-the-set".into());
                c.write_all(&ask.encode()).expect("a request");
            }
            c
        })
        .collect()
}

/// Sixty-four connections, sixteen from each of four addresses, that send the fragment
/// service's hello and then nothing (or a request for a name not in the set) used to
/// fill every place for up to five minutes: `fetch` was told "busy". Now the oldest of
/// those that have been sent no fragment makes room, and an honest fetch completes.
#[test]
fn idle_fragment_connections_give_way_to_a_fetch() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (src, names, port) = fragment_set(tmp.path(), 8);
    // Every other one asks for what is not in the set: that does not make a connection
    // one that is fetching (the next test has all of them ask).
    let idle = fill_fragment_places(port, |i| i % 2 == 1);
    std::thread::sleep(Duration::from_millis(500));
    let out = tmp.path().join("out");
    let spec =
        flowlab_fragments::fetch::FetchSpec::new(vec![format!("127.0.0.1:{port}")], out.clone());
    let r = flowlab_fragments::fetch::fetch(&spec, &flowlab_fragments::fetch::Silent)
        .expect("a fetch beside 64 idle connections");
    assert_eq!(r.servers[0].fragments, 8);
    for name in &names {
        let (a, b) = (std::fs::read(src.join(name)), std::fs::read(out.join(name)));
        assert!(a.is_ok() && a.ok() == b.ok(), "{name} differs");
    }
    drop(idle);
}

/// Every place taken by connections that asked for a name not in the set: a refusal is
/// not a fragment sent, so they still make room for a fetch. (Counting any request as
/// fetching let one bogus request per connection keep `fetch` out again.)
#[test]
fn requests_for_nothing_do_not_hold_a_fragment_place() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (_src, names, port) = fragment_set(tmp.path(), 4);
    let asking = fill_fragment_places(port, |_| true);
    std::thread::sleep(Duration::from_millis(500));
    let out = tmp.path().join("out");
    let spec =
        flowlab_fragments::fetch::FetchSpec::new(vec![format!("127.0.0.1:{port}")], out.clone());
    let r = flowlab_fragments::fetch::fetch(&spec, &flowlab_fragments::fetch::Silent)
        .expect("a fetch beside 64 connections asking for nothing");
    assert_eq!(r.servers[0].fragments, names.len());
    drop(asking);
}

/// A FIFO put in a fragment's place (by someone who can write the served directory) used
/// to block the sending thread in open(2) for ever, and every request behind it. Now it
/// is refused as not a regular file, at once, and the next request is answered.
#[test]
fn a_fifo_in_a_fragments_place_is_refused_not_waited_on() {
    use flowlab_proto::fragment::{Decoder, Reply, Request};
    let tmp = tempfile::tempdir().expect("tmp");
    let (src, names, port) = fragment_set(tmp.path(), 2);
    let fifo = src.join(&names[0]);
    std::fs::remove_file(&fifo).expect("remove");
    let path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("a path");
    // SAFETY: a NUL-terminated path that lives across the call.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0, "mkfifo");
    let mut c = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    c.write_all(&flowlab_proto::fragment::hello(b""))
        .expect("hello");
    for name in &names {
        c.write_all(&Request::Get(name.clone()).encode())
            .expect("request");
    }
    let mut welcome = [0u8; 1];
    c.read_exact(&mut welcome).expect("admission");
    assert_eq!(&welcome, b"W");
    let mut len = [0u8; 4];
    c.read_exact(&mut len).expect("manifest length");
    let mut manifest = vec![0u8; u32::from_be_bytes(len) as usize];
    c.read_exact(&mut manifest).expect("manifest");
    let mut d = Decoder::default();
    let mut buf = [0u8; 65536];
    let mut fill = |d: &mut Decoder| {
        let n = c.read(&mut buf).expect("the server answers (no hang)");
        assert!(n > 0, "closed");
        d.push(&buf[..n]);
    };
    let mut replies = Vec::new();
    while replies.len() < 2 {
        match d.next_reply().expect("reply") {
            Some(Reply::Fragment { name, size, .. }) => {
                let mut left = size as usize;
                while left > 0 {
                    let n = d.take(left).len();
                    if n == 0 {
                        fill(&mut d);
                    }
                    left -= n;
                }
                replies.push(format!("{name}: sent"));
            }
            Some(Reply::Refused { name, message }) => replies.push(format!("{name}: {message}")),
            Some(other) => panic!("{other:?}"),
            None => fill(&mut d),
        }
    }
    let want = [
        format!("{}: not a regular file", names[0]),
        format!("{}: sent", names[1]),
    ];
    assert_eq!(replies, want);
}
