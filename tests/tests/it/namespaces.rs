//! Namespaces through the CLI, with a real server, agent, reference plugin and bind mounts:
//! two teams' volumes of one name live apart, each claimed, mounted and released on its
//! own; a listing shows one namespace, or every one with `-A`; a namespace is deleted only
//! once empty, and one that does not exist is refused with the closest and how to make it.

use std::path::Path;
use std::time::Duration;

use csivol_tests::wait_for;

use crate::cluster::{Cluster, NodeOpts, PLUGIN, mounted, run};

fn spec(name: &str) -> String {
    format!(
        "name = \"{name}\"\nplugin = \"{PLUGIN}\"\naccess_mode = \"single-node-writer\"\n\
         attachment = \"file-system\"\ncapacity_bytes = 1048576\n"
    )
}

/// `csivol [-n NS] volume create SPEC --wait`.
fn create(c: &Cluster, ns: &[&str], name: &str) -> serde_json::Value {
    let file = c.dir.join(format!("{name}-{}.toml", ns.len()));
    std::fs::write(&file, spec(name)).unwrap();
    let mut args = ns.to_vec();
    args.extend([
        "volume",
        "create",
        file.to_str().unwrap(),
        "--wait",
        "-o",
        "json",
    ]);
    let v = c.csivol(&args).ok().json();
    assert_eq!(v["state"], "free", "{v}");
    v
}

fn claim(c: &Cluster, ns: &[&str], volume: &str) -> String {
    let mut args = ns.to_vec();
    args.extend([
        "claim", volume, "--node", "node-1", "--alloc", "a1", "--wait", "-o", "json",
    ]);
    let claimed = c.csivol(&args).ok().json();
    assert_eq!(claimed["state"], "ready", "{claimed}");
    claimed["target_path"].as_str().unwrap().to_owned()
}

#[test]
fn two_teams_volumes_of_one_name_live_apart() {
    let c = Cluster::start("namespaces", "10s", vec![NodeOpts::default()]);
    let made = c.csivol(&["namespace", "create", "team-a"]);
    assert!(
        made.ok().stderr.contains("created namespace team-a"),
        "{made:?}"
    );
    let bad = c.csivol(&["namespace", "create", "team/a"]);
    assert_eq!(bad.code, 2, "{bad:?}");
    assert!(
        bad.stderr.contains("invalid namespace name `team/a`"),
        "{bad:?}"
    );

    let plain = create(&c, &[], "db");
    assert_eq!(
        (&plain["name"], &plain["namespace"]),
        (&"db".into(), &"default".into())
    );
    let theirs = create(&c, &["-n", "team-a"], "db");
    assert_eq!(
        (&theirs["name"], &theirs["namespace"]),
        (&"db".into(), &"team-a".into())
    );
    assert_ne!(
        plain["external_id"], theirs["external_id"],
        "two backend volumes"
    );

    // Each listing shows its namespace; `-A` every one, with a NAMESPACE column.
    let names = |args: &[&str]| -> Vec<String> {
        let listed = c.csivol(args).ok().json();
        listed
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                format!(
                    "{}/{}",
                    v["namespace"].as_str().unwrap(),
                    v["name"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(names(&["volume", "list", "-o", "json"]), ["default/db"]);
    assert_eq!(
        names(&["-n", "team-a", "volume", "list", "-o", "json"]),
        ["team-a/db"]
    );
    let mut all = names(&["volume", "list", "-A", "-o", "json"]);
    all.sort();
    assert_eq!(all, ["default/db", "team-a/db"]);
    let table = c.csivol(&["volume", "list", "-A"]);
    let header = table.ok().stdout.lines().next().unwrap_or("").to_owned();
    assert!(header.starts_with("NAMESPACE"), "{table:?}");
    // CSIVOL_NAMESPACE names it as -n does.
    let mut cmd = c.command(Some(&c.token), &["volume", "show", "db", "-o", "json"]);
    cmd.env("CSIVOL_NAMESPACE", "team-a");
    let shown = run(cmd).ok().json();
    assert_eq!(shown["external_id"], theirs["external_id"], "{shown}");

    // One alloc claims both: each is staged and mounted at its own paths on the node.
    let mine = claim(&c, &[], "db");
    let ours = claim(&c, &["-n", "team-a"], "db");
    assert_ne!(mine, ours);
    assert!(ours.contains("team-a~db"), "{ours}");
    for p in [&mine, &ours] {
        wait_for(&format!("{p} mounted"), Duration::from_secs(30), || {
            mounted(Path::new(p)).then_some(())
        });
    }
    let claims = c.csivol(&["claim", "list", "-A", "-o", "json"]).ok().json();
    assert_eq!(claims.as_array().unwrap().len(), 2, "{claims}");
    let claims = c
        .csivol(&["-n", "team-a", "claim", "list", "-o", "json"])
        .ok()
        .json();
    assert_eq!(claims.as_array().map(Vec::len), Some(1), "{claims}");
    assert_eq!(claims[0]["namespace"], "team-a", "{claims}");

    // A namespace that does not exist: the closest, and how to make it.
    let missing = c.csivol(&["-n", "team-b", "volume", "list"]);
    assert_ne!(missing.code, 0, "{missing:?}");
    assert!(
        missing.stderr.contains("no namespace `team-b`")
            && missing.stderr.contains("did you mean `team-a`")
            && missing.stderr.contains("csivol namespace create team-b"),
        "{missing:?}"
    );
    // Deleted only once empty, naming what it holds.
    let refused = c.csivol(&["namespace", "delete", "team-a"]);
    assert_ne!(refused.code, 0, "{refused:?}");
    assert!(
        refused.stderr.contains("still holds 1 volume(s) (`db`)"),
        "{refused:?}"
    );

    // A snapshot is its volume's namespace's: cut, listed and restored there only, and the
    // plugin is asked for it by a name that names the namespace.
    std::fs::write(Path::new(&ours).join("team-a.txt"), "team-a's data").unwrap();
    let snap = c
        .csivol(&[
            "-n",
            "team-a",
            "snapshot",
            "create",
            "db",
            "--name",
            "s1",
            "--wait",
            "--timeout",
            "60s",
            "-o",
            "json",
        ])
        .ok()
        .json();
    assert_eq!(
        (
            &snap["namespace"],
            &snap["name"],
            &snap["volume"],
            &snap["state"]
        ),
        (
            &"team-a".into(),
            &"s1".into(),
            &"db".into(),
            &"ready".into()
        ),
        "{snap}"
    );
    let listed = c.csivol(&["snapshot", "list", "-o", "json"]).ok().json();
    assert_eq!(listed.as_array().map(Vec::len), Some(0), "{listed}");
    let listed = c
        .csivol(&["-n", "team-a", "snapshot", "list", "-o", "json"])
        .ok()
        .json();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    let missing = c.csivol(&["snapshot", "show", "s1"]);
    assert_eq!(
        missing.code, 3,
        "the default namespace has no s1: {missing:?}"
    );
    let restored =
        crate::snapshots::create(&c, "restored", &["--from-snapshot", "s1", "-n", "team-a"]);
    assert_eq!(restored.ok().json()["namespace"], "team-a", "{restored:?}");
    let mut args = vec!["-n", "team-a"];
    args.extend([
        "claim", "restored", "--node", "node-1", "--alloc", "r1", "--wait", "-o", "json",
    ]);
    let r = c.csivol(&args).ok().json();
    let at = r["target_path"].as_str().unwrap().to_owned();
    assert_eq!(
        std::fs::read_to_string(Path::new(&at).join("team-a.txt")).unwrap(),
        "team-a's data"
    );
    c.csivol(&[
        "-n", "team-a", "release", "restored", "--alloc", "r1", "--wait",
    ])
    .ok();
    c.csivol(&[
        "-n",
        "team-a",
        "volume",
        "deregister",
        "restored",
        "--delete",
        "--yes",
    ])
    .ok();
    c.csivol(&["-n", "team-a", "snapshot", "delete", "s1", "--yes"])
        .ok();

    // A group snapshot too: of team-a's volumes, its members named in team-a.
    let g = c
        .csivol(&[
            "-n",
            "team-a",
            "snapshot",
            "create",
            "--group",
            "g1",
            "db",
            "--wait",
            "--timeout",
            "60s",
            "-o",
            "json",
        ])
        .ok()
        .json();
    assert_eq!(
        (&g["namespace"], &g["volumes"], &g["state"]),
        (
            &"team-a".into(),
            &serde_json::json!(["db"]),
            &"ready".into()
        ),
        "{g}"
    );
    assert_eq!(g["members"][0]["name"], "g1.db", "{g}");
    assert_eq!(g["members"][0]["namespace"], "team-a", "{g}");
    let groups = c
        .csivol(&["snapshot", "list", "--groups", "-o", "json"])
        .ok()
        .json();
    assert_eq!(groups.as_array().map(Vec::len), Some(0), "{groups}");
    c.csivol(&[
        "-n", "team-a", "snapshot", "delete", "g1", "--yes", "--wait",
    ])
    .ok();
    wait_for("team-a's snapshots gone", Duration::from_secs(60), || {
        let listed = c
            .csivol(&["-n", "team-a", "snapshot", "list", "-o", "json"])
            .ok()
            .json();
        listed.as_array().unwrap().is_empty().then_some(())
    });

    // Releasing team-a's claim leaves the other mounted.
    c.csivol(&["-n", "team-a", "release", "db", "--alloc", "a1", "--wait"])
        .ok();
    wait_for("team-a's db unmounted", Duration::from_secs(30), || {
        (!mounted(Path::new(&ours))).then_some(())
    });
    assert!(mounted(Path::new(&mine)), "default's db stays mounted");
    c.csivol(&[
        "-n",
        "team-a",
        "volume",
        "deregister",
        "db",
        "--delete",
        "--yes",
    ])
    .ok();
    wait_for("team-a's db gone", Duration::from_secs(60), || {
        let listed = c
            .csivol(&["-n", "team-a", "volume", "list", "-o", "json"])
            .ok()
            .json();
        listed.as_array().unwrap().is_empty().then_some(())
    });
    c.csivol(&["namespace", "delete", "team-a"]).ok();
    let left = c.csivol(&["namespace", "list", "-o", "json"]).ok().json();
    assert_eq!(left.as_array().map(Vec::len), Some(1), "{left}");
    assert_eq!(left[0]["name"], "default");
    c.csivol(&["release", "db", "--alloc", "a1", "--wait"]).ok();
}
