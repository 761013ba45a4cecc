//! Volumes: registration, creation and what the server knows of one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{AccessMode, AttachmentStatus, Claim, Topology};

/// How a volume is presented to workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Attachment {
    FileSystem,
    BlockDevice,
}

impl Attachment {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FileSystem => "file-system",
            Self::BlockDevice => "block-device",
        }
    }
}

/// `PUT /v1/volumes/{name}`: register an existing volume.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeSpec {
    pub plugin: String,
    pub external_id: String,
    pub access_mode: AccessMode,
    pub attachment: Attachment,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fs_type: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mount_flags: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub context: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<String, String>,
    /// The segments the volume is accessible from (CSI's `accessible_topology`, e.g.
    /// `[{"zone": "a"}]`); empty: from every node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology: Vec<Topology>,
    /// Mount flags a claim may add for its own publication (`csivol claim --mount-flag`),
    /// sent with NodePublishVolume only; none: a claim adds none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claim_mount_flags: Vec<String>,
    /// The SELinux context the volume is mounted with when a claim names none
    /// (`context="..."`, where the plugin's server settings say it supports SELinux mounts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selinux_context: Option<String>,
    /// Whether csivol may give the volume a claim's group itself where its node plugin
    /// has no VOLUME_MOUNT_GROUP; overrides the plugin's `ownership` in the server's config
    /// (the gids stay the plugin's `ownership_gids`). None: the plugin's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ownership: Option<crate::Ownership>,
    /// An operator's `key=value` labels on the volume (e.g. `pool = "build-cache"`): a
    /// pool's selector chooses its members by them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// Where a volume to be created must (`required`) and should (`preferred`) be accessible
/// from: CreateVolume's `accessibility_requirements` (`requisite`, `preferred`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyRequest {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required: Vec<Topology>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preferred: Vec<Topology>,
}

impl TopologyRequest {
    pub fn is_empty(&self) -> bool {
        self.required.is_empty() && self.preferred.is_empty()
    }
}

/// `POST /v1/volumes/{name}/create`: create a volume through the plugin's controller.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateVolumeSpec {
    pub plugin: String,
    pub access_mode: AccessMode,
    pub attachment: Attachment,
    #[serde(default)]
    pub capacity_bytes: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fs_type: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mount_flags: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_request: Option<TopologyRequest>,
    /// The data the new volume starts with: a snapshot or another volume of the plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<crate::ContentSource>,
    /// Parameters the plugin can change later (CreateVolume's `mutable_parameters`; the
    /// plugin must report MODIFY_VOLUME).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mutable_parameters: BTreeMap<String, String>,
    /// Mount flags a claim may add for its own publication (`csivol claim --mount-flag`),
    /// sent with NodePublishVolume only; none: a claim adds none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claim_mount_flags: Vec<String>,
    /// The SELinux context the volume is mounted with when a claim names none
    /// (`context="..."`, where the plugin's server settings say it supports SELinux mounts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selinux_context: Option<String>,
    /// Whether csivol may give the volume a claim's group itself where its node plugin
    /// has no VOLUME_MOUNT_GROUP; overrides the plugin's `ownership` in the server's config
    /// (the gids stay the plugin's `ownership_gids`). None: the plugin's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ownership: Option<crate::Ownership>,
    /// An operator's `key=value` labels on the volume (e.g. `pool = "build-cache"`): a
    /// pool's selector chooses its members by them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

impl CreateVolumeSpec {
    /// The content source names a snapshot or a volume by its csivol name.
    pub fn check_source(&self) -> Result<(), String> {
        match &self.source {
            Some(crate::ContentSource::Snapshot(s)) => crate::validate_key("snapshot", s),
            Some(crate::ContentSource::Volume(v)) => crate::validate_key("volume", v),
            None => Ok(()),
        }
    }
}

/// Where a volume stands, derived from its claims and attachments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VolumeState {
    /// CreateVolume is under way.
    Creating,
    /// No claim and no attachment.
    Free,
    /// Claimed or attached somewhere, nothing blocked.
    Attached,
    /// A claim or attachment is held by a lost node.
    Blocked,
    /// DeleteVolume is under way.
    Deleting,
    /// CreateVolume failed; `error` says why.
    Failed,
}

impl VolumeState {
    pub const ALL: [VolumeState; 6] = [
        Self::Creating,
        Self::Free,
        Self::Attached,
        Self::Blocked,
        Self::Deleting,
        Self::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Creating => "creating",
            Self::Free => "free",
            Self::Attached => "attached",
            Self::Blocked => "blocked",
            Self::Deleting => "deleting",
            Self::Failed => "failed",
        }
    }
}

/// A registered volume, with its claims and attachments. Secret values are never returned:
/// `secret_keys` lists which secrets are stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    /// Its name within its namespace.
    pub name: String,
    #[serde(default = "crate::default_namespace")]
    pub namespace: String,
    pub plugin: String,
    pub external_id: String,
    pub access_mode: AccessMode,
    pub attachment: Attachment,
    pub state: VolumeState,
    /// Whether a new claim can be accepted now (by the access mode, given the claims held,
    /// blocked ones included): a `blocked` multi-node-multi-writer volume still takes them.
    #[serde(default = "crate::yes")]
    pub accepts_claims: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fs_type: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mount_flags: Vec<String>,
    #[serde(default)]
    pub context: BTreeMap<String, String>,
    #[serde(default)]
    pub parameters: BTreeMap<String, String>,
    #[serde(default)]
    pub secret_keys: Vec<String>,
    /// The segments the volume is accessible from: as registered, or as CreateVolume
    /// returned them; empty: from every node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accessible_topology: Vec<Topology>,
    /// What `volume create` asked for, when it asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_request: Option<TopologyRequest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// An expansion in progress, or the one that failed (`csivol volume expand`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expansion: Option<crate::Expansion>,
    /// The mutable parameters the volume has: as created, then as ControllerModifyVolume
    /// changed them.
    #[serde(default)]
    pub mutable_parameters: BTreeMap<String, String>,
    /// A change of them asked for and not applied yet, or refused (`csivol volume modify`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modification: Option<crate::Modification>,
    /// Mount flags a claim may add for its own publication.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claim_mount_flags: Vec<String>,
    /// The SELinux context the volume is mounted with when a claim names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selinux_context: Option<String>,
    /// The volume's own `ownership`, overriding its plugin's; absent: the plugin's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ownership: Option<crate::Ownership>,
    /// Whether the volume takes new claims, when an operator took it out of service
    /// (`csivol volume eligibility V --disable`, `csivol volume drain V`); absent: it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability: Option<VolumeAvailability>,
    /// A per-job volume (`csivol run --fresh`, `csivol claim --fresh`): made for one job's
    /// claim and deleted after its release; absent for every other volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<crate::JobVolume>,
    /// An operator's labels on the volume (`csivol volume label`, `labels` in its spec).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    pub claims: Vec<Claim>,
    pub attachments: Vec<AttachmentStatus>,
    pub created_at: String,
    pub updated_at: String,
    pub index: u64,
}

/// A volume an operator took out of service: it takes no new claims (its queued claims
/// wait), and `draining` says the operator waits for its holders to release it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeAvailability {
    /// `ineligible` or `draining` (an eligible volume has no availability recorded).
    pub eligibility: crate::Eligibility,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who took it out of service, as the event log names them.
    pub actor: String,
    /// Since when (RFC 3339).
    pub since: String,
}

/// `POST /v1/volumes/{name}/eligibility`: whether the volume takes new claims.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeEligibilityRequest {
    pub eligibility: crate::Eligibility,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
