//! A QP entering ERR with requests on the wire (IBTA vol 1 §10.3.1, §11.6.2; rxe
//! `rxe_comp.c` flushing its send queue): every WQE not yet completed — sent and waiting for
//! its ACK, READ response or atomic response, or not yet started — completes exactly once,
//! in the order posted, with `WR_FLUSH_ERR` (0x05); the responses that arrive afterwards
//! complete nothing and are counted as dropped.
//!
//! The requester's port holds back every response it receives while its gate is shut (the
//! responder answers; the requester just does not hear it yet), so the WQEs are certainly
//! outstanding when the QP is moved to ERR, and the answers are late once the gate opens.

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_pmd::{Mac, QpNum};
use rdma_pmd_mlx5::control::{Access, Control, Path, Transition};

use super::harness::*;
use crate::roce::{Hub, HubPort, Port, PortError, RocePacket};
use crate::wire::{WIRE_MAX_FRAME, WIRE_QUEUE};
use crate::{Gid, Model, ModelConfig};

fn gid(last: u8) -> Gid {
    let gid = Ipv4Addr::new(10, 7, 0, last).to_ipv6_mapped().octets();
    Gid { gid, mac: [0x02, 0x4d, 0x46, 0x4c, 0, last] }
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

/// Holds back the response packets it receives while `shut` (requests pass).
struct Gate {
    inner: HubPort,
    shut: Arc<AtomicBool>,
    held: VecDeque<Vec<u8>>,
}

impl Port for Gate {
    fn send(&mut self, frame: &[u8]) -> Result<(), PortError> {
        self.inner.send(frame)
    }
    fn recv(&mut self) -> Result<Option<Vec<u8>>, PortError> {
        if !self.shut.load(Ordering::Acquire) {
            if let Some(f) = self.held.pop_front() {
                return Ok(Some(f));
            }
            return self.inner.recv();
        }
        while let Some(f) = self.inner.recv()? {
            if RocePacket::parse(&f).is_ok_and(|p| p.bth.opcode.is_request()) {
                return Ok(Some(f));
            }
            self.held.push_back(f);
        }
        Ok(None)
    }
}

/// The requester x (behind a shut [`Gate`]) and the responder y, one RC QP each.
struct Setup {
    x: Env,
    y: Env,
    cq_x: TCq,
    cq_y: TCq,
    a: TQp,
    b: TQp,
    shut: Arc<AtomicBool>,
}

fn setup() -> Setup {
    let hub = Hub::with_limits(WIRE_MAX_FRAME, WIRE_QUEUE);
    let (gx, gy) = (gid(1), gid(2));
    let shut = Arc::new(AtomicBool::new(true));
    let gate = Gate { inner: hub.port(Mac(gx.mac)), shut: shut.clone(), held: VecDeque::new() };
    let cfg = ModelConfig { gids: vec![gx], ..Default::default() }.with_port(gate);
    let mut x = Env::with_model(Model::with_config(cfg).expect("model"));
    let cfg = ModelConfig { gids: vec![gy], ..Default::default() }.with_port(hub.port(Mac(gy.mac)));
    let mut y = Env::with_model(Model::with_config(cfg).expect("model"));
    let cq_x = x.cq(7);
    let cq_y = y.cq(6);
    let a = x.qp(&cq_x, &cq_x, 7, Some(4));
    let b = y.qp(&cq_y, &cq_y, 6, Some(4));
    let all = RW | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    rts_with(&mut x.ctl, a.qpn, b.qpn, path_to(gy), (0x10, 0x20), 7, all);
    rts_with(&mut y.ctl, b.qpn, a.qpn, path_to(gx), (0x20, 0x10), 7, all);
    Setup { x, y, cq_x, cq_y, a, b, shut }
}

/// Wait (bounded) until `f` holds.
fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Open the gate, let the late responses in, and check they completed nothing.
fn late_responses_do_nothing(s: &mut Setup) {
    let before = s.x.model.counters();
    s.shut.store(false, Ordering::Release);
    let sent_by_y = s.y.model.counters().frames_sent;
    wait_for("the late responses", || s.x.model.counters().frames_received >= sent_by_y);
    assert_empty(&s.x.model, &s.cq_x);
    let after = s.x.model.counters();
    assert!(after.drop_no_qp - before.drop_no_qp >= 1, "{after:?}");
    assert_eq!(after.req_cqes, 0, "{after:?}");
    assert_eq!(after.wqes_flushed, before.wqes_flushed, "{after:?}");
}

/// A WRITE, a SEND, a READ and a fetch-and-add on the wire, none acknowledged (the
/// responder executed them all), then MODIFY to ERR: four flushes in order, then the
/// posted receive's flush; the late ACKs and responses are dropped.
#[test]
fn requests_on_the_wire_flush_once_each_in_order_when_the_qp_is_moved_to_err() {
    let mut s = setup();
    let src = s.x.region(4096, 0x10_0000, RW);
    let back = s.x.region(4096, 0x20_0000, RW);
    let dst = s.y.region(4096, 0x40_0000, RW | Access::REMOTE_READ | Access::REMOTE_ATOMIC);
    let rbuf = s.y.region(4096, 0x50_0000, RW);
    let xr = s.x.region(4096, 0x60_0000, RW);
    fill(&src.buf, 0, 4096, 0x11);
    post_recv(&mut s.b, rbuf.va, 4096, rbuf.key.0);
    post_recv(&mut s.a, xr.va, 4096, xr.key.0);
    let q = s.a.qpn;
    let mut posted = Vec::new();
    let w = wqe(s.a.pi, q, 0x08, 0x08, 0, dst.va, dst.key.0, &[(src.va, 1500, src.key.0)]);
    posted.push((s.a.pi, 0x08));
    s.x.ring(&mut s.a, &w);
    let w = send_wqe(s.a.pi, q, 0x0a, 0, &[(src.va, 100, src.key.0)]);
    posted.push((s.a.pi, 0x0a));
    s.x.ring(&mut s.a, &w);
    let w = read_wqe(s.a.pi, q, dst.va, dst.key.0, &[(back.va, 2000, back.key.0)]);
    posted.push((s.a.pi, 0x10));
    s.x.ring(&mut s.a, &w);
    let w = atomic_wqe(
        s.a.pi,
        q,
        0x12,
        (dst.va + 2048, dst.key.0),
        (1, 0),
        (back.va + 3000, back.key.0),
    );
    posted.push((s.a.pi, 0x12));
    s.x.ring(&mut s.a, &w);
    // The responder executed all four (its SEND completion shows the last but one).
    let c = poll(&mut s.cq_y);
    assert_eq!(c.opcode(), 2, "the responder's receive completion: {c:?}");
    wait_for("the fetch-and-add at the responder", || s.y.model.counters().atomics == 1);
    s.x.ctl.modify_qp(QpNum(q), &Transition::ToErr).unwrap();
    for &(pi, op) in &posted {
        let c = poll(&mut s.cq_x);
        assert_eq!(
            (c.opcode(), c.syndrome(), c.wqe_counter(), c.raw[56]),
            (13, 0x05, pi, op),
            "{c:?} {:?}",
            s.x.model.counters()
        );
    }
    let c = poll(&mut s.cq_x);
    assert_eq!((c.opcode(), c.syndrome(), c.wqe_counter()), (14, 0x05, 0), "the receive: {c:?}");
    let n = s.x.model.counters();
    assert_eq!(n.wqes_flushed, 5, "{n:?}");
    late_responses_do_nothing(&mut s);
    assert_eq!(bytes(&back.buf, 0, 2000), vec![0; 2000], "a flushed READ places nothing");
}

/// More WQEs than the requester's window: those on the wire flush first, oldest first,
/// then those never started, each once.
#[test]
fn on_the_wire_then_unstarted_wqes_flush_in_order() {
    let mut s = setup();
    let src = s.x.region(4096, 0x10_0000, RW);
    let dst = s.y.region(4096, 0x40_0000, RW);
    const N: u16 = crate::transport::requester::WINDOW_WQES as u16 + 6;
    for _ in 0..N {
        let w = wqe(s.a.pi, s.a.qpn, 0x08, 0x08, 0, dst.va, dst.key.0, &[(src.va, 64, src.key.0)]);
        s.x.ring(&mut s.a, &w);
    }
    wait_for("the window on the wire", || {
        s.y.model.counters().frames_received >= crate::transport::requester::WINDOW_WQES as u64
    });
    s.x.ctl.modify_qp(QpNum(s.a.qpn), &Transition::ToErr).unwrap();
    for pi in 0..N {
        let c = poll(&mut s.cq_x);
        assert_eq!((c.opcode(), c.syndrome(), c.wqe_counter()), (13, 0x05, pi), "{c:?}");
    }
    let n = s.x.model.counters();
    assert_eq!(n.wqes_flushed, u64::from(N), "{n:?}");
    late_responses_do_nothing(&mut s);
}

/// The QP enters ERR by itself (a class C error at its responder: the peer WRITEs with an
/// unknown R_Key) while its own WRITE waits for an ACK: that WRITE is flushed too.
#[test]
fn a_qp_entering_err_at_its_responder_flushes_its_requests_on_the_wire() {
    let mut s = setup();
    let src = s.x.region(4096, 0x10_0000, RW);
    let dst = s.y.region(4096, 0x40_0000, RW);
    let ysrc = s.y.region(4096, 0x70_0000, RW);
    let w = wqe(s.a.pi, s.a.qpn, 0x08, 0x08, 0, dst.va, dst.key.0, &[(src.va, 64, src.key.0)]);
    s.x.ring(&mut s.a, &w);
    wait_for("the WRITE at the responder", || s.y.model.counters().frames_received >= 1);
    let w = wqe(s.b.pi, s.b.qpn, 0x08, 0x08, 0, 0x9000, 0xdead, &[(ysrc.va, 64, ysrc.key.0)]);
    s.y.ring(&mut s.b, &w);
    let c = poll(&mut s.cq_x);
    assert_eq!((c.opcode(), c.syndrome(), c.wqe_counter()), (13, 0x05, 0), "{c:?}");
    // The receive queue (nothing posted) has nothing to flush.
    let c = poll(&mut s.cq_y);
    assert_eq!((c.opcode(), c.syndrome()), (13, 0x13), "the peer's REMOTE_ACCESS_ERR: {c:?}");
    late_responses_do_nothing(&mut s);
}
