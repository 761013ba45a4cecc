//! The desired state of a node: what its agent should publish, unpublish and unstage, and
//! the controller operations it runs.

use std::collections::HashMap;

use csivol_proto::api::{self, AttachmentState, ClaimMode, ClaimState};
use rusqlite::{Connection, OptionalExtension, params};

use super::nodes::claims_of_node;
use super::ops::{op_to_api, ops_of_host};
use crate::server::error::ApiResult;
use crate::server::model::{NodeRow, VolumeRow};

/// `GET /v1/nodes/{node}/desired`.
pub fn desired_state(conn: &Connection, node: &str, index: u64) -> ApiResult<api::DesiredState> {
    let n = NodeRow::require(conn, node)?;
    let mut publish = Vec::new();
    let mut unpublish = Vec::new();
    let mut volumes: HashMap<String, VolumeRow> = HashMap::new();
    let claims = claims_of_node(conn, node, None)?;
    for c in &claims {
        if !volumes.contains_key(&c.volume)
            && let Some(v) = VolumeRow::load(conn, &c.volume)?
        {
            volumes.insert(c.volume.clone(), v);
        }
    }
    let mut att_stmt = conn.prepare_cached(
        "SELECT state, publish_context FROM attachments WHERE volume = ?1 AND node = ?2",
    )?;
    for c in claims {
        let Some(v) = volumes.get(&c.volume) else {
            continue;
        };
        match c.state {
            ClaimState::Publishing | ClaimState::Ready => {
                let att: Option<(String, String)> = att_stmt
                    .query_row(params![c.volume, node], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()?;
                let Some((state, ctx_json)) = att else {
                    continue;
                };
                if state != AttachmentState::Attached.as_str() {
                    continue;
                }
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
                        publish_context: serde_json::from_str(&ctx_json)?,
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
    let mut unstage = Vec::new();
    let mut stmt = conn.prepare_cached(
        "SELECT a.volume, v.plugin, v.external_id FROM attachments a JOIN volumes v ON v.name = a.volume \
         WHERE a.node = ?1 AND a.state = 'unstaging' ORDER BY a.volume",
    )?;
    for row in stmt.query_map([node], |r| {
        Ok(api::DesiredUnstage {
            volume: r.get(0)?,
            plugin: r.get(1)?,
            external_id: r.get(2)?,
        })
    })? {
        unstage.push(row?);
    }
    let mut controller_ops = Vec::new();
    for o in ops_of_host(conn, node)? {
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
    })
}
