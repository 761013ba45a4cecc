//! The node's own record of what it staged and published, one file per volume.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use csivol_api::domain::VolumeCapability;
use serde::{Deserialize, Serialize};

use super::{file_safe, read_json, write_json};

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

/// The node's own record of its stagings and publications: in memory as one value, on disk
/// one file per volume (`<state-dir>/node/<volume>.json`, [`VolumeState`]), so that a call
/// rewrites what it changed, not everything the node holds. A `node.json` of an older
/// plugin (the whole state in one file) is split into those files when the plugin starts.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct NodeState {
    pub stagings: BTreeMap<String, Staging>,
    pub publications: BTreeMap<PathBuf, Publication>,
    /// The loop device this node attached to each block volume it holds. Trusted only
    /// while the kernel says the device still backs the volume's image.
    #[serde(default)]
    pub devices: BTreeMap<String, PathBuf>,
}

/// One volume's part of a [`NodeState`], as stored in its own file.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct VolumeState {
    pub volume_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staging: Option<Staging>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub publications: BTreeMap<PathBuf, Publication>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<PathBuf>,
}

impl VolumeState {
    fn is_empty(&self) -> bool {
        self.staging.is_none() && self.publications.is_empty() && self.device.is_none()
    }
}

/// The directory of the per-volume files below a plugin's state dir.
pub fn node_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("node")
}

impl NodeState {
    /// Reads the node's state from `state_dir`; a whole-state `node.json` left by an older
    /// plugin is written out as per-volume files first, then removed.
    pub fn load(state_dir: &Path, fsync: bool) -> io::Result<Self> {
        let legacy = state_dir.join("node.json");
        if let Some(old) = read_json::<NodeState>(&legacy)? {
            for id in old.volume_ids() {
                old.save_volume(state_dir, &id, fsync)?;
            }
            fs::remove_file(&legacy)?;
            if fsync {
                File::open(state_dir)?.sync_all()?;
            }
        }
        let mut state = NodeState::default();
        let dir = node_dir(state_dir);
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(state),
            Err(e) => return Err(e),
        };
        for entry in entries {
            let path = entry?.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let Some(v) = read_json::<VolumeState>(&path)? else {
                continue;
            };
            let id = v.volume_id;
            if let Some(s) = v.staging {
                state.stagings.insert(id.clone(), s);
            }
            state.publications.extend(v.publications);
            if let Some(d) = v.device {
                state.devices.insert(id, d);
            }
        }
        Ok(state)
    }

    /// Every volume the state names.
    fn volume_ids(&self) -> std::collections::BTreeSet<String> {
        let mut ids: std::collections::BTreeSet<String> = self.stagings.keys().cloned().collect();
        ids.extend(self.publications.values().map(|p| p.volume_id.clone()));
        ids.extend(self.devices.keys().cloned());
        ids
    }

    /// One volume's part of the state.
    pub fn volume_part(&self, volume_id: &str) -> VolumeState {
        VolumeState {
            volume_id: volume_id.to_owned(),
            staging: self.stagings.get(volume_id).cloned(),
            publications: self
                .publications
                .iter()
                .filter(|(_, p)| p.volume_id == volume_id)
                .map(|(t, p)| (t.clone(), p.clone()))
                .collect(),
            device: self.devices.get(volume_id).cloned(),
        }
    }

    /// Writes one volume's part atomically (removes its file once it holds nothing).
    pub fn save_volume(&self, state_dir: &Path, volume_id: &str, fsync: bool) -> io::Result<()> {
        let dir = node_dir(state_dir);
        let path = dir.join(format!("{}.json", file_safe(volume_id)));
        let part = self.volume_part(volume_id);
        if !part.is_empty() {
            return write_json(&path, &part, fsync);
        }
        match fs::remove_file(&path) {
            Ok(()) => {
                if fsync {
                    File::open(&dir)?.sync_all()?;
                }
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub fn published_targets(&self, volume_id: &str) -> Vec<&Path> {
        self.publications
            .iter()
            .filter(|(_, p)| p.volume_id == volume_id)
            .map(|(t, _)| t.as_path())
            .collect()
    }

    /// Whether this node holds nothing of the volume any more.
    pub fn holds_nothing(&self, volume_id: &str) -> bool {
        !self.stagings.contains_key(volume_id) && self.published_targets(volume_id).is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_state_is_one_file_per_volume_and_a_node_json_is_split() {
        let dir = std::env::temp_dir().join(format!("hostpath-node-state-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let cap = VolumeCapability {
            access_type: csivol_api::domain::AccessType::FileSystem {
                fs_type: String::new(),
                mount_flags: Vec::new(),
            },
            access_mode: csivol_api::domain::AccessMode::SingleNodeWriter,
        };
        let mut old = NodeState::default();
        for id in ["a", "b"] {
            old.stagings.insert(
                id.into(),
                Staging {
                    path: format!("/stage/{id}").into(),
                    capability: cap.clone(),
                },
            );
        }
        old.publications.insert(
            "/target/a".into(),
            Publication {
                volume_id: "a".into(),
                readonly: false,
                capability: cap,
                staging_path: Some("/stage/a".into()),
            },
        );
        write_json(&dir.join("node.json"), &old, false).unwrap();

        let mut state = NodeState::load(&dir, false).unwrap();
        assert_eq!(state, old);
        assert!(
            !dir.join("node.json").exists(),
            "split into per-volume files"
        );
        assert!(node_dir(&dir).join("a.json").exists() && node_dir(&dir).join("b.json").exists());

        state.stagings.remove("b");
        state.save_volume(&dir, "b", false).unwrap();
        assert!(
            !node_dir(&dir).join("b.json").exists(),
            "a volume holding nothing has no file"
        );
        assert_eq!(NodeState::load(&dir, false).unwrap(), state);
        fs::remove_dir_all(&dir).unwrap();
    }
}
