//! The server's one clock. A server makes one at start and passes it to every part that
//! reads the time: the database writer stamps each write request with it (`Txn::now`),
//! and fencing, liveness, tokens, listings and the background tasks read it, so that what
//! a request records and what the server decides around it come from one source, and a
//! test can hold that source still.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The time in unix milliseconds: the machine's wall clock, or (in tests) one set by hand.
#[derive(Clone, Debug)]
pub struct Clock {
    /// `None`: the wall clock; `Some`: a time a test sets.
    held: Option<Arc<AtomicI64>>,
}

impl Clock {
    /// The machine's wall clock.
    pub fn wall() -> Self {
        Self { held: None }
    }

    /// A clock that shows `ms` until [`Clock::set`] moves it (tests).
    #[cfg(test)]
    pub fn held_at(ms: i64) -> Self {
        Self {
            held: Some(Arc::new(AtomicI64::new(ms))),
        }
    }

    /// Moves a held clock, and every copy of it, to `ms`.
    #[cfg(test)]
    pub fn set(&self, ms: i64) {
        if let Some(held) = &self.held {
            held.store(ms, Ordering::Relaxed);
        }
    }

    /// The current time in unix milliseconds.
    pub fn now_ms(&self) -> i64 {
        match &self.held {
            Some(held) => held.load(Ordering::Relaxed),
            None => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64),
        }
    }
}
