//! Validate: every field of one send WQE, and each lkey its data segments name.
//!
//! Which segments follow the control segment depends on the opcode and the QP's service (see
//! [`crate::wqe`]): RC WRITE (WITH IMM) and READ have a remote address segment, RC atomics
//! a remote address and an atomic segment, RC SEND (WITH IMM) nothing, UD and GSI SEND a
//! 48-byte datagram segment; data or inline segments fill the rest of DS.
//!
//! Control segment: opmod 0; an opcode the service executes (RC: 0x08, 0x09, 0x0a, 0x0b,
//! 0x10, 0x11, 0x12; UD/GSI: 0x0a, 0x0b; else `LOCAL_QP_OP_ERR`, 0x02); WQE index = the HCA's
//! counter; QPN = this QP; DS covers the opcode's fixed segments and DS × 16 ≤
//! `max_wqe_sz_sq`; the WQE ends at or before the doorbell record's counter (all 0x02; that
//! last check is the fetch's). Notes for reserved bits (`qpn_ds` 7:6, `fm_ce_se` bits 4 and
//! 0), a non-zero signature (no `wq_sig` QPs), a non-zero `dci_stream_channel_id`, the
//! remote address segment's reserved word, the datagram segment's reserved key half and a
//! clear `MLX5_EXTENDED_UD_AV`.
//!
//! Data: each 16-byte unit after the fixed segments starts a pointer segment or an inline
//! segment; an inline payload must end inside DS (0x02); a pointer `byte_count` of 0 counts
//! as 2^31 bytes; the total must not exceed 2^31 (`LOCAL_LENGTH_ERR`, 0x01); each lkey must
//! exist, be in the QP's PD and cover its range (`LOCAL_PROT_ERR`, 0x04), and its translation
//! must reach DMA memory (0x04 with the DMA-fault vendor code). Where the HCA *writes* the
//! local buffer — a READ's destination, an atomic's result — inline is refused (0x02) and the
//! lkey must grant local write (0x04): the model checks this before sending the request, so
//! nothing is read or changed at the responder for a request that could not complete. An
//! atomic has exactly one pointer segment (0x02) of 8 bytes (0x01). A datagram may not exceed
//! the UD path MTU (0x01) and its address vector must name a source GID of the port (0x02).
//! The remote side is checked by the [`responder`](crate::responder).

use crate::codes::SendOpcode;
use crate::counters::Reason;
use crate::model::Shared;
use crate::objects::Device;
use crate::responder::{Atomic, UD_MTU};
use crate::wqe::{
    wqebbs, AtomicSeg, CtrlSeg, DataSeg, DatagramSeg, RaddrSeg, ATOMIC_SIZE, DS_UNIT,
    EXTENDED_UD_AV, MAX_MSG,
};

/// The address vector of a UD send, as the datagram segment gives it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Av {
    pub qkey: u32,
    pub dqpn: u32,
    pub dgid: [u8; 16],
    pub dmac: [u8; 6],
    pub sgid_index: u8,
    pub tclass: u8,
    pub hop_limit: u8,
    pub flow_label: u32,
}

/// What the WQE asks for.
#[derive(Clone, Copy, Debug)]
pub(super) enum Kind {
    Write { raddr: u64, rkey: u32, imm: Option<[u8; 4]> },
    Send { imm: Option<[u8; 4]> },
    Read { raddr: u64, rkey: u32 },
    Atomic { raddr: u64, rkey: u32, atomic: Atomic },
    Datagram { av: Av, imm: Option<[u8; 4]> },
}

impl Kind {
    /// Whether the data segments are where the HCA writes (READ, atomics).
    fn scatters(&self) -> bool {
        matches!(self, Kind::Read { .. } | Kind::Atomic { .. })
    }
}

/// A WQE that passed every check: what executing it needs.
pub(super) struct Checked {
    /// WQEBBs the WQE takes.
    pub wqebbs: u32,
    pub opcode: u8,
    pub signaled: bool,
    pub kind: Kind,
    /// The data segments, in order: what is sent, or (READ, atomics) where the answer goes.
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

/// The fixed segments of each opcode the service executes, in 16-byte units after the
/// control segment's; `None` for an opcode the service does not execute.
fn layout(datagram: bool, op: SendOpcode) -> Option<usize> {
    use SendOpcode::*;
    Some(match (datagram, op) {
        (false, RdmaWrite | RdmaWriteImm | RdmaRead) => 2,
        (false, AtomicCs | AtomicFa) => 3,
        (false, Send | SendImm) => 1,
        (true, Send | SendImm) => 1 + DatagramSeg::<&[u8]>::LEN / DS_UNIT,
        _ => return None,
    })
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
    let op = ctrl.opcode();
    let Some(fixed) = layout(qp.spec.service.datagram(), op) else {
        return err(Reason::UnsupportedOpcode { opcode: ctrl.opcode_raw() });
    };
    if ctrl.wqe_index() != idx {
        return err(Reason::WrongWqeIndex { expected: idx, found: ctrl.wqe_index() });
    }
    if ctrl.qpn() != qpn {
        return err(Reason::WrongQpn { expected: qpn, found: ctrl.qpn() });
    }
    if usize::from(ds) < fixed {
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
        notes.push(Reason::Reserved { what: "dci_stream_channel_id (not a DCI)" });
    }
    if ctrl.fm_ce_se() & 0x11 != 0 {
        notes.push(Reason::Reserved { what: "fm_ce_se bits 4 and 0" });
    }

    // The fixed segments.
    let imm = Some(ctrl.imm());
    let raddr = || {
        let r = RaddrSeg::new_checked(&wqe[16..32]).expect("ds covers the segment");
        (r.raddr(), r.rkey(), r.reserved())
    };
    use SendOpcode::*;
    let kind = match op {
        RdmaWrite | RdmaWriteImm | RdmaRead | AtomicCs | AtomicFa => {
            let (raddr, rkey, reserved) = raddr();
            if reserved != 0 {
                notes.push(Reason::Reserved { what: "raddr segment bytes 12..16" });
            }
            match op {
                RdmaWrite => Kind::Write { raddr, rkey, imm: None },
                RdmaWriteImm => Kind::Write { raddr, rkey, imm },
                RdmaRead => Kind::Read { raddr, rkey },
                _ => {
                    let a = AtomicSeg::new_checked(&wqe[32..48]).expect("ds covers the segment");
                    let atomic = if op == AtomicCs {
                        Atomic::Cas { compare: a.compare(), swap: a.swap_add() }
                    } else {
                        Atomic::Faa { add: a.swap_add() }
                    };
                    Kind::Atomic { raddr, rkey, atomic }
                }
            }
        }
        _ if fixed == 1 => Kind::Send { imm: (op == SendImm).then_some(ctrl.imm()) },
        _ => {
            let d = DatagramSeg::new_checked(&wqe[16..64]).expect("ds covers the segment");
            if d.key_reserved() != 0 {
                notes.push(Reason::Reserved { what: "datagram segment bytes 4..8" });
            }
            if d.dqp_dct() & EXTENDED_UD_AV == 0 {
                notes.push(Reason::Reserved { what: "dqp_dct bit 31 (MLX5_EXTENDED_UD_AV) clear" });
            }
            if usize::from(d.sgid_index()) >= sh.gids.len() {
                return err(Reason::BadSgidIndex { index: d.sgid_index() });
            }
            let av = Av {
                qkey: d.qkey(),
                dqpn: d.dqpn(),
                dgid: d.rgid(),
                dmac: d.rmac(),
                sgid_index: d.sgid_index(),
                tclass: d.tclass(),
                hop_limit: d.hop_limit(),
                flow_label: d.flow_label(),
            };
            Kind::Datagram { av, imm: (op == SendImm).then_some(ctrl.imm()) }
        }
    };
    for r in notes {
        sh.note(qpn, Some(idx), r);
    }

    // Walk the data segments (units fixed..ds).
    let mut gathers = Vec::new();
    let mut total: u64 = 0;
    let mut unit = fixed;
    let ds = usize::from(ds);
    while unit < ds {
        let seg = DataSeg::new_checked(&wqe[unit * DS_UNIT..]).expect("inside the WQE");
        if seg.is_inline() {
            if kind.scatters() {
                return err(Reason::InlineNotAllowed { opcode: ctrl.opcode_raw() });
            }
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
    if let Kind::Atomic { .. } = kind {
        if gathers.len() != 1 {
            return err(Reason::AtomicSegments { count: gathers.len() as u32 });
        }
        if total != ATOMIC_SIZE {
            return err(Reason::AtomicLength { len: total });
        }
    }
    if total > MAX_MSG {
        return err(Reason::MessageTooLong { len: total });
    }
    if let Kind::Datagram { .. } = kind {
        if total > u64::from(UD_MTU.min(qp.mtu)) {
            return err(Reason::DatagramTooLong { len: total, mtu: UD_MTU.min(qp.mtu) });
        }
    }
    for g in &gathers {
        if let Gather::Pointer { lkey, addr, len } = *g {
            let Some(mk) = dev.mkeys.get(&lkey) else { return err(Reason::UnknownLkey { lkey }) };
            if mk.pd != qp.spec.pd {
                return err(Reason::LkeyPdMismatch { lkey });
            }
            if kind.scatters() && !mk.rights.local_write {
                return err(Reason::LkeyNoLocalWrite { lkey });
            }
            if !mk.covers(addr, len) {
                return err(Reason::LkeyOutOfBounds { lkey, addr, len });
            }
            if let Err(bus) = mk.mapped(&*sh.dma, addr, len) {
                return err(Reason::DmaFault { bus, len });
            }
        }
    }
    Ok(Checked {
        wqebbs: n,
        opcode: ctrl.opcode_raw(),
        signaled: ctrl.signaled(),
        kind,
        gathers,
        total,
    })
}
