//! Storage capacity end to end: controller hosts ask the real reference plugin GetCapacity
//! per segment of the plugin's nodes, `plugin show` lists the answers with their age, and
//! `volume create` is refused at once when a fresh answer says the volume cannot fit,
//! naming the limit and a segment that has room, and so is a per-job volume in its node's
//! segment, by its dry run too; against a plugin without GET_CAPACITY the
//! creation goes to the plugin as before, and `plugin show` says why there is nothing.

use std::time::Duration;

use csivol_tests::wait_for;
use serde_json::{Value, json};

use crate::cluster::{Cluster, NodeOpts};

/// The documented exit code of a conflict (capacity among them).
const EXIT_CONFLICT: i32 = 4;
const MIB: u64 = 1 << 20;

fn node(zone: &str, extra: &[String]) -> NodeOpts {
    let mut plugin_args = vec![format!("--topology=zone={zone}")];
    plugin_args.extend_from_slice(extra);
    NodeOpts {
        plugin_args,
        ..Default::default()
    }
}

/// The plugin's capacity samples once `cond` holds for them.
fn samples_when(c: &Cluster, what: &str, cond: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    wait_for(what, Duration::from_secs(60), || {
        let out = c.csivol(&["plugin", "show", "hostpath", "-o", "json"]);

        let p = out.ok().json();
        let samples = p["capacity"]["samples"].as_array().cloned()?;
        cond(&samples).then_some(samples)
    })
}

fn sample(samples: &[Value], segment: Value) -> Option<&Value> {
    samples.iter().find(|s| {
        s.get("segment").cloned().unwrap_or_else(|| json!({})) == segment
            && s.get("parameters").is_none()
    })
}

fn spec(c: &Cluster, name: &str, bytes: u64, required_zone: Option<&str>) -> String {
    let mut toml = format!(
        "name = \"{name}\"\nplugin = \"hostpath\"\naccess_mode = \"single-node-writer\"\n\
         attachment = \"file-system\"\ncapacity_bytes = {bytes}\n"
    );
    if let Some(z) = required_zone {
        toml.push_str(&format!(
            "\n[topology_request]\nrequired = [{{ zone = \"{z}\" }}]\n"
        ));
    }
    let path = c.dir.join(format!("{name}.toml"));
    std::fs::write(&path, toml).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn capacity_is_listed_and_a_volume_that_cannot_fit_is_refused_at_once() {
    // One 64 MiB pool; zone b's answers are held to 8 MiB, as a storage system whose
    // segments have pools of their own would give them.
    let extra = vec![
        format!("--capacity={}", 64 * MIB),
        format!("--segment-capacity=zone=b:{}", 8 * MIB),
    ];
    let c = Cluster::start(
        "capacity",
        "30s",
        vec![node("a", &extra), node("b", &extra)],
    );

    // Sampled per segment of the plugin's nodes, and for the plugin as a whole.
    let samples = samples_when(&c, "capacity samples of every segment", |s| {
        [json!({}), json!({"zone": "a"}), json!({"zone": "b"})]
            .into_iter()
            .all(|seg| sample(s, seg).is_some())
    });
    let whole = sample(&samples, json!({})).unwrap();
    assert_eq!(whole["available_bytes"], 64 * MIB, "{samples:?}");
    assert_eq!(whole["maximum_volume_size"], 64 * MIB, "{samples:?}");
    assert_eq!(whole["fresh"], true, "{samples:?}");
    let b = sample(&samples, json!({"zone": "b"})).unwrap();
    assert_eq!(b["maximum_volume_size"], 8 * MIB, "{samples:?}");
    let table = c.csivol(&["plugin", "show", "hostpath"]);
    let text = &table.ok().stdout;
    assert!(text.contains("capacity:"), "{table:?}");
    assert!(
        text.lines()
            .any(|l| l.contains("zone=b") && l.contains("8 MiB")),
        "{table:?}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("(all)") && l.contains("64 MiB")),
        "{table:?}"
    );

    // Too big for zone b, which it must be in: refused at once, naming the limit and zone
    // a, which has room. Nothing was recorded.
    let too_big = c.csivol(&["volume", "create", &spec(&c, "in-b", 16 * MIB, Some("b"))]);
    assert_eq!(too_big.code, EXIT_CONFLICT, "{too_big:?}");
    assert!(
        too_big
            .stderr
            .contains("reports a maximum volume size of 8388608 bytes (8 MiB) in segment zone=b"),
        "{too_big:?}"
    );
    assert!(
        too_big.stderr.contains("segment zone=a has room"),
        "{too_big:?}"
    );
    assert_eq!(c.csivol(&["volume", "show", "in-b"]).code, 3);

    // Too big for the whole pool: refused, no segment has room.
    let huge = c.csivol(&["volume", "create", &spec(&c, "huge", 128 * MIB, None)]);
    assert_eq!(huge.code, EXIT_CONFLICT, "{huge:?}");
    assert!(
        huge.stderr
            .contains("of 67108864 bytes (64 MiB), 134217728 bytes (128 MiB) asked for"),
        "{huge:?}"
    );
    assert!(
        huge.stderr.contains("no sampled segment has room"),
        "{huge:?}"
    );

    // A per-job volume is made in its node's segment, so zone b's answer judges one
    // claimed on node-2: the dry run and the claim say it cannot fit and make nothing,
    // and the same on node-1, in zone a, can be made.
    let job = format!("scratch=spec:{}", spec(&c, "job", 16 * MIB, None));
    let fresh = |node: &str, extra: &[&str]| {
        let mut args = vec![
            "claim", "--fresh", &job, "--node", node, "--alloc", "job-1", "--ttl", "1m",
        ];
        args.extend_from_slice(extra);
        c.csivol(&args)
    };
    let dry = fresh("node-2", &["--dry-run"]);
    assert_eq!(dry.code, EXIT_CONFLICT, "{dry:?}");
    assert!(dry.stdout.starts_with("refused"), "{dry:?}");
    assert!(
        dry.stdout
            .contains("reports a maximum volume size of 8388608 bytes (8 MiB) in segment zone=b"),
        "{dry:?}"
    );
    let claimed = fresh("node-2", &[]);
    assert_eq!(claimed.code, EXIT_CONFLICT, "{claimed:?}");
    assert!(
        claimed.stderr.contains("volume `scratch` does not fit"),
        "{claimed:?}"
    );
    assert!(
        claimed
            .stderr
            .contains("segment zone=a has room: claim it on a node there rather than on `node-2`"),
        "{claimed:?}"
    );
    let listed = c.csivol(&["volume", "list", "-o", "json"]).ok().json();
    assert_eq!(listed, json!([]), "nothing made");
    let elsewhere = fresh("node-1", &["--dry-run"]);
    assert!(
        elsewhere.ok().stdout.starts_with("accepted"),
        "{elsewhere:?}"
    );

    // What fits is created, and the samples taken after it show the pool less the volume.
    let fits = c.csivol(&[
        "volume",
        "create",
        &spec(&c, "in-a", 40 * MIB, Some("a")),
        "--wait",
    ]);
    fits.ok();
    samples_when(&c, "the pool sampled again after CreateVolume", |s| {
        sample(s, json!({})).is_some_and(|w| w["available_bytes"] == 24 * MIB)
    });
    // What no longer fits after it is refused by the new figure.
    let after = c.csivol(&["volume", "create", &spec(&c, "second", 32 * MIB, None)]);
    assert_eq!(after.code, EXIT_CONFLICT, "{after:?}");
    assert!(
        after.stderr.contains("25165824 bytes (24 MiB)"),
        "{after:?}"
    );
}

#[test]
fn without_get_capacity_a_creation_goes_to_the_plugin_and_plugin_show_says_so() {
    let extra = vec![
        format!("--capacity={}", 16 * MIB),
        "--disable=get-capacity".to_owned(),
    ];
    let c = Cluster::start("capacity-none", "30s", vec![node("a", &extra)]);
    let shown = c.csivol(&["plugin", "show", "hostpath", "-o", "json"]);
    assert_eq!(
        shown.ok().json()["capacity"],
        json!({"reported": false, "samples": []})
    );
    let table = c.csivol(&["plugin", "show", "hostpath"]);
    assert!(
        table
            .ok()
            .stdout
            .contains("the plugin does not report capacity"),
        "{table:?}"
    );
    // Not refused at once: CreateVolume is asked, and the plugin refuses it itself.
    let create = c.csivol(&["volume", "create", &spec(&c, "big", 32 * MIB, None)]);
    assert_eq!(create.code, 0, "{create:?}");
    let rpcs = || -> Vec<String> {
        c.nodes[0]
            .plugin_calls()
            .iter()
            .filter_map(|call| call["rpc"].as_str().map(str::to_owned))
            .collect()
    };
    wait_for("CreateVolume to be asked", Duration::from_secs(60), || {
        rpcs().iter().any(|m| m == "CreateVolume").then_some(())
    });
    assert!(!rpcs().iter().any(|m| m == "GetCapacity"), "{:?}", rpcs());
}
