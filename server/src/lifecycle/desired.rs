//! The desired state of a node: what its agent should publish, unpublish, unstage and grow,
//! and the controller operations it runs. Sent whole, or as the entries of the volumes that
//! changed since the index the agent holds (`desired_changes`), so that a wake-up costs what
//! changed, not what the node holds.

use std::collections::{BTreeMap, BTreeSet};

use csivol_api::{self as api, AttachmentState, ClaimMode, ClaimState, NodeStatus};

use super::changes::{ClaimEntry, claim_entry};
use super::heard::unreported;
use super::ops::op_to_api;
use crate::error::ApiResult;
use crate::model::{AttachmentRow, ClaimRow, VolumeRow};
use crate::store::Snapshot;

/// `GET /v1/nodes/{node}/desired`: the whole state, every volume with a claim or an
/// attachment on the node.
pub fn desired_state(conn: &dyn Snapshot, node: &str, index: u64) -> ApiResult<api::DesiredState> {
    let mut out = start(conn, node, index)?;
    let mut held: BTreeMap<String, (Vec<ClaimRow>, Option<AttachmentRow>)> = BTreeMap::new();
    for c in conn.claims_of_node(node, None)? {
        held.entry(c.volume.clone()).or_default().0.push(c);
    }
    for a in conn.attachments_of_node(node)? {
        let entry = held.entry(a.volume.clone()).or_default();
        entry.1 = Some(a);
    }
    for (volume, (claims, att)) in held {
        if let Some(v) = conn.volume(&volume)? {
            keep_staged(conn, &v, node, &claims, att.as_ref(), &mut out)?;
            volume_entries(&v, node, claims, att.as_ref(), &mut out);
        }
    }
    // One query for what to unstage (the same rows `volume_entries` reads per volume).
    out.unstage = conn.unstaging_on(node)?;
    Ok(out)
}

/// `GET /v1/nodes/{node}/desired?since=N`: the entries of `volumes` (those changed on the
/// node after `since`, from `watch::Hub::node_changes`), with the rest left as the agent
/// holds them.
pub fn desired_changes(
    conn: &dyn Snapshot,
    node: &str,
    index: u64,
    since: u64,
    volumes: BTreeSet<String>,
) -> ApiResult<api::DesiredState> {
    let mut out = start(conn, node, index)?;
    for volume in &volumes {
        let Some(v) = conn.volume(volume)? else {
            continue;
        };
        let mut claims = conn.claims_of_volume(volume)?;
        claims.retain(|c| c.node == node);
        claims.sort_by(|a, b| a.alloc.cmp(&b.alloc));
        let att = conn.attachment(volume, node)?;
        if let Some(a) = att
            .as_ref()
            .filter(|a| a.state == AttachmentState::Unstaging)
        {
            out.unstage.push(api::DesiredUnstage {
                volume: a.volume.clone(),
                plugin: v.plugin.clone(),
                external_id: v.external_id.clone(),
            });
        }
        keep_staged(conn, &v, node, &claims, att.as_ref(), &mut out)?;
        volume_entries(&v, node, claims, att.as_ref(), &mut out);
    }
    out.changes = Some(api::DesiredChanges {
        since,
        volumes: volumes.into_iter().collect(),
    });
    Ok(out)
}

/// What every answer carries whole: the node's status and its controller operations.
fn start(conn: &dyn Snapshot, node: &str, index: u64) -> ApiResult<api::DesiredState> {
    let n = conn.require_node(node)?;
    // The state was restored and the node has not said what it holds: it registers again
    // first, acting on nothing meanwhile. `lost` tells an older agent the same.
    let register_again = unreported(conn, node)?;
    let mut controller_ops = Vec::new();
    for o in conn.ops_of_host(node)? {
        if let Some(op) = op_to_api(conn, &o)? {
            controller_ops.push(op);
        }
    }
    let capacity = capacity_queries(conn, node)?;
    Ok(api::DesiredState {
        index,
        capacity,
        status: Some(if register_again {
            NodeStatus::Lost
        } else {
            n.status
        }),
        register_again,
        controller_ops,
        refresh_limits: u64::try_from(n.limits_refresh_at).unwrap_or(0),
        ..api::DesiredState::default()
    })
}

/// Parameter sets asked about per plugin: with the plugin-wide query and the segments, the
/// queries stay within [`api::limits::MAX_CAPACITY_QUERIES`].
const PARAMETER_SETS: usize = 8;

/// The GetCapacity calls `node` makes for each plugin whose controller it hosts and whose
/// controller there reports GET_CAPACITY (the node calls its own): the plugin as a whole
/// and each segment its ready nodes lie in, each with every parameter set of its volumes
/// (at most [`PARAMETER_SETS`]) and with none.
/// Segments and sets that came after the host's last desired state are asked about once
/// the next one reaches it.
fn capacity_queries(conn: &dyn Snapshot, node: &str) -> ApiResult<Vec<api::CapacityQueries>> {
    let mut out = Vec::new();
    for plugin in conn.capacity_plugins(node)? {
        let segments: BTreeSet<api::Topology> = std::iter::once(api::Topology::new())
            .chain(
                conn.ready_plugin_nodes(&plugin)?
                    .into_iter()
                    .map(|(_, t)| t),
            )
            .collect();
        let mut sets: BTreeSet<BTreeMap<String, String>> = conn
            .parameter_sets(&plugin, PARAMETER_SETS)?
            .into_iter()
            .collect();
        sets.insert(BTreeMap::new());
        let queries: Vec<api::CapacityQuery> = sets
            .iter()
            .flat_map(|parameters| {
                segments.iter().map(|segment| api::CapacityQuery {
                    segment: segment.clone(),
                    parameters: parameters.clone(),
                })
            })
            .take(api::limits::MAX_CAPACITY_QUERIES)
            .collect();
        out.push(api::CapacityQueries { plugin, queries });
    }
    Ok(out)
}

/// The staging of `v` that `node` keeps with no claim: one kept after a release, or one
/// whose claims there are all being released when its pool lingers (listed before the
/// node takes their targets down, so that it does not unstage it meanwhile).
fn keep_staged(
    conn: &dyn Snapshot,
    v: &VolumeRow,
    node: &str,
    claims: &[ClaimRow],
    att: Option<&AttachmentRow>,
    out: &mut api::DesiredState,
) -> ApiResult<()> {
    if !att.is_some_and(|a| a.state == AttachmentState::Attached) {
        return Ok(());
    }
    let releasing = claims.iter().any(|c| c.state == ClaimState::Releasing);
    let kept = !conn.lingers(Some(&v.name), Some(node))?.is_empty()
        || (releasing
            && super::lingers::linger_for(conn, v, node, &conn.claims_of_volume(&v.name)?)?
                .is_some());
    if kept {
        out.keep_staged.push(api::DesiredKeepStaged {
            volume: v.name.clone(),
            plugin: v.plugin.clone(),
            external_id: v.external_id.clone(),
        });
    }
    Ok(())
}

/// One volume's publish, unpublish and expand entries on `node`, from its claims there (by
/// alloc) and its attachment.
fn volume_entries(
    v: &VolumeRow,
    node: &str,
    claims: Vec<ClaimRow>,
    att: Option<&AttachmentRow>,
    out: &mut api::DesiredState,
) {
    let attached = att.filter(|a| a.state == AttachmentState::Attached);
    for c in claims {
        match claim_entry(c.state) {
            ClaimEntry::Publish => {
                let Some(att) = attached else {
                    continue;
                };
                out.publish.push(api::DesiredPublish {
                    alloc: c.alloc,
                    read_only: c.mode == ClaimMode::Read,
                    mount: c.mount,
                    volume: api::NodeVolume {
                        volume: v.name.clone(),
                        plugin: v.plugin.clone(),
                        external_id: v.external_id.clone(),
                        capability: v.capability(),
                        context: v.context.clone(),
                        secrets: v.secrets.clone(),
                        publish_context: att.publish_context.clone(),
                    },
                });
            }
            ClaimEntry::Unpublish => {
                out.unpublish.push(api::DesiredUnpublish {
                    volume: v.name.clone(),
                    alloc: c.alloc,
                    plugin: v.plugin.clone(),
                    external_id: v.external_id.clone(),
                });
            }
            ClaimEntry::None => {}
        }
    }
    if att.is_some() {
        out.expand
            .extend(super::node_expansion::desired_expansion(v, node));
    }
}
