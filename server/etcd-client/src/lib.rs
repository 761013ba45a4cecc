//! A small client of etcd's v3 gRPC API, with only the calls csivol's etcd state store
//! makes: ranges, transactions, watches and leases. The generated types stay in [`pb`];
//! the store builds its requests through the helpers here.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// The generated etcd types (`etcdserverpb`, `mvccpb`).
pub mod pb {
    #![allow(clippy::all, unused_qualifications, missing_docs)]
    pub mod mvccpb {
        tonic::include_proto!("mvccpb");
    }
    pub mod etcdserverpb {
        tonic::include_proto!("etcdserverpb");
    }
}

pub use pb::etcdserverpb::RequestOp;
use pb::etcdserverpb::{
    CompactionRequest, Compare, DeleteRangeRequest, LeaseGrantRequest, LeaseKeepAliveRequest,
    LeaseRevokeRequest, PutRequest, RangeRequest, RangeResponse, TxnRequest, TxnResponse,
    WatchCreateRequest, WatchRequest, WatchResponse, compare, kv_client::KvClient,
    lease_client::LeaseClient, request_op, watch_client::WatchClient, watch_request,
};
pub use pb::mvccpb::{Event, KeyValue, event::EventType};

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No member answered, or the cluster has no quorum: retrying later may work.
    #[error("etcd is unavailable: {0}")]
    Unavailable(String),
    /// etcd refused the request.
    #[error("etcd refused the request: {0}")]
    Refused(String),
    /// An endpoint that is not a valid URL.
    #[error("invalid etcd endpoint `{0}`: {1}")]
    Endpoint(String, String),
}

impl Error {
    /// What went wrong, without the kind.
    fn detail(&self) -> &str {
        match self {
            Self::Unavailable(s) | Self::Refused(s) | Self::Endpoint(_, s) => s,
        }
    }
}

impl From<tonic::Status> for Error {
    fn from(s: tonic::Status) -> Self {
        use tonic::Code;
        match s.code() {
            Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Cancelled
            | Code::Unknown
            | Code::Aborted
            | Code::ResourceExhausted
            | Code::Internal => Self::Unavailable(format!("{}: {}", s.code(), s.message())),
            _ => Self::Refused(format!("{}: {}", s.code(), s.message())),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// How long one call may take, failing over between members included; a call to a
/// cluster without quorum fails after it.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one member has to answer one try of a call. Shorter than etcd's own request
/// timeout (7 s by default): a proposal a member took while its cluster had no leader is
/// dropped by raft and answered only when that timeout runs out, and a call must not wait
/// for that when the new leader is elected within about a second.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a member that failed a call is tried only after the others.
const FAILED_FOR: Duration = Duration::from_secs(2);

/// Pause before another round over the members when every one failed (an election).
const ROUND_PAUSE: Duration = Duration::from_millis(100);

/// Whether a failed call may be sent to another member.
///
/// A read, a watch or a lease call may: doing it twice changes nothing. A transaction
/// that failed may have been applied (a member that died after forwarding it to the
/// leader, a leader that died before answering), so it is never sent again here: the
/// caller, who knows what its transaction compares, decides (see [`Client::txn`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resend {
    Safe,
    Never,
}

/// A client over every member of one etcd cluster. Calls go to one member (the last that
/// answered); a call that fails because its member is gone or has lost the leader goes to
/// the next member within the same call when sending it again is safe, and the failed
/// member is tried last for a while. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Client {
    members: Arc<Members>,
}

#[derive(Debug)]
struct Members {
    list: Vec<Member>,
    /// The member calls go to first.
    preferred: AtomicUsize,
}

#[derive(Debug)]
struct Member {
    url: String,
    kv: KvClient<Channel>,
    watch: WatchClient<Channel>,
    lease: LeaseClient<Channel>,
    /// When it last failed a call, until a call succeeds there again.
    failed_at: Mutex<Option<Instant>>,
}

impl Member {
    fn failed_recently(&self) -> bool {
        self.failed_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|at| at.elapsed() < FAILED_FOR)
    }

    fn mark(&self, failed: bool) {
        *self.failed_at.lock().unwrap_or_else(|e| e.into_inner()) = failed.then(Instant::now);
    }
}

/// What [`Client::history`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct History {
    pub cluster_id: u64,
    pub revision: i64,
    pub mod_revision: i64,
}

/// TLS to etcd (`https://` endpoints): the CA that signed the members' certificates, and
/// the client certificate and key when etcd asks for one (`--client-cert-auth`); PEM.
#[derive(Debug, Clone, Default)]
pub struct Tls {
    pub ca_pem: Vec<u8>,
    pub identity_pem: Option<(Vec<u8>, Vec<u8>)>,
}

impl Client {
    /// A client of the cluster at `endpoints` (`http://host:port`); connects lazily, so it
    /// needs a running Tokio runtime but no member yet.
    pub fn new(endpoints: &[String]) -> Result<Self> {
        Self::with_tls(endpoints, None)
    }

    /// [`Client::new`], with TLS for `https://` endpoints.
    pub fn with_tls(endpoints: &[String], tls: Option<&Tls>) -> Result<Self> {
        let mut list = Vec::with_capacity(endpoints.len());
        for e in endpoints {
            let mut ep = Endpoint::from_shared(e.clone())
                .map_err(|err| Error::Endpoint(e.clone(), err.to_string()))?;
            if e.starts_with("https://") {
                let mut config = ClientTlsConfig::new();
                if let Some(t) = tls {
                    config = config.ca_certificate(Certificate::from_pem(&t.ca_pem));
                    if let Some((cert, key)) = &t.identity_pem {
                        config = config.identity(Identity::from_pem(cert, key));
                    }
                }
                ep = ep
                    .tls_config(config)
                    .map_err(|err| Error::Endpoint(e.clone(), err.to_string()))?;
            }
            let channel = ep
                .connect_timeout(Duration::from_secs(2))
                .tcp_nodelay(true)
                .http2_keep_alive_interval(Duration::from_secs(2))
                .keep_alive_timeout(Duration::from_secs(2))
                .keep_alive_while_idle(true)
                .connect_lazy();
            list.push(Member {
                url: e.clone(),
                kv: KvClient::new(channel.clone()),
                watch: WatchClient::new(channel.clone()),
                lease: LeaseClient::new(channel),
                failed_at: Mutex::new(None),
            });
        }
        if list.is_empty() {
            return Err(Error::Endpoint(String::new(), "no endpoints".into()));
        }
        Ok(Self {
            members: Arc::new(Members {
                list,
                preferred: AtomicUsize::new(0),
            }),
        })
    }

    /// The members in the order a call tries them: the preferred one, then the others,
    /// those that failed a call lately last.
    fn order(&self) -> Vec<usize> {
        let m = &self.members;
        let n = m.list.len();
        let first = m.preferred.load(Ordering::Relaxed) % n;
        let ring = (0..n).map(|i| (first + i) % n);
        let (fresh, failed): (Vec<usize>, Vec<usize>) =
            ring.partition(|&i| !m.list[i].failed_recently());
        fresh.into_iter().chain(failed).collect()
    }

    /// Runs `call` on one member after another until one answers, within
    /// [`CALL_TIMEOUT`], each try within [`ATTEMPT_TIMEOUT`]: a refusal is final, a member
    /// that is gone, has no leader or does not answer in time is passed over, and with
    /// [`Resend::Never`] the first such failure is the answer.
    async fn call<T, F, Fut>(&self, resend: Resend, call: F) -> Result<T>
    where
        F: Fn(&Member, Duration) -> Fut,
        Fut: Future<Output = std::result::Result<T, tonic::Status>>,
    {
        let deadline = Instant::now() + CALL_TIMEOUT;
        let mut last = None;
        loop {
            for i in self.order() {
                let left = deadline
                    .saturating_duration_since(Instant::now())
                    .min(ATTEMPT_TIMEOUT);
                if left.is_zero() {
                    return Err(last.unwrap_or_else(|| Error::Unavailable("timed out".into())));
                }
                let member = &self.members.list[i];
                let answer = tokio::time::timeout(left, call(member, left)).await;
                let status = match answer {
                    Ok(Ok(v)) => {
                        member.mark(false);
                        self.members.preferred.store(i, Ordering::Relaxed);
                        return Ok(v);
                    }
                    Ok(Err(s)) => s,
                    Err(_) => tonic::Status::deadline_exceeded("the call timed out"),
                };
                let e = Error::from(status);
                if !matches!(e, Error::Unavailable(_)) {
                    return Err(e);
                }
                tracing::debug!(member = %member.url, error = %e, "etcd member failed a call");
                member.mark(true);
                let e = Error::Unavailable(format!("{} ({})", e.detail(), member.url));
                if resend == Resend::Never {
                    // The next call starts on another member.
                    let n = self.members.list.len();
                    self.members.preferred.store((i + 1) % n, Ordering::Relaxed);
                    return Err(e);
                }
                last = Some(e);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            tokio::time::sleep(ROUND_PAUSE.min(left)).await;
        }
    }

    /// Every key under `prefix` at one revision (the current one when `revision` is 0),
    /// fetched in pages; returns that revision and the keys in order.
    pub async fn range_prefix(&self, prefix: &[u8], revision: i64) -> Result<(i64, Vec<KeyValue>)> {
        let end = prefix_end(prefix);
        let mut key = prefix.to_vec();
        let mut revision = revision;
        let mut out = Vec::new();
        loop {
            let req = RangeRequest {
                key: key.clone(),
                range_end: end.clone(),
                limit: 1000,
                revision,
                ..Default::default()
            };
            let resp = self.range(req).await?;
            if revision == 0 {
                revision = resp.header.map_or(0, |h| h.revision);
            }
            let more = resp.more;
            if let Some(last) = resp.kvs.last() {
                key = last.key.clone();
                key.push(0);
            }
            out.extend(resp.kvs);
            if !more {
                return Ok((revision, out));
            }
        }
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        self.call(Resend::Safe, |m, left| {
            let mut kv = m.kv.clone();
            let req = timed(req.clone(), left);
            async move { Ok(kv.range(req).await?.into_inner()) }
        })
        .await
    }

    /// One key's current value and mod revision, if it exists.
    pub async fn get(&self, key: &[u8]) -> Result<(i64, Option<KeyValue>)> {
        let resp = self
            .range(RangeRequest {
                key: key.to_vec(),
                ..Default::default()
            })
            .await?;
        let rev = resp.header.map_or(0, |h| h.revision);
        Ok((rev, resp.kvs.into_iter().next()))
    }

    /// The revision `key` was last changed at (0: it does not exist), read linearizably
    /// (through the leader, never from one member's possibly stale copy) and without its
    /// value: the cheapest way to learn what a reader must have seen to be current.
    pub async fn mod_revision(&self, key: &[u8]) -> Result<i64> {
        let resp = self
            .range(RangeRequest {
                key: key.to_vec(),
                keys_only: true,
                ..Default::default()
            })
            .await?;
        Ok(resp.kvs.first().map_or(0, |kv| kv.mod_revision))
    }

    /// Where etcd's history stands, read linearizably with `key` (keys only): the cluster's
    /// id, its current revision, and the revision `key` was last changed at (0: it does not
    /// exist). A restored etcd snapshot shows as another cluster id, or as a key changed
    /// at a revision below the one seen before.
    pub async fn history(&self, key: &[u8]) -> Result<History> {
        let resp = self
            .range(RangeRequest {
                key: key.to_vec(),
                keys_only: true,
                ..Default::default()
            })
            .await?;
        let (cluster_id, revision) = resp.header.map_or((0, 0), |h| (h.cluster_id, h.revision));
        Ok(History {
            cluster_id,
            revision,
            mod_revision: resp.kvs.first().map_or(0, |kv| kv.mod_revision),
        })
    }

    /// `key` as the first change after revision `after` left it (`None`: deleted), read
    /// from etcd's history with a watch; waits for that change if there is none yet.
    /// Fails when the history was compacted past `after`.
    pub async fn first_change_after(&self, key: &[u8], after: i64) -> Result<Option<KeyValue>> {
        let mut stream = self.watch_range(key, Vec::new(), after + 1, false).await?;
        let first = tokio::time::timeout(CALL_TIMEOUT, async {
            loop {
                match stream.message().await? {
                    None => return Err(Error::Unavailable("the watch ended".into())),
                    Some(r) if r.compact_revision > 0 => {
                        return Err(Error::Refused(format!(
                            "etcd's history was compacted at {} past revision {after}",
                            r.compact_revision
                        )));
                    }
                    Some(r) => {
                        if let Some(e) = r.events.into_iter().next() {
                            return Ok(e);
                        }
                    }
                }
            }
        })
        .await
        .map_err(|_| Error::Unavailable("no change came on the watch".into()))??;
        Ok((first.r#type != EventType::Delete as i32)
            .then_some(first.kv)
            .flatten())
    }

    /// Runs one transaction: `compare`, then `success` if they all hold, else `failure`.
    ///
    /// A transaction is sent once: when the call fails it may still have been applied, and
    /// the error says only that etcd could not be reached. A caller that must know tells by
    /// what its compares guard: one that compared a key's revision and put that key can be
    /// sent again (only one of the two can hold), and the key's next change says whose it
    /// was ([`Client::first_change_after`]).
    pub async fn txn(
        &self,
        compare: Vec<Compare>,
        success: Vec<RequestOp>,
        failure: Vec<RequestOp>,
    ) -> Result<TxnResponse> {
        let req = TxnRequest {
            compare,
            success,
            failure,
        };
        self.call(Resend::Never, |m, left| {
            let mut kv = m.kv.clone();
            let req = timed(req.clone(), left);
            async move { Ok(kv.txn(req).await?.into_inner()) }
        })
        .await
    }

    /// Drops the history before `revision` (etcd keeps every old version until compacted).
    pub async fn compact(&self, revision: i64) -> Result<()> {
        let req = CompactionRequest {
            revision,
            physical: false,
        };
        self.call(Resend::Safe, |m, left| {
            let mut kv = m.kv.clone();
            let req = timed(req, left);
            async move { kv.compact(req).await.map(|_| ()) }
        })
        .await
    }

    /// Watches every key under `prefix` from `start_revision` on; the stream ends or
    /// fails when the member goes away (watch again from the last revision seen).
    pub async fn watch_prefix(
        &self,
        prefix: &[u8],
        start_revision: i64,
    ) -> Result<tonic::Streaming<WatchResponse>> {
        self.watch_range(prefix, prefix_end(prefix), start_revision, true)
            .await
    }

    async fn watch_range(
        &self,
        key: &[u8],
        range_end: Vec<u8>,
        start_revision: i64,
        progress_notify: bool,
    ) -> Result<tonic::Streaming<WatchResponse>> {
        let create = WatchRequest {
            request_union: Some(watch_request::RequestUnion::CreateRequest(
                WatchCreateRequest {
                    key: key.to_vec(),
                    range_end,
                    start_revision,
                    progress_notify,
                    ..Default::default()
                },
            )),
        };
        self.call(Resend::Safe, |m, _| {
            let mut watch = m.watch.clone();
            let create = create.clone();
            async move {
                // The request stream stays open (dropping it would end the watch).
                let (tx, rx) = tokio::sync::mpsc::channel(1);
                tx.send(create)
                    .await
                    .map_err(|_| tonic::Status::unavailable("watch request not sent"))?;
                let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
                let resp = watch.watch(stream).await?.into_inner();
                // Kept alive with the response stream: a task that holds the sender until
                // closed.
                tokio::spawn(async move {
                    tx.closed().await;
                });
                Ok(resp)
            }
        })
        .await
    }

    /// A lease of `ttl`; keys put with it go when it is not kept alive.
    pub async fn lease_grant(&self, ttl: Duration) -> Result<i64> {
        let req = LeaseGrantRequest {
            #[allow(clippy::cast_possible_wrap)]
            ttl: ttl.as_secs().max(1) as i64,
            id: 0,
        };
        // Sent again, a grant makes a second lease, which nobody keeps alive: it ends.
        let resp = self
            .call(Resend::Safe, |m, left| {
                let mut lease = m.lease.clone();
                let req = timed(req, left);
                async move { Ok(lease.lease_grant(req).await?.into_inner()) }
            })
            .await?;
        if !resp.error.is_empty() {
            return Err(Error::Refused(resp.error));
        }
        Ok(resp.id)
    }

    /// Renews lease `id` once; returns its remaining TTL in seconds (0 or less: gone).
    pub async fn lease_keep_alive_once(&self, id: i64) -> Result<i64> {
        self.call(Resend::Safe, |m, left| {
            let mut lease = m.lease.clone();
            async move {
                let stream = tokio_stream::once(LeaseKeepAliveRequest { id });
                let mut resp = lease
                    .lease_keep_alive(timed(stream, left))
                    .await?
                    .into_inner();
                match resp.message().await? {
                    Some(r) => Ok(r.ttl),
                    None => Err(tonic::Status::unavailable("lease keep-alive stream ended")),
                }
            }
        })
        .await
    }

    /// Ends lease `id` now (its keys are deleted).
    pub async fn lease_revoke(&self, id: i64) -> Result<()> {
        self.call(Resend::Safe, |m, left| {
            let mut lease = m.lease.clone();
            let req = timed(LeaseRevokeRequest { id }, left);
            async move { lease.lease_revoke(req).await.map(|_| ()) }
        })
        .await
    }
}

fn timed<T>(message: T, timeout: Duration) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    r.set_timeout(timeout);
    r
}

/// The end of the range of every key starting with `prefix`.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// A put of `key` = `value`, for a transaction; `lease` 0 for none.
pub fn put(key: Vec<u8>, value: Vec<u8>, lease: i64) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestPut(PutRequest {
            key,
            value,
            lease,
            ..Default::default()
        })),
    }
}

/// A delete of `key`, for a transaction.
pub fn delete(key: Vec<u8>) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestDeleteRange(
            DeleteRangeRequest {
                key,
                ..Default::default()
            },
        )),
    }
}

/// A read of `key`, for a transaction.
pub fn get(key: Vec<u8>) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestRange(RangeRequest {
            key,
            ..Default::default()
        })),
    }
}

/// Holds when `key`'s last change was at `revision` (0: the key does not exist).
pub fn mod_revision_is(key: Vec<u8>, revision: i64) -> Compare {
    Compare {
        result: compare::CompareResult::Equal as i32,
        target: compare::CompareTarget::Mod as i32,
        key,
        target_union: Some(compare::TargetUnion::ModRevision(revision)),
        range_end: Vec::new(),
    }
}

/// Holds when every key in `[key, range_end)` was last changed before `revision` (and so
/// when the range is empty): nothing in it was put since a read at `revision - 1`.
pub fn mod_revision_below_in_range(key: Vec<u8>, range_end: Vec<u8>, revision: i64) -> Compare {
    Compare {
        result: compare::CompareResult::Less as i32,
        target: compare::CompareTarget::Mod as i32,
        key,
        target_union: Some(compare::TargetUnion::ModRevision(revision)),
        range_end,
    }
}

/// Holds when `key` was created at `revision` (0: the key does not exist).
pub fn create_revision_is(key: Vec<u8>, revision: i64) -> Compare {
    Compare {
        result: compare::CompareResult::Equal as i32,
        target: compare::CompareTarget::Create as i32,
        key,
        target_union: Some(compare::TargetUnion::CreateRevision(revision)),
        range_end: Vec::new(),
    }
}

/// The key-values a transaction's read ops returned, in order.
pub fn read_results(resp: &TxnResponse) -> Vec<KeyValue> {
    use pb::etcdserverpb::response_op::Response;
    resp.responses
        .iter()
        .filter_map(|r| match &r.response {
            Some(Response::ResponseRange(rr)) => Some(rr.kvs.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ends_past_every_key_under_it() {
        assert_eq!(prefix_end(b"/csivol/"), b"/csivol0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff"), vec![0]);
    }
}
