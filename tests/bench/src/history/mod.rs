//! The campaign's history and its checker, after Jepsen's method: every client operation
//! is recorded with its invocation and completion times and its outcome (a history), each
//! single-writer volume is a register holding the write claim that has it (a model,
//! [`volume::Volume`]), and a linear search decides whether some order of the operations,
//! each taking effect at one instant between its invocation and its completion, explains
//! every outcome ([`linear::check`]). An acknowledged claim that vanished, a release
//! undone, a stale read, a final state that forgets what was acknowledged: each leaves a
//! volume's history without such an order, and is reported with the operation no order
//! could explain.
//!
//! Two rules come from the server's exact retries, not from the register: an unanswered
//! claim of an alloc took effect, if at all, before that alloc's release was sent (the
//! claim requests carry their send time, which the server judges against the alloc's
//! release), so a claim that turns up after its release is no late commit but a released
//! claim come back; and a backup and its restore act on every volume at once (recorded
//! once, under [`EVERY_VOLUME`], and judged in each volume's history).

pub mod linear;
pub mod volume;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use serde::Serialize;

use self::linear::{Operation, Verdict};
pub use self::volume::{Input, Output};

/// Steps of the search per volume before it gives up undecided (a failure of the run,
/// never taken for linearizable).
const BUDGET: u64 = 20_000_000;

/// The volume of an operation on the whole state: a backup, a restore.
pub const EVERY_VOLUME: &str = "*";

/// One operation of the history.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    pub volume: String,
    /// When the client sent it, in microseconds since the run began.
    pub call_us: u64,
    /// When its outcome came back; `None`: it never did (the outcome is unknown).
    pub ret_us: Option<u64>,
    #[serde(flatten)]
    pub input: Input,
    #[serde(flatten)]
    pub output: Output,
    /// The `Idempotency-Key` of the request (a claim's attempts share one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
}

/// Where the clients write the history; one clock for all of them.
#[derive(Debug)]
pub struct Recorder {
    start: Instant,
    ops: Mutex<Vec<Record>>,
}

/// What the checker found.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Checked {
    pub operations: usize,
    pub volumes: usize,
    /// Volumes whose history no order explains, each with the operation it stuck on.
    pub anomalies: Vec<String>,
    /// Volumes the search could not decide within its budget.
    pub undecided: Vec<String>,
}

impl Default for Recorder {
    fn default() -> Self {
        Self {
            start: Instant::now(),
            ops: Mutex::new(Vec::new()),
        }
    }
}

impl Recorder {
    /// Microseconds since the recorder was made.
    pub fn now(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }

    /// Records an operation invoked at `call_us` whose outcome came at `ret_us`
    /// (`None`: never, [`Output::Unknown`]).
    pub fn record(
        &self,
        volume: &str,
        call_us: u64,
        ret_us: Option<u64>,
        input: Input,
        output: Output,
    ) {
        self.ops.lock().expect("history lock").push(Record {
            volume: volume.to_owned(),
            call_us,
            ret_us,
            input,
            output,
            request: None,
        });
    }

    /// Records an attempt of the request keyed `key` that just completed with `output`.
    pub fn attempted(&self, volume: &str, call_us: u64, input: Input, output: Output, key: &str) {
        let ret_us = (output != Output::Unknown).then(|| self.now());
        self.ops.lock().expect("history lock").push(Record {
            volume: volume.to_owned(),
            call_us,
            ret_us,
            input,
            output,
            request: Some(key.to_owned()),
        });
    }

    /// Records an operation on every volume at once (a backup, a restore).
    pub fn record_all(&self, call_us: u64, ret_us: Option<u64>, input: Input, output: Output) {
        self.record(EVERY_VOLUME, call_us, ret_us, input, output);
    }

    /// Records an operation that just completed with `output`.
    pub fn completed(&self, volume: &str, call_us: u64, input: Input, output: Output) {
        let ret = (output != Output::Unknown).then(|| self.now());
        self.record(volume, call_us, ret, input, output);
    }

    /// Writes the history, one JSON object a line, to `path`.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        save_lines(path, &self.ops.lock().expect("history lock"))
    }

    /// Checks every volume's history against the single-writer model.
    pub fn check(&self) -> Checked {
        check(&self.ops.lock().expect("history lock"))
    }
}

/// Writes `items`, one JSON object a line, to `path`.
pub fn save_lines<T: Serialize>(path: &Path, items: &[T]) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    for i in items {
        serde_json::to_writer(&mut out, i)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// Checks the history of each volume in `records` on its own (the volumes are
/// independent registers, so the whole is linearizable exactly when each is; an operation
/// on every volume is in each one's history).
pub fn check(records: &[Record]) -> Checked {
    check_within(records, BUDGET)
}

/// [`check`] with `budget` steps of the search per volume.
pub(crate) fn check_within(records: &[Record], budget: u64) -> Checked {
    let mut by_volume: BTreeMap<&str, Vec<Record>> = BTreeMap::new();
    for r in records.iter().filter(|r| r.volume != EVERY_VOLUME) {
        by_volume.entry(&r.volume).or_default().push(r.clone());
    }
    let every: Vec<&Record> = records
        .iter()
        .filter(|r| r.volume == EVERY_VOLUME)
        .collect();
    let by_volume: BTreeMap<&str, Vec<Operation<Input, Output>>> = by_volume
        .into_iter()
        .map(|(volume, mut rs)| {
            rs.extend(every.iter().map(|r| (*r).clone()));
            bound_unanswered_claims(&mut rs);
            let ops = rs
                .into_iter()
                .map(|r| Operation {
                    call: r.call_us,
                    ret: r.ret_us.unwrap_or(u64::MAX),
                    input: r.input,
                    output: r.output,
                })
                .collect();
            (volume, ops)
        })
        .collect();
    let mut out = Checked {
        operations: records.len(),
        volumes: by_volume.len(),
        ..Checked::default()
    };
    for (volume, ops) in by_volume {
        match linear::check(&volume::Volume, &ops, budget) {
            Verdict::Linearizable => {}
            Verdict::Anomaly { stuck, explained } => {
                let op = &ops[stuck];
                out.anomalies.push(format!(
                    "volume {volume}: no order of its {} operations explains {:?} → {:?} (sent at {} µs, answered {}); at most {explained} explained in one order",
                    ops.len(),
                    op.input,
                    op.output,
                    op.call,
                    if op.ret == u64::MAX {
                        "never".to_owned()
                    } else {
                        format!("at {} µs", op.ret)
                    }
                ));
            }
            Verdict::Unknown => out.undecided.push(format!(
                "volume {volume}: {} operations not decided within {budget} steps: the history is not known to be linearizable",
                ops.len()
            )),
        }
    }
    out
}

/// Ends each unanswered claim attempt where the server's exact retries say it took effect
/// by, if at all: just before the first release of its alloc sent after it (the server
/// carries out no claim request sent before its alloc's release: it refuses one that
/// says it was sent earlier, and answers a repeat of a keyed one with its first answer),
/// and at the first answer to a later attempt of the same request (same key: the server
/// keeps the request's first answer, success or refusal, and answers every repeat with it,
/// so an attempt not yet carried out by then never will be). Otherwise it may still take
/// effect at any time.
fn bound_unanswered_claims(records: &mut [Record]) {
    let mut releases: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    // Per key, (sent, answered) of each attempt that got an answer.
    let mut answered: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    for r in records.iter() {
        match (&r.input, &r.request, r.ret_us) {
            (Input::Release(a), _, _) => releases.entry(a.clone()).or_default().push(r.call_us),
            (Input::Claim(_), Some(k), Some(ret)) => {
                answered
                    .entry(k.clone())
                    .or_default()
                    .push((r.call_us, ret));
            }
            _ => {}
        }
    }
    for times in releases.values_mut() {
        times.sort_unstable();
    }
    for r in records.iter_mut().filter(|r| r.ret_us.is_none()) {
        let Input::Claim(a) = &r.input else { continue };
        // At one instant an invocation comes before a completion: the claim ends a
        // microsecond before the release is sent.
        let release = releases.get(a).and_then(|times| {
            let i = times.partition_point(|t| *t < r.call_us);
            times.get(i).map(|t| t.saturating_sub(1))
        });
        let repeat = r
            .request
            .as_ref()
            .and_then(|k| answered.get(k))
            .and_then(|attempts| {
                attempts
                    .iter()
                    .filter(|(sent, _)| *sent > r.call_us)
                    .map(|(_, ret)| *ret)
                    .min()
            });
        if let Some(bound) = release.into_iter().chain(repeat).min() {
            r.ret_us = Some(bound.max(r.call_us));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(volume: &str, call: u64, ret: Option<u64>, input: Input, output: Output) -> Record {
        Record {
            volume: volume.to_owned(),
            call_us: call,
            ret_us: ret,
            input,
            output,
            request: None,
        }
    }

    fn keyed(r: Record, key: &str) -> Record {
        Record {
            request: Some(key.to_owned()),
            ..r
        }
    }

    /// A recorded history with one volume kept by the rules and one whose acknowledged
    /// claim was undone: only the second is named, and the first is not held against it.
    #[test]
    fn each_volume_is_judged_on_its_own_history() {
        let a = || "a".to_owned();
        let records = vec![
            rec("v1", 0, Some(10), Input::Claim(a()), Output::Ok),
            rec("v1", 20, Some(30), Input::Release(a()), Output::Ok),
            rec("v1", 40, Some(50), Input::Holder, Output::Held(None)),
            rec("v2", 0, Some(10), Input::Claim(a()), Output::Ok),
            rec("v2", 20, Some(30), Input::Read(a()), Output::Absent),
            rec("v2", 40, None, Input::Claim("b".into()), Output::Unknown),
        ];
        let checked = check(&records);
        assert_eq!((checked.operations, checked.volumes), (6, 2));
        assert_eq!(checked.anomalies.len(), 1, "{checked:?}");
        assert!(
            checked.anomalies[0].starts_with("volume v2:"),
            "{checked:?}"
        );
        assert!(checked.undecided.is_empty());
        // The history's lines are what a later look needs: the volume, the times, what
        // was asked and what came back.
        let line = serde_json::to_value(&records[5]).unwrap();
        assert_eq!(
            line,
            serde_json::json!({"volume": "v2", "call_us": 40, "ret_us": null,
                "op": "claim", "alloc": "b", "outcome": "unknown"})
        );
    }

    /// A claim attempt that got no answer, retried and answered, then released: the claim
    /// seen again after its release is a released claim come back (a late or repeated
    /// request carried out), not the unanswered attempt taking effect late.
    #[test]
    fn a_claim_seen_after_its_release_is_no_late_commit() {
        let a = || "a".to_owned();
        let records = vec![
            rec("v1", 0, None, Input::Claim(a()), Output::Unknown),
            rec("v1", 5, Some(10), Input::Claim(a()), Output::Ok),
            rec("v1", 20, Some(30), Input::Release(a()), Output::Ok),
            rec("v1", 40, Some(50), Input::Read(a()), Output::Present),
        ];
        let checked = check(&records);
        assert_eq!(checked.anomalies.len(), 1, "{checked:?}");
        assert!(
            checked.anomalies[0].contains("Read(\"a\") → Present"),
            "{checked:?}"
        );
        // Without a release after it (a retry refused), the unanswered attempt may still
        // land at any time: the drain watches for it.
        let records = vec![
            rec("v1", 0, None, Input::Claim(a()), Output::Unknown),
            rec("v1", 5, Some(10), Input::Claim(a()), Output::Refused),
            rec("v1", 40, Some(50), Input::Read(a()), Output::Absent),
            rec("v1", 60, Some(70), Input::Read(a()), Output::Present),
        ];
        let checked = check(&records);
        assert!(checked.anomalies.is_empty(), "{checked:?}");
    }

    /// An unanswered attempt of a keyed claim took effect before a later attempt of the
    /// same request was answered, or never: not there after that answer, the claim seen
    /// later still is no late commit of the first attempt.
    #[test]
    fn an_unanswered_attempt_ends_at_its_repeats_answer() {
        let a = || "a".to_owned();
        let records = |key: &str| {
            vec![
                keyed(rec("v1", 0, None, Input::Claim(a()), Output::Unknown), key),
                keyed(
                    rec("v1", 5, Some(10), Input::Claim(a()), Output::Refused),
                    "k",
                ),
                rec("v1", 20, Some(30), Input::Read(a()), Output::Absent),
                rec("v1", 40, Some(50), Input::Read(a()), Output::Present),
            ]
        };
        let checked = check(&records("k"));
        assert_eq!(checked.anomalies.len(), 1, "{checked:?}");
        // Another request's answer says nothing of this one.
        let checked = check(&records("other"));
        assert!(checked.anomalies.is_empty(), "{checked:?}");
        // And the key is in the history's line.
        let line = serde_json::to_value(&records("k")[0]).unwrap();
        assert_eq!(line["request"], "k");
    }

    /// A claim whose release was under way when the backup was taken comes back with the
    /// restore and is taken down by its node on its own: recorded as the server's drop
    /// from the operator's read to its being seen gone, it lets another claim take the
    /// volume before the operator's release; without that drop, the same history has no
    /// order.
    #[test]
    fn a_claim_restored_while_releasing_may_go_by_itself() {
        let s = |a: &str| a.to_owned();
        let mut records = vec![
            rec("v1", 0, Some(1), Input::Claim(s("a")), Output::Ok),
            rec("v1", 2, Some(6), Input::Release(s("a")), Output::Ok),
            rec(EVERY_VOLUME, 3, Some(8), Input::Backup, Output::Ok),
            rec(EVERY_VOLUME, 10, Some(20), Input::Restore, Output::Ok),
            rec("v1", 20, Some(21), Input::Read(s("a")), Output::Present),
            rec("v1", 25, Some(26), Input::Claim(s("b")), Output::Ok),
            rec("v1", 30, Some(31), Input::Release(s("a")), Output::Ok),
        ];
        assert_eq!(check(&records).anomalies.len(), 1);
        records.push(rec("v1", 20, Some(31), Input::Dropped(s("a")), Output::Ok));
        let checked = check(&records);
        assert!(checked.anomalies.is_empty(), "{checked:?}");
    }

    /// A backup and a restore recorded once are judged in every volume's history: a
    /// claim released after the backup comes back in each volume, and is released again.
    #[test]
    fn a_restore_is_in_every_volumes_history() {
        let s = |a: &str| a.to_owned();
        let records = vec![
            rec("v1", 0, Some(1), Input::Claim(s("a")), Output::Ok),
            rec("v2", 0, Some(1), Input::Claim(s("b")), Output::Ok),
            rec(EVERY_VOLUME, 2, Some(3), Input::Backup, Output::Ok),
            rec("v1", 4, Some(5), Input::Release(s("a")), Output::Ok),
            rec("v2", 4, Some(5), Input::Release(s("b")), Output::Ok),
            rec(EVERY_VOLUME, 6, Some(9), Input::Restore, Output::Ok),
            rec("v1", 10, Some(11), Input::Read(s("a")), Output::Present),
            rec("v2", 10, Some(11), Input::Read(s("b")), Output::Present),
            rec("v1", 12, Some(13), Input::Release(s("a")), Output::Ok),
            rec(
                "v2",
                14,
                Some(15),
                Input::Holder,
                Output::Held(Some(s("b"))),
            ),
        ];
        let checked = check(&records);
        assert_eq!((checked.operations, checked.volumes), (10, 2));
        assert!(checked.anomalies.is_empty(), "{checked:?}");
        // Without the restore, the same reads are claims come back.
        let without: Vec<Record> = records
            .into_iter()
            .filter(|r| r.input != Input::Restore)
            .collect();
        assert_eq!(check(&without).anomalies.len(), 2);
    }
}
