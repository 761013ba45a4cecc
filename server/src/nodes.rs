//! Operator actions on a node as a whole: whether it takes new claims (eligibility, drain)
//! and forgetting it (remove). The rules are pure functions over plain data, table-tested
//! below; the shell underneath reads and writes the nodes table in the writer's transaction.

use csivol_api::{AttachmentState, ClaimState, Eligibility};
use rusqlite::params;

use super::db::WriteCtx;
use super::error::{ApiError, ApiResult};
use super::lifecycle::event;
use super::store::Snapshot;
use csivol_rules::kinds::EventKind;

/// Why a new claim on `node` is refused, if it is.
pub fn claim_refusal(node: &str, eligibility: Eligibility) -> Option<ApiError> {
    let why = match eligibility {
        Eligibility::Eligible => return None,
        Eligibility::Ineligible => "is not eligible for new claims",
        Eligibility::Draining => "is being drained",
    };
    Some(
        ApiError::conflict(format!("node `{node}` {why}: it takes no new claims"))
            .with_hint(format!(
                "claim on another node, or make it eligible again: csivol node eligibility {node} --enable"
            )),
    )
}

/// What a node still holds, as far as removing it is concerned.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Holdings {
    /// `(volume, alloc, state)` of every claim on the node.
    pub claims: Vec<(String, String, ClaimState)>,
    /// `(volume, state)` of every attachment to the node.
    pub attachments: Vec<(String, AttachmentState)>,
    /// Controller operations assigned to the node's agent.
    pub ops: usize,
}

/// Whether `node` may be forgotten: only when nothing is claimed on it, attached to it or
/// running on it. Blocked holdings need an unblock; the rest needs their owners to release
/// (a drain), never a forced release.
pub fn removal(node: &str, h: &Holdings) -> Result<(), ApiError> {
    let blocked = h.claims.iter().any(|c| c.2 == ClaimState::Blocked)
        || h.attachments
            .iter()
            .any(|a| a.1 == AttachmentState::Blocked);
    if blocked {
        let volumes: std::collections::BTreeSet<&str> = h
            .claims
            .iter()
            .filter(|c| c.2 == ClaimState::Blocked)
            .map(|c| c.0.as_str())
            .chain(
                h.attachments
                    .iter()
                    .filter(|a| a.1 == AttachmentState::Blocked)
                    .map(|a| a.0.as_str()),
            )
            .collect();
        let volumes: Vec<&str> = volumes.into_iter().collect();
        return Err(ApiError::conflict(format!(
            "refusing to remove node `{node}`: it blocks {} ({})",
            count(volumes.len(), "volume"),
            volumes.join(", ")
        ))
        .with_hint(format!(
            "if node {node} is really gone or fenced, run: csivol unblock --node {node} --reason \"...\""
        )));
    }
    if !h.claims.is_empty() || !h.attachments.is_empty() {
        let mut what = Vec::new();
        if !h.claims.is_empty() {
            what.push(count(h.claims.len(), "claim"));
        }
        if !h.attachments.is_empty() {
            what.push(count(h.attachments.len(), "attachment"));
        }
        return Err(ApiError::conflict(format!(
            "refusing to remove node `{node}`: it still has {}",
            what.join(" and ")
        ))
        .with_hint(format!(
            "drain it and wait for the owners to release their claims: csivol node drain {node} --wait"
        )));
    }
    if h.ops > 0 {
        return Err(ApiError::conflict(format!(
            "refusing to remove node `{node}`: its agent runs {}",
            count(h.ops, "controller operation")
        ))
        .with_hint("wait for them to finish (csivol events --node) and try again"));
    }
    Ok(())
}

fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// `POST /v1/nodes/{node}/eligibility`: records the operator's choice, with an event.
pub fn set_eligibility(
    ctx: &mut WriteCtx<'_>,
    node: &str,
    eligibility: Eligibility,
    actor: &str,
) -> ApiResult<()> {
    let n = ctx.require_node(node)?;
    if n.eligibility == eligibility {
        return Ok(());
    }
    ctx.tx.execute(
        "UPDATE nodes SET eligibility = ?1 WHERE name = ?2",
        params![eligibility.as_str(), node],
    )?;
    let (kind, message) = match eligibility {
        Eligibility::Eligible => (EventKind::NodeEligible, "node takes new claims again"),
        Eligibility::Ineligible => (EventKind::NodeIneligible, "node takes no new claims"),
        Eligibility::Draining => (
            EventKind::NodeDraining,
            "node is being drained: no new claims; its claims are left to their owners to release",
        ),
    };
    event(ctx, kind, None, Some(node), None, actor, message)
}

/// `DELETE /v1/nodes/{node}`: forgets a node that holds nothing (see [`removal`]).
pub fn remove(ctx: &mut WriteCtx<'_>, node: &str, actor: &str) -> ApiResult<()> {
    let n = ctx.require_node(node)?;
    let h = holdings(ctx.tx, node)?;
    removal(node, &h)?;
    ctx.tx
        .execute("DELETE FROM node_plugins WHERE node = ?1", [node])?;
    ctx.tx
        .execute("DELETE FROM nodes WHERE name = ?1", [node])?;
    event(
        ctx,
        EventKind::NodeRemoved,
        None,
        Some(node),
        None,
        actor,
        format!(
            "node removed (it was {}); an agent that registers it again brings it back",
            n.status.as_str()
        ),
    )
}

fn holdings(conn: &rusqlite::Connection, node: &str) -> ApiResult<Holdings> {
    let mut h = Holdings::default();
    let mut stmt = conn.prepare("SELECT volume, alloc, state FROM claims WHERE node = ?1")?;
    let rows = stmt.query_map([node], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
        ))
    })?;
    for row in rows {
        let (v, a, s) = row?;
        h.claims
            .push((v, a, s.parse().map_err(ApiError::internal)?));
    }
    let mut stmt = conn.prepare("SELECT volume, state FROM attachments WHERE node = ?1")?;
    let rows = stmt.query_map([node], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
    })?;
    for row in rows {
        let (v, s) = row?;
        h.attachments
            .push((v, s.parse().map_err(ApiError::internal)?));
    }
    h.ops = conn.query_row("SELECT count(*) FROM ops WHERE host = ?1", [node], |r| {
        r.get::<_, i64>(0)
    })? as usize;
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_eligible_node_takes_new_claims() {
        assert!(claim_refusal("n1", Eligibility::Eligible).is_none());
        for (e, says) in [
            (
                Eligibility::Ineligible,
                "node `n1` is not eligible for new claims",
            ),
            (Eligibility::Draining, "node `n1` is being drained"),
        ] {
            let err = claim_refusal("n1", e).expect("refused");
            assert!(err.to_string().contains(says), "{err}");
        }
    }

    #[test]
    fn a_node_is_removed_only_when_it_holds_nothing() {
        let claim = |s| ("v1".to_owned(), "a1".to_owned(), s);
        let att = |s| ("v1".to_owned(), s);
        // (holdings, refused with, hint names)
        let cases: Vec<(Holdings, Option<&str>, &str)> = vec![
            (Holdings::default(), None, ""),
            (
                Holdings {
                    claims: vec![claim(ClaimState::Ready)],
                    attachments: vec![att(AttachmentState::Attached)],
                    ops: 0,
                },
                Some("it still has 1 claim and 1 attachment"),
                "csivol node drain n1 --wait",
            ),
            (
                Holdings {
                    claims: vec![claim(ClaimState::Queued)],
                    ..Holdings::default()
                },
                Some("it still has 1 claim"),
                "csivol node drain n1 --wait",
            ),
            (
                Holdings {
                    claims: vec![claim(ClaimState::Blocked)],
                    attachments: vec![
                        att(AttachmentState::Blocked),
                        ("v2".into(), AttachmentState::Blocked),
                    ],
                    ops: 0,
                },
                Some("it blocks 2 volumes (v1, v2)"),
                "csivol unblock --node n1",
            ),
            (
                Holdings {
                    ops: 2,
                    ..Holdings::default()
                },
                Some("its agent runs 2 controller operations"),
                "wait for them",
            ),
        ];
        for (h, refused, hint) in cases {
            match (removal("n1", &h), refused) {
                (Ok(()), None) => {}
                (Err(e), Some(says)) => {
                    assert!(e.to_string().contains(says), "{e} / {h:?}");
                    assert!(format!("{e:?}").contains(hint), "{e:?} / {h:?}");
                }
                (got, want) => panic!("{h:?}: got {got:?}, want {want:?}"),
            }
        }
    }
}
