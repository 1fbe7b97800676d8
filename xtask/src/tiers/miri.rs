//! Tier `miri`: the core crate's tests under Miri, which reports undefined behaviour (a
//! dangling or misaligned access, a data race, a broken aliasing rule) that ordinary tests
//! cannot see. The core holds the buffer-lifetime and accounting rules every backend relies
//! on, so it is the crate that must be clean; the HAL's `DmaRing`, whose accesses are proven
//! in bounds once rather than checked each time, runs here too. Miri needs a nightly toolchain with the `miri`
//! component; where none can be had, the tier is reported as skipped with the command to run.

use std::process::Command;

use super::Outcome;
use crate::util;

/// `cargo +nightly`, free of the variables the outer (stable) cargo set for this xtask.
fn nightly_cargo() -> Command {
    let mut c = Command::new("cargo");
    c.arg("+nightly").current_dir(util::root());
    for var in ["CARGO", "RUSTC", "RUSTDOC", "RUSTUP_TOOLCHAIN", "RUSTC_WRAPPER"] {
        c.env_remove(var);
    }
    c
}

fn have_miri() -> bool {
    nightly_cargo().args(["miri", "--version"]).output().is_ok_and(|o| o.status.success())
}

pub fn run() -> Outcome {
    if !have_miri() {
        // One attempt to add it (a fresh machine may have nightly without the component).
        let _ = Command::new("rustup")
            .args(["+nightly", "component", "add", "miri", "rust-src"])
            .status();
        if !have_miri() {
            return Outcome::skip(
                "no nightly toolchain with miri here (rustup +nightly component add miri rust-src)",
            );
        }
    }
    let (ok, out) = util::run_capture(nightly_cargo().args(["miri", "test", "-p", "rdma-pmd"]));
    let core = Outcome::from_libtest(ok, &out);
    let (ok, out) = util::run_capture(nightly_cargo().args([
        "miri",
        "test",
        "-p",
        "rdma-pmd-hal",
        "--features",
        "std",
        "--lib",
        "dma_ring",
    ]));
    let hal = Outcome::from_libtest(ok, &out);
    Outcome { passed: core.passed + hal.passed, failed: core.failed + hal.failed, skipped: None }
}
