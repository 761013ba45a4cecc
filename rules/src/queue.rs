//! A volume's fair queue, as pure functions: which refusals a claim may wait out in the
//! queue, and which queued claims to grant, in arrival order, once the rules allow.

use csivol_api::ClaimState;
use csivol_api::domain::AccessMode;

use crate::claims::{self, Accept, Held, Refusal, Wanted};

/// Whether a claim refused for `r` may wait in the queue: only when other claims that will
/// be released are in the way. A claim that can never succeed (a write on a read-only
/// mode), or that only an operator can unblock (a lost node holds the volume), is refused.
pub fn may_wait(r: &Refusal) -> bool {
    matches!(r, Refusal::Conflict { blocked: false, .. })
}

/// The queued claims to grant now, a prefix of `queued` (in arrival order): each is checked
/// against what is held plus the claims granted before it, and `may_start` (the node's
/// state and room) must agree. The first that may not start stops the queue, so that no
/// later claim overtakes it.
pub fn grants<'a>(
    access_mode: AccessMode,
    held: &[Held<'a>],
    queued: &[Wanted<'a>],
    mut may_start: impl FnMut(&Wanted<'a>) -> bool,
) -> Vec<&'a str> {
    let mut held: Vec<Held<'a>> = held.to_vec();
    let mut granted = Vec::new();
    for q in queued {
        match claims::check_claim(access_mode, &held, *q) {
            Ok(Accept::New) if may_start(q) => {
                held.push(Held {
                    alloc: q.alloc,
                    node: q.node,
                    mode: q.mode,
                    state: ClaimState::Pending,
                });
                granted.push(q.alloc);
            }
            _ => break,
        }
    }
    granted
}

#[cfg(test)]
mod tests {
    use csivol_api::ClaimMode::{self, Read, Write};

    use super::*;
    use crate::claims::ConflictRule;

    fn held<'a>(alloc: &'a str, node: &'a str, mode: ClaimMode, state: ClaimState) -> Held<'a> {
        Held {
            alloc,
            node,
            mode,
            state,
        }
    }

    fn q<'a>(alloc: &'a str, node: &'a str, mode: ClaimMode) -> Wanted<'a> {
        Wanted { alloc, node, mode }
    }

    #[test]
    fn only_claims_in_the_way_may_wait() {
        let conflict = |blocked| Refusal::Conflict {
            rule: ConflictRule::SingleWriter,
            holder_alloc: "a".into(),
            holder_node: "n".into(),
            blocked,
        };
        assert!(may_wait(&conflict(false)));
        assert!(!may_wait(&conflict(true)), "a lost node needs an operator");
        assert!(!may_wait(&Refusal::ReadOnlyMode {
            access_mode: AccessMode::MultiNodeReaderOnly
        }));
        assert!(!may_wait(&Refusal::AllocHoldsOther {
            node: "n".into(),
            mode: Write,
            state: ClaimState::Ready
        }));
    }

    /// (access mode, held claims, queue in arrival order, nodes that may start) → granted.
    type Case<'a> = (
        AccessMode,
        Vec<Held<'a>>,
        Vec<Wanted<'a>>,
        &'a [&'a str],
        Vec<&'a str>,
    );

    #[test]
    fn grants_in_arrival_order_as_the_rules_allow() {
        use AccessMode::*;
        use ClaimState::{Ready, Releasing};
        let all = |_: &Wanted<'_>| true;
        let cases: &[Case<'_>] = &[
            // A free single-writer volume: the first writer, not the second.
            (
                SingleNodeWriter,
                vec![],
                vec![q("w1", "n1", Write), q("w2", "n1", Write)],
                &["n1"],
                vec!["w1"],
            ),
            // Still held: nobody.
            (
                SingleNodeWriter,
                vec![held("h", "n1", Write, Ready)],
                vec![q("w1", "n1", Write)],
                &["n1"],
                vec![],
            ),
            // A releasing holder still holds.
            (
                SingleNodeWriter,
                vec![held("h", "n1", Write, Releasing)],
                vec![q("w1", "n1", Write)],
                &["n1"],
                vec![],
            ),
            // Readers after a writer: the writer blocks the head, so nobody overtakes.
            (
                MultiNodeSingleWriter,
                vec![held("h", "n1", Write, Ready)],
                vec![q("w1", "n2", Write), q("r1", "n2", Read)],
                &["n1", "n2"],
                vec![],
            ),
            // Once free, the writer and the readers behind it all start.
            (
                MultiNodeSingleWriter,
                vec![],
                vec![
                    q("w1", "n2", Write),
                    q("r1", "n2", Read),
                    q("w2", "n1", Write),
                    q("r2", "n1", Read),
                ],
                &["n1", "n2"],
                vec!["w1", "r1"],
            ),
            // single-node: the queue follows the first granted claim's node.
            (
                SingleNodeMultiWriter,
                vec![],
                vec![
                    q("a", "n1", Write),
                    q("b", "n1", Write),
                    q("c", "n2", Write),
                ],
                &["n1", "n2"],
                vec!["a", "b"],
            ),
            // A node that may not start (lost, or no room) stops the queue.
            (
                MultiNodeMultiWriter,
                vec![],
                vec![q("a", "n1", Write), q("b", "n2", Write)],
                &["n2"],
                vec![],
            ),
        ];
        for (mode, held, queued, nodes, want) in cases {
            let got = grants(*mode, held, queued, |w| nodes.contains(&w.node));
            assert_eq!(&got, want, "{mode} held={held:?} queued={queued:?}");
        }
        assert_eq!(grants(SingleNodeWriter, &[], &[], all), Vec::<&str>::new());
    }
}
