//! Tier `lint`: clippy with warnings denied, rustfmt's check, and the API docs built with
//! warnings denied (so a broken intra-doc link fails).

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
    Outcome::checks(&[clippy, fmt, doc])
}
