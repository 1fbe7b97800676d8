//! The responder on request packets: RC (IBTA vol 1 §9.7.5, rxe `rxe_resp.c`) and the UD/GSI
//! receiver (rxe `rxe_recv.c`, `rxe_resp.c` for datagrams).
//!
//! Before a packet reaches an RC QP (rxe `rxe_recv.c` `hdr_check`, `check_addr`): DestQP is
//! an RC QP of this port in RTR or RTS, the P_Key is the default 0xffff, and the IP source
//! and destination are the QP's path (its destination GID and its source GID; a QP
//! connected by loopback takes only frames this model looped back). Anything else is
//! dropped and counted, and the requester, unanswered, retries until `retry_cnt` runs out.
//!
//! Then the checks of [`crate::responder::check`] in order, and per packet:
//!
//! * WRITE places each packet's payload at once, at the address the RETH of the FIRST
//!   packet started and the earlier packets advanced; WRITE WITH IMMEDIATE consumes a
//!   receive WQE on its last packet (`RESP_WR_IMM`, `byte_cnt` = the RETH length);
//! * SEND collects the message's payload and scatters it into the receive WQE when the
//!   last packet arrives (a modelling choice: hardware scatters per packet; the CQE and the
//!   bytes are the same, and a receive too short fails on the last packet rather than on
//!   the one that overflows);
//! * READ reads the range and answers READ RESPONSE FIRST/MIDDLE/LAST or ONLY, cut by the
//!   path MTU, PSNs from the request's; the expected PSN moves past all of them;
//! * an atomic executes on 8 big-endian bytes (the reset `atomic_req_8B_endianness_mode`,
//!   which the model's firmware offers no capability to change), keeps the original value
//!   for a duplicate, and answers ATOMIC ACKNOWLEDGE;
//! * a SEND or WRITE packet with AckReq is acknowledged (ACK, the packet's PSN, MSN = the
//!   messages completed, credits 0x1f "not flow controlled").
//!
//! Duplicates (rxe `duplicate_request`): a SEND or WRITE is acknowledged again with the PSN
//! before the expected one; a READ is executed again (its data may have changed: so does
//! rxe's); an atomic is answered from the saved original value, and dropped if none is
//! saved for that PSN.
//!
//! The MSN counts completed messages modulo 2^24 (IBTA §9.7.5.1.5).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use rdma_pmd::BusAddr;

use super::{dropped, Addr, Drop, Tx};
use crate::codes::CqeOpcode;
use crate::counters::{bump, Event, Reason};
use crate::grh::{GRH_LEN, L3};
use crate::model::Shared;
use crate::objects::{Device, Qp, QpState, Route, Service};
use crate::responder::check::{
    self, psn_add, Access, Kind, PsnClass, Refusal, Response, RkeyError, Target,
};
use crate::responder::recv::{self, Done};
use crate::responder::{ud, Op, Packet};
use crate::roce::bth::{BthRepr, Opcode, Operation, Position, Transport};
use crate::roce::ext::{Aeth, ExtRepr, NakCode, Syndrome};
use crate::roce::packet::bth;
use crate::roce::{IpRepr, RocePacket};

/// The AETH credit code "not flow controlled" rxe sends in every ACK (`AETH_ACK_UNLIMITED`).
const CREDITS_UNLIMITED: u8 = 0x1f;
/// Atomic results kept for duplicates (rxe keeps `max_dest_rd_atomic` resources).
const SAVED_ATOMICS: usize = 16;
/// The default P_Key of a RoCE port.
const DEFAULT_PKEY: u16 = 0xffff;

/// A message being received.
#[derive(Clone, Debug)]
pub(crate) struct InMsg {
    /// The last packet's opcode (a FIRST or MIDDLE).
    pub last_op: Opcode,
    /// WRITE: the range left (the RETH's, advanced by each packet).
    pub target: Option<Target>,
    /// WRITE: the RETH length, the `byte_cnt` of a WRITE WITH IMMEDIATE.
    pub total: u32,
    /// SEND: the payload so far.
    pub buf: Vec<u8>,
}

/// The responder half of an RC QP.
#[derive(Clone, Debug, Default)]
pub(crate) struct RespState {
    /// A sequence NAK was sent and the expected PSN has not arrived since.
    pub nak_sent: bool,
    /// Messages completed (24 bits).
    pub msn: u32,
    pub msg: Option<InMsg>,
    /// (PSN, original value) of the latest atomics.
    pub atomics: VecDeque<(u32, u64)>,
}

/// Whether `pkt`'s IP addresses are `qp`'s path (rxe `check_addr`), and for a loopback QP
/// whether it came from this model.
pub(crate) fn path_matches(sh: &Shared, qp: &Qp, pkt: &RocePacket<'_>) -> bool {
    match qp.route {
        Route::Loopback => sh.gids.first().is_some_and(|g| pkt.ip.src_gid() == g.gid),
        Route::RoceV2 { dgid, sgid_index, .. } => {
            pkt.ip.src_gid() == dgid
                && sh.gids.get(usize::from(sgid_index)).is_some_and(|g| pkt.ip.dst_gid() == g.gid)
        }
    }
}

/// The addresses of `qp`'s path as a sender (ACKs and READ responses go back along it).
pub(crate) fn qp_addr(sh: &Shared, qp: &Qp, qpn: u32) -> Addr {
    let own = |i: u8| sh.gids.get(usize::from(i)).copied();
    let derived = super::udp_sport(qpn, qp.remote_qpn);
    match qp.route {
        Route::Loopback => {
            let g = own(0).map_or(([0; 16], [0; 6]), |g| (g.gid, g.mac));
            Addr {
                src_mac: g.1,
                dst_mac: g.1,
                sgid: g.0,
                dgid: g.0,
                tclass: 0,
                hop_limit: LOOPBACK_HOP_LIMIT,
                flow_label: 0,
                udp_sport: derived,
            }
        }
        Route::RoceV2 { dgid, dmac, sgid_index, tclass, hop_limit, flow_label, udp_sport } => {
            let g = own(sgid_index).map_or(([0; 16], [0; 6]), |g| (g.gid, g.mac));
            Addr {
                src_mac: g.1,
                dst_mac: dmac,
                sgid: g.0,
                dgid,
                tclass,
                hop_limit,
                flow_label,
                udp_sport: if udp_sport == 0 { derived } else { udp_sport },
            }
        }
    }
}

/// The hop limit of a loopback QP's packets (its path carries none; they never leave).
pub const LOOPBACK_HOP_LIMIT: u8 = 64;

/// Handle one request packet.
pub(crate) fn request(sh: &Shared, pkt: &RocePacket<'_>, frame: &[u8], local: bool, tx: &mut Tx) {
    if pkt.bth.pkey != DEFAULT_PKEY {
        return dropped(sh, Drop::Pkey);
    }
    match pkt.bth.opcode.transport() {
        Transport::Ud => return datagram(sh, pkt, frame),
        Transport::Rc => {}
        _ => return dropped(sh, Drop::NoQp),
    }
    let mut guard = sh.dev();
    let dev = &mut *guard;
    let qpn = pkt.bth.dest_qp;
    let Some(qp) = dev.qps.get(&qpn) else { return dropped(sh, Drop::NoQp) };
    if qp.spec.service != Service::Rc || !matches!(qp.state, QpState::Rtr | QpState::Rts) {
        return dropped(sh, Drop::NoQp);
    }
    if !path_matches(sh, qp, pkt) || (qp.route == Route::Loopback && !local) {
        return dropped(sh, Drop::Address);
    }
    match checks(sh, dev, qpn, pkt) {
        Ok(PsnClass::Expected) => execute(sh, dev, qpn, pkt, tx),
        Ok(PsnClass::Duplicate) => duplicate(sh, dev, qpn, pkt, tx),
        Err((refusal, reason)) => refuse(sh, dev, qpn, pkt, refusal, reason, tx),
    }
}

/// The checks in rxe's order; a refusal carries the model's detailed reason for the log.
fn checks(
    sh: &Shared,
    dev: &Device,
    qpn: u32,
    pkt: &RocePacket<'_>,
) -> Result<PsnClass, (Refusal, Option<Reason>)> {
    let qp = &dev.qps[&qpn];
    let op = pkt.bth.opcode;
    let psn = check::check_psn(pkt.bth.psn, qp.epsn, qp.resp.nak_sent).map_err(|r| (r, None))?;
    if psn == PsnClass::Duplicate {
        return Ok(psn);
    }
    let prev = qp.resp.msg.as_ref().map(|m| m.last_op);
    check::check_op_seq(prev, op).map_err(|r| (r, None))?;
    check::check_op_valid(op, &qp.rights).map_err(|r| {
        let reason = match r {
            Refusal::NotEnabled(Access::Write) => Reason::QpNoRemoteWrite { qpn },
            Refusal::NotEnabled(Access::Read) => Reason::QpNoRemoteRead { qpn },
            _ => Reason::QpNoRemoteAtomic { qpn },
        };
        (r, Some(reason))
    })?;
    check::check_resource(op, u32::MAX, qp.rq_posted(sh) > 0).map_err(|r| (r, None))?;
    let payload = pkt.payload.len() as u32;
    check::check_length(op, payload, qp.mtu, pkt.ext.reth.as_ref()).map_err(|r| (r, None))?;
    let Some(kind) = Kind::of(op) else { return Err((Refusal::MissingFirst, None)) };
    let starts = matches!(op.position(), Position::First | Position::Only);
    let target = if starts {
        Target::start(pkt.ext.reth.as_ref(), pkt.ext.atomic_eth.as_ref())
    } else {
        qp.resp.msg.as_ref().and_then(|m| m.target)
    };
    if let Some(t) = target {
        let key = dev.mkeys.get(&t.rkey);
        check::check_rkey(kind, starts, &t, key, qp.spec.pd, payload, pkt.pad, qp.mtu).map_err(
            |r| {
                let (rkey, addr, len) = (t.rkey, t.va, u64::from(t.resid));
                let reason = match r {
                    Refusal::Rkey(RkeyError::Unknown) => Some(Reason::UnknownRkey { rkey }),
                    Refusal::Rkey(RkeyError::Pd) => Some(Reason::RkeyPdMismatch { rkey }),
                    Refusal::Rkey(RkeyError::Rights) => Some(match kind {
                        Kind::Read => Reason::RkeyNoRemoteRead { rkey },
                        Kind::Atomic => Reason::RkeyNoRemoteAtomic { rkey },
                        _ => Reason::RkeyNoRemoteWrite { rkey },
                    }),
                    Refusal::Rkey(RkeyError::Bounds) => {
                        Some(Reason::RkeyOutOfBounds { rkey, addr, len })
                    }
                    Refusal::MisalignedAtomic => Some(Reason::AtomicMisaligned { addr }),
                    _ => None,
                };
                (r, reason)
            },
        )?;
    }
    Ok(PsnClass::Expected)
}

/// An ACK-class packet (ACK, NAK, RNR NAK) for `psn` on `qp`'s path.
fn send_ack(sh: &Shared, qp: &Qp, qpn: u32, syndrome: Syndrome, psn: u32, tx: &mut Tx) {
    let a = qp_addr(sh, qp, qpn);
    let ext = ExtRepr { aeth: Some(Aeth { syndrome, msn: qp.resp.msn }), ..ExtRepr::default() };
    tx.push(sh, &a, bth(Opcode::RC_ACKNOWLEDGE, qp.remote_qpn, psn), ext, &[]);
}

fn ack_syndrome() -> Syndrome {
    Syndrome::Ack { credits: CREDITS_UNLIMITED }
}

/// A refused packet: drop, RNR NAK or NAK (class C: the QP moves to ERR).
fn refuse(
    sh: &Shared,
    dev: &mut Device,
    qpn: u32,
    pkt: &RocePacket<'_>,
    refusal: Refusal,
    reason: Option<Reason>,
    tx: &mut Tx,
) {
    let Some(qp) = dev.qps.get_mut(&qpn) else { return };
    match refusal.response() {
        Response::Drop => bump(&sh.stats.frames_dropped),
        Response::Rnr => {
            bump(&sh.stats.rnr_naks);
            send_ack(sh, qp, qpn, Syndrome::RnrNak { timer: 0 }, pkt.bth.psn, tx);
        }
        Response::Nak { code, fatal } => {
            bump(&sh.stats.naks_sent);
            let psn = if code == NakCode::PsnSequence {
                qp.resp.nak_sent = true;
                qp.epsn
            } else {
                pkt.bth.psn
            };
            send_ack(sh, qp, qpn, Syndrome::Nak(code), psn, tx);
            if fatal {
                let what = refusal.name();
                let r = reason.unwrap_or(Reason::RequestRefused { qpn, psn: pkt.bth.psn, what });
                class_c(sh, qp, qpn, code, r);
            }
        }
    }
}

/// A class C error at the responder: note why, move the QP to ERR with the event that
/// names the error (`IBV_EVENT_QP_ACCESS_ERR` for remote access, `IBV_EVENT_QP_REQ_ERR`
/// otherwise), and let the engine flush its receive queue.
fn class_c(sh: &Shared, qp: &mut Qp, qpn: u32, code: NakCode, r: Reason) {
    sh.note(qpn, None, r);
    qp.state = QpState::Error;
    qp.resp.msg = None;
    sh.stats.event(match code {
        NakCode::RemoteAccess => Event::QpAccessError { qpn },
        _ => Event::QpRequestError { qpn },
    });
    sh.kick();
}

/// A packet with the expected PSN that passed every check.
fn execute(sh: &Shared, dev: &mut Device, qpn: u32, pkt: &RocePacket<'_>, tx: &mut Tx) {
    let Device { qps, cqs, mkeys, .. } = dev;
    let Some(qp) = qps.get_mut(&qpn) else { return };
    qp.resp.nak_sent = false;
    let op = pkt.bth.opcode;
    let psn = pkt.bth.psn;
    let pos = op.position();
    let starts = matches!(pos, Position::First | Position::Only);
    let ends = matches!(pos, Position::Last | Position::Only);
    let imm = pkt.ext.immdt.map(u32::to_be_bytes);
    let fail = |qp: &mut Qp, code: NakCode, r: Reason, tx: &mut Tx| {
        bump(&sh.stats.naks_sent);
        send_ack(sh, qp, qpn, Syndrome::Nak(code), psn, tx);
        class_c(sh, qp, qpn, code, r);
    };
    match Kind::of(op) {
        Some(Kind::Write) => {
            let mut msg = if starts {
                let t = Target::start(pkt.ext.reth.as_ref(), None);
                InMsg { last_op: op, target: t, total: t.map_or(0, |t| t.resid), buf: Vec::new() }
            } else {
                match qp.resp.msg.take() {
                    Some(m) => m,
                    None => return,
                }
            };
            if let Some(t) = msg.target.as_mut() {
                let n = pkt.payload.len();
                if n > 0 {
                    let Some(mk) = mkeys.get(&t.rkey) else {
                        let rkey = t.rkey;
                        return fail(qp, NakCode::RemoteAccess, Reason::UnknownRkey { rkey }, tx);
                    };
                    if let Err(bus) = mk.write(&*sh.dma, t.va, pkt.payload) {
                        let r = Reason::RemoteDmaFault { bus, len: n as u64 };
                        return fail(qp, NakCode::RemoteAccess, r, tx);
                    }
                    sh.stats.bytes_written.fetch_add(n as u64, Ordering::Relaxed);
                }
                t.va = t.va.wrapping_add(n as u64);
                t.resid = t.resid.saturating_sub(n as u32);
            }
            if ends {
                if let Some(imm) = imm {
                    let w = match recv::next(sh, qp, qpn) {
                        Ok(Some(w)) => w,
                        Ok(None) => return, // checked by check_resource
                        Err(r) => {
                            let idx = qp.rq_ci;
                            recv::fail(sh, cqs, qp, qpn, idx, r);
                            return fail(qp, NakCode::RemoteOperational, r, tx);
                        }
                    };
                    let d = Done {
                        opcode: CqeOpcode::RespWrImm,
                        byte_cnt: msg.total,
                        imm,
                        rqpn: qp.remote_qpn,
                        flags: 0,
                    };
                    recv::complete(sh, cqs, qp, qpn, w.idx, d);
                }
                qp.resp.msn = psn_add(qp.resp.msn, 1);
            } else {
                msg.last_op = op;
                qp.resp.msg = Some(msg);
            }
        }
        Some(Kind::Send) => {
            let mut buf = if starts {
                Vec::new()
            } else {
                match qp.resp.msg.take() {
                    Some(m) => m.buf,
                    None => return,
                }
            };
            buf.extend_from_slice(pkt.payload);
            if ends {
                let w = match recv::next(sh, qp, qpn) {
                    Ok(Some(w)) => w,
                    Ok(None) => return,
                    Err(r) => {
                        let idx = qp.rq_ci;
                        recv::fail(sh, cqs, qp, qpn, idx, r);
                        return fail(qp, NakCode::RemoteOperational, r, tx);
                    }
                };
                if let Err(r) = recv::scatter(sh, mkeys, qp, qpn, &w, &[&buf]) {
                    recv::fail(sh, cqs, qp, qpn, w.idx, r);
                    let code = match r {
                        Reason::RecvTooShort { .. } => NakCode::InvalidRequest,
                        _ => NakCode::RemoteOperational,
                    };
                    return fail(qp, code, r, tx);
                }
                let opcode =
                    if imm.is_some() { CqeOpcode::RespSendImm } else { CqeOpcode::RespSend };
                let d = Done {
                    opcode,
                    byte_cnt: buf.len() as u32,
                    imm: imm.unwrap_or_default(),
                    rqpn: qp.remote_qpn,
                    flags: 0,
                };
                recv::complete(sh, cqs, qp, qpn, w.idx, d);
                qp.resp.msn = psn_add(qp.resp.msn, 1);
            } else {
                qp.resp.msg = Some(InMsg { last_op: op, target: None, total: 0, buf });
            }
        }
        Some(Kind::Read) => {
            let Some(reth) = pkt.ext.reth else { return };
            let msn = psn_add(qp.resp.msn, 1);
            let n = read_reply(sh, mkeys, qp, qpn, psn, &reth, msn, tx);
            let Some(n) = n else { return };
            qp.resp.msn = psn_add(qp.resp.msn, 1);
            qp.epsn = psn_add(qp.epsn, n);
            return;
        }
        Some(Kind::Atomic) => {
            let Some(a) = pkt.ext.atomic_eth else { return };
            let Some(mk) = mkeys.get(&a.rkey) else { return };
            let bus = mk.bus(a.va);
            let mut w = [0u8; 8];
            if !sh.dma.read(BusAddr(bus), &mut w) {
                return fail(qp, NakCode::RemoteAccess, Reason::RemoteDmaFault { bus, len: 8 }, tx);
            }
            let orig = u64::from_be_bytes(w);
            let new = if op == Opcode::RC_COMPARE_SWAP {
                (orig == a.compare).then_some(a.swap_add)
            } else {
                Some(orig.wrapping_add(a.swap_add))
            };
            if let Some(v) = new {
                if !sh.dma.write(BusAddr(bus), &v.to_be_bytes()) {
                    let r = Reason::RemoteDmaFault { bus, len: 8 };
                    return fail(qp, NakCode::RemoteAccess, r, tx);
                }
            }
            bump(&sh.stats.atomics);
            if qp.resp.atomics.len() >= SAVED_ATOMICS {
                qp.resp.atomics.pop_front();
            }
            qp.resp.atomics.push_back((psn, orig));
            qp.resp.msn = psn_add(qp.resp.msn, 1);
            qp.epsn = psn_add(qp.epsn, 1);
            atomic_ack(sh, qp, qpn, psn, orig, tx);
            return;
        }
        None => return,
    }
    qp.epsn = psn_add(qp.epsn, 1);
    if pkt.bth.ack_req {
        send_ack(sh, qp, qpn, ack_syndrome(), psn, tx);
    }
}

/// Execute a READ and send its response packets from `psn`, with MSN `msn`; the PSNs it took, or `None`
/// if it failed (NAKed, QP to ERR).
#[allow(clippy::too_many_arguments)]
fn read_reply(
    sh: &Shared,
    mkeys: &std::collections::BTreeMap<u32, crate::objects::Mkey>,
    qp: &mut Qp,
    qpn: u32,
    psn: u32,
    reth: &crate::roce::ext::Reth,
    msn: u32,
    tx: &mut Tx,
) -> Option<u32> {
    let len = reth.dma_len as usize;
    let mut data = vec![0u8; len];
    if len > 0 {
        let r = match mkeys.get(&reth.rkey) {
            Some(mk) => mk.read(&*sh.dma, reth.va, &mut data),
            None => Err(0),
        };
        if let Err(bus) = r {
            let r = Reason::RemoteDmaFault { bus, len: len as u64 };
            bump(&sh.stats.naks_sent);
            send_ack(sh, qp, qpn, Syndrome::Nak(NakCode::RemoteAccess), psn, tx);
            class_c(sh, qp, qpn, NakCode::RemoteAccess, r);
            return None;
        }
    }
    sh.stats.bytes_read.fetch_add(len as u64, Ordering::Relaxed);
    let mtu = qp.mtu as usize;
    let n = len.div_ceil(mtu).max(1) as u32;
    let a = qp_addr(sh, qp, qpn);
    for i in 0..n {
        let op = match (i == 0, i + 1 == n) {
            (true, true) => Opcode::RC_READ_RESPONSE_ONLY,
            (true, false) => Opcode::RC_READ_RESPONSE_FIRST,
            (false, false) => Opcode::RC_READ_RESPONSE_MIDDLE,
            (false, true) => Opcode::RC_READ_RESPONSE_LAST,
        };
        let aeth = (op != Opcode::RC_READ_RESPONSE_MIDDLE)
            .then_some(Aeth { syndrome: ack_syndrome(), msn });
        let ext = ExtRepr { aeth, ..ExtRepr::default() };
        let start = i as usize * mtu;
        let end = (start + mtu).min(len);
        let b: BthRepr = bth(op, qp.remote_qpn, psn_add(psn, i));
        tx.push(sh, &a, b, ext, &data[start..end]);
    }
    Some(n)
}

fn atomic_ack(sh: &Shared, qp: &Qp, qpn: u32, psn: u32, orig: u64, tx: &mut Tx) {
    let a = qp_addr(sh, qp, qpn);
    let ext = ExtRepr {
        aeth: Some(Aeth { syndrome: ack_syndrome(), msn: qp.resp.msn }),
        atomic_ack: Some(orig),
        ..ExtRepr::default()
    };
    tx.push(sh, &a, bth(Opcode::RC_ATOMIC_ACKNOWLEDGE, qp.remote_qpn, psn), ext, &[]);
}

/// A request whose PSN is behind the expected one.
fn duplicate(sh: &Shared, dev: &mut Device, qpn: u32, pkt: &RocePacket<'_>, tx: &mut Tx) {
    bump(&sh.stats.duplicates);
    let Device { qps, mkeys, .. } = dev;
    let Some(qp) = qps.get_mut(&qpn) else { return };
    let psn = pkt.bth.psn;
    match Kind::of(pkt.bth.opcode) {
        Some(Kind::Send | Kind::Write) => {
            let prev = psn_add(qp.epsn, 0x00ff_ffff);
            send_ack(sh, qp, qpn, ack_syndrome(), prev, tx);
        }
        Some(Kind::Read) => {
            let Some(reth) = pkt.ext.reth else { return };
            let t = Target { rkey: reth.rkey, va: reth.va, resid: reth.dma_len };
            let key = mkeys.get(&reth.rkey);
            let ok = check::check_rkey(Kind::Read, true, &t, key, qp.spec.pd, 0, 0, qp.mtu);
            if ok.is_ok() {
                // The MSN is already past this READ: the responses carry the current one.
                let msn = qp.resp.msn;
                let _ = read_reply(sh, mkeys, qp, qpn, psn, &reth, msn, tx);
            } else {
                bump(&sh.stats.frames_dropped);
            }
        }
        Some(Kind::Atomic) => {
            match qp.resp.atomics.iter().find(|(p, _)| *p == psn).map(|(_, v)| *v) {
                Some(orig) => atomic_ack(sh, qp, qpn, psn, orig, tx),
                None => bump(&sh.stats.frames_dropped),
            }
        }
        None => {}
    }
}

/// A UD or GSI datagram (SEND ONLY with a DETH): handed to the UD receiver with the 40-byte
/// network header taken from the frame as it arrived ([`crate::grh`]).
fn datagram(sh: &Shared, pkt: &RocePacket<'_>, frame: &[u8]) {
    let Some(deth) = pkt.ext.deth else { return dropped(sh, Drop::NoQp) };
    if !matches!(pkt.bth.opcode.operation(), Operation::SendOnly | Operation::SendOnlyImm) {
        return dropped(sh, Drop::NoQp);
    }
    let l3_start = pkt.eth.header_len();
    let mut grh = [0u8; GRH_LEN];
    let l3 = match pkt.ip {
        IpRepr::V4(_) => {
            let Some(h) = frame.get(l3_start..l3_start + 20) else { return };
            grh[20..].copy_from_slice(h);
            L3::Ipv4
        }
        IpRepr::V6(_) => {
            let Some(h) = frame.get(l3_start..l3_start + 40) else { return };
            grh.copy_from_slice(h);
            L3::Ipv6
        }
    };
    let p = Packet {
        src_qpn: deth.src_qp,
        dst_qpn: pkt.bth.dest_qp,
        mtu: 0,
        op: Op::Datagram { qkey: deth.qkey, imm: pkt.ext.immdt.map(u32::to_be_bytes), grh, l3 },
        payload: pkt.payload.to_vec(),
    };
    ud::deliver(sh, &p);
}
