//! `--wait`: following a claim or a volume with blocking queries until it gets where it
//! should, showing where it stands, and saying where it is stuck when time runs out.

use std::time::{Duration, Instant};

use anyhow::Context;
use csivol_api::{AttachmentState, Claim, ClaimState, Event, Volume};

use crate::client::{Answer, Cursor, MAX_BLOCK};
use crate::ctx::Ctx;
use crate::failure::{Exit, Failure};
use crate::output::given_duration;

/// When a wait gives up, and the `--timeout` it came from (for messages).
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    pub at: Instant,
    pub timeout: Duration,
}

impl Deadline {
    pub fn after(timeout: Duration) -> Self {
        Self {
            at: Instant::now() + timeout,
            timeout,
        }
    }

    pub fn left(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }
}

/// What a claim wait waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimGoal {
    Ready,
    Gone,
}

/// Where a claim is followed, renewed and released: on its volume, or in its pool's line
/// while it waits there (it has no volume yet).
pub fn claim_path(c: &Claim) -> String {
    match (&c.pool, c.volume.is_empty()) {
        (Some(p), true) => format!("/v1/pools/{}/claims/{}", p.pool, c.alloc),
        _ => format!("/v1/volumes/{}/claims/{}", c.volume, c.alloc),
    }
}

/// Where a claim stands, in words, with its last error and next retry.
pub fn describe_claim(c: &Claim) -> String {
    let n = &c.node;
    let what = match c.state {
        ClaimState::Queued if c.volume.is_empty() => match (&c.pool, c.queue_position) {
            (Some(p), Some(n)) => format!("queued: number {n} in pool {}'s line", p.pool),
            _ => "queued in its pool's line".to_owned(),
        },
        ClaimState::Queued => match c.queue_position {
            Some(p) => format!("queued: number {p} in line for the volume"),
            None => "queued for the volume".to_owned(),
        },
        ClaimState::Pending => {
            "pending: waiting for the volume to be detached from another node".to_owned()
        }
        ClaimState::Attaching => {
            format!("attaching: waiting for ControllerPublishVolume to node {n}")
        }
        ClaimState::Publishing => format!("publishing: node {n} is staging and mounting it"),
        ClaimState::Ready => format!("ready on node {n}"),
        ClaimState::Releasing => format!("releasing: node {n} is unmounting it"),
        ClaimState::Failed => format!("failed: node {n} is cleaning up"),
        ClaimState::Blocked => format!("blocked: node {n} was lost"),
    };
    let mut what = match (&c.error, &c.next_retry_at) {
        (Some(e), Some(t)) => format!("{what}; waiting on retry at {t}: {e}"),
        (Some(e), None) => format!("{what}; last error: {e}"),
        _ => what,
    };
    if let Some(w) = &c.waiting {
        what.push_str(&format!("; {}", crate::output::waiting(w)));
    }
    if let Some(cond) = &c.condition {
        what.push_str(&format!("; volume abnormal: {cond}"));
    }
    what
}

/// Where a volume's release stands, for the progress of an operation held until it has
/// finished: its claims still being released, then the nodes still unstaging it or being
/// detached from it (`alloc near releasing on node-a`, `node-a unstaging it`).
pub fn release_progress(v: &Volume) -> String {
    let mut steps: Vec<String> = Vec::new();
    let mut nodes: Vec<&str> = Vec::new();
    for c in &v.claims {
        if matches!(c.state, ClaimState::Releasing | ClaimState::Failed) {
            steps.push(format!("alloc {} releasing on {}", c.alloc, c.node));
            nodes.push(&c.node);
        }
    }
    for a in &v.attachments {
        if nodes.contains(&a.node.as_str()) {
            continue;
        }
        steps.push(match a.state {
            AttachmentState::Detaching => format!("being detached from {}", a.node),
            _ => format!("{} unstaging it", a.node),
        });
    }
    if steps.is_empty() {
        return "its release has finished".to_owned();
    }
    format!("waiting for its release: {}", steps.join(", "))
}

fn unblock_hint(volume: &str, node: &str) -> String {
    format!(
        "if node {node} is really gone or fenced, run: csivol unblock {volume} --node {node} \
         --reason \"...\" (or bring the node back)"
    )
}

/// A claim wait that ran out of time, with the claim as last seen: the caller says what
/// became of the claim ([`ClaimTimedOut::kept`], [`ClaimTimedOut::released`]), so that the
/// one message it prints is true once it has acted.
#[derive(Debug, Clone)]
pub struct ClaimTimedOut {
    pub claim: Claim,
    pub goal: ClaimGoal,
    pub timeout: Duration,
}

impl ClaimTimedOut {
    /// The pool whose line the claim still waits in (it has no volume yet).
    pub fn in_line(&self) -> Option<&str> {
        let c = &self.claim;
        c.pool
            .as_ref()
            .filter(|_| c.volume.is_empty())
            .map(|p| p.pool.as_str())
    }

    fn waited(&self) -> String {
        let c = &self.claim;
        let goal = match self.goal {
            ClaimGoal::Ready => "ready",
            ClaimGoal::Gone => "released",
        };
        let whose = match self.in_line() {
            Some(pool) => format!("alloc {} in pool {pool}'s line", c.alloc),
            None => format!("alloc {} on volume {}", c.alloc, c.volume),
        };
        format!(
            "timed out after {} waiting for the claim of {whose} to be {goal}",
            given_duration(self.timeout)
        )
    }

    /// Where to look at what holds the claim up: its volume, or its pool while it waits in
    /// the pool's line.
    pub fn look(&self) -> String {
        match self.in_line() {
            Some(pool) => {
                format!("`csivol pool show {pool}` shows its line and who holds each member")
            }
            None => format!(
                "`csivol status {}` shows its claims and attachments",
                self.claim.volume
            ),
        }
    }

    /// The claim stays as it is: where it stands, and what to do about it.
    pub fn kept(&self) -> Failure {
        let (volume, alloc) = (&self.claim.volume, &self.claim.alloc);
        let release = match self.in_line() {
            Some(pool) => format!("csivol release --pool {pool} --alloc {alloc}"),
            None => format!("csivol release {volume} --alloc {alloc}"),
        };
        let look = self.look();
        let (stands, hint) = match self.goal {
            ClaimGoal::Ready => (
                "the claim still exists and is",
                format!(
                    "release it with `{release}` (or claim with --release-on-timeout), or wait \
                     longer with --timeout; {look}"
                ),
            ),
            ClaimGoal::Gone => ("it is", format!("{look}; wait longer with --timeout")),
        };
        Failure::new(
            Exit::TimedOut,
            format!(
                "{}; {stands} {}",
                self.waited(),
                describe_claim(&self.claim)
            ),
        )
        .hint(hint)
    }

    /// The caller released the claim after the wait gave up (`what` says what was
    /// released and what follows): where it stood, then that.
    pub fn released(&self, what: &str, hint: String) -> Failure {
        Failure::new(
            Exit::TimedOut,
            format!(
                "{} (it was {}); {what}",
                self.waited(),
                describe_claim(&self.claim)
            ),
        )
        .hint(hint)
    }
}

/// Follows a claim from `cursor` (the answer that showed it `start`) until `goal`. Returns the ready claim, or `None` once it is gone; a
/// timeout leaves the claim as it is and says so.
pub async fn claim(
    ctx: &Ctx,
    start: Claim,
    cursor: Cursor,
    goal: ClaimGoal,
    deadline: Deadline,
) -> anyhow::Result<Option<Claim>> {
    match claim_until(ctx, start, cursor, goal, deadline).await? {
        Ok(c) => Ok(c),
        Err(t) => Err(t.kept().into()),
    }
}

/// [`claim`], with a timeout given back to the caller to say what it does about it.
pub async fn claim_until(
    ctx: &Ctx,
    start: Claim,
    cursor: Cursor,
    goal: ClaimGoal,
    deadline: Deadline,
) -> anyhow::Result<Result<Option<Claim>, ClaimTimedOut>> {
    let alloc = start.alloc.clone();
    let (mut volume, mut who, mut path) = (String::new(), String::new(), String::new());
    // The pool and node of a claim last seen in a pool's line.
    let mut line: Option<(String, String)> = None;
    let mut progress = ctx.out.progress();
    let mut cursor = cursor;
    let mut current = Some(start);
    loop {
        // A claim in a pool's line has no volume yet: it is followed in the line until it
        // is granted a member, then on that member.
        if let Some(c) = current
            .as_ref()
            .filter(|c| c.volume != volume || path.is_empty())
        {
            volume = c.volume.clone();
            path = claim_path(c);
            line = c
                .pool
                .as_ref()
                .filter(|_| volume.is_empty())
                .map(|p| (p.pool.clone(), c.node.clone()));
            who = match &line {
                Some((pool, _)) => format!("the claim of alloc {alloc} in pool {pool}'s line"),
                None => format!("the claim of alloc {alloc} on volume {volume}"),
            };
        }
        match (&current, goal) {
            (None, ClaimGoal::Gone) => {
                progress.finish();
                return Ok(Ok(None));
            }
            (None, ClaimGoal::Ready) => {
                progress.finish();
                // A claim that left a pool's line has its events on its node only.
                let (query, hint) = match &line {
                    Some((pool, node)) => (
                        format!("node={node}"),
                        format!(
                            "`csivol pool show {pool}` shows its line; `csivol events --node \
                             {node}` shows what happened"
                        ),
                    ),
                    None => (
                        format!("volume={volume}"),
                        format!("`csivol events --volume {volume}` shows what happened"),
                    ),
                };
                let why = last_event(ctx, &query, &alloc)
                    .await
                    .map(|e| format!(": {} ({})", e.message, e.kind))
                    .unwrap_or_default();
                return Err(Failure::new(Exit::Error, format!("{who} is gone{why}"))
                    .hint(hint)
                    .into());
            }
            (Some(c), _) if c.state == ClaimState::Blocked => {
                progress.finish();
                return Err(Failure::new(
                    Exit::Blocked,
                    format!("{who} is blocked: its node {} was lost", c.node),
                )
                .hint(unblock_hint(&volume, &c.node))
                .into());
            }
            (Some(c), ClaimGoal::Ready) => match c.state {
                ClaimState::Ready => {
                    progress.finish();
                    return Ok(Ok(current));
                }
                ClaimState::Failed => {
                    progress.finish();
                    return Err(Failure::new(
                        Exit::Error,
                        format!(
                            "{who} failed: {}",
                            c.error.as_deref().unwrap_or("no reason given")
                        ),
                    )
                    .hint(format!(
                        "node {} cleans up, then the claim is gone; fix the cause and claim again \
                         (`csivol events --volume {volume}` has the history)",
                        c.node
                    ))
                    .into());
                }
                ClaimState::Releasing => {
                    progress.finish();
                    return Err(Failure::new(
                        Exit::Error,
                        format!("{who} was released while waiting for it"),
                    )
                    .into());
                }
                _ => {}
            },
            (Some(_), ClaimGoal::Gone) => {}
        }
        let c = current.as_ref().expect("handled above");
        progress.set(&format!("{who}: {}", describe_claim(c)));
        let left = deadline.left();
        if left.is_zero() {
            progress.finish();
            return Ok(Err(ClaimTimedOut {
                claim: c.clone(),
                goal,
                timeout: deadline.timeout,
            }));
        }
        let Some(answer) = watch::<Claim>(ctx, &path, &cursor, MAX_BLOCK, deadline)
            .await
            .with_context(|| format!("failed to follow {who}"))?
        else {
            continue;
        };
        // The server's cursor as it is: an index smaller than the last one is the state
        // gone back in time (a backup restored), answered with a new generation.
        current = answer.map(|a| {
            cursor = a.cursor(a.body.index);
            a.body
        });
    }
}

/// A blocking query of `path` from `cursor` for what is left of `deadline`, at most `cap`
/// (0: a plain read), asked again while a busy server turns it away ([`unless_busy`]).
/// `None`: time ran out while turned away, with nothing new to say.
pub async fn watch<T: serde::de::DeserializeOwned>(
    ctx: &Ctx,
    path: &str,
    cursor: &Cursor,
    cap: Duration,
    deadline: Deadline,
) -> anyhow::Result<Option<Option<Answer<T>>>> {
    unless_busy(ctx, deadline, || {
        ctx.client
            .watch_or_busy(path, cursor, deadline.left().min(cap))
    })
    .await
}

/// Asks `ask` until a server does not turn it away for now (503: its long-poll slots are
/// all taken, say), with a growing backoff, as agents do, while `deadline` leaves time:
/// the write a wait follows has committed, and only the wait is turned away. `None`: time
/// ran out while turned away.
pub async fn unless_busy<T, F, Fut>(
    ctx: &Ctx,
    deadline: Deadline,
    mut ask: F,
) -> anyhow::Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Result<T, Failure>>>,
{
    let mut backoff = Duration::from_millis(100);
    let mut told = false;
    loop {
        match ask().await? {
            Ok(answer) => return Ok(Some(answer)),
            Err(busy) => {
                if !std::mem::replace(&mut told, true) {
                    ctx.out.note(format!(
                        "the server turned the wait away for now ({}); asking again until the timeout",
                        busy.message
                    ));
                }
                let left = deadline.left();
                if left.is_zero() {
                    return Ok(None);
                }
                // A little spread, so that waits turned away together do not come back
                // together.
                let spread = Duration::from_millis(u64::from(
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.subsec_millis())
                        % 50,
                ));
                tokio::time::sleep((backoff + spread).min(left)).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// The last event of an alloc on a volume: why a claim disappeared.
/// The alloc's last event among those `query` selects (`volume=V`, `node=N`).
async fn last_event(ctx: &Ctx, query: &str, alloc: &str) -> Option<Event> {
    let events: Vec<Event> = ctx
        .client
        .get(&format!("/v1/events?{query}&limit=10000"))
        .await
        .ok()?;
    events
        .into_iter()
        .rev()
        .find(|e| e.alloc.as_deref() == Some(alloc))
}

/// What a volume wait makes of the volume as it is now (`None`: it is gone).
pub enum Step {
    Done,
    /// Not yet: where it stands, for the progress line and a timeout message.
    Waiting(String),
    Fail(Failure),
}

/// Follows a volume until `check` says done (or fails). Returns the volume as last seen.
pub async fn volume(
    ctx: &Ctx,
    name: &str,
    goal: &str,
    deadline: Deadline,
    check: impl Fn(Option<&Volume>) -> Step,
) -> anyhow::Result<Option<Volume>> {
    let followed = Followed {
        what: "volume",
        name,
        path: format!("/v1/volumes/{name}"),
        show: format!("csivol status {name}"),
    };
    follow(ctx, &followed, goal, deadline, check, |v: &Volume| v.index).await
}

/// An object `follow` watches: its kind and name (for messages), its path, and the command
/// that shows where it stands.
pub struct Followed<'a> {
    pub what: &'a str,
    pub name: &'a str,
    pub path: String,
    pub show: String,
}

/// Follows an object with blocking queries until `check` is done or fails, or the
/// deadline passes (exit 5). Returns the object as last seen (`None`: it is gone).
pub async fn follow<T: serde::de::DeserializeOwned>(
    ctx: &Ctx,
    f: &Followed<'_>,
    goal: &str,
    deadline: Deadline,
    check: impl Fn(Option<&T>) -> Step,
    index_of: impl Fn(&T) -> u64,
) -> anyhow::Result<Option<T>> {
    let Followed {
        what,
        name,
        path,
        show,
    } = f;
    let mut progress = ctx.out.progress();
    // Where it stands now, unless the server turns the read away until the deadline: then
    // that is not known, which is no answer to give.
    let Some(first): Option<Option<Answer<T>>> =
        watch(ctx, path, &Cursor::default(), Duration::ZERO, deadline)
            .await
            .with_context(|| format!("failed to follow {what} `{name}`"))?
    else {
        progress.finish();
        return Err(Failure::new(
            Exit::Unreachable,
            format!(
                "the server kept turning the wait for {what} {name} away (too busy) for {}",
                given_duration(deadline.timeout)
            ),
        )
        .hint(format!(
            "`{show}` shows where it stands; wait longer with --timeout"
        ))
        .into());
    };
    let mut cursor = first.as_ref().map(|a| a.cursor(0)).unwrap_or_default();
    let mut current = first.map(|a| a.body);
    loop {
        let where_ = match check(current.as_ref()) {
            Step::Done => {
                progress.finish();
                return Ok(current);
            }
            Step::Fail(f) => {
                progress.finish();
                return Err(f.into());
            }
            Step::Waiting(w) => w,
        };
        progress.set(&format!("{what} {name}: {where_}"));
        let left = deadline.left();
        if left.is_zero() {
            progress.finish();
            return Err(Failure::new(
                Exit::TimedOut,
                format!(
                    "timed out after {} waiting for {what} {name} {goal}; where it stands: {where_}",
                    given_duration(deadline.timeout)
                ),
            )
            .hint(format!(
                "`{show}` shows where it stands; wait longer with --timeout"
            ))
            .into());
        }
        let Some(answer) = watch(ctx, path, &cursor, MAX_BLOCK, deadline)
            .await
            .with_context(|| format!("failed to follow {what} `{name}`"))?
        else {
            continue;
        };
        // Taken as it is (see `claim`).
        current = answer.map(|a| {
            cursor = a.cursor(index_of(&a.body));
            a.body
        });
    }
}
