//! What `bench post` and `bench poll` share besides the C loops: the run's settings from the
//! environment, the per-round median, and the device they post to (an mlx5 device over an
//! in-memory BAR and heap DMA, with the test control seam: no device consumes the ring; the
//! bench plays it).

// Each benchmark uses its part of this module.
#![allow(dead_code)]

use std::sync::Arc;

use rdma_pmd::QpNum;
use rdma_pmd_hal::mem::{HeapDma, MemBar};
use rdma_pmd_mlx5::device::{Mlx5, SharedDma};
use rdma_pmd_mlx5::testing::NullControl;

/// The device both benchmarks post to.
pub type Dev = Mlx5<MemBar, SharedDma<Arc<HeapDma>>, NullControl>;

/// The median of `v` (sorted in place).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

/// The environment's `name` as a number, or `default`.
pub fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// `BENCH_ROUNDS` (default 200) and `BENCH_LAPS` (laps of the ring per round, default 16).
pub fn rounds_and_laps() -> (usize, usize) {
    (env("BENCH_ROUNDS", 200), env("BENCH_LAPS", 16).max(1))
}

/// A device over a 256 KiB in-memory BAR and heap DMA memory, and the heap.
pub fn device() -> (Arc<HeapDma>, Dev) {
    let heap = HeapDma::new();
    let dev = Mlx5::open(MemBar::new(64 * 4096), SharedDma(heap.clone()), NullControl::default())
        .expect("open");
    (heap, dev)
}

/// The null control seam records every object in a fixed table: forget the destroyed ones,
/// so that the cases' QPs never fill it.
pub fn forget_destroyed(dev: &Dev) {
    let mut ctl = dev.control();
    let gone_qps = std::mem::take(&mut ctl.destroyed_qps);
    let gone_cqs = std::mem::take(&mut ctl.destroyed_cqs);
    ctl.qps.retain(|(n, _)| !gone_qps.contains(n));
    ctl.cqs.retain(|(n, _)| !gone_cqs.contains(n));
    let live: Vec<QpNum> = ctl.qps.iter().map(|(n, _)| *n).collect();
    ctl.transitions.retain(|(n, _)| live.contains(n));
}
