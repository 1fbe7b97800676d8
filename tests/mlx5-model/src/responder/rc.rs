//! The RC responder.
//!
//! Checks, in the order a responder applies them (IBTA chapter 9.7; rxe `rxe_resp.c`):
//!
//! 1. the destination QP exists, is RC, and is in RTR or RTS — otherwise the packet is
//!    silently dropped, and the requester eventually completes with
//!    `TRANSPORT_RETRY_EXC_ERR` (0x15);
//! 2. a payload fits the responder's path MTU, and the PSN is the expected one (a mismatch
//!    is a sequence error the model does not recover from: 0x15 at the requester);
//! 3. per operation, the QP's right (`rwe`, `rre`, `rae`) and — unless the length is 0, when
//!    the R_Key is not checked — the rkey: it exists, is in the QP's PD, grants the access,
//!    covers the range and translates (IOMMU). Any failure NAKs with a remote access error
//!    (0x13 at the requester) and moves the responder QP to ERR with an
//!    [`Event::QpAccessError`] (IB "Local Access Violation Work Queue Error"). An atomic's
//!    address must also be 8-byte aligned, else the NAK is "invalid request" (0x12) and the
//!    QP moves to ERR with an [`Event::QpRequestError`];
//! 4. SEND and WRITE WITH IMMEDIATE need a receive WQE: if none is posted the responder sends
//!    an RNR NAK *before writing anything* and the requester retries (see
//!    [`crate::engine`]). A receive WQE that cannot hold the message, or whose scatter list
//!    fails its checks, completes in error at the responder (see [`super::recv`]) and NAKs
//!    the requester (0x12 for length, 0x14 otherwise);
//! 5. the operation runs:
//!    * WRITE writes the payload; WITH IMMEDIATE consumes the receive WQE without scattering
//!      anything and writes `RESP_WR_IMM` (`imm`, `byte_cnt` = message length);
//!    * SEND scatters the payload into the receive WQE and writes `RESP_SEND` or
//!      `RESP_SEND_IMM`; the source QPN is in `flags_rqpn`, the receive index in
//!      `wqe_counter`;
//!    * READ returns the bytes;
//!    * an atomic reads the 8 bytes as a **big-endian** integer, compares and swaps or adds,
//!      writes the result back big-endian, and returns the original value as 8 big-endian
//!      bytes, which the requester writes unchanged into its result buffer. That is a
//!      ConnectX responder with the requester's `atomic_req_8B_endianness_mode` at its reset
//!      value 0 (`MLX5_ATOMIC_REQ_MODE_BE`, kernel `mlx5/core/main.c`): the model's firmware
//!      offers no atomic capability page, so nothing switches the requester to host
//!      endianness (`MLX5_ATOMIC_REQ_MODE_HOST_ENDIANNESS`, which the kernel's
//!      `handle_hca_cap_atomic` selects where the device supports it); the provider likewise
//!      stores the operands with `htobe64` (`_set_atomic_seg`);
//! 6. the ACK (or the READ/atomic response) goes back along the responder's own path: if its
//!    remote QPN or path does not lead to the requester, it is lost and the requester
//!    completes with 0x15 (what was written stays written, as on a real network).

use rdma_pmd::BusAddr;

use super::recv::{self, Done};
use super::{Atomic, Op, Packet, Resp};
use crate::codes::CqeOpcode;
use crate::counters::{bump, Event, Reason};
use crate::model::Shared;
use crate::objects::{Device, Qp, QpState, Rights, Route, Service};

/// Which right an operation needs, on the QP and on the rkey.
#[derive(Clone, Copy)]
enum Need {
    Write,
    Read,
    Atomic,
}

impl Need {
    fn has(self, r: &Rights) -> bool {
        match self {
            Need::Write => r.remote_write,
            Need::Read => r.remote_read,
            Need::Atomic => r.remote_atomic,
        }
    }

    fn qp_lacks(self, qpn: u32) -> Reason {
        match self {
            Need::Write => Reason::QpNoRemoteWrite { qpn },
            Need::Read => Reason::QpNoRemoteRead { qpn },
            Need::Atomic => Reason::QpNoRemoteAtomic { qpn },
        }
    }

    fn key_lacks(self, rkey: u32) -> Reason {
        match self {
            Need::Write => Reason::RkeyNoRemoteWrite { rkey },
            Need::Read => Reason::RkeyNoRemoteRead { rkey },
            Need::Atomic => Reason::RkeyNoRemoteAtomic { rkey },
        }
    }
}

/// Run the RC responder of model `sh` on `p`.
pub(crate) fn respond(sh: &Shared, p: &Packet) -> Resp {
    let mut guard = sh.dev();
    let Device { qps, cqs, mkeys, .. } = &mut *guard;
    let qpn = p.dst_qpn;
    let Some(qp) = qps.get_mut(&qpn) else { return Resp::Fail(Reason::TargetNotReady { qpn }) };
    if qp.spec.service != Service::Rc {
        return Resp::Fail(Reason::ServiceMismatch { qpn });
    }
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

    // Resolve the remote range of the operation (step 3).
    let access_error = |qp: &mut Qp, r: Reason| {
        qp.state = QpState::Error;
        qp.rnr = None;
        sh.stats.event(Event::QpAccessError { qpn });
        Resp::Fail(r)
    };
    let (need, raddr, rkey, rlen) = match p.op {
        Op::Write { raddr, rkey, .. } => (Some(Need::Write), raddr, rkey, len),
        Op::Read { raddr, rkey, len } => (Some(Need::Read), raddr, rkey, len),
        Op::Atomic { raddr, rkey, .. } => (Some(Need::Atomic), raddr, rkey, 8),
        Op::Send { .. } | Op::Datagram { .. } => (None, 0, 0, 0),
    };
    let mut target = None;
    if let Some(need) = need {
        if !need.has(&qp.rights) {
            return access_error(qp, need.qp_lacks(qpn));
        }
        if matches!(need, Need::Atomic) && raddr & 7 != 0 {
            qp.state = QpState::Error;
            qp.rnr = None;
            sh.stats.event(Event::QpRequestError { qpn });
            return Resp::Fail(Reason::AtomicMisaligned { addr: raddr });
        }
        if rlen > 0 {
            let Some(mk) = mkeys.get(&rkey) else {
                return access_error(qp, Reason::UnknownRkey { rkey });
            };
            if mk.pd != qp.spec.pd {
                return access_error(qp, Reason::RkeyPdMismatch { rkey });
            }
            if !need.has(&mk.rights) {
                return access_error(qp, need.key_lacks(rkey));
            }
            if !mk.covers(raddr, rlen) {
                return access_error(qp, Reason::RkeyOutOfBounds { rkey, addr: raddr, len: rlen });
            }
            let bus = mk.bus(raddr);
            if sh.dma.translate(BusAddr(bus), rlen as usize).is_none() {
                return access_error(qp, Reason::RemoteDmaFault { bus, len: rlen });
            }
            target = Some(bus);
        }
    }

    // A receive WQE for SEND and WRITE WITH IMMEDIATE (step 4).
    let wants_recv = matches!(p.op, Op::Send { .. } | Op::Write { imm: Some(_), .. });
    let mut rwqe = None;
    if wants_recv {
        match recv::next(sh, qp, qpn) {
            Ok(Some(w)) => rwqe = Some(w),
            Ok(None) => {
                bump(&sh.stats.rnr_naks);
                return Resp::Rnr;
            }
            Err(r) => {
                let idx = qp.rq_ci;
                recv::fail(sh, cqs, qp, qpn, idx, r);
                return Resp::Fail(r);
            }
        }
    }

    // Execute (step 5).
    let mut resp = Resp::Ack;
    match p.op {
        Op::Write { imm, .. } => {
            if let Some(bus) = target {
                // Translated above, but the driver may free memory at any time: check again.
                if !sh.dma.write(BusAddr(bus), &p.payload) {
                    return access_error(qp, Reason::RemoteDmaFault { bus, len });
                }
                sh.stats.bytes_written.fetch_add(len, std::sync::atomic::Ordering::Relaxed);
            }
            if let (Some(imm), Some(w)) = (imm, rwqe) {
                let d = Done {
                    opcode: CqeOpcode::RespWrImm,
                    byte_cnt: len as u32,
                    imm,
                    rqpn: p.src_qpn,
                    flags: 0,
                };
                recv::complete(sh, cqs, qp, qpn, w.idx, d);
            }
        }
        Op::Send { imm } => {
            let w = rwqe.expect("a receive WQE was taken");
            if let Err(r) = recv::scatter(sh, mkeys, qp, qpn, &w, &[&p.payload]) {
                recv::fail(sh, cqs, qp, qpn, w.idx, r);
                return Resp::Fail(r);
            }
            let opcode = if imm.is_some() { CqeOpcode::RespSendImm } else { CqeOpcode::RespSend };
            let d = Done {
                opcode,
                byte_cnt: len as u32,
                imm: imm.unwrap_or_default(),
                rqpn: p.src_qpn,
                flags: 0,
            };
            recv::complete(sh, cqs, qp, qpn, w.idx, d);
        }
        Op::Read { len, .. } => {
            let mut data = vec![0u8; len as usize];
            if let Some(bus) = target {
                if !sh.dma.read(BusAddr(bus), &mut data) {
                    return access_error(qp, Reason::RemoteDmaFault { bus, len });
                }
            }
            sh.stats.bytes_read.fetch_add(len, std::sync::atomic::Ordering::Relaxed);
            resp = Resp::Data(data);
        }
        Op::Atomic { atomic, .. } => {
            let bus = target.expect("an atomic has 8 bytes");
            let mut w = [0u8; 8];
            if !sh.dma.read(BusAddr(bus), &mut w) {
                return access_error(qp, Reason::RemoteDmaFault { bus, len: 8 });
            }
            let orig = u64::from_be_bytes(w);
            let new = match atomic {
                Atomic::Cas { compare, swap } => (orig == compare).then_some(swap),
                Atomic::Faa { add } => Some(orig.wrapping_add(add)),
            };
            if let Some(v) = new {
                if !sh.dma.write(BusAddr(bus), &v.to_be_bytes()) {
                    return access_error(qp, Reason::RemoteDmaFault { bus, len: 8 });
                }
            }
            bump(&sh.stats.atomics);
            resp = Resp::Data(orig.to_be_bytes().to_vec());
        }
        // `respond` hands datagrams to the UD responder; one here is a mismatch, not a panic.
        Op::Datagram { .. } => return Resp::Fail(Reason::ServiceMismatch { qpn }),
    }
    qp.epsn = qp.epsn.wrapping_add(p.npkts) & 0x00ff_ffff;
    if ack_ok {
        resp
    } else {
        Resp::Fail(Reason::AckLost { qpn })
    }
}
