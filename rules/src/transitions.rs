//! The attachment lifecycle as a pure function: from a volume's recorded facts (its claims,
//! its attachments, the status of their nodes, whether its plugin needs ControllerPublish)
//! to the next states of its claims and attachments and the controller operations to queue.
//!
//! This is the one place that derives a volume's next step; the server's lifecycle code
//! loads the facts, calls [`next`], and writes the changes back in the same transaction.
//! The state a new claim starts in ([`first_state`]) is read from the same table, by
//! asking what [`next`] would do with it.

use std::collections::BTreeMap;

use csivol_api::domain::AccessMode;
use csivol_api::{AttachmentState, ClaimState, NodeStatus};

/// What is recorded about one volume.
#[derive(Clone, Debug)]
pub struct Facts<'a> {
    pub access_mode: AccessMode,
    /// Whether the volume's plugin needs ControllerPublishVolume, as its registrations say.
    pub controller_publish: bool,
    /// The volume's claims, in arrival order (earlier claims take a new attachment first).
    pub claims: Vec<ClaimFact<'a>>,
    /// The volume's attachments, at most one per node.
    pub attachments: Vec<AttachmentFact<'a>>,
    /// The status of the nodes named by the claims and attachments. A node not listed is
    /// taken as ready: claims are recorded only on registered nodes, and the server's
    /// shell lists every node involved.
    pub nodes: Vec<(&'a str, NodeStatus)>,
    /// Held back: the state was restored from a backup (or went back in time), and a node
    /// that may hold the volume unknown to the state has not said yet what it holds.
    /// Nothing brings the volume to a node meanwhile: no claim moves towards being
    /// mounted (no attachment made, no ControllerPublish, no claim on to `attaching` or
    /// `publishing`); what takes it down still moves.
    pub held: bool,
    /// The nodes of the volume's claims where it is not attached and the plugin's slots
    /// are all taken by other volumes' attachments (detaching ones included): a new
    /// attachment there waits until one of them is gone. The CSI spec's NodeGetInfo
    /// `max_volumes_per_node` is the "Maximum number of volumes that controller can
    /// publish to the node", and a volume is published there until its
    /// ControllerUnpublishVolume returns.
    pub full: Vec<&'a str>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClaimFact<'a> {
    pub alloc: &'a str,
    pub node: &'a str,
    pub state: ClaimState,
    /// Blocked while being released: when its node returns, it is taken down, not resumed.
    /// It still holds its attachment until then.
    pub release_pending: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttachmentFact<'a> {
    pub node: &'a str,
    pub state: AttachmentState,
    /// The node keeps the volume staged after its last claim there was released (its
    /// pool lingers) and the linger has not run out.
    pub lingering: bool,
}

/// A change to one attachment of the volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachmentChange<'a> {
    /// A new attachment of the volume to `node`.
    Create {
        node: &'a str,
        state: AttachmentState,
    },
    /// The existing attachment to `node` moves to `state`.
    Set {
        node: &'a str,
        state: AttachmentState,
    },
}

/// A controller operation to queue (unless one of that kind is queued already).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op<'a> {
    /// ControllerPublishVolume of the volume to `node`.
    Publish { node: &'a str },
}

/// What [`next`] decided, in the order to apply it: attachments, then operations, then
/// claims.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes<'a> {
    pub attachments: Vec<AttachmentChange<'a>>,
    pub ops: Vec<Op<'a>>,
    /// `(alloc, new state)` of each claim whose state changes.
    pub claims: Vec<(&'a str, ClaimState)>,
}

/// Moves the volume's claims and attachments as far forward as `facts` allow.
///
/// - An attachment to a node where no claim is left (queued ones hold nothing) waits for
///   the node to unstage (`unstaging`); one that gains a claim again is `attached`.
/// - A [lingering](AttachmentFact::lingering) attachment stays `attached` with no claim,
///   so that the node's next claim skips NodeStageVolume, until a claim on another node
///   wants a single-node volume: then it is taken down like any other, at once, and that
///   claim waits for it as for any attachment elsewhere (`pending`). A staging holds its
///   volume on its node: the CSI spec's SINGLE_NODE_WRITER "can only be published once as
///   read/write on a single node, at any given time", its NodeStageVolume is called "after
///   `ControllerPublishVolume` is called for the given volume on the given node", and
///   NodeUnstageVolume must succeed "before calling `ControllerUnpublishVolume` for the
///   given node": the volume goes to another node only after the unstage and the detach.
/// - A claim on a node whose slots are [full](Facts::full) stays `pending`: its
///   attachment is made, and ControllerPublishVolume sent, once a slot is free.
/// - Nothing moves on a node that is lost or fenced: its loss blocked what it held, and
///   only its return, an unblock or a fence changes that.
/// - While the volume is [held](Facts::held), a claim moves back (its attachment being
///   detached: `pending`; blocked: `blocked`), never forward.
/// - Ready, releasing, failed, blocked and queued claims are moved by other facts (the
///   node's reports, the queue, an unblock), never here.
pub fn next<'a>(facts: &Facts<'a>) -> Changes<'a> {
    let mut changes = Changes::default();
    let ready = |node: &str| {
        facts
            .nodes
            .iter()
            .find(|(n, _)| *n == node)
            .is_none_or(|(_, s)| *s == NodeStatus::Ready)
    };
    let mut atts: BTreeMap<&'a str, AttachmentState> = facts
        .attachments
        .iter()
        .map(|a| (a.node, a.state))
        .collect();

    let lingering: Vec<&str> = facts
        .attachments
        .iter()
        .filter(|a| a.lingering)
        .map(|a| a.node)
        .collect();
    // A claim that would take the volume to another node: it ends a linger where the
    // volume can be on one node only.
    let wanted_elsewhere = |node: &str| {
        facts.access_mode.is_single_node()
            && facts.claims.iter().any(|c| {
                c.node != node
                    && matches!(
                        c.state,
                        ClaimState::Pending | ClaimState::Attaching | ClaimState::Publishing
                    )
            })
    };
    for (&node, state) in atts.iter_mut() {
        if !ready(node) {
            continue;
        }
        let has_claims = facts
            .claims
            .iter()
            .any(|c| c.node == node && c.state != ClaimState::Queued);
        let kept = lingering.contains(&node) && !wanted_elsewhere(node);
        let to = match *state {
            AttachmentState::Attached if !has_claims && !kept => AttachmentState::Unstaging,
            AttachmentState::Unstaging if has_claims => AttachmentState::Attached,
            _ => continue,
        };
        changes
            .attachments
            .push(AttachmentChange::Set { node, state: to });
        *state = to;
    }

    for c in &facts.claims {
        if !matches!(
            c.state,
            ClaimState::Pending | ClaimState::Attaching | ClaimState::Publishing
        ) || !ready(c.node)
        {
            continue;
        }
        if facts.held {
            let back = match atts.get(c.node) {
                Some(AttachmentState::Detaching) => Some(ClaimState::Pending),
                Some(AttachmentState::Blocked) => Some(ClaimState::Blocked),
                _ => None,
            };
            if let Some(to) = back.filter(|to| *to != c.state) {
                changes.claims.push((c.alloc, to));
            }
            continue;
        }
        let to = match atts.get(c.node) {
            Some(AttachmentState::Attached) => ClaimState::Publishing,
            Some(AttachmentState::Attaching) => ClaimState::Attaching,
            Some(AttachmentState::Detaching | AttachmentState::Unstaging) => ClaimState::Pending,
            Some(AttachmentState::Blocked) => ClaimState::Blocked,
            None if facts.access_mode.is_single_node() && !atts.is_empty() => {
                // The volume must be detached from its other node first.
                ClaimState::Pending
            }
            // No slot of the node's is free for it yet.
            None if facts.full.contains(&c.node) => ClaimState::Pending,
            None if facts.controller_publish => {
                changes.attachments.push(AttachmentChange::Create {
                    node: c.node,
                    state: AttachmentState::Attaching,
                });
                changes.ops.push(Op::Publish { node: c.node });
                atts.insert(c.node, AttachmentState::Attaching);
                ClaimState::Attaching
            }
            None => {
                changes.attachments.push(AttachmentChange::Create {
                    node: c.node,
                    state: AttachmentState::Attached,
                });
                atts.insert(c.node, AttachmentState::Attached);
                ClaimState::Publishing
            }
        };
        if to != c.state {
            changes.claims.push((c.alloc, to));
        }
    }
    changes
}

/// The state a claim is recorded in: `pending`, then wherever [`next`] takes it in the
/// same transaction.
pub const NEW_CLAIM: ClaimState = ClaimState::Pending;

/// The state a new claim on `node` would reach once recorded (for dry runs): what [`next`]
/// does with it after the volume's claims, so that a dry run and the real claim agree.
pub fn first_state(facts: &Facts<'_>, node: &str) -> ClaimState {
    // No alloc is named like this (names are validated), so it is nobody else's claim.
    const NEW: &str = "\0new";
    let mut facts = facts.clone();
    facts.claims.push(ClaimFact {
        alloc: NEW,
        node,
        state: NEW_CLAIM,
        release_pending: false,
    });
    let changes = next(&facts);
    changes
        .claims
        .iter()
        .find(|(alloc, _)| *alloc == NEW)
        .map_or(NEW_CLAIM, |(_, s)| *s)
}

#[cfg(test)]
mod tests;
