use super::harness::*;
use crate::{CqeOpcode, Reason, Syndrome};
use rdma_pmd_hal::Mmio;

/// A loopback pair with a source and a target region.
struct WritePair {
    env: Env,
    cq_a: TCq,
    cq_b: TCq,
    a: TQp,
    src: Region,
    dst: Region,
}

impl WritePair {
    /// An RDMA WRITE at `a`'s counter with `fm_ce_se`, of the `len` bytes at `src + src_off`
    /// to `dst + dst_off`.
    fn write_wqe(&self, fm_ce_se: u8, dst_off: u64, src_off: u64, len: u32) -> Vec<u8> {
        let sge = (self.src.va + src_off, len, self.src.key.0);
        let (a, dst) = (&self.a, &self.dst);
        wqe(a.pi, a.qpn, 0x08, fm_ce_se, 0, dst.va + dst_off, dst.key.0, &[sge])
    }
}

fn pair(log_cq: u8, log_sq: u8) -> WritePair {
    let mut env = Env::new();
    let cq_a = env.cq(log_cq);
    let cq_b = env.cq(log_cq);
    let a = env.qp(&cq_a, &cq_a, log_sq, None);
    let b = env.qp(&cq_b, &cq_b, log_sq, Some(4));
    env.connect_loopback(&a, &b);
    let src = env.region(8192, 0x7f00_0000_1000, RW);
    let dst = env.region(8192, 0x5500_0000_0000, RW);
    WritePair { env, cq_a, cq_b, a, src, dst }
}

#[test]
fn signaled_write_lands_with_a_correct_cqe_and_owner_bit_over_laps() {
    // CQ of 4 entries, SQ of 8 WQEBBs: 11 writes lap the CQ twice and wrap the ring; every
    // third write has 3 SGEs (2 WQEBBs) so some WQEs straddle the end of the ring.
    let mut p = pair(2, 3);
    fill(&p.src.buf, 0, 4096, 0x11);
    for n in 0..11u32 {
        let off = u64::from(n) * 64;
        let sges: Vec<(u64, u32, u32)> = if n % 3 == 2 {
            vec![
                (p.src.va + off, 16, p.src.key.0),
                (p.src.va + off + 16, 16, p.src.key.0),
                (p.src.va + off + 32, 32, p.src.key.0),
            ]
        } else {
            vec![(p.src.va + off, 64, p.src.key.0)]
        };
        let pi = p.a.pi;
        let w = wqe(pi, p.a.qpn, 0x08, 0x08, 0, p.dst.va + off, p.dst.key.0, &sges);
        p.env.ring(&mut p.a, &w);
        let c = poll(&mut p.cq_a);
        assert_eq!(c.opcode(), 0, "REQ");
        assert_eq!(u32::from(c.owner()), (n >> 2) & 1, "owner = lap parity, CQE {n}");
        assert_eq!(c.wqe_counter(), pi);
        assert_eq!(c.sop_qpn(), 0x0800_0000 | p.a.qpn);
        assert_eq!(c.byte_cnt(), 64);
        assert_eq!(bytes(&p.dst.buf, off as usize, 64), bytes(&p.src.buf, off as usize, 64));
    }
    // The engine counts a CQE just after writing it: let it finish before the snapshot.
    assert!(p.env.model.quiesce(WAIT));
    let k = p.env.model.counters();
    assert_eq!(k.wqes_executed, 11);
    assert_eq!(k.req_cqes, 11);
    assert_eq!(k.doorbells, 11);
    assert_eq!(k.bytes_written, 11 * 64);
    assert_eq!(k.validation_failures, 0, "{:?}", p.env.model.violations());
    assert_empty(&p.env.model, &p.cq_b);
}

#[test]
fn unsignaled_writes_make_no_cqe() {
    let mut p = pair(4, 4);
    fill(&p.src.buf, 0, 256, 0x40);
    let w = p.write_wqe(0x00, 0, 0, 128);
    p.env.ring(&mut p.a, &w);
    assert_empty(&p.env.model, &p.cq_a);
    assert_eq!(bytes(&p.dst.buf, 0, 128), bytes(&p.src.buf, 0, 128));
    let pi = p.a.pi;
    let w = p.write_wqe(0x08, 128, 128, 8);
    p.env.ring(&mut p.a, &w);
    let c = poll(&mut p.cq_a);
    assert_eq!(c.wqe_counter(), pi, "only the signaled WQE completes");
    assert_empty(&p.env.model, &p.cq_a);
    let k = p.env.model.counters();
    assert_eq!((k.wqes_executed, k.req_cqes), (2, 1));
    assert_eq!(k.validation_failures, 0, "{:?}", p.env.model.violations());
}

#[test]
fn several_wqes_under_one_doorbell_and_alternating_halves() {
    let mut p = pair(4, 4);
    fill(&p.src.buf, 0, 512, 3);
    let mut last = Vec::new();
    for i in 0..4u64 {
        let w = p.write_wqe(0x08, i * 100, i * 100, 100);
        post(&p.env.bar, &mut p.a, &w, Ring::None);
        last = w;
    }
    // One doorbell for the batch: the first 8 bytes of the LAST WQE.
    p.env.bar.write_bytes8(p.a.uar_off + 0x800, last[..8].try_into().unwrap());
    for i in 0..4u16 {
        assert_eq!(poll(&mut p.cq_a).wqe_counter(), i);
    }
    assert_eq!(bytes(&p.dst.buf, 0, 400), bytes(&p.src.buf, 0, 400));
    // Ringing the same half again is noted (the provider alternates halves).
    p.a.half = 0;
    let w = p.write_wqe(0x08, 0, 0, 1);
    p.env.ring(&mut p.a, &w);
    poll(&mut p.cq_a);
    let v = p.env.model.violations();
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(matches!(v[0].reason, Reason::DoorbellHalfRepeated { .. }));
}

#[test]
fn doorbell_that_is_not_the_last_wqe_is_noted() {
    let mut p = pair(4, 4);
    let w0 = p.write_wqe(0x08, 0, 0, 4);
    post(&p.env.bar, &mut p.a, &w0, Ring::None);
    let w1 = p.write_wqe(0x08, 0, 0, 4);
    post(&p.env.bar, &mut p.a, &w1, Ring::None);
    // Wrong: the doorbell carries the FIRST WQE's head.
    p.env.bar.write_bytes8(p.a.uar_off + 0x800, w0[..8].try_into().unwrap());
    poll(&mut p.cq_a);
    poll(&mut p.cq_a);
    let v = p.env.model.violations();
    assert!(v.iter().any(|v| v.reason == Reason::DoorbellNotLastWqe { index: 0 }), "{v:?}");
}

#[test]
fn blueflame_copy_is_executed_instead_of_the_ring() {
    let mut p = pair(4, 4);
    fill(&p.src.buf, 0, 512, 0x70);
    // 3 SGEs: ds = 5, two 64-byte BlueFlame blocks.
    let sges = [
        (p.src.va, 10, p.src.key.0),
        (p.src.va + 100, 20, p.src.key.0),
        (p.src.va + 300, 30, p.src.key.0),
    ];
    let w = wqe(p.a.pi, p.a.qpn, 0x08, 0x08, 0, p.dst.va, p.dst.key.0, &sges);
    post(&p.env.bar, &mut p.a, &w, Ring::Bf);
    let c = poll(&mut p.cq_a);
    assert_eq!((c.opcode(), c.wqe_counter(), c.byte_cnt()), (0, 0, 60));
    let mut want = bytes(&p.src.buf, 0, 10);
    want.extend(bytes(&p.src.buf, 100, 20));
    want.extend(bytes(&p.src.buf, 300, 30));
    assert_eq!(bytes(&p.dst.buf, 0, 60), want);
    let k = p.env.model.counters();
    assert_eq!((k.blueflame, k.doorbells, k.wqes_from_blueflame), (1, 0, 1));
    assert_eq!(k.validation_failures, 0, "{:?}", p.env.model.violations());

    // The HCA takes the WQE from the BlueFlame copy: a ring slot that differs is not read
    // (but is noted, since the next plain doorbell would read it).
    let idx = p.a.pi;
    assert_eq!(idx, 2, "the first WQE took 2 WQEBBs");
    let w = p.write_wqe(0x08, 1000, 0, 8);
    let mut stale = w.clone();
    stale[16..24].copy_from_slice(&0u64.to_be_bytes());
    let slot = usize::from(p.a.pi) & 15;
    post(&p.env.bar, &mut p.a, &w, Ring::None);
    p.a.buf.write_bytes(p.a.sq_off + slot * 64, &stale[..64]);
    let reg = p.a.uar_off + 0x800 + p.a.half * 0x100;
    let mut block = [0u64; 8];
    for (j, c) in w[..64].chunks(8).enumerate() {
        block[j] = u64::from_ne_bytes(c.try_into().unwrap());
    }
    p.env.bar.write_wc64(reg, &block);
    let c = poll(&mut p.cq_a);
    assert_eq!(c.opcode(), 0);
    assert_eq!(bytes(&p.dst.buf, 1000, 8), bytes(&p.src.buf, 0, 8));
    let v = p.env.model.violations();
    assert!(
        v.iter()
            .any(|v| matches!(v.reason, Reason::BlueFlameRingMismatch { index } if index == idx)),
        "{v:?}"
    );
}

#[test]
fn inline_write_lands() {
    let mut p = pair(4, 4);
    let data: Vec<u8> = (0..20u8).map(|k| 0x30 + k).collect();
    let w = inline_wqe(p.a.pi, p.a.qpn, 0x08, p.dst.va + 7, p.dst.key.0, &data);
    assert_eq!(w[7], 4, "ds = 2 + ceil((4 + 20) / 16)");
    p.env.ring(&mut p.a, &w);
    let c = poll(&mut p.cq_a);
    assert_eq!((c.opcode(), c.byte_cnt()), (0, 20));
    assert_eq!(bytes(&p.dst.buf, 7, 20), data);
    assert_eq!(p.env.model.counters().validation_failures, 0);
}

#[test]
fn zero_length_write_needs_no_rkey() {
    let mut p = pair(4, 4);
    let w = wqe(p.a.pi, p.a.qpn, 0x08, 0x08, 0, 0, 0xdead_beef, &[]);
    p.env.ring(&mut p.a, &w);
    let c = poll(&mut p.cq_a);
    assert_eq!((c.opcode(), c.byte_cnt()), (0, 0));
}

#[test]
fn doorbell_on_a_qp_not_in_rts_is_ignored() {
    let mut env = Env::new();
    let cq = env.cq(4);
    let mut qp = env.qp(&cq, &cq, 4, None);
    let w = wqe(0, qp.qpn, 0x08, 0x08, 0, 0, 0, &[]);
    env.ring(&mut qp, &w);
    assert_empty(&env.model, &cq);
    let k = env.model.counters();
    assert_eq!((k.ignored_doorbells, k.wqes_executed), (1, 0));
    assert!(matches!(env.model.violations()[0].reason, Reason::DoorbellQpNotReady { .. }));
    let _ = (CqeOpcode::Req, Syndrome::WrFlush);
}

#[test]
fn doorbells_for_another_uar_or_an_unknown_qp_are_dropped() {
    use rdma_pmd_mlx5::control::Control;
    let mut p = pair(4, 4);
    let other = p.env.ctl.alloc_uar().unwrap();
    let w = p.write_wqe(0x08, 0, 0, 8);
    post(&p.env.bar, &mut p.a, &w, Ring::None);
    p.env.bar.write_bytes8(other.bar_offset + 0x800, w[..8].try_into().unwrap());
    let mut bogus = w.clone();
    bogus[4..7].copy_from_slice(&[0x77, 0x77, 0x77]);
    p.env.bar.write_bytes8(p.a.uar_off + 0x900, bogus[..8].try_into().unwrap());
    // A store to a UAR page nobody allocated.
    p.env.bar.write_bytes8(40 * 4096 + 0x800, w[..8].try_into().unwrap());
    assert_empty(&p.env.model, &p.cq_a);
    let k = p.env.model.counters();
    assert_eq!((k.ignored_doorbells, k.wqes_executed), (2, 0));
    let v: Vec<_> = p.env.model.violations().into_iter().map(|v| v.reason).collect();
    assert!(v.contains(&Reason::DoorbellWrongUar { qpn: p.a.qpn, uar: other.index }), "{v:?}");
    assert!(v.contains(&Reason::DoorbellUnknownQp { qpn: 0x777777 }), "{v:?}");
    assert!(v.iter().any(|r| matches!(r, Reason::UnknownBarStore { .. })), "{v:?}");
    // The WQE is still there: the right doorbell executes it.
    p.a.half = 0;
    p.env.bar.write_bytes8(p.a.uar_off + 0x800, w[..8].try_into().unwrap());
    assert_eq!(poll(&mut p.cq_a).opcode(), 0);
}

#[test]
fn a_key_that_does_not_translate_is_a_dma_fault() {
    use rdma_pmd_mlx5::control::{Control, MkeyParams, Translation};
    let mut p = pair(4, 4);
    // Physical mode with a CPU pointer instead of a bus address: the IOMMU refuses it.
    let cpu = p.src.buf.cpu().as_ptr() as u64;
    let key = p
        .env
        .ctl
        .create_mkey(&MkeyParams {
            pd: p.env.pd,
            start: cpu,
            len: 4096,
            access: RW,
            translation: Translation::Physical,
        })
        .unwrap();
    let w = wqe(0, p.a.qpn, 0x08, 0x08, 0, p.dst.va, p.dst.key.0, &[(cpu, 64, key.0)]);
    p.env.ring(&mut p.a, &w);
    let c = poll(&mut p.cq_a);
    assert_eq!((c.opcode(), c.syndrome()), (13, 0x04));
    assert_eq!(c.vendor_err(), Reason::DmaFault { bus: 0, len: 0 }.vendor_code());
    assert_eq!(p.env.model.counters().dma_faults, 1);
}
