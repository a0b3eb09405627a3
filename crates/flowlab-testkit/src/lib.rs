//! Helpers the integration tests of flowlab's crates share: an in-process server on a
//! free loopback port, a client run with a spec, ports and sockets, and guards for tests
//! that need root or an external tool (in CI they fail; elsewhere they skip, saying why).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use flowlab_engine::client::{self, ClientError, Quiet};
use flowlab_engine::server::{Server, ServerConfig, ServerLog};
use flowlab_results::result::ServerOutput;
use flowlab_results::result::{EndInfo, SideTotals, StreamDirection, TestResult};
use flowlab_results::server::ServerEvent;
use flowlab_results::spec::TestSpec;

/// Starts a flowlab server on 127.0.0.1 with a free port; returns the port.
pub fn start_server(cfg: ServerConfig) -> u16 {
    let cfg = ServerConfig {
        bind: Some([127, 0, 0, 1].into()),
        port: 0,
        ..cfg
    };
    let server = Server::bind(cfg, Arc::new(TextLog)).expect("bind a loopback server");
    let port = server.local_addr().port();
    server.spawn().expect("start the server thread");
    port
}

/// A server's log that prints nothing and gives a client that asks for the server's
/// output the lines `flowlab serve` would have printed.
#[derive(Debug)]
pub struct TextLog;

impl ServerLog for TextLog {
    fn event(&self, _: ServerEvent) {}

    fn output(&self, events: &[ServerEvent]) -> ServerOutput {
        ServerOutput::Text(flowlab_report::table::server_events(events))
    }
}

/// The tests' usual server: the defaults, with a short idle timeout.
fn default_config() -> ServerConfig {
    ServerConfig {
        idle_timeout: Duration::from_secs(3),
        ..ServerConfig::default()
    }
}

pub fn default_server() -> u16 {
    start_server(default_config())
}

/// [`default_server`], its log events on the returned channel
/// ([`start_server_logging`]).
pub fn default_server_logging() -> (u16, std::sync::mpsc::Receiver<ServerEvent>) {
    start_server_logging(default_config())
}

/// A spec for 127.0.0.1:port with no interval output.
pub fn spec(port: u16) -> TestSpec {
    let mut s = TestSpec::new("127.0.0.1");
    s.port = port;
    s.interval = None;
    s.connect_timeout = Duration::from_secs(3);
    s
}

pub fn run(spec: &TestSpec) -> Result<TestResult, ClientError> {
    client::run(spec, &mut Quiet, &AtomicBool::new(false))
}

pub fn end(r: &TestResult) -> &EndInfo {
    r.end.as_ref().expect("a finished test has an end section")
}

/// The sender and receiver totals of one direction's sum.
pub fn sum(r: &TestResult, d: StreamDirection) -> (SideTotals, SideTotals) {
    let s = end(r)
        .sums
        .iter()
        .find(|s| s.direction == d)
        .expect("a sum for the direction");
    (
        s.sender.clone().expect("sender totals"),
        s.receiver.clone().expect("receiver totals"),
    )
}

/// True when `tool` is on PATH. In CI (`CI` set) a missing tool fails the test;
/// elsewhere the test is skipped with a printed reason.
pub fn require_tool(tool: &str) -> bool {
    let found = std::process::Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        if std::env::var_os("CI").is_some() {
            panic!("{tool} is required in CI but is not installed (scripts/test.sh installs it)");
        }
        skip(&format!(
            "{tool} is not installed; run scripts/test.sh to install it"
        ));
    }
    found
}

/// Whether the kernel's TCP socket tables (the text of /proc/net/tcp and tcp6) hold a
/// socket listening on `port`. Reading them does not disturb a server that is starting,
/// as binding the port to see whether it is taken would (the server's own bind fails
/// while the probe holds it).
pub fn listens_in(tables: &str, port: u16) -> bool {
    let local = format!(":{port:04X}");
    tables.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3 && f[1].ends_with(&local) && f[3] == "0A"
    })
}

/// Whether a socket listens on TCP `port` in this network namespace.
pub fn listening_here(port: u16) -> bool {
    let tables: String = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .collect();
    listens_in(&tables, port)
}

/// How many TCP connections to the server on local `port` are established in this
/// network namespace (counted from the server's side: local port `port`).
pub fn established_to(port: u16) -> usize {
    let local = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .flat_map(|t| {
            t.lines()
                .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
                .collect::<Vec<_>>()
        })
        .filter(|f| f.len() > 3 && f[1].ends_with(&local) && f[3] == "01")
        .count()
}

/// Waits (up to `within`) until `condition` holds; whether it did.
pub fn wait_until(within: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + within;
    while std::time::Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    condition()
}

/// A loopback server whose log events arrive on the returned channel (a test waits for
/// one: a test started, a refusal), with serve's text as its output.
pub fn start_server_logging(cfg: ServerConfig) -> (u16, std::sync::mpsc::Receiver<ServerEvent>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let log = ChannelLog(std::sync::Mutex::new(tx));
    let cfg = ServerConfig {
        bind: Some([127, 0, 0, 1].into()),
        port: 0,
        ..cfg
    };
    let server = Server::bind(cfg, Arc::new(log)).expect("bind a loopback server");
    let port = server.local_addr().port();
    server.spawn().expect("start the server thread");
    (port, rx)
}

/// A server log that sends each event to a channel.
#[derive(Debug)]
struct ChannelLog(std::sync::Mutex<std::sync::mpsc::Sender<ServerEvent>>);

impl ServerLog for ChannelLog {
    fn event(&self, e: ServerEvent) {
        if let Ok(tx) = self.0.lock() {
            let _ = tx.send(e);
        }
    }

    fn output(&self, events: &[ServerEvent]) -> ServerOutput {
        ServerOutput::Text(flowlab_report::table::server_events(events))
    }
}

/// Waits (up to 10 s) for the first `TestStarted` of a server's log.
pub fn await_test_started(log: &std::sync::mpsc::Receiver<ServerEvent>) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match log.recv_timeout(left) {
            Ok(ServerEvent::TestStarted { .. }) => return,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    panic!("no test started on the server within 10 s");
}

/// `len` bytes no compression could flatter, the same each run: a 64-bit LCG's high bytes.
pub fn noise(len: usize) -> Vec<u8> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..len)
        .map(|_| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (x >> 56) as u8
        })
        .collect()
}

/// A number under /proc/sys/net/core (the engine's reader, as `flowlab sysinfo` shows it).
pub fn core_sysctl(name: &str) -> u64 {
    flowlab_engine::sysinfo::net_core(name)
        .unwrap_or_else(|| panic!("/proc/sys/net/core/{name} unreadable"))
}

/// Where `got` departs from `want`, for a failed byte-for-byte comparison: both lengths
/// and the first offset that differs (`None` when they are equal).
pub fn first_difference(got: &[u8], want: &[u8]) -> Option<String> {
    let at = got.iter().zip(want).position(|(a, b)| a != b);
    match at {
        None if got.len() == want.len() => None,
        None => Some(format!(
            "{} bytes where {} were expected, equal as far as both go",
            got.len(),
            want.len()
        )),
        Some(i) => Some(format!(
            "{} bytes where {} were expected, the first difference at byte {i}",
            got.len(),
            want.len()
        )),
    }
}

/// Waits, 10 s at most, until a socket listens on TCP `port` here (`what`, a server);
/// `child`, when given, must not exit meanwhile.
pub fn await_listening(port: u16, mut child: Option<&mut std::process::Child>, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !listening_here(port) {
        if let Some(c) = child.as_deref_mut() {
            assert!(
                c.try_wait().expect("wait").is_none(),
                "{what} exited before listening on port {port}"
            );
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what} does not listen on port {port} within 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A free TCP and UDP port on loopback (for external servers), outside the kernel's
/// ephemeral range ([`free_ports`]). One the kernel handed out (a bind to port 0) could be
/// given meanwhile to another test's outgoing connection as its local port, and the
/// server started on it would then find it taken (a fresh-clone run: "the server exited
/// before listening").
pub fn free_port() -> u16 {
    free_ports(1)
}

/// Where this process's next search for free ports begins: each search moves it past
/// what it found, so that two threads of one test binary are not handed the same port.
static NEXT_PORTS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The first of `n` consecutive loopback ports, TCP and UDP, all free now: outside the
/// kernel's ephemeral range, so no connection is handed one meanwhile. Each process
/// starts its searches at its own place (by its pid) and never hands out a port twice.
pub fn free_ports(n: u16) -> u16 {
    use std::sync::atomic::Ordering;
    let free = |p: u16| {
        std::net::TcpListener::bind(("127.0.0.1", p)).is_ok()
            && std::net::UdpSocket::bind(("127.0.0.1", p)).is_ok()
    };
    let seed = std::process::id() % 997 * 10;
    loop {
        let at = NEXT_PORTS.fetch_add(u32::from(n), Ordering::Relaxed);
        assert!(
            at < 10_000,
            "no {n} consecutive free ports between 20000 and 30000"
        );
        let base = 20_000 + ((seed + at) % (10_000 - u32::from(n))) as u16;
        if (base..base + n).all(free) {
            return base;
        }
    }
}

/// Says why the running test skips its work: on stderr, and as a line in the file that
/// `FLOWLAB_SKIPPED` names, if set (scripts/test.sh counts them there: cargo shows the
/// output of a passing test only with --nocapture).
pub fn skip(reason: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    eprintln!("SKIPPED: {test}: {reason}");
    if let Some(file) = std::env::var_os("FLOWLAB_SKIPPED") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(file)
        {
            let _ = writeln!(f, "{test}: {reason}");
        }
    }
}

/// Whether this runs as root. In CI, which runs as root, its absence fails the test;
/// elsewhere the test says why it skips (`what` needs root).
pub fn is_root(what: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        if std::env::var_os("CI").is_some() {
            panic!("{what}: root is needed, and CI runs as root");
        }
        skip(&format!("{what}: root is needed"));
    }
    root
}

/// Whether this runs as root with `ip` and `tc` (what building namespaces needs). In CI,
/// which runs as root, its absence fails the test; elsewhere the test says why it skips.
pub fn is_root_with_ip(what: &str) -> bool {
    is_root(&format!("{what} (CAP_NET_ADMIN)")) && require_tool("ip") && require_tool("tc")
}

/// The CPU latency request in force before a test holds the CPUs awake, where holding
/// can be told apart; otherwise None, the test skipping with why: no PM QoS device, or
/// another process holding the CPUs awake already.
pub fn cpu_latency_before_holding() -> Option<i32> {
    let Some(before) = flowlab_engine::sysinfo::cpu_latency_us() else {
        skip("this kernel has no /dev/cpu_dma_latency (PM QoS)");
        return None;
    };
    if before == 0 {
        skip("another process holds the CPUs awake already: nothing to tell apart");
        return None;
    }
    Some(before)
}

/// The processes that hold a CPU latency request now (`/dev/cpu_dma_latency` open), each
/// as "PID: its command line": said when a test finds the CPUs held longer than it
/// expects.
pub fn cpu_latency_holders() -> Vec<String> {
    let device = std::path::Path::new(flowlab_proto::system::CPU_LATENCY_DEVICE);
    let Ok(proc_dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    proc_dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
                fds.flatten()
                    .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|to| to == device))
            })
        })
        .map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let words: Vec<String> = cmdline
                .split(|&b| b == 0)
                .filter(|w| !w.is_empty())
                .map(|w| String::from_utf8_lossy(w).into_owned())
                .collect();
            format!("{pid}: {}", words.join(" "))
        })
        .collect()
}

/// The network namespaces of topology `topo` that exist now.
pub fn namespaces_of(topo: &str) -> Vec<String> {
    let out = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&format!("fl-{topo}-")))
        .map(String::from)
        .collect()
}

/// A command's stdout and stderr together, for messages and assertions.
pub fn said(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Connects to the server on 127.0.0.1:`port` and sends a cookie made of `tag`; returns
/// the connection (5 s read timeout) once the server asks for the parameters.
pub fn at_param_exchange(port: u16, tag: u8) -> std::net::TcpStream {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    c.write_all(&flowlab_proto::Cookie::from_random([tag; 36]).encode())
        .expect("cookie");
    let mut b = [0u8; 1];
    c.read_exact(&mut b).expect("state");
    assert_eq!(
        flowlab_proto::State::from_byte(b[0]),
        Ok(flowlab_proto::State::ParamExchange)
    );
    c
}

/// Reads until the server closes `c` (end-of-file or a reset); false if a read waits
/// longer than `wait` first.
pub fn closed_within(c: &mut std::net::TcpStream, wait: Duration) -> bool {
    use std::io::Read;
    c.set_read_timeout(Some(wait)).expect("timeout");
    let mut b = [0u8; 256];
    loop {
        match c.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// A UDP socket connected to the server's port (3 s read timeout), for a data stream.
pub fn udp_to(port: u16) -> std::net::UdpSocket {
    let u = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    u.connect(("127.0.0.1", port)).expect("connect");
    u.set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    u
}

/// Sends the UDP stream handshake on `u` and waits for the server's reply.
pub fn udp_handshake(u: &std::net::UdpSocket) -> Result<(), String> {
    use flowlab_proto::udp::{CONNECT_MSG, is_handshake_reply};
    u.send(&CONNECT_MSG).map_err(|e| format!("send: {e}"))?;
    let mut buf = [0u8; 64];
    let n = u.recv(&mut buf).map_err(|e| format!("no reply: {e}"))?;
    if is_handshake_reply(&buf[..n]) {
        Ok(())
    } else {
        Err("not a handshake reply".into())
    }
}

/// A connection from `source` (another loopback address) to the server.
pub fn connect_from(source: [u8; 4], port: u16) -> std::net::TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
        .expect("a TCP socket");
    let from: std::net::SocketAddr = (source, 0).into();
    s.bind(&from.into()).expect("bind a loopback source");
    let to: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    s.connect(&to.into()).expect("connect");
    s.into()
}

/// A one-off `iperf3 -s` with JSON output, killed if the test fails.
#[derive(Debug)]
pub struct Iperf3Server(Option<std::process::Child>);

impl Iperf3Server {
    pub fn start(port: u16) -> Self {
        Self::spawn(port, true, &[])
    }

    /// The same, printing text rather than JSON.
    pub fn start_text(port: u16) -> Self {
        Self::spawn(port, false, &[])
    }

    /// The same, with more of iperf3's options.
    pub fn start_with(port: u16, args: &[&std::ffi::OsStr]) -> Self {
        Self::spawn(port, true, args)
    }

    fn spawn(port: u16, json: bool, args: &[&std::ffi::OsStr]) -> Self {
        let mut child = std::process::Command::new("iperf3")
            .args(["-s", "-1", "-p", &port.to_string(), "-B", "127.0.0.1"])
            .args(json.then_some("-J"))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start iperf3 -s");
        // Wait until it listens, without connecting (a connection would use up the
        // one-off server's single test) and without binding the port to see whether it
        // is taken: iperf3's own bind failed while such a probe held it, once in a
        // fresh-clone run ("iperf3 -s did not start").
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !listening_here(port) {
            if let Ok(Some(status)) = child.try_wait() {
                let out = child.wait_with_output().expect("iperf3 -s output");
                panic!(
                    "iperf3 -s on port {port} exited ({status}) before listening: {}",
                    String::from_utf8_lossy(&out.stdout)
                );
            }
            assert!(
                std::time::Instant::now() < deadline,
                "iperf3 -s did not listen on port {port} within 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Iperf3Server(Some(child))
    }

    pub fn json(mut self) -> serde_json::Value {
        let child = self.0.take().expect("child");
        let out = child.wait_with_output().expect("iperf3 -s output");
        serde_json::from_slice(&out.stdout).expect("iperf3 -s JSON")
    }
}

impl Drop for Iperf3Server {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A child process killed and waited for when dropped, so that a test that fails leaves
/// no process behind. A stopped child (SIGSTOP) is continued first, so that it dies of
/// the kill at once.
#[derive(Debug)]
pub struct Reaped(pub std::process::Child);

impl Reaped {
    /// The child's process id.
    pub fn pid(&self) -> i32 {
        i32::try_from(self.0.id()).expect("a process id")
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        // SAFETY: kill(2) on this test's own child, not yet waited for.
        unsafe { libc::kill(self.pid(), libc::SIGCONT) };
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A key pair made by `openssl genrsa` (PKCS#8 private key, SubjectPublicKeyInfo public
/// key, as iperf3's own auth test makes them) and an authorized-users file for
/// mario/rossi, in `dir`.
pub fn auth_files(
    dir: &std::path::Path,
) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let private = dir.join("private.pem");
    let public = dir.join("public.pem");
    let users = dir.join("users.csv");
    let ok = |c: &mut std::process::Command| c.status().expect("run openssl").success();
    assert!(ok(std::process::Command::new("openssl")
        .args(["genrsa", "-out"])
        .arg(&private)
        .arg("2048")
        .stderr(std::process::Stdio::null())));
    assert!(ok(std::process::Command::new("openssl")
        .args(["rsa", "-pubout", "-in"])
        .arg(&private)
        .arg("-out")
        .arg(&public)
        .stderr(std::process::Stdio::null())));
    let hash = flowlab_proto::auth::password_hash("mario", "rossi");
    std::fs::write(&users, format!("# user,sha256\nmario,{hash}\n")).expect("users file");
    (private, public, users)
}

/// `GET /metrics` at `addr`: the response's status line, content type and body.
pub fn scrape_metrics(addr: std::net::SocketAddr) -> (String, String, String) {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(addr).expect("connect to the metrics");
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        conn,
        "GET /metrics HTTP/1.1\r\nHost: flowlab\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut response = String::new();
    conn.read_to_string(&mut response).expect("response");
    let (head, body) = response.split_once("\r\n\r\n").expect("a whole response");
    let status = head.lines().next().unwrap_or_default().to_string();
    let content_type = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-type")
                .then(|| value.trim().to_string())
        })
        .unwrap_or_default();
    (status, content_type, body.to_string())
}

/// Checks metrics `text` with Prometheus's own parser and linter (`promtool check
/// metrics`, Debian `prometheus`), failing the test with its verdict; without promtool,
/// as [`require_tool`] says.
pub fn promtool_check_metrics(text: &str) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    if !require_tool("promtool") {
        return;
    }
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    check
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("to promtool");
    let out = check.wait_with_output().expect("promtool's verdict");
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A hold on what every test binary run at the same time shares (scripts/test.sh runs
/// several side by side): the machine's CPU latency request, which reads the least
/// request held by any process, and the CPU an emulator spinning to keep them awake
/// takes. A test that holds the CPUs awake, and asserts what the machine reads while it
/// does and after, takes it alone ([`machine_alone`]); a test that brings a topology up or
/// runs servers beside it (sshd, PostgreSQL) takes it shared ([`machine_shared`]); the
/// lock goes when the value is dropped.
#[derive(Debug)]
pub struct MachineLock {
    _file: std::fs::File,
}

fn machine_lock(operation: libc::c_int) -> MachineLock {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let path = std::env::temp_dir().join("flowlab-tests-machine.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // SAFETY: flock(2) on a descriptor this value owns; blocks until granted.
    let locked = unsafe { libc::flock(file.as_raw_fd(), operation) };
    assert_eq!(
        locked,
        0,
        "flock {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    MachineLock { _file: file }
}

/// The machine alone: no test of any binary holds [`machine_shared`] meanwhile.
pub fn machine_alone() -> MachineLock {
    machine_lock(libc::LOCK_EX)
}

/// The machine beside other topologies' tests, but not beside one that holds the CPUs
/// awake ([`machine_alone`]).
pub fn machine_shared() -> MachineLock {
    machine_lock(libc::LOCK_SH)
}

/// A PostgreSQL server of the test's own (Debian `postgresql`): a new cluster in a
/// temporary directory, made and run as the `postgres` user (`initdb` refuses root),
/// listening on a free port of 127.0.0.1, its superuser `flowlab` trusted. Stopped and
/// removed when dropped. It holds [`machine_shared`] while it runs: a server and its
/// clients take CPU a test that holds the machine alone would miss.
#[derive(Debug)]
pub struct Postgres {
    dir: std::path::PathBuf,
    bin: std::path::PathBuf,
    pub port: u16,
    _machine: MachineLock,
}

impl Postgres {
    /// Starts one; `None` (the test skipping with why) where there is no PostgreSQL or
    /// no root, which fails the test in CI instead (CI installs it and runs as root).
    pub fn start(what: &str) -> Option<Postgres> {
        if !is_root(&format!("{what} (initdb runs as the postgres user)")) {
            return None;
        }
        // The newest installed version's programs.
        let mut versions: Vec<std::path::PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .map(|d| d.flatten().map(|e| e.path().join("bin")).collect())
            .unwrap_or_default();
        versions.retain(|b| b.join("initdb").exists());
        versions.sort();
        let Some(bin) = versions.pop() else {
            let why = "PostgreSQL is not installed (Debian postgresql); run scripts/test.sh to install it";
            if std::env::var_os("CI").is_some() {
                panic!("{what}: {why}");
            }
            skip(&format!("{what}: {why}"));
            return None;
        };
        let machine = machine_shared();
        let dir =
            std::env::temp_dir().join(format!("flowlab-pg-{}-{}", std::process::id(), free_port()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a directory for the cluster");
        let as_postgres = |args: &[&str]| {
            let out = std::process::Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .args(args)
                .output()
                .expect("runuser");
            assert!(
                out.status.success(),
                "{args:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let chown = std::process::Command::new("chown")
            .args(["postgres:postgres"])
            .arg(&dir)
            .status()
            .expect("chown");
        assert!(chown.success(), "chown {}", dir.display());
        let data = dir.join("data");
        let initdb = bin.join("initdb");
        as_postgres(&[
            &initdb.display().to_string(),
            "-D",
            &data.display().to_string(),
            "-U",
            "flowlab",
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C",
        ]);
        let port = free_port();
        let pg = Postgres {
            dir,
            bin,
            port,
            _machine: machine,
        };
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {port} -k {} -c fsync=off",
            pg.dir.display()
        );
        as_postgres(&[
            &pg.bin.join("pg_ctl").display().to_string(),
            "-D",
            &data.display().to_string(),
            "-o",
            &options,
            "-l",
            &pg.dir.join("log").display().to_string(),
            "-w",
            "start",
        ]);
        Some(pg)
    }

    /// The URL of database `name` (made by [`Postgres::create`], or `postgres`).
    pub fn url(&self, name: &str) -> String {
        format!("postgres://flowlab@127.0.0.1:{}/{name}", self.port)
    }

    /// The URL of database `name` through the server's Unix socket: reachable from
    /// every network namespace of this machine (they share its files), which
    /// 127.0.0.1 is not.
    pub fn socket_url(&self, name: &str) -> String {
        format!(
            "postgres://flowlab@/{name}?host={}&port={}",
            self.dir.display(),
            self.port
        )
    }

    /// Makes an empty database `name`.
    pub fn create(&self, name: &str) {
        self.client("createdb", &[name]);
    }

    /// What `sql` prints through `psql` in database `name` (unaligned, no headers).
    pub fn psql(&self, name: &str, sql: &str) -> String {
        self.client(
            "psql",
            &["-d", name, "-At", "-v", "ON_ERROR_STOP=1", "-c", sql],
        )
    }

    /// What PostgreSQL's client `program` prints run with `args` against this server as
    /// its superuser, asserting it succeeded.
    fn client(&self, program: &str, args: &[&str]) -> String {
        let out = std::process::Command::new(self.bin.join(program))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "flowlab",
            ])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        assert!(
            out.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = std::process::Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
