use rdma_pmd::{Errno, Error, QpNum};
use rdma_pmd_hal::Dma;
use rdma_pmd_mlx5::control::{
    Access, Control, CqParams, MkeyParams, Path, QpParams, Service, Transition, Translation,
};

use super::harness::*;
use crate::{Event, QpState, Reason};

fn einval(r: Result<(), Error>) {
    assert_eq!(r.map_err(|e| e.errno()), Err(Errno::EINVAL));
}

#[test]
fn caps_and_uars() {
    let m = crate::Model::new();
    let mut c = m.control();
    let caps = c.caps();
    assert_eq!(caps.log_bf_reg_size, 9);
    assert!(caps.log_max_qp_sz >= 10 && caps.log_max_cq_sz >= 10);
    let u1 = c.alloc_uar().unwrap();
    let u2 = c.alloc_uar().unwrap();
    assert_eq!((u1.index, u1.bar_offset, u2.index, u2.bar_offset), (1, 4096, 2, 8192));
    c.dealloc_uar(u1).unwrap();
    einval(c.dealloc_uar(u1));
}

#[test]
fn bad_transitions_are_refused() {
    let mut env = Env::new();
    let cq = env.cq(4);
    let qp = env.qp(&cq, &cq, 4, None);
    let q = QpNum(qp.qpn);
    let init = Transition::RstToInit { port: 1, access: Access::REMOTE_WRITE };
    let rtr = Transition::InitToRtr { remote_qpn: q, path: Path::Loopback, mtu: 3, rq_psn: 0 };
    let rts = Transition::RtrToRts { sq_psn: 0, timeout: 14, retry_cnt: 7, rnr_retry: 7 };
    einval(env.ctl.modify_qp(q, &rtr));
    einval(env.ctl.modify_qp(q, &rts));
    einval(env.ctl.modify_qp(q, &Transition::RstToInit { port: 2, access: Access::empty() }));
    env.ctl.modify_qp(q, &init).unwrap();
    einval(env.ctl.modify_qp(q, &init));
    einval(env.ctl.modify_qp(q, &rts));
    einval(env.ctl.modify_qp(
        q,
        &Transition::InitToRtr { remote_qpn: q, path: Path::Loopback, mtu: 6, rq_psn: 0 },
    ));
    einval(env.ctl.modify_qp(
        q,
        &Transition::InitToRtr {
            remote_qpn: QpNum(1 << 24),
            path: Path::Loopback,
            mtu: 3,
            rq_psn: 0,
        },
    ));
    let roce = Path::RoceV2 {
        dgid: [0; 16],
        dmac: [0; 6],
        sgid_index: 3,
        udp_sport: 0,
        hop_limit: 0,
        traffic_class: 0,
        flow_label: 0,
        sl: 0,
    };
    einval(
        env.ctl
            .modify_qp(q, &Transition::InitToRtr { remote_qpn: q, path: roce, mtu: 3, rq_psn: 0 }),
    );
    env.ctl.modify_qp(q, &rtr).unwrap();
    einval(env.ctl.modify_qp(q, &init));
    einval(env.ctl.modify_qp(
        q,
        &Transition::RtrToRts { sq_psn: 0, timeout: 14, retry_cnt: 8, rnr_retry: 7 },
    ));
    env.ctl.modify_qp(q, &rts).unwrap();
    assert_eq!(env.model.qp_state(qp.qpn), Some(QpState::Rts));
    einval(env.ctl.modify_qp(q, &rts));
    env.ctl.modify_qp(q, &Transition::ToErr).unwrap();
    einval(env.ctl.modify_qp(q, &rts));
    env.ctl.modify_qp(q, &Transition::ToRst).unwrap();
    assert_eq!(env.model.qp_state(qp.qpn), Some(QpState::Reset));
    env.ctl.modify_qp(q, &init).unwrap();
    einval(env.ctl.modify_qp(QpNum(0x7777), &init));
}

#[test]
fn commands_check_their_fields() {
    let mut env = Env::new();
    let buf = env.dma.alloc(8192, 4096).unwrap();
    let dbrec = env.dma.alloc(8, 8).unwrap();
    let uar = env.uar;
    let cq = |log, b: u64, d: u64| CqParams {
        log_size: log,
        buf: rdma_pmd::BusAddr(b),
        dbrec: rdma_pmd::BusAddr(d),
        uar,
    };
    let b = buf.bus().0;
    let d = dbrec.bus().0;
    einval(env.ctl.create_cq(&cq(23, b, d)).map(|_| ()));
    einval(env.ctl.create_cq(&cq(4, b + 64, d)).map(|_| ()));
    einval(env.ctl.create_cq(&cq(4, b, d + 4)).map(|_| ()));
    let cqn = env.ctl.create_cq(&cq(4, b, d)).unwrap();
    let qp = |log_sq, stride, bb: u64| QpParams {
        service: Service::Rc,
        pd: env.pd,
        send_cq: cqn,
        recv_cq: cqn,
        log_sq_size: log_sq,
        log_rq_size: None,
        log_rq_stride: stride,
        buf: rdma_pmd::BusAddr(bb),
        dbrec: rdma_pmd::BusAddr(d),
        uar,
    };
    let (p1, p2, p3) = (qp(16, 4, b), qp(4, 3, b), qp(4, 4, b + 16));
    einval(env.ctl.create_qp(&p1).map(|_| ()));
    einval(env.ctl.create_qp(&p2).map(|_| ()));
    einval(env.ctl.create_qp(&p3).map(|_| ()));
    let q = env.ctl.create_qp(&qp(4, 4, b)).unwrap();
    einval(env.ctl.destroy_cq(cqn));
    einval(env.ctl.dealloc_pd(env.pd));
    einval(env.ctl.dealloc_uar(uar));
    env.ctl.destroy_qp(q).unwrap();
    einval(env.ctl.destroy_qp(q));
    env.ctl.destroy_cq(cqn).unwrap();
    einval(env.ctl.destroy_cq(cqn));
    let mk = |base: u64, shift| MkeyParams {
        pd: env.pd,
        start: 0x1000,
        len: 4096,
        access: Access::LOCAL_WRITE,
        translation: Translation::Mtt { base: rdma_pmd::BusAddr(base), page_shift: shift },
    };
    einval(env.ctl.create_mkey(&mk(b + 8, 12)).map(|_| ()));
    einval(env.ctl.create_mkey(&mk(b, 11)).map(|_| ()));
    let k = env.ctl.create_mkey(&mk(b, 12)).unwrap();
    assert_ne!(k.0, 0x100);
    env.ctl.destroy_mkey(k).unwrap();
    einval(env.ctl.destroy_mkey(k));
    env.ctl.dealloc_pd(env.pd).unwrap();
    env.ctl.dealloc_uar(uar).unwrap();
}

#[test]
fn cq_overflow_is_detected_not_overwritten() {
    let mut env = Env::new();
    let mut cq = env.cq(1); // 2 entries
    let cq_b = env.cq(4);
    let mut a = env.qp(&cq, &cq, 4, None);
    let b = env.qp(&cq_b, &cq_b, 4, None);
    env.connect_loopback(&a, &b);
    for i in 0..3u16 {
        let w = wqe(i, a.qpn, 0x08, 0x08, 0, 0, 0, &[]);
        env.ring(&mut a, &w);
        assert!(env.model.quiesce(WAIT));
    }
    // The consumer index stayed 0: the third CQE would overwrite the first.
    let first = peek(&cq).unwrap();
    assert_eq!(first.wqe_counter(), 0, "entry 0 not overwritten");
    let k = env.model.counters();
    assert_eq!((k.wqes_executed, k.req_cqes, k.cq_overflows), (3, 2, 1));
    assert_eq!(env.model.cq_in_error(cq.cqn.0), Some(true));
    assert!(env.model.events().contains(&Event::CqError { cqn: cq.cqn.0 }));
    assert!(env
        .model
        .violations()
        .iter()
        .any(|v| v.reason == Reason::CqOverflow { cqn: cq.cqn.0 }));
    assert_eq!(poll(&mut cq).wqe_counter(), 0);
    assert_eq!(poll(&mut cq).wqe_counter(), 1);
}

#[test]
fn cq_arm_reports_a_completion_event() {
    let mut env = Env::new();
    let mut cq = env.cq(3);
    let cq_b = env.cq(3);
    let mut a = env.qp(&cq, &cq, 4, None);
    let b = env.qp(&cq_b, &cq_b, 4, None);
    env.connect_loopback(&a, &b);
    // Arm: dbrec[1] = sn<<28 | cmd | ci, then the 64-bit doorbell at 0x20 (rdma-core mlx5_arm_cq).
    let word = 0u32;
    cq.dbrec.write_u32(4, word.to_be());
    let mut db = [0u8; 8];
    db[..4].copy_from_slice(&word.to_be_bytes());
    db[4..].copy_from_slice(&cq.cqn.0.to_be_bytes());
    use rdma_pmd_hal::Mmio;
    env.bar.write_bytes8(env.uar.bar_offset + 0x20, db);
    let w = wqe(0, a.qpn, 0x08, 0x08, 0, 0, 0, &[]);
    env.ring(&mut a, &w);
    poll(&mut cq);
    assert!(env.model.quiesce(WAIT));
    assert_eq!(env.model.events(), [Event::Completion { cqn: cq.cqn.0 }]);
    assert_eq!(env.model.counters().cq_arms, 1);
}

/// CPU time (user + system, in clock ticks) of the thread named `name`, from /proc.
fn thread_ticks(name: &str) -> Option<u64> {
    for t in std::fs::read_dir("/proc/self/task").ok()? {
        let dir = t.ok()?.path();
        let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
        if comm.trim() == name {
            let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
            // Fields after the parenthesised name: state is field 3, utime 14, stime 15.
            let rest = &stat[stat.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            return Some(f[11].parse::<u64>().ok()? + f[12].parse::<u64>().ok()?);
        }
    }
    None
}

#[test]
fn an_idle_model_does_not_burn_a_core() {
    let mut env = Env::new();
    let cq = env.cq(4);
    let mut a = env.qp(&cq, &cq, 4, None);
    let b = env.qp(&cq, &cq, 4, None);
    env.connect_loopback(&a, &b);
    let w = wqe(0, a.qpn, 0x08, 0x00, 0, 0, 0, &[]);
    env.ring(&mut a, &w);
    assert!(env.model.quiesce(WAIT));
    let name = format!("mlx5-model-{}", env.model.shared().id);
    let Some(before) = thread_ticks(&name) else { return }; // no /proc: nothing to measure
    let t = std::time::Instant::now();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let used = thread_ticks(&name).unwrap() - before;
    // Clock ticks are 10 ms on Linux (USER_HZ = 100): allow 20% of the wall time.
    let wall_ticks = t.elapsed().as_millis() as u64 / 10;
    assert!(used * 5 <= wall_ticks, "engine used {used} of {wall_ticks} ticks while idle");
    // And it still wakes for a doorbell.
    let w = wqe(1, a.qpn, 0x08, 0x08, 0, 0, 0, &[]);
    env.ring(&mut a, &w);
    let mut cq = cq;
    assert_eq!(poll(&mut cq).wqe_counter(), 1);
}
