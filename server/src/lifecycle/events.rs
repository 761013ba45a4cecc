//! The event log: every change worth telling is an entry, logged once committed; the log is
//! kept within its bounds. And how an entry says what a plugin answered or what a list holds.

use csivol_api::PluginError;

use crate::error::ApiResult;
use crate::store::{Event, Pruning, Txn};
use crate::watch::Key;
use csivol_rules::kinds::EventKind;

/// The longest message an event keeps: what clients write is bounded before it gets here,
/// but a plugin's error (through its agent) is not, and the log is kept in bytes.
const EVENT_MESSAGE_BYTES: usize = 8 << 10;

/// `message`, cut to [`EVENT_MESSAGE_BYTES`] (on a character) with how much was left out.
fn bounded_message(mut message: String) -> String {
    if message.len() <= EVENT_MESSAGE_BYTES {
        return message;
    }
    let mut cut = EVENT_MESSAGE_BYTES;
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    let more = message.len() - cut;
    message.truncate(cut);
    message.push_str(&format!("... ({more} bytes more not kept)"));
    message
}

/// Appends an entry to the event log; logged once committed.
pub fn event(
    ctx: &mut (impl Txn + ?Sized),
    kind: EventKind,
    volume: Option<&str>,
    node: Option<&str>,
    alloc: Option<&str>,
    actor: &str,
    message: impl Into<String>,
) -> ApiResult<()> {
    let message = bounded_message(message.into());
    ctx.append_event(Event {
        kind,
        volume,
        node,
        alloc,
        actor,
        message: &message,
    })?;
    ctx.touch(Key::Events);
    // Logged once committed: a change that was rolled back never happened.
    let (kind, volume, node, alloc, actor) = (
        kind.as_str(),
        volume.map(str::to_owned),
        node.map(str::to_owned),
        alloc.map(str::to_owned),
        actor.to_owned(),
    );
    ctx.after_commit(Box::new(move || {
        tracing::info!(kind, volume, node, alloc, actor, "{message}");
    }));
    Ok(())
}

/// Keeps the event log within its bounds in events and in bytes; how many went (at most
/// `bounds.batch`: the caller runs it again while it drops that many). Operators' actions
/// are dropped only by the count ([`EventKind::kept_by_count`]).
pub fn prune_events(ctx: &mut impl Txn, bounds: &crate::limits::EventBounds) -> ApiResult<usize> {
    static KEPT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let kept = KEPT.get_or_init(|| {
        let kinds: Vec<&str> = EventKind::ALL
            .iter()
            .filter(|k| k.kept_by_count())
            .map(|k| k.as_str())
            .collect();
        serde_json::to_string(&kinds).expect("strings serialise")
    });
    ctx.prune_events(&Pruning {
        keep: bounds.kept,
        bytes: bounds.bytes,
        kept_by_count: kept,
        batch: bounds.batch,
    })
}

/// A plugin's error as an event says it: `CODE: message`.
pub(super) fn format_error(e: &PluginError) -> String {
    format!("{}: {}", e.code, e.message)
}

/// `a, b, c`, or `empty` when there is nothing to list.
pub(super) fn list_or<S: AsRef<str>>(items: &[S], empty: &str) -> String {
    if items.is_empty() {
        return empty.to_owned();
    }
    items
        .iter()
        .map(AsRef::as_ref)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A topology segment as an entry says it: `{zone=a,rack=1}`; `{}` for no segments.
pub(super) fn show_segment(s: &csivol_api::Topology) -> String {
    let pairs: Vec<_> = s.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{{{}}}", pairs.join(","))
}
