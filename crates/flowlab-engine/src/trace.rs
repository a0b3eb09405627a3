//! `--trace`: TCP_INFO samples taken by each stream's own thread.
//!
//! A separate sampling thread would wake every period on every end; on a busy host that
//! costs the streams throughput (docs/PERFORMANCE.md). Instead the thread that moves a
//! stream's data looks at the clock after every read or write, and, blocked, wakes at
//! least once per period (its socket timeout is lowered to the period), so samples fall
//! on the period's grid without any extra wake-up while data flows. The samples stay with
//! the thread that takes them, and go to the stream's counters once, when it stops.

use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::Duration;

use flowlab_proto::trace::TraceSample;

use crate::sock;
use crate::stream::{DataConfig, POLL, StreamCounters, TestControl};

/// Most samples kept per stream (1 ms for 10 minutes); later ones are dropped and the
/// trace is marked truncated.
pub const MAX_SAMPLES: usize = 600_000;

/// Shortest and longest period `--trace` accepts.
pub const MIN_PERIOD: Duration = Duration::from_millis(1);
pub const MAX_PERIOD: Duration = Duration::from_secs(1);

/// Takes a sample of one socket whenever one is due, and keeps them until it is dropped
/// (when its thread stops, however it stops), then hands them to the stream's counters.
#[derive(Debug)]
pub(crate) struct Tracer<'a> {
    period_us: u64,
    next_us: u64,
    samples: Vec<TraceSample>,
    counters: &'a StreamCounters,
}

impl<'a> Tracer<'a> {
    pub fn new(period: Duration, counters: &'a StreamCounters) -> Self {
        Tracer {
            period_us: (period.as_micros() as u64).max(1),
            next_us: 0,
            samples: Vec::new(),
            counters,
        }
    }

    /// A stream's tracer (when `--trace` is on) and the socket timeout its thread should
    /// use: the usual poll interval, shortened to the trace period so that a blocked
    /// thread still samples on time.
    pub fn for_stream(cfg: &DataConfig, counters: &'a StreamCounters) -> (Option<Self>, Duration) {
        let tracer = cfg.trace.map(|p| Tracer::new(p, counters));
        let poll = cfg.trace.map_or(POLL, |p| p.min(POLL));
        (tracer, poll)
    }

    /// Samples `sock` if the next period has begun.
    pub fn tick(&mut self, sock: &TcpStream, ctl: &TestControl) {
        let now = ctl.elapsed_us();
        if now >= self.next_us {
            self.take(sock, now);
            // The next slot on the grid; slots missed while blocked are not made up.
            self.next_us = (now / self.period_us + 1) * self.period_us;
        }
    }

    /// A last sample when the stream stops, so the trace covers the whole transfer.
    pub fn finish(&mut self, sock: &TcpStream, ctl: &TestControl) {
        self.take(sock, ctl.elapsed_us());
    }

    fn take(&mut self, sock: &TcpStream, now: u64) {
        let Some(sample) = sock::trace_sample(sock, now) else {
            return;
        };
        if self.samples.len() < MAX_SAMPLES {
            self.samples.push(sample);
        } else {
            self.counters.trace_truncated.store(true, Ordering::Relaxed);
        }
    }
}

impl Drop for Tracer<'_> {
    fn drop(&mut self) {
        if let Ok(mut t) = self.counters.trace.lock() {
            t.append(&mut self.samples);
        }
    }
}
