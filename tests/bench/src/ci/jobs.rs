//! One CI job's claim, as `csivol run` makes it off a terminal: the claim's POST held
//! until it changes again, a blocking query to ready, the job's file written (and, on a
//! member last released with the job's key, the previous job's file read back), the
//! release held until the claim is gone.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use csivol_api::{self as api, ClaimState};

use crate::client::{Http, Resp};
use crate::load::watch;

/// The file each job writes on its volume: the cache key it ran with.
pub const KEY_FILE: &str = "csivol-bench-cache-key";

/// A claim answered by its POST, followed until ready. Returns the ready claim.
pub async fn until_ready(
    http: &Http,
    path: &str,
    created: &Resp,
    deadline: Instant,
) -> anyhow::Result<api::Claim> {
    let mut claim: api::Claim = created.json()?;
    let mut index = created.index.unwrap_or(claim.index);
    while claim.state != ClaimState::Ready {
        if matches!(claim.state, ClaimState::Failed | ClaimState::Blocked) {
            bail!(
                "{path} became {}: {}",
                claim.state,
                claim.error.unwrap_or_default()
            );
        }
        if Instant::now() >= deadline {
            bail!("{path} not ready in time (still {})", claim.state);
        }
        match watch(http, path, index).await? {
            Some((c, i)) => (claim, index) = (c, i),
            None => bail!("{path} vanished before it was ready"),
        }
    }
    Ok(claim)
}

/// Releases the claim at `path` as a job that succeeded and waits until it is gone.
pub async fn release(http: &Http, path: &str, deadline: Instant) -> anyhow::Result<()> {
    let r = http
        .delete(&http.held(&format!("{path}?succeeded=true")))
        .await?;
    let mut index = match r.status {
        204 => return Ok(()),
        202 => r.index.unwrap_or(0),
        s => bail!(
            "release of {path}: HTTP {s}: {}",
            String::from_utf8_lossy(&r.body)
        ),
    };
    loop {
        if Instant::now() >= deadline {
            bail!("{path} not gone in time after its release");
        }
        match watch(http, path, index).await? {
            Some((c, i)) if c.state == ClaimState::Releasing => index = i,
            Some((c, _)) => bail!("released claim {path} became {}", c.state),
            None => return Ok(()),
        }
    }
}

/// What the job found on its volume and wrote there: with real mounts (`bind`), the key
/// of the last job that wrote the volume, then its own key. Marker-file presentations
/// (`none`) hold no data, so nothing is read or written.
pub fn write_key(bind: bool, claim: &api::Claim, key: &str) -> anyhow::Result<Option<String>> {
    if !bind {
        return Ok(None);
    }
    let target = claim
        .target_path
        .as_deref()
        .with_context(|| format!("ready claim {} has no target path", claim.alloc))?;
    let file = Path::new(target).join(KEY_FILE);
    let found = std::fs::read_to_string(&file).ok();
    std::fs::write(&file, key).with_context(|| format!("failed to write {}", file.display()))?;
    Ok(found)
}

/// How long a job's claim may take from the POST to gone.
pub fn deadline(timeout: Duration) -> Instant {
    Instant::now() + timeout
}
