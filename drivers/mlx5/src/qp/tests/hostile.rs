//! Two adversarial suites against the send path, each randomized from a seed and bounded for
//! CI; `RDMA_PMD_HOSTILE_CASES=N` runs N cases instead (and `RDMA_PMD_HOSTILE_SEED=S` starts
//! from seed S), printing what it exercised.
//!
//! * **Hostile caller**: everything safe code can do, in any order: batches committed,
//!   dropped or leaked with `mem::forget`, requests the queue must refuse (too many SGEs,
//!   remote ranges wrapping 2^64, messages above 2 GiB, buffers of a deregistered region,
//!   a full ring), deregistration attempts, counting a region busy behind the queue's back,
//!   polls into small arrays, a move to ERR. A reference predicts every outcome: each
//!   completion, the ring's occupancy, every region's in-flight count, which deregistrations
//!   succeed, and what is still counted once the QP is gone (only what was leaked).
//! * **Hostile device**: a benign caller, and a device that writes random CQEs on both CQs (any
//!   opcode, counter, QP number, syndrome, or plain garbage), rewrites posted WQEs and completes
//!   what was never posted. Invariants: no panic, no unbounded loop, no completion for a request
//!   that was not committed, none reported twice, and every region's count back at zero once
//!   the QP is dropped.

use rdma_pmd::RecvQueue;
use std::collections::{HashSet, VecDeque};
use std::vec::Vec;

use rdma_pmd::{
    Completion, Error, LocalBuf, Post, RemoteBuf, Rkey, SendFlags, SendQueue, Sge, WcStatus,
};

use super::{connected, rig, REMOTE};
use crate::control::Access;
use crate::layout::codes::{CqeOpcode, SendOpcode, Syndrome};
use crate::layout::cqe::Cqe;
use crate::testing::seeded::{self, Rng};

const SQ: usize = 16;
/// `max_sge` of a 16-block ring on the fake device (1 KiB WQEs): 63 units - 2.
const MAX_SGE: usize = 61;
const REGIONS: usize = 3;

/// A committed request as the reference sees it.
#[derive(Clone, Debug)]
struct Wr {
    id: u64,
    counter: u16,
    blocks: u16,
    signaled: bool,
    /// Regions held: one entry per run of non-empty buffers from the same region.
    holds: Vec<usize>,
}

/// One generated request: buffers as (region, offset, length), and what to break.
#[derive(Clone, Debug)]
struct Req {
    bufs: Vec<(usize, usize, usize)>,
    signaled: bool,
    inline: bool,
    fault: Fault,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    None,
    TooManySges,
    RemoteWraps,
    HugeRaw,
}

fn gen_req(rng: &mut Rng) -> Req {
    let fault = match rng.below(20) {
        0 => Fault::TooManySges,
        1 => Fault::RemoteWraps,
        2 => Fault::HugeRaw,
        _ => Fault::None,
    };
    let n = if fault == Fault::TooManySges {
        MAX_SGE + 1 + rng.below(3) as usize
    } else {
        rng.below(6) as usize
    };
    let bufs = (0..n)
        .map(|_| {
            let len = if rng.chance(150) { 0 } else { 1 + rng.below(40) as usize };
            (rng.below(REGIONS as u64) as usize, rng.below(64) as usize, len)
        })
        .collect();
    Req { bufs, signaled: rng.chance(400), inline: rng.chance(150), fault }
}

/// Blocks and held regions of a request the queue accepts.
fn shape(r: &Req) -> (u16, Vec<usize>) {
    let nonempty: Vec<_> = r.bufs.iter().filter(|b| b.2 != 0).collect();
    let ds = if r.inline {
        let len: usize = r.bufs.iter().map(|b| b.2).sum();
        2 + if len == 0 { 0 } else { (4 + len).div_ceil(16) }
    } else {
        2 + nonempty.len()
    };
    let mut holds = Vec::new();
    if !r.inline {
        for b in &nonempty {
            if holds.last() != Some(&b.0) {
                holds.push(b.0);
            }
        }
    }
    (ds.div_ceil(4) as u16, holds)
}

#[derive(Default, Debug)]
pub(super) struct Tally {
    cases: u64,
    posted: u64,
    refused: u64,
    completions: u64,
    leaked_batches: u64,
    deregs: u64,
}

#[test]
fn hostile_caller() {
    let (cases, seed0) = seeded::plan(64, 1);
    let mut t = Tally::default();
    for seed in seed0..seed0 + cases {
        caller_case(seed, &mut t);
        t.cases += 1;
    }
    std::eprintln!("hostile caller: {t:?}");
    assert!(t.completions > 0 && t.refused > 0 && t.leaked_batches > 0);
}

pub(super) fn caller_case(seed: u64, t: &mut Tally) {
    let mut rng = Rng(seed);
    let r = rig(9);
    let regions: [_; REGIONS] =
        core::array::from_fn(|_| r.dev.reg(4096, Access::LOCAL_WRITE).unwrap());
    // Buffers taken up front, so they outlive a deregistration: stale handles.
    let stale: [LocalBuf<'_>; REGIONS] = core::array::from_fn(|g| regions[g].as_buf().unwrap());
    let mut leaked = [0usize; REGIONS];
    let mut dereged = [false; REGIONS];
    let (mut qp, mut hw) = connected::<SQ>(&r);
    let mut live: VecDeque<Wr> = VecDeque::new();
    let mut executed = 0usize;
    let mut open = true;
    let mut in_error = false;
    let mut next_id = 0u64;
    let ops = 20 + rng.below(60);
    for step in 0..ops {
        let mut expect: Vec<(u64, WcStatus)> = Vec::new();
        match rng.below(14) {
            0..=6 => {
                let end = rng.below(10); // 0..=6 commit, 7..=8 drop, 9 forget
                let mut pi = qp.sq_pi();
                let reqs: Vec<Req> = (0..1 + rng.below(4)).map(|_| gen_req(&mut rng)).collect();
                let mut b = qp.batch();
                let mut pushed: Vec<Wr> = Vec::new();
                for req in &reqs {
                    let id = next_id;
                    next_id += 1;
                    let mut flags =
                        if req.signaled { SendFlags::SIGNALED } else { SendFlags::empty() };
                    if req.inline {
                        flags |= SendFlags::INLINE;
                    }
                    let sgl: Vec<LocalBuf<'_>> = req
                        .bufs
                        .iter()
                        .map(|&(g, off, len)| stale[g].slice(off, len).unwrap())
                        .collect();
                    let remote = if req.fault == Fault::RemoteWraps {
                        RemoteBuf::new(u64::MAX - rng.below(4), Rkey(9))
                    } else {
                        REMOTE
                    };
                    let res = if req.fault == Fault::HugeRaw {
                        let e = [Sge::new(
                            0x1000,
                            (1 << 31) + 1 + rng.below(1000) as u32,
                            regions[0].lkey(),
                        )];
                        // SAFETY: refused before it is written (the test checks), so the
                        // device never sees the element.
                        unsafe {
                            b.post(&rdma_pmd::SendRequest::write(
                                id,
                                rdma_pmd::Source::raw(&e),
                                flags - SendFlags::INLINE,
                                remote,
                                None,
                            ))
                        }
                    } else {
                        b.post_writev(id, &sgl, flags, remote)
                    };
                    let (blocks, holds) = shape(req);
                    let used: u16 = live.iter().chain(pushed.iter()).map(|w| w.blocks).sum();
                    let total: usize = req.bufs.iter().map(|b| b.2).sum();
                    let wraps = req.fault == Fault::RemoteWraps
                        && total as u64 > u64::MAX - remote.addr + 1;
                    let bad_key = !req.inline && holds.iter().any(|&g| dereged[g]);
                    let refused = !open
                        || req.fault == Fault::TooManySges
                        || req.fault == Fault::HugeRaw
                        || wraps
                        || bad_key
                        || (req.inline && total > 972)
                        || blocks > SQ as u16 - used;
                    if refused {
                        assert!(res.is_err(), "seed {seed} step {step}: {req:?} accepted");
                        if !open {
                            assert_eq!(res, Err(Error::NotConnected), "seed {seed}");
                        }
                        t.refused += 1;
                        continue;
                    }
                    assert_eq!(res, Ok(()), "seed {seed} step {step}: {req:?}");
                    pushed.push(Wr { id, counter: pi, blocks, signaled: req.signaled, holds });
                    pi = pi.wrapping_add(blocks);
                }
                match end {
                    0..=6 => {
                        b.commit();
                        t.posted += pushed.len() as u64;
                        live.extend(pushed);
                    }
                    7 | 8 => drop(b),
                    _ => {
                        core::mem::forget(b);
                        t.leaked_batches += 1;
                        for w in &pushed {
                            for &g in &w.holds {
                                leaked[g] += 1;
                            }
                        }
                    }
                }
            }
            7 | 8 if !in_error => {
                for w in live.iter().skip(executed) {
                    if w.signaled {
                        hw.send_cqe(w.counter, None);
                    }
                }
                executed = live.len();
                if let Some(last) = live.iter().rposition(|w| w.signaled) {
                    for w in live.drain(..=last) {
                        if w.signaled {
                            expect.push((w.id, WcStatus::Success));
                        }
                    }
                    executed -= last + 1;
                }
            }
            9 if !in_error && executed < live.len() && rng.chance(400) => {
                let first = executed;
                hw.send_cqe(live[first].counter, Some((Syndrome::RemoteAccessErr, 0x42)));
                for w in live.iter().skip(first + 1) {
                    hw.send_cqe(w.counter, Some((Syndrome::WrFlushErr, 0)));
                }
                for (k, w) in live.drain(..).enumerate() {
                    match k.cmp(&first) {
                        core::cmp::Ordering::Equal => expect.push((w.id, WcStatus::RemAccessErr)),
                        core::cmp::Ordering::Greater => expect.push((w.id, WcStatus::WrFlushErr)),
                        core::cmp::Ordering::Less => {}
                    }
                }
                executed = 0;
                in_error = true;
                open = false;
            }
            10 if rng.chance(500) => {
                let g = rng.below(REGIONS as u64) as usize;
                let held: usize =
                    live.iter().map(|w| w.holds.iter().filter(|&&h| h == g).count()).sum();
                let res = regions[g].dereg();
                if dereged[g] || held + leaked[g] == 0 {
                    assert_eq!(res, Ok(()), "seed {seed} step {step}: dereg {g}");
                    dereged[g] = true;
                    t.deregs += 1;
                } else {
                    let busy = (held + leaked[g]) as u32;
                    assert_eq!(res, Err(Error::RegionBusy { in_flight: busy }), "seed {seed}");
                }
            }
            11 => {
                // Safe code may count a region busy itself: a leak, never a shift.
                let g = rng.below(REGIONS as u64) as usize;
                let res = regions[g].usage().acquire();
                if dereged[g] {
                    assert_eq!(res, Err(Error::BadLkey));
                } else {
                    assert_eq!(res, Ok(()));
                    leaked[g] += 1;
                }
            }
            12 if open && rng.chance(200) => {
                qp.to_error().unwrap();
                // The device flushes what it did not execute, each with its own CQE; what it
                // executed unsignalled stays silent, retired by those flushes.
                for w in live.iter().skip(executed) {
                    hw.send_cqe(w.counter, Some((Syndrome::WrFlushErr, 0)));
                }
                if executed < live.len() {
                    for (k, w) in live.drain(..).enumerate() {
                        if k >= executed {
                            expect.push((w.id, WcStatus::WrFlushErr));
                        }
                    }
                    executed = 0;
                }
                open = false;
                in_error = true;
            }
            _ => {}
        }
        let mut got = Vec::new();
        let mut out = [Completion::default(); 4];
        let width = 1 + rng.below(4) as usize;
        for _ in 0..10_000 {
            let n = qp.poll(&mut out[..width]).unwrap();
            if n == 0 {
                break;
            }
            got.extend(out[..n].iter().map(|c| (c.wr_id, c.status)));
        }
        t.completions += got.len() as u64;
        assert_eq!(got, expect, "seed {seed} step {step}");
        assert_eq!(qp.outstanding() as usize, live.len(), "seed {seed} step {step}");
        for (g, region) in regions.iter().enumerate() {
            let held: usize =
                live.iter().map(|w| w.holds.iter().filter(|&&h| h == g).count()).sum();
            assert_eq!(
                region.usage().in_flight() as usize,
                held + leaked[g],
                "seed {seed} step {step} region {g}"
            );
        }
    }
    drop(qp);
    for (g, region) in regions.iter().enumerate() {
        assert_eq!(
            region.usage().in_flight() as usize,
            leaked[g],
            "seed {seed}: region {g} after drop"
        );
    }
}

#[test]
fn hostile_device() {
    let (cases, seed0) = seeded::plan(64, 1);
    let mut t = Tally::default();
    let mut bogus = 0u64;
    for seed in seed0..seed0 + cases {
        bogus += device_case(seed, &mut t);
        t.cases += 1;
    }
    std::eprintln!("hostile device: {t:?}, device faults reported: {bogus}");
    assert!(t.posted > 0 && bogus > 0);
}

/// Returns how many polls reported a device fault.
fn device_case(seed: u64, t: &mut Tally) -> u64 {
    let mut rng = Rng(seed ^ 0x5eed);
    let r = rig(9);
    let regions: [_; REGIONS] =
        core::array::from_fn(|_| r.dev.reg(4096, Access::LOCAL_WRITE).unwrap());
    let bufs: [LocalBuf<'_>; REGIONS] = core::array::from_fn(|g| regions[g].as_buf().unwrap());
    let mut faults = 0;
    {
        let (mut qp, mut hw) = connected::<SQ>(&r);
        // Every request committed, by wr_id, and every completion reported.
        let mut committed: HashSet<u64> = HashSet::new();
        let mut reported: HashSet<u64> = HashSet::new();
        let mut counters: Vec<u16> = Vec::new();
        let mut next_id = 0u64;
        let (mut recv_posted, mut recv_done) = (HashSet::new(), HashSet::new());
        let mut next_recv = 1u64 << 40;
        for _ in 0..40 + rng.below(80) {
            match rng.below(11) {
                0..=3 => {
                    let req = gen_req(&mut rng);
                    if req.fault != Fault::None {
                        continue;
                    }
                    let sgl: Vec<LocalBuf<'_>> = req
                        .bufs
                        .iter()
                        .map(|&(g, off, len)| bufs[g].slice(off, len).unwrap())
                        .collect();
                    let flags = if req.signaled { SendFlags::SIGNALED } else { SendFlags::empty() };
                    let pi = qp.sq_pi();
                    if qp.post_writev(next_id, &sgl, flags, REMOTE).is_ok() {
                        committed.insert(next_id);
                        counters.push(pi);
                        t.posted += 1;
                    }
                    next_id += 1;
                }
                4..=7 => {
                    // A CQE: often plausible, sometimes wrong in one field, sometimes garbage.
                    let mut b = [0u8; 64];
                    let counter = match (rng.below(4), counters.is_empty()) {
                        (0..=1, false) => counters[rng.below(counters.len() as u64) as usize],
                        _ => rng.next() as u16,
                    };
                    let op = match rng.below(8) {
                        0 => CqeOpcode::from(rng.below(16) as u8),
                        1 => CqeOpcode::ReqErr,
                        _ => CqeOpcode::Req,
                    };
                    if rng.chance(100) {
                        b.iter_mut().for_each(|x| *x = rng.next() as u8);
                    } else {
                        let mut c = Cqe::new_unchecked(&mut b[..]);
                        let qpn = if rng.chance(100) {
                            rdma_pmd::QpNum(rng.next() as u32 & 0xff_ffff)
                        } else {
                            hw.qpn()
                        };
                        c.set_s_wqe_opcode_qpn(SendOpcode::RdmaWrite, qpn);
                        c.set_wqe_counter(counter);
                        if op == CqeOpcode::ReqErr {
                            let syn = if rng.chance(500) {
                                Syndrome::WrFlushErr
                            } else {
                                Syndrome::RemoteAccessErr
                            };
                            c.set_error(syn, rng.next() as u8);
                        }
                    }
                    hw.send_cqe_raw(&b, op);
                }
                8 => {
                    // Rewrite some bytes of a posted WQE.
                    if let Some(&c) = counters.last() {
                        let bytes: Vec<u8> =
                            (0..1 + rng.below(16)).map(|_| rng.next() as u8).collect();
                        let off = rng.below(64 - bytes.len() as u64) as usize;
                        hw.scribble_sq(c, off, &bytes);
                    }
                }
                _ => {
                    // The receive side: a receive posted, or a receive CQE that may be wrong.
                    if rng.chance(500) {
                        if qp.post_recv_empty(next_recv).is_ok() {
                            recv_posted.insert(next_recv);
                        }
                        next_recv += 1;
                    } else {
                        let op = match rng.below(4) {
                            0 => CqeOpcode::from(rng.below(16) as u8),
                            _ => CqeOpcode::RespWrImm,
                        };
                        let other =
                            rng.chance(200).then(|| rdma_pmd::QpNum(rng.next() as u32 & 0xff_ffff));
                        hw.recv_cqe_with(rng.next() as u32, 8, op, |c| {
                            if let Some(q) = other {
                                c.set_s_wqe_opcode_qpn(SendOpcode::Nop, q);
                            }
                        });
                    }
                }
            }
            let mut rout = [Completion::default(); 4];
            for _ in 0..1000 {
                match qp.poll_recv(&mut rout) {
                    Ok(0) => break,
                    Ok(n) => {
                        for c in &rout[..n] {
                            assert!(recv_posted.contains(&c.wr_id), "seed {seed}: {c:?}");
                            assert!(recv_done.insert(c.wr_id), "seed {seed}: twice {c:?}");
                        }
                    }
                    Err(Error::Fault(_)) => faults += 1,
                    Err(e) => panic!("seed {seed}: {e:?}"),
                }
            }
            assert_eq!(qp.rq_outstanding() as usize, recv_posted.len() - recv_done.len());
            let mut out = [Completion::default(); 4];
            let mut bounded = false;
            for _ in 0..1000 {
                match qp.poll(&mut out) {
                    Ok(0) => {
                        bounded = true;
                        break;
                    }
                    Ok(n) => {
                        for c in &out[..n] {
                            assert!(
                                committed.contains(&c.wr_id),
                                "seed {seed}: never posted {c:?}"
                            );
                            assert!(reported.insert(c.wr_id), "seed {seed}: reported twice {c:?}");
                            t.completions += 1;
                        }
                    }
                    Err(Error::Fault(_)) => faults += 1,
                    Err(e) => panic!("seed {seed}: {e:?}"),
                }
            }
            assert!(bounded, "seed {seed}: poll kept producing");
            let left = committed.len() - reported.len();
            assert!(qp.outstanding() as usize <= left, "seed {seed}");
        }
    }
    for (g, region) in regions.iter().enumerate() {
        assert_eq!(region.usage().in_flight(), 0, "seed {seed}: region {g} after drop");
    }
    faults
}
