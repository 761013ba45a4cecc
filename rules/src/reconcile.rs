//! Controller-side reconciliation, pure: a plugin's listing (ListVolumes with the nodes
//! each volume is published to) against csivol's attachments of that plugin's volumes →
//! what differs. Nothing here fixes anything: findings are shown and logged as events, and
//! an operator acts on them (`csivol detach` with a reason).
//!
//! A finding is shown only once two listings in a row found it: a listing taken while an
//! attach or detach was under way would otherwise report the in-between state.

use std::collections::{BTreeMap, BTreeSet};

use csivol_api::{AttachmentState, FindingKind, ListedVolume};
use serde::{Deserialize, Serialize};

/// One csivol attachment of the plugin's volumes, with the plugin's id of its node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    pub volume: String,
    pub external_id: String,
    pub node: String,
    pub node_id: Option<String>,
    pub state: AttachmentState,
    /// When the attachment last changed (ms): one that changed after the listing started
    /// is not judged by it.
    pub updated_at: i64,
}

/// What csivol knows besides its attachments: its volumes of the plugin and the plugin's
/// node ids of its nodes.
#[derive(Clone, Debug, Default)]
pub struct Known {
    /// Plugin volume id → csivol volume.
    pub volumes: BTreeMap<String, String>,
    /// Plugin node id → csivol node.
    pub nodes: BTreeMap<String, String>,
}

/// A difference found in one listing.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Found {
    pub kind: FindingKind,
    pub external_id: String,
    pub node_id: Option<String>,
    pub volume: Option<String>,
    pub node: Option<String>,
    pub message: String,
}

impl Found {
    /// What makes two listings' findings the same finding.
    pub fn key(&self) -> (FindingKind, &str, Option<&str>) {
        (self.kind, &self.external_id, self.node_id.as_deref())
    }
}

/// Compares one complete listing, taken from `started_ms` on, with csivol's records.
pub fn compare(
    known: &Known,
    recorded: &[Recorded],
    listed: &[ListedVolume],
    started_ms: i64,
) -> Vec<Found> {
    let mut out = Vec::new();
    let ours: BTreeSet<(&str, &str)> = recorded
        .iter()
        .filter_map(|r| Some((r.external_id.as_str(), r.node_id.as_deref()?)))
        .collect();
    let published: BTreeSet<(&str, &str)> = listed
        .iter()
        .flat_map(|l| {
            l.published_node_ids
                .iter()
                .map(|n| (l.external_id.as_str(), n.as_str()))
        })
        .collect();
    let listed_ids: BTreeSet<&str> = listed.iter().map(|l| l.external_id.as_str()).collect();
    for &(ext, node_id) in &published {
        if ours.contains(&(ext, node_id)) {
            continue;
        }
        let volume = known.volumes.get(ext).cloned();
        let node = known.nodes.get(node_id).cloned();
        out.push(Found {
            kind: FindingKind::Leaked,
            external_id: ext.to_owned(),
            node_id: Some(node_id.to_owned()),
            message: format!(
                "the plugin has volume {} published to node {}, where csivol has no attachment of it",
                volume.as_deref().map_or_else(|| format!("`{ext}` (not a csivol volume)"), |v| format!("`{v}`")),
                node.as_deref().map_or_else(|| format!("`{node_id}` (no csivol node)"), |n| format!("`{n}`")),
            ),
            volume,
            node,
        });
    }
    for r in recorded {
        // Only a settled attachment is expected at the plugin; one that changed after the
        // listing started is judged by the next listing.
        if r.state != AttachmentState::Attached || r.updated_at >= started_ms {
            continue;
        }
        let Some(node_id) = r.node_id.as_deref() else {
            continue;
        };
        if published.contains(&(r.external_id.as_str(), node_id)) {
            continue;
        }
        let why = if listed_ids.contains(r.external_id.as_str()) {
            "the plugin does not list it published there"
        } else {
            "the plugin does not list the volume at all"
        };
        out.push(Found {
            kind: FindingKind::Missing,
            external_id: r.external_id.clone(),
            node_id: Some(node_id.to_owned()),
            volume: Some(r.volume.clone()),
            node: Some(r.node.clone()),
            message: format!(
                "csivol has volume `{}` attached to node `{}`, but {why}",
                r.volume, r.node
            ),
        });
    }
    for l in listed {
        if let Some(why) = &l.abnormal {
            let volume = known.volumes.get(&l.external_id).cloned();
            out.push(Found {
                kind: FindingKind::Abnormal,
                external_id: l.external_id.clone(),
                node_id: None,
                node: None,
                message: format!("the plugin says the volume is abnormal: {why}"),
                volume,
            });
        }
    }
    out.sort();
    out
}

/// A finding as the server keeps it between listings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kept {
    pub found: Found,
    /// When it was first found (ms).
    pub since: i64,
    /// Whether two listings in a row found it: shown, and its event written.
    pub confirmed: bool,
}

/// What one listing changes: the findings to keep, those newly confirmed (an event each)
/// and the confirmed ones that are gone (an event each).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Update {
    pub keep: Vec<Kept>,
    pub confirmed: Vec<Found>,
    pub resolved: Vec<Found>,
}

pub fn update(before: &[Kept], now: Vec<Found>, at: i64) -> Update {
    let mut u = Update::default();
    let seen: BTreeSet<_> = now.iter().map(Found::key).collect();
    for k in before {
        if k.confirmed && !seen.contains(&k.found.key()) {
            u.resolved.push(k.found.clone());
        }
    }
    for f in now {
        let keep = match before.iter().find(|k| k.found.key() == f.key()) {
            Some(k) => {
                if !k.confirmed {
                    u.confirmed.push(f.clone());
                }
                Kept {
                    found: f,
                    since: k.since,
                    confirmed: true,
                }
            }
            None => Kept {
                found: f,
                since: at,
                confirmed: false,
            },
        };
        u.keep.push(keep);
    }
    u
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> Known {
        Known {
            volumes: [("e1", "v1"), ("e2", "v2")]
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .into(),
            nodes: [("n1-id", "n1"), ("n2-id", "n2")]
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .into(),
        }
    }

    fn rec(ext: &str, node: &str, state: AttachmentState, updated_at: i64) -> Recorded {
        let volume = known().volumes[ext].clone();
        Recorded {
            volume,
            external_id: ext.into(),
            node: node.into(),
            node_id: Some(format!("{node}-id")),
            state,
            updated_at,
        }
    }

    fn listed(ext: &str, nodes: &[&str]) -> ListedVolume {
        ListedVolume {
            external_id: ext.into(),
            published_node_ids: nodes.iter().map(|n| format!("{n}-id")).collect(),
            abnormal: None,
            capacity_bytes: 0,
            context: Default::default(),
        }
    }

    /// (case, records, listing) → (kind, volume, node) of each finding.
    fn check(
        records: &[Recorded],
        listing: &[ListedVolume],
    ) -> Vec<(FindingKind, Option<String>, Option<String>)> {
        compare(&known(), records, listing, 100)
            .into_iter()
            .map(|f| (f.kind, f.volume, f.node))
            .collect()
    }

    type Found3 = (FindingKind, Option<String>, Option<String>);
    /// A case's name, csivol's records, the plugin's listing, the findings.
    type Case = (&'static str, Vec<Recorded>, Vec<ListedVolume>, Vec<Found3>);

    #[test]
    fn the_comparison_table() {
        use AttachmentState::*;
        use FindingKind::*;
        let s = |x: &str| Some(x.to_owned());
        let cases: Vec<Case> = vec![
            (
                "agree",
                vec![rec("e1", "n1", Attached, 10)],
                vec![listed("e1", &["n1"])],
                vec![],
            ),
            ("nothing anywhere", vec![], vec![listed("e1", &[])], vec![]),
            (
                "leaked",
                vec![],
                vec![listed("e1", &["n2"])],
                vec![(Leaked, s("v1"), s("n2"))],
            ),
            (
                "leaked to a second node",
                vec![rec("e1", "n1", Attached, 10)],
                vec![listed("e1", &["n1", "n2"])],
                vec![(Leaked, s("v1"), s("n2"))],
            ),
            (
                "leaked, unknown volume",
                vec![],
                vec![listed("zz", &["n1"])],
                vec![(Leaked, None, s("n1"))],
            ),
            (
                "leaked, unknown node",
                vec![],
                vec![listed("e1", &["n9"])],
                vec![(Leaked, s("v1"), None)],
            ),
            (
                "missing",
                vec![rec("e1", "n1", Attached, 10)],
                vec![listed("e1", &[])],
                vec![(Missing, s("v1"), s("n1"))],
            ),
            (
                "missing, volume not listed",
                vec![rec("e1", "n1", Attached, 10)],
                vec![],
                vec![(Missing, s("v1"), s("n1"))],
            ),
            // In flux or changed since the listing started: judged next time.
            (
                "attaching",
                vec![rec("e1", "n1", Attaching, 10)],
                vec![listed("e1", &[])],
                vec![],
            ),
            (
                "changed during the listing",
                vec![rec("e1", "n1", Attached, 100)],
                vec![listed("e1", &[])],
                vec![],
            ),
            // Any record of the pair means csivol knows it: a detach under way is no leak.
            (
                "detaching",
                vec![rec("e1", "n1", Detaching, 10)],
                vec![listed("e1", &["n1"])],
                vec![],
            ),
            (
                "blocked",
                vec![rec("e1", "n1", Blocked, 10)],
                vec![listed("e1", &["n1"])],
                vec![],
            ),
            (
                "abnormal",
                vec![],
                vec![ListedVolume {
                    abnormal: Some("disk failed".into()),
                    ..listed("e2", &[])
                }],
                vec![(Abnormal, s("v2"), None)],
            ),
        ];
        for (case, records, listing, want) in cases {
            assert_eq!(check(&records, &listing), want, "{case}");
        }
    }

    #[test]
    fn messages_name_both_sides() {
        let f = compare(&known(), &[], &[listed("zz", &["n1"])], 100);
        assert_eq!(
            f[0].message,
            "the plugin has volume `zz` (not a csivol volume) published to node `n1`, where csivol has no attachment of it"
        );
        let f = compare(
            &known(),
            &[rec("e1", "n1", AttachmentState::Attached, 1)],
            &[],
            100,
        );
        assert_eq!(
            f[0].message,
            "csivol has volume `v1` attached to node `n1`, but the plugin does not list the volume at all"
        );
    }

    #[test]
    fn a_finding_is_confirmed_by_the_second_listing_and_resolved_when_gone() {
        let leak = || compare(&known(), &[], &[listed("e1", &["n2"])], 100);
        let first = update(&[], leak(), 1000);
        assert!(first.confirmed.is_empty() && first.resolved.is_empty());
        assert!(!first.keep[0].confirmed);
        let second = update(&first.keep, leak(), 2000);
        assert_eq!(second.confirmed, leak());
        assert_eq!(
            (second.keep[0].since, second.keep[0].confirmed),
            (1000, true)
        );
        let third = update(&second.keep, leak(), 3000);
        assert!(third.confirmed.is_empty(), "said once");
        let gone = update(&third.keep, vec![], 4000);
        assert_eq!(gone.resolved, leak());
        assert!(gone.keep.is_empty());
        // A finding seen once and gone was never shown: nothing to resolve.
        assert!(update(&first.keep, vec![], 2000).resolved.is_empty());
    }
}
