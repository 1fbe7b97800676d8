//! Tier `model`: the driver end to end on the mlx5 device model, in release mode, soak included,
//! and the demo on it briefly.

use super::Outcome;
use crate::{examples, util};

/// The names of the wire tier's tests start with this (`xtask/src/tiers/wire.rs`).
const WIRE_TESTS: &str = "on_wire_";

/// Tier `model`: the end-to-end tests of the mlx5 driver on the device model, and the device
/// model's own tests, in release mode with the ignored (long) tests included: the soak.
pub fn run() -> Outcome {
    let (ok, out) = util::run_capture(util::cargo().args([
        "test",
        "--release",
        "-p",
        "rdma-pmd-mlx5",
        "-p",
        "rdma-pmd-mlx5-model",
        "--tests",
        "--",
        "--include-ignored",
        // The wire tier's tests need its guest (a veth pair, rxe in a namespace).
        "--skip",
        WIRE_TESTS,
    ]));
    let mut o = Outcome::from_libtest(ok, &out);
    // The demo itself, briefly: it verifies every byte and fails on any model violation.
    let demo_ok = examples::run_example("demo", &["--writes".into(), "100000".into()]);
    o.passed += demo_ok as u32;
    o.failed += !demo_ok as u32;
    o
}
