//! The kernel's memory registration QP (6.12 `drivers/infiniband/hw/mlx5/umr.c`
//! `mlx5r_umr_resource_init`, called by `mr.c` `mlx5_ib_reg_user_mr` before the first user
//! MR): `CREATE_QP` with `st` REG_UMR (`qp.c` `to_mlx5_st`), a send queue only (zero-length
//! RQ), then `mlx5r_umr_qp_rst2rts`: INIT on port 1, RTR and RTS with the state alone.

use super::*;
use crate::fw::ifc::qpc;

/// A REG_UMR `CREATE_QP` input: the RC image of the harness turned into a send-only UMR QP.
fn umr_input(d: &mut Dev, pd: u32, cq: u32, uar: u32) -> Vec<u8> {
    let mut inp = d.qp_input(pd, cq, uar, 6);
    let c = ifc::create_qp_in::QPC;
    set_in(&mut inp, c, qpc::ST, u64::from(QPC_ST_REG_UMR));
    set_in(&mut inp, c, qpc::RQ_TYPE, u64::from(ZERO_LEN_RQ));
    set_in(&mut inp, c, qpc::LOG_RQ_SIZE, 0);
    set_in(&mut inp, c, qpc::LOG_RQ_STRIDE, 0);
    // No PD (`create_kernel_qp` sets `latency_sensitive` instead).
    set_in(&mut inp, c, qpc::PD, 0);
    inp
}

fn setup(d: &mut Dev) -> (u32, u32, u32) {
    let uar = d.alloc_uar();
    let pd = d.alloc_pd();
    let (eqn, _) = d.create_eq(uar, 6, &[EventType::Completion]);
    let cq = d.create_cq(uar, eqn, 7);
    (pd, cq, uar)
}

#[test]
fn umr_qp_is_created_and_reaches_rts_as_the_kernel_moves_it() {
    let mut d = up();
    let (pd, cq, uar) = setup(&mut d);
    let inp = umr_input(&mut d, pd, cq, uar);
    let qpn = ifc::create_qp_out::QPN.get(&d.ok(&inp, 16)) as u32;
    let ctx = ifc::rst2init_qp_in::QPC;
    let path = qpc::PRIMARY_ADDRESS_PATH.at(ctx);
    // INIT: `IB_QP_STATE | IB_QP_PKEY_INDEX | IB_QP_PORT`, port 1.
    let mut i = d.transition(Opcode::Rst2InitQp, qpn);
    ifc::ads::VHCA_PORT_NUM.at(path).set(&mut i, 1);
    d.ok(&i, 16);
    // RTR and RTS: `IB_QP_STATE` alone, so no path and MTU 0.
    d.ok(&d.transition(Opcode::Init2RtrQp, qpn), 16);
    d.ok(&d.transition(Opcode::Rtr2RtsQp, qpn), 16);
    let mut q = input(Opcode::QueryQp, 0, ifc::query_qp_in::SIZE);
    ifc::query_qp_in::QPN.set(&mut q, u64::from(qpn));
    let out = d.ok(&q, ifc::query_qp_out::SIZE);
    let c = ifc::query_qp_out::QPC;
    assert_eq!(qpc::ST.at(c).get(&out), u64::from(QPC_ST_REG_UMR));
    assert_eq!(qpc::STATE.at(c).get(&out), u64::from(u8::from(QpState::Rts)));
    assert_eq!(qpc::RQ_TYPE.at(c).get(&out), u64::from(ZERO_LEN_RQ));
    assert_eq!(qpc::PD.at(c).get(&out), 0, "the driver gave it no PD");
    // The driver's PD stays free to go while the UMR QP lives.
    let mut dp = input(Opcode::DeallocPd, 0, ifc::dealloc_pd_in::SIZE);
    ifc::dealloc_pd_in::PD.set(&mut dp, u64::from(pd));
    d.ok(&dp, 16);
    let mut x = input(Opcode::DestroyQp, 0, ifc::destroy_qp_in::SIZE);
    ifc::destroy_qp_in::QPN.set(&mut x, u64::from(qpn));
    d.ok(&x, 16);
    assert_eq!(d.status(&x, 16).0, CmdStatus::BadResource);
}

/// A PD the function never allocated is refused, for a UMR QP as for any other.
#[test]
fn umr_qp_with_an_unknown_pd_is_refused() {
    let mut d = up();
    let (pd, cq, uar) = setup(&mut d);
    let mut inp = umr_input(&mut d, pd, cq, uar);
    set_in(&mut inp, ifc::create_qp_in::QPC, qpc::PD, u64::from(pd + 50));
    assert_eq!(d.status(&inp, 16).0, CmdStatus::BadResource);
}

/// An RC QP still needs its MTU at RTR: the exception is the UMR QP's alone.
#[test]
fn rc_qp_without_mtu_is_still_refused_at_rtr() {
    let mut d = up();
    let (pd, cq, uar) = setup(&mut d);
    let qpn = d.create_qp(pd, cq, uar);
    let ctx = ifc::rst2init_qp_in::QPC;
    let mut i = d.transition(Opcode::Rst2InitQp, qpn);
    ifc::ads::VHCA_PORT_NUM.at(qpc::PRIMARY_ADDRESS_PATH.at(ctx)).set(&mut i, 1);
    d.ok(&i, 16);
    let (st, syndrome) = d.status(&d.transition(Opcode::Init2RtrQp, qpn), 16);
    assert_eq!((st, syndrome), (CmdStatus::BadParam, crate::fw::codes::syndrome::BAD_MTU));
}

/// A UMR QP receives nothing: a receive queue is refused.
#[test]
fn umr_qp_with_a_receive_queue_is_refused() {
    let mut d = up();
    let (pd, cq, uar) = setup(&mut d);
    let mut inp = umr_input(&mut d, pd, cq, uar);
    let c = ifc::create_qp_in::QPC;
    set_in(&mut inp, c, qpc::RQ_TYPE, 0);
    set_in(&mut inp, c, qpc::LOG_RQ_SIZE, 4);
    set_in(&mut inp, c, qpc::LOG_RQ_STRIDE, 1);
    assert_eq!(d.status(&inp, 16).0, CmdStatus::BadParam);
}

/// The model executes no UMR: a UMR WQE (`MLX5_OPCODE_UMR`, 0x25) on the UMR QP completes in
/// error (`MLX5_CQE_REQ_ERR`, syndrome `LOCAL_QP_OP_ERR`) instead of waiting forever, so a
/// kernel that tried one would see `mlx5r_umr_post_send_wait` fail, not hang.
#[test]
fn a_umr_wqe_completes_in_error() {
    let mut d = up();
    let uar = d.alloc_uar();
    let pd = d.alloc_pd();
    let (eqn, _) = d.create_eq(uar, 6, &[EventType::Completion]);
    let cq = d.create_cq(uar, eqn, 4);
    let (cq_buf, _) = d.last_queue;
    let inp = umr_input(&mut d, pd, cq, uar);
    let (qp_buf, qp_dbr) = d.last_queue;
    let qpn = ifc::create_qp_out::QPN.get(&d.ok(&inp, 16)) as u32;
    let mut i = d.transition(Opcode::Rst2InitQp, qpn);
    let path = qpc::PRIMARY_ADDRESS_PATH.at(ifc::rst2init_qp_in::QPC);
    ifc::ads::VHCA_PORT_NUM.at(path).set(&mut i, 1);
    d.ok(&i, 16);
    d.ok(&d.transition(Opcode::Init2RtrQp, qpn), 16);
    d.ok(&d.transition(Opcode::Rtr2RtsQp, qpn), 16);
    // A control segment alone names the opcode: UMR, index 0, signalled.
    let mut wqe = [0u8; 64];
    wqe[0..4].copy_from_slice(&0x25u32.to_be_bytes());
    wqe[4..8].copy_from_slice(&(qpn << 8 | 4).to_be_bytes());
    wqe[11] = 0x08;
    // No receive queue: the send queue starts the buffer.
    d.ring_send(qp_buf, &wqe, qp_dbr, 1, uar);
    let cqe = d.wait_cqe(cq_buf);
    // mlx5_err_cqe: opcode 0xd (requester error), syndrome at byte 0x37.
    assert_eq!((cqe[63] >> 4, cqe[0x37]), (0xd, 0x02), "{cqe:02x?}");
}
