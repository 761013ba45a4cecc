//! Operator actions on a node as a whole: whether it takes new claims (eligibility, drain),
//! its labels (the ones fencing uses), and forgetting it (remove). The rules are pure
//! functions over plain data, table-tested below; the shell underneath reads and writes the
//! nodes table in the writer's transaction.

use std::collections::BTreeMap;

use csivol_api::{AttachmentState, ClaimState, Eligibility, NodeLabelRequest};
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

/// The longest label value (a BMC's address, a PDU outlet, a rack).
const MAX_LABEL_VALUE: usize = 1024;

/// What `csivol node label` does to the labels an operator set on `node` (`current`): the
/// labels it leaves and its changes in words (`bmc=10.0.0.2 (was 10.0.0.1)`, `removed
/// rack=4`), empty when nothing changes. Keys of the config file's `[node_labels]` are the
/// file's to change. A key must be usable as `{KEY}` in a fence command.
pub fn relabel(
    node: &str,
    current: &BTreeMap<String, String>,
    configured: Option<&BTreeMap<String, String>>,
    req: &NodeLabelRequest,
) -> Result<(BTreeMap<String, String>, Vec<String>), ApiError> {
    if req.set.is_empty() && req.remove.is_empty() {
        return Err(ApiError::invalid("no label to set or remove")
            .with_hint(format!("e.g. csivol node label {node} bmc=10.0.0.12 rack-")));
    }
    for key in req.set.keys().chain(&req.remove) {
        let ok = key.len() <= 63
            && key.starts_with(|c: char| c.is_ascii_alphanumeric())
            && csivol_rules::fence::is_label_key(key);
        if !ok {
            return Err(ApiError::invalid(format!(
                "invalid label key `{}`: use 1 to 63 letters, digits, `.`, `_` or `-`, starting with a letter or digit (a fence command names it as `{{KEY}}`)",
                key.escape_debug()
            )));
        }
        if let Some(v) = configured.and_then(|c| c.get(key)) {
            return Err(ApiError::invalid(format!(
                "label `{key}` of node `{node}` is set in the server's config file ({key} = \"{v}\" under [node_labels.{node}]); the API does not change it"
            ))
            .with_hint("change it in the config file of every server and restart them, or remove it there to set it with csivol node label"));
        }
    }
    for (key, value) in &req.set {
        if req.remove.contains(key) {
            return Err(ApiError::invalid(format!(
                "label `{key}` is both set and removed"
            )));
        }
        csivol_api::check_text(&format!("labels.{key}"), value).map_err(ApiError::control_text)?;
        if value.is_empty() || value.len() > MAX_LABEL_VALUE {
            return Err(ApiError::invalid(format!(
                "label `{key}` needs a value of 1 to {MAX_LABEL_VALUE} bytes"
            ))
            .with_hint(format!("to remove it: csivol node label {node} {key}-")));
        }
    }
    let mut labels = current.clone();
    let mut changes = Vec::new();
    for (key, value) in &req.set {
        match labels.insert(key.clone(), value.clone()) {
            Some(old) if old == *value => {}
            Some(old) => changes.push(format!("{key}={value} (was {old})")),
            None => changes.push(format!("{key}={value}")),
        }
    }
    for key in &req.remove {
        if let Some(old) = labels.remove(key) {
            changes.push(format!("removed {key}={old}"));
        }
    }
    Ok((labels, changes))
}

/// `POST /v1/nodes/{node}/labels`: an operator's labels, with an event naming who.
pub fn set_labels(
    ctx: &mut WriteCtx<'_>,
    node: &str,
    req: &NodeLabelRequest,
    configured: Option<&BTreeMap<String, String>>,
    actor: &str,
) -> ApiResult<()> {
    ctx.require_node(node)?;
    let current: String = ctx.tx.query_row(
        "SELECT operator_labels FROM nodes WHERE name = ?1",
        [node],
        |r| r.get(0),
    )?;
    let current: BTreeMap<String, String> = serde_json::from_str(&current)?;
    let (labels, changes) = relabel(node, &current, configured, req)?;
    if changes.is_empty() {
        return Ok(());
    }
    ctx.tx.execute(
        "UPDATE nodes SET operator_labels = ?1 WHERE name = ?2",
        params![serde_json::to_string(&labels)?, node],
    )?;
    ctx.touch(super::watch::Key::Node(node.to_owned()));
    event(
        ctx,
        EventKind::NodeLabelled,
        None,
        Some(node),
        None,
        actor,
        format!("operator labels: {}", changes.join(", ")),
    )
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
    fn an_operator_labels_a_node() {
        let l = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect()
        };
        let req = |set: &[(&str, &str)], remove: &[&str]| NodeLabelRequest {
            set: l(set),
            remove: remove.iter().map(|k| (*k).to_owned()).collect(),
        };
        let current = l(&[("bmc", "10.0.0.1"), ("rack", "4")]);
        let config = l(&[("pdu", "a")]);
        // (request, labels after, changes) or the refusal
        type After<'a> = Result<(&'a [(&'a str, &'a str)], &'a [&'a str]), &'a str>;
        let cases: Vec<(NodeLabelRequest, After<'_>)> = vec![
            (
                req(&[("bmc", "10.0.0.2"), ("zone", "a")], &["rack"]),
                Ok((
                    &[("bmc", "10.0.0.2"), ("zone", "a")],
                    &["bmc=10.0.0.2 (was 10.0.0.1)", "zone=a", "removed rack=4"],
                )),
            ),
            (
                req(&[("bmc", "10.0.0.1")], &["nothing"]),
                Ok((&[("bmc", "10.0.0.1"), ("rack", "4")], &[])),
            ),
            (req(&[], &[]), Err("no label to set or remove")),
            (
                req(&[("pdu", "b")], &[]),
                Err("label `pdu` of node `n1` is set in the server's config file"),
            ),
            (
                req(&[], &["pdu"]),
                Err("is set in the server's config file"),
            ),
            (
                req(&[("bmc", "")], &[]),
                Err("label `bmc` needs a value of 1 to 1024 bytes"),
            ),
            (
                req(&[("bmc", "x")], &["bmc"]),
                Err("label `bmc` is both set and removed"),
            ),
            (req(&[("b mc", "x")], &[]), Err("invalid label key `b mc`")),
            (req(&[("-x", "x")], &[]), Err("invalid label key `-x`")),
            (
                req(&[("bmc", "10.0.0.1\x1b]0;x\x07")], &[]),
                Err("`labels.bmc` holds the control character U+001B"),
            ),
        ];
        for (r, want) in cases {
            let got = relabel("n1", &current, Some(&config), &r);
            match (got, want) {
                (Ok((labels, changes)), Ok((after, said))) => {
                    assert_eq!(labels, l(after), "{r:?}");
                    assert_eq!(changes, said, "{r:?}");
                }
                (Err(e), Err(says)) => assert!(e.message.contains(says), "{r:?}: {e}"),
                (got, want) => panic!("{r:?}: got {got:?}, want {want:?}"),
            }
        }
    }

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
