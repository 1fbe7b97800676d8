//! The requester: a validated WQE becomes RoCE v2 packets, and stays on the QP's list of
//! outstanding WQEs until its last PSN is acknowledged.
//!
//! Segmentation (IBTA vol 1 §9.2, rxe `rxe_req.c` `next_opcode`, `init_req_packet`): a
//! SEND or WRITE of `len` bytes takes max(1, ⌈len / MTU⌉) packets, FIRST, MIDDLE…, LAST or
//! a single ONLY; FIRST and MIDDLE carry exactly the path MTU. WRITE FIRST/ONLY carry the
//! RETH (address, R_Key, the whole length); the immediate rides on LAST/ONLY. A READ is one
//! READ REQUEST with a RETH that takes as many PSNs as its response has packets; an atomic
//! is one packet with an AtomicETH. PSNs are 24 bits, from the QP's SQ PSN. AckReq is set on
//! the last packet of every message and on every [`ACK_REQ_EVERY`]th packet (rxe: "at least
//! every 64 packets"), so long messages are acknowledged in coalesced steps.
//!
//! Datagrams (UD, GSI) are one SEND ONLY (WITH IMMEDIATE) with a DETH (Q_Key, source QP)
//! and complete as soon as they are sent: UD is unreliable.
//!
//! Retransmission is go-back-N (rxe `req_retry`): every packet of the outstanding WQEs from
//! a PSN on is sent again — after a sequence NAK (from the NAK's PSN), after the local ACK
//! timeout (from the oldest unacknowledged PSN) and when an RNR wait ends (from the RNR
//! NAK's PSN). A READ is asked again from its first response PSN not yet received, for
//! the bytes not yet received (rxe `req_retry` advances `iova`, `resid` and the PSN). Timeouts and sequence NAKs count against
//! `retry_cnt`, RNR NAKs against `rnr_retry` (7 = forever); both counts start again whenever
//! an acknowledgement makes progress. Exhausted, the oldest WQE completes with
//! `TRANSPORT_RETRY_EXC_ERR` or `RNR_RETRY_EXC_ERR`, the other outstanding WQEs are flushed
//! and the QP moves to ERR.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use super::timer::{ack_timeout, RNR_DELAY};
use super::Tx;
use crate::counters::{bump, Reason};
use crate::engine::{fail_inflight, Request};
use crate::model::Shared;
use crate::objects::{Device, QpState, Service};
use crate::responder::check::{psn_add, psn_diff};
use crate::responder::{Atomic, Op};
use crate::roce::bth::Opcode;
use crate::roce::ext::{AtomicEth, Deth, ExtRepr, Reth};
use crate::roce::packet::bth;

/// AckReq on at least every this many packets of a message (rxe's requester).
pub const ACK_REQ_EVERY: u32 = 64;
/// Most WQEs outstanding on one QP.
pub const WINDOW_WQES: usize = 32;
/// Most PSNs sent and not acknowledged on one QP: packets beyond wait for ACKs (a model
/// choice standing for the send queue's depth on the wire; rxe bounds it with `max_psn`).
pub const WINDOW_PSNS: u32 = 512;

/// A WQE on the wire, waiting for its acknowledgement.
#[derive(Debug)]
pub(crate) struct InFlight {
    pub req: Request,
    pub first_psn: u32,
    /// PSNs the WQE takes.
    pub npkts: u32,
    /// READ: response bytes placed so far.
    pub placed: u64,
}

impl InFlight {
    /// The WQE's last PSN.
    pub fn last_psn(&self) -> u32 {
        psn_add(self.first_psn, self.npkts - 1)
    }

    /// Whether `psn` is one of the WQE's.
    pub fn holds(&self, psn: u32) -> bool {
        psn_diff(psn, self.first_psn) >= 0 && psn_diff(psn, self.last_psn()) <= 0
    }

    /// Whether the WQE waits for data (a READ response, an atomic's value) rather than an
    /// ACK.
    pub fn wants_data(&self) -> bool {
        matches!(self.req.packet.op, Op::Read { .. } | Op::Atomic { .. })
    }
}

/// The requester half of an RC QP.
#[derive(Debug, Default)]
pub(crate) struct ReqState {
    pub inflight: VecDeque<InFlight>,
    /// The oldest PSN not yet acknowledged (rxe `comp.psn`).
    pub una: u32,
    /// The next PSN to send (rxe `req.psn`): every packet before it went out at least once
    /// since the last go-back.
    pub next: u32,
    /// When the local ACK timer fires.
    pub deadline: Option<Instant>,
    /// Retransmissions left before `RETRY_EXC_ERR`.
    pub retries_left: u8,
    /// RNR retries left before `RNR_RETRY_EXC_ERR` (unused with `rnr_retry` 7).
    pub rnr_left: u8,
    /// An RNR wait: when it ends, and the PSN to resend from.
    pub rnr: Option<(Instant, u32)>,
    /// The PSN of the last sequence NAK acted on since the last progress: the same NAK
    /// again (duplicated on the wire, or sent before our go-back reached the responder) is
    /// not another retry.
    pub nak_psn: Option<u32>,
}

impl ReqState {
    /// PSNs outstanding.
    pub fn psns(&self) -> u32 {
        self.inflight.iter().map(|w| w.npkts).sum()
    }

    /// Whether the QP may start another WQE now.
    pub fn may_start(&self) -> bool {
        self.rnr.is_none()
            && (self.inflight.is_empty()
                || (self.inflight.len() < WINDOW_WQES && self.psns() < WINDOW_PSNS))
    }

    /// Send what the window allows, from `next` on.
    pub fn pump(&mut self, sh: &Shared, tx: &mut Tx) {
        if self.rnr.is_some() {
            return;
        }
        if psn_diff(self.next, self.una) < 0 {
            self.next = self.una;
        }
        let limit = psn_add(self.una, WINDOW_PSNS);
        for w in &self.inflight {
            if psn_diff(self.next, limit) >= 0 {
                break;
            }
            if psn_diff(w.last_psn(), self.next) < 0 {
                continue;
            }
            self.next = send(sh, w, self.next, limit, tx);
        }
    }

    /// A response arrived, progress or not: the local ACK timer starts again (an RNR wait
    /// keeps its own timer).
    pub fn heard(&mut self, timeout: u8) {
        if self.rnr.is_none() && !self.inflight.is_empty() {
            self.deadline = Some(Instant::now() + ack_timeout(timeout));
        }
    }

    /// Progress was made: the retry counts start again and the timer restarts.
    pub fn progress(&mut self, retry_cnt: u8, rnr_retry: u8, timeout: u8) {
        self.retries_left = retry_cnt;
        self.rnr_left = rnr_retry;
        self.nak_psn = None;
        self.deadline = (!self.inflight.is_empty()).then(|| Instant::now() + ack_timeout(timeout));
    }
}

/// PSNs a message takes.
fn psns_of(op: &Op, len: u64, mtu: u32) -> u32 {
    let n = |l: u64| l.div_ceil(u64::from(mtu)).clamp(1, u64::from(u32::MAX)) as u32;
    match op {
        Op::Write { .. } | Op::Send { .. } => n(len),
        Op::Read { len, .. } => n(*len),
        Op::Atomic { .. } | Op::Datagram { .. } => 1,
    }
}

/// Put the request on the wire (called with the device lock held, after the WQE was
/// fetched and validated). A datagram completes at once; an RC request joins the QP's
/// outstanding WQEs.
pub(crate) fn post(sh: &Shared, dev: &mut Device, qpn: u32, req: Request, tx: &mut Tx) {
    let Some(qp) = dev.qps.get_mut(&qpn) else { return };
    if qp.gen != req.gen {
        return;
    }
    qp.sq_pi = qp.sq_pi.wrapping_add(req.wqebbs as u16);
    let mtu = req.packet.mtu;
    let npkts = psns_of(&req.packet.op, req.packet.payload.len() as u64, mtu);
    let first_psn = qp.npsn;
    qp.npsn = psn_add(first_psn, npkts);
    if let Op::Datagram { qkey, imm, .. } = req.packet.op {
        let op = if imm.is_some() { Opcode::UD_SEND_ONLY_IMM } else { Opcode::UD_SEND_ONLY };
        let ext = ExtRepr {
            deth: Some(Deth { qkey, src_qp: req.packet.src_qpn }),
            immdt: imm.map(u32::from_be_bytes),
            ..ExtRepr::default()
        };
        tx.push(sh, &req.addr, bth(op, req.packet.dst_qpn, first_psn), ext, &req.packet.payload);
        bump(&sh.stats.wqes_executed);
        if req.signaled {
            crate::engine::req_cqe(sh, dev, qpn, &req);
        }
        return;
    }
    let w = InFlight { req, first_psn, npkts, placed: 0 };
    let (retry, rnr, timeout) = (qp.retry_cnt, qp.rnr_retry, qp.ack_timeout);
    let was_empty = qp.req.inflight.is_empty();
    qp.req.inflight.push_back(w);
    if was_empty {
        qp.req.una = first_psn;
        qp.req.next = first_psn;
        qp.req.progress(retry, rnr, timeout);
    }
    qp.req.pump(sh, tx);
}

/// Send the packets of `w` from PSN `from` (its first if `from` is before it) up to, not
/// including, `limit`; returns the PSN after the last one sent. A READ is asked from `from`
/// on: only the responses not yet received.
pub(crate) fn send(sh: &Shared, w: &InFlight, from: u32, limit: u32, tx: &mut Tx) -> u32 {
    let p = &w.req.packet;
    let mtu = p.mtu as usize;
    let len = p.payload.len();
    let n = w.npkts;
    let skip = match psn_diff(from, w.first_psn) {
        d if d <= 0 => 0,
        d => d as u32,
    };
    let dst = p.dst_qpn;
    let a = &w.req.addr;
    let room = psn_diff(limit, w.first_psn).max(0) as u32;
    let end = n.min(room);
    match p.op {
        Op::Read { raddr, rkey, len } => {
            // rxe `req_retry`: the response packets before `from` arrived; ask for the
            // rest only, from that PSN, the address advanced and the length reduced by the
            // bytes already received (a responder replays a subset of a READ, IBTA vol 1
            // §9.7.5.1.1 (duplicate READ) and rxe_resp.c `duplicate_request`).
            let skip = skip.min(n - 1);
            let done = (u64::from(skip) * mtu as u64).min(len);
            let ext = ExtRepr {
                reth: Some(Reth { va: raddr + done, rkey, dma_len: (len - done) as u32 }),
                ..ExtRepr::default()
            };
            let mut b = bth(Opcode::RC_READ_REQUEST, dst, psn_add(w.first_psn, skip));
            b.ack_req = true;
            tx.push(sh, a, b, ext, &[]);
            return psn_add(w.first_psn, n);
        }
        Op::Atomic { raddr, rkey, atomic } => {
            let (op, swap_add, compare) = match atomic {
                Atomic::Cas { compare, swap } => (Opcode::RC_COMPARE_SWAP, swap, compare),
                Atomic::Faa { add } => (Opcode::RC_FETCH_ADD, add, 0),
            };
            let ext = ExtRepr {
                atomic_eth: Some(AtomicEth { va: raddr, rkey, swap_add, compare }),
                ..ExtRepr::default()
            };
            let mut b = bth(op, dst, w.first_psn);
            b.ack_req = true;
            tx.push(sh, a, b, ext, &[]);
            return psn_add(w.first_psn, 1);
        }
        Op::Write { raddr, rkey, imm } => {
            for i in skip..end {
                let (first, last) = (i == 0, i + 1 == n);
                let op = match (first, last, imm.is_some()) {
                    (true, true, false) => Opcode::RC_WRITE_ONLY,
                    (true, true, true) => Opcode::RC_WRITE_ONLY_IMM,
                    (true, false, _) => Opcode::RC_WRITE_FIRST,
                    (false, false, _) => Opcode::RC_WRITE_MIDDLE,
                    (false, true, false) => Opcode::RC_WRITE_LAST,
                    (false, true, true) => Opcode::RC_WRITE_LAST_IMM,
                };
                let ext = ExtRepr {
                    reth: first.then_some(Reth { va: raddr, rkey, dma_len: len as u32 }),
                    immdt: if last { imm.map(u32::from_be_bytes) } else { None },
                    ..ExtRepr::default()
                };
                push_data(sh, tx, w, i, op, ext, mtu);
            }
        }
        Op::Send { imm } => {
            for i in skip..end {
                let (first, last) = (i == 0, i + 1 == n);
                let op = match (first, last, imm.is_some()) {
                    (true, true, false) => Opcode::RC_SEND_ONLY,
                    (true, true, true) => Opcode::RC_SEND_ONLY_IMM,
                    (true, false, _) => Opcode::RC_SEND_FIRST,
                    (false, false, _) => Opcode::RC_SEND_MIDDLE,
                    (false, true, false) => Opcode::RC_SEND_LAST,
                    (false, true, true) => Opcode::RC_SEND_LAST_IMM,
                };
                let ext = ExtRepr {
                    immdt: if last { imm.map(u32::from_be_bytes) } else { None },
                    ..ExtRepr::default()
                };
                push_data(sh, tx, w, i, op, ext, mtu);
            }
        }
        Op::Datagram { .. } => {}
    }
    psn_add(w.first_psn, end.max(skip))
}

/// Packet `i` of a SEND or WRITE.
fn push_data(sh: &Shared, tx: &mut Tx, w: &InFlight, i: u32, op: Opcode, ext: ExtRepr, mtu: usize) {
    let p = &w.req.packet;
    let start = (i as usize * mtu).min(p.payload.len());
    let end = (start + mtu).min(p.payload.len());
    let mut b = bth(op, p.dst_qpn, psn_add(w.first_psn, i));
    b.ack_req = i + 1 == w.npkts || (i + 1) % ACK_REQ_EVERY == 0;
    tx.push(sh, &w.req.addr, b, ext, &p.payload[start..end]);
}

/// Go back to `from`: every outstanding packet from that PSN on is sent again, as the
/// window allows.
pub(crate) fn go_back(sh: &Shared, req: &mut ReqState, from: u32, tx: &mut Tx) {
    let again = psn_diff(req.next, from).max(0) as u64;
    sh.stats.retransmits.fetch_add(again, std::sync::atomic::Ordering::Relaxed);
    req.next = from;
    req.pump(sh, tx);
}

/// Fire the timers of every RC QP: RNR waits that ended, local ACK timeouts. True if any
/// fired.
pub(crate) fn timers(sh: &Arc<Shared>) -> bool {
    let now = Instant::now();
    let mut tx = Tx::default();
    let mut fired = false;
    {
        let mut guard = sh.dev();
        let dev = &mut *guard;
        let qpns: Vec<u32> = dev
            .qps
            .iter()
            .filter(|(_, q)| {
                q.spec.service == Service::Rc
                    && q.state == QpState::Rts
                    && !q.req.inflight.is_empty()
            })
            .map(|(n, _)| *n)
            .collect();
        for qpn in qpns {
            let Some(qp) = dev.qps.get_mut(&qpn) else { continue };
            if let Some((at, from)) = qp.req.rnr {
                if now >= at {
                    fired = true;
                    qp.req.rnr = None;
                    go_back(sh, &mut qp.req, from, &mut tx);
                    qp.req.deadline = Some(now + ack_timeout(qp.ack_timeout));
                }
                continue;
            }
            let Some(deadline) = qp.req.deadline else { continue };
            if now < deadline {
                continue;
            }
            fired = true;
            bump(&sh.stats.ack_timeouts);
            if qp.req.retries_left == 0 {
                let dst = qp.remote_qpn;
                fail_inflight(sh, dev, qpn, Reason::RetryExceeded { qpn: dst }, true);
                continue;
            }
            qp.req.retries_left -= 1;
            let una = qp.req.una;
            go_back(sh, &mut qp.req, una, &mut tx);
            qp.req.deadline = Some(now + ack_timeout(qp.ack_timeout));
        }
    }
    let sent = !tx.is_empty();
    tx.flush(sh);
    if fired {
        sh.kick();
    }
    fired || sent
}

/// An RNR NAK for `psn`: wait and resend from there, or fail once the RNR retries are spent.
pub(crate) fn rnr(sh: &Shared, dev: &mut Device, qpn: u32, psn: u32) {
    let Some(qp) = dev.qps.get_mut(&qpn) else { return };
    if qp.rnr_retry != 7 {
        if qp.req.rnr_left == 0 {
            let dst = qp.remote_qpn;
            fail_inflight(sh, dev, qpn, Reason::RnrRetryExceeded { qpn: dst }, true);
            return;
        }
        qp.req.rnr_left -= 1;
    }
    qp.req.rnr = Some((Instant::now() + RNR_DELAY, psn));
    qp.req.deadline = None;
}
