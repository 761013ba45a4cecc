//! Bearer tokens: random secrets handed out once, stored only as SHA-256 hashes, each with a
//! role (`operator`, `reader`, or `node` bound to one node).

use std::collections::HashMap;
use std::path::Path;
use std::sync::RwLock;

use csivol_proto::api::{Role, TokenResponse};
use rand::RngCore;
use rusqlite::{Connection, params};
use sha2::{Digest, Sha256};

use super::db::WriteCtx;
use super::error::{ApiError, ApiResult};

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub token_id: String,
    pub role: Role,
    pub node: Option<String>,
    /// The name given at `token create --name`, shown as the actor instead of the id.
    pub name: Option<String>,
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

    pub fn require_operator(&self) -> ApiResult<()> {
        if self.role == Role::Operator {
            return Ok(());
        }
        Err(ApiError::forbidden(format!(
            "a {} token cannot do this; it needs an operator token",
            self.role
        ))
        .with_hint("create one with `csivol token create --role operator` (as an operator)"))
    }

    /// Claiming, renewing, queueing and releasing claims: operators and claimers (CI jobs).
    pub fn require_claimer(&self) -> ApiResult<()> {
        if matches!(self.role, Role::Operator | Role::Claimer) {
            return Ok(());
        }
        Err(ApiError::forbidden(format!(
            "a {} token cannot claim or release; it needs a claimer or operator token",
            self.role
        ))
        .with_hint("create one with `csivol token create --role claimer` (as an operator)"))
    }

    pub fn require_reader(&self) -> ApiResult<()> {
        if matches!(self.role, Role::Operator | Role::Reader | Role::Claimer) {
            return Ok(());
        }
        Err(ApiError::forbidden(
            "a node token can only act for its own node's agent",
        ))
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

fn hash(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Known tokens by hash, loaded at start and kept in memory (a lookup per request).
#[derive(Debug, Default)]
pub struct Tokens {
    by_hash: RwLock<HashMap<String, Caller>>,
}

impl Tokens {
    pub fn load(conn: &Connection) -> ApiResult<Self> {
        let mut stmt = conn.prepare("SELECT id, hash, role, node, name FROM tokens")?;
        let rows = stmt.query_map([], |r| {
            let role: String = r.get(2)?;
            Ok((
                r.get::<_, String>(1)?,
                r.get::<_, String>(0)?,
                role,
                r.get::<_, Option<String>>(3)?,
                r.get::<_, Option<String>>(4)?,
            ))
        })?;
        let mut by_hash = HashMap::new();
        for row in rows {
            let (h, id, role, node, name) = row?;
            let role = role.parse().map_err(ApiError::internal)?;
            by_hash.insert(
                h,
                Caller {
                    token_id: id,
                    role,
                    node,
                    name,
                },
            );
        }
        Ok(Self {
            by_hash: RwLock::new(by_hash),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.by_hash
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// The caller presenting `Authorization: Bearer <token>`.
    pub fn authenticate(&self, header: Option<&str>) -> ApiResult<Caller> {
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
        self.by_hash
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&hash(token))
            .cloned()
            .ok_or_else(|| {
                ApiError::unauthenticated("the token is not known to this server").with_hint(hint)
            })
    }

    pub fn remember(&self, token: &str, caller: Caller) {
        self.by_hash
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(hash(token), caller);
    }
}

/// Creates a token in the database; the caller must [`Tokens::remember`] it after commit.
pub fn create_token(
    ctx: &mut WriteCtx<'_>,
    role: Role,
    node: Option<String>,
    name: Option<String>,
) -> ApiResult<TokenResponse> {
    if let Some(n) = &name {
        csivol_proto::api::validate_name("token name", n).map_err(ApiError::invalid)?;
        // An actor `operator:<12 hex digits>` must stay unambiguous: that is a token id.
        if n.len() == 12
            && n.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(ApiError::invalid(format!(
                "token name `{n}` looks like a token id; choose a name people recognise"
            )));
        }
        let taken: bool = ctx.tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM tokens WHERE name = ?1)",
            [n],
            |r| r.get(0),
        )?;
        if taken {
            return Err(
                ApiError::conflict(format!("a token named `{n}` already exists")).with_hint(
                    "choose another name; each name identifies one token in the event log",
                ),
            );
        }
    }
    match (role, &node) {
        (Role::Node, None) => {
            return Err(ApiError::invalid(
                "a node token needs `node`: the node it acts for",
            ));
        }
        (Role::Node, Some(n)) => {
            csivol_proto::api::validate_name("node", n).map_err(ApiError::invalid)?
        }
        (_, Some(_)) => {
            return Err(ApiError::invalid(
                "only node tokens are bound to a node; drop `node`",
            ));
        }
        (_, None) => {}
    }
    let mut secret = [0u8; 32];
    rand::rng().fill_bytes(&mut secret);
    let token = format!("csivol_{}", hex(&secret));
    let h = hash(&token);
    let id = h[..12].to_owned();
    ctx.tx.execute(
        "INSERT INTO tokens (id, hash, role, node, created_at, name) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![id, h, role.as_str(), node, ctx.now, name],
    )?;
    Ok(TokenResponse {
        id,
        role,
        node,
        name,
        token,
    })
}

/// Writes the first operator token where the operator will look, readable by the owner only.
pub fn write_token_file(path: &Path, token: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    writeln!(f, "{token}")?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_tokens_act_for_their_node_only() {
        let c = Caller {
            token_id: "x".into(),
            role: Role::Node,
            node: Some("n1".into()),
            name: None,
        };
        assert!(c.require_node("n1").is_ok());
        let err = c.require_node("n2").unwrap_err();
        assert!(
            err.message.contains("cannot act for node `n2`"),
            "{}",
            err.message
        );
        assert!(c.require_reader().is_err());
        assert!(c.require_operator().is_err());
        let r = Caller {
            token_id: "y".into(),
            role: Role::Reader,
            node: None,
            name: None,
        };
        assert!(r.require_reader().is_ok());
        assert!(r.require_operator().is_err());
        assert!(r.require_node("n1").is_err());
    }

    #[test]
    fn the_actor_is_the_token_name_when_it_has_one() {
        let c = |role, node: Option<&str>, name: Option<&str>| Caller {
            token_id: "482effdfd2b8".into(),
            role,
            node: node.map(Into::into),
            name: name.map(Into::into),
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
        t.remember(
            "secret",
            Caller {
                token_id: "i".into(),
                role: Role::Operator,
                node: None,
                name: None,
            },
        );
        assert_eq!(
            t.authenticate(Some("Bearer secret")).unwrap().role,
            Role::Operator
        );
        assert_eq!(
            t.authenticate(Some("Bearer wrong")).unwrap_err().status,
            401
        );
        assert_eq!(t.authenticate(None).unwrap_err().status, 401);
        assert_eq!(t.authenticate(Some("Basic x")).unwrap_err().status, 401);
    }
}
