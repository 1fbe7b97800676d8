//! The Ethernet-path commands on their bytes. Offsets written out by hand below are read off
//! `mlx5_ifc.h` (bit offsets of the `_bits` structs divided by 8), independently of the
//! generated table; `only_fields` proves every other bit (reserved ones included) is clear.

use super::*;
use crate::testing::fw::{example_caps as caps, only_fields};

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}
fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

const HEADER: [ifc::Field; 2] = [enable_hca_in::OPCODE, enable_hca_in::OP_MOD];

fn uar() -> Uar {
    Uar { index: 0x11, bar_offset: 0x11 * 4096 }
}

fn sq_params() -> SqParams {
    SqParams {
        pd: Pdn(0x33),
        cq: Cqn(0x4a),
        uar: uar(),
        tis: Tisn(0x5b),
        log_size: 6,
        buf: BusAddr(0x8000_0000),
        dbrec: BusAddr(0x9000_0040),
        min_inline: InlineMode::L2,
        wqe_inline_cap: CAP_INLINE_MODE_VPORT_CONTEXT,
    }
}

#[test]
fn transport_domain_and_tis() {
    let td = alloc_transport_domain_cmd();
    assert_eq!(td.len(), 16);
    assert_eq!(be16(&td, 0), 0x816);
    assert!(td[2..].iter().all(|&b| b == 0));

    let c = create_tis_cmd(Tdn(0xabcdef));
    assert_eq!(c.len(), 0xc0, "create_tis_in: 0x40 header bits, 0xc0 reserved, tisc 0x400");
    assert_eq!(be16(&c, 0), 0x912);
    // tisc at byte 0x20; transport_domain at tisc bit 0x128 (24 bits): bytes 0x25..0x28.
    assert_eq!(be32(&c, 0x20 + 0x24) & 0xff_ffff, 0xab_cdef);
    only_fields(&c, &[HEADER[0], tisc::TRANSPORT_DOMAIN.within(create_tis_in::CTX)]);
}

#[test]
fn create_sq_as_mlx5e_create_sq() {
    let (c, pas) = create_sq_cmd(&sq_params(), &caps()).unwrap();
    assert_eq!(be16(&c, 0), 0x904);
    // sqc at byte 0x20 of create_sq_in (0x40 + 0xc0 bits).
    let x = 0x20;
    assert_eq!(c[x] & 0x10, 0x10, "flush_in_error_en (bit 3)");
    assert_eq!(c[x] & 0x07, 1, "min_wqe_inline_mode L2 (bits 5..8)");
    assert_eq!(c[x + 1] >> 4, 0, "state RST");
    assert_eq!(be32(&c, x + 8) & 0xff_ffff, 0x4a, "cqn at bit 0x48");
    assert_eq!(be16(&c, x + 0x20), 1, "tis_lst_sz at bit 0x100");
    assert_eq!(be32(&c, x + 0x2c) & 0xff_ffff, 0x5b, "tis_num_0 at bit 0x168");
    // wq at sqc bit 0x180 = byte 0x30.
    let w = x + 0x30;
    assert_eq!(c[w] >> 4, 1, "wq_type cyclic");
    assert_eq!(be32(&c, w + 8) & 0xff_ffff, 0x33, "pd");
    assert_eq!(be32(&c, w + 12) & 0xff_ffff, 0x11, "uar_page");
    assert_eq!(be64(&c, w + 16), 0x9000_0040, "dbr_addr");
    assert_eq!(c[w + 0x21] & 0x0f, 6, "log_wq_stride: 64-byte blocks");
    assert_eq!(c[w + 0x22] & 0x1f, 0, "log_wq_pg_sz: 4 KiB");
    assert_eq!(c[w + 0x23] & 0x1f, 6, "log_wq_sz");
    // The page list follows the fixed part: wq.pas is the last member of every container.
    assert_eq!(wq::PAS.within(sqc::WQ).within(create_sq_in::CTX).byte(), c.len());
    match pas {
        Pas::Linear { base, step, count } => {
            assert_eq!((base, step, count), (0x8000_0000, 4096, 1))
        }
        other => panic!("{other:?}"),
    }
    let s = |f: ifc::Field| f.within(create_sq_in::CTX);
    let w = |f: ifc::Field| f.within(sqc::WQ).within(create_sq_in::CTX);
    only_fields(
        &c,
        &[
            HEADER[0],
            s(sqc::FLUSH_IN_ERROR_EN),
            s(sqc::MIN_WQE_INLINE_MODE),
            s(sqc::CQN),
            s(sqc::TIS_LST_SZ),
            s(sqc::TIS_NUM_0),
            w(wq::WQ_TYPE),
            w(wq::PD),
            w(wq::UAR_PAGE),
            w(wq::DBR_ADDR),
            w(wq::LOG_WQ_STRIDE),
            w(wq::LOG_WQ_SZ),
        ],
    );
}

#[test]
fn sq_inline_mode_only_where_the_vport_context_decides() {
    for cap in [CAP_INLINE_MODE_L2, CAP_INLINE_MODE_NOT_REQUIRED] {
        let p = SqParams { wqe_inline_cap: cap, min_inline: InlineMode::Ip, ..sq_params() };
        let (c, _) = create_sq_cmd(&p, &caps()).unwrap();
        assert_eq!(c[0x20] & 0x07, 0, "cap {cap}: min_wqe_inline_mode left 0");
    }
    assert_eq!(min_inline(CAP_INLINE_MODE_L2, 3), InlineMode::L2);
    assert_eq!(min_inline(CAP_INLINE_MODE_VPORT_CONTEXT, 2), InlineMode::Ip);
    assert_eq!(min_inline(CAP_INLINE_MODE_VPORT_CONTEXT, 0), InlineMode::None);
    assert_eq!(min_inline(CAP_INLINE_MODE_VPORT_CONTEXT, 7), InlineMode::TcpUdp);
    assert_eq!(min_inline(CAP_INLINE_MODE_NOT_REQUIRED, 1), InlineMode::None);
    assert_eq!(min_inline(3, 0), InlineMode::L2, "undefined cap: the kernel's default arm");
    // Real time only where nothing else is offered.
    let rt = HcaCaps { sq_ts_format: 1, ..caps() };
    let (c, _) = create_sq_cmd(&sq_params(), &rt).unwrap();
    assert_eq!((c[0x20 + 3] >> 4) & 3, 2, "ts_format REAL_TIME (bits 0x1a..0x1c)");
    let both = HcaCaps { sq_ts_format: 2, ..caps() };
    let (c, _) = create_sq_cmd(&sq_params(), &both).unwrap();
    assert_eq!((c[0x20 + 3] >> 4) & 3, 0, "FREE_RUNNING");
}

#[test]
fn ring_geometry_is_checked() {
    let bad = SqParams { buf: BusAddr(0x8000_0100), ..sq_params() };
    assert!(matches!(create_sq_cmd(&bad, &caps()), Err(Error::InvalidArgument(_))));
    let bad = SqParams { dbrec: BusAddr(0x9000_0044), ..sq_params() };
    assert!(matches!(create_sq_cmd(&bad, &caps()), Err(Error::InvalidArgument(_))));
    let big = SqParams { log_size: 17, ..sq_params() };
    assert!(matches!(create_sq_cmd(&big, &caps()), Err(Error::InvalidArgument(_))));
    let (_, pas) = create_sq_cmd(&SqParams { log_size: 8, ..sq_params() }, &caps()).unwrap();
    assert_eq!(pas.len(), 4, "256 blocks of 64 bytes: four pages");
}

#[test]
fn modify_sq_and_rq_reset_to_ready() {
    let c = modify_sq_rdy_cmd(Sqn(0x12_3456));
    assert_eq!(c.len(), 0x20 + sqc::SIZE);
    assert_eq!(be16(&c, 0), 0x905);
    assert_eq!(c[8] >> 4, 0, "sq_state (current) RST");
    assert_eq!(be32(&c, 8) & 0xff_ffff, 0x12_3456);
    // ctx at bit 0x100 (byte 0x20); state at ctx bit 8: the high nibble of byte 1.
    assert_eq!(c[0x21] >> 4, 1, "next state RDY");
    only_fields(&c, &[HEADER[0], modify_sq_in::SQN, sqc::STATE.within(modify_sq_in::CTX)]);

    let r = modify_rq_rdy_cmd(Rqn(0x77));
    assert_eq!(be16(&r, 0), 0x909);
    assert_eq!(be32(&r, 8) & 0xff_ffff, 0x77);
    assert_eq!(r[0x21] >> 4, 1);
    only_fields(&r, &[HEADER[0], modify_rq_in::RQN, rqc::STATE.within(modify_rq_in::CTX)]);
}

#[test]
fn create_rq_as_mlx5e_create_rq() {
    let p = RqParams {
        pd: Pdn(0x33),
        cq: Cqn(0x4b),
        log_size: 9,
        buf: BusAddr(0xa000_0000),
        dbrec: BusAddr(0x9000_0080),
    };
    let (c, pas) = create_rq_cmd(&p, &caps()).unwrap();
    assert_eq!(be16(&c, 0), 0x908);
    let x = 0x20;
    assert_eq!(c[x] & 0x10, 0x10, "vsd (bit 3): tags stay in the frame");
    assert_eq!(c[x] & 0x0f, 0, "mem_rq_type inline");
    assert_eq!(c[x + 1] >> 4, 0, "state RST");
    assert_eq!(c[x + 1] & 0x04, 0x04, "flush_in_error_en (bit 0xd)");
    assert_eq!(be32(&c, x + 8) & 0xff_ffff, 0x4b, "cqn");
    // wq at rqc bit 0x180.
    let w = x + 0x30;
    assert_eq!(c[w] >> 4, 1, "cyclic");
    assert_eq!(be32(&c, w + 8) & 0xff_ffff, 0x33);
    assert_eq!(be32(&c, w + 12) & 0xff_ffff, 0, "no UAR page: an RQ has no doorbell register");
    assert_eq!(be64(&c, w + 16), 0x9000_0080);
    assert_eq!(c[w + 0x21] & 0x0f, 4, "16-byte WQEs: one data segment");
    assert_eq!(c[w + 0x23] & 0x1f, 9);
    assert_eq!(wq::PAS.within(rqc::WQ).within(create_rq_in::CTX).byte(), c.len());
    assert_eq!(pas.len(), 2, "512 WQEs of 16 bytes");
    let r = |f: ifc::Field| f.within(create_rq_in::CTX);
    let w = |f: ifc::Field| f.within(rqc::WQ).within(create_rq_in::CTX);
    only_fields(
        &c,
        &[
            HEADER[0],
            r(rqc::VSD),
            r(rqc::FLUSH_IN_ERROR_EN),
            r(rqc::CQN),
            w(wq::WQ_TYPE),
            w(wq::PD),
            w(wq::DBR_ADDR),
            w(wq::LOG_WQ_STRIDE),
            w(wq::LOG_WQ_SZ),
        ],
    );
}

#[test]
fn create_tir_direct_to_the_rq() {
    let c = create_tir_cmd(Tdn(0x21), Rqn(0x4c));
    assert_eq!(be16(&c, 0), 0x900);
    // tirc at byte 0x20: disp_type at bit 0x20 (high nibble of byte 4) = DIRECT (0);
    // inline_rqn at bit 0xe8 (bytes 0x1d..0x20); transport_domain at bit 0x128.
    assert_eq!(c[0x24] >> 4, 0);
    assert_eq!(be32(&c, 0x20 + 0x1c) & 0xff_ffff, 0x4c);
    assert_eq!(be32(&c, 0x20 + 0x24) & 0xff_ffff, 0x21);
    assert_eq!(c[0x20 + 0x24] >> 4, 0, "rx_hash_fn none");
    let t = |f: ifc::Field| f.within(create_tir_in::CTX);
    only_fields(&c, &[HEADER[0], t(tirc::INLINE_RQN), t(tirc::TRANSPORT_DOMAIN)]);
}

#[test]
fn flow_table_group_entry_root() {
    let t = create_flow_table_cmd(0, 2);
    assert_eq!(be16(&t, 0), 0x930);
    assert_eq!(t[0x10], 0, "table_type NIC_RX (bit 0x80)");
    // flow_table_context at bit 0xc0 (byte 0x18): level byte 1, log_size byte 3.
    assert_eq!((t[0x19], t[0x1b]), (0, 2));
    only_fields(
        &t,
        &[HEADER[0], flow_table_context::LOG_SIZE.within(create_flow_table_in::FLOW_TABLE_CONTEXT)],
    );

    let g = create_flow_group_cmd(FlowTableId(0x61), 0, 3).unwrap();
    assert_eq!(be16(&g, 0), 0x933);
    assert_eq!(be32(&g, 0x14) & 0xff_ffff, 0x61, "table_id at bit 0xa0");
    assert_eq!(be32(&g, 0x1c), 0, "start_flow_index at bit 0xe0");
    assert_eq!(be32(&g, 0x24), 3, "end_flow_index at bit 0x120");
    assert_eq!(g[0x3f], 1, "match_criteria_enable: outer headers (bit 0x1f8)");
    // match_criteria at byte 0x40: outer_headers first; ethertype at bit 0x30 (bytes 6..8),
    // cvlan_tag bit 0x90 and svlan_tag bit 0x91 (byte 0x12, mask 0x80 and 0x40).
    assert_eq!(be16(&g, 0x40 + 6), 0xffff);
    assert_eq!(g[0x40 + 0x12], 0xc0);
    let mc = |f: ifc::Field| {
        f.within(fte_match_param::OUTER_HEADERS).within(create_flow_group_in::MATCH_CRITERIA)
    };
    only_fields(
        &g,
        &[
            HEADER[0],
            create_flow_group_in::TABLE_ID,
            create_flow_group_in::END_FLOW_INDEX,
            create_flow_group_in::MATCH_CRITERIA_ENABLE,
            mc(fte_match_set_lyr_2_4::ETHERTYPE),
            mc(fte_match_set_lyr_2_4::CVLAN_TAG),
            mc(fte_match_set_lyr_2_4::SVLAN_TAG),
        ],
    );
    assert!(create_flow_group_cmd(FlowTableId(1), 4, 3).is_err());

    let e = set_fte_cmd(FlowTableId(0x61), FlowGroupId(0x62), 0, 0x0806, Tirn(0x63));
    assert_eq!(e.len(), 0x40 + 0x300 + 8, "set_fte_in, then one 8-byte destination");
    assert_eq!(be16(&e, 0), 0x936);
    assert_eq!(be16(&e, 6), 0, "op_mod 0: a new entry");
    assert_eq!(be32(&e, 0x14) & 0xff_ffff, 0x61);
    assert_eq!(be32(&e, 0x20), 0, "flow_index at bit 0x100");
    // flow_context at bit 0x200 (byte 0x40): group_id at byte 4, action at bytes 0xe..0x10,
    // destination_list_size at 0x11..0x14; match_value at context bit 0x200 (byte 0x40).
    let fc = 0x40;
    assert_eq!(be32(&e, fc + 4), 0x62);
    assert_eq!(be16(&e, fc + 0xe), 0x4, "FWD_DEST");
    assert_eq!(be32(&e, fc + 0x10) & 0xff_ffff, 1);
    assert_eq!(be16(&e, fc + 0x40 + 6), 0x0806, "ethertype ARP");
    assert_eq!(e[fc + 0x40 + 0x12], 0, "untagged");
    // The destination list follows the context (bit 0x1800 of flow_context).
    let d = fc + 0x300;
    assert_eq!(e[d], 2, "destination_type TIR");
    assert_eq!(be32(&e, d) & 0xff_ffff, 0x63);
    let f = |x: ifc::Field| x.within(set_fte_in::FLOW_CONTEXT);
    let dst = |x: ifc::Field| x.within(flow_context::DESTINATION).within(set_fte_in::FLOW_CONTEXT);
    only_fields(
        &e,
        &[
            HEADER[0],
            set_fte_in::TABLE_ID,
            f(flow_context::GROUP_ID),
            f(flow_context::ACTION),
            f(flow_context::DESTINATION_LIST_SIZE),
            fte_match_set_lyr_2_4::ETHERTYPE
                .within(fte_match_param::OUTER_HEADERS)
                .within(f(flow_context::MATCH_VALUE)),
            dst(dest_format_struct::DESTINATION_TYPE),
            dst(dest_format_struct::DESTINATION_ID),
        ],
    );

    let r = set_root_cmd(Some(FlowTableId(0x61)));
    assert_eq!(be16(&r, 0), 0x92f);
    assert_eq!(be16(&r, 6), 0);
    assert_eq!(r[0x10], 0, "NIC_RX");
    assert_eq!(be32(&r, 0x14) & 0xff_ffff, 0x61);
    only_fields(&r, &[HEADER[0], set_flow_table_root_in::TABLE_ID]);
    let off = set_root_cmd(None);
    assert_eq!(be16(&off, 6), 1, "disconnect");
    assert!(off[8..].iter().all(|&b| b == 0), "no table named");
}

#[test]
fn destroy_commands_name_their_object() {
    /// The object, its opcode, the command length, and (byte, 24-bit value) words it carries.
    type Case = (EthObject, u16, usize, &'static [(usize, u32)]);
    let cases: [Case; 9] = [
        (EthObject::TransportDomain(Tdn(5)), 0x817, 16, &[(8, 5)]),
        (EthObject::Tis(Tisn(6)), 0x914, 16, &[(8, 6)]),
        (EthObject::Sq(Sqn(7)), 0x906, 16, &[(8, 7)]),
        (EthObject::Rq(Rqn(8)), 0x90a, 16, &[(8, 8)]),
        (EthObject::Tir(Tirn(9)), 0x902, 16, &[(8, 9)]),
        (EthObject::FlowTable(FlowTableId(10)), 0x931, 0x40, &[(0x10, 0), (0x14, 10)]),
        (
            EthObject::FlowGroup { table: FlowTableId(10), group: FlowGroupId(11) },
            0x934,
            0x40,
            &[(0x14, 10), (0x18, 11)],
        ),
        (
            EthObject::FlowEntry { table: FlowTableId(10), index: 3 },
            0x938,
            0x40,
            &[(0x14, 10), (0x20, 3)],
        ),
        (EthObject::Root(FlowTableId(10)), 0x92f, 0x40, &[(0x14, 0)]),
    ];
    for (o, op, len, words) in cases {
        let (c, n) = destroy_cmd(o);
        assert_eq!(be16(&c, 0), op, "{o:?}");
        assert_eq!(n, len, "{o:?}");
        for &(at, v) in words {
            assert_eq!(be32(&c, at) & 0xff_ffff, v, "{o:?} word at {at:#x}");
        }
        assert!(c[n..].iter().all(|&b| b == 0));
        assert!(!destroy_step(o).is_empty());
    }
}
