//! Sizes and rates as flowlab prints them.
//!
//! Printed transfers are binary (KBytes = 1024 bytes), printed bit rates decimal
//! (Kbits/sec = 1000 bits/s), in the unit `-f` asks for; advice uses the same, and a
//! size to give a flag as the user types it ([`size_arg`]). Reading them is the model's
//! ([`flowlab_results::units`]).

use std::fmt;

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

/// Three significant digits, as iperf3 prints them: "9.41", "94.1", "941"; with `{:#}`,
/// padded to four places as iperf3's columns are (" 941").
fn write_scaled(f: &mut fmt::Formatter<'_>, scaled: f64, power: usize, unit: &str) -> fmt::Result {
    let prec = if scaled < 9.995 {
        2
    } else if scaled < 99.95 {
        1
    } else {
        0
    };
    let width = if f.alternate() { 4 } else { 0 };
    write!(f, "{scaled:width$.prec$} {}", unit_name(power, unit))
}

/// `v` in the largest unit of `base`'s powers that keeps it at 1 or more, and that power;
/// a value that would print as a whole `base` of one unit ("1000 Mbits/sec", rounded up
/// from 999.6) is said in the next ("1.00 Gbits/sec"), so two lines of one table never
/// name one rate two ways.
fn adaptive(v: f64, base: f64) -> (f64, usize) {
    let p = (0..5).rev().find(|&p| v >= base.powi(p)).unwrap_or(0);
    let scaled = v / base.powi(p);
    if p < 4 && scaled >= base - 0.5 {
        (scaled / base, p as usize + 1)
    } else {
        (scaled, p as usize)
    }
}

/// A byte count, printed as iperf3 prints a transfer ("1.25 GBytes").
#[derive(Debug, Clone, Copy)]
pub struct Bytes(pub u64, pub UnitFormat);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0 as f64;
        let (scaled, p, bits) = match self.1 {
            UnitFormat::Adaptive => {
                let (scaled, p) = adaptive(v, 1024.0);
                (scaled, p, false)
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
                let (scaled, p) = adaptive(v, 1000.0);
                (scaled, p, "bits/sec")
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

/// A round-trip time in the unit that shows it: microseconds below a millisecond ("18
/// µs", where "0.018 ms" hides the figure), else milliseconds to three significant
/// digits ("4.25 ms", "80.2 ms").
pub fn rtt(us: u64) -> String {
    match us {
        0..1000 => format!("{us} µs"),
        1000..10_000 => format!("{:.2} ms", us as f64 / 1000.0),
        _ => format!("{:.1} ms", us as f64 / 1000.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// A value that would round to a whole next unit is said in it: never "1000
    /// Mbits/sec" beside "1.00 Gbits/sec" (issue 46).
    #[test]
    fn a_rounded_value_is_said_in_the_next_unit() {
        assert_eq!(
            Rate(999.6e6, UnitFormat::Adaptive).to_string(),
            "1.00 Gbits/sec"
        );
        assert_eq!(
            Rate(999.4e6, UnitFormat::Adaptive).to_string(),
            "999 Mbits/sec"
        );
        assert_eq!(
            Rate(1e9, UnitFormat::Adaptive).to_string(),
            "1.00 Gbits/sec"
        );
        assert_eq!(
            Bytes(1024 * 1024 - 1, UnitFormat::Adaptive).to_string(),
            "1.00 MBytes"
        );
        assert_eq!(
            Bytes(1000 * 1024, UnitFormat::Adaptive).to_string(),
            "1000 KBytes"
        );
        // A fixed unit keeps its number, whatever it rounds to.
        assert_eq!(
            Rate(999.6e6, UnitFormat::Bits(2)).to_string(),
            "1000 Mbits/sec"
        );
    }

    #[test]
    fn round_trips_in_the_unit_that_shows_them() {
        assert_eq!(rtt(4), "4 µs");
        assert_eq!(rtt(999), "999 µs");
        assert_eq!(rtt(4_250), "4.25 ms");
        assert_eq!(rtt(80_240), "80.2 ms");
    }

    #[test]
    fn format_letters() {
        assert_eq!(UnitFormat::parse("m"), Some(UnitFormat::Bits(2)));
        assert_eq!(UnitFormat::parse("G"), Some(UnitFormat::Bytes(3)));
        assert_eq!(UnitFormat::parse("a"), Some(UnitFormat::Adaptive));
        assert_eq!(UnitFormat::parse("x"), None);
        assert_eq!(UnitFormat::parse("mm"), None);
    }

    #[test]
    fn every_one_letter_text_is_a_unit_format_or_refused() {
        for c in (0..0x11000).filter_map(char::from_u32) {
            let parsed = c.to_string().parse::<UnitFormat>();
            match c {
                'a' | 'A' => assert_eq!(parsed, Ok(UnitFormat::Adaptive)),
                'k' | 'm' | 'g' | 't' => assert!(matches!(parsed, Ok(UnitFormat::Bits(_)))),
                'K' | 'M' | 'G' | 'T' => assert!(matches!(parsed, Ok(UnitFormat::Bytes(_)))),
                _ => assert!(parsed.is_err(), "{c:?}"),
            }
        }
    }
}
