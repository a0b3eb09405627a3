//! Sizes, rates and durations as people write them.
//!
//! Quantities are read as people write them (docs/cli.md has the table). The option says
//! what a bare number counts: sizes (`-l`, `-w`, `-n`) bytes, rates (`-b`) bits a
//! second. A bare prefix follows iperf3's habits: binary for sizes (`64K` = 65 536
//! bytes), decimal for rates (`10M` = 10 000 000 bit/s). With a unit the prefix is SI,
//! decimal (`64KB` = 64 000 bytes, `1Gbps`, `1Gbit/s`, `500Kbit`), unless it is IEC's
//! binary one (`64KiB`, `1Gibit/s`). A rate may be given in bytes a second (`12.5MB/s`).
//! How they are printed is the formats' (`flowlab_report::units`).

/// The forms a size takes, for refusals.
const SIZE_FORMS: &str = "a size in bytes: 1500, 64K or 64KiB (x1024), 64KB (x1000); K M G T";
/// The forms a rate takes, for refusals.
const RATE_FORMS: &str = "a rate in bits a second: 100M, 100Mbit/s, 100Mbps or 100Mbit \
     (x1000), 100Mibit/s (x1024), or bytes a second as 12.5MB/s; K M G T";

/// A size or rate that did not parse: the text, and the forms accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{text}' is not {forms}")]
pub struct BadQuantity {
    pub text: String,
    pub forms: &'static str,
}

/// What the unit after the number (and its prefix) counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    /// No unit: the option's own.
    Bare,
    Bytes,
    Bits,
    BytesPerSecond,
    BitsPerSecond,
}

/// A quantity split into its number, the prefix's multiplier and its unit; `bare_base`
/// is the base of a prefix with no unit after it (1024 for sizes, 1000 for rates).
fn split_quantity(text: &str, bare_base: f64) -> Option<(f64, Unit)> {
    let t = text.trim();
    let digits = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let v: f64 = t[..digits].parse().ok()?;
    let rest = t[digits..].trim_start();
    let (power, rest) = match rest.chars().next().map(|c| c.to_ascii_uppercase()) {
        Some(c @ ('K' | 'M' | 'G' | 'T')) => ("KMGT".find(c)? as i32 + 1, &rest[1..]),
        _ => (0, rest),
    };
    let (iec, rest) = match rest.strip_prefix('i') {
        Some(r) if power > 0 => (true, r),
        _ => (false, rest),
    };
    let unit = match rest {
        "" => Unit::Bare,
        "B" | "byte" | "bytes" | "Byte" | "Bytes" => Unit::Bytes,
        "b" | "bit" | "bits" => Unit::Bits,
        "B/s" | "Bps" | "B/sec" | "Bytes/s" | "bytes/s" | "Bytes/sec" => Unit::BytesPerSecond,
        "b/s" | "bps" | "bit/s" | "bits/s" | "bit/sec" | "bits/sec" => Unit::BitsPerSecond,
        _ => return None,
    };
    if iec && unit == Unit::Bare {
        return None;
    }
    let base = match (iec, unit) {
        (true, _) => 1024.0,
        (false, Unit::Bare) => bare_base,
        (false, _) => 1000.0,
    };
    Some((v * f64::powi(base, power), unit))
}

/// A non-negative whole number of units from `v`, or the refusal.
fn whole(v: f64, text: &str, forms: &'static str) -> Result<u64, BadQuantity> {
    if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
        return Err(BadQuantity {
            text: text.into(),
            forms,
        });
    }
    Ok(v.round() as u64)
}

/// Parses a size in bytes: `128K` = `128KiB` = 131 072, `128KB` = 128 000.
pub fn parse_size(text: &str) -> Result<u64, BadQuantity> {
    match split_quantity(text, 1024.0) {
        Some((v, Unit::Bare | Unit::Bytes)) => whole(v, text, SIZE_FORMS),
        _ => Err(BadQuantity {
            text: text.into(),
            forms: SIZE_FORMS,
        }),
    }
}

/// Parses a rate in bits per second: `10M` = `10Mbit/s` = `10Mbps` = 10 000 000,
/// `10MB/s` = 80 000 000, `1Gibit/s` = 1 073 741 824.
pub fn parse_rate(text: &str) -> Result<u64, BadQuantity> {
    match split_quantity(text, 1000.0) {
        Some((v, Unit::Bare | Unit::Bits | Unit::BitsPerSecond)) => whole(v, text, RATE_FORMS),
        Some((v, Unit::BytesPerSecond)) => whole(v * 8.0, text, RATE_FORMS),
        // `10MB` as a rate: bytes, but of what time? Refused rather than guessed.
        _ => Err(BadQuantity {
            text: text.into(),
            forms: RATE_FORMS,
        }),
    }
}

/// A duration that did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a duration like 10ms, 0.5s or 250us")]
pub struct BadDuration(pub String);

/// Parses a duration: a number with `us`, `ms` or `s` (`10ms`, `0.5s`, `250us`); a bare
/// number is milliseconds.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, BadDuration> {
    let t = text.trim();
    let (digits, scale) = if let Some(d) = t.strip_suffix("us") {
        (d, 1e-6)
    } else if let Some(d) = t.strip_suffix("ms") {
        (d, 1e-3)
    } else if let Some(d) = t.strip_suffix('s') {
        (d, 1.0)
    } else {
        (t, 1e-3)
    };
    let bad = || BadDuration(text.into());
    let v: f64 = digits.trim().parse().map_err(|_| bad())?;
    if !v.is_finite() || v < 0.0 || v * scale > 1e9 {
        return Err(bad());
    }
    Ok(std::time::Duration::from_secs_f64(v * scale))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        use std::time::Duration;
        assert_eq!(parse_duration("10ms"), Ok(Duration::from_millis(10)));
        assert_eq!(parse_duration("0.5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("20"), Ok(Duration::from_millis(20)));
        for bad in ["", "ms", "-1ms", "1h", "ten", "1e400s", "NaNs"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes_are_binary_rates_decimal() {
        assert_eq!(parse_size("128K"), Ok(131_072));
        assert_eq!(parse_size("1.5M"), Ok(1_572_864));
        assert_eq!(parse_size("100"), Ok(100));
        assert_eq!(parse_rate("10M"), Ok(10_000_000));
        assert_eq!(parse_rate("2.5g"), Ok(2_500_000_000));
    }

    #[test]
    fn units_as_people_write_them() {
        for (text, bytes) in [
            ("10M", 10 << 20),
            ("10MiB", 10 << 20),
            ("10 MiB", 10 << 20),
            ("10MB", 10_000_000),
            ("1.5G", 3 << 29),
            ("64k", 65_536),
            ("64KB", 64_000),
            ("64Kbytes", 64_000),
            ("1500B", 1500),
            ("2T", 2 << 40),
        ] {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
        for (text, bits) in [
            ("1Gbps", 1_000_000_000),
            ("1Gbit/s", 1_000_000_000),
            ("1gbps", 1_000_000_000),
            ("500Kbit", 500_000),
            ("500Kb", 500_000),
            ("100Mbits/sec", 100_000_000),
            ("1Gibit/s", 1 << 30),
            ("12.5MB/s", 100_000_000),
            ("1MiB/s", 8 << 20),
            ("1KBps", 8_000),
            ("800bps", 800),
            ("1Mib", 1 << 20),
        ] {
            assert_eq!(parse_rate(text), Ok(bits), "{text}");
        }
    }

    #[test]
    fn refuses_garbage() {
        for bad in [
            "", "K", "10X", "-5", "1e400", "nan", "ten", "5KK", "10Mi", "10Mbit", "10Mbps",
            "1.2.3", "10MB/s",
        ] {
            let e = parse_size(bad).expect_err(bad);
            assert!(e.to_string().contains("a size in bytes: 1500, 64K"), "{e}");
        }
        // A rate in bytes says of what time; bits and bytes are not mixed up.
        for bad in ["10MB", "10X", "1Gbpss", "10 Mbit /s", "1Mi"] {
            let e = parse_rate(bad).expect_err(bad);
            assert!(e.to_string().contains("12.5MB/s"), "{e}");
        }
    }
}
