//! How the etcd store's writer thread follows the other servers: it applies their
//! revisions to the mirror between its own commits (one thread writes the mirror), waking
//! the blocking queries of what they changed; it catches up before running a group again
//! after a conflict, reloads everything when the watch cannot say what changed, and moves
//! the mirror to a new schema when `csivol-server upgrade finalize` raised the cluster's.

use std::time::Duration;

use csivol_etcd_client::{Event, EventType};
use tokio::sync::Notify;

use super::mirror::{self, GenerationValue, Head, KeyKind};
use super::writer::{Remote, WentBack, Writer};
use crate::watch::{Generation, Hub, Key};

impl Writer {
    /// Applies the watch's revisions until the mirror holds `target`; reloads from etcd if
    /// the watch does not bring it in time.
    pub(super) fn catch_up(&mut self, target: i64, hub: &Hub, tokens: &Notify) {
        while self.head_rev < target {
            let next = self.rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(5), self.remote.recv()).await
            });
            match next {
                Ok(Some(r)) => self.apply(r, hub, tokens),
                Ok(None) => return,
                Err(_) => {
                    tracing::warn!(target, "the watch is late; reloading the mirror from etcd");
                    let before = self.head_rev;
                    self.reload(hub, tokens);
                    if self.head_rev == before {
                        return;
                    }
                }
            }
        }
    }

    /// Applies other servers' changes to the mirror and wakes their blocking queries.
    pub(super) fn apply(&mut self, r: Remote, hub: &Hub, tokens: &Notify) {
        match r {
            Remote::Revision(rev, _) if rev <= self.applied => {}
            // A revision was missed: applying the next ones on top would leave the mirror
            // without it, believing it current; only a whole reload catches up.
            Remote::Revision(..) if self.behind.is_some() => self.reload(hub, tokens),
            Remote::Revision(rev, events) => {
                let head = events.iter().find_map(|e| {
                    let kv = e.kv.as_ref()?;
                    (e.r#type != EventType::Delete as i32
                        && self.keys.parse(&kv.key) == Some(KeyKind::Head))
                    .then(|| (Head::parse(&kv.value), kv.mod_revision))
                });
                match head {
                    Some((Ok(h), at)) if h.migrating || h.schema != self.schema => {
                        self.schema_moved(rev, &h, at, hub, tokens);
                    }
                    Some(_) if self.migrating.is_some() => {
                        // The migration ended without raising the schema: what etcd holds
                        // is the rows as they were.
                        self.migrating = None;
                        self.reload(hub, tokens);
                    }
                    // A batch of the migration's rewritten rows, in the layout this mirror
                    // takes on when the migration ends (it reloads then).
                    None if self.migrating.is_some() => self.applied = rev,
                    _ => match self.apply_events(&events) {
                        Ok(applied) => self.applied(rev, applied, hub, tokens),
                        Err(e) => {
                            // Consistent reads wait for this revision: the mirror must get
                            // it, whole.
                            tracing::error!(revision = rev, error = %e, "failed to apply another server's change to the mirror; reloading it from etcd");
                            self.fall_behind(&e);
                            self.reload(hub, tokens);
                        }
                    },
                }
            }
            Remote::WentBack(went) => self.went_back(&went, hub, tokens),
            Remote::Reload(rev, kvs) => {
                let Some(head) = kvs
                    .iter()
                    .find(|kv| self.keys.parse(&kv.key) == Some(KeyKind::Head))
                else {
                    tracing::error!(
                        "etcd holds no head under the prefix: the mirror is not reloaded"
                    );
                    return;
                };
                let at = head.mod_revision;
                let h = match Head::parse(&head.value) {
                    Ok(h) => h,
                    Err(e) => {
                        tracing::error!(error = %e, "the mirror is not reloaded");
                        return;
                    }
                };
                if h.migrating || (h.schema != self.schema && !self.upgrade_mirror(h.schema)) {
                    self.schema_moved(rev, &h, at, hub, tokens);
                    return;
                }
                self.migrating = None;
                let generation = kvs
                    .iter()
                    .find(|kv| self.keys.parse(&kv.key) == Some(KeyKind::Generation))
                    .and_then(|kv| GenerationValue::parse(&kv.value).ok());
                let rows: Vec<_> = kvs
                    .iter()
                    .map(|kv| (kv.key.clone(), kv.value.clone()))
                    .collect();
                let loaded = mirror::load(&mut self.conn, &self.tables, &self.keys, &rows)
                    .and_then(|()| mirror::clear_changes(&self.conn).map_err(|e| e.to_string()));
                match loaded {
                    Ok(()) => {
                        self.caught_up();
                        let applied = Applied {
                            head: Some((h.index, at)),
                            keys: hub.keys(),
                            tokens: true,
                            generation,
                        };
                        self.applied(rev, applied, hub, tokens)
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "failed to reload the mirror from etcd");
                        self.fall_behind(&e);
                    }
                }
            }
        }
    }

    /// The mirror holds revision `rev` now.
    fn applied(&mut self, rev: i64, applied: Applied, hub: &Hub, tokens: &Notify) {
        self.applied = rev;
        if let Some((index, head_rev)) = applied.head {
            self.index = index;
            self.set_head_rev(head_rev);
        }
        if applied.tokens {
            tokens.notify_one();
        }
        if let Some(g) = applied.generation
            && g.generation() != hub.generation()
        {
            // The state is of another generation from here on (a backup restored, etcd's
            // state gone back in time): every client's index is from the one before.
            tracing::warn!(
                generation = g.id,
                index = self.index,
                "the state is of a new generation: it went back in time or was replaced; \
                 every client is answered with its whole state"
            );
            hub.reset(g.generation(), self.index, g.events_from);
        }
        hub.publish(self.index, applied.keys);
    }

    /// etcd's state went back in time under this server (an etcd snapshot restored; its
    /// cluster id changed, or the head's revision is below the one the mirror reflects):
    /// the mirror is loaded again from what etcd holds now, and the state gets a new
    /// generation unless another server already gave it one. Clients are then answered
    /// with their whole state, and the server holds back single-writer volumes until the
    /// nodes have reported what they hold (`lifecycle::settle`).
    pub(super) fn went_back(&mut self, went: &WentBack, hub: &Hub, tokens: &Notify) {
        let key = self.keys.generation();
        let prefix = self.keys.data.clone();
        let head_rev = self.head_rev;
        let looked = self.rt.block_on(async {
            let (_, kvs) = self.client.range_prefix(prefix.as_bytes(), 0).await?;
            let Some(head) = kvs
                .iter()
                .find(|kv| self.keys.parse(&kv.key) == Some(KeyKind::Head))
            else {
                // No cluster under the prefix (deleted): nothing to give a generation to.
                return Ok(Step::Nothing);
            };
            if !went.new_cluster && head.mod_revision >= head_rev {
                // Said twice (the watch and a read found the same): this copy was loaded
                // again already.
                return Ok(Step::Nothing);
            }
            tracing::error!(
                "{}: etcd's state went back in time (an etcd snapshot restored?); reloading it",
                went.why
            );
            let now = kvs.iter().find(|kv| kv.key == key);
            let current = now.and_then(|kv| GenerationValue::parse(&kv.value).ok());
            if current
                .as_ref()
                .is_some_and(|g| g.generation() != hub.generation())
            {
                // Another server gave the state its new generation first.
                return Ok(Step::Reload);
            }
            let mut events_from = 0;
            for kv in &kvs {
                if let Some(KeyKind::Row("events", idx)) = self.keys.parse(&kv.key) {
                    events_from = events_from.max(idx.max(0) as u64);
                }
            }
            let fresh = GenerationValue::new(Generation::mint(), events_from);
            let compare = match now {
                Some(kv) => csivol_etcd_client::mod_revision_is(key.clone(), kv.mod_revision),
                None => csivol_etcd_client::create_revision_is(key.clone(), 0),
            };
            // Compared, so that of two servers finding it at once one mints and the other
            // takes that one.
            let resp = (self.client)
                .txn(
                    vec![compare],
                    vec![csivol_etcd_client::put(key.clone(), fresh.encode(), 0)],
                    vec![],
                )
                .await?;
            if resp.succeeded {
                tracing::info!(generation = fresh.id, "gave the state a new generation");
            }
            Ok::<_, csivol_etcd_client::Error>(Step::Reload)
        });
        match looked {
            Ok(Step::Nothing) => {}
            Ok(Step::Reload) => {
                // Whatever the mirror reflected is past: the revisions restart from etcd's.
                self.applied = 0;
                self.head_rev = 0;
                self.reload(hub, tokens);
                self.rewind.send_replace(self.applied + 1);
                self.mirror_rev.send_replace(self.head_rev);
            }
            Err(e) => {
                tracing::warn!(error = %e, "failed to look at etcd's state after it went back; trying again at the next sign")
            }
        }
    }

    /// A head at revision `at` whose schema is not the mirror's, or that says a migration
    /// is under way: while it is, commits wait and the rows it rewrites are passed over
    /// (the mirror keeps the rows as they were, which mean the same); once the cluster's
    /// schema is raised, the mirror is migrated the same way and loaded again. A schema
    /// this build does not know stops the mirror: reads and writes are refused, saying so.
    fn schema_moved(&mut self, rev: i64, h: &Head, at: i64, hub: &Hub, tokens: &Notify) {
        if h.migrating {
            if self.migrating.is_none() {
                tracing::info!(
                    to = h.schema,
                    "the cluster's rows are being rewritten for schema version {}: writes wait until it is done",
                    h.schema
                );
                self.migrating = Some(std::time::Instant::now());
            }
            let applied = Applied {
                head: Some((h.index, at)),
                keys: Vec::new(),
                tokens: false,
                generation: None,
            };
            self.applied(rev, applied, hub, tokens);
            return;
        }
        if self.upgrade_mirror(h.schema) {
            self.reload(hub, tokens);
        } else {
            self.applied = rev;
        }
    }

    /// Migrates the mirror to `schema`, the next version and one this build knows; or
    /// stops it.
    fn upgrade_mirror(&mut self, schema: i64) -> bool {
        if schema == self.schema {
            return true;
        }
        let known = crate::db::schema_version();
        if schema != self.schema + 1 || schema > known {
            self.halt(format!(
                "the cluster moved to schema version {schema}, which this csivol-server does \
                 not run (it knows up to {known}, and runs on {}): upgrade it to the release \
                 the other servers run",
                self.schema
            ));
            return false;
        }
        let migrated = crate::db::migrate(&mut self.conn, self.schema, schema)
            .map_err(|e| format!("{e:#}"))
            .and_then(|()| mirror::tables(&self.conn).map_err(|e| e.to_string()))
            .and_then(|tables| {
                mirror::install_triggers(&self.conn, &tables).map_err(|e| e.to_string())?;
                Ok(tables)
            });
        match migrated {
            Ok(tables) => {
                tracing::info!(
                    from = self.schema,
                    to = schema,
                    "the cluster runs schema version {schema} now: this server migrated its copy of the state"
                );
                self.tables = tables;
                self.schema = schema;
                self.schema_shown
                    .store(schema, std::sync::atomic::Ordering::Relaxed);
                self.migrating = None;
                true
            }
            Err(e) => {
                self.halt(format!(
                    "failed to migrate this server's copy of the state to schema version {schema}: {e}"
                ));
                false
            }
        }
    }

    /// The mirror missed a revision (it could not apply it, nor reload): until a reload
    /// succeeds, reads and writes are refused, and the watch's next revisions are not
    /// applied on top of the gap but tried as a reload. Writing from a mirror with a gap
    /// would put rows over the ones it missed.
    fn fall_behind(&mut self, error: &str) {
        if self.behind.is_some() {
            return;
        }
        let why = format!(
            "this server's copy of the state missed a change of another server ({error}); \
             it answers again once it has reloaded the state from etcd\n\
             hint: the other servers answer meanwhile; check this server's disk"
        );
        let mut halted = self.halted.lock().unwrap_or_else(|e| e.into_inner());
        if halted.is_none() {
            *halted = Some(why.clone());
        }
        self.behind = Some(why);
    }

    /// A reload succeeded: a mirror that had fallen behind serves again.
    fn caught_up(&mut self) {
        let Some(why) = self.behind.take() else {
            return;
        };
        let mut halted = self.halted.lock().unwrap_or_else(|e| e.into_inner());
        if halted.as_deref() == Some(why.as_str()) {
            *halted = None;
        }
        tracing::info!("reloaded the state from etcd: this server's copy is whole again");
    }

    /// The mirror no longer follows etcd: reads and writes are refused with `why`.
    fn halt(&mut self, why: String) {
        tracing::error!("{why}");
        *self.halted.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
    }

    /// The mirror reflects `head` at `rev` now: consistent reads waiting for it go on.
    pub(super) fn set_head_rev(&mut self, rev: i64) {
        self.head_rev = rev;
        self.mirror_rev.send_if_modified(|r| {
            let moved = *r < rev;
            *r = (*r).max(rev);
            moved
        });
    }

    /// Replaces the mirror's content with etcd's current state.
    pub(super) fn reload(&mut self, hub: &Hub, tokens: &Notify) {
        let keys = self.keys.clone();
        match self
            .rt
            .block_on(self.client.range_prefix(keys.data.as_bytes(), 0))
        {
            Ok((rev, kvs)) => self.apply(Remote::Reload(rev, kvs), hub, tokens),
            Err(e) => tracing::warn!(error = %e, "failed to reload the mirror"),
        }
    }

    /// One revision's events in one mirror transaction; the new head and the woken keys.
    fn apply_events(&mut self, events: &[Event]) -> Result<Applied, String> {
        let tx = self.conn.transaction().map_err(|e| e.to_string())?;
        let mut head = None;
        let mut wake = Vec::new();
        let mut shipped = None;
        let mut tokens = false;
        let mut generation = None;
        // Deletes first: a revision may delete a row and insert another with its key.
        let mut ordered: Vec<&Event> = events
            .iter()
            .filter(|e| e.r#type == EventType::Delete as i32)
            .collect();
        ordered.extend(
            events
                .iter()
                .filter(|e| e.r#type != EventType::Delete as i32),
        );
        for ev in ordered {
            let Some(kv) = &ev.kv else { continue };
            let delete = ev.r#type == EventType::Delete as i32;
            match self.keys.parse(&kv.key) {
                Some(KeyKind::Head) if !delete => {
                    let h = Head::parse(&kv.value)?;
                    head = Some((h.index, kv.mod_revision));
                    shipped = h.keys;
                }
                Some(KeyKind::Seq) if !delete => mirror::apply_seq(&tx, &kv.value)?,
                Some(KeyKind::Generation) if !delete => {
                    generation = Some(GenerationValue::parse(&kv.value)?);
                }
                Some(KeyKind::Row(name, rid)) => {
                    let Some(t) = self.tables.iter().find(|t| t.name == name) else {
                        return Err(format!("a row of an unknown table `{name}`"));
                    };
                    if let Some(old) = mirror::read_row(&tx, t, rid).map_err(|e| e.to_string())? {
                        mirror::wake_keys(t, &old, &mut wake);
                    }
                    if delete {
                        mirror::delete_row(&tx, t, rid).map_err(|e| e.to_string())?;
                    } else {
                        let v = mirror::decode_row(t, &kv.value)?;
                        mirror::wake_keys(t, &v, &mut wake);
                        mirror::put_row(&tx, t, rid, v).map_err(|e| e.to_string())?;
                    }
                    tokens |= name == "tokens";
                }
                _ => {}
            }
        }
        mirror::clear_changes(&tx).map_err(|e| e.to_string())?;
        tx.commit().map_err(|e| e.to_string())?;
        // The committing server's own keys: a claim's change reaches its node's agent as
        // that volume's entries, as it does on the server that made it.
        Ok(Applied {
            head,
            keys: shipped.unwrap_or(wake),
            tokens,
            generation,
        })
    }
}

/// What [`Writer::went_back`] found to do.
enum Step {
    Nothing,
    Reload,
}

/// What applying changes gave.
struct Applied {
    /// The new head: index, revision.
    head: Option<(u64, i64)>,
    /// The keys to wake.
    keys: Vec<Key>,
    /// Whether the tokens changed.
    tokens: bool,
    /// The state's generation, when the changes put it.
    generation: Option<GenerationValue>,
}
