//! Command execution: the HCA's life cycle, pages, capabilities and registers. The resource
//! commands are in [`super::resources`].
//!
//! | state | entered by | allowed there |
//! |---|---|---|
//! | `Disabled` | start, `DISABLE_HCA` | `ENABLE_HCA` |
//! | `Enabled` | `ENABLE_HCA` | `QUERY_ISSI`, `SET_ISSI`, `QUERY_PAGES`, `MANAGE_PAGES`, `ACCESS_REG`, `QUERY_HCA_CAP`, `QUERY_ADAPTER`, `SET_HCA_CAP`, `INIT_HCA`, `DISABLE_HCA`, `NOP`, `QUERY_NIC_VPORT_CONTEXT` (`ENABLE_HCA` again: `BAD_RES_STATE`) |
//! | `Initialized` | `INIT_HCA` | everything but `SET_ISSI`, `SET_HCA_CAP`, `INIT_HCA`, `ENABLE_HCA`, `DISABLE_HCA` |
//! | `TornDown` | `TEARDOWN_HCA` | `QUERY_PAGES`, `MANAGE_PAGES` (take), `DISABLE_HCA`, `NOP` |
//!
//! Capability and register commands additionally need the boot pages given; `INIT_HCA` needs
//! boot + init pages (`NO_RESOURCES` otherwise).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rdma_pmd::BusAddr;

use super::codes::{
    syndrome as syn, CapType, CmdStatus, ManagePagesMode, Opcode, PagesStage, PORT_TYPE_ETH,
    PTYS_EN, REG_HOST_ENDIANNESS, REG_NODE_DESC, REG_PTYS, TEARDOWN_FORCE, TEARDOWN_GRACEFUL,
};
use super::eq::Eq;
use super::ifc::{self, cmd_hca_cap as gen, roce_cap, Field};
use super::pages::{Pages, PAGE_SIZE};
use super::FwConfig;
use crate::model::Shared;

/// A refused command: the status and syndrome written to its output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fail {
    /// Command status.
    pub status: CmdStatus,
    /// Syndrome (see [`super::codes::syndrome`]).
    pub syndrome: u32,
}

/// Shorthand for a refusal.
pub(crate) fn fail(status: CmdStatus, syndrome: u32) -> Fail {
    Fail { status, syndrome }
}

pub(crate) type Res = Result<(), Fail>;

/// The HCA function's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HcaState {
    /// Before `ENABLE_HCA` or after `DISABLE_HCA`.
    Disabled,
    /// After `ENABLE_HCA`, before `INIT_HCA`.
    Enabled,
    /// After `INIT_HCA`.
    Initialized,
    /// After `TEARDOWN_HCA`.
    TornDown,
}

/// One executed command, as the firmware saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Executed {
    /// Opcode.
    pub opcode: Opcode,
    /// `op_mod`.
    pub op_mod: u16,
    /// Status written.
    pub status: CmdStatus,
    /// Syndrome written.
    pub syndrome: u32,
}

pub(crate) struct CqObj {
    pub uar: u32,
    pub eqn: u8,
}

pub(crate) struct QpObj {
    pub pd: u32,
    pub cqs: [u32; 2],
    pub uar: u32,
    /// Created with `st` REG_UMR (`fw::resources::qp`): an RC send queue in the engine that
    /// executes no UMR WQE.
    pub umr: bool,
}

/// A shared receive queue: a basic SRQ (an RMP) or an XRC SRQ ([`super::resources`] `srq.rs`).
pub(crate) struct SrqObj {
    pub xrc: bool,
    pub pd: u32,
    /// The XRC domain and completion queue (XRC SRQs only; 0 for an RMP).
    pub xrcd: u32,
    pub cqn: u32,
    pub user_index: u32,
    pub log_size: u8,
    /// log2 of the WQE stride in bytes.
    pub log_stride: u8,
    /// `log_page_size` as given (pages of `4096 << it`).
    pub log_page_size: u8,
    /// `page_offset` as given (64ths of a page into the first).
    pub page_offset: u8,
    pub lwm: u16,
    pub dbrec: u64,
}

pub(crate) struct MkeyObj {
    pub key: u32,
    pub pd: u32,
}

/// Everything the firmware knows. Lives under the firmware's lock.
pub(crate) struct Hca {
    pub state: HcaState,
    pub issi: u16,
    pub pages: Pages,
    pub gen_max: Vec<u8>,
    pub gen_cur: Vec<u8>,
    pub roce_max: Vec<u8>,
    pub roce_cur: Vec<u8>,
    /// Ethernet offload and flow table capabilities: nothing in them is settable, so the
    /// maximum is the current value ([`super::resources::eth_caps`]).
    pub eth_caps: Vec<u8>,
    pub ft_caps: Vec<u8>,
    pub host_endianness: [u8; ifc::register_host_endianness::SIZE],
    pub roce_en: bool,
    pub vport_mtu: u16,
    pub uars: BTreeSet<u32>,
    pub pds: BTreeSet<u32>,
    pub xrcds: BTreeSet<u32>,
    /// `ptys_reg.eth_proto_admin` as last written.
    pub ptys_admin: u32,
    pub mkeys: BTreeMap<u32, MkeyObj>,
    pub cqs: BTreeMap<u32, CqObj>,
    pub qps: BTreeMap<u32, QpObj>,
    /// SRQs by number (RMPs and XRC SRQs share the number space).
    pub srqs: BTreeMap<u32, SrqObj>,
    /// The event queues: their own lock, a leaf (taken under the device lock when a CQ's
    /// completion event is posted; nothing is locked while it is held).
    pub eqs: super::eq::EqTable,
    pub shared: Arc<Shared>,
    pub log: Vec<Executed>,
    /// Commands executed, by (opcode, op_mod, status).
    pub counts: BTreeMap<(u16, u16, u8), u64>,
    /// `MANAGE_PAGES` asking for pages back returns none ([`Firmware::set_keep_pages`]).
    ///
    /// [`Firmware::set_keep_pages`]: super::Firmware::set_keep_pages
    pub keep_pages: bool,
}

/// (input size, output size) of each command the model executes.
fn sizes(op: Opcode) -> Option<(usize, usize)> {
    use ifc::*;
    use Opcode::*;
    Some(match op {
        EnableHca => (enable_hca_in::SIZE, enable_hca_out::SIZE),
        DisableHca => (disable_hca_in::SIZE, disable_hca_out::SIZE),
        QueryIssi => (query_issi_in::SIZE, query_issi_out::SIZE),
        SetIssi => (set_issi_in::SIZE, set_issi_out::SIZE),
        QueryPages => (query_pages_in::SIZE, query_pages_out::SIZE),
        ManagePages => (manage_pages_in::SIZE, manage_pages_out::SIZE),
        QueryHcaCap => (query_hca_cap_in::SIZE, query_hca_cap_out::SIZE),
        QueryAdapter => (query_adapter_in::SIZE, query_adapter_out::SIZE),
        SetHcaCap => (set_hca_cap_in::SIZE, set_hca_cap_out::SIZE),
        InitHca => (init_hca_in::SIZE, init_hca_out::SIZE),
        TeardownHca => (teardown_hca_in::SIZE, teardown_hca_out::SIZE),
        AccessReg => (access_register_in::SIZE, access_register_out::SIZE),
        AllocUar => (alloc_uar_in::SIZE, alloc_uar_out::SIZE),
        DeallocUar => (dealloc_uar_in::SIZE, dealloc_uar_out::SIZE),
        AllocPd => (alloc_pd_in::SIZE, alloc_pd_out::SIZE),
        DeallocPd => (dealloc_pd_in::SIZE, dealloc_pd_out::SIZE),
        CreateEq => (create_eq_in::SIZE, create_eq_out::SIZE),
        DestroyEq => (destroy_eq_in::SIZE, destroy_eq_out::SIZE),
        CreateMkey => (create_mkey_in::SIZE, create_mkey_out::SIZE),
        DestroyMkey => (destroy_mkey_in::SIZE, destroy_mkey_out::SIZE),
        CreateCq => (create_cq_in::SIZE, create_cq_out::SIZE),
        DestroyCq => (destroy_cq_in::SIZE, destroy_cq_out::SIZE),
        CreateQp => (create_qp_in::SIZE, create_qp_out::SIZE),
        DestroyQp => (destroy_qp_in::SIZE, destroy_qp_out::SIZE),
        Rst2InitQp => (rst2init_qp_in::SIZE, rst2init_qp_out::SIZE),
        Init2RtrQp => (init2rtr_qp_in::SIZE, init2rtr_qp_out::SIZE),
        Rtr2RtsQp => (rtr2rts_qp_in::SIZE, rtr2rts_qp_out::SIZE),
        ToErrQp => (qp_2err_in::SIZE, qp_2err_out::SIZE),
        ToRstQp => (qp_2rst_in::SIZE, qp_2rst_out::SIZE),
        ModifyNicVportContext => {
            (modify_nic_vport_context_in::SIZE, modify_nic_vport_context_out::SIZE)
        }
        QueryNicVportContext => {
            (query_nic_vport_context_in::SIZE, query_nic_vport_context_out::SIZE)
        }
        QueryQp => (query_qp_in::SIZE, query_qp_out::SIZE),
        QueryVportState => (query_vport_state_in::SIZE, query_vport_state_out::SIZE),
        QueryRoceAddress => (query_roce_address_in::SIZE, query_roce_address_out::SIZE),
        SetRoceAddress => (set_roce_address_in::SIZE, set_roce_address_out::SIZE),
        Nop => (nop_in::SIZE, nop_out::SIZE),
        AllocXrcd => (alloc_xrcd_in::SIZE, alloc_xrcd_out::SIZE),
        DeallocXrcd => (dealloc_xrcd_in::SIZE, dealloc_xrcd_out::SIZE),
        QueryHcaVportPkey => (query_hca_vport_pkey_in::SIZE, query_hca_vport_pkey_out::SIZE),
        CreateRmp => (create_rmp_in::SIZE, create_rmp_out::SIZE),
        ModifyRmp => (modify_rmp_in::SIZE, modify_rmp_out::SIZE),
        DestroyRmp => (destroy_rmp_in::SIZE, destroy_rmp_out::SIZE),
        QueryRmp => (query_rmp_in::SIZE, query_rmp_out::SIZE),
        CreateXrcSrq => (create_xrc_srq_in::SIZE, create_xrc_srq_out::SIZE),
        DestroyXrcSrq => (destroy_xrc_srq_in::SIZE, destroy_xrc_srq_out::SIZE),
        QueryXrcSrq => (query_xrc_srq_in::SIZE, query_xrc_srq_out::SIZE),
        ArmXrcSrq => (arm_xrc_srq_in::SIZE, arm_xrc_srq_out::SIZE),
        // Refused in `dispatch` whatever its lengths.
        MadIfc => (16, 16),
        AllocTransportDomain => (alloc_transport_domain_in::SIZE, alloc_transport_domain_out::SIZE),
        DeallocTransportDomain => {
            (dealloc_transport_domain_in::SIZE, dealloc_transport_domain_out::SIZE)
        }
        CreateTis => (create_tis_in::SIZE, create_tis_out::SIZE),
        DestroyTis => (destroy_tis_in::SIZE, destroy_tis_out::SIZE),
        CreateSq => (create_sq_in::SIZE, create_sq_out::SIZE),
        ModifySq => (modify_sq_in::SIZE, modify_sq_out::SIZE),
        DestroySq => (destroy_sq_in::SIZE, destroy_sq_out::SIZE),
        CreateRq => (create_rq_in::SIZE, create_rq_out::SIZE),
        ModifyRq => (modify_rq_in::SIZE, modify_rq_out::SIZE),
        DestroyRq => (destroy_rq_in::SIZE, destroy_rq_out::SIZE),
        CreateTir => (create_tir_in::SIZE, create_tir_out::SIZE),
        DestroyTir => (destroy_tir_in::SIZE, destroy_tir_out::SIZE),
        CreateFlowTable => (create_flow_table_in::SIZE, create_flow_table_out::SIZE),
        DestroyFlowTable => (destroy_flow_table_in::SIZE, destroy_flow_table_out::SIZE),
        CreateFlowGroup => (create_flow_group_in::SIZE, create_flow_group_out::SIZE),
        DestroyFlowGroup => (destroy_flow_group_in::SIZE, destroy_flow_group_out::SIZE),
        SetFlowTableEntry => (set_fte_in::SIZE, set_fte_out::SIZE),
        DeleteFlowTableEntry => (delete_fte_in::SIZE, delete_fte_out::SIZE),
        SetFlowTableRoot => (set_flow_table_root_in::SIZE, set_flow_table_root_out::SIZE),
        Unknown(_) => return None,
    })
}

/// Default general capabilities (maximum = initial current).
fn general_caps(cfg: &FwConfig, shared: &Shared) -> Vec<u8> {
    let mc = shared.dev().caps;
    let mut c = vec![0u8; ifc::query_hca_cap_out::SIZE - 16];
    let set = |c: &mut Vec<u8>, f: Field, v: u64| f.set(c, v);
    set(&mut c, gen::LOG_MAX_QP_SZ, u64::from(mc.log_max_qp_sz));
    set(&mut c, gen::LOG_MAX_QP, u64::from(cfg.log_max_qp));
    set(&mut c, gen::LOG_MAX_CQ_SZ, u64::from(mc.log_max_cq_sz));
    set(&mut c, gen::LOG_MAX_CQ, u64::from(cfg.log_max_cq));
    set(&mut c, gen::LOG_MAX_EQ_SZ, u64::from(cfg.log_max_eq_sz));
    set(&mut c, gen::LOG_MAX_MKEY, u64::from(cfg.log_max_mkey));
    set(&mut c, gen::LOG_MAX_EQ, u64::from(cfg.log_max_eq));
    set(&mut c, gen::LOG_MAX_MRW_SZ, 48);
    set(&mut c, gen::LOG_MAX_RA_REQ_QP, 4);
    set(&mut c, gen::LOG_MAX_RA_RES_QP, 4);
    set(&mut c, gen::GID_TABLE_SIZE, shared.gids.len() as u64);
    set(&mut c, gen::PORT_TYPE, u64::from(PORT_TYPE_ETH));
    set(&mut c, gen::NUM_PORTS, 1);
    set(&mut c, gen::LOG_MAX_MSG, 30);
    set(&mut c, gen::CQE_VERSION, 1);
    set(&mut c, gen::ROCE, 1);
    set(&mut c, gen::UAR_4K, 1);
    set(&mut c, gen::FL_RC_QP_WHEN_ROCE_DISABLED, 1);
    set(&mut c, gen::LOG_PG_SZ, 12);
    set(&mut c, gen::LOG_BF_REG_SIZE, u64::from(mc.log_bf_reg_size));
    set(&mut c, gen::MAX_WQE_SZ_SQ, u64::from(mc.max_wqe_sz_sq));
    set(&mut c, gen::LOG_MAX_PD, u64::from(cfg.log_max_pd));
    // mlx5_ib's device resources include two XRC domains (`mlx5_ib_dev_res_init`).
    set(&mut c, gen::XRC, 1);
    set(&mut c, gen::LOG_MAX_XRCD, 16);
    // SRQs (`fw::resources::srq`): mlx5_ib's device resources include a basic and an XRC SRQ
    // (`mlx5_ib_dev_res_srq_init`), and `mlx5_ib_create_srq` refuses `max_wr` at or above
    // `1 << log_max_srq_sz`. Receive WQEs (QP RQ and SRQ) up to 512 bytes (`set_rq_size`
    // checks `max_wqe_sz_rq`).
    set(&mut c, gen::LOG_MAX_SRQ, 8);
    set(&mut c, gen::LOG_MAX_SRQ_SZ, u64::from(mc.log_max_qp_sz));
    set(&mut c, gen::MAX_WQE_SZ_RQ, 512);
    // The Ethernet path (`fw::resources::eth`): what mlx5e's `mlx5e_check_required_hca_cap`
    // and `fs_core.c` look for.
    set(&mut c, gen::ETH_NET_OFFLOADS, 1);
    set(&mut c, gen::NIC_FLOW_TABLE, 1);
    set(&mut c, gen::LOG_MAX_TRANSPORT_DOMAIN, 4);
    set(&mut c, gen::LOG_MAX_RQ, 8);
    set(&mut c, gen::LOG_MAX_SQ, 8);
    set(&mut c, gen::LOG_MAX_TIR, 8);
    set(&mut c, gen::LOG_MAX_TIS, 8);
    set(&mut c, gen::LOG_MAX_TIS_PER_SQ, 0);
    set(&mut c, gen::LOG_UAR_PAGE_SZ, 0);
    set(&mut c, gen::NUM_OF_UARS_PER_PAGE, 1);
    // No UMR that changes a key's entity (page) size: mlx5_ib's `mlx5r_umr_can_load_pas`
    // (6.12 `umr.h`) then answers false, so the MR cache keeps no pre-made `free` keys
    // (`mlx5r_cache_create_ent_locked`: limit 0) and a user MR is made by `reg_create`
    // (`create_real_mr`): one `CREATE_MKEY` with the umem's page list, which the model
    // implements (`fw::resources::mkey`). The model has no UMR engine to load a free key.
    set(&mut c, gen::UMR_MODIFY_ENTITY_SIZE_DISABLED, 1);
    // Per-vport counters, as a ConnectX-4 and later report: with it mlx5_ib answers the
    // performance-management class itself (6.12 `mad.c` `mlx5_ib_process_mad` ->
    // `process_pma_cmd`; ClassPortInfo without a command, the port counters through
    // QUERY_VPORT_COUNTER and PPCNT) instead of passing the MAD to MAD_IFC. ib_core asks for
    // ClassPortInfo when it registers the device (`sysfs.c` `get_counter_table`).
    set(&mut c, gen::VPORT_COUNTERS, 1);
    set(&mut c, gen::DEVICE_FREQUENCY_KHZ, u64::from(crate::fw::init_seg::DEVICE_FREQUENCY_KHZ));
    c
}

/// Default RoCE capabilities.
fn roce_caps() -> Vec<u8> {
    let mut c = vec![0u8; ifc::query_hca_cap_out::SIZE - 16];
    roce_cap::FL_RC_QP_WHEN_ROCE_DISABLED.set(&mut c, 1);
    roce_cap::FL_RC_QP_WHEN_ROCE_ENABLED.set(&mut c, 1);
    // MLX5_ROCE_L3_TYPE_IPV4_CAP | MLX5_ROCE_L3_TYPE_IPV6_CAP (device.h).
    roce_cap::L3_TYPE.set(&mut c, 0b110);
    // MLX5_ROCE_VERSION_2_CAP (device.h) alone: a function without RoCE v1 (the engine speaks
    // RoCE v2 only), so SET_ROCE_ADDRESS refuses version 0 as such firmware does.
    roce_cap::ROCE_VERSION.set(&mut c, 1 << 2);
    roce_cap::R_ROCE_DEST_UDP_PORT.set(&mut c, 4791);
    roce_cap::R_ROCE_MAX_SRC_UDP_PORT.set(&mut c, 0xffff);
    roce_cap::R_ROCE_MIN_SRC_UDP_PORT.set(&mut c, 0xc000);
    roce_cap::ROCE_ADDRESS_TABLE_SIZE.set(&mut c, 16);
    c
}

/// `QUERY_ADAPTER` `ieee_vendor_id`: Mellanox's IEEE OUI (00:02:c9).
pub(crate) const ADAPTER_IEEE_VENDOR_ID: u32 = 0x0002c9;
/// `QUERY_ADAPTER` `vsd_vendor_id`: Mellanox's PCI vendor id.
pub(crate) const ADAPTER_VSD_VENDOR_ID: u16 = 0x15b3;
/// `QUERY_ADAPTER` PSID (16 bytes, NUL padded): the model's own, in the vendor's `MT_` form.
pub(crate) const ADAPTER_PSID: &[u8] = b"MT_0000000MDL";
/// `QUERY_ADAPTER` vendor-specific data (208 bytes, NUL padded).
pub(crate) const ADAPTER_VSD: &[u8] = b"rdma-pmd mlx5 model";

/// Bytes of the NODE_DESC register (kernel `struct mlx5_reg_node_desc`,
/// `IB_DEVICE_NODE_DESC_MAX`).
pub(crate) const NODE_DESC_LEN: usize = 64;
/// The node description NODE_DESC answers (NUL padded to 64 bytes; mlx5_ib's
/// `mlx5_query_node_desc` copies it into the device's `node_desc`).
pub(crate) const NODE_DESC: &[u8] = b"rdma-pmd mlx5 model";

/// PTYS `eth_proto_capability` of a 100 Gb/s ConnectX-5 port: bit *n* is link mode *n* of
/// the kernel's `enum mlx5e_link_mode` (`include/linux/mlx5/port.h`): 1000BASE-KX (1),
/// 10GBASE-KR/CR/SR/ER (4, 12, 13, 14), 40GBASE-CR4/KR4/SR4/LR4 (6, 7, 15, 16),
/// 50GBASE-SR2/CR2/KR2 (18, 30, 31), 100GBASE-CR4/SR4/KR4/LR4 (20-23), 25GBASE-CR/KR/SR
/// (27-29).
pub(crate) const PTYS_ETH_CAPABILITY: u32 = 1 << 1
    | 1 << 4
    | 1 << 12
    | 1 << 13
    | 1 << 14
    | 1 << 6
    | 1 << 7
    | 1 << 15
    | 1 << 16
    | 1 << 18
    | 1 << 30
    | 1 << 31
    | 0xf << 20
    | 0x7 << 27;
/// PTYS `eth_proto_oper`: 100GBASE-CR4 (`MLX5E_100GBASE_CR4`, a direct-attach cable).
pub(crate) const PTYS_ETH_OPER: u32 = 1 << 20;

/// General capabilities `SET_HCA_CAP` may change (each at most its maximum).
const SETTABLE: &[Field] =
    &[gen::LOG_MAX_QP, gen::CQE_VERSION, gen::UAR_4K, gen::ROCE, gen::CMDIF_CHECKSUM];

impl Hca {
    pub(crate) fn new(cfg: FwConfig, shared: Arc<Shared>) -> Self {
        let gen_max = general_caps(&cfg, &shared);
        let roce_max = roce_caps();
        Hca {
            state: HcaState::Disabled,
            issi: 0,
            pages: Pages::new(cfg.boot_pages, cfg.init_pages),
            gen_cur: gen_max.clone(),
            gen_max,
            roce_cur: roce_max.clone(),
            roce_max,
            eth_caps: super::resources::eth_caps::ethernet_offloads(),
            ft_caps: super::resources::eth_caps::flow_table(),
            host_endianness: [0; ifc::register_host_endianness::SIZE],
            roce_en: false,
            vport_mtu: 1500,
            uars: BTreeSet::new(),
            pds: BTreeSet::new(),
            xrcds: BTreeSet::new(),
            ptys_admin: PTYS_ETH_CAPABILITY,
            mkeys: BTreeMap::new(),
            cqs: BTreeMap::new(),
            qps: BTreeMap::new(),
            srqs: BTreeMap::new(),
            eqs: Default::default(),
            shared,
            log: Vec::new(),
            counts: BTreeMap::new(),
            keep_pages: false,
        }
    }

    /// The event queues, locked.
    pub(crate) fn eqs(&self) -> std::sync::MutexGuard<'_, BTreeMap<u8, Eq>> {
        self.eqs.lock().expect("event queues poisoned")
    }

    /// Execute one command: `input` is its whole input, the result is exactly `outlen` bytes.
    pub(crate) fn execute(&mut self, input: &[u8], outlen: usize) -> Vec<u8> {
        let mut out = vec![0u8; outlen];
        let op = Opcode::from(ifc::cmd_in::OPCODE.get(input) as u16);
        let op_mod = ifc::cmd_in::OP_MOD.get(input) as u16;
        let r = self.dispatch(op, input, &mut out);
        self.finish(op, op_mod, r, &mut out);
        out
    }

    /// Write the status and syndrome of a command into its output, and log it.
    pub(crate) fn finish(&mut self, op: Opcode, op_mod: u16, r: Res, out: &mut [u8]) {
        let (status, syndrome) = match r {
            Ok(()) => (CmdStatus::Ok, 0),
            Err(f) => {
                out.fill(0);
                (f.status, f.syndrome)
            }
        };
        ifc::cmd_out::STATUS.set(out, u64::from(u8::from(status)));
        ifc::cmd_out::SYNDROME.set(out, u64::from(syndrome));
        self.log.push(Executed { opcode: op, op_mod, status, syndrome });
        *self.counts.entry((u16::from(op), op_mod, u8::from(status))).or_insert(0) += 1;
    }

    fn dispatch(&mut self, op: Opcode, inp: &[u8], out: &mut [u8]) -> Res {
        use Opcode::*;
        let Some((isz, osz)) = sizes(op) else {
            return Err(fail(CmdStatus::BadOp, syn::UNKNOWN_OPCODE));
        };
        self.gate(op)?;
        if inp.len() < isz {
            return Err(fail(CmdStatus::BadInputLen, syn::INPUT_TOO_SHORT));
        }
        if out.len() < osz {
            return Err(fail(CmdStatus::BadOutputLen, syn::OUTPUT_TOO_SHORT));
        }
        match op {
            EnableHca => self.enable_hca(inp),
            DisableHca => self.disable_hca(inp),
            QueryIssi => self.query_issi(out),
            SetIssi => self.set_issi(inp),
            QueryPages => self.query_pages(inp, out),
            ManagePages => self.manage_pages(inp, out),
            QueryHcaCap => self.query_hca_cap(inp, out),
            QueryAdapter => self.query_adapter(out),
            SetHcaCap => self.set_hca_cap(inp),
            InitHca => self.init_hca(),
            TeardownHca => self.teardown_hca(inp),
            AccessReg => self.access_reg(inp, out),
            Nop => Ok(()),
            // An Ethernet port has no subnet management agent: the kernel's `mlx5_MAD_IFC`
            // callers (`mlx5_ib` `mad.c`) only log the failure on RoCE.
            MadIfc => Err(fail(CmdStatus::BadOp, syn::NOT_ON_ETHERNET)),
            _ => self.resource_command(op, inp, out),
        }
    }

    /// Which commands the HCA state allows (see the module table).
    fn gate(&self, op: Opcode) -> Res {
        use HcaState::*;
        use Opcode::*;
        let st = self.state;
        match op {
            EnableHca => Ok(()),
            _ if st == Disabled => Err(fail(CmdStatus::BadSysState, syn::NOT_ENABLED)),
            DisableHca | QueryPages | ManagePages | Nop => Ok(()),
            _ if st == TornDown => Err(fail(CmdStatus::BadSysState, syn::NOT_INITIALIZED)),
            QueryIssi | QueryHcaCap | QueryAdapter | AccessReg | TeardownHca
            | QueryNicVportContext => Ok(()),
            SetIssi | SetHcaCap | InitHca if st == Initialized => {
                Err(fail(CmdStatus::BadSysState, syn::ALREADY_INITIALIZED))
            }
            SetIssi | SetHcaCap | InitHca => Ok(()),
            _ if st != Initialized => Err(fail(CmdStatus::BadSysState, syn::NOT_INITIALIZED)),
            _ => Ok(()),
        }
    }

    fn check_function(&self, other: u64, function_id: u64) -> Res {
        if other != 0 || function_id != 0 {
            return Err(fail(CmdStatus::BadParam, syn::BAD_FUNCTION));
        }
        Ok(())
    }

    fn need_boot_pages(&self) -> Res {
        if self.pages.held() < self.pages.boot as usize {
            return Err(fail(CmdStatus::NoResources, syn::NOT_ENOUGH_PAGES));
        }
        Ok(())
    }

    fn enable_hca(&mut self, inp: &[u8]) -> Res {
        use ifc::enable_hca_in as e;
        self.check_function(e::EMBEDDED_CPU_FUNCTION.get(inp), e::FUNCTION_ID.get(inp))?;
        if self.state != HcaState::Disabled {
            return Err(fail(CmdStatus::BadResState, syn::FUNCTION_STATE));
        }
        self.state = HcaState::Enabled;
        self.pages.enabled = true;
        Ok(())
    }

    fn disable_hca(&mut self, inp: &[u8]) -> Res {
        self.check_function(0, ifc::disable_hca_in::FUNCTION_ID.get(inp))?;
        match self.state {
            HcaState::Disabled => return Err(fail(CmdStatus::BadResState, syn::FUNCTION_STATE)),
            HcaState::Initialized => {
                return Err(fail(CmdStatus::BadSysState, syn::ALREADY_INITIALIZED))
            }
            HcaState::Enabled | HcaState::TornDown => {}
        }
        if self.pages.held() != 0 {
            return Err(fail(CmdStatus::ResourceBusy, syn::OBJECTS_ALIVE));
        }
        self.state = HcaState::Disabled;
        self.pages.enabled = false;
        self.pages.initialized = false;
        self.pages.runtime = 0;
        self.issi = 0;
        self.gen_cur = self.gen_max.clone();
        self.roce_cur = self.roce_max.clone();
        self.roce_en = false;
        Ok(())
    }

    fn query_issi(&mut self, out: &mut [u8]) -> Res {
        use ifc::query_issi_out as o;
        o::CURRENT_ISSI.set(out, u64::from(self.issi));
        // Bit n = ISSI n supported: 0 and 1.
        o::SUPPORTED_ISSI_DW0.set(out, 0b11);
        Ok(())
    }

    fn set_issi(&mut self, inp: &[u8]) -> Res {
        let issi = ifc::set_issi_in::CURRENT_ISSI.get(inp) as u16;
        if issi > 1 {
            return Err(fail(CmdStatus::BadParam, syn::BAD_ISSI));
        }
        self.issi = issi;
        Ok(())
    }

    fn query_pages(&mut self, inp: &[u8], out: &mut [u8]) -> Res {
        use ifc::query_pages_out as o;
        self.check_function(0, ifc::query_pages_in::FUNCTION_ID.get(inp))?;
        let stage = PagesStage::from(ifc::cmd_in::OP_MOD.get(inp) as u16);
        if let PagesStage::Unknown(_) = stage {
            return Err(fail(CmdStatus::BadOp, syn::BAD_OP_MOD));
        }
        o::FUNCTION_ID.set(out, 0);
        o::NUM_PAGES.set(out, u64::from(self.pages.query(stage) as u32));
        Ok(())
    }

    fn manage_pages(&mut self, inp: &[u8], out: &mut [u8]) -> Res {
        use ifc::manage_pages_in as i;
        use ifc::manage_pages_out as o;
        self.check_function(0, i::FUNCTION_ID.get(inp))?;
        let n = i::INPUT_NUM_ENTRIES.get(inp) as usize;
        match ManagePagesMode::from(ifc::cmd_in::OP_MOD.get(inp) as u16) {
            ManagePagesMode::AllocationFail => {
                self.pages.allocation_failed();
                Ok(())
            }
            ManagePagesMode::Give => {
                if self.state == HcaState::TornDown {
                    return Err(fail(CmdStatus::BadSysState, syn::NOT_INITIALIZED));
                }
                if n > (inp.len() - i::SIZE) / 8 {
                    return Err(fail(CmdStatus::BadInputLen, syn::BAD_PAGE_COUNT));
                }
                let mut list = Vec::with_capacity(n);
                let mut seen = BTreeSet::new();
                for k in 0..n as u32 {
                    let a = i::PAS.index(k).get(inp);
                    let ok = a % PAGE_SIZE == 0
                        && self.shared.dma.mapped(BusAddr(a), PAGE_SIZE as usize)
                        && !self.pages.holds(a)
                        && seen.insert(a);
                    if !ok {
                        return Err(fail(CmdStatus::BadParam, syn::BAD_PAGE));
                    }
                    list.push(a);
                }
                // The firmware uses its pages: scribble on them so that a driver that still
                // reads or reuses one notices.
                let scribble = [0xf5u8; PAGE_SIZE as usize];
                for a in &list {
                    self.shared.dma.write(BusAddr(*a), &scribble);
                }
                self.pages.give(&list);
                Ok(())
            }
            ManagePagesMode::Take => {
                if out.len() < o::SIZE + 8 * n {
                    return Err(fail(CmdStatus::BadOutputLen, syn::OUTPUT_TOO_SHORT));
                }
                let back = if self.keep_pages { Vec::new() } else { self.pages.take(n) };
                o::OUTPUT_NUM_ENTRIES.set(out, back.len() as u64);
                for (k, a) in back.iter().enumerate() {
                    o::PAS.index(k as u32).set(out, *a);
                }
                Ok(())
            }
            ManagePagesMode::Unknown(_) => Err(fail(CmdStatus::BadOp, syn::BAD_OP_MOD)),
        }
    }

    fn caps_for(&self, op_mod: u16) -> Result<(&Vec<u8>, &Vec<u8>), Fail> {
        match CapType::from(op_mod >> 1) {
            CapType::General => Ok((&self.gen_max, &self.gen_cur)),
            CapType::Roce => Ok((&self.roce_max, &self.roce_cur)),
            CapType::EthernetOffloads => Ok((&self.eth_caps, &self.eth_caps)),
            CapType::FlowTable => Ok((&self.ft_caps, &self.ft_caps)),
            CapType::Unknown(_) => Err(fail(CmdStatus::BadParam, syn::BAD_CAP_TYPE)),
        }
    }

    fn query_hca_cap(&mut self, inp: &[u8], out: &mut [u8]) -> Res {
        use ifc::query_hca_cap_in as i;
        self.check_function(i::OTHER_FUNCTION.get(inp), i::FUNCTION_ID.get(inp))?;
        self.need_boot_pages()?;
        let op_mod = ifc::cmd_in::OP_MOD.get(inp) as u16;
        let (max, cur) = self.caps_for(op_mod)?;
        let caps = if op_mod & 1 == 1 { cur } else { max };
        let at = ifc::query_hca_cap_out::CAPABILITY.byte();
        out[at..at + caps.len()].copy_from_slice(caps);
        Ok(())
    }

    /// `QUERY_ADAPTER`: the adapter's identity, as the kernel's `mlx5_query_board_id` (the
    /// PSID in `vsd_contd_psid`) and `mlx5_core_query_vendor_id` (`ieee_vendor_id`) read it
    /// (kernel 6.12 `fw.c`). The model answers Mellanox's IEEE OUI (00:02:c9) and its PCI
    /// vendor id 0x15b3 as the VSD vendor, and a PSID of its own in the vendor's `MT_` form.
    fn query_adapter(&mut self, out: &mut [u8]) -> Res {
        use ifc::query_adapter_out as o;
        self.need_boot_pages()?;
        o::IEEE_VENDOR_ID.set(out, u64::from(ADAPTER_IEEE_VENDOR_ID));
        o::VSD_VENDOR_ID.set(out, u64::from(ADAPTER_VSD_VENDOR_ID));
        let vsd = o::VSD.slice_mut(out);
        vsd[..ADAPTER_VSD.len()].copy_from_slice(ADAPTER_VSD);
        let psid = o::VSD_CONTD_PSID.slice_mut(out);
        psid[..ADAPTER_PSID.len()].copy_from_slice(ADAPTER_PSID);
        Ok(())
    }

    fn set_hca_cap(&mut self, inp: &[u8]) -> Res {
        use ifc::set_hca_cap_in as i;
        self.check_function(i::OTHER_FUNCTION.get(inp), 0)?;
        self.need_boot_pages()?;
        let op_mod = ifc::cmd_in::OP_MOD.get(inp) as u16;
        self.caps_for(op_mod)?;
        if CapType::from(op_mod >> 1) != CapType::General {
            // Nothing in the other capabilities is settable; the firmware ignores the rest.
            return Ok(());
        }
        let at = i::CAPABILITY.byte();
        let new = &inp[at..at + self.gen_cur.len()];
        if gen::LOG_UAR_PAGE_SZ.get(new) != 0 {
            return Err(fail(CmdStatus::BadParam, syn::UNSUPPORTED_CONTEXT));
        }
        for f in SETTABLE {
            if f.get(new) > f.get(&self.gen_max) {
                return Err(fail(CmdStatus::BadParam, syn::CAP_ABOVE_MAX));
            }
        }
        for f in SETTABLE {
            f.set(&mut self.gen_cur, f.get(new));
        }
        Ok(())
    }

    fn init_hca(&mut self) -> Res {
        if self.state != HcaState::Enabled {
            return Err(fail(CmdStatus::BadSysState, syn::FUNCTION_STATE));
        }
        if self.pages.held() < (self.pages.boot + self.pages.init) as usize {
            return Err(fail(CmdStatus::NoResources, syn::NOT_ENOUGH_PAGES));
        }
        self.state = HcaState::Initialized;
        self.pages.initialized = true;
        Ok(())
    }

    /// Objects created through the command interface and not destroyed.
    pub(crate) fn live_objects(&self) -> usize {
        // The EQ table's lock is a leaf: released before the device lock is taken.
        let eqs = self.eqs().len();
        eqs + self.uars.len()
            + self.pds.len()
            + self.xrcds.len()
            + self.mkeys.len()
            + self.cqs.len()
            + self.qps.len()
            + self.srqs.len()
            + self.shared.dev().eth.count()
    }

    fn teardown_hca(&mut self, inp: &[u8]) -> Res {
        if self.state != HcaState::Initialized {
            return Err(fail(CmdStatus::BadSysState, syn::NOT_INITIALIZED));
        }
        let profile = ifc::teardown_hca_in::PROFILE.get(inp) as u16;
        if profile != TEARDOWN_GRACEFUL && profile != TEARDOWN_FORCE {
            return Err(fail(CmdStatus::BadParam, syn::BAD_OP_MOD));
        }
        if self.live_objects() != 0 {
            return Err(fail(CmdStatus::ResourceBusy, syn::OBJECTS_ALIVE));
        }
        self.state = HcaState::TornDown;
        self.pages.initialized = false;
        self.pages.enabled = false;
        self.pages.runtime = 0;
        Ok(())
    }

    /// `ACCESS_REG` (kernel `mlx5_core_access_reg`: `op_mod` 0 writes, 1 reads; the register
    /// data follows the 16-byte header in both directions).
    fn access_reg(&mut self, inp: &[u8], out: &mut [u8]) -> Res {
        use ifc::access_register_in as i;
        self.need_boot_pages()?;
        let reg = i::REGISTER_ID.get(inp) as u16;
        let len = match reg {
            REG_HOST_ENDIANNESS => self.host_endianness.len(),
            REG_PTYS => ifc::ptys_reg::SIZE,
            REG_NODE_DESC => NODE_DESC_LEN,
            _ => return Err(fail(CmdStatus::BadParam, syn::BAD_REGISTER)),
        };
        let write = match ifc::cmd_in::OP_MOD.get(inp) {
            0 => true,
            1 => false,
            _ => return Err(fail(CmdStatus::BadOp, syn::BAD_OP_MOD)),
        };
        // The register image the driver sent: a write's value, and PTYS's port and protocol
        // even for a read. Other reads may come without it.
        let data = i::REGISTER_DATA.byte();
        let zeros = [0u8; ifc::ptys_reg::SIZE];
        let given = match inp.get(data..data + len) {
            Some(g) => g,
            None if !write && reg != REG_PTYS => &zeros[..len.min(zeros.len())],
            None => return Err(fail(CmdStatus::BadPkt, syn::SHORT_REGISTER)),
        };
        let at = ifc::access_register_out::REGISTER_DATA.byte();
        if !write && out.len() < at + len {
            return Err(fail(CmdStatus::BadOutputLen, syn::OUTPUT_TOO_SHORT));
        }
        match (reg, write) {
            (REG_HOST_ENDIANNESS, true) => {
                self.host_endianness.copy_from_slice(given);
                Ok(())
            }
            (REG_HOST_ENDIANNESS, false) => {
                out[at..at + len].copy_from_slice(&self.host_endianness);
                Ok(())
            }
            (REG_PTYS, _) => self.ptys(given, write, &mut out[at..]),
            // The node description is firmware's (a read-only register here).
            (REG_NODE_DESC, true) => Err(fail(CmdStatus::BadParam, syn::BAD_REGISTER)),
            (REG_NODE_DESC, false) => {
                out[at..at + NODE_DESC.len()].copy_from_slice(NODE_DESC);
                Ok(())
            }
            _ => Err(fail(CmdStatus::BadParam, syn::BAD_REGISTER)),
        }
    }

    /// PTYS on the model's one Ethernet port (`local_port` 1, `proto_mask` Ethernet): the
    /// link modes a 100 Gb/s ConnectX-5 port reports (kernel `port.h` `enum mlx5e_link_mode`),
    /// operating at 100GBASE-CR4, no extended modes (the model has no PCAM register, so the
    /// kernel reads the legacy fields: `mlx5_ptys_ext_supported`). A write sets
    /// `eth_proto_admin` to a subset of the capability.
    fn ptys(&mut self, given: &[u8], write: bool, out: &mut [u8]) -> Res {
        use ifc::ptys_reg as p;
        if p::LOCAL_PORT.get(given) != 1 {
            return Err(fail(CmdStatus::BadParam, syn::BAD_PORT));
        }
        if p::PROTO_MASK.get(given) & u64::from(PTYS_EN) == 0 {
            return Err(fail(CmdStatus::BadParam, syn::NOT_ON_ETHERNET));
        }
        if write {
            let admin = p::ETH_PROTO_ADMIN.get(given) as u32;
            if admin == 0 || admin & !PTYS_ETH_CAPABILITY != 0 {
                return Err(fail(CmdStatus::BadParam, syn::UNSUPPORTED_CONTEXT));
            }
            self.ptys_admin = admin;
            return Ok(());
        }
        let r = &mut out[..p::SIZE];
        p::LOCAL_PORT.set(r, 1);
        p::PROTO_MASK.set(r, u64::from(PTYS_EN));
        p::ETH_PROTO_CAPABILITY.set(r, u64::from(PTYS_ETH_CAPABILITY));
        p::ETH_PROTO_ADMIN.set(r, u64::from(self.ptys_admin));
        p::ETH_PROTO_OPER.set(r, u64::from(PTYS_ETH_OPER));
        Ok(())
    }
}
