//! Namespaces: teams sharing one cluster. Volumes and their claims belong to one namespace,
//! and a volume's name is unique within its namespace.
//!
//! Inside csivol a volume is keyed by one string, its *key*: the bare name for a volume of
//! `default` (every volume made before namespaces, unchanged), `NAMESPACE~NAME` for any
//! other namespace. The separator is a character no name may hold ([`crate::validate_name`]),
//! so a key never reads two ways, and one that is safe in a path component (as kubelet's
//! `kubernetes.io~csi`): the node agent makes its staging and target directories from the
//! key. Not `:`, which tags csivol's own keys (`pool:NAME`, `node:NAME`). The API speaks of the namespace
//! and the name apart (`?namespace=NS`, and `namespace` beside `name` in its answers); a
//! message names another namespace's volume by its key.

use serde::{Deserialize, Serialize};

use crate::validate_name;

/// The namespace of everything made before namespaces, and of every request that names none.
pub const DEFAULT_NAMESPACE: &str = "default";

/// What `?namespace=` takes to mean every namespace, in a listing.
pub const ALL_NAMESPACES: &str = "*";

/// Between a namespace and a name in a volume's key.
pub const KEY_SEPARATOR: char = '~';

/// The longest namespace name: a key (namespace, separator, name of up to 128 bytes) then
/// stays within the 255 bytes of a path component.
pub const NAMESPACE_NAME_BYTES: usize = 63;

/// A namespace's name: a name ([`validate_name`]) of at most [`NAMESPACE_NAME_BYTES`].
pub fn validate_namespace(name: &str) -> Result<(), String> {
    if name.len() <= NAMESPACE_NAME_BYTES && validate_name("namespace", name).is_ok() {
        return Ok(());
    }
    Err(format!(
        "invalid namespace name `{}`: use 1 to {NAMESPACE_NAME_BYTES} letters, digits, `.`, `_` \
         or `-`, starting with a letter or digit",
        name.escape_debug()
    ))
}

/// The key of volume `name` in namespace `namespace`.
pub fn volume_key(namespace: &str, name: &str) -> String {
    if namespace == DEFAULT_NAMESPACE {
        name.to_owned()
    } else {
        format!("{namespace}{KEY_SEPARATOR}{name}")
    }
}

/// A key's namespace and name.
pub fn split_key(key: &str) -> (&str, &str) {
    match key.split_once(KEY_SEPARATOR) {
        Some((namespace, name)) => (namespace, name),
        None => (DEFAULT_NAMESPACE, key),
    }
}

/// A key's namespace.
pub fn namespace_of(key: &str) -> &str {
    split_key(key).0
}

/// How a command line names the volume (or snapshot) keyed `key`: its name, and `-n NS`
/// outside `default` (`csivol release db -n team-a --alloc a1`), for hints that say what to
/// run.
pub fn cli_name(key: &str) -> String {
    match split_key(key) {
        (DEFAULT_NAMESPACE, name) => name.to_owned(),
        (namespace, name) => format!("{name} -n {namespace}"),
    }
}

/// A key: a name, or a namespace and a name (of `kind`: volume, snapshot) apart by the
/// separator; either way safe as a path component.
pub fn validate_key(kind: &str, key: &str) -> Result<(), String> {
    match key.split_once(KEY_SEPARATOR) {
        None => validate_name(kind, key),
        Some((namespace, name)) => {
            if namespace == DEFAULT_NAMESPACE {
                return Err(format!(
                    "invalid {kind} name `{}`: the default namespace's {kind}s are named \
                     without it",
                    key.escape_debug()
                ));
            }
            validate_namespace(namespace)?;
            validate_name(kind, name)
        }
    }
}

/// A namespace, with what lives in it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Namespace {
    pub name: String,
    /// When it was made (RFC 3339); absent for `default`, which always was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// How many volumes, claims and snapshots it holds.
    #[serde(default)]
    pub volumes: u64,
    #[serde(default)]
    pub claims: u64,
    #[serde(default)]
    pub snapshots: u64,
    /// What its volumes hold (the sum of their capacities) and how many of them are
    /// per-job volumes: what its quota counts beside the volumes and claims.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub capacity_bytes: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub fresh_volumes: u64,
    /// Its quota; absent: none (nothing bounds it but the cluster's own limits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<Quota>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A namespace's quota: at most this many volumes, bytes of capacity (made and grown
/// volumes both count), claims (held or waiting) and per-job volumes. A bound left out is
/// no bound. Checked in the write that would pass it, so two requests at once never both
/// pass the last unit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quota {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claims: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fresh_volumes: Option<u64>,
}

impl Quota {
    /// Whether it bounds nothing.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

/// `PUT /v1/namespaces/{name}`: nothing to say yet but its name, which the path gives.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceSpec {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_read_one_way() {
        assert_eq!(volume_key("default", "db"), "db");
        assert_eq!(volume_key("team-a", "db"), "team-a~db");
        assert_eq!(split_key("db"), ("default", "db"));
        assert_eq!(split_key("team-a~db"), ("team-a", "db"));
        assert_eq!(cli_name("db"), "db");
        assert_eq!(cli_name("team-a~db"), "db -n team-a");
        assert!(validate_key("volume", "team-a~db").is_ok());
        assert!(validate_key("volume", "db").is_ok());
        for bad in [
            "default~db",
            "team-a~",
            "~db",
            "a~b~c",
            "team/a~db",
            "-x~db",
            "a:db",
        ] {
            assert!(validate_key("volume", bad).is_err(), "{bad}");
        }
        let long = "n".repeat(NAMESPACE_NAME_BYTES + 1);
        let err = validate_namespace(&long).unwrap_err();
        assert!(err.contains("use 1 to 63 letters"), "{err}");
        // The longest key is one path component.
        let key = volume_key(&"n".repeat(NAMESPACE_NAME_BYTES), &"v".repeat(128));
        assert!(key.len() <= 255 && validate_key("volume", &key).is_ok());
    }
}
