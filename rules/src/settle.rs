//! What the server holds back after the state went back in time (a backup restored, an
//! etcd snapshot restored), and until when.
//!
//! The restored state is the truth about what is wanted, not about what the nodes hold: a
//! claim made after the backup may still be mounted on its node, an attachment made since
//! may still be published, and a claim the backup has may have been released and its
//! volume mounted elsewhere since. Until each node has said what it holds, the server does
//! not know where a volume is mounted, so a volume whose access mode allows it on one node
//! only, or one writer only, is brought to no node: no claim on it moves towards being
//! mounted ([`crate::transitions::Facts::held`]). Taking things down goes on.
//!
//! A volume is held back while:
//! - a node the restored state knows that runs the volume's plugin has not registered
//!   since the restore (registering, it reports what is mounted, checked against its mount
//!   table), and no operator said it is gone (`csivol unblock --node`, a fence, `csivol
//!   node remove`): a node lost meanwhile keeps holding it, since a node that does not
//!   answer may still be writing;
//! - or the window is open: one heartbeat TTL from the server's start on the restored
//!   state, in which every running agent the restored state does not know (a node
//!   registered after the backup) has heartbeated, been told that the server does not know
//!   it, and registered with what it holds.
//!
//! Volumes that many nodes may write (`multi-node-multi-writer`) or that nobody writes
//! (`multi-node-reader-only`) are not held: two nodes holding them is what their mode
//! allows.

use csivol_api::domain::AccessMode;

/// Where the state stands after a restore.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settling<'a> {
    /// The window for nodes the restored state does not know is still open.
    pub window_open: bool,
    /// The nodes the restored state knows that have not reported since, each with the
    /// plugins it registered.
    pub unreported: Vec<(&'a str, Vec<&'a str>)>,
}

/// Whether two nodes holding a volume of this mode at once would break it: a single-node
/// mode, or one writer at most (a reader-only mode has no writer to be two of).
pub fn restricted(access_mode: AccessMode) -> bool {
    access_mode.is_single_node() || access_mode.max_writers() == Some(1)
}

/// The nodes a volume of `plugin` waits for: those not heard from that run the plugin.
pub fn waits_for<'a>(plugin: &str, s: &Settling<'a>) -> Vec<&'a str> {
    s.unreported
        .iter()
        .filter(|(_, plugins)| plugins.contains(&plugin))
        .map(|(node, _)| *node)
        .collect()
}

/// Whether a volume of `access_mode` and `plugin` is held back (see the module).
pub fn held(access_mode: AccessMode, plugin: &str, s: &Settling<'_>) -> bool {
    restricted(access_mode) && (s.window_open || !waits_for(plugin, s).is_empty())
}

/// Whether nothing is held back any more: the restore is behind the cluster.
pub fn settled(s: &Settling<'_>) -> bool {
    !s.window_open && s.unreported.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use AccessMode::*;

    #[test]
    fn only_volumes_two_nodes_must_not_hold_are_held() {
        #[rustfmt::skip] // One mode a line: the table is the specification.
        let modes = [
            (SingleNodeReaderOnly,   true),
            (SingleNodeWriter,       true),
            (SingleNodeSingleWriter, true),
            (SingleNodeMultiWriter,  true),
            (MultiNodeSingleWriter,  true),
            (MultiNodeReaderOnly,    false),
            (MultiNodeMultiWriter,   false),
        ];
        assert_eq!(modes.len(), AccessMode::ALL.len());
        let open = Settling {
            window_open: true,
            unreported: vec![],
        };
        for (mode, restricted) in modes {
            assert_eq!(held(mode, "hp", &open), restricted, "{mode}");
            assert!(!held(mode, "hp", &Settling::default()), "{mode}: settled");
        }
    }

    #[test]
    fn a_volume_waits_for_the_nodes_of_its_plugin() {
        let s = Settling {
            window_open: false,
            unreported: vec![("n1", vec!["hp", "other"]), ("n2", vec!["other"])],
        };
        assert_eq!(waits_for("hp", &s), ["n1"]);
        assert_eq!(waits_for("other", &s), ["n1", "n2"]);
        assert!(held(SingleNodeWriter, "hp", &s));
        assert!(
            !held(SingleNodeWriter, "third", &s),
            "no node that has not reported runs it"
        );
        assert!(!settled(&s));
        let window = Settling {
            window_open: true,
            unreported: vec![],
        };
        assert!(
            held(SingleNodeWriter, "third", &window),
            "a node unknown to the state may still register with it"
        );
        assert!(!settled(&window));
        assert!(settled(&Settling::default()));
    }
}
