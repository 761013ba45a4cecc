//! The whole stack under the CLI, no stand-ins: the server, a `csivol-agent run` and the
//! reference plugin `csivol-hostpath` (marker files instead of bind mounts, so the test
//! needs no mount rights). A volume is created, claimed, released and deleted through
//! `csivol` alone.

use std::process::Command;

use csivol_tests::{Proc, bin_path, eventually};

use crate::support::{Env, WAIT};

#[tokio::test]
async fn the_cli_drives_a_real_agent_and_plugin() {
    let env = Env::start("real-agent");
    let socket = env.dir.join("hp.sock");
    let mut hostpath = Command::new(bin_path("csivol-hostpath"));
    hostpath
        .arg(format!("--endpoint=unix://{}", socket.display()))
        .arg("--node-id=csi-n1")
        .arg(format!("--state-dir={}", env.dir.join("hp").display()))
        .arg("--mount=none");
    let _hostpath = Proc::spawn("csivol-hostpath", hostpath, &env.dir.join("hp.log"));

    // The node's token comes from the CLI: the secret alone on stdout.
    let r = env
        .run(&[
            "token",
            "create",
            "--role",
            "node",
            "--node",
            "n1",
            "--controller",
            "hp",
            "-q",
        ])
        .await;
    assert_eq!(r.code, 0, "{r}");
    let token = env.file("n1.token", &r.stdout);
    let mut agent = Command::new(bin_path("csivol-agent"));
    agent
        .arg("run")
        .arg(format!("--server={}", env.server.url))
        .arg("--node=n1")
        .arg(format!("--data-dir={}", env.dir.join("agent").display()))
        .arg(format!("--token-file={token}"))
        .arg(format!("--plugin=hp=unix://{}", socket.display()))
        .arg(format!("--controller=hp=unix://{}", socket.display()))
        .arg("--ready-check=exists");
    let agent_log = env.dir.join("agent.log");
    let _agent = Proc::spawn("csivol-agent run", agent, &agent_log);
    let log = || std::fs::read_to_string(&agent_log).unwrap_or_default();

    let spec = env.file(
        "data.toml",
        "name = \"data\"\nplugin = \"hp\"\naccess_mode = \"single-node-writer\"\n\
         attachment = \"file-system\"\ncapacity_bytes = 1048576\n",
    );
    // The server refuses a plugin no node has registered: wait for the agent to register.
    eventually("plugin hp registered", WAIT, || async {
        (env.run(&["plugin", "show", "hp"]).await.code == 0).then_some(())
    })
    .await;
    let r = env
        .run(&["volume", "create", &spec, "--wait", "--timeout", "30s"])
        .await;
    assert_eq!(r.code, 0, "{r}\nagent log:\n{}", log());
    assert!(r.stdout.contains("state:        free"), "{r}");

    let r = env
        .run(&[
            "claim",
            "data",
            "--node",
            "n1",
            "--alloc",
            "job-1",
            "--wait",
            "--timeout",
            "30s",
            "-o",
            "json",
        ])
        .await;
    assert_eq!(r.code, 0, "{r}\nagent log:\n{}", log());
    let claim = r.json();
    assert_eq!(claim["state"], "ready", "{r}");
    let target = claim["target_path"].as_str().expect("a target path");
    assert!(std::path::Path::new(target).exists(), "{target} exists");

    // Which readiness check the node applies to the plugin, and what the plugin made there
    // (marker files with `--mount none`: no mount at the staging path or the target).
    let r = env.run(&["plugin", "show", "hp", "-o", "json"]).await;
    let node = &r.json()["nodes"][0];
    assert_eq!(node["ready_check"], "exists", "{r}");
    assert_eq!(node["observed"]["alloc"], "job-1", "{r}");
    assert_eq!(node["observed"]["staging"], "none", "{r}");
    assert_eq!(node["observed"]["target"], "none", "{r}");
    let r = env.run(&["plugin", "show", "hp"]).await;
    assert!(
        r.stdout.contains(
            "NODE  STATUS  TOPOLOGY  READY CHECK  STAGED AS  PUBLISHED AS  LAST PUBLISHED"
        ) && r.stdout.contains(
            "n1    ready   -         exists       none       none          data/job-1 at"
        ),
        "{r}"
    );

    let r = env
        .run(&[
            "release",
            "data",
            "--alloc",
            "job-1",
            "--wait",
            "--timeout",
            "30s",
        ])
        .await;
    assert_eq!(r.code, 0, "{r}\nagent log:\n{}", log());

    // Once the last claim is gone the volume is unstaged and detached; then it can go.
    let api = env.api();
    eventually("the volume to be detached", WAIT, || async {
        let (_, v) = api.get("/v1/volumes/data").await;
        (v["state"] == "free" && v["attachments"] == serde_json::json!([])).then_some(())
    })
    .await;
    let r = env
        .run(&[
            "volume",
            "deregister",
            "data",
            "--delete",
            "--yes",
            "--wait",
            "--timeout",
            "30s",
        ])
        .await;
    assert_eq!(r.code, 0, "{r}\nagent log:\n{}", log());
    assert_eq!(env.run(&["volume", "show", "data"]).await.code, 3);
}
