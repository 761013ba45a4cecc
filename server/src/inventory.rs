//! What the plugins' storage holds, as their controller hosts last listed it (ListVolumes),
//! kept in this server's memory beside the capacity samples and for the same reason: a
//! listing is a passing view of the storage, taken again every listing interval, and the
//! whole of it written to the replicated state each time would cost far more than it
//! tells. `plugin volumes` shows it beside csivol's records, and `volume adopt` checks a
//! volume against it. The plugins' last ListSnapshots are kept the same way, for `plugin
//! snapshots`.

use std::collections::HashMap;
use std::sync::Mutex;

use csivol_api::{AdoptRequest, ListedSnapshot, ListedVolume, VolumeSpec};

use crate::error::{ApiError, ApiResult};
use crate::store::Snapshot;

#[derive(Debug, Default)]
pub struct Inventory {
    listings: Mutex<HashMap<String, Listing>>,
    snapshots: Mutex<HashMap<String, SnapshotListing>>,
}

/// One plugin's last snapshot listing and when this server heard it.
#[derive(Clone, Debug)]
pub struct SnapshotListing {
    pub snapshots: Vec<ListedSnapshot>,
    pub at_ms: i64,
}

/// One plugin's last listing and when this server heard it.
#[derive(Clone, Debug)]
pub struct Listing {
    pub volumes: Vec<ListedVolume>,
    pub at_ms: i64,
}

impl Inventory {
    /// Keeps `volumes` as `plugin`'s listing, heard at `now_ms`.
    pub fn record(&self, plugin: &str, volumes: Vec<ListedVolume>, now_ms: i64) {
        let mut all = self.listings.lock().unwrap_or_else(|e| e.into_inner());
        all.insert(
            plugin.to_owned(),
            Listing {
                volumes,
                at_ms: now_ms,
            },
        );
    }

    /// `plugin`'s last listing, if any was heard.
    pub fn listing(&self, plugin: &str) -> Option<Listing> {
        let all = self.listings.lock().unwrap_or_else(|e| e.into_inner());
        all.get(plugin).cloned()
    }

    /// Keeps `snapshots` as `plugin`'s snapshot listing, heard at `now_ms`.
    pub fn record_snapshots(&self, plugin: &str, snapshots: Vec<ListedSnapshot>, now_ms: i64) {
        let mut all = self.snapshots.lock().unwrap_or_else(|e| e.into_inner());
        all.insert(
            plugin.to_owned(),
            SnapshotListing {
                snapshots,
                at_ms: now_ms,
            },
        );
    }

    /// `plugin`'s last snapshot listing, if any was heard.
    pub fn snapshot_listing(&self, plugin: &str) -> Option<SnapshotListing> {
        let all = self.snapshots.lock().unwrap_or_else(|e| e.into_inner());
        all.get(plugin).cloned()
    }
}

/// A volume of `listing` made ready for registration as `name`: refused when the listing
/// does not hold it, when csivol records it under another name, or while the listing has
/// it published to a node the operator did not name (`published_to`, csivol node names or
/// the plugin's node ids); its context is the listing's when the spec gives none.
pub fn adoption(
    conn: &(impl Snapshot + ?Sized),
    listing: Option<Listing>,
    name: &str,
    req: AdoptRequest,
) -> ApiResult<VolumeSpec> {
    let AdoptRequest {
        mut spec,
        published_to,
        skip_validation,
    } = req;
    let (plugin, id) = (spec.plugin.clone(), spec.external_id.clone());
    // A plugin without a Controller service is never listed nor asked: its volume is taken
    // on the operator's word, and only when the operator said so (`adopt_volume`).
    if !crate::lifecycle::has_controller_service(conn, &plugin)? {
        known_as_other(conn, &plugin, &id, name)?;
        return Ok(spec);
    }
    // A plugin without LIST_VOLUMES is never listed: its volume is checked by
    // ValidateVolumeCapabilities alone, whose NOT_FOUND says it does not exist.
    let lists = conn
        .controller_capabilities(&plugin)?
        .is_none_or(|c| c.list_volumes);
    if listing.is_none() && !lists && !skip_validation {
        known_as_other(conn, &plugin, &id, name)?;
        return Ok(spec);
    }
    let Some(listing) = listing else {
        return Err(ApiError::conflict(format!(
            "plugin `{plugin}` has not been listed by a controller host reporting to this server"
        ))
        .with_hint(
            "the hosts list a plugin with LIST_VOLUMES every controller_list_interval; \
             see `csivol plugin volumes PLUGIN`, or register the volume without the checks: \
             csivol volume register FILE",
        ));
    };
    let Some(listed) = listing.volumes.into_iter().find(|v| v.external_id == id) else {
        return Err(ApiError::not_found(format!(
            "plugin `{plugin}`'s last listing holds no volume `{id}`"
        ))
        .with_hint(format!("see what it holds: csivol plugin volumes {plugin}")));
    };
    known_as_other(conn, &plugin, &id, name)?;
    for node_id in &listed.published_node_ids {
        let names = conn.nodes_with_plugin_id(&plugin, node_id)?;
        let named = published_to
            .iter()
            .any(|n| n == node_id || names.contains(n));
        if !named {
            let node = names.first().map_or_else(|| node_id.clone(), Clone::clone);
            return Err(ApiError::conflict(format!(
                "volume `{id}` of plugin `{plugin}` is published to node `{node}` (plugin node id `{node_id}`): something outside csivol may be using it"
            ))
            .with_hint(format!(
                "stop what uses it there, or take responsibility for that publication: add --published-to {node}"
            )));
        }
    }
    if spec.context.is_empty() {
        spec.context = listed.context;
    }
    Ok(spec)
}

/// Refused when csivol records the volume under another name than `name`.
fn known_as_other(
    conn: &(impl Snapshot + ?Sized),
    plugin: &str,
    id: &str,
    name: &str,
) -> ApiResult<()> {
    if let Some(other) = conn
        .volumes_with_external_id(plugin, id)?
        .into_iter()
        .find(|v| v != name)
    {
        return Err(ApiError::conflict(format!(
            "volume `{id}` of plugin `{plugin}` is already known to csivol as `{other}`"
        ))
        .with_hint(format!("csivol volume show {other}")));
    }
    Ok(())
}
