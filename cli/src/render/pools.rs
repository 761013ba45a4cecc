//! Pools for people: the pool list, and one pool with its members and its line.

use std::time::Duration;

use csivol_api::Pool;

use super::{cell, record};
use crate::output::{Out, given_duration};

/// `KEY=VALUE,KEY=VALUE`, as `pool create --selector` takes it.
fn selector(p: &Pool) -> String {
    p.selector
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `3/4 (75%)` of the pool's last claims that got a member with the same key.
fn warm_hits(p: &Pool) -> String {
    if p.recent_claims == 0 {
        return "-".into();
    }
    format!(
        "{}/{} ({}%)",
        p.warm_hits,
        p.recent_claims,
        p.warm_hits * 100 / p.recent_claims
    )
}

/// The claim in line a member is held for.
fn held_for<'a>(p: &'a Pool, member: &str) -> Option<&'a str> {
    p.line
        .iter()
        .find(|w| w.held.as_deref() == Some(member))
        .map(|w| w.alloc.as_str())
}

fn free(p: &Pool) -> usize {
    p.members
        .iter()
        .filter(|m| {
            m.holders.is_empty() && m.availability.is_none() && held_for(p, &m.volume).is_none()
        })
        .count()
}

pub fn pools(out: &Out, ps: &[Pool]) -> anyhow::Result<()> {
    if ps.is_empty() {
        out.note("no pools");
        return Ok(());
    }
    // The namespace gets a column once a pool listed is not of `default`.
    let spaced = ps
        .iter()
        .any(|p| p.namespace != csivol_api::DEFAULT_NAMESPACE);
    let mut header = vec![
        "NAME",
        "SELECTOR",
        "MEMBERS",
        "FREE",
        "WAITING",
        "WARM HITS",
    ];
    if spaced {
        header.insert(0, "NAMESPACE");
    }
    let mut t = out.table(&header);
    for p in ps {
        let mut row = Vec::with_capacity(header.len());
        if spaced {
            row.push(cell(&p.namespace));
        }
        row.extend([
            cell(&p.name),
            cell(selector(p)),
            cell(p.members.len()),
            cell(free(p)),
            cell(p.line.len()),
            cell(warm_hits(p)),
        ]);
        t.add_row(row);
    }
    out.print_table(t)
}

pub fn pool(out: &Out, p: &Pool) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    if p.namespace != csivol_api::DEFAULT_NAMESPACE {
        rows.push(("namespace", p.namespace.clone()));
    }
    rows.push(("selector", selector(p)));
    if let Some(l) = p.linger_ms {
        rows.push(("linger", given_duration(Duration::from_millis(l))));
    }
    rows.push(("members", format!("{} ({} free)", p.members.len(), free(p))));
    if !p.line.is_empty() {
        rows.push(("line", format!("{} waiting", p.line.len())));
    }
    rows.push(("warm hits", format!("{} of its last claims", warm_hits(p))));
    record(out, &format!("pool {}", p.name), &rows)?;
    if p.members.is_empty() {
        out.note(format!(
            "no volume's labels match; label one: csivol volume label VOLUME {}",
            selector(p).replace(',', " ")
        ));
        return Ok(());
    }
    let mut t = out.table(&["MEMBER", "HOLDER", "CACHE KEY", "STAGED ON"]);
    for m in &p.members {
        let holder = match (&m.availability, m.holders.is_empty()) {
            (Some(e), true) => format!("- ({e})"),
            (Some(e), false) => format!("{} ({e})", m.holders.join(", ")),
            (None, true) => match held_for(p, &m.volume) {
                Some(a) => format!("- (held for {a})"),
                None => "-".into(),
            },
            (None, false) => m.holders.join(", "),
        };
        t.add_row([
            cell(&m.volume),
            cell(holder),
            cell(m.cache_key.as_deref().unwrap_or("-")),
            cell(if m.staged_on.is_empty() {
                "-".into()
            } else {
                m.staged_on.join(", ")
            }),
        ]);
    }
    out.print_table(t)?;
    if p.line.is_empty() {
        return Ok(());
    }
    // The line, first first: how long each waited, and the member held for the first
    // once it waited past the server's bound.
    let mut t = out.table(&["#", "ALLOC", "NODE", "MODE", "WAITED", "HELD"]);
    for w in &p.line {
        let waited = Duration::from_secs(w.waited_ms / 1000);
        t.add_row([
            cell(w.position),
            cell(&w.alloc),
            cell(&w.node),
            cell(w.mode),
            cell(given_duration(waited)),
            cell(match &w.held {
                Some(m) => format!("{m} (waited past the bound)"),
                None => "-".into(),
            }),
        ]);
    }
    out.print_table(t)
}
