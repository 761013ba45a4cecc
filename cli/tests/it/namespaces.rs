//! `csivol namespace ...` and the namespace every command names (`-n`, `CSIVOL_NAMESPACE`,
//! `-A`): what each prints, and each bad input refused with what to do instead.

use crate::support::Env;

#[tokio::test]
async fn namespaces_are_made_listed_shown_and_deleted() {
    let env = Env::start("namespaces");
    env.volume("v1", "single-node-writer").await;
    snap!(env.run(&["namespace", "create", "team-a"]).await, @r"
    exit: 0
    --- stdout
    namespace team-a
      volumes:    0
      claims:     0
      snapshots:  0
      created:    [TIME]
    --- stderr
    created namespace team-a
    ");
    snap!(env.run(&["namespace", "create", "team-a"]).await, @r"
    exit: 0
    --- stdout
    namespace team-a
      volumes:    0
      claims:     0
      snapshots:  0
      created:    [TIME]
    --- stderr
    namespace team-a exists: nothing changed
    ");
    snap!(env.run(&["namespace", "list"]).await, @r"
    exit: 0
    --- stdout
    NAME     VOLUMES  CLAIMS  SNAPSHOTS  CREATED
    default  1        0       0          -
    team-a   0        0       0          [TIME]
    --- stderr
    ");
    snap!(env.run(&["namespace", "show", "team-a", "-o", "json"]).await, @r#"
    exit: 0
    --- stdout
    {
      "name": "team-a",
      "created_at": "[TIME]",
      "volumes": 0,
      "claims": 0,
      "snapshots": 0
    }
    --- stderr
    "#);
    // A volume shown alone says its namespace when it is not `default`.
    let spec = env.file(
        "db.toml",
        "name = \"db\"\nplugin = \"hp\"\nexternal_id = \"ext-db\"\n\
         access_mode = \"single-node-writer\"\nattachment = \"file-system\"\n",
    );
    let r = env
        .run(&["-n", "team-a", "volume", "register", &spec])
        .await;
    assert_eq!(r.code, 0, "{r}");
    assert!(r.stdout.contains("  namespace:    team-a\n"), "{r}");
    snap!(env.run(&["volume", "list", "-A"]).await, @r"
    exit: 0
    --- stdout
    NAMESPACE  NAME  PLUGIN  ACCESS MODE         STATE  CLAIMS  NODES
    team-a     db    hp      single-node-writer  free   -       -
    default    v1    hp      single-node-writer  free   -       -
    --- stderr
    ");
    // The cluster at a glance, and one volume of another namespace, by its name there.
    let r = env.run(&["status", "-A"]).await;
    assert_eq!(r.code, 0, "{r}");
    assert!(r.stdout.contains("team-a     db"), "{r}");
    let r = env.run(&["-n", "team-a", "status", "db"]).await;
    assert_eq!(r.code, 0, "{r}");
    assert!(r.stdout.contains("namespace:    team-a"), "{r}");
    let r = env.run(&["events", "-A"]).await;
    assert!(r.stdout.starts_with("INDEX  TIME"), "{r}");
    assert!(
        r.stdout.lines().next().unwrap_or("").contains("NAMESPACE"),
        "{r}"
    );
    snap!(env.run(&["namespace", "delete", "team-a"]).await, @r"
    exit: 4
    --- stdout
    --- stderr
    error: failed to delete namespace `team-a`: namespace `team-a` still holds 1 volume(s) (`db`)
    hint: delete them first: `csivol volume list -n team-a` lists its volumes
    ");
    snap!(env.run(&["-n", "team-a", "volume", "deregister", "db", "--yes"]).await, @r"
    exit: 0
    --- stdout
    --- stderr
    deregistered volume db
    ");
    snap!(env.run(&["namespace", "delete", "team-a"]).await, @r"
    exit: 0
    --- stdout
    --- stderr
    deleted namespace team-a
    ");
    snap!(env.run(&["namespace", "delete", "default"]).await, @r"
    exit: 2
    --- stdout
    --- stderr
    error: failed to delete namespace `default`: the namespace `default` cannot be deleted
    hint: it holds everything that names no namespace; it always exists
    ");
}

#[tokio::test]
async fn a_bad_namespace_is_refused_with_what_to_do() {
    let env = Env::start("namespaces-refused");
    env.volume("v1", "single-node-writer").await;
    env.run(&["namespace", "create", "team-a"]).await;
    snap!(env.run(&["-n", "team-b", "volume", "show", "v1"]).await, @r"
    exit: 3
    --- stdout
    --- stderr
    error: no namespace `team-b`
    hint: did you mean `team-a`? To make `team-b`, run `csivol namespace create team-b`
    ");
    snap!(env.run(&["-n", "team/b", "volume", "list"]).await, @r"
    exit: 2
    --- stdout
    --- stderr
    error: invalid value 'team/b' for '--namespace <NS>': invalid namespace name `team/b`: use 1 to 63 letters, digits, `.`, `_` or `-`, starting with a letter or digit (`csivol namespace list` lists them)

    For more information, try '--help'.
    ");
    snap!(env.run(&["-A", "volume", "show", "v1"]).await, @r"
    exit: 2
    --- stdout
    --- stderr
    error: `namespace=*` (every namespace) is for listings only
    hint: name the volume's namespace: `?namespace=NS` (`csivol -n NS`)
    ");
    let long = "n".repeat(64);
    snap!(env.run(&["namespace", "create", &long]).await, @r"
    exit: 2
    --- stdout
    --- stderr
    error: invalid value 'nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn' for '<NAMESPACE>': invalid namespace name `nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn`: use 1 to 63 letters, digits, `.`, `_` or `-`, starting with a letter or digit (`csivol namespace list` lists them)

    For more information, try '--help'.
    ");
    let mut cmd = env.command(&["volume", "list"]);
    cmd.env("CSIVOL_NAMESPACE", "");
    snap!(crate::support::run(cmd).await, @r"
    exit: 2
    --- stdout
    --- stderr
    error: CSIVOL_NAMESPACE is set but empty
    hint: give CSIVOL_NAMESPACE a value, or unset it to use the default
    ");
    let mut cmd = env.command(&["volume", "list"]);
    cmd.env("CSIVOL_NAMESPACE", "team/a");
    snap!(crate::support::run(cmd).await, @r"
    exit: 2
    --- stdout
    --- stderr
    error: CSIVOL_NAMESPACE: invalid namespace name `team/a`: use 1 to 63 letters, digits, `.`, `_` or `-`, starting with a letter or digit
    hint: set it to a namespace `csivol namespace list` lists, or unset it
    ");
    let mut cmd = env.command(&["volume", "list", "-o", "json"]);
    cmd.env("CSIVOL_NAMESPACE", "team-a");
    snap!(crate::support::run(cmd).await, @r"
    exit: 0
    --- stdout
    []
    --- stderr
    ");
}

/// A token narrowed to a namespace (`token create -n NS`) sees and touches that namespace
/// only, and its refusals name what it lacks and no other namespace.
#[tokio::test]
async fn a_token_narrowed_to_a_namespace_touches_only_it() {
    let env = Env::start("namespaces-tokens");
    env.volume("v1", "single-node-writer").await;
    for ns in ["team-a", "team-b"] {
        let r = env.run(&["namespace", "create", ns]).await;
        assert_eq!(r.code, 0, "{r}");
    }
    let spec = env.file(
        "db.toml",
        "name = \"db\"\nplugin = \"hp\"\nexternal_id = \"ext-db\"\n\
         access_mode = \"single-node-writer\"\nattachment = \"file-system\"\n",
    );
    let r = env
        .run(&["-n", "team-a", "volume", "register", &spec])
        .await;
    assert_eq!(r.code, 0, "{r}");
    let made = env
        .run(&[
            "token", "create", "--role", "claimer", "-n", "team-a", "--name", "ta",
        ])
        .await;
    assert_eq!(made.code, 0, "{made}");
    assert!(
        made.stderr
            .contains("named ta narrowed to namespaces team-a;"),
        "{made}"
    );
    let token = made.stdout.trim().to_owned();
    let as_team_a = |args: &[&str]| {
        let mut cmd = env.command(args);
        cmd.env("CSIVOL_TOKEN", &token);
        crate::support::run(cmd)
    };
    snap!(as_team_a(&["volume", "list", "-A"]).await, @r"
    exit: 0
    --- stdout
    NAMESPACE  NAME  PLUGIN  ACCESS MODE         STATE  CLAIMS  NODES
    team-a     db    hp      single-node-writer  free   -       -
    --- stderr
    ");
    snap!(as_team_a(&["namespace", "list"]).await, @r"
    exit: 0
    --- stdout
    NAME    VOLUMES  CLAIMS  SNAPSHOTS  CREATED
    team-a  1        0       0          [TIME]
    --- stderr
    ");
    snap!(as_team_a(&["volume", "show", "v1"]).await, @r"
    exit: 7
    --- stdout
    --- stderr
    error: this token is narrowed to namespaces `team-a`, and the request names namespace `default`
    hint: use a token made with `--namespace default` (or `--namespace '*'`)
    ");
    snap!(as_team_a(&["-n", "team-b", "volume", "list"]).await, @r"
    exit: 7
    --- stdout
    --- stderr
    error: this token is narrowed to namespaces `team-a`, and the request names namespace `team-b`
    hint: use a token made with `--namespace team-b` (or `--namespace '*'`)
    ");
    snap!(as_team_a(&["node", "list"]).await, @r"
    exit: 7
    --- stdout
    --- stderr
    error: this token is narrowed to namespaces `team-a`, and GET /v1/nodes covers the whole cluster
    hint: use a token not narrowed to namespaces or volume names (made without `--namespace` or `--volumes`)
    ");
    // Events carry their volume's namespace; a listing reads one namespace, or with -A
    // every one the token holds.
    let namespaces_of = |r: &crate::support::Run| -> Vec<String> {
        let mut seen: Vec<String> = r
            .json()
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["namespace"].as_str().unwrap_or("-").to_owned())
            .collect();
        seen.sort();
        seen.dedup();
        seen
    };
    let r = env.run(&["-n", "team-a", "events", "-o", "json"]).await;
    assert_eq!(namespaces_of(&r), ["team-a"], "{r}");
    assert_eq!(r.json()[0]["volume"], "db", "{r}");
    let r = env.run(&["events", "-o", "json"]).await;
    assert_eq!(namespaces_of(&r), ["-", "default"], "{r}");
    let r = env.run(&["events", "-A", "-o", "json"]).await;
    assert_eq!(namespaces_of(&r), ["-", "default", "team-a"], "{r}");
    let r = as_team_a(&["events", "-A", "-o", "json"]).await;
    assert_eq!(namespaces_of(&r), ["team-a"], "{r}");
    let r = as_team_a(&["events"]).await;
    assert_eq!(r.code, 7, "{r}");
    snap!(env.run(&["token", "show", "ta"]).await, @r"
    exit: 0
    --- stdout
    id:           [TOKEN-ID]
    name:         ta
    role:         claimer
    capabilities: read, claim
    added:        -
    namespaces:   team-a
    volumes:      * (every volume)
    node:         -
    status:       active
    created:      [TIME]
    last used:    [TIME]
    expires:      -
    --- stderr
    ");
    let r = env
        .run(&[
            "token", "create", "--role", "claimer", "-n", "team-a", "-n", "team-c",
        ])
        .await;
    assert_eq!(r.code, 3, "{r}");
    assert!(r.stderr.contains("no namespace `team-c`"), "{r}");
}
