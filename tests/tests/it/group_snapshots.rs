//! Group snapshots through the CLI, with real processes and real bind mounts: two volumes
//! cut together by the reference plugin's GroupController, polled until ready, listed,
//! shown, a member restored like any snapshot, a member refused deletion alone, the group
//! deleted whole; and a plugin without the group controller refused at once with a hint.

use serde_json::Value;

use crate::cluster::{Cluster, NodeOpts, PLUGIN};
use crate::snapshots::{calls, claim, create, nothing_left_mounted, release, snapshots};

fn groups(c: &Cluster) -> Vec<Value> {
    c.csivol(&["snapshot", "list", "--groups", "-o", "json"])
        .ok()
        .json()
        .as_array()
        .unwrap()
        .clone()
}

fn names(ss: &[Value]) -> Vec<&str> {
    ss.iter().map(|s| s["name"].as_str().unwrap()).collect()
}

#[test]
fn two_volumes_snapshotted_together_restore_a_member_and_are_deleted_as_a_group() {
    // Ready a while after it is cut: csivol polls the group until it is.
    let c = Cluster::start(
        "group-snapshots",
        "30s",
        vec![NodeOpts {
            plugin_args: vec!["--snapshot-ready-after=2s".into()],
            ..NodeOpts::default()
        }],
    );
    for v in ["a", "b"] {
        assert_eq!(create(&c, v, &[]).ok().json()["state"], "free");
    }
    let ta = claim(&c, "a", "wa");
    let tb = claim(&c, "b", "wb");
    std::fs::write(ta.join("before.txt"), "a before").unwrap();
    std::fs::write(tb.join("before.txt"), "b before").unwrap();
    let p = c
        .csivol(&["plugin", "show", PLUGIN, "-o", "json"])
        .ok()
        .json();
    assert_eq!(p["group_snapshots"], true, "{p}");

    let out = c.csivol(&[
        "snapshot",
        "create",
        "--group",
        "g",
        "a",
        "b",
        "--parameter",
        "tier=gold",
        "--wait",
        "--timeout",
        "60s",
        "-o",
        "json",
    ]);
    let g = out.ok().json();
    assert_eq!(g["state"], "ready", "{out:?}");
    assert_eq!(g["ready_to_use"], true);
    assert_eq!(g["volumes"], serde_json::json!(["a", "b"]));
    assert!(!g["group_snapshot_id"].as_str().unwrap().is_empty(), "{g}");
    let members = g["members"].as_array().unwrap();
    assert_eq!(names(members), ["g.a", "g.b"], "{g}");
    for (m, v) in members.iter().zip(["a", "b"]) {
        assert_eq!(m["volume"], v, "{m}");
        assert_eq!(m["group"], "g", "{m}");
        assert_eq!(m["state"], "ready", "{m}");
        assert!(!m["snapshot_id"].as_str().unwrap().is_empty(), "{m}");
    }
    // Asked of the plugin's group controller: capabilities at registration, one cut, then
    // GetVolumeGroupSnapshot until ready.
    assert!(calls(&c, "GroupControllerGetCapabilities") >= 1);
    assert_eq!(calls(&c, "CreateVolumeGroupSnapshot"), 1);
    assert!(
        calls(&c, "GetVolumeGroupSnapshot") >= 1,
        "polled with GetVolumeGroupSnapshot"
    );
    assert_eq!(calls(&c, "CreateSnapshot"), 0, "not one snapshot at a time");

    // The same request again changes nothing; another under the name is refused.
    let again = c.csivol(&[
        "snapshot",
        "create",
        "--group",
        "g",
        "b",
        "a",
        "--parameter",
        "tier=gold",
        "-o",
        "json",
    ]);
    assert_eq!(
        again.ok().json()["group_snapshot_id"],
        g["group_snapshot_id"]
    );
    // It says so (a note for people: not with -o json, whose stderr holds errors only).
    let again = c.csivol(&[
        "snapshot",
        "create",
        "--group",
        "g",
        "b",
        "a",
        "--parameter",
        "tier=gold",
    ]);
    assert!(again.ok().stderr.contains("already exists"), "{again:?}");
    let other = c.csivol(&["snapshot", "create", "--group", "g", "a"]);
    assert_eq!(other.code, 4, "{other:?}");
    assert!(other.stderr.contains("hint:"), "{other:?}");
    let taken = c.csivol(&["snapshot", "create", "a", "--name", "g"]);
    assert_eq!(taken.code, 4, "groups and snapshots share names: {taken:?}");
    assert_eq!(calls(&c, "CreateVolumeGroupSnapshot"), 1);

    std::fs::write(ta.join("after.txt"), "a after").unwrap();

    // Listed: the members among the snapshots, the group among the groups.
    assert_eq!(names(&snapshots(&c, &[])), ["g.a", "g.b"]);
    assert_eq!(names(&snapshots(&c, &["--group", "g"])), ["g.a", "g.b"]);
    assert_eq!(names(&snapshots(&c, &["--volume", "b"])), ["g.b"]);
    let missing = c.csivol(&["snapshot", "list", "--group", "nope"]);
    assert_eq!(missing.code, 3, "{missing:?}");
    assert_eq!(names(&groups(&c)), ["g"]);
    let table = c.csivol(&["snapshot", "list"]).ok().stdout.clone();
    assert!(table.contains("GROUP"), "{table}");
    let table = c
        .csivol(&["snapshot", "list", "--groups"])
        .ok()
        .stdout
        .clone();
    assert!(
        table.contains("MEMBERS") && table.contains("a,b") && table.contains("ready"),
        "{table}"
    );
    let shown = c.csivol(&["snapshot", "show", "g"]).ok().stdout.clone();
    assert!(
        shown.contains("group snapshot g") && shown.contains("g.a") && shown.contains("g.b"),
        "{shown}"
    );
    let member = c
        .csivol(&["snapshot", "show", "g.a", "-o", "json"])
        .ok()
        .json();
    assert_eq!(member["group"], "g", "{member}");

    // A member restores like any snapshot: the data of when the group was cut.
    let restored = create(&c, "restored", &["--from-snapshot", "g.a"]);
    assert_eq!(restored.ok().json()["state"], "free", "{restored:?}");
    let r = claim(&c, "restored", "reader");
    assert_eq!(
        std::fs::read_to_string(r.join("before.txt")).unwrap(),
        "a before"
    );
    assert!(!r.join("after.txt").exists(), "the group is of before");

    // A member is deleted with its group only.
    let alone = c.csivol(&["snapshot", "delete", "g.a", "--yes"]);
    assert_eq!(alone.code, 2, "{alone:?}");
    assert!(
        alone.stderr.contains("member of group snapshot `g`")
            && alone
                .stderr
                .contains("hint: delete the group: `csivol snapshot delete g`"),
        "{alone:?}"
    );
    assert_eq!(calls(&c, "DeleteSnapshot"), 0, "the plugin was never asked");

    let deleted = c.csivol(&[
        "snapshot",
        "delete",
        "g",
        "--yes",
        "--wait",
        "--timeout",
        "60s",
    ]);
    assert!(
        deleted
            .ok()
            .stderr
            .contains("deleted group snapshot g with its members"),
        "{deleted:?}"
    );
    assert!(snapshots(&c, &[]).is_empty());
    assert!(groups(&c).is_empty());
    assert_eq!(calls(&c, "DeleteVolumeGroupSnapshot"), 1);
    assert_eq!(calls(&c, "DeleteSnapshot"), 0);
    // The plugin accepted the member list (a mismatch is INVALID_ARGUMENT there).
    assert!(
        c.nodes[0]
            .plugin_calls()
            .iter()
            .any(|call| call["rpc"] == "DeleteVolumeGroupSnapshot" && call["code"] == "OK"),
        "{:?}",
        c.nodes[0].plugin_calls()
    );
    let events = c.csivol(&["events", "-o", "json"]).ok().stdout.clone();
    assert!(
        events.contains("group snapshot `g`") && events.contains("deleted with its members"),
        "{events}"
    );

    for (v, a) in [("a", "wa"), ("b", "wb"), ("restored", "reader")] {
        release(&c, v, a);
    }
    nothing_left_mounted(&c);
}

#[test]
fn a_plugin_without_the_group_controller_is_refused_at_once_with_a_hint() {
    let c = Cluster::start(
        "no-group-snapshots",
        "30s",
        vec![NodeOpts {
            plugin_args: vec!["--disable=group-snapshots".into()],
            ..NodeOpts::default()
        }],
    );
    for v in ["a", "b"] {
        assert_eq!(create(&c, v, &[]).ok().json()["state"], "free");
    }
    let p = c
        .csivol(&["plugin", "show", PLUGIN, "-o", "json"])
        .ok()
        .json();
    assert_eq!(
        (&p["snapshots"], &p["group_snapshots"]),
        (&Value::Bool(true), &Value::Bool(false))
    );

    let out = c.csivol(&["snapshot", "create", "--group", "g", "a", "b", "--wait"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr
            .contains("cannot take group snapshots: its group controller does not report CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT"),
        "{out:?}"
    );
    assert!(out.stderr.contains("hint:"), "{out:?}");
    assert!(groups(&c).is_empty(), "nothing recorded");
    assert_eq!(
        calls(&c, "CreateVolumeGroupSnapshot"),
        0,
        "the plugin was never asked"
    );

    // Single snapshots still work there; and the CLI says how to name several volumes.
    let one = c.csivol(&[
        "snapshot",
        "create",
        "a",
        "--name",
        "s1",
        "--wait",
        "--timeout",
        "60s",
    ]);
    one.ok();
    let two = c.csivol(&["snapshot", "create", "a", "b", "--name", "s2"]);
    assert_eq!(two.code, 2, "{two:?}");
    assert!(
        two.stderr
            .contains("hint: snapshot them together: `csivol snapshot create --group s2 a b`"),
        "{two:?}"
    );
    let neither = c.csivol(&["snapshot", "create", "a"]);
    assert_eq!(neither.code, 2, "--name or --group: {neither:?}");
    assert_eq!(names(&snapshots(&c, &[])), ["s1"]);
}
