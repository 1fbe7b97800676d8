//! `cargo xtask bench poll`: the cost of reaping one completion, side by side in one process.
//!
//! * **ours**: the mlx5 driver's `Qp` through the core `SendQueue::poll`, over an in-memory
//!   BAR and heap DMA memory, with a control seam that only hands out numbers;
//! * **c**: a loop following rdma-core's `providers/mlx5/cq.c` (`poll_cq`, `mlx5_parse_cqe`:
//!   owner bit, from-device barrier, opcode, `wqe_counter` to `wr_id` through the `wrid[]`
//!   table, consumer-index doorbell record; `c/poll_mlx5.c`), over a QP the provider's
//!   posting loop filled, compiled as Debian compiles rdma-core.
//!
//! A lap posts `PER_LAP` one-SGE RDMA WRITEs (untimed), plays the device by writing the CQEs
//! a device would write for them with [`CqWriter`] (untimed), then reaps every completion,
//! `NE` per poll call (timed). Cases: one signalled WQE per 16 (one CQE retires 16 WQEs), every
//! WQE signalled, and the error path (an error CQE for the first WQE, a flush CQE for each
//! of the others; ours then resets its QP and connects it again, untimed, so that every lap
//! reaps from the same rings, as the C loop does). A round runs `BENCH_LAPS` laps of
//! each variant, the two taking turns going first; the figure per case is the median of the
//! rounds' ns per CQE.

mod bench_util;
mod c_mlx5;

use std::hint::black_box;
use std::time::{Duration, Instant};

use bench_util::Dev;
use c_mlx5::{CQp, IbvWc, Reaped};
use rdma_pmd::{Completion, LocalBuf, Post, QpNum, RemoteBuf, SendFlags, SendQueue, Sge};
use rdma_pmd_hal::mem::{HeapDma, MemBar};
use rdma_pmd_mlx5::control::Access;
use rdma_pmd_mlx5::device::SharedDma;
use rdma_pmd_mlx5::testing::{CqWriter, NullControl};
use rdma_pmd_mlx5::Syndrome;

const SQ: usize = 1024;
/// WQEs posted per lap: 63 batches of 16, one block each.
const PER_LAP: usize = 1008;
/// Completions asked for per poll call.
const NE: usize = 32;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// One signalled WQE per `signal_every`; a success CQE for each.
    Success { signal_every: usize },
    /// An error CQE for the first WQE, a flush CQE for every other.
    Error,
}

struct Case {
    name: &'static str,
    kind: Kind,
}

const CASES: &[Case] = &[
    Case { name: "signal16", kind: Kind::Success { signal_every: 16 } },
    Case { name: "signal1", kind: Kind::Success { signal_every: 1 } },
    Case { name: "error-flush", kind: Kind::Error },
];

/// The syndrome and vendor syndrome of the first WQE's error CQE.
const FIRST_ERROR: (Syndrome, u8) = (Syndrome::RemoteAccessErr, 0x88);
const FLUSH: (Syndrome, u8) = (Syndrome::WrFlushErr, 0);

impl Kind {
    /// Doorbell batch of the untimed posting; its last WQE is signalled.
    fn batch(self) -> usize {
        match self {
            Kind::Success { signal_every } => signal_every,
            Kind::Error => 16,
        }
    }

    /// The CQE the device writes for WQE `k` of a lap, if any.
    fn cqe(self, k: usize) -> Option<Option<(Syndrome, u8)>> {
        match self {
            Kind::Success { signal_every } => {
                (k % signal_every == signal_every - 1).then_some(None)
            }
            Kind::Error if k == 0 => Some(Some(FIRST_ERROR)),
            Kind::Error => Some(Some(FLUSH)),
        }
    }

    /// What a lap's reaping must see, for wr_ids `first..first + PER_LAP`.
    fn expect(self, first: u64) -> Reaped {
        let mut r = Reaped::default();
        for k in 0..PER_LAP {
            if let Some(err) = self.cqe(k) {
                r.n += 1;
                r.wr_id_sum = r.wr_id_sum.wrapping_add(first + k as u64);
                r.errors += err.is_some() as u64;
            }
        }
        r
    }
}

fn main() {
    let (rounds, laps) = bench_util::rounds_and_laps();
    let (heap, dev) = bench_util::device();
    let src = dev.reg(64, Access::LOCAL_WRITE).expect("register source");
    let dst = dev.reg(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE).expect("register dest");
    let remote = dst.remote(0);
    let bufs = [src.slice(0, 64).expect("slice")];
    let sges: Vec<Sge> = bufs.iter().map(|b| b.sge()).collect();
    let base_uars = dev.control().uars.len();

    println!(
        "reaping cost per CQE: median of {rounds} rounds of {laps} laps each, {PER_LAP} WQEs \
         a lap, {NE} completions per poll call"
    );
    println!("{:<12} {:>6} {:>10} {:>10}", "case", "CQEs", "ours ns", "c ns");
    let mut ratios = Vec::new();
    // BENCH_CASE=name runs one case only (for profilers).
    let only = std::env::var("BENCH_CASE").ok();
    for case in CASES.iter().filter(|c| only.as_deref().is_none_or(|o| o == c.name)) {
        let kind = case.kind;
        let cqes = kind.expect(0).n as usize;
        let mut qp = new_qp(&dev);
        let qpn = qp.qp_num();
        let mut scq = send_cq(&dev, qpn);
        let mut cq = CQp::new(&heap, SQ, qpn);
        let mut wc = [Completion::default(); NE];
        let mut cwc = [IbvWc::default(); NE];
        let mut wr_id = 0u64;
        let (mut ours, mut c) = (Vec::new(), Vec::new());
        let per_round = (cqes * laps) as f64;
        let ns = |d: Duration| d.as_nanos() as f64 / per_round;

        for r in 0..rounds {
            for k in 0..2 {
                let mut t = Duration::ZERO;
                if (r + k) % 2 == 0 {
                    for _ in 0..laps {
                        let q = &mut qp;
                        let first = wr_id;
                        let pi = q.sq_pi();
                        post(q, &bufs, kind.batch(), remote, &mut wr_id);
                        for w in 0..PER_LAP {
                            if let Some(err) = kind.cqe(w) {
                                let counter = pi.wrapping_add(w as u16);
                                scq.requester(q.qp_num(), counter, err, |at, b| {
                                    assert!(heap.write(at, b), "CQ reachable")
                                });
                            }
                        }
                        let s = Instant::now();
                        let got = reap_lap(q, &mut wc, cqes);
                        t += s.elapsed();
                        assert_eq!(got, kind.expect(first), "{}: ours reaped the lap", case.name);
                        assert_eq!(q.outstanding(), 0, "the lap is retired");
                        if kind == Kind::Error {
                            // The error left the QP in ERR: back to RESET and connected again.
                            q.reset().expect("reset");
                            q.connect_loopback(QpNum(0x124)).expect("connect");
                            // The control seam records transitions in a fixed table.
                            dev.control().transitions.clear();
                        }
                    }
                    ours.push(ns(t));
                } else {
                    for _ in 0..laps {
                        let first = wr_id;
                        let pi = cq.cur_post();
                        cq.post(PER_LAP, kind.batch() as u32, &sges, remote, wr_id);
                        wr_id += PER_LAP as u64;
                        for w in 0..PER_LAP {
                            if let Some(err) = kind.cqe(w) {
                                cq.complete(pi.wrapping_add(w as u32) as u16, err);
                            }
                        }
                        let s = Instant::now();
                        let got = cq.reap(cqes, &mut cwc);
                        t += s.elapsed();
                        assert_eq!(got, kind.expect(first), "{}: C reaped the lap", case.name);
                    }
                    c.push(ns(t));
                }
            }
        }
        black_box(wr_id);
        let (o, cc) = (bench_util::median(&mut ours), bench_util::median(&mut c));
        println!("{:<12} {:>6} {:>10.2} {:>10.2}", case.name, cqes, o, cc);
        ratios.push((case.name, o / cc));
        drop(qp);
        bench_util::forget_destroyed(&dev);
        dev.control().uars.truncate(base_uars);
    }
    for (name, rc) in &ratios {
        println!("ratio ours/c {name}: {rc:.3}");
    }
}

type OurQp<'d> =
    rdma_pmd_mlx5::Qp<'d, MemBar, SharedDma<std::sync::Arc<HeapDma>>, NullControl, SQ, 16>;

fn new_qp(dev: &Dev) -> OurQp<'_> {
    let mut qp = dev.create_qp::<SQ, 16>(&Default::default()).expect("create qp");
    qp.connect_loopback(QpNum(0x124)).expect("connect");
    qp
}

/// The device side of `qpn`'s send CQ.
fn send_cq(dev: &Dev, qpn: QpNum) -> CqWriter {
    let ctl = dev.control();
    CqWriter::new(ctl.qp(qpn).and_then(|p| ctl.cq(p.send_cq)).expect("send CQ recorded"))
}

/// Post one lap of writes of `bufs`, untimed: batches of `batch`, the last of each signalled.
fn post<'r, Q: SendQueue<'r>>(
    qp: &mut Q,
    bufs: &[LocalBuf<'r>],
    batch: usize,
    remote: RemoteBuf,
    wr_id: &mut u64,
) {
    for _ in 0..PER_LAP / batch {
        let mut b = qp.batch();
        for k in 0..batch {
            let flags = if k + 1 == batch { SendFlags::SIGNALED } else { SendFlags::empty() };
            b.post_writev(*wr_id, bufs, flags, remote).expect("post");
            *wr_id += 1;
        }
        b.commit();
    }
}

/// One timed lap of ours: poll, `NE` at a time, until `expected` completions are reaped (or
/// the queue stays empty for a bounded number of polls), consuming each as the C loop does.
#[inline(never)]
fn reap_lap<'r, Q: SendQueue<'r>>(qp: &mut Q, wc: &mut [Completion], expected: usize) -> Reaped {
    let mut r = Reaped::default();
    let mut idle = 0u32;
    while (r.n as usize) < expected {
        let Ok(n) = qp.poll(wc) else { break };
        if n == 0 {
            idle += 1;
            if idle > 1_000_000 {
                break;
            }
        }
        for c in &wc[..n] {
            r.wr_id_sum = r.wr_id_sum.wrapping_add(c.wr_id);
            r.errors += !c.status.is_ok() as u64;
        }
        r.n += n as u64;
    }
    r
}
