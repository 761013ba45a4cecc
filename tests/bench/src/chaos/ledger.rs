//! What the load, the faults and the drain share about the claims: the cycles under way
//! (a claim a restore brings back whose cycle is over is nobody's, and the restore's
//! operator releases it), the claim requests whose cycle saw them released (for the
//! delayed duplicates), and the restores done (a cycle that sees its claim forgotten, or
//! back after its release, knows a restore may be why; the drain, which publications a
//! restore forgot).

use std::collections::{BTreeSet, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use csivol_api::ClaimRequest;
use csivol_client::once::Once;
use rand::Rng;

/// How many released claim requests are kept for the delayed duplicates to pick from:
/// enough that a duplicate may be of a request sent a while ago, across other faults.
const RELEASED_KEPT: usize = 256;

/// A claim request as its cycle sent it, and saw it released.
#[derive(Debug, Clone)]
pub struct SentClaim {
    pub volume: String,
    pub alloc: String,
    pub body: ClaimRequest,
    /// Its `Idempotency-Key` and first send time, as every attempt carried them.
    pub once: Once,
}

#[derive(Debug, Default)]
pub struct Ledger {
    /// (volume, alloc) of every cycle under way, from its first claim attempt to its end.
    in_flight: Mutex<BTreeSet<(String, String)>>,
    released: Mutex<VecDeque<SentClaim>>,
    restores: AtomicU64,
    /// Each restore's window, by the wall clock (unix ms): from its backup's request to
    /// its servers' answering again.
    windows: Mutex<Vec<(u64, u64)>>,
}

/// A cycle under way; it ends when this is dropped.
#[derive(Debug)]
pub struct InFlight<'a> {
    ledger: &'a Ledger,
    key: (String, String),
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.ledger
            .in_flight
            .lock()
            .expect("in-flight lock")
            .remove(&self.key);
    }
}

impl Ledger {
    /// A cycle of `alloc` on `volume` begins.
    pub fn begin(&self, volume: &str, alloc: &str) -> InFlight<'_> {
        let key = (volume.to_owned(), alloc.to_owned());
        self.in_flight
            .lock()
            .expect("in-flight lock")
            .insert(key.clone());
        InFlight { ledger: self, key }
    }

    /// Whether the cycle of `alloc` on `volume` is under way.
    pub fn in_flight(&self, volume: &str, alloc: &str) -> bool {
        self.in_flight
            .lock()
            .expect("in-flight lock")
            .contains(&(volume.to_owned(), alloc.to_owned()))
    }

    /// A cycle saw its claim released.
    pub fn released(&self, sent: SentClaim) {
        let mut r = self.released.lock().expect("released lock");
        if r.len() == RELEASED_KEPT {
            r.pop_front();
        }
        r.push_back(sent);
    }

    /// A claim request seen released, picked at random.
    pub fn pick_released(&self, rng: &mut impl Rng) -> Option<SentClaim> {
        let r = self.released.lock().expect("released lock");
        if r.is_empty() {
            return None;
        }
        r.get(rng.random_range(0..r.len())).cloned()
    }

    /// Restores done so far (counted once the servers answer again).
    pub fn restores(&self) -> u64 {
        self.restores.load(Ordering::SeqCst)
    }

    /// A restore's servers have all stopped: nothing serves the old state any more.
    pub fn restored(&self) {
        self.restores.fetch_add(1, Ordering::SeqCst);
    }

    /// A restore is done: its backup was asked for at `backup_ms`, and its servers answer
    /// again now (unix ms).
    pub fn restore_window(&self, backup_ms: u64, done_ms: u64) {
        self.windows
            .lock()
            .expect("windows lock")
            .push((backup_ms, done_ms));
    }

    /// Whether `at_ms` (unix ms) falls between a restore's backup and its end: what was
    /// done then is what that restore forgot.
    pub fn forgotten_by_a_restore(&self, at_ms: u64) -> bool {
        self.windows
            .lock()
            .expect("windows lock")
            .iter()
            .any(|(from, to)| *from <= at_ms && at_ms <= *to)
    }
}

/// The wall clock in unix milliseconds, as files' times are compared with it.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
