//! What a volume allows its claims to ask of their mounts, its default SELinux context
//! and its own `ownership` (`volume_mounts`, a row only for a volume that sets one of
//! them).
//!
//! The table comes with one schema migration. With the etcd store a server may run on
//! the schema before it until `upgrade finalize`: a volume spec that sets either is then
//! refused, and every volume reads as allowing nothing, which is what it was before.

use rusqlite::{Connection, params};

use super::statement::exec;
use crate::error::{ApiError, ApiResult};
use crate::model::to_json;
use crate::store::sqlite::db::optional;
use crate::store::sqlite::writer::WriteCtx;
use csivol_api::{Ownership, VolumeMounts};

/// Whether the schema has the table (asked of the connection itself: a mirror migrated in
/// place by `upgrade finalize` has it from that moment on).
pub fn kept(conn: &Connection) -> ApiResult<bool> {
    super::shape::has_table(conn, "volume_mounts")
}

/// The volume's mount settings; none where the schema does not keep them.
pub fn get(conn: &Connection, volume: &str) -> ApiResult<VolumeMounts> {
    if !kept(conn)? {
        return Ok(VolumeMounts::default());
    }
    let row = optional(
        conn.prepare_cached(
            "SELECT claim_mount_flags, selinux_context, ownership FROM volume_mounts \
             WHERE volume = ?1",
        )?
        .query_row([volume], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, Option<String>>(1)?,
                r.get::<_, Option<String>>(2)?,
            ))
        }),
    )?;
    let Some((flags, selinux_context, ownership)) = row else {
        return Ok(VolumeMounts::default());
    };
    decode(&flags, selinux_context, ownership.as_deref())
}

/// The mount settings of the volumes after `after` up to `last` by name that set any,
/// for a listing's chunk; none where the schema does not keep them.
pub fn between(
    conn: &Connection,
    after: &str,
    last: &str,
) -> ApiResult<std::collections::HashMap<String, VolumeMounts>> {
    let mut out = std::collections::HashMap::new();
    if !kept(conn)? {
        return Ok(out);
    }
    let mut stmt = conn.prepare_cached(
        "SELECT volume, claim_mount_flags, selinux_context, ownership FROM volume_mounts \
         WHERE volume > ?1 AND volume <= ?2",
    )?;
    let rows = stmt.query_map(params![after, last], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, Option<String>>(2)?,
            r.get::<_, Option<String>>(3)?,
        ))
    })?;
    for row in rows {
        let (volume, flags, selinux_context, ownership) = row?;
        out.insert(
            volume,
            decode(&flags, selinux_context, ownership.as_deref())?,
        );
    }
    Ok(out)
}

/// A row's columns as the settings: the flags as JSON, the ownership as
/// `Ownership::as_str` writes it.
fn decode(
    flags: &str,
    selinux_context: Option<String>,
    ownership: Option<&str>,
) -> ApiResult<VolumeMounts> {
    let ownership = ownership
        .map(|o| {
            serde_json::from_value(serde_json::Value::from(o))
                .map_err(|_| ApiError::internal(format!("volume_mounts holds ownership `{o}`")))
        })
        .transpose()?;
    Ok(VolumeMounts {
        claim_mount_flags: serde_json::from_str(flags).unwrap_or_default(),
        selinux_context,
        ownership,
    })
}

/// Sets the volume's mount settings (an empty one removes its row). Below the schema that
/// keeps them a non-empty one is refused, never dropped.
pub fn put(ctx: &WriteCtx<'_>, volume: &str, m: &VolumeMounts) -> ApiResult<()> {
    if !kept(ctx.tx)? {
        if m.is_empty() {
            return Ok(());
        }
        return Err(ApiError::invalid(
            "this cluster runs on the previous schema, which does not keep a volume's \
             `claim_mount_flags`, `selinux_context` or `ownership`",
        )
        .with_hint("run `csivol-server upgrade finalize` once every server runs this release"));
    }
    if m.is_empty() {
        exec(
            ctx.tx,
            "DELETE FROM volume_mounts WHERE volume = ?1",
            [volume],
        )?;
        return Ok(());
    }
    exec(
        ctx.tx,
        "INSERT INTO volume_mounts (volume, claim_mount_flags, selinux_context, ownership) \
         VALUES (?1, ?2, ?3, ?4) ON CONFLICT (volume) DO UPDATE SET claim_mount_flags = ?2, \
         selinux_context = ?3, ownership = ?4",
        params![
            volume,
            to_json(&m.claim_mount_flags),
            m.selinux_context,
            m.ownership.map(Ownership::as_str)
        ],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;
    use crate::store::sqlite::db;
    use crate::store::sqlite::migrations::version_of;

    /// With the etcd store a server runs on the schema before the table until `upgrade
    /// finalize`: a volume that sets what the table keeps is refused then, one that sets
    /// nothing is not; once migrated in place, it is kept.
    #[test]
    fn below_its_schema_a_volumes_mount_settings_are_refused_and_after_it_kept() {
        let dir = std::env::temp_dir().join(format!(
            "csivol-volume-mounts-{}-{}",
            std::process::id(),
            Clock::wall().now_ms()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.db");
        let theirs = version_of("CREATE TABLE volume_mounts").expect("the migration");
        let set = VolumeMounts {
            claim_mount_flags: vec!["noatime".into()],
            selinux_context: None,
            ownership: Some(Ownership::Recursive),
        };
        let ownership_only = VolumeMounts {
            ownership: Some(Ownership::Never),
            ..VolumeMounts::default()
        };
        for (schema, kept_after) in [(theirs - 1, false), (theirs, true)] {
            let (mut conn, index) = db::open_at(&path, schema).unwrap();
            let tx = conn.transaction().unwrap();
            let ctx = WriteCtx::new(&tx, index + 1, Clock::wall().now_ms());
            put(&ctx, "v", &VolumeMounts::default()).unwrap();
            // A volume's own `ownership` alone is a setting too: refused below the schema,
            // never dropped.
            let refused = put(&ctx, "v", &ownership_only);
            assert_eq!(refused.is_err(), !kept_after, "{refused:?}");
            if kept_after {
                assert_eq!(get(ctx.tx, "v").unwrap(), ownership_only);
            }
            let refused = put(&ctx, "v", &set);
            assert_eq!(refused.is_err(), !kept_after, "{refused:?}");
            if let Err(e) = refused {
                assert!(e.hint.as_deref().unwrap_or("").contains("upgrade finalize"));
            }
            let expected = if kept_after {
                set.clone()
            } else {
                VolumeMounts::default()
            };
            assert_eq!(get(ctx.tx, "v").unwrap(), expected);
            drop(ctx);
            tx.commit().unwrap();
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
