//! Soak: millions of RDMA WRITEs through the model, every destination byte verified and every
//! completion accounted for (none lost, none duplicated, in order).
//!
//! `RDMA_PMD_SOAK=<writes>` sets the count. Without it: 10^7 in release builds (about a minute
//! on two cores), 2·10^5 in debug builds.

mod common;

use common::*;
use rdma_pmd::{Completion, Post, SendFlags, SendQueue, WcStatus};
use rdma_pmd_mlx5::QpConfig;
use rdma_pmd_mlx5_model::Model;
use std::time::Instant;

const SRC_LEN: usize = 1 << 20;
const SLOTS: usize = 4096;
const SLOT: usize = 64;
/// Requests per doorbell; the last of each batch is signalled.
const BATCH: u64 = 64;
/// Batches in flight at once.
const WINDOW: usize = 8;

/// Where write `k` reads from: one or two pieces of the source, `(offset, len)`.
fn pieces(k: u64) -> [(usize, usize); 2] {
    let len = 8 + (k % 57) as usize;
    let off = (k.wrapping_mul(131) % (SRC_LEN as u64 - 4096)) as usize;
    if k % 7 == 3 {
        let a = len / 2;
        [(off, a), (off + 1000 + (k % 300) as usize, len - a)]
    } else {
        [(off, len), (0, 0)]
    }
}

#[test]
fn ten_million_writes_verified() {
    let total: u64 = std::env::var("RDMA_PMD_SOAK")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if cfg!(debug_assertions) { 200_000 } else { 10_000_000 });
    let total = total.div_ceil(BATCH) * BATCH;
    let model = Model::new();
    let dev = open(&model);
    let src = dev.reg(SRC_LEN, TARGET).unwrap();
    let dst = dev.reg(SLOTS * SLOT, TARGET).unwrap();
    let data = pattern(0x50a4, SRC_LEN);
    src.write(0, &data).unwrap();
    let (mut a, _b) = pair::<_, _, 1024>(&dev, &QpConfig::default());
    let start = Instant::now();

    let mut posted = 0u64;
    let mut verified = 0u64;
    let mut completions = 0u64;
    let mut out = [Completion::default(); 16];
    let mut got = [0u8; SLOT];
    let mut expect = Vec::with_capacity(SLOT);
    while verified < total {
        // Fill the window.
        while posted < total && posted - verified < WINDOW as u64 * BATCH {
            let mut b = a.batch();
            for k in posted..posted + BATCH {
                let [(o1, l1), (o2, l2)] = pieces(k);
                let flags =
                    if k % BATCH == BATCH - 1 { SendFlags::SIGNALED } else { SendFlags::empty() };
                let remote = dst.remote((k as usize % SLOTS) * SLOT);
                if l2 == 0 {
                    b.post_writev(k, &[src.slice(o1, l1).unwrap()], flags, remote).unwrap();
                } else {
                    let sgl = [src.slice(o1, l1).unwrap(), src.slice(o2, l2).unwrap()];
                    b.post_writev(k, &sgl, flags, remote).unwrap();
                }
            }
            assert_eq!(b.commit(), BATCH as u32);
            posted += BATCH;
        }
        // Reap, then verify each completed batch before its slots can be written again.
        let n = a.poll(&mut out).unwrap();
        for c in &out[..n] {
            assert_eq!(c.status, WcStatus::Success, "{c:?}");
            assert_eq!(
                c.wr_id,
                verified + BATCH - 1,
                "completions in order, none lost or repeated"
            );
            completions += 1;
            for k in verified..verified + BATCH {
                expect.clear();
                for (o, l) in pieces(k) {
                    expect.extend_from_slice(&data[o..o + l]);
                }
                let g = &mut got[..expect.len()];
                dst.read((k as usize % SLOTS) * SLOT, g).unwrap();
                assert!(g == expect.as_slice(), "write {k}: {g:?} != {expect:?}");
            }
            verified += BATCH;
        }
        if n == 0 {
            assert!(start.elapsed() < WAIT * 30, "stalled at {verified} of {total}");
            std::hint::spin_loop();
        }
    }
    assert_eq!(completions, total / BATCH);
    assert_eq!((a.outstanding(), src.usage().in_flight()), (0, 0));
    quiet(&mut a);
    let cnt = model.counters();
    assert_eq!((cnt.wqes_executed, cnt.req_cqes, cnt.error_cqes), (total, total / BATCH, 0));
    clean(&model);
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "soak: {total} writes verified in {secs:.1} s ({:.2} M writes/s)",
        total as f64 / secs / 1e6
    );
}
