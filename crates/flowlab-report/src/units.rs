//! Sizes, rates and their printing.
//!
//! Quantities are read as people write them (docs/cli.md has the table). The option says
//! what a bare number counts: sizes (`-l`, `-w`, `-n`) bytes, rates (`-b`) bits a
//! second. A bare prefix follows iperf3's habits: binary for sizes (`64K` = 65 536
//! bytes), decimal for rates (`10M` = 10 000 000 bit/s). With a unit the prefix is SI,
//! decimal (`64KB` = 64 000 bytes, `1Gbps`, `1Gbit/s`, `500Kbit`), unless it is IEC's
//! binary one (`64KiB`, `1Gibit/s`). A rate may be given in bytes a second (`12.5MB/s`).
//! Printed transfers are binary (KBytes = 1024 bytes), printed bit rates decimal
//! (Kbits/sec = 1000 bits/s). Advice words them as a user types and reads them: a size
//! to give a flag ([`size_arg`]), bytes as sysctl values are discussed
//! ([`decimal_bytes`]), a rate in words ([`rate_words`]).

use std::fmt;

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

/// The unit numbers are printed in (`-f`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum UnitFormat {
    /// Pick the largest unit that keeps the number ≥ 1.
    #[default]
    Adaptive,
    /// Fixed bits: k, m, g, t.
    Bits(u32),
    /// Fixed bytes: K, M, G, T.
    Bytes(u32),
}

/// A `-f` argument that is not a unit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not one of k m g t (bits), K M G T (bytes), a (adaptive)")]
pub struct BadUnitFormat(pub String);

impl std::str::FromStr for UnitFormat {
    type Err = BadUnitFormat;
    fn from_str(text: &str) -> Result<Self, BadUnitFormat> {
        UnitFormat::parse(text).ok_or_else(|| BadUnitFormat(text.into()))
    }
}

impl UnitFormat {
    /// Parses `-f`'s argument: one of `k m g t K M G T a`.
    pub fn parse(text: &str) -> Option<UnitFormat> {
        let power = |c: char| "kmgt".find(c.to_ascii_lowercase()).map(|i| i as u32 + 1);
        let mut chars = text.chars();
        let (c, None) = (chars.next()?, chars.next()) else {
            return None;
        };
        match c {
            'a' | 'A' => Some(UnitFormat::Adaptive),
            c if c.is_ascii_lowercase() => power(c).map(UnitFormat::Bits),
            c => power(c).map(UnitFormat::Bytes),
        }
    }
}

const PREFIX: [&str; 5] = ["", "K", "M", "G", "T"];

/// A unit as flowlab prints it everywhere (tables and graphs): `unit` ("bits/sec",
/// "Bytes") with the prefix of 1000^`power` or 1024^`power` ("Gbits/sec", "MBytes").
pub fn unit_name(power: usize, unit: &str) -> String {
    format!("{}{unit}", PREFIX[power.min(4)])
}

/// Three significant digits, as iperf3 prints them: "9.41", "94.1", "941".
fn write_scaled(f: &mut fmt::Formatter<'_>, scaled: f64, power: usize, unit: &str) -> fmt::Result {
    let prec = if scaled < 9.995 {
        2
    } else if scaled < 99.95 {
        1
    } else {
        0
    };
    write!(f, "{scaled:.prec$} {}", unit_name(power, unit))
}

/// A byte count, printed as iperf3 prints a transfer ("1.25 GBytes").
#[derive(Debug, Clone, Copy)]
pub struct Bytes(pub u64, pub UnitFormat);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0 as f64;
        let (scaled, p, bits) = match self.1 {
            UnitFormat::Adaptive => {
                let p = (0..5).rev().find(|&p| v >= 1024f64.powi(p)).unwrap_or(0);
                (v / 1024f64.powi(p), p as usize, false)
            }
            UnitFormat::Bytes(p) => (v / 1024f64.powi(p as i32), p as usize, false),
            UnitFormat::Bits(p) => (v * 8.0 / 1000f64.powi(p as i32), p as usize, true),
        };
        let unit = if bits { "bits" } else { "Bytes" };
        write_scaled(f, scaled, p, unit)
    }
}

/// A bit rate, printed as iperf3 prints one ("9.41 Gbits/sec").
#[derive(Debug, Clone, Copy)]
pub struct Rate(pub f64, pub UnitFormat);

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        let (scaled, p, unit) = match self.1 {
            UnitFormat::Adaptive => {
                let p = (0..5).rev().find(|&p| v >= 1000f64.powi(p)).unwrap_or(0);
                (v / 1000f64.powi(p), p as usize, "bits/sec")
            }
            UnitFormat::Bits(p) => (v / 1000f64.powi(p as i32), p as usize, "bits/sec"),
            UnitFormat::Bytes(p) => (v / 8.0 / 1024f64.powi(p as i32), p as usize, "Bytes/sec"),
        };
        write_scaled(f, scaled, p, unit)
    }
}

/// Bytes as the user types them (`-w 8M`): binary units, rounded up.
pub fn size_arg(bytes: u64) -> String {
    const M: u64 = 1 << 20;
    const K: u64 = 1 << 10;
    if bytes >= M {
        format!("{}M", bytes.div_ceil(M))
    } else {
        format!("{}K", bytes.div_ceil(K).max(1))
    }
}

/// Bytes in decimal units, as sysctl values are usually discussed ("6.2 MB").
pub fn decimal_bytes(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= 1e9 {
        format!("{:.1} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.0} kB", b / 1e3)
    } else {
        format!("{bytes} B")
    }
}

/// A rate as the advice words it: "30 Mbit/s", "1 Gbit/s", "2.5 Gbit/s".
pub fn rate_words(bps: u64) -> String {
    let (v, unit) = if bps >= 1_000_000_000 {
        (bps as f64 / 1e9, "Gbit/s")
    } else if bps >= 1_000_000 {
        (bps as f64 / 1e6, "Mbit/s")
    } else {
        (bps as f64 / 1e3, "kbit/s")
    };
    let digits = if v.fract().abs() < 1e-9 { 0 } else { 1 };
    format!("{v:.digits$} {unit}")
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

    #[test]
    fn prints_like_iperf3() {
        assert_eq!(
            Bytes(1_342_177_280, UnitFormat::Adaptive).to_string(),
            "1.25 GBytes"
        );
        assert_eq!(Bytes(1000, UnitFormat::Adaptive).to_string(), "1000 Bytes");
        assert_eq!(
            Bytes(125_000, UnitFormat::Bits(1)).to_string(),
            "1000 Kbits"
        );
        assert_eq!(
            Rate(9.41e9, UnitFormat::Adaptive).to_string(),
            "9.41 Gbits/sec"
        );
        assert_eq!(Rate(0.0, UnitFormat::Adaptive).to_string(), "0.00 bits/sec");
        assert_eq!(
            Rate(8e6, UnitFormat::Bytes(2)).to_string(),
            "0.95 MBytes/sec"
        );
        assert_eq!(
            Rate(123.4e6, UnitFormat::Bits(2)).to_string(),
            "123 Mbits/sec"
        );
    }

    #[test]
    fn format_letters() {
        assert_eq!(UnitFormat::parse("m"), Some(UnitFormat::Bits(2)));
        assert_eq!(UnitFormat::parse("G"), Some(UnitFormat::Bytes(3)));
        assert_eq!(UnitFormat::parse("a"), Some(UnitFormat::Adaptive));
        assert_eq!(UnitFormat::parse("x"), None);
        assert_eq!(UnitFormat::parse("mm"), None);
    }
}
