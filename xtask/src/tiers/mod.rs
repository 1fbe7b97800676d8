//! Test tiers and the other tasks. Each tier lives in its own module and returns an [`Outcome`];
//! `cargo xtask test` runs them in order and prints one summary line.

mod fuzz;
mod kernel;
mod lint;
mod miri;
mod model;
mod nostd;
pub mod prereq;
mod rxe;
mod tsan;
mod unit;
mod vectors;
mod vfio;
mod wire;

use std::time::{Duration, Instant};

use crate::util;

/// `3m07s`.
fn mins(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}m{:02}s", s / 60, s % 60)
}

/// What one tier did.
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    /// Tests (or checks) that passed.
    pub passed: u32,
    /// Tests (or checks) that failed.
    pub failed: u32,
    /// Set when the tier could not run here, with the reason.
    pub skipped: Option<String>,
}

impl Outcome {
    /// One check: passed or failed.
    pub fn check(ok: bool) -> Self {
        Self::checks(&[ok])
    }

    /// Several checks, each passed or failed.
    pub fn checks(oks: &[bool]) -> Self {
        let passed = oks.iter().filter(|ok| **ok).count() as u32;
        Outcome { passed, failed: oks.len() as u32 - passed, skipped: None }
    }

    /// Counts of a libtest run; a failed run with no failed test counts as one failure.
    pub fn from_libtest(ok: bool, output: &str) -> Self {
        let (passed, mut failed) = util::count_libtest(output);
        if !ok && failed == 0 {
            failed = 1;
        }
        Outcome { passed, failed, skipped: None }
    }

    /// The tier did not run, and why.
    pub fn skip(why: impl Into<String>) -> Self {
        Outcome { skipped: Some(why.into()), ..Default::default() }
    }
}

type Tier = fn() -> Outcome;

/// Every tier, in the order `cargo xtask test` runs them.
const TIERS: &[(&str, Tier)] = &[
    ("unit", unit::run),
    ("fuzz", fuzz::run),
    ("lint", lint::run),
    ("miri", miri::run),
    ("vectors", vectors::run),
    ("nostd", nostd::run),
    ("model", model::run),
    ("tsan", tsan::run),
    ("rxe", rxe::run),
    ("wire", wire::run),
    ("vfio", vfio::run),
    ("kernel", kernel::run),
];

/// Tier names, for usage text.
pub fn names() -> Vec<&'static str> {
    TIERS.iter().map(|(n, _)| *n).collect()
}

/// The tier `--tier NAME` names, `None` for all; `Err` after printing usage.
fn parse_only(args: &[String]) -> Result<Option<&str>, ()> {
    let only = match args {
        [] => None,
        [flag, name] if flag == "--tier" => Some(name.as_str()),
        _ => {
            eprintln!("usage: cargo xtask test|setup [--tier {}]", names().join("|"));
            return Err(());
        }
    };
    if let Some(name) = only {
        if !TIERS.iter().any(|(n, _)| *n == name) {
            eprintln!("xtask: no tier {name:?}; tiers: {}", names().join(", "));
            return Err(());
        }
    }
    Ok(only)
}

/// `cargo xtask setup [--tier NAME]`: install what the tiers need, run nothing.
pub fn setup(args: &[String]) -> bool {
    let Ok(only) = parse_only(args) else { return false };
    if !prereq::ensure(only) {
        return false;
    }
    if only.is_none_or(|o| o == "kernel") {
        match crate::vm::private_qemu() {
            Ok(q) => eprintln!("xtask: QEMU {} at {}", q.version, q.binary().display()),
            Err(e) => {
                eprintln!("xtask: provisioning QEMU 11.1 failed: {e}");
                return false;
            }
        }
    }
    true
}

/// `cargo xtask test [--tier NAME]`.
pub fn run_cli(args: &[String]) -> bool {
    let Ok(only) = parse_only(args) else { return false };
    if !prereq::ensure(only) {
        println!("0 passed, 1 failed");
        return false;
    }
    let run: Vec<&(&str, Tier)> =
        TIERS.iter().filter(|(name, _)| only.is_none_or(|o| o == *name)).collect();
    let started = Instant::now();
    let mut rows = Vec::new();
    for (k, (name, tier)) in run.iter().enumerate() {
        eprintln!(
            "\n==== [{}/{}] tier {name} ({} so far) ====",
            k + 1,
            run.len(),
            mins(started.elapsed())
        );
        let t0 = Instant::now();
        let out = tier();
        eprintln!("==== tier {name}: {} ====", mins(t0.elapsed()));
        rows.push((*name, out, t0.elapsed()));
    }
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    println!("\ntier summary ({} in all):", mins(started.elapsed()));
    for (name, o, took) in &rows {
        let took = mins(*took);
        match &o.skipped {
            Some(why) if o.passed + o.failed > 0 => {
                skipped += 1;
                println!(
                    "  {name:<8} {took:>7}  {} passed, {} failed; SKIPPED: {why}",
                    o.passed, o.failed
                );
            }
            Some(why) => {
                skipped += 1;
                println!("  {name:<8} {took:>7}  SKIPPED: {why}");
            }
            None => println!("  {name:<8} {took:>7}  {} passed, {} failed", o.passed, o.failed),
        }
        passed += o.passed;
        failed += o.failed;
    }
    if skipped > 0 {
        println!("{passed} passed, {failed} failed, {skipped} skipped");
    } else {
        println!("{passed} passed, {failed} failed");
    }
    failed == 0
}

/// `cargo xtask vectors FILE...`.
pub fn vectors_cli(args: &[String]) -> bool {
    vectors::cli(args)
}

/// `cargo xtask nostd`.
pub fn nostd_cli() -> bool {
    nostd::cli()
}
