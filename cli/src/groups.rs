//! What a claim asks of its mount: the group (`--gid`, `--group NAME` looked up in this
//! machine's `/etc/group`, or for `run`, the caller's own primary group), its own mount
//! flags (`--mount-flag`) and its SELinux context (`--selinux-context`).

use anyhow::{Context, bail};
use csivol_api::MountRequest;

use crate::args::MountArgs;

const GROUP_FILE: &str = "/etc/group";

impl MountArgs {
    /// What `claim` asks for.
    pub fn for_claim(&self) -> anyhow::Result<MountRequest> {
        let group = asked(self.gid, self.group.as_deref())?.unwrap_or_default();
        Ok(self.with_options(group))
    }

    /// What `run` asks for: the caller's own group unless one is given ([`for_run`]).
    pub fn for_run(&self) -> anyhow::Result<MountRequest> {
        let group = for_run(self.gid, self.group.as_deref())?;
        Ok(self.with_options(group))
    }

    fn with_options(&self, group: MountRequest) -> MountRequest {
        MountRequest {
            mount_flags: self.mount_flags.clone(),
            selinux_context: self.selinux_context.clone(),
            ..group
        }
    }
}

/// The mount `--gid` or `--group` ask for (`None` when neither is given).
fn asked(gid: Option<u32>, group: Option<&str>) -> anyhow::Result<Option<MountRequest>> {
    let gid = match (gid, group) {
        (Some(g), _) => g,
        (None, Some(name)) => gid_of(name, GROUP_FILE)?,
        (None, None) => return Ok(None),
    };
    Ok(Some(MountRequest {
        gid: Some(gid),
        best_effort: false,
        ..Default::default()
    }))
}

/// What `run` asks for: the group given, else the caller's own primary group when the
/// caller is not root (root writes any volume as it is), applied only where it can be.
fn for_run(gid: Option<u32>, group: Option<&str>) -> anyhow::Result<MountRequest> {
    if let Some(m) = asked(gid, group)? {
        return Ok(m);
    }
    if rustix::process::geteuid().is_root() {
        return Ok(MountRequest::default());
    }
    Ok(MountRequest {
        gid: Some(rustix::process::getegid().as_raw()),
        best_effort: true,
        ..Default::default()
    })
}

/// The gid of the group `name` in `file` (the format of group(5)).
fn gid_of(name: &str, file: &str) -> anyhow::Result<u32> {
    let text = std::fs::read_to_string(file).with_context(|| format!("failed to read {file}"))?;
    for line in text.lines() {
        let mut fields = line.split(':');
        if fields.next() == Some(name)
            && let Some(gid) = fields.nth(1)
        {
            return gid
                .parse()
                .with_context(|| format!("group `{name}` in {file} has no numeric gid"));
        }
    }
    bail!("no group `{name}` in {file}\nhint: give its number with --gid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_name_is_looked_up_in_the_group_file() {
        let dir = std::env::temp_dir().join(format!("csivol-groups-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("group");
        std::fs::write(&file, "root:x:0:\nci:x:1234:alice,bob\n").unwrap();
        let file = file.to_str().unwrap();
        assert_eq!(gid_of("ci", file).unwrap(), 1234);
        let e = gid_of("nobody-here", file).unwrap_err().to_string();
        assert!(e.contains("no group `nobody-here`"), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
