//! The human-readable tables and lines, one module per command, every one a function
//! from a result to the text printed (no I/O): a test's table and its diagnosis
//! ([`mod@test`], [`mod@diagnosis`]), `fetch`'s and the sweep's ([`mod@fetch`]),
//! `net`'s ([`mod@net`], [`mod@net_check`]), `monitor`'s ([`mod@monitor`]), `ping`'s ([`mod@ping`]), `rpm`'s ([`mod@rpm`]), `serve`'s log lines ([`mod@server`]), `run`'s ([`mod@study`]) and
//! `sysinfo`'s ([`mod@system`]). Each is re-exported here: `table::finish`,
//! `table::net_check`, ….

pub mod diagnosis;
pub mod fetch;
pub mod monitor;
pub mod net;
pub mod net_check;
pub mod ping;
pub mod rpm;
pub mod server;
pub mod study;
pub mod system;
pub mod test;

pub use diagnosis::diagnosis;
pub use fetch::{fetch, fragment_set, serving_fragments, sweep};
pub use monitor::{monitor_run, monitor_start, monitor_summary};
pub use net::{
    SetDirection, kept_bucket_note, net_down, net_plan, net_set, net_set_station, net_status,
    net_up, shape_text,
};
pub use net_check::net_check;
pub use ping::{ping_header, ping_histogram, ping_reply, ping_summary};
pub use rpm::{rpm_header, rpm_interval, rpm_summary};
pub use server::{server_event, server_events};
pub use study::{study_plan, study_summary, study_trial};
pub use system::system;
pub use test::{end, finish, interval, interval_header, quick_case, quick_heading, start, whole};

/// `n` of a thing, in the singular for one: "1 router", "2 routers", "0 switches".
pub(crate) fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `text` broken at spaces into lines of at most `width` characters (a longer word stands
/// alone), its first line indented as `text` is, every other by `indent` spaces; each
/// line ends with a newline.
pub(crate) fn wrap(text: &str, width: usize, indent: usize) -> String {
    let mut out = String::new();
    // The text's own indent starts its first line.
    let mut line: String = text.chars().take_while(|c| *c == ' ').collect();
    let mut words = 0;
    for word in text.split_whitespace() {
        if words > 0 && line.chars().count() + 1 + word.chars().count() > width {
            out += &line;
            out.push('\n');
            line = " ".repeat(indent);
            words = 0;
        }
        if words > 0 {
            line.push(' ');
        }
        line += word;
        words += 1;
    }
    out += &line;
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn wrapping_keeps_lines_within_the_width() {
        let text = "one two three four five six seven eight nine ten";
        let w = super::wrap(text, 16, 2);
        assert_eq!(
            w,
            "one two three\n  four five six\n  seven eight\n  nine ten\n"
        );
        assert!(w.lines().all(|l| l.chars().count() <= 16));
        assert_eq!(super::wrap("short", 16, 2), "short\n");
        assert_eq!(super::wrap("  in by two", 8, 4), "  in by\n    two\n");
        assert_eq!(
            super::wrap("a averyveryverylongword b", 8, 2),
            "a\n  averyveryverylongword\n  b\n"
        );
    }
}
