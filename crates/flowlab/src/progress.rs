//! `flowlab fetch` progress on a terminal: one bar for the whole transfer, one line per
//! server (bytes, rate, fragments). Nothing is drawn when stderr is not a terminal.

use flowlab_fragments::fetch::Progress;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

#[derive(Debug)]
pub struct Bars {
    multi: MultiProgress,
    total: ProgressBar,
    /// Per server: its line and how many fragments it delivered.
    servers: std::sync::Mutex<Vec<(ProgressBar, u64)>>,
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
            servers: std::sync::Mutex::new(Vec::new()),
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
        if let Ok(mut v) = self.servers.lock() {
            for (b, _) in v.drain(..) {
                b.finish_and_clear();
                self.multi.remove(&b);
            }
            for s in servers {
                let b = self.multi.add(ProgressBar::new_spinner());
                b.set_style(style.clone());
                b.set_prefix(s.clone());
                b.set_message("0 fragments");
                v.push((b, 0));
            }
        }
    }

    fn bytes(&self, server: usize, n: u64) {
        self.total.inc(n);
        if let Some((b, _)) = self
            .servers
            .lock()
            .ok()
            .and_then(|v| v.get(server).cloned())
        {
            b.inc(n);
        }
    }

    fn fragment(&self, server: usize) {
        if let Ok(mut v) = self.servers.lock() {
            if let Some((b, n)) = v.get_mut(server) {
                *n += 1;
                b.set_message(format!("{n} fragments"));
            }
        }
    }

    fn failed(&self, server: usize, why: &str) {
        if let Some((b, _)) = self
            .servers
            .lock()
            .ok()
            .and_then(|v| v.get(server).cloned())
        {
            b.set_message(format!("FAILED: {why}"));
        }
    }

    fn finish(&self) {
        self.total.finish_and_clear();
        if let Ok(v) = self.servers.lock() {
            for (b, _) in v.iter() {
                b.finish_and_clear();
            }
        }
        let _ = self.multi.clear();
    }
}
