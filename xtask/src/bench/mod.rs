//! `cargo xtask bench post|poll|rxe`: side-by-side benchmarks. `post` and `poll` are binaries
//! of the examples package (ours against a C loop doing what rdma-core does); `rxe` is perftest
//! against our writev loop in the rxe guest ([`rxe`]).

mod rxe;

use crate::examples;

/// `cargo xtask bench post|poll|rxe`.
pub fn run(args: &[String]) -> bool {
    match args.first().map(String::as_str) {
        Some("post") => bench_post(&args[1..]),
        Some("poll") => bench_poll(&args[1..]),
        Some("rxe") => rxe::run(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask bench post [--threads N] | bench poll | bench rxe \
                 [--rounds N] [--sizes 64,4096,65536]"
            );
            false
        }
    }
}

/// `cargo xtask bench post`.
fn bench_post(args: &[String]) -> bool {
    examples::run_example("bench_post", args)
}

/// `cargo xtask bench poll`.
fn bench_poll(args: &[String]) -> bool {
    examples::run_example("bench_poll", args)
}
