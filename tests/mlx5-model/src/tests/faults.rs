//! The RC transport over a faulty wire: two models on a [`Hub`], each behind a seeded
//! [`FaultPort`] (drops, duplicates, reordering, ICRC corruption) and a [`PcapTap`] whose
//! capture is left under `target/mlx5-model-pcap/` for Wireshark or tshark.
//!
//! Every request must complete exactly once, in order, with its data intact: WRITEs and
//! READs compared byte for byte, fetch-and-adds counted (a duplicate executed twice would
//! show). With every frame dropped, the first WQE ends with `RETRY_EXC_ERR` after
//! `retry_cnt` retransmissions and the rest are flushed.
//!
//! The same with the faults on one side only, in the receive direction of its port (as on
//! a real wire, whose far end is the kernel and cannot be wrapped): every request completes
//! once with its data, corrupted received frames fail the ICRC check, and a requester that
//! hears nothing ends in `RETRY_EXC_ERR` while its responder executed every attempt.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use rdma_pmd::Mac;
use rdma_pmd_mlx5::control::{Access, Path};

use super::harness::*;
use crate::roce::pcap::SharedPcap;
use crate::roce::{Exempt, FaultEvent, FaultKind, FaultPlan, FaultPort, Hub, PcapTap, Port};
use crate::wire::{WIRE_MAX_FRAME, WIRE_QUEUE};
use crate::{Gid, Model, ModelConfig};

/// Where the captures go.
fn pcap_path(name: &str) -> PathBuf {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/mlx5-model-pcap"));
    std::fs::create_dir_all(&dir).expect("pcap directory");
    dir.join(format!("{name}.pcap"))
}

fn gid(last: u8) -> Gid {
    let gid = Ipv4Addr::new(10, 9, 0, last).to_ipv6_mapped().octets();
    Gid { gid, mac: [0x02, 0x4d, 0x46, 0, 0, last] }
}

/// A model at `g` on `hub`, its frames through a fault schedule and the capture.
fn faulty(hub: &Hub, g: Gid, plan: FaultPlan, seed: u64, pcap: &SharedPcap) -> Env {
    let port = PcapTap::new(FaultPort::new(hub.port(Mac(g.mac)), plan, seed), pcap.clone());
    let cfg = ModelConfig { gids: vec![g], ..Default::default() }.with_port(port);
    Env::with_model(Model::with_config(cfg).expect("model"))
}

fn path_to(g: Gid) -> Path {
    Path::RoceV2 {
        dgid: g.gid,
        dmac: g.mac,
        sgid_index: 0,
        udp_sport: 0xc000,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
        sl: 0,
    }
}

struct Link2 {
    x: Env,
    y: Env,
    cq_x: TCq,
    cq_y: TCq,
    a: TQp,
    pcap: SharedPcap,
}

fn link(name: &str, x_plan: FaultPlan, y_plan: FaultPlan, seed: u64) -> Link2 {
    let hub = Hub::with_limits(WIRE_MAX_FRAME, WIRE_QUEUE);
    let pcap = PcapTap::<crate::roce::HubPort>::shared(pcap_path(name)).expect("pcap");
    let (gx, gy) = (gid(1), gid(2));
    let mut x = faulty(&hub, gx, x_plan, seed, &pcap);
    let mut y = faulty(&hub, gy, y_plan, seed ^ 0x5eed, &pcap);
    let cq_x = x.cq(7);
    let cq_y = y.cq(4);
    let a = x.qp(&cq_x, &cq_x, 7, None);
    let b = y.qp(&cq_y, &cq_y, 4, None);
    let all = RW | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    rts_with(&mut x.ctl, a.qpn, b.qpn, path_to(gy), (0x10, 0x20), 7, all);
    rts_with(&mut y.ctl, b.qpn, a.qpn, path_to(gx), (0x20, 0x10), 7, all);
    Link2 { x, y, cq_x, cq_y, a, pcap }
}

fn frames(pcap: &SharedPcap) -> u64 {
    pcap.lock().unwrap_or_else(|e| e.into_inner()).frames()
}

/// 3% of every fault on both sides (about one frame in eight is hit); WRITEs of three
/// packets, READs of two, fetch-and-adds.
#[test]
fn every_rc_request_completes_once_with_its_data_over_a_faulty_wire() {
    let plan = FaultPlan {
        drop: 30_000,
        corrupt: 30_000,
        duplicate: 30_000,
        reorder: 30_000,
        max_hold: 3,
    };
    // Corruption is 3% per frame on a timing-dependent number of frames: a single seed can
    // draw none, so the ICRC drops are counted over the three.
    let mut icrc_drops = 0;
    for seed in [1u64, 2, 3] {
        let mut l = link(&format!("faulty_rc_seed{seed}"), plan, plan, seed);
        const N: usize = 24;
        const WLEN: usize = 2500; // three packets at the 1024-byte path MTU
        const RLEN: usize = 1500; // two response packets
        let src = l.x.region(N * WLEN, 0x10_0000, RW);
        let back = l.x.region(N * RLEN, 0x20_0000, RW);
        let results = l.x.region(N * 8, 0x30_0000, RW);
        let dst = l.y.region(N * WLEN, 0x40_0000, RW | Access::REMOTE_READ);
        let counter = l.y.region(8, 0x50_0000, RW | Access::REMOTE_ATOMIC);
        fill(&src.buf, 0, N * WLEN, 0x31);
        fill(&dst.buf, 0, N * WLEN, 0x77);
        let mut kinds = Vec::new();
        for i in 0..N {
            let pi = l.a.pi;
            let w = match i % 3 {
                0 => {
                    let at = (i * WLEN) as u64;
                    let sge = [(src.va + at, WLEN as u32, src.key.0)];
                    wqe(pi, l.a.qpn, 0x08, 0x08, 0, dst.va + at, dst.key.0, &sge)
                }
                1 => {
                    // Read back what an earlier WRITE of this loop will have put there, or
                    // the initial pattern: either way compared below against y's memory.
                    let at = (i * RLEN) as u64;
                    let sge = [(back.va + at, RLEN as u32, back.key.0)];
                    read_wqe(pi, l.a.qpn, dst.va + at, dst.key.0, &sge)
                }
                _ => atomic_wqe(
                    pi,
                    l.a.qpn,
                    0x12,
                    (counter.va, counter.key.0),
                    (1, 0),
                    (results.va + (i * 8) as u64, results.key.0),
                ),
            };
            kinds.push((pi, (i % 3) as u8));
            l.x.ring(&mut l.a, &w);
        }
        for &(pi, _) in &kinds {
            let c = poll(&mut l.cq_x);
            assert_eq!(
                (c.opcode(), c.wqe_counter()),
                (0, pi),
                "seed {seed}: {c:?} {:?} {:?}",
                l.x.model.violations(),
                (
                    l.x.model.counters(),
                    l.y.model.counters(),
                    l.x.model.frame_drops(),
                    l.y.model.frame_drops()
                )
            );
        }
        assert_empty(&l.x.model, &l.cq_x);
        // Exactly once: eight fetch-and-adds, each seeing the one before.
        let total = u64::from_be_bytes(bytes(&counter.buf, 0, 8).try_into().unwrap());
        assert_eq!(total, (N / 3) as u64, "seed {seed}");
        let seen: Vec<u64> = (0..N)
            .filter(|i| i % 3 == 2)
            .map(|i| u64::from_be_bytes(bytes(&results.buf, i * 8, 8).try_into().unwrap()))
            .collect();
        assert_eq!(seen, (0..(N / 3) as u64).collect::<Vec<_>>(), "seed {seed}");
        for i in 0..N {
            match i % 3 {
                0 => assert_eq!(
                    bytes(&dst.buf, i * WLEN, WLEN),
                    bytes(&src.buf, i * WLEN, WLEN),
                    "seed {seed}: write {i}"
                ),
                1 => assert_eq!(
                    bytes(&back.buf, i * RLEN, RLEN),
                    bytes(&dst.buf, i * RLEN, RLEN),
                    "seed {seed}: read {i}"
                ),
                _ => {}
            }
        }
        let (cx, cy) = (l.x.model.counters(), l.y.model.counters());
        assert!(cx.retransmits > 0, "seed {seed}: no retransmission under faults: {cx:?}");
        icrc_drops += l.x.model.frame_drops().get("icrc") + l.y.model.frame_drops().get("icrc");
        assert!(cy.duplicates > 0, "seed {seed}: {cy:?}");
        assert_eq!(cx.validation_failures, 0, "{:?}", l.x.model.violations());
        assert_eq!(cy.validation_failures, 0, "{:?}", l.y.model.violations());
        assert!(frames(&l.pcap) > 0);
    }
    assert!(icrc_drops > 0, "corrupted frames are dropped by the ICRC check");
}

/// Nothing gets through: retry exhaustion, then the rest flushed.
#[test]
fn a_dead_wire_ends_in_retry_exceeded_then_flush() {
    let all = FaultPlan { drop: 1_000_000, ..FaultPlan::none() };
    let mut l = link("dead_wire_rc", all, FaultPlan::none(), 7);
    let src = l.x.region(4096, 0x10_0000, RW);
    for _ in 0..3 {
        let pi = l.a.pi;
        let w = wqe(pi, l.a.qpn, 0x08, 0x08, 0, 0x4000, 0x1234, &[(src.va, 64, src.key.0)]);
        l.x.ring(&mut l.a, &w);
    }
    let c = poll(&mut l.cq_x);
    assert_eq!((c.opcode(), c.syndrome(), c.wqe_counter()), (13, 0x15, 0));
    for i in 1..3u16 {
        let c = poll(&mut l.cq_x);
        assert_eq!((c.opcode(), c.syndrome(), c.wqe_counter()), (13, 0x05, i));
    }
    assert_empty(&l.x.model, &l.cq_x);
    let n = l.x.model.counters();
    // retry_cnt 7: the first send and seven retransmissions of the three WQEs (eight
    // timeouts), all in the capture.
    assert_eq!(n.ack_timeouts, 8, "{n:?}");
    assert_eq!(n.retransmits, 7 * 3, "{n:?}");
    assert_eq!(frames(&l.pcap), 8 * 3, "every attempt is in the capture");
    assert_eq!(l.y.model.counters().frames_received, 0);
}

/// x's port faults what it receives (`plan`, from `seed`, ARP exempt) and nothing it
/// sends; y's port is plain: the one-sided faults of a real wire whose far end is not ours.
fn recv_link(name: &str, plan: FaultPlan, seed: u64) -> (Link2, TQp) {
    let hub = Hub::with_limits(WIRE_MAX_FRAME, WIRE_QUEUE);
    let pcap = PcapTap::<crate::roce::HubPort>::shared(pcap_path(name)).expect("pcap");
    let (gx, gy) = (gid(1), gid(2));
    let port = FaultPort::new(hub.port(Mac(gx.mac)), FaultPlan::none(), 0)
        .with_recv_plan(plan, seed)
        .exempt_received(Exempt::NonRoce);
    let port = PcapTap::new(port, pcap.clone());
    let cfg = ModelConfig { gids: vec![gx], ..Default::default() }.with_port(port);
    let mut x = Env::with_model(Model::with_config(cfg).expect("model"));
    let cfg = ModelConfig { gids: vec![gy], ..Default::default() }.with_port(hub.port(Mac(gy.mac)));
    let mut y = Env::with_model(Model::with_config(cfg).expect("model"));
    let cq_x = x.cq(7);
    let cq_y = y.cq(6);
    let a = x.qp(&cq_x, &cq_x, 7, None);
    let b = y.qp(&cq_y, &cq_y, 4, Some(4));
    let all = RW | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    rts_with(&mut x.ctl, a.qpn, b.qpn, path_to(gy), (0x10, 0x20), 7, all);
    rts_with(&mut y.ctl, b.qpn, a.qpn, path_to(gx), (0x20, 0x10), 7, all);
    (Link2 { x, y, cq_x, cq_y, a, pcap }, b)
}

/// Receive faults on the requester only (3% each: its ACKs and READ responses are dropped,
/// corrupted, duplicated, reordered): WRITEs of three packets, READs of two responses and
/// SENDs of three packets each complete once, in order, with their data intact.
#[test]
fn receive_faults_on_one_side_complete_every_rc_request_once_with_its_data() {
    let plan = FaultPlan {
        drop: 30_000,
        corrupt: 30_000,
        duplicate: 30_000,
        reorder: 30_000,
        max_hold: 3,
    };
    let mut scheduled = 0;
    for seed in [11u64, 12, 13] {
        // The requester receives at least 32 responses (8 WRITE ACKs, 16 READ responses, 8
        // SEND ACKs); which of them the schedule corrupts does not depend on timing.
        let corrupt = first_faults(plan, seed, 32)
            .iter()
            .filter(|e| matches!(e.kind, FaultKind::Corrupted { .. }))
            .count() as u64;
        scheduled += corrupt;
        let (mut l, mut b) = recv_link(&format!("recv_faults_seed{seed}"), plan, seed);
        const N: usize = 24;
        const LEN: usize = 2500;
        const RLEN: usize = 1500;
        let src = l.x.region(N * LEN, 0x10_0000, RW);
        let back = l.x.region(N * RLEN, 0x20_0000, RW);
        let dst = l.y.region(N * LEN, 0x40_0000, RW | Access::REMOTE_READ);
        let rbuf = l.y.region(N * LEN, 0x50_0000, RW);
        fill(&src.buf, 0, N * LEN, 0x42);
        fill(&dst.buf, 0, N * LEN, 0x99);
        for i in (0..N).filter(|i| i % 3 == 2) {
            post_recv(&mut b, rbuf.va + (i * LEN) as u64, LEN as u32, rbuf.key.0);
        }
        let mut pis = Vec::new();
        for i in 0..N {
            let (pi, q) = (l.a.pi, l.a.qpn);
            let at = (i * LEN) as u64;
            let w = match i % 3 {
                0 => wqe(
                    pi,
                    q,
                    0x08,
                    0x08,
                    0,
                    dst.va + at,
                    dst.key.0,
                    &[(src.va + at, LEN as u32, src.key.0)],
                ),
                1 => {
                    let rat = (i * RLEN) as u64;
                    let sge = [(back.va + rat, RLEN as u32, back.key.0)];
                    read_wqe(pi, q, dst.va + rat, dst.key.0, &sge)
                }
                _ => send_wqe(pi, q, 0x0a, 0, &[(src.va + at, LEN as u32, src.key.0)]),
            };
            pis.push(pi);
            l.x.ring(&mut l.a, &w);
        }
        for &pi in &pis {
            let c = poll(&mut l.cq_x);
            assert_eq!(
                (c.opcode(), c.wqe_counter()),
                (0, pi),
                "seed {seed}: {c:?} {:?}",
                (l.x.model.counters(), l.x.model.frame_drops())
            );
        }
        assert_empty(&l.x.model, &l.cq_x);
        for i in (0..N).filter(|i| i % 3 == 2) {
            let c = poll(&mut l.cq_y);
            assert_eq!((c.opcode(), c.byte_cnt()), (2, LEN as u32), "seed {seed}: send {i}");
            assert_eq!(
                bytes(&rbuf.buf, i * LEN, LEN),
                bytes(&src.buf, i * LEN, LEN),
                "seed {seed}"
            );
        }
        assert_empty(&l.y.model, &l.cq_y);
        for i in 0..N {
            match i % 3 {
                0 => assert_eq!(
                    bytes(&dst.buf, i * LEN, LEN),
                    bytes(&src.buf, i * LEN, LEN),
                    "seed {seed}: write {i}"
                ),
                1 => assert_eq!(
                    bytes(&back.buf, i * RLEN, RLEN),
                    bytes(&dst.buf, i * RLEN, RLEN),
                    "seed {seed}: read {i}"
                ),
                _ => {}
            }
        }
        let cx = l.x.model.counters();
        assert_eq!(cx.validation_failures, 0, "{:?}", l.x.model.violations());
        assert_eq!(l.y.model.counters().validation_failures, 0, "{:?}", l.y.model.violations());
        let icrc = l.x.model.frame_drops().get("icrc");
        assert!(icrc >= corrupt, "seed {seed}: corrupted received frames fail the ICRC: {icrc}");
        assert_eq!(l.y.model.frame_drops().get("icrc"), 0, "nothing sent is faulted");
        assert!(frames(&l.pcap) > 0);
    }
    assert!(scheduled > 0, "the seeds corrupt some of the first frames received");
}

/// The faults a receive schedule of `plan` from `seed` puts on its first `n` frames (one
/// draw per roll whatever the frame, so any frames show them).
fn first_faults(plan: FaultPlan, seed: u64, n: u8) -> Vec<FaultEvent> {
    let hub = Hub::new();
    let (a, b) = (Mac([2, 0, 0, 0, 0, 1]), Mac([2, 0, 0, 0, 0, 2]));
    let mut rx = FaultPort::recv_only(hub.port(a), plan, seed);
    let mut tx = hub.port(b);
    for i in 0..n {
        let mut f = vec![i; 60];
        f[..6].copy_from_slice(&a.0);
        f[6..12].copy_from_slice(&b.0);
        tx.send(&f).expect("hub");
        while rx.recv().expect("hub").is_some() {}
    }
    rx.recv_events().to_vec()
}

/// Everything the requester receives is dropped (ARP exempt): its requests reach the
/// responder, which executes and acknowledges them every time, but no ACK is heard: the
/// first WQE ends with `RETRY_EXC_ERR` after `retry_cnt` retransmissions, the others flush.
#[test]
fn a_deaf_requester_ends_in_retry_exceeded_then_flush() {
    let deaf = FaultPlan { drop: 1_000_000, ..FaultPlan::none() };
    let (mut l, _b) = recv_link("deaf_requester_rc", deaf, 7);
    let src = l.x.region(4096, 0x10_0000, RW);
    let dst = l.y.region(4096, 0x40_0000, RW);
    for _ in 0..3 {
        let pi = l.a.pi;
        let w = wqe(pi, l.a.qpn, 0x08, 0x08, 0, dst.va, dst.key.0, &[(src.va, 64, src.key.0)]);
        l.x.ring(&mut l.a, &w);
    }
    let c = poll(&mut l.cq_x);
    assert_eq!((c.opcode(), c.syndrome(), c.wqe_counter()), (13, 0x15, 0));
    for i in 1..3u16 {
        let c = poll(&mut l.cq_x);
        assert_eq!((c.opcode(), c.syndrome(), c.wqe_counter()), (13, 0x05, i));
    }
    assert_empty(&l.x.model, &l.cq_x);
    assert!(l.y.model.quiesce(WAIT));
    let (n, m) = (l.x.model.counters(), l.y.model.counters());
    assert_eq!(n.ack_timeouts, 8, "{n:?}");
    assert_eq!(n.retransmits, 7 * 3, "{n:?}");
    assert_eq!(n.frames_received, 0, "every frame received was dropped before the model");
    assert_eq!(m.frames_received, 8 * 3, "every attempt reached the responder: {m:?}");
    assert_eq!(m.duplicates, 7 * 3, "{m:?}");
}
