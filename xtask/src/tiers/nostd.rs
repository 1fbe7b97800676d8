//! Tier `nostd`, and `cargo xtask nostd`: the freestanding no_std link check.
//!
//! Builds `examples/nostd-writev` with `--cfg nostd_check` in a profile with
//! `panic = "abort"` (given on the command line with `--config`, so the workspace's shared
//! profiles stay as they are and every crate of the build, not only the binary, is compiled for
//! abort), links it with `-nostartfiles -nostdlib -static` (no libc, no start files), checks
//! that the result is a static ELF without an interpreter or dynamic section, runs it and
//! expects exit status 0. Stable toolchain, host target.
//!
//! Then the no_std crates (core, HAL, mlx5 driver) are built for `aarch64-unknown-none`, so
//! the barriers and stores written per architecture keep compiling where they cannot run here.
//! The target is added with rustup when missing; if that fails (no network) the check is
//! reported as skipped, with the command to run.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::Outcome;
use crate::util;

const PACKAGE: &str = "nostd-writev";

fn target_dir() -> PathBuf {
    let base = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => PathBuf::from(d),
        None => util::root().join("target"),
    };
    // Its own directory: the flags differ from every other build's.
    base.join("nostd")
}

/// Program-header types of an ELF64 little-endian file, or why it is not one.
fn program_headers(bytes: &[u8]) -> Result<Vec<u32>, String> {
    let rd16 = |o: usize| bytes.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
    let rd64 = |o: usize| {
        bytes.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize)
    };
    if bytes.get(..5) != Some(b"\x7fELF\x02") {
        return Err("not an ELF64 file".into());
    }
    let (phoff, phentsize, phnum) = match (rd64(0x20), rd16(0x36), rd16(0x38)) {
        (Some(a), Some(b), Some(c)) => (a, b, c),
        _ => return Err("truncated ELF header".into()),
    };
    (0..phnum)
        .map(|i| {
            let o = phoff + i * phentsize;
            bytes
                .get(o..o + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .ok_or_else(|| "truncated program headers".to_string())
        })
        .collect()
}

fn check_static(exe: &Path) -> Result<(), String> {
    const PT_DYNAMIC: u32 = 2;
    const PT_INTERP: u32 = 3;
    let bytes = std::fs::read(exe).map_err(|e| format!("{}: {e}", exe.display()))?;
    let phdrs = program_headers(&bytes)?;
    if phdrs.contains(&PT_INTERP) || phdrs.contains(&PT_DYNAMIC) {
        return Err("the binary is dynamically linked".into());
    }
    Ok(())
}

fn build_and_run() -> Result<(), String> {
    let dir = target_dir();
    let ok = util::run(
        util::cargo()
            .env("CARGO_TARGET_DIR", &dir)
            .args(["rustc", "-p", PACKAGE, "--bin", PACKAGE, "--profile", "nostd"])
            .args(["--config", "profile.nostd.inherits=\"dev\""])
            .args(["--config", "profile.nostd.panic=\"abort\""])
            .args(["--", "--cfg", "nostd_check", "-C", "relocation-model=static"])
            .args(["-C", "link-arg=-nostartfiles", "-C", "link-arg=-nostdlib"])
            .args(["-C", "link-arg=-static"]),
    );
    if !ok {
        return Err("the freestanding build failed".into());
    }
    let exe = dir.join("nostd").join(PACKAGE);
    check_static(&exe)?;
    eprintln!("$ {}", exe.display());
    let status = Command::new(&exe).status().map_err(|e| format!("{}: {e}", exe.display()))?;
    match status.code() {
        Some(0) => Ok(()),
        Some(n) => Err(format!("{PACKAGE} failed check {n}")),
        None => Err(format!("{PACKAGE} was killed: {status}")),
    }
}

fn report() -> bool {
    match build_and_run() {
        Ok(()) => {
            println!("nostd: PASS ({PACKAGE} linked without std, libc or start files, exit 0)");
            true
        }
        Err(why) => {
            println!("nostd: FAIL: {why}");
            false
        }
    }
}

/// The other architecture the no_std crates must keep compiling for.
const OTHER_TARGET: &str = "aarch64-unknown-none";

/// `Some(passed)`, or `None` when the target's core library is not installed and rustup could
/// not add it (no network): then the check did not run, and says so.
fn check_other_arch() -> Option<bool> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().any(|l| l.trim() == OTHER_TARGET))
        .unwrap_or(false);
    if !installed && !util::run(Command::new("rustup").args(["target", "add", OTHER_TARGET])) {
        println!(
            "nostd: SKIPPED: the {OTHER_TARGET} check did not run: rustup could not add the target \
             (run: rustup target add {OTHER_TARGET})"
        );
        return None;
    }
    // `build`, not `check`: inline assembly is only assembled in code generation.
    let ok = util::run(util::cargo().env("CARGO_TARGET_DIR", target_dir()).args([
        "build",
        "--target",
        OTHER_TARGET,
        "-p",
        "rdma-pmd",
        "-p",
        "rdma-pmd-hal",
        "-p",
        "rdma-pmd-mlx5",
    ]));
    if ok {
        println!("nostd: PASS (core, HAL and mlx5 driver build for {OTHER_TARGET})");
    } else {
        println!("nostd: FAIL: the no_std crates do not compile for {OTHER_TARGET}");
    }
    Some(ok)
}

/// `cargo xtask nostd`.
pub fn cli() -> bool {
    let link = report();
    check_other_arch() != Some(false) && link
}

/// Tier `nostd`: the link check, and the other architecture's build (reported as skipped, with
/// the reason, where its target cannot be installed).
pub fn run() -> Outcome {
    let link = report();
    match check_other_arch() {
        Some(arch) => Outcome::checks(&[link, arch]),
        None => Outcome {
            skipped: Some(format!("{OTHER_TARGET} build: target not installable here")),
            ..Outcome::check(link)
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_program_headers() {
        // A minimal ELF64 header with two program headers: PT_LOAD, PT_INTERP.
        let mut b = vec![0u8; 64 + 2 * 56];
        b[..5].copy_from_slice(b"\x7fELF\x02");
        b[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        b[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        b[0x38..0x3a].copy_from_slice(&2u16.to_le_bytes());
        b[64..68].copy_from_slice(&1u32.to_le_bytes());
        b[120..124].copy_from_slice(&3u32.to_le_bytes());
        assert_eq!(program_headers(&b), Ok(vec![1, 3]));
        assert!(program_headers(&b[..10]).is_err());
        assert!(program_headers(b"MZ").is_err());
    }
}
