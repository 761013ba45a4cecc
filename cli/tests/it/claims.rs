//! `csivol claim`, `release` and `status`: dry runs, waits to ready, to gone, to failure
//! and to timeout, and the refusals with their exit codes.

use serde_json::json;

use csivol_tests::eventually;

use crate::support::{Env, WAIT, done, make_ready};

#[tokio::test]
async fn dry_run_says_whether_and_why_not() {
    let env = Env::start("dry-run");
    env.volume("v1", "single-node-writer").await;
    let _n1 = env.node("n1", 0).await;
    let _n2 = env.node("n2", 0).await;

    snap!(env.run(&["claim", "v1", "--node", "n1", "--alloc", "a1", "--dry-run"]).await, @"
    exit: 0
    --- stdout
    accepted: alloc a1 may claim volume v1 on node n1 (write); it would start attaching
    --- stderr
    ");
    snap!(env.run(&["claim", "v1", "--node", "n1", "--alloc", "a1", "--dry-run", "-o", "json"]).await, @r#"
    exit: 0
    --- stdout
    {
      "accepted": true,
      "state": "attaching"
    }
    --- stderr
    "#);
    let r = env.run(&["volume", "show", "v1", "-o", "json"]).await;
    assert_eq!(r.json()["claims"], json!([]), "a dry run records nothing");

    let r = env
        .run(&["claim", "v1", "--node", "n1", "--alloc", "a1"])
        .await;
    assert_eq!(r.code, 0, "{r}");
    snap!(env.run(&["claim", "v1", "--node", "n2", "--alloc", "a2", "--dry-run"]).await, @"
    exit: 4
    --- stdout
    refused: volume `v1` is single-node-writer and is claimed on node n1: held by alloc a1 on node n1
    --- stderr
    hint: wait for it to be released (csivol release v1 --alloc a1), or claim with --queue to wait in line
    ");
    snap!(env.run(&["claim", "v1", "--node", "n2", "--alloc", "a2", "--dry-run", "-o", "json"]).await, @r#"
    exit: 4
    --- stdout
    {
      "accepted": false,
      "error": {
        "code": "conflict",
        "message": "volume `v1` is single-node-writer and is claimed on node n1: held by alloc a1 on node n1",
        "hint": "wait for it to be released (csivol release v1 --alloc a1), or claim with --queue to wait in line"
      }
    }
    --- stderr
    "#);
    snap!(env.run(&["claim", "v1", "--node", "n1", "--alloc", "a1", "--dry-run"]).await, @"
    exit: 0
    --- stdout
    accepted: alloc a1 may claim volume v1 on node n1 (write); it already holds this claim (attaching)
    --- stderr
    ");
    snap!(env.run(&["claim", "v9", "--node", "n1", "--alloc", "a1", "--dry-run"]).await, @"
    exit: 3
    --- stdout
    refused: volume `v9` is not registered
    --- stderr
    hint: list volumes with `csivol volume list`
    ");
}

#[tokio::test]
async fn claim_refusals_have_their_exit_codes() {
    let env = Env::start("refusals");
    env.volume("v1", "single-node-writer").await;
    env.volume("v2", "single-node-writer").await;
    env.volume("ro", "multi-node-reader-only").await;
    let _n1 = env.node("n1", 1).await;
    let _n2 = env.node("n2", 0).await;

    snap!(env.run(&["claim", "v1", "--node", "n1", "--alloc", "a1"]).await, @r"
    exit: 0
    --- stdout
    claim of alloc a1
      volume:       v1
      node:         n1
      mode:         write
      state:        attaching
      target path:  -
      created:      [TIME] ([AGE] ago)
    --- stderr
    claimed volume v1 for alloc a1 on node n1 (write): attaching
    ");
    snap!(env.run(&["claim", "v1", "--node", "n1", "--alloc", "a1", "-o", "json"]).await, @r#"
    exit: 0
    --- stdout
    {
      "volume": "v1",
      "namespace": "default",
      "alloc": "a1",
      "node": "n1",
      "mode": "write",
      "state": "attaching",
      "target_path": null,
      "error": null,
      "created_at": "[TIME]",
      "updated_at": "[TIME]",
      "index": [INDEX]
    }
    --- stderr
    "#);
    // Another node while single-node: conflict.
    snap!(env.run(&["claim", "v1", "--node", "n2", "--alloc", "a2"]).await, @"
    exit: 4
    --- stdout
    --- stderr
    error: failed to claim volume `v1` for alloc `a2` on node `n2`: volume `v1` is single-node-writer and is claimed on node n1: held by alloc a1 on node n1
    hint: wait for it to be released (csivol release v1 --alloc a1), or claim with --queue to wait in line
    ");
    // No free slot on n1 (max 1): conflict.
    snap!(env.run(&["claim", "v2", "--node", "n1", "--alloc", "a3"]).await, @"
    exit: 4
    --- stdout
    --- stderr
    error: failed to claim volume `v2` for alloc `a3` on node `n1`: node `n1` has no free slot for plugin `hp`: 1 of 1 volumes in use (attachments still detaching count)
    hint: release a claim on that node, choose another node, or claim with --queue
    ");
    // A write claim on a reader-only volume: the server calls it invalid, exit 2.
    snap!(env.run(&["claim", "ro", "--node", "n2", "--alloc", "a4"]).await, @"
    exit: 2
    --- stdout
    --- stderr
    error: failed to claim volume `ro` for alloc `a4` on node `n2`: volume `ro` is multi-node-reader-only: it takes read claims only
    hint: claim it with --read-only
    ");
    let r = env
        .run(&[
            "claim",
            "ro",
            "--node",
            "n2",
            "--alloc",
            "a4",
            "--read-only",
        ])
        .await;
    assert_eq!(r.code, 0, "{r}");
    assert!(r.stdout.contains("mode:         read"), "{r}");
    // An unknown node.
    snap!(env.run(&["claim", "v2", "--node", "n9", "--alloc", "a5"]).await, @"
    exit: 3
    --- stdout
    --- stderr
    error: failed to claim volume `v2` for alloc `a5` on node `n9`: node `n9` is not registered
    hint: did you mean node `n1`? (list nodes with `csivol node list`; a node registers when its agent starts)
    ");
}

/// `claim show` reads the one claim; a missing alloc is exit 3 with the server's guess.
#[tokio::test]
async fn claim_show_shows_one_claim_and_names_a_missing_alloc() {
    let env = Env::start("claim-show");
    env.volume("v1", "multi-node-multi-writer").await;
    let _n1 = env.node("n1", 0).await;
    for alloc in ["build-1", "build-2"] {
        let r = env
            .run(&["claim", "v1", "--node", "n1", "--alloc", alloc])
            .await;
        assert_eq!(r.code, 0, "{r}");
    }
    let r = env
        .run(&["claim", "show", "v1", "--alloc", "build-2", "-o", "json"])
        .await;
    assert_eq!(r.code, 0, "{r}");
    let c: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        (&c["volume"], &c["alloc"]),
        (&"v1".into(), &"build-2".into()),
        "{r}"
    );
    let r = env
        .run(&["claim", "show", "v1", "--alloc", "build-3"])
        .await;
    assert_eq!(r.code, 3, "{r}");
    assert!(
        r.stderr
            .contains("alloc `build-3` holds no claim on volume `v1`")
            && r.stderr.contains("did you mean alloc `build-"),
        "{r}"
    );
}

#[tokio::test]
async fn claim_wait_follows_the_claim_to_ready() {
    let env = Env::start("wait-ready");
    env.volume("v1", "single-node-writer").await;
    let n1 = env.node("n1", 0).await;

    let cli = env.spawn(&["claim", "v1", "--node", "n1", "--alloc", "a1", "--wait"]);
    make_ready(&n1, &n1, "v1", "a1").await;
    let r = done(cli).await;
    assert_eq!(r.code, 0, "{r}");
    // Without a terminal, progress is a line per state seen after the claim's held answer
    // (which ones depends on timing).
    assert!(
        r.stderr
            .starts_with("claimed volume v1 for alloc a1 on node n1 (write)\n"),
        "{r}"
    );
    snap!(r.stdout, @r"
    claim of alloc a1
      volume:       v1
      node:         n1
      mode:         write
      state:        ready
      target path:  /mnt/csivol/v1/a1
      created:      [TIME] ([AGE] ago)
    ");

    // JSON, and claiming again is idempotent: it is ready at once.
    snap!(env.run(&["claim", "v1", "--node", "n1", "--alloc", "a1", "--wait", "-o", "json"]).await, @r#"
    exit: 0
    --- stdout
    {
      "volume": "v1",
      "namespace": "default",
      "alloc": "a1",
      "node": "n1",
      "mode": "write",
      "state": "ready",
      "target_path": "/mnt/csivol/v1/a1",
      "error": null,
      "created_at": "[TIME]",
      "updated_at": "[TIME]",
      "index": [INDEX]
    }
    --- stderr
    "#);

    snap!(env.run(&["status"]).await, @"
    exit: 0
    --- stdout
    volumes: 1 (1 attached)
    nodes:   1 (1 ready)

    volumes:
    NAME  PLUGIN  ACCESS MODE         STATE     CLAIMS   NODES
    v1    hp      single-node-writer  attached  1 ready  n1
    --- stderr
    ");
    snap!(env.run(&["status", "v1"]).await, @r"
    exit: 0
    --- stdout
    volume v1
      state:        attached
      plugin:       hp
      external id:  ext-v1
      access mode:  single-node-writer
      attachment:   file-system
      context:      -
      parameters:   -
      secrets:      password=<redacted>
      created:      [TIME] ([AGE] ago)

    attachments:
    NODE  STATE     FORCED  ERROR  NEXT RETRY  SINCE
    n1    attached  no      -      -           [AGE]

    claims:
    ALLOC  NODE  MODE   STATE  TARGET PATH        ERROR  NEXT RETRY  AGE
    a1     n1    write  ready  /mnt/csivol/v1/a1  -      -           [AGE]
    --- stderr
    ");
    snap!(env.run(&["status", "-o", "json"]).await, @r#"
    exit: 0
    --- stdout
    {
      "volumes_by_state": {
        "attached": 1
      },
      "nodes_by_status": {
        "ready": 1
      },
      "nodes_at_risk": [],
      "blocked": [],
      "controller_findings": [],
      "controller_queues_behind": [],
      "duplicate_volumes": [],
      "volumes": [
        {
          "name": "v1",
          "namespace": "default",
          "plugin": "hp",
          "external_id": "ext-v1",
          "access_mode": "single-node-writer",
          "attachment": "file-system",
          "state": "attached",
          "accepts_claims": true,
          "context": {},
          "parameters": {},
          "secret_keys": [
            "password"
          ],
          "mutable_parameters": {},
          "claims": [
            {
              "volume": "v1",
              "namespace": "default",
              "alloc": "a1",
              "node": "n1",
              "mode": "write",
              "state": "ready",
              "target_path": "/mnt/csivol/v1/a1",
              "error": null,
              "created_at": "[TIME]",
              "updated_at": "[TIME]",
              "index": [INDEX]
            }
          ],
          "attachments": [
            {
              "volume": "v1",
              "node": "n1",
              "state": "attached",
              "publish_context": {},
              "forced": false,
              "error": null,
              "updated_at": "[TIME]"
            }
          ],
          "created_at": "[TIME]",
          "updated_at": "[TIME]",
          "index": [INDEX]
        }
      ]
    }
    --- stderr
    "#);
    snap!(env.run(&["volume", "list"]).await, @"
    exit: 0
    --- stdout
    NAME  PLUGIN  ACCESS MODE         STATE     CLAIMS   NODES
    v1    hp      single-node-writer  attached  1 ready  n1
    --- stderr
    ");
}

#[tokio::test]
async fn claim_wait_times_out_saying_where_it_is_stuck() {
    let env = Env::start("wait-timeout");
    env.volume("v1", "single-node-writer").await;
    let n1 = env.node("n1", 0).await;

    snap!(env.run(&["claim", "v1", "--node", "n1", "--alloc", "a1", "--wait", "--timeout", "1s"]).await, @"
    exit: 5
    --- stdout
    --- stderr
    claimed volume v1 for alloc a1 on node n1 (write)
    the claim of alloc a1 on volume v1: attaching: waiting for ControllerPublishVolume to node n1
    error: timed out after 1s waiting for the claim of alloc a1 on volume v1 to be ready; the claim still exists and is attaching: waiting for ControllerPublishVolume to node n1
    hint: release it with `csivol release v1 --alloc a1` (or claim with --release-on-timeout), or wait longer with --timeout; `csivol status v1` shows its claims and attachments
    ");

    // ControllerPublish fails and will be retried: the wait says so, and so does status.
    let op = n1.wait_op("publish").await;
    n1.report(json!([{"kind": "op_error", "op": op["id"], "attempt": op["attempt"], "error": {"code": "UNAVAILABLE", "message": "backend is down", "final": false}}]))
        .await;
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
            "1s",
            "-q",
        ])
        .await;
    snap!(r, @"
    exit: 5
    --- stdout
    --- stderr
    error: timed out after 1s waiting for the claim of alloc a1 on volume v1 to be ready; the claim still exists and is attaching: waiting for ControllerPublishVolume to node n1; waiting on retry at [TIME]: ControllerPublishVolume failed: UNAVAILABLE: backend is down
    ");
    snap!(env.run(&["status", "v1"]).await, @r"
    exit: 0
    --- stdout
    volume v1
      state:        attached
      plugin:       hp
      external id:  ext-v1
      access mode:  single-node-writer
      attachment:   file-system
      context:      -
      parameters:   -
      secrets:      password=<redacted>
      created:      [TIME] ([AGE] ago)

    attachments:
    NODE  STATE      FORCED  ERROR                                                         NEXT RETRY            SINCE
    n1    attaching  no      ControllerPublishVolume failed: UNAVAILABLE: backend is down  [TIME]  [AGE]

    claims:
    ALLOC  NODE  MODE   STATE      TARGET PATH  ERROR                                                         NEXT RETRY            AGE
    a1     n1    write  attaching  -            ControllerPublishVolume failed: UNAVAILABLE: backend is down  [TIME]  [AGE]
    --- stderr
    ");
}

/// A wait that runs out of time ends with one message that is true once csivol has acted:
/// a claim released on the timeout is said to be released, not to still exist, and no hint
/// names a flag the command lacks. `--timeout 1ms` is said as given.
#[tokio::test]
async fn a_timeout_says_once_what_became_of_the_claim() {
    let env = Env::start("timeout-outcome");
    env.volume("v1", "single-node-writer").await;
    let _n1 = env.node("n1", 0).await;

    snap!(env.run(&["claim", "v1", "--node", "n1", "--alloc", "a1", "--wait", "--timeout", "1ms", "--release-on-timeout"]).await, @"
    exit: 5
    --- stdout
    --- stderr
    claimed volume v1 for alloc a1 on node n1 (write)
    the claim of alloc a1 on volume v1: attaching: waiting for ControllerPublishVolume to node n1
    error: timed out after 1ms waiting for the claim of alloc a1 on volume v1 to be ready (it was attaching: waiting for ControllerPublishVolume to node n1); released the claim (--release-on-timeout)
    hint: claim again with a longer --timeout; `csivol status v1` shows what holds the volume up
    ");
    let r = env
        .run(&["claim", "list", "--volume", "v1", "-o", "json"])
        .await;
    assert!(
        r.json()
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["state"] == "releasing"),
        "released: {r}"
    );

    // Still held by a1 (its release never finishes: the fake node reports nothing), the
    // volume makes `run --queue` wait in line; it gives up, and leaves the line.
    snap!(env.run(&["run", "v1", "--node", "n1", "--alloc", "job", "--queue", "--timeout", "1s", "--", "true"]).await, @"
    exit: 5
    --- stdout
    --- stderr
    alloc: job
    claimed volume v1 for alloc job on node n1 (write): queued: number 1 in line for the volume
    the claim of alloc job on volume v1: queued: number 1 in line for the volume
    released every claim of alloc job
    error: timed out after 1s waiting for the claim of alloc job on volume v1 to be ready (it was queued: number 1 in line for the volume); released every claim made: the command did not run
    hint: run it again with a longer --timeout (it includes the wait in line); `csivol status v1` shows what holds the volume up
    ");
    let r = env
        .run(&["claim", "list", "--volume", "v1", "-o", "json"])
        .await;
    assert!(
        r.json()
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["alloc"] != "job"),
        "the queued claim left the line: {r}"
    );
}

/// With `-o json` every outcome is one JSON document: on stdout when the command succeeds
/// (a release too, whose result is that the claim is gone), and an error alone on stderr,
/// without progress lines or notes beside it.
#[tokio::test]
async fn json_mode_prints_one_document_per_outcome() {
    let env = Env::start("json-outcomes");
    env.volume("v1", "multi-node-multi-writer").await;
    let n1 = env.node("n1", 0).await;
    let r = env
        .run(&["claim", "v1", "--node", "n1", "--alloc", "a1"])
        .await;
    assert_eq!(r.code, 0, "{r}");
    make_ready(&n1, &n1, "v1", "a1").await;

    // A wait that times out: the error, and nothing else, on stderr.
    let r = env
        .run(&[
            "claim",
            "v1",
            "--node",
            "n1",
            "--alloc",
            "a2",
            "--wait",
            "--timeout",
            "1s",
            "-o",
            "json",
        ])
        .await;
    assert_eq!(r.code, 5, "{r}");
    assert_eq!(r.stdout, "", "{r}");
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON document on stderr: {r}");
    let e: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(e["error"]["code"], "timed-out", "{r}");

    // A release waited for: the claim is gone, and that is the document.
    let cli = env.spawn(&["release", "v1", "--alloc", "a1", "--wait", "-o", "json"]);
    let api = env.api();
    eventually("the release to be recorded", WAIT, || async {
        let (_, c) = api.get("/v1/volumes/v1/claims/a1").await;
        (c["state"] == "releasing").then_some(())
    })
    .await;
    n1.report(json!([{"kind": "unpublished", "volume": "v1", "alloc": "a1"}]))
        .await;
    snap!(done(cli).await, @r#"
    exit: 0
    --- stdout
    {
      "alloc": "a1",
      "outcome": "released",
      "volume": "v1"
    }
    --- stderr
    "#);
    // Released again, as a script may: gone already.
    snap!(env.run(&["release", "v1", "--alloc", "a1", "--ignore-missing", "-o", "json"]).await, @r#"
    exit: 0
    --- stdout
    {
      "alloc": "a1",
      "outcome": "already-released",
      "volume": "v1"
    }
    --- stderr
    "#);
    // Without --wait: the claim as it is now, releasing, and no note beside it.
    let r = env
        .run(&["release", "v1", "--alloc", "a2", "-o", "json"])
        .await;
    assert_eq!(r.code, 0, "{r}");
    assert_eq!(r.json()["state"], "releasing", "{r}");
    assert_eq!(r.stderr, "", "{r}");
}

#[tokio::test]
async fn claim_wait_ends_with_exit_1_when_the_claim_fails() {
    let env = Env::start("wait-failed");
    env.volume("v1", "single-node-writer").await;
    let n1 = env.node("n1", 0).await;

    let cli = env.spawn(&["claim", "v1", "--node", "n1", "--alloc", "a1", "--wait"]);
    let op = n1.wait_op("publish").await;
    n1.report(json!([{"kind": "controller_published", "op": op["id"], "attempt": op["attempt"], "publish_context": {}}]))
        .await;
    n1.report(json!([{"kind": "claim_error", "volume": "v1", "alloc": "a1", "error": {"code": "INVALID_ARGUMENT", "message": "unsupported fs_type", "final": true}}]))
        .await;
    let r = done(cli).await;
    assert_eq!(r.code, 1, "{r}");
    let last: Vec<_> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("error:") || l.starts_with("hint:"))
        .collect();
    snap!(last.join("\n"), @"
    error: the claim of alloc a1 on volume v1 failed: INVALID_ARGUMENT: unsupported fs_type
    hint: node n1 cleans up, then the claim is gone; fix the cause and claim again (`csivol events --volume v1` has the history)
    ");
}

#[tokio::test]
async fn release_and_release_wait() {
    let env = Env::start("release");
    env.volume("v1", "single-node-multi-writer").await;
    let n1 = env.node("n1", 0).await;
    let r = env
        .run(&["claim", "v1", "--node", "n1", "--alloc", "a1"])
        .await;
    assert_eq!(r.code, 0, "{r}");
    make_ready(&n1, &n1, "v1", "a1").await;
    let r = env
        .run(&["claim", "v1", "--node", "n1", "--alloc", "a2"])
        .await;
    assert_eq!(r.code, 0, "{r}");
    n1.report(json!([{"kind": "published", "volume": "v1", "alloc": "a2", "target_path": "/mnt/csivol/v1/a2"}]))
        .await;

    // With --wait, until the node reports it unpublished; then nothing is left to print.
    let cli = env.spawn(&["release", "v1", "--alloc", "a1", "--wait"]);
    let api = env.api();
    eventually("the release to be recorded", WAIT, || async {
        let (_, c) = api.get("/v1/volumes/v1/claims/a1").await;
        (c["state"] == "releasing").then_some(())
    })
    .await;
    n1.report(json!([{"kind": "unpublished", "volume": "v1", "alloc": "a1"}]))
        .await;
    let r = done(cli).await;
    assert_eq!(r.code, 0, "{r}");
    assert_eq!(r.stdout, "");
    assert!(
        r.stderr
            .ends_with("released the claim of alloc a1 on volume v1\n"),
        "{r}"
    );

    // Without --wait: the claim, releasing.
    snap!(env.run(&["release", "v1", "--alloc", "a2", "-o", "json"]).await, @r#"
    exit: 0
    --- stdout
    {
      "volume": "v1",
      "namespace": "default",
      "alloc": "a2",
      "node": "n1",
      "mode": "write",
      "state": "releasing",
      "target_path": "/mnt/csivol/v1/a2",
      "error": null,
      "created_at": "[TIME]",
      "updated_at": "[TIME]",
      "index": [INDEX]
    }
    --- stderr
    "#);
    // A release the node never carries out times out, saying where it is.
    snap!(env.run(&["release", "v1", "--alloc", "a2", "--wait", "--timeout", "1s"]).await, @"
    exit: 5
    --- stdout
    --- stderr
    the claim of alloc a2 on volume v1: releasing: node n1 is unmounting it
    error: timed out after 1s waiting for the claim of alloc a2 on volume v1 to be released; it is releasing: node n1 is unmounting it
    hint: `csivol status v1` shows its claims and attachments; wait longer with --timeout
    ");
}
