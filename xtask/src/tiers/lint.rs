//! Tier `lint`: clippy with warnings denied, rustfmt's check, and the API docs built with
//! warnings denied (so a broken intra-doc link fails).

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
    let doc = util::run(
        util::cargo()
            .args(["doc", "--workspace", "--no-deps", "--all-features"])
            .env("RUSTDOCFLAGS", "-D warnings"),
    );
    Outcome::checks(&[clippy, fmt, doc])
}
