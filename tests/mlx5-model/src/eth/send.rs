//! Executing an SQ doorbell: the Ethernet send WQEs mlx5e writes (`en_tx.c`
//! `mlx5e_sq_xmit_wqe`, `en/txrx.h` `mlx5e_tx_wqe`), each one frame.
//!
//! | off | size | field | source |
//! |---|---|---|---|
//! | 0 | 16 | control segment: opcode SEND (0x0a), WQE index = the SQ's counter, `qpn_ds` = SQN and DS, CE | `mlx5_wqe_ctrl_seg` |
//! | 16 | 4 | `swp_*` offsets: 0 (no software parser) | `mlx5_wqe_eth_seg` (qp.h) |
//! | 20 | 1 | `cs_flags`: 0 (no checksum offload advertised) | |
//! | 21 | 1 | `swp_flags`: 0 | |
//! | 22 | 2 | `mss`: 0 (no LSO) | |
//! | 24 | 4 | `flow_table_metadata` (ignored) | |
//! | 28 | 2 | `inline_hdr.sz`: bytes of the frame's start carried inline | |
//! | 30 | sz | the inline bytes, running into the following 16-byte units | |
//! | … | 16 each | data segments (`byte_count`, lkey, address): the rest of the frame | `mlx5_wqe_data_seg` |
//!
//! The eth segment and its inline bytes take `1 + ceil((sz - 2) / 16)` units (2 bytes fit in
//! the segment itself: `INL_HDR_START_SZ`), as mlx5e counts `ds_cnt`. The frame is the inline
//! bytes followed by every data segment's bytes; the inline part must cover what the SQ's
//! `min_wqe_inline_mode` needs for that frame. The SQ's send doorbell record is `dbrec[1]`
//! (`MLX5_SND_DBR`), its ring 64-byte WQEBBs from the PAS, `1 << log_wq_sz` of them.

use rdma_pmd::BusAddr;

use super::{Fault, Headers, Sq, WqState};
use crate::codes::{CqeOpcode, Syndrome};
use crate::counters::{bump, Reason};
use crate::cqe::CqeRepr;
use crate::model::Shared;
use crate::objects::{Device, Mkey};
use crate::wqe::{CtrlSeg, DataSeg, DS_UNIT, WQEBB};

/// `MLX5_OPCODE_SEND`.
const OPCODE_SEND: u8 = 0x0a;
/// Offset of `inline_hdr.sz` in the WQE.
const INLINE_SZ: usize = 28;
/// Offset of `inline_hdr.start`.
const INLINE_START: usize = 30;
/// Inline bytes that fit in the eth segment itself (`INL_HDR_START_SZ`, `en/txrx.h`).
const INLINE_IN_SEG: usize = 2;
/// The longest frame an SQ builds: a 9216-byte jumbo payload, the header and a tag (the
/// model gathers nothing longer, whatever the data segments claim).
pub const MAX_FRAME: usize = 9216 + super::headers::ETH_HLEN + super::headers::VLAN_HLEN;

/// Whether `qpn` is one of the model's SQs.
pub(crate) fn is_sq(dev: &Device, qpn: u32) -> bool {
    dev.eth.sqs.contains_key(&qpn)
}

/// A send doorbell for SQ `sqn` on UAR page `page`: execute every WQE up to `dbrec[1]`.
pub(crate) fn doorbell(sh: &Shared, page: u32, sqn: u32) {
    let mut guard = sh.dev();
    let dev = &mut *guard;
    let Some(mut sq) = dev.eth.sqs.get(&sqn).cloned() else { return };
    let note = |r: Reason| {
        bump(&sh.stats.ignored_doorbells);
        sh.note(sqn, None, r);
    };
    if sq.uar != page {
        return note(Reason::DoorbellWrongUar { qpn: sqn, uar: page });
    }
    if sq.state != WqState::Rdy {
        return note(Reason::DoorbellQpNotReady { qpn: sqn });
    }
    let Some(rec) = sh.read_be32(sq.dbrec + 4) else {
        return note(Reason::DoorbellRecordFault { qpn: sqn });
    };
    let target = rec as u16;
    let size = 1u32 << sq.log_size;
    if u32::from(target.wrapping_sub(sq.pc)) > size {
        return note(Reason::DoorbellRecordJump { from: sq.pc, to: target });
    }
    while sq.pc != target {
        let idx = sq.pc;
        match build(sh, dev, sqn, &sq) {
            Ok((frame, wqebbs, signaled)) => {
                // The model's one port, the one the RDMA transport sends on (lock order:
                // device, then link; nothing takes them the other way round).
                let sent = match sh.link().port.as_mut() {
                    Some(p) => p.send(&frame).is_ok(),
                    None => false,
                };
                if sent {
                    dev.eth.counters.frames_sent += 1;
                } else {
                    dev.eth.counters.port_errors += 1;
                }
                sq.pc = sq.pc.wrapping_add(wqebbs);
                if signaled {
                    let mut c = CqeRepr::new(CqeOpcode::Req, sqn);
                    c.wqe_counter = idx;
                    c.s_wqe_opcode = OPCODE_SEND;
                    complete(sh, dev, sq.cqn, c);
                }
            }
            Err(f) => {
                dev.eth.fault(sqn, idx, f);
                dev.eth.counters.send_errors += 1;
                let mut c = CqeRepr::new(CqeOpcode::ReqErr, sqn);
                c.wqe_counter = idx;
                c.s_wqe_opcode = OPCODE_SEND;
                c.syndrome = Some(match f {
                    Fault::Lkey(_) | Fault::Dma(_) => Syndrome::LocalProt,
                    Fault::FrameLength(_) => Syndrome::LocalLength,
                    _ => Syndrome::LocalQpOp,
                });
                complete(sh, dev, sq.cqn, c);
                sq.state = WqState::Err;
                break;
            }
        }
    }
    if let Some(s) = dev.eth.sqs.get_mut(&sqn) {
        s.pc = sq.pc;
        s.state = sq.state;
    }
}

fn complete(sh: &Shared, dev: &mut Device, cqn: u32, c: CqeRepr) {
    if let Some(cq) = dev.cqs.get_mut(&cqn) {
        crate::cq::push(sh, cqn, cq, c);
    }
}

/// Read the WQE at the SQ's counter and build its frame: (frame, WQEBBs, signaled).
fn build(sh: &Shared, dev: &Device, sqn: u32, sq: &Sq) -> Result<(Vec<u8>, u16, bool), Fault> {
    let size = 1u64 << sq.log_size;
    let slot = |k: u64| sq.buf.at(((u64::from(sq.pc) + k) & (size - 1)) * WQEBB as u64);
    let mut wqe = vec![0u8; WQEBB];
    if !sh.dma.read(BusAddr(slot(0)), &mut wqe) {
        return Err(Fault::Dma(slot(0)));
    }
    let ctrl = CtrlSeg::new_checked(&wqe[..]).expect("a WQEBB holds a control segment");
    let ds = ctrl.ds();
    let wqebbs = (usize::from(ds) * DS_UNIT).div_ceil(WQEBB) as u64;
    if ds < 2 || wqebbs > size {
        return Err(Fault::Ds(ds));
    }
    for k in 1..wqebbs {
        let mut b = [0u8; WQEBB];
        if !sh.dma.read(BusAddr(slot(k)), &mut b) {
            return Err(Fault::Dma(slot(k)));
        }
        wqe.extend_from_slice(&b);
    }
    let ctrl = CtrlSeg::new_checked(&wqe[..]).expect("a WQEBB holds a control segment");
    if ctrl.opcode_raw() != OPCODE_SEND || ctrl.opmod() != 0 {
        return Err(Fault::Opcode(ctrl.opcode_raw()));
    }
    if ctrl.wqe_index() != sq.pc {
        return Err(Fault::WqeIndex { want: sq.pc, got: ctrl.wqe_index() });
    }
    if ctrl.qpn() != sqn {
        return Err(Fault::Sqn(ctrl.qpn()));
    }
    let signaled = ctrl.signaled();
    let end = usize::from(ds) * DS_UNIT;
    if wqe[16..24].iter().any(|b| *b != 0) {
        return Err(Fault::Offload);
    }
    let sz = usize::from(u16::from_be_bytes([wqe[INLINE_SZ], wqe[INLINE_SZ + 1]]));
    let eth_units = 1 + sz.saturating_sub(INLINE_IN_SEG).div_ceil(DS_UNIT);
    let data_start = DS_UNIT + eth_units * DS_UNIT;
    if INLINE_START + sz > end || data_start > end {
        return Err(Fault::Ds(ds));
    }
    let mut frame = wqe[INLINE_START..INLINE_START + sz].to_vec();
    for seg in wqe[data_start..end].chunks_exact(DS_UNIT) {
        let d = DataSeg::new_checked(seg).expect("16 bytes");
        if d.is_inline() {
            return Err(Fault::Ds(ds));
        }
        if d.byte_count_raw() == 0 {
            return Err(Fault::ZeroLength);
        }
        let len = u64::from(d.byte_count_raw());
        if frame.len() as u64 + len > MAX_FRAME as u64 {
            return Err(Fault::FrameLength(frame.len() + len as usize));
        }
        let mk = lkey(dev, d.lkey(), sq.pd, d.addr(), len, false)?;
        let at = frame.len();
        frame.resize(at + len as usize, 0);
        mk.read(&*sh.dma, d.addr(), &mut frame[at..]).map_err(Fault::Dma)?;
    }
    let Some(h) = Headers::parse(&frame) else { return Err(Fault::FrameLength(frame.len())) };
    let need = h.inline_len(sq.inline_mode, frame.len());
    if sz < need {
        return Err(Fault::InlineShort { need, got: sz });
    }
    Ok((frame, wqebbs as u16, signaled))
}

/// The memory key `key` if it may be used by a queue of PD `pd` for `[addr, addr + len)`
/// (with local write when the HCA writes).
pub(super) fn lkey(
    dev: &Device,
    key: u32,
    pd: u32,
    addr: u64,
    len: u64,
    write: bool,
) -> Result<Mkey, Fault> {
    match dev.mkeys.get(&key) {
        Some(mk) if mk.pd == pd && mk.covers(addr, len) && (!write || mk.rights.local_write) => {
            Ok(mk.clone())
        }
        _ => Err(Fault::Lkey(key)),
    }
}
