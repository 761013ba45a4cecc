//! Per-job volumes through the CLI, with real processes and real bind mounts: made from a
//! snapshot, a clone or a spec in the topology of the job's node, claimed, and deleted
//! through the plugin after the job; a lapsed lease deletes them too, a blocked one is
//! never deleted until it is unblocked, a failed job may keep its volume for a while, and a
//! retried request makes one volume, and two jobs of one alloc never share one.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use csivol_tests::{bin_path, wait_for};
use serde_json::{Value, json};

use crate::cluster::{Cluster, NodeOpts, Out, PLUGIN, mounted};
use crate::snapshots::{claim, create, release};

const WAIT: Duration = Duration::from_secs(60);

/// A `volume create` spec of a small single-node-writer volume, written into the cluster's
/// dir; its path.
fn spec(c: &Cluster) -> PathBuf {
    let path = c.dir.join("job-spec.toml");
    std::fs::write(
        &path,
        format!(
            "name = \"job\"\nplugin = \"{PLUGIN}\"\naccess_mode = \"single-node-writer\"\n\
             attachment = \"file-system\"\ncapacity_bytes = 1048576\n"
        ),
    )
    .unwrap();
    path
}

/// The plugin's own volume ids, as `plugin volumes` lists them (ListVolumes).
fn plugin_volumes(c: &Cluster) -> BTreeSet<String> {
    let l = c
        .csivol(&["plugin", "volumes", PLUGIN, "-o", "json"])
        .ok()
        .json();
    l["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["external_id"].as_str().unwrap().to_owned())
        .collect()
}

fn volume(c: &Cluster, name: &str) -> Option<Value> {
    let out = c.csivol(&["volume", "show", name, "-o", "json"]);
    (out.code == 0).then(|| out.json())
}

fn events(c: &Cluster, volume: &str) -> Vec<Value> {
    c.csivol(&["events", "--volume", volume, "-o", "json"])
        .ok()
        .json()
        .as_array()
        .unwrap()
        .clone()
}

fn kinds(c: &Cluster, volume: &str) -> Vec<String> {
    events(c, volume)
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect()
}

/// The volumes the reference plugin's storage holds: its backend's own records, one file
/// per volume id (what ListVolumes answers from).
fn storage_volumes(c: &Cluster) -> BTreeSet<String> {
    std::fs::read_dir(c.dir.join("backend/volumes"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// Waits until volume `name` is gone from csivol, and its external id `id` from the
/// plugin's storage and from its last listing (DeleteVolume was called and succeeded).
fn gone(c: &Cluster, name: &str, id: &str) {
    wait_for(&format!("volume {name} to be deleted"), WAIT, || {
        let stored = storage_volumes(c).iter().any(|f| f.starts_with(id));
        (volume(c, name).is_none() && !stored && !plugin_volumes(c).contains(id)).then_some(())
    });
    let deleted = c.nodes.iter().flat_map(|n| n.plugin_calls()).any(|call| {
        call["rpc"] == "DeleteVolume" && call["volume_id"] == id && call["code"] == "OK"
    });
    assert!(deleted, "the plugin served DeleteVolume for {id}");
}

fn claim_fresh(c: &Cluster, fresh: &str, alloc: &str, extra: &[&str]) -> Out {
    let mut args = vec![
        "claim", "--fresh", fresh, "--node", "node-1", "--alloc", alloc,
    ];
    args.extend_from_slice(extra);
    c.csivol(&args)
}

#[test]
fn a_job_from_a_snapshot_sees_its_data_in_its_own_topology_and_the_volume_is_deleted_after() {
    let opts = NodeOpts {
        plugin_args: vec!["--topology".into(), "zone=a".into()],
        ..NodeOpts::default()
    };
    let c = Cluster::start("fresh-snapshot", "30s", vec![opts]);
    create(&c, "golden", &[]).ok();
    let t = claim(&c, "golden", "seed");
    std::fs::write(t.join("fixture.txt"), "golden data").unwrap();
    let snap = c.csivol(&[
        "snapshot",
        "create",
        "golden",
        "--name",
        "golden-1",
        "--wait",
        "--timeout",
        "60s",
    ]);
    snap.ok();
    release(&c, "golden", "seed");
    let before = storage_volumes(&c);

    // The job reads the snapshot's data, writes its own, and records what it was given.
    let seen = c.dir.join("seen.txt");
    let shown = c.dir.join("shown.json");
    let cloned = c.dir.join("cloned.txt");
    let copy = c.dir.join("copy.txt");
    let script = format!(
        "cat \"$CSIVOL_PATH_DB/fixture.txt\" > {seen} && echo mine > \"$CSIVOL_PATH_DB/mine.txt\" \
         && cat \"$CSIVOL_PATH_COPY/fixture.txt\" > {cloned} && echo \"$CSIVOL_VOLUME_COPY\" > {copy} \
         && {csivol} volume show \"$CSIVOL_VOLUME_DB\" -o json > {shown}",
        seen = seen.display(),
        cloned = cloned.display(),
        copy = copy.display(),
        shown = shown.display(),
        csivol = bin_path("csivol").display(),
    );
    let run = c.csivol(&[
        "run",
        "--node",
        "node-1",
        "--alloc",
        "job-1",
        "--fresh",
        "db=snapshot:golden-1",
        "--fresh",
        "copy=volume:golden",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    run.ok();
    assert_eq!(std::fs::read_to_string(&seen).unwrap(), "golden data");
    // A second per-job volume of the same job, a clone, under its own name.
    assert_eq!(std::fs::read_to_string(&cloned).unwrap(), "golden data");
    let copy_name = std::fs::read_to_string(&copy).unwrap().trim().to_owned();
    assert!(copy_name.starts_with("copy-"), "{copy_name}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&shown).unwrap()).unwrap();
    let name = v["name"].as_str().unwrap().to_owned();
    assert!(
        name.starts_with("db-"),
        "named after the job's name: {name}"
    );
    assert!(
        run.stderr.contains(&name),
        "the CLI says which volume: {run:?}"
    );
    assert_eq!(v["job"]["name"], "db", "{v}");
    assert_eq!(v["job"]["alloc"], "job-1", "{v}");
    // Made where the job runs: the node's segment required and preferred.
    assert_eq!(
        v["topology_request"],
        json!({"required": [{"zone": "a"}], "preferred": [{"zone": "a"}]}),
        "{v}"
    );
    assert_eq!(v["accessible_topology"], json!([{"zone": "a"}]), "{v}");
    let id = v["external_id"].as_str().unwrap().to_owned();
    assert!(
        !before.iter().any(|f| f.starts_with(&id)),
        "a volume of its own"
    );
    // Its CreateVolume name is csivol's own per creation, not the volume's or the alloc's.
    let created = c.nodes[0]
        .plugin_calls()
        .into_iter()
        .any(|call| call["rpc"] == "CreateVolume" && call["code"] == "OK");
    assert!(created, "the plugin served CreateVolume");

    gone(&c, &name, &id);
    wait_for("the clone to be deleted", WAIT, || {
        volume(&c, &copy_name).is_none().then_some(())
    });
    wait_for("the storage to hold what it held before", WAIT, || {
        (storage_volumes(&c) == before).then_some(())
    });
    let k = kinds(&c, &name);
    for kind in [
        "volume-creating",
        "volume-created",
        "claim-granted",
        "claim-released",
        "volume-deleting",
        "volume-deleted",
    ] {
        assert!(k.iter().any(|x| x == kind), "{kind} in {k:?}");
    }
    // The golden volume and its snapshot are untouched.
    assert!(volume(&c, "golden").is_some());
}

#[test]
fn claim_fresh_needs_a_lease_and_a_lapsed_lease_deletes_the_volume() {
    let c = Cluster::start("fresh-lease", "30s", vec![NodeOpts::default()]);
    let spec = spec(&c);
    let source = format!("scratch=spec:{}", spec.display());
    let before = storage_volumes(&c);

    let refused = claim_fresh(&c, &source, "job-1", &[]);
    assert_ne!(refused.code, 0, "{refused:?}");
    assert!(refused.stderr.contains("needs a lease"), "{refused:?}");
    assert!(
        refused.stderr.contains("--ttl"),
        "names the fix: {refused:?}"
    );
    assert_eq!(storage_volumes(&c), before, "nothing made");
    let listed = c.csivol(&["volume", "list", "-o", "json"]).ok().json();
    assert_eq!(
        listed.as_array().unwrap().len(),
        0,
        "nothing recorded: {listed}"
    );

    // A claimer killed after its claim: the lease runs out and the volume goes.
    let out = claim_fresh(
        &c,
        &source,
        "job-1",
        &["--ttl", "8s", "--wait", "--timeout", "60s", "-o", "json"],
    );
    let claimed = out.ok().json();
    assert_eq!(claimed["state"], "ready", "{claimed}");
    let name = claimed["volume"].as_str().unwrap().to_owned();
    assert!(name.starts_with("scratch-"), "{name}");
    let t = PathBuf::from(claimed["target_path"].as_str().unwrap());
    assert!(mounted(&t), "a real mount");
    let id = volume(&c, &name).unwrap()["external_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        storage_volumes(&c).iter().any(|f| f.starts_with(&id)),
        "the plugin's storage holds {id}: {:?}",
        storage_volumes(&c)
    );
    gone(&c, &name, &id);
    assert!(!mounted(&t));
    let k = kinds(&c, &name);
    assert!(k.iter().any(|x| x == "claim-expired"), "{k:?}");
    assert!(k.iter().any(|x| x == "volume-deleted"), "{k:?}");
    assert_eq!(storage_volumes(&c), before, "nothing leaked");
}

#[test]
fn a_retried_request_makes_one_volume_and_a_reused_alloc_gets_a_new_one() {
    let c = Cluster::start("fresh-retry", "30s", vec![NodeOpts::default()]);
    let spec = spec(&c);
    let source = format!("scratch=spec:{}", spec.display());
    let before = storage_volumes(&c);

    // The same request twice under one Idempotency-Key: the first answer, one volume.
    let req = json!({
        "name": "keyed",
        "source": {"spec": {"plugin": PLUGIN, "access_mode": "single-node-writer", "attachment": "file-system"}},
        "claim": {"alloc": "job-k", "node": "node-1", "mode": "write", "ttl_ms": 60000},
    });
    let (first, second) = keyed_twice(&c, &req);
    assert_eq!(first.0, 201, "{first:?}");
    assert_eq!(first, second, "answered with the first answer");

    // Another request of the same alloc and name while its claim is held (a CI matrix's
    // legs sharing one run id): refused, never the first job's volume, nothing made.
    let one = claim_fresh(&c, &source, "job-1", &["--ttl", "1m", "-o", "json"]);
    let again = claim_fresh(&c, &source, "job-1", &["--ttl", "1m"]);
    let name = one.ok().json()["volume"].as_str().unwrap().to_owned();
    assert_eq!(again.code, 4, "{again:?}");
    assert!(
        again.stderr.contains(&format!(
            "already holds per-job volume `scratch` (volume `{name}`)"
        )),
        "{again:?}"
    );

    let jobs: Vec<Value> = c
        .csivol(&["volume", "list", "-o", "json"])
        .ok()
        .json()
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(jobs.len(), 2, "one volume per request: {jobs:?}");
    assert!(jobs.iter().all(|v| v["job"].is_object()), "{jobs:?}");

    // Another alloc cannot claim a job's volume.
    let other = c.csivol(&["claim", &name, "--node", "node-1", "--alloc", "intruder"]);
    assert_ne!(other.code, 0, "{other:?}");
    assert!(other.stderr.contains("per-job volume"), "{other:?}");

    // Released, the alloc reused: a new volume, never the previous job's.
    release(&c, &name, "job-1");
    let reused = claim_fresh(&c, &source, "job-1", &["--ttl", "1m", "-o", "json"]);
    let new_name = reused.ok().json()["volume"].as_str().unwrap().to_owned();
    assert_ne!(new_name, name, "a reused alloc gets a volume of its own");
    release(&c, &new_name, "job-1");
    release(&c, volume_of_alloc(&c, "job-k").as_str(), "job-k");
    wait_for("every per-job volume to be deleted", WAIT, || {
        let l = c.csivol(&["volume", "list", "-o", "json"]).ok().json();
        (l.as_array().unwrap().is_empty() && storage_volumes(&c) == before).then_some(())
    });
}

/// The volume alloc `alloc` holds a claim on.
fn volume_of_alloc(c: &Cluster, alloc: &str) -> String {
    let claims = c.csivol(&["claim", "list", "-o", "json"]).ok().json();
    claims
        .as_array()
        .unwrap()
        .iter()
        .find(|cl| cl["alloc"] == alloc)
        .and_then(|cl| cl["volume"].as_str())
        .unwrap()
        .to_owned()
}

/// `POST /v1/fresh-claims` with `req`, twice under one Idempotency-Key: each answer's
/// status and body.
fn keyed_twice(c: &Cluster, req: &Value) -> ((u16, Value), (u16, Value)) {
    use csivol_client::once::Once;
    use csivol_client::{Body, Client, Method};
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = Client::builder(&c.url)
            .token(Some(c.token.clone()))
            .build()
            .unwrap();
        let once = Once::new("fresh-key-1");
        let mut answers = Vec::new();
        for _ in 0..2 {
            let raw = client
                .send_once(
                    Method::POST,
                    "/v1/fresh-claims",
                    Body::Json(req),
                    Some(Duration::from_secs(10)),
                    &once,
                )
                .await
                .unwrap();
            let body: Value = serde_json::from_slice(&raw.body).unwrap();
            answers.push((raw.status.as_u16(), body));
        }
        let second = answers.pop().unwrap();
        (answers.pop().unwrap(), second)
    })
}

#[test]
fn a_blocked_job_volume_is_deleted_only_after_its_unblock_and_controller_unpublish() {
    let mut c = Cluster::start(
        "fresh-blocked",
        "2s",
        vec![NodeOpts::default(), NodeOpts::default()],
    );
    let spec = spec(&c);
    let source = format!("scratch=spec:{}", spec.display());
    let out = c.csivol(&[
        "claim",
        "--fresh",
        &source,
        "--node",
        "node-2",
        "--alloc",
        "job-1",
        "--ttl",
        "10s",
        "--wait",
        "--timeout",
        "60s",
        "-o",
        "json",
    ]);
    let claimed = out.ok().json();
    let name = claimed["volume"].as_str().unwrap().to_owned();
    let id = volume(&c, &name).unwrap()["external_id"]
        .as_str()
        .unwrap()
        .to_owned();
    c.kill_agent(1);
    c.wait_node_status(1, "lost");
    // Well past the lease: a lost node's claim stays blocked, and its volume stays.
    let expires = humantime::parse_rfc3339(claimed["expires_at"].as_str().unwrap()).unwrap();
    wait_for("the lease to have run out long ago", WAIT, || {
        (SystemTime::now() > expires + Duration::from_secs(8)).then_some(())
    });
    let v = volume(&c, &name).expect("a blocked per-job volume is never deleted");
    assert_eq!(v["state"], "blocked", "{v}");
    assert!(!kinds(&c, &name).iter().any(|k| k == "volume-deleting"));
    let deleted = c
        .nodes
        .iter()
        .flat_map(|n| n.plugin_calls())
        .any(|call| call["rpc"] == "DeleteVolume" && call["volume_id"] == id);
    assert!(!deleted, "no DeleteVolume while blocked");

    c.csivol(&["unblock", &name, "--yes", "--reason", "node-2 lost power"])
        .ok();
    gone(&c, &name, &id);
    // Deleted only after ControllerUnpublish succeeded.
    let k = kinds(&c, &name);
    let detached = k
        .iter()
        .position(|x| x == "volume-detached")
        .expect("detached");
    let deleting = k
        .iter()
        .position(|x| x == "volume-deleting")
        .expect("deleting");
    assert!(detached < deleting, "{k:?}");
    let unpublished = c
        .nodes
        .iter()
        .flat_map(|n| n.plugin_calls())
        .any(|call| call["rpc"] == "ControllerUnpublishVolume" && call["code"] == "OK");
    assert!(
        unpublished,
        "the plugin's controller saw ControllerUnpublishVolume"
    );
}

#[test]
fn a_failed_job_keeps_its_volume_for_inspection_then_it_is_deleted() {
    let c = Cluster::start("fresh-keep", "30s", vec![NodeOpts::default()]);
    let spec = spec(&c);
    let source = format!("scratch=spec:{}", spec.display());
    let run = c.csivol(&[
        "run",
        "--node",
        "node-1",
        "--alloc",
        "job-1",
        "--fresh",
        &source,
        "--keep-on-failure",
        "6s",
        "--",
        "sh",
        "-c",
        "echo evidence > \"$CSIVOL_PATH_SCRATCH/log.txt\"; exit 3",
    ]);
    assert_eq!(run.code, 3, "the command's exit: {run:?}");
    assert!(run.stderr.contains("kept for"), "{run:?}");
    let listed = c.csivol(&["volume", "list", "-o", "json"]).ok().json();
    let v = listed.as_array().unwrap()[0].clone();
    let name = v["name"].as_str().unwrap().to_owned();
    assert!(v["job"]["kept_until"].is_string(), "{v}");
    let table = c.csivol(&["volume", "list"]).ok().stdout.clone();
    assert!(table.contains("kept until"), "marked in the list: {table}");
    let shown = c.csivol(&["volume", "show", &name]).ok().stdout.clone();
    assert!(shown.contains("per-job"), "{shown}");
    // The data is there to inspect: claimed again by the same alloc.
    let t = claim(&c, &name, "job-1");
    assert_eq!(
        std::fs::read_to_string(t.join("log.txt")).unwrap(),
        "evidence\n"
    );
    release(&c, &name, "job-1");
    let id = v["external_id"].as_str().unwrap().to_owned();
    gone(&c, &name, &id);
    let k = kinds(&c, &name);
    assert!(k.iter().any(|x| x == "volume-kept"), "{k:?}");
}

#[test]
fn a_dry_run_says_whether_the_plugin_can_make_the_volume_and_makes_nothing() {
    let opts = NodeOpts {
        plugin_args: vec!["--disable".into(), "clone-volume".into()],
        ..NodeOpts::default()
    };
    let c = Cluster::start("fresh-dry-run", "30s", vec![opts]);
    create(&c, "golden", &[]).ok();
    let spec = spec(&c);
    let before = storage_volumes(&c);

    let ok = claim_fresh(
        &c,
        &format!("scratch=spec:{}", spec.display()),
        "job-1",
        &["--ttl", "1m", "--dry-run"],
    );
    assert!(ok.ok().stdout.starts_with("accepted"), "{ok:?}");
    let clone = claim_fresh(
        &c,
        "copy=volume:golden",
        "job-1",
        &["--ttl", "1m", "--dry-run"],
    );
    assert_ne!(clone.code, 0, "{clone:?}");
    assert!(clone.stdout.starts_with("refused"), "{clone:?}");
    assert!(
        clone.stdout.contains("CLONE_VOLUME"),
        "names the capability: {clone:?}"
    );
    let elsewhere = c.csivol(&[
        "claim",
        "--fresh",
        "copy=snapshot:none",
        "--node",
        "node-1",
        "--alloc",
        "job-1",
        "--ttl",
        "1m",
        "--dry-run",
    ]);
    assert_ne!(elsewhere.code, 0, "{elsewhere:?}");
    assert!(
        elsewhere.stdout.contains("snapshot `none`"),
        "{elsewhere:?}"
    );

    assert_eq!(storage_volumes(&c), before, "nothing made");
    let listed = c.csivol(&["volume", "list", "-o", "json"]).ok().json();
    assert_eq!(listed.as_array().unwrap().len(), 1, "only golden: {listed}");
}

#[test]
fn a_failed_create_volume_fails_the_job_and_leaves_nothing() {
    let opts = NodeOpts {
        plugin_args: vec!["--fail=CreateVolume=INVALID_ARGUMENT:1".into()],
        ..NodeOpts::default()
    };
    let c = Cluster::start("fresh-create-fails", "30s", vec![opts]);
    let spec = spec(&c);
    let before = storage_volumes(&c);
    let run = c.csivol(&[
        "run",
        "--node",
        "node-1",
        "--alloc",
        "job-1",
        "--fresh",
        &format!("scratch=spec:{}", spec.display()),
        "--",
        "true",
    ]);
    assert_ne!(run.code, 0, "{run:?}");
    assert!(run.stderr.contains("CreateVolume"), "says why: {run:?}");
    wait_for("the failed per-job volume to be forgotten", WAIT, || {
        let l = c.csivol(&["volume", "list", "-o", "json"]).ok().json();
        l.as_array().unwrap().is_empty().then_some(())
    });
    assert_eq!(storage_volumes(&c), before, "nothing made");
}

/// A controller host paused while its CreateVolume runs: the creation goes to another host
/// and the job runs and ends on that host's answer. The paused host's answer comes late,
/// naming a volume its plugin made afterwards and nothing records: the server has it
/// deleted through the plugin, and the storage holds what it held before.
#[test]
fn a_late_create_volume_answer_has_the_volume_it_made_deleted() {
    let hold = csivol_tests::TestDir::new("late-create-hold");
    let go = hold.join("go");
    let held = NodeOpts {
        plugin_args: vec!["--hold".into(), format!("CreateVolume={}", go.display())],
        ..NodeOpts::default()
    };
    let node_only = NodeOpts {
        plugin_args: vec!["--disable".into(), "controller-service".into()],
        ..NodeOpts::default()
    };
    let mut c = Cluster::start(
        "fresh-late-create",
        "2s",
        vec![held, NodeOpts::default(), node_only],
    );
    // Node 1 is the only controller host when the creation is handed out.
    c.stop_agent(1);
    c.wait_node_status(1, "stopped");
    let spec = spec(&c);
    let before = storage_volumes(&c);

    let source = format!("scratch=spec:{}", spec.display());
    let claim = c.csivol(&[
        "claim", "--fresh", &source, "--node", "node-3", "--alloc", "job-1", "--ttl", "5m", "-o",
        "json",
    ]);
    let name = claim.ok().json()["volume"].as_str().unwrap().to_owned();
    let plugin_log = c.nodes[0].dir.join("plugin.log");
    wait_for("node 1's plugin to hold the CreateVolume", WAIT, || {
        std::fs::read_to_string(&plugin_log)
            .unwrap_or_default()
            .contains("holding the call")
            .then_some(())
    });

    // Node 1's agent stalls with the call in flight; node 2 comes up and takes it over.
    c.pause_agent(0, true);
    c.wait_node_status(0, "lost");
    c.start_agent(1);
    let id = wait_for(
        "the job's claim to be ready on node 2's answer",
        WAIT,
        || {
            let v = volume(&c, &name)?;
            (v["claims"][0]["state"] == "ready")
                .then(|| v["external_id"].as_str().map(str::to_owned))?
        },
    );
    release(&c, &name, "job-1");
    gone(&c, &name, &id);

    // Node 1 comes back; its plugin makes the volume it was asked for and answers late.
    c.pause_agent(0, false);
    c.wait_node_status(0, "ready");
    std::fs::write(&go, "").unwrap();
    let late = wait_for("the late answer's volume to be deleted", WAIT, || {
        events(&c, &name).into_iter().find_map(|e| {
            let m = e["message"].as_str()?;
            (e["kind"] == "volume-deleted" && m.contains("late CreateVolume answer"))
                .then(|| m.to_owned())
        })
    });
    let stray = events(&c, &name)
        .iter()
        .find_map(|e| {
            let m = e["message"].as_str()?;
            let rest =
                m.strip_prefix("a late CreateVolume answer from node node-1 made volume ")?;
            rest.split_whitespace().next().map(str::to_owned)
        })
        .unwrap_or_else(|| panic!("the deletion names the late answer: {late}"));
    assert_ne!(stray, id, "a volume of its own, not the one the job used");
    let deleted = c.nodes.iter().flat_map(|n| n.plugin_calls()).any(|call| {
        call["rpc"] == "DeleteVolume" && call["volume_id"] == stray && call["code"] == "OK"
    });
    assert!(deleted, "the plugin served DeleteVolume for {stray}");
    assert_eq!(storage_volumes(&c), before, "nothing leaked");
}
