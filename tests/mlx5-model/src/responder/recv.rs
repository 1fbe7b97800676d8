//! Receive WQEs at the responder: taking the next one, scattering a message into it, and its
//! CQE.
//!
//! A receive WQE is `1 << log_rq_stride` bytes of 16-byte data segments (`struct
//! mlx5_wqe_data_seg`: `byte_count`, `lkey`, `addr`, big-endian), in the receive ring at
//! offset 0 of the QP buffer; the HCA's counter `rq_ci` names the next one, `dbrec[0]` how
//! far software has posted. A segment whose lkey is `MLX5_INVALID_LKEY` (0x100) ends the list
//! early (rdma-core `mlx5_post_recv` writes one after the last SGE when the WQE has room). A
//! `byte_count` of 0 means 2^31 bytes, as in a send data segment; bit 31 set is no receive
//! segment (there is no inline data in a receive WQE).
//!
//! The message (a datagram's 40-byte network header first, then the payload) is scattered
//! in order. Each entry's lkey is checked as the data reaches it, as a responder walks its
//! list (rxe `copy_data`): it must exist, be in the QP's PD, grant local write, cover the
//! bytes placed there and translate. A message longer than the whole list is refused before
//! anything is written. Any failure completes the receive WQE in error (`RESP_ERR` with
//! [`Reason::receiver_syndrome`]) and moves the receiving QP to ERR.

use std::collections::BTreeMap;

use rdma_pmd::BusAddr;

use crate::be::get32;
use crate::codes::CqeOpcode;
use crate::counters::{bump, Reason};
use crate::cqe::CqeRepr;
use crate::model::Shared;
use crate::objects::{Cq, Mkey, Qp, QpState};
use crate::wqe::{DataSeg, DS_UNIT, INLINE_FLAG};

/// `MLX5_INVALID_LKEY`: ends a receive WQE's scatter list.
pub const INVALID_LKEY: u32 = 0x100;

/// One receive WQE: its index and its scatter list (lkey, address, length).
#[derive(Clone, Debug)]
pub(crate) struct RecvWqe {
    pub idx: u16,
    pub segs: Vec<(u32, u64, u64)>,
    /// A segment had bit 31 of its byte count set: nothing can be scattered into the WQE
    /// (WRITE WITH IMMEDIATE, which scatters nothing, still consumes it).
    pub malformed: bool,
}

impl RecvWqe {
    /// Bytes the scatter list holds.
    pub fn room(&self) -> u64 {
        self.segs.iter().map(|s| s.2).sum()
    }
}

/// The next posted receive WQE of `qp` (not consumed): `Ok(None)` if none is posted.
pub(crate) fn next(sh: &Shared, qp: &Qp, qpn: u32) -> Result<Option<RecvWqe>, Reason> {
    if qp.rq_posted(sh) == 0 {
        return Ok(None);
    }
    let at = qp.rq_slot();
    let mut wqe = vec![0u8; 1 << qp.spec.log_rq_stride];
    if !sh.dma.read(BusAddr(at), &mut wqe) {
        sh.note(qpn, Some(qp.rq_ci), Reason::DmaFault { bus: at, len: wqe.len() as u64 });
        return Err(Reason::RecvWqeFault { qpn });
    }
    let mut segs = Vec::new();
    let mut malformed = false;
    for chunk in wqe.chunks_exact(DS_UNIT) {
        let seg = DataSeg::new_checked(chunk).expect("16 bytes");
        if seg.lkey() == INVALID_LKEY {
            break;
        }
        malformed |= get32(chunk, 0) & INLINE_FLAG != 0;
        segs.push((seg.lkey(), seg.addr(), seg.length()));
    }
    Ok(Some(RecvWqe { idx: qp.rq_ci, segs, malformed }))
}

/// Scatter `parts`, one after the other, into `wqe`'s list. Returns the bytes placed.
pub(crate) fn scatter(
    sh: &Shared,
    mkeys: &BTreeMap<u32, Mkey>,
    qp: &Qp,
    qpn: u32,
    wqe: &RecvWqe,
    parts: &[&[u8]],
) -> Result<u64, Reason> {
    if wqe.malformed {
        return Err(Reason::RecvMalformed { qpn });
    }
    let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
    if len > wqe.room() {
        return Err(Reason::RecvTooShort { qpn, len, room: wqe.room() });
    }
    let mut bytes = parts.iter().flat_map(|p| p.iter().copied());
    let mut left = len;
    let mut buf = Vec::new();
    for &(lkey, addr, seg_len) in &wqe.segs {
        if left == 0 {
            break;
        }
        let n = seg_len.min(left);
        let Some(mk) = mkeys.get(&lkey) else { return Err(Reason::RecvBadLkey { qpn, lkey }) };
        if mk.pd != qp.spec.pd {
            return Err(Reason::RecvBadLkey { qpn, lkey });
        }
        if !mk.rights.local_write {
            return Err(Reason::RecvNoLocalWrite { qpn, lkey });
        }
        if !mk.covers(addr, n) {
            return Err(Reason::RecvBadLkey { qpn, lkey });
        }
        buf.clear();
        buf.extend(bytes.by_ref().take(n as usize));
        if let Err(bus) = mk.write(&*sh.dma, addr, &buf) {
            sh.note(qpn, Some(wqe.idx), Reason::RemoteDmaFault { bus, len: n });
            return Err(Reason::RecvBadLkey { qpn, lkey });
        }
        left -= n;
    }
    sh.stats.bytes_written.fetch_add(len, std::sync::atomic::Ordering::Relaxed);
    Ok(len)
}

/// What a successful responder CQE reports.
pub(crate) struct Done {
    pub opcode: CqeOpcode,
    pub byte_cnt: u32,
    pub imm: [u8; 4],
    pub rqpn: u32,
    pub flags: u8,
}

/// Consume the receive WQE `idx` of `qp` and write its CQE on the QP's receive CQ.
pub(crate) fn complete(
    sh: &Shared,
    cqs: &mut BTreeMap<u32, Cq>,
    qp: &mut Qp,
    qpn: u32,
    idx: u16,
    d: Done,
) {
    qp.rq_ci = qp.rq_ci.wrapping_add(1);
    bump(&sh.stats.recv_consumed);
    let mut c = CqeRepr::new(d.opcode, qpn);
    c.wqe_counter = idx;
    c.byte_cnt = d.byte_cnt;
    c.imm = d.imm;
    c.rqpn = d.rqpn;
    c.flags = d.flags;
    let cqn = qp.spec.recv_cq;
    if let Some(cq) = cqs.get_mut(&cqn) {
        if crate::cq::push(sh, cqn, cq, c) {
            bump(&sh.stats.resp_cqes);
        }
    }
}

/// The receive WQE `idx` failed with `r`: consume it with a `RESP_ERR` CQE and move the QP
/// to ERR (its other receive WQEs are flushed by the engine).
pub(crate) fn fail(
    sh: &Shared,
    cqs: &mut BTreeMap<u32, Cq>,
    qp: &mut Qp,
    qpn: u32,
    idx: u16,
    r: Reason,
) {
    qp.state = QpState::Error;
    let Some(syndrome) = r.receiver_syndrome() else { return };
    qp.rq_ci = qp.rq_ci.wrapping_add(1);
    let mut c = CqeRepr::new(CqeOpcode::RespErr, qpn);
    c.wqe_counter = idx;
    c.syndrome = Some(syndrome);
    c.vendor_err = r.vendor_code();
    let cqn = qp.spec.recv_cq;
    if let Some(cq) = cqs.get_mut(&cqn) {
        if crate::cq::push(sh, cqn, cq, c) {
            sh.stats.error_cqe(syndrome);
        }
    }
}
