//! The etcd store's writer thread: a group of write requests runs on the mirror inside a
//! SQLite transaction, the rows it changed go to etcd in ONE transaction that holds only if
//! `<prefix>/d/head` is still at the revision the mirror reflects, and only then does the
//! mirror commit and the requests get their answers. When another server committed first,
//! the mirror rolls back, catches up from the watch and the group runs again; changes made
//! by other servers are applied here too, between groups, so that one thread writes the
//! mirror.

use std::time::Duration;

use csivol_etcd_client::{Client, Event, EventType, KeyValue};
use rusqlite::Connection;
use tokio::runtime::Handle;
use tokio::sync::mpsc;

use super::mirror::{self, KeyKind, Keys, Table};
use crate::db::{BoxJob, GroupEffects, WriterParts, run_group, take_group};
use crate::error::ApiError;
use crate::watch::Key;

/// What the watch hands the writer.
#[derive(Debug)]
pub enum Remote {
    /// Every change of one etcd revision under `<prefix>/d/`.
    Revision(i64, Vec<Event>),
    /// The watch fell behind a compaction: the whole prefix at one revision.
    Reload(i64, Vec<KeyValue>),
}

/// Most times a group runs again because other servers kept committing first.
const MAX_ATTEMPTS: u32 = 64;

pub struct Writer {
    pub conn: Connection,
    pub tables: Vec<Table>,
    pub keys: Keys,
    pub client: Client,
    pub rt: Handle,
    pub remote: mpsc::UnboundedReceiver<Remote>,
    /// The change index the mirror holds.
    pub index: u64,
    /// The revision `head` was last put at, as the mirror reflects it (the commit's compare).
    pub head_rev: i64,
    /// The last etcd revision applied (revisions up to it are skipped by the watch).
    pub applied: i64,
    /// Most operations in one etcd transaction (etcd's `--max-txn-ops`).
    pub max_ops: usize,
    /// This server's leadership, and the election key its once-only writes compare.
    pub leadership: super::Leadership,
    pub leader_key: Vec<u8>,
}

/// Answers the once-only requests of `group` with `why` and returns the others.
fn refuse_led(group: Vec<BoxJob>, why: &str) -> Vec<BoxJob> {
    let (led, rest): (Vec<_>, Vec<_>) = group.into_iter().partition(|j| j.led());
    for job in led {
        job.finish(Some(ApiError::unavailable(why)));
    }
    rest
}

enum Msg {
    Job(BoxJob),
    Remote(Remote),
    Closed,
}

enum Outcome {
    Committed(GroupEffects, i64),
    Conflict(i64),
    /// The group holds once-only requests and this server no longer leads.
    Deposed,
    /// More operations than one transaction may hold (rolled back, nothing sent).
    TooBig(usize),
    /// Not committed (or not known to be): why, and whether etcd could not be reached,
    /// which a member's death causes until the client moves to another member.
    Failed(String, bool),
}

/// How long a group keeps trying when etcd cannot be reached, before its requests are
/// answered `unavailable`.
const RETRY_UNREACHABLE: Duration = Duration::from_secs(3);

/// What the writer answers through: the hub, the error slot, the tokens' bell.
struct Ends {
    hub: std::sync::Arc<crate::watch::Hub>,
    write_error: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    tokens_changed: std::sync::Arc<tokio::sync::Notify>,
}

impl Ends {
    fn set_error(&self, e: Option<String>) {
        let mut slot = self.write_error.lock().unwrap_or_else(|e| e.into_inner());
        if e.is_none()
            && let Some(was) = slot.take()
        {
            tracing::info!(was = %was, "etcd accepts writes again");
        }
        if e.is_some() {
            *slot = e;
        }
    }
}

impl Writer {
    pub fn run(mut self, parts: WriterParts) {
        let WriterParts {
            mut rx,
            hub,
            write_error,
            tokens_changed,
        } = parts;
        let ends = Ends {
            hub,
            write_error,
            tokens_changed,
        };
        loop {
            let msg = self.rt.block_on(async {
                tokio::select! {
                    biased;
                    r = self.remote.recv() => r.map_or(Msg::Closed, Msg::Remote),
                    j = rx.recv() => j.map_or(Msg::Closed, Msg::Job),
                }
            });
            let first = match msg {
                Msg::Closed => return,
                Msg::Remote(r) => {
                    self.apply(r, &ends.hub, &ends.tokens_changed);
                    continue;
                }
                Msg::Job(j) => j,
            };
            let group = take_group(first, &mut rx);
            self.commit(group, &ends);
        }
    }

    /// Commits `group` (again after conflicts; in halves when it changes more keys than one
    /// etcd transaction may hold) and answers its requests.
    fn commit(&mut self, mut group: Vec<BoxJob>, ends: &Ends) {
        let mut attempts = 0;
        let started = std::time::Instant::now();
        loop {
            while let Ok(r) = self.remote.try_recv() {
                self.apply(r, &ends.hub, &ends.tokens_changed);
            }
            // Once-only requests commit only in this server's current term.
            let term = self.leadership.term();
            if term.is_none() && group.iter().any(|j| j.led()) {
                group = refuse_led(
                    group,
                    "this server does not lead; once-only work runs on the leader",
                );
                if group.is_empty() {
                    return;
                }
            }
            attempts += 1;
            match self.attempt(&mut group, term) {
                Outcome::Committed(effects, rev) => {
                    self.index += 1;
                    self.head_rev = rev;
                    self.applied = self.applied.max(rev);
                    ends.set_error(None);
                    for f in effects.on_commit {
                        f();
                    }
                    ends.hub.publish(self.index, effects.touched);
                    for job in group {
                        job.finish(None);
                    }
                    return;
                }
                Outcome::Deposed => {
                    group = refuse_led(group, "this server no longer leads");
                    if group.is_empty() {
                        return;
                    }
                }
                Outcome::TooBig(ops) if group.len() > 1 => {
                    tracing::debug!(
                        ops,
                        requests = group.len(),
                        "too many operations for one etcd transaction: committing in halves"
                    );
                    let second = group.split_off(group.len() / 2);
                    self.commit(group, ends);
                    self.commit(second, ends);
                    return;
                }
                Outcome::TooBig(ops) => {
                    let e = format!(
                        "this change is {ops} etcd operations, more than one etcd transaction \
                         may hold here ({}); raise etcd's --max-txn-ops and the servers' \
                         --etcd-max-txn-ops",
                        self.max_ops
                    );
                    for job in group {
                        job.finish(Some(ApiError::unavailable(e.clone())));
                    }
                    return;
                }
                Outcome::Conflict(target) if attempts < MAX_ATTEMPTS => {
                    self.catch_up(target, &ends.hub, &ends.tokens_changed);
                }
                Outcome::Conflict(_) => {
                    for job in group {
                        job.finish(Some(ApiError::unavailable(
                            "other servers kept committing first; try again",
                        )));
                    }
                    return;
                }
                Outcome::Failed(e, true) if started.elapsed() < RETRY_UNREACHABLE => {
                    // Committed or not, the next attempt finds out: a commit that landed
                    // moved `head`, so the group runs again on what it wrote.
                    tracing::debug!(error = %e, "etcd unreachable; trying again");
                    std::thread::sleep(Duration::from_millis(100));
                }
                Outcome::Failed(e, _) => {
                    tracing::error!(error = %e, "etcd commit failed; the group's requests are refused");
                    ends.set_error(Some(e.clone()));
                    for job in group {
                        job.finish(Some(ApiError::unavailable(format!(
                            "the state could not be committed to etcd: {e}"
                        ))));
                    }
                    return;
                }
            }
        }
    }

    /// Runs the group on the mirror and commits it to etcd, then to the mirror.
    fn attempt(&mut self, group: &mut [BoxJob], term: Option<i64>) -> Outcome {
        let next = self.index + 1;
        let fence = term.filter(|_| group.iter().any(|j| j.led()));
        let result = (|| -> Result<Outcome, String> {
            let tx = self.conn.transaction().map_err(|e| e.to_string())?;
            mirror::clear_changes(&tx).map_err(|e| e.to_string())?;
            let effects = run_group(&tx, group, next)?;
            let mut ops = Vec::new();
            for (name, rid) in mirror::changes(&tx).map_err(|e| e.to_string())? {
                let Some(t) = self.tables.iter().find(|t| t.name == name) else {
                    continue;
                };
                let key = self.keys.row(&name, rid);
                ops.push(
                    match mirror::read_row(&tx, t, rid).map_err(|e| e.to_string())? {
                        Some(v) => csivol_etcd_client::put(key, mirror::encode_row(v), 0),
                        None => csivol_etcd_client::delete(key),
                    },
                );
            }
            let seq = mirror::seq_value(&tx).map_err(|e| e.to_string())?;
            ops.push(csivol_etcd_client::put(self.keys.seq(), seq, 0));
            ops.push(csivol_etcd_client::put(
                self.keys.head(),
                mirror::head_value(next),
                0,
            ));
            if ops.len() > self.max_ops {
                return Ok(Outcome::TooBig(ops.len()));
            }
            let head = self.keys.head();
            let mut compare = vec![csivol_etcd_client::mod_revision_is(
                head.clone(),
                self.head_rev,
            )];
            if let Some(t) = fence {
                compare.push(csivol_etcd_client::create_revision_is(
                    self.leader_key.clone(),
                    t,
                ));
            }
            let answer = self.rt.block_on(self.client.txn(
                compare,
                ops,
                vec![
                    csivol_etcd_client::get(head.clone()),
                    csivol_etcd_client::get(self.leader_key.clone()),
                ],
            ));
            match answer {
                Err(e) => {
                    let unreachable = matches!(e, csivol_etcd_client::Error::Unavailable(_));
                    Ok(Outcome::Failed(e.to_string(), unreachable))
                }
                Ok(resp) if resp.succeeded => {
                    let rev = resp.header.map_or(0, |h| h.revision);
                    if let Err(e) = tx.commit() {
                        // etcd has it: the watch brings it back into the mirror.
                        tracing::warn!(error = %e, "the mirror failed to commit what etcd committed; the watch catches up");
                        return Ok(Outcome::Committed(effects, self.head_rev));
                    }
                    Ok(Outcome::Committed(effects, rev))
                }
                Ok(resp) => {
                    let read = csivol_etcd_client::read_results(&resp);
                    let find = |k: &[u8]| read.iter().find(|kv| kv.key == k);
                    if let Some(t) = fence
                        && find(&self.leader_key).map(|kv| kv.create_revision) != Some(t)
                    {
                        return Ok(Outcome::Deposed);
                    }
                    Ok(Outcome::Conflict(
                        find(&head).map_or(0, |kv| kv.mod_revision),
                    ))
                }
            }
        })();
        result.unwrap_or_else(|e| Outcome::Failed(e, false))
    }

    /// Applies the watch's revisions until the mirror holds `target`; reloads from etcd if
    /// the watch does not bring it in time.
    fn catch_up(&mut self, target: i64, hub: &crate::watch::Hub, tokens: &tokio::sync::Notify) {
        while self.head_rev < target {
            let next = self.rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(5), self.remote.recv()).await
            });
            match next {
                Ok(Some(r)) => self.apply(r, hub, tokens),
                Ok(None) => return,
                Err(_) => {
                    tracing::warn!(target, "the watch is late; reloading the mirror from etcd");
                    let keys = self.keys.clone();
                    match self
                        .rt
                        .block_on(self.client.range_prefix(keys.data.as_bytes(), 0))
                    {
                        Ok((rev, kvs)) => self.apply(Remote::Reload(rev, kvs), hub, tokens),
                        Err(e) => {
                            tracing::warn!(error = %e, "failed to reload the mirror");
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Applies other servers' changes to the mirror and wakes their blocking queries.
    fn apply(&mut self, r: Remote, hub: &crate::watch::Hub, tokens: &tokio::sync::Notify) {
        let (rev, result) = match r {
            Remote::Revision(rev, _) if rev <= self.applied => return,
            Remote::Revision(rev, events) => (rev, self.apply_events(&events)),
            Remote::Reload(rev, kvs) => {
                let rows: Vec<_> = kvs
                    .iter()
                    .map(|kv| (kv.key.clone(), kv.value.clone()))
                    .collect();
                let head = kvs
                    .iter()
                    .find(|kv| self.keys.parse(&kv.key) == Some(KeyKind::Head));
                let result = mirror::load(&mut self.conn, &self.tables, &self.keys, &rows)
                    .and_then(|()| mirror::clear_changes(&self.conn).map_err(|e| e.to_string()))
                    .and_then(|()| {
                        let h = head.ok_or("etcd holds no head")?;
                        let (index, _) = mirror::parse_head(&h.value)?;
                        Ok((Some((index, h.mod_revision)), hub.keys(), true))
                    });
                (rev, result)
            }
        };
        match result {
            Ok((head, keys, tokens_changed)) => {
                self.applied = rev;
                if let Some((index, head_rev)) = head {
                    self.index = index;
                    self.head_rev = head_rev;
                }
                if tokens_changed {
                    tokens.notify_one();
                }
                hub.publish(self.index, keys);
            }
            Err(e) => {
                tracing::error!(revision = rev, error = %e, "failed to apply another server's change to the mirror")
            }
        }
    }

    /// One revision's events in one mirror transaction; the new head and the woken keys.
    fn apply_events(&mut self, events: &[Event]) -> Result<Applied, String> {
        let tx = self.conn.transaction().map_err(|e| e.to_string())?;
        let mut head = None;
        let mut wake = Vec::new();
        let mut tokens = false;
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
                    let (index, _) = mirror::parse_head(&kv.value)?;
                    head = Some((index, kv.mod_revision));
                }
                Some(KeyKind::Seq) if !delete => mirror::apply_seq(&tx, &kv.value)?,
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
        Ok((head, wake, tokens))
    }
}

/// What applying changes gave: the new head (index, revision), the keys to wake, and
/// whether the tokens changed.
type Applied = (Option<(u64, i64)>, Vec<Key>, bool);
