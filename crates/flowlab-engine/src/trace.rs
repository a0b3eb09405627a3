//! `--trace`: TCP_INFO samples taken by each stream's own thread.
//!
//! A separate sampling thread would wake every period on every end; on a busy host that
//! costs the streams throughput (docs/lab-notes/performance.md). Instead the thread that moves a
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
    /// Most samples kept ([`MAX_SAMPLES`]).
    limit: usize,
    counters: &'a StreamCounters,
}

impl<'a> Tracer<'a> {
    pub fn new(period: Duration, counters: &'a StreamCounters) -> Self {
        Tracer {
            period_us: (period.as_micros() as u64).max(1),
            next_us: 0,
            samples: Vec::new(),
            limit: MAX_SAMPLES,
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
        if self.samples.len() < self.limit {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::{Budget, TestControl};

    fn connected_pair() -> (TcpStream, TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let a = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (b, _) = l.accept().expect("accept");
        (a, b)
    }

    #[test]
    fn samples_reach_the_counters_when_the_tracer_goes_however_it_goes() {
        let (sock, _peer) = connected_pair();
        let ctl = TestControl::new(Budget::Unbounded);
        let c = StreamCounters::default();
        {
            let mut t = Tracer::new(Duration::from_millis(1), &c);
            t.tick(&sock, &ctl);
            t.finish(&sock, &ctl);
            // Held by the tracer, not yet in the counters.
            assert!(c.trace.lock().expect("lock").is_empty());
        }
        assert_eq!(c.trace.lock().expect("lock").len(), 2);
        assert!(!c.trace_truncated.load(Ordering::Relaxed));
    }

    #[test]
    fn samples_beyond_the_limit_are_dropped_and_the_trace_marked_truncated() {
        let (sock, _peer) = connected_pair();
        let c = StreamCounters::default();
        let mut t = Tracer::new(Duration::from_millis(1), &c);
        t.limit = 3;
        for at in 0..5 {
            t.take(&sock, at);
        }
        drop(t);
        let kept: Vec<u64> = c
            .trace
            .lock()
            .expect("lock")
            .iter()
            .map(|s| s.t_us)
            .collect();
        assert_eq!(kept, [0, 1, 2], "the first samples are kept");
        assert!(c.trace_truncated.load(Ordering::Relaxed));
    }
}
