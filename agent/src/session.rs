//! The agent's conversation with the server around the core: register (again when the
//! server lost or marked the node), heartbeat at a third of the TTL, follow the desired
//! state, send reports in batches, and self-fence after `--fence-after` without contact.
//! While the node channel is open (`channel`), heartbeats and reports go over it and the
//! desired state's changes come down it (or are fetched when the server only says that it
//! changed); otherwise heartbeats and reports are requests and the desired state is
//! long-polled.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use csivol_api::{HeartbeatResponse, NodeStatus, Report, ReportBatch};
use csivol_client::StatusCode;
use tokio::sync::{Notify, mpsc, watch};

use super::channel;
use super::client::{ApiClient, ApiError};
use super::config::Backoff;
use super::engine::{Core, FenceState};

/// The heartbeat TTL assumed until the server says otherwise.
const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// How long one desired-state query may block on the server.
const DESIRED_WAIT: Duration = Duration::from_secs(30);
/// How often the desired state is fetched whole rather than as changes: what a change the
/// server did not name by volume would otherwise leave stale is this old at most.
const WHOLE_EVERY: Duration = Duration::from_secs(300);
/// How long an agent told to register again after a restore waits for the steps under
/// way to finish first.
const REGISTER_AGAIN_IDLE: Duration = Duration::from_secs(10);
/// How often a fenced node that still holds something checks again whether it is clean.
const FENCED_RECHECK: Duration = Duration::from_secs(1);
/// Most reports in one request.
const MAX_BATCH: usize = 500;
/// How long a report batch on the node channel may wait for its commit (half the TTL,
/// within these bounds) before the channel is taken for broken and the batch goes as a
/// request.
const REPORT_MIN: Duration = Duration::from_secs(1);
const REPORT_MAX: Duration = Duration::from_secs(10);
/// Retries of server requests.
const SERVER_BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(250),
    max: Duration::from_secs(10),
};

/// When to self-fence: after `after` without any successful contact with the server.
#[derive(Clone, Copy, Debug)]
pub struct FenceClock {
    after: Option<Duration>,
    last_contact: Instant,
}

impl FenceClock {
    pub fn new(after: Option<Duration>, now: Instant) -> Self {
        Self {
            after,
            last_contact: now,
        }
    }

    pub fn contact(&mut self, now: Instant) {
        self.last_contact = now;
    }

    /// Time left before fencing is due; `None` when the agent does not self-fence.
    pub fn remaining(&self, now: Instant) -> Option<Duration> {
        self.after
            .map(|d| d.saturating_sub(now.saturating_duration_since(self.last_contact)))
    }

    pub fn due(&self, now: Instant) -> bool {
        self.remaining(now).is_some_and(|r| r.is_zero())
    }
}

/// What the three loops share.
struct Link {
    client: ApiClient,
    core: Core,
    fence_after: Option<Duration>,
    /// Any successful answer of the server resets it.
    clock: Mutex<FenceClock>,
    /// Counts successful registrations; 0 until the first.
    registered: watch::Sender<u64>,
    /// Whether a registration was sent, answered or not: the server may hold the node
    /// registered, and a stop is then said (`node-stopping`).
    register_sent: std::sync::atomic::AtomicBool,
    /// Asks the heartbeat loop to register again (the server does not know the node).
    reregister: Notify,
    /// Asks the desired-state loop for a fresh state now.
    refresh: Notify,
    /// The node channel, while the server offers it.
    channel: Arc<csivol_client::channel::Shared>,
    /// The server's heartbeat TTL, as it last said.
    ttl: Mutex<Duration>,
}

impl Link {
    fn ttl(&self) -> Duration {
        *self.ttl.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_ttl(&self, ttl: Duration) {
        *self.ttl.lock().unwrap_or_else(|e| e.into_inner()) = ttl;
    }

    fn contact(&self) {
        self.clock
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contact(Instant::now());
    }

    fn clock(&self) -> FenceClock {
        *self.clock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A heartbeat: on the node channel when it is open (the same answer as the request),
    /// else, or when the channel breaks on it, as a request. Each server gets a quarter of
    /// the TTL to answer, and one that cannot pass heartbeats on to the others answers
    /// 503: an agent cut off from its server, or whose server is cut off from the rest,
    /// reaches another one well before its node could be marked lost.
    async fn heartbeat(&self, ttl: Duration) -> Result<HeartbeatResponse, ApiError> {
        let within = (ttl / 4).clamp(Duration::from_millis(100), Duration::from_secs(10));
        let on_channel = self.channel.is_open();
        match self.channel.heartbeat(within).await {
            Some(Err(e)) if e.status() == Some(StatusCode::SERVICE_UNAVAILABLE) => {
                self.client.avoid_current();
            }
            Some(answer) => {
                return answer.map_err(|e| ApiError::from_client("the heartbeat", e));
            }
            // Unanswered or closed under it: that server is asked last.
            None if on_channel => self.client.avoid_current(),
            None => {}
        }
        self.client.heartbeat(within).await
    }
}

/// How long an agent that takes its node down when it stops may take for it.
const TAKE_DOWN_TIME: Duration = Duration::from_secs(60);

/// Runs the agent until `stop` resolves. Mounts stay as they are when it stops, unless
/// `take_down` asks it to unpublish and unstage everything first (through the plugins,
/// recorded, so that the next start finds records and mounts that agree). Either way it
/// tells the server before it returns (`node-stopping`).
pub async fn run(
    client: ApiClient,
    core: Core,
    reports: mpsc::UnboundedReceiver<Report>,
    fence_after: Option<Duration>,
    take_down: bool,
    stop: impl Future<Output = ()>,
) {
    let link = Arc::new(Link {
        client,
        core,
        fence_after,
        clock: Mutex::new(FenceClock::new(fence_after, Instant::now())),
        registered: watch::channel(0).0,
        register_sent: Default::default(),
        reregister: Notify::new(),
        refresh: Notify::new(),
        channel: Default::default(),
        ttl: Mutex::new(DEFAULT_TTL),
    });
    let mut sender = tokio::spawn(report_loop(Arc::clone(&link), reports));
    let outbox = link.core.outbox();
    tokio::select! {
        // First: a stop asked while the agent started is taken before it registers.
        biased;
        () = stop => {}
        () = heartbeat_loop(&link) => {}
        () = desired_loop(&link) => {}
        () = channel::run(&link.client, &link.channel, link.registered.subscribe()) => {}
        () = crate::stats::send(&outbox, &link.channel) => {}
    }
    let told = link.register_sent.load(std::sync::atomic::Ordering::SeqCst);
    // A take-down may take longer than the heartbeat TTL: the agent goes on heartbeating
    // meanwhile, so that the server does not take the stop for a loss before it hears of it.
    let took_down = take_down
        && tokio::select! {
            done = link.core.take_down(TAKE_DOWN_TIME) => done,
            () = keep_alive(&link), if told => false,
        };
    if took_down {
        tracing::info!("node agent stopping; every volume was taken down through its plugin");
    } else if take_down {
        tracing::warn!(
            "node agent stopping before every volume was taken down; the next start finishes it"
        );
    } else {
        tracing::info!("node agent stopping; published volumes stay mounted");
    }
    // Stop the core, then give the reports it made a moment to reach the server.
    let client = link.client.clone();
    drop(link);
    if tokio::time::timeout(STOP_NOTICE_TIME, &mut sender)
        .await
        .is_err()
    {
        sender.abort();
        tracing::warn!(
            "stopped before every report reached the server; the next registration tells it the actual state"
        );
    }
    // Then say that this is a planned stop, after the reports it made: the node is
    // `stopped`, not lost, while its claims wait for it. An agent stopped before it sent a
    // registration has nothing to say: the server holds the node as it left it.
    if !told {
        tracing::info!(
            "stopped before registering with the server; the next start registers what is on the node"
        );
        return;
    }
    match tokio::time::timeout(STOP_NOTICE_TIME, client.stopping(took_down)).await {
        Ok(Ok(())) => tracing::info!("told the server that this node stops"),
        Ok(Err(e)) => {
            tracing::warn!("{e:#}; the server finds the node silent and marks it lost at its TTL")
        }
        Err(_) => tracing::warn!(
            "the server did not take the stop notice within {}; it finds the node silent and marks it lost at its TTL",
            humantime::format_duration(STOP_NOTICE_TIME)
        ),
    }
}

/// Heartbeats at a third of the TTL, and nothing else (no registration, no fence): what a
/// stopping agent does until it has said that it stops.
async fn keep_alive(link: &Link) {
    loop {
        let ttl = link.ttl();
        if link.heartbeat(ttl).await.is_ok() {
            link.contact();
        }
        tokio::time::sleep(ttl / 3).await;
    }
}

/// How long a stopping agent waits for its last reports, then for its stop notice.
const STOP_NOTICE_TIME: Duration = Duration::from_secs(5);

async fn heartbeat_loop(link: &Link) {
    let mut ttl = DEFAULT_TTL;
    let mut registered = false;
    let mut failures = 0u32;
    let mut fence_state = link.core.fence_state();
    loop {
        // A server that accepts connections but does not answer must not hold off the
        // fence: no request outlasts the time left before fencing.
        let bound = link
            .clock()
            .remaining(Instant::now())
            .filter(|_| *fence_state.borrow() == FenceState::No)
            .map_or(Duration::MAX, |left| left.max(Duration::from_millis(100)));
        let bounded = |what| {
            move |_| ApiError::TimedOut {
                what,
                waited: bound,
            }
        };
        let sent = Instant::now();
        let contact = if registered {
            let answer = tokio::time::timeout(bound, link.heartbeat(ttl))
                .await
                .map_err(bounded("the heartbeat"))
                .and_then(|r| r);
            match answer {
                Ok(hb) => {
                    ttl = Duration::from_millis(hb.heartbeat_ttl_ms.max(300));
                    link.set_ttl(ttl);
                    if hb.status == NodeStatus::Lost {
                        tracing::warn!(
                            "the server marked this node lost; registering again with the actual state"
                        );
                        registered = false;
                    } else {
                        link.core.heard(sent, ttl);
                    }
                    Ok(())
                }
                Err(e) if e.is_not_found() => {
                    tracing::warn!(
                        "the server does not know this node any more; registering again"
                    );
                    registered = false;
                    Ok(())
                }
                Err(e) => Err(e),
            }
        } else {
            let req = link.core.registration(link.fence_after);
            link.register_sent
                .store(true, std::sync::atomic::Ordering::SeqCst);
            let answer = tokio::time::timeout(bound, link.client.register(&req))
                .await
                .map_err(bounded("registration"))
                .and_then(|r| r);
            match answer {
                Ok(r) => {
                    ttl = Duration::from_millis(r.heartbeat_ttl_ms.max(300));
                    link.set_ttl(ttl);
                    registered = true;
                    link.core.heard(sent, ttl);
                    // The server now holds what this registration said is there; the core
                    // checks its records against the mount table at once, so that what
                    // failed the check is staged and published again rather than reported
                    // published from the records (a lost node's claims are republished),
                    // and reports what is published again: the server's state may be one
                    // that never heard it. Told before the desired-state loop fetches the
                    // state that follows the registration, which the core's controller
                    // operations wait for.
                    link.core.registered();
                    link.registered.send_modify(|n| *n += 1);
                    tracing::info!(
                        node = link.client.node(),
                        published = req.published.len(),
                        staged = req.staged.len(),
                        ttl = %humantime::format_duration(ttl),
                        "registered with the server"
                    );
                    Ok(())
                }
                Err(e) => Err(e),
            }
        };
        match contact {
            Ok(()) => {
                link.contact();
                failures = 0;
                if registered {
                    report_fence(link).await;
                }
            }
            Err(e) => {
                failures += 1;
                // Say it once when the server goes away, then now and then.
                if failures == 1 || failures.is_power_of_two() {
                    tracing::warn!(failures, "{e:#}");
                }
                if e.is_permanent() {
                    tracing::error!("the server refuses this agent; check --token-file and --node");
                }
            }
        }
        let now = Instant::now();
        let clock = link.clock();
        let unfenced = *fence_state.borrow() == FenceState::No;
        if clock.due(now)
            && unfenced
            && let Err(e) = link.core.fence().await
        {
            tracing::error!("failed to record the self-fence: {e:#}");
        }
        // A third of the TTL, and of the fence time: an agent that fences must hear from
        // the server well within it while all is well.
        let interval = (ttl / 3).min(link.fence_after.map_or(Duration::MAX, |d| d / 3));
        let mut pause = if registered && failures == 0 {
            interval
        } else if failures == 0 {
            Duration::ZERO
        } else {
            SERVER_BACKOFF.delay(failures).min(interval)
        };
        if unfenced && let Some(left) = clock.remaining(now) {
            pause = pause.min(left.max(Duration::from_millis(10)));
        }
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = link.reregister.notified() => registered = false,
            // A completed fence is reported as soon as the server is there.
            Ok(()) = fence_state.changed() => {}
        }
    }
}

/// Reports a completed self-fence, once the node is registered again.
async fn report_fence(link: &Link) {
    let FenceState::Complete(fence) = link.core.fence_state().borrow().clone() else {
        return;
    };
    let batch = ReportBatch {
        reports: vec![Report::Fenced {
            at_ms: fence.at_ms,
            volumes: fence.volumes.clone(),
        }],
    };
    match link.client.reports(&batch).await {
        Ok(()) => {
            tracing::info!(volumes = ?fence.volumes, "reported the self-fence to the server");
            if let Err(e) = link.core.fence_reported(fence.id).await {
                tracing::error!("failed to record that the self-fence was reported: {e:#}");
            }
            // The core waits for a desired state fetched after this point.
            link.refresh.notify_one();
        }
        Err(e) => tracing::warn!("failed to report the self-fence: {e:#}"),
    }
}

/// Follows the server's desired state for this node: over the node channel's pushes where
/// it is open, else by long-poll, applying each answer to the core.
// Long (about 190 lines) on purpose: one loop holds the follower's state (the index, the
// generation it belongs to, whether the core holds the state as of it, when the whole
// state was last taken, whether the server sends changes), and nearly every branch ends
// by resetting part of it and going round again. Split into functions, that state would
// pass in and out of each one, and the order of the resets, which is the logic, would
// be spread over them.
async fn desired_loop(link: &Link) {
    let mut registered = link.registered.subscribe();
    let mut channel = link.channel.subscribe();
    // Whether the last look found the channel open (for the log).
    let mut following = false;
    let mut seen = 0;
    let mut index = 0;
    // The generation of the server's state the index belongs to: the state can go back in
    // time (a backup restored), and an index means something only in its generation. Sent
    // with every query; a server of another generation answers at once with all of it.
    let mut state_generation: Option<String> = None;
    let mut failures = 0u32;
    // Whether the core's desired state is the server's as of `index`: then only the
    // changes since are asked for. Off until a whole state was applied.
    let mut holds = false;
    let mut whole_at = Instant::now();
    // Off against a server that refuses `since` (older than the agent, during an upgrade).
    let mut changes = true;
    loop {
        let Ok(generation) = registered.wait_for(|n| *n > 0).await.map(|n| *n) else {
            return;
        };
        // After a (re)registration, start from scratch: the server may have restarted and
        // counted its index anew.
        if generation != seen {
            seen = generation;
            index = 0;
            holds = false;
        }
        if whole_at.elapsed() >= WHOLE_EVERY {
            holds = false;
        }
        let since = (holds && changes).then_some(index);
        let chan = *channel.borrow_and_update();
        if chan.open != following {
            following = chan.open;
            if following {
                tracing::debug!("the desired state follows the node channel");
                if chan.pushed < index {
                    // The server's index went back (a restored backup): the index held
                    // means nothing to it any more; start from its whole state.
                    index = 0;
                    holds = false;
                }
            }
        }
        if chan.open && index != 0 && chan.pushed <= index && whole_at.elapsed() < WHOLE_EVERY {
            // Nothing new: the channel says when there is (or closes), unless a fresh or
            // whole state is due first.
            tokio::select! {
                _ = channel.changed() => {}
                () = link.refresh.notified() => {
                    index = 0;
                    holds = false;
                }
                // Registered again: the whole state now (controller operations wait for it).
                _ = registered.changed() => {}
                () = tokio::time::sleep(WHOLE_EVERY.saturating_sub(whole_at.elapsed())) => {}
            }
            continue;
        }
        // Changes the channel pushed that follow the state held are applied as they came;
        // anything else (a gap, the first state, a whole one due) is fetched.
        let pushed = (chan.open && holds && changes)
            .then(|| link.channel.take_pushed(index, state_generation.as_deref()))
            .flatten();
        let held = state_generation.as_deref();
        let fetch = async {
            if let Some(pushed) = pushed {
                return Ok(pushed);
            }
            match (chan.open, chan.pushed) {
                // Long-poll, as before the channel.
                (false, _) => {
                    let d = link.client.desired(index, since, held, DESIRED_WAIT);
                    d.await
                }
                // Answered at once by the server that pushed; a server whose state lags
                // behind the push (another one of an etcd cluster) answers once it caught up.
                (true, pushed @ 1..) => {
                    let d = link.client.desired(pushed - 1, since, held, DESIRED_WAIT);
                    d.await
                }
                (true, 0) => link.client.desired_now(since, held).await,
            }
        };
        let answer = tokio::select! {
            answer = fetch => answer,
            () = link.refresh.notified() => {
                index = 0;
                holds = false;
                continue;
            }
            // The channel opened: it says when to ask, so the long-poll is not needed.
            Ok(()) = channel.changed(), if !chan.open => continue,
            // Registered again: the whole state now (controller operations wait for it).
            _ = registered.changed() => continue,
        };
        match answer {
            // Fetched before a registration the server answered since: it may list
            // operations the server gave to another host meanwhile. Fetched again.
            Ok(_) if *registered.borrow() != seen => continue,
            Ok(desired) => {
                link.contact();
                failures = 0;
                let status = desired.status;
                if desired.generation.is_some() && desired.generation != state_generation {
                    if state_generation.is_some() {
                        // Answered with the whole state, which the core takes as it is: what
                        // the node holds that this state does not is taken down now.
                        tracing::info!(
                            index = desired.index,
                            "the server's state is of another generation (the server started \
                             again, or its state was restored): following its whole state"
                        );
                    }
                    state_generation = desired.generation.clone();
                }
                if status == Some(NodeStatus::Lost) || desired.register_again {
                    // The server marked this node lost while it could not hear from it (a
                    // pause, a partition): its claims are blocked, not released, so this
                    // state does not list them. Acting on it would unmount volumes that
                    // workloads may still use. Register again with what is really mounted;
                    // the server resumes those claims and answers with a state to follow.
                    // The core never saw this state: later changes must not apply to it.
                    // A server whose state was restored from a backup says the same
                    // (`register_again`), until this node has said what it holds.
                    if desired.register_again {
                        tracing::warn!(
                            "the server's state was restored from a backup; registering again \
                             with what this node holds before acting on it"
                        );
                        // Steps under way from the state before finish first, so that the
                        // registration says what they made (a bounded wait: a step that
                        // hangs on its plugin is not waited out).
                        let _ = tokio::time::timeout(REGISTER_AGAIN_IDLE, link.core.idle()).await;
                    }
                    index = desired.index;
                    holds = false;
                    link.reregister.notify_one();
                    continue;
                }
                let (next_index, whole) = (desired.index, desired.changes.is_none());
                if let Err(e) = link.core.apply_desired(desired) {
                    tracing::warn!("{e}; fetching the whole desired state");
                    index = 0;
                    holds = false;
                    continue;
                }
                index = next_index;
                holds = true;
                if whole {
                    whole_at = Instant::now();
                }
                if status == Some(NodeStatus::Fenced) {
                    // The server fenced this node: its claims were force-released, so this
                    // state lists nothing and following it takes every leftover mount
                    // down. Nothing is published again. Once the node holds nothing it
                    // registers again, which tells the server so.
                    link.core.idle().await;
                    let now = link.core.registration(link.fence_after);
                    if now.published.is_empty() && now.staged.is_empty() {
                        tracing::info!(
                            "this node was fenced and holds nothing any more; registering again"
                        );
                        link.reregister.notify_one();
                    } else {
                        // Take-downs are being retried; look again shortly.
                        tokio::time::sleep(FENCED_RECHECK).await;
                        index = 0;
                        holds = false;
                    }
                }
            }
            Err(e) if since.is_some() && e.is_bad_request() => {
                tracing::warn!(
                    "the server does not send desired-state changes ({e}); fetching the whole state at every change"
                );
                changes = false;
            }
            Err(e) => {
                failures += 1;
                if e.is_not_found() {
                    link.reregister.notify_one();
                }
                if failures == 1 || failures.is_power_of_two() {
                    tracing::warn!(failures, "{e:#}");
                }
                tokio::time::sleep(SERVER_BACKOFF.delay(failures)).await;
            }
        }
    }
}

/// Adds a report to the queue. A newer retryable error of a claim replaces the older one,
/// so that a long outage does not pile up one error per retry.
fn enqueue(queue: &mut Vec<Report>, report: Report) {
    if let Report::ClaimError {
        volume,
        alloc,
        error,
    } = &report
        && !error.is_final
    {
        queue.retain(|r| {
            !matches!(r, Report::ClaimError { volume: v, alloc: a, error: e }
                if v == volume && a == alloc && !e.is_final)
        });
    }
    queue.push(report);
}

async fn report_loop(link: Arc<Link>, mut reports: mpsc::UnboundedReceiver<Report>) {
    // Only the queue, the ways to the server and the registration count are needed from
    // here on: dropping the link stops the core, whose end closes `reports`.
    let client = link.client.clone();
    let channel = Arc::clone(&link.channel);
    let mut registered = link.registered.subscribe();
    let weak = Arc::downgrade(&link);
    drop(link);
    let mut queue: Vec<Report> = Vec::new();
    let mut failures = 0u32;
    let mut open = true;
    loop {
        if queue.is_empty() {
            if !open {
                return;
            }
            match reports.recv().await {
                Some(r) => enqueue(&mut queue, r),
                None => return,
            }
        }
        while let Ok(r) = reports.try_recv() {
            enqueue(&mut queue, r);
        }
        if registered.wait_for(|n| *n > 0).await.is_err() {
            return;
        }
        let n = queue.len().min(MAX_BATCH);
        let batch = ReportBatch {
            reports: queue[..n].to_vec(),
        };
        let within = weak.upgrade().map_or(DEFAULT_TTL, |l| l.ttl()) / 2;
        let sent = match channel
            .report(&batch, within.clamp(REPORT_MIN, REPORT_MAX))
            .await
        {
            Some(answer) => answer.map_err(|e| ApiError::from_client("the reports", e)),
            // Not open, of the first version, or closed under it: as a request.
            None => client.reports(&batch).await,
        };
        match sent {
            Ok(()) => {
                if let Some(link) = weak.upgrade() {
                    link.contact();
                }
                failures = 0;
                queue.drain(..n);
            }
            Err(e) if e.is_permanent() => {
                tracing::error!(reports = n, "dropping reports the server refuses: {e:#}");
                queue.drain(..n);
            }
            Err(e) => {
                failures += 1;
                if e.is_not_found()
                    && let Some(link) = weak.upgrade()
                {
                    link.reregister.notify_one();
                }
                if failures == 1 || failures.is_power_of_two() {
                    tracing::warn!(failures, queued = queue.len(), "{e:#}");
                }
                // Keep collecting while waiting; stop waiting when the agent stops.
                let pause = tokio::time::sleep(SERVER_BACKOFF.delay(failures));
                tokio::pin!(pause);
                loop {
                    tokio::select! {
                        () = &mut pause => break,
                        r = reports.recv(), if open => match r {
                            Some(r) => enqueue(&mut queue, r),
                            None => open = false,
                        },
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use csivol_api::PluginError;

    use super::*;

    #[test]
    fn fence_clock_is_due_after_the_fence_time_without_contact() {
        let t0 = Instant::now();
        let mut c = FenceClock::new(Some(Duration::from_secs(10)), t0);
        assert!(!c.due(t0 + Duration::from_secs(9)));
        assert_eq!(
            c.remaining(t0 + Duration::from_secs(4)),
            Some(Duration::from_secs(6))
        );
        c.contact(t0 + Duration::from_secs(5));
        assert!(!c.due(t0 + Duration::from_secs(14)));
        assert!(c.due(t0 + Duration::from_secs(15)));

        let off = FenceClock::new(None, t0);
        assert!(!off.due(t0 + Duration::from_secs(3600)));
        assert_eq!(off.remaining(t0), None);
    }

    #[test]
    fn a_newer_retryable_error_replaces_the_older() {
        let err = |msg: &str, is_final| Report::ClaimError {
            volume: "v".into(),
            alloc: "a".into(),
            error: PluginError {
                code: "UNAVAILABLE".into(),
                message: msg.into(),
                is_final,
                next_retry_at_ms: None,
            },
        };
        let mut q = Vec::new();
        enqueue(&mut q, err("1", false));
        enqueue(&mut q, Report::Unstaged { volume: "w".into() });
        enqueue(&mut q, err("2", false));
        enqueue(&mut q, err("3", true));
        enqueue(&mut q, err("4", false));
        assert_eq!(
            q,
            [
                Report::Unstaged { volume: "w".into() },
                err("3", true),
                err("4", false)
            ]
        );
    }
}
