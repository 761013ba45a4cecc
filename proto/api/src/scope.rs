//! What a token may do (its capabilities) and touch (the namespaces and the volume names it
//! is narrowed to): its scope. The four roles are named presets of capabilities; a token
//! may be given more than its role's preset, and narrowed to namespaces and to volume-name
//! patterns.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::Role;

/// One thing a token may do. Each route of the API needs one (or is a node agent's, or
/// the health check).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Capability {
    /// Read volumes, claims, snapshots, nodes, plugins, events and metrics.
    Read,
    /// Claim, renew, queue and release the token's own claims.
    Claim,
    /// Renew and release any token's claims (and claims that belong to no token).
    ReleaseAny,
    /// Create, register, delete and adopt volumes.
    CreateDelete,
    /// Create, delete and adopt snapshots, and group snapshots.
    Snapshot,
    /// Expand and modify volumes, and take them out of service (volume eligibility).
    ExpandModify,
    /// Unblock and detach a volume.
    UnblockDetach,
    /// Unblock and fence a whole node (cluster-wide).
    Fence,
    /// Node eligibility, labels and removal, and who may host a plugin's controller
    /// (cluster-wide).
    ManageNodes,
    /// Create, list and revoke tokens (cluster-wide).
    ManageTokens,
    /// Download a backup of the whole state (cluster-wide).
    Backup,
}

impl Capability {
    pub const ALL: [Self; 11] = [
        Self::Read,
        Self::Claim,
        Self::ReleaseAny,
        Self::CreateDelete,
        Self::Snapshot,
        Self::ExpandModify,
        Self::UnblockDetach,
        Self::Fence,
        Self::ManageNodes,
        Self::ManageTokens,
        Self::Backup,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Claim => "claim",
            Self::ReleaseAny => "release-any",
            Self::CreateDelete => "create-delete",
            Self::Snapshot => "snapshot",
            Self::ExpandModify => "expand-modify",
            Self::UnblockDetach => "unblock-detach",
            Self::Fence => "fence",
            Self::ManageNodes => "manage-nodes",
            Self::ManageTokens => "manage-tokens",
            Self::Backup => "backup",
        }
    }

    /// Whether it acts on the whole cluster rather than on named volumes: a token narrowed
    /// to volume names cannot hold it (fencing or unblocking a node touches every volume
    /// on it; a backup holds every volume; a token manager could make itself any token).
    pub fn cluster_wide(self) -> bool {
        matches!(
            self,
            Self::Fence | Self::ManageNodes | Self::ManageTokens | Self::Backup
        )
    }

    /// The smallest role whose preset holds it.
    pub fn smallest_role(self) -> Role {
        match self {
            Self::Read => Role::Reader,
            Self::Claim => Role::Claimer,
            _ => Role::Operator,
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Capability {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| {
                let all: Vec<_> = Self::ALL.iter().map(|c| c.as_str()).collect();
                format!("unknown capability `{s}`: use one of {}", all.join(", "))
            })
    }
}

impl Role {
    /// The capabilities of the role's preset (a node token has none: it acts only on its
    /// own node's agent endpoints).
    pub fn preset(self) -> BTreeSet<Capability> {
        match self {
            Self::Operator => Capability::ALL.into_iter().collect(),
            Self::Reader => [Capability::Read].into_iter().collect(),
            Self::Claimer => [Capability::Read, Capability::Claim].into_iter().collect(),
            Self::Node => BTreeSet::new(),
        }
    }
}

/// Checks a volume-name pattern: a name's characters and the wildcards `*` (any run of
/// characters) and `?` (one character).
pub fn validate_pattern(p: &str) -> Result<(), String> {
    let ok = !p.is_empty()
        && p.len() <= 128
        && p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'*' | b'?'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid volume pattern `{}`: use 1 to 128 letters, digits, `.`, `_`, `-` and the \
             wildcards `*` (any characters) and `?` (one character)",
            p.escape_debug()
        ))
    }
}

/// Whether `name` matches the glob `pattern` (`*` any run, `?` one character).
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        match p.get(pi) {
            Some(b'*') => {
                star = Some((pi, ni));
                pi += 1;
            }
            Some(&c) if c == b'?' || c == n[ni] => {
                pi += 1;
                ni += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    pi = sp + 1;
                    ni = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Whether every name `inner` matches is matched by `outer`: exactly when `inner` is a
/// plain name that `outer` matches, when the two are the same, or when `outer` is
/// `PREFIX*` and `inner` begins with that prefix. Anything else is taken as not covered
/// (a token's rights are never widened by a guess).
pub fn pattern_covers(outer: &str, inner: &str) -> bool {
    if outer == inner || outer == "*" {
        return true;
    }
    if !inner.contains(['*', '?']) {
        return glob_matches(outer, inner);
    }
    match outer.strip_suffix('*') {
        Some(prefix) if !prefix.contains(['*', '?']) => inner.starts_with(prefix),
        _ => false,
    }
}

/// What a token may do and touch, beside its role (which names its preset). Kept whole so
/// that more bounds (such as namespaces) can join it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenScope {
    /// Everything it may do (its role's preset and what was added).
    pub capabilities: BTreeSet<Capability>,
    /// Volume-name patterns it is narrowed to; empty: every volume.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<String>,
    /// The namespaces it is narrowed to, sorted; empty: every namespace (every token made
    /// before namespaces, and one made with `--namespace '*'`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
}

impl TokenScope {
    /// A role's preset, over every volume.
    pub fn preset(role: Role) -> Self {
        Self {
            capabilities: role.preset(),
            volumes: Vec::new(),
            namespaces: Vec::new(),
        }
    }

    /// Whether it is its role's preset and nothing else (what a token of a schema before
    /// scopes is).
    pub fn is_preset_of(&self, role: Role) -> bool {
        self.volumes.is_empty() && self.namespaces.is_empty() && self.capabilities == role.preset()
    }

    pub fn has(&self, c: Capability) -> bool {
        self.capabilities.contains(&c)
    }

    /// Whether it is narrowed to volume patterns or namespaces: what covers the whole
    /// cluster is then refused it.
    pub fn narrowed(&self) -> bool {
        !self.volumes.is_empty() || !self.namespaces.is_empty()
    }

    /// Whether it covers namespace `namespace`.
    pub fn covers_namespace(&self, namespace: &str) -> bool {
        self.namespaces.is_empty() || self.namespaces.iter().any(|n| n == namespace)
    }

    /// Whether the volume (or snapshot) keyed `key` (`crate::volume_key`) is one it may
    /// touch: of a namespace it covers, its name matching one of its patterns.
    pub fn touches(&self, key: &str) -> bool {
        let (namespace, name) = crate::split_key(key);
        self.covers_namespace(namespace)
            && (self.volumes.is_empty() || self.volumes.iter().any(|p| glob_matches(p, name)))
    }

    /// What of `other` this scope does not hold: capabilities it lacks, and patterns of
    /// `other` (or the lack of any: every volume) none of its own covers. Empty: `other`
    /// is a subset of it.
    pub fn exceeded_by(&self, other: &TokenScope) -> Vec<String> {
        let mut out: Vec<String> = other
            .capabilities
            .difference(&self.capabilities)
            .map(|c| format!("capability `{c}`"))
            .collect();
        if !self.namespaces.is_empty() {
            if other.namespaces.is_empty() {
                out.push(format!(
                    "every namespace (this token covers namespaces {})",
                    quoted(&self.namespaces)
                ));
            }
            for n in &other.namespaces {
                if !self.covers_namespace(n) {
                    out.push(format!("namespace `{n}`"));
                }
            }
        }
        if !self.volumes.is_empty() {
            if other.volumes.is_empty() {
                out.push("every volume (this token is narrowed to volume patterns)".into());
            }
            for p in &other.volumes {
                if !self.volumes.iter().any(|o| pattern_covers(o, p)) {
                    out.push(format!("volumes `{p}`"));
                }
            }
        }
        out
    }
}

/// `a`, `b`, as messages name a list.
pub fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_shells_do() {
        assert!(glob_matches("build-*", "build-1"));
        assert!(glob_matches("build-*", "build-"));
        assert!(!glob_matches("build-*", "db-1"));
        assert!(glob_matches("*-cache", "ci-cache"));
        assert!(glob_matches("b?ild-*-x", "build-a-b-x"));
        assert!(!glob_matches("build", "build-1"));
        assert!(glob_matches("*", "anything"));
    }

    #[test]
    fn a_pattern_covers_only_what_it_surely_matches() {
        assert!(pattern_covers("build-*", "build-a-*"));
        assert!(pattern_covers("build-*", "build-a"));
        assert!(!pattern_covers("build-*", "b*"));
        assert!(!pattern_covers("build-*", "db-*"));
        assert!(!pattern_covers("*-x", "a*-x"));
        assert!(pattern_covers("*", "db-*"));
    }

    #[test]
    fn a_subset_names_what_exceeds() {
        let claimer = TokenScope {
            capabilities: Role::Claimer.preset(),
            volumes: vec!["build-*".into()],
            namespaces: Vec::new(),
        };
        let wider = TokenScope {
            capabilities: Role::Operator.preset(),
            volumes: vec!["db-*".into()],
            namespaces: Vec::new(),
        };
        let over = claimer.exceeded_by(&wider);
        assert!(over.contains(&"capability `backup`".to_owned()), "{over:?}");
        assert!(over.contains(&"volumes `db-*`".to_owned()), "{over:?}");
        let narrower = TokenScope {
            capabilities: Role::Reader.preset(),
            volumes: vec!["build-a*".into()],
            namespaces: Vec::new(),
        };
        assert!(claimer.exceeded_by(&narrower).is_empty());
        assert_eq!(
            claimer.exceeded_by(&TokenScope::preset(Role::Reader)),
            vec!["every volume (this token is narrowed to volume patterns)".to_owned()]
        );
    }

    #[test]
    fn namespaces_bound_what_a_token_touches_and_makes() {
        let team_a = TokenScope {
            capabilities: Role::Claimer.preset(),
            volumes: Vec::new(),
            namespaces: vec!["team-a".into()],
        };
        assert!(team_a.narrowed());
        assert!(team_a.touches("team-a~db"));
        assert!(!team_a.touches("team-b~db"));
        assert!(
            !team_a.touches("db"),
            "`default` is a namespace like another"
        );
        let every = TokenScope::preset(Role::Claimer);
        assert!(every.touches("team-b~db") && every.touches("db"));
        // Patterns match the name within the namespace.
        let builds = TokenScope {
            volumes: vec!["build-*".into()],
            ..team_a.clone()
        };
        assert!(builds.touches("team-a~build-1") && !builds.touches("team-a~db"));

        assert_eq!(
            team_a.exceeded_by(&every),
            vec!["every namespace (this token covers namespaces `team-a`)".to_owned()]
        );
        let team_b = TokenScope {
            namespaces: vec!["team-b".into()],
            ..team_a.clone()
        };
        assert_eq!(
            team_a.exceeded_by(&team_b),
            vec!["namespace `team-b`".to_owned()]
        );
        assert!(team_a.exceeded_by(&builds).is_empty());
        assert!(every.exceeded_by(&team_b).is_empty());
    }
}
