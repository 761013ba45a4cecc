//! The model of one single-writer volume, as its clients see it: a register holding the
//! write claim that has the volume (an alloc), or none. A claim acknowledged took the
//! volume, which only a free volume (or one its alloc has already) gives; a claim refused
//! changed nothing; a claim without an answer took it at some moment after it was sent, or
//! never. A release took the claim away at some moment between the request and the
//! client's seeing it gone; so did the server, when its event log says why (the claim
//! failed, or its lost node came back without it). A read of a claim sees it exactly while
//! it holds the volume; the final read of the volume sees who holds it.
//!
//! A backup keeps who held the volume at one moment while it was taken; a restore of that
//! backup puts the volume back to it: the claims acknowledged before the backup come back
//! (a release since undone with them), those made after it are forgotten. That is the only
//! way a released claim may hold the volume again.

use super::linear::Model;

/// What a client did to a volume.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", tag = "op", content = "alloc")]
pub enum Input {
    /// `POST …/claims` of a write claim.
    Claim(String),
    /// `DELETE …/claims/{alloc}`, until the claim was seen gone.
    Release(String),
    /// The server took the claim away on its own, as its event log says.
    Dropped(String),
    /// `GET …/claims/{alloc}`.
    Read(String),
    /// `GET /v1/volumes/{volume}`: who holds it (the final state).
    Holder,
    /// A backup of the whole state (`GET /v1/backup`, `csivol-server backup`).
    Backup,
    /// The last backup restored (`csivol-server restore`), from stopping the servers to
    /// their answering again.
    Restore,
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", tag = "outcome", content = "holder")]
pub enum Output {
    /// Acknowledged (a claim, a release seen through, a backup written, a restore done).
    Ok,
    /// Refused: nothing changed.
    Refused,
    /// No answer, or one that does not say (503: the commit may have happened).
    Unknown,
    /// A read of a claim: it is there.
    Present,
    /// A read of a claim: it is not.
    Absent,
    /// A read of the volume: the write claim holding it.
    Held(Option<String>),
}

/// The volume as the model knows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct State {
    /// The alloc whose write claim holds the volume.
    pub holder: Option<String>,
    /// Who held it when the last backup was taken (`None`: no backup yet).
    pub saved: Option<Option<String>>,
}

/// The single-writer volume.
#[derive(Debug, Clone, Copy, Default)]
pub struct Volume;

impl Model for Volume {
    type State = State;
    type Input = Input;
    type Output = Output;

    fn init(&self) -> State {
        State::default()
    }

    fn step(&self, state: &State, input: &Input, output: &Output) -> Vec<State> {
        let holder = &state.holder;
        let with = |h: Option<String>| State {
            holder: h,
            saved: state.saved.clone(),
        };
        let same = |a: &String| holder.as_ref() == Some(a);
        let take = |a: &String| {
            (holder.is_none() || same(a))
                .then(|| with(Some(a.clone())))
                .into_iter()
                .collect::<Vec<_>>()
        };
        let release = |a: &String| if same(a) { with(None) } else { state.clone() };
        match (input, output) {
            (Input::Backup, Output::Ok) => vec![State {
                holder: holder.clone(),
                saved: Some(holder.clone()),
            }],
            // Restoring without a backup taken is no history the campaign makes.
            (Input::Restore, Output::Ok) => state.saved.clone().map(with).into_iter().collect(),
            (Input::Restore, Output::Unknown) => {
                let mut v: Vec<State> = state.saved.clone().map(with).into_iter().collect();
                v.push(state.clone());
                v
            }
            (Input::Backup | Input::Restore, _) => vec![],
            (_, Output::Refused) => vec![state.clone()],
            (Input::Claim(a), Output::Ok) => take(a),
            (Input::Claim(a), Output::Unknown) => {
                let mut v = take(a);
                v.push(state.clone());
                v
            }
            (Input::Release(a) | Input::Dropped(a), Output::Ok) => vec![release(a)],
            (Input::Release(a), Output::Unknown) => vec![release(a), state.clone()],
            (Input::Read(a), Output::Present) if same(a) => vec![state.clone()],
            (Input::Read(a), Output::Absent) if !same(a) => vec![state.clone()],
            (Input::Read(_), Output::Unknown) | (Input::Holder, Output::Unknown) => {
                vec![state.clone()]
            }
            (Input::Holder, Output::Held(h)) if h == holder => vec![state.clone()],
            _ => vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::linear::{Operation, Verdict, check};
    use super::*;

    const NEVER: u64 = u64::MAX;

    fn op(call: u64, ret: u64, input: Input, output: Output) -> Operation<Input, Output> {
        Operation {
            call,
            ret,
            input,
            output,
        }
    }
    fn claim(a: &str) -> Input {
        Input::Claim(a.to_owned())
    }
    fn release(a: &str) -> Input {
        Input::Release(a.to_owned())
    }
    fn read(a: &str) -> Input {
        Input::Read(a.to_owned())
    }
    fn held(a: Option<&str>) -> Output {
        Output::Held(a.map(str::to_owned))
    }

    /// A named history and whether it is linearizable.
    type Case = (&'static str, Vec<Operation<Input, Output>>, bool);

    /// Hand-made histories of one volume: each says what a correct csivol may show its
    /// clients, and what it must never show.
    #[test]
    fn histories_of_a_single_writer_volume() {
        use Output::{Absent, Ok, Present, Refused, Unknown};
        let cases: Vec<Case> = vec![
            (
                "claim, read, release, another claim, final read",
                vec![
                    op(0, 1, claim("a"), Ok),
                    op(2, 3, read("a"), Present),
                    op(4, 9, release("a"), Ok),
                    op(10, 11, claim("b"), Ok),
                    op(12, 13, Input::Holder, held(Some("b"))),
                ],
                true,
            ),
            (
                "two writers acknowledged with no release between them",
                vec![op(0, 1, claim("a"), Ok), op(2, 3, claim("b"), Ok)],
                false,
            ),
            (
                "two writers racing: one wins, the other is refused",
                vec![op(0, 5, claim("a"), Ok), op(0, 5, claim("b"), Refused)],
                true,
            ),
            (
                "the second writer acknowledged while the first one's release was under way",
                vec![
                    op(0, 1, claim("a"), Ok),
                    op(2, 10, release("a"), Ok),
                    op(5, 12, claim("b"), Ok),
                    op(13, 14, Input::Holder, held(Some("b"))),
                ],
                true,
            ),
            (
                "an acknowledged claim that vanished before its release",
                vec![
                    op(0, 1, claim("a"), Ok),
                    op(2, 3, read("a"), Present),
                    op(4, 5, read("a"), Absent),
                ],
                false,
            ),
            (
                "a claim the server dropped, as its event log says",
                vec![
                    op(0, 1, claim("a"), Ok),
                    op(2, 3, read("a"), Present),
                    op(2, 5, Input::Dropped("a".into()), Ok),
                    op(4, 5, read("a"), Absent),
                    op(6, 7, claim("b"), Ok),
                ],
                true,
            ),
            (
                "a stale read after the claim was acknowledged",
                vec![op(0, 1, claim("a"), Ok), op(2, 3, read("a"), Absent)],
                false,
            ),
            (
                "a release undone: the claim back after it was seen gone",
                vec![
                    op(0, 1, claim("a"), Ok),
                    op(2, 5, release("a"), Ok),
                    op(6, 7, read("a"), Present),
                ],
                false,
            ),
            (
                "an unanswered claim that took effect, then its retry",
                vec![
                    op(0, NEVER, claim("a"), Unknown),
                    op(3, 4, claim("a"), Ok),
                    op(5, 6, read("a"), Present),
                ],
                true,
            ),
            (
                "an unanswered claim that never took effect",
                vec![
                    op(0, NEVER, claim("a"), Unknown),
                    op(3, 4, claim("b"), Ok),
                    op(5, 6, Input::Holder, held(Some("b"))),
                ],
                true,
            ),
            (
                "an unanswered claim explains a holder nobody was told about",
                vec![
                    op(0, NEVER, claim("a"), Unknown),
                    op(5, 6, Input::Holder, held(Some("a"))),
                ],
                true,
            ),
            (
                "but not one that was never asked for",
                vec![
                    op(0, 1, claim("a"), Ok),
                    op(2, 3, release("a"), Ok),
                    op(5, 6, Input::Holder, held(Some("c"))),
                ],
                false,
            ),
            (
                "the final state forgets an acknowledged claim",
                vec![
                    op(0, 1, claim("a"), Ok),
                    op(5, 6, Input::Holder, held(None)),
                ],
                false,
            ),
            (
                "an unanswered release may or may not have happened",
                vec![
                    op(0, 1, claim("a"), Ok),
                    op(2, NEVER, release("a"), Unknown),
                    op(5, 6, read("a"), Present),
                    op(7, 8, Input::Holder, held(None)),
                ],
                true,
            ),
            (
                "a read of a claim another one holds the volume for",
                vec![
                    op(0, 1, claim("a"), Ok),
                    op(2, 3, read("b"), Absent),
                    op(2, 3, read("a"), Present),
                ],
                true,
            ),
        ];
        for (name, ops, want) in cases {
            let got = check(&Volume, &ops, 1_000_000);
            assert_eq!(got == Verdict::Linearizable, want, "{name}: {got:?}");
        }
    }

    /// Hand-made histories with a backup restored: what the restore may bring back and
    /// forget, and what nothing may bring back.
    #[test]
    fn histories_across_a_restore() {
        use Output::{Absent, Ok, Present, Refused, Unknown};
        let backup = || Input::Backup;
        let restore = || Input::Restore;
        let cases: Vec<Case> = vec![
            (
                "a claim released after the backup comes back with the restore",
                vec![
                    op(0, 1, claim("a"), Ok),
                    op(2, 3, backup(), Ok),
                    op(4, 5, release("a"), Ok),
                    op(6, 9, restore(), Ok),
                    op(10, 11, read("a"), Present),
                    op(12, 13, release("a"), Ok),
                    op(14, 15, Input::Holder, held(None)),
                ],
                true,
            ),
            (
                "a claim acknowledged after the backup is forgotten by the restore",
                vec![
                    op(0, 1, backup(), Ok),
                    op(2, 3, claim("b"), Ok),
                    op(4, 9, restore(), Ok),
                    op(10, 11, read("b"), Absent),
                    op(12, 13, claim("c"), Ok),
                ],
                true,
            ),
            (
                "a claim released before the backup never comes back",
                vec![
                    op(0, 1, claim("a"), Ok),
                    op(2, 3, release("a"), Ok),
                    op(4, 5, backup(), Ok),
                    op(6, 9, restore(), Ok),
                    op(10, 11, read("a"), Present),
                ],
                false,
            ),
            (
                "nor one released after the restore",
                vec![
                    op(0, 1, claim("a"), Ok),
                    op(2, 3, backup(), Ok),
                    op(4, 9, restore(), Ok),
                    op(10, 11, release("a"), Ok),
                    op(12, 13, read("a"), Present),
                ],
                false,
            ),
            (
                "a claim under way while the backup was taken may be in it or not",
                vec![
                    op(0, 4, claim("a"), Ok),
                    op(1, 2, backup(), Ok),
                    op(5, 6, release("a"), Ok),
                    op(7, 9, restore(), Ok),
                    op(10, 11, read("a"), Absent),
                    op(12, 13, claim("b"), Refused),
                ],
                true,
            ),
            (
                "a restore that may not have happened",
                vec![
                    op(0, 1, backup(), Ok),
                    op(2, 3, claim("b"), Ok),
                    op(4, NEVER, restore(), Unknown),
                    op(10, 11, read("b"), Present),
                ],
                true,
            ),
            (
                "a restore with no backup before it explains nothing",
                vec![
                    op(0, 1, claim("a"), Ok),
                    op(2, 3, restore(), Ok),
                    op(4, 5, read("a"), Present),
                ],
                false,
            ),
        ];
        for (name, ops, want) in cases {
            let got = check(&Volume, &ops, 1_000_000);
            assert_eq!(got == Verdict::Linearizable, want, "{name}: {got:?}");
        }
    }
}
