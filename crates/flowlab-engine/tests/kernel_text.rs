//! Property tests of the parsers of what the kernel and its tools hand flowlab: the
//! bytes of `struct tcp_info` (of any kernel's length), /proc/stat, and `tc -j qdisc
//! show`. Any input gives a value (fields the input lacks are absent), never a panic.

use std::collections::BTreeMap;
use std::mem::offset_of;

use flowlab_engine::sysinfo::{CpuTimes, parse_tc_qdiscs};
use flowlab_engine::tcpinfo::{self, TCP_INFO_MAX};
use proptest::prelude::*;

fn u32_at(raw: &[u8], at: usize) -> Option<u64> {
    Some(u64::from(u32::from_ne_bytes(
        raw.get(at..at + 4)?.try_into().ok()?,
    )))
}

fn u64_at(raw: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(raw.get(at..at + 8)?.try_into().ok()?))
}

// glibc's `struct tcp_info` is the reference for the offsets (the kernel's uapi layout).
#[cfg(target_env = "gnu")]
proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn a_tcp_info_of_any_length_gives_the_fields_it_covers(raw in prop::collection::vec(any::<u8>(), 0..TCP_INFO_MAX + 64), t_us in any::<u64>()) {
        type T = libc::tcp_info;
        let s = tcpinfo::parse(&raw, t_us);
        prop_assert_eq!(s.t_us, t_us);
        prop_assert_eq!(s.state, raw.first().copied());
        prop_assert_eq!(s.snd_cwnd, u32_at(&raw, offset_of!(T, tcpi_snd_cwnd)));
        prop_assert_eq!(s.srtt_us, u32_at(&raw, offset_of!(T, tcpi_rtt)));
        prop_assert_eq!(s.total_retrans, u32_at(&raw, offset_of!(T, tcpi_total_retrans)));
        prop_assert_eq!(s.bytes_acked, u64_at(&raw, offset_of!(T, tcpi_bytes_acked)));
        prop_assert_eq!(s.delivery_rate, u64_at(&raw, offset_of!(T, tcpi_delivery_rate)));
        prop_assert_eq!(s.bytes_sent, u64_at(&raw, offset_of!(T, tcpi_bytes_sent)));
        prop_assert_eq!(s.rcv_wnd, u32_at(&raw, offset_of!(T, tcpi_rcv_wnd)));
        // Buffer sizes are the caller's to fill in, never read from the struct.
        prop_assert_eq!((s.sndbuf, s.rcvbuf), (None, None));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn proc_stat_of_any_text_is_read_or_not(text in ".{0,200}") {
        let _ = CpuTimes::parse(&text);
    }

    #[test]
    fn the_cpu_line_gives_the_total_of_eight_fields_and_the_steal(fields in prop::collection::vec(any::<u64>(), 8..11), other in "[a-z0-9 ]{0,40}") {
        let line = fields.iter().map(u64::to_string).collect::<Vec<_>>().join(" ");
        let text = format!("{other}\ncpu  {line}\ncpu0 1 2 3\n");
        let t = CpuTimes::parse(&text).expect("a cpu line");
        let total = fields[..8].iter().fold(0u64, |a, &b| a.saturating_add(b));
        prop_assert_eq!(t, CpuTimes { total, steal: fields[7] });
    }

    #[test]
    fn tc_output_of_any_bytes_gives_what_it_holds(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = parse_tc_qdiscs(&bytes);
    }

    #[test]
    fn tc_qdiscs_are_the_root_kind_per_device(qdiscs in prop::collection::vec(("[a-z0-9]{1,8}", "[a-z_]{1,8}", any::<bool>()), 0..12)) {
        let json: Vec<serde_json::Value> = qdiscs
            .iter()
            .map(|(dev, kind, root)| {
                let mut q = serde_json::json!({ "kind": kind, "handle": "1:", "dev": dev });
                if *root {
                    q["root"] = serde_json::Value::Bool(true);
                } else {
                    q["parent"] = "1:".into();
                }
                q
            })
            .collect();
        let text = serde_json::to_vec(&json).expect("serialisable");
        let mut want = BTreeMap::new();
        for (dev, kind, root) in &qdiscs {
            if *root {
                want.insert(dev.clone(), kind.clone());
            }
        }
        prop_assert_eq!(parse_tc_qdiscs(&text), want);
    }
}
