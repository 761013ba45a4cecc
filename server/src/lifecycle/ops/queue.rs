//! The controller-operation queue's engine: operations handed to healthy controller hosts
//! within limits, answered, retried with backoff, failed, and shown to their hosts. It
//! knows no kind of operation: each kind gives it what it needs through [`Kind`] (one file
//! each under `kinds/`), and the engine is handed the table of them ([`Kinds`]).

use std::collections::HashMap;

use csivol_api::domain::ErrorClass;
use csivol_api::{self as api, ControllerOpKind, PluginError, Report};

use super::super::backoff::backoff;
use super::super::events::{event, format_error};
use super::super::settings::Limits;
use crate::error::ApiResult;
use crate::model::{OpRow, time};
use crate::store::{OpSlot, Snapshot, Txn};
use crate::watch::Key;
use csivol_rules::after_release::Needs;
use csivol_rules::kinds::{EventKind, OpKind};
use csivol_rules::schedule;

/// What one kind of controller operation gives the queue: where its owner (an attachment,
/// a volume, a snapshot) shows that it waits, is retried or failed, what its success does,
/// and what its controller host is sent.
pub trait Kind: Sync {
    /// No controller host runs it: its owner says why.
    fn waiting(&self, ctx: &mut dyn Txn, o: &OpRow, why: &str) -> ApiResult<()>;

    /// What the plugin's error means for the operation. By default, a retry where the
    /// error's class says one may help, else a final failure ([`by_class`]); a kind may end
    /// the operation itself (a NOT_FOUND from a delete is its success).
    fn judge(
        &self,
        _ctx: &mut dyn Txn,
        _o: &OpRow,
        e: &OpError<'_>,
        _actor: &str,
    ) -> ApiResult<Judged> {
        Ok(by_class(e.error))
    }

    /// It failed and is tried again (`r` says when and why): its owner shows it.
    fn retrying(&self, ctx: &mut dyn Txn, o: &OpRow, r: &Retrying<'_>) -> ApiResult<()>;

    /// What the `operation-failed` event of its final failure says: by default the error,
    /// on the operation's volume and node.
    fn failure(&self, _conn: &dyn Snapshot, o: &OpRow, e: &OpError<'_>) -> ApiResult<Failure> {
        Ok(Failure {
            volume: Some(o.volume.clone()),
            node: o.node.clone(),
            message: e.message.to_owned(),
        })
    }

    /// It failed for good (the operation is gone, the event written): its owner shows it.
    fn failed(&self, ctx: &mut dyn Txn, o: &OpRow, e: &OpError<'_>) -> ApiResult<()>;

    /// The plugin's answer `report`, if it is one of this kind's: what it did is recorded
    /// and the operation is finished, or handed back to be asked again. Whether it was.
    fn done(&self, ctx: &mut dyn Txn, o: &OpRow, report: &Report, actor: &str) -> ApiResult<bool>;

    /// An answer of the operation from `host` that is not current (an earlier attempt,
    /// another host), applied to a state of `generation`: whether it is taken as its answer
    /// all the same. By default not.
    fn takes_late(
        &self,
        _conn: &dyn Snapshot,
        _host: &str,
        _o: &OpRow,
        _report: &Report,
        _generation: Option<&str>,
    ) -> ApiResult<bool> {
        Ok(false)
    }

    /// Whether its success may move its volume's claims and attachments on (a failure
    /// always may).
    fn moves_volume(&self) -> bool {
        false
    }

    /// What its controller host is sent to run it; `None` when its owner is gone.
    fn shown(&self, conn: &dyn Snapshot, o: &OpRow) -> ApiResult<Option<ControllerOpKind>>;

    /// What it gives the operations held for their volume's release (`after_release`),
    /// where an operation of this kind may be held.
    fn held(&self) -> Option<&dyn Held> {
        None
    }
}

/// What a kind whose operations may wait for their volume's release gives the queue.
pub trait Held: Sync {
    /// What it needs of the volume before it runs.
    fn needs(&self) -> Needs;

    /// The release has finished and the operation runs now: its owner no longer shows it
    /// waiting. The kind of the event that says so.
    fn started(&self, ctx: &mut dyn Txn, o: &OpRow, volume: &str) -> ApiResult<EventKind>;

    /// It will not run (`message` says why; the operation is gone): its owner ends failed.
    fn dropped(&self, ctx: &mut dyn Txn, o: &OpRow, volume: &str, message: &str) -> ApiResult<()>;
}

/// The table of kinds: the part of each kind of operation.
pub type Kinds = fn(OpKind) -> &'static dyn Kind;

/// What a plugin's error means for an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judged {
    /// Retried with backoff.
    Retry,
    /// Failed for good.
    Final,
    /// Its owner is gone: the operation goes, and nothing else changes.
    Gone,
    /// The kind ended the operation itself.
    Ended,
}

/// A plugin's error for an operation, and how the operation's owner says it: `CALL failed:
/// CODE: message`.
pub struct OpError<'a> {
    pub error: &'a PluginError,
    pub message: &'a str,
}

/// A retry where `error`'s class says one may help, else a final failure.
pub fn by_class(error: &PluginError) -> Judged {
    if ErrorClass::of_name(&error.code) == ErrorClass::Retry {
        Judged::Retry
    } else {
        Judged::Final
    }
}

/// A failed operation tried again: its error and when.
pub struct Retrying<'a> {
    pub message: &'a str,
    /// Unix ms.
    pub at: i64,
}

impl Retrying<'_> {
    /// `message; retrying at TIME`, as an owner shows it.
    pub fn said(&self) -> String {
        format!("{}; retrying at {}", self.message, time(self.at))
    }
}

/// What the `operation-failed` event of a final failure names and says.
pub struct Failure {
    pub volume: Option<String>,
    pub node: Option<String>,
    pub message: String,
}

/// Hands unassigned, due controller operations of `plugin` to healthy hosts, within the
/// limits: one in flight per (plugin, node) and `controller_concurrency` per plugin, the
/// slots shared fairly between attaches, detaches and the rest, and between volumes
/// (`csivol_rules::schedule`). Each operation's wait, from due to handed out, is observed.
pub fn schedule(ctx: &mut impl Txn, plugin: &str, limits: &Limits, kinds: Kinds) -> ApiResult<()> {
    let hosts = ctx.controller_hosts(plugin)?;
    // With hosts and every slot taken, nothing can be handed out: the queue is not read.
    // Under a steady load that is most calls (each queued operation asks), and the queue
    // is the long part; the running operations are `controller_concurrency` at most.
    let assigned = if hosts.is_empty() {
        Vec::new()
    } else {
        let assigned = ctx.assigned_ops(plugin)?;
        if assigned.len() >= limits.controller_concurrency as usize {
            return Ok(());
        }
        assigned
    };
    let waiting = ctx.due_ops(plugin, ctx.now())?;
    if waiting.is_empty() {
        return Ok(());
    }
    if hosts.is_empty() {
        // Say why on everything that waits, so `status` and `claim --wait` can show it.
        let msg = format!(
            "waiting for a controller host: no healthy agent hosts the controller of plugin `{plugin}`"
        );
        for o in &waiting {
            if !ctx.note_op_waiting(o.id, &msg)? {
                continue;
            }
            if let Some(op) = ctx.op(o.id)? {
                kinds(op.kind).waiting(ctx, &op, &msg)?;
            }
        }
        return Ok(());
    }
    let mut load: HashMap<String, u32> = hosts.iter().map(|h| (h.clone(), 0)).collect();
    for o in &assigned {
        if let Some(host) = &o.host {
            *load.entry(host.clone()).or_default() += 1;
        }
    }
    let free = (limits.controller_concurrency as usize).saturating_sub(assigned.len());
    let running: Vec<schedule::Running<'_>> = assigned.iter().map(running).collect();
    let queued: Vec<schedule::Waiting<'_>> = waiting.iter().map(queued).collect();
    let last = served_last(limits).get(plugin).copied();
    let picked = schedule::pick(&queued, &running, free, last);
    if let Some(class) = picked.last {
        served_last(limits).insert(plugin.to_owned(), class);
    }
    let by_id: HashMap<i64, &OpSlot> = waiting.iter().map(|o| (o.id, o)).collect();
    for id in picked.ids {
        let o = by_id[&id];
        let host = hosts
            .iter()
            .min_by_key(|h| load[*h])
            .expect("hosts is not empty")
            .clone();
        *load.get_mut(&host).expect("known host") += 1;
        ctx.assign_op(id, &host)?;
        ctx.touch(Key::NodeOps(host));
        limits
            .metrics
            .op_waited(plugin, o.kind.as_str(), ctx.now() - o.due_since);
    }
    Ok(())
}

fn served_last(limits: &Limits) -> std::sync::MutexGuard<'_, HashMap<String, schedule::OpClass>> {
    limits.served_last.lock().unwrap_or_else(|e| e.into_inner())
}

fn running(o: &OpSlot) -> schedule::Running<'_> {
    schedule::Running {
        kind: o.kind,
        volume: &o.volume,
        node: o.node.as_deref(),
    }
}

fn queued(o: &OpSlot) -> schedule::Waiting<'_> {
    schedule::Waiting {
        id: o.id,
        kind: o.kind,
        volume: &o.volume,
        node: o.node.as_deref(),
        due_since: o.due_since,
    }
}

/// Plugins with controller operations due for assignment (for the periodic scheduler).
pub fn plugins_with_due_ops(conn: &(impl Snapshot + ?Sized), now: i64) -> ApiResult<Vec<String>> {
    conn.plugins_with_due_ops(now)
}

/// The operation a report answers, if the report is current (same attempt, from its
/// host) or its kind takes it late ([`Kind::takes_late`]).
fn load_op(
    conn: &dyn Snapshot,
    host: &str,
    report: &Report,
    generation: Option<&str>,
    kinds: Kinds,
) -> ApiResult<Option<OpRow>> {
    let Some((id, attempt)) = report.controller_op() else {
        return Ok(None);
    };
    let Some(o) = conn.op(id as i64)? else {
        return Ok(None);
    };
    let current = o.attempt == attempt && o.host.as_deref() == Some(host);
    Ok((current || kinds(o.kind).takes_late(conn, host, &o, report, generation)?).then_some(o))
}

/// Records how long an operation took from queueing to `result`.
fn observe_op(limits: &Limits, now: i64, o: &OpRow, result: &str) {
    let label = crate::metrics::OpLabel {
        kind: o.kind.as_str().to_owned(),
        result: result.to_owned(),
    };
    limits
        .metrics
        .op_seconds
        .get_or_create(&label)
        .observe((now - o.created_at).max(0) as f64 / 1000.0);
}

/// A controller host's report about one of its operations (`report` answers one, see
/// [`Report::controller_op`]): the operation's kind takes its success, the engine its
/// failure; then the plugin's operations the answer made room for are handed out. A
/// report that is not current (another attempt, another host; unless its kind takes it
/// late, of a state of `generation`) or not of the operation's kind changes nothing. The
/// volume whose claims and attachments may move on now, if any.
pub fn answered(
    ctx: &mut impl Txn,
    host: &str,
    report: &Report,
    limits: &Limits,
    generation: Option<&str>,
    kinds: Kinds,
) -> ApiResult<Option<String>> {
    let Some(o) = load_op(&*ctx, host, report, generation, kinds)? else {
        return Ok(None);
    };
    let kind = kinds(o.kind);
    let actor = format!("node:{host}");
    let moves = if let Report::OpError { error, .. } = report {
        observe_op(limits, ctx.now(), &o, "error");
        failed(ctx, &o, error, &actor, kind)?;
        true
    } else {
        if !kind.done(ctx, &o, report, &actor)? {
            return Ok(None);
        }
        observe_op(limits, ctx.now(), &o, "ok");
        kind.moves_volume()
    };
    schedule(ctx, &o.plugin, limits, kinds)?;
    Ok(moves.then_some(o.volume))
}

/// An operation failed with `error`: what the kind judges it to mean, with the retry or
/// the final failure recorded here for every kind alike.
fn failed(
    ctx: &mut impl Txn,
    o: &OpRow,
    error: &PluginError,
    actor: &str,
    kind: &dyn Kind,
) -> ApiResult<()> {
    let message = format!("{} failed: {}", o.kind.call(), format_error(error));
    let e = OpError {
        error,
        message: &message,
    };
    match kind.judge(ctx, o, &e, actor)? {
        Judged::Ended => Ok(()),
        Judged::Gone => ctx.delete_op(o.id),
        Judged::Retry => {
            let at = ctx.now() + backoff(o.attempt).as_millis() as i64;
            ctx.retry_op(o.id, at, &message)?;
            kind.retrying(
                ctx,
                o,
                &Retrying {
                    message: &message,
                    at,
                },
            )
        }
        Judged::Final => {
            ctx.delete_op(o.id)?;
            let f = kind.failure(&*ctx, o, &e)?;
            event(
                ctx,
                EventKind::OperationFailed,
                f.volume.as_deref(),
                f.node.as_deref(),
                None,
                actor,
                f.message,
            )?;
            kind.failed(ctx, o, &e)
        }
    }
}

/// What an agent is sent to run an operation; `None` when its owner is gone.
pub fn shown(conn: &dyn Snapshot, o: &OpRow, kinds: Kinds) -> ApiResult<Option<api::ControllerOp>> {
    Ok(kinds(o.kind).shown(conn, o)?.map(|kind| api::ControllerOp {
        id: o.id as u64,
        attempt: o.attempt,
        plugin: o.plugin.clone(),
        not_before_ms: o.not_before.max(0) as u64,
        kind,
    }))
}
