//! The mlx5 driver on a real Ethernet wire: the device model's port is an `AF_PACKET` socket on
//! one end of a veth pair, the kernel's rdma_rxe is on the other, and the peers are unmodified
//! rdma-core programs (`ibv_rc_pingpong`) and the project's C verbs peer
//! (`examples/c/wire_peer.c`). Every byte is checked on our side, and the C peer checks its
//! own. Run by xtask's `wire` tier (see `xtask/src/tiers/wire.rs` for the guest and the
//! environment it sets); ignored elsewhere. Each test saves a pcap of our end of the wire.
//!
//! Addresses are resolved by ARP, as between two hosts: the driver's [`EthPort`] (its own SQ, RQ
//! and NIC RX flow rule for ARP, see `drivers/mlx5/ETH.md`) answers the kernel's requests for
//! our address and resolves the peer's MAC with [`EthPort::resolve`]. The kernel resolves our
//! MAC when the peer program moves its QP to RTR (`ib_resolve_eth_dmac`), and probes it again
//! when its neighbour entry goes stale while rxe sends, so the port is polled whenever a test
//! waits: for a completion, for the peer's TCP messages, for the peer program to exit. After
//! each test the kernel's entry for our address must be one it learned, with our MAC. One test
//! keeps the user-given neighbours instead (a permanent entry on the kernel's side,
//! [`EthPort::set_static`] on ours) and must send no ARP at all.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Child;
use std::time::{Duration, Instant};

use common::wire::*;
use common::*;
use rdma_pmd::{
    Completion, DestBuf, Mac, Post, PsnGen, QpNum, RecvQueue, RemoteBuf, Rkey, SendFlags,
    SendQueue, WcOpcode, WcStatus,
};
use rdma_pmd_hal::mem::MemBar;
use rdma_pmd_mlx5::control::{Access, Control};
use rdma_pmd_mlx5::{ConnectOpts, Qp, QpConfig};
use rdma_pmd_mlx5_model::peers::guest::{connect_ctl, env, gid_index, ip, peer_mac, PATIENCE};
use rdma_pmd_mlx5_model::peers::{pingpong, wire_peer};
use rdma_pmd_mlx5_model::roce::FaultPlan;

const SIG: SendFlags = SendFlags::SIGNALED;
/// `ibv_mtu` 3: 1024 bytes, as the peers use.
const MTU_1024: u8 = 3;
const ALL: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC);

type Q<'r, C> = Qp<'r, MemBar, D, C, 64, 16, 4>;

/// The peer's GID index for its IPv4 address.
fn peer_gidx() -> u32 {
    gid_index(&env("WIRE_PEER_DEV"), &mapped(theirs()))
}

fn wait_send<'r, S: SendQueue<'r>>(q: &mut S, n: usize, net: &mut Net<'_>) -> Vec<Completion> {
    let mut got = Vec::new();
    let mut out = [Completion::default(); 16];
    let start = Instant::now();
    while got.len() < n {
        let k = q.poll(&mut out).expect("poll");
        got.extend_from_slice(&out[..k]);
        net.poll();
        assert!(start.elapsed() < PATIENCE, "{} of {n} send completions: {got:?}", got.len());
    }
    got
}

fn wait_recv<'r, R: RecvQueue<'r>>(q: &mut R, net: &mut Net<'_>) -> Completion {
    recv_one(q, PATIENCE, || net.poll())
}

/// A TCP control stream read in short slices, the Ethernet port polled between them (the
/// peer program may be resolving our MAC while we wait for its message).
struct Ctl {
    s: TcpStream,
    pending: Vec<u8>,
}

impl Ctl {
    fn new(s: TcpStream) -> Ctl {
        s.set_nonblocking(false).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
        Ctl { s, pending: Vec::new() }
    }

    /// More bytes into `pending`.
    fn fill(&mut self, net: &mut Net<'_>, start: Instant, what: &str) {
        let mut b = [0u8; 512];
        loop {
            match self.s.read(&mut b) {
                Ok(0) => panic!("{what}: the peer closed the control stream"),
                Ok(n) => {
                    self.pending.extend_from_slice(&b[..n]);
                    return;
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    net.poll();
                    assert!(start.elapsed() < PATIENCE, "{what}: nothing from the peer");
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => panic!("{what}: {e}"),
            }
        }
    }

    fn read_exact(&mut self, n: usize, net: &mut Net<'_>) -> Vec<u8> {
        let start = Instant::now();
        while self.pending.len() < n {
            self.fill(net, start, "a message");
        }
        self.pending.drain(..n).collect()
    }

    fn read_line(&mut self, net: &mut Net<'_>) -> String {
        let start = Instant::now();
        loop {
            if let Some(i) = self.pending.iter().position(|&b| b == b'\n') {
                let l: Vec<u8> = self.pending.drain(..=i).collect();
                return String::from_utf8_lossy(&l).into_owned();
            }
            self.fill(net, start, "a line");
        }
    }

    fn write_all(&mut self, b: &[u8]) {
        self.s.write_all(b).expect("write to the peer");
    }
}

/// Accept the peer program's control connection, polling the port meanwhile.
fn accept(l: &TcpListener, net: &mut Net<'_>) -> Ctl {
    l.set_nonblocking(true).unwrap();
    let start = Instant::now();
    loop {
        match l.accept() {
            Ok((s, _)) => return Ctl::new(s),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                net.poll();
                assert!(start.elapsed() < PATIENCE, "the peer never connected");
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
}

/// Wait for a peer program, polling the port; fail unless it exited 0 (its output shown).
fn finish(child: Child, what: &str, net: &mut Net<'_>) {
    let (ok, out) = await_exit(child, what, 2 * PATIENCE, || net.poll());
    assert!(ok, "{what} failed: {out}");
}

/// The peers' connection parameters: every remote right, a 1024-byte path MTU.
fn opts(rq_psn: u32, sq_psn: u32) -> ConnectOpts {
    ConnectOpts { access: ALL, mtu: MTU_1024, rq_psn, sq_psn, ..ConnectOpts::default() }
}

/// Connect `qp` to the peer's QPN and PSN over RoCE v2 at a 1024-byte path MTU, to the MAC
/// `peer_mac` (resolved or given).
fn connect<C: Control>(
    qp: &mut Q<'_, C>,
    (qpn, psn, gid): (u32, u32, [u8; 16]),
    peer_mac: Mac,
    sq_psn: u32,
) {
    assert_eq!(gid, mapped(ip("WIRE_PEER")), "the peer's GID is its IPv4-mapped address");
    let opts = opts(psn, sq_psn);
    qp.connect_roce_v2(QpNum(qpn), gid, peer_mac.0, 0, 0xc000 | (qpn as u16 & 0x3fff), &opts)
        .expect("connect");
}

fn first_psn() -> u32 {
    let seed =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    PsnGen::new(seed as u64).next_psn()
}

fn ok_send<'r, S: SendQueue<'r>>(q: &mut S, wr_id: u64, net: &mut Net<'_>) -> Completion {
    let c = wait_send(q, 1, net)[0];
    assert_eq!((c.wr_id, c.status), (wr_id, WcStatus::Success), "{c:?}");
    c
}

const PP_SIZE: usize = 4096;
const PP_ITERS: u32 = 100;

/// rdma-core's `ibv_rc_pingpong` on rxe as the server, the driver as the client: the server
/// sends back the buffer each SEND filled, so every reply must be our last message.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_ibv_rc_pingpong_server_echoes_the_driver() {
    on_wire("ibv_rc_pingpong_server_echoes_the_driver", None, pingpong_client);
}

fn pingpong_client(dev: &Dev, net: &mut Net<'_>, _: Option<&Faults>) {
    let server = peer_runs(&pingpong_cmd(18520));
    let tx = dev.reg(PP_SIZE, Access::LOCAL_WRITE).unwrap();
    let mut rx = dev.reg(PP_SIZE, Access::LOCAL_WRITE).unwrap();
    let mut qp: Q<'_, _> = dev.create_qp_with::<64, 16, 4>(&QpConfig::default()).unwrap();
    let psn = first_psn();
    let mut ctl = Ctl::new(connect_ctl(18520));
    let ours = pingpong::Dest { lid: 0, qpn: qp.qp_num().0, psn, gid: mapped(ip("WIRE_ADDR")) };
    ctl.write_all(&ours.to_msg());
    // The server moves its QP to RTR before it answers: its kernel resolves our MAC now, and
    // we learn the server's from its request.
    let m = ctl.read_exact(pingpong::MSG_LEN, net);
    let theirs =
        pingpong::Dest::parse(m.as_slice().try_into().unwrap()).expect("the server's address");
    let peer = net.peer_mac();
    let s = net.eth.arp_stats();
    assert!(s.requests_sent == 0 && s.replied >= 1, "the server's kernel asked first: {s:?}");
    // Confirmed by our reply, the kernel's entry is REACHABLE (for 15 to 45 s).
    net.check_learned(true);
    connect(&mut qp, (theirs.qpn, theirs.psn, theirs.gid), peer, psn);
    ctl.write_all(pingpong::DONE);
    let mut d = rx.dest().unwrap();
    for i in 0..PP_ITERS {
        let msg: Vec<u8> = (0..PP_SIZE).map(|j| wire_peer::pattern(i, j as u64)).collect();
        tx.write(0, &msg).unwrap();
        let p = qp.post_recv(u64::from(i), d).map_err(|r| r.error).unwrap();
        qp.post_sendv(u64::from(i), &[tx.slice(0, PP_SIZE).unwrap()], SIG).unwrap();
        ok_send(&mut qp, u64::from(i), net);
        let c = wait_recv(&mut qp, net);
        assert_eq!(
            (c.wr_id, c.status, c.opcode, c.byte_len as usize),
            (u64::from(i), WcStatus::Success, WcOpcode::Recv, PP_SIZE)
        );
        d = p.reclaim(&qp).unwrap_or_else(|_| panic!("receive {i} handed back"));
        assert!(contents(&d, PP_SIZE) == msg, "reply {i} is our message byte for byte");
    }
    finish(server, "ibv_rc_pingpong (server)", net);
    net.check_learned(false);
}

/// `ibv_rc_pingpong` on rxe as the client, the driver as the server echoing each message: the
/// client sends its buffer (0x7b bytes, then what we sent back), so every message is 0x7b.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_ibv_rc_pingpong_client_is_echoed_by_the_driver() {
    on_wire("ibv_rc_pingpong_client_is_echoed_by_the_driver", None, pingpong_server);
}

/// `ibv_rc_pingpong`'s command line on the peer's device, the control link on `port`.
fn pingpong_cmd(port: u16) -> String {
    let (d, g) = (env("WIRE_PEER_DEV"), peer_gidx());
    format!("ibv_rc_pingpong -d {d} -g {g} -s {PP_SIZE} -n {PP_ITERS} -p {port}")
}

fn pingpong_server(dev: &Dev, net: &mut Net<'_>, _: Option<&Faults>) {
    // We ask first: the client's kernel learns our MAC from our request.
    let peer = net.peer_mac();
    assert_eq!(net.eth.arp_stats().requests_sent, 1);
    let listener = TcpListener::bind(("0.0.0.0", 18521)).expect("listen");
    let client = peer_runs(&format!("{} {}", pingpong_cmd(18521), ip("WIRE_CTL_ADDR")));
    let mut ctl = accept(&listener, net);
    let tx = dev.reg(PP_SIZE, Access::LOCAL_WRITE).unwrap();
    let mut rx = dev.reg(PP_SIZE, Access::LOCAL_WRITE).unwrap();
    let mut qp: Q<'_, _> = dev.create_qp_with::<64, 16, 4>(&QpConfig::default()).unwrap();
    // Receives go up in INIT, before the client can send (`ibv_rc_pingpong` posts its own
    // before it connects, too).
    qp.init(&opts(0, 0)).unwrap();
    let mut d = rx.dest().unwrap();
    let mut p = qp.post_recv(0, d).map_err(|r| r.error).unwrap();
    let m = ctl.read_exact(pingpong::MSG_LEN, net);
    let theirs =
        pingpong::Dest::parse(m.as_slice().try_into().unwrap()).expect("the client's address");
    let psn = first_psn();
    connect(&mut qp, (theirs.qpn, theirs.psn, theirs.gid), peer, psn);
    let ours = pingpong::Dest { lid: 0, qpn: qp.qp_num().0, psn, gid: mapped(ip("WIRE_ADDR")) };
    ctl.write_all(&ours.to_msg());
    let done = ctl.read_exact(pingpong::DONE.len(), net);
    assert_eq!(&done[..], pingpong::DONE);
    for i in 0..PP_ITERS {
        let c = wait_recv(&mut qp, net);
        assert_eq!(
            (c.wr_id, c.status, c.byte_len as usize),
            (u64::from(i), WcStatus::Success, PP_SIZE),
            "{c:?}"
        );
        d = p.reclaim(&qp).unwrap_or_else(|_| panic!("receive {i} handed back"));
        let got = contents(&d, PP_SIZE);
        assert!(got.iter().all(|&b| b == 0x7b), "message {i} is the client's buffer");
        tx.write(0, &got).unwrap();
        p = qp.post_recv(u64::from(i + 1), d).map_err(|r| r.error).unwrap();
        qp.post_sendv(u64::from(i), &[tx.slice(0, PP_SIZE).unwrap()], SIG).unwrap();
        ok_send(&mut qp, u64::from(i), net);
    }
    finish(client, "ibv_rc_pingpong (client)", net);
    drop(p);
    net.check_learned(false);
}

fn be_u64(d: &DestBuf<'_>) -> u64 {
    u64::from_be_bytes(contents(d, 8).try_into().unwrap())
}

/// The C peer's command line (`examples/c/wire_peer.c`) on the peer's device as `role`, its
/// control link on `port`, then `rest`.
fn wire_peer_cmd(role: &str, port: u16, rest: &str) -> String {
    let (d, g) = (env("WIRE_PEER_DEV"), peer_gidx());
    format!("/t/wire_peer -d {d} -g {g} -r {role} -p {port} {rest}")
}

/// Poll a while longer: no completion may come twice (or late).
fn no_more<'r, S: SendQueue<'r>>(q: &mut S, net: &mut Net<'_>) {
    let mut out = [Completion::default(); 4];
    let end = Instant::now() + Duration::from_millis(300);
    while Instant::now() < end {
        assert_eq!(q.poll(&mut out).expect("poll"), 0, "a completion too many: {:?}", out[0]);
        net.poll();
    }
}

/// The project's C peer on rxe as the target, the driver running the plan against it: WRITEs of
/// 1 byte to most of 1 MiB, the same pieces READ back and compared, SENDs, a WRITE with
/// immediate and three atomics; the C peer then checks its region and receives.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_the_driver_runs_the_plan_against_the_c_peer() {
    initiator_side("the_driver_runs_the_plan_against_the_c_peer", 18610, None);
}

/// The same plan with our sends dropped, duplicated, held back and corrupted (1% each, a fixed
/// seed): every request still completes once, successfully, with every byte right on both
/// sides (rxe NAKs the gaps and drops the bad ICRCs; our requester retransmits).
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_the_plan_survives_faults_on_our_sends() {
    initiator_side(
        "the_plan_survives_faults_on_our_sends",
        18613,
        Some(Schedule::sends(0x5eed_0001)),
    );
}

/// The same plan with faults both ways on our side of the wire: our sends, and what rxe sends
/// us (its ACKs, NAKs, READ and atomic responses), dropped, duplicated, held back and
/// corrupted at 1% each: every request still completes once with every byte right (our
/// requester retries what it misses and ignores duplicate responses).
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_the_plan_survives_faults_both_ways() {
    initiator_side(
        "the_plan_survives_faults_both_ways",
        18615,
        Some(Schedule::both_ways(0x5eed_0004)),
    );
}

fn initiator_side(name: &str, port: u16, sched: Option<Schedule>) {
    use wire_peer::*;
    on_wire(name, sched, |dev, net, _| {
        // We ask first: the target's kernel learns our MAC from our request.
        let peer = net.peer_mac();
        // The C peer's -s: both sides derive the plan's bytes from it.
        let seed = 3u32;
        let target = peer_runs(&wire_peer_cmd("target", port, &format!("-s {seed}")));
        let local = dev.reg(DATA_LEN, Access::LOCAL_WRITE).unwrap();
        let mut rd = dev.reg(DATA_LEN + 64, Access::LOCAL_WRITE).unwrap();
        let data: Vec<u8> = (0..DATA_LEN as u64).map(|i| pattern(seed, i)).collect();
        local.write(0, &data).unwrap();
        let mut qp: Q<'_, _> = dev.create_qp_with::<64, 16, 4>(&QpConfig::default()).unwrap();
        let psn = first_psn();
        let mut ctl = Ctl::new(connect_ctl(port));
        let ours = Dest {
            qpn: qp.qp_num().0,
            psn,
            gid: mapped(ip("WIRE_ADDR")),
            addr: 0,
            rkey: 0,
            len: 0,
        };
        ctl.write_all(ours.line().as_bytes());
        let theirs = Dest::parse(&ctl.read_line(net)).expect("the target's line");
        connect(&mut qp, (theirs.qpn, theirs.psn, theirs.gid), peer, psn);
        let remote = RemoteBuf::new(theirs.addr, Rkey(theirs.rkey));
        for (k, (off, len)) in pieces().into_iter().enumerate() {
            let id = 10 + k as u64;
            qp.post_writev(id, &[local.slice(off, len).unwrap()], SIG, remote.offset(off as u64))
                .unwrap();
            ok_send(&mut qp, id, net);
        }
        let mut rest = rd.dest().unwrap();
        for (k, (off, len)) in pieces().into_iter().enumerate() {
            let tail = rest.split_off(len).unwrap();
            let id = 100 + k as u64;
            let p = qp
                .post_read(id, rest, SIG, remote.offset(off as u64))
                .map_err(|r| r.error)
                .unwrap();
            let c = ok_send(&mut qp, id, net);
            assert_eq!((c.opcode, c.byte_len as usize), (WcOpcode::RdmaRead, len));
            let back = p.reclaim(&qp).unwrap_or_else(|_| panic!("READ {k} handed back"));
            assert!(
                contents(&back, len) == data[off..off + len],
                "READ of piece {k} ({len} bytes at {off})"
            );
            rest = tail;
        }
        for (k, &len) in SENDS.iter().enumerate() {
            let msg: Vec<u8> = (0..len as u64).map(|i| pattern(seed + 1 + k as u32, i)).collect();
            local.write(0, &msg).unwrap();
            let id = 200 + k as u64;
            qp.post_sendv(id, &[local.slice(0, len).unwrap()], SIG).unwrap();
            ok_send(&mut qp, id, net);
        }
        local.write(0, &data[..IMM_WRITE.0 + IMM_WRITE.1]).unwrap();
        let (off, len) = IMM_WRITE;
        qp.post_write_imm(
            300,
            &[local.slice(off, len).unwrap()],
            SIG,
            remote.offset(off as u64),
            IMM_VALUE,
        )
        .unwrap();
        ok_send(&mut qp, 300, net);
        let at = remote.offset(ATOMIC_OFF as u64);
        let mut results = [0u64; 3];
        for (k, r) in results.iter_mut().enumerate() {
            let tail = rest.split_off(8).unwrap();
            let id = 900 + k as u64;
            let p = match k {
                0 => qp.post_faa(id, rest, SIG, at, 5),
                1 => qp.post_cas(id, rest, SIG, at, ATOMIC_INIT + 5, 0xdead_beef),
                _ => qp.post_faa(id, rest, SIG, at, 1),
            }
            .map_err(|r| r.error)
            .unwrap();
            ok_send(&mut qp, id, net);
            *r = be_u64(&p.reclaim(&qp).unwrap_or_else(|_| panic!("atomic {k} handed back")));
            rest = tail;
        }
        assert_eq!(
            results,
            [ATOMIC_INIT, ATOMIC_INIT + 5, 0xdead_beef],
            "the atomics' original values (each executed once)"
        );
        no_more(&mut qp, net);
        ctl.write_all(b"done\n");
        let verdict = ctl.read_line(net);
        finish(target, "wire_peer (target)", net);
        assert_eq!(verdict.trim(), "ok", "the C peer checked its side");
        net.check_learned(false);
    });
}

/// The driver's region as the target of the C peer's plan (the mirror of the test above): the
/// C peer checks what it READs and the atomics' original values, we check our region, the
/// atomic word and every receive.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_the_c_peer_runs_the_plan_against_the_driver() {
    target_side("the_c_peer_runs_the_plan_against_the_driver", 18611, Target::default());
}

/// A WRITE from the C peer under a wrong rkey: its completion is REM_ACCESS_ERR and our region
/// is untouched. Addresses here are the user-given neighbours, not ARP: the kernel has our MAC
/// as a permanent entry and we set the peer's as static, so no ARP frame goes out from us.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_a_wrong_rkey_from_the_c_peer_gets_remote_access_error() {
    let t = Target { bad_rkey: true, static_neighbours: true, faults: None };
    target_side("a_wrong_rkey_from_the_c_peer_gets_remote_access_error", 18612, t);
}

/// The C peer's plan against our region with our responses (ACKs, READ responses, atomic
/// responses) under the fault schedule: rxe retries what it misses, and our responder answers
/// duplicates without executing them again (the atomic word ends right, every original value
/// the C peer checks is right).
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_the_c_peer_plan_survives_faults_on_our_responses() {
    let t = Target { faults: Some(Schedule::sends(0x5eed_0002)), ..Target::default() };
    target_side("the_c_peer_plan_survives_faults_on_our_responses", 18614, t);
}

/// The C peer's plan against our region with faults both ways: its requests to us and our
/// responses. Our responder sees gaps (it NAKs them once), duplicates (answered again, never
/// executed twice: the atomic word ends right) and bad ICRCs (dropped); rxe retries.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_the_c_peer_plan_survives_faults_both_ways() {
    let t = Target { faults: Some(Schedule::both_ways(0x5eed_0005)), ..Target::default() };
    target_side("the_c_peer_plan_survives_faults_both_ways", 18616, t);
}

/// How a [`target_side`] test runs.
#[derive(Default)]
struct Target {
    /// The C peer WRITEs under a wrong rkey.
    bad_rkey: bool,
    /// User-given neighbours on both sides instead of ARP.
    static_neighbours: bool,
    /// Our side of the wire under a fault schedule.
    faults: Option<Schedule>,
}

fn target_side(name: &str, port: u16, t: Target) {
    use wire_peer::*;
    on_wire(name, t.faults, |dev, net, _| {
        if t.static_neighbours {
            peer_knows_us();
            net.eth.set_static(ip("WIRE_PEER"), peer_mac("wp")).unwrap();
        }
        let seed = 5u32;
        let region = dev.reg(REGION_LEN, ALL).unwrap();
        // The HCA keeps an atomic's operand big-endian.
        region.write(ATOMIC_OFF, &ATOMIC_INIT.to_be_bytes()).unwrap();
        let mut rx = dev.reg(RECV_SLOT * (SENDS.len() + 1), Access::LOCAL_WRITE).unwrap();
        let mut qp: Q<'_, _> = dev.create_qp_with::<64, 16, 4>(&QpConfig::default()).unwrap();
        qp.init(&opts(0, 0)).unwrap();
        let mut rest = rx.dest().unwrap();
        let mut posted = Vec::new();
        for k in 0..=SENDS.len() {
            let tail =
                if k < SENDS.len() { Some(rest.split_off(RECV_SLOT).unwrap()) } else { None };
            posted.push(qp.post_recv(500 + k as u64, rest).map_err(|r| r.error).unwrap());
            match tail {
                Some(t) => rest = t,
                None => break,
            }
        }
        let listener = TcpListener::bind(("0.0.0.0", port)).expect("listen");
        let bad_rkey = if t.bad_rkey { " --bad-rkey" } else { "" };
        let rest = format!("-s {seed}{bad_rkey} {}", ip("WIRE_CTL_ADDR"));
        let initiator = peer_runs(&wire_peer_cmd("initiator", port, &rest));
        let mut ctl = accept(&listener, net);
        let theirs = Dest::parse(&ctl.read_line(net)).expect("the initiator's line");
        let psn = first_psn();
        // The peer's MAC: the static entry, or by ARP (the initiator moves its QP to RTR only
        // after our line, so we ask first).
        let peer = net.peer_mac();
        connect(&mut qp, (theirs.qpn, theirs.psn, theirs.gid), peer, psn);
        let remote = region.remote(0);
        let ours = Dest {
            qpn: qp.qp_num().0,
            psn,
            gid: mapped(ip("WIRE_ADDR")),
            addr: remote.addr,
            rkey: remote.rkey.0,
            len: REGION_LEN as u32,
        };
        ctl.write_all(ours.line().as_bytes());
        let said = ctl.read_line(net);
        let mut data = vec![0u8; DATA_LEN];
        region.read(0, &mut data).unwrap();
        let verdict: Result<(), String> = if t.bad_rkey {
            assert_eq!(said.trim(), "badkey");
            match data.iter().position(|&b| b != 0) {
                None => Ok(()),
                Some(i) => Err(format!("byte {i} written under a wrong rkey")),
            }
        } else {
            assert_eq!(said.trim(), "done", "the initiator finished its plan");
            let mut why = None;
            for (k, &len) in SENDS.iter().enumerate() {
                let c = wait_recv(&mut qp, net);
                assert_eq!((c.wr_id, c.status), (500 + k as u64, WcStatus::Success), "{c:?}");
                assert_eq!(c.byte_len as usize, len, "{c:?}");
            }
            let c = wait_recv(&mut qp, net);
            let k = SENDS.len() as u64;
            assert_eq!((c.wr_id, c.status), (500 + k, WcStatus::Success), "{c:?}");
            assert_eq!((c.opcode, c.imm), (WcOpcode::RecvRdmaWithImm, Some(IMM_VALUE)), "{c:?}");
            for (k, p) in posted.drain(..).enumerate() {
                let slot = p.reclaim(&qp).unwrap_or_else(|_| panic!("receive {k} handed back"));
                if k < SENDS.len() {
                    let want: Vec<u8> =
                        (0..SENDS[k] as u64).map(|i| pattern(seed + 1 + k as u32, i)).collect();
                    if contents(&slot, SENDS[k]) != want {
                        why.get_or_insert(format!("receive {k}"));
                    }
                }
            }
            if let Some(i) = (0..DATA_LEN).find(|&i| data[i] != pattern(seed, i as u64)) {
                why.get_or_insert(format!("region byte {i}"));
            }
            let mut w = [0u8; 8];
            region.read(ATOMIC_OFF, &mut w).unwrap();
            if u64::from_be_bytes(w) != ATOMIC_FINAL {
                why.get_or_insert(format!("atomic word {:#x}", u64::from_be_bytes(w)));
            }
            why.map_or(Ok(()), Err)
        };
        let reply = match &verdict {
            Ok(()) => "ok\n".to_string(),
            Err(e) => format!("bad {e}\n"),
        };
        ctl.write_all(reply.as_bytes());
        finish(initiator, "wire_peer (initiator)", net);
        verdict.unwrap();
        if t.static_neighbours {
            let (mac, states) = kernel_neighbour().expect("the permanent entry");
            assert_eq!(mac, mac_text(OUR_MAC));
            assert!(states.iter().any(|s| s == "PERMANENT"), "{states:?}");
            let s = net.eth.arp_stats();
            assert_eq!((s.requests_sent, s.replied), (0, 0), "no ARP from us: {s:?}");
            assert_eq!(net.eth.stats().tx_frames, 0, "{:?}", net.eth.stats());
            // The next tests learn our MAC by ARP again.
            peer_forgets_us();
        } else {
            net.check_learned(false);
        }
    });
}

/// The peer cut off: after one WRITE completes, every frame we send towards the peer is
/// dropped (the schedule at 100%). With 2 retries and a short ACK timeout the request in
/// flight ends in RETRY_EXC_ERR, and the three behind it (a READ, a SEND, an atomic) are
/// flushed (WR_FLUSH_ERR), each exactly once, within the retries' bound.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_a_peer_cut_off_ends_in_retry_exceeded_and_flushes_the_rest() {
    use wire_peer::*;
    let none = Schedule { send: FaultPlan::none(), recv: FaultPlan::none(), seed: 0x5eed_0003 };
    // The schedule's plans start empty: its check at the end is that the model sent no bad
    // ICRC of its own.
    on_wire("a_peer_cut_off", Some(none), |dev, net, faults| {
        let faults = faults.expect("the test's schedule");
        let peer = net.peer_mac();
        let target = peer_runs(&wire_peer_cmd("target", 18615, ""));
        let local = dev.reg(RECV_SLOT, Access::LOCAL_WRITE).unwrap();
        let mut rd = dev.reg(RECV_SLOT + 8, Access::LOCAL_WRITE).unwrap();
        let mut qp: Q<'_, _> = dev.create_qp_with::<64, 16, 4>(&QpConfig::default()).unwrap();
        let psn = first_psn();
        let mut ctl = Ctl::new(connect_ctl(18615));
        let ours = Dest {
            qpn: qp.qp_num().0,
            psn,
            gid: mapped(ip("WIRE_ADDR")),
            addr: 0,
            rkey: 0,
            len: 0,
        };
        ctl.write_all(ours.line().as_bytes());
        let theirs = Dest::parse(&ctl.read_line(net)).expect("the target's line");
        assert_eq!(theirs.gid, mapped(ip("WIRE_PEER")));
        // 4.096 µs × 2^10 ≈ 4 ms (the model bounds it to 10..100 ms), 2 retries.
        let o = ConnectOpts { timeout: 10, retry_cnt: 2, ..opts(theirs.psn, psn) };
        let flow = 0xc000 | (theirs.qpn as u16 & 0x3fff);
        qp.connect_roce_v2(QpNum(theirs.qpn), theirs.gid, peer.0, 0, flow, &o).expect("connect");
        let remote = RemoteBuf::new(theirs.addr, Rkey(theirs.rkey));
        qp.post_writev(1, &[local.slice(0, RECV_SLOT).unwrap()], SIG, remote).unwrap();
        ok_send(&mut qp, 1, net);
        faults.lock().set_plan(FaultPlan { drop: 1_000_000, ..FaultPlan::none() });
        let dropped_before = faults.lock().counts().dropped;
        let start = Instant::now();
        qp.post_writev(10, &[local.slice(0, RECV_SLOT).unwrap()], SIG, remote).unwrap();
        let (rd_dest, atomic_dest) = {
            let mut d = rd.dest().unwrap();
            let a = d.split_off(RECV_SLOT).unwrap();
            (d, a)
        };
        let pr = qp.post_read(11, rd_dest, SIG, remote).map_err(|r| r.error).unwrap();
        qp.post_sendv(12, &[local.slice(0, 100).unwrap()], SIG).unwrap();
        let pa = qp
            .post_faa(13, atomic_dest, SIG, remote.offset(ATOMIC_OFF as u64), 1)
            .map_err(|r| r.error)
            .unwrap();
        let got = wait_send(&mut qp, 4, net);
        let took = start.elapsed();
        let seen: Vec<(u64, WcStatus)> = got.iter().map(|c| (c.wr_id, c.status)).collect();
        assert_eq!(
            seen,
            [
                (10, WcStatus::RetryExcErr),
                (11, WcStatus::WrFlushErr),
                (12, WcStatus::WrFlushErr),
                (13, WcStatus::WrFlushErr)
            ],
            "{got:?}"
        );
        // Three tries (the first and two retries) of at most the model's 100 ms timeout each.
        assert!(took < Duration::from_secs(3), "retry exceeded only after {took:?}");
        let dropped = faults.lock().counts().dropped - dropped_before;
        assert!(dropped >= 3, "the WRITE was sent and retried twice: {dropped} frames dropped");
        no_more(&mut qp, net);
        assert!(pr.reclaim(&qp).is_ok(), "the flushed READ's buffer handed back");
        assert!(pa.reclaim(&qp).is_ok(), "the flushed atomic's buffer handed back");
        let mut target = target;
        let _ = target.kill();
        let _ = target.wait();
        net.check_learned(false);
    });
}
