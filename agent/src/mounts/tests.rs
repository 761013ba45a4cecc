use super::fake::FakeFiles;
use super::*;
use csivol_rules::agent::verify::Checks;

const DIR: &str = "1 0 8:1 / / rw - ext4 /dev/sda1 rw";
const STAGING: &str = "/data/staging/hp/v1";
const TARGET: &str = "/data/targets/v1/a";

fn loop3() -> u64 {
    rustix::fs::makedev(7, 3)
}

fn loop4() -> u64 {
    rustix::fs::makedev(7, 4)
}

/// The data dir `/data` on the root filesystem `8:1`; the plugin's own files on `/srv`.
fn files() -> FakeFiles {
    let mut f = FakeFiles::default();
    for p in [STAGING, TARGET, "/data/staging/hp/v1/vol-1"] {
        f.kinds.insert(p.into(), NodeKind::Other("a directory"));
    }
    f.sizes.insert(loop3(), 16384);
    f.sizes.insert(loop4(), 16384);
    f
}

fn table(lines: &[&str]) -> MountTable {
    let mut text = format!("{DIR}\n");
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    MountTable::parse(&text)
}

/// A plugin shape: what is mounted after stage, after publish, and whether the volume is
/// a block device (its target then a device node, `rdev` 7:3).
struct Shape {
    name: &'static str,
    stages: bool,
    block: bool,
    staged: &'static [&'static str],
    published: &'static [&'static str],
}

impl Shape {
    /// Every mount the plugin made, stagings first.
    fn mounts(&self) -> Vec<&'static str> {
        self.staged.iter().chain(self.published).copied().collect()
    }
}

const SHAPES: &[Shape] = &[
    Shape {
        name: "stage mounts the volume, publish binds the staging",
        stages: true,
        block: false,
        staged: &["40 1 8:1 /srv/v1 /data/staging/hp/v1 rw - ext4 /dev/sda1 rw"],
        published: &["41 1 8:1 /srv/v1 /data/targets/v1/a rw - ext4 /dev/sda1 rw"],
    },
    Shape {
        name: "stage makes nothing, publish binds the plugin's own directory",
        stages: true,
        block: false,
        staged: &[],
        published: &["41 1 8:1 /srv/data/v1 /data/targets/v1/a rw - ext4 /dev/sda1 rw"],
    },
    Shape {
        name: "no staging, publish mounts at the target",
        stages: false,
        block: false,
        staged: &[],
        published: &["41 1 259:3 / /data/targets/v1/a rw - xfs /dev/nvme1n1 rw"],
    },
    Shape {
        name: "stage binds a directory, publish a subdirectory of it",
        stages: true,
        block: false,
        staged: &["40 1 8:1 /srv/v1 /data/staging/hp/v1 rw - ext4 /dev/sda1 rw"],
        published: &["41 1 8:1 /srv/v1/sub /data/targets/v1/a rw - ext4 /dev/sda1 rw"],
    },
    Shape {
        name: "block: stage sets the device up and makes nothing there, publish at the target",
        stages: true,
        block: true,
        staged: &[],
        published: &["41 1 0:5 /loop3 /data/targets/v1/a rw - devtmpfs udev rw"],
    },
    Shape {
        name: "block: a device node in the staging, one at the target",
        stages: true,
        block: true,
        staged: &["40 1 0:5 /loop3 /data/staging/hp/v1/vol-1 rw - devtmpfs udev rw"],
        published: &["41 1 0:5 /loop3 /data/targets/v1/a rw - devtmpfs udev rw"],
    },
];

struct Run {
    files: FakeFiles,
    stage_obs: Option<Observation>,
    target_obs: Option<Observation>,
}

impl Run {
    /// Stages and publishes `shape` as the agent does: observes the staging after stage,
    /// checks the target until it passes, and keeps both observations.
    fn up(shape: &Shape) -> Self {
        Self::up_with(shape, files())
    }

    /// [`Run::up`] on a machine whose `stat` and sysfs say what `files` says.
    fn up_with(shape: &Shape, mut files: FakeFiles) -> Self {
        if shape.block {
            // The device node the plugin binds inside the staging directory, if it does.
            files.kinds.insert(
                "/data/staging/hp/v1/vol-1".into(),
                NodeKind::Block { rdev: loop3() },
            );
        }
        let t = table(shape.staged);
        let stage_obs = shape.stages.then(|| {
            Checker::with_files(t.clone(), Path::new("/data"), &files)
                .observe(Path::new(STAGING), true)
        });
        if shape.block {
            files
                .kinds
                .insert(TARGET.into(), NodeKind::Block { rdev: loop3() });
        }
        let mut run = Self {
            files,
            stage_obs,
            target_obs: None,
        };
        let all = shape.mounts();
        let seen = run
            .check(shape, &all)
            .unwrap_or_else(|e| panic!("{}: {e}", shape.name));
        run.target_obs = Some(seen);
        run
    }

    fn check(&self, shape: &Shape, lines: &[&str]) -> Result<Observation, String> {
        let c = Checker::with_files(table(lines), Path::new("/data"), &self.files);
        let staging = self.stage_obs.as_ref().map(|o| Staging {
            volume: "v1",
            path: Path::new(STAGING),
            observed: Some(o),
            block: shape.block,
        });
        c.target(
            ReadyCheck::Mount,
            Target {
                volume: "v1",
                path: Path::new(TARGET),
                observed: self.target_obs.as_ref(),
                block: shape.block,
            },
            staging,
        )
    }
}

#[test]
fn every_shape_is_ready_as_made_and_not_once_a_mount_is_gone() {
    for shape in SHAPES {
        let run = Run::up(shape);
        let all = shape.mounts();
        assert!(run.check(shape, &all).is_ok(), "{}", shape.name);
        // Each mount the plugin made, gone in turn, is drift.
        for gone in 0..all.len() {
            let left: Vec<&str> = all
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != gone)
                .map(|(_, l)| *l)
                .collect();
            let mut run = Run::up(shape);
            if shape.block && gone == all.len() - 1 {
                // The device unbound from the target leaves the agent's empty file.
                run.files
                    .kinds
                    .insert(TARGET.into(), NodeKind::Other("a regular file"));
            }
            let e = run.check(shape, &left).unwrap_err();
            assert!(
                e.contains("no longer mounted") || e.contains("not the volume's block device"),
                "{}: {e}",
                shape.name
            );
        }
    }
}

#[test]
fn what_each_shape_is_observed_as() {
    let kinds: Vec<(Option<&str>, &str)> = SHAPES
        .iter()
        .map(|s| {
            let run = Run::up(s);
            (
                run.stage_obs.as_ref().map(Observation::kind),
                run.target_obs.as_ref().unwrap().kind(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            (Some("mount"), "mount"),
            (Some("none"), "mount"),
            (None, "mount"),
            (Some("mount"), "mount"),
            (Some("none"), "device"),
            (Some("mounts-inside"), "device"),
        ]
    );
}

#[test]
fn a_plugin_that_staged_nothing_is_never_asked_for_a_mount_there() {
    let shape = &SHAPES[1];
    let run = Run::up(shape);
    // Nothing at the staging path, and the target still the plugin's own directory.
    assert!(run.check(shape, shape.published).is_ok());
    // Another directory bound at the target is not what the plugin made there.
    let other = "41 1 8:1 /srv/data/v2 /data/targets/v1/a rw - ext4 /dev/sda1 rw";
    let e = run.check(shape, &[other]).unwrap_err();
    assert!(e.contains("not what the plugin mounted there"), "{e}");
}

#[test]
fn never_ready_the_agents_own_directory_or_no_mount_at_all() {
    let bound_empty = "41 1 8:1 /data/staging/hp/v1 /data/targets/v1/a rw - ext4 /dev/sda1 rw";
    for shape in SHAPES.iter().filter(|s| !s.block) {
        let run = Run {
            files: files(),
            stage_obs: shape.stages.then(Observation::default),
            target_obs: None,
        };
        let e = run.check(shape, &[bound_empty]).unwrap_err();
        assert!(
            e.contains("bind of the node's own directory /data/staging/hp/v1"),
            "{e}"
        );
        let e = run.check(shape, &[]).unwrap_err();
        assert_eq!(e, "target of v1 is no longer mounted (/data/targets/v1/a)");
    }
}

#[test]
fn a_target_not_from_the_staged_mount_is_not_ready() {
    let shape = &SHAPES[0];
    let run = Run {
        files: files(),
        stage_obs: Some(Run::up(shape).stage_obs.unwrap()),
        target_obs: None,
    };
    let staged = shape.staged[0];
    let other = "41 1 8:1 /srv/v2 /data/targets/v1/a rw - ext4 /dev/sda1 rw";
    let e = run.check(shape, &[staged, other]).unwrap_err();
    assert!(
        e.contains("is not mounted from the volume's staging"),
        "{e}"
    );
    let other_dev = "41 1 8:2 /srv/v1 /data/targets/v1/a rw - ext4 /dev/sdb rw";
    assert!(run.check(shape, &[staged, other_dev]).is_err());
    // The staging mounted again from elsewhere is not what the plugin staged.
    let restaged = "40 1 8:1 /srv/v9 /data/staging/hp/v1 rw - ext4 /dev/sda1 rw";
    let e = run
        .check(shape, &[restaged, shape.published[0]])
        .unwrap_err();
    assert!(
        e.contains("staging of v1 at /data/staging/hp/v1 shows device 8:1 root /srv/v9"),
        "{e}"
    );
}

#[test]
fn a_block_target_must_keep_the_device_the_plugin_placed() {
    let shape = &SHAPES[5];
    let mut run = Run::up(shape);
    let all = shape.mounts();
    run.files
        .kinds
        .insert(TARGET.into(), NodeKind::Block { rdev: loop4() });
    let e = run.check(shape, &all).unwrap_err();
    assert!(
        e.contains("is device 7:4, not the device the plugin placed there (7:3)"),
        "{e}"
    );
    // Detached: the device node is still there, with nothing behind it.
    run.files
        .kinds
        .insert(TARGET.into(), NodeKind::Block { rdev: loop3() });
    run.files.sizes.insert(loop3(), 0);
    let e = run.check(shape, &all).unwrap_err();
    assert!(e.contains("has nothing behind it (size 0)"), "{e}");
}

#[test]
fn an_older_agents_records_are_judged_by_its_rule_once() {
    let f = files();
    let staged = "40 1 8:1 /srv/v1 /data/staging/hp/v1 rw - ext4 /dev/sda1 rw";
    let legacy = Staging {
        volume: "v1",
        path: Path::new(STAGING),
        observed: None,
        block: false,
    };
    let c = Checker::with_files(table(&[staged]), Path::new("/data"), &f);
    let seen = c.staging(ReadyCheck::Mount, legacy).unwrap().unwrap();
    assert_eq!(seen.mount.unwrap().root, Path::new("/srv/v1"));
    let c = Checker::with_files(table(&[]), Path::new("/data"), &f);
    let e = c.staging(ReadyCheck::Mount, legacy).unwrap_err();
    assert_eq!(
        e,
        "staging of v1 is no longer mounted (/data/staging/hp/v1)"
    );
    // A record with its observation returns nothing new.
    let nothing = Observation::default();
    let recorded = Staging {
        observed: Some(&nothing),
        ..legacy
    };
    assert_eq!(c.staging(ReadyCheck::Mount, recorded), Ok(None));
    // A block staging of an older agent needed only to exist.
    let block = Staging {
        block: true,
        ..legacy
    };
    assert!(c.staging(ReadyCheck::Mount, block).unwrap().is_some());
    let gone = Staging {
        path: Path::new("/data/staging/hp/gone"),
        ..block
    };
    assert!(c.staging(ReadyCheck::Mount, gone).is_err());
}

#[test]
fn exists_checks_look_at_the_paths_only() {
    let f = files();
    let c = Checker::with_files(table(&[]), Path::new("/data"), &f);
    let t = |path: &'static str| Target {
        volume: "v",
        path: Path::new(path),
        observed: None,
        block: false,
    };
    assert!(c.target(ReadyCheck::Exists, t(TARGET), None).is_ok());
    assert!(
        c.target(ReadyCheck::Exists, t("/nonexistent"), None)
            .is_err()
    );
    let s = Staging {
        volume: "v",
        path: Path::new("/nonexistent"),
        observed: None,
        block: false,
    };
    let e = c
        .target(ReadyCheck::Exists, t(TARGET), Some(s))
        .unwrap_err();
    assert!(e.starts_with("staging of v is gone"), "{e}");
}

/// What stat says, what the kernel says of the device's size, the verdict.
type Case = (
    io::Result<NodeKind>,
    Option<Result<u64, ()>>,
    Result<u64, &'static str>,
);

#[test]
fn a_block_device_node_counts_only_while_its_device_lives() {
    let t = Path::new(TARGET);
    let gone = || Err(io::Error::from(io::ErrorKind::NotFound));
    let cases: [Case; 7] = [
        (
            Ok(NodeKind::Block { rdev: loop3() }),
            Some(Ok(16384)),
            Ok(loop3()),
        ),
        // No sysfs to ask: the device node is enough.
        (Ok(NodeKind::Block { rdev: loop3() }), None, Ok(loop3())),
        (
            Ok(NodeKind::Block { rdev: loop3() }),
            Some(Ok(0)),
            Err(
                "target of v1 at /data/targets/v1/a is device 7:3, which has nothing behind it (size 0)",
            ),
        ),
        (
            Ok(NodeKind::Block { rdev: loop3() }),
            Some(Err(())),
            Err("target of v1 at /data/targets/v1/a is device 7:3, which the kernel no longer has"),
        ),
        (
            Ok(NodeKind::Other("a regular file")),
            Some(Ok(16384)),
            Err(
                "target of v1 at /data/targets/v1/a is a regular file, not the volume's block device",
            ),
        ),
        (
            Ok(NodeKind::Other("a directory")),
            None,
            Err("target of v1 at /data/targets/v1/a is a directory, not the volume's block device"),
        ),
        (
            gone(),
            None,
            Err("target of v1 is gone (/data/targets/v1/a: entity not found)"),
        ),
    ];
    for (node, size, want) in cases {
        let got = block_verdict("target of v1", t, node, |_| size);
        assert_eq!(got, want.map_err(str::to_owned));
    }
}

#[test]
fn a_real_block_target_that_is_a_file_or_missing_is_not_ready() {
    let dir = std::env::temp_dir().join(format!("csivol-block-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("target");
    std::fs::write(&file, "").unwrap();
    let c = Checker::new(table(&[]), Path::new("/data"));
    let e = c.block_device("target of v1", &file).unwrap_err();
    assert!(
        e.contains("is a regular file, not the volume's block device; nothing is mounted there"),
        "{e}"
    );
    assert!(c.observe(&file, false) == Observation::default());
    std::fs::remove_dir_all(&dir).unwrap();
}

fn record(block: bool, observed: Option<Observation>) -> (StagingRecord, PublicationRecord) {
    use csivol_rules::agent::records::{PublishState, StageState};
    (
        StagingRecord {
            volume: "v1".into(),
            plugin: "hp".into(),
            external_id: "x".into(),
            path: STAGING.into(),
            state: StageState::Staged,
            block,
            observed: observed.clone(),
        },
        PublicationRecord {
            volume: "v1".into(),
            alloc: "a".into(),
            plugin: "hp".into(),
            external_id: "x".into(),
            target: TARGET.into(),
            staging: Some(STAGING.into()),
            block,
            state: PublishState::Published,
            observed: None,
        },
    )
}

#[test]
fn the_judge_of_records_verifies_nothing_without_a_mount_table() {
    let (s, p) = record(false, Some(Observation::default()));
    let checks = BTreeMap::new();
    let judge = Judge {
        checker: None,
        default_check: ReadyCheck::Mount,
        plugin_checks: &checks,
    };
    assert_eq!(judge.staging(&s, &[]), Err(UNREADABLE.to_owned()));
    assert_eq!(
        judge.publication(&p, Some(&s), &[]),
        Err(UNREADABLE.to_owned())
    );
}

#[test]
fn the_judge_holds_a_block_volume_to_one_live_device() {
    let mut f = files();
    f.kinds
        .insert(TARGET.into(), NodeKind::Block { rdev: loop3() });
    let other = "/data/targets/v1/b";
    f.kinds
        .insert(other.into(), NodeKind::Block { rdev: loop4() });
    let checks = BTreeMap::new();
    let c = Checker::with_files(table(&[]), Path::new("/data"), &f);
    let judge = Judge {
        checker: Some(&c),
        default_check: ReadyCheck::Mount,
        plugin_checks: &checks,
    };
    let (s, p) = record(true, Some(Observation::default()));
    let mut q = p.clone();
    q.alloc = "b".into();
    q.target = other.into();
    // Two claims of one volume on a node see one device.
    let e = judge
        .publication(&p, Some(&s), &[p.clone(), q.clone()])
        .unwrap_err();
    assert!(
        e.contains("but the volume's device at /data/targets/v1/b is 7:4"),
        "{e}"
    );
    // A target whose device died means the staging lost it too.
    let mut dead = files();
    dead.kinds
        .insert(other.into(), NodeKind::Block { rdev: loop4() });
    dead.sizes.insert(loop4(), 0);
    let c = Checker::with_files(table(&[]), Path::new("/data"), &dead);
    let judge = Judge {
        checker: Some(&c),
        ..judge
    };
    let e = judge.staging(&s, &[p, q]).unwrap_err();
    assert!(
        e.starts_with("staging of v1 no longer holds the volume's device"),
        "{e}"
    );
    // `--ready-check hp=exists` asks only for the paths.
    let exists = BTreeMap::from([("hp".to_owned(), ReadyCheck::Exists)]);
    let judge = Judge {
        plugin_checks: &exists,
        ..judge
    };
    assert!(judge.staging(&s, &[]).is_ok());
}

/// What the kernel says of loop3 while it shows the volume's image (`diskseq` where the
/// kernel gives one), and once its number was given to another file.
fn volume_image(diskseq: Option<u64>) -> DeviceIdentity {
    image(diskseq, "/srv/hp/v1.img", 12)
}

fn other_image(diskseq: Option<u64>) -> DeviceIdentity {
    image(diskseq.map(|n| n + 2), "/srv/hp/v2.img", 14)
}

fn image(diskseq: Option<u64>, file: &str, ino: u64) -> DeviceIdentity {
    use csivol_rules::agent::observed::{Backing, FileId};
    DeviceIdentity {
        diskseq,
        start: None,
        backing: Some(Backing {
            file: file.into(),
            offset: 0,
            sizelimit: 0,
            file_id: Some(FileId {
                dev: 2049,
                ino,
                born_ns: None,
            }),
        }),
    }
}

fn with_identity(identity: DeviceIdentity) -> FakeFiles {
    let mut f = files();
    f.identities.insert(loop3(), identity);
    f
}

#[test]
fn a_block_device_whose_number_was_taken_by_another_is_not_the_volume() {
    for shape in SHAPES.iter().filter(|s| s.block) {
        // With the kernel's sequence number (Linux 5.15 and later), and without it: the
        // loop device's backing file.
        for (diskseq, why) in [
            (
                Some(11),
                "its sequence number is 13, not 11: the kernel made it anew since; it now \
                 shows /srv/hp/v2.img",
            ),
            (
                None,
                "it shows /srv/hp/v2.img (inode 14 of filesystem 8:1), not the file it showed \
                 (inode 12 of filesystem 8:1, then /srv/hp/v1.img)",
            ),
        ] {
            let mut run = Run::up_with(shape, with_identity(volume_image(diskseq)));
            let all = shape.mounts();
            assert!(run.check(shape, &all).is_ok(), "{}", shape.name);
            // Detached behind the plugin and set up again on another file: the same
            // number, the same mounts, a live device of the same size.
            run.files.identities.insert(loop3(), other_image(diskseq));
            let e = run.check(shape, &all).unwrap_err();
            // A device bound in the staging is found first: the staging lost the volume.
            let at = if shape.staged.is_empty() {
                "target of v1 at /data/targets/v1/a"
            } else {
                "the mount the plugin made in the staging of v1 at /data/staging/hp/v1/vol-1"
            };
            assert_eq!(
                e,
                format!(
                    "{at} is device 7:3 as the plugin placed there, but another device has \
                     taken that number: {why}"
                ),
                "{}",
                shape.name
            );
        }
    }
}

#[test]
fn where_nothing_tells_devices_apart_the_number_and_size_decide() {
    for shape in SHAPES.iter().filter(|s| s.block) {
        // A device without a sequence number that is no loop device: sysfs says nothing
        // more of it, so another device under its number passes, as it always did.
        let run = Run::up(shape);
        let seen = run.target_obs.clone().unwrap();
        assert_eq!(
            seen.identity,
            Some(DeviceIdentity::default()),
            "{}",
            shape.name
        );
        assert!(run.check(shape, &shape.mounts()).is_ok(), "{}", shape.name);
    }
}

#[test]
fn a_device_recorded_before_identities_is_judged_as_before_and_gains_one() {
    let shape = &SHAPES[4];
    let mut run = Run::up_with(shape, with_identity(volume_image(Some(11))));
    // The record of an agent that did not record identities.
    run.target_obs.as_mut().unwrap().identity = None;
    run.files.identities.insert(loop3(), other_image(Some(11)));
    let seen = run.check(shape, &shape.mounts()).unwrap();
    assert_eq!(seen.identity, Some(other_image(Some(11))));
    let recorded = run.target_obs.as_ref().unwrap();
    let completed = observed::to_record(Some(recorded), seen).unwrap();
    run.target_obs = Some(completed);
    // From then on it is held to it.
    run.files.identities.insert(loop3(), volume_image(Some(20)));
    let e = run.check(shape, &shape.mounts()).unwrap_err();
    assert!(e.contains("its sequence number is 20, not 13"), "{e}");
}

#[test]
fn a_block_staging_recorded_before_identities_gains_them() {
    let shape = &SHAPES[5];
    let run = Run::up_with(shape, with_identity(volume_image(Some(11))));
    let f = &run.files;
    let mut old = run.stage_obs.clone().unwrap();
    assert_eq!(old.inside[0].device, Some(loop3()));
    assert_eq!(old.inside[0].identity, Some(volume_image(Some(11))));
    old.inside[0].device = None;
    old.inside[0].identity = None;
    let c = Checker::with_files(table(shape.staged), Path::new("/data"), f);
    let s = Staging {
        volume: "v1",
        path: Path::new(STAGING),
        observed: Some(&old),
        block: true,
    };
    let completed = c.staging(ReadyCheck::Mount, s).unwrap();
    assert_eq!(completed, run.stage_obs);
    let s = Staging {
        observed: completed.as_ref(),
        ..s
    };
    assert_eq!(c.staging(ReadyCheck::Mount, s), Ok(None));
}

#[test]
fn a_block_staging_whose_device_number_was_taken_is_staged_again() {
    let mut f = with_identity(volume_image(Some(11)));
    f.kinds
        .insert(TARGET.into(), NodeKind::Block { rdev: loop3() });
    let f = f;
    let (s, mut p) = record(true, Some(Observation::default()));
    p.observed = Some(Observation {
        device: Some(loop3()),
        identity: Some(volume_image(Some(11))),
        ..Observation::default()
    });
    let checks = BTreeMap::new();
    let c = Checker::with_files(table(&[]), Path::new("/data"), &f);
    let judge = Judge {
        checker: Some(&c),
        default_check: ReadyCheck::Mount,
        plugin_checks: &checks,
    };
    assert!(judge.staging(&s, std::slice::from_ref(&p)).is_ok());
    let mut reused = with_identity(other_image(Some(11)));
    reused.kinds = f.kinds.clone();
    let c = Checker::with_files(table(&[]), Path::new("/data"), &reused);
    let judge = Judge {
        checker: Some(&c),
        ..judge
    };
    let e = judge.staging(&s, std::slice::from_ref(&p)).unwrap_err();
    assert!(
        e.starts_with(
            "staging of v1 no longer holds the volume's device: the device at \
             /data/targets/v1/a is device 7:3 as the plugin placed there, but another device \
             has taken that number: its sequence number is 13, not 11"
        ),
        "{e}"
    );
    let e = judge
        .publication(&p, Some(&s), std::slice::from_ref(&p))
        .unwrap_err();
    assert!(
        e.starts_with("target of v1 at /data/targets/v1/a is device 7:3 as the plugin"),
        "{e}"
    );
}
