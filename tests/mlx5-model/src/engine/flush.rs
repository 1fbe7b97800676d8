//! Flush: a QP in ERR completes every outstanding send WQE with a flush CQE, one per WQE,
//! signaled or not, and every posted receive WQE with a `RESP_ERR` flush.
//!
//! IBTA vol 1 §10.3.1 and §11.6.2 (and rxe `rxe_comp.c` `flush_send_queue`): in ERR every
//! work request not yet completed completes with `WR_FLUSH_ERR`, in the order posted. The
//! send WQEs already on the wire waiting for an ACK or a response (the requester's
//! outstanding list, oldest first) come first, then those the engine never started (from its
//! counter up to each doorbell's). The outstanding list is emptied as it is flushed, so a
//! late ACK or response finds nothing to complete (and a QP not in RTS drops it anyway).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;

use rdma_pmd::BusAddr;

use super::complete::flush_cqe;
use super::done_doorbell;
use crate::codes::CqeOpcode;
use crate::counters::Reason;
use crate::model::Shared;
use crate::objects::{Cq, Device, Doorbell, Qp};
use crate::wqe::wqebbs;

/// Flush a QP in ERR: every send WQE on the wire, then every one up to each pending
/// doorbell, then every posted receive WQE. True if anything was flushed.
pub(super) fn flush(sh: &Shared, dev: &mut Device, qpn: u32) -> bool {
    let Device { qps, cqs, ready, .. } = dev;
    let Some(qp) = qps.get_mut(&qpn) else { return false };
    let mut did = flush_inflight(sh, cqs, qp, qpn);
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
            flush_cqe(sh, cqs, qp.spec.send_cq, CqeOpcode::ReqErr, qpn, qp.sq_pi, opcode);
            qp.sq_pi = qp.sq_pi.wrapping_add(n as u16);
            covered -= n;
        }
        done_doorbell(sh);
    }
    ready.remove(&qpn);
    if qp.spec.log_rq_size.is_some() {
        if let Some(rec) = sh.read_be32(qp.spec.dbrec) {
            let posted = u32::from((rec as u16).wrapping_sub(qp.rq_ci));
            if posted <= qp.rq_cnt() {
                for _ in 0..posted {
                    flush_cqe(sh, cqs, qp.spec.recv_cq, CqeOpcode::RespErr, qpn, qp.rq_ci, 0);
                    qp.rq_ci = qp.rq_ci.wrapping_add(1);
                    did = true;
                }
            }
        }
    }
    did
}

/// Flush the WQEs on the wire, oldest first, and forget the requester's state (timers,
/// retry counts): nothing is left for an ACK, a response or a timer to complete. True if
/// any was flushed.
pub(super) fn flush_inflight(
    sh: &Shared,
    cqs: &mut BTreeMap<u32, Cq>,
    qp: &mut Qp,
    qpn: u32,
) -> bool {
    let outstanding = std::mem::take(&mut qp.req.inflight);
    qp.req = Default::default();
    let did = !outstanding.is_empty();
    for w in outstanding {
        flush_cqe(sh, cqs, qp.spec.send_cq, CqeOpcode::ReqErr, qpn, w.req.idx, w.req.opcode);
    }
    did
}

/// Called by commands when a QP enters ERR: flush what the send doorbell record already
/// covers, even without a further doorbell.
pub(crate) fn flush_on_error(sh: &Shared, qp: &mut Qp, qpn: u32, dev_ready: &mut BTreeSet<u32>) {
    if let Some(rec) = sh.read_be32(qp.spec.dbrec + 4) {
        qp.pending.push_back(Doorbell {
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
