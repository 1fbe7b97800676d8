//! Writing CQEs into a CQ, the way the HCA does.
//!
//! * The entry is byte `(pi & (cqe_cnt - 1)) * 64` of the CQ's page list; its owner bit is `!!(pi & cqe_cnt)`, the
//!   lap parity software expects (rdma-core `cq.c` `get_sw_cqe`).
//! * The body (bytes 0..56) is written first, then a release fence, then the last 8 bytes,
//!   which hold `op_own` (byte 63), as one 8-byte store, so that software which sees the new
//!   owner bit (and then issues its read barrier) sees the whole CQE. One 8-byte store because
//!   the driver polls that word with one 8-byte load: the model's thread and the driver's must
//!   not race with accesses of different sizes (`rdma_pmd_hal::access`, "Access sizes"), and
//!   `HeapDma::write` of 8 aligned bytes is exactly one such store.
//! * Before writing, the model reads the consumer index from the CQ doorbell record
//!   (`dbrec[0]`, BE32, 24 bits, `MLX5_CQ_SET_CI`). If the producer would pass
//!   `ci + cqe_cnt`, the CQE is **not** written: the CQ enters error, a
//!   [`crate::counters::Event::CqError`] is posted and `cq_overflows` counts it
//!   (hardware reports `MLX5_EVENT_TYPE_CQ_ERROR` with `CQ_OVERRUN`; for a CQ the firmware
//!   created, the model posts that EQE to the EQ subscribed to CQ errors). Later CQEs for that
//!   CQ are dropped and counted too.

use std::sync::atomic::{fence, Ordering};

use rdma_pmd::BusAddr;

use crate::counters::{bump, Event, Reason};
use crate::cqe::{CqeRepr, CQE_LEN, OP_OWN};

/// First byte of the CQE's last 8-byte word, the one holding `op_own`: written last, whole.
const OWNER_WORD: usize = OP_OWN & !7;
use crate::model::{CqeFault, Shared};
use crate::objects::Cq;

/// Write `repr` as the next CQE of `cq` (number `cqn`). False if it was dropped.
pub(crate) fn push(sh: &Shared, cqn: u32, cq: &mut Cq, mut repr: CqeRepr) -> bool {
    if cq.error {
        bump(&sh.stats.cq_overflows);
        return false;
    }
    let fault = sh.cqe_fault.lock().expect("model state poisoned").take();
    match fault {
        Some(CqeFault::Qpn(qpn)) => repr.qpn = qpn,
        Some(CqeFault::WqeCounter(c)) => repr.wqe_counter = c,
        Some(CqeFault::Opcode(op)) => repr.opcode = op,
        Some(CqeFault::Twice) | None => {}
    }
    if !write(sh, cqn, cq, &mut repr) {
        return false;
    }
    if fault == Some(CqeFault::Twice) {
        return write(sh, cqn, cq, &mut repr);
    }
    true
}

/// Write `repr` at the CQ's producer index, checked against its consumer index.
fn write(sh: &Shared, cqn: u32, cq: &mut Cq, repr: &mut CqeRepr) -> bool {
    let size = 1u32 << cq.log_size;
    let Some(ci) = sh.read_be32(cq.dbrec) else {
        sh.note(0, None, Reason::DmaFault { bus: cq.dbrec, len: 4 });
        return cq_error(sh, cqn, cq, CQ_ERROR_ACCESS);
    };
    let used = cq.pi.wrapping_sub(ci & 0x00ff_ffff) & 0x00ff_ffff;
    if used >= size {
        sh.note(0, None, Reason::CqOverflow { cqn });
        return cq_error(sh, cqn, cq, CQ_ERROR_OVERRUN);
    }
    repr.owner = cq.pi & size != 0;
    if repr.syndrome.is_none() {
        repr.timestamp = sh.now_ns();
    }
    let mut bytes = [0u8; CQE_LEN];
    repr.emit(&mut bytes);
    let at = cq.buf.at(u64::from(cq.pi & (size - 1)) * CQE_LEN as u64);
    if !sh.dma.write(BusAddr(at), &bytes[..OWNER_WORD]) {
        sh.note(0, None, Reason::DmaFault { bus: at, len: CQE_LEN as u64 });
        return cq_error(sh, cqn, cq, CQ_ERROR_ACCESS);
    }
    // Orders the CQE body before its ownership word: software that observes the new owner
    // bit (its load, then its `from_device` Acquire fence) must find the body complete (PRM:
    // the HCA writes op_own last). `HeapDma::write` starts with the same fence; this one says
    // so where it matters.
    fence(Ordering::Release);
    if !sh.dma.write(BusAddr(at + OWNER_WORD as u64), &bytes[OWNER_WORD..]) {
        sh.note(0, None, Reason::DmaFault { bus: at, len: CQE_LEN as u64 });
        return cq_error(sh, cqn, cq, CQ_ERROR_ACCESS);
    }
    cq.pi = cq.pi.wrapping_add(1);
    if cq.armed {
        cq.armed = false;
        sh.stats.event(Event::Completion { cqn });
        if let Some(eqn) = cq.eqn {
            crate::fw::comp_event(sh, eqn, cqn);
        }
    }
    true
}

/// CQ error syndrome: the CQ overran (PRM "CQ Error" event).
pub(crate) const CQ_ERROR_OVERRUN: u8 = 0x1;
/// CQ error syndrome: the CQ's memory could not be accessed.
pub(crate) const CQ_ERROR_ACCESS: u8 = 0x2;

fn cq_error(sh: &Shared, cqn: u32, cq: &mut Cq, syndrome: u8) -> bool {
    cq.error = true;
    bump(&sh.stats.cq_overflows);
    sh.stats.event(Event::CqError { cqn });
    if cq.eqn.is_some() {
        crate::fw::cq_error_event(sh, cqn, syndrome);
    }
    false
}
