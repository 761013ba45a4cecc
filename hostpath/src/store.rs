//! The plugin's persistent state: the shared backend that plays the storage system here,
//! and the node's own record of what it staged and published (`node`). Every write is
//! atomic (temporary file, fsync, rename), so a plugin killed at any point finds a
//! consistent state.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use csivol_api::domain::{PublishContext, VolumeCapability};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub mod node;

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

/// A topology segment: topological domains to their values (`zone` → `a`).
pub type Segment = BTreeMap<String, String>;

/// What a volume was created from.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ContentSource {
    Snapshot(String),
    Volume(String),
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
    /// A block volume: its data is one image file, [`IMAGE`] in its data directory.
    #[serde(default)]
    pub block: bool,
    /// Where the volume is accessible from; empty means from everywhere.
    #[serde(default)]
    pub accessible_topology: Vec<Segment>,
    #[serde(default)]
    pub content_source: Option<ContentSource>,
    /// A file-system volume's "file system" size when it lags the capacity: after
    /// ControllerExpandVolume with `node_expansion_required`, until a node grows it with
    /// NodeExpandVolume (as resize2fs would). It belongs to the volume, not to a node, so
    /// a volume expanded offline is still at its old size when it is next staged. `None`:
    /// the file system has the volume's capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs_bytes: Option<i64>,
    /// The mutable parameters the volume has now: set by CreateVolume's
    /// `mutable_parameters` and changed by ControllerModifyVolume.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mutable_parameters: BTreeMap<String, String>,
}

/// A snapshot: a copy of a volume's data at one point in time.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SnapshotRecord {
    pub id: String,
    pub name: String,
    pub source_volume_id: String,
    pub size_bytes: i64,
    pub block: bool,
    /// Seconds and nanoseconds since the Unix epoch.
    pub created_secs: i64,
    pub created_nanos: i32,
    /// The group snapshot it was cut in; empty for a snapshot of its own.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group_snapshot_id: String,
}

/// A group snapshot: snapshots of several volumes cut together, under one lock and with
/// one creation time.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct GroupSnapshotRecord {
    pub id: String,
    pub name: String,
    /// The source volumes, in the order of the request.
    pub source_volume_ids: Vec<String>,
    /// The member snapshots, one per source volume, in the same order.
    pub snapshot_ids: Vec<String>,
    pub created_secs: i64,
    pub created_nanos: i32,
}

/// The file a block volume's data lives in, inside its data directory.
pub const IMAGE: &str = "disk.img";

/// The backend's folders of records (`<id>.json`) and of name indexes (`<name>` → id).
const VOLUMES: &str = "volumes";
const VOLUME_NAMES: &str = "names";
const SNAPSHOTS: &str = "snapshots";
const SNAPSHOT_NAMES: &str = "snapshot-names";
const GROUPS: &str = "group-snapshots";
const GROUP_NAMES: &str = "group-snapshot-names";
/// `limits/<node>`: a node's attach limit as the storage system has it now, overriding
/// the `--max-volumes-per-node` its plugin was started with (fault injection: a limit
/// that changes while the node runs).
const LIMITS: &str = "limits";

/// A volume controller-published to a node.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct AttachmentRecord {
    pub node_id: String,
    pub readonly: bool,
    pub publish_context: PublishContext,
    /// The capability it was published with (absent in records of older versions).
    #[serde(default)]
    pub capability: Option<VolumeCapability>,
}

/// A node plugin's announcement of itself to the backend.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct NodeRecord {
    pub max_volumes_per_node: u32,
    /// The node's topology segment (`--topology`); empty when it has none.
    #[serde(default)]
    pub topology: Segment,
}

/// The storage system the plugin drives: a directory that several plugin processes (one
/// per simulated node) may share, like nodes sharing a storage array.
///
/// Layout: `volumes/<id>.json`, `names/<name>` (the id of the volume with that name),
/// `data/<id>/` (the volume's contents; a block volume's is the image file [`IMAGE`]),
/// `attachments/<id>/<node>.json`, `by-node/<node>/<id>` (an index, so counting a node's
/// volumes does not read every volume), `nodes/<node>.json`, `snapshots/<id>.json`,
/// `snapshot-names/<name>`, `snapshot-data/<id>/` (a copy of the volume's data directory),
/// `group-snapshots/<id>.json`, `group-snapshot-names/<name>`, `limits/<node>` (a node's
/// attach limit changed behind its plugin), `next-id`, `next-snapshot-id`,
/// `next-group-snapshot-id`, `lock`. Node ids and names become file names through
/// [`file_safe`].
#[derive(Clone, Debug)]
pub struct Backend {
    root: PathBuf,
    fsync: bool,
}

impl Backend {
    pub fn open(root: PathBuf, fsync: bool) -> io::Result<Self> {
        for dir in [
            VOLUMES,
            VOLUME_NAMES,
            "data",
            "attachments",
            "by-node",
            "nodes",
            SNAPSHOTS,
            SNAPSHOT_NAMES,
            "snapshot-data",
            GROUPS,
            GROUP_NAMES,
            LIMITS,
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

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn data_dir(&self, id: &str) -> PathBuf {
        self.root.join("data").join(id)
    }

    /// The image file of a block volume.
    pub fn image(&self, id: &str) -> PathBuf {
        self.data_dir(id).join(IMAGE)
    }

    pub fn volume(&self, id: &str) -> io::Result<Option<VolumeRecord>> {
        self.record(VOLUMES, id)
    }

    pub fn volumes(&self) -> io::Result<Vec<VolumeRecord>> {
        self.records(VOLUMES, |v: &VolumeRecord| &v.id)
    }

    pub fn volume_by_name(&self, name: &str) -> io::Result<Option<VolumeRecord>> {
        self.by_name(VOLUME_NAMES, VOLUMES, name, |v: &VolumeRecord| &v.name)
    }

    /// The record of `kind` (a folder of `<id>.json` files) with this id.
    fn record<T: DeserializeOwned>(&self, kind: &str, id: &str) -> io::Result<Option<T>> {
        if !valid_id(id) {
            return Ok(None);
        }
        read_json(&self.root.join(kind).join(format!("{id}.json")))
    }

    /// Every record of `kind`, ordered by id (the order the List calls page through).
    fn records<T: DeserializeOwned>(
        &self,
        kind: &str,
        id_of: impl Fn(&T) -> &str,
    ) -> io::Result<Vec<T>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(self.root.join(kind))? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "json")
                && let Some(r) = read_json::<T>(&path)?
            {
                out.push(r);
            }
        }
        out.sort_by(|a, b| id_of(a).cmp(id_of(b)));
        Ok(out)
    }

    /// The record of `kind` that the name index `names` points to, if it still has that
    /// name.
    fn by_name<T: DeserializeOwned>(
        &self,
        names: &str,
        kind: &str,
        name: &str,
        name_of: impl Fn(&T) -> &str,
    ) -> io::Result<Option<T>> {
        let Some(id) = read_json::<String>(&self.root.join(names).join(file_safe(name)))? else {
            return Ok(None);
        };
        Ok(self.record::<T>(kind, &id)?.filter(|r| name_of(r) == name))
    }

    fn name_path(&self, name: &str) -> PathBuf {
        self.root.join(VOLUME_NAMES).join(file_safe(name))
    }

    /// Creates the volume's record and data under a fresh id: a copy of `source` (a data
    /// directory) when given, else empty; a block volume's image is then sized to its
    /// capacity. Needs the lock.
    pub fn create_volume(
        &self,
        _lock: &BackendLock,
        mut record: VolumeRecord,
        source: Option<&Path>,
    ) -> io::Result<VolumeRecord> {
        let counter = self.root.join("next-id");
        let next: u64 = read_json(&counter)?.unwrap_or(1);
        write_json(&counter, &(next + 1), self.fsync)?;
        record.id = format!("hostpath-{next:06}");
        let data = self.data_dir(&record.id);
        // A crash mid-copy may have left a partial directory under this id; the id is
        // never handed out again, but start clean all the same.
        remove_tree(&data)?;
        match source {
            Some(src) => copy_tree(src, &data)?,
            None => fs::create_dir_all(&data)?,
        }
        if record.block {
            let image = File::options()
                .create(true)
                .truncate(false)
                .write(true)
                .open(data.join(IMAGE))?;
            image.set_len(record.capacity_bytes as u64)?;
            if self.fsync {
                image.sync_all()?;
            }
        }
        // The record first, the name index last: a crash in between leaves an unnamed
        // record, never a name pointing at nothing.
        write_json(
            &self.root.join(VOLUMES).join(format!("{}.json", record.id)),
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
        remove_if_exists(&self.root.join(VOLUMES).join(format!("{id}.json")))?;
        remove_tree(&self.data_dir(id))?;
        let _ = fs::remove_dir(self.root.join("attachments").join(id));
        Ok(())
    }

    /// Records a new capacity; a block volume's image grows to it. Needs the lock.
    pub fn resize_volume(&self, _lock: &BackendLock, record: &VolumeRecord) -> io::Result<()> {
        if record.block {
            let image = File::options().write(true).open(self.image(&record.id))?;
            image.set_len(record.capacity_bytes as u64)?;
            if self.fsync {
                image.sync_all()?;
            }
        }
        write_json(
            &self.root.join(VOLUMES).join(format!("{}.json", record.id)),
            record,
            self.fsync,
        )
    }

    pub fn snapshot(&self, id: &str) -> io::Result<Option<SnapshotRecord>> {
        self.record(SNAPSHOTS, id)
    }

    /// Every snapshot, ordered by id (the order ListSnapshots pages through).
    pub fn snapshots(&self) -> io::Result<Vec<SnapshotRecord>> {
        self.records(SNAPSHOTS, |s: &SnapshotRecord| &s.id)
    }

    pub fn snapshot_by_name(&self, name: &str) -> io::Result<Option<SnapshotRecord>> {
        self.by_name(SNAPSHOT_NAMES, SNAPSHOTS, name, |s: &SnapshotRecord| {
            &s.name
        })
    }

    fn snapshot_name_path(&self, name: &str) -> PathBuf {
        self.root.join(SNAPSHOT_NAMES).join(file_safe(name))
    }

    pub fn snapshot_data(&self, id: &str) -> PathBuf {
        self.root.join("snapshot-data").join(id)
    }

    /// Cuts a snapshot: copies the volume's data under a fresh id, then records it.
    /// Needs the lock.
    pub fn create_snapshot(
        &self,
        _lock: &BackendLock,
        mut record: SnapshotRecord,
    ) -> io::Result<SnapshotRecord> {
        let counter = self.root.join("next-snapshot-id");
        let next: u64 = read_json(&counter)?.unwrap_or(1);
        write_json(&counter, &(next + 1), self.fsync)?;
        record.id = format!("snapshot-{next:06}");
        let data = self.snapshot_data(&record.id);
        remove_tree(&data)?;
        copy_tree(&self.data_dir(&record.source_volume_id), &data)?;
        // The data, then the record, then the name: a snapshot is listed only once it
        // is cut, as the spec asks.
        write_json(
            &self
                .root
                .join(SNAPSHOTS)
                .join(format!("{}.json", record.id)),
            &record,
            self.fsync,
        )?;
        write_json(
            &self.snapshot_name_path(&record.name),
            &record.id,
            self.fsync,
        )?;
        Ok(record)
    }

    /// Removes a snapshot's record and data. Needs the lock.
    pub fn delete_snapshot(&self, _lock: &BackendLock, id: &str) -> io::Result<()> {
        if let Some(s) = self.snapshot(id)? {
            remove_if_exists(&self.snapshot_name_path(&s.name))?;
        }
        remove_if_exists(&self.root.join(SNAPSHOTS).join(format!("{id}.json")))?;
        remove_tree(&self.snapshot_data(id))
    }

    /// Records a volume's new mutable parameters. Needs the lock.
    pub fn update_volume(&self, _lock: &BackendLock, record: &VolumeRecord) -> io::Result<()> {
        write_json(
            &self.root.join(VOLUMES).join(format!("{}.json", record.id)),
            record,
            self.fsync,
        )
    }

    pub fn group_snapshot(&self, id: &str) -> io::Result<Option<GroupSnapshotRecord>> {
        self.record(GROUPS, id)
    }

    pub fn group_snapshot_by_name(&self, name: &str) -> io::Result<Option<GroupSnapshotRecord>> {
        self.by_name(GROUP_NAMES, GROUPS, name, |g: &GroupSnapshotRecord| &g.name)
    }

    /// Cuts a group snapshot: every source volume's data copied under one lock (the
    /// caller's), each member recorded with the group's id and creation time, then the
    /// group, then its name. A crash part-way leaves members without a group, which a
    /// retry of the same name does not see and cuts again; they are never listed as a
    /// group's.
    pub fn create_group_snapshot(
        &self,
        lock: &BackendLock,
        mut group: GroupSnapshotRecord,
        members: Vec<SnapshotRecord>,
    ) -> io::Result<GroupSnapshotRecord> {
        let counter = self.root.join("next-group-snapshot-id");
        let next: u64 = read_json(&counter)?.unwrap_or(1);
        write_json(&counter, &(next + 1), self.fsync)?;
        group.id = format!("group-{next:06}");
        group.snapshot_ids.clear();
        for mut m in members {
            m.group_snapshot_id = group.id.clone();
            m.name = format!("{}/{}", group.id, m.source_volume_id);
            let m = self.create_snapshot(lock, m)?;
            group.snapshot_ids.push(m.id);
        }
        write_json(
            &self.root.join(GROUPS).join(format!("{}.json", group.id)),
            &group,
            self.fsync,
        )?;
        write_json(
            &self.root.join(GROUP_NAMES).join(file_safe(&group.name)),
            &group.id,
            self.fsync,
        )?;
        Ok(group)
    }

    /// Removes a group snapshot with its members. Needs the lock.
    pub fn delete_group_snapshot(&self, lock: &BackendLock, id: &str) -> io::Result<()> {
        let Some(g) = self.group_snapshot(id)? else {
            return Ok(());
        };
        remove_if_exists(&self.root.join(GROUP_NAMES).join(file_safe(&g.name)))?;
        remove_if_exists(&self.root.join(GROUPS).join(format!("{id}.json")))?;
        for s in &g.snapshot_ids {
            self.delete_snapshot(lock, s)?;
        }
        Ok(())
    }

    /// A node's attach limit as the storage system has it now: `limits/<node>` when
    /// present, else `announced` (what its plugin was started with).
    pub fn node_limit(&self, node: &str, announced: u32) -> io::Result<u32> {
        match fs::read_to_string(self.root.join(LIMITS).join(file_safe(node))) {
            Ok(text) => text.trim().parse().map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("limits/{node}: `{}`: {e}", text.trim()),
                )
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(announced),
            Err(e) => Err(e),
        }
    }

    /// Every node that announced itself, with its record.
    pub fn nodes(&self) -> io::Result<Vec<NodeRecord>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(self.root.join("nodes"))? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "json")
                && let Some(n) = read_json::<NodeRecord>(&path)?
            {
                out.push(n);
            }
        }
        Ok(out)
    }

    /// The nodes a volume is attached to.
    pub fn attachments(&self, id: &str) -> io::Result<BTreeMap<String, AttachmentRecord>> {
        let mut out = BTreeMap::new();
        // Ids come from callers: one this backend could not have handed out has nothing
        // (and must not name a path outside the attachments directory).
        if !valid_id(id) {
            return Ok(out);
        }
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

/// Removes a directory tree; succeeds when there is none.
fn remove_tree(path: &Path) -> io::Result<()> {
    match fs::remove_dir_all(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Copies a directory tree (directories, files with their permissions, symlinks).
pub fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let dest = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &dest)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(entry.path())?, &dest)?;
        } else {
            fs::copy(entry.path(), &dest)?;
        }
    }
    Ok(())
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
