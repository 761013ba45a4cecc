//! csivol's own ownership change, where the server allowed it for a plugin without
//! VOLUME_MOUNT_GROUP (`ownership = "on-root-mismatch" | "recursive"`): the target's root
//! gets the claim's group, `g+rwX` and the setgid bit (so that what the workload creates
//! there is the group's too), and for `recursive` every entry below it, bounded.
//!
//! The CSI spec makes a plugin with VOLUME_MOUNT_GROUP pass the group to its mount; it
//! does not promise the root a group (csi.proto, `MountVolume.volume_mount_group`: new
//! entries "SHOULD be permission-labeled"), so this is done, and checked, only where
//! csivol applies the group itself.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use csivol_api::OwnershipChange as Changed;

/// At most this many entries below a target's root are changed by `recursive`: a volume
/// of millions of files would hold the claim's readiness for as long. Past it the change
/// stops and says so; the root is done first, so the workload can write there.
pub const RECURSIVE_BOUND: u64 = 100_000;

/// Whether `path` already has `gid`, `g+rw` (and `x` for a directory) and setgid.
fn has_group(meta: &std::fs::Metadata, gid: u32) -> bool {
    let mode = meta.mode();
    let wanted = if meta.is_dir() { 0o2070 } else { 0o060 };
    meta.gid() == gid && mode & wanted == wanted
}

/// Whether the root at `path` shows group `gid`, `g+rwx` and setgid.
pub fn root_has(path: &Path, gid: u32) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| has_group(&m, gid))
}

fn apply_one(path: &Path, meta: &std::fs::Metadata, gid: u32) -> std::io::Result<()> {
    if meta.file_type().is_symlink() {
        // A link's own mode means nothing and its target may be outside the volume.
        return Ok(());
    }
    if meta.gid() != gid {
        std::os::unix::fs::lchown(path, None, Some(gid))?;
    }
    let mode = meta.mode() & 0o7777;
    // g+rwX: execute for the group where the owner has it or it is a directory.
    let mut new = mode | 0o060;
    if meta.is_dir() || mode & 0o100 != 0 {
        new |= 0o010;
    }
    if meta.is_dir() {
        new |= 0o2000;
    }
    if new != mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(new))?;
    }
    Ok(())
}

/// Gives `root` (and, `recursive`, what is below it, within [`RECURSIVE_BOUND`]) group
/// `gid`, `g+rwX` and setgid on directories. `on-root-mismatch` leaves a root that has
/// them as it is, and never looks below it.
pub fn apply(root: &Path, gid: u32, recursive: bool) -> std::io::Result<Changed> {
    apply_within(root, gid, recursive, RECURSIVE_BOUND)
}

/// [`apply`] with the bound given.
fn apply_within(root: &Path, gid: u32, recursive: bool, bound: u64) -> std::io::Result<Changed> {
    let meta = std::fs::symlink_metadata(root)?;
    if !recursive {
        if has_group(&meta, gid) {
            return Ok(Changed {
                entries: 0,
                bounded: false,
            });
        }
        apply_one(root, &meta, gid)?;
        return Ok(Changed {
            entries: 1,
            bounded: false,
        });
    }
    apply_one(root, &meta, gid)?;
    let mut entries = 1;
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)? {
            if entries >= bound {
                return Ok(Changed {
                    entries,
                    bounded: true,
                });
            }
            let entry = entry?;
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path)?;
            apply_one(&path, &meta, gid)?;
            entries += 1;
            // Another file system mounted below the volume is not the volume's.
            if meta.is_dir() && meta.dev() == std::fs::symlink_metadata(root)?.dev() {
                dirs.push(path);
            }
        }
    }
    Ok(Changed {
        entries,
        bounded: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_gets_the_group_rwx_and_setgid_and_recursive_changes_what_is_below() {
        let dir = std::env::temp_dir().join(format!("csivol-ownership-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/f"), b"x").unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(dir.join("sub/f"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        let changed = apply(&dir, 4321, false).unwrap();
        assert_eq!(changed.entries, 1);
        let m = std::fs::metadata(&dir).unwrap();
        assert_eq!((m.gid(), m.mode() & 0o7777), (4321, 0o2775));
        assert_ne!(std::fs::metadata(dir.join("sub/f")).unwrap().gid(), 4321);
        // Once the root has them, on-root-mismatch changes nothing.
        assert_eq!(apply(&dir, 4321, false).unwrap().entries, 0);
        let changed = apply(&dir, 4321, true).unwrap();
        assert_eq!(
            changed,
            Changed {
                entries: 3,
                bounded: false
            }
        );
        let f = std::fs::metadata(dir.join("sub/f")).unwrap();
        assert_eq!((f.gid(), f.mode() & 0o7777), (4321, 0o664));
        // Past its bound a recursive change stops, and says so.
        assert_eq!(
            apply_within(&dir, 4322, true, 2).unwrap(),
            Changed {
                entries: 2,
                bounded: true
            }
        );
        assert_eq!(
            std::fs::metadata(&dir).unwrap().gid(),
            4322,
            "the root first"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
