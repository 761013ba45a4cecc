//! The node agent's endpoints: register, heartbeat, desired state, reports.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{
    ClaimMount, ControllerCapabilities, ControllerOp, GroupMember, NodeCapabilities, NodeInfo,
    NodeStatus, PluginCapabilities, PluginInfo, PublishContext, VolumeCapability,
};

/// One plugin as a node agent found it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginRegistration {
    /// csivol's id for the plugin (what volumes name in `plugin`).
    pub id: String,
    pub info: PluginInfo,
    pub capabilities: PluginCapabilities,
    /// Node service facts; `None` when this agent only hosts the controller.
    #[serde(default)]
    pub node: Option<NodePluginRegistration>,
    /// Controller capabilities, when this agent hosts the plugin's controller.
    #[serde(default)]
    pub controller: Option<ControllerCapabilities>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodePluginRegistration {
    pub info: NodeInfo,
    pub capabilities: NodeCapabilities,
    /// How the agent checks this plugin's volumes ready (`--ready-check`): `mount` (what
    /// the plugin made at the staging path and the target, as observed when its calls
    /// succeeded) or `exists`. Absent from older agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_check: Option<String>,
}

/// `POST /v1/nodes/{node}/stopping`: the agent stops in order (SIGTERM, SIGINT) and says so
/// before it exits. The node is `stopped`, not lost: its claims stay held, nothing moves,
/// and it is treated as lost only once it has been silent for the server's
/// `planned_stop_grace`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoppingRequest {
    /// Whether the agent took its volumes down through its plugins first
    /// (`--take-down-on-stop`) or left them mounted for the workloads.
    pub took_down: bool,
}

/// What a plugin made on the node for one claim, as its agent observed it: at the staging
/// path when NodeStageVolume succeeded, at the target once it was first ready. Each is
/// `mount`, `device` (a block device node), `mounts-inside` (stagings only: mounts in the
/// staging directory) or `none`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObservedShape {
    /// `None` for a plugin without STAGE_UNSTAGE_VOLUME.
    #[serde(default)]
    pub staging: Option<String>,
    pub target: String,
}

/// `POST /v1/nodes/{node}/register`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    pub plugins: Vec<PluginRegistration>,
    /// Self-fencing delay in milliseconds, if the agent self-fences.
    #[serde(default)]
    pub fence_after_ms: Option<u64>,
    /// What the node has published now (after its restart recovery).
    #[serde(default)]
    pub published: Vec<ClaimRef>,
    /// Volumes the node has staged now.
    #[serde(default)]
    pub staged: Vec<String>,
    /// The node's labels (`bmc = "10.0.0.11"`), for choosing and running its fence method.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterResponse {
    pub heartbeat_ttl_ms: u64,
    pub index: u64,
    /// The generation `index` belongs to (see [`crate::GENERATION_HEADER`]); absent from
    /// an older server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<String>,
}

/// `POST /v1/nodes/{node}/heartbeat` answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatResponse {
    pub status: NodeStatus,
    pub heartbeat_ttl_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimRef {
    pub volume: String,
    pub alloc: String,
}

/// What a volume needs on a node: enough to call the plugin with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeVolume {
    pub volume: String,
    pub plugin: String,
    pub external_id: String,
    pub capability: VolumeCapability,
    #[serde(default)]
    pub context: BTreeMap<String, String>,
    /// Passed to node calls; never logged.
    #[serde(default)]
    pub secrets: BTreeMap<String, String>,
    #[serde(default)]
    pub publish_context: PublishContext,
}

/// A claim the node must have published.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredPublish {
    pub alloc: String,
    pub read_only: bool,
    /// The claim's mount: its group and how it is applied. Absent from an older server.
    #[serde(default, skip_serializing_if = "ClaimMount::is_empty")]
    pub mount: ClaimMount,
    #[serde(flatten)]
    pub volume: NodeVolume,
}

/// A claim the node must take down (release, failure), then report unpublished.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredUnpublish {
    pub volume: String,
    pub alloc: String,
    pub plugin: String,
    pub external_id: String,
}

/// A volume with no claim left on the node: unstage it (if staged) and report unstaged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredUnstage {
    pub volume: String,
    pub plugin: String,
    pub external_id: String,
}

/// A volume with no claim left on the node that the node keeps staged (its pool lingers):
/// not unstaged, so that the node's next claim of it skips NodeStageVolume. Without the
/// entry, a staging no claim needs is unstaged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredKeepStaged {
    pub volume: String,
    pub plugin: String,
    pub external_id: String,
}

/// A volume staged or published on the node that must grow there (NodeExpandVolume)
/// after its controller grew it; reported `node_expanded` or `node_expand_error`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredExpand {
    pub volume: String,
    pub plugin: String,
    pub external_id: String,
    pub capacity_bytes: u64,
    pub capability: VolumeCapability,
    /// Bumped on every retry; a report names the attempt it answers.
    pub attempt: u32,
    /// Do not start before this time (unix ms): the server's backoff after an error.
    #[serde(default)]
    pub not_before_ms: u64,
    #[serde(default)]
    pub secrets: BTreeMap<String, String>,
}

/// `GET /v1/nodes/{node}/desired`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredState {
    pub index: u64,
    pub status: Option<NodeStatus>,
    pub publish: Vec<DesiredPublish>,
    pub unpublish: Vec<DesiredUnpublish>,
    pub unstage: Vec<DesiredUnstage>,
    pub controller_ops: Vec<ControllerOp>,
    /// Volumes to grow on the node.
    #[serde(default)]
    pub expand: Vec<DesiredExpand>,
    /// Stagings to keep with no claim (absent from an older server: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keep_staged: Vec<DesiredKeepStaged>,
    /// When the server last asked the node to read its plugins' attach limits again
    /// (NodeGetInfo), in unix ms: after a ControllerPublishVolume to the node answered
    /// RESOURCE_EXHAUSTED. 0: never. The agent reads them again when this grows.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub refresh_limits: u64,
    /// Set when this answer holds only the volumes changed since the agent's index
    /// (`?since=`); absent when it is the whole state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<DesiredChanges>,
    /// The generation of the state `index` belongs to (see [`crate::GENERATION_HEADER`]):
    /// changes apply only to a state of the same generation. An answer to a request that
    /// named another generation is the whole state. Absent from an older server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<String>,
    /// Set while the server waits for this node to report what it holds (the state was
    /// restored from a backup): the agent registers again, with what is mounted, and acts
    /// on nothing until it has. `status` then says `lost`, which an older agent reads the
    /// same way.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub register_again: bool,
    /// For a controller host: the GetCapacity calls to make for each plugin it hosts whose
    /// controller reports GET_CAPACITY (every topology segment of the plugin's nodes and
    /// every parameter set of its volumes). Always whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity: Vec<crate::CapacityQueries>,
}

/// What a desired state sent as changes replaces.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredChanges {
    /// The index the changes are counted from: the state the agent holds.
    pub since: u64,
    /// The volumes whose entries (`publish`, `unpublish`, `unstage`, `expand`,
    /// `keep_staged`) the answer
    /// replaces, by name; the entries of other volumes stand. `status` and
    /// `controller_ops` are always whole.
    pub volumes: Vec<String>,
}

/// A desired state sent as changes does not apply to the state held.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the desired state holds index {held}, the changes are since {since}")]
pub struct StaleChanges {
    pub held: u64,
    pub since: u64,
}

/// What a CreateVolume was asked for: the plugin, the volume, and the generation of the
/// server's state whose desired state handed the operation out (an operation's id means
/// something only within its generation).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedFor {
    pub plugin: String,
    pub volume: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<String>,
}

impl DesiredState {
    /// Follows the server's answer: a whole state replaces this one; changes replace the
    /// entries of the volumes they name, if they are counted from this state's index. The
    /// entries are kept in volume order either way ([`DesiredState::entries_of`]).
    pub fn apply(&mut self, next: DesiredState) -> Result<(), StaleChanges> {
        let Some(changes) = next.changes else {
            *self = next;
            self.sort();
            return Ok(());
        };
        // Changes counted in another generation of the state do not apply to this one,
        // whatever their index.
        let other_generation = next.generation.is_some()
            && self.generation.is_some()
            && next.generation != self.generation;
        if changes.since != self.index || other_generation {
            return Err(StaleChanges {
                held: self.index,
                since: changes.since,
            });
        }
        let mut volumes = changes.volumes;
        volumes.sort_unstable();
        let named = |v: &str| volumes.binary_search_by(|n| n.as_str().cmp(v)).is_ok();
        self.publish.retain(|p| !named(&p.volume.volume));
        self.publish.extend(next.publish);
        self.unpublish.retain(|u| !named(&u.volume));
        self.unpublish.extend(next.unpublish);
        self.unstage.retain(|u| !named(&u.volume));
        self.unstage.extend(next.unstage);
        self.expand.retain(|e| !named(&e.volume));
        self.expand.extend(next.expand);
        self.keep_staged.retain(|k| !named(&k.volume));
        self.keep_staged.extend(next.keep_staged);
        self.sort();
        self.index = next.index;
        self.status = next.status;
        self.controller_ops = next.controller_ops;
        self.refresh_limits = next.refresh_limits;
        self.generation = next.generation;
        self.register_again = next.register_again;
        self.capacity = next.capacity;
        Ok(())
    }
}

impl DesiredState {
    /// Puts the entries in volume order (then alloc order), which [`DesiredState::apply`]
    /// keeps.
    fn sort(&mut self) {
        self.publish
            .sort_by(|a, b| (&a.volume.volume, &a.alloc).cmp(&(&b.volume.volume, &b.alloc)));
        self.unpublish
            .sort_by(|a, b| (&a.volume, &a.alloc).cmp(&(&b.volume, &b.alloc)));
        self.unstage.sort_by(|a, b| a.volume.cmp(&b.volume));
        self.expand.sort_by(|a, b| a.volume.cmp(&b.volume));
        self.keep_staged.sort_by(|a, b| a.volume.cmp(&b.volume));
    }

    /// The staging of `volume` the node keeps with no claim, if the server asks for one.
    pub fn kept_staging(&self, volume: &str) -> Option<&DesiredKeepStaged> {
        let at = self
            .keep_staged
            .partition_point(|k| k.volume.as_str() < volume);
        self.keep_staged.get(at).filter(|k| k.volume == volume)
    }

    /// One volume's entries, found by their order (as [`DesiredState::apply`] leaves them):
    /// its publications, its unpublications, and whether it is to be unstaged.
    pub fn entries_of(&self, volume: &str) -> (&[DesiredPublish], &[DesiredUnpublish], bool) {
        fn range<'a, T>(all: &'a [T], volume: &str, of: impl Fn(&T) -> &str) -> &'a [T] {
            let start = all.partition_point(|e| of(e) < volume);
            let end = start + all[start..].partition_point(|e| of(e) == volume);
            &all[start..end]
        }
        (
            range(&self.publish, volume, |p| &p.volume.volume),
            range(&self.unpublish, volume, |u| &u.volume),
            !range(&self.unstage, volume, |u| &u.volume).is_empty(),
        )
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// `POST /v1/nodes/{node}/reports`: a batch of outcomes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportBatch {
    pub reports: Vec<Report>,
}

/// A plugin error as the agent saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginError {
    /// gRPC code name (`UNAVAILABLE`), or `TIMEOUT` for a readiness timeout.
    pub code: String,
    pub message: String,
    /// Whether the agent gave up (the claim fails) or will retry at `next_retry_at_ms`.
    #[serde(rename = "final")]
    pub is_final: bool,
    #[serde(default)]
    pub next_retry_at_ms: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Report {
    /// Staged (if needed), published and checked ready.
    Published {
        volume: String,
        alloc: String,
        target_path: String,
        /// What the plugin made for it (absent from older agents, and when a claim's
        /// publication is reported again without being made again).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        observed: Option<ObservedShape>,
        /// What csivol's own ownership change did to the target, where it gave the
        /// claim's group itself (as recorded on the node: reported again, never redone).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ownership: Option<crate::OwnershipChange>,
    },
    /// Not published on the node (any more).
    Unpublished {
        volume: String,
        alloc: String,
    },
    /// Nothing of the volume is staged on the node (any more).
    Unstaged {
        volume: String,
    },
    /// A published claim's mount vanished or lost its backing (`reason`); the node is
    /// publishing it again.
    Drift {
        volume: String,
        alloc: String,
        reason: String,
    },
    /// A claim waits on the node for `reason` since `since_ms`, at most `timeout_ms`.
    Waiting {
        volume: String,
        alloc: String,
        reason: String,
        since_ms: u64,
        timeout_ms: u64,
    },
    /// The plugin's VOLUME_CONDITION for a published claim, sent when it changes.
    Condition {
        volume: String,
        alloc: String,
        abnormal: bool,
        message: String,
    },
    /// A node step failed.
    ClaimError {
        volume: String,
        alloc: String,
        error: PluginError,
    },
    /// A volume-level node step (NodeUnstageVolume) failed; it is retried.
    VolumeError {
        volume: String,
        error: PluginError,
    },
    ControllerPublished {
        op: u64,
        attempt: u32,
        publish_context: PublishContext,
    },
    ControllerUnpublished {
        op: u64,
        attempt: u32,
    },
    Created {
        op: u64,
        attempt: u32,
        external_id: String,
        capacity_bytes: u64,
        #[serde(default)]
        context: BTreeMap<String, String>,
        /// The volume's `accessible_topology` as CreateVolume returned it.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        accessible_topology: Vec<crate::Topology>,
        /// What the call was asked for, so that an answer that arrives late (its operation
        /// given to another host, or finished, meanwhile) still says what it made. Absent
        /// from an older agent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        made_for: Option<CreatedFor>,
    },
    Deleted {
        op: u64,
        attempt: u32,
    },
    SnapshotCreated {
        op: u64,
        attempt: u32,
        snapshot_id: String,
        size_bytes: u64,
        ready_to_use: bool,
        #[serde(default)]
        creation_time_ms: Option<u64>,
    },
    SnapshotDeleted {
        op: u64,
        attempt: u32,
    },
    /// CreateVolumeGroupSnapshot or GetVolumeGroupSnapshot answered.
    GroupSnapshotCreated {
        op: u64,
        attempt: u32,
        group_snapshot_id: String,
        ready_to_use: bool,
        #[serde(default)]
        creation_time_ms: Option<u64>,
        snapshots: Vec<GroupMember>,
    },
    /// DeleteVolumeGroupSnapshot succeeded.
    GroupSnapshotDeleted {
        op: u64,
        attempt: u32,
    },
    /// ValidateVolumeCapabilities answered: `not_confirmed` names what the plugin did not
    /// confirm of what it was asked (empty: all of it), `message` is the plugin's.
    Validated {
        op: u64,
        attempt: u32,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        not_confirmed: Vec<String>,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        message: String,
    },
    /// ListSnapshots with a `snapshot_id` filter answered: the snapshot, or none.
    SnapshotFound {
        op: u64,
        attempt: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        snapshot: Option<crate::ListedSnapshot>,
    },
    /// Every snapshot a controller host's plugin listed (all pages of ListSnapshots).
    ControllerSnapshots {
        plugin: String,
        snapshots: Vec<crate::ListedSnapshot>,
    },
    OpError {
        op: u64,
        attempt: u32,
        error: PluginError,
    },
    /// ControllerExpandVolume succeeded.
    Expanded {
        op: u64,
        attempt: u32,
        capacity_bytes: u64,
        node_expansion_required: bool,
    },
    /// ControllerModifyVolume succeeded.
    Modified {
        op: u64,
        attempt: u32,
    },
    /// NodeExpandVolume succeeded (or there was nothing on the node to grow).
    NodeExpanded {
        volume: String,
        attempt: u32,
        capacity_bytes: u64,
    },
    /// NodeExpandVolume failed.
    NodeExpandError {
        volume: String,
        attempt: u32,
        error: PluginError,
    },
    /// Every volume a controller host's plugin listed (all pages of ListVolumes), with the
    /// nodes each is published to; listed from `started_ms` on.
    ControllerVolumes {
        plugin: String,
        started_ms: u64,
        volumes: Vec<crate::ListedVolume>,
    },
    /// A controller host's GetCapacity answers for one plugin, one per query it was given
    /// (`DesiredState::capacity`) that the plugin answered.
    Capacity {
        plugin: String,
        samples: Vec<crate::CapacitySample>,
    },
    /// A node plugin's attach limit, read again with NodeGetInfo (`reason` says why); sent
    /// when it changed, or when the read was asked for.
    NodeLimits {
        plugin: String,
        max_volumes_per_node: u32,
        reason: String,
    },
    /// The agent lost the server for its fence time and took everything down.
    Fenced {
        at_ms: u64,
        volumes: Vec<String>,
    },
}

impl Report {
    /// The controller operation a report answers, as its id and the attempt it ran: its
    /// success (one variant per kind of operation) or its failure (`op_error`). `None` for
    /// the reports about claims, volumes and the node itself.
    pub fn controller_op(&self) -> Option<(u64, u32)> {
        match self {
            Self::ControllerPublished { op, attempt, .. }
            | Self::ControllerUnpublished { op, attempt }
            | Self::Created { op, attempt, .. }
            | Self::Deleted { op, attempt }
            | Self::SnapshotCreated { op, attempt, .. }
            | Self::SnapshotDeleted { op, attempt }
            | Self::GroupSnapshotCreated { op, attempt, .. }
            | Self::GroupSnapshotDeleted { op, attempt }
            | Self::Validated { op, attempt, .. }
            | Self::SnapshotFound { op, attempt, .. }
            | Self::OpError { op, attempt, .. }
            | Self::Expanded { op, attempt, .. }
            | Self::Modified { op, attempt } => Some((*op, *attempt)),
            Self::Published { .. }
            | Self::Unpublished { .. }
            | Self::Unstaged { .. }
            | Self::Drift { .. }
            | Self::Waiting { .. }
            | Self::Condition { .. }
            | Self::ClaimError { .. }
            | Self::VolumeError { .. }
            | Self::NodeExpanded { .. }
            | Self::NodeExpandError { .. }
            | Self::ControllerVolumes { .. }
            | Self::ControllerSnapshots { .. }
            | Self::Capacity { .. }
            | Self::NodeLimits { .. }
            | Self::Fenced { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ControllerOpKind;

    fn unstage(volume: &str) -> DesiredUnstage {
        DesiredUnstage {
            volume: volume.into(),
            plugin: "p".into(),
            external_id: format!("e-{volume}"),
        }
    }

    #[test]
    fn changes_replace_the_entries_of_the_volumes_they_name() {
        let mut held = DesiredState {
            index: 5,
            unstage: vec![unstage("a"), unstage("b"), unstage("c")],
            ..DesiredState::default()
        };
        let changes = |since, volumes: &[&str], unstaged: &[&str]| DesiredState {
            index: 9,
            unstage: unstaged.iter().map(|v| unstage(v)).collect(),
            changes: Some(DesiredChanges {
                since,
                volumes: volumes.iter().map(|v| v.to_string()).collect(),
            }),
            ..DesiredState::default()
        };
        // `b` is gone, `d` is new, `a` and `c` stand.
        held.apply(changes(5, &["d", "b"], &["d"])).unwrap();
        let left: Vec<_> = held.unstage.iter().map(|u| u.volume.as_str()).collect();
        assert_eq!(left, ["a", "c", "d"]);
        assert_eq!((held.index, &held.changes), (9, &None));

        let stale = held.apply(changes(5, &["a"], &[])).unwrap_err();
        assert_eq!(stale, StaleChanges { held: 9, since: 5 });
        assert_eq!(held.unstage.len(), 3, "stale changes change nothing");

        held.apply(DesiredState {
            index: 10,
            ..DesiredState::default()
        })
        .unwrap();
        assert!(held.unstage.is_empty(), "a whole state replaces everything");
    }

    #[test]
    fn changes_of_another_generation_do_not_apply_whatever_their_index() {
        let generation = |g: &str| Some(g.to_owned());
        let mut held = DesiredState {
            index: 5,
            unstage: vec![unstage("a")],
            generation: generation("g1"),
            ..DesiredState::default()
        };
        let changes = |g: Option<String>| DesiredState {
            index: 6,
            changes: Some(DesiredChanges {
                since: 5,
                volumes: vec!["a".into()],
            }),
            generation: g,
            ..DesiredState::default()
        };
        assert!(
            held.apply(changes(generation("g2"))).is_err(),
            "the state went back in time and forward again to the same index"
        );
        assert_eq!(held.unstage.len(), 1, "stale changes change nothing");
        held.apply(changes(generation("g1"))).unwrap();
        assert!(held.unstage.is_empty());
        assert_eq!(held.generation, generation("g1"));
        // An older server names no generation: its changes apply by index, as before.
        held.index = 5;
        held.apply(changes(None)).unwrap();
    }

    #[test]
    fn stagings_kept_are_replaced_with_their_volumes_and_found_by_name() {
        let keep = |volume: &str| DesiredKeepStaged {
            volume: volume.into(),
            plugin: "p".into(),
            external_id: format!("e-{volume}"),
        };
        let mut held = DesiredState::default();
        held.apply(DesiredState {
            index: 5,
            keep_staged: vec![keep("c"), keep("a")],
            ..DesiredState::default()
        })
        .unwrap();
        assert_eq!(held.kept_staging("a"), Some(&keep("a")));
        assert_eq!(held.kept_staging("b"), None);
        // `a`'s linger ended, `b` began one; `c`'s stands.
        held.apply(DesiredState {
            index: 6,
            keep_staged: vec![keep("b")],
            changes: Some(DesiredChanges {
                since: 5,
                volumes: vec!["a".into(), "b".into()],
            }),
            ..DesiredState::default()
        })
        .unwrap();
        let kept: Vec<_> = held.keep_staged.iter().map(|k| k.volume.as_str()).collect();
        assert_eq!(kept, ["b", "c"]);
        assert_eq!(held.kept_staging("a"), None);
        // An older server's answer has none.
        let old: DesiredState =
            serde_json::from_str(r#"{"index":1,"status":null,"publish":[],"unpublish":[],"unstage":[],"controller_ops":[]}"#)
                .unwrap();
        assert!(old.keep_staged.is_empty());
    }

    fn publish(volume: &str, alloc: &str) -> DesiredPublish {
        DesiredPublish {
            alloc: alloc.into(),
            read_only: false,
            mount: ClaimMount::default(),
            volume: NodeVolume {
                volume: volume.into(),
                plugin: "p".into(),
                external_id: format!("e-{volume}"),
                capability: VolumeCapability {
                    access_type: crate::domain::AccessType::BlockDevice,
                    access_mode: crate::domain::AccessMode::SingleNodeWriter,
                },
                context: BTreeMap::new(),
                secrets: BTreeMap::new(),
                publish_context: PublishContext::default(),
            },
        }
    }

    #[test]
    fn a_volumes_entries_are_found_in_order_whole_or_changed() {
        // A whole state in no particular order is put in volume order.
        let mut held = DesiredState::default();
        held.apply(DesiredState {
            index: 3,
            publish: vec![publish("c", "a1"), publish("a", "a2"), publish("a", "a1")],
            unstage: vec![unstage("d"), unstage("b")],
            ..DesiredState::default()
        })
        .unwrap();
        let allocs = |d: &DesiredState, v: &str| -> Vec<String> {
            d.entries_of(v).0.iter().map(|p| p.alloc.clone()).collect()
        };
        assert_eq!(allocs(&held, "a"), ["a1", "a2"]);
        assert_eq!(allocs(&held, "c"), ["a1"]);
        assert!(
            allocs(&held, "b").is_empty() && held.entries_of("b").2,
            "b: unstaged only"
        );
        let (publish_of, unpublish_of, unstage_of) = held.entries_of("z");
        assert!(publish_of.is_empty() && unpublish_of.is_empty() && !unstage_of);
        // Changes keep the order.
        held.apply(DesiredState {
            index: 4,
            publish: vec![publish("b", "a9")],
            unpublish: vec![DesiredUnpublish {
                volume: "a".into(),
                alloc: "a1".into(),
                plugin: "p".into(),
                external_id: "e-a".into(),
            }],
            changes: Some(DesiredChanges {
                since: 3,
                volumes: vec!["b".into(), "a".into()],
            }),
            ..DesiredState::default()
        })
        .unwrap();
        assert!(allocs(&held, "a").is_empty());
        assert_eq!(held.entries_of("a").1.len(), 1);
        assert_eq!(allocs(&held, "b"), ["a9"]);
        assert!(
            !held.entries_of("b").2,
            "b's unstage is gone with its changes"
        );
        assert!(held.entries_of("d").2);
    }

    #[test]
    fn reports_are_tagged() {
        let r = Report::Unstaged { volume: "v".into() };
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"kind":"unstaged","volume":"v"}"#
        );
        let op = ControllerOp {
            id: 1,
            attempt: 0,
            plugin: "p".into(),
            not_before_ms: 0,
            kind: ControllerOpKind::Delete {
                volume: "v".into(),
                external_id: "e".into(),
                secrets: BTreeMap::new(),
            },
        };
        let json = serde_json::to_value(&op).unwrap();
        assert_eq!(json["op"], "delete");
        assert_eq!(serde_json::from_value::<ControllerOp>(json).unwrap(), op);
    }
}
