//! Tokens, controller hosts, the stored secrets and the server's own facts (`meta`) as SQLite
//! keeps them.

use csivol_api as api;
use rusqlite::{Connection, OptionalExtension, params};

use super::statement::{exec, strings};
use crate::error::{ApiError, ApiResult};
use crate::model::TokenRow;
use crate::store::sqlite::writer::WriteCtx;

// ---- tokens and controller hosts ----

const TOKEN_COLUMNS: &str = "id, hash, role, node, controllers, name, created_at, last_used_at, \
     expires_at, revoked_at";

/// Whether the schema keeps tokens' scopes (`tokens.scope`, asked of the connection itself:
/// a mirror migrated in place by `upgrade finalize` has it from that moment on). Below it
/// every token is its role's preset, and a scoped token cannot be made.
pub fn token_scopes_kept(conn: &Connection) -> ApiResult<bool> {
    super::shape::has_column(conn, "tokens", "scope")
}

type TokenFields = (TokenRow, String, String, Option<String>);

fn token_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TokenFields> {
    // The scope, where the schema keeps it, is the last column.
    let scope = if r.as_ref().column_count() > 10 {
        r.get(10)?
    } else {
        None
    };
    Ok((
        TokenRow {
            id: r.get(0)?,
            hash: r.get(1)?,
            role: api::Role::Reader,
            node: r.get(3)?,
            controllers: Vec::new(),
            name: r.get(5)?,
            scope: None,
            created_at: r.get(6)?,
            last_used_at: r.get(7)?,
            expires_at: r.get(8)?,
            revoked_at: r.get(9)?,
        },
        r.get(2)?,
        r.get(4)?,
        scope,
    ))
}

fn finish_token((mut t, role, controllers, scope): TokenFields) -> ApiResult<TokenRow> {
    t.role = role.parse().map_err(ApiError::internal)?;
    // A token whose controllers do not parse hosts none, as when it was made without.
    t.controllers = serde_json::from_str(&controllers).unwrap_or_default();
    // A scope that does not parse is an error, never read as the (wider) preset.
    t.scope = match scope {
        Some(s) => Some(serde_json::from_str(&s).map_err(|e| {
            ApiError::internal(format!(
                "token {}: its stored scope does not parse: {e}",
                t.id
            ))
        })?),
        None => None,
    };
    Ok(t)
}

pub fn tokens(conn: &Connection) -> ApiResult<Vec<TokenRow>> {
    let scope = if token_scopes_kept(conn)? {
        ", scope"
    } else {
        ""
    };
    let sql = format!("SELECT {TOKEN_COLUMNS}{scope} FROM tokens ORDER BY created_at, id");
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map([], token_from_row)?;
    rows.map(|r| finish_token(r?)).collect()
}

pub fn controller_allowances(
    conn: &Connection,
    plugin: &str,
) -> ApiResult<Vec<(String, String, i64)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT node, allowed_by, allowed_at FROM controller_hosts WHERE plugin = ?1 ORDER BY node",
    )?;
    let rows = stmt
        .query_map([plugin], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

pub fn nodes_hosting_controller(conn: &Connection, plugin: &str) -> ApiResult<Vec<String>> {
    strings(
        conn,
        "SELECT node FROM node_plugins WHERE plugin = ?1 AND controller = 1 ORDER BY node",
        [plugin],
    )
}

pub fn last_event_of_node(conn: &Connection, node: &str) -> ApiResult<Option<(String, String)>> {
    Ok(conn
        .prepare_cached(
            "SELECT kind, message FROM events WHERE node = ?1 ORDER BY idx DESC LIMIT 1",
        )?
        .query_row([node], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?)
}

pub fn insert_token(ctx: &WriteCtx<'_>, t: &TokenRow) -> ApiResult<()> {
    exec(
        ctx.tx,
        "INSERT INTO tokens (id, hash, role, node, created_at, expires_at, controllers, name) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            t.id,
            t.hash,
            t.role.as_str(),
            t.node,
            t.created_at,
            t.expires_at,
            crate::model::to_json(&t.controllers),
            t.name
        ],
    )?;
    if let Some(scope) = &t.scope {
        // The lifecycle refuses a scoped token below the schema that keeps scopes; were
        // one to get here, it must not be kept as its (wider) preset.
        if !token_scopes_kept(ctx.tx)? {
            return Err(ApiError::internal(
                "a scoped token reached a schema that does not keep scopes",
            ));
        }
        exec(
            ctx.tx,
            "UPDATE tokens SET scope = ?2 WHERE id = ?1",
            params![t.id, crate::model::to_json(scope)],
        )?;
    }
    Ok(())
}

pub fn set_token_revoked(ctx: &WriteCtx<'_>, id: &str, at: i64) -> ApiResult<()> {
    exec(
        ctx.tx,
        "UPDATE tokens SET revoked_at = ?2 WHERE id = ?1",
        params![id, at],
    )?;
    Ok(())
}

pub fn set_token_last_used(ctx: &WriteCtx<'_>, id: &str, at: i64) -> ApiResult<()> {
    exec(
        ctx.tx,
        "UPDATE tokens SET last_used_at = max(coalesce(last_used_at, 0), ?2) WHERE id = ?1",
        params![id, at],
    )?;
    Ok(())
}

pub fn allow_controller_host(
    ctx: &WriteCtx<'_>,
    plugin: &str,
    node: &str,
    actor: &str,
) -> ApiResult<bool> {
    Ok(exec(
        ctx.tx,
        "INSERT INTO controller_hosts (plugin, node, allowed_by, allowed_at) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT (plugin, node) DO NOTHING",
        params![plugin, node, actor, ctx.now],
    )? > 0)
}

pub fn disallow_controller_host(ctx: &WriteCtx<'_>, plugin: &str, node: &str) -> ApiResult<bool> {
    Ok(exec(
        ctx.tx,
        "DELETE FROM controller_hosts WHERE plugin = ?1 AND node = ?2",
        params![plugin, node],
    )? > 0)
}

// ---- secrets ----

pub fn stored_secrets(conn: &Connection) -> ApiResult<Vec<(String, String)>> {
    let mut stmt =
        conn.prepare_cached("SELECT name, secrets FROM volumes WHERE secrets != '{}'")?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

pub fn secrets_check(conn: &Connection) -> ApiResult<Option<String>> {
    Ok(conn
        .query_row("SELECT sealed FROM secrets_check WHERE id = 1", [], |r| {
            r.get(0)
        })
        .optional()?)
}

pub fn put_stored_secrets(ctx: &WriteCtx<'_>, volume: &str, sealed: &str) -> ApiResult<()> {
    exec(
        ctx.tx,
        "UPDATE volumes SET secrets = ?2 WHERE name = ?1",
        params![volume, sealed],
    )?;
    Ok(())
}

pub fn put_secrets_check(ctx: &WriteCtx<'_>, sealed: &str) -> ApiResult<()> {
    exec(
        ctx.tx,
        "INSERT INTO secrets_check (id, sealed) VALUES (1, ?1) \
         ON CONFLICT (id) DO UPDATE SET sealed = ?1",
        [sealed],
    )?;
    Ok(())
}

/// `meta` rows whose keys begin with `prefix`: a range of the primary key, so that a few
/// keys are asked for at the cost of a few, however many others there are.
pub fn meta(conn: &Connection, prefix: &str) -> ApiResult<Vec<(String, i64)>> {
    let mut stmt = conn
        .prepare_cached("SELECT key, value FROM meta WHERE key >= ?1 AND key < ?2 ORDER BY key")?;
    // Every key that begins with `prefix` sorts below `prefix` followed by the greatest
    // character (SQLite compares text bytewise, and UTF-8 keeps the order of characters).
    let end = format!("{prefix}{}", char::MAX);
    let rows = stmt
        .query_map(params![prefix, end], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

pub fn put_meta(ctx: &WriteCtx<'_>, key: &str, value: Option<i64>) -> ApiResult<()> {
    debug_assert_ne!(key, "index", "the change index is the writer's");
    match value {
        Some(v) => exec(
            ctx.tx,
            "INSERT INTO meta (key, value) VALUES (?1, ?2) \
             ON CONFLICT (key) DO UPDATE SET value = ?2",
            params![key, v],
        )?,
        None => exec(ctx.tx, "DELETE FROM meta WHERE key = ?1", [key])?,
    };
    Ok(())
}
