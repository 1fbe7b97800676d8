//! The rig of the connection-manager tests on the `wire` tier's wire (`wire_cm.rs`): our CM
//! (`rdma_pmd::cm`) over the driver's QP1 on the model on our end of the wire, with the
//! driver's ARP for neighbours ([`ArpGsiPort`]), set up by [`cm_on_wire`], and the waits every
//! test makes on it, each bounded.
//!
//! Neighbours: by ARP both ways. The peer's rdma_cm resolves our MAC by ARP, which the
//! driver's Ethernet port answers (polled whenever the CM polls its port); an active side
//! resolves the peer's MAC by ARP before it connects, and a listener learns a requester's from
//! the ARP request that precedes its REQ.

use std::net::{IpAddr, SocketAddr};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use rdma_pmd::cm::mad::RejReason;
use rdma_pmd::cm::{
    AcceptParams, Cm, CmConfig, ConnId, ConnectParams, Event, EventKind, Micros, QpParams, QpSet,
};
use rdma_pmd::{Completion, DestBuf, Gid, Mac, Pending, RecvQueue, SendQueue, WcOpcode, WcStatus};
use rdma_pmd_hal::mem::MemBar;
use rdma_pmd_hal::StdClock;
use rdma_pmd_mlx5::cm::{ArpGsiPort, GsiPort, GSI_RQ, RX_SLOT};
use rdma_pmd_mlx5::control::Access;
use rdma_pmd_mlx5::{Qp, QpConfig, QpState};
use rdma_pmd_mlx5_model::peers::guest::{peer_mac, PATIENCE};
use rdma_pmd_mlx5_model::ModelConfig;

use super::wire::{driver, model_on_wire, our_eth_port, ours, theirs, C, D};
use super::{clean, Dev};

/// Our QP1 with the driver's ARP: the GSI port and the Ethernet port answering for us.
pub type Port<'r> = ArpGsiPort<'r, 'r, MemBar, D, C, StdClock>;
/// An RC QP of the test device.
pub type RcQp<'r> = Qp<'r, MemBar, D, C, 64, 16, 4>;

/// Our CA GUID (EUI-64 of [`super::wire::OUR_MAC`]).
pub const CA_GUID: u64 = 0x024d_4cff_fe35_0002;
/// A bound on any one exchange with the peer.
pub const EXCHANGE: Duration = Duration::from_secs(30);

/// How a test's side is set up: see [`cm_on_wire`].
pub struct CmSide {
    /// The capture's name: `<WIRE_PCAP_DIR>/cm_<name>.pcap`.
    pub name: &'static str,
    /// The model's configuration (its GIDs and port are the wire's).
    pub model: ModelConfig,
    /// The CM's configuration.
    pub cm: CmConfig,
    /// Resolve the peer's MAC by ARP before the test (an active side's [`Rig::mac`]).
    pub resolve: bool,
    /// Listen on this port.
    pub listen: Option<u16>,
}

impl CmSide {
    /// A side with our CA GUID and `seed`, neither resolving nor listening.
    pub fn new(name: &'static str, seed: u64) -> CmSide {
        let cm = CmConfig::new(CA_GUID, seed);
        CmSide { name, model: ModelConfig::default(), cm, resolve: false, listen: None }
    }

    /// An active side: the peer's MAC resolved first.
    pub fn active(name: &'static str, seed: u64) -> CmSide {
        CmSide { resolve: true, ..CmSide::new(name, seed) }
    }

    /// A passive side listening on `port`.
    pub fn listening(name: &'static str, seed: u64, port: u16) -> CmSide {
        CmSide { listen: Some(port), ..CmSide::new(name, seed) }
    }
}

/// A test's side while it runs: the driver, the CM over its QP1, the peer's MAC (an active
/// side's), and the origin of the CM's clock.
pub struct Rig<'r, const N: usize = 8, const E: usize = 16> {
    /// The driver on the model.
    pub dev: &'r Dev,
    /// Our CM.
    pub cm: Cm<Port<'r>, N, E>,
    /// The peer's MAC, resolved by ARP and checked against its interface (an active side).
    pub mac: Option<Mac>,
    /// When the CM's clock started.
    pub start: Instant,
}

/// Run `body` on a side set up as `side` says, with a CM of 8 connections; then check that
/// the model found nothing wrong ([`clean`]).
pub fn cm_on_wire(side: CmSide, body: impl FnOnce(&mut Rig<'_>)) {
    cm_on_wire_sized::<8, 16>(side, body)
}

/// [`cm_on_wire`] with a CM of `N` connections and `E` queued events. The model on our end of
/// the wire; the driver on it with our address; its QP1 ring; the port with the driver's ARP
/// (the peer's kernel forgets us first, [`our_eth_port`]); the peer's MAC, for an active side;
/// the CM, listening if asked.
pub fn cm_on_wire_sized<const N: usize, const E: usize>(
    side: CmSide,
    body: impl FnOnce(&mut Rig<'_, N, E>),
) {
    let model = model_on_wire(&format!("cm_{}", side.name), side.model);
    let dev = driver(&model);
    let mut rx = dev.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap();
    let gsi = GsiPort::new(&dev, &mut rx, 1).unwrap();
    let mut port = ArpGsiPort::new(gsi, our_eth_port(&dev), StdClock::default());
    let mac = side.resolve.then(|| {
        let mac = port.resolve_ipv4(theirs()).expect("the peer's MAC by ARP");
        assert_eq!(mac, peer_mac("wp"));
        mac
    });
    let mut cm = Cm::new(port, side.cm).unwrap();
    if let Some(p) = side.listen {
        cm.listen(p).unwrap();
    }
    let mut rig = Rig { dev: &dev, cm, mac, start: Instant::now() };
    body(&mut rig);
    clean(&model);
}

impl<'r, const N: usize, const E: usize> Rig<'r, N, E> {
    /// The CM's clock.
    pub fn now(&self) -> Micros {
        Micros(self.start.elapsed().as_micros() as u64)
    }

    /// Poll the CM (lending it `qps`) until an event comes, failing after [`EXCHANGE`].
    pub fn pump(&mut self, qps: &mut (impl QpSet + ?Sized)) -> Event {
        let t0 = Instant::now();
        loop {
            if let Some(e) = self.cm.poll(self.now(), qps) {
                return e;
            }
            assert!(t0.elapsed() < EXCHANGE, "no CM event; {:?}", self.cm.stats());
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Poll the CM with no QP to lend.
    pub fn poll(&mut self) -> Option<Event> {
        let now = self.now();
        self.cm.poll(now, &mut [] as &mut [RcQp])
    }

    /// Connect a fresh QP to the peer's `port`, retrying while the peer program has not
    /// started listening (its kernel rejects with "invalid service ID" until then).
    pub fn connect(&mut self, port: u16) -> (ConnId, RcQp<'r>) {
        let remote = SocketAddr::new(IpAddr::V4(theirs()), port);
        let mac = self.mac.expect("an active side resolved the peer");
        let t0 = Instant::now();
        loop {
            let mut qp: RcQp = self.dev.create_qp(&QpConfig::default()).unwrap();
            let id = self.cm.connect(&mut qp, &connect_params(remote, mac, &[]), self.now());
            let id = id.unwrap();
            let e = self.pump(std::slice::from_mut(&mut qp));
            assert_eq!(e.id, id);
            match e.kind {
                EventKind::Established => {
                    assert_eq!(qp.state(), QpState::Rts);
                    return (id, qp);
                }
                EventKind::Rejected { reason: RejReason::InvalidServiceId }
                    if t0.elapsed() < PATIENCE =>
                {
                    std::thread::sleep(Duration::from_millis(200));
                }
                k => panic!("connect to {remote}: {k:?}; {:?}", self.cm.stats()),
            }
        }
    }

    /// The next `ConnectRequest` on a listening CM, checked: from the peer, to us, on `port`.
    pub fn await_request(&mut self, port: u16) -> ConnId {
        let t0 = Instant::now();
        let e = loop {
            if let Some(e) = self.poll() {
                break e;
            }
            assert!(t0.elapsed() < PATIENCE, "no REQ; {:?}", self.cm.stats());
            std::thread::sleep(Duration::from_micros(200));
        };
        assert_eq!(e.kind, EventKind::ConnectRequest, "{e:?}");
        let r = self.cm.get_request(e.id).unwrap();
        assert_eq!(r.peer.ip(), IpAddr::V4(theirs()), "{r:?}");
        assert_eq!(r.local, IpAddr::V4(ours()), "{r:?}");
        assert_eq!(r.port, port);
        assert_eq!(r.peer_gid, Gid::from_ipv4(theirs().octets()));
        e.id
    }

    /// Accept `id` on a fresh QP (`pd` in the REP), post `recv` on it before the peer can
    /// send, and wait until the connection is established.
    pub fn accept<'q>(
        &mut self,
        id: ConnId,
        pd: &[u8],
        recv: DestBuf<'q>,
    ) -> (RcQp<'q>, Pending<DestBuf<'q>>)
    where
        'r: 'q,
    {
        let dev: &'q Dev = self.dev;
        let mut qp: RcQp = dev.create_qp(&QpConfig::default()).unwrap();
        let params = AcceptParams { private_data: pd, ..AcceptParams::default() };
        self.cm.accept(id, &mut qp, &params, self.now()).unwrap();
        let r = qp.post_recv(0, recv).map_err(|r| r.error).unwrap();
        let e = self.pump(std::slice::from_mut(&mut qp));
        assert_eq!(e, Event { id, kind: EventKind::Established });
        (qp, r)
    }

    /// Every event until `n` of kind `kind` came (one per connection), lending `qps`.
    pub fn await_each(&mut self, qps: &mut [RcQp<'_>], n: usize, kind: EventKind) {
        let mut seen = Vec::new();
        while seen.len() < n {
            let e = self.pump(qps);
            assert_eq!(e.kind, kind, "{e:?}");
            assert!(!seen.contains(&e.id), "{e:?} twice");
            seen.push(e.id);
        }
    }

    /// Our last SEND before the peer disconnects: its completion, polling the CM meanwhile.
    /// rxe hands a receive to its program before it sends the ACK, and under emulation the
    /// program's disconnect (its QP to ERR) can overtake that ACK: the SEND was delivered but
    /// is never acknowledged, and completes in error once its retries ran out. An error is
    /// accepted only together with the peer's DREQ: the QP is lent to the CM, which moves it
    /// to ERR on the DREQ, and the device flushes the SEND still on the wire (WR_FLUSH_ERR),
    /// or its retries ran out first (RETRY_EXC_ERR). Returns whether the connection is down
    /// (its `Disconnected` event taken); the QP is in ERR then.
    pub fn last_send(&mut self, qp: &mut RcQp<'_>, id: ConnId, wr_id: u64) -> bool {
        let mut gone = false;
        let mut out = [Completion::default(); 1];
        let t0 = Instant::now();
        while qp.poll(&mut out).expect("poll") == 0 {
            match self.cm.poll(self.now(), std::slice::from_mut(qp)) {
                None => {}
                Some(Event { id: i, kind: EventKind::Disconnected }) if i == id => gone = true,
                Some(Event { id: i, kind: EventKind::TimewaitExit }) if i == id && gone => {}
                Some(e) => panic!("{e:?} while our last SEND was outstanding"),
            }
            assert!(t0.elapsed() < EXCHANGE, "no completion for {wr_id}");
        }
        let c = out[0];
        assert_eq!(c.wr_id, wr_id, "{c:?}");
        if c.status == WcStatus::Success {
            assert_eq!(c.opcode, WcOpcode::Send, "{c:?}");
        } else {
            if !gone {
                let e = self.pump(std::slice::from_mut(qp));
                assert_eq!(e, Event { id, kind: EventKind::Disconnected }, "{c:?} without a DREQ");
                gone = true;
            }
            assert!(matches!(c.status, WcStatus::WrFlushErr | WcStatus::RetryExcErr), "{c:?}");
            eprintln!(
                "the peer disconnected before it acknowledged our last SEND ({:?})",
                c.status
            );
        }
        if gone {
            assert_eq!(qp.state(), QpState::Error, "the CM moves a lent QP to ERR on a DREQ");
        }
        gone
    }

    /// Our CM took no malformed datagram, failed no send, and met no requester it could not
    /// resolve.
    pub fn no_cm_errors(&self) {
        let s = self.cm.stats();
        assert_eq!((s.malformed, s.send_errors, s.unresolved), (0, 0, 0), "{s:?}");
    }
}

/// Connecting from our address (port 40000) to `remote` at `remote_mac`.
pub fn connect_params(remote: SocketAddr, remote_mac: Mac, pd: &[u8]) -> ConnectParams<'_> {
    ConnectParams {
        local: SocketAddr::new(IpAddr::V4(ours()), 40000),
        remote,
        local_gid: Gid::from_ipv4(ours().octets()),
        remote_gid: Gid::from_ipv4(theirs().octets()),
        remote_mac,
        private_data: pd,
        qp: QpParams::default(),
    }
}

/// Wait for the completion of `wr_id`, a successful `op` (a READ of `len` bytes), failing
/// after [`EXCHANGE`].
pub fn wait_send<'r, S: SendQueue<'r>>(q: &mut S, wr_id: u64, op: WcOpcode, len: usize) {
    let mut out = [Completion::default(); 1];
    let t0 = Instant::now();
    while q.poll(&mut out).expect("poll") == 0 {
        assert!(t0.elapsed() < EXCHANGE, "no completion for {wr_id}");
    }
    let c = out[0];
    assert_eq!((c.wr_id, c.status, c.opcode), (wr_id, WcStatus::Success, op), "{c:?}");
    if op == WcOpcode::RdmaRead {
        assert_eq!(c.byte_len as usize, len, "{c:?}");
    }
}

/// The next receive completion, failing after [`EXCHANGE`].
pub fn wait_recv<'r, R: RecvQueue<'r>>(q: &mut R) -> Completion {
    super::wire::recv_one(q, EXCHANGE, || {})
}

/// The next receive completion, checked: a successful receive of `len` bytes.
pub fn recv_ok<'r, R: RecvQueue<'r>>(q: &mut R, len: u32) -> Completion {
    let c = wait_recv(q);
    assert_eq!((c.status, c.opcode, c.byte_len), (WcStatus::Success, WcOpcode::Recv, len), "{c:?}");
    c
}

/// Wait for a peer program for up to [`EXCHANGE`] (killed then); its success and output.
pub fn finish(child: Child, what: &str) -> (bool, String) {
    super::wire::await_exit(child, what, EXCHANGE, || {})
}

/// The guest's kernel log (rdma_cm and rxe say why they refuse).
pub fn dmesg_tail() {
    if let Ok(o) = Command::new("dmesg").output() {
        let t = String::from_utf8_lossy(&o.stdout).into_owned();
        let lines: Vec<&str> = t.lines().collect();
        eprintln!("dmesg:\n{}", lines[lines.len().saturating_sub(20)..].join("\n"));
    }
}
