//! Study files: what a valid one expands to, and every refusal's message and place.

use std::time::Duration;

use flowlab_study::file::{OnError, Order, StepKind};
use flowlab_study::{Cell, Trial, parse};
use proptest::prelude::*;

const SEED_003: &str = r#"
name = "seed-003"
description = "stream against stop-and-wait, by message size"
repeat = 3
pause = "500ms"

[params]
length = [1000, 10000, 32500, 65000]

[params.method]
tcp-stream = ""
tcp-stop-and-wait = "--stop-and-wait"
udp-stop-and-wait = "-u --stop-and-wait"

[[exclude]]
method = "udp-stop-and-wait"
length = 65000

[[step]]
name = "transfer"
kind = "test"
args = "127.0.0.1 -n 10M -l {length} {method} -T {{x}}"
"#;

fn no_servers(_: usize) -> flowlab_study::ServerAddress {
    unreachable!("the study has no servers")
}

#[test]
fn a_study_expands_into_its_cells_and_trials() {
    let s = parse(SEED_003).expect("valid");
    assert_eq!(s.name, "seed-003");
    assert_eq!(s.repeat, 3);
    assert_eq!(s.pause, Duration::from_millis(500));
    assert_eq!((s.order, s.on_error), (Order::Random, OnError::Continue));
    assert_eq!(s.steps[0].kind, StepKind::Test);
    let cells = s.cells();
    // 4 lengths × 3 methods, less one.
    assert_eq!(cells.len(), 11);
    assert_eq!(s.cell_label(&cells[0]), "length=1000 method=tcp-stream");
    assert_eq!(
        s.cell_label(&cells[10]),
        "length=65000 method=tcp-stop-and-wait"
    );
    assert_eq!(
        s.args(0, &Cell(vec![2, 2]), &no_servers, "s"),
        "127.0.0.1 -n 10M -l 32500 -u --stop-and-wait -T {x}"
    );
    let plan = s.plan(42);
    assert_eq!(plan.trials.len(), 33);
    assert_eq!(plan.seed, 42);
    // The same seed draws the same order; another seed, another.
    assert_eq!(s.plan(42), plan);
    assert_ne!(s.plan(43).trials, plan.trials);
    let mut sorted = plan.trials.clone();
    sorted.sort_by_key(|t| (t.cell, t.repetition));
    let every: Vec<Trial> = (0..11)
        .flat_map(|cell| (1..=3).map(move |repetition| Trial { cell, repetition }))
        .collect();
    assert_eq!(sorted, every, "every trial exactly once");
}

#[test]
fn a_sequential_study_runs_cell_by_cell_and_a_file_seed_wins() {
    let s = parse(&SEED_003.replace("repeat = 3", "repeat = 2\norder = \"sequential\""))
        .expect("valid");
    let plan = s.plan(1);
    assert_eq!(
        &plan.trials[..3],
        [
            Trial {
                cell: 0,
                repetition: 1
            },
            Trial {
                cell: 0,
                repetition: 2
            },
            Trial {
                cell: 1,
                repetition: 1
            },
        ]
    );
    let s = parse(&SEED_003.replace("repeat = 3", "repeat = 3\nseed = 9")).expect("valid");
    assert_eq!(s.plan(1), s.plan(2));
    assert_eq!(s.plan(1).seed, 9);
}

#[test]
fn a_study_without_parameters_is_one_cell() {
    let s = parse("name = \"once\"\n[[step]]\nkind = \"fetch\"\nargs = \"--from a --out d\"\n")
        .expect("valid");
    assert_eq!(s.cells(), [Cell(Vec::new())]);
    assert_eq!(s.plan(0).trials.len(), 1);
    assert_eq!(
        s.args(0, &s.cells()[0], &no_servers, "s"),
        "--from a --out d"
    );
}

#[test]
fn servers_are_reached_by_name_and_groups_run_together() {
    let s = parse(
        r#"
name = "two"
[params]
ratio = ["1:1", "1:2"]
[[server]]
name = "a"
[[server]]
name = "b"
args = "--fragments set"
[[step]]
name = "idle"
kind = "test"
args = "{a.host} -p {a.port} -t 1"
[[step]]
name = "left"
kind = "test"
group = "load"
args = "{a.host} -p {a.port}"
[[step]]
name = "fetch"
kind = "fetch"
args = "--from {a} --from {b} --ratio {ratio} --out d"
[[step]]
name = "right"
kind = "test"
group = "load"
args = "{b.host} -p {b.port}"
"#,
    )
    .expect("valid");
    assert_eq!(s.servers.len(), 2);
    assert_eq!(s.servers[1].args, "--fragments set");
    assert_eq!(s.servers[0].node, None);
    let address = |i: usize| flowlab_study::ServerAddress {
        host: if i == 0 { "127.0.0.1" } else { "::1" }.to_string(),
        port: 4000 + i as u16,
        quic_port: None,
    };
    let cell = &s.cells()[1];
    assert_eq!(s.args(0, cell, &address, "s"), "127.0.0.1 -p 4000 -t 1");
    assert_eq!(
        s.args(2, cell, &address, "s"),
        "--from 127.0.0.1:4000 --from [::1]:4001 --ratio 1:2 --out d"
    );
    assert_eq!(s.steps[0].args.servers().collect::<Vec<_>>(), [0, 0]);
    // A group starts where its first step is, and holds every step that names it.
    assert_eq!(s.stages(), [vec![0], vec![1, 3], vec![2]]);
}

#[test]
fn scratch_is_the_trials_directory_and_no_ones_name() {
    let s = parse(
        "name = \"x\"\n[[step]]\nkind = \"fetch\"\nargs = \"--from h --out {scratch}/got\"\n",
    )
    .expect("valid");
    assert_eq!(
        s.args(0, &s.cells()[0], &no_servers, "/tmp/t7"),
        "--from h --out /tmp/t7/got"
    );
    let e =
        parse("name = \"x\"\n[params]\nscratch = [1]\n[[step]]\nkind = \"test\"\nargs = \"h\"\n")
            .expect_err("reserved");
    assert!(e.message.contains("the name is {scratch}'s"), "{e}");
}

const TWO_NETWORKS: &str = r#"
name = "distances"
topology = "t.toml"
repeat = 3

[params]
ratio = ["1:2", "1:1", "2:1"]
[params.distance]
short = "169M"
long = "85M"

[[link]]
name = "b"
rate = "{distance}"
delay = "1ms"

[[step]]
kind = "fetch"
args = "--ratio {ratio}"
"#;

#[test]
fn link_values_come_from_the_cells_and_trials_on_one_network_run_together() {
    let s = parse(TWO_NETWORKS).expect("valid");
    let cells = s.cells();
    assert_eq!(
        s.link_values(&cells[1]),
        [
            ("b".to_string(), "rate".to_string(), "85M".to_string()),
            ("b".to_string(), "delay".to_string(), "1ms".to_string())
        ]
    );
    // Cells alternate short, long: two networks, numbered as they first appear.
    assert_eq!(s.networks(&cells), [0, 1, 0, 1, 0, 1]);
    // The emulator's CPUs are left to idle unless the study asks.
    assert!(!s.keep_cpus_awake);
    let awake = TWO_NETWORKS.replace("repeat = 3", "repeat = 3\nkeep_cpus_awake = true");
    assert!(parse(&awake).expect("valid").keep_cpus_awake);
    let asleep = TWO_NETWORKS.replace("repeat = 3", "repeat = 3\nkeep_cpus_awake = false");
    assert!(!parse(&asleep).expect("valid").keep_cpus_awake);
    let network = |t: &Trial| t.cell % 2;
    // Random: a round per repetition, each network once in it, its trials together.
    for seed in 0..20 {
        let plan = s.plan(seed);
        assert_eq!(plan.trials.len(), 18);
        for (round, trials) in plan.trials.chunks(6).enumerate() {
            assert!(
                trials.iter().all(|t| t.repetition == round as u32 + 1),
                "{trials:?}"
            );
            let changes = trials
                .windows(2)
                .filter(|w| network(&w[0]) != network(&w[1]))
                .count();
            assert_eq!(changes, 1, "one network after the other: {trials:?}");
        }
        let mut sorted = plan.trials.clone();
        sorted.sort_by_key(|t| (t.cell, t.repetition));
        let every: Vec<Trial> = (0..6)
            .flat_map(|cell| (1..=3).map(move |repetition| Trial { cell, repetition }))
            .collect();
        assert_eq!(sorted, every, "every trial exactly once");
    }
    // Not always the same network first, nor the same order within one.
    let firsts: std::collections::BTreeSet<_> = (0..20)
        .map(|seed| {
            let t = s.plan(seed).trials[0];
            (t.cell, t.repetition)
        })
        .collect();
    assert!(firsts.len() > 2, "{firsts:?}");
    // Sequential: network by network, cell by cell within each.
    let s = parse(&TWO_NETWORKS.replace("repeat = 3", "repeat = 1\norder = \"sequential\""))
        .expect("valid");
    let cells: Vec<usize> = s.plan(0).trials.iter().map(|t| t.cell).collect();
    assert_eq!(cells, [0, 2, 4, 1, 3, 5]);
}

#[test]
fn a_value_may_be_a_table_of_named_parts() {
    let s = parse(
        r#"
name = "profiles"
topology = "t.toml"
[params.distance]
short = { client = "301M", b = "154M" }
long = { client = "207M", b = "125M" }
[[link]]
name = "client"
rate = "{distance.client}"
[[link]]
name = "b"
rate = "{distance.b}"
[[step]]
kind = "test"
args = "-l {distance.b}x"
"#,
    )
    .expect("valid");
    let cells = s.cells();
    assert_eq!(s.cell_label(&cells[1]), "distance=long");
    assert_eq!(
        s.link_values(&cells[1]),
        [
            ("client".to_string(), "rate".to_string(), "207M".to_string()),
            ("b".to_string(), "rate".to_string(), "125M".to_string())
        ]
    );
    assert_eq!(s.args(0, &cells[0], &no_servers, "s"), "-l 154Mx");
    assert_eq!(s.networks(&cells), [0, 1]);
}

/// Each refusal: what is wrong, and where (line, column).
#[test]
fn every_refusal_names_its_place_and_its_reason() {
    let step = "[[step]]\nkind = \"test\"\nargs = \"h\"\n";
    let cases: &[(String, &str, usize)] = &[
        (
            format!("name = \"x\"\nrepet = 3\n{step}"),
            "unknown field `repet`",
            2,
        ),
        (
            format!("name = \"x\"\nrepeat = \"3\"\n{step}"),
            "invalid type",
            2,
        ),
        (
            format!("name = \"x\"\nrepeat = 0\n{step}"),
            "repeat 0: give 1 to 1000000",
            2,
        ),
        (
            format!("name = \"X y\"\n{step}"),
            "name 'X y': use 1 to 64",
            1,
        ),
        (
            format!("name = \"x\"\norder = \"shuffled\"\n{step}"),
            "order 'shuffled': choose random or sequential",
            2,
        ),
        (
            format!("name = \"x\"\non_error = \"ignore\"\n{step}"),
            "on_error 'ignore': choose continue or stop",
            2,
        ),
        (
            format!("name = \"x\"\npause = \"soon\"\n{step}"),
            "pause: 'soon' is not a duration",
            2,
        ),
        (
            format!("name = \"x\"\nseed = -1\n{step}"),
            "seed -1: give 0 or more",
            2,
        ),
        ("name = \"x\"\n".into(), "at least one [[step]]", 1),
        (
            format!("name = \"x\"\n[params]\nlength = []\n{step}"),
            "parameter 'length' has no values",
            2,
        ),
        (
            format!("name = \"x\"\n[params]\nlength = [1, 1]\n{step}"),
            "parameter 'length': '1' is given twice",
            2,
        ),
        (
            format!("name = \"x\"\n[params]\nLength = [1]\n{step}"),
            "parameter 'Length': use lower-case",
            2,
        ),
        (
            format!("name = \"x\"\n[params]\nlength = [[1]]\n{step}"),
            "values are strings, numbers or booleans",
            2,
        ),
        (
            format!("name = \"x\"\n[params]\nlength = [1]\n[[exclude]]\nsize = 1\n{step}"),
            "[[exclude]]: 'size' is not a parameter",
            4,
        ),
        (
            format!("name = \"x\"\n[params]\nlength = [1]\n[[exclude]]\nlength = 2\n{step}"),
            "[[exclude]]: '2' is not a value of 'length'",
            4,
        ),
        (
            "name = \"x\"\n[[step]]\nkind = \"ping\"\nargs = \"h\"\n".into(),
            "step kind 'ping': choose test, fetch or rtt",
            3,
        ),
        (
            "name = \"x\"\n[[step]]\nkind = \"test\"\nargs = \"-l {size}\"\n".into(),
            "'{size}' is neither a parameter nor a server",
            4,
        ),
        (
            "name = \"x\"\n[[server]]\nname = \"a\"\n[[step]]\nkind = \"test\"\nargs = \"{a.addr}\"\n".into(),
            "'{a.addr}': a server has .host, .port and .quic_port",
            6,
        ),
        (
            "name = \"x\"\n[[server]]\nname = \"a\"\n[[step]]\nkind = \"test\"\nargs = \"{a.host} --quic -p {a.quic_port}\"\n".into(),
            "'{a.quic_port}': server a serves no QUIC: give it --quic=0 in its args",
            6,
        ),
        (
            "name = \"x\"\n[params]\nl = [1]\n[[step]]\nkind = \"test\"\nargs = \"{l.host}\"\n".into(),
            "'{l.host}': 'l' is a parameter whose values have no parts (nor is it a server)",
            6,
        ),
        (
            "name = \"x\"\n[params]\na = [1]\n[[server]]\nname = \"a\"\n".into(),
            "server 'a': the name is already a parameter's or a server's",
            5,
        ),
        (
            "name = \"x\"\n[[server]]\nname = \"a\"\nnode = \"h1\"\n".into(),
            "server 'a' runs on a node, but the study has no topology or [ssh] hosts",
            2,
        ),
        (
            "name = \"x\"\n[[step]]\nkind = \"test\"\nfrom = \"h1\"\nargs = \"h\"\n".into(),
            "a step runs 'from' a node, but the study has no topology or [ssh] hosts",
            2,
        ),
        (
            "name = \"x\"\n[[step]]\nkind = \"test\"\nargs = \"a } b\"\n".into(),
            "a lone '}'",
            4,
        ),
        (
            "name = \"x\"\n[params]\nl = [1]\n[[step]]\nkind = \"test\"\nargs = \"-l {l\"\n".into(),
            "'{l' is not closed",
            6,
        ),
        (
                "name = \"x\"\n[[step]]\nname = \"a\"\nkind = \"test\"\nargs = \"h\"\n[[step]]\nname = \"a\"\nkind = \"test\"\nargs = \"h\"\n".into(),
            "step name 'a' is given twice",
            6,
        ),
        (
            format!("name = \"x\"\n[[link]]\nname = \"b\"\nrate = \"1M\"\n{step}"),
            "a [[link]] changes a link of the topology, but the study has no topology",
            2,
        ),
        (
            format!("name = \"x\"\ntopology = \"t.toml\"\n[ssh]\nh1 = \"ssh://h1\"\n[[server]]\nname = \"a\"\nnode = \"h1\"\n{step}"),
            "topology and [ssh]: the nodes are a topology's or hosts over SSH, not both",
            3,
        ),
        (
            format!("name = \"x\"\n[ssh]\nh1 = \"ssh://h1\"\nh2 = \"ssh://h2\"\n[[server]]\nname = \"a\"\nnode = \"h1\"\n{step}"),
            "[ssh] h2: not a node a server or step of the study runs on (h1)",
            4,
        ),
        (
            "name = \"x\"\n[ssh]\nh1 = \"ssh://h1\"\n[[server]]\nname = \"a\"\nnode = \"h1\"\n[[step]]\nkind = \"test\"\nfrom = \"h2\"\nargs = \"{a}\"\n".into(),
            "[ssh]: node 'h2' has no address (h2 = \"ssh://user@host\")",
            2,
        ),
        (
            "name = \"x\"\n[ssh]\nh1 = \"http://h1\"\n[[step]]\nkind = \"test\"\nfrom = \"h1\"\nargs = \"h\"\n".into(),
            "[ssh] h1: 'http://h1' is not an ssh:// address",
            3,
        ),
        (
            format!("name = \"x\"\nssh_options = [\"-v\"]\n{step}"),
            "ssh_options: for hosts over SSH ([ssh])",
            2,
        ),
        (
            format!("name = \"x\"\nkeep_cpus_awake = true\n{step}"),
            "keep_cpus_awake holds the CPUs awake for a topology's emulator, but the study has no topology",
            2,
        ),
        (
            format!("name = \"x\"\ntopology = \"t.toml\"\nkeep_cpus_awake = \"yes\"\n{step}"),
            "invalid type: string \"yes\", expected a boolean",
            3,
        ),
        (
            format!("name = \"x\"\ntopology = \"t.toml\"\n[[link]]\nrate = \"1M\"\n{step}"),
            "a [[link]] needs the name of a link",
            3,
        ),
        (
            format!("name = \"x\"\ntopology = \"t.toml\"\n[[link]]\nname = \"b\"\nmtu = 9000\n{step}"),
            "[[link]] 'b': 'mtu' is not a link property (rate, delay, jitter, loss, queue, queue_bytes, trace, schedule)",
            3,
        ),
        (
            format!("name = \"x\"\ntopology = \"t.toml\"\n[[link]]\nname = \"b\"\n{step}"),
            "[[link]] 'b' changes nothing",
            3,
        ),
        (
            format!("name = \"x\"\ntopology = \"t.toml\"\n[[link]]\nname = \"b\"\nrate = \"{{distance}}\"\n{step}"),
            "[[link]] 'b': rate: '{distance}' is neither a parameter nor a server",
            3,
        ),
        (
            format!("name = \"x\"\ntopology = \"t.toml\"\n[[link]]\nname = \"b\"\ndelay = \"{{scratch}}\"\n{step}"),
            "[[link]] 'b': delay: only parameters fill a link's properties",
            3,
        ),
        (
            format!("name = \"x\"\ntopology = \"t.toml\"\n[[link]]\nname = \"b\"\nrate = \"1M\"\n[[link]]\nname = \"b\"\nloss = 0.1\n{step}"),
            "[[link]] 'b' is given twice",
            6,
        ),
        (
            format!("name = \"x\"\n[[medium]]\nname = \"wlan\"\nbusy_stations = 2\n{step}"),
            "a [[medium]] changes a shared medium of the topology, but the study has no topology",
            2,
        ),
        (
            format!("name = \"x\"\ntopology = \"t.toml\"\n[[medium]]\nname = \"wlan\"\nrate = \"1M\"\n{step}"),
            "[[medium]] 'wlan': 'rate' is not a medium property (busy_rate, busy_stations)",
            3,
        ),
        (
            format!("name = \"x\"\ntopology = \"t.toml\"\n[[medium]]\nbusy_stations = 2\n{step}"),
            "a [[medium]] needs the name of a medium of the topology",
            3,
        ),
        (
            format!("name = \"x\"\ntopology = \"t.toml\"\n[[medium]]\nname = \"wlan\"\nbusy_stations = 1\n[[medium]]\nname = \"wlan\"\nbusy_rate = \"6M\"\n{step}"),
            "[[medium]] 'wlan' is given twice",
            6,
        ),
        (
            "name = \"x\"\n[params.net]\nwifi = { rate = \"50M\" }\n[[step]]\nkind = \"test\"\nargs = \"{net}\"\n".into(),
            "args: '{net}': the values of 'net' are tables; name a part, e.g. {net.rate}",
            6,
        ),
        (
            "name = \"x\"\n[params.net]\nwifi = { rate = \"50M\" }\nlte = { delay = \"5ms\" }\n[[step]]\nkind = \"test\"\nargs = \"{net.rate}\"\n".into(),
            "args: '{net.rate}': value 'lte' of 'net' has no part 'rate'",
            7,
        ),
        (
            "name = \"x\"\n[params.net]\nwifi = { rate = [1] }\n[[step]]\nkind = \"test\"\nargs = \"h\"\n".into(),
            "parameter 'net': value 'wifi' stands for a string, number or boolean, or a table of them",
            2,
        ),
    ];
    for (text, says, line) in cases {
        let e = parse(text).expect_err(says);
        assert!(e.message.contains(says), "{says}: {e}");
        assert_eq!(e.line, *line, "{says}: {e}\n{text}");
        assert!(
            e.to_string().starts_with(&format!("line {line}, column ")),
            "{e}"
        );
    }
}

proptest! {
    #[test]
    fn any_text_is_a_study_or_an_error_with_its_place(text in "(name = \"x\"\n)?(\\[\\[step\\]\\]\n|kind = \"test\"\n|args = \"[{}a-z ]{0,8}\"\n|\\[params\\]\n|[a-z]{1,4} = \\[[0-9, ]{0,8}\\]\n|.{0,12}\n){0,8}") {
        match parse(&text) {
            Ok(s) => {
                let plan = s.plan(0);
                prop_assert_eq!(plan.trials.len(), plan.cells.len() * s.repeat as usize);
                for c in &plan.cells {
                    for i in 0..s.steps.len() {
                        let _ = s.args(i, c, &no_servers, "s");
                    }
                }
            }
            Err(e) => {
                prop_assert!(e.line >= 1 && e.line <= text.lines().count().max(1) + 1, "{e}");
                prop_assert!(e.column >= 1, "{e}");
            }
        }
    }
}

#[test]
fn hosts_over_ssh_are_the_nodes_in_the_order_the_study_names_them() {
    let text = "name = \"x\"\nssh_options = [\"-i\", \"key\"]\n[ssh]\n\
                c = \"ssh://lab@c.example\"\n\
                b = { url = \"ssh://b:2222\", address = \"192.0.2.2\", flowlab = \"/opt/flowlab\" }\n\
                [[server]]\nname = \"b\"\nnode = \"b\"\n\
                [[step]]\nkind = \"test\"\nfrom = \"c\"\nargs = \"{b}\"\n";
    let study = flowlab_study::parse(text).expect("a study over SSH");
    let nodes: Vec<&str> = study.ssh.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(nodes, ["b", "c"], "servers' nodes first, then steps'");
    assert_eq!(study.ssh[0].1.address.as_deref(), Some("192.0.2.2"));
    assert_eq!(study.ssh[0].1.flowlab.as_deref(), Some("/opt/flowlab"));
    assert_eq!(study.ssh[1].1.url, "ssh://lab@c.example");
    assert_eq!(study.ssh_options, ["-i", "key"]);
    assert_eq!(study.topology, None);
}
