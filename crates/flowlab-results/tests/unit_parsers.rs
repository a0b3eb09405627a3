//! Property tests of the parsers of sizes, rates and durations: any text
//! is answered with a value or an error naming it (never a panic), and what a user
//! writes means what the docs say.

use std::time::Duration;

use flowlab_results::units::{parse_duration, parse_rate, parse_size};
use proptest::prelude::*;

/// Text that looks like a quantity more often than not: digits, a point, a sign, an
/// exponent, suffixes, spaces, and now and then anything at all.
fn quantity_like() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ 0-9.eE+-]{0,12}[kKmMgGtTsuµ]{0,3}[ ]{0,2}",
        ".{0,16}",
        any::<f64>().prop_map(|f| f.to_string()),
    ]
}

proptest! {
    #[test]
    fn any_text_is_a_quantity_or_an_error_naming_it(text in quantity_like()) {
        for result in [parse_size(&text), parse_rate(&text)] {
            if let Err(e) = result {
                prop_assert!(e.to_string().contains(&text), "{e}");
            }
        }
        if let Err(e) = parse_duration(&text) {
            prop_assert!(e.to_string().contains(&text), "{e}");
        }
    }

    #[test]
    fn sizes_are_binary_and_rates_decimal(n in 0u64..1_000_000, power in 0usize..5, lower in any::<bool>()) {
        let suffix = ["", "K", "M", "G", "T"][power];
        let suffix = if lower { suffix.to_lowercase() } else { suffix.to_string() };
        let text = format!("{n}{suffix}");
        prop_assert_eq!(parse_size(&text), Ok(n * 1024u64.pow(power as u32)));
        prop_assert_eq!(parse_rate(&text), Ok(n * 1000u64.pow(power as u32)));
    }

    #[test]
    fn with_a_unit_prefixes_are_si_unless_iec(n in 0u64..1_000_000, power in 1usize..5, unit in 0usize..3) {
        let prefix = ["", "K", "M", "G", "T"][power];
        let si = n * 1000u64.pow(power as u32);
        let iec = n * 1024u64.pow(power as u32);
        let (size_unit, rate_unit) = [("B", "bit/s"), ("Bytes", "bps"), ("bytes", "bits")][unit];
        prop_assert_eq!(parse_size(&format!("{n}{prefix}{size_unit}")), Ok(si));
        prop_assert_eq!(parse_size(&format!("{n}{prefix}i{size_unit}")), Ok(iec));
        prop_assert_eq!(parse_rate(&format!("{n}{prefix}{rate_unit}")), Ok(si));
        prop_assert_eq!(parse_rate(&format!("{n}{prefix}i{rate_unit}")), Ok(iec));
        // Bytes a second are eight bits each; bits are not a size.
        prop_assert_eq!(parse_rate(&format!("{n}{prefix}B/s")), Ok(8 * si));
        let bits = format!("{n}{prefix}{rate_unit}");
        prop_assert!(parse_size(&bits).is_err(), "{} parsed as a size", bits);
    }

    #[test]
    fn fractions_round_to_the_nearest_unit(tenths in 0u64..100_000) {
        let text = format!("{}.{}K", tenths / 10, tenths % 10);
        prop_assert_eq!(parse_rate(&text), Ok(tenths * 100));
        prop_assert_eq!(parse_size(&text), Ok((tenths as f64 * 102.4).round() as u64));
    }

    #[test]
    fn sizes_beyond_64_bits_are_refused(extra in 1u64..1000) {
        // 2^64 bytes is 16 777 216 T; anything above cannot be a size.
        let text = format!("{}T", 16_777_216 + extra);
        prop_assert!(parse_size(&text).is_err(), "{} parsed", text);
    }

    #[test]
    fn durations_take_us_ms_and_s_and_a_bare_number_is_ms(n in 0u64..1_000_000) {
        prop_assert_eq!(parse_duration(&format!("{n}us")), Ok(Duration::from_micros(n)));
        prop_assert_eq!(parse_duration(&format!("{n}ms")), Ok(Duration::from_millis(n)));
        prop_assert_eq!(parse_duration(&format!("{n}")), Ok(Duration::from_millis(n)));
        prop_assert_eq!(parse_duration(&format!("{n}s")), Ok(Duration::from_secs(n)));
    }

    #[test]
    fn negative_and_endless_durations_are_refused(n in 1u64..1_000_000) {
        for text in [format!("-{n}ms"), format!("{n}e30s")] {
            prop_assert!(parse_duration(&text).is_err(), "{} parsed", text);
        }
    }
}
