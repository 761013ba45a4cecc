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
