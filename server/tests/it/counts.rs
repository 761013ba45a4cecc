//! Every list a client sends is bounded in count, and its entries in size, with the limit
//! in the error; and a claimer token holds at most `[limits] claims_per_claimer` claims at
//! once, those recorded before the limit existed kept and counted for nobody.

use csivol_tests::{Api, FakeAgent, ServerProc, TestDir};
use serde_json::{Value, json};

use crate::{WAIT, start};

/// A 422 whose message starts with `want` (the field, its count and the limit).
#[track_caller]
fn refused(status: u16, body: &Value, want: &str) {
    assert_eq!(status, 422, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with(want), "want {want:?}, got {body}");
}

/// `n` names: `{prefix}0`, `{prefix}1`...
fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

/// A registration of plugin `id` as an agent sends it.
fn plugin(node: &str, id: &str) -> Value {
    json!({
        "id": id,
        "info": {"name": "hostpath.csivol.dev", "vendor_version": "1"},
        "capabilities": {"controller_service": false, "volume_accessibility_constraints": false},
        "node": {
            "info": {"node_id": format!("csi-{node}-{id}"), "max_volumes_per_node": 0},
            "capabilities": {"stage_unstage_volume": true, "get_volume_stats": false, "volume_condition": false, "single_node_multi_writer": false}
        },
        "controller": null,
    })
}

#[tokio::test]
async fn every_list_a_client_sends_is_bounded_in_count_and_the_error_names_the_limit() {
    let dir = TestDir::new("counts-lists");
    let server = start(&dir, &[]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(0, false, json!([])).await;
    let (s, b) = api
        .put(
            "/v1/volumes/v",
            json!({"plugin": "hp", "external_id": "ext-v", "access_mode": "single-node-writer",
                "attachment": "file-system"}),
        )
        .await;
    assert_eq!(s, 201, "{b}");
    let (_, tokens_before) = api.get("/v1/tokens").await;

    // An operator's lists: a token's plugins, controller hosts allowed and disallowed, a
    // group's volumes, label keys removed, mount flags (empty ones, which count no bytes).
    let (s, b) = api
        .post(
            "/v1/tokens",
            json!({"role": "node", "node": "n9", "controllers": names("p", 65)}),
        )
        .await;
    refused(
        s,
        &b,
        "`controllers` holds 65 plugins, more than the 64 csivol allows",
    );
    for list in ["allow", "disallow"] {
        let (s, b) = api
            .post("/v1/plugins/hp/controllers", json!({list: names("n", 257)}))
            .await;
        refused(
            s,
            &b,
            &format!("`{list}` holds 257 nodes, more than the 256 csivol allows"),
        );
    }
    let (s, b) = api
        .put("/v1/group-snapshots/g", json!({"volumes": names("v", 65)}))
        .await;
    refused(
        s,
        &b,
        "`volumes` holds 65 volumes, more than the 64 csivol allows",
    );
    let (s, b) = api
        .post("/v1/nodes/n1/labels", json!({"remove": names("k", 65)}))
        .await;
    refused(
        s,
        &b,
        "`remove` holds 65 label keys, more than the 64 csivol allows",
    );
    let (s, b) = api
        .put(
            "/v1/volumes/w",
            json!({"plugin": "hp", "external_id": "ext-w", "access_mode": "single-node-writer",
                "attachment": "file-system", "mount_flags": vec![""; 65]}),
        )
        .await;
    refused(
        s,
        &b,
        "`mount_flags` holds 65 flags, more than the 64 csivol allows",
    );

    // A node's agent: its plugins, what it holds, and its report batches.
    let register = |body: Value| {
        let api = n1.api.clone();
        async move { api.post("/v1/nodes/n1/register", body).await }
    };
    let many: Vec<Value> = names("hp", 65).iter().map(|id| plugin("n1", id)).collect();
    let (s, b) = register(json!({"plugins": many})).await;
    refused(
        s,
        &b,
        "`plugins` holds 65 plugins, more than the 64 csivol allows",
    );
    let published: Vec<Value> = names("a", 10_001)
        .iter()
        .map(|a| json!({"volume": "v", "alloc": a}))
        .collect();
    let (s, b) = register(json!({"plugins": [plugin("n1", "hp")], "published": published})).await;
    refused(
        s,
        &b,
        "`published` holds 10001 claims, more than the 10000 csivol allows",
    );
    let (s, b) =
        register(json!({"plugins": [plugin("n1", "hp")], "staged": names("v", 10_001)})).await;
    refused(
        s,
        &b,
        "`staged` holds 10001 volumes, more than the 10000 csivol allows",
    );
    // What it holds names csivol's volumes and allocs, each held to the naming rule.
    let long = "v".repeat(129);
    let (s, b) = register(json!({"plugins": [plugin("n1", "hp")], "staged": [long]})).await;
    refused(s, &b, "invalid volume name");
    let (s, b) = register(json!({"plugins": [plugin("n1", "hp")],
        "published": [{"volume": "v", "alloc": "a".repeat(129)}]}))
    .await;
    refused(s, &b, "invalid alloc name");
    let reports: Vec<Value> = (0..1001)
        .map(|_| json!({"kind": "unstaged", "volume": "v"}))
        .collect();
    let (s, b) = n1
        .api
        .post("/v1/nodes/n1/reports", json!({"reports": reports}))
        .await;
    refused(
        s,
        &b,
        "`reports` holds 1001 reports, more than the 1000 csivol allows",
    );

    // Within the limits each is taken, and nothing refused was recorded.
    let (s, b) = api
        .post(
            "/v1/tokens",
            json!({"role": "node", "node": "n9", "controllers": names("p", 64)}),
        )
        .await;
    assert_eq!(s, 201, "{b}");
    let (s, b) = api
        .post(
            "/v1/plugins/hp/controllers",
            json!({"allow": names("n", 256)}),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    n1.register(0, false, json!([])).await;
    let (_, tokens) = api.get("/v1/tokens").await;
    assert_eq!(
        tokens.as_array().unwrap().len(),
        tokens_before.as_array().unwrap().len() + 1
    );
    let (s, _) = api.get("/v1/volumes/w").await;
    assert_eq!(s, 404);
    let (s, _) = api.get("/v1/group-snapshots/g").await;
    assert_eq!(s, 404);
}

/// A claim of `alloc` on volume `volume`, node `n1`.
async fn claim(api: &Api, volume: &str, alloc: &str, queue: bool) -> (u16, Value) {
    api.post(
        &format!("/v1/volumes/{volume}/claims"),
        json!({"alloc": alloc, "node": "n1", "mode": "write", "queue": queue}),
    )
    .await
}

/// Volume `v`, which takes any number of claims, and `one`, which takes one at a time, on
/// node `n1` (no controller: claims go straight to the node).
async fn volumes(server: &ServerProc, api: &Api) -> FakeAgent {
    let n1 = FakeAgent::new(server, "n1").await;
    n1.register(0, false, json!([])).await;
    for (name, mode) in [
        ("v", "multi-node-multi-writer"),
        ("one", "single-node-single-writer"),
    ] {
        let (s, b) = api
            .put(
                &format!("/v1/volumes/{name}"),
                json!({"plugin": "hp", "external_id": format!("ext-{name}"), "access_mode": mode,
                    "attachment": "file-system"}),
            )
            .await;
        assert_eq!(s, 201, "{b}");
    }
    n1
}

async fn claimer(api: &Api, name: &str) -> Api {
    let (s, t) = api
        .post("/v1/tokens", json!({"role": "claimer", "name": name}))
        .await;
    assert_eq!(s, 201, "{t}");
    api.with_token(t["token"].as_str())
}

fn config(dir: &TestDir, text: &str) -> String {
    let path = dir.join("server.toml");
    std::fs::write(&path, text).unwrap();
    format!("--config={}", path.display())
}

/// The refusal of a claimer past its limit: a conflict naming it, its count and where the
/// limit is set.
#[track_caller]
fn past_the_limit(status: u16, body: &Value, who: &str, held: usize) {
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        body["error"]["message"],
        format!(
            "{who} holds {held} claims (queued ones included), as many as this server allows one claimer token (`claims_per_claimer` in its [limits])"
        ),
        "{body}"
    );
    assert!(
        body["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("raise [limits] claims_per_claimer"),
        "{body}"
    );
}

#[tokio::test]
async fn a_claimers_claims_are_bounded_in_number_queued_ones_included() {
    let dir = TestDir::new("counts-claims");
    let cfg = config(&dir, "[limits]\nclaims_per_claimer = 2\n");
    let server = start(&dir, &[&cfg]);
    let api = server.api();
    let _n1 = volumes(&server, &api).await;
    let ci = claimer(&api, "ci").await;

    // `one` is held by an operator's claim: the claimer's claim of it waits in line.
    assert_eq!(claim(&api, "one", "op1", false).await.0, 201);
    assert_eq!(claim(&ci, "v", "a1", false).await.0, 201);
    let (s, b) = claim(&ci, "one", "q1", true).await;
    assert_eq!((s, b["state"].as_str()), (201, Some("queued")), "{b}");
    // Two held, a queued one among them: a third is refused, with nothing recorded.
    let (s, b) = claim(&ci, "v", "a2", false).await;
    past_the_limit(s, &b, "claimer:ci", 2);
    let (s, _) = api.get("/v1/volumes/v/claims/a2").await;
    assert_eq!(s, 404);
    // Asking again for a claim it holds is no new claim.
    assert_eq!(claim(&ci, "v", "a1", false).await.0, 200);
    // Another claimer token counts its own; an operator's claims count for nobody.
    let other = claimer(&api, "other").await;
    assert_eq!(claim(&other, "v", "b1", false).await.0, 201);
    for alloc in ["op2", "op3", "op4"] {
        assert_eq!(claim(&api, "v", alloc, false).await.0, 201);
    }
    // The queued claim leaves the line: room for one more.
    let (s, b) = ci.delete("/v1/volumes/one/claims/q1").await;
    assert_eq!(s, 202, "{b}");
    let (s, _) = api.get("/v1/volumes/one/claims/q1").await;
    assert_eq!(s, 404, "a queued claim leaves at once");
    assert_eq!(claim(&ci, "v", "a2", false).await.0, 201);
    let (s, b) = claim(&ci, "v", "a3", false).await;
    past_the_limit(s, &b, "claimer:ci", 2);
}

#[tokio::test]
async fn claims_recorded_before_the_bound_are_kept_and_count_for_nobody() {
    let dir = TestDir::new("counts-upgrade");
    let data = dir.join("server");
    let mut server = ServerProc::start(&data, &[]);
    let api = server.api();
    let _n1 = volumes(&server, &api).await;
    let ci = claimer(&api, "ci").await;
    for alloc in ["a1", "a2", "a3"] {
        assert_eq!(claim(&ci, "v", alloc, false).await.0, 201);
    }
    server.proc.terminate(WAIT);
    // The schema before claimers were recorded (the release before this one's).
    let conn = rusqlite::Connection::open(data.join("state.db")).unwrap();
    crate::back_to_the_previous_schema(&conn);
    drop(conn);

    // Migrated with a limit below what the claimer holds: all three are kept, none counts.
    let cfg = config(&dir, "[limits]\nclaims_per_claimer = 2\n");
    let server = ServerProc::start(&data, &[&cfg]);
    let api = server.api();
    let ci = Api::new(&server.url, ci.token.as_deref());
    let (_, claims) = api.get("/v1/claims?volume=v").await;
    assert_eq!(claims.as_array().unwrap().len(), 3, "{claims}");
    assert_eq!(claim(&ci, "v", "a4", false).await.0, 201);
    assert_eq!(claim(&ci, "v", "a5", false).await.0, 201);
    let (s, b) = claim(&ci, "v", "a6", false).await;
    past_the_limit(s, &b, "claimer:ci", 2);
    // A claim it held before asked for again is still its own.
    assert_eq!(claim(&ci, "v", "a1", false).await.0, 200);
}

/// Lists an older csivol recorded beyond today's counts (a volume's mount flags, a node
/// token's plugins) are kept and shown, and still serve; only new ones are refused.
#[tokio::test]
async fn lists_recorded_beyond_the_counts_are_kept_and_shown_and_new_ones_refused() {
    let dir = TestDir::new("counts-kept");
    let data = dir.join("server");
    let mut server = ServerProc::start(&data, &[]);
    let api = server.api();
    let spec = |flags: &[String]| {
        json!({"plugin": "hp", "external_id": "ext-v", "access_mode": "single-node-writer",
            "attachment": "file-system", "mount_flags": flags})
    };
    let (s, b) = api.put("/v1/volumes/v", spec(&names("f", 2))).await;
    assert_eq!(s, 201, "{b}");
    let (s, token) = api
        .post(
            "/v1/tokens",
            json!({"role": "node", "node": "n1", "controllers": ["hp"]}),
        )
        .await;
    assert_eq!(s, 201, "{token}");
    server.proc.terminate(WAIT);
    let (flags, plugins) = (names("f", 100), names("p", 100));
    let conn = rusqlite::Connection::open(data.join("state.db")).unwrap();
    conn.execute(
        "UPDATE volumes SET mount_flags = ?1 WHERE name = 'v'",
        [json!(flags).to_string()],
    )
    .unwrap();
    conn.execute(
        "UPDATE tokens SET controllers = ?1 WHERE node = 'n1'",
        [json!(plugins).to_string()],
    )
    .unwrap();
    drop(conn);

    let server = ServerProc::start(&data, &[]);
    let api = server.api();
    let (s, v) = api.get("/v1/volumes/v").await;
    assert_eq!((s, &v["mount_flags"]), (200, &json!(flags)), "{v}");
    let (_, all) = api.get("/v1/volumes").await;
    assert_eq!(all[0]["mount_flags"], json!(flags), "listed as kept");
    let (_, tokens) = api.get("/v1/tokens").await;
    let kept = tokens
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["node"] == "n1")
        .unwrap_or_else(|| panic!("{tokens}"));
    assert_eq!(kept["controllers"], json!(plugins), "{kept}");
    // The node token still serves its node.
    let node = Api::new(&server.url, token["token"].as_str());
    let (s, b) = node
        .post(
            "/v1/nodes/n1/register",
            json!({"plugins": [plugin("n1", "hp")]}),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    // New lists that long are refused, on another volume as on this one.
    let mut other = spec(&flags);
    other["external_id"] = json!("ext-w");
    let (s, b) = api.put("/v1/volumes/w", other).await;
    refused(s, &b, "`mount_flags` holds 100 flags, more than the 64");
    let (s, b) = api.put("/v1/volumes/v", spec(&flags)).await;
    refused(s, &b, "`mount_flags` holds 100 flags, more than the 64");
    let (s, b) = api
        .post(
            "/v1/tokens",
            json!({"role": "node", "node": "n2", "controllers": plugins}),
        )
        .await;
    refused(s, &b, "`controllers` holds 100 plugins, more than the 64");
    // And what was kept is still as recorded.
    let (_, v) = api.get("/v1/volumes/v").await;
    assert_eq!(v["mount_flags"], json!(flags));
}
