//! Tokens: made (the secret shown once, its hash kept), revoked (never the last usable
//! operator token), and when each was last used. A token makes and revokes only tokens
//! with a subset of its own rights: its capabilities, namespaces its own cover, and volume
//! patterns its own cover.

use csivol_api::{Capability, Role, TokenResponse, TokenScope};

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
    /// Capabilities added to the role's preset.
    pub capabilities: Vec<Capability>,
    /// Volume-name patterns the token is narrowed to (none: every volume).
    pub volumes: Vec<String>,
    /// Namespaces the token is narrowed to (none, or `*`: every namespace).
    pub namespaces: Vec<String>,
}

/// What of a token of `role` and `scope` the rights `own` do not hold (empty: it is a
/// subset of them). A node token acts for its node's agent, which only a token that may
/// manage nodes over the whole cluster may hand out.
fn exceeding(own: &TokenScope, role: Role, scope: &TokenScope) -> Vec<String> {
    let mut out = own.exceeded_by(scope);
    if role == Role::Node && (!own.has(Capability::ManageNodes) || own.narrowed()) {
        out.push("a node token (it needs `manage-nodes` over every volume)".into());
    }
    out
}

/// Records a new token and its event; the caller must `Tokens::remember` it after commit.
/// Returns the answer (with the secret) and when the token expires.
pub fn create_token(
    ctx: &mut impl Txn,
    t: NewToken,
    actor: &str,
    own: &TokenScope,
) -> ApiResult<(TokenResponse, Option<i64>)> {
    let (t, expires_at) = make_token(ctx, t, Some(own))?;
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
    let added: Vec<&str> = t
        .capabilities
        .iter()
        .filter(|c| !t.role.preset().contains(c))
        .map(|c| c.as_str())
        .collect();
    if !added.is_empty() {
        what.push_str(&format!(", with {}", added.join(", ")));
    }
    if !t.namespaces.is_empty() {
        what.push_str(&format!(
            ", narrowed to namespaces {}",
            t.namespaces.join(", ")
        ));
    }
    if !t.volumes.is_empty() {
        what.push_str(&format!(", narrowed to volumes {}", t.volumes.join(", ")));
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
        capabilities: Vec::new(),
        volumes: Vec::new(),
        namespaces: Vec::new(),
    };
    Ok(make_token(ctx, t, None)?.0)
}

/// The namespaces a new token is narrowed to, sorted: each one that exists (none, or `*`
/// among them: every namespace).
fn namespaces_of(ctx: &impl Txn, asked: &[String]) -> ApiResult<Vec<String>> {
    if asked.iter().any(|n| n == csivol_api::ALL_NAMESPACES) {
        return Ok(Vec::new());
    }
    let mut out: Vec<String> = Vec::new();
    for n in asked {
        super::namespaces::require_namespace(ctx, n)?;
        if !out.contains(n) {
            out.push(n.clone());
        }
    }
    out.sort();
    Ok(out)
}

/// The scope of a new token: its role's preset, what is added, its namespaces and its
/// patterns; refused where it cannot be.
fn scope_of(
    role: Role,
    capabilities: &[Capability],
    volumes: &[String],
    namespaces: Vec<String>,
) -> ApiResult<TokenScope> {
    if role == Role::Node
        && !(capabilities.is_empty() && volumes.is_empty() && namespaces.is_empty())
    {
        return Err(ApiError::invalid(
            "a node token acts only for its node's agent and takes no capabilities, namespaces \
             or volume patterns; drop `capabilities`, `namespaces` and `volumes`",
        ));
    }
    let mut scope = TokenScope::preset(role);
    scope.namespaces = namespaces;
    scope.capabilities.extend(capabilities.iter().copied());
    for p in volumes {
        csivol_api::validate_pattern(p).map_err(ApiError::invalid)?;
        if !scope.volumes.contains(p) {
            scope.volumes.push(p.clone());
        }
    }
    if scope.narrowed() {
        let wide: Vec<&str> = scope
            .capabilities
            .iter()
            .filter(|c| c.cluster_wide())
            .map(|c| c.as_str())
            .collect();
        if !wide.is_empty() {
            return Err(ApiError::invalid(format!(
                "a token narrowed to namespaces or volumes cannot hold {}, which act on the \
                 whole cluster",
                wide.join(", ")
            ))
            .with_hint(
                "drop `--namespace` and `--volumes`, or give the narrowed token a role without \
                 them (`claimer`, `reader`) and add only volume capabilities",
            ));
        }
    }
    Ok(scope)
}

fn make_token(
    ctx: &mut impl Txn,
    t: NewToken,
    own: Option<&TokenScope>,
) -> ApiResult<(TokenResponse, Option<i64>)> {
    let NewToken {
        role,
        node,
        name,
        ttl_ms,
        controllers,
        capabilities,
        volumes,
        namespaces,
    } = t;
    let namespaces = namespaces_of(ctx, &namespaces)?;
    let scope = scope_of(role, &capabilities, &volumes, namespaces)?;
    if let Some(own) = own {
        let over = exceeding(own, role, &scope);
        if !over.is_empty() {
            return Err(ApiError::forbidden(format!(
                "a token can create only tokens with a subset of its own rights; this one does \
                 not hold {}",
                over.join(", ")
            ))
            .with_hint("ask for fewer rights, or create the token with a token that holds them"));
        }
    }
    let stored = (!scope.is_preset_of(role)).then(|| scope.clone());
    if stored.is_some() && !ctx.release_schema()? {
        return Err(ApiError::conflict(
            "this cluster runs on the previous schema, whose servers would read a token with \
             added capabilities, namespaces or volume patterns as its role's preset",
        )
        .with_hint(
            "run `csivol-server upgrade finalize` once every server runs this release; until \
             then create tokens of a plain role",
        ));
    }
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
        scope: stored,
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
        capabilities: scope.capabilities.into_iter().collect(),
        volumes: scope.volumes,
        namespaces: scope.namespaces,
    };
    Ok((t, expires_at))
}

/// Revokes token `id`, with its event; refuses to revoke the last usable operator token,
/// which would lock every operator out. Returns when it was revoked.
/// A token may revoke only tokens whose rights are a subset of its own (a token manager
/// with fewer rights cannot lock out those with more).
pub fn revoke_token(ctx: &mut impl Txn, id: &str, actor: &str, own: &TokenScope) -> ApiResult<i64> {
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
    let over = exceeding(own, t.role, &t.effective_scope());
    if !over.is_empty() {
        return Err(ApiError::forbidden(format!(
            "a token can revoke only tokens with a subset of its own rights; token {id} holds \
             {}, which this one does not",
            over.join(", ")
        ))
        .with_hint("revoke it with a token that holds those rights"));
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
