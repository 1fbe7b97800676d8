//! The model's packet layer on a real Ethernet wire, judged by the Linux kernel: ARP with the
//! kernel's neighbour code, and RoCE v2 datagrams with rdma_rxe and rdma-core's unmodified
//! `ibv_ud_pingpong`. These run in xtask's `wire` tier (a guest with a veth pair: the model's
//! `AF_PACKET` socket on one end, rxe on the other, in its own network namespace); elsewhere
//! they are ignored. Each saves a pcap of its frames for the tier to dissect.
//!
//! The environment names the wire: `WIRE_IF` (our end), `WIRE_ADDR` (the IPv4 address the
//! model owns on it), `WIRE_PEER` (rxe's address), `WIRE_PEER_NETNS` (its namespace),
//! `WIRE_PEER_DEV` (its rxe device), `WIRE_CTL_PEER` (the peer's address on the control link
//! that carries the pingpong programs' TCP exchange), `WIRE_PCAP_DIR`.

use std::io::{Read, Write};
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rdma_pmd::Mac;
use rdma_pmd_mlx5_model::peers::guest::{
    connect_ctl, env, finish, gid_index, ip, netns, peer_mac, spawn_in_peer,
};
use rdma_pmd_mlx5_model::peers::pingpong;
use rdma_pmd_mlx5_model::roce::arp::{self, ArpOp, ArpPacket, ArpRepr};
use rdma_pmd_mlx5_model::roce::bth::Opcode;
use rdma_pmd_mlx5_model::roce::ethernet::{self, EtherType, EthernetRepr, Frame, BROADCAST};
use rdma_pmd_mlx5_model::roce::ext::{Deth, ExtRepr};
use rdma_pmd_mlx5_model::roce::packet::{bth, ipv4_gids};
use rdma_pmd_mlx5_model::roce::port::PacketSocket;
use rdma_pmd_mlx5_model::roce::{IpRepr, PcapTap, Port, RocePacket, RoceRepr};

/// The model's MAC on the wire (locally administered).
const OUR_MAC: Mac = Mac([0x02, 0x4d, 0x4c, 0x35, 0x00, 0x01]);
/// `ibv_ud_pingpong`'s Q_Key (`ud_pingpong.c`).
const PINGPONG_QKEY: u32 = 0x1111_1111;
/// The longest wait for anything from the peer.
const PATIENCE: Duration = Duration::from_secs(30);

/// Our end of the wire, recording every frame to `<WIRE_PCAP_DIR>/<name>.pcap`.
struct Wire {
    port: PcapTap<PacketSocket>,
    addr: Ipv4Addr,
    /// Frames received that were not for us or not understood, by kind.
    ignored: u64,
    /// ARP requests for our address we answered.
    arp_answered: u64,
}

impl Wire {
    fn open(name: &str) -> Wire {
        let sock = PacketSocket::open(&env("WIRE_IF"), None).expect("AF_PACKET socket");
        let dir = env("WIRE_PCAP_DIR");
        std::fs::create_dir_all(&dir).unwrap();
        let pcap = PcapTap::<PacketSocket>::shared(format!("{dir}/{name}.pcap")).unwrap();
        Wire { port: PcapTap::new(sock, pcap), addr: ip("WIRE_ADDR"), ignored: 0, arp_answered: 0 }
    }

    fn send(&mut self, frame: &[u8]) {
        self.port.send(frame).expect("send a frame");
    }

    fn arp_frame(&self, dst: Mac, a: &ArpRepr) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        let eth = EthernetRepr { dst, src: OUR_MAC, vlan: None, ethertype: EtherType::Arp };
        eth.emit(&mut Frame::new_unchecked(&mut f[..]));
        let at = ethernet::HEADER_LEN;
        a.emit(&mut ArpPacket::new_unchecked(&mut f[at..at + arp::LEN]));
        f
    }

    /// The next frame that is not an ARP request for us (those are answered here, as the
    /// driver's ARP responder will), or `None` after `wait`.
    fn next(&mut self, wait: Duration) -> Option<Vec<u8>> {
        let end = Instant::now() + wait;
        while Instant::now() < end {
            let Some(f) = self.port.recv().expect("receive") else {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            };
            if let Some(req) = self.arp_request_for_us(&f) {
                let reply = self.arp_frame(req.sender_mac, &req.reply(OUR_MAC));
                self.send(&reply);
                self.arp_answered += 1;
                continue;
            }
            return Some(f);
        }
        None
    }

    fn arp_request_for_us(&self, f: &[u8]) -> Option<ArpRepr> {
        let fr = Frame::new_checked(f).ok()?;
        if fr.ethertype() != EtherType::Arp {
            return None;
        }
        let a = ArpRepr::parse(&ArpPacket::new_checked(fr.payload()).ok()?).ok()?;
        (a.op == ArpOp::Request && a.target_ip == self.addr).then_some(a)
    }

    /// Resolve `peer` by ARP: broadcast a request, wait for the kernel's reply.
    fn resolve(&mut self, peer: Ipv4Addr) -> Mac {
        let req = ArpRepr {
            op: ArpOp::Request,
            sender_mac: OUR_MAC,
            sender_ip: self.addr,
            target_mac: Mac([0; 6]),
            target_ip: peer,
        };
        let frame = self.arp_frame(BROADCAST, &req);
        let end = Instant::now() + PATIENCE;
        while Instant::now() < end {
            self.send(&frame);
            let retry = Instant::now() + Duration::from_secs(1);
            while let Some(f) = self.next(retry.saturating_duration_since(Instant::now())) {
                let Ok(fr) = Frame::new_checked(&f[..]) else { continue };
                if fr.ethertype() != EtherType::Arp || fr.dst_addr() != OUR_MAC {
                    self.ignored += 1;
                    continue;
                }
                let a = ArpRepr::parse(&ArpPacket::new_checked(fr.payload()).unwrap())
                    .expect("the kernel's ARP reply parses");
                if a.op == ArpOp::Reply && a.sender_ip == peer {
                    assert_eq!((a.target_mac, a.target_ip), (OUR_MAC, self.addr));
                    assert_eq!(fr.src_addr(), a.sender_mac, "reply sent from the MAC it names");
                    return a.sender_mac;
                }
            }
        }
        panic!("no ARP reply from {peer} within {PATIENCE:?}");
    }
}

#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_arp_with_the_kernel() {
    let mut w = Wire::open("arp_with_the_kernel");
    let ns = netns();
    let peer = ip("WIRE_PEER");
    let mac = w.resolve(peer);
    assert_eq!(mac, peer_mac("wp"), "the kernel answered with its own MAC");
    // The other direction: the kernel resolves us (ping makes it ARP); our reply must land in
    // its neighbour table as REACHABLE or STALE with our MAC.
    let mut ping = Command::new("ip")
        .args(["netns", "exec", &ns, "ping", "-c", "1", "-W", "2", &w.addr.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("ping");
    let end = Instant::now() + PATIENCE;
    while w.arp_answered == 0 && Instant::now() < end {
        let _ = w.next(Duration::from_millis(100));
    }
    let _ = ping.wait();
    assert!(w.arp_answered >= 1, "the kernel never asked for our MAC");
    let neigh = Command::new("ip")
        .args(["-n", &ns, "neigh", "show", &w.addr.to_string()])
        .output()
        .expect("ip neigh");
    let neigh = String::from_utf8_lossy(&neigh.stdout).into_owned();
    let ours: Vec<String> = OUR_MAC.0.iter().map(|b| format!("{b:02x}")).collect();
    let ours = ours.join(":");
    assert!(neigh.contains(&ours), "kernel neighbour entry {neigh:?} lacks {ours}");
}

/// rdma-core's `ibv_ud_pingpong` as the server on rxe, the model's packet layer as the client:
/// every datagram we build must pass rxe's receive checks (ICRC, UDP port, QPN, Q_Key, P_Key),
/// every one rxe sends must parse with its ICRC good, and since the program sends back the
/// receive buffer it was given, each reply must carry the bytes of our last message.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_ud_pingpong_with_rxe() {
    const SIZE: usize = 1000;
    const ITERS: u32 = 20;
    const OUR_QPN: u32 = 0x00_4d01;
    let dev = env("WIRE_PEER_DEV");
    let peer = ip("WIRE_PEER");
    let mut w = Wire::open("ud_pingpong_with_rxe");
    let (our_gid, peer_gid) = ipv4_gids(w.addr, peer);
    let gidx = gid_index(&dev, &peer_gid).to_string();
    let (size, iters) = (SIZE.to_string(), ITERS.to_string());
    let server = spawn_in_peer(&[
        "ibv_ud_pingpong",
        "-d",
        &dev,
        "-g",
        &gidx,
        "-s",
        &size,
        "-n",
        &iters,
        "-p",
        "18516",
    ]);
    let mut ctl = connect_ctl(18516);
    let ours = pingpong::Dest { lid: 0, qpn: OUR_QPN, psn: 0, gid: our_gid };
    ctl.write_all(&ours.to_msg()).unwrap();
    let mut m = [0u8; pingpong::MSG_LEN];
    ctl.read_exact(&mut m).unwrap();
    let theirs = pingpong::Dest::parse(&m).expect("the server's address");
    assert_eq!(theirs.gid, peer_gid, "the server's GID is its IPv4-mapped address");
    let peer_qpn = theirs.qpn;
    ctl.write_all(pingpong::DONE).unwrap();
    let peer_mac = w.resolve(peer);

    let mut psn = 0u32;
    for i in 0..ITERS {
        let payload: Vec<u8> = (0..SIZE).map(|j| (j as u32 * 7 + i * 13) as u8).collect();
        let mut b = bth(Opcode::UD_SEND_ONLY, peer_qpn, psn);
        b.ack_req = false;
        let repr = RoceRepr {
            dst_mac: peer_mac,
            src_mac: OUR_MAC,
            vlan: None,
            ip: IpRepr::between(our_gid, peer_gid, 0, 64),
            udp_src_port: 0xc000 | (i as u16),
            bth: b,
            ext: ExtRepr {
                deth: Some(Deth { qkey: PINGPONG_QKEY, src_qp: OUR_QPN }),
                ..ExtRepr::default()
            },
        };
        w.send(&repr.to_frame(&payload).unwrap());
        psn = (psn + 1) & 0xff_ffff;
        // The echo: rxe's SEND back to our QPN, from its QPN, with its Q_Key.
        let reply = loop {
            let f = w.next(PATIENCE).unwrap_or_else(|| panic!("no reply to datagram {i}"));
            let Ok(fr) = Frame::new_checked(&f[..]) else { continue };
            if fr.dst_addr() != OUR_MAC || fr.ethertype() != EtherType::Ipv4 {
                w.ignored += 1;
                continue;
            }
            break f;
        };
        let p = RocePacket::parse(&reply).expect("rxe's frame parses, ICRC good");
        assert_eq!(p.bth.opcode, Opcode::UD_SEND_ONLY);
        assert_eq!(p.bth.dest_qp, OUR_QPN);
        assert_eq!(p.ext.deth, Some(Deth { qkey: PINGPONG_QKEY, src_qp: peer_qpn }));
        assert_eq!(p.ip.src_gid(), peer_gid);
        assert_eq!(p.payload, &payload[..], "datagram {i} echoed byte for byte");
    }
    finish(server, "ibv_ud_pingpong");
    eprintln!(
        "ud pingpong: {ITERS} round trips, {} frames ignored, {} ARP answered",
        w.ignored, w.arp_answered
    );
}
