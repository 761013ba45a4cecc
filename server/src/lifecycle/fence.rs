//! A fence's record: in one write, the evidence of a fence method's run and its event;
//! on success the node fenced (blocked first if it was ready) and its volumes unblocked as
//! `unblock --node` does, the unblock's events naming the fence. Running the method is
//! `crate::fence`'s; a fenced node's return is a registration (`nodes`).

use std::time::Duration;

use csivol_api::{AttachmentState, ClaimState, FenceRecord, NodeStatus, PlannedAction};

use super::events::event;
use super::settings::Limits;
use super::settle::accounted;
use crate::error::ApiResult;
use crate::fence::command::Ran;
use crate::model::{NewFence, time};
use crate::store::Txn;
use crate::watch::Key;
use csivol_rules::kinds::EventKind;

/// Why a fence did not confirm the node off, in a few words.
pub(crate) fn failure(r: &FenceRecord) -> String {
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

pub(crate) struct Evidence<'a> {
    pub(crate) node: &'a str,
    pub(crate) method: &'a str,
    pub(crate) command: Vec<String>,
    pub(crate) ran: Ran,
    pub(crate) started_at: i64,
    pub(crate) actor: &'a str,
    pub(crate) reason: &'a str,
    pub(crate) policy: bool,
}

/// One write: the attempt's record and event; on success the node fenced (blocked first
/// if it was ready) and its volumes unblocked, the unblock's events naming the fence.
pub(crate) fn record_fence(
    ctx: &mut impl Txn,
    e: Evidence<'_>,
    limits: &Limits,
) -> ApiResult<(FenceRecord, Vec<PlannedAction>)> {
    let ok = e.ran.ok();
    let duration_ms = e.ran.duration.as_millis() as u64;
    let id = ctx.insert_fence(&NewFence {
        node: e.node,
        at: e.started_at,
        method: e.method,
        command: &e.command,
        exit_status: e.ran.exit_status,
        timed_out: e.ran.timed_out,
        output: &e.ran.output,
        duration_ms,
        actor: e.actor,
        reason: e.reason,
        ok,
    })?;
    let record = FenceRecord {
        id,
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
            ctx.note_fence_failure(e.node, &why)?;
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
        super::nodes::mark_lost(ctx, e.node, &format!("fenced by {}", e.actor), limits)?;
    }
    ctx.set_node_fenced(e.node)?;
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
    let blocked = !ctx
        .claims_of_node(e.node, Some(ClaimState::Blocked))?
        .is_empty()
        || ctx
            .attachments_of_node(e.node)?
            .iter()
            .any(|a| a.state == AttachmentState::Blocked);
    let actions = if blocked {
        let why = format!(
            "fenced (fence #{}, method {}): {}",
            record.id, e.method, e.reason
        );
        super::operator::unblock_node(ctx, e.node, &why, false, e.actor, limits)?.actions
    } else {
        Vec::new()
    };
    // Powered off: it holds nothing the restored state must wait to hear of.
    accounted(ctx, e.node, e.actor)?;
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
