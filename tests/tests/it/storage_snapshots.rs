//! Snapshots the storage holds that csivol does not know, end to end: a snapshot cut
//! outside csivol (the reference plugin's CreateSnapshot called directly over its socket)
//! is listed by `plugin snapshots` beside csivol's records, adopted with `snapshot adopt`,
//! and a volume created from it holds the data it was cut with; a snapshot the plugin does
//! not have, or one csivol knows under another name, is refused; a namespace adopts
//! snapshots of its own volumes only; a plugin without LIST_SNAPSHOTS says so.

use std::time::Duration;

use csivol_csi::csi::v1 as csi;
use csivol_tests::{TestDir, wait_for};
use serde_json::Value;

use crate::cluster::{Cluster, NodeOpts, PLUGIN};
use crate::inventory::at_plugin;
use crate::snapshots::{claim, create, release};

const WAIT: Duration = Duration::from_secs(60);
const EXIT_CONFLICT: i32 = 4;

fn listed_often(conf: &TestDir, plugin_args: &[&str]) -> NodeOpts {
    let file = conf.join("agent.toml");
    std::fs::write(&file, "controller_list_interval = \"1s\"\n").unwrap();
    NodeOpts {
        agent_args: vec![format!("--config={}", file.display())],
        plugin_args: plugin_args.iter().map(|a| (*a).to_owned()).collect(),
    }
}

/// The listed snapshot with `id`, once `cond` holds for it.
fn listed_when(c: &Cluster, id: &str, cond: impl Fn(&Value) -> bool) -> Value {
    wait_for(&format!("snapshot {id} listed"), WAIT, || {
        let l = c
            .csivol(&["plugin", "snapshots", PLUGIN, "-o", "json"])
            .ok()
            .json();
        l["snapshots"]
            .as_array()?
            .iter()
            .find(|s| s["snapshot_id"] == id && cond(s))
            .cloned()
    })
}

/// A snapshot of backend volume `source` cut outside csivol, by CreateSnapshot on node 1's
/// plugin socket; its id.
fn cut_by_hand(c: &Cluster, source: &str, name: &'static str) -> String {
    let source = source.to_owned();
    at_plugin(c, 0, |mut client| async move {
        client
            .create_snapshot(csi::CreateSnapshotRequest {
                source_volume_id: source,
                name: name.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .snapshot
            .unwrap()
            .snapshot_id
    })
}

fn adopt(c: &Cluster, id: &str, name: &str) -> crate::cluster::Out {
    c.csivol(&[
        "snapshot",
        "adopt",
        PLUGIN,
        id,
        "--name",
        name,
        "--timeout",
        "60s",
        "-o",
        "json",
    ])
}

#[test]
fn snapshots_made_outside_csivol_are_listed_adopted_and_restored_from() {
    let conf = TestDir::new("storage-snapshots-conf");
    let c = Cluster::start("storage-snapshots", "30s", vec![listed_often(&conf, &[])]);

    // A volume with data, then a snapshot of it cut outside csivol.
    let src = create(&c, "src", &[]).ok().json();
    let src_id = src["external_id"].as_str().unwrap().to_owned();
    let t = claim(&c, "src", "writer");
    std::fs::write(t.join("before.txt"), "written before the snapshot").unwrap();
    release(&c, "src", "writer");
    let snap_id = cut_by_hand(&c, &src_id, "cut-by-hand");

    // Listed as unknown to csivol, with its source volume, size, time and readiness.
    let listed = listed_when(&c, &snap_id, |_| true);
    assert!(listed.get("snapshot").is_none(), "{listed}");
    assert_eq!(listed["source_volume_id"], src_id.as_str(), "{listed}");
    assert_eq!(listed["volume"], "src", "{listed}");
    assert_eq!(listed["ready_to_use"], true, "{listed}");
    assert!(listed["creation_time_ms"].as_u64().is_some(), "{listed}");
    let table = c.csivol(&["plugin", "snapshots", PLUGIN]);
    assert!(
        table
            .ok()
            .stdout
            .lines()
            .any(|l| l.contains(&snap_id) && l.contains("unknown") && l.contains(&src_id)),
        "{table:?}"
    );

    // Adopted: found by ListSnapshots, ready, and listed as csivol's.
    let adopted = adopt(&c, &snap_id, "adopted");
    let s = adopted.ok().json();
    assert_eq!(s["state"], "ready", "{s}");
    assert_eq!(s["snapshot_id"], snap_id.as_str(), "{s}");
    listed_when(&c, &snap_id, |s| s["snapshot"] == "adopted");

    // A volume from it holds the data it was cut with.
    let restored = create(&c, "restored", &["--from-snapshot", "adopted"]);
    assert_eq!(restored.ok().json()["state"], "free", "{restored:?}");
    let r = claim(&c, "restored", "reader");
    assert_eq!(
        std::fs::read_to_string(r.join("before.txt")).unwrap(),
        "written before the snapshot"
    );

    // Known to csivol: another name is refused, naming the one it has.
    let again = adopt(&c, &snap_id, "other-name");
    assert_eq!(again.code, EXIT_CONFLICT, "{again:?}");
    assert!(
        again
            .stderr
            .contains("already known to csivol as `adopted`"),
        "{again:?}"
    );

    // Not in the storage: refused, and nothing of it can reach DeleteSnapshot.
    let missing = adopt(&c, "no-such-snapshot", "ghost");
    assert_eq!(missing.code, EXIT_CONFLICT, "{missing:?}");
    assert!(
        missing
            .stderr
            .contains("plugin hostpath has no snapshot no-such-snapshot"),
        "{missing:?}"
    );
    let ghost = c
        .csivol(&["snapshot", "show", "ghost", "-o", "json"])
        .ok()
        .json();
    assert_eq!(ghost["state"], "failed", "{ghost}");
    assert_eq!(ghost["snapshot_id"].as_str().unwrap_or(""), "", "{ghost}");

    // A team adopts snapshots of its own volumes only: one the plugin lists as cut from
    // `default`'s `src` is refused; one of the team's volume is the team's, linked to it,
    // and the team's new volume is restored from it.
    c.csivol(&["namespace", "create", "team-a"]).ok();
    let team_adopt = |id: &str, name: &str| {
        c.csivol(&[
            "-n",
            "team-a",
            "snapshot",
            "adopt",
            PLUGIN,
            id,
            "--name",
            name,
            "--timeout",
            "60s",
            "-o",
            "json",
        ])
    };
    let of_default = cut_by_hand(&c, &src_id, "cut-of-default");
    let refused = team_adopt(&of_default, "taken");
    assert_eq!(refused.code, EXIT_CONFLICT, "{refused:?}");
    assert!(
        refused
            .stderr
            .contains("as cut from a volume of another namespace"),
        "{refused:?}"
    );
    let team_src = create(&c, "tsrc", &["-n", "team-a"]).ok().json();
    let team_src_id = team_src["external_id"].as_str().unwrap().to_owned();
    let claim_in_team = |volume: &str, alloc: &str| {
        let out = c.csivol(&[
            "-n",
            "team-a",
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
        std::path::PathBuf::from(out.ok().json()["target_path"].as_str().unwrap())
    };
    let t = claim_in_team("tsrc", "team-writer");
    std::fs::write(t.join("team.txt"), "team-a's data").unwrap();
    let of_team = cut_by_hand(&c, &team_src_id, "cut-of-team-a");
    let s = team_adopt(&of_team, "fixture").ok().json();
    assert_eq!(
        (&s["namespace"], &s["state"], &s["volume"]),
        (
            &Value::from("team-a"),
            &Value::from("ready"),
            &Value::from("tsrc")
        ),
        "{s}"
    );
    let restored = create(
        &c,
        "restored",
        &["-n", "team-a", "--from-snapshot", "fixture"],
    );
    assert_eq!(restored.ok().json()["namespace"], "team-a", "{restored:?}");
    let r = claim_in_team("restored", "team-reader");
    assert_eq!(
        std::fs::read_to_string(r.join("team.txt")).unwrap(),
        "team-a's data"
    );
    // Adopted again from `default`: refused, without naming team-a's snapshot.
    let again = adopt(&c, &of_team, "taken");
    assert_eq!(again.code, EXIT_CONFLICT, "{again:?}");
    assert!(
        again
            .stderr
            .contains("already known to csivol, in another namespace")
            && !again.stderr.contains("fixture"),
        "{again:?}"
    );
}

#[test]
fn a_plugin_without_list_snapshots_says_so() {
    let conf = TestDir::new("no-list-snapshots-conf");
    let c = Cluster::start(
        "no-list-snapshots",
        "30s",
        vec![listed_often(&conf, &["--disable", "list-snapshots"])],
    );
    let listing = c.csivol(&["plugin", "snapshots", PLUGIN]);
    assert!(
        listing
            .ok()
            .stderr
            .contains("the plugin hostpath does not list snapshots (no LIST_SNAPSHOTS)"),
        "{listing:?}"
    );
    let json = c
        .csivol(&["plugin", "snapshots", PLUGIN, "-o", "json"])
        .ok()
        .json();
    assert_eq!(json["lists_snapshots"], false, "{json}");
    let refused = adopt(&c, "any", "any");
    assert_eq!(refused.code, EXIT_CONFLICT, "{refused:?}");
    assert!(
        refused.stderr.contains("does not list snapshots"),
        "{refused:?}"
    );
}

#[test]
fn a_listing_pages_through_short_pages_and_starts_over_after_a_stale_token() {
    // Pages of one entry (fewer than csivol asks for), and the first page token answered
    // ABORTED: the listing starts over and still holds every snapshot.
    let conf = TestDir::new("paged-snapshots-conf");
    let c = Cluster::start(
        "paged-snapshots",
        "30s",
        vec![listed_often(
            &conf,
            &["--list-page", "1", "--stale-snapshot-tokens", "1"],
        )],
    );
    let src = create(&c, "src", &[]).ok().json();
    let src_id = src["external_id"].as_str().unwrap().to_owned();
    let mut ids = Vec::new();
    for name in ["cut-1", "cut-2", "cut-3"] {
        ids.push(cut_by_hand(&c, &src_id, name));
    }
    let listed = wait_for("every snapshot listed", WAIT, || {
        let l = c
            .csivol(&["plugin", "snapshots", PLUGIN, "-o", "json"])
            .ok()
            .json();
        let got: Vec<String> = l["snapshots"]
            .as_array()?
            .iter()
            .filter_map(|s| s["snapshot_id"].as_str().map(str::to_owned))
            .collect();
        (got.len() == 3).then_some(got)
    });
    let mut sorted = listed.clone();
    sorted.sort();
    ids.sort();
    assert_eq!(sorted, ids, "each snapshot once: {listed:?}");
    let aborted = c.nodes[0]
        .plugin_calls()
        .iter()
        .filter(|call| call["rpc"] == "ListSnapshots" && call["code"] == "ABORTED")
        .count();
    assert_eq!(aborted, 1, "the stale token was met");
    // Started over within the same listing, not failed until the next one.
    let log = std::fs::read_to_string(c.nodes[0].dir.join("agent.log")).unwrap();
    assert!(!log.contains("failed to list snapshots"), "{log}");
}
