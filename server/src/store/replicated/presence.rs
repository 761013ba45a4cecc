//! This server's presence in etcd, under `<prefix>/servers/<id>`: announced with a lease
//! while it runs, saying the newest schema it knows (`schema::Presence`), and withdrawn as
//! it stops.

use std::time::Duration;

use super::Cluster;
use super::schema::{Presence, servers_prefix};
use crate::store::sqlite::migrations;

fn presence_key(cluster: &Cluster) -> Vec<u8> {
    format!("{}{}", servers_prefix(&cluster.prefix), cluster.id).into_bytes()
}

/// Keeps this server's presence under `<prefix>/servers/` while it runs, on a lease of
/// its own: a server that dies or loses etcd is gone from the list within the lease TTL.
pub async fn announce(cluster: Cluster, listen: String) {
    let key = presence_key(&cluster);
    let me = Presence {
        schema: migrations::schema_version(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        listen,
        host: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_default(),
    };
    let value = serde_json::to_vec(&me).expect("a presence serialises");
    let ttl = cluster.lease_ttl;
    let renew = ttl / 3;
    loop {
        let put = async {
            let lease = cluster.client.lease_grant(ttl).await?;
            cluster
                .client
                .txn(
                    vec![],
                    vec![csivol_etcd_client::put(key.clone(), value.clone(), lease)],
                    vec![],
                )
                .await?;
            Ok::<_, csivol_etcd_client::Error>(lease)
        };
        let lease = match put.await {
            Ok(l) => l,
            Err(e) => {
                tracing::debug!(error = %e, "failed to announce this server in etcd; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        loop {
            tokio::time::sleep(renew).await;
            match cluster.client.lease_keep_alive_once(lease).await {
                Ok(t) if t > 0 => {}
                _ => break,
            }
        }
    }
}

/// Takes this server's presence away as it stops, so that it is not counted as a live
/// server of its release until its lease ends.
pub async fn withdraw(cluster: &Cluster) {
    let delete = csivol_etcd_client::delete(presence_key(cluster));
    if let Err(e) = cluster.client.txn(vec![], vec![delete], vec![]).await {
        tracing::debug!(error = %e, "failed to take this server's presence out of etcd");
    }
}
