//! Command inputs as the firmware reads them: one type per `mlx5_ifc.h` structure the
//! firmware decodes, one member per field of that structure's table in [`super::ifc`].
//!
//! A command handler decodes its whole input first ([`decode`]) and checks the decoded
//! values, so it sees every field the command carries, those the driver never sets included
//! (`opt_param_mask`, `pm_state`, `pg_access`, …), with the width and meaning `mlx5_ifc.h`
//! gives them — not a driver's idea of which fields matter. Nested contexts (`qpc`, `ads`,
//! `cqc`, `mkc`, `eqc`, `nic_vport_context`) are types of their own, as in the header.
//!
//! Members are named after the field (`qpc.log_sq_size` is [`QpContext::log_sq_size`]); a
//! 1-bit field is a `bool`, a wider one the narrowest unsigned integer that holds it, a
//! byte array (`rgid_rip`, `roce_address`) its bytes, and a trailing list of 64-bit
//! addresses (`pas`, `klm_pas_mtt`) an [`Entries`] of everything the input holds from there.
//! The `decoded_types_cover_their_tables` test checks that each type reads every field of
//! its table.

use super::ifc::{self, Field};

/// A value read from one field of a command layout.
pub trait Decode: Sized {
    /// Read the value of `field` (already placed inside the command, [`Field::at`]) from
    /// `buf`, the command's input.
    fn decode(buf: &[u8], field: Field) -> Self;
}

/// Decode a whole command input.
pub fn decode<T: Decode>(inp: &[u8]) -> T {
    T::decode(inp, Field::new(0, 0))
}

macro_rules! unsigned {
    ($($t:ty),*) => {$(
        impl Decode for $t {
            fn decode(buf: &[u8], f: Field) -> Self {
                debug_assert!(f.width <= <$t>::BITS, "a {}-bit field in a {}", f.width, stringify!($t));
                f.get(buf) as $t
            }
        }
    )*};
}
unsigned!(u8, u16, u32, u64);

impl Decode for bool {
    fn decode(buf: &[u8], f: Field) -> Self {
        debug_assert_eq!(f.width, 1, "a bool is a 1-bit field");
        f.get(buf) == 1
    }
}

/// A byte-aligned byte array (`rgid_rip`, `roce_address`).
impl<const N: usize> Decode for [u8; N] {
    fn decode(buf: &[u8], f: Field) -> Self {
        debug_assert_eq!(f.bytes(), N);
        let mut a = [0u8; N];
        a.copy_from_slice(f.slice(buf));
        a
    }
}

/// An array of big-endian 64-bit words (`event_bitmask`).
impl<const N: usize> Decode for [u64; N] {
    fn decode(buf: &[u8], f: Field) -> Self {
        debug_assert_eq!(f.width as usize, 64 * N);
        core::array::from_fn(|k| Field::new(f.bit + 64 * k as u32, 64).get(buf))
    }
}

/// The 64-bit entries of a flexible array at the end of a command input (`pas`: page
/// addresses; `klm_pas_mtt`: MTT entries, whose low bits are flags), as many as the input
/// holds. A handler takes the number it needs and refuses a shorter list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Entries(pub Vec<u64>);

impl Decode for Entries {
    fn decode(buf: &[u8], f: Field) -> Self {
        let n = buf.len().saturating_sub(f.byte()) / 8;
        Entries((0..n as u32).map(|k| Field::new(f.bit + 64 * k, 64).get(buf)).collect())
    }
}

impl Entries {
    /// The first `n` entries, or `None` if the input holds fewer.
    pub fn first(&self, n: usize) -> Option<&[u64]> {
        self.0.get(..n)
    }
}

/// Declares one type per table: `Name = table { member: Type = FIELD, ... }`.
macro_rules! decoded {
    ($(
        $(#[$m:meta])*
        $name:ident = $table:ident {
            $($member:ident: $ty:ty = $field:ident,)*
        }
    )*) => {
        $(
            $(#[$m])*
            #[doc = concat!("\n\nRead from [`ifc::", stringify!($table), "`].")]
            #[derive(Clone, Debug, PartialEq, Eq)]
            pub struct $name {
                $(
                    #[doc = concat!("[`", stringify!($table), "::", stringify!($field),
                        "`](ifc::", stringify!($table), "::", stringify!($field), ").")]
                    pub $member: $ty,
                )*
            }

            impl Decode for $name {
                fn decode(buf: &[u8], at: Field) -> Self {
                    $name {
                        $($member: <$ty as Decode>::decode(buf, ifc::$table::$field.at(at)),)*
                    }
                }
            }
        )*

        /// (table, the fields its type reads) of every decoded type, for the coverage test.
        #[cfg(test)]
        pub(crate) const COVERAGE: &[(&[(&str, Field)], &[Field])] =
            &[$((ifc::$table::HEADER.2, &[$(ifc::$table::$field),*])),*];
    };
}

decoded! {
    /// `DEALLOC_UAR` input.
    DeallocUar = dealloc_uar_in {
        uar: u32 = UAR,
    }
    /// `DEALLOC_PD` input.
    DeallocPd = dealloc_pd_in {
        pd: u32 = PD,
    }
    /// `CREATE_EQ` input.
    CreateEq = create_eq_in {
        eq_context: EqContext = EQ_CONTEXT,
        event_bitmask: [u64; 4] = EVENT_BITMASK,
        pas: Entries = PAS,
    }
    /// Event queue context.
    EqContext = eqc {
        status: u8 = STATUS,
        ec: bool = EC,
        oi: bool = OI,
        st: u8 = ST,
        page_offset: u8 = PAGE_OFFSET,
        log_eq_size: u8 = LOG_EQ_SIZE,
        uar_page: u32 = UAR_PAGE,
        intr: u16 = INTR,
        log_page_size: u8 = LOG_PAGE_SIZE,
        consumer_counter: u32 = CONSUMER_COUNTER,
        producer_counter: u32 = PRODUCER_COUNTER,
    }
    /// `DESTROY_EQ` input.
    DestroyEq = destroy_eq_in {
        eq_number: u8 = EQ_NUMBER,
    }
    /// `CREATE_MKEY` input.
    CreateMkey = create_mkey_in {
        pg_access: bool = PG_ACCESS,
        mkey_context: MkeyContext = MKEY_CONTEXT,
        translations_octword_actual_size: u32 = TRANSLATIONS_OCTWORD_ACTUAL_SIZE,
        klm_pas_mtt: Entries = KLM_PAS_MTT,
    }
    /// Memory key context.
    MkeyContext = mkc {
        free: bool = FREE,
        access_mode_4_2: u8 = ACCESS_MODE_4_2,
        umr_en: bool = UMR_EN,
        a: bool = A,
        rw: bool = RW,
        rr: bool = RR,
        lw: bool = LW,
        lr: bool = LR,
        access_mode_1_0: u8 = ACCESS_MODE_1_0,
        qpn: u32 = QPN,
        mkey_7_0: u8 = MKEY_7_0,
        length64: bool = LENGTH64,
        pd: u32 = PD,
        start_addr: u64 = START_ADDR,
        len: u64 = LEN,
        translations_octword_size: u32 = TRANSLATIONS_OCTWORD_SIZE,
        log_page_size: u8 = LOG_PAGE_SIZE,
    }
    /// `DESTROY_MKEY` input.
    DestroyMkey = destroy_mkey_in {
        mkey_index: u32 = MKEY_INDEX,
    }
    /// `CREATE_CQ` input.
    CreateCq = create_cq_in {
        cq_context: CqContext = CQ_CONTEXT,
        cq_umem_valid: bool = CQ_UMEM_VALID,
        pas: Entries = PAS,
    }
    /// Completion queue context.
    CqContext = cqc {
        status: u8 = STATUS,
        dbr_umem_valid: bool = DBR_UMEM_VALID,
        cqe_sz: u8 = CQE_SZ,
        cc: bool = CC,
        oi: bool = OI,
        cqe_comp_en: bool = CQE_COMP_EN,
        page_offset: u8 = PAGE_OFFSET,
        log_cq_size: u8 = LOG_CQ_SIZE,
        uar_page: u32 = UAR_PAGE,
        c_eqn: u32 = C_EQN,
        log_page_size: u8 = LOG_PAGE_SIZE,
        dbr_addr: u64 = DBR_ADDR,
    }
    /// `DESTROY_CQ` input.
    DestroyCq = destroy_cq_in {
        cqn: u32 = CQN,
    }
    /// `CREATE_QP` input.
    CreateQp = create_qp_in {
        input_qpn: u32 = INPUT_QPN,
        opt_param_mask: u32 = OPT_PARAM_MASK,
        qpc: QpContext = QPC,
        wq_umem_valid: bool = WQ_UMEM_VALID,
        pas: Entries = PAS,
    }
    /// Queue pair context.
    QpContext = qpc {
        state: u8 = STATE,
        st: u8 = ST,
        pm_state: u8 = PM_STATE,
        pd: u32 = PD,
        mtu: u8 = MTU,
        log_msg_max: u8 = LOG_MSG_MAX,
        log_rq_size: u8 = LOG_RQ_SIZE,
        log_rq_stride: u8 = LOG_RQ_STRIDE,
        no_sq: bool = NO_SQ,
        log_sq_size: u8 = LOG_SQ_SIZE,
        uar_page: u32 = UAR_PAGE,
        log_page_size: u8 = LOG_PAGE_SIZE,
        remote_qpn: u32 = REMOTE_QPN,
        primary_address_path: AddressPath = PRIMARY_ADDRESS_PATH,
        retry_count: u8 = RETRY_COUNT,
        rnr_retry: u8 = RNR_RETRY,
        next_send_psn: u32 = NEXT_SEND_PSN,
        cqn_snd: u32 = CQN_SND,
        atomic_mode: u8 = ATOMIC_MODE,
        rre: bool = RRE,
        rwe: bool = RWE,
        rae: bool = RAE,
        page_offset: u8 = PAGE_OFFSET,
        min_rnr_nak: u8 = MIN_RNR_NAK,
        next_rcv_psn: u32 = NEXT_RCV_PSN,
        cqn_rcv: u32 = CQN_RCV,
        dbr_addr: u64 = DBR_ADDR,
        q_key: u32 = Q_KEY,
        rq_type: u8 = RQ_TYPE,
    }
    /// Address path of a QP.
    AddressPath = ads {
        fl: bool = FL,
        pkey_index: u16 = PKEY_INDEX,
        grh: bool = GRH,
        ack_timeout: u8 = ACK_TIMEOUT,
        src_addr_index: u8 = SRC_ADDR_INDEX,
        hop_limit: u8 = HOP_LIMIT,
        tclass: u8 = TCLASS,
        flow_label: u32 = FLOW_LABEL,
        rgid_rip: [u8; 16] = RGID_RIP,
        udp_sport: u16 = UDP_SPORT,
        vhca_port_num: u8 = VHCA_PORT_NUM,
        rmac_47_32: u16 = RMAC_47_32,
        rmac_31_0: u32 = RMAC_31_0,
    }
    /// `DESTROY_QP` input.
    DestroyQp = destroy_qp_in {
        qpn: u32 = QPN,
    }
    /// `RST2INIT_QP` input.
    Rst2InitQp = rst2init_qp_in {
        qpn: u32 = QPN,
        opt_param_mask: u32 = OPT_PARAM_MASK,
        qpc: QpContext = QPC,
    }
    /// `INIT2RTR_QP` input.
    Init2RtrQp = init2rtr_qp_in {
        qpn: u32 = QPN,
        opt_param_mask: u32 = OPT_PARAM_MASK,
        qpc: QpContext = QPC,
    }
    /// `RTR2RTS_QP` input.
    Rtr2RtsQp = rtr2rts_qp_in {
        qpn: u32 = QPN,
        opt_param_mask: u32 = OPT_PARAM_MASK,
        qpc: QpContext = QPC,
    }
    /// `2ERR_QP` input.
    Qp2Err = qp_2err_in {
        qpn: u32 = QPN,
    }
    /// `2RST_QP` input.
    Qp2Rst = qp_2rst_in {
        qpn: u32 = QPN,
    }
    /// `QUERY_QP` input.
    QueryQp = query_qp_in {
        qpn: u32 = QPN,
    }
    /// `MODIFY_NIC_VPORT_CONTEXT` input.
    ModifyNicVportContext = modify_nic_vport_context_in {
        other_vport: bool = OTHER_VPORT,
        vport_number: u16 = VPORT_NUMBER,
        field_select_roce_en: bool = FIELD_SELECT_ROCE_EN,
        field_select_mtu: bool = FIELD_SELECT_MTU,
        nic_vport_context: NicVportContext = NIC_VPORT_CONTEXT,
    }
    /// NIC vport context.
    NicVportContext = nic_vport_context {
        roce_en: bool = ROCE_EN,
        mtu: u16 = MTU,
        mac_47_32: u16 = MAC_47_32,
        mac_31_0: u32 = MAC_31_0,
    }
    /// `QUERY_NIC_VPORT_CONTEXT` input.
    QueryNicVportContext = query_nic_vport_context_in {
        other_vport: bool = OTHER_VPORT,
        vport_number: u16 = VPORT_NUMBER,
    }
    /// `QUERY_VPORT_STATE` input.
    QueryVportState = query_vport_state_in {
        other_vport: bool = OTHER_VPORT,
        vport_number: u16 = VPORT_NUMBER,
    }
    /// `QUERY_ROCE_ADDRESS` input.
    QueryRoceAddress = query_roce_address_in {
        roce_address_index: u16 = ROCE_ADDRESS_INDEX,
        vhca_port_num: u8 = VHCA_PORT_NUM,
    }
    /// `DEALLOC_TRANSPORT_DOMAIN` input.
    DeallocTransportDomain = dealloc_transport_domain_in {
        transport_domain: u32 = TRANSPORT_DOMAIN,
    }
    /// `CREATE_TIS` input.
    CreateTis = create_tis_in {
        ctx: TisContext = CTX,
    }
    /// Transport interface send context.
    TisContext = tisc {
        strict_lag_tx_port_affinity: bool = STRICT_LAG_TX_PORT_AFFINITY,
        tls_en: bool = TLS_EN,
        lag_tx_port_affinity: u8 = LAG_TX_PORT_AFFINITY,
        prio: u8 = PRIO,
        transport_domain: u32 = TRANSPORT_DOMAIN,
        underlay_qpn: u32 = UNDERLAY_QPN,
        pd: u32 = PD,
    }
    /// `DESTROY_TIS` input.
    DestroyTis = destroy_tis_in {
        tisn: u32 = TISN,
    }
    /// `CREATE_SQ` input.
    CreateSq = create_sq_in {
        ctx: SqContext = CTX,
        pas: Entries = PAS,
    }
    /// Send queue context.
    SqContext = sqc {
        rlky: bool = RLKY,
        cd_master: bool = CD_MASTER,
        fre: bool = FRE,
        flush_in_error_en: bool = FLUSH_IN_ERROR_EN,
        allow_multi_pkt_send_wqe: bool = ALLOW_MULTI_PKT_SEND_WQE,
        min_wqe_inline_mode: u8 = MIN_WQE_INLINE_MODE,
        state: u8 = STATE,
        reg_umr: bool = REG_UMR,
        allow_swp: bool = ALLOW_SWP,
        hairpin: bool = HAIRPIN,
        ts_format: u8 = TS_FORMAT,
        user_index: u32 = USER_INDEX,
        cqn: u32 = CQN,
        packet_pacing_rate_limit_index: u16 = PACKET_PACING_RATE_LIMIT_INDEX,
        tis_lst_sz: u16 = TIS_LST_SZ,
        tis_num_0: u32 = TIS_NUM_0,
        wq: Wq = WQ,
    }
    /// Work queue of an SQ or RQ.
    Wq = wq {
        wq_type: u8 = WQ_TYPE,
        wq_signature: bool = WQ_SIGNATURE,
        end_padding_mode: u8 = END_PADDING_MODE,
        cd_slave: bool = CD_SLAVE,
        page_offset: u8 = PAGE_OFFSET,
        lwm: u16 = LWM,
        pd: u32 = PD,
        uar_page: u32 = UAR_PAGE,
        dbr_addr: u64 = DBR_ADDR,
        hw_counter: u32 = HW_COUNTER,
        sw_counter: u32 = SW_COUNTER,
        log_wq_stride: u8 = LOG_WQ_STRIDE,
        log_wq_pg_sz: u8 = LOG_WQ_PG_SZ,
        log_wq_sz: u8 = LOG_WQ_SZ,
        dbr_umem_valid: bool = DBR_UMEM_VALID,
        wq_umem_valid: bool = WQ_UMEM_VALID,
    }
    /// `MODIFY_SQ` input.
    ModifySq = modify_sq_in {
        sq_state: u8 = SQ_STATE,
        sqn: u32 = SQN,
        modify_bitmask: u64 = MODIFY_BITMASK,
        ctx: SqContext = CTX,
    }
    /// `DESTROY_SQ` input.
    DestroySq = destroy_sq_in {
        sqn: u32 = SQN,
    }
    /// `CREATE_RQ` input.
    CreateRq = create_rq_in {
        ctx: RqContext = CTX,
        pas: Entries = PAS,
    }
    /// Receive queue context.
    RqContext = rqc {
        rlky: bool = RLKY,
        delay_drop_en: bool = DELAY_DROP_EN,
        scatter_fcs: bool = SCATTER_FCS,
        vsd: bool = VSD,
        mem_rq_type: u8 = MEM_RQ_TYPE,
        state: u8 = STATE,
        flush_in_error_en: bool = FLUSH_IN_ERROR_EN,
        hairpin: bool = HAIRPIN,
        ts_format: u8 = TS_FORMAT,
        user_index: u32 = USER_INDEX,
        cqn: u32 = CQN,
        counter_set_id: u8 = COUNTER_SET_ID,
        rmpn: u32 = RMPN,
        wq: Wq = WQ,
    }
    /// `MODIFY_RQ` input.
    ModifyRq = modify_rq_in {
        rq_state: u8 = RQ_STATE,
        rqn: u32 = RQN,
        modify_bitmask: u64 = MODIFY_BITMASK,
        ctx: RqContext = CTX,
    }
    /// `DESTROY_RQ` input.
    DestroyRq = destroy_rq_in {
        rqn: u32 = RQN,
    }
    /// `CREATE_TIR` input.
    CreateTir = create_tir_in {
        ctx: TirContext = CTX,
    }
    /// Transport interface receive context.
    TirContext = tirc {
        disp_type: u8 = DISP_TYPE,
        tls_en: bool = TLS_EN,
        lro_timeout_period_usecs: u16 = LRO_TIMEOUT_PERIOD_USECS,
        packet_merge_mask: u8 = PACKET_MERGE_MASK,
        lro_max_ip_payload_size: u8 = LRO_MAX_IP_PAYLOAD_SIZE,
        inline_rqn: u32 = INLINE_RQN,
        rx_hash_symmetric: bool = RX_HASH_SYMMETRIC,
        tunneled_offload_en: bool = TUNNELED_OFFLOAD_EN,
        indirect_table: u32 = INDIRECT_TABLE,
        rx_hash_fn: u8 = RX_HASH_FN,
        self_lb_block: u8 = SELF_LB_BLOCK,
        transport_domain: u32 = TRANSPORT_DOMAIN,
    }
    /// `DESTROY_TIR` input.
    DestroyTir = destroy_tir_in {
        tirn: u32 = TIRN,
    }
    /// `CREATE_FLOW_TABLE` input.
    CreateFlowTable = create_flow_table_in {
        other_vport: bool = OTHER_VPORT,
        vport_number: u16 = VPORT_NUMBER,
        table_type: u8 = TABLE_TYPE,
        flow_table_context: FlowTableContext = FLOW_TABLE_CONTEXT,
    }
    /// Flow table context.
    FlowTableContext = flow_table_context {
        reformat_en: bool = REFORMAT_EN,
        decap_en: bool = DECAP_EN,
        sw_owner: bool = SW_OWNER,
        termination_table: bool = TERMINATION_TABLE,
        table_miss_action: u8 = TABLE_MISS_ACTION,
        level: u8 = LEVEL,
        log_size: u8 = LOG_SIZE,
        table_miss_id: u32 = TABLE_MISS_ID,
        lag_master_next_table_id: u32 = LAG_MASTER_NEXT_TABLE_ID,
    }
    /// `DESTROY_FLOW_TABLE` input.
    DestroyFlowTable = destroy_flow_table_in {
        other_vport: bool = OTHER_VPORT,
        vport_number: u16 = VPORT_NUMBER,
        table_type: u8 = TABLE_TYPE,
        table_id: u32 = TABLE_ID,
    }
    /// `CREATE_FLOW_GROUP` input. The criteria stay bytes: the model masks the frame's
    /// headers with them byte for byte.
    CreateFlowGroup = create_flow_group_in {
        other_vport: bool = OTHER_VPORT,
        vport_number: u16 = VPORT_NUMBER,
        table_type: u8 = TABLE_TYPE,
        group_type: u8 = GROUP_TYPE,
        table_id: u32 = TABLE_ID,
        source_eswitch_owner_vhca_id_valid: bool = SOURCE_ESWITCH_OWNER_VHCA_ID_VALID,
        start_flow_index: u32 = START_FLOW_INDEX,
        end_flow_index: u32 = END_FLOW_INDEX,
        match_definer_id: u16 = MATCH_DEFINER_ID,
        match_criteria_enable: u8 = MATCH_CRITERIA_ENABLE,
        match_criteria: [u8; ifc::fte_match_param::SIZE] = MATCH_CRITERIA,
    }
    /// `DESTROY_FLOW_GROUP` input.
    DestroyFlowGroup = destroy_flow_group_in {
        other_vport: bool = OTHER_VPORT,
        vport_number: u16 = VPORT_NUMBER,
        table_type: u8 = TABLE_TYPE,
        table_id: u32 = TABLE_ID,
        group_id: u32 = GROUP_ID,
    }
    /// `SET_FLOW_TABLE_ENTRY` input. The destination list is read as 64-bit
    /// `dest_format_struct` entries, the stride `fs_cmd.c` uses without
    /// `extended_destination`.
    SetFte = set_fte_in {
        other_vport: bool = OTHER_VPORT,
        vport_number: u16 = VPORT_NUMBER,
        table_type: u8 = TABLE_TYPE,
        table_id: u32 = TABLE_ID,
        ignore_flow_level: bool = IGNORE_FLOW_LEVEL,
        modify_enable_mask: u8 = MODIFY_ENABLE_MASK,
        flow_index: u32 = FLOW_INDEX,
        flow_context: FlowContext = FLOW_CONTEXT,
        destination: Entries = DESTINATION,
    }
    /// A flow table entry's context.
    FlowContext = flow_context {
        push_vlan: u32 = PUSH_VLAN,
        group_id: u32 = GROUP_ID,
        flow_tag: u32 = FLOW_TAG,
        action: u16 = ACTION,
        extended_destination: bool = EXTENDED_DESTINATION,
        destination_list_size: u32 = DESTINATION_LIST_SIZE,
        flow_counter_list_size: u32 = FLOW_COUNTER_LIST_SIZE,
        packet_reformat_id: u32 = PACKET_REFORMAT_ID,
        modify_header_id: u32 = MODIFY_HEADER_ID,
        match_value: [u8; ifc::fte_match_param::SIZE] = MATCH_VALUE,
    }
    /// `DELETE_FLOW_TABLE_ENTRY` input.
    DeleteFte = delete_fte_in {
        other_vport: bool = OTHER_VPORT,
        vport_number: u16 = VPORT_NUMBER,
        table_type: u8 = TABLE_TYPE,
        table_id: u32 = TABLE_ID,
        flow_index: u32 = FLOW_INDEX,
    }
    /// `SET_FLOW_TABLE_ROOT` input.
    SetFlowTableRoot = set_flow_table_root_in {
        other_vport: bool = OTHER_VPORT,
        vport_number: u16 = VPORT_NUMBER,
        table_type: u8 = TABLE_TYPE,
        table_of_other_vport: bool = TABLE_OF_OTHER_VPORT,
        table_vport_number: u16 = TABLE_VPORT_NUMBER,
        table_id: u32 = TABLE_ID,
        underlay_qpn: u32 = UNDERLAY_QPN,
        table_eswitch_owner_vhca_id_valid: bool = TABLE_ESWITCH_OWNER_VHCA_ID_VALID,
    }
    /// `SET_ROCE_ADDRESS` input. The entry stays bytes: the model compares it whole with its
    /// own, reserved bits included.
    SetRoceAddress = set_roce_address_in {
        roce_address_index: u16 = ROCE_ADDRESS_INDEX,
        vhca_port_num: u8 = VHCA_PORT_NUM,
        roce_address: [u8; ifc::roce_addr_layout::SIZE] = ROCE_ADDRESS,
    }
}

impl MkeyContext {
    /// `access_mode_4_2 << 2 | access_mode_1_0`: the access mode (`MLX5_MKC_ACCESS_MODE_*`).
    pub fn access_mode(&self) -> u8 {
        self.access_mode_4_2 << 2 | self.access_mode_1_0
    }
}

impl AddressPath {
    /// The remote MAC, `rmac_47_32` then `rmac_31_0`, in wire order.
    pub fn rmac(&self) -> [u8; 6] {
        let mac = u64::from(self.rmac_47_32) << 32 | u64::from(self.rmac_31_0);
        let mut m = [0u8; 6];
        m.copy_from_slice(&mac.to_be_bytes()[2..]);
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each type reads every field of its table, and nothing else.
    #[test]
    fn decoded_types_cover_their_tables() {
        for (table, read) in COVERAGE {
            let mut want: Vec<Field> = table.iter().map(|(_, f)| *f).collect();
            let mut got = read.to_vec();
            want.sort_by_key(|f| (f.bit, f.width));
            got.sort_by_key(|f| (f.bit, f.width));
            assert_eq!(got, want, "{table:?}");
        }
    }

    /// A `CREATE_QP` input with every byte of the address path and the list set: the nested
    /// context is read in place and the list runs to the end of the input.
    #[test]
    fn nested_contexts_and_lists_are_read_in_place() {
        let mut inp = vec![0u8; ifc::create_qp_in::SIZE + 3 * 8 + 4];
        let path = ifc::qpc::PRIMARY_ADDRESS_PATH.at(ifc::create_qp_in::QPC);
        let gid: [u8; 16] = core::array::from_fn(|k| 0xa0 + k as u8);
        ifc::ads::RGID_RIP.at(path).slice_mut(&mut inp).copy_from_slice(&gid);
        ifc::ads::RMAC_47_32.at(path).set(&mut inp, 0x0211);
        ifc::ads::RMAC_31_0.at(path).set(&mut inp, 0x2233_4455);
        ifc::ads::FL.at(path).set(&mut inp, 1);
        ifc::qpc::LOG_SQ_SIZE.at(ifc::create_qp_in::QPC).set(&mut inp, 0xf);
        ifc::qpc::DBR_ADDR.at(ifc::create_qp_in::QPC).set(&mut inp, 0x1234_5678_9abc_def0);
        for k in 0..3 {
            ifc::create_qp_in::PAS.index(k).set(&mut inp, 0x1000 * (u64::from(k) + 1));
        }
        let d: CreateQp = decode(&inp);
        let p = &d.qpc.primary_address_path;
        assert_eq!((p.rgid_rip, p.rmac(), p.fl), (gid, [0x02, 0x11, 0x22, 0x33, 0x44, 0x55], true));
        assert_eq!((d.qpc.log_sq_size, d.qpc.dbr_addr), (0xf, 0x1234_5678_9abc_def0));
        assert_eq!(d.pas, Entries(vec![0x1000, 0x2000, 0x3000]), "the 4 bytes past are no entry");
        assert_eq!((d.pas.first(3).map(<[u64]>::len), d.pas.first(4)), (Some(3), None));
    }
}
