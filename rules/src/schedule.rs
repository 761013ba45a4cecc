//! Pure: which waiting controller operations of a plugin run next, when slots of its
//! concurrency are free. Table-tested below.
//!
//! A plugin's controller calls share one concurrency limit. Taken in arrival order, a burst
//! of one kind starves the others: Kubernetes' external-attacher let hundreds of detaches
//! delay every attach behind them for minutes (kubernetes-csi/external-attacher#761). So
//! the slots are shared fairly:
//!
//! - between classes (attaches, detaches, everything else): a free slot goes to the class
//!   with the fewest operations running, so a class with work waiting gets its share of the
//!   concurrency however long another class's queue is; between classes running as many,
//!   in turn after the class the last slot went to (so that a serial resource, such as one
//!   node's operations, alternates between them), or to the one waiting longest when
//!   there is no last;
//! - between volumes within a class: to the volume with the fewest of that class's
//!   operations running, so one volume detaching from many nodes does not hold the slots;
//!   then to the operation waiting longest, then the oldest by id.
//!
//! One operation at a time per node is kept (the caller's rule before this one): a node's
//! attaches and detaches follow each other, as its volumes' slots on it depend on them.

use std::collections::{BTreeMap, BTreeSet};

use crate::kinds::OpKind;

/// The classes that share a plugin's concurrency.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpClass {
    /// ControllerPublishVolume: a claim waits for it.
    Attach,
    /// ControllerUnpublishVolume.
    Detach,
    /// Creating, deleting, expanding, modifying volumes; snapshots.
    Other,
}

impl OpClass {
    const ALL: [OpClass; 3] = [Self::Attach, Self::Detach, Self::Other];

    /// The class after this one, in turn.
    fn next(self) -> Self {
        match self {
            Self::Attach => Self::Detach,
            Self::Detach => Self::Other,
            Self::Other => Self::Attach,
        }
    }

    pub fn of(kind: OpKind) -> Self {
        match kind {
            OpKind::Publish => Self::Attach,
            OpKind::Unpublish => Self::Detach,
            _ => Self::Other,
        }
    }
}

/// An operation waiting for a slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting<'a> {
    pub id: i64,
    pub kind: OpKind,
    pub volume: &'a str,
    pub node: Option<&'a str>,
    /// Since when it waits to run: queued, or due again after a retry's backoff (unix ms).
    pub due_since: i64,
}

/// An operation running on a controller host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Running<'a> {
    pub kind: OpKind,
    pub volume: &'a str,
    pub node: Option<&'a str>,
}

/// What [`pick`] chose: the ids to start, in order, and the class the last went to (for
/// the next call's `last`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Picked {
    pub ids: Vec<i64>,
    pub last: Option<OpClass>,
}

/// The waiting operations to start now, in the order to start them, for `slots` free
/// slots; `last` is the class the previous slot went to.
pub fn pick(
    waiting: &[Waiting<'_>],
    running: &[Running<'_>],
    slots: usize,
    mut last: Option<OpClass>,
) -> Picked {
    let mut busy_nodes: BTreeSet<&str> = running.iter().filter_map(|r| r.node).collect();
    let mut per_class: BTreeMap<OpClass, usize> = BTreeMap::new();
    let mut per_volume: BTreeMap<(OpClass, &str), usize> = BTreeMap::new();
    for r in running {
        let class = OpClass::of(r.kind);
        *per_class.entry(class).or_default() += 1;
        *per_volume.entry((class, r.volume)).or_default() += 1;
    }
    let mut left: Vec<&Waiting<'_>> = waiting.iter().collect();
    left.sort_by_key(|w| (w.due_since, w.id));
    let mut out = Vec::new();
    while out.len() < slots {
        let free = |w: &Waiting<'_>| w.node.is_none_or(|n| !busy_nodes.contains(n));
        // The head of each class: its longest waiting operation that may start.
        let mut heads: BTreeMap<OpClass, (i64, i64)> = BTreeMap::new();
        for w in left.iter().filter(|w| free(w)) {
            heads
                .entry(OpClass::of(w.kind))
                .or_insert((w.due_since, w.id));
        }
        // The class to serve: fewest running; among those, in turn after `last`, or the
        // one waiting longest.
        let Some(fewest) = heads
            .keys()
            .map(|c| per_class.get(c).copied().unwrap_or(0))
            .min()
        else {
            break;
        };
        let candidates: Vec<OpClass> = OpClass::ALL
            .into_iter()
            .filter(|c| heads.contains_key(c))
            .filter(|c| per_class.get(c).copied().unwrap_or(0) == fewest)
            .collect();
        let class = match last {
            Some(l) => {
                let mut c = l.next();
                while !candidates.contains(&c) {
                    c = c.next();
                }
                c
            }
            None => *candidates
                .iter()
                .min_by_key(|c| heads[*c])
                .expect("a class has an operation that may start"),
        };
        // Within it, the volume with the fewest running, then the longest waiting.
        let i = (0..left.len())
            .filter(|i| OpClass::of(left[*i].kind) == class && free(left[*i]))
            .min_by_key(|i| {
                let w = left[*i];
                (
                    per_volume.get(&(class, w.volume)).copied().unwrap_or(0),
                    w.due_since,
                    w.id,
                )
            })
            .expect("the class has an operation that may start");
        let w = left.remove(i);
        out.push(w.id);
        last = Some(class);
        *per_class.entry(class).or_default() += 1;
        *per_volume.entry((class, w.volume)).or_default() += 1;
        if let Some(n) = w.node {
            busy_nodes.insert(n);
        }
    }
    Picked { ids: out, last }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OpKind::{Create, Publish, Unpublish};

    /// `pick` with no last class: its ids.
    fn first(q: &[Waiting<'_>], running: &[Running<'_>], slots: usize) -> Vec<i64> {
        pick(q, running, slots, None).ids
    }

    fn w(
        id: i64,
        kind: OpKind,
        volume: &'static str,
        node: Option<&'static str>,
    ) -> Waiting<'static> {
        Waiting {
            id,
            kind,
            volume,
            node,
            due_since: id,
        }
    }

    fn r(kind: OpKind, volume: &'static str, node: Option<&'static str>) -> Running<'static> {
        Running { kind, volume, node }
    }

    /// 500 detaches from 500 nodes, queued before one attach.
    fn burst() -> Vec<Waiting<'static>> {
        let names: &'static [String] = Box::leak(
            (0..500)
                .map(|i| format!("v{i}"))
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        let nodes: &'static [String] = Box::leak(
            (0..500)
                .map(|i| format!("n{i}"))
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        let mut q: Vec<_> = (0..500)
            .map(|i| w(i as i64 + 1, Unpublish, &names[i], Some(nodes[i].as_str())))
            .collect();
        q.push(w(501, Publish, "fresh", Some("n-new")));
        q
    }

    #[test]
    fn an_attach_is_not_queued_behind_a_detach_burst() {
        let q = burst();
        // Equal shares (nothing runs): the oldest goes first, a detach.
        assert_eq!(first(&q, &[], 1), [1]);
        // One detach running: the next slot is the attach's, though it came last.
        assert_eq!(first(&q, &[r(Unpublish, "v0", Some("n0"))], 1), [501]);
        // Three slots busy with detaches, one free: the attach's class has none running.
        let running = [
            r(Unpublish, "x1", Some("m1")),
            r(Unpublish, "x2", Some("m2")),
            r(Unpublish, "x3", Some("m3")),
        ];
        assert_eq!(first(&q, &running, 1), [501]);
        // Several free: a detach, the attach, then detaches in arrival order.
        assert_eq!(first(&q, &[], 4), [1, 501, 2, 3]);
    }

    #[test]
    fn backlogged_classes_share_the_slots() {
        let q = vec![
            w(1, Unpublish, "a", Some("n1")),
            w(2, Unpublish, "b", Some("n2")),
            w(3, Unpublish, "c", Some("n3")),
            w(4, Publish, "d", Some("n4")),
            w(5, Publish, "e", Some("n5")),
            w(6, Create, "f", None),
            w(7, Create, "g", None),
        ];
        // Four slots among three backlogged classes: every class is served, the one
        // waiting longest first, then in turn.
        let got = first(&q, &[], 4);
        assert_eq!(got, [1, 6, 4, 2]);
        // With two detaches running, the next two slots go to the other classes.
        let running = [r(Unpublish, "x", Some("m1")), r(Unpublish, "y", Some("m2"))];
        assert_eq!(first(&q, &running, 2), [4, 6]);
        // Equal shares, then the longest waiting: the class whose head is oldest.
        let running = [r(Publish, "x", Some("m1")), r(Unpublish, "y", Some("m2"))];
        assert_eq!(first(&q, &running, 1), [6]);
        assert_eq!(first(&q, &[r(Create, "x", None)], 1), [1]);
    }

    #[test]
    fn one_volume_does_not_hold_the_slots_of_its_class() {
        // Volume `wide` detaches from five nodes, `narrow` from one, queued after.
        let q = vec![
            w(1, Unpublish, "wide", Some("n1")),
            w(2, Unpublish, "wide", Some("n2")),
            w(3, Unpublish, "wide", Some("n3")),
            w(4, Unpublish, "wide", Some("n4")),
            w(5, Unpublish, "wide", Some("n5")),
            w(6, Unpublish, "narrow", Some("n6")),
        ];
        assert_eq!(first(&q, &[], 3), [1, 6, 2]);
        assert_eq!(first(&q, &[r(Unpublish, "wide", Some("n9"))], 1), [6]);
    }

    #[test]
    fn one_operation_at_a_time_per_node() {
        let q = vec![
            w(1, Unpublish, "a", Some("n1")),
            w(2, Publish, "b", Some("n1")),
            w(3, Publish, "c", Some("n2")),
        ];
        // n1 runs one (its detach, the oldest); b's attach waits for it, c's runs.
        assert_eq!(first(&q, &[], 3), [1, 3]);
        // n1 busy: only n2's attach may start.
        assert_eq!(first(&q, &[r(Create, "z", Some("n1"))], 3), [3]);
        assert_eq!(first(&q, &[], 0), Vec::<i64>::new());
        assert_eq!(first(&[], &[], 5), Vec::<i64>::new());
    }

    #[test]
    fn the_longest_waiting_goes_first_within_a_volume_and_class() {
        // A retried operation counts from when it was due again, not when first queued.
        let mut q = vec![w(1, Create, "a", None), w(2, Create, "b", None)];
        q[0].due_since = 10;
        q[1].due_since = 5;
        assert_eq!(first(&q, &[], 1), [2]);
    }

    #[test]
    fn a_serial_resource_alternates_between_classes() {
        // One node: its operations run one at a time. Detaches queued before an attach and
        // a create: after a detach the attach goes, then the create, then detaches again.
        let q = vec![
            w(1, Unpublish, "a", Some("n1")),
            w(2, Unpublish, "b", Some("n1")),
            w(3, Unpublish, "c", Some("n1")),
            w(4, Publish, "d", Some("n1")),
        ];
        let p = pick(&q, &[], 1, None);
        assert_eq!(
            p,
            Picked {
                ids: vec![1],
                last: Some(OpClass::Detach)
            }
        );
        let rest: Vec<_> = q[1..].to_vec();
        assert_eq!(pick(&rest, &[], 1, p.last).ids, [4]);
        let only_detaches: Vec<_> = q[1..3].to_vec();
        assert_eq!(pick(&only_detaches, &[], 1, Some(OpClass::Attach)).ids, [2]);
        // In turn among the three classes.
        let q = vec![
            w(1, Unpublish, "a", None),
            w(2, Publish, "b", None),
            w(3, Create, "c", None),
            w(4, Unpublish, "d", None),
        ];
        assert_eq!(pick(&q, &[], 1, Some(OpClass::Attach)).ids, [1]);
        assert_eq!(pick(&q, &[], 1, Some(OpClass::Detach)).ids, [3]);
        assert_eq!(pick(&q, &[], 4, Some(OpClass::Other)).ids, [2, 1, 3, 4]);
    }
}
