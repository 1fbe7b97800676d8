//! End-to-end: the connection manager on two mlx5 drivers, each on its own device model,
//! joined by the model's in-process wire. Connect and accept through MADs on QP1, then an
//! RDMA WRITE and a SEND through the ordinary posting calls, checked byte for byte;
//! disconnect from each side; a port nobody listens on is refused (ECONNREFUSED); a GID
//! nobody has times out (ETIMEDOUT) within the configured bound; junk datagrams to QP1, up to
//! the largest the wire carries, are counted and leave the CM working.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use rdma_pmd::cm::mad::RejReason;
use rdma_pmd::cm::{
    AcceptParams, Cm, CmConfig, CmQp, ConnId, ConnState, ConnectParams, Event, EventKind, Micros,
    QpParams, QpSet,
};
use rdma_pmd::{
    Completion, Errno, Gid, Mac, Post, RecvQueue, RemoteBuf, Rkey, SendFlags, WcOpcode,
};
use rdma_pmd_hal::mem::{HeapDma, MemBar};
use rdma_pmd_mlx5::cm::{GsiPort, GSI_RQ, RX_SLOT};
use rdma_pmd_mlx5::control::fw::FwControl;
use rdma_pmd_mlx5::control::Access;
use rdma_pmd_mlx5::{Qp, QpConfig, QpState, SharedDma};
use rdma_pmd_mlx5_model::{Model, ModelConfig, Wire};

type D = SharedDma<Arc<HeapDma>>;
type C = FwControl<'static, 'static>;
type Port<'r> = GsiPort<'r, MemBar, D, C>;
type TCm<'r> = Cm<Port<'r>, 8>;
type RcQp<'r> = Qp<'r, MemBar, D, C, 64, 16, 4>;

const SIG: SendFlags = SendFlags::SIGNALED;
const PORT: u16 = 7174;
const ALL: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE).union(Access::REMOTE_READ);

struct Host {
    gid: Gid,
    mac: Mac,
    ip: IpAddr,
    /// The path MTU the port allows (`Mlx5::port_mtu`), an `ibv_mtu`.
    mtu: u8,
}

/// The port's address as the driver reads it from firmware (GID table entry 0 and its MAC,
/// `QUERY_ROCE_ADDRESS`), checked against what the model was configured with.
fn host(m: &Model, dev: &Dev) -> Host {
    let (gid, mac) = dev.gid(0).unwrap().expect("GID 0 set");
    let g = m.gids()[0];
    assert_eq!((gid.0, mac.0), (g.gid, g.mac));
    assert_eq!(dev.mac().unwrap(), mac);
    let ip = match gid.ipv4() {
        Some(v4) => IpAddr::from(v4),
        None => IpAddr::from(gid.0),
    };
    Host { gid, mac, ip, mtu: dev.port_mtu().unwrap().mtu }
}

fn clock(start: Instant) -> Micros {
    Micros(start.elapsed().as_micros() as u64)
}

/// Poll both CMs (lending each its QPs) until `done` says so, failing after [`WAIT`].
fn run<'a, 'b>(
    start: Instant,
    a: &mut TCm<'a>,
    qa: &mut (impl QpSet + ?Sized),
    b: &mut TCm<'b>,
    qb: &mut (impl QpSet + ?Sized),
    mut done: impl FnMut(&[Event], &[Event]) -> bool,
) -> (Vec<Event>, Vec<Event>) {
    let (mut ea, mut eb) = (Vec::new(), Vec::new());
    let t0 = Instant::now();
    while !done(&ea, &eb) {
        let now = clock(start);
        ea.extend(a.poll(now, qa));
        eb.extend(b.poll(now, qb));
        assert!(t0.elapsed() < WAIT, "events so far: {ea:?} / {eb:?}");
        std::thread::yield_now();
    }
    (ea, eb)
}

fn kinds(e: &[Event]) -> Vec<EventKind> {
    e.iter().map(|e| e.kind).collect()
}

fn params<'p>(from: &Host, to: &Host, port: u16, pd: &'p [u8]) -> ConnectParams<'p> {
    ConnectParams {
        local: SocketAddr::new(from.ip, 50000),
        remote: SocketAddr::new(to.ip, port),
        local_gid: from.gid,
        remote_gid: to.gid,
        remote_mac: to.mac,
        private_data: pd,
        qp: QpParams { mtu: from.mtu, ..QpParams::default() },
    }
}

/// Connect A's `qa` to B's `qb` through the two CMs; B checks the request and answers with
/// `rep` as private data. Returns both ids.
#[allow(clippy::too_many_arguments)]
fn connect<'a, 'b>(
    start: Instant,
    a: &mut TCm<'a>,
    ha: &Host,
    qa: &mut RcQp<'_>,
    b: &mut TCm<'b>,
    hb: &Host,
    qb: &mut RcQp<'_>,
    rep: &[u8],
) -> (ConnId, ConnId) {
    let ida = a.connect(qa, &params(ha, hb, PORT, b"from A"), clock(start)).unwrap();
    let (_, eb) = run(start, a, std::slice::from_mut(qa), b, std::slice::from_mut(qb), |_, eb| {
        !eb.is_empty()
    });
    assert_eq!(kinds(&eb), [EventKind::ConnectRequest]);
    let idb = eb[0].id;
    let r = b.get_request(idb).unwrap();
    assert_eq!(r.peer, SocketAddr::new(ha.ip, 50000));
    assert_eq!(r.local, hb.ip);
    assert_eq!(r.peer_gid, ha.gid);
    assert_eq!(r.peer_qpn, CmQp::qp_num(qa));
    assert_eq!(&r.private_data[..6], b"from A");
    assert_eq!((r.responder_resources, r.initiator_depth), (1, 1));
    b.accept(idb, qb, &AcceptParams { private_data: rep, ..Default::default() }, clock(start))
        .unwrap();
    assert_eq!(qb.state(), QpState::Rts, "accept moves the QP to RTS before the REP");
    let (ea, eb) =
        run(start, a, std::slice::from_mut(qa), b, std::slice::from_mut(qb), |ea, eb| {
            !ea.is_empty() && !eb.is_empty()
        });
    assert_eq!(ea, [Event { id: ida, kind: EventKind::Established }]);
    assert_eq!(eb, [Event { id: idb, kind: EventKind::Established }]);
    assert_eq!(qa.state(), QpState::Rts);
    assert_eq!(
        (a.state(ida), b.state(idb)),
        (Some(ConnState::Established), Some(ConnState::Established))
    );
    (ida, idb)
}

fn wait_recv<'r, Q: RecvQueue<'r>>(q: &mut Q) -> Completion {
    let mut out = [Completion::default(); 1];
    let t0 = Instant::now();
    while q.poll_recv(&mut out).unwrap() == 0 {
        assert!(t0.elapsed() < WAIT, "no receive completion");
        std::thread::yield_now();
    }
    out[0]
}

#[test]
fn two_drivers_connect_through_their_cms_write_send_and_disconnect_from_each_side() {
    let wire = Wire::new();
    let cfg = || ModelConfig { wire: Some(wire.clone()), ..ModelConfig::default() };
    let (m1, m2) = (Model::with_config(cfg()).unwrap(), Model::with_config(cfg()).unwrap());
    let (d1, d2) = (open(&m1), open(&m2));
    let (h1, h2) = (host(&m1, &d1), host(&m2, &d2));
    let (mut rx1, mut rx2) = (
        d1.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap(),
        d2.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap(),
    );
    let mut p1 = GsiPort::new(&d1, &mut rx1, 1).unwrap();
    let mut p2 = GsiPort::new(&d2, &mut rx2, 1).unwrap();
    p1.add_neighbour(h2.gid, h2.mac).unwrap();
    p2.add_neighbour(h1.gid, h1.mac).unwrap();
    let mut a: TCm = Cm::new(p1, CmConfig::new(0x0002_c903_00a1_0001, 11)).unwrap();
    let mut b: TCm = Cm::new(p2, CmConfig::new(0x0002_c903_00b2_0002, 22)).unwrap();
    b.listen(PORT).unwrap();
    let start = Instant::now();

    let src = d1.reg(8192, ALL).unwrap();
    let mut recv_a = d1.reg(4096, Access::LOCAL_WRITE).unwrap();
    let dst = d2.reg(8192, ALL).unwrap();
    let mut recv_b = d2.reg(4096, Access::LOCAL_WRITE).unwrap();
    let data = pattern(161, 8192);
    src.write(0, &data).unwrap();

    for round in 0..2 {
        let mut qa: RcQp = d1.create_qp(&QpConfig::default()).unwrap();
        let mut qb: RcQp = d2.create_qp(&QpConfig::default()).unwrap();
        // B advertises where A may write, as rping does: {be64 addr, be32 rkey, be32 len}.
        let mut adv = [0u8; 16];
        adv[..8].copy_from_slice(&dst.remote(0).addr.to_be_bytes());
        adv[8..12].copy_from_slice(&dst.rkey().0.to_be_bytes());
        adv[12..].copy_from_slice(&8192u32.to_be_bytes());
        let (ida, idb) = connect(start, &mut a, &h1, &mut qa, &mut b, &h2, &mut qb, &adv);
        let pd = a.private_data(ida).unwrap();
        assert_eq!(&pd[..16], &adv, "the REP's private data reaches the requester");
        let target = RemoteBuf::new(
            u64::from_be_bytes(pd[..8].try_into().unwrap()),
            Rkey(u32::from_be_bytes(pd[8..12].try_into().unwrap())),
        );

        // RDMA WRITE from A into B's region, at the advertised address.
        let off = 1000 * round;
        qa.post_write(1, src.slice(off, 3000).unwrap(), SIG, target.offset(off as u64)).unwrap();
        let c = wait(&mut qa, 1);
        assert!(c[0].status.is_ok(), "{c:?}");
        assert_eq!(bytes(&dst, off, 3000), &data[off..off + 3000]);
        // SEND from B to A's posted receive, and from A to B's.
        let pa = qa.post_recv(7, recv_a.dest().unwrap()).unwrap();
        qb.post_send(2, dst.slice(off, 1500).unwrap(), SIG).unwrap();
        assert!(wait(&mut qb, 1)[0].status.is_ok());
        let r = wait_recv(&mut qa);
        assert_eq!((r.wr_id, r.opcode, r.byte_len), (7, WcOpcode::Recv, 1500));
        let buf = pa.reclaim(&qa).unwrap();
        let mut got = vec![0u8; 1500];
        buf.read(0, &mut got).unwrap();
        assert_eq!(got, &data[off..off + 1500]);
        let pb = qb.post_recv(8, recv_b.dest().unwrap()).unwrap();
        qa.post_send(3, src.slice(4096, 600).unwrap(), SIG).unwrap();
        assert!(wait(&mut qa, 1)[0].status.is_ok());
        assert_eq!(wait_recv(&mut qb).byte_len, 600);
        let buf = pb.reclaim(&qb).unwrap();
        let mut got = vec![0u8; 600];
        buf.read(0, &mut got).unwrap();
        assert_eq!(got, &data[4096..4696]);

        // Disconnect: from A in the first round, from B in the second.
        let now = clock(start);
        if round == 0 {
            a.disconnect(ida, &mut qa, now).unwrap();
        } else {
            b.disconnect(idb, &mut qb, now).unwrap();
        }
        let (ea, eb) = run(
            start,
            &mut a,
            std::slice::from_mut(&mut qa),
            &mut b,
            std::slice::from_mut(&mut qb),
            |ea, eb| !ea.is_empty() && !eb.is_empty(),
        );
        assert_eq!(ea, [Event { id: ida, kind: EventKind::Disconnected }], "round {round}");
        assert_eq!(eb, [Event { id: idb, kind: EventKind::Disconnected }], "round {round}");
        assert_eq!((qa.state(), qb.state()), (QpState::Error, QpState::Error));
        assert_eq!(
            (a.state(ida), b.state(idb)),
            (Some(ConnState::TimeWait), Some(ConnState::TimeWait))
        );
    }
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(
        (sa.malformed, sb.malformed, sa.send_errors, sb.send_errors),
        (0, 0, 0, 0),
        "{sa:?} {sb:?}"
    );
    clean(&m1);
    clean(&m2);
}

#[test]
fn a_port_nobody_listens_on_is_refused_and_an_absent_gid_times_out_within_the_bound() {
    let wire = Wire::new();
    let cfg = || ModelConfig { wire: Some(wire.clone()), ..ModelConfig::default() };
    let (m1, m2) = (Model::with_config(cfg()).unwrap(), Model::with_config(cfg()).unwrap());
    let (d1, d2) = (open(&m1), open(&m2));
    let (h1, h2) = (host(&m1, &d1), host(&m2, &d2));
    let (mut rx1, mut rx2) = (
        d1.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap(),
        d2.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap(),
    );
    let mut p1 = GsiPort::new(&d1, &mut rx1, 1).unwrap();
    let mut p2 = GsiPort::new(&d2, &mut rx2, 1).unwrap();
    p1.add_neighbour(h2.gid, h2.mac).unwrap();
    p2.add_neighbour(h1.gid, h1.mac).unwrap();
    // Short CM timeouts: 2 × 2^(10-8) + 2^(16-8) = 264 ms a try (room for a loaded machine
    // to bring the REJ back within the first), 2 retries.
    let short = CmConfig {
        cm_response_timeout: 16,
        packet_life_time: 10,
        max_cm_retries: 2,
        ..CmConfig::new(0x0002_c903_00a1_0001, 33)
    };
    let mut a: TCm = Cm::new(p1, short).unwrap();
    let mut b: TCm = Cm::new(p2, CmConfig::new(0x0002_c903_00b2_0002, 44)).unwrap();
    b.listen(PORT).unwrap();
    let start = Instant::now();
    let mut qa: RcQp = d1.create_qp(&QpConfig::default()).unwrap();

    // Nobody on port 9999 at B: REJ, invalid service ID.
    let id = a.connect(&mut qa, &params(&h1, &h2, 9999, &[]), clock(start)).unwrap();
    let (ea, eb) = run(
        start,
        &mut a,
        std::slice::from_mut(&mut qa),
        &mut b,
        &mut [] as &mut [RcQp],
        |ea, _| !ea.is_empty(),
    );
    assert!(eb.is_empty());
    assert_eq!(
        ea,
        [Event { id, kind: EventKind::Rejected { reason: RejReason::InvalidServiceId } }]
    );
    assert_eq!(ea[0].kind.errno(), Some(Errno::ECONNREFUSED));
    assert_eq!(a.live(), 0);

    // A GID nobody has: the REQ and its two retries go unanswered.
    let ghost = Host {
        gid: Gid::from_ipv4([10, 99, 99, 99]),
        mac: Mac([2, 0x99, 0, 0, 0, 1]),
        ip: [10, 99, 99, 99].into(),
        mtu: 3,
    };
    let mut qc: RcQp = d1.create_qp(&QpConfig::default()).unwrap();
    let t0 = Instant::now();
    let retx = a.stats().retransmits;
    let unknown_before = wire.stats().unknown_dst;
    let id = a.connect(&mut qc, &params(&h1, &ghost, PORT, &[]), clock(start)).unwrap();
    let (ea, _) = run(
        start,
        &mut a,
        std::slice::from_mut(&mut qc),
        &mut b,
        &mut [] as &mut [RcQp],
        |ea, _| !ea.is_empty(),
    );
    let took = t0.elapsed();
    assert_eq!(ea, [Event { id, kind: EventKind::Unreachable }]);
    assert_eq!(ea[0].kind.errno(), Some(Errno::ETIMEDOUT));
    assert_eq!(a.stats().retransmits - retx, 2);
    assert!(took >= Duration::from_millis(3 * 264), "three tries of 264 ms: {took:?}");
    assert!(took < Duration::from_secs(5), "within the bound: {took:?}");
    // The three MADs went out on the wire to a MAC nobody has: the segment dropped them.
    assert_eq!(wire.stats().unknown_dst - unknown_before, 3, "{:?}", wire.stats());
    assert!(m1.violations().is_empty(), "{:#?}", m1.violations());
    clean(&m1);
    clean(&m2);
}

#[test]
fn junk_datagrams_to_qp1_are_counted_and_the_cm_keeps_working() {
    use rdma_pmd::{QpNum, RoceAddr, Source, UdDest, GSI_QKEY};
    use rdma_pmd_mlx5::control::Service;
    let wire = Wire::new();
    let cfg = || ModelConfig { wire: Some(wire.clone()), ..ModelConfig::default() };
    let (m1, m2) = (Model::with_config(cfg()).unwrap(), Model::with_config(cfg()).unwrap());
    let (d1, d2) = (open(&m1), open(&m2));
    let (h1, h2) = (host(&m1, &d1), host(&m2, &d2));
    let (mut rx1, mut rx2) = (
        d1.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap(),
        d2.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap(),
    );
    let mut p1 = GsiPort::new(&d1, &mut rx1, 1).unwrap();
    let mut p2 = GsiPort::new(&d2, &mut rx2, 1).unwrap();
    p1.add_neighbour(h2.gid, h2.mac).unwrap();
    p2.add_neighbour(h1.gid, h1.mac).unwrap();
    let mut a: TCm = Cm::new(p1, CmConfig::new(0x0002_c903_00a1_0001, 55)).unwrap();
    let mut b: TCm = Cm::new(p2, CmConfig::new(0x0002_c903_00b2_0002, 66)).unwrap();
    b.listen(PORT).unwrap();
    // A UD QP on host A sends junk to B's QP1 with the GSI Q_Key: short, MAD-sized, long.
    let ucfg = QpConfig { service: Service::Ud, ..QpConfig::default() };
    let junk = d1.reg(4096, Access::LOCAL_WRITE).unwrap();
    junk.write(0, &pattern(5, 4096)).unwrap();
    let mut ud = d1.create_qp_with::<64, 16, 4>(&ucfg).unwrap();
    ud.ready_datagram(1, GSI_QKEY, 0).unwrap();
    let to = UdDest {
        addr: RoceAddr { dgid: h2.gid, dmac: h2.mac, hop_limit: 64, ..RoceAddr::default() },
        qpn: QpNum(1),
        qkey: GSI_QKEY,
    };
    for (i, len) in [10usize, 256, 1000, 1024].into_iter().enumerate() {
        ud.post_send_ud(i as u64, Source::sgl(&[junk.slice(0, len).unwrap()]), SIG, &to, None)
            .unwrap();
        assert!(wait(&mut ud, 1)[0].status.is_ok());
    }
    // The frames reach B's port when its engine drains the wire: poll until all four came
    // (bounded), and no event may come of them.
    let start = Instant::now();
    while b.stats().received < 4 && start.elapsed() < WAIT {
        assert_eq!(b.poll(clock(start), &mut [] as &mut [RcQp]), None);
    }
    for _ in 0..100 {
        assert_eq!(b.poll(clock(start), &mut [] as &mut [RcQp]), None);
    }
    let s = b.stats();
    assert_eq!((s.received, s.malformed, s.port_errors), (4, 4, 0), "{s:?}");
    clean(&m2);
    // Then a connection still works.
    let mut qa: RcQp = d1.create_qp(&QpConfig::default()).unwrap();
    let mut qb: RcQp = d2.create_qp(&QpConfig::default()).unwrap();
    connect(start, &mut a, &h1, &mut qa, &mut b, &h2, &mut qb, &[]);
}

/// Datagrams to `to` (QP1, the GSI Q_Key) from a UD QP of `dev`, one at a time, each MAD-sized
/// and carrying its number in its first four bytes.
fn send_mads(dev: &Dev, to: rdma_pmd::RoceAddr, numbers: std::ops::Range<u32>) {
    use rdma_pmd::{QpNum, Source, UdDest, GSI_QKEY};
    use rdma_pmd_mlx5::control::Service;
    let ucfg = QpConfig { service: Service::Ud, ..QpConfig::default() };
    let src = dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let mut ud = dev.create_qp_with::<64, 16, 4>(&ucfg).unwrap();
    ud.ready_datagram(1, GSI_QKEY, 0).unwrap();
    let to = UdDest { addr: to, qpn: QpNum(1), qkey: GSI_QKEY };
    for i in numbers {
        src.write(0, &i.to_be_bytes()).unwrap();
        let one = [src.slice(0, rdma_pmd::cm::mad::MAD_LEN).unwrap()];
        ud.post_send_ud(i as u64, Source::sgl(&one), SIG, &to, None).unwrap();
        assert!(wait(&mut ud, 1)[0].status.is_ok());
    }
}

/// A burst as large as the GSI receive ring (`GSI_RQ`, say 100 REQs at once) arriving while
/// the application does not poll is received whole afterwards, in order; one more datagram
/// finds no receive posted, the device drops it (UD has no RNR), and the port counts the ring
/// it found exhausted. Then the ring is whole again.
#[test]
fn a_burst_as_large_as_the_gsi_ring_is_received_whole_and_one_more_is_counted() {
    use rdma_pmd::cm::mad::{GRH_LEN, MAD_LEN};
    use rdma_pmd::cm::MadPort;
    use rdma_pmd::RoceAddr;
    let wire = Wire::new();
    let cfg = || ModelConfig { wire: Some(wire.clone()), ..ModelConfig::default() };
    let (m1, m2) = (Model::with_config(cfg()).unwrap(), Model::with_config(cfg()).unwrap());
    let (d1, d2) = (open(&m1), open(&m2));
    let h2 = host(&m2, &d2);
    let mut rx2 = d2.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap();
    let mut p2: Port = GsiPort::new(&d2, &mut rx2, 1).unwrap();
    let to = RoceAddr { dgid: h2.gid, dmac: h2.mac, hop_limit: 64, ..RoceAddr::default() };
    let burst = GSI_RQ as u32;
    send_mads(&d1, to, 0..burst + 1);
    // B's device takes them on its own; B does not poll.
    let start = Instant::now();
    let arrived = |m: &Model| {
        let c = m.counters();
        (c.datagrams_delivered, c.datagrams_dropped)
    };
    while {
        let (d, x) = arrived(&m2);
        d + x
    } < burst as u64 + 1
    {
        assert!(start.elapsed() < WAIT, "{:?}", arrived(&m2));
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(arrived(&m2), (burst as u64, 1), "the ring held the burst, not one more");
    let mut buf = [0u8; GRH_LEN + MAD_LEN];
    for i in 0..burst {
        assert_eq!(p2.recv_mad(&mut buf).unwrap(), Some(GRH_LEN + MAD_LEN), "datagram {i}");
        assert_eq!(buf[GRH_LEN..GRH_LEN + 4], i.to_be_bytes());
    }
    assert_eq!(p2.recv_mad(&mut buf).unwrap(), None);
    let s = p2.stats();
    assert_eq!((s.received, s.ring_exhausted, s.dropped, s.recv_errors), (burst as u64, 1, 0, 0));
    // Every slot was posted again: the next datagram is received, and the ring was not
    // found exhausted this time.
    send_mads(&d1, to, burst + 1..burst + 2);
    let start = Instant::now();
    let n = loop {
        if let Some(n) = p2.recv_mad(&mut buf).unwrap() {
            break n;
        }
        assert!(start.elapsed() < WAIT, "the datagram after the burst did not come");
        std::thread::yield_now();
    };
    assert_eq!(
        (n, &buf[GRH_LEN..GRH_LEN + 4]),
        (GRH_LEN + MAD_LEN, &(burst + 1).to_be_bytes()[..])
    );
    assert_eq!(p2.stats().ring_exhausted, 1);
    assert_eq!(p2.qp().rq_outstanding(), burst);
}

/// Neighbours by ARP instead of tables: two drivers on two models on one in-process hub, each
/// CM over an `ArpGsiPort` (its GSI QP and the driver's Ethernet port). A resolves B by ARP
/// and connects; B knows A's MAC from A's ARP request when A's REQ arrives; a SEND crosses.
#[test]
fn two_drivers_resolve_each_other_by_arp_and_connect_through_their_cms() {
    use rdma_pmd_hal::StdClock;
    use rdma_pmd_mlx5::cm::ArpGsiPort;
    use rdma_pmd_mlx5::EthConfig;
    use rdma_pmd_mlx5_model::roce::Hub;
    use rdma_pmd_mlx5_model::Gid as ModelGid;
    use std::net::Ipv4Addr;
    let hub = Hub::new();
    let on_hub = |mac: [u8; 6], ip: Ipv4Addr| {
        let gids = vec![ModelGid { gid: Gid::from_ipv4(ip.octets()).0, mac }];
        let cfg = ModelConfig { gids, ..ModelConfig::default() }.with_port(hub.port(Mac(mac)));
        Model::with_config(cfg).unwrap()
    };
    let (ip1, ip2) = (Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 2));
    let (m1, m2) = (on_hub([2, 0x4d, 0x41, 0, 0, 1], ip1), on_hub([2, 0x4d, 0x42, 0, 0, 2], ip2));
    let (d1, d2) = (open(&m1), open(&m2));
    let (h1, h2) = (host(&m1, &d1), host(&m2, &d2));
    let (mut rx1, mut rx2) = (
        d1.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap(),
        d2.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap(),
    );
    fn arp(dev: &Dev, ip: Ipv4Addr) -> rdma_pmd_mlx5::EthPort<'_, MemBar, D, C> {
        let mut eth = dev.eth_port(&EthConfig::default()).unwrap();
        eth.add_address(ip).unwrap();
        eth
    }
    let p1 =
        ArpGsiPort::new(Port::new(&d1, &mut rx1, 1).unwrap(), arp(&d1, ip1), StdClock::default());
    let p2 =
        ArpGsiPort::new(Port::new(&d2, &mut rx2, 1).unwrap(), arp(&d2, ip2), StdClock::default());
    let mut a: Cm<_, 4> = Cm::new(p1, CmConfig::new(0x0002_c903_00a1_0001, 77)).unwrap();
    let mut b: Cm<_, 4> = Cm::new(p2, CmConfig::new(0x0002_c903_00b2_0002, 88)).unwrap();
    b.listen(PORT).unwrap();
    // A's ARP request goes out; B's CM polls (its Ethernet port answers) until A has the reply.
    use rdma_pmd_hal::Clock;
    let clk = StdClock::default();
    let t0 = Instant::now();
    let mac = loop {
        let eth = a.port_mut().eth_mut();
        if let Some(m) = eth.poll_resolve(ip2, clk.now_ns()).unwrap() {
            break m;
        }
        eth.poll_eth(clk.now_ns()).unwrap();
        assert_eq!(b.poll(Micros(0), &mut [] as &mut [RcQp]), None);
        assert!(t0.elapsed() < WAIT, "no ARP reply from B");
    };
    assert_eq!(mac, h2.mac);
    let src = d1.reg(256, Access::LOCAL_WRITE).unwrap();
    src.write(0, &pattern(3, 256)).unwrap();
    let mut dst = d2.reg(256, Access::LOCAL_WRITE).unwrap();
    let start = Instant::now();
    let mut qa: RcQp = d1.create_qp(&QpConfig::default()).unwrap();
    let mut qb: RcQp = d2.create_qp(&QpConfig::default()).unwrap();
    let ida = a.connect(&mut qa, &params(&h1, &h2, PORT, b"by ARP"), clock(start)).unwrap();
    let t0 = Instant::now();
    let idb = loop {
        assert_eq!(a.poll(clock(start), std::slice::from_mut(&mut qa)), None);
        if let Some(e) = b.poll(clock(start), &mut [] as &mut [RcQp]) {
            assert_eq!(e.kind, EventKind::ConnectRequest, "{e:?}");
            break e.id;
        }
        assert!(t0.elapsed() < WAIT, "no REQ at B: {:?}", b.stats());
    };
    assert_eq!(b.stats().unresolved, 0, "B learned A from its ARP request");
    b.accept(idb, &mut qb, &AcceptParams::default(), clock(start)).unwrap();
    let (mut up_a, mut up_b) = (false, false);
    while !(up_a && up_b) {
        if let Some(e) = a.poll(clock(start), std::slice::from_mut(&mut qa)) {
            assert_eq!(e, Event { id: ida, kind: EventKind::Established });
            up_a = true;
        }
        if let Some(e) = b.poll(clock(start), std::slice::from_mut(&mut qb)) {
            assert_eq!(e, Event { id: idb, kind: EventKind::Established });
            up_b = true;
        }
        assert!(t0.elapsed() < WAIT, "not established");
    }
    let p = qb.post_recv(1, dst.dest().unwrap()).unwrap();
    qa.post_send(2, src.slice(0, 256).unwrap(), SIG).unwrap();
    assert!(wait(&mut qa, 1)[0].status.is_ok());
    assert_eq!(wait_recv(&mut qb).byte_len, 256);
    let buf = p.reclaim(&qb).unwrap();
    let mut got = vec![0u8; 256];
    buf.read(0, &mut got).unwrap();
    assert_eq!(got, pattern(3, 256));
    assert_eq!((a.port_mut().eth_errors, b.port_mut().eth_errors), (0, 0));
    clean(&m1);
    clean(&m2);
}
