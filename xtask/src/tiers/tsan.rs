//! Tier `tsan`: the driver's end-to-end tests on the device model (`drivers/mlx5/tests/model.rs`,
//! `fw_bringup.rs`), the driver's and the model's unit tests, under ThreadSanitizer.
//!
//! The model runs on its own thread and shares DMA memory and the BAR with the driver, so the
//! two must never race (`hal::access`: every shared access is atomic, and the one non-atomic
//! store, the send ring's 16-byte segment store, is ordered by the queue's protocol). This tier
//! checks that at run time: any ThreadSanitizer report fails it.
//!
//! It needs the nightly toolchain with `rust-src` (`-Zsanitizer=thread` and `-Zbuild-std`, so
//! that the standard library is instrumented too) on a host ThreadSanitizer supports; without
//! them it is reported as skipped, with the command that installs them. Its own target directory
//! (the flags differ from every other build's): about a minute and a half from cold on two cores,
//! mostly building the standard library, then under a minute.
//!
//! Left out: the model's `vector_cases_execute_on_the_model`, which copies megabytes per case
//! through the model's DMA; every 8-byte atomic of those copies is a call into the sanitizer's
//! runtime, which makes that one test take about ten minutes. Run it by hand with the command
//! this tier prints, without the `--skip`.

use std::path::PathBuf;
use std::process::Command;

use super::Outcome;
use crate::util;

/// Hosts ThreadSanitizer supports that this project builds on.
const HOSTS: &[&str] = &["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"];

fn target_dir() -> PathBuf {
    let base = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => PathBuf::from(d),
        None => util::root().join("target"),
    };
    base.join("tsan")
}

/// `rustup run nightly PROG`, from the workspace root, with nothing of this (stable) cargo's
/// environment that would pin the toolchain.
fn nightly(prog: &str) -> Command {
    let mut c = Command::new("rustup");
    c.args(["run", "nightly", prog]).current_dir(util::root());
    for var in ["RUSTUP_TOOLCHAIN", "CARGO", "RUSTC", "RUSTDOC", "RUSTFLAGS"] {
        c.env_remove(var);
    }
    c
}

/// The host triple of the nightly toolchain, or why it cannot run the tier.
fn usable_host() -> Result<String, String> {
    let vv =
        nightly("rustc").arg("-vV").output().ok().filter(|o| o.status.success()).ok_or(
            "no nightly toolchain (rustup toolchain install nightly --component rust-src)",
        )?;
    let text = String::from_utf8_lossy(&vv.stdout).into_owned();
    let host = text
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .ok_or("nightly rustc -vV names no host")?
        .trim()
        .to_string();
    if !HOSTS.contains(&host.as_str()) {
        return Err(format!("ThreadSanitizer is not set up for host {host} here"));
    }
    let sysroot = nightly("rustc").args(["--print", "sysroot"]).output().ok();
    let sysroot = sysroot.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let src = sysroot.map(|s| PathBuf::from(s).join("lib/rustlib/src/rust/library/Cargo.lock"));
    if !src.is_some_and(|p| p.is_file()) {
        return Err(
            "nightly has no rust-src (rustup component add rust-src --toolchain nightly)".into()
        );
    }
    Ok(host)
}

/// How many ThreadSanitizer reports `output` holds.
fn reports(output: &str) -> u32 {
    output.lines().filter(|l| l.starts_with("WARNING: ThreadSanitizer:")).count() as u32
}

pub fn run() -> Outcome {
    let host = match usable_host() {
        Ok(h) => h,
        Err(why) => {
            println!("tsan: SKIPPED: {why}");
            return Outcome::skip(why);
        }
    };
    let (ok, out) = util::run_capture(
        nightly("cargo")
            .env("CARGO_TARGET_DIR", target_dir())
            .env("RUSTFLAGS", "-Zsanitizer=thread")
            // Every report, not only the first per test binary; the exit status still fails.
            .env("TSAN_OPTIONS", "halt_on_error=0")
            .args(["test", "-Zbuild-std", "--target", &host, "--no-fail-fast"])
            .args(["-p", "rdma-pmd-mlx5", "-p", "rdma-pmd-mlx5-model", "--lib"])
            .args(["--test", "model", "--test", "fw_bringup"])
            .args(["--", "--skip", "vector_cases_execute_on_the_model"]),
    );
    let mut o = Outcome::from_libtest(ok, &out);
    let n = reports(&out);
    if n > 0 {
        println!("tsan: FAIL: {n} ThreadSanitizer report(s)");
        o.failed += 1;
    } else if ok {
        println!("tsan: PASS (no ThreadSanitizer reports)");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_reports() {
        let out = "==================\nWARNING: ThreadSanitizer: data race (pid=1)\n  Write of \
                   size 1\n==================\nWARNING: ThreadSanitizer: data race (pid=1)\n\
                   ThreadSanitizer: reported 2 warnings\n";
        assert_eq!(reports(out), 2);
        assert_eq!(reports("test result: ok. 3 passed; 0 failed"), 0);
    }
}
