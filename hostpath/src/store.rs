//! The plugin's persistent state: the shared backend that plays the storage system, and the
//! node's own record of what it staged and published. Every write is atomic (temporary
//! file, fsync, rename), so a plugin killed at any point finds a consistent state.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use csivol_api::domain::{PublishContext, VolumeCapability};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Writes `value` as JSON to `path` atomically.
pub fn write_json<T: Serialize>(path: &Path, value: &T, fsync: bool) -> io::Result<()> {
    let dir = path.parent().expect("state files live in a directory");
    fs::create_dir_all(dir)?;
    let tmp = path.with_extension("tmp");
    let mut file = File::create(&tmp)?;
    file.write_all(&serde_json::to_vec_pretty(value)?)?;
    if fsync {
        file.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    if fsync {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Reads JSON from `path`; `None` when the file does not exist.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> io::Result<Option<T>> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn remove_if_exists(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// A volume as the backend knows it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct VolumeRecord {
    pub id: String,
    pub name: String,
    pub capacity_bytes: i64,
    #[serde(default)]
    pub parameters: BTreeMap<String, String>,
    #[serde(default)]
    pub context: BTreeMap<String, String>,
}

/// A volume controller-published to a node.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct AttachmentRecord {
    pub node_id: String,
    pub readonly: bool,
    pub publish_context: PublishContext,
}

/// A node plugin's announcement of itself to the backend.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct NodeRecord {
    pub max_volumes_per_node: u32,
}

/// The storage system the plugin drives: a directory that several plugin processes (one
/// per simulated node) may share, like nodes sharing a storage array.
///
/// Layout: `volumes/<id>.json`, `names/<name>` (the id of the volume with that name),
/// `data/<id>/` (the volume's contents), `attachments/<id>/<node>.json`, `by-node/<node>/<id>`
/// (an index, so counting a node's volumes does not read every volume), `nodes/<node>.json`,
/// `next-id`, `lock`. Node ids and names become file names through [`file_safe`].
#[derive(Clone, Debug)]
pub struct Backend {
    root: PathBuf,
    fsync: bool,
}

impl Backend {
    pub fn open(root: PathBuf, fsync: bool) -> io::Result<Self> {
        for dir in [
            "volumes",
            "names",
            "data",
            "attachments",
            "by-node",
            "nodes",
        ] {
            fs::create_dir_all(root.join(dir))?;
        }
        Ok(Self { root, fsync })
    }

    /// Takes the backend's cross-process lock; controller operations hold it while they
    /// read and change volumes and attachments, so two controllers cannot race.
    pub fn lock(&self) -> io::Result<BackendLock> {
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.root.join("lock"))?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)?;
        Ok(BackendLock { _file: file })
    }

    pub fn data_dir(&self, id: &str) -> PathBuf {
        self.root.join("data").join(id)
    }

    pub fn volume(&self, id: &str) -> io::Result<Option<VolumeRecord>> {
        if !valid_id(id) {
            return Ok(None);
        }
        read_json(&self.root.join("volumes").join(format!("{id}.json")))
    }

    pub fn volumes(&self) -> io::Result<Vec<VolumeRecord>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(self.root.join("volumes"))? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "json")
                && let Some(v) = read_json::<VolumeRecord>(&path)?
            {
                out.push(v);
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    pub fn volume_by_name(&self, name: &str) -> io::Result<Option<VolumeRecord>> {
        let Some(id) = read_json::<String>(&self.name_path(name))? else {
            return Ok(None);
        };
        Ok(self.volume(&id)?.filter(|v| v.name == name))
    }

    fn name_path(&self, name: &str) -> PathBuf {
        self.root.join("names").join(file_safe(name))
    }

    /// Creates the volume's record and data directory under a fresh id. Needs the lock.
    pub fn create_volume(
        &self,
        _lock: &BackendLock,
        mut record: VolumeRecord,
    ) -> io::Result<VolumeRecord> {
        let counter = self.root.join("next-id");
        let next: u64 = read_json(&counter)?.unwrap_or(1);
        write_json(&counter, &(next + 1), self.fsync)?;
        record.id = format!("hostpath-{next:06}");
        fs::create_dir_all(self.data_dir(&record.id))?;
        // The record first, the name index last: a crash in between leaves an unnamed
        // record, never a name pointing at nothing.
        write_json(
            &self
                .root
                .join("volumes")
                .join(format!("{}.json", record.id)),
            &record,
            self.fsync,
        )?;
        write_json(&self.name_path(&record.name), &record.id, self.fsync)?;
        Ok(record)
    }

    /// Removes the volume's record and its data. Needs the lock.
    pub fn delete_volume(&self, _lock: &BackendLock, id: &str) -> io::Result<()> {
        if let Some(v) = self.volume(id)? {
            remove_if_exists(&self.name_path(&v.name))?;
        }
        remove_if_exists(&self.root.join("volumes").join(format!("{id}.json")))?;
        match fs::remove_dir_all(self.data_dir(id)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            other => other?,
        }
        let _ = fs::remove_dir(self.root.join("attachments").join(id));
        Ok(())
    }

    /// The nodes a volume is attached to.
    pub fn attachments(&self, id: &str) -> io::Result<BTreeMap<String, AttachmentRecord>> {
        let mut out = BTreeMap::new();
        let dir = self.root.join("attachments").join(id);
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e),
        };
        for entry in entries {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "json")
                && let Some(a) = read_json::<AttachmentRecord>(&path)?
            {
                out.insert(a.node_id.clone(), a);
            }
        }
        Ok(out)
    }

    pub fn attachment(&self, id: &str, node: &str) -> io::Result<Option<AttachmentRecord>> {
        if !valid_id(id) {
            return Ok(None);
        }
        read_json(&self.attachment_path(id, node))
    }

    /// How many volumes are attached to `node`.
    pub fn attached_count(&self, node: &str) -> io::Result<usize> {
        match fs::read_dir(self.by_node(node)) {
            Ok(entries) => Ok(entries.count()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(e),
        }
    }

    fn by_node(&self, node: &str) -> PathBuf {
        self.root.join("by-node").join(file_safe(node))
    }

    pub fn attach(
        &self,
        _lock: &BackendLock,
        id: &str,
        node: &str,
        a: &AttachmentRecord,
    ) -> io::Result<()> {
        // The index first, the record last; detach undoes them in the other order, so the
        // index never misses an attachment (it may briefly count one that is going).
        fs::create_dir_all(self.by_node(node))?;
        File::create(self.by_node(node).join(id))?;
        write_json(&self.attachment_path(id, node), a, self.fsync)
    }

    pub fn detach(&self, _lock: &BackendLock, id: &str, node: &str) -> io::Result<()> {
        remove_if_exists(&self.attachment_path(id, node))?;
        remove_if_exists(&self.by_node(node).join(id))
    }

    fn attachment_path(&self, id: &str, node: &str) -> PathBuf {
        // Node ids come from callers; hex-encode anything outside a safe alphabet so a node
        // id can never name a path outside the attachments directory.
        self.root
            .join("attachments")
            .join(id)
            .join(format!("{}.json", file_safe(node)))
    }

    pub fn node(&self, node: &str) -> io::Result<Option<NodeRecord>> {
        read_json(
            &self
                .root
                .join("nodes")
                .join(format!("{}.json", file_safe(node))),
        )
    }

    pub fn announce_node(&self, node: &str, record: &NodeRecord) -> io::Result<()> {
        write_json(
            &self
                .root
                .join("nodes")
                .join(format!("{}.json", file_safe(node))),
            record,
            self.fsync,
        )
    }
}

/// Held while a controller operation runs; dropping it releases the `flock`.
#[derive(Debug)]
pub struct BackendLock {
    _file: File,
}

/// Whether `id` has the shape of an id this backend hands out.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// A file name for an arbitrary string: itself when it is plain, else `x-` and hex.
pub fn file_safe(s: &str) -> String {
    if valid_id(s) && !s.starts_with("x-") {
        s.to_owned()
    } else {
        let hex: String = s.bytes().map(|b| format!("{b:02x}")).collect();
        format!("x-{hex}")
    }
}

/// What this node staged.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Staging {
    pub path: PathBuf,
    pub capability: VolumeCapability,
}

/// What this node published, keyed by target path in [`NodeState`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Publication {
    pub volume_id: String,
    pub readonly: bool,
    pub capability: VolumeCapability,
    pub staging_path: Option<PathBuf>,
}

/// The node's own record of its stagings and publications, in `<state-dir>/node.json`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct NodeState {
    pub stagings: BTreeMap<String, Staging>,
    pub publications: BTreeMap<PathBuf, Publication>,
}

impl NodeState {
    pub fn published_targets(&self, volume_id: &str) -> Vec<&Path> {
        self.publications
            .iter()
            .filter(|(_, p)| p.volume_id == volume_id)
            .map(|(t, _)| t.as_path())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_safe_names_cannot_escape() {
        assert_eq!(file_safe("node-1"), "node-1");
        assert_eq!(file_safe("../x"), "x-2e2e2f78");
        assert_eq!(file_safe("x-1"), "x-782d31");
        assert_eq!(file_safe(""), "x-");
    }
}
