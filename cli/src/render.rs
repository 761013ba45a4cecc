//! Table and text views of the API's types, shared by the commands. JSON output does not
//! come through here: it is the API's types serialised as they are.

use std::collections::BTreeMap;

use csivol_api::{
    ActionPlan, Claim, ClaimState, ClaimUsage, DEFAULT_NAMESPACE, Event, PlannedAction, Volume,
    VolumeState,
};

use crate::output::{Out, age, bytes, or_dash, time, when};

pub mod namespaces;
pub mod nodes;
pub mod plugins;
pub mod pools;

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
        .map(|a| match (a.state.as_str(), &a.linger) {
            ("attached", None) => a.node.clone(),
            ("attached", Some(_)) => format!("{} (staged, lingering)", a.node),
            (s, _) => format!("{} ({s})", a.node),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// An attachment's state, with the staging its node keeps after a release, if it does.
pub fn attachment_state(a: &csivol_api::AttachmentStatus) -> String {
    match &a.linger {
        None => a.state.as_str().to_owned(),
        Some(l) if a.state == csivol_api::AttachmentState::Blocked => format!(
            "blocked: staged on lost node {}, lingering after alloc {}'s release",
            a.node, l.after_alloc
        ),
        Some(l) => format!(
            "{}: staged, lingering after alloc {}'s release until {}",
            a.state, l.after_alloc, l.until
        ),
    }
}

/// A volume's state, saying for a blocked one whether it still takes new claims (a
/// multi-node-multi-writer volume blocked on one node does).
pub fn volume_state(v: &Volume) -> String {
    // Taken out of service by an operator: no new claims, whatever the holders.
    if let Some(a) = &v.availability {
        return format!("{}, {}", v.state, a.eligibility.as_str());
    }
    // A failed job's per-job volume, kept for inspection before it is deleted.
    if let Some(until) = v.job.as_ref().and_then(|j| j.kept_until.as_deref()) {
        return format!("{}, kept until {until}", v.state);
    }
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
    // How full each volume is gets a column once some node reported of its claims.
    let with_usage = vs
        .iter()
        .any(|v| v.claims.iter().any(|c| c.usage.is_some()));
    // The namespace gets a column once a volume listed is not of `default`.
    let spaced = vs.iter().any(|v| v.namespace != DEFAULT_NAMESPACE);
    let mut header = vec!["NAME", "PLUGIN", "ACCESS MODE", "STATE", "CLAIMS", "NODES"];
    if spaced {
        header.insert(0, "NAMESPACE");
    }
    if with_usage {
        header.push("USED/SIZE");
    }
    let mut t = out.table(&header);
    for v in vs {
        let mut row = Vec::with_capacity(header.len());
        if spaced {
            row.push(cell(&v.namespace));
        }
        row.extend([
            cell(&v.name),
            cell(&v.plugin),
            cell(v.access_mode),
            cell(volume_state(v)),
            cell(claim_summary(&v.claims)),
            cell(attached_nodes(v)),
        ]);
        if with_usage {
            row.push(cell(crate::usage::volume_cell(&v.claims)));
        }
        t.add_row(row);
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
    let mut rows = vec![("state", volume_state(v))];
    if v.namespace != DEFAULT_NAMESPACE {
        rows.insert(0, ("namespace", v.namespace.clone()));
    }
    if let Some(a) = &v.availability {
        let reason = a
            .reason
            .as_deref()
            .map_or(String::new(), |r| format!(": {r}"));
        rows.push((
            "eligibility",
            format!(
                "{}, no new claims, since {} by {}{reason}",
                a.eligibility.as_str(),
                a.since,
                a.actor
            ),
        ));
    }
    if let Some(j) = &v.job {
        let kept = j.kept_until.as_deref().map_or(String::new(), |t| {
            format!("; its job failed: kept until {t}, then deleted")
        });
        rows.push((
            "per-job",
            format!(
                "`{}` of alloc {} on node {}, deleted after its release{kept}",
                j.name, j.alloc, j.node
            ),
        ));
    }
    rows.extend([
        ("plugin", v.plugin.clone()),
        ("external id", or_dash(Some(&v.external_id))),
        ("access mode", v.access_mode.to_string()),
        ("attachment", v.attachment.to_string()),
    ]);
    if let Some(c) = v.capacity_bytes {
        rows.push(("capacity", bytes(c)));
    }
    if !v.fs_type.is_empty() {
        rows.push(("fs type", v.fs_type.clone()));
    }
    if !v.mount_flags.is_empty() {
        rows.push(("mount flags", v.mount_flags.join(", ")));
    }
    if !v.claim_mount_flags.is_empty() {
        rows.push(("claim mount flags", v.claim_mount_flags.join(", ")));
    }
    if let Some(c) = &v.selinux_context {
        rows.push(("selinux context", c.clone()));
    }
    if let Some(o) = v.ownership {
        rows.push(("ownership", format!("{} (the volume's own)", o.as_str())));
    }
    if !v.labels.is_empty() {
        rows.push(("labels", map(&v.labels)));
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
                cell(attachment_state(a)),
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
        // Likewise the group a claim's workload writes as, and how full the volume is.
        let with_group = v.claims.iter().any(|c| c.mount.gid.is_some());
        let with_usage = v.claims.iter().any(|c| c.usage.is_some());
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
        if with_group {
            header.push("GROUP");
        }
        if with_usage {
            header.push("USED/SIZE");
        }
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
            if with_group {
                row.push(cell(group(c)));
            }
            if with_usage {
                row.push(cell(crate::usage::cell(c.usage.as_ref())));
            }
            if with_labels {
                row.push(cell(labels(c)));
            }
            t.add_row(row);
        }
        out.print_table(t)?;
        if v.claims
            .iter()
            .any(|c| c.usage == Some(ClaimUsage::NotReported))
        {
            out.line(format!("usage: {}", crate::usage::NOT_REPORTED))?;
        }
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
        // None yet while the claim waits in a pool's line.
        (
            "volume",
            or_dash(Some(c.volume.as_str()).filter(|v| !v.is_empty())),
        ),
        ("node", c.node.clone()),
        ("mode", c.mode.to_string()),
        ("state", c.state.to_string()),
        ("target path", or_dash(c.target_path.as_deref())),
    ];
    if let Some(p) = &c.pool {
        rows.push(("pool", format!("{} ({})", p.pool, p.why)));
    }
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
    if let Some(u) = &c.usage {
        rows.push(("usage", crate::usage::detail(u)));
    }
    if c.mount.gid.is_some() {
        rows.push(("group", group(c)));
    }
    if let Some(why) = &c.mount.not_applied {
        rows.push(("group not applied", why.clone()));
    }
    if let Some(o) = &c.mount.ownership_change {
        rows.push(("ownership change", ownership_change(o)));
    }
    if !c.mount.mount_flags.is_empty() {
        rows.push(("mount flags", c.mount.mount_flags.join(", ")));
    }
    if let Some(ctx) = &c.mount.selinux_context {
        rows.push(("selinux context", ctx.clone()));
    }
    if !c.labels.is_empty() {
        rows.push(("labels", labels(c)));
    }
    rows.push(("created", when(&c.created_at)));
    record(out, &format!("claim of alloc {}", c.alloc), &rows)
}

/// What csivol's ownership change did on the claim's node.
fn ownership_change(o: &csivol_api::OwnershipChange) -> String {
    let entries = match o.entries {
        0 => "no entry changed: the root had the group".to_owned(),
        1 => "1 entry given the group".to_owned(),
        n => format!("{n} entries given the group"),
    };
    if o.bounded {
        format!("{entries}, then stopped at the agent's bound: entries past it keep theirs")
    } else {
        entries
    }
}

/// The group a claim's workload writes as, and who applies it: `1234 (plugin)`.
fn group(c: &Claim) -> String {
    match (c.mount.gid, c.mount.group_by) {
        (Some(gid), Some(by)) => format!("{gid} ({})", by.as_str()),
        (Some(gid), None) => gid.to_string(),
        _ => "-".to_owned(),
    }
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
    // How full each claim's volume is: with `-o wide`.
    let wide = out.format == crate::args::Format::Wide;
    let spaced = claims.iter().any(|c| c.namespace != DEFAULT_NAMESPACE);
    let mut header = vec![
        "VOLUME",
        "ALLOC",
        "NODE",
        "MODE",
        "STATE",
        "AGE",
        "LEASE UNTIL",
    ];
    if spaced {
        header.insert(0, "NAMESPACE");
    }
    if wide {
        header.push("USED/SIZE");
    }
    header.extend(["LABELS", "NOTES"]);
    let mut t = out.table(&header);
    for c in claims {
        let mut row = Vec::with_capacity(header.len());
        if spaced {
            row.push(cell(&c.namespace));
        }
        row.extend([
            cell(&c.volume),
            cell(&c.alloc),
            cell(&c.node),
            cell(c.mode),
            cell(c.state.as_str()),
            cell(age(&c.created_at)),
            cell(opt_time(out, c.expires_at.as_deref())),
        ]);
        if wide {
            row.push(cell(crate::usage::cell(c.usage.as_ref())));
        }
        row.extend([cell(labels(c)), cell(claim_trouble(c))]);
        t.add_row(row);
    }
    out.print_table(t)?;
    if wide
        && claims
            .iter()
            .any(|c| c.usage == Some(ClaimUsage::NotReported))
    {
        out.note(format!(
            "USED/SIZE `not reported`: {}",
            crate::usage::NOT_REPORTED
        ));
    }
    Ok(())
}

pub fn tokens(out: &Out, ts: &[csivol_api::TokenInfo]) -> anyhow::Result<()> {
    let mut t = out.table(&[
        "ID",
        "NAME",
        "ROLE",
        "ADDED",
        "NAMESPACES",
        "VOLUMES",
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
            cell(added_capabilities(tok)),
            cell(if tok.namespaces.is_empty() {
                "*".to_owned()
            } else {
                tok.namespaces.join(",")
            }),
            cell(if tok.volumes.is_empty() {
                "*".to_owned()
            } else {
                tok.volumes.join(",")
            }),
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

/// The capabilities a token holds beyond its role's preset, or `-`.
fn added_capabilities(t: &csivol_api::TokenInfo) -> String {
    let preset = t.role.preset();
    let added: Vec<&str> = t
        .capabilities
        .iter()
        .filter(|c| !preset.contains(c))
        .map(|c| c.as_str())
        .collect();
    if added.is_empty() {
        "-".to_owned()
    } else {
        added.join(",")
    }
}

/// `token show`: one token, a field a line.
pub fn token(out: &Out, t: &csivol_api::TokenInfo) -> anyhow::Result<()> {
    let caps: Vec<&str> = t.capabilities.iter().map(|c| c.as_str()).collect();
    let lines = [
        ("id", t.id.clone()),
        ("name", or_dash(t.name.as_deref())),
        ("role", t.role.as_str().to_owned()),
        (
            "capabilities",
            if caps.is_empty() {
                "-".to_owned()
            } else {
                caps.join(", ")
            },
        ),
        ("added", added_capabilities(t)),
        (
            "namespaces",
            if t.namespaces.is_empty() {
                "* (every namespace)".to_owned()
            } else {
                t.namespaces.join(", ")
            },
        ),
        (
            "volumes",
            if t.volumes.is_empty() {
                "* (every volume)".to_owned()
            } else {
                t.volumes.join(", ")
            },
        ),
        ("node", or_dash(t.node.as_deref())),
        ("status", t.status.clone()),
        ("created", t.created_at.clone()),
        ("last used", or_dash(t.last_used_at.as_deref())),
        ("expires", or_dash(t.expires_at.as_deref())),
    ];
    for (k, v) in lines {
        out.line(format!("{:<14}{v}", format!("{k}:")))?;
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
    let spaced = es.iter().any(|e| elsewhere(e).is_some());
    let mut header = vec![
        "INDEX", "TIME", "KIND", "VOLUME", "NODE", "ALLOC", "ACTOR", "MESSAGE",
    ];
    if spaced {
        header.insert(3, "NAMESPACE");
    }
    let mut t = out.table(&header);
    t.optional(&["INDEX", "ACTOR", "ALLOC"]);
    for e in es {
        let mut row = vec![e.index.to_string(), time(out, &e.at), e.kind.clone()];
        if spaced {
            row.push(or_dash(e.namespace.as_deref()));
        }
        row.extend([
            or_dash(e.volume.as_deref()),
            or_dash(e.node.as_deref()),
            or_dash(e.alloc.as_deref()),
            e.actor.clone(),
            e.message.clone(),
        ]);
        t.add_row(row);
    }
    out.print_table(t)
}

/// An event's namespace, when it is not `default`.
fn elsewhere(e: &Event) -> Option<&str> {
    e.namespace.as_deref().filter(|ns| *ns != DEFAULT_NAMESPACE)
}

/// One event on one line, for `events --follow`.
pub fn event_line(e: &Event) -> String {
    let mut subject = Vec::new();
    if let Some(ns) = elsewhere(e) {
        subject.push(format!("namespace={ns}"));
    }
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
