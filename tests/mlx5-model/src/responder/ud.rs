//! The UD responder: a datagram reaching a port.
//!
//! The destination QPN picks the QP: 1 is the port's GSI QP (QP1), any other number a UD QP
//! of that number. The datagram is dropped — counted in `datagrams_dropped` and logged with
//! its reason, the sender still completing successfully (UD is unreliable) — when:
//!
//! * there is no such QP, it is not a datagram QP of the right kind, or it is not in RTR or
//!   RTS ([`Reason::DatagramNoQp`]);
//! * the DETH Q_Key is not the QP's ([`Reason::QkeyMismatch`]; rxe `check_keys`). The sender
//!   resolved the Q_Key already: the address vector's, or its own QP's when the address
//!   vector's has the high bit set (the IBTA's "controlled" Q_Keys; `ibv_post_send(3)`, `wr.ud.remote_qkey`);
//! * no receive WQE is posted ([`Reason::DatagramNoReceive`]: UD has no RNR NAK).
//!
//! An accepted datagram consumes the next receive WQE: its first 40 bytes receive the network
//! header ([`crate::grh`]), the payload follows, and the CQE (`RESP_SEND` or
//! `RESP_SEND_IMM`) carries `byte_cnt` = 40 + payload, the source QPN in `flags_rqpn` 23:0,
//! "GRH present" (1) in 29:28 and the RoCE L3 header type in 25:24 — the fields rdma-core's
//! and the kernel's `handle_responder` read. A GSI receive without immediate has the P_Key
//! (0xffff, the default of a RoCE port) in `imm_inval_pkey`. A receive WQE too short for the
//! whole, or with a bad scatter entry, completes in error and the QP moves to ERR, as for RC
//! (see [`super::recv`]).

use super::recv::{self, Done};
use super::{Op, Packet};
use crate::codes::CqeOpcode;
use crate::counters::{bump, Reason};
use crate::model::Shared;
use crate::objects::{Device, QpState, Service};

/// The destination QPN that names the port's GSI QP.
pub const GSI_QPN: u32 = 1;
/// The P_Key a RoCE port's datagrams carry (the default, full-membership P_Key).
pub const DEFAULT_PKEY: u32 = 0xffff;
/// `flags_rqpn` bits 29:28 value for "GRH present", as placed in the CQE's flags byte.
const GRH_PRESENT: u8 = 1 << 4;

/// A datagram dropped at this model for `r`.
pub(crate) fn drop_datagram(sh: &Shared, qpn: u32, r: Reason) {
    bump(&sh.stats.datagrams_dropped);
    sh.note(qpn, None, r);
}

/// Deliver datagram `p` to model `sh`.
pub(crate) fn deliver(sh: &Shared, p: &Packet) {
    let Op::Datagram { qkey, imm, grh, l3 } = p.op else {
        return drop_datagram(sh, p.dst_qpn, Reason::ServiceMismatch { qpn: p.dst_qpn });
    };
    let mut guard = sh.dev();
    let Device { qps, cqs, mkeys, .. } = &mut *guard;
    let found = if p.dst_qpn == GSI_QPN {
        qps.iter_mut().find(|(_, q)| q.spec.service == Service::Gsi)
    } else {
        qps.iter_mut().find(|(n, q)| **n == p.dst_qpn && q.spec.service == Service::Ud)
    };
    let Some((&qpn, qp)) = found.filter(|(_, q)| matches!(q.state, QpState::Rtr | QpState::Rts))
    else {
        return drop_datagram(sh, p.dst_qpn, Reason::DatagramNoQp { qpn: p.dst_qpn });
    };
    if qkey != qp.qkey {
        return drop_datagram(sh, qpn, Reason::QkeyMismatch { qpn, qkey, expected: qp.qkey });
    }
    let w = match recv::next(sh, qp, qpn) {
        Ok(Some(w)) => w,
        Ok(None) => return drop_datagram(sh, qpn, Reason::DatagramNoReceive { qpn }),
        Err(r) => {
            let idx = qp.rq_ci;
            recv::fail(sh, cqs, qp, qpn, idx, r);
            sh.kick();
            return drop_datagram(sh, qpn, r);
        }
    };
    let placed = match recv::scatter(sh, mkeys, qp, qpn, &w, &[&grh, &p.payload]) {
        Ok(n) => n,
        Err(r) => {
            recv::fail(sh, cqs, qp, qpn, w.idx, r);
            sh.kick();
            return drop_datagram(sh, qpn, r);
        }
    };
    let opcode = if imm.is_some() { CqeOpcode::RespSendImm } else { CqeOpcode::RespSend };
    let imm = match imm {
        Some(i) => i,
        None if qp.spec.service == Service::Gsi => DEFAULT_PKEY.to_be_bytes(),
        None => [0; 4],
    };
    let d = Done {
        opcode,
        byte_cnt: placed as u32,
        imm,
        rqpn: p.src_qpn,
        flags: GRH_PRESENT | l3 as u8,
    };
    recv::complete(sh, cqs, qp, qpn, w.idx, d);
    bump(&sh.stats.datagrams_delivered);
}
