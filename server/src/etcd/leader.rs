//! Leadership for once-only work (liveness expiry, controller-operation scheduling, lease
//! expiry, event pruning, the fence policy): the server that creates `<prefix>/leader`
//! with its etcd lease leads until the lease ends. A leader that cannot renew its lease
//! steps down before the lease can have expired in etcd, and so does one that finds the key
//! no longer its own; a follower tries to take the key every half second, so failover
//! takes at most the lease TTL and about a second.

use std::time::{Duration, Instant};

use csivol_etcd_client::Client;
use tokio::sync::watch;

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

    pub fn start(client: Client, prefix: &str, ttl: Duration) -> Self {
        let (tx, rx) = watch::channel(None);
        tokio::spawn(campaign(client, leader_key(prefix), ttl, tx));
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

async fn campaign(client: Client, key: Vec<u8>, ttl: Duration, tx: watch::Sender<Option<i64>>) {
    let id = format!("{}-{}", std::process::id(), super::db::now_ms()).into_bytes();
    let renew_every = ttl / 3;
    loop {
        let lease = match client.lease_grant(ttl).await {
            Ok(l) => l,
            Err(e) => {
                tracing::debug!(error = %e, "failed to get an etcd lease; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let mut renewed = Instant::now();
        loop {
            // Renew first: the lease must outlive each attempt.
            if renewed.elapsed() >= renew_every {
                let asked = Instant::now();
                match tokio::time::timeout(renew_every, client.lease_keep_alive_once(lease)).await {
                    Ok(Ok(t)) if t > 0 => renewed = asked,
                    Ok(Ok(_)) => break,
                    Ok(Err(e)) => tracing::debug!(error = %e, "failed to renew the leader lease"),
                    Err(_) => tracing::debug!("renewing the leader lease timed out"),
                }
            }
            // Past this, etcd may have ended the lease: not leader any more.
            let safe = renewed.elapsed() < ttl.saturating_sub(Duration::from_millis(500));
            if !safe {
                break;
            }
            // The key itself must still be ours (the term is the revision that created
            // it): one deleted or taken over by hand deposes this server, whose writes its
            // fence refuses meanwhile; it stands again once the key is free.
            let term = *tx.borrow();
            if let Some(term) = term
                && let Ok((_, kv)) = client.get(&key).await
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
                let taken = client
                    .txn(
                        vec![csivol_etcd_client::create_revision_is(key.clone(), 0)],
                        vec![csivol_etcd_client::put(key.clone(), id.clone(), lease)],
                        vec![],
                    )
                    .await;
                if let Ok(resp) = taken
                    && resp.succeeded
                {
                    let term = resp.header.map_or(0, |h| h.revision);
                    tracing::info!(term, "this server leads now (once-only work runs here)");
                    let _ = tx.send(Some(term));
                }
            }
            let pause = if tx.borrow().is_some() {
                renew_every
            } else {
                Duration::from_millis(500).min(renew_every)
            };
            tokio::time::sleep(pause).await;
        }
        if tx.borrow().is_some() {
            tracing::warn!("lost the leader lease; once-only work stops here");
            let _ = tx.send(None);
        }
        let _ = client.lease_revoke(lease).await;
    }
}
