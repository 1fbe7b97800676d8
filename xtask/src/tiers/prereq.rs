//! What the build and the tiers need from the host, checked before anything runs.
//!
//! Every file below comes from a Debian package. When one is missing, `cargo xtask test`
//! installs the packages when it runs as root (as CI does), and otherwise prints the exact
//! command and stops, instead of failing later inside a compiler or a guest.

use std::path::Path;
use std::process::Command;

use crate::{util, vm};

/// (a file or program that must exist, the package that provides it, what needs it)
const NEEDS: &[(&str, &str, &str)] = &[
    ("/usr/include/infiniband/mlx5dv.h", "libibverbs-dev", "mlx5 vector generator, bench post"),
    ("/usr/include/infiniband/verbs.h", "libibverbs-dev", "rxe backend"),
    ("/usr/include/rdma/rdma_cma.h", "librdmacm-dev", "rxe backend"),
    ("/usr/include/linux/vfio.h", "linux-libc-dev", "VFIO uapi layout tests"),
    ("cc", "gcc", "C shims, generators, benchmarks"),
    ("/usr/bin/busybox", "busybox-static", "rxe and vfio guests"),
    ("cpio", "cpio", "rxe and vfio guests"),
];

/// The kernel's `mlx5_ifc.h`, which the command-layout checks read.
fn have_ifc_header() -> bool {
    let Ok(dir) = std::fs::read_dir("/usr/src") else { return false };
    dir.flatten().any(|e| e.path().join("include/linux/mlx5/mlx5_ifc.h").exists())
}

fn present(what: &str) -> bool {
    if what.starts_with('/') {
        Path::new(what).exists()
    } else {
        util::have(what)
    }
}

/// Packages to install for what is missing, with the reasons.
pub fn missing() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> =
        NEEDS.iter().filter(|(f, ..)| !present(f)).map(|(_, p, why)| (*p, *why)).collect();
    if !have_ifc_header() {
        out.push(("linux-headers-amd64", "mlx5_ifc.h layout checks"));
    }
    for p in vm::host_tools_missing() {
        out.push((p, "rxe and vfio guests"));
    }
    out.sort();
    out.dedup_by(|a, b| a.0 == b.0);
    out
}

/// Make sure everything is there: install as root, else say what to run. True when ready.
pub fn ensure() -> bool {
    let miss = missing();
    if miss.is_empty() {
        return true;
    }
    let pkgs: Vec<&str> = miss.iter().map(|(p, _)| *p).collect();
    for (p, why) in &miss {
        eprintln!("xtask: missing {p} (for {why})");
    }
    let apt = vm::apt_install_command(&pkgs);
    if util::is_root() {
        eprintln!("xtask: installing {}", pkgs.join(" "));
        let ok =
            util::run(Command::new("sh").args([
                "-c",
                &format!("apt-get update -qq && DEBIAN_FRONTEND=noninteractive {apt}"),
            ]));
        if ok && missing().is_empty() {
            return true;
        }
        eprintln!(
            "xtask: the installation did not provide everything; still missing: {:?}",
            missing()
        );
        return false;
    }
    eprintln!("xtask: run as root:\n  {apt}");
    false
}
