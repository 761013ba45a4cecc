//! Tokens: made (the secret shown once, its hash kept), revoked (never the last usable
//! operator token), and when each was last used.

use csivol_api::{Role, TokenResponse};

use super::events::event;
use crate::auth;
use crate::error::{ApiError, ApiResult};
use crate::model::{TokenRow, time};
use crate::store::Txn;
use csivol_rules::kinds::EventKind;

/// What a token is made with (`POST /v1/tokens`).
#[derive(Debug, Clone)]
pub struct NewToken {
    pub role: Role,
    pub node: Option<String>,
    pub name: Option<String>,
    pub ttl_ms: Option<u64>,
    pub controllers: Vec<String>,
}

/// Records a new token and its event; the caller must `Tokens::remember` it after commit.
/// Returns the answer (with the secret) and when the token expires.
pub fn create_token(
    ctx: &mut impl Txn,
    t: NewToken,
    actor: &str,
) -> ApiResult<(TokenResponse, Option<i64>)> {
    let (t, expires_at) = make_token(ctx, t)?;
    let mut what = format!("{} token {} created", t.role, t.id);
    if let Some(name) = &t.name {
        what.push_str(&format!(", named {name}"));
    }
    if let Some(e) = &t.expires_at {
        what.push_str(&format!(", expires at {e}"));
    }
    if !t.controllers.is_empty() {
        what.push_str(&format!(
            ", may host the controller of {}",
            t.controllers.join(", ")
        ));
    }
    event(
        ctx,
        EventKind::TokenCreated,
        None,
        t.node.as_deref(),
        None,
        actor,
        what,
    )?;
    Ok((t, expires_at))
}

/// The operator token a new cluster's server makes for itself at its first start, before
/// anyone could act (so no event names an actor for it).
pub fn first_operator_token(ctx: &mut impl Txn) -> ApiResult<TokenResponse> {
    let t = NewToken {
        role: Role::Operator,
        node: None,
        name: None,
        ttl_ms: None,
        controllers: Vec::new(),
    };
    Ok(make_token(ctx, t)?.0)
}

fn make_token(ctx: &mut impl Txn, t: NewToken) -> ApiResult<(TokenResponse, Option<i64>)> {
    let NewToken {
        role,
        node,
        name,
        ttl_ms,
        controllers,
    } = t;
    if let Some(n) = &name {
        csivol_api::validate_name("token name", n).map_err(ApiError::invalid)?;
        // An actor `operator:<12 hex digits>` must stay unambiguous: that is a token id.
        if n.len() == 12
            && n.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(ApiError::invalid(format!(
                "token name `{n}` looks like a token id; choose a name people recognise"
            )));
        }
        if ctx.tokens()?.iter().any(|t| t.name.as_ref() == Some(n)) {
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
        (Role::Node, Some(n)) => csivol_api::validate_name("node", n).map_err(ApiError::invalid)?,
        (_, Some(_)) => {
            return Err(ApiError::invalid(
                "only node tokens are bound to a node; drop `node`",
            ));
        }
        (_, None) => {}
    }
    if !controllers.is_empty() && role != Role::Node {
        return Err(ApiError::invalid(
            "only node tokens may host controllers; drop `controllers`",
        ));
    }
    for p in &controllers {
        csivol_api::validate_name("plugin", p).map_err(ApiError::invalid)?;
    }
    let now = ctx.now();
    let expires_at = match ttl_ms {
        Some(0) => return Err(ApiError::invalid("`ttl` must be longer than 0")),
        Some(ms) => Some(super::changes::time_after(now, "ttl_ms", ms)?),
        None => None,
    };
    let (token, hash) = auth::new_secret();
    let id = hash[..12].to_owned();
    ctx.insert_token(&TokenRow {
        id: id.clone(),
        hash,
        role,
        node: node.clone(),
        controllers: controllers.clone(),
        name: name.clone(),
        created_at: now,
        last_used_at: None,
        expires_at,
        revoked_at: None,
    })?;
    let t = TokenResponse {
        id,
        role,
        node,
        name,
        token,
        expires_at: expires_at.map(time),
        controllers,
    };
    Ok((t, expires_at))
}

/// Revokes token `id`, with its event; refuses to revoke the last usable operator token,
/// which would lock every operator out. Returns when it was revoked.
pub fn revoke_token(ctx: &mut impl Txn, id: &str, actor: &str) -> ApiResult<i64> {
    let now = ctx.now();
    let tokens = ctx.tokens()?;
    let Some(t) = tokens.iter().find(|t| t.id == id) else {
        return Err(ApiError::not_found(format!("no token `{id}`"))
            .with_hint("list tokens with `csivol token list`"));
    };
    if let Some(at) = t.revoked_at {
        return Err(ApiError::conflict(format!(
            "token {id} was already revoked at {}",
            time(at)
        )));
    }
    if t.role == Role::Operator {
        let others = tokens.iter().any(|o| {
            o.role == Role::Operator
                && o.id != id
                && o.revoked_at.is_none()
                && o.expires_at.is_none_or(|e| e > now)
        });
        if !others {
            return Err(ApiError::conflict(format!(
                "token {id} is the last usable operator token; revoking it would lock every operator out"
            ))
            .with_hint("create another operator token first (csivol token create --role operator)"));
        }
    }
    let role = t.role;
    ctx.set_token_revoked(id, now)?;
    event(
        ctx,
        EventKind::TokenRevoked,
        None,
        None,
        None,
        actor,
        format!("{role} token {id} revoked"),
    )?;
    Ok(now)
}

/// Writes last-use times taken from `Tokens::take_last_used`.
pub fn persist_last_used(ctx: &mut impl Txn, used: &[(String, i64)]) -> ApiResult<()> {
    for (id, at) in used {
        ctx.set_token_last_used(id, *at)?;
    }
    Ok(())
}
