//! `csivol-agent check` against the reference plugin in every shape of [`SHAPES`] (the
//! same table the node-truth scenario runs), and against a plugin that fails the round trip:
//! what it says of each, its exit status, and that it leaves nothing behind.

use std::process::Command;

use csivol_tests::loops::LoopGuard;
use csivol_tests::{TestDir, bin_path, run_to_exit};
use serde_json::Value;

use super::shapes::SHAPES;
use super::support::{Hostpath, WAIT};

/// Runs the check on `hp` as plugin `hp`; its exit status and JSON.
fn check(dir: &TestDir, hp: &Hostpath, extra: &[&str]) -> (bool, Value, String) {
    let mut cmd = Command::new(bin_path("csivol-agent"));
    cmd.args([
        "check".to_owned(),
        format!("--plugin=hp=unix://{}", hp.socket.display()),
        format!("--data-dir={}", dir.join("agent").display()),
        "-o".to_owned(),
        "json".to_owned(),
    ])
    .args(extra)
    .env("RUST_LOG", "warn");
    let (status, output) = run_to_exit("csivol-agent check", cmd, WAIT);
    // stdout holds the JSON object, stderr (interleaved in `output`) the logs.
    let start = output
        .find("{\n")
        .unwrap_or_else(|| panic!("no JSON in:\n{output}"));
    let end = output.rfind("\n}").expect("the JSON object's end") + 2;
    let json: Value =
        serde_json::from_str(&output[start..end]).unwrap_or_else(|e| panic!("{e}: {output}"));
    (status.success(), json, output)
}

fn leaves_nothing(dir: &TestDir, json: &Value, hp: &Hostpath) {
    assert!(dir.mounts().is_empty(), "{:?}", dir.mounts());
    let agent = std::fs::read_dir(dir.join("agent")).unwrap().count();
    assert_eq!(agent, 0, "the check's directory is removed");
    let deleted = hp.count("DeleteVolume", "OK");
    assert_eq!(deleted, 2, "the scratch volume deleted (twice): {json:#}");
}

#[test]
fn the_check_tells_each_plugin_shape_and_fails_the_broken_one() {
    for (i, shape) in SHAPES.iter().enumerate() {
        let dir = TestDir::new(&format!("check-shape-{}", i + 1));
        let _loops = LoopGuard::new(dir.path());
        let hp = Hostpath::start(&dir, "n1", shape.plugin_args);
        let block = if shape.block { &["--block"][..] } else { &[] };
        let (ok, json, output) = check(&dir, &hp, block);
        assert_eq!(ok, shape.works(), "{}: {output}", shape.name);
        assert_eq!(json["ok"], shape.works(), "{}: {json:#}", shape.name);
        assert_eq!(
            json["shape"]["staging"].as_str(),
            shape.staged_as,
            "{}: {json:#}",
            shape.name
        );
        assert_eq!(
            json["shape"]["target"], shape.published_as,
            "{}: {json:#}",
            shape.name
        );
        assert_eq!(json["node_info"]["node_id"], "csi-n1");
        // Every call of the round trip made twice, with its time.
        let calls = json["calls"].as_array().unwrap();
        let again = |rpc: &str| {
            calls
                .iter()
                .filter(|c| c["rpc"] == rpc && c["purpose"] == "again")
                .count()
        };
        for rpc in [
            "CreateVolume",
            "ControllerPublishVolume",
            "NodePublishVolume",
            "NodeUnpublishVolume",
            "DeleteVolume",
        ] {
            assert_eq!(again(rpc), 1, "{}: {rpc} made again: {json:#}", shape.name);
        }
        assert!(calls.iter().all(|c| c["ms"].is_u64()));
        let departures = json["departures"].as_array().unwrap();
        if shape.works() {
            assert!(departures.is_empty(), "{}: {json:#}", shape.name);
            assert_eq!(json["ready"]["ok"], true, "{json:#}");
            assert_eq!(json["data"]["ok"], true, "{json:#}");
        } else {
            assert_eq!(departures[0]["severity"], "hurts", "{json:#}");
            let what = departures[0]["what"].as_str().unwrap();
            assert!(what.contains("fails the readiness check"), "{what}");
        }
        leaves_nothing(&dir, &json, &hp);
        hp.assert_no_lifecycle_violation();
    }
}

#[test]
fn a_plugin_that_fails_the_round_trip_is_taken_down_and_named() {
    let dir = TestDir::new("check-broken");
    let hp = Hostpath::start(&dir, "n1", &["--fail=NodePublishVolume=INTERNAL"]);
    let (ok, json, output) = check(&dir, &hp, &[]);
    assert!(!ok, "{output}");
    let what = json["departures"][0]["what"].as_str().unwrap();
    assert!(
        what.starts_with("NodePublishVolume failed with INTERNAL")
            && what.contains("the round trip stopped there"),
        "{json:#}"
    );
    // What came up before the failure is taken down again.
    assert_eq!(hp.count("NodeUnstageVolume", "OK"), 2, "{json:#}");
    assert_eq!(hp.count("ControllerUnpublishVolume", "OK"), 2, "{json:#}");
    leaves_nothing(&dir, &json, &hp);
    // And the text says so for a person.
    let mut cmd = Command::new(bin_path("csivol-agent"));
    cmd.args([
        "check".to_owned(),
        format!("--plugin=hp=unix://{}", hp.socket.display()),
        format!("--data-dir={}", dir.join("agent").display()),
    ]);
    let (status, text) = run_to_exit("csivol-agent check", cmd, WAIT);
    assert!(!status.success());
    assert!(
        text.contains("HURTS csivol: NodePublishVolume failed with INTERNAL"),
        "{text}"
    );
    assert!(
        text.contains("csivol cannot use this plugin as it is"),
        "{text}"
    );
}

/// Where the plugin has VOLUME_MOUNT_GROUP, the check mounts the scratch volume with a
/// group and says whether a process of that group alone could make a file through it;
/// where it has not, it says the group is not offered.
#[test]
fn the_check_says_whether_the_plugin_honours_volume_mount_group() {
    use std::os::unix::fs::PermissionsExt;
    for (args, offered) in [
        (&[][..], true),
        (&["--disable", "volume-mount-group"][..], false),
    ] {
        let dir = TestDir::new("check-mount-group");
        // The test's temp dir is 0700: the group's process must pass through it to the
        // target, as it passes through a real agent's data dir.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        let hp = Hostpath::start(&dir, "n1", args);
        let (ok, json, output) = check(&dir, &hp, &["--mount-group", "4321"]);
        assert!(ok, "{output}");
        if offered {
            assert_eq!(json["mount_group"]["ok"], true, "{json:#}");
        } else {
            assert!(json["mount_group"].is_null(), "{json:#}");
        }
        let (_, _, text) = {
            let mut cmd = Command::new(bin_path("csivol-agent"));
            cmd.args([
                "check".to_owned(),
                format!("--plugin=hp=unix://{}", hp.socket.display()),
                format!("--data-dir={}", dir.join("agent").display()),
                "--mount-group=4321".to_owned(),
            ])
            .env("RUST_LOG", "warn");
            let (status, output) = run_to_exit("csivol-agent check", cmd, WAIT);
            (status.success(), Value::Null, output)
        };
        let said = if offered {
            "mount group:     passed"
        } else {
            "mount group:     not offered"
        };
        assert!(text.contains(said), "{text}");
        assert!(dir.mounts().is_empty(), "{:?}", dir.mounts());
    }
}
