//! `--trace`: TCP_INFO samples taken by each stream's own thread.
//!
//! A separate sampling thread would wake every period on every end; on a busy host that
//! costs the streams throughput (docs/PERFORMANCE.md). Instead the thread that moves a
//! stream's data looks at the clock after every read or write, and, blocked, wakes at
//! least once per period (its socket timeout is lowered to the period), so samples fall
//! on the period's grid without any extra wake-up while data flows.

use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::sock;
use crate::stream::{DataConfig, POLL, StreamCounters, TestControl};

/// Most samples kept per stream (1 ms for 10 minutes); later ones are dropped and the
/// trace is marked truncated.
pub const MAX_SAMPLES: usize = 600_000;

/// Shortest and longest period `--trace` accepts.
pub const MIN_PERIOD: Duration = Duration::from_millis(1);
pub const MAX_PERIOD: Duration = Duration::from_secs(1);

/// Takes a sample of one socket whenever one is due.
#[derive(Debug)]
pub(crate) struct Tracer {
    period_us: u64,
    next_us: u64,
}

impl Tracer {
    pub fn new(period: Duration) -> Self {
        Tracer {
            period_us: (period.as_micros() as u64).max(1),
            next_us: 0,
        }
    }

    /// A stream's tracer (when `--trace` is on) and the socket timeout its thread should
    /// use: the usual poll interval, shortened to the trace period so that a blocked
    /// thread still samples on time.
    pub fn for_stream(cfg: &DataConfig) -> (Option<Tracer>, Duration) {
        let tracer = cfg.trace.map(Tracer::new);
        let poll = cfg.trace.map_or(POLL, |p| p.min(POLL));
        (tracer, poll)
    }

    /// Samples `sock` if the next period has begun.
    pub fn tick(&mut self, sock: &TcpStream, ctl: &TestControl, c: &StreamCounters) {
        let now = ctl.elapsed_us();
        if now >= self.next_us {
            self.take(sock, now, c);
            // The next slot on the grid; slots missed while blocked are not made up.
            self.next_us = (now / self.period_us + 1) * self.period_us;
        }
    }

    /// A last sample when the stream stops, so the trace covers the whole transfer.
    pub fn finish(&mut self, sock: &TcpStream, ctl: &TestControl, c: &StreamCounters) {
        self.take(sock, ctl.elapsed_us(), c);
    }

    fn take(&self, sock: &TcpStream, now: u64, c: &StreamCounters) {
        let Some(sample) = sock::trace_sample(sock, now) else {
            return;
        };
        if let Ok(mut t) = c.trace.lock() {
            if t.len() < MAX_SAMPLES {
                t.push(sample);
            } else {
                c.trace_truncated.store(true, Ordering::Relaxed);
            }
        }
    }
}
