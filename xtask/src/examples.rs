//! The examples package (`examples/`): building its binaries and running them, for the demo, the
//! benchmarks and the `model` tier.

use crate::util;

/// Build a binary of the examples package in release mode; returns its path.
pub fn build_examples_bin(name: &str) -> Result<std::path::PathBuf, String> {
    let out = util::cargo()
        .args(["build", "--release", "-p", "rdma-pmd-examples", "--bin", name])
        .args(["--message-format=json-render-diagnostics"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("building {name} failed"));
    }
    util::executable_of(&String::from_utf8_lossy(&out.stdout), name)
        .ok_or_else(|| format!("cargo reported no executable for {name}"))
}

/// Run a binary of the examples package in release mode with `args`. The demo builds without
/// the package's default features (the rxe backend, the C loops), so it needs nothing from the
/// host but the Rust toolchain; the benchmarks check for what their C loops need first.
pub fn run_example(bin: &str, args: &[String]) -> bool {
    let mut cmd = util::cargo();
    cmd.args(["run", "--release", "-p", "rdma-pmd-examples", "--bin", bin]);
    if bin == "demo" {
        cmd.arg("--no-default-features");
    } else if !crate::tiers::prereq::ensure(Some("model")) {
        return false;
    }
    cmd.arg("--").args(args);
    util::run(&mut cmd)
}
