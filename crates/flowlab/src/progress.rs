//! `flowlab fetch` progress on a terminal: one bar for the whole transfer, one line per
//! server (bytes, rate, fragments). Nothing is drawn when stderr is not a terminal. Every
//! line fits a terminal of 60 columns or more (the bar takes what the numbers leave, a
//! long server name or message is cut), and the numbers are in the units of flowlab's tables: transfers in
//! binary Bytes, rates in decimal bits/sec. No colour.

use flowlab_fragments::fetch::Progress;
use flowlab_report::units::{Bytes, Rate, UnitFormat};
use std::sync::{Mutex, RwLock};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

/// `{done}`, `{size}` and `{rate}` in a template: as flowlab's tables print them.
fn flowlab_units(style: ProgressStyle) -> ProgressStyle {
    style
        .with_key("done", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(w, "{}", Bytes(s.pos(), UnitFormat::Adaptive));
        })
        .with_key("size", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(w, "{}", Bytes(s.len().unwrap_or(0), UnitFormat::Adaptive));
        })
        .with_key("rate", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(w, "{}", Rate(s.per_sec() * 8.0, UnitFormat::Adaptive));
        })
}

#[derive(Debug)]
pub struct Bars {
    multi: MultiProgress,
    total: ProgressBar,
    /// Per server: its line and how many fragments it delivered. Written once per fetch
    /// (`start`); read for every chunk received, by every connection at once, hence a
    /// read-write lock: readers do not wait for each other.
    servers: RwLock<Vec<(ProgressBar, Mutex<u64>)>>,
}

impl Bars {
    /// Bars on stderr.
    pub fn new() -> Bars {
        Bars::on(ProgressDrawTarget::stderr())
    }

    fn on(target: ProgressDrawTarget) -> Bars {
        let multi = MultiProgress::with_draw_target(target);
        let total = multi.add(ProgressBar::new(0));
        total.set_style(flowlab_units(
            ProgressStyle::with_template(
                "[{wide_bar}] {done:>11} of {size:<11} {rate:>14} eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        ));
        Bars {
            multi,
            total,
            servers: RwLock::new(Vec::new()),
        }
    }
}

/// A server's name in at most 24 columns: a longer one keeps its end (the port and the
/// address's last groups), after an ellipsis.
fn short_name(name: &str) -> String {
    let n = name.chars().count();
    if n <= 24 {
        return name.to_string();
    }
    std::iter::once('…')
        .chain(name.chars().skip(n - 23))
        .collect()
}

fn fragments(n: u64) -> String {
    format!("{n} fragment{}", if n == 1 { "" } else { "s" })
}

impl Progress for Bars {
    /// Called once per fetch; a sweep runs many with the same bars, so each start
    /// replaces the previous run's lines.
    fn start(&self, servers: &[String], _fragments: usize, bytes: u64) {
        self.total.reset();
        self.total.set_length(bytes);
        let style = flowlab_units(
            ProgressStyle::with_template("{prefix:<24} {done:>11} {rate:>14}  {wide_msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        if let Ok(mut v) = self.servers.write() {
            for (b, _) in v.drain(..) {
                b.finish_and_clear();
                self.multi.remove(&b);
            }
            for s in servers {
                let b = self.multi.add(ProgressBar::new_spinner());
                b.set_style(style.clone());
                b.set_prefix(short_name(s));
                b.set_message(fragments(0));
                v.push((b, Mutex::new(0)));
            }
        }
    }

    fn bytes(&self, server: usize, n: u64) {
        self.total.inc(n);
        if let Ok(v) = self.servers.read() {
            if let Some((b, _)) = v.get(server) {
                b.inc(n);
            }
        }
    }

    fn fragment(&self, server: usize) {
        if let Ok(v) = self.servers.read() {
            // Counted and shown under the server's own lock, so that two of its
            // connections cannot leave the lower count on screen.
            if let Some((b, Ok(mut n))) = v.get(server).map(|(b, n)| (b, n.lock())) {
                *n += 1;
                b.set_message(fragments(*n));
            }
        }
    }

    fn failed(&self, server: usize, why: &str) {
        if let Ok(v) = self.servers.read() {
            if let Some((b, _)) = v.get(server) {
                b.set_message(format!("FAILED: {why}"));
            }
        }
    }

    fn finish(&self) {
        self.total.finish_and_clear();
        if let Ok(v) = self.servers.read() {
            for (b, _) in v.iter() {
                b.finish_and_clear();
            }
        }
        let _ = self.multi.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_connection_counts_into_its_servers_line_and_the_total() {
        let bars = Bars::new();
        bars.start(&["a:5201".into(), "b:5201".into()], 8, 8 << 20);
        std::thread::scope(|s| {
            for server in [0, 0, 1, 1] {
                let bars = &bars;
                s.spawn(move || {
                    for _ in 0..1000 {
                        bars.bytes(server, 1024);
                    }
                    bars.fragment(server);
                });
            }
        });
        {
            let v = bars.servers.read().expect("lock");
            for (b, n) in v.iter() {
                assert_eq!(b.position(), 2 * 1000 * 1024);
                assert_eq!(*n.lock().expect("lock"), 2);
                assert_eq!(b.message(), "2 fragments");
            }
        }
        bars.failed(1, "stalled");
        let v = bars.servers.read().expect("lock");
        assert_eq!(v[1].0.message(), "FAILED: stalled");
        assert_eq!(bars.total.position(), 4 * 1000 * 1024);
        drop(v);
        // A second run (a sweep) replaces the lines.
        bars.start(&["c:5201".into()], 1, 1);
        assert_eq!(bars.servers.read().expect("lock").len(), 1);
        bars.finish();
    }

    /// On a terminal of 80 columns (and of 60) every line fits, however long a server's
    /// name or a failure's message, and the units are flowlab's (MBytes, Mbits/sec), not
    /// indicatif's own (MiB, MiB/s).
    #[test]
    fn every_line_fits_the_terminal_in_flowlab_s_units() {
        for cols in [80u16, 60] {
            let term = indicatif::InMemoryTerm::new(10, cols);
            let bars = Bars::on(ProgressDrawTarget::term_like(Box::new(term.clone())));
            let long = "[2001:db8:ffff:ffff:ffff:ffff:ffff:1]:5201".to_string();
            bars.start(&[long, "b.example:5201".into()], 4, 400 << 20);
            bars.bytes(0, 150 << 20);
            bars.bytes(1, 50 << 20);
            bars.fragment(0);
            bars.failed(1, &"the server stopped answering ".repeat(5));
            bars.total.tick();
            let screen = term.contents();
            let lines: Vec<&str> = screen.lines().filter(|l| !l.trim().is_empty()).collect();
            assert_eq!(lines.len(), 3, "{screen}");
            for l in &lines {
                assert!(l.chars().count() <= cols as usize, "{cols}: {l}");
            }
            assert!(lines[0].contains("200 MBytes of 400 MBytes"), "{screen}");
            assert!(lines[0].contains("bits/sec"), "{screen}");
            assert!(
                lines[1].starts_with("…:ffff:ffff:ffff:1]:5201 "),
                "{screen}"
            );
            assert!(lines[1].contains("150 MBytes"), "{screen}");
            // The message takes what is left of the line.
            if cols == 80 {
                assert!(lines[1].ends_with(" 1 fragment"), "{screen}");
                assert!(lines[2].contains("FAILED: the server"), "{screen}");
            }
            assert!(!screen.contains("MiB"), "{screen}");
        }
    }
}
