//! Smooth pacing to a target bit rate (sans-clock: callers pass the elapsed time).
//!
//! The pacer keeps the long-run rate exact by scheduling byte `n` at `n × 8 / rate`
//! seconds after the start, and never lets a sender "catch up" by more than
//! [`MAX_BURST`] of lost time, so a stall is not followed by a burst.

use std::time::Duration;

/// Longest backlog a sender may send at once after falling behind.
pub const MAX_BURST: Duration = Duration::from_millis(5);

/// Schedules bytes at a fixed rate.
#[derive(Debug, Clone)]
pub struct Pacer {
    bytes_per_sec: f64,
    /// Bytes already scheduled.
    scheduled: f64,
    /// Start of the schedule, shifted forward when the sender fell far behind.
    origin: Duration,
}

impl Pacer {
    /// A pacer for `bits_per_sec` (> 0) starting at elapsed time `now`.
    pub fn new(bits_per_sec: u64, now: Duration) -> Self {
        Pacer {
            bytes_per_sec: bits_per_sec as f64 / 8.0,
            scheduled: 0.0,
            origin: now,
        }
    }

    /// How long to wait at `now` before `bytes` more may be sent; `Duration::ZERO` means
    /// send now. Call [`Pacer::sent`] after sending.
    pub fn wait(&mut self, now: Duration) -> Duration {
        let due = self.origin + Duration::from_secs_f64(self.scheduled / self.bytes_per_sec);
        if due > now {
            return due - now;
        }
        if now - due > MAX_BURST {
            // Forget the time lost beyond the burst allowance.
            self.origin += (now - due) - MAX_BURST;
        }
        Duration::ZERO
    }

    /// How many bytes are due at `now` (for batching datagrams).
    pub fn due_bytes(&self, now: Duration) -> f64 {
        let elapsed = now.saturating_sub(self.origin).as_secs_f64();
        elapsed * self.bytes_per_sec - self.scheduled
    }

    /// Records that `bytes` were sent.
    pub fn sent(&mut self, bytes: usize) {
        self.scheduled += bytes as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn keeps_the_rate() {
        // 8 Mbit/s = 1000 bytes per ms.
        let mut p = Pacer::new(8_000_000, Duration::ZERO);
        assert_eq!(p.wait(Duration::ZERO), Duration::ZERO);
        p.sent(1000);
        assert_eq!(p.wait(Duration::ZERO), MS);
        assert_eq!(p.wait(MS), Duration::ZERO);
        p.sent(2000);
        assert_eq!(p.wait(MS), 2 * MS);
    }

    #[test]
    fn no_burst_after_a_stall() {
        let mut p = Pacer::new(8_000_000, Duration::ZERO);
        p.sent(1000);
        // The sender stalls for 100 ms: only MAX_BURST worth may go at once.
        let now = 100 * MS;
        assert_eq!(p.wait(now), Duration::ZERO);
        let due = p.due_bytes(now);
        assert!((due - 5000.0).abs() < 1.0, "{due}");
    }
}
