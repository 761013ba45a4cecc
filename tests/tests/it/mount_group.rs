//! A non-root workload writes its volume: `csivol run --gid` through a real cluster, with
//! real bind mounts, a process with dropped privileges (uid and gid 1234, no
//! supplementary groups) writing into the target. Once with the plugin's
//! VOLUME_MOUNT_GROUP, once with csivol's own ownership change (the plugin started with
//! `--disable volume-mount-group`, the server's `ownership = "on-root-mismatch"`), and the
//! refusal where neither can apply the group.

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
            (crate::cluster::mounted(&target) && regiven && claim_ready(c)).then_some(())
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
    let out = c.csivol(&["release", "scratch", "--alloc", "held", "--wait"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        ownership_recorded(c, "held"),
        None,
        "gone with its publication"
    );
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
    let c = Cluster::start("mount-group-never", "10s", vec![opts]);
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
}
