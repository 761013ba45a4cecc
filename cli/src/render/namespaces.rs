//! Namespaces for people: the list, and one namespace with what it holds.

use csivol_api::Namespace;

use super::{cell, record};
use crate::output::Out;

pub fn namespaces(out: &Out, all: &[Namespace]) -> anyhow::Result<()> {
    let mut t = out.table(&["NAME", "VOLUMES", "CLAIMS", "SNAPSHOTS", "CREATED"]);
    for ns in all {
        t.add_row([
            cell(&ns.name),
            cell(ns.volumes),
            cell(ns.claims),
            cell(ns.snapshots),
            cell(ns.created_at.as_deref().unwrap_or("-")),
        ]);
    }
    out.print_table(t)
}

pub fn namespace(out: &Out, ns: &Namespace) -> anyhow::Result<()> {
    let mut rows = vec![
        ("volumes", ns.volumes.to_string()),
        ("claims", ns.claims.to_string()),
        ("snapshots", ns.snapshots.to_string()),
    ];
    if let Some(at) = &ns.created_at {
        rows.push(("created", at.clone()));
    }
    record(out, &format!("namespace {}", ns.name), &rows)
}
