//! What sysfs says of a block device besides its number (`/sys/dev/block/MAJOR:MINOR`),
//! read into a [`DeviceIdentity`] that later checks compare
//! (`csivol_rules::agent::observed::compare`).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use csivol_rules::agent::observed::{Backing, DeviceIdentity, FileId};

/// How the kernel marks a loop device's backing file that was removed.
const DELETED: &str = " (deleted)";

/// The identity of the block device `MAJOR:MINOR`; `None` when the machine has no sysfs
/// to ask. What sysfs does not show is left out: a kernel before 5.15 gives no `diskseq`,
/// a device that is no loop device has no `loop/`.
pub fn read(major: u32, minor: u32) -> Option<DeviceIdentity> {
    let root = Path::new("/sys/dev/block");
    if !root.is_dir() {
        return None;
    }
    let dir = root.join(format!("{major}:{minor}"));
    // A partition's directory lies inside its disk's: the sequence number is the disk's.
    let partition = dir.join("partition").exists();
    let disk = if partition {
        dir.join("..")
    } else {
        dir.clone()
    };
    Some(DeviceIdentity {
        diskseq: number(&disk.join("diskseq")),
        start: partition.then(|| number(&dir.join("start"))).flatten(),
        backing: backing(&dir),
    })
}

fn text(path: &Path) -> Option<String> {
    let mut s = std::fs::read_to_string(path).ok()?;
    if s.ends_with('\n') {
        s.pop();
    }
    Some(s)
}

fn number(path: &Path) -> Option<u64> {
    text(path)?.trim().parse().ok()
}

/// A loop device's backing file, while it has one: `loop/` exists only while the device
/// is set up.
fn backing(dir: &Path) -> Option<Backing> {
    let file = text(&dir.join("loop/backing_file"))?;
    // A deleted file cannot be looked at: the path names another file, or none.
    let file_id = if file.ends_with(DELETED) {
        None
    } else {
        file_id(&PathBuf::from(&file))
    };
    Some(Backing {
        offset: number(&dir.join("loop/offset")).unwrap_or(0),
        sizelimit: number(&dir.join("loop/sizelimit")).unwrap_or(0),
        file,
        file_id,
    })
}

/// The file at `path` by filesystem, inode and birth time (where the filesystem keeps
/// one); `None` when the path leads nowhere from here.
fn file_id(path: &Path) -> Option<FileId> {
    let m = std::fs::metadata(path).ok()?;
    let born_ns = m
        .created()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .and_then(|d| u64::try_from(d.as_nanos()).ok());
    Some(FileId {
        dev: m.dev(),
        ino: m.ino(),
        born_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A real loop device: what sysfs says of it names its backing file, and set up again
    /// on another file under the same number it is known as another device.
    #[test]
    fn a_loop_device_reused_by_number_reads_as_another() {
        use csivol_rules::agent::observed::{Sameness, compare};
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: loop devices need root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.img"), dir.path().join("b.img"));
        for f in [&a, &b] {
            std::fs::File::create(f).unwrap().set_len(1 << 20).unwrap();
        }
        let losetup = |args: &[&std::ffi::OsStr]| {
            let out = Command::new("losetup").args(args).output().unwrap();
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            )
        };
        let (ok, device) = losetup(&["--find".as_ref(), "--show".as_ref(), a.as_os_str()]);
        assert!(ok, "losetup --find");
        let guard = Detach(device.clone(), dir.path().to_owned());
        let rdev = std::fs::metadata(&device).unwrap().rdev();
        let (major, minor) = (rustix::fs::major(rdev), rustix::fs::minor(rdev));
        let first = read(major, minor).unwrap();
        let backing = first.backing.clone().unwrap();
        assert_eq!(backing.file, a.to_string_lossy());
        let ino = std::fs::metadata(&a).unwrap().ino();
        assert_eq!(backing.file_id.map(|f| f.ino), Some(ino));
        assert_eq!(
            compare(&first, &read(major, minor).unwrap()),
            Sameness::Same
        );

        // Its file deleted: the kernel says so, and the path is not looked at (it names
        // another file, or none). The sequence number, where the kernel gives one, still
        // says it is the same device; without one nothing does.
        std::fs::remove_file(&a).unwrap();
        std::fs::File::create(&a).unwrap();
        let deleted = read(major, minor).unwrap();
        let backing = deleted.backing.clone().unwrap();
        assert!(backing.file.ends_with(" (deleted)"), "{backing:?}");
        assert_eq!(backing.file_id, None);
        let verdict = compare(&first, &deleted);
        if first.diskseq.is_some() {
            assert_eq!(verdict, Sameness::Same);
        } else {
            assert!(matches!(verdict, Sameness::Other(_)), "{verdict:?}");
        }

        // Detached and set up again on another file under the same number. Another
        // process may take the free number in between: then it is reused all the same.
        assert!(losetup(&["--detach".as_ref(), device.as_ref()]).0);
        let _ = losetup(&[device.as_ref(), b.as_os_str()]);
        let now = read(major, minor).unwrap();
        assert!(
            matches!(compare(&first, &now), Sameness::Other(_)),
            "{first:?} / {now:?}"
        );
        drop(guard);
    }

    /// Detaches a loop device when dropped, so a failing test leaves none behind; only
    /// while a file below the test's directory backs it (another process may have taken
    /// the number meanwhile).
    struct Detach(String, PathBuf);

    impl Drop for Detach {
        fn drop(&mut self) {
            let out = Command::new("losetup")
                .args(["--noheadings", "--output", "BACK-FILE", "--list", &self.0])
                .output();
            let ours = out.is_ok_and(|o| {
                Path::new(String::from_utf8_lossy(&o.stdout).trim()).starts_with(&self.1)
            });
            if ours {
                let _ = Command::new("losetup").args(["--detach", &self.0]).status();
            }
        }
    }
}
