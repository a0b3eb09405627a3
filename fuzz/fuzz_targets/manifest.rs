//! A fragment set's manifest as a server sends it: refused, or valid and re-readable.
#![no_main]

use std::path::Path;

use flowlab_fragments::manifest::Manifest;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = Manifest::parse(data, Path::new("fuzz")) {
        let again = serde_json::to_vec(&m).expect("serialisable");
        assert_eq!(Manifest::parse(&again, Path::new("fuzz")).ok(), Some(m));
    }
});
