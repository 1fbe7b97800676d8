//! Numeric codes of the command interface, as enums with an `Unknown(raw)` arm.
//!
//! Sources: the kernel's `include/linux/mlx5/mlx5_ifc.h` (`MLX5_CMD_OP_*`,
//! `MLX5_QUERY_PAGES_IN_OP_MOD_*`, `MLX5_MANAGE_PAGES_IN_OP_MOD_*`, `MLX5_QPC_STATE_*`),
//! `include/linux/mlx5/device.h` (`MLX5_CMD_STAT_*`, `MLX5_EVENT_TYPE_*`, `MLX5_CAP_*`),
//! `include/linux/mlx5/driver.h` (`MLX5_REG_*`) and `drivers/net/ethernet/mellanox/mlx5/core/
//! cmd.c` (`MLX5_CMD_DELIVERY_STAT_*`). The `header` test compares each value with the
//! installed headers (the delivery statuses live in `cmd.c`, which is not installed).

macro_rules! fw_code {
    ($(#[$m:meta])* $name:ident : $t:ty { $($(#[$vm:meta])* $v:ident = $n:literal ($c:literal),)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vm])* $v,)*
            /// A value the firmware model does not know.
            Unknown($t),
        }

        impl From<$t> for $name {
            fn from(raw: $t) -> Self {
                match raw {
                    $($n => $name::$v,)*
                    other => $name::Unknown(other),
                }
            }
        }

        impl From<$name> for $t {
            fn from(v: $name) -> $t {
                match v {
                    $($name::$v => $n,)*
                    $name::Unknown(raw) => raw,
                }
            }
        }

        impl $name {
            /// (C name in the kernel headers, value) of every known code, for the header check
            /// (the delivery statuses are in `cmd.c`, which is not installed: unchecked).
            #[cfg(test)]
            #[allow(dead_code)]
            pub(crate) const HEADER: &'static [(&'static str, u64)] = &[$(($c, $n as u64)),*];
        }
    };
}

fw_code! {
    /// Command opcode (`opcode` of every command input).
    Opcode: u16 {
        /// Query device capabilities.
        QueryHcaCap = 0x100 ("MLX5_CMD_OP_QUERY_HCA_CAP"),
        /// Read the adapter's identity (vendor ids, PSID, VSD).
        QueryAdapter = 0x101 ("MLX5_CMD_OP_QUERY_ADAPTER"),
        /// Initialize the HCA (after boot and init pages were given).
        InitHca = 0x102 ("MLX5_CMD_OP_INIT_HCA"),
        /// Tear the HCA down.
        TeardownHca = 0x103 ("MLX5_CMD_OP_TEARDOWN_HCA"),
        /// Enable the function (first command after the queue is set up).
        EnableHca = 0x104 ("MLX5_CMD_OP_ENABLE_HCA"),
        /// Disable the function (last command).
        DisableHca = 0x105 ("MLX5_CMD_OP_DISABLE_HCA"),
        /// How many pages the firmware wants (boot, init, regular).
        QueryPages = 0x107 ("MLX5_CMD_OP_QUERY_PAGES"),
        /// Give pages to, or take pages back from, the firmware.
        ManagePages = 0x108 ("MLX5_CMD_OP_MANAGE_PAGES"),
        /// Set capabilities (before `INIT_HCA`).
        SetHcaCap = 0x109 ("MLX5_CMD_OP_SET_HCA_CAP"),
        /// Query the supported and current interface step sequence IDs.
        QueryIssi = 0x10a ("MLX5_CMD_OP_QUERY_ISSI"),
        /// Choose the interface step sequence ID.
        SetIssi = 0x10b ("MLX5_CMD_OP_SET_ISSI"),
        /// Create a memory key.
        CreateMkey = 0x200 ("MLX5_CMD_OP_CREATE_MKEY"),
        /// Destroy a memory key.
        DestroyMkey = 0x202 ("MLX5_CMD_OP_DESTROY_MKEY"),
        /// Create an event queue.
        CreateEq = 0x301 ("MLX5_CMD_OP_CREATE_EQ"),
        /// Destroy an event queue.
        DestroyEq = 0x302 ("MLX5_CMD_OP_DESTROY_EQ"),
        /// Create a completion queue.
        CreateCq = 0x400 ("MLX5_CMD_OP_CREATE_CQ"),
        /// Destroy a completion queue.
        DestroyCq = 0x401 ("MLX5_CMD_OP_DESTROY_CQ"),
        /// Create a queue pair (in RESET).
        CreateQp = 0x500 ("MLX5_CMD_OP_CREATE_QP"),
        /// Destroy a queue pair.
        DestroyQp = 0x501 ("MLX5_CMD_OP_DESTROY_QP"),
        /// RESET to INIT.
        Rst2InitQp = 0x502 ("MLX5_CMD_OP_RST2INIT_QP"),
        /// INIT to RTR.
        Init2RtrQp = 0x503 ("MLX5_CMD_OP_INIT2RTR_QP"),
        /// RTR to RTS.
        Rtr2RtsQp = 0x504 ("MLX5_CMD_OP_RTR2RTS_QP"),
        /// Any state to ERROR.
        ToErrQp = 0x507 ("MLX5_CMD_OP_2ERR_QP"),
        /// Any state to RESET.
        ToRstQp = 0x50a ("MLX5_CMD_OP_2RST_QP"),
        /// Read a QP's context.
        QueryQp = 0x50b ("MLX5_CMD_OP_QUERY_QP"),
        /// A MAD to the port's management agent (InfiniBand ports; refused on Ethernet).
        MadIfc = 0x50d ("MLX5_CMD_OP_MAD_IFC"),
        /// Create an XRC shared receive queue.
        CreateXrcSrq = 0x705 ("MLX5_CMD_OP_CREATE_XRC_SRQ"),
        /// Destroy an XRC SRQ.
        DestroyXrcSrq = 0x706 ("MLX5_CMD_OP_DESTROY_XRC_SRQ"),
        /// Read an XRC SRQ's context.
        QueryXrcSrq = 0x707 ("MLX5_CMD_OP_QUERY_XRC_SRQ"),
        /// Arm an XRC SRQ's limit event.
        ArmXrcSrq = 0x708 ("MLX5_CMD_OP_ARM_XRC_SRQ"),
        /// Read the vport's link state.
        QueryVportState = 0x750 ("MLX5_CMD_OP_QUERY_VPORT_STATE"),
        /// Read one entry of the RoCE address (GID) table.
        QueryRoceAddress = 0x760 ("MLX5_CMD_OP_QUERY_ROCE_ADDRESS"),
        /// Write one entry of the RoCE address (GID) table.
        SetRoceAddress = 0x761 ("MLX5_CMD_OP_SET_ROCE_ADDRESS"),
        /// Read P_Key table entries of the HCA vport.
        QueryHcaVportPkey = 0x765 ("MLX5_CMD_OP_QUERY_HCA_VPORT_PKEY"),
        /// Read the NIC vport context.
        QueryNicVportContext = 0x754 ("MLX5_CMD_OP_QUERY_NIC_VPORT_CONTEXT"),
        /// Modify the NIC vport context (`roce_en`).
        ModifyNicVportContext = 0x755 ("MLX5_CMD_OP_MODIFY_NIC_VPORT_CONTEXT"),
        /// Allocate a protection domain.
        AllocPd = 0x800 ("MLX5_CMD_OP_ALLOC_PD"),
        /// Free a protection domain.
        DeallocPd = 0x801 ("MLX5_CMD_OP_DEALLOC_PD"),
        /// Allocate a UAR page.
        AllocUar = 0x802 ("MLX5_CMD_OP_ALLOC_UAR"),
        /// Free a UAR page.
        DeallocUar = 0x803 ("MLX5_CMD_OP_DEALLOC_UAR"),
        /// Read or write a device register.
        AccessReg = 0x805 ("MLX5_CMD_OP_ACCESS_REG"),
        /// Do nothing (a liveness probe).
        Nop = 0x80d ("MLX5_CMD_OP_NOP"),
        /// Allocate an XRC domain.
        AllocXrcd = 0x80e ("MLX5_CMD_OP_ALLOC_XRCD"),
        /// Free an XRC domain.
        DeallocXrcd = 0x80f ("MLX5_CMD_OP_DEALLOC_XRCD"),
        /// Allocate a transport domain (groups TIRs and TISs for loopback control).
        AllocTransportDomain = 0x816 ("MLX5_CMD_OP_ALLOC_TRANSPORT_DOMAIN"),
        /// Free a transport domain.
        DeallocTransportDomain = 0x817 ("MLX5_CMD_OP_DEALLOC_TRANSPORT_DOMAIN"),
        /// Create a transport interface receive (what steering forwards to).
        CreateTir = 0x900 ("MLX5_CMD_OP_CREATE_TIR"),
        /// Destroy a TIR.
        DestroyTir = 0x902 ("MLX5_CMD_OP_DESTROY_TIR"),
        /// Create an Ethernet send queue (in RST).
        CreateSq = 0x904 ("MLX5_CMD_OP_CREATE_SQ"),
        /// Change an SQ's state.
        ModifySq = 0x905 ("MLX5_CMD_OP_MODIFY_SQ"),
        /// Destroy an SQ.
        DestroySq = 0x906 ("MLX5_CMD_OP_DESTROY_SQ"),
        /// Create an Ethernet receive queue (in RST).
        CreateRq = 0x908 ("MLX5_CMD_OP_CREATE_RQ"),
        /// Change an RQ's state.
        ModifyRq = 0x909 ("MLX5_CMD_OP_MODIFY_RQ"),
        /// Destroy an RQ.
        DestroyRq = 0x90a ("MLX5_CMD_OP_DESTROY_RQ"),
        /// Create a receive memory pool (a basic SRQ at ISSI 1).
        CreateRmp = 0x90c ("MLX5_CMD_OP_CREATE_RMP"),
        /// Change an RMP (its limit watermark).
        ModifyRmp = 0x90d ("MLX5_CMD_OP_MODIFY_RMP"),
        /// Destroy an RMP.
        DestroyRmp = 0x90e ("MLX5_CMD_OP_DESTROY_RMP"),
        /// Read an RMP's context.
        QueryRmp = 0x90f ("MLX5_CMD_OP_QUERY_RMP"),
        /// Create a transport interface send (what an SQ sends through).
        CreateTis = 0x912 ("MLX5_CMD_OP_CREATE_TIS"),
        /// Destroy a TIS.
        DestroyTis = 0x914 ("MLX5_CMD_OP_DESTROY_TIS"),
        /// Create a flow table.
        CreateFlowTable = 0x930 ("MLX5_CMD_OP_CREATE_FLOW_TABLE"),
        /// Destroy a flow table.
        DestroyFlowTable = 0x931 ("MLX5_CMD_OP_DESTROY_FLOW_TABLE"),
        /// Create a flow group (a range of entries sharing match criteria).
        CreateFlowGroup = 0x933 ("MLX5_CMD_OP_CREATE_FLOW_GROUP"),
        /// Destroy a flow group.
        DestroyFlowGroup = 0x934 ("MLX5_CMD_OP_DESTROY_FLOW_GROUP"),
        /// Write a flow table entry (match value, action, destinations).
        SetFlowTableEntry = 0x936 ("MLX5_CMD_OP_SET_FLOW_TABLE_ENTRY"),
        /// Delete a flow table entry.
        DeleteFlowTableEntry = 0x938 ("MLX5_CMD_OP_DELETE_FLOW_TABLE_ENTRY"),
        /// Make a flow table the root of its type.
        SetFlowTableRoot = 0x92f ("MLX5_CMD_OP_SET_FLOW_TABLE_ROOT"),
    }
}

fw_code! {
    /// Command status: byte 0 of every command output.
    CmdStatus: u8 {
        /// Success.
        Ok = 0x0 ("MLX5_CMD_STAT_OK"),
        /// Internal error.
        InternalError = 0x1 ("MLX5_CMD_STAT_INT_ERR"),
        /// Unknown or unsupported opcode or op_mod.
        BadOp = 0x2 ("MLX5_CMD_STAT_BAD_OP_ERR"),
        /// A parameter is invalid.
        BadParam = 0x3 ("MLX5_CMD_STAT_BAD_PARAM_ERR"),
        /// The command is not allowed in the HCA's current state.
        BadSysState = 0x4 ("MLX5_CMD_STAT_BAD_SYS_STATE_ERR"),
        /// The named resource does not exist.
        BadResource = 0x5 ("MLX5_CMD_STAT_BAD_RES_ERR"),
        /// The resource is still in use.
        ResourceBusy = 0x6 ("MLX5_CMD_STAT_RES_BUSY"),
        /// A limit would be exceeded.
        ExceedLim = 0x8 ("MLX5_CMD_STAT_LIM_ERR"),
        /// The resource is in a state that does not allow the command.
        BadResState = 0x9 ("MLX5_CMD_STAT_BAD_RES_STATE_ERR"),
        /// An index is out of range.
        BadIndex = 0xa ("MLX5_CMD_STAT_IX_ERR"),
        /// Out of resources (pages, objects).
        NoResources = 0xf ("MLX5_CMD_STAT_NO_RES_ERR"),
        /// The input is shorter than the command needs.
        BadInputLen = 0x50 ("MLX5_CMD_STAT_BAD_INP_LEN_ERR"),
        /// The output is shorter than the command needs.
        BadOutputLen = 0x51 ("MLX5_CMD_STAT_BAD_OUTP_LEN_ERR"),
        /// Illegal QP state transition.
        BadQpState = 0x10 ("MLX5_CMD_STAT_BAD_QP_STATE_ERR"),
        /// Malformed packet (register data).
        BadPkt = 0x30 ("MLX5_CMD_STAT_BAD_PKT_ERR"),
        /// Bad size (more outstanding CQEs than the CQ holds, or a CQ larger than allowed).
        BadSize = 0x40 ("MLX5_CMD_STAT_BAD_SIZE_OUTS_CQES_ERR"),
    }
}

fw_code! {
    /// Delivery status: bits 7:1 of the command entry's `status_own` byte, set by the firmware
    /// when it could not even run the command (the command status is then meaningless).
    DeliveryStatus: u8 {
        /// Delivered; the command status in the output says how it went.
        Ok = 0x0 ("MLX5_CMD_DELIVERY_STAT_OK"),
        /// Signature check failed.
        SignatureErr = 0x1 ("MLX5_CMD_DELIVERY_STAT_SIGNAT_ERR"),
        /// A mailbox's token differs from the entry's.
        TokenErr = 0x2 ("MLX5_CMD_DELIVERY_STAT_TOK_ERR"),
        /// A mailbox's block number is not its position in the chain.
        BadBlockNumber = 0x3 ("MLX5_CMD_DELIVERY_STAT_BAD_BLK_NUM_ERR"),
        /// An output mailbox pointer is misaligned or unreachable.
        OutPtrAlignErr = 0x4 ("MLX5_CMD_DELIVERY_STAT_OUT_PTR_ALIGN_ERR"),
        /// An input mailbox pointer is misaligned or unreachable.
        InPtrAlignErr = 0x5 ("MLX5_CMD_DELIVERY_STAT_IN_PTR_ALIGN_ERR"),
        /// Firmware error.
        FwErr = 0x6 ("MLX5_CMD_DELIVERY_STAT_FW_ERR"),
        /// The input length is impossible.
        InLengthErr = 0x7 ("MLX5_CMD_DELIVERY_STAT_IN_LENGTH_ERR"),
        /// The output length is impossible.
        OutLengthErr = 0x8 ("MLX5_CMD_DELIVERY_STAT_OUT_LENGTH_ERR"),
        /// A reserved field is not clear.
        ResFldNotClrErr = 0x9 ("MLX5_CMD_DELIVERY_STAT_RES_FLD_NOT_CLR_ERR"),
        /// The entry's type is not the PCIe command interface.
        CmdDescrErr = 0x10 ("MLX5_CMD_DELIVERY_STAT_CMD_DESCR_ERR"),
    }
}

fw_code! {
    /// `QUERY_PAGES` `op_mod`: which stage's page count is asked for.
    PagesStage: u16 {
        /// Pages needed before `QUERY_HCA_CAP`.
        Boot = 0x1 ("MLX5_QUERY_PAGES_IN_OP_MOD_BOOT_PAGES"),
        /// Pages needed before `INIT_HCA`.
        Init = 0x2 ("MLX5_QUERY_PAGES_IN_OP_MOD_INIT_PAGES"),
        /// Pages needed (positive) or returnable (negative) at run time.
        Regular = 0x3 ("MLX5_QUERY_PAGES_IN_OP_MOD_REGULAR_PAGES"),
    }
}

fw_code! {
    /// `MANAGE_PAGES` `op_mod`.
    ManagePagesMode: u16 {
        /// The driver cannot satisfy a page request.
        AllocationFail = 0x0 ("MLX5_MANAGE_PAGES_IN_OP_MOD_ALLOCATION_FAIL"),
        /// The driver gives the listed pages.
        Give = 0x1 ("MLX5_MANAGE_PAGES_IN_OP_MOD_ALLOCATION_SUCCESS"),
        /// The driver asks for pages back.
        Take = 0x2 ("MLX5_MANAGE_PAGES_IN_OP_MOD_HCA_RETURN_PAGES"),
    }
}

fw_code! {
    /// Capability type: `op_mod >> 1` of `QUERY_HCA_CAP` / `SET_HCA_CAP`.
    CapType: u16 {
        /// `cmd_hca_cap`.
        General = 0x0 ("MLX5_SET_HCA_CAP_OP_MOD_GENERAL_DEVICE"),
        /// `per_protocol_networking_offload_caps` (`MLX5_CAP_ETHERNET_OFFLOADS`, device.h).
        EthernetOffloads = 0x1 ("MLX5_CAP_ETHERNET_OFFLOADS"),
        /// `roce_cap`.
        Roce = 0x4 ("MLX5_SET_HCA_CAP_OP_MOD_ROCE"),
        /// `flow_table_nic_cap` (`MLX5_CAP_FLOW_TABLE`, device.h).
        FlowTable = 0x7 ("MLX5_CAP_FLOW_TABLE"),
    }
}

fw_code! {
    /// QP state (`qpc.state`).
    QpState: u8 {
        /// RESET.
        Rst = 0x0 ("MLX5_QPC_STATE_RST"),
        /// INIT.
        Init = 0x1 ("MLX5_QPC_STATE_INIT"),
        /// Ready to receive.
        Rtr = 0x2 ("MLX5_QPC_STATE_RTR"),
        /// Ready to send.
        Rts = 0x3 ("MLX5_QPC_STATE_RTS"),
        /// ERROR.
        Err = 0x6 ("MLX5_QPC_STATE_ERR"),
    }
}

fw_code! {
    /// Event type of an EQE (bit position in `create_eq_in.event_bitmask`).
    EventType: u8 {
        /// A CQE was written to an armed CQ (`comp_event`).
        Completion = 0x00 ("MLX5_EVENT_TYPE_COMP"),
        /// A CQ overran or faulted (`cq_error`).
        CqError = 0x04 ("MLX5_EVENT_TYPE_CQ_ERROR"),
        /// The port's state changed (`port_state_change_event`; sub-type down or active).
        PortChange = 0x09 ("MLX5_EVENT_TYPE_PORT_CHANGE"),
        /// A command completed (`cmd_inter_comp_event`).
        Cmd = 0x0a ("MLX5_EVENT_TYPE_CMD"),
        /// The firmware asks for, or returns, pages (`pages_req_event`).
        PageRequest = 0x0b ("MLX5_EVENT_TYPE_PAGE_REQUEST"),
    }
}

/// `type` of a command entry: PCIe transport (`MLX5_PCI_CMD_XPORT`, device.h).
pub const PCI_CMD_XPORT: u8 = 7;
/// Command interface revision (`CMD_IF_REV`, cmd.c): `cmdif_rev_fw_sub >> 16`.
pub const CMD_IF_REV: u16 = 5;
/// Register id of the host endianness register (`MLX5_REG_HOST_ENDIANNESS`, driver.h).
pub const REG_HOST_ENDIANNESS: u16 = 0x7004;
/// Port change event sub-type: the port went down (`MLX5_PORT_CHANGE_SUBTYPE_DOWN`).
pub const PORT_CHANGE_DOWN: u8 = 1;
/// Port change event sub-type: the port became active (`MLX5_PORT_CHANGE_SUBTYPE_ACTIVE`).
pub const PORT_CHANGE_ACTIVE: u8 = 4;
/// Register id of PTYS (port type and speed; kernel `MLX5_REG_PTYS`).
pub const REG_PTYS: u16 = 0x5004;
/// Register id of NODE_DESC (the node description string; kernel `MLX5_REG_NODE_DESC`).
pub const REG_NODE_DESC: u16 = 0x6001;
/// `ptys_reg.proto_mask` bit of Ethernet (kernel `MLX5_PTYS_EN`).
pub const PTYS_EN: u8 = 1 << 2;
/// `cmd_hca_cap.port_type` Ethernet (`MLX5_CAP_PORT_TYPE_ETH`, mlx5_ifc.h).
pub const PORT_TYPE_ETH: u8 = 1;
/// SQ/RQ states (`sqc.state`, `rqc.state`, `modify_*_in.*_state`; `MLX5_SQC_STATE_*`,
/// `MLX5_RQC_STATE_*`, mlx5_ifc.h): reset.
pub const WQ_STATE_RST: u8 = 0;
/// Ready.
pub const WQ_STATE_RDY: u8 = 1;
/// Error.
pub const WQ_STATE_ERR: u8 = 3;
/// `wq.wq_type` cyclic (`MLX5_WQ_TYPE_CYCLIC`, mlx5_ifc.h).
pub const WQ_TYPE_CYCLIC: u8 = 1;
/// `tirc.disp_type` direct (`MLX5_TIRC_DISP_TYPE_DIRECT`, mlx5_ifc.h).
pub const TIRC_DISP_TYPE_DIRECT: u8 = 0;
/// `table_type` NIC receive (`MLX5_FLOW_TABLE_TYPE_NIC_RX`, mlx5_ifc.h).
pub const FLOW_TABLE_TYPE_NIC_RX: u8 = 0;
/// `match_criteria_enable` bit of the outer headers
/// (`MLX5_CREATE_FLOW_GROUP_IN_MATCH_CRITERIA_ENABLE_OUTER_HEADERS`, mlx5_ifc.h).
pub const MATCH_CRITERIA_OUTER_HEADERS: u8 = 0;
/// `flow_context.action` forward to the destination list
/// (`MLX5_FLOW_CONTEXT_ACTION_FWD_DEST`, mlx5_ifc.h).
pub const FLOW_ACTION_FWD_DEST: u16 = 0x4;
/// `dest_format_struct.destination_type` TIR (`MLX5_FLOW_CONTEXT_DEST_TYPE_TIR`, device.h).
pub const FLOW_DEST_TYPE_TIR: u8 = 2;
/// `min_wqe_inline_mode` values (`MLX5_INLINE_MODE_*`, device.h): no header inline.
pub const INLINE_MODE_NONE: u8 = 0;
/// The L2 header inline.
pub const INLINE_MODE_L2: u8 = 1;
/// Up to the IP header inline.
pub const INLINE_MODE_IP: u8 = 2;
/// Up to the TCP/UDP header inline.
pub const INLINE_MODE_TCP_UDP: u8 = 3;
/// `wqe_inline_mode` capability: L2 headers always inline (`MLX5_CAP_INLINE_MODE_L2`,
/// device.h).
pub const CAP_INLINE_MODE_L2: u8 = 0;
/// `qpc.st` RC (`MLX5_QPC_ST_RC`, mlx5_ifc.h).
pub const QPC_ST_RC: u8 = 0;
/// `qpc.st` UD (`MLX5_QPC_ST_UD`, mlx5_ifc.h).
pub const QPC_ST_UD: u8 = 0x2;
/// `qpc.st` QP1, the GSI QP (`MLX5_QPC_ST_QP1`, mlx5_ifc.h).
pub const QPC_ST_QP1: u8 = 0x8;
/// `qpc.st` REG_UMR, the kernel's memory registration QP (`MLX5_QPC_ST_REG_UMR`, mlx5_ifc.h).
pub const QPC_ST_REG_UMR: u8 = 0xc;
/// `qpc.atomic_mode` for the 8-byte atomics of the IB spec (`MLX5_ATOMIC_MODE_IB_COMP`,
/// kernel `include/linux/mlx5/driver.h`); 2 (`_CX`) and 3 (`_8B`) are 8-byte modes too,
/// larger values name the 16..256-byte extended atomics the model does not offer.
pub const ATOMIC_MODE_MAX_8B: u8 = 3;
/// `mkc.access_mode` physical addresses (`MLX5_MKC_ACCESS_MODE_PA`, mlx5_ifc.h).
pub const MKC_ACCESS_MODE_PA: u8 = 0;
/// `mkc.access_mode` MTT (`MLX5_MKC_ACCESS_MODE_MTT`, mlx5_ifc.h).
pub const MKC_ACCESS_MODE_MTT: u8 = 1;
/// `mkc.access_mode` KSM (`MLX5_MKC_ACCESS_MODE_KSM`, mlx5_ifc.h).
pub const MKC_ACCESS_MODE_KSM: u8 = 3;
/// `qpc.rq_type` for a QP without receive queue (`MLX5_ZERO_LEN_RQ`, kernel qp.h).
pub const ZERO_LEN_RQ: u8 = 3;
/// `roce_addr_layout.roce_version` for RoCE v1 (`MLX5_ROCE_VERSION_1`, device.h), which the
/// model does not offer.
pub const ROCE_VERSION_1: u8 = 0;
/// `roce_addr_layout.roce_version` for RoCE v2 (`MLX5_ROCE_VERSION_2`, device.h).
pub const ROCE_VERSION_2: u8 = 2;
/// `roce_addr_layout.roce_l3_type` IPv4 (`MLX5_ROCE_L3_TYPE_IPV4`, device.h).
pub const ROCE_L3_TYPE_IPV4: u8 = 0;
/// `roce_addr_layout.roce_l3_type` IPv6 (`MLX5_ROCE_L3_TYPE_IPV6`, device.h).
pub const ROCE_L3_TYPE_IPV6: u8 = 1;
/// Vport state up (`MLX5_VPORT_ADMIN_STATE_UP`, device.h; `query_vport_state_out.state`
/// uses the same encoding).
pub const VPORT_STATE_UP: u8 = 1;
/// `teardown_hca_in.profile` graceful close (`MLX5_TEARDOWN_HCA_IN_PROFILE_GRACEFUL_CLOSE`).
pub const TEARDOWN_GRACEFUL: u16 = 0;
/// `teardown_hca_in.profile` force close (`MLX5_TEARDOWN_HCA_IN_PROFILE_FORCE_CLOSE`).
pub const TEARDOWN_FORCE: u16 = 1;

/// The syndromes the firmware model reports with a failing command status.
///
/// Real firmware's syndromes are opaque 32-bit values; the model's are its own, one per reason,
/// so that a test can tell which check refused a command. They have the form `0x4d46_xxxx`
/// (`"MF"`, model firmware), except where the real one is known
/// ([`ROCE_VERSION_UNSUPPORTED`](syndrome::ROCE_VERSION_UNSUPPORTED)).
pub mod syndrome {
    /// Opcode unknown to the model.
    pub const UNKNOWN_OPCODE: u32 = 0x4d46_0001;
    /// `op_mod` unknown for this opcode.
    pub const BAD_OP_MOD: u32 = 0x4d46_0002;
    /// Input shorter than the command's layout.
    pub const INPUT_TOO_SHORT: u32 = 0x4d46_0003;
    /// Output shorter than the command's layout.
    pub const OUTPUT_TOO_SHORT: u32 = 0x4d46_0004;
    /// Command before `ENABLE_HCA`.
    pub const NOT_ENABLED: u32 = 0x4d46_0010;
    /// Command needs `INIT_HCA` first.
    pub const NOT_INITIALIZED: u32 = 0x4d46_0011;
    /// Command only allowed before `INIT_HCA`.
    pub const ALREADY_INITIALIZED: u32 = 0x4d46_0012;
    /// `ENABLE_HCA` on an enabled function, or `DISABLE_HCA` on a disabled one.
    pub const FUNCTION_STATE: u32 = 0x4d46_0013;
    /// `INIT_HCA` or a capability command without enough pages given.
    pub const NOT_ENOUGH_PAGES: u32 = 0x4d46_0014;
    /// `TEARDOWN_HCA` with objects alive, or `DISABLE_HCA` with pages not taken back.
    pub const OBJECTS_ALIVE: u32 = 0x4d46_0015;
    /// Function other than 0 (the model has one physical function, no VFs).
    pub const BAD_FUNCTION: u32 = 0x4d46_0016;
    /// ISSI not supported.
    pub const BAD_ISSI: u32 = 0x4d46_0017;
    /// Page address not 4 KiB aligned, not reachable, or already given.
    pub const BAD_PAGE: u32 = 0x4d46_0020;
    /// `MANAGE_PAGES` with a number of entries that does not fit the input.
    pub const BAD_PAGE_COUNT: u32 = 0x4d46_0021;
    /// Capability type the model does not have.
    pub const BAD_CAP_TYPE: u32 = 0x4d46_0030;
    /// `SET_HCA_CAP` asks for more than the maximum capability allows.
    pub const CAP_ABOVE_MAX: u32 = 0x4d46_0031;
    /// Register unknown to the model.
    pub const BAD_REGISTER: u32 = 0x4d46_0032;
    /// Register data shorter than the register.
    pub const SHORT_REGISTER: u32 = 0x4d46_0033;
    /// Index beyond the table.
    pub const INDEX_RANGE: u32 = 0x4d46_0040;
    /// Object does not exist.
    pub const NO_SUCH_OBJECT: u32 = 0x4d46_0041;
    /// Object is referenced by another object.
    pub const OBJECT_IN_USE: u32 = 0x4d46_0042;
    /// Object count limit (`log_max_*`) reached.
    pub const OBJECT_LIMIT: u32 = 0x4d46_0043;
    /// The device model has no room for another object.
    pub const MODEL_FULL: u32 = 0x4d46_0044;
    /// A queue larger than the capability allows.
    pub const QUEUE_TOO_BIG: u32 = 0x4d46_0050;
    /// PAS entries missing for the queue's size.
    pub const PAS_TOO_SHORT: u32 = 0x4d46_0051;
    /// A queue whose `page_offset` would split an entry across two pages.
    pub const QUEUE_START: u32 = 0x4d46_0052;
    /// A buffer, doorbell record or page address that does not translate.
    pub const BAD_ADDRESS: u32 = 0x4d46_0053;
    /// A memory key of length 0.
    pub const EMPTY_RANGE: u32 = 0x4d46_0055;
    /// A context field with a value the model does not support.
    pub const UNSUPPORTED_CONTEXT: u32 = 0x4d46_0054;
    /// Illegal QP state transition.
    pub const QP_TRANSITION: u32 = 0x4d46_0060;
    /// Bad port number.
    pub const BAD_PORT: u32 = 0x4d46_0061;
    /// Bad path MTU.
    pub const BAD_MTU: u32 = 0x4d46_0062;
    /// RoCE traffic while RoCE is disabled in the NIC vport context.
    pub const ROCE_DISABLED: u32 = 0x4d46_0063;
    /// `SET_ROCE_ADDRESS` differs from the model's configured GID table.
    pub const GID_MISMATCH: u32 = 0x4d46_0064;
    /// `SET_ROCE_ADDRESS` with a `roce_version` the function does not have (`roce_cap`), such
    /// as the all-zero clear (version 0, RoCE v1) on a function without RoCE v1. Not of the
    /// model's form: real firmware's syndrome for it, quoted in the kernel's April 2021 fix
    /// "IB/mlx5: Set right RoCE l3 type and roce version while deleting GID"
    /// (`SET_ROCE_ADDRESS(0x761) ... bad parameter(0x3), syndrome (0x12822d)`).
    pub const ROCE_VERSION_UNSUPPORTED: u32 = 0x0012_822d;
    /// The device model refused the operation.
    pub const MODEL_REFUSED: u32 = 0x4d46_0070;
    /// A command of InfiniBand ports only (`MAD_IFC`) on the model's Ethernet port.
    pub const NOT_ON_ETHERNET: u32 = 0x4d46_0071;
    /// A fault injected by a test.
    pub const INJECTED: u32 = 0x4d46_00ff;
    /// An SQ/RQ transition from a state it is not in, or to one the model does not allow.
    pub const WQ_TRANSITION: u32 = 0x4d46_0080;
    /// A flow steering command for another vport or another table type than NIC RX.
    pub const BAD_VPORT_OR_TABLE_TYPE: u32 = 0x4d46_0081;
    /// Match criteria the model cannot apply (other header sets, unsupported fields).
    pub const UNSUPPORTED_MATCH: u32 = 0x4d46_0082;
    /// A match value with bits outside its group's criteria.
    pub const VALUE_OUTSIDE_CRITERIA: u32 = 0x4d46_0083;
    /// A flow index outside the table, the group, or already used; overlapping groups.
    pub const FLOW_INDEX: u32 = 0x4d46_0084;
    /// A flow table entry action or destination list the model does not execute.
    pub const UNSUPPORTED_ACTION: u32 = 0x4d46_0085;
    /// A table or group still holding groups, entries or the root.
    pub const TABLE_IN_USE: u32 = 0x4d46_0086;
}
