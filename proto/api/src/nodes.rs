//! Nodes, their plugins, eligibility and fencing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::PlannedAction;

/// Whether a node is heard from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeStatus {
    Ready,
    Lost,
    /// Powered off by a confirmed fence; stays so until its agent registers again holding
    /// nothing.
    Fenced,
    /// Its agent stopped in order and said so (`node-stopping`): its claims stay held and
    /// nothing moves; silent past the server's `planned_stop_grace`, it is lost.
    Stopped,
}

impl NodeStatus {
    pub const ALL: [Self; 4] = [Self::Ready, Self::Lost, Self::Fenced, Self::Stopped];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::Lost => "lost",
            Self::Fenced => "fenced",
            Self::Stopped => "stopped",
        }
    }
}

/// Whether a node takes new claims: an operator's choice, kept across registrations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Eligibility {
    /// New claims are accepted (the default).
    #[default]
    Eligible,
    /// No new claims (`csivol node eligibility NODE --disable`); existing ones stay.
    Ineligible,
    /// No new claims, and the operator waits for the node's claims to be released by their
    /// owners (`csivol node drain`); nothing is force-released.
    Draining,
}

impl Eligibility {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Eligible => "eligible",
            Self::Ineligible => "ineligible",
            Self::Draining => "draining",
        }
    }
}

/// `POST /v1/nodes/{node}/eligibility`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EligibilityRequest {
    pub eligibility: Eligibility,
}

/// A node and its plugins.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub name: String,
    pub status: NodeStatus,
    pub last_heartbeat: Option<String>,
    /// The server's heartbeat TTL: a node silent for longer is marked lost.
    #[serde(default)]
    pub heartbeat_ttl_ms: u64,
    /// For a ready node, how long it has been silent: since its last heartbeat, or since
    /// the server started (every node gets a full TTL after a restart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silent_ms: Option<u64>,
    /// Whether the node takes new claims.
    #[serde(default)]
    pub eligibility: Eligibility,
    pub lost_at: Option<String>,
    /// The agent's self-fencing delay (`30s`), if it self-fences.
    pub fence_after: Option<String>,
    /// When the agent last fenced itself, as it reported.
    pub fenced_at: Option<String>,
    /// For a stopped node: when its agent said it stopped, whether it took its volumes
    /// down, and when the node counts as lost unless it comes back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<NodeStop>,
    pub plugins: Vec<NodePlugin>,
    pub registered_at: String,
    /// The labels an operator set for the node: `csivol node label` and the server's
    /// `[node_labels]`. Only these choose and fill its fence method.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The labels the node's own agent reports (`csivol-agent node --label`): shown, never
    /// used to fence it, except a key a method lists in `trust_agent_labels` to select by.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub agent_labels: BTreeMap<String, String>,
    /// The server's fence method for this node, if one applies and can run.
    #[serde(default)]
    pub fence_method: Option<String>,
    /// The method that applies to the node but cannot run: its command needs labels no
    /// operator set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence_lacks: Option<FenceLacks>,
    /// Failed automatic fences since the node was lost, and the last one's error.
    #[serde(default)]
    pub fence_failures: u32,
    #[serde(default)]
    pub fence_error: Option<String>,
    /// When the policy fences it (again), for a lost node under `auto_fence_after`.
    #[serde(default)]
    pub next_fence_at: Option<String>,
    /// Fence attempts, newest first (only when one node is shown).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fences: Vec<FenceRecord>,
}

/// A planned stop of a node's agent (`node-stopping`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStop {
    pub at: String,
    /// Whether the agent took its volumes down first or left them mounted.
    pub took_down: bool,
    /// When the node is treated as lost (its claims blocked, auto-fence free to act) if its
    /// agent has not come back: the stop plus the server's `planned_stop_grace`.
    pub lost_at: String,
}

/// A fence method that applies to a node but lacks labels for its command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceLacks {
    pub method: String,
    /// The label keys its command uses (`{bmc}`) that no operator set for the node.
    pub labels: Vec<String>,
}

impl FenceLacks {
    /// `method ipmi lacks label bmc for node-2: csivol node label node-2 bmc=…`.
    pub fn describe(&self, node: &str) -> String {
        format!("{}: {}", self.what(node), label_command(node, &self.labels))
    }

    /// `method ipmi lacks label bmc for node-2`.
    pub fn what(&self, node: &str) -> String {
        let s = if self.labels.len() == 1 { "" } else { "s" };
        format!(
            "method {} lacks label{s} {} for {node}",
            self.method,
            self.labels.join(", ")
        )
    }
}

/// `csivol node label NODE KEY=… KEY=…`: the command that sets these labels.
pub fn label_command(node: &str, keys: &[String]) -> String {
    let set: Vec<String> = keys.iter().map(|k| format!("{k}=…")).collect();
    format!("csivol node label {node} {}", set.join(" "))
}

/// `POST /v1/nodes/{node}/labels`: an operator sets and removes a node's labels.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeLabelRequest {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub set: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
}

/// One run of a fence method: the evidence that a node is off, or why it is not proved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceRecord {
    pub id: u64,
    pub at: String,
    pub node: String,
    pub method: String,
    /// The command as run (arguments filled in; environment values are never shown).
    pub command: Vec<String>,
    /// The exit status; `None` when it timed out or could not start or was killed.
    pub exit_status: Option<i32>,
    pub timed_out: bool,
    /// Its stdout and stderr, bounded.
    pub output: String,
    pub duration_ms: u64,
    /// `operator:<token id>` or `policy:<method>`.
    pub actor: String,
    pub reason: String,
    /// Exit 0 within the timeout: the node is confirmed off.
    pub ok: bool,
}

/// `POST /v1/nodes/{node}/fence`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FenceRequest {
    pub reason: String,
    #[serde(default)]
    pub dry_run: bool,
    /// Fence a node that is not lost (ready). The CLI asks twice.
    #[serde(default)]
    pub force: bool,
}

/// What a fence did (or with `dry_run`, would do): the method and command, the evidence,
/// and the unblock that followed it. Deserialises as an [`ActionPlan`] too.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceOutcome {
    pub dry_run: bool,
    pub node: String,
    pub method: String,
    pub command: Vec<String>,
    pub timeout_ms: u64,
    /// The evidence; `None` on a dry run.
    #[serde(default)]
    pub fence: Option<FenceRecord>,
    /// The unblock the fence carries out (or would).
    pub actions: Vec<PlannedAction>,
}

impl Node {
    /// A ready node that has missed heartbeats: silent for at least half the TTL (agents
    /// heartbeat every third of it), so it is lost soon unless one arrives.
    pub fn at_risk(&self) -> bool {
        self.status == NodeStatus::Ready
            && self.silent_ms.is_some_and(|s| {
                self.heartbeat_ttl_ms > 0 && s.saturating_mul(2) >= self.heartbeat_ttl_ms
            })
    }

    /// How long until the server marks a ready node lost, unless a heartbeat arrives.
    pub fn lost_in_ms(&self) -> Option<u64> {
        let silent = self
            .silent_ms
            .filter(|_| self.status == NodeStatus::Ready)?;
        Some(self.heartbeat_ttl_ms.saturating_sub(silent))
    }
}

fn none_lingering(n: &u32) -> bool {
    *n == 0
}

/// A plugin as one node runs it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePlugin {
    pub id: String,
    /// The plugin's own id for the node, from NodeGetInfo.
    pub node_id: String,
    /// 0: no limit.
    pub max_volumes: u32,
    /// Attachments of this plugin's volumes on the node, detaching ones included.
    pub used: u32,
    /// Of `used`, the stagings kept after a release (a pool's linger): each gives its slot
    /// up to another volume's claim on the node that needs it.
    #[serde(default, skip_serializing_if = "none_lingering")]
    pub lingering: u32,
    /// Whether this node's agent hosts the plugin's controller.
    pub controller: bool,
    /// The node's topology segments as the plugin reports them (NodeGetInfo's
    /// `accessible_topology`, e.g. `{"zone": "a"}`); empty when it reports none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub topology: BTreeMap<String, String>,
    /// The last change of `max_volumes` the server heard of: the limit is read again with
    /// NodeGetInfo while the node runs (every `node_limits_refresh`, and at once after a
    /// NodeStageVolume or ControllerPublishVolume answered RESOURCE_EXHAUSTED) and at each
    /// registration. Absent when it never changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_change: Option<LimitChange>,
    /// When the limit was last read again while the node ran (absent: not since the
    /// agent registered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_read_at: Option<String>,
    /// How the node's agent checks this plugin's volumes ready (`mount`, `exists`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_check: Option<String>,
    /// What the plugin made on the node for the last claim its agent published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<PluginObservation>,
}

/// What a plugin made on a node for one claim (see [`crate::ObservedShape`]), and when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginObservation {
    pub volume: String,
    pub alloc: String,
    pub at: String,
    #[serde(flatten)]
    pub shape: crate::ObservedShape,
}

/// A node plugin's attach limit changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitChange {
    /// The limit before (0: no limit).
    pub from: u32,
    /// The limit after (0: no limit).
    pub to: u32,
    pub at: String,
    /// Why it was read: `read every 5m`, `NodeStageVolume answered RESOURCE_EXHAUSTED`,
    /// `ControllerPublishVolume to this node answered RESOURCE_EXHAUSTED`, `registration`.
    pub reason: String,
}

impl LimitChange {
    /// `raised` or `lowered` (no limit is the highest).
    pub fn direction(&self) -> &'static str {
        if self.to == 0 || (self.from != 0 && self.to > self.from) {
            "raised"
        } else {
            "lowered"
        }
    }
}

/// An attach limit for people: the number, or `no limit` for 0.
pub fn limit_text(n: u32) -> String {
    if n == 0 {
        "no limit".to_owned()
    } else {
        n.to_string()
    }
}

/// A plugin across the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plugin {
    pub id: String,
    pub name: String,
    pub version: String,
    pub nodes_healthy: u32,
    pub nodes_expected: u32,
    pub controllers_healthy: u32,
    pub controllers_expected: u32,
    pub controller_publish: bool,
    pub stage_unstage: bool,
    /// Its controller reports CREATE_DELETE_SNAPSHOT (`csivol snapshot`, `--from-snapshot`).
    #[serde(default)]
    pub snapshots: bool,
    /// Its controller reports CLONE_VOLUME (`volume create --from-volume`).
    #[serde(default)]
    pub clone_volume: bool,
    /// Its controller reports MODIFY_VOLUME (`volume modify`, `mutable_parameters`).
    #[serde(default)]
    pub modify_volume: bool,
    /// Its group controller reports CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT
    /// (`snapshot create --group`).
    #[serde(default)]
    pub group_snapshots: bool,
    pub volumes: u32,
    /// The nodes that run the plugin's node service, with their topology.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<PluginNode>,
    /// Its controller operations: what waits, what runs, how long each waited.
    #[serde(default)]
    pub queue: ControllerQueue,
    /// What its controller said it has left (GetCapacity), per segment and parameter set.
    #[serde(default)]
    pub capacity: crate::PluginCapacity,
    /// Each node's CSI calls to it, by method, over the node agent's life (kept in the
    /// server's memory: empty until the nodes' agents sent their counts to this server).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<crate::PluginCallStats>,
}

/// A plugin's controller operations as the server schedules them, within the plugin's
/// concurrency, shared fairly between attaches, detaches and the rest.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerQueue {
    /// Operations in flight at most (the server's `--controller-concurrency`).
    pub concurrency: u32,
    /// Due operations waiting for a free slot or a controller host, by kind (`publish`,
    /// `unpublish`, `create`, ...).
    #[serde(default)]
    pub waiting: BTreeMap<String, QueuedKind>,
    /// Operations waiting out a retry's backoff, by kind: not due yet.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub backing_off: BTreeMap<String, u32>,
    /// How long the oldest due operation has waited; absent when none waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_wait_ms: Option<u64>,
    /// The oldest wait past which the queue is shown with a warning (the server's
    /// `--controller-queue-warning`).
    pub warn_after_ms: u64,
    /// The operations running now, oldest first, each with how long it waited to run.
    #[serde(default)]
    pub running: Vec<RunningOp>,
}

impl ControllerQueue {
    /// Whether the oldest due operation has waited past the warning threshold.
    pub fn behind(&self) -> bool {
        self.oldest_wait_ms
            .is_some_and(|w| self.warn_after_ms > 0 && w >= self.warn_after_ms)
    }

    /// Due operations waiting, all kinds.
    pub fn depth(&self) -> u32 {
        self.waiting.values().map(|k| k.count).sum()
    }
}

/// Waiting operations of one kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuedKind {
    pub count: u32,
    /// How long the oldest of them has waited.
    pub oldest_wait_ms: u64,
}

/// A controller operation running on a controller host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningOp {
    pub id: u64,
    pub kind: String,
    /// The volume it is for (`snapshot/NAME` for a snapshot's).
    pub volume: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub host: String,
    /// How long it waited, from due (queued, or its retry due) to handed to its host.
    pub waited_ms: u64,
    /// How long it has been running.
    pub running_ms: u64,
}

/// A node that runs a plugin's node service, as `plugin show` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginNode {
    pub name: String,
    pub status: NodeStatus,
    /// The node's topology segments for this plugin (NodeGetInfo's `accessible_topology`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub topology: BTreeMap<String, String>,
    /// How the node's agent checks the plugin's volumes ready (`mount`, `exists`); absent
    /// for an older agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_check: Option<String>,
    /// What the plugin made there for the last claim published on the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<PluginObservation>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_at_risk_have_missed_heartbeats_for_half_the_ttl() {
        let node = |status, silent_ms| Node {
            name: "n1".into(),
            status,
            last_heartbeat: None,
            heartbeat_ttl_ms: 10_000,
            silent_ms,
            eligibility: Eligibility::Eligible,
            lost_at: None,
            fence_after: None,
            fenced_at: None,
            stopped: None,
            plugins: Vec::new(),
            registered_at: String::new(),
            labels: BTreeMap::new(),
            agent_labels: BTreeMap::new(),
            fence_method: None,
            fence_lacks: None,
            fence_failures: 0,
            fence_error: None,
            next_fence_at: None,
            fences: Vec::new(),
        };
        // (status, silent for, at risk, lost in)
        let cases = [
            (NodeStatus::Ready, Some(1_000), false, Some(9_000)),
            (NodeStatus::Ready, Some(4_999), false, Some(5_001)),
            (NodeStatus::Ready, Some(5_000), true, Some(5_000)),
            (NodeStatus::Ready, Some(12_000), true, Some(0)),
            (NodeStatus::Ready, None, false, None),
            (NodeStatus::Lost, Some(12_000), false, None),
        ];
        for (status, silent, risk, left) in cases {
            let n = node(status, silent);
            assert_eq!(n.at_risk(), risk, "{status:?} {silent:?}");
            assert_eq!(n.lost_in_ms(), left, "{status:?} {silent:?}");
        }
    }
}
