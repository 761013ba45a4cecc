//! Address and token resolution, the errors every command shares, and the read-only
//! commands: nodes, plugins, events, tokens, completions.

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support::{Env, run};

#[tokio::test]
async fn an_unreachable_server_is_named_with_exit_8() {
    let env = Env::start("unreachable");
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = env.command(&["volume", "list"]);
    cmd.env("CSIVOL_ADDR", format!("127.0.0.1:{port}"));
    snap!(run(cmd).await, @r"
    exit: 8
    --- stdout
    --- stderr
    error: cannot reach the csivol server at http://127.0.0.1:[PORT]: Connection refused (os error 111)
    hint: start the server (`csivol-server serve --data-dir DIR`, or `csivol-server dev`), or point --addr or CSIVOL_ADDR at it
    ");

    // Without any address, the default one is tried and named.
    let mut cmd = env.command(&["status", "--addr", "http://127.0.0.1:1"]);
    cmd.env_remove("CSIVOL_ADDR");
    let r = run(cmd).await;
    assert_eq!(r.code, 8, "{r}");
    assert!(r.stderr.contains("at http://127.0.0.1:1:"), "{r}");

    // TLS to a server that speaks plain HTTP: the address to use instead.
    let tls = env.server.url.replace("http://", "https://");
    snap!(env.run(&["status", "--addr", &tls]).await, @r"
    exit: 8
    --- stdout
    --- stderr
    error: the csivol server at https://127.0.0.1:[PORT] speaks plain HTTP: use http://127.0.0.1:[PORT]
    hint: pass --addr http://127.0.0.1:[PORT] (or set CSIVOL_ADDR to it)
    ");

    // With a CA given, an address without a scheme means https.
    let status = std::process::Command::new(csivol_tests::bin_path("csivol-server"))
        .args(["tls", "init", "--dir"])
        .arg(env.dir.join("tls"))
        .output()
        .unwrap();
    assert!(status.status.success(), "{status:?}");
    let mut cmd = env.command(&["status", "--addr", tls.trim_start_matches("https://")]);
    cmd.env("CSIVOL_CACERT", env.dir.join("tls/ca.pem"));
    let r = run(cmd).await;
    assert_eq!(r.code, 8, "{r}");
    assert!(
        r.stderr.contains(&format!("at {tls} speaks plain HTTP")),
        "{r}"
    );

    let mut cmd = env.command(&["status", "--addr", "ftp://127.0.0.1:1"]);
    cmd.env_remove("CSIVOL_ADDR");
    snap!(run(cmd).await, @"
    exit: 2
    --- stdout
    --- stderr
    error: invalid server address `ftp://127.0.0.1:[PORT]`: only http:// and https:// are supported
    hint: use e.g. --addr http://127.0.0.1:[PORT] (or set CSIVOL_ADDR)
    ");
}

#[tokio::test]
async fn several_server_addresses_are_tried_in_turn() {
    let env = Env::start("several-addrs");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dead = format!("http://127.0.0.1:{port}");
    // Comma-separated in CSIVOL_ADDR, the unreachable one first.
    let mut cmd = env.command(&["volume", "list"]);
    cmd.env("CSIVOL_ADDR", format!("{dead},{}", env.server.url));
    let r = run(cmd).await;
    assert_eq!(r.code, 0, "{r}");
    // --addr repeated.
    let mut cmd = env.command(&["volume", "list", "--addr", &dead, "--addr", &env.server.url]);
    cmd.env_remove("CSIVOL_ADDR");
    let r = run(cmd).await;
    assert_eq!(r.code, 0, "{r}");
    // None answers: unreachable, exit 8.
    let mut cmd = env.command(&[
        "volume",
        "list",
        "--addr",
        &format!("{dead},http://127.0.0.1:1"),
    ]);
    cmd.env_remove("CSIVOL_ADDR");
    let r = run(cmd).await;
    assert_eq!(r.code, 8, "{r}");
}

#[tokio::test]
async fn tokens_come_from_flag_env_file_and_default_file() {
    let env = Env::start("tokens");

    let mut cmd = env.command(&["volume", "list"]);
    cmd.env("CSIVOL_TOKEN", "csivol_not-a-real-token");
    snap!(run(cmd).await, @r"
    exit: 7
    --- stdout
    --- stderr
    error: the token is not known to this server (token from CSIVOL_TOKEN)
    hint: pass the right token with --token or CSIVOL_TOKEN; a server writes its first operator token to <data-dir>/operator.token
    ");

    let r = env.run(&["volume", "list", "--token", "wrong"]).await;
    assert_eq!(r.code, 7, "{r}");
    assert!(r.stderr.contains("(token from --token)"), "{r}");

    // No token anywhere: the hint says where csivol looked.
    let mut cmd = env.command(&["volume", "list"]);
    cmd.env_remove("CSIVOL_TOKEN");
    snap!(run(cmd).await, @r"
    exit: 7
    --- stdout
    --- stderr
    error: no token: this endpoint needs `Authorization: Bearer <token>`
    hint: pass a token with --token, CSIVOL_TOKEN or CSIVOL_TOKEN_FILE, or put it in [TMP]/home/.config/csivol/token; a new server writes its first operator token to <data-dir>/operator.token
    ");

    // CSIVOL_TOKEN_FILE: the server's own token file works; a missing file is a usage error.
    let mut cmd = env.command(&["volume", "list"]);
    cmd.env_remove("CSIVOL_TOKEN").env(
        "CSIVOL_TOKEN_FILE",
        env.server.data_dir.join("operator.token"),
    );
    let r = run(cmd).await;
    assert_eq!(r.code, 0, "{r}");
    let mut cmd = env.command(&["volume", "list"]);
    cmd.env_remove("CSIVOL_TOKEN")
        .env("CSIVOL_TOKEN_FILE", env.dir.join("missing"));
    snap!(run(cmd).await, @r"
    exit: 2
    --- stdout
    --- stderr
    error: cannot read the token file [TMP]/missing named by CSIVOL_TOKEN_FILE: No such file or directory (os error 2)
    ");
    let bad = env.file("bad.token", "csivol_0000\n");
    let mut cmd = env.command(&["volume", "list"]);
    cmd.env_remove("CSIVOL_TOKEN")
        .env("CSIVOL_TOKEN_FILE", &bad);
    let r = run(cmd).await;
    assert_eq!(r.code, 7, "{r}");
    assert!(r.stderr.contains("(token from CSIVOL_TOKEN_FILE ("), "{r}");

    // The default token file, where dev mode writes it: $XDG_CONFIG_HOME, else ~/.config.
    let config = env.dir.join("xdg");
    std::fs::create_dir_all(config.join("csivol")).unwrap();
    std::fs::write(
        config.join("csivol/token"),
        format!("{}\n", env.server.token),
    )
    .unwrap();
    let mut cmd = env.command(&["volume", "list"]);
    cmd.env_remove("CSIVOL_TOKEN")
        .env("XDG_CONFIG_HOME", &config);
    assert_eq!(run(cmd).await.code, 0);
    std::fs::create_dir_all(env.home().join(".config/csivol")).unwrap();
    std::fs::write(env.home().join(".config/csivol/token"), "csivol_stale\n").unwrap();
    let mut cmd = env.command(&["volume", "list"]);
    cmd.env_remove("CSIVOL_TOKEN");
    let r = run(cmd).await;
    assert_eq!(r.code, 7, "{r}");
    assert!(
        r.stderr
            .contains("(token from the default token file [TMP]")
            || r.stderr
                .contains("(token from the default token file /tmp/"),
        "{r}"
    );
}

/// A setting given as nothing (a CI secret that did not expand) is an error naming it,
/// never a reason to go on to the next place: an empty `CSIVOL_TOKEN` beside an operator
/// token in `CSIVOL_TOKEN_FILE` must not act as that operator.
#[tokio::test]
async fn a_setting_set_but_empty_is_refused_never_passed_over() {
    let env = Env::start("empty-settings");
    let operator_file = env.server.data_dir.join("operator.token");
    let tokens = || async {
        let r = env.run(&["token", "list", "-o", "json"]).await;
        assert_eq!(r.code, 0, "{r}");
        r.json().as_array().unwrap().len()
    };
    assert_eq!(tokens().await, 1, "the operator token alone");

    let mut cmd = env.command(&["token", "create", "--role", "reader"]);
    cmd.env("CSIVOL_TOKEN", "")
        .env("CSIVOL_TOKEN_FILE", &operator_file);
    snap!(run(cmd).await, @r"
    exit: 7
    --- stdout
    --- stderr
    error: CSIVOL_TOKEN is set but empty: no token was sent
    hint: give CSIVOL_TOKEN the token (a CI secret that did not expand leaves it empty); an empty one is never passed over for another token
    ");
    // Blank is empty too.
    let mut cmd = env.command(&["token", "create", "--role", "reader"]);
    cmd.env("CSIVOL_TOKEN", " \n")
        .env("CSIVOL_TOKEN_FILE", &operator_file);
    assert_eq!(run(cmd).await.code, 7);

    // An empty CSIVOL_TOKEN_FILE does not fall back to the default token file.
    std::fs::create_dir_all(env.home().join(".config/csivol")).unwrap();
    std::fs::write(
        env.home().join(".config/csivol/token"),
        format!("{}\n", env.server.token),
    )
    .unwrap();
    let mut cmd = env.command(&["token", "create", "--role", "reader"]);
    cmd.env_remove("CSIVOL_TOKEN").env("CSIVOL_TOKEN_FILE", "");
    snap!(run(cmd).await, @r"
    exit: 7
    --- stdout
    --- stderr
    error: CSIVOL_TOKEN_FILE is set but empty: no token was sent
    hint: give CSIVOL_TOKEN_FILE the path of a token file (a CI secret that did not expand leaves it empty); an empty one is never passed over for another token
    ");
    let r = env
        .run(&["token", "create", "--role", "reader", "--token", ""])
        .await;
    assert_eq!(r.code, 7, "{r}");
    assert!(r.stderr.contains("error: --token is empty"), "{r}");
    assert_eq!(tokens().await, 1, "no token was created by any of them");

    // The server's address and CA: an empty one is a usage error, not the default.
    let mut cmd = env.command(&["status"]);
    cmd.env("CSIVOL_ADDR", "");
    snap!(run(cmd).await, @r"
    exit: 2
    --- stdout
    --- stderr
    error: CSIVOL_ADDR is set but empty
    hint: give CSIVOL_ADDR a value, or unset it to use the default
    ");
    let mut cmd = env.command(&["status"]);
    cmd.env("CSIVOL_CACERT", "");
    let r = run(cmd).await;
    assert_eq!(r.code, 2, "{r}");
    assert!(
        r.stderr.contains("error: CSIVOL_CACERT is set but empty"),
        "{r}"
    );

    // The node of `claim` and `run`.
    let mut cmd = env.command(&["claim", "v1", "--alloc", "a1"]);
    cmd.env("CSIVOL_NODE", "");
    let r = run(cmd).await;
    assert_eq!(r.code, 2, "{r}");
    assert!(
        r.stderr
            .starts_with("error: CSIVOL_NODE is set but empty, so no node is given: set it to the node this runs on, or pass --node NODE"),
        "{r}"
    );
}

#[tokio::test]
async fn token_create_prints_the_secret_once_on_stdout() {
    let env = Env::start("token-create");
    let r = env.run(&["token", "create", "--role", "reader"]).await;
    snap!(r, @r"
    exit: 0
    --- stdout
    [TOKEN]
    --- stderr
    created reader token [TOKEN-ID]; the secret below is shown only this once
    ");
    let reader = r.stdout.trim().to_owned();

    // The reader token reads, and is refused for changes with exit 7 and the server's hint.
    let r = env.run(&["volume", "list", "--token", &reader]).await;
    assert_eq!(r.code, 0, "{r}");
    let spec = env.file(
        "v.json",
        r#"{"name": "v", "plugin": "hp", "external_id": "e", "access_mode": "single-node-writer", "attachment": "file-system"}"#,
    );
    snap!(env.run(&["volume", "register", &spec, "--token", &reader]).await, @r"
    exit: 7
    --- stdout
    --- stderr
    error: failed to register volume `v`: this reader token lacks the `create-delete` capability, which PUT /v1/volumes/{name} needs
    hint: use a token that holds it: one of role `operator`, or one made with `csivol token create --role ROLE --capability create-delete` by a token that holds it
    ");

    snap!(env.run(&["token", "create", "--role", "node", "--node", "n1", "-o", "json"]).await, @r#"
    exit: 0
    --- stdout
    {
      "id": "[TOKEN-ID]",
      "role": "node",
      "node": "n1",
      "token": "[TOKEN]",
      "capabilities": []
    }
    --- stderr
    "#);

    snap!(env.run(&["token", "create", "--role", "node"]).await, @r"
    exit: 2
    --- stdout
    --- stderr
    error: the following required arguments were not provided:
      --node <NODE>

    Usage: csivol token create --role <ROLE> --node <NODE>

    For more information, try '--help'.
    ");
    snap!(env.run(&["token", "create", "--role", "reader", "--node", "n1"]).await, @r"
    exit: 2
    --- stdout
    --- stderr
    error: failed to create a reader token: only node tokens are bound to a node; drop `node`
    ");
}

#[tokio::test]
async fn not_found_exits_3() {
    let env = Env::start("not-found");
    snap!(env.run(&["volume", "show", "nope"]).await, @r"
    exit: 3
    --- stdout
    --- stderr
    error: volume `nope` is not registered
    hint: list volumes with `csivol volume list`
    ");
    snap!(env.run(&["node", "show", "nope"]).await, @r"
    exit: 3
    --- stdout
    --- stderr
    error: node `nope` is not registered
    hint: `csivol node list` shows the registered nodes; a node registers when its agent starts
    ");
    snap!(env.run(&["plugin", "show", "nope"]).await, @r"
    exit: 3
    --- stdout
    --- stderr
    error: plugin `nope` is not registered: no node runs it
    hint: no node has registered a plugin yet: start a node agent with `--plugin ID=ENDPOINT` (and `--controller ID=ENDPOINT` where it hosts the plugin's controller)
    ");
    snap!(env.run(&["release", "nope", "--alloc", "a1"]).await, @r"
    exit: 3
    --- stdout
    --- stderr
    error: failed to release the claim of alloc `a1` on volume `nope`: volume `nope` is not registered
    hint: list volumes with `csivol volume list`
    ");
    let r = env.run(&["status", "--node", "nope"]).await;
    assert_eq!(r.code, 3, "{r}");
    snap!(env.run(&["status", "nope"]).await, @r"
    exit: 3
    --- stdout
    --- stderr
    error: volume `nope` is not registered
    hint: list volumes with `csivol volume list`
    ");
    // A name close to a registered one gets it as a suggestion.
    env.volume("demo-data", "single-node-writer").await;
    let _n1 = env.node("node-1", 0).await;
    snap!(env.run(&["status", "demo-dat"]).await, @r"
    exit: 3
    --- stdout
    --- stderr
    error: volume `demo-dat` is not registered
    hint: did you mean volume `demo-data`? (list volumes with `csivol volume list`)
    ");
    snap!(env.run(&["node", "show", "node-2"]).await, @r"
    exit: 3
    --- stdout
    --- stderr
    error: node `node-2` is not registered
    hint: did you mean node `node-1`? (`csivol node list` shows the registered nodes; a node registers when its agent starts)
    ");
    // Commands name the volume in their context first; the suggestion finds it all the same.
    snap!(env.run(&["claim", "demo-dat", "--node", "node-1", "--alloc", "a1"]).await, @r"
    exit: 3
    --- stdout
    --- stderr
    error: failed to claim volume `demo-dat` for alloc `a1` on node `node-1`: volume `demo-dat` is not registered
    hint: did you mean volume `demo-data`? (list volumes with `csivol volume list`)
    ");
    snap!(env.run(&["run", "demo-dat", "--node", "node-1", "--alloc", "a1", "--", "true"]).await, @r"
    exit: 3
    --- stdout
    --- stderr
    alloc: a1
    error: failed to claim volume `demo-dat` for alloc `a1` on node `node-1`: volume `demo-dat` is not registered
    hint: did you mean volume `demo-data`? (list volumes with `csivol volume list`)
    ");
    // An alloc that holds no claim: the closest claim's alloc, and where to look.
    let r = env
        .run(&["claim", "demo-data", "--node", "node-1", "--alloc", "job-1"])
        .await;
    assert_eq!(r.code, 0, "{r}");
    snap!(env.run(&["release", "demo-data", "--alloc", "job-2"]).await, @r"
    exit: 3
    --- stdout
    --- stderr
    error: failed to release the claim of alloc `job-2` on volume `demo-data`: alloc `job-2` holds no claim on volume `demo-data`
    hint: did you mean alloc `job-1`? `csivol claim list --volume demo-data` lists its claims; one released or expired is gone (`csivol events --volume demo-data` says); --ignore-missing takes a claim already gone as released
    ");
    // A plugin no node runs, close to one that a node runs.
    snap!(env.run(&["plugin", "show", "hq"]).await, @r"
    exit: 3
    --- stdout
    --- stderr
    error: plugin `hq` is not registered: no node runs it
    hint: did you mean plugin `hp`? (known plugins: hp; `csivol plugin list` shows them; a plugin is known once a node's agent registers it)
    ");
}

#[tokio::test]
async fn usage_errors_exit_2() {
    let env = Env::start("usage");
    // `run`'s command goes after `--`; clap's own tip for `-c` ("use '-- -c'") would not
    // fix it, and without `--` the command's words are taken for volumes.
    snap!(env.run(&["run", "demo-data", "--node", "node-1", "sh", "-c", "make test"]).await, @r#"
        exit: 2
        --- stdout
        --- stderr
        error: put the command after `--`: every word before it is a volume or a flag of csivol's, as in
          csivol run VOLUME --node NODE -- sh -c "make test"

        Usage: csivol run [OPTIONS] --node <NODE> [VOLUME[:ro]]... -- <COMMAND>...

        For more information, try '--help'.
        "#);
    let r = env
        .run(&["run", "demo-data", "--node", "node-1", "make"])
        .await;
    assert_eq!(r.code, 2, "{r}");
    assert!(
        r.stderr.starts_with("error: put the command after `--`"),
        "{r}"
    );
    // Without a node (no --node, no CSIVOL_NODE) the node is what is missing, with both
    // ways to give it; the command after `--` is fine.
    let mut cmd = env.command(&["run", "cache", "--", "true"]);
    cmd.env_remove("CSIVOL_NODE");
    snap!(run(cmd).await, @r#"
        exit: 2
        --- stdout
        --- stderr
        error: no node given: pass --node NODE (the node the alloc runs on) or set CSIVOL_NODE (a CI runner sets it once for its jobs), as in
          csivol run VOLUME --node NODE -- sh -c "make test"

        Usage: csivol run [OPTIONS] --node <NODE> [VOLUME[:ro]]... -- <COMMAND>...

        For more information, try '--help'.
        "#);
    let mut cmd = env.command(&["claim", "cache", "--alloc", "a1"]);
    cmd.env_remove("CSIVOL_NODE");
    let r = run(cmd).await;
    assert_eq!(r.code, 2, "{r}");
    assert!(
        r.stderr
            .starts_with("error: no node given: pass --node NODE"),
        "{r}"
    );
    // A misspelt flag of csivol's own keeps clap's suggestion.
    let r = env
        .run(&["run", "demo-data", "--nod", "n1", "--", "true"])
        .await;
    assert_eq!(r.code, 2, "{r}");
    assert!(
        r.stderr.contains("a similar argument exists: '--node'"),
        "{r}"
    );
    snap!(env.run(&["volume", "show", "a/b"]).await, @r"
    exit: 2
    --- stdout
    --- stderr
    error: invalid value 'a/b' for '<VOLUME>': invalid volume name `a/b`: use 1 to 128 letters, digits, `.`, `_` or `-`, starting with a letter or digit

    For more information, try '--help'.
    ");
    snap!(env.run(&["unblock", "v1"]).await, @r"
    exit: 2
    --- stdout
    --- stderr
    error: the following required arguments were not provided:
      --reason <TEXT>

    Usage: csivol unblock --reason <TEXT> <VOLUME|--node <NODE>>

    For more information, try '--help'.
    ");
    let r = env.run(&["unblock", "v1", "--reason", " "]).await;
    assert_eq!(r.code, 2, "{r}");
    assert!(r.stderr.contains("say why"), "{r}");
    let r = env
        .run(&[
            "claim",
            "v1",
            "--node",
            "n1",
            "--alloc",
            "a1",
            "--wait",
            "--timeout",
            "soon",
        ])
        .await;
    assert_eq!(r.code, 2, "{r}");
    assert!(r.stderr.contains("use e.g. 90s, 2m, 1h"), "{r}");
    let r = env.run(&["volume", "list", "--state", "happy"]).await;
    assert_eq!(r.code, 2, "{r}");
    assert!(
        r.stderr
            .contains("[possible values: creating, free, attached, blocked, deleting, failed]"),
        "{r}"
    );
}

#[tokio::test]
async fn nodes_and_plugins() {
    let env = Env::start("nodes");
    snap!(env.run(&["node", "list"]).await, @r"
    exit: 0
    --- stdout
    --- stderr
    no nodes have registered
    ");
    snap!(env.run(&["plugin", "list", "-o", "json"]).await, @r"
    exit: 0
    --- stdout
    []
    --- stderr
    ");
    let n1 = env.node("n1", 4).await;
    let n2 = csivol_tests::FakeAgent::new(&env.server, "n2").await;
    n2.register(0, false, json!([])).await;
    n1.heartbeat().await;
    n2.heartbeat().await;
    env.volume("v1", "single-node-writer").await;

    snap!(env.run(&["node", "list"]).await, @r"
    exit: 0
    --- stdout
    NAME  STATUS  HEARTBEAT        PLUGINS (USED/MAX)  SELF-FENCES  LOST SINCE
    n1    ready   [AGE] ago, TTL 30s  hp 0/4              no           -
    n2    ready   [AGE] ago, TTL 30s  hp 0/∞              no           -
    --- stderr
    ");
    snap!(env.run(&["node", "show", "n1"]).await, @r"
    exit: 0
    --- stdout
    node n1
      status:          ready
      eligibility:     eligible
      heartbeat:       [AGE] ago, TTL [AGE]
      last heartbeat:  [TIME] ([AGE] ago)
      lost since:      -
      self-fences:     no
      registered:      [TIME] ([AGE] ago)
      labels:          -
      fence method:    none

    plugins:
    PLUGIN  CSI NODE ID  USED  MAX  CONTROLLER  TOPOLOGY  READY CHECK  STAGED AS  PUBLISHED AS
    hp      csi-n1       0     4    yes         -         -            -          -

    claims: none

    attachments: none

    recent events:
    INDEX  TIME                  KIND             VOLUME  NODE  ALLOC  ACTOR                  MESSAGE
    1      [TIME]  token-created    -       n1    -      operator:[TOKEN-ID]  node token [TOKEN-ID] created, may host the controller of hp
    2      [TIME]  node-registered  -       n1    -      node:n1                node registered with plugins hp
    --- stderr
    ");
    snap!(env.run(&["node", "show", "n2", "-o", "json"]).await, @r#"
    exit: 0
    --- stdout
    {
      "name": "n2",
      "status": "ready",
      "last_heartbeat": "[TIME]",
      "heartbeat_ttl_ms": 30000,
      "silent_ms": [MS],
      "eligibility": "eligible",
      "lost_at": null,
      "fence_after": null,
      "fenced_at": null,
      "plugins": [
        {
          "id": "hp",
          "node_id": "csi-n2",
          "max_volumes": 0,
          "used": 0,
          "controller": false
        }
      ],
      "registered_at": "[TIME]",
      "labels": {},
      "fence_method": null,
      "fence_failures": 0,
      "fence_error": null,
      "next_fence_at": null
    }
    --- stderr
    "#);
    snap!(env.run(&["plugin", "list"]).await, @r"
    exit: 0
    --- stdout
    ID  NAME                 VERSION  NODES        CONTROLLERS  CONTROLLER PUBLISH  VOLUMES  QUEUE
    hp  hostpath.csivol.dev  1        2/2 healthy  1/1 healthy  yes                 1        -
    --- stderr
    ");
    snap!(env.run(&["plugin", "show", "hp"]).await, @r"
    exit: 0
    --- stdout
    plugin hp
      name:                hostpath.csivol.dev
      version:             1
      nodes:               2 healthy of 2
      controllers:         1 healthy of 1
      controller publish:  yes
      stage/unstage:       yes
      snapshots:           no
      clone volume:        no
      modify volume:       no
      group snapshots:     no
      volumes:             1
      controller queue:    -; at most 8 running

    capacity: the plugin does not report capacity (no GET_CAPACITY)

    nodes:
    NODE  STATUS  TOPOLOGY  READY CHECK  STAGED AS  PUBLISHED AS  LAST PUBLISHED
    n1    ready   -         -            -          -             -
    n2    ready   -         -            -          -             -
    --- stderr
    ");
    snap!(env.run(&["plugin", "show", "hp", "-o", "json"]).await, @r#"
    exit: 0
    --- stdout
    {
      "id": "hp",
      "name": "hostpath.csivol.dev",
      "version": "1",
      "nodes_healthy": 2,
      "nodes_expected": 2,
      "controllers_healthy": 1,
      "controllers_expected": 1,
      "controller_publish": true,
      "stage_unstage": true,
      "snapshots": false,
      "clone_volume": false,
      "modify_volume": false,
      "group_snapshots": false,
      "volumes": 1,
      "nodes": [
        {
          "name": "n1",
          "status": "ready"
        },
        {
          "name": "n2",
          "status": "ready"
        }
      ],
      "queue": {
        "concurrency": 8,
        "waiting": {},
        "warn_after_ms": 60000,
        "running": []
      },
      "capacity": {
        "reported": false,
        "samples": []
      }
    }
    --- stderr
    "#);
    let r = env.run(&["node", "list", "-o", "json"]).await;
    assert_eq!(r.json().as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn events_list_and_follow() {
    let env = Env::start("events");
    env.volume("v1", "single-node-writer").await;
    env.volume("v2", "single-node-writer").await;
    snap!(env.run(&["events", "--volume", "v1"]).await, @r"
    exit: 0
    --- stdout
    INDEX  TIME                  KIND               VOLUME  NODE  ALLOC  ACTOR                  MESSAGE
    1      [TIME]  volume-registered  v1      -     -      operator:[TOKEN-ID]  volume registered (plugin hp, single-node-writer)
    --- stderr
    ");
    snap!(env.run(&["events", "--volume", "v2", "-o", "json"]).await, @r#"
    exit: 0
    --- stdout
    [
      {
        "index": [INDEX],
        "at": "[TIME]",
        "kind": "volume-registered",
        "volume": "v2",
        "namespace": "default",
        "node": null,
        "alloc": null,
        "actor": "operator:[TOKEN-ID]",
        "message": "volume registered (plugin hp, single-node-writer)"
      }
    ]
    --- stderr
    "#);
    // COLUMNS fits tables to a width: only free text wraps.
    let mut cmd = env.command(&["events", "--volume", "v1"]);
    cmd.env("COLUMNS", "130");
    snap!(run(cmd).await, @r"
    exit: 0
    --- stdout
    INDEX  TIME                  KIND               VOLUME  NODE  ALLOC  ACTOR                  MESSAGE
    1      [TIME]  volume-registered  v1      -     -      operator:[TOKEN-ID]  volume registered (plugin hp, single-…
    --- stderr
    ");
    snap!(env.run(&["events", "--node", "n9"]).await, @r"
    exit: 0
    --- stdout
    --- stderr
    no events
    ");

    // --follow with --since (or --tail) prints what there is, then each new event as it
    // happens: the second line comes from an event made after the first was printed.
    for (volume, json) in [("v3", false), ("v4", true)] {
        env.volume(volume, "single-node-writer").await;
        let mut args = vec!["events", "--follow", "--since", "1h", "--volume", volume];
        if json {
            args.extend(["-o", "json"]);
        }
        let mut child = env.command(&args).spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut next = async || {
            tokio::time::timeout(Duration::from_secs(20), lines.next_line())
                .await
                .expect("an event within 20s")
                .unwrap()
                .expect("a line")
        };
        let first = next().await;
        let r = env.run(&["volume", "deregister", volume, "--yes"]).await;
        assert_eq!(r.code, 0, "{r}");
        let second = next().await;
        if json {
            let e: serde_json::Value = serde_json::from_str(&second).unwrap();
            assert_eq!(e["kind"], "volume-deregistered", "{second}");
            assert_eq!(e["volume"], volume);
            assert!(
                first.starts_with('{') && first.contains("volume-registered"),
                "{first}"
            );
        } else {
            snap!(format!("{first}\n{second}"), @"
            [TIME]  volume-registered  volume=v3  volume registered (plugin hp, single-node-writer)  [operator:[TOKEN-ID]]
            [TIME]  volume-deregistered  volume=v3  volume deregistered  [operator:[TOKEN-ID]]
            ");
        }
        child.kill().await.unwrap();
    }
}

#[tokio::test]
async fn completions_are_printed_for_each_shell() {
    let env = Env::start("completions");
    for (shell, start) in [
        ("bash", "_csivol()"),
        ("zsh", "#compdef csivol"),
        ("fish", "# Print an optspec for argparse"),
    ] {
        let r = env.run(&["completions", shell]).await;
        assert_eq!(r.code, 0, "{r}");
        assert!(r.stdout.contains(start), "{shell}: {}", &r.stdout[..200]);
        assert!(r.stdout.contains("unblock"), "{shell}");
    }
    let r = env.run(&["completions", "powershell"]).await;
    assert_eq!(r.code, 2, "{r}");
}

#[tokio::test]
async fn a_closed_stdout_is_not_an_error() {
    let env = Env::start("broken-pipe");
    env.volume("v1", "single-node-writer").await;
    for args in [vec!["volume", "list"], vec!["volume", "list", "-o", "json"]] {
        let mut child = env.command(&args).spawn().unwrap();
        // `csivol ... | head -0`: the reader is gone before csivol writes.
        drop(child.stdout.take());
        let out = child.wait_with_output().await.unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{args:?}");
    }
}

#[tokio::test]
async fn the_agent_help_uses_the_port_everything_else_uses() {
    let out = tokio::process::Command::new(csivol_tests::bin_path("csivol-agent"))
        .args(["run", "--help"])
        .output()
        .await
        .unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("https://10.0.0.1:7420"), "{help}");
    assert!(!help.contains(":7400"), "{help}");
}

/// The bash completion script completes volume and node names from the server.
#[tokio::test]
async fn bash_completes_volume_and_node_names_from_the_server() {
    let env = Env::start("complete-names");
    env.volume("data-1", "single-node-writer").await;
    env.volume("data-2", "single-node-writer").await;
    env.volume("other", "single-node-writer").await;
    let _n1 = env.node("node-1", 0).await;
    let r = env.run(&["__complete", "volumes"]).await;
    assert_eq!(r.stdout, "data-1\ndata-2\nother\n", "{r}");
    let script = env.file(
        "csivol.bash",
        &env.run(&["completions", "bash"]).await.stdout,
    );
    let bin_dir = std::path::Path::new(env!("CARGO_BIN_EXE_csivol"))
        .parent()
        .unwrap()
        .display()
        .to_string();
    // (words typed, the word completed, expected)
    for (words, want) in [
        ("csivol status da", "data-1 data-2"),
        ("csivol node show no", "node-1"),
        ("csivol claim data-1 --node no", "node-1"),
    ] {
        let cmd = env.command(&["-c", &format!(
            "source {script}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
             _csivol_with_names csivol; printf '%s\\n' \"${{COMPREPLY[@]}}\" | grep -v '^-' | sort | xargs"
        )]);
        let mut bash = tokio::process::Command::new("bash");
        bash.args(cmd.as_std().get_args())
            .envs(
                cmd.as_std()
                    .get_envs()
                    .filter_map(|(k, v)| v.map(|v| (k, v))),
            )
            .env(
                "PATH",
                format!("{bin_dir}:{}", std::env::var("PATH").unwrap_or_default()),
            )
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let r = run(bash).await;
        assert_eq!(r.stdout.trim(), want, "{words}: {r}");
    }
}
