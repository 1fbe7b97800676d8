//! Tier `vectors`, and `cargo xtask vectors FILE...`: mlx5 conformance vectors.
//!
//! The tier runs the checked-in vector files (`tests/data/mlx5-public.txt`,
//! `tests/data/mlx5-generated.txt`), then compiles the independent C generator
//! (`drivers/mlx5/vectors/gen.c`, built only on rdma-core's `<infiniband/mlx5dv.h>`, from
//! `libibverbs-dev`) into `target/`, runs its fresh output too, and checks that the checked-in
//! generated file is identical to it.

use std::path::{Path, PathBuf};
use std::process::Command;

use rdma_pmd_mlx5::vectors::{self, Report, Verdict};

use super::Outcome;
use crate::util;

/// The checked-in vector files, relative to the workspace root.
const FILES: &[&str] = &["tests/data/mlx5-public.txt", "tests/data/mlx5-generated.txt"];
/// The generator's source, relative to the workspace root.
const GENERATOR: &str = "drivers/mlx5/vectors/gen.c";

fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => PathBuf::from(d),
        None => util::root().join("target"),
    }
}

/// Run files, printing every record that did not pass; unreadable files count as failures.
fn run_files(paths: &[PathBuf]) -> Report {
    let mut total = Report::default();
    for p in paths {
        let rep = match vectors::run_file(p) {
            Ok(r) => r,
            Err(e) => {
                let mut r = Report::default();
                r.add(&p.display().to_string(), Verdict::Fail(format!("cannot read: {e}")));
                r
            }
        };
        for (name, v) in &rep.verdicts {
            match v {
                Verdict::Pass => {}
                Verdict::Fail(why) => println!("FAIL {}: {name}: {why}", p.display()),
                Verdict::Unsupported(why) => {
                    println!("UNSUPPORTED {}: {name}: {why}", p.display())
                }
            }
        }
        println!("{}: {}", p.display(), rep.summary());
        total.merge(rep);
    }
    total
}

/// `cargo xtask vectors FILE...`: last line `vectors: N passed, N failed, N unsupported`.
pub fn cli(args: &[String]) -> bool {
    if args.is_empty() {
        eprintln!("usage: cargo xtask vectors FILE...");
        return false;
    }
    let paths: Vec<PathBuf> = args.iter().map(PathBuf::from).collect();
    let rep = run_files(&paths);
    println!("{}", rep.summary());
    rep.failed == 0
}

/// Compile and run the C generator; returns the path of its output.
fn generate(out_dir: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let exe = out_dir.join("mlx5-vecgen");
    let src = util::root().join(GENERATOR);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let ok = util::run(Command::new(&cc).args(["-O2", "-Wall", "-o"]).arg(&exe).arg(&src));
    if !ok {
        return Err(format!(
            "{cc} could not build {GENERATOR} (it needs <infiniband/mlx5dv.h>: install libibverbs-dev)"
        ));
    }
    let out = Command::new(&exe).output().map_err(|e| format!("{}: {e}", exe.display()))?;
    if !out.status.success() {
        return Err(format!("{} exited with {}", exe.display(), out.status));
    }
    let path = out_dir.join("mlx5-generated.txt");
    std::fs::write(&path, &out.stdout).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// Tier `vectors`.
pub fn run() -> Outcome {
    let root = util::root();
    let mut paths: Vec<PathBuf> = FILES.iter().map(|f| root.join(f)).collect();
    let mut extra = Outcome::default();
    match generate(&target_dir().join("mlx5-vectors")) {
        Ok(fresh) => {
            // The checked-in file must be what the generator produces now.
            let same = std::fs::read(&fresh).ok() == std::fs::read(&paths[1]).ok();
            if !same {
                println!(
                    "FAIL {} differs from the generator's output {} (regenerate and commit it)",
                    FILES[1],
                    fresh.display()
                );
            }
            extra = Outcome::check(same);
            paths.push(fresh);
        }
        Err(why) => {
            println!("FAIL generator: {why}");
            extra.failed += 1;
        }
    }
    let rep = run_files(&paths);
    println!("{}", rep.summary());
    Outcome { passed: rep.passed + extra.passed, failed: rep.failed + extra.failed, skipped: None }
}
