//! `cargo xtask bench post`: the cost of posting one WQE, side by side in one process.
//!
//! * **ours**: the mlx5 driver's writev path (`Qp` through the core `PostWrite` API) into an
//!   in-memory BAR and heap DMA memory, with a control seam that only hands out numbers;
//! * **c**: a C loop building the same WQEs with rdma-core's `mlx5dv_set_ctrl_seg` /
//!   `mlx5dv_set_data_seg` and performing the same doorbell-record and doorbell stores
//!   (`c/post_mlx5dv.c`);
//! * **floor**: a C loop storing the same number of bytes into the same ring slots, plus the
//!   same doorbell stores, computing nothing.
//!
//! Each round posts as many WQEs as the ring holds (timed), then plays the device: writes one
//! requester CQE for the last WQE and lets the driver retire the round (not timed). The three
//! variants alternate round by round, taking turns going first, so machine noise hits them
//! alike; the figure per case is the median of the rounds' ns/WQE.

use std::hint::black_box;
use std::time::Instant;

use rdma_pmd::{Completion, LocalBuf, PostWrite, QpNum, SendFlags, SendQueue, Sge};
use rdma_pmd_hal::mem::{HeapDma, MemBar};
use rdma_pmd_hal::Dma;
use rdma_pmd_mlx5::control::Access;
use rdma_pmd_mlx5::device::{Mlx5, SharedDma};
use rdma_pmd_mlx5::testing::{CqWriter, NullControl};

const SQ: usize = 1024;

#[link(name = "postc", kind = "static")]
extern "C" {
    fn c_post_mlx5dv(
        ring: *mut u8,
        wqe_cnt: u32,
        dbrec: *mut u32,
        bar: *mut u64,
        bf_size: u32,
        pi: u32,
        n: u64,
        batch: u32,
        sges: *const Sge,
        nsge: u32,
        qpn: u32,
        raddr: u64,
        rkey: u32,
        use_bf: i32,
    ) -> u32;
    fn c_post_floor(
        ring: *mut u8,
        wqe_cnt: u32,
        dbrec: *mut u32,
        bar: *mut u64,
        pi: u32,
        n: u64,
        batch: u32,
        wqebbs_per_wqe: u32,
        bytes_per_wqe: u32,
    ) -> u32;
}

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

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

fn main() {
    let rounds: usize =
        std::env::var("BENCH_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(200);
    let heap = HeapDma::new();
    let dev = Mlx5::open(MemBar::new(64 * 4096), SharedDma(heap.clone()), NullControl::default())
        .expect("open");
    let src = dev.reg(16 * 64, Access::LOCAL_WRITE).expect("register source");
    let dst = dev.reg(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE).expect("register dest");
    let mut qp = dev.create_qp::<SQ, 16>(&Default::default()).expect("create qp");
    qp.connect_loopback(QpNum(0x124)).expect("connect");
    // The device side of the send CQ: one requester CQE per round.
    let qpn = qp.qp_num();
    let mut scq = {
        let ctl = dev.control();
        CqWriter::new(ctl.qp(qpn).and_then(|p| ctl.cq(p.send_cq)).expect("send CQ recorded"))
    };

    // The C loops' ring, doorbell record and BAR page, shaped like ours (the BAR is plain
    // memory here as it is for ours: `MemBar` without a device behind it).
    let c_ring = heap.alloc(SQ * 64, 4096).expect("ring");
    let c_dbrec = heap.alloc(64, 64).expect("dbrec");
    let c_bar_mem = heap.alloc(4096, 4096).expect("bar page");

    let remote = dst.remote(0);
    println!("posting cost per WQE: median of {rounds} rounds, ring of {SQ} WQE basic blocks");
    println!("{:<16} {:>10} {:>10} {:>10}", "case", "ours ns", "c ns", "floor ns");
    let mut ratios = Vec::new();
    // BENCH_CASE=name runs one case only (for profilers).
    let only = std::env::var("BENCH_CASE").ok();
    for case in CASES.iter().filter(|c| only.as_deref().is_none_or(|o| o == c.name)) {
        let bufs: Vec<LocalBuf<'_>> =
            (0..case.nsge).map(|k| src.slice(k * 64, 64).expect("slice")).collect();
        let sges: Vec<Sge> = bufs.iter().map(|b| b.sge()).collect();
        let per_round = (SQ / wqebbs(case.nsge) - case.batch as usize) / case.batch as usize
            * case.batch as usize;
        let (mut ours, mut c, mut floor) = (Vec::new(), Vec::new(), Vec::new());
        let mut c_pi = 0u32;
        let mut f_pi = 0u32;
        let mut wc = [Completion::default(); 64];
        let mut run_ours = || {
            let t = Instant::now();
            let batch = case.batch as usize;
            if case.raw {
                post_round::<_, true>(&mut qp, &bufs, &sges, per_round, batch, remote);
            } else {
                post_round::<_, false>(&mut qp, &bufs, &sges, per_round, batch, remote);
            }
            ours.push(t.elapsed().as_nanos() as f64 / per_round as f64);
            // play the device: one CQE for the last WQE retires the round
            let last = qp.sq_pi().wrapping_sub(wqebbs(case.nsge) as u16);
            scq.requester(qpn, last, None, |at, bytes| {
                assert!(heap.write(at, bytes), "CQ buffer reachable")
            });
            // Signalled WQEs before the last are reported too (completions are in order).
            let mut got = 0;
            for _ in 0..1_000_000 {
                got += qp.poll(&mut wc).expect("poll");
                if qp.outstanding() == 0 {
                    break;
                }
            }
            assert_eq!(got, per_round / case.batch as usize, "one completion per batch");
            assert_eq!(qp.outstanding(), 0, "one CQE retires the round");
        };
        let mut run_c = || {
            let t = Instant::now();
            // SAFETY: ring, dbrec and bar stand-in are live blocks of the sizes the C loop
            // assumes; the SGE array outlives the call.
            c_pi = unsafe {
                c_post_mlx5dv(
                    c_ring.cpu().as_ptr(),
                    SQ as u32,
                    c_dbrec.cpu().as_ptr().cast(),
                    c_bar_mem.cpu().as_ptr().add(0x800).cast(),
                    256,
                    c_pi,
                    per_round as u64,
                    case.batch,
                    sges.as_ptr(),
                    sges.len() as u32,
                    qpn.0,
                    remote.addr,
                    remote.rkey.0,
                    case.bf as i32,
                )
            };
            c.push(t.elapsed().as_nanos() as f64 / per_round as f64);
        };
        let mut run_floor = || {
            let t = Instant::now();
            // SAFETY: as above.
            f_pi = unsafe {
                c_post_floor(
                    c_ring.cpu().as_ptr(),
                    SQ as u32,
                    c_dbrec.cpu().as_ptr().cast(),
                    c_bar_mem.cpu().as_ptr().add(0x800).cast(),
                    f_pi,
                    per_round as u64,
                    case.batch,
                    wqebbs(case.nsge) as u32,
                    ((2 + case.nsge) * 16) as u32,
                )
            };
            floor.push(t.elapsed().as_nanos() as f64 / per_round as f64);
        };
        // The three take turns going first, so that none always runs right after the same
        // neighbour (whose cache footprint, or the retiring of ours, it would inherit).
        for r in 0..rounds {
            for k in 0..3 {
                match (r + k) % 3 {
                    0 => run_ours(),
                    1 => run_c(),
                    _ => run_floor(),
                }
            }
        }
        black_box((c_pi, f_pi));
        let (o, cc, f) = (median(&mut ours), median(&mut c), median(&mut floor));
        println!("{:<16} {:>10.2} {:>10.2} {:>10.2}", case.name, o, cc, f);
        ratios.push((case.name, o / cc, o / f));
    }
    for (name, rc, rf) in &ratios {
        println!("ratio ours/c {name}: {rc:.3}");
        println!("ratio ours/floor {name}: {rf:.3}");
    }
    drop(qp);
    // SAFETY: the C loops are done with these blocks.
    unsafe {
        heap.free(c_ring);
        heap.free(c_dbrec);
        heap.free(c_bar_mem);
    }
}

/// One timed round of ours: `n` writes of `bufs` in batches of `batch`, the last of each
/// batch signalled; `RAW` posts the raw `Sge`s instead of `bufs`. A function of its own, one
/// per form, as the C loops are, so that its registers are its own rather than shared with
/// everything `main` keeps alive, and its loop carries no test of the form.
#[inline(never)]
fn post_round<'r, Q: SendQueue<'r>, const RAW: bool>(
    qp: &mut Q,
    bufs: &[LocalBuf<'r>],
    sges: &[Sge],
    n: usize,
    batch: usize,
    remote: rdma_pmd::RemoteBuf,
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
                let req =
                    rdma_pmd::WriteRequest { wr_id: k as u64, source, flags, remote, imm: None };
                b.post(&req).expect("post");
            } else {
                b.post_writev(k as u64, bufs, flags, remote).expect("post");
            }
        }
        b.commit();
        left -= n;
    }
}
