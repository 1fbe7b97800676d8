//! Hostile WQEs: random segments after a valid control segment, for every opcode of both
//! services, with random receive WQEs. The model must not panic, and every send WQE must
//! complete exactly once (all are signaled: a success, an error or a flush).

use rdma_pmd_mlx5::control::{Access, Control, Path, Service, Transition};

use super::harness::*;

/// A small deterministic generator (xorshift64*), so a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A random body of `units` 16-byte units, biased towards values the model acts on: the
/// regions' keys and addresses, small lengths, the inline flag, `MLX5_INVALID_LKEY`.
fn body(r: &mut Rng, units: usize, keys: &[(u32, u64)]) -> Vec<u8> {
    let mut b = Vec::new();
    for _ in 0..units {
        let (key, va) = keys[r.below(keys.len() as u64) as usize];
        let len = match r.below(5) {
            0 => r.next() as u32,
            1 => 0x8000_0000 | r.below(64) as u32,
            2 => 0,
            _ => r.below(300) as u32,
        };
        let lkey = match r.below(6) {
            0 => r.next() as u32,
            1 => 0x100,
            _ => key,
        };
        let addr = if r.below(4) == 0 { r.next() } else { va + r.below(5000) };
        b.extend_from_slice(&len.to_be_bytes());
        b.extend_from_slice(&lkey.to_be_bytes());
        b.extend_from_slice(&addr.to_be_bytes());
    }
    b
}

fn run(service: Service, seed: u64) {
    let mut r = Rng(seed);
    let mut env = Env::new();
    let g = env.model.gids()[0];
    let cq_a = env.cq(9);
    let mut cq_b = env.cq(9);
    let mut a = env.qp_with(service, &cq_a, &cq_a, 6, Some(3), 6);
    let mut b = env.qp_with(service, &cq_b, &cq_b, 6, Some(3), 6);
    let connect = |ctl: &mut crate::ModelControl, a: u32, b: u32| {
        if service == Service::Rc {
            let all = Access::all();
            rts_with(ctl, a, b, Path::Loopback, (0, 0), 0, all);
            rts_with(ctl, b, a, Path::Loopback, (0, 0), 0, all);
        } else {
            ud_rts(ctl, a, 7);
            ud_rts(ctl, b, 7);
        }
    };
    connect(&mut env.ctl, a.qpn, b.qpn);
    let m1 = env.region(8192, 0x10_0000, Access::all());
    let m2 = env.region(8192, 0x20_0000, Access::REMOTE_READ);
    let keys = [(m1.key.0, m1.va), (m2.key.0, m2.va)];
    let mut cq_a = cq_a;
    let opcodes: &[u8] = match service {
        Service::Rc => &[0x08, 0x09, 0x0a, 0x0b, 0x10, 0x11, 0x12, 0x01, 0x0e, 0x13],
        _ => &[0x0a, 0x0b, 0x0a, 0x0b, 0x0a, 0x0b, 0x08, 0x10],
    };
    let n = 120;
    let mut resets = 0;
    for _ in 0..n {
        if r.below(3) == 0 {
            let rb = body(&mut r, 4, &keys);
            let slot = usize::from(b.rq_pi) & 7;
            b.buf.write_bytes(slot << b.stride, &rb);
            b.rq_pi = b.rq_pi.wrapping_add(1);
            b.dbrec.write_u32(0, u32::from(b.rq_pi).to_be());
        }
        let op = opcodes[r.below(opcodes.len() as u64) as usize];
        let mut w = ctrl(a.pi, a.qpn, op, 0x08, r.next() as u32);
        if service != Service::Rc && r.below(4) != 0 {
            // A datagram segment that mostly names this port and QP b.
            let mut av = [0u8; 48];
            av[0..4].copy_from_slice(
                &(if r.below(3) == 0 { r.next() as u32 } else { 7 }).to_be_bytes(),
            );
            let dqpn = if r.below(3) == 0 { r.next() as u32 } else { b.qpn | 0x8000_0000 };
            av[8..12].copy_from_slice(&dqpn.to_be_bytes());
            av[20..26].copy_from_slice(&g.mac);
            av[28..32].copy_from_slice(&((r.below(3) as u32) << 20).to_be_bytes());
            av[32..48].copy_from_slice(&g.gid);
            w.extend_from_slice(&av);
        }
        let units = r.below(8) as usize;
        w.extend(body(&mut r, units, &keys));
        if op == 0x11 || op == 0x12 {
            // Now and then, a well-formed atomic: raddr, atomic segment, one 8-byte result.
            if r.below(2) == 0 {
                w.truncate(16);
                w.extend_from_slice(&(m1.va + 8 * r.below(4)).to_be_bytes());
                w.extend_from_slice(&m1.key.0.to_be_bytes());
                w.extend_from_slice(&[0; 4]);
                w.extend_from_slice(&r.next().to_be_bytes());
                w.extend_from_slice(&r.next().to_be_bytes());
                w.extend_from_slice(&8u32.to_be_bytes());
                w.extend_from_slice(&m1.key.0.to_be_bytes());
                w.extend_from_slice(&(m1.va + 4096).to_be_bytes());
            }
        }
        let w = finish(w);
        env.ring(&mut a, &w);
        // The ring holds 64 WQEBBs: let the model take each WQE before the next reuses them.
        assert!(env.model.quiesce(WAIT), "seed {seed}: the model settles");
        let mut done = 0;
        let mut failed = false;
        while let Some(c) = peek(&cq_a) {
            poll(&mut cq_a);
            assert_eq!(c.sop_qpn() & 0xff_ffff, a.qpn, "seed {seed}: {c:?}");
            assert!(matches!(c.opcode(), 0 | 13), "seed {seed}: {c:?}");
            failed |= c.opcode() == 13;
            done += 1;
        }
        assert_eq!(done, 1, "seed {seed}: WQE {:#x} completes once", w[3]);
        let mut b_cqes = 0;
        while peek(&cq_b).is_some() {
            poll(&mut cq_b);
            b_cqes += 1;
        }
        assert!(b_cqes <= 8, "seed {seed}: at most one CQE per receive WQE");
        if failed || env.model.qp_state(b.qpn) == Some(crate::QpState::Error) {
            // Start the pair afresh, so later WQEs are executed rather than flushed.
            for q in [&mut a, &mut b] {
                env.ctl.modify_qp(rdma_pmd::QpNum(q.qpn), &Transition::ToErr).unwrap();
                assert!(env.model.quiesce(WAIT));
                env.ctl.modify_qp(rdma_pmd::QpNum(q.qpn), &Transition::ToRst).unwrap();
                q.dbrec.write_u32(0, 0);
                q.dbrec.write_u32(4, 0);
                (q.pi, q.rq_pi) = (0, 0);
            }
            while peek(&cq_a).is_some() {
                poll(&mut cq_a);
            }
            while peek(&cq_b).is_some() {
                poll(&mut cq_b);
            }
            connect(&mut env.ctl, a.qpn, b.qpn);
            resets += 1;
        }
    }
    assert!(env.model.quiesce(WAIT), "seed {seed}: the model settles");
    let k = env.model.counters();
    assert_eq!(k.cq_overflows, 0);
    assert!(resets < n && k.wqes_executed > 0, "seed {seed}: some WQEs succeed");
}

#[test]
fn random_rc_wqes_complete_once_and_never_panic() {
    for seed in 1..=12 {
        run(Service::Rc, seed * 0x9e37_79b9);
    }
}

#[test]
fn random_ud_wqes_complete_once_and_never_panic() {
    for seed in 1..=12 {
        run(Service::Ud, seed * 0x85eb_ca6b);
    }
}
