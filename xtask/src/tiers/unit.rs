//! Tier `unit`: every crate's unit and integration tests that need no VM.

use super::Outcome;
use crate::util;

pub fn run() -> Outcome {
    let (ok, out) =
        util::run_capture(util::cargo().args(["test", "--workspace", "--all-features"]));
    Outcome::from_libtest(ok, &out)
}
