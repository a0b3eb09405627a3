//! What users type for sizes, rates, durations, unit formats and ratios.
#![no_main]

use flowlab_fragments::schedule::parse_ratio;
use flowlab_report::units::UnitFormat;
use flowlab_results::units::{parse_duration, parse_rate, parse_size};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_size(text);
    let _ = parse_rate(text);
    let _ = parse_duration(text);
    let _ = text.parse::<UnitFormat>();
    if let Ok(r) = parse_ratio(text) {
        assert!(r.len() >= 2 && r.iter().all(|&x| (1..=1000).contains(&x)));
    }
});
