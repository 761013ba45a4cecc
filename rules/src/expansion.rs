//! Pure: whether a volume may be expanded now (`csivol volume expand`), from the facts the
//! lifecycle loads: its capacity, an expansion under way, what the plugin's controller hosts
//! and the plugin say they can, and where the volume is in use. Table-tested below.
//!
//! An expansion the plugin refuses or keeps failing may be lowered or cancelled, as
//! Kubernetes does since KEP-1790 (recover from expansion failure): while the request stands
//! failed, or while its ControllerExpandVolume waits to be retried after an error, a smaller
//! capacity replaces it and the volume's own capacity cancels it. Never below what the
//! volume has: the storage may already have grown that far, and CSI has no shrinking.

use csivol_api::domain::VolumeExpansion;
use csivol_api::{ExpansionPhase, format_size};

use crate::after_release::{self, Ask, Standing, Verdict};

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
    /// The expansion's ControllerExpandVolume failed with an error that may pass and waits
    /// for its retry (no attempt is running): it may be lowered or cancelled.
    pub retrying: bool,
    /// The expansion waits for the volume's release to finish (asked with a wait): nothing
    /// was sent, so it may be cancelled; a smaller size is asked for once it is sent.
    pub held: bool,
    /// `volume expand --cancel`: drop the expansion that stands.
    pub cancel: bool,
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
    /// Where the use of the volume stands: a release under way may be waited for.
    pub standing: &'a Standing<'a>,
    /// The caller follows the outcome (`--wait`): an offline expansion that only a release
    /// under way stands in the way of is held until it has finished.
    pub waits: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Start ControllerExpandVolume.
    Start,
    /// A node-only plugin (the node's EXPAND_VOLUME, not the controller's): start with
    /// NodeExpandVolume where the volume is staged, or on the next node to stage it.
    StartOnNodes,
    /// An offline expansion asked for with a wait while the volume is being released:
    /// ControllerExpandVolume is queued now and sent once the release has finished.
    StartAfterRelease,
    /// The same for a node-only plugin: NodeExpandVolume on the next node to stage the
    /// volume, none of the nodes it is leaving.
    StartOnNextStage,
    /// The volume already has that capacity, or is being expanded to it: nothing to do.
    Nothing,
    /// The retried ControllerExpandVolume is asked for this smaller capacity instead.
    Lower,
    /// The expansion that failed or keeps failing is dropped; the volume keeps what it has.
    Cancel,
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
    if let Some(d) = recover(f)? {
        return Ok(d);
    }
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
    if f.mode != Some(VolumeExpansion::Online) {
        let why = format!("plugin `{p}` expands volumes only offline, and `{v}`");
        let again = format!("csivol volume expand {v} --capacity {} --wait", f.requested);
        let ask = Ask {
            volume: v,
            why: &why,
            again: &again,
        };
        match after_release::admit_detached(f.standing, f.waits, &ask) {
            Verdict::Now => {}
            Verdict::Hold if node_only => return Ok(Decision::StartOnNextStage),
            Verdict::Hold => return Ok(Decision::StartAfterRelease),
            Verdict::InUse => {
                return refuse(
                    false,
                    format!("{why} is in use on {}", f.in_use.join(", ")),
                    format!(
                        "release its claims first (`csivol release {v} --alloc ALLOC`), then expand it"
                    ),
                );
            }
            Verdict::Refuse(r) => return refuse(false, r.message, r.hint),
        }
    }
    Ok(if node_only {
        Decision::StartOnNodes
    } else {
        Decision::Start
    })
}

/// Lowering or cancelling an expansion that failed, or whose controller call fails and
/// waits for its retry; `None` when the request is not that (the ordinary rules apply).
fn recover(f: &Facts<'_>) -> Result<Option<Decision>, Refusal> {
    let v = f.volume;
    let Some((target, phase)) = f.under_way else {
        if f.cancel {
            return Err(Refusal {
                invalid: false,
                message: format!("volume `{v}` has no expansion to cancel"),
                hint: format!("`csivol volume show {v}` shows its capacity"),
            });
        }
        return Ok(None);
    };
    let failed = phase == ExpansionPhase::Failed;
    let recoverable = failed || (phase == ExpansionPhase::Controller && f.retrying);
    let reached = f.current.unwrap_or(0);
    // Lowering to what the volume has cancels, as --cancel does (asking again for a target
    // the storage reached, with the nodes failed, retries them instead).
    let cancel = f.cancel
        || ((recoverable || f.held) && f.current == Some(f.requested) && f.requested < target);
    if cancel {
        if !recoverable && !f.held {
            return Err(Refusal {
                invalid: false,
                message: format!(
                    "the expansion of volume `{v}` to {} has not failed; it cannot be cancelled now",
                    format_size(target)
                ),
                hint: if phase == ExpansionPhase::Node {
                    format!(
                        "the storage already has {}: its nodes grow the file system; `csivol volume show {v}` shows them",
                        format_size(reached)
                    )
                } else {
                    format!(
                        "cancel it when ControllerExpandVolume has failed (`csivol volume show {v}` shows its last error)"
                    )
                },
            });
        }
        return Ok(Some(Decision::Cancel));
    }
    if !recoverable || f.requested >= target {
        return Ok(None);
    }
    if f.current.is_some_and(|c| f.requested < c) {
        return Err(Refusal {
            invalid: true,
            message: format!(
                "volume `{v}` already has {}; an expansion cannot go below the size reached",
                format_size(reached)
            ),
            hint: format!(
                "ask for at least {reached} bytes, or cancel the expansion with `csivol volume expand {v} --cancel`"
            ),
        });
    }
    // A failed one starts again at the lower size through the ordinary rules; a retried one
    // is lowered in place.
    Ok((!failed).then_some(Decision::Lower))
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
        // Claims ready on those nodes.
        let claims: Vec<after_release::Claim<'_>> = in_use
            .iter()
            .map(|n| after_release::Claim {
                alloc: "job",
                node: n,
                state: csivol_api::ClaimState::Ready,
            })
            .collect();
        let standing = after_release::standing(&claims, &[]);
        check_standing(change, in_use, &standing, want);
    }

    fn check_standing(
        change: impl FnOnce(&mut Facts<'_>),
        in_use: &[&str],
        standing: &Standing<'_>,
        want: Result<Decision, (bool, &str)>,
    ) {
        let in_use: Vec<String> = in_use.iter().map(|s| (*s).to_owned()).collect();
        let mut f = base(&in_use, standing);
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

    #[test]
    fn an_offline_expansion_waits_for_a_release_only_when_asked_to() {
        use Decision::{Start, StartAfterRelease, StartOnNextStage};
        use csivol_api::AttachmentState::{Detaching, Unstaging};
        let unstaging = after_release::standing(
            &[],
            &[after_release::Attachment {
                node: "node-a",
                state: Unstaging,
            }],
        );
        let offline = |f: &mut Facts<'_>| f.mode = Some(Offline);
        // Without a wait: refused, saying the volume is being released and how to wait.
        check_standing(
            offline,
            &["node-a"],
            &unstaging,
            Err((
                false,
                "`data` is still being released: node-a is unstaging it",
            )),
        );
        let refused = {
            let in_use = ["node-a".to_owned()];
            let mut f = base(&in_use, &unstaging);
            f.mode = Some(Offline);
            decide(&f).unwrap_err()
        };
        assert_eq!(
            refused.hint,
            "with --wait it waits for the release to finish, then goes ahead: \
             `csivol volume expand data --capacity 2147483648 --wait`"
        );
        // With one: held until the release has finished.
        check_standing(
            |f| {
                offline(f);
                f.waits = true
            },
            &["node-a"],
            &unstaging,
            Ok(StartAfterRelease),
        );
        // A node-only plugin grows it on the next node to stage it.
        check_standing(
            |f| {
                offline(f);
                f.waits = true;
                f.controller_expand = Some(false)
            },
            &["node-a"],
            &unstaging,
            Ok(StartOnNextStage),
        );
        // Online, a release is no matter; a claim in use still refuses an offline one, wait
        // or not.
        check_standing(|f| f.waits = true, &["node-a"], &unstaging, Ok(Start));
        check(
            |f| {
                offline(f);
                f.waits = true
            },
            &["node-1"],
            Err((false, "is in use on node-1")),
        );
        let detaching = after_release::standing(
            &[],
            &[after_release::Attachment {
                node: "node-a",
                state: Detaching,
            }],
        );
        check_standing(
            offline,
            &["node-a"],
            &detaching,
            Err((false, "being detached from node-a")),
        );
    }

    fn base<'a>(in_use: &'a [String], standing: &'a Standing<'a>) -> Facts<'a> {
        Facts {
            volume: "data",
            plugin: "hostpath",
            ready: true,
            current: Some(G),
            requested: 2 * G,
            under_way: None,
            retrying: false,
            held: false,
            cancel: false,
            controller_expand: Some(true),
            node_expand: true,
            controller_service: true,
            mode: Some(Online),
            in_use,
            standing,
            waits: false,
        }
    }

    #[test]
    fn a_failed_or_failing_expansion_is_lowered_or_cancelled() {
        use Decision::{Cancel, Lower, Start};
        let failed = Some((8 * G, ExpansionPhase::Failed));
        let controller = Some((8 * G, ExpansionPhase::Controller));
        let node = Some((8 * G, ExpansionPhase::Node));
        // Failed for good: a smaller size starts again; the size the volume has, or
        // --cancel, drops it; below it is refused.
        check(|f| f.under_way = failed, &[], Ok(Start));
        check(
            |f| {
                f.under_way = failed;
                f.requested = G
            },
            &["node-1"],
            Ok(Cancel),
        );
        check(
            |f| {
                f.under_way = failed;
                f.cancel = true
            },
            &[],
            Ok(Cancel),
        );
        check(
            |f| {
                f.under_way = failed;
                f.requested = G / 2
            },
            &[],
            Err((true, "cannot go below the size reached")),
        );
        // Retried after an error: lowered in place, or cancelled.
        let retrying = |f: &mut Facts<'_>| {
            f.under_way = controller;
            f.retrying = true
        };
        check(retrying, &[], Ok(Lower));
        check(
            |f| {
                retrying(f);
                f.requested = G
            },
            &[],
            Ok(Cancel),
        );
        check(
            |f| {
                retrying(f);
                f.requested = G / 2
            },
            &[],
            Err((true, "cannot go below")),
        );
        // Larger while failing: one expansion at a time.
        check(
            |f| {
                retrying(f);
                f.requested = 9 * G
            },
            &[],
            Err((false, "is being expanded to 8 GiB")),
        );
        // Not failing (an attempt running, or none failed yet): not now.
        check(
            |f| f.under_way = controller,
            &[],
            Err((false, "is being expanded to 8 GiB")),
        );
        check(
            |f| {
                f.under_way = controller;
                f.cancel = true
            },
            &[],
            Err((false, "has not failed")),
        );
        // The storage grew: its nodes must follow; not cancelled.
        check(
            |f| {
                f.under_way = node;
                f.current = Some(8 * G);
                f.cancel = true
            },
            &[],
            Err((false, "has not failed")),
        );
        check(
            |f| f.cancel = true,
            &[],
            Err((false, "no expansion to cancel")),
        );
        // Held for the volume's release: nothing was sent, so it may be cancelled (or by
        // asking for what the volume has); another size waits for it to be sent.
        let held = |f: &mut Facts<'_>| {
            f.under_way = controller;
            f.held = true
        };
        check(
            |f| {
                held(f);
                f.cancel = true
            },
            &[],
            Ok(Cancel),
        );
        check(
            |f| {
                held(f);
                f.requested = G
            },
            &[],
            Ok(Cancel),
        );
        check(
            |f| {
                held(f);
                f.requested = 4 * G
            },
            &[],
            Err((false, "is being expanded to 8 GiB")),
        );
    }
}
