use rdma_pmd::QpNum;
use rdma_pmd_hal::Mmio;
use rdma_pmd_mlx5::control::{Access, Control, MkeyParams, Transition, Translation};

use super::harness::*;
use crate::{Event, QpState, Reason};

fn setup() -> Pair {
    Pair::new(|env, a, b| env.connect_loopback(a, b))
}

fn write(s: &mut Pair, fm: u8, raddr: u64, rkey: u32, sges: &[(u64, u32, u32)]) -> u16 {
    let pi = s.a.pi;
    let w = wqe(pi, s.a.qpn, 0x08, fm, 0, raddr, rkey, sges);
    s.env.ring(&mut s.a, &w);
    pi
}

fn expect_err(s: &mut Pair, syndrome: u8, idx: u16) -> Cqe {
    let c = poll(&mut s.cq_a);
    assert_eq!(c.opcode(), 13, "REQ_ERR: {c:?}");
    assert_eq!(c.syndrome(), syndrome, "{:?}", s.env.model.violations());
    assert_eq!(c.wqe_counter(), idx);
    assert_eq!(c.sop_qpn() & 0xff_ffff, s.a.qpn);
    c
}

#[test]
fn bad_rkey_is_a_remote_access_error_then_everything_flushes() {
    let mut s = setup();
    // Two WQEs posted before the failure is seen (one doorbell for both), one after.
    let (src, dst) = (s.src.va, s.dst.va);
    let (lk, rk) = (s.src.key.0, s.dst.key.0);
    let bad = wqe(0, s.a.qpn, 0x08, 0x00, 0, dst, rk ^ 0x1, &[(src, 8, lk)]);
    post(&s.env.bar, &mut s.a, &bad, Ring::None);
    let next = wqe(1, s.a.qpn, 0x08, 0x00, 0, dst, rk, &[(src, 8, lk), (src, 8, lk), (src, 8, lk)]);
    s.env.ring(&mut s.a, &next);
    let c = expect_err(&mut s, 0x13, 0);
    // The requester knows the NAK; the responder (this model: loopback) logs the R_Key.
    assert_eq!(c.vendor_err(), Reason::NakRemoteAccess { psn: 0 }.vendor_code());
    let v = s.env.model.violations();
    assert!(v.iter().any(|v| matches!(v.reason, Reason::UnknownRkey { .. })), "{v:?}");
    assert_eq!(c.sop_qpn() >> 24, 0x08, "s_wqe_opcode");
    let f = expect_err(&mut s, 0x05, 1);
    assert_eq!(f.sop_qpn() >> 24, 0x08);
    assert_eq!(s.env.model.qp_state(s.a.qpn), Some(QpState::Error));
    // Posted afterwards: flushed too, one CQE per WQE (even unsignaled), counters by WQEBB.
    write(&mut s, 0x00, dst, rk, &[(src, 8, lk)]);
    expect_err(&mut s, 0x05, 3);
    write(&mut s, 0x08, dst, rk, &[(src, 8, lk)]);
    expect_err(&mut s, 0x05, 4);
    assert_empty(&s.env.model, &s.cq_a);
    // The responder QP saw an access violation: ERR, with an event. Nothing landed.
    assert_eq!(s.env.model.qp_state(s.b.qpn), Some(QpState::Error));
    assert!(s.env.model.events().contains(&Event::QpAccessError { qpn: s.b.qpn }));
    assert_eq!(bytes(&s.dst.buf, 0, 8), [0; 8]);
    let k = s.env.model.counters();
    assert_eq!(k.errors(crate::Syndrome::RemoteAccess), 1);
    assert_eq!(k.errors(crate::Syndrome::WrFlush), 3);
    assert_eq!((k.wqes_failed, k.wqes_flushed, k.wqes_executed), (1, 3, 0));
    let _ = &s.cq_b;
}

#[test]
fn bad_lkey_other_pd_and_local_bounds_are_local_protection_errors() {
    for case in 0..3 {
        let mut s = setup();
        let (src, dst, rk) = (s.src.va, s.dst.va, s.dst.key.0);
        let sge = match case {
            0 => (src, 8, 0x00ab_cd12),
            1 => {
                let pd2 = s.env.ctl.alloc_pd().unwrap();
                let buf = s.env.dma.alloc(4096, 4096).unwrap();
                use rdma_pmd_hal::Dma;
                let key = s
                    .env
                    .ctl
                    .create_mkey(&MkeyParams {
                        pd: pd2,
                        start: 0x90_0000,
                        len: 4096,
                        access: RW,
                        translation: Translation::Mtt { base: buf.bus(), page_shift: 12 },
                    })
                    .unwrap();
                (0x90_0000, 8, key.0)
            }
            _ => (src + 4090, 8, s.src.key.0),
        };
        write(&mut s, 0x00, dst, rk, &[sge]);
        let c = expect_err(&mut s, 0x04, 0);
        let want = [
            Reason::UnknownLkey { lkey: 0 },
            Reason::LkeyPdMismatch { lkey: 0 },
            Reason::LkeyOutOfBounds { lkey: 0, addr: 0, len: 0 },
        ][case]
            .vendor_code();
        assert_eq!(c.vendor_err(), want, "case {case}");
        // A local error does not touch the responder.
        assert_eq!(s.env.model.qp_state(s.b.qpn), Some(QpState::Rts));
    }
}

#[test]
fn remote_bounds_and_rights_are_remote_access_errors() {
    for case in 0..3 {
        let mut s = setup();
        let (src, lk) = (s.src.va, s.src.key.0);
        let (raddr, rkey) = match case {
            0 => (s.dst.va + 4093, s.dst.key.0),
            1 => {
                let ro = s.env.region(4096, 0x40_0000, Access::LOCAL_WRITE | Access::REMOTE_READ);
                (ro.va, ro.key.0)
            }
            _ => (s.dst.va - 1, s.dst.key.0),
        };
        write(&mut s, 0x08, raddr, rkey, &[(src, 4, lk)]);
        expect_err(&mut s, 0x13, 0);
    }
}

#[test]
fn zero_byte_count_means_two_gib() {
    // One zero-length data segment gathers 2^31 bytes: past the 4 KiB lkey -> 0x04.
    let mut s = setup();
    let (src, dst, lk, rk) = (s.src.va, s.dst.va, s.src.key.0, s.dst.key.0);
    write(&mut s, 0x08, dst, rk, &[(src, 0, lk)]);
    let c = expect_err(&mut s, 0x04, 0);
    assert_eq!(c.vendor_err(), Reason::LkeyOutOfBounds { lkey: 0, addr: 0, len: 0 }.vendor_code());
    let v = s.env.model.violations();
    assert!(
        v.iter().any(|v| matches!(v.reason, Reason::LkeyOutOfBounds { len: 0x8000_0000, .. })),
        "{v:?}"
    );
    // Two of them exceed the largest message: local length error.
    let mut s = setup();
    write(&mut s, 0x08, dst, rk, &[(src, 0, lk), (src, 0, lk)]);
    expect_err(&mut s, 0x01, 0);
}

#[test]
fn malformed_wqes_are_local_qp_operation_errors() {
    for case in 0..6 {
        let mut s = setup();
        let (src, dst, lk, rk) = (s.src.va, s.dst.va, s.src.key.0, s.dst.key.0);
        let mut w = wqe(0, s.a.qpn, 0x08, 0x08, 0, dst, rk, &[(src, 8, lk)]);
        let head: [u8; 8] = w[..8].try_into().unwrap();
        match case {
            0 => w[3] = 0x0e, // TSO: raw Ethernet QPs only, not RC
            1 => w[0] = 0x01, // opmod
            2 => w[1..3].copy_from_slice(&5u16.to_be_bytes()), // WQE index != counter
            3 => w[4..7].copy_from_slice(&[0x12, 0x34, 0x56]), // another QPN
            4 => w[7] = 1,    // ds < 2
            _ => w[32..36].copy_from_slice(&0x8000_0020u32.to_be_bytes()), // inline past ds
        }
        post(&s.env.bar, &mut s.a, &w, Ring::None);
        // The doorbell names this QP and WQE 0 correctly; the WQE itself is wrong.
        s.env.bar.write_bytes8(s.a.uar_off + 0x800, head);
        let c = expect_err(&mut s, 0x02, 0);
        assert_eq!(c.sop_qpn() >> 24, u32::from(w[3]), "case {case}");
    }
}

#[test]
fn wqe_past_the_doorbell_record_is_refused() {
    let mut s = setup();
    let (src, dst, lk, rk) = (s.src.va, s.dst.va, s.src.key.0, s.dst.key.0);
    // A 2-WQEBB WQE but the record only advanced by 1.
    let w = wqe(0, s.a.qpn, 0x08, 0x08, 0, dst, rk, &[(src, 8, lk), (src, 8, lk), (src, 8, lk)]);
    post(&s.env.bar, &mut s.a, &w, Ring::None);
    s.a.dbrec.write_u32(4, 1u32.to_be());
    s.env.bar.write_bytes8(s.a.uar_off + 0x800, w[..8].try_into().unwrap());
    expect_err(&mut s, 0x02, 0);
}

#[test]
fn transition_to_err_flushes_posted_wqes_and_receives() {
    let mut s = setup();
    // The responder QP has 2 receives posted; its own SQ has one WQE posted without a doorbell.
    post_recv(&mut s.b, 0, 0, 0x100);
    post_recv(&mut s.b, 0, 0, 0x100);
    let w = wqe(0, s.b.qpn, 0x08, 0x00, 0, 0, 0, &[]);
    post(&s.env.bar, &mut s.b, &w, Ring::None);
    s.env.ctl.modify_qp(QpNum(s.b.qpn), &Transition::ToErr).unwrap();
    let mut got = Vec::new();
    for _ in 0..3 {
        let c = poll(&mut s.cq_b);
        assert_eq!(c.syndrome(), 0x05);
        got.push((c.opcode(), c.wqe_counter()));
    }
    got.sort();
    assert_eq!(got, [(13, 0), (14, 0), (14, 1)]);
    assert_empty(&s.env.model, &s.cq_b);
}

/// A PSN ahead of the responder's gets one sequence NAK for the expected PSN, which the
/// requester (already past it) ignores as stale; its retransmissions are dropped silently
/// (rxe `sent_psn_nak`) until `retry_cnt` runs out.
#[test]
fn psn_ahead_is_nakked_once_then_retry_exceeded() {
    let mut env = Env::new();
    let cq = env.cq(4);
    let mut a = env.qp(&cq, &cq, 4, None);
    let b = env.qp(&cq, &cq, 4, None);
    rts(&mut env.ctl, a.qpn, b.qpn, rdma_pmd_mlx5::control::Path::Loopback, 12, 0, 7);
    rts(&mut env.ctl, b.qpn, a.qpn, rdma_pmd_mlx5::control::Path::Loopback, 0, 11, 7);
    let w = wqe(0, a.qpn, 0x08, 0x08, 0, 0, 0, &[]);
    env.ring(&mut a, &w);
    let mut cq = cq;
    let c = poll(&mut cq);
    assert_eq!((c.opcode(), c.syndrome()), (13, 0x15));
    let v = env.model.violations();
    assert!(v.iter().any(|v| matches!(v.reason, Reason::RetryExceeded { .. })), "{v:?}");
    let n = env.model.counters();
    assert_eq!(n.naks_sent, 1, "one sequence NAK: {n:?}");
    assert!(n.retransmits >= 7, "{n:?}");
}

/// A PSN behind the responder's is a duplicate: acknowledged again, so the requester
/// completes (and nothing is executed twice).
#[test]
fn psn_behind_is_a_duplicate_and_acknowledged() {
    let mut env = Env::new();
    let cq = env.cq(4);
    let mut a = env.qp(&cq, &cq, 4, None);
    let b = env.qp(&cq, &cq, 4, None);
    rts(&mut env.ctl, a.qpn, b.qpn, rdma_pmd_mlx5::control::Path::Loopback, 10, 0, 7);
    rts(&mut env.ctl, b.qpn, a.qpn, rdma_pmd_mlx5::control::Path::Loopback, 0, 11, 7);
    let w = wqe(0, a.qpn, 0x08, 0x08, 0, 0, 0, &[]);
    env.ring(&mut a, &w);
    let mut cq = cq;
    let c = poll(&mut cq);
    assert_eq!(c.opcode(), 0, "{:?}", env.model.violations());
    assert_eq!(env.model.counters().duplicates, 1);
}
