//! Controller-side reconciliation through csivol: the controller hosts list the reference
//! plugin's volumes every second; an attachment made or removed at the plugin behind
//! csivol's back (ControllerPublishVolume / ControllerUnpublishVolume on the plugin's own
//! socket) is reported in `csivol status` and the event log, and never fixed by csivol;
//! so is a volume the plugin lists as abnormal.

use std::time::Duration;

use csivol_csi::csi::v1 as csi;
use csivol_csi::endpoint::CsiEndpoint;
use csivol_tests::{TestDir, wait_for};
use serde_json::Value;

use crate::cluster::{Cluster, NodeOpts};

const WAIT: Duration = Duration::from_secs(60);

type Controller = csi::controller_client::ControllerClient<csivol_csi::PluginConnection>;

/// Runs `call` against the plugin's controller on node `i`'s socket, as a storage admin
/// would.
fn with_controller<T, F: Future<Output = T>>(
    c: &Cluster,
    i: usize,
    call: impl FnOnce(Controller) -> F,
) -> T {
    let socket = c.nodes[i].dir.join("plugin.sock");
    let endpoint: CsiEndpoint = format!("unix://{}", socket.display()).parse().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        call(Controller::new(
            endpoint.connection(Duration::from_secs(10)),
        ))
        .await
    })
}

/// ControllerPublishVolume or ControllerUnpublishVolume behind csivol's back.
fn at_plugin(c: &Cluster, i: usize, publish: bool, external_id: &str, node_id: &str) {
    with_controller(c, i, |mut client| async move {
        if publish {
            let cap = csivol_api::domain::VolumeCapability {
                access_mode: csivol_api::domain::AccessMode::MultiNodeMultiWriter,
                access_type: csivol_api::domain::AccessType::FileSystem {
                    fs_type: String::new(),
                    mount_flags: Vec::new(),
                },
            };
            client
                .controller_publish_volume(csi::ControllerPublishVolumeRequest {
                    volume_id: external_id.into(),
                    node_id: node_id.into(),
                    volume_capability: Some(csi::VolumeCapability::from(&cap)),
                    ..Default::default()
                })
                .await
                .unwrap();
        } else {
            client
                .controller_unpublish_volume(csi::ControllerUnpublishVolumeRequest {
                    volume_id: external_id.into(),
                    node_id: node_id.into(),
                    ..Default::default()
                })
                .await
                .unwrap();
        }
    });
}

/// The plugin's node ids `external_id` is published to, from ListVolumes on node `i`'s
/// socket.
fn published_at_plugin(c: &Cluster, i: usize, external_id: &str) -> Vec<String> {
    let listing = with_controller(c, i, |mut client| async move {
        client
            .list_volumes(csi::ListVolumesRequest::default())
            .await
            .unwrap()
            .into_inner()
    });
    listing
        .entries
        .into_iter()
        .filter(|e| {
            e.volume
                .as_ref()
                .is_some_and(|v| v.volume_id == external_id)
        })
        .flat_map(|e| e.status.map(|s| s.published_node_ids).unwrap_or_default())
        .collect()
}

fn findings(c: &Cluster) -> Vec<Value> {
    let status = c.csivol(&["status", "-o", "json"]).ok().json();
    status["controller_findings"]
        .as_array()
        .expect("status shows controller findings")
        .clone()
}

fn wait_finding(c: &Cluster, kind: &str, node: &str) -> Value {
    wait_for(&format!("a `{kind}` finding on {node}"), WAIT, || {
        findings(c)
            .into_iter()
            .find(|f| f["kind"] == kind && f["node"] == node)
    })
}

fn event_messages(c: &Cluster, kind: &str) -> Vec<String> {
    let events = c.csivol(&["events", "-o", "json"]).ok().json();
    events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == kind)
        .filter_map(|e| e["message"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn attachments_made_or_removed_behind_csivols_back_are_reported_not_fixed() {
    let conf = TestDir::new("reconcile-conf");
    let file = conf.join("agent.toml");
    std::fs::write(&file, "controller_list_interval = \"1s\"\n").unwrap();
    let opts = NodeOpts {
        agent_args: vec![format!("--config={}", file.display())],
        ..NodeOpts::default()
    };
    let c = Cluster::start("reconcile", "30s", vec![opts.clone(), opts]);
    crate::e2e::create_volume(&c, "shared", "multi-node-multi-writer");
    let out = c.csivol(&[
        "claim",
        "shared",
        "--node",
        "node-1",
        "--alloc",
        "job-1",
        "--wait",
        "--timeout",
        "60s",
        "-o",
        "json",
    ]);
    assert_eq!(out.ok().json()["state"], "ready");
    let volume = c
        .csivol(&["volume", "show", "shared", "-o", "json"])
        .ok()
        .json();
    let external_id = volume["external_id"].as_str().unwrap().to_owned();
    assert!(findings(&c).is_empty(), "csivol and the plugin agree");

    // Leaked: published to node-2 at the plugin, where csivol has no attachment.
    at_plugin(&c, 0, true, &external_id, "node-2");
    let leaked = wait_finding(&c, "leaked", "node-2");
    assert_eq!(leaked["volume"], "shared");
    assert_eq!(leaked["plugin"], crate::cluster::PLUGIN);
    assert_eq!(leaked["external_id"], external_id.as_str());
    assert_eq!(leaked["node_id"], "node-2");
    assert_eq!(
        leaked["message"],
        "the plugin has volume `shared` published to node `node-2`, where csivol has no attachment of it"
    );
    let said = event_messages(&c, "attachment-leaked");
    assert_eq!(said.len(), 1, "said once: {said:?}");
    // Shown, never fixed: csivol did not unpublish it, nor attach it in its records.
    let v = c
        .csivol(&["volume", "show", "shared", "-o", "json"])
        .ok()
        .json();
    assert!(
        v["attachments"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["node"] != "node-2"),
        "{v}"
    );
    let human = c.csivol(&["status"]);
    assert!(
        human
            .ok()
            .stdout
            .contains("leaked [hostpath] the plugin has volume `shared`"),
        "{}",
        human.stdout
    );

    // Missing: csivol's attachment to node-1 removed at the plugin.
    at_plugin(&c, 0, false, &external_id, "node-1");
    let missing = wait_finding(&c, "missing", "node-1");
    assert_eq!(
        missing["message"],
        "csivol has volume `shared` attached to node `node-1`, but the plugin does not list it published there"
    );
    assert_eq!(event_messages(&c, "attachment-missing").len(), 1);

    // The storage admin undoes the leak: the finding is resolved, with an event.
    at_plugin(&c, 0, false, &external_id, "node-2");
    wait_for("the leak resolved", WAIT, || {
        let f = findings(&c);
        (!f.iter().any(|f| f["kind"] == "leaked")).then_some(())
    });
    let resolved = event_messages(&c, "finding-resolved");
    assert!(
        resolved.iter().any(|m| m.contains("no longer leaked")),
        "{resolved:?}"
    );
    assert!(findings(&c).iter().any(|f| f["kind"] == "missing"));

    // Leaked again; this time an operator detaches it through csivol, with a reason:
    // ControllerUnpublishVolume of that publication, and nothing else.
    at_plugin(&c, 0, true, &external_id, "node-2");
    let leaked = wait_finding(&c, "leaked", "node-2");
    let hint = c.csivol(&["status"]).ok().stdout.clone();
    assert!(
        hint.contains("detach it: csivol detach shared --node node-2 --reason"),
        "{hint}"
    );
    assert_eq!(leaked["volume"], "shared");
    let plan = c
        .csivol(&["detach", "shared", "--node", "node-2", "--dry-run"])
        .ok()
        .stdout
        .clone();
    assert!(
        plan.contains(
            "unpublish volume shared from node node-2, where the plugin has it published and csivol has nothing"
        ),
        "{plan}"
    );
    assert!(published_at_plugin(&c, 0, &external_id).contains(&"node-2".to_owned()));
    c.csivol(&[
        "detach",
        "shared",
        "--node",
        "node-2",
        "--reason",
        "published by hand during the migration",
        "--yes",
        "--wait",
        "--timeout",
        "60s",
    ])
    .ok();
    assert_eq!(
        published_at_plugin(&c, 0, &external_id),
        Vec::<String>::new(),
        "node-2's publication is gone at the plugin; node-1's was already removed there"
    );
    let said = event_messages(&c, "volume-detach");
    assert!(
        said.iter()
            .any(|m| m.contains("leaked publication") && m.contains("during the migration")),
        "{said:?}"
    );
    wait_for("the second leak resolved", WAIT, || {
        (!findings(&c).iter().any(|f| f["kind"] == "leaked")).then_some(())
    });
    // node-1's claim was not touched.
    let v = c
        .csivol(&["volume", "show", "shared", "-o", "json"])
        .ok()
        .json();
    assert_eq!(v["claims"][0]["state"], "ready", "{v}");

    // Abnormal: the plugin's VOLUME_CONDITION in its listing (injected on both hosts'
    // plugins, which list the same storage system).
    for n in &c.nodes {
        let dir = n.plugin_state().join("abnormal");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(&external_id), "disk on fire").unwrap();
    }
    let abnormal = wait_for("an abnormal finding", WAIT, || {
        findings(&c).into_iter().find(|f| f["kind"] == "abnormal")
    });
    assert_eq!(abnormal["volume"], "shared");
    assert_eq!(abnormal["node"], Value::Null);
    assert_eq!(
        abnormal["message"],
        "the plugin says the volume is abnormal: disk on fire"
    );
    assert_eq!(event_messages(&c, "volume-abnormal").len(), 1);
}
