//! A volume filling up: the one thing of a node's usage samples that is written, as an
//! event naming the claim's alloc and labels (the CI job's URL among them), so that the
//! on-call finds the job without the samples, which live in the server's memory only.

use csivol_rules::kinds::EventKind;

use super::events::event;
use crate::error::ApiResult;
use crate::store::Txn;

/// Records that `alloc`'s claim on `volume`, on `node`, crossed the server's threshold
/// (`what`: how full, in words). Nothing when the claim is gone or on another node by now:
/// a late sample tells nothing of the claim that replaced it.
pub fn volume_filling(
    ctx: &mut impl Txn,
    volume: &str,
    alloc: &str,
    node: &str,
    what: &str,
) -> ApiResult<bool> {
    let Some(claim) = ctx.claim(volume, alloc)? else {
        return Ok(false);
    };
    if claim.node != node {
        return Ok(false);
    }
    let labels: Vec<String> = claim
        .labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let labels = if labels.is_empty() {
        String::new()
    } else {
        format!(" (labels: {})", labels.join(", "))
    };
    event(
        ctx,
        EventKind::VolumeFilling,
        Some(volume),
        Some(node),
        Some(alloc),
        &format!("node:{node}"),
        format!(
            "volume `{volume}` is filling up on node `{node}`: {what}; claim `{alloc}`{labels}"
        ),
    )?;
    Ok(true)
}
