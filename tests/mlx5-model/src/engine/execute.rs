//! Execute: gather the payload of a validated WQE, hand the message to the responder (this
//! model, or another one over the [`Wire`](crate::Wire)) with no lock held, and apply the
//! responder's answer.
//!
//! # RNR
//!
//! An RNR NAK (WRITE WITH IMMEDIATE, no receive WQE) stalls the send queue at that WQE. It is
//! retried every [`RNR_DELAY`]; after `rnr_retry` retries (7 = forever) it completes with
//! `RNR_RETRY_EXC_ERR` (0x16) and the QP moves to ERR. Nothing is written before the NAK.

use std::sync::Arc;
use std::time::Instant;

use rdma_pmd::BusAddr;

use super::complete::{fail, req_cqe};
use super::validate::{Checked, Gather};
use super::{Request, RNR_DELAY};
use crate::counters::{bump, Reason};
use crate::model::Shared;
use crate::objects::{Device, RnrWait, Route};
use crate::responder::{respond, Packet, Resp};

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
    // One zeroed allocation, then each gather copied into place.
    let mut payload = vec![0u8; c.total as usize];
    let mut at = 0usize;
    for g in c.gathers {
        match g {
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
        wqebbs: c.wqebbs,
        opcode: c.opcode,
        signaled: c.signaled,
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
            with_imm: c.with_imm,
            raddr: c.raddr,
            rkey: c.rkey,
            payload,
            imm: c.imm,
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
    match target {
        Some(t) => respond(&t, &req.packet),
        None => Resp::Fail(Reason::NoRoute),
    }
}

/// Apply the responder's answer.
pub(super) fn finish(sh: &Shared, qpn: u32, req: &Request, resp: Resp) {
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
