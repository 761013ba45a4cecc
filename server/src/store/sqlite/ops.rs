//! The controller-operation queue as SQLite keeps it: queueing, handing out, retrying and
//! finishing operations (`ops`), and the controller listings' findings.

use rusqlite::{OptionalExtension, params};

use super::statement::exec;
use crate::error::ApiResult;
use crate::model::to_json;
use crate::store::sqlite::writer::WriteCtx;
use csivol_rules::kinds::OpKind;

pub fn queue_op(
    ctx: &mut WriteCtx<'_>,
    kind: OpKind,
    plugin: &str,
    volume: &str,
    node: Option<&str>,
    payload: &str,
) -> ApiResult<()> {
    let exists: Option<i64> = ctx
        .tx
        .prepare_cached("SELECT id FROM ops WHERE volume = ?1 AND kind = ?2 AND node IS ?3")?
        .query_row(params![volume, kind.as_str(), node], |r| r.get(0))
        .optional()?;
    if exists.is_none() {
        exec(
            ctx.tx,
            "INSERT INTO ops (kind, plugin, volume, node, payload, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![kind.as_str(), plugin, volume, node, payload, ctx.now],
        )?;
    }
    Ok(())
}

pub fn assign_op(ctx: &mut WriteCtx<'_>, id: i64, host: &str) -> ApiResult<()> {
    exec(
        ctx.tx,
        "UPDATE ops SET host = ?1, assigned_at = ?2 WHERE id = ?3",
        params![host, ctx.now, id],
    )?;
    Ok(())
}

pub fn note_op_waiting(ctx: &mut WriteCtx<'_>, id: i64, why: &str) -> ApiResult<bool> {
    let changed = exec(
        ctx.tx,
        "UPDATE ops SET error = ?1 WHERE id = ?2 AND error IS NOT ?1",
        params![why, id],
    )?;
    Ok(changed > 0)
}

pub fn retry_op(ctx: &mut WriteCtx<'_>, id: i64, not_before: i64, error: &str) -> ApiResult<()> {
    exec(
        ctx.tx,
        "UPDATE ops SET attempt = attempt + 1, host = NULL, assigned_at = NULL, not_before = ?1, error = ?2 WHERE id = ?3",
        params![not_before, error, id],
    )?;
    Ok(())
}

pub fn retarget_op(ctx: &mut WriteCtx<'_>, id: i64, payload: &str) -> ApiResult<()> {
    exec(
        ctx.tx,
        "UPDATE ops SET payload = ?1, attempt = attempt + 1, host = NULL, assigned_at = NULL, \
         not_before = ?2, error = NULL WHERE id = ?3",
        params![payload, ctx.now, id],
    )?;
    Ok(())
}

pub fn unassign_ops_of(ctx: &mut WriteCtx<'_>, host: &str) -> ApiResult<()> {
    exec(
        ctx.tx,
        "UPDATE ops SET host = NULL, assigned_at = NULL WHERE host = ?1",
        [host],
    )?;
    Ok(())
}

pub fn delete_op(ctx: &mut WriteCtx<'_>, id: i64) -> ApiResult<()> {
    exec(ctx.tx, "DELETE FROM ops WHERE id = ?1", [id])?;
    Ok(())
}

pub fn put_controller_findings(
    ctx: &mut WriteCtx<'_>,
    plugin: &str,
    findings: &[csivol_rules::reconcile::Kept],
) -> ApiResult<()> {
    exec(
        ctx.tx,
        "INSERT INTO controller_findings (plugin, findings, listed_at) VALUES (?1, ?2, ?3) \
         ON CONFLICT (plugin) DO UPDATE SET findings = ?2, listed_at = ?3",
        params![plugin, to_json(&findings), ctx.now],
    )?;
    Ok(())
}

pub fn delete_op_for(
    ctx: &mut WriteCtx<'_>,
    kind: OpKind,
    volume: &str,
    node: &str,
) -> ApiResult<()> {
    exec(
        ctx.tx,
        "DELETE FROM ops WHERE volume = ?1 AND kind = ?2 AND node = ?3",
        params![volume, kind.as_str(), node],
    )?;
    Ok(())
}
