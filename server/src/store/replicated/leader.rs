//! Leadership for once-only work (liveness expiry, controller-operation scheduling, lease
//! expiry, event pruning, the fence policy): the server that creates `<prefix>/leader`
//! with its etcd lease leads until the lease ends. A leader that cannot renew its lease
//! steps down before the lease can have expired in etcd, and so does one that finds the key
//! no longer its own; a follower tries to take the key every half second, so failover
//! takes at most the lease TTL and about a second.

use std::time::{Duration, Instant};

use csivol_etcd_client::Client;
use tokio::sync::watch;

use crate::clock::Clock;

/// Whether this server leads now, and its term: the revision at which it created the
/// leader key, which its once-only writes compare (`Db::write_led`), so that a deposed
/// leader's write fails.
#[derive(Debug, Clone)]
pub struct Leadership {
    rx: watch::Receiver<Option<i64>>,
}

impl Leadership {
    /// Always the leader: a single server (SQLite store).
    pub fn alone() -> Self {
        let (tx, rx) = watch::channel(Some(0));
        // The sender is dropped: the value stays for good.
        drop(tx);
        Self { rx }
    }

    /// Campaigns for the lease, as a candidate named by this process and `clock`'s time.
    pub fn start(client: Client, prefix: &str, ttl: Duration, clock: &Clock) -> Self {
        let (tx, rx) = watch::channel(None);
        let id = format!("{}-{}", std::process::id(), clock.now_ms()).into_bytes();
        tokio::spawn(campaign(client, leader_key(prefix), ttl, tx, id));
        Self { rx }
    }

    pub fn is_leader(&self) -> bool {
        self.rx.borrow().is_some()
    }

    /// The current term, while leading.
    pub fn term(&self) -> Option<i64> {
        *self.rx.borrow()
    }

    /// Waits until leadership is `want`.
    pub async fn wait_for(&mut self, want: bool) {
        let _ = self.rx.wait_for(|v| v.is_some() == want).await;
        if self.rx.has_changed().is_err() && self.rx.borrow().is_some() != want {
            // The campaign stopped (never with the single-server store): wait forever.
            std::future::pending::<()>().await;
        }
    }
}

/// The election key under `prefix`.
pub fn leader_key(prefix: &str) -> Vec<u8> {
    format!("{prefix}/leader").into_bytes()
}

/// How long before its lease could have ended in etcd a leader stops leading: room for a
/// renewal's answer on its way back and for clocks that do not tick alike.
const MARGIN: Duration = Duration::from_millis(500);

async fn campaign(
    client: Client,
    key: Vec<u8>,
    ttl: Duration,
    tx: watch::Sender<Option<i64>>,
    id: Vec<u8>,
) {
    let renew_every = ttl / 3;
    loop {
        // The lease runs from when etcd granted it, which is after this.
        let asked = Instant::now();
        let lease = match client.lease_grant(ttl).await {
            Ok(l) => l,
            Err(e) => {
                tracing::debug!(error = %e, "failed to get an etcd lease; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let mut renewed = asked;
        loop {
            // Past this, etcd may have ended the lease: not leader any more. Every call
            // below gives up by then, so that a server cut off from etcd, whose calls hang
            // rather than fail, steps down in time all the same.
            let deadline = renewed + ttl.saturating_sub(MARGIN);
            // Renew first: the lease must outlive each attempt.
            if renewed.elapsed() >= renew_every {
                let asked = Instant::now();
                let until = deadline.min(asked + renew_every);
                match tokio::time::timeout_at(until.into(), client.lease_keep_alive_once(lease))
                    .await
                {
                    Ok(Ok(t)) if t > 0 => renewed = asked,
                    Ok(Ok(_)) => break,
                    Ok(Err(e)) => tracing::debug!(error = %e, "failed to renew the leader lease"),
                    Err(_) => tracing::debug!("renewing the leader lease timed out"),
                }
            }
            let deadline = renewed + ttl.saturating_sub(MARGIN);
            if Instant::now() >= deadline {
                break;
            }
            // The key itself must still be ours (the term is the revision that created
            // it): one deleted or taken over by hand deposes this server, whose writes its
            // fence refuses meanwhile; it stands again once the key is free.
            let term = *tx.borrow();
            if let Some(term) = term
                && let Ok(Ok((_, kv))) =
                    tokio::time::timeout_at(deadline.into(), client.get(&key)).await
                && kv.map(|kv| kv.create_revision) != Some(term)
            {
                tracing::warn!(
                    term,
                    "the leader key is no longer this server's; once-only work stops here"
                );
                let _ = tx.send(None);
            }
            let leading = tx.borrow().is_some();
            if !leading {
                let take = client.txn(
                    vec![csivol_etcd_client::create_revision_is(key.clone(), 0)],
                    vec![csivol_etcd_client::put(key.clone(), id.clone(), lease)],
                    vec![csivol_etcd_client::get(key.clone())],
                );
                let taken = tokio::time::timeout_at(deadline.into(), take).await;
                if let Ok(Ok(resp)) = taken
                    && Instant::now() < deadline
                {
                    // Taken now, or by an earlier attempt whose answer was lost: the key
                    // is on this server's lease either way.
                    let term = if resp.succeeded {
                        resp.header.map(|h| h.revision)
                    } else {
                        csivol_etcd_client::read_results(&resp)
                            .into_iter()
                            .find(|kv| kv.lease == lease)
                            .map(|kv| kv.create_revision)
                    };
                    if let Some(term) = term {
                        tracing::info!(term, "this server leads now (once-only work runs here)");
                        let _ = tx.send(Some(term));
                    }
                }
            }
            let pause = if tx.borrow().is_some() {
                renew_every
            } else {
                Duration::from_millis(500).min(renew_every)
            };
            let wake = (Instant::now() + pause).min(deadline);
            tokio::time::sleep_until(wake.into()).await;
        }
        if tx.borrow().is_some() {
            tracing::warn!("lost the leader lease; once-only work stops here");
            let _ = tx.send(None);
        }
        let _ = client.lease_revoke(lease).await;
    }
}
