//! `csivol status`: the cluster at a glance, one volume in detail, or the blocked volumes
//! (with an exit code a pipeline can gate on).

use std::collections::{BTreeMap, BTreeSet};

use std::time::Duration;

use csivol_api::{
    AttachmentState, ClaimState, ControllerFinding, FindingKind, Health, Node, NodeStatus, Plugin,
    Volume, VolumeState,
};
use serde::Serialize;

use crate::args::StatusArgs;
use crate::client::MAX_BLOCK;
use crate::ctx::Ctx;
use crate::failure::Exit;
use crate::render;

/// A volume held by a lost node: one per (volume, node). Part of the JSON contract.
#[derive(Debug, Serialize)]
pub struct Blocked {
    pub volume: String,
    pub node: String,
    /// When the node was lost (RFC 3339).
    pub lost_at: Option<String>,
    /// The node's self-fencing delay, if it self-fences (`30s`).
    pub fence_after: Option<String>,
    /// When the node reported that it fenced itself.
    pub fenced_at: Option<String>,
    /// The allocs whose claims are blocked.
    pub allocs: Vec<String>,
    /// Whether the volume is still attached to the node (an unblock force-detaches it).
    pub attached: bool,
    /// The alloc whose release left the volume staged on the node, which kept it staged
    /// (its pool lingers) when it was lost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lingering_after: Option<String>,
    /// The command that unblocks it.
    pub unblock: String,
    /// The server's fence method for the node, if one applies.
    pub fence_method: Option<String>,
    /// The command that fences the node and then unblocks it, when a method applies.
    pub fence: Option<String>,
    /// The method that applies but lacks labels an operator must set first, and which.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fence_lacks: Option<csivol_api::FenceLacks>,
    /// Failed automatic fences of the node, and the last one's error.
    pub fence_failures: u32,
    pub fence_error: Option<String>,
}

/// `status` without a volume, as JSON. Part of the JSON contract.
#[derive(Debug, Serialize)]
pub struct Summary {
    pub volumes_by_state: BTreeMap<String, usize>,
    pub nodes_by_status: BTreeMap<String, usize>,
    /// Ready nodes that missed heartbeats (silent for half the TTL or more): lost soon
    /// unless one arrives.
    pub nodes_at_risk: Vec<String>,
    pub blocked: Vec<Blocked>,
    /// What controller-side reconciliation found and a second listing confirmed: attachments
    /// the storage system has and csivol does not (`leaked`), the reverse (`missing`), and
    /// volumes the plugin says are abnormal. Never fixed by csivol on its own.
    pub controller_findings: Vec<ControllerFinding>,
    /// Plugins whose oldest waiting controller operation has waited past the server's
    /// `--controller-queue-warning`.
    pub controller_queues_behind: Vec<QueueBehind>,
    /// Backend volumes registered under several names (which only an older csivol let
    /// happen): each name can take a single-writer claim on the one backend volume.
    pub duplicate_volumes: Vec<DuplicateVolume>,
    pub volumes: Vec<Volume>,
    /// The server's health (`GET /v1/health`), present only when it is not `ok`: e.g.
    /// `degraded` while its database refuses writes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<Health>,
}

/// One backend volume (a plugin's external id) registered as several csivol volumes. Part
/// of the JSON contract.
#[derive(Debug, Serialize)]
pub struct DuplicateVolume {
    pub plugin: String,
    pub external_id: String,
    /// The csivol volumes on it, by name.
    pub volumes: Vec<String>,
}

/// The backend volumes `volumes` name more than once. A volume being created has no
/// external id yet and names none.
fn duplicates(volumes: &[Volume]) -> Vec<DuplicateVolume> {
    let mut by_id: BTreeMap<(&str, &str), Vec<String>> = BTreeMap::new();
    for v in volumes.iter().filter(|v| !v.external_id.is_empty()) {
        by_id
            .entry((&v.plugin, &v.external_id))
            .or_default()
            .push(v.name.clone());
    }
    by_id
        .into_iter()
        .filter(|(_, names)| names.len() > 1)
        .map(|((plugin, external_id), volumes)| DuplicateVolume {
            plugin: plugin.to_owned(),
            external_id: external_id.to_owned(),
            volumes,
        })
        .collect()
}

/// A plugin whose controller queue is behind. Part of the JSON contract.
#[derive(Debug, Serialize)]
pub struct QueueBehind {
    pub plugin: String,
    pub oldest_wait_ms: u64,
    pub warn_after_ms: u64,
    /// Due operations waiting, by kind.
    pub waiting: BTreeMap<String, u32>,
    pub running: usize,
    pub concurrency: u32,
}

/// How often `status --watch` redraws on a terminal even when nothing happened, so that
/// heartbeat countdowns and ages stay true.
const REFRESH: Duration = Duration::from_secs(5);

pub async fn run(ctx: &Ctx, args: StatusArgs) -> anyhow::Result<Exit> {
    if !args.watch {
        return once(ctx, &args).await;
    }
    // Every change the server makes is in the event log: a blocking query on it wakes the
    // redraw as soon as something happened, without polling the cluster's state.
    let tty = ctx.out.stdout_is_tty();
    let (_, mut cursor) = super::events::all_after(ctx, 0, "").await?;
    let mut first = true;
    loop {
        if tty {
            ctx.out.clear_screen()?;
        } else if !first {
            ctx.out.line("")?;
        }
        first = false;
        once(ctx, &args).await?;
        loop {
            let wait = if tty { REFRESH } else { MAX_BLOCK };
            let generation = cursor.generation.clone();
            let (events, next) = super::events::next(ctx, &cursor, "", wait).await?;
            // A new generation of the state (restored from a backup) is a change to show.
            let changed = !events.is_empty() || next.generation != generation;
            cursor = next;
            if changed || tty {
                break;
            }
        }
    }
}

async fn once(ctx: &Ctx, args: &StatusArgs) -> anyhow::Result<Exit> {
    let volumes: Vec<Volume> = match (&args.volume, &args.node) {
        (Some(v), _) => vec![ctx.client.get(&format!("/v1/volumes/{v}")).await?],
        (None, Some(n)) => ctx.client.volumes(&[format!("node={n}")]).await?,
        (None, None) => ctx.client.volumes(&[]).await?,
    };
    if let (Some(_), false) = (&args.volume, args.blocked) {
        render::print_volume(&ctx.out, &volumes[0])?;
        return Ok(Exit::Ok);
    }
    // With --node, an unknown node is an error (exit 3), not an empty summary.
    let nodes: Vec<Node> = match &args.node {
        Some(n) => vec![ctx.client.get(&format!("/v1/nodes/{n}")).await?],
        None => ctx.client.get("/v1/nodes").await?,
    };
    let blocked = blocked(&volumes, &nodes, args.node.as_deref());
    if args.blocked {
        if ctx.out.json_mode() {
            ctx.out.json(&blocked)?;
        } else if blocked.is_empty() {
            ctx.out.note("no volume is blocked");
        } else {
            blocked_table(ctx, &blocked)?;
        }
        return Ok(if blocked.is_empty() {
            Exit::Ok
        } else {
            Exit::Blocked
        });
    }
    let mut volumes_by_state = BTreeMap::new();
    for s in VolumeState::ALL {
        let n = volumes.iter().filter(|v| v.state == s).count();
        if n > 0 {
            volumes_by_state.insert(s.to_string(), n);
        }
    }
    let mut nodes_by_status = BTreeMap::new();
    for s in NodeStatus::ALL {
        let n = nodes.iter().filter(|x| x.status == s).count();
        if n > 0 {
            nodes_by_status.insert(s.to_string(), n);
        }
    }
    // Health is advisory here: a server that cannot say is reported by the calls above.
    let server = ctx
        .client
        .get::<Health>("/v1/health")
        .await
        .ok()
        .filter(|h| h.status != "ok");
    let at_risk: Vec<&Node> = nodes.iter().filter(|n| n.at_risk()).collect();
    let mut findings: Vec<ControllerFinding> = ctx.client.get("/v1/controller-findings").await?;
    if let Some(n) = &args.node {
        findings.retain(|f| f.node.as_deref() == Some(n));
    }
    let plugins: Vec<Plugin> = ctx.client.get("/v1/plugins").await?;
    let behind: Vec<&Plugin> = plugins.iter().filter(|p| p.queue.behind()).collect();
    let summary = Summary {
        volumes_by_state,
        nodes_by_status,
        nodes_at_risk: at_risk.iter().map(|n| n.name.clone()).collect(),
        blocked,
        controller_findings: findings,
        controller_queues_behind: behind
            .iter()
            .map(|p| QueueBehind {
                plugin: p.id.clone(),
                oldest_wait_ms: p.queue.oldest_wait_ms.unwrap_or(0),
                warn_after_ms: p.queue.warn_after_ms,
                waiting: p
                    .queue
                    .waiting
                    .iter()
                    .map(|(k, q)| (k.clone(), q.count))
                    .collect(),
                running: p.queue.running.len(),
                concurrency: p.queue.concurrency,
            })
            .collect(),
        duplicate_volumes: duplicates(&volumes),
        volumes,
        server,
    };
    if ctx.out.json_mode() {
        ctx.out.json(&summary)?;
        return Ok(Exit::Ok);
    }
    print_summary(ctx, &summary, nodes.len(), &at_risk, &behind)?;
    Ok(Exit::Ok)
}

/// The summary for people: the counts, what is at risk or behind, what is under way, and
/// what needs an operator.
fn print_summary(
    ctx: &Ctx,
    summary: &Summary,
    nodes: usize,
    at_risk: &[&Node],
    behind: &[&Plugin],
) -> anyhow::Result<()> {
    let counts = |total: usize, by: &BTreeMap<String, usize>| {
        if by.is_empty() {
            return total.to_string();
        }
        let parts: Vec<_> = by.iter().map(|(k, n)| format!("{n} {k}")).collect();
        format!("{total} ({})", parts.join(", "))
    };
    ctx.out.line(format!(
        "volumes: {}",
        counts(summary.volumes.len(), &summary.volumes_by_state)
    ))?;
    let mut node_counts = counts(nodes, &summary.nodes_by_status);
    if !at_risk.is_empty() {
        // `2 (2 ready)` becomes `2 (2 ready, 1 at risk)`.
        node_counts = format!(
            "{}, {} at risk)",
            node_counts.trim_end_matches(')'),
            at_risk.len()
        );
    }
    ctx.out.line(format!("nodes:   {node_counts}"))?;
    for n in at_risk {
        ctx.out.line(format!(
            "  at risk: {}: {}",
            n.name,
            render::nodes::heartbeat(n)
        ))?;
    }
    for p in behind {
        ctx.out
            .line(render::plugins::queue_warning(&p.id, &p.queue))?;
    }
    if let Some(h) = &summary.server {
        ctx.out.line(format!("server:  {}", h.status))?;
        for r in &h.reasons {
            ctx.out.one_line(format!("  {r}"))?;
        }
    }
    let expanding: Vec<&Volume> = summary
        .volumes
        .iter()
        .filter(|v| v.expansion.is_some())
        .collect();
    if !expanding.is_empty() {
        ctx.out.line("")?;
        ctx.out.line("expansions:")?;
        for v in expanding {
            let e = v.expansion.as_ref().expect("filtered");
            let err = e
                .error
                .as_deref()
                .map(|err| format!(" (last error: {err})"))
                .unwrap_or_default();
            ctx.out
                .one_line(format!("  {}: {}{err}", v.name, e.progress()))?;
        }
    }
    let modifying: Vec<&Volume> = summary
        .volumes
        .iter()
        .filter(|v| v.modification.is_some())
        .collect();
    if !modifying.is_empty() {
        ctx.out.line("")?;
        ctx.out.line("modifications:")?;
        for v in modifying {
            let m = v.modification.as_ref().expect("filtered");
            let err = m
                .error
                .as_deref()
                .map(|err| format!(" (last error: {err})"))
                .unwrap_or_default();
            ctx.out
                .line(format!("  {}: {}{err}", v.name, m.progress()))?;
        }
    }
    if !summary.duplicate_volumes.is_empty() {
        ctx.out.line("")?;
        ctx.out.line(
            "backend volumes registered under several names (each name can take a single-writer claim on it):",
        )?;
        for d in &summary.duplicate_volumes {
            ctx.out.one_line(format!(
                "  [{}] {}: {}",
                d.plugin,
                d.external_id,
                d.volumes.join(", ")
            ))?;
            if let Some(last) = d.volumes.last() {
                ctx.out.one_line(format!(
                    "    keep one name: deregister the others once nothing claims them (csivol volume deregister {last})"
                ))?;
            }
        }
    }
    if !summary.blocked.is_empty() {
        ctx.out.line("")?;
        ctx.out.line("blocked volumes:")?;
        blocked_table(ctx, &summary.blocked)?;
    }
    if !summary.controller_findings.is_empty() {
        ctx.out.line("")?;
        ctx.out
            .line("controller findings (not fixed by csivol; act on them with a reason):")?;
        for f in &summary.controller_findings {
            ctx.out.one_line(format!(
                "  {} [{}] {}",
                f.kind.as_str(),
                f.plugin,
                f.message
            ))?;
            if let Some(hint) = finding_hint(f) {
                ctx.out.one_line(format!("    {hint}"))?;
            }
        }
    }
    if !summary.volumes.is_empty() {
        ctx.out.line("")?;
        ctx.out.line("volumes:")?;
        render::volumes(&ctx.out, &summary.volumes)?;
    }
    Ok(())
}

/// The next step an operator can take on a finding, where csivol has one.
fn finding_hint(f: &ControllerFinding) -> Option<String> {
    match (f.kind, &f.volume, &f.node) {
        // csivol's attachment has nothing behind it at the plugin: releasing the claims
        // there unpublishes it (the plugin answers OK), and a new claim publishes it anew.
        (FindingKind::Missing, Some(v), Some(n)) => Some(format!(
            "release the claims of {v} on {n} (csivol release {v} --alloc ALLOC) and claim again: csivol publishes it anew"
        )),
        (FindingKind::Leaked, Some(v), Some(n)) => Some(format!(
            "if nothing on {n} uses it, detach it: csivol detach {v} --node {n} --reason \"...\""
        )),
        (FindingKind::Leaked, _, _) => Some(format!(
            "unpublish `{}` from node id `{}` with the storage system's own tools, or claim it through csivol",
            f.external_id,
            f.node_id.as_deref().unwrap_or("?")
        )),
        _ => None,
    }
}

/// Every (volume, lost node) hold, with what the operator needs to judge an unblock.
pub(crate) fn blocked(volumes: &[Volume], nodes: &[Node], only_node: Option<&str>) -> Vec<Blocked> {
    let by_name: BTreeMap<&str, &Node> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let mut out = Vec::new();
    for v in volumes {
        let holders: BTreeSet<&str> = v
            .claims
            .iter()
            .filter(|c| c.state == ClaimState::Blocked)
            .map(|c| c.node.as_str())
            .chain(
                v.attachments
                    .iter()
                    .filter(|a| a.state == AttachmentState::Blocked)
                    .map(|a| a.node.as_str()),
            )
            .filter(|n| only_node.is_none_or(|o| o == *n))
            .collect();
        for node in holders {
            let n = by_name.get(node);
            out.push(Blocked {
                volume: v.name.clone(),
                node: node.to_owned(),
                lost_at: n.and_then(|n| n.lost_at.clone()),
                fence_after: n.and_then(|n| n.fence_after.clone()),
                fenced_at: n.and_then(|n| n.fenced_at.clone()),
                allocs: v
                    .claims
                    .iter()
                    .filter(|c| c.state == ClaimState::Blocked && c.node == node)
                    .map(|c| c.alloc.clone())
                    .collect(),
                attached: v
                    .attachments
                    .iter()
                    .any(|a| a.state == AttachmentState::Blocked && a.node == node),
                lingering_after: v
                    .attachments
                    .iter()
                    .filter(|a| a.state == AttachmentState::Blocked && a.node == node)
                    .find_map(|a| a.linger.as_ref().map(|l| l.after_alloc.clone())),
                unblock: format!("csivol unblock {} --node {node} --reason \"...\"", v.name),
                fence_method: n.and_then(|n| n.fence_method.clone()),
                fence: n
                    .filter(|n| n.fence_method.is_some())
                    .map(|_| format!("csivol fence {node} --reason \"...\"")),
                fence_lacks: n.and_then(|n| n.fence_lacks.clone()),
                fence_failures: n.map_or(0, |n| n.fence_failures),
                fence_error: n.and_then(|n| n.fence_error.clone()),
            });
        }
    }
    out
}

pub(crate) fn blocked_table(ctx: &Ctx, blocked: &[Blocked]) -> anyhow::Result<()> {
    let mut t = ctx.out.table(&[
        "VOLUME",
        "LOST NODE",
        "LOST SINCE",
        "SELF-FENCES",
        "BLOCKED CLAIMS",
        "UNBLOCK WITH",
        "OR FENCE WITH",
    ]);
    for b in blocked {
        let fences = match (&b.fence_after, &b.fenced_at) {
            (_, Some(at)) => format!("fenced at {at}"),
            (Some(after), None) => format!("yes, after {after}"),
            (None, None) => "no".into(),
        };
        let allocs = match (b.allocs.is_empty(), &b.lingering_after) {
            (true, Some(a)) => format!(
                "none: staged on lost node {}, lingering after alloc {a}'s release",
                b.node
            ),
            (true, None) => "-".to_owned(),
            (false, _) => b.allocs.join(", "),
        };
        t.add_row(vec![
            b.volume.clone(),
            b.node.clone(),
            b.lost_at
                .as_deref()
                .map_or_else(|| "-".to_owned(), |t| crate::output::time(&ctx.out, t)),
            fences,
            allocs,
            b.unblock.clone(),
            match (&b.fence, &b.fence_error) {
                (None, _) => b
                    .fence_lacks
                    .as_ref()
                    .map_or_else(|| "no fence method".to_owned(), |l| l.describe(&b.node)),
                (Some(f), None) => f.clone(),
                (Some(f), Some(e)) => format!(
                    "{f} (automatic fence failed {} time(s): {e})",
                    b.fence_failures
                ),
            },
        ]);
    }
    ctx.out.print_table(t)?;
    // One node blocking several volumes is unblocked in one go.
    let mut by_node: BTreeMap<&str, usize> = BTreeMap::new();
    for b in blocked {
        *by_node.entry(b.node.as_str()).or_default() += 1;
    }
    for (node, n) in by_node.into_iter().filter(|(_, n)| *n > 1) {
        ctx.out.note(format!(
            "hint: node {node} blocks {n} volumes; if it is really gone or fenced, unblock them all with: csivol unblock --node {node} --reason \"...\""
        ));
    }
    Ok(())
}
