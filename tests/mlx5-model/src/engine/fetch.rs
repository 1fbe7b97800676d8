//! Fetch: the WQE at the QP's counter, block by block from the ring, or the BlueFlame copy
//! that came with the doorbell; and the doorbell checks that need the WQE (its first 8 bytes
//! are the doorbell's, the BlueFlame copy equals the ring).

use rdma_pmd::BusAddr;

use super::complete::fail;
use super::{execute, validate, Prepared};
use crate::be::get16;
use crate::counters::{bump, Reason};
use crate::model::Shared;
use crate::objects::Device;
use crate::wqe::{wqebbs, DS_UNIT, WQEBB};

/// Fetch, check and gather the WQE at the QP's counter. Called with the device lock held.
pub(super) fn prepare(sh: &Shared, dev: &mut Device, qpn: u32, covered: u32) -> Prepared {
    let qp = dev.qps.get_mut(&qpn).expect("caller checked");
    let idx = qp.sq_pi;
    let mut first = [0u8; WQEBB];
    let at = qp.sq_slot(u32::from(idx));
    if !sh.dma.read(BusAddr(at), &mut first) {
        let r = Reason::DmaFault { bus: at, len: WQEBB as u64 };
        return fail(sh, dev, qpn, idx, 0, r, 1);
    }
    let ds = first[7] & 0x3f;
    let n = wqebbs(ds);
    if n > covered {
        let r = Reason::WqePastDoorbellRecord { wqebbs: n, covered };
        return fail(sh, dev, qpn, idx, first[3], r, covered);
    }
    let mut wqe = Vec::with_capacity(n as usize * WQEBB);
    wqe.extend_from_slice(&first);
    for i in 1..n {
        let at = qp.sq_slot(u32::from(idx) + i);
        let mut blk = [0u8; WQEBB];
        if !sh.dma.read(BusAddr(at), &mut blk) {
            let r = Reason::DmaFault { bus: at, len: WQEBB as u64 };
            return fail(sh, dev, qpn, idx, first[3], r, n);
        }
        wqe.extend_from_slice(&blk);
    }
    let db = qp.pending.front_mut().expect("caller checked");
    db.touched = true;
    let mut notes = Vec::new();
    let last = idx.wrapping_add(n as u16) == db.target;
    if last && !db.synthetic {
        let db_idx = get16(&db.head, 1);
        if db.head[..] != wqe[..8] {
            notes.push(if db_idx != idx {
                Reason::DoorbellNotLastWqe { index: db_idx }
            } else {
                Reason::DoorbellMismatch { index: db_idx }
            });
        }
        if let Some(bf) = db.bf.as_ref().filter(|_| db_idx == idx) {
            let len = usize::from(bf[7] & 0x3f) * DS_UNIT;
            let len = len.min(bf.len()).min(wqe.len());
            if bf[..len] != wqe[..len] {
                notes.push(Reason::BlueFlameRingMismatch { index: idx });
            }
            // The HCA executes the BlueFlame copy and does not fetch the WQE.
            wqe = bf.clone();
            bump(&sh.stats.wqes_from_blueflame);
        }
    }
    for r in notes {
        sh.note(qpn, Some(idx), r);
    }
    let checked = validate::validate(sh, dev, qpn, idx, &wqe);
    match checked.and_then(|c| execute::request(sh, dev, qpn, idx, &wqe, c)) {
        Ok(req) => Prepared::Send(Box::new(req)),
        Err((r, n)) => fail(sh, dev, qpn, idx, wqe[3], r, n),
    }
}
