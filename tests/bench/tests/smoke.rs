//! `csivol-bench` runs briefly in both modes, exits 0 and prints the JSON object its
//! `--json` documents. No figure is checked: speed belongs in the benchmark, not in a test.

use std::process::Command;

use serde_json::Value;

/// The keys `--json` must carry in every mode.
const KEYS: [&str; 14] = [
    "mode",
    "nodes",
    "cycles",
    "cycles_per_second",
    "claim_ready_p50_ms",
    "claim_ready_p99_ms",
    "release_p50_ms",
    "release_p99_ms",
    "floor_cycle_ms",
    "ratio_p50",
    "ratio_p99",
    "server_rss_mib",
    "lost_claims",
    "ok",
];

/// Runs the benchmark with tiny settings plus `args`; returns its JSON after checking the
/// exit status, the common keys, the non-null `extra` keys and that no claim was lost.
fn check(args: &[&str], extra: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_csivol-bench"))
        .args([
            "--volumes=20",
            "--concurrency=4",
            "--duration=2s",
            "--floor-samples=50",
            "--json",
        ])
        .args(args)
        .output()
        .expect("run csivol-bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "csivol-bench {args:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}):\n{stdout}"));
    for key in KEYS {
        assert!(report.get(key).is_some(), "no `{key}` in {report:#}");
    }
    for key in extra {
        assert!(!report[key].is_null(), "`{key}` is null in {report:#}");
    }
    // Every target carries its bound, and a measured one its ratio to it.
    let targets = report["targets"].as_array().expect("`targets` is an array");
    assert!(!targets.is_empty(), "{report:#}");
    for t in targets {
        let limit = t["limit"].as_f64().expect("a target has a limit");
        if let Some(value) = t["value"].as_f64() {
            let ratio = t["ratio"].as_f64().expect("a measured target has a ratio");
            assert!((ratio - value / limit).abs() < 1e-9, "{t:#}");
        }
    }
    assert_eq!(report["lost_claims"], 0, "{report:#}");
    assert_eq!(report["ok"], true, "{report:#}");
    assert!(report["cycles"].as_u64().unwrap() > 0, "{report:#}");
    report
}

#[test]
fn bench_full_mode() {
    let r = check(
        &["--mode=full", "--nodes=2", "--mount=none"],
        &[
            "agent_rss_mib",
            "own_cpu_s_per_cycle",
            "plugins_cpu_s_per_cycle",
        ],
    );
    assert_eq!(r["mode"], "full");
    assert_eq!(r["kill_check"]["survived"], r["kill_check"]["acknowledged"]);
}

#[test]
fn bench_server_mode() {
    let r = check(
        &[
            "--mode=server",
            "--nodes=20",
            "--list-volumes=200",
            "--heartbeat-ttl=1s",
        ],
        &["list_volumes_ms", "node_loss_blocked_s"],
    );
    assert_eq!(r["mode"], "server");
    assert_eq!(r["list_volumes_count"], 200);
}

/// Runs `csivol-bench --chaos` with `args` and returns its report, after checking that it
/// found nothing: no violation, no error (a cycle stuck, a process dead on its own, a
/// history the checker could not decide), exit 0; that faults of each kind of `kinds` fell
/// (by their names in the report); and that the checker judged a history of claims, reads
/// and releases with no anomaly.
fn chaos(args: &[&str], kinds: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_csivol-bench"))
        .args(["--mode=full", "--chaos", "--json"])
        .args(args)
        .output()
        .expect("run csivol-bench --chaos");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}):\n{stdout}\n{stderr}"));
    assert_eq!(report["violation_count"], 0, "{report:#}\n{stderr}");
    assert_eq!(
        report["errors"],
        serde_json::json!([]),
        "{report:#}\n{stderr}"
    );
    assert!(out.status.success(), "{report:#}\n{stderr}");
    for kind in kinds {
        assert!(
            report["faults"][kind].as_u64().unwrap_or(0) >= 1,
            "no `{kind}` fault fell: {report:#}"
        );
    }
    assert!(report["cycles"].as_u64().unwrap() > 0, "{report:#}");
    assert!(report["observations"].as_u64().unwrap() > 0, "{report:#}");
    assert!(
        report["history_operations"].as_u64().unwrap() > report["cycles"].as_u64().unwrap() * 3,
        "{report:#}"
    );
    assert_eq!(report["anomalies"], 0, "{report:#}");
    assert_eq!(report["undecided"], 0, "{report:#}");
    assert!(
        report["oversized_refused"].as_u64().unwrap() > 0,
        "the careless client's claims were refused: {report:#}"
    );
    assert!(
        report["oversized_unrecorded"].as_u64().unwrap() > 0,
        "a refused claim was read back and not found: {report:#}"
    );
    // Anonymous slow bodies crowded the connection limit and were refused from their
    // headers, while the load above went on (no cycle stuck, no error).
    assert!(
        report["slow_body_refused"].as_u64().unwrap() > 0,
        "no slow body refused from its headers: {report:#}"
    );
    assert!(
        report["connection_limit_reached"].as_u64().unwrap() > 0,
        "the slow bodies never crowded the connection limit: {report:#}"
    );
    report
}

/// The one-server campaign's kinds.
const SINGLE: [&str; 9] = [
    "kill-server",
    "kill-agent",
    "kill-plugin",
    "stop-agent",
    "disk-full",
    "restore",
    "delayed-duplicate",
    "term-server-start",
    "term-agent-start",
];

/// The fault campaign, briefly (docs/benchmarks.md has the long run's figures): faults of
/// every kind fall (the kinds are dealt from a shuffled deck, so each falls before any
/// falls twice), and no invariant breaks. Needs root (the server's disk is a tmpfs), as
/// the tests do.
#[test]
fn chaos_campaign_short() {
    let r = chaos(
        &[
            "--nodes=3",
            "--volumes=6",
            "--concurrency=3",
            "--duration=60s",
            "--heartbeat-ttl=1s",
            "--seed=7",
        ],
        &SINGLE,
    );
    // Per-job volumes and pool members went through whole jobs under the faults, each job
    // finding its target presented (`--mount none`: no marker is written); the faults
    // blocked some of them and the observer saw them presented, so the checks had
    // something to judge: no per-job volume left, none leaked in the storage, none deleted
    // while blocked, none on two nodes (violations otherwise, checked above).
    for key in [
        "fresh_cycles",
        "pool_cycles",
        "job_targets_presented",
        "job_volumes_blocked",
        "job_volumes_observed",
    ] {
        assert!(r[key].as_u64().unwrap() > 0, "no `{key}`: {r:#}");
    }
    for key in [
        "job_volumes_left",
        "storage_volumes_leaked",
        "deleted_while_blocked",
        "job_double_writers",
    ] {
        assert_eq!(r[key], 0, "{r:#}");
    }
    // Each delayed duplicate was answered (its first answer, or a refusal), not accepted:
    // a violation otherwise, checked above.
    let notes = r["fault_notes"].as_object().expect("fault notes");
    assert!(
        notes
            .keys()
            .any(|k| k.starts_with("duplicate with its key")),
        "{r:#}"
    );
    assert!(
        notes
            .keys()
            .any(|k| k.starts_with("duplicate without a key")),
        "{r:#}"
    );
}

/// The backlog scenario: a short storm, one attach, every figure present.
#[test]
fn bench_backlog_scenario() {
    let out = Command::new(env!("CARGO_BIN_EXE_csivol-bench"))
        .args([
            "--mode=server",
            "--backlog",
            "--backlog-detaches=30",
            "--backlog-op-time=10ms",
            "--json",
        ])
        .output()
        .expect("run csivol-bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "csivol-bench --backlog failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let r: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}):\n{stdout}"));
    for key in [
        "detaches",
        "queued_at_attach",
        "attach_wait_ms",
        "attach_claim_ready_ms",
        "storm_drain_ms",
        "detach_mean_wait_ms",
        "attach_wait_vs_drain",
        "attach_wait_in_ops",
        "machine",
    ] {
        assert!(
            r.get(key).is_some_and(|v| !v.is_null()),
            "no `{key}` in {r:#}"
        );
    }
    assert_eq!(r["detaches"], 30);
    assert!(r["queued_at_attach"].as_u64().unwrap() > 0, "{r:#}");
}

/// The CI scenario, tiny, with real bind mounts (the tests run as root): both arms ran
/// every job, the pool's warm-hit and the baseline's counts add up, and every fresh job
/// and floor sample was timed.
#[test]
fn bench_ci_jobs_scenario() {
    let out = Command::new(env!("CARGO_BIN_EXE_csivol-bench"))
        .args([
            "--mode=full",
            "--nodes=2",
            "--mount=bind",
            "--ci-jobs=10",
            "--pool-size=3",
            "--cache-keys=3",
            "--ci-clients=2",
            "--fresh-jobs=2",
            "--floor-samples=50",
            "--seed=1",
            "--json",
        ])
        .output()
        .expect("run csivol-bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "csivol-bench --ci-jobs failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let r: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}):\n{stdout}"));
    assert_eq!(r["ok"], true, "{r:#}");
    assert_eq!(r["seed"], 1, "{r:#}");
    for arm in ["pool", "random"] {
        let a = &r[arm];
        assert_eq!(a["jobs"], 10, "{r:#}");
        let counted: u64 = ["same_key", "staged_here", "prefix", "cold"]
            .iter()
            .map(|k| a[k].as_u64().unwrap())
            .sum();
        assert_eq!(counted, 10, "{arm}: every job has one choice: {r:#}");
        let timed = a["warm_claim_ready"]["samples"].as_u64().unwrap()
            + a["cold_claim_ready"]["samples"].as_u64().unwrap();
        assert_eq!(timed, 10, "{r:#}");
    }
    // Three keys over three members: after the first jobs a key's member is free more
    // often than not, and the server must have found it warm at least once.
    assert!(r["pool"]["same_key"].as_u64().unwrap() > 0, "{r:#}");
    let fresh = &r["fresh"];
    assert_eq!(fresh["jobs"], 2, "{r:#}");
    assert_eq!(fresh["job"]["samples"], 2, "{r:#}");
    assert_eq!(fresh["plugin_calls_floor"]["samples"], 2, "{r:#}");
    assert!(
        fresh["plugin_calls_floor"]["p50_ms"].as_f64().unwrap() > 0.0,
        "{r:#}"
    );
    assert!(fresh["ratio_p50"].as_f64().unwrap() > 0.0, "{r:#}");
}

/// HA mode's kinds besides the one-server campaign's.
const HA: [&str; 6] = [
    "stop-server",
    "kill-etcd",
    "stop-etcd",
    "server-cut-from-etcd",
    "etcd-member-cut-off",
    "node-cut-from-server",
];

/// The fault campaign in HA mode, for a minute: two servers over a 3-member etcd, every
/// process on a host of its own in network namespaces, faults of every kind overlapping
/// (kill -9, SIGSTOP and partitions of servers, members, agents and plugins, a full
/// disk, delayed duplicates, stops while daemons start); every acknowledged claim and
/// release is in the final state, and the clients' history is linearizable. Needs root,
/// as the tests do.
#[test]
fn chaos_campaign_ha_for_a_minute() {
    let kinds: Vec<&str> = SINGLE.iter().chain(HA.iter()).copied().collect();
    let r = chaos(
        &[
            "--store=etcd",
            "--mount=bind",
            "--nodes=3",
            "--volumes=6",
            "--concurrency=3",
            "--duration=60s",
            "--heartbeat-ttl=2s",
            "--seed=11",
        ],
        &kinds,
    );
    assert_eq!(r["servers"], 2, "{r:#}");
    assert_eq!(r["etcd_members"], 3, "{r:#}");
}
