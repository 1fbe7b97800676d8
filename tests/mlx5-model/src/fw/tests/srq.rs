//! Shared receive queues as kernel 6.12 `mlx5_ib` creates them at ISSI 1
//! (`drivers/infiniband/hw/mlx5/srq_cmd.c`: `create_rmp_cmd`, `arm_rmp_cmd`, `query_rmp_cmd`,
//! `destroy_rmp_cmd`, `create_xrc_srq_cmd`, `arm_xrc_srq_cmd`, `query_xrc_srq_cmd`,
//! `destroy_xrc_srq_cmd`), and what `mlx5_ib_create_srq` (`srq.c`) reads from the caps.

use super::*;
use crate::fw::ifc::{rmpc, wq, xrc_srqc as xc};

/// The kernel's `mlx5_ib_dev_res_srq_init` asks for `max_wr` 1, `max_sge` 1: `srq.c` rounds
/// to 2 WQEs of 32 bytes (`wqe_shift` 5), and refuses `max_wr >= 1 << log_max_srq_sz`.
const LOG_SIZE: u8 = 1;
const LOG_STRIDE: u8 = 5;

/// A buffer and a doorbell record for an SRQ of `LOG_SIZE`/`LOG_STRIDE`: (buffer, dbr).
fn srq_mem(d: &mut Dev) -> (u64, u64) {
    (d.alloc(4096, 4096), d.alloc(64, 64))
}

/// `CREATE_RMP` as `create_rmp_cmd` writes it (`set_wq`: no `wq_type`, so linked list).
fn rmp_input(d: &mut Dev, pd: u32) -> Vec<u8> {
    use ifc::create_rmp_in as i;
    let (buf, dbr) = srq_mem(d);
    let mut inp = input(Opcode::CreateRmp, 0, i::SIZE + 8);
    set_in(&mut inp, i::CTX, rmpc::STATE, 1);
    let w = rmpc::WQ.at(i::CTX);
    set_in(&mut inp, w, wq::LOG_WQ_PG_SZ, 0);
    set_in(&mut inp, w, wq::LOG_WQ_STRIDE, u64::from(LOG_STRIDE));
    set_in(&mut inp, w, wq::LOG_WQ_SZ, u64::from(LOG_SIZE));
    set_in(&mut inp, w, wq::PD, u64::from(pd));
    set_in(&mut inp, w, wq::DBR_ADDR, dbr);
    i::PAS.set(&mut inp, buf);
    inp
}

/// `CREATE_XRC_SRQ` as `create_xrc_srq_cmd` writes it (`set_srqc` and the user index).
fn xrc_input(d: &mut Dev, pd: u32, xrcd: u32, cqn: u32) -> (Vec<u8>, u64) {
    use ifc::create_xrc_srq_in as i;
    let (buf, dbr) = srq_mem(d);
    let mut inp = input(Opcode::CreateXrcSrq, 0, i::SIZE + 8);
    let c = i::XRC_SRQ_CONTEXT_ENTRY;
    set_in(&mut inp, c, xc::LOG_PAGE_SIZE, 0);
    set_in(&mut inp, c, xc::LOG_RQ_STRIDE, u64::from(LOG_STRIDE - 4));
    set_in(&mut inp, c, xc::LOG_XRC_SRQ_SIZE, u64::from(LOG_SIZE));
    set_in(&mut inp, c, xc::PD, u64::from(pd));
    // `MLX5_SET64(srqc, srqc, dbr_addr, ...)`: the address over `db_record_addr_h/l`.
    Field::new(c.bit + xc::DB_RECORD_ADDR_H.bit, 64).set(&mut inp, dbr);
    set_in(&mut inp, c, xc::XRCD, u64::from(xrcd));
    set_in(&mut inp, c, xc::CQN, u64::from(cqn));
    set_in(&mut inp, c, xc::USER_INDEX, 0xff_ffff);
    i::PAS.set(&mut inp, buf);
    (inp, dbr)
}

/// A PD, an XRC domain and a CQ, as `mlx5_ib_dev_res_init` has them before the SRQs.
fn resources(d: &mut Dev) -> (u32, u32, u32) {
    let uar = d.alloc_uar();
    let pd = d.alloc_pd();
    let xrcd = ifc::alloc_xrcd_out::XRCD.get(&d.simple(Opcode::AllocXrcd, 0)) as u32;
    let (eqn, _) = d.create_eq(uar, 6, &[EventType::Completion]);
    let cq = d.create_cq(uar, eqn, 4);
    (pd, xrcd, cq)
}

/// `mlx5_ib_create_srq` (`srq.c`): `max_srq_wqes = 1 << log_max_srq_sz`, `max_wr` 1 must be
/// below it; `set_rq_size`/`create_srq_kernel` need a 32-byte receive WQE within
/// `max_wqe_sz_rq`; `log_max_srq` counts the SRQs.
#[test]
fn caps_let_mlx5_ib_create_its_srqs() {
    let mut d = up();
    let c = d.query_caps(CapType::General, true);
    use ifc::cmd_hca_cap as gen;
    assert!(gen::LOG_MAX_SRQ_SZ.get(&c) >= 1, "max_wr 1 < 1 << log_max_srq_sz");
    assert!(gen::MAX_WQE_SZ_RQ.get(&c) >= 32, "{}", gen::MAX_WQE_SZ_RQ.get(&c));
    assert!(gen::LOG_MAX_SRQ.get(&c) >= 1);
}

#[test]
fn basic_srq_is_an_rmp_created_armed_queried_destroyed() {
    let mut d = up();
    let (pd, _, _) = resources(&mut d);
    let inp = rmp_input(&mut d, pd);
    let rmpn = ifc::create_rmp_out::RMPN.get(&d.ok(&inp, 16)) as u32;
    // `query_rmp_cmd` reads the WQ back and checks the state is ready.
    let mut q = input(Opcode::QueryRmp, 0, ifc::query_rmp_in::SIZE);
    ifc::query_rmp_in::RMPN.set(&mut q, u64::from(rmpn));
    let out = d.ok(&q, ifc::query_rmp_out::SIZE);
    let ctx = ifc::query_rmp_out::RMP_CONTEXT;
    let w = rmpc::WQ.at(ctx);
    assert_eq!(rmpc::STATE.at(ctx).get(&out), 1, "MLX5_RMPC_STATE_RDY");
    assert_eq!(wq::LOG_WQ_SZ.at(w).get(&out), u64::from(LOG_SIZE));
    assert_eq!(wq::LOG_WQ_STRIDE.at(w).get(&out), u64::from(LOG_STRIDE));
    assert_eq!(wq::PD.at(w).get(&out), u64::from(pd));
    // `arm_rmp_cmd`: MODIFY_RMP, RDY to RDY, the lwm bit of the bitmask.
    use ifc::modify_rmp_in as m;
    let mut a = input(Opcode::ModifyRmp, 0, m::SIZE);
    m::RMP_STATE.set(&mut a, 1);
    m::RMPN.set(&mut a, u64::from(rmpn));
    m::BITMASK_LWM.set(&mut a, 1);
    set_in(&mut a, m::CTX, rmpc::STATE, 1);
    wq::LWM.at(rmpc::WQ.at(m::CTX)).set(&mut a, 1);
    d.ok(&a, 16);
    let out = d.ok(&q, ifc::query_rmp_out::SIZE);
    assert_eq!(wq::LWM.at(w).get(&out), 1);
    // A limit at or beyond the queue's size is refused.
    wq::LWM.at(rmpc::WQ.at(m::CTX)).set(&mut a, 2);
    assert_eq!(d.status(&a, 16).0, CmdStatus::BadParam);
    let mut x = input(Opcode::DestroyRmp, 0, ifc::destroy_rmp_in::SIZE);
    ifc::destroy_rmp_in::RMPN.set(&mut x, u64::from(rmpn));
    d.ok(&x, 16);
    assert_eq!(d.status(&x, 16).0, CmdStatus::BadResource);
    assert_eq!(d.status(&q, ifc::query_rmp_out::SIZE).0, CmdStatus::BadResource);
}

#[test]
fn rmp_refuses_what_the_model_does_not_offer() {
    let mut d = up();
    let (pd, _, _) = resources(&mut d);
    let w = rmpc::WQ.at(ifc::create_rmp_in::CTX);
    // A cyclic WQ (the Ethernet RQ's type) is not an SRQ's linked list.
    let mut inp = rmp_input(&mut d, pd);
    set_in(&mut inp, w, wq::WQ_TYPE, u64::from(WQ_TYPE_CYCLIC));
    assert_eq!(d.status(&inp, 16).0, CmdStatus::BadParam);
    // Not created ready.
    let mut inp = rmp_input(&mut d, pd);
    set_in(&mut inp, ifc::create_rmp_in::CTX, rmpc::STATE, 0);
    assert_eq!(d.status(&inp, 16).0, CmdStatus::BadParam);
    // Bigger than `log_max_srq_sz`.
    let max = ifc::cmd_hca_cap::LOG_MAX_SRQ_SZ.get(&d.query_caps(CapType::General, true));
    let mut inp = rmp_input(&mut d, pd);
    set_in(&mut inp, w, wq::LOG_WQ_SZ, max + 1);
    assert_eq!(d.status(&inp, 16).0, CmdStatus::BadParam);
    // No such PD.
    let mut inp = rmp_input(&mut d, pd);
    set_in(&mut inp, w, wq::PD, u64::from(pd + 100));
    assert_eq!(d.status(&inp, 16).0, CmdStatus::BadResource);
    // A PAS list shorter than the queue.
    let mut inp = rmp_input(&mut d, pd);
    set_in(&mut inp, w, wq::LOG_WQ_SZ, 8);
    assert_eq!(d.status(&inp, 16).0, CmdStatus::BadInputLen);
}

#[test]
fn xrc_srq_created_armed_queried_destroyed() {
    let mut d = up();
    let (pd, xrcd, cq) = resources(&mut d);
    let (inp, dbr) = xrc_input(&mut d, pd, xrcd, cq);
    let n = ifc::create_xrc_srq_out::XRC_SRQN.get(&d.ok(&inp, 16)) as u32;
    let mut q = input(Opcode::QueryXrcSrq, 0, ifc::query_xrc_srq_in::SIZE);
    ifc::query_xrc_srq_in::XRC_SRQN.set(&mut q, u64::from(n));
    let out = d.ok(&q, ifc::query_xrc_srq_out::SIZE);
    let c = ifc::query_xrc_srq_out::XRC_SRQ_CONTEXT_ENTRY;
    assert_eq!(xc::STATE.at(c).get(&out), 0, "MLX5_XRC_SRQC_STATE_GOOD");
    assert_eq!(xc::LOG_XRC_SRQ_SIZE.at(c).get(&out), u64::from(LOG_SIZE));
    assert_eq!(xc::LOG_RQ_STRIDE.at(c).get(&out), u64::from(LOG_STRIDE - 4));
    assert_eq!(xc::XRCD.at(c).get(&out), u64::from(xrcd));
    assert_eq!(xc::CQN.at(c).get(&out), u64::from(cq));
    assert_eq!(xc::USER_INDEX.at(c).get(&out), 0xff_ffff);
    assert_eq!(Field::new(c.bit + xc::DB_RECORD_ADDR_H.bit, 64).get(&out), dbr);
    // Its CQ is held.
    let mut dc = input(Opcode::DestroyCq, 0, ifc::destroy_cq_in::SIZE);
    ifc::destroy_cq_in::CQN.set(&mut dc, u64::from(cq));
    assert_eq!(d.status(&dc, 16).0, CmdStatus::ResourceBusy);
    // `arm_xrc_srq_cmd`: op_mod MLX5_ARM_XRC_SRQ_IN_OP_MOD_XRC_SRQ.
    use ifc::arm_xrc_srq_in as a;
    let mut arm = input(Opcode::ArmXrcSrq, 1, a::SIZE);
    a::XRC_SRQN.set(&mut arm, u64::from(n));
    a::LWM.set(&mut arm, 1);
    d.ok(&arm, 16);
    ifc::cmd_in::OP_MOD.set(&mut arm, 0);
    assert_eq!(d.status(&arm, 16).0, CmdStatus::BadParam);
    // An XRC SRQ is not an RMP.
    let mut qr = input(Opcode::QueryRmp, 0, ifc::query_rmp_in::SIZE);
    ifc::query_rmp_in::RMPN.set(&mut qr, u64::from(n));
    assert_eq!(d.status(&qr, ifc::query_rmp_out::SIZE).0, CmdStatus::BadResource);
    let mut x = input(Opcode::DestroyXrcSrq, 0, ifc::destroy_xrc_srq_in::SIZE);
    ifc::destroy_xrc_srq_in::XRC_SRQN.set(&mut x, u64::from(n));
    d.ok(&x, 16);
    assert_eq!(d.status(&x, 16).0, CmdStatus::BadResource);
    d.ok(&dc, 16);
}

#[test]
fn xrc_srq_needs_its_domain_and_cq() {
    let mut d = up();
    let (pd, xrcd, cq) = resources(&mut d);
    let (inp, _) = xrc_input(&mut d, pd, xrcd + 7, cq);
    assert_eq!(d.status(&inp, 16).0, CmdStatus::BadResource);
    let (inp, _) = xrc_input(&mut d, pd, xrcd, cq + 7);
    assert_eq!(d.status(&inp, 16).0, CmdStatus::BadResource);
    let (mut inp, _) = xrc_input(&mut d, pd, xrcd, cq);
    set_in(&mut inp, ifc::create_xrc_srq_in::XRC_SRQ_CONTEXT_ENTRY, xc::CONT_SRQ, 1);
    assert_eq!(d.status(&inp, 16).0, CmdStatus::BadParam);
}
