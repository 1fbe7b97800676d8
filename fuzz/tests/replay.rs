//! Replays every committed input on stable, uninstrumented: the seed corpus
//! (`corpus/<target>/`) and the crashes found and fixed (`regressions/<target>/`). A file that
//! panics fails the test with its path, so a crash found by the fuzzer becomes a permanent
//! test by copying its input into `regressions/<target>/`.
//!
//! `FUZZ_WRITE_SEEDS=1 cargo test --test replay seeds_are_committed` rewrites the seed
//! corpus from [`rdma_pmd_fuzz::seeds`] (the real messages it is built from).

use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use rdma_pmd_fuzz::{seeds, TARGETS};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<PathBuf> = rd.flatten().map(|e| e.path()).filter(|p| p.is_file()).collect();
    v.sort();
    v
}

#[test]
fn corpus_and_regressions_replay_without_a_panic() {
    let mut ran = 0;
    let mut failed = Vec::new();
    for (name, body) in TARGETS {
        for kind in ["corpus", "regressions"] {
            for f in files(&root().join(kind).join(name)) {
                let data = fs::read(&f).unwrap();
                ran += 1;
                if catch_unwind(AssertUnwindSafe(|| body(&data))).is_err() {
                    failed.push(f.display().to_string());
                }
            }
        }
    }
    println!("replayed {ran} inputs");
    assert!(failed.is_empty(), "inputs that panic: {failed:#?}");
    assert!(ran >= TARGETS.len(), "no corpus found under {}", root().display());
}

#[test]
fn seeds_are_committed() {
    let write = std::env::var_os("FUZZ_WRITE_SEEDS").is_some();
    for (name, _) in TARGETS {
        let dir = root().join("corpus").join(name);
        for (file, bytes) in seeds(name) {
            let p = dir.join(format!("seed-{file}"));
            if write {
                fs::create_dir_all(&dir).unwrap();
                fs::write(&p, &bytes).unwrap();
            } else {
                let got = fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                assert_eq!(got, bytes, "{} differs from the seed it is built from", p.display());
            }
        }
    }
}

/// Each seed reaches the part of the driver it was written for (so that the corpus keeps
/// meaning what it says as the code changes).
#[test]
fn seeds_reach_what_they_were_written_for() {
    let expect: &[(&str, &str, &[&str])] = &[
        ("cm", "req-accept-rtu-dreq", &["connect-request", "established", "disconnected"]),
        ("cm", "connect-rep", &["established"]),
        ("cm", "req-no-listener", &[]),
        ("cm", "req-reject", &["connect-request"]),
        ("eth", "rx-request", &["rx-frame", "replied"]),
        ("eth", "resolve-reply", &["request-sent", "rx-frame", "learned", "lookup-hit"]),
        ("eth", "gratuitous-and-request", &["replied"]),
        ("eth", "tx-done", &["tx-sent"]),
        ("cqe", "rc-write-and-recv", &["send-ok", "recv-ok"]),
        ("cqe", "rc-error-cqe", &["send-error"]),
        ("cqe", "gsi-req", &["gsi-connect-request"]),
        ("fw", "clean", &["bringup-ok", "pages-lent", "device-open", "qp-created", "teardown-ok"]),
        (
            "fw",
            "page-request-port-change",
            &["bringup-ok", "page-request", "port-change", "teardown-ok"],
        ),
        ("fw", "pre-issi", &["bringup-ok"]),
        ("fw", "token-mismatch", &["bringup-refused"]),
    ];
    let mut checked = 0;
    for (name, body) in TARGETS {
        for (file, bytes) in seeds(name) {
            let got = body(&bytes);
            let want = expect.iter().find(|e| e.0 == *name && e.1 == file);
            let want = want.unwrap_or_else(|| panic!("no expectation for seed {name}/{file}"));
            for m in want.2 {
                assert!(got.contains(m), "seed {name}/{file} did not reach {m:?}: {got:?}");
            }
            checked += 1;
        }
    }
    assert_eq!(checked, expect.len());
}

/// `FUZZ_TRACE_DIR=DIR FUZZ_TRACE_TARGET=cm cargo test --test replay milestones -- --ignored
/// --nocapture`: the milestones a corpus (a fuzz run's, say) reaches, with how many inputs
/// reach each; a quick look at how deep the fuzzer got.
#[test]
#[ignore]
fn milestones() {
    let dir = PathBuf::from(std::env::var("FUZZ_TRACE_DIR").expect("FUZZ_TRACE_DIR"));
    let target = std::env::var("FUZZ_TRACE_TARGET").expect("FUZZ_TRACE_TARGET");
    let body = TARGETS.iter().find(|t| t.0 == target).expect("a target").1;
    let mut counts = std::collections::BTreeMap::new();
    let files = files(&dir);
    for f in &files {
        for m in body(&fs::read(f).unwrap()) {
            *counts.entry(m).or_insert(0) += 1;
        }
    }
    println!("{} inputs: {counts:#?}", files.len());
}
