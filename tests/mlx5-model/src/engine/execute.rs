//! Execute: gather the payload of a validated WQE, hand the message to the responder (this
//! model, or another one over the [`Wire`](crate::Wire)) with no lock held, and apply the
//! responder's answer: an ACK completes the WQE; an ACK with data (a READ response, an
//! atomic's original value) is first written into the WQE's local buffers, in the order of
//! its data segments; a NAK or a lost request completes it in error.
//!
//! A datagram (UD, GSI) goes to the port owning the address vector's destination GID, if the
//! vector's MAC is that port's; a datagram that reaches no port is dropped and counted here,
//! and the sender still completes (UD is unreliable). Its Q_Key is the vector's, or the
//! sending QP's own when the vector's has the high bit set (the IBTA's controlled Q_Keys, `ibv_post_send(3)`); its source QP is 1
//! for a GSI QP; its network header is built here ([`crate::grh`]) because the receiver sees
//! what the sender put on the wire.
//!
//! # RNR
//!
//! An RNR NAK (SEND or WRITE WITH IMMEDIATE, no receive WQE) stalls the send queue at that
//! WQE. It is retried every [`RNR_DELAY`]; after `rnr_retry` retries (7 = forever) it
//! completes with `RNR_RETRY_EXC_ERR` (0x16) and the QP moves to ERR. Nothing is written
//! before the NAK.

use std::sync::Arc;
use std::time::Instant;

use rdma_pmd::BusAddr;

use super::complete::{fail, req_cqe};
use super::validate::{Checked, Gather, Kind};
use super::{Request, RNR_DELAY};
use crate::counters::{bump, Reason};
use crate::grh::Hdr;
use crate::model::Shared;
use crate::objects::{Device, RnrWait, Route, Service};
use crate::responder::ud::{drop_datagram, GSI_QPN};
use crate::responder::{respond, Op, Packet, Resp};
use crate::wqe::ATOMIC_SIZE;

/// `IBV_QPT_UD` Q_Keys with this bit set are "controlled": the QP's own Q_Key is sent.
const CONTROLLED_QKEY: u32 = 0x8000_0000;

/// Gather the payload of the checked WQE at `idx` and make the request. Called with the
/// device lock held. `Err` carries the fatal reason and the WQEBBs to step over.
pub(super) fn request(
    sh: &Shared,
    dev: &Device,
    qpn: u32,
    idx: u16,
    wqe: &[u8],
    c: Checked,
) -> Result<Request, (Reason, u32)> {
    let qp = &dev.qps[&qpn];
    let mut payload = Vec::new();
    let mut scatter = Vec::new();
    if matches!(c.kind, Kind::Read { .. } | Kind::Atomic { .. }) {
        // Where the answer goes: every segment is a pointer (validate refused inline).
        for g in &c.gathers {
            if let Gather::Pointer { lkey, addr, len } = *g {
                scatter.push((dev.mkeys[&lkey].bus(addr), len));
            }
        }
    } else {
        // One zeroed allocation, then each gather copied into place.
        payload = vec![0u8; c.total as usize];
        let mut at = 0usize;
        for g in &c.gathers {
            match *g {
                Gather::Inline(start, len) => {
                    payload[at..at + len].copy_from_slice(&wqe[start..start + len]);
                    at += len;
                }
                Gather::Pointer { lkey, addr, len } => {
                    let bus = dev.mkeys[&lkey].bus(addr);
                    let end = at + len as usize;
                    if !sh.dma.read(BusAddr(bus), &mut payload[at..end]) {
                        return Err((Reason::DmaFault { bus, len }, c.wqebbs));
                    }
                    at = end;
                }
            }
        }
    }

    let mtu = qp.mtu;
    let pkts = |len: u64| (len.div_ceil(u64::from(mtu)).max(1)).min(u64::from(u32::MAX)) as u32;
    let src_gid = |index: u8| sh.gids.get(usize::from(index)).map(|g| (g.gid, g.mac));
    let mut route = qp.route;
    let mut dst_qpn = qp.remote_qpn;
    let mut src_qpn = qpn;
    let (op, npkts, byte_cnt) = match c.kind {
        Kind::Write { raddr, rkey, imm } => {
            (Op::Write { raddr, rkey, imm }, pkts(c.total), c.total as u32)
        }
        Kind::Send { imm } => (Op::Send { imm }, pkts(c.total), c.total as u32),
        Kind::Read { raddr, rkey } => {
            (Op::Read { raddr, rkey, len: c.total }, pkts(c.total), c.total as u32)
        }
        Kind::Atomic { raddr, rkey, atomic } => {
            (Op::Atomic { raddr, rkey, atomic }, 1, ATOMIC_SIZE as u32)
        }
        Kind::Datagram { av, imm } => {
            let qkey = if av.qkey & CONTROLLED_QKEY != 0 { qp.qkey } else { av.qkey };
            let sgid = src_gid(av.sgid_index).map_or([0; 16], |g| g.0);
            let (grh, l3) = Hdr {
                sgid,
                dgid: av.dgid,
                tclass: av.tclass,
                hop_limit: av.hop_limit,
                flow_label: av.flow_label,
                payload: payload.len(),
                imm: imm.is_some(),
            }
            .emit();
            route = Route::RoceV2 { dgid: av.dgid, dmac: av.dmac, sgid_index: av.sgid_index };
            dst_qpn = av.dqpn;
            if qp.spec.service == Service::Gsi {
                src_qpn = GSI_QPN;
            }
            (Op::Datagram { qkey, imm, grh, l3 }, 1, c.total as u32)
        }
    };
    let src_gid = match route {
        Route::Loopback => None,
        Route::RoceV2 { sgid_index, .. } => src_gid(sgid_index),
    };
    Ok(Request {
        idx,
        wqebbs: c.wqebbs,
        opcode: c.opcode,
        signaled: c.signaled,
        gen: qp.gen,
        route,
        byte_cnt,
        scatter,
        packet: Packet {
            src_model: sh.id,
            src_gid,
            src_qpn,
            dst_qpn,
            psn: qp.npsn,
            npkts,
            mtu,
            op,
            payload,
        },
    })
}

/// Put the message on the path. No lock is held.
pub(super) fn deliver(sh: &Arc<Shared>, req: &Request) -> Resp {
    let target = match req.route {
        Route::Loopback => Some(sh.clone()),
        Route::RoceV2 { dgid, dmac, .. } => match sh.own_gid(&dgid) {
            Some(mac) if mac == dmac => Some(sh.clone()),
            Some(_) => None,
            None => sh.wire.as_ref().and_then(|w| w.route(&dgid, &dmac)),
        },
    };
    match (target, &req.packet.op) {
        (Some(t), _) => respond(&t, &req.packet),
        (None, Op::Datagram { .. }) => {
            drop_datagram(sh, req.packet.dst_qpn, Reason::DatagramNoRoute)
        }
        (None, _) => Resp::Fail(Reason::NoRoute),
    }
}

/// Write an answer's data into the request's local buffers, in order.
fn place(sh: &Shared, req: &Request, data: &[u8]) -> Result<(), Reason> {
    let mut at = 0usize;
    for &(bus, len) in &req.scatter {
        let end = (at + len as usize).min(data.len());
        if !sh.dma.write(BusAddr(bus), &data[at..end]) {
            return Err(Reason::DmaFault { bus, len });
        }
        at = end;
    }
    Ok(())
}

/// Apply the responder's answer.
pub(super) fn finish(sh: &Shared, qpn: u32, req: &Request, resp: Resp) {
    let mut guard = sh.dev();
    let dev = &mut *guard;
    let Some(qp) = dev.qps.get_mut(&qpn) else { return };
    if qp.gen != req.gen {
        return; // reset or destroyed meanwhile
    }
    let data = match &resp {
        Resp::Data(d) => Some(d.as_slice()),
        _ => None,
    };
    match resp {
        Resp::Ack | Resp::Data(_) => {
            if let Some(d) = data {
                if let Err(r) = place(sh, req, d) {
                    fail(sh, dev, qpn, req.idx, req.opcode, r, req.wqebbs);
                    return;
                }
            }
            let qp = dev.qps.get_mut(&qpn).expect("looked up above");
            qp.npsn = qp.npsn.wrapping_add(req.packet.npkts) & 0x00ff_ffff;
            qp.rnr = None;
            qp.sq_pi = qp.sq_pi.wrapping_add(req.wqebbs as u16);
            bump(&sh.stats.wqes_executed);
            if req.signaled {
                req_cqe(sh, dev, qpn, req);
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
