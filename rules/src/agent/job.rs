//! One volume's job: from what the server wants and what the agent recorded, the steps to
//! take, in order. No I/O here; the agent's engine carries the job out.
//!
//! The rule is level-triggered, like kubelet's desired and actual state of the world: a
//! publication is kept only while a `publish` entry covers it, a staging only while some
//! wanted claim of the volume needs it, and everything else recorded is taken down.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use csivol_api::{ClaimRef, DesiredKeepStaged, DesiredPublish, DesiredUnpublish, validate_name};

use super::records::{PublicationRecord, PublishState, StageState, StagingRecord};
use super::verify::Repairs;

/// Reports already handed to the server for entries it still lists, so that a rescan does
/// not send them again. Entries leave when the server stops listing them. Kept in volume
/// order, so that what concerns one volume is found without walking the node's others.
#[derive(Debug, Default)]
pub struct Memo {
    pub published: BTreeSet<ClaimRef>,
    pub unpublished: BTreeSet<ClaimRef>,
    pub unstaged: BTreeSet<String>,
}

/// What the server wants for one volume on this node.
#[derive(Debug, Default)]
pub struct VolumeDesired<'a> {
    pub publish: Vec<&'a DesiredPublish>,
    pub unpublish: Vec<&'a DesiredUnpublish>,
    pub unstage: bool,
    /// The server asks the node to keep the volume's staging with no claim (its pool
    /// lingers after a release).
    pub keep_staged: Option<&'a DesiredKeepStaged>,
}

/// Everything [`decide`] looks at.
#[derive(Debug)]
pub struct Input<'a> {
    pub data_dir: &'a Path,
    pub volume: &'a str,
    pub desired: &'a VolumeDesired<'a>,
    pub staging: Option<&'a StagingRecord>,
    pub publications: &'a [PublicationRecord],
    pub memo: &'a Memo,
    /// Claims that failed for good: no longer brought up, only taken down.
    pub failed: &'a BTreeSet<ClaimRef>,
    /// Claims past their readiness deadline.
    pub timed_out: &'a HashSet<ClaimRef>,
    /// Plugins that advertise STAGE_UNSTAGE_VOLUME.
    pub staging_plugins: &'a HashSet<String>,
}

/// A publication to take down, and whether to report it (not when the same claim is
/// published again right after, under a new volume id).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Teardown {
    pub record: PublicationRecord,
    pub report: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageStep {
    pub desired: DesiredPublish,
    pub path: PathBuf,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublishStep {
    pub desired: DesiredPublish,
    pub target: PathBuf,
    pub staging: Option<PathBuf>,
}

/// The steps for one volume, run in this order; a failed step ends the run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Job {
    pub volume: String,
    /// Claims the server sent with a name that cannot become a path: failed at once.
    pub invalid: Vec<(String, String)>,
    /// Claims past their readiness deadline: reported failed (`TIMEOUT`) first.
    pub timed_out: Vec<String>,
    /// What a resync found of this volume's records against the mount table (see
    /// `verify`): observations to record, a staging to stage again and publications to
    /// publish again (marked uncertain and reported as drift first; the steps below bring
    /// them up again).
    pub verified: Repairs,
    /// Set when the agent takes publications down that the server still wants (it stops
    /// and leaves its node clean): each is reported as drift with this reason, so that the
    /// server does not go on calling the claim ready.
    pub taken_down_because: Option<String>,
    pub unpublish: Vec<Teardown>,
    /// Claims the server asked to take down that were not published here.
    pub report_unpublished: Vec<String>,
    pub unstage: Option<StagingRecord>,
    pub report_unstaged: bool,
    pub stage: Option<StageStep>,
    pub publish: Vec<PublishStep>,
    /// Claims published and ready that the server has not been told about.
    pub report_published: Vec<(String, PathBuf)>,
    /// The releases and the unstage the server listed when this job was decided: only a
    /// report answering a listed request is remembered as an answer (a report made for
    /// an older desired state may have reached the server before it asked).
    pub listed_unpublish: Vec<String>,
    pub listed_unstage: bool,
}

impl Job {
    pub fn is_empty(&self) -> bool {
        self.invalid.is_empty()
            && self.timed_out.is_empty()
            && self.verified.is_empty()
            && self.unpublish.is_empty()
            && self.report_unpublished.is_empty()
            && self.unstage.is_none()
            && !self.report_unstaged
            && self.stage.is_none()
            && self.publish.is_empty()
            && self.report_published.is_empty()
    }
}

/// `DIR/staging/<plugin>/<volume>`: one staging per volume and plugin.
pub fn staging_path(data_dir: &Path, plugin: &str, volume: &str) -> PathBuf {
    data_dir.join("staging").join(plugin).join(volume)
}

/// `DIR/targets/<volume>/<alloc>`: one target per claim.
pub fn target_path(data_dir: &Path, volume: &str, alloc: &str) -> PathBuf {
    data_dir.join("targets").join(volume).join(alloc)
}

fn claim(volume: &str, alloc: &str) -> ClaimRef {
    ClaimRef {
        volume: volume.to_owned(),
        alloc: alloc.to_owned(),
    }
}

fn covers(d: &DesiredPublish, plugin: &str, external_id: &str) -> bool {
    d.volume.plugin == plugin && d.volume.external_id == external_id
}

pub fn decide(input: &Input<'_>) -> Job {
    let vol = input.volume;
    let mut job = Job {
        volume: vol.to_owned(),
        listed_unpublish: input
            .desired
            .unpublish
            .iter()
            .map(|u| u.alloc.clone())
            .collect(),
        listed_unstage: input.desired.unstage,
        ..Job::default()
    };
    let released: HashSet<&str> = input
        .desired
        .unpublish
        .iter()
        .map(|u| u.alloc.as_str())
        .collect();
    let published = |alloc: &str, d: &DesiredPublish| {
        input.publications.iter().any(|r| {
            r.alloc == alloc
                && r.state == PublishState::Published
                && covers(d, &r.plugin, &r.external_id)
        })
    };

    // The claims to bring up (or keep up). A release in the same desired state wins over
    // a publish: taking down is always safe.
    let mut publish: Vec<&DesiredPublish> = input.desired.publish.clone();
    publish.sort_by(|a, b| a.alloc.cmp(&b.alloc));
    publish.dedup_by(|a, b| a.alloc == b.alloc);
    let mut wanted: Vec<&DesiredPublish> = Vec::new();
    for d in publish {
        let c = claim(vol, &d.alloc);
        if released.contains(d.alloc.as_str()) || input.failed.contains(&c) {
            continue;
        }
        let names = csivol_api::validate_key("volume", vol)
            .and_then(|()| validate_name("alloc", &d.alloc))
            .and_then(|()| validate_name("plugin", &d.volume.plugin));
        if let Err(message) = names {
            job.invalid.push((d.alloc.clone(), message));
            continue;
        }
        if input.timed_out.contains(&c) && !published(&d.alloc, d) {
            job.timed_out.push(d.alloc.clone());
            continue;
        }
        wanted.push(d);
    }

    // Take down every publication no wanted claim covers.
    for r in input.publications {
        let kept = wanted
            .iter()
            .any(|d| d.alloc == r.alloc && covers(d, &r.plugin, &r.external_id));
        if !kept {
            job.unpublish.push(Teardown {
                record: r.clone(),
                report: !wanted.iter().any(|d| d.alloc == r.alloc),
            });
        }
    }
    for u in &input.desired.unpublish {
        let recorded = input.publications.iter().any(|r| r.alloc == u.alloc);
        if !recorded && !input.memo.unpublished.contains(&claim(vol, &u.alloc)) {
            job.report_unpublished.push(u.alloc.clone());
        }
    }

    // Keep the staging only while a wanted claim needs it, or, with no claim wanted, while
    // the server asks to keep it staged (a staged one only: a staging left half done is
    // not worth keeping); unstage it only once no publication made from it is left. The
    // CSI spec owes NodeUnstageVolume only after every NodeUnpublishVolume of the volume
    // on the node, never at once after the last one.
    let kept_staging = input.staging.filter(|s| {
        wanted.iter().any(|d| covers(d, &s.plugin, &s.external_id))
            || (wanted.is_empty()
                && s.state == StageState::Staged
                && input
                    .desired
                    .keep_staged
                    .is_some_and(|k| k.plugin == s.plugin && k.external_id == s.external_id))
    });
    let surviving: Vec<&PublicationRecord> = input
        .publications
        .iter()
        .filter(|r| !job.unpublish.iter().any(|t| t.record == **r))
        .collect();
    if let Some(s) = input.staging
        && kept_staging.is_none()
        && !surviving
            .iter()
            .any(|r| r.staging.as_deref() == Some(&s.path))
    {
        job.unstage = Some(s.clone());
    }

    if wanted.is_empty() {
        let nothing_left =
            surviving.is_empty() && (input.staging.is_none() || job.unstage.is_some());
        let took_down = !job.unpublish.is_empty() || job.unstage.is_some();
        let asked = input.desired.unstage && !input.memo.unstaged.contains(vol);
        job.report_unstaged = nothing_left && (took_down || asked);
        return job;
    }

    // Bring up: stage once per volume, then publish each claim to its own target.
    let plugin = &wanted[0].volume.plugin;
    let staging = if input.staging_plugins.contains(plugin) {
        let path = kept_staging.map_or_else(
            || staging_path(input.data_dir, plugin, vol),
            |s| s.path.clone(),
        );
        if kept_staging.is_none_or(|s| s.state != StageState::Staged) {
            job.stage = Some(StageStep {
                desired: wanted[0].clone(),
                path: path.clone(),
            });
        }
        Some(path)
    } else {
        None
    };
    for d in wanted {
        let target = target_path(input.data_dir, vol, &d.alloc);
        if published(&d.alloc, d) {
            if !input.memo.published.contains(&claim(vol, &d.alloc)) {
                let target = input
                    .publications
                    .iter()
                    .find(|r| r.alloc == d.alloc)
                    .map_or(target, |r| r.target.clone());
                job.report_published.push((d.alloc.clone(), target));
            }
        } else {
            job.publish.push(PublishStep {
                desired: d.clone(),
                target,
                staging: staging.clone(),
            });
        }
    }
    job
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use csivol_api::NodeVolume;
    use csivol_api::domain::{AccessMode, AccessType, VolumeCapability};

    use super::*;

    const DIR: &str = "/d";

    fn want(volume: &str, alloc: &str, plugin: &str) -> DesiredPublish {
        DesiredPublish {
            alloc: alloc.into(),
            read_only: false,
            mount: Default::default(),
            volume: NodeVolume {
                volume: volume.into(),
                plugin: plugin.into(),
                external_id: format!("ext-{volume}"),
                capability: VolumeCapability {
                    access_type: AccessType::FileSystem {
                        fs_type: String::new(),
                        mount_flags: vec![],
                    },
                    access_mode: AccessMode::SingleNodeMultiWriter,
                },
                context: BTreeMap::new(),
                secrets: BTreeMap::new(),
                publish_context: BTreeMap::new(),
            },
        }
    }

    fn release(volume: &str, alloc: &str) -> DesiredUnpublish {
        DesiredUnpublish {
            volume: volume.into(),
            alloc: alloc.into(),
            plugin: "hp".into(),
            external_id: format!("ext-{volume}"),
        }
    }

    fn staged(volume: &str, state: StageState) -> StagingRecord {
        StagingRecord {
            volume: volume.into(),
            plugin: "hp".into(),
            external_id: format!("ext-{volume}"),
            path: staging_path(Path::new(DIR), "hp", volume),
            state,
            block: false,
            observed: None,
        }
    }

    fn pubrec(volume: &str, alloc: &str, state: PublishState) -> PublicationRecord {
        PublicationRecord {
            volume: volume.into(),
            alloc: alloc.into(),
            plugin: "hp".into(),
            external_id: format!("ext-{volume}"),
            target: target_path(Path::new(DIR), volume, alloc),
            staging: Some(staging_path(Path::new(DIR), "hp", volume)),
            block: false,
            state,
            observed: None,
        }
    }

    /// Decides the job of volume `v` with the `hp` plugin staging.
    struct Check {
        desired_publish: Vec<DesiredPublish>,
        desired_unpublish: Vec<DesiredUnpublish>,
        unstage: bool,
        keep_staged: Option<DesiredKeepStaged>,
        staging: Option<StagingRecord>,
        pubs: Vec<PublicationRecord>,
        memo: Memo,
        failed: BTreeSet<ClaimRef>,
        timed_out: HashSet<ClaimRef>,
        stages: bool,
    }

    impl Check {
        fn new() -> Self {
            Self {
                desired_publish: vec![],
                desired_unpublish: vec![],
                unstage: false,
                keep_staged: None,
                staging: None,
                pubs: vec![],
                memo: Memo::default(),
                failed: BTreeSet::new(),
                timed_out: HashSet::new(),
                stages: true,
            }
        }

        fn job(&self) -> Job {
            let desired = VolumeDesired {
                publish: self.desired_publish.iter().collect(),
                unpublish: self.desired_unpublish.iter().collect(),
                unstage: self.unstage,
                keep_staged: self.keep_staged.as_ref(),
            };
            let staging_plugins: HashSet<String> = if self.stages {
                ["hp".to_owned()].into()
            } else {
                HashSet::new()
            };
            decide(&Input {
                data_dir: Path::new(DIR),
                volume: "v",
                desired: &desired,
                staging: self.staging.as_ref(),
                publications: &self.pubs,
                memo: &self.memo,
                failed: &self.failed,
                timed_out: &self.timed_out,
                staging_plugins: &staging_plugins,
            })
        }
    }

    /// A compact view of a job: the steps by name.
    fn steps(job: &Job) -> Vec<String> {
        let mut out = Vec::new();
        out.extend(job.invalid.iter().map(|(a, _)| format!("invalid {a}")));
        out.extend(job.timed_out.iter().map(|a| format!("timeout {a}")));
        out.extend(job.unpublish.iter().map(|t| {
            format!(
                "unpublish {}{}",
                t.record.alloc,
                if t.report { "" } else { " (silent)" }
            )
        }));
        out.extend(
            job.report_unpublished
                .iter()
                .map(|a| format!("report unpublished {a}")),
        );
        if job.unstage.is_some() {
            out.push("unstage".into());
        }
        if job.report_unstaged {
            out.push("report unstaged".into());
        }
        if job.stage.is_some() {
            out.push("stage".into());
        }
        out.extend(
            job.publish
                .iter()
                .map(|p| format!("publish {}", p.desired.alloc)),
        );
        out.extend(
            job.report_published
                .iter()
                .map(|(a, _)| format!("report published {a}")),
        );
        out
    }

    #[test]
    fn first_claim_stages_then_publishes() {
        let mut c = Check::new();
        c.desired_publish = vec![want("v", "a1", "hp")];
        let job = c.job();
        assert_eq!(steps(&job), ["stage", "publish a1"]);
        assert_eq!(job.publish[0].target, Path::new("/d/targets/v/a1"));
        assert_eq!(
            job.publish[0].staging.as_deref(),
            Some(Path::new("/d/staging/hp/v"))
        );
    }

    #[test]
    fn second_claim_reuses_the_staging() {
        let mut c = Check::new();
        c.desired_publish = vec![want("v", "a1", "hp"), want("v", "a2", "hp")];
        c.staging = Some(staged("v", StageState::Staged));
        c.pubs = vec![pubrec("v", "a1", PublishState::Published)];
        c.memo.published.insert(claim("v", "a1"));
        assert_eq!(steps(&c.job()), ["publish a2"]);
        // Steady state: nothing to do.
        c.pubs.push(pubrec("v", "a2", PublishState::Published));
        c.memo.published.insert(claim("v", "a2"));
        assert!(c.job().is_empty());
    }

    #[test]
    fn release_of_one_keeps_the_other_and_the_staging() {
        let mut c = Check::new();
        c.desired_publish = vec![want("v", "a2", "hp")];
        c.desired_unpublish = vec![release("v", "a1")];
        c.staging = Some(staged("v", StageState::Staged));
        c.pubs = vec![
            pubrec("v", "a1", PublishState::Published),
            pubrec("v", "a2", PublishState::Published),
        ];
        c.memo.published.insert(claim("v", "a2"));
        assert_eq!(steps(&c.job()), ["unpublish a1"]);
    }

    #[test]
    fn release_of_the_last_unstages_after_unpublishing() {
        let mut c = Check::new();
        c.desired_unpublish = vec![release("v", "a1")];
        c.staging = Some(staged("v", StageState::Staged));
        c.pubs = vec![pubrec("v", "a1", PublishState::Published)];
        assert_eq!(
            steps(&c.job()),
            ["unpublish a1", "unstage", "report unstaged"]
        );
    }

    #[test]
    fn a_staging_kept_after_the_release_is_published_from_again() {
        let mut c = Check::new();
        c.desired_unpublish = vec![release("v", "a1")];
        c.keep_staged = Some(DesiredKeepStaged {
            volume: "v".into(),
            plugin: "hp".into(),
            external_id: "ext-v".into(),
        });
        c.staging = Some(staged("v", StageState::Staged));
        c.pubs = vec![pubrec("v", "a1", PublishState::Published)];
        assert_eq!(steps(&c.job()), ["unpublish a1"]);
        // Released: the staging stays and nothing is reported of it.
        c.pubs.clear();
        c.desired_unpublish.clear();
        assert!(c.job().is_empty());
        // The next claim publishes from it without staging again.
        c.desired_publish = vec![want("v", "a2", "hp")];
        assert_eq!(steps(&c.job()), ["publish a2"]);
        // Another volume id, or a staging left half done, is not kept.
        c.desired_publish.clear();
        c.keep_staged.as_mut().unwrap().external_id = "ext-other".into();
        assert_eq!(steps(&c.job()), ["unstage", "report unstaged"]);
        c.keep_staged.as_mut().unwrap().external_id = "ext-v".into();
        c.staging = Some(staged("v", StageState::Staging));
        assert_eq!(steps(&c.job()), ["unstage", "report unstaged"]);
    }

    #[test]
    fn explicit_requests_for_absent_things_are_reported_once() {
        let mut c = Check::new();
        c.desired_unpublish = vec![release("v", "a1")];
        c.unstage = true;
        assert_eq!(
            steps(&c.job()),
            ["report unpublished a1", "report unstaged"]
        );
        c.memo.unpublished.insert(claim("v", "a1"));
        c.memo.unstaged.insert("v".into());
        assert!(c.job().is_empty());
    }

    #[test]
    fn uncertain_records_are_finished_when_wanted_and_undone_when_not() {
        let mut c = Check::new();
        c.desired_publish = vec![want("v", "a1", "hp")];
        c.staging = Some(staged("v", StageState::Staging));
        c.pubs = vec![pubrec("v", "a1", PublishState::Publishing)];
        assert_eq!(steps(&c.job()), ["stage", "publish a1"]);

        c.desired_publish.clear();
        c.staging = Some(staged("v", StageState::Unstaging));
        c.pubs = vec![pubrec("v", "a1", PublishState::Unpublishing)];
        assert_eq!(
            steps(&c.job()),
            ["unpublish a1", "unstage", "report unstaged"]
        );
    }

    #[test]
    fn leftovers_no_claim_covers_are_taken_down() {
        let mut c = Check::new();
        c.staging = Some(staged("v", StageState::Staged));
        c.pubs = vec![
            pubrec("v", "a1", PublishState::Published),
            pubrec("v", "a2", PublishState::Published),
        ];
        assert_eq!(
            steps(&c.job()),
            ["unpublish a1", "unpublish a2", "unstage", "report unstaged"]
        );
    }

    #[test]
    fn a_staging_still_used_by_a_publication_is_never_unstaged() {
        let mut c = Check::new();
        c.staging = Some(staged("v", StageState::Staged));
        // A publication of another volume id made from the same staging path: only the
        // volume id changed (re-created volume), the old publication still stands on it.
        let mut other = pubrec("v", "a1", PublishState::Published);
        other.external_id = "ext-new".into();
        c.pubs = vec![other.clone()];
        let mut d = want("v", "a1", "hp");
        d.volume.external_id = "ext-new".into();
        c.desired_publish = vec![d];
        // The staging (ext-v) is not wanted, but the kept publication was made from it.
        let job = c.job();
        assert_eq!(job.unstage, None);
    }

    #[test]
    fn a_new_volume_id_replaces_the_old_publication_silently() {
        let mut c = Check::new();
        c.staging = Some(staged("v", StageState::Staged));
        c.pubs = vec![pubrec("v", "a1", PublishState::Published)];
        let mut d = want("v", "a1", "hp");
        d.volume.external_id = "ext-new".into();
        c.desired_publish = vec![d];
        assert_eq!(
            steps(&c.job()),
            ["unpublish a1 (silent)", "unstage", "stage", "publish a1"]
        );
    }

    #[test]
    fn plugins_without_staging_publish_directly() {
        let mut c = Check::new();
        c.stages = false;
        c.desired_publish = vec![want("v", "a1", "hp")];
        let job = c.job();
        assert_eq!(steps(&job), ["publish a1"]);
        assert_eq!(job.publish[0].staging, None);

        let mut c = Check::new();
        c.stages = false;
        let mut rec = pubrec("v", "a1", PublishState::Published);
        rec.staging = None;
        c.pubs = vec![rec];
        c.desired_unpublish = vec![release("v", "a1")];
        assert_eq!(steps(&c.job()), ["unpublish a1", "report unstaged"]);
    }

    #[test]
    fn failed_and_timed_out_claims_are_cleaned_up() {
        let mut c = Check::new();
        c.desired_publish = vec![want("v", "a1", "hp"), want("v", "a2", "hp")];
        c.staging = Some(staged("v", StageState::Staged));
        c.pubs = vec![pubrec("v", "a1", PublishState::Publishing)];
        c.failed.insert(claim("v", "a1"));
        c.timed_out.insert(claim("v", "a2"));
        assert_eq!(
            steps(&c.job()),
            ["timeout a2", "unpublish a1", "unstage", "report unstaged"]
        );
        // A claim that became ready does not time out.
        c.failed.clear();
        c.timed_out = [claim("v", "a1")].into();
        c.desired_publish = vec![want("v", "a1", "hp")];
        c.pubs = vec![pubrec("v", "a1", PublishState::Published)];
        assert_eq!(steps(&c.job()), ["report published a1"]);
    }

    #[test]
    fn names_that_cannot_be_paths_fail_the_claim() {
        let mut c = Check::new();
        c.desired_publish = vec![want("v", "../etc", "hp")];
        let job = c.job();
        assert_eq!(steps(&job), ["invalid ../etc"]);
        assert!(job.invalid[0].1.contains("invalid alloc name"));
    }

    #[test]
    fn release_wins_over_publish() {
        let mut c = Check::new();
        c.desired_publish = vec![want("v", "a1", "hp")];
        c.desired_unpublish = vec![release("v", "a1")];
        c.pubs = vec![pubrec("v", "a1", PublishState::Published)];
        c.staging = Some(staged("v", StageState::Staged));
        assert_eq!(
            steps(&c.job()),
            ["unpublish a1", "unstage", "report unstaged"]
        );
    }
}
