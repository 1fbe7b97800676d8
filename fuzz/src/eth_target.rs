//! `eth`: the frames the mlx5 driver's Ethernet port receives, and the completions that hand
//! them over.
//!
//! The port ([`rdma_pmd_mlx5::EthPort::poll_eth`]) takes a receive CQE through
//! [`EthRx::on_cqe`], copies the frame it names out of its buffer, and gives it to ARP
//! ([`Arp::on_frame`], which parses with [`ArpRepr::parse`]); a request for one of our
//! addresses is answered through [`EthTx`], whose send CQEs [`EthTx::on_cqe`] retires.
//! This target runs those pieces in the same order on script input, with the resolution
//! side ([`Arp::poll_resolve`], static entries, time passing) in between.
//!
//! The receive steering sends only ARP (ethertype 0x0806) to this port; no IPv4 or UDP
//! header is parsed by the driver here (the RoCE v2 IPv4 header of a GSI receive is read by
//! the CM's `grh_source`, fuzzed by the `cm` and `cqe` targets).
//!
//! Checked besides "no panic": every reply and request ARP writes parses back as what it
//! meant; a receive completion never names a buffer outside the ring nor a length beyond a
//! buffer; the neighbour table never reports an entry for a group or unspecified address.

use core::net::Ipv4Addr;
use std::sync::Arc;

use rdma_pmd::{Lkey, Mac};
use rdma_pmd_hal::mem::{HeapDma, MemBar};
use rdma_pmd_mlx5::control::Uar;
use rdma_pmd_mlx5::datapath::eth::{EthRx, EthTx, RxDone, TxDone, FRAME_BUF};
use rdma_pmd_mlx5::layout::cqe::Cqe;
use rdma_pmd_mlx5::net::arp::{ArpRepr, BROADCAST, ETHERTYPE_ARP, MIN_FRAME_LEN};
use rdma_pmd_mlx5::net::{Arp, ArpOp, Handled, NeighConfig, NeighState, Resolve};
use rdma_pmd_mlx5::SharedDma;

use crate::input::{Script, Writer};
use crate::Trace;

/// Our MAC.
pub const MAC: Mac = Mac([2, 0, 0, 0, 0, 1]);
/// Our addresses.
const OURS: [Ipv4Addr; 2] = [Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 3)];
/// log2 of the rings' sizes.
const LOG_RING: u8 = 3;
/// Steps of one script.
const MAX_STEPS: usize = 256;

/// Script opcodes (low 3 bits of a step's first byte).
pub mod op {
    /// Time passes: `u16` milliseconds.
    pub const TICK: u8 = 0;
    /// A frame for ARP as received: length byte, then the frame.
    pub const FRAME: u8 = 1;
    /// An ARP frame with a well-formed Ethernet header: destination choice, `u16` operation,
    /// sender MAC (6), sender IP choice, target MAC (6), target IP choice, padding byte.
    pub const ARP: u8 = 2;
    /// Resolve an address: IP choice.
    pub const RESOLVE: u8 = 3;
    /// A receive CQE (64 bytes), then the frame its buffer holds (length byte, bytes).
    pub const RX_CQE: u8 = 4;
    /// Post a frame if the send ring has room, then a send CQE (64 bytes).
    pub const TX_CQE: u8 = 5;
    /// A static entry (IP choice, MAC), or remove one (high bit).
    pub const STATIC: u8 = 6;
    /// Look an address up: IP choice.
    pub const LOOKUP: u8 = 7;
}

/// The address a script byte names: ours, the peers', special ones, or any.
fn ip(s: &mut Script<'_>) -> Ipv4Addr {
    match s.byte() % 8 {
        0 => OURS[0],
        1 => OURS[1],
        2 => Ipv4Addr::new(192, 0, 2, 2),
        3 => Ipv4Addr::new(192, 0, 2, 4),
        4 => Ipv4Addr::UNSPECIFIED,
        5 => Ipv4Addr::BROADCAST,
        6 => Ipv4Addr::new(224, 0, 0, 1),
        _ => Ipv4Addr::from(s.u32()),
    }
}

fn mac(s: &mut Script<'_>) -> Mac {
    Mac(s.array())
}

/// The Ethernet port's receive path, driven by `data` (see the module docs).
pub fn run(data: &[u8]) -> Trace {
    let mut t = Trace::new();
    let mut s = Script::new(data);
    let cfg = NeighConfig::default();
    let mut arp: Arp<4, 2> = Arp::new(MAC, cfg);
    for a in OURS {
        arp.add_address(a).expect("room for our addresses");
    }
    let dma = HeapDma::new();
    let d = SharedDma(dma.clone());
    let bar = MemBar::new(64 * 1024);
    let mut rx = EthRx::alloc(&d, LOG_RING).expect("receive ring");
    rx.post_all(0x10_0000, Lkey(0x42));
    let mut tx = EthTx::alloc(&d, LOG_RING, Uar { index: 1, bar_offset: 4096 }).expect("send ring");
    let mut now_ns = 1u64;
    let mut out = [0u8; MIN_FRAME_LEN];

    for _ in 0..MAX_STEPS {
        if s.is_empty() {
            break;
        }
        let b = s.byte();
        match b & 7 {
            op::TICK => now_ns += u64::from(s.u16()) * 1_000_000,
            op::FRAME => {
                let n = usize::from(s.byte());
                let f = s.take(n);
                frame(&mut arp, f, now_ns, &mut out, &mut t);
            }
            op::ARP => {
                let f = arp_frame(&mut s);
                frame(&mut arp, &f, now_ns, &mut out, &mut t);
            }
            op::RESOLVE => {
                let a = ip(&mut s);
                if let Ok(Resolve::Send(n)) = arp.poll_resolve(a, now_ns, &mut out) {
                    let r = ArpRepr::parse(&out[..n]).expect("our request parses");
                    assert_eq!((r.op, r.sender_mac, r.target_ip), (ArpOp::Request, MAC, a));
                    assert!(OURS.contains(&r.sender_ip));
                    t.insert("request-sent");
                }
            }
            op::RX_CQE => {
                let c: [u8; 64] = s.array();
                let n = usize::from(s.byte());
                let f = s.take(n);
                match rx.on_cqe(&Cqe::new_unchecked(&c[..])) {
                    Ok(RxDone::Frame(got)) => {
                        assert!(got.len <= FRAME_BUF && got.slot < rx.size(), "{got:?}");
                        // The buffer holds what the script says; the port hands over `len`.
                        t.insert("rx-frame");
                        frame(&mut arp, &f[..got.len.min(f.len())], now_ns, &mut out, &mut t);
                        rx.recycle();
                    }
                    Ok(RxDone::Tagged) => rx.recycle(),
                    Ok(RxDone::Failed(_)) | Err(_) => {}
                }
            }
            op::TX_CQE => {
                if tx.next().is_some() {
                    let head = [0u8; 18];
                    tx.post(&bar, &head, 60, 0x20_0000, Lkey(0x42)).expect("room checked");
                }
                let c: [u8; 64] = s.array();
                let before = tx.outstanding();
                if let Ok(TxDone::Sent) = tx.on_cqe(&Cqe::new_unchecked(&c[..])) {
                    t.insert("tx-sent");
                }
                assert!(tx.outstanding() <= before);
            }
            op::STATIC => {
                let a = ip(&mut s);
                let m = mac(&mut s);
                if b & 0x80 != 0 {
                    arp.remove(a);
                } else {
                    let _ = arp.set_static(a, m);
                }
            }
            _ => {
                let a = ip(&mut s);
                if arp.lookup(a, now_ns).is_some() {
                    t.insert("lookup-hit");
                }
            }
        }
        // Only static entries (the user's word) may name an address ARP would not learn.
        for n in arp.neighbours().iter().filter(|n| !matches!(n.state, NeighState::Static(_))) {
            assert!(!n.ip.is_unspecified() && !n.ip.is_broadcast() && !n.ip.is_multicast());
        }
    }
    // SAFETY: no device was ever given the rings (the BAR is plain memory).
    unsafe {
        rx.free(&d);
        tx.free(&d);
    }
    assert_eq!(dma.live_blocks(), 0);
    drop::<Arc<HeapDma>>(dma);
    t
}

/// A received frame given to ARP; a reply it writes must parse back as our reply.
fn frame(arp: &mut Arp<4, 2>, f: &[u8], now_ns: u64, out: &mut [u8; MIN_FRAME_LEN], t: &mut Trace) {
    let _ = ArpRepr::parse(f);
    let h = arp.on_frame(f, now_ns, out);
    if let Ok(Handled::Learned) = h {
        t.insert("learned");
    }
    if let Ok(Handled::Reply(n)) = h {
        t.insert("replied");
        let asked = ArpRepr::parse(f).expect("a frame answered parsed");
        let r = ArpRepr::parse(&out[..n]).expect("our reply parses");
        assert_eq!((r.op, r.sender_mac, r.sender_ip), (ArpOp::Reply, MAC, asked.target_ip));
        assert_eq!(
            (r.eth_dst, r.target_mac, r.target_ip),
            (asked.sender_mac, asked.sender_mac, asked.sender_ip)
        );
    }
}

/// An ARP frame around script fields (see [`op::ARP`]).
fn arp_frame(s: &mut Script<'_>) -> Vec<u8> {
    let dst = match s.byte() % 3 {
        0 => MAC,
        1 => BROADCAST,
        _ => mac(s),
    };
    let oper = s.u16();
    let sha = mac(s);
    let spa = ip(s);
    let tha = mac(s);
    let tpa = ip(s);
    let pad = usize::from(s.byte() % 32);
    let mut f = Vec::with_capacity(42 + pad);
    f.extend_from_slice(&dst.0);
    f.extend_from_slice(&sha.0);
    f.extend_from_slice(&ETHERTYPE_ARP.to_be_bytes());
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4]);
    f.extend_from_slice(&oper.to_be_bytes());
    f.extend_from_slice(&sha.0);
    f.extend_from_slice(&spa.octets());
    f.extend_from_slice(&tha.0);
    f.extend_from_slice(&tpa.octets());
    f.resize(f.len() + pad, 0);
    f
}

/// Seed scripts: a peer's request for our address (answered), its reply to our request
/// (learned), both through the receive ring; a gratuitous ARP; a send completion.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let peer_mac = Mac([2, 0, 0, 0, 0, 2]);
    let peer = Ipv4Addr::new(192, 0, 2, 2);
    let request = {
        let mut f = [0u8; MIN_FRAME_LEN];
        let n = ArpRepr::request(peer_mac, peer, OURS[0]).emit(&mut f).expect("room");
        f[..n].to_vec()
    };
    let reply = {
        let mut f = [0u8; MIN_FRAME_LEN];
        let req = ArpRepr::request(MAC, OURS[0], peer);
        let n = req.reply_from(peer_mac).emit(&mut f).expect("room");
        f[..n].to_vec()
    };
    let rx_cqe = |counter: u16, len: u32| {
        let mut c = [0u8; 64];
        let mut v = Cqe::new_unchecked(&mut c[..]);
        v.set_byte_cnt(len);
        v.set_wqe_counter(counter);
        v.set_op_own(0x20); // RESP_SEND
        c
    };
    let mut out = Vec::new();

    let mut w = Writer::default();
    w.byte(op::RX_CQE).put(&rx_cqe(0, request.len() as u32)).byte(request.len() as u8);
    w.put(&request);
    out.push(("rx-request", w.bytes.clone()));

    let mut w = Writer::default();
    w.byte(op::RESOLVE).byte(2);
    w.byte(op::RX_CQE).put(&rx_cqe(0, reply.len() as u32)).byte(reply.len() as u8);
    w.put(&reply);
    w.byte(op::TICK).u16(1000).byte(op::LOOKUP).byte(2);
    out.push(("resolve-reply", w.bytes.clone()));

    let mut w = Writer::default();
    w.byte(op::ARP).byte(1).u16(1).put(&peer_mac.0).byte(2).put(&[0; 6]).byte(2).byte(0);
    w.byte(op::FRAME).byte(request.len() as u8).put(&request);
    out.push(("gratuitous-and-request", w.bytes.clone()));

    let mut w = Writer::default();
    let mut c = [0u8; 64];
    Cqe::new_unchecked(&mut c[..]).set_op_own(0x00); // REQ, counter 0
    w.byte(op::TX_CQE).put(&c);
    out.push(("tx-done", w.bytes.clone()));
    out
}
