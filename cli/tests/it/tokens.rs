//! Token names: `token create --name`, and the name as the actor in the event log.

use crate::support::Env;

#[tokio::test]
async fn a_named_token_acts_under_its_name() {
    let env = Env::start("token-names");
    let r = env
        .run(&["token", "create", "--role", "operator", "--name", "alice"])
        .await;
    assert_eq!(r.code, 0, "{r}");
    snap!(r.stderr, @r"
    created operator token [TOKEN-ID] named alice; the secret below is shown only this once
    ");
    let alice = r.stdout.trim().to_owned();

    // What alice does is recorded as hers.
    let mut cmd = env.command(&["volume", "register", &env.file("v1.toml", "name = \"v1\"\nplugin = \"hp\"\nexternal_id = \"e1\"\naccess_mode = \"single-node-writer\"\nattachment = \"file-system\"\n")]);
    cmd.env("CSIVOL_TOKEN", &alice);
    let r = crate::support::run(cmd).await;
    assert_eq!(r.code, 0, "{r}");
    let r = env.run(&["events", "-o", "json"]).await;
    let events = r.json();
    let actors: Vec<(&str, &str)> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["kind"].as_str().unwrap(), e["actor"].as_str().unwrap()))
        .collect();
    assert_eq!(actors[1], ("volume-registered", "operator:alice"), "{r}");
    assert!(
        events[0]["message"]
            .as_str()
            .unwrap()
            .ends_with(" created, named alice"),
        "{r}"
    );

    // A name identifies one token; a name that looks like a token id is refused.
    snap!(env.run(&["token", "create", "--role", "reader", "--name", "alice"]).await, @r"
    exit: 4
    --- stdout
    --- stderr
    error: failed to create a reader token: a token named `alice` already exists
    hint: choose another name; each name identifies one token in the event log
    ");
    let r = env
        .run(&[
            "token",
            "create",
            "--role",
            "reader",
            "--name",
            "482effdfd2b8",
        ])
        .await;
    assert_eq!(r.code, 2, "{r}");
}

/// Runs `args` with `token` instead of the operator's.
async fn run_as(env: &Env, token: &str, args: &[&str]) -> crate::support::Run {
    let mut cmd = env.command(args);
    cmd.env("CSIVOL_TOKEN", token);
    crate::support::run(cmd).await
}

/// A CI job's claimer token (that may also snapshot) narrowed to `build-*` claims, lists, reads and releases the
/// build volumes, and can neither see nor touch `db-*`: not claim, read, release or
/// snapshot it, and its listings do not show it.
#[tokio::test]
async fn a_claimer_narrowed_to_build_volumes_cannot_touch_db_volumes() {
    let env = Env::start("token-volumes");
    let _n1 = env.node("n1", 0).await;
    for v in ["build-1", "db-1"] {
        env.volume(v, "multi-node-multi-writer").await;
    }
    // The operator's claim on the database volume, mid-job.
    let r = env
        .run(&["claim", "db-1", "--node", "n1", "--alloc", "db-job"])
        .await;
    assert_eq!(r.code, 0, "{r}");

    let r = env
        .run(&[
            "token",
            "create",
            "--role",
            "claimer",
            "--capability",
            "snapshot",
            "--volumes",
            "build-*",
            "--name",
            "ci",
        ])
        .await;
    assert_eq!(r.code, 0, "{r}");
    snap!(r.stderr, @r"
    created claimer token [TOKEN-ID] named ci with snapshot narrowed to volumes build-*; the secret below is shown only this once
    ");
    let ci = r.stdout.trim().to_owned();

    // Its own volumes: claim, list, read and release.
    let r = run_as(
        &env,
        &ci,
        &["claim", "build-1", "--node", "n1", "--alloc", "ci-1"],
    )
    .await;
    assert_eq!(r.code, 0, "{r}");
    let r = run_as(&env, &ci, &["volume", "list", "-o", "json"]).await;
    assert_eq!(r.code, 0, "{r}");
    let names: Vec<String> = r
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["build-1"], "{r}");
    let r = run_as(&env, &ci, &["claim", "list", "-o", "json"]).await;
    assert_eq!(r.code, 0, "{r}");
    let claims = r.json();
    let volumes: Vec<&str> = claims
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["volume"].as_str().unwrap())
        .collect();
    assert_eq!(volumes, ["build-1"], "{r}");

    // Its volume's events, and not the whole log (which names every volume).
    let r = run_as(&env, &ci, &["events", "--volume", "build-1", "-o", "json"]).await;
    assert_eq!(r.code, 0, "{r}");
    assert!(r.json().as_array().is_some_and(|es| !es.is_empty()), "{r}");
    let r = run_as(&env, &ci, &["events"]).await;
    assert_eq!(r.code, 7, "{r}");
    assert!(r.stderr.contains("covers the whole cluster"), "{r}");
    let r = run_as(&env, &ci, &["events", "--volume", "db-1"]).await;
    assert_eq!(r.code, 7, "{r}");

    // The database volume: refused, saying why, naming nothing of it but what was asked.
    snap!(run_as(&env, &ci, &["claim", "db-1", "--node", "n1", "--alloc", "ci-2"]).await, @r"
    exit: 7
    --- stdout
    --- stderr
    error: failed to claim volume `db-1` for alloc `ci-2` on node `n1`: this token is narrowed to volumes `build-*`, and volume `db-1` is not one of them
    hint: use a token whose `--volumes` patterns match it
    ");
    snap!(run_as(&env, &ci, &["release", "db-1", "--alloc", "db-job"]).await, @r"
    exit: 7
    --- stdout
    --- stderr
    error: failed to release the claim of alloc `db-job` on volume `db-1`: this token is narrowed to volumes `build-*`, and volume `db-1` is not one of them
    hint: use a token whose `--volumes` patterns match it
    ");
    snap!(run_as(&env, &ci, &["volume", "show", "db-1"]).await, @r"
    exit: 7
    --- stdout
    --- stderr
    error: this token is narrowed to volumes `build-*`, and volume `db-1` is not one of them
    hint: use a token whose `--volumes` patterns match it
    ");
    snap!(run_as(&env, &ci, &["snapshot", "create", "db-1", "--name", "build-snap"]).await, @r"
    exit: 7
    --- stdout
    --- stderr
    error: failed to snapshot volume `db-1`: this token is narrowed to volumes `build-*`, and volume `db-1` is not one of them
    hint: use a token whose `--volumes` patterns match it
    ");
    // The operator's claim is where it was.
    let r = env.run(&["volume", "show", "db-1", "-o", "json"]).await;
    assert_eq!(r.json()["claims"][0]["alloc"], "db-job", "{r}");

    // What the token holds, as `token show` and `token list` tell it.
    snap!(env.run(&["token", "show", "ci"]).await, @r"
    exit: 0
    --- stdout
    id:           [TOKEN-ID]
    name:         ci
    role:         claimer
    capabilities: read, claim, snapshot
    added:        snapshot
    namespaces:   * (every namespace)
    volumes:      build-*
    node:         -
    status:       active
    created:      [TIME]
    last used:    [TIME]
    expires:      -
    --- stderr
    ");
    let r = env.run(&["token", "list", "-o", "json"]).await;
    let listed = r.json();
    let t = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "ci")
        .unwrap();
    assert_eq!(
        t["capabilities"],
        serde_json::json!(["read", "claim", "snapshot"]),
        "{r}"
    );
    assert_eq!(t["volumes"], serde_json::json!(["build-*"]), "{r}");

    // It cannot make itself a wider token, nor release its own claim on another's behalf.
    let r = run_as(&env, &ci, &["token", "create", "--role", "claimer"]).await;
    assert_eq!(r.code, 7, "{r}");
    assert!(
        r.stderr.contains("lacks the `manage-tokens` capability"),
        "{r}"
    );
    let r = run_as(&env, &ci, &["release", "build-1", "--alloc", "ci-1"]).await;
    assert_eq!(r.code, 0, "{r}");
}
