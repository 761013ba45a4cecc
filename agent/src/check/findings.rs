//! Pure: what one round trip through a plugin (`csivol-agent check`) found against the CSI
//! spec and against what csivol needs, each departure with the spec's words and whether it
//! would hurt csivol. Table-tested.

use serde::Serialize;

/// One call of the round trip and how it ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Call {
    pub rpc: &'static str,
    /// Why it was made: `first`, `again` (the same call repeated, for idempotency) or a
    /// probe of the spec's error table.
    pub purpose: Purpose,
    /// `None`: OK; else the gRPC code's name.
    pub code: Option<String>,
    pub message: String,
    pub ms: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Purpose {
    First,
    Again,
    /// NodeUnpublishVolume of a volume id that does not exist.
    UnknownVolume,
}

/// Whether a departure would hurt csivol, or is only noted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    /// csivol copes, but the plugin does not do what the spec says.
    Note,
    /// csivol would not work with the plugin as it is (never ready, stuck, leaking).
    Hurts,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Departure {
    pub severity: Severity,
    pub what: String,
    /// What the spec (or csivol) asks, in its words.
    pub rule: &'static str,
}

/// What a round trip saw besides the calls.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// The readiness check the agent applies to the plugin (`mount`, `exists`), and its
    /// verdict on the published target.
    pub ready_check: &'static str,
    pub ready: Option<Result<(), String>>,
    /// Data written through the target and read back.
    pub data: Option<Result<(), String>>,
    /// A file made through the target by a process of the mount's group alone, where the
    /// plugin has VOLUME_MOUNT_GROUP.
    pub mount_group: Option<Result<(), String>>,
    /// What was still at the target after NodeUnpublishVolume answered OK, and at the
    /// staging path after NodeUnstageVolume did (`None`: nothing the plugin made).
    pub left_at_target: Option<String>,
    pub left_at_staging: Option<String>,
    /// CreateVolume made again with the same name answered with another volume: (the
    /// first, the second).
    pub second_volume: Option<(String, String)>,
}

const IDEMPOTENT: &str = "\"This operation MUST be idempotent.\" (CSI spec, every call of the round trip); \
     csivol repeats a call whenever it cannot know whether the first one succeeded";
const CREATE_SAME: &str = "\"If a volume corresponding to the specified volume name already exists, \
     is accessible from accessibility_requirements, and is compatible with the specified \
     capacity_range, volume_capabilities, parameters and mutable_parameters in the \
     CreateVolumeRequest, the Plugin MUST reply 0 OK with the corresponding \
     CreateVolumeResponse.\" (CSI spec, CreateVolume)";
const DELETE_GONE: &str = "\"If a volume corresponding to the specified volume_id does not exist or the \
     artifacts associated with the volume do not exist anymore, the Plugin MUST reply 0 OK.\" \
     (CSI spec, DeleteVolume)";
const UNPUBLISH_UNKNOWN: &str = "NodeUnpublishVolume's error table: \"Volume does not exist | 5 NOT_FOUND\" \
     (CSI spec); csivol takes NOT_FOUND (or OK) with nothing mounted as a publication that is \
     gone, and retries anything else";
const PUBLISH_PLACES: &str = "\"For volumes with an access type of mount, the SP SHALL place the mounted \
     directory at target_path\" (csi.proto, NodePublishVolumeRequest.target_path); csivol reports \
     a claim ready only while its target shows what the plugin made there";
const UNPUBLISH_UNDOES: &str = "\"This RPC MUST undo the work by the corresponding NodePublishVolume.\" \
     (CSI spec, NodeUnpublishVolume)";
const UNSTAGE_UNDOES: &str = "\"This RPC MUST undo the work by the corresponding NodeStageVolume.\" (CSI \
     spec, NodeUnstageVolume)";
const ROUND_TRIP: &str = "the calls csivol makes for every claim must succeed on a volume the plugin \
     created";
const DATA: &str = "a workload reads and writes its volume through the claim's target";

/// The departures a round trip met, the ones that would hurt csivol first.
pub fn departures(calls: &[Call], seen: &Seen) -> Vec<Departure> {
    let mut out = Vec::new();
    let mut first_ok: Vec<&str> = Vec::new();
    for c in calls {
        match (c.purpose, &c.code) {
            (Purpose::First, None) => first_ok.push(c.rpc),
            (Purpose::First, Some(code)) => out.push(Departure {
                severity: Severity::Hurts,
                what: format!(
                    "{} failed with {code}: {}; the round trip stopped there",
                    c.rpc, c.message
                ),
                rule: ROUND_TRIP,
            }),
            (Purpose::Again, Some(code)) if first_ok.contains(&c.rpc) => out.push(Departure {
                severity: Severity::Hurts,
                what: format!(
                    "{} is not idempotent: the same call, made again, failed with {code}: {}",
                    c.rpc, c.message
                ),
                rule: if c.rpc == "DeleteVolume" {
                    DELETE_GONE
                } else {
                    IDEMPOTENT
                },
            }),
            (Purpose::Again, _) => {}
            (Purpose::UnknownVolume, None) => {}
            (Purpose::UnknownVolume, Some(code)) if code == "NOT_FOUND" => {}
            (Purpose::UnknownVolume, Some(code)) => out.push(Departure {
                severity: Severity::Note,
                what: format!(
                    "{} of a volume that does not exist failed with {code}, not NOT_FOUND: {}",
                    c.rpc, c.message
                ),
                rule: UNPUBLISH_UNKNOWN,
            }),
        }
    }
    if let Some((first, second)) = &seen.second_volume {
        out.push(Departure {
            severity: Severity::Hurts,
            what: format!(
                "CreateVolume made again with the same name created another volume ({second} after \
                 {first}); both were deleted"
            ),
            rule: CREATE_SAME,
        });
    }
    if let Some(Err(why)) = &seen.ready {
        let what = if seen.ready_check == "mount" {
            format!(
                "NodePublishVolume succeeded, but the target fails the readiness check: {why}; \
                 csivol would never report a claim of this plugin ready (a plugin that presents \
                 volumes without mounting them needs --ready-check ID=exists)"
            )
        } else {
            format!("NodePublishVolume succeeded, but the target is not there: {why}")
        };
        out.push(Departure {
            severity: Severity::Hurts,
            what,
            rule: PUBLISH_PLACES,
        });
    }
    if let Some(Err(why)) = &seen.data {
        out.push(Departure {
            severity: Severity::Hurts,
            what: format!("data written through the target could not be read back: {why}"),
            rule: DATA,
        });
    }
    if let Some(left) = &seen.left_at_target {
        out.push(Departure {
            severity: Severity::Hurts,
            what: format!("NodeUnpublishVolume answered OK, but the target still holds {left}"),
            rule: UNPUBLISH_UNDOES,
        });
    }
    if let Some(left) = &seen.left_at_staging {
        out.push(Departure {
            severity: Severity::Hurts,
            what: format!("NodeUnstageVolume answered OK, but the staging path still holds {left}"),
            rule: UNSTAGE_UNDOES,
        });
    }
    out.sort_by_key(|d| std::cmp::Reverse(d.severity));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(rpc: &'static str, purpose: Purpose, code: Option<&str>) -> Call {
        Call {
            rpc,
            purpose,
            code: code.map(str::to_owned),
            message: "the plugin says so".into(),
            ms: 1,
        }
    }

    fn seen() -> Seen {
        Seen {
            ready_check: "mount",
            ready: Some(Ok(())),
            data: Some(Ok(())),
            mount_group: None,
            left_at_target: None,
            left_at_staging: None,
            second_volume: None,
        }
    }

    /// A compact view: severity and the start of what was found.
    fn found(calls: &[Call], seen: &Seen) -> Vec<String> {
        departures(calls, seen)
            .iter()
            .map(|d| {
                let head: String = d.what.split(':').next().unwrap_or_default().to_owned();
                format!("{:?}: {head}", d.severity)
            })
            .collect()
    }

    #[test]
    fn what_a_round_trip_finds() {
        use Purpose::{Again, First, UnknownVolume};
        let clean = [
            call("NodeStageVolume", First, None),
            call("NodeStageVolume", Again, None),
            call("NodeUnpublishVolume", UnknownVolume, Some("NOT_FOUND")),
        ];
        let cases: Vec<(&str, Vec<Call>, Seen, Vec<&str>)> = vec![
            ("a spec-following plugin", clean.to_vec(), seen(), vec![]),
            (
                "an unknown volume unpublished with OK is fine too",
                vec![call("NodeUnpublishVolume", UnknownVolume, None)],
                seen(),
                vec![],
            ),
            (
                "a repeated call that fails",
                vec![
                    call("NodePublishVolume", First, None),
                    call("NodePublishVolume", Again, Some("ALREADY_EXISTS")),
                ],
                seen(),
                vec!["Hurts: NodePublishVolume is not idempotent"],
            ),
            (
                "a repeat after a failed first call is no idempotency question",
                vec![
                    call("CreateVolume", First, Some("RESOURCE_EXHAUSTED")),
                    call("CreateVolume", Again, Some("RESOURCE_EXHAUSTED")),
                ],
                Seen::default(),
                vec!["Hurts: CreateVolume failed with RESOURCE_EXHAUSTED"],
            ),
            (
                "an unknown volume answered with another code",
                vec![call("NodeUnpublishVolume", UnknownVolume, Some("INTERNAL"))],
                seen(),
                vec![
                    "Note: NodeUnpublishVolume of a volume that does not exist failed with INTERNAL, not NOT_FOUND",
                ],
            ),
            (
                "publish that makes nothing: never ready, named first",
                vec![call("NodeUnpublishVolume", UnknownVolume, Some("UNKNOWN"))],
                Seen {
                    ready: Some(Err("target of v is no longer mounted".into())),
                    ..seen()
                },
                vec![
                    "Hurts: NodePublishVolume succeeded, but the target fails the readiness check",
                    "Note: NodeUnpublishVolume of a volume that does not exist failed with UNKNOWN, not NOT_FOUND",
                ],
            ),
            (
                "mounts left behind",
                vec![],
                Seen {
                    left_at_target: Some("a mount".into()),
                    left_at_staging: Some("a mount".into()),
                    ..seen()
                },
                vec![
                    "Hurts: NodeUnpublishVolume answered OK, but the target still holds a mount",
                    "Hurts: NodeUnstageVolume answered OK, but the staging path still holds a mount",
                ],
            ),
            (
                "a second volume for the same name",
                vec![],
                Seen {
                    second_volume: Some(("v-1".into(), "v-2".into())),
                    ..seen()
                },
                vec![
                    "Hurts: CreateVolume made again with the same name created another volume (v-2 after v-1); both were deleted",
                ],
            ),
            (
                "data that does not come back",
                vec![],
                Seen {
                    data: Some(Err("read 0 bytes".into())),
                    ..seen()
                },
                vec!["Hurts: data written through the target could not be read back"],
            ),
        ];
        for (what, calls, seen, want) in cases {
            assert_eq!(found(&calls, &seen), want, "{what}");
        }
    }

    #[test]
    fn a_second_delete_that_fails_cites_the_delete_rule() {
        let d = departures(
            &[
                call("DeleteVolume", Purpose::First, None),
                call("DeleteVolume", Purpose::Again, Some("NOT_FOUND")),
            ],
            &seen(),
        );
        assert_eq!(d[0].rule, DELETE_GONE);
        let exists = Seen {
            ready_check: "exists",
            ready: Some(Err("target of v is gone".into())),
            ..seen()
        };
        let d = departures(&[], &exists);
        assert!(
            d[0].what
                .ends_with("the target is not there: target of v is gone")
        );
    }
}
