//! UD and GSI (QP1) datagrams: between two models on a wire and within one model; the
//! 40-byte network header, Q_Keys, drops.

use rdma_pmd_mlx5::control::{Access, Control, QpParams, Service};

use super::harness::*;
use crate::{Gid, Model, ModelConfig, Reason, Wire};

const QKEY: u32 = 0x1111_2222;
const GSI_QKEY: u32 = 0x8001_0000;
const LW: Access = Access::LOCAL_WRITE;

/// One side: an environment with one datagram QP (8 receives of 4 entries), its CQ and a
/// 16 KiB region.
struct Side {
    env: Env,
    cq: TCq,
    qp: TQp,
    mem: Region,
}

fn side(env: Env, service: Service, qkey: u32) -> Side {
    let mut env = env;
    let cq = env.cq(5);
    let qp = env.qp_with(service, &cq, &cq, 5, Some(3), 6);
    ud_rts(&mut env.ctl, qp.qpn, qkey);
    let mem = env.region(16384, 0x30_0000, LW);
    Side { env, cq, qp, mem }
}

fn on(wire: &Wire) -> Env {
    Env::with_model(
        Model::with_config(ModelConfig { wire: Some(wire.clone()), ..Default::default() }).unwrap(),
    )
}

fn av(to: Gid, dqpn: u32, qkey: u32) -> Av {
    Av {
        qkey,
        dqpn,
        dgid: to.gid,
        dmac: to.mac,
        sgid_index: 0,
        hop_limit: 64,
        tclass: 0,
        udp_sport: 0xc123,
    }
}

/// Send `len` bytes of `from`'s memory (offset 0) to `av`; the sender's CQE must be a
/// success whatever happens to the datagram.
fn send(from: &mut Side, av: &Av, len: u32, imm: Option<u32>) {
    let sge = [(from.mem.va, len, from.mem.key.0)];
    let w = ud_wqe(from.qp.pi, from.qp.qpn, imm, av, &sge, None);
    from.env.ring(&mut from.qp, &w);
    let c = poll(&mut from.cq);
    assert_eq!(c.opcode(), 0, "REQ: {c:?} {:?}", from.env.model.violations());
    let op = if imm.is_some() { 0x0b } else { 0x0a };
    assert_eq!((c.sop_qpn(), c.byte_cnt()), (op << 24 | from.qp.qpn, len));
}

/// The IPv4 header checksum, computed here independently.
fn ip_checksum_ok(h: &[u8]) -> bool {
    let mut sum: u32 = h.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

/// Check the 40 bytes at `off` of `to`'s memory: zeros, then the IPv4 header of a datagram
/// of `len` payload bytes from `src` to `dst` with TTL 64.
fn check_grh(to: &Side, off: usize, src: Gid, dst: Gid, len: usize, imm: bool) {
    let g = bytes(&to.mem.buf, off, 40);
    assert_eq!(g[..20], [0; 20]);
    let ip = &g[20..];
    let total = 20 + 8 + 12 + 8 + if imm { 4 } else { 0 } + len + (4 - len % 4) % 4 + 4;
    assert_eq!((ip[0], ip[1]), (0x45, 0));
    assert_eq!(u16::from_be_bytes([ip[2], ip[3]]) as usize, total);
    assert_eq!((ip[6] & 0x40, ip[8], ip[9]), (0x40, 64, 17), "DF, TTL, UDP");
    assert!(ip_checksum_ok(ip), "{ip:02x?}");
    assert_eq!((&ip[12..16], &ip[16..20]), (&src.gid[12..], &dst.gid[12..]));
}

#[test]
fn ud_send_between_two_models_delivers_grh_then_payload() {
    let wire = Wire::new();
    let mut x = side(on(&wire), Service::Ud, QKEY);
    let mut y = side(on(&wire), Service::Ud, QKEY);
    let (gx, gy) = (x.env.model.gids()[0], y.env.model.gids()[0]);
    post_recv_sges(&mut y.qp, &[(y.mem.va, 24, y.mem.key.0), (y.mem.va + 1000, 2048, y.mem.key.0)]);
    fill(&x.mem.buf, 0, 301, 11);
    send(&mut x, &av(gy, y.qp.qpn, QKEY), 301, None);
    let r = poll(&mut y.cq);
    assert_eq!((r.opcode(), r.byte_cnt(), r.wqe_counter()), (2, 341, 0), "40 + 301 bytes");
    assert_eq!((r.rqpn(), r.grh(), r.l3_type()), (x.qp.qpn, 1, 2), "source QP, GRH, IPv4");
    // The 40 bytes straddle the two entries: 24 in the first, 16 in the second.
    let mut grh = bytes(&y.mem.buf, 0, 24);
    grh.extend(bytes(&y.mem.buf, 1000, 16));
    y.mem.buf.write_bytes(8000, &grh);
    check_grh(&y, 8000, gx, gy, 301, false);
    assert_eq!(bytes(&y.mem.buf, 1016, 301), bytes(&x.mem.buf, 0, 301));
    let k = y.env.model.counters();
    assert_eq!((k.datagrams_delivered, k.datagrams_dropped, k.resp_cqes), (1, 0, 1));
    assert_eq!(k.validation_failures, 0, "{:?}", y.env.model.violations());
    assert_eq!(x.env.model.counters().validation_failures, 0, "{:?}", x.env.model.violations());
}

#[test]
fn ud_send_within_one_model_with_immediate_and_inline() {
    let mut env = Env::new();
    let g = env.model.gids()[0];
    let cq = env.cq(5);
    let mut a = env.qp_with(Service::Ud, &cq, &cq, 5, Some(3), 6);
    let mut b = env.qp_with(Service::Ud, &cq, &cq, 5, Some(3), 6);
    ud_rts(&mut env.ctl, a.qpn, QKEY);
    ud_rts(&mut env.ctl, b.qpn, QKEY);
    let mem = env.region(8192, 0x30_0000, LW);
    let mut cq = cq;
    post_recv_sges(&mut b, &[(mem.va + 4096, 512, mem.key.0)]);
    let data = b"a datagram sent inline";
    let w = ud_wqe(a.pi, a.qpn, Some(0xfeed_f00d), &av(g, b.qpn, QKEY), &[], Some(data));
    env.ring(&mut a, &w);
    let mut got = [poll(&mut cq), poll(&mut cq)];
    got.sort_by_key(|c| c.opcode());
    let [req, resp] = got;
    assert_eq!((req.opcode(), req.byte_cnt()), (0, data.len() as u32));
    assert_eq!((resp.opcode(), resp.imm()), (3, 0xfeed_f00du32.to_be_bytes()), "RESP_SEND_IMM");
    assert_eq!(
        (resp.sop_qpn(), resp.rqpn(), resp.byte_cnt()),
        (b.qpn, a.qpn, 40 + data.len() as u32)
    );
    assert_eq!(bytes(&mem.buf, 4096 + 40, data.len()), data);
    let ip = bytes(&mem.buf, 4096 + 20, 20);
    assert_eq!(u16::from_be_bytes([ip[2], ip[3]]) as usize, 20 + 8 + 12 + 8 + 4 + 22 + 2 + 4);
    assert_eq!((&ip[12..16], &ip[16..20]), (&g.gid[12..], &g.gid[12..]));
    assert_eq!(env.model.counters().validation_failures, 0, "{:?}", env.model.violations());
}

#[test]
fn gsi_datagrams_reach_qp1_with_source_qp_1_and_the_pkey() {
    let wire = Wire::new();
    let mut x = side(on(&wire), Service::Gsi, GSI_QKEY);
    let mut y = side(on(&wire), Service::Gsi, GSI_QKEY);
    let gy = y.env.model.gids()[0];
    post_recv_sges(&mut y.qp, &[(y.mem.va, 40 + 256, y.mem.key.0)]);
    fill(&x.mem.buf, 0, 256, 0x40);
    send(&mut x, &av(gy, 1, GSI_QKEY), 256, None);
    let r = poll(&mut y.cq);
    assert_eq!((r.opcode(), r.byte_cnt(), r.rqpn()), (2, 296, 1), "from QP 1");
    assert_eq!(r.sop_qpn(), y.qp.qpn);
    assert_eq!(r.imm(), [0, 0, 0xff, 0xff], "P_Key 0xffff for QP1 (kernel handle_responder)");
    assert_eq!(bytes(&y.mem.buf, 40, 256), bytes(&x.mem.buf, 0, 256));
    // A second GSI QP on a port is refused.
    let p = QpParams {
        service: Service::Gsi,
        pd: y.env.pd,
        send_cq: y.cq.cqn,
        recv_cq: y.cq.cqn,
        log_sq_size: 2,
        log_rq_size: Some(1),
        log_rq_stride: 4,
        buf: y.mem.buf.bus(),
        dbrec: y.mem.buf.bus(),
        uar: y.env.uar,
    };
    assert!(y.env.ctl.create_qp(&p).is_err());
}

#[test]
fn qkey_mismatch_is_dropped_and_counted_and_the_sender_completes() {
    let wire = Wire::new();
    let mut x = side(on(&wire), Service::Ud, QKEY);
    let mut y = side(on(&wire), Service::Ud, QKEY);
    let gy = y.env.model.gids()[0];
    post_recv_sges(&mut y.qp, &[(y.mem.va, 512, y.mem.key.0)]);
    send(&mut x, &av(gy, y.qp.qpn, QKEY + 1), 8, None);
    // A controlled Q_Key (high bit) is replaced by the sender QP's own, which is right here.
    send(&mut x, &av(gy, y.qp.qpn, GSI_QKEY), 8, None);
    assert!(y.env.model.quiesce(WAIT));
    let r = poll(&mut y.cq);
    assert_eq!((r.opcode(), r.wqe_counter()), (2, 0), "the first accepted takes receive 0");
    assert_empty(&y.env.model, &y.cq);
    let k = y.env.model.counters();
    assert_eq!((k.datagrams_dropped, k.datagrams_delivered), (1, 1));
    let v = y.env.model.violations();
    let want = Reason::QkeyMismatch { qpn: y.qp.qpn, qkey: QKEY + 1, expected: QKEY };
    assert!(v.iter().any(|v| v.reason == want), "{v:?}");
    // And the other way: a UD QP whose own Q_Key is not QP1's cannot reach QP1 with the
    // controlled 0x80010000 (its own Q_Key is sent instead).
    let mut g = side(on(&wire), Service::Gsi, GSI_QKEY);
    post_recv_sges(&mut g.qp, &[(g.mem.va, 512, g.mem.key.0)]);
    let gg = g.env.model.gids()[0];
    send(&mut x, &av(gg, 1, GSI_QKEY), 8, None);
    // The sender's completion does not mean the frame reached g's port yet (the wire hands
    // it over on its own thread): wait, bounded, for g to count it.
    let t0 = std::time::Instant::now();
    while g.env.model.counters().datagrams_dropped == 0 {
        assert!(t0.elapsed() < WAIT, "the datagram never reached QP1's port");
        std::thread::yield_now();
    }
    assert!(g.env.model.quiesce(WAIT));
    assert_empty(&g.env.model, &g.cq);
    assert_eq!(g.env.model.counters().datagrams_dropped, 1);
}

#[test]
fn datagram_without_a_receive_or_a_qp_is_dropped_and_counted() {
    let wire = Wire::new();
    let mut x = side(on(&wire), Service::Ud, QKEY);
    let y = side(on(&wire), Service::Ud, QKEY);
    let gy = y.env.model.gids()[0];
    send(&mut x, &av(gy, y.qp.qpn, QKEY), 8, None);
    send(&mut x, &av(gy, 0x77_7777, QKEY), 8, None);
    let mut wrong_mac = av(gy, y.qp.qpn, QKEY);
    wrong_mac.dmac[5] ^= 1;
    send(&mut x, &wrong_mac, 8, None);
    // The sender's engine first (its frames are then in the hub), then the receiver's.
    assert!(x.env.model.quiesce(WAIT));
    assert!(y.env.model.quiesce(WAIT));
    assert_empty(&y.env.model, &y.cq);
    assert_eq!(y.env.model.counters().datagrams_dropped, 2);
    // The sender cannot tell: the frame to a MAC nobody has dies in the hub.
    assert_eq!(wire.stats().unknown_dst, 1, "{:?}", wire.stats());
    let v = y.env.model.violations();
    assert!(v.iter().any(|v| v.reason == Reason::DatagramNoReceive { qpn: y.qp.qpn }), "{v:?}");
    assert!(v.iter().any(|v| v.reason == Reason::DatagramNoQp { qpn: 0x77_7777 }), "{v:?}");
}

#[test]
fn datagram_longer_than_the_mtu_fails_at_the_sender() {
    let wire = Wire::new();
    let mut x = side(on(&wire), Service::Ud, QKEY);
    let y = side(on(&wire), Service::Ud, QKEY);
    let gy = y.env.model.gids()[0];
    let w =
        ud_wqe(0, x.qp.qpn, None, &av(gy, y.qp.qpn, QKEY), &[(x.mem.va, 1025, x.mem.key.0)], None);
    x.env.ring(&mut x.qp, &w);
    let c = poll(&mut x.cq);
    assert_eq!((c.opcode(), c.syndrome()), (13, 0x01), "LOCAL_LENGTH");
    assert_eq!(c.vendor_err(), Reason::DatagramTooLong { len: 0, mtu: 0 }.vendor_code());
    assert!(y.env.model.quiesce(WAIT));
    assert_eq!(y.env.model.counters().datagrams_dropped, 0, "nothing left the port");
}

#[test]
fn ud_receive_too_short_completes_in_error_at_the_receiver() {
    let wire = Wire::new();
    let mut x = side(on(&wire), Service::Ud, QKEY);
    let mut y = side(on(&wire), Service::Ud, QKEY);
    let gy = y.env.model.gids()[0];
    post_recv_sges(&mut y.qp, &[(y.mem.va, 40 + 7, y.mem.key.0)]);
    send(&mut x, &av(gy, y.qp.qpn, QKEY), 8, None);
    let r = poll(&mut y.cq);
    assert_eq!((r.opcode(), r.syndrome()), (14, 0x01));
    assert_eq!(y.env.model.qp_state(y.qp.qpn), Some(crate::QpState::Error));
}
