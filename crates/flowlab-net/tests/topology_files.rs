//! Property tests of topology files, which users write by hand: any text is a topology
//! or an error of one line (never a panic), and a valid file means what it says: the
//! path through a chain of links has the RTT, bottleneck and loss the links add up to.

use std::time::Duration;

use flowlab_net::topology::{MAX_QUEUE_BYTES, Plan, Topology};
use proptest::prelude::*;

/// A TOML value of any kind, as a user might put under any key.
fn toml_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|i| i.to_string()),
        any::<f64>()
            .prop_filter("TOML floats are finite here", |f| f.is_finite())
            .prop_map(|f| format!("{f:?}")),
        any::<bool>().prop_map(|b| b.to_string()),
        "[a-z0-9. -]{0,10}".prop_map(|s| format!("{s:?}")),
        prop::sample::select(vec![
            "\"40M\"",
            "\"0\"",
            "\"-5ms\"",
            "\"1e30\"",
            "\"10ms\"",
            "\"9999999999s\"",
            "[\"h1\", \"r1\"]",
            "[\"h1\"]",
            "[]",
            "{ rate = \"1M\" }",
            "{ delay = \"-1ms\" }",
        ])
        .prop_map(String::from),
    ]
}

/// A document made of the format's own keys with values of any kind: what a user's
/// typos and misunderstandings look like.
fn topology_like() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec![
        "rate",
        "delay",
        "jitter",
        "queue",
        "queue_bytes",
        "loss",
        "reverse",
        "name",
        "ends",
    ]);
    let link = prop::collection::vec((key, toml_value()), 0..6).prop_map(|kv| {
        let mut s = String::from("[[link]]\n");
        for (k, v) in kv {
            s += &format!("{k} = {v}\n");
        }
        s
    });
    (
        prop::sample::select(vec!["t", "port", "x", "Bad", "toolongname", ""]),
        prop::collection::vec("[a-z][a-z0-9]{0,6}", 0..5),
        prop::collection::vec("[a-z][a-z0-9]{0,6}", 0..4),
        prop::collection::vec(link, 0..6),
    )
        .prop_map(|(name, hosts, routers, links)| {
            format!(
                "name = {name:?}\nhosts = {hosts:?}\nrouters = {routers:?}\n{}",
                links.concat()
            )
        })
}

/// One link of a chain: rate (bit/s, or none), one-way delay (µs), queue (packets), loss.
#[derive(Debug, Clone)]
struct Hop {
    rate: Option<u64>,
    delay_us: u64,
    queue: u64,
    loss: f64,
}

fn hop() -> impl Strategy<Value = Hop> {
    (
        prop::option::of(1_000u64..100_000_000_000),
        0u64..2_000_000,
        1u64..100_000,
        prop_oneof![Just(0.0), 0.0..0.5f64],
    )
        .prop_map(|(rate, delay_us, queue, loss)| Hop {
            rate,
            delay_us,
            queue,
            loss,
        })
}

/// h1 — r1 — r2 — … — h2, one link per hop.
fn chain(hops: &[Hop]) -> String {
    let routers: Vec<String> = (1..hops.len()).map(|i| format!("r{i}")).collect();
    let mut nodes = vec!["h1".to_string()];
    nodes.extend(routers.iter().cloned());
    nodes.push("h2".into());
    let mut text = format!("name = \"chain\"\nhosts = [\"h1\", \"h2\"]\nrouters = {routers:?}\n");
    for (i, h) in hops.iter().enumerate() {
        text += &format!(
            "[[link]]\nname = \"L{i}\"\nends = [{:?}, {:?}]\ndelay = \"{}us\"\nqueue = {}\nloss = {:?}\n",
            nodes[i],
            nodes[i + 1],
            h.delay_us,
            h.queue,
            h.loss
        );
        if let Some(r) = h.rate {
            text += &format!("rate = \"{r}\"\n");
        }
    }
    text
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_text_is_a_topology_or_one_line_of_error(text in ".{0,200}") {
        if let Err(e) = Topology::parse(&text) {
            prop_assert!(!e.to_string().contains('\n'), "{e}");
        }
    }

    #[test]
    fn documents_of_the_formats_keys_are_judged_not_panicked_on(text in topology_like()) {
        match Topology::parse(&text) {
            // Whatever is accepted can be planned and shown.
            Ok(t) => {
                let _ = Plan::of(&t).summary();
            }
            Err(e) => prop_assert!(!e.to_string().contains('\n'), "{e}"),
        }
    }

    #[test]
    fn a_chain_implies_the_sum_of_its_delays_its_slowest_rate_and_its_losses(hops in prop::collection::vec(hop(), 1..8)) {
        let t = Topology::parse(&chain(&hops)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let plan = Plan::of(&t);
        let path = plan.path("h1", "h2").expect("a chain is connected");
        prop_assert_eq!(path.hops.len(), hops.len());
        let one_way: u64 = hops.iter().map(|h| h.delay_us).sum();
        prop_assert_eq!(path.rtt, Duration::from_micros(2 * one_way));
        prop_assert_eq!(path.bottleneck_bps, hops.iter().filter_map(|h| h.rate).min());
        let delivered: f64 = hops.iter().map(|h| 1.0 - h.loss).product();
        prop_assert!((path.loss - (1.0 - delivered)).abs() < 1e-12, "{} vs {}", path.loss, 1.0 - delivered);
        // The same path read backwards crosses the same links the other way.
        let back = plan.path("h2", "h1").expect("and back");
        prop_assert_eq!(back.rtt, path.rtt);
        prop_assert!(back.hops.iter().all(|h| !h.forward));
    }

    #[test]
    fn a_link_to_a_node_that_does_not_exist_is_named(hops in prop::collection::vec(hop(), 1..4), ghost in "[a-z][a-z0-9]{0,5}") {
        prop_assume!(ghost != "h1" && ghost != "h2" && !ghost.starts_with('r'));
        let text = chain(&hops) + &format!("[[link]]\nends = [\"h1\", {ghost:?}]\n");
        let e = Topology::parse(&text).expect_err("refused");
        prop_assert!(e.to_string().contains(&format!("unknown node '{ghost}'")), "{e}");
    }

    #[test]
    fn queues_beyond_what_tc_holds_are_refused_and_the_rest_planned(
        queue in prop_oneof![Just(i64::MAX), 1i64..10_000_000],
        queue_bytes in prop_oneof![Just(i64::MAX), 1500i64..10_000_000_000],
        rate in prop_oneof![Just(u64::MAX), 1u64..u64::MAX],
    ) {
        let max_packets = MAX_QUEUE_BYTES / 1514;
        for (props, fits) in [
            (format!("queue = {queue}"), queue as u64 <= max_packets),
            (format!("queue_bytes = {queue_bytes}"), queue_bytes as u64 <= MAX_QUEUE_BYTES),
        ] {
            let text = format!(
                "name = \"edge\"\nhosts = [\"a\", \"b\"]\n[[link]]\nends = [\"a\", \"b\"]\nrate = \"{rate}\"\ndelay = \"1ms\"\n{props}\n"
            );
            match Topology::parse(&text) {
                Ok(t) => {
                    prop_assert!(fits, "{} accepted", props);
                    let plan = Plan::of(&t);
                    let _ = plan.summary();
                    prop_assert!(plan.path("a", "b").is_some());
                }
                Err(e) => {
                    prop_assert!(!fits, "{}: {}", props, e);
                    prop_assert!(e.to_string().contains("more than tc can hold"), "{e}");
                }
            }
        }
    }
}
