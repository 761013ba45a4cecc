//! Publications a restore forgot, taken down as an operator takes them down. A restored
//! state does not know a ControllerPublishVolume made after its backup; if the node never
//! staged the volume, nothing tells the server about it, and the storage keeps it
//! published (docs/design/state-store.md says so). The controller-side reconciliation
//! finds it (`leaked`), and an operator detaches it (`csivol detach VOLUME --node NODE`).
//! The drain does that for each publication left in the plugins' backend that was made
//! between a restore's backup and its end, and for nothing else: any other publication
//! left over stays an orphan, a violation.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, UNIX_EPOCH};

use csivol_api::{ControllerFinding, DetachRequest, FindingKind};

use super::ledger::Ledger;
use crate::client::Http;

/// A publication in the plugins' backend: its file (`attachments/<volume id>/<node id>.json`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Publication {
    external_id: String,
    node_id: String,
    file: PathBuf,
}

/// What the drain did about the publications a restore forgot.
#[derive(Debug, Default)]
pub struct Leaks {
    pub detached: usize,
    pub errors: Vec<String>,
}

/// Detaches, through the leaked finding and `POST /v1/volumes/{v}/detach`, each
/// publication left in `backend` that a restore forgot (made within a restore's window),
/// and waits until the storage no longer has it.
pub async fn detach_forgotten(
    http: &Http,
    backend: &Path,
    ledger: &Ledger,
    forgotten_volumes: &BTreeSet<String>,
    timeout: Duration,
) -> Leaks {
    let mut out = Leaks::default();
    // A volume a restore forgot is no csivol volume: nothing of it can be detached through
    // csivol, and the storage keeps it with its publications.
    let forgotten: Vec<Publication> = publications(backend)
        .into_iter()
        .filter(|(p, _)| !forgotten_volumes.contains(&p.external_id))
        .filter(|(_, at)| ledger.forgotten_by_a_restore(*at))
        .map(|(p, _)| p)
        .collect();
    let deadline = Instant::now() + timeout;
    for p in forgotten {
        match detach(http, &p, deadline).await {
            Ok(()) => out.detached += 1,
            Err(e) => out.errors.push(format!(
                "the publication of {} to {} that a restore forgot: {e}",
                p.external_id, p.node_id
            )),
        }
    }
    out
}

/// Every publication in the backend, with when it was made (its file's time, unix ms).
fn publications(backend: &Path) -> Vec<(Publication, u64)> {
    let mut out = Vec::new();
    for v in std::fs::read_dir(backend.join("attachments"))
        .into_iter()
        .flatten()
        .flatten()
    {
        for a in std::fs::read_dir(v.path()).into_iter().flatten().flatten() {
            let file = a.path();
            let Some(node_id) = file
                .extension()
                .filter(|e| *e == "json")
                .and(file.file_stem())
            else {
                continue;
            };
            let at = a
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_millis() as u64);
            out.push((
                Publication {
                    external_id: v.file_name().to_string_lossy().into_owned(),
                    node_id: node_id.to_string_lossy().into_owned(),
                    file: file.clone(),
                },
                at,
            ));
        }
    }
    out
}

/// Waits for the reconciliation's `leaked` finding of `p`, detaches it as it names it, and
/// waits until the backend no longer has it.
async fn detach(http: &Http, p: &Publication, deadline: Instant) -> Result<(), String> {
    let finding = loop {
        let findings: Vec<ControllerFinding> = match http.get("/v1/controller-findings").await {
            Ok(r) if r.status == 200 => r.json().unwrap_or_default(),
            _ => Vec::new(),
        };
        if let Some(f) = findings.into_iter().find(|f| {
            f.kind == FindingKind::Leaked
                && f.external_id == p.external_id
                && f.node_id.as_deref() == Some(&p.node_id)
        }) {
            break f;
        }
        if !p.file.exists() {
            // Gone meanwhile (taken down by its node after all).
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err("no confirmed `leaked` finding of it in time".to_owned());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let (Some(volume), Some(node)) = (finding.volume, finding.node) else {
        return Err(format!(
            "its finding names no csivol volume and node: {}",
            finding.message
        ));
    };
    let req = DetachRequest {
        node,
        reason: "published after the backup a restore went back to; nothing uses it".to_owned(),
        force: false,
        dry_run: false,
    };
    match http
        .post(&format!("/v1/volumes/{volume}/detach"), &req)
        .await
    {
        Ok(r) if (200..300).contains(&r.status) => {}
        Ok(r) => {
            return Err(format!(
                "detach refused: HTTP {}: {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            ));
        }
        Err(e) => return Err(format!("detach got no answer: {e:#}")),
    }
    while p.file.exists() {
        if Instant::now() >= deadline {
            return Err("still published after its detach".to_owned());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}
