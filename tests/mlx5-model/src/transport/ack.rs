//! What the requester does with a response packet (rxe `rxe_comp.c` `check_psn`,
//! `check_ack`, `do_read`, `do_atomic`, `complete_ack`).
//!
//! * An ACK for PSN p acknowledges every outstanding PSN up to p: the WQEs whose last PSN
//!   is at or before p complete in order (one ACK may complete several: coalesced). A READ
//!   or atomic is completed only by its own response: an ACK past it means the response was
//!   lost, and the timer asks again.
//! * A READ RESPONSE must carry the oldest unacknowledged PSN (responses come in order);
//!   its payload goes into the READ's scatter list at (PSN − first PSN) × MTU; FIRST and
//!   MIDDLE must be a full MTU. LAST or ONLY completes the READ. Any response implicitly
//!   acknowledges the WQEs before it.
//! * An ATOMIC ACKNOWLEDGE writes the original value (8 bytes, big-endian as on the wire)
//!   into the atomic's buffer and completes it.
//! * An RNR NAK acknowledges what is before its PSN and starts an RNR wait
//!   ([`super::requester::rnr`]).
//! * A sequence NAK acknowledges what is before its PSN and goes back to it (one
//!   retransmission against `retry_cnt`).
//! * An invalid request, remote access or remote operational NAK completes the WQE holding
//!   its PSN with `REMOTE_INVAL_REQ_ERR` (0x12), `REMOTE_ACCESS_ERR` (0x13) or
//!   `REMOTE_OP_ERR` (0x14), flushes the other outstanding WQEs and moves the QP to ERR.
//!
//! A response for no outstanding PSN, for a QP that is not an RC QP in RTS, or from another
//! path is dropped and counted.

use rdma_pmd::BusAddr;

use super::requester::{self, go_back};
use super::{dropped, Drop, Tx};
use crate::counters::{bump, Reason};
use crate::engine::{fail_inflight, req_cqe};
use crate::model::Shared;
use crate::objects::{Device, QpState, Service};
use crate::responder::check::{psn_add, psn_diff};
use crate::responder::Op;
use crate::roce::bth::{Operation, Position};
use crate::roce::ext::{NakCode, Syndrome};
use crate::roce::RocePacket;

/// Handle one response packet.
pub(crate) fn response(sh: &Shared, pkt: &RocePacket<'_>, local: bool, tx: &mut Tx) {
    let mut guard = sh.dev();
    let dev = &mut *guard;
    let qpn = pkt.bth.dest_qp;
    let Some(qp) = dev.qps.get_mut(&qpn) else { return dropped(sh, Drop::NoQp) };
    if qp.spec.service != Service::Rc || qp.state != QpState::Rts {
        return dropped(sh, Drop::NoQp);
    }
    if !super::responder::path_matches(sh, qp, pkt) {
        return dropped(sh, Drop::Address);
    }
    // rxe_comp.c: every response the completer takes in pushes the retransmit timer out
    // (`mod_timer(&qp->retrans_timer, …)` on `COMPST_EXIT`), so the local ACK timeout
    // measures time without any response (IBTA vol 1 §9.7.6.1.3), not since the request
    // first went out; only progress gives the retry counts back.
    qp.req.heard(qp.ack_timeout);
    let psn = pkt.bth.psn;
    let op = pkt.bth.opcode.operation();
    let Some(aeth) = pkt.ext.aeth.or_else(|| {
        // READ RESPONSE MIDDLE has no AETH: it is an implicit ACK.
        (op == Operation::ReadResponseMiddle)
            .then_some(crate::roce::ext::Aeth { syndrome: Syndrome::Ack { credits: 0x1f }, msn: 0 })
    }) else {
        return dropped(sh, Drop::Unexpected);
    };
    // A response before the oldest unacknowledged PSN is stale (a duplicate ACK).
    let una = qp.req.una;
    if qp.req.inflight.is_empty() || psn_diff(psn, una) < 0 {
        return dropped(sh, Drop::Unexpected);
    }
    let last = qp.req.inflight.back().map(|w| w.last_psn()).unwrap_or(una);
    if psn_diff(psn, last) > 0 {
        return dropped(sh, Drop::Unexpected);
    }
    match aeth.syndrome {
        Syndrome::Ack { .. } => match op {
            Operation::Acknowledge => {
                ack_through(sh, dev, qpn, psn);
            }
            Operation::ReadResponseFirst
            | Operation::ReadResponseMiddle
            | Operation::ReadResponseLast
            | Operation::ReadResponseOnly => read_response(sh, dev, qpn, pkt, tx),
            Operation::AtomicAcknowledge => atomic_ack(sh, dev, qpn, pkt),
            _ => dropped(sh, Drop::Unexpected),
        },
        Syndrome::RnrNak { .. } => {
            ack_before(sh, dev, qpn, psn);
            requester::rnr(sh, dev, qpn, psn);
        }
        Syndrome::Nak(NakCode::PsnSequence) => {
            ack_before(sh, dev, qpn, psn);
            let Some(qp) = dev.qps.get_mut(&qpn) else { return };
            if qp.req.rnr.is_some() {
                return; // the RNR wait resends from its own PSN
            }
            if qp.req.nak_psn == Some(psn) {
                return; // the same NAK again: the go-back is under way
            }
            if qp.req.retries_left == 0 {
                let dst = qp.remote_qpn;
                return fail_inflight(sh, dev, qpn, Reason::RetryExceeded { qpn: dst }, true);
            }
            qp.req.retries_left -= 1;
            qp.req.nak_psn = Some(psn);
            go_back(sh, &mut qp.req, psn, tx);
        }
        Syndrome::Nak(code) => {
            ack_before(sh, dev, qpn, psn);
            let r = match code {
                NakCode::InvalidRequest => Reason::NakInvalidRequest { psn },
                NakCode::RemoteAccess => Reason::NakRemoteAccess { psn },
                _ => Reason::NakRemoteOperational { psn },
            };
            fail_inflight(sh, dev, qpn, r, !local);
        }
        Syndrome::Reserved(_) => dropped(sh, Drop::Unexpected),
    }
    // Acknowledgements open the window: send what waited for them.
    if let Some(qp) = dev.qps.get_mut(&qpn) {
        if qp.state == QpState::Rts {
            qp.req.pump(sh, tx);
        }
    }
}

/// Complete the front WQE successfully.
fn complete_front(sh: &Shared, dev: &mut Device, qpn: u32) {
    let Some(qp) = dev.qps.get_mut(&qpn) else { return };
    let Some(w) = qp.req.inflight.pop_front() else { return };
    qp.req.una = psn_add(w.last_psn(), 1);
    let (retry, rnr, timeout) = (qp.retry_cnt, qp.rnr_retry, qp.ack_timeout);
    qp.req.progress(retry, rnr, timeout);
    bump(&sh.stats.wqes_executed);
    if w.req.signaled {
        req_cqe(sh, dev, qpn, &w.req);
    }
    sh.kick();
}

/// An ACK for `psn`: complete every SEND/WRITE whose last PSN is at or before it; stop at
/// a READ or atomic (only its response completes it).
fn ack_through(sh: &Shared, dev: &mut Device, qpn: u32, psn: u32) {
    loop {
        let Some(qp) = dev.qps.get_mut(&qpn) else { return };
        let Some(w) = qp.req.inflight.front() else { return };
        if w.wants_data() {
            return;
        }
        if psn_diff(psn, w.last_psn()) >= 0 {
            complete_front(sh, dev, qpn);
        } else {
            // A coalesced ACK inside a long message: progress, nothing to complete.
            if psn_diff(psn, qp.req.una) >= 0 {
                qp.req.una = psn_add(psn, 1);
                let (retry, rnr, timeout) = (qp.retry_cnt, qp.rnr_retry, qp.ack_timeout);
                qp.req.progress(retry, rnr, timeout);
            }
            return;
        }
    }
}

/// A NAK or a response for `psn` acknowledges every WQE that ends before it.
fn ack_before(sh: &Shared, dev: &mut Device, qpn: u32, psn: u32) {
    loop {
        let Some(qp) = dev.qps.get_mut(&qpn) else { return };
        let Some(w) = qp.req.inflight.front() else { return };
        if psn_diff(psn, w.last_psn()) > 0 && !w.wants_data() {
            complete_front(sh, dev, qpn);
        } else {
            return;
        }
    }
}

/// One READ RESPONSE packet.
fn read_response(sh: &Shared, dev: &mut Device, qpn: u32, pkt: &RocePacket<'_>, tx: &mut Tx) {
    let psn = pkt.bth.psn;
    ack_before(sh, dev, qpn, psn);
    let Some(qp) = dev.qps.get_mut(&qpn) else { return };
    let una = qp.req.una;
    let Some(w) = qp.req.inflight.front_mut() else { return };
    let Op::Read { len, .. } = w.req.packet.op else { return dropped(sh, Drop::Unexpected) };
    if !w.holds(psn) {
        return dropped(sh, Drop::Unexpected);
    }
    if psn != una && psn_diff(psn, w.first_psn) > 0 {
        // A response packet is missing: ask again from the oldest one not received
        // (rxe: COMPST_ERROR_RETRY, one retry against `retry_cnt`). The rest of the stream
        // that is still coming shows the same gap: one retry per gap (rxe
        // `comp.started_retry`), not one per packet.
        if psn_diff(psn, una) > 0 {
            bump(&sh.stats.frames_dropped);
            if qp.req.nak_psn == Some(una) {
                return;
            }
            if qp.req.retries_left == 0 {
                let dst = qp.remote_qpn;
                return fail_inflight(sh, dev, qpn, Reason::RetryExceeded { qpn: dst }, true);
            }
            qp.req.retries_left -= 1;
            qp.req.nak_psn = Some(una);
            go_back(sh, &mut qp.req, una, tx);
        }
        return;
    }
    let mtu = u64::from(w.req.packet.mtu);
    let offset = u64::from(psn_diff(psn, w.first_psn) as u32) * mtu;
    let data = pkt.payload;
    let want = len.saturating_sub(offset).min(mtu);
    let ends = matches!(pkt.bth.opcode.position(), Position::Last | Position::Only);
    if data.len() as u64 != want || ends != (psn == w.last_psn()) {
        return dropped(sh, Drop::Unexpected);
    }
    if let Err(r) = place(sh, &w.req.scatter, offset, data) {
        return fail_inflight(sh, dev, qpn, r, true);
    }
    w.placed = offset + data.len() as u64;
    if ends {
        complete_front(sh, dev, qpn);
    } else {
        qp.req.una = psn_add(psn, 1);
        let (retry, rnr, timeout) = (qp.retry_cnt, qp.rnr_retry, qp.ack_timeout);
        qp.req.progress(retry, rnr, timeout);
    }
}

/// An ATOMIC ACKNOWLEDGE.
fn atomic_ack(sh: &Shared, dev: &mut Device, qpn: u32, pkt: &RocePacket<'_>) {
    let psn = pkt.bth.psn;
    ack_before(sh, dev, qpn, psn);
    let Some(qp) = dev.qps.get_mut(&qpn) else { return };
    let Some(w) = qp.req.inflight.front() else { return };
    let (Op::Atomic { .. }, Some(orig)) = (w.req.packet.op, pkt.ext.atomic_ack) else {
        return dropped(sh, Drop::Unexpected);
    };
    if w.first_psn != psn {
        return dropped(sh, Drop::Unexpected);
    }
    if let Err(r) = place(sh, &w.req.scatter, 0, &orig.to_be_bytes()) {
        return fail_inflight(sh, dev, qpn, r, true);
    }
    complete_front(sh, dev, qpn);
}

/// Write `data` into the scatter list `scatter` (bus address, length) at byte `offset` of
/// the list.
fn place(sh: &Shared, scatter: &[(u64, u64)], offset: u64, data: &[u8]) -> Result<(), Reason> {
    let mut at = 0u64; // start of the current entry in list order
    let mut rest = data;
    let mut pos = offset;
    for &(bus, len) in scatter {
        if rest.is_empty() {
            break;
        }
        let end = at + len;
        if pos < end {
            let skip = pos - at;
            let n = (len - skip).min(rest.len() as u64) as usize;
            if !sh.dma.write(BusAddr(bus + skip), &rest[..n]) {
                return Err(Reason::DmaFault { bus: bus + skip, len: n as u64 });
            }
            rest = &rest[n..];
            pos += n as u64;
        }
        at = end;
    }
    Ok(())
}
