//! The desired state of a node: what its agent should publish, unpublish and unstage, and
//! the controller operations it runs.

use std::collections::HashMap;

use csivol_api::{self as api, AttachmentState, ClaimMode, ClaimState};

use super::ops::op_to_api;
use crate::server::error::ApiResult;
use crate::server::model::VolumeRow;
use crate::server::store::Snapshot;

/// `GET /v1/nodes/{node}/desired`.
pub fn desired_state(
    conn: &(impl Snapshot + ?Sized),
    node: &str,
    index: u64,
) -> ApiResult<api::DesiredState> {
    let n = conn.require_node(node)?;
    let mut publish = Vec::new();
    let mut unpublish = Vec::new();
    let mut volumes: HashMap<String, VolumeRow> = HashMap::new();
    let claims = conn.claims_of_node(node, None)?;
    for c in &claims {
        if !volumes.contains_key(&c.volume)
            && let Some(v) = conn.volume(&c.volume)?
        {
            volumes.insert(c.volume.clone(), v);
        }
    }
    for c in claims {
        let Some(v) = volumes.get(&c.volume) else {
            continue;
        };
        match c.state {
            ClaimState::Publishing | ClaimState::Ready => {
                let Some(att) = conn
                    .attachment(&c.volume, node)?
                    .filter(|a| a.state == AttachmentState::Attached)
                else {
                    continue;
                };
                publish.push(api::DesiredPublish {
                    alloc: c.alloc.clone(),
                    read_only: c.mode == ClaimMode::Read,
                    volume: api::NodeVolume {
                        volume: v.name.clone(),
                        plugin: v.plugin.clone(),
                        external_id: v.external_id.clone(),
                        capability: v.capability(),
                        context: v.context.clone(),
                        secrets: v.secrets.clone(),
                        publish_context: att.publish_context,
                    },
                });
            }
            ClaimState::Releasing | ClaimState::Failed => unpublish.push(api::DesiredUnpublish {
                volume: v.name.clone(),
                alloc: c.alloc.clone(),
                plugin: v.plugin.clone(),
                external_id: v.external_id.clone(),
            }),
            _ => {}
        }
    }
    let unstage = conn.unstaging_on(node)?;
    let mut controller_ops = Vec::new();
    for o in conn.ops_of_host(node)? {
        if let Some(op) = op_to_api(conn, &o)? {
            controller_ops.push(op);
        }
    }
    Ok(api::DesiredState {
        index,
        status: Some(n.status),
        publish,
        unpublish,
        unstage,
        controller_ops,
        expand: super::expand::desired_expansions(conn, node)?,
    })
}
