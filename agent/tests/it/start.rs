//! The agent's start: its settings taken from the place that gives them (an empty flag is
//! refused, never replaced by the config file's), a data dir in use said at once, and a
//! stop while it starts (waiting for its plugin, recovering what was in flight) taken in
//! order, with what it did recorded in agent.db, never by the signal's default action.

use std::process::Command;
use std::time::Duration;

use csivol_tests::{TestDir, bin_path, eventually, run_to_exit, wait_for};

use super::procs::{self, OneNode};
use super::support::WAIT;

/// `--server ""` (a variable that did not expand) is an error naming the flag, not a
/// reason to use the config file's server.
#[test]
fn an_empty_server_flag_is_refused_not_replaced_by_the_config_files() {
    let dir = TestDir::new("agent-empty-server");
    let config = dir.join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "server = \"https://10.9.9.9:7420\"\nnode = \"n1\"\ndata_dir = {:?}\n\
             token_file = {:?}\nplugins = [\"hp=unix:///nonexistent.sock\"]\n",
            dir.join("agent").display().to_string(),
            dir.join("n1.token").display().to_string(),
        ),
    )
    .unwrap();
    std::fs::write(dir.join("n1.token"), "csivol_x\n").unwrap();
    let mut cmd = Command::new(bin_path("csivol-agent"));
    cmd.args([
        "run",
        &format!("--config={}", config.display()),
        "--server",
        "",
    ]);
    let (status, out) = run_to_exit("csivol-agent run", cmd, WAIT);
    assert!(!status.success(), "{out}");
    assert!(
        out.contains("error: --server is empty: give the server's URL"),
        "{out}"
    );
    assert!(
        !out.contains("10.9.9.9"),
        "the file's server was not used: {out}"
    );
}

/// A second agent on a data dir in use says so at once, while it waits for the first to
/// exit (a restart's previous agent), and goes on once the first is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_agent_on_a_data_dir_in_use_says_so_at_once() {
    let dir = TestDir::new("agent-dir-in-use");
    let OneNode {
        server: _server,
        api,
        hp: _hp,
        mut agent,
    } = OneNode::start(&dir, &[], &[], &[]).await;
    eventually("node n1 registered", WAIT, || async {
        let (_, n) = api.get("/v1/nodes/n1").await;
        (n["status"] == "ready").then_some(())
    })
    .await;
    let log = dir.join("second.log");
    let mut second = agent.another(&log);
    let said = || std::fs::read_to_string(&log).unwrap_or_default();
    let first = agent.proc.pid();
    wait_for(
        "the second agent to say the data dir is in use",
        WAIT,
        || {
            said()
                .contains(&format!(
                    "another csivol-agent (pid {first}) is using the data dir"
                ))
                .then_some(())
        },
    );
    assert!(
        second.running(),
        "said while it waits, not when it gives up: {}",
        said()
    );
    // The first goes (killed: its lock goes with it at once); the second takes over.
    agent.proc.kill();
    wait_for("the second agent to start", WAIT, || {
        assert!(second.running(), "the second agent gave up: {}", said());
        said().contains("node plugin ready").then_some(())
    });
}

/// SIGTERM while the agent waits for its plugin (Probe answers only after a minute) stops
/// it in order: exit 0, the stop logged, and nothing registered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_while_the_agent_waits_for_its_plugin_is_taken_in_order() {
    let dir = TestDir::new("agent-stop-probe");
    let OneNode {
        server: _server,
        api,
        hp: _hp,
        mut agent,
    } = OneNode::start(&dir, &[], &["--delay", "Probe=60s"], &[]).await;
    // Provably starting: a Probe timed out, and it is waiting for the next.
    wait_for("the agent to wait for its plugin", WAIT, || {
        assert!(agent.proc.running(), "the agent exited: {}", agent.log());
        agent
            .log()
            .contains("waiting for plugin `hp` to answer Probe")
            .then_some(())
    });
    let status = agent
        .proc
        .terminate(WAIT)
        .unwrap_or_else(|| panic!("not stopped within {WAIT:?}: {}", agent.log()));
    assert!(
        status.success(),
        "stopped in order, not by the signal: {status:?}\n{}",
        agent.log()
    );
    let log = agent.log();
    assert!(log.contains("asked to stop while starting"), "{log}");
    assert!(log.contains("node agent stopped while starting"), "{log}");
    let (status, body) = api.get("/v1/nodes/n1").await;
    assert_eq!(status, 404, "never registered: {body}");
}

/// SIGTERM while recovery takes down a publication that was in flight when the agent was
/// killed: the take-down under way is finished and recorded in agent.db, then the agent
/// stops (exit 0) before registering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_recovery_finishes_the_step_under_way_and_records_it() {
    let dir = TestDir::new("agent-stop-recovery");
    let OneNode {
        server: _server,
        api,
        mut hp,
        mut agent,
    } = OneNode::start(&dir, &[], &["--delay", "NodePublishVolume=1h"], &[]).await;
    procs::create_volume(&api, "v1", "single-node-writer").await;
    procs::claim(&api, "v1", "a1").await;
    let publication = "SELECT state FROM publications WHERE volume = 'v1' AND alloc = 'a1'";
    wait_for("NodePublishVolume under way", WAIT, || {
        (agent.db_state(publication).as_deref() == Some("publishing")).then_some(())
    });
    // Killed mid-publish; its plugin comes back slow to unpublish.
    agent.proc.kill();
    hp.restart(&["--delay", "NodeUnpublishVolume=10s"]);
    agent.restart_after_kill();
    wait_for("recovery to take the publication down", WAIT, || {
        assert!(agent.proc.running(), "the agent exited: {}", agent.log());
        agent
            .log()
            .contains("recovery: taking down a publication that may be incomplete")
            .then_some(())
    });
    let status = agent
        .proc
        .terminate(Duration::from_secs(120))
        .unwrap_or_else(|| panic!("not stopped: {}", agent.log()));
    assert!(
        status.success(),
        "stopped in order, not by the signal: {status:?}\n{}",
        agent.log()
    );
    let log = agent.log();
    assert!(log.contains("asked to stop while starting"), "{log}");
    assert!(log.contains("node agent stopped while starting"), "{log}");
    assert_eq!(
        hp.count("NodeUnpublishVolume", "OK"),
        1,
        "the take-down under way was finished: {:?}",
        hp.calls()
    );
    assert_eq!(
        agent.db_state(publication),
        None,
        "and recorded: the publication is gone from agent.db"
    );
    hp.assert_no_lifecycle_violation();
}
