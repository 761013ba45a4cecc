//! What the node agent recorded in `agent.db` of its stagings and publications (its store
//! keeps them there): the facts its decisions read. A state other than `Staged` or
//! `Published` means a call was (or may have been) in flight.

use std::path::PathBuf;

use super::observed::Observation;

/// What the agent knows about a staging. `Staging` and `Unstaging` mean a call was (or may
/// have been) in flight: the volume may or may not be staged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StageState {
    Staging,
    Staged,
    Unstaging,
}

/// Likewise for a publication.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PublishState {
    Publishing,
    Published,
    Unpublishing,
}

macro_rules! text_state {
    ($t:ident { $($v:ident = $s:literal),* }) => {
        impl $t {
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$v => $s),* }
            }
            pub fn parse(s: &str) -> Option<Self> {
                match s {
                    $($s => Some(Self::$v),)*
                    _ => None,
                }
            }
        }
    };
}
text_state!(StageState { Staging = "staging", Staged = "staged", Unstaging = "unstaging" });
text_state!(PublishState {
    Publishing = "publishing",
    Published = "published",
    Unpublishing = "unpublishing"
});

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagingRecord {
    pub volume: String,
    pub plugin: String,
    pub external_id: String,
    pub path: PathBuf,
    pub state: StageState,
    /// Staged for block access.
    pub block: bool,
    /// What the plugin made at the path when NodeStageVolume succeeded; `None` before,
    /// and in records of an older agent until they are first checked.
    pub observed: Option<Observation>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublicationRecord {
    pub volume: String,
    pub alloc: String,
    pub plugin: String,
    pub external_id: String,
    pub target: PathBuf,
    /// The staging path the publication was made from, when the plugin stages.
    pub staging: Option<PathBuf>,
    /// A block volume's target is a device node, not a mount point.
    pub block: bool,
    pub state: PublishState,
    /// What the plugin made at the target, once it first passed the readiness check;
    /// `None` before, and in records of an older agent until they are first checked.
    pub observed: Option<Observation>,
}

/// What a volume is staged with that holds for its whole file system: the group the
/// plugin applies (`volume_mount_group`) and the SELinux context. The staging is shared by
/// the volume's publications on the node, and a NodeStageVolume with another capability
/// is answered ALREADY_EXISTS (spec.md, NodeStageVolume errors, "Volume published but is
/// incompatible"), so every publication from it must agree with what it was staged with.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StagedMount {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selinux_context: Option<String>,
}

impl StagedMount {
    /// What a claim's mount puts into NodeStageVolume.
    pub fn of(mount: &csivol_api::ClaimMount) -> Self {
        Self {
            gid: mount
                .gid
                .filter(|_| mount.group_by == Some(csivol_api::GroupBy::Plugin)),
            selinux_context: mount.selinux_context.clone(),
        }
    }

    /// Whether a claim that asks for `wanted` may be published from a staging made with
    /// this: the same context, and no other group (a claim that asks for none takes the
    /// volume as it is). The words say why not.
    pub fn admits(&self, wanted: &StagedMount) -> Result<(), String> {
        if self.selinux_context != wanted.selinux_context {
            return Err(format!(
                "the volume is staged on this node with SELinux context {}, and the claim asks \
                 for {}: one file system is mounted with one context",
                shown(self.selinux_context.as_deref()),
                shown(wanted.selinux_context.as_deref())
            ));
        }
        if let Some(g) = wanted.gid
            && self.gid != Some(g)
        {
            return Err(format!(
                "the volume is staged on this node with group {}, and the claim asks for \
                 group {g}: one staging has one group",
                self.gid
                    .map_or_else(|| "none".to_owned(), |g| g.to_string())
            ));
        }
        Ok(())
    }
}

fn shown(c: Option<&str>) -> String {
    c.map_or_else(|| "none".to_owned(), |c| format!("`{c}`"))
}

#[cfg(test)]
mod staged_mount_tests {
    use super::StagedMount;

    fn m(gid: Option<u32>, ctx: Option<&str>) -> StagedMount {
        StagedMount {
            gid,
            selinux_context: ctx.map(str::to_owned),
        }
    }

    #[test]
    fn a_publication_agrees_with_what_its_staging_was_made_with() {
        let staged = m(Some(7), Some("a:b:c"));
        assert_eq!(staged.admits(&m(Some(7), Some("a:b:c"))), Ok(()));
        assert_eq!(
            staged.admits(&m(None, Some("a:b:c"))),
            Ok(()),
            "no group asked"
        );
        let e = staged.admits(&m(Some(8), Some("a:b:c"))).unwrap_err();
        assert!(e.contains("with group 7") && e.contains("group 8"), "{e}");
        let e = staged.admits(&m(Some(7), None)).unwrap_err();
        assert!(e.contains("SELinux context `a:b:c`"), "{e}");
        assert!(m(None, None).admits(&m(Some(7), None)).is_err());
    }
}
