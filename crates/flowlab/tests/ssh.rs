//! A host over SSH as a place where flowlab runs: a network namespace of the test's own
//! with a real OpenSSH server in it (Debian `openssh-server`), reached with a key the
//! test makes. flowlab started there runs, moves files and reports; what was started
//! ends when it is killed or its connection is lost; a host whose flowlab is another
//! version is refused with both versions named. And studies across three such hosts:
//! run whole and leaving nothing behind, a host lost mid-study, and the shipped seed
//! study for real hosts run into PostgreSQL.

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
    let _machine = support::machine_shared();
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
    let _machine = support::machine_shared();
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
    let _machine = support::machine_shared();
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

/// Topology `name` up (hosts `k`, the controller, and a, b, c on one switch, each of
/// a, b, c with an sshd of its own listening), and `ssh`'s options for all three.
fn three_hosts(name: &str, dir: &Path) -> (support::NetDown, Vec<Sshd>, String) {
    let topology = format!(
        "name = \"{name}\"\nhosts = [\"k\", \"a\", \"b\", \"c\"]\nswitches = [\"s1\"]\n\
         [[link]]\nends = [\"k\", \"s1\"]\n[[link]]\nends = [\"a\", \"s1\"]\n\
         [[link]]\nends = [\"b\", \"s1\"]\nrate = \"50M\"\n[[link]]\nends = [\"c\", \"s1\"]\n"
    );
    let down = support::net_up(dir, name, &topology);
    let sshd: Vec<Sshd> = ["a", "b", "c"]
        .iter()
        .map(|h| Sshd::listening_in(&format!("fl-{name}-{h}")))
        .collect();
    // Each host has a key of its own sshd: the options name all three.
    let mut options = sshd[0].options();
    for s in &sshd[1..] {
        options.extend([
            "-i".to_string(),
            s.dir.path().join("client").display().to_string(),
        ]);
    }
    let options = options
        .iter()
        .map(|o| format!("{o:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    (down, sshd, options)
}

/// The `[ssh]` table of hosts a, b and c, each running this build's flowlab.
fn ssh_table(options: &str) -> String {
    let f = flowlab();
    format!(
        "ssh_options = [{options}]\n[ssh]\na = {{ url = \"ssh://root@a\", flowlab = {f:?} }}\n\
         b = {{ url = \"ssh://root@b\", flowlab = {f:?} }}\nc = {{ url = \"ssh://root@c\", flowlab = {f:?} }}\n"
    )
}

/// The studies over SSH run one at a time: their hosts' run directories share this
/// machine's /tmp, where each test counts what is left.
static STUDIES: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The run directories hosts over SSH made in /tmp (the namespaces share this
/// machine's files).
fn run_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/tmp")
        .expect("/tmp")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("flowlab-run."))
        })
        .collect();
    dirs.sort();
    dirs
}

/// `flowlab run study.toml --db r.db` in `dir`, from the controller's namespace of
/// topology `name`, as a controller reaches real hosts.
fn run_study(name: &str, dir: &Path) -> std::process::Output {
    Command::new(flowlab())
        .args(["net", "exec", "-t", name, "k", "--", flowlab()])
        .args(["run", "study.toml", "--db", "r.db"])
        .current_dir(dir)
        .output()
        .expect("flowlab run")
}

/// A study over SSH: its setup at each host (in a directory of the run's there), a
/// fragment server on a and on b, a fetch from both, echoes and a test from c, all run
/// at the hosts named in `[ssh]` — the same study a topology runs with `topology`
/// instead. Each trial records the hosts' clocks; nothing is left at the hosts.
#[test]
fn a_study_runs_across_three_hosts_over_ssh_and_leaves_nothing_there() {
    if !ready() {
        return;
    }
    let _one_at_a_time = STUDIES.lock().unwrap_or_else(|e| e.into_inner());
    let _machine = support::machine_shared();
    let dir = tempfile::tempdir().expect("tmp");
    let (_down, sshd, options) = three_hosts("tsst", dir.path());
    let before = run_dirs();
    let study = format!(
        "name = \"over-ssh\"\nrepeat = 2\norder = \"sequential\"\n\
         setup = [\"fragments make --size 4M --count 8 --out {{run}}/set\"]\n{}\n\
         [[server]]\nname = \"sa\"\nnode = \"a\"\nargs = \"--fragments {{run}}/set\"\n\
         [[server]]\nname = \"sb\"\nnode = \"b\"\nargs = \"--fragments {{run}}/set\"\n\
         [[step]]\nname = \"fetch\"\nkind = \"fetch\"\nfrom = \"c\"\n\
         args = \"--from {{sa}} --from {{sb}} --ratio 1:1 --out {{scratch}}\"\n\
         [[step]]\nname = \"echoes\"\nkind = \"rtt\"\nfrom = \"c\"\nargs = \"{{sb.host}} -c 5 -i 20ms\"\n\
         [[step]]\nname = \"into-b\"\nkind = \"test\"\nfrom = \"a\"\nargs = \"{{sb.host}} -p {{sb.port}} -t 1\"\n",
        ssh_table(&options)
    );
    std::fs::write(dir.path().join("study.toml"), study).expect("study");
    let out = run_study("tsst", dir.path());
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("study over-ssh: 2 ok, 0 failed"), "{said}");

    let db = rusqlite::Connection::open(dir.path().join("r.db")).expect("db");
    let figure = |step: &str, metric: &str| -> Vec<f64> {
        let mut q = db
            .prepare(
                "SELECT value FROM trial_metric WHERE step = ?1 AND metric = ?2 ORDER BY trial_id",
            )
            .expect("query");
        q.query_map([step, metric], |r| r.get(0))
            .expect("rows")
            .collect::<Result<_, _>>()
            .expect("values")
    };
    // The fetch took fragments from both servers, each of which made its set there.
    for server in ["server1_bytes", "server2_bytes"] {
        let bytes = figure("fetch", server);
        assert_eq!(bytes.len(), 2, "{server}: {bytes:?}");
        assert!(bytes.iter().all(|&b| b > 0.0), "{server}: {bytes:?}");
    }
    // The echoes were sent at c (its flowlab's `net _echo`) and all came back.
    assert_eq!(figure("echoes", "echo_loss_percent"), [0.0, 0.0], "{said}");
    assert!(figure("echoes", "rtt_median_ms").iter().all(|&ms| ms > 0.0));
    // The test ran at a into b's 50 Mbit/s link: what the link carries.
    for bps in figure("into-b", "throughput_bps") {
        assert!(
            (0.8 * 50e6 * 1448.0 / 1500.0..=50e6).contains(&bps),
            "{bps}"
        );
    }
    // Each trial read the three hosts' clocks: this machine's own, so within each
    // reading's uncertainty of no offset.
    let mut q = db
        .prepare("SELECT trial_id, host, offset_ms, uncertainty_ms, samples FROM trial_clock ORDER BY trial_id, host")
        .expect("clocks");
    let clocks: Vec<(i64, String, f64, f64, i64)> = q
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("clocks");
    assert_eq!(clocks.len(), 6, "{clocks:?}");
    for (_, host, offset, uncertainty, samples) in &clocks {
        assert!(["a", "b", "c"].contains(&host.as_str()));
        assert!(offset.abs() <= uncertainty + 0.001, "{clocks:?}");
        assert_eq!(*samples, 3);
    }
    // Nothing left at the hosts: no flowlab, no directory.
    for h in ["a", "b", "c"] {
        let ns = format!("fl-tsst-{h}");
        let started = Instant::now();
        while flowlab_running_in(&ns, "serve") + flowlab_running_in(&ns, "fetch") > 0 {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "flowlab left in {h}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    assert_eq!(run_dirs(), before, "the hosts' run directories removed");

    // The hosts are reached at once; one that cannot be used (no flowlab where the study
    // says) fails the run before any trial, naming it, and the others reached meanwhile
    // keep nothing of it.
    let broken = dir.path().join("broken");
    std::fs::create_dir(&broken).expect("dir");
    let study = std::fs::read_to_string(dir.path().join("study.toml")).expect("study");
    let c = format!(
        "c = {{ url = \"ssh://root@c\", flowlab = {:?} }}",
        flowlab()
    );
    assert!(study.contains(&c), "{study}");
    let study = study.replace(
        &c,
        "c = { url = \"ssh://root@c\", flowlab = \"/nonexistent/flowlab\" }",
    );
    std::fs::write(broken.join("study.toml"), study).expect("study");
    let out = run_study("tsst", &broken);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("host c:") && said.contains("/nonexistent/flowlab"),
        "{said}"
    );
    assert_eq!(
        run_dirs(),
        before,
        "the reached hosts' run directories removed"
    );
    drop(sshd);
}

/// A host lost mid-study: its link taken down while a trial's test runs to it, as when a
/// host dies or its network goes (its sshd would not say goodbye; stopping sshd would
/// not even end a reused connection). The study's own keep-alive (1 s, two unanswered)
/// tells the runner within seconds: the trial's steps end at once, the trial is recorded
/// failed naming the host, the run ends saying which host was lost, and everything it
/// started at the other hosts stops, their directories removed; the trials not run stay
/// to run again.
#[test]
fn a_host_lost_mid_study_fails_its_trial_and_the_others_are_cleaned_up() {
    if !ready() {
        return;
    }
    let _one_at_a_time = STUDIES.lock().unwrap_or_else(|e| e.into_inner());
    let _machine = support::machine_shared();
    let dir = tempfile::tempdir().expect("tmp");
    let (_down, sshd, options) = three_hosts("tsls", dir.path());
    /// b's processes, which outlive the run (b's sshd never learns the connection
    /// went), killed when the test ends however it ends.
    struct KillIn(&'static str);
    impl Drop for KillIn {
        fn drop(&mut self) {
            if let Ok(out) = Command::new("ip").args(["netns", "pids", self.0]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            }
        }
    }
    let _b = KillIn("fl-tsls-b");
    let before = run_dirs();
    let options =
        format!("\"-o\", \"ServerAliveInterval=1\", \"-o\", \"ServerAliveCountMax=2\", {options}");
    let study = format!(
        "name = \"loses-b\"\nrepeat = 3\norder = \"sequential\"\n{}\n\
         [[server]]\nname = \"sa\"\nnode = \"a\"\n\
         [[server]]\nname = \"sb\"\nnode = \"b\"\n\
         [[step]]\nname = \"into-b\"\nkind = \"test\"\nfrom = \"c\"\nargs = \"{{sb.host}} -p {{sb.port}} -t 20\"\n",
        ssh_table(&options)
    );
    std::fs::write(dir.path().join("study.toml"), study).expect("study");
    let running = std::thread::spawn({
        let dir = dir.path().to_path_buf();
        move || run_study("tsls", &dir)
    });
    // Once the first trial's test runs at c, b's link goes down.
    let started = Instant::now();
    while flowlab_running_in("fl-tsls-c", "test") == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no test started at c"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_secs(1));
    let links = Command::new("ip")
        .args(["-n", "fl-tsls-b", "-o", "link", "show"])
        .output()
        .expect("b's links");
    let link = String::from_utf8_lossy(&links.stdout)
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|name| name.split('@').next().unwrap_or(name).to_string())
        .find(|name| name != "lo")
        .expect("b's link");
    run(
        "ip",
        &["-n", "fl-tsls-b", "link", "set", "dev", &link, "down"],
    );
    let down_at = Instant::now();
    let out = running.join().expect("the run's thread");
    let took = down_at.elapsed();
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    eprintln!(
        "{said}(the run ended {:.1} s after b's link went down)",
        took.as_secs_f64()
    );
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("error: host b (root@b): the connection was lost"),
        "{said}"
    );
    // Told by the keep-alive, not by the test's 20 s or its deadline.
    assert!(took < Duration::from_secs(15), "{said}");
    let db = rusqlite::Connection::open(dir.path().join("r.db")).expect("db");
    let trials: Vec<(String, String)> = db
        .prepare("SELECT status, error FROM trial ORDER BY id")
        .expect("query")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("trials");
    assert_eq!(trials.len(), 1, "the trial under way, recorded: {trials:?}");
    assert_eq!(trials[0].0, "failed");
    assert!(
        trials[0]
            .1
            .contains("host b (root@b): the connection was lost"),
        "{trials:?}"
    );
    // Everything started at the other hosts ended.
    for h in ["a", "c"] {
        let ns = format!("fl-tsls-{h}");
        let started = Instant::now();
        while flowlab_running_in(&ns, "serve") + flowlab_running_in(&ns, "test") > 0 {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "flowlab left in {h}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // a's and c's directories removed; b's stays (nobody could reach it to remove it).
    let left: Vec<PathBuf> = run_dirs()
        .into_iter()
        .filter(|d| !before.contains(d))
        .collect();
    assert_eq!(left.len(), 1, "only the lost host's: {left:?}");
    let _ = std::fs::remove_dir_all(&left[0]);
    drop(sshd);
}

/// The shipped seed-000 study for real hosts, its `[ssh]` table changed to three sshd
/// namespaces and nothing else, run with one command into PostgreSQL (a server of the
/// test's own, reached through its socket), and reported from there: two ratios, once
/// each, the 1 GiB set scaled to 10 MiB.
#[test]
fn the_shipped_seed_study_runs_across_hosts_into_postgresql() {
    if !ready() {
        return;
    }
    let Some(pg) = support::Postgres::start("a study over SSH into PostgreSQL") else {
        return;
    };
    pg.create("lab");
    let _one_at_a_time = STUDIES.lock().unwrap_or_else(|e| e.into_inner());
    let _machine = support::machine_shared();
    let dir = tempfile::tempdir().expect("tmp");
    let (_down, sshd, options) = three_hosts("tsps", dir.path());
    let shipped = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../studies/over-ssh/seed-000-two-servers.toml"),
    )
    .expect("the shipped study");
    let (head, rest) = shipped.split_once("[ssh]\n").expect("its [ssh] table");
    let (_, after) = rest.split_once("\n\n").expect("the table's end");
    let f = flowlab();
    let hosts = format!(
        "ssh_options = [{options}]\n[ssh]\n\
         client = {{ url = \"ssh://root@c\", flowlab = {f:?} }}\n\
         sa = {{ url = \"ssh://root@a\", flowlab = {f:?} }}\n\
         sb = {{ url = \"ssh://root@b\", flowlab = {f:?} }}\n\n"
    );
    // Top-level keys come before the first table.
    let (keys, tables) = head.split_at(head.find("\n[").map_or(head.len(), |i| i + 1));
    std::fs::write(
        dir.path().join("study.toml"),
        format!("{keys}{tables}{hosts}{after}"),
    )
    .expect("the study");
    let url = pg.socket_url("lab");
    let out = Command::new(flowlab())
        .args(["net", "exec", "-t", "tsps", "k", "--", flowlab()])
        .args([
            "run",
            "study.toml",
            "--db",
            &url,
            "--scale",
            "0.01",
            "--repeat",
            "1",
        ])
        .args(["--only", "ratio=1:1", "--only", "ratio=adaptive"])
        .current_dir(dir.path())
        .output()
        .expect("flowlab run");
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("study seed-000-two-servers-ssh: 2 ok, 0 failed"),
        "{said}"
    );
    assert_eq!(
        pg.psql("lab", "SELECT count(*) FROM trial_clock"),
        "6",
        "each trial's three clocks"
    );
    let report = Command::new(flowlab())
        .args(["report", &url])
        .output()
        .expect("report");
    let md = String::from_utf8_lossy(&report.stdout);
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    assert!(md.starts_with("# Study seed-000-two-servers-ssh"), "{md}");
    assert!(md.contains("2 of 30 trials ok, 0 failed"), "{md}");
    drop(sshd);
}
