//! RC SEND/RECV, RDMA READ and atomics between two QPs of one model, and their errors.

use rdma_pmd_mlx5::control::{Access, Path, Service};

use super::harness::*;
use crate::{Event, QpState, Reason};

const ALL: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC);

/// Two RC QPs on one model, each with 8 receive WQEs of 4 scatter entries, connected by
/// loopback; `b` grants `b_access` as responder. `ra` is `a`'s memory, `rb` is `b`'s.
struct Rc {
    env: Env,
    cq_a: TCq,
    cq_b: TCq,
    a: TQp,
    b: TQp,
    ra: Region,
    rb: Region,
}

fn setup_with(b_access: Access, rnr_retry: u8) -> Rc {
    let mut env = Env::new();
    let cq_a = env.cq(5);
    let cq_b = env.cq(5);
    let a = env.qp_with(Service::Rc, &cq_a, &cq_a, 5, Some(3), 6);
    let b = env.qp_with(Service::Rc, &cq_b, &cq_b, 5, Some(3), 6);
    rts_with(&mut env.ctl, a.qpn, b.qpn, Path::Loopback, (0x10, 0x20), rnr_retry, ALL);
    rts_with(&mut env.ctl, b.qpn, a.qpn, Path::Loopback, (0x20, 0x10), 7, b_access);
    let ra = env.region(8192, 0x10_0000, ALL);
    let rb = env.region(8192, 0x20_0000, ALL);
    Rc { env, cq_a, cq_b, a, b, ra, rb }
}

fn setup() -> Rc {
    setup_with(ALL, 7)
}

fn expect_req(s: &mut Rc, opcode: u8, byte_cnt: u32) -> Cqe {
    let c = poll(&mut s.cq_a);
    assert_eq!(c.opcode(), 0, "REQ: {c:?} {:?}", s.env.model.violations());
    assert_eq!(c.sop_qpn(), u32::from(opcode) << 24 | s.a.qpn);
    assert_eq!(c.byte_cnt(), byte_cnt);
    c
}

/// The requester's error CQE: `syndrome`, and the vendor code of what the requester knows
/// (a NAK's class for a remote error; `r` itself for a local one). A remote error's detailed
/// reason `r` is in the log, written by the responder.
fn expect_req_err(s: &mut Rc, syndrome: u8, r: Reason) -> Cqe {
    let c = poll(&mut s.cq_a);
    let v = s.env.model.violations();
    assert_eq!((c.opcode(), c.syndrome()), (13, syndrome), "{v:?}");
    let nak = match syndrome {
        0x12 => Some(Reason::NakInvalidRequest { psn: 0 }),
        0x13 => Some(Reason::NakRemoteAccess { psn: 0 }),
        0x14 => Some(Reason::NakRemoteOperational { psn: 0 }),
        _ => None,
    };
    assert_eq!(c.vendor_err(), nak.unwrap_or(r).vendor_code(), "{v:?}");
    let d = std::mem::discriminant(&r);
    assert!(v.iter().any(|v| std::mem::discriminant(&v.reason) == d), "{r:?} not in {v:?}");
    c
}

#[test]
fn read_with_one_and_several_sges_fills_them_in_order() {
    let mut s = setup();
    fill(&s.rb.buf, 100, 300, 7);
    let w = read_wqe(s.a.pi, s.a.qpn, s.rb.va + 100, s.rb.key.0, &[(s.ra.va, 300, s.ra.key.0)]);
    s.env.ring(&mut s.a, &w);
    expect_req(&mut s, 0x10, 300);
    assert_eq!(bytes(&s.ra.buf, 0, 300), bytes(&s.rb.buf, 100, 300));

    let k = s.ra.key.0;
    let sges = [(s.ra.va + 1000, 100, k), (s.ra.va + 3000, 150, k), (s.ra.va + 5000, 50, k)];
    let w = read_wqe(s.a.pi, s.a.qpn, s.rb.va + 100, s.rb.key.0, &sges);
    s.env.ring(&mut s.a, &w);
    expect_req(&mut s, 0x10, 300);
    let src = bytes(&s.rb.buf, 100, 300);
    assert_eq!(bytes(&s.ra.buf, 1000, 100), src[..100]);
    assert_eq!(bytes(&s.ra.buf, 3000, 150), src[100..250]);
    assert_eq!(bytes(&s.ra.buf, 5000, 50), src[250..]);
    assert_eq!(bytes(&s.ra.buf, 5050, 8), [0; 8], "nothing past the last SGE");
    assert_eq!(bytes(&s.rb.buf, 100, 300), src, "the source is untouched");
    let k = s.env.model.counters();
    assert_eq!((k.bytes_read, k.resp_cqes), (600, 0), "a READ consumes no receive");
    assert_eq!(k.validation_failures, 0, "{:?}", s.env.model.violations());
    assert_empty(&s.env.model, &s.cq_b);
}

#[test]
fn send_scatters_into_the_receive_in_order_and_completes_both_sides() {
    let mut s = setup();
    let (kb, ka) = (s.rb.key.0, s.ra.key.0);
    post_recv_sges(
        &mut s.b,
        &[(s.rb.va, 10, kb), (s.rb.va + 500, 100, kb), (s.rb.va + 1000, 500, kb)],
    );
    fill(&s.ra.buf, 0, 60, 1);
    fill(&s.ra.buf, 200, 100, 90);
    let w = send_wqe(s.a.pi, s.a.qpn, 0x0a, 0, &[(s.ra.va, 60, ka), (s.ra.va + 200, 100, ka)]);
    s.env.ring(&mut s.a, &w);
    expect_req(&mut s, 0x0a, 160);
    let r = poll(&mut s.cq_b);
    assert_eq!((r.opcode(), r.byte_cnt(), r.wqe_counter()), (2, 160, 0), "RESP_SEND");
    assert_eq!((r.sop_qpn(), r.rqpn()), (s.b.qpn, s.a.qpn));
    let mut msg = bytes(&s.ra.buf, 0, 60);
    msg.extend(bytes(&s.ra.buf, 200, 100));
    assert_eq!(bytes(&s.rb.buf, 0, 10), msg[..10]);
    assert_eq!(bytes(&s.rb.buf, 500, 100), msg[10..110]);
    assert_eq!(bytes(&s.rb.buf, 1000, 50), msg[110..]);
    assert_eq!(bytes(&s.rb.buf, 1050, 8), [0; 8]);
    assert_eq!(bytes(&s.rb.buf, 10, 8), [0; 8], "the gap between entries is untouched");
    let k = s.env.model.counters();
    assert_eq!((k.recv_consumed, k.resp_cqes), (1, 1));
    assert_eq!(k.validation_failures, 0, "{:?}", s.env.model.violations());
}

#[test]
fn send_with_immediate_and_inline_send() {
    let mut s = setup();
    let kb = s.rb.key.0;
    post_recv_sges(&mut s.b, &[(s.rb.va, 256, kb)]);
    post_recv_sges(&mut s.b, &[(s.rb.va + 256, 256, kb)]);
    fill(&s.ra.buf, 0, 32, 3);
    let w = send_wqe(s.a.pi, s.a.qpn, 0x0b, 0x1234_5678, &[(s.ra.va, 32, s.ra.key.0)]);
    s.env.ring(&mut s.a, &w);
    expect_req(&mut s, 0x0b, 32);
    let r = poll(&mut s.cq_b);
    assert_eq!((r.opcode(), r.byte_cnt(), r.imm()), (3, 32, 0x1234_5678u32.to_be_bytes()));
    assert_eq!(bytes(&s.rb.buf, 0, 32), bytes(&s.ra.buf, 0, 32));

    let data: Vec<u8> = (0..45).collect();
    let w = send_inline_wqe(s.a.pi, s.a.qpn, &data);
    s.env.ring(&mut s.a, &w);
    expect_req(&mut s, 0x0a, 45);
    let r = poll(&mut s.cq_b);
    assert_eq!((r.opcode(), r.byte_cnt(), r.wqe_counter()), (2, 45, 1));
    assert_eq!(bytes(&s.rb.buf, 256, 45), data);
    assert_eq!(s.env.model.counters().validation_failures, 0);
}

#[test]
fn compare_and_swap_and_fetch_and_add_work_on_big_endian_words() {
    let mut s = setup();
    s.rb.buf.write_bytes(64, &100u64.to_be_bytes());
    let (remote, result) = ((s.rb.va + 64, s.rb.key.0), (s.ra.va + 8, s.ra.key.0));
    // CAS that matches: the word becomes the swap value, the old value comes back.
    let w = atomic_wqe(s.a.pi, s.a.qpn, 0x11, remote, (7, 100), result);
    s.env.ring(&mut s.a, &w);
    expect_req(&mut s, 0x11, 8);
    assert_eq!(bytes(&s.rb.buf, 64, 8), 7u64.to_be_bytes());
    assert_eq!(bytes(&s.ra.buf, 8, 8), 100u64.to_be_bytes());
    // CAS that does not match: nothing changes, the current value comes back.
    let w = atomic_wqe(s.a.pi, s.a.qpn, 0x11, remote, (9, 100), result);
    s.env.ring(&mut s.a, &w);
    expect_req(&mut s, 0x11, 8);
    assert_eq!(bytes(&s.rb.buf, 64, 8), 7u64.to_be_bytes());
    assert_eq!(bytes(&s.ra.buf, 8, 8), 7u64.to_be_bytes());
    // FAA: the sum lands, the old value comes back; it carries across bytes and wraps.
    let w = atomic_wqe(s.a.pi, s.a.qpn, 0x12, remote, (0x1_0000_00f9, 0), result);
    s.env.ring(&mut s.a, &w);
    expect_req(&mut s, 0x12, 8);
    assert_eq!(bytes(&s.rb.buf, 64, 8), 0x1_0000_0100u64.to_be_bytes());
    assert_eq!(bytes(&s.ra.buf, 8, 8), 7u64.to_be_bytes());
    let w = atomic_wqe(s.a.pi, s.a.qpn, 0x12, remote, (u64::MAX, 0), result);
    s.env.ring(&mut s.a, &w);
    expect_req(&mut s, 0x12, 8);
    assert_eq!(bytes(&s.rb.buf, 64, 8), 0x1_0000_00ffu64.to_be_bytes(), "wrapped past 2^64");
    assert_eq!(bytes(&s.rb.buf, 56, 8), [0; 8], "only the 8 bytes change");
    let k = s.env.model.counters();
    assert_eq!(k.atomics, 4);
    assert_eq!(k.validation_failures, 0, "{:?}", s.env.model.violations());
}

#[test]
fn receive_without_local_write_fails_both_sides() {
    let mut s = setup();
    let ro = s.env.region(4096, 0x40_0000, Access::REMOTE_READ);
    post_recv_sges(&mut s.b, &[(ro.va, 64, ro.key.0)]);
    post_recv_sges(&mut s.b, &[(s.rb.va, 64, s.rb.key.0)]);
    let w = send_wqe(s.a.pi, s.a.qpn, 0x0a, 0, &[(s.ra.va, 16, s.ra.key.0)]);
    s.env.ring(&mut s.a, &w);
    expect_req_err(&mut s, 0x14, Reason::RecvNoLocalWrite { qpn: 0, lkey: 0 });
    let r = poll(&mut s.cq_b);
    assert_eq!((r.opcode(), r.syndrome(), r.wqe_counter()), (14, 0x04, 0), "LOCAL_PROT at b");
    let f = poll(&mut s.cq_b);
    assert_eq!((f.opcode(), f.syndrome(), f.wqe_counter()), (14, 0x05, 1), "the next flushes");
    assert_eq!(s.env.model.qp_state(s.b.qpn), Some(QpState::Error));
    assert_eq!(s.env.model.qp_state(s.a.qpn), Some(QpState::Error));
    assert_eq!(bytes(&ro.buf, 0, 16), [0; 16]);
    assert_empty(&s.env.model, &s.cq_b);
}

#[test]
fn read_into_a_region_without_local_write_is_a_local_protection_error() {
    let mut s = setup();
    let ro = s.env.region(4096, 0x40_0000, Access::REMOTE_READ | Access::REMOTE_WRITE);
    fill(&s.rb.buf, 0, 64, 5);
    let w = read_wqe(s.a.pi, s.a.qpn, s.rb.va, s.rb.key.0, &[(ro.va, 64, ro.key.0)]);
    s.env.ring(&mut s.a, &w);
    let c = expect_req_err(&mut s, 0x04, Reason::LkeyNoLocalWrite { lkey: 0 });
    assert_eq!(c.sop_qpn() >> 24, 0x10);
    assert_eq!(bytes(&ro.buf, 0, 64), [0; 64]);
    assert_eq!(s.env.model.counters().bytes_read, 0, "never sent");
    assert_eq!(s.env.model.qp_state(s.b.qpn), Some(QpState::Rts));
}

#[test]
fn unaligned_atomic_is_a_remote_invalid_request() {
    let mut s = setup();
    let w =
        atomic_wqe(s.a.pi, s.a.qpn, 0x12, (s.rb.va + 4, s.rb.key.0), (1, 0), (s.ra.va, s.ra.key.0));
    s.env.ring(&mut s.a, &w);
    expect_req_err(&mut s, 0x12, Reason::AtomicMisaligned { addr: 0 });
    assert_eq!(s.env.model.qp_state(s.b.qpn), Some(QpState::Error));
    assert!(s.env.model.events().contains(&Event::QpRequestError { qpn: s.b.qpn }));
    assert_eq!(bytes(&s.rb.buf, 0, 16), [0; 16]);
}

#[test]
fn rkeys_and_qps_without_the_right_are_remote_access_errors() {
    // rkey without remote read, rkey without remote atomic, QP without rre, QP without rae.
    for case in 0..4 {
        let b_access = match case {
            2 => ALL.difference(Access::REMOTE_READ),
            3 => ALL.difference(Access::REMOTE_ATOMIC),
            _ => ALL,
        };
        let mut s = setup_with(b_access, 7);
        let no_read = s.env.region(4096, 0x40_0000, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        let no_atomic = s.env.region(4096, 0x50_0000, Access::LOCAL_WRITE | Access::REMOTE_READ);
        let (ka, va) = (s.ra.key.0, s.ra.va);
        let (w, why) = match case {
            0 => (
                read_wqe(0, s.a.qpn, no_read.va, no_read.key.0, &[(va, 8, ka)]),
                Reason::RkeyNoRemoteRead { rkey: 0 },
            ),
            1 => (
                atomic_wqe(0, s.a.qpn, 0x11, (no_atomic.va, no_atomic.key.0), (1, 0), (va, ka)),
                Reason::RkeyNoRemoteAtomic { rkey: 0 },
            ),
            2 => (
                read_wqe(0, s.a.qpn, s.rb.va, s.rb.key.0, &[(va, 8, ka)]),
                Reason::QpNoRemoteRead { qpn: 0 },
            ),
            _ => (
                atomic_wqe(0, s.a.qpn, 0x12, (s.rb.va, s.rb.key.0), (1, 0), (va, ka)),
                Reason::QpNoRemoteAtomic { qpn: 0 },
            ),
        };
        s.env.ring(&mut s.a, &w);
        // An R_Key without the right is a remote access error; a QP that does not enable
        // the operation answers "invalid request" (rxe `check_op_valid`:
        // RESPST_ERR_UNSUPPORTED_OPCODE, class C, AETH_NAK_INVALID_REQ).
        let qp_lacks = case >= 2;
        expect_req_err(&mut s, if qp_lacks { 0x12 } else { 0x13 }, why);
        assert_eq!(s.env.model.qp_state(s.b.qpn), Some(QpState::Error), "case {case}");
        let ev = if qp_lacks {
            Event::QpRequestError { qpn: s.b.qpn }
        } else {
            Event::QpAccessError { qpn: s.b.qpn }
        };
        assert!(s.env.model.events().contains(&ev), "case {case}");
    }
}

#[test]
fn message_longer_than_the_receive_fails_both_sides() {
    let mut s = setup();
    let kb = s.rb.key.0;
    post_recv_sges(&mut s.b, &[(s.rb.va, 16, kb), (s.rb.va + 100, 16, kb)]);
    post_recv_sges(&mut s.b, &[(s.rb.va + 200, 64, kb)]);
    let w = send_wqe(s.a.pi, s.a.qpn, 0x0a, 0, &[(s.ra.va, 33, s.ra.key.0)]);
    s.env.ring(&mut s.a, &w);
    expect_req_err(&mut s, 0x12, Reason::RecvTooShort { qpn: 0, len: 0, room: 0 });
    let r = poll(&mut s.cq_b);
    assert_eq!((r.opcode(), r.syndrome(), r.wqe_counter()), (14, 0x01, 0), "LOCAL_LENGTH");
    assert_eq!(poll(&mut s.cq_b).syndrome(), 0x05, "the second receive is flushed");
    assert_eq!(s.env.model.qp_state(s.a.qpn), Some(QpState::Error));
    assert_eq!(s.env.model.qp_state(s.b.qpn), Some(QpState::Error));
    let v = s.env.model.violations();
    assert!(
        v.iter().any(|v| v.reason == Reason::RecvTooShort { qpn: s.b.qpn, len: 33, room: 32 }),
        "{v:?}"
    );
}

#[test]
fn send_without_a_receive_runs_out_of_rnr_retries() {
    let mut s = setup_with(ALL, 1);
    let w = send_wqe(s.a.pi, s.a.qpn, 0x0a, 0, &[(s.ra.va, 8, s.ra.key.0)]);
    s.env.ring(&mut s.a, &w);
    expect_req_err(&mut s, 0x16, Reason::RnrRetryExceeded { qpn: 0 });
    assert_eq!(s.env.model.counters().rnr_naks, 2, "first try + 1 retry");
    assert_eq!(s.env.model.qp_state(s.b.qpn), Some(QpState::Rts));
    assert_empty(&s.env.model, &s.cq_b);
}

#[test]
fn malformed_atomic_and_read_wqes_are_local_errors() {
    // An atomic whose result segment is 16 bytes: local length (ibv_poll_cq(3)).
    let mut s = setup();
    let mut w = atomic_wqe(0, s.a.qpn, 0x11, (s.rb.va, s.rb.key.0), (1, 0), (s.ra.va, s.ra.key.0));
    w[48..52].copy_from_slice(&16u32.to_be_bytes());
    s.env.ring(&mut s.a, &w);
    expect_req_err(&mut s, 0x01, Reason::AtomicLength { len: 0 });
    // A READ into an inline segment: malformed.
    let mut s = setup();
    let mut w = read_wqe(0, s.a.qpn, s.rb.va, s.rb.key.0, &[(0, 0, 0)]);
    w[32..36].copy_from_slice(&0x8000_0004u32.to_be_bytes());
    s.env.ring(&mut s.a, &w);
    expect_req_err(&mut s, 0x02, Reason::InlineNotAllowed { opcode: 0 });
    // An atomic with no result segment at all.
    let mut s = setup();
    let mut w = atomic_wqe(0, s.a.qpn, 0x12, (s.rb.va, s.rb.key.0), (1, 0), (s.ra.va, s.ra.key.0));
    w[7] = 3;
    w[48..64].fill(0);
    s.env.ring(&mut s.a, &w);
    expect_req_err(&mut s, 0x02, Reason::AtomicSegments { count: 0 });
}
