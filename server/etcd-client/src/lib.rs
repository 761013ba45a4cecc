//! A small client of etcd's v3 gRPC API, with only the calls csivol's etcd state store
//! makes: ranges, transactions, watches and leases. The generated types stay in [`pb`];
//! the store builds its requests through the helpers here.

use std::time::Duration;

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
    LeaseRevokeRequest, PutRequest, RangeRequest, TxnRequest, TxnResponse, WatchCreateRequest,
    WatchRequest, WatchResponse, compare, kv_client::KvClient, lease_client::LeaseClient,
    request_op, watch_client::WatchClient, watch_request,
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

/// How long one unary call may take; a call to a cluster without quorum fails after it.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// A client over every endpoint of one etcd cluster (requests go to the members that
/// answer). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Client {
    kv: KvClient<Channel>,
    watch: WatchClient<Channel>,
    lease: LeaseClient<Channel>,
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
            let ep = ep
                .connect_timeout(Duration::from_secs(2))
                .tcp_nodelay(true)
                .http2_keep_alive_interval(Duration::from_secs(2))
                .keep_alive_timeout(Duration::from_secs(2))
                .keep_alive_while_idle(true);
            list.push(ep);
        }
        if list.is_empty() {
            return Err(Error::Endpoint(String::new(), "no endpoints".into()));
        }
        let channel = Channel::balance_list(list.into_iter());
        Ok(Self {
            kv: KvClient::new(channel.clone()),
            watch: WatchClient::new(channel.clone()),
            lease: LeaseClient::new(channel),
        })
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
            let resp = self.kv.clone().range(timed(req)).await?.into_inner();
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

    /// One key's current value and mod revision, if it exists.
    pub async fn get(&self, key: &[u8]) -> Result<(i64, Option<KeyValue>)> {
        let req = RangeRequest {
            key: key.to_vec(),
            ..Default::default()
        };
        let resp = self.kv.clone().range(timed(req)).await?.into_inner();
        let rev = resp.header.map_or(0, |h| h.revision);
        Ok((rev, resp.kvs.into_iter().next()))
    }

    /// Runs one transaction: `compare`, then `success` if they all hold, else `failure`.
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
        Ok(self.kv.clone().txn(timed(req)).await?.into_inner())
    }

    /// Drops the history before `revision` (etcd keeps every old version until compacted).
    pub async fn compact(&self, revision: i64) -> Result<()> {
        let req = CompactionRequest {
            revision,
            physical: false,
        };
        self.kv.clone().compact(timed(req)).await?;
        Ok(())
    }

    /// Watches every key under `prefix` from `start_revision` on; the stream ends or
    /// fails when the member goes away (watch again from the last revision seen).
    pub async fn watch_prefix(
        &self,
        prefix: &[u8],
        start_revision: i64,
    ) -> Result<tonic::Streaming<WatchResponse>> {
        let create = WatchRequest {
            request_union: Some(watch_request::RequestUnion::CreateRequest(
                WatchCreateRequest {
                    key: prefix.to_vec(),
                    range_end: prefix_end(prefix),
                    start_revision,
                    progress_notify: true,
                    ..Default::default()
                },
            )),
        };
        // The request stream stays open (dropping it would end the watch).
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tx.send(create)
            .await
            .map_err(|_| Error::Unavailable("watch request not sent".into()))?;
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
        let resp = self.watch.clone().watch(stream).await?.into_inner();
        // Kept alive with the response stream: a task that holds the sender until closed.
        tokio::spawn(async move {
            tx.closed().await;
        });
        Ok(resp)
    }

    /// A lease of `ttl`; keys put with it go when it is not kept alive.
    pub async fn lease_grant(&self, ttl: Duration) -> Result<i64> {
        let req = LeaseGrantRequest {
            #[allow(clippy::cast_possible_wrap)]
            ttl: ttl.as_secs().max(1) as i64,
            id: 0,
        };
        let resp = self
            .lease
            .clone()
            .lease_grant(timed(req))
            .await?
            .into_inner();
        if !resp.error.is_empty() {
            return Err(Error::Refused(resp.error));
        }
        Ok(resp.id)
    }

    /// Renews lease `id` once; returns its remaining TTL in seconds (0 or less: gone).
    pub async fn lease_keep_alive_once(&self, id: i64) -> Result<i64> {
        let req = LeaseKeepAliveRequest { id };
        let stream = tokio_stream::once(req);
        let mut resp = self
            .lease
            .clone()
            .lease_keep_alive(timed(stream))
            .await?
            .into_inner();
        match tokio::time::timeout(CALL_TIMEOUT, resp.message()).await {
            Ok(Ok(Some(r))) => Ok(r.ttl),
            Ok(Ok(None)) => Err(Error::Unavailable("lease keep-alive stream ended".into())),
            Ok(Err(s)) => Err(s.into()),
            Err(_) => Err(Error::Unavailable("lease keep-alive timed out".into())),
        }
    }

    /// Ends lease `id` now (its keys are deleted).
    pub async fn lease_revoke(&self, id: i64) -> Result<()> {
        self.lease
            .clone()
            .lease_revoke(timed(LeaseRevokeRequest { id }))
            .await?;
        Ok(())
    }
}

fn timed<T>(message: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    r.set_timeout(CALL_TIMEOUT);
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
