use std::path::PathBuf;

use super::*;

fn staging(state: StageState, observed: Option<Observation>) -> StagingRecord {
    StagingRecord {
        volume: "v".into(),
        plugin: "hp".into(),
        external_id: "ext-v".into(),
        path: PathBuf::from("/d/staging/hp/v"),
        state,
        block: false,
        observed,
    }
}

fn publication(state: PublishState, observed: Option<Observation>) -> PublicationRecord {
    PublicationRecord {
        volume: "v".into(),
        alloc: "a1".into(),
        plugin: "hp".into(),
        external_id: "ext-v".into(),
        target: PathBuf::from("/d/targets/v/a1"),
        staging: Some(PathBuf::from("/d/staging/hp/v")),
        block: false,
        state,
        observed,
    }
}

/// A snapshot's checks as a table: what is gone from the node. A target fails with its
/// staging, as the agent's checks judge it; what holds is observed as a mount.
#[derive(Clone, Copy, Default)]
struct Gone {
    staging: bool,
    target: bool,
}

fn a_mount() -> Observation {
    Observation {
        mount: Some(observed::SeenMount {
            device: "8:1".into(),
            root: "/srv/v".into(),
            source: "/dev/sda1".into(),
        }),
        ..Observation::default()
    }
}

impl Checks for Gone {
    fn staging(
        &self,
        s: &StagingRecord,
        _: &[PublicationRecord],
    ) -> Result<Option<Observation>, String> {
        if self.staging {
            return Err(format!(
                "staging of {} is no longer mounted ({})",
                s.volume,
                s.path.display()
            ));
        }
        Ok(s.observed.is_none().then(a_mount))
    }

    fn publication(
        &self,
        p: &PublicationRecord,
        staging: Option<&StagingRecord>,
        publications: &[PublicationRecord],
    ) -> Result<Observation, String> {
        if let Some(s) = staging {
            self.staging(s, publications)?;
        }
        if self.target {
            return Err(format!(
                "target of {} is no longer mounted ({})",
                p.volume,
                p.target.display()
            ));
        }
        Ok(a_mount())
    }
}

/// The repairs as a list of words, so that a case reads as its outcome.
fn words(p: &Repairs) -> Vec<String> {
    let mut out = Vec::new();
    out.extend(
        p.observed_stagings
            .iter()
            .map(|s| format!("observe staging {}", s.volume)),
    );
    out.extend(
        p.observed_publications
            .iter()
            .map(|r| format!("observe {}", r.alloc)),
    );
    out.extend(
        p.restage
            .iter()
            .map(|(s, _)| format!("restage {}", s.volume)),
    );
    out.extend(p.republish.iter().map(|r| {
        format!(
            "republish {}{}",
            r.record.alloc,
            if r.report { " (drift)" } else { "" }
        )
    }));
    out.extend(p.take_down.iter().map(|r| format!("take down {}", r.alloc)));
    out.extend(p.unstage.iter().map(|s| format!("unstage {}", s.volume)));
    out
}

struct Case {
    what: &'static str,
    when: When,
    stagings: Vec<StagingRecord>,
    publications: Vec<PublicationRecord>,
    /// Whether the claim `v/a1` is wanted (`None`: not known yet).
    wanted: Option<bool>,
    gone: Gone,
    repairs: &'static [&'static str],
}

fn run(case: &Case) -> Repairs {
    let wanted: Option<HashSet<ClaimRef>> = case.wanted.map(|w| {
        w.then(|| ClaimRef {
            volume: "v".into(),
            alloc: "a1".into(),
        })
        .into_iter()
        .collect()
    });
    decide(
        &case.gone,
        &Input {
            when: case.when,
            stagings: &case.stagings,
            publications: &case.publications,
            wanted: wanted.as_ref(),
        },
    )
}

const NOTHING_GONE: Gone = Gone {
    staging: false,
    target: false,
};

#[test]
fn the_records_against_the_mount_table() {
    use PublishState::{Published, Publishing, Unpublishing};
    use StageState::{Staged, Staging, Unstaging};
    let start = When::Start { rebooted: false };
    let made = || Some(a_mount());
    let cases = [
        Case {
            what: "everything as the plugin made it: nothing to do",
            when: start,
            stagings: vec![staging(Staged, made())],
            publications: vec![publication(Published, made())],
            wanted: None,
            gone: NOTHING_GONE,
            repairs: &[],
        },
        Case {
            what: "the staging gone while the agent was away: both again",
            when: start,
            stagings: vec![staging(Staged, made())],
            publications: vec![publication(Published, made())],
            wanted: None,
            gone: Gone {
                staging: true,
                target: false,
            },
            repairs: &["restage v", "republish a1"],
        },
        Case {
            what: "the target gone: published again, the staging kept",
            when: start,
            stagings: vec![staging(Staged, made())],
            publications: vec![publication(Published, made())],
            wanted: None,
            gone: Gone {
                staging: false,
                target: true,
            },
            repairs: &["republish a1"],
        },
        Case {
            what: "steps in flight at start are undone",
            when: start,
            stagings: vec![staging(Staging, None)],
            publications: vec![publication(Publishing, None)],
            wanted: None,
            gone: NOTHING_GONE,
            repairs: &["take down a1", "unstage v"],
        },
        Case {
            what: "an unpublish and an unstage in flight are finished",
            when: start,
            stagings: vec![staging(Unstaging, made())],
            publications: vec![publication(Unpublishing, made())],
            wanted: None,
            gone: NOTHING_GONE,
            repairs: &["take down a1", "unstage v"],
        },
        Case {
            what: "a staging kept while a publication that stays is made from it",
            when: start,
            stagings: vec![staging(Staging, None)],
            publications: vec![publication(Published, made())],
            wanted: None,
            gone: NOTHING_GONE,
            repairs: &[],
        },
        Case {
            what: "after a reboot every record is undone",
            when: When::Start { rebooted: true },
            stagings: vec![staging(Staged, made())],
            publications: vec![publication(Published, made())],
            wanted: None,
            gone: Gone {
                staging: true,
                target: true,
            },
            repairs: &["take down a1", "unstage v"],
        },
        Case {
            what: "a resync leaves steps in flight to the workers",
            when: When::Resync,
            stagings: vec![staging(Staging, None)],
            publications: vec![publication(Publishing, None)],
            wanted: Some(true),
            gone: Gone {
                staging: true,
                target: true,
            },
            repairs: &[],
        },
        Case {
            what: "drift of a wanted claim is reported",
            when: When::Resync,
            stagings: vec![staging(Staged, made())],
            publications: vec![publication(Published, made())],
            wanted: Some(true),
            gone: Gone {
                staging: false,
                target: true,
            },
            repairs: &["republish a1 (drift)"],
        },
        Case {
            what: "drift of a claim being taken down is not",
            when: When::Resync,
            stagings: vec![staging(Staged, made())],
            publications: vec![publication(Published, made())],
            wanted: Some(false),
            gone: Gone {
                staging: false,
                target: true,
            },
            repairs: &["republish a1"],
        },
        Case {
            what: "an older agent's records that hold: what is there is recorded",
            when: start,
            stagings: vec![staging(Staged, None)],
            publications: vec![publication(Published, None)],
            wanted: None,
            gone: NOTHING_GONE,
            repairs: &["observe staging v", "observe a1"],
        },
        Case {
            what: "an older agent's records that do not hold: staged and published again",
            when: start,
            stagings: vec![staging(Staged, None)],
            publications: vec![publication(Published, None)],
            wanted: None,
            gone: Gone {
                staging: true,
                target: false,
            },
            repairs: &["restage v", "republish a1"],
        },
    ];
    for case in &cases {
        let got = run(case);
        assert_eq!(words(&got), case.repairs, "{}", case.what);
    }
}

#[test]
fn a_demoted_record_says_why_and_is_marked_uncertain() {
    let p = run(&Case {
        what: "",
        when: When::Resync,
        stagings: vec![staging(StageState::Staged, Some(a_mount()))],
        publications: vec![publication(PublishState::Published, Some(a_mount()))],
        wanted: Some(true),
        gone: Gone {
            staging: true,
            target: false,
        },
        repairs: &[],
    });
    let (s, why) = &p.restage[0];
    assert_eq!(s.state, StageState::Staging);
    assert_eq!(why, "staging of v is no longer mounted (/d/staging/hp/v)");
    assert_eq!(p.republish[0].record.state, PublishState::Publishing);
    assert_eq!(
        p.republish[0].why, *why,
        "the target fails with its staging"
    );
    // What is recorded of an older agent's staging is what the checks found.
    let p = run(&Case {
        what: "",
        when: When::Start { rebooted: false },
        stagings: vec![staging(StageState::Staged, None)],
        publications: vec![],
        wanted: None,
        gone: NOTHING_GONE,
        repairs: &[],
    });
    assert_eq!(p.observed_stagings[0].observed, Some(a_mount()));
    assert_eq!(p.observed_stagings[0].state, StageState::Staged);
}

/// The checks of a node whose block target shows loop device 7:3, sequence number 11.
struct LiveDevice;

fn loop3(identity: bool) -> Observation {
    Observation {
        device: Some((7 << 8) | 3),
        identity: identity.then(|| observed::DeviceIdentity {
            diskseq: Some(11),
            ..Default::default()
        }),
        ..Observation::default()
    }
}

impl Checks for LiveDevice {
    fn staging(
        &self,
        _: &StagingRecord,
        _: &[PublicationRecord],
    ) -> Result<Option<Observation>, String> {
        Ok(None)
    }

    fn publication(
        &self,
        _: &PublicationRecord,
        _: Option<&StagingRecord>,
        _: &[PublicationRecord],
    ) -> Result<Observation, String> {
        Ok(loop3(true))
    }
}

#[test]
fn a_device_recorded_without_its_identity_gains_it_and_keeps_it() {
    for when in [When::Start { rebooted: false }, When::Resync] {
        let old = publication(PublishState::Published, Some(loop3(false)));
        let p = decide(
            &LiveDevice,
            &Input {
                when,
                stagings: &[],
                publications: std::slice::from_ref(&old),
                wanted: None,
            },
        );
        assert_eq!(words(&p), ["observe a1"], "{when:?}");
        let completed = &p.observed_publications[0];
        assert_eq!(completed.observed, Some(loop3(true)));
        assert_eq!(completed.state, PublishState::Published);
        // Recorded with it, the next check records nothing.
        let p = decide(
            &LiveDevice,
            &Input {
                when,
                stagings: &[],
                publications: std::slice::from_ref(completed),
                wanted: None,
            },
        );
        assert!(p.is_empty(), "{when:?}: {p:?}");
    }
}
