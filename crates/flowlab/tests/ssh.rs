//! A host over SSH as a place where flowlab runs: a network namespace of the test's own
//! with a real OpenSSH server in it (Debian `openssh-server`), reached with a key the
//! test makes. flowlab started there runs, moves files and reports; what was started
//! ends when it is killed or its connection is lost; a host whose flowlab is another
//! version is refused with both versions named.

mod support;

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use flowlab_runner::place::{Job, Output, Place, Process, Ssh, SshError, SshTarget};
use support::{Sshd, flowlab_running_in, is_root_with_ip, require_tool};

/// A namespace with sshd in it, reachable from here over a veth; removed when dropped.
struct Host {
    /// Its end of the veth (this end is .1 of the same /30).
    address: Ipv4Addr,
    ns: String,
    dev: String,
    sshd: Option<Sshd>,
}

impl Drop for Host {
    fn drop(&mut self) {
        drop(self.sshd.take());
        // Whatever is left in the namespace goes with it.
        if let Ok(out) = Command::new("ip")
            .args(["netns", "pids", &self.ns])
            .output()
        {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-9", pid]).status();
            }
        }
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
        // Gone with the namespace, usually: not said.
        let _ = Command::new("ip").args(["link", "del", &self.dev]).output();
    }
}

fn run(program: &str, args: &[&str]) {
    let out = Command::new(program).args(args).output().expect(program);
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Host {
    /// Namespace `ns` with sshd listening on 10.251.`subnet`.2:22; the veth's end here
    /// is `dev`, .1.
    fn up(ns: &str, dev: &str, subnet: u8) -> Host {
        let address = Ipv4Addr::new(10, 251, subnet, 2);
        // One left by a killed run of this test goes first.
        let _ = Command::new("ip").args(["netns", "del", ns]).output();
        let _ = Command::new("ip").args(["link", "del", dev]).output();
        run("ip", &["netns", "add", ns]);
        let mut host = Host {
            address,
            ns: ns.into(),
            dev: dev.into(),
            sshd: None,
        };
        run("ip", &["-n", ns, "link", "set", "lo", "up"]);
        run(
            "ip",
            &[
                "link", "add", dev, "type", "veth", "peer", "name", "eth0", "netns", ns,
            ],
        );
        run(
            "ip",
            &["addr", "add", &format!("10.251.{subnet}.1/30"), "dev", dev],
        );
        run("ip", &["link", "set", dev, "up"]);
        run(
            "ip",
            &[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{address}/30"),
                "dev",
                "eth0",
            ],
        );
        run("ip", &["-n", ns, "link", "set", "eth0", "up"]);
        host.sshd = Some(Sshd::start(ns, &format!("{address}:22")));
        let started = Instant::now();
        while TcpStream::connect_timeout(
            &SocketAddr::from((address, 22)),
            Duration::from_millis(200),
        )
        .is_err()
        {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "sshd did not listen within 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        host
    }

    /// Its sshd's directory (keys, config).
    fn dir(&self) -> &Path {
        self.sshd.as_ref().expect("sshd").dir.path()
    }

    fn connect(&self, flowlab: &str, more: &[&str]) -> Result<Ssh, SshError> {
        let target = SshTarget::parse(&format!("ssh://root@{}", self.address)).expect("address");
        let mut options = self.sshd.as_ref().expect("sshd").options();
        options.extend(more.iter().map(|s| s.to_string()));
        Ssh::connect(target, flowlab, &options, env!("CARGO_PKG_VERSION"))
    }

    /// The flowlab processes in the namespace running `what` (a word of their line).
    fn flowlab_running(&self, what: &str) -> usize {
        flowlab_running_in(&self.ns, what)
    }
}

/// Waits up to `within` for `p` to end.
fn ended(p: &mut Box<dyn Process>, within: Duration) -> Option<flowlab_runner::place::Exit> {
    let started = Instant::now();
    loop {
        if let Some(exit) = p.try_wait().expect("try_wait") {
            return Some(exit);
        }
        if started.elapsed() > within {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ready() -> bool {
    is_root_with_ip("a host over SSH is a namespace of the test's")
        && require_tool("sshd")
        && require_tool("ssh")
        && require_tool("ssh-keygen")
}

fn flowlab() -> &'static str {
    env!("CARGO_BIN_EXE_flowlab")
}

#[test]
fn flowlab_over_ssh_serves_tests_moves_files_and_stops_what_it_started() {
    if !ready() {
        return;
    }
    let host = Host::up("fl-tssh-a", "fltssha", 1);
    let ssh = host.connect(flowlab(), &[]).expect("connected");
    let argv = |words: &[&str]| words.iter().map(|w| w.to_string()).collect::<Vec<_>>();
    let root = Path::new("/");

    // A server, and a test against it, both there.
    let serve = argv(&["serve", "-J", "-p", "0"]);
    let mut server = ssh
        .start(
            &Job {
                argv: &serve,
                dir: root,
                ns: None,
            },
            Output::FirstLine,
        )
        .expect("serve");
    let line = server
        .first_line(Duration::from_secs(10))
        .expect("the server says where it listens");
    let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
    let port = v["address"]
        .as_str()
        .and_then(|a| a.rsplit(':').next())
        .expect("an address")
        .to_string();
    assert_eq!(host.flowlab_running("serve"), 1);
    let test = argv(&["test", "127.0.0.1", "-p", &port, "-t", "1", "-J"]);
    let mut client = ssh
        .start(
            &Job {
                argv: &test,
                dir: root,
                ns: None,
            },
            Output::Keep,
        )
        .expect("test");
    let exit = ended(&mut client, Duration::from_secs(20)).expect("the test ends");
    let written = client.finish();
    assert!(
        exit.success(),
        "{exit}: {}",
        String::from_utf8_lossy(&written.stderr)
    );
    let result: flowlab_results::result::TestResult =
        serde_json::from_slice(&written.stdout).expect("the test's document");
    let end = result.end.expect("an end");
    assert!(end.sums[0].receiver.as_ref().expect("receiver").bytes > 0);

    // Its clock, read through the connection: the namespace shares this machine's, so
    // the offset is within its uncertainty of none.
    let clock = ssh.clock_offset("a", 5).expect("its clock");
    assert_eq!(clock.samples, 5);
    assert!(
        clock.offset_ms.abs() <= clock.uncertainty_ms + 0.001,
        "{clock:?}"
    );
    assert!(clock.uncertainty_ms > 0.0, "{clock:?}");

    // Files both ways, through the connection.
    let here = tempfile::tempdir().expect("tmp");
    let sent: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(here.path().join("out"), &sent).expect("file");
    let there = host.dir().join("moved");
    ssh.put(&here.path().join("out"), &there).expect("put");
    ssh.get(&there, &here.path().join("back")).expect("get");
    assert_eq!(std::fs::read(here.path().join("back")).expect("back"), sent);
    let missing = ssh
        .get(Path::new("/nonexistent/file"), &here.path().join("x"))
        .expect_err("no such file there");
    assert!(
        missing.to_string().contains("/nonexistent/file"),
        "{missing}"
    );

    // Killed here, the server ends there.
    server.kill();
    let started = Instant::now();
    while host.flowlab_running("serve") > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the server outlived its ssh by 5 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Dropped, the place's connection closes, and a server started on it ends.
    let mut again = ssh
        .start(
            &Job {
                argv: &serve,
                dir: root,
                ns: None,
            },
            Output::FirstLine,
        )
        .expect("serve");
    assert!(again.first_line(Duration::from_secs(10)).is_some());
    drop(ssh);
    let started = Instant::now();
    while host.flowlab_running("serve") > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "a server outlived its place by 5 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(ended(&mut again, Duration::from_secs(5)).is_some());
}

#[test]
fn a_lost_connection_ends_what_runs_on_it() {
    if !ready() {
        return;
    }
    let host = Host::up("fl-tssh-b", "fltsshb", 2);
    // Keep-alives a second apart, two unanswered: the loss is known in about 3 s.
    let ssh = host
        .connect(
            flowlab(),
            &["-o", "ServerAliveInterval=1", "-o", "ServerAliveCountMax=2"],
        )
        .expect("connected");
    let serve: Vec<String> = ["serve", "-J", "-p", "0"].map(String::from).to_vec();
    let mut server = ssh
        .start(
            &Job {
                argv: &serve,
                dir: Path::new("/"),
                ns: None,
            },
            Output::FirstLine,
        )
        .expect("serve");
    assert!(server.first_line(Duration::from_secs(10)).is_some());
    // The host's link goes down: nothing more crosses it either way.
    run("ip", &["link", "set", &host.dev, "down"]);
    let exit = ended(&mut server, Duration::from_secs(15))
        .expect("the command ends within 15 s of its connection's loss");
    assert_eq!(exit.code, Some(255), "ssh's own failure: {exit}");
}

#[test]
fn a_host_with_another_flowlab_is_refused_naming_both_versions() {
    if !ready() {
        return;
    }
    let host = Host::up("fl-tssh-c", "fltsshc", 3);
    let other: PathBuf = host.dir().join("flowlab");
    std::fs::write(&other, "#!/bin/sh\necho 'flowlab 9.9.9 (elsewhere)'\n").expect("script");
    run("chmod", &["755", &other.display().to_string()]);
    let refused = host
        .connect(&other.display().to_string(), &[])
        .expect_err("another version");
    let said = refused.to_string();
    assert!(
        matches!(&refused, SshError::Version { theirs, ours, .. } if theirs == "9.9.9" && ours == env!("CARGO_PKG_VERSION")),
        "{said}"
    );
    assert!(
        said.contains("9.9.9") && said.contains(env!("CARGO_PKG_VERSION")),
        "{said}"
    );
    // And one without flowlab at all says so.
    let missing = host
        .connect("/nonexistent/flowlab", &[])
        .expect_err("no flowlab there");
    assert!(
        missing
            .to_string()
            .contains("/nonexistent/flowlab -v failed there"),
        "{missing}"
    );
}
