//! Two teams on one cluster through the CLI, with real processes and real bind mounts:
//! each team's CI job runs with its own token in its own namespace; neither can see, claim,
//! release, renew or snapshot the other's volume; a token narrowed to `build-*` cannot touch
//! `db-*`; a quota refuses the claim that would pass it and takes it once another is
//! released. A team's job gets a per-job volume in its own namespace, from its own
//! snapshot, within its own quota.

use std::time::Duration;

use csivol_tests::wait_for;
use serde_json::Value;

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

/// What a listing's JSON names: each entry's namespace and name.
fn listed(out: &Out) -> Vec<(String, String)> {
    let json = out.ok().json();
    json.as_array()
        .unwrap_or_else(|| panic!("a listing: {json}"))
        .iter()
        .map(|e| {
            let text = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
            (text("namespace"), text("name"))
        })
        .collect()
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
    let seen = listed(&c.csivol_as(Some(&tb), &["volume", "list", "-A", "-o", "json"]));
    assert_eq!(seen, [("team-b".to_owned(), "db".to_owned())]);
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

/// A team's CI job takes a per-job volume from its team's snapshot, in its namespace: the
/// volume is made there (its CSI name carries the namespace), holds the snapshot's data,
/// and is deleted after the job. Another team's token cannot reach that snapshot, a token
/// narrowed to volume names cannot have the server name a volume for it, and the team's
/// quota of per-job volumes bounds its jobs.
#[test]
fn a_teams_job_gets_a_per_job_volume_in_its_own_namespace() {
    let c = Cluster::start("teams-fresh", "30s", vec![NodeOpts::default()]);
    for ns in ["team-a", "team-b"] {
        c.csivol(&["namespace", "create", ns]).ok();
    }
    c.csivol(&[
        "-n",
        "team-a",
        "volume",
        "create",
        &spec(&c, "golden"),
        "--wait",
    ])
    .ok();
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
    let tb = token(&c, &["-n", "team-b", "--name", "ci-team-b"]);
    let a = |args: &[&str]| {
        let mut all = vec!["-n", "team-a"];
        all.extend_from_slice(args);
        c.csivol_as(Some(&ta), &all)
    };
    a(&[
        "run",
        "golden",
        "--node",
        "node-1",
        "--alloc",
        "seed",
        "--",
        "sh",
        "-c",
        "echo team-a data > \"$CSIVOL_PATH/fixture.txt\"",
    ])
    .ok();
    a(&[
        "snapshot",
        "create",
        "golden",
        "--name",
        "golden-1",
        "--wait",
        "--timeout",
        "60s",
    ])
    .ok();

    let seen = c.dir.join("seen.txt");
    let named = c.dir.join("named.txt");
    let script = format!(
        "cat \"$CSIVOL_PATH_DB/fixture.txt\" > {} && echo \"$CSIVOL_VOLUME_DB\" > {}",
        seen.display(),
        named.display()
    );
    a(&[
        "run",
        "--node",
        "node-1",
        "--alloc",
        "job-1",
        "--fresh",
        "db=snapshot:golden-1",
        "--",
        "sh",
        "-c",
        &script,
    ])
    .ok();
    assert_eq!(std::fs::read_to_string(&seen).unwrap(), "team-a data\n");
    let name = std::fs::read_to_string(&named).unwrap().trim().to_owned();
    assert!(name.starts_with("db-"), "{name}");
    // Made in team-a, under a CSI name that carries it; deleted after the job.
    let created = c.nodes[0].plugin_calls().into_iter().any(|call| {
        call["rpc"] == "CreateVolume"
            && call["code"] == "OK"
            // The call log names a CreateVolume by the name csivol asked for.
            && call["volume_id"]
                .as_str()
                .is_some_and(|n| n.starts_with(&format!("csivol-team-a.{name}-")))
    });
    assert!(created, "CreateVolume named in team-a");
    let events = a(&["events", "--volume", &name, "-o", "json"]).ok().json();
    assert!(
        events
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["namespace"] == "team-a"),
        "{events}"
    );
    wait_for(
        "the per-job volume to be deleted",
        Duration::from_secs(60),
        || {
            let list = a(&["volume", "list", "-o", "json"]).ok().json();
            let names: Vec<String> = list
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|v| v["name"].as_str().map(str::to_owned))
                .collect();
            (!names.contains(&name)).then_some(())
        },
    );

    // Team B's job names team-a's snapshot from its own namespace: there is none there,
    // and it cannot name team-a's.
    let b = c.csivol_as(
        Some(&tb),
        &[
            "-n",
            "team-b",
            "claim",
            "--fresh",
            "db=snapshot:golden-1",
            "--node",
            "node-1",
            "--alloc",
            "job-1",
            "--ttl",
            "5m",
        ],
    );
    refused(&b, 3, "snapshot `team-b~golden-1` is not registered");
    let b = c.csivol_as(
        Some(&tb),
        &[
            "-n",
            "team-a",
            "claim",
            "--fresh",
            "db=snapshot:golden-1",
            "--node",
            "node-1",
            "--alloc",
            "job-1",
            "--ttl",
            "5m",
        ],
    );
    refused(
        &b,
        7,
        "this token is narrowed to namespaces `team-b`, and the request names namespace `team-a`",
    );
    // A token narrowed to volume names cannot have the server name a volume.
    let builds = token(&c, &["-n", "team-a", "--volumes", "build-*"]);
    let out = c.csivol_as(
        Some(&builds),
        &[
            "-n",
            "team-a",
            "claim",
            "--fresh",
            "db=snapshot:golden-1",
            "--node",
            "node-1",
            "--alloc",
            "job-2",
            "--ttl",
            "5m",
        ],
    );
    refused(&out, 7, "touches a volume the server makes or chooses");

    // A quota of one per-job volume: a second job's waits until the first is gone.
    c.csivol(&["namespace", "quota", "team-a", "--fresh-volumes", "1"])
        .ok();
    // The change is an operator's act in the cluster's log, with what it set.
    let events = c.csivol(&["events", "-o", "json"]).ok().json();
    let set = events.as_array().unwrap().iter().any(|e| {
        e["kind"] == "namespace-quota-set"
            && e["message"]
                .as_str()
                .is_some_and(|m| m.contains("namespace team-a set: fresh-volumes 1 (was none)"))
    });
    assert!(set, "{events}");
    let fresh = |alloc: &str| {
        a(&[
            "claim",
            "--fresh",
            "db=snapshot:golden-1",
            "--node",
            "node-1",
            "--alloc",
            alloc,
            "--ttl",
            "5m",
            "-o",
            "json",
        ])
    };
    let first = fresh("job-3").ok().json();
    let first = first["volume"].as_str().unwrap().to_owned();
    refused(
        &fresh("job-4"),
        4,
        "namespace `team-a` is at its quota of 1 per-job volume(s)",
    );
    a(&[
        "release",
        &first,
        "--alloc",
        "job-3",
        "--wait",
        "--timeout",
        "60s",
    ])
    .ok();
    wait_for("the quota to free up", Duration::from_secs(60), || {
        let out = fresh("job-4");
        (out.code == 0).then_some(())
    });
}

/// A team's pool: made in its namespace with the same selector as a pool of `default`, it
/// takes the team's labelled volumes only; the team's job gets one of them through its own
/// token and records its cache key there; another team's token neither sees nor claims it.
#[test]
fn a_teams_pool_hands_its_jobs_the_teams_own_caches() {
    let c = Cluster::start("teams-pool", "30s", vec![NodeOpts::default()]);
    for ns in ["team-a", "team-b"] {
        c.csivol(&["namespace", "create", ns]).ok();
    }
    // `cache` of `default` and `cache` of team-a, each with one member labelled alike.
    for (ns, volume) in [("default", "shared-1"), ("team-a", "a-1")] {
        c.csivol(&["-n", ns, "volume", "create", &spec(&c, volume), "--wait"])
            .ok();
        c.csivol(&["-n", ns, "volume", "label", volume, "pool=cache"])
            .ok();
        c.csivol(&[
            "-n",
            ns,
            "pool",
            "create",
            "cache",
            "--selector",
            "pool=cache",
        ])
        .ok();
    }
    let ta = token(&c, &["-n", "team-a", "--name", "ci-team-a"]);
    let tb = token(&c, &["-n", "team-b", "--name", "ci-team-b"]);
    let shown = c
        .csivol_as(
            Some(&ta),
            &["-n", "team-a", "pool", "show", "cache", "-o", "json"],
        )
        .ok()
        .json();
    let members: Vec<&str> = shown["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["volume"].as_str().unwrap())
        .collect();
    assert_eq!(members, ["a-1"], "{shown}");
    assert_eq!(shown["namespace"], "team-a", "{shown}");

    let got = c.dir.join("got.txt");
    let script = format!("echo \"$CSIVOL_VOLUME_C\" > {}", got.display());
    c.csivol_as(
        Some(&ta),
        &[
            "-n",
            "team-a",
            "run",
            "--pool",
            "c=cache",
            "--cache-key",
            "main",
            "--node",
            "node-1",
            "--alloc",
            "job-1",
            "--",
            "sh",
            "-c",
            &script,
        ],
    )
    .ok();
    assert_eq!(std::fs::read_to_string(&got).unwrap(), "a-1\n");
    let shown = c
        .csivol_as(
            Some(&ta),
            &["-n", "team-a", "pool", "show", "cache", "-o", "json"],
        )
        .ok()
        .json();
    assert_eq!(shown["members"][0]["cache_key"], "main", "{shown}");

    // With its one member held, the next job waits in team-a's line, named as the team
    // names it, and leaves it through the pool.
    let a = |args: &[&str]| {
        let mut all = vec!["-n", "team-a"];
        all.extend_from_slice(args);
        c.csivol_as(Some(&ta), &all)
    };
    a(&[
        "claim", "--pool", "cache", "--node", "node-1", "--alloc", "hold-1", "--ttl", "5m",
    ])
    .ok();
    let queued = a(&[
        "claim", "--pool", "cache", "--node", "node-1", "--alloc", "wait-1", "--ttl", "5m",
        "--queue", "-o", "json",
    ])
    .ok()
    .json();
    assert_eq!(
        (&queued["state"], &queued["pool"]["pool"]),
        (&Value::from("queued"), &Value::from("cache")),
        "{queued}"
    );
    let line = a(&["pool", "show", "cache", "-o", "json"]).ok().json();
    assert_eq!(line["line"][0]["alloc"], "wait-1", "{line}");
    a(&["release", "--pool", "cache", "--alloc", "wait-1"]).ok();
    let line = a(&["pool", "show", "cache", "-o", "json"]).ok().json();
    assert!(line.get("line").is_none(), "{line}");

    // Team B: team-a's pool is out of its reach, and team-b has none of that name.
    refused(
        &c.csivol_as(Some(&tb), &["-n", "team-a", "pool", "show", "cache"]),
        7,
        "this token is narrowed to namespaces `team-b`, and the request names namespace `team-a`",
    );
    refused(
        &c.csivol_as(
            Some(&tb),
            &[
                "-n", "team-b", "claim", "--pool", "cache", "--node", "node-1", "--alloc", "job-1",
            ],
        ),
        3,
        "no pool `cache`",
    );
    // Team A's listing of every namespace it holds shows its pool alone.
    let pools = listed(&c.csivol_as(Some(&ta), &["pool", "list", "-A", "-o", "json"]));
    assert_eq!(pools, [("team-a".to_owned(), "cache".to_owned())]);
}
