//! Fencing: runs a node's fence method outside the writer thread (a child process with a
//! timeout, its process group killed when it runs over), then, in one write, records the
//! evidence, marks the node `fenced` and unblocks its volumes exactly as `unblock --node`
//! does. Also the policy's automatic fences and the return of a fenced node.
//!
//! A fence that did not confirm the node off (non-zero exit, timeout, no start) changes
//! nothing but the record of the attempt. Running the command is `command`'s job;
//! recording what it did, `lifecycle::fence`'s.

pub(crate) mod command;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use csivol_api::{
    self as api, AttachmentState, FenceOutcome, FenceRecord, FenceRequest, NodeStatus,
    PlannedAction,
};

use self::command::run_command;
use crate::clock::Clock;
use crate::error::{ApiError, ApiResult};
use crate::lifecycle::{self, Evidence, Limits, failure};
use crate::liveness::Liveness;
use crate::metrics::Metrics;
use crate::model::{NodeRow, time};
use crate::store::Snapshot;
use crate::store::sqlite::db::Db;
use csivol_rules::fence::{
    self as fence_policy, Auto, Choice, FenceConfig, FenceMethod, Labels, NodeFacts,
};

/// What fencing works with: the state it reads and records in, the nodes' liveness (a
/// fenced node's heartbeats are answered `lost`), the metrics, the limits of the write
/// that records a fence, the server's clock, its fence methods and the fences running.
#[derive(Clone)]
pub struct Fencing {
    pub db: Db,
    pub live: Arc<Liveness>,
    pub metrics: Arc<Metrics>,
    pub limits: Limits,
    pub clock: Clock,
    /// The fence methods and node labels of the server's configuration.
    pub config: Arc<FenceConfig>,
    pub running: Arc<Fencer>,
}

/// The nodes whose fence command runs now: one at a time per node.
#[derive(Debug, Default)]
pub struct Fencer {
    running: Mutex<HashSet<String>>,
}

struct Running<'a> {
    fencer: &'a Fencer,
    node: String,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.fencer
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.node);
    }
}

impl Fencer {
    fn is_running(&self, node: &str) -> bool {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(node)
    }

    fn start(&self, node: &str) -> Option<Running<'_>> {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running.insert(node.to_owned()).then(|| Running {
            fencer: self,
            node: node.to_owned(),
        })
    }
}

/// What the server knows of a node, for fencing.
struct Target {
    row: NodeRow,
    labels: NodeLabels,
    actions: Vec<PlannedAction>,
}

/// A node's labels as stored: those an operator set with `csivol node label` and those its
/// agent reported.
#[derive(Debug, Clone, Default)]
pub struct NodeLabels {
    pub set: BTreeMap<String, String>,
    pub reported: BTreeMap<String, String>,
}

impl NodeLabels {
    pub fn read(conn: &impl Snapshot, node: &str) -> ApiResult<Self> {
        let facts = conn.node_fence_facts(node)?;
        Ok(Self {
            set: facts.operator_labels,
            reported: facts.reported_labels,
        })
    }
}

fn load_target(conn: &impl Snapshot, node: &str) -> ApiResult<Target> {
    let row = conn.require_node(node)?;
    let labels = NodeLabels::read(conn, node)?;
    let lost_since = row.lost_at.map(time);
    let mut actions = Vec::new();
    // What the unblock will do: every claim and attachment the node still holds (all of
    // them blocked on a lost node; a forced fence of a ready node blocks them all first,
    // as `mark_lost` does).
    for c in conn.claims_of_node(node, None)? {
        actions.push(PlannedAction {
            action: "force-release".into(),
            volume: c.volume,
            node: node.to_owned(),
            alloc: Some(c.alloc),
            lost_since: lost_since.clone(),
        });
    }
    let detached = [
        AttachmentState::Blocked,
        AttachmentState::Attaching,
        AttachmentState::Attached,
        AttachmentState::Unstaging,
    ];
    for a in conn.attachments_of_node(node)? {
        if detached.contains(&a.state) {
            actions.push(PlannedAction {
                action: "force-detach".into(),
                volume: a.volume,
                node: node.to_owned(),
                alloc: None,
                lost_since: lost_since.clone(),
            });
        }
    }
    Ok(Target {
        labels,
        row,
        actions,
    })
}

/// `POST /v1/nodes/{node}/fence`: an operator's fence.
pub async fn fence(
    fencing: &Fencing,
    node: &str,
    req: &FenceRequest,
    actor: &str,
) -> ApiResult<FenceOutcome> {
    let n = node.to_owned();
    let target = fencing.db.read(move |c| load_target(c, &n)).await?;
    match target.row.status {
        NodeStatus::Lost => {}
        NodeStatus::Ready if req.force => {}
        NodeStatus::Ready => {
            return Err(ApiError::conflict(format!(
                "node `{node}` is ready (heard from within the heartbeat TTL); fencing powers it off"
            ))
            .with_hint(format!(
                "fence only a lost node; to power off a ready one anyway: csivol fence {node} --force --reason \"...\""
            )));
        }
        NodeStatus::Fenced => {
            return Err(ApiError::conflict(format!(
                "node `{node}` is fenced already; its volumes were unblocked then"
            ))
            .with_hint(format!("`csivol node show {node}` shows its fence history")));
        }
        // A planned stop holds its claims for the node's return; fencing it is an
        // operator's decision that it will not come back.
        NodeStatus::Stopped if req.force => {}
        NodeStatus::Stopped => {
            return Err(ApiError::conflict(format!(
                "node `{node}` is stopped: its agent stopped in order and its claims wait for it to start again"
            ))
            .with_hint(format!(
                "start its agent again; if the node will not come back, fence it anyway: csivol fence {node} --force --reason \"...\""
            )));
        }
    }
    let operator = fencing.config.operator_labels(node, &target.labels.set);
    let labels = Labels {
        operator: &operator,
        agent: &target.labels.reported,
    };
    let (method, command) = match fencing.config.choose(node, labels) {
        Choice::Ready { method, command } => (method, command),
        Choice::Lacks { method, labels } => return Err(lacking(node, &method.name, &labels)),
        Choice::None { by_agent } => return Err(no_method(node, by_agent)),
    };
    let mut outcome = FenceOutcome {
        dry_run: req.dry_run,
        node: node.to_owned(),
        method: method.name.clone(),
        command: command.clone(),
        timeout_ms: method.timeout.as_millis() as u64,
        fence: None,
        actions: target.actions,
    };
    if req.dry_run {
        return Ok(outcome);
    }
    // In a task of its own: an operator who gives up waiting (the request is dropped) must
    // not kill the fence half way nor lose its evidence.
    let task = {
        let (fencing, node, method) = (fencing.clone(), node.to_owned(), method.clone());
        let (actor, reason) = (actor.to_owned(), req.reason.clone());
        tokio::spawn(async move {
            run_and_record(
                &fencing, &node, &method, command, &operator, &actor, &reason,
            )
            .await
        })
    };
    let (record, actions) = task
        .await
        .map_err(|e| ApiError::internal(format!("the fence of node `{node}` failed: {e}")))??;
    if !record.ok {
        return Err(ApiError::failed(format!(
            "the fence of node `{node}` by method `{}` did not confirm it off: {}; nothing was changed",
            method.name,
            failure(&record)
        ))
        .with_hint(format!(
            "check the node and the method (`csivol node show {node}` shows the output); if the node is really off, run: csivol unblock --node {node} --reason \"...\""
        )));
    }
    outcome.actions = actions;
    outcome.fence = Some(record);
    Ok(outcome)
}

/// The refusal of a fence whose method needs labels no operator set: nothing else may
/// fill them (an agent's label would let the node choose what its fence acts on).
fn lacking(node: &str, method: &str, labels: &[String]) -> ApiError {
    let lacks = api::FenceLacks {
        method: method.to_owned(),
        labels: labels.to_vec(),
    };
    ApiError::invalid(format!(
        "cannot fence node `{node}`: {}; only labels an operator set fill a fence command, never those its agent reports",
        lacks.what(node)
    ))
    .with_hint(format!(
        "set it: {} (or under [node_labels.{node}] in the server's config file)",
        api::label_command(node, labels)
    ))
}

/// The refusal of a fence no method applies to; saying which method the node's own
/// labels would have chosen, for the operator to check and set.
fn no_method(node: &str, by_agent: Option<(&FenceMethod, Vec<(String, String)>)>) -> ApiError {
    let unblock =
        format!("if the node is really off, run: csivol unblock --node {node} --reason \"...\"");
    match by_agent {
        None => ApiError::invalid(format!("no fence method applies to node `{node}`")).with_hint(
            format!("add a [[fence]] method for it to the server's config file; {unblock}"),
        ),
        Some((m, labels)) => {
            let s = if labels.len() == 1 { "" } else { "s" };
            let shown: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let keys: Vec<String> = labels.iter().map(|(k, _)| k.clone()).collect();
            ApiError::invalid(format!(
                "no fence method applies to node `{node}` by the labels an operator set; method {} would apply by the label{s} {} that its agent reports, which the method does not trust",
                m.name,
                shown.join(", ")
            ))
            .with_hint(format!(
                "label it as it really is: {}; {unblock}",
                api::label_command(node, &keys)
            ))
        }
    }
}

/// Runs the method (one at a time per node) and records its outcome in one write: on
/// success the node is fenced and unblocked; otherwise only the attempt is recorded.
async fn run_and_record(
    fencing: &Fencing,
    node: &str,
    method: &FenceMethod,
    command: Vec<String>,
    operator: &BTreeMap<String, String>,
    actor: &str,
    reason: &str,
) -> ApiResult<(FenceRecord, Vec<PlannedAction>)> {
    let Some(_running) = fencing.running.start(node) else {
        return Err(
            ApiError::conflict(format!("a fence of node `{node}` is running already"))
                .with_hint(format!("`csivol events --node {node}` shows how it ends")),
        );
    };
    let started_at = fencing.clock.now_ms();
    tracing::warn!(
        node,
        method = method.name,
        actor,
        "fencing: running the fence method"
    );
    let ran = run_command(method, &command, &method.environment(node, operator)).await;
    let limits = fencing.limits.clone();
    let (node_s, method_s, actor_s, reason_s) = (
        node.to_owned(),
        method.name.clone(),
        actor.to_owned(),
        reason.to_owned(),
    );
    let policy = actor.starts_with("policy:");
    let (record, actions) = fencing
        .db
        .write(move |ctx| {
            lifecycle::record_fence(
                ctx,
                Evidence {
                    node: &node_s,
                    method: &method_s,
                    command: command.clone(),
                    ran: ran.clone(),
                    started_at,
                    actor: &actor_s,
                    reason: &reason_s,
                    policy,
                },
                &limits,
            )
        })
        .await?;
    if record.ok {
        // Its heartbeats, if any, are answered `lost`: the agent registers again and
        // finds that it is fenced.
        fencing.live.fenced(node);
    }
    fencing.metrics.fence(record.ok);
    Ok((record, actions))
}

/// The fence facts of every node, for views and the policy.
pub struct NodeFence {
    /// The labels an operator set (the config file's and `csivol node label`'s).
    pub labels: BTreeMap<String, String>,
    /// The labels its agent reported.
    pub agent_labels: BTreeMap<String, String>,
    /// The method that fences it, when one applies and its command is complete.
    pub method: Option<String>,
    /// The method that applies but lacks labels for its command, and which.
    pub lacks: Option<(String, Vec<String>)>,
    pub failures: u32,
    pub error: Option<String>,
    pub next_at: Option<i64>,
}

/// Reads a node's fence facts (inside any read), as they stand at `now`.
pub fn node_fence(
    app_fence: &FenceConfig,
    conn: &impl Snapshot,
    n: &NodeRow,
    now: i64,
) -> ApiResult<NodeFence> {
    let facts = conn.node_fence_facts(&n.name)?;
    let (failures, error, failed_at) = (facts.failures, facts.error, facts.failed_at);
    let stored = NodeLabels {
        set: facts.operator_labels,
        reported: facts.reported_labels,
    };
    let operator = app_fence.operator_labels(&n.name, &stored.set);
    let choice = app_fence.choose(
        &n.name,
        Labels {
            operator: &operator,
            agent: &stored.reported,
        },
    );
    let method = choice.method();
    let next_at = method.and_then(|m| {
        match fence_policy::auto_fence(
            m,
            NodeFacts {
                status: n.status,
                lost_at: n.lost_at,
                failures,
                last_failure_at: failed_at,
            },
            now,
        ) {
            Auto::Off => None,
            Auto::At(t) => Some(t),
            Auto::Due => Some(now),
        }
    });
    Ok(NodeFence {
        method: method.map(|m| m.name.clone()),
        lacks: match &choice {
            Choice::Lacks { method, labels } => Some((method.name.clone(), labels.clone())),
            _ => None,
        },
        labels: operator,
        agent_labels: stored.reported,
        failures,
        error,
        next_at,
    })
}

/// The policy: fences lost nodes whose method has `auto_fence_after`, once it has passed,
/// and again with backoff after a failure. Its actor is `policy:<method>`.
pub async fn auto_fence(fencing: Fencing) {
    if !fencing
        .config
        .methods
        .iter()
        .any(|m| m.auto_fence_after.is_some())
    {
        return;
    }
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let config = Arc::clone(&fencing.config);
        let now = fencing.clock.now_ms();
        let due = fencing
            .db
            .read(move |c| {
                let rows = c.nodes(None)?;
                let mut due = Vec::new();
                for n in rows.iter().filter(|n| n.status == NodeStatus::Lost) {
                    let f = node_fence(&config, c, n, now)?;
                    if f.next_at.is_some_and(|t| t <= now) {
                        due.push((n.name.clone(), NodeLabels::read(c, &n.name)?));
                    }
                }
                Ok(due)
            })
            .await;
        let due = match due {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(error = %e, "failed to look for nodes to fence");
                continue;
            }
        };
        for (node, stored) in due {
            if fencing.running.is_running(&node) {
                continue;
            }
            let operator = fencing.config.operator_labels(&node, &stored.set);
            let labels = Labels {
                operator: &operator,
                agent: &stored.reported,
            };
            // Only a method that applies with a complete command: one that lacks labels is
            // shown (`status --blocked`, `node show`) and waits for an operator to set them.
            let Choice::Ready { method, command } = fencing.config.choose(&node, labels) else {
                continue;
            };
            let (fencing, method) = (fencing.clone(), method.clone());
            // Each in its own task: one hanging fence must not hold up another node's.
            tokio::spawn(async move {
                let actor = format!("policy:{}", method.name);
                let reason = format!(
                    "lost for {} (auto_fence_after)",
                    humantime::format_duration(method.auto_fence_after.unwrap_or_default())
                );
                match run_and_record(
                    &fencing, &node, &method, command, &operator, &actor, &reason,
                )
                .await
                {
                    Ok((r, _)) if r.ok => {}
                    Ok((r, _)) => tracing::warn!(node, "automatic fence failed: {}", failure(&r)),
                    // Running already (an operator's fence): the next tick looks again.
                    Err(e) => tracing::debug!(node, "automatic fence not run: {e}"),
                }
            });
        }
    }
}

/// The API form of a node's fence facts.
pub fn to_api(f: NodeFence, node: &mut api::Node) {
    node.labels = f.labels;
    node.agent_labels = f.agent_labels;
    node.fence_method = f.method;
    node.fence_lacks = f
        .lacks
        .map(|(method, labels)| api::FenceLacks { method, labels });
    node.fence_failures = f.failures;
    node.fence_error = f.error;
    node.next_fence_at = f.next_at.map(time);
}
