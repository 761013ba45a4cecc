//! Controller-side reconciliation, the server's half: a controller host's listing of its
//! plugin's volumes is compared with csivol's attachments (`reconcile::compare`), and what
//! a second listing confirms is kept for `status` and written as an event. Nothing is
//! detached or attached here: an operator acts on a finding.

use csivol_api::{FindingKind, ListedVolume};

use super::events::event;
use crate::error::ApiResult;
use crate::store::Txn;
use csivol_rules::kinds::EventKind;
use csivol_rules::reconcile::{compare, update};

/// `Report::ControllerVolumes` from `node`, a host of `plugin`'s controller.
pub(super) fn controller_volumes(
    ctx: &mut impl Txn,
    node: &str,
    plugin: &str,
    started_ms: u64,
    volumes: &[ListedVolume],
) -> ApiResult<()> {
    // Only a host of the plugin's controller speaks for it.
    if !ctx
        .node_plugins(node)?
        .iter()
        .any(|p| p.plugin == plugin && p.controller)
    {
        return Ok(());
    }
    // Without LIST_VOLUMES_PUBLISHED_NODES the listing says nothing of publications
    // (spec.md, ListVolumes: `published_node_ids` is filled only by a plugin with it):
    // it is shown (`plugin volumes`), never compared.
    if !ctx
        .controller_capabilities(plugin)?
        .is_some_and(|c| c.list_volumes_published_nodes)
    {
        return Ok(());
    }
    let (known, recorded) = ctx.reconcile_facts(plugin)?;
    // Attachments are the plugin's only when it publishes through the controller.
    let recorded = if ctx.needs_controller_publish(plugin)? {
        recorded
    } else {
        Vec::new()
    };
    let found = compare(
        &known,
        &recorded,
        volumes,
        i64::try_from(started_ms).unwrap_or(i64::MAX),
    );
    let before: Vec<_> = ctx
        .controller_findings(Some(plugin))?
        .into_iter()
        .map(|(_, k)| k)
        .collect();
    let u = update(&before, found, ctx.now());
    let actor = format!("node:{node}");
    for f in &u.confirmed {
        let kind = match f.kind {
            FindingKind::Leaked => EventKind::AttachmentLeaked,
            FindingKind::Missing => EventKind::AttachmentMissing,
            FindingKind::Abnormal => EventKind::VolumeAbnormal,
        };
        event(
            ctx,
            kind,
            f.volume.as_deref(),
            f.node.as_deref(),
            None,
            &actor,
            format!("plugin `{plugin}`: {}", f.message),
        )?;
    }
    for f in &u.resolved {
        event(
            ctx,
            EventKind::FindingResolved,
            f.volume.as_deref(),
            f.node.as_deref(),
            None,
            &actor,
            format!(
                "plugin `{plugin}`: no longer {}: {}",
                f.kind.as_str(),
                f.message
            ),
        )?;
    }
    if u.keep != before {
        ctx.put_controller_findings(plugin, &u.keep)?;
    }
    Ok(())
}
