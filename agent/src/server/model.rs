//! Rows of the state database as Rust values, their loaders, and their API forms.

use std::collections::BTreeMap;
use std::str::FromStr;

use csivol_api::domain::{AccessMode, AccessType, PublishContext, VolumeCapability};
use csivol_api::{
    self as api, AttachmentState, AttachmentStatus, ClaimMode, ClaimState, Eligibility, NodeStatus,
    VolumeState,
};
use rusqlite::{Connection, Row, params};

use super::error::{ApiError, ApiResult};

/// Formats unix milliseconds as RFC 3339.
pub fn time(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

fn parse<T: FromStr<Err = String>>(s: String) -> rusqlite::Result<T> {
    s.parse().map_err(|e: String| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, e.into())
    })
}

fn json<T: serde::de::DeserializeOwned>(s: String) -> rusqlite::Result<T> {
    serde_json::from_str(&s).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, e.into())
    })
}

pub fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("plain data serialises")
}

/// Where a volume's own lifecycle stands (as opposed to its claims).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    Ready,
    Creating,
    Deleting,
    Failed,
}

impl Lifecycle {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::Creating => "creating",
            Self::Deleting => "deleting",
            Self::Failed => "failed",
        }
    }
}

impl FromStr for Lifecycle {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "ready" => Self::Ready,
            "creating" => Self::Creating,
            "deleting" => Self::Deleting,
            "failed" => Self::Failed,
            other => return Err(format!("unknown volume lifecycle `{other}`")),
        })
    }
}

#[derive(Clone, Debug)]
pub struct VolumeRow {
    pub name: String,
    pub plugin: String,
    pub external_id: String,
    pub access_mode: AccessMode,
    pub attachment: api::Attachment,
    pub fs_type: String,
    pub mount_flags: Vec<String>,
    pub context: BTreeMap<String, String>,
    pub parameters: BTreeMap<String, String>,
    pub secrets: BTreeMap<String, String>,
    pub capacity_bytes: Option<u64>,
    pub lifecycle: Lifecycle,
    pub error: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub modify_index: u64,
}

pub const VOLUME_COLUMNS: &str = "name, plugin, external_id, access_mode, attachment, fs_type, mount_flags, \
     context, parameters, secrets, capacity_bytes, lifecycle, error, created_at, updated_at, modify_index";

impl VolumeRow {
    pub fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        let name: String = r.get(0)?;
        let secrets = super::secrets::open(&name, &r.get::<_, String>(9)?).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(9, rusqlite::types::Type::Text, e.into())
        })?;
        Ok(Self {
            name,
            plugin: r.get(1)?,
            external_id: r.get(2)?,
            access_mode: parse(r.get(3)?)?,
            attachment: parse(r.get(4)?)?,
            fs_type: r.get(5)?,
            mount_flags: json(r.get(6)?)?,
            context: json(r.get(7)?)?,
            parameters: json(r.get(8)?)?,
            secrets,
            capacity_bytes: r.get::<_, Option<i64>>(10)?.map(|v| v as u64),
            lifecycle: parse(r.get(11)?)?,
            error: r.get(12)?,
            created_at: r.get(13)?,
            updated_at: r.get(14)?,
            modify_index: r.get::<_, i64>(15)? as u64,
        })
    }

    pub fn load(conn: &Connection, name: &str) -> ApiResult<Option<Self>> {
        let sql = format!("SELECT {VOLUME_COLUMNS} FROM volumes WHERE name = ?1");
        super::db::optional(conn.prepare_cached(&sql)?.query_row([name], Self::from_row))
    }

    pub fn require(conn: &Connection, name: &str) -> ApiResult<Self> {
        Self::load(conn, name)?.ok_or_else(|| {
            ApiError::not_found(format!("volume `{name}` is not registered"))
                .with_hint("list volumes with `csivol volume list`")
        })
    }

    pub fn capability(&self) -> VolumeCapability {
        let access_type = match self.attachment {
            api::Attachment::FileSystem => AccessType::FileSystem {
                fs_type: self.fs_type.clone(),
                mount_flags: self.mount_flags.clone(),
            },
            api::Attachment::BlockDevice => AccessType::BlockDevice,
        };
        VolumeCapability {
            access_type,
            access_mode: self.access_mode,
        }
    }

    /// The volume's state, given its claims and attachments.
    pub fn state(&self, claims: &[ClaimRow], attachments: &[AttachmentRow]) -> VolumeState {
        match self.lifecycle {
            Lifecycle::Creating => return VolumeState::Creating,
            Lifecycle::Deleting => return VolumeState::Deleting,
            Lifecycle::Failed => return VolumeState::Failed,
            Lifecycle::Ready => {}
        }
        if claims.iter().any(|c| c.state == ClaimState::Blocked)
            || attachments
                .iter()
                .any(|a| a.state == AttachmentState::Blocked)
        {
            VolumeState::Blocked
        } else if claims.iter().all(|c| c.state == ClaimState::Queued) && attachments.is_empty() {
            VolumeState::Free
        } else {
            VolumeState::Attached
        }
    }

    pub fn to_api(&self, claims: &[ClaimRow], attachments: &[AttachmentRow]) -> api::Volume {
        api::Volume {
            name: self.name.clone(),
            plugin: self.plugin.clone(),
            external_id: self.external_id.clone(),
            access_mode: self.access_mode,
            attachment: self.attachment,
            state: self.state(claims, attachments),
            accepts_claims: self.lifecycle == Lifecycle::Ready && {
                let held: Vec<super::rules::Held<'_>> = claims
                    .iter()
                    .filter(|c| c.state != ClaimState::Queued)
                    .map(|c| super::rules::Held {
                        alloc: &c.alloc,
                        node: &c.node,
                        mode: c.mode,
                        state: c.state,
                    })
                    .collect();
                super::rules::accepts_new_claims(self.access_mode, &held)
            },
            capacity_bytes: self.capacity_bytes,
            fs_type: self.fs_type.clone(),
            mount_flags: self.mount_flags.clone(),
            context: self.context.clone(),
            parameters: self.parameters.clone(),
            secret_keys: self.secrets.keys().cloned().collect(),
            error: self.error.clone(),
            claims: claims_to_api(claims),
            attachments: attachments.iter().map(AttachmentRow::to_api).collect(),
            created_at: time(self.created_at),
            updated_at: time(self.updated_at),
            index: self.modify_index,
        }
    }
}

/// A volume's claims, in queue order (created_at, alloc), with queue positions.
pub fn claims_to_api(claims: &[ClaimRow]) -> Vec<api::Claim> {
    let mut position = 0;
    claims
        .iter()
        .map(|c| {
            let mut a = c.to_api();
            if c.state == ClaimState::Queued {
                position += 1;
                a.queue_position = Some(position);
            }
            a
        })
        .collect()
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRow {
    pub volume: String,
    pub alloc: String,
    pub node: String,
    pub mode: ClaimMode,
    pub state: ClaimState,
    pub target_path: Option<String>,
    pub error: Option<String>,
    pub next_retry_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    pub modify_index: u64,
    /// What the node says the claim waits for, since when, and its readiness timeout.
    pub waiting: Option<(String, i64, i64)>,
    /// The plugin's abnormal volume condition, if any.
    pub condition: Option<String>,
    pub ttl_ms: Option<i64>,
    pub expires_at: Option<i64>,
    pub labels: BTreeMap<String, String>,
    /// Blocked while it was being released: released, not resumed, when its node returns.
    pub release_pending: bool,
}

pub const CLAIM_COLUMNS: &str = "volume, alloc, node, mode, state, target_path, error, next_retry_at, created_at, updated_at, modify_index, \
     waiting, waiting_since, waiting_timeout_ms, condition, ttl_ms, expires_at, labels, release_pending";

impl ClaimRow {
    pub fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            volume: r.get(0)?,
            alloc: r.get(1)?,
            node: r.get(2)?,
            mode: parse(r.get(3)?)?,
            state: parse(r.get(4)?)?,
            target_path: r.get(5)?,
            error: r.get(6)?,
            next_retry_at: r.get(7)?,
            created_at: r.get(8)?,
            updated_at: r.get(9)?,
            modify_index: r.get::<_, i64>(10)? as u64,
            waiting: match (r.get(11)?, r.get(12)?, r.get(13)?) {
                (Some(reason), Some(since), Some(timeout)) => Some((reason, since, timeout)),
                _ => None,
            },
            condition: r.get(14)?,
            ttl_ms: r.get(15)?,
            expires_at: r.get(16)?,
            labels: serde_json::from_str(&r.get::<_, String>(17)?).unwrap_or_default(),
            release_pending: r.get(18)?,
        })
    }

    pub fn of_volume(conn: &Connection, volume: &str) -> ApiResult<Vec<Self>> {
        let sql = format!(
            "SELECT {CLAIM_COLUMNS} FROM claims WHERE volume = ?1 ORDER BY created_at, alloc"
        );
        let mut stmt = conn.prepare_cached(&sql)?;
        let rows = stmt
            .query_map([volume], Self::from_row)?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    pub fn load(conn: &Connection, volume: &str, alloc: &str) -> ApiResult<Option<Self>> {
        let sql = format!("SELECT {CLAIM_COLUMNS} FROM claims WHERE volume = ?1 AND alloc = ?2");
        super::db::optional(
            conn.prepare_cached(&sql)?
                .query_row([volume, alloc], Self::from_row),
        )
    }

    /// This claim's place in its volume's queue (1 first), when queued.
    pub fn queue_position(&self, conn: &Connection) -> ApiResult<Option<u32>> {
        if self.state != ClaimState::Queued {
            return Ok(None);
        }
        let ahead: u32 = conn
            .prepare_cached(
                "SELECT count(*) FROM claims WHERE volume = ?1 AND state = 'queued' \
                 AND (created_at < ?2 OR (created_at = ?2 AND alloc < ?3))",
            )?
            .query_row(params![self.volume, self.created_at, self.alloc], |r| {
                r.get(0)
            })?;
        Ok(Some(ahead + 1))
    }

    /// The API form with the queue position filled in.
    pub fn to_api_at(&self, conn: &Connection) -> ApiResult<api::Claim> {
        let mut c = self.to_api();
        c.queue_position = self.queue_position(conn)?;
        Ok(c)
    }

    pub fn to_api(&self) -> api::Claim {
        api::Claim {
            volume: self.volume.clone(),
            alloc: self.alloc.clone(),
            node: self.node.clone(),
            mode: self.mode,
            state: self.state,
            target_path: self.target_path.clone(),
            error: self.error.clone(),
            next_retry_at: self.next_retry_at.map(time),
            created_at: time(self.created_at),
            updated_at: time(self.updated_at),
            index: self.modify_index,
            waiting: self
                .waiting
                .as_ref()
                .map(|(reason, since, timeout)| api::ClaimWaiting {
                    reason: reason.clone(),
                    since: time(*since),
                    timeout_ms: (*timeout).max(0) as u64,
                }),
            condition: self.condition.clone(),
            expires_at: self.expires_at.map(time),
            ttl_ms: self.ttl_ms.map(|t| t.max(0) as u64),
            queue_position: None,
            labels: self.labels.clone(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttachmentRow {
    pub volume: String,
    pub node: String,
    pub state: AttachmentState,
    pub publish_context: PublishContext,
    pub forced: bool,
    pub error: Option<String>,
    pub next_retry_at: Option<i64>,
    pub updated_at: i64,
}

pub const ATTACHMENT_COLUMNS: &str =
    "volume, node, state, publish_context, forced, error, next_retry_at, updated_at";

impl AttachmentRow {
    pub fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            volume: r.get(0)?,
            node: r.get(1)?,
            state: parse(r.get(2)?)?,
            publish_context: json(r.get(3)?)?,
            forced: r.get(4)?,
            error: r.get(5)?,
            next_retry_at: r.get(6)?,
            updated_at: r.get(7)?,
        })
    }

    pub fn of_volume(conn: &Connection, volume: &str) -> ApiResult<Vec<Self>> {
        let sql =
            format!("SELECT {ATTACHMENT_COLUMNS} FROM attachments WHERE volume = ?1 ORDER BY node");
        let mut stmt = conn.prepare_cached(&sql)?;
        let rows = stmt
            .query_map([volume], Self::from_row)?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    pub fn to_api(&self) -> AttachmentStatus {
        AttachmentStatus {
            volume: self.volume.clone(),
            node: self.node.clone(),
            state: self.state,
            publish_context: self.publish_context.clone(),
            forced: self.forced,
            error: self.error.clone(),
            next_retry_at: self.next_retry_at.map(time),
            updated_at: time(self.updated_at),
        }
    }
}

#[derive(Clone, Debug)]
pub struct NodeRow {
    pub name: String,
    pub status: NodeStatus,
    pub registered_at: i64,
    pub lost_at: Option<i64>,
    pub fence_after_ms: Option<i64>,
    pub fenced_at: Option<i64>,
    pub eligibility: Eligibility,
}

pub const NODE_COLUMNS: &str =
    "name, status, registered_at, lost_at, fence_after_ms, fenced_at, eligibility";

impl NodeRow {
    pub fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            name: r.get(0)?,
            status: parse(r.get(1)?)?,
            registered_at: r.get(2)?,
            lost_at: r.get(3)?,
            fence_after_ms: r.get(4)?,
            fenced_at: r.get(5)?,
            eligibility: parse(r.get(6)?)?,
        })
    }

    pub fn load(conn: &Connection, name: &str) -> ApiResult<Option<Self>> {
        let sql = format!("SELECT {NODE_COLUMNS} FROM nodes WHERE name = ?1");
        super::db::optional(conn.prepare_cached(&sql)?.query_row([name], Self::from_row))
    }

    pub fn require(conn: &Connection, name: &str) -> ApiResult<Self> {
        Self::load(conn, name)?.ok_or_else(|| {
            ApiError::not_found(format!("node `{name}` is not registered")).with_hint(
                "list nodes with `csivol node list`; a node registers when its agent starts",
            )
        })
    }
}

/// What the server knows of a plugin on one node.
#[derive(Clone, Debug)]
pub struct NodePluginRow {
    pub plugin: String,
    pub csi_node_id: Option<String>,
    pub max_volumes: u32,
    pub node_service: bool,
    pub controller: bool,
}

impl NodePluginRow {
    pub fn of_node(conn: &Connection, node: &str) -> ApiResult<Vec<Self>> {
        let mut stmt = conn.prepare_cached(
            "SELECT plugin, csi_node_id, max_volumes, node_service, controller \
             FROM node_plugins WHERE node = ?1 ORDER BY plugin",
        )?;
        let rows = stmt
            .query_map([node], |r| {
                Ok(Self {
                    plugin: r.get(0)?,
                    csi_node_id: r.get(1)?,
                    max_volumes: r.get(2)?,
                    node_service: r.get(3)?,
                    controller: r.get(4)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    pub fn load(conn: &Connection, node: &str, plugin: &str) -> ApiResult<Option<Self>> {
        Ok(Self::of_node(conn, node)?
            .into_iter()
            .find(|p| p.plugin == plugin))
    }
}

/// Whether volumes of `plugin` need ControllerPublish before a node may use them: yes when
/// a controller host says it has PUBLISH_UNPUBLISH_VOLUME, or when no host has registered yet
/// but the plugin announces a controller service (claims then wait for a host).
pub fn needs_controller_publish(conn: &Connection, plugin: &str) -> ApiResult<bool> {
    let mut stmt = conn.prepare_cached(
        // Three index probes (node_plugins_caps, node_plugins_service), whatever the number
        // of nodes.
        "SELECT EXISTS (SELECT 1 FROM node_plugins WHERE plugin = ?1 AND controller = 1), \
                EXISTS (SELECT 1 FROM node_plugins WHERE plugin = ?1 AND controller = 1 AND controller_publish = 1), \
                EXISTS (SELECT 1 FROM node_plugins WHERE plugin = ?1 AND controller_service = 1)",
    )?;
    let (hosted, publish, service): (bool, bool, bool) =
        stmt.query_row([plugin], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    Ok(if hosted { publish } else { service })
}

/// How many volumes of `plugin` occupy a slot on `node`: attached there (detaching ones
/// included) or claimed there.
pub fn slots_used(conn: &Connection, node: &str, plugin: &str) -> ApiResult<u32> {
    let mut stmt = conn.prepare_cached(
        // From the node's few attachments and claims to their volumes by primary key: a join
        // the other way scans every volume of the plugin, which grows with the inventory.
        "SELECT count(*) FROM ( \
           SELECT a.volume FROM attachments a WHERE a.node = ?1 \
             AND (SELECT plugin FROM volumes WHERE name = a.volume) = ?2 \
           UNION SELECT c.volume FROM claims c WHERE c.node = ?1 AND c.state != 'queued' \
             AND (SELECT plugin FROM volumes WHERE name = c.volume) = ?2)",
    )?;
    Ok(stmt.query_row(params![node, plugin], |r| r.get(0))?)
}
