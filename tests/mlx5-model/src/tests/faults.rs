//! The RC transport over a faulty wire: two models on a [`Hub`], each behind a seeded
//! [`FaultPort`] (drops, duplicates, reordering, ICRC corruption) and a [`PcapTap`] whose
//! capture is left under `target/mlx5-model-pcap/` for Wireshark or tshark.
//!
//! Every request must complete exactly once, in order, with its data intact: WRITEs and
//! READs compared byte for byte, fetch-and-adds counted (a duplicate executed twice would
//! show). With every frame dropped, the first WQE ends with `RETRY_EXC_ERR` after
//! `retry_cnt` retransmissions and the rest are flushed.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use rdma_pmd::Mac;
use rdma_pmd_mlx5::control::{Access, Path};

use super::harness::*;
use crate::roce::pcap::SharedPcap;
use crate::roce::{FaultPlan, FaultPort, Hub, PcapTap};
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
    _cq_y: TCq,
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
    Link2 { x, y, cq_x, _cq_y: cq_y, a, pcap }
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
