//! Validate: every field of one send WQE, and each lkey its data segments name.
//!
//! Control segment: opmod 0; opcode 0x08 or 0x09 (else `LOCAL_QP_OP_ERR`, 0x02); WQE index =
//! the HCA's counter; QPN = this QP; DS ≥ 2 and DS × 16 ≤ `max_wqe_sz_sq`; the WQE ends at or
//! before the doorbell record's counter (all 0x02; that last check is the fetch's). Notes for
//! reserved bits (`qpn_ds` 7:6, `fm_ce_se` bits 4 and 0), a non-zero signature (no `wq_sig`
//! QPs) and a non-zero `dci_stream_channel_id`; for the remote address segment's reserved
//! word.
//!
//! Data: each 16-byte unit after the first two starts a pointer segment or an inline
//! segment; an inline payload must end inside DS (0x02); a pointer `byte_count` of 0 counts as
//! 2^31 bytes; the total must not exceed 2^31 (`LOCAL_LENGTH_ERR`, 0x01); each lkey must exist,
//! be in the QP's PD and cover its range (`LOCAL_PROT_ERR`, 0x04), and its translation must
//! reach DMA memory (0x04 with the DMA-fault vendor code). The remote side is checked by the
//! [`responder`](crate::responder).

use rdma_pmd::BusAddr;

use crate::codes::SendOpcode;
use crate::counters::Reason;
use crate::model::Shared;
use crate::objects::Device;
use crate::wqe::{wqebbs, CtrlSeg, DataSeg, RaddrSeg, DS_UNIT, MAX_MSG};

/// A WQE that passed every check: what executing it needs.
pub(super) struct Checked {
    /// WQEBBs the WQE takes.
    pub wqebbs: u32,
    pub opcode: u8,
    pub with_imm: bool,
    pub signaled: bool,
    pub imm: [u8; 4],
    pub raddr: u64,
    pub rkey: u32,
    /// The data segments, in order.
    pub gathers: Vec<Gather>,
    /// Their total length in bytes.
    pub total: u64,
}

/// One data segment.
pub(super) enum Gather {
    /// Offset in the WQE and length.
    Inline(usize, usize),
    Pointer {
        lkey: u32,
        addr: u64,
        len: u64,
    },
}

/// Check every field of the WQE at `idx` (module docs). `Err` carries the fatal reason and
/// the WQEBBs to step over.
pub(super) fn validate(
    sh: &Shared,
    dev: &Device,
    qpn: u32,
    idx: u16,
    wqe: &[u8],
) -> Result<Checked, (Reason, u32)> {
    let qp = &dev.qps[&qpn];
    let ctrl = CtrlSeg::new_checked(wqe).expect("a WQE has one WQEBB at least");
    let ds = ctrl.ds();
    let n = wqebbs(ds);
    let err = |r: Reason| Err((r, n));
    if ctrl.opmod() != 0 {
        return err(Reason::BadOpmod { opmod: ctrl.opmod() });
    }
    let with_imm = match ctrl.opcode() {
        SendOpcode::RdmaWrite => false,
        SendOpcode::RdmaWriteImm => true,
        _ => return err(Reason::UnsupportedOpcode { opcode: ctrl.opcode_raw() }),
    };
    if ctrl.wqe_index() != idx {
        return err(Reason::WrongWqeIndex { expected: idx, found: ctrl.wqe_index() });
    }
    if ctrl.qpn() != qpn {
        return err(Reason::WrongQpn { expected: qpn, found: ctrl.qpn() });
    }
    if ds < 2 {
        return err(Reason::DsTooSmall { ds });
    }
    let bytes = u32::from(ds) * DS_UNIT as u32;
    if bytes > dev.caps.max_wqe_sz_sq || n > qp.sq_cnt() {
        return err(Reason::WqeTooLarge { bytes });
    }
    let mut notes = Vec::new();
    if ctrl.ds_reserved() != 0 {
        notes.push(Reason::Reserved { what: "qpn_ds bits 7:6" });
    }
    if ctrl.signature() != 0 {
        notes.push(Reason::Reserved { what: "signature (QP has no wq_sig)" });
    }
    if ctrl.stream_channel() != 0 {
        notes.push(Reason::Reserved { what: "dci_stream_channel_id (RC)" });
    }
    if ctrl.fm_ce_se() & 0x11 != 0 {
        notes.push(Reason::Reserved { what: "fm_ce_se bits 4 and 0" });
    }
    let raddr = RaddrSeg::new_checked(&wqe[16..32]).expect("ds >= 2");
    if raddr.reserved() != 0 {
        notes.push(Reason::Reserved { what: "raddr segment bytes 12..16" });
    }
    for r in notes {
        sh.note(qpn, Some(idx), r);
    }

    // Walk the data segments (units 2..ds).
    let mut gathers = Vec::new();
    let mut total: u64 = 0;
    let mut unit = 2usize;
    let ds = usize::from(ds);
    while unit < ds {
        let seg = DataSeg::new_checked(&wqe[unit * DS_UNIT..]).expect("inside the WQE");
        if seg.is_inline() {
            let len = seg.inline_len();
            let units = (4 + len).div_ceil(DS_UNIT);
            if unit + units > ds {
                return err(Reason::InlineOverrun { len: len as u32, ds: ds as u8 });
            }
            let start = unit * DS_UNIT + 4;
            gathers.push(Gather::Inline(start, len));
            total += len as u64;
            unit += units;
        } else {
            total += seg.length();
            gathers.push(Gather::Pointer { lkey: seg.lkey(), addr: seg.addr(), len: seg.length() });
            unit += 1;
        }
    }
    if total > MAX_MSG {
        return Err((Reason::MessageTooLong { len: total }, n));
    }
    for g in &gathers {
        if let Gather::Pointer { lkey, addr, len } = *g {
            let Some(mk) = dev.mkeys.get(&lkey) else { return err(Reason::UnknownLkey { lkey }) };
            if mk.pd != qp.spec.pd {
                return err(Reason::LkeyPdMismatch { lkey });
            }
            if !mk.covers(addr, len) {
                return err(Reason::LkeyOutOfBounds { lkey, addr, len });
            }
            let bus = mk.bus(addr);
            if sh.dma.translate(BusAddr(bus), len as usize).is_none() {
                return err(Reason::DmaFault { bus, len });
            }
        }
    }
    Ok(Checked {
        wqebbs: n,
        opcode: ctrl.opcode_raw(),
        with_imm,
        signaled: ctrl.signaled(),
        imm: ctrl.imm(),
        raddr: raddr.raddr(),
        rkey: raddr.rkey(),
        gathers,
        total,
    })
}
