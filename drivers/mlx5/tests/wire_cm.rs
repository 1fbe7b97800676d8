//! The connection manager (`rdma_pmd::cm` over the mlx5 driver's QP1, `GsiPort`) against the
//! Linux kernel's rdma_cm on a real Ethernet wire: the device model's port is an `AF_PACKET`
//! socket on our end of a veth pair, rdma_rxe is on the other, and the peers are unmodified
//! librdmacm programs (`rping`, `rdma_server`/`rdma_client`, `ucmatose`) and the project's C
//! `rdma_post_writev` program (`examples/c/cm_writev.c`). Every byte is checked on our side, and
//! each peer checks its own (`rping -V`, exit codes, what it prints). Run by xtask's `wire`
//! tier (see `xtask/src/tiers/wire.rs`); ignored elsewhere. Each test saves a pcap of our end.
//!
//! Neighbours: by ARP both ways. The peer's rdma_cm resolves our MAC by ARP, which the
//! driver's Ethernet port answers (`Mlx5::eth_port`, polled whenever the CM polls its port:
//! `ArpGsiPort`); our CM resolves the peer's MAC by ARP before it connects, and learns a
//! requester's from the ARP request that precedes its REQ ([`arp_port`], [`resolve_peer`]).

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use rdma_pmd::cm::mad::RejReason;
use rdma_pmd::cm::{
    AcceptParams, Cm, CmConfig, ConnId, ConnectParams, Event, EventKind, Micros, NoQps, QpParams,
    QpSet,
};
use rdma_pmd::{
    Completion, DestBuf, Errno, Gid, Mac, Post, RecvQueue, SendFlags, SendQueue, WcOpcode, WcStatus,
};
use rdma_pmd_hal::mem::{HeapDma, MemBar};
use rdma_pmd_hal::StdClock;
use rdma_pmd_mlx5::cm::{ArpGsiPort, GsiPort, GSI_RQ, RX_SLOT};
use rdma_pmd_mlx5::control::fw::FwControl;
use rdma_pmd_mlx5::control::Access;
use rdma_pmd_mlx5::{EthConfig, Qp, QpConfig, QpState, Region, SharedDma};
use rdma_pmd_mlx5_model::peers::guest::{env, ip, netns, peer_mac, spawn_in_peer, PATIENCE};
use rdma_pmd_mlx5_model::roce::port::PacketSocket;
use rdma_pmd_mlx5_model::roce::PcapTap;
use rdma_pmd_mlx5_model::{Gid as ModelGid, Model, ModelConfig};

type D = SharedDma<Arc<HeapDma>>;
type C = FwControl<'static, 'static>;
type Port<'r> = ArpGsiPort<'r, 'r, MemBar, D, C, StdClock>;
type TCm<'r> = Cm<Port<'r>, 8>;
type RcQp<'r> = Qp<'r, MemBar, D, C, 64, 16, 4>;

const SIG: SendFlags = SendFlags::SIGNALED;
/// The model's MAC on the wire (locally administered; the tier's value).
const OUR_MAC: Mac = Mac([0x02, 0x4d, 0x4c, 0x35, 0x00, 0x02]);
/// Our CA GUID (EUI-64 of the MAC).
const CA_GUID: u64 = 0x024d_4cff_fe35_0002;
/// rping's port.
const RPING_PORT: u16 = 7174;
/// rdma_server's and rdma_client's port.
const RDMA_SERVER_PORT: u16 = 7471;
/// A bound on any one exchange with the peer.
const WAIT: Duration = Duration::from_secs(30);
const ALL: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE).union(Access::REMOTE_READ);

fn ours() -> Ipv4Addr {
    ip("WIRE_ADDR")
}

fn theirs() -> Ipv4Addr {
    ip("WIRE_PEER")
}

/// Our side: the model on our end of the wire (its frames recorded to
/// `<WIRE_PCAP_DIR>/<name>.pcap`), the driver on it with our address as GID 0.
fn model_on_wire(name: &str) -> Model {
    model_on_wire_with(name, ModelConfig::default())
}

/// [`model_on_wire`] with `base` for everything but the GIDs and the port.
fn model_on_wire_with(name: &str, base: ModelConfig) -> Model {
    let sock = PacketSocket::open(&env("WIRE_IF"), None).expect("AF_PACKET socket");
    let dir = env("WIRE_PCAP_DIR");
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = PcapTap::<PacketSocket>::shared(format!("{dir}/cm_{name}.pcap")).unwrap();
    let gids = vec![ModelGid { gid: Gid::from_ipv4(ours().octets()).0, mac: OUR_MAC.0 }];
    Model::with_config(ModelConfig { gids, ..base }.with_port(PcapTap::new(sock, pcap)))
        .expect("model")
}

fn driver(model: &Model) -> Dev {
    let dev = open(model);
    dev.set_gid(0, IpAddr::V4(ours())).expect("SET_ROCE_ADDRESS");
    assert_eq!(dev.mac().expect("the port's MAC"), OUR_MAC);
    dev
}

/// Our QP1 with the driver's ARP for neighbours: the GSI port and the Ethernet port answering
/// for our address. The peer's kernel forgets any neighbour entry it has for us, so that it
/// resolves our MAC by ARP again (earlier tests of the tier may have left a permanent one).
fn arp_port<'r, 'd: 'r>(dev: &'d Dev, rx: &'r mut Region<'d, MemBar, D, C>) -> Port<'r> {
    let _ = Command::new("ip")
        .args(["-n", &netns(), "neigh", "del", &ours().to_string(), "dev", "wp"])
        .stderr(std::process::Stdio::null())
        .status();
    let gsi = GsiPort::new(dev, rx, 1).unwrap();
    let mut eth = dev.eth_port(&EthConfig::default()).expect("the Ethernet port");
    eth.add_address(ours()).unwrap();
    ArpGsiPort::new(gsi, eth, StdClock::default())
}

/// The peer's MAC by ARP (the active side resolves before it connects), checked against its
/// interface.
fn resolve_peer(port: &mut Port<'_>) -> Mac {
    let mac = port.resolve_ipv4(theirs()).expect("the peer's MAC by ARP");
    assert_eq!(mac, peer_mac("wp"));
    mac
}

fn clock(start: Instant) -> Micros {
    Micros(start.elapsed().as_micros() as u64)
}

/// Poll the CM (lending it `qps`) until an event comes, failing after [`WAIT`].
fn pump(start: Instant, cm: &mut TCm<'_>, qps: &mut (impl QpSet + ?Sized)) -> Event {
    let t0 = Instant::now();
    loop {
        if let Some(e) = cm.poll(clock(start), qps) {
            return e;
        }
        assert!(t0.elapsed() < WAIT, "no CM event; {:?}", cm.stats());
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn connect_params(remote: SocketAddr, remote_mac: Mac, pd: &[u8]) -> ConnectParams<'_> {
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

/// Connect a fresh QP to the peer's `port`, retrying while the peer program has not started
/// listening (its kernel rejects with "invalid service ID" until then).
fn connect_retrying<'d>(
    dev: &'d Dev,
    start: Instant,
    cm: &mut TCm<'_>,
    port: u16,
    mac: Mac,
) -> (ConnId, RcQp<'d>) {
    let remote = SocketAddr::new(IpAddr::V4(theirs()), port);
    let t0 = Instant::now();
    loop {
        let mut qp: RcQp = dev.create_qp(&QpConfig::default()).unwrap();
        let id = cm.connect(&mut qp, &connect_params(remote, mac, &[]), clock(start)).unwrap();
        let e = pump(start, cm, std::slice::from_mut(&mut qp));
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
            k => panic!("connect to {remote}: {k:?}; {:?}", cm.stats()),
        }
    }
}

/// The next `ConnectRequest` on a listening CM, checked: from the peer, to us, on `port`.
fn await_request(start: Instant, cm: &mut TCm<'_>, port: u16) -> ConnId {
    let t0 = Instant::now();
    let e = loop {
        if let Some(e) = cm.poll(clock(start), &mut [] as &mut [RcQp]) {
            break e;
        }
        assert!(t0.elapsed() < PATIENCE, "no REQ; {:?}", cm.stats());
        std::thread::sleep(Duration::from_micros(200));
    };
    assert_eq!(e.kind, EventKind::ConnectRequest, "{e:?}");
    let r = cm.get_request(e.id).unwrap();
    assert_eq!(r.peer.ip(), IpAddr::V4(theirs()), "{r:?}");
    assert_eq!(r.local, IpAddr::V4(ours()), "{r:?}");
    assert_eq!(r.port, port);
    assert_eq!(r.peer_gid, Gid::from_ipv4(theirs().octets()));
    e.id
}

fn wait_send<'r, S: SendQueue<'r>>(q: &mut S, wr_id: u64, op: WcOpcode, len: usize) {
    let mut out = [Completion::default(); 1];
    let t0 = Instant::now();
    while q.poll(&mut out).expect("poll") == 0 {
        assert!(t0.elapsed() < WAIT, "no completion for {wr_id}");
    }
    let c = out[0];
    assert_eq!((c.wr_id, c.status, c.opcode), (wr_id, WcStatus::Success, op), "{c:?}");
    if op == WcOpcode::RdmaRead {
        assert_eq!(c.byte_len as usize, len, "{c:?}");
    }
}

fn wait_recv<'r, R: RecvQueue<'r>>(q: &mut R) -> Completion {
    let mut out = [Completion::default(); 1];
    let t0 = Instant::now();
    while q.poll_recv(&mut out).expect("poll_recv") == 0 {
        assert!(t0.elapsed() < WAIT, "no receive completion");
    }
    out[0]
}

/// Our last SEND before the peer disconnects: its completion, polling the CM meanwhile. rxe
/// hands a receive to its program before it sends the ACK, and under emulation the program's
/// disconnect (its QP to ERR) can overtake that ACK: the SEND was delivered but is never
/// acknowledged, and completes in error once its retries ran out. An error is accepted only
/// together with the peer's DREQ: the QP is lent to the CM, which moves it to ERR on the DREQ,
/// and the device flushes the SEND still on the wire (WR_FLUSH_ERR), or its retries ran out
/// first (RETRY_EXC_ERR). Returns whether the connection is down (its `Disconnected` event
/// taken); the QP is in ERR then.
fn last_send(start: Instant, cm: &mut TCm<'_>, qp: &mut RcQp<'_>, id: ConnId, wr_id: u64) -> bool {
    let mut gone = false;
    let mut out = [Completion::default(); 1];
    let t0 = Instant::now();
    while qp.poll(&mut out).expect("poll") == 0 {
        match cm.poll(clock(start), std::slice::from_mut(qp)) {
            None => {}
            Some(Event { id: i, kind: EventKind::Disconnected }) if i == id => gone = true,
            Some(Event { id: i, kind: EventKind::TimewaitExit }) if i == id && gone => {}
            Some(e) => panic!("{e:?} while our last SEND was outstanding"),
        }
        assert!(t0.elapsed() < WAIT, "no completion for {wr_id}");
    }
    let c = out[0];
    assert_eq!(c.wr_id, wr_id, "{c:?}");
    if c.status == WcStatus::Success {
        assert_eq!(c.opcode, WcOpcode::Send, "{c:?}");
    } else {
        if !gone {
            let e = pump(start, cm, std::slice::from_mut(qp));
            assert_eq!(e, Event { id, kind: EventKind::Disconnected }, "{c:?} without a DREQ");
            gone = true;
        }
        assert!(matches!(c.status, WcStatus::WrFlushErr | WcStatus::RetryExcErr), "{c:?}");
        eprintln!("the peer disconnected before it acknowledged our last SEND ({:?})", c.status);
    }
    if gone {
        assert_eq!(qp.state(), QpState::Error, "the CM moves a lent QP to ERR on a DREQ");
    }
    gone
}

fn contents(d: &DestBuf<'_>, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    d.read(0, &mut v).unwrap();
    v
}

/// Wait for a peer program with a bound; its status and output.
fn finish(mut child: Child, what: &str) -> (bool, String) {
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > WAIT {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("wait for the peer");
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("{what}: {}\n{text}", out.status);
    (out.status.success(), text)
}

/// The kernel log of the guest (rdma_cm and rxe say why they refuse).
fn dmesg_tail() {
    if let Ok(o) = Command::new("dmesg").output() {
        let t = String::from_utf8_lossy(&o.stdout).into_owned();
        let lines: Vec<&str> = t.lines().collect();
        eprintln!("dmesg:\n{}", lines[lines.len().saturating_sub(20)..].join("\n"));
    }
}

// ---- rping ----

/// The bytes of rping's ping `n` of `size` bytes (`rping_test_client`): "rdma-ping-<n>: ",
/// then letters from 'A' + n mod 58 cycling through 'A'..='z', and a NUL last.
fn rping_msg(n: u32, size: usize) -> Vec<u8> {
    let mut v = format!("rdma-ping-{n}: ").into_bytes();
    v.truncate(size - 1);
    let mut c = 65 + (n % 58) as u8;
    while v.len() < size {
        v.push(c);
        c = if c >= 122 { 65 } else { c + 1 };
    }
    v[size - 1] = 0;
    v
}

/// rping's exit: as [`finish`], except that the race rdma-core fixed in rping in 2025
/// (linux-rdma/rdma-core#1622, "rping: Fix spurious failure return codes": its CM thread
/// calls `rdma_get_cm_event` again after the last event, on a channel the main thread is
/// destroying, and exits with a failure) counts as the success it was. The guest's rping
/// predates the fix.
fn rping_finish(child: Child, what: &str) -> (bool, String) {
    let (ok, out) = finish(child, what);
    let raced = out.lines().any(|l| l == "rdma_get_cm_event: Bad file descriptor");
    if !ok && raced {
        eprintln!("{what}: its teardown race (rdma-core#1622); the test had finished");
        return (true, out);
    }
    (ok, out)
}

/// rping's advertisement: {be64 addr, be32 rkey, be32 size}.
fn rping_adv(addr: u64, rkey: u32, size: u32) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..8].copy_from_slice(&addr.to_be_bytes());
    a[8..12].copy_from_slice(&rkey.to_be_bytes());
    a[12..].copy_from_slice(&size.to_be_bytes());
    a
}

fn parse_adv(b: &[u8]) -> (u64, u32, u32) {
    (
        u64::from_be_bytes(b[..8].try_into().unwrap()),
        u32::from_be_bytes(b[8..12].try_into().unwrap()),
        u32::from_be_bytes(b[12..16].try_into().unwrap()),
    )
}

const RPING_COUNT: u32 = 20;
const RPING_SIZE: usize = 3000;

/// `rping -s` on rxe, our CM as rping's client: per ping, SEND the start buffer's address
/// (the server READs it), wait for the go-ahead, SEND the sink's (the server WRITEs the data
/// back), wait, compare; then disconnect from our side. The server prints what it read
/// (`-v`): every ping must be there.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_cm_client_pings_rping_server_and_disconnects() {
    let model = model_on_wire("rping_server");
    let dev = driver(&model);
    let mut rx = dev.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap();
    let mut port = arp_port(&dev, &mut rx);
    let mac = resolve_peer(&mut port);
    let (count, size) = (RPING_COUNT.to_string(), RPING_SIZE.to_string());
    let server = spawn_in_peer(&[
        "rping",
        "-s",
        "-a",
        &theirs().to_string(),
        "-v",
        "-V",
        "-C",
        &count,
        "-S",
        &size,
    ]);
    let mut cm: TCm = Cm::new(port, CmConfig::new(CA_GUID, 1)).unwrap();
    let start_buf = dev.reg(RPING_SIZE, ALL).unwrap();
    let sink = dev.reg(RPING_SIZE, ALL).unwrap();
    let send = dev.reg(16, Access::LOCAL_WRITE).unwrap();
    let mut recv = dev.reg(16, Access::LOCAL_WRITE).unwrap();
    let start = Instant::now();
    let (id, mut qp) = connect_retrying(&dev, start, &mut cm, RPING_PORT, mac);
    let mut r = qp.post_recv(0, recv.dest().unwrap()).map_err(|r| r.error).unwrap();
    for n in 0..RPING_COUNT {
        let msg = rping_msg(n, RPING_SIZE);
        start_buf.write(0, &msg).unwrap();
        sink.write(0, &vec![0u8; RPING_SIZE]).unwrap();
        for (k, region) in [&start_buf, &sink].into_iter().enumerate() {
            let at = region.remote(0);
            send.write(0, &rping_adv(at.addr, at.rkey.0, RPING_SIZE as u32)).unwrap();
            qp.post_send(1, send.slice(0, 16).unwrap(), SIG).unwrap();
            wait_send(&mut qp, 1, WcOpcode::Send, 16);
            let c = wait_recv(&mut qp);
            assert_eq!((c.status, c.opcode, c.byte_len), (WcStatus::Success, WcOpcode::Recv, 16));
            let d = r.reclaim(&qp).unwrap_or_else(|_| panic!("ping {n}: receive handed back"));
            // The server's go-ahead is its zeroed send buffer.
            assert_eq!(contents(&d, 16), [0u8; 16], "ping {n} go-ahead {k}");
            r = qp.post_recv(0, d).map_err(|r| r.error).unwrap();
        }
        let mut got = vec![0u8; RPING_SIZE];
        sink.read(0, &mut got).unwrap();
        assert!(got == msg, "ping {n}: the server wrote back what it read");
    }
    // rping -s never disconnects first: nothing may have come from its CM meanwhile.
    assert_eq!(cm.poll(clock(start), std::slice::from_mut(&mut qp)), None, "{:?}", cm.stats());
    cm.disconnect(id, &mut qp, clock(start)).unwrap();
    let e = pump(start, &mut cm, std::slice::from_mut(&mut qp));
    assert_eq!(e, Event { id, kind: EventKind::Disconnected });
    let (ok, out) = rping_finish(server, "rping -s");
    if !ok {
        dmesg_tail();
    }
    assert!(ok, "rping -s failed");
    let seen = out.lines().filter(|l| l.starts_with("server ping data: rdma-ping-")).count();
    assert_eq!(seen, RPING_COUNT as usize, "the server printed every ping");
    let s = cm.stats();
    assert_eq!((s.malformed, s.send_errors, s.unresolved), (0, 0, 0), "{s:?}");
    drop(r);
    clean(&model);
}

/// `rping -c -V` on rxe against our listener on 7174, our side as rping's server: READ the
/// client's start buffer, check it is ping n, SEND the go-ahead, WRITE it into the client's
/// sink, SEND the go-ahead; the client compares every byte (`-V`) and disconnects.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_rping_client_pings_cm_listener_and_disconnects() {
    rping_server_side("rping_client", false);
}

/// As above, but we leave the request unanswered until the client's kernel sends its REQ
/// again (after 2 × 2^(16−8) + 2^(20−8) ms): our CM answers the repeat with an MRA (service
/// timeout 24), the kernel then waits without sending more, and the connection accepted
/// seconds later works.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_rping_client_waits_on_our_mra_while_we_delay_accepting() {
    rping_server_side("rping_client_mra", true);
}

fn rping_server_side(name: &str, delay_accept: bool) {
    let model = model_on_wire(name);
    let dev = driver(&model);
    let mut rx = dev.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap();
    let port = arp_port(&dev, &mut rx);
    let mut cm: TCm = Cm::new(port, CmConfig::new(CA_GUID, 2)).unwrap();
    cm.listen(RPING_PORT).unwrap();
    let mut rd = dev.reg(RPING_SIZE, Access::LOCAL_WRITE).unwrap();
    let wr = dev.reg(RPING_SIZE, Access::LOCAL_WRITE).unwrap();
    let send = dev.reg(16, Access::LOCAL_WRITE).unwrap();
    send.write(0, &[0u8; 16]).unwrap();
    let mut recv = dev.reg(16, Access::LOCAL_WRITE).unwrap();
    let (count, size) = (RPING_COUNT.to_string(), RPING_SIZE.to_string());
    let client = spawn_in_peer(&[
        "rping",
        "-c",
        "-a",
        &ours().to_string(),
        "-v",
        "-V",
        "-C",
        &count,
        "-S",
        &size,
    ]);
    let start = Instant::now();
    let id = await_request(start, &mut cm, RPING_PORT);
    if delay_accept {
        let t0 = Instant::now();
        while cm.stats().duplicates == 0 {
            assert_eq!(cm.poll(clock(start), &mut [] as &mut [RcQp]), None);
            assert!(t0.elapsed() < PATIENCE, "no repeated REQ; {:?}", cm.stats());
            std::thread::sleep(Duration::from_millis(1));
        }
        let (first_repeat, sent) = (t0.elapsed(), cm.stats().sent);
        assert_eq!(sent, 1, "one MRA for the repeated REQ: {:?}", cm.stats());
        // Longer than the kernel's REQ timeout again: the MRA holds it.
        let t1 = Instant::now();
        while t1.elapsed() < Duration::from_secs(6) {
            assert_eq!(cm.poll(clock(start), &mut [] as &mut [RcQp]), None);
            std::thread::sleep(Duration::from_millis(1));
        }
        let s = cm.stats();
        assert_eq!((s.duplicates, s.sent), (1, 1), "the kernel waited on the MRA: {s:?}");
        eprintln!("repeated REQ after {first_repeat:?}; accepting {:?} later", t1.elapsed());
    }
    let mut qp: RcQp = dev.create_qp(&QpConfig::default()).unwrap();
    cm.accept(id, &mut qp, &AcceptParams::default(), clock(start)).unwrap();
    let mut r = qp.post_recv(0, recv.dest().unwrap()).map_err(|r| r.error).unwrap();
    let e = pump(start, &mut cm, std::slice::from_mut(&mut qp));
    assert_eq!(e, Event { id, kind: EventKind::Established });
    let mut dest = Some(rd.dest().unwrap());
    for n in 0..RPING_COUNT {
        let msg = rping_msg(n, RPING_SIZE);
        for k in 0..2 {
            let c = wait_recv(&mut qp);
            assert_eq!((c.status, c.opcode, c.byte_len), (WcStatus::Success, WcOpcode::Recv, 16));
            let d = r.reclaim(&qp).unwrap_or_else(|_| panic!("ping {n}: receive handed back"));
            let (addr, rkey, len) = parse_adv(&contents(&d, 16));
            assert_eq!(len as usize, RPING_SIZE, "ping {n} advertisement {k}");
            r = qp.post_recv(0, d).map_err(|r| r.error).unwrap();
            let remote = rdma_pmd::RemoteBuf::new(addr, rdma_pmd::Rkey(rkey));
            if k == 0 {
                let p = qp
                    .post_read(2, dest.take().unwrap(), SIG, remote)
                    .map_err(|r| r.error)
                    .unwrap();
                wait_send(&mut qp, 2, WcOpcode::RdmaRead, RPING_SIZE);
                let back = p.reclaim(&qp).unwrap_or_else(|_| panic!("READ {n} handed back"));
                assert!(contents(&back, RPING_SIZE) == msg, "ping {n}: the client's bytes");
                wr.write(0, &contents(&back, RPING_SIZE)).unwrap();
                dest = Some(back);
            } else {
                qp.post_write(3, wr.slice(0, RPING_SIZE).unwrap(), SIG, remote).unwrap();
                wait_send(&mut qp, 3, WcOpcode::RdmaWrite, RPING_SIZE);
            }
            qp.post_send(4, send.slice(0, 16).unwrap(), SIG).unwrap();
            if (n, k) != (RPING_COUNT - 1, 1) {
                wait_send(&mut qp, 4, WcOpcode::Send, 16);
            }
        }
    }
    // The last go-ahead ends the client's last ping; its DREQ follows.
    if !last_send(start, &mut cm, &mut qp, id, 4) {
        let e = pump(start, &mut cm, std::slice::from_mut(&mut qp));
        assert_eq!(e, Event { id, kind: EventKind::Disconnected }, "the client's DREQ");
    }
    let (ok, out) = rping_finish(client, "rping -c");
    if !ok {
        dmesg_tail();
    }
    assert!(ok, "rping -c failed (it compares every byte)");
    let seen = out.lines().filter(|l| l.starts_with("ping data: rdma-ping-")).count();
    assert_eq!(seen, RPING_COUNT as usize, "the client printed every ping");
    let s = cm.stats();
    assert_eq!((s.malformed, s.send_errors, s.unresolved), (0, 0, 0), "{s:?}");
    drop(r);
    clean(&model);
}

// ---- rdma_server and rdma_client ----

/// `rdma_server` on rxe, our CM as `rdma_client`: SEND 16 bytes, receive its 16 (zeros: its
/// static buffer); the server disconnects once its SEND completed, and we see it.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_cm_client_talks_to_rdma_server_which_disconnects() {
    let model = model_on_wire("rdma_server");
    let dev = driver(&model);
    let mut rx = dev.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap();
    let mut port = arp_port(&dev, &mut rx);
    let mac = resolve_peer(&mut port);
    let server = spawn_in_peer(&["rdma_server", "-s", &theirs().to_string()]);
    let mut cm: TCm = Cm::new(port, CmConfig::new(CA_GUID, 5)).unwrap();
    let send = dev.reg(16, Access::LOCAL_WRITE).unwrap();
    send.write(0, b"from the mlx5 CM").unwrap();
    let mut recv = dev.reg(16, Access::LOCAL_WRITE).unwrap();
    recv.write(0, &[0xa5; 16]).unwrap();
    let start = Instant::now();
    let (id, mut qp) = connect_retrying(&dev, start, &mut cm, RDMA_SERVER_PORT, mac);
    let r = qp.post_recv(0, recv.dest().unwrap()).map_err(|r| r.error).unwrap();
    qp.post_send(1, send.slice(0, 16).unwrap(), SIG).unwrap();
    wait_send(&mut qp, 1, WcOpcode::Send, 16);
    let c = wait_recv(&mut qp);
    assert_eq!((c.status, c.opcode, c.byte_len), (WcStatus::Success, WcOpcode::Recv, 16));
    let d = r.reclaim(&qp).unwrap_or_else(|_| panic!("receive handed back"));
    assert_eq!(contents(&d, 16), [0u8; 16], "rdma_server's reply");
    let e = pump(start, &mut cm, std::slice::from_mut(&mut qp));
    assert_eq!(e, Event { id, kind: EventKind::Disconnected }, "the server's DREQ");
    assert_eq!(qp.state(), QpState::Error);
    let (ok, out) = finish(server, "rdma_server");
    assert!(ok && out.contains("rdma_server: end 0"), "rdma_server failed");
    let s = cm.stats();
    assert_eq!((s.malformed, s.send_errors, s.unresolved), (0, 0, 0), "{s:?}");
    clean(&model);
}

/// `rdma_client` on rxe against our listener on 7471, our side as `rdma_server`: receive its
/// 16 bytes (zeros), SEND 16 back and disconnect as soon as the SEND completed, as
/// `rdma_server` does; the client disconnects once it received, so the DREQs may cross.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_rdma_client_talks_to_cm_listener_and_both_disconnect() {
    rdma_client_side("rdma_client", false);
}

/// As above, but the client's kernel already knows our MAC (a static neighbour), so no ARP
/// request precedes its REQ and our CM has not heard of it: the REQ goes unanswered while our
/// ARP request goes out, and the kernel's next try (2 × 2^(16−8) + 2^(20−8) ms later) is
/// accepted.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_a_request_from_a_peer_not_yet_resolved_is_accepted_on_its_retry() {
    rdma_client_side("rdma_client_unresolved", true);
}

fn rdma_client_side(name: &str, peer_knows_us: bool) {
    let model = model_on_wire(name);
    let dev = driver(&model);
    let mut rx = dev.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap();
    let port = arp_port(&dev, &mut rx);
    if peer_knows_us {
        let mac: Vec<String> = OUR_MAC.0.iter().map(|b| format!("{b:02x}")).collect();
        let st = Command::new("ip")
            .args(["-n", &netns(), "neigh", "replace", &ours().to_string()])
            .args(["lladdr", &mac.join(":"), "dev", "wp", "nud", "permanent"])
            .status()
            .unwrap();
        assert!(st.success(), "ip neigh replace");
    }
    let mut cm: TCm = Cm::new(port, CmConfig::new(CA_GUID, 6)).unwrap();
    cm.listen(RDMA_SERVER_PORT).unwrap();
    let send = dev.reg(16, Access::LOCAL_WRITE).unwrap();
    send.write(0, b"mlx5 CM listener").unwrap();
    let mut recv = dev.reg(16, Access::LOCAL_WRITE).unwrap();
    recv.write(0, &[0xa5; 16]).unwrap();
    let client = spawn_in_peer(&["rdma_client", "-s", &ours().to_string()]);
    let start = Instant::now();
    let id = await_request(start, &mut cm, RDMA_SERVER_PORT);
    let s = cm.stats();
    if peer_knows_us {
        assert_eq!((s.received, s.unresolved), (2, 1), "the first REQ unanswered: {s:?}");
        assert_eq!(s.sent, 0, "{s:?}");
        eprintln!("the repeated REQ came {:?} after the start", start.elapsed());
    } else {
        assert_eq!((s.received, s.unresolved), (1, 0), "{s:?}");
    }
    let mut qp: RcQp = dev.create_qp(&QpConfig::default()).unwrap();
    cm.accept(id, &mut qp, &AcceptParams::default(), clock(start)).unwrap();
    let r = qp.post_recv(0, recv.dest().unwrap()).map_err(|r| r.error).unwrap();
    let e = pump(start, &mut cm, std::slice::from_mut(&mut qp));
    assert_eq!(e, Event { id, kind: EventKind::Established });
    let c = wait_recv(&mut qp);
    assert_eq!((c.status, c.opcode, c.byte_len), (WcStatus::Success, WcOpcode::Recv, 16));
    let d = r.reclaim(&qp).unwrap_or_else(|_| panic!("receive handed back"));
    assert_eq!(contents(&d, 16), [0u8; 16], "rdma_client's message");
    qp.post_send(1, send.slice(0, 16).unwrap(), SIG).unwrap();
    if !last_send(start, &mut cm, &mut qp, id, 1) {
        cm.disconnect(id, &mut qp, clock(start)).unwrap();
        let e = pump(start, &mut cm, std::slice::from_mut(&mut qp));
        assert_eq!(e, Event { id, kind: EventKind::Disconnected });
    }
    let (ok, out) = finish(client, "rdma_client");
    assert!(ok && out.contains("rdma_client: end 0"), "rdma_client failed");
    let s = cm.stats();
    let unresolved = u64::from(peer_knows_us);
    assert_eq!((s.malformed, s.send_errors, s.unresolved), (0, 0, unresolved), "{s:?}");
    clean(&model);
}

/// `rdma_client` against our listener, which rejects it (`rdma_reject` with private data):
/// its `rdma_connect` fails with `ECONNREFUSED`.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_rdma_client_is_rejected_by_cm_listener() {
    let model = model_on_wire("rdma_client_rejected");
    let dev = driver(&model);
    let mut rx = dev.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap();
    let port = arp_port(&dev, &mut rx);
    let mut cm: TCm = Cm::new(port, CmConfig::new(CA_GUID, 11)).unwrap();
    cm.listen(RDMA_SERVER_PORT).unwrap();
    let client = spawn_in_peer(&["rdma_client", "-s", &ours().to_string()]);
    let start = Instant::now();
    let id = await_request(start, &mut cm, RDMA_SERVER_PORT);
    cm.reject(id, b"not today").unwrap();
    assert_eq!(cm.live(), 0);
    let (ok, out) = finish(client, "rdma_client");
    assert!(!ok, "rdma_client connected");
    assert!(out.contains("rdma_connect: Connection refused"), "{out}");
    let s = cm.stats();
    assert_eq!((s.sent, s.malformed, s.send_errors), (1, 0, 0), "{s:?}");
    clean(&model);
}

// ---- the project's rdma_post_writev program ----

/// `examples/c/cm_writev.c`'s region, messages and plan.
mod writev {
    pub const PORT: u16 = 7472;
    pub const REGION_LEN: usize = 256 * 1024;
    pub const MSG_LEN: usize = 16;
    pub const WRITE_LENS: [usize; 11] = [1, 2, 3, 64, 100, 1000, 1024, 1025, 4096, 5000, 16384];

    pub fn pattern(seed: u32, i: u64) -> u8 {
        (i.wrapping_mul(131).wrapping_add(u64::from(seed) * 7).wrapping_add(i >> 8)) as u8
    }

    /// A WRITE's SGL: (offset in the region's image, length, from the second buffer).
    pub type Sgl = Vec<(usize, usize, bool)>;

    /// Each WRITE: its offset in the region and its SGL.
    pub fn plan() -> Vec<(usize, Sgl)> {
        let (mut off, mut k, mut out) = (0, 0, Vec::new());
        while off < REGION_LEN {
            let len = WRITE_LENS[k % WRITE_LENS.len()].min(REGION_LEN - off);
            let third = len / 3;
            let sgl = if len >= 3 {
                vec![
                    (off, third, false),
                    (off + third, third, true),
                    (off + 2 * third, len - 2 * third, false),
                ]
            } else {
                vec![(off, len, false)]
            };
            out.push((off, sgl));
            off += len;
            k += 1;
        }
        out
    }
}

/// `cm_writev -s` on rxe, our CM as its client: the advertisement from the REP's private
/// data, the plan's WRITEs (SGLs of three elements from two regions), "done"; the server
/// compares its region and answers "ok"; we disconnect.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_cm_client_writev_into_cm_writev_server() {
    use writev::*;
    let model = model_on_wire("cm_writev_server");
    let dev = driver(&model);
    let mut rx = dev.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap();
    let mut port = arp_port(&dev, &mut rx);
    let mac = resolve_peer(&mut port);
    let seed = 13u32;
    let (port_s, seed_s) = (PORT.to_string(), seed.to_string());
    let server =
        spawn_in_peer(&["/t/cm_writev", "-s", &theirs().to_string(), "-p", &port_s, "-S", &seed_s]);
    let mut cm: TCm = Cm::new(port, CmConfig::new(CA_GUID, 7)).unwrap();
    let image: Vec<u8> = (0..REGION_LEN as u64).map(|i| pattern(seed, i)).collect();
    let a = dev.reg(REGION_LEN, Access::LOCAL_WRITE).unwrap();
    let b = dev.reg(REGION_LEN, Access::LOCAL_WRITE).unwrap();
    a.write(0, &image).unwrap();
    b.write(0, &image).unwrap();
    let msg = dev.reg(MSG_LEN, Access::LOCAL_WRITE).unwrap();
    let mut verdict = dev.reg(MSG_LEN, Access::LOCAL_WRITE).unwrap();
    let start = Instant::now();
    let (id, mut qp) = connect_retrying(&dev, start, &mut cm, PORT, mac);
    let (addr, rkey, len) = parse_adv(&cm.private_data(id).expect("the REP's private data")[..16]);
    assert_eq!(len as usize, REGION_LEN, "the server's advertisement");
    let remote = rdma_pmd::RemoteBuf::new(addr, rdma_pmd::Rkey(rkey));
    let r = qp.post_recv(0, verdict.dest().unwrap()).map_err(|r| r.error).unwrap();
    let plan = plan();
    for (k, (off, sgl)) in plan.iter().enumerate() {
        let bufs: Vec<_> = sgl
            .iter()
            .map(|&(at, n, second)| if second { b.slice(at, n) } else { a.slice(at, n) }.unwrap())
            .collect();
        qp.post_writev(k as u64, &bufs, SIG, remote.offset(*off as u64)).unwrap();
        wait_send(&mut qp, k as u64, WcOpcode::RdmaWrite, 0);
    }
    let mut m = [0u8; MSG_LEN];
    m[..4].copy_from_slice(b"done");
    m[4..8].copy_from_slice(&(plan.len() as u32).to_be_bytes());
    m[8..].copy_from_slice(&(REGION_LEN as u64).to_be_bytes());
    msg.write(0, &m).unwrap();
    qp.post_send(9999, msg.slice(0, MSG_LEN).unwrap(), SIG).unwrap();
    wait_send(&mut qp, 9999, WcOpcode::Send, MSG_LEN);
    let c = wait_recv(&mut qp);
    assert_eq!((c.status, c.byte_len as usize), (WcStatus::Success, MSG_LEN), "{c:?}");
    let v = contents(&r.reclaim(&qp).unwrap_or_else(|_| panic!("verdict handed back")), MSG_LEN);
    cm.disconnect(id, &mut qp, clock(start)).unwrap();
    let e = pump(start, &mut cm, std::slice::from_mut(&mut qp));
    assert_eq!(e, Event { id, kind: EventKind::Disconnected });
    let (ok, out) = finish(server, "cm_writev -s");
    assert_eq!(&v[..3], b"ok\0", "the server's verdict: {v:?}");
    assert!(ok && out.contains("region ok"), "cm_writev -s failed");
    clean(&model);
}

/// `cm_writev -c` on rxe against our listener: our region advertised in the REP, the
/// client's WRITEs land in it; on "done" we compare every byte, answer, and see the client's
/// disconnect.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_cm_writev_client_writes_into_cm_listener() {
    use writev::*;
    let model = model_on_wire("cm_writev_client");
    let dev = driver(&model);
    let mut rx = dev.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap();
    let port = arp_port(&dev, &mut rx);
    let mut cm: TCm = Cm::new(port, CmConfig::new(CA_GUID, 8)).unwrap();
    cm.listen(PORT).unwrap();
    let seed = 14u32;
    let region = dev.reg(REGION_LEN, TARGET).unwrap();
    let mut done = dev.reg(MSG_LEN, Access::LOCAL_WRITE).unwrap();
    let verdict = dev.reg(MSG_LEN, Access::LOCAL_WRITE).unwrap();
    let (port_s, seed_s) = (PORT.to_string(), seed.to_string());
    let client =
        spawn_in_peer(&["/t/cm_writev", "-c", &ours().to_string(), "-p", &port_s, "-S", &seed_s]);
    let start = Instant::now();
    let id = await_request(start, &mut cm, PORT);
    let at = region.remote(0);
    let adv = rping_adv(at.addr, at.rkey.0, REGION_LEN as u32);
    let mut qp: RcQp = dev.create_qp(&QpConfig::default()).unwrap();
    cm.accept(
        id,
        &mut qp,
        &AcceptParams { private_data: &adv, ..Default::default() },
        clock(start),
    )
    .unwrap();
    let r = qp.post_recv(0, done.dest().unwrap()).map_err(|r| r.error).unwrap();
    let e = pump(start, &mut cm, std::slice::from_mut(&mut qp));
    assert_eq!(e, Event { id, kind: EventKind::Established });
    let c = wait_recv(&mut qp);
    assert_eq!((c.status, c.byte_len as usize), (WcStatus::Success, MSG_LEN), "{c:?}");
    let m = contents(&r.reclaim(&qp).unwrap_or_else(|_| panic!("done handed back")), MSG_LEN);
    assert_eq!(&m[..4], b"done");
    let writes = u32::from_be_bytes(m[4..8].try_into().unwrap());
    let bytes = u64::from_be_bytes(m[8..].try_into().unwrap());
    assert_eq!((writes as usize, bytes as usize), (plan().len(), REGION_LEN));
    let mut got = vec![0u8; REGION_LEN];
    region.read(0, &mut got).unwrap();
    let bad = (0..REGION_LEN).find(|&i| got[i] != pattern(seed, i as u64));
    let mut v = [0u8; MSG_LEN];
    match bad {
        None => v[..2].copy_from_slice(b"ok"),
        Some(i) => {
            v[..3].copy_from_slice(b"bad");
            v[8..].copy_from_slice(&(i as u64).to_be_bytes());
        }
    }
    verdict.write(0, &v).unwrap();
    qp.post_send(1, verdict.slice(0, MSG_LEN).unwrap(), SIG).unwrap();
    if !last_send(start, &mut cm, &mut qp, id, 1) {
        let e = pump(start, &mut cm, std::slice::from_mut(&mut qp));
        assert_eq!(e, Event { id, kind: EventKind::Disconnected }, "the client's DREQ");
    }
    let (ok, out) = finish(client, "cm_writev -c");
    assert_eq!(bad, None, "region byte {bad:?} differs from the pattern");
    assert!(ok && out.contains("verdict ok"), "cm_writev -c failed");
    clean(&model);
}

// ---- ucmatose ----

/// ucmatose's defaults on our side: connections, messages each way per connection, bytes.
const UCMA_CONNS: usize = 4;
const UCMA_COUNT: usize = 10;
const UCMA_SIZE: usize = 100;

/// Post `UCMA_COUNT` receives of `UCMA_SIZE` bytes from `region` on `qp`.
fn ucma_recvs<'r>(
    qp: &mut RcQp<'r>,
    region: &'r mut rdma_pmd_mlx5::Region<'_, MemBar, D, C>,
) -> Vec<rdma_pmd::Pending<DestBuf<'r>>> {
    let mut rest = region.dest().unwrap();
    let mut out = Vec::new();
    for k in 0..UCMA_COUNT {
        let tail = rest.split_off(UCMA_SIZE).unwrap();
        let slot = std::mem::replace(&mut rest, tail);
        out.push(qp.post_recv(k as u64, slot).map_err(|r| r.error).unwrap());
    }
    out
}

/// Wait for `UCMA_COUNT` receives of `UCMA_SIZE` bytes on `qp` (ucmatose sends bytes it never
/// set: only the lengths are the protocol).
fn ucma_await_recvs(qp: &mut RcQp<'_>, which: usize) {
    for k in 0..UCMA_COUNT {
        let c = wait_recv(qp);
        assert_eq!(
            (c.wr_id, c.status, c.opcode, c.byte_len as usize),
            (k as u64, WcStatus::Success, WcOpcode::Recv, UCMA_SIZE),
            "connection {which}, message {k}"
        );
    }
}

/// SEND `UCMA_COUNT` messages of `UCMA_SIZE` bytes from `src` on `qp`, waiting for each
/// completion but the last's.
fn ucma_sends<'r>(qp: &mut RcQp<'r>, src: &'r rdma_pmd_mlx5::Region<'_, MemBar, D, C>) {
    for k in 0..UCMA_COUNT {
        qp.post_send(k as u64, src.slice(k * UCMA_SIZE, UCMA_SIZE).unwrap(), SIG).unwrap();
        if k + 1 < UCMA_COUNT {
            wait_send(qp, k as u64, WcOpcode::Send, UCMA_SIZE);
        }
    }
}

/// Every event until `n` of kind `kind` came (one per connection), lending `qps`.
fn await_each(start: Instant, cm: &mut TCm<'_>, qps: &mut [RcQp<'_>], n: usize, kind: EventKind) {
    let mut seen = Vec::new();
    while seen.len() < n {
        let e = pump(start, cm, qps);
        assert_eq!(e.kind, kind, "{e:?}");
        assert!(!seen.contains(&e.id), "{e:?} twice");
        seen.push(e.id);
    }
}

/// `ucmatose` as the server on rxe (four connections, ten 100-byte messages each way), our CM
/// as the client: it SENDs first, we answer with as many, it disconnects every connection.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_cm_client_opens_four_connections_to_ucmatose_server() {
    let model = model_on_wire("ucmatose_server");
    let dev = driver(&model);
    let mut rx = dev.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap();
    let mut port = arp_port(&dev, &mut rx);
    let mac = resolve_peer(&mut port);
    let (n, count, size) = (UCMA_CONNS.to_string(), UCMA_COUNT.to_string(), UCMA_SIZE.to_string());
    let server = spawn_in_peer(&[
        "ucmatose",
        "-b",
        &theirs().to_string(),
        "-c",
        &n,
        "-C",
        &count,
        "-S",
        &size,
    ]);
    let mut cm: TCm = Cm::new(port, CmConfig::new(CA_GUID, 9)).unwrap();
    let src = dev.reg(UCMA_COUNT * UCMA_SIZE, Access::LOCAL_WRITE).unwrap();
    src.write(0, &pattern(9, UCMA_COUNT * UCMA_SIZE)).unwrap();
    let mut rxr: Vec<_> = (0..UCMA_CONNS)
        .map(|_| dev.reg(UCMA_COUNT * UCMA_SIZE, Access::LOCAL_WRITE).unwrap())
        .collect();
    let start = Instant::now();
    let (mut ids, mut qps, mut posted) = (Vec::new(), Vec::new(), Vec::new());
    for region in rxr.iter_mut() {
        let (id, mut qp) = connect_retrying(&dev, start, &mut cm, RDMA_SERVER_PORT, mac);
        posted.push(ucma_recvs(&mut qp, region));
        ids.push(id);
        qps.push(qp);
    }
    for (i, qp) in qps.iter_mut().enumerate() {
        ucma_await_recvs(qp, i);
    }
    // Our replies. Each connection's last one is the last message before the server's DREQs
    // (it disconnects them all once every reply came): as in `last_send`, it may be
    // delivered yet never acknowledged, and then completes in error, with the DREQ.
    for qp in qps.iter_mut() {
        ucma_sends(qp, &src);
    }
    // The QPs are lent to the CM, which moves each to ERR on its DREQ (see `last_send`).
    let (mut last, mut gone) = (vec![None; UCMA_CONNS], Vec::new());
    let t0 = Instant::now();
    while last.iter().any(Option::is_none) || gone.len() < UCMA_CONNS {
        match cm.poll(clock(start), &mut qps[..]) {
            None => {}
            Some(Event { id, kind: EventKind::TimewaitExit }) if gone.contains(&id) => {}
            Some(e) => {
                assert_eq!(e.kind, EventKind::Disconnected, "{e:?}");
                assert!(ids.contains(&e.id) && !gone.contains(&e.id), "{e:?}");
                gone.push(e.id);
            }
        }
        for (l, qp) in last.iter_mut().zip(qps.iter_mut()).filter(|(l, _)| l.is_none()) {
            let mut out = [Completion::default(); 1];
            if qp.poll(&mut out).unwrap() == 1 {
                assert_eq!(out[0].wr_id, UCMA_COUNT as u64 - 1, "{:?}", out[0]);
                *l = Some(out[0].status);
            }
        }
        assert!(t0.elapsed() < WAIT, "last replies {last:?}, {} disconnected", gone.len());
    }
    for (i, s) in last.iter().enumerate() {
        let s = s.expect("completed");
        assert!(
            s == WcStatus::Success || matches!(s, WcStatus::WrFlushErr | WcStatus::RetryExcErr),
            "connection {i}: {s:?}"
        );
    }
    assert!(qps.iter().all(|q| q.state() == QpState::Error));
    let (ok, out) = finish(server, "ucmatose (server)");
    assert!(ok && out.contains("data transfers complete"), "ucmatose failed");
    let s = cm.stats();
    assert_eq!((s.malformed, s.send_errors, s.unresolved), (0, 0, 0), "{s:?}");
    drop(posted);
    clean(&model);
}

/// `ucmatose -s` (the client) on rxe against our listener on 7471 with four connections: we
/// accept each, SEND ten messages on each, receive its ten replies, and disconnect them all.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_ucmatose_client_opens_four_connections_to_cm_listener() {
    let model = model_on_wire("ucmatose_client");
    let dev = driver(&model);
    let mut rx = dev.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap();
    let port = arp_port(&dev, &mut rx);
    let mut cm: TCm = Cm::new(port, CmConfig::new(CA_GUID, 10)).unwrap();
    cm.listen(RDMA_SERVER_PORT).unwrap();
    let src = dev.reg(UCMA_COUNT * UCMA_SIZE, Access::LOCAL_WRITE).unwrap();
    src.write(0, &pattern(10, UCMA_COUNT * UCMA_SIZE)).unwrap();
    let mut rxr: Vec<_> = (0..UCMA_CONNS)
        .map(|_| dev.reg(UCMA_COUNT * UCMA_SIZE, Access::LOCAL_WRITE).unwrap())
        .collect();
    let mut qps: Vec<RcQp> =
        (0..UCMA_CONNS).map(|_| dev.create_qp(&QpConfig::default()).unwrap()).collect();
    let (n, count, size) = (UCMA_CONNS.to_string(), UCMA_COUNT.to_string(), UCMA_SIZE.to_string());
    let client = spawn_in_peer(&[
        "ucmatose",
        "-s",
        &ours().to_string(),
        "-c",
        &n,
        "-C",
        &count,
        "-S",
        &size,
    ]);
    let start = Instant::now();
    let (mut ids, mut posted, mut established) = (Vec::new(), Vec::new(), 0);
    let mut regions = rxr.iter_mut();
    let t0 = Instant::now();
    while established < UCMA_CONNS {
        assert!(t0.elapsed() < PATIENCE, "{} accepted, {established} up", ids.len());
        let Some(e) = cm.poll(clock(start), &mut qps[..]) else {
            std::thread::sleep(Duration::from_micros(200));
            continue;
        };
        match e.kind {
            EventKind::ConnectRequest => {
                let r = cm.get_request(e.id).unwrap();
                assert_eq!((r.peer.ip(), r.port), (IpAddr::V4(theirs()), RDMA_SERVER_PORT));
                let qp = &mut qps[ids.len()];
                cm.accept(e.id, qp, &AcceptParams::default(), clock(start)).unwrap();
                posted.push(ucma_recvs(qp, regions.next().expect("a region")));
                ids.push(e.id);
            }
            EventKind::Established => {
                assert!(ids.contains(&e.id), "{e:?}");
                established += 1;
            }
            k => panic!("{k:?}"),
        }
    }
    for qp in qps.iter_mut() {
        ucma_sends(qp, &src);
        wait_send(qp, UCMA_COUNT as u64 - 1, WcOpcode::Send, UCMA_SIZE);
    }
    for (i, qp) in qps.iter_mut().enumerate() {
        ucma_await_recvs(qp, i);
    }
    for (id, qp) in ids.iter().zip(qps.iter_mut()) {
        cm.disconnect(*id, qp, clock(start)).unwrap();
    }
    await_each(start, &mut cm, &mut qps, UCMA_CONNS, EventKind::Disconnected);
    let (ok, out) = finish(client, "ucmatose (client)");
    assert!(ok && out.contains("data transfers complete"), "ucmatose -s failed");
    let s = cm.stats();
    assert_eq!((s.malformed, s.send_errors, s.unresolved), (0, 0, 0), "{s:?}");
    drop(posted);
    clean(&model);
}

// ---- many connections at once ----

/// Connections `cmtime` opens and closes at once.
const CMTIME_CONNS: usize = 100;

/// What the peer kernel's CM sent again after a timeout, summed over its message types
/// (`cm.c`'s `cm_tx_retries` counters of the rxe device's port 1: a group of the port's
/// attributes since Linux 5.14, under `infiniband_cm` before).
fn peer_cm_retries() -> u64 {
    let dirs = [
        "/sys/class/infiniband/rxep/ports/1/cm_tx_retries",
        "/sys/class/infiniband_cm/rxep/1/cm_tx_retries",
    ];
    let dir = dirs
        .iter()
        .find(|d| std::path::Path::new(d).is_dir())
        .unwrap_or_else(|| panic!("the peer's CM counters: none of {dirs:?}"));
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{dir}: {e}"));
    entries
        .map(|e| {
            let p = e.unwrap().path();
            let t = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            t.trim().parse::<u64>().unwrap_or_else(|e| panic!("{}: {t:?}: {e}", p.display()))
        })
        .sum()
}

/// `cmtime` (rdma-core's connection-rate test) as the client on rxe: 100 REQs at once to our
/// listener, which accepts each on a QP of its own, then 100 DREQs at once. Everything must
/// fit the first time: our CM retransmits nothing, drops nothing at its receive ring, and the
/// peer kernel's CM retransmits nothing either. (The model gets enough UAR pages for 100 QPs,
/// each of which takes a page of its own today.)
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_cmtime_client_opens_and_closes_100_connections_at_once_without_retries() {
    let model =
        model_on_wire_with("cmtime", ModelConfig { uar_pages: 256, ..ModelConfig::default() });
    let dev = driver(&model);
    let mut rx = dev.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap();
    let port = arp_port(&dev, &mut rx);
    let mut cm: Cm<Port<'_>, 128, 256> = Cm::new(port, CmConfig::new(CA_GUID, 12)).unwrap();
    cm.listen(RDMA_SERVER_PORT).unwrap();
    let mut qps: Vec<RcQp> =
        (0..CMTIME_CONNS).map(|_| dev.create_qp(&QpConfig::default()).unwrap()).collect();
    let retries_before = peer_cm_retries();
    let client =
        spawn_in_peer(&["cmtime", "-s", &ours().to_string(), "-c", &CMTIME_CONNS.to_string()]);
    let start = Instant::now();
    let (mut accepted, mut up, mut down) = (Vec::new(), 0, 0);
    let t0 = Instant::now();
    while down < CMTIME_CONNS {
        assert!(
            t0.elapsed() < PATIENCE,
            "{} accepted, {up} up, {down} down; {:?}",
            accepted.len(),
            cm.stats()
        );
        let Some(e) = cm.poll(clock(start), &mut qps[..]) else {
            std::thread::sleep(Duration::from_micros(100));
            continue;
        };
        match e.kind {
            EventKind::ConnectRequest => {
                assert!(accepted.len() < CMTIME_CONNS, "more requests than connections: {e:?}");
                let qp = &mut qps[accepted.len()];
                cm.accept(e.id, qp, &AcceptParams::default(), clock(start)).unwrap();
                accepted.push(e.id);
            }
            EventKind::Established => {
                assert!(accepted.contains(&e.id), "{e:?}");
                up += 1;
            }
            EventKind::Disconnected => {
                assert!(accepted.contains(&e.id), "{e:?}");
                down += 1;
            }
            EventKind::TimewaitExit => {}
            k => panic!("{k:?}"),
        }
    }
    assert_eq!(up, CMTIME_CONNS);
    let (ok, out) = finish(client, "cmtime (client)");
    assert!(ok && out.contains("disconnect"), "cmtime -s failed");
    let s = cm.stats();
    let g = cm.port_mut().gsi_mut().stats();
    eprintln!("our CM: {s:?}; the GSI port: {g:?}");
    assert_eq!((s.retransmits, s.duplicates, s.send_errors, s.malformed), (0, 0, 0, 0), "{s:?}");
    assert_eq!((g.ring_exhausted, g.dropped, g.send_full), (0, 0, 0), "{g:?}");
    assert_eq!(peer_cm_retries(), retries_before, "the peer's CM retransmitted");
    clean(&model);
}

/// `udaddy` (UD over rdma_cm) asks our CM to resolve a UD service with SIDR_REQs. UD service
/// resolution is not supported here, so each is answered at once with a SIDR_REP that refuses
/// it: udaddy reports UNREACHABLE and exits long before its own retries (about 70 s) would end.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_udaddy_is_refused_at_once_by_a_sidr_rep() {
    let model = model_on_wire("udaddy");
    let dev = driver(&model);
    let mut rx = dev.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap();
    let port = arp_port(&dev, &mut rx);
    let mut cm: TCm = Cm::new(port, CmConfig::new(CA_GUID, 13)).unwrap();
    cm.listen(RPING_PORT).unwrap();
    let mut child = spawn_in_peer(&["udaddy", "-s", &ours().to_string()]);
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < WAIT, "udaddy still waiting; {:?}", cm.stats());
        assert_eq!(cm.poll(clock(start), &mut NoQps), None);
        std::thread::sleep(Duration::from_micros(200));
    }
    let (ok, out) = finish(child, "udaddy (client)");
    assert!(!ok && out.contains("RDMA_CM_EVENT_UNREACHABLE"), "udaddy was not refused");
    let s = cm.stats();
    assert!(s.sidr_refused >= 1, "{s:?}");
    assert_eq!((s.malformed, s.send_errors, cm.live()), (0, 0, 0), "{s:?}");
    clean(&model);
}

// ---- refused and unreachable ----

/// A port nobody listens on at the peer: its kernel's REJ (invalid service ID) comes back as
/// `ECONNREFUSED`.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_cm_connect_to_a_port_nobody_listens_on_is_refused() {
    let model = model_on_wire("refused");
    let dev = driver(&model);
    let mut rx = dev.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap();
    let mut port = arp_port(&dev, &mut rx);
    let mac = resolve_peer(&mut port);
    let mut cm: TCm = Cm::new(port, CmConfig::new(CA_GUID, 3)).unwrap();
    let start = Instant::now();
    let mut qp: RcQp = dev.create_qp(&QpConfig::default()).unwrap();
    let remote = SocketAddr::new(IpAddr::V4(theirs()), 9);
    let id = cm.connect(&mut qp, &connect_params(remote, mac, &[]), clock(start)).unwrap();
    let e = pump(start, &mut cm, std::slice::from_mut(&mut qp));
    assert_eq!(e, Event { id, kind: EventKind::Rejected { reason: RejReason::InvalidServiceId } });
    assert_eq!(e.kind.errno(), Some(Errno::ECONNREFUSED));
    assert!(start.elapsed() < Duration::from_secs(5), "a REJ, not a timeout");
    assert_eq!(cm.live(), 0);
    clean(&model);
}

/// An address that never answers (a static neighbour to a MAC nobody has): the REQ and its
/// retries go out, and the connection fails with `ETIMEDOUT` within the configured bound.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_cm_connect_to_an_address_that_never_answers_times_out_within_the_bound() {
    let model = model_on_wire("unreachable");
    let dev = driver(&model);
    let mut rx = dev.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap();
    let mut port = arp_port(&dev, &mut rx);
    let ghost = Ipv4Addr::new(10, 3, 0, 99);
    let hole = Mac([0x02, 0x00, 0x00, 0xde, 0xad, 0x99]);
    port.gsi_mut().add_neighbour(Gid::from_ipv4(ghost.octets()), hole).unwrap();
    // 2 × 2^(10-8) + 2^(16-8) = 264 ms a try, 3 tries.
    let short = CmConfig {
        cm_response_timeout: 16,
        packet_life_time: 10,
        max_cm_retries: 2,
        ..CmConfig::new(CA_GUID, 4)
    };
    let mut cm: TCm = Cm::new(port, short).unwrap();
    let start = Instant::now();
    let mut qp: RcQp = dev.create_qp(&QpConfig::default()).unwrap();
    let p = ConnectParams {
        remote_gid: Gid::from_ipv4(ghost.octets()),
        ..connect_params(SocketAddr::new(IpAddr::V4(ghost), RPING_PORT), hole, &[])
    };
    let id = cm.connect(&mut qp, &p, clock(start)).unwrap();
    let e = pump(start, &mut cm, std::slice::from_mut(&mut qp));
    let took = start.elapsed();
    assert_eq!(e, Event { id, kind: EventKind::Unreachable });
    assert_eq!(e.kind.errno(), Some(Errno::ETIMEDOUT));
    let s = cm.stats();
    assert_eq!((s.sent, s.retransmits, s.received), (3, 2, 0), "{s:?}");
    assert!(took >= Duration::from_millis(3 * 264), "three tries of 264 ms: {took:?}");
    assert!(took < Duration::from_secs(3), "within the bound: {took:?}");
    assert_eq!(cm.live(), 0);
    clean(&model);
}
