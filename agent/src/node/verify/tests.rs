use std::path::{Path, PathBuf};

use csivol_csi::mountinfo::MountTable;

use super::*;
use crate::node::mounts::NodeKind;
use crate::node::mounts::fake::FakeFiles;

const ROOT: &str = "1 0 8:1 / / rw - ext4 /dev/sda1 rw";
const STAGED: &str = "40 1 8:1 /srv/v /d/staging/hp/v rw - ext4 /dev/sda1 rw";
const PUBLISHED: &str = "41 1 8:1 /srv/v /d/targets/v/a1 rw - ext4 /dev/sda1 rw";
/// The plugin's own directory bound at the target, nothing at the staging.
const OWN_DIR: &str = "41 1 8:1 /srv/data/v /d/targets/v/a1 rw - ext4 /dev/sda1 rw";

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

fn table(lines: &[&str]) -> MountTable {
    let mut text = format!("{ROOT}\n");
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    MountTable::parse(&text)
}

fn files() -> FakeFiles {
    let mut f = FakeFiles::default();
    for p in ["/d/staging/hp/v", "/d/targets/v/a1"] {
        f.kinds.insert(p.into(), NodeKind::Other("a directory"));
    }
    f
}

/// What the plugin made, as the agent observed it when the mounts were `lines`.
fn seen(lines: &[&str], path: &str) -> Option<Observation> {
    let f = files();
    let c = Checker::with_files(table(lines), Path::new("/d"), &f);
    Some(c.observe(Path::new(path), true))
}

/// The plan as a list of words, so that a case reads as its outcome.
fn words(p: &Plan) -> Vec<String> {
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
    mounts: &'static [&'static str],
    readable: bool,
    plan: &'static [&'static str],
}

fn run(case: &Case) -> Plan {
    let f = files();
    let c = Checker::with_files(table(case.mounts), Path::new("/d"), &f);
    let judge = Judge {
        checker: case.readable.then_some(&c),
        default_check: ReadyCheck::Mount,
        plugin_checks: &BTreeMap::new(),
    };
    let wanted: Option<HashSet<ClaimRef>> = case.wanted.map(|w| {
        w.then(|| ClaimRef {
            volume: "v".into(),
            alloc: "a1".into(),
        })
        .into_iter()
        .collect()
    });
    plan(
        &judge,
        &Input {
            when: case.when,
            stagings: &case.stagings,
            publications: &case.publications,
            wanted: wanted.as_ref(),
        },
    )
}

#[test]
fn the_records_against_the_mount_table() {
    use PublishState::{Published, Publishing, Unpublishing};
    use StageState::{Staged, Staging, Unstaging};
    let start = When::Start { rebooted: false };
    let staged = || seen(&[STAGED], "/d/staging/hp/v");
    let published = || seen(&[STAGED, PUBLISHED], "/d/targets/v/a1");
    let nothing = || Some(Observation::default());
    let own_dir = || seen(&[OWN_DIR], "/d/targets/v/a1");
    let cases = [
        Case {
            what: "everything as the plugin made it: nothing to do",
            when: start,
            stagings: vec![staging(Staged, staged())],
            publications: vec![publication(Published, published())],
            wanted: None,
            mounts: &[STAGED, PUBLISHED],
            readable: true,
            plan: &[],
        },
        Case {
            what: "the staging unmounted while the agent was away: both again",
            when: start,
            stagings: vec![staging(Staged, staged())],
            publications: vec![publication(Published, published())],
            wanted: None,
            mounts: &[PUBLISHED],
            readable: true,
            plan: &["restage v", "republish a1"],
        },
        Case {
            what: "the target unmounted: published again, the staging kept",
            when: start,
            stagings: vec![staging(Staged, staged())],
            publications: vec![publication(Published, published())],
            wanted: None,
            mounts: &[STAGED],
            readable: true,
            plan: &["republish a1"],
        },
        Case {
            what: "a plugin that staged nothing is never asked for a mount there",
            when: start,
            stagings: vec![staging(Staged, nothing())],
            publications: vec![publication(Published, own_dir())],
            wanted: None,
            mounts: &[OWN_DIR],
            readable: true,
            plan: &[],
        },
        Case {
            what: "... and its target gone is drift of the target alone",
            when: When::Resync,
            stagings: vec![staging(Staged, nothing())],
            publications: vec![publication(Published, own_dir())],
            wanted: Some(true),
            mounts: &[],
            readable: true,
            plan: &["republish a1 (drift)"],
        },
        Case {
            what: "steps in flight at start are undone",
            when: start,
            stagings: vec![staging(Staging, None)],
            publications: vec![publication(Publishing, None)],
            wanted: None,
            mounts: &[STAGED],
            readable: true,
            plan: &["take down a1", "unstage v"],
        },
        Case {
            what: "an unpublish and an unstage in flight are finished",
            when: start,
            stagings: vec![staging(Unstaging, staged())],
            publications: vec![publication(Unpublishing, published())],
            wanted: None,
            mounts: &[STAGED, PUBLISHED],
            readable: true,
            plan: &["take down a1", "unstage v"],
        },
        Case {
            what: "after a reboot every record is undone",
            when: When::Start { rebooted: true },
            stagings: vec![staging(Staged, staged())],
            publications: vec![publication(Published, published())],
            wanted: None,
            mounts: &[],
            readable: true,
            plan: &["take down a1", "unstage v"],
        },
        Case {
            what: "a resync leaves steps in flight to the workers",
            when: When::Resync,
            stagings: vec![staging(Staging, None)],
            publications: vec![publication(Publishing, None)],
            wanted: Some(true),
            mounts: &[],
            readable: true,
            plan: &[],
        },
        Case {
            what: "drift of a wanted claim is reported",
            when: When::Resync,
            stagings: vec![staging(Staged, staged())],
            publications: vec![publication(Published, published())],
            wanted: Some(true),
            mounts: &[STAGED],
            readable: true,
            plan: &["republish a1 (drift)"],
        },
        Case {
            what: "drift of a claim being taken down is not",
            when: When::Resync,
            stagings: vec![staging(Staged, staged())],
            publications: vec![publication(Published, published())],
            wanted: Some(false),
            mounts: &[STAGED],
            readable: true,
            plan: &["republish a1"],
        },
        Case {
            what: "an older agent's records: judged by its rule, then observed",
            when: start,
            stagings: vec![staging(Staged, None)],
            publications: vec![publication(Published, None)],
            wanted: None,
            mounts: &[STAGED, PUBLISHED],
            readable: true,
            plan: &["observe staging v", "observe a1"],
        },
        Case {
            what: "an older agent's staging that is no mount point is staged again",
            when: start,
            stagings: vec![staging(Staged, None)],
            publications: vec![publication(Published, None)],
            wanted: None,
            mounts: &[OWN_DIR],
            readable: true,
            plan: &["restage v", "republish a1"],
        },
        Case {
            what: "an unreadable mount table verifies nothing",
            when: start,
            stagings: vec![staging(Staged, staged())],
            publications: vec![publication(Published, published())],
            wanted: None,
            mounts: &[STAGED, PUBLISHED],
            readable: false,
            plan: &["restage v", "republish a1"],
        },
    ];
    for case in &cases {
        let got = run(case);
        assert_eq!(words(&got), case.plan, "{}", case.what);
    }
}

#[test]
fn a_demoted_record_says_why_and_is_marked_uncertain() {
    let case = Case {
        what: "",
        when: When::Resync,
        stagings: vec![staging(
            StageState::Staged,
            seen(&[STAGED], "/d/staging/hp/v"),
        )],
        publications: vec![publication(
            PublishState::Published,
            seen(&[STAGED, PUBLISHED], "/d/targets/v/a1"),
        )],
        wanted: Some(true),
        mounts: &[PUBLISHED],
        readable: true,
        plan: &[],
    };
    let p = run(&case);
    let (s, why) = &p.restage[0];
    assert_eq!(s.state, StageState::Staging);
    assert_eq!(why, "staging of v is no longer mounted (/d/staging/hp/v)");
    assert_eq!(p.republish[0].record.state, PublishState::Publishing);
    assert_eq!(
        p.republish[0].why, *why,
        "the target fails with its staging"
    );
    let unreadable = run(&Case {
        readable: false,
        ..case
    });
    assert_eq!(unreadable.republish[0].why, UNREADABLE);
}
