//! A staging kept on a node after a release (`lingers`), as stored and as shown.

use csivol_api::AttachmentStatus;

use super::times::time;

/// A staging a node keeps after the release of the volume's last claim there
/// (`lingers`): which alloc's release left it, since and until when (unix ms).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LingerRow {
    pub volume: String,
    pub node: String,
    pub alloc: String,
    pub since: i64,
    pub until: i64,
}

impl LingerRow {
    pub fn to_api(&self) -> csivol_api::Linger {
        csivol_api::Linger {
            after_alloc: self.alloc.clone(),
            since: time(self.since),
            until: time(self.until),
        }
    }
}

/// Shows on each attachment the staging its node keeps after a release, if it does.
pub fn show_lingers(atts: &mut [AttachmentStatus], lingers: &[LingerRow]) {
    for a in atts {
        a.linger = lingers
            .iter()
            .find(|l| l.volume == a.volume && l.node == a.node)
            .map(LingerRow::to_api);
    }
}
