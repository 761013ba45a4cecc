//! `csivol volume ...`: spec files, listing, showing, deregistering, creating and deleting
//! through the plugin's controller.

use serde_json::json;

use csivol_tests::{FakeAgent, eventually};

use crate::support::{Env, WAIT, done, make_ready};

const SPEC: &str = r#"name = "v1"
plugin = "hp"
external_id = "ext-v1"
access_mode = "single-node-writer"
attachment = "file-system"
fs_type = "ext4"
mount_flags = ["noatime"]

[context]
zone = "a"

[secrets]
password = "hunter2"
"#;

#[tokio::test]
async fn register_show_list() {
    let env = Env::start("volumes");
    let spec = env.file("v1.toml", SPEC);
    snap!(env.run(&["volume", "register", &spec]).await, @r"
    exit: 0
    --- stdout
    volume v1
      state:        free
      plugin:       hp
      external id:  ext-v1
      access mode:  single-node-writer
      attachment:   file-system
      fs type:      ext4
      mount flags:  noatime
      context:      zone=a
      parameters:   -
      secrets:      password=<redacted>
      created:      [TIME] ([AGE] ago)

    attachments: none

    claims: none
    --- stderr
    registered volume v1
    ");
    let again = env.run(&["volume", "register", &spec]).await;
    assert_eq!(again.code, 0, "{again}");
    assert!(
        again
            .stderr
            .contains("already registered with this spec; nothing changed"),
        "{again}"
    );

    // JSON from stdin; the answer is the API's volume with the secret's key only.
    let json_spec = json!({
        "name": "v2", "plugin": "hp", "external_id": "ext-v2",
        "access_mode": "multi-node-reader-only", "attachment": "file-system",
        "parameters": {"tier": "gold"}, "secrets": {"password": "hunter2"}
    });
    let r = env
        .run_stdin(
            &["volume", "register", "-", "-o", "json"],
            &json_spec.to_string(),
        )
        .await;
    snap!(r, @r#"
    exit: 0
    --- stdout
    {
      "name": "v2",
      "namespace": "default",
      "plugin": "hp",
      "external_id": "ext-v2",
      "access_mode": "multi-node-reader-only",
      "attachment": "file-system",
      "state": "free",
      "accepts_claims": true,
      "context": {},
      "parameters": {
        "tier": "gold"
      },
      "secret_keys": [
        "password"
      ],
      "mutable_parameters": {},
      "claims": [],
      "attachments": [],
      "created_at": "[TIME]",
      "updated_at": "[TIME]",
      "index": [INDEX]
    }
    --- stderr
    "#);

    snap!(env.run(&["volume", "list"]).await, @r"
    exit: 0
    --- stdout
    NAME  PLUGIN  ACCESS MODE             STATE  CLAIMS  NODES
    v1    hp      single-node-writer      free   -       -
    v2    hp      multi-node-reader-only  free   -       -
    --- stderr
    ");
    let r = env.run(&["volume", "list", "-o", "json"]).await;
    let names: Vec<_> = r
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].clone())
        .collect();
    assert_eq!(names, [json!("v1"), json!("v2")]);
    snap!(env.run(&["volume", "list", "--plugin", "other"]).await, @r"
    exit: 0
    --- stdout
    --- stderr
    no volumes
    ");
    snap!(env.run(&["volume", "list", "--state", "attached", "-o", "json"]).await, @r"
    exit: 0
    --- stdout
    []
    --- stderr
    ");
    let r = env.run(&["volume", "show", "v2"]).await;
    assert_eq!(r.code, 0, "{r}");
    assert!(r.stdout.contains("parameters:   tier=gold"), "{r}");
    let r = env.run(&["volume", "show", "v1", "-o", "json"]).await;
    assert_eq!(r.json()["secret_keys"], json!(["password"]));

    // A changed spec for a free volume is an update.
    let changed = env.file("v1b.toml", &SPEC.replace("ext4", "xfs"));
    let r = env.run(&["volume", "register", &changed]).await;
    assert_eq!(r.code, 0, "{r}");
    assert!(r.stdout.contains("fs type:      xfs"), "{r}");

    // No output of any command so far has shown a secret.
    for args in [
        vec!["volume", "list", "-o", "json"],
        vec!["status", "v1", "-o", "json"],
        vec!["status"],
        vec!["events", "-o", "json"],
    ] {
        let r = env.run(&args).await;
        assert!(
            !r.to_string().contains("hunter2"),
            "{args:?} printed a secret: {r}"
        );
    }
}

#[tokio::test]
async fn bad_spec_files_name_the_file_and_the_field() {
    let env = Env::start("bad-specs");
    let f = env.file(
        "mode.toml",
        &SPEC.replace("single-node-writer", "single-writer"),
    );
    snap!(env.run(&["volume", "register", &f]).await, @r"
    exit: 2
    --- stdout
    --- stderr
    error: invalid volume spec [TMP]/mode.toml: line 4, column 15: unknown variant `single-writer`, expected one of `single-node-reader-only`, `single-node-writer`, `single-node-single-writer`, `single-node-multi-writer`, `multi-node-reader-only`, `multi-node-single-writer`, `multi-node-multi-writer` (field `access_mode`)
    hint: a spec needs `name`, `plugin`, `external_id`, `access_mode`, `attachment`; `csivol volume register --help` lists every field and its values
    ");
    let f = env.file("typo.json", r#"{"name": "v1", "plugn": "hp"}"#);
    snap!(env.run(&["volume", "register", &f]).await, @"
    exit: 2
    --- stdout
    --- stderr
    error: invalid volume spec [TMP]/typo.json: line 1, column 22: unknown field `plugn`, expected one of `name`, `plugin`, `external_id`, `access_mode`, `attachment`, `fs_type`, `mount_flags`, `context`, `parameters`, `secrets`, `topology`, `claim_mount_flags`, `selinux_context`, `ownership`, `labels`
    hint: a spec needs `name`, `plugin`, `external_id`, `access_mode`, `attachment`; `csivol volume register --help` lists every field and its values
    ");
    // A secret of the wrong type: the error names the key, never the value.
    let f = env.file("secret.toml", &SPEC.replace("\"hunter2\"", "12345678"));
    let r = env.run(&["volume", "register", &f]).await;
    snap!(r, @r"
    exit: 2
    --- stdout
    --- stderr
    error: invalid volume spec [TMP]/secret.toml: line 13, column 12: a secret's value must be a string (the value is not shown) (field `password`)
    hint: a spec needs `name`, `plugin`, `external_id`, `access_mode`, `attachment`; `csivol volume register --help` lists every field and its values
    ");
    let f = env.file("name.toml", &SPEC.replace("\"v1\"", "\"../etc\""));
    snap!(env.run(&["volume", "register", &f]).await, @r"
    exit: 2
    --- stdout
    --- stderr
    error: invalid volume spec [TMP]/name.toml: field `name`: invalid volume name `../etc`: use 1 to 128 letters, digits, `.`, `_` or `-`, starting with a letter or digit
    ");
    snap!(env.run(&["volume", "register", "/nonexistent/v.toml"]).await, @r"
    exit: 2
    --- stdout
    --- stderr
    error: cannot read volume spec /nonexistent/v.toml: No such file or directory (os error 2)
    ");
    // The server's own checks come back as usage errors too.
    let f = env.file("block.toml", &SPEC.replace("file-system", "block-device"));
    snap!(env.run(&["volume", "register", &f]).await, @r#"
    exit: 2
    --- stdout
    --- stderr
    error: failed to register volume `v1`: a block-device volume takes no `fs_type` or `mount_flags`
    hint: remove them, or use `attachment = "file-system"`
    "#);
}

#[tokio::test]
async fn deregister_asks_and_refuses_while_claimed() {
    let env = Env::start("deregister");
    env.volume("v1", "single-node-writer").await;
    env.volume("v2", "single-node-writer").await;
    let _n1 = env.node("n1", 0).await;

    snap!(env.run(&["volume", "deregister", "v1"]).await, @"
    exit: 2
    --- stdout
    --- stderr
    This deregisters volume v1: csivol forgets it; the storage itself (external id ext-v1) is kept in plugin hp.
    error: refusing to deregister volume v1 without confirmation: stdin is not a terminal; nothing was changed
    hint: run it again with --yes
    ");
    assert_eq!(
        env.run(&["volume", "show", "v1"]).await.code,
        0,
        "still there"
    );
    snap!(env.run(&["volume", "deregister", "v1", "--yes"]).await, @r"
    exit: 0
    --- stdout
    --- stderr
    deregistered volume v1
    ");
    assert_eq!(env.run(&["volume", "show", "v1"]).await.code, 3);

    let r = env
        .run(&["claim", "v2", "--node", "n1", "--alloc", "a1"])
        .await;
    assert_eq!(r.code, 0, "{r}");
    snap!(env.run(&["volume", "deregister", "v2", "--yes"]).await, @"
    exit: 4
    --- stdout
    --- stderr
    error: failed to deregister volume v2: volume `v2` is claimed: a1 on n1 (attaching)
    hint: release the claims first (`csivol release v2 --alloc ALLOC`)
    ");
}

#[tokio::test]
async fn create_and_delete_through_the_controller() {
    let env = Env::start("create");
    let host = env.node("n1", 0).await;
    let spec = |name: &str| {
        env.file(
            &format!("{name}.toml"),
            &format!(
                "name = \"{name}\"\nplugin = \"hp\"\naccess_mode = \"single-node-writer\"\n\
                 attachment = \"file-system\"\ncapacity_bytes = 1048576\n[secrets]\ntoken = \"hunter2\"\n"
            ),
        )
    };

    // With --wait: the agent's CreateVolume report finishes it. (The CreateVolume operation
    // exists only once the CLI asked for it, so the CLI is waiting, or about to.)
    let cli = env.spawn(&["volume", "create", &spec("fresh"), "--wait"]);
    let op = host.wait_op("create").await;
    assert_eq!(op["capacity_bytes"], 1048576);
    host.report(json!([{"kind": "created", "op": op["id"], "attempt": op["attempt"], "external_id": "hp-fresh", "capacity_bytes": 1048576}]))
        .await;
    let r = done(cli).await;
    assert_eq!(r.code, 0, "{r}");
    assert!(
        r.stderr
            .starts_with("creating volume fresh through plugin hp\n"),
        "{r}"
    );
    assert!(r.stderr.ends_with("created volume fresh\n"), "{r}");
    snap!(r.stdout, @r"
    volume fresh
      state:        free
      plugin:       hp
      external id:  hp-fresh
      access mode:  single-node-writer
      attachment:   file-system
      capacity:     1 MiB
      context:      -
      parameters:   -
      secrets:      token=<redacted>
      created:      [TIME] ([AGE] ago)

    attachments: none

    claims: none
    ");

    // The same spec again: it exists, and the CLI says so rather than "created".
    let r = env
        .run(&["volume", "create", &spec("fresh"), "--wait"])
        .await;
    assert_eq!(r.code, 0, "{r}");
    assert_eq!(
        r.stderr, "volume fresh already exists with this spec (free); nothing changed\n",
        "{r}"
    );

    // Delete, waiting until it is gone.
    let cli = env.spawn(&[
        "volume",
        "deregister",
        "fresh",
        "--delete",
        "--yes",
        "--wait",
    ]);
    let op = host.wait_op("delete").await;
    assert_eq!(op["external_id"], "hp-fresh");
    host.report(json!([{"kind": "deleted", "op": op["id"], "attempt": op["attempt"]}]))
        .await;
    let r = done(cli).await;
    assert_eq!(r.code, 0, "{r}");
    assert_eq!(r.stdout, "", "gone: no data");
    assert!(r.stderr.ends_with("deleted volume fresh\n"), "{r}");
    assert_eq!(env.run(&["volume", "show", "fresh"]).await.code, 3);

    // A CreateVolume that fails for good: exit 1 with the plugin's message.
    let cli = env.spawn(&["volume", "create", &spec("doomed"), "--wait"]);
    let op = host.wait_op("create").await;
    host.report(json!([{"kind": "op_error", "op": op["id"], "attempt": op["attempt"], "error": {"code": "INVALID_ARGUMENT", "message": "capacity too small", "final": true}}]))
        .await;
    let r = done(cli).await;
    let last: Vec<_> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("error:") || l.starts_with("hint:"))
        .collect();
    assert_eq!(r.code, 1, "{r}");
    snap!(last.join("\n"), @"
    error: volume doomed could not be created: CreateVolume failed: INVALID_ARGUMENT: capacity too small
    hint: fix the cause, then create it again (the failed record is replaced), or `csivol volume deregister doomed`
    ");

    // Without --wait: the volume as recorded, still creating.
    snap!(env.run(&["volume", "create", &spec("later"), "-o", "json"]).await, @r#"
    exit: 0
    --- stdout
    {
      "name": "later",
      "namespace": "default",
      "plugin": "hp",
      "external_id": "",
      "access_mode": "single-node-writer",
      "attachment": "file-system",
      "state": "creating",
      "accepts_claims": false,
      "capacity_bytes": 1048576,
      "context": {},
      "parameters": {},
      "secret_keys": [
        "token"
      ],
      "mutable_parameters": {},
      "claims": [],
      "attachments": [],
      "created_at": "[TIME]",
      "updated_at": "[TIME]",
      "index": [INDEX]
    }
    --- stderr
    "#);
}

#[tokio::test]
async fn a_creation_that_cannot_run_is_refused_or_cancelled() {
    let env = Env::start("create-cancel");
    let spec = |name: &str, plugin: &str| {
        env.file(
            &format!("{name}.toml"),
            &format!(
                "name = \"{name}\"\nplugin = \"{plugin}\"\naccess_mode = \"single-node-writer\"\n\
                 attachment = \"file-system\"\ncapacity = \"1M\"\n"
            ),
        )
    };
    // No node has registered any plugin: refused at once, nothing recorded.
    snap!(env.run(&["volume", "create", &spec("v0", "hp")]).await, @r"
    exit: 3
    --- stdout
    --- stderr
    error: failed to create volume `v0`: plugin `hp` is not registered: no node runs it
    hint: no node has registered a plugin yet: start a node agent with `--plugin ID=ENDPOINT` (and `--controller ID=ENDPOINT` where it hosts the plugin's controller)
    ");
    // A node runs plugin hp but does not host its controller.
    let n1 = FakeAgent::new(&env.server, "n1").await;
    n1.register(0, false, json!([])).await;
    snap!(env.run(&["volume", "create", &spec("v1", "hpp"), "--wait"]).await, @r"
    exit: 3
    --- stdout
    --- stderr
    error: failed to create volume `v1`: plugin `hpp` is not registered: no node runs it
    hint: did you mean plugin `hp`? (known plugins: hp; `csivol plugin list` shows them; a plugin is known once a node's agent registers it)
    ");
    assert_eq!(env.run(&["volume", "show", "v1"]).await.code, 3);

    // CreateVolume cannot run: no agent hosts the controller. The wait says so and how to
    // cancel; the cancel calls nothing in the plugin and says so in the event log.
    let r = env
        .run(&[
            "volume",
            "create",
            &spec("v1", "hp"),
            "--wait",
            "--timeout",
            "1s",
        ])
        .await;
    assert_eq!(r.code, 5, "{r}");
    let last: Vec<_> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("error:") || l.starts_with("hint:"))
        .collect();
    snap!(last.join("\n"), @r"
    error: timed out after 1s waiting for volume v1 to be created; where it stands: creating: waiting for a controller host: no healthy agent hosts the controller of plugin `hp`
    hint: `csivol status v1` shows where it stands; wait longer with --timeout, or cancel the creation with `csivol volume deregister v1`
    ");
    snap!(env.run(&["volume", "deregister", "v1", "--yes"]).await, @r"
    exit: 0
    --- stdout
    --- stderr
    cancelled the creation of volume v1; nothing was made in plugin hp, and the volume is deregistered
    ");
    snap!(env.run(&["events", "--volume", "v1"]).await, @r"
    exit: 0
    --- stdout
    INDEX  TIME                  KIND                     VOLUME  NODE  ALLOC  ACTOR                  MESSAGE
    3      [TIME]  volume-creating          v1      -     -      operator:[TOKEN-ID]  CreateVolume requested from plugin hp
    4      [TIME]  volume-create-cancelled  v1      -     -      operator:[TOKEN-ID]  creation cancelled: CreateVolume through plugin hp never ran (last: waiting for a controller host: no healthy agent hosts the controller of plugin `hp`); nothing was deleted in the storage system
    --- stderr
    ");
    let r = env.run(&["status", "-o", "json"]).await;
    assert_eq!(
        r.json()["volumes_by_state"],
        json!({}),
        "nothing is left counted: {r}"
    );

    // A CreateVolume call is out at a controller host when the cancel comes: its answer
    // decides. Here it made the volume after all: csivol deletes it through the plugin.
    let host = env.node("n2", 0).await;
    assert_eq!(
        env.run(&["volume", "create", &spec("v2", "hp")]).await.code,
        0
    );
    let op = host.wait_op("create").await;
    snap!(env.run(&["volume", "deregister", "v2", "--yes"]).await, @r"
    exit: 0
    --- stdout
    --- stderr
    cancelling the creation of volume v2: a CreateVolume call is still running; if it makes the volume, DeleteVolume follows
    ");
    assert_eq!(
        env.run(&["volume", "show", "v2", "-o", "json"])
            .await
            .json()["state"],
        "deleting"
    );
    host.report(json!([{"kind": "created", "op": op["id"], "attempt": op["attempt"], "external_id": "hp-v2", "capacity_bytes": 1048576}]))
        .await;
    let op = host.wait_op("delete").await;
    assert_eq!(op["external_id"], "hp-v2");
    host.report(json!([{"kind": "deleted", "op": op["id"], "attempt": op["attempt"]}]))
        .await;
    assert_eq!(env.run(&["volume", "show", "v2"]).await.code, 3);

    // Here the call failed: it made nothing, and the cancel ends without DeleteVolume.
    assert_eq!(
        env.run(&["volume", "create", &spec("v3", "hp")]).await.code,
        0
    );
    let op = host.wait_op("create").await;
    assert_eq!(
        env.run(&["volume", "deregister", "v3", "--yes"]).await.code,
        0
    );
    host.report(json!([{"kind": "op_error", "op": op["id"], "attempt": op["attempt"], "error": {"code": "DEADLINE_EXCEEDED", "message": "backend slow", "final": false}}]))
        .await;
    assert_eq!(env.run(&["volume", "show", "v3"]).await.code, 3);
    assert!(
        host.desired().await["controller_ops"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let r = env.run(&["events", "--volume", "v3", "-o", "json"]).await;
    let kinds: Vec<_> = r
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].clone())
        .collect();
    assert_eq!(
        kinds,
        [
            json!("volume-creating"),
            json!("volume-deleting"),
            json!("volume-create-cancelled")
        ],
        "{r}"
    );
}

/// One volume out of service: `volume drain --wait` takes no new claims, waits for the
/// owner's release and never forces one; the refusal says who and why; `volume
/// eligibility --enable` puts it back, and a claim is taken again.
#[tokio::test]
async fn a_drained_volume_takes_no_new_claims_until_it_is_enabled() {
    let env = Env::start("volume-drain");
    env.volume("v1", "single-node-writer").await;
    let n1 = env.node("n1", 0).await;
    let r = env
        .run(&["claim", "v1", "--node", "n1", "--alloc", "a1"])
        .await;
    assert_eq!(r.code, 0, "{r}");
    make_ready(&n1, &n1, "v1", "a1").await;

    let drain = env.spawn(&[
        "volume",
        "drain",
        "v1",
        "--reason",
        "moving to new disks",
        "--wait",
        "--deadline",
        "1m",
    ]);
    eventually("v1 to be draining", WAIT, || async {
        let (_, v) = env.api().get("/v1/volumes/v1").await;
        (v["availability"]["eligibility"] == "draining").then_some(())
    })
    .await;
    let r = env
        .run(&["claim", "v1", "--node", "n1", "--alloc", "a2", "--queue"])
        .await;
    assert_eq!(r.code, 4, "{r}");
    assert!(
        r.stderr.contains("volume `v1` is being drained (operator:")
            && r.stderr
                .contains(": moving to new disks): it takes no new claims"),
        "{r}"
    );
    assert!(
        r.stderr
            .contains("hint: claim another volume, or make it eligible again: csivol volume eligibility v1 --enable"),
        "{r}"
    );
    let r = env.run(&["volume", "show", "v1"]).await;
    assert!(r.stdout.contains("attached, draining"), "{r}");
    assert!(
        r.stdout.contains("draining, no new claims, since ")
            && r.stdout.contains(": moving to new disks"),
        "{r}"
    );

    // The owner releases; the drain's wait ends.
    let r = env.run(&["release", "v1", "--alloc", "a1"]).await;
    assert_eq!(r.code, 0, "{r}");
    n1.report(json!([
        {"kind": "unpublished", "volume": "v1", "alloc": "a1"},
        {"kind": "unstaged", "volume": "v1"}
    ]))
    .await;
    let r = done(drain).await;
    assert_eq!(r.code, 0, "{r}");
    assert_eq!(r.stdout, "volume v1 is drained: no claim holds it\n", "{r}");
    assert!(
        r.stderr
            .starts_with("draining volume v1: still held by a1 on n1"),
        "{r}"
    );

    let r = env
        .run(&["volume", "eligibility", "v1", "--enable", "-o", "json"])
        .await;
    assert_eq!(r.code, 0, "{r}");
    assert!(r.json().get("availability").is_none(), "{r}");
    let r = env
        .run(&["claim", "v1", "--node", "n1", "--alloc", "a3"])
        .await;
    assert_eq!(r.code, 0, "{r}");
    let r = env.run(&["events", "--volume", "v1", "-o", "json"]).await;
    let kinds: Vec<String> = r
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        kinds.contains(&"volume-draining".to_owned())
            && kinds.contains(&"volume-eligible".to_owned()),
        "{kinds:?}"
    );
}
