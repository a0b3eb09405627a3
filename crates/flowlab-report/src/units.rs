//! Sizes, rates and their printing.
//!
//! Following iperf3's habits: sizes (`-l`, `-w`, `-n`) use binary suffixes (K = 1024),
//! rates (`-b`) decimal ones (K = 1000). Printed transfers are binary (KBytes = 1024
//! bytes), printed bit rates decimal (Kbits/sec = 1000 bits/s).

use std::fmt;

/// A size or rate that did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a number with an optional K, M, G or T suffix")]
pub struct BadQuantity(pub String);

fn split_suffix(text: &str) -> Result<(f64, u32), BadQuantity> {
    let t = text.trim();
    let (digits, power) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let p = match c.to_ascii_uppercase() {
                'K' => 1,
                'M' => 2,
                'G' => 3,
                'T' => 4,
                _ => return Err(BadQuantity(text.into())),
            };
            (&t[..i], p)
        }
        _ => (t, 0),
    };
    let v: f64 = digits.parse().map_err(|_| BadQuantity(text.into()))?;
    if !v.is_finite() || v < 0.0 {
        return Err(BadQuantity(text.into()));
    }
    Ok((v, power))
}

/// Parses a size in bytes: `128K` = 131072.
pub fn parse_size(text: &str) -> Result<u64, BadQuantity> {
    let (v, p) = split_suffix(text)?;
    let bytes = v * 1024f64.powi(p as i32);
    if bytes > u64::MAX as f64 {
        return Err(BadQuantity(text.into()));
    }
    Ok(bytes.round() as u64)
}

/// Parses a rate in bits per second: `10M` = 10 000 000.
pub fn parse_rate(text: &str) -> Result<u64, BadQuantity> {
    let (v, p) = split_suffix(text)?;
    let bits = v * 1000f64.powi(p as i32);
    if bits > u64::MAX as f64 {
        return Err(BadQuantity(text.into()));
    }
    Ok(bits.round() as u64)
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
    fn refuses_garbage() {
        for bad in ["", "K", "10X", "-5", "1e400", "nan", "ten", "5KK"] {
            assert!(parse_size(bad).is_err(), "{bad}");
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
