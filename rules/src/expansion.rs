//! Pure: whether a volume may be expanded now (`csivol volume expand`), from the facts the
//! lifecycle loads: its capacity, an expansion under way, what the plugin's controller hosts
//! and the plugin say they can, and where the volume is in use. Table-tested below.

use csivol_api::domain::VolumeExpansion;
use csivol_api::{ExpansionPhase, format_size};

/// What the rule reads.
#[derive(Clone, Debug)]
pub struct Facts<'a> {
    pub volume: &'a str,
    pub plugin: &'a str,
    /// The volume's lifecycle is `ready` (not creating, deleting or failed).
    pub ready: bool,
    /// What the volume has, if known.
    pub current: Option<u64>,
    pub requested: u64,
    /// An expansion already recorded: its target and phase.
    pub under_way: Option<(u64, ExpansionPhase)>,
    /// `None` when no controller host of the plugin has registered; otherwise whether any
    /// says EXPAND_VOLUME.
    pub controller_expand: Option<bool>,
    /// Whether a node plugin of the plugin has the node's EXPAND_VOLUME.
    pub node_expand: bool,
    /// Whether the plugin has a controller service at all.
    pub controller_service: bool,
    /// The plugin's VolumeExpansion capability.
    pub mode: Option<VolumeExpansion>,
    /// Nodes where the volume is claimed or still attached.
    pub in_use: &'a [String],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Start ControllerExpandVolume.
    Start,
    /// A node-only plugin (the node's EXPAND_VOLUME, not the controller's): start with
    /// NodeExpandVolume where the volume is staged, or on the next node to stage it.
    StartOnNodes,
    /// The volume already has that capacity, or is being expanded to it: nothing to do.
    Nothing,
}

/// Why an expansion is refused: the message, its hint, and whether the request itself is
/// wrong (`invalid`) or something is in the way (`conflict`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub invalid: bool,
    pub message: String,
    pub hint: String,
}

fn refuse(invalid: bool, message: String, hint: String) -> Result<Decision, Refusal> {
    Err(Refusal {
        invalid,
        message,
        hint,
    })
}

/// The rule. A plugin that has EXPAND_VOLUME but no VolumeExpansion capability is taken
/// as offline: growing a volume under a workload is allowed only when the plugin says so.
pub fn decide(f: &Facts<'_>) -> Result<Decision, Refusal> {
    let (v, p) = (f.volume, f.plugin);
    if !f.ready {
        return refuse(
            false,
            format!("volume `{v}` is not ready; it cannot be expanded now"),
            "wait for it to be created, or see `csivol volume show` for its error".into(),
        );
    }
    if let Some(cur) = f.current
        && f.requested < cur
    {
        return refuse(
            true,
            format!(
                "volume `{v}` has {}; shrinking it to {} is not supported",
                format_size(cur),
                format_size(f.requested)
            ),
            format!("ask for at least {cur} bytes"),
        );
    }
    if let Some((target, phase)) = f.under_way
        && phase != ExpansionPhase::Failed
    {
        if target == f.requested {
            return Ok(Decision::Nothing);
        }
        return refuse(
            false,
            format!("volume `{v}` is being expanded to {}", format_size(target)),
            format!(
                "wait for it with `csivol volume expand {v} --capacity {target} --wait`, then ask again"
            ),
        );
    }
    if f.under_way.is_none() && f.current == Some(f.requested) {
        return Ok(Decision::Nothing);
    }
    // Node-only: the controller cannot expand (or there is none) but the nodes can.
    let node_only = f.node_expand
        && match f.controller_expand {
            Some(c) => !c,
            None => !f.controller_service,
        };
    match f.controller_expand {
        _ if node_only => {}
        None => {
            return refuse(
                false,
                format!(
                    "no agent hosts the controller of plugin `{p}`, so it cannot say whether it can expand volumes"
                ),
                format!("start an agent with `--controller {p}=ENDPOINT`, then try again"),
            );
        }
        Some(false) => {
            return refuse(
                true,
                format!(
                    "plugin `{p}` cannot expand volumes: neither its controller nor its nodes report EXPAND_VOLUME"
                ),
                "create a larger volume and copy the data, or use a plugin that can expand".into(),
            );
        }
        Some(true) => {}
    }
    if f.mode != Some(VolumeExpansion::Online) && !f.in_use.is_empty() {
        return refuse(
            false,
            format!(
                "plugin `{p}` expands volumes only offline, and `{v}` is in use on {}",
                f.in_use.join(", ")
            ),
            format!(
                "release its claims first (`csivol release {v} --alloc ALLOC`), then expand it"
            ),
        );
    }
    Ok(if node_only {
        Decision::StartOnNodes
    } else {
        Decision::Start
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use VolumeExpansion::{Offline, Online};

    const G: u64 = 1 << 30;

    /// The base case: a ready 1 GiB volume of an online plugin, claimed on node-1.
    fn check(
        change: impl FnOnce(&mut Facts<'_>),
        in_use: &[&str],
        want: Result<Decision, (bool, &str)>,
    ) {
        let in_use: Vec<String> = in_use.iter().map(|s| (*s).to_owned()).collect();
        let mut f = Facts {
            volume: "data",
            plugin: "hostpath",
            ready: true,
            current: Some(G),
            requested: 2 * G,
            under_way: None,
            controller_expand: Some(true),
            node_expand: true,
            controller_service: true,
            mode: Some(Online),
            in_use: &in_use,
        };
        change(&mut f);
        let got = decide(&f);
        match (want, got) {
            (Ok(w), Ok(g)) => assert_eq!(g, w, "{f:?}"),
            (Err((invalid, text)), Err(r)) => {
                assert_eq!(r.invalid, invalid, "{f:?}: {r:?}");
                assert!(r.message.contains(text), "{f:?}: {}", r.message);
                assert!(!r.hint.is_empty(), "{f:?}: a refusal says what to do");
            }
            (w, g) => panic!("{f:?}: want {w:?}, got {g:?}"),
        }
    }

    #[test]
    fn expansion_rules() {
        use Decision::{Nothing, Start, StartOnNodes};
        // Online: allowed while claimed, and while free.
        check(|_| {}, &["node-1"], Ok(Start));
        check(|_| {}, &[], Ok(Start));
        // Offline: refused while in use, allowed once free.
        check(
            |f| f.mode = Some(Offline),
            &["node-1"],
            Err((false, "only offline, and `data` is in use on node-1")),
        );
        check(|f| f.mode = Some(Offline), &[], Ok(Start));
        // No VolumeExpansion capability reads as offline.
        check(
            |f| f.mode = None,
            &["node-1", "node-2"],
            Err((false, "in use on node-1, node-2")),
        );
        check(|f| f.mode = None, &[], Ok(Start));
        // Unsupported, or nobody to ask.
        check(
            |f| {
                f.controller_expand = Some(false);
                f.node_expand = false
            },
            &[],
            Err((true, "nor its nodes report EXPAND_VOLUME")),
        );
        check(
            |f| f.controller_expand = None,
            &[],
            Err((false, "no agent hosts the controller")),
        );
        // Node-only: the nodes grow it, where the controller cannot or there is none; a
        // plugin that can grow nowhere is refused.
        check(
            |f| f.controller_expand = Some(false),
            &["node-1"],
            Ok(StartOnNodes),
        );
        check(
            |f| {
                f.controller_expand = None;
                f.controller_service = false
            },
            &[],
            Ok(StartOnNodes),
        );
        check(
            |f| {
                f.controller_expand = Some(false);
                f.mode = Some(Offline)
            },
            &["node-1"],
            Err((false, "only offline")),
        );
        check(
            |f| {
                f.controller_expand = None;
                f.controller_service = false;
                f.node_expand = false
            },
            &[],
            Err((false, "no agent hosts the controller")),
        );
        // Shrinking is refused, even where expansion is unsupported; the same size is a no-op.
        check(
            |f| f.requested = G / 2,
            &[],
            Err((true, "shrinking it to 512 MiB")),
        );
        check(
            |f| {
                f.requested = 1;
                f.controller_expand = Some(false);
                f.node_expand = false
            },
            &[],
            Err((true, "shrinking")),
        );
        check(|f| f.requested = G, &["node-1"], Ok(Nothing));
        // Unknown capacity: any size may be asked for.
        check(
            |f| {
                f.current = None;
                f.requested = 1
            },
            &[],
            Ok(Start),
        );
        // Under way: the same target again is a no-op, another is refused until done.
        check(
            |f| f.under_way = Some((2 * G, ExpansionPhase::Controller)),
            &[],
            Ok(Nothing),
        );
        check(
            |f| f.under_way = Some((2 * G, ExpansionPhase::Node)),
            &["node-1"],
            Ok(Nothing),
        );
        check(
            |f| f.under_way = Some((3 * G, ExpansionPhase::Node)),
            &[],
            Err((false, "is being expanded to 3 GiB")),
        );
        // A failed one is tried again, even to the capacity the storage already reached.
        check(
            |f| f.under_way = Some((2 * G, ExpansionPhase::Failed)),
            &[],
            Ok(Start),
        );
        check(
            |f| {
                f.under_way = Some((G, ExpansionPhase::Failed));
                f.requested = G
            },
            &[],
            Ok(Start),
        );
        // Not ready.
        check(|f| f.ready = false, &[], Err((false, "is not ready")));
    }
}
