//! Generator of `drivers/mlx5/src/layout/ifc/generated.rs` from the kernel's
//! `include/linux/mlx5/mlx5_ifc.h` (std only; shared by `cargo xtask ifc` and the header test).
//!
//! `mlx5_ifc.h` describes every firmware command and context as a C struct whose members are
//! bit arrays: `u8 name[0x18];` is a 24-bit field, `u8 name[4][0x40];` four 64-bit fields,
//! `u8 pas[][0x40];` a flexible array, `struct mlx5_ifc_X_bits name;` a nested layout,
//! `union { ... } name;` an inline union. Fields are laid out in declaration order from the most
//! significant bit of byte 0 (the PRM's big-endian bit numbering), so a field's offset is the sum
//! of the widths before it. This module parses those declarations, computes offsets, and emits
//! the constants the driver uses (the [`SPEC`] list), each as `Field::new(bit, width)`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Which structs (or unions) to emit, and which of their members (`None`: every named,
/// non-reserved member).
pub const SPEC: &[(&str, Option<&[&str]>)] = &[
    ("enable_hca_in", None),
    ("disable_hca_in", None),
    ("query_issi_in", None),
    ("query_issi_out", None),
    ("set_issi_in", None),
    ("query_pages_in", None),
    ("query_pages_out", None),
    ("manage_pages_in", None),
    ("manage_pages_out", None),
    ("access_register_in", None),
    ("register_host_endianness", None),
    ("query_hca_cap_in", None),
    ("query_hca_cap_out", None),
    ("set_hca_cap_in", None),
    (
        "cmd_hca_cap",
        Some(&[
            "log_max_qp_sz",
            "log_max_qp",
            "release_all_pages",
            "cache_line_128byte",
            "cqe_version",
            "num_vhca_ports",
            "sq_ts_format",
            "rq_ts_format",
            "fl_rc_qp_when_roce_disabled",
            "log_max_cq_sz",
            "log_max_cq",
            "log_max_eq_sz",
            "log_max_mkey",
            "log_max_eq",
            "log_max_ra_req_qp",
            "log_max_ra_res_qp",
            "pkey_table_size",
            "port_type",
            "num_ports",
            "log_max_msg",
            "cmdif_checksum",
            "roce",
            "uar_4k",
            "log_pg_sz",
            "bf",
            "log_bf_reg_size",
            "max_wqe_sz_sq",
            "log_max_pd",
            "log_uar_page_sz",
        ]),
    ),
    (
        "roce_cap",
        Some(&[
            "sw_r_roce_src_udp_port",
            "fl_rc_qp_when_roce_enabled",
            "fl_rc_qp_when_roce_disabled",
            "l3_type",
            "roce_address_table_size",
            "qp_ts_format",
            "roce_version",
            "r_roce_min_src_udp_port",
        ]),
    ),
    ("init_hca_in", Some(&["opcode", "op_mod"])),
    ("teardown_hca_in", None),
    ("teardown_hca_out", Some(&["status", "syndrome", "state"])),
    ("alloc_uar_in", None),
    ("alloc_uar_out", None),
    ("dealloc_uar_in", None),
    ("eqc", Some(&["status", "oi", "st", "log_eq_size", "uar_page", "intr", "log_page_size"])),
    ("create_eq_in", None),
    ("create_eq_out", None),
    ("destroy_eq_in", None),
    ("alloc_pd_in", None),
    ("alloc_pd_out", None),
    ("dealloc_pd_in", None),
    (
        "mkc",
        Some(&[
            "free",
            "umr_en",
            "a",
            "rw",
            "rr",
            "lw",
            "lr",
            "access_mode_1_0",
            "qpn",
            "mkey_7_0",
            "length64",
            "pd",
            "start_addr",
            "len",
            "translations_octword_size",
            "log_page_size",
        ]),
    ),
    ("create_mkey_in", None),
    ("create_mkey_out", None),
    ("destroy_mkey_in", None),
    (
        "cqc",
        Some(&[
            "status",
            "cqe_sz",
            "oi",
            "page_offset",
            "log_cq_size",
            "uar_page",
            "c_eqn_or_apu_element",
            "log_page_size",
            "dbr_addr",
        ]),
    ),
    ("create_cq_in", None),
    ("create_cq_out", None),
    ("destroy_cq_in", None),
    (
        "ads",
        Some(&[
            "fl",
            "pkey_index",
            "grh",
            "ack_timeout",
            "src_addr_index",
            "hop_limit",
            "tclass",
            "flow_label",
            "rgid_rip",
            "dscp",
            "udp_sport",
            "dei_cfi",
            "sl",
            "eth_prio",
            "vhca_port_num",
            "rmac_47_32",
            "rmac_31_0",
        ]),
    ),
    (
        "qpc",
        Some(&[
            "state",
            "lag_tx_port_affinity",
            "rlky",
            "counter_set_id",
            "user_index",
            "fre",
            "xrcd",
            "srqn_rmpn_xrqn",
            "deth_sqpn",
            "cs_req",
            "wq_signature",
            "st",
            "pm_state",
            "pd",
            "mtu",
            "log_msg_max",
            "log_rq_size",
            "log_rq_stride",
            "no_sq",
            "log_sq_size",
            "ts_format",
            "uar_page",
            "log_page_size",
            "remote_qpn",
            "primary_address_path",
            "log_ack_req_freq",
            "log_sra_max",
            "retry_count",
            "rnr_retry",
            "next_send_psn",
            "cqn_snd",
            "log_rra_max",
            "rre",
            "rwe",
            "rae",
            "page_offset",
            "min_rnr_nak",
            "next_rcv_psn",
            "cqn_rcv",
            "dbr_addr",
            "rq_type",
            "q_key",
            "atomic_mode",
        ]),
    ),
    ("create_qp_in", None),
    ("create_qp_out", None),
    ("destroy_qp_in", None),
    ("rst2init_qp_in", None),
    ("init2rtr_qp_in", None),
    ("rtr2rts_qp_in", None),
    ("qp_2err_in", None),
    ("qp_2rst_in", None),
    ("modify_nic_vport_field_select", Some(&["roce_en"])),
    ("nic_vport_context", Some(&["min_wqe_inline_mode", "roce_en", "mtu", "permanent_address"])),
    ("mac_address_layout", None),
    ("modify_nic_vport_context_in", None),
    ("query_nic_vport_context_in", None),
    ("query_nic_vport_context_out", None),
    ("roce_addr_layout", None),
    ("set_roce_address_in", None),
    ("query_roce_address_in", None),
    ("query_roce_address_out", None),
    ("access_register_out", None),
    ("pmtu_reg", None),
    // The Ethernet (raw packet) path: transport domain, TIS, SQ, RQ, TIR, NIC RX steering.
    ("per_protocol_networking_offload_caps", Some(&["wqe_inline_mode"])),
    ("alloc_transport_domain_in", None),
    ("alloc_transport_domain_out", None),
    ("dealloc_transport_domain_in", None),
    ("tisc", Some(&["prio", "transport_domain", "pd"])),
    ("create_tis_in", None),
    ("create_tis_out", None),
    ("destroy_tis_in", None),
    (
        "wq",
        Some(&[
            "wq_type",
            "end_padding_mode",
            "pd",
            "uar_page",
            "dbr_addr",
            "log_wq_stride",
            "log_wq_pg_sz",
            "log_wq_sz",
            "pas",
        ]),
    ),
    (
        "sqc",
        Some(&[
            "rlky",
            "fre",
            "flush_in_error_en",
            "min_wqe_inline_mode",
            "state",
            "ts_format",
            "user_index",
            "cqn",
            "tis_lst_sz",
            "tis_num_0",
            "wq",
        ]),
    ),
    ("create_sq_in", None),
    ("create_sq_out", None),
    ("modify_sq_in", None),
    ("destroy_sq_in", None),
    (
        "rqc",
        Some(&[
            "rlky",
            "vsd",
            "mem_rq_type",
            "state",
            "flush_in_error_en",
            "ts_format",
            "user_index",
            "cqn",
            "counter_set_id",
            "wq",
        ]),
    ),
    ("create_rq_in", None),
    ("create_rq_out", None),
    ("modify_rq_in", None),
    ("destroy_rq_in", None),
    ("tirc", Some(&["disp_type", "inline_rqn", "rx_hash_fn", "self_lb_block", "transport_domain"])),
    ("create_tir_in", None),
    ("create_tir_out", None),
    ("destroy_tir_in", None),
    ("flow_table_context", Some(&["table_miss_action", "level", "log_size", "table_miss_id"])),
    ("create_flow_table_in", None),
    ("create_flow_table_out", None),
    ("destroy_flow_table_in", None),
    (
        "fte_match_set_lyr_2_4",
        Some(&[
            "smac_47_16",
            "smac_15_0",
            "ethertype",
            "dmac_47_16",
            "dmac_15_0",
            "cvlan_tag",
            "svlan_tag",
        ]),
    ),
    ("fte_match_param", Some(&["outer_headers"])),
    ("create_flow_group_in", None),
    ("create_flow_group_out", None),
    ("destroy_flow_group_in", None),
    (
        "flow_context",
        Some(&[
            "group_id",
            "flow_tag",
            "action",
            "destination_list_size",
            "match_value",
            "destination",
        ]),
    ),
    ("dest_format_struct", None),
    ("set_fte_in", None),
    ("delete_fte_in", None),
    ("set_flow_table_root_in", None),
];

/// Enum constants of the header to emit (opcodes and the values commands carry).
pub const CONSTS: &[&str] = &[
    "MLX5_CMD_OP_QUERY_HCA_CAP",
    "MLX5_CMD_OP_INIT_HCA",
    "MLX5_CMD_OP_TEARDOWN_HCA",
    "MLX5_CMD_OP_ENABLE_HCA",
    "MLX5_CMD_OP_DISABLE_HCA",
    "MLX5_CMD_OP_QUERY_PAGES",
    "MLX5_CMD_OP_MANAGE_PAGES",
    "MLX5_CMD_OP_SET_HCA_CAP",
    "MLX5_CMD_OP_QUERY_ISSI",
    "MLX5_CMD_OP_SET_ISSI",
    "MLX5_CMD_OP_CREATE_MKEY",
    "MLX5_CMD_OP_DESTROY_MKEY",
    "MLX5_CMD_OP_CREATE_EQ",
    "MLX5_CMD_OP_DESTROY_EQ",
    "MLX5_CMD_OP_CREATE_CQ",
    "MLX5_CMD_OP_DESTROY_CQ",
    "MLX5_CMD_OP_CREATE_QP",
    "MLX5_CMD_OP_DESTROY_QP",
    "MLX5_CMD_OP_RST2INIT_QP",
    "MLX5_CMD_OP_INIT2RTR_QP",
    "MLX5_CMD_OP_RTR2RTS_QP",
    "MLX5_CMD_OP_2ERR_QP",
    "MLX5_CMD_OP_2RST_QP",
    "MLX5_CMD_OP_MODIFY_NIC_VPORT_CONTEXT",
    "MLX5_CMD_OP_QUERY_NIC_VPORT_CONTEXT",
    "MLX5_CMD_OP_SET_ROCE_ADDRESS",
    "MLX5_CMD_OP_QUERY_ROCE_ADDRESS",
    "MLX5_CMD_OP_ALLOC_PD",
    "MLX5_CMD_OP_DEALLOC_PD",
    "MLX5_CMD_OP_ALLOC_UAR",
    "MLX5_CMD_OP_DEALLOC_UAR",
    "MLX5_CMD_OP_ACCESS_REG",
    "MLX5_SET_HCA_CAP_OP_MOD_GENERAL_DEVICE",
    "MLX5_SET_HCA_CAP_OP_MOD_ROCE",
    "MLX5_QUERY_PAGES_IN_OP_MOD_BOOT_PAGES",
    "MLX5_QUERY_PAGES_IN_OP_MOD_INIT_PAGES",
    "MLX5_QUERY_PAGES_IN_OP_MOD_REGULAR_PAGES",
    "MLX5_MANAGE_PAGES_IN_OP_MOD_ALLOCATION_FAIL",
    "MLX5_MANAGE_PAGES_IN_OP_MOD_ALLOCATION_SUCCESS",
    "MLX5_MANAGE_PAGES_IN_OP_MOD_HCA_RETURN_PAGES",
    "MLX5_TEARDOWN_HCA_IN_PROFILE_GRACEFUL_CLOSE",
    "MLX5_CAP_PORT_TYPE_ETH",
    "MLX5_QPC_ST_RC",
    "MLX5_QPC_ST_UD",
    "MLX5_QPC_ST_QP1",
    "MLX5_QPC_PM_STATE_MIGRATED",
    "MLX5_TIMESTAMP_FORMAT_FREE_RUNNING",
    "MLX5_TIMESTAMP_FORMAT_DEFAULT",
    "MLX5_TIMESTAMP_FORMAT_REAL_TIME",
    "MLX5_TIMESTAMP_FORMAT_CAP_REAL_TIME",
    "MLX5_MKC_ACCESS_MODE_PA",
    "MLX5_MKC_ACCESS_MODE_MTT",
    "MLX5_CMD_OP_ALLOC_TRANSPORT_DOMAIN",
    "MLX5_CMD_OP_DEALLOC_TRANSPORT_DOMAIN",
    "MLX5_CMD_OP_CREATE_TIS",
    "MLX5_CMD_OP_DESTROY_TIS",
    "MLX5_CMD_OP_CREATE_SQ",
    "MLX5_CMD_OP_MODIFY_SQ",
    "MLX5_CMD_OP_DESTROY_SQ",
    "MLX5_CMD_OP_CREATE_RQ",
    "MLX5_CMD_OP_MODIFY_RQ",
    "MLX5_CMD_OP_DESTROY_RQ",
    "MLX5_CMD_OP_CREATE_TIR",
    "MLX5_CMD_OP_DESTROY_TIR",
    "MLX5_CMD_OP_CREATE_FLOW_TABLE",
    "MLX5_CMD_OP_DESTROY_FLOW_TABLE",
    "MLX5_CMD_OP_CREATE_FLOW_GROUP",
    "MLX5_CMD_OP_DESTROY_FLOW_GROUP",
    "MLX5_CMD_OP_SET_FLOW_TABLE_ENTRY",
    "MLX5_CMD_OP_DELETE_FLOW_TABLE_ENTRY",
    "MLX5_CMD_OP_SET_FLOW_TABLE_ROOT",
    "MLX5_SQC_STATE_RST",
    "MLX5_SQC_STATE_RDY",
    "MLX5_RQC_STATE_RST",
    "MLX5_RQC_STATE_RDY",
    "MLX5_WQ_WQ_TYPE_WQ_CYCLIC",
    "MLX5_TIRC_DISP_TYPE_DIRECT",
    "MLX5_FLOW_TABLE_TYPE_NIC_RX",
    "MLX5_FLOW_CONTEXT_ACTION_FWD_DEST",
    "MLX5_IFC_FLOW_DESTINATION_TYPE_TIR",
    "MLX5_CREATE_FLOW_GROUP_IN_MATCH_CRITERIA_ENABLE_OUTER_HEADERS",
];

/// One member of a parsed struct or union.
#[derive(Clone, Debug)]
pub struct Member {
    /// Member name (`reserved_at_*` included).
    pub name: String,
    /// Element type.
    pub ty: Ty,
    /// Array dimensions before the element (`[4][0x40]` → `[4]`; `[][0x40]` → `[0]`).
    pub counts: Vec<u64>,
}

/// A member's element type.
#[derive(Clone, Debug)]
pub enum Ty {
    /// `u8 name[..][width]`: a bit field of `width` bits.
    Bits(u64),
    /// `struct|union mlx5_ifc_NAME_bits`.
    Named(String),
    /// An inline `struct { ... }` / `union { ... }`.
    Inline(Box<Layout>),
}

/// A parsed struct or union body.
#[derive(Clone, Debug)]
pub struct Layout {
    /// Whether members overlap (union) or follow one another (struct).
    pub is_union: bool,
    /// Members in declaration order.
    pub members: Vec<Member>,
}

/// Every `mlx5_ifc_*_bits` layout and enum constant of a set of headers.
#[derive(Debug, Default)]
pub struct Header {
    /// Layouts by name (without `mlx5_ifc_` and `_bits`).
    pub layouts: BTreeMap<String, Layout>,
    /// Enum constants (and numeric `#define`s) by name.
    pub consts: BTreeMap<String, u64>,
    /// Layouts that did not parse, with why; an error only if one of them is needed.
    pub broken: BTreeMap<String, String>,
}

/// A resolved field: bit offset and width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// Offset of element 0 from the start of the enclosing layout, in bits.
    pub bit: u64,
    /// Width of one element in bits.
    pub width: u64,
    /// Number of elements (1 for a scalar, 0 for a flexible array).
    pub count: u64,
    /// Whether the member is an array.
    pub array: bool,
}

fn strip_comments(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && i + 1 < b.len() && b[i + 1] == b'*' {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            i += 2;
            out.push(' ');
        } else if b[i] == b'/' && i + 1 < b.len() && b[i + 1] == b'/' {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

fn parse_num(s: &str) -> Option<u64> {
    let s = s.trim().trim_end_matches(['U', 'u', 'L', 'l']);
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else {
        s.parse().ok()
    }
}

/// Index of the `}` matching the `{` at `open`.
fn matching_brace(s: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, &c) in s.iter().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Parse `name[d0][d1]...` into the name and its dimensions (`[]` is 0).
fn parse_declarator(d: &str, consts: &BTreeMap<String, u64>) -> Result<(String, Vec<u64>), String> {
    let d = d.trim();
    let name_end = d.find('[').unwrap_or(d.len());
    let name = d[..name_end].trim().to_string();
    if name.is_empty() || !name.chars().all(is_ident) {
        return Err(format!("bad declarator `{d}`"));
    }
    let mut dims = Vec::new();
    let mut rest = &d[name_end..];
    while let Some(r) = rest.strip_prefix('[') {
        let close = r.find(']').ok_or_else(|| format!("unclosed `[` in `{d}`"))?;
        let inner = r[..close].trim();
        dims.push(if inner.is_empty() {
            0
        } else {
            eval(inner, consts).ok_or_else(|| format!("dimension `{inner}` in `{d}`"))?
        });
        rest = r[close + 1..].trim_start();
    }
    if !rest.trim().is_empty() {
        return Err(format!("trailing `{rest}` in `{d}`"));
    }
    Ok((name, dims))
}

fn parse_body(
    body: &str,
    is_union: bool,
    consts: &BTreeMap<String, u64>,
) -> Result<Layout, String> {
    let b = body.as_bytes();
    let mut members = Vec::new();
    let mut i = 0;
    while i < b.len() {
        // One member: up to the next `;` at depth 0.
        let start = i;
        let mut depth = 0i32;
        while i < b.len() && !(b[i] == b';' && depth == 0) {
            match b[i] {
                b'{' => depth += 1,
                b'}' => depth -= 1,
                _ => {}
            }
            i += 1;
        }
        let decl = body[start..i.min(b.len())].trim();
        i += 1;
        if decl.is_empty() {
            continue;
        }
        if let Some(open) = decl.find('{') {
            // Inline `struct { ... } name` or `union { ... } name`.
            let kw = decl[..open].trim();
            let close = matching_brace(decl.as_bytes(), open)
                .ok_or_else(|| format!("unbalanced inline body in `{decl}`"))?;
            let inner = parse_body(&decl[open + 1..close], kw == "union", consts)?;
            let (name, counts) = parse_declarator(&decl[close + 1..], consts)?;
            members.push(Member { name, ty: Ty::Inline(Box::new(inner)), counts });
        } else if let Some(rest) = decl.strip_prefix("u8") {
            let (name, mut dims) = parse_declarator(rest, consts)?;
            let width = dims.pop().ok_or_else(|| format!("`{decl}` has no width"))?;
            members.push(Member { name, ty: Ty::Bits(width), counts: dims });
        } else if let Some(rest) =
            decl.strip_prefix("struct").or_else(|| decl.strip_prefix("union"))
        {
            let rest = rest.trim_start();
            let ty_end = rest.find(char::is_whitespace).ok_or_else(|| format!("`{decl}`"))?;
            let ty = &rest[..ty_end];
            let ty = ty
                .strip_prefix("mlx5_ifc_")
                .map(|t| t.strip_suffix("_bits").unwrap_or(t))
                .ok_or_else(|| format!("member type `{ty}` is not an mlx5_ifc layout"))?;
            let (name, counts) = parse_declarator(&rest[ty_end..], consts)?;
            members.push(Member { name, ty: Ty::Named(ty.to_string()), counts });
        } else {
            return Err(format!("unrecognised member `{decl}`"));
        }
    }
    Ok(Layout { is_union, members })
}

fn eval(expr: &str, consts: &BTreeMap<String, u64>) -> Option<u64> {
    let expr = expr.trim().trim_start_matches('(').trim_end_matches(')').trim();
    if let Some((a, b)) = expr.split_once('|') {
        return Some(eval(a, consts)? | eval(b, consts)?);
    }
    if let Some((a, b)) = expr.split_once("<<") {
        return eval(a, consts)?.checked_shl(eval(b, consts)? as u32);
    }
    parse_num(expr).or_else(|| consts.get(expr).copied())
}

impl Header {
    /// Parse the text of one or more headers.
    pub fn parse(sources: &[String]) -> Result<Header, String> {
        let mut h = Header::default();
        for src in sources {
            let src = strip_comments(src);
            for line in src.lines() {
                let mut w = line.split_whitespace();
                if let (Some("#define"), Some(n), Some(v), None) =
                    (w.next(), w.next(), w.next(), w.next())
                {
                    if let Some(v) = parse_num(v) {
                        h.consts.insert(n.to_string(), v);
                    }
                }
            }
            let bytes = src.as_bytes();
            let mut pos = 0;
            while pos < src.len() {
                let rest = &src[pos..];
                let next_layout = ["struct mlx5_ifc_", "union mlx5_ifc_"]
                    .iter()
                    .filter_map(|k| rest.find(k).map(|i| (i, *k)))
                    .min();
                let next_enum = rest.find("enum");
                let layout_first = match (next_layout, next_enum) {
                    (Some((li, _)), Some(e)) => li < e,
                    (Some(_), None) => true,
                    _ => false,
                };
                match (next_layout, next_enum) {
                    (Some((li, kw)), _) if layout_first => {
                        let at = pos + li;
                        let name_start = at + kw.len();
                        let name_end = name_start
                            + src[name_start..].find(|c: char| !is_ident(c)).unwrap_or(0);
                        let after = src[name_end..].trim_start();
                        let name = &src[name_start..name_end];
                        if after.starts_with('{') {
                            let open = src.len() - after.len();
                            let close = matching_brace(bytes, open)
                                .ok_or_else(|| format!("unbalanced body of {name}"))?;
                            let key = name.strip_suffix("_bits").unwrap_or(name).to_string();
                            let body = &src[open + 1..close];
                            match parse_body(body, kw.starts_with("union"), &h.consts) {
                                Ok(layout) => {
                                    h.layouts.insert(key, layout);
                                }
                                Err(e) => {
                                    h.broken.insert(key, e);
                                }
                            }
                            pos = close + 1;
                        } else {
                            pos = name_end.max(at + 1);
                        }
                    }
                    (_, Some(ei)) => {
                        let at = pos + ei;
                        let is_word = (at == 0 || !is_ident(bytes[at - 1] as char))
                            && !is_ident(*bytes.get(at + 4).unwrap_or(&b' ') as char);
                        let open = src[at..].find(['{', ';']).map(|o| at + o);
                        match open {
                            Some(open) if is_word && bytes[open] == b'{' => {
                                let close = matching_brace(bytes, open)
                                    .ok_or_else(|| "unbalanced enum".to_string())?;
                                for item in src[open + 1..close].split(',') {
                                    if let Some((n, v)) = item.split_once('=') {
                                        let n = n.trim();
                                        if let Some(v) = eval(v, &h.consts) {
                                            h.consts.insert(n.to_string(), v);
                                        }
                                    }
                                }
                                pos = close + 1;
                            }
                            _ => pos = at + 4,
                        }
                    }
                    _ => break,
                }
            }
        }
        Ok(h)
    }

    /// Read `mlx5_ifc.h` and its `mlx5_ifc_*.h` siblings (the capability union names layouts
    /// declared there).
    pub fn load(main: &Path) -> Result<Header, String> {
        let dir = main.parent().ok_or("header has no directory")?;
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p != main
                    && p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("mlx5_ifc_") && n.ends_with(".h"))
            })
            .collect();
        paths.sort();
        paths.insert(0, main.to_path_buf());
        let sources = paths
            .iter()
            .map(|p| std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display())))
            .collect::<Result<Vec<_>, _>>()?;
        Header::parse(&sources)
    }

    fn layout(&self, name: &str) -> Result<&Layout, String> {
        if let Some(e) = self.broken.get(name) {
            return Err(format!("mlx5_ifc_{name}: {e}"));
        }
        self.layouts.get(name).ok_or_else(|| format!("no layout mlx5_ifc_{name}_bits"))
    }

    fn ty_bits(&self, ty: &Ty) -> Result<u64, String> {
        match ty {
            Ty::Bits(w) => Ok(*w),
            Ty::Named(n) => self.size_bits(n),
            Ty::Inline(l) => self.layout_bits(l),
        }
    }

    fn member_bits(&self, m: &Member) -> Result<u64, String> {
        Ok(m.counts.iter().product::<u64>() * self.ty_bits(&m.ty)?)
    }

    fn layout_bits(&self, l: &Layout) -> Result<u64, String> {
        let mut total = 0u64;
        for m in &l.members {
            let b = self.member_bits(m)?;
            total = if l.is_union { total.max(b) } else { total + b };
        }
        Ok(total)
    }

    /// Size of layout `name` in bits.
    pub fn size_bits(&self, name: &str) -> Result<u64, String> {
        let l = self.layout(name)?;
        self.layout_bits(l)
    }

    /// Offset and width of member `field` of layout `name`.
    pub fn field(&self, name: &str, field: &str) -> Result<Resolved, String> {
        let l = self.layout(name)?;
        let mut off = 0u64;
        for m in &l.members {
            if m.name == field {
                return Ok(Resolved {
                    bit: off,
                    width: self.ty_bits(&m.ty)?,
                    count: m.counts.iter().product(),
                    array: !m.counts.is_empty(),
                });
            }
            if !l.is_union {
                off += self.member_bits(m)?;
            }
        }
        Err(format!("mlx5_ifc_{name}_bits has no member `{field}`"))
    }

    /// The members [`SPEC`] selects for layout `name`.
    pub fn selected(&self, name: &str, only: Option<&[&str]>) -> Result<Vec<String>, String> {
        let l = self.layout(name)?;
        Ok(match only {
            Some(list) => list.iter().map(|s| s.to_string()).collect(),
            None => l
                .members
                .iter()
                .filter(|m| !m.name.starts_with("reserved"))
                .map(|m| m.name.clone())
                .collect(),
        })
    }
}

/// The Rust module name of layout `name` (`2err_qp_in` would not be an identifier).
pub fn module_name(name: &str) -> String {
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        format!("_{name}")
    } else {
        name.to_string()
    }
}

/// The Rust constant name of a header enum constant.
pub fn const_name(name: &str) -> String {
    let n = name.strip_prefix("MLX5_").unwrap_or(name);
    if n.starts_with(|c: char| c.is_ascii_digit()) {
        format!("_{n}")
    } else {
        n.to_string()
    }
}

/// Emit the generated Rust file.
pub fn generate(h: &Header) -> Result<String, String> {
    let mut o = String::new();
    let w = &mut o;
    writeln!(
        w,
        "//! Bit offsets and widths of the mlx5 firmware command layouts this driver uses."
    )
    .ok();
    writeln!(w, "//!").ok();
    writeln!(
        w,
        "//! GENERATED by `cargo xtask ifc` from the kernel's `include/linux/mlx5/mlx5_ifc.h`"
    )
    .ok();
    writeln!(
        w,
        "//! (`struct mlx5_ifc_<name>_bits`); do not edit. Offsets count bits from the most"
    )
    .ok();
    writeln!(
        w,
        "//! significant bit of byte 0 (PRM order). Arrays give element 0 and `<NAME>_COUNT`"
    )
    .ok();
    writeln!(w, "//! (0 for a flexible array); nested layouts give their whole span.").ok();
    writeln!(w, "#![allow(missing_docs, non_upper_case_globals, clippy::all)]").ok();
    writeln!(w).ok();
    writeln!(w, "use super::Field;").ok();
    let mut table = Vec::new();
    let mut sizes = Vec::new();
    for (name, only) in SPEC {
        let size = h.size_bits(name)?;
        sizes.push((name.to_string(), size));
        writeln!(w).ok();
        writeln!(w, "/// `struct mlx5_ifc_{name}_bits`.").ok();
        writeln!(w, "pub mod {} {{", module_name(name)).ok();
        writeln!(w, "    use super::Field;").ok();
        writeln!(w, "    /// Size in bits.").ok();
        writeln!(w, "    pub const SIZE_BITS: u32 = {size:#x};").ok();
        writeln!(w, "    /// Size in bytes.").ok();
        writeln!(w, "    pub const SIZE: usize = {};", size.div_ceil(8)).ok();
        for f in h.selected(name, *only)? {
            let r = h.field(name, &f)?;
            let c = f.to_ascii_uppercase();
            writeln!(w, "    pub const {c}: Field = Field::new({:#x}, {:#x});", r.bit, r.width)
                .ok();
            if r.array {
                writeln!(w, "    pub const {c}_COUNT: usize = {};", r.count).ok();
            }
            table.push((name.to_string(), f.clone(), format!("{}::{c}", module_name(name))));
        }
        writeln!(w, "}}").ok();
    }
    writeln!(w).ok();
    writeln!(w, "/// Enum constants of the header (`MLX5_` dropped).").ok();
    writeln!(w, "pub mod consts {{").ok();
    for c in CONSTS {
        let v = h.consts.get(*c).ok_or_else(|| format!("no enum constant {c}"))?;
        writeln!(w, "    pub const {}: u16 = {v:#x};", const_name(c)).ok();
    }
    writeln!(w, "}}").ok();
    writeln!(w).ok();
    writeln!(w, "/// Every emitted field as (layout, member, field), for the header check.").ok();
    writeln!(w, "pub const FIELDS: &[(&str, &str, Field)] = &[").ok();
    for (s, f, path) in &table {
        writeln!(w, "    (\"{s}\", \"{f}\", {path}),").ok();
    }
    writeln!(w, "];").ok();
    writeln!(w).ok();
    writeln!(w, "/// Every emitted layout size in bits, for the header check.").ok();
    writeln!(w, "pub const SIZES: &[(&str, u32)] = &[").ok();
    for (s, b) in &sizes {
        writeln!(w, "    (\"{s}\", {}::SIZE_BITS),", module_name(s)).ok();
        let _ = b;
    }
    writeln!(w, "];").ok();
    writeln!(w).ok();
    writeln!(w, "/// Every emitted enum constant with its header name, for the header check.").ok();
    writeln!(w, "pub const CONSTS: &[(&str, u16)] = &[").ok();
    for c in CONSTS {
        writeln!(w, "    (\"{c}\", consts::{}),", const_name(c)).ok();
    }
    writeln!(w, "];").ok();
    Ok(o)
}

/// Where the header is: `$MLX5_IFC_H`, else the newest `/usr/src/linux-headers-*` that has it.
pub fn find_header() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("MLX5_IFC_H") {
        return Some(PathBuf::from(p));
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/src")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("include/linux/mlx5/mlx5_ifc.h")))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found.pop()
}
