//! Volume modification through the CLI on real processes: `volume create` with mutable
//! parameters, `volume modify` sending only the keys that change (checked in the plugin's
//! record of the volume), INVALID_ARGUMENT shown as infeasible and not retried, an error
//! that may pass retried, a refused request withdrawn, and the refusals of a plugin
//! without MODIFY_VOLUME.

use std::collections::BTreeMap;
use std::time::Duration;

use csivol_tests::wait_for;
use serde_json::Value;

use crate::cluster::{Cluster, NodeOpts, Out, PLUGIN};

fn node_with(plugin_args: &[&str]) -> Vec<NodeOpts> {
    vec![NodeOpts {
        plugin_args: plugin_args.iter().map(|s| (*s).to_owned()).collect(),
        ..NodeOpts::default()
    }]
}

fn create_with_mutable(c: &Cluster, name: &str, mutable: &str) -> Out {
    let spec = c.dir.join(format!("{name}.toml"));
    std::fs::write(
        &spec,
        format!(
            "name = \"{name}\"\nplugin = \"{PLUGIN}\"\naccess_mode = \"single-node-writer\"\n\
             attachment = \"file-system\"\ncapacity_bytes = 1048576\n\n[mutable_parameters]\n{mutable}\n"
        ),
    )
    .unwrap();
    c.csivol(&[
        "volume",
        "create",
        spec.to_str().unwrap(),
        "--wait",
        "-o",
        "json",
    ])
}

fn modify(c: &Cluster, volume: &str, params: &[&str]) -> Out {
    let mut args = vec!["volume", "modify", volume];
    for p in params {
        args.extend(["--param", p]);
    }
    args.extend(["--wait", "--timeout", "60s", "-o", "json"]);
    c.csivol(&args)
}

fn show(c: &Cluster, volume: &str) -> Value {
    c.csivol(&["volume", "show", volume, "-o", "json"])
        .ok()
        .json()
}

fn map(v: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(v.clone()).unwrap_or_default()
}

fn pairs(p: &[(&str, &str)]) -> BTreeMap<String, String> {
    p.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// What the plugin's backend records for the volume: the storage system's truth.
fn recorded(c: &Cluster, external_id: &str) -> BTreeMap<String, String> {
    let path = c
        .dir
        .join("backend/volumes")
        .join(format!("{external_id}.json"));
    let v: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    map(&v["mutable_parameters"])
}

/// The ControllerModifyVolume calls node-1's plugin answered, by code.
fn modify_calls(c: &Cluster) -> Vec<String> {
    c.nodes[0]
        .plugin_calls()
        .iter()
        .filter(|l| l["rpc"] == "ControllerModifyVolume")
        .map(|l| l["code"].as_str().unwrap().to_owned())
        .collect()
}

/// Controller operations the server holds for any plugin (queued or in flight).
fn ops_held(c: &Cluster) -> f64 {
    let metrics = c.metrics();
    metrics
        .lines()
        .filter(|l| l.starts_with("csivol_controller_ops{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn stderr_error(out: &Out) -> Value {
    let last = out.stderr.lines().last().unwrap_or_default();
    serde_json::from_str::<Value>(last)
        .unwrap_or_else(|e| panic!("stderr is not JSON ({e}): {out:?}"))["error"]
        .clone()
}

#[test]
fn create_then_modify_only_what_changes() {
    let c = Cluster::start("modify", "10s", node_with(&[]));
    let out = create_with_mutable(&c, "db", "iops = \"100\"\ntier = \"standard\"");
    let v = out.ok().json();
    let id = v["external_id"].as_str().unwrap().to_owned();
    let created = pairs(&[("iops", "100"), ("tier", "standard")]);
    assert_eq!(map(&v["mutable_parameters"]), created);
    assert_eq!(recorded(&c, &id), created, "CreateVolume got them");
    let plugin = c
        .csivol(&["plugin", "show", PLUGIN, "-o", "json"])
        .ok()
        .json();
    assert_eq!(plugin["modify_volume"], true);

    // Claimed: the plugin modifies the volume in place.
    c.csivol(&[
        "claim",
        "db",
        "--node",
        "node-1",
        "--alloc",
        "a1",
        "--wait",
        "--timeout",
        "60s",
    ])
    .ok();
    let out = modify(&c, "db", &["iops=3000", "tier=standard"]);
    let v = out.ok().json();
    assert!(v.get("modification").is_none(), "done: {v}");
    let now = pairs(&[("iops", "3000"), ("tier", "standard")]);
    assert_eq!(map(&v["mutable_parameters"]), now);
    assert_eq!(recorded(&c, &id), now);
    assert_eq!(modify_calls(&c), ["OK"]);
    // The same values again change nothing and call nothing.
    let out = modify(&c, "db", &["iops=3000"]);
    assert_eq!(map(&out.ok().json()["mutable_parameters"]), now);
    assert_eq!(modify_calls(&c), ["OK"]);
    let table = c.csivol(&["volume", "show", "db"]).ok().stdout.clone();
    assert!(
        table.contains("mutable parameters:  iops=3000, tier=standard"),
        "{table}"
    );
    let events = c
        .csivol(&["events", "--volume", "db", "-o", "json"])
        .ok()
        .json();
    let kinds: Vec<_> = events
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    assert!(kinds.contains(&"volume-modifying") && kinds.contains(&"volume-modified"));
}

/// INVALID_ARGUMENT: infeasible, nothing changed, not retried; then withdrawn.
#[test]
fn an_infeasible_modification_is_shown_and_not_retried() {
    let c = Cluster::start("modify-infeasible", "10s", node_with(&[]));
    let id = create_with_mutable(&c, "db", "iops = \"100\"").ok().json()["external_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = modify(&c, "db", &["iops=200", "colour=red"]);
    assert_eq!(out.code, 1, "{out:?}");
    let err = stderr_error(&out);
    let message = err["message"].as_str().unwrap();
    assert!(
        message.contains("infeasible") && message.contains("changed nothing"),
        "{message}"
    );
    assert!(
        message.contains("`colour` is not a mutable parameter"),
        "{message}"
    );
    let v = show(&c, "db");
    assert_eq!(v["modification"]["state"], "infeasible", "{v}");
    assert_eq!(
        map(&v["modification"]["parameters"]),
        pairs(&[("colour", "red"), ("iops", "200")])
    );
    assert_eq!(map(&v["mutable_parameters"]), pairs(&[("iops", "100")]));
    assert_eq!(
        recorded(&c, &id),
        pairs(&[("iops", "100")]),
        "nothing changed"
    );
    // Not retried: the server holds no operation for it.
    assert_eq!(ops_held(&c), 0.0);
    assert_eq!(modify_calls(&c), ["INVALID_ARGUMENT"]);
    let status = c.csivol(&["status"]).ok().stdout.clone();
    assert!(
        status.contains("db: modification to colour=red, iops=200 is infeasible"),
        "{status}"
    );

    // Asking for what the volume has withdraws the refused request.
    let out = modify(&c, "db", &["iops=100"]);
    let v = out.ok().json();
    assert!(v.get("modification").is_none(), "{v}");
    assert_eq!(modify_calls(&c), ["INVALID_ARGUMENT"], "nothing to call");
}

/// An error that may pass is retried with backoff until the plugin applies it.
#[test]
fn a_modification_is_retried_through_errors_that_may_pass() {
    let c = Cluster::start(
        "modify-retry",
        "10s",
        node_with(&["--fail=ControllerModifyVolume=UNAVAILABLE:2"]),
    );
    let id = create_with_mutable(&c, "db", "tier = \"standard\"")
        .ok()
        .json()["external_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let v = modify(&c, "db", &["tier=premium"]).ok().json();
    assert_eq!(map(&v["mutable_parameters"]), pairs(&[("tier", "premium")]));
    assert_eq!(recorded(&c, &id)["tier"], "premium");
    assert_eq!(modify_calls(&c), ["UNAVAILABLE", "UNAVAILABLE", "OK"]);
}

/// A plugin without MODIFY_VOLUME: refused at once, before anything is recorded or sent.
#[test]
fn a_plugin_without_modify_volume_is_refused() {
    let c = Cluster::start(
        "modify-refused",
        "10s",
        node_with(&["--disable=modify-volume"]),
    );
    let out = create_with_mutable(&c, "db", "iops = \"100\"");
    assert_eq!(out.code, 2, "{out:?}");
    let err = stderr_error(&out);
    assert!(
        err["message"].as_str().unwrap().contains("MODIFY_VOLUME"),
        "{err}"
    );
    assert_eq!(
        c.csivol(&["volume", "show", "db"]).code,
        3,
        "nothing was recorded"
    );
    crate::e2e::create_volume(&c, "plain", "single-node-writer");
    let out = modify(&c, "plain", &["iops=3000"]);
    assert_eq!(out.code, 2, "{out:?}");
    let err = stderr_error(&out);
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("does not report MODIFY_VOLUME"),
        "{err}"
    );
    assert!(
        err["hint"].as_str().unwrap().contains("plugin show"),
        "{err}"
    );
    assert!(show(&c, "plain").get("modification").is_none());
    assert!(modify_calls(&c).is_empty());
    wait_for("nothing queued", Duration::from_secs(10), || {
        (ops_held(&c) == 0.0).then_some(())
    });
}
