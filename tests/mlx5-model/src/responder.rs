//! The responder side of an RC RDMA WRITE (WITH IMMEDIATE).
//!
//! Checks, in the order a responder applies them (IB spec responder behaviour, chapter 9.7):
//!
//! 1. the destination QP exists and is in RTR or RTS — otherwise the packet is silently
//!    dropped, and the requester eventually completes with `TRANSPORT_RETRY_EXC_ERR` (0x15);
//! 2. the packet fits the responder's path MTU, and its PSN is the expected one (a mismatch
//!    is a sequence error the model does not recover from: 0x15 at the requester);
//! 3. the QP grants REMOTE_WRITE (RST2INIT `rwe`), and — unless the length is 0, when the
//!    R_Key is not checked — the rkey exists, is in the QP's PD, has REMOTE_WRITE, covers
//!    `[raddr, raddr + len)` and translates (IOMMU). Any failure NAKs with a remote access
//!    error: the requester completes with 0x13, and the responder QP moves to ERR with an
//!    [`Event::QpAccessError`] (IB "Local Access Violation Work Queue Error");
//! 4. WRITE WITH IMMEDIATE needs a receive WQE (`dbrec[0]` counter ahead of the HCA's): if
//!    none is posted, the responder sends an RNR NAK *before writing anything* and the
//!    requester retries (see [`crate::engine`]);
//! 5. the data is written; WITH IMMEDIATE consumes the receive WQE (read to check it is
//!    reachable; a zero-length scatter entry is fine, nothing is scattered) and writes a
//!    `RESP_WR_IMM` CQE on the QP's receive CQ: `imm`, `byte_cnt` = message length,
//!    `wqe_counter` = receive WQE index, `qpn`, and the source QPN in `flags_rqpn`;
//! 6. the ACK goes back along the responder's own path: if its remote QPN or path does not
//!    lead to the requester, the ACK is lost and the requester completes with 0x15 (the data
//!    has been written, as on a real network).

use rdma_pmd::BusAddr;

use crate::codes::CqeOpcode;
use crate::counters::{bump, Event, Reason};
use crate::cqe::CqeRepr;
use crate::model::Shared;
use crate::objects::{Device, QpState, Route};

/// The path MTU of a datagram QP, in bytes: a UD QP has no path of its own, and the model
/// takes the IB MTU of a RoCE port on a 1500-byte Ethernet link (what rxe and mlx5 report).
pub const UD_MTU: u32 = 1024;

/// One RDMA WRITE message on the wire.
#[derive(Clone, Debug)]
pub(crate) struct Packet {
    pub src_model: u64,
    /// Source GID and MAC (RoCE v2); `None` for loopback.
    pub src_gid: Option<([u8; 16], [u8; 6])>,
    pub src_qpn: u32,
    pub dst_qpn: u32,
    pub psn: u32,
    pub npkts: u32,
    /// Requester path MTU in bytes.
    pub mtu: u32,
    pub with_imm: bool,
    pub raddr: u64,
    pub rkey: u32,
    pub payload: Vec<u8>,
    pub imm: [u8; 4],
}

/// What came back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Resp {
    Ack,
    Rnr,
    Fail(Reason),
}

/// Run the responder of model `sh` on `p`.
pub(crate) fn respond(sh: &Shared, p: &Packet) -> Resp {
    let r = respond_locked(sh, p);
    if let Resp::Fail(reason) = r {
        // The requester logs every failure; a responder on another model logs its side too,
        // so a test holding only that model sees why.
        if p.src_model != sh.id {
            sh.note(p.dst_qpn, None, reason);
        }
    }
    if let Resp::Fail(
        Reason::UnknownRkey { .. }
        | Reason::RkeyPdMismatch { .. }
        | Reason::RkeyNoRemoteWrite { .. }
        | Reason::QpNoRemoteWrite { .. }
        | Reason::RkeyOutOfBounds { .. }
        | Reason::RemoteDmaFault { .. },
    ) = r
    {
        // The responder QP went to ERR: let its engine flush the receive queue.
        sh.kick();
    }
    r
}

fn respond_locked(sh: &Shared, p: &Packet) -> Resp {
    let mut guard = sh.dev();
    let Device { qps, cqs, mkeys, .. } = &mut *guard;
    let qpn = p.dst_qpn;
    let Some(qp) = qps.get_mut(&qpn) else { return Resp::Fail(Reason::TargetNotReady { qpn }) };
    if !matches!(qp.state, QpState::Rtr | QpState::Rts) {
        return Resp::Fail(Reason::TargetNotReady { qpn });
    }
    let len = p.payload.len() as u64;
    if p.mtu > qp.mtu && len > u64::from(qp.mtu) {
        return Resp::Fail(Reason::MtuExceeded { requester: p.mtu, responder: qp.mtu });
    }
    if p.psn != qp.epsn {
        return Resp::Fail(Reason::PsnMismatch { sent: p.psn, expected: qp.epsn });
    }
    let ack_ok = qp.remote_qpn == p.src_qpn
        && match qp.route {
            Route::Loopback => p.src_gid.is_none() && p.src_model == sh.id,
            Route::RoceV2 { dgid, dmac, .. } => p.src_gid == Some((dgid, dmac)),
        };

    let access_error = |qp: &mut crate::objects::Qp, r: Reason| {
        qp.state = QpState::Error;
        qp.rnr = None;
        sh.stats.event(Event::QpAccessError { qpn });
        Resp::Fail(r)
    };
    if !qp.rights.remote_write {
        return access_error(qp, Reason::QpNoRemoteWrite { qpn });
    }
    let mut target = None;
    if len > 0 {
        let rkey = p.rkey;
        let Some(mk) = mkeys.get(&rkey) else {
            return access_error(qp, Reason::UnknownRkey { rkey });
        };
        if mk.pd != qp.spec.pd {
            return access_error(qp, Reason::RkeyPdMismatch { rkey });
        }
        if !mk.rights.remote_write {
            return access_error(qp, Reason::RkeyNoRemoteWrite { rkey });
        }
        if !mk.covers(p.raddr, len) {
            return access_error(qp, Reason::RkeyOutOfBounds { rkey, addr: p.raddr, len });
        }
        let bus = mk.bus(p.raddr);
        if sh.dma.translate(BusAddr(bus), p.payload.len()).is_none() {
            return access_error(qp, Reason::RemoteDmaFault { bus, len });
        }
        target = Some(bus);
    }
    let mut recv = None;
    if p.with_imm {
        if qp.rq_posted(sh) == 0 {
            bump(&sh.stats.rnr_naks);
            return Resp::Rnr;
        }
        let at = qp.rq_slot();
        let mut wqe = vec![0u8; 1 << qp.spec.log_rq_stride];
        if !sh.dma.read(BusAddr(at), &mut wqe) {
            sh.note(qpn, Some(qp.rq_ci), Reason::DmaFault { bus: at, len: wqe.len() as u64 });
            qp.state = QpState::Error;
            return Resp::Fail(Reason::RecvWqeFault { qpn });
        }
        recv = Some(qp.rq_ci);
    }
    if let Some(bus) = target {
        // Translated above, but the driver may free memory at any time: check again.
        if !sh.dma.write(BusAddr(bus), &p.payload) {
            return access_error(qp, Reason::RemoteDmaFault { bus, len });
        }
        sh.stats.bytes_written.fetch_add(len, std::sync::atomic::Ordering::Relaxed);
    }
    if let Some(idx) = recv {
        qp.rq_ci = qp.rq_ci.wrapping_add(1);
        bump(&sh.stats.recv_consumed);
        let mut c = CqeRepr::new(CqeOpcode::RespWrImm, qpn);
        c.wqe_counter = idx;
        c.byte_cnt = len as u32;
        c.imm = p.imm;
        c.rqpn = p.src_qpn;
        let cqn = qp.spec.recv_cq;
        if let Some(cq) = cqs.get_mut(&cqn) {
            if crate::cq::push(sh, cqn, cq, c) {
                bump(&sh.stats.resp_cqes);
            }
        }
    }
    qp.epsn = qp.epsn.wrapping_add(p.npkts) & 0x00ff_ffff;
    if ack_ok {
        Resp::Ack
    } else {
        Resp::Fail(Reason::AckLost { qpn })
    }
}
