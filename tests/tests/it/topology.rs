//! Topology end to end: two nodes whose plugins lie in different zones (`csivol-hostpath
//! --topology zone=…` on one shared backend), driven through the `csivol` CLI: the segments
//! shown by `node show` and `plugin show`, a volume created in the zone it asked for, claims
//! on the other zone refused at once with exit code 9 and a hint naming the right node (dry
//! runs and `--queue` included), and a registered volume's `topology` honoured likewise.

use std::time::Duration;

use csivol_tests::wait_for;
use serde_json::json;

use crate::cluster::{Cluster, NodeOpts, Out};

/// The documented exit code of a claim outside the volume's topology.
const EXIT_TOPOLOGY: i32 = 9;

fn zoned(zone: &str) -> NodeOpts {
    NodeOpts {
        plugin_args: vec![format!("--topology=zone={zone}")],
        ..Default::default()
    }
}

fn claim(c: &Cluster, volume: &str, node: &str, alloc: &str, extra: &[&str]) -> Out {
    let mut args = vec!["claim", volume, "--node", node, "--alloc", alloc];
    args.extend_from_slice(extra);
    c.csivol(&args)
}

#[track_caller]
fn assert_refused(out: &Out, node: &str, right_node: &str) {
    assert_eq!(out.code, EXIT_TOPOLOGY, "{out:?}");
    assert!(
        out.stderr
            .contains(&format!("node `{node}` is outside the topology")),
        "{out:?}"
    );
    assert!(
        out.stderr.contains(&format!("--node {right_node}")),
        "the hint names {right_node}: {out:?}"
    );
}

#[test]
fn zonal_volumes_are_claimed_only_in_their_zone() {
    let c = Cluster::start("topology", "30s", vec![zoned("a"), zoned("b")]);

    // Each node's segments, as its plugin reported them at registration.
    let n1 = c.csivol(&["node", "show", "node-1", "-o", "json"]);
    assert_eq!(
        n1.ok().json()["plugins"][0]["topology"],
        json!({"zone": "a"})
    );
    let table = c.csivol(&["node", "show", "node-2"]);
    assert!(table.ok().stdout.contains("zone=b"), "{table:?}");
    let p = c.csivol(&["plugin", "show", "hostpath", "-o", "json"]);
    assert_eq!(
        p.ok().json()["nodes"],
        json!([
            {"name": "node-1", "status": "ready", "topology": {"zone": "a"}, "ready_check": "mount"},
            {"name": "node-2", "status": "ready", "topology": {"zone": "b"}, "ready_check": "mount"},
        ])
    );
    let table = c.csivol(&["plugin", "show", "hostpath"]);
    let rows: Vec<&str> = table.ok().stdout.lines().collect();
    assert!(
        rows.iter()
            .any(|l| l.contains("node-1") && l.contains("zone=a"))
            && rows
                .iter()
                .any(|l| l.contains("node-2") && l.contains("zone=b")),
        "{table:?}"
    );

    // Created where it asked to be: zone b, whichever controller host ran CreateVolume.
    let v = c.create_volume_spec(
        "zonal",
        "name = \"zonal\"\nplugin = \"hostpath\"\naccess_mode = \"single-node-writer\"\n\
         attachment = \"file-system\"\n\n[topology_request]\nrequired = [{ zone = \"b\" }]\n",
    );
    assert_eq!(v["accessible_topology"], json!([{"zone": "b"}]));
    assert_eq!(v["topology_request"], json!({"required": [{"zone": "b"}]}));
    let shown = c.csivol(&["volume", "show", "zonal"]);
    assert!(
        shown
            .ok()
            .stdout
            .lines()
            .any(|l| l.contains("accessible from") && l.contains("zone=b")),
        "{shown:?}"
    );

    // The wrong zone is refused at once (nothing recorded), the dry run says the same.
    let wrong = claim(&c, "zonal", "node-1", "job-1", &[]);
    assert_refused(&wrong, "node-1", "node-2");
    let v = c
        .csivol(&["volume", "show", "zonal", "-o", "json"])
        .ok()
        .json();
    assert_eq!(v["claims"], json!([]), "nothing recorded");
    let dry = claim(&c, "zonal", "node-1", "job-1", &["--dry-run", "-o", "json"]);
    assert_eq!(dry.code, EXIT_TOPOLOGY, "{dry:?}");
    let answer = dry.json();
    assert_eq!(answer["accepted"], false);
    assert_eq!(answer["error"]["code"], "topology");
    assert!(
        answer["error"]["hint"]
            .as_str()
            .is_some_and(|h| h.contains("node-2")),
        "{answer}"
    );

    // The right zone works end to end: the plugin publishes it there.
    let ok = claim(
        &c,
        "zonal",
        "node-2",
        "job-1",
        &["--wait", "--timeout", "60s", "-o", "json"],
    );
    assert_eq!(ok.ok().json()["state"], "ready", "{ok:?}");

    // Held on node-2: a queued claim in the wrong zone is refused, never queued.
    let queued = claim(&c, "zonal", "node-1", "job-2", &["--queue"]);
    assert_refused(&queued, "node-1", "node-2");
    let v = c
        .csivol(&["volume", "show", "zonal", "-o", "json"])
        .ok()
        .json();
    assert_eq!(v["claims"].as_array().map(Vec::len), Some(1), "{v}");

    // Released, the volume is free again; nothing was ever attached to node-1.
    let released = c.csivol(&[
        "release",
        "zonal",
        "--alloc",
        "job-1",
        "--wait",
        "--timeout",
        "60s",
    ]);
    released.ok();

    // The same storage under another name, with its topology: the same rule. One backend
    // volume has one name, so the first is deregistered before the second is registered.
    // (Its attachment goes once the node unstaged it, which the release need not wait for.)
    wait_for("zonal deregistered", Duration::from_secs(60), || {
        let out = c.csivol(&["volume", "deregister", "zonal", "--yes"]);
        (out.code == 0).then_some(())
    });
    let external_id = v["external_id"].as_str().unwrap().to_owned();
    let spec = c.dir.join("imported.json");
    std::fs::write(
        &spec,
        json!({
            "name": "imported", "plugin": "hostpath", "external_id": external_id,
            "access_mode": "multi-node-multi-writer", "attachment": "file-system",
            "topology": [{"zone": "b"}],
        })
        .to_string(),
    )
    .unwrap();
    let reg = c.csivol(&["volume", "register", spec.to_str().unwrap(), "-o", "json"]);
    assert_eq!(
        reg.ok().json()["accessible_topology"],
        json!([{"zone": "b"}])
    );
    let wrong = claim(&c, "imported", "node-1", "job-3", &["-o", "json"]);
    assert_refused(&wrong, "node-1", "node-2");

    assert!(
        c.nodes[0].mounts().is_empty(),
        "nothing mounted in zone a: {:?}",
        c.nodes[0].mounts()
    );
    let publishes: Vec<_> = c.nodes[0]
        .plugin_calls()
        .into_iter()
        .filter(|call| call["rpc"] == "NodePublishVolume" || call["rpc"] == "NodeStageVolume")
        .collect();
    assert!(publishes.is_empty(), "{publishes:?}");
}
