//! The server's background work: what runs on every server (token use, and with the etcd
//! store the tokens other servers made and the heartbeats they heard), and the once-only
//! work that runs on the leader alone (liveness expiry, controller-operation scheduling,
//! lease expiry, event pruning, request-key and tombstone pruning, the fence policy). With the SQLite store the one server
//! always leads.

use std::sync::Arc;
use std::time::{Duration, Instant};

use csivol_api::NodeStatus;

use crate::app::App;
use crate::auth::Tokens;
use crate::clock::Clock;
use crate::error::ApiResult;
use crate::fence::{self, Fencing};
use crate::lifecycle::{self, Limits};
use crate::liveness::Liveness;
use crate::store::Snapshot;
use crate::store::replicated::{self, Cluster, Leadership};
use crate::store::sqlite::db::Db;

/// Starts the background tasks; the returned handles are aborted when serving stops.
/// `listen` is where this server serves (announced to the other servers with etcd).
pub fn spawn(
    app: &App,
    cluster: Option<Cluster>,
    listen: String,
) -> Vec<tokio::task::JoinHandle<()>> {
    let (db, live, clock) = (&app.db, &app.live, &app.clock);
    let mut tasks = vec![
        tokio::spawn(persist_token_use(Arc::clone(&app.tokens), db.clone())),
        tokio::spawn(settle_after_reset(
            db.clone(),
            Arc::clone(live),
            clock.clone(),
        )),
    ];
    let leadership = match cluster.clone() {
        Some(c) => {
            tasks.push(tokio::spawn(replicated::presence::announce(
                c.clone(),
                listen,
            )));
            tasks.push(tokio::spawn(compact_history(c.clone())));
            tasks.push(tokio::spawn(replicated::forward_heard(
                c.clone(),
                Arc::clone(live),
            )));
            tasks.push(tokio::spawn(replicated::follow_heard(
                c.clone(),
                Arc::clone(live),
                clock.clone(),
            )));
            tasks.push(tokio::spawn(reload_tokens(
                db.clone(),
                Arc::clone(&app.tokens),
            )));
            tasks.push(tokio::spawn(follow_nodes(
                db.clone(),
                Arc::clone(live),
                c.leadership.clone(),
            )));
            c.leadership
        }
        None => Leadership::alone(),
    };
    let duties = Duties {
        db: db.clone(),
        live: Arc::clone(live),
        limits: app.limits.clone(),
        clock: clock.clone(),
        fencing: app.fencing(),
    };
    tasks.push(tokio::spawn(lead(duties, leadership, cluster)));
    tasks
}

/// What the once-only work uses: the state, the nodes' liveness, the limits its writes
/// are held to, the server's clock, and fencing.
struct Duties {
    db: Db,
    live: Arc<Liveness>,
    limits: Limits,
    clock: Clock,
    fencing: Fencing,
}

/// Runs the once-only work while this server leads, and stops it when it does not.
async fn lead(duties: Duties, mut leadership: Leadership, cluster: Option<Cluster>) {
    let Duties {
        db,
        live,
        limits,
        clock,
        fencing,
    } = duties;
    loop {
        leadership.wait_for(true).await;
        // Every node gets a full TTL from now: taking over never marks a node lost by itself.
        match db.read(node_statuses).await {
            Ok(nodes) => live.restart_clocks(nodes),
            Err(e) => tracing::warn!(error = %e, "failed to read the nodes at takeover"),
        }
        let tasks = [
            tokio::spawn(watch_liveness(
                db.clone(),
                Arc::clone(&live),
                (limits.clone(), clock.clone()),
                cluster.clone(),
            )),
            tokio::spawn(schedule_due_ops(db.clone(), limits.clone(), clock.clone())),
            tokio::spawn(prune_events(db.clone(), limits.clone())),
            tokio::spawn(prune_retries(db.clone(), limits.clone())),
            tokio::spawn(expire_leases(db.clone(), limits.clone(), clock.clone())),
            tokio::spawn(end_lingers(db.clone(), limits.clone(), clock.clone())),
            tokio::spawn(fence::auto_fence(fencing.clone())),
            tokio::spawn(settle_progress(db.clone(), limits.clone(), clock.clone())),
        ];
        leadership.wait_for(false).await;
        for t in tasks {
            t.abort();
        }
    }
}

/// How much etcd history the leader keeps: revisions a lagging watch can still resume from.
const HISTORY_KEPT: i64 = 10_000;

/// etcd keeps every version of every key until compacted; the leader drops the history
/// older than [`HISTORY_KEPT`] revisions every five minutes (a server whose watch was
/// further behind reloads its mirror).
async fn compact_history(cluster: Cluster) {
    let mut tick = tokio::time::interval(Duration::from_secs(300));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if !cluster.leadership.is_leader() {
            continue;
        }
        let head = format!("{}/d/head", cluster.prefix).into_bytes();
        let revision = match cluster.client.get(&head).await {
            // A schema migration reads the rows as of its start: that history stays.
            Ok((_, Some(kv)))
                if replicated::mirror::Head::parse(&kv.value).is_ok_and(|h| h.migrating) =>
            {
                continue;
            }
            Ok((rev, _)) => rev - HISTORY_KEPT,
            Err(_) => continue,
        };
        if revision > 0
            && let Err(e) = cluster.client.compact(revision).await
        {
            tracing::debug!(error = %e, revision, "etcd compaction failed");
        }
    }
}

/// Every node and whether the database records it lost (or fenced).
pub fn node_statuses(c: &impl Snapshot) -> ApiResult<Vec<(String, bool)>> {
    Ok(c.nodes(None)?
        .into_iter()
        .map(|n| (n.name, n.status != NodeStatus::Ready))
        .collect())
}

/// A server that does not lead follows the losses the leader recorded (and the returns
/// other servers recorded), so that its answers to heartbeats agree with the database.
async fn follow_nodes(db: Db, live: Arc<Liveness>, leadership: Leadership) {
    let mut tick = tokio::time::interval(live.check_interval().max(Duration::from_millis(100)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if leadership.is_leader() {
            continue;
        }
        if let Ok(nodes) = db.read(node_statuses).await {
            live.follow(nodes);
        }
    }
}

/// The state went back in time under this server (etcd's did: an etcd snapshot restored,
/// or a backup restored into the prefix): the nodes are to say what they hold before the
/// volumes two nodes must not hold go anywhere (`lifecycle::settle`). Every server of the
/// cluster that sees the new generation says so; the first one's write counts.
async fn settle_after_reset(db: Db, live: Arc<Liveness>, clock: Clock) {
    let mut generations = db.hub.generations();
    while generations.changed().await.is_ok() {
        let generation = *generations.borrow_and_update();
        // Retried until recorded (etcd may be coming back as the state went back), unless
        // the generation moves on meanwhile.
        let mut failures = 0u32;
        while db.hub.generation() == generation {
            let window_end = clock.now_ms() + live.ttl().as_millis() as i64;
            let written = db
                .write(move |ctx| lifecycle::settle::begin(ctx, generation, window_end))
                .await;
            match written {
                Ok(()) => {
                    db.hub.settled(generation);
                    break;
                }
                Err(e) => {
                    failures += 1;
                    if failures == 1 || failures.is_power_of_two() {
                        tracing::error!(error = %e.message, "failed to record that the state went back in time; retrying");
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        }
    }
}

/// Moves a restored state on while it settles (`lifecycle::settle::progress`): closes the
/// window for the nodes it does not know once it passed, moves on what is no longer held
/// back a few volumes at a time, ends settling; then forgets its markers.
async fn settle_progress(db: Db, limits: Limits, clock: Clock) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = clock.now_ms();
        let due = db
            .read(move |c| lifecycle::settle::progress_due(c, now))
            .await;
        if !matches!(due, Ok(true)) {
            continue;
        }
        loop {
            let limits = limits.clone();
            let step = db
                .write_led(move |ctx| lifecycle::settle::progress(ctx, &limits))
                .await;
            match step {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    tracing::warn!(error = %e.message, "failed to move a restored state on; retrying");
                    break;
                }
            }
        }
    }
}

/// Reloads the tokens when another server changed them.
async fn reload_tokens(db: Db, tokens: Arc<Tokens>) {
    loop {
        db.tokens_changed.notified().await;
        match db.read(Tokens::load).await {
            Ok(t) => tokens.replace_with(t),
            Err(e) => tracing::warn!(error = %e, "failed to reload the tokens"),
        }
    }
}

/// Records once a minute when tokens were last used (`csivol token list` also does).
async fn persist_token_use(tokens: Arc<Tokens>, db: Db) {
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = tokens.persist_last_used(&db).await {
            tracing::debug!(error = %e, "failed to record when tokens were last used; retrying");
        }
    }
}

/// Marks nodes lost when their heartbeats stop, and records each loss in the database,
/// retrying until it is recorded. While the database refuses writes it also probes it once
/// a second, so that health turns back to `ok` without waiting for a client's write.
async fn watch_liveness(
    db: Db,
    live: Arc<Liveness>,
    (limits, clock): (Limits, Clock),
    cluster: Option<Cluster>,
) {
    let mut tick = tokio::time::interval(live.check_interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_probe = tokio::time::Instant::now();
    loop {
        tick.tick().await;
        let mut due: Vec<_> = live
            .expire()
            .into_iter()
            .filter(|d| live.still_lost(d))
            .collect();
        // With several servers, the silence is confirmed with etcd first: another server
        // may have passed on a heartbeat this one has not seen.
        if let Some(c) = cluster.as_ref().filter(|_| !due.is_empty()) {
            let nodes: Vec<&str> = due.iter().map(|d| d.node.as_str()).collect();
            let asked = replicated::heard_since(c, &live, &nodes);
            match tokio::time::timeout(live.ttl(), asked).await {
                Ok(Ok(heard)) => due.retain(|d| {
                    let alive = heard.contains(&d.node);
                    if alive {
                        live.alive_after_all(d);
                        tracing::info!(
                            node = d.node,
                            "another server heard from the node meanwhile; it is not lost"
                        );
                    }
                    !alive
                }),
                Ok(Err(_)) | Err(_) => {
                    for d in due.drain(..) {
                        live.record_failed(&d);
                        if d.attempts == 0 {
                            tracing::warn!(
                                node = d.node,
                                "cannot confirm with etcd that a silent node is lost; retrying"
                            );
                        }
                    }
                }
            }
        }
        // Heard from meanwhile (the watch of `seen/` brought another server's heartbeat
        // while etcd was asked): not lost after all.
        due.retain(|d| live.still_lost(d));
        for due in due {
            let limits = limits.clone();
            let (ttl, grace) = (live.ttl(), live.planned_stop_grace());
            let n = due.node.clone();
            match db
                .write_led(move |ctx| lifecycle::expire_node(ctx, &n, ttl, grace, &limits))
                .await
            {
                Ok(lifecycle::Expiry::StoppedUntil(until_ms)) => {
                    let left = until_ms.saturating_sub(clock.now_ms()).max(0) as u64;
                    live.defer(&due, Instant::now() + Duration::from_millis(left));
                }
                Ok(lifecycle::Expiry::Done) => {
                    live.recorded(&due);
                    if due.attempts > 0 {
                        tracing::info!(
                            node = due.node,
                            attempts = due.attempts + 1,
                            "recorded a lost node after the database refused it"
                        );
                    }
                }
                Err(e) => {
                    live.record_failed(&due);
                    if due.attempts == 0 {
                        tracing::error!(node = due.node, error = %e, "failed to record a lost node; retrying until it is recorded");
                    }
                }
            }
        }
        if db.write_error().is_some() && last_probe.elapsed() >= Duration::from_secs(1) {
            last_probe = tokio::time::Instant::now();
            // An empty write still commits (the change index), which is the probe.
            let _ = db.write(|_| Ok(())).await;
        }
    }
}

/// How often the leader looks at every operation held for a volume's release: each move
/// of a volume looks at its own at once, so this only catches a volume moved by a path
/// that does not advance it, or by a server of a release that holds none.
const HELD_SWEEP_EVERY: u32 = 10;

/// Hands out controller operations whose backoff has passed, and every few seconds
/// releases (or drops) operations held for a release that has finished.
async fn schedule_due_ops(db: Db, limits: Limits, clock: Clock) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut ticks: u32 = 0;
    loop {
        tick.tick().await;
        ticks = ticks.wrapping_add(1);
        if ticks.is_multiple_of(HELD_SWEEP_EVERY) {
            sweep_held(&db, &limits).await;
            sweep_job_volumes(&db, &limits, clock.now_ms()).await;
        }
        let now = clock.now_ms();
        let plugins = match db
            .read(move |c| lifecycle::plugins_with_due_ops(c, now))
            .await
        {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "failed to look for due controller operations");
                continue;
            }
        };
        for plugin in plugins {
            let limits = limits.clone();
            if let Err(e) = db
                .write_led(move |ctx| lifecycle::schedule_ops(ctx, &plugin, &limits))
                .await
            {
                tracing::warn!(error = %e, "failed to schedule controller operations");
            }
        }
    }
}

/// [`lifecycle::resume_all_held`], after a read that finds any (a write only then).
async fn sweep_held(db: &Db, limits: &Limits) {
    match db.read(|c| c.volumes_with_held_ops()).await {
        Ok(v) if v.is_empty() => return,
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(error = %e, "failed to look for operations held for a release");
            return;
        }
    }
    let limits = limits.clone();
    if let Err(e) = db
        .write_led(move |ctx| lifecycle::resume_all_held(ctx, &limits))
        .await
    {
        tracing::warn!(error = %e, "failed to move operations held for a release on");
    }
}

/// Deletes the per-job volumes nothing holds any more ([`lifecycle::collect_job_volumes`]),
/// after a read that finds any: each move of a volume looks at its own at once, so this
/// catches a failed job's volume whose inspection time ran out.
async fn sweep_job_volumes(db: &Db, limits: &Limits, now: i64) {
    match db
        .read(move |c| lifecycle::any_job_volume_due(c, now))
        .await
    {
        Ok(false) => return,
        Ok(true) => {}
        Err(e) => {
            tracing::warn!(error = %e, "failed to look for per-job volumes to delete");
            return;
        }
    }
    let limits = limits.clone();
    if let Err(e) = db
        .write_led(move |ctx| lifecycle::collect_job_volumes(ctx, &limits))
        .await
    {
        tracing::warn!(error = %e, "failed to delete per-job volumes nothing holds");
    }
}

/// Releases claims whose lease ran out (checked twice a second; a write only when due),
/// and serves the pools' lines every few seconds when an offer to one would grant or hold
/// a member (looked at read only): a slot freed on a waiting claim's node, or its wait
/// passing `pool_hold_after`, changes no member.
async fn expire_leases(db: Db, limits: Limits, clock: Clock) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut ticks = 0u32;
    loop {
        tick.tick().await;
        let now = clock.now_ms();
        ticks = ticks.wrapping_add(1);
        let lines = ticks.is_multiple_of(10);
        let check = limits.clone();
        let due = db.read(move |c| {
            Ok(c.any_lease_expired(now)?
                || c.pool_line(None)?
                    .iter()
                    .any(|w| w.expires_at.is_some_and(|t| t <= now))
                || (lines && lifecycle::lines_due(c, now, &check)?))
        });
        match due.await {
            Ok(false) => continue,
            Ok(true) => {}
            Err(e) => {
                tracing::warn!(error = %e, "failed to look for expired leases");
                continue;
            }
        }
        let limits = limits.clone();
        if let Err(e) = db
            .write_led(move |ctx| lifecycle::expire_leases(ctx, &limits))
            .await
        {
            tracing::warn!(error = %e, "failed to release claims whose lease ran out; retrying");
        }
    }
}

/// Ends the stagings kept after a release whose linger ran out (checked twice a second; a
/// write only when one is due).
async fn end_lingers(db: Db, limits: Limits, clock: Clock) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = clock.now_ms();
        match db.read(move |c| lifecycle::any_linger_due(c, now)).await {
            Ok(false) => continue,
            Ok(true) => {}
            Err(e) => {
                tracing::warn!(error = %e, "failed to look for stagings whose linger ran out");
                continue;
            }
        }
        let limits = limits.clone();
        if let Err(e) = db
            .write_led(move |ctx| lifecycle::end_due_lingers(ctx, &limits))
            .await
        {
            tracing::warn!(error = %e, "failed to end stagings whose linger ran out; retrying");
        }
    }
}

/// Drops the request keys and claim tombstones older than the request memory (which
/// count as forgotten from then on, pruned or not), in batches that each fit one etcd
/// transaction, pruning again at once while a batch is full. It looks a few times per
/// memory, at least once a minute.
async fn prune_retries(db: Db, limits: Limits) {
    let memory = limits.request_memory;
    let every = (memory / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        loop {
            let pruned = db
                .write_led(move |ctx| lifecycle::prune_retries(ctx, memory))
                .await;
            let full = match pruned {
                Ok(n) => {
                    if n > 0 {
                        tracing::debug!(pruned = n, "pruned old request keys and tombstones");
                    }
                    n >= lifecycle::PRUNE_BATCH
                }
                Err(e) => {
                    tracing::warn!(error = %e, "failed to prune old request keys and tombstones");
                    false
                }
            };
            if !full {
                break;
            }
        }
    }
}

/// Keeps the event log bounded in events and in bytes: a busy cluster writes several
/// events per claim. The first pass runs at start, so that lowered bounds hold at once.
async fn prune_events(db: Db, limits: Limits) {
    let bounds = limits.events;
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        // In batches, each its own transaction, until one drops less than a batch.
        let mut pruned = 0;
        let outcome = loop {
            match db
                .write_led(move |ctx| lifecycle::prune_events(ctx, &bounds))
                .await
            {
                Ok(n) if n >= bounds.batch => pruned += n,
                Ok(n) => break Ok(pruned + n),
                Err(e) => break Err(e),
            }
        };
        match outcome {
            Ok(0) => {}
            Ok(n) => tracing::debug!(pruned = n, "pruned old events"),
            Err(e) => tracing::warn!(error = %e, "failed to prune old events"),
        }
    }
}
