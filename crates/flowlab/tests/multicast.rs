//! `flowlab test -u GROUP --receivers …`: one UDP stream to a multicast group, and each
//! receiver's (a `flowlab serve` that joins for the test) account of what reached it —
//! across a `flowlab net` switch with loss on one receiver's branch, on one host over
//! IPv4 and IPv6, any-source and source-specific; and what such a test refuses.

mod support;

use std::process::{Command, Stdio};

use serde_json::Value;
use support::{Reaped, ip, usage_error};

/// Three receivers on a switch with the sender; the branch to rx3 loses 5 % of what it
/// carries towards rx3 (the user-space emulator), the others nothing.
const SWITCHED: &str = r#"name = "tmcast"
hosts = ["tx", "rx1", "rx2", "rx3"]
switches = ["s1"]
[[link]]
ends = ["tx", "s1"]
[[link]]
ends = ["s1", "rx1"]
[[link]]
ends = ["s1", "rx2"]
[[link]]
name = "lossy"
ends = ["s1", "rx3"]
loss = 0.05
reverse = { loss = 0.0 }
"#;

/// `flowlab serve -p PORT` in namespace `ns`, listening on `addr` before it returns.
fn serve_in(ns: &str, port: u16, addr: &str) -> Reaped {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, env!("CARGO_BIN_EXE_flowlab"), "serve"])
        .args(["-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve");
    support::await_listening_in(ns, addr, &mut child);
    Reaped(child)
}

/// `flowlab test ARGS -J` in namespace `ns`, which must succeed: its result.
fn test_in(ns: &str, args: &[&str]) -> Value {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, env!("CARGO_BIN_EXE_flowlab"), "test"])
        .args(args)
        .arg("-J")
        .output()
        .expect("flowlab test");
    assert!(out.status.success(), "{args:?}: {}", support::said(&out));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// One receiver's account of a multicast test.
#[derive(Debug)]
struct Account {
    address: String,
    expected: u64,
    lost: u64,
    duplicates: u64,
    out_of_order: u64,
    foreign: u64,
}

impl Account {
    /// (expected, lost, duplicates, out of order, foreign).
    fn counts(&self) -> (u64, u64, u64, u64, u64) {
        (
            self.expected,
            self.lost,
            self.duplicates,
            self.out_of_order,
            self.foreign,
        )
    }
}

/// Datagrams the sender sent, and each receiver's account.
fn accounts(r: &Value) -> (u64, Vec<Account>) {
    let end = &r["end"];
    let sent = end["streams"][0]["sender"]["packets"]
        .as_u64()
        .expect("the sender's datagrams");
    let each = end["multicast"]["receivers"]
        .as_array()
        .expect("receivers")
        .iter()
        .map(|x| {
            let u = &x["totals"]["udp"];
            let n = |k: &str| u[k].as_u64().unwrap_or_else(|| panic!("{k} in {x}"));
            Account {
                address: x["address"].as_str().expect("address").to_string(),
                expected: n("expected"),
                lost: n("lost"),
                duplicates: n("duplicates"),
                out_of_order: n("out_of_order"),
                foreign: n("foreign"),
            }
        })
        .collect();
    (sent, each)
}

/// 20 Mbit/s for 3 s to a group, through a switch, to three receivers: rx1 and rx2,
/// on clean branches, count every datagram the sender sent and lose none; rx3, behind
/// 5 % loss, loses its share and only it does — each receiver's own count, not the
/// sender's. Any-source and source-specific joins alike.
#[test]
fn loss_on_one_branch_is_counted_for_that_receiver_only() {
    if !support::is_root_with_ip("the receivers are a topology's namespaces") {
        return;
    }
    let _machine = support::machine_shared();
    let dir = tempfile::tempdir().expect("a directory");
    let _down = support::net_up(dir.path(), "tmcast", SWITCHED);
    let _servers: Vec<Reaped> = ["rx1", "rx2", "rx3"]
        .iter()
        .enumerate()
        .map(|(i, h)| {
            serve_in(
                &format!("fl-tmcast-{h}"),
                5201,
                &format!("10.0.1.{}:5201", i + 2),
            )
        })
        .collect();
    for (group, ssm, ttl) in [("239.255.0.1", false, 1), ("232.0.0.9", true, 3)] {
        let mut args = vec!["-u", group, "--receivers", "rx1,rx2,rx3"];
        args.extend(["-b", "20M", "-t", "3"]);
        if ssm {
            args.extend(["--source-specific", "--ttl", "3"]);
        }
        let r = test_in("fl-tmcast-tx", &args);
        let m = &r["end"]["multicast"];
        assert_eq!(m["group"], format!("{group}:5201"));
        assert_eq!(m["source_specific"], ssm);
        assert_eq!(
            m["ttl"], ttl,
            "the sending socket's TTL, as the kernel holds it"
        );
        assert!(
            m["source"]
                .as_str()
                .is_some_and(|s| s.starts_with("10.0.1.1:")),
            "sent from tx's address on the switch: {m}"
        );
        let (sent, each) = accounts(&r);
        assert!(sent > 4000, "20 Mbit/s for 3 s is ~5100 datagrams: {sent}");
        let (clean, lossy) = each.split_at(2);
        for a in clean {
            assert_eq!(
                a.counts(),
                (sent, 0, 0, 0, 0),
                "{group}: {} is on a clean branch",
                a.address
            );
        }
        let Account {
            address,
            expected,
            lost,
            duplicates,
            ..
        } = &lossy[0];
        assert_eq!(address, "10.0.1.4:5201");
        // Binomial(~5100, 0.05): 255 ± 16 lost; 3 % to 7 % is five deviations either way.
        // Counted against the sender's count, the last datagrams lost too.
        assert_eq!(*expected, sent, "{group}: expected the datagrams sent");
        let share = *lost as f64 / sent as f64;
        assert!(
            (0.03..0.07).contains(&share),
            "{group}: rx3 lost {lost} of {sent} ({:.2} %) behind 5 % loss",
            share * 100.0
        );
        assert_eq!(*duplicates, 0);
    }
}

/// Two receivers on the sender's own host (a veth of a namespace of the test's own:
/// the kernel loops a group's datagrams back to the host's members), over IPv4 and
/// IPv6, any-source and source-specific, the source given by -B or --bind-dev and the
/// TTL or hop limit by --ttl: each counts every datagram sent. Another
/// sender to the same group and port meanwhile is counted by neither (each receiver
/// takes the test's source alone). A stock iperf3 among the receivers is refused before
/// anything is sent, naming it.
#[test]
fn receivers_on_one_host_take_the_test_alone_over_ipv4_and_ipv6() {
    if !support::is_root_with_ip("the namespace is made for the test") {
        return;
    }
    let ns = format!("mcast{}", std::process::id() % 100_000);
    ip(&["netns", "add", &ns]);
    let _made = support::Namespaces(vec![ns.clone()]);
    ip(&["-n", &ns, "link", "set", "lo", "up"]);
    ip(&[
        "-n", &ns, "link", "add", "va", "type", "veth", "peer", "name", "vb",
    ]);
    for dev in ["va", "vb"] {
        ip(&["-n", &ns, "link", "set", dev, "up"]);
    }
    ip(&["-n", &ns, "addr", "add", "10.9.0.1/24", "dev", "va"]);
    ip(&["-n", &ns, "addr", "add", "fd00::1/64", "dev", "va", "nodad"]);
    // IPv4 groups by va, for the other sender below (IPv6 has ff00::/8 on every link).
    ip(&["-n", &ns, "route", "add", "224.0.0.0/4", "dev", "va"]);
    let ports = support::free_ports(3);
    let (p1, p2, p3) = (ports, ports + 1, ports + 2);
    let _r1 = serve_in(&ns, p1, &format!("10.9.0.1:{p1}"));
    let _r2 = serve_in(&ns, p2, &format!("10.9.0.1:{p2}"));
    for (group, receiver, ssm) in [
        ("239.255.0.2", "10.9.0.1", false),
        ("232.0.0.2", "10.9.0.1", true),
        ("ff15::2", "[fd00::1]", false),
        ("ff35::2", "[fd00::1]", true),
    ] {
        // Another sender to the group and port, all along.
        let noise = {
            let ip: std::net::IpAddr = group.parse().expect("a group");
            let (ns, to) = (ns.clone(), std::net::SocketAddr::new(ip, p1));
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let flag = stop.clone();
            let from = if ip.is_ipv6() {
                "[fd00::1]:0"
            } else {
                "10.9.0.1:0"
            };
            let sender = std::thread::spawn(move || {
                support::in_netns(Some(&ns), move || {
                    let s = std::net::UdpSocket::bind(from).expect("another sender");
                    let mut sent = 0u64;
                    while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                        if s.send_to(&[0xee; 200], to).is_ok() {
                            sent += 1;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(2));
                    }
                    sent
                })
            });
            (stop, sender)
        };
        let receivers = format!("{receiver}:{p1},{receiver}:{p2}");
        let mut args = vec!["-u", group, "-p"];
        let port = p1.to_string();
        args.push(&port);
        args.extend(["--receivers", &receivers, "-b", "10M", "-t", "1"]);
        if ssm {
            // And a hop limit or TTL other than the default.
            args.extend(["--source-specific", "--ttl", "2"]);
        } else {
            // And the source chosen: by address, or by device.
            args.extend(match group.contains(':') {
                false => ["-B", "10.9.0.1"],
                true => ["--bind-dev", "va"],
            });
        }
        let r = test_in(&ns, &args);
        let m = &r["end"]["multicast"];
        assert_eq!(m["ttl"], if ssm { 2 } else { 1 });
        let from = if group.contains(':') {
            "[fd00::1]:"
        } else {
            "10.9.0.1:"
        };
        assert!(
            m["source"].as_str().is_some_and(|s| s.starts_with(from)),
            "{m}"
        );
        noise.0.store(true, std::sync::atomic::Ordering::Relaxed);
        let other = noise.1.join().expect("the other sender");
        assert!(other > 100, "{group}: the other sender sent {other}");
        let (sent, each) = accounts(&r);
        assert_eq!(each.len(), 2);
        for a in each {
            assert_eq!(
                a.counts(),
                (sent, 0, 0, 0, 0),
                "{group} (source-specific {ssm}): {}",
                a.address
            );
        }
    }
    // A stock iperf3 has no multicast: refused, naming it, before any datagram.
    let mut iperf3 = Reaped(
        Command::new("ip")
            .args(["netns", "exec", &ns, "iperf3", "-s", "-p", &p3.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("iperf3"),
    );
    support::await_listening_in(&ns, &format!("10.9.0.1:{p3}"), &mut iperf3.0);
    let receivers = format!("10.9.0.1:{p1},10.9.0.1:{p3}");
    let out = Command::new("ip")
        .args(["netns", "exec", &ns, env!("CARGO_BIN_EXE_flowlab"), "test"])
        .args([
            "-u",
            "239.255.0.3",
            "-p",
            &p1.to_string(),
            "--receivers",
            &receivers,
        ])
        .args(["-t", "1"])
        .output()
        .expect("flowlab test");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "receiver 10.9.0.1:{p3}: the server does not support multicast"
        )),
        "{stderr}"
    );
}

/// What a multicast test cannot be is refused before a test, naming the flag.
#[test]
fn what_a_multicast_test_cannot_be_is_refused_naming_the_flag() {
    let group = ["test", "-u", "239.255.0.1", "--receivers", "h1,h2"];
    for (flag, extra) in [
        ("-R/--bidir", &["-R"][..]),
        ("-R/--bidir", &["--bidir"][..]),
        ("-P/--parallel", &["-P", "2"][..]),
        ("--stop-and-wait", &["--stop-and-wait"][..]),
        ("--latency", &["--latency"][..]),
        ("--get-server-output", &["--get-server-output"][..]),
        ("--no-window", &["--no-window"][..]),
        ("--ttl", &["--ttl", "0"][..]),
        ("--receivers", &["--receivers", "h1:0"][..]),
    ] {
        let mut args = group.to_vec();
        args.extend(extra);
        usage_error(&args, flag);
    }
    // The group needs its receivers, and the receivers a group; both need -u.
    usage_error(&["test", "-u", "239.255.0.1"], "--receivers");
    usage_error(
        &["test", "-u", "10.0.0.1", "--receivers", "h1"],
        "multicast group",
    );
    usage_error(&["test", "239.255.0.1", "--receivers", "h1"], "--udp");
    usage_error(&["test", "-u", "10.0.0.1", "--ttl", "2"], "--receivers");
}
