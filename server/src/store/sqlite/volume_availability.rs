//! Whether a volume takes new claims (`volume_availability`, a row only for a volume an
//! operator took out of service: `ineligible` or `draining`, why, who and since when).
//!
//! The table comes with one schema migration. With the etcd store a server may run on
//! the schema before it until `upgrade finalize`: taking a volume out of service is then
//! refused (a server of the previous release would go on granting its claims), and every
//! volume reads as taking claims, which is what it was before.

use rusqlite::{Connection, params};

use super::statement::exec;
use crate::error::{ApiError, ApiResult};
use crate::model::VolumeAvailabilityRow as Availability;
use crate::store::sqlite::db::optional;
use crate::store::sqlite::writer::WriteCtx;
use csivol_api::Eligibility;

/// Whether the schema has the table (asked of the connection itself: a mirror migrated in
/// place by `upgrade finalize` has it from that moment on).
pub fn kept(conn: &Connection) -> ApiResult<bool> {
    super::shape::has_table(conn, "volume_availability")
}

/// The volume's row; none for a volume that takes claims, or where the schema does not
/// keep them.
pub fn get(conn: &Connection, volume: &str) -> ApiResult<Option<Availability>> {
    if !kept(conn)? {
        return Ok(None);
    }
    let row = optional(
        conn.prepare_cached(
            "SELECT eligibility, reason, actor, at FROM volume_availability WHERE volume = ?1",
        )?
        .query_row([volume], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, Option<String>>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
            ))
        }),
    )?;
    let Some((eligibility, reason, actor, at)) = row else {
        return Ok(None);
    };
    let eligibility = serde_json::from_value(serde_json::Value::from(eligibility.as_str()))
        .map_err(|_| {
            ApiError::internal(format!(
                "volume_availability holds eligibility `{eligibility}`"
            ))
        })?;
    Ok(Some(Availability {
        eligibility,
        reason,
        actor,
        at,
    }))
}

/// The volumes after `after` up to `last` by name that are out of service, for a
/// listing's chunk; none where the schema does not keep them.
pub fn between(
    conn: &Connection,
    after: &str,
    last: &str,
) -> ApiResult<std::collections::HashMap<String, csivol_api::VolumeAvailability>> {
    let mut out = std::collections::HashMap::new();
    if !kept(conn)? {
        return Ok(out);
    }
    let mut stmt = conn.prepare_cached(
        "SELECT volume FROM volume_availability WHERE volume > ?1 AND volume <= ?2",
    )?;
    let names = stmt
        .query_map(params![after, last], |r| r.get::<_, String>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    for name in names {
        if let Some(a) = get(conn, &name)? {
            out.insert(name, a.to_api());
        }
    }
    Ok(out)
}

/// Records the volume's availability: none (or `eligible`) removes its row. Below the
/// schema that keeps it, taking a volume out of service is refused, never dropped.
pub fn put(ctx: &WriteCtx<'_>, volume: &str, a: Option<&Availability>) -> ApiResult<()> {
    let a = a.filter(|a| a.eligibility != Eligibility::Eligible);
    if !kept(ctx.tx)? {
        if a.is_none() {
            return Ok(());
        }
        return Err(ApiError::invalid(
            "this cluster runs on the previous schema, which does not keep whether a volume \
             takes new claims",
        )
        .with_hint("run `csivol-server upgrade finalize` once every server runs this release"));
    }
    let Some(a) = a else {
        exec(
            ctx.tx,
            "DELETE FROM volume_availability WHERE volume = ?1",
            [volume],
        )?;
        return Ok(());
    };
    exec(
        ctx.tx,
        "INSERT INTO volume_availability (volume, eligibility, reason, actor, at) \
         VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (volume) DO UPDATE SET eligibility = ?2, \
         reason = ?3, actor = ?4, at = ?5",
        params![volume, a.eligibility.as_str(), a.reason, a.actor, a.at],
    )?;
    Ok(())
}
