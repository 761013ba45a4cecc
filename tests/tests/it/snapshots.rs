//! Snapshots and clones through the CLI, with real processes and real bind mounts: data
//! written before a snapshot is in the volume created from it, a clone has its source's
//! data, and plugins without the capabilities refuse at once with a hint.

use std::path::PathBuf;

use serde_json::Value;

use crate::cluster::{Cluster, NodeOpts, Out, PLUGIN, mounted};

/// `csivol volume create` of a 1 MiB single-node-writer volume, with extra flags
/// (`--from-snapshot S`, `--from-volume V`), waiting; the CLI's answer.
pub(crate) fn create(c: &Cluster, name: &str, extra: &[&str]) -> Out {
    let spec = c.dir.join(format!("{name}.toml"));
    std::fs::write(
        &spec,
        format!(
            "name = \"{name}\"\nplugin = \"{PLUGIN}\"\naccess_mode = \"single-node-writer\"\n\
             attachment = \"file-system\"\ncapacity_bytes = 1048576\n"
        ),
    )
    .unwrap();
    let mut args = vec!["volume", "create", spec.to_str().unwrap()];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--wait", "--timeout", "60s", "-o", "json"]);
    c.csivol(&args)
}

/// Claims `volume` for `alloc` on node-1, waiting; its target path, checked mounted.
pub(crate) fn claim(c: &Cluster, volume: &str, alloc: &str) -> PathBuf {
    let out = c.csivol(&[
        "claim",
        volume,
        "--node",
        "node-1",
        "--alloc",
        alloc,
        "--wait",
        "--timeout",
        "60s",
        "-o",
        "json",
    ]);
    let t = PathBuf::from(out.ok().json()["target_path"].as_str().unwrap());
    assert!(mounted(&t), "{} is a real mount", t.display());
    t
}

pub(crate) fn release(c: &Cluster, volume: &str, alloc: &str) {
    c.csivol(&[
        "release",
        volume,
        "--alloc",
        alloc,
        "--wait",
        "--timeout",
        "60s",
    ])
    .ok();
}

/// Waits until the nodes hold no mount: a claim is gone once its node unpublished it,
/// and the volume's staging goes after (NodeUnstageVolume), in the node's own time.
pub(crate) fn nothing_left_mounted(c: &Cluster) {
    csivol_tests::wait_for(
        "the nodes to unstage what was released",
        std::time::Duration::from_secs(60),
        || c.all_mounts().is_empty().then_some(()),
    );
}

pub(crate) fn snapshots(c: &Cluster, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["snapshot", "list", "-o", "json"];
    args.extend_from_slice(extra);
    c.csivol(&args).ok().json().as_array().unwrap().clone()
}

#[test]
fn data_written_before_a_snapshot_is_in_the_volume_created_from_it_and_in_a_clone() {
    // The first DeleteVolume fails as a plugin that refuses to delete a volume with
    // snapshots would: the error is shown as the volume's, and a retry goes through.
    let opts = NodeOpts {
        plugin_args: vec!["--fail=DeleteVolume=FAILED_PRECONDITION:1".into()],
        ..NodeOpts::default()
    };
    let c = Cluster::start("snapshots", "30s", vec![opts]);
    assert_eq!(create(&c, "src", &[]).ok().json()["state"], "free");
    let t = claim(&c, "src", "writer");
    std::fs::write(t.join("before.txt"), "written before the snapshot").unwrap();

    let snap = c.csivol(&[
        "snapshot",
        "create",
        "src",
        "--name",
        "snap-1",
        "--wait",
        "--timeout",
        "60s",
        "-o",
        "json",
    ]);
    let s = snap.ok().json();
    assert_eq!(s["state"], "ready", "{snap:?}");
    assert_eq!(s["ready_to_use"], true);
    assert_eq!(s["volume"], "src");
    assert!(!s["snapshot_id"].as_str().unwrap().is_empty());
    // Creating it again changes nothing.
    let again = c.csivol(&[
        "snapshot", "create", "src", "--name", "snap-1", "-o", "json",
    ]);
    assert_eq!(again.ok().json()["snapshot_id"], s["snapshot_id"]);
    // It says so (a note for people: not with -o json, whose stderr holds errors only).
    let again = c.csivol(&["snapshot", "create", "src", "--name", "snap-1"]);
    assert!(again.ok().stderr.contains("already exists"), "{again:?}");

    std::fs::write(t.join("after.txt"), "written after the snapshot").unwrap();

    // A volume from the snapshot: the data of before, not of after.
    let restored = create(&c, "restored", &["--from-snapshot", "snap-1"]);
    assert_eq!(restored.ok().json()["state"], "free", "{restored:?}");
    let r = claim(&c, "restored", "reader");
    assert_eq!(
        std::fs::read_to_string(r.join("before.txt")).unwrap(),
        "written before the snapshot"
    );
    assert!(!r.join("after.txt").exists(), "the snapshot is of before");

    // A clone: the source's data as it is now.
    let clone = create(&c, "copy", &["--from-volume", "src"]);
    assert_eq!(clone.ok().json()["state"], "free", "{clone:?}");
    let k = claim(&c, "copy", "cloner");
    assert_eq!(
        std::fs::read_to_string(k.join("after.txt")).unwrap(),
        "written after the snapshot"
    );

    // List (all, by volume, table), show.
    let p = c
        .csivol(&["plugin", "show", PLUGIN, "-o", "json"])
        .ok()
        .json();
    assert_eq!(
        (&p["snapshots"], &p["clone_volume"]),
        (&Value::Bool(true), &Value::Bool(true))
    );
    let all = snapshots(&c, &[]);
    assert_eq!(all.len(), 1);
    assert_eq!(all[0]["name"], "snap-1");
    assert_eq!(snapshots(&c, &["--volume", "src"]).len(), 1);
    assert!(snapshots(&c, &["--volume", "copy"]).is_empty());
    let table = c.csivol(&["snapshot", "list"]);
    let text = &table.ok().stdout;
    assert!(
        text.contains("NAME") && text.contains("snap-1") && text.contains("ready"),
        "{text}"
    );
    let shown = c.csivol(&["snapshot", "show", "snap-1", "-o", "json"]);
    assert_eq!(shown.ok().json()["snapshot_id"], s["snapshot_id"]);
    // A volume's snapshots are where an operator looks at the volume.
    let src = c.csivol(&["volume", "show", "src"]).ok().stdout.clone();
    let below = src
        .split("\nsnapshots:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no snapshots section: {src}"));
    assert!(below.contains("snap-1") && below.contains("ready"), "{src}");
    let copy = c.csivol(&["volume", "show", "copy"]).ok().stdout.clone();
    assert!(copy.contains("\nsnapshots: none"), "{copy}");
    let missing = c.csivol(&["snapshot", "show", "nope"]);
    assert_eq!(missing.code, 3, "{missing:?}");
    let typo = c.csivol(&["snapshot", "show", "snap-2"]);
    assert_eq!(typo.code, 3, "{typo:?}");
    assert!(
        typo.stderr
            .contains("hint: did you mean snapshot `snap-1`?"),
        "{typo:?}"
    );

    for (v, a) in [
        ("src", "writer"),
        ("restored", "reader"),
        ("copy", "cloner"),
    ] {
        release(&c, v, a);
    }

    // Deleting the source while it has a snapshot: the plugin's refusal is the volume's
    // error; the second try goes through, and the snapshot outlives its volume.
    let refused = c.csivol(&[
        "volume",
        "deregister",
        "src",
        "--delete",
        "--yes",
        "--wait",
        "--timeout",
        "60s",
    ]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains("FAILED_PRECONDITION"),
        "{refused:?}"
    );
    let v = c
        .csivol(&["volume", "show", "src", "-o", "json"])
        .ok()
        .json();
    assert!(
        v["error"].as_str().unwrap().contains("DeleteVolume failed"),
        "{v}"
    );
    c.csivol(&[
        "volume",
        "deregister",
        "src",
        "--delete",
        "--yes",
        "--wait",
        "--timeout",
        "60s",
    ])
    .ok();
    assert_eq!(snapshots(&c, &["--volume", "src"]).len(), 1);
    let late = create(&c, "late", &["--from-snapshot", "snap-1"]);
    assert_eq!(late.ok().json()["state"], "free", "{late:?}");

    // Delete the snapshot.
    let deleted = c.csivol(&[
        "snapshot",
        "delete",
        "snap-1",
        "--yes",
        "--wait",
        "--timeout",
        "60s",
    ]);
    assert!(
        deleted.ok().stderr.contains("deleted snapshot snap-1"),
        "{deleted:?}"
    );
    assert!(snapshots(&c, &[]).is_empty());
    assert!(
        c.nodes[0]
            .plugin_calls()
            .iter()
            .any(|call| call["rpc"] == "DeleteSnapshot"),
        "deleted at the plugin"
    );
    nothing_left_mounted(&c);
}

#[test]
fn plugins_without_snapshots_or_clones_refuse_at_once_with_a_hint() {
    let opts = NodeOpts {
        plugin_args: vec![
            "--disable=snapshots".into(),
            "--disable=clone-volume".into(),
        ],
        ..NodeOpts::default()
    };
    let c = Cluster::start("no-snapshots", "30s", vec![opts]);
    assert_eq!(create(&c, "src", &[]).ok().json()["state"], "free");

    let p = c
        .csivol(&["plugin", "show", PLUGIN, "-o", "json"])
        .ok()
        .json();
    assert_eq!(
        (&p["snapshots"], &p["clone_volume"]),
        (&Value::Bool(false), &Value::Bool(false))
    );
    let snap = c.csivol(&["snapshot", "create", "src", "--name", "s1"]);
    assert_eq!(snap.code, 2, "{snap:?}");
    assert!(snap.stderr.contains("CREATE_DELETE_SNAPSHOT"), "{snap:?}");
    assert!(snap.stderr.contains("hint:"), "{snap:?}");
    assert!(snapshots(&c, &[]).is_empty(), "nothing recorded");

    let clone = create(&c, "copy", &["--from-volume", "src"]);
    assert_eq!(clone.code, 2, "{clone:?}");
    assert!(clone.stderr.contains("CLONE_VOLUME"), "{clone:?}");
    let gone = c.csivol(&["volume", "show", "copy"]);
    assert_eq!(gone.code, 3, "not recorded: {gone:?}");

    let from = create(&c, "restored", &["--from-snapshot", "s1"]);
    assert_eq!(from.code, 3, "no such snapshot: {from:?}");

    let both = create(&c, "x", &["--from-snapshot", "s1", "--from-volume", "src"]);
    assert_eq!(both.code, 2, "one source at most: {both:?}");
    assert!(
        !c.nodes[0]
            .plugin_calls()
            .iter()
            .any(|call| call["rpc"] == "CreateSnapshot"),
        "the plugin was never asked"
    );
}

/// How many times the plugin was called with `rpc`.
pub(crate) fn calls(c: &Cluster, rpc: &str) -> usize {
    c.nodes[0]
        .plugin_calls()
        .iter()
        .filter(|call| call["rpc"] == rpc)
        .count()
}

/// Snapshots `src` as `snap`, waiting until it is ready to use.
fn snapshot_ready(c: &Cluster, snap: &str) {
    let out = c.csivol(&[
        "snapshot",
        "create",
        "src",
        "--name",
        snap,
        "--wait",
        "--timeout",
        "60s",
        "-o",
        "json",
    ]);
    assert_eq!(out.ok().json()["ready_to_use"], true, "{out:?}");
}

#[test]
fn a_snapshot_not_ready_yet_is_polled_with_get_snapshot_where_the_plugin_has_it() {
    // Ready a while after it is cut: csivol asks again until it is.
    let ready_after = "--snapshot-ready-after=2s".to_owned();
    let c = Cluster::start(
        "snapshot-get",
        "30s",
        vec![NodeOpts {
            plugin_args: vec![ready_after.clone()],
            ..NodeOpts::default()
        }],
    );
    assert_eq!(create(&c, "src", &[]).ok().json()["state"], "free");
    snapshot_ready(&c, "s1");
    // Cut once; then GetSnapshot of that one snapshot until it was ready.
    assert_eq!(calls(&c, "CreateSnapshot"), 1);
    assert!(calls(&c, "GetSnapshot") >= 1, "polled with GetSnapshot");
    // (ListSnapshots is the controller hosts' listing, `plugin snapshots`, not the poll.)

    // A plugin without GET_SNAPSHOT is asked CreateSnapshot again instead.
    let c = Cluster::start(
        "snapshot-no-get",
        "30s",
        vec![NodeOpts {
            plugin_args: vec![ready_after, "--disable=get-snapshot".into()],
            ..NodeOpts::default()
        }],
    );
    assert_eq!(create(&c, "src", &[]).ok().json()["state"], "free");
    snapshot_ready(&c, "s1");
    assert!(
        calls(&c, "CreateSnapshot") >= 2,
        "polled with CreateSnapshot"
    );
    assert_eq!(calls(&c, "GetSnapshot"), 0);
}
