//! ValidateVolumeCapabilities: whether a volume csivol is adopting has the capability,
//! context and parameters it will be registered with.

use std::collections::BTreeMap;

use csivol_api::{ControllerOpKind, Report};
use csivol_csi::csi::v1 as csi;

use super::super::{CallError, wire_map};
use super::Call;

pub(super) async fn run(c: &Call<'_>) -> Result<Report, CallError> {
    let ControllerOpKind::ValidateVolume {
        external_id,
        capability,
        context,
        parameters,
        secrets,
        ..
    } = &c.op.kind
    else {
        unreachable!("the table sends validations only")
    };
    let wanted = csi::VolumeCapability::from(capability);
    let req = csi::ValidateVolumeCapabilitiesRequest {
        volume_id: external_id.clone(),
        volume_context: wire_map(context),
        volume_capabilities: vec![wanted.clone()],
        parameters: wire_map(parameters),
        secrets: wire_map(secrets),
        mutable_parameters: Default::default(),
    };
    let r = c
        .client()
        .validate_volume_capabilities(c.request(req))
        .await
        .map_err(|s| CallError::new("ValidateVolumeCapabilities", s))?
        .into_inner();
    Ok(Report::Validated {
        op: c.op.id,
        attempt: c.op.attempt,
        not_confirmed: not_confirmed(r.confirmed.as_ref(), &wanted, context, parameters),
        message: r.message,
    })
}

/// What the plugin did not confirm of what it was asked. The spec: "This RPC call SHALL
/// return `confirmed` only if all the volume capabilities specified in the request are
/// supported", and `message` is the "Message to the CO if `confirmed` above is empty":
/// no `confirmed` confirms nothing. And since "Older plugins will parse but likely not
/// 'process' newer fields", "the CO SHALL reconcile successful capability-validation
/// responses by comparing the validated capabilities with those that it had originally
/// requested": a `confirmed` that leaves out the capability, a context entry or a
/// parameter asked for does not confirm that one.
fn not_confirmed(
    confirmed: Option<&csi::validate_volume_capabilities_response::Confirmed>,
    wanted: &csi::VolumeCapability,
    context: &BTreeMap<String, String>,
    parameters: &BTreeMap<String, String>,
) -> Vec<String> {
    // No `confirmed`: nothing asked for is confirmed.
    let empty = csi::validate_volume_capabilities_response::Confirmed::default();
    let c = confirmed.unwrap_or(&empty);
    let mut missing = Vec::new();
    if !c.volume_capabilities.contains(wanted) {
        missing.push("the volume capability".to_owned());
    }
    // Both maps are OPTIONAL in `Confirmed`: a plugin that confirms the capability but
    // leaves them out has not processed them, which is not confirmation.
    for (k, v) in context {
        if c.volume_context.get(k) != Some(v) {
            missing.push(format!("volume context `{k}`"));
        }
    }
    for (k, v) in parameters {
        if c.parameters.get(k) != Some(v) {
            missing.push(format!("parameter `{k}`"));
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;
    use csivol_api::domain::{AccessMode, AccessType, VolumeCapability};

    fn cap(mode: AccessMode) -> csi::VolumeCapability {
        csi::VolumeCapability::from(&VolumeCapability {
            access_mode: mode,
            access_type: AccessType::FileSystem {
                fs_type: String::new(),
                mount_flags: Vec::new(),
            },
        })
    }

    #[test]
    fn only_what_the_answer_confirms_counts() {
        let wanted = cap(AccessMode::SingleNodeWriter);
        let ctx: BTreeMap<_, _> = [("k".to_owned(), "v".to_owned())].into();
        let none = BTreeMap::new();
        assert_eq!(
            not_confirmed(None, &wanted, &ctx, &none),
            vec!["the volume capability", "volume context `k`"]
        );
        let all = csi::validate_volume_capabilities_response::Confirmed {
            volume_context: ctx.clone().into_iter().collect(),
            volume_capabilities: vec![wanted.clone()],
            ..Default::default()
        };
        assert!(not_confirmed(Some(&all), &wanted, &ctx, &none).is_empty());
        let other = csi::validate_volume_capabilities_response::Confirmed {
            volume_capabilities: vec![cap(AccessMode::MultiNodeReaderOnly)],
            ..Default::default()
        };
        assert_eq!(
            not_confirmed(Some(&other), &wanted, &ctx, &none),
            vec!["the volume capability", "volume context `k`"]
        );
    }
}
