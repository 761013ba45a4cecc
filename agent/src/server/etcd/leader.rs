//! Leadership for once-only work (liveness expiry, controller-operation scheduling, lease
//! expiry, event pruning, the fence policy): the server that creates `<prefix>/leader`
//! with its etcd lease leads until the lease ends. A leader that cannot renew its lease
//! steps down before the lease can have expired in etcd; a follower tries to take the key
//! every half second, so failover takes at most the lease TTL and about a second.

use std::time::{Duration, Instant};

use csivol_etcd::Client;
use tokio::sync::watch;

/// Whether this server leads now; `changed()` to follow it.
#[derive(Debug, Clone)]
pub struct Leadership {
    rx: watch::Receiver<bool>,
}

impl Leadership {
    /// Always the leader: a single server (SQLite store).
    pub fn alone() -> Self {
        let (tx, rx) = watch::channel(true);
        // The sender is dropped: the value stays `true` for good.
        drop(tx);
        Self { rx }
    }

    pub fn start(client: Client, prefix: &str, ttl: Duration) -> Self {
        let (tx, rx) = watch::channel(false);
        let key = format!("{prefix}/leader").into_bytes();
        tokio::spawn(campaign(client, key, ttl, tx));
        Self { rx }
    }

    pub fn is_leader(&self) -> bool {
        *self.rx.borrow()
    }

    /// Waits until leadership is `want`.
    pub async fn wait_for(&mut self, want: bool) {
        let _ = self.rx.wait_for(|v| *v == want).await;
        if self.rx.has_changed().is_err() && *self.rx.borrow() != want {
            // The campaign stopped (never with the single-server store): wait forever.
            std::future::pending::<()>().await;
        }
    }
}

async fn campaign(client: Client, key: Vec<u8>, ttl: Duration, tx: watch::Sender<bool>) {
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
            let leading = *tx.borrow();
            if !leading {
                let taken = client
                    .txn(
                        vec![csivol_etcd::create_revision_is(key.clone(), 0)],
                        vec![csivol_etcd::put(key.clone(), id.clone(), lease)],
                        vec![],
                    )
                    .await;
                if let Ok(resp) = taken
                    && resp.succeeded
                {
                    tracing::info!("this server leads now (once-only work runs here)");
                    let _ = tx.send(true);
                }
            }
            let pause = if *tx.borrow() {
                renew_every
            } else {
                Duration::from_millis(500).min(renew_every)
            };
            tokio::time::sleep(pause).await;
        }
        if *tx.borrow() {
            tracing::warn!("lost the leader lease; once-only work stops here");
            let _ = tx.send(false);
        }
        let _ = client.lease_revoke(lease).await;
    }
}
