//! Table and text views of the API's types, shared by the commands. JSON output does not
//! come through here: it is the API's types serialised as they are.

use std::collections::BTreeMap;

use std::time::Duration;

use csivol_api::{
    ActionPlan, Claim, ClaimState, ControllerQueue, Eligibility, Event, Node, NodeStatus,
    PlannedAction, Plugin, PluginObservation, Volume, VolumeState,
};

use crate::output::{Out, age, bytes, given_duration, or_dash, short_duration, time, when};

fn cell(s: impl ToString) -> String {
    s.to_string()
}

/// Aligned `key: value` lines under a title; each value on its one line.
pub fn record(out: &Out, title: &str, rows: &[(&str, String)]) -> anyhow::Result<()> {
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    out.styled_line(console::Style::new().bold(), title)?;
    let mut text = String::new();
    for (k, v) in rows {
        let v = crate::escape::line(v);
        text.push_str(&format!("  {:<width$}  {v}\n", format!("{k}:")));
    }
    if text.is_empty() {
        return Ok(());
    }
    out.line(text.trim_end())
}

/// Topology segments: `zone=a` or `zone=a, rack=1`, several joined by ` | `; `any` for
/// none (accessible from every node).
fn segments(ss: &[BTreeMap<String, String>]) -> String {
    if ss.is_empty() {
        return "any".into();
    }
    ss.iter().map(map).collect::<Vec<_>>().join(" | ")
}

fn map(m: &BTreeMap<String, String>) -> String {
    if m.is_empty() {
        return "-".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Claims counted by state, e.g. `1 ready, 1 attaching`.
fn claim_summary(claims: &[Claim]) -> String {
    if claims.is_empty() {
        return "-".into();
    }
    let mut parts = Vec::new();
    for s in ClaimState::ALL {
        let n = claims.iter().filter(|c| c.state == s).count();
        if n > 0 {
            parts.push(format!("{n} {s}"));
        }
    }
    parts.join(", ")
}

/// The nodes a volume is attached to, with the attachment's state where it is not plain
/// `attached`.
fn attached_nodes(v: &Volume) -> String {
    if v.attachments.is_empty() {
        return "-".into();
    }
    v.attachments
        .iter()
        .map(|a| match a.state.as_str() {
            "attached" => a.node.clone(),
            s => format!("{} ({s})", a.node),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A volume's state, saying for a blocked one whether it still takes new claims (a
/// multi-node-multi-writer volume blocked on one node does).
pub fn volume_state(v: &Volume) -> String {
    match (v.state, v.accepts_claims) {
        (VolumeState::Blocked, true) => "blocked, takes claims".into(),
        (VolumeState::Blocked, false) => "blocked, no new claims".into(),
        (s, _) => s.to_string(),
    }
}

pub fn volumes(out: &Out, vs: &[Volume]) -> anyhow::Result<()> {
    if vs.is_empty() {
        out.note("no volumes");
        return Ok(());
    }
    let mut t = out.table(&["NAME", "PLUGIN", "ACCESS MODE", "STATE", "CLAIMS", "NODES"]);
    for v in vs {
        t.add_row(vec![
            cell(&v.name),
            cell(&v.plugin),
            cell(v.access_mode),
            cell(volume_state(v)),
            cell(claim_summary(&v.claims)),
            cell(attached_nodes(v)),
        ]);
    }
    out.print_table(t)
}

/// Prints a volume: JSON, or the detailed view.
pub fn print_volume(out: &Out, v: &Volume) -> anyhow::Result<()> {
    if out.json_mode() {
        out.json(v)
    } else {
        volume(out, v)
    }
}

/// A volume in detail: its spec (secret values are never sent by the server; their keys
/// are shown redacted), its attachments and every claim.
pub fn volume(out: &Out, v: &Volume) -> anyhow::Result<()> {
    let mut rows = vec![
        ("state", volume_state(v)),
        ("plugin", v.plugin.clone()),
        ("external id", or_dash(Some(&v.external_id))),
        ("access mode", v.access_mode.to_string()),
        ("attachment", v.attachment.to_string()),
    ];
    if let Some(c) = v.capacity_bytes {
        rows.push(("capacity", bytes(c)));
    }
    if !v.fs_type.is_empty() {
        rows.push(("fs type", v.fs_type.clone()));
    }
    if !v.mount_flags.is_empty() {
        rows.push(("mount flags", v.mount_flags.join(", ")));
    }
    rows.push(("context", map(&v.context)));
    rows.push(("parameters", map(&v.parameters)));
    if !v.mutable_parameters.is_empty() || v.modification.is_some() {
        rows.push(("mutable parameters", map(&v.mutable_parameters)));
    }
    rows.push((
        "secrets",
        if v.secret_keys.is_empty() {
            "-".into()
        } else {
            v.secret_keys
                .iter()
                .map(|k| format!("{k}=<redacted>"))
                .collect::<Vec<_>>()
                .join(", ")
        },
    ));
    if !v.accessible_topology.is_empty() || v.topology_request.is_some() {
        rows.push(("accessible from", segments(&v.accessible_topology)));
    }
    if let Some(r) = &v.topology_request {
        if !r.required.is_empty() {
            rows.push(("topology required", segments(&r.required)));
        }
        if !r.preferred.is_empty() {
            rows.push(("topology preferred", segments(&r.preferred)));
        }
    }
    if let Some(e) = &v.error {
        rows.push(("error", e.clone()));
    }
    if let Some(e) = &v.expansion {
        rows.push(("expansion", e.progress()));
        if let Some(err) = &e.error {
            rows.push(("expansion error", err.clone()));
        }
    }
    if let Some(m) = &v.modification {
        rows.push(("modification", m.progress()));
        if let Some(err) = &m.error {
            rows.push(("modification error", err.clone()));
        }
    }
    rows.push(("created", when(&v.created_at)));
    record(out, &format!("volume {}", v.name), &rows)?;

    out.line("")?;
    if v.attachments.is_empty() {
        out.line("attachments: none")?;
    } else {
        out.line("attachments:")?;
        let mut t = out.table(&["NODE", "STATE", "FORCED", "ERROR", "NEXT RETRY", "SINCE"]);
        for a in &v.attachments {
            t.add_row(vec![
                cell(&a.node),
                cell(a.state.as_str()),
                cell(if a.forced { "yes" } else { "no" }),
                cell(or_dash(a.error.as_deref())),
                cell(opt_time(out, a.next_retry_at.as_deref())),
                cell(age(&a.updated_at)),
            ]);
        }
        out.print_table(t)?;
    }

    out.line("")?;
    if v.claims.is_empty() {
        out.line("claims: none")?;
    } else {
        out.line("claims:")?;
        // Labels get a column only when some claim has them.
        let with_labels = v.claims.iter().any(|c| !c.labels.is_empty());
        let mut header = vec![
            "ALLOC",
            "NODE",
            "MODE",
            "STATE",
            "TARGET PATH",
            "ERROR",
            "NEXT RETRY",
            "AGE",
        ];
        if with_labels {
            header.push("LABELS");
        }
        let mut t = out.table(&header);
        for c in &v.claims {
            let mut row = vec![
                cell(&c.alloc),
                cell(&c.node),
                cell(c.mode),
                cell(c.state.as_str()),
                cell(or_dash(c.target_path.as_deref())),
                cell(claim_trouble(c)),
                cell(opt_time(out, c.next_retry_at.as_deref())),
                cell(age(&c.created_at)),
            ];
            if with_labels {
                row.push(cell(labels(c)));
            }
            t.add_row(row);
        }
        out.print_table(t)?;
    }
    Ok(())
}

/// A claim's last error, what it waits for on its node, and an abnormal volume condition.
fn claim_trouble(c: &Claim) -> String {
    let mut parts: Vec<String> = c.error.iter().cloned().collect();
    if let Some(p) = c.queue_position {
        parts.push(format!("number {p} in line"));
    }
    if let Some(w) = &c.waiting {
        parts.push(format!("waiting: {}", crate::output::waiting(w)));
    }
    if let Some(cond) = &c.condition {
        parts.push(format!("abnormal: {cond}"));
    }
    if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join("; ")
    }
}

pub fn claim(out: &Out, c: &Claim) -> anyhow::Result<()> {
    let mut rows = vec![
        ("volume", c.volume.clone()),
        ("node", c.node.clone()),
        ("mode", c.mode.to_string()),
        ("state", c.state.to_string()),
        ("target path", or_dash(c.target_path.as_deref())),
    ];
    if let Some(e) = &c.error {
        rows.push(("error", e.clone()));
    }
    if let Some(t) = &c.next_retry_at {
        rows.push(("next retry", when(t)));
    }
    if let Some(w) = &c.waiting {
        rows.push(("waiting", crate::output::waiting(w)));
    }
    if let Some(cond) = &c.condition {
        rows.push(("condition", format!("abnormal: {cond}")));
    }
    if let Some(p) = c.queue_position {
        rows.push(("queue", format!("number {p} in line")));
    }
    if let Some(t) = &c.expires_at {
        rows.push(("lease until", when(t)));
    }
    if !c.labels.is_empty() {
        rows.push(("labels", labels(c)));
    }
    rows.push(("created", when(&c.created_at)));
    record(out, &format!("claim of alloc {}", c.alloc), &rows)
}

fn labels(c: &Claim) -> String {
    if c.labels.is_empty() {
        return "-".to_owned();
    }
    c.labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The claims on one node, for `node show`.
pub fn node_claims(out: &Out, claims: &[Claim]) -> anyhow::Result<()> {
    let mut t = out.table(&["VOLUME", "ALLOC", "MODE", "STATE", "TARGET PATH", "NOTES"]);
    for c in claims {
        t.add_row([
            c.volume.clone(),
            c.alloc.clone(),
            c.mode.to_string(),
            c.state.to_string(),
            or_dash(c.target_path.as_deref()),
            claim_trouble(c),
        ]);
    }
    out.print_table(t)
}

/// `claim list`: claims across volumes, oldest first per volume.
pub fn claims(out: &Out, claims: &[Claim]) -> anyhow::Result<()> {
    if claims.is_empty() {
        out.note("no claims");
        return Ok(());
    }
    let mut t = out.table(&[
        "VOLUME",
        "ALLOC",
        "NODE",
        "MODE",
        "STATE",
        "AGE",
        "LEASE UNTIL",
        "LABELS",
        "NOTES",
    ]);
    for c in claims {
        t.add_row(vec![
            cell(&c.volume),
            cell(&c.alloc),
            cell(&c.node),
            cell(c.mode),
            cell(c.state.as_str()),
            cell(age(&c.created_at)),
            cell(opt_time(out, c.expires_at.as_deref())),
            cell(labels(c)),
            cell(claim_trouble(c)),
        ]);
    }
    out.print_table(t)
}

/// A node's plugins as `id used/max`, `max` being `∞` for no limit.
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
            format!("{} {}/{max}", p.id, p.used)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn controller_hosts(out: &Out, h: &csivol_api::ControllerHosts) -> anyhow::Result<()> {
    if h.allowed.is_empty() {
        out.note(format!(
            "no node may host the controller of plugin {}; hint: csivol plugin controllers {} --allow NODE",
            h.plugin, h.plugin
        ));
    }
    let mut t = out.table(&["NODE", "ALLOWED BY", "SINCE", "HOSTING"]);
    for a in &h.allowed {
        let by = match (a.source.as_str(), &a.by) {
            ("token", Some(id)) => format!("token {id}"),
            (_, Some(actor)) => actor.clone(),
            (s, None) => s.to_owned(),
        };
        t.add_row(vec![
            cell(&a.node),
            cell(by),
            cell(or_dash(a.since.as_deref())),
            cell(if h.hosting.contains(&a.node) {
                "yes"
            } else {
                "no"
            }),
        ]);
    }
    out.print_table(t)
}

pub fn tokens(out: &Out, ts: &[csivol_api::TokenInfo]) -> anyhow::Result<()> {
    let mut t = out.table(&[
        "ID",
        "NAME",
        "ROLE",
        "NODE",
        "STATUS",
        "CREATED",
        "LAST USED",
        "EXPIRES",
        "CONTROLLERS",
    ]);
    for tok in ts {
        t.add_row(vec![
            cell(&tok.id),
            cell(or_dash(tok.name.as_deref())),
            cell(tok.role.as_str()),
            cell(or_dash(tok.node.as_deref())),
            cell(&tok.status),
            cell(&tok.created_at),
            cell(or_dash(tok.last_used_at.as_deref())),
            cell(or_dash(tok.expires_at.as_deref())),
            cell(if tok.controllers.is_empty() {
                "-".to_owned()
            } else {
                tok.controllers.join(",")
            }),
        ]);
    }
    out.print_table(t)
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
fn observed(o: Option<&PluginObservation>) -> (String, String) {
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
            p.used.to_string(),
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
fn limit_line(p: &csivol_api::NodePlugin) -> Option<String> {
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

pub fn plugins(out: &Out, ps: &[Plugin]) -> anyhow::Result<()> {
    if ps.is_empty() {
        out.note("no plugins: no node has registered one");
        return Ok(());
    }
    let mut t = out.table(&[
        "ID",
        "NAME",
        "VERSION",
        "NODES",
        "CONTROLLERS",
        "CONTROLLER PUBLISH",
        "VOLUMES",
        "QUEUE",
    ]);
    for p in ps {
        t.add_row(vec![
            p.id.clone(),
            p.name.clone(),
            p.version.clone(),
            format!("{}/{} healthy", p.nodes_healthy, p.nodes_expected),
            format!(
                "{}/{} healthy",
                p.controllers_healthy, p.controllers_expected
            ),
            if p.controller_publish { "yes" } else { "no" }.into(),
            p.volumes.to_string(),
            queue_summary(&p.queue),
        ]);
    }
    out.print_table(t)
}

/// A wait in milliseconds for people: `350ms`, `2.4s`, `3m5s`.
pub fn wait_ms(ms: u64) -> String {
    match ms {
        0..1000 => format!("{ms}ms"),
        1000..60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        _ => short_duration(Duration::from_millis(ms)),
    }
}

/// `3 waiting (oldest 2.4s), 8 running`, or `-` when the queue is empty.
fn queue_summary(q: &ControllerQueue) -> String {
    let depth = q.depth();
    match (depth, q.running.len(), q.oldest_wait_ms) {
        (0, 0, _) => "-".into(),
        (0, r, _) => format!("{r} running"),
        (d, r, oldest) => format!(
            "{d} waiting (oldest {}), {r} running",
            wait_ms(oldest.unwrap_or(0))
        ),
    }
}

/// The line `status` warns with when a plugin's oldest waiting controller operation has
/// waited past the server's threshold.
pub fn queue_warning(plugin: &str, q: &ControllerQueue) -> String {
    let waiting: Vec<String> = q
        .waiting
        .iter()
        .map(|(kind, k)| format!("{} {kind}", k.count))
        .collect();
    format!(
        "warning: plugin {plugin}: its oldest controller operation has waited {} (warning after {}): {} waiting, {} of {} running",
        wait_ms(q.oldest_wait_ms.unwrap_or(0)),
        wait_ms(q.warn_after_ms),
        waiting.join(", "),
        q.running.len(),
        q.concurrency
    )
}

pub fn plugin(out: &Out, p: &Plugin) -> anyhow::Result<()> {
    let yes = |b: bool| if b { "yes" } else { "no" }.to_owned();
    record(
        out,
        &format!("plugin {}", p.id),
        &[
            ("name", p.name.clone()),
            ("version", p.version.clone()),
            (
                "nodes",
                format!("{} healthy of {}", p.nodes_healthy, p.nodes_expected),
            ),
            (
                "controllers",
                format!(
                    "{} healthy of {}",
                    p.controllers_healthy, p.controllers_expected
                ),
            ),
            ("controller publish", yes(p.controller_publish)),
            ("stage/unstage", yes(p.stage_unstage)),
            ("snapshots", yes(p.snapshots)),
            ("clone volume", yes(p.clone_volume)),
            ("modify volume", yes(p.modify_volume)),
            ("group snapshots", yes(p.group_snapshots)),
            ("volumes", p.volumes.to_string()),
            (
                "controller queue",
                format!(
                    "{}; at most {} running",
                    queue_summary(&p.queue),
                    p.queue.concurrency
                ),
            ),
        ],
    )?;
    controller_queue(out, &p.id, &p.queue)?;
    if p.nodes.is_empty() {
        return Ok(());
    }
    out.line("")?;
    out.line("nodes:")?;
    // Which readiness check each node's agent applies, and what the plugin made there for
    // the last claim it published: at the staging path and at the target.
    let mut t = out.table(&[
        "NODE",
        "STATUS",
        "TOPOLOGY",
        "READY CHECK",
        "STAGED AS",
        "PUBLISHED AS",
        "LAST PUBLISHED",
    ]);
    t.optional(&["LAST PUBLISHED"]);
    for n in &p.nodes {
        let (staged, published) = observed(n.observed.as_ref());
        t.add_row(vec![
            n.name.clone(),
            n.status.to_string(),
            map(&n.topology),
            or_dash(n.ready_check.as_deref()),
            staged,
            published,
            n.observed.as_ref().map_or_else(
                || "-".to_owned(),
                |o| format!("{}/{} at {}", o.volume, o.alloc, time(out, &o.at)),
            ),
        ]);
    }
    out.print_table(t)
}

/// A plugin's controller queue in detail: what waits by kind (with its oldest wait), what
/// waits out a retry's backoff, and each running operation with how long it waited to run.
fn controller_queue(out: &Out, plugin: &str, q: &ControllerQueue) -> anyhow::Result<()> {
    if q.behind() {
        out.line("")?;
        out.line(queue_warning(plugin, q))?;
    }
    if !q.waiting.is_empty() || !q.backing_off.is_empty() {
        out.line("")?;
        out.line("waiting:")?;
        let mut t = out.table(&["KIND", "WAITING", "OLDEST WAIT", "BACKING OFF"]);
        let kinds: std::collections::BTreeSet<&String> =
            q.waiting.keys().chain(q.backing_off.keys()).collect();
        for kind in kinds {
            let w = q.waiting.get(kind);
            t.add_row(vec![
                kind.clone(),
                w.map_or(0, |w| w.count).to_string(),
                w.map_or_else(|| "-".into(), |w| wait_ms(w.oldest_wait_ms)),
                q.backing_off.get(kind).copied().unwrap_or(0).to_string(),
            ]);
        }
        out.print_table(t)?;
    }
    if !q.running.is_empty() {
        out.line("")?;
        out.line("running:")?;
        let mut t = out.table(&["OP", "KIND", "VOLUME", "NODE", "HOST", "WAITED", "RUNNING"]);
        for r in &q.running {
            t.add_row(vec![
                r.id.to_string(),
                r.kind.clone(),
                r.volume.clone(),
                or_dash(r.node.as_deref()),
                r.host.clone(),
                wait_ms(r.waited_ms),
                wait_ms(r.running_ms),
            ]);
        }
        out.print_table(t)?;
    }
    Ok(())
}

pub fn events(out: &Out, es: &[Event]) -> anyhow::Result<()> {
    if es.is_empty() {
        out.note("no events");
        return Ok(());
    }
    // At 80 columns the message needs the room: the index, actor and alloc give it up
    // (`-o wide` shows them all).
    let mut t = out.table(&[
        "INDEX", "TIME", "KIND", "VOLUME", "NODE", "ALLOC", "ACTOR", "MESSAGE",
    ]);
    t.optional(&["INDEX", "ACTOR", "ALLOC"]);
    for e in es {
        t.add_row([
            e.index.to_string(),
            time(out, &e.at),
            e.kind.clone(),
            or_dash(e.volume.as_deref()),
            or_dash(e.node.as_deref()),
            or_dash(e.alloc.as_deref()),
            e.actor.clone(),
            e.message.clone(),
        ]);
    }
    out.print_table(t)
}

/// One event on one line, for `events --follow`.
pub fn event_line(e: &Event) -> String {
    let mut subject = Vec::new();
    for (k, v) in [
        ("volume", &e.volume),
        ("node", &e.node),
        ("alloc", &e.alloc),
    ] {
        if let Some(v) = v {
            subject.push(format!("{k}={v}"));
        }
    }
    format!(
        "{}  {}  {}  {}  [{}]",
        e.at,
        e.kind,
        subject.join(" "),
        e.message,
        e.actor
    )
}

/// One planned (or done) operator action as a sentence.
pub fn action(a: &PlannedAction, done: bool) -> String {
    let lost = a
        .lost_since
        .as_deref()
        .map(|t| format!(", lost since {t}"))
        .unwrap_or_default();
    let alloc = a.alloc.as_deref().unwrap_or("?");
    match (a.action.as_str(), done) {
        ("force-release", false) => format!(
            "force-release the claim of alloc {alloc} on volume {} held by node {}{lost}, without the node",
            a.volume, a.node
        ),
        ("force-release", true) => format!(
            "force-released the claim of alloc {alloc} on volume {} held by node {}{lost}",
            a.volume, a.node
        ),
        ("force-detach", false) => format!(
            "force-detach volume {} from node {}{lost}: ControllerUnpublishVolume without the node",
            a.volume, a.node
        ),
        ("force-detach", true) => format!(
            "force-detaching volume {} from node {}{lost}",
            a.volume, a.node
        ),
        ("unpublish-leaked", false) => format!(
            "unpublish volume {} from node {}{lost}, where the plugin has it published and csivol has nothing: ControllerUnpublishVolume",
            a.volume, a.node
        ),
        ("unpublish-leaked", true) => format!(
            "unpublishing volume {} from node {}{lost}",
            a.volume, a.node
        ),
        ("release", false) => format!(
            "release the claim of alloc {alloc} on volume {} through node {}",
            a.volume, a.node
        ),
        ("release", true) => format!(
            "releasing the claim of alloc {alloc} on volume {} through node {}",
            a.volume, a.node
        ),
        ("stop-waiting", false) => format!(
            "stop waiting for node {}{lost} to say what it holds after the restore (until then \
             the volumes of its plugins that two nodes must not hold go to no node)",
            a.node
        ),
        ("stop-waiting", true) => format!(
            "stopped waiting for node {}{lost} to say what it holds after the restore",
            a.node
        ),
        (other, _) => format!("{other} volume {} on node {}", a.volume, a.node),
    }
}

/// A plan as sentences on stdout (the data of `--dry-run` and of the done action).
pub fn plan(out: &Out, p: &ActionPlan) -> anyhow::Result<()> {
    let done = !p.dry_run;
    let head = if done { "done:" } else { "would:" };
    out.line(head)?;
    for a in &p.actions {
        out.line(format!("  {}", action(a, done)))?;
    }
    Ok(())
}

/// A time for a table cell, `-` for none.
fn opt_time(out: &Out, ts: Option<&str>) -> String {
    ts.map_or_else(|| "-".to_owned(), |t| time(out, t))
}
