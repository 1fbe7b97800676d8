//! Received MADs: each handler is `cm.c`'s for its message, matching the connection by its
//! communication IDs and acting only when the state allows.

use crate::addr::{Gid, QpNum};
use crate::error::{Error, Result};

use super::{blank, Cm, Conn, ANSWERS};
use crate::cm::backend::{CmQp, MadPort, QpPath, QpSet, QpStep};
use crate::cm::cma::{service_id, CmaHdr, RDMA_PS_TCP};
use crate::cm::mad::*;
use crate::cm::timing::*;
use crate::cm::types::*;

impl<P: MadPort, const N: usize, const E: usize> Cm<P, N, E> {
    pub(super) fn input(
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
            AttrId::SidrReq => self.on_sidr_req(&mad, src),
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
        self.send_or_drop(&to, &m);
    }

    /// `cm_sidr_req_handler` with no listener for UD: a SIDR_REP with status
    /// [`SidrStatus::Unsupported`] (what `cm.c` answers when no UD service listens), so that
    /// rdma_cm's requester fails at once (`cma_sidr_rep_handler`: any status but success is
    /// `RDMA_CM_EVENT_UNREACHABLE`) instead of after its retries.
    fn on_sidr_req(&mut self, mad: &[u8; MAD_LEN], src: Gid) {
        let req = SidrReq::new_checked(&mad[..]).expect("a MAD");
        let Some(dmac) = self.port.resolve(&src) else {
            self.stats.unresolved += 1;
            return;
        };
        self.stats.sidr_refused += 1;
        let mut m = blank();
        let mut rep = SidrRep::new_checked(&mut m[..]).expect("a MAD");
        rep.hdr_mut().emit_cm(AttrId::SidrRep, req.hdr().tid());
        rep.set_request_id(req.request_id());
        rep.set_status(SidrStatus::Unsupported.raw());
        rep.set_service_id(req.service_id());
        let to = self.mad_addr(src, dmac);
        self.send_or_drop(&to, &m);
    }

    /// `cm_req_handler` with `cm_match_req` (duplicates, stale connections, listeners) and
    /// `cma_req_handler`'s checks of the `cma_hdr`.
    fn on_req(&mut self, mad: &[u8; MAD_LEN], src: Gid, now: Micros) {
        let req = Req::new_checked(&mad[..]).expect("a MAD");
        let (rid, guid, rqpn) = (req.local_comm_id(), req.local_ca_guid(), req.local_qpn());
        // A connection is known by the peer's CA GUID and communication ID (cm.c's remote ID
        // table); GUID 0 names no CA (CmConfig refuses it for us), and a REQ with it could
        // never be found again as a duplicate: malformed.
        if guid == 0 {
            self.stats.malformed += 1;
            return;
        }
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
                    self.answer(slot, to, m, None, now);
                }
                ConnState::TimeWait => {
                    let rej = self.rej_for(slot, RejReason::StaleConn, MsgResponse::Other, &[]);
                    if let Some((to, m)) = rej {
                        self.answer(slot, to, m, None, now);
                    }
                }
                _ => {}
            }
            return;
        }
        // A stale connection: the requester's QP is still in one of ours (cm_match_req).
        if let Some(slot) = self.slots.iter().position(|s| {
            s.conn.as_ref().is_some_and(|c| {
                c.remote_qpn == rqpn && c.remote_ca_guid == guid && c.state != ConnState::TimeWait
            })
        }) {
            self.refuse_stale(mad, src, MsgResponse::Req, slot, now);
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
            // cm_req_handler: no address vector for the requester, REJ invalid GID (which
            // counts the REQ as unresolved if the REJ cannot go out either).
            self.issue_rej(mad, src, RejReason::InvalidGid, MsgResponse::Req);
            return;
        };
        let Ok(local_id) = self.new_comm_id() else {
            self.stats.table_full += 1;
            return;
        };
        let lat = req.primary_local_ack_timeout();
        let cfg = self.cfg;
        // Bound what the peer chooses: its response timeout (each REP try) and retries.
        let (rto, retries) = (req.local_cm_response_timeout(), req.max_cm_retries());
        if rto > cfg.max_peer_response_timeout || retries > cfg.max_peer_cm_retries {
            self.stats.clamped += 1;
        }
        let rto = rto.min(cfg.max_peer_response_timeout);
        // cm_format_paths_from_req: the lifetime is the ACK timeout less one;
        // cm_init_av_by_path adds it back. The peer chooses it: at most max_ack_timeout.
        let av_timeout =
            self.bound_ack_timeout(lat.saturating_sub((lat > 0) as u8).saturating_add(1));
        let retries = retries.min(cfg.max_peer_cm_retries);
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
            av_timeout,
            timeout_ms: convert_to_ms(rto),
            retries_left: 0,
            max_cm_retries: retries,
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
            out_unsent: false,
            answers: [None; ANSWERS],
            req_data,
            rep_data: [0; REP_USER_DATA],
        });
        let id = self.id_of(slot);
        self.push_event(id, EventKind::ConnectRequest);
    }

    /// A REQ or REP (`what`) whose sender's QP is still in connection `stale`: REJ it as a
    /// stale connection. cm.c also tears the old connection down whoever sent the MAD; here
    /// only its own peer (the GID its MADs come from) may: anyone else who copies its CA GUID
    /// and QPN is refused and changes nothing (see the module docs).
    fn refuse_stale(
        &mut self,
        mad: &[u8; MAD_LEN],
        src: Gid,
        what: MsgResponse,
        stale: usize,
        now: Micros,
    ) {
        self.stats.unexpected += 1;
        self.issue_rej(mad, src, RejReason::StaleConn, what);
        if self.slots[stale].conn.as_ref().is_some_and(|c| c.peer.dgid == src) {
            self.stale_dreq(stale, now);
        } else {
            self.stats.spoofed += 1;
        }
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
                        self.send_rtu(s, None, now);
                    }
                }
                None => self.stats.unexpected += 1,
            }
            return;
        };
        let (guid, rqpn) = (rep.local_ca_guid(), rep.local_qpn());
        // As for a REQ: GUID 0 names no CA, and duplicates could not be found by it.
        if guid == 0 {
            self.stats.malformed += 1;
            return;
        }
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
            self.refuse_stale(mad, src, MsgResponse::Rep, other, now);
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
        let av = ack_timeout(rep.target_ack_delay(), c.av_timeout.saturating_sub(1));
        let av = self.bound_ack_timeout(av);
        let c = self.slots[slot].conn.as_mut().expect("found");
        c.av_timeout = av;
        c.rep_data.copy_from_slice(rep.private_data());
        c.deadline = None;
        let steps = c.qp_steps();
        let qpn = c.local_qpn;
        let res = match qps.find(qpn) {
            None => Err(Error::InvalidArgument("the connection's QP was not lent to poll")),
            Some(q) => steps.iter().try_for_each(|s| q.modify(s)).inspect_err(|_| {
                let _ = q.modify(&QpStep::Error);
            }),
        };
        if let Err(e) = res {
            // cma_rep_recv failed: rdma_cm rejects (consumer-defined) and reports the error.
            self.reject_and_free(slot, MsgResponse::Rep, &[]);
            self.push_event(id, EventKind::ConnectError(e));
            return;
        }
        c.state = ConnState::Established;
        // Established is raised once the RTU left.
        self.send_rtu(slot, Some(EventKind::Established), now);
    }

    fn send_rtu(&mut self, slot: usize, event: Option<EventKind>, now: Micros) {
        let Some(c) = self.slots[slot].conn.as_ref() else { return };
        let mut m = blank();
        let mut rtu = Rtu::new_checked(&mut m[..]).expect("a MAD");
        rtu.hdr_mut().emit_cm(AttrId::Rtu, c.tid);
        rtu.set_local_comm_id(c.local_id);
        rtu.set_remote_comm_id(c.remote_id);
        let to = c.peer;
        self.answer(slot, to, m, event, now);
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
                self.conn_event(slot, EventKind::Disconnected, now);
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
        let max = self.cfg.max_mra_service_timeout;
        let st = mra.service_timeout();
        let c = self.slots[slot].conn.as_mut().expect("found");
        // The peer chooses the service timeout: at most CmConfig::max_mra_service_timeout
        // (av.timeout was bounded when the peer set it).
        let av = c.av_timeout;
        let timeout = convert_to_ms(st.min(max)).saturating_add(convert_to_ms(av));
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
        if st > max {
            self.stats.clamped += 1;
        }
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
            self.send_or_drop(&to, &m);
            return;
        };
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
        }
        // Disconnected is raised once the DREP left.
        self.answer(slot, to, m, event.then_some(EventKind::Disconnected), now);
    }

    /// `cm_drep_handler`.
    fn on_drep(&mut self, mad: &[u8; MAD_LEN], now: Micros) {
        let drep = Drep::new_checked(&mad[..]).expect("a MAD");
        let Some(slot) = self.find(drep.remote_comm_id(), drep.local_comm_id()) else {
            self.stats.unexpected += 1;
            return;
        };
        if self.slots[slot].conn.as_ref().map(|c| c.state) != Some(ConnState::DreqSent) {
            self.stats.duplicates += 1;
            return;
        }
        self.enter_timewait(slot, now);
        self.conn_event(slot, EventKind::Disconnected, now);
    }
}
