//! Operator actions on a node as a whole: whether it takes new claims (eligibility, drain)
//! and whether it may be forgotten (remove), table-tested below. The server's lifecycle
//! loads the facts and records the outcome.

use std::fmt;

use csivol_api::{AttachmentState, ClaimState, Eligibility};

/// Why an action on a node is refused: a conflict that clears (the node takes claims
/// again, or gives up what it holds), with the next step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub message: String,
    pub hint: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Why a new claim on `node` is refused, if it is.
pub fn claim_refusal(node: &str, eligibility: Eligibility) -> Option<Refusal> {
    let why = match eligibility {
        Eligibility::Eligible => return None,
        Eligibility::Ineligible => "is not eligible for new claims",
        Eligibility::Draining => "is being drained",
    };
    Some(Refusal {
        message: format!("node `{node}` {why}: it takes no new claims"),
        hint: format!(
            "claim on another node, or make it eligible again: csivol node eligibility {node} --enable"
        ),
    })
}

/// Why a new claim on `volume` is refused, if an operator took it out of service (`by`,
/// `reason`). Its queued claims wait; so would a claim asked with `--queue`, were it
/// taken: it is refused like any other, so that nobody waits on a volume without
/// knowing why.
pub fn volume_claim_refusal(
    volume: &str,
    eligibility: Eligibility,
    by: &str,
    reason: Option<&str>,
) -> Option<Refusal> {
    let why = match eligibility {
        Eligibility::Eligible => return None,
        Eligibility::Ineligible => "is not eligible for new claims",
        Eligibility::Draining => "is being drained",
    };
    let reason = reason.map_or(String::new(), |r| format!(": {r}"));
    Some(Refusal {
        message: format!("volume `{volume}` {why} ({by}{reason}): it takes no new claims"),
        hint: format!(
            "claim another volume, or make it eligible again: csivol volume eligibility {volume} --enable"
        ),
    })
}

/// What a node still holds, as far as removing it is concerned.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Holdings {
    /// `(volume, alloc, state)` of every claim on the node.
    pub claims: Vec<(String, String, ClaimState)>,
    /// `(volume, state)` of every attachment to the node.
    pub attachments: Vec<(String, AttachmentState)>,
    /// Controller operations assigned to the node's agent.
    pub ops: usize,
}

/// Whether `node` may be forgotten: only when nothing is claimed on it, attached to it or
/// running on it. Blocked holdings need an unblock; the rest needs their owners to release
/// (a drain), never a forced release.
pub fn removal(node: &str, h: &Holdings) -> Result<(), Refusal> {
    let blocked = h.claims.iter().any(|c| c.2 == ClaimState::Blocked)
        || h.attachments
            .iter()
            .any(|a| a.1 == AttachmentState::Blocked);
    if blocked {
        let volumes: std::collections::BTreeSet<&str> = h
            .claims
            .iter()
            .filter(|c| c.2 == ClaimState::Blocked)
            .map(|c| c.0.as_str())
            .chain(
                h.attachments
                    .iter()
                    .filter(|a| a.1 == AttachmentState::Blocked)
                    .map(|a| a.0.as_str()),
            )
            .collect();
        let volumes: Vec<&str> = volumes.into_iter().collect();
        return Err(Refusal {
            message: format!(
                "refusing to remove node `{node}`: it blocks {} ({})",
                count(volumes.len(), "volume"),
                volumes.join(", ")
            ),
            hint: format!(
                "if node {node} is really gone or fenced, run: csivol unblock --node {node} --reason \"...\""
            ),
        });
    }
    if !h.claims.is_empty() || !h.attachments.is_empty() {
        let mut what = Vec::new();
        if !h.claims.is_empty() {
            what.push(count(h.claims.len(), "claim"));
        }
        if !h.attachments.is_empty() {
            what.push(count(h.attachments.len(), "attachment"));
        }
        return Err(Refusal {
            message: format!(
                "refusing to remove node `{node}`: it still has {}",
                what.join(" and ")
            ),
            hint: format!(
                "drain it and wait for the owners to release their claims: csivol node drain {node} --wait"
            ),
        });
    }
    if h.ops > 0 {
        return Err(Refusal {
            message: format!(
                "refusing to remove node `{node}`: its agent runs {}",
                count(h.ops, "controller operation")
            ),
            hint: "wait for them to finish (csivol events --node) and try again".into(),
        });
    }
    Ok(())
}

fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_eligible_node_takes_new_claims() {
        assert!(claim_refusal("n1", Eligibility::Eligible).is_none());
        for (e, says) in [
            (
                Eligibility::Ineligible,
                "node `n1` is not eligible for new claims",
            ),
            (Eligibility::Draining, "node `n1` is being drained"),
        ] {
            let err = claim_refusal("n1", e).expect("refused");
            assert!(err.to_string().contains(says), "{err}");
        }
    }

    #[test]
    fn a_node_is_removed_only_when_it_holds_nothing() {
        let claim = |s| ("v1".to_owned(), "a1".to_owned(), s);
        let att = |s| ("v1".to_owned(), s);
        // (holdings, refused with, hint names)
        let cases: Vec<(Holdings, Option<&str>, &str)> = vec![
            (Holdings::default(), None, ""),
            (
                Holdings {
                    claims: vec![claim(ClaimState::Ready)],
                    attachments: vec![att(AttachmentState::Attached)],
                    ops: 0,
                },
                Some("it still has 1 claim and 1 attachment"),
                "csivol node drain n1 --wait",
            ),
            (
                Holdings {
                    claims: vec![claim(ClaimState::Queued)],
                    ..Holdings::default()
                },
                Some("it still has 1 claim"),
                "csivol node drain n1 --wait",
            ),
            (
                Holdings {
                    claims: vec![claim(ClaimState::Blocked)],
                    attachments: vec![
                        att(AttachmentState::Blocked),
                        ("v2".into(), AttachmentState::Blocked),
                    ],
                    ops: 0,
                },
                Some("it blocks 2 volumes (v1, v2)"),
                "csivol unblock --node n1",
            ),
            (
                Holdings {
                    ops: 2,
                    ..Holdings::default()
                },
                Some("its agent runs 2 controller operations"),
                "wait for them",
            ),
        ];
        for (h, refused, hint) in cases {
            match (removal("n1", &h), refused) {
                (Ok(()), None) => {}
                (Err(e), Some(says)) => {
                    assert!(e.to_string().contains(says), "{e} / {h:?}");
                    assert!(format!("{e:?}").contains(hint), "{e:?} / {h:?}");
                }
                (got, want) => panic!("{h:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn a_volume_out_of_service_refuses_new_claims_saying_who_and_why() {
        assert_eq!(
            volume_claim_refusal("db", Eligibility::Eligible, "operator:ops", None),
            None
        );
        let r = volume_claim_refusal(
            "db",
            Eligibility::Ineligible,
            "operator:ops",
            Some("restoring"),
        )
        .unwrap();
        assert_eq!(
            r.message,
            "volume `db` is not eligible for new claims (operator:ops: restoring): it takes no new claims"
        );
        assert!(
            r.hint.contains("csivol volume eligibility db --enable"),
            "{}",
            r.hint
        );
        let r = volume_claim_refusal("db", Eligibility::Draining, "operator:ops", None).unwrap();
        assert_eq!(
            r.message,
            "volume `db` is being drained (operator:ops): it takes no new claims"
        );
    }
}
