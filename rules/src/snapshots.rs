//! Pure: whether a volume may be snapshotted (alone or with others in a group snapshot),
//! whether a snapshot may be deleted alone, and whether a volume may be created from a
//! snapshot or cloned from a volume, from the plugin's controller capabilities and the
//! source's facts. Table-tested below; `lifecycle::snapshots` is the shell around it.

use csivol_api::ControllerCapabilities;
use csivol_api::SnapshotState;

/// What the rules need to know about a source volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeFacts<'a> {
    pub name: &'a str,
    pub plugin: &'a str,
    /// The plugin's id; empty while CreateVolume has not answered.
    pub external_id: &'a str,
    /// The volume's lifecycle is `ready` (not creating, deleting or failed).
    pub ready: bool,
}

/// What the rules need to know about a source snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotFacts<'a> {
    pub name: &'a str,
    pub plugin: &'a str,
    pub state: SnapshotState,
}

/// Why a request is refused: the message and the hint that goes with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub message: String,
    pub hint: String,
    /// The volume or snapshot is not ready yet (a conflict that clears), rather than a
    /// request that cannot succeed (the plugin lacks a capability, another plugin).
    pub transient: bool,
}

fn refuse(message: String, hint: String, transient: bool) -> Refusal {
    Refusal {
        message,
        hint,
        transient,
    }
}

fn missing(plugin: &str, what: &str, capability: &str) -> Refusal {
    refuse(
        format!("plugin `{plugin}` cannot {what}: its controller does not report {capability}"),
        format!(
            "use a plugin whose ControllerGetCapabilities lists {capability}; `csivol plugin show {plugin}` shows what its controller reports"
        ),
        false,
    )
}

fn no_controller(plugin: &str) -> Refusal {
    refuse(
        format!("no agent hosts the controller of plugin `{plugin}`"),
        format!(
            "start a node agent with the controller endpoint of `{plugin}`; `csivol plugin show {plugin}` lists its controller hosts"
        ),
        false,
    )
}

fn volume_ready(v: &VolumeFacts<'_>) -> Result<(), Refusal> {
    if v.ready && !v.external_id.is_empty() {
        return Ok(());
    }
    Err(refuse(
        format!("volume `{}` is not ready", v.name),
        format!(
            "wait until `csivol volume show {}` says it is created",
            v.name
        ),
        true,
    ))
}

/// `snapshot create`: the plugin snapshots (CREATE_DELETE_SNAPSHOT) and the volume exists
/// at the plugin.
pub fn may_snapshot(
    caps: Option<&ControllerCapabilities>,
    volume: &VolumeFacts<'_>,
) -> Result<(), Refusal> {
    let caps = caps.ok_or_else(|| no_controller(volume.plugin))?;
    if !caps.create_delete_snapshot {
        return Err(missing(
            volume.plugin,
            "take snapshots",
            "CREATE_DELETE_SNAPSHOT",
        ));
    }
    volume_ready(volume)
}

/// `volume create --from-snapshot`: a ready snapshot of the same plugin, which can create
/// volumes from snapshots (CREATE_DELETE_SNAPSHOT, as the spec ties the two).
pub fn may_create_from_snapshot(
    plugin: &str,
    caps: Option<&ControllerCapabilities>,
    snapshot: &SnapshotFacts<'_>,
) -> Result<(), Refusal> {
    let caps = caps.ok_or_else(|| no_controller(plugin))?;
    if !caps.create_delete_snapshot {
        return Err(missing(
            plugin,
            "create volumes from snapshots",
            "CREATE_DELETE_SNAPSHOT",
        ));
    }
    if snapshot.plugin != plugin {
        return Err(refuse(
            format!(
                "snapshot `{}` belongs to plugin `{}`, not `{plugin}`",
                snapshot.name, snapshot.plugin
            ),
            format!("create the volume with `plugin = \"{}\"`", snapshot.plugin),
            false,
        ));
    }
    match snapshot.state {
        SnapshotState::Ready => Ok(()),
        SnapshotState::Creating | SnapshotState::Pending => Err(refuse(
            format!("snapshot `{}` is not ready to use yet", snapshot.name),
            format!(
                "wait for it: `csivol snapshot create` with `--wait`, or `csivol snapshot show {}`",
                snapshot.name
            ),
            true,
        )),
        SnapshotState::Deleting | SnapshotState::Failed => Err(refuse(
            format!(
                "snapshot `{}` is {}",
                snapshot.name,
                snapshot.state.as_str()
            ),
            "choose a ready snapshot; `csivol snapshot list` shows them".to_owned(),
            false,
        )),
    }
}

/// `volume create --from-volume`: a ready volume of the same plugin, which clones
/// (CLONE_VOLUME).
pub fn may_clone(
    plugin: &str,
    caps: Option<&ControllerCapabilities>,
    source: &VolumeFacts<'_>,
) -> Result<(), Refusal> {
    let caps = caps.ok_or_else(|| no_controller(plugin))?;
    if !caps.clone_volume {
        return Err(missing(plugin, "clone volumes", "CLONE_VOLUME"));
    }
    if source.plugin != plugin {
        return Err(refuse(
            format!(
                "volume `{}` belongs to plugin `{}`, not `{plugin}`",
                source.name, source.plugin
            ),
            format!("create the clone with `plugin = \"{}\"`", source.plugin),
            false,
        ));
    }
    volume_ready(source)
}

/// `snapshot create --group`: volumes of one plugin, each named once and ready, whose
/// group controller has CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT. The spec ties the calls
/// to it (CreateVolumeGroupSnapshot: "A Group Controller Plugin MUST implement this RPC
/// call if it has `CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT` controller capability"), and
/// a plugin without it is refused here, before anything is queued.
pub fn may_group_snapshot(
    caps: Option<&ControllerCapabilities>,
    volumes: &[VolumeFacts<'_>],
) -> Result<(), Refusal> {
    let Some(first) = volumes.first() else {
        return Err(refuse(
            "a group snapshot needs at least one volume".to_owned(),
            "name its volumes: `csivol snapshot create --group NAME VOLUME...`".to_owned(),
            false,
        ));
    };
    for (i, v) in volumes.iter().enumerate() {
        if volumes[..i].iter().any(|w| w.name == v.name) {
            return Err(refuse(
                format!("volume `{}` is named twice", v.name),
                "name each volume of the group once".to_owned(),
                false,
            ));
        }
        if v.plugin != first.plugin {
            // One CreateVolumeGroupSnapshot goes to one plugin: its `source_volume_ids`
            // are that plugin's ids.
            return Err(refuse(
                format!(
                    "volume `{}` belongs to plugin `{}`, volume `{}` to `{}`: a group snapshot is of one plugin's volumes",
                    v.name, v.plugin, first.name, first.plugin
                ),
                "snapshot the volumes of each plugin in a group of their own".to_owned(),
                false,
            ));
        }
    }
    let caps = caps.ok_or_else(|| no_controller(first.plugin))?;
    if !caps.group_snapshots {
        return Err(refuse(
            format!(
                "plugin `{}` cannot take group snapshots: its group controller does not report CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT",
                first.plugin
            ),
            format!(
                "use a plugin whose GroupControllerGetCapabilities lists CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT, or snapshot each volume alone with `csivol snapshot create VOLUME --name NAME`; `csivol plugin show {}` shows what it reports",
                first.plugin
            ),
            false,
        ));
    }
    volumes.iter().try_for_each(volume_ready)
}

/// `snapshot delete` of one snapshot: refused for a member of a group snapshot, which
/// goes with its group. The spec (DeleteSnapshot): "The CO SHALL NOT call this RPC with a
/// snapshot for which SP provided a non-empty group_snapshot_id field at creation time",
/// and "For such snapshots SP MUST delete the entire snapshot group via a
/// DeleteVolumeGroupSnapshotRequest call". A member the plugin cut without that field is
/// kept too: DeleteVolumeGroupSnapshot names every member in `snapshot_ids` ("Some SPs
/// require this list to delete the snapshots in the group").
pub fn may_delete_alone(snapshot: &str, group: Option<&str>) -> Result<(), Refusal> {
    match group {
        None => Ok(()),
        Some(g) => Err(refuse(
            format!(
                "snapshot `{snapshot}` is a member of group snapshot `{g}` and is deleted with it, not alone"
            ),
            format!("delete the group: `csivol snapshot delete {g}`"),
            false,
        )),
    }
}

/// A group snapshot's state once the plugin answered: ready only when the group says so
/// (VolumeGroupSnapshot.ready_to_use: "If any snapshot in the list of snapshots in this
/// message have ready_to_use set to false, the SP MUST set this field to false").
pub fn group_state(ready_to_use: bool, members: &[bool]) -> SnapshotState {
    state_after_create(ready_to_use && members.iter().all(|r| *r))
}

/// A snapshot's state once CreateSnapshot answered with `ready_to_use`.
pub fn state_after_create(ready_to_use: bool) -> SnapshotState {
    if ready_to_use {
        SnapshotState::Ready
    } else {
        SnapshotState::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: ControllerCapabilities = ControllerCapabilities {
        create_delete_volume: true,
        publish_unpublish_volume: false,
        list_volumes: false,
        list_volumes_published_nodes: false,
        publish_readonly: false,
        single_node_multi_writer: false,
        create_delete_snapshot: true,
        list_snapshots: true,
        clone_volume: true,
        expand_volume: false,
        volume_condition: false,
        modify_volume: false,
        get_snapshot: false,
        get_capacity: false,
        group_snapshots: true,
    };
    const NO_GROUP: ControllerCapabilities = ControllerCapabilities {
        group_snapshots: false,
        ..ALL
    };
    const NO_SNAP: ControllerCapabilities = ControllerCapabilities {
        create_delete_snapshot: false,
        list_snapshots: false,
        ..ALL
    };
    const NO_CLONE: ControllerCapabilities = ControllerCapabilities {
        clone_volume: false,
        ..ALL
    };

    fn vol(plugin: &'static str, id: &'static str, ready: bool) -> VolumeFacts<'static> {
        VolumeFacts {
            name: "v",
            plugin,
            external_id: id,
            ready,
        }
    }

    /// `Ok` or the start of the refusal's message, and whether it is transient.
    fn outcome(r: Result<(), Refusal>) -> String {
        match r {
            Ok(()) => "ok".to_owned(),
            Err(e) => format!("{} (transient: {})", e.message, e.transient),
        }
    }

    #[test]
    fn snapshot_table() {
        let cases: &[(Option<ControllerCapabilities>, VolumeFacts<'_>, &str)] = &[
            (Some(ALL), vol("p", "id", true), "ok"),
            (
                Some(NO_SNAP),
                vol("p", "id", true),
                "plugin `p` cannot take snapshots: its controller does not report CREATE_DELETE_SNAPSHOT (transient: false)",
            ),
            (
                None,
                vol("p", "id", true),
                "no agent hosts the controller of plugin `p` (transient: false)",
            ),
            (
                Some(ALL),
                vol("p", "", true),
                "volume `v` is not ready (transient: true)",
            ),
            (
                Some(ALL),
                vol("p", "id", false),
                "volume `v` is not ready (transient: true)",
            ),
            // Cloning is not snapshotting: a plugin without CLONE_VOLUME still snapshots.
            (Some(NO_CLONE), vol("p", "id", true), "ok"),
        ];
        for (caps, v, want) in cases {
            assert_eq!(
                outcome(may_snapshot(caps.as_ref(), v)),
                *want,
                "{caps:?} {v:?}"
            );
        }
    }

    #[test]
    fn from_snapshot_table() {
        let snap = |plugin, state| SnapshotFacts {
            name: "s",
            plugin,
            state,
        };
        use SnapshotState as S;
        let cases: &[(Option<ControllerCapabilities>, SnapshotFacts<'_>, &str)] = &[
            (Some(ALL), snap("p", S::Ready), "ok"),
            (Some(NO_CLONE), snap("p", S::Ready), "ok"),
            (
                Some(NO_SNAP),
                snap("p", S::Ready),
                "plugin `p` cannot create volumes from snapshots: its controller does not report CREATE_DELETE_SNAPSHOT (transient: false)",
            ),
            (
                None,
                snap("p", S::Ready),
                "no agent hosts the controller of plugin `p` (transient: false)",
            ),
            (
                Some(ALL),
                snap("q", S::Ready),
                "snapshot `s` belongs to plugin `q`, not `p` (transient: false)",
            ),
            (
                Some(ALL),
                snap("p", S::Creating),
                "snapshot `s` is not ready to use yet (transient: true)",
            ),
            (
                Some(ALL),
                snap("p", S::Pending),
                "snapshot `s` is not ready to use yet (transient: true)",
            ),
            (
                Some(ALL),
                snap("p", S::Deleting),
                "snapshot `s` is deleting (transient: false)",
            ),
            (
                Some(ALL),
                snap("p", S::Failed),
                "snapshot `s` is failed (transient: false)",
            ),
        ];
        for (caps, s, want) in cases {
            assert_eq!(
                outcome(may_create_from_snapshot("p", caps.as_ref(), s)),
                *want,
                "{caps:?} {s:?}"
            );
        }
    }

    #[test]
    fn clone_table() {
        let cases: &[(Option<ControllerCapabilities>, VolumeFacts<'_>, &str)] = &[
            (Some(ALL), vol("p", "id", true), "ok"),
            (Some(NO_SNAP), vol("p", "id", true), "ok"),
            (
                Some(NO_CLONE),
                vol("p", "id", true),
                "plugin `p` cannot clone volumes: its controller does not report CLONE_VOLUME (transient: false)",
            ),
            (
                Some(ALL),
                vol("q", "id", true),
                "volume `v` belongs to plugin `q`, not `p` (transient: false)",
            ),
            (
                Some(ALL),
                vol("p", "", false),
                "volume `v` is not ready (transient: true)",
            ),
        ];
        for (caps, v, want) in cases {
            assert_eq!(
                outcome(may_clone("p", caps.as_ref(), v)),
                *want,
                "{caps:?} {v:?}"
            );
        }
    }

    #[test]
    fn group_snapshot_table() {
        let named = |name, plugin, ready| VolumeFacts {
            name,
            plugin,
            external_id: "id",
            ready,
        };
        let a = named("a", "p", true);
        let b = named("b", "p", true);
        let cases: Vec<(Option<ControllerCapabilities>, Vec<VolumeFacts<'_>>, &str)> = vec![
            (Some(ALL), vec![a.clone(), b.clone()], "ok"),
            (Some(ALL), vec![a.clone()], "ok"),
            (
                Some(ALL),
                vec![],
                "a group snapshot needs at least one volume (transient: false)",
            ),
            (
                Some(ALL),
                vec![a.clone(), a.clone()],
                "volume `a` is named twice (transient: false)",
            ),
            (
                Some(ALL),
                vec![a.clone(), named("c", "q", true)],
                "volume `c` belongs to plugin `q`, volume `a` to `p`: a group snapshot is of one plugin's volumes (transient: false)",
            ),
            (
                Some(NO_GROUP),
                vec![a.clone(), b.clone()],
                "plugin `p` cannot take group snapshots: its group controller does not report CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT (transient: false)",
            ),
            (
                None,
                vec![a.clone()],
                "no agent hosts the controller of plugin `p` (transient: false)",
            ),
            (
                Some(ALL),
                vec![a.clone(), named("b", "p", false)],
                "volume `b` is not ready (transient: true)",
            ),
            // Group snapshots are not single snapshots: the capabilities are apart.
            (Some(NO_SNAP), vec![a.clone(), b.clone()], "ok"),
        ];
        for (caps, vs, want) in &cases {
            assert_eq!(
                outcome(may_group_snapshot(caps.as_ref(), vs)),
                *want,
                "{caps:?} {vs:?}"
            );
        }
    }

    #[test]
    fn a_member_is_deleted_with_its_group_only() {
        assert_eq!(outcome(may_delete_alone("s", None)), "ok");
        assert_eq!(
            outcome(may_delete_alone("g-a", Some("g"))),
            "snapshot `g-a` is a member of group snapshot `g` and is deleted with it, not alone (transient: false)"
        );
        let hint = may_delete_alone("g-a", Some("g")).unwrap_err().hint;
        assert_eq!(hint, "delete the group: `csivol snapshot delete g`");
    }

    #[test]
    fn a_group_is_ready_when_it_and_every_member_are() {
        assert_eq!(group_state(true, &[true, true]), SnapshotState::Ready);
        assert_eq!(group_state(true, &[true, false]), SnapshotState::Pending);
        assert_eq!(group_state(false, &[true, true]), SnapshotState::Pending);
        assert_eq!(group_state(true, &[]), SnapshotState::Ready);
    }

    #[test]
    fn ready_to_use_decides_the_state() {
        assert_eq!(state_after_create(true), SnapshotState::Ready);
        assert_eq!(state_after_create(false), SnapshotState::Pending);
    }
}
