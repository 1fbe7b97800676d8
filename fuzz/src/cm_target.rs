//! `cm`: the receive path of [`rdma_pmd::cm::Cm`], and the typed MAD views it reads with.
//!
//! One CM listens on [`PORT`] behind a [`MadPort`] that hands out the datagrams the script
//! builds (GRH + MAD, any length: the receive path is given exactly what a UD receive could
//! write), interleaved with time passing (so retries, MRA waits and timewait run) and with
//! the application's calls (`accept`, `reject`, `disconnect`, `connect`) on the connections
//! the events name. The QPs it moves accept every modification, or refuse one when the
//! script says so.
//!
//! Checked besides "no panic, no hang": every MAD the CM sends is a CM MAD
//! ([`MadHdr::check_cm`]); every datagram that is not a GRH and a CM MAD counts as received;
//! the live connections never exceed the table; and on every received MAD the typed views
//! refuse short buffers and write back exactly what they read (`set_x(x())` changes no byte).

use std::collections::VecDeque;

use rdma_pmd::cm::cma::{service_id, CmaHdr, RDMA_PS_TCP};
use rdma_pmd::cm::mad::{
    grh_source, AttrId, Drep, Dreq, MadHdr, Mra, Rej, Rep, Req, Rtu, GRH_LEN, MAD_HDR_LEN, MAD_LEN,
};
use rdma_pmd::cm::{
    AcceptParams, Cm, CmConfig, CmQp, ConnId, ConnectParams, EventKind, MadAddr, MadPort, Micros,
    QpParams, QpStep,
};
use rdma_pmd::{Error, Gid, Mac, QpNum, Result};

use crate::input::{Script, Writer};
use crate::Trace;

/// The port the CM listens on.
pub const PORT: u16 = 7174;
/// This host's IPv4 address (its GID is the mapped form).
pub const ME: [u8; 4] = [10, 0, 0, 1];
/// The peer's.
pub const PEER: [u8; 4] = [10, 0, 0, 2];
/// The CM's CA GUID and seed.
pub const GUID: u64 = 0x0002_c903_0000_0001;
const SEED: u64 = 42;
/// Connections and undelivered events: small, so the script fills them.
const N: usize = 4;
const E: usize = 4;
/// Most MADs kept of what the CM sent (the script names them to aim at a connection).
const SENT_KEPT: usize = 32;
/// Steps of one script, so that an input's cost is bounded.
const MAX_STEPS: usize = 256;

/// Script opcodes (the low 3 bits of a step's first byte).
pub mod op {
    /// Time passes: `u16` milliseconds.
    pub const TICK: u8 = 0;
    /// A datagram as received: `u16` length (mod 512), then that many bytes.
    pub const RAW: u8 = 1;
    /// A well-formed GRH and CM header around script bytes: attribute, id choice, GRH kind,
    /// `u32` TID, then the 232 bytes after the MAD header.
    pub const SHAPED: u8 = 2;
    /// `accept` the newest request: QP choice, responder resources, initiator depth, private
    /// data length, private data.
    pub const ACCEPT: u8 = 3;
    /// `reject` the newest request: private data length, private data.
    pub const REJECT: u8 = 4;
    /// `disconnect` an established connection: connection choice.
    pub const DISCONNECT: u8 = 5;
    /// `connect` to the peer: QP choice, MTU.
    pub const CONNECT: u8 = 6;
    /// Stop or start listening.
    pub const LISTEN: u8 = 7;
}

/// The MAD port: datagrams from the script in, MADs out recorded.
struct Port {
    inbox: VecDeque<Vec<u8>>,
    sent: VecDeque<[u8; MAD_LEN]>,
}

impl MadPort for Port {
    fn send_mad(&mut self, _: &MadAddr, mad: &[u8; MAD_LEN]) -> Result<()> {
        let hdr = MadHdr::new_checked(&mad[..]).expect("a whole MAD");
        assert!(
            hdr.check_cm().is_ok(),
            "the CM sent a MAD that is not a CM MAD: {:02x?}",
            &mad[..24]
        );
        if self.sent.len() == SENT_KEPT {
            self.sent.pop_front();
        }
        self.sent.push_back(*mad);
        Ok(())
    }

    fn recv_mad(&mut self, buf: &mut [u8; GRH_LEN + MAD_LEN]) -> Result<Option<usize>> {
        let Some(d) = self.inbox.pop_front() else { return Ok(None) };
        let n = d.len().min(buf.len());
        buf[..n].copy_from_slice(&d[..n]);
        Ok(Some(d.len()))
    }

    fn resolve(&mut self, gid: &Gid) -> Option<Mac> {
        (*gid == Gid::from_ipv4(PEER)).then_some(Mac([2, 0, 0, 0, 0, 2]))
    }
}

/// A data QP that takes every step, unless told to refuse.
struct FuzzQp {
    qpn: u32,
    refuse: bool,
}

impl CmQp for FuzzQp {
    fn qp_num(&self) -> QpNum {
        QpNum(self.qpn)
    }
    fn modify(&mut self, _: &QpStep) -> Result<()> {
        if self.refuse {
            return Err(Error::InvalidArgument("refused by the fuzz script"));
        }
        Ok(())
    }
}

/// The GRH of a RoCE v2 IPv4 receive from `from` to `to`.
pub fn grh_v4(from: [u8; 4], to: [u8; 4]) -> [u8; GRH_LEN] {
    let mut g = [0u8; GRH_LEN];
    g[20] = 0x45;
    g[32..36].copy_from_slice(&from);
    g[36..40].copy_from_slice(&to);
    g
}

/// The connection parameters of an active `connect` to the peer.
fn params(mtu: u8) -> ConnectParams<'static> {
    ConnectParams {
        local: (ME, 40000).into(),
        remote: (PEER, PORT).into(),
        local_gid: Gid::from_ipv4(ME),
        remote_gid: Gid::from_ipv4(PEER),
        remote_mac: Mac([2, 0, 0, 0, 0, 2]),
        private_data: b"fuzz",
        qp: QpParams { mtu, ..QpParams::default() },
    }
}

/// The CM's receive path, driven by `data` (see the module docs).
pub fn run(data: &[u8]) -> Trace {
    let mut t = Trace::new();
    let mut s = Script::new(data);
    let mut cfg = CmConfig::new(GUID, SEED);
    // Few retries, so a script reaches the end of every timer within its ticks.
    cfg.max_cm_retries = 1 + s.byte() % 4;
    cfg.budget = 1 + usize::from(s.byte() % 16);
    let port = Port { inbox: VecDeque::new(), sent: VecDeque::new() };
    let mut cm: Cm<Port, N, E> = Cm::new(port, cfg).expect("valid configuration");
    cm.listen(PORT).expect("a free listener slot");
    let mut listening = true;
    let mut qps: Vec<FuzzQp> = (0..6).map(|i| FuzzQp { qpn: 0x100 + i, refuse: false }).collect();
    let mut now = Micros(0);
    let mut requests: Vec<ConnId> = Vec::new();
    let mut established: Vec<ConnId> = Vec::new();
    let mut injected = 0u64;

    for _ in 0..MAX_STEPS {
        if s.is_empty() {
            break;
        }
        let b = s.byte();
        match b & 7 {
            op::TICK => now = now.plus_ms(u64::from(s.u16())),
            op::RAW => {
                let len = usize::from(s.u16()) % 512;
                let d = s.take(len).to_vec();
                views(&d);
                cm.port_mut().inbox.push_back(d);
                injected += 1;
            }
            op::SHAPED => {
                let d = shaped(&mut s, &cm.port_mut().sent);
                views(&d);
                cm.port_mut().inbox.push_back(d);
                injected += 1;
            }
            op::ACCEPT => {
                let q = usize::from(s.byte()) % qps.len();
                let (rr, id) = (s.byte() % 4, s.byte() % 4);
                let len = usize::from(s.byte());
                let pd = s.take(len);
                if let Some(c) = requests.pop() {
                    qps[q].refuse = b & 0x80 != 0;
                    let p = AcceptParams {
                        private_data: pd,
                        responder_resources: rr,
                        initiator_depth: id,
                    };
                    let _ = cm.accept(c, &mut qps[q], &p, now);
                    qps[q].refuse = false;
                }
            }
            op::REJECT => {
                let len = usize::from(s.byte());
                let pd = s.take(len);
                if let Some(c) = requests.pop() {
                    let _ = cm.reject(c, pd);
                }
            }
            op::DISCONNECT => {
                let k = usize::from(s.byte());
                let q = k % qps.len();
                if !established.is_empty() {
                    let c = established.remove(k % established.len());
                    let _ = cm.disconnect(c, &mut qps[q], now);
                }
            }
            op::CONNECT => {
                let q = usize::from(s.byte()) % qps.len();
                let mtu = 1 + s.byte() % 5;
                qps[q].refuse = b & 0x80 != 0;
                let _ = cm.connect(&mut qps[q], &params(mtu), now);
                qps[q].refuse = false;
            }
            _ => {
                if listening {
                    cm.unlisten(PORT);
                } else {
                    cm.listen(PORT).expect("a free listener slot");
                }
                listening = !listening;
            }
        }
        drain(&mut cm, now, &mut qps, &mut requests, &mut established, &mut t);
    }
    // Let every timer run out: the CM must come to rest.
    for _ in 0..64 {
        if cm.next_deadline().is_none() && cm.port_mut().inbox.is_empty() {
            break;
        }
        now = now.plus_ms(100_000);
        drain(&mut cm, now, &mut qps, &mut requests, &mut established, &mut t);
    }
    let st = cm.stats();
    assert!(st.received >= injected, "{injected} datagrams injected, {st:?}");
    assert!(cm.live() <= N);
    t
}

/// Poll until the CM has nothing more to say (bounded), keeping the handles events name.
fn drain(
    cm: &mut Cm<Port, N, E>,
    now: Micros,
    qps: &mut [FuzzQp],
    requests: &mut Vec<ConnId>,
    established: &mut Vec<ConnId>,
    t: &mut Trace,
) {
    for _ in 0..64 {
        let Some(ev) = cm.poll(now, qps) else {
            if cm.port_mut().inbox.is_empty() {
                return;
            }
            continue;
        };
        // Whatever an event names can be looked at.
        let _ = (cm.state(ev.id), cm.qp_num(ev.id), cm.private_data(ev.id));
        match ev.kind {
            EventKind::ConnectRequest => {
                if let Some(r) = cm.get_request(ev.id) {
                    assert!(r.private_data.len() <= Req::<&[u8]>::PRIVATE_DATA_LEN);
                }
                requests.push(ev.id);
            }
            EventKind::Established => established.push(ev.id),
            _ => {}
        }
        t.insert(match ev.kind {
            EventKind::ConnectRequest => "connect-request",
            EventKind::Established => "established",
            EventKind::Rejected { .. } => "rejected",
            EventKind::Unreachable => "unreachable",
            EventKind::ConnectError(_) => "connect-error",
            EventKind::Disconnected => "disconnected",
            EventKind::TimewaitExit => "timewait-exit",
        });
        let _ = ev.kind.errno();
    }
}

/// A GRH and CM MAD header around script bytes (see [`op::SHAPED`]).
fn shaped(s: &mut Script<'_>, sent: &VecDeque<[u8; MAD_LEN]>) -> Vec<u8> {
    let attr = AttrId::from(0x10 + u16::from(s.byte() % 11));
    let pick = s.byte();
    let grh_kind = s.byte();
    let tid = u64::from(s.u32());
    let body: [u8; MAD_LEN - MAD_HDR_LEN] = s.array();
    let mut mad = [0u8; MAD_LEN];
    mad[MAD_HDR_LEN..].copy_from_slice(&body);
    MadHdr::new_checked(&mut mad[..]).expect("a MAD").emit_cm(attr, tid);
    // Aim at a connection: the remote communication ID is the local one of a MAD the CM sent.
    if pick & 1 != 0 && !sent.is_empty() {
        let ours = Rtu::new_checked(&sent[usize::from(pick >> 2) % sent.len()][..])
            .expect("a MAD")
            .local_comm_id();
        Rtu::new_checked(&mut mad[..]).expect("a MAD").set_remote_comm_id(ours);
    }
    // A REQ for the listener, with rdma_cm's private-data header.
    if pick & 2 != 0 && attr == AttrId::Req {
        let mut r = Req::new_checked(&mut mad[..]).expect("a MAD");
        r.set_service_id(service_id(RDMA_PS_TCP, PORT));
        r.set_primary_local_gid(&Gid::from_ipv4(PEER).0);
        r.set_primary_remote_gid(&Gid::from_ipv4(ME).0);
        let mut pd = [0u8; 92];
        CmaHdr::new_checked(&mut pd[..])
            .expect("36 bytes")
            .emit((PEER, 50000).into(), core::net::IpAddr::from(ME))
            .expect("IPv4 addresses");
        r.set_private_data(&pd);
    }
    let grh = match grh_kind % 4 {
        // IPv6 GRH with the peer's mapped GID.
        1 => {
            let mut g = [0u8; GRH_LEN];
            g[0] = 0x60;
            g[8..24].copy_from_slice(&Gid::from_ipv4(PEER).0);
            g[24..40].copy_from_slice(&Gid::from_ipv4(ME).0);
            g
        }
        // From an address no neighbour entry resolves.
        2 => grh_v4([10, 0, 0, 9], ME),
        _ => grh_v4(PEER, ME),
    };
    let mut d = grh.to_vec();
    d.extend_from_slice(&mad);
    d
}

/// The typed views over a received datagram: short buffers refused, every field read, and
/// each setter writing back what its getter read leaves the bytes as they were.
fn views(d: &[u8]) {
    let _ = grh_source(d);
    if d.len() < GRH_LEN + MAD_LEN {
        let m = &d[d.len().min(GRH_LEN)..];
        assert!(MadHdr::new_checked(m).is_err() && Req::new_checked(m).is_err());
        return;
    }
    let m = &d[GRH_LEN..GRH_LEN + MAD_LEN];
    let h = MadHdr::new_checked(m).expect("a MAD");
    let _ = (h.check_cm(), h.attr(), h.tid(), h.status(), h.attr_mod());

    let mut buf = [0u8; MAD_LEN];
    buf.copy_from_slice(m);
    let mut r = Req::new_checked(&mut buf[..]).expect("a MAD");
    let v = (
        r.local_comm_id(),
        r.service_id(),
        r.local_qpn(),
        r.starting_psn(),
        r.transport_service_type(),
        r.retry_count(),
        r.path_mtu(),
        r.rnr_retry_count(),
        r.primary_flow_label(),
        r.primary_packet_rate(),
        r.primary_sl(),
        r.primary_subnet_local(),
        r.local_cm_response_timeout(),
        r.end_to_end_flow_control(),
    );
    let (lgid, rgid) = (r.local_gid(), r.remote_gid());
    r.set_local_comm_id(v.0);
    r.set_service_id(v.1);
    r.set_local_qpn(v.2);
    r.set_starting_psn(v.3);
    r.set_transport_service_type(v.4);
    r.set_retry_count(v.5);
    r.set_path_mtu(v.6);
    r.set_rnr_retry_count(v.7);
    r.set_primary_flow_label(v.8);
    r.set_primary_packet_rate(v.9);
    r.set_primary_sl(v.10);
    r.set_primary_subnet_local(v.11);
    r.set_local_cm_response_timeout(v.12);
    r.set_end_to_end_flow_control(v.13);
    r.set_primary_local_gid(&lgid.0);
    r.set_primary_remote_gid(&rgid.0);
    assert_eq!(&buf[..], m, "a REQ setter changed bits its getter did not read");
    if let Ok(c) = CmaHdr::new_checked(Req::new_checked(m).expect("a MAD").private_data()) {
        let _ = (c.cma_version(), c.ip_version(), c.port(), c.addrs());
    }

    let mut rep = Rep::new_checked(&mut buf[..]).expect("a MAD");
    let v = (
        rep.local_qpn(),
        rep.starting_psn(),
        rep.target_ack_delay(),
        rep.failover_accepted(),
        rep.rnr_retry_count(),
        rep.srq(),
        rep.local_ca_guid(),
    );
    rep.set_local_qpn(v.0);
    rep.set_starting_psn(v.1);
    rep.set_target_ack_delay(v.2);
    rep.set_failover_accepted(v.3);
    rep.set_rnr_retry_count(v.4);
    rep.set_srq(v.5);
    rep.set_local_ca_guid(v.6);
    assert_eq!(&buf[..], m, "a REP setter changed bits its getter did not read");

    let mut rej = Rej::new_checked(&mut buf[..]).expect("a MAD");
    let v = (rej.message_rejected(), rej.rejected_info_length(), rej.reason(), rej.ari());
    rej.set_message_rejected(v.0);
    rej.set_rejected_info_length(v.1);
    rej.set_reason(v.2);
    rej.set_ari(&v.3);
    assert_eq!(&buf[..], m, "a REJ setter changed bits its getter did not read");

    let mut mra = Mra::new_checked(&mut buf[..]).expect("a MAD");
    let v = (mra.message_mraed(), mra.service_timeout());
    mra.set_message_mraed(v.0);
    mra.set_service_timeout(v.1);
    assert_eq!(&buf[..], m, "an MRA setter changed bits its getter did not read");

    let mut dreq = Dreq::new_checked(&mut buf[..]).expect("a MAD");
    let v = dreq.remote_qpn_eecn();
    dreq.set_remote_qpn_eecn(v);
    assert_eq!(&buf[..], m, "a DREQ setter changed bits its getter did not read");
    let _ = Drep::new_checked(m).expect("a MAD").private_data();
}

/// Seed scripts: a REQ from a real requester (another [`Cm`] connecting to this one) that
/// is accepted and answered by an RTU aimed at the REP, then disconnected; an active connect
/// answered by a REP; and a REQ for no listener.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let req = peer_req();
    let peer_id = Req::new_checked(&req[GRH_LEN..]).expect("a MAD").local_comm_id();
    let mut out = Vec::new();
    // The peer's answers carry its own communication ID; the DREQ names our QP.
    let mut rtu = [0u8; MAD_LEN];
    Rtu::new_checked(&mut rtu[..]).expect("a MAD").set_local_comm_id(peer_id);
    let mut dreq = [0u8; MAD_LEN];
    {
        let mut d = Dreq::new_checked(&mut dreq[..]).expect("a MAD");
        d.set_local_comm_id(peer_id);
        d.set_remote_qpn_eecn(0x100);
    }

    let mut w = Writer::default();
    w.byte(2).byte(16);
    raw(&mut w, &req);
    w.byte(op::ACCEPT).byte(0).byte(1).byte(1).byte(4).put(b"seed");
    // RTU (attr 0x14) aimed at the REP just sent.
    shaped_seed(&mut w, 0x14 - 0x10, 1, 0x5eed_0001, &rtu[MAD_HDR_LEN..]);
    w.byte(op::TICK).u16(10);
    // The peer's DREQ aimed at the connection.
    shaped_seed(&mut w, 0x15 - 0x10, 1, 0x5eed_0002, &dreq[MAD_HDR_LEN..]);
    w.byte(op::TICK).u16(60_000);
    out.push(("req-accept-rtu-dreq", w.bytes.clone()));

    let mut w = Writer::default();
    w.byte(2).byte(16);
    w.byte(op::CONNECT).byte(0).byte(3);
    let mut body = [0u8; MAD_LEN - MAD_HDR_LEN];
    {
        let mut m = [0u8; MAD_LEN];
        let mut r = Rep::new_checked(&mut m[..]).expect("a MAD");
        r.set_local_comm_id(0x1234_5678);
        r.set_local_qpn(0x4242);
        r.set_starting_psn(0x10_0000);
        r.set_responder_resources(1);
        r.set_initiator_depth(1);
        r.set_rnr_retry_count(7);
        r.set_local_ca_guid(0x0002_c903_0000_0002);
        body.copy_from_slice(&m[MAD_HDR_LEN..]);
    }
    shaped_seed(&mut w, 0x13 - 0x10, 1, 0x5eed_0003, &body);
    w.byte(op::TICK).u16(1000);
    out.push(("connect-rep", w.bytes.clone()));

    let mut w = Writer::default();
    w.byte(2).byte(16);
    w.byte(op::LISTEN);
    raw(&mut w, &req);
    w.byte(op::TICK).u16(5000);
    out.push(("req-no-listener", w.bytes.clone()));

    let mut w = Writer::default();
    w.byte(2).byte(16);
    raw(&mut w, &req);
    w.byte(op::REJECT).byte(3).put(b"no!");
    w.byte(op::TICK).u16(5000);
    out.push(("req-reject", w.bytes.clone()));
    out
}

fn raw(w: &mut Writer, d: &[u8]) {
    w.byte(op::RAW).u16(d.len() as u16).put(d);
}

fn shaped_seed(w: &mut Writer, attr: u8, pick: u8, tid: u32, body: &[u8]) {
    w.byte(op::SHAPED).byte(attr).byte(pick).byte(0).u32(tid).put(body);
}

/// The datagram a requester's REQ arrives as: another CM connects to [`PORT`] here.
fn peer_req() -> Vec<u8> {
    struct Capture(Option<[u8; MAD_LEN]>);
    impl MadPort for Capture {
        fn send_mad(&mut self, _: &MadAddr, mad: &[u8; MAD_LEN]) -> Result<()> {
            self.0 = Some(*mad);
            Ok(())
        }
        fn recv_mad(&mut self, _: &mut [u8; GRH_LEN + MAD_LEN]) -> Result<Option<usize>> {
            Ok(None)
        }
        fn resolve(&mut self, _: &Gid) -> Option<Mac> {
            Some(Mac([2, 0, 0, 0, 0, 1]))
        }
    }
    let mut peer: Cm<Capture, 1> =
        Cm::new(Capture(None), CmConfig::new(0x0002_c903_0000_0002, 7)).expect("config");
    let p = ConnectParams {
        local: (PEER, 50000).into(),
        remote: (ME, PORT).into(),
        local_gid: Gid::from_ipv4(PEER),
        remote_gid: Gid::from_ipv4(ME),
        remote_mac: Mac([2, 0, 0, 0, 0, 1]),
        private_data: b"seed",
        qp: QpParams::default(),
    };
    let mut qp = FuzzQp { qpn: 0x4242, refuse: false };
    peer.connect(&mut qp, &p, Micros(0)).expect("connect");
    let mad = peer.port_mut().0.expect("a REQ sent");
    let mut d = grh_v4(PEER, ME).to_vec();
    d.extend_from_slice(&mad);
    d
}
