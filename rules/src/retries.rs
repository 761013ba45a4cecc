//! Exact retries: which answers the server keeps under a request's `Idempotency-Key`, when a
//! repeat of a key is the same request, and when a request is too old, or a claim request
//! older than its alloc's last release, to be carried out. Table-tested below; the server
//! loads the kept answer and the tombstone inside the request's write transaction and asks
//! these functions.
//!
//! Times are unix milliseconds. A request's send time is the client's clock (the
//! `X-Csivol-Sent-At` header, the same on every retry of one request); a release time, the
//! time a restore was found and `now` are the server's. The rules compare the two clocks directly: a client whose clock
//! runs behind the server's by S may see a claim sent within S after a release refused
//! (the refusal says by how much, and a claim sent again later is accepted); one whose clock
//! runs ahead by S is protected only from requests delayed by more than S. Keep the clocks
//! synchronised (NTP): the protection is as good as they are.

use std::fmt;
use std::time::{Duration, UNIX_EPOCH};

use csivol_api::ErrorCode;

/// Why a request is refused, with the next step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub message: String,
    pub hint: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Whether a refusal with `code` is kept as the answer to the request's key, like every
/// success. Kept: what the state decided (invalid, not found, conflict, blocked, outside
/// the topology, a failed action, unauthorised): a repeat would be decided the same way
/// only by chance, and a late duplicate must not be carried out after its client was told
/// no. Not kept: `unavailable` (nothing was decided: the write did not commit, or the
/// server could not serve; the repeat is the retry that should act) and `internal` (a
/// fault of the server's, not an answer to the request).
pub fn keeps(code: ErrorCode) -> bool {
    !matches!(code, ErrorCode::Unavailable | ErrorCode::Internal)
}

/// The request a key was first used for, as far as telling a repeat apart goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    /// Method, path and the query that changes what it does (`POST /v1/volumes/v/claims`).
    pub route: &'a str,
    /// A digest of its body.
    pub digest: &'a str,
}

/// Whether `now` repeats `first`, the request `key` was first used for: the same route and
/// body, else a refusal (422: no retry of this request can succeed).
pub fn same_request(key: &str, first: Request<'_>, now: Request<'_>) -> Result<(), Refusal> {
    if first == now {
        return Ok(());
    }
    let what = if first.route == now.route {
        format!("this request ({}) with another body", first.route)
    } else {
        format!("another request ({})", first.route)
    };
    Err(Refusal {
        message: format!(
            "Idempotency-Key `{key}` was first used for {what}: a key names one request, and \
             only a repeat of that request may carry it"
        ),
        hint: "send a new request with a new Idempotency-Key; repeat a request only exactly as \
               it was first sent"
            .to_owned(),
    })
}

/// A request sent at `sent_at` is too old when the server no longer remembers everything
/// that could have overtaken it: its keys and releases are kept for `memory` only.
pub fn too_old(sent_at: i64, now: i64, memory: Duration) -> Option<Refusal> {
    let memory_ms = i64::try_from(memory.as_millis()).unwrap_or(i64::MAX);
    if sent_at >= now.saturating_sub(memory_ms) {
        return None;
    }
    Some(Refusal {
        message: format!(
            "this request was sent at {} (by the client's clock), longer ago than this server \
             remembers requests and releases ({}): it is not carried out, because the server \
             can no longer tell whether it was answered before or overtaken by a release",
            time(sent_at),
            humantime::format_duration(memory)
        ),
        hint: "send it again if it is still wanted (a new request); if the client's clock is \
               wrong, correct it (NTP)"
            .to_owned(),
    })
}

/// A claim's release as its tombstone keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// Server time (unix ms).
    pub at: i64,
    /// The change index of the release.
    pub index: u64,
}

/// Whether a request for a new claim of `alloc` on `volume`, sent at `sent_at` (client
/// clock), comes after the alloc's last release: a request sent before it is refused, so
/// that a late or repeated request never brings back a claim its holder released. One sent
/// at or after it (a new job reusing the alloc's name) is accepted.
pub fn claim_after_release(
    volume: &str,
    alloc: &str,
    sent_at: i64,
    released: Released,
) -> Option<Refusal> {
    if sent_at >= released.at {
        return None;
    }
    let before = Duration::from_millis(released.at.saturating_sub(sent_at).unsigned_abs());
    Some(Refusal {
        message: format!(
            "alloc `{alloc}` of volume `{volume}` was released at {} (change index {}), after \
             this claim request was sent at {} by the client's clock: a claim request sent \
             before its alloc's release is not recorded again, so that a late or repeated \
             request brings back no claim that nobody holds",
            time(released.at),
            released.index,
            time(sent_at)
        ),
        hint: format!(
            "if this is a new job reusing the alloc's name, claim again: a claim sent after the \
             release is accepted; this one says it was sent {} before the release, so if the \
             client's clock runs behind the server's by that much, correct it (NTP)",
            humantime::format_duration(before)
        ),
    })
}

/// A new claim whose request was sent (by the client's clock) before the state went back
/// in time (`restored_at`, when the server found it restored: a backup restored, an etcd
/// snapshot restored): the restored state may have lost the alloc's release and the
/// request's kept answer with everything after the backup, so nothing the request could
/// be a late copy of can be told apart. Refused, whatever the restored state holds; a
/// request sent after it is judged as any other.
pub fn claim_before_restore(
    volume: &str,
    alloc: &str,
    sent_at: i64,
    restored_at: i64,
) -> Option<Refusal> {
    if sent_at >= restored_at {
        return None;
    }
    Some(Refusal {
        message: format!(
            "the state was restored from a backup (found at {}), after this claim request for \
             alloc `{alloc}` of volume `{volume}` was sent at {} by the client's clock: the \
             restored state cannot tell whether the alloc was released since, so a request \
             sent before the restore records no claim; nothing was recorded",
            time(restored_at),
            time(sent_at)
        ),
        hint: "claim again if the job still needs the volume: a claim sent after the restore \
               is judged on the restored state"
            .to_owned(),
    })
}

/// A unix-millisecond time as RFC 3339 (UTC).
fn time(ms: i64) -> String {
    let at = match u64::try_from(ms) {
        Ok(ms) => UNIX_EPOCH + Duration::from_millis(ms),
        Err(_) => UNIX_EPOCH,
    };
    humantime::format_rfc3339_millis(at).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);
    /// 2024-01-01T00:00:00Z.
    const T: i64 = 1_704_067_200_000;

    #[test]
    fn which_refusals_are_kept() {
        let cases = [
            (ErrorCode::Invalid, true),
            (ErrorCode::NotFound, true),
            (ErrorCode::Conflict, true),
            (ErrorCode::Blocked, true),
            (ErrorCode::Topology, true),
            (ErrorCode::Failed, true),
            (ErrorCode::Unauthorized, true),
            (ErrorCode::Unavailable, false),
            (ErrorCode::Internal, false),
        ];
        for (code, kept) in cases {
            assert_eq!(keeps(code), kept, "{code:?}");
        }
    }

    #[test]
    fn a_key_names_one_request() {
        let claim = Request {
            route: "POST /v1/volumes/v/claims",
            digest: "aa",
        };
        assert_eq!(same_request("k", claim, claim), Ok(()));
        let other_body = Request {
            digest: "bb",
            ..claim
        };
        let e = same_request("k", claim, other_body).unwrap_err();
        assert_eq!(
            e.message,
            "Idempotency-Key `k` was first used for this request (POST /v1/volumes/v/claims) \
             with another body: a key names one request, and only a repeat of that request may \
             carry it"
        );
        let other_route = Request {
            route: "DELETE /v1/volumes/v/claims/a",
            ..claim
        };
        let e = same_request("k", claim, other_route).unwrap_err();
        assert!(
            e.message
                .contains("first used for another request (POST /v1/volumes/v/claims)"),
            "{e}"
        );
        assert!(e.hint.contains("new Idempotency-Key"), "{}", e.hint);
    }

    #[test]
    fn a_request_older_than_the_memory_is_refused() {
        let now = T + DAY.as_millis() as i64;
        let cases = [
            (now, false),
            (now + 60_000, false), // a client clock ahead
            (T, false),            // exactly the memory
            (T - 1, true),
            (0, true),
        ];
        for (sent, refused) in cases {
            assert_eq!(too_old(sent, now, DAY).is_some(), refused, "sent at {sent}");
        }
        let e = too_old(T - 1, now, DAY).unwrap();
        assert!(e.message.contains("2023-12-31T23:59:59.999Z"), "{e}");
        assert!(e.message.contains("(1day)"), "{e}");
    }

    #[test]
    fn a_claim_sent_before_the_state_was_restored_is_refused() {
        let restored = T + 5_000;
        let cases = [
            (T, true),           // sent before the backup was restored, landed after
            (T + 4_999, true),   // just before
            (T + 5_000, false),  // at the restore
            (T + 60_000, false), // a claim sent to the restored state
        ];
        for (sent, refused) in cases {
            assert_eq!(
                claim_before_restore("v", "a", sent, restored).is_some(),
                refused,
                "sent at {sent}"
            );
        }
        let e = claim_before_restore("v", "a", T, restored).unwrap();
        assert!(e.message.contains("2024-01-01T00:00:05.000Z"), "{e}");
        assert!(e.message.contains("nothing was recorded"), "{e}");
        assert!(e.hint.contains("claim again"), "{}", e.hint);
    }

    #[test]
    fn a_claim_sent_before_its_release_is_refused_and_one_sent_after_accepted() {
        let released = Released {
            at: T + 5_000,
            index: 42,
        };
        let cases = [
            (T, true),            // sent 5 s before the release, landed after
            (T + 4_999, true),    // just before
            (T + 5_000, false),   // at the release
            (T + 60_000, false),  // a new job reusing the alloc
            (i64::MIN / 2, true), // nonsense is still before
        ];
        for (sent, refused) in cases {
            assert_eq!(
                claim_after_release("v", "a", sent, released).is_some(),
                refused,
                "sent at {sent}"
            );
        }
        let e = claim_after_release("v", "a", T, released).unwrap();
        assert_eq!(
            e.message,
            "alloc `a` of volume `v` was released at 2024-01-01T00:00:05.000Z (change index 42), \
             after this claim request was sent at 2024-01-01T00:00:00.000Z by the client's clock: \
             a claim request sent before its alloc's release is not recorded again, so that a \
             late or repeated request brings back no claim that nobody holds"
        );
        assert!(e.hint.contains("sent 5s before the release"), "{}", e.hint);
        assert!(e.hint.contains("claim again"), "{}", e.hint);
    }
}
