use super::*;

/// `st_dev` of the filesystem `8:1`.
const SDA1: u64 = (8 << 8) | 1;

fn file(ino: u64, born_ns: Option<u64>) -> Option<FileId> {
    Some(FileId {
        dev: SDA1,
        ino,
        born_ns,
    })
}

fn backing(path: &str, file_id: Option<FileId>) -> Option<Backing> {
    Some(Backing {
        file: path.into(),
        offset: 0,
        sizelimit: 0,
        file_id,
    })
}

/// A loop device as the kernel shows it: its sequence number and its backing file.
fn lo(diskseq: Option<u64>, backing: Option<Backing>) -> DeviceIdentity {
    DeviceIdentity {
        diskseq,
        start: None,
        backing,
    }
}

fn disk(diskseq: Option<u64>) -> DeviceIdentity {
    lo(diskseq, None)
}

fn partition(diskseq: Option<u64>, start: u64) -> DeviceIdentity {
    DeviceIdentity {
        start: Some(start),
        ..disk(diskseq)
    }
}

const A: &str = "/srv/hp/volumes/v1.img";
const B: &str = "/srv/hp/volumes/v2.img";
const A_DELETED: &str = "/srv/hp/volumes/v1.img (deleted)";

/// The case, what was recorded, what the kernel says now, and the verdict: `Ok(true)` the
/// same device, `Ok(false)` not known, `Err(why)` another device.
type Case = (
    &'static str,
    DeviceIdentity,
    DeviceIdentity,
    Result<bool, &'static str>,
);

#[test]
fn whether_a_device_behind_a_number_is_the_one_recorded() {
    let a = || backing(A, file(12, Some(1_000)));
    let cases: Vec<Case> = vec![
        // The sequence number decides where the kernel gives one (Linux 5.15 and later).
        (
            "a loop device as it was",
            lo(Some(11), a()),
            lo(Some(11), a()),
            Ok(true),
        ),
        (
            "a loop device detached and set up again on another file",
            lo(Some(11), a()),
            lo(Some(13), backing(B, file(14, Some(2_000)))),
            Err(
                "its sequence number is 13, not 11: the kernel made it anew since; it now shows \
                 /srv/hp/volumes/v2.img",
            ),
        ),
        (
            "set up again on the same file: another device all the same",
            lo(Some(11), a()),
            lo(Some(13), a()),
            Err(
                "its sequence number is 13, not 11: the kernel made it anew since; it now shows \
                 /srv/hp/volumes/v1.img",
            ),
        ),
        (
            "a disk replaced by another that took its number",
            disk(Some(4)),
            disk(Some(9)),
            Err("its sequence number is 9, not 4: the kernel made it anew since"),
        ),
        ("a disk as it was", disk(Some(4)), disk(Some(4)), Ok(true)),
        (
            "a sequence number that the kernel no longer gives",
            disk(Some(4)),
            disk(None),
            Err("the kernel gives it no sequence number, where it gave 4"),
        ),
        // Its backing file deleted since: the unchanged sequence number says the device
        // still holds it.
        (
            "the backing file deleted, the device not set up again",
            lo(Some(11), a()),
            lo(Some(11), backing(A_DELETED, None)),
            Ok(true),
        ),
        (
            "the backing file renamed, the device not set up again",
            lo(Some(11), a()),
            lo(
                Some(11),
                backing("/srv/hp/old/v1.img", file(12, Some(1_000))),
            ),
            Ok(true),
        ),
        (
            "another file swapped in without setting the device up again",
            lo(Some(11), a()),
            lo(Some(11), backing(B, file(14, Some(2_000)))),
            Err(
                "it shows /srv/hp/volumes/v2.img (inode 14 of filesystem 8:1), not the file it \
                 showed (inode 12 of filesystem 8:1, then /srv/hp/volumes/v1.img)",
            ),
        ),
        (
            "another part of the same file",
            lo(Some(11), a()),
            lo(
                Some(11),
                Some(Backing {
                    offset: 4096,
                    ..a().unwrap()
                }),
            ),
            Err(
                "it shows /srv/hp/volumes/v1.img from offset 4096 size limit 0, not from offset \
                 0 size limit 0",
            ),
        ),
        // Without a sequence number (before Linux 5.15): the backing file decides, by what
        // the file is, not by its name.
        (
            "a loop device as it was",
            lo(None, a()),
            lo(None, a()),
            Ok(true),
        ),
        (
            "set up again on another file",
            lo(None, a()),
            lo(None, backing(B, file(14, Some(2_000)))),
            Err(
                "it shows /srv/hp/volumes/v2.img (inode 14 of filesystem 8:1), not the file it \
                 showed (inode 12 of filesystem 8:1, then /srv/hp/volumes/v1.img)",
            ),
        ),
        (
            "another file made at the same path",
            lo(None, a()),
            lo(None, backing(A, file(15, Some(3_000)))),
            Err(
                "it shows /srv/hp/volumes/v1.img (inode 15 of filesystem 8:1), not the file it \
                 showed (inode 12 of filesystem 8:1, then /srv/hp/volumes/v1.img)",
            ),
        ),
        (
            "another file at the same path with the deleted file's inode number",
            lo(None, a()),
            lo(None, backing(A, file(12, Some(3_000)))),
            Err(
                "it shows /srv/hp/volumes/v1.img, a file made after the one it showed \
                 (/srv/hp/volumes/v1.img) and given its inode number",
            ),
        ),
        (
            "the backing file renamed",
            lo(None, a()),
            lo(None, backing("/srv/hp/old/v1.img", file(12, Some(1_000)))),
            Ok(true),
        ),
        (
            "the backing file deleted: nothing shows the device still holds it",
            lo(None, a()),
            lo(None, backing(A_DELETED, None)),
            Err(
                "its backing file /srv/hp/volumes/v1.img (deleted) cannot be looked at any more, \
                 so nothing shows that it is still the file it showed (/srv/hp/volumes/v1.img)",
            ),
        ),
        (
            "a file out of reach when recorded: its path is all there is",
            lo(None, backing(A_DELETED, None)),
            lo(None, backing(A_DELETED, None)),
            Ok(true),
        ),
        (
            "a file out of reach when recorded, another path now",
            lo(None, backing(A_DELETED, None)),
            lo(None, backing(B, file(14, None))),
            Err("it shows /srv/hp/volumes/v2.img, not /srv/hp/volumes/v1.img (deleted)"),
        ),
        (
            "detached: no backing file now",
            lo(None, a()),
            lo(None, None),
            Err(
                "it is no loop device with a backing file now, where it showed \
                 /srv/hp/volumes/v1.img",
            ),
        ),
        // Partitions: their disk's sequence number and where they start.
        (
            "a partition as it was",
            partition(Some(4), 2048),
            partition(Some(4), 2048),
            Ok(true),
        ),
        (
            "a partition table written anew",
            partition(Some(4), 2048),
            partition(Some(4), 4096),
            Err("the partition starts at sector 4096, not 2048"),
        ),
        // Nothing better known: the device is judged by number and size, as before.
        (
            "a disk without a sequence number",
            disk(None),
            disk(None),
            Ok(false),
        ),
        (
            "a record made before identities were recorded",
            DeviceIdentity::default(),
            lo(Some(11), a()),
            Ok(false),
        ),
    ];
    for (name, recorded, now, want) in cases {
        let got = match compare(&recorded, &now) {
            Sameness::Same => Ok(true),
            Sameness::Unknown => Ok(false),
            Sameness::Other(why) => Err(why),
        };
        assert_eq!(got, want.map_err(str::to_owned), "{name}");
    }
}

fn device_at(rdev: u64, identity: Option<DeviceIdentity>) -> Observation {
    Observation {
        device: Some(rdev),
        identity,
        ..Observation::default()
    }
}

fn inner(device: Option<u64>, identity: Option<DeviceIdentity>) -> Observation {
    Observation {
        inside: vec![InnerMount {
            path: "device".into(),
            mount: SeenMount {
                device: "0:5".into(),
                root: "/loop3".into(),
                source: "udev".into(),
            },
            device,
            identity,
        }],
        ..Observation::default()
    }
}

#[test]
fn what_is_recorded_after_a_check_passed() {
    let id = || Some(disk(Some(11)));
    let loop3 = (7 << 8) | 3;
    let cases: Vec<(&str, Option<Observation>, Observation, Option<Observation>)> = vec![
        (
            "nothing recorded (an older agent's record): what is there",
            None,
            device_at(loop3, id()),
            Some(device_at(loop3, id())),
        ),
        (
            "a device recorded without its identity gains it",
            Some(device_at(loop3, None)),
            device_at(loop3, id()),
            Some(device_at(loop3, id())),
        ),
        (
            "a device recorded with its identity: nothing",
            Some(device_at(loop3, id())),
            device_at(loop3, id()),
            None,
        ),
        (
            "a machine that cannot say: nothing",
            Some(device_at(loop3, None)),
            device_at(loop3, None),
            None,
        ),
        (
            "a device node inside a staging, recorded without its device",
            Some(inner(None, None)),
            inner(Some(loop3), id()),
            Some(inner(Some(loop3), id())),
        ),
        (
            "a device node inside a staging, recorded without its identity",
            Some(inner(Some(loop3), None)),
            inner(Some(loop3), id()),
            Some(inner(Some(loop3), id())),
        ),
        (
            "a mount that is no device: nothing",
            Some(inner(None, None)),
            inner(None, None),
            None,
        ),
    ];
    for (name, recorded, now, want) in cases {
        let gains = want.is_some();
        if let Some(r) = &recorded {
            // Where a record gains something, it says that it may.
            assert!(!gains || r.may_gain(), "{name}");
        }
        assert_eq!(to_record(recorded.as_ref(), now), want, "{name}");
    }
    assert!(!device_at(loop3, id()).may_gain());
    assert!(!inner(Some(loop3), id()).may_gain());
    assert!(!Observation::default().may_gain());
}

#[test]
fn device_numbers_read_as_linux_encodes_them() {
    assert_eq!(dev_name(SDA1), "8:1");
    assert_eq!(dev_name((259 << 8) | 3), "259:3");
    // Minors past 255 are kept in the upper bits.
    assert_eq!(
        dev_name((7 << 8) | (300 & 0xff) | ((300 & !0xff) << 12)),
        "7:300"
    );
}
