//! Namespaces' quotas: at most so many volumes, bytes of capacity, claims and per-job
//! volumes in one namespace. Each is checked in the write that would pass it (the
//! creation, the expansion, the claim), against what the namespace uses in that same
//! transaction, so two requests at once never both take the last unit; the refusal says
//! what is used, what the limit is, and who uses most.

use csivol_api::{self as api, Quota};

use crate::error::{ApiError, ApiResult};
use crate::store::Snapshot;
use crate::store::namespaces::Bound;

/// The limit `quota` sets on `bound`, if any.
fn limit(quota: &Quota, bound: Bound) -> Option<u64> {
    match bound {
        Bound::Volumes => quota.volumes,
        Bound::CapacityBytes => quota.capacity_bytes,
        Bound::Claims => quota.claims,
        Bound::FreshVolumes => quota.fresh_volumes,
    }
}

/// What `bound` counts, in a sentence, and the `namespace quota` flag that sets it.
fn words(bound: Bound) -> (&'static str, &'static str) {
    match bound {
        Bound::Volumes => ("volume(s)", "--volumes"),
        Bound::CapacityBytes => ("of capacity", "--capacity"),
        Bound::Claims => ("claim(s)", "--claims"),
        Bound::FreshVolumes => ("per-job volume(s)", "--fresh-volumes"),
    }
}

/// `n` as the quota counts it: bytes with their binary unit, else the number.
fn amount(bound: Bound, n: u64) -> String {
    if bound != Bound::CapacityBytes {
        return n.to_string();
    }
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Refuses what would take namespace `namespace` past its quota on `bound`: `more` is what
/// the request adds (a volume, its bytes, a claim), `what` names the request. Nothing to
/// check, and nothing read, when the namespace has no quota on it or the request adds
/// nothing.
pub(super) fn refuse_past(
    conn: &(impl Snapshot + ?Sized),
    namespace: &str,
    bound: Bound,
    more: u64,
    what: &str,
) -> ApiResult<()> {
    if more == 0 {
        return Ok(());
    }
    let Some(max) = conn
        .namespace_quota(namespace)?
        .and_then(|q| limit(&q, bound))
    else {
        return Ok(());
    };
    let used = conn.namespace_used(namespace, bound)?;
    let after = used.saturating_add(more);
    if after <= max {
        return Ok(());
    }
    let (unit, flag) = words(bound);
    let most = match conn.namespace_most(namespace, bound)? {
        Some((who, n)) if n > 0 => {
            let who = match bound {
                Bound::CapacityBytes => format!("volume `{}`", api::split_key(&who).1),
                Bound::Claims => format!("token `{who}`"),
                _ => format!("alloc `{who}`"),
            };
            format!("; {who} holds most ({})", amount(bound, n))
        }
        _ => String::new(),
    };
    Err(ApiError::conflict(format!(
        "namespace `{namespace}` is at its quota of {} {unit}: {} used, and {what} would make \
         it {}{most}",
        amount(bound, max),
        amount(bound, used),
        amount(bound, after),
    ))
    .with_hint(format!(
        "free some first (release a claim, delete a volume), or raise the quota: `csivol \
         namespace quota {namespace} {flag} N`"
    )))
}

/// Refuses volume `v` (new, or registered again) past its namespace's quota: a new volume
/// counts one, and its capacity counts what it has over what it had.
pub(super) fn refuse_past_for_volume(
    conn: &(impl Snapshot + ?Sized),
    v: &crate::model::VolumeRow,
) -> ApiResult<()> {
    let namespace = api::namespace_of(&v.name);
    let had = conn.volume(&v.name)?;
    let what = format!("volume `{}`", api::split_key(&v.name).1);
    if had.is_none() {
        refuse_past(conn, namespace, Bound::Volumes, 1, &what)?;
    }
    let before = had.and_then(|h| h.capacity_bytes).unwrap_or(0);
    let more = v.capacity_bytes.unwrap_or(0).saturating_sub(before);
    refuse_past(conn, namespace, Bound::CapacityBytes, more, &what)
}

/// Sets namespace `namespace`'s quota (replacing the one it had; an empty one removes it).
pub fn set_namespace_quota(
    ctx: &mut (impl crate::store::Txn + ?Sized),
    namespace: &str,
    quota: &Quota,
    actor: &str,
) -> ApiResult<api::Namespace> {
    super::namespaces::require_namespace(&*ctx, namespace)?;
    let before = ctx.namespace_quota(namespace)?.unwrap_or_default();
    ctx.set_namespace_quota(namespace, quota)?;
    if before != *quota {
        let message = format!(
            "quota of namespace {namespace} set: {} (was {})",
            described(quota),
            described(&before)
        );
        super::events::event(
            ctx,
            csivol_rules::kinds::EventKind::NamespaceQuotaSet,
            None,
            None,
            None,
            actor,
            message,
        )?;
    }
    super::namespaces::namespace_view(&*ctx, namespace)
}

/// A quota in words, for its event: each bound it sets, or `none`.
fn described(quota: &Quota) -> String {
    let bounds: Vec<String> = [
        Bound::Volumes,
        Bound::CapacityBytes,
        Bound::Claims,
        Bound::FreshVolumes,
    ]
    .into_iter()
    .filter_map(|b| {
        let (_, flag) = words(b);
        limit(quota, b).map(|n| format!("{} {}", flag.trim_start_matches('-'), amount(b, n)))
    })
    .collect();
    if bounds.is_empty() {
        "none".into()
    } else {
        bounds.join(", ")
    }
}
