//! Both benchmarks run to the end over every case, with one short round: what they check
//! beside timing (ours, the C loop and the floor store the same WQE bytes; the reaped
//! completions match) runs, and no case can exhaust the test device's tables. Their timings
//! are printed, never judged here.

use std::process::Command;

/// Run `bin` with one round of one lap per case; its stdout.
fn run(bin: &str) -> String {
    let out = Command::new(bin)
        .env("BENCH_ROUNDS", "1")
        .env("BENCH_LAPS", "1")
        .env_remove("BENCH_CASE")
        .output()
        .expect("start the benchmark");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{bin} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn bench_post_runs_every_case() {
    let out = run(env!("CARGO_BIN_EXE_bench_post"));
    let ratios = out.lines().filter(|l| l.starts_with("ratio ours/c ")).count();
    let summary = out.lines().find(|l| l.starts_with("floor fastest")).expect("summary line");
    let cases: usize = summary
        .rsplit(" of ")
        .next()
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("case count in the summary");
    assert!(cases >= 14, "{summary}");
    assert_eq!(ratios, cases, "{out}");
}

#[test]
fn bench_poll_runs_every_case() {
    let out = run(env!("CARGO_BIN_EXE_bench_poll"));
    for case in ["signal16", "signal1", "error-flush"] {
        assert!(out.contains(&format!("ratio ours/c {case}: ")), "{case} missing:\n{out}");
    }
}
