//! Pure: what a release under way means for an operation asked of its volume. A release
//! does not end when its claim is gone: the node still unstages the volume and, where the
//! plugin needs it, ControllerUnpublishVolume detaches it. An operation that needs the
//! volume detached (an offline expansion, a deletion) and finds only that release in its
//! way is either refused with words that say so, or, when its caller follows the outcome
//! (`--wait`), accepted and held until the release has finished ([`admit_detached`],
//! [`hold_settled`]). While it is
//! held, each change of the volume asks again whether it may run now, still waits, or can
//! no longer run ([`resume`]). Table-tested below; `lifecycle::after_release` is the shell.
//!
//! What counts as the release: claims `releasing` (and `failed`, which their node cleans up
//! the same way), and attachments on nodes where no other claim holds the volume (being
//! unstaged or detached, or attached still for the instant before they move on). Anything
//! else is use: a claim on its way to ready or ready, and a blocked claim or attachment,
//! whose lost node only its return or an operator moves on.

use csivol_api::{AttachmentState, ClaimState};

/// What an operation needs of its volume's use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// No node may have the volume. The CSI spec: for a plugin with only OFFLINE expansion,
    /// "ControllerExpandVolume MUST be called ONLY after" ControllerUnpublishVolume, or
    /// NodeUnstageVolume, or NodeUnpublishVolume "has completed successfully"; and
    /// DeleteVolume's "Volume in use" error (FAILED_PRECONDITION) asks the caller to
    /// "ensure that there are no other resources using the volume".
    Detached,
    /// The operation runs on a volume in use (CreateSnapshot, ControllerModifyVolume), but
    /// one asked for while the volume's release is under way, by a caller that waits, runs
    /// once that release has finished: the release is what the caller asked for first. A
    /// snapshot is then cut of what the node left when it unstaged the volume (the spec
    /// leaves freezing a workload for a consistent snapshot to the CO, "The CO MAY freeze
    /// the application using the source volume before taking the snapshot"; csivol runs no
    /// workloads, and a release is how its callers stop one), and a modification reaches
    /// the plugin after ControllerUnpublishVolume, never between the steps of the release.
    Settled,
}

/// A claim of the volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim<'a> {
    pub alloc: &'a str,
    pub node: &'a str,
    pub state: ClaimState,
}

/// An attachment of the volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attachment<'a> {
    pub node: &'a str,
    pub state: AttachmentState,
}

/// One step of a release still under way, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step<'a> {
    /// The claim of `alloc` is being taken down on `node` (NodeUnpublishVolume).
    Claim { alloc: &'a str, node: &'a str },
    /// `node` is to unstage the volume (NodeUnstageVolume).
    Unstaging { node: &'a str },
    /// ControllerUnpublishVolume from `node` is under way.
    Detaching { node: &'a str },
}

impl Step<'_> {
    /// `node-a is unstaging it`, for messages.
    pub fn describe(self) -> String {
        match self {
            Self::Claim { alloc, node } => {
                format!("the claim of alloc {alloc} on {node} is releasing")
            }
            Self::Unstaging { node } => format!("{node} is unstaging it"),
            Self::Detaching { node } => format!("it is being detached from {node}"),
        }
    }
}

/// The volume's use, as far as an operation is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing<'a> {
    /// No claim holds it and no node has it (queued claims may wait for it).
    Free,
    /// Only a release is under way: its steps, and the claims queued for the volume (which
    /// take it once the release has finished).
    Releasing {
        steps: Vec<Step<'a>>,
        queued: Vec<&'a str>,
    },
    /// A claim holds it, or a lost node does.
    InUse,
}

/// Where the volume's use stands, from its claims and attachments.
pub fn standing<'a>(claims: &[Claim<'a>], attachments: &[Attachment<'a>]) -> Standing<'a> {
    let releasing = |s: ClaimState| matches!(s, ClaimState::Releasing | ClaimState::Failed);
    let holds = |c: &Claim<'_>| c.state != ClaimState::Queued && !releasing(c.state);
    if claims.iter().any(holds)
        || attachments
            .iter()
            .any(|a| a.state == AttachmentState::Blocked)
    {
        return Standing::InUse;
    }
    let mut steps: Vec<Step<'a>> = claims
        .iter()
        .filter(|c| releasing(c.state))
        .map(|c| Step::Claim {
            alloc: c.alloc,
            node: c.node,
        })
        .collect();
    for a in attachments {
        if steps
            .iter()
            .any(|s| matches!(s, Step::Claim { node, .. } if *node == a.node))
        {
            // Its claim's release says where the node stands.
            continue;
        }
        steps.push(match a.state {
            AttachmentState::Detaching => Step::Detaching { node: a.node },
            _ => Step::Unstaging { node: a.node },
        });
    }
    if steps.is_empty() {
        return Standing::Free;
    }
    let queued = claims
        .iter()
        .filter(|c| c.state == ClaimState::Queued)
        .map(|c| c.alloc)
        .collect();
    Standing::Releasing { steps, queued }
}

/// The operation asked for, for messages.
#[derive(Clone, Copy, Debug)]
pub struct Ask<'a> {
    pub volume: &'a str,
    /// Why the volume must be detached, as the start of the refusal: `plugin `hp` expands
    /// volumes only offline, and `tv`` (the rule adds `is still being released: ...`).
    pub why: &'a str,
    /// The command that asks for it again with `--wait`, for the hint.
    pub again: &'a str,
}

/// Why a request is refused while a release is under way: the message and its hint. Both
/// say that the volume is being released, never that its claims must be released.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub message: String,
    pub hint: String,
}

/// Whether the operation runs now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing stands in its way.
    Now,
    /// Only a release stands in its way and the caller waits: accepted, and run once the
    /// release has finished.
    Hold,
    /// A claim or a lost node uses the volume: the caller's own refusal (the release of
    /// those claims, or an unblock, is the way forward).
    InUse,
    /// Only a release stands in its way and the caller does not wait.
    Refuse(Refusal),
}

/// Whether an operation that [`Needs::Settled`] is held: asked for by a caller who waits
/// while the volume's release is under way (and no claim is queued to take the volume
/// once it has finished). Otherwise it runs now, as it may on a volume in use.
pub fn hold_settled(standing: &Standing<'_>, waits: bool) -> bool {
    waits && matches!(standing, Standing::Releasing { queued, .. } if queued.is_empty())
}

/// What becomes of an operation that [`Needs::Detached`] asked for now, by where the
/// volume stands and whether the caller `waits` for the outcome.
pub fn admit_detached(standing: &Standing<'_>, waits: bool, ask: &Ask<'_>) -> Verdict {
    let (steps, queued) = match standing {
        Standing::Free => return Verdict::Now,
        Standing::InUse => return Verdict::InUse,
        Standing::Releasing { steps, queued } => (steps, queued),
    };
    let under_way = steps
        .iter()
        .map(|s| s.describe())
        .collect::<Vec<_>>()
        .join("; ");
    let message = format!("{} is still being released: {under_way}", ask.why);
    if let Some(first) = queued.first() {
        // Held, it would never run: the queued claim takes the volume the moment the
        // release has finished.
        return Verdict::Refuse(Refusal {
            message: format!(
                "{message}; and the claim of alloc {first} is queued for it, which takes it once the release has finished"
            ),
            hint: format!(
                "release the queued claim (`csivol release {} --alloc {first}`), or ask again once the volume is free (`csivol status {}` shows it)",
                ask.volume, ask.volume
            ),
        });
    }
    if waits {
        return Verdict::Hold;
    }
    Verdict::Refuse(Refusal {
        message,
        hint: format!(
            "with --wait it waits for the release to finish, then goes ahead: `{}`",
            ask.again
        ),
    })
}

/// What becomes of a held operation now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resume {
    /// The release is still under way: it keeps waiting.
    Wait,
    /// It may run now.
    Run,
    /// It can no longer run as asked: the volume was claimed again, or its node was lost,
    /// before the release had finished. The operation is dropped with this reason.
    Drop(String),
}

/// Whether a held operation that `needs` so much may run, now that the volume stands so.
pub fn resume(needs: Needs, standing: &Standing<'_>) -> Resume {
    match (needs, standing) {
        (_, Standing::Releasing { queued, .. }) if queued.is_empty() => Resume::Wait,
        (Needs::Detached, Standing::Free) | (Needs::Settled, _) => Resume::Run,
        (Needs::Detached, Standing::Releasing { queued, .. }) => Resume::Drop(format!(
            "the claim of alloc {} was queued for the volume before its release had finished",
            queued[0]
        )),
        (Needs::Detached, Standing::InUse) => Resume::Drop(
            "the volume was claimed again (or its node was lost) before its release had finished"
                .to_owned(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AttachmentState::{Attached, Blocked, Detaching, Unstaging};
    use ClaimState::{Failed, Pending, Queued, Ready, Releasing};

    fn c<'a>(alloc: &'a str, node: &'a str, state: ClaimState) -> Claim<'a> {
        Claim { alloc, node, state }
    }

    fn a(node: &str, state: AttachmentState) -> Attachment<'_> {
        Attachment { node, state }
    }

    const ASK: Ask<'static> = Ask {
        volume: "tv",
        why: "plugin `hp` expands volumes only offline, and `tv`",
        again: "csivol volume expand tv --capacity 2097152 --wait",
    };

    #[test]
    fn where_the_use_of_a_volume_stands() {
        use Standing::{Free, InUse};
        let releasing = |steps: Vec<Step<'static>>, queued: Vec<&'static str>| {
            Standing::Releasing { steps, queued }
        };
        // (claims, attachments, standing)
        let cases: Vec<(Vec<Claim<'_>>, Vec<Attachment<'_>>, Standing<'_>)> = vec![
            (vec![], vec![], Free),
            // Queued claims alone hold nothing.
            (vec![c("q", "n2", Queued)], vec![], Free),
            // A claim on its way, or ready, is use; so is a lost node's.
            (vec![c("j", "n1", Pending)], vec![], InUse),
            (vec![c("j", "n1", Ready)], vec![a("n1", Attached)], InUse),
            (vec![c("j", "n1", ClaimState::Blocked)], vec![], InUse),
            (vec![], vec![a("n1", Blocked)], InUse),
            // A release with another claim still ready elsewhere is use.
            (
                vec![c("j", "n1", Releasing), c("k", "n2", Ready)],
                vec![a("n1", Attached), a("n2", Attached)],
                InUse,
            ),
            // The release's steps: the claim, then the node's unstage, then the detach.
            (
                vec![c("near", "n1", Releasing)],
                vec![a("n1", Attached)],
                releasing(
                    vec![Step::Claim {
                        alloc: "near",
                        node: "n1",
                    }],
                    vec![],
                ),
            ),
            (
                vec![c("near", "n1", Failed)],
                vec![],
                releasing(
                    vec![Step::Claim {
                        alloc: "near",
                        node: "n1",
                    }],
                    vec![],
                ),
            ),
            (
                vec![],
                vec![a("n1", Unstaging)],
                releasing(vec![Step::Unstaging { node: "n1" }], vec![]),
            ),
            (
                vec![],
                vec![a("n1", Attached)],
                releasing(vec![Step::Unstaging { node: "n1" }], vec![]),
            ),
            (
                vec![c("q", "n2", Queued)],
                vec![a("n1", Detaching)],
                releasing(vec![Step::Detaching { node: "n1" }], vec!["q"]),
            ),
        ];
        for (claims, atts, want) in cases {
            assert_eq!(standing(&claims, &atts), want, "{claims:?} {atts:?}");
        }
    }

    #[test]
    fn an_operation_that_needs_the_volume_detached() {
        let free = Standing::Free;
        let unstaging = standing(&[], &[a("node-a", Unstaging)]);
        let claim_going = standing(&[c("near", "node-a", Releasing)], &[a("node-a", Attached)]);
        let queued_behind = standing(&[c("far", "node-b", Queued)], &[a("node-a", Detaching)]);
        let in_use = standing(&[c("near", "node-a", Ready)], &[a("node-a", Attached)]);
        // Free: now, waiting or not.
        assert_eq!(admit_detached(&free, false, &ASK), Verdict::Now);
        assert_eq!(admit_detached(&free, true, &ASK), Verdict::Now);
        // In use by a claim: the caller's own refusal, waiting or not (a wait would have no
        // end nobody but the claimant decides).
        assert_eq!(admit_detached(&in_use, true, &ASK), Verdict::InUse);
        assert_eq!(admit_detached(&in_use, false, &ASK), Verdict::InUse);
        // Only a release: held for a caller who waits ...
        assert_eq!(admit_detached(&unstaging, true, &ASK), Verdict::Hold);
        assert_eq!(admit_detached(&claim_going, true, &ASK), Verdict::Hold);
        // ... and refused with the truth and the way to wait for the others.
        let Verdict::Refuse(r) = admit_detached(&unstaging, false, &ASK) else {
            panic!("refused without --wait");
        };
        assert_eq!(
            r.message,
            "plugin `hp` expands volumes only offline, and `tv` is still being released: node-a is unstaging it"
        );
        assert_eq!(
            r.hint,
            "with --wait it waits for the release to finish, then goes ahead: `csivol volume expand tv --capacity 2097152 --wait`"
        );
        let Verdict::Refuse(r) = admit_detached(&claim_going, false, &ASK) else {
            panic!("refused without --wait");
        };
        assert!(
            r.message
                .ends_with("released: the claim of alloc near on node-a is releasing"),
            "{r:?}"
        );
        // A hint never asks for what was done: no "release its claims first".
        assert!(
            !r.hint.contains("csivol release") && !r.hint.contains("release its claims"),
            "{r:?}"
        );
        // A claim queued behind the release would take the volume first: refused, waiting
        // or not, naming it.
        for waits in [false, true] {
            let Verdict::Refuse(r) = admit_detached(&queued_behind, waits, &ASK) else {
                panic!("refused with a claim queued");
            };
            assert!(r.message.contains("being detached from node-a"), "{r:?}");
            assert!(r.message.contains("alloc far is queued"), "{r:?}");
            assert!(r.hint.contains("csivol release tv --alloc far"), "{r:?}");
        }
    }

    #[test]
    fn an_operation_that_waits_for_a_release_only_when_asked_to() {
        let releasing = standing(&[], &[a("n1", Detaching)]);
        let queued_behind = standing(&[c("q", "n2", Queued)], &[a("n1", Detaching)]);
        let in_use = standing(&[c("j", "n1", Ready)], &[a("n1", Attached)]);
        assert!(hold_settled(&releasing, true));
        // Without a wait, and where the volume is in use, free, or about to be claimed
        // again, it runs now, as it may on a volume in use.
        assert!(!hold_settled(&releasing, false));
        assert!(!hold_settled(&in_use, true));
        assert!(!hold_settled(&Standing::Free, true));
        assert!(!hold_settled(&queued_behind, true));
    }

    #[test]
    fn a_held_operation_runs_once_the_release_has_finished() {
        let releasing = standing(&[c("near", "n1", Releasing)], &[a("n1", Attached)]);
        let detaching = standing(&[], &[a("n1", Detaching)]);
        let claimed_again = standing(&[c("other", "n2", Pending)], &[a("n1", Detaching)]);
        let node_lost = standing(&[c("near", "n1", ClaimState::Blocked)], &[a("n1", Blocked)]);
        let queued = standing(&[c("q", "n2", Queued)], &[a("n1", Detaching)]);
        for needs in [Needs::Detached, Needs::Settled] {
            assert_eq!(resume(needs, &releasing), Resume::Wait);
            assert_eq!(resume(needs, &detaching), Resume::Wait);
            assert_eq!(resume(needs, &Standing::Free), Resume::Run);
        }
        // Detached: use that comes back first drops it, saying why.
        let Resume::Drop(why) = resume(Needs::Detached, &claimed_again) else {
            panic!("dropped");
        };
        assert!(why.contains("claimed again"), "{why}");
        assert!(matches!(
            resume(Needs::Detached, &node_lost),
            Resume::Drop(_)
        ));
        let Resume::Drop(why) = resume(Needs::Detached, &queued) else {
            panic!("dropped");
        };
        assert!(why.contains("alloc q was queued"), "{why}");
        // Settled: it may run on a volume in use, so it runs rather than waits for a rest
        // that is not coming.
        assert_eq!(resume(Needs::Settled, &claimed_again), Resume::Run);
        assert_eq!(resume(Needs::Settled, &node_lost), Resume::Run);
        assert_eq!(resume(Needs::Settled, &queued), Resume::Run);
    }
}
