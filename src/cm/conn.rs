//! The connection table and its state machine: `cm.c`'s, for RC connections over RoCE, with
//! `cma.c`'s choices of parameters.

use core::net::{IpAddr, SocketAddr};

use crate::addr::{Gid, Mac, QpNum};
use crate::error::{Error, Result};
use crate::psn::{mix, PsnGen};

use super::backend::{CmQp, MadAddr, MadPort, QpPath, QpSet, QpStep, RemoteAccess};
use super::cma::{service_id, CmaHdr, CMA_HDR_LEN, RDMA_PS_TCP};
use super::mad::*;
use super::timing::*;
use super::types::*;

mod input;
mod output;

struct Conn {
    state: ConnState,
    /// We sent the REQ.
    active: bool,
    local_id: u32,
    remote_id: u32,
    remote_ca_guid: u64,
    tid: u64,
    local_qpn: QpNum,
    remote_qpn: u32,
    /// The PSN we send with (the peer's advertised one) and the one we expect.
    sq_psn: u32,
    rq_psn: u32,
    mtu: u8,
    responder_resources: u8,
    initiator_depth: u8,
    retry_count: u8,
    rnr_retry: u8,
    /// `cm_av.timeout`.
    av_timeout: u8,
    /// `timeout_ms` of a REQ, REP or DREQ try.
    timeout_ms: u64,
    /// Retries left of the MAD in `out`.
    retries_left: u8,
    max_cm_retries: u8,
    deadline: Option<Micros>,
    peer: MadAddr,
    path: QpPath,
    port: u16,
    peer_addr: SocketAddr,
    local_addr: IpAddr,
    /// The last MAD sent that expects an answer, for retransmission.
    out: [u8; MAD_LEN],
    /// `out` could not leave yet (the port's queue was full): [`Cm::poll`] sends it first.
    out_unsent: bool,
    /// Answers (RTU, DREP, MRA, REJ) that could not leave yet, oldest first, each with the
    /// event that waits for it.
    answers: [Option<Answer>; ANSWERS],
    /// The REQ's private data (passive side).
    req_data: [u8; 92],
    /// The REP's private data (active side).
    rep_data: [u8; REP_USER_DATA],
}

impl Conn {
    /// `cm_init_qp_rtr_attr` and `cm_init_qp_rts_attr`: the steps that take the QP from
    /// INIT to RTS facing the peer, the same on both sides once the REQ and REP have set the
    /// connection (the peer's QPN and the PSN we expect; the PSN we send, the ACK timeout,
    /// the retries and the read depths each way).
    fn qp_steps(&self) -> [QpStep; 2] {
        [
            QpStep::Rtr {
                remote_qpn: QpNum(self.remote_qpn),
                rq_psn: self.rq_psn,
                mtu: self.mtu,
                path: self.path,
                max_dest_rd_atomic: self.responder_resources,
            },
            QpStep::Rts {
                sq_psn: self.sq_psn,
                timeout: self.av_timeout,
                retry_cnt: self.retry_count,
                rnr_retry: self.rnr_retry,
                max_rd_atomic: self.initiator_depth,
            },
        ]
    }

    /// `cm_format_dreq`: the DREQ ending this connection, in transaction `tid`.
    fn dreq(&self, tid: u64) -> [u8; MAD_LEN] {
        let mut m = blank();
        let mut d = Dreq::new_checked(&mut m[..]).expect("a MAD");
        d.hdr_mut().emit_cm(AttrId::Dreq, tid);
        d.set_local_comm_id(self.local_id);
        d.set_remote_comm_id(self.remote_id);
        d.set_remote_qpn_eecn(self.remote_qpn);
        m
    }
}

/// `cm_init_qp_init_attr`: RESET to INIT on `port`, granting remote write always, and
/// remote read and atomics when this side has responder resources.
fn init_step(port: u8, responder_resources: u8) -> QpStep {
    let rd = responder_resources > 0;
    QpStep::Init { port, access: RemoteAccess { write: true, read: rd, atomic: rd } }
}

/// An answer waiting for room in the port's send queue, and the event raised once it left;
/// or (no MAD) an event waiting behind such answers.
#[derive(Clone, Copy)]
struct Answer {
    mad: Option<(MadAddr, [u8; MAD_LEN])>,
    event: Option<EventKind>,
}

/// Answers a connection keeps while the port's queue is full: the two that carry an event
/// (the RTU after a REP, the DREP after a DREQ) can both be waiting; an answer without an
/// event (to a peer's retry) gives way to them.
const ANSWERS: usize = 2;

/// Last MADs of connections already freed ([`Cm::destroy`], a failed accept or REP) kept
/// while the port's queue is full; beyond this they are dropped and counted (the peer's
/// own timers end its side).
const FINALS: usize = 4;

struct Slot {
    /// Grows by one each time the slot is freed; never wraps (see [`ConnId`]).
    gen: u64,
    /// The generation reached its end: the slot is never used again.
    retired: bool,
    conn: Option<Conn>,
}

/// What became of one send.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tx {
    /// It left.
    Sent,
    /// The port's queue is full ([`Error::QueueFull`]): try again later.
    Full,
    /// The port failed it for good (counted in `send_errors`).
    Failed,
}

/// The connection manager over port `P`, with `N` connections and room for `E` undelivered
/// events. See the [module docs](super).
pub struct Cm<P: MadPort, const N: usize, const E: usize = 16> {
    port: P,
    cfg: CmConfig,
    slots: [Slot; N],
    listeners: [Option<u16>; MAX_LISTENERS],
    events: [Option<Event>; E],
    ev_head: usize,
    ev_len: usize,
    ids: u64,
    hi_tid: u32,
    psn: PsnGen,
    stats: CmStats,
    finals: [Option<(MadAddr, [u8; MAD_LEN])>; FINALS],
}

/// A REJ, MRA or DREP answering a MAD that matched no connection, or a connection's.
fn blank() -> [u8; MAD_LEN] {
    [0u8; MAD_LEN]
}

impl<P: MadPort, const N: usize, const E: usize> Cm<P, N, E> {
    /// A CM over `port`. Fails if the configuration does not pass [`CmConfig::check`]
    /// (the field at fault named in [`Error::InvalidArgument`]), or `N`/`E` are 0 or `N`
    /// exceeds 65535.
    pub fn new(port: P, cfg: CmConfig) -> Result<Self> {
        cfg.check()?;
        if N == 0 || E == 0 || N > u16::MAX as usize {
            return Err(Error::InvalidArgument("table sizes"));
        }
        let hi = (mix(cfg.seed ^ 0x4d41_4448_4954_4944) >> 32) as u32;
        Ok(Cm {
            port,
            cfg,
            slots: core::array::from_fn(|_| Slot { gen: 0, retired: false, conn: None }),
            listeners: [None; MAX_LISTENERS],
            events: [None; E],
            ev_head: 0,
            ev_len: 0,
            ids: 0,
            hi_tid: hi | 1,
            psn: PsnGen::new(cfg.seed ^ 0x5053_4e53),
            stats: CmStats::default(),
            finals: [None; FINALS],
        })
    }

    /// The counters.
    pub fn stats(&self) -> CmStats {
        self.stats
    }

    /// The port, to reach the backend.
    pub fn port_mut(&mut self) -> &mut P {
        &mut self.port
    }

    /// Accept REQs for `port` (`rdma_listen` on a `RDMA_PS_TCP` ID bound to it).
    pub fn listen(&mut self, port: u16) -> Result<()> {
        if self.listeners.contains(&Some(port)) {
            return Err(Error::InvalidArgument("port already listened on"));
        }
        let free = self.listeners.iter_mut().find(|l| l.is_none());
        *free.ok_or(Error::TableFull("listener"))? = Some(port);
        Ok(())
    }

    /// Stop listening on `port`; connections already requested stay.
    pub fn unlisten(&mut self, port: u16) {
        for l in self.listeners.iter_mut().filter(|l| **l == Some(port)) {
            *l = None;
        }
    }

    /// A connection's state, `None` for a stale handle.
    pub fn state(&self, id: ConnId) -> Option<ConnState> {
        self.conn(id).map(|c| c.state)
    }

    /// A connection's QP number.
    pub fn qp_num(&self, id: ConnId) -> Option<QpNum> {
        self.conn(id).map(|c| c.local_qpn)
    }

    /// Connections in use (every state, timewait included).
    pub fn live(&self) -> usize {
        self.slots.iter().filter(|s| s.conn.is_some()).count()
    }

    /// The earliest timer, for an application that sleeps between polls.
    pub fn next_deadline(&self) -> Option<Micros> {
        self.slots.iter().filter_map(|s| s.conn.as_ref()?.deadline).min()
    }

    /// What the REQ behind a [`EventKind::ConnectRequest`] asks, while it is unanswered.
    pub fn get_request(&self, id: ConnId) -> Option<ConnRequest<'_>> {
        let c = self.conn(id)?;
        if !matches!(c.state, ConnState::ReqRcvd | ConnState::MraReqSent) {
            return None;
        }
        Some(ConnRequest {
            peer: c.peer_addr,
            local: c.local_addr,
            port: c.port,
            peer_gid: c.path.dgid,
            peer_qpn: QpNum(c.remote_qpn),
            private_data: &c.req_data[CMA_HDR_LEN..],
            responder_resources: c.responder_resources,
            initiator_depth: c.initiator_depth,
        })
    }

    /// The peer's private data: the REQ's after its `cma_hdr` on the passive side, the
    /// REP's on the active side once it arrived (all of the field: lengths are not carried).
    pub fn private_data(&self, id: ConnId) -> Option<&[u8]> {
        let c = self.conn(id)?;
        if c.remote_ca_guid == 0 {
            return None;
        }
        Some(if c.active { &c.rep_data[..] } else { &c.req_data[CMA_HDR_LEN..] })
    }

    fn conn(&self, id: ConnId) -> Option<&Conn> {
        let s = self.slots.get(id.slot as usize)?;
        if s.gen != id.gen {
            return None;
        }
        s.conn.as_ref()
    }

    fn conn_mut(&mut self, id: ConnId) -> Option<&mut Conn> {
        let s = self.slots.get_mut(id.slot as usize)?;
        if s.gen != id.gen {
            return None;
        }
        s.conn.as_mut()
    }

    fn id_of(&self, slot: usize) -> ConnId {
        ConnId { slot: slot as u16, gen: self.slots[slot].gen }
    }

    /// Free a slot: its generation moves on, so every handle to it is refused from now on;
    /// a slot whose generation is at its end is retired instead (never handed out again),
    /// so no handle ever names two connections.
    fn free(&mut self, slot: usize) {
        let s = &mut self.slots[slot];
        // Answers still waiting for the queue go with the connection (counted).
        let waiting = s
            .conn
            .as_ref()
            .map_or(0, |c| c.answers.iter().flatten().filter(|a| a.mad.is_some()).count());
        self.stats.send_dropped += waiting as u64;
        s.conn = None;
        match s.gen.checked_add(1) {
            Some(g) => s.gen = g,
            None => {
                s.retired = true;
                self.stats.retired += 1;
            }
        }
    }

    /// A free slot.
    fn alloc_slot(&self) -> Option<usize> {
        self.slots.iter().position(|s| s.conn.is_none() && !s.retired)
    }

    /// Test hook: set a slot's generation (to reach its end without 2^64 connections).
    #[cfg(test)]
    pub(crate) fn set_generation(&mut self, slot: usize, gen: u64) {
        self.slots[slot].gen = gen;
    }

    /// A fresh local communication ID: non-zero, not in use (`cm_alloc_id_priv` draws them
    /// cyclically and XORs a random operand; here a seeded mix of a counter).
    fn new_comm_id(&mut self) -> Result<u32> {
        for _ in 0..64 {
            self.ids = self.ids.wrapping_add(1);
            let id = mix(self.cfg.seed ^ self.ids.wrapping_mul(0x9e37_79b9_7f4a_7c15)) as u32;
            if id != 0
                && !self.slots.iter().any(|s| s.conn.as_ref().is_some_and(|c| c.local_id == id))
            {
                return Ok(id);
            }
        }
        Err(Error::TableFull("communication ID"))
    }

    /// `cm_form_tid`: the MAD agent's high 32 bits and the local communication ID.
    fn form_tid(&self, local_id: u32) -> u64 {
        ((self.hi_tid as u64) << 32) | local_id as u64
    }

    fn push_event(&mut self, id: ConnId, kind: EventKind) {
        if self.ev_len == E {
            // Never reached: inputs are taken only while there is room for their event.
            return;
        }
        self.events[(self.ev_head + self.ev_len) % E] = Some(Event { id, kind });
        self.ev_len += 1;
    }

    fn mad_addr(&self, dgid: Gid, dmac: Mac) -> MadAddr {
        MadAddr {
            dgid,
            dmac,
            sgid_index: self.cfg.sgid_index,
            hop_limit: self.cfg.hop_limit,
            traffic_class: 0,
        }
    }

    // ---- active side ----

    /// `rdma_connect`: move `qp` to INIT and send a REQ to `p.remote`'s port. The connection
    /// completes in [`poll`](Self::poll) ([`EventKind::Established`] with the QP in RTS), or
    /// fails there ([`EventKind::Rejected`], [`EventKind::Unreachable`]).
    pub fn connect(
        &mut self,
        qp: &mut dyn CmQp,
        p: &ConnectParams<'_>,
        now: Micros,
    ) -> Result<ConnId> {
        if p.private_data.len() > REQ_USER_DATA {
            return Err(Error::InvalidArgument("REQ private data longer than 56 bytes"));
        }
        if p.qp.mtu == 0 || p.qp.mtu > 5 {
            return Err(Error::InvalidArgument("path MTU"));
        }
        let mut pd = [0u8; 92];
        CmaHdr::new_checked(&mut pd[..]).expect("36 bytes").emit(p.local, p.remote.ip())?;
        pd[CMA_HDR_LEN..][..p.private_data.len()].copy_from_slice(p.private_data);
        let slot = self.alloc_slot().ok_or(Error::TableFull("connection"))?;
        let local_id = self.new_comm_id()?;
        qp.modify(&init_step(self.cfg.port, p.qp.responder_resources))?;
        let cfg = self.cfg;
        let rq_psn = self.psn.next_psn();
        let tid = self.form_tid(local_id);
        let mut out = blank();
        {
            let mut req = Req::new_checked(&mut out[..]).expect("a MAD");
            req.hdr_mut().emit_cm(AttrId::Req, tid);
            req.set_local_comm_id(local_id);
            req.set_service_id(service_id(RDMA_PS_TCP, p.remote.port()));
            req.set_local_ca_guid(cfg.ca_guid);
            req.set_local_qpn(qp.qp_num().0);
            req.set_responder_resources(p.qp.responder_resources);
            req.set_initiator_depth(p.qp.initiator_depth);
            req.set_remote_cm_response_timeout(cfg.cm_response_timeout);
            req.set_transport_service_type(0);
            req.set_starting_psn(rq_psn);
            req.set_local_cm_response_timeout(cfg.cm_response_timeout);
            req.set_retry_count(p.qp.retry_count.min(7));
            req.set_partition_key(0xffff);
            req.set_path_mtu(p.qp.mtu);
            req.set_rnr_retry_count(p.qp.rnr_retry_count.min(7));
            req.set_max_cm_retries(cfg.max_cm_retries);
            // A routed path (hop limit > 1): permissive LIDs, not subnet-local.
            req.set_primary_local_lid(LID_PERMISSIVE);
            req.set_primary_remote_lid(LID_PERMISSIVE);
            req.set_primary_local_gid(&p.local_gid.0);
            req.set_primary_remote_gid(&p.remote_gid.0);
            req.set_primary_hop_limit(cfg.hop_limit);
            req.set_primary_local_ack_timeout(ack_timeout(cfg.ack_delay, cfg.packet_life_time));
            req.set_private_data(&pd);
        }
        let peer = self.mad_addr(p.remote_gid, p.remote_mac);
        // ib_send_cm_req: two packet lifetimes and the peer's response timeout.
        let timeout_ms = convert_to_ms(cfg.packet_life_time)
            .saturating_mul(2)
            .saturating_add(convert_to_ms(cfg.cm_response_timeout));
        self.slots[slot].conn = Some(Conn {
            state: ConnState::ReqSent,
            active: true,
            local_id,
            remote_id: 0,
            remote_ca_guid: 0,
            tid,
            local_qpn: qp.qp_num(),
            remote_qpn: 0,
            sq_psn: 0,
            rq_psn,
            mtu: p.qp.mtu,
            responder_resources: p.qp.responder_resources,
            initiator_depth: p.qp.initiator_depth,
            retry_count: p.qp.retry_count.min(7),
            rnr_retry: p.qp.rnr_retry_count.min(7),
            av_timeout: cfg.packet_life_time.saturating_add(1).min(MAX_TIMEOUT),
            timeout_ms,
            retries_left: 0,
            max_cm_retries: cfg.max_cm_retries,
            deadline: None,
            peer,
            path: QpPath {
                dgid: p.remote_gid,
                dmac: p.remote_mac,
                sgid_index: cfg.sgid_index,
                hop_limit: cfg.hop_limit,
                traffic_class: 0,
                flow_label: 0,
                sl: 0,
            },
            port: p.remote.port(),
            peer_addr: p.remote,
            local_addr: p.local.ip(),
            out: blank(),
            out_unsent: false,
            answers: [None; ANSWERS],
            req_data: [0; 92],
            rep_data: [0; REP_USER_DATA],
        });
        self.arm(slot, out, ConnState::ReqSent, now);
        Ok(self.id_of(slot))
    }

    // ---- passive side ----

    /// `rdma_accept`: move `qp` to INIT, RTR and RTS facing the requester, then send the
    /// REP; [`EventKind::Established`] follows the peer's RTU. A failure to move the QP
    /// rejects the request (as `rdma_accept` does) and returns the error.
    pub fn accept(
        &mut self,
        id: ConnId,
        qp: &mut dyn CmQp,
        p: &AcceptParams<'_>,
        now: Micros,
    ) -> Result<()> {
        if p.private_data.len() > REP_USER_DATA {
            return Err(Error::InvalidArgument("REP private data longer than 196 bytes"));
        }
        let cfg = self.cfg;
        let rq_psn = self.psn.next_psn();
        let c = self.conn_mut(id).ok_or(Error::InvalidArgument("no such connection"))?;
        if !matches!(c.state, ConnState::ReqRcvd | ConnState::MraReqSent) {
            return Err(Error::InvalidArgument("connection not waiting for accept"));
        }
        if p.responder_resources != 0 {
            c.responder_resources = p.responder_resources;
        }
        if p.initiator_depth != 0 {
            c.initiator_depth = p.initiator_depth;
        }
        c.local_qpn = qp.qp_num();
        c.rq_psn = rq_psn;
        let [rtr, rts] = c.qp_steps();
        let steps = [init_step(cfg.port, c.responder_resources), rtr, rts];
        for s in &steps {
            if let Err(e) = qp.modify(s) {
                let _ = qp.modify(&QpStep::Error);
                let slot = id.slot as usize;
                self.reject_and_free(slot, MsgResponse::Req, &[]);
                return Err(e);
            }
        }
        let c = self.slots[id.slot as usize].conn.as_mut().expect("checked above");
        let mut out = blank();
        {
            let mut rep = Rep::new_checked(&mut out[..]).expect("a MAD");
            rep.hdr_mut().emit_cm(AttrId::Rep, c.tid);
            rep.set_local_comm_id(c.local_id);
            rep.set_remote_comm_id(c.remote_id);
            rep.set_local_qpn(c.local_qpn.0);
            rep.set_starting_psn(rq_psn);
            rep.set_responder_resources(c.responder_resources);
            rep.set_initiator_depth(c.initiator_depth);
            rep.set_target_ack_delay(cfg.ack_delay);
            rep.set_failover_accepted(0);
            rep.set_rnr_retry_count(c.rnr_retry);
            rep.set_local_ca_guid(cfg.ca_guid);
            rep.set_private_data(p.private_data);
        }
        self.arm(id.slot as usize, out, ConnState::RepSent, now);
        Ok(())
    }

    /// `rdma_reject`: answer an unanswered request with a REJ, consumer-defined reason (28),
    /// carrying `private_data` (at most [`REJ_USER_DATA`] bytes). The handle is released.
    pub fn reject(&mut self, id: ConnId, private_data: &[u8]) -> Result<()> {
        if private_data.len() > REJ_USER_DATA {
            return Err(Error::InvalidArgument("REJ private data longer than 148 bytes"));
        }
        let c = self.conn(id).ok_or(Error::InvalidArgument("no such connection"))?;
        if !matches!(c.state, ConnState::ReqRcvd | ConnState::MraReqSent) {
            return Err(Error::InvalidArgument("connection not waiting for accept"));
        }
        let slot = id.slot as usize;
        self.reject_and_free(slot, MsgResponse::Req, private_data);
        Ok(())
    }

    /// End a connection this side fails (the application's reject, a QP that would not
    /// move): a consumer-defined REJ of `what`, carrying `data`, and the slot freed.
    fn reject_and_free(&mut self, slot: usize, what: MsgResponse, data: &[u8]) {
        let rej = self.rej_for(slot, RejReason::ConsumerDefined, what, data);
        if let Some((to, m)) = rej {
            self.send_final(&to, &m);
        }
        self.free(slot);
    }

    /// `cm_format_rej` for a connection, to its peer: where it goes and the MAD.
    /// `what` is the message rejected: the REQ while it is unanswered, the REP when the
    /// active side fails it, else "other".
    fn rej_for(
        &self,
        slot: usize,
        reason: RejReason,
        what: MsgResponse,
        data: &[u8],
    ) -> Option<(MadAddr, [u8; MAD_LEN])> {
        let c = self.slots[slot].conn.as_ref()?;
        let mut m = blank();
        let mut rej = Rej::new_checked(&mut m[..]).expect("a MAD");
        rej.hdr_mut().emit_cm(AttrId::Rej, c.tid);
        rej.set_remote_comm_id(c.remote_id);
        // cm_format_rej: an unanswered REQ (no MRA sent) is rejected with local ID 0.
        let local = if c.state == ConnState::ReqRcvd { 0 } else { c.local_id };
        rej.set_local_comm_id(local);
        rej.set_message_rejected(what.raw());
        rej.set_reason(reason.raw());
        rej.set_private_data(data);
        Some((c.peer, m))
    }

    /// `rdma_disconnect`: move `qp` to ERR and send a DREQ; [`EventKind::Disconnected`]
    /// follows the DREP (or the DREQ's last retry). Disconnecting a connection already going
    /// down is a no-op.
    pub fn disconnect(&mut self, id: ConnId, qp: &mut dyn CmQp, now: Micros) -> Result<()> {
        let c = self.conn(id).ok_or(Error::InvalidArgument("no such connection"))?;
        match c.state {
            ConnState::Established => {}
            ConnState::DreqSent | ConnState::TimeWait => return Ok(()),
            _ => return Err(Error::InvalidArgument("connection not established")),
        }
        let out = c.dreq(self.form_tid(c.local_id));
        let _ = qp.modify(&QpStep::Error);
        self.arm(id.slot as usize, out, ConnState::DreqSent, now);
        Ok(())
    }

    /// `cm_enter_timewait`: the slot waits `cm_convert_to_ms(av.timeout)` before it is freed
    /// (at most [`CmConfig::max_ack_timeout`]: `av.timeout` is bounded where the peer sets it).
    fn enter_timewait(&mut self, slot: usize, now: Micros) {
        let Some(c) = self.slots[slot].conn.as_mut() else { return };
        c.state = ConnState::TimeWait;
        c.deadline = Some(now.plus_ms(convert_to_ms(c.av_timeout)));
    }

    /// `av.timeout` as a peer set it (its REQ's ACK timeout, its REP's ACK delay), cut to
    /// [`CmConfig::max_ack_timeout`]: it becomes the data QP's ACK timeout, the timewait and
    /// a term of an MRA's wait.
    fn bound_ack_timeout(&mut self, t: u8) -> u8 {
        if t > self.cfg.max_ack_timeout {
            self.stats.clamped += 1;
            return self.cfg.max_ack_timeout;
        }
        t
    }

    /// `rdma_destroy_id` (`cm.c` `cm_destroy_id`): end the connection in whatever state it
    /// is, at once. A request we sent (REQ sent, MRA received) is withdrawn with a REJ
    /// "timeout" carrying our CA GUID; a request we received and did not complete (REQ
    /// received, MRA sent, REP sent) is rejected, consumer-defined; an established
    /// connection gets a DREQ (not retried: the slot is gone); one already disconnecting
    /// gets nothing more. The connection's QP, if lent in `qps` and the connection had
    /// moved it, goes to ERR. The slot is freed now, the handle is refused from now on, and
    /// no event follows for it (undelivered ones are withdrawn). This is how a connect in
    /// progress is cancelled.
    pub fn destroy(&mut self, id: ConnId, qps: &mut (impl QpSet + ?Sized)) -> Result<()> {
        let slot = id.slot as usize;
        let guid = self.cfg.ca_guid;
        let c = self.conn(id).ok_or(Error::InvalidArgument("no such connection"))?;
        let (state, qpn) = (c.state, c.local_qpn);
        let has_qp = c.active || !matches!(state, ConnState::ReqRcvd | ConnState::MraReqSent);
        let last = match state {
            ConnState::ReqSent | ConnState::MraReqRcvd => self
                .rej_for(slot, RejReason::Timeout, MsgResponse::Other, &[])
                .map(|(to, mut m)| {
                    let mut rej = Rej::new_checked(&mut m[..]).expect("a MAD");
                    let mut ari = [0u8; 72];
                    ari[..8].copy_from_slice(&guid.to_be_bytes());
                    rej.set_ari(&ari);
                    rej.set_rejected_info_length(8);
                    (to, m)
                }),
            ConnState::ReqRcvd | ConnState::MraReqSent => {
                self.rej_for(slot, RejReason::ConsumerDefined, MsgResponse::Req, &[])
            }
            ConnState::RepSent | ConnState::MraRepRcvd => {
                self.rej_for(slot, RejReason::ConsumerDefined, MsgResponse::Other, &[])
            }
            ConnState::Established => Some((c.peer, c.dreq(self.form_tid(c.local_id)))),
            ConnState::DreqSent | ConnState::TimeWait => None,
        };
        if has_qp {
            if let Some(q) = qps.find(qpn) {
                let _ = q.modify(&QpStep::Error);
            }
        }
        if let Some((to, m)) = last {
            self.send_final(&to, &m);
        }
        self.free(slot);
        self.withdraw_events(id);
        Ok(())
    }

    /// Remove the undelivered events of `id`, keeping the others in order.
    fn withdraw_events(&mut self, id: ConnId) {
        let mut kept = 0;
        for i in 0..self.ev_len {
            let e = self.events[(self.ev_head + i) % E].take();
            if let Some(e) = e.filter(|e| e.id != id) {
                self.events[(self.ev_head + kept) % E] = Some(e);
                kept += 1;
            }
        }
        self.ev_len = kept;
    }

    // ---- polling ----

    /// Take received MADs (up to the budget, and while events have room), run the timers
    /// that are due at `now`, and return the next event. `qps` are the QPs the CM may have
    /// to move meanwhile (a REP moves the active side's QP to RTS, a DREQ moves it to ERR).
    pub fn poll(&mut self, now: Micros, qps: &mut (impl QpSet + ?Sized)) -> Option<Event> {
        self.flush();
        for _ in 0..self.cfg.budget {
            if self.ev_len == E {
                break;
            }
            let mut rx = [0u8; GRH_LEN + MAD_LEN];
            match self.port.recv_mad(&mut rx) {
                Ok(Some(len)) => {
                    self.stats.received += 1;
                    self.input(&rx, len, now, qps);
                }
                Ok(None) => break,
                Err(_) => {
                    self.stats.port_errors += 1;
                    break;
                }
            }
        }
        for slot in 0..N {
            if self.ev_len == E {
                break;
            }
            let due =
                self.slots[slot].conn.as_ref().and_then(|c| c.deadline).is_some_and(|d| d <= now);
            if due {
                self.expire(slot, now, qps);
            }
        }
        self.next_event()
    }

    /// The next undelivered event, without polling.
    pub fn next_event(&mut self) -> Option<Event> {
        if self.ev_len == 0 {
            return None;
        }
        let e = self.events[self.ev_head].take();
        self.ev_head = (self.ev_head + 1) % E;
        self.ev_len -= 1;
        e
    }

    fn expire(&mut self, slot: usize, now: Micros, qps: &mut (impl QpSet + ?Sized)) {
        let id = self.id_of(slot);
        let Some(c) = self.slots[slot].conn.as_mut() else { return };
        match c.state {
            ConnState::ReqSent
            | ConnState::MraReqRcvd
            | ConnState::RepSent
            | ConnState::MraRepRcvd
            | ConnState::DreqSent => {
                if c.retries_left > 0 {
                    // ib_mad's retry: the same MAD, the same timeout. A try the queue had no
                    // room for counts as a try, as a lost one would.
                    c.retries_left -= 1;
                    self.stats.retransmits += 1;
                    self.send_out(slot, now);
                    return;
                }
                // cm_process_send_error: REQ and REP errors end the connection (rdma_cm:
                // RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT); a DREQ error enters timewait.
                if c.state == ConnState::DreqSent {
                    self.enter_timewait(slot, now);
                    self.conn_event(slot, EventKind::Disconnected, now);
                } else {
                    let qpn = c.local_qpn;
                    if matches!(c.state, ConnState::RepSent | ConnState::MraRepRcvd) {
                        if let Some(q) = qps.find(qpn) {
                            let _ = q.modify(&QpStep::Error);
                        }
                    }
                    self.free(slot);
                    self.push_event(id, EventKind::Unreachable);
                }
            }
            ConnState::TimeWait => {
                if !self.drop_answers(slot) {
                    return;
                }
                self.free(slot);
                self.push_event(id, EventKind::TimewaitExit);
            }
            // The deadline of answers waiting for the queue (an RTU): their time is up.
            _ => {
                if self.drop_answers(slot) {
                    if let Some(c) = self.slots[slot].conn.as_mut() {
                        c.deadline = None;
                    }
                }
            }
        }
    }
}
