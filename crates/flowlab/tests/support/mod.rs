//! Helpers of the binary's integration tests: those of every crate's
//! ([`flowlab_testkit`]), and those that run the flowlab binary.

#![allow(dead_code)]

pub use flowlab_testkit::*;

/// Sends a newer iperf3 client's parameters, as it sends them, on a connection at the
/// parameter exchange: flowlab-proto's captured fixture `name` (`3.21-mptcp`), framed.
pub fn send_iperf3_params(c: &mut std::net::TcpStream, name: &str) {
    use std::io::Write;
    let path = format!(
        "{}/../flowlab-proto/tests/fixtures/iperf3-params/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let doc = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    c.write_all(&(doc.len() as u32).to_be_bytes())
        .expect("the parameters' length");
    c.write_all(&doc).expect("the parameters");
}

/// Runs `flowlab net down NAME` when dropped: a topology a test brought up is taken
/// down (its emulator, and what it holds, gone) however the test ends.
pub struct NetDown(String);

impl NetDown {
    /// The guard of topology `name`, a name of the test's own: one left up by an earlier
    /// run of the test (killed before its guard could act: the end of a session kills
    /// every process and leaves the namespaces) is taken down first, and said.
    pub fn new(name: &str) -> Self {
        if !namespaces_of(name).is_empty() {
            eprintln!("note: topology {name} was left up by an earlier run: taken down first");
            net_down(name);
        }
        NetDown(name.to_string())
    }
}

fn net_down(name: &str) {
    let _ = assert_cmd::Command::cargo_bin("flowlab")
        .expect("the flowlab binary")
        .args(["net", "down", name])
        .output();
}

impl Drop for NetDown {
    fn drop(&mut self) {
        net_down(&self.0);
    }
}

/// Topology `name` (the file's text `topology`, written to `dir/NAME.toml`) brought up
/// with `flowlab net up`, asserted; its guard takes it down again.
pub fn net_up(dir: &std::path::Path, name: &str, topology: &str) -> NetDown {
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(&file, topology).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let down = NetDown::new(name);
    let up = assert_cmd::Command::cargo_bin("flowlab")
        .expect("the flowlab binary")
        .args(["net", "up"])
        .arg(&file)
        .output()
        .expect("net up");
    assert!(
        up.status.success(),
        "net up {name}: {}",
        String::from_utf8_lossy(&up.stderr)
    );
    down
}

/// Network namespaces a test made, deleted (with their links) when it ends, however.
pub struct Namespaces(pub Vec<String>);

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in &self.0 {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", ns])
                .status();
        }
    }
}

/// `ip ARGS`, which must succeed.
pub fn ip(args: &[&str]) {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .expect("ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        said(&out)
    );
}

/// A usage error prints exactly one line that names the flag, and exits 2; a missing
/// argument's ("flowlab fetch needs --from …") is followed by its usage and `--help`.
pub fn usage_error(args: &[&str], names: &str) {
    let out = assert_cmd::Command::cargo_bin("flowlab")
        .expect("the flowlab binary")
        .args(args)
        .timeout(std::time::Duration::from_secs(10))
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    let lines: Vec<&str> = stderr.trim_end().lines().collect();
    if lines[0].starts_with("error: flowlab ") && lines[0].contains(" needs ") {
        // A missing argument: its usage and `--help` follow.
        assert!(
            lines.len() == 3 && lines[1].starts_with("Usage: ") && lines[2].contains("--help"),
            "{args:?}: {stderr}"
        );
    } else {
        assert_eq!(lines.len(), 1, "{args:?}: more than one line: {stderr}");
    }
    assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    assert!(
        stderr.contains(names),
        "{args:?}: '{names}' not named in: {stderr}"
    );
}

/// A real OpenSSH server (Debian `openssh-server`) in network namespace `ns`, on
/// `listen` (ADDRESS:PORT), with a host key and a client key made for it in a
/// directory of its own; killed when dropped.
pub struct Sshd {
    child: std::process::Child,
    pub dir: tempfile::TempDir,
}

impl Sshd {
    pub fn start(ns: &str, listen: &str) -> Sshd {
        let dir = tempfile::tempdir().expect("tmp");
        let d = dir.path();
        for key in ["host", "client"] {
            let made = std::process::Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(d.join(key))
                .status()
                .expect("ssh-keygen");
            assert!(made.success(), "ssh-keygen");
        }
        std::fs::copy(d.join("client.pub"), d.join("authorized")).expect("authorized keys");
        let config = format!(
            "ListenAddress {listen}\nHostKey {}\nAuthorizedKeysFile {}\nPermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPidFile none\nLogLevel ERROR\n",
            d.join("host").display(),
            d.join("authorized").display()
        );
        std::fs::write(d.join("sshd_config"), config).expect("sshd config");
        std::fs::create_dir_all("/run/sshd").expect("sshd's privilege separation directory");
        let child = std::process::Command::new("ip")
            .args(["netns", "exec", ns, "/usr/sbin/sshd", "-D", "-e", "-f"])
            .arg(d.join("sshd_config"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("sshd");
        Sshd { child, dir }
    }

    /// An sshd on port 22 of every address of namespace `ns`, once it listens (10 s at
    /// most).
    pub fn listening_in(ns: &str) -> Sshd {
        let sshd = Sshd::start(ns, "0.0.0.0:22");
        let started = std::time::Instant::now();
        while !std::process::Command::new("ip")
            .args(["netns", "exec", ns, "ss", "-Hltn", "sport = :22"])
            .output()
            .is_ok_and(|o| !o.stdout.is_empty())
        {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(10),
                "sshd in {ns}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        sshd
    }

    /// `ssh`'s options for it: the client key, no known hosts, no user config.
    pub fn options(&self) -> Vec<String> {
        [
            "-F",
            "/dev/null",
            "-i",
            &self.dir.path().join("client").display().to_string(),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
        ]
        .map(String::from)
        .to_vec()
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The flowlab processes in namespace `ns` whose command line has the word `what`.
pub fn flowlab_running_in(ns: &str, what: &str) -> usize {
    let out = std::process::Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .expect("ip netns pids");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter(|pid| {
            let line = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let words: Vec<&[u8]> = line.split(|b| *b == 0).collect();
            words.iter().any(|w| w.ends_with(b"flowlab")) && words.contains(&what.as_bytes())
        })
        .count()
}

/// Headless Chromium (Debian `chromium`) showing one page, killed when dropped; asked
/// what the page shows over the DevTools protocol. Names other than 127.0.0.1 and the
/// page's own host resolve to nothing, so a page that reached out would fail (and say
/// so on its console).
pub struct Browser {
    _child: Reaped,
    log: std::path::PathBuf,
    devtools: u16,
    /// The network namespace it runs in (`None`: the test's own).
    netns: Option<String>,
}

/// `f()` on a thread of its own inside network namespace `ns` (`None`: here), so that
/// its sockets are that namespace's.
pub fn in_netns<T: Send + 'static>(ns: Option<&str>, f: impl FnOnce() -> T + Send + 'static) -> T {
    let Some(ns) = ns else {
        return f();
    };
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let fd = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        f()
    })
    .join()
    .expect("the namespace's thread")
}

/// Waits (up to 10 s) until a TCP connection to `addr` from inside namespace `ns`
/// succeeds, failing at once if `server` (the process that should listen) exits.
pub fn await_listening_in(ns: &str, addr: &str, server: &mut std::process::Child) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let to = addr.to_owned();
        if in_netns(Some(ns), move || std::net::TcpStream::connect(to).is_ok()) {
            return;
        }
        if let Ok(Some(status)) = server.try_wait() {
            panic!("the server for {addr} exited before listening: {status}");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "nothing listens on {addr} (from {ns}) within 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

impl Browser {
    /// Opens `url` with a profile of its own under `dir`, once the browser listens for
    /// the DevTools protocol (within 30 s). `reach` are the other hosts (names or
    /// addresses) the page may reach beside its own.
    pub fn open(url: &str, dir: &std::path::Path, reach: &[&str]) -> Browser {
        Browser::open_in(None, url, dir, reach)
    }

    /// The same, trusting the certificates whose public keys' SHA-256 (base64) are
    /// `pins`, as a user who accepted each once (Chromium's
    /// `--ignore-certificate-errors-spki-list`, which `serve --tls-self-signed` prints).
    pub fn open_trusting(
        url: &str,
        dir: &std::path::Path,
        reach: &[&str],
        pins: &[&str],
    ) -> Browser {
        let flags = [format!(
            "--ignore-certificate-errors-spki-list={}",
            pins.join(",")
        )];
        Browser::launch(None, url, dir, reach, &flags)
    }

    /// The same, with Chromium's `flags` besides.
    pub fn open_with(
        url: &str,
        dir: &std::path::Path,
        reach: &[&str],
        flags: &[String],
    ) -> Browser {
        Browser::launch(None, url, dir, reach, flags)
    }

    /// The same, in network namespace `netns` (`ip netns exec`).
    pub fn open_in(
        netns: Option<&str>,
        url: &str,
        dir: &std::path::Path,
        reach: &[&str],
    ) -> Browser {
        Browser::launch(netns, url, dir, reach, &[])
    }

    fn launch(
        netns: Option<&str>,
        url: &str,
        dir: &std::path::Path,
        reach: &[&str],
        flags: &[String],
    ) -> Browser {
        let log = dir.join("chromium.log");
        // The page's own host is the one other name that resolves (an address too is
        // mapped, unless excluded); a page of no host (about:blank) reaches loopback only.
        let host = url
            .split("://")
            .nth(1)
            .and_then(|rest| rest.split(['/', ':']).next())
            .unwrap_or("127.0.0.1");
        let mut command = match netns {
            Some(ns) => {
                let mut c = std::process::Command::new("ip");
                c.args(["netns", "exec", ns, "chromium"]);
                c
            }
            None => std::process::Command::new("chromium"),
        };
        let child = command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-port=0",
                "--enable-logging=stderr",
                "--v=0",
            ])
            .arg(format!(
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE {host}{}",
                reach
                    .iter()
                    .map(|h| format!(", EXCLUDE {h}"))
                    .collect::<String>()
            ))
            .arg(format!("--user-data-dir={}", dir.join("profile").display()))
            // Its own scratch files (org.chromium.Chromium.*) go with the test's directory.
            .env("TMPDIR", dir)
            .args(flags)
            .arg(url)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).expect("chromium.log"))
            .spawn()
            .expect("chromium");
        let child = Reaped(child);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let devtools = loop {
            let said = std::fs::read_to_string(&log).unwrap_or_default();
            let port = said
                .split("DevTools listening on ws://127.0.0.1:")
                .nth(1)
                .and_then(|rest| rest.split('/').next())
                .and_then(|p| p.parse().ok());
            if let Some(port) = port {
                break port;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "chromium did not open its DevTools port within 30 s: {said}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        Browser {
            _child: child,
            log,
            devtools,
            netns: netns.map(String::from),
        }
    }

    /// The value of `expression` in the page (JSON), by `Runtime.evaluate`.
    pub fn eval(&self, expression: &str) -> serde_json::Value {
        let (devtools, expression) = (self.devtools, expression.to_string());
        in_netns(self.netns.as_deref(), move || {
            evaluate(devtools, &expression)
        })
    }

    /// The first `Ok` of `done`, asked every 0.1 s for `within` at most; past it the test
    /// fails saying it waited for `what`, with `done`'s last `Err` (where the page stood)
    /// and the console.
    pub fn wait_for<T>(
        &self,
        within: std::time::Duration,
        what: &str,
        mut done: impl FnMut(&Browser) -> Result<T, String>,
    ) -> T {
        let deadline = std::time::Instant::now() + within;
        loop {
            let last = match done(self) {
                Ok(value) => return value,
                Err(last) => last,
            };
            assert!(
                std::time::Instant::now() < deadline,
                "the page did not show {what} within {within:?} ({last}); console: {:?}",
                self.console()
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// What the page wrote to its console (Chromium logs each message on stderr), and
    /// the loads it refused or failed.
    pub fn console(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(":CONSOLE"))
            .map(String::from)
            .collect()
    }
}

/// `expression`'s value in the page of the browser whose DevTools port is `devtools`.
fn evaluate(devtools: u16, expression: &str) -> serde_json::Value {
    let targets: serde_json::Value = ureq::get(format!("http://127.0.0.1:{}/json/list", devtools))
        .call()
        .expect("DevTools targets")
        .body_mut()
        .read_to_string()
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .expect("DevTools targets JSON");
    let page = targets
        .as_array()
        .and_then(|t| t.iter().find(|t| t["type"] == "page"))
        .and_then(|t| t["webSocketDebuggerUrl"].as_str())
        .unwrap_or_else(|| panic!("no page among {targets}"))
        .to_string();
    let (mut socket, _) = tungstenite::connect(page).expect("DevTools WebSocket");
    let ask = serde_json::json!({
        "id": 1,
        "method": "Runtime.evaluate",
        "params": { "expression": expression, "returnByValue": true },
    });
    socket
        .send(tungstenite::Message::text(ask.to_string()))
        .expect("send");
    loop {
        let message = socket.read().expect("DevTools answer");
        let Ok(text) = message.to_text() else {
            continue;
        };
        let answer: serde_json::Value = serde_json::from_str(text).expect("JSON");
        if answer["id"] == 1 {
            let _ = socket.close(None);
            assert!(
                answer["result"]["exceptionDetails"].is_null(),
                "{expression}: {answer}"
            );
            return answer["result"]["result"]["value"].clone();
        }
    }
}

/// A self-signed certificate and its key, made by openssl (EC P-256, a day) for
/// `subject_alt_name` (`DNS:localhost`, `IP:127.0.0.1`): `dir/cert.pem`, `dir/key.pem`.
pub fn openssl_certificate(
    dir: &std::path::Path,
    subject_alt_name: &str,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"])
        .args(["-subj", "/CN=localhost", "-addext"])
        .arg(format!("subjectAltName={subject_alt_name}"))
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    (cert, key)
}
