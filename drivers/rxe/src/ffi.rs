//! Declarations of the rdma-core (libibverbs, librdmacm) and shim symbols this crate calls.
//!
//! Only the structures the data path fills or reads field by field are declared here
//! (`ibv_send_wr`, `ibv_recv_wr`, `ibv_wc`, `ibv_qp_init_attr`, `ibv_mr`, `rdma_addrinfo`,
//! `rdma_conn_param`, from `infiniband/verbs.h` and `rdma/rdma_cma.h` of rdma-core 44); the
//! others stay opaque and are reached through `c/shim.c`. The test at the bottom checks every
//! size and offset against the C compiler's view of the headers. The scatter-gather element is
//! the core's [`Sge`] itself, which is layout-identical to `struct ibv_sge`.

#![allow(non_camel_case_types)]

use core::ffi::{c_char, c_int, c_uint, c_void};

use rdma_pmd::Sge;

/// Opaque `struct rdma_cm_id`.
#[repr(C)]
pub struct rdma_cm_id {
    _opaque: [u8; 0],
}

/// Opaque `struct ibv_context`.
#[repr(C)]
pub struct ibv_context {
    _opaque: [u8; 0],
}

/// Opaque `struct ibv_pd`.
#[repr(C)]
pub struct ibv_pd {
    _opaque: [u8; 0],
}

/// Opaque `struct ibv_cq`.
#[repr(C)]
pub struct ibv_cq {
    _opaque: [u8; 0],
}

/// Opaque `struct ibv_qp`.
#[repr(C)]
pub struct ibv_qp {
    _opaque: [u8; 0],
}

/// Opaque `struct ibv_comp_channel`.
#[repr(C)]
pub struct ibv_comp_channel {
    _opaque: [u8; 0],
}

/// Opaque `struct ibv_ah`.
#[repr(C)]
pub struct ibv_ah {
    _opaque: [u8; 0],
}

/// `struct ibv_send_wr`'s `wr.rdma`: the target of an RDMA WRITE or READ.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

/// `struct ibv_send_wr`'s `wr.atomic`: the target and operands of an atomic (host byte order).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

/// `struct ibv_send_wr`'s `wr.ud`: where a datagram goes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wr_ud {
    pub ah: *mut ibv_ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// The `wr` union of `struct ibv_send_wr` (32 bytes: its `atomic` arm).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    pub rdma: ibv_wr_rdma,
    pub atomic: ibv_wr_atomic,
    pub ud: ibv_wr_ud,
}

/// `struct ibv_send_wr`, with the trailing unions (`qp_type`, `bind_mw`/`tso`), which this
/// crate never sets, as padding.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut Sge,
    pub num_sge: c_int,
    pub opcode: c_uint,
    pub send_flags: c_uint,
    /// `imm_data`, network byte order.
    pub imm_data: u32,
    pub wr: ibv_send_wr_wr,
    /// `qp_type` union and padding.
    pub _qp_type: [u32; 2],
    /// `bind_mw` / `tso` union.
    pub _bind_mw: [u64; 6],
}

impl ibv_send_wr {
    /// An all-zero request.
    pub const ZERO: ibv_send_wr = ibv_send_wr {
        wr_id: 0,
        next: core::ptr::null_mut(),
        sg_list: core::ptr::null_mut(),
        num_sge: 0,
        opcode: 0,
        send_flags: 0,
        imm_data: 0,
        wr: ibv_send_wr_wr {
            atomic: ibv_wr_atomic { remote_addr: 0, compare_add: 0, swap: 0, rkey: 0 },
        },
        _qp_type: [0; 2],
        _bind_mw: [0; 6],
    };
}

/// `struct ibv_recv_wr`.
#[repr(C)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut Sge,
    pub num_sge: c_int,
}

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: c_uint,
    pub opcode: c_uint,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// `imm_data`, network byte order, valid with `IBV_WC_WITH_IMM`.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub cap: ibv_qp_cap,
    pub qp_type: c_uint,
    pub sq_sig_all: c_int,
}

/// `struct ibv_mr`.
#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct rdma_addrinfo`.
#[repr(C)]
pub struct rdma_addrinfo {
    pub ai_flags: c_int,
    pub ai_family: c_int,
    pub ai_qp_type: c_int,
    pub ai_port_space: c_int,
    pub ai_src_len: u32,
    pub ai_dst_len: u32,
    pub ai_src_addr: *mut c_void,
    pub ai_dst_addr: *mut c_void,
    pub ai_src_canonname: *mut c_char,
    pub ai_dst_canonname: *mut c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut rdma_addrinfo,
}

/// `struct rdma_conn_param`.
#[repr(C)]
pub struct rdma_conn_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// `IBV_WR_RDMA_WRITE`.
pub const IBV_WR_RDMA_WRITE: c_uint = 0;
/// `IBV_WR_RDMA_WRITE_WITH_IMM`.
pub const IBV_WR_RDMA_WRITE_WITH_IMM: c_uint = 1;
/// `IBV_WR_SEND`.
pub const IBV_WR_SEND: c_uint = 2;
/// `IBV_WR_SEND_WITH_IMM`.
pub const IBV_WR_SEND_WITH_IMM: c_uint = 3;
/// `IBV_WR_RDMA_READ`.
pub const IBV_WR_RDMA_READ: c_uint = 4;
/// `IBV_WR_ATOMIC_CMP_AND_SWP`.
pub const IBV_WR_ATOMIC_CMP_AND_SWP: c_uint = 5;
/// `IBV_WR_ATOMIC_FETCH_AND_ADD`.
pub const IBV_WR_ATOMIC_FETCH_AND_ADD: c_uint = 6;
/// `IBV_WC_GRH` (a `wc_flags` bit).
pub const IBV_WC_GRH: c_uint = 1 << 0;
/// `IBV_WC_WITH_IMM` (a `wc_flags` bit).
pub const IBV_WC_WITH_IMM: c_uint = 1 << 1;
/// `IBV_QPT_RC`.
pub const IBV_QPT_RC: c_uint = 2;
/// `IBV_QPT_UD`.
pub const IBV_QPT_UD: c_uint = 4;
/// `RDMA_PS_TCP`.
pub const RDMA_PS_TCP: c_int = 0x0106;
/// `RAI_PASSIVE`.
pub const RAI_PASSIVE: c_int = 1;

#[link(name = "rdmacm")]
extern "C" {
    pub fn rdma_getaddrinfo(
        node: *const c_char,
        service: *const c_char,
        hints: *const rdma_addrinfo,
        res: *mut *mut rdma_addrinfo,
    ) -> c_int;
    pub fn rdma_freeaddrinfo(res: *mut rdma_addrinfo);
    pub fn rdma_create_ep(
        id: *mut *mut rdma_cm_id,
        res: *mut rdma_addrinfo,
        pd: *mut ibv_pd,
        qp_init_attr: *mut ibv_qp_init_attr,
    ) -> c_int;
    pub fn rdma_destroy_ep(id: *mut rdma_cm_id);
    pub fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int;
    pub fn rdma_get_request(listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> c_int;
    pub fn rdma_accept(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int;
    pub fn rdma_connect(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int;
    pub fn rdma_create_qp(
        id: *mut rdma_cm_id,
        pd: *mut ibv_pd,
        qp_init_attr: *mut ibv_qp_init_attr,
    ) -> c_int;
    pub fn rdma_destroy_qp(id: *mut rdma_cm_id);
}

#[link(name = "ibverbs")]
extern "C" {
    pub fn ibv_create_cq(
        context: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
    ) -> *mut ibv_cq;
    pub fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int;
    /// The exported `ibv_reg_mr` (verbs.h wraps it in a macro that may pick `ibv_reg_mr_iova2`;
    /// the exported function is the same registration with `iova == addr`).
    pub fn ibv_reg_mr(
        pd: *mut ibv_pd,
        addr: *mut c_void,
        length: usize,
        access: c_int,
    ) -> *mut ibv_mr;
    pub fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int;
    pub fn ibv_create_qp(pd: *mut ibv_pd, qp_init_attr: *mut ibv_qp_init_attr) -> *mut ibv_qp;
    pub fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int;
    /// `union ibv_gid` is 16 bytes, network order.
    pub fn ibv_query_gid(
        context: *mut ibv_context,
        port_num: u8,
        index: c_int,
        gid: *mut [u8; 16],
    ) -> c_int;
    pub fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int;
}

/// The provider's `ops.post_send`, which `ibv_post_send` (inline in `verbs.h`) calls.
pub type PostSendFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
/// The provider's `ops.poll_cq`, which `ibv_poll_cq` (inline in `verbs.h`) calls.
pub type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;

// c/shim.c
extern "C" {
    /// `qp->context->ops.post_send`.
    pub fn rxe_shim_post_send_entry(qp: *const ibv_qp) -> Option<PostSendFn>;
    /// `cq->context->ops.poll_cq`.
    pub fn rxe_shim_poll_cq_entry(cq: *const ibv_cq) -> Option<PollCqFn>;
    pub fn rxe_shim_post_recv(
        qp: *mut ibv_qp,
        wr: *mut ibv_recv_wr,
        bad: *mut *mut ibv_recv_wr,
    ) -> c_int;
    pub fn rxe_shim_id_verbs(id: *const rdma_cm_id) -> *mut ibv_context;
    pub fn rxe_shim_id_pd(id: *const rdma_cm_id) -> *mut ibv_pd;
    pub fn rxe_shim_id_qp(id: *const rdma_cm_id) -> *mut ibv_qp;
    pub fn rxe_shim_id_private_data(id: *const rdma_cm_id, len: *mut u8) -> *const c_void;
    pub fn rxe_shim_qp_num(qp: *const ibv_qp) -> u32;
    pub fn rxe_shim_id_port(id: *const rdma_cm_id) -> u8;
    /// INIT (port, P_Key index 0, `qkey`), RTR, RTS (`sq_psn` 0); 0 or the errno.
    pub fn rxe_shim_ud_ready(qp: *mut ibv_qp, port: u8, qkey: u32) -> c_int;
    /// `ibv_create_ah` with a global route (`is_global = 1`) to `dgid` (16 bytes).
    pub fn rxe_shim_create_ah(
        pd: *mut ibv_pd,
        port: u8,
        dgid: *const u8,
        sgid_index: u8,
        hop_limit: u8,
        traffic_class: u8,
        flow_label: u32,
        sl: u8,
        static_rate: u8,
    ) -> *mut ibv_ah;
    pub fn rxe_shim_layout(name: *const c_char) -> u64;
}

// c/peer.c
extern "C" {
    pub fn rxe_peer_target(
        ip: *const c_char,
        port: *const c_char,
        out: *mut u8,
        len: u32,
        imm: *mut u32,
        listening: extern "C" fn(*mut c_void),
        ctx: *mut c_void,
    ) -> c_int;
    pub fn rxe_peer_pingpong(
        ip: *const c_char,
        port: *const c_char,
        active: c_int,
        size: u32,
        iters: u32,
        ticks: *mut u64,
        run_ns: *mut u64,
        run_ticks: *mut u64,
        listening: extern "C" fn(*mut c_void),
        ctx: *mut c_void,
    ) -> c_int;
    pub fn rxe_peer_writes(
        ip: *const c_char,
        port: *const c_char,
        active: c_int,
        size: u32,
        iters: u32,
        depth: u32,
        signal: u32,
        run_ns: *mut u64,
        listening: extern "C" fn(*mut c_void),
        ctx: *mut c_void,
    ) -> c_int;
    pub fn rxe_peer_writer(
        ip: *const c_char,
        port: *const c_char,
        data: *const u8,
        len: u32,
        token: u32,
    ) -> c_int;
}

#[cfg(test)]
mod tests;
