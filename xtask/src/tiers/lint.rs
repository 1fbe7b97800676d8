//! Tier `lint`: clippy with warnings denied, and rustfmt's check.

use super::Outcome;
use crate::util;

pub fn run() -> Outcome {
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
    Outcome {
        passed: clippy as u32 + fmt as u32,
        failed: !clippy as u32 + !fmt as u32,
        skipped: None,
    }
}
