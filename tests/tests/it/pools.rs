//! Pools of warm caches through the CLI, with real agents, the reference plugin and real
//! bind mounts: volumes labelled in their spec and with `volume label`, a pool of them, and
//! `csivol run --pool` choosing members by cache key; only a job that succeeded records its
//! key; a pool with every member taken is refused like a busy volume.

use std::time::Duration;

use csivol_tests::{Proc, wait_for};
use serde_json::Value;

use crate::cluster::{Cluster, NodeOpts, Out, PLUGIN, mounted};

const WAIT: Duration = Duration::from_secs(60);

fn labelled_volume(c: &Cluster, name: &str, labels: &str) {
    c.create_volume_spec(
        name,
        &format!(
            "name = \"{name}\"\nplugin = \"{PLUGIN}\"\naccess_mode = \"single-node-writer\"\n\
             attachment = \"file-system\"\ncapacity_bytes = 1048576\nlabels = {labels}\n"
        ),
    );
}

/// `csivol run --pool cache=cache --cache-key KEY [--restore-key R] -- sh -c SCRIPT`.
fn job(c: &Cluster, alloc: &str, key: &str, restore: Option<&str>, script: &str) -> Out {
    let mut args = vec![
        "run",
        "--pool",
        "cache=cache",
        "--cache-key",
        key,
        "--node",
        "node-1",
        "--alloc",
        alloc,
    ];
    if let Some(r) = restore {
        args.extend(["--restore-key", r]);
    }
    args.extend(["--", "sh", "-c", script]);
    c.csivol(&args)
}

fn pool(c: &Cluster) -> Value {
    c.csivol(&["pool", "show", "cache", "-o", "json"])
        .ok()
        .json()
}

fn key_of(c: &Cluster, volume: &str) -> Value {
    let p = pool(c);
    let m = p["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["volume"] == volume)
        .unwrap_or_else(|| panic!("{volume} in {p}"))
        .clone();
    m.get("cache_key").cloned().unwrap_or(Value::Null)
}

#[test]
fn jobs_get_the_warmest_member_of_a_pool_and_only_a_successful_one_records_its_key() {
    let c = Cluster::start("pools", "10s", vec![NodeOpts::default()]);
    labelled_volume(&c, "c1", "{ pool = \"cache\" }");
    labelled_volume(&c, "c2", "{ pool = \"cache\", tier = \"ssd\" }");
    labelled_volume(&c, "c3", "{}");
    let v = c
        .csivol(&["volume", "label", "c3", "pool=cache", "-o", "json"])
        .ok()
        .json();
    assert_eq!(v["labels"]["pool"], "cache", "{v}");
    let out = c.csivol(&["pool", "create", "cache", "--selector", "pool=cache"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains("created pool cache with 3 member(s)"),
        "{out:?}"
    );
    // A pool that would share a member is refused, naming both.
    let out = c.csivol(&["pool", "create", "ssd", "--selector", "tier=ssd"]);
    assert_eq!(out.code, 4, "{out:?}");
    assert!(
        out.stderr
            .contains("takes volume `c2`, a member of pool `cache`"),
        "{out:?}"
    );

    // A cold member first; the job sees its path and its name; its key is recorded.
    let out = job(
        &c,
        "j1",
        "main",
        None,
        r#"echo "$CSIVOL_VOLUME_CACHE" > "$CSIVOL_PATH_CACHE/built-by""#,
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains("pool cache: member c1 (cold)"),
        "{out:?}"
    );
    assert_eq!(key_of(&c, "c1"), "main");
    // The same key gets the same member, with what the last job left there.
    let out = job(
        &c,
        "j2",
        "main",
        None,
        r#"cat "$CSIVOL_PATH_CACHE/built-by""#,
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains("member c1 (warm: same key `main`)"),
        "{out:?}"
    );
    assert_eq!(out.stdout.trim(), "c1", "{out:?}");
    // A failed job takes the restore key's member and leaves its key as it was.
    let out = job(&c, "j3", "feature-x", Some("main"), "exit 3");
    assert_eq!(out.code, 3, "{out:?}");
    assert!(
        out.stderr
            .contains("member c1 (warm: prefix `main` (its key `main`))"),
        "{out:?}"
    );
    assert_eq!(key_of(&c, "c1"), "main");
    // So does a job stopped by a signal, even if its command then exits 0.
    let out = job(
        &c,
        "j4",
        "feature-y",
        Some("main"),
        "trap 'exit 0' TERM; kill -TERM $PPID; sleep 30 & wait",
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("SIGTERM: passing it on"), "{out:?}");
    assert_eq!(key_of(&c, "c1"), "main");

    // Claims hold members; with all taken, a claim is refused as a busy volume is.
    let mut got = Vec::new();
    for alloc in ["h1", "h2", "h3"] {
        let out = c.csivol(&[
            "claim",
            "--pool",
            "cache",
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
        assert_eq!(out.code, 0, "{out:?}");
        let claim = out.json();
        assert_eq!(claim["pool"]["choice"], "cold", "{claim}");
        got.push(claim["volume"].as_str().unwrap().to_owned());
    }
    // Members without a key go first.
    assert_eq!(got, ["c2", "c3", "c1"]);
    let out = c.csivol(&[
        "claim", "--pool", "cache", "--node", "node-1", "--alloc", "h4",
    ]);
    assert_eq!(out.code, 4, "{out:?}");
    assert!(
        out.stderr
            .contains("no member of pool `cache` is free: of its 3 member(s), 3 held"),
        "{out:?}"
    );
    let busy = c.csivol(&["claim", "c1", "--node", "node-1", "--alloc", "h4"]);
    assert_eq!(busy.code, out.code, "{busy:?}");
    let p = pool(&c);
    assert_eq!(
        (p["recent_claims"].as_u64(), p["warm_hits"].as_u64()),
        (Some(7), Some(1)),
        "{p}"
    );

    // A release that says its job succeeded records the claim's key; without it, none.
    for (volume, alloc) in [("c2", "h1"), ("c3", "h2"), ("c1", "h3")] {
        let mut args = vec!["release", volume, "--alloc", alloc, "--wait"];
        if alloc == "h1" {
            args.push("--succeeded");
        }
        c.csivol(&args).ok();
    }
    assert_eq!(key_of(&c, "c1"), "main");
    assert_eq!(key_of(&c, "c2"), Value::Null, "h1 claimed without a key");
    wait_for("nothing mounted", WAIT, || {
        c.all_mounts().is_empty().then_some(())
    });
}

/// `csivol run --pool cache=cache --cache-key KEY --node NODE -- sh -c SCRIPT`.
fn job_on(c: &Cluster, node: &str, alloc: &str, key: &str, script: &str) -> Out {
    c.csivol(&[
        "run",
        "--pool",
        "cache=cache",
        "--cache-key",
        key,
        "--node",
        node,
        "--alloc",
        alloc,
        "--",
        "sh",
        "-c",
        script,
    ])
}

/// The node calls node `i`'s plugin answered OK for `rpc`: (came in, answered), in ms.
fn calls(c: &Cluster, i: usize, rpc: &str) -> Vec<(u64, u64)> {
    calls_for(c, i, rpc, None)
}

/// [`calls`] for the volume the plugin knows as `id` only, with one.
fn calls_for(c: &Cluster, i: usize, rpc: &str, id: Option<&str>) -> Vec<(u64, u64)> {
    c.nodes[i]
        .plugin_calls()
        .into_iter()
        .filter(|l| l["rpc"] == rpc && l["code"] == "OK")
        .filter(|l| id.is_none_or(|id| l["volume_id"] == id))
        .map(|l| {
            (
                l["started_ms"].as_u64().unwrap(),
                l["at_ms"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Pool `cache` of member `m1`, lingering 10 minutes.
fn lingering_pool(c: &Cluster) {
    labelled_volume(c, "m1", "{ pool = \"cache\" }");
    c.csivol(&[
        "pool",
        "create",
        "cache",
        "--selector",
        "pool=cache",
        "--linger",
        "10m",
    ])
    .ok();
}

/// A pool that lingers: its member stays staged on the node of the job that released it,
/// so that the next job there only publishes (the plugin sees no second NodeStageVolume);
/// a job on another node takes it at once, and only after the first node unstaged it and
/// the controller unpublished it there.
#[test]
fn a_lingering_pool_keeps_its_member_staged_for_the_next_job_on_the_node() {
    let mut c = Cluster::start(
        "pools-linger",
        "2s",
        vec![NodeOpts::default(), NodeOpts::default()],
    );
    lingering_pool(&c);
    let staging = c.nodes[0]
        .agent_dir()
        .join("staging")
        .join(PLUGIN)
        .join("m1");

    let out = job_on(
        &c,
        "node-1",
        "job-1",
        "k1",
        r#"echo one > "$CSIVOL_PATH_CACHE/one""#,
    );
    assert_eq!(out.code, 0, "{out:?}");
    // Released: the job's target is gone, the staging stays, shown with why.
    let v = wait_for("job-1's claim to be gone", WAIT, || {
        let v = c
            .csivol(&["volume", "show", "m1", "-o", "json"])
            .ok()
            .json();
        v["claims"].as_array().unwrap().is_empty().then_some(v)
    });
    assert_eq!(v["attachments"][0]["linger"]["after_alloc"], "job-1", "{v}");
    assert_eq!(v["attachments"][0]["state"], "attached", "{v}");
    assert!(mounted(&staging), "{} stays staged", staging.display());
    assert_eq!(c.nodes[0].mounts(), std::slice::from_ref(&staging));
    assert_eq!(calls(&c, 0, "NodeStageVolume").len(), 1);
    assert!(calls(&c, 0, "NodeUnstageVolume").is_empty());

    // The next job on node-1 gets the member staged: NodePublishVolume only.
    let out = job_on(
        &c,
        "node-1",
        "job-2",
        "k2",
        r#"cat "$CSIVOL_PATH_CACHE/one""#,
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout.trim(), "one", "{out:?}");
    assert!(
        out.stderr.contains("pool cache: member m1 (staged here)"),
        "{out:?}"
    );
    assert_eq!(calls(&c, 0, "NodeStageVolume").len(), 1, "no second stage");
    assert_eq!(calls(&c, 0, "NodePublishVolume").len(), 2);
    assert!(calls(&c, 0, "NodeUnstageVolume").is_empty());

    // A job on node-2: node-1 unstages first, then node-2 stages.
    let out = job_on(
        &c,
        "node-2",
        "job-3",
        "k3",
        r#"cat "$CSIVOL_PATH_CACHE/one""#,
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout.trim(), "one", "{out:?}");
    let unstaged = calls(&c, 0, "NodeUnstageVolume");
    let staged = calls(&c, 1, "NodeStageVolume");
    assert_eq!((unstaged.len(), staged.len()), (1, 1));
    assert!(
        staged[0].0 >= unstaged[0].1,
        "node-2 staged at {} before node-1's unstage ended at {}",
        staged[0].0,
        unstaged[0].1
    );
    assert!(!mounted(&staging));
    let events = c
        .csivol(&["events", "--volume", "m1", "-o", "json"])
        .ok()
        .json();
    assert!(
        events
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "staging-linger-ended"
                && e["message"]
                    .as_str()
                    .unwrap()
                    .contains("alloc job-3 on node node-2 needs the volume")),
        "{events}"
    );

    // node-2 is lost while it keeps the staging: the member is blocked as by a claim, and
    // `status` says why.
    c.kill_agent(1);
    c.wait_node_status(1, "lost");
    let blocked = c.csivol(&["status", "--blocked"]);
    assert_eq!(blocked.code, 6, "{blocked:?}");
    assert!(
        blocked
            .stdout
            .contains("staged on lost node node-2, lingering after alloc job-3's release"),
        "{blocked:?}"
    );
    let refused = c.csivol(&["claim", "m1", "--node", "node-1", "--alloc", "job-4"]);
    assert_eq!(refused.code, 6, "{refused:?}");
    assert!(refused.stderr.contains("csivol unblock m1"), "{refused:?}");
    c.csivol(&["unblock", "m1", "--yes", "--reason", "node-2 is gone"])
        .ok();
    let out = job_on(
        &c,
        "node-1",
        "job-4",
        "k4",
        r#"cat "$CSIVOL_PATH_CACHE/one""#,
    );
    assert_eq!(out.code, 0, "{out:?}");

    // node-2 comes back and cleans up; deleting the pool ends node-1's linger: nothing is
    // left mounted.
    c.start_agent(1);
    c.csivol(&["pool", "delete", "cache"]).ok();
    wait_for("nothing mounted", WAIT, || {
        c.all_mounts().is_empty().then_some(())
    });
}

/// The plugin's external id of `volume`, as its call log names it.
fn external_id(c: &Cluster, volume: &str) -> String {
    let v = c
        .csivol(&["volume", "show", volume, "-o", "json"])
        .ok()
        .json();
    v["volume"]["external_id"]
        .as_str()
        .or_else(|| v["external_id"].as_str())
        .unwrap_or_else(|| panic!("no external id in {v}"))
        .to_owned()
}

/// A node whose plugin takes one volume keeps a pool's member staged after its job: a claim
/// of another volume there is not refused for the slot the staging holds. The staging is
/// taken down (NodeUnstageVolume, then ControllerUnpublishVolume) before the other volume is
/// published to the node, so the plugin never has two.
#[test]
fn a_lingering_staging_gives_its_slot_up_to_another_volumes_claim() {
    let opts = NodeOpts {
        plugin_args: vec!["--max-volumes-per-node=1".into()],
        ..Default::default()
    };
    let c = Cluster::start("pools-linger-slots", "30s", vec![opts]);
    lingering_pool(&c);
    labelled_volume(&c, "x", "{ team = \"other\" }");
    let out = job_on(&c, "node-1", "job-1", "k1", "true");
    assert_eq!(out.code, 0, "{out:?}");
    wait_for("m1 kept staged after job-1", WAIT, || {
        let v = c
            .csivol(&["volume", "show", "m1", "-o", "json"])
            .ok()
            .json();
        (v["claims"].as_array().unwrap().is_empty() && v["attachments"][0]["linger"].is_object())
            .then_some(())
    });
    let node = c
        .csivol(&["node", "show", "node-1", "-o", "json"])
        .ok()
        .json();
    let p = &node["plugins"][0];
    assert_eq!(
        (&p["used"], &p["max_volumes"], &p["lingering"]),
        (&1.into(), &1.into(), &1.into()),
        "{node}"
    );
    let list = c.csivol(&["node", "list"]).ok().stdout.clone();
    assert!(list.contains("1/1 (1 lingering)"), "{list}");

    let out = c.csivol(&[
        "claim",
        "x",
        "--node",
        "node-1",
        "--alloc",
        "job-2",
        "--wait",
        "--timeout",
        "60s",
        "-o",
        "json",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.json()["state"], "ready", "{out:?}");

    let (m1, x) = (external_id(&c, "m1"), external_id(&c, "x"));
    let unstaged = calls_for(&c, 0, "NodeUnstageVolume", Some(&m1));
    let unpublished = calls_for(&c, 0, "ControllerUnpublishVolume", Some(&m1));
    let published = calls_for(&c, 0, "ControllerPublishVolume", Some(&x));
    let staged = calls_for(&c, 0, "NodeStageVolume", Some(&x));
    assert_eq!(
        (
            unstaged.len(),
            unpublished.len(),
            published.len(),
            staged.len()
        ),
        (1, 1, 1, 1)
    );
    assert!(
        unpublished[0].0 >= unstaged[0].1 && published[0].0 >= unpublished[0].1,
        "m1 unstaged {unstaged:?}, unpublished {unpublished:?}; x published {published:?}"
    );
    assert!(
        !c.nodes[0]
            .plugin_calls()
            .iter()
            .any(|l| l["code"] == "RESOURCE_EXHAUSTED"),
        "the plugin's limit was passed"
    );
    let events = c
        .csivol(&["events", "--volume", "m1", "-o", "json"])
        .ok()
        .json();
    assert!(
        events.as_array().unwrap().iter().any(|e| e["kind"] == "staging-linger-ended"
            && e["message"]
                .as_str()
                .unwrap()
                .contains("ended for volume x's claim on node node-1 (alloc job-2), the node's slots are full")),
        "{events}"
    );
    c.csivol(&["release", "x", "--alloc", "job-2", "--wait"])
        .ok();
    wait_for("nothing mounted", WAIT, || {
        c.all_mounts().is_empty().then_some(())
    });
}

/// Two members, three jobs: the third waits in the pool's line (`run --pool --queue`),
/// `pool show` shows it there, and it gets the member the first release frees.
#[test]
fn a_job_that_finds_every_member_taken_waits_in_the_pools_line_with_queue() {
    let c = Cluster::start("pool-line", "10s", vec![NodeOpts::default()]);
    labelled_volume(&c, "q1", "{ pool = \"line\" }");
    labelled_volume(&c, "q2", "{ pool = \"line\" }");
    c.csivol(&["pool", "create", "line", "--selector", "pool=line"])
        .ok();
    let mut got = Vec::new();
    for alloc in ["a1", "a2"] {
        let out = c.csivol(&[
            "claim", "--pool", "line", "--node", "node-1", "--alloc", alloc, "--wait", "-o", "json",
        ]);
        assert_eq!(out.code, 0, "{out:?}");
        got.push(out.json()["volume"].as_str().unwrap().to_owned());
    }
    assert_eq!(got, ["q1", "q2"]);
    // Without --queue the third is refused; with it, it waits in line and says so.
    let out = c.csivol(&[
        "claim", "--pool", "line", "--node", "node-1", "--alloc", "a3",
    ]);
    assert_eq!(out.code, 4, "{out:?}");
    let log = c.dir.join("a3.log");
    let mut job = Proc::spawn(
        "csivol run --queue",
        c.command(
            Some(&c.token),
            &[
                "run",
                "--pool",
                "cache=line",
                "--queue",
                "--node",
                "node-1",
                "--alloc",
                "a3",
                "--ttl",
                "30s",
                "--timeout",
                "120s",
                "--",
                "sh",
                "-c",
                r#"echo "got $CSIVOL_VOLUME_CACHE at $CSIVOL_PATH_CACHE""#,
            ],
        ),
        &log,
    );
    let line = wait_for("a3 in the pool's line", WAIT, || {
        let p = c
            .csivol(&["pool", "show", "line", "-o", "json"])
            .ok()
            .json();
        (p["line"][0]["alloc"] == "a3").then_some(p)
    });
    assert_eq!(
        (&line["line"][0]["node"], &line["line"][0]["mode"]),
        (&Value::from("node-1"), &Value::from("write")),
        "{line}"
    );
    let table = c.csivol(&["pool", "show", "line"]).ok().stdout.clone();
    assert!(table.contains("line:       1 waiting"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("1") && l.contains("a3") && l.contains("node-1")),
        "{table}"
    );
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("alloc a3 on node node-1 waits in pool line's line (write): number 1"),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );

    // a2 releases q2: the job in line gets it, runs, and releases it.
    c.csivol(&["release", "q2", "--alloc", "a2", "--wait"]).ok();
    let status = wait_for("the queued job to finish", WAIT, || job.exited());
    let printed = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{printed}");
    assert!(printed.contains("got q2 at /"), "{printed}");
    let p = c
        .csivol(&["pool", "show", "line", "-o", "json"])
        .ok()
        .json();
    assert!(p.get("line").is_none(), "{p}");
    let chosen = c
        .csivol(&["events", "--volume", "q2", "-o", "json"])
        .ok()
        .json();
    assert!(
        chosen
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "pool-member-chosen"
                && e["alloc"] == "a3"
                && e["message"]
                    .as_str()
                    .unwrap()
                    .contains("from the line after waiting")),
        "{chosen}"
    );

    // A claim still in line leaves it with `release --pool`; one holding a member releases
    // it so.
    for (alloc, queued) in [("a4", false), ("a5", true)] {
        let out = c.csivol(&[
            "claim", "--pool", "line", "--node", "node-1", "--alloc", alloc, "--queue", "-o",
            "json",
        ]);
        assert_eq!(out.code, 0, "{out:?}");
        let claim = out.json();
        assert_eq!(claim["state"] == "queued", queued, "{alloc}: {claim}");
        assert_eq!(claim["volume"] == "", queued, "{alloc}: {claim}");
    }
    let out = c.csivol(&["release", "--pool", "line", "--alloc", "a5"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains("alloc a5 left pool line's line"),
        "{out:?}"
    );
    // A wait that times out in line says how to leave it and where to look.
    let waited = |alloc: &str, more: &[&str]| {
        let mut args = vec![
            "claim",
            "--pool",
            "line",
            "--node",
            "node-1",
            "--alloc",
            alloc,
            "--queue",
            "--wait",
            "--timeout",
            "1s",
        ];
        args.extend_from_slice(more);
        c.csivol(&args)
    };
    let out = waited("a6", &[]);
    assert_eq!(out.code, 5, "{out:?}");
    assert!(
        out.stderr.contains(
            "waiting for the claim of alloc a6 in pool line's line to be ready; the claim still \
             exists"
        ) && out.stderr.contains(
            "release it with `csivol release --pool line --alloc a6` (or claim with \
             --release-on-timeout), or wait longer with --timeout; `csivol pool show line` shows \
             its line"
        ),
        "{out:?}"
    );
    let out = waited("a7", &["--release-on-timeout"]);
    assert_eq!(out.code, 5, "{out:?}");
    assert!(
        out.stderr.contains(
            "claim again with a longer --timeout; `csivol pool show line` shows its line"
        ),
        "{out:?}"
    );
    let in_line = |c: &Cluster| {
        let p = c
            .csivol(&["pool", "show", "line", "-o", "json"])
            .ok()
            .json();
        let allocs: Vec<String> = p["line"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|w| w["alloc"].as_str().unwrap().to_owned())
            .collect();
        allocs
    };
    assert_eq!(in_line(&c), ["a6"], "a7 left the line at its timeout");
    c.csivol(&["release", "--pool", "line", "--alloc", "a6"])
        .ok();
    // Interrupted while its answer is held (off a terminal), a claim in line leaves it.
    let log = c.dir.join("a8.log");
    let mut claim = Proc::spawn(
        "csivol claim --pool --queue --wait",
        c.command(
            Some(&c.token),
            &[
                "claim",
                "--pool",
                "line",
                "--node",
                "node-1",
                "--alloc",
                "a8",
                "--queue",
                "--wait",
                "--timeout",
                "120s",
            ],
        ),
        &log,
    );
    wait_for("a8 in the pool's line", WAIT, || {
        (in_line(&c) == ["a8"]).then_some(())
    });
    let pid = rustix::process::Pid::from_raw(claim.pid() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let status = wait_for("csivol to exit", WAIT, || claim.exited());
    let printed = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(130), "{printed}");
    assert!(
        printed.contains("interrupted (SIGINT): released the claim of alloc a8 from pool line"),
        "{printed}"
    );
    assert!(in_line(&c).is_empty());
    for alloc in ["a4", "a1"] {
        c.csivol(&["release", "--pool", "line", "--alloc", alloc, "--wait"])
            .ok();
    }
    wait_for("nothing mounted", WAIT, || {
        c.all_mounts().is_empty().then_some(())
    });
}
