//! ARP end to end on the device model: two models on one in-process [`Hub`], each with the
//! driver brought up over its firmware and an [`EthPort`] (the transport domain, TIS, SQ, RQ,
//! TIR and NIC RX flow table of `ETH.md`, created by commands). A resolves B's MAC while B
//! answers; the test holds a third hub port to read what goes on the segment and to send
//! frames of its own (malformed, foreign, tagged, not ARP), which B must drop and count. A
//! resolution nobody answers ends in `Error::Unreachable` within its bound.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use common::*;
use rdma_pmd::{Error, Mac};
use rdma_pmd_hal::{Clock, StdClock};
use rdma_pmd_mlx5::net::{NeighConfig, NeighState};
use rdma_pmd_mlx5::{EthConfig, EthPort};
use rdma_pmd_mlx5_model::roce::{Hub, HubPort, Port};
use rdma_pmd_mlx5_model::{Gid, Model, ModelConfig};

const A_MAC: Mac = Mac([0x02, 0x4d, 0x41, 0, 0, 0x0a]);
const B_MAC: Mac = Mac([0x02, 0x4d, 0x42, 0, 0, 0x0b]);
const PROBE_MAC: Mac = Mac([0x02, 0x50, 0x52, 0, 0, 0x0c]);
const A_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const NOBODY: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 99);

/// Fast resolution timing: 2 requests 100 ms apart.
const FAST: NeighConfig = NeighConfig {
    retries: 2,
    retrans_ns: 100_000_000,
    reachable_ns: 30_000_000_000,
    locktime_ns: 1_000_000_000,
};

fn model_on(hub: &Hub, mac: Mac, ip: Ipv4Addr) -> Model {
    let gid = Gid { gid: ip.to_ipv6_mapped().octets(), mac: mac.0 };
    Model::with_config(
        ModelConfig { gids: vec![gid], ..ModelConfig::default() }.with_port(hub.port(mac)),
    )
    .expect("model")
}

type Eth<'d> = EthPort<
    'd,
    rdma_pmd_hal::mem::MemBar,
    D,
    rdma_pmd_mlx5::control::fw::FwControl<'static, 'static>,
>;
type D = rdma_pmd_mlx5::SharedDma<std::sync::Arc<rdma_pmd_hal::mem::HeapDma>>;

fn eth_port<'d>(dev: &'d Dev, ip: Ipv4Addr, mac: Mac) -> Eth<'d> {
    let mut p = dev.eth_port(&EthConfig { neigh: FAST, ..EthConfig::default() }).expect("eth_port");
    assert_eq!(p.mac(), mac, "the port's MAC is the vport context's");
    p.add_address(ip).unwrap();
    p
}

/// An ARP frame (RFC 826, IPv4 over Ethernet), padded to 60 bytes.
fn arp(op: u16, dst: Mac, sha: Mac, spa: Ipv4Addr, tha: Mac, tpa: Ipv4Addr) -> Vec<u8> {
    let mut f = Vec::with_capacity(60);
    f.extend_from_slice(&dst.0);
    f.extend_from_slice(&sha.0);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4]);
    f.extend_from_slice(&op.to_be_bytes());
    f.extend_from_slice(&sha.0);
    f.extend_from_slice(&spa.octets());
    f.extend_from_slice(&tha.0);
    f.extend_from_slice(&tpa.octets());
    f.resize(60, 0);
    f
}

/// Every frame waiting at `port`.
fn drain(port: &mut HubPort) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    while let Some(f) = port.recv().expect("hub recv") {
        v.push(f);
    }
    v
}

/// Poll `port` until `done` says so, failing after [`WAIT`].
fn poll_until(port: &mut Eth<'_>, clock: &StdClock, what: &str, done: impl Fn(&Eth<'_>) -> bool) {
    let start = Instant::now();
    while !done(port) {
        port.poll_eth(clock.now_ns()).expect("poll_eth");
        assert!(start.elapsed() < WAIT, "{what}: {:?} {:?}", port.stats(), port.arp_stats());
        std::thread::yield_now();
    }
}

#[test]
fn a_resolves_b_by_arp_and_b_learns_a_from_the_request() {
    let hub = Hub::new();
    let mut probe = hub.port(PROBE_MAC);
    let (ma, mb) = (model_on(&hub, A_MAC, A_IP), model_on(&hub, B_MAC, B_IP));
    let (da, db) = (open(&ma), open(&mb));
    let clock = StdClock::default();
    let (mut a, mut b) = (eth_port(&da, A_IP, A_MAC), eth_port(&db, B_IP, B_MAC));
    let start = Instant::now();
    let got = loop {
        let now = clock.now_ns();
        if let Some(m) = a.poll_resolve(B_IP, now).expect("poll_resolve") {
            break m;
        }
        b.poll_eth(now).expect("B poll_eth");
        a.poll_eth(now).expect("A poll_eth");
        assert!(start.elapsed() < WAIT, "no reply: A {:?}, B {:?}", a.arp_stats(), b.arp_stats());
        std::thread::yield_now();
    };
    assert_eq!(got, B_MAC);
    // Resolved within one request's wait: B answered the first request.
    let (sa, sb) = (a.arp_stats(), b.arp_stats());
    assert_eq!(
        (sa.requests_sent, sa.learned, sa.malformed, sa.unreachable),
        (1, 1, 0, 0),
        "{sa:?}"
    );
    assert_eq!((sb.received, sb.replied, sb.learned, sb.malformed), (1, 1, 1, 0), "{sb:?}");
    assert_eq!((a.stats().tx_frames, a.stats().rx_frames), (1, 1), "{:?}", a.stats());
    assert_eq!((b.stats().tx_frames, b.stats().rx_frames), (1, 1), "{:?}", b.stats());
    // B learned A from the request (RFC 826: the target is ours, so the sender is added).
    let n = b.arp().neighbours().iter().find(|n| n.ip == A_IP).expect("B knows A");
    assert!(matches!(n.state, NeighState::Reachable { mac, .. } if mac == A_MAC), "{n:?}");
    // A's next resolve is answered from the table, with nothing sent.
    assert_eq!(a.resolve(B_IP, &clock).unwrap(), B_MAC);
    assert_eq!(a.arp_stats().requests_sent, 1);
    // What the segment carried: the broadcast request reached the probe (the reply was
    // unicast to A), byte for byte as RFC 826 lays it out.
    let seen = drain(&mut probe);
    let want = arp(1, Mac([0xff; 6]), A_MAC, A_IP, Mac([0; 6]), B_IP);
    assert_eq!(seen, vec![want], "the probe saw only A's request");
    // The models: each sent one frame from its SQ and delivered one into its RQ.
    for (m, who) in [(&ma, "A"), (&mb, "B")] {
        let c = m.eth_counters();
        assert_eq!((c.frames_sent, c.frames_delivered, c.send_errors), (1, 1, 0), "{who}: {c:?}");
        assert!(m.eth_faults().is_empty(), "{who}: {:?}", m.eth_faults());
        clean(m);
    }
    assert_eq!(hub.stats().unknown_dst, 0, "{:?}", hub.stats());
}

#[test]
fn a_request_nobody_answers_is_unreachable_within_its_bound() {
    let hub = Hub::new();
    let mut probe = hub.port(PROBE_MAC);
    let ma = model_on(&hub, A_MAC, A_IP);
    let da = open(&ma);
    let clock = StdClock::default();
    let mut a = eth_port(&da, A_IP, A_MAC);
    let start = Instant::now();
    let r = a.resolve(NOBODY, &clock);
    let took = start.elapsed();
    assert_eq!(r, Err(Error::Unreachable(IpAddr::V4(NOBODY))));
    // `retries` requests, each given `retrans_ns`; `resolve` gives up by twice that.
    let bound = Duration::from_nanos(FAST.max_wait_ns());
    assert!(took >= bound, "gave up after {took:?}, before the {bound:?} the retries take");
    // Plus a margin for a loaded machine (the sanitizer tier runs this too).
    assert!(took < 2 * bound + Duration::from_secs(2), "gave up only after {took:?}");
    let s = a.arp_stats();
    assert_eq!((s.requests_sent, s.unreachable, s.learned), (2, 1, 0), "{s:?}");
    let seen = drain(&mut probe);
    let want = arp(1, Mac([0xff; 6]), A_MAC, A_IP, Mac([0; 6]), NOBODY);
    assert_eq!(seen, vec![want.clone(), want], "two requests on the segment");
    // An answer that comes now is too late for the failed resolution but is learned.
    probe.send(&arp(2, A_MAC, PROBE_MAC, NOBODY, A_MAC, A_IP)).unwrap();
    poll_until(&mut a, &clock, "the late reply", |a| a.arp_stats().received == 1);
    assert_eq!(a.resolve(NOBODY, &clock).unwrap(), PROBE_MAC);
    clean(&ma);
}

#[test]
fn malformed_and_foreign_frames_are_dropped_and_counted() {
    let hub = Hub::new();
    let mut probe = hub.port(PROBE_MAC);
    let mb = model_on(&hub, B_MAC, B_IP);
    let db = open(&mb);
    let clock = StdClock::default();
    let mut b = eth_port(&db, B_IP, B_MAC);
    let p = PROBE_MAC;
    let peer_ip = Ipv4Addr::new(192, 0, 2, 7);
    let good = arp(1, Mac([0xff; 6]), p, peer_ip, Mac([0; 6]), B_IP);
    // Frames the driver receives (steered: untagged, ARP EtherType) and must drop.
    let mut hlen = good.clone();
    hlen[18] = 5;
    let mut ptype = good.clone();
    ptype[16..18].copy_from_slice(&0x86ddu16.to_be_bytes());
    let mut op = good.clone();
    op[20..22].copy_from_slice(&7u16.to_be_bytes());
    let mut sha = good.clone();
    sha[22..28].copy_from_slice(&[0x02, 0x50, 0x52, 0, 0, 0xee]); // sender MAC != source
    let mut runt = good[..30].to_vec(); // the hub carries it; the ARP body is cut short
    runt.truncate(30);
    let bcast_sender = arp(1, Mac([0xff; 6]), p, Ipv4Addr::BROADCAST, Mac([0; 6]), B_IP);
    let malformed = [hlen, ptype, op, sha, runt, bcast_sender];
    let for_other_ip = arp(1, Mac([0xff; 6]), p, peer_ip, Mac([0; 6]), NOBODY);
    let conflict = arp(1, Mac([0xff; 6]), p, B_IP, Mac([0; 6]), B_IP);
    let mut from_us = good.clone();
    from_us[6..12].copy_from_slice(&B_MAC.0);
    from_us[22..28].copy_from_slice(&B_MAC.0);
    // Frames the NIC's steering keeps from the driver: another EtherType (IEEE 802's local
    // experimental one), and a tagged ARP.
    let mut other = good.clone();
    other[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    let mut tagged = good[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
    tagged.extend_from_slice(&good[12..]);
    for f in malformed.iter().chain([&for_other_ip, &conflict, &from_us, &other, &tagged]) {
        probe.send(f).unwrap();
    }
    let n_rx = malformed.len() as u64 + 3;
    poll_until(&mut b, &clock, "the frames", |b| b.arp_stats().received == n_rx);
    // The steered ones are all in; the two others must have been handed to the model's
    // steering by now too (the engine takes the port's frames in order).
    let start = Instant::now();
    while mb.eth_counters().frames_received < n_rx + 2 {
        assert!(start.elapsed() < WAIT, "{:?} {:?}", mb.eth_counters(), mb.frame_drops());
        std::thread::yield_now();
    }
    let s = b.arp_stats();
    assert_eq!(s.malformed, malformed.len() as u64, "{s:?}");
    assert_eq!((s.not_for_us, s.conflicts, s.from_us), (1, 1, 1), "{s:?}");
    assert_eq!((s.replied, s.learned), (0, 0), "{s:?}");
    assert!(b.arp().neighbours().is_empty(), "{:?}", b.arp().neighbours());
    assert_eq!(b.stats().rx_frames, n_rx, "{:?}", b.stats());
    assert_eq!((b.stats().tx_frames, b.stats().rx_tagged), (0, 0), "{:?}", b.stats());
    let c = mb.eth_counters();
    assert_eq!((c.frames_delivered, c.dropped_no_match), (n_rx, 2), "{c:?}");
    assert!(drain(&mut probe).is_empty(), "B answered none of them");
    // And then the good request is answered.
    probe.send(&good).unwrap();
    poll_until(&mut b, &clock, "the reply", |b| b.arp_stats().replied == 1);
    poll_until(&mut b, &clock, "the reply's completion", |b| {
        mb.eth_counters().frames_sent == 1 && b.stats().tx_errors == 0
    });
    let start = Instant::now();
    let reply = loop {
        if let Some(f) = probe.recv().unwrap() {
            break f;
        }
        assert!(start.elapsed() < WAIT, "no reply at the probe");
        std::thread::yield_now();
    };
    assert_eq!(reply, arp(2, p, B_MAC, B_IP, p, peer_ip));
    clean(&mb);
}
