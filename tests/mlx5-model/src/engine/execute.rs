//! Execute: gather the payload of a validated WQE into the request the transport sends
//! ([`crate::transport::requester`]): the message, where its answer goes (a READ's data or
//! an atomic's original value: the WQE's local buffers, in the order of its data segments),
//! and the addresses of its packets.
//!
//! A datagram (UD, GSI) goes to its address vector's GID and MAC. Its Q_Key is the vector's,
//! or the sending QP's own when the vector's has the high bit set (the IBTA's controlled
//! Q_Keys, `ibv_post_send(3)`); its source QP is 1 for a GSI QP; its IP header carries the
//! vector's traffic class, hop limit and (IPv6) flow label.

use super::validate::{Checked, Gather, Kind};
use super::Request;
use crate::counters::Reason;
use crate::grh::Hdr;
use crate::model::Shared;
use crate::objects::{Device, Service};
use crate::responder::ud::GSI_QPN;
use crate::responder::{Op, Packet};
use crate::transport::{responder::qp_addr, udp_sport, Addr};
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
                scatter.extend(dev.mkeys[&lkey].segments(addr, len));
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
                    let end = at + len as usize;
                    if let Err(bus) = dev.mkeys[&lkey].read(&*sh.dma, addr, &mut payload[at..end]) {
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
    let mut addr = qp_addr(sh, qp, qpn);
    let mut dst_qpn = qp.remote_qpn;
    let mut src_qpn = qpn;
    let (op, _psns, byte_cnt) = match c.kind {
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
            let (sgid, smac) = src_gid(av.sgid_index).unwrap_or(([0; 16], [0; 6]));
            // What the receiver will find in its GRH area is taken from the frame; this
            // copy is the sender's view, kept for the request's record.
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
            dst_qpn = av.dqpn;
            if qp.spec.service == Service::Gsi {
                src_qpn = GSI_QPN;
            }
            addr = Addr {
                src_mac: smac,
                dst_mac: av.dmac,
                sgid,
                dgid: av.dgid,
                tclass: av.tclass,
                hop_limit: av.hop_limit,
                flow_label: av.flow_label,
                udp_sport: udp_sport(src_qpn, dst_qpn),
            };
            (Op::Datagram { qkey, imm, grh, l3 }, 1, c.total as u32)
        }
    };
    Ok(Request {
        idx,
        wqebbs: c.wqebbs,
        opcode: c.opcode,
        signaled: c.signaled,
        gen: qp.gen,
        addr,
        byte_cnt,
        scatter,
        packet: Packet { src_qpn, dst_qpn, mtu, op, payload },
    })
}
