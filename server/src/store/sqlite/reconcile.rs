//! What the controller-side reconciliation reads: the volumes, nodes and attachments a
//! plugin's listing is compared with, and the findings kept from the last comparison.

use rusqlite::Connection;

use crate::error::{ApiError, ApiResult};

/// The plugin's volumes and nodes csivol knows, and its recorded attachments.
pub fn facts(
    conn: &Connection,
    plugin: &str,
) -> ApiResult<(
    csivol_rules::reconcile::Known,
    Vec<csivol_rules::reconcile::Recorded>,
)> {
    use csivol_rules::reconcile::{Known, Recorded};
    let mut known = Known::default();
    let mut stmt = conn.prepare_cached(
        "SELECT external_id, name FROM volumes WHERE plugin = ?1 AND external_id != ''",
    )?;
    for row in stmt.query_map([plugin], |r| Ok((r.get(0)?, r.get(1)?)))? {
        let (ext, name): (String, String) = row?;
        known.volumes.insert(ext, name);
    }
    let mut stmt = conn.prepare_cached(
        "SELECT csi_node_id, node FROM node_plugins WHERE plugin = ?1 AND csi_node_id IS NOT NULL",
    )?;
    for row in stmt.query_map([plugin], |r| Ok((r.get(0)?, r.get(1)?)))? {
        let (id, node): (String, String) = row?;
        known.nodes.insert(id, node);
    }
    let mut stmt = conn.prepare_cached(
        "SELECT a.volume, v.external_id, a.node, np.csi_node_id, a.state, a.updated_at \
         FROM attachments a JOIN volumes v ON v.name = a.volume \
         LEFT JOIN node_plugins np ON np.node = a.node AND np.plugin = v.plugin \
         WHERE v.plugin = ?1 ORDER BY a.volume, a.node",
    )?;
    let rows = stmt.query_map([plugin], |r| {
        let state: String = r.get(4)?;
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, state, r.get(5)?))
    })?;
    let mut recorded = Vec::new();
    for row in rows {
        let (volume, external_id, node, node_id, state, updated_at): (
            String,
            String,
            String,
            Option<String>,
            String,
            i64,
        ) = row?;
        let state = serde_json::from_value(serde_json::Value::String(state))
            .map_err(|e| ApiError::internal(format!("attachment state in the database: {e}")))?;
        recorded.push(Recorded {
            volume,
            external_id,
            node,
            node_id,
            state,
            updated_at,
        });
    }
    Ok((known, recorded))
}

/// The findings kept of the last comparison, of one plugin or of every plugin.
pub fn findings(
    conn: &Connection,
    plugin: Option<&str>,
) -> ApiResult<Vec<(String, csivol_rules::reconcile::Kept)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT plugin, findings FROM controller_findings \
         WHERE ?1 IS NULL OR plugin = ?1 ORDER BY plugin",
    )?;
    let rows = stmt.query_map([plugin], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let mut out = Vec::new();
    for row in rows {
        let (plugin, json): (String, String) = row?;
        let kept: Vec<csivol_rules::reconcile::Kept> = serde_json::from_str(&json)
            .map_err(|e| ApiError::internal(format!("controller findings in the database: {e}")))?;
        out.extend(kept.into_iter().map(|k| (plugin.clone(), k)));
    }
    Ok(out)
}
