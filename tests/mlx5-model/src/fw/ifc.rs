//! Field positions of the PRM command layouts the firmware model decodes and encodes.
//!
//! Every constant is a [`Field`]: a bit offset from the start of a structure and a width, in
//! the PRM's numbering (bit 0 is the most significant bit of byte 0; a structure is a sequence
//! of big-endian dwords). The values are those of the kernel's `include/linux/mlx5/mlx5_ifc.h`
//! (`struct mlx5_ifc_<name>_bits`, where `u8 field[0xN]` is an N-bit field); each module names
//! its structure, and the `header` test re-derives every offset, width and size from the
//! installed header and compares.
//!
//! Nested contexts (`qpc`, `cqc`, `mkc`, `eqc`, `ads`, `cmd_hca_cap`, …) have their own module;
//! [`Field::at`] places one of their fields inside the command that embeds them.

/// A field of a PRM layout: `width` bits starting `bit` bits from the start of the structure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Field {
    /// Offset in bits from the most significant bit of byte 0.
    pub bit: u32,
    /// Width in bits (for arrays: the whole array; for flexible arrays: one element).
    pub width: u32,
}

impl Field {
    /// A field of `width` bits at bit offset `bit`.
    pub const fn new(bit: u32, width: u32) -> Self {
        Field { bit, width }
    }

    /// This field of a nested structure, placed inside `outer` (the embedding member).
    pub const fn at(self, outer: Field) -> Field {
        Field { bit: outer.bit + self.bit, width: self.width }
    }

    /// The `i`-th element of an array whose element is this field.
    pub const fn index(self, i: u32) -> Field {
        Field { bit: self.bit + i * self.width, width: self.width }
    }

    /// Byte offset of the first byte the field touches.
    pub const fn byte(self) -> usize {
        (self.bit / 8) as usize
    }

    /// Number of bytes a byte-aligned field spans.
    pub const fn bytes(self) -> usize {
        self.width.div_ceil(8) as usize
    }

    fn span(self, len: usize) -> (usize, usize) {
        let start = (self.bit / 8) as usize;
        let end = (self.bit + self.width).div_ceil(8) as usize;
        assert!(self.width > 0 && self.width <= 64, "field of {} bits is not a scalar", self.width);
        assert!(end <= len, "field at bit {:#x} outside a {len}-byte buffer", self.bit);
        (start, end)
    }

    /// The field's value (big-endian bit order, as `MLX5_GET`/`MLX5_GET64` read it).
    pub fn get(self, buf: &[u8]) -> u64 {
        let (start, end) = self.span(buf.len());
        let mut acc: u128 = 0;
        for b in &buf[start..end] {
            acc = (acc << 8) | u128::from(*b);
        }
        let shift = end as u32 * 8 - (self.bit + self.width);
        ((acc >> shift) & ((1u128 << self.width) - 1)) as u64
    }

    /// Store `value` (truncated to the width) into the field, leaving other bits alone.
    pub fn set(self, buf: &mut [u8], value: u64) {
        let (start, end) = self.span(buf.len());
        let mut acc: u128 = 0;
        for b in &buf[start..end] {
            acc = (acc << 8) | u128::from(*b);
        }
        let shift = end as u32 * 8 - (self.bit + self.width);
        let mask = ((1u128 << self.width) - 1) << shift;
        acc = (acc & !mask) | ((u128::from(value) << shift) & mask);
        for (i, b) in buf[start..end].iter_mut().enumerate().rev() {
            *b = (acc >> (8 * (end - start - 1 - i))) as u8;
        }
    }

    /// The bytes of a byte-aligned field (arrays such as `rgid_rip`).
    pub fn slice(self, buf: &[u8]) -> &[u8] {
        assert!(self.bit % 8 == 0 && self.width % 8 == 0, "field is not byte aligned");
        &buf[self.byte()..self.byte() + self.bytes()]
    }

    /// Mutable bytes of a byte-aligned field.
    pub fn slice_mut(self, buf: &mut [u8]) -> &mut [u8] {
        assert!(self.bit % 8 == 0 && self.width % 8 == 0, "field is not byte aligned");
        let b = self.byte();
        &mut buf[b..b + self.bytes()]
    }
}

/// Declares one module per `mlx5_ifc_<name>_bits` structure: its size and its fields.
macro_rules! ifc {
    ($(
        $(#[$m:meta])*
        $module:ident = $cname:literal, $bytes:literal bytes {
            $($field:ident = $path:literal @ $bit:literal : $width:literal;)*
        }
    )*) => {$(
        $(#[$m])*
        #[doc = concat!("\n\nLayout: `struct mlx5_ifc_", $cname, "_bits` (", $bytes, " bytes).")]
        pub mod $module {
            #[allow(unused_imports)]
            use super::Field;
            /// Size of the structure in bytes.
            pub const SIZE: usize = $bytes;
            $(
                #[doc = concat!("`", $cname, ".", $path, "`")]
                pub const $field: Field = Field::new($bit, $width);
            )*
            /// (structure, size in bytes, [(member path, field)]) for the header check.
            #[cfg(test)]
            pub(crate) const HEADER: (&str, usize, &[(&str, Field)]) =
                ($cname, $bytes, &[$(($path, $field)),*]);
        }
    )*

    /// Every declared structure, for the header check.
    #[cfg(test)]
    pub(crate) const ALL: &[(&str, usize, &[(&str, Field)])] = &[$($module::HEADER),*];
    };
}

ifc! {
    /// The header every command input starts with (shown here by `alloc_pd_in`).
    cmd_in = "alloc_pd_in", 16 bytes {
        OPCODE = "opcode" @ 0x0 : 16;
        UID = "uid" @ 0x10 : 16;
        OP_MOD = "op_mod" @ 0x30 : 16;
    }
    /// The header every command output starts with (shown here by `alloc_pd_out`).
    cmd_out = "alloc_pd_out", 16 bytes {
        STATUS = "status" @ 0x0 : 8;
        SYNDROME = "syndrome" @ 0x20 : 32;
    }
    /// `ENABLE_HCA` input.
    enable_hca_in = "enable_hca_in", 16 bytes {
        EMBEDDED_CPU_FUNCTION = "embedded_cpu_function" @ 0x40 : 1;
        FUNCTION_ID = "function_id" @ 0x50 : 16;
    }
    /// `ENABLE_HCA` output.
    enable_hca_out = "enable_hca_out", 12 bytes {}
    /// `DISABLE_HCA` input.
    disable_hca_in = "disable_hca_in", 16 bytes {
        FUNCTION_ID = "function_id" @ 0x50 : 16;
    }
    /// `DISABLE_HCA` output.
    disable_hca_out = "disable_hca_out", 12 bytes {}
    /// `QUERY_ISSI` input.
    query_issi_in = "query_issi_in", 16 bytes {}
    /// `QUERY_ISSI` output.
    query_issi_out = "query_issi_out", 112 bytes {
        CURRENT_ISSI = "current_issi" @ 0x50 : 16;
        SUPPORTED_ISSI_DW0 = "supported_issi_dw0" @ 0x360 : 32;
    }
    /// `SET_ISSI` input.
    set_issi_in = "set_issi_in", 16 bytes {
        CURRENT_ISSI = "current_issi" @ 0x50 : 16;
    }
    /// `SET_ISSI` output.
    set_issi_out = "set_issi_out", 16 bytes {}
    /// `QUERY_PAGES` input.
    query_pages_in = "query_pages_in", 16 bytes {
        FUNCTION_ID = "function_id" @ 0x50 : 16;
    }
    /// `QUERY_PAGES` output.
    query_pages_out = "query_pages_out", 16 bytes {
        FUNCTION_ID = "function_id" @ 0x50 : 16;
        NUM_PAGES = "num_pages" @ 0x60 : 32;
    }
    /// `MANAGE_PAGES` input (followed by `input_num_entries` 64-bit page addresses).
    manage_pages_in = "manage_pages_in", 16 bytes {
        FUNCTION_ID = "function_id" @ 0x50 : 16;
        INPUT_NUM_ENTRIES = "input_num_entries" @ 0x60 : 32;
        PAS = "pas" @ 0x80 : 64;
    }
    /// `MANAGE_PAGES` output (followed by `output_num_entries` 64-bit page addresses).
    manage_pages_out = "manage_pages_out", 16 bytes {
        OUTPUT_NUM_ENTRIES = "output_num_entries" @ 0x40 : 32;
        PAS = "pas" @ 0x80 : 64;
    }
    /// `QUERY_HCA_CAP` input; `op_mod` is `capability type << 1 | current`.
    query_hca_cap_in = "query_hca_cap_in", 16 bytes {
        OTHER_FUNCTION = "other_function" @ 0x40 : 1;
        FUNCTION_ID = "function_id" @ 0x50 : 16;
    }
    /// `QUERY_HCA_CAP` output.
    query_hca_cap_out = "query_hca_cap_out", 4112 bytes {
        CAPABILITY = "capability" @ 0x80 : 32768;
    }
    /// `SET_HCA_CAP` input; `op_mod` is `capability type << 1`.
    set_hca_cap_in = "set_hca_cap_in", 4112 bytes {
        OTHER_FUNCTION = "other_function" @ 0x40 : 1;
        CAPABILITY = "capability" @ 0x80 : 32768;
    }
    /// `SET_HCA_CAP` output.
    set_hca_cap_out = "set_hca_cap_out", 16 bytes {}
    /// General device capabilities (capability type 0).
    cmd_hca_cap = "cmd_hca_cap", 256 bytes {
        LOG_MAX_SRQ_SZ = "log_max_srq_sz" @ 0x80 : 8;
        LOG_MAX_QP_SZ = "log_max_qp_sz" @ 0x88 : 8;
        LOG_MAX_QP = "log_max_qp" @ 0x9b : 5;
        LOG_MAX_SRQ = "log_max_srq" @ 0xab : 5;
        LOG_MAX_CQ_SZ = "log_max_cq_sz" @ 0xc8 : 8;
        LOG_MAX_CQ = "log_max_cq" @ 0xdb : 5;
        LOG_MAX_EQ_SZ = "log_max_eq_sz" @ 0xe0 : 8;
        LOG_MAX_MKEY = "log_max_mkey" @ 0xea : 6;
        LOG_MAX_EQ = "log_max_eq" @ 0xfc : 4;
        LOG_MAX_MRW_SZ = "log_max_mrw_sz" @ 0x109 : 7;
        LOG_MAX_RA_REQ_QP = "log_max_ra_req_qp" @ 0x14a : 6;
        LOG_MAX_RA_RES_QP = "log_max_ra_res_qp" @ 0x15a : 6;
        GID_TABLE_SIZE = "gid_table_size" @ 0x170 : 16;
        VPORT_COUNTERS = "vport_counters" @ 0x181 : 1;
        PKEY_TABLE_SIZE = "pkey_table_size" @ 0x190 : 16;
        XRC = "xrc" @ 0x23c : 1;
        LOG_MAX_XRCD = "log_max_xrcd" @ 0x33b : 5;
        PORT_TYPE = "port_type" @ 0x1b6 : 2;
        NIC_FLOW_TABLE = "nic_flow_table" @ 0x1a6 : 1;
        NUM_PORTS = "num_ports" @ 0x1b8 : 8;
        LOG_MAX_MSG = "log_max_msg" @ 0x1c3 : 5;
        CQE_VERSION = "cqe_version" @ 0x1fc : 4;
        UMR_MODIFY_ENTITY_SIZE_DISABLED = "umr_modify_entity_size_disabled" @ 0x207 : 1;
        CMDIF_CHECKSUM = "cmdif_checksum" @ 0x210 : 2;
        ETH_NET_OFFLOADS = "eth_net_offloads" @ 0x21c : 1;
        ROCE = "roce" @ 0x21d : 1;
        UAR_4K = "uar_4k" @ 0x240 : 1;
        FL_RC_QP_WHEN_ROCE_DISABLED = "fl_rc_qp_when_roce_disabled" @ 0x248 : 1;
        UAR_SZ = "uar_sz" @ 0x24a : 6;
        LOG_PG_SZ = "log_pg_sz" @ 0x258 : 8;
        LOG_BF_REG_SIZE = "log_bf_reg_size" @ 0x26b : 5;
        MAX_WQE_SZ_SQ = "max_wqe_sz_sq" @ 0x290 : 16;
        MAX_WQE_SZ_RQ = "max_wqe_sz_rq" @ 0x2b0 : 16;
        LOG_MAX_TRANSPORT_DOMAIN = "log_max_transport_domain" @ 0x323 : 5;
        LOG_MAX_PD = "log_max_pd" @ 0x32b : 5;
        LOG_MAX_RQ = "log_max_rq" @ 0x363 : 5;
        LOG_MAX_SQ = "log_max_sq" @ 0x36b : 5;
        LOG_MAX_TIR = "log_max_tir" @ 0x373 : 5;
        LOG_MAX_TIS = "log_max_tis" @ 0x37b : 5;
        LOG_MAX_TIS_PER_SQ = "log_max_tis_per_sq" @ 0x39b : 5;
        LOG_UAR_PAGE_SZ = "log_uar_page_sz" @ 0x490 : 16;
        DEVICE_FREQUENCY_KHZ = "device_frequency_khz" @ 0x4e0 : 32;
        NUM_OF_UARS_PER_PAGE = "num_of_uars_per_page" @ 0x520 : 32;
    }
    /// RoCE capabilities (capability type 4).
    roce_cap = "roce_cap", 256 bytes {
        FL_RC_QP_WHEN_ROCE_DISABLED = "fl_rc_qp_when_roce_disabled" @ 0x5 : 1;
        FL_RC_QP_WHEN_ROCE_ENABLED = "fl_rc_qp_when_roce_enabled" @ 0x6 : 1;
        L3_TYPE = "l3_type" @ 0x8c : 4;
        ROCE_VERSION = "roce_version" @ 0x98 : 8;
        R_ROCE_DEST_UDP_PORT = "r_roce_dest_udp_port" @ 0xb0 : 16;
        R_ROCE_MAX_SRC_UDP_PORT = "r_roce_max_src_udp_port" @ 0xc0 : 16;
        R_ROCE_MIN_SRC_UDP_PORT = "r_roce_min_src_udp_port" @ 0xd0 : 16;
        ROCE_ADDRESS_TABLE_SIZE = "roce_address_table_size" @ 0xf0 : 16;
    }
    /// `INIT_HCA` input.
    init_hca_in = "init_hca_in", 32 bytes {}
    /// `INIT_HCA` output.
    init_hca_out = "init_hca_out", 16 bytes {}
    /// `TEARDOWN_HCA` input.
    teardown_hca_in = "teardown_hca_in", 16 bytes {
        PROFILE = "profile" @ 0x50 : 16;
    }
    /// `TEARDOWN_HCA` output.
    teardown_hca_out = "teardown_hca_out", 16 bytes {
        STATE = "state" @ 0x7f : 1;
    }
    /// `ACCESS_REG` input (`op_mod` 0 writes, 1 reads), followed by the register data.
    access_register_in = "access_register_in", 16 bytes {
        REGISTER_ID = "register_id" @ 0x50 : 16;
        ARGUMENT = "argument" @ 0x60 : 32;
        REGISTER_DATA = "register_data" @ 0x80 : 32;
    }
    /// `ACCESS_REG` output, followed by the register data.
    access_register_out = "access_register_out", 16 bytes {
        REGISTER_DATA = "register_data" @ 0x80 : 32;
    }
    /// `ALLOC_XRCD` input.
    alloc_xrcd_in = "alloc_xrcd_in", 16 bytes {}
    /// `ALLOC_XRCD` output.
    alloc_xrcd_out = "alloc_xrcd_out", 16 bytes {
        XRCD = "xrcd" @ 0x48 : 24;
    }
    /// `DEALLOC_XRCD` input.
    dealloc_xrcd_in = "dealloc_xrcd_in", 16 bytes {
        XRCD = "xrcd" @ 0x48 : 24;
    }
    /// `DEALLOC_XRCD` output.
    dealloc_xrcd_out = "dealloc_xrcd_out", 16 bytes {}
    /// `QUERY_HCA_VPORT_PKEY` input.
    query_hca_vport_pkey_in = "query_hca_vport_pkey_in", 16 bytes {
        OTHER_VPORT = "other_vport" @ 0x40 : 1;
        PORT_NUM = "port_num" @ 0x4c : 4;
        VPORT_NUMBER = "vport_number" @ 0x50 : 16;
        PKEY_INDEX = "pkey_index" @ 0x70 : 16;
    }
    /// `QUERY_HCA_VPORT_PKEY` output: the header, then [`pkey`] entries.
    query_hca_vport_pkey_out = "query_hca_vport_pkey_out", 16 bytes {}
    /// One P_Key table entry.
    pkey = "pkey", 4 bytes {
        PKEY = "pkey" @ 0x10 : 16;
    }
    /// The PTYS register (port type and speed; register id `0x5004`).
    ptys_reg = "ptys_reg", 64 bytes {
        LOCAL_PORT = "local_port" @ 0x8 : 8;
        PROTO_MASK = "proto_mask" @ 0x1d : 3;
        EXT_ETH_PROTO_CAPABILITY = "ext_eth_proto_capability" @ 0x40 : 32;
        ETH_PROTO_CAPABILITY = "eth_proto_capability" @ 0x60 : 32;
        EXT_ETH_PROTO_ADMIN = "ext_eth_proto_admin" @ 0xa0 : 32;
        ETH_PROTO_ADMIN = "eth_proto_admin" @ 0xc0 : 32;
        EXT_ETH_PROTO_OPER = "ext_eth_proto_oper" @ 0x100 : 32;
        ETH_PROTO_OPER = "eth_proto_oper" @ 0x120 : 32;
        CONNECTOR_TYPE = "connector_type" @ 0x17c : 4;
    }
    /// `QUERY_ADAPTER` input.
    query_adapter_in = "query_adapter_in", 16 bytes {}
    /// `QUERY_ADAPTER` output: the adapter parameter block after the header.
    query_adapter_out = "query_adapter_out", 272 bytes {
        IEEE_VENDOR_ID = "query_adapter_struct.ieee_vendor_id" @ 0x148 : 24;
        VSD_VENDOR_ID = "query_adapter_struct.vsd_vendor_id" @ 0x170 : 16;
        VSD = "query_adapter_struct.vsd" @ 0x180 : 1664;
        VSD_CONTD_PSID = "query_adapter_struct.vsd_contd_psid" @ 0x800 : 128;
    }
    /// The host endianness register (register id `0x7004`).
    register_host_endianness = "register_host_endianness", 16 bytes {
        HE = "he" @ 0x0 : 1;
    }
    /// `ALLOC_UAR` input.
    alloc_uar_in = "alloc_uar_in", 16 bytes {}
    /// `ALLOC_UAR` output.
    alloc_uar_out = "alloc_uar_out", 16 bytes {
        UAR = "uar" @ 0x48 : 24;
    }
    /// `DEALLOC_UAR` input.
    dealloc_uar_in = "dealloc_uar_in", 16 bytes {
        UAR = "uar" @ 0x48 : 24;
    }
    /// `DEALLOC_UAR` output.
    dealloc_uar_out = "dealloc_uar_out", 16 bytes {}
    /// `ALLOC_PD` input.
    alloc_pd_in = "alloc_pd_in", 16 bytes {}
    /// `ALLOC_PD` output.
    alloc_pd_out = "alloc_pd_out", 16 bytes {
        PD = "pd" @ 0x48 : 24;
    }
    /// `DEALLOC_PD` input.
    dealloc_pd_in = "dealloc_pd_in", 16 bytes {
        PD = "pd" @ 0x48 : 24;
    }
    /// `DEALLOC_PD` output.
    dealloc_pd_out = "dealloc_pd_out", 16 bytes {}
    /// `CREATE_EQ` input (followed by the PAS list).
    create_eq_in = "create_eq_in", 272 bytes {
        EQ_CONTEXT = "eq_context_entry" @ 0x80 : 512;
        EVENT_BITMASK = "event_bitmask" @ 0x2c0 : 256;
        PAS = "pas" @ 0x880 : 64;
    }
    /// `CREATE_EQ` output.
    create_eq_out = "create_eq_out", 16 bytes {
        EQ_NUMBER = "eq_number" @ 0x58 : 8;
    }
    /// `DESTROY_EQ` input.
    destroy_eq_in = "destroy_eq_in", 16 bytes {
        EQ_NUMBER = "eq_number" @ 0x58 : 8;
    }
    /// `DESTROY_EQ` output.
    destroy_eq_out = "destroy_eq_out", 16 bytes {}
    /// Event queue context.
    eqc = "eqc", 64 bytes {
        STATUS = "status" @ 0x0 : 4;
        EC = "ec" @ 0xd : 1;
        OI = "oi" @ 0xe : 1;
        ST = "st" @ 0x14 : 4;
        PAGE_OFFSET = "page_offset" @ 0x54 : 6;
        LOG_EQ_SIZE = "log_eq_size" @ 0x63 : 5;
        UAR_PAGE = "uar_page" @ 0x68 : 24;
        INTR = "intr" @ 0xb4 : 12;
        LOG_PAGE_SIZE = "log_page_size" @ 0xc3 : 5;
        CONSUMER_COUNTER = "consumer_counter" @ 0x148 : 24;
        PRODUCER_COUNTER = "producer_counter" @ 0x168 : 24;
    }
    /// An event queue entry.
    eqe = "eqe", 64 bytes {
        EVENT_TYPE = "event_type" @ 0x8 : 8;
        EVENT_SUB_TYPE = "event_sub_type" @ 0x18 : 8;
        EVENT_DATA = "event_data" @ 0x100 : 224;
        SIGNATURE = "signature" @ 0x1f0 : 8;
        OWNER = "owner" @ 0x1ff : 1;
    }
    /// Event data of a port state change event.
    port_state_change_event = "port_state_change_event", 28 bytes {
        PORT_NUM = "port_num" @ 0x40 : 4;
    }
    /// Event data of a CQ error event.
    cq_error = "cq_error", 28 bytes {
        CQN = "cqn" @ 0x8 : 24;
        SYNDROME = "syndrome" @ 0x58 : 8;
    }
    /// Event data of a completion event.
    comp_event = "comp_event", 28 bytes {
        CQ_NUMBER = "cq_number" @ 0xc8 : 24;
    }
    /// Event data of a command completion event.
    cmd_inter_comp_event = "cmd_inter_comp_event", 28 bytes {
        COMMAND_COMPLETION_VECTOR = "command_completion_vector" @ 0x0 : 32;
    }
    /// Event data of a page request event.
    pages_req_event = "pages_req_event", 28 bytes {
        FUNCTION_ID = "function_id" @ 0x10 : 16;
        NUM_PAGES = "num_pages" @ 0x20 : 32;
    }
    /// `CREATE_MKEY` input (followed by the translation entries).
    create_mkey_in = "create_mkey_in", 272 bytes {
        PG_ACCESS = "pg_access" @ 0x60 : 1;
        MKEY_CONTEXT = "memory_key_mkey_entry" @ 0x80 : 512;
        TRANSLATIONS_OCTWORD_ACTUAL_SIZE = "translations_octword_actual_size" @ 0x300 : 32;
        KLM_PAS_MTT = "klm_pas_mtt" @ 0x880 : 32;
    }
    /// `CREATE_MKEY` output.
    create_mkey_out = "create_mkey_out", 16 bytes {
        MKEY_INDEX = "mkey_index" @ 0x48 : 24;
    }
    /// `DESTROY_MKEY` input.
    destroy_mkey_in = "destroy_mkey_in", 16 bytes {
        MKEY_INDEX = "mkey_index" @ 0x48 : 24;
    }
    /// `DESTROY_MKEY` output.
    destroy_mkey_out = "destroy_mkey_out", 16 bytes {}
    /// Memory key context.
    mkc = "mkc", 64 bytes {
        FREE = "free" @ 0x1 : 1;
        ACCESS_MODE_4_2 = "access_mode_4_2" @ 0x3 : 3;
        UMR_EN = "umr_en" @ 0x10 : 1;
        A = "a" @ 0x11 : 1;
        RW = "rw" @ 0x12 : 1;
        RR = "rr" @ 0x13 : 1;
        LW = "lw" @ 0x14 : 1;
        LR = "lr" @ 0x15 : 1;
        ACCESS_MODE_1_0 = "access_mode_1_0" @ 0x16 : 2;
        QPN = "qpn" @ 0x20 : 24;
        MKEY_7_0 = "mkey_7_0" @ 0x38 : 8;
        LENGTH64 = "length64" @ 0x60 : 1;
        PD = "pd" @ 0x68 : 24;
        START_ADDR = "start_addr" @ 0x80 : 64;
        LEN = "len" @ 0xc0 : 64;
        TRANSLATIONS_OCTWORD_SIZE = "translations_octword_size" @ 0x1a0 : 32;
        LOG_PAGE_SIZE = "log_page_size" @ 0x1db : 5;
    }
    /// `CREATE_CQ` input (followed by the PAS list).
    create_cq_in = "create_cq_in", 272 bytes {
        CQ_CONTEXT = "cq_context" @ 0x80 : 512;
        CQ_UMEM_VALID = "cq_umem_valid" @ 0x2e0 : 1;
        PAS = "pas" @ 0x880 : 64;
    }
    /// `CREATE_CQ` output.
    create_cq_out = "create_cq_out", 16 bytes {
        CQN = "cqn" @ 0x48 : 24;
    }
    /// `DESTROY_CQ` input.
    destroy_cq_in = "destroy_cq_in", 16 bytes {
        CQN = "cqn" @ 0x48 : 24;
    }
    /// `DESTROY_CQ` output.
    destroy_cq_out = "destroy_cq_out", 16 bytes {}
    /// Completion queue context.
    cqc = "cqc", 64 bytes {
        STATUS = "status" @ 0x0 : 4;
        DBR_UMEM_VALID = "dbr_umem_valid" @ 0x6 : 1;
        CQE_SZ = "cqe_sz" @ 0x8 : 3;
        CC = "cc" @ 0xb : 1;
        OI = "oi" @ 0xe : 1;
        CQE_COMP_EN = "cqe_comp_en" @ 0x11 : 1;
        PAGE_OFFSET = "page_offset" @ 0x54 : 6;
        LOG_CQ_SIZE = "log_cq_size" @ 0x63 : 5;
        UAR_PAGE = "uar_page" @ 0x68 : 24;
        C_EQN = "c_eqn_or_apu_element" @ 0xa0 : 32;
        LOG_PAGE_SIZE = "log_page_size" @ 0xc3 : 5;
        DBR_ADDR = "dbr_addr" @ 0x1c0 : 64;
    }
    /// `CREATE_QP` input (followed by the PAS list).
    create_qp_in = "create_qp_in", 272 bytes {
        INPUT_QPN = "input_qpn" @ 0x48 : 24;
        OPT_PARAM_MASK = "opt_param_mask" @ 0x80 : 32;
        QPC = "qpc" @ 0xc0 : 1856;
        WQ_UMEM_VALID = "wq_umem_valid" @ 0x860 : 1;
        PAS = "pas" @ 0x880 : 64;
    }
    /// `CREATE_QP` output.
    create_qp_out = "create_qp_out", 16 bytes {
        QPN = "qpn" @ 0x48 : 24;
    }
    /// `DESTROY_QP` input.
    destroy_qp_in = "destroy_qp_in", 16 bytes {
        QPN = "qpn" @ 0x48 : 24;
    }
    /// `DESTROY_QP` output.
    destroy_qp_out = "destroy_qp_out", 16 bytes {}
    /// `RST2INIT_QP` input.
    rst2init_qp_in = "rst2init_qp_in", 272 bytes {
        QPN = "qpn" @ 0x48 : 24;
        OPT_PARAM_MASK = "opt_param_mask" @ 0x80 : 32;
        QPC = "qpc" @ 0xc0 : 1856;
    }
    /// `RST2INIT_QP` output.
    rst2init_qp_out = "rst2init_qp_out", 16 bytes {}
    /// `INIT2RTR_QP` input.
    init2rtr_qp_in = "init2rtr_qp_in", 272 bytes {
        QPN = "qpn" @ 0x48 : 24;
        OPT_PARAM_MASK = "opt_param_mask" @ 0x80 : 32;
        QPC = "qpc" @ 0xc0 : 1856;
    }
    /// `INIT2RTR_QP` output.
    init2rtr_qp_out = "init2rtr_qp_out", 16 bytes {}
    /// `RTR2RTS_QP` input.
    rtr2rts_qp_in = "rtr2rts_qp_in", 272 bytes {
        QPN = "qpn" @ 0x48 : 24;
        OPT_PARAM_MASK = "opt_param_mask" @ 0x80 : 32;
        QPC = "qpc" @ 0xc0 : 1856;
    }
    /// `RTR2RTS_QP` output.
    rtr2rts_qp_out = "rtr2rts_qp_out", 16 bytes {}
    /// `2ERR_QP` input.
    qp_2err_in = "qp_2err_in", 16 bytes {
        QPN = "qpn" @ 0x48 : 24;
    }
    /// `2ERR_QP` output.
    qp_2err_out = "qp_2err_out", 16 bytes {}
    /// `2RST_QP` input.
    qp_2rst_in = "qp_2rst_in", 16 bytes {
        QPN = "qpn" @ 0x48 : 24;
    }
    /// `2RST_QP` output.
    qp_2rst_out = "qp_2rst_out", 16 bytes {}
    /// Queue pair context.
    qpc = "qpc", 232 bytes {
        STATE = "state" @ 0x0 : 4;
        ST = "st" @ 0x8 : 8;
        PM_STATE = "pm_state" @ 0x13 : 2;
        PD = "pd" @ 0x28 : 24;
        MTU = "mtu" @ 0x40 : 3;
        LOG_MSG_MAX = "log_msg_max" @ 0x43 : 5;
        LOG_RQ_SIZE = "log_rq_size" @ 0x49 : 4;
        LOG_RQ_STRIDE = "log_rq_stride" @ 0x4d : 3;
        NO_SQ = "no_sq" @ 0x50 : 1;
        LOG_SQ_SIZE = "log_sq_size" @ 0x51 : 4;
        UAR_PAGE = "uar_page" @ 0x68 : 24;
        LOG_PAGE_SIZE = "log_page_size" @ 0xa3 : 5;
        REMOTE_QPN = "remote_qpn" @ 0xa8 : 24;
        PRIMARY_ADDRESS_PATH = "primary_address_path" @ 0xc0 : 352;
        RETRY_COUNT = "retry_count" @ 0x38d : 3;
        RNR_RETRY = "rnr_retry" @ 0x390 : 3;
        NEXT_SEND_PSN = "next_send_psn" @ 0x3c8 : 24;
        CQN_SND = "cqn_snd" @ 0x3e8 : 24;
        ATOMIC_MODE = "atomic_mode" @ 0x48c : 4;
        RRE = "rre" @ 0x490 : 1;
        RWE = "rwe" @ 0x491 : 1;
        RAE = "rae" @ 0x492 : 1;
        PAGE_OFFSET = "page_offset" @ 0x494 : 6;
        MIN_RNR_NAK = "min_rnr_nak" @ 0x4a3 : 5;
        NEXT_RCV_PSN = "next_rcv_psn" @ 0x4a8 : 24;
        CQN_RCV = "cqn_rcv" @ 0x4e8 : 24;
        DBR_ADDR = "dbr_addr" @ 0x500 : 64;
        Q_KEY = "q_key" @ 0x540 : 32;
        RQ_TYPE = "rq_type" @ 0x565 : 3;
    }
    /// Address path (inside `qpc`).
    ads = "ads", 44 bytes {
        FL = "fl" @ 0x0 : 1;
        PKEY_INDEX = "pkey_index" @ 0x10 : 16;
        GRH = "grh" @ 0x28 : 1;
        ACK_TIMEOUT = "ack_timeout" @ 0x40 : 5;
        SRC_ADDR_INDEX = "src_addr_index" @ 0x48 : 8;
        HOP_LIMIT = "hop_limit" @ 0x58 : 8;
        TCLASS = "tclass" @ 0x64 : 8;
        FLOW_LABEL = "flow_label" @ 0x6c : 20;
        RGID_RIP = "rgid_rip" @ 0x80 : 128;
        UDP_SPORT = "udp_sport" @ 0x110 : 16;
        VHCA_PORT_NUM = "vhca_port_num" @ 0x128 : 8;
        RMAC_47_32 = "rmac_47_32" @ 0x130 : 16;
        RMAC_31_0 = "rmac_31_0" @ 0x140 : 32;
    }
    /// `MODIFY_NIC_VPORT_CONTEXT` input.
    modify_nic_vport_context_in = "modify_nic_vport_context_in", 512 bytes {
        OTHER_VPORT = "other_vport" @ 0x40 : 1;
        VPORT_NUMBER = "vport_number" @ 0x50 : 16;
        FIELD_SELECT_ROCE_EN = "field_select.roce_en" @ 0x7e : 1;
        FIELD_SELECT_MTU = "field_select.mtu" @ 0x79 : 1;
        NIC_VPORT_CONTEXT = "nic_vport_context" @ 0x800 : 2048;
    }
    /// `MODIFY_NIC_VPORT_CONTEXT` output.
    modify_nic_vport_context_out = "modify_nic_vport_context_out", 16 bytes {}
    /// `QUERY_NIC_VPORT_CONTEXT` input.
    query_nic_vport_context_in = "query_nic_vport_context_in", 16 bytes {
        OTHER_VPORT = "other_vport" @ 0x40 : 1;
        VPORT_NUMBER = "vport_number" @ 0x50 : 16;
    }
    /// `QUERY_NIC_VPORT_CONTEXT` output.
    query_nic_vport_context_out = "query_nic_vport_context_out", 272 bytes {
        NIC_VPORT_CONTEXT = "nic_vport_context" @ 0x80 : 2048;
    }
    /// `NOP` input.
    nop_in = "nop_in", 16 bytes {}
    /// `NOP` output.
    nop_out = "nop_out", 16 bytes {}
    /// `QUERY_QP` input.
    query_qp_in = "query_qp_in", 16 bytes {
        QPN = "qpn" @ 0x48 : 24;
    }
    /// `QUERY_QP` output.
    query_qp_out = "query_qp_out", 272 bytes {
        QPC = "qpc" @ 0xc0 : 1856;
    }
    /// `QUERY_VPORT_STATE` input.
    query_vport_state_in = "query_vport_state_in", 16 bytes {
        OTHER_VPORT = "other_vport" @ 0x40 : 1;
        VPORT_NUMBER = "vport_number" @ 0x50 : 16;
    }
    /// `QUERY_VPORT_STATE` output.
    query_vport_state_out = "query_vport_state_out", 16 bytes {
        ADMIN_STATE = "admin_state" @ 0x78 : 4;
        STATE = "state" @ 0x7c : 4;
    }
    /// `QUERY_ROCE_ADDRESS` input.
    query_roce_address_in = "query_roce_address_in", 16 bytes {
        ROCE_ADDRESS_INDEX = "roce_address_index" @ 0x40 : 16;
        VHCA_PORT_NUM = "vhca_port_num" @ 0x5c : 4;
    }
    /// `QUERY_ROCE_ADDRESS` output.
    query_roce_address_out = "query_roce_address_out", 48 bytes {
        ROCE_ADDRESS = "roce_address" @ 0x80 : 256;
    }
    /// `SET_ROCE_ADDRESS` input.
    set_roce_address_in = "set_roce_address_in", 48 bytes {
        ROCE_ADDRESS_INDEX = "roce_address_index" @ 0x40 : 16;
        VHCA_PORT_NUM = "vhca_port_num" @ 0x5c : 4;
        ROCE_ADDRESS = "roce_address" @ 0x80 : 256;
    }
    /// `SET_ROCE_ADDRESS` output.
    set_roce_address_out = "set_roce_address_out", 16 bytes {}
    /// One RoCE address (GID) table entry.
    roce_addr_layout = "roce_addr_layout", 32 bytes {
        SOURCE_L3_ADDRESS = "source_l3_address" @ 0x0 : 128;
        VLAN_VALID = "vlan_valid" @ 0x83 : 1;
        SOURCE_MAC_47_32 = "source_mac_47_32" @ 0x90 : 16;
        SOURCE_MAC_31_0 = "source_mac_31_0" @ 0xa0 : 32;
        ROCE_L3_TYPE = "roce_l3_type" @ 0xd4 : 4;
        ROCE_VERSION = "roce_version" @ 0xd8 : 8;
    }
    /// NIC vport context.
    nic_vport_context = "nic_vport_context", 256 bytes {
        ROCE_EN = "roce_en" @ 0x1f : 1;
        MTU = "mtu" @ 0x130 : 16;
        MAC_47_32 = "permanent_address.mac_addr_47_32" @ 0x7b0 : 16;
        MAC_31_0 = "permanent_address.mac_addr_31_0" @ 0x7c0 : 32;
    }

    /// Ethernet offload capabilities (capability type 1).
    per_protocol_networking_offload_caps = "per_protocol_networking_offload_caps", 256 bytes {
        CSUM_CAP = "csum_cap" @ 0x0 : 1;
        VLAN_CAP = "vlan_cap" @ 0x1 : 1;
        WQE_INLINE_MODE = "wqe_inline_mode" @ 0x12 : 2;
    }
    /// NIC flow table capabilities (capability type 7); the NIC RX table properties are
    /// `flow_table_prop_layout` at [`flow_table_nic_cap::FLOW_TABLE_PROPERTIES_NIC_RECEIVE`].
    flow_table_nic_cap = "flow_table_nic_cap", 4096 bytes {
        FLOW_TABLE_PROPERTIES_NIC_RECEIVE = "flow_table_properties_nic_receive" @ 0x200 : 512;
    }
    /// Properties of one flow table type.
    flow_table_prop_layout = "flow_table_prop_layout", 64 bytes {
        FT_SUPPORT = "ft_support" @ 0x0 : 1;
        FLOW_MODIFY_EN = "flow_modify_en" @ 0x3 : 1;
        MODIFY_ROOT = "modify_root" @ 0x4 : 1;
        LOG_MAX_FT_SIZE = "log_max_ft_size" @ 0x22 : 6;
        MAX_FT_LEVEL = "max_ft_level" @ 0x38 : 8;
        LOG_MAX_FT_NUM = "log_max_ft_num" @ 0x78 : 8;
        LOG_MAX_DESTINATION = "log_max_destination" @ 0x98 : 8;
        LOG_MAX_FLOW = "log_max_flow" @ 0xb8 : 8;
    }
    /// `ALLOC_TRANSPORT_DOMAIN` input.
    alloc_transport_domain_in = "alloc_transport_domain_in", 16 bytes {}
    /// `ALLOC_TRANSPORT_DOMAIN` output.
    alloc_transport_domain_out = "alloc_transport_domain_out", 16 bytes {
        TRANSPORT_DOMAIN = "transport_domain" @ 0x48 : 24;
    }
    /// `DEALLOC_TRANSPORT_DOMAIN` input.
    dealloc_transport_domain_in = "dealloc_transport_domain_in", 16 bytes {
        TRANSPORT_DOMAIN = "transport_domain" @ 0x48 : 24;
    }
    /// `DEALLOC_TRANSPORT_DOMAIN` output.
    dealloc_transport_domain_out = "dealloc_transport_domain_out", 16 bytes {}
    /// `CREATE_TIS` input.
    create_tis_in = "create_tis_in", 192 bytes {
        CTX = "ctx" @ 0x100 : 1280;
    }
    /// `CREATE_TIS` output.
    create_tis_out = "create_tis_out", 16 bytes {
        TISN = "tisn" @ 0x48 : 24;
    }
    /// `DESTROY_TIS` input.
    destroy_tis_in = "destroy_tis_in", 16 bytes {
        TISN = "tisn" @ 0x48 : 24;
    }
    /// `DESTROY_TIS` output.
    destroy_tis_out = "destroy_tis_out", 16 bytes {}
    /// Transport interface send context.
    tisc = "tisc", 160 bytes {
        STRICT_LAG_TX_PORT_AFFINITY = "strict_lag_tx_port_affinity" @ 0x0 : 1;
        TLS_EN = "tls_en" @ 0x1 : 1;
        LAG_TX_PORT_AFFINITY = "lag_tx_port_affinity" @ 0x4 : 4;
        PRIO = "prio" @ 0xc : 4;
        TRANSPORT_DOMAIN = "transport_domain" @ 0x128 : 24;
        UNDERLAY_QPN = "underlay_qpn" @ 0x148 : 24;
        PD = "pd" @ 0x168 : 24;
    }
    /// `CREATE_SQ` input (the PAS list is the context's `wq.pas`).
    create_sq_in = "create_sq_in", 272 bytes {
        CTX = "ctx" @ 0x100 : 1920;
        PAS = "ctx.wq.pas" @ 0x880 : 64;
    }
    /// `CREATE_SQ` output.
    create_sq_out = "create_sq_out", 16 bytes {
        SQN = "sqn" @ 0x48 : 24;
    }
    /// `MODIFY_SQ` input.
    modify_sq_in = "modify_sq_in", 272 bytes {
        SQ_STATE = "sq_state" @ 0x40 : 4;
        SQN = "sqn" @ 0x48 : 24;
        MODIFY_BITMASK = "modify_bitmask" @ 0x80 : 64;
        CTX = "ctx" @ 0x100 : 1920;
    }
    /// `MODIFY_SQ` output.
    modify_sq_out = "modify_sq_out", 16 bytes {}
    /// `DESTROY_SQ` input.
    destroy_sq_in = "destroy_sq_in", 16 bytes {
        SQN = "sqn" @ 0x48 : 24;
    }
    /// `DESTROY_SQ` output.
    destroy_sq_out = "destroy_sq_out", 16 bytes {}
    /// Send queue context.
    sqc = "sqc", 240 bytes {
        RLKY = "rlky" @ 0x0 : 1;
        CD_MASTER = "cd_master" @ 0x1 : 1;
        FRE = "fre" @ 0x2 : 1;
        FLUSH_IN_ERROR_EN = "flush_in_error_en" @ 0x3 : 1;
        ALLOW_MULTI_PKT_SEND_WQE = "allow_multi_pkt_send_wqe" @ 0x4 : 1;
        MIN_WQE_INLINE_MODE = "min_wqe_inline_mode" @ 0x5 : 3;
        STATE = "state" @ 0x8 : 4;
        REG_UMR = "reg_umr" @ 0xc : 1;
        ALLOW_SWP = "allow_swp" @ 0xd : 1;
        HAIRPIN = "hairpin" @ 0xe : 1;
        TS_FORMAT = "ts_format" @ 0x1a : 2;
        USER_INDEX = "user_index" @ 0x28 : 24;
        CQN = "cqn" @ 0x48 : 24;
        PACKET_PACING_RATE_LIMIT_INDEX = "packet_pacing_rate_limit_index" @ 0xf0 : 16;
        TIS_LST_SZ = "tis_lst_sz" @ 0x100 : 16;
        TIS_NUM_0 = "tis_num_0" @ 0x168 : 24;
        WQ = "wq" @ 0x180 : 1536;
    }
    /// Work queue (inside `sqc` and `rqc`).
    wq = "wq", 192 bytes {
        WQ_TYPE = "wq_type" @ 0x0 : 4;
        WQ_SIGNATURE = "wq_signature" @ 0x4 : 1;
        END_PADDING_MODE = "end_padding_mode" @ 0x5 : 2;
        CD_SLAVE = "cd_slave" @ 0x7 : 1;
        PAGE_OFFSET = "page_offset" @ 0x2b : 5;
        LWM = "lwm" @ 0x30 : 16;
        PD = "pd" @ 0x48 : 24;
        UAR_PAGE = "uar_page" @ 0x68 : 24;
        DBR_ADDR = "dbr_addr" @ 0x80 : 64;
        HW_COUNTER = "hw_counter" @ 0xc0 : 32;
        SW_COUNTER = "sw_counter" @ 0xe0 : 32;
        LOG_WQ_STRIDE = "log_wq_stride" @ 0x10c : 4;
        LOG_WQ_PG_SZ = "log_wq_pg_sz" @ 0x113 : 5;
        LOG_WQ_SZ = "log_wq_sz" @ 0x11b : 5;
        DBR_UMEM_VALID = "dbr_umem_valid" @ 0x120 : 1;
        WQ_UMEM_VALID = "wq_umem_valid" @ 0x121 : 1;
    }
    /// `CREATE_RQ` input (the PAS list is the context's `wq.pas`).
    create_rq_in = "create_rq_in", 272 bytes {
        CTX = "ctx" @ 0x100 : 1920;
        PAS = "ctx.wq.pas" @ 0x880 : 64;
    }
    /// `CREATE_RQ` output.
    create_rq_out = "create_rq_out", 16 bytes {
        RQN = "rqn" @ 0x48 : 24;
    }
    /// `MODIFY_RQ` input.
    modify_rq_in = "modify_rq_in", 272 bytes {
        RQ_STATE = "rq_state" @ 0x40 : 4;
        RQN = "rqn" @ 0x48 : 24;
        MODIFY_BITMASK = "modify_bitmask" @ 0x80 : 64;
        CTX = "ctx" @ 0x100 : 1920;
    }
    /// `MODIFY_RQ` output.
    modify_rq_out = "modify_rq_out", 16 bytes {}
    /// `DESTROY_RQ` input.
    destroy_rq_in = "destroy_rq_in", 16 bytes {
        RQN = "rqn" @ 0x48 : 24;
    }
    /// `DESTROY_RQ` output.
    destroy_rq_out = "destroy_rq_out", 16 bytes {}
    /// Receive queue context.
    rqc = "rqc", 240 bytes {
        RLKY = "rlky" @ 0x0 : 1;
        DELAY_DROP_EN = "delay_drop_en" @ 0x1 : 1;
        SCATTER_FCS = "scatter_fcs" @ 0x2 : 1;
        VSD = "vsd" @ 0x3 : 1;
        MEM_RQ_TYPE = "mem_rq_type" @ 0x4 : 4;
        STATE = "state" @ 0x8 : 4;
        FLUSH_IN_ERROR_EN = "flush_in_error_en" @ 0xd : 1;
        HAIRPIN = "hairpin" @ 0xe : 1;
        TS_FORMAT = "ts_format" @ 0x1a : 2;
        USER_INDEX = "user_index" @ 0x28 : 24;
        CQN = "cqn" @ 0x48 : 24;
        COUNTER_SET_ID = "counter_set_id" @ 0x60 : 8;
        RMPN = "rmpn" @ 0x88 : 24;
        WQ = "wq" @ 0x180 : 1536;
    }
    /// `CREATE_TIR` input.
    create_tir_in = "create_tir_in", 272 bytes {
        CTX = "ctx" @ 0x100 : 1920;
    }
    /// `CREATE_TIR` output.
    create_tir_out = "create_tir_out", 16 bytes {
        TIRN = "tirn" @ 0x48 : 24;
    }
    /// `DESTROY_TIR` input.
    destroy_tir_in = "destroy_tir_in", 16 bytes {
        TIRN = "tirn" @ 0x48 : 24;
    }
    /// `DESTROY_TIR` output.
    destroy_tir_out = "destroy_tir_out", 16 bytes {}
    /// Transport interface receive context.
    tirc = "tirc", 240 bytes {
        DISP_TYPE = "disp_type" @ 0x20 : 4;
        TLS_EN = "tls_en" @ 0x24 : 1;
        LRO_TIMEOUT_PERIOD_USECS = "lro_timeout_period_usecs" @ 0x84 : 16;
        PACKET_MERGE_MASK = "packet_merge_mask" @ 0x94 : 4;
        LRO_MAX_IP_PAYLOAD_SIZE = "lro_max_ip_payload_size" @ 0x98 : 8;
        INLINE_RQN = "inline_rqn" @ 0xe8 : 24;
        RX_HASH_SYMMETRIC = "rx_hash_symmetric" @ 0x100 : 1;
        TUNNELED_OFFLOAD_EN = "tunneled_offload_en" @ 0x102 : 1;
        INDIRECT_TABLE = "indirect_table" @ 0x108 : 24;
        RX_HASH_FN = "rx_hash_fn" @ 0x120 : 4;
        SELF_LB_BLOCK = "self_lb_block" @ 0x126 : 2;
        TRANSPORT_DOMAIN = "transport_domain" @ 0x128 : 24;
    }
    /// `CREATE_FLOW_TABLE` input.
    create_flow_table_in = "create_flow_table_in", 64 bytes {
        OTHER_VPORT = "other_vport" @ 0x40 : 1;
        VPORT_NUMBER = "vport_number" @ 0x50 : 16;
        TABLE_TYPE = "table_type" @ 0x80 : 8;
        FLOW_TABLE_CONTEXT = "flow_table_context" @ 0xc0 : 320;
    }
    /// `CREATE_FLOW_TABLE` output.
    create_flow_table_out = "create_flow_table_out", 16 bytes {
        TABLE_ID = "table_id" @ 0x48 : 24;
    }
    /// Flow table context.
    flow_table_context = "flow_table_context", 40 bytes {
        REFORMAT_EN = "reformat_en" @ 0x0 : 1;
        DECAP_EN = "decap_en" @ 0x1 : 1;
        SW_OWNER = "sw_owner" @ 0x2 : 1;
        TERMINATION_TABLE = "termination_table" @ 0x3 : 1;
        TABLE_MISS_ACTION = "table_miss_action" @ 0x4 : 4;
        LEVEL = "level" @ 0x8 : 8;
        LOG_SIZE = "log_size" @ 0x18 : 8;
        TABLE_MISS_ID = "table_miss_id" @ 0x28 : 24;
        LAG_MASTER_NEXT_TABLE_ID = "lag_master_next_table_id" @ 0x48 : 24;
    }
    /// `DESTROY_FLOW_TABLE` input.
    destroy_flow_table_in = "destroy_flow_table_in", 64 bytes {
        OTHER_VPORT = "other_vport" @ 0x40 : 1;
        VPORT_NUMBER = "vport_number" @ 0x50 : 16;
        TABLE_TYPE = "table_type" @ 0x80 : 8;
        TABLE_ID = "table_id" @ 0xa8 : 24;
    }
    /// `DESTROY_FLOW_TABLE` output.
    destroy_flow_table_out = "destroy_flow_table_out", 16 bytes {}
    /// `CREATE_FLOW_GROUP` input.
    create_flow_group_in = "create_flow_group_in", 1024 bytes {
        OTHER_VPORT = "other_vport" @ 0x40 : 1;
        VPORT_NUMBER = "vport_number" @ 0x50 : 16;
        TABLE_TYPE = "table_type" @ 0x80 : 8;
        GROUP_TYPE = "group_type" @ 0x8c : 4;
        TABLE_ID = "table_id" @ 0xa8 : 24;
        SOURCE_ESWITCH_OWNER_VHCA_ID_VALID = "source_eswitch_owner_vhca_id_valid" @ 0xc0 : 1;
        START_FLOW_INDEX = "start_flow_index" @ 0xe0 : 32;
        END_FLOW_INDEX = "end_flow_index" @ 0x120 : 32;
        MATCH_DEFINER_ID = "match_definer_id" @ 0x150 : 16;
        MATCH_CRITERIA_ENABLE = "match_criteria_enable" @ 0x1f8 : 8;
        MATCH_CRITERIA = "match_criteria" @ 0x200 : 4096;
    }
    /// `CREATE_FLOW_GROUP` output.
    create_flow_group_out = "create_flow_group_out", 16 bytes {
        GROUP_ID = "group_id" @ 0x48 : 24;
    }
    /// `DESTROY_FLOW_GROUP` input.
    destroy_flow_group_in = "destroy_flow_group_in", 64 bytes {
        OTHER_VPORT = "other_vport" @ 0x40 : 1;
        VPORT_NUMBER = "vport_number" @ 0x50 : 16;
        TABLE_TYPE = "table_type" @ 0x80 : 8;
        TABLE_ID = "table_id" @ 0xa8 : 24;
        GROUP_ID = "group_id" @ 0xc0 : 32;
    }
    /// `DESTROY_FLOW_GROUP` output.
    destroy_flow_group_out = "destroy_flow_group_out", 16 bytes {}
    /// Match criteria or value: every header set, in the order the PRM gives them.
    fte_match_param = "fte_match_param", 512 bytes {
        OUTER_HEADERS = "outer_headers" @ 0x0 : 512;
    }
    /// The layer 2 to 4 header fields one can match on (`outer_headers`, `inner_headers`).
    fte_match_set_lyr_2_4 = "fte_match_set_lyr_2_4", 64 bytes {
        SMAC_47_16 = "smac_47_16" @ 0x0 : 32;
        SMAC_15_0 = "smac_15_0" @ 0x20 : 16;
        ETHERTYPE = "ethertype" @ 0x30 : 16;
        DMAC_47_16 = "dmac_47_16" @ 0x40 : 32;
        DMAC_15_0 = "dmac_15_0" @ 0x60 : 16;
        FIRST_PRIO = "first_prio" @ 0x70 : 3;
        FIRST_CFI = "first_cfi" @ 0x73 : 1;
        FIRST_VID = "first_vid" @ 0x74 : 12;
        IP_PROTOCOL = "ip_protocol" @ 0x80 : 8;
        CVLAN_TAG = "cvlan_tag" @ 0x90 : 1;
        SVLAN_TAG = "svlan_tag" @ 0x91 : 1;
        IP_VERSION = "ip_version" @ 0x93 : 4;
        UDP_SPORT = "udp_sport" @ 0xe0 : 16;
        UDP_DPORT = "udp_dport" @ 0xf0 : 16;
    }
    /// `SET_FLOW_TABLE_ENTRY` input (followed by the destination list).
    set_fte_in = "set_fte_in", 832 bytes {
        OTHER_VPORT = "other_vport" @ 0x40 : 1;
        VPORT_NUMBER = "vport_number" @ 0x50 : 16;
        TABLE_TYPE = "table_type" @ 0x80 : 8;
        TABLE_ID = "table_id" @ 0xa8 : 24;
        IGNORE_FLOW_LEVEL = "ignore_flow_level" @ 0xc0 : 1;
        MODIFY_ENABLE_MASK = "modify_enable_mask" @ 0xd8 : 8;
        FLOW_INDEX = "flow_index" @ 0x100 : 32;
        FLOW_CONTEXT = "flow_context" @ 0x200 : 6144;
        DESTINATION = "flow_context.destination" @ 0x1a00 : 128;
    }
    /// `SET_FLOW_TABLE_ENTRY` output.
    set_fte_out = "set_fte_out", 16 bytes {}
    /// A flow table entry's context.
    flow_context = "flow_context", 768 bytes {
        PUSH_VLAN = "push_vlan" @ 0x0 : 32;
        GROUP_ID = "group_id" @ 0x20 : 32;
        FLOW_TAG = "flow_tag" @ 0x48 : 24;
        ACTION = "action" @ 0x70 : 16;
        EXTENDED_DESTINATION = "extended_destination" @ 0x80 : 1;
        DESTINATION_LIST_SIZE = "destination_list_size" @ 0x88 : 24;
        FLOW_COUNTER_LIST_SIZE = "flow_counter_list_size" @ 0xa8 : 24;
        PACKET_REFORMAT_ID = "packet_reformat_id" @ 0xc0 : 32;
        MODIFY_HEADER_ID = "modify_header_id" @ 0xe0 : 32;
        MATCH_VALUE = "match_value" @ 0x200 : 4096;
    }
    /// One destination of a flow table entry.
    dest_format_struct = "dest_format_struct", 8 bytes {
        DESTINATION_TYPE = "destination_type" @ 0x0 : 8;
        DESTINATION_ID = "destination_id" @ 0x8 : 24;
    }
    /// `DELETE_FLOW_TABLE_ENTRY` input.
    delete_fte_in = "delete_fte_in", 64 bytes {
        OTHER_VPORT = "other_vport" @ 0x40 : 1;
        VPORT_NUMBER = "vport_number" @ 0x50 : 16;
        TABLE_TYPE = "table_type" @ 0x80 : 8;
        TABLE_ID = "table_id" @ 0xa8 : 24;
        FLOW_INDEX = "flow_index" @ 0x100 : 32;
    }
    /// `DELETE_FLOW_TABLE_ENTRY` output.
    delete_fte_out = "delete_fte_out", 16 bytes {}
    /// `SET_FLOW_TABLE_ROOT` input.
    set_flow_table_root_in = "set_flow_table_root_in", 64 bytes {
        OTHER_VPORT = "other_vport" @ 0x40 : 1;
        VPORT_NUMBER = "vport_number" @ 0x50 : 16;
        TABLE_TYPE = "table_type" @ 0x80 : 8;
        TABLE_OF_OTHER_VPORT = "table_of_other_vport" @ 0x8f : 1;
        TABLE_VPORT_NUMBER = "table_vport_number" @ 0x90 : 16;
        TABLE_ID = "table_id" @ 0xa8 : 24;
        UNDERLAY_QPN = "underlay_qpn" @ 0xc8 : 24;
        TABLE_ESWITCH_OWNER_VHCA_ID_VALID = "table_eswitch_owner_vhca_id_valid" @ 0xe0 : 1;
    }
    /// `SET_FLOW_TABLE_ROOT` output.
    set_flow_table_root_out = "set_flow_table_root_out", 16 bytes {}
    /// Receive memory pool context (a basic SRQ at ISSI 1: kernel `srq_cmd.c` `create_rmp_cmd`).
    rmpc = "rmpc", 240 bytes {
        STATE = "state" @ 0x8 : 4;
        BASIC_CYCLIC_RCV_WQE = "basic_cyclic_rcv_wqe" @ 0x20 : 1;
        WQ = "wq" @ 0x180 : 1536;
    }
    /// `CREATE_RMP` input (the PAS list is the context's `wq.pas`).
    create_rmp_in = "create_rmp_in", 272 bytes {
        CTX = "ctx" @ 0x100 : 1920;
        PAS = "ctx.wq.pas" @ 0x880 : 64;
    }
    /// `CREATE_RMP` output.
    create_rmp_out = "create_rmp_out", 16 bytes {
        RMPN = "rmpn" @ 0x48 : 24;
    }
    /// `MODIFY_RMP` input.
    modify_rmp_in = "modify_rmp_in", 272 bytes {
        RMP_STATE = "rmp_state" @ 0x40 : 4;
        RMPN = "rmpn" @ 0x48 : 24;
        BITMASK_LWM = "bitmask.lwm" @ 0xbf : 1;
        CTX = "ctx" @ 0x100 : 1920;
    }
    /// `MODIFY_RMP` output.
    modify_rmp_out = "modify_rmp_out", 16 bytes {}
    /// `DESTROY_RMP` input.
    destroy_rmp_in = "destroy_rmp_in", 16 bytes {
        RMPN = "rmpn" @ 0x48 : 24;
    }
    /// `DESTROY_RMP` output.
    destroy_rmp_out = "destroy_rmp_out", 16 bytes {}
    /// `QUERY_RMP` input.
    query_rmp_in = "query_rmp_in", 16 bytes {
        RMPN = "rmpn" @ 0x48 : 24;
    }
    /// `QUERY_RMP` output.
    query_rmp_out = "query_rmp_out", 272 bytes {
        RMP_CONTEXT = "rmp_context" @ 0x100 : 1920;
    }
    /// XRC SRQ context.
    xrc_srqc = "xrc_srqc", 64 bytes {
        STATE = "state" @ 0x0 : 4;
        LOG_XRC_SRQ_SIZE = "log_xrc_srq_size" @ 0x4 : 4;
        WQ_SIGNATURE = "wq_signature" @ 0x20 : 1;
        CONT_SRQ = "cont_srq" @ 0x21 : 1;
        RLKY = "rlky" @ 0x23 : 1;
        BASIC_CYCLIC_RCV_WQE = "basic_cyclic_rcv_wqe" @ 0x24 : 1;
        LOG_RQ_STRIDE = "log_rq_stride" @ 0x25 : 3;
        XRCD = "xrcd" @ 0x28 : 24;
        PAGE_OFFSET = "page_offset" @ 0x40 : 6;
        DBR_UMEM_VALID = "dbr_umem_valid" @ 0x47 : 1;
        CQN = "cqn" @ 0x48 : 24;
        USER_INDEX_EQUAL_XRC_SRQN = "user_index_equal_xrc_srqn" @ 0x80 : 1;
        LOG_PAGE_SIZE = "log_page_size" @ 0x82 : 6;
        USER_INDEX = "user_index" @ 0x88 : 24;
        PD = "pd" @ 0xc8 : 24;
        LWM = "lwm" @ 0xe0 : 16;
        WQE_CNT = "wqe_cnt" @ 0xf0 : 16;
        DB_RECORD_ADDR_H = "db_record_addr_h" @ 0x140 : 32;
        DB_RECORD_ADDR_L = "db_record_addr_l" @ 0x160 : 30;
    }
    /// `CREATE_XRC_SRQ` input.
    create_xrc_srq_in = "create_xrc_srq_in", 272 bytes {
        XRC_SRQ_CONTEXT_ENTRY = "xrc_srq_context_entry" @ 0x80 : 512;
        XRC_SRQ_UMEM_VALID = "xrc_srq_umem_valid" @ 0x2e0 : 1;
        PAS = "pas" @ 0x880 : 64;
    }
    /// `CREATE_XRC_SRQ` output.
    create_xrc_srq_out = "create_xrc_srq_out", 16 bytes {
        XRC_SRQN = "xrc_srqn" @ 0x48 : 24;
    }
    /// `DESTROY_XRC_SRQ` input.
    destroy_xrc_srq_in = "destroy_xrc_srq_in", 16 bytes {
        XRC_SRQN = "xrc_srqn" @ 0x48 : 24;
    }
    /// `DESTROY_XRC_SRQ` output.
    destroy_xrc_srq_out = "destroy_xrc_srq_out", 16 bytes {}
    /// `QUERY_XRC_SRQ` input.
    query_xrc_srq_in = "query_xrc_srq_in", 16 bytes {
        XRC_SRQN = "xrc_srqn" @ 0x48 : 24;
    }
    /// `QUERY_XRC_SRQ` output.
    query_xrc_srq_out = "query_xrc_srq_out", 272 bytes {
        XRC_SRQ_CONTEXT_ENTRY = "xrc_srq_context_entry" @ 0x80 : 512;
    }
    /// `ARM_XRC_SRQ` input.
    arm_xrc_srq_in = "arm_xrc_srq_in", 16 bytes {
        XRC_SRQN = "xrc_srqn" @ 0x48 : 24;
        LWM = "lwm" @ 0x70 : 16;
    }
    /// `ARM_XRC_SRQ` output.
    arm_xrc_srq_out = "arm_xrc_srq_out", 16 bytes {}
}
