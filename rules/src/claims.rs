//! The claim rules, as pure functions over plain data: which claims may coexist on a volume
//! under its access mode, and whether a claim may start on its node (not lost or fenced,
//! running the volume's plugin, inside the volume's accessible topology, with room for one
//! more volume). The server calls them inside the transaction that records the claim.

use csivol_api::domain::{AccessMode, Topology};
use csivol_api::{ClaimMode, ClaimState, NodeStatus};

/// A claim already recorded on the volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held<'a> {
    pub alloc: &'a str,
    pub node: &'a str,
    pub mode: ClaimMode,
    pub state: ClaimState,
}

/// The claim being asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wanted<'a> {
    pub alloc: &'a str,
    pub node: &'a str,
    pub mode: ClaimMode,
}

/// The claim may be recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Accept {
    /// A new claim.
    New,
    /// The same alloc already holds this very claim: nothing to do.
    Existing,
}

/// Why a claim is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A write claim on a read-only access mode can never succeed.
    ReadOnlyMode { access_mode: AccessMode },
    /// The alloc already holds a different claim on this volume.
    AllocHoldsOther {
        node: String,
        mode: ClaimMode,
        state: ClaimState,
    },
    /// Another claim is in the way; `blocked` when that claim's node was lost.
    Conflict {
        rule: ConflictRule,
        holder_alloc: String,
        holder_node: String,
        blocked: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConflictRule {
    /// single-node-* modes keep every claim on one node.
    SingleNode,
    /// *-single-writer modes allow one write claim.
    SingleWriter,
    /// single-node-single-writer allows one claim at all.
    SingleClaim,
}

/// Checks `wanted` against the claims `held` on a volume with `access_mode`.
pub fn check_claim(
    access_mode: AccessMode,
    held: &[Held<'_>],
    wanted: Wanted<'_>,
) -> Result<Accept, Refusal> {
    if let Some(own) = held.iter().find(|h| h.alloc == wanted.alloc) {
        let same = own.node == wanted.node
            && own.mode == wanted.mode
            && !matches!(own.state, ClaimState::Releasing | ClaimState::Failed);
        if same {
            return Ok(Accept::Existing);
        }
        return Err(Refusal::AllocHoldsOther {
            node: own.node.to_owned(),
            mode: own.mode,
            state: own.state,
        });
    }
    if wanted.mode == ClaimMode::Write && access_mode.max_writers() == Some(0) {
        return Err(Refusal::ReadOnlyMode { access_mode });
    }
    let conflict = |rule, h: &Held<'_>| Refusal::Conflict {
        rule,
        holder_alloc: h.alloc.to_owned(),
        holder_node: h.node.to_owned(),
        blocked: h.state == ClaimState::Blocked,
    };
    // Blocked holders are reported first: they need an operator, the others only time.
    let mut ordered: Vec<&Held<'_>> = held.iter().collect();
    ordered.sort_by_key(|h| h.state != ClaimState::Blocked);
    if let Some(max) = access_mode.max_claims()
        && held.len() >= max
    {
        return Err(conflict(ConflictRule::SingleClaim, ordered[0]));
    }
    if access_mode.is_single_node()
        && let Some(h) = ordered.iter().find(|h| h.node != wanted.node)
    {
        return Err(conflict(ConflictRule::SingleNode, h));
    }
    if wanted.mode == ClaimMode::Write
        && let Some(max) = access_mode.max_writers()
    {
        let writers: Vec<_> = ordered
            .iter()
            .filter(|h| h.mode == ClaimMode::Write)
            .collect();
        if writers.len() >= max {
            return Err(conflict(ConflictRule::SingleWriter, writers[0]));
        }
    }
    Ok(Accept::New)
}

/// Whether only claims on their way out stand in the way of `wanted`: refused as things
/// are, it would be accepted once the claims being released (and the failed ones, which
/// their node cleans up the same way) are gone. A claimant that waits for the outcome may
/// then wait in the volume's queue rather than be refused: nothing but time is needed.
pub fn only_releases_in_the_way(
    access_mode: AccessMode,
    held: &[Held<'_>],
    wanted: Wanted<'_>,
) -> bool {
    let staying: Vec<Held<'_>> = held
        .iter()
        .filter(|h| !matches!(h.state, ClaimState::Releasing | ClaimState::Failed))
        .cloned()
        .collect();
    staying.len() < held.len()
        && check_claim(access_mode, held, wanted).is_err()
        && check_claim(access_mode, &staying, wanted) == Ok(Accept::New)
}

/// Whether a node with `used` of `max` slots (0: no limit) can take one more volume.
pub fn has_room(used: u32, max: u32) -> bool {
    max == 0 || used < max
}

/// What is recorded about the node a claim would start on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub status: NodeStatus,
    /// When it was lost (milliseconds since the epoch), if it is.
    pub lost_at: Option<i64>,
    /// `max_volumes_per_node` of the volume's plugin there (0: no limit), when the node runs
    /// the plugin's node service; `None` when it does not.
    pub plugin_slots: Option<u32>,
    /// How many slots of the plugin's are in use there (detaching volumes included), when
    /// the volume needs a new one; `None` when it holds one already (claimed or attached
    /// there) or when the plugin sets no limit there (nothing to count against).
    pub new_slot_among: Option<u32>,
    /// Whether the node's topology for the plugin reaches the volume ([`reachable`]).
    pub reachable: bool,
}

/// Whether a node whose plugin reports the segments `node` lies in the volume's `segment`:
/// as the CSI spec matches topology, every key of the segment is present in the node's
/// segments with the same value (the node may have more keys).
pub fn segment_matches(segment: &Topology, node: &Topology) -> bool {
    segment.iter().all(|(k, v)| node.get(k) == Some(v))
}

/// Whether a volume accessible from `accessible` (empty: from every node) can be used on a
/// node whose plugin reports the segments `node`: some segment of the volume matches.
pub fn reachable(accessible: &[Topology], node: &Topology) -> bool {
    accessible.is_empty() || accessible.iter().any(|s| segment_matches(s, node))
}

/// Why a claim may not start on its node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeRefusal {
    /// The node was powered off by a fence; it takes nothing until its agent registers.
    Fenced,
    /// The node missed its heartbeats.
    Lost { since: Option<i64> },
    /// The node's agent stopped in order; the node takes nothing until it starts again.
    Stopped,
    /// The node does not run the volume's plugin (or not its node service).
    NoPlugin,
    /// The node's topology matches none of the volume's accessible segments: the volume
    /// can never be used there.
    OutOfTopology,
    /// Every slot of the plugin's on the node is taken.
    NoRoom { used: u32, max: u32 },
}

impl NodeRefusal {
    /// Whether the claim may wait in the volume's queue for this to change: only room,
    /// which a release frees; a lost, fenced or unfit node needs more than time.
    pub fn may_wait(self) -> bool {
        matches!(self, Self::NoRoom { .. })
    }
}

/// Whether a claim may start on the node described by `p`: checked in this order, the
/// node is not fenced, not lost, not stopped, runs the plugin, reaches the volume's topology, and has
/// room unless the volume is there already.
pub fn check_placement(p: Placement) -> Result<(), NodeRefusal> {
    match p.status {
        NodeStatus::Fenced => return Err(NodeRefusal::Fenced),
        NodeStatus::Lost => return Err(NodeRefusal::Lost { since: p.lost_at }),
        NodeStatus::Stopped => return Err(NodeRefusal::Stopped),
        NodeStatus::Ready => {}
    }
    let Some(max) = p.plugin_slots else {
        return Err(NodeRefusal::NoPlugin);
    };
    if !p.reachable {
        return Err(NodeRefusal::OutOfTopology);
    }
    match p.new_slot_among {
        Some(used) if !has_room(used, max) => Err(NodeRefusal::NoRoom { used, max }),
        _ => Ok(()),
    }
}

/// Whether the volume takes any new claim now: a read or write claim by a new alloc, on a
/// live node that already holds it or on another one. A multi-node-multi-writer volume with one
/// claim blocked on a lost node still does; a single-node-writer volume held there does not.
pub fn accepts_new_claims(access_mode: AccessMode, held: &[Held<'_>]) -> bool {
    // No alloc or node is named like this (names are validated), so these are "someone new".
    const NEW: &str = "\0new";
    // A lost node (its claims blocked) takes no claim worth counting.
    let nodes = held
        .iter()
        .filter(|h| h.state != ClaimState::Blocked)
        .map(|h| h.node)
        .chain([NEW]);
    nodes.into_iter().any(|node| {
        [ClaimMode::Write, ClaimMode::Read].into_iter().any(|mode| {
            check_claim(
                access_mode,
                held,
                Wanted {
                    alloc: NEW,
                    node,
                    mode,
                },
            )
            .is_ok()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use AccessMode::*;
    use ClaimMode::{Read, Write};

    #[test]
    fn whether_a_volume_takes_new_claims() {
        use ClaimState::{Blocked, Ready};
        // (access mode, held, takes new claims)
        let cases = [
            (MultiNodeMultiWriter, vec![held("n2", Write, Blocked)], true),
            (
                MultiNodeMultiWriter,
                vec![held("n1", Write, Ready), held("n2", Write, Blocked)],
                true,
            ),
            (SingleNodeWriter, vec![held("n2", Write, Blocked)], false),
            (
                SingleNodeSingleWriter,
                vec![held("n1", Write, Ready)],
                false,
            ),
            (MultiNodeReaderOnly, vec![held("n2", Read, Blocked)], true),
            (
                MultiNodeSingleWriter,
                vec![held("n2", Write, Blocked)],
                true,
            ),
            (SingleNodeWriter, vec![], true),
        ];
        for (mode, held, takes) in cases {
            assert_eq!(accepts_new_claims(mode, &held), takes, "{mode:?} {held:?}");
        }
    }

    fn held(node: &str, mode: ClaimMode, state: ClaimState) -> Held<'_> {
        Held {
            alloc: "holder",
            node,
            mode,
            state,
        }
    }

    fn wanted(node: &str, mode: ClaimMode) -> Wanted<'_> {
        Wanted {
            alloc: "new",
            node,
            mode,
        }
    }

    /// Expected outcome of a second claim given one existing claim, for every access mode,
    /// both modes of each claim, same or other node: `None` accepted, `Some(rule)` refused.
    fn expected(
        mode: AccessMode,
        held_mode: ClaimMode,
        new_mode: ClaimMode,
        same_node: bool,
    ) -> Option<&'static str> {
        if new_mode == Write && mode.max_writers() == Some(0) {
            return Some("read-only");
        }
        if mode == SingleNodeSingleWriter {
            return Some("single-claim");
        }
        if mode.is_single_node() && !same_node {
            return Some("single-node");
        }
        if new_mode == Write && held_mode == Write && mode.max_writers() == Some(1) {
            return Some("single-writer");
        }
        None
    }

    #[test]
    fn every_access_mode_by_mode_by_node_by_blocked() {
        let mut checked = 0;
        for mode in AccessMode::ALL {
            for held_mode in [Read, Write] {
                // A reader-only volume never holds a write claim.
                if held_mode == Write && mode.max_writers() == Some(0) {
                    continue;
                }
                for new_mode in [Read, Write] {
                    for same_node in [true, false] {
                        for blocked in [false, true] {
                            let state = if blocked {
                                ClaimState::Blocked
                            } else {
                                ClaimState::Ready
                            };
                            let h = [held("node-1", held_mode, state)];
                            let node = if same_node { "node-1" } else { "node-2" };
                            let got = check_claim(mode, &h, wanted(node, new_mode));
                            let want = expected(mode, held_mode, new_mode, same_node);
                            let case = format!(
                                "{mode} held={held_mode:?} new={new_mode:?} same_node={same_node} blocked={blocked}"
                            );
                            match (want, got) {
                                (None, Ok(Accept::New)) => {}
                                (Some("read-only"), Err(Refusal::ReadOnlyMode { .. })) => {}
                                (
                                    Some(rule),
                                    Err(Refusal::Conflict {
                                        rule: r,
                                        blocked: b,
                                        holder_node,
                                        ..
                                    }),
                                ) => {
                                    let name = match r {
                                        ConflictRule::SingleNode => "single-node",
                                        ConflictRule::SingleWriter => "single-writer",
                                        ConflictRule::SingleClaim => "single-claim",
                                    };
                                    assert_eq!(name, rule, "{case}");
                                    assert_eq!(
                                        b, blocked,
                                        "{case}: a blocked holder makes it a blocked refusal"
                                    );
                                    assert_eq!(holder_node, "node-1", "{case}");
                                }
                                (want, got) => panic!("{case}: expected {want:?}, got {got:?}"),
                            }
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 96);
    }

    #[test]
    fn only_a_release_in_the_way() {
        use ClaimState::{Blocked, Failed, Queued, Ready, Releasing};
        let h = |alloc, node, state| Held {
            alloc,
            node,
            mode: Write,
            state,
        };
        let elsewhere = Wanted {
            alloc: "far",
            node: "node-b",
            mode: Write,
        };
        // (access mode, held, only releases in the way)
        let cases = [
            // The case: a single-node volume whose only claim is on its way out.
            (SingleNodeWriter, vec![h("near", "node-a", Releasing)], true),
            (SingleNodeWriter, vec![h("near", "node-a", Failed)], true),
            (
                SingleNodeSingleWriter,
                vec![h("near", "node-a", Releasing)],
                true,
            ),
            (
                MultiNodeSingleWriter,
                vec![h("near", "node-a", Releasing)],
                true,
            ),
            // A claim that stays, or a lost node's, is more than a release.
            (SingleNodeWriter, vec![h("near", "node-a", Ready)], false),
            (SingleNodeWriter, vec![h("near", "node-a", Blocked)], false),
            (
                SingleNodeWriter,
                vec![h("near", "node-a", Releasing), h("next", "node-a", Ready)],
                false,
            ),
            (
                MultiNodeSingleWriter,
                vec![h("near", "node-a", Releasing), h("w", "node-c", Ready)],
                false,
            ),
            // Nothing in the way at all: not a wait for a release.
            (
                MultiNodeMultiWriter,
                vec![h("near", "node-a", Releasing)],
                false,
            ),
            (SingleNodeWriter, vec![], false),
            // A queued claim holds nothing (the caller leaves queued claims out).
            (SingleNodeWriter, vec![h("q", "node-a", Queued)], false),
        ];
        for (mode, held, want) in cases {
            assert_eq!(
                only_releases_in_the_way(mode, &held, elsewhere),
                want,
                "{mode:?} {held:?}"
            );
        }
        // A write claim on a reader-only volume is never a matter of waiting.
        let read_only = [h("near", "node-a", Releasing)];
        assert!(!only_releases_in_the_way(
            MultiNodeReaderOnly,
            &read_only,
            elsewhere
        ));
    }

    #[test]
    fn the_same_alloc_is_idempotent_or_refused() {
        let h = [Held {
            alloc: "a",
            node: "n1",
            mode: Write,
            state: ClaimState::Ready,
        }];
        let same = Wanted {
            alloc: "a",
            node: "n1",
            mode: Write,
        };
        assert_eq!(
            check_claim(MultiNodeMultiWriter, &h, same),
            Ok(Accept::Existing)
        );
        let other_node = Wanted {
            alloc: "a",
            node: "n2",
            mode: Write,
        };
        assert!(matches!(
            check_claim(MultiNodeMultiWriter, &h, other_node),
            Err(Refusal::AllocHoldsOther { .. })
        ));
        let releasing = [Held {
            alloc: "a",
            node: "n1",
            mode: Write,
            state: ClaimState::Releasing,
        }];
        assert!(matches!(
            check_claim(MultiNodeMultiWriter, &releasing, same),
            Err(Refusal::AllocHoldsOther {
                state: ClaimState::Releasing,
                ..
            })
        ));
    }

    #[test]
    fn blocked_holders_are_named_first() {
        let h = [
            Held {
                alloc: "ok",
                node: "n2",
                mode: Write,
                state: ClaimState::Ready,
            },
            Held {
                alloc: "stuck",
                node: "n3",
                mode: Read,
                state: ClaimState::Blocked,
            },
        ];
        let got = check_claim(SingleNodeWriter, &h, wanted("n1", Read));
        assert!(
            matches!(got, Err(Refusal::Conflict { blocked: true, ref holder_alloc, .. }) if holder_alloc == "stuck")
        );
    }

    #[test]
    fn multi_writer_modes_take_many_writers() {
        let h = [
            held("n1", Write, ClaimState::Ready),
            held("n2", Write, ClaimState::Ready),
        ];
        assert_eq!(
            check_claim(MultiNodeMultiWriter, &h, wanted("n3", Write)),
            Ok(Accept::New)
        );
        let h = [held("n1", Write, ClaimState::Ready)];
        assert_eq!(
            check_claim(SingleNodeMultiWriter, &h, wanted("n1", Write)),
            Ok(Accept::New)
        );
    }

    #[test]
    fn where_a_claim_may_start() {
        use NodeRefusal as R;
        use NodeStatus::{Fenced, Lost, Ready, Stopped};
        const T: Option<i64> = Some(1_700_000_000_000);
        const IN: bool = true;
        const OUT: bool = false;
        type Case = (
            NodeStatus,
            Option<i64>,
            Option<u32>,
            Option<u32>,
            bool,
            Result<(), NodeRefusal>,
        );
        // (status, lost at, plugin's slots on the node, slots used if the volume needs a
        // new one, node inside the volume's topology, answer)
        #[rustfmt::skip] // One case a line: the table is the specification.
        let cases: [Case; 24] = [
            (Ready,  None, Some(0), Some(0),   IN,  Ok(())),
            (Ready,  None, Some(0), Some(900), IN,  Ok(())),
            (Ready,  None, Some(2), Some(1),   IN,  Ok(())),
            (Ready,  None, Some(2), Some(2),   IN,  Err(R::NoRoom { used: 2, max: 2 })),
            (Ready,  None, Some(2), Some(3),   IN,  Err(R::NoRoom { used: 3, max: 2 })),
            // The volume is on the node already: it takes no new slot.
            (Ready,  None, Some(2), None,      IN,  Ok(())),
            (Ready,  None, Some(1), None,      IN,  Ok(())),
            (Ready,  None, None,    Some(0),   IN,  Err(R::NoPlugin)),
            (Ready,  None, None,    None,      IN,  Err(R::NoPlugin)),
            // Outside the topology: refused before room is looked at (no release makes
            // room for it), after the plugin (a node without it has no topology for it).
            (Ready,  None, Some(0), Some(0),   OUT, Err(R::OutOfTopology)),
            (Ready,  None, Some(2), Some(2),   OUT, Err(R::OutOfTopology)),
            (Ready,  None, Some(2), None,      OUT, Err(R::OutOfTopology)),
            (Ready,  None, None,    Some(0),   OUT, Err(R::NoPlugin)),
            (Lost,   T,    Some(0), Some(0),   IN,  Err(R::Lost { since: T })),
            (Lost,   None, Some(0), Some(0),   IN,  Err(R::Lost { since: None })),
            // A lost node is named as lost before anything else is checked.
            (Lost,   T,    None,    Some(5),   IN,  Err(R::Lost { since: T })),
            (Lost,   T,    Some(1), Some(1),   IN,  Err(R::Lost { since: T })),
            (Lost,   T,    Some(0), Some(0),   OUT, Err(R::Lost { since: T })),
            (Fenced, None, Some(0), Some(0),   IN,  Err(R::Fenced)),
            (Fenced, T,    None,    Some(1),   IN,  Err(R::Fenced)),
            (Fenced, T,    Some(1), Some(1),   IN,  Err(R::Fenced)),
            (Fenced, T,    Some(1), Some(1),   OUT, Err(R::Fenced)),
            // A planned stop: nothing new until the agent is back, whatever else holds.
            (Stopped, None, Some(0), Some(0),  IN,  Err(R::Stopped)),
            (Stopped, None, None,    Some(1),  OUT, Err(R::Stopped)),
        ];
        for (status, lost_at, plugin_slots, new_slot_among, reachable, want) in cases {
            let p = Placement {
                status,
                lost_at,
                plugin_slots,
                new_slot_among,
                reachable,
            };
            assert_eq!(check_placement(p), want, "{p:?}");
        }
        // Only room is worth waiting for in the queue.
        let waits = [
            (NodeRefusal::Fenced, false),
            (NodeRefusal::Lost { since: T }, false),
            (NodeRefusal::NoPlugin, false),
            (NodeRefusal::OutOfTopology, false),
            (NodeRefusal::NoRoom { used: 1, max: 1 }, true),
        ];
        for (r, want) in waits {
            assert_eq!(r.may_wait(), want, "{r:?}");
        }
    }

    fn segments(s: &str) -> Topology {
        s.split(',')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').expect("KEY=VALUE");
                (k.to_owned(), v.to_owned())
            })
            .collect()
    }

    #[test]
    fn which_nodes_reach_a_volume() {
        // (volume's accessible segments, the node's segments, reachable)
        #[rustfmt::skip] // One case a line: the table is the specification.
        let cases: [(&[&str], &str, bool); 14] = [
            // No accessible topology: the volume is reachable from every node.
            (&[],                      "",                true),
            (&[],                      "zone=a",          true),
            (&["zone=a"],              "zone=a",          true),
            (&["zone=a"],              "zone=b",          false),
            // Every key of the segment must be present with the same value...
            (&["zone=a"],              "",                false),
            (&["zone=a"],              "region=eu",       false),
            (&["zone=a,rack=1"],       "zone=a",          false),
            (&["zone=a,rack=1"],       "zone=a,rack=2",   false),
            (&["zone=a,rack=1"],       "rack=1,zone=a",   true),
            // ...and the node may have more keys.
            (&["zone=a"],              "zone=a,rack=1",   true),
            // Any one segment of the volume is enough.
            (&["zone=a", "zone=b"],    "zone=b",          true),
            (&["zone=a", "zone=b"],    "zone=c",          false),
            // An empty segment constrains nothing.
            (&[""],                    "zone=c",          true),
            (&["zone=a", ""],          "",                true),
        ];
        for (accessible, node, want) in cases {
            let accessible: Vec<Topology> = accessible.iter().map(|s| segments(s)).collect();
            assert_eq!(
                reachable(&accessible, &segments(node)),
                want,
                "{accessible:?} from {node:?}"
            );
        }
    }

    #[test]
    fn room() {
        assert!(has_room(5, 0));
        assert!(has_room(1, 2));
        assert!(!has_room(2, 2));
    }
}
