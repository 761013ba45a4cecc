//! A claim's group: how it is applied, decided when the claim is recorded, and refused
//! where nothing would apply it.

use std::collections::BTreeMap;

use csivol_api::{ClaimMode, ClaimRequest, GroupBy, MountRequest, Ownership};
use csivol_rules::mounts::PluginMounts;

use super::{Env, PLUGIN, registration};

/// Registers `node` with the plugin's VOLUME_MOUNT_GROUP set to `vmg`.
async fn register(env: &Env, node: &str, vmg: bool) {
    let mut req = serde_json::to_value(registration(node, true, &[])).unwrap();
    req["plugins"][0]["node"]["capabilities"]["volume_mount_group"] = vmg.into();
    let req: csivol_api::RegisterRequest = serde_json::from_value(req).unwrap();
    let n = node.to_owned();
    env.write(move |ctx, l| super::super::register_node(ctx, &n, &req, l))
        .await
        .unwrap();
}

fn with_group(alloc: &str, node: &str, gid: u32, best_effort: bool) -> ClaimRequest {
    ClaimRequest {
        mount: MountRequest {
            gid: Some(gid),
            best_effort,
            ..Default::default()
        },
        ..ClaimRequest::new(alloc, node, ClaimMode::Write)
    }
}

#[tokio::test]
async fn the_plugins_volume_mount_group_applies_it_and_one_volume_has_one_group() {
    let env = Env::new();
    register(&env, "n1", true).await;
    register(&env, "n2", true).await;
    env.volume("v", "multi-node-multi-writer").await;
    let c = env
        .claim_with("v", with_group("a1", "n1", 1234, false))
        .await
        .unwrap();
    assert_eq!(
        (c.mount.gid, c.mount.group_by),
        (Some(1234), Some(GroupBy::Plugin))
    );
    assert_eq!(
        env.claim_row("v", "a1").await.unwrap().mount,
        c.mount,
        "recorded"
    );
    // Another group on another node of the same volume is refused, with the reason.
    let e = env
        .claim_with("v", with_group("a2", "n2", 4321, false))
        .await
        .unwrap_err();
    let said = format!("{e:?}");
    assert!(
        said.contains("another claim of the volume mounts it with group 1234"),
        "{said}"
    );
    assert!(env.claim_row("v", "a2").await.is_none());
    // The same group is welcome.
    env.claim_with("v", with_group("a3", "n2", 1234, false))
        .await
        .unwrap();
    // So is none from a best-effort run: it is recorded without, and says why.
    let c = env
        .claim_with("v", with_group("a4", "n2", 99, true))
        .await
        .unwrap();
    assert_eq!(c.mount.gid, None);
    assert!(
        c.mount
            .not_applied
            .as_deref()
            .is_some_and(|w| w.contains("with group 1234")),
        "{c:?}"
    );
}

#[tokio::test]
async fn without_it_csivol_changes_ownership_only_where_the_operator_allowed() {
    let mut env = Env::new();
    register(&env, "n1", false).await;
    env.volume("v", "single-node-writer").await;
    let e = env
        .claim_with("v", with_group("a1", "n1", 1234, false))
        .await
        .unwrap_err();
    let said = format!("{e:?}");
    assert!(
        said.contains("does not have VOLUME_MOUNT_GROUP") && said.contains("ownership = "),
        "{said}"
    );
    // A dry run says so too.
    let limits = env.limits.clone();
    let answer = env
        .read(move |c| {
            let req = with_group("a1", "n1", 1234, false);
            super::super::claim_dry_run(c, "v", &req, &limits, 0)
        })
        .await;
    assert!(!answer.accepted, "{answer:?}");
    env.limits.mounts = BTreeMap::from([(
        PLUGIN.to_owned(),
        PluginMounts {
            ownership: Ownership::OnRootMismatch,
            gids: vec![1000..=1999],
            selinux_mount: false,
        },
    )]);
    let e = env
        .claim_with("v", with_group("a1", "n1", 5, false))
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains("ownership_gids"), "{e:?}");
    let c = env
        .claim_with("v", with_group("a1", "n1", 1234, false))
        .await
        .unwrap();
    assert_eq!(c.mount.group_by, Some(GroupBy::OnRootMismatch));
}

/// With the etcd store a cluster runs on the previous schema until `upgrade finalize`: a
/// claim asking for a group is refused then (a server of the previous release would drop
/// the group from the row), and one asking for nothing is recorded as before.
#[tokio::test]
async fn below_the_schema_that_records_it_a_group_is_refused() {
    let env = Env::new();
    register(&env, "n1", true).await;
    env.volume("v", "single-node-writer").await;
    env.write(|ctx, _| {
        ctx.tx
            // What the previous schema lacks of the claims (the rest does not matter here).
            .execute_batch(
                "DROP INDEX claims_claimer;
                 ALTER TABLE claims DROP COLUMN claimer;
                 ALTER TABLE claims DROP COLUMN drift;
                 ALTER TABLE claims DROP COLUMN mount;",
            )
            .map_err(crate::error::ApiError::from)
    })
    .await
    .unwrap();
    let e = env
        .claim_with("v", with_group("a1", "n1", 1234, false))
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains("upgrade finalize"), "{e:?}");
    env.claim("v", "a1", "n1", ClaimMode::Write).await.unwrap();
}

/// A volume spec's `claim_mount_flags` cannot list a claim's mode, and a block volume
/// takes none; what a volume lists is what its claims may add.
#[tokio::test]
async fn a_volume_lists_the_flags_its_claims_may_add_and_never_their_mode() {
    let env = Env::new();
    register(&env, "n1", true).await;
    for (flags, block, refused) in [
        (vec!["ro"], false, Some("`ro` and `rw` are its mode")),
        (vec!["noatime"], true, Some("not a block one")),
        (vec!["noatime"], false, None),
    ] {
        let mut spec = super::spec("single-node-writer");
        spec.claim_mount_flags = flags.iter().map(|f| (*f).to_owned()).collect();
        if block {
            spec.attachment = csivol_api::Attachment::BlockDevice;
        }
        let r = env
            .write(move |ctx, _| super::super::register_volume(ctx, "v", spec.clone(), "op"))
            .await;
        match refused {
            Some(why) => assert!(format!("{r:?}").contains(why), "{r:?}"),
            None => {
                r.unwrap();
            }
        }
    }
    let asked = |flag: &str| ClaimRequest {
        mount: MountRequest {
            mount_flags: vec![flag.to_owned()],
            ..Default::default()
        },
        ..ClaimRequest::new("a1", "n1", ClaimMode::Write)
    };
    let e = env.claim_with("v", asked("sync")).await.unwrap_err();
    assert!(format!("{e:?}").contains("(noatime)"), "{e:?}");
    let c = env.claim_with("v", asked("noatime")).await.unwrap();
    assert_eq!(c.mount.mount_flags, ["noatime"]);
}

fn allowing(ownership: Ownership) -> BTreeMap<String, PluginMounts> {
    BTreeMap::from([(
        PLUGIN.to_owned(),
        PluginMounts {
            ownership,
            gids: vec![1000..=1999],
            selinux_mount: true,
        },
    )])
}

async fn volume_with(env: &Env, name: &str, f: impl FnOnce(&mut csivol_api::VolumeSpec)) {
    let mut spec = super::spec("single-node-writer");
    spec.external_id = format!("ext-{name}");
    f(&mut spec);
    let n = name.to_owned();
    env.write(move |ctx, _| super::super::register_volume(ctx, &n, spec.clone(), "op"))
        .await
        .unwrap();
}

/// A volume's own `ownership` overrides its plugin's (the gids stay the plugin's), and the
/// volume's view shows what the volume sets for its claims' mounts.
#[tokio::test]
async fn a_volumes_own_ownership_overrides_its_plugins_and_its_view_shows_its_mount_settings() {
    let mut env = Env::new();
    register(&env, "n1", false).await;
    env.limits.mounts = allowing(Ownership::Never);
    volume_with(&env, "allowed", |s| {
        s.ownership = Some(Ownership::Recursive);
        s.claim_mount_flags = vec!["noatime".into()];
        s.selinux_context = Some("system_u:object_r:container_file_t:s0".into());
    })
    .await;
    let shown = env.read(|c| super::super::volume_view(c, "allowed")).await;
    assert_eq!(
        (
            shown.ownership,
            shown.claim_mount_flags.as_slice(),
            shown.selinux_context.as_deref()
        ),
        (
            Some(Ownership::Recursive),
            &["noatime".to_owned()][..],
            Some("system_u:object_r:container_file_t:s0")
        )
    );
    let json = serde_json::to_value(&shown).unwrap();
    assert_eq!(json["ownership"], "recursive", "{json}");
    // A gid outside the plugin's ranges is refused whatever the volume says.
    let e = env
        .claim_with("allowed", with_group("a1", "n1", 5, false))
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains("ownership_gids"), "{e:?}");
    let c = env
        .claim_with("allowed", with_group("a1", "n1", 1234, false))
        .await
        .unwrap();
    assert_eq!(c.mount.group_by, Some(GroupBy::Recursive), "the volume's");

    // The plugin allows it, the volume says never: refused, naming the volume's setting.
    env.limits.mounts = allowing(Ownership::OnRootMismatch);
    volume_with(&env, "never", |s| s.ownership = Some(Ownership::Never)).await;
    let e = env
        .claim_with("never", with_group("a1", "n1", 1234, false))
        .await
        .unwrap_err();
    let said = format!("{e:?}");
    assert!(
        said.contains("the volume's `ownership` is `never`") && said.contains("volume's spec"),
        "{said}"
    );
    // A volume that sets none takes its plugin's.
    volume_with(&env, "plain", |_| {}).await;
    let c = env
        .claim_with("plain", with_group("a1", "n1", 1234, false))
        .await
        .unwrap();
    assert_eq!(c.mount.group_by, Some(GroupBy::OnRootMismatch));
    let shown = env.read(|c| super::super::volume_view(c, "plain")).await;
    assert_eq!(shown.ownership, None);
}

/// One NodePublishVolume carries the volume's mount flags, the claim's and its context in
/// one `mount_flags`: they are held to CSI's limit together, though each fits alone.
#[tokio::test]
async fn the_volumes_flags_and_the_claims_are_held_to_the_limit_together() {
    let mut env = Env::new();
    register(&env, "n1", true).await;
    env.limits.mounts = allowing(Ownership::Never);
    let half = csivol_api::limits::CSI_MOUNT_FLAGS_BYTES / 2;
    let long = format!("x-long={}", "a".repeat(half));
    let short = "noatime".to_owned();
    let (l, s) = (long.clone(), short.clone());
    volume_with(&env, "v", move |spec| {
        // 2046 bytes, and the claim's 2055: each fits, together they do not.
        spec.mount_flags = vec![format!("x-vol={}", "v".repeat(half - 8))];
        spec.claim_mount_flags = vec![l, s];
    })
    .await;
    let asked = |flag: &str| ClaimRequest {
        mount: MountRequest {
            mount_flags: vec![flag.to_owned()],
            ..Default::default()
        },
        ..ClaimRequest::new("a1", "n1", ClaimMode::Write)
    };
    let e = env.claim_with("v", asked(&long)).await.unwrap_err();
    let said = format!("{e:?}");
    assert!(
        said.contains("together") && said.contains("4096 bytes"),
        "{said}"
    );
    assert!(env.claim_row("v", "a1").await.is_none(), "nothing recorded");
    let c = env.claim_with("v", asked(&short)).await.unwrap();
    assert_eq!(c.mount.mount_flags, [short]);
}

/// What csivol's own ownership change did, as the node reports it with the claim's
/// publication: kept with the claim, an event where the bound stopped it, and the same
/// report again (an agent's restart) changes nothing.
#[tokio::test]
async fn the_nodes_ownership_change_is_kept_with_the_claim_and_a_bounded_one_is_an_event() {
    let mut env = Env::new();
    register(&env, "n1", false).await;
    env.limits.mounts = allowing(Ownership::Recursive);
    env.volume("v", "single-node-writer").await;
    env.claim_with("v", with_group("a1", "n1", 1234, false))
        .await
        .unwrap();
    env.controller_published("n1").await;
    let change = csivol_api::OwnershipChange {
        entries: 100_000,
        bounded: true,
    };
    let report = || csivol_api::Report::Published {
        volume: "v".into(),
        alloc: "a1".into(),
        target_path: "/targets/v/a1".into(),
        observed: None,
        ownership: Some(change),
    };
    env.report("n1", vec![report()]).await;
    let row = env.claim_row("v", "a1").await.unwrap();
    assert_eq!(row.mount.ownership_change, Some(change));
    assert_eq!(row.state, csivol_api::ClaimState::Ready);
    let bounded = env.events_of("claim-ownership-bounded").await;
    assert_eq!(bounded.len(), 1, "{bounded:?}");
    assert!(
        env.last_message("claim-ownership-bounded", "n1")
            .await
            .contains("first 100000 entries"),
    );
    env.report("n1", vec![report()]).await;
    assert_eq!(env.events_of("claim-ownership-bounded").await.len(), 1);
    // A report without it (an older agent) forgets nothing.
    env.report("n1", vec![super::published("v", "a1")]).await;
    let row = env.claim_row("v", "a1").await.unwrap();
    assert_eq!(row.mount.ownership_change, Some(change));
}
