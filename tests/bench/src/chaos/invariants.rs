//! What must hold however the faults fall, checked while they fall and at the end:
//! never two nodes writing one single-writer volume (the agents' target paths, presented
//! by a mount or a marker file, and the plugins' own records; afterwards the plugins' call
//! logs), no claim `ready` without its mount, nothing left over once the load drained, and
//! every force action preceded by an operator's.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use csivol_api as api;

use super::super::client::Http;

/// Whether `target` presents a volume: a mount point (`bind`) or the marker file of
/// `csivol-hostpath --mount none`.
pub fn presented(target: &Path, mount: &str) -> bool {
    if mount == "none" {
        target.join(".csivol-hostpath").is_file()
    } else {
        csivol_tests::is_mounted(target)
    }
}

/// Per volume, the nodes that present it or whose plugin records a publication of it
/// (targets are `<node>/agent/targets/<volume>/<alloc>`).
pub fn writers(nodes: &[(String, PathBuf)], mount: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, dir) in nodes {
        let targets = dir.join("agent").join("targets");
        for vol in std::fs::read_dir(&targets).into_iter().flatten().flatten() {
            for alloc in std::fs::read_dir(vol.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                if presented(&alloc.path(), mount) {
                    out.entry(vol.file_name().to_string_lossy().into_owned())
                        .or_default()
                        .insert(format!("{name} (mounted at {})", alloc.path().display()));
                }
            }
        }
        // Files are replaced by rename, so each parses; one that does not is left out here
        // (the end-of-run accounting reports it).
        let mut unreadable = Vec::new();
        let state = crate::cluster::plugin_node_state(&dir.join("plugin"), &mut unreadable);
        for (_, v) in state {
            let Some(publications) = v["publications"].as_object() else {
                continue;
            };
            for target in publications.keys() {
                if let Some(volume) = volume_of(Path::new(target)) {
                    out.entry(volume)
                        .or_default()
                        .insert(format!("{name} (published per its plugin)"));
                }
            }
        }
    }
    out
}

fn volume_of(target: &Path) -> Option<String> {
    let parts: Vec<_> = target.components().collect();
    let i = parts.iter().position(|c| c.as_os_str() == "targets")?;
    Some(parts.get(i + 1)?.as_os_str().to_string_lossy().into_owned())
}

/// Volumes held by more than one node in `w`, as violations.
pub fn double_writers(w: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    w.iter()
        .filter_map(|(volume, holders)| {
            let nodes: BTreeSet<&str> = holders
                .iter()
                .map(|h| h.split(' ').next().unwrap_or(h))
                .collect();
            (nodes.len() > 1).then(|| {
                format!(
                    "two writers on single-writer volume {volume}: {}",
                    holders.iter().cloned().collect::<Vec<_>>().join(", ")
                )
            })
        })
        .collect()
}

/// From the plugins' call logs: for each volume and target, the time from the start of a
/// successful NodePublishVolume to the end of the next successful NodeUnpublishVolume of
/// that target (a mount made at some moment in the first call and gone at some moment in
/// the second is inside it); two nodes' intervals of one volume must never overlap. (The
/// server lets another node publish only after the first reported its unpublish, which it
/// does after the call returned, so a correct run has strictly ordered intervals.)
pub fn call_log_overlaps(nodes: &[(String, PathBuf)]) -> Vec<String> {
    let mut intervals: BTreeMap<String, Vec<Span>> = BTreeMap::new();
    for (name, dir) in nodes {
        let log =
            std::fs::read_to_string(dir.join("plugin").join("calls.jsonl")).unwrap_or_default();
        for (volume, span) in publication_spans(name, &log) {
            intervals.entry(volume).or_default().push(span);
        }
    }
    let mut out = Vec::new();
    for (volume, mut spans) in intervals {
        spans.sort();
        for (i, a) in spans.iter().enumerate() {
            // Every later span that starts before this one ends overlaps it.
            for b in spans[i + 1..].iter().take_while(|b| b.start < a.end) {
                if a.node != b.node {
                    out.push(format!(
                        "two writers on volume {volume} per the plugins' call logs: {} published it at {} ms until {}, {} published it at {} ms",
                        a.node,
                        a.start,
                        if a.end == u64::MAX { "the end".to_owned() } else { format!("{} ms", a.end) },
                        b.node,
                        b.start
                    ));
                }
            }
        }
    }
    out
}

/// When one target of a volume held a publication on one node, per its plugin's log
/// (unix ms; `end` `u64::MAX`: still published).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Span {
    start: u64,
    end: u64,
    node: String,
}

/// The publication spans in one plugin's call log, by volume.
fn publication_spans(node: &str, log: &str) -> Vec<(String, Span)> {
    let ok = csivol_csi::convert::code_name(tonic::Code::Ok);
    // (volume, target) -> when the first publication of it began
    let mut open: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut out = Vec::new();
    for line in log.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["code"] != ok {
            continue;
        }
        let (Some(rpc), Some(volume), Some(at)) = (
            v["rpc"].as_str(),
            v["volume_id"].as_str(),
            v["at_ms"].as_u64(),
        ) else {
            continue;
        };
        let started = v["started_ms"].as_u64().unwrap_or(at);
        let key = (
            volume.to_owned(),
            v["target_path"].as_str().unwrap_or_default().to_owned(),
        );
        match rpc {
            "NodePublishVolume" => {
                open.entry(key).or_insert(started);
            }
            "NodeUnpublishVolume" => {
                if let Some(start) = open.remove(&key) {
                    let node = node.to_owned();
                    out.push((
                        key.0,
                        Span {
                            start,
                            end: at,
                            node,
                        },
                    ));
                }
            }
            _ => {}
        }
    }
    for ((volume, _), start) in open {
        let (end, node) = (u64::MAX, node.to_owned());
        out.push((volume, Span { start, end, node }));
    }
    out
}

/// Every event of the log, oldest first.
pub async fn all_events(http: &Http) -> anyhow::Result<Vec<api::Event>> {
    let mut out: Vec<api::Event> = Vec::new();
    let mut after = 0;
    loop {
        let page: Vec<api::Event> = http
            .get(&format!("/v1/events?index={after}&limit=10000"))
            .await?
            .expect("events", &[200])?
            .json()?;
        let Some(last) = page.last() else {
            return Ok(out);
        };
        after = last.index;
        out.extend(page);
    }
}

/// Force actions (force-released claims, force-detached volumes) that no operator's
/// action on the same volume and node preceded.
pub fn unattributed_force(events: &[api::Event]) -> Vec<String> {
    let mut by_operator: BTreeSet<(Option<String>, Option<String>)> = BTreeSet::new();
    let mut out = Vec::new();
    for e in events {
        let forced = e.kind.contains("force") || e.message.contains("force");
        if e.actor.starts_with("operator:") {
            by_operator.insert((e.volume.clone(), e.node.clone()));
            by_operator.insert((e.volume.clone(), None));
            by_operator.insert((None, e.node.clone()));
            continue;
        }
        if forced
            && !by_operator.contains(&(e.volume.clone(), e.node.clone()))
            && !by_operator.contains(&(e.volume.clone(), None))
            && !by_operator.contains(&(None, e.node.clone()))
        {
            out.push(format!(
                "force action without an operator: event {} {} on volume {} node {} by {}: {}",
                e.index,
                e.kind,
                e.volume.as_deref().unwrap_or("-"),
                e.node.as_deref().unwrap_or("-"),
                e.actor,
                e.message
            ));
        }
    }
    out
}

/// Events that name an alloc beginning with `prefix`, as violations: claims that were
/// refused must leave nothing in the event log.
pub fn recorded_allocs(events: &[api::Event], prefix: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.alloc.as_deref().is_some_and(|a| a.starts_with(prefix)))
        .map(|e| {
            format!(
                "a refused claim recorded: event {} {} of alloc {} on volume {}: {}",
                e.index,
                e.kind,
                e.alloc.as_deref().unwrap_or("-"),
                e.volume.as_deref().unwrap_or("-"),
                e.message
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(index: u64, kind: &str, actor: &str, message: &str) -> api::Event {
        api::Event {
            index,
            at: String::new(),
            kind: kind.to_owned(),
            volume: Some("v".to_owned()),
            namespace: None,
            node: Some("n1".to_owned()),
            alloc: None,
            actor: actor.to_owned(),
            message: message.to_owned(),
        }
    }

    #[test]
    fn an_event_of_a_refused_claim_is_a_violation() {
        let mut made = event(5, "claim-created", "operator:abc", "claimed");
        made.alloc = Some("oversized-7".to_owned());
        let mut other = event(6, "claim-created", "operator:abc", "claimed");
        other.alloc = Some("chaos-1-7".to_owned());
        assert!(recorded_allocs(&[other.clone()], "oversized-").is_empty());
        let found = recorded_allocs(&[other, made], "oversized-");
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("oversized-7"), "{found:?}");
    }

    #[test]
    fn force_actions_need_an_operator_before_them() {
        let detached = event(
            3,
            "volume-detached",
            "node:n2",
            "force-detached (without the node)",
        );
        assert_eq!(unattributed_force(std::slice::from_ref(&detached)).len(), 1);
        let unblock = event(
            2,
            "claim-force-released",
            "operator:abc",
            "force-released by unblock",
        );
        assert!(unattributed_force(&[unblock, detached]).is_empty());
        let normal = event(4, "claim-ready", "node:n1", "published");
        assert!(unattributed_force(&[normal]).is_empty());
    }

    /// Spans run from a publication's start to its unpublication's end, per target; two
    /// nodes' spans of one volume that share a millisecond are two writers.
    #[test]
    fn publications_per_the_call_logs() {
        let dir = csivol_tests::TestDir::new("call-logs");
        let line = |rpc: &str, target: &str, started: u64, at: u64| {
            format!(
                r#"{{"rpc":"{rpc}","volume_id":"v","node_id":"x","target_path":"{target}","code":"OK","in_flight":1,"started_ms":{started},"at_ms":{at}}}"#
            )
        };
        let mut nodes = Vec::new();
        for (name, lines) in [
            (
                "n1",
                vec![
                    line("NodePublishVolume", "/t/a", 100, 110),
                    line("NodePublishVolume", "/t/a", 120, 121),
                    line("NodeUnpublishVolume", "/t/a", 190, 200),
                ],
            ),
            (
                "n2",
                vec![
                    line("NodePublishVolume", "/t/b", 200, 210),
                    line("NodeUnpublishVolume", "/t/b", 300, 305),
                ],
            ),
        ] {
            let plugin = dir.path().join(name).join("plugin");
            std::fs::create_dir_all(&plugin).unwrap();
            std::fs::write(plugin.join("calls.jsonl"), lines.join("\n")).unwrap();
            nodes.push((name.to_owned(), dir.path().join(name)));
        }
        assert_eq!(call_log_overlaps(&nodes), Vec::<String>::new());
        // n2's publication starting before n1's unpublication ended: two writers.
        let plugin = dir.path().join("n2").join("plugin");
        let lines = [
            line("NodePublishVolume", "/t/b", 195, 199),
            line("NodeUnpublishVolume", "/t/b", 300, 305),
        ];
        std::fs::write(plugin.join("calls.jsonl"), lines.join("\n")).unwrap();
        let found = call_log_overlaps(&nodes);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("n1 published it at 100 ms until 200 ms"),
            "{found:?}"
        );
    }

    /// The scan of the nodes' targets (marker files, as with `--mount none`) names a
    /// single-writer volume presented on two nodes, and only that one: a volume presented
    /// on one node, even at two targets of it, is no double writer.
    #[test]
    fn a_volume_presented_on_two_nodes_is_two_writers() {
        let dir = csivol_tests::TestDir::new("two-writers");
        let present = |node: &str, volume: &str, alloc: &str| {
            let target = dir
                .path()
                .join(node)
                .join("agent")
                .join("targets")
                .join(volume)
                .join(alloc);
            std::fs::create_dir_all(&target).unwrap();
            std::fs::write(target.join(".csivol-hostpath"), b"").unwrap();
        };
        present("n1", "v1", "a");
        present("n1", "v2", "b");
        present("n1", "v2", "c");
        present("n2", "v3", "d");
        // A target left without its marker presents nothing.
        std::fs::create_dir_all(dir.path().join("n2/agent/targets/v1/e")).unwrap();
        let nodes: Vec<(String, PathBuf)> = ["n1", "n2"]
            .iter()
            .map(|n| ((*n).to_owned(), dir.path().join(n)))
            .collect();
        assert_eq!(
            double_writers(&writers(&nodes, "none")),
            Vec::<String>::new()
        );
        present("n2", "v1", "e");
        let found = double_writers(&writers(&nodes, "none"));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("two writers on single-writer volume v1: n1 (mounted at "),
            "{found:?}"
        );
        assert!(found[0].contains("n2 (mounted at "), "{found:?}");
    }

    #[test]
    fn the_volume_is_read_from_the_target_path() {
        assert_eq!(
            volume_of(Path::new("/tmp/x/node-1/agent/targets/vol-000001/a1")).as_deref(),
            Some("vol-000001")
        );
        let mut w = BTreeMap::new();
        w.insert(
            "v".to_owned(),
            BTreeSet::from([
                "n1 (mounted at /a)".to_owned(),
                "n1 (published per its plugin)".to_owned(),
            ]),
        );
        assert!(double_writers(&w).is_empty(), "one node, two sources");
        w.get_mut("v")
            .unwrap()
            .insert("n2 (mounted at /b)".to_owned());
        assert_eq!(double_writers(&w).len(), 1);
    }
}

/// What the observer saw: its scans, the volumes it saw on two nodes (violations), and
/// the per-job volumes and pool members it saw presented (what that check judged of them).
#[derive(Debug, Default)]
pub struct Observed {
    pub scans: u64,
    pub violations: Vec<String>,
    pub job_volumes: BTreeSet<String>,
}

/// Scans the nodes every 100 ms for a single-writer volume presented on two nodes; a
/// sighting counts once a second scan, after it, sees it too (a scan reads the nodes one
/// after the other, so one scan alone can straddle a correct handover).
pub async fn observe(
    nodes: Vec<(String, PathBuf)>,
    mount: String,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Observed {
    let mut out = Observed::default();
    let mut found: BTreeSet<String> = BTreeSet::new();
    while !*stop.borrow() {
        let (n, m) = (nodes.clone(), mount.clone());
        let scan = tokio::task::spawn_blocking(move || {
            let seen = writers(&n, &m);
            let jobs: Vec<String> = seen
                .keys()
                .filter(|v| super::jobs::is_job_volume(v))
                .cloned()
                .collect();
            let first = double_writers(&seen);
            if first.is_empty() {
                return (Vec::new(), jobs);
            }
            let twice = double_writers(&writers(&n, &m))
                .into_iter()
                .filter(|v| {
                    first
                        .iter()
                        .any(|f| f.split(':').next() == v.split(':').next())
                })
                .collect();
            (twice, jobs)
        })
        .await
        .unwrap_or_default();
        out.scans += 1;
        found.extend(scan.0);
        out.job_volumes.extend(scan.1);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    out.violations = found.into_iter().collect();
    out
}
