use super::*;

/// Without the commit's own checkpoint (`wal_autocheckpoint = 0`), the WAL would grow
/// with every record; the checkpoints on the second connection keep it bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_survive_a_reopen_and_the_wal_stays_bounded() {
    let dir = std::env::temp_dir().join(format!("csivol-agent-store-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let wal = dir.join("agent.db-wal");
    let mut largest = 0;
    {
        let (store, _) = Store::open(&dir).await.unwrap();
        for i in 0..4_000 {
            let rec = StagingRecord {
                volume: format!("v{}", i % 50),
                plugin: "p".into(),
                external_id: format!("x{i}"),
                path: dir.join("staging").join(format!("v{i}")),
                state: StageState::Staged,
                block: false,
                observed: Some(Observation::default()),
            };
            store.put_staging(&rec, None).await.unwrap();
            largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
            // Let a checkpoint that was started finish, as a running agent would.
            tokio::task::yield_now().await;
        }
        store.delete_staging("v0").await.unwrap();
    }
    // 4,000 records of a few pages each would make a WAL of tens of MiB.
    assert!(largest < 8 << 20, "the WAL grew to {largest} bytes");
    let (store, _) = Store::open(&dir).await.unwrap();
    assert_eq!(store.stagings().len(), 49);
    assert_eq!(store.staging("v1").unwrap().external_id, "x3951");
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An agent.db of the first schema opens: its records carry no observation (observed
/// at their first check) and its stagings count as file-system ones.
#[tokio::test]
async fn an_older_agents_records_open_without_observations() {
    let dir = std::env::temp_dir().join(format!("csivol-agent-store-v1-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    {
        let c = Connection::open(dir.join("agent.db")).unwrap();
        c.execute_batch(
            "CREATE TABLE stagings (volume TEXT PRIMARY KEY, plugin TEXT NOT NULL,
                 external_id TEXT NOT NULL, path TEXT NOT NULL, state TEXT NOT NULL,
                 error TEXT, updated_ms INTEGER NOT NULL);
             CREATE TABLE publications (volume TEXT NOT NULL, alloc TEXT NOT NULL,
                 plugin TEXT NOT NULL, external_id TEXT NOT NULL, target TEXT NOT NULL,
                 staging TEXT, block INTEGER NOT NULL, state TEXT NOT NULL, error TEXT,
                 updated_ms INTEGER NOT NULL, PRIMARY KEY (volume, alloc));
             INSERT INTO stagings VALUES ('v', 'hp', 'x', '/s/v', 'staged', NULL, 1);
             INSERT INTO publications VALUES ('v', 'a', 'hp', 'x', '/t/v/a', '/s/v', 0,
                 'published', NULL, 1);
             PRAGMA user_version = 1;",
        )
        .unwrap();
    }
    let (store, _) = Store::open(&dir).await.unwrap();
    let s = store.staging("v").unwrap();
    assert_eq!((s.block, s.observed), (false, None));
    let p = store.publications_of("v").pop().unwrap();
    assert_eq!((p.state, p.observed), (PublishState::Published, None));
    // Observed, then kept across a reopen.
    let seen = Observation {
        device: Some(7),
        ..Observation::default()
    };
    store
        .put_publication(
            &PublicationRecord {
                observed: Some(seen.clone()),
                ..p
            },
            None,
        )
        .await
        .unwrap();
    drop(store);
    let (store, _) = Store::open(&dir).await.unwrap();
    assert_eq!(store.publications_of("v")[0].observed, Some(seen));
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An observation written before block devices' identities were recorded reads with
/// none (the device is judged by its number and size, and completed at its next
/// check); one written with them keeps them across a reopen.
#[tokio::test]
async fn observations_recorded_before_device_identities_open_without_them() {
    use csivol_rules::agent::observed::DeviceIdentity;
    let dir = tempfile::tempdir().unwrap();
    let rec = PublicationRecord {
        volume: "v".into(),
        alloc: "a".into(),
        plugin: "hp".into(),
        external_id: "x".into(),
        target: "/t/v/a".into(),
        staging: Some("/s/v".into()),
        block: true,
        state: PublishState::Published,
        observed: None,
    };
    {
        let (store, _) = Store::open(dir.path()).await.unwrap();
        store.put_publication(&rec, None).await.unwrap();
    }
    // As the agent before identities wrote it: loop3's number alone.
    let c = Connection::open(dir.path().join("agent.db")).unwrap();
    c.execute("UPDATE publications SET observed = '{\"device\":1795}'", [])
        .unwrap();
    drop(c);
    let (store, _) = Store::open(dir.path()).await.unwrap();
    let old = store.publications_of("v").pop().unwrap().observed.unwrap();
    assert_eq!((old.device, old.identity.as_ref()), (Some(1795), None));
    let completed = Observation {
        identity: Some(DeviceIdentity {
            diskseq: Some(11),
            ..DeviceIdentity::default()
        }),
        ..old
    };
    store
        .put_publication(
            &PublicationRecord {
                observed: Some(completed.clone()),
                ..rec
            },
            None,
        )
        .await
        .unwrap();
    drop(store);
    let (store, _) = Store::open(dir.path()).await.unwrap();
    assert_eq!(store.publications_of("v")[0].observed, Some(completed));
}

/// A busy machine may not run the blocking thread a checkpoint was handed to for a
/// long while: here it never does (the only one is held), and the writer's own
/// checkpoints still keep the WAL bounded.
#[test]
fn the_wal_stays_bounded_when_no_blocking_thread_runs_the_checkpoint() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir =
            std::env::temp_dir().join(format!("csivol-agent-store-held-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let wal = dir.join("agent.db-wal");
        let (store, _) = Store::open(&dir).await.unwrap();
        let (release, held) = std::sync::mpsc::channel::<()>();
        let holder = tokio::task::spawn_blocking(move || {
            let _ = held.recv();
        });
        let mut largest = 0;
        for i in 0..4_000 {
            let rec = StagingRecord {
                volume: format!("v{}", i % 50),
                plugin: "p".into(),
                external_id: format!("x{i}"),
                path: dir.join("staging").join(format!("v{i}")),
                state: StageState::Staged,
                block: false,
                observed: None,
            };
            store.put_staging(&rec, None).await.unwrap();
            largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
        }
        release.send(()).unwrap();
        holder.await.unwrap();
        assert!(largest < 8 << 20, "the WAL grew to {largest} bytes");
        drop(store);
        std::fs::remove_dir_all(&dir).unwrap();
    });
}

/// What a staging holds for its whole file system, and what the agent did to a
/// publication's ownership, survive a reopen and go with their staging and publication.
#[tokio::test]
async fn staged_mounts_and_ownership_survive_a_reopen_and_go_with_their_records() {
    let dir =
        std::env::temp_dir().join(format!("csivol-agent-store-mounts-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let staged = StagedMount {
        gid: Some(1234),
        selinux_context: Some("a:b:c".into()),
    };
    {
        let (store, _) = Store::open(&dir).await.unwrap();
        store.put_staging_mount("v", &staged).await.unwrap();
        let bounded = OwnershipChange {
            entries: 3,
            bounded: true,
        };
        store
            .record_ownership("v", "a1", 1234, bounded)
            .await
            .unwrap();
    }
    let (store, _) = Store::open(&dir).await.unwrap();
    assert_eq!(store.staging_mount("v").await.unwrap(), Some(staged));
    // The count and whether the bound stopped it, to be reported again after a restart.
    assert_eq!(
        store.ownership("v", "a1").await.unwrap(),
        Some((
            1234,
            OwnershipChange {
                entries: 3,
                bounded: true
            }
        ))
    );
    store.delete_publication("v", "a1").await.unwrap();
    assert_eq!(store.ownership("v", "a1").await.unwrap(), None);
    store.delete_staging("v").await.unwrap();
    assert_eq!(store.staging_mount("v").await.unwrap(), None);
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}
