//! A claim's group: how it is applied, decided when the claim is recorded, and refused
//! where nothing would apply it.

use std::collections::BTreeMap;

use csivol_api::{ClaimMode, ClaimRequest, GroupBy, MountRequest};
use csivol_rules::mounts::{Ownership, PluginMounts};

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
