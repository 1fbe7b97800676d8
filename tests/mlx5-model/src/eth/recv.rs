//! Receiving a frame that is not RoCE v2: NIC RX steering, then the RQ.
//!
//! Steering: the NIC RX root table (`SET_FLOW_TABLE_ROOT`); its entries in flow-index order;
//! an entry matches when the frame's outer headers, masked by its group's criteria, equal
//! its match value (`fs_core.c` keeps one group's entries under one mask; the firmware
//! compares). The first match's destination TIR dispatches directly to its RQ
//! (`tirc.inline_rqn`). No root, no match: dropped (the table's miss action is the default
//! drop).
//!
//! The RQ (mlx5e's legacy cyclic RQ, `en_rx.c` `mlx5e_alloc_rx_wqe`): WQE `ci & (size - 1)`
//! of stride `1 << log_wq_stride` bytes holds data segments (`byte_count`, lkey, address),
//! ended by the stride or by a segment with `MLX5_INVALID_LKEY` (0x100) or a zero count;
//! the frame is scattered over them in order. Software posts by writing its counter into
//! `dbrec[0]` (`MLX5_RCV_DBR`). Without `vsd` a customer VLAN tag is stripped and reported
//! in the CQE's `vlan_info`.
//!
//! The CQE is what `mlx5e_handle_rx_cqe` reads: opcode `RESP_SEND` (2), `wqe_counter` (the
//! WQE consumed), `byte_cnt` (bytes written), `l4_l3_hdr_type` (L3/L4 type, VLAN stripped),
//! `vlan_info`, `sop_drop_qpn` = the RQ number.

use rdma_pmd::BusAddr;

use super::send::lkey;
use super::{Delivery, Fault, Headers, Tables, WqState};
use crate::be::{get32, get64};
use crate::codes::CqeOpcode;
use crate::cqe::CqeRepr;
use crate::model::Shared;

/// `MLX5_INVALID_LKEY`: ends a receive WQE's scatter list.
pub const INVALID_LKEY: u32 = 0x100;

/// The TIR the root table's first matching entry forwards to.
fn steer(eth: &Tables, h: &Headers) -> Option<u32> {
    let table = eth.fts.get(&eth.root?)?;
    let set = h.match_set();
    table.entries.values().find_map(|fte| {
        let crit = &table.groups.get(&fte.group)?.criteria;
        let hit = (0..set.len()).all(|i| set[i] & crit[i] == fte.value[i] & crit[i]);
        hit.then_some(fte.tirn)
    })
}

/// Deliver one received frame through the Ethernet receive path. RoCE v2 frames are not
/// touched ([`Delivery::Roce`]): they belong to the RDMA transport.
pub(crate) fn deliver(sh: &Shared, frame: &[u8]) -> Delivery {
    let mut guard = sh.dev();
    let dev = &mut *guard;
    let c = &mut dev.eth.counters;
    c.frames_received += 1;
    let Some(h) = Headers::parse(frame) else {
        c.dropped_runt += 1;
        return Delivery::Runt;
    };
    if h.is_roce_v2() {
        c.roce_passed += 1;
        return Delivery::Roce;
    }
    let Some(rqn) = steer(&dev.eth, &h).and_then(|t| dev.eth.tirs.get(&t)).map(|t| t.rqn) else {
        dev.eth.counters.dropped_no_match += 1;
        return Delivery::NoMatch;
    };
    let Some(rq) = dev.eth.rqs.get(&rqn).cloned().filter(|r| r.state == WqState::Rdy) else {
        dev.eth.counters.dropped_rq_not_ready += 1;
        return Delivery::RqNotReady { rqn };
    };
    let size = 1u16 << rq.log_size;
    let posted = sh.read_be32(rq.dbrec).map_or(0, |r| (r as u16).wrapping_sub(rq.ci));
    if posted == 0 || posted > size {
        dev.eth.counters.dropped_no_wqe += 1;
        return Delivery::NoWqe { rqn };
    }
    let (data, vlan) = match h.tag {
        Some(t) if !rq.vsd && t.tpid == super::headers::ETH_P_8021Q => {
            let mut d = frame[..12].to_vec();
            d.extend_from_slice(&frame[16..]);
            (d, Some(t.tci))
        }
        _ => (frame.to_vec(), None),
    };
    let idx = rq.ci;
    let at = rq.buf.at(u64::from(idx & (size - 1)) << rq.log_stride);
    let mut wqe = vec![0u8; 1 << rq.log_stride];
    let placed = if sh.dma.read(BusAddr(at), &mut wqe) {
        scatter(sh, dev, &wqe, rq.pd, &data)
    } else {
        Err(Fault::Dma(at))
    };
    if let Err(f) = placed {
        dev.eth.fault(rqn, idx, f);
        dev.eth.counters.dropped_bad_wqe += 1;
        return Delivery::BadWqe { rqn };
    }
    let mut c = CqeRepr::new(CqeOpcode::RespSend, rqn);
    c.wqe_counter = idx;
    c.byte_cnt = data.len() as u32;
    c.hdr_type = h.cqe_hdr_type(vlan.is_some());
    c.vlan_info = vlan.unwrap_or(0);
    if let Some(r) = dev.eth.rqs.get_mut(&rqn) {
        r.ci = r.ci.wrapping_add(1);
    }
    dev.eth.counters.frames_delivered += 1;
    if let Some(cq) = dev.cqs.get_mut(&rq.cqn) {
        crate::cq::push(sh, rq.cqn, cq, c);
    }
    Delivery::Received { rqn, wqe_counter: idx, byte_cnt: data.len() as u32 }
}

/// Check every data segment of `wqe` the frame reaches, then write it.
fn scatter(
    sh: &Shared,
    dev: &crate::objects::Device,
    wqe: &[u8],
    pd: u32,
    data: &[u8],
) -> Result<(), Fault> {
    let mut plan = Vec::new();
    let mut left = data.len();
    for seg in wqe.chunks_exact(16) {
        let (count, key, addr) = (get32(seg, 0), get32(seg, 4), get64(seg, 8));
        if left == 0 || key == INVALID_LKEY || count == 0 {
            break;
        }
        let take = left.min(count as usize);
        let mk = lkey(dev, key, pd, addr, take as u64, true)?;
        for (bus, n) in mk.segments(addr, take as u64) {
            plan.push((bus, n as usize));
        }
        left -= take;
    }
    if left != 0 {
        return Err(Fault::RecvTooSmall { room: data.len() - left, len: data.len() });
    }
    let mut off = 0;
    for (bus, take) in plan {
        if !sh.dma.write(BusAddr(bus), &data[off..off + take]) {
            return Err(Fault::Dma(bus));
        }
        off += take;
    }
    Ok(())
}
