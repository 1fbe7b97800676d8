//! What each tier needs from the host, checked (and installed) before anything runs.
//!
//! This is the one place that installs: `.ci/run` only runs `cargo xtask test`, so a newcomer's
//! machine and CI take the same path. Every file below comes from a Debian package. When one is
//! missing, `cargo xtask test` installs the packages the selected tiers need when it runs as
//! root (as CI does), never removing a package; otherwise it prints the exact commands, with
//! `sudo`, and stops, instead of failing later inside a compiler or a guest.
//!
//! One trap is handled here: a machine whose `qemu-utils` came from a backports suite (the
//! machines this project runs on ship `qemu-utils` from bookworm-backports) cannot take the
//! stable suite's `qemu-system-x86`, whose `qemu-system-common` wants the older `qemu-utils`
//! and would have to remove it. The emulator is then taken from the same backports suite, whose
//! source is added to apt's list when it is missing.

use std::path::Path;
use std::process::Command;

use crate::{util, vm};

/// What a tier needs: a file or program, the package that provides it, what needs it, and the
/// tiers that do (empty: every tier, because the workspace build needs it).
struct Need {
    what: &'static str,
    pkg: &'static str,
    why: &'static str,
    tiers: &'static [&'static str],
}

const EVERY: &[&str] = &[];
const GUESTS: &[&str] = &["rxe", "wire", "vfio", "kernel"];

const NEEDS: &[Need] = &[
    Need { what: "cc", pkg: "gcc", why: "C shims, generators, benchmarks", tiers: EVERY },
    Need {
        what: "/usr/include/stdio.h",
        pkg: "libc6-dev",
        why: "C shims, generators, benchmarks",
        tiers: EVERY,
    },
    Need {
        what: "/usr/include/infiniband/verbs.h",
        pkg: "libibverbs-dev",
        why: "the rxe backend (built with the workspace)",
        tiers: EVERY,
    },
    Need {
        what: "/usr/include/infiniband/mlx5dv.h",
        pkg: "libibverbs-dev",
        why: "mlx5 vector generator, bench post",
        tiers: EVERY,
    },
    Need {
        what: "/usr/include/rdma/rdma_cma.h",
        pkg: "librdmacm-dev",
        why: "the rxe backend (built with the workspace)",
        tiers: EVERY,
    },
    Need {
        what: "/usr/include/linux/vfio.h",
        pkg: "linux-libc-dev",
        why: "VFIO uapi layout tests",
        tiers: &["unit", "lint"],
    },
    Need {
        what: "/usr/lib/x86_64-linux-gnu/libmlx5.so",
        pkg: "libibverbs-dev",
        why: "the kernel tier's verbs program (rdma-core's mlx5 provider)",
        tiers: &["kernel"],
    },
    Need { what: "c++", pkg: "g++", why: "libFuzzer, built from source", tiers: &["fuzz"] },
    Need { what: "tshark", pkg: "tshark", why: "dissecting the wire's captures", tiers: &["wire"] },
    Need { what: "/usr/bin/busybox", pkg: "busybox-static", why: "QEMU guests", tiers: GUESTS },
    Need { what: "cpio", pkg: "cpio", why: "QEMU guests", tiers: GUESTS },
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

fn selected(tiers: &[&str], only: Option<&str>) -> bool {
    tiers.is_empty() || only.is_none_or(|o| tiers.contains(&o))
}

/// Packages to install for what the selected tiers (`None`: all) miss, with the reasons.
pub fn missing(only: Option<&str>) -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = NEEDS
        .iter()
        .filter(|n| selected(n.tiers, only) && !present(n.what))
        .map(|n| (n.pkg, n.why))
        .collect();
    if selected(&["unit"], only) && !have_ifc_header() {
        out.push(("linux-headers-amd64", "mlx5_ifc.h layout checks"));
    }
    if selected(GUESTS, only) {
        for p in vm::host_tools_missing() {
            out.push((p, "QEMU guests"));
        }
    }
    out.sort();
    out.dedup_by(|a, b| a.0 == b.0);
    out
}

/// `dpkg-query`'s version of an installed package.
fn installed_version(pkg: &str) -> Option<String> {
    let o = Command::new("dpkg-query").args(["-W", "-f=${Version}", pkg]).output().ok()?;
    let v = String::from_utf8_lossy(&o.stdout).trim().to_string();
    (o.status.success() && !v.is_empty()).then_some(v)
}

/// The backports suite an installed version came from (`~bpo12` → `bookworm-backports`).
fn backports_suite(version: &str) -> Option<&'static str> {
    let n = version.split("~bpo").nth(1)?;
    match n.split(|c: char| !c.is_ascii_digit()).next()? {
        "11" => Some("bullseye-backports"),
        "12" => Some("bookworm-backports"),
        "13" => Some("trixie-backports"),
        _ => None,
    }
}

/// Whether apt already has `suite` among its sources.
fn apt_has_suite(suite: &str) -> bool {
    let mut files = vec![std::path::PathBuf::from("/etc/apt/sources.list")];
    if let Ok(dir) = std::fs::read_dir("/etc/apt/sources.list.d") {
        files.extend(dir.flatten().map(|e| e.path()));
    }
    files.iter().filter_map(|f| std::fs::read_to_string(f).ok()).any(|text| {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.starts_with('#'))
            .any(|l| l.split(|c: char| c.is_whitespace() || c == ':').any(|w| w == suite))
    })
}

/// The file that adds `suite` to apt's sources (deb822), and its contents.
fn suite_source(suite: &str) -> (String, String) {
    (
        format!("/etc/apt/sources.list.d/rdma-pmd-{suite}.sources"),
        format!(
            "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: {suite}\nComponents: main\n\
             Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        ),
    )
}

/// The install plan: shell commands, in order, that provide `pkgs` without removing anything.
fn plan(pkgs: &[&str]) -> Vec<String> {
    let mut cmds = Vec::new();
    let mut plain: Vec<&str> = pkgs.to_vec();
    let mut pinned = Vec::new();
    // The emulator must come from the suite qemu-utils came from (see the module docs).
    let suite = installed_version("qemu-utils").as_deref().and_then(backports_suite);
    if let (Some(suite), true) = (suite, pkgs.contains(&"qemu-system-x86")) {
        plain.retain(|p| *p != "qemu-system-x86");
        if !apt_has_suite(suite) {
            let (file, text) = suite_source(suite);
            cmds.push(format!("printf '{}' > {file}", text.replace('\n', "\\n")));
        }
        pinned.push(format!("{} -t {suite} qemu-system-x86", vm::apt_install_command(&[])));
    }
    cmds.push("apt-get update -qq".to_string());
    if !plain.is_empty() {
        cmds.push(vm::apt_install_command(&plain));
    }
    cmds.extend(pinned);
    cmds
}

/// Make sure everything the selected tiers need is there: install as root, else say what to
/// run. True when ready.
pub fn ensure(only: Option<&str>) -> bool {
    let miss = missing(only);
    if miss.is_empty() {
        return true;
    }
    let pkgs: Vec<&str> = miss.iter().map(|(p, _)| *p).collect();
    for (p, why) in &miss {
        eprintln!("xtask: missing {p} (for {why})");
    }
    let cmds = plan(&pkgs);
    if !util::is_root() {
        eprintln!("xtask: install them first (this never removes a package):");
        for c in &cmds {
            eprintln!("  sudo sh -c \"DEBIAN_FRONTEND=noninteractive {}\"", c.replace('"', "\\\""));
        }
        return false;
    }
    eprintln!("xtask: installing {}", pkgs.join(" "));
    for c in &cmds {
        let ok =
            util::run(Command::new("sh").args(["-c", c]).env("DEBIAN_FRONTEND", "noninteractive"));
        if !ok {
            eprintln!("xtask: `{c}` failed");
            break;
        }
    }
    let left = missing(only);
    if left.is_empty() {
        return true;
    }
    eprintln!("xtask: the installation did not provide everything; still missing: {left:?}");
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backports_suite_from_version() {
        assert_eq!(backports_suite("1:10.0.2+ds-2+deb13u1~bpo12+1"), Some("bookworm-backports"));
        assert_eq!(backports_suite("1:11.1.0+ds-1~bpo13+1"), Some("trixie-backports"));
        assert_eq!(backports_suite("1:7.2+dfsg-7+deb12u13"), None);
    }
}
