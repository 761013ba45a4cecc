//! Tables at 60, 80 and 200 columns, and `-o wide`: one line per row whatever the width,
//! the least important columns cut with an ellipsis, nothing cut with `-o wide`; and no
//! command that prints fails on a closed stdout.

use serde_json::json;

use crate::support::{Env, Run, make_ready, run};

/// `csivol ARGS` with `COLUMNS=width` (`None`: a pipe with no width).
async fn at(env: &Env, width: Option<u16>, args: &[&str]) -> Run {
    let mut cmd = env.command(args);
    if let Some(w) = width {
        cmd.env("COLUMNS", w.to_string());
    }
    let r = run(cmd).await;
    assert_eq!(r.code, 0, "{r}");
    r
}

/// Every row of a table is one line, and every line fits `width` when the table can.
fn one_line_per_row(r: &Run, rows: usize, width: usize) {
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), rows + 1, "a row was wrapped:\n{r}");
    for l in &lines {
        assert!(l.chars().count() <= width, "wider than {width}: {l:?}\n{r}");
        // What wrapping a cell to one character per line looked like.
        assert!(l.trim().chars().count() > 1, "a one-character line:\n{r}");
    }
}

#[tokio::test]
async fn tables_fit_60_80_and_200_columns_by_cutting_not_wrapping() {
    let env = Env::start("tables");
    for v in ["data-1", "shared-cache"] {
        env.volume(v, "multi-node-multi-writer").await;
    }
    let n1 = env.node("node-1", 0).await;
    let r = env
        .run(&[
            "claim",
            "data-1",
            "--node",
            "node-1",
            "--alloc",
            "build-job-1234",
        ])
        .await;
    assert_eq!(r.code, 0, "{r}");
    make_ready(&n1, &n1, "data-1", "build-job-1234").await;
    n1.report(
        json!([{"kind": "published", "volume": "data-1", "alloc": "build-job-1234",
        "target_path": "/var/lib/csivol/node-1/agent/targets/data-1/build-job-1234"}]),
    )
    .await;
    let events = env.run(&["events", "-o", "json"]).await.json();
    let n_events = events.as_array().unwrap().len();

    // At 80 columns every event is one line, its message cut.
    let r = at(&env, Some(80), &["events"]).await;
    one_line_per_row(&r, n_events, 80);
    assert!(r.stdout.contains('…'), "nothing was cut:\n{r}");
    snap!(r.stdout, @r"
    TIME                  KIND               VOLUME     NODE    MESSAGE
    [TIME]  volume-registered  data-1     -       volume registered (…
    [TIME]  volume-registered  shared-c…  -       volume registered (…
    [TIME]  token-created      -          node-1  node token [TOKEN-ID]…
    [TIME]  node-registered    -          node-1  node registered wit…
    [TIME]  claim-created      data-1     node-1  write claim recorded
    [TIME]  volume-attached    data-1     node-1  ControllerPublishVo…
    [TIME]  claim-ready        data-1     node-1  published at /mnt/c…
    ");
    let r = at(&env, Some(60), &["events"]).await;
    one_line_per_row(&r, n_events, 60);

    // `status` and `node list` at 60: headers stay on one line.
    let r = at(&env, Some(60), &["status"]).await;
    snap!(r.stdout, @r"
    volumes: 2 (1 attached, 1 free)
    nodes:   1 (1 ready)

    volumes:
    NAME          PLUGIN  ACCESS MODE  STATE     CLAIMS   NODES
    data-1        hp      multi-node…  attached  1 ready  node-1
    shared-cache  hp      multi-node…  free      -        -
    ");
    let r = at(&env, Some(60), &["node", "list"]).await;
    one_line_per_row(&r, 1, 60);
    snap!(r.stdout, @r"
    NAME    STATUS  HEARTBEAT    PLUGINS (U…  SELF-FE…  LOST SI…
    node-1  ready   [AGE] ago, TT…  hp 1/∞       no        -
    ");

    // A target path keeps its end, the part that tells two claims apart.
    let r = at(&env, Some(80), &["status", "data-1"]).await;
    snap!(r.stdout, @r"
    volume data-1
      state:        attached
      plugin:       hp
      external id:  ext-data-1
      access mode:  multi-node-multi-writer
      attachment:   file-system
      context:      -
      parameters:   -
      secrets:      password=<redacted>
      created:      [TIME] ([AGE] ago)

    attachments:
    NODE    STATE     FORCED  ERROR  NEXT RETRY  SINCE
    node-1  attached  no      -      -           [AGE]

    claims:
    ALLOC         NODE    MODE   STATE  TARGET PATH           ERROR  NEXT RETRY  AGE
    build-job-1…  node-1  write  ready  …ta-1/build-job-1234  -      -           [AGE]
    ");
    let r = at(&env, Some(60), &["claim", "list"]).await;
    one_line_per_row(&r, 1, 60);

    // At 200 columns nothing needs cutting; `-o wide` cuts nothing at any width.
    let r = at(&env, Some(200), &["events"]).await;
    one_line_per_row(&r, n_events, 200);
    assert!(!r.stdout.contains('…'), "{r}");
    let wide = at(&env, Some(60), &["events", "-o", "wide"]).await;
    assert!(!wide.stdout.contains('…'), "{wide}");
    assert_eq!(wide.stdout.lines().count(), n_events + 1, "{wide}");
}

#[tokio::test]
async fn no_command_that_prints_fails_on_a_closed_stdout() {
    let env = Env::start("closed-pipe");
    env.volume("v1", "single-node-writer").await;
    let _n1 = env.node("n1", 0).await;
    let r = env
        .run(&["claim", "v1", "--node", "n1", "--alloc", "a1"])
        .await;
    assert_eq!(r.code, 0, "{r}");
    let commands: &[&[&str]] = &[
        &["--help"],
        &["--version"],
        &["claim", "--help"],
        &["completions", "bash"],
        &["completions", "zsh"],
        &["completions", "fish"],
        &["status"],
        &["status", "v1"],
        &["status", "--blocked"],
        &["volume", "list"],
        &["volume", "show", "v1"],
        &["claim", "list"],
        &["claim", "v1", "--node", "n1", "--alloc", "a1"],
        &["node", "list"],
        &["node", "show", "n1"],
        &["plugin", "list"],
        &["plugin", "show", "hp"],
        &["events"],
        &["events", "-o", "json"],
        &["events", "-o", "wide"],
        &["token", "create", "--role", "reader"],
        &["__complete", "volumes"],
        // Commands that run until interrupted end at their first write to a closed pipe.
        &["events", "-f", "--tail", "1"],
        &["status", "--watch"],
        &["node", "eligibility", "n1", "--enable"],
    ];
    for args in commands {
        let mut child = env.command(args).spawn().unwrap();
        // `csivol ... | head -0`: the reader is gone before csivol writes.
        drop(child.stdout.take());
        let out = child.wait_with_output().await.unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}
