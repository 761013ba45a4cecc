//! Volume modification (`csivol volume modify`): the request, and the change a volume
//! shows while its plugin applies it (ControllerModifyVolume) or after the plugin refused.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `POST /v1/volumes/{name}/modify`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModifyRequest {
    /// The mutable parameters to set, by key; keys not named keep their values.
    pub parameters: BTreeMap<String, String>,
}

/// Where a modification stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModificationState {
    /// ControllerModifyVolume is queued, running or retried after an error that may pass.
    Pending,
    /// The plugin answered INVALID_ARGUMENT: it cannot apply these parameters to this
    /// volume and changed nothing (CSI v1.12). Not retried; ask for other values.
    Infeasible,
    /// Another error that a retry will not mend; the plugin may have applied part of it.
    Failed,
}

impl ModificationState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Infeasible => "infeasible",
            Self::Failed => "failed",
        }
    }
}

/// A modification asked for and not applied yet, or refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Modification {
    /// What ControllerModifyVolume is asked to set: only the keys whose value changes.
    pub parameters: BTreeMap<String, String>,
    pub state: ModificationState,
    /// The last error: while retrying, or why it was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub requested_at: String,
    /// Asked for with `--wait` while the volume was being released: ControllerModifyVolume
    /// is sent once the release has finished.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub after_release: bool,
}

impl Modification {
    /// `iops=3000, tier=premium`: parameters as one line, in key order.
    pub fn describe(parameters: &BTreeMap<String, String>) -> String {
        parameters
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `modifying to iops=3000: pending`, for tables and `status`.
    pub fn progress(&self) -> String {
        let to = Self::describe(&self.parameters);
        match self.state {
            ModificationState::Pending if self.after_release => {
                format!("modifying to {to} once the volume's release has finished")
            }
            ModificationState::Pending => format!("modifying to {to}: controller pending"),
            ModificationState::Infeasible => {
                format!("modification to {to} is infeasible; nothing was changed")
            }
            ModificationState::Failed => format!("modification to {to} failed"),
        }
    }
}
