//! Recovery as repairs: the node agent's records, the checks of one snapshot of the mount
//! table ([`Checks`], which judge each record by what the plugin made at its paths, its
//! observation) and what the server wants → the actions that make the records true again.
//! Pure; the agent carries the actions out, at start (its recovery) and at every resync.
//!
//! The records say only what the agent may have done; the mount table says what is. At
//! start, and at every resync:
//! - a staging recorded staged that no longer shows what the plugin made there is staged
//!   again before anything is published from it;
//! - a publication recorded published whose target fails its check is published again
//!   while its claim is wanted (drift, reported once the server's wish is known);
//! - a record of an older agent that passes its first check gets what is there recorded,
//!   and one that lacks what is known now (a device's identity) is completed.
//!
//! At start only (the workers own steps in flight while the agent runs):
//! - a step that was in flight when the agent stopped is undone (the calls are
//!   idempotent), and after a reboot, which took every mount, every record is;
//! - a staging is unstaged only once no publication that stays is made from it.

use std::collections::HashSet;

use csivol_api::ClaimRef;

use super::observed::{self, Observation};
use super::records::{PublicationRecord, PublishState, StageState, StagingRecord};

/// The checks of one snapshot of the node, as the records need them (the agent's answer
/// them from the mount table and `stat`; tests, from a table).
pub trait Checks {
    /// Whether a staging holds its volume; for a record without an observation, what is
    /// there, to record (for one lacking what is known now, the record completed, see
    /// [`observed::to_record`]). `publications` are every publication of the volume.
    fn staging(
        &self,
        s: &StagingRecord,
        publications: &[PublicationRecord],
    ) -> Result<Option<Observation>, String>;

    /// Whether a publication's target is ready; what is there, to record. `staging` is
    /// the volume's staging record.
    fn publication(
        &self,
        p: &PublicationRecord,
        staging: Option<&StagingRecord>,
        publications: &[PublicationRecord],
    ) -> Result<Observation, String>;
}

/// When the repairs are decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// At start, before registering; `rebooted`: the machine restarted since the records
    /// were written, so every mount is gone.
    Start { rebooted: bool },
    /// A resync of a running agent.
    Resync,
}

/// Everything [`decide`] looks at.
#[derive(Debug)]
pub struct Input<'a> {
    pub when: When,
    pub stagings: &'a [StagingRecord],
    pub publications: &'a [PublicationRecord],
    /// The claims the server wants published; `None` before its desired state is known
    /// (at start). Drift is reported only for wanted claims: a claim being taken down
    /// needs no repair.
    pub wanted: Option<&'a HashSet<ClaimRef>>,
}

/// A publication to publish again, with why and whether to report it as drift.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Republish {
    /// The record marked uncertain (`publishing`).
    pub record: PublicationRecord,
    pub why: String,
    pub report: bool,
}

/// The actions, in the order they are carried out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Repairs {
    /// Records of an older agent that passed their first check, with what is there, and
    /// records completed with what is known now.
    pub observed_stagings: Vec<StagingRecord>,
    pub observed_publications: Vec<PublicationRecord>,
    /// Stagings recorded staged whose volume is gone from them, marked uncertain
    /// (`staging`): staged again before any publish, or unstaged when unused.
    pub restage: Vec<(StagingRecord, String)>,
    pub republish: Vec<Republish>,
    /// Publications in flight at start (or after a reboot): taken down at the plugin.
    pub take_down: Vec<PublicationRecord>,
    /// Stagings in flight at start (or after a reboot) that no remaining publication is
    /// made from: unstaged at the plugin.
    pub unstage: Vec<StagingRecord>,
}

impl Repairs {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

pub fn decide(checks: &dyn Checks, input: &Input<'_>) -> Repairs {
    let mut out = Repairs::default();
    let rebooted = input.when == When::Start { rebooted: true };
    let start = matches!(input.when, When::Start { .. });
    let of_volume = |v: &str| -> Vec<PublicationRecord> {
        input
            .publications
            .iter()
            .filter(|p| p.volume == v)
            .cloned()
            .collect()
    };
    for s in input.stagings {
        if rebooted || s.state != StageState::Staged {
            continue;
        }
        match checks.staging(s, &of_volume(&s.volume)) {
            Ok(None) => {}
            Ok(Some(seen)) => out.observed_stagings.push(StagingRecord {
                observed: Some(seen),
                ..s.clone()
            }),
            Err(why) => out.restage.push((
                StagingRecord {
                    state: StageState::Staging,
                    ..s.clone()
                },
                why,
            )),
        }
    }
    let mut kept: Vec<&PublicationRecord> = Vec::new();
    for p in input.publications {
        if rebooted || (start && p.state != PublishState::Published) {
            out.take_down.push(p.clone());
            continue;
        }
        kept.push(p);
        if p.state != PublishState::Published {
            continue;
        }
        let staging = input.stagings.iter().find(|s| s.volume == p.volume);
        let seen = checks.publication(p, staging, &of_volume(&p.volume));
        match seen {
            Ok(seen) => {
                if let Some(seen) = observed::to_record(p.observed.as_ref(), seen) {
                    out.observed_publications.push(PublicationRecord {
                        observed: Some(seen),
                        ..p.clone()
                    });
                }
            }
            Err(why) => {
                let claim = ClaimRef {
                    volume: p.volume.clone(),
                    alloc: p.alloc.clone(),
                };
                out.republish.push(Republish {
                    record: PublicationRecord {
                        state: PublishState::Publishing,
                        ..p.clone()
                    },
                    why,
                    report: input.wanted.is_some_and(|w| w.contains(&claim)),
                });
            }
        }
    }
    if start {
        for s in input.stagings {
            if !rebooted && s.state == StageState::Staged {
                continue;
            }
            if kept.iter().any(|p| p.staging.as_deref() == Some(&s.path)) {
                continue;
            }
            out.unstage.push(s.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests;
