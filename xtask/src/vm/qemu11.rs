//! QEMU 11.1 with its vfio-user client, provisioned privately under `target/vm/qemu-11.1/`.
//!
//! The host is Debian bookworm, whose QEMU (7.2, or 10.0 from backports) has no vfio-user
//! client; trixie-backports' 11.1 has one (`-device vfio-user-pci`) but needs trixie's libc, so
//! it cannot be installed here, and must never replace the system's QEMU. Instead a private apt
//! state (trixie + trixie-backports, see [`debs::trixie_apt`]) downloads `qemu-system-x86`,
//! `qemu-system-common` and `qemu-system-data` at the newest `1:11.1.*` version, the firmware
//! they depend on (`seabios`, `ipxe-qemu`) and their shared-library closure from trixie; all
//! are unpacked with `dpkg-deb -x` into `target/vm/qemu-11.1/root/`, and QEMU runs through the
//! root's own dynamic loader with `LD_LIBRARY_PATH` on the root's library directories and
//! `QEMU_MODULE_DIR` on its modules (without it QEMU loads the host's modules and aborts).
//!
//! Checks before the root is declared ready: `ldd` through the private loader finds every
//! library, and `-device help` lists `vfio-user-pci`. The version seen is recorded in
//! `target/vm/qemu-11.1/VERSION`; once `READY` exists a second run does nothing (no apt).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::debs;
use super::{io_err, VmError};

/// The Debian version series pinned here (`1:11.1.*`).
const SERIES: &str = "1:11.1.";

/// The packages taken at the pinned version.
const QEMU_PKGS: &[&str] = &["qemu-system-x86", "qemu-system-common", "qemu-system-data"];

/// Non-library dependencies of `qemu-system-x86` that a boot needs (the BIOS; option ROMs).
const FIRMWARE: &[&str] = &["seabios", "ipxe-qemu"];

/// The library directories of a Debian root, for `LD_LIBRARY_PATH`.
const LIB_DIRS: &[&str] = &["usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu", "usr/lib", "lib"];

/// A provisioned private QEMU 11.1.
#[derive(Clone, Debug)]
pub struct PrivateQemu {
    /// The root every package was unpacked into.
    pub root: PathBuf,
    /// The Debian version of `qemu-system-x86` (e.g. `1:11.1.3+ds-2~bpo13+1`).
    pub version: String,
}

impl PrivateQemu {
    /// The root's dynamic loader.
    fn loader(&self) -> PathBuf {
        let merged = self.root.join("usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2");
        if merged.exists() {
            merged
        } else {
            self.root.join("lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
        }
    }

    /// The emulator binary inside the root.
    pub fn binary(&self) -> PathBuf {
        self.root.join("usr/bin/qemu-system-x86_64")
    }

    fn library_path(&self) -> String {
        LIB_DIRS
            .iter()
            .map(|d| self.root.join(d))
            .filter(|d| d.is_dir())
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(":")
    }

    /// A command running this QEMU: `LOADER BINARY -L ROOT/usr/share/qemu`, with the
    /// environment the root needs. Arguments follow.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(self.loader());
        cmd.arg(self.binary())
            .arg("-L")
            .arg(self.root.join("usr/share/qemu"))
            .env("LD_LIBRARY_PATH", self.library_path())
            .env("QEMU_MODULE_DIR", self.root.join("usr/lib/x86_64-linux-gnu/qemu"));
        cmd
    }

    /// Libraries the private loader cannot find for the binary (`ldd`'s "not found" lines).
    fn missing_libraries(&self) -> Result<Vec<String>, VmError> {
        let text = debs::output(
            Command::new(self.loader())
                .arg("--list")
                .arg(self.binary())
                .env("LD_LIBRARY_PATH", self.library_path()),
        )?;
        Ok(text
            .lines()
            .filter(|l| l.contains("not found"))
            .map(|l| l.split_whitespace().next().unwrap_or_default().to_string())
            .collect())
    }

    /// Whether `-device help` lists `vfio-user-pci`.
    fn has_vfio_user(&self) -> Result<bool, VmError> {
        let text = debs::output(self.command().args(["-device", "help"]))?;
        Ok(text.contains("\"vfio-user-pci\""))
    }
}

/// `target/vm/qemu-11.1/`.
pub fn dir(cache: &Path) -> PathBuf {
    cache.join("qemu-11.1")
}

/// The newest version of `pkg` in the `SERIES` series, from `apt-cache madison` (newest first).
fn pinned_version(apt: &[String], pkg: &str) -> Result<String, VmError> {
    let text = debs::output(Command::new("apt-cache").args(apt).args(["madison", pkg]))?;
    pick_version(&text)
        .ok_or_else(|| VmError::NotFound(format!("{pkg} {SERIES}* in trixie-backports")))
}

/// The first `SERIES` version of `apt-cache madison`'s output.
fn pick_version(madison: &str) -> Option<String> {
    madison
        .lines()
        .filter_map(|l| l.split('|').nth(1).map(str::trim))
        .find(|v| v.starts_with(SERIES))
        .map(str::to_string)
}

/// Provision (once) the private QEMU under `cache/qemu-11.1/`.
pub fn provision(cache: &Path) -> Result<PrivateQemu, VmError> {
    let dir = dir(cache);
    let root = dir.join("root");
    let ready = dir.join("READY");
    let version_file = dir.join("VERSION");
    if ready.exists() {
        let version = fs::read_to_string(&version_file).map_err(io_err(&version_file))?;
        return Ok(PrivateQemu { root, version: version.trim().to_string() });
    }
    let apt = debs::trixie_apt(cache)?;
    let version = pinned_version(&apt, "qemu-system-x86")?;
    eprintln!("vm: provisioning QEMU {version} (trixie-backports) under {}", dir.display());
    let mut roots: Vec<String> = QEMU_PKGS.iter().map(|p| format!("{p}={version}")).collect();
    roots.extend(FIRMWARE.iter().map(|s| s.to_string()));
    let all = debs::closure_with(&roots, &apt)?;
    let files = debs::download_with(&dir, &all, &apt)?;
    eprintln!("vm: unpacking {} packages into {}", files.len(), root.display());
    let _ = fs::remove_dir_all(&root);
    fs::create_dir_all(&root).map_err(io_err(&root))?;
    for deb in &files {
        debs::output(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&root))?;
    }
    let q = PrivateQemu { root, version };
    let missing = q.missing_libraries()?;
    if !missing.is_empty() {
        return Err(VmError::NotFound(format!(
            "libraries of the private QEMU (not in its closure): {}",
            missing.join(" ")
        )));
    }
    if !q.has_vfio_user()? {
        return Err(VmError::NotFound(format!("vfio-user-pci in QEMU {}", q.version)));
    }
    fs::write(&version_file, format!("{}\n", q.version)).map_err(io_err(&version_file))?;
    let list = dir.join("PACKAGES");
    fs::write(&list, all.join("\n") + "\n").map_err(io_err(&list))?;
    fs::write(&ready, "").map_err(io_err(&ready))?;
    eprintln!("vm: QEMU {} ready ({} packages)", q.version, all.len());
    Ok(q)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pinned_series_is_picked_from_madison() {
        let m = " qemu-system-x86 | 1:11.2.0+ds-1~bpo13+1 | http://x trixie-backports/main amd64 Packages\n\
                 \x20qemu-system-x86 | 1:11.1.3+ds-2~bpo13+1 | http://x trixie-backports/main amd64 Packages\n\
                 \x20qemu-system-x86 | 1:10.0.13+ds-0+deb13u1 | http://x trixie/main amd64 Packages\n";
        assert_eq!(pick_version(m).as_deref(), Some("1:11.1.3+ds-2~bpo13+1"));
        assert_eq!(pick_version(" q | 1:10.0.13+ds-0+deb13u1 | x\n"), None);
    }
}
