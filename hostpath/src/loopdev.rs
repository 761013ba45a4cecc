//! Loop devices for block volumes, through util-linux's `losetup`.
//!
//! `losetup` rather than the loop ioctls: it is the standard tool every Linux host has, it
//! handles the races of claiming a free device (`LOOP_CTL_GET_FREE` then `LOOP_CONFIGURE`,
//! retried), and it finds the devices backed by a file through sysfs. Calling the ioctls
//! ourselves would need `unsafe` (which this workspace forbids) or a crate that generates
//! kernel bindings at build time, for nothing the binary does not already do well.
//!
//! Each node plugin attaches its own device to an image (simulated nodes share one machine
//! and one backend, so a device must not be taken away from another node's workload); it
//! remembers which, and asks the kernel whether that device still backs the image
//! (`losetup --associated`) before it trusts the record.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

fn losetup(args: &[&std::ffi::OsStr]) -> io::Result<String> {
    let out = Command::new("losetup")
        .args(args)
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("failed to run losetup: {e}")))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "losetup {} failed ({}): {}",
            args.iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The loop devices backed by `image`.
pub fn devices(image: &Path) -> io::Result<Vec<PathBuf>> {
    if !image.exists() {
        return Ok(Vec::new());
    }
    let out = losetup(&[
        "--associated".as_ref(),
        image.as_os_str(),
        "--noheadings".as_ref(),
        "--output".as_ref(),
        "NAME".as_ref(),
    ])?;
    Ok(out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(PathBuf::from)
        .collect())
}

/// Attaches a new loop device to `image`.
pub fn attach(image: &Path) -> io::Result<PathBuf> {
    let out = losetup(&["--find".as_ref(), "--show".as_ref(), image.as_os_str()])?;
    Ok(PathBuf::from(out.trim()))
}

/// Detaches one loop device.
pub fn detach(device: &Path) -> io::Result<()> {
    losetup(&["--detach".as_ref(), device.as_os_str()]).map(drop)
}

/// Makes a loop device take its backing file's current size.
pub fn set_capacity(device: &Path) -> io::Result<()> {
    losetup(&["--set-capacity".as_ref(), device.as_os_str()]).map(drop)
}

/// Detaches every loop device backed by `image`.
pub fn detach_all(image: &Path) -> io::Result<()> {
    for device in devices(image)? {
        detach(&device)?;
    }
    Ok(())
}

/// Makes the loop devices backed by `image` take the image's current size.
pub fn refresh_capacity(image: &Path) -> io::Result<()> {
    for device in devices(image)? {
        set_capacity(&device)?;
    }
    Ok(())
}

/// The size of a block device in bytes, from sysfs.
pub fn size(device: &Path) -> io::Result<i64> {
    let name = device
        .file_name()
        .ok_or_else(|| io::Error::other(format!("{} is not a device", device.display())))?;
    let sectors = std::fs::read_to_string(Path::new("/sys/class/block").join(name).join("size"))?;
    sectors
        .trim()
        .parse::<i64>()
        .map(|s| s * 512)
        .map_err(|e| io::Error::other(format!("size of {}: {e}", device.display())))
}
