use super::harness::*;
use crate::{QpState, Reason};

fn setup(rnr_retry: u8) -> Pair {
    Pair::new(|env, a, b| {
        let lo = rdma_pmd_mlx5::control::Path::Loopback;
        rts(&mut env.ctl, a.qpn, b.qpn, lo, 0x200, 0x300, rnr_retry);
        rts(&mut env.ctl, b.qpn, a.qpn, lo, 0x300, 0x200, 7);
    })
}

fn write_imm(s: &mut Pair, len: u32, imm: u32) -> u16 {
    let pi = s.a.pi;
    let sges = if len == 0 { vec![] } else { vec![(s.src.va, len, s.src.key.0)] };
    let w = wqe(pi, s.a.qpn, 0x09, 0x08, imm, s.dst.va + 64, s.dst.key.0, &sges);
    s.env.ring(&mut s.a, &w);
    pi
}

#[test]
fn write_with_imm_consumes_a_receive_and_writes_a_responder_cqe() {
    let mut s = setup(7);
    fill(&s.src.buf, 0, 300, 9);
    post_recv(&mut s.b, 0, 0, 0x100); // imm-only receive: zero-length scatter entry
    post_recv(&mut s.b, 0, 0, 0x100);
    for (n, len) in [(0u16, 300u32), (1, 0)] {
        let pi = write_imm(&mut s, len, 0xdead_beef + u32::from(n));
        let c = poll(&mut s.cq_a);
        assert_eq!((c.opcode(), c.wqe_counter()), (0, pi));
        assert_eq!(c.sop_qpn(), 0x0900_0000 | s.a.qpn, "s_wqe_opcode 0x09");
        let r = poll(&mut s.cq_b);
        assert_eq!(r.opcode(), 1, "RESP_WR_IMM");
        assert_eq!(r.imm(), (0xdead_beef + u32::from(n)).to_be_bytes());
        assert_eq!(r.byte_cnt(), len);
        assert_eq!(r.wqe_counter(), n, "receive WQE index");
        assert_eq!(r.sop_qpn(), s.b.qpn);
        assert_eq!(r.rqpn(), s.a.qpn);
    }
    assert_eq!(bytes(&s.dst.buf, 64, 300), bytes(&s.src.buf, 0, 300));
    let k = s.env.model.counters();
    assert_eq!((k.recv_consumed, k.resp_cqes, k.rnr_naks), (2, 2, 0));
    assert_eq!(k.validation_failures, 0, "{:?}", s.env.model.violations());
}

#[test]
fn no_receive_and_no_rnr_retries_is_an_rnr_error() {
    let mut s = setup(0);
    fill(&s.src.buf, 0, 16, 1);
    write_imm(&mut s, 16, 1);
    let c = poll(&mut s.cq_a);
    assert_eq!((c.opcode(), c.syndrome()), (13, 0x16));
    assert_eq!(c.vendor_err(), Reason::RnrRetryExceeded { qpn: 0 }.vendor_code());
    assert_eq!(bytes(&s.dst.buf, 64, 16), [0; 16], "nothing written before the RNR NAK");
    assert_eq!(s.env.model.qp_state(s.a.qpn), Some(QpState::Error));
    assert_eq!(s.env.model.qp_state(s.b.qpn), Some(QpState::Rts));
    assert_empty(&s.env.model, &s.cq_b);
}

#[test]
fn rnr_retries_wait_for_a_receive() {
    let mut s = setup(7); // 7 = retry forever
    fill(&s.src.buf, 0, 16, 1);
    write_imm(&mut s, 16, 5);
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(peek(&s.cq_a).is_none(), "stalled on RNR");
    assert!(s.env.model.counters().rnr_naks >= 2, "retried");
    post_recv(&mut s.b, 0, 0, 0x100);
    assert_eq!(poll(&mut s.cq_a).opcode(), 0);
    assert_eq!(poll(&mut s.cq_b).opcode(), 1);
    assert_eq!(bytes(&s.dst.buf, 64, 16), bytes(&s.src.buf, 0, 16));
}

#[test]
fn limited_rnr_retries_run_out() {
    let mut s = setup(2);
    write_imm(&mut s, 0, 5);
    let c = poll(&mut s.cq_a);
    assert_eq!(c.syndrome(), 0x16);
    assert_eq!(s.env.model.counters().rnr_naks, 3, "first try + 2 retries");
}
