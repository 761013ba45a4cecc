//! Volume secrets at rest: sealed with XChaCha20-Poly1305 under the key in
//! `<data-dir>/secrets.key` (or `--secrets-key-file`) before they are written to
//! `state.db`, bound to their volume's name, and opened only in memory. Backups carry them
//! sealed: a backup restores its secrets only together with the key.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use super::store::Txn;
use super::store::sqlite::maintenance;
use anyhow::{Context, bail};
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use sha2::{Digest, Sha256};

/// The key file's name in the data dir.
pub const KEY_FILE: &str = "secrets.key";
/// What the check value (`secrets_check`) is sealed as, in place of a volume's name.
const CHECK: &str = "csivol secrets key check";
/// What a sealed value starts with: the scheme, then the key's id.
const PREFIX: &str = "xchacha20poly1305:";
const NONCE_LEN: usize = 24;

/// A secrets key and its id (a hash prefix: sealed values say which key they need).
#[derive(Clone)]
pub struct Key {
    id: String,
    cipher: XChaCha20Poly1305,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({})", self.id)
    }
}

impl Key {
    fn from_bytes(bytes: &[u8; 32]) -> Self {
        Self {
            id: hex(&Sha256::digest(bytes)[..6]),
            cipher: XChaCha20Poly1305::new(bytes.into()),
        }
    }

    fn generate() -> ([u8; 32], Self) {
        let bytes: [u8; 32] = XChaCha20Poly1305::generate_key(&mut OsRng).into();
        let key = Self::from_bytes(&bytes);
        (bytes, key)
    }
}

/// The key that seals, and the keys that may open (the sealing one, and during an
/// interrupted rotation the other).
#[derive(Clone, Debug)]
pub struct Keys {
    seal: Key,
    open: Vec<Key>,
    pub path: PathBuf,
    /// The key file was made by this start (there was none).
    created: bool,
}

static KEYS: RwLock<Option<Arc<Keys>>> = RwLock::new(None);

/// Makes `keys` the process's secrets keys (one server per process).
pub fn install(keys: Keys) {
    *KEYS.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(keys));
}

fn installed() -> Result<Arc<Keys>, String> {
    KEYS.read()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .ok_or_else(|| "no secrets key is loaded".to_owned())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn seal_with(key: &Key, volume: &str, plain: &str) -> Result<String, String> {
    let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
    let sealed = key
        .cipher
        .encrypt(
            &nonce,
            Payload {
                msg: plain.as_bytes(),
                aad: volume.as_bytes(),
            },
        )
        .map_err(|_| format!("failed to seal the secrets of volume `{volume}`"))?;
    Ok(format!(
        "{PREFIX}{}:{}{}",
        key.id,
        hex(&nonce),
        hex(&sealed)
    ))
}

fn open_with(keys: &[Key], volume: &str, stored: &str) -> Result<String, String> {
    let Some(rest) = stored.strip_prefix(PREFIX) else {
        // Written before secrets were sealed; sealed at the next start.
        return Ok(stored.to_owned());
    };
    let (id, body) = rest
        .split_once(':')
        .ok_or_else(|| format!("the sealed secrets of volume `{volume}` are malformed"))?;
    let key = keys.iter().find(|k| k.id == id).ok_or_else(|| {
        format!("the secrets of volume `{volume}` are sealed with key {id}, which is not loaded")
    })?;
    let bytes = unhex(body)
        .filter(|b| b.len() > NONCE_LEN)
        .ok_or_else(|| format!("the sealed secrets of volume `{volume}` are malformed"))?;
    let (nonce, sealed) = bytes.split_at(NONCE_LEN);
    let plain = key
        .cipher
        .decrypt(
            XNonce::from_slice(nonce),
            Payload {
                msg: sealed,
                aad: volume.as_bytes(),
            },
        )
        .map_err(|_| {
            format!("the secrets of volume `{volume}` fail authentication under key {id}")
        })?;
    String::from_utf8(plain).map_err(|e| e.to_string())
}

/// The stored form of a volume's secrets: sealed, or `{}` when there are none.
pub fn seal(volume: &str, secrets: &BTreeMap<String, String>) -> Result<String, String> {
    if secrets.is_empty() {
        return Ok("{}".into());
    }
    let plain = serde_json::to_string(secrets).map_err(|e| e.to_string())?;
    seal_with(&installed()?.seal, volume, &plain)
}

/// A volume's secrets from their stored form.
pub fn open(volume: &str, stored: &str) -> Result<BTreeMap<String, String>, String> {
    if stored == "{}" {
        return Ok(BTreeMap::new());
    }
    let plain = if stored.starts_with(PREFIX) {
        open_with(&installed()?.open, volume, stored)?
    } else {
        stored.to_owned()
    };
    serde_json::from_str(&plain).map_err(|e| e.to_string())
}

fn read_key(path: &Path) -> anyhow::Result<Key> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("failed to read the secrets key {}", path.display()))?;
    let bytes: [u8; 32] = unhex(text.trim())
        .and_then(|b| b.try_into().ok())
        .with_context(|| format!("the secrets key {} is not 64 hex digits", path.display()))?;
    Ok(Key::from_bytes(&bytes))
}

fn write_key(path: &Path, bytes: &[u8; 32]) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("failed to create the secrets key {}", path.display()))?;
    writeln!(f, "{}", hex(bytes))?;
    f.sync_all()?;
    Ok(())
}

fn pending(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".new");
    PathBuf::from(p)
}

impl Keys {
    /// Loads the key at `path`, creating it (0600) when `create` and it is missing; a key
    /// left at `<path>.new` by an interrupted rotation may open values too.
    pub fn load(path: &Path, create: bool) -> anyhow::Result<Self> {
        let created = !path.exists() && create;
        let seal = if path.exists() {
            read_key(path)?
        } else if create {
            let (bytes, key) = Key::generate();
            write_key(path, &bytes)?;
            tracing::info!(path = %path.display(), key = key.id, "created the secrets key");
            key
        } else {
            bail!(
                "the secrets key {} is missing\nhint: point --secrets-key-file at the key that goes with this data dir",
                path.display()
            );
        };
        let mut open = vec![seal.clone()];
        let next = pending(path);
        if next.exists() {
            tracing::warn!(
                path = %next.display(),
                "a secrets key rotation was interrupted; run `csivol-server rotate-secrets-key` again to finish it"
            );
            open.push(read_key(&next)?);
        }
        Ok(Self {
            seal,
            open,
            path: path.to_owned(),
            created,
        })
    }

    /// Checks that every stored secret opens, and seals those written before secrets were
    /// sealed (inside the caller's transaction); returns how many it sealed. `shared`: the
    /// state is served by several servers (etcd), which must all hold the cluster's key.
    pub fn check_and_seal(&self, ctx: &mut impl Txn, shared: bool) -> Result<usize, String> {
        let rows = ctx.stored_secrets().map_err(|e| e.to_string())?;
        let mut sealed = 0;
        let rows_empty = rows.is_empty();
        for (name, stored) in rows {
            let plain = open_with(&self.open, &name, &stored).map_err(|e| {
                format!(
                    "{e}\nhint: start with the secrets key that goes with this database ({}, or --secrets-key-file)",
                    self.path.display()
                )
            })?;
            if !stored.starts_with(PREFIX) {
                let v = seal_with(&self.seal, &name, &plain)?;
                ctx.put_stored_secrets(&name, &v)
                    .map_err(|e| e.to_string())?;
                sealed += 1;
            }
        }
        // A key made by this start for a single server's state that holds no sealed secret
        // (a backup restored without its key file) loses nothing: it becomes the key.
        let replaceable = self.created && !shared && rows_empty;
        self.check_key(ctx, replaceable)?;
        Ok(sealed)
    }

    /// Opens the cluster's check value with this key, or records one sealed with it: a
    /// server whose key is not the cluster's is refused even while no volume has secrets.
    fn check_key(&self, ctx: &mut impl Txn, replaceable: bool) -> Result<(), String> {
        let stored = ctx.secrets_check().map_err(|e| e.to_string())?;
        if replaceable
            && let Some(s) = &stored
            && open_with(&self.open, CHECK, s).is_err()
        {
            tracing::warn!(
                path = %self.path.display(),
                "the secrets key was made afresh for state whose key is not here; no volume \
                 has sealed secrets, so nothing is lost: this key seals them from now on"
            );
            ctx.put_secrets_check(&seal_with(&self.seal, CHECK, "{}")?)
                .map_err(|e| e.to_string())?;
            return Ok(());
        }
        match stored {
            Some(s) => open_with(&self.open, CHECK, &s).map(drop).map_err(|e| {
                format!(
                    "the secrets key {} is not the one this cluster's secrets are sealed with ({e})\n\
                     hint: give every server of the cluster the same key file (copy it from a \
                     server that runs, or point --secrets-key-file at it)",
                    self.path.display()
                )
            }),
            None => {
                let v = seal_with(&self.seal, CHECK, "{}")?;
                ctx.put_secrets_check(&v).map_err(|e| e.to_string())?;
                Ok(())
            }
        }
    }
}

/// `csivol-server rotate-secrets-key`, with the server stopped: a new key seals every
/// secret again, in one transaction, and then replaces the old key file. The new key is
/// written first (`<key>.new`), so that an interruption at any point leaves every secret
/// openable, and running the command again finishes the rotation.
pub fn rotate(db_path: &Path, key_path: &Path) -> anyhow::Result<usize> {
    let old = Keys::load(key_path, false)?;
    let next = pending(key_path);
    let new = if next.exists() {
        read_key(&next)?
    } else {
        let (bytes, key) = Key::generate();
        write_key(&next, &bytes)?;
        key
    };
    let check = seal_with(&new, CHECK, "{}").map_err(anyhow::Error::msg)?;
    let volumes = maintenance::reseal_secrets(
        db_path,
        |name, stored| {
            let plain = open_with(&old.open, name, stored).map_err(anyhow::Error::msg)?;
            seal_with(&new, name, &plain).map_err(anyhow::Error::msg)
        },
        &check,
    )?;
    std::fs::rename(&next, key_path).with_context(|| {
        format!(
            "failed to move {} over {}",
            next.display(),
            key_path.display()
        )
    })?;
    if let Some(dir) = key_path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    tracing::info!(
        old = old.seal.id,
        new = new.id,
        volumes,
        "rotated the secrets key"
    );
    Ok(volumes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_values_open_only_with_their_key_and_volume() {
        let (_, k1) = Key::generate();
        let (_, k2) = Key::generate();
        let s = seal_with(&k1, "v1", r#"{"password":"hunter2"}"#).unwrap();
        assert!(!s.contains("hunter2"));
        assert!(s.starts_with(&format!("{PREFIX}{}:", k1.id)));
        assert_eq!(
            open_with(std::slice::from_ref(&k1), "v1", &s).unwrap(),
            r#"{"password":"hunter2"}"#
        );
        let moved = open_with(std::slice::from_ref(&k1), "v2", &s).unwrap_err();
        assert!(moved.contains("fail authentication"), "{moved}");
        let other = open_with(std::slice::from_ref(&k2), "v1", &s).unwrap_err();
        assert!(other.contains("not loaded"), "{other}");
        let mut tampered = s.clone();
        tampered.pop();
        tampered.push(if s.ends_with('0') { '1' } else { '0' });
        assert!(open_with(std::slice::from_ref(&k1), "v1", &tampered).is_err());
        assert_eq!(
            open_with(&[], "v1", r#"{"a":"b"}"#).unwrap(),
            r#"{"a":"b"}"#,
            "plain values from an older csivol still open"
        );
    }
}
