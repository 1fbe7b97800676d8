//! `cargo xtask bench post`: the cost of posting one WQE, side by side in one process.
//!
//! * **ours**: the mlx5 driver's writev path (`Qp` through the core `Post` API) into an
//!   in-memory BAR and heap DMA memory, with a control seam that only hands out numbers;
//!   beside it the same through raw `Sge`s (no region accounting), so the cost of the safe
//!   API's accounting shows;
//! * **c**: rdma-core's provider loop (`_mlx5_post_send` and `post_send_db`, written for RC
//!   RDMA WRITE over `mlx5dv.h`; `c/post_mlx5dv.c`), compiled as Debian compiles rdma-core;
//! * **floor**: the cheapest code that stores the same WQE bytes, doorbell record and doorbell
//!   (whole-segment stores, no per-word arithmetic; `c_post_floor`).
//!
//! Before timing, one lap of each from a fresh ring checks that all three leave the same bytes
//! in the ring. A round runs each variant for `BENCH_LAPS` laps of the ring (timed lap by lap);
//! between two laps the device is played, untimed: one requester CQE for the last WQE, which
//! the variant's own poll loop retires (the floor keeps no state to retire). The variants take
//! turns going first, round by round, so machine noise hits them alike; the figure per case is
//! the median of the rounds' ns/WQE. The floor must be the fastest variant of every case: the
//! bench says loudly where it is not (it never fails on timing).

mod bench_util;
mod c_mlx5;

use std::hint::black_box;
use std::time::{Duration, Instant};

use c_mlx5::{CQp, IbvWc};
use rdma_pmd::{Completion, LocalBuf, Post, QpNum, RemoteBuf, SendFlags, SendQueue, Sge};
use rdma_pmd_hal::mem::HeapDma;
use rdma_pmd_mlx5::control::Access;
use rdma_pmd_mlx5::testing::CqWriter;

const SQ: usize = 1024;

struct Case {
    name: &'static str,
    nsge: usize,
    batch: u32,
    bf: bool,
    /// Post raw `Sge`s through the `unsafe` form (no region accounting): shows what the safe
    /// API's in-flight accounting costs.
    raw: bool,
}

const CASES: &[Case] = &[
    Case { name: "1sge-batch32", nsge: 1, batch: 32, bf: false, raw: false },
    Case { name: "1sge-batch32-raw", nsge: 1, batch: 32, bf: false, raw: true },
    Case { name: "1sge-single-bf", nsge: 1, batch: 1, bf: true, raw: false },
    Case { name: "4sge-batch32", nsge: 4, batch: 32, bf: false, raw: false },
    Case { name: "16sge-batch32", nsge: 16, batch: 32, bf: false, raw: false },
];

fn wqebbs(nsge: usize) -> usize {
    (2 + nsge).div_ceil(4)
}

fn main() {
    let (rounds, laps) = bench_util::rounds_and_laps();
    let (heap, dev) = bench_util::device();
    let src = dev.reg(16 * 64, Access::LOCAL_WRITE).expect("register source");
    let dst = dev.reg(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE).expect("register dest");
    let remote = dst.remote(0);

    println!(
        "posting cost per WQE: median of {rounds} rounds of {laps} laps each, ring of {SQ} WQE \
         basic blocks"
    );
    println!("{:<16} {:>10} {:>10} {:>10}", "case", "ours ns", "c ns", "floor ns");
    let mut ratios = Vec::new();
    let mut honest = 0;
    let mut losers = Vec::new();
    // BENCH_CASE=name runs one case only (for profilers).
    let only = std::env::var("BENCH_CASE").ok();
    for case in CASES.iter().filter(|c| only.as_deref().is_none_or(|o| o == c.name)) {
        let bufs: Vec<LocalBuf<'_>> =
            (0..case.nsge).map(|k| src.slice(k * 64, 64).expect("slice")).collect();
        let sges: Vec<Sge> = bufs.iter().map(|b| b.sge()).collect();
        // A fresh QP per case, so that every variant starts its first lap at block 0.
        let mut qp = dev.create_qp::<SQ, 16>(&Default::default()).expect("create qp");
        qp.connect_loopback(QpNum(0x124)).expect("connect");
        let qpn = qp.qp_num();
        let (mut scq, ours_ring) = {
            let ctl = dev.control();
            let p = ctl.qp(qpn).expect("QP recorded");
            let sq_off = (1u64 << p.log_rq_size.unwrap_or(0)) << p.log_rq_stride;
            (CqWriter::new(ctl.cq(p.send_cq).expect("send CQ recorded")), p.buf.add(sq_off))
        };
        let mut cq = CQp::new(&heap, SQ, qpn);
        let per_lap = (SQ / wqebbs(case.nsge) - case.batch as usize) / case.batch as usize
            * case.batch as usize;
        let lap_bytes = per_lap * wqebbs(case.nsge) * 64;
        let mut wc = [Completion::default(); 64];
        let mut cwc = [IbvWc::default(); 32];
        let batch = case.batch as usize;
        let mut wr_id = 0u64;

        let wqe_blocks = wqebbs(case.nsge) as u16;
        // One timed lap of ours.
        macro_rules! lap_ours {
            () => {{
                let t = Instant::now();
                if case.raw {
                    post_lap::<_, true>(&mut qp, &bufs, &sges, per_lap, batch, remote, wr_id);
                } else {
                    post_lap::<_, false>(&mut qp, &bufs, &sges, per_lap, batch, remote, wr_id);
                }
                let e = t.elapsed();
                wr_id += per_lap as u64;
                e
            }};
        }
        // The device for ours, untimed: one CQE for the last WQE retires the lap.
        macro_rules! retire_ours {
            () => {{
                let last = qp.sq_pi().wrapping_sub(wqe_blocks);
                retire(&mut qp, &mut scq, &heap, &mut wc, last, per_lap / batch);
            }};
        }
        let lap_c = |cq: &mut CQp, wr_id: &mut u64| {
            let t = Instant::now();
            cq.post(per_lap, case.batch, &sges, remote, *wr_id);
            let e = t.elapsed();
            *wr_id += per_lap as u64;
            e
        };
        // The device for the C loop, untimed, and its own poll loop.
        let mut retire_c = |cq: &mut CQp| {
            let last = cq.cur_post().wrapping_sub(u32::from(wqe_blocks)) as u16;
            cq.complete(last, None);
            let r = cq.reap(1, &mut cwc);
            assert_eq!((r.n, r.errors), (1, 0), "the C loop reaps its CQE");
        };
        let lap_floor = |cq: &mut CQp| {
            let t = Instant::now();
            cq.floor(per_lap, case.batch, &sges, remote, case.bf);
            t.elapsed()
        };

        // Same bytes: one lap of each from block 0 over a poisoned ring.
        poison(&heap, ours_ring, SQ * 64);
        lap_ours!();
        let mut ours_bytes = vec![0u8; lap_bytes];
        assert!(heap.read(ours_ring, &mut ours_bytes), "our ring readable");
        retire_ours!();
        cq.poison_ring();
        lap_c(&mut cq, &mut wr_id);
        let c_bytes = cq.ring_bytes()[..lap_bytes].to_vec();
        retire_c(&mut cq);
        cq.poison_ring();
        lap_floor(&mut cq);
        let f_bytes = cq.ring_bytes()[..lap_bytes].to_vec();
        assert!(ours_bytes == c_bytes, "{}: ours and the C loop wrote different WQEs", case.name);
        assert!(f_bytes == c_bytes, "{}: the floor wrote different WQEs", case.name);

        let (mut ours, mut c, mut floor) = (Vec::new(), Vec::new(), Vec::new());
        let per_round = (per_lap * laps) as f64;
        let ns = |d: Duration| d.as_nanos() as f64 / per_round;
        // The three take turns going first, so that none always runs right after the same
        // neighbour (whose cache footprint, or the retiring of ours, it would inherit).
        for r in 0..rounds {
            for k in 0..3 {
                let mut t = Duration::ZERO;
                match (r + k) % 3 {
                    0 => {
                        for _ in 0..laps {
                            t += lap_ours!();
                            retire_ours!();
                        }
                        ours.push(ns(t));
                    }
                    1 => {
                        for _ in 0..laps {
                            t += lap_c(&mut cq, &mut wr_id);
                            retire_c(&mut cq);
                        }
                        c.push(ns(t));
                    }
                    _ => {
                        for _ in 0..laps {
                            t += lap_floor(&mut cq);
                        }
                        floor.push(ns(t));
                    }
                }
            }
        }
        black_box(wr_id);
        let (o, cc, f) = (
            bench_util::median(&mut ours),
            bench_util::median(&mut c),
            bench_util::median(&mut floor),
        );
        println!("{:<16} {:>10.2} {:>10.2} {:>10.2}", case.name, o, cc, f);
        ratios.push((case.name, o / cc, o / f));
        if f < o && f < cc {
            honest += 1;
        } else {
            losers.push(format!(
                "FLOOR NOT FASTEST: {}: floor {f:.2} ns/WQE, ours {o:.2}, c {cc:.2}",
                case.name
            ));
        }
        drop(qp);
    }
    for (name, rc, rf) in &ratios {
        println!("ratio ours/c {name}: {rc:.3}");
        println!("ratio ours/floor {name}: {rf:.3}");
    }
    for l in &losers {
        println!("!!!!!!!! {l}");
    }
    println!("floor fastest (an honest anchor) in {honest} of {} cases", ratios.len());
}

fn poison(heap: &HeapDma, at: rdma_pmd::BusAddr, len: usize) {
    assert!(heap.write(at, &vec![0xa5; len]), "ring writable");
}

/// Play the device for ours: one requester CQE for the WQE at `last`, then poll until the
/// lap is retired (`expect` completions: every batch's signalled WQE is reported).
fn retire<'r, Q: SendQueue<'r>>(
    qp: &mut Q,
    scq: &mut CqWriter,
    heap: &HeapDma,
    wc: &mut [Completion],
    last: u16,
    expect: usize,
) {
    scq.requester(qp.qp_num(), last, None, |at, bytes| {
        assert!(heap.write(at, bytes), "CQ buffer reachable")
    });
    let mut got = 0;
    for _ in 0..1_000_000 {
        got += qp.poll(wc).expect("poll");
        if qp.outstanding() == 0 {
            break;
        }
    }
    assert_eq!(got, expect, "one completion per batch");
    assert_eq!(qp.outstanding(), 0, "one CQE retires the lap");
}

/// One timed lap of ours: `n` writes of `bufs` in batches of `batch`, the last of each batch
/// signalled; `RAW` posts the raw `Sge`s instead of `bufs`. A function of its own, one per
/// form, as the C loops are, so that its registers are its own rather than shared with
/// everything `main` keeps alive, and its loop carries no test of the form.
#[inline(never)]
fn post_lap<'r, Q: SendQueue<'r>, const RAW: bool>(
    qp: &mut Q,
    bufs: &[LocalBuf<'r>],
    sges: &[Sge],
    n: usize,
    batch: usize,
    remote: RemoteBuf,
    mut wr_id: u64,
) {
    let mut left = n;
    while left > 0 {
        let n = left.min(batch);
        let mut b = qp.batch();
        for k in 0..n {
            let flags = if k + 1 == n { SendFlags::SIGNALED } else { SendFlags::empty() };
            if RAW {
                // SAFETY: the SGEs name a region registered and alive for the whole run.
                let source = unsafe { rdma_pmd::Source::raw(sges) };
                let req = rdma_pmd::SendRequest::write(wr_id, source, flags, remote, None);
                b.post(&req).expect("post");
            } else {
                b.post_writev(wr_id, bufs, flags, remote).expect("post");
            }
            wr_id += 1;
        }
        b.commit();
        left -= n;
    }
}
