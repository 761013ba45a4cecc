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

/// From the plugins' call logs: for each volume, the time between a successful
/// NodePublishVolume and the next successful NodeUnpublishVolume on a node; two nodes'
/// intervals of one volume must never overlap. (A call is logged after it took effect and
/// before it is answered, and the server lets another node publish only after the first
/// reported its unpublish, so a correct run has strictly ordered intervals.)
pub fn call_log_overlaps(nodes: &[(String, PathBuf)]) -> Vec<String> {
    let ok = csivol_csi::domain::code_name(tonic::Code::Ok);
    // volume id -> [(start, end, node)]
    let mut intervals: BTreeMap<String, Vec<(u64, u64, String)>> = BTreeMap::new();
    for (name, dir) in nodes {
        let log =
            std::fs::read_to_string(dir.join("plugin").join("calls.jsonl")).unwrap_or_default();
        let mut open: BTreeMap<String, u64> = BTreeMap::new();
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
            match rpc {
                "NodePublishVolume" => {
                    open.entry(volume.to_owned()).or_insert(at);
                }
                "NodeUnpublishVolume" => {
                    if let Some(start) = open.remove(volume) {
                        intervals.entry(volume.to_owned()).or_default().push((
                            start,
                            at,
                            name.clone(),
                        ));
                    }
                }
                _ => {}
            }
        }
        for (volume, start) in open {
            intervals
                .entry(volume)
                .or_default()
                .push((start, u64::MAX, name.clone()));
        }
    }
    let mut out = Vec::new();
    for (volume, mut spans) in intervals {
        spans.sort();
        for pair in spans.windows(2) {
            let ((s1, e1, n1), (s2, _, n2)) = (&pair[0], &pair[1]);
            if n1 != n2 && s2 < e1 {
                out.push(format!(
                    "two writers on volume {volume} per the plugins' call logs: {n1} published it at {s1} ms until {}, {n2} published it at {s2} ms",
                    if *e1 == u64::MAX { "the end".to_owned() } else { format!("{e1} ms") }
                ));
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn event(index: u64, kind: &str, actor: &str, message: &str) -> api::Event {
        api::Event {
            index,
            at: String::new(),
            kind: kind.to_owned(),
            volume: Some("v".to_owned()),
            node: Some("n1".to_owned()),
            alloc: None,
            actor: actor.to_owned(),
            message: message.to_owned(),
        }
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
