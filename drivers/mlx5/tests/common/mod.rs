//! Shared scaffolding of the end-to-end tests: the driver opened over the software mlx5 model.
//!
//! Every device is brought up the way real hardware requires: the model's firmware is started,
//! the driver runs the HCA bring-up over the command interface (`Hca::bring_up`), and every
//! resource (UAR, PD, MKEY, CQ, QP, QP transitions) is created with firmware commands through
//! `FwControl`. Nothing reaches into the model to create a queue.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_pmd::{Completion, SendQueue};
use rdma_pmd_hal::mem::{HeapDma, MemBar};
use rdma_pmd_hal::{Mmio, StdClock};
use rdma_pmd_mlx5::control::bringup::{bitmap_words, Hca, HcaConfig, PagePool};
use rdma_pmd_mlx5::control::fw::FwControl;
use rdma_pmd_mlx5::control::{Access, Control};
use rdma_pmd_mlx5::{Mlx5, Qp, QpConfig, Region, SharedDma};
use rdma_pmd_mlx5_model::fw::{Firmware, FwConfig};
use rdma_pmd_mlx5_model::Model;

pub mod wire;
pub mod wire_cm;

/// How long any wait for the model may take before a test fails.
pub const WAIT: Duration = Duration::from_secs(20);

/// The driver's device type over the model: resources come from firmware commands.
pub type Dev<M = MemBar> = Mlx5<M, SharedDma<Arc<HeapDma>>, FwControl<'static, 'static>>;

/// Firmware pages each test device may lend.
const POOL_PAGES: usize = 256;

/// Start `model`'s firmware and bring its HCA up over the command interface. The HCA and what
/// it borrows live for the rest of the test process (a test's device outlives nothing else).
fn bring_up(model: &Model) -> (MemBar, &'static mut Hca<'static>) {
    let fw: &'static Firmware =
        Box::leak(Box::new(Firmware::start(model, FwConfig::default()).expect("firmware")));
    let bar: &'static MemBar = Box::leak(Box::new(fw.bar()));
    let dma: &'static Arc<HeapDma> = Box::leak(Box::new(model.dma()));
    let clock: &'static StdClock = Box::leak(Box::new(StdClock::default()));
    let bits: &'static mut [u64] =
        Box::leak(vec![0u64; bitmap_words(POOL_PAGES)].into_boxed_slice());
    let pool = PagePool::new(bits, POOL_PAGES);
    let hca = Hca::bring_up(bar, &**dma, clock, pool, HcaConfig::default()).expect("bring-up");
    (bar.clone(), Box::leak(Box::new(hca)))
}

/// Open the driver on `model`.
pub fn open(model: &Model) -> Dev {
    open_with(model, |bar| bar)
}

/// Open the driver on `model` through a wrapped BAR (the bring-up uses the plain one).
pub fn open_with<M: Mmio>(model: &Model, wrap: impl FnOnce(MemBar) -> M) -> Dev<M> {
    let (bar, hca) = bring_up(model);
    Mlx5::open(wrap(bar), SharedDma(model.dma()), FwControl::new(hca)).expect("open")
}

/// Access of a region that peers write into.
pub const TARGET: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE);

/// A QP of the tests' device type.
pub type TQp<'r, M, C, const SQ: usize> = Qp<'r, M, SharedDma<Arc<HeapDma>>, C, SQ, 16>;

/// Two QPs of `dev` connected to each other in loopback.
pub fn pair<'r, M: Mmio, C: Control, const SQ: usize>(
    dev: &'r Mlx5<M, SharedDma<Arc<HeapDma>>, C>,
    cfg: &QpConfig,
) -> (TQp<'r, M, C, SQ>, TQp<'r, M, C, SQ>) {
    let mut a = dev.create_qp::<SQ, 16>(cfg).expect("create qp a");
    let mut b = dev.create_qp::<SQ, 16>(cfg).expect("create qp b");
    let (na, nb) = (a.qp_num(), b.qp_num());
    a.connect_loopback(nb).expect("connect a");
    b.connect_loopback(na).expect("connect b");
    (a, b)
}

/// Poll until `n` completions arrived (failing after [`WAIT`]), then check no more come.
pub fn wait<'r, Q: SendQueue<'r>>(q: &mut Q, n: usize) -> Vec<Completion> {
    let mut got = Vec::with_capacity(n);
    let mut out = [Completion::default(); 16];
    let start = Instant::now();
    while got.len() < n {
        let k = q.poll(&mut out).expect("poll");
        got.extend_from_slice(&out[..k]);
        assert!(start.elapsed() < WAIT, "only {} of {n} completions: {got:?}", got.len());
        if k == 0 {
            std::thread::yield_now();
        }
    }
    assert_eq!(got.len(), n, "more completions than expected: {got:?}");
    got
}

/// Poll for a while and check nothing more arrives.
pub fn quiet<'r, Q: SendQueue<'r>>(q: &mut Q) {
    let mut out = [Completion::default(); 4];
    for _ in 0..200 {
        assert_eq!(q.poll(&mut out).expect("poll"), 0, "unexpected completion: {:?}", out[0]);
        std::thread::yield_now();
    }
}

/// A deterministic byte pattern.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The bytes of a region.
pub fn bytes<M: Mmio, C: Control>(
    r: &Region<'_, M, SharedDma<Arc<HeapDma>>, C>,
    off: usize,
    len: usize,
) -> Vec<u8> {
    let mut v = vec![0u8; len];
    r.read(off, &mut v).expect("read");
    v
}

/// The model found nothing wrong with what the driver wrote.
pub fn clean(model: &Model) {
    let v = model.violations();
    assert!(v.is_empty(), "model validation log: {v:#?}");
    assert_eq!(model.counters().validation_failures, 0);
}
