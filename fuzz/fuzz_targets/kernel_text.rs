//! What the kernel and its tools hand flowlab: `struct tcp_info` of any length,
//! /proc/stat, `tc -j qdisc show`.
#![no_main]

use flowlab_engine::sysinfo::{CpuTimes, parse_tc_qdiscs};
use flowlab_engine::tcpinfo;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tcpinfo::parse(data, 0);
    let _ = tcpinfo::totals(data);
    let _ = parse_tc_qdiscs(data);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = CpuTimes::parse(text);
    }
});
