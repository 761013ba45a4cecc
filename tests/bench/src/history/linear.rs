//! Whether a history of operations on one object is linearizable with respect to a model:
//! whether some order of the operations, each placed at one instant between its invocation
//! and its completion, makes every outcome the model's. The search is Wing and Gong's, with
//! Lowe's memo of the configurations already tried (as `porcupine` does it): walk the
//! invocations and completions in time order; at an invocation, try to linearize that
//! operation now (if the model allows its outcome); at a completion whose operation is not
//! linearized yet, undo the last choice and try the next one. An operation whose outcome is
//! unknown (the client got no answer) may take effect at any time after its invocation, or
//! never: its completion is at the end of time, and the model offers "no effect" among its
//! outcomes. A nondeterministic model is searched over sets of states.

use std::collections::{BTreeSet, HashSet};
use std::hash::Hash;

/// What the object does: from a state, the states an operation with this input and
/// outcome may leave it in (none: the outcome is impossible there).
pub trait Model {
    type State: Clone + Ord + Hash;
    type Input;
    type Output;
    fn init(&self) -> Self::State;
    fn step(
        &self,
        state: &Self::State,
        input: &Self::Input,
        output: &Self::Output,
    ) -> Vec<Self::State>;
}

/// One operation: invoked at `call`, completed at `ret` (`u64::MAX`: never, the outcome
/// is unknown), with its input and its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation<I, O> {
    pub call: u64,
    pub ret: u64,
    pub input: I,
    pub output: O,
}

/// The verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Some order explains every outcome.
    Linearizable,
    /// None does. `stuck` is the operation whose completion no order reached with it
    /// explained (an index into the history), `explained` the most operations any order
    /// explained.
    Anomaly { stuck: usize, explained: usize },
    /// The search took more than its budget of steps before deciding.
    Unknown,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    op: usize,
    call: bool,
    prev: usize,
    next: usize,
    /// For a call, the index of its completion's entry.
    matching: usize,
}

/// The time-ordered entries as a doubly linked list, with a head at index 0; an operation
/// linearized is lifted out (both its entries) and put back when the choice is undone.
struct Entries {
    e: Vec<Entry>,
}

impl Entries {
    fn new<I, O>(ops: &[Operation<I, O>]) -> Self {
        // (time, completion?, op): at one instant invocations come first, so that an
        // operation completed at the instant another was invoked counts as concurrent
        // with it (the more permissive reading of equal clocks).
        let mut order: Vec<(u64, bool, usize)> = ops
            .iter()
            .enumerate()
            .flat_map(|(i, o)| [(o.call, false, i), (o.ret.max(o.call), true, i)])
            .collect();
        order.sort();
        let mut e = Vec::with_capacity(order.len() + 1);
        e.push(Entry {
            op: usize::MAX,
            call: false,
            prev: 0,
            next: 1,
            matching: 0,
        });
        let mut call_at = vec![0; ops.len()];
        for (k, (_, completion, op)) in order.iter().enumerate() {
            let at = k + 1;
            e.push(Entry {
                op: *op,
                call: !completion,
                prev: at - 1,
                next: at + 1,
                matching: 0,
            });
            if *completion {
                e[call_at[*op]].matching = at;
            } else {
                call_at[*op] = at;
            }
        }
        let last = e.len() - 1;
        e[last].next = usize::MAX;
        if last == 0 {
            e[0].next = usize::MAX;
        }
        Self { e }
    }

    fn unlink(&mut self, i: usize) {
        let Entry { prev, next, .. } = self.e[i];
        self.e[prev].next = next;
        if next != usize::MAX {
            self.e[next].prev = prev;
        }
    }

    fn relink(&mut self, i: usize) {
        let Entry { prev, next, .. } = self.e[i];
        self.e[prev].next = i;
        if next != usize::MAX {
            self.e[next].prev = i;
        }
    }

    /// Takes call entry `i` and its completion out of the list.
    fn lift(&mut self, i: usize) {
        self.unlink(i);
        self.unlink(self.e[i].matching);
    }

    /// Puts them back, in the reverse order.
    fn unlift(&mut self, i: usize) {
        self.relink(self.e[i].matching);
        self.relink(i);
    }
}

/// A set of operations, as bits.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Self {
        Self(vec![0; n.div_ceil(64)])
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
    fn count(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }
}

/// Checks `ops` against `model`, giving up (`Unknown`) after `budget` steps.
pub fn check<M: Model>(model: &M, ops: &[Operation<M::Input, M::Output>], budget: u64) -> Verdict {
    let mut list = Entries::new(ops);
    let mut state: BTreeSet<M::State> = BTreeSet::from([model.init()]);
    let mut linearized = Bits::new(ops.len());
    let mut tried: HashSet<(Bits, BTreeSet<M::State>)> = HashSet::new();
    let mut stack: Vec<(usize, BTreeSet<M::State>)> = Vec::new();
    let mut explained = 0;
    // The completion no order got past, in the order that explained the most.
    let mut stuck = None;
    let mut steps = 0u64;
    let mut at = list.e[0].next;
    while list.e[0].next != usize::MAX {
        steps += 1;
        if steps > budget {
            return Verdict::Unknown;
        }
        let entry = list.e[at];
        if entry.call {
            let op = &ops[entry.op];
            let next: BTreeSet<M::State> = state
                .iter()
                .flat_map(|s| model.step(s, &op.input, &op.output))
                .collect();
            if !next.is_empty() {
                let mut with = linearized.clone();
                with.set(entry.op);
                if tried.insert((with.clone(), next.clone())) {
                    stack.push((at, std::mem::replace(&mut state, next)));
                    linearized = with;
                    explained = explained.max(stack.len());
                    list.lift(at);
                    at = list.e[0].next;
                    continue;
                }
            }
            at = entry.next;
        } else {
            // The first completion left: its operation could not be placed before it.
            if stuck.is_none() || stack.len() >= explained {
                stuck = Some(entry.op);
            }
            let Some((call, before)) = stack.pop() else {
                return Verdict::Anomaly {
                    stuck: stuck.unwrap_or(entry.op),
                    explained,
                };
            };
            state = before;
            linearized.clear(list.e[call].op);
            list.unlift(call);
            at = list.e[call].next;
        }
    }
    debug_assert_eq!(linearized.count(), ops.len());
    Verdict::Linearizable
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A register of one integer: writes always succeed, reads return the value.
    struct Register;

    #[derive(Debug, Clone)]
    enum Io {
        Write(i32),
        Read,
    }

    impl Model for Register {
        type State = i32;
        type Input = Io;
        /// A read's value; `None`: unknown (no answer), or a write's.
        type Output = Option<i32>;
        fn init(&self) -> i32 {
            0
        }
        fn step(&self, s: &i32, input: &Io, out: &Option<i32>) -> Vec<i32> {
            match (input, out) {
                (Io::Write(v), _) => vec![*v],
                (Io::Read, Some(v)) if v == s => vec![*s],
                (Io::Read, Some(_)) => vec![],
                (Io::Read, None) => vec![*s],
            }
        }
    }

    fn op(call: u64, ret: u64, input: Io, output: Option<i32>) -> Operation<Io, Option<i32>> {
        Operation {
            call,
            ret,
            input,
            output,
        }
    }

    /// A named history and whether it is linearizable.
    type Case = (&'static str, Vec<Operation<Io, Option<i32>>>, bool);

    #[test]
    fn the_classic_register_histories() {
        use Io::{Read, Write};
        let cases: Vec<Case> = vec![
            ("empty", vec![], true),
            (
                "sequential",
                vec![op(0, 1, Write(1), None), op(2, 3, Read, Some(1))],
                true,
            ),
            (
                "a read overlapping a write may see either value",
                vec![
                    op(0, 10, Write(1), None),
                    op(1, 2, Read, Some(1)),
                    op(3, 4, Read, Some(1)),
                ],
                true,
            ),
            (
                "but never go back to the old one",
                vec![
                    op(0, 10, Write(1), None),
                    op(1, 2, Read, Some(1)),
                    op(3, 4, Read, Some(0)),
                ],
                false,
            ),
            (
                "a stale read after the write completed",
                vec![op(0, 1, Write(1), None), op(2, 3, Read, Some(0))],
                false,
            ),
            (
                "concurrent writes, reads agreeing on one order",
                vec![
                    op(0, 5, Write(1), None),
                    op(0, 5, Write(2), None),
                    op(6, 7, Read, Some(1)),
                    op(8, 9, Read, Some(1)),
                ],
                true,
            ),
            (
                "reads that need two orders at once",
                vec![
                    op(0, 5, Write(1), None),
                    op(0, 5, Write(2), None),
                    op(6, 7, Read, Some(1)),
                    op(8, 9, Read, Some(2)),
                ],
                false,
            ),
            (
                "an unanswered write may land late",
                vec![
                    op(0, u64::MAX, Write(3), None),
                    op(1, 2, Read, Some(0)),
                    op(10, 11, Read, Some(3)),
                ],
                true,
            ),
            (
                "an unanswered write lands once, not twice",
                vec![
                    op(0, u64::MAX, Write(3), None),
                    op(1, 2, Write(4), None),
                    op(3, 4, Read, Some(3)),
                    op(5, 6, Read, Some(4)),
                ],
                false,
            ),
        ];
        for (name, ops, want) in cases {
            let got = check(&Register, &ops, 1_000_000);
            assert_eq!(
                got == Verdict::Linearizable,
                want,
                "{name}: {got:?} for {ops:?}"
            );
        }
    }

    #[test]
    fn an_anomaly_names_the_operation_no_order_explains() {
        use Io::{Read, Write};
        let ops = vec![
            op(0, 1, Write(1), None),
            op(2, 3, Read, Some(1)),
            op(4, 5, Read, Some(7)),
        ];
        assert_eq!(
            check(&Register, &ops, 1000),
            Verdict::Anomaly {
                stuck: 2,
                explained: 2
            }
        );
        assert_eq!(check(&Register, &ops, 1), Verdict::Unknown);
    }

    #[test]
    fn long_histories_with_unanswered_operations_stay_cheap() {
        use Io::{Read, Write};
        // 3,000 operations by three clients, every tenth write unanswered.
        let mut ops = Vec::new();
        let mut t = 0;
        for i in 0..1000 {
            let v = i % 7;
            let unanswered = i % 10 == 0;
            ops.push(op(
                t,
                if unanswered { u64::MAX } else { t + 3 },
                Write(v),
                None,
            ));
            ops.push(op(t + 4, t + 5, Read, Some(v)).clone());
            ops.push(op(t + 4, t + 6, Read, Some(v)));
            t += 10;
        }
        // An unanswered write of the same value may land anywhere: still explainable.
        assert_eq!(check(&Register, &ops, 10_000_000), Verdict::Linearizable);
    }
}
