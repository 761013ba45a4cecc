//! Fencing: runs a node's fence method outside the writer thread (a child process with a
//! timeout, its process group killed when it runs over), then, in one write, records the
//! evidence, marks the node `fenced` and unblocks its volumes exactly as `unblock --node`
//! does. Also the policy's automatic fences and the return of a fenced node.
//!
//! A fence that did not confirm the node off (non-zero exit, timeout, no start) changes
//! nothing but the record of the attempt. Running the command is `fence_command`'s job.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use csivol_api::{
    self as api, FenceOutcome, FenceRecord, FenceRequest, NodeStatus, PlannedAction,
    RegisterRequest,
};
use rusqlite::{Connection, params};

use super::db::{WriteCtx, now_ms};
use super::error::{ApiError, ApiResult};
use super::fence_command::{Ran, run_command};
use super::http::App;
use super::lifecycle::{self, event};
use super::model::{NodeRow, time};
use super::store::{Snapshot, Txn};
use super::watch::Key;
use csivol_rules::fence::{self as fence_policy, Auto, Choice, FenceMethod, Labels, NodeFacts};
use csivol_rules::kinds::EventKind;

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
    pub fn read(conn: &Connection, node: &str) -> ApiResult<Self> {
        let (set, reported): (String, String) = conn
            .prepare_cached("SELECT operator_labels, labels FROM nodes WHERE name = ?1")?
            .query_row([node], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(Self {
            set: serde_json::from_str(&set)?,
            reported: serde_json::from_str(&reported)?,
        })
    }
}

fn load_target(conn: &Connection, node: &str) -> ApiResult<Target> {
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
    let mut stmt = conn.prepare_cached(
        "SELECT volume FROM attachments WHERE node = ?1 AND state IN ('blocked', 'attaching', 'attached', 'unstaging') ORDER BY volume",
    )?;
    for v in stmt.query_map([node], |r| r.get::<_, String>(0))? {
        actions.push(PlannedAction {
            action: "force-detach".into(),
            volume: v?,
            node: node.to_owned(),
            alloc: None,
            lost_since: lost_since.clone(),
        });
    }
    Ok(Target {
        labels,
        row,
        actions,
    })
}

/// `POST /v1/nodes/{node}/fence`: an operator's fence.
pub async fn fence(
    app: &App,
    node: &str,
    req: &FenceRequest,
    actor: &str,
) -> ApiResult<FenceOutcome> {
    let n = node.to_owned();
    let target = app.db.read(move |c| load_target(c, &n)).await?;
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
    }
    let operator = app.fence.operator_labels(node, &target.labels.set);
    let labels = Labels {
        operator: &operator,
        agent: &target.labels.reported,
    };
    let (method, command) = match app.fence.choose(node, labels) {
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
        let (app, node, method) = (app.clone(), node.to_owned(), method.clone());
        let (actor, reason) = (actor.to_owned(), req.reason.clone());
        tokio::spawn(async move {
            run_and_record(&app, &node, &method, command, &operator, &actor, &reason).await
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

/// Why a fence did not confirm the node off, in a few words.
fn failure(r: &FenceRecord) -> String {
    let took = humantime::format_duration(Duration::from_millis(r.duration_ms));
    let mut s = match (r.timed_out, r.exit_status) {
        (true, _) => format!("it ran past its timeout and was killed after {took}"),
        (false, Some(code)) => format!("it exited with status {code} after {took}"),
        (false, None) if r.output.starts_with("failed to start") => r.output.clone(),
        (false, None) => format!("it was killed by a signal after {took}"),
    };
    let tail = last_line(&r.output);
    if !tail.is_empty() && !r.output.starts_with("failed to start") {
        s.push_str(&format!(" (output: {tail})"));
    }
    s
}

/// The output on one line for the event log, at most [`BRIEF`] characters (the whole of it
/// is in the fence history).
fn brief(output: &str) -> String {
    let joined = output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !matches!(*l, "stdout:" | "stderr:"))
        .collect::<Vec<_>>()
        .join(" | ");
    match joined.char_indices().nth(BRIEF) {
        Some((cut, _)) => format!("{}...", &joined[..cut]),
        None => joined,
    }
}

/// Most characters of a fence's output in its event.
const BRIEF: usize = 400;

fn last_line(output: &str) -> &str {
    output
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
}

/// Runs the method (one at a time per node) and records its outcome in one write: on
/// success the node is fenced and unblocked; otherwise only the attempt is recorded.
async fn run_and_record(
    app: &App,
    node: &str,
    method: &FenceMethod,
    command: Vec<String>,
    operator: &BTreeMap<String, String>,
    actor: &str,
    reason: &str,
) -> ApiResult<(FenceRecord, Vec<PlannedAction>)> {
    let Some(_running) = app.fencer.start(node) else {
        return Err(
            ApiError::conflict(format!("a fence of node `{node}` is running already"))
                .with_hint(format!("`csivol events --node {node}` shows how it ends")),
        );
    };
    let started_at = now_ms();
    tracing::warn!(
        node,
        method = method.name,
        actor,
        "fencing: running the fence method"
    );
    let ran = run_command(method, &command, &method.environment(node, operator)).await;
    let limits = app.limits.clone();
    let (node_s, method_s, actor_s, reason_s) = (
        node.to_owned(),
        method.name.clone(),
        actor.to_owned(),
        reason.to_owned(),
    );
    let policy = actor.starts_with("policy:");
    let (record, actions) = app
        .db
        .write(move |ctx| {
            record(
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
        app.live.fenced(node);
    }
    app.metrics.fence(record.ok);
    Ok((record, actions))
}

struct Evidence<'a> {
    node: &'a str,
    method: &'a str,
    command: Vec<String>,
    ran: Ran,
    started_at: i64,
    actor: &'a str,
    reason: &'a str,
    policy: bool,
}

/// One write: the attempt's record and event; on success the node fenced (blocked first
/// if it was ready) and its volumes unblocked, the unblock's events naming the fence.
fn record(
    ctx: &mut WriteCtx<'_>,
    e: Evidence<'_>,
    limits: &lifecycle::Limits,
) -> ApiResult<(FenceRecord, Vec<PlannedAction>)> {
    let ok = e.ran.ok();
    let duration_ms = e.ran.duration.as_millis() as u64;
    ctx.tx.execute(
        "INSERT INTO fences (node, at, method, command, exit_status, timed_out, output, duration_ms, actor, reason, ok) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        params![
            e.node,
            e.started_at,
            e.method,
            serde_json::to_string(&e.command)?,
            e.ran.exit_status,
            e.ran.timed_out,
            e.ran.output,
            duration_ms as i64,
            e.actor,
            e.reason,
            ok
        ],
    )?;
    let record = FenceRecord {
        id: ctx.tx.last_insert_rowid() as u64,
        at: time(e.started_at),
        node: e.node.to_owned(),
        method: e.method.to_owned(),
        command: e.command,
        exit_status: e.ran.exit_status,
        timed_out: e.ran.timed_out,
        output: e.ran.output,
        duration_ms,
        actor: e.actor.to_owned(),
        reason: e.reason.to_owned(),
        ok,
    };
    ctx.touch(Key::Node(e.node.to_owned()));
    let shown = shell_words(&record.command);
    let took = humantime::format_duration(Duration::from_millis(duration_ms));
    if !ok {
        let why = failure(&record);
        if e.policy {
            ctx.tx.execute(
                "UPDATE nodes SET fence_failures = fence_failures + 1, fence_error = ?1, fence_failed_at = ?2 WHERE name = ?3",
                params![why, ctx.now, e.node],
            )?;
        }
        event(
            ctx,
            EventKind::NodeFenceFailed,
            None,
            Some(e.node),
            None,
            e.actor,
            format!(
                "fence #{} by method {} failed: `{shown}`: {why}; nothing was changed (reason: {})",
                record.id, e.method, e.reason
            ),
        )?;
        return Ok((record, Vec::new()));
    }
    let n = ctx.require_node(e.node)?;
    if n.status == NodeStatus::Ready {
        lifecycle::mark_lost(ctx, e.node, &format!("fenced by {}", e.actor), limits)?;
    }
    ctx.tx.execute(
        "UPDATE nodes SET status = 'fenced', fence_failures = 0, fence_error = NULL, fence_failed_at = NULL WHERE name = ?1",
        [e.node],
    )?;
    let tail = brief(&record.output);
    event(
        ctx,
        EventKind::NodeFenced,
        None,
        Some(e.node),
        None,
        e.actor,
        format!(
            "fence #{} by method {}: `{shown}` exited 0 in {took}: node confirmed off{}; reason: {}",
            record.id,
            e.method,
            if tail.is_empty() {
                String::new()
            } else {
                format!(" (output: {tail})")
            },
            e.reason
        ),
    )?;
    let blocked: bool = ctx.tx.query_row(
        "SELECT EXISTS (SELECT 1 FROM claims WHERE node = ?1 AND state = 'blocked') \
         OR EXISTS (SELECT 1 FROM attachments WHERE node = ?1 AND state = 'blocked')",
        [e.node],
        |r| r.get(0),
    )?;
    let actions = if blocked {
        let why = format!(
            "fenced (fence #{}, method {}): {}",
            record.id, e.method, e.reason
        );
        lifecycle::unblock_node(ctx, e.node, &why, false, e.actor, limits)?.actions
    } else {
        Vec::new()
    };
    Ok((record, actions))
}

/// A command line as it would be typed (for messages; arguments with spaces quoted).
fn shell_words(command: &[String]) -> String {
    command
        .iter()
        .map(|a| {
            if a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"') {
                format!("'{}'", a.replace('\'', "'\\''"))
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A fenced node registers again. Its claims were force-released by the fence, so none
/// is resumed: what it still reports published is recorded as taken down (its desired
/// state lists nothing, so its agent takes it down). It stays `fenced` until it registers
/// holding nothing.
pub fn returned(ctx: &mut impl Txn, node: &str, req: &RegisterRequest) -> ApiResult<()> {
    let actor = format!("node:{node}");
    for p in &req.published {
        event(
            ctx,
            EventKind::ClaimTakenDown,
            Some(&p.volume),
            Some(node),
            Some(&p.alloc),
            &actor,
            "node came back after it was fenced; the fence released this claim: the node takes it down",
        )?;
    }
    if req.published.is_empty() && req.staged.is_empty() {
        return event(
            ctx,
            EventKind::NodeReturned,
            None,
            Some(node),
            None,
            &actor,
            "fenced node registered again holding nothing: ready",
        );
    }
    ctx.set_node_status(node, NodeStatus::Fenced)?;
    event(
        ctx,
        EventKind::NodeReturned,
        None,
        Some(node),
        None,
        &actor,
        format!(
            "fenced node registered again still holding {} publication(s) and {} staging(s); it stays fenced while it takes them down",
            req.published.len(),
            req.staged.len()
        ),
    )
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

/// Reads a node's fence facts (inside any read).
pub fn node_fence(
    app_fence: &fence_policy::FenceConfig,
    conn: &Connection,
    n: &NodeRow,
) -> ApiResult<NodeFence> {
    let (failures, error, failed_at): (u32, Option<String>, Option<i64>) = conn
        .prepare_cached(
            "SELECT fence_failures, fence_error, fence_failed_at FROM nodes WHERE name = ?1",
        )?
        .query_row([&n.name], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    let stored = NodeLabels::read(conn, &n.name)?;
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
            now_ms(),
        ) {
            Auto::Off => None,
            Auto::At(t) => Some(t),
            Auto::Due => Some(now_ms()),
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

/// A node's fence history, newest first.
pub fn history(conn: &Connection, node: &str) -> ApiResult<Vec<FenceRecord>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, at, node, method, command, exit_status, timed_out, output, duration_ms, actor, reason, ok \
         FROM fences WHERE node = ?1 ORDER BY id DESC LIMIT 20",
    )?;
    let rows = stmt.query_map([node], |r| {
        Ok((
            FenceRecord {
                id: r.get::<_, i64>(0)? as u64,
                at: time(r.get(1)?),
                node: r.get(2)?,
                method: r.get(3)?,
                command: Vec::new(),
                exit_status: r.get(5)?,
                timed_out: r.get(6)?,
                output: r.get(7)?,
                duration_ms: r.get::<_, i64>(8)? as u64,
                actor: r.get(9)?,
                reason: r.get(10)?,
                ok: r.get(11)?,
            },
            r.get::<_, String>(4)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (mut rec, command) = row?;
        rec.command = serde_json::from_str(&command)?;
        out.push(rec);
    }
    Ok(out)
}

/// The policy: fences lost nodes whose method has `auto_fence_after`, once it has passed,
/// and again with backoff after a failure. Its actor is `policy:<method>`.
pub async fn auto_fence(app: App) {
    if !app
        .fence
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
        let config = std::sync::Arc::clone(&app.fence);
        let due = app
            .db
            .read(move |c| {
                let sql = format!(
                    "SELECT {} FROM nodes WHERE status = 'lost'",
                    super::store::sqlite::NODE_COLUMNS
                );
                let rows: Vec<NodeRow> = c
                    .prepare_cached(&sql)?
                    .query_map([], NodeRow::from_row)?
                    .collect::<Result<_, _>>()?;
                let mut due = Vec::new();
                for n in rows {
                    let f = node_fence(&config, c, &n)?;
                    if f.next_at.is_some_and(|t| t <= now_ms()) {
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
            if app.fencer.is_running(&node) {
                continue;
            }
            let operator = app.fence.operator_labels(&node, &stored.set);
            let labels = Labels {
                operator: &operator,
                agent: &stored.reported,
            };
            // Only a method that applies with a complete command: one that lacks labels is
            // shown (`status --blocked`, `node show`) and waits for an operator to set them.
            let Choice::Ready { method, command } = app.fence.choose(&node, labels) else {
                continue;
            };
            let (app, method) = (app.clone(), method.clone());
            // Each in its own task: one hanging fence must not hold up another node's.
            tokio::spawn(async move {
                let actor = format!("policy:{}", method.name);
                let reason = format!(
                    "lost for {} (auto_fence_after)",
                    humantime::format_duration(method.auto_fence_after.unwrap_or_default())
                );
                match run_and_record(&app, &node, &method, command, &operator, &actor, &reason)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_in_the_event_log_is_one_bounded_line() {
        assert_eq!(
            brief("stdout:\nchassis power off\n\nstderr:\n  warning: slow bmc\n"),
            "chassis power off | warning: slow bmc"
        );
        assert_eq!(brief(""), "");
        let long = brief(&"é".repeat(1000));
        assert_eq!(long.chars().count(), BRIEF + 3, "{long}");
        assert_eq!(
            shell_words(&["sh".into(), "-c".into(), "echo 'off'".into(), String::new()]),
            r#"sh -c 'echo '\''off'\''' ''"#
        );
    }
}
