//! The mlx5 driver on a real Ethernet wire: the device model's port is an `AF_PACKET` socket on
//! one end of a veth pair, the kernel's rdma_rxe is on the other, and the peers are unmodified
//! rdma-core programs (`ibv_rc_pingpong`) and the project's C verbs peer
//! (`examples/c/wire_peer.c`). Every byte is checked on our side, and the C peer checks its
//! own. Run by xtask's `wire` tier (see `xtask/src/tiers/wire.rs` for the guest and the
//! environment it sets); ignored elsewhere. Each test saves a pcap of our end of the wire.
//!
//! Until the driver answers ARP through the Ethernet queues, the peer namespace gets our MAC as
//! a static neighbour (the user-given neighbour the driver also accepts), and we take the
//! peer's MAC from its interface.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use common::*;
use rdma_pmd::{
    Completion, DestBuf, Mac, Post, PsnGen, QpNum, RecvQueue, RemoteBuf, Rkey, SendFlags,
    SendQueue, WcOpcode, WcStatus,
};
use rdma_pmd_hal::mem::{HeapDma, MemBar};
use rdma_pmd_mlx5::control::{Access, Control};
use rdma_pmd_mlx5::{ConnectOpts, Qp, QpConfig, SharedDma};
use rdma_pmd_mlx5_model::peers::guest::{
    connect_ctl, env, finish, gid_index, ip, netns, peer_mac, spawn_in_peer, PATIENCE,
};
use rdma_pmd_mlx5_model::peers::{pingpong, wire_peer};
use rdma_pmd_mlx5_model::roce::port::PacketSocket;
use rdma_pmd_mlx5_model::roce::PcapTap;
use rdma_pmd_mlx5_model::{Gid, Model, ModelConfig};

const SIG: SendFlags = SendFlags::SIGNALED;
/// The model's MAC on the wire (locally administered).
const OUR_MAC: Mac = Mac([0x02, 0x4d, 0x4c, 0x35, 0x00, 0x02]);
/// `ibv_mtu` 3: 1024 bytes, as the peers use.
const MTU_1024: u8 = 3;
const ALL: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC);

type D = SharedDma<Arc<HeapDma>>;
type Q<'r, C> = Qp<'r, MemBar, D, C, 64, 16, 4>;

fn mapped(a: Ipv4Addr) -> [u8; 16] {
    a.to_ipv6_mapped().octets()
}

/// The peer's MAC (from its interface) and its GID index for its IPv4 address.
fn peer_addr() -> (Mac, u32) {
    (peer_mac("wp"), gid_index(&env("WIRE_PEER_DEV"), &mapped(ip("WIRE_PEER"))))
}

/// Our MAC as the peer's static neighbour for our address.
fn static_neighbour() {
    let mac: Vec<String> = OUR_MAC.0.iter().map(|b| format!("{b:02x}")).collect();
    let st = Command::new("ip")
        .args(["-n", &netns(), "neigh", "replace", &env("WIRE_ADDR"), "lladdr", &mac.join(":")])
        .args(["dev", "wp", "nud", "permanent"])
        .status()
        .unwrap();
    assert!(st.success(), "ip neigh replace");
}

fn wait_send<'r, S: SendQueue<'r>>(q: &mut S, n: usize) -> Vec<Completion> {
    let mut got = Vec::new();
    let mut out = [Completion::default(); 16];
    let start = Instant::now();
    while got.len() < n {
        let k = q.poll(&mut out).expect("poll");
        got.extend_from_slice(&out[..k]);
        assert!(start.elapsed() < PATIENCE, "{} of {n} send completions: {got:?}", got.len());
    }
    got
}

fn wait_recv<'r, R: RecvQueue<'r>>(q: &mut R) -> Completion {
    let mut out = [Completion::default(); 1];
    let start = Instant::now();
    while q.poll_recv(&mut out).expect("poll_recv") == 0 {
        assert!(start.elapsed() < PATIENCE, "no receive completion");
    }
    out[0]
}

fn contents(d: &DestBuf<'_>, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    d.read(0, &mut v).unwrap();
    v
}

/// Our side: the model on our end of the wire (its frames recorded to
/// `<WIRE_PCAP_DIR>/<name>.pcap`), the driver on it with our address programmed as GID 0.
fn model_on_wire(name: &str) -> Model {
    let sock = PacketSocket::open(&env("WIRE_IF"), None).expect("AF_PACKET socket");
    let dir = env("WIRE_PCAP_DIR");
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = PcapTap::<PacketSocket>::shared(format!("{dir}/{name}.pcap")).unwrap();
    let gids = vec![Gid { gid: mapped(ip("WIRE_ADDR")), mac: OUR_MAC.0 }];
    Model::with_config(
        ModelConfig { gids, ..ModelConfig::default() }.with_port(PcapTap::new(sock, pcap)),
    )
    .expect("model")
}

/// Open the driver on `model` and give the port our address.
fn driver(model: &Model) -> Dev {
    let dev = open(model);
    dev.set_gid(0, IpAddr::V4(ip("WIRE_ADDR"))).expect("SET_ROCE_ADDRESS");
    assert_eq!(dev.mac().expect("the port's MAC"), OUR_MAC);
    dev
}

/// The peers' connection parameters: every remote right, a 1024-byte path MTU.
fn opts(rq_psn: u32, sq_psn: u32) -> ConnectOpts {
    ConnectOpts { access: ALL, mtu: MTU_1024, rq_psn, sq_psn, ..ConnectOpts::default() }
}

/// Connect `qp` to the peer's QPN and PSN over RoCE v2 at a 1024-byte path MTU.
fn connect<C: Control>(qp: &mut Q<'_, C>, qpn: u32, psn: u32, gid: [u8; 16], sq_psn: u32) {
    let (peer_mac, _) = peer_addr();
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

fn ok_send<'r, S: SendQueue<'r>>(q: &mut S, wr_id: u64) -> Completion {
    let c = wait_send(q, 1)[0];
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
    let model = model_on_wire("ibv_rc_pingpong_server_echoes_the_driver");
    let dev = driver(&model);
    static_neighbour();
    let (_, gidx) = peer_addr();
    let (gidx, size, iters) = (gidx.to_string(), PP_SIZE.to_string(), PP_ITERS.to_string());
    let peer_dev = env("WIRE_PEER_DEV");
    let server = spawn_in_peer(&[
        "ibv_rc_pingpong",
        "-d",
        &peer_dev,
        "-g",
        &gidx,
        "-s",
        &size,
        "-n",
        &iters,
        "-p",
        "18520",
    ]);
    let tx = dev.reg(PP_SIZE, Access::LOCAL_WRITE).unwrap();
    let mut rx = dev.reg(PP_SIZE, Access::LOCAL_WRITE).unwrap();
    let mut qp: Q<'_, _> = dev.create_qp_with::<64, 16, 4>(&QpConfig::default()).unwrap();
    let psn = first_psn();
    let mut ctl = connect_ctl(18520);
    let ours = pingpong::Dest { lid: 0, qpn: qp.qp_num().0, psn, gid: mapped(ip("WIRE_ADDR")) };
    ctl.write_all(&ours.to_msg()).unwrap();
    let mut m = [0u8; pingpong::MSG_LEN];
    ctl.read_exact(&mut m).unwrap();
    let theirs = pingpong::Dest::parse(&m).expect("the server's address");
    connect(&mut qp, theirs.qpn, theirs.psn, theirs.gid, psn);
    ctl.write_all(pingpong::DONE).unwrap();
    let mut d = rx.dest().unwrap();
    for i in 0..PP_ITERS {
        let msg: Vec<u8> = (0..PP_SIZE).map(|j| wire_peer::pattern(i, j as u64)).collect();
        tx.write(0, &msg).unwrap();
        let p = qp.post_recv(u64::from(i), d).map_err(|r| r.error).unwrap();
        qp.post_sendv(u64::from(i), &[tx.slice(0, PP_SIZE).unwrap()], SIG).unwrap();
        ok_send(&mut qp, u64::from(i));
        let c = wait_recv(&mut qp);
        assert_eq!(
            (c.wr_id, c.status, c.opcode, c.byte_len as usize),
            (u64::from(i), WcStatus::Success, WcOpcode::Recv, PP_SIZE)
        );
        d = p.reclaim(&qp).unwrap_or_else(|_| panic!("receive {i} handed back"));
        assert!(contents(&d, PP_SIZE) == msg, "reply {i} is our message byte for byte");
    }
    finish(server, "ibv_rc_pingpong (server)");
}

/// `ibv_rc_pingpong` on rxe as the client, the driver as the server echoing each message: the
/// client sends its buffer (0x7b bytes, then what we sent back), so every message is 0x7b.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_ibv_rc_pingpong_client_is_echoed_by_the_driver() {
    let model = model_on_wire("ibv_rc_pingpong_client_is_echoed_by_the_driver");
    let dev = driver(&model);
    static_neighbour();
    let (_, gidx) = peer_addr();
    let (gidx, size, iters) = (gidx.to_string(), PP_SIZE.to_string(), PP_ITERS.to_string());
    let peer_dev = env("WIRE_PEER_DEV");
    let listener = TcpListener::bind(("0.0.0.0", 18521)).expect("listen");
    let client = spawn_in_peer(&[
        "ibv_rc_pingpong",
        "-d",
        &peer_dev,
        "-g",
        &gidx,
        "-s",
        &size,
        "-n",
        &iters,
        "-p",
        "18521",
        &ip_str("WIRE_CTL_ADDR"),
    ]);
    let (mut ctl, _) = listener.accept().expect("accept");
    let tx = dev.reg(PP_SIZE, Access::LOCAL_WRITE).unwrap();
    let mut rx = dev.reg(PP_SIZE, Access::LOCAL_WRITE).unwrap();
    let mut qp: Q<'_, _> = dev.create_qp_with::<64, 16, 4>(&QpConfig::default()).unwrap();
    // Receives go up in INIT, before the client can send (`ibv_rc_pingpong` posts its own
    // before it connects, too).
    qp.init(&opts(0, 0)).unwrap();
    let mut d = rx.dest().unwrap();
    let mut p = qp.post_recv(0, d).map_err(|r| r.error).unwrap();
    let mut m = [0u8; pingpong::MSG_LEN];
    ctl.read_exact(&mut m).unwrap();
    let theirs = pingpong::Dest::parse(&m).expect("the client's address");
    let psn = first_psn();
    connect(&mut qp, theirs.qpn, theirs.psn, theirs.gid, psn);
    let ours = pingpong::Dest { lid: 0, qpn: qp.qp_num().0, psn, gid: mapped(ip("WIRE_ADDR")) };
    ctl.write_all(&ours.to_msg()).unwrap();
    let mut done = [0u8; 5];
    ctl.read_exact(&mut done).unwrap();
    assert_eq!(&done, pingpong::DONE);
    for i in 0..PP_ITERS {
        let c = wait_recv(&mut qp);
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
        ok_send(&mut qp, u64::from(i));
    }
    finish(client, "ibv_rc_pingpong (client)");
    drop(p);
}

fn ip_str(k: &str) -> String {
    ip(k).to_string()
}

/// Read one line from the control stream.
fn read_line(r: &mut BufReader<TcpStream>) -> String {
    let mut l = String::new();
    r.read_line(&mut l).expect("a line from the peer");
    l
}

fn be_u64(d: &DestBuf<'_>) -> u64 {
    u64::from_be_bytes(contents(d, 8).try_into().unwrap())
}

/// The project's C peer on rxe as the target, the driver running the plan against it: WRITEs of
/// 1 byte to most of 1 MiB, the same pieces READ back and compared, SENDs, a WRITE with
/// immediate and three atomics; the C peer then checks its region and receives.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_the_driver_runs_the_plan_against_the_c_peer() {
    use wire_peer::*;
    let model = model_on_wire("the_driver_runs_the_plan_against_the_c_peer");
    let dev = driver(&model);
    static_neighbour();
    let (_, gidx) = peer_addr();
    let (gidx, peer_dev) = (gidx.to_string(), env("WIRE_PEER_DEV"));
    // The C peer's -s: both sides derive the plan's bytes from it.
    let seed = 3u32;
    let seed_s = seed.to_string();
    let target = spawn_in_peer(&[
        "/t/wire_peer",
        "-d",
        &peer_dev,
        "-g",
        &gidx,
        "-r",
        "target",
        "-p",
        "18610",
        "-s",
        &seed_s,
    ]);
    let local = dev.reg(DATA_LEN, Access::LOCAL_WRITE).unwrap();
    let mut rd = dev.reg(DATA_LEN + 64, Access::LOCAL_WRITE).unwrap();
    let data: Vec<u8> = (0..DATA_LEN as u64).map(|i| pattern(seed, i)).collect();
    local.write(0, &data).unwrap();
    let mut qp: Q<'_, _> = dev.create_qp_with::<64, 16, 4>(&QpConfig::default()).unwrap();
    let psn = first_psn();
    let ctl = connect_ctl(18610);
    let mut reader = BufReader::new(ctl.try_clone().unwrap());
    let mut ctl = ctl;
    let ours =
        Dest { qpn: qp.qp_num().0, psn, gid: mapped(ip("WIRE_ADDR")), addr: 0, rkey: 0, len: 0 };
    ctl.write_all(ours.line().as_bytes()).unwrap();
    let theirs = Dest::parse(&read_line(&mut reader)).expect("the target's line");
    connect(&mut qp, theirs.qpn, theirs.psn, theirs.gid, psn);
    let remote = RemoteBuf::new(theirs.addr, Rkey(theirs.rkey));
    for (k, (off, len)) in pieces().into_iter().enumerate() {
        let id = 10 + k as u64;
        qp.post_writev(id, &[local.slice(off, len).unwrap()], SIG, remote.offset(off as u64))
            .unwrap();
        ok_send(&mut qp, id);
    }
    let mut rest = rd.dest().unwrap();
    for (k, (off, len)) in pieces().into_iter().enumerate() {
        let tail = rest.split_off(len).unwrap();
        let id = 100 + k as u64;
        let p =
            qp.post_read(id, rest, SIG, remote.offset(off as u64)).map_err(|r| r.error).unwrap();
        let c = ok_send(&mut qp, id);
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
        ok_send(&mut qp, id);
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
    ok_send(&mut qp, 300);
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
        ok_send(&mut qp, id);
        *r = be_u64(&p.reclaim(&qp).unwrap_or_else(|_| panic!("atomic {k} handed back")));
        rest = tail;
    }
    assert_eq!(
        results,
        [ATOMIC_INIT, ATOMIC_INIT + 5, 0xdead_beef],
        "the atomics' original values"
    );
    ctl.write_all(b"done\n").unwrap();
    let verdict = read_line(&mut reader);
    finish(target, "wire_peer (target)");
    assert_eq!(verdict.trim(), "ok", "the C peer checked its side");
}

/// The driver's region as the target of the C peer's plan (the mirror of the test above): the
/// C peer checks what it READs and the atomics' original values, we check our region, the
/// atomic word and every receive.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_the_c_peer_runs_the_plan_against_the_driver() {
    target_side("the_c_peer_runs_the_plan_against_the_driver", 18611, false);
}

/// A WRITE from the C peer under a wrong rkey: its completion is REM_ACCESS_ERR and our region
/// is untouched.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_a_wrong_rkey_from_the_c_peer_gets_remote_access_error() {
    target_side("a_wrong_rkey_from_the_c_peer_gets_remote_access_error", 18612, true);
}

fn target_side(name: &str, port: u16, bad_rkey: bool) {
    use wire_peer::*;
    let model = model_on_wire(name);
    let dev = driver(&model);
    static_neighbour();
    let (_, gidx) = peer_addr();
    let seed = 5u32;
    let seed_s = seed.to_string();
    let region = dev.reg(REGION_LEN, ALL).unwrap();
    // The HCA keeps an atomic's operand big-endian.
    region.write(ATOMIC_OFF, &ATOMIC_INIT.to_be_bytes()).unwrap();
    let mut rx = dev.reg(RECV_SLOT * (SENDS.len() + 1), Access::LOCAL_WRITE).unwrap();
    let mut qp: Q<'_, _> = dev.create_qp_with::<64, 16, 4>(&QpConfig::default()).unwrap();
    qp.init(&opts(0, 0)).unwrap();
    let mut rest = rx.dest().unwrap();
    let mut posted = Vec::new();
    for k in 0..=SENDS.len() {
        let tail = if k < SENDS.len() { Some(rest.split_off(RECV_SLOT).unwrap()) } else { None };
        posted.push(qp.post_recv(500 + k as u64, rest).map_err(|r| r.error).unwrap());
        match tail {
            Some(t) => rest = t,
            None => break,
        }
    }
    let listener = TcpListener::bind(("0.0.0.0", port)).expect("listen");
    let (gidx, peer_dev, port_s, host) =
        (gidx.to_string(), env("WIRE_PEER_DEV"), port.to_string(), ip_str("WIRE_CTL_ADDR"));
    let mut args = vec![
        "/t/wire_peer",
        "-d",
        &peer_dev,
        "-g",
        &gidx,
        "-r",
        "initiator",
        "-p",
        &port_s,
        "-s",
        &seed_s,
    ];
    if bad_rkey {
        args.push("--bad-rkey");
    }
    args.push(&host);
    let initiator = spawn_in_peer(&args);
    let (ctl, _) = listener.accept().expect("accept");
    let mut reader = BufReader::new(ctl.try_clone().unwrap());
    let mut ctl = ctl;
    let theirs = Dest::parse(&read_line(&mut reader)).expect("the initiator's line");
    let psn = first_psn();
    connect(&mut qp, theirs.qpn, theirs.psn, theirs.gid, psn);
    let remote = region.remote(0);
    let ours = Dest {
        qpn: qp.qp_num().0,
        psn,
        gid: mapped(ip("WIRE_ADDR")),
        addr: remote.addr,
        rkey: remote.rkey.0,
        len: REGION_LEN as u32,
    };
    ctl.write_all(ours.line().as_bytes()).unwrap();
    let said = read_line(&mut reader);
    let mut data = vec![0u8; DATA_LEN];
    region.read(0, &mut data).unwrap();
    let verdict: Result<(), String> = if bad_rkey {
        assert_eq!(said.trim(), "badkey");
        match data.iter().position(|&b| b != 0) {
            None => Ok(()),
            Some(i) => Err(format!("byte {i} written under a wrong rkey")),
        }
    } else {
        assert_eq!(said.trim(), "done", "the initiator finished its plan");
        let mut why = None;
        for (k, &len) in SENDS.iter().enumerate() {
            let c = wait_recv(&mut qp);
            assert_eq!((c.wr_id, c.status), (500 + k as u64, WcStatus::Success), "{c:?}");
            assert_eq!(c.byte_len as usize, len, "{c:?}");
        }
        let c = wait_recv(&mut qp);
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
    ctl.write_all(reply.as_bytes()).unwrap();
    finish(initiator, "wire_peer (initiator)");
    verdict.unwrap();
}
