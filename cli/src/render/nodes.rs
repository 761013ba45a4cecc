//! Nodes for people: the node list, one node in full, and the words for its heartbeat,
//! fencing, labels and eligibility.

use std::collections::BTreeMap;
use std::time::Duration;

use csivol_api::{Eligibility, Node, NodePlugin, NodeStatus, PluginObservation};

use super::{cell, map, opt_time, record};
use crate::output::{Out, age, given_duration, or_dash, short_duration, when};

/// ` (N lingering)` when N of a plugin's used slots are stagings kept after a release,
/// which give way to another volume's claim.
fn lingering(p: &NodePlugin) -> String {
    if p.lingering == 0 {
        String::new()
    } else {
        format!(" ({} lingering)", p.lingering)
    }
}

/// A node's plugins as `id used/max`, `max` being `∞` for no limit (and how many of the
/// used slots are stagings kept after a release).
fn plugin_slots(n: &Node) -> String {
    if n.plugins.is_empty() {
        return "-".into();
    }
    n.plugins
        .iter()
        .map(|p| {
            let max = if p.max_volumes == 0 {
                "∞".to_owned()
            } else {
                p.max_volumes.to_string()
            };
            format!("{} {}/{max}{}", p.id, p.used, lingering(p))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn nodes(out: &Out, ns: &[Node]) -> anyhow::Result<()> {
    if ns.is_empty() {
        out.note("no nodes have registered");
        return Ok(());
    }
    let mut t = out.table(&[
        "NAME",
        "STATUS",
        "HEARTBEAT",
        "PLUGINS (USED/MAX)",
        "SELF-FENCES",
        "LOST SINCE",
    ]);
    for n in ns {
        t.add_row(vec![
            cell(&n.name),
            cell(match n.eligibility {
                Eligibility::Eligible => n.status.to_string(),
                e => format!("{}, {e}", n.status),
            }),
            cell(heartbeat(n)),
            cell(plugin_slots(n)),
            cell(fencing(n)),
            cell(opt_time(out, n.lost_at.as_deref())),
        ]);
    }
    out.print_table(t)
}

/// A node's heartbeat against the TTL: `2s ago, TTL 10s` while all is well, `no heartbeat
/// for 7s; lost in 3s` once it is at risk (see [`Node::at_risk`]).
pub fn heartbeat(n: &Node) -> String {
    let ttl = given_duration(Duration::from_millis(n.heartbeat_ttl_ms));
    match (n.status, n.silent_ms, n.lost_in_ms()) {
        (NodeStatus::Lost, _, _) => format!("none for over {ttl} (the TTL)"),
        (NodeStatus::Stopped, _, _) => "none: its agent stopped in order".to_owned(),
        (_, Some(silent), Some(left)) if n.at_risk() => format!(
            "no heartbeat for {}; lost in {}",
            short_duration(Duration::from_millis(silent)),
            short_duration(Duration::from_millis(left)),
        ),
        (_, Some(silent), _) => format!(
            "{} ago, TTL {ttl}",
            short_duration(Duration::from_millis(silent))
        ),
        // A server that does not say how long the node has been silent.
        _ => n
            .last_heartbeat
            .as_deref()
            .map_or_else(|| "-".to_owned(), |t| format!("{} ago", age(t))),
    }
}

/// Whether and how a node fences itself.
pub fn fencing(n: &Node) -> String {
    match (&n.fence_after, &n.fenced_at) {
        (_, Some(at)) => format!("fenced at {at}"),
        (Some(after), None) => format!("after {after}"),
        (None, None) => "no".into(),
    }
}

/// A node's labels as `k=v, k=v`; `-` for none.
pub fn labels_of(labels: &BTreeMap<String, String>) -> String {
    if labels.is_empty() {
        return "-".to_owned();
    }
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A node's fence method: its name (and when the policy fences it), what it lacks, or none.
pub fn fence_method(n: &Node) -> String {
    match (&n.fence_method, &n.next_fence_at, &n.fence_lacks) {
        (Some(m), None, _) => m.clone(),
        (Some(m), Some(at), _) => format!("{m} (automatic fence at {at})"),
        (None, _, Some(lacks)) => lacks.describe(&n.name),
        (None, _, None) => "none".to_owned(),
    }
}

/// Whether a node takes new claims, and for a drain how far it got.
pub fn eligibility(n: &Node, claims: usize) -> String {
    match (n.eligibility, claims) {
        (Eligibility::Draining, 0) => "draining: drained, nothing is claimed on it".into(),
        (Eligibility::Draining, 1) => "draining: 1 claim left for its owner to release".into(),
        (Eligibility::Draining, n) => {
            format!("draining: {n} claims left for their owners to release")
        }
        (e, _) => e.to_string(),
    }
}

/// A node's status, with a planned stop's details: `stopped at T (left its volumes
/// mounted); lost at T2 unless its agent starts again`.
pub fn status(n: &Node) -> String {
    match &n.stopped {
        Some(stop) if n.status == NodeStatus::Stopped => format!(
            "stopped at {} ({}); lost at {} unless its agent starts again",
            when(&stop.at),
            if stop.took_down {
                "took its volumes down"
            } else {
                "left its volumes mounted"
            },
            stop.lost_at
        ),
        _ => n.status.to_string(),
    }
}

/// What a plugin made on a node for its last claim there, as its agent observed it:
/// `(at the staging path, at the target)`; `-` where nothing was observed yet.
pub(super) fn observed(o: Option<&PluginObservation>) -> (String, String) {
    match o {
        None => ("-".into(), "-".into()),
        Some(o) => (
            o.shape
                .staging
                .clone()
                .unwrap_or_else(|| "no staging".into()),
            o.shape.target.clone(),
        ),
    }
}

/// A node's record; `claims` is how many claims it has (for a drain's progress).
pub fn node(out: &Out, n: &Node, claims: usize) -> anyhow::Result<()> {
    let rows = vec![
        ("status", status(n)),
        ("eligibility", eligibility(n, claims)),
        ("heartbeat", heartbeat(n)),
        (
            "last heartbeat",
            n.last_heartbeat
                .as_deref()
                .map_or_else(|| "-".to_owned(), when),
        ),
        (
            "lost since",
            n.lost_at.as_deref().map_or_else(|| "-".to_owned(), when),
        ),
        ("self-fences", fencing(n)),
        ("registered", when(&n.registered_at)),
        ("labels", labels_of(&n.labels)),
    ];
    let mut rows = rows;
    if !n.agent_labels.is_empty() {
        rows.push((
            "agent labels",
            format!(
                "{} (as its agent reports them; not used to fence it)",
                labels_of(&n.agent_labels)
            ),
        ));
    }
    rows.push(("fence method", fence_method(n)));
    if n.fence_failures > 0 {
        rows.push((
            "fence failures",
            format!(
                "{}: {}",
                n.fence_failures,
                n.fence_error.as_deref().unwrap_or("?")
            ),
        ));
    }
    record(out, &format!("node {}", n.name), &rows)?;
    out.line("")?;
    if !n.fences.is_empty() {
        out.line("fence history:")?;
        let mut t = out.table(&["#", "AT", "METHOD", "RESULT", "TOOK", "BY", "REASON"]);
        for f in &n.fences {
            let result = match (f.ok, f.timed_out, f.exit_status) {
                (true, _, _) => "confirmed off".to_owned(),
                (false, true, _) => "timed out".to_owned(),
                (false, false, Some(c)) => format!("exit {c}"),
                (false, false, None) => "not run".to_owned(),
            };
            t.add_row(vec![
                f.id.to_string(),
                f.at.clone(),
                f.method.clone(),
                result,
                humantime::format_duration(Duration::from_millis(f.duration_ms)).to_string(),
                f.actor.clone(),
                f.reason.clone(),
            ]);
        }
        out.print_table(t)?;
        out.line("")?;
    }
    if n.plugins.is_empty() {
        return out.line("plugins: none");
    }
    out.line("plugins:")?;
    let mut t = out.table(&[
        "PLUGIN",
        "CSI NODE ID",
        "USED",
        "MAX",
        "CONTROLLER",
        "TOPOLOGY",
        "READY CHECK",
        "STAGED AS",
        "PUBLISHED AS",
    ]);
    t.optional(&["READY CHECK", "STAGED AS", "PUBLISHED AS"]);
    for p in &n.plugins {
        let (staged, published) = observed(p.observed.as_ref());
        t.add_row(vec![
            p.id.clone(),
            p.node_id.clone(),
            format!("{}{}", p.used, lingering(p)),
            if p.max_volumes == 0 {
                "no limit".into()
            } else {
                p.max_volumes.to_string()
            },
            if p.controller { "yes" } else { "no" }.into(),
            map(&p.topology),
            or_dash(p.ready_check.as_deref()),
            staged,
            published,
        ]);
    }
    out.print_table(t)?;
    for p in &n.plugins {
        if let Some(line) = limit_line(p) {
            out.line(line)?;
        }
    }
    Ok(())
}

/// `limit of hostpath: lowered from 3 to 1 at T (5s ago), NodeGetInfo read again: read
/// every 5m; last read T (1s ago)`: how a node plugin's attach limit last changed while the node ran.
fn limit_line(p: &NodePlugin) -> Option<String> {
    let show = csivol_api::limit_text;
    let read = p
        .limit_read_at
        .as_deref()
        .map(|t| format!("; last read {}", when(t)));
    match &p.limit_change {
        Some(c) => Some(format!(
            "limit of {}: {} from {} to {} at {}, NodeGetInfo read again: {}{}",
            p.id,
            c.direction(),
            show(c.from),
            show(c.to),
            when(&c.at),
            c.reason,
            read.unwrap_or_default()
        )),
        None => read.map(|r| format!("limit of {}: unchanged{r}", p.id)),
    }
}
