//! The guests that the VM tiers, the demo and the benchmarks boot (each a [`crate::vm::Guest`]),
//! and running a test binary in one: every ignored test one at a time, each under a time limit.

pub mod rxe;
pub mod wire;

use crate::util;

/// Seconds one test may take in the guest before it is killed and counted as failed.
const PER_TEST_S: u32 = 90;

/// Shell that runs every ignored test of `bin` one at a time (soft-RoCE drops completions
/// when several QPs drive it at once), each under a time limit.
pub fn per_test_script(bin: &str, extra_args: &str) -> String {
    // XTASK_RXE_TESTS (space-separated names) narrows the run, for debugging.
    let list = match std::env::var("XTASK_RXE_TESTS") {
        Ok(names) if !names.trim().is_empty() => names,
        _ => format!("$({bin} --ignored --list 2>/dev/null | sed -n 's/: test$//p')"),
    };
    format!(
        "for t in {list}; do\n\
         \x20 timeout -s KILL {PER_TEST_S} {bin} --ignored --exact \"$t\" --test-threads=1 --nocapture {extra_args}\n\
         \x20 rc=$?\n\
         \x20 [ $rc -ge 124 ] && echo \"test $t ... TIMEOUT (killed after {PER_TEST_S} s)\"\n\
         done\n"
    )
}

/// Pass and fail counts: libtest's `test result:` lines (one per test run) plus our timeout
/// lines (a killed test prints no result).
pub fn count(output: &str) -> (u32, u32) {
    let (passed, failed) = util::count_libtest(output);
    let timeouts =
        output.lines().filter(|l| l.starts_with("test ") && l.contains("... TIMEOUT")).count();
    (passed, failed + timeouts as u32)
}
