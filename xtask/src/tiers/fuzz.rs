//! Tier `fuzz`: coverage-guided fuzzing of every parser that reads wire or device input
//! (`fuzz/`, its own workspace: `cm`, `eth`, `cqe`, `fw`; see `fuzz/README.md`).
//!
//! 1. Replays the committed inputs on stable without instrumentation (`cargo test` in
//!    `fuzz/`): every file of `fuzz/corpus/<target>/` and `fuzz/regressions/<target>/`, and
//!    the check that each seed still reaches what it was written for.
//! 2. Builds the libFuzzer binaries into `target/fuzz` with the flags `cargo fuzz` passes
//!    (cargo-fuzz `src/project.rs`: the `sancov-module` pass, inline 8-bit counters, PC table,
//!    compare tracing, `--cfg fuzzing`, debug assertions), which are stable codegen options,
//!    plus overflow checks; `--target` keeps them off build scripts. libFuzzer itself is built
//!    from C++ by `libfuzzer-sys`, so a C++ compiler is needed (`prereq` installs g++).
//! 3. Runs each target for [`SECONDS`] (or `FUZZ_TIME`) with a fixed seed, a per-input
//!    timeout and an RSS limit, on a scratch copy of its corpus under `target/fuzz/work/`
//!    (the committed corpus is never modified), and prints libFuzzer's final figures:
//!    executions, `cov:` (covered edges), `ft:` (features) and execs/s.
//!
//! A crash (a panic, an abort, a hang past the timeout, the RSS limit) fails the tier; the
//! input libFuzzer saved is printed with the command that makes it a regression test.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::Outcome;
use crate::util;

/// The fuzz targets (binaries of `fuzz/`).
const TARGETS: [&str; 4] = ["cm", "eth", "cqe", "fw"];

/// Seconds each target runs by default: a minute of fuzzing in all, so that the tier with a
/// cold build (libFuzzer's C++ and the instrumented crates, about two minutes on two cores)
/// stays near three minutes, and well under two with a warm one.
const SECONDS: u64 = 15;

/// cargo-fuzz's instrumentation flags (`cargo fuzz build` on Linux, release, with debug
/// assertions), and overflow checks.
const RUSTFLAGS: &str = "-Cpasses=sancov-module \
     -Cllvm-args=-sanitizer-coverage-level=4 \
     -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
     -Cllvm-args=-sanitizer-coverage-pc-table \
     -Cllvm-args=-sanitizer-coverage-trace-compares \
     -Cllvm-args=-simplifycfg-branch-fold-threshold=0 \
     -Cllvm-args=-sanitizer-coverage-stack-depth \
     --cfg fuzzing -Clink-dead-code -Cdebug-assertions -Coverflow-checks -Ccodegen-units=1";

fn target_dir() -> PathBuf {
    let base = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => PathBuf::from(d),
        None => util::root().join("target"),
    };
    // Its own directory: the flags differ from every other build's.
    base.join("fuzz")
}

/// `cargo` for the fuzz workspace, with its own target directory and no flags inherited.
fn fuzz_cargo() -> Command {
    let mut c = util::cargo();
    c.current_dir(util::root().join("fuzz"));
    c.env("CARGO_TARGET_DIR", target_dir());
    for var in ["RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS", "CARGO_BUILD_RUSTFLAGS"] {
        c.env_remove(var);
    }
    c
}

/// The host's target triple (`rustc -vV`).
fn host() -> Option<String> {
    let o = Command::new("rustc").arg("-vV").output().ok()?;
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
}

/// libFuzzer's final figures for one run.
#[derive(Debug, Default, PartialEq, Eq)]
struct Figures {
    execs: u64,
    cov: u64,
    ft: u64,
    corpus: u64,
    execs_per_s: u64,
}

/// Parse the last `#N DONE cov: C ft: F corp: K/... exec/s: E` line of libFuzzer's output.
fn figures(out: &str) -> Option<Figures> {
    let line = out.lines().rev().find(|l| l.starts_with('#') && l.contains("DONE"))?;
    let mut w = line.split_whitespace();
    let execs = w.next()?.trim_start_matches('#').parse().ok()?;
    let mut f = Figures { execs, ..Figures::default() };
    let words: Vec<&str> = line.split_whitespace().collect();
    for pair in words.windows(2) {
        let n = || pair[1].split('/').next().and_then(|v| v.parse().ok()).unwrap_or(0);
        match pair[0] {
            "cov:" => f.cov = n(),
            "ft:" => f.ft = n(),
            "corp:" => f.corpus = n(),
            "exec/s:" => f.execs_per_s = n(),
            _ => {}
        }
    }
    Some(f)
}

/// The input libFuzzer saved after a crash (`Test unit written to PATH`).
fn crash_input(out: &str) -> Option<String> {
    out.lines().find_map(|l| l.split("Test unit written to ").nth(1).map(|p| p.trim().to_owned()))
}

/// A fresh scratch corpus for `target`: the committed corpus and regressions, copied.
fn scratch(target: &str) -> std::io::Result<PathBuf> {
    let work = target_dir().join("work").join(target);
    let corpus = work.join("corpus");
    if work.exists() {
        fs::remove_dir_all(&work)?;
    }
    fs::create_dir_all(&corpus)?;
    let fuzz = util::root().join("fuzz");
    for kind in ["corpus", "regressions"] {
        let Ok(dir) = fs::read_dir(fuzz.join(kind).join(target)) else { continue };
        for e in dir.flatten().filter(|e| e.path().is_file()) {
            fs::copy(e.path(), corpus.join(format!("{kind}-{}", e.file_name().to_string_lossy())))?;
        }
    }
    Ok(work)
}

/// Run one target for `seconds`; true when it found nothing.
fn fuzz_one(bin: &Path, target: &str, seconds: u64) -> bool {
    let work = match scratch(target) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("fuzz: {target}: cannot prepare the scratch corpus: {e}");
            return false;
        }
    };
    let mut cmd = Command::new(bin);
    // A panic prints its stack before libFuzzer aborts.
    cmd.env("RUST_BACKTRACE", "1");
    cmd.arg(work.join("corpus"))
        .arg(format!("-max_total_time={seconds}"))
        .arg("-seed=1")
        .arg("-timeout=10")
        .arg("-rss_limit_mb=2048")
        .arg("-print_final_stats=1")
        .arg(format!("-artifact_prefix={}/", work.display()));
    eprintln!("$ {cmd:?}");
    let (ok, text) = match cmd.output() {
        Ok(o) => {
            let mut t = String::from_utf8_lossy(&o.stdout).into_owned();
            t.push_str(&String::from_utf8_lossy(&o.stderr));
            (o.status.success(), t)
        }
        Err(e) => {
            eprintln!("fuzz: cannot run {}: {e}", bin.display());
            return false;
        }
    };
    match figures(&text) {
        Some(f) if ok => println!(
            "fuzz: {target:<4} {} execs in {seconds} s ({} execs/s), cov: {} ft: {}, corpus {}",
            f.execs, f.execs_per_s, f.cov, f.ft, f.corpus
        ),
        _ if ok => println!("fuzz: {target:<4} finished (no final figures found)"),
        _ => {
            // The end of libFuzzer's report: the panic message and the stack.
            let tail: Vec<&str> = text.lines().rev().take(60).collect();
            for l in tail.into_iter().rev() {
                eprintln!("{l}");
            }
            match crash_input(&text) {
                Some(p) => println!(
                    "fuzz: {target} FAILED; the input is saved at {p}\n  replay it: {} {p}\n  \
                     keep it as a regression test: cp {p} fuzz/regressions/{target}/<name> \
                     (then `cargo test` in fuzz/ replays it on stable)",
                    bin.display()
                ),
                None => println!("fuzz: {target} FAILED (no saved input reported)"),
            }
        }
    }
    ok
}

pub fn run() -> Outcome {
    let Some(triple) = host() else { return Outcome::skip("no rustc host triple (rustc -vV)") };
    // libFuzzer is C++: `prereq` installs g++ for this tier (or stopped with the command).
    if !super::prereq::ensure(Some("fuzz")) {
        eprintln!("xtask: fuzz: no C++ compiler for libFuzzer (sudo apt-get install g++)");
        return Outcome::check(false);
    }
    let seconds = std::env::var("FUZZ_TIME").ok().and_then(|v| v.parse().ok()).unwrap_or(SECONDS);

    // 1. The committed inputs, uninstrumented.
    let (ok, out) = util::run_capture(fuzz_cargo().args(["test", "--locked"]));
    let mut o = Outcome::from_libtest(ok, &out);

    // 2. The instrumented binaries.
    let built = util::run(fuzz_cargo().env("RUSTFLAGS", RUSTFLAGS).args([
        "build",
        "--locked",
        "--release",
        "--features",
        "fuzz",
        "--bins",
        "--target",
        &triple,
    ]));
    if !built {
        o.failed += 1;
        return o;
    }
    o.passed += 1;

    // 3. A bounded run of each.
    let bins = target_dir().join(&triple).join("release");
    for t in TARGETS {
        if fuzz_one(&bins.join(t), t, seconds) {
            o.passed += 1;
        } else {
            o.failed += 1;
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_libfuzzer_final_line() {
        let out = "#5\tINITED cov: 255 ft: 342 corp: 4/1658b exec/s: 0 rss: 30Mb\n\
                   #157417\tDONE   cov: 662 ft: 1979 corp: 575/241Kb lim: 796 exec/s: 14310 rss: 31Mb\n\
                   Done 157417 runs in 11 second(s)\n";
        let f = figures(out).unwrap();
        assert_eq!(
            f,
            Figures { execs: 157417, cov: 662, ft: 1979, corpus: 575, execs_per_s: 14310 }
        );
        assert_eq!(figures("#5\tINITED cov: 1 ft: 1\n"), None);
    }

    #[test]
    fn finds_the_saved_crash() {
        let out = "==1== ERROR: libFuzzer: deadly signal\n\
                   artifact_prefix='w/'; Test unit written to w/crash-abc\nBase64: AA==\n";
        assert_eq!(crash_input(out).as_deref(), Some("w/crash-abc"));
        assert_eq!(crash_input("Done 3 runs"), None);
    }
}
