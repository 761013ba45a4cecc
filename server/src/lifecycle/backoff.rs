//! How long a failed plugin call waits before it is tried again: the controller
//! operations' retries and the node expansions' alike.

use std::time::Duration;

/// Exponential backoff with jitter: 1 s doubling to 5 min, ±20 %.
pub fn backoff(attempt: u32) -> Duration {
    use rand::Rng;
    let base = Duration::from_secs(1)
        .saturating_mul(1u32 << attempt.min(9))
        .min(Duration::from_secs(300));
    base.mul_f64(rand::rng().random_range(0.8..1.2))
}
