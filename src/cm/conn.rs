//! The connection table and its state machine: `cm.c`'s, for RC connections over RoCE, with
//! `cma.c`'s choices of parameters.

use core::net::{IpAddr, SocketAddr};

use crate::addr::{Gid, Mac, QpNum};
use crate::error::{Errno, Error, Result};
use crate::psn::{mix, PsnGen};

use super::backend::{CmQp, MadAddr, MadPort, QpPath, QpSet, QpStep, RemoteAccess};
use super::cma::{service_id, CmaHdr, CMA_HDR_LEN, RDMA_PS_TCP};
use super::mad::*;
use super::timing::*;

/// A point in time, in microseconds from any fixed origin (a monotonic clock the application
/// reads; the CM only compares and adds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Micros(pub u64);

impl Micros {
    /// `ms` milliseconds later.
    pub const fn plus_ms(self, ms: u64) -> Micros {
        Micros(self.0.saturating_add(ms.saturating_mul(1000)))
    }
}

/// How the CM is set up. [`CmConfig::new`] gives rdma_cm's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmConfig {
    /// This CA's GUID, sent in every REQ and REP; must not be 0 (peers track connections by
    /// it and the QPN: `cm.c` `cm_insert_remote_id`, `cm_insert_remote_qpn`).
    pub ca_guid: u64,
    /// Seed of the communication IDs, transaction IDs and PSNs (see [`crate::psn`]).
    pub seed: u64,
    /// Physical port of QP1 and the data QPs.
    pub port: u8,
    /// Source GID index of every MAD and path.
    pub sgid_index: u8,
    /// CM response timeout sent in REQs ([`CMA_CM_RESPONSE_TIMEOUT`]).
    pub cm_response_timeout: u8,
    /// Retries of a REQ, REP or DREQ ([`CMA_MAX_CM_RETRIES`]).
    pub max_cm_retries: u8,
    /// Packet lifetime of the path ([`CMA_IBOE_PACKET_LIFETIME`]).
    pub packet_life_time: u8,
    /// This CA's ACK delay (`ib_device_attr.local_ca_ack_delay`): the REP's target ACK
    /// delay and an input of `cm_ack_timeout` (default 16).
    pub ack_delay: u8,
    /// IP hop limit of MADs and paths (64: the IPv4 default TTL).
    pub hop_limit: u8,
    /// Received MADs handled per [`Cm::poll`].
    pub budget: usize,
}

impl CmConfig {
    /// rdma_cm's defaults for a CA with GUID `ca_guid`, seeded with `seed`.
    pub const fn new(ca_guid: u64, seed: u64) -> CmConfig {
        CmConfig {
            ca_guid,
            seed,
            port: 1,
            sgid_index: 0,
            cm_response_timeout: CMA_CM_RESPONSE_TIMEOUT,
            max_cm_retries: CMA_MAX_CM_RETRIES,
            packet_life_time: CMA_IBOE_PACKET_LIFETIME,
            ack_delay: 16,
            hop_limit: 64,
            budget: 16,
        }
    }
}

/// The QP parameters a connection negotiates (`struct rdma_conn_param`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpParams {
    /// RDMA READs and atomics the peer may have outstanding at our QP.
    pub responder_resources: u8,
    /// RDMA READs and atomics our QP may have outstanding at the peer.
    pub initiator_depth: u8,
    /// Transport retries (at most 7).
    pub retry_count: u8,
    /// RNR retries (at most 7; 7 is infinite).
    pub rnr_retry_count: u8,
    /// Path MTU, an `ib_mtu` (1 = 256 ... 5 = 4096): the active side proposes it.
    pub mtu: u8,
}

impl Default for QpParams {
    /// One outstanding READ each way, 7 retries, infinite RNR retries, MTU 1024 (what rping
    /// asks for on a 1500-byte Ethernet).
    fn default() -> Self {
        QpParams {
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            mtu: 3,
        }
    }
}

/// What [`Cm::connect`] needs: both ends' addresses, the peer's GID and MAC.
#[derive(Clone, Copy, Debug)]
pub struct ConnectParams<'a> {
    /// Our address and port (the port goes into the `cma_hdr`).
    pub local: SocketAddr,
    /// The peer's address and the port it listens on.
    pub remote: SocketAddr,
    /// Our GID (the IPv4-mapped one of `local` for RoCE v2 over IPv4).
    pub local_gid: Gid,
    /// The peer's GID.
    pub remote_gid: Gid,
    /// The peer's MAC (or next hop's).
    pub remote_mac: Mac,
    /// Private data after the `cma_hdr`: at most [`REQ_USER_DATA`] bytes.
    pub private_data: &'a [u8],
    /// QP parameters.
    pub qp: QpParams,
}

/// Bytes of user private data a REQ carries after the `cma_hdr` (92 − 36, as
/// `rdma_connect` allows).
pub const REQ_USER_DATA: usize = 92 - CMA_HDR_LEN;
/// Bytes of private data a REP carries (`IB_CM_REP_PRIVATE_DATA_SIZE`).
pub const REP_USER_DATA: usize = 196;
/// Bytes of private data a REJ carries (`IB_CM_REJ_PRIVATE_DATA_SIZE`).
pub const REJ_USER_DATA: usize = 148;

/// Listening ports at most.
pub const MAX_LISTENERS: usize = 8;

/// A connection: its slot and the slot's generation (a handle to a freed or reused slot is
/// refused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConnId {
    slot: u16,
    gen: u16,
}

/// Where a connection is (`enum ib_cm_state`, the states an RC connection passes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnState {
    /// REQ sent, waiting for REP.
    ReqSent,
    /// REQ sent, the peer asked for more time (MRA).
    MraReqRcvd,
    /// REQ received, the application has not answered ([`Cm::accept`], [`Cm::reject`]).
    ReqRcvd,
    /// As `ReqRcvd`, and an MRA went out for a repeated REQ.
    MraReqSent,
    /// REP sent, waiting for RTU.
    RepSent,
    /// REP sent, the peer asked for more time.
    MraRepRcvd,
    /// Connected.
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// Disconnected, waiting out stray packets before the QP numbers may be reused.
    TimeWait,
}

/// What happened to a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A REQ arrived for a listening port: [`Cm::get_request`] tells what it asks.
    ConnectRequest,
    /// The connection is up; its QP is in RTS.
    Established,
    /// The peer rejected the connection (`ECONNREFUSED`).
    Rejected {
        /// The REJ's reason.
        reason: RejReason,
    },
    /// The peer never answered within the retries (`ETIMEDOUT`).
    Unreachable,
    /// A connection step failed here (moving the QP, sending); the connection is gone.
    ConnectError(Error),
    /// The connection is down (DREQ received, DREP received, or DREQ unanswered).
    Disconnected,
    /// Timewait is over: the handle is released.
    TimewaitExit,
}

impl EventKind {
    /// The errno librdmacm's synchronous calls report for this event (`ucma_complete`):
    /// `ECONNREFUSED` for a REJ, `ETIMEDOUT` for no answer; `None` for the others.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            EventKind::Rejected { .. } => Some(Errno::ECONNREFUSED),
            EventKind::Unreachable => Some(Errno::ETIMEDOUT),
            EventKind::ConnectError(e) => Some(e.errno()),
            _ => None,
        }
    }
}

/// An event: which connection and what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// The connection.
    pub id: ConnId,
    /// What happened.
    pub kind: EventKind,
}

/// Counters of what the CM received and sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmStats {
    /// Datagrams received.
    pub received: u64,
    /// Dropped as malformed: short, bad GRH, not a CM MAD, a REQ with a bad `cma_hdr`.
    pub malformed: u64,
    /// Well-formed but for no connection, or not for its state, or unsupported (SIDR, LAP).
    pub unexpected: u64,
    /// Duplicates (`cm.c`'s `CM_RECV_DUPLICATES` cases).
    pub duplicates: u64,
    /// MADs sent.
    pub sent: u64,
    /// Of which retransmissions after a timeout.
    pub retransmits: u64,
    /// Sends the port refused.
    pub send_errors: u64,
    /// REQs dropped because the table was full (the peer retries, as with `cm.c` out of
    /// memory).
    pub table_full: u64,
    /// Answers not sent because the peer's MAC is unknown.
    pub unresolved: u64,
    /// Receives the port failed ([`MadPort::recv_mad`] returned an error).
    pub port_errors: u64,
}

/// A connection request: what [`Cm::get_request`] shows.
#[derive(Clone, Copy, Debug)]
pub struct ConnRequest<'a> {
    /// The requester's address and port (from the `cma_hdr`).
    pub peer: SocketAddr,
    /// The address it connected to.
    pub local: IpAddr,
    /// The listening port.
    pub port: u16,
    /// The requester's GID.
    pub peer_gid: Gid,
    /// The requester's QPN.
    pub peer_qpn: QpNum,
    /// Private data after the `cma_hdr` (all [`REQ_USER_DATA`] bytes; the length is not
    /// carried).
    pub private_data: &'a [u8],
    /// READs the requester may have outstanding here: its initiator depth (the REQ's fields
    /// swapped, as `cm_format_req_event`).
    pub responder_resources: u8,
    /// READs we may have outstanding there: its responder resources.
    pub initiator_depth: u8,
}

/// What [`Cm::accept`] sends.
#[derive(Clone, Copy, Debug, Default)]
pub struct AcceptParams<'a> {
    /// Private data of the REP (at most [`REP_USER_DATA`] bytes).
    pub private_data: &'a [u8],
    /// READs the peer may have outstanding here (0: the request's).
    pub responder_resources: u8,
    /// READs we may have outstanding there (0: the request's).
    pub initiator_depth: u8,
}

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
    /// The REQ's private data (passive side).
    req_data: [u8; 92],
    /// The REP's private data (active side).
    rep_data: [u8; REP_USER_DATA],
}

struct Slot {
    gen: u16,
    conn: Option<Conn>,
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
}

/// A REJ, MRA or DREP answering a MAD that matched no connection, or a connection's.
fn blank() -> [u8; MAD_LEN] {
    [0u8; MAD_LEN]
}

impl<P: MadPort, const N: usize, const E: usize> Cm<P, N, E> {
    /// A CM over `port`. Fails if the CA GUID is 0 or `N`/`E` are 0 or `N` exceeds 65535.
    pub fn new(port: P, cfg: CmConfig) -> Result<Self> {
        if cfg.ca_guid == 0 {
            return Err(Error::InvalidArgument("CA GUID 0"));
        }
        if N == 0 || E == 0 || N > u16::MAX as usize {
            return Err(Error::InvalidArgument("table sizes"));
        }
        let hi = (mix(cfg.seed ^ 0x4d41_4448_4954_4944) >> 32) as u32;
        Ok(Cm {
            port,
            cfg,
            slots: core::array::from_fn(|_| Slot { gen: 0, conn: None }),
            listeners: [None; MAX_LISTENERS],
            events: [None; E],
            ev_head: 0,
            ev_len: 0,
            ids: 0,
            hi_tid: hi | 1,
            psn: PsnGen::new(cfg.seed ^ 0x5053_4e53),
            stats: CmStats::default(),
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

    fn free(&mut self, slot: usize) {
        let s = &mut self.slots[slot];
        s.conn = None;
        s.gen = s.gen.wrapping_add(1);
    }

    /// A free slot.
    fn alloc_slot(&self) -> Option<usize> {
        self.slots.iter().position(|s| s.conn.is_none())
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

    fn send(&mut self, to: &MadAddr, mad: &[u8; MAD_LEN]) {
        match self.port.send_mad(to, mad) {
            Ok(()) => self.stats.sent += 1,
            Err(_) => self.stats.send_errors += 1,
        }
    }

    fn send_out(&mut self, slot: usize) {
        let Some(c) = self.slots[slot].conn.as_ref() else { return };
        let (to, mad) = (c.peer, c.out);
        self.send(&to, &mad);
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
        let access = RemoteAccess {
            write: true,
            read: p.qp.responder_resources > 0,
            atomic: p.qp.responder_resources > 0,
        };
        qp.modify(&QpStep::Init { port: self.cfg.port, access })?;
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
        let timeout_ms =
            2 * convert_to_ms(cfg.packet_life_time) + convert_to_ms(cfg.cm_response_timeout);
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
            av_timeout: cfg.packet_life_time + 1,
            timeout_ms,
            retries_left: cfg.max_cm_retries,
            max_cm_retries: cfg.max_cm_retries,
            deadline: Some(now.plus_ms(timeout_ms)),
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
            out,
            req_data: [0; 92],
            rep_data: [0; REP_USER_DATA],
        });
        self.send_out(slot);
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
        let access = RemoteAccess {
            write: true,
            read: c.responder_resources > 0,
            atomic: c.responder_resources > 0,
        };
        let steps = [
            QpStep::Init { port: cfg.port, access },
            QpStep::Rtr {
                remote_qpn: QpNum(c.remote_qpn),
                rq_psn,
                mtu: c.mtu,
                path: c.path,
                max_dest_rd_atomic: c.responder_resources,
            },
            QpStep::Rts {
                sq_psn: c.sq_psn,
                timeout: c.av_timeout,
                retry_cnt: c.retry_count,
                rnr_retry: c.rnr_retry,
                max_rd_atomic: c.initiator_depth,
            },
        ];
        for s in &steps {
            if let Err(e) = qp.modify(s) {
                let _ = qp.modify(&QpStep::Error);
                self.send_rej(id.slot as usize, RejReason::ConsumerDefined, MsgResponse::Req, &[]);
                self.free(id.slot as usize);
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
        c.out = out;
        c.state = ConnState::RepSent;
        c.retries_left = c.max_cm_retries;
        c.deadline = Some(now.plus_ms(c.timeout_ms));
        self.send_out(id.slot as usize);
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
        self.send_rej(id.slot as usize, RejReason::ConsumerDefined, MsgResponse::Req, private_data);
        self.free(id.slot as usize);
        Ok(())
    }

    /// `cm_format_rej` for a connection, sent to its peer.
    /// `what` is the message rejected: the REQ while it is unanswered, the REP when the
    /// active side fails it, else "other".
    fn send_rej(&mut self, slot: usize, reason: RejReason, what: MsgResponse, data: &[u8]) {
        let Some(c) = self.slots[slot].conn.as_ref() else { return };
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
        let to = c.peer;
        self.send(&to, &m);
    }

    /// `rdma_disconnect`: move `qp` to ERR and send a DREQ; [`EventKind::Disconnected`]
    /// follows the DREP (or the DREQ's last retry). Disconnecting a connection already going
    /// down is a no-op.
    pub fn disconnect(&mut self, id: ConnId, qp: &mut dyn CmQp, now: Micros) -> Result<()> {
        let tid_base = self.hi_tid;
        let c = self.conn_mut(id).ok_or(Error::InvalidArgument("no such connection"))?;
        match c.state {
            ConnState::Established => {}
            ConnState::DreqSent | ConnState::TimeWait => return Ok(()),
            _ => return Err(Error::InvalidArgument("connection not established")),
        }
        let _ = qp.modify(&QpStep::Error);
        let mut out = blank();
        {
            let mut d = Dreq::new_checked(&mut out[..]).expect("a MAD");
            d.hdr_mut().emit_cm(AttrId::Dreq, ((tid_base as u64) << 32) | c.local_id as u64);
            d.set_local_comm_id(c.local_id);
            d.set_remote_comm_id(c.remote_id);
            d.set_remote_qpn_eecn(c.remote_qpn);
        }
        c.out = out;
        c.state = ConnState::DreqSent;
        c.retries_left = c.max_cm_retries;
        c.deadline = Some(now.plus_ms(c.timeout_ms));
        self.send_out(id.slot as usize);
        Ok(())
    }

    /// `cm_enter_timewait`: the slot waits `cm_convert_to_ms(av.timeout)` before it is freed.
    fn enter_timewait(&mut self, slot: usize, now: Micros) {
        if let Some(c) = self.slots[slot].conn.as_mut() {
            c.state = ConnState::TimeWait;
            c.deadline = Some(now.plus_ms(convert_to_ms(c.av_timeout)));
        }
    }

    // ---- polling ----

    /// Take received MADs (up to the budget, and while events have room), run the timers
    /// that are due at `now`, and return the next event. `qps` are the QPs the CM may have
    /// to move meanwhile (a REP moves the active side's QP to RTS, a DREQ moves it to ERR).
    pub fn poll(&mut self, now: Micros, qps: &mut (impl QpSet + ?Sized)) -> Option<Event> {
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
                    // ib_mad's retry: the same MAD, the same timeout.
                    c.retries_left -= 1;
                    c.deadline = Some(now.plus_ms(c.timeout_ms));
                    self.stats.retransmits += 1;
                    self.send_out(slot);
                    return;
                }
                // cm_process_send_error: REQ and REP errors end the connection (rdma_cm:
                // RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT); a DREQ error enters timewait.
                if c.state == ConnState::DreqSent {
                    self.enter_timewait(slot, now);
                    self.push_event(id, EventKind::Disconnected);
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
                self.free(slot);
                self.push_event(id, EventKind::TimewaitExit);
            }
            _ => c.deadline = None,
        }
    }

    fn input(
        &mut self,
        rx: &[u8; GRH_LEN + MAD_LEN],
        len: usize,
        now: Micros,
        qps: &mut (impl QpSet + ?Sized),
    ) {
        if len < GRH_LEN + MAD_LEN || len > rx.len() {
            self.stats.malformed += 1;
            return;
        }
        let Ok(src) = grh_source(&rx[..GRH_LEN]) else {
            self.stats.malformed += 1;
            return;
        };
        let mad: [u8; MAD_LEN] = rx[GRH_LEN..].try_into().expect("256 bytes");
        let attr = match MadHdr::new_checked(&mad[..]).expect("a MAD").check_cm() {
            Ok(a) => a,
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        match attr {
            AttrId::Req => self.on_req(&mad, src, now),
            AttrId::Rep => self.on_rep(&mad, src, now, qps),
            AttrId::Rtu => self.on_rtu(&mad),
            AttrId::Rej => self.on_rej(&mad, now, qps),
            AttrId::Mra => self.on_mra(&mad, now),
            AttrId::Dreq => self.on_dreq(&mad, src, now, qps),
            AttrId::Drep => self.on_drep(&mad, now),
            _ => self.stats.unexpected += 1,
        }
    }

    /// The slot whose local ID is `local` and remote ID `remote` (`cm_acquire_id`), live or
    /// in timewait.
    fn find(&self, local: u32, remote: u32) -> Option<usize> {
        self.slots.iter().position(|s| {
            s.conn.as_ref().is_some_and(|c| c.local_id == local && c.remote_id == remote)
        })
    }

    /// `cm_issue_rej`: a REJ for a REQ (or REP) that matched no connection, to its source.
    fn issue_rej(&mut self, mad: &[u8; MAD_LEN], src: Gid, reason: RejReason, what: MsgResponse) {
        let Some(dmac) = self.port.resolve(&src) else {
            self.stats.unresolved += 1;
            return;
        };
        let rcv = Rej::new_checked(&mad[..]).expect("a MAD");
        let mut m = blank();
        let mut rej = Rej::new_checked(&mut m[..]).expect("a MAD");
        rej.hdr_mut().emit_cm(AttrId::Rej, rcv.hdr().tid());
        rej.set_remote_comm_id(rcv.local_comm_id());
        rej.set_local_comm_id(rcv.remote_comm_id());
        rej.set_message_rejected(what.raw());
        rej.set_reason(reason.raw());
        let to = self.mad_addr(src, dmac);
        self.send(&to, &m);
    }

    /// `cm_req_handler` with `cm_match_req` (duplicates, stale connections, listeners) and
    /// `cma_req_handler`'s checks of the `cma_hdr`.
    fn on_req(&mut self, mad: &[u8; MAD_LEN], src: Gid, now: Micros) {
        let req = Req::new_checked(&mad[..]).expect("a MAD");
        let (rid, guid, rqpn) = (req.local_comm_id(), req.local_ca_guid(), req.local_qpn());
        // A duplicate REQ: cm_dup_req_handler.
        if let Some(slot) = self.slots.iter().position(|s| {
            s.conn.as_ref().is_some_and(|c| {
                c.remote_id == rid && c.remote_ca_guid == guid && c.remote_ca_guid != 0
            })
        }) {
            self.stats.duplicates += 1;
            let c = self.slots[slot].conn.as_mut().expect("found");
            match c.state {
                // rdma_cm's delayed MRA goes out now: the requester is retrying while the
                // application has not answered.
                ConnState::ReqRcvd | ConnState::MraReqSent => {
                    c.state = ConnState::MraReqSent;
                    let mut m = blank();
                    let mut mra = Mra::new_checked(&mut m[..]).expect("a MAD");
                    mra.hdr_mut().emit_cm(AttrId::Mra, c.tid);
                    mra.set_message_mraed(MsgResponse::Req.raw());
                    mra.set_local_comm_id(c.local_id);
                    mra.set_remote_comm_id(c.remote_id);
                    mra.set_service_timeout(CMA_MRA_SERVICE_TIMEOUT);
                    let to = c.peer;
                    self.send(&to, &m);
                }
                ConnState::TimeWait => {
                    self.send_rej(slot, RejReason::StaleConn, MsgResponse::Other, &[])
                }
                _ => {}
            }
            return;
        }
        // A stale connection: the requester's QP is still in one of ours (cm_match_req).
        if let Some(slot) = self.slots.iter().position(|s| {
            s.conn.as_ref().is_some_and(|c| {
                c.remote_qpn == rqpn
                    && c.remote_ca_guid == guid
                    && c.remote_ca_guid != 0
                    && c.state != ConnState::TimeWait
            })
        }) {
            self.stats.unexpected += 1;
            self.issue_rej(mad, src, RejReason::StaleConn, MsgResponse::Req);
            self.stale_dreq(slot, now);
            return;
        }
        let sid = req.service_id();
        let listener =
            self.listeners.iter().flatten().copied().find(|&p| service_id(RDMA_PS_TCP, p) == sid);
        let Some(port) = listener else {
            self.stats.unexpected += 1;
            self.issue_rej(mad, src, RejReason::InvalidServiceId, MsgResponse::Req);
            return;
        };
        let Some(slot) = self.alloc_slot() else {
            self.stats.table_full += 1;
            return;
        };
        // cma_req_handler: an unreadable cma_hdr fails the request; ib_cm rejects it as
        // consumer-defined (cm_destroy_id in IB_CM_REQ_RCVD).
        let mut req_data = [0u8; 92];
        req_data.copy_from_slice(req.private_data());
        let addrs = CmaHdr::new_checked(&req_data[..]).expect("92 bytes").addrs();
        let Some((peer_addr, local_addr)) = addrs else {
            self.stats.malformed += 1;
            self.issue_rej(mad, src, RejReason::ConsumerDefined, MsgResponse::Req);
            return;
        };
        if req.transport_service_type() != 0 || req.path_mtu() == 0 || req.path_mtu() > 5 {
            self.stats.unexpected += 1;
            self.issue_rej(mad, src, RejReason::InvalidTransportType, MsgResponse::Req);
            return;
        }
        let peer_gid = req.local_gid();
        let (Some(mad_mac), Some(path_mac)) =
            (self.port.resolve(&src), self.port.resolve(&peer_gid))
        else {
            // cm_req_handler: no address vector for the requester, REJ invalid GID.
            self.stats.unresolved += 1;
            self.issue_rej(mad, src, RejReason::InvalidGid, MsgResponse::Req);
            return;
        };
        let Ok(local_id) = self.new_comm_id() else {
            self.stats.table_full += 1;
            return;
        };
        let lat = req.primary_local_ack_timeout();
        let cfg = self.cfg;
        let hop = match req.primary_hop_limit() {
            0 | 1 => cfg.hop_limit,
            h => h,
        };
        self.slots[slot].conn = Some(Conn {
            state: ConnState::ReqRcvd,
            active: false,
            local_id,
            remote_id: rid,
            remote_ca_guid: guid,
            tid: req.hdr().tid(),
            local_qpn: QpNum(0),
            remote_qpn: rqpn,
            sq_psn: req.starting_psn(),
            rq_psn: 0,
            mtu: req.path_mtu(),
            responder_resources: req.initiator_depth(),
            initiator_depth: req.responder_resources(),
            retry_count: req.retry_count(),
            rnr_retry: req.rnr_retry_count(),
            // cm_format_paths_from_req: the lifetime is the ACK timeout less one;
            // cm_init_av_by_path adds it back.
            av_timeout: lat - (lat > 0) as u8 + 1,
            timeout_ms: convert_to_ms(req.local_cm_response_timeout()),
            retries_left: 0,
            max_cm_retries: req.max_cm_retries(),
            deadline: None,
            peer: self.mad_addr(src, mad_mac),
            path: QpPath {
                dgid: peer_gid,
                dmac: path_mac,
                sgid_index: cfg.sgid_index,
                hop_limit: hop,
                traffic_class: req.primary_traffic_class(),
                flow_label: req.primary_flow_label(),
                sl: req.primary_sl(),
            },
            port,
            peer_addr,
            local_addr,
            out: blank(),
            req_data,
            rep_data: [0; REP_USER_DATA],
        });
        let id = self.id_of(slot);
        self.push_event(id, EventKind::ConnectRequest);
    }

    /// `ib_send_cm_dreq` on an established connection found stale.
    fn stale_dreq(&mut self, slot: usize, now: Micros) {
        let id = self.id_of(slot);
        if self.state(id) != Some(ConnState::Established) {
            return;
        }
        // The QP is not lent here: the DREQ's answer (or retries) takes the connection down,
        // and the application moves the QP when it sees the event.
        struct Nothing;
        impl CmQp for Nothing {
            fn qp_num(&self) -> QpNum {
                QpNum(0)
            }
            fn modify(&mut self, _: &QpStep) -> Result<()> {
                Ok(())
            }
        }
        let _ = self.disconnect(id, &mut Nothing, now);
    }

    /// `cm_rep_handler` and `cm_dup_rep_handler`.
    fn on_rep(
        &mut self,
        mad: &[u8; MAD_LEN],
        src: Gid,
        now: Micros,
        qps: &mut (impl QpSet + ?Sized),
    ) {
        let rep = Rep::new_checked(&mad[..]).expect("a MAD");
        let (ours, theirs) = (rep.remote_comm_id(), rep.local_comm_id());
        let Some(slot) = self.find(ours, 0).filter(|&s| {
            let st = self.slots[s].conn.as_ref().map(|c| c.state);
            matches!(st, Some(ConnState::ReqSent | ConnState::MraReqRcvd))
        }) else {
            // cm_dup_rep_handler: the RTU again if we are connected.
            match self.find(ours, theirs) {
                Some(s) => {
                    self.stats.duplicates += 1;
                    if self.slots[s].conn.as_ref().map(|c| c.state) == Some(ConnState::Established)
                    {
                        self.send_rtu(s);
                    }
                }
                None => self.stats.unexpected += 1,
            }
            return;
        };
        let (guid, rqpn) = (rep.local_ca_guid(), rep.local_qpn());
        // Duplicate remote ID or stale QP (cm_insert_remote_id, cm_insert_remote_qpn).
        let clash = |c: &Conn| c.remote_ca_guid == guid && c.state != ConnState::TimeWait;
        if self.slots.iter().enumerate().any(|(i, s)| {
            i != slot && s.conn.as_ref().is_some_and(|c| clash(c) && c.remote_id == theirs)
        }) {
            self.stats.duplicates += 1;
            return;
        }
        if let Some(other) = self.slots.iter().enumerate().position(|(i, s)| {
            i != slot && s.conn.as_ref().is_some_and(|c| clash(c) && c.remote_qpn == rqpn)
        }) {
            self.stats.unexpected += 1;
            self.issue_rej(mad, src, RejReason::StaleConn, MsgResponse::Rep);
            self.stale_dreq(other, now);
            return;
        }
        let id = self.id_of(slot);
        let c = self.slots[slot].conn.as_mut().expect("found");
        c.remote_id = theirs;
        c.remote_ca_guid = guid;
        c.remote_qpn = rqpn;
        // The REP's fields swap, as cm_rep_handler reads them.
        c.initiator_depth = c.initiator_depth.min(rep.responder_resources());
        c.responder_resources = c.responder_resources.min(rep.initiator_depth());
        c.sq_psn = rep.starting_psn();
        c.rnr_retry = rep.rnr_retry_count();
        c.av_timeout = ack_timeout(rep.target_ack_delay(), c.av_timeout - 1);
        c.rep_data.copy_from_slice(rep.private_data());
        c.deadline = None;
        let steps = [
            QpStep::Rtr {
                remote_qpn: QpNum(c.remote_qpn),
                rq_psn: c.rq_psn,
                mtu: c.mtu,
                path: c.path,
                max_dest_rd_atomic: c.responder_resources,
            },
            QpStep::Rts {
                sq_psn: c.sq_psn,
                timeout: c.av_timeout,
                retry_cnt: c.retry_count,
                rnr_retry: c.rnr_retry,
                max_rd_atomic: c.initiator_depth,
            },
        ];
        let qpn = c.local_qpn;
        let res = match qps.find(qpn) {
            None => Err(Error::InvalidArgument("the connection's QP was not lent to poll")),
            Some(q) => steps.iter().try_for_each(|s| q.modify(s)).inspect_err(|_| {
                let _ = q.modify(&QpStep::Error);
            }),
        };
        if let Err(e) = res {
            // cma_rep_recv failed: rdma_cm rejects (consumer-defined) and reports the error.
            self.send_rej(slot, RejReason::ConsumerDefined, MsgResponse::Rep, &[]);
            self.free(slot);
            self.push_event(id, EventKind::ConnectError(e));
            return;
        }
        c.state = ConnState::Established;
        self.send_rtu(slot);
        self.push_event(id, EventKind::Established);
    }

    fn send_rtu(&mut self, slot: usize) {
        let Some(c) = self.slots[slot].conn.as_ref() else { return };
        let mut m = blank();
        let mut rtu = Rtu::new_checked(&mut m[..]).expect("a MAD");
        rtu.hdr_mut().emit_cm(AttrId::Rtu, c.tid);
        rtu.set_local_comm_id(c.local_id);
        rtu.set_remote_comm_id(c.remote_id);
        let to = c.peer;
        self.send(&to, &m);
    }

    /// `cm_rtu_handler`.
    fn on_rtu(&mut self, mad: &[u8; MAD_LEN]) {
        let rtu = Rtu::new_checked(&mad[..]).expect("a MAD");
        let Some(slot) = self.find(rtu.remote_comm_id(), rtu.local_comm_id()) else {
            self.stats.unexpected += 1;
            return;
        };
        let id = self.id_of(slot);
        let c = self.slots[slot].conn.as_mut().expect("found");
        if !matches!(c.state, ConnState::RepSent | ConnState::MraRepRcvd) {
            self.stats.duplicates += 1;
            return;
        }
        c.state = ConnState::Established;
        c.deadline = None;
        self.push_event(id, EventKind::Established);
    }

    /// `cm_rej_handler` with `cm_acquire_rejected_id`.
    fn on_rej(&mut self, mad: &[u8; MAD_LEN], now: Micros, qps: &mut (impl QpSet + ?Sized)) {
        let rej = Rej::new_checked(&mad[..]).expect("a MAD");
        let reason = RejReason::from(rej.reason());
        let (ours, theirs) = (rej.remote_comm_id(), rej.local_comm_id());
        let slot = if reason == RejReason::Timeout {
            let ari = rej.ari();
            let guid = u64::from_be_bytes(ari[..8].try_into().expect("8 bytes"));
            self.slots.iter().position(|s| {
                s.conn.as_ref().is_some_and(|c| {
                    c.remote_id == theirs && c.remote_ca_guid == guid && c.remote_id != 0
                })
            })
        } else if rej.message_rejected() == MsgResponse::Req.raw() {
            self.find(ours, 0)
        } else {
            self.find(ours, theirs)
        };
        let Some(slot) = slot else {
            self.stats.unexpected += 1;
            return;
        };
        let id = self.id_of(slot);
        let c = self.slots[slot].conn.as_ref().expect("found");
        let qpn = c.local_qpn;
        match c.state {
            ConnState::ReqSent
            | ConnState::MraReqRcvd
            | ConnState::ReqRcvd
            | ConnState::MraReqSent
            | ConnState::RepSent
            | ConnState::MraRepRcvd => {
                if matches!(c.state, ConnState::RepSent | ConnState::MraRepRcvd) {
                    if let Some(q) = qps.find(qpn) {
                        let _ = q.modify(&QpStep::Error);
                    }
                }
                if reason == RejReason::StaleConn {
                    self.enter_timewait(slot, now);
                } else {
                    self.free(slot);
                }
                self.push_event(id, EventKind::Rejected { reason });
            }
            ConnState::Established | ConnState::DreqSent => {
                if let Some(q) = qps.find(qpn) {
                    let _ = q.modify(&QpStep::Error);
                }
                self.enter_timewait(slot, now);
                self.push_event(id, EventKind::Disconnected);
            }
            ConnState::TimeWait => self.stats.unexpected += 1,
        }
    }

    /// `cm_mra_handler` with `cm_acquire_mraed_id`: the outstanding MAD's timeout becomes
    /// the MRA's service timeout plus the path's (`ib_modify_mad`).
    fn on_mra(&mut self, mad: &[u8; MAD_LEN], now: Micros) {
        let mra = Mra::new_checked(&mad[..]).expect("a MAD");
        let what = MsgResponse::from(mra.message_mraed());
        let slot = match what {
            MsgResponse::Req => self.find(mra.remote_comm_id(), 0),
            MsgResponse::Rep | MsgResponse::Other => {
                self.find(mra.remote_comm_id(), mra.local_comm_id())
            }
            MsgResponse::Unknown(_) => None,
        };
        let Some(slot) = slot else {
            self.stats.unexpected += 1;
            return;
        };
        let c = self.slots[slot].conn.as_mut().expect("found");
        let timeout = convert_to_ms(mra.service_timeout()) + convert_to_ms(c.av_timeout);
        let next = match (c.state, what) {
            (ConnState::ReqSent, MsgResponse::Req) => ConnState::MraReqRcvd,
            (ConnState::RepSent, MsgResponse::Rep) => ConnState::MraRepRcvd,
            (ConnState::MraReqRcvd | ConnState::MraRepRcvd, _) => {
                self.stats.duplicates += 1;
                return;
            }
            _ => {
                self.stats.unexpected += 1;
                return;
            }
        };
        c.state = next;
        c.timeout_ms = timeout;
        c.deadline = Some(now.plus_ms(timeout));
    }

    /// `cm_dreq_handler`, answering at once (`ib_send_cm_drep`: rdma_cm's users answer a
    /// DISCONNECTED event with `rdma_disconnect`, which sends it).
    fn on_dreq(
        &mut self,
        mad: &[u8; MAD_LEN],
        src: Gid,
        now: Micros,
        qps: &mut (impl QpSet + ?Sized),
    ) {
        let dreq = Dreq::new_checked(&mad[..]).expect("a MAD");
        let Some(slot) = self.find(dreq.remote_comm_id(), dreq.local_comm_id()) else {
            // cm_issue_drep: answer a DREQ for a connection we no longer know.
            self.stats.duplicates += 1;
            let Some(dmac) = self.port.resolve(&src) else {
                self.stats.unresolved += 1;
                return;
            };
            let mut m = blank();
            let mut drep = Drep::new_checked(&mut m[..]).expect("a MAD");
            drep.hdr_mut().emit_cm(AttrId::Drep, dreq.hdr().tid());
            drep.set_remote_comm_id(dreq.local_comm_id());
            drep.set_local_comm_id(dreq.remote_comm_id());
            let to = self.mad_addr(src, dmac);
            self.send(&to, &m);
            return;
        };
        let id = self.id_of(slot);
        let tid = dreq.hdr().tid();
        let c = self.slots[slot].conn.as_mut().expect("found");
        if c.local_qpn.0 != dreq.remote_qpn_eecn() {
            self.stats.unexpected += 1;
            return;
        }
        let event = match c.state {
            ConnState::RepSent
            | ConnState::MraRepRcvd
            | ConnState::Established
            | ConnState::DreqSent => true,
            ConnState::TimeWait => {
                self.stats.duplicates += 1;
                false
            }
            _ => {
                self.stats.unexpected += 1;
                return;
            }
        };
        c.tid = tid;
        let qpn = c.local_qpn;
        let mut m = blank();
        let mut drep = Drep::new_checked(&mut m[..]).expect("a MAD");
        drep.hdr_mut().emit_cm(AttrId::Drep, tid);
        drep.set_local_comm_id(c.local_id);
        drep.set_remote_comm_id(c.remote_id);
        let to = c.peer;
        if event {
            if let Some(q) = qps.find(qpn) {
                let _ = q.modify(&QpStep::Error);
            }
            self.enter_timewait(slot, now);
            self.push_event(id, EventKind::Disconnected);
        }
        self.send(&to, &m);
    }

    /// `cm_drep_handler`.
    fn on_drep(&mut self, mad: &[u8; MAD_LEN], now: Micros) {
        let drep = Drep::new_checked(&mad[..]).expect("a MAD");
        let Some(slot) = self.find(drep.remote_comm_id(), drep.local_comm_id()) else {
            self.stats.unexpected += 1;
            return;
        };
        let id = self.id_of(slot);
        if self.slots[slot].conn.as_ref().map(|c| c.state) != Some(ConnState::DreqSent) {
            self.stats.duplicates += 1;
            return;
        }
        self.enter_timewait(slot, now);
        self.push_event(id, EventKind::Disconnected);
    }
}
