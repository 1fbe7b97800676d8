//! What the HCA does when the driver stores to its BAR.
//!
//! Layout (one UAR page per index, `index * 4096`; page 0 is reserved for the initialization
//! segment, so ALLOC_UAR hands out indices from 1):
//!
//! | offset in page | width | register | source |
//! |---|---|---|---|
//! | 0x020 | 8 | CQ arm doorbell: BE32 `sn << 28 \| cmd \| ci`, BE32 `cqn` | mlx5dv.h `MLX5_CQ_DOORBELL`, rdma-core `cq.c` `mlx5_arm_cq` |
//! | 0x800 | 8 | send doorbell, half 0: the first 8 bytes of the last WQE's ctrl segment | rdma-core `qp.c` `post_send_db` (`mmio_write64_be`) |
//! | 0x900 | 8 | send doorbell, half 1 | `bf->offset ^= bf->buf_size` |
//! | 0x800..0x900, 0x900..0xa00 | 64 each | BlueFlame: the WQE itself in 64-byte WC blocks, 1 < ds ≤ 16 | `mlx5_bf_copy`; `log_bf_reg_size` = 9 |
//!
//! The handler runs on the driver's thread, inside the store. For a send doorbell it reads the
//! QP's send doorbell record (`dbrec[1]`, BE32, low 16 bits) right away — the driver updated it
//! before the store — and queues `(doorbell bytes, record, BlueFlame copy)` for the engine.
//! The engine then executes exactly the WQEs up to that record.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rdma_pmd_hal::mem::{BarHandler, BarMem};

use crate::be::get32;
use crate::counters::{bump, Reason};
use crate::model::{Shared, UAR_PAGE};
use crate::objects::{BfAsm, Doorbell, QpState};

/// CQ arm doorbell offset.
pub const CQ_DOORBELL: usize = 0x20;
/// First BlueFlame half / send doorbell.
pub const BF_BASE: usize = 0x800;
/// Bytes of one BlueFlame half (`1 << log_bf_reg_size` / 2).
pub const BF_HALF: usize = 0x100;

/// The BAR handler of a model.
pub(crate) struct Handler(pub Arc<Shared>);

impl BarHandler for Handler {
    fn on_write(&self, mem: &BarMem, off: usize, len: usize) {
        if crate::fw::claims(&self.0, mem, off, len, true) {
            return;
        }
        let sh = &self.0;
        let page = (off / UAR_PAGE) as u32;
        let o = off % UAR_PAGE;
        let known = page != 0 && sh.dev().uars.contains_key(&page);
        if !known {
            sh.note(0, None, Reason::UnknownBarStore { off: off as u32, len: len as u32 });
            return;
        }
        match (o, len) {
            (CQ_DOORBELL, 8) => {
                let mut b = [0u8; 8];
                mem.read_bytes(off, &mut b);
                arm_cq(sh, page, b);
            }
            (o, 8) if o == BF_BASE || o == BF_BASE + BF_HALF => {
                let mut b = [0u8; 8];
                mem.read_bytes(off, &mut b);
                bump(&sh.stats.doorbells);
                doorbell(sh, page, ((o - BF_BASE) / BF_HALF) as u8, b, None);
            }
            (o, 64) if (BF_BASE..BF_BASE + 2 * BF_HALF).contains(&o) => {
                let mut b = [0u8; 64];
                mem.read_bytes(off, &mut b);
                blueflame_block(sh, page, o, b);
            }
            _ => sh.note(0, None, Reason::UnknownBarStore { off: off as u32, len: len as u32 }),
        }
    }

    fn on_read(&self, mem: &BarMem, off: usize, len: usize) {
        crate::fw::claims(&self.0, mem, off, len, false);
    }
}

fn arm_cq(sh: &Shared, page: u32, b: [u8; 8]) {
    bump(&sh.stats.cq_arms);
    let word = get32(&b, 0);
    let cqn = get32(&b, 4) & 0x00ff_ffff;
    let mut dev = sh.dev();
    let Some(cq) = dev.cqs.get_mut(&cqn).filter(|c| c.uar == page) else {
        drop(dev);
        sh.note(0, None, Reason::CqArmBadCq { cqn });
        return;
    };
    let ci = word & 0x00ff_ffff;
    if cq.pi & 0x00ff_ffff != ci {
        // CQEs are already waiting past the consumer index: the event fires at once.
        sh.stats.event(crate::counters::Event::Completion { cqn });
        if let Some(eqn) = cq.eqn {
            crate::fw::comp_event(sh, eqn, cqn);
        }
    } else {
        cq.armed = true;
    }
}

fn blueflame_block(sh: &Shared, page: u32, o: usize, b: [u8; 64]) {
    let half = ((o - BF_BASE) / BF_HALF) as u8;
    let block = (o - BF_BASE) % BF_HALF / 64;
    let done = {
        let mut dev = sh.dev();
        let Some(uar) = dev.uars.get_mut(&page) else { return };
        let asm = &mut uar.bf[half as usize];
        if block == 0 {
            let ds = b[7] & 0x3f;
            let need = (usize::from(ds) * 16).div_ceil(64).clamp(1, BF_HALF / 64);
            *asm = BfAsm { buf: b.to_vec(), need };
        } else if asm.need == 0 || asm.buf.len() != block * 64 {
            *asm = BfAsm::default();
            drop(dev);
            sh.note(0, None, Reason::BlueFlameOutOfOrder { off: o as u32 });
            return;
        } else {
            asm.buf.extend_from_slice(&b);
        }
        if asm.buf.len() == asm.need * 64 {
            Some(std::mem::take(&mut asm.buf))
        } else {
            None
        }
    };
    let Some(copy) = done else { return };
    bump(&sh.stats.blueflame);
    let mut head = [0u8; 8];
    head.copy_from_slice(&copy[..8]);
    let ds = copy[7] & 0x3f;
    if !(2..=16).contains(&ds) {
        sh.note(get32(&copy, 4) >> 8, None, Reason::BlueFlameBadDs { ds });
        doorbell(sh, page, half, head, None);
    } else {
        doorbell(sh, page, half, head, Some(copy));
    }
}

fn doorbell(sh: &Shared, page: u32, half: u8, head: [u8; 8], bf: Option<Vec<u8>>) {
    let qpn = get32(&head, 4) >> 8;
    if crate::eth::send::is_sq(&sh.dev(), qpn) {
        // An Ethernet SQ (the WQEs are read from the ring; a BlueFlame copy adds nothing).
        return crate::eth::send::doorbell(sh, page, qpn);
    }
    let mut dev = sh.dev();
    let mut notes = Vec::new();
    if let Some(uar) = dev.uars.get_mut(&page) {
        if uar.last_half == Some(half) {
            notes.push(Reason::DoorbellHalfRepeated { uar: page });
        }
        uar.last_half = Some(half);
    }
    let queued = match dev.qps.get_mut(&qpn) {
        None => {
            notes.push(Reason::DoorbellUnknownQp { qpn });
            false
        }
        Some(qp) if qp.spec.uar != page => {
            notes.push(Reason::DoorbellWrongUar { qpn, uar: page });
            false
        }
        Some(qp) if matches!(qp.state, QpState::Reset | QpState::Init | QpState::Rtr) => {
            notes.push(Reason::DoorbellQpNotReady { qpn });
            false
        }
        Some(qp) => match sh.read_be32(qp.spec.dbrec + 4) {
            None => {
                notes.push(Reason::DoorbellRecordFault { qpn });
                false
            }
            Some(rec) => {
                qp.pending.push_back(Doorbell {
                    head,
                    target: rec as u16,
                    bf,
                    synthetic: false,
                    touched: false,
                });
                true
            }
        },
    };
    if queued {
        dev.ready.insert(qpn);
        sh.outstanding.fetch_add(1, Ordering::AcqRel);
    }
    drop(dev);
    if !queued {
        bump(&sh.stats.ignored_doorbells);
    }
    for n in notes {
        sh.note(qpn, None, n);
    }
    if queued {
        sh.kick();
    }
}
