//! The end checks of the campaign's jobs, after the drain: no per-job volume left in
//! csivol's list or in the plugin's storage, every acknowledged claim a job found gone
//! before its release explained by the event log, and no DeleteVolume asked for while its
//! volume was blocked.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant, UNIX_EPOCH};

use csivol_api as api;

use super::jobs::{JobsReport, Vanished, is_job_volume, storage_volumes};
use super::ledger::Ledger;
use crate::client::Http;

/// After the drain: waits until no per-job volume is left in csivol's list and the
/// plugin's storage holds only `before` (the campaign's own volumes) and volumes made
/// within a restore's window (the restored state never knew them), until `timeout`; what
/// is left then is named in `violations`, except those made within a restore's window,
/// whose ids it returns.
pub async fn check_left(
    http: &Http,
    backend: &Path,
    before: &BTreeSet<String>,
    ledger: &Ledger,
    timeout: Duration,
    report: &mut JobsReport,
    violations: &mut Vec<String>,
) -> BTreeSet<String> {
    let mut forgotten = BTreeSet::new();
    let deadline = Instant::now() + timeout;
    loop {
        let listed: Option<Vec<api::Volume>> = match http.get("/v1/volumes").await {
            Ok(r) => r.json().ok(),
            Err(_) => None,
        };
        let left: Vec<String> = listed
            .iter()
            .flatten()
            .filter(|v| v.job.is_some())
            .map(|v| format!("{} ({:?})", v.name, v.state))
            .collect();
        let extra: Vec<String> = storage_volumes(backend)
            .difference(before)
            .cloned()
            .collect();
        // Once csivol knows no per-job volume, it will delete nothing more: what is left
        // in the storage then stays, and only what a restore forgot may.
        let done = listed.is_some()
            && left.is_empty()
            && extra.iter().all(|id| {
                ledger.forgotten_by_a_restore(made_at(&backend.join("volumes").join(id)))
            });
        if done || Instant::now() >= deadline {
            report.job_volumes_left = left.len();
            for v in left {
                violations.push(format!("per-job volume left after the drain: {v}"));
            }
            for id in extra {
                if ledger.forgotten_by_a_restore(made_at(&backend.join("volumes").join(&id))) {
                    report.storage_volumes_forgotten_by_restore += 1;
                    forgotten.insert(id.trim_end_matches(".json").to_owned());
                } else {
                    report.storage_volumes_leaked += 1;
                    violations.push(format!(
                        "the plugin's storage still holds volume {id}, which the campaign did not make, after the drain"
                    ));
                }
            }
            return forgotten;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A file's time (unix ms), 0 if unknown.
fn made_at(file: &Path) -> u64 {
    std::fs::metadata(file)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as u64)
}

/// Judges the acknowledged claims the jobs found gone before their release, against the
/// event log: a lease that ran out (`claim-expired`) is one only if it may have (not
/// renewed for a lease, or a restore put back an older one); a claim the plugin failed,
/// released by the server before its job looked again, is one, and so is a per-job
/// claim dequeued when its CreateVolume failed for good; with none, only a restore
/// explains it. Anything else is a violation: an acknowledged claim lost.
pub fn judge_vanished(
    events: &[api::Event],
    vanished: &[Vanished],
    report: &mut JobsReport,
    violations: &mut Vec<String>,
) {
    for v in vanished {
        let why = events.iter().rev().find(|e| {
            e.volume.as_deref() == Some(v.volume.as_str())
                && e.alloc.as_deref() == Some(v.alloc.as_str())
                && matches!(
                    e.kind.as_str(),
                    "claim-expired" | "claim-dequeued" | "claim-failed"
                )
        });
        let name = format!("claim of alloc {} on volume {}", v.alloc, v.volume);
        match why.map(|e| e.kind.as_str()) {
            Some("claim-expired") if v.may_have_lapsed || v.restored => {
                report.fresh_leases_lapsed += 1;
            }
            Some("claim-expired") => violations.push(format!(
                "{name}: its lease ran out although its job renewed it in time"
            )),
            Some("claim-failed") => report.job_claims_failed += 1,
            Some(_) => report.job_claims_dequeued += 1,
            None if v.restored => report.job_claims_forgotten_by_restore += 1,
            None => violations.push(format!(
                "{name}: acknowledged, then gone before its job released it, and the event log says nothing of why"
            )),
        }
    }
}

/// How many times a per-job volume or pool member was blocked.
pub fn blocks(events: &[api::Event]) -> usize {
    events
        .iter()
        .filter(|e| e.kind == "volume-blocked")
        .filter_map(|e| e.volume.as_deref())
        .filter(|v| is_job_volume(v))
        .count()
}

/// Volumes whose DeleteVolume was asked for (`volume-deleting`) while they were blocked:
/// a `volume-blocked` (its node lost holding it) with nothing in between that ends the
/// block: an operator's unblock, the claim released by its node or forced off it, or taken
/// down by its returning node, or the node itself back (or fenced, or unblocked).
pub fn deleted_while_blocked(events: &[api::Event]) -> Vec<String> {
    const ENDS_BLOCK: [&str; 4] = [
        "volume-unblocked",
        "claim-released",
        "claim-force-released",
        "claim-taken-down",
    ];
    const NODE_ENDS_BLOCKS: [&str; 3] = ["node-returned", "node-fenced", "node-unblocked"];
    let mut blocked: BTreeMap<&str, &api::Event> = BTreeMap::new();
    let mut out = Vec::new();
    for e in events {
        let Some(v) = e.volume.as_deref() else {
            if NODE_ENDS_BLOCKS.contains(&e.kind.as_str()) {
                blocked.retain(|_, b| b.node != e.node);
            }
            continue;
        };
        match e.kind.as_str() {
            "volume-blocked" => {
                blocked.insert(v, e);
            }
            k if ENDS_BLOCK.contains(&k) => {
                blocked.remove(v);
            }
            "volume-deleting" => {
                if let Some(b) = blocked.get(v) {
                    out.push(format!(
                        "volume {v}: DeleteVolume asked for (event {}) while it was blocked (event {}, {})",
                        e.index, b.index, b.message
                    ));
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(index: u64, kind: &str, volume: &str) -> api::Event {
        serde_json::from_value(serde_json::json!({
            "index": index, "at": "", "kind": kind, "volume": volume, "node": null,
            "alloc": null, "actor": "server", "message": ""
        }))
        .unwrap()
    }

    /// A claim gone before its release is explained by the event log (a lease that may
    /// have run out, a failed creation) or a restore, and is a violation otherwise; so is
    /// a lease that ran out although it was renewed in time.
    #[test]
    fn a_claim_gone_before_its_release_needs_a_why() {
        let mut expired = ev(1, "claim-expired", "s1");
        expired.alloc = Some("f1".into());
        let mut dequeued = ev(2, "claim-dequeued", "s2");
        dequeued.alloc = Some("f2".into());
        let mut failed = ev(3, "claim-failed", "p2");
        failed.alloc = Some("pool-2".into());
        let events = [expired, dequeued, failed];
        let gone = |volume: &str, alloc: &str, may_have_lapsed, restored| Vanished {
            volume: volume.into(),
            alloc: alloc.into(),
            may_have_lapsed,
            restored,
        };
        let mut r = JobsReport::default();
        let mut violations = Vec::new();
        let fine = [
            gone("s1", "f1", true, false),
            gone("s1", "f1", false, true),
            gone("s2", "f2", false, false),
            gone("p1", "pool-1", false, true),
            gone("p2", "pool-2", false, false),
        ];
        judge_vanished(&events, &fine, &mut r, &mut violations);
        assert!(violations.is_empty(), "{violations:?}");
        assert_eq!(
            (
                r.fresh_leases_lapsed,
                r.job_claims_failed,
                r.job_claims_dequeued,
                r.job_claims_forgotten_by_restore
            ),
            (2, 1, 1, 1)
        );
        let bad = [
            gone("s1", "f1", false, false),
            gone("p1", "pool-1", false, false),
        ];
        judge_vanished(&events, &bad, &mut r, &mut violations);
        assert_eq!(violations.len(), 2, "{violations:?}");
    }

    /// A deletion after a block counts unless something ended the block in between (of
    /// the volume, or its node's return); a block of another volume, or another node's
    /// return, says nothing of this one.
    #[test]
    fn a_deletion_while_blocked_is_found() {
        let on = |mut e: api::Event, node: &str| {
            e.node = Some(node.into());
            e
        };
        let mut returned = ev(3, "node-returned", "");
        returned.volume = None;
        let bad = [
            on(ev(1, "volume-blocked", "a"), "n1"),
            ev(2, "claim-expired", "a"),
            on(returned.clone(), "n2"),
            ev(4, "volume-deleting", "a"),
        ];
        assert_eq!(deleted_while_blocked(&bad).len(), 1);
        let back = [
            on(ev(1, "volume-blocked", "a"), "n1"),
            on(returned, "n1"),
            ev(4, "volume-deleting", "a"),
        ];
        assert!(deleted_while_blocked(&back).is_empty());
        let good = [
            ev(1, "volume-blocked", "a"),
            ev(2, "volume-unblocked", "a"),
            ev(3, "volume-deleting", "a"),
            ev(4, "volume-blocked", "b"),
            ev(5, "volume-deleting", "c"),
        ];
        assert!(deleted_while_blocked(&good).is_empty());
    }
}
