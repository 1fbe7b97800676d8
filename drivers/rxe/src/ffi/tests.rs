//! Every declaration of `ffi` against the C compiler's view of rdma-core's headers (the values
//! come from `c/shim.c`, compiled against the system's `infiniband/verbs.h` and
//! `rdma/rdma_cma.h`), plus the core types that cross the boundary unchanged.

use core::mem::{offset_of, size_of};
use std::ffi::CString;

use rdma_pmd::{SendFlags, Sge, WcOpcode, WcStatus};

use super::*;

fn c(name: &str) -> u64 {
    let n = CString::new(name).unwrap();
    // SAFETY: a NUL-terminated string; the shim only reads it.
    let v = unsafe { rxe_shim_layout(n.as_ptr()) };
    assert_ne!(v, u64::MAX, "the shim has no entry {name}");
    v
}

macro_rules! same {
    ($($name:literal => $rust:expr,)*) => {
        $(assert_eq!(c($name), $rust as u64, "{}", $name);)*
    };
}

#[test]
fn core_sge_is_ibv_sge() {
    same! {
        "sizeof ibv_sge" => size_of::<Sge>(),
        "ibv_sge.addr" => offset_of!(Sge, addr),
        "ibv_sge.length" => offset_of!(Sge, length),
        "ibv_sge.lkey" => offset_of!(Sge, lkey),
    }
}

#[test]
fn send_and_recv_requests() {
    same! {
        "sizeof ibv_send_wr" => size_of::<ibv_send_wr>(),
        "ibv_send_wr.wr_id" => offset_of!(ibv_send_wr, wr_id),
        "ibv_send_wr.next" => offset_of!(ibv_send_wr, next),
        "ibv_send_wr.sg_list" => offset_of!(ibv_send_wr, sg_list),
        "ibv_send_wr.num_sge" => offset_of!(ibv_send_wr, num_sge),
        "ibv_send_wr.opcode" => offset_of!(ibv_send_wr, opcode),
        "ibv_send_wr.send_flags" => offset_of!(ibv_send_wr, send_flags),
        "ibv_send_wr.imm_data" => offset_of!(ibv_send_wr, imm_data),
        "ibv_send_wr.wr" => offset_of!(ibv_send_wr, wr),
        "sizeof ibv_send_wr_wr_probe" => size_of::<ibv_send_wr_wr>(),
        "ibv_send_wr.wr.rdma.remote_addr" => offset_of!(ibv_send_wr, wr.rdma.remote_addr),
        "ibv_send_wr.wr.rdma.rkey" => offset_of!(ibv_send_wr, wr.rdma.rkey),
        "ibv_send_wr.wr.atomic.remote_addr" => offset_of!(ibv_send_wr, wr.atomic.remote_addr),
        "ibv_send_wr.wr.atomic.compare_add" => offset_of!(ibv_send_wr, wr.atomic.compare_add),
        "ibv_send_wr.wr.atomic.swap" => offset_of!(ibv_send_wr, wr.atomic.swap),
        "ibv_send_wr.wr.atomic.rkey" => offset_of!(ibv_send_wr, wr.atomic.rkey),
        "ibv_send_wr.wr.ud.ah" => offset_of!(ibv_send_wr, wr.ud.ah),
        "ibv_send_wr.wr.ud.remote_qpn" => offset_of!(ibv_send_wr, wr.ud.remote_qpn),
        "ibv_send_wr.wr.ud.remote_qkey" => offset_of!(ibv_send_wr, wr.ud.remote_qkey),
        "ibv_send_wr.qp_type" => offset_of!(ibv_send_wr, _qp_type),
        "ibv_send_wr.bind_mw" => offset_of!(ibv_send_wr, _bind_mw),
        "sizeof ibv_recv_wr" => size_of::<ibv_recv_wr>(),
        "ibv_recv_wr.wr_id" => offset_of!(ibv_recv_wr, wr_id),
        "ibv_recv_wr.next" => offset_of!(ibv_recv_wr, next),
        "ibv_recv_wr.sg_list" => offset_of!(ibv_recv_wr, sg_list),
        "ibv_recv_wr.num_sge" => offset_of!(ibv_recv_wr, num_sge),
    }
}

#[test]
fn work_completion() {
    same! {
        "sizeof ibv_wc" => size_of::<ibv_wc>(),
        "ibv_wc.wr_id" => offset_of!(ibv_wc, wr_id),
        "ibv_wc.status" => offset_of!(ibv_wc, status),
        "ibv_wc.opcode" => offset_of!(ibv_wc, opcode),
        "ibv_wc.vendor_err" => offset_of!(ibv_wc, vendor_err),
        "ibv_wc.byte_len" => offset_of!(ibv_wc, byte_len),
        "ibv_wc.imm_data" => offset_of!(ibv_wc, imm_data),
        "ibv_wc.qp_num" => offset_of!(ibv_wc, qp_num),
        "ibv_wc.src_qp" => offset_of!(ibv_wc, src_qp),
        "ibv_wc.wc_flags" => offset_of!(ibv_wc, wc_flags),
    }
}

#[test]
fn setup_structures() {
    same! {
        "sizeof ibv_qp_cap" => size_of::<ibv_qp_cap>(),
        "ibv_qp_cap.max_send_wr" => offset_of!(ibv_qp_cap, max_send_wr),
        "ibv_qp_cap.max_recv_wr" => offset_of!(ibv_qp_cap, max_recv_wr),
        "ibv_qp_cap.max_send_sge" => offset_of!(ibv_qp_cap, max_send_sge),
        "ibv_qp_cap.max_recv_sge" => offset_of!(ibv_qp_cap, max_recv_sge),
        "ibv_qp_cap.max_inline_data" => offset_of!(ibv_qp_cap, max_inline_data),
        "sizeof ibv_qp_init_attr" => size_of::<ibv_qp_init_attr>(),
        "ibv_qp_init_attr.qp_context" => offset_of!(ibv_qp_init_attr, qp_context),
        "ibv_qp_init_attr.send_cq" => offset_of!(ibv_qp_init_attr, send_cq),
        "ibv_qp_init_attr.recv_cq" => offset_of!(ibv_qp_init_attr, recv_cq),
        "ibv_qp_init_attr.srq" => offset_of!(ibv_qp_init_attr, srq),
        "ibv_qp_init_attr.cap" => offset_of!(ibv_qp_init_attr, cap),
        "ibv_qp_init_attr.qp_type" => offset_of!(ibv_qp_init_attr, qp_type),
        "ibv_qp_init_attr.sq_sig_all" => offset_of!(ibv_qp_init_attr, sq_sig_all),
        "sizeof ibv_mr" => size_of::<ibv_mr>(),
        "ibv_mr.addr" => offset_of!(ibv_mr, addr),
        "ibv_mr.length" => offset_of!(ibv_mr, length),
        "ibv_mr.lkey" => offset_of!(ibv_mr, lkey),
        "ibv_mr.rkey" => offset_of!(ibv_mr, rkey),
        "sizeof rdma_addrinfo" => size_of::<rdma_addrinfo>(),
        "rdma_addrinfo.ai_flags" => offset_of!(rdma_addrinfo, ai_flags),
        "rdma_addrinfo.ai_port_space" => offset_of!(rdma_addrinfo, ai_port_space),
        "rdma_addrinfo.ai_next" => offset_of!(rdma_addrinfo, ai_next),
        "sizeof rdma_conn_param" => size_of::<rdma_conn_param>(),
        "rdma_conn_param.private_data" => offset_of!(rdma_conn_param, private_data),
        "rdma_conn_param.private_data_len" => offset_of!(rdma_conn_param, private_data_len),
        "rdma_conn_param.responder_resources" => offset_of!(rdma_conn_param, responder_resources),
        "rdma_conn_param.initiator_depth" => offset_of!(rdma_conn_param, initiator_depth),
        "rdma_conn_param.flow_control" => offset_of!(rdma_conn_param, flow_control),
        "rdma_conn_param.retry_count" => offset_of!(rdma_conn_param, retry_count),
        "rdma_conn_param.rnr_retry_count" => offset_of!(rdma_conn_param, rnr_retry_count),
        "rdma_conn_param.srq" => offset_of!(rdma_conn_param, srq),
        "rdma_conn_param.qp_num" => offset_of!(rdma_conn_param, qp_num),
    }
}

#[test]
fn constants() {
    same! {
        "IBV_WR_RDMA_WRITE" => IBV_WR_RDMA_WRITE,
        "IBV_WR_RDMA_WRITE_WITH_IMM" => IBV_WR_RDMA_WRITE_WITH_IMM,
        "IBV_WR_SEND" => IBV_WR_SEND,
        "IBV_WR_SEND_WITH_IMM" => IBV_WR_SEND_WITH_IMM,
        "IBV_WR_RDMA_READ" => IBV_WR_RDMA_READ,
        "IBV_WR_ATOMIC_CMP_AND_SWP" => IBV_WR_ATOMIC_CMP_AND_SWP,
        "IBV_WR_ATOMIC_FETCH_AND_ADD" => IBV_WR_ATOMIC_FETCH_AND_ADD,
        "IBV_WC_GRH" => IBV_WC_GRH,
        "IBV_QPT_UD" => IBV_QPT_UD,
        "IBV_ACCESS_REMOTE_ATOMIC" => crate::Access::REMOTE_ATOMIC.bits(),
        "IBV_WC_WITH_IMM" => IBV_WC_WITH_IMM,
        "IBV_QPT_RC" => IBV_QPT_RC,
        "RDMA_PS_TCP" => RDMA_PS_TCP,
        "RAI_PASSIVE" => RAI_PASSIVE,
        "IBV_ACCESS_LOCAL_WRITE" => crate::Access::LOCAL_WRITE.bits(),
        "IBV_ACCESS_REMOTE_WRITE" => crate::Access::REMOTE_WRITE.bits(),
        "IBV_ACCESS_REMOTE_READ" => crate::Access::REMOTE_READ.bits(),
    }
}

#[test]
fn core_codes_pass_through_unchanged() {
    same! {
        "IBV_SEND_FENCE" => SendFlags::FENCE.bits(),
        "IBV_SEND_SIGNALED" => SendFlags::SIGNALED.bits(),
        "IBV_SEND_SOLICITED" => SendFlags::SOLICITED.bits(),
        "IBV_SEND_INLINE" => SendFlags::INLINE.bits(),
        "IBV_WC_SUCCESS" => u32::from(WcStatus::Success),
        "IBV_WC_LOC_PROT_ERR" => u32::from(WcStatus::LocProtErr),
        "IBV_WC_WR_FLUSH_ERR" => u32::from(WcStatus::WrFlushErr),
        "IBV_WC_REM_ACCESS_ERR" => u32::from(WcStatus::RemAccessErr),
        "IBV_WC_RETRY_EXC_ERR" => u32::from(WcStatus::RetryExcErr),
        "IBV_WC_GENERAL_ERR" => u32::from(WcStatus::GeneralErr),
        "IBV_WC_RDMA_WRITE" => u32::from(WcOpcode::RdmaWrite),
        "IBV_WC_RECV_RDMA_WITH_IMM" => u32::from(WcOpcode::RecvRdmaWithImm),
        "IBV_WC_SEND" => u32::from(WcOpcode::Send),
        "IBV_WC_RDMA_READ" => u32::from(WcOpcode::RdmaRead),
        "IBV_WC_COMP_SWAP" => u32::from(WcOpcode::CompSwap),
        "IBV_WC_FETCH_ADD" => u32::from(WcOpcode::FetchAdd),
        "IBV_WC_LOC_LEN_ERR" => u32::from(WcStatus::LocLenErr),
        "IBV_WC_LOC_QP_OP_ERR" => u32::from(WcStatus::LocQpOpErr),
        "IBV_WC_REM_INV_REQ_ERR" => u32::from(WcStatus::RemInvReqErr),
        "IBV_WC_REM_OP_ERR" => u32::from(WcStatus::RemOpErr),
        "IBV_WC_RNR_RETRY_EXC_ERR" => u32::from(WcStatus::RnrRetryExcErr),
    }
    assert_eq!(c("IBV_WC_RECV"), 128);
}
