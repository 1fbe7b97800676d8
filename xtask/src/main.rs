//! Project tasks: `cargo xtask <task>`.
//!
//! * `demo [--backend model|rxe|wire] [args]` — the busy-poll writev demo;
//! * `test [--tier NAME]` — every test tier, or one, ending with a `N passed, N failed` line;
//! * `setup [--tier NAME]` — only install what the tiers (or one) need from the host;
//! * `vectors FILE...` — run mlx5 conformance vector files through the project's builders;
//! * `nostd` — build and run the freestanding no_std link check;
//! * `bench post|poll|rxe` — side-by-side benchmarks;
//! * `ifc [--header PATH] [--check]` — regenerate the mlx5 command layouts from `mlx5_ifc.h`.

mod bench;
mod demo;
mod examples;
mod guests;
mod ifc;
mod pcap;
mod tiers;
mod util;
mod vm;

use std::process::ExitCode;

fn usage() -> ExitCode {
    eprintln!(
        "usage: cargo xtask <task>\n\
         \x20 demo [--backend model|rxe|wire] [ARGS]  busy-poll writev demo (default: mlx5 device model)\n\
         \x20 test [--tier NAME]                      run every test tier, or one: {}\n\
         \x20 setup [--tier NAME]                     install what the tiers (or one) need, nothing else\n\
         \x20 vectors FILE...                         run mlx5 conformance vectors\n\
         \x20 nostd                                   freestanding no_std link check\n\
         \x20 bench post|poll|rxe [--rounds N] [--sizes L]  side-by-side benchmarks (options: rxe)\n\
         \x20 bench post --threads N                 aggregate posting rate of 1 and N threads",
        tiers::names().join(", ")
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(task) = args.first() else { return usage() };
    let rest = &args[1..];
    let ok = match task.as_str() {
        "test" => tiers::run_cli(rest),
        "setup" => tiers::setup(rest),
        "demo" => demo::run(rest),
        "vectors" => tiers::vectors_cli(rest),
        "nostd" => tiers::nostd_cli(),
        "bench" => bench::run(rest),
        "ifc" => ifc::run(rest),
        _ => return usage(),
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
