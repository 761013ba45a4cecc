//! Namespaces for people: the list, and one namespace with what it holds.

use csivol_api::Namespace;

use super::{cell, record};
use crate::output::{Out, bytes};

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

/// What is used, against its bound where the quota sets one (`3 of 10`).
fn against(used: String, bound: Option<u64>, show: fn(u64) -> String) -> String {
    match bound {
        Some(max) => format!("{used} of {}", show(max)),
        None => used,
    }
}

pub fn namespace(out: &Out, ns: &Namespace) -> anyhow::Result<()> {
    let q = ns.quota.clone().unwrap_or_default();
    let n = |v: u64| v.to_string();
    let mut rows = vec![
        ("volumes", against(n(ns.volumes), q.volumes, n)),
        ("claims", against(n(ns.claims), q.claims, n)),
    ];
    // What only a quota or its use makes worth a line.
    if ns.capacity_bytes > 0 || q.capacity_bytes.is_some() {
        rows.push((
            "capacity",
            against(bytes(ns.capacity_bytes), q.capacity_bytes, bytes),
        ));
    }
    if ns.fresh_volumes > 0 || q.fresh_volumes.is_some() {
        rows.push((
            "per-job volumes",
            against(n(ns.fresh_volumes), q.fresh_volumes, n),
        ));
    }
    rows.push(("snapshots", ns.snapshots.to_string()));
    if let Some(at) = &ns.created_at {
        rows.push(("created", at.clone()));
    }
    record(out, &format!("namespace {}", ns.name), &rows)
}
