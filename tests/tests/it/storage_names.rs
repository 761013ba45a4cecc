//! The name csivol gives the storage for each volume it creates (CreateVolume's `name`,
//! the plugin's idempotency key) is one per creation: a volume created again under a name
//! csivol used before never gets the storage of the one before. Real binaries, the
//! reference plugin (which keeps CreateVolume idempotent by name) and bind mounts.

use crate::cluster::{Cluster, NodeOpts};
use crate::snapshots::{claim, create, release};

#[test]
fn a_volume_created_again_under_a_used_name_gets_storage_of_its_own() {
    let c = Cluster::start("storage-names", "30s", vec![NodeOpts::default()]);
    let first = create(&c, "db", &[]).ok().json();
    let t = claim(&c, "db", "w1");
    std::fs::write(t.join("old.txt"), "the first db's data").unwrap();
    release(&c, "db", "w1");
    // The release is answered once the claim is gone; deregistering waits for the detach.
    c.wait_free("db");
    // Forgotten by csivol; the storage keeps the volume.
    let out = c.csivol(&["volume", "deregister", "db", "--yes"]);
    assert_eq!(out.code, 0, "{out:?}");

    let second = create(&c, "db", &[]).ok().json();
    assert_ne!(
        first["external_id"], second["external_id"],
        "the second db was given the first one's storage: {first} / {second}"
    );
    let t = claim(&c, "db", "w2");
    assert!(
        !t.join("old.txt").exists(),
        "the second db holds the first one's data"
    );
    release(&c, "db", "w2");
}
