//! The parameter documents of iperf3 clients after 3.12 (captured from 3.19.1 and 3.21:
//! tests/fixtures/iperf3-params/README.md) are read whole: every field those versions
//! added arrives, none is dropped on the way in.

use flowlab_proto::frame;
use flowlab_proto::params::{Protocol, TestParams};

fn fixture(name: &str) -> (TestParams, serde_json::Value) {
    let path = format!(
        "{}/tests/fixtures/iperf3-params/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let params = frame::decode(text.as_bytes()).unwrap_or_else(|e| panic!("{path}: {e}"));
    let raw = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    (params, raw)
}

/// Every key of the document a field of [`TestParams`] keeps: serialised back, the
/// document's keys all reappear with their values (as numbers where iperf3 sends 1 for
/// true: the flags come back as `true`).
fn nothing_dropped(name: &str) {
    let (params, raw) = fixture(name);
    let back = serde_json::to_value(&params).expect("serialise");
    for (key, value) in raw.as_object().expect("an object") {
        let again = &back[key];
        let same = match (value, again) {
            (serde_json::Value::Number(n), serde_json::Value::Bool(b)) => {
                (n.as_u64() != Some(0)) == *b
            }
            // Zeros the serialiser leaves out, as iperf3 does.
            (serde_json::Value::Number(n), serde_json::Value::Null) => n.as_u64() == Some(0),
            (serde_json::Value::Bool(false), serde_json::Value::Null) => true,
            (v, a) => v == a,
        };
        assert!(same, "{name}: {key} was {value}, read as {again}");
    }
}

#[test]
fn no_field_of_a_newer_clients_parameters_is_dropped() {
    for name in [
        "3.19.1-mptcp",
        "3.19.1-skip-rx-copy-reverse",
        "3.19.1-udp",
        "3.21-tcp",
        "3.21-udp",
        "3.21-udp-gsro",
        "3.21-mptcp",
        "3.21-skip-rx-copy",
    ] {
        nothing_dropped(name);
    }
}

#[test]
fn a_3_21_udp_client_says_whether_it_offloads() {
    let (plain, _) = fixture("3.21-udp");
    assert_eq!(plain.protocol(), Some(Protocol::Udp));
    assert_eq!((plain.gso, plain.gro), (Some(false), Some(false)));
    assert_eq!((plain.gso_dg_size, plain.gso_bf_size), (0, 65_507));
    let (gsro, _) = fixture("3.21-udp-gsro");
    assert_eq!((gsro.gso, gsro.gro), (Some(true), Some(true)));
    assert_eq!(gsro.gso_dg_size, gsro.len);
    assert_eq!(gsro.gso_bf_size, 32_768);
    // Before 3.21 a client says nothing of them.
    let (older, _) = fixture("3.19.1-udp");
    assert_eq!((older.gso, older.gro), (None, None));
}

#[test]
fn mptcp_and_skip_rx_copy_are_read() {
    for name in ["3.19.1-mptcp", "3.21-mptcp"] {
        let (p, _) = fixture(name);
        assert!(p.mptcp && p.protocol() == Some(Protocol::Tcp), "{name}");
    }
    let (p, _) = fixture("3.21-skip-rx-copy");
    assert!(p.skip_rx_copy && !p.reverse && !p.mptcp);
    let (p, _) = fixture("3.19.1-skip-rx-copy-reverse");
    assert!(p.skip_rx_copy && p.reverse);
}
