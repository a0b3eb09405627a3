//! How a link direction is shaped with `tc`: tbf for rate and queue, netem (or the
//! user-space emulator) for delay, jitter and loss.

use flowlab_results::net::Shape;

/// Bytes a queued packet is counted as when a queue is given in packets.
pub const PACKET_BYTES: u64 = 1514;

/// tbf's bucket holds 1/this of a second at the link's rate (10 ms; see [`shaping`]).
const TBF_BUCKET_PER_SECOND: u64 = 100;
/// Queue limit of a rate-limited link that gives none, packets.
pub const DEFAULT_QUEUE: u64 = 1000;

/// Whether a direction needs more than tbf.
pub(super) fn needs_emulation(s: &Shape) -> bool {
    !s.delay.is_zero() || !s.jitter.is_zero() || s.loss > 0.0
}

/// The `tc` arguments that shape one direction of a link on interface `dev`: `tbf` for
/// rate and queue; with `netem_root`, netem for delay, jitter and loss at the root (even
/// of none yet, for a schedule that gives some later) and tbf as its child. Without it,
/// delay, jitter and loss are left to the user-space emulator.
pub fn shaping(dev: &str, s: &Shape, netem_root: bool) -> Vec<Vec<String>> {
    if netem_root {
        let mut cmds = vec![netem_qdisc(dev, s)];
        cmds.extend(tbf(dev, &NETEM_CHILD, s, None));
        cmds
    } else {
        tbf(dev, &["root"], s, None).into_iter().collect()
    }
}

/// The bucket tbf gets at `rate_bps`, bytes: 10 ms at the rate, at least two full
/// packets. Burst: tbf sends only when the kernel runs it, and tokens beyond the bucket
/// are lost, so a bucket shorter than the longest time the host leaves it unserved loses
/// rate and stretches the queue's delay beyond limit/rate. A 1 ms bucket lost up to 0.7 %
/// of the rate on a VM whose timers were 1–6 ms late (15 ms at times) at 0.3 % CPU steal,
/// and 1–7 % while 2–12 % was stolen (docs/net.md); tc-tbf(8)'s rule, rate/HZ, at the
/// coarsest tick (100 Hz) is 10 ms.
pub(super) fn bucket(rate_bps: u64) -> u64 {
    (rate_bps / 8 / TBF_BUCKET_PER_SECOND).max(2 * PACKET_BYTES)
}

/// Where tbf sits under netem.
pub(super) const NETEM_CHILD: [&str; 4] = ["parent", "1:", "handle", "2:"];

/// `qdisc add dev DEV PARENT… tbf …` for the rate and queue of `s`, if it has a rate,
/// with its [`bucket`] or `burst` bytes.
pub(super) fn tbf(
    dev: &str,
    parent: &[&str],
    s: &Shape,
    burst: Option<u64>,
) -> Option<Vec<String>> {
    let rate = s.rate_bps?;
    let burst = burst.unwrap_or(bucket(rate));
    let mut v = words(&["qdisc", "add", "dev", dev]);
    v.extend(words(parent));
    v.extend([
        "tbf".to_string(),
        "rate".into(),
        format!("{rate}bit"),
        "burst".into(),
        burst.to_string(),
        "limit".into(),
        crate::topology::queue_limit_bytes(s).to_string(),
    ]);
    Some(v)
}

/// `qdisc add dev DEV root handle 1: netem …` for the delay, jitter and loss of `s`.
pub(super) fn netem_qdisc(dev: &str, s: &Shape) -> Vec<String> {
    let mut v = words(&["qdisc", "add", "dev", dev, "root", "handle", "1:", "netem"]);
    v.extend([
        "delay".into(),
        format!("{}us", s.delay.as_micros()),
        format!("{}us", s.jitter.as_micros()),
    ]);
    if s.loss > 0.0 {
        v.extend(["loss".into(), format!("{}%", s.loss * 100.0)]);
    }
    // netem's limit counts the packets on its delay line: as many as the user-space
    // emulator's line holds.
    v.extend(["limit".into(), crate::emulator::line_limit(s).to_string()]);
    v
}

/// The same `tc` command changing the qdisc in place (`qdisc change …`): its queue and
/// what it holds stay.
pub(super) fn in_place(mut cmd: Vec<String>) -> Vec<String> {
    cmd[1] = "change".into();
    cmd
}

fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|x| x.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tbf_alone_when_only_rate_and_queue_are_asked() {
        let s = Shape {
            rate_bps: Some(40_000_000),
            queue_packets: Some(67),
            ..Shape::default()
        };
        let cmds = shaping("l3", &s, false);
        assert_eq!(cmds.len(), 1);
        assert_eq!(
            cmds[0].join(" "),
            "qdisc add dev l3 root tbf rate 40000000bit burst 50000 limit 101438"
        );
        assert!(shaping("l3", &Shape::default(), false).is_empty());
        // A netem root asked for (a schedule gives the direction delay later) holds one
        // even with nothing to emulate yet.
        let cmds = shaping("l3", &s, true);
        assert!(
            cmds[0]
                .join(" ")
                .contains("root handle 1: netem delay 0us 0us"),
            "{cmds:?}"
        );
    }

    #[test]
    fn delay_goes_to_netem_or_is_left_to_the_emulator() {
        let s = Shape {
            rate_bps: Some(30_000_000),
            delay: std::time::Duration::from_millis(20),
            queue_packets: Some(100),
            ..Shape::default()
        };
        // User-space backend: tbf alone here; the emulator delays.
        let cmds = shaping("l1", &s, false);
        assert_eq!(cmds.len(), 1);
        assert!(
            cmds[0]
                .join(" ")
                .starts_with("qdisc add dev l1 root tbf rate 30000000bit")
        );
        // netem backend: netem at the root with the same line limit, tbf as its child.
        let cmds = shaping("l1", &s, true);
        assert_eq!(
            cmds[0].join(" "),
            format!(
                "qdisc add dev l1 root handle 1: netem delay 20000us 0us limit {}",
                crate::emulator::line_limit(&s)
            )
        );
        assert!(
            cmds[1]
                .join(" ")
                .starts_with("qdisc add dev l1 parent 1: handle 2: tbf rate 30000000bit")
        );
    }
}
