//! The campaign's steady claim load: each client cycles claims on its single-writer
//! volumes (its own; in HA mode shared with one other client, so that a claim may be
//! refused) (claim on a random node → ready → release → gone), riding out a server that is
//! down or refusing writes by retrying, and checking what it sees: an acknowledged claim
//! that vanishes before its release is lost (unless a restore may have forgotten it, which
//! the history judges); a claim `ready` whose target is not mounted is a lie. Each claim
//! request carries an `Idempotency-Key` and its first send time, the same on every
//! attempt, as the CLI's do. Every operation goes into the run's history
//! (`crate::history`), with when it was sent, when its outcome came and what it was, for
//! the checker at the end.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use csivol_api::limits::{DEFAULT_CLAIM_LABEL_BYTES, DEFAULT_CLAIM_LABELS};
use csivol_api::{self as api, ClaimMode, ClaimRequest, ClaimState};
use csivol_client::Cursor;
use csivol_client::once::Once;
use rand::Rng;
use rand::SeedableRng;
use rand::rngs::StdRng;

use super::super::client::{Http, Resp, never_sent};
use super::invariants::presented;
use super::ledger::{Ledger, SentClaim};
use crate::history::{Input, Output, Recorder};

#[derive(Debug, Default)]
pub struct Tally {
    pub cycles: u64,
    pub acknowledged: u64,
    /// Claims that ended `failed` (a plugin error): released, not a violation.
    pub failed: u64,
    /// Claims the server released because their node was lost and came back.
    pub released_on_return: u64,
    /// Acknowledged claims seen gone after a restore: a restore forgets the claims made
    /// after its backup (the history judges whether this one was).
    pub forgotten_by_restore: u64,
    /// Claims of a cycle that was over, brought back by a restore and released again.
    pub released_after_restore: u64,
    /// Requests sent again because the server was down or refused a write.
    pub retries: u64,
    pub violations: Vec<String>,
    /// Cycles that did not finish in time: not a broken invariant, but the run fails.
    pub stuck: Vec<String>,
    /// Claims of which an attempt got no answer, for the drain to look at.
    pub unsure: Vec<Unsure>,
}

/// A claim of which an attempt got no answer.
#[derive(Debug, Clone)]
pub struct Unsure {
    pub volume: String,
    pub alloc: String,
    /// Whether its cycle knows the claim is gone for good: a later attempt was answered
    /// and the claim was refused, or released (or dropped by the server) and seen gone.
    /// The server answers a repeat of the request's key with its first answer and
    /// carries out no claim request sent before its alloc's release, so such a claim must
    /// never turn up again. Otherwise (no attempt answered, a release not seen through)
    /// it may still be there, and the drain releases it as a careful client would.
    pub over: bool,
}

impl Tally {
    pub fn add(&mut self, o: Tally) {
        self.cycles += o.cycles;
        self.acknowledged += o.acknowledged;
        self.failed += o.failed;
        self.released_on_return += o.released_on_return;
        self.forgotten_by_restore += o.forgotten_by_restore;
        self.released_after_restore += o.released_after_restore;
        self.retries += o.retries;
        self.violations.extend(o.violations);
        self.stuck.extend(o.stuck);
        self.unsure.extend(o.unsure);
    }
}

#[derive(Debug, Clone)]
pub struct Spec {
    pub client: u32,
    pub volumes: Vec<String>,
    pub nodes: Arc<Vec<String>>,
    pub until: Instant,
    pub cycle_timeout: Duration,
    pub mount: String,
    pub seed: u64,
    pub history: Arc<Recorder>,
    pub ledger: Arc<Ledger>,
}

/// What a request's answer means to a client that must not give up on a fault.
pub enum Answer {
    Got(Resp),
    TimedOut,
}

/// Sends until the server answers with something other than "unavailable" (connection
/// refused while it restarts, 503 while its disk is full) or `deadline` passes.
pub async fn persist<F, Fut>(deadline: Instant, retries: &mut u64, mut send: F) -> Answer
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Resp>>,
{
    loop {
        match send().await {
            Ok(r) if r.status != 503 && r.status != 502 => return Answer::Got(r),
            _ => {}
        }
        if Instant::now() >= deadline {
            return Answer::TimedOut;
        }
        *retries += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The bytes of the careless client's largest label: far past the server's limit of a
/// claim's labels, within a request body.
const OVERSIZED_LABEL: usize = 512 << 10;

/// The careless client's claims: labels just past the byte limit, far past it, or one
/// label too many (the server's default limits, which the campaign keeps).
fn oversized(n: u64) -> (BTreeMap<String, String>, String) {
    let mut labels = BTreeMap::new();
    let what = match n % 3 {
        0 => {
            // Key and value together one byte past the limit.
            let value = "x".repeat(DEFAULT_CLAIM_LABEL_BYTES + 1 - "job".len());
            labels.insert("job".to_owned(), value);
            format!("{} bytes of labels", DEFAULT_CLAIM_LABEL_BYTES + 1)
        }
        1 => {
            labels.insert("job".to_owned(), "x".repeat(OVERSIZED_LABEL));
            format!("a {} KiB label", OVERSIZED_LABEL >> 10)
        }
        _ => {
            for i in 0..=DEFAULT_CLAIM_LABELS {
                labels.insert(format!("l{i}"), "x".to_owned());
            }
            format!("{} labels", DEFAULT_CLAIM_LABELS + 1)
        }
    };
    (labels, what)
}

/// What the careless client saw.
#[derive(Debug, Default)]
pub struct Careless {
    /// Claims refused (422 naming the labels), as they must be.
    pub refused: u64,
    /// Of those, how many a read afterwards found not recorded (404).
    pub unrecorded: u64,
    pub violations: Vec<String>,
}

/// A careless client beside the load: claims on the load's volumes with labels past the
/// server's limits (just past, far past, one too many), a few a second until `until`.
/// Each must be refused (422 naming the labels) whatever the faults, and nothing of it
/// recorded (a read of the claim afterwards finds nothing; the end checks that no event
/// names it): one accepted would grow the state and hold a volume the load needs; a
/// server error is a crash under it. No answer, or a 503 or 502 from a server a fault
/// took down, says nothing.
pub async fn oversized_labels(
    http: Http,
    volumes: Vec<String>,
    nodes: Arc<Vec<String>>,
    until: Instant,
    seed: u64,
) -> Careless {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x1abe1);
    let mut out = Careless::default();
    let mut n = 0u64;
    while Instant::now() < until {
        n += 1;
        let volume = &volumes[rng.random_range(0..volumes.len())];
        let node = &nodes[rng.random_range(0..nodes.len())];
        let alloc = format!("{OVERSIZED_ALLOC}{n}");
        let mut req = ClaimRequest::new(&alloc, node.as_str(), ClaimMode::Write);
        let (labels, with) = oversized(n);
        req.labels = labels;
        let what = format!("claim {volume}/{alloc} with {with}");
        let claims = format!("/v1/volumes/{volume}/claims");
        // A client that keeps no keys, as a careless one would.
        match http.post_once(&claims, &req, &Once::unkeyed()).await {
            Ok(r)
                if r.status == 422
                    && String::from_utf8_lossy(&r.body).contains("`labels` holds") =>
            {
                out.refused += 1;
                match http
                    .get(&format!("{claims}/{alloc}"))
                    .await
                    .map(|r| r.status)
                {
                    Ok(404) => out.unrecorded += 1,
                    Ok(200) => out
                        .violations
                        .push(format!("{what}: refused, yet recorded (a read finds it)")),
                    // No answer, or one that does not say: looked at again by the end's
                    // check of the event log.
                    _ => {}
                }
            }
            Ok(r) if r.status == 503 || r.status == 502 => {}
            Ok(r) => out.violations.push(format!(
                "{what}: answered {} ({}), not refused as too large",
                r.status,
                String::from_utf8_lossy(&r.body)
                    .chars()
                    .take(200)
                    .collect::<String>()
            )),
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    out
}

/// The allocs of the careless client's claims begin with this.
pub const OVERSIZED_ALLOC: &str = "oversized-";

pub async fn client(http: Http, spec: Spec) -> Tally {
    let mut t = Tally::default();
    let mut rng = StdRng::seed_from_u64(spec.seed ^ u64::from(spec.client));
    let mut n = 0u64;
    while Instant::now() < spec.until {
        for volume in &spec.volumes {
            if Instant::now() >= spec.until {
                break;
            }
            n += 1;
            let alloc = format!("chaos-{}-{n}", spec.client);
            let node = spec.nodes[rng.random_range(0..spec.nodes.len())].clone();
            cycle(&http, &spec, volume, &alloc, &node, &mut t).await;
        }
    }
    t
}

/// A claim request's identity: a random `Idempotency-Key`, and the time it was first sent.
pub fn new_once() -> Once {
    Once::new(format!("{:032x}", rand::random::<u128>()))
}

/// One cycle: claim, until ready, release, until gone. If a restore was done meanwhile,
/// its claim may be back although the cycle saw it gone (a claim the backup had): it
/// looks once more at the end, and releases what it finds.
async fn cycle(http: &Http, spec: &Spec, volume: &str, alloc: &str, node: &str, t: &mut Tally) {
    let ledger = &spec.ledger;
    let _under_way = ledger.begin(volume, alloc);
    let began = ledger.restores();
    let sent = SentClaim {
        volume: volume.to_owned(),
        alloc: alloc.to_owned(),
        body: ClaimRequest::new(alloc, node, ClaimMode::Write),
        once: new_once(),
    };
    let (silent, over) = claim_and_release(http, spec, &sent, began, t).await;
    if silent {
        t.unsure.push(Unsure {
            volume: volume.to_owned(),
            alloc: alloc.to_owned(),
            over,
        });
    }
    if over && ledger.restores() != began {
        let deadline = Instant::now() + spec.cycle_timeout;
        match back_after_restore(http, &spec.history, ledger, volume, alloc, deadline).await {
            Ok(true) => t.released_after_restore += 1,
            Ok(false) => {}
            Err(e) => t
                .stuck
                .push(format!("claim {volume}/{alloc}, back after a restore: {e}")),
        }
    }
}

/// The cycle up to its claim seen gone. Returns whether an attempt of the claim got no
/// answer, and whether the cycle knows its claim is gone for good ([`Unsure::over`]).
async fn claim_and_release(
    http: &Http,
    spec: &Spec,
    sent: &SentClaim,
    began: u64,
    t: &mut Tally,
) -> (bool, bool) {
    let (volume, alloc, node) = (&sent.volume[..], &sent.alloc[..], &sent.body.node[..]);
    let deadline = Instant::now() + spec.cycle_timeout;
    let claims = format!("/v1/volumes/{volume}/claims");
    let path = format!("{claims}/{alloc}");
    let h = &spec.history;
    let me = || alloc.to_owned();
    // The claim: sent again on no answer, with the same key and first send time (the
    // server answers a repeat with its first answer, and carries out no claim request
    // sent before its alloc's release). Each attempt is an operation of its own, sent to
    // one server: one that got no answer (or a 503, which does not say whether it
    // committed) took effect, if at all, before the alloc's release was sent.
    let claimed_at = h.now();
    let (claims_path, body, once) = (&claims, &sent.body, &sent.once);
    let silent = std::sync::atomic::AtomicBool::new(false);
    let silent = &silent;
    let attempt = move || async move {
        let sent = h.now();
        let r = http.post_once(claims_path, body, once).await;
        if r.as_ref().is_err_and(never_sent) {
            // No server took the connection: nothing was sent, so no operation.
            return r;
        }
        let outcome = match &r {
            Ok(r) if r.status == 200 || r.status == 201 => Output::Ok,
            // A refusal changed nothing.
            Ok(r) if (400..500).contains(&r.status) => Output::Refused,
            // No answer, or a server error (a 503 does not say whether it committed).
            _ => Output::Unknown,
        };
        if outcome == Output::Unknown {
            silent.store(true, Relaxed);
        }
        let key = once.key().unwrap_or_default();
        h.attempted(volume, sent, Input::Claim(me()), outcome, key);
        r
    };
    let answer = persist(deadline, &mut t.retries, attempt).await;
    let silent = silent.load(Relaxed);
    let created = match answer {
        Answer::Got(r) if r.status == 201 || r.status == 200 => r,
        Answer::Got(r) if (400..500).contains(&r.status) => {
            // Refused (e.g. the node is lost right now): nothing to account for.
            tokio::time::sleep(Duration::from_millis(200)).await;
            return (silent, true);
        }
        Answer::Got(r) => {
            // A server error: not an answer the request's key keeps.
            t.stuck.push(format!(
                "claim {volume}/{alloc}: HTTP {}: {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            ));
            return (silent, false);
        }
        Answer::TimedOut => {
            t.stuck.push(format!(
                "claim {volume}/{alloc}: no answer within {:?}",
                spec.cycle_timeout
            ));
            return (silent, false);
        }
    };
    t.acknowledged += 1;
    let mut cursor = created.cursor(&Cursor::default());
    // Until ready (or failed).
    let mut claim: Option<api::Claim> = created.json().ok();
    loop {
        match claim.as_ref().map(|c| c.state) {
            Some(ClaimState::Ready) => {
                let c = claim.as_ref().expect("ready");
                check_mounted(http, spec, &path, c, deadline, t).await;
                break;
            }
            Some(ClaimState::Failed) => {
                t.failed += 1;
                break;
            }
            _ => {}
        }
        if Instant::now() >= deadline {
            t.stuck.push(format!(
                "claim {volume}/{alloc} on {node} not ready within {:?} (still {})",
                spec.cycle_timeout,
                claim
                    .as_ref()
                    .map_or("unknown".to_owned(), |c| c.state.to_string())
            ));
            return (silent, false);
        }
        let read_at = h.now();
        match persist(deadline, &mut t.retries, || {
            http.get_following(&path, &cursor)
        })
        .await
        {
            Answer::Got(r) if r.status == 200 => {
                // A claim a restore forgot and its node still held comes back `releasing`,
                // recorded from the node's report: not this cycle's claim holding the
                // volume.
                if spec.ledger.restores() == began || !found_after_restore(http, &r).await {
                    h.completed(volume, read_at, Input::Read(me()), Output::Present);
                }
                cursor = r.cursor(&cursor);
                claim = r.json().ok();
            }
            Answer::Got(r) if r.status == 404 => {
                h.completed(volume, read_at, Input::Read(me()), Output::Absent);
                if spec.ledger.restores() != began {
                    // A restore forgets the claims made after its backup: the history
                    // judges whether this one was.
                    t.forgotten_by_restore += 1;
                    t.cycles += 1;
                    return (silent, true);
                }
                // A claim that failed is cleaned up like a release: gone is fine if the
                // event log says it failed; otherwise it was lost.
                let history = history(http, alloc).await;
                // The server took it away on its own, and said so: in the history, that
                // happened at some moment between the claim and this read.
                let dropped = || {
                    h.record(
                        volume,
                        claimed_at,
                        Some(h.now()),
                        Input::Dropped(me()),
                        Output::Ok,
                    );
                };
                if history.iter().any(|(kind, _)| kind == "claim-failed") {
                    dropped();
                    t.failed += 1;
                    t.cycles += 1;
                } else if history.iter().any(|(kind, m)| {
                    kind.starts_with("claim-releas") && m.starts_with("node came back")
                }) {
                    // The server's documented rule for a lost node that returns: a claim whose
                    // release was under way when it was lost is released through the node,
                    // recorded with the reason (a claim nobody released is published again).
                    // Not silent, so not lost; counted apart.
                    dropped();
                    t.released_on_return += 1;
                    t.cycles += 1;
                } else {
                    t.violations.push(format!(
                        "acknowledged claim lost: {volume}/{alloc} on {node} vanished before its release; its events: {}",
                        history
                            .iter()
                            .map(|(k, m)| format!("{k}: {m}"))
                            .collect::<Vec<_>>()
                            .join("; ")
                    ));
                }
                return (silent, true);
            }
            Answer::Got(_) | Answer::TimedOut => {}
        }
    }
    let release_deadline = Instant::now() + spec.cycle_timeout;
    match release(
        http,
        h,
        &spec.ledger,
        volume,
        alloc,
        release_deadline,
        &mut t.retries,
    )
    .await
    {
        Ok(()) => {
            t.cycles += 1;
            spec.ledger.released(sent.clone());
            (silent, true)
        }
        Err(e) => {
            t.stuck
                .push(format!("release {volume}/{alloc} on {node}: {e}"));
            (silent, false)
        }
    }
}

/// Releases `alloc`'s claim on `volume` and waits until it is gone: one operation of the
/// history, from the request to the claim seen gone (unknown if it was not). A claim
/// blocked on its lost node cannot be released through it (423): as a CI job would, it
/// waits for the node to come back (a claim nobody released is published again then).
/// A claim seen again by a read sent after a restore whose servers stopped after the
/// release was sent is released again: the restore may have undone the release.
pub async fn release(
    http: &Http,
    h: &Recorder,
    ledger: &Ledger,
    volume: &str,
    alloc: &str,
    deadline: Instant,
    retries: &mut u64,
) -> Result<(), String> {
    let path = format!("/v1/volumes/{volume}/claims/{alloc}");
    let released_at = h.now();
    let unseen = |why: String| {
        h.record(
            volume,
            released_at,
            None,
            Input::Release(alloc.to_owned()),
            Output::Unknown,
        );
        Err(why)
    };
    // The restores counted when the request that got the last answer was sent.
    let sent_in = AtomicU64::new(ledger.restores());
    let read_in = AtomicU64::new(ledger.restores());
    'send: loop {
        let answer = loop {
            let delete = || {
                sent_in.store(ledger.restores(), Relaxed);
                http.delete(&path)
            };
            match persist(deadline, retries, delete).await {
                Answer::Got(r) if r.status == 423 && Instant::now() < deadline => {
                    *retries += 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                answer => break answer,
            }
        };
        let mut cursor = match answer {
            Answer::Got(r) if r.status == 202 || r.status == 404 => r.cursor(&Cursor::default()),
            Answer::Got(r) => {
                return unseen(format!(
                    "HTTP {}: {}",
                    r.status,
                    String::from_utf8_lossy(&r.body)
                ));
            }
            Answer::TimedOut => return unseen("no answer".to_owned()),
        };
        loop {
            let read = || {
                read_in.store(ledger.restores(), Relaxed);
                http.get_following(&path, &cursor)
            };
            match persist(deadline, retries, read).await {
                Answer::Got(r) if r.status == 404 => break 'send,
                Answer::Got(_) if read_in.load(Relaxed) != sent_in.load(Relaxed) => continue 'send,
                Answer::Got(r) => cursor = r.cursor(&cursor),
                Answer::TimedOut => return unseen("not gone in time".to_owned()),
            }
            if Instant::now() >= deadline {
                return unseen("not gone in time".to_owned());
            }
        }
    }
    h.completed(
        volume,
        released_at,
        Input::Release(alloc.to_owned()),
        Output::Ok,
    );
    Ok(())
}

/// After a restore, a claim its cycle saw gone may be back (the backup had it): looked at
/// once (the read goes into the history) and released if it is there. Whether it was
/// there returns `true`.
pub async fn back_after_restore(
    http: &Http,
    h: &Recorder,
    ledger: &Ledger,
    volume: &str,
    alloc: &str,
    deadline: Instant,
) -> Result<bool, String> {
    let path = format!("/v1/volumes/{volume}/claims/{alloc}");
    let mut retries = 0;
    let read_at = h.now();
    let (mut found, mut under_way) = (false, false);
    let present = match persist(deadline, &mut retries, || http.get(&path)).await {
        Answer::Got(r) if r.status == 404 => false,
        Answer::Got(r) if r.status == 200 => {
            found = found_after_restore(http, &r).await;
            under_way = r
                .json::<api::Claim>()
                .is_ok_and(|c| matches!(c.state, ClaimState::Releasing | ClaimState::Failed));
            true
        }
        Answer::Got(r) => {
            return Err(format!(
                "HTTP {}: {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            ));
        }
        Answer::TimedOut => return Err("no answer".to_owned()),
    };
    let seen = if present {
        Output::Present
    } else {
        Output::Absent
    };
    // A claim found on its node after the restore is taken down (and released here all
    // the same), but its read is left out of the history ([`found_on_its_node`]).
    if !found {
        h.completed(volume, read_at, Input::Read(alloc.to_owned()), seen);
    }
    if present {
        release(http, h, ledger, volume, alloc, deadline, &mut retries).await?;
        if !found && (under_way || failed_by_the_server(http, alloc).await) {
            // Back `releasing` (or `failed`): its release was under way (or it had failed)
            // when the backup was taken, or it failed since (the restored state publishes
            // it again, and the plugin may refuse), and its node takes it down on its own,
            // maybe before the release above; the
            // history says so as the server's drop, from the read to its being seen gone.
            h.record(
                volume,
                read_at,
                Some(h.now()),
                Input::Dropped(alloc.to_owned()),
                Output::Ok,
            );
        }
    }
    Ok(present)
}

/// A claim seen `ready` must have its target mounted. Reading the claim again after the
/// look at the mount table makes sure it was ready all along (not blocked and back).
async fn check_mounted(
    http: &Http,
    spec: &Spec,
    path: &str,
    c: &api::Claim,
    deadline: Instant,
    t: &mut Tally,
) {
    let Some(target) = c.target_path.as_deref() else {
        t.violations
            .push(format!("claim {path} is ready without a target path"));
        return;
    };
    if presented(std::path::Path::new(target), &spec.mount) {
        return;
    }
    if let Answer::Got(r) = persist(deadline, &mut t.retries, || http.get(path)).await
        && let Ok(again) = r.json::<api::Claim>()
        && again.state == ClaimState::Ready
        && again.updated_at == c.updated_at
        && !presented(std::path::Path::new(target), &spec.mount)
    {
        t.violations.push(format!(
            "claim {path} is ready on {} but its target {target} is not mounted",
            c.node
        ));
    }
}

/// Whether a claim read as `claim` is one the server recorded from its node's report
/// after a restore (`claim-found`, in `events`): the restored state did not have it, its
/// node still held it, and the server takes it down (`releasing`), as
/// docs/design/state-store.md says. No client holds it, and it is no released claim
/// come back: the history leaves such a read out.
pub fn found_on_its_node(claim: &api::Claim, events: &[(String, String)]) -> bool {
    claim.state == ClaimState::Releasing && events.iter().any(|(kind, _)| kind == "claim-found")
}

/// [`found_on_its_node`] of a claim read in `r` (a 200), looking at its events only when
/// it is `releasing`.
pub async fn found_after_restore(http: &Http, r: &Resp) -> bool {
    match r.json::<api::Claim>() {
        Ok(c) if c.state == ClaimState::Releasing => {
            found_on_its_node(&c, &history(http, &c.alloc).await)
        }
        _ => false,
    }
}

/// The event log's (kind, message) for `alloc`, oldest first (empty if it cannot be read).
/// Whether the event log says the server failed `alloc`'s claim (`claim-failed`): it then
/// takes the claim down and drops it on its own. The event log goes back in time with a
/// restore, so after one it speaks of the restored claim only.
pub async fn failed_by_the_server(http: &Http, alloc: &str) -> bool {
    history(http, alloc)
        .await
        .iter()
        .any(|(kind, _)| kind == "claim-failed")
}

pub async fn history(http: &Http, alloc: &str) -> Vec<(String, String)> {
    let Ok(r) = http.get(&format!("/v1/events?alloc={alloc}")).await else {
        return Vec::new();
    };
    r.json::<Vec<api::Event>>()
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.kind, e.message))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a `releasing` claim whose events say the server found it on its node after a
    /// restore is left out of the history; any other claim read is a read of it.
    #[test]
    fn a_claim_found_on_its_node_is_left_out() {
        let mut c: api::Claim = serde_json::from_value(serde_json::json!({
            "volume": "v", "alloc": "a", "node": "n1", "mode": "write", "state": "releasing",
            "target_path": null, "error": null, "created_at": "", "updated_at": "", "index": 1
        }))
        .unwrap();
        let ev = |k: &str| (k.to_owned(), String::new());
        let found = [ev("claim-created"), ev("claim-found")];
        assert!(found_on_its_node(&c, &found));
        assert!(!found_on_its_node(
            &c,
            &[ev("claim-created"), ev("claim-releasing")]
        ));
        c.state = ClaimState::Pending;
        assert!(!found_on_its_node(&c, &found), "a claim made again is read");
    }
}
