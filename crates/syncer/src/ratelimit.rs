//! A token bucket bounding the request rate of a client (kube-rs has none of its own).

use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

/// At most `qps` requests per second on average, bursts of up to `burst`.
#[derive(Debug)]
pub struct RateLimiter {
    interval: Duration,
    burst: u32,
    next: Mutex<Instant>,
}

impl RateLimiter {
    /// A limiter of `qps` per second with bursts of `burst`; `qps <= 0` means unlimited.
    pub fn new(qps: f64, burst: u32) -> Self {
        let interval = if qps > 0.0 {
            Duration::from_secs_f64(1.0 / qps)
        } else {
            Duration::ZERO
        };
        let burst = burst.max(1);
        let now = Instant::now();
        RateLimiter {
            interval,
            burst,
            next: Mutex::new(now.checked_sub(interval * (burst - 1)).unwrap_or(now)),
        }
    }

    /// Waits for a token.
    pub async fn acquire(&self) {
        if self.interval.is_zero() {
            return;
        }
        let slot = {
            let mut next = self.next.lock().await;
            let now = Instant::now();
            // Unused capacity accumulates up to `burst` tokens.
            let earliest = now
                .checked_sub(self.interval * (self.burst - 1))
                .unwrap_or(now);
            let slot = (*next).max(earliest);
            *next = slot + self.interval;
            slot
        };
        tokio::time::sleep_until(slot).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn bursts_then_paces() {
        let limiter = RateLimiter::new(10.0, 5);
        let start = Instant::now();
        for _ in 0..5 {
            limiter.acquire().await;
        }
        assert!(start.elapsed() < Duration::from_millis(10));
        for _ in 0..10 {
            limiter.acquire().await;
        }
        let elapsed = start.elapsed();
        assert!(elapsed >= Duration::from_millis(900), "{elapsed:?}");
        assert!(elapsed <= Duration::from_millis(1100), "{elapsed:?}");
    }
}
