//! The engine thread: executes send WQEs the way the HCA's send pipeline does.
//!
//! # Scheduling
//!
//! The thread spins briefly after work, then parks for at most [`PARK`]; a doorbell (or a
//! command that needs it) unparks it. Every [`PARK`] it also rescans for time-driven work
//! (RNR retries, receive queues of QPs in ERR), so an idle model costs a wake-up per
//! millisecond and no busy core.
//!
//! # Per doorbell
//!
//! Each doorbell carries the send counter that `dbrec[1]` held when it was rung. The engine
//! executes the WQEs from its own counter up to that value, in order:
//!
//! 1. fetch block 0 at slot `counter & (sq_cnt - 1)`, read DS, fetch the other
//!    `ceil(ds*16/64) - 1` blocks from the following slots (wrapping to slot 0);
//! 2. for the last WQE of the doorbell, compare its first 8 bytes with the doorbell, and for a
//!    BlueFlame doorbell execute the BlueFlame copy (and note if the ring differs);
//! 3. validate (see *Validation*) and gather the payload through the lkeys;
//! 4. deliver the message to the responder (same model, or across the [`Wire`](crate::Wire));
//! 5. complete: a `REQ` CQE if the WQE asked for one (`fm_ce_se & 0x08`), or an error CQE
//!    and the QP to ERR.
//!
//! In ERR every WQE up to each doorbell's counter gets a flush CQE (`REQ_ERR`, syndrome
//! `WR_FLUSH_ERR`), one per WQE, signaled or not; posted receive WQEs get `RESP_ERR` flushes.
//!
//! # Validation
//!
//! Control segment: opmod 0; opcode 0x08 or 0x09 (else `LOCAL_QP_OP_ERR`, 0x02); WQE index =
//! the HCA's counter; QPN = this QP; DS ≥ 2 and DS × 16 ≤ `max_wqe_sz_sq`; the WQE ends at or
//! before the doorbell record's counter (all 0x02). Notes for reserved bits (`qpn_ds` 7:6,
//! `fm_ce_se` bits 4 and 0), a non-zero signature (no `wq_sig` QPs) and a non-zero
//! `dci_stream_channel_id`; for the remote address segment's reserved word.
//!
//! Data: each 16-byte unit after the first two starts a pointer segment or an inline
//! segment; an inline payload must end inside DS (0x02); a pointer `byte_count` of 0 counts as
//! 2^31 bytes; the total must not exceed 2^31 (`LOCAL_LENGTH_ERR`, 0x01); each lkey must exist,
//! be in the QP's PD and cover its range (`LOCAL_PROT_ERR`, 0x04), and its translation must
//! reach DMA memory (0x04 with the DMA-fault vendor code). The remote side is checked by the
//! [`responder`](crate::responder).
//!
//! # RNR
//!
//! An RNR NAK (WRITE WITH IMMEDIATE, no receive WQE) stalls the send queue at that WQE. It is
//! retried every [`RNR_DELAY`]; after `rnr_retry` retries (7 = forever) it completes with
//! `RNR_RETRY_EXC_ERR` (0x16) and the QP moves to ERR. Nothing is written before the NAK.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_pmd::BusAddr;

use crate::be::get16;
use crate::codes::{CqeOpcode, SendOpcode};
use crate::counters::{bump, Reason};
use crate::cqe::CqeRepr;
use crate::model::Shared;
use crate::objects::{Device, Qp, QpState, RnrWait, Route};
use crate::responder::{respond, Packet, Resp};
use crate::wqe::{wqebbs, CtrlSeg, DataSeg, RaddrSeg, DS_UNIT, MAX_MSG, WQEBB};

/// Longest park of an idle engine.
pub const PARK: Duration = Duration::from_millis(1);
/// Spins after the last work before parking.
const SPINS: u32 = 256;
/// Delay between RNR retries (the model's `min_rnr_timer`).
pub const RNR_DELAY: Duration = Duration::from_millis(1);

/// The thread's body.
pub(crate) fn run(sh: &Arc<Shared>) {
    let mut idle = 0u32;
    let mut last_scan = Instant::now();
    while !sh.stop.load(Ordering::Acquire) {
        let woke = sh.work.swap(false, Ordering::AcqRel);
        if woke || last_scan.elapsed() >= PARK {
            sh.busy.store(true, Ordering::Release);
            let progress = pass(sh);
            sh.busy.store(false, Ordering::Release);
            last_scan = Instant::now();
            if woke || progress {
                idle = 0;
                continue;
            }
        }
        idle = idle.saturating_add(1);
        if idle < SPINS {
            std::hint::spin_loop();
        } else {
            std::thread::park_timeout(PARK);
        }
    }
}

/// One pass over every QP with work. True if anything happened.
fn pass(sh: &Arc<Shared>) -> bool {
    let qpns: Vec<u32> = {
        let dev = sh.dev();
        let mut v: Vec<u32> = dev.ready.iter().copied().collect();
        v.extend(
            dev.qps
                .iter()
                .filter(|(n, q)| {
                    !dev.ready.contains(n)
                        && ((q.state == QpState::Error && q.log_rq_size.is_some())
                            || q.rnr.is_some())
                })
                .map(|(n, _)| *n),
        );
        v
    };
    let mut progress = false;
    for qpn in qpns {
        progress |= service(sh, qpn);
    }
    progress
}

fn done_doorbell(sh: &Shared) {
    sh.outstanding.fetch_sub(1, Ordering::AcqRel);
}

/// A WQE ready to go on the wire.
struct Request {
    idx: u16,
    wqebbs: u32,
    opcode: u8,
    signaled: bool,
    gen: u64,
    route: Route,
    packet: Packet,
}

enum Prepared {
    /// Completed in error already.
    Failed,
    Send(Box<Request>),
}

/// Run QP `qpn` as far as it goes now.
fn service(sh: &Arc<Shared>, qpn: u32) -> bool {
    let mut progress = false;
    loop {
        let prepared = {
            let mut guard = sh.dev();
            let dev = &mut *guard;
            let Some(qp) = dev.qps.get_mut(&qpn) else {
                dev.ready.remove(&qpn);
                return progress;
            };
            match qp.state {
                QpState::Error => {
                    progress |= flush(sh, dev, qpn);
                    return progress;
                }
                QpState::Rts => {}
                _ => {
                    let n = qp.pending.len();
                    qp.pending.clear();
                    dev.ready.remove(&qpn);
                    drop(guard);
                    for _ in 0..n {
                        done_doorbell(sh);
                        bump(&sh.stats.ignored_doorbells);
                        sh.note(qpn, None, Reason::DoorbellQpNotReady { qpn });
                    }
                    return progress;
                }
            }
            let Some(db) = qp.pending.front() else {
                dev.ready.remove(&qpn);
                return progress;
            };
            let covered = u32::from(db.target.wrapping_sub(qp.sq_pi));
            if covered == 0 {
                let db = qp.pending.pop_front().expect("front exists");
                drop(guard);
                done_doorbell(sh);
                if !db.synthetic && !db.touched {
                    sh.note(qpn, None, Reason::DoorbellNothingNew { qpn });
                }
                progress = true;
                continue;
            }
            if covered > qp.sq_cnt() {
                let from = qp.sq_pi;
                let db = qp.pending.pop_front().expect("front exists");
                drop(guard);
                done_doorbell(sh);
                bump(&sh.stats.ignored_doorbells);
                sh.note(qpn, None, Reason::DoorbellRecordJump { from, to: db.target });
                progress = true;
                continue;
            }
            if let Some(r) = qp.rnr {
                if Instant::now() < r.next {
                    return progress;
                }
            }
            prepare(sh, dev, qpn, covered)
        };
        progress = true;
        if let Prepared::Send(req) = prepared {
            let resp = deliver(sh, &req);
            finish(sh, qpn, &req, resp);
        }
    }
}

/// Fetch, check and gather the WQE at the QP's counter. Called with the device lock held.
fn prepare(sh: &Shared, dev: &mut Device, qpn: u32, covered: u32) -> Prepared {
    let qp = dev.qps.get_mut(&qpn).expect("caller checked");
    let idx = qp.sq_pi;
    let mut first = [0u8; WQEBB];
    let at = qp.sq_slot(u32::from(idx));
    if !sh.dma.read(BusAddr(at), &mut first) {
        let r = Reason::DmaFault { bus: at, len: WQEBB as u64 };
        return fail(sh, dev, qpn, idx, 0, r, 1);
    }
    let ds = first[7] & 0x3f;
    let n = wqebbs(ds);
    if n > covered {
        let r = Reason::WqePastDoorbellRecord { wqebbs: n, covered };
        return fail(sh, dev, qpn, idx, first[3], r, covered);
    }
    let mut wqe = Vec::with_capacity(n as usize * WQEBB);
    wqe.extend_from_slice(&first);
    for i in 1..n {
        let at = qp.sq_slot(u32::from(idx) + i);
        let mut blk = [0u8; WQEBB];
        if !sh.dma.read(BusAddr(at), &mut blk) {
            let r = Reason::DmaFault { bus: at, len: WQEBB as u64 };
            return fail(sh, dev, qpn, idx, first[3], r, n);
        }
        wqe.extend_from_slice(&blk);
    }
    let db = qp.pending.front_mut().expect("caller checked");
    db.touched = true;
    let mut notes = Vec::new();
    let last = idx.wrapping_add(n as u16) == db.target;
    if last && !db.synthetic {
        let db_idx = get16(&db.head, 1);
        if db.head[..] != wqe[..8] {
            notes.push(if db_idx != idx {
                Reason::DoorbellNotLastWqe { index: db_idx }
            } else {
                Reason::DoorbellMismatch { index: db_idx }
            });
        }
        if let Some(bf) = db.bf.as_ref().filter(|_| db_idx == idx) {
            let len = usize::from(bf[7] & 0x3f) * DS_UNIT;
            let len = len.min(bf.len()).min(wqe.len());
            if bf[..len] != wqe[..len] {
                notes.push(Reason::BlueFlameRingMismatch { index: idx });
            }
            // The HCA executes the BlueFlame copy and does not fetch the WQE.
            wqe = bf.clone();
            bump(&sh.stats.wqes_from_blueflame);
        }
    }
    for r in notes {
        sh.note(qpn, Some(idx), r);
    }
    match validate(sh, dev, qpn, idx, &wqe) {
        Ok(req) => Prepared::Send(Box::new(req)),
        Err((r, n)) => fail(sh, dev, qpn, idx, wqe[3], r, n),
    }
}

/// Check every field of the WQE at `idx` (module docs, *Validation*) and gather its payload.
/// `Err` carries the fatal reason and the WQEBBs to step over.
fn validate(
    sh: &Shared,
    dev: &Device,
    qpn: u32,
    idx: u16,
    wqe: &[u8],
) -> Result<Request, (Reason, u32)> {
    let qp = &dev.qps[&qpn];
    let ctrl = CtrlSeg::new_checked(wqe).expect("a WQE has one WQEBB at least");
    let ds = ctrl.ds();
    let n = wqebbs(ds);
    let err = |r: Reason| Err((r, n));
    if ctrl.opmod() != 0 {
        return err(Reason::BadOpmod { opmod: ctrl.opmod() });
    }
    let with_imm = match ctrl.opcode() {
        SendOpcode::RdmaWrite => false,
        SendOpcode::RdmaWriteImm => true,
        _ => return err(Reason::UnsupportedOpcode { opcode: ctrl.opcode_raw() }),
    };
    if ctrl.wqe_index() != idx {
        return err(Reason::WrongWqeIndex { expected: idx, found: ctrl.wqe_index() });
    }
    if ctrl.qpn() != qpn {
        return err(Reason::WrongQpn { expected: qpn, found: ctrl.qpn() });
    }
    if ds < 2 {
        return err(Reason::DsTooSmall { ds });
    }
    let bytes = u32::from(ds) * DS_UNIT as u32;
    if bytes > dev.caps.max_wqe_sz_sq || n > qp.sq_cnt() {
        return err(Reason::WqeTooLarge { bytes });
    }
    let mut notes = Vec::new();
    if ctrl.ds_reserved() != 0 {
        notes.push(Reason::Reserved { what: "qpn_ds bits 7:6" });
    }
    if ctrl.signature() != 0 {
        notes.push(Reason::Reserved { what: "signature (QP has no wq_sig)" });
    }
    if ctrl.stream_channel() != 0 {
        notes.push(Reason::Reserved { what: "dci_stream_channel_id (RC)" });
    }
    if ctrl.fm_ce_se() & 0x11 != 0 {
        notes.push(Reason::Reserved { what: "fm_ce_se bits 4 and 0" });
    }
    let raddr = RaddrSeg::new_checked(&wqe[16..32]).expect("ds >= 2");
    if raddr.reserved() != 0 {
        notes.push(Reason::Reserved { what: "raddr segment bytes 12..16" });
    }
    for r in notes {
        sh.note(qpn, Some(idx), r);
    }

    // Walk the data segments (units 2..ds).
    let mut gathers = Vec::new();
    let mut total: u64 = 0;
    let mut unit = 2usize;
    let ds = usize::from(ds);
    while unit < ds {
        let seg = DataSeg::new_checked(&wqe[unit * DS_UNIT..]).expect("inside the WQE");
        if seg.is_inline() {
            let len = seg.inline_len();
            let units = (4 + len).div_ceil(DS_UNIT);
            if unit + units > ds {
                return err(Reason::InlineOverrun { len: len as u32, ds: ds as u8 });
            }
            let start = unit * DS_UNIT + 4;
            gathers.push(Gather::Inline(start, len));
            total += len as u64;
            unit += units;
        } else {
            total += seg.length();
            gathers.push(Gather::Pointer { lkey: seg.lkey(), addr: seg.addr(), len: seg.length() });
            unit += 1;
        }
    }
    if total > MAX_MSG {
        return Err((Reason::MessageTooLong { len: total }, n));
    }
    for g in &gathers {
        if let Gather::Pointer { lkey, addr, len } = *g {
            let Some(mk) = dev.mkeys.get(&lkey) else { return err(Reason::UnknownLkey { lkey }) };
            if mk.pd != qp.pd {
                return err(Reason::LkeyPdMismatch { lkey });
            }
            if !mk.covers(addr, len) {
                return err(Reason::LkeyOutOfBounds { lkey, addr, len });
            }
            let bus = mk.bus(addr);
            if sh.dma.translate(BusAddr(bus), len as usize).is_none() {
                return err(Reason::DmaFault { bus, len });
            }
        }
    }
    // One zeroed allocation, then each gather copied into place.
    let mut payload = vec![0u8; total as usize];
    let mut at = 0usize;
    for g in gathers {
        match g {
            Gather::Inline(start, len) => {
                payload[at..at + len].copy_from_slice(&wqe[start..start + len]);
                at += len;
            }
            Gather::Pointer { lkey, addr, len } => {
                let bus = dev.mkeys[&lkey].bus(addr);
                let end = at + len as usize;
                if !sh.dma.read(BusAddr(bus), &mut payload[at..end]) {
                    return err(Reason::DmaFault { bus, len });
                }
                at = end;
            }
        }
    }

    let mtu = qp.mtu;
    let npkts = (payload.len() as u32).div_ceil(mtu).max(1);
    let src_gid = match qp.route {
        Route::Loopback => None,
        Route::RoceV2 { sgid_index, .. } => {
            sh.gids.get(usize::from(sgid_index)).map(|g| (g.gid, g.mac))
        }
    };
    Ok(Request {
        idx,
        wqebbs: n,
        opcode: ctrl.opcode_raw(),
        signaled: ctrl.signaled(),
        gen: qp.gen,
        route: qp.route,
        packet: Packet {
            src_model: sh.id,
            src_gid,
            src_qpn: qpn,
            dst_qpn: qp.remote_qpn,
            psn: qp.npsn,
            npkts,
            mtu,
            with_imm,
            raddr: raddr.raddr(),
            rkey: raddr.rkey(),
            payload,
            imm: ctrl.imm(),
        },
    })
}

enum Gather {
    /// Offset in the WQE and length.
    Inline(usize, usize),
    Pointer {
        lkey: u32,
        addr: u64,
        len: u64,
    },
}

/// Put the message on the path. No lock is held.
fn deliver(sh: &Arc<Shared>, req: &Request) -> Resp {
    let target = match req.route {
        Route::Loopback => Some(sh.clone()),
        Route::RoceV2 { dgid, dmac, .. } => match sh.own_gid(&dgid) {
            Some(mac) if mac == dmac => Some(sh.clone()),
            Some(_) => None,
            None => sh.wire.as_ref().and_then(|w| w.route(&dgid, &dmac)),
        },
    };
    match target {
        Some(t) => respond(&t, &req.packet),
        None => Resp::Fail(Reason::NoRoute),
    }
}

/// Apply the responder's answer.
fn finish(sh: &Shared, qpn: u32, req: &Request, resp: Resp) {
    let mut guard = sh.dev();
    let dev = &mut *guard;
    let Some(qp) = dev.qps.get_mut(&qpn) else { return };
    if qp.gen != req.gen {
        return; // reset or destroyed meanwhile
    }
    match resp {
        Resp::Ack => {
            qp.npsn = qp.npsn.wrapping_add(req.packet.npkts) & 0x00ff_ffff;
            qp.rnr = None;
            qp.sq_pi = qp.sq_pi.wrapping_add(req.wqebbs as u16);
            bump(&sh.stats.wqes_executed);
            if req.signaled {
                let mut c = CqeRepr::new(CqeOpcode::Req, qpn);
                c.wqe_counter = req.idx;
                c.s_wqe_opcode = req.opcode;
                c.byte_cnt = req.packet.payload.len() as u32;
                let cqn = qp.send_cq;
                if let Some(cq) = dev.cqs.get_mut(&cqn) {
                    if crate::cq::push(sh, cqn, cq, c) {
                        bump(&sh.stats.req_cqes);
                    }
                }
            }
        }
        Resp::Rnr => {
            let left = match qp.rnr {
                Some(r) => r.left,
                None if qp.rnr_retry == 7 => None,
                None => Some(qp.rnr_retry),
            };
            match left {
                Some(0) => {
                    let r = Reason::RnrRetryExceeded { qpn: req.packet.dst_qpn };
                    fail(sh, dev, qpn, req.idx, req.opcode, r, req.wqebbs);
                }
                _ => {
                    qp.rnr = Some(RnrWait {
                        next: Instant::now() + RNR_DELAY,
                        left: left.map(|l| l - 1),
                    });
                }
            }
        }
        Resp::Fail(r) => {
            fail(sh, dev, qpn, req.idx, req.opcode, r, req.wqebbs);
        }
    }
}

/// Complete the WQE at `idx` in error with `r`'s syndrome, move the QP to ERR and step over
/// `adv` WQEBBs.
fn fail(
    sh: &Shared,
    dev: &mut Device,
    qpn: u32,
    idx: u16,
    opcode: u8,
    r: Reason,
    adv: u32,
) -> Prepared {
    sh.note(qpn, Some(idx), r);
    bump(&sh.stats.wqes_failed);
    let Device { qps, cqs, .. } = dev;
    let Some(qp) = qps.get_mut(&qpn) else { return Prepared::Failed };
    qp.state = QpState::Error;
    qp.rnr = None;
    qp.sq_pi = qp.sq_pi.wrapping_add(adv as u16);
    let syndrome = r.syndrome().expect("fatal reasons have a syndrome");
    let mut c = CqeRepr::new(CqeOpcode::ReqErr, qpn);
    c.wqe_counter = idx;
    c.s_wqe_opcode = opcode;
    c.syndrome = Some(syndrome);
    c.vendor_err = r.vendor_code();
    let cqn = qp.send_cq;
    if let Some(cq) = cqs.get_mut(&cqn) {
        if crate::cq::push(sh, cqn, cq, c) {
            sh.stats.error_cqe(syndrome);
        }
    }
    Prepared::Failed
}

/// Flush a QP in ERR: every send WQE up to each pending doorbell, every posted receive WQE.
/// True if anything was flushed.
fn flush(sh: &Shared, dev: &mut Device, qpn: u32) -> bool {
    let Device { qps, cqs, ready, .. } = dev;
    let Some(qp) = qps.get_mut(&qpn) else { return false };
    let mut did = false;
    while let Some(db) = qp.pending.pop_front() {
        did = true;
        let mut covered = u32::from(db.target.wrapping_sub(qp.sq_pi));
        if covered > qp.sq_cnt() {
            sh.note(qpn, None, Reason::DoorbellRecordJump { from: qp.sq_pi, to: db.target });
            covered = 0;
        }
        while covered > 0 {
            let mut ctrl = [0u8; 16];
            let at = qp.sq_slot(u32::from(qp.sq_pi));
            let (opcode, n) = if sh.dma.read(BusAddr(at), &mut ctrl) {
                (ctrl[3], wqebbs(ctrl[7] & 0x3f).min(covered))
            } else {
                sh.note(qpn, Some(qp.sq_pi), Reason::DmaFault { bus: at, len: 16 });
                (0, 1)
            };
            flush_cqe(sh, cqs, qp.send_cq, CqeOpcode::ReqErr, qpn, qp.sq_pi, opcode);
            qp.sq_pi = qp.sq_pi.wrapping_add(n as u16);
            covered -= n;
        }
        done_doorbell(sh);
    }
    ready.remove(&qpn);
    if qp.log_rq_size.is_some() {
        if let Some(rec) = sh.read_be32(qp.dbrec) {
            let posted = u32::from((rec as u16).wrapping_sub(qp.rq_ci));
            if posted <= qp.rq_cnt() {
                for _ in 0..posted {
                    flush_cqe(sh, cqs, qp.recv_cq, CqeOpcode::RespErr, qpn, qp.rq_ci, 0);
                    qp.rq_ci = qp.rq_ci.wrapping_add(1);
                    did = true;
                }
            }
        }
    }
    did
}

fn flush_cqe(
    sh: &Shared,
    cqs: &mut std::collections::BTreeMap<u32, crate::objects::Cq>,
    cqn: u32,
    op: CqeOpcode,
    qpn: u32,
    idx: u16,
    opcode: u8,
) {
    bump(&sh.stats.wqes_flushed);
    let mut c = CqeRepr::new(op, qpn);
    c.wqe_counter = idx;
    c.s_wqe_opcode = opcode;
    c.syndrome = Some(crate::codes::Syndrome::WrFlush);
    if let Some(cq) = cqs.get_mut(&cqn) {
        if crate::cq::push(sh, cqn, cq, c) {
            sh.stats.error_cqe(crate::codes::Syndrome::WrFlush);
        }
    }
}

/// Called by commands when a QP enters ERR: flush what the send doorbell record already
/// covers, even without a further doorbell.
pub(crate) fn flush_on_error(
    sh: &Shared,
    qp: &mut Qp,
    qpn: u32,
    dev_ready: &mut std::collections::BTreeSet<u32>,
) {
    if let Some(rec) = sh.read_be32(qp.dbrec + 4) {
        qp.pending.push_back(crate::objects::Doorbell {
            head: [0; 8],
            target: rec as u16,
            bf: None,
            synthetic: true,
            touched: false,
        });
        sh.outstanding.fetch_add(1, Ordering::AcqRel);
    }
    dev_ready.insert(qpn);
}
