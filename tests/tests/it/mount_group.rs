//! A non-root workload writes its volume: `csivol run --gid` through a real cluster, with
//! real bind mounts, a process with dropped privileges (uid and gid 1234, no
//! supplementary groups) writing into the target. Once with the plugin's
//! VOLUME_MOUNT_GROUP, once with csivol's own ownership change (the plugin started with
//! `--disable volume-mount-group`, the server's `ownership = "on-root-mismatch"`, or the
//! volume's own), with what the change did reported (a `recursive` one stopped by its
//! bound), the refusal where neither can apply the group, and the node's refusal of a
//! claim its volume's shared staging cannot take.

use std::os::unix::fs::PermissionsExt;

use crate::cluster::{Cluster, NodeOpts, Out, PLUGIN, run};
use crate::e2e::create_volume;

const GID: &str = "1234";

/// The job: as uid and gid 1234, with no other group, create a file in the volume.
fn job(c: &Cluster, extra: &[&str]) -> Out {
    let mut args = vec!["run", "scratch", "--node", "node-1", "--ttl", "1m"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&[
        "--",
        "setpriv",
        "--reuid",
        GID,
        "--regid",
        GID,
        "--clear-groups",
        "sh",
        "-c",
        "touch \"$CSIVOL_PATH/x\"",
    ]);
    run(c.command(Some(&c.token), &args))
}

/// The job as a CI runner that is not root starts it: `csivol run` itself runs as uid and
/// gid 1234 and asks for its caller's own group.
fn non_root_job(c: &Cluster, script: &str) -> Out {
    let cli = c.command(Some(&c.token), &[]);
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args(["--reuid", GID, "--regid", GID, "--clear-groups"])
        .arg(csivol_tests::bin_path("csivol"))
        .args([
            "run", "scratch", "--node", "node-1", "--ttl", "1m", "--", "sh", "-c",
        ])
        .arg(script)
        .env_clear()
        .stdin(std::process::Stdio::null());
    for (k, v) in cli.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    run(cmd)
}

/// The test's temp dir is 0700: the dropped-privilege process must pass through it to the
/// target, as it passes through a real agent's data dir (0711).
fn passable(c: &Cluster) {
    std::fs::set_permissions(c.dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
}

#[test]
fn with_the_plugins_volume_mount_group_a_non_root_job_writes_its_volume() {
    let c = Cluster::start("mount-group-plugin", "10s", vec![NodeOpts::default()]);
    passable(&c);
    create_volume(&c, "scratch", "single-node-writer");
    // Without a group the target's root is root's, and the job cannot write it.
    let out = job(&c, &[]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("Permission denied"), "{out:?}");
    let out = job(&c, &["--gid", GID]);
    assert_eq!(out.code, 0, "{out:?}");
    let events = c.csivol(&["events", "--volume", "scratch", "-o", "json"]);
    assert!(
        events.stdout.contains("with group 1234 (plugin)"),
        "{events:?}"
    );
    // A CI runner that is not root needs no flag: its own primary group is asked for.
    let out = non_root_job(&c, "touch \"$CSIVOL_PATH/y\"");
    assert_eq!(out.code, 0, "{out:?}");
    assert!(!out.stderr.contains("without group"), "{out:?}");
}

#[test]
fn with_csivols_ownership_change_a_non_root_job_writes_its_volume() {
    let opts = NodeOpts {
        plugin_args: vec!["--disable".into(), "volume-mount-group".into()],
        ..Default::default()
    };
    let mut c = Cluster::start_with_config("mount-group-ownership", "10s", vec![opts], |_| {
        format!(
            "[plugins.\"{PLUGIN}\"]\nownership = \"recursive\"\nownership_gids = [\"1000-1999\"]\n"
        )
    });
    passable(&c);
    create_volume(&c, "scratch", "single-node-writer");
    let out = job(&c, &["--gid", GID]);
    assert_eq!(out.code, 0, "{out:?}");
    let events = c.csivol(&["events", "--volume", "scratch", "-o", "json"]);
    assert!(
        events.stdout.contains("with group 1234 (recursive)"),
        "{events:?}"
    );
    // More entries than the agent's bound changes: the job (as root) fills the volume.
    let out = c.csivol(&[
        "run",
        "scratch",
        "--node",
        "node-1",
        "--ttl",
        "5m",
        "--",
        "sh",
        "-c",
        "mkdir \"$CSIVOL_PATH/many\" && cd \"$CSIVOL_PATH/many\" && seq 1 100001 | xargs touch",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    held_claim_keeps_its_record(&mut c);
    // A gid outside the operator's ranges is refused: a claimer cannot give a volume to
    // any group.
    let out = job(&c, &["--gid", "5"]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("ownership_gids"), "{out:?}");
}

/// When (unix ms) the agent recorded giving `alloc`'s target its group, if it did.
fn ownership_recorded(c: &Cluster, alloc: &str) -> Option<i64> {
    let db = rusqlite::Connection::open(c.nodes[0].agent_dir().join("agent.db")).unwrap();
    db.query_row(
        "SELECT at_ms FROM ownership WHERE volume = 'scratch' AND alloc = ?1",
        [alloc],
        |r| r.get(0),
    )
    .ok()
}

/// A held claim: `status` shows its group, and the agent's record of its ownership
/// change holds it to one change, through a republish after drift and a restart.
fn held_claim_keeps_its_record(c: &mut Cluster) {
    let out = c.csivol(&[
        "claim", "scratch", "--node", "node-1", "--alloc", "held", "--gid", GID, "--wait",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    // The claim's record says what the recursive change did: the bound stopped it.
    assert!(
        out.stdout.contains("ownership change")
            && out
                .stdout
                .contains("100000 entries given the group, then stopped at the agent's bound"),
        "{out:?}"
    );
    assert_eq!(
        ownership_change(c),
        serde_json::json!({"entries": 100000, "bounded": true})
    );
    let events = c.csivol(&["events", "--volume", "scratch", "-o", "json"]);
    assert!(
        events.stdout.contains("claim-ownership-bounded")
            && events.stdout.contains("first 100000 entries"),
        "{events:?}"
    );
    let status = c.csivol(&["status", "scratch"]);
    assert!(
        status.stdout.contains("GROUP") && status.stdout.contains("1234 (recursive)"),
        "{status:?}"
    );
    let done = ownership_recorded(c, "held").expect("recorded in agent.db");
    let target = c.nodes[0].agent_dir().join("targets/scratch/held");
    // Drift: the target unmounted behind the agent; it publishes again, and gives the
    // group no second time.
    let out = std::process::Command::new("umount")
        .arg(&target)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    csivol_tests::wait_for(
        "the target mounted again",
        std::time::Duration::from_secs(120),
        || (crate::cluster::mounted(&target) && claim_ready(c)).then_some(()),
    );
    assert_eq!(ownership_recorded(c, "held"), Some(done), "not done again");
    // A root whose group was changed behind csivol is given it again at the next publish.
    let before = ownership_recorded(c, "held");
    let out = std::process::Command::new("chgrp")
        .args(["0"])
        .arg(&target)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let out = std::process::Command::new("umount")
        .arg(&target)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    csivol_tests::wait_for(
        "the group given again",
        std::time::Duration::from_secs(120),
        || {
            use std::os::unix::fs::MetadataExt;
            let regiven = std::fs::metadata(&target).is_ok_and(|m| m.gid() == 1234);
            // The root gets the group first; the record is written once the recursive
            // change is through the entries below it (the claim stays `ready` meanwhile).
            let recorded = ownership_recorded(c, "held") > before;
            (crate::cluster::mounted(&target) && regiven && recorded && claim_ready(c))
                .then_some(())
        },
    );
    let done = ownership_recorded(c, "held").expect("recorded again");
    // Killed and started again, the agent keeps its record and does not do it again.
    c.kill_agent(0);
    c.start_agent(0);
    c.wait_node_status(0, "ready");
    csivol_tests::wait_for(
        "the claim ready again",
        std::time::Duration::from_secs(120),
        || (crate::cluster::mounted(&target) && claim_ready(c)).then_some(()),
    );
    assert_eq!(ownership_recorded(c, "held"), Some(done));
    // Reported again from agent.db, neither redone nor forgotten.
    assert_eq!(
        ownership_change(c),
        serde_json::json!({"entries": 100000, "bounded": true})
    );
    let out = c.csivol(&["release", "scratch", "--alloc", "held", "--wait"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        ownership_recorded(c, "held"),
        None,
        "gone with its publication"
    );
    let out = c.csivol(&["claim", "show", "scratch", "--alloc", "held"]);
    assert_eq!(out.code, 3, "{out:?}");
    assert!(
        out.stderr.contains("claim list --volume scratch"),
        "{out:?}"
    );
}

/// What `csivol claim show` shows of the held claim's ownership change (`-o json`).
fn ownership_change(c: &Cluster) -> serde_json::Value {
    let out = c.csivol(&["claim", "show", "scratch", "--alloc", "held", "-o", "json"]);
    assert_eq!(out.code, 0, "{out:?}");
    out.json()["mount"]["ownership_change"].clone()
}

fn claim_ready(c: &Cluster) -> bool {
    let out = c.csivol(&["claim", "list", "--volume", "scratch", "-o", "json"]);
    out.stdout.contains("\"ready\"")
}

#[test]
fn without_either_a_group_is_refused_with_the_reason() {
    let opts = NodeOpts {
        plugin_args: vec!["--disable".into(), "volume-mount-group".into()],
        ..Default::default()
    };
    // The operator allows gids but no ownership change for the plugin: only a volume
    // whose own spec allows it gets one.
    let c = Cluster::start_with_config("mount-group-never", "10s", vec![opts], |_| {
        format!("[plugins.\"{PLUGIN}\"]\nownership_gids = [\"1000-1999\"]\n")
    });
    passable(&c);
    create_volume(&c, "scratch", "single-node-writer");
    let out = job(&c, &["--gid", GID]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains("does not have VOLUME_MOUNT_GROUP")
            && out.stderr.contains("`never`")
            && out.stderr.contains("hint:"),
        "{out:?}"
    );
    // A non-root `run` that asked for nothing runs as it did before, and says why its
    // group was not applied.
    let out = non_root_job(&c, "test -d \"$CSIVOL_PATH\"");
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stderr
            .contains("mounted without group 1234, the caller's own")
            && out.stderr.contains("VOLUME_MOUNT_GROUP"),
        "{out:?}"
    );
    volume_of_its_own(&c);
}

/// A volume whose spec sets its own `ownership` gets csivol's ownership change although
/// its plugin's setting is `never`: the job writes it; `volume show` says so.
fn volume_of_its_own(c: &Cluster) {
    c.create_volume_spec(
        "own",
        &format!(
            "name = \"own\"\nplugin = \"{PLUGIN}\"\naccess_mode = \"single-node-writer\"\n\
             attachment = \"file-system\"\ncapacity_bytes = 1048576\n\
             ownership = \"on-root-mismatch\"\n"
        ),
    );
    let shown = c.csivol(&["volume", "show", "own"]);
    assert!(
        shown.stdout.contains("on-root-mismatch (the volume's own)"),
        "{shown:?}"
    );
    assert_eq!(
        c.csivol(&["volume", "show", "own", "-o", "json"]).json()["ownership"],
        "on-root-mismatch"
    );
    let out = run(c.command(
        Some(&c.token),
        &[
            "run",
            "own",
            "--node",
            "node-1",
            "--ttl",
            "1m",
            "--gid",
            GID,
            "--",
            "setpriv",
            "--reuid",
            GID,
            "--regid",
            GID,
            "--clear-groups",
            "sh",
            "-c",
            "touch \"$CSIVOL_PATH/x\"",
        ],
    ));
    assert_eq!(out.code, 0, "{out:?}");
    let events = c.csivol(&["events", "--volume", "own", "-o", "json"]);
    assert!(
        events.stdout.contains("with group 1234 (on-root-mismatch)"),
        "{events:?}"
    );
}

/// The staging is shared by a volume's claims on a node: a claim that asks for what the
/// staging was not made with is refused by the node with the reason, and the claim that
/// uses it stays ready. Reached here through a plugin that gained VOLUME_MOUNT_GROUP under
/// a claim whose group csivol applied itself: the server sends the next claim's group to
/// the plugin, which the staging made without a group cannot take.
#[test]
fn a_claim_the_shared_staging_cannot_take_is_refused_on_the_node_and_the_other_stays_ready() {
    let opts = NodeOpts {
        plugin_args: vec!["--disable".into(), "volume-mount-group".into()],
        ..Default::default()
    };
    let mut c = Cluster::start_with_config("mount-group-staging", "10s", vec![opts], |_| {
        format!(
            "[plugins.\"{PLUGIN}\"]\nownership = \"on-root-mismatch\"\nownership_gids = [\"1000-1999\"]\n"
        )
    });
    create_volume(&c, "scratch", "single-node-multi-writer");
    let claim = |c: &Cluster, alloc: &str| {
        c.csivol(&[
            "claim",
            "scratch",
            "--node",
            "node-1",
            "--alloc",
            alloc,
            "--gid",
            GID,
            "--wait",
            "--timeout",
            "60s",
        ])
    };
    let out = claim(&c, "first");
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("1234 (on-root-mismatch)"), "{out:?}");
    let target = c.nodes[0].agent_dir().join("targets/scratch/first");
    // The plugin comes back with VOLUME_MOUNT_GROUP; its agent registers it so.
    c.kill_agent(0);
    c.restart_plugin_with(0, Vec::new());
    c.start_agent(0);
    c.wait_node_status(0, "ready");
    let out = claim(&c, "second");
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains(
            "the volume is staged on this node with group none, and the claim asks for group \
             1234: one staging has one group"
        ),
        "{out:?}"
    );
    let list = c
        .csivol(&["claim", "list", "--volume", "scratch", "-o", "json"])
        .json();
    let state = |alloc: &str| {
        list.as_array()
            .and_then(|a| a.iter().find(|c| c["alloc"] == alloc))
            .map(|c| c["state"].clone())
    };
    assert_eq!(state("first"), Some("ready".into()), "{list}");
    assert_ne!(state("second"), Some("ready".into()), "{list}");
    let events = c
        .csivol(&["events", "--volume", "scratch", "-o", "json"])
        .json();
    let failed = events
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["kind"] == "claim-failed" && e["alloc"] == "second")
        .unwrap_or_else(|| panic!("no claim-failed event for the second claim: {events}"));
    assert!(
        failed["message"]
            .as_str()
            .is_some_and(|m| m.contains("one staging has one group")),
        "{failed}"
    );
    assert!(
        crate::cluster::mounted(&target),
        "the first claim keeps its mount"
    );
}
