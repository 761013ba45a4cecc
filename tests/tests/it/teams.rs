//! Two teams on one cluster through the CLI, with real processes and real bind mounts:
//! each team's CI job runs with its own token in its own namespace; neither can see, claim,
//! release, renew or snapshot the other's volume; a token narrowed to `build-*` cannot touch
//! `db-*`; a quota refuses the claim that would pass it and takes it once another is
//! released.

use crate::cluster::{Cluster, NodeOpts, Out, PLUGIN};

/// A volume spec named `name` of 1 MiB, written into the cluster's dir; its path.
fn spec(c: &Cluster, name: &str) -> String {
    let path = c.dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "name = \"{name}\"\nplugin = \"{PLUGIN}\"\naccess_mode = \"multi-node-multi-writer\"\n\
             attachment = \"file-system\"\ncapacity_bytes = 1048576\n"
        ),
    )
    .unwrap();
    path.display().to_string()
}

/// A claimer token made with `extra` flags; its secret.
fn token(c: &Cluster, extra: &[&str]) -> String {
    let mut args = vec!["token", "create", "--role", "claimer"];
    args.extend_from_slice(extra);
    let out = c.csivol(&args);
    out.ok().stdout.trim().to_owned()
}

fn refused(out: &Out, code: i32, says: &str) {
    assert_eq!(out.code, code, "{out:?}");
    assert!(out.stderr.contains(says), "`{says}` in {out:?}");
}

#[test]
fn two_teams_each_run_their_jobs_and_touch_nothing_of_the_other() {
    let c = Cluster::start("teams", "30s", vec![NodeOpts::default()]);
    for ns in ["team-a", "team-b"] {
        c.csivol(&["namespace", "create", ns]).ok();
        c.csivol(&["-n", ns, "volume", "create", &spec(&c, "db"), "--wait"])
            .ok();
    }
    // Each may snapshot its own volumes too.
    let ta = token(
        &c,
        &[
            "-n",
            "team-a",
            "--name",
            "ci-team-a",
            "--capability",
            "snapshot",
        ],
    );
    let tb = token(
        &c,
        &[
            "-n",
            "team-b",
            "--name",
            "ci-team-b",
            "--capability",
            "snapshot",
        ],
    );

    // Each team's job runs on its own `db`, writing its own data.
    for (ns, t) in [("team-a", &ta), ("team-b", &tb)] {
        let script = format!("echo {ns} > \"$CSIVOL_PATH/owner.txt\"");
        let out = c.csivol_as(
            Some(t),
            &[
                "-n", ns, "run", "db", "--node", "node-1", "--alloc", "job-1", "--", "sh", "-c",
                &script,
            ],
        );
        out.ok();
    }
    // Team A's job holds its volume while team B tries everything on it.
    c.csivol_as(
        Some(&ta),
        &[
            "-n",
            "team-a",
            "claim",
            "db",
            "--node",
            "node-1",
            "--alloc",
            "job-2",
            "--ttl",
            "10m",
            "--wait",
            "--timeout",
            "60s",
        ],
    )
    .ok();
    let crossed = "this token is narrowed to namespaces `team-b`, and the request names \
                   namespace `team-a`";
    for args in [
        &["-n", "team-a", "volume", "show", "db"][..],
        &[
            "-n", "team-a", "claim", "db", "--node", "node-1", "--alloc", "b-1",
        ],
        &["-n", "team-a", "release", "db", "--alloc", "job-2"],
        &["-n", "team-a", "claim", "renew", "db", "--alloc", "job-2"],
        &[
            "-n", "team-a", "snapshot", "create", "db", "--name", "b-snap",
        ],
        &["-n", "team-a", "volume", "list"],
    ] {
        refused(&c.csivol_as(Some(&tb), args), 7, crossed);
    }
    // Nor does B's listing of every namespace it holds show A's volume.
    let listed = c.csivol_as(Some(&tb), &["volume", "list", "-A", "-o", "json"]);
    let listed = listed.ok().json();
    let seen: Vec<(&str, &str)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["namespace"].as_str().unwrap(),
                v["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(seen, [("team-b", "db")], "{listed}");
    // A's claim stands, and its data is its own.
    let shown = c
        .csivol_as(
            Some(&ta),
            &[
                "-n", "team-a", "claim", "show", "db", "--alloc", "job-2", "-o", "json",
            ],
        )
        .ok()
        .json();
    assert_eq!(shown["state"], "ready", "{shown}");
    let path = shown["target_path"].as_str().unwrap();
    assert_eq!(
        std::fs::read_to_string(std::path::Path::new(path).join("owner.txt")).unwrap(),
        "team-a\n"
    );

    // A token narrowed to `build-*` names: `db-1` is not its.
    c.csivol(&["volume", "create", &spec(&c, "build-1"), "--wait"])
        .ok();
    c.csivol(&["volume", "create", &spec(&c, "db-1"), "--wait"])
        .ok();
    let builds = token(&c, &["--volumes", "build-*"]);
    let claim = |volume: &str, alloc: &str| {
        c.csivol_as(
            Some(&builds),
            &[
                "claim",
                volume,
                "--node",
                "node-1",
                "--alloc",
                alloc,
                "--wait",
                "--timeout",
                "60s",
            ],
        )
    };
    refused(
        &claim("db-1", "n-1"),
        7,
        "this token is narrowed to volumes `build-*`, and volume `db-1` is not one of them",
    );
    claim("build-1", "n-1").ok();

    // A quota of two claims in team-a: job-2 holds one, a third is refused until one goes.
    c.csivol(&["namespace", "quota", "team-a", "--claims", "2"])
        .ok();
    c.csivol_as(
        Some(&ta),
        &[
            "-n",
            "team-a",
            "claim",
            "db",
            "--node",
            "node-1",
            "--alloc",
            "job-3",
            "--wait",
            "--timeout",
            "60s",
        ],
    )
    .ok();
    let past = c.csivol_as(
        Some(&ta),
        &[
            "-n", "team-a", "claim", "db", "--node", "node-1", "--alloc", "job-4",
        ],
    );
    refused(
        &past,
        4,
        "namespace `team-a` is at its quota of 2 claim(s): 2 used, and a claim of volume `db` \
         would make it 3; token `ci-team-a` holds most (2)",
    );
    c.csivol_as(
        Some(&ta),
        &[
            "-n",
            "team-a",
            "release",
            "db",
            "--alloc",
            "job-3",
            "--wait",
            "--timeout",
            "60s",
        ],
    )
    .ok();
    c.csivol_as(
        Some(&ta),
        &[
            "-n",
            "team-a",
            "claim",
            "db",
            "--node",
            "node-1",
            "--alloc",
            "job-4",
            "--wait",
            "--timeout",
            "60s",
        ],
    )
    .ok();
}
