//! An operator's labels on a node (`csivol node label`): the only labels that choose a
//! node's fence method and fill its command. `relabel` decides, table-tested below;
//! `set_labels` records it with an event.

use std::collections::BTreeMap;

use csivol_api::NodeLabelRequest;

use super::events::event;
use crate::error::{ApiError, ApiResult};
use crate::store::Txn;
use crate::watch::Key;
use csivol_rules::kinds::EventKind;

use csivol_api::limits::{MAX_NODE_LABELS, NODE_LABEL_VALUE_BYTES as MAX_LABEL_VALUE};

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
        csivol_api::check_text(&format!("labels.{key}"), value).map_err(ApiError::text)?;
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
    if labels.len() > MAX_NODE_LABELS && labels.len() > current.len() {
        return Err(ApiError::invalid(format!(
            "node `{node}` would have {} labels, more than the {MAX_NODE_LABELS} csivol allows",
            labels.len()
        ))
        .with_hint(format!(
            "remove labels it no longer needs: csivol node label {node} KEY-"
        )));
    }
    Ok((labels, changes))
}

/// `POST /v1/nodes/{node}/labels`: an operator's labels, with an event naming who.
pub fn set_labels(
    ctx: &mut impl Txn,
    node: &str,
    req: &NodeLabelRequest,
    configured: Option<&BTreeMap<String, String>>,
    actor: &str,
) -> ApiResult<()> {
    ctx.require_node(node)?;
    let current = ctx.node_fence_facts(node)?.operator_labels;
    let (labels, changes) = relabel(node, &current, configured, req)?;
    if changes.is_empty() {
        return Ok(());
    }
    ctx.set_node_operator_labels(node, &labels)?;
    ctx.touch(Key::Node(node.to_owned()));
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
}
