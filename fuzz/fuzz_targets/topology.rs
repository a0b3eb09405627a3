//! A topology file as a user writes it: refused in one line, or planned (every path, the
//! summary `net show` prints).
#![no_main]

use flowlab_net::topology::{Plan, Topology};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Topology::parse(text) {
        Ok(t) => {
            let _ = Plan::of(&t).summary();
        }
        Err(e) => assert!(!e.to_string().contains('\n')),
    }
});
