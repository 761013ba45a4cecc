//! Plugins for people: the plugin list, one plugin in full with its controller queue, and
//! who may host its controller.

use std::time::Duration;

use csivol_api::{ControllerQueue, Plugin, PluginCapacity, PluginSnapshots, PluginVolumes};

use super::nodes::observed;
use super::{cell, map, record};
use crate::output::{Out, bytes, or_dash, short_duration, time};

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
    capacity(out, &p.capacity)?;
    calls(out, &p.calls)?;
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

/// The plugin's last ListVolumes beside csivol's records.
pub fn storage_volumes(out: &Out, l: &PluginVolumes) -> anyhow::Result<()> {
    if !l.lists_volumes {
        out.note(format!(
            "the plugin {} does not list its volumes (no LIST_VOLUMES)",
            l.plugin
        ));
        return Ok(());
    }
    let Some(age) = l.age_ms else {
        out.note(format!(
            "plugin {} not listed yet by a controller host reporting to this server",
            l.plugin
        ));
        return Ok(());
    };
    out.note(format!(
        "listed {} ago by a controller host of plugin {}",
        short_duration(Duration::from_millis(age)),
        l.plugin
    ));
    let mut t = out.table(&["EXTERNAL ID", "VOLUME", "SIZE", "PUBLISHED TO", "CONDITION"]);
    for v in &l.volumes {
        let published = if !l.published_nodes {
            "(not reported)".to_owned()
        } else if v.listed.published_node_ids.is_empty() {
            "-".to_owned()
        } else {
            v.listed.published_node_ids.join(", ")
        };
        let condition = match (&v.listed.abnormal, l.condition) {
            (_, false) => "(not reported)".to_owned(),
            (Some(m), true) => format!("abnormal: {m}"),
            (None, true) => "normal".to_owned(),
        };
        t.add_row(vec![
            v.listed.external_id.clone(),
            v.volume.clone().unwrap_or_else(|| "unknown".to_owned()),
            if v.listed.capacity_bytes == 0 {
                "-".to_owned()
            } else {
                bytes(v.listed.capacity_bytes)
            },
            published,
            condition,
        ]);
    }
    out.print_table(t)
}

/// The plugin's last ListSnapshots beside csivol's snapshot records.
pub fn storage_snapshots(out: &Out, l: &PluginSnapshots) -> anyhow::Result<()> {
    if !l.lists_snapshots {
        out.note(format!(
            "the plugin {} does not list snapshots (no LIST_SNAPSHOTS)",
            l.plugin
        ));
        return Ok(());
    }
    let Some(age) = l.age_ms else {
        out.note(format!(
            "plugin {} not listed yet by a controller host reporting to this server",
            l.plugin
        ));
        return Ok(());
    };
    out.note(format!(
        "listed {} ago by a controller host of plugin {}",
        short_duration(Duration::from_millis(age)),
        l.plugin
    ));
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut t = out.table(&[
        "SNAPSHOT ID",
        "SNAPSHOT",
        "SOURCE VOLUME ID",
        "VOLUME",
        "SIZE",
        "CUT",
        "READY",
    ]);
    for s in &l.snapshots {
        t.add_row(vec![
            s.listed.snapshot_id.clone(),
            s.snapshot.clone().unwrap_or_else(|| "unknown".to_owned()),
            or_dash(Some(&s.listed.source_volume_id)),
            s.volume.clone().unwrap_or_else(|| "-".to_owned()),
            if s.listed.size_bytes == 0 {
                "-".to_owned()
            } else {
                bytes(s.listed.size_bytes)
            },
            s.listed.creation_time_ms.map_or_else(
                || "-".to_owned(),
                |t| {
                    format!(
                        "{} ago",
                        short_duration(Duration::from_millis(now_ms.saturating_sub(t)))
                    )
                },
            ),
            if s.listed.ready_to_use { "yes" } else { "no" }.to_owned(),
        ]);
    }
    out.print_table(t)
}

/// What the plugin's controller said it has left, per segment and parameter set, with the
/// age of each answer.
fn capacity(out: &Out, c: &PluginCapacity) -> anyhow::Result<()> {
    out.line("")?;
    if !c.reported {
        return out.line("capacity: the plugin does not report capacity (no GET_CAPACITY)");
    }
    if c.samples.is_empty() {
        return out.line("capacity: not sampled yet by a controller host reporting to this server");
    }
    out.line("capacity:")?;
    let mut t = out.table(&[
        "SEGMENT",
        "PARAMETERS",
        "AVAILABLE",
        "MAX VOLUME SIZE",
        "MIN VOLUME SIZE",
        "AGE",
    ]);
    t.optional(&["MIN VOLUME SIZE"]);
    let size = |b: Option<u64>| b.map_or_else(|| "-".to_owned(), bytes);
    for s in &c.samples {
        let q = &s.sample.query;
        t.add_row(vec![
            if q.segment.is_empty() {
                "(all)".to_owned()
            } else {
                map(&q.segment)
            },
            map(&q.parameters),
            bytes(s.sample.available_bytes),
            size(s.sample.maximum_volume_size),
            size(s.sample.minimum_volume_size),
            format!(
                "{}{}",
                short_duration(Duration::from_millis(s.age_ms)),
                if s.fresh { "" } else { " (stale)" }
            ),
        ]);
    }
    out.print_table(t)
}

/// Each node's calls to the plugin by method, over its agent's life: a slow node plugin
/// told apart from a slow controller, and a node whose calls fail.
fn calls(out: &Out, calls: &[csivol_api::PluginCallStats]) -> anyhow::Result<()> {
    if calls.is_empty() {
        return Ok(());
    }
    out.line("")?;
    out.line("CSI calls (since each node's agent started):")?;
    let mut t = out.table(&["NODE", "METHOD", "CALLS", "ERRORS", "P50", "P99"]);
    let quantile = |us: Option<u64>| match us {
        Some(us) if us < 1000 => format!("<={us}us"),
        Some(us) => format!("<={}ms", us as f64 / 1000.0),
        None => "-".to_owned(),
    };
    for c in calls {
        let rate = if c.calls == 0 {
            0.0
        } else {
            c.errors as f64 * 100.0 / c.calls as f64
        };
        t.add_row(vec![
            c.node.clone(),
            c.method.clone(),
            c.calls.to_string(),
            format!("{} ({rate:.1}%)", c.errors),
            quantile(c.p50_us),
            quantile(c.p99_us),
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
