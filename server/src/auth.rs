//! Bearer tokens: random secrets handed out once, stored only as SHA-256 hashes, each with a
//! role (`operator`, `reader`, `claimer`, or `node` bound to one node) and a scope: the
//! capabilities it holds (its role's preset and what was added) and the volume-name
//! patterns it is narrowed to.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, RwLock};

use csivol_api::{Capability, Role, TokenInfo, TokenScope};
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::error::{ApiError, ApiResult};
use crate::model::time;
use crate::store::sqlite::db::Db;
use crate::store::{Snapshot, Txn};

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub token_id: String,
    pub role: Role,
    pub node: Option<String>,
    /// The name given at `token create --name`, shown as the actor instead of the id.
    pub name: Option<String>,
    /// Plugins whose controller a node token's node may host.
    pub controllers: Vec<String>,
    /// What it may do and touch.
    pub scope: TokenScope,
}

impl Caller {
    /// How the event log names this caller: `node:NODE` for an agent, else the role and
    /// the token's name (`operator:alice`), or its id when it has none.
    pub fn actor(&self) -> String {
        match (&self.role, &self.node, &self.name) {
            (Role::Node, Some(n), _) => format!("node:{n}"),
            (role, _, Some(name)) => format!("{}:{name}", role.as_str()),
            (role, _, None) => format!("{}:{}", role.as_str(), self.token_id),
        }
    }

    /// A caller of `role`'s preset, over every volume.
    pub fn of_role(token_id: &str, role: Role) -> Self {
        Self {
            token_id: token_id.to_owned(),
            role,
            node: None,
            name: None,
            controllers: Vec::new(),
            scope: TokenScope::preset(role),
        }
    }

    pub fn has(&self, c: Capability) -> bool {
        self.scope.has(c)
    }

    /// Refuses a caller without capability `c`, which `what` (the route) needs, saying
    /// which role or capability would do it.
    pub fn require(&self, c: Capability, what: &str) -> ApiResult<()> {
        if self.has(c) {
            return Ok(());
        }
        if self.role == Role::Node {
            return Err(ApiError::forbidden(format!(
                "a node token can only act for its own node's agent; {what} needs the `{c}` \
                 capability"
            ))
            .with_hint(with_capability(c)));
        }
        Err(ApiError::forbidden(format!(
            "this {} token lacks the `{c}` capability, which {what} needs",
            self.role
        ))
        .with_hint(with_capability(c)))
    }

    /// Refuses a caller narrowed to namespaces or volume patterns that the volume (or
    /// snapshot) keyed `key` lies outside of, naming what it lacks: the namespace the
    /// request named, or the name within it. The refusal names no namespace but the
    /// token's own and the one asked for.
    pub fn require_touches(&self, kind: &str, key: &str) -> ApiResult<()> {
        if self.scope.touches(key) {
            return Ok(());
        }
        let (namespace, name) = csivol_api::split_key(key);
        if !self.scope.covers_namespace(namespace) {
            return Err(self.outside(
                namespace,
                &format!("{kind} `{name}` lies in namespace `{namespace}`"),
            ));
        }
        Err(ApiError::forbidden(format!(
            "this token is narrowed to volumes {}, and {kind} `{name}` is not one of them",
            patterns(&self.scope.volumes)
        ))
        .with_hint("use a token whose `--volumes` patterns match it"))
    }

    /// Refuses a caller narrowed to namespaces that do not hold `namespace`, which the
    /// request names.
    pub fn require_namespace(&self, namespace: &str) -> ApiResult<()> {
        if self.scope.covers_namespace(namespace) {
            return Ok(());
        }
        Err(self.outside(
            namespace,
            &format!("the request names namespace `{namespace}`"),
        ))
    }

    /// The refusal of what lies in `namespace`, outside the caller's namespaces.
    fn outside(&self, namespace: &str, what: &str) -> ApiError {
        ApiError::forbidden(format!(
            "this token is narrowed to namespaces {}, and {what}",
            patterns(&self.scope.namespaces)
        ))
        .with_hint(format!(
            "use a token made with `--namespace {namespace}` (or `--namespace '*'`)"
        ))
    }

    /// Refuses a caller narrowed to namespaces or volume patterns for `what`, which
    /// covers the whole cluster.
    pub fn require_whole_cluster(&self, what: &str) -> ApiResult<()> {
        if !self.scope.narrowed() {
            return Ok(());
        }
        let mut narrowed = Vec::new();
        if !self.scope.namespaces.is_empty() {
            narrowed.push(format!("namespaces {}", patterns(&self.scope.namespaces)));
        }
        if !self.scope.volumes.is_empty() {
            narrowed.push(format!("volumes {}", patterns(&self.scope.volumes)));
        }
        Err(ApiError::forbidden(format!(
            "this token is narrowed to {}, and {what} covers the whole cluster",
            narrowed.join(" and ")
        ))
        .with_hint(
            "use a token not narrowed to namespaces or volume names (made without \
             `--namespace` or `--volumes`)",
        ))
    }

    /// Refuses a caller narrowed to volume patterns for what touches a volume its patterns
    /// cannot be checked against (`why` says which, and why): one the server names, or one
    /// known only once a plugin answers. A token narrowed to namespaces alone passes (the
    /// namespace was checked as for every route).
    pub fn require_no_volume_patterns(&self, why: &str) -> ApiResult<()> {
        if self.scope.volumes.is_empty() {
            return Ok(());
        }
        Err(ApiError::forbidden(format!(
            "this token is narrowed to volumes {}, and {why}",
            patterns(&self.scope.volumes)
        ))
        .with_hint("use a token not narrowed to volume names (made without `--volumes`)"))
    }

    /// Agent endpoints: the node's own token (an operator may act for any node).
    pub fn require_node(&self, node: &str) -> ApiResult<()> {
        match (&self.role, &self.node) {
            (Role::Operator, _) => Ok(()),
            (Role::Node, Some(own)) if own == node => Ok(()),
            (Role::Node, Some(own)) => Err(ApiError::forbidden(format!(
                "this token belongs to node `{own}` and cannot act for node `{node}`"
            ))),
            _ => Err(ApiError::forbidden(
                "agent endpoints need the node's own token",
            )),
        }
    }
}

/// Which role or capability gives `c`.
fn with_capability(c: Capability) -> String {
    format!(
        "use a token that holds it: one of role `{}`, or one made with `csivol token create \
         --role ROLE --capability {c}` by a token that holds it",
        c.smallest_role()
    )
}

fn patterns(ps: &[String]) -> String {
    ps.iter()
        .map(|p| format!("`{p}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn hash(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A known token: who it makes the caller, and until when.
#[derive(Clone, Debug)]
struct Entry {
    caller: Caller,
    expires_at: Option<i64>,
    revoked_at: Option<i64>,
}

/// Known tokens by hash, loaded at start and kept in memory (a lookup per request), and
/// when each was last used (kept in memory, persisted by [`Tokens::persist_last_used`]: a
/// write per request would cost an fsync per request).
#[derive(Debug, Default)]
pub struct Tokens {
    by_hash: RwLock<HashMap<String, Entry>>,
    last_used: Mutex<HashMap<String, i64>>,
}

impl Tokens {
    pub fn load(snap: &(impl Snapshot + ?Sized)) -> ApiResult<Self> {
        let by_hash = snap
            .tokens()?
            .into_iter()
            .map(|t| {
                let entry = Entry {
                    caller: Caller {
                        scope: t.effective_scope(),
                        token_id: t.id,
                        role: t.role,
                        node: t.node,
                        controllers: t.controllers,
                        name: t.name,
                    },
                    expires_at: t.expires_at,
                    revoked_at: t.revoked_at,
                };
                (t.hash, entry)
            })
            .collect();
        Ok(Self {
            by_hash: RwLock::new(by_hash),
            last_used: Mutex::default(),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.by_hash
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// The caller presenting `Authorization: Bearer <token>`, at `now` (ms, the server's
    /// clock: an expired token is refused).
    pub fn authenticate(&self, header: Option<&str>, now: i64) -> ApiResult<Caller> {
        let hint = "pass a token with --token, CSIVOL_TOKEN or CSIVOL_TOKEN_FILE; the server wrote the \
                    first operator token to <data-dir>/operator.token";
        let Some(header) = header else {
            return Err(ApiError::unauthenticated(
                "no token: this endpoint needs `Authorization: Bearer <token>`",
            )
            .with_hint(hint));
        };
        let token = header.strip_prefix("Bearer ").map(str::trim).unwrap_or("");
        if token.is_empty() {
            return Err(ApiError::unauthenticated(
                "malformed Authorization header: expected `Bearer <token>`",
            )
            .with_hint(hint));
        }
        let entry = self
            .by_hash
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&hash(token))
            .cloned()
            .ok_or_else(|| {
                ApiError::unauthenticated("the token is not known to this server").with_hint(hint)
            })?;
        let new_token = "ask an operator for a new token (csivol token create)";
        if let Some(at) = entry.revoked_at {
            return Err(ApiError::unauthenticated(format!(
                "token {} was revoked at {}",
                entry.caller.token_id,
                time(at)
            ))
            .with_hint(new_token));
        }
        if let Some(at) = entry.expires_at.filter(|at| *at <= now) {
            return Err(ApiError::unauthenticated(format!(
                "token {} expired at {}",
                entry.caller.token_id,
                time(at)
            ))
            .with_hint(new_token));
        }
        self.last_used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(entry.caller.token_id.clone(), now);
        Ok(entry.caller)
    }

    /// Takes the tokens of `other` (loaded again after another server changed them); the
    /// last-use times not yet written are kept.
    pub fn replace_with(&self, other: Tokens) {
        let fresh = other
            .by_hash
            .into_inner()
            .unwrap_or_else(|e| e.into_inner());
        *self.by_hash.write().unwrap_or_else(|e| e.into_inner()) = fresh;
    }

    /// Knows a token created (and committed) just now.
    pub fn remember(&self, token: &str, caller: Caller, expires_at: Option<i64>) {
        self.by_hash
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                hash(token),
                Entry {
                    caller,
                    expires_at,
                    revoked_at: None,
                },
            );
    }

    /// Refuses a token revoked (and committed) just now.
    pub fn revoke(&self, id: &str, at: i64) {
        let mut map = self.by_hash.write().unwrap_or_else(|e| e.into_inner());
        for e in map.values_mut().filter(|e| e.caller.token_id == id) {
            e.revoked_at.get_or_insert(at);
        }
    }

    /// Writes the in-memory last-use times, so that a list shows them and they survive a
    /// restart; on failure they are put back for the next try.
    pub async fn persist_last_used(&self, db: &Db) -> ApiResult<()> {
        let used = self.take_last_used();
        if used.is_empty() {
            return Ok(());
        }
        let again = used.clone();
        let r = db
            .write(move |ctx| {
                for (id, at) in &used {
                    ctx.set_token_last_used(id, *at)?;
                }
                Ok(())
            })
            .await;
        if r.is_err() {
            self.put_back_last_used(again);
        }
        r
    }

    /// Puts back last-use times whose write failed (a newer use wins).
    fn put_back_last_used(&self, used: Vec<(String, i64)>) {
        let mut map = self.last_used.lock().unwrap_or_else(|e| e.into_inner());
        for (id, at) in used {
            let e = map.entry(id).or_insert(at);
            *e = (*e).max(at);
        }
    }

    /// Last-use times not yet written, taken out for `lifecycle::persist_last_used`.
    fn take_last_used(&self) -> Vec<(String, i64)> {
        std::mem::take(&mut *self.last_used.lock().unwrap_or_else(|e| e.into_inner()))
            .into_iter()
            .collect()
    }
}

/// Every token, without secrets.
pub fn list_tokens(snap: &(impl Snapshot + ?Sized), now: i64) -> ApiResult<Vec<TokenInfo>> {
    Ok(snap
        .tokens()?
        .into_iter()
        .map(|t| {
            let status = match (t.revoked_at, t.expires_at) {
                (Some(_), _) => "revoked",
                (None, Some(e)) if e <= now => "expired",
                _ => "active",
            };
            let scope = t.effective_scope();
            TokenInfo {
                capabilities: scope.capabilities.into_iter().collect(),
                volumes: scope.volumes,
                namespaces: scope.namespaces,
                id: t.id,
                name: t.name,
                role: t.role,
                node: t.node,
                controllers: t.controllers,
                created_at: time(t.created_at),
                last_used_at: t.last_used_at.map(time),
                expires_at: t.expires_at.map(time),
                revoked_at: t.revoked_at.map(time),
                status: status.into(),
            }
        })
        .collect())
}

/// A new token's secret (shown once) and its hash (all that is stored).
pub fn new_secret() -> (String, String) {
    let mut secret = [0u8; 32];
    rand::rng().fill_bytes(&mut secret);
    let token = format!("csivol_{}", hex(&secret));
    let h = hash(&token);
    (token, h)
}

/// Writes the first operator token where the operator will look, readable by the owner only.
/// The file appears whole or not at all (written aside, then linked into place, which fails
/// rather than replace a token already there): a reader that finds it never reads it half
/// written.
pub fn write_token_file(path: &Path, token: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let aside = path.with_extension("new");
    let _ = std::fs::remove_file(&aside);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&aside)?;
    writeln!(f, "{token}")?;
    f.sync_all()?;
    let linked = std::fs::hard_link(&aside, path);
    let _ = std::fs::remove_file(&aside);
    linked?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::error::status;

    #[test]
    fn node_tokens_act_for_their_node_only() {
        let c = Caller {
            token_id: "x".into(),
            role: Role::Node,
            node: Some("n1".into()),
            name: None,
            controllers: vec![],
            scope: TokenScope::preset(Role::Node),
        };
        assert!(c.require_node("n1").is_ok());
        let err = c.require_node("n2").unwrap_err();
        assert!(
            err.message.contains("cannot act for node `n2`"),
            "{}",
            err.message
        );
        assert!(c.require(Capability::Read, "reading").is_err());
        assert!(c.require(Capability::Backup, "a backup").is_err());
        let r = Caller::of_role("y", Role::Reader);
        assert!(r.require(Capability::Read, "reading").is_ok());
        let e = r.require(Capability::Backup, "a backup").unwrap_err();
        assert_eq!(
            e.message,
            "this reader token lacks the `backup` capability, which a backup needs"
        );
        assert!(
            e.hint
                .as_deref()
                .is_some_and(|h| h.contains("role `operator`")),
            "{:?}",
            e.hint
        );
        assert!(r.require_node("n1").is_err());
    }

    #[test]
    fn the_actor_is_the_token_name_when_it_has_one() {
        let c = |role, node: Option<&str>, name: Option<&str>| Caller {
            token_id: "482effdfd2b8".into(),
            role,
            node: node.map(Into::into),
            name: name.map(Into::into),
            controllers: vec![],
            scope: TokenScope::preset(role),
        };
        assert_eq!(
            c(Role::Operator, None, Some("alice")).actor(),
            "operator:alice"
        );
        assert_eq!(
            c(Role::Operator, None, None).actor(),
            "operator:482effdfd2b8"
        );
        assert_eq!(c(Role::Claimer, None, Some("ci")).actor(), "claimer:ci");
        assert_eq!(c(Role::Node, Some("n1"), Some("x")).actor(), "node:n1");
    }

    #[test]
    fn authenticate_checks_the_hash() {
        let t = Tokens::default();
        t.remember("secret", Caller::of_role("i", Role::Operator), None);
        assert_eq!(
            t.authenticate(Some("Bearer secret"), 0).unwrap().role,
            Role::Operator
        );
        assert_eq!(
            status(t.authenticate(Some("Bearer wrong"), 0).unwrap_err().kind),
            401
        );
        assert_eq!(status(t.authenticate(None, 0).unwrap_err().kind), 401);
        assert_eq!(
            status(t.authenticate(Some("Basic x"), 0).unwrap_err().kind),
            401
        );
    }

    #[test]
    fn expired_and_revoked_tokens_say_which() {
        let t = Tokens::default();
        let caller = |id: &str| Caller::of_role(id, Role::Reader);
        t.remember("short", caller("s"), Some(1_000));
        t.remember("gone", caller("g"), None);
        assert!(t.authenticate(Some("Bearer short"), 999).is_ok());
        let e = t.authenticate(Some("Bearer short"), 1_000).unwrap_err();
        assert_eq!(status(e.kind), 401);
        assert!(
            e.message.starts_with("token s expired at "),
            "{}",
            e.message
        );
        assert!(t.authenticate(Some("Bearer gone"), 5).is_ok());
        t.revoke("g", 7);
        let e = t.authenticate(Some("Bearer gone"), 8).unwrap_err();
        assert_eq!(status(e.kind), 401);
        assert!(
            e.message.starts_with("token g was revoked at "),
            "{}",
            e.message
        );
        let used: HashMap<_, _> = t.take_last_used().into_iter().collect();
        assert_eq!(used.get("s"), Some(&999));
        assert_eq!(used.get("g"), Some(&5));
    }
}

#[cfg(test)]
mod scope_tests {
    use super::*;

    #[test]
    fn a_narrowed_token_touches_only_matching_names_and_nothing_cluster_wide() {
        let mut c = Caller::of_role("z", Role::Claimer);
        c.scope.volumes = vec!["build-*".into()];
        assert!(c.require_touches("volume", "build-1").is_ok());
        let e = c.require_touches("volume", "db-1").unwrap_err();
        assert_eq!(
            e.message,
            "this token is narrowed to volumes `build-*`, and volume `db-1` is not one of them"
        );
        assert!(c.require_whole_cluster("GET /v1/events").is_err());
        assert!(
            Caller::of_role("o", Role::Reader)
                .require_whole_cluster("GET /v1/events")
                .is_ok()
        );
    }
}
