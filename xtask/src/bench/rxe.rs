//! `cargo xtask bench rxe`: perftest (`ib_write_bw`, `ib_write_lat`) against our writev loop
//! (`drivers/rxe/examples/rxe_bench.rs`) and a C librdmacm control, interleaved round by round
//! in one boot of the rxe guest ([`crate::guests::rxe`]); prints the per-round medians and ratios.

use std::time::Duration;

use crate::guests::rxe::{guest, vm_unavailable};
use crate::util;
use crate::vm::GuestFile;

/// Benchmark sizes with their iteration counts for the bandwidth and the latency runs (chosen
/// so each run takes about a second under TCG).
const BENCH_SIZES: &[(usize, u64, u64)] = &[(64, 5000, 1000), (4096, 2000, 500), (65536, 500, 200)];
/// Queue depth (perftest `-t`) and signalling interval (perftest `-Q`) of the bandwidth runs.
const BENCH_DEPTH: u32 = 128;
const BENCH_SIGNAL: u32 = 16;

/// Build an example of the rxe crate in release mode; returns its path.
fn build_example(name: &str) -> Result<std::path::PathBuf, String> {
    let out = util::cargo()
        .args(["build", "--release", "-p", "rdma-pmd-rxe", "--example", name])
        .args(["--message-format=json-render-diagnostics"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("building example {name} failed"));
    }
    util::executable_of(&String::from_utf8_lossy(&out.stdout), name)
        .ok_or_else(|| format!("cargo reported no executable for {name}"))
}

/// Rounds of every measurement by default (`--rounds` changes it); rounds interleave perftest and
/// ours, and the figures printed are per-round medians (TCG on a shared host drifts by factors
/// between runs, and whole runs of either program land in a slow or a fast mode).
const BENCH_ROUNDS: u32 = 7;

/// What `bench rxe` runs: the rounds and which of [`BENCH_SIZES`].
struct BenchPlan {
    rounds: u32,
    sizes: Vec<(usize, u64, u64)>,
}

impl BenchPlan {
    /// `--rounds N` and `--sizes 64,4096` (a subset of [`BENCH_SIZES`]).
    fn parse(args: &[String]) -> Result<BenchPlan, String> {
        let mut plan = BenchPlan { rounds: BENCH_ROUNDS, sizes: BENCH_SIZES.to_vec() };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let val = it.next().ok_or_else(|| format!("{a} needs a value"))?;
            match a.as_str() {
                "--rounds" => {
                    plan.rounds = val
                        .parse()
                        .ok()
                        .filter(|r| (1..=99).contains(r))
                        .ok_or_else(|| format!("--rounds {val}: want 1..=99"))?
                }
                "--sizes" => {
                    plan.sizes = val
                        .split(',')
                        .map(|v| {
                            BENCH_SIZES.iter().find(|s| v.parse() == Ok(s.0)).copied().ok_or_else(
                                || format!("--sizes: {v} is not one of 64, 4096, 65536"),
                            )
                        })
                        .collect::<Result<_, _>>()?
                }
                other => {
                    return Err(format!("unknown argument {other} (--rounds N, --sizes LIST)"))
                }
            }
        }
        Ok(plan)
    }
}

/// The guest script: per round and size, a bandwidth pair then a latency pair, perftest and ours
/// (perftest: server in the background, client against 10.0.0.1, one rerun if it printed no
/// usable row). Odd rounds run perftest first, even rounds ours, so that neither always runs
/// right after the other. After each pair, the control: the same loop written as an ordinary
/// librdmacm program (`rxe_bench bw|lat --impl c`).
fn bench_script(plan: &BenchPlan) -> String {
    let mut s = String::new();
    for round in 1..=plan.rounds {
        for &(size, bw_n, lat_n) in &plan.sizes {
            let bw = format!(
                "ib_write_bw -d rxe0 -x 1 -F -s {size} -n {bw_n} -t {BENCH_DEPTH} -Q {BENCH_SIGNAL}"
            );
            let lat = format!("ib_write_lat -d rxe0 -x 1 -F -s {size} -n {lat_n}");
            let ours_bw = format!(
                "/t/rxe-bench bw --size {size} --iters {bw_n} --depth {BENCH_DEPTH} --signal {BENCH_SIGNAL} --sges 1 --port 7600"
            );
            let ours_lat =
                format!("/t/rxe-bench lat --size {size} --iters {lat_n} --inline 0 --port 7601");
            let c_lat =
                format!("/t/rxe-bench lat --impl c --size {size} --iters {lat_n} --port 7602");
            let c_bw = format!(
                "/t/rxe-bench bw --impl c --size {size} --iters {bw_n} --depth {BENCH_DEPTH} --signal {BENCH_SIGNAL} --port 7603"
            );
            for (tag, cmd, col, ours_tag, ours, control_tag, control) in [
                ("perftest-bw", &bw, 4, "ours-bw", &ours_bw, "c-bw", &c_bw),
                ("perftest-lat", &lat, 6, "ours-lat", &ours_lat, "c-lat", &c_lat),
            ] {
                let theirs = format!(
                    "for attempt in 1 2; do\n\
                     \x20 echo \"XTASK-BENCH {tag} {size} r{round} attempt $attempt\"\n\
                     \x20 timeout -s KILL 120 {cmd} >/tmp/server.txt 2>&1 &\n\
                     \x20 sleep 2\n\
                     \x20 out=$(timeout -s KILL 120 {cmd} 10.0.0.1 2>&1); echo \"$out\"; wait\n\
                     \x20 echo \"$out\" | awk '$1 == {size} && ${col} + 0 > 0 && ${col} != \"inf\" {{ok = 1}} END {{exit !ok}}' && break\n\
                     done\n"
                );
                let ours = format!(
                    "echo \"XTASK-BENCH {ours_tag} {size} r{round}\"\n\
                     timeout -s KILL 120 {ours}\n"
                );
                if round % 2 == 1 {
                    s.push_str(&theirs);
                    s.push_str(&ours);
                } else {
                    s.push_str(&ours);
                    s.push_str(&theirs);
                }
                s.push_str(&format!(
                    "echo \"XTASK-BENCH {control_tag} {size} r{round}\"\n\
                     timeout -s KILL 120 {control}\n"
                ));
            }
        }
    }
    s
}

/// The median of the values present.
fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    Some(v[v.len() / 2])
}

/// The text after the last `XTASK-BENCH <tag> <size> r<round>` marker, up to the next marker.
fn section<'a>(out: &'a str, tag: &str, size: usize, round: u32) -> &'a str {
    let key = format!("XTASK-BENCH {tag} {size} r{round}");
    let Some(start) = out.rfind(&key) else { return "" };
    let rest = &out[start + key.len()..];
    let rest = rest.find('\n').map_or("", |i| &rest[i + 1..]);
    &rest[..rest.find("XTASK-BENCH").unwrap_or(rest.len())]
}

/// Column `col` (0-based) of perftest's result row for `size`.
fn perftest_value(text: &str, size: usize, col: usize) -> Option<f64> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.first().and_then(|x| x.parse::<usize>().ok()) == Some(size) && w.len() > col)
        .and_then(|w| w[col].parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v > 0.0)
}

/// `key=value` from our bench line (or the control's, which starts with `c `).
fn ours_value(text: &str, key: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("ours ") || l.starts_with("c "))?;
    line.split_whitespace().find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

/// `cargo xtask bench rxe`: perftest and our writev loop, same sizes, depth and iterations,
/// in one guest boot.
pub fn run(args: &[String]) -> bool {
    let plan = match BenchPlan::parse(args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("xtask: bench rxe: {e}");
            return false;
        }
    };
    if let Some(why) = vm_unavailable() {
        eprintln!("xtask: bench rxe: {why}");
        return false;
    }
    let bin = match build_example("rxe_bench") {
        Ok(b) => b,
        Err(e) => {
            eprintln!("xtask: bench rxe: {e}");
            return false;
        }
    };
    let g = guest(vec![GuestFile::dynamic(&bin, "/t/rxe-bench")], bench_script(&plan));
    // The limit grows with the work asked for: a fixed allowance for the boot, and per round of
    // all three sizes several times what one takes under TCG (docs/PERF.md has the figure), for
    // a slower or busier host.
    let limit = 300 + 150 * u64::from(plan.rounds) * plan.sizes.len() as u64 / 3;
    let s = match g.boot(Duration::from_secs(limit)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("xtask: bench rxe: {e}");
            return false;
        }
    };
    let out = s.script_output();
    println!(
        "\nrxe bench, {:?} guest, one boot ({:.0?}); MB = 2^20 bytes; latency = half round trip",
        s.accel, s.elapsed
    );
    println!(
        "{:>6} | {:>12} {:>9} | {:>12} {:>9} | {:>16} {:>10} | {:>16} {:>10}",
        "size",
        "ib_write_bw",
        "MB/s",
        "ours msg/s",
        "MB/s",
        "ib_write_lat typ",
        "avg us",
        "ours lat typ",
        "avg us"
    );
    let mut ok = true;
    let mut ratios = Vec::new();
    let mut notes = Vec::new();
    let mut controls = Vec::new();
    for &(size, _, _) in &plan.sizes {
        // Per round: perftest msg/s, MB/s, typical and average latency; then ours.
        let mut cols: [Vec<f64>; 8] = Default::default();
        let mut rate_ratios = Vec::new();
        let mut lat_ratios = Vec::new();
        let (mut c_lat, mut c_ratios) = (Vec::new(), Vec::new());
        let (mut c_bw, mut c_bw_ratios) = (Vec::new(), Vec::new());
        // Ours against the control, round by round: [msg rate, latency].
        let mut ours_c: [Vec<f64>; 2] = Default::default();
        for round in 1..=plan.rounds {
            let pbw = section(out, "perftest-bw", size, round);
            let plat = section(out, "perftest-lat", size, round);
            let obw = section(out, "ours-bw", size, round);
            let olat = section(out, "ours-lat", size, round);
            let vals = [
                perftest_value(pbw, size, 4).map(|m| m * 1e6),
                perftest_value(pbw, size, 3),
                perftest_value(plat, size, 4),
                perftest_value(plat, size, 5),
                ours_value(obw, "msg_per_s"),
                ours_value(obw, "mb_per_s"),
                ours_value(olat, "t_typical_us"),
                ours_value(olat, "t_avg_us"),
            ];
            for (c, v) in cols.iter_mut().zip(vals) {
                c.extend(v);
            }
            if let (Some(o), Some(p)) = (vals[4], vals[0]) {
                rate_ratios.push(o / p);
            }
            if let (Some(o), Some(p)) = (vals[6], vals[2]) {
                lat_ratios.push(o / p);
            }
            let c = ours_value(section(out, "c-lat", size, round), "t_typical_us");
            c_lat.extend(c);
            if let (Some(c), Some(p)) = (c, vals[2]) {
                c_ratios.push(c / p);
            }
            let c = ours_value(section(out, "c-bw", size, round), "msg_per_s");
            c_bw.extend(c);
            if let (Some(c), Some(p)) = (c, vals[0]) {
                c_bw_ratios.push(c / p);
            }
            let lat = ours_value(section(out, "c-lat", size, round), "t_typical_us");
            for (k, o, c) in [(0, vals[4], c), (1, vals[6], lat)] {
                if let (Some(o), Some(c)) = (o, c) {
                    ours_c[k].push(o / c);
                }
            }
        }
        let m: Vec<Option<f64>> = cols.iter().map(|c| median(c.clone())).collect();
        let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
        println!(
            "{size:>6} | {:>12} {:>9} | {:>12} {:>9} | {:>16} {:>10} | {:>16} {:>10}",
            f(m[0]),
            f(m[1]),
            f(m[4]),
            f(m[5]),
            f(m[2]),
            f(m[3]),
            f(m[6]),
            f(m[7])
        );
        // Each round's pair ran back to back, so the ratio within a round cancels the drift
        // between rounds, and their median is the figure: under TCG whole runs of either
        // program land in a slow or a fast mode, and the two medians taken apart can each land
        // in a different one (one boot gave a ratio of medians of 2.11 where the per-round
        // ratios had a median of 1.09). The ratio of the medians is printed beside it.
        let spread = |v: &[f64], whole: f64| {
            let lo = v.iter().cloned().fold(f64::INFINITY, f64::min);
            let hi = v.iter().cloned().fold(0.0, f64::max);
            format!(
                "(per-round ratios {lo:.2}..{hi:.2}, {} rounds; ratio of the medians {whole:.2})",
                v.len()
            )
        };
        // The controls are not targets: they show how far two equivalent loops drift apart.
        for (what, unit, c, p, per_round) in [
            ("msgrate c/ib_write_bw", "msg/s", &c_bw, m[0], &c_bw_ratios),
            ("latency c/ib_write_lat", "us typical", &c_lat, m[2], &c_ratios),
        ] {
            match (median(c.clone()), p, median(per_round.clone())) {
                (Some(c), Some(p), Some(r)) => controls.push(format!(
                    "control {what} {size}: {r:.3}  (C rdma_post_write loop: {c:.2} {unit}; {})",
                    spread(per_round, c / p)
                )),
                _ => controls.push(format!("control {what} {size}: missing")),
            }
        }
        for (what, v) in [("msgrate", &ours_c[0]), ("latency", &ours_c[1])] {
            if let Some(r) = median(v.clone()) {
                controls.push(format!(
                    "control {what} ours/c {size}: {r:.3}  (median of {} per-round ratios)",
                    v.len()
                ));
            }
        }
        for (what, ours, theirs, per_round) in [
            ("msgrate ours/ib_write_bw", m[4], m[0], &rate_ratios),
            ("latency ours/ib_write_lat", m[6], m[2], &lat_ratios),
        ] {
            match (ours, theirs, median(per_round.clone())) {
                (Some(o), Some(p), Some(r)) => {
                    notes.push(format!("  {what} {size}: {}", spread(per_round, o / p)));
                    ratios.push(format!("ratio {what} {size}: {r:.3}"))
                }
                _ => {
                    ok = false;
                    ratios.push(format!("ratio {what} {size}: missing (see the serial log)"));
                }
            }
        }
    }
    println!(
        "table: medians over {} interleaved rounds; ratios: medians of the per-round ratios",
        plan.rounds
    );
    for n in notes {
        println!("{n}");
    }
    for c in controls {
        println!("{c}");
    }
    for r in ratios {
        println!("{r}");
    }
    ok && s.exit == Some(0)
}
