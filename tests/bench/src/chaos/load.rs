//! The campaign's steady claim load: each client cycles claims on its single-writer
//! volumes (its own; in HA mode shared with one other client, so that a claim may be
//! refused) (claim on a random node → ready → release → gone), riding out a server that is
//! down or refusing writes by retrying, and checking what it sees: an acknowledged claim
//! that vanishes before its release is lost; a claim `ready` whose target is not mounted
//! is a lie. Every operation goes into the run's history (`crate::history`), with when it
//! was sent, when its outcome came and what it was, for the checker at the end.

use std::sync::Arc;
use std::time::{Duration, Instant};

use csivol_api::{self as api, ClaimMode, ClaimRequest, ClaimState};
use rand::Rng;
use rand::SeedableRng;
use rand::rngs::StdRng;

use super::super::client::{Http, Resp};
use super::invariants::presented;
use crate::history::{Input, Output, Recorder};

#[derive(Debug, Default)]
pub struct Tally {
    pub cycles: u64,
    pub acknowledged: u64,
    /// Claims that ended `failed` (a plugin error): released, not a violation.
    pub failed: u64,
    /// Claims the server released because their node was lost and came back.
    pub released_on_return: u64,
    /// Requests sent again because the server was down or refused a write.
    pub retries: u64,
    pub violations: Vec<String>,
    /// Cycles that did not finish in time: not a broken invariant, but the run fails.
    pub stuck: Vec<String>,
    /// Claims (volume, alloc) of which an attempt got no answer: its server may still
    /// commit it later, after a refusal from another server or after this client's own
    /// release. A careful client releases them once the servers are back (the drain).
    pub unsure: Vec<(String, String)>,
}

impl Tally {
    pub fn add(&mut self, o: Tally) {
        self.cycles += o.cycles;
        self.acknowledged += o.acknowledged;
        self.failed += o.failed;
        self.released_on_return += o.released_on_return;
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
}

/// What a request's answer means to a client that must not give up on a fault.
enum Answer {
    Got(Resp),
    TimedOut,
}

/// Sends until the server answers with something other than "unavailable" (connection
/// refused while it restarts, 503 while its disk is full) or `deadline` passes.
async fn persist<F, Fut>(deadline: Instant, retries: &mut u64, mut send: F) -> Answer
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

/// The bytes of the careless client's label: far past the server's limit of a claim's
/// labels, within a request body.
const OVERSIZED_LABEL: usize = 512 << 10;

/// A careless client beside the load: claims on the load's volumes with a label far past
/// the server's limit, a few a second until `until`. Each must be refused (422 naming the
/// labels) whatever the faults: one accepted would grow the state and hold a volume the
/// load needs; a server error is a crash under it. No answer, or a 503 or 502 from a
/// server a fault took down, says nothing. Returns how many were refused and the
/// violations.
pub async fn oversized_labels(
    http: Http,
    volumes: Vec<String>,
    nodes: Arc<Vec<String>>,
    until: Instant,
    seed: u64,
) -> (u64, Vec<String>) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x1abe1);
    let label = "x".repeat(OVERSIZED_LABEL);
    let (mut refused, mut violations) = (0, Vec::new());
    let mut n = 0u64;
    while Instant::now() < until {
        n += 1;
        let volume = &volumes[rng.random_range(0..volumes.len())];
        let node = &nodes[rng.random_range(0..nodes.len())];
        let alloc = format!("oversized-{n}");
        let mut req = ClaimRequest::new(&alloc, node.as_str(), ClaimMode::Write);
        req.labels.insert("job".to_owned(), label.clone());
        let what = format!(
            "claim {volume}/{alloc} with a {} KiB label",
            OVERSIZED_LABEL >> 10
        );
        match http
            .post_once(&format!("/v1/volumes/{volume}/claims"), &req)
            .await
        {
            Ok(r)
                if r.status == 422
                    && String::from_utf8_lossy(&r.body).contains("`labels` holds") =>
            {
                refused += 1;
            }
            Ok(r) if r.status == 503 || r.status == 502 => {}
            Ok(r) => violations.push(format!(
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
    (refused, violations)
}

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

async fn cycle(http: &Http, spec: &Spec, volume: &str, alloc: &str, node: &str, t: &mut Tally) {
    let deadline = Instant::now() + spec.cycle_timeout;
    let claims = format!("/v1/volumes/{volume}/claims");
    let path = format!("{claims}/{alloc}");
    let req = ClaimRequest::new(alloc, node, ClaimMode::Write);
    let h = &spec.history;
    let me = || alloc.to_owned();
    // The claim: sent again on no answer (a claim is idempotent per volume and alloc).
    // Each attempt is an operation of its own, sent to one server: one that got no answer
    // (or a 503, which does not say whether it committed) may still take effect at any
    // later time, which the answer to a later attempt does not rule out.
    let claimed_at = h.now();
    let (claims_path, body) = (&claims, &req);
    let silent = std::sync::atomic::AtomicBool::new(false);
    let silent = &silent;
    let attempt = move || async move {
        let sent = h.now();
        let r = http.post_once(claims_path, body).await;
        let outcome = match &r {
            Ok(r) if r.status == 200 || r.status == 201 => Output::Ok,
            // A refusal changed nothing.
            Ok(r) if (400..500).contains(&r.status) => Output::Refused,
            // No answer, or a server error (a 503 does not say whether it committed).
            _ => Output::Unknown,
        };
        if outcome == Output::Unknown {
            silent.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        h.completed(volume, sent, Input::Claim(me()), outcome);
        r
    };
    let answer = persist(deadline, &mut t.retries, attempt).await;
    // An attempt that got no answer may still be applied by its server after this cycle
    // is over (one stopped with the request in its socket reads it when it runs again),
    // whatever the later attempts were told: a careful client releases it if it turns up.
    if silent.load(std::sync::atomic::Ordering::Relaxed) {
        t.unsure.push((volume.to_owned(), alloc.to_owned()));
    }
    let created = match answer {
        Answer::Got(r) if r.status == 201 || r.status == 200 => r,
        Answer::Got(_) => {
            // Refused (e.g. the node is lost right now): nothing to account for.
            tokio::time::sleep(Duration::from_millis(200)).await;
            return;
        }
        Answer::TimedOut => {
            t.stuck.push(format!(
                "claim {volume}/{alloc}: no answer within {:?}",
                spec.cycle_timeout
            ));
            return;
        }
    };
    t.acknowledged += 1;
    let mut index = created.index.unwrap_or(0);
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
            break;
        }
        let read_at = h.now();
        match persist(deadline, &mut t.retries, || http.get_blocking(&path, index)).await {
            Answer::Got(r) if r.status == 200 => {
                h.completed(volume, read_at, Input::Read(me()), Output::Present);
                index = r.index.unwrap_or(index);
                claim = r.json().ok();
            }
            Answer::Got(r) if r.status == 404 => {
                h.completed(volume, read_at, Input::Read(me()), Output::Absent);
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
                return;
            }
            Answer::Got(_) | Answer::TimedOut => {}
        }
    }
    // Release, then until gone: one operation, from the request to the claim seen gone.
    let release_deadline = Instant::now() + spec.cycle_timeout;
    let released_at = h.now();
    let unseen = || {
        h.record(
            volume,
            released_at,
            None,
            Input::Release(me()),
            Output::Unknown,
        )
    };
    // A claim blocked on its lost node cannot be released through it (423): as a CI job
    // would, wait for the node to come back (a claim nobody released is published again
    // then), within the cycle's time.
    let released = loop {
        match persist(release_deadline, &mut t.retries, || http.delete(&path)).await {
            Answer::Got(r) if r.status == 423 && Instant::now() < release_deadline => {
                t.retries += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            answer => break answer,
        }
    };
    let mut index = match released {
        Answer::Got(r) if r.status == 202 || r.status == 404 => r.index.unwrap_or(0),
        Answer::Got(r) => {
            unseen();
            t.stuck.push(format!(
                "release {volume}/{alloc}: HTTP {}: {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            ));
            return;
        }
        Answer::TimedOut => {
            unseen();
            t.stuck.push(format!("release {volume}/{alloc}: no answer"));
            return;
        }
    };
    loop {
        match persist(release_deadline, &mut t.retries, || {
            http.get_blocking(&path, index)
        })
        .await
        {
            Answer::Got(r) if r.status == 404 => break,
            Answer::Got(r) => index = r.index.unwrap_or(index),
            Answer::TimedOut => {
                unseen();
                t.stuck.push(format!(
                    "release {volume}/{alloc} on {node}: not gone in time"
                ));
                return;
            }
        }
        if Instant::now() >= release_deadline {
            unseen();
            t.stuck.push(format!(
                "release {volume}/{alloc} on {node}: not gone in time"
            ));
            return;
        }
    }
    h.completed(volume, released_at, Input::Release(me()), Output::Ok);
    t.cycles += 1;
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

/// The event log's (kind, message) for `alloc`, oldest first (empty if it cannot be read).
async fn history(http: &Http, alloc: &str) -> Vec<(String, String)> {
    let Ok(r) = http.get(&format!("/v1/events?alloc={alloc}")).await else {
        return Vec::new();
    };
    r.json::<Vec<api::Event>>()
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.kind, e.message))
        .collect()
}
