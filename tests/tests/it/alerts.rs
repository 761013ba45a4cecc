//! The shipped Prometheus rules (`dist/prometheus/`) and Grafana dashboard
//! (`dist/grafana/csivol.json`) load as they are: Prometheus' own promtool checks the rules
//! and runs their unit tests, and every metric, label and value the rules, their tests and
//! the dashboard use is one a real server exports, scraped while it holds the states the
//! alerts watch.

mod names;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use csivol_tests::wait_for;
use serde_json::Value;

use self::names::{Exported, SCRAPE_LABELS, Uses};
use crate::cluster::{Cluster, NodeOpts, PLUGIN};

const WAIT: Duration = Duration::from_secs(120);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Runs promtool with `args` in `dist/prometheus`; a missing promtool fails the test.
fn promtool(args: &[&str]) -> (bool, String) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(root().join("dist/prometheus"))
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run promtool ({e}): it comes with Debian's `prometheus` package \
                 (`apt-get install --no-install-recommends prometheus`; `.ci/run` installs it)"
            )
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `promtool check rules` accepts the rule file, `promtool test rules` passes its unit
/// tests, and every alert has a summary and a runbook link to a section of
/// docs/troubleshooting.md that exists.
#[test]
fn the_rules_pass_promtools_checks_and_their_unit_tests() {
    let (ok, out) = promtool(&["check", "rules", "csivol-rules.yml"]);
    assert!(ok, "promtool check rules:\n{out}");
    let (ok, out) = promtool(&["test", "rules", "tests/csivol-rules.test.yml"]);
    assert!(ok, "promtool test rules:\n{out}");

    let rules = names::rules(&read("dist/prometheus/csivol-rules.yml"));
    let alerts: Vec<_> = rules.iter().filter(|(k, _, _)| k == "alert").collect();
    assert!(alerts.len() >= 8, "{alerts:?}");
    let page = read("docs/troubleshooting.md");
    let anchors: BTreeSet<String> = page
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| crate::docs::anchor(h.trim_start_matches('#')))
        .collect();
    let tests = read("dist/prometheus/tests/csivol-rules.test.yml");
    for (_, name, text) in alerts {
        assert!(text.contains("summary: "), "{name} has no summary");
        let url = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("runbook_url: "))
            .unwrap_or_else(|| panic!("{name} has no runbook_url"));
        let anchor = url
            .strip_prefix("docs/troubleshooting.md#")
            .unwrap_or_else(|| panic!("{name}'s runbook {url} is not in docs/troubleshooting.md"));
        assert!(
            anchors.contains(anchor),
            "{name}'s runbook {url}: docs/troubleshooting.md has no such section"
        );
        assert!(
            tests.contains(&format!("alertname: {name}\n")),
            "no promtool unit test fires {name}"
        );
    }
}

/// The dashboard is one Grafana imports or provisions as it is: a title and uid, a
/// Prometheus datasource variable every query uses, panels that do not overlap.
#[test]
fn the_dashboard_is_a_grafana_dashboard() {
    let d: Value = serde_json::from_str(&read("dist/grafana/csivol.json"))
        .expect("dist/grafana/csivol.json is JSON");
    assert_eq!(d["uid"], "csivol");
    assert!(
        d["title"].is_string() && d["schemaVersion"].as_u64() >= Some(36),
        "{d}"
    );
    let vars = d["templating"]["list"].as_array().unwrap();
    assert!(
        vars.iter().any(|v| v["name"] == "datasource"
            && v["type"] == "datasource"
            && v["query"] == "prometheus"),
        "{vars:?}"
    );
    let panels = d["panels"].as_array().unwrap();
    let mut ids = BTreeSet::new();
    let mut cells = BTreeSet::new();
    for p in panels {
        let title = p["title"].as_str().unwrap();
        assert!(ids.insert(p["id"].as_u64().unwrap()), "{title}: id taken");
        let g = &p["gridPos"];
        let (x, y, w, h) = (
            g["x"].as_u64().unwrap(),
            g["y"].as_u64().unwrap(),
            g["w"].as_u64().unwrap(),
            g["h"].as_u64().unwrap(),
        );
        assert!(x + w <= 24 && w > 0 && h > 0, "{title}: {g}");
        for cx in x..x + w {
            for cy in y..y + h {
                assert!(cells.insert((cx, cy)), "{title} overlaps another panel");
            }
        }
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}");
        for t in targets {
            assert!(
                t["expr"].as_str().is_some_and(|e| !e.is_empty()),
                "{title}: {t}"
            );
            assert!(t["refId"].is_string(), "{title}: {t}");
        }
    }
}

/// Every metric, label and matched value the rules, their unit tests' input series and
/// the dashboard use is one a real server exports: the server is scraped while a claim is
/// ready, a lost node blocks a volume and its automatic fence fails, a claim waits in
/// publishing, and a controller operation waits for a host, so a renamed metric, label
/// or state fails here.
#[test]
fn the_rules_and_the_dashboard_use_only_what_a_real_server_exports() {
    let exported = scrape_a_cluster_in_trouble();
    let mut problems = BTreeSet::new();

    let rule_file = read("dist/prometheus/csivol-rules.yml");
    let rules = names::rules(&rule_file);
    let records: BTreeMap<String, Uses> = rules
        .iter()
        .filter(|(k, _, _)| k == "record")
        .map(|(_, name, text)| (name.clone(), Uses::of(text)))
        .collect();
    for (_, _, text) in &rules {
        Uses::of(text).missing(&exported, &records, &mut problems);
    }

    let dashboard: Value = serde_json::from_str(&read("dist/grafana/csivol.json")).unwrap();
    let mut queries = 0;
    for p in dashboard["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            let text = format!(
                "{} {}",
                t["expr"].as_str().unwrap(),
                t["legendFormat"].as_str().unwrap_or_default()
            );
            let uses = Uses::of(&text);
            assert!(
                !uses.selectors.is_empty(),
                "a query of no csivol metric: {text}"
            );
            uses.missing(&exported, &records, &mut problems);
            queries += 1;
        }
    }
    assert!(queries >= 10, "{queries} queries");

    // The unit tests' input series are shaped as the server exports them: the same
    // names, label names and states, with the labels a scrape adds.
    let tests = read("dist/prometheus/tests/csivol-rules.test.yml");
    let series_line = regex::Regex::new(r"series: '([^']+)'").unwrap();
    for cap in series_line.captures_iter(&tests) {
        let (name, mut labels) = names::series(&cap[1]).unwrap();
        for l in SCRAPE_LABELS {
            assert!(labels.remove(l).is_some(), "{}: no `{l}` label", &cap[1]);
        }
        let Some(all) = exported.series.get(&name) else {
            problems.insert(format!("metric {name}"));
            continue;
        };
        let keys: BTreeSet<_> = labels.keys().collect();
        if !all
            .iter()
            .any(|l| l.keys().collect::<BTreeSet<_>>() == keys)
        {
            problems.insert(format!(
                "{name} with the labels {keys:?} (a unit test's input)"
            ));
        }
        if let Some(state) = labels.get("state")
            && !exported.has_value(&name, "state", state)
        {
            problems.insert(format!("{name}{{state=\"{state}\"}} (a unit test's input)"));
        }
    }
    assert!(
        problems.is_empty(),
        "the rules, their unit tests or the dashboard use what the server does not export:\n  {}\n\
         exported:\n{}",
        problems.into_iter().collect::<Vec<_>>().join("\n  "),
        exported
            .series
            .iter()
            .map(|(n, s)| format!(
                "  {n} {:?}",
                s.iter().flat_map(|l| l.keys()).collect::<BTreeSet<_>>()
            ))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A three-node cluster in the states the alerts watch, scraped twice: with a claim ready
/// on node-1, node-2 lost holding a volume and its fence failing, a claim publishing on
/// node-3 (whose plugin takes ten minutes to publish), the ready volume's usage and the
/// nodes' CSI calls; then with every agent gone and a volume's creation waiting for a
/// controller host.
fn scrape_a_cluster_in_trouble() -> Exported {
    let slow = NodeOpts {
        plugin_args: vec!["--delay".into(), "NodePublishVolume=10m".into()],
        ..Default::default()
    };
    let mut c = Cluster::start_with_config(
        "alerts",
        "2s",
        vec![NodeOpts::default(), NodeOpts::default(), slow],
        |_| {
            "[[fence]]\nname = \"ipmi\"\ncommand = [\"false\"]\ntimeout = \"10s\"\n\
             nodes = [\"node-2\"]\nauto_fence_after = \"1s\"\n"
                .to_owned()
        },
    );
    claim(&c, "vol-ready", "node-1", true);
    claim(&c, "vol-blocked", "node-2", true);
    claim(&c, "vol-slow", "node-3", false);
    c.kill_agent(1);
    c.wait_node_status(1, "lost");

    let mut exported = Exported::default();
    let first = wait_for(
        "the blocked volume, the failing fence, the publishing claim, the ready one's usage and the nodes' CSI calls",
        WAIT,
        || {
            let m = c.metrics();
            (m.contains(r#"csivol_volume_blocked_seconds{volume="vol-blocked",node="node-2",namespace="default"}"#)
                && m.contains("csivol_nodes_fence_failing 1")
                && m.contains(r#"csivol_fences_total{state="failed"}"#)
                && m.contains(r#"csivol_claims{state="publishing"} 1"#)
                && m.contains(r#"csivol_claims{state="ready"} 1"#)
                && m.contains(r#"csivol_volume_used_bytes{volume="vol-ready""#)
                && m.contains(r#"csivol_node_csi_calls_total{node="node-1""#)
                && m.contains("csivol_csi_call_seconds_bucket{"))
            .then_some(m)
        },
    );
    exported.add(&first);
    // The ages count: the blocked volume from node-2's loss, the claim from its publishing.
    wait_for("the ages to grow past a second", WAIT, || {
        let m = c.metrics();
        let age = |series: &str| {
            m.lines()
                .find_map(|l| l.strip_prefix(series))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        (age(r#"csivol_volume_blocked_seconds{volume="vol-blocked",node="node-2",namespace="default"}"#) >= 1.0
            && age(r#"csivol_claims_oldest_seconds{state="publishing"}"#) >= 1.0)
            .then_some(())
    });

    c.kill_agent(0);
    c.kill_agent(2);
    c.wait_node_status(0, "lost");
    c.wait_node_status(2, "lost");
    let spec = c.dir.join("vol-queued.toml");
    std::fs::write(&spec, volume_spec("vol-queued")).unwrap();
    c.csivol(&["volume", "create", spec.to_str().unwrap()]).ok();
    let second = wait_for("the creation to wait for a controller host", WAIT, || {
        let m = c.metrics();
        (m.contains(&format!(
            r#"csivol_controller_queue{{plugin="{PLUGIN}",kind="create"}} 1"#
        )) && m.contains(&format!(
            r#"csivol_controller_queue_oldest_seconds{{plugin="{PLUGIN}"}}"#
        )))
        .then_some(m)
    });
    exported.add(&second);
    exported
}

fn volume_spec(name: &str) -> String {
    format!(
        "name = \"{name}\"\nplugin = \"{PLUGIN}\"\naccess_mode = \"single-node-writer\"\n\
         attachment = \"file-system\"\ncapacity_bytes = 1048576\n"
    )
}

/// Creates `volume` and claims it on `node`, waiting for it to be ready when `ready`.
fn claim(c: &Cluster, volume: &str, node: &str, ready: bool) {
    c.create_volume_spec(volume, &volume_spec(volume));
    let mut args = vec!["claim", volume, "--node", node, "--alloc", "a1"];
    if ready {
        args.extend(["--wait", "--timeout", "60s"]);
    }
    c.csivol(&args).ok();
}
