//! Mutable parameters: the ones this plugin knows (`iops`, `tier`), checked when
//! CreateVolume sets them and when ControllerModifyVolume changes them.
//!
//! The spec (ControllerModifyVolume): "SPs MUST NOT modify volumes based on the absence of
//! keys, only keys that are specified should result in modifications to the volume", so a
//! call changes the keys it names and keeps the others. And, as its error table has it
//! since spec v1.12, INVALID_ARGUMENT means the parameters cannot be applied and nothing
//! was changed: every key is checked before any is written.

use std::collections::{BTreeMap, HashMap};

use csivol_csi::csi::v1 as csi;
use tonic::Status;

use super::{Plugin, internal, require};

/// The most IOPS a hostpath volume may be given.
const MAX_IOPS: u64 = 1_000_000;
/// The storage tiers of the simulated backend.
const TIERS: [&str; 2] = ["standard", "premium"];

/// Checks every key and value; the first that is not one this plugin can apply is named.
pub(super) fn check_mutable(params: &HashMap<String, String>) -> Result<(), Status> {
    let mut keys: Vec<_> = params.keys().collect();
    keys.sort();
    for key in keys {
        let value = &params[key];
        match key.as_str() {
            "iops" => match value.parse::<u64>() {
                Ok(n) if (1..=MAX_IOPS).contains(&n) => {}
                _ => {
                    return Err(Status::invalid_argument(format!(
                        "mutable parameter `iops` must be a whole number from 1 to {MAX_IOPS}, \
                         got `{value}`; nothing was changed"
                    )));
                }
            },
            "tier" if TIERS.contains(&value.as_str()) => {}
            "tier" => {
                return Err(Status::invalid_argument(format!(
                    "mutable parameter `tier` must be one of {}, got `{value}`; nothing was changed",
                    TIERS.join(", ")
                )));
            }
            _ => {
                return Err(Status::invalid_argument(format!(
                    "`{key}` is not a mutable parameter of csivol-hostpath (it knows `iops` and \
                     `tier`); nothing was changed"
                )));
            }
        }
    }
    Ok(())
}

impl Plugin {
    /// CreateVolume's `mutable_parameters`: refused without MODIFY_VOLUME (the spec: the
    /// field "SHALL NOT be specified unless the SP has the MODIFY_VOLUME controller
    /// capability"), checked like a modification otherwise.
    pub(super) fn creation_mutable(
        &self,
        params: HashMap<String, String>,
    ) -> Result<BTreeMap<String, String>, Status> {
        if params.is_empty() {
            return Ok(BTreeMap::new());
        }
        if !self.cfg.features.modify_volume {
            return Err(Status::invalid_argument(
                "`mutable_parameters` given, but this plugin has no MODIFY_VOLUME \
                 (started with `--disable modify-volume`)",
            ));
        }
        check_mutable(&params)?;
        Ok(params.into_iter().collect())
    }

    pub(super) fn controller_modify(
        &self,
        req: csi::ControllerModifyVolumeRequest,
    ) -> Result<csi::ControllerModifyVolumeResponse, Status> {
        if !self.cfg.features.modify_volume {
            return Err(Status::unimplemented(
                "this plugin does not advertise MODIFY_VOLUME",
            ));
        }
        require(&req.volume_id, "volume_id")?;
        // A REQUIRED map must have at least one element.
        if req.mutable_parameters.is_empty() {
            return Err(Status::invalid_argument(
                "`mutable_parameters` is required and must name at least one parameter",
            ));
        }
        let lock = self.lock()?;
        let mut volume = self.volume(&req.volume_id)?;
        check_mutable(&req.mutable_parameters)?;
        let before = volume.mutable_parameters.clone();
        volume.mutable_parameters.extend(req.mutable_parameters);
        if volume.mutable_parameters != before {
            self.backend
                .update_volume(&lock, &volume)
                .map_err(|e| internal(e, "record the volume's mutable parameters"))?;
            tracing::info!(volume_id = volume.id, parameters = ?volume.mutable_parameters, "modified volume");
        }
        Ok(csi::ControllerModifyVolumeResponse {})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(pairs: &[(&str, &str)]) -> Result<(), String> {
        let params = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        check_mutable(&params).map_err(|s| s.message().to_owned())
    }

    #[test]
    fn mutable_parameters_this_plugin_knows() {
        assert_eq!(check(&[("iops", "3000"), ("tier", "premium")]), Ok(()));
        assert_eq!(check(&[]), Ok(()));
        for (pairs, says) in [
            (&[("iops", "0")][..], "from 1 to 1000000"),
            (&[("iops", "fast")], "got `fast`"),
            (&[("iops", "2000000")], "from 1 to"),
            (&[("tier", "gold")], "one of standard, premium"),
            (&[("colour", "red")], "`colour` is not a mutable parameter"),
            // One bad key refuses the whole request.
            (&[("iops", "100"), ("zz", "1")], "`zz` is not"),
        ] {
            let err = check(pairs).unwrap_err();
            assert!(err.contains(says), "{pairs:?}: {err}");
            assert!(err.contains("nothing was changed"), "{err}");
        }
    }
}
