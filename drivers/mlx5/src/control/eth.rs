//! The Ethernet (raw packet) path's firmware objects and their commands: a transport domain,
//! a TIS and an SQ for sending; an RQ, a TIR and a NIC receive flow table steering one
//! ethertype (ARP) to it. A ConnectX answers no ARP by itself, and frames that are not RoCE
//! reach software only through such a path.
//!
//! Each command is built by a pure function here, checked on its bytes against `mlx5_ifc.h`
//! through the generated accessors (`control/eth/tests.rs`); [`FwControl`](super::fw::FwControl)
//! runs them. The values are the kernel's mlx5e choices (`en_main.c` `mlx5e_create_sq`,
//! `mlx5e_modify_sq`, `mlx5e_create_rq`, `mlx5e_modify_rq_state`, `en_common.c`
//! `mlx5e_create_tis`, `en/tir.c`, `fs_cmd.c` `mlx5_cmd_create_flow_table`,
//! `mlx5_cmd_create_flow_group`, `mlx5_cmd_set_fte`, `mlx5_cmd_update_root_ft`); where the
//! driver differs, `drivers/mlx5/ETH.md` says why.
//!
//! Creation order, and teardown in reverse ([`EthObject`] names what to destroy):
//! transport domain → TIS → SQ (RST→RDY) → RQ (RST→RDY) → TIR → flow table → flow group →
//! flow entry → root.

use rdma_pmd::{BusAddr, Error};

use crate::control::bringup::{input, HcaCaps, FW_PAGE};
use crate::control::cmd::Pas;
use crate::control::{Cqn, Pdn, Uar};
use crate::layout::ifc::{self, consts, generated::*};

/// A transport domain (`ALLOC_TRANSPORT_DOMAIN`): the scope TISs and TIRs share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tdn(pub u32);
/// A transport interface send object (`CREATE_TIS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tisn(pub u32);
/// A send queue (`CREATE_SQ`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sqn(pub u32);
/// A receive queue (`CREATE_RQ`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rqn(pub u32);
/// A transport interface receive object (`CREATE_TIR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tirn(pub u32);
/// A flow table (`CREATE_FLOW_TABLE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowTableId(pub u32);
/// A flow group of a table (`CREATE_FLOW_GROUP`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowGroupId(pub u32);

/// How many header bytes a send WQE must carry inline in its Ethernet segment
/// (`enum mlx5_inline_modes`, kernel `include/linux/mlx5/device.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InlineMode {
    /// `MLX5_INLINE_MODE_NONE`: nothing need be inline.
    None,
    /// `MLX5_INLINE_MODE_L2`: the L2 header (the kernel inlines 18 bytes: 14 + a VLAN tag).
    L2,
    /// `MLX5_INLINE_MODE_IP`: up to the L3 header.
    Ip,
    /// `MLX5_INLINE_MODE_TCP_UDP`: up to the L4 header.
    TcpUdp,
}

impl InlineMode {
    /// The `min_wqe_inline_mode` value.
    pub const fn raw(self) -> u8 {
        match self {
            InlineMode::None => 0,
            InlineMode::L2 => 1,
            InlineMode::Ip => 2,
            InlineMode::TcpUdp => 3,
        }
    }

    /// From a `min_wqe_inline_mode` value (3 bits; 4..7 are not defined: the most demanding
    /// mode, so a frame is never sent with less inline than firmware wants).
    pub const fn from_raw(v: u8) -> Self {
        match v {
            0 => InlineMode::None,
            1 => InlineMode::L2,
            2 => InlineMode::Ip,
            _ => InlineMode::TcpUdp,
        }
    }
}

/// `MLX5_CAP_INLINE_MODE_L2` (kernel `include/linux/mlx5/vport.h`): the SQ must inline L2.
pub const CAP_INLINE_MODE_L2: u64 = 0;
/// `MLX5_CAP_INLINE_MODE_VPORT_CONTEXT`: the NIC vport context says (`min_wqe_inline_mode`).
pub const CAP_INLINE_MODE_VPORT_CONTEXT: u64 = 1;
/// `MLX5_CAP_INLINE_MODE_NOT_REQUIRED`: nothing need be inline.
pub const CAP_INLINE_MODE_NOT_REQUIRED: u64 = 2;
/// `MLX5_CAP_ETHERNET_OFFLOADS` (kernel `enum mlx5_cap_type`): the capability type of
/// `per_protocol_networking_offload_caps` in `QUERY_HCA_CAP`'s op_mod.
pub const CAP_ETHERNET_OFFLOADS: u16 = 1;
/// `MLX5_SEND_WQE_BB`: a send WQE basic block, 64 bytes (`log_wq_stride` 6).
pub const LOG_SEND_WQE_BB: u64 = 6;
/// One 16-byte data segment per receive WQE (`log_wq_stride` 4).
pub const LOG_RECV_WQE_STRIDE: u64 = 4;
/// `op_mod` 1 of `SET_FLOW_TABLE_ROOT`: disconnect the root (`mlx5_cmd_update_root_ft`).
pub const ROOT_DISCONNECT: u16 = 1;
/// `match_criteria_enable` bit of the outer headers.
pub const MATCH_OUTER_HEADERS: u64 =
    1 << consts::CREATE_FLOW_GROUP_IN_MATCH_CRITERIA_ENABLE_OUTER_HEADERS;

/// The SQ's inline mode from what firmware reported: `wqe_inline_mode` of the Ethernet
/// offload capabilities, and where that says "vport context", the context's
/// `min_wqe_inline_mode` (`mlx5_query_min_inline`). An unknown capability value is read as
/// L2, the kernel's default arm.
pub fn min_inline(wqe_inline_mode: u64, vport_min_inline: u8) -> InlineMode {
    match wqe_inline_mode {
        CAP_INLINE_MODE_VPORT_CONTEXT => InlineMode::from_raw(vport_min_inline),
        CAP_INLINE_MODE_NOT_REQUIRED => InlineMode::None,
        _ => InlineMode::L2,
    }
}

/// `CREATE_SQ` fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SqParams {
    /// Protection domain of the WQEs' keys.
    pub pd: Pdn,
    /// Completion queue of the SQ.
    pub cq: Cqn,
    /// UAR page whose doorbell the SQ rings.
    pub uar: Uar,
    /// The TIS the SQ's frames leave through.
    pub tis: Tisn,
    /// log2 of the ring size in 64-byte basic blocks.
    pub log_size: u8,
    /// Bus address of the ring (page aligned, bus-contiguous).
    pub buf: BusAddr,
    /// Bus address of the doorbell record (`[1]` is the send counter).
    pub dbrec: BusAddr,
    /// Inline mode firmware requires ([`min_inline`]).
    pub min_inline: InlineMode,
    /// The Ethernet capability `wqe_inline_mode` (the SQ carries `min_wqe_inline_mode` only
    /// where that says "vport context", as `mlx5e_create_sq` does).
    pub wqe_inline_cap: u64,
}

/// `CREATE_RQ` fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RqParams {
    /// Protection domain of the WQEs' keys.
    pub pd: Pdn,
    /// Completion queue of the RQ.
    pub cq: Cqn,
    /// log2 of the number of receive WQEs (one 16-byte data segment each).
    pub log_size: u8,
    /// Bus address of the ring (page aligned, bus-contiguous).
    pub buf: BusAddr,
    /// Bus address of the doorbell record (`[0]` is the receive counter).
    pub dbrec: BusAddr,
}

/// What to create on the Ethernet path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EthCreate {
    /// `ALLOC_TRANSPORT_DOMAIN`.
    TransportDomain,
    /// `CREATE_TIS` in a transport domain.
    Tis(Tdn),
    /// `CREATE_SQ` (state RST).
    Sq(SqParams),
    /// `CREATE_RQ` (state RST).
    Rq(RqParams),
    /// `CREATE_TIR`: direct dispatch to one RQ.
    Tir {
        /// Transport domain (the TIS's).
        td: Tdn,
        /// The RQ.
        rq: Rqn,
    },
    /// `CREATE_FLOW_TABLE` of the NIC receive path.
    FlowTable {
        /// Table level (0: a root table).
        level: u8,
        /// log2 of the number of entries.
        log_size: u8,
    },
    /// `CREATE_FLOW_GROUP` over entries `start..=end`, matching untagged frames by
    /// destination-independent outer ethertype.
    EthertypeGroup {
        /// The table.
        table: FlowTableId,
        /// First entry.
        start: u32,
        /// Last entry.
        end: u32,
    },
    /// `SET_FLOW_TABLE_ENTRY`: untagged frames of `ethertype` forwarded to `tir`.
    EthertypeEntry {
        /// The table.
        table: FlowTableId,
        /// The group (created by [`EthCreate::EthertypeGroup`]).
        group: FlowGroupId,
        /// Entry index.
        index: u32,
        /// Ethertype to match.
        ethertype: u16,
        /// Destination.
        tir: Tirn,
    },
    /// `SET_FLOW_TABLE_ROOT`: make the table the NIC receive root.
    Root(FlowTableId),
}

/// A created Ethernet-path object, as it is named to destroy it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EthObject {
    /// A transport domain.
    TransportDomain(Tdn),
    /// A TIS.
    Tis(Tisn),
    /// An SQ.
    Sq(Sqn),
    /// An RQ.
    Rq(Rqn),
    /// A TIR.
    Tir(Tirn),
    /// A flow table.
    FlowTable(FlowTableId),
    /// A flow group.
    FlowGroup {
        /// Its table.
        table: FlowTableId,
        /// The group.
        group: FlowGroupId,
    },
    /// A flow table entry.
    FlowEntry {
        /// Its table.
        table: FlowTableId,
        /// Entry index.
        index: u32,
    },
    /// The NIC receive root set to a table (destroying it disconnects the root).
    Root(FlowTableId),
}

/// `ALLOC_TRANSPORT_DOMAIN`.
pub fn alloc_transport_domain_cmd() -> [u8; alloc_transport_domain_in::SIZE] {
    input(consts::CMD_OP_ALLOC_TRANSPORT_DOMAIN, 0)
}

/// `CREATE_TIS` as `mlx5e_create_tis` builds it for traffic class 0 without LAG or TLS: only
/// the transport domain (`prio` 0, no `pd`, no port affinity).
pub fn create_tis_cmd(td: Tdn) -> [u8; create_tis_in::SIZE] {
    let mut c: [u8; create_tis_in::SIZE] = input(consts::CMD_OP_CREATE_TIS, 0);
    ifc::set(&mut c, tisc::TRANSPORT_DOMAIN.within(create_tis_in::CTX), td.0 as u64);
    c
}

fn check_ring(buf: BusAddr, dbrec: BusAddr, log_size: u8, stride_log: u64) -> Result<usize, Error> {
    if !buf.is_aligned(FW_PAGE as u64) || !dbrec.is_aligned(8) {
        return Err(Error::InvalidArgument("ring not page aligned or doorbell not 8-aligned"));
    }
    if log_size > 16 {
        return Err(Error::InvalidArgument("Ethernet ring larger than 2^16 entries"));
    }
    Ok(((1usize << log_size) << stride_log).div_ceil(FW_PAGE))
}

/// The SQ/RQ timestamp format, as `mlx5_is_real_time_sq`/`_rq` choose: real time only where
/// the device offers nothing else, free running otherwise (the driver reads no timestamps).
fn wq_ts_format(cap: u8) -> u64 {
    if cap as u16 == consts::TIMESTAMP_FORMAT_CAP_REAL_TIME {
        consts::TIMESTAMP_FORMAT_REAL_TIME.into()
    } else {
        consts::TIMESTAMP_FORMAT_FREE_RUNNING.into()
    }
}

/// `CREATE_SQ` as `mlx5e_create_sq` with `mlx5e_build_sq_param_common` builds it: one TIS,
/// the CQ, state RST, flush in error, `min_wqe_inline_mode` only where the capability defers
/// to the vport context, a cyclic WQ of 64-byte blocks on the UAR page with its doorbell
/// record, 4 KiB pages listed after the context.
pub fn create_sq_cmd(
    p: &SqParams,
    caps: &HcaCaps,
) -> Result<([u8; create_sq_in::SIZE], Pas<'static>), Error> {
    let pages = check_ring(p.buf, p.dbrec, p.log_size, LOG_SEND_WQE_BB)?;
    let mut c: [u8; create_sq_in::SIZE] = input(consts::CMD_OP_CREATE_SQ, 0);
    let x = create_sq_in::CTX;
    let w = sqc::WQ.within(x);
    let set = |c: &mut [u8], f: ifc::Field, v: u64| ifc::set(c, f.within(x), v);
    let set_wq = |c: &mut [u8], f: ifc::Field, v: u64| ifc::set(c, f.within(w), v);
    set(&mut c, sqc::TIS_LST_SZ, 1);
    set(&mut c, sqc::TIS_NUM_0, p.tis.0 as u64);
    set(&mut c, sqc::CQN, p.cq.0 as u64);
    set(&mut c, sqc::TS_FORMAT, wq_ts_format(caps.sq_ts_format));
    if p.wqe_inline_cap == CAP_INLINE_MODE_VPORT_CONTEXT {
        set(&mut c, sqc::MIN_WQE_INLINE_MODE, p.min_inline.raw() as u64);
    }
    set(&mut c, sqc::STATE, consts::SQC_STATE_RST.into());
    set(&mut c, sqc::FLUSH_IN_ERROR_EN, 1);
    set_wq(&mut c, wq::WQ_TYPE, consts::WQ_WQ_TYPE_WQ_CYCLIC.into());
    set_wq(&mut c, wq::PD, p.pd.0 as u64);
    set_wq(&mut c, wq::UAR_PAGE, p.uar.index as u64);
    set_wq(&mut c, wq::DBR_ADDR, p.dbrec.0);
    set_wq(&mut c, wq::LOG_WQ_STRIDE, LOG_SEND_WQE_BB);
    set_wq(&mut c, wq::LOG_WQ_PG_SZ, 0); // 4 KiB pages (relative to 4 KiB)
    set_wq(&mut c, wq::LOG_WQ_SZ, p.log_size as u64);
    Ok((c, Pas::Linear { base: p.buf.0, step: FW_PAGE as u64, count: pages }))
}

/// `MODIFY_SQ` RST→RDY (`mlx5e_modify_sq`: current state in `sq_state`, next in the context).
pub fn modify_sq_rdy_cmd(sq: Sqn) -> [u8; modify_sq_in::SIZE] {
    let mut c: [u8; modify_sq_in::SIZE] = input(consts::CMD_OP_MODIFY_SQ, 0);
    ifc::set(&mut c, modify_sq_in::SQ_STATE, consts::SQC_STATE_RST.into());
    ifc::set(&mut c, modify_sq_in::SQN, sq.0 as u64);
    ifc::set(&mut c, sqc::STATE.within(modify_sq_in::CTX), consts::SQC_STATE_RDY.into());
    c
}

/// `CREATE_RQ` as `mlx5e_create_rq` with `mlx5e_build_rq_param` builds it for a cyclic RQ:
/// the CQ, state RST, VLAN stripping off (`vsd`: the driver sees a tag and drops the frame
/// instead of answering for a VLAN it does not serve), flush in error, a cyclic WQ of one
/// 16-byte data segment per WQE, 4 KiB pages listed after the context.
pub fn create_rq_cmd(
    p: &RqParams,
    caps: &HcaCaps,
) -> Result<([u8; create_rq_in::SIZE], Pas<'static>), Error> {
    let pages = check_ring(p.buf, p.dbrec, p.log_size, LOG_RECV_WQE_STRIDE)?;
    let mut c: [u8; create_rq_in::SIZE] = input(consts::CMD_OP_CREATE_RQ, 0);
    let x = create_rq_in::CTX;
    let w = rqc::WQ.within(x);
    let set = |c: &mut [u8], f: ifc::Field, v: u64| ifc::set(c, f.within(x), v);
    let set_wq = |c: &mut [u8], f: ifc::Field, v: u64| ifc::set(c, f.within(w), v);
    set(&mut c, rqc::VSD, 1);
    set(&mut c, rqc::STATE, consts::RQC_STATE_RST.into());
    set(&mut c, rqc::FLUSH_IN_ERROR_EN, 1);
    set(&mut c, rqc::TS_FORMAT, wq_ts_format(caps.rq_ts_format));
    set(&mut c, rqc::CQN, p.cq.0 as u64);
    set_wq(&mut c, wq::WQ_TYPE, consts::WQ_WQ_TYPE_WQ_CYCLIC.into());
    set_wq(&mut c, wq::PD, p.pd.0 as u64);
    set_wq(&mut c, wq::DBR_ADDR, p.dbrec.0);
    set_wq(&mut c, wq::LOG_WQ_STRIDE, LOG_RECV_WQE_STRIDE);
    set_wq(&mut c, wq::LOG_WQ_PG_SZ, 0);
    set_wq(&mut c, wq::LOG_WQ_SZ, p.log_size as u64);
    Ok((c, Pas::Linear { base: p.buf.0, step: FW_PAGE as u64, count: pages }))
}

/// `MODIFY_RQ` RST→RDY (`mlx5e_modify_rq_state`; the RQ number travels in the header).
pub fn modify_rq_rdy_cmd(rq: Rqn) -> [u8; modify_rq_in::SIZE] {
    let mut c: [u8; modify_rq_in::SIZE] = input(consts::CMD_OP_MODIFY_RQ, 0);
    ifc::set(&mut c, modify_rq_in::RQ_STATE, consts::RQC_STATE_RST.into());
    ifc::set(&mut c, modify_rq_in::RQN, rq.0 as u64);
    ifc::set(&mut c, rqc::STATE.within(modify_rq_in::CTX), consts::RQC_STATE_RDY.into());
    c
}

/// `CREATE_TIR` with direct dispatch to one RQ (`mlx5e_tir_builder_build_direct`): no hash,
/// the transport domain. Self-loopback is not blocked: the driver's own ARP requests never
/// match its own addresses, and a loopback test may want them.
pub fn create_tir_cmd(td: Tdn, rq: Rqn) -> [u8; create_tir_in::SIZE] {
    let mut c: [u8; create_tir_in::SIZE] = input(consts::CMD_OP_CREATE_TIR, 0);
    let x = create_tir_in::CTX;
    ifc::set(&mut c, tirc::DISP_TYPE.within(x), consts::TIRC_DISP_TYPE_DIRECT.into());
    ifc::set(&mut c, tirc::INLINE_RQN.within(x), rq.0 as u64);
    ifc::set(&mut c, tirc::TRANSPORT_DOMAIN.within(x), td.0 as u64);
    c
}

/// `CREATE_FLOW_TABLE` of the NIC receive path (`mlx5_cmd_create_flow_table`): level and size,
/// miss action default (0: a miss goes on to what the port does without the table).
pub fn create_flow_table_cmd(level: u8, log_size: u8) -> [u8; create_flow_table_in::SIZE] {
    let mut c: [u8; create_flow_table_in::SIZE] = input(consts::CMD_OP_CREATE_FLOW_TABLE, 0);
    ifc::set(&mut c, create_flow_table_in::TABLE_TYPE, consts::FLOW_TABLE_TYPE_NIC_RX.into());
    let x = create_flow_table_in::FLOW_TABLE_CONTEXT;
    ifc::set(&mut c, flow_table_context::LEVEL.within(x), level as u64);
    ifc::set(&mut c, flow_table_context::LOG_SIZE.within(x), log_size as u64);
    c
}

/// The outer-header fields the ARP group matches on: the ethertype, and the C-VLAN and
/// S-VLAN tag bits (matched as 0: only untagged frames).
fn outer(f: ifc::Field, within: ifc::Field) -> ifc::Field {
    f.within(fte_match_param::OUTER_HEADERS).within(within)
}

/// `CREATE_FLOW_GROUP` over entries `start..=end` whose criteria are the outer ethertype
/// and the two VLAN tag bits (`mlx5_cmd_create_flow_group` with the outer headers enabled).
pub fn create_flow_group_cmd(
    table: FlowTableId,
    start: u32,
    end: u32,
) -> Result<[u8; create_flow_group_in::SIZE], Error> {
    if end < start {
        return Err(Error::InvalidArgument("flow group ends before it starts"));
    }
    let mut c: [u8; create_flow_group_in::SIZE] = input(consts::CMD_OP_CREATE_FLOW_GROUP, 0);
    ifc::set(&mut c, create_flow_group_in::TABLE_TYPE, consts::FLOW_TABLE_TYPE_NIC_RX.into());
    ifc::set(&mut c, create_flow_group_in::TABLE_ID, table.0 as u64);
    ifc::set(&mut c, create_flow_group_in::START_FLOW_INDEX, start as u64);
    ifc::set(&mut c, create_flow_group_in::END_FLOW_INDEX, end as u64);
    ifc::set(&mut c, create_flow_group_in::MATCH_CRITERIA_ENABLE, MATCH_OUTER_HEADERS);
    let m = create_flow_group_in::MATCH_CRITERIA;
    ifc::set(&mut c, outer(fte_match_set_lyr_2_4::ETHERTYPE, m), 0xffff);
    ifc::set(&mut c, outer(fte_match_set_lyr_2_4::CVLAN_TAG, m), 1);
    ifc::set(&mut c, outer(fte_match_set_lyr_2_4::SVLAN_TAG, m), 1);
    Ok(c)
}

/// Bytes of a `SET_FLOW_TABLE_ENTRY` with one destination (`set_fte_in` and one
/// `dest_format_struct`, as `mlx5_cmd_set_fte` sizes it without extended destinations).
pub const SET_FTE_LEN: usize = set_fte_in::SIZE + dest_format_struct::SIZE;

/// `SET_FLOW_TABLE_ENTRY` (new entry: op_mod 0) forwarding untagged frames of `ethertype` to
/// `tir`: action FWD_DEST, one destination of type TIR, the match value in the flow context.
pub fn set_fte_cmd(
    table: FlowTableId,
    group: FlowGroupId,
    index: u32,
    ethertype: u16,
    tir: Tirn,
) -> [u8; SET_FTE_LEN] {
    let mut c: [u8; SET_FTE_LEN] = input(consts::CMD_OP_SET_FLOW_TABLE_ENTRY, 0);
    ifc::set(&mut c, set_fte_in::TABLE_TYPE, consts::FLOW_TABLE_TYPE_NIC_RX.into());
    ifc::set(&mut c, set_fte_in::TABLE_ID, table.0 as u64);
    ifc::set(&mut c, set_fte_in::FLOW_INDEX, index as u64);
    let fc = set_fte_in::FLOW_CONTEXT;
    ifc::set(&mut c, flow_context::GROUP_ID.within(fc), group.0 as u64);
    ifc::set(&mut c, flow_context::ACTION.within(fc), consts::FLOW_CONTEXT_ACTION_FWD_DEST.into());
    ifc::set(&mut c, flow_context::DESTINATION_LIST_SIZE.within(fc), 1);
    let mv = flow_context::MATCH_VALUE.within(fc);
    ifc::set(&mut c, outer(fte_match_set_lyr_2_4::ETHERTYPE, mv), ethertype as u64);
    // cvlan_tag and svlan_tag stay 0: untagged.
    let d = flow_context::DESTINATION.within(fc);
    let dest_type = dest_format_struct::DESTINATION_TYPE.within(d);
    ifc::set(&mut c, dest_type, consts::IFC_FLOW_DESTINATION_TYPE_TIR.into());
    ifc::set(&mut c, dest_format_struct::DESTINATION_ID.within(d), tir.0 as u64);
    c
}

/// `SET_FLOW_TABLE_ROOT` of the NIC receive path: connect `table`, or (`None`) disconnect
/// the root (op_mod 1, no table), as `mlx5_cmd_update_root_ft` does.
pub fn set_root_cmd(table: Option<FlowTableId>) -> [u8; set_flow_table_root_in::SIZE] {
    let op_mod = if table.is_some() { 0 } else { ROOT_DISCONNECT };
    let mut c: [u8; set_flow_table_root_in::SIZE] =
        input(consts::CMD_OP_SET_FLOW_TABLE_ROOT, op_mod);
    ifc::set(&mut c, set_flow_table_root_in::TABLE_TYPE, consts::FLOW_TABLE_TYPE_NIC_RX.into());
    if let Some(t) = table {
        ifc::set(&mut c, set_flow_table_root_in::TABLE_ID, t.0 as u64);
    }
    c
}

/// Bytes of the largest destroy command (`delete_fte_in`, `destroy_flow_group_in`).
pub const DESTROY_LEN: usize = 64;

/// The command that destroys `o`, and its length: `DEALLOC_TRANSPORT_DOMAIN`, `DESTROY_TIS`,
/// `DESTROY_SQ`, `DESTROY_RQ`, `DESTROY_TIR`, `DESTROY_FLOW_TABLE`, `DESTROY_FLOW_GROUP`,
/// `DELETE_FLOW_TABLE_ENTRY`, or a root disconnect.
pub fn destroy_cmd(o: EthObject) -> ([u8; DESTROY_LEN], usize) {
    let mut c = [0u8; DESTROY_LEN];
    let nic_rx = consts::FLOW_TABLE_TYPE_NIC_RX as u64;
    let len = match o {
        EthObject::TransportDomain(t) => {
            put_op(&mut c, consts::CMD_OP_DEALLOC_TRANSPORT_DOMAIN, 0);
            ifc::set(&mut c, dealloc_transport_domain_in::TRANSPORT_DOMAIN, t.0 as u64);
            dealloc_transport_domain_in::SIZE
        }
        EthObject::Tis(t) => {
            put_op(&mut c, consts::CMD_OP_DESTROY_TIS, 0);
            ifc::set(&mut c, destroy_tis_in::TISN, t.0 as u64);
            destroy_tis_in::SIZE
        }
        EthObject::Sq(s) => {
            put_op(&mut c, consts::CMD_OP_DESTROY_SQ, 0);
            ifc::set(&mut c, destroy_sq_in::SQN, s.0 as u64);
            destroy_sq_in::SIZE
        }
        EthObject::Rq(r) => {
            put_op(&mut c, consts::CMD_OP_DESTROY_RQ, 0);
            ifc::set(&mut c, destroy_rq_in::RQN, r.0 as u64);
            destroy_rq_in::SIZE
        }
        EthObject::Tir(t) => {
            put_op(&mut c, consts::CMD_OP_DESTROY_TIR, 0);
            ifc::set(&mut c, destroy_tir_in::TIRN, t.0 as u64);
            destroy_tir_in::SIZE
        }
        EthObject::FlowTable(t) => {
            put_op(&mut c, consts::CMD_OP_DESTROY_FLOW_TABLE, 0);
            ifc::set(&mut c, destroy_flow_table_in::TABLE_TYPE, nic_rx);
            ifc::set(&mut c, destroy_flow_table_in::TABLE_ID, t.0 as u64);
            destroy_flow_table_in::SIZE
        }
        EthObject::FlowGroup { table, group } => {
            put_op(&mut c, consts::CMD_OP_DESTROY_FLOW_GROUP, 0);
            ifc::set(&mut c, destroy_flow_group_in::TABLE_TYPE, nic_rx);
            ifc::set(&mut c, destroy_flow_group_in::TABLE_ID, table.0 as u64);
            ifc::set(&mut c, destroy_flow_group_in::GROUP_ID, group.0 as u64);
            destroy_flow_group_in::SIZE
        }
        EthObject::FlowEntry { table, index } => {
            put_op(&mut c, consts::CMD_OP_DELETE_FLOW_TABLE_ENTRY, 0);
            ifc::set(&mut c, delete_fte_in::TABLE_TYPE, nic_rx);
            ifc::set(&mut c, delete_fte_in::TABLE_ID, table.0 as u64);
            ifc::set(&mut c, delete_fte_in::FLOW_INDEX, index as u64);
            delete_fte_in::SIZE
        }
        EthObject::Root(_) => {
            let r = set_root_cmd(None);
            c[..r.len()].copy_from_slice(&r);
            r.len()
        }
    };
    (c, len)
}

fn put_op(c: &mut [u8], opcode: u16, op_mod: u16) {
    ifc::set(c, enable_hca_in::OPCODE, opcode as u64);
    ifc::set(c, enable_hca_in::OP_MOD, op_mod as u64);
}

/// The step name of a destroy command (for errors).
pub fn destroy_step(o: EthObject) -> &'static str {
    match o {
        EthObject::TransportDomain(_) => "DEALLOC_TRANSPORT_DOMAIN",
        EthObject::Tis(_) => "DESTROY_TIS",
        EthObject::Sq(_) => "DESTROY_SQ",
        EthObject::Rq(_) => "DESTROY_RQ",
        EthObject::Tir(_) => "DESTROY_TIR",
        EthObject::FlowTable(_) => "DESTROY_FLOW_TABLE",
        EthObject::FlowGroup { .. } => "DESTROY_FLOW_GROUP",
        EthObject::FlowEntry { .. } => "DELETE_FLOW_TABLE_ENTRY",
        EthObject::Root(_) => "SET_FLOW_TABLE_ROOT",
    }
}

#[cfg(test)]
mod tests;
