//! `cargo xtask bench post`: the cost of posting one WQE, side by side in one process.
//!
//! * **ours**: the mlx5 driver's posting paths (`Qp` through the core `Post` API:
//!   `post_writev`, `post_readv`, `post_sendv`, `post_send_inline`) into an in-memory BAR and
//!   heap DMA memory, with a control seam that only hands out numbers; beside them the same
//!   through raw `Sge`s (no region accounting), so the cost of the safe API's accounting
//!   shows;
//! * **c**: rdma-core's provider loop (`_mlx5_post_send` and `post_send_db`, written for RC
//!   RDMA WRITE, READ and SEND over `mlx5dv.h`; `c/post_mlx5dv.c`), compiled as Debian compiles
//!   rdma-core;
//! * **floor**: the cheapest code that stores the same WQE bytes, doorbell record and doorbell
//!   (whole-segment stores, no per-word arithmetic; `c_post_floor`, `c_post_floor_op`).
//!
//! A READ writes local memory, so each READ of a lap has destinations of its own (64-byte
//! pieces of one region, the same pieces lap after lap, which the C loop and the floor are
//! given as one SGE list per request). Through the safe API they are owned [`DestBuf`]s moved
//! into a [`Pending`] by `post_readv`; after the lap's completion is reaped each is taken back
//! with [`Pending::reclaim`]. The `-slot` cases keep each request's destinations in place in a
//! [`DestSlot`] instead, posted with `post_readv_in` and opened with [`DestSlot::get`]. That
//! reclaim (or `get`) is the safe form's own cost, so it is timed and counted in the lap (the
//! poll that retires the lap is not, for any variant). An inline
//! SEND's payload padding (the bytes between its end and the next 16) is not compared: the
//! provider leaves it as it was, ours zeroes it, the device reads only `byte_count` bytes.
//!
//! Before timing, one lap of each from a fresh ring checks that all three leave the same bytes
//! in the ring. A round runs each variant for `BENCH_LAPS` laps of the ring (timed lap by lap);
//! between two laps the device is played, untimed: one requester CQE for the last WQE, which
//! the variant's own poll loop retires (the floor keeps no state to retire). The variants take
//! turns going first, round by round, so machine noise hits them alike; the figure per case is
//! the median of the rounds' ns/WQE. The floor must be the fastest variant of every case: the
//! bench says loudly where it is not (it never fails on timing).
//!
//! `--threads N` measures something else: the aggregate posting rate of 1 and of N threads,
//! each with its own QP (created on the main thread and moved to its worker, as an
//! application gives one queue pair to each worker core), its own UAR page and BlueFlame
//! register, its own regions and completion queue, so that no cache line is shared between
//! them; the device is played as above. Each thread posts `BENCH_LAPS` laps (default 128 in
//! this mode) of 1-SGE writes
//! in batches of 32 per round (and, as a second case, single posts with a BlueFlame copy),
//! one CQE retiring each lap (stored straight into the CQ's memory: the heap's `write` takes
//! a lock all threads share); a round is timed from the first worker's start, after a barrier
//! that starts them all, to the last one's end, each worker reading the clock itself. The figure is the median over the
//! rounds of all the threads' WQEs divided by the round's wall time, and the scaling line is
//! the N-thread rate over the 1-thread rate.

mod bench_util;
mod c_mlx5;

use std::hint::black_box;
use std::time::{Duration, Instant};

use c_mlx5::{CQp, IbvWc, Sgls, Verb};
use rdma_pmd::{
    Completion, DestBuf, DestList, DestSlot, LocalBuf, Pending, Post, QpNum, RemoteBuf, Retired,
    SendFlags, SendQueue, Sge,
};
use rdma_pmd_hal::mem::HeapDma;
use rdma_pmd_mlx5::control::Access;
use rdma_pmd_mlx5::testing::CqWriter;

const SQ: usize = 1024;

/// What a case posts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// RDMA WRITE of the case's SGEs (`post_writev`).
    Write,
    /// RDMA READ into destinations of its own per request (`post_readv` with `DestBuf`s).
    Read,
    /// As `Read`, the destinations kept in place in `DestSlot`s (`post_readv_in`).
    ReadIn,
    /// SEND of the case's SGEs (`post_sendv`).
    Send,
    /// Inline SEND of this many bytes (`post_send_inline`), one piece.
    SendInline(usize),
}

struct Case {
    name: &'static str,
    op: Op,
    nsge: usize,
    batch: u32,
    bf: bool,
    /// Post raw `Sge`s through the `unsafe` form (no region accounting): shows what the safe
    /// API's in-flight accounting costs.
    raw: bool,
}

const CASES: &[Case] = &[
    Case { name: "1sge-batch32", op: Op::Write, nsge: 1, batch: 32, bf: false, raw: false },
    Case { name: "1sge-batch32-raw", op: Op::Write, nsge: 1, batch: 32, bf: false, raw: true },
    Case { name: "1sge-single-bf", op: Op::Write, nsge: 1, batch: 1, bf: true, raw: false },
    Case { name: "4sge-batch32", op: Op::Write, nsge: 4, batch: 32, bf: false, raw: false },
    Case { name: "4sge-batch32-raw", op: Op::Write, nsge: 4, batch: 32, bf: false, raw: true },
    Case { name: "16sge-batch32", op: Op::Write, nsge: 16, batch: 32, bf: false, raw: false },
    Case { name: "read-1sge-batch32", op: Op::Read, nsge: 1, batch: 32, bf: false, raw: false },
    Case { name: "read-1sge-batch32-raw", op: Op::Read, nsge: 1, batch: 32, bf: false, raw: true },
    Case { name: "read-4sge-batch32", op: Op::Read, nsge: 4, batch: 32, bf: false, raw: false },
    Case {
        name: "read-1sge-batch32-slot",
        op: Op::ReadIn,
        nsge: 1,
        batch: 32,
        bf: false,
        raw: false,
    },
    Case {
        name: "read-4sge-batch32-slot",
        op: Op::ReadIn,
        nsge: 4,
        batch: 32,
        bf: false,
        raw: false,
    },
    Case { name: "send-1sge-batch32", op: Op::Send, nsge: 1, batch: 32, bf: false, raw: false },
    Case { name: "send-1sge-batch32-raw", op: Op::Send, nsge: 1, batch: 32, bf: false, raw: true },
    Case { name: "send-4sge-batch32", op: Op::Send, nsge: 4, batch: 32, bf: false, raw: false },
    Case {
        name: "send-inline64-single-bf",
        op: Op::SendInline(64),
        nsge: 1,
        batch: 1,
        bf: true,
        raw: false,
    },
];

impl Case {
    /// The WQE's size in 16-byte units (every SGE of the bench is non-empty).
    fn ds(&self) -> usize {
        match self.op {
            Op::Write | Op::Read | Op::ReadIn => 2 + self.nsge,
            Op::Send => 1 + self.nsge,
            Op::SendInline(len) => 1 + (4 + len).div_ceil(16),
        }
    }

    fn wqebbs(&self) -> usize {
        self.ds().div_ceil(4)
    }

    /// Bytes of each WQE that are not compared: an inline payload's padding.
    fn unchecked(&self) -> core::ops::Range<usize> {
        match self.op {
            Op::SendInline(len) => 16 + 4 + len..self.ds() * 16,
            _ => 0..0,
        }
    }

    /// The C loops' form of the request, for all but WRITE.
    fn verb(&self) -> Option<Verb> {
        match self.op {
            Op::Write => None,
            Op::Read | Op::ReadIn => Some(Verb::Read),
            Op::Send => Some(Verb::Send),
            Op::SendInline(_) => Some(Verb::SendInline),
        }
    }
}

/// The destinations of a safe READ case, between laps in `pool` (in posting order), during a
/// lap in `pending`.
enum Dests<'r> {
    None,
    One { pool: Vec<DestBuf<'r>>, pending: Vec<Pending<DestBuf<'r>>> },
    Four { pool: Vec<[DestBuf<'r>; 4]>, pending: Vec<Pending<[DestBuf<'r>; 4]>> },
    OneIn(Vec<DestSlot<DestBuf<'r>>>),
    FourIn(Vec<DestSlot<[DestBuf<'r>; 4]>>),
}

/// Bytes of each READ destination.
const DEST_LEN: usize = 64;

fn main() {
    let (rounds, laps) = bench_util::rounds_and_laps();
    let (heap, dev) = bench_util::device();
    let args: Vec<String> = std::env::args().collect();
    if let Some(w) = args.windows(2).find(|w| w[0] == "--threads") {
        let n: usize = w[1].parse().expect("--threads N: a number");
        // Longer rounds than the per-WQE cases' (BENCH_LAPS, default 128 here): a round spans
        // the threads' start and end, which a wake-up from the barrier can skew.
        let _ = laps;
        threads(&heap, &dev, n.max(1), rounds, bench_util::env("BENCH_LAPS", 128).max(1));
        return;
    }
    let src = dev.reg(16 * 64, Access::LOCAL_WRITE).expect("register source");
    let dst = dev.reg(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE).expect("register dest");
    let remote = dst.remote(0);
    // What the READs read, and the region they scatter into: 64 bytes for each element of
    // the largest lap (4 SGEs per request, 2 blocks each).
    let rsrc = dev.reg(4096, Access::REMOTE_READ).expect("register read source");
    let read_remote = rsrc.remote(0);
    let mut rdst =
        dev.reg(SQ / 2 * 4 * DEST_LEN, Access::LOCAL_WRITE).expect("register READ destinations");
    // The inline SEND's payload.
    let payload: [u8; 64] = core::array::from_fn(|k| k as u8);

    println!(
        "posting cost per WQE: median of {rounds} rounds of {laps} laps each, ring of {SQ} WQE \
         basic blocks"
    );
    println!("{:<24} {:>10} {:>10} {:>10}", "case", "ours ns", "c ns", "floor ns");
    let mut ratios = Vec::new();
    let mut honest = 0;
    let mut losers = Vec::new();
    // BENCH_CASE=name runs one case only (for profilers).
    let only = std::env::var("BENCH_CASE").ok();
    for case in CASES.iter().filter(|c| only.as_deref().is_none_or(|o| o == c.name)) {
        let bufs: Vec<LocalBuf<'_>> =
            (0..case.nsge).map(|k| src.slice(k * 64, 64).expect("slice")).collect();
        let sges: Vec<Sge> = bufs.iter().map(|b| b.sge()).collect();
        // The previous case's QP is gone; its records would fill the control seam's tables.
        bench_util::forget_destroyed(&dev);
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
        cq.set_max_inline(qp.caps().max_inline);
        let per_lap =
            (SQ / case.wqebbs() - case.batch as usize) / case.batch as usize * case.batch as usize;
        let lap_bytes = per_lap * case.wqebbs() * 64;
        // A READ's destinations: 64-byte pieces, `nsge` for each request of a lap; the safe
        // form owns them (`dests`), the raw form, the C loop and the floor get their SGEs.
        let mut dests = Dests::None;
        let mut read_sges = Vec::new();
        if matches!(case.op, Op::Read | Op::ReadIn) {
            let mut rest = rdst.dest().expect("READ destinations");
            let mut pieces = Vec::new();
            for _ in 0..per_lap * case.nsge {
                let tail = rest.split_off(DEST_LEN).expect("room for every destination");
                pieces.push(core::mem::replace(&mut rest, tail));
            }
            read_sges = pieces.iter().map(DestBuf::sge).collect();
            if !case.raw {
                dests = match (case.nsge, case.op) {
                    (1, Op::Read) => {
                        Dests::One { pool: pieces, pending: Vec::with_capacity(per_lap) }
                    }
                    (1, _) => Dests::OneIn(pieces.into_iter().map(DestSlot::new).collect()),
                    (4, op) => {
                        let mut it = pieces.into_iter();
                        let pool: Vec<[DestBuf<'_>; 4]> = (0..per_lap)
                            .map(|_| core::array::from_fn(|_| it.next().expect("4 per request")))
                            .collect();
                        if op == Op::Read {
                            Dests::Four { pool, pending: Vec::with_capacity(per_lap) }
                        } else {
                            Dests::FourIn(pool.into_iter().map(DestSlot::new).collect())
                        }
                    }
                    (n, _) => panic!("{}: no safe READ form for {n} SGEs", case.name),
                };
            }
        }
        let inline_sge =
            [Sge::new(payload.as_ptr() as u64, payload.len() as u32, rdma_pmd::Lkey(0))];
        let (sgls, remote) = match case.op {
            Op::Write | Op::Send => (Sgls { sges: &sges, nsge: case.nsge, stride: 0 }, remote),
            Op::Read | Op::ReadIn => {
                (Sgls { sges: &read_sges, nsge: case.nsge, stride: case.nsge }, read_remote)
            }
            Op::SendInline(_) => (Sgls { sges: &inline_sge, nsge: 1, stride: 0 }, remote),
        };
        let mut wc = [Completion::default(); 64];
        let mut cwc = [IbvWc::default(); 32];
        let batch = case.batch as usize;
        let mut wr_id = 0u64;

        let wqe_blocks = case.wqebbs() as u16;
        // One timed lap of ours.
        macro_rules! lap_ours {
            () => {{
                let t = Instant::now();
                match (case.op, case.raw, &mut dests) {
                    (Op::Write, true, _) => {
                        post_lap::<_, true>(&mut qp, &bufs, &sges, per_lap, batch, remote, wr_id)
                    }
                    (Op::Write, false, _) if batch == 1 => {
                        single_lap(&mut qp, &bufs, per_lap, remote, wr_id)
                    }
                    (Op::Write, false, _) => {
                        post_lap::<_, false>(&mut qp, &bufs, &sges, per_lap, batch, remote, wr_id)
                    }
                    (Op::Read, true, _) => {
                        read_raw_lap(&mut qp, &read_sges, case.nsge, batch, remote, wr_id)
                    }
                    (Op::Read, false, Dests::One { pool, pending }) => {
                        read_lap(&mut qp, pool, pending, batch, remote, wr_id)
                    }
                    (Op::Read, false, Dests::Four { pool, pending }) => {
                        read_lap(&mut qp, pool, pending, batch, remote, wr_id)
                    }
                    (Op::ReadIn, _, Dests::OneIn(slots)) => {
                        read_in_lap(&mut qp, slots, batch, remote, wr_id)
                    }
                    (Op::ReadIn, _, Dests::FourIn(slots)) => {
                        read_in_lap(&mut qp, slots, batch, remote, wr_id)
                    }
                    (Op::Read | Op::ReadIn, _, _) => unreachable!("a safe READ owns its dests"),
                    (Op::Send, true, _) => {
                        send_lap::<_, true>(&mut qp, &bufs, &sges, per_lap, batch, wr_id)
                    }
                    (Op::Send, false, _) => {
                        send_lap::<_, false>(&mut qp, &bufs, &sges, per_lap, batch, wr_id)
                    }
                    (Op::SendInline(_), _, _) => inline_lap(&mut qp, &payload, per_lap, wr_id),
                }
                let e = t.elapsed();
                wr_id += per_lap as u64;
                e
            }};
        }
        // The device for ours, untimed: one CQE for the last WQE retires the lap. Then the
        // safe READ's destinations come back, timed: the lap's share of its cost.
        macro_rules! retire_ours {
            () => {{
                let last = qp.sq_pi().wrapping_sub(wqe_blocks);
                retire(&mut qp, &mut scq, &heap, &mut wc, last, per_lap / batch);
                match &mut dests {
                    Dests::None => Duration::ZERO,
                    Dests::One { pool, pending } => {
                        let t = Instant::now();
                        reclaim_lap(&qp, pool, pending);
                        t.elapsed()
                    }
                    Dests::Four { pool, pending } => {
                        let t = Instant::now();
                        reclaim_lap(&qp, pool, pending);
                        t.elapsed()
                    }
                    Dests::OneIn(slots) => {
                        let t = Instant::now();
                        take_in_lap(&qp, slots);
                        t.elapsed()
                    }
                    Dests::FourIn(slots) => {
                        let t = Instant::now();
                        take_in_lap(&qp, slots);
                        t.elapsed()
                    }
                }
            }};
        }
        let verb = case.verb();
        let lap_c = |cq: &mut CQp, wr_id: &mut u64| {
            let t = Instant::now();
            match verb {
                None => cq.post(per_lap, case.batch, &sges, remote, *wr_id),
                Some(v) => cq.post_verb(v, per_lap, case.batch, sgls, remote, *wr_id),
            }
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
            match verb {
                None => cq.floor(per_lap, case.batch, &sges, remote, case.bf),
                Some(v) => cq.floor_verb(v, per_lap, case.batch, sgls, remote, case.bf),
            }
            t.elapsed()
        };
        // The bytes of a lap that are compared.
        let compared = |mut b: Vec<u8>| {
            for wqe in b.chunks_mut(case.wqebbs() * 64) {
                wqe[case.unchecked()].fill(0);
            }
            b
        };

        // Same bytes: one lap of each from block 0 over a poisoned ring.
        poison(&heap, ours_ring, SQ * 64);
        lap_ours!();
        let mut ours_bytes = vec![0u8; lap_bytes];
        assert!(heap.read(ours_ring, &mut ours_bytes), "our ring readable");
        let ours_bytes = compared(ours_bytes);
        retire_ours!();
        cq.poison_ring();
        lap_c(&mut cq, &mut wr_id);
        let c_bytes = compared(cq.ring_bytes()[..lap_bytes].to_vec());
        retire_c(&mut cq);
        cq.poison_ring();
        lap_floor(&mut cq);
        let f_bytes = compared(cq.ring_bytes()[..lap_bytes].to_vec());
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
                            t += retire_ours!();
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
        println!("{:<24} {:>10.2} {:>10.2} {:>10.2}", case.name, o, cc, f);
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
        drop(dests);
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

/// One timed lap of ours: `n` writes of `bufs`, each a single post (`post_writev` on the
/// queue itself, so its own doorbell and, one block, a BlueFlame copy), each signalled: what
/// `rdma_post_writev` is, and what the C loop does with batches of one.
#[inline(never)]
fn single_lap<'r, Q: SendQueue<'r>>(
    qp: &mut Q,
    bufs: &[LocalBuf<'r>],
    n: usize,
    remote: RemoteBuf,
    mut wr_id: u64,
) {
    for _ in 0..n {
        qp.post_writev(wr_id, bufs, SendFlags::SIGNALED, remote).expect("post");
        wr_id += 1;
    }
}

/// One timed lap of ours for SENDs, as [`post_lap`] is for writes.
#[inline(never)]
fn send_lap<'r, Q: SendQueue<'r>, const RAW: bool>(
    qp: &mut Q,
    bufs: &[LocalBuf<'r>],
    sges: &[Sge],
    n: usize,
    batch: usize,
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
                unsafe { b.post_sendv_raw(wr_id, sges, flags, None, None) }.expect("post");
            } else {
                b.post_sendv(wr_id, bufs, flags).expect("post");
            }
            wr_id += 1;
        }
        b.commit();
        left -= n;
    }
}

/// One timed lap of ours: `n` inline SENDs of `data`, each a single post (its own doorbell,
/// a BlueFlame copy), each signalled.
#[inline(never)]
fn inline_lap<'r, Q: SendQueue<'r>>(qp: &mut Q, data: &[u8], n: usize, mut wr_id: u64) {
    for _ in 0..n {
        qp.post_send_inline(wr_id, &[data], SendFlags::SIGNALED).expect("post");
        wr_id += 1;
    }
}

/// One timed lap of ours: a READ of `remote` into each entry of `pool`, in order, in batches of
/// `batch`, the last of each signalled; the `Pending`s go to `pending`, in order.
#[inline(never)]
fn read_lap<'r, Q: SendQueue<'r>, B: DestList<'r> + core::fmt::Debug>(
    qp: &mut Q,
    pool: &mut Vec<B>,
    pending: &mut Vec<Pending<B>>,
    batch: usize,
    remote: RemoteBuf,
    mut wr_id: u64,
) {
    let mut left = pool.len();
    let mut dests = pool.drain(..);
    while left > 0 {
        let n = left.min(batch);
        let mut b = qp.batch();
        for k in 0..n {
            let flags = if k + 1 == n { SendFlags::SIGNALED } else { SendFlags::empty() };
            let d = dests.next().expect("a destination per request");
            pending.push(b.post_readv(wr_id, d, flags, remote).expect("post"));
            wr_id += 1;
        }
        b.commit();
        left -= n;
    }
}

/// The safe READ's destinations back into `pool`, in posting order, once the lap retired.
#[inline(never)]
fn reclaim_lap<B>(qp: &impl Retired, pool: &mut Vec<B>, pending: &mut Vec<Pending<B>>) {
    pool.extend(pending.drain(..).map(|p| match p.reclaim(qp) {
        Ok(b) => b,
        Err(_) => panic!("a READ of a retired lap is not retired"),
    }));
}

/// One timed lap of ours: a READ of `remote` into the buffers of each slot, in place, in order,
/// in batches of `batch`, the last of each signalled.
#[inline(never)]
fn read_in_lap<'r, Q: SendQueue<'r>, B: DestList<'r>>(
    qp: &mut Q,
    slots: &mut [DestSlot<B>],
    batch: usize,
    remote: RemoteBuf,
    mut wr_id: u64,
) {
    for chunk in slots.chunks_mut(batch) {
        let n = chunk.len();
        let mut b = qp.batch();
        for (k, slot) in chunk.iter_mut().enumerate() {
            let flags = if k + 1 == n { SendFlags::SIGNALED } else { SendFlags::empty() };
            b.post_readv_in(wr_id, slot, flags, remote).expect("post");
            wr_id += 1;
        }
        b.commit();
    }
}

/// The slots' buffers back, in place, once the lap retired.
#[inline(never)]
fn take_in_lap<B>(qp: &impl Retired, slots: &mut [DestSlot<B>]) {
    for s in slots {
        if s.get(qp).is_none() {
            panic!("a READ of a retired lap is not retired");
        }
    }
}

/// One timed lap of ours through `post_readv_raw`: a READ of `remote` into each run of `nsge`
/// elements of `sges`, in batches of `batch`, the last of each signalled.
#[inline(never)]
fn read_raw_lap<'r, Q: SendQueue<'r>>(
    qp: &mut Q,
    sges: &[Sge],
    nsge: usize,
    batch: usize,
    remote: RemoteBuf,
    mut wr_id: u64,
) {
    let mut lists = sges.chunks_exact(nsge);
    let mut left = lists.len();
    while left > 0 {
        let n = left.min(batch);
        let mut b = qp.batch();
        for k in 0..n {
            let flags = if k + 1 == n { SendFlags::SIGNALED } else { SendFlags::empty() };
            let sgl = lists.next().expect("a list per request");
            // SAFETY: the elements name a region registered and alive for the whole run,
            // which nothing reads or writes (the bench's device never moves bytes).
            unsafe { b.post_readv_raw(wr_id, sgl, flags, remote) }.expect("post");
            wr_id += 1;
        }
        b.commit();
        left -= n;
    }
}

/// `--threads N`: the aggregate rate of 1 and of `n` threads, each posting on its own QP (see
/// the module docs).
fn threads(
    heap: &std::sync::Arc<HeapDma>,
    dev: &bench_util::Dev,
    n: usize,
    rounds: usize,
    laps: usize,
) {
    println!(
        "posting rate, 1 and {n} threads, each with its own QP and BlueFlame register: median \
         of {rounds} rounds of {laps} laps per thread (1-thread and {n}-thread rounds \
         interleaved), ring of {SQ} WQE basic blocks"
    );
    for (case, batch) in [("1sge-batch32", 32usize), ("1sge-single-bf", 1)] {
        let (one, many) = threads_rates(heap, dev, n, batch, rounds, laps);
        println!("{case:<24} 1 thread: {:>8.2} M WQE/s", one / 1e6);
        println!("{case:<24} {n} threads: {:>7.2} M WQE/s", many / 1e6);
        println!("scaling {n}/1 {case}: {:.3}", many / one);
    }
}

/// The medians over `rounds` of the WQEs per second that 1 and `n` threads post together.
/// The same `n` workers serve both: in a 1-thread round only the first posts, the others wait
/// at the barriers; the two kinds of round alternate, after one untimed round of each.
fn threads_rates(
    heap: &std::sync::Arc<HeapDma>,
    dev: &bench_util::Dev,
    n: usize,
    batch: usize,
    rounds: usize,
    laps: usize,
) -> (f64, f64) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;
    // Created here, at "start-up", and moved to the workers.
    let mut qps = Vec::new();
    for _ in 0..n {
        let mut qp = dev.create_qp::<SQ, 16>(&Default::default()).expect("create qp");
        qp.connect_loopback(QpNum(0x124)).expect("connect");
        let (scq, cq) = {
            let ctl = dev.control();
            let p = ctl.qp(qp.qp_num()).expect("QP recorded");
            let cq = ctl.cq(p.send_cq).expect("send CQ recorded");
            (CqWriter::new(cq), cq)
        };
        // The device's CQE stores go straight to the CQ's memory: `HeapDma::write` would take
        // the heap's map lock, a cache line every thread shares.
        let len = 64usize << cq.log_size;
        let base = heap.translate(cq.buf, len).expect("CQ buffer mapped").as_ptr() as usize;
        qps.push((qp, scq, CqMem { bus: cq.buf.0, base, len }));
    }
    let per_lap = (SQ - batch) / batch * batch;
    let (start, done) = (Barrier::new(n + 1), Barrier::new(n + 1));
    // How many workers post in the current round (read after `start`).
    let active = AtomicUsize::new(0);
    // When each worker started and finished its laps in the current round: the workers keep
    // the time themselves, as the main thread, a third thread on two cores, may be
    // descheduled right after the start barrier.
    let spans: Vec<std::sync::Mutex<Option<(Instant, Instant)>>> =
        (0..n).map(|_| std::sync::Mutex::new(None)).collect();
    let plan: Vec<usize> = (0..rounds + 1).flat_map(|_| [1, n]).collect();
    let (mut one, mut many) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    std::thread::scope(|s| {
        for (k, (qp, mut scq, mem)) in qps.into_iter().enumerate() {
            let (start, done, active, plan, span) = (&start, &done, &active, &plan, &spans[k]);
            s.spawn(move || {
                // Each worker's own regions (buffers do not cross threads).
                let src = dev.reg(64, Access::LOCAL_WRITE).expect("register source");
                let dst = dev
                    .reg(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
                    .expect("register dest");
                let remote = dst.remote(0);
                let bufs = [src.slice(0, 64).expect("slice")];
                let sges = [bufs[0].sge()];
                let mut qp = qp;
                let mut wc = [Completion::default(); 64];
                let mut wr_id = 0u64;
                for _ in plan {
                    start.wait();
                    if k < active.load(Ordering::Relaxed) {
                        let t0 = Instant::now();
                        for _ in 0..laps {
                            post_lap::<_, false>(
                                &mut qp, &bufs, &sges, per_lap, batch, remote, wr_id,
                            );
                            wr_id += per_lap as u64;
                            let last = qp.sq_pi().wrapping_sub(1);
                            retire_at(&mut qp, &mut scq, &mem, &mut wc, last, per_lap / batch);
                        }
                        *span.lock().expect("span") = Some((t0, Instant::now()));
                    }
                    done.wait();
                }
                black_box(wr_id);
            });
        }
        for (r, &t) in plan.iter().enumerate() {
            active.store(t, Ordering::Relaxed);
            start.wait();
            done.wait();
            // From the first worker's start to the last one's end.
            let got: Vec<(Instant, Instant)> =
                spans.iter().filter_map(|m| m.lock().expect("span").take()).collect();
            assert_eq!(got.len(), t, "every active worker timed its round");
            let from = got.iter().map(|g| g.0).min().expect("a worker");
            let to = got.iter().map(|g| g.1).max().expect("a worker");
            let rate = (t * laps * per_lap) as f64 / (to - from).as_secs_f64();
            // The first round of each kind warms up.
            if r >= 2 {
                if t == 1 {
                    one.push(rate)
                } else {
                    many.push(rate)
                }
            }
        }
    });
    (bench_util::median(&mut one), bench_util::median(&mut many))
}

/// A send CQ's buffer as the bench's device writes it: bus address, CPU address, length.
struct CqMem {
    bus: u64,
    base: usize,
    len: usize,
}

/// [`retire`], with the CQE stored straight into the CQ's memory (no lock shared between
/// threads).
fn retire_at<'r, Q: SendQueue<'r>>(
    qp: &mut Q,
    scq: &mut CqWriter,
    mem: &CqMem,
    wc: &mut [Completion],
    last: u16,
    expect: usize,
) {
    scq.requester(qp.qp_num(), last, None, |at, bytes| {
        let off = (at.0 - mem.bus) as usize;
        assert!(off + bytes.len() <= mem.len, "CQE inside the CQ");
        // As `HeapDma::write`: the device's earlier accesses before these stores.
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        // SAFETY: the range lies inside the CQ buffer (checked above), which stays allocated
        // while its QP lives, and the QP outlives this call; the driver accesses the buffer
        // only atomically.
        unsafe { rdma_pmd::access::store_bytes((mem.base + off) as *mut u8, bytes) }
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
