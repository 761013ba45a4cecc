//! The campaign's history and its checker, after Jepsen's method: every client operation
//! is recorded with its invocation and completion times and its outcome (a history), each
//! single-writer volume is a register holding the write claim that has it (a model,
//! [`volume::Volume`]), and a linear search decides whether some order of the operations,
//! each taking effect at one instant between its invocation and its completion, explains
//! every outcome ([`linear::check`]). An acknowledged claim that vanished, a release
//! undone, a stale read, a final state that forgets what was acknowledged: each leaves a
//! volume's history without such an order, and is reported with the operation no order
//! could explain.

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

/// Steps of the search per volume before it gives up undecided (reported as an error,
/// not as linearizable).
const BUDGET: u64 = 20_000_000;

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
        });
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
/// independent registers, so the whole is linearizable exactly when each is).
pub fn check(records: &[Record]) -> Checked {
    let mut by_volume: BTreeMap<&str, Vec<Operation<Input, Output>>> = BTreeMap::new();
    for r in records {
        by_volume.entry(&r.volume).or_default().push(Operation {
            call: r.call_us,
            ret: r.ret_us.unwrap_or(u64::MAX),
            input: r.input.clone(),
            output: r.output.clone(),
        });
    }
    let mut out = Checked {
        operations: records.len(),
        volumes: by_volume.len(),
        ..Checked::default()
    };
    for (volume, ops) in by_volume {
        match linear::check(&volume::Volume, &ops, BUDGET) {
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
                "volume {volume}: {} operations not decided within {BUDGET} steps",
                ops.len()
            )),
        }
    }
    out
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
}
