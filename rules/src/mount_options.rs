//! A claim's own mount options: the flags it adds to its publication, and the SELinux
//! context the volume is mounted with, decided when the server records the claim.
//!
//! What reaches a plugin: the spec (csi.proto, `MountVolume.mount_flags`) says "The mount
//! options that can be used for the volume. This field is OPTIONAL", and a plugin answers
//! a NodeStageVolume with another capability ALREADY_EXISTS (spec.md, NodeStageVolume
//! errors, "Volume published but is incompatible"). So a claim's own flags go to
//! NodePublishVolume only, never changing the staging its volume shares with the other
//! claims on the node; and a SELinux context, which is the whole file system's (one
//! superblock is mounted with one context), must agree among the volume's claims on one
//! node, and is sent only to a plugin the operator declared able to mount with it, as a
//! Kubernetes CSIDriver declares `seLinuxMount`.

use std::fmt;

use csivol_api::domain::AccessType;

/// Why a claim's mount options are refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OptionRefused {
    /// `ro` or `rw`: the claim's mode says that.
    Mode(String),
    /// A flag the volume's `claim_mount_flags` do not list.
    NotAllowed { flag: String, allowed: Vec<String> },
    /// Mount options on a block volume.
    Block,
    /// A SELinux context for a plugin not declared to support SELinux mounts.
    NoSelinuxMount,
    /// A context that cannot be quoted into a mount flag.
    BadContext(String),
    /// Another claim of the volume on the node mounts it with another context.
    ContextDisagrees { other: Option<String> },
    /// The volume's flags, the claim's and its context flag together are larger than one
    /// `mount_flags` field may be.
    TooLarge { bytes: usize, max: usize },
}

impl OptionRefused {
    pub fn hint(&self, plugin: &str) -> String {
        match self {
            Self::Mode(_) => "claim with --read-only for a read-only mount, without for a \
                              read-write one"
                .into(),
            Self::NotAllowed { .. } => "use one of the volume's `claim_mount_flags`, or ask \
                                        its operator to add the flag to them"
                .into(),
            Self::Block => "claim without mount options: a block volume is not mounted".into(),
            Self::NoSelinuxMount => format!(
                "claim without --selinux-context, or set `selinux_mount = true` under \
                 [plugins.\"{plugin}\"] in the server's config once the plugin mounts with \
                 `context=`"
            ),
            Self::BadContext(_) => "give the context as `user:role:type:level`".into(),
            Self::ContextDisagrees { .. } => {
                "claim with the context the volume's other claims on the node use, or on \
                 another node"
                    .into()
            }
            Self::TooLarge { .. } => "claim with fewer or shorter mount flags, or ask the \
                                      volume's operator to shorten its `mount_flags`"
                .into(),
        }
    }
}

impl fmt::Display for OptionRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Mode(flag) => write!(
                f,
                "mount flag `{flag}` is the claim's mode, not a flag a claim adds"
            ),
            Self::NotAllowed { flag, allowed } if allowed.is_empty() => write!(
                f,
                "mount flag `{flag}` is not allowed: the volume allows its claims no flags \
                 of their own (`claim_mount_flags`)"
            ),
            Self::NotAllowed { flag, allowed } => write!(
                f,
                "mount flag `{flag}` is not among the volume's `claim_mount_flags` ({})",
                allowed.join(", ")
            ),
            Self::Block => write!(f, "a block volume takes no mount options"),
            Self::NoSelinuxMount => write!(
                f,
                "the plugin is not declared to support SELinux mounts (`selinux_mount` in \
                 the server's config)"
            ),
            Self::BadContext(why) => write!(f, "invalid SELinux context: {why}"),
            Self::ContextDisagrees { other: Some(c) } => write!(
                f,
                "another claim of the volume on the node mounts it with SELinux context \
                 `{c}`: the kernel mounts one file system with one context"
            ),
            Self::ContextDisagrees { other: None } => write!(
                f,
                "another claim of the volume on the node mounts it with no SELinux context: \
                 the kernel mounts one file system with one context"
            ),
            Self::TooLarge { bytes, max } => write!(
                f,
                "the volume's mount flags and the claim's come to {bytes} bytes together, \
                 more than the {max} bytes one NodePublishVolume may carry (CSI's limit of \
                 `mount_flags`)"
            ),
        }
    }
}

/// The flags a claim adds to its publication, each allowed by the volume.
pub fn claim_flags(
    asked: &[String],
    allowed: &[String],
    access_type: &AccessType,
) -> Result<Vec<String>, OptionRefused> {
    if asked.is_empty() {
        return Ok(Vec::new());
    }
    if access_type.is_block() {
        return Err(OptionRefused::Block);
    }
    for flag in asked {
        if flag == "ro" || flag == "rw" {
            return Err(OptionRefused::Mode(flag.clone()));
        }
        if !allowed.contains(flag) {
            return Err(OptionRefused::NotAllowed {
                flag: flag.clone(),
                allowed: allowed.to_vec(),
            });
        }
    }
    Ok(asked.to_vec())
}

/// Whether the flags NodePublishVolume carries for a claim fit in one `mount_flags`: the
/// volume's own (in its capability), the claim's and its SELinux context's, which the
/// agent sends together in one `MountVolume.mount_flags`. The CSI spec holds that field
/// whole, not each source of it: csi.proto, `MountVolume.mount_flags`, "The total size of
/// this repeated field SHALL NOT exceed 4 KiB"; spec.md, Size Limits, "These limits apply
/// for messages generated by both COs and plugins". Each part alone is held to the same
/// limit when a client sends it; together they may still exceed it.
pub fn publish_flags_fit(
    access_type: &AccessType,
    claim_flags: &[String],
    context_flag: Option<&str>,
) -> Result<(), OptionRefused> {
    let AccessType::FileSystem { mount_flags, .. } = access_type else {
        return Ok(());
    };
    let bytes: usize = mount_flags
        .iter()
        .chain(claim_flags)
        .map(String::len)
        .sum::<usize>()
        + context_flag.map_or(0, str::len);
    let max = csivol_api::limits::CSI_MOUNT_FLAGS_BYTES;
    if bytes > max {
        return Err(OptionRefused::TooLarge { bytes, max });
    }
    Ok(())
}

/// The SELinux context a claim mounts its volume with: its own, else the volume's
/// default; checked against the plugin's declaration and the other claims on the node.
pub fn selinux_context(
    asked: Option<&str>,
    volume_default: Option<&str>,
    plugin_supports: bool,
    access_type: &AccessType,
    others_on_node: &[Option<String>],
) -> Result<Option<String>, OptionRefused> {
    let Some(context) = asked.or(volume_default) else {
        // A claim with no context agrees with none: its node's other claims may have one
        // only if they asked, and the same then holds for them.
        return match others_on_node.iter().find(|o| o.is_some()) {
            Some(other) => Err(OptionRefused::ContextDisagrees {
                other: other.clone(),
            }),
            None => Ok(None),
        };
    };
    if access_type.is_block() {
        return Err(OptionRefused::Block);
    }
    if !plugin_supports {
        return Err(OptionRefused::NoSelinuxMount);
    }
    check_context(context)?;
    if let Some(other) = others_on_node
        .iter()
        .find(|o| o.as_deref() != Some(context))
    {
        return Err(OptionRefused::ContextDisagrees {
            other: other.clone(),
        });
    }
    Ok(Some(context.to_owned()))
}

/// A context goes into a quoted mount flag: no quote, no control character, at least
/// `user:role:type`.
fn check_context(c: &str) -> Result<(), OptionRefused> {
    if c.contains('"') || c.chars().any(char::is_control) {
        return Err(OptionRefused::BadContext(
            "it holds a quote or a control character".into(),
        ));
    }
    if c.split(':').count() < 3 || c.split(':').any(str::is_empty) {
        return Err(OptionRefused::BadContext(format!(
            "`{c}` is not `user:role:type[:level]`"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
