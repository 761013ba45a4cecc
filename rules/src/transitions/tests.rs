//! The lifecycle table, written out by hand: one claim and its node's attachment, every
//! combination of their states, the node's status and the plugin's need for
//! ControllerPublish; then the cases where several claims or nodes meet.

use csivol_api::domain::AccessMode;
use csivol_api::{AttachmentState, ClaimState, NodeStatus};

use super::*;

/// One claim `c` of alloc `a` on node `n1`, and the volume's attachment there.
///
/// Columns: the claim's state (`blocked+release`: blocked with its release pending), the
/// attachment's (`-`: none), the node's status, whether the plugin needs ControllerPublish;
/// then what follows: the claim's next state (`=`: unchanged), the attachment's (`=`:
/// unchanged, `-`: still none, `+state`: created), the operation queued (`-`: none).
/// `*` is every value, `a,b` each of them. Every combination must match exactly one row.
const TABLE: &str = "
# claim                              attachment  node    cp   | claim       attachment   op
queued                               -           ready   *    | =           -            -
queued                               attaching   ready   *    | =           =            -
queued                               attached    ready   *    | =           unstaging    -
queued                               unstaging   ready   *    | =           =            -
queued                               detaching   ready   *    | =           =            -
queued                               blocked     ready   *    | =           =            -

pending                              -           ready   yes  | attaching   +attaching   publish
pending                              -           ready   no   | publishing  +attached    -
pending                              attaching   ready   *    | attaching   =            -
pending                              attached    ready   *    | publishing  =            -
pending                              unstaging   ready   *    | publishing  attached     -
pending                              detaching   ready   *    | =           =            -
pending                              blocked     ready   *    | blocked     =            -

attaching                            -           ready   yes  | =           +attaching   publish
attaching                            -           ready   no   | publishing  +attached    -
attaching                            attaching   ready   *    | =           =            -
attaching                            attached    ready   *    | publishing  =            -
attaching                            unstaging   ready   *    | publishing  attached     -
attaching                            detaching   ready   *    | pending     =            -
attaching                            blocked     ready   *    | blocked     =            -

publishing                           -           ready   yes  | attaching   +attaching   publish
publishing                           -           ready   no   | =           +attached    -
publishing                           attaching   ready   *    | attaching   =            -
publishing                           attached    ready   *    | =           =            -
publishing                           unstaging   ready   *    | =           attached     -
publishing                           detaching   ready   *    | pending     =            -
publishing                           blocked     ready   *    | blocked     =            -

ready,releasing,failed               -           ready   *    | =           -            -
ready,releasing,failed               attaching   ready   *    | =           =            -
ready,releasing,failed               attached    ready   *    | =           =            -
ready,releasing,failed               unstaging   ready   *    | =           attached     -
ready,releasing,failed               detaching   ready   *    | =           =            -
ready,releasing,failed               blocked     ready   *    | =           =            -

blocked,blocked+release              -           ready   *    | =           -            -
blocked,blocked+release              attaching   ready   *    | =           =            -
blocked,blocked+release              attached    ready   *    | =           =            -
blocked,blocked+release              unstaging   ready   *    | =           attached     -
blocked,blocked+release              detaching   ready   *    | =           =            -
blocked,blocked+release              blocked     ready   *    | =           =            -

*                                    -           lost    *    | =           -            -
*                                    attaching,attached,unstaging,detaching,blocked lost * | = = -
*                                    -           fenced  *    | =           -            -
*                                    attaching,attached,unstaging,detaching,blocked fenced * | = = -
";

const CLAIMS: [&str; 9] = [
    "queued",
    "pending",
    "attaching",
    "publishing",
    "ready",
    "releasing",
    "failed",
    "blocked",
    "blocked+release",
];
const ATTACHMENTS: [&str; 6] = [
    "-",
    "attaching",
    "attached",
    "unstaging",
    "detaching",
    "blocked",
];
const NODES: [&str; 3] = ["ready", "lost", "fenced"];
const CPS: [&str; 2] = ["yes", "no"];

struct Row<'t> {
    line: &'t str,
    inputs: [Vec<&'t str>; 4],
    claim: &'t str,
    attachment: &'t str,
    op: &'t str,
}

fn rows() -> Vec<Row<'static>> {
    let all: [&[&'static str]; 4] = [&CLAIMS, &ATTACHMENTS, &NODES, &CPS];
    TABLE
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| {
            let (left, right) = line.split_once('|').expect("a row has a `|`");
            let left: Vec<&str> = left.split_whitespace().collect();
            let right: Vec<&str> = right.split_whitespace().collect();
            assert_eq!((left.len(), right.len()), (4, 3), "row `{line}`");
            let inputs = std::array::from_fn(|i| {
                if left[i] == "*" {
                    all[i].to_vec()
                } else {
                    let values: Vec<&str> = left[i].split(',').collect();
                    for v in &values {
                        assert!(all[i].contains(v), "row `{line}`: unknown value `{v}`");
                    }
                    values
                }
            });
            Row {
                line,
                inputs,
                claim: right[0],
                attachment: right[1],
                op: right[2],
            }
        })
        .collect()
}

fn node_status(s: &str) -> NodeStatus {
    s.parse().unwrap()
}

/// The table's one claim and attachment as facts, and what [`next`] made of them in the
/// table's notation.
fn run(
    claim: &str,
    attachment: &str,
    node: &str,
    cp: &str,
    held: bool,
) -> (String, String, String) {
    let (state, release_pending) = match claim {
        "blocked+release" => (ClaimState::Blocked, true),
        s => (s.parse::<ClaimState>().unwrap(), false),
    };
    let claims = [ClaimFact {
        alloc: "a",
        node: "n1",
        state,
        release_pending,
    }];
    let attachments: Vec<AttachmentFact<'_>> = match attachment {
        "-" => vec![],
        s => vec![AttachmentFact {
            node: "n1",
            state: s.parse().unwrap(),
            lingering: false,
        }],
    };
    let nodes = [("n1", node_status(node))];
    let changes = next(&Facts {
        access_mode: AccessMode::SingleNodeWriter,
        controller_publish: cp == "yes",
        claims: claims.to_vec(),
        attachments,
        nodes: nodes.to_vec(),
        held,
        full: vec![],
    });
    let claim = match changes.claims.as_slice() {
        [] => "=".to_owned(),
        [("a", s)] => s.to_string(),
        other => panic!("unexpected claim changes {other:?}"),
    };
    let attachment = match changes.attachments.as_slice() {
        [] if attachment == "-" => "-".to_owned(),
        [] => "=".to_owned(),
        [AttachmentChange::Create { node: "n1", state }] => format!("+{state}"),
        [AttachmentChange::Set { node: "n1", state }] => state.to_string(),
        other => panic!("unexpected attachment changes {other:?}"),
    };
    let op = match changes.ops.as_slice() {
        [] => "-".to_owned(),
        [Op::Publish { node: "n1" }] => "publish".to_owned(),
        other => panic!("unexpected ops {other:?}"),
    };
    (claim, attachment, op)
}

#[test]
fn one_claim_by_attachment_by_node_by_controller_publish() {
    let rows = rows();
    let mut checked = 0;
    for claim in CLAIMS {
        for attachment in ATTACHMENTS {
            for node in NODES {
                for cp in CPS {
                    let case = format!("{claim} {attachment} {node} cp={cp}");
                    let matching: Vec<&Row<'_>> = rows
                        .iter()
                        .filter(|r| {
                            [claim, attachment, node, cp]
                                .iter()
                                .zip(&r.inputs)
                                .all(|(v, values)| values.contains(v))
                        })
                        .collect();
                    let [row] = matching.as_slice() else {
                        panic!(
                            "{case}: {} rows of the table match, not one: {:?}",
                            matching.len(),
                            matching.iter().map(|r| r.line).collect::<Vec<_>>()
                        );
                    };
                    let got = run(claim, attachment, node, cp, false);
                    let want = (
                        row.claim.to_owned(),
                        row.attachment.to_owned(),
                        row.op.to_owned(),
                    );
                    assert_eq!(got, want, "{case} (row `{}`)", row.line);
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 9 * 6 * 3 * 2);
}

/// A held volume (restored state, a node not heard from yet): every case of the table
/// again. A claim moves back as it would (to `pending` or `blocked`), never forward; no
/// attachment is made and no ControllerPublish queued; attachments move as they would
/// (taking one down, or keeping one a claim needs, brings the volume to no node).
#[test]
fn a_held_volume_goes_to_no_node() {
    let forward = ["attaching", "publishing"];
    for claim in CLAIMS {
        for attachment in ATTACHMENTS {
            for node in NODES {
                for cp in CPS {
                    let case = format!("{claim} {attachment} {node} cp={cp}");
                    let free = run(claim, attachment, node, cp, false);
                    let (c, a, op) = run(claim, attachment, node, cp, true);
                    let want_claim = if forward.contains(&free.0.as_str()) {
                        "="
                    } else {
                        free.0.as_str()
                    };
                    assert_eq!(c, want_claim, "{case}: the claim");
                    assert!(!a.starts_with('+'), "{case}: no attachment made ({a})");
                    if !free.1.starts_with('+') {
                        assert_eq!(a, free.1, "{case}: the attachment moves as it would");
                    }
                    assert_eq!(op, "-", "{case}: no ControllerPublish");
                }
            }
        }
    }
    // The cases that matter, named: a claim waiting for the volume stays where it is.
    assert_eq!(
        run("pending", "-", "ready", "yes", true),
        ("=".into(), "-".into(), "-".into())
    );
    assert_eq!(
        run("pending", "attached", "ready", "no", true),
        ("=".into(), "=".into(), "-".into())
    );
    assert_eq!(
        run("attaching", "detaching", "ready", "yes", true),
        ("pending".into(), "=".into(), "-".into())
    );
}

fn claim<'a>(alloc: &'a str, node: &'a str, state: ClaimState) -> ClaimFact<'a> {
    ClaimFact {
        alloc,
        node,
        state,
        release_pending: false,
    }
}

fn att(node: &str, state: AttachmentState) -> AttachmentFact<'_> {
    AttachmentFact {
        node,
        state,
        lingering: false,
    }
}

/// An attached volume its node keeps staged after its last release there.
fn lingering(node: &str) -> AttachmentFact<'_> {
    AttachmentFact {
        lingering: true,
        ..att(node, AttachmentState::Attached)
    }
}

/// [`next`]'s changes, one per line, in the order they are applied.
fn render(changes: &Changes<'_>) -> String {
    let mut out = Vec::new();
    for a in &changes.attachments {
        out.push(match a {
            AttachmentChange::Create { node, state } => format!("attachment {node}: new {state}"),
            AttachmentChange::Set { node, state } => format!("attachment {node}: {state}"),
        });
    }
    for o in &changes.ops {
        out.push(match o {
            Op::Publish { node } => format!("op: publish to {node}"),
        });
    }
    for (alloc, state) in &changes.claims {
        out.push(format!("claim {alloc}: {state}"));
    }
    out.join("\n")
}

struct Case<'a> {
    what: &'a str,
    access_mode: AccessMode,
    controller_publish: bool,
    claims: &'a [ClaimFact<'a>],
    attachments: &'a [AttachmentFact<'a>],
    nodes: &'a [(&'a str, NodeStatus)],
    expected: &'a str,
}

#[test]
fn claims_and_nodes_together() {
    use AccessMode::{MultiNodeMultiWriter, SingleNodeWriter};
    use AttachmentState as A;
    use ClaimState as C;
    use NodeStatus::{Lost, Ready};
    let blocked_release = ClaimFact {
        release_pending: true,
        ..claim("b", "n1", C::Blocked)
    };
    let cases = [
        Case {
            what: "single-node: the last claim on n1 is gone; the new one on n2 waits for n1 to unstage",
            access_mode: SingleNodeWriter,
            controller_publish: true,
            claims: &[claim("a", "n2", C::Pending)],
            attachments: &[att("n1", A::Attached)],
            nodes: &[("n1", Ready), ("n2", Ready)],
            expected: "attachment n1: unstaging",
        },
        Case {
            what: "single-node: still detaching from n1",
            access_mode: SingleNodeWriter,
            controller_publish: true,
            claims: &[claim("a", "n2", C::Pending)],
            attachments: &[att("n1", A::Detaching)],
            nodes: &[("n1", Ready), ("n2", Ready)],
            expected: "",
        },
        Case {
            what: "single-node: n1 was lost holding the attachment; n2 waits for an unblock",
            access_mode: SingleNodeWriter,
            controller_publish: false,
            claims: &[claim("a", "n2", C::Publishing)],
            attachments: &[att("n1", A::Blocked)],
            nodes: &[("n1", Lost), ("n2", Ready)],
            expected: "claim a: pending",
        },
        Case {
            what: "single-node: n1's attachment gone at last, n2 attaches",
            access_mode: SingleNodeWriter,
            controller_publish: true,
            claims: &[claim("a", "n2", C::Pending)],
            attachments: &[],
            nodes: &[("n2", Ready)],
            expected: "attachment n2: new attaching\nop: publish to n2\nclaim a: attaching",
        },
        Case {
            what: "multi-node: a second node attaches beside the first",
            access_mode: MultiNodeMultiWriter,
            controller_publish: true,
            claims: &[claim("b", "n1", C::Ready), claim("a", "n2", C::Pending)],
            attachments: &[att("n1", A::Attached)],
            nodes: &[("n1", Ready), ("n2", Ready)],
            expected: "attachment n2: new attaching\nop: publish to n2\nclaim a: attaching",
        },
        Case {
            what: "two claims on one node share one attachment and one publish",
            access_mode: MultiNodeMultiWriter,
            controller_publish: true,
            claims: &[claim("a", "n1", C::Pending), claim("b", "n1", C::Pending)],
            attachments: &[],
            nodes: &[("n1", Ready)],
            expected: "attachment n1: new attaching\nop: publish to n1\nclaim a: attaching\nclaim b: attaching",
        },
        Case {
            what: "single-node: the earlier claim takes the volume, the later one on another node waits",
            access_mode: SingleNodeWriter,
            controller_publish: false,
            claims: &[claim("a", "n1", C::Pending), claim("b", "n2", C::Pending)],
            attachments: &[],
            nodes: &[("n1", Ready), ("n2", Ready)],
            expected: "attachment n1: new attached\nclaim a: publishing",
        },
        Case {
            what: "a lost node's claim waits; a ready node's attaches",
            access_mode: MultiNodeMultiWriter,
            controller_publish: false,
            claims: &[claim("a", "n1", C::Pending), claim("b", "n2", C::Pending)],
            attachments: &[],
            nodes: &[("n1", Lost), ("n2", Ready)],
            expected: "attachment n2: new attached\nclaim b: publishing",
        },
        Case {
            what: "a blocked claim whose release is pending still holds its node's attachment",
            access_mode: MultiNodeMultiWriter,
            controller_publish: true,
            claims: &[blocked_release, claim("a", "n2", C::Pending)],
            attachments: &[att("n1", A::Blocked)],
            nodes: &[("n1", Lost), ("n2", Ready)],
            expected: "attachment n2: new attaching\nop: publish to n2\nclaim a: attaching",
        },
        Case {
            what: "a returned node's blocked claim released with its release pending: the attachment stays",
            access_mode: SingleNodeWriter,
            controller_publish: true,
            claims: &[blocked_release],
            attachments: &[att("n1", A::Attached)],
            nodes: &[("n1", Ready)],
            expected: "",
        },
        Case {
            what: "a queued claim holds nothing: the attachment of a released node unstages",
            access_mode: SingleNodeWriter,
            controller_publish: true,
            claims: &[claim("q", "n1", C::Queued)],
            attachments: &[att("n1", A::Attached)],
            nodes: &[("n1", Ready)],
            expected: "attachment n1: unstaging",
        },
        Case {
            what: "a queued claim beside a ready one: nothing to do",
            access_mode: SingleNodeWriter,
            controller_publish: true,
            claims: &[claim("a", "n1", C::Ready), claim("q", "n1", C::Queued)],
            attachments: &[att("n1", A::Attached)],
            nodes: &[("n1", Ready)],
            expected: "",
        },
        Case {
            what: "lingering: n1 keeps the volume staged with no claim left",
            access_mode: SingleNodeWriter,
            controller_publish: true,
            claims: &[],
            attachments: &[lingering("n1")],
            nodes: &[("n1", Ready)],
            expected: "",
        },
        Case {
            what: "lingering: a queued claim elsewhere holds nothing and ends nothing",
            access_mode: SingleNodeWriter,
            controller_publish: true,
            claims: &[claim("q", "n2", C::Queued)],
            attachments: &[lingering("n1")],
            nodes: &[("n1", Ready), ("n2", Ready)],
            expected: "",
        },
        Case {
            what: "lingering: the next claim on n1 publishes from the staging kept",
            access_mode: SingleNodeWriter,
            controller_publish: true,
            claims: &[claim("a", "n1", C::Pending)],
            attachments: &[lingering("n1")],
            nodes: &[("n1", Ready)],
            expected: "claim a: publishing",
        },
        Case {
            what: "lingering: a single-node claim on n2 ends n1's linger at once and waits for it",
            access_mode: SingleNodeWriter,
            controller_publish: true,
            claims: &[claim("a", "n2", C::Pending)],
            attachments: &[lingering("n1")],
            nodes: &[("n1", Ready), ("n2", Ready)],
            expected: "attachment n1: unstaging",
        },
        Case {
            what: "lingering: a granted claim on n2 that was publishing goes back to waiting",
            access_mode: SingleNodeWriter,
            controller_publish: false,
            claims: &[claim("a", "n2", C::Publishing)],
            attachments: &[lingering("n1")],
            nodes: &[("n1", Ready), ("n2", Ready)],
            expected: "attachment n1: unstaging\nclaim a: pending",
        },
        Case {
            what: "lingering: a multi-node volume goes to n2 beside n1's staging",
            access_mode: MultiNodeMultiWriter,
            controller_publish: true,
            claims: &[claim("a", "n2", C::Pending)],
            attachments: &[lingering("n1")],
            nodes: &[("n1", Ready), ("n2", Ready)],
            expected: "attachment n2: new attaching\nop: publish to n2\nclaim a: attaching",
        },
        Case {
            what: "lingering on a lost node: blocked like a claim, n2 waits for an unblock",
            access_mode: SingleNodeWriter,
            controller_publish: true,
            claims: &[claim("a", "n2", C::Pending)],
            attachments: &[AttachmentFact {
                lingering: true,
                ..att("n1", A::Blocked)
            }],
            nodes: &[("n1", Lost), ("n2", Ready)],
            expected: "",
        },
        Case {
            what: "a node not listed is taken as ready",
            access_mode: SingleNodeWriter,
            controller_publish: false,
            claims: &[claim("a", "n1", C::Pending)],
            attachments: &[],
            nodes: &[],
            expected: "attachment n1: new attached\nclaim a: publishing",
        },
    ];
    for c in cases {
        let facts = Facts {
            access_mode: c.access_mode,
            controller_publish: c.controller_publish,
            claims: c.claims.to_vec(),
            attachments: c.attachments.to_vec(),
            nodes: c.nodes.to_vec(),
            held: false,
            full: vec![],
        };
        assert_eq!(render(&next(&facts)), c.expected, "{}", c.what);
    }
}

#[test]
fn a_new_claim_starts_where_the_lifecycle_takes_it() {
    use AccessMode::{MultiNodeMultiWriter, SingleNodeWriter};
    use AttachmentState as A;
    use ClaimState as C;
    use NodeStatus::{Lost, Ready};
    // (access mode, plugin needs ControllerPublish, attachments, nodes, the new claim's
    // node, its first state)
    type Row<'a> = (
        AccessMode,
        bool,
        &'a [AttachmentFact<'a>],
        &'a [(&'a str, NodeStatus)],
        &'a str,
        ClaimState,
    );
    let ready = &[("n1", Ready), ("n2", Ready)][..];
    let lost = &[("n1", Lost)][..];
    #[rustfmt::skip] // One case a line: the table is the specification.
    let rows: [Row<'_>; 13] = [
        (SingleNodeWriter,     true,  &[],                         ready, "n1", C::Attaching),
        (SingleNodeWriter,     false, &[],                         ready, "n1", C::Publishing),
        (SingleNodeWriter,     true,  &[att("n1", A::Attached)],   ready, "n1", C::Publishing),
        (SingleNodeWriter,     true,  &[att("n1", A::Attaching)],  ready, "n1", C::Attaching),
        // Its claim keeps the attachment from being taken down.
        (SingleNodeWriter,     true,  &[att("n1", A::Unstaging)],  ready, "n1", C::Publishing),
        (SingleNodeWriter,     true,  &[att("n1", A::Detaching)],  ready, "n1", C::Pending),
        (SingleNodeWriter,     true,  &[att("n1", A::Blocked)],    ready, "n1", C::Blocked),
        (SingleNodeWriter,     true,  &[att("n2", A::Attached)],   ready, "n1", C::Pending),
        (SingleNodeWriter,     false, &[att("n2", A::Detaching)],  ready, "n1", C::Pending),
        (MultiNodeMultiWriter, true,  &[att("n2", A::Attached)],   ready, "n1", C::Attaching),
        (MultiNodeMultiWriter, false, &[att("n2", A::Blocked)],    ready, "n1", C::Publishing),
        // The rules refuse a claim on a lost node before this is asked; it would not move.
        (SingleNodeWriter,     true,  &[],                         lost,  "n1", C::Pending),
        (MultiNodeMultiWriter, false, &[att("n1", A::Blocked)],    lost,  "n1", C::Pending),
    ];
    let held = [claim("b", "n2", ClaimState::Ready)];
    for (access_mode, cp, attachments, nodes, node, want) in rows {
        // Another node's ready claim changes nothing for a multi-node volume; a single-node
        // volume holding one is refused by the rules before this is asked.
        let claims: &[ClaimFact<'_>] = if access_mode.is_single_node() {
            &[]
        } else {
            &held
        };
        let facts = Facts {
            access_mode,
            controller_publish: cp,
            claims: claims.to_vec(),
            attachments: attachments.to_vec(),
            nodes: nodes.to_vec(),
            held: false,
            full: vec![],
        };
        assert_eq!(
            first_state(&facts, node),
            want,
            "{access_mode} cp={cp} {attachments:?} {nodes:?} on {node}"
        );
    }
}

#[test]
fn a_claim_on_a_node_whose_slots_are_full_waits_pending_until_one_frees() {
    use AttachmentState as A;
    use ClaimState as C;
    for cp in [true, false] {
        let mut facts = Facts {
            access_mode: AccessMode::SingleNodeWriter,
            controller_publish: cp,
            claims: vec![claim("a", "n1", C::Pending)],
            attachments: vec![],
            nodes: vec![("n1", NodeStatus::Ready)],
            held: false,
            full: vec!["n1"],
        };
        // No attachment, no ControllerPublishVolume: the claim stays where it is.
        assert_eq!(next(&facts), Changes::default(), "cp={cp}");
        assert_eq!(first_state(&facts, "n1"), C::Pending, "cp={cp}");
        // A slot of another node's does not matter to a claim on n2.
        facts.claims = vec![claim("a", "n2", C::Pending)];
        facts.nodes.push(("n2", NodeStatus::Ready));
        let want = if cp { C::Attaching } else { C::Publishing };
        assert_eq!(next(&facts).claims, [("a", want)], "cp={cp}");
        // A volume attached to the node already holds its slot: its claim goes on.
        facts.claims = vec![claim("a", "n1", C::Pending)];
        facts.attachments = vec![att("n1", A::Attached)];
        assert_eq!(next(&facts).claims, [("a", C::Publishing)], "cp={cp}");
    }
}
