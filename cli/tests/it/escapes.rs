//! Nothing a claimer, a node, a plugin or an operator wrote drives an operator's terminal.
//! Escape sequences (CSI that clears the screen, OSC that sets the window title, BEL, `\r`,
//! an 8-bit CSI) go through every free-text field: the server refuses them where a client
//! writes the text, and the CLI shows them escaped wherever they came from (a plugin's
//! error, the context CreateVolume returned, a controller's listing, a fence's output),
//! checked on a real terminal (util-linux `script`) for every command that prints them.
//! Node agents and their plugins are played by `FakeAgent`, below the line under test.

use csivol_tests::{FakeAgent, TestDir, eventually};
use serde_json::{Value, json};

use crate::support::{Env, Run, Terminal, WAIT, on_terminal, on_terminal_as};

/// What an attacker writes, tagged by where it went in.
fn evil(tag: &str) -> String {
    format!("{tag}\u{1b}[2J\u{1b}]0;{tag}\u{7}\r\u{9b}1m")
}

/// How the CLI shows it.
fn shown(tag: &str) -> String {
    format!("{tag}\\x1b[2J\\x1b]0;{tag}\\x07\\r\\x9b1m")
}

/// Characters of the output a terminal would obey: every control character but the line
/// ends, and the bidirectional overrides.
fn raw_controls(text: &str) -> Vec<(usize, char)> {
    text.char_indices()
        .filter(|(_, c)| *c != '\n' && csivol_api::is_control(*c))
        .collect()
}

/// A run on a terminal that printed no raw control character, and each of `expected`
/// shown escaped.
#[track_caller]
fn clean(r: &Run, what: &str, expected: &[&str]) {
    let raw = raw_controls(&r.stdout);
    assert!(
        raw.is_empty(),
        "`{what}` wrote raw control characters {raw:?}:\n{}",
        r.stdout.escape_debug()
    );
    for tag in expected {
        assert!(
            r.stdout.contains(&shown(tag)),
            "`{what}` does not show {tag} escaped:\n{}",
            r.stdout
        );
    }
}

/// Runs a printing command on a terminal as tables fit it, then with `-o wide` (nothing
/// cut), where each of `expected` must show.
async fn terminal(env: &Env, args: &[&str], expected: &[&str]) {
    let r = on_terminal(env, args, Terminal::Exit).await;
    assert!(matches!(r.code, 0 | 6), "{r}");
    clean(&r, &args.join(" "), &[]);
    let wide: Vec<&str> = args.iter().copied().chain(["-o", "wide"]).collect();
    let r = on_terminal(env, &wide, Terminal::Exit).await;
    assert!(matches!(r.code, 0 | 6), "{r}");
    clean(&r, &wide.join(" "), expected);
}

/// A refusal: exit 2, the field named, and no raw control character on the terminal.
#[track_caller]
fn refused(r: &Run, what: &str, field: &str) {
    clean(r, what, &[]);
    assert_eq!(r.code, 2, "`{what}` was not refused:\n{r}");
    assert!(
        r.stdout
            .contains(&format!("`{field}` holds the control character U+001B")),
        "`{what}` does not name `{field}`:\n{r}"
    );
}

/// A plugin `hp` registration; `evil_plugin` puts escapes in what the plugin says of
/// itself (name, version, node id, topology).
fn registration(node: &str, controller: bool, evil_plugin: bool, labels: Value) -> Value {
    let (name, version, node_id, topology) = if evil_plugin {
        (
            evil("plugin-name"),
            evil("plugin-version"),
            evil("node-id"),
            json!({"zone": evil("topology")}),
        )
    } else {
        (
            "hostpath.csivol.dev".to_owned(),
            "1".to_owned(),
            format!("csi-{node}"),
            json!({}),
        )
    };
    let controller = controller.then(|| json!({"create_delete_volume": true, "publish_unpublish_volume": true, "list_volumes": true, "list_volumes_published_nodes": true, "publish_readonly": false, "single_node_multi_writer": false}));
    json!({
        "labels": labels,
        "plugins": [{
            "id": "hp",
            "info": {"name": name, "vendor_version": version},
            "capabilities": {"controller_service": true, "volume_accessibility_constraints": evil_plugin},
            "node": {
                "info": {"node_id": node_id, "max_volumes_per_node": 0, "accessible_topology": topology},
                "capabilities": {"stage_unstage_volume": true, "get_volume_stats": false, "volume_condition": true, "single_node_multi_writer": false}
            },
            "controller": controller,
        }]
    })
}

async fn register(agent: &FakeAgent, body: Value) -> (u16, Value) {
    agent
        .api
        .post(&format!("/v1/nodes/{}/register", agent.node), body)
        .await
}

fn spec(env: &Env, name: &str, fields: Value) -> String {
    let mut spec = json!({
        "name": name, "plugin": "hp", "external_id": format!("ext-{name}"),
        "access_mode": "multi-node-multi-writer", "attachment": "file-system",
    });
    for (k, v) in fields.as_object().unwrap() {
        spec[k] = v.clone();
    }
    env.file(&format!("{name}.json"), &spec.to_string())
}

/// A server with a 1s heartbeat TTL and a fence method for n2 running `command` (TOML
/// array items), and a controller host of plugin `hp` (`evil_plugin`: see [`registration`]).
async fn start(name: &str, command: &str, evil_plugin: bool) -> (TestDir, Env, FakeAgent) {
    let config = TestDir::new(&format!("cli-{name}-config"));
    let path = config.join("server.toml");
    std::fs::write(
        &path,
        format!("[[fence]]\nname = \"m\"\ncommand = [{command}]\nnodes = [\"n2\"]\n"),
    )
    .unwrap();
    let env = Env::start_with(
        name,
        &[
            "--heartbeat-ttl=1s",
            &format!("--config={}", path.display()),
        ],
    );
    let host = FakeAgent::new(&env.server, "host").await;
    let (status, body) = register(&host, registration("host", true, evil_plugin, json!({}))).await;
    assert_eq!(status, 200, "{body}");
    (config, env, host)
}

/// n2 registers, `alloc` claims volume `v` on it while it heartbeats, then n2 falls silent
/// until it is lost.
async fn claimed_then_lost(env: &Env, n2: &FakeAgent, alloc: &str) {
    let (status, body) = register(n2, registration("n2", false, false, json!({}))).await;
    assert_eq!(status, 200, "{body}");
    let alive = n2.keep_alive();
    let r = env
        .run(&["claim", "v", "--node", "n2", "--alloc", alloc])
        .await;
    assert_eq!(r.code, 0, "{r}");
    drop(alive);
    let api = env.api();
    eventually("n2 to be lost", WAIT, || async {
        let (_, n) = api.get("/v1/nodes/n2").await;
        (n["status"] == "lost").then_some(())
    })
    .await;
}

/// Where a client writes free text, the server refuses control characters, naming the
/// field; the refusal itself reaches the terminal escaped.
#[tokio::test]
async fn the_server_refuses_control_characters_in_what_clients_write() {
    let (_config, env, host) = start("escapes-refused", "\"true\"", false).await;
    let _host_alive = host.keep_alive();
    let api = env.api();

    // An operator's volume specs: every free-text field, one at a time.
    let bad = evil("spec");
    let fields = [
        ("external_id", json!({"external_id": bad})),
        ("fs_type", json!({"fs_type": bad})),
        ("mount_flags", json!({"mount_flags": ["ro", bad]})),
        ("context.k", json!({"context": {"k": bad}})),
        ("parameters.k", json!({"parameters": {"k": bad}})),
        ("topology.zone", json!({"topology": [{"zone": bad}]})),
    ];
    for (field, fields) in fields {
        let file = spec(&env, "v-bad", fields);
        let r = on_terminal(&env, &["volume", "register", &file], Terminal::Exit).await;
        refused(&r, &format!("volume register with a bad {field}"), field);
    }
    let file = spec(&env, "v-bad", json!({"secrets": {bad.clone(): "x"}}));
    let r = on_terminal(&env, &["volume", "register", &file], Terminal::Exit).await;
    clean(&r, "volume register with a bad secret key", &[]);
    assert!(r.stdout.contains("`secrets` key `"), "{r}");
    let create = env.file(
        "c-bad.json",
        &json!({"name": "c-bad", "plugin": "hp", "access_mode": "single-node-writer", "attachment": "file-system", "parameters": {"k": bad}})
            .to_string(),
    );
    let r = on_terminal(&env, &["volume", "create", &create], Terminal::Exit).await;
    refused(&r, "volume create", "parameters.k");
    let (status, _) = api.get("/v1/volumes/v-bad").await;
    assert_eq!(status, 404, "nothing was registered");

    // A claimer's labels.
    let (_, claimer) = api.post("/v1/tokens", json!({"role": "claimer"})).await;
    let claimer = claimer["token"].as_str().unwrap().to_owned();
    let ok = spec(&env, "v", json!({}));
    assert_eq!(env.run(&["volume", "register", &ok]).await.code, 0);
    let n2 = FakeAgent::new(&env.server, "n2").await;
    let label = format!("job={}", evil("label"));
    let args = [
        "claim", "v", "--node", "n2", "--alloc", "a1", "--label", &label,
    ];
    let r = on_terminal_as(&env, &claimer, &args, Terminal::Exit).await;
    refused(&r, "claim --label", "labels.job");

    // A node's own labels.
    let (status, body) = register(
        &n2,
        registration("n2", false, false, json!({"rack": evil("agent-label")})),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("`labels.rack` holds the control character U+001B"),
        "{body}"
    );

    // An operator's reasons and node labels, on a node that holds a volume and is lost.
    claimed_then_lost(&env, &n2, "a1").await;
    let reason = evil("reason");
    for args in [
        vec!["unblock", "v", "--reason", &reason, "--yes"],
        vec!["unblock", "--node", "n2", "--reason", &reason, "--yes"],
        vec![
            "detach", "v", "--node", "n2", "--force", "--reason", &reason, "--yes",
        ],
        vec!["fence", "n2", "--reason", &reason, "--yes"],
    ] {
        let r = on_terminal(&env, &args, Terminal::Exit).await;
        refused(&r, &args[..2].join(" "), "reason");
    }
    let label = format!("rack={}", evil("node-label"));
    let r = on_terminal(&env, &["node", "label", "n2", &label], Terminal::Exit).await;
    refused(&r, "node label", "labels.rack");
    let (_, events) = api.get("/v1/events").await;
    assert!(
        !events.to_string().contains("\\u001b"),
        "nothing refused reached the event log: {events}"
    );
    let r = env.run(&["status", "--blocked", "-q"]).await;
    assert_eq!(r.code, 6, "v is still blocked: {r}");
}

/// Text the server must not refuse (it is a plugin's or an agent's account of what
/// happened) reaches every printing command escaped.
#[tokio::test]
async fn what_plugins_and_nodes_say_reaches_the_terminal_escaped() {
    // The fence method's output carries escapes too; the controller host's plugin says
    // things of itself with them.
    let printf = "\"printf\", \"{node} off fence-output\\\\033[2J\\\\033]0;fence-output\\\\007\\\\r\\\\302\\\\2331m\\\\n\"";
    let (_config, env, host) = start("escapes-shown", printf, true).await;
    let _host_alive = host.keep_alive();
    let n1 = FakeAgent::new(&env.server, "n1").await;
    assert_eq!(
        register(&n1, registration("n1", false, false, json!({})))
            .await
            .0,
        200
    );
    let _n1_alive = n1.keep_alive();

    // A claim on n1: its node reports what it waits for, its plugin's error, a condition,
    // a target path of its choosing and a drift.
    let ok = spec(&env, "v", json!({}));
    assert_eq!(env.run(&["volume", "register", &ok]).await.code, 0);
    let label = "job=https://ci.example/1";
    let r = env
        .run(&[
            "claim", "v", "--node", "n1", "--alloc", "a1", "--label", label,
        ])
        .await;
    assert_eq!(r.code, 0, "{r}");
    let op = host.wait_op("publish").await;
    host.report(json!([{"kind": "controller_published", "op": op["id"], "attempt": op["attempt"], "publish_context": {}}]))
        .await;
    n1.report(json!([
        {"kind": "waiting", "volume": "v", "alloc": "a1", "reason": evil("waiting"), "since_ms": 1, "timeout_ms": 60000},
        {"kind": "claim_error", "volume": "v", "alloc": "a1", "error": {"code": "UNAVAILABLE", "message": evil("plugin-error"), "final": false, "next_retry_at_ms": 1}},
    ]))
    .await;
    terminal(&env, &["volume", "show", "v"], &["plugin-error", "waiting"]).await;
    terminal(&env, &["claim", "list"], &["plugin-error"]).await;
    terminal(&env, &["status", "v"], &["plugin-error"]).await;
    n1.report(json!([
        {"kind": "published", "volume": "v", "alloc": "a1", "target_path": format!("/mnt/{}", evil("target"))},
        {"kind": "condition", "volume": "v", "alloc": "a1", "abnormal": true, "message": evil("condition")},
    ]))
    .await;
    terminal(&env, &["volume", "show", "v"], &["target", "condition"]).await;
    n1.report(json!([{"kind": "drift", "volume": "v", "alloc": "a1", "reason": evil("drift")}]))
        .await;

    // A volume CreateVolume made with a context and topology of the plugin's, and one it
    // failed with an error of its own.
    let create = |name: &str| {
        env.file(
            &format!("{name}.json"),
            &json!({"name": name, "plugin": "hp", "access_mode": "single-node-writer", "attachment": "file-system"})
                .to_string(),
        )
    };
    let (made, failed) = (create("made"), create("failed"));
    assert_eq!(env.run(&["volume", "create", &made]).await.code, 0);
    let op = host.wait_op("create").await;
    host.report(json!([{"kind": "created", "op": op["id"], "attempt": op["attempt"],
        "external_id": evil("external-id"), "capacity_bytes": 1024,
        "context": {"k": evil("context")}, "accessible_topology": [{"zone": evil("volume-topology")}]}]))
        .await;
    assert_eq!(env.run(&["volume", "create", &failed]).await.code, 0);
    let op = host.wait_op("create").await;
    host.report(
        json!([{"kind": "op_error", "op": op["id"], "attempt": op["attempt"],
        "error": {"code": "INVALID_ARGUMENT", "message": evil("create-error"), "final": true}}]),
    )
    .await;
    terminal(
        &env,
        &["volume", "show", "made"],
        &["external-id", "context", "volume-topology"],
    )
    .await;
    terminal(&env, &["volume", "show", "failed"], &["create-error"]).await;
    terminal(&env, &["volume", "list"], &[]).await;

    // The controller's listing: a volume csivol does not know, published to a node id it
    // does not know, and abnormal; confirmed by a second listing.
    let listing = json!([{"kind": "controller_volumes", "plugin": "hp", "started_ms": 1u64 << 47, "volumes": [
        {"external_id": evil("listed-volume"), "published_node_ids": [evil("listed-node")], "abnormal": evil("listed-abnormal")}
    ]}]);
    host.report(listing.clone()).await;
    host.report(listing).await;
    terminal(
        &env,
        &["status"],
        &["listed-volume", "listed-node", "listed-abnormal"],
    )
    .await;

    // What the plugin says of itself and of its node.
    terminal(
        &env,
        &["plugin", "list"],
        &["plugin-name", "plugin-version"],
    )
    .await;
    terminal(
        &env,
        &["plugin", "show", "hp"],
        &["plugin-name", "topology"],
    )
    .await;
    terminal(&env, &["node", "show", "host"], &["node-id", "topology"]).await;
    terminal(&env, &["node", "list"], &[]).await;

    // A node is lost holding a volume; its fence method's output carries escapes.
    let n2 = FakeAgent::new(&env.server, "n2").await;
    claimed_then_lost(&env, &n2, "a2").await;
    terminal(&env, &["status", "--blocked"], &[]).await;
    terminal(&env, &["fence", "n2", "--reason", "gone", "--dry-run"], &[]).await;
    // -q: no spinner while the method runs; the evidence is printed all the same.
    let args = ["fence", "n2", "--reason", "gone", "--yes", "-q"];
    let r = on_terminal(&env, &args, Terminal::Exit).await;
    assert_eq!(r.code, 0, "{r}");
    clean(&r, "fence", &["fence-output"]);
    terminal(&env, &["node", "show", "n2"], &[]).await;

    let logged = [
        "condition",
        "drift",
        "external-id",
        "create-error",
        "listed-abnormal",
        "fence-output",
    ];
    terminal(&env, &["events"], &logged).await;
    terminal(&env, &["node", "show", "n1"], &["condition"]).await;
    // Followed: each event on its line.
    let last = shown("fence-output");
    let r = on_terminal(
        &env,
        &["events", "--follow", "--tail", "1000"],
        Terminal::Until(&last),
    )
    .await;
    clean(
        &r,
        "events --follow",
        &["drift", "condition", "listed-abnormal"],
    );

    // JSON output stays exact: the escapes are JSON's own.
    let r = env.run(&["volume", "show", "made", "-o", "json"]).await;
    assert_eq!(r.json()["context"]["k"], evil("context"), "{r}");
}
