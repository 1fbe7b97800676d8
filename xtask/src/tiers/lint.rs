//! Tier `lint`: clippy with warnings denied (its `incompatible_msrv` holds each crate's
//! `rust-version`), rustfmt's check, the API docs built with warnings denied (so a broken
//! intra-doc link fails), and `cargo package` of the library crates.

use super::Outcome;
use crate::util;

/// Clippy and rustfmt come with most toolchains, but not with a minimal profile: add them.
fn ensure_components() {
    let have = |sub: &str| {
        util::cargo().args([sub, "--version"]).output().is_ok_and(|o| o.status.success())
    };
    if !(have("clippy") && have("fmt")) {
        let _ = util::run(std::process::Command::new("rustup").args([
            "component",
            "add",
            "clippy",
            "rustfmt",
        ]));
    }
}

pub fn run() -> Outcome {
    ensure_components();
    let clippy = util::run(util::cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--all-features",
        "--",
        "-D",
        "warnings",
    ]));
    let fmt = util::run(util::cargo().args(["fmt", "--all", "--check"]));
    let doc = util::run(
        util::cargo()
            .args(["doc", "--workspace", "--no-deps", "--all-features"])
            .env("RUSTDOCFLAGS", "-D warnings"),
    );
    forget_packaged_sources();
    let package = util::run(&mut package_cmd());
    Outcome::checks(&[clippy, fmt, doc, package])
}

/// The crates meant for crates.io; the device model, the examples and xtask are `publish = false`.
const LIBRARY_CRATES: &[&str] = &["rdma-pmd", "rdma-pmd-hal", "rdma-pmd-mlx5", "rdma-pmd-rxe"];

/// Remove cargo's unpacked copies of our own crates from its registry cache. `cargo package`
/// verifies several crates through a local registry whose sources cargo unpacks once per
/// name and version (`$CARGO_HOME/registry/src/<registry>/<name>-<version>`) and never
/// refreshes while the version stays 0.1.0, so a second run would verify the first run's
/// files. Only directories of [`LIBRARY_CRATES`] are removed; cargo unpacks them again.
fn forget_packaged_sources() {
    let home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cargo")));
    let Some(src) = home.map(|h| h.join("registry").join("src")) else { return };
    let Ok(registries) = std::fs::read_dir(&src) else { return };
    for registry in registries.flatten() {
        let Ok(crates) = std::fs::read_dir(registry.path()) else { continue };
        for dir in crates.flatten() {
            let name = dir.file_name().to_string_lossy().into_owned();
            let ours = LIBRARY_CRATES.iter().any(|k| {
                name.strip_prefix(k)
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()))
            });
            if ours {
                let _ = std::fs::remove_dir_all(dir.path());
            }
        }
    }
}

/// `cargo package` of the library crates together, so that their path dependencies on each
/// other resolve to the crates packaged with them, each then built from its packaged form (the
/// verification step: a file left out of `include`, or a dependency without a version, fails
/// here). `--allow-dirty` packages the working tree as it is, uncommitted edits included: the
/// check is of the manifests and the files, not of git's state (nothing is published).
fn package_cmd() -> std::process::Command {
    let mut cmd = util::cargo();
    cmd.arg("package");
    for krate in LIBRARY_CRATES {
        cmd.args(["-p", krate]);
    }
    cmd.arg("--allow-dirty");
    cmd
}
