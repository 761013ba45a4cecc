//! The kinds of events and of controller operations. Each is stored (and shown by the API)
//! as the string of [`EventKind::as_str`] / [`OpKind::as_str`], so the enums change no
//! stored data; the code names them by variant, so a misspelt kind does not compile.

use std::fmt;
use std::str::FromStr;

macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($variant,)*
        }

        impl $name {
            pub const ALL: &[Self] = &[$(Self::$variant,)*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text,)*
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                Self::ALL
                    .iter()
                    .copied()
                    .find(|k| k.as_str() == s)
                    .ok_or_else(|| format!("unknown {} `{s}`", stringify!($name)))
            }
        }
    };
}

string_enum! {
    /// What an entry of the event log records.
    EventKind {
        VolumeRegistered = "volume-registered",
        VolumeUpdated = "volume-updated",
        VolumeCreating = "volume-creating",
        VolumeAdopting = "volume-adopting",
        VolumeCreated = "volume-created",
        VolumeCreateCancelled = "volume-create-cancelled",
        VolumeDeleting = "volume-deleting",
        VolumeDeleted = "volume-deleted",
        VolumeDeregistered = "volume-deregistered",
        VolumeKept = "volume-kept",
        VolumeAttached = "volume-attached",
        VolumeUnstaged = "volume-unstaged",
        VolumeDetach = "volume-detach",
        VolumeDetached = "volume-detached",
        VolumeForceDetaching = "volume-force-detaching",
        VolumeBlocked = "volume-blocked",
        VolumeUnblocked = "volume-unblocked",
        VolumeCondition = "volume-condition",
        VolumeExpanding = "volume-expanding",
        VolumeExpanded = "volume-expanded",
        VolumeExpansionCancelled = "volume-expansion-cancelled",
        VolumeModifying = "volume-modifying",
        VolumeModified = "volume-modified",
        VolumeEligible = "volume-eligible",
        VolumeIneligible = "volume-ineligible",
        VolumeDraining = "volume-draining",
        VolumeLabelled = "volume-labelled",
        PoolCreated = "pool-created",
        PoolDeleted = "pool-deleted",
        PoolMemberChosen = "pool-member-chosen",
        StagingLingering = "staging-lingering",
        StagingLingerEnded = "staging-linger-ended",
        PoolLineJoined = "pool-line-joined",
        PoolLineLeft = "pool-line-left",
        PoolMemberHeld = "pool-member-held",
        ClaimCreated = "claim-created",
        ClaimQueued = "claim-queued",
        ClaimDequeued = "claim-dequeued",
        ClaimGranted = "claim-granted",
        ClaimReady = "claim-ready",
        ClaimReleasing = "claim-releasing",
        ClaimReleased = "claim-released",
        ClaimForceReleased = "claim-force-released",
        ClaimFailed = "claim-failed",
        ClaimResumed = "claim-resumed",
        ClaimRepublished = "claim-republished",
        ClaimTakenDown = "claim-taken-down",
        ClaimDrift = "claim-drift",
        ClaimRepaired = "claim-repaired",
        ClaimOwnershipBounded = "claim-ownership-bounded",
        ClaimExpired = "claim-expired",
        ClaimFound = "claim-found",
        ClaimHeld = "claim-held",
        AttachmentFound = "attachment-found",
        StateRestored = "state-restored",
        StateSettled = "state-settled",
        OperationFailed = "operation-failed",
        NodeRegistered = "node-registered",
        NodeLimitChanged = "node-limit-changed",
        NodeReturned = "node-returned",
        NodeLost = "node-lost",
        NodeStopping = "node-stopping",
        NodeFenced = "node-fenced",
        NodeFenceFailed = "node-fence-failed",
        NodeEligible = "node-eligible",
        NodeIneligible = "node-ineligible",
        NodeDraining = "node-draining",
        NodeRemoved = "node-removed",
        NodeUnblocked = "node-unblocked",
        NodeLabelled = "node-labelled",
        NodeIdRefused = "node-id-refused",
        TokenCreated = "token-created",
        TokenRevoked = "token-revoked",
        NamespaceCreated = "namespace-created",
        NamespaceDeleted = "namespace-deleted",
        NamespaceQuotaSet = "namespace-quota-set",
        ControllerHostAllowed = "controller-host-allowed",
        ControllerHostDisallowed = "controller-host-disallowed",
        ControllerHostRefused = "controller-host-refused",
        AttachmentLeaked = "attachment-leaked",
        AttachmentMissing = "attachment-missing",
        VolumeAbnormal = "volume-abnormal",
        VolumeFilling = "volume-filling",
        FindingResolved = "finding-resolved",
        SnapshotCreating = "snapshot-creating",
        SnapshotPending = "snapshot-pending",
        SnapshotAdopting = "snapshot-adopting",
        SnapshotReady = "snapshot-ready",
        SnapshotDeleting = "snapshot-deleting",
        SnapshotDeleted = "snapshot-deleted",
    }
}

impl EventKind {
    /// An operator's action (an unblock, a detach, a fence, a token or a controller host
    /// allowed or taken back, a node's labels or eligibility changed, a namespace or its
    /// quota made or changed): the event log keeps
    /// these until its count bound drops them, whatever the bytes of the other events.
    pub fn kept_by_count(self) -> bool {
        matches!(
            self,
            Self::VolumeUnblocked
                | Self::ClaimForceReleased
                | Self::VolumeDetach
                | Self::VolumeForceDetaching
                | Self::NodeFenced
                | Self::NodeFenceFailed
                | Self::TokenCreated
                | Self::TokenRevoked
                | Self::ControllerHostAllowed
                | Self::ControllerHostDisallowed
                | Self::NodeLabelled
                | Self::NodeEligible
                | Self::NodeIneligible
                | Self::NodeDraining
                | Self::NodeRemoved
                | Self::VolumeEligible
                | Self::VolumeIneligible
                | Self::VolumeDraining
                | Self::VolumeLabelled
                | Self::PoolCreated
                | Self::PoolDeleted
                | Self::NamespaceCreated
                | Self::NamespaceDeleted
                | Self::NamespaceQuotaSet
        )
    }
}

string_enum! {
    /// A controller operation the server queues for a controller host.
    OpKind {
        Publish = "publish",
        Unpublish = "unpublish",
        Create = "create",
        Delete = "delete",
        Expand = "expand",
        Modify = "modify",
        CreateSnapshot = "create-snapshot",
        DeleteSnapshot = "delete-snapshot",
        CreateGroupSnapshot = "create-group-snapshot",
        DeleteGroupSnapshot = "delete-group-snapshot",
        ValidateVolume = "validate-volume",
        FindSnapshot = "find-snapshot",
    }
}

impl OpKind {
    /// The CSI call the operation makes.
    pub fn call(self) -> &'static str {
        match self {
            Self::Publish => "ControllerPublishVolume",
            Self::Unpublish => "ControllerUnpublishVolume",
            Self::Create => "CreateVolume",
            Self::Delete => "DeleteVolume",
            Self::Expand => "ControllerExpandVolume",
            Self::Modify => "ControllerModifyVolume",
            Self::CreateSnapshot => "CreateSnapshot",
            Self::DeleteSnapshot => "DeleteSnapshot",
            Self::CreateGroupSnapshot => "CreateVolumeGroupSnapshot",
            Self::DeleteGroupSnapshot => "DeleteVolumeGroupSnapshot",
            Self::ValidateVolume => "ValidateVolumeCapabilities",
            Self::FindSnapshot => "ListSnapshots",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_read_back_from_their_stored_strings() {
        for k in EventKind::ALL {
            assert_eq!(k.as_str().parse::<EventKind>(), Ok(*k));
        }
        for k in OpKind::ALL {
            assert_eq!(k.as_str().parse::<OpKind>(), Ok(*k));
        }
        assert_eq!(EventKind::ClaimTakenDown.as_str(), "claim-taken-down");
        assert_eq!(OpKind::Unpublish.call(), "ControllerUnpublishVolume");
        assert_eq!(OpKind::CreateSnapshot.as_str(), "create-snapshot");
        assert!("claim-teleported".parse::<EventKind>().is_err());
    }
}
