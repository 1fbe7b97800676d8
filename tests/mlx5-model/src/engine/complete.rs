//! Complete: the requester's CQEs. A `REQ` CQE for a signaled WQE that was acknowledged; an
//! error CQE (`REQ_ERR`, the reason's syndrome and vendor code) for one that failed, which
//! also moves the QP to ERR; a flush CQE (`WR_FLUSH_ERR`) for each WQE reached in ERR. Each is
//! written by [`cq::push`](crate::cq::push) (body, release fence, `op_own`).

use std::collections::BTreeMap;

use super::{Prepared, Request};
use crate::codes::{CqeOpcode, Syndrome};
use crate::counters::{bump, Reason};
use crate::cqe::CqeRepr;
use crate::model::Shared;
use crate::objects::{Cq, Device, QpState};

/// The `REQ` CQE of the acknowledged, signaled request `req` on QP `qpn`.
pub(crate) fn req_cqe(sh: &Shared, dev: &mut Device, qpn: u32, req: &Request) {
    let mut c = CqeRepr::new(CqeOpcode::Req, qpn);
    c.wqe_counter = req.idx;
    c.s_wqe_opcode = req.opcode;
    c.byte_cnt = req.byte_cnt;
    let cqn = dev.qps[&qpn].spec.send_cq;
    if let Some(cq) = dev.cqs.get_mut(&cqn) {
        if crate::cq::push(sh, cqn, cq, c) {
            bump(&sh.stats.req_cqes);
        }
    }
}

/// The oldest outstanding WQE of QP `qpn` failed with `r` (a NAK, retries exhausted, a
/// response that could not be placed): its error CQE, a flush CQE for every other
/// outstanding WQE in order, and the QP to ERR (the engine flushes the rest).
///
/// `note`: whether to log `r` here (a NAK from this same model is not: the responder's entry
/// already names the cause, and a failure is logged once per model).
pub(crate) fn fail_inflight(sh: &Shared, dev: &mut Device, qpn: u32, r: Reason, note: bool) {
    let Some(qp) = dev.qps.get_mut(&qpn) else { return };
    let mut rest = std::mem::take(&mut qp.req.inflight);
    qp.req = Default::default();
    let Some(first) = rest.pop_front() else {
        qp.state = QpState::Error;
        return;
    };
    if note {
        sh.note(qpn, Some(first.req.idx), r);
    }
    let _ = fail_unnoted(sh, dev, qpn, first.req.idx, first.req.opcode, r, 0);
    let Device { qps, cqs, .. } = dev;
    let Some(qp) = qps.get_mut(&qpn) else { return };
    for w in rest {
        flush_cqe(sh, cqs, qp.spec.send_cq, CqeOpcode::ReqErr, qpn, w.req.idx, w.req.opcode);
    }
    sh.kick();
}

/// Complete the WQE at `idx` in error with `r`'s syndrome, move the QP to ERR and step over
/// `adv` WQEBBs.
pub(super) fn fail(
    sh: &Shared,
    dev: &mut Device,
    qpn: u32,
    idx: u16,
    opcode: u8,
    r: Reason,
    adv: u32,
) -> Prepared {
    sh.note(qpn, Some(idx), r);
    fail_unnoted(sh, dev, qpn, idx, opcode, r, adv)
}

/// [`fail`] without the log entry.
fn fail_unnoted(
    sh: &Shared,
    dev: &mut Device,
    qpn: u32,
    idx: u16,
    opcode: u8,
    r: Reason,
    adv: u32,
) -> Prepared {
    bump(&sh.stats.wqes_failed);
    let Device { qps, cqs, .. } = dev;
    let Some(qp) = qps.get_mut(&qpn) else { return Prepared::Failed };
    qp.state = QpState::Error;
    // WQEs still on the wire were posted before this one: their flushes come first
    // (completions are in the order posted).
    super::flush::flush_inflight(sh, cqs, qp, qpn);
    qp.sq_pi = qp.sq_pi.wrapping_add(adv as u16);
    let syndrome = r.syndrome().expect("fatal reasons have a syndrome");
    let mut c = CqeRepr::new(CqeOpcode::ReqErr, qpn);
    c.wqe_counter = idx;
    c.s_wqe_opcode = opcode;
    c.syndrome = Some(syndrome);
    c.vendor_err = r.vendor_code();
    let cqn = qp.spec.send_cq;
    if let Some(cq) = cqs.get_mut(&cqn) {
        if crate::cq::push(sh, cqn, cq, c) {
            sh.stats.error_cqe(syndrome);
        }
    }
    Prepared::Failed
}

/// A flush CQE (`op`: `REQ_ERR` for a send WQE, `RESP_ERR` for a receive WQE) on CQ `cqn`.
pub(super) fn flush_cqe(
    sh: &Shared,
    cqs: &mut BTreeMap<u32, Cq>,
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
    c.syndrome = Some(Syndrome::WrFlush);
    if let Some(cq) = cqs.get_mut(&cqn) {
        if crate::cq::push(sh, cqn, cq, c) {
            sh.stats.error_cqe(Syndrome::WrFlush);
        }
    }
}
