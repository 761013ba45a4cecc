//! The check's report for people: what each call did and what the plugin made, the
//! departures from the spec, and whether they would hurt csivol.

use std::io::Write as _;

use serde::Serialize;

use super::findings::{Purpose, Severity};
use super::{Outcome, Verdict};
use csivol_rules::agent::observed::Observation;

/// What an observation shows, for people.
pub(super) fn describe(o: &Observation) -> String {
    let mut parts = Vec::new();
    if let Some(rdev) = o.device {
        parts.push(format!(
            "a block device node ({})",
            crate::mounts::dev_name(rdev)
        ));
    }
    if let Some(m) = &o.mount {
        parts.push(format!(
            "a mount of device {} root {} (source {})",
            m.device,
            m.root.display(),
            m.source
        ));
    }
    for i in &o.inside {
        parts.push(format!(
            "a mount inside it at {} (device {} root {})",
            i.path.display(),
            i.mount.device,
            i.mount.root.display()
        ));
    }
    if parts.is_empty() {
        "nothing (no mount point, no device node)".to_owned()
    } else {
        parts.join("; ")
    }
}

/// The names of a capability set's fields that are on.
fn on(caps: &impl Serialize) -> String {
    let v = serde_json::to_value(caps).unwrap_or_default();
    let names: Vec<String> = v
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, v)| v.as_bool() == Some(true) || v.is_string())
        .map(|(k, v)| match v.as_str() {
            Some(s) => format!("{k} ({s})"),
            None => k.clone(),
        })
        .collect();
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

pub(super) fn print_text(o: &Outcome) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "plugin {} at {}", o.plugin, o.endpoint)?;
    writeln!(out, "  name:          {} {}", o.name, o.version)?;
    writeln!(out, "  plugin:        {}", on(&o.capabilities))?;
    match &o.controller {
        Some(c) => writeln!(out, "  controller:    {}", on(c))?,
        None => writeln!(out, "  controller:    none")?,
    }
    writeln!(out, "  node:          {}", on(&o.node))?;
    let topology = o.node_info.accessible_topology.as_ref().map_or_else(
        || "none".to_owned(),
        |t| {
            t.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        },
    );
    writeln!(
        out,
        "  node info:     node id {}, max volumes {}, topology {topology}",
        o.node_info.node_id,
        match o.node_info.max_volumes_per_node {
            0 => "no limit".to_owned(),
            n => n.to_string(),
        }
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "round trip ({}, single-node-writer) on scratch volume {}:",
        o.access,
        o.volume.as_deref().unwrap_or("-")
    )?;
    for c in &o.calls {
        let label = match c.purpose {
            Purpose::First => c.rpc.to_owned(),
            Purpose::Again => format!("{} (again)", c.rpc),
            Purpose::UnknownVolume => format!("{} (no such volume)", c.rpc),
        };
        let result = match &c.code {
            None => "OK".to_owned(),
            Some(code) => format!("{code}: {}", c.message),
        };
        writeln!(out, "  {label:<40} {:>6}ms  {result}", c.ms)?;
    }
    writeln!(out)?;
    writeln!(out, "shape:")?;
    let staging = o.staging.as_ref().map_or_else(
        || {
            if o.node.stage_unstage_volume {
                "not staged".to_owned()
            } else {
                "no staging (no STAGE_UNSTAGE_VOLUME)".to_owned()
            }
        },
        describe,
    );
    writeln!(out, "  staging path:  {staging}")?;
    writeln!(
        out,
        "  target:        {}",
        o.target
            .as_ref()
            .map_or_else(|| "not published".to_owned(), describe)
    )?;
    let rule = match o.ready_check {
        "mount" => "each path held to what the plugin made there",
        _ => "the paths exist",
    };
    let verdict = |v: &Option<Verdict>| match v {
        None => "not checked".to_owned(),
        Some(Verdict { ok: true, .. }) => "passed".to_owned(),
        Some(Verdict { why, .. }) => format!("failed: {}", why.as_deref().unwrap_or("")),
    };
    writeln!(
        out,
        "readiness:       {} ({rule}): {}",
        o.ready_check,
        verdict(&o.ready)
    )?;
    writeln!(out, "data:            {}", verdict(&o.data))?;
    if o.node.volume_mount_group {
        writeln!(out, "mount group:     {}", verdict(&o.mount_group))?;
    } else {
        writeln!(
            out,
            "mount group:     not offered (no VOLUME_MOUNT_GROUP): a claim's group needs the \
             server's `ownership` for the plugin"
        )?;
    }
    writeln!(out)?;
    if o.departures.is_empty() {
        writeln!(out, "departures from the spec: none")?;
    } else {
        writeln!(out, "departures from the spec:")?;
        for d in &o.departures {
            let tag = match d.severity {
                Severity::Hurts => "HURTS csivol",
                Severity::Note => "note",
            };
            writeln!(out, "  {tag}: {}", d.what)?;
            writeln!(out, "    {}", d.rule)?;
        }
    }
    writeln!(
        out,
        "{}",
        if o.ok {
            "csivol can use this plugin with these settings"
        } else {
            "csivol cannot use this plugin as it is: see HURTS above"
        }
    )
}
