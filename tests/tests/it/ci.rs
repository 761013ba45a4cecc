//! CI pipelines, driven through the CLI as a pipeline would: `csivol run` with a claimer
//! token, leases that run out after a job is killed, signals passed on to the job, a fair
//! queue between two jobs, idempotent release, JSON errors.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use csivol_tests::{Proc, bin_path, wait_for};
use rustix::process::{Pid, Signal, kill_process};
use serde_json::Value;

use crate::cluster::{Cluster, NodeOpts, Out, run};
use crate::e2e::create_volume;

const WAIT: Duration = Duration::from_secs(60);

/// A claimer token, made by the operator with the CLI.
fn claimer_token(c: &Cluster) -> String {
    let out = c.csivol(&["token", "create", "--role", "claimer", "-o", "json"]);
    out.ok().json()["token"].as_str().unwrap().to_owned()
}

/// `csivol` as a CI job runs it: a claimer token and `CSIVOL_NODE` in the environment.
fn job(c: &Cluster, token: &str, args: &[&str]) -> Command {
    let mut cmd = c.command(Some(token), args);
    cmd.env("CSIVOL_NODE", "node-1");
    cmd
}

fn claim_state(c: &Cluster, volume: &str, alloc: &str) -> Option<String> {
    let v = c
        .csivol(&["volume", "show", volume, "-o", "json"])
        .ok()
        .json();
    v["claims"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["alloc"] == alloc)
        .map(|x| x["state"].as_str().unwrap().to_owned())
}

fn events(c: &Cluster, volume: &str) -> Vec<Value> {
    c.csivol(&["events", "--volume", volume, "-o", "json"])
        .ok()
        .json()
        .as_array()
        .unwrap()
        .clone()
}

/// Kills, by pid, a process a job wrote its pid for (a command left behind by a killed
/// `csivol run`), when dropped.
struct PidFile(PathBuf);

impl Drop for PidFile {
    fn drop(&mut self) {
        if let Some(pid) = std::fs::read_to_string(&self.0)
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
            .and_then(Pid::from_raw)
        {
            let _ = kill_process(pid, Signal::KILL);
        }
    }
}

#[test]
fn a_ci_script_runs_its_job_with_csivol_run_and_a_claimer_token() {
    let c = Cluster::start("ci-script", "10s", vec![NodeOpts::default()]);
    create_volume(&c, "build-cache", "single-node-writer");
    create_volume(&c, "datasets", "multi-node-reader-only");
    let token = claimer_token(&c);
    let script = c.dir.join("job.sh");
    std::fs::write(
        &script,
        r#"#!/usr/bin/env bash
set -euo pipefail
# The job: write into the cache, read the datasets volume, fail with its own status.
csivol run build-cache datasets:ro --alloc job-1 --label job=https://ci.example/1 -- \
    bash -c 'echo "built" > "$CSIVOL_PATH_BUILD_CACHE/out.txt"; test -d "$CSIVOL_PATH_DATASETS"'
csivol run build-cache --alloc job-2 -- bash -c 'test "$(cat "$CSIVOL_PATH/out.txt")" = built'
set +e
csivol run build-cache --alloc job-3 -- bash -c 'exit 42'
echo "status $?"
"#,
    )
    .unwrap();
    let bin_dir = bin_path("csivol").parent().unwrap().to_owned();
    let mut cmd = job(&c, &token, &[]);
    cmd.env(
        "PATH",
        format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap()),
    );
    let mut bash = Command::new("bash");
    bash.arg(&script);
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => bash.env(k, v),
            None => bash.env_remove(k),
        };
    }
    let out = run(bash);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.contains("status 42"),
        "the job's status: {out:?}"
    );
    assert!(out.stderr.contains("alloc: job-1"), "{out:?}");
    c.wait_free("build-cache");
    assert!(c.all_mounts().is_empty(), "{:?}", c.all_mounts());
    let created = events(&c, "build-cache")
        .into_iter()
        .find(|e| e["kind"] == "claim-created" && e["alloc"] == "job-1")
        .unwrap();
    let message = created["message"].as_str().unwrap();
    assert!(message.contains("lease of 10m"), "{message}");
    assert!(message.contains("job=https://ci.example/1"), "{message}");
    assert!(created["actor"].as_str().unwrap().starts_with("claimer:"));

    // A claimer may not act as an operator.
    let out = run(job(
        &c,
        &token,
        &["unblock", "build-cache", "--reason", "x", "--yes"],
    ));
    assert_eq!(out.code, 7, "{out:?}");
    let out = run(job(&c, &token, &["token", "create", "--role", "operator"]));
    assert_eq!(out.code, 7, "{out:?}");
}

#[test]
fn a_killed_job_leaves_a_lease_that_runs_out() {
    let c = Cluster::start("ci-lease", "10s", vec![NodeOpts::default()]);
    create_volume(&c, "v", "single-node-writer");
    let token = claimer_token(&c);
    let pid_file = PidFile(c.dir.join("job.pid"));
    let mut csivol = Proc::spawn(
        "csivol run",
        job(
            &c,
            &token,
            &[
                "run",
                "v",
                "--alloc",
                "killed",
                "--ttl",
                "3s",
                "--",
                "bash",
                "-c",
                &format!("echo $$ > {}; exec sleep 600", pid_file.0.display()),
            ],
        ),
        &c.dir.join("run.log"),
    );
    wait_for("the job running", WAIT, || {
        pid_file.0.exists().then_some(())
    });
    assert_eq!(claim_state(&c, "v", "killed").as_deref(), Some("ready"));
    csivol.kill();

    // Nobody renews the lease: the server releases the claim through the node.
    c.wait_free("v");
    assert!(c.all_mounts().is_empty(), "{:?}", c.all_mounts());
    let expired = events(&c, "v")
        .into_iter()
        .find(|e| e["kind"] == "claim-expired")
        .expect("a claim-expired event");
    assert!(
        expired["message"]
            .as_str()
            .unwrap()
            .contains("without renewal: released through its node"),
        "{expired}"
    );
    assert_eq!(expired["alloc"], "killed");
}

#[test]
fn sigterm_reaches_the_job_and_every_claim_is_released() {
    let c = Cluster::start("ci-sigterm", "10s", vec![NodeOpts::default()]);
    create_volume(&c, "v", "single-node-writer");
    let token = claimer_token(&c);
    let mark = c.dir.join("got-term");
    let started = c.dir.join("started");
    let mut csivol = Proc::spawn(
        "csivol run",
        job(
            &c,
            &token,
            &[
                "run",
                "v",
                "--alloc",
                "term",
                "--",
                "bash",
                "-c",
                &format!(
                    "trap 'echo term > {}; exit 143' TERM; touch {}; while true; do sleep 0.1; done",
                    mark.display(),
                    started.display()
                ),
            ],
        ),
        &c.dir.join("run.log"),
    );
    wait_for("the job running", WAIT, || started.exists().then_some(()));
    let status = csivol.terminate(WAIT).expect("csivol run exits");
    assert_eq!(status.code(), Some(143), "{}", c.log("run.log"));
    assert_eq!(std::fs::read_to_string(&mark).unwrap().trim(), "term");
    // It waited for the release before exiting.
    assert_eq!(claim_state(&c, "v", "term"), None, "{}", c.log("run.log"));
    assert!(c.all_mounts().is_empty(), "{:?}", c.all_mounts());
}

#[test]
fn two_queued_jobs_take_turns_in_order() {
    let c = Cluster::start("ci-queue", "10s", vec![NodeOpts::default()]);
    create_volume(&c, "v", "single-node-writer");
    let token = claimer_token(&c);
    let job_cmd = |alloc: &str, hold: &Path| {
        // Each job logs its start and end into the volume, with nanosecond timestamps.
        let script = format!(
            "echo \"start {alloc} $(date +%s%N)\" >> \"$CSIVOL_PATH/log\"; \
             touch {hold}; sleep 1; echo \"end {alloc} $(date +%s%N)\" >> \"$CSIVOL_PATH/log\"",
            hold = hold.display()
        );
        job(
            &c,
            &token,
            &[
                "run", "v", "--queue", "--alloc", alloc, "--", "bash", "-c", &script,
            ],
        )
    };
    let a_started = c.dir.join("a-started");
    let b_started = c.dir.join("b-started");
    let mut a = Proc::spawn("job a", job_cmd("job-a", &a_started), &c.dir.join("a.log"));
    wait_for("job a running", WAIT, || a_started.exists().then_some(()));
    let mut b = Proc::spawn("job b", job_cmd("job-b", &b_started), &c.dir.join("b.log"));
    wait_for("job b queued", WAIT, || {
        (claim_state(&c, "v", "job-b").as_deref() == Some("queued")).then_some(())
    });
    let listed = c
        .csivol(&[
            "claim", "list", "--volume", "v", "--state", "queued", "-o", "json",
        ])
        .ok()
        .json();
    assert_eq!(listed[0]["alloc"], "job-b", "{listed}");
    assert_eq!(listed[0]["queue_position"], 1, "{listed}");
    for (p, log) in [(&mut a, "a.log"), (&mut b, "b.log")] {
        let status = wait_for("the job done", WAIT, || p.exited());
        assert!(status.success(), "{}", c.log(log));
    }
    // Read the volume's log with a third job.
    let out = run(job(
        &c,
        &token,
        &[
            "run",
            "v",
            "--alloc",
            "reader",
            "--",
            "bash",
            "-c",
            "cat \"$CSIVOL_PATH/log\"",
        ],
    ));
    let lines: Vec<(&str, &str, u128)> = out
        .ok()
        .stdout
        .lines()
        .map(|l| {
            let mut f = l.split(' ');
            (
                f.next().unwrap(),
                f.next().unwrap(),
                f.next().unwrap().parse().unwrap(),
            )
        })
        .collect();
    let order: Vec<(&str, &str)> = lines.iter().map(|(w, a, _)| (*w, *a)).collect();
    assert_eq!(
        order,
        [
            ("start", "job-a"),
            ("end", "job-a"),
            ("start", "job-b"),
            ("end", "job-b")
        ],
        "{}",
        out.stdout
    );
    assert!(lines[1].2 <= lines[2].2, "never at the same time");
    let granted = events(&c, "v")
        .into_iter()
        .any(|e| e["kind"] == "claim-granted" && e["alloc"] == "job-b");
    assert!(granted);
}

#[test]
fn release_is_idempotent_and_errors_are_json() {
    let c = Cluster::start("ci-release", "10s", vec![NodeOpts::default()]);
    create_volume(&c, "v", "single-node-writer");
    let token = claimer_token(&c);
    let claim = run(job(
        &c,
        &token,
        &[
            "claim",
            "v",
            "--alloc",
            "a1",
            "--label",
            "job=https://ci.example/7",
            "--wait",
        ],
    ));
    assert_eq!(claim.code, 0, "{claim:?}");
    let status = run(job(&c, &token, &["status", "v"]));
    assert!(
        status.ok().stdout.contains("job=https://ci.example/7"),
        "labels are shown: {status:?}"
    );
    let listed = run(job(
        &c,
        &token,
        &[
            "claim",
            "list",
            "--label",
            "job=https://ci.example/7",
            "-o",
            "json",
        ],
    ));
    assert_eq!(listed.ok().json()[0]["alloc"], "a1", "{listed:?}");
    let none = run(job(
        &c,
        &token,
        &["claim", "list", "--label", "job=other", "-o", "json"],
    ));
    assert_eq!(none.ok().json(), serde_json::json!([]));
    for _ in 0..2 {
        let out = run(job(
            &c,
            &token,
            &[
                "release",
                "v",
                "--alloc",
                "a1",
                "--ignore-missing",
                "--wait",
            ],
        ));
        assert_eq!(out.code, 0, "{out:?}");
    }
    let out = run(job(&c, &token, &["release", "v", "--alloc", "a1"]));
    assert_eq!(out.code, 3, "without --ignore-missing: {out:?}");
    let out = run(job(
        &c,
        &token,
        &["release", "nope", "--alloc", "a1", "--ignore-missing"],
    ));
    assert_eq!(out.code, 3, "a missing volume is still an error: {out:?}");

    // With -o json, an error is one JSON object on stderr and stdout stays empty.
    let out: Out = run(job(
        &c,
        &token,
        &["claim", "nope", "--alloc", "a1", "-o", "json"],
    ));
    assert_eq!(out.code, 3);
    assert_eq!(out.stdout, "");
    let e: Value = serde_json::from_str(out.stderr.trim()).unwrap();
    assert_eq!(e["error"]["code"], "not-found", "{e}");
    assert_eq!(e["error"]["exit"], 3, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .ends_with("volume `nope` is not registered"),
        "{e}"
    );
    assert_eq!(
        e["error"]["hint"], "list volumes with `csivol volume list`",
        "{e}"
    );
}

#[test]
fn an_interrupted_claim_wait_releases_its_claim() {
    interrupted_claim_wait("NodePublishVolume", "publishing");
}

/// Interrupted while the server holds the claim's answer (off a terminal, the claim's POST
/// waits until the claim moves on): the claim is recorded, its answer has not come, and it
/// is released all the same.
#[test]
fn a_claim_wait_interrupted_while_its_answer_is_held_releases_its_claim() {
    interrupted_claim_wait("ControllerPublishVolume", "attaching");
}

/// `claim --wait` with `rpc` held up by the plugin, sent SIGINT once the claim is `state`.
fn interrupted_claim_wait(rpc: &str, state: &str) {
    let opts = NodeOpts {
        plugin_args: vec![format!("--delay={rpc}=30s")],
        ..NodeOpts::default()
    };
    let c = Cluster::start("ci-interrupt", "10s", vec![opts]);
    create_volume(&c, "v", "single-node-writer");
    let token = claimer_token(&c);
    let mut claim = Proc::spawn(
        "csivol claim --wait",
        job(&c, &token, &["claim", "v", "--alloc", "a1", "--wait"]),
        &c.dir.join("claim.log"),
    );
    wait_for(&format!("the claim {state}"), WAIT, || {
        (claim_state(&c, "v", "a1").as_deref() == Some(state)).then_some(())
    });
    let pid = Pid::from_raw(claim.pid() as i32).unwrap();
    kill_process(pid, Signal::INT).unwrap();
    let status = wait_for("csivol to exit", WAIT, || claim.exited());
    assert_eq!(status.code(), Some(130), "{}", c.log("claim.log"));
    assert!(
        c.log("claim.log")
            .contains("interrupted (SIGINT): released the claim of alloc a1 on volume v"),
        "{}",
        c.log("claim.log")
    );
    let state = claim_state(&c, "v", "a1");
    assert!(
        state.is_none() || state.as_deref() == Some("releasing"),
        "{state:?}"
    );
}
