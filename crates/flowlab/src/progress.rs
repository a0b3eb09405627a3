//! `flowlab fetch` progress on a terminal: one bar for the whole transfer, one line per
//! server (bytes, rate, fragments). Nothing is drawn when stderr is not a terminal.

use flowlab_fragments::fetch::Progress;
use std::sync::{Mutex, RwLock};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

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
    pub fn new() -> Bars {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
        let total = multi.add(ProgressBar::new(0));
        total.set_style(
            ProgressStyle::with_template(
                "{prefix:<22} [{bar:30}] {bytes:>10}/{total_bytes:<10} {bytes_per_sec:>12}  eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        total.set_prefix("total");
        Bars {
            multi,
            total,
            servers: RwLock::new(Vec::new()),
        }
    }
}

impl Progress for Bars {
    /// Called once per fetch; a sweep runs many with the same bars, so each start
    /// replaces the previous run's lines.
    fn start(&self, servers: &[String], _fragments: usize, bytes: u64) {
        self.total.reset();
        self.total.set_length(bytes);
        let style =
            ProgressStyle::with_template("{prefix:<22} {bytes:>10} {bytes_per_sec:>12}  {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner());
        if let Ok(mut v) = self.servers.write() {
            for (b, _) in v.drain(..) {
                b.finish_and_clear();
                self.multi.remove(&b);
            }
            for s in servers {
                let b = self.multi.add(ProgressBar::new_spinner());
                b.set_style(style.clone());
                b.set_prefix(s.clone());
                b.set_message("0 fragments");
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
                b.set_message(format!("{n} fragments"));
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
}
