//! Modes of the data dirs and the files in them. The server's data dir holds secrets (the
//! secrets key, the operator token, encrypted volume secrets) and is its owner's only; the
//! agent's data dir lets other users pass through to their targets, nothing more. Modes
//! are set when a path is created and tightened at every start, for dirs made by hand or
//! by an older csivol.

use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// A dir others may pass through to what lies below it, but not list: the agent's data dir
/// and its targets, and dev mode's dir, which holds the nodes' targets.
pub const PASSABLE: u32 = 0o711;

/// Creates `dir` (and its parents) with `mode`, or sets an existing one to `mode`; says
/// whether an existing dir had to change, and from what.
pub fn dir(dir: &Path, mode: u32) -> io::Result<Option<u32>> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)?;
    let old = std::fs::metadata(dir)?.permissions().mode() & 0o7777;
    if old == mode {
        return Ok(None);
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))?;
    Ok(Some(old))
}

/// [`dir`], with a log line when an existing dir was more open.
pub fn dir_logged(path: &Path, mode: u32, what: &str) -> io::Result<()> {
    if let Some(old) = dir(path, mode)? {
        tracing::info!(
            path = %path.display(),
            from = format!("{old:04o}"),
            to = format!("{mode:04o}"),
            "tightened the {what}'s mode"
        );
    }
    Ok(())
}

/// Creates an empty file readable by its owner only, unless it exists (SQLite then
/// creates its `-wal` and `-shm` files with the database file's mode).
pub fn create_file(path: &Path) -> io::Result<()> {
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// How far [`replace_private`] goes before it returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// The file is replaced whole; a crash may leave the old content (a file rewritten at
    /// every start, such as the address a server listens on).
    Replaced,
    /// The content and the rename are on disk when it returns (a file whose loss would
    /// change who the data dir belongs to).
    Synced,
}

/// Replaces `path` with `bytes` whole: written to a file beside it, readable by its owner
/// only from the start, then renamed into place, so that a reader finds the old content or
/// the new, never a part of it.
pub fn replace_private(path: &Path, bytes: &[u8], durability: Durability) -> io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    if durability == Durability::Synced {
        f.sync_all()?;
    }
    drop(f);
    std::fs::rename(&tmp, path)?;
    if durability == Durability::Synced {
        std::fs::File::open(path.parent().unwrap_or(Path::new(".")))?.sync_all()?;
    }
    Ok(())
}

/// Makes every regular file directly in `dir` readable by its owner only.
pub fn files_in(dir: &Path) -> io::Result<()> {
    // A file may go between the listing and its turn (SQLite removes its `-wal` and `-shm`
    // files when the last connection closes): gone is fine, it holds nothing any more.
    let gone = |e: &io::Error| e.kind() == io::ErrorKind::NotFound;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = match entry.metadata() {
            Ok(m) => m,
            Err(e) if gone(&e) => continue,
            Err(e) => return Err(e),
        };
        if !meta.is_file() {
            continue;
        }
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            match std::fs::set_permissions(
                entry.path(),
                std::fs::Permissions::from_mode(mode & 0o700),
            ) {
                Ok(()) => {}
                Err(e) if gone(&e) => continue,
                Err(e) => return Err(e),
            }
            tracing::info!(
                path = %entry.path().display(),
                from = format!("{mode:04o}"),
                to = format!("{:04o}", mode & 0o700),
                "tightened a file's mode"
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirs_and_files_are_tightened() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("data");
        assert_eq!(dir(&d, 0o700).unwrap(), None, "a new dir gets the mode");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(dir(&d, 0o700).unwrap(), Some(0o755));
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&d), 0o700);
        let db = d.join("state.db");
        create_file(&db).unwrap();
        assert_eq!(mode(&db), 0o600);
        let wal = d.join("state.db-wal");
        std::fs::write(&wal, b"x").unwrap();
        std::fs::set_permissions(&wal, std::fs::Permissions::from_mode(0o644)).unwrap();
        files_in(&d).unwrap();
        assert_eq!(mode(&wal), 0o600);
    }
}
