use super::*;

static FS: AccessType = AccessType::FileSystem {
    fs_type: String::new(),
    mount_flags: Vec::new(),
};

fn claim<'a>(gid: u32, others: &'a [Option<u32>], vmg: Option<bool>) -> GroupClaim<'a> {
    GroupClaim {
        gid,
        mode: ClaimMode::Write,
        access_mode: AccessMode::SingleNodeWriter,
        access_type: &FS,
        volume_mount_group: vmg,
        others,
        volume_ownership: None,
    }
}

fn allowed(ownership: Ownership) -> PluginMounts {
    PluginMounts {
        ownership,
        gids: vec![1000..=1999],
        selinux_mount: false,
    }
}

#[test]
fn a_plugin_with_volume_mount_group_applies_any_group_whatever_the_ownership_setting() {
    let c = claim(5, &[], Some(true));
    assert_eq!(
        group_by(&c, &allowed(Ownership::Never)),
        Ok(GroupBy::Plugin)
    );
}

#[test]
fn without_it_the_ownership_setting_decides() {
    let c = claim(1234, &[], Some(false));
    assert_eq!(
        group_by(&c, &allowed(Ownership::Never)),
        Err(GroupRefused::OwnershipNever { by_volume: false })
    );
    assert_eq!(
        group_by(&c, &allowed(Ownership::OnRootMismatch)),
        Ok(GroupBy::OnRootMismatch)
    );
    assert_eq!(
        group_by(&c, &allowed(Ownership::Recursive)),
        Ok(GroupBy::Recursive)
    );
}

#[test]
fn a_volumes_own_ownership_setting_overrides_its_plugins() {
    let with = |o| GroupClaim {
        volume_ownership: Some(o),
        ..claim(1234, &[], Some(false))
    };
    // The plugin says never, the volume allows it: csivol applies the group, for the
    // plugin's gids.
    assert_eq!(
        group_by(&with(Ownership::OnRootMismatch), &allowed(Ownership::Never)),
        Ok(GroupBy::OnRootMismatch)
    );
    assert_eq!(
        group_by(
            &with(Ownership::Recursive),
            &allowed(Ownership::OnRootMismatch)
        ),
        Ok(GroupBy::Recursive)
    );
    // The plugin allows it, the volume says never: refused, naming the volume's setting.
    let refused = group_by(&with(Ownership::Never), &allowed(Ownership::Recursive));
    assert_eq!(
        refused,
        Err(GroupRefused::OwnershipNever { by_volume: true })
    );
    let said = refused.unwrap_err();
    assert!(
        said.to_string()
            .contains("the volume's `ownership` is `never`")
    );
    assert!(said.hint("p").contains("in the volume's spec"));
    // The gids stay the plugin's: a volume cannot allow a gid its plugin does not.
    let outside = GroupClaim {
        gid: 5,
        ..with(Ownership::OnRootMismatch)
    };
    assert_eq!(
        group_by(&outside, &allowed(Ownership::Never)),
        Err(GroupRefused::GidNotAllowed)
    );
    // A plugin with VOLUME_MOUNT_GROUP applies it whatever the volume says.
    let vmg = GroupClaim {
        volume_mount_group: Some(true),
        ..with(Ownership::Never)
    };
    assert_eq!(
        group_by(&vmg, &allowed(Ownership::Never)),
        Ok(GroupBy::Plugin)
    );
}

#[test]
fn csivol_changes_ownership_only_for_allowed_gids_of_single_node_write_claims() {
    let c = claim(5, &[], Some(false));
    assert_eq!(
        group_by(&c, &allowed(Ownership::OnRootMismatch)),
        Err(GroupRefused::GidNotAllowed)
    );
    let read = GroupClaim {
        mode: ClaimMode::Read,
        ..claim(1234, &[], Some(false))
    };
    assert_eq!(
        group_by(&read, &allowed(Ownership::OnRootMismatch)),
        Err(GroupRefused::NotSingleNodeWrite)
    );
    let multi = GroupClaim {
        access_mode: AccessMode::MultiNodeMultiWriter,
        ..claim(1234, &[], Some(false))
    };
    assert_eq!(
        group_by(&multi, &allowed(Ownership::OnRootMismatch)),
        Err(GroupRefused::NotSingleNodeWrite)
    );
}

#[test]
fn the_claims_of_one_volume_agree_on_its_group() {
    let same = [Some(7)];
    assert_eq!(
        group_by(&claim(7, &same, Some(true)), &allowed(Ownership::Never)),
        Ok(GroupBy::Plugin)
    );
    let other = [Some(7), Some(8)];
    let refused = group_by(&claim(7, &other, Some(true)), &allowed(Ownership::Never));
    assert_eq!(refused, Err(GroupRefused::Disagrees { other: 8 }));
    // A claim that asks for no group takes the volume as the others have it.
    let none = [None, Some(7)];
    assert_eq!(
        group_by(&claim(7, &none, Some(true)), &allowed(Ownership::Never)),
        Ok(GroupBy::Plugin)
    );
}

#[test]
fn a_block_volume_or_an_unregistered_plugin_takes_no_group() {
    let block = GroupClaim {
        access_type: &AccessType::BlockDevice,
        ..claim(7, &[], Some(true))
    };
    assert_eq!(
        group_by(&block, &allowed(Ownership::Never)),
        Err(GroupRefused::Block)
    );
    assert_eq!(
        group_by(&claim(7, &[], None), &allowed(Ownership::Never)),
        Err(GroupRefused::Unregistered)
    );
}
