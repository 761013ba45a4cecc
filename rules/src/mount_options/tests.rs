use super::*;

static FS: AccessType = AccessType::FileSystem {
    fs_type: String::new(),
    mount_flags: Vec::new(),
};

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|f| (*f).to_owned()).collect()
}

#[test]
fn a_claim_adds_only_the_flags_its_volume_allows_and_never_its_mode() {
    let allowed = s(&["noatime", "nodiratime"]);
    assert_eq!(
        claim_flags(&s(&["noatime"]), &allowed, &FS),
        Ok(s(&["noatime"]))
    );
    assert_eq!(
        claim_flags(&s(&["sync"]), &allowed, &FS),
        Err(OptionRefused::NotAllowed {
            flag: "sync".into(),
            allowed: allowed.clone()
        })
    );
    for mode in ["ro", "rw"] {
        let allowed = s(&["ro", "rw"]);
        assert_eq!(
            claim_flags(&s(&[mode]), &allowed, &FS),
            Err(OptionRefused::Mode(mode.into())),
            "refused even where listed"
        );
    }
    assert_eq!(
        claim_flags(&s(&["noatime"]), &allowed, &AccessType::BlockDevice),
        Err(OptionRefused::Block)
    );
    assert_eq!(
        claim_flags(&[], &[], &AccessType::BlockDevice),
        Ok(Vec::new())
    );
}

#[test]
fn a_selinux_context_needs_a_declared_plugin_and_agrees_on_the_node() {
    let ctx = "system_u:object_r:container_file_t:s0:c1,c2";
    assert_eq!(
        selinux_context(Some(ctx), None, true, &FS, &[]),
        Ok(Some(ctx.into()))
    );
    assert_eq!(
        selinux_context(None, Some(ctx), true, &FS, &[]),
        Ok(Some(ctx.into())),
        "the volume's default"
    );
    assert_eq!(
        selinux_context(Some(ctx), None, false, &FS, &[]),
        Err(OptionRefused::NoSelinuxMount)
    );
    let other = [Some("system_u:object_r:other_t:s0".to_owned())];
    assert!(matches!(
        selinux_context(Some(ctx), None, true, &FS, &other),
        Err(OptionRefused::ContextDisagrees { .. })
    ));
    assert!(matches!(
        selinux_context(None, None, true, &FS, &other),
        Err(OptionRefused::ContextDisagrees { .. })
    ));
    assert_eq!(
        selinux_context(Some(ctx), None, true, &FS, &[Some(ctx.into())]),
        Ok(Some(ctx.into()))
    );
    assert!(matches!(
        selinux_context(Some("a:b:\"c"), None, true, &FS, &[]),
        Err(OptionRefused::BadContext(_))
    ));
    assert!(matches!(
        selinux_context(Some("unconfined"), None, true, &FS, &[]),
        Err(OptionRefused::BadContext(_))
    ));
    assert_eq!(selinux_context(None, None, false, &FS, &[None]), Ok(None));
}

#[test]
fn the_volumes_flags_the_claims_and_its_context_fit_together_in_one_publish() {
    let max = csivol_api::limits::CSI_MOUNT_FLAGS_BYTES;
    // Each part alone within the limit, as a client's request is checked.
    let volume = AccessType::FileSystem {
        fs_type: String::new(),
        mount_flags: vec!["v".repeat(max / 2)],
    };
    let half = vec!["c".repeat(max / 2)];
    assert_eq!(publish_flags_fit(&volume, &half, None), Ok(()));
    assert_eq!(
        publish_flags_fit(&volume, &half, Some("context=\"a:b:c\"")),
        Err(OptionRefused::TooLarge {
            bytes: max + 15,
            max
        })
    );
    let more = vec!["c".repeat(max / 2 + 1)];
    let e = publish_flags_fit(&volume, &more, None).unwrap_err();
    assert!(e.to_string().contains("together"), "{e}");
    // A block volume carries no flags.
    assert_eq!(
        publish_flags_fit(&AccessType::BlockDevice, &more, None),
        Ok(())
    );
}
