//! A claim's own mount options through a real cluster: the flags it adds go to
//! NodePublishVolume only, a SELinux context goes to NodeStageVolume and
//! NodePublishVolume as a quoted `context="..."` flag where the plugin is declared to
//! support SELinux mounts, and what is not allowed is refused with the reason. The test
//! machine has no SELinux policy, and the reference plugin's bind mounts take no flags:
//! what is checked is what reaches the plugin (its own record of each call's capability),
//! not a kernel's labelling; the node's refusal of a context its volume's staging was not
//! made with is checked end to end.

use std::path::Path;

use serde_json::Value;

use crate::cluster::{Cluster, NodeOpts, PLUGIN};

const CONTEXT: &str = "system_u:object_r:container_file_t:s0:c1,c2";

/// The mount flags the plugin recorded for the volume's staging and publications.
fn flags_reached(state: &Path) -> (Vec<Value>, Vec<Value>) {
    let mut staged = Vec::new();
    let mut published = Vec::new();
    for entry in std::fs::read_dir(state.join("node")).unwrap() {
        let v: Value =
            serde_json::from_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap()).unwrap();
        if let Some(s) = v["staging"]["capability"]["mount_flags"].as_array() {
            staged.extend(s.iter().cloned());
        }
        for p in v["publications"].as_object().into_iter().flatten() {
            published.extend(
                p.1["capability"]["mount_flags"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .cloned(),
            );
        }
    }
    (staged, published)
}

fn spec(c: &Cluster) {
    c.create_volume_spec(
        "scratch",
        &format!(
            "name = \"scratch\"\nplugin = \"{PLUGIN}\"\naccess_mode = \"single-node-multi-writer\"\n\
             attachment = \"file-system\"\ncapacity_bytes = 1048576\n\
             claim_mount_flags = [\"noatime\"]\n"
        ),
    );
}

fn claim(c: &Cluster, alloc: &str, extra: &[&str]) -> crate::cluster::Out {
    let mut args = vec![
        "claim", "scratch", "--node", "node-1", "--alloc", alloc, "--wait",
    ];
    args.extend_from_slice(extra);
    c.csivol(&args)
}

#[test]
fn a_claims_flags_reach_its_publication_only_and_its_context_both_calls() {
    let c = Cluster::start_with_config("mount-options", "10s", vec![NodeOpts::default()], |_| {
        format!("[plugins.\"{PLUGIN}\"]\nselinux_mount = true\n")
    });
    spec(&c);
    // What the volume allows its claims' mounts is shown with it, and in the listing.
    let shown = c.csivol(&["volume", "show", "scratch"]);
    assert!(
        shown
            .stdout
            .lines()
            .any(|l| l.contains("claim mount flags") && l.contains("noatime")),
        "{shown:?}"
    );
    let json = c
        .csivol(&["volume", "show", "scratch", "-o", "json"])
        .json();
    assert_eq!(
        json["claim_mount_flags"],
        serde_json::json!(["noatime"]),
        "{json}"
    );
    let listed = c.csivol(&["volume", "list", "-o", "json"]).json();
    assert_eq!(
        listed[0]["claim_mount_flags"],
        serde_json::json!(["noatime"]),
        "{listed}"
    );
    let ctx = format!("--selinux-context={CONTEXT}");
    let out = claim(&c, "a1", &["--mount-flag", "noatime", &ctx]);
    assert_eq!(out.code, 0, "{out:?}");
    let quoted = Value::from(format!("context=\"{CONTEXT}\""));
    let (staged, published) = flags_reached(&c.nodes[0].plugin_state());
    assert_eq!(
        staged,
        vec![quoted.clone()],
        "the staging gets the context only"
    );
    assert!(
        published.contains(&quoted) && published.contains(&Value::from("noatime")),
        "{published:?}"
    );

    // A flag the volume does not allow, and the claim's mode, are refused.
    let out = claim(&c, "a2", &["--mount-flag", "sync", &ctx]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr
            .contains("mount flag `sync` is not among the volume's `claim_mount_flags` (noatime)"),
        "{out:?}"
    );
    let out = claim(&c, "a2", &["--mount-flag", "ro", &ctx]);
    assert!(out.stderr.contains("is the claim's mode"), "{out:?}");
    // Another context on the same node: one file system has one context.
    let out = claim(
        &c,
        "a2",
        &["--selinux-context", "system_u:object_r:other_t:s0"],
    );
    assert_eq!(out.code, 4, "{out:?}");
    assert!(
        out.stderr
            .contains("the kernel mounts one file system with one context"),
        "{out:?}"
    );
    // The same one shares the staging.
    let out = claim(&c, "a2", &[&ctx]);
    assert_eq!(out.code, 0, "{out:?}");
}

#[test]
fn a_context_for_a_plugin_not_declared_to_support_selinux_mounts_is_refused() {
    let c = Cluster::start("mount-options-no-selinux", "10s", vec![NodeOpts::default()]);
    spec(&c);
    let out = claim(&c, "a1", &["--selinux-context", CONTEXT]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr
            .contains("not declared to support SELinux mounts")
            && out.stderr.contains("selinux_mount = true"),
        "{out:?}"
    );
    assert_eq!(claim(&c, "a1", &["--mount-flag", "noatime"]).code, 0);
}

/// A staging outlives its claims while its NodeUnstageVolume fails: a claim recorded then
/// with another SELinux context (nothing on the server holds the old one any more) reaches
/// a node whose staging of the volume has the old context, and the node refuses it with
/// the reason instead of publishing a mount the kernel would label otherwise.
#[test]
fn a_claim_with_another_context_than_a_staging_left_behind_is_refused_on_the_node() {
    let opts = NodeOpts {
        plugin_args: vec!["--fail".into(), "NodeUnstageVolume=UNAVAILABLE".into()],
        ..Default::default()
    };
    let c = Cluster::start_with_config("mount-options-left-staging", "10s", vec![opts], |_| {
        format!("[plugins.\"{PLUGIN}\"]\nselinux_mount = true\n")
    });
    spec(&c);
    let out = claim(&c, "a1", &["--selinux-context", CONTEXT]);
    assert_eq!(out.code, 0, "{out:?}");
    let out = c.csivol(&["release", "scratch", "--alloc", "a1", "--wait"]);
    assert_eq!(out.code, 0, "{out:?}");
    let staging_kept = || {
        c.nodes[0]
            .plugin_calls()
            .iter()
            .any(|call| call["rpc"] == "NodeUnstageVolume")
    };
    csivol_tests::wait_for(
        "NodeUnstageVolume tried and failed",
        std::time::Duration::from_secs(60),
        || staging_kept().then_some(()),
    );
    let other = "system_u:object_r:other_t:s0";
    let out = claim(&c, "a2", &["--selinux-context", other, "--timeout", "60s"]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains(&format!(
            "the volume is staged on this node with SELinux context `{CONTEXT}`, and the \
             claim asks for `{other}`: one file system is mounted with one context"
        )),
        "{out:?}"
    );
    // The node's record still says what the staging was made with.
    let db = rusqlite::Connection::open(c.nodes[0].agent_dir().join("agent.db")).unwrap();
    let staged: String = db
        .query_row(
            "SELECT mount FROM staging_mounts WHERE volume = 'scratch'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(staged.contains(CONTEXT), "{staged}");
}
