//! What the storage holds that csivol does not know, end to end: a volume made outside
//! csivol (the reference plugin's CreateVolume called directly over its socket) is listed
//! by `plugin volumes` as unknown, adopted with `volume adopt`, then claimed and mounted; a
//! volume the storage has published to a node is refused until the operator names that
//! node; a volume csivol knows is refused under another name.

use std::time::Duration;

use csivol_api::domain::{AccessMode, AccessType, VolumeCapability};
use csivol_csi::csi::v1 as csi;
use csivol_csi::endpoint::CsiEndpoint;
use csivol_tests::{TestDir, wait_for};
use serde_json::Value;

use crate::cluster::{Cluster, NodeOpts, mounted};

const WAIT: Duration = Duration::from_secs(60);
const EXIT_CONFLICT: i32 = 4;

type Controller = csi::controller_client::ControllerClient<csivol_csi::PluginConnection>;

/// Runs `call` on node `i`'s plugin's Controller service, outside csivol.
pub(crate) fn at_plugin<T, F: Future<Output = T>>(
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

fn capability() -> csi::VolumeCapability {
    csi::VolumeCapability::from(&VolumeCapability {
        access_mode: AccessMode::SingleNodeWriter,
        access_type: AccessType::FileSystem {
            fs_type: String::new(),
            mount_flags: Vec::new(),
        },
    })
}

/// CreateVolume called directly: storage made outside csivol. Its volume id.
fn made_outside(c: &Cluster, name: &str) -> String {
    let name = name.to_owned();
    at_plugin(c, 0, |mut client| async move {
        client
            .create_volume(csi::CreateVolumeRequest {
                name,
                capacity_range: Some(csi::CapacityRange {
                    required_bytes: 1 << 20,
                    limit_bytes: 0,
                }),
                volume_capabilities: vec![capability()],
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .volume
            .unwrap()
            .volume_id
    })
}

/// The listed volume with `id`, once `cond` holds for it.
fn listed_when(c: &Cluster, id: &str, cond: impl Fn(&Value) -> bool) -> Value {
    wait_for(&format!("volume {id} listed"), WAIT, || {
        let l = c
            .csivol(&["plugin", "volumes", "hostpath", "-o", "json"])
            .ok()
            .json();
        l["volumes"]
            .as_array()?
            .iter()
            .find(|v| v["external_id"] == id && cond(v))
            .cloned()
    })
}

fn adopt(c: &Cluster, id: &str, name: &str, extra: &[&str]) -> crate::cluster::Out {
    let mut args = vec![
        "volume",
        "adopt",
        "hostpath",
        id,
        "--name",
        name,
        "--access-mode",
        "single-node-writer",
    ];
    args.extend_from_slice(extra);
    c.csivol(&args)
}

#[test]
fn storage_made_outside_csivol_is_listed_adopted_claimed_and_mounted() {
    let conf = TestDir::new("inventory-conf");
    let file = conf.join("agent.toml");
    std::fs::write(&file, "controller_list_interval = \"1s\"\n").unwrap();
    let opts = NodeOpts {
        agent_args: vec![format!("--config={}", file.display())],
        ..NodeOpts::default()
    };
    let c = Cluster::start("inventory", "30s", vec![opts]);

    // Made outside csivol: listed, unknown to csivol.
    let id = made_outside(&c, "made-by-hand");
    let listed = listed_when(&c, &id, |_| true);
    assert!(listed.get("volume").is_none(), "{listed}");
    assert_eq!(listed["capacity_bytes"], 1 << 20, "{listed}");
    let table = c.csivol(&["plugin", "volumes", "hostpath"]);
    assert!(
        table
            .ok()
            .stdout
            .lines()
            .any(|l| l.contains(&id) && l.contains("unknown")),
        "{table:?}"
    );

    // Adopted, then claimed and mounted as any volume.
    adopt(&c, &id, "adopted", &[]).ok();
    listed_when(&c, &id, |v| v["volume"] == "adopted");
    let claim = c.csivol(&[
        "claim",
        "adopted",
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
    let claim = claim.ok().json();
    assert_eq!(claim["state"], "ready", "{claim}");
    let target = claim["target_path"]
        .as_str()
        .expect("a target path")
        .to_owned();
    assert!(mounted(std::path::Path::new(&target)), "{claim}");

    // Known to csivol: another name is refused, naming the one it has.
    let again = adopt(&c, &id, "other-name", &[]);
    assert_eq!(again.code, EXIT_CONFLICT, "{again:?}");
    assert!(
        again
            .stderr
            .contains("already known to csivol as `adopted`"),
        "{again:?}"
    );

    // Published to a node by the storage: refused until the operator names that node.
    let busy = made_outside(&c, "published-by-hand");
    let busy_id = busy.clone();
    at_plugin(&c, 0, |mut client| async move {
        client
            .controller_publish_volume(csi::ControllerPublishVolumeRequest {
                volume_id: busy_id,
                node_id: "node-1".into(),
                volume_capability: Some(capability()),
                ..Default::default()
            })
            .await
            .unwrap()
    });
    listed_when(&c, &busy, |v| {
        v["published_node_ids"] == serde_json::json!(["node-1"])
    });
    let refused = adopt(&c, &busy, "busy", &[]);
    assert_eq!(refused.code, EXIT_CONFLICT, "{refused:?}");
    assert!(
        refused.stderr.contains("is published to node `node-1`"),
        "{refused:?}"
    );
    assert!(
        refused.stderr.contains("--published-to node-1"),
        "{refused:?}"
    );
    assert_eq!(
        c.csivol(&["volume", "show", "busy"]).code,
        3,
        "nothing recorded"
    );
    adopt(&c, &busy, "busy", &["--published-to", "node-1"]).ok();
    listed_when(&c, &busy, |v| v["volume"] == "busy");
}

/// `nomad volume status -json` output: a list of Nomad's `CSIVolumeListStub` with the
/// fields and encodings of Nomad's API (Go field names, times as RFC 3339 and UnixNano).
const NOMAD_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/nomad-volume-status.json"
);

#[test]
fn nomad_volumes_are_imported_as_register_specs_dry_run_first() {
    let c = Cluster::start("import-nomad", "30s", vec![NodeOpts::default()]);

    // A volume Nomad recorded without a mode (unclaimed) is skipped, saying how to carry
    // it over; the one with a mode is printed as a spec; nothing is registered.
    let dry = c.csivol(&["volume", "import", "nomad", NOMAD_FIXTURE]);
    let dry = dry.ok();
    assert!(
        dry.stderr
            .contains("skipped db: the output gives no access mode"),
        "{dry:?}"
    );
    assert!(dry.stdout.contains("name = \"assets\""), "{dry:?}");
    assert!(
        dry.stdout
            .contains("external_id = \"hostpath-nomad-assets\""),
        "{dry:?}"
    );
    assert!(
        dry.stdout
            .contains("access_mode = \"multi-node-reader-only\""),
        "{dry:?}"
    );
    assert!(
        dry.stderr
            .contains("dry run: 1 volume(s) would be registered"),
        "{dry:?}"
    );
    assert_eq!(
        c.csivol(&["volume", "show", "assets"]).code,
        3,
        "a dry run registers nothing"
    );

    // With a mode for the unclaimed one, both are printed; the printed spec is one
    // `volume register` takes.
    let dry = c.csivol(&[
        "volume",
        "import",
        "nomad",
        NOMAD_FIXTURE,
        "--access-mode",
        "single-node-writer",
    ]);
    let text = &dry.ok().stdout;
    let db = text
        .split("# csivol volume register ")
        .find(|s| s.starts_with("db.toml"))
        .expect("db's spec printed");
    let spec = c.dir.join("db.toml");
    std::fs::write(&spec, db.trim_start_matches("db.toml\n")).unwrap();
    let registered = c.csivol(&["volume", "register", spec.to_str().unwrap(), "-o", "json"]);
    let v = registered.ok().json();
    assert_eq!(v["external_id"], "hostpath-nomad-db", "{v}");
    assert_eq!(v["access_mode"], "single-node-writer", "{v}");
    assert_eq!(
        v["accessible_topology"],
        serde_json::json!([{"zone": "a"}]),
        "{v}"
    );

    // --apply registers them: the one registered above is unchanged, the other is new.
    let apply = c.csivol(&[
        "volume",
        "import",
        "nomad",
        NOMAD_FIXTURE,
        "--access-mode",
        "single-node-writer",
        "--apply",
    ]);
    let apply = apply.ok();
    assert!(
        apply.stderr.contains("registered volume assets"),
        "{apply:?}"
    );
    assert!(
        apply
            .stderr
            .contains("volume db is already registered with this spec"),
        "{apply:?}"
    );
    let assets = c
        .csivol(&["volume", "show", "assets", "-o", "json"])
        .ok()
        .json();
    assert_eq!(assets["plugin"], "hostpath", "{assets}");
    assert_eq!(assets["access_mode"], "multi-node-reader-only", "{assets}");
}

/// The listing's interval made short, for a cluster of one node whose plugin takes
/// `plugin_args`.
fn listed_often(conf: &TestDir, plugin_args: &[&str]) -> NodeOpts {
    let file = conf.join("agent.toml");
    std::fs::write(&file, "controller_list_interval = \"1s\"\n").unwrap();
    NodeOpts {
        agent_args: vec![format!("--config={}", file.display())],
        plugin_args: plugin_args.iter().map(|a| (*a).to_owned()).collect(),
    }
}

/// The RPCs node `i`'s plugin served for `volume_id`.
fn calls_for(c: &Cluster, i: usize, volume_id: &str) -> Vec<String> {
    c.nodes[i]
        .plugin_calls()
        .iter()
        .filter(|call| call["volume_id"] == volume_id)
        .filter_map(|call| call["rpc"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn adoption_is_checked_by_the_plugin_and_refused_for_what_it_does_not_confirm() {
    let conf = TestDir::new("validate-conf");
    let c = Cluster::start("validate", "30s", vec![listed_often(&conf, &[])]);
    let id = made_outside(&c, "checked-by-hand");
    listed_when(&c, &id, |_| true);

    // A file-system volume adopted as a block device: the plugin does not confirm it, and
    // the refusal says what and the plugin's message; no claim is taken on it.
    let refused = adopt(&c, &id, "checked", &["--attachment", "block-device"]);
    assert_eq!(refused.code, EXIT_CONFLICT, "{refused:?}");
    assert!(
        refused
            .stderr
            .contains("did not confirm the volume capability"),
        "{refused:?}"
    );
    assert!(
        refused
            .stderr
            .contains("is a file-system volume; use a mount capability"),
        "the plugin's message: {refused:?}"
    );
    assert!(
        calls_for(&c, 0, &id).contains(&"ValidateVolumeCapabilities".to_owned()),
        "asked through the controller host's plugin"
    );
    let shown = c
        .csivol(&["volume", "show", "checked", "-o", "json"])
        .ok()
        .json();
    assert_eq!(shown["state"], "failed", "{shown}");
    let claim = c.csivol(&["claim", "checked", "--node", "node-1", "--alloc", "a"]);
    assert_eq!(claim.code, EXIT_CONFLICT, "{claim:?}");
    assert!(
        claim.stderr.contains("volume `checked` was not adopted"),
        "a volume not adopted is not claimed: {claim:?}"
    );

    // Adopted as it is: confirmed, the failed record replaced, ready.
    let adopted = adopt(&c, &id, "checked", &[]);
    assert!(
        adopted.ok().stderr.contains("adopted volume"),
        "{adopted:?}"
    );
    let v = c
        .csivol(&["volume", "show", "checked", "-o", "json"])
        .ok()
        .json();
    assert_eq!(v["state"], "free", "{v}");

    // --skip-validation is for plugins that have no Controller service only.
    let other = made_outside(&c, "skipped-by-hand");
    listed_when(&c, &other, |_| true);
    let skipped = adopt(&c, &other, "skipped", &["--skip-validation"]);
    assert_eq!(skipped.code, 2, "{skipped:?}");
    assert!(
        skipped
            .stderr
            .contains("--skip-validation is only for a plugin without a Controller service"),
        "{skipped:?}"
    );
}

#[test]
fn a_volume_the_plugin_does_not_have_is_not_adopted() {
    // Without LIST_VOLUMES there is no listing to check first: ValidateVolumeCapabilities
    // answers NOT_FOUND.
    let conf = TestDir::new("notfound-conf");
    let c = Cluster::start(
        "notfound",
        "30s",
        vec![listed_often(&conf, &["--disable", "list-volumes"])],
    );
    let refused = adopt(&c, "no-such-volume", "ghost", &[]);
    assert_eq!(refused.code, EXIT_CONFLICT, "{refused:?}");
    assert!(
        refused
            .stderr
            .contains("plugin hostpath has no volume no-such-volume"),
        "{refused:?}"
    );
    assert!(refused.stderr.contains("NOT_FOUND"), "{refused:?}");
}

#[test]
fn a_plugin_without_a_controller_service_is_adopted_from_only_on_the_operators_word() {
    let conf = TestDir::new("nocontroller-conf");
    let c = Cluster::start(
        "nocontroller",
        "30s",
        vec![listed_often(&conf, &["--disable", "controller-service"])],
    );
    let refused = adopt(&c, "made-elsewhere", "elsewhere", &[]);
    assert_eq!(refused.code, EXIT_CONFLICT, "{refused:?}");
    assert!(
        refused
            .stderr
            .contains("plugin `hostpath` has no Controller service"),
        "{refused:?}"
    );
    assert!(refused.stderr.contains("--skip-validation"), "{refused:?}");
    let adopted = adopt(&c, "made-elsewhere", "elsewhere", &["--skip-validation"]);
    assert!(
        adopted
            .ok()
            .stderr
            .contains("without ValidateVolumeCapabilities"),
        "{adopted:?}"
    );
    let v = c
        .csivol(&["volume", "show", "elsewhere", "-o", "json"])
        .ok()
        .json();
    assert_eq!(v["state"], "free", "{v}");
    // Nor does it list snapshots: `plugin snapshots` says so.
    let listing = c.csivol(&["plugin", "snapshots", "hostpath"]);
    assert!(
        listing.ok().stderr.contains("does not list snapshots"),
        "{listing:?}"
    );
}
