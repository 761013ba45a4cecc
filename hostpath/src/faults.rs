//! Fault injection (`--fail RPC=CODE[:COUNT]`, `--delay RPC=DURATION`, `--hold RPC=FILE`)
//! and the call log that lets tests see what the plugin was asked to do.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tonic::Code;

/// Every RPC the plugin serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rpc {
    GetPluginInfo,
    GetPluginCapabilities,
    Probe,
    CreateVolume,
    DeleteVolume,
    ControllerPublishVolume,
    ControllerUnpublishVolume,
    ValidateVolumeCapabilities,
    ListVolumes,
    GetCapacity,
    ControllerGetCapabilities,
    CreateSnapshot,
    DeleteSnapshot,
    ListSnapshots,
    ControllerExpandVolume,
    ControllerGetVolume,
    ControllerModifyVolume,
    GetSnapshot,
    GroupControllerGetCapabilities,
    CreateVolumeGroupSnapshot,
    DeleteVolumeGroupSnapshot,
    GetVolumeGroupSnapshot,
    NodeStageVolume,
    NodeUnstageVolume,
    NodePublishVolume,
    NodeUnpublishVolume,
    NodeGetVolumeStats,
    NodeExpandVolume,
    NodeGetCapabilities,
    NodeGetInfo,
}

impl Rpc {
    const ALL: [Rpc; 30] = [
        Self::GetPluginInfo,
        Self::GetPluginCapabilities,
        Self::Probe,
        Self::CreateVolume,
        Self::DeleteVolume,
        Self::ControllerPublishVolume,
        Self::ControllerUnpublishVolume,
        Self::ValidateVolumeCapabilities,
        Self::ListVolumes,
        Self::GetCapacity,
        Self::ControllerGetCapabilities,
        Self::CreateSnapshot,
        Self::DeleteSnapshot,
        Self::ListSnapshots,
        Self::ControllerExpandVolume,
        Self::ControllerGetVolume,
        Self::ControllerModifyVolume,
        Self::GetSnapshot,
        Self::GroupControllerGetCapabilities,
        Self::CreateVolumeGroupSnapshot,
        Self::DeleteVolumeGroupSnapshot,
        Self::GetVolumeGroupSnapshot,
        Self::NodeStageVolume,
        Self::NodeUnstageVolume,
        Self::NodePublishVolume,
        Self::NodeUnpublishVolume,
        Self::NodeGetVolumeStats,
        Self::NodeExpandVolume,
        Self::NodeGetCapabilities,
        Self::NodeGetInfo,
    ];

    /// The service an RPC belongs to: 0 identity, 1 controller (and group controller),
    /// 2 node.
    fn service(self) -> usize {
        match self {
            Self::GetPluginInfo | Self::GetPluginCapabilities | Self::Probe => 0,
            Self::NodeStageVolume
            | Self::NodeUnstageVolume
            | Self::NodePublishVolume
            | Self::NodeUnpublishVolume
            | Self::NodeGetVolumeStats
            | Self::NodeExpandVolume
            | Self::NodeGetCapabilities
            | Self::NodeGetInfo => 2,
            _ => 1,
        }
    }
}

impl fmt::Display for Rpc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl FromStr for Rpc {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|r| r.to_string() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Self::ALL.iter().map(ToString::to_string).collect();
                format!("unknown RPC `{s}`, expected one of: {}", names.join(", "))
            })
    }
}

pub use csivol_csi::convert::code_name;

fn parse_code(s: &str) -> Result<Code, String> {
    csivol_csi::convert::code_from_name(s)
        .filter(|c| *c != Code::Ok)
        .ok_or_else(|| {
            format!("unknown gRPC code `{s}`, expected e.g. UNAVAILABLE or INVALID_ARGUMENT")
        })
}

/// `--fail RPC=CODE[:COUNT]`: the first COUNT calls (every call without COUNT) fail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailSpec {
    pub rpc: Rpc,
    pub code: Code,
    pub count: Option<u32>,
}

impl FromStr for FailSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (rpc, rest) = s
            .split_once('=')
            .ok_or_else(|| format!("`{s}`: expected RPC=CODE[:COUNT]"))?;
        let (code, count) = match rest.split_once(':') {
            Some((code, count)) => {
                let n = count
                    .parse()
                    .map_err(|_| format!("`{s}`: COUNT must be a whole number"))?;
                (code, Some(n))
            }
            None => (rest, None),
        };
        Ok(Self {
            rpc: rpc.parse()?,
            code: parse_code(code)?,
            count,
        })
    }
}

/// `--delay RPC=DURATION`: every call waits this long before it runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DelaySpec {
    pub rpc: Rpc,
    pub delay: Duration,
}

impl FromStr for DelaySpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (rpc, d) = s
            .split_once('=')
            .ok_or_else(|| format!("`{s}`: expected RPC=DURATION"))?;
        let delay = humantime::parse_duration(d).map_err(|e| format!("`{s}`: {e}"))?;
        Ok(Self {
            rpc: rpc.parse()?,
            delay,
        })
    }
}

/// `--hold RPC=FILE`: every call waits until FILE exists, then runs. A test holds a call in
/// the plugin for as long as its scenario needs (a caller paused or cut off while the call
/// runs), and lets it go by creating the file: no guess at how long that takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HoldSpec {
    pub rpc: Rpc,
    pub until: PathBuf,
}

impl FromStr for HoldSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (rpc, file) = s
            .split_once('=')
            .filter(|(_, f)| !f.is_empty())
            .ok_or_else(|| format!("`{s}`: expected RPC=FILE"))?;
        Ok(Self {
            rpc: rpc.parse()?,
            until: PathBuf::from(file),
        })
    }
}

/// How often a held call looks for its file.
const HOLD_POLL: Duration = Duration::from_millis(50);

/// The configured faults, with what is left of each count.
#[derive(Debug, Default)]
pub struct Faults {
    fail: HashMap<Rpc, (Code, Option<AtomicU32>)>,
    delay: HashMap<Rpc, Duration>,
    hold: HashMap<Rpc, PathBuf>,
}

impl Faults {
    pub fn new(fail: &[FailSpec], delay: &[DelaySpec], hold: &[HoldSpec]) -> Self {
        Self {
            fail: fail
                .iter()
                .map(|f| (f.rpc, (f.code, f.count.map(AtomicU32::new))))
                .collect(),
            delay: delay.iter().map(|d| (d.rpc, d.delay)).collect(),
            hold: hold.iter().map(|h| (h.rpc, h.until.clone())).collect(),
        }
    }

    /// Waits the configured delay and hold, then returns the injected failure, if any is
    /// due.
    pub async fn before(&self, rpc: Rpc) -> Result<(), tonic::Status> {
        if let Some(d) = self.delay.get(&rpc) {
            tokio::time::sleep(*d).await;
        }
        if let Some(until) = self.hold.get(&rpc) {
            if !until.exists() {
                tracing::info!(%rpc, until = %until.display(), "holding the call until the file exists");
                while !until.exists() {
                    tokio::time::sleep(HOLD_POLL).await;
                }
            }
            tracing::info!(%rpc, "held call let go");
        }
        let Some((code, remaining)) = self.fail.get(&rpc) else {
            return Ok(());
        };
        let due = match remaining {
            None => true,
            Some(left) => left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok(),
        };
        if due {
            return Err(tonic::Status::new(
                *code,
                format!("injected fault: {rpc} fails with {}", code_name(*code)),
            ));
        }
        Ok(())
    }
}

/// Appends one JSON line per call to `<state-dir>/calls.jsonl`: which RPC, for which
/// volume (and target path, for a publication), with which result, when it began and
/// ended, and how many calls of the same service were in flight.
#[derive(Debug)]
pub struct CallLog {
    file: Mutex<File>,
    in_flight: [AtomicUsize; 3],
}

/// Counts a call as in flight until dropped.
#[derive(Debug)]
pub struct InFlight<'a> {
    counter: &'a AtomicUsize,
    pub concurrent: usize,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.counter.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One line of `calls.jsonl`.
#[derive(serde::Serialize)]
struct CallLine<'a> {
    #[serde(serialize_with = "display")]
    rpc: Rpc,
    volume_id: &'a str,
    node_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    target_path: Option<&'a str>,
    code: &'a str,
    in_flight: usize,
    /// When the call arrived (unix ms).
    started_ms: u64,
    /// When it was done, after its effect and before its answer (unix ms).
    at_ms: u64,
}

/// The wall clock in unix milliseconds, as the call log has it.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn display<S: serde::Serializer>(v: &impl fmt::Display, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// What a line of the call log says about the call besides its outcome.
#[derive(Debug)]
pub struct Called<'a> {
    pub rpc: Rpc,
    pub volume_id: &'a str,
    pub node_id: &'a str,
    pub target_path: Option<&'a str>,
    pub started_ms: u64,
}

impl CallLog {
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = File::options().create(true).append(true).open(path)?;
        Ok(Self {
            file: Mutex::new(file),
            in_flight: Default::default(),
        })
    }

    pub fn enter(&self, rpc: Rpc) -> InFlight<'_> {
        let counter = &self.in_flight[rpc.service()];
        let concurrent = counter.fetch_add(1, Ordering::SeqCst) + 1;
        InFlight {
            counter,
            concurrent,
        }
    }

    pub fn record(&self, call: &Called<'_>, code: Code, concurrent: usize) {
        // One line, serialised before the lock and written with one syscall.
        let mut line = serde_json::to_vec(&CallLine {
            rpc: call.rpc,
            volume_id: call.volume_id,
            node_id: call.node_id,
            target_path: call.target_path,
            code: code_name(code),
            in_flight: concurrent,
            started_ms: call.started_ms,
            at_ms: now_ms(),
        })
        .expect("a call line serialises");
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        // The log is for observation only; a failed write must not fail the call.
        let _ = file.write_all(&line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn parses_fault_specs() {
        assert_eq!(
            "NodeStageVolume=UNAVAILABLE:2".parse(),
            Ok(FailSpec {
                rpc: Rpc::NodeStageVolume,
                code: Code::Unavailable,
                count: Some(2)
            })
        );
        assert_eq!(
            "Probe=INTERNAL".parse(),
            Ok(FailSpec {
                rpc: Rpc::Probe,
                code: Code::Internal,
                count: None
            })
        );
        assert!(
            "NodeStage=UNAVAILABLE"
                .parse::<FailSpec>()
                .unwrap_err()
                .contains("unknown RPC")
        );
        assert!(
            "Probe=OK"
                .parse::<FailSpec>()
                .unwrap_err()
                .contains("unknown gRPC code")
        );
        assert!(
            "Probe=UNAVAILABLE:x"
                .parse::<FailSpec>()
                .unwrap_err()
                .contains("COUNT")
        );
        assert_eq!(
            "NodePublishVolume=250ms".parse(),
            Ok(DelaySpec {
                rpc: Rpc::NodePublishVolume,
                delay: Duration::from_millis(250)
            })
        );
        assert_eq!(
            "CreateVolume=/tmp/go".parse(),
            Ok(HoldSpec {
                rpc: Rpc::CreateVolume,
                until: PathBuf::from("/tmp/go")
            })
        );
        assert!(
            "CreateVolume="
                .parse::<HoldSpec>()
                .unwrap_err()
                .contains("RPC=FILE")
        );
    }

    #[tokio::test]
    async fn a_held_call_runs_once_its_file_exists() {
        let dir = std::env::temp_dir().join(format!("hostpath-hold-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let go = dir.join("go");
        let faults = Arc::new(Faults::new(
            &[],
            &[],
            &[HoldSpec {
                rpc: Rpc::CreateVolume,
                until: go.clone(),
            }],
        ));
        let held = tokio::spawn({
            let faults = faults.clone();
            async move { faults.before(Rpc::CreateVolume).await }
        });
        // Other calls are not held.
        assert!(faults.before(Rpc::Probe).await.is_ok());
        assert!(!held.is_finished(), "held until the file exists");
        std::fs::write(&go, "").unwrap();
        assert!(held.await.unwrap().is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn counted_faults_run_out() {
        let faults = Faults::new(
            &[FailSpec {
                rpc: Rpc::Probe,
                code: Code::Unavailable,
                count: Some(2),
            }],
            &[],
            &[],
        );
        assert_eq!(
            faults.before(Rpc::Probe).await.unwrap_err().code(),
            Code::Unavailable
        );
        assert_eq!(
            faults.before(Rpc::Probe).await.unwrap_err().code(),
            Code::Unavailable
        );
        assert!(faults.before(Rpc::Probe).await.is_ok());
        assert!(faults.before(Rpc::NodeGetInfo).await.is_ok());
    }
}
