//! Every layout constant and code of the firmware model, re-derived from the kernel's installed
//! mlx5 headers (`include/linux/mlx5/mlx5_ifc*.h`, `device.h`, `driver.h`) by a small parser
//! of their `_bits` structures, C structures and enums.
//!
//! The headers are looked for in `$MLX5_HEADERS` or `/usr/src/linux-headers-*/include/linux/
//! mlx5`. Without them the tests fail; `MLX5_HEADERS=none` skips them explicitly.

use std::collections::HashMap;
use std::path::PathBuf;

use crate::fw::cmdq::{entry, mailbox};
use crate::fw::codes::*;
use crate::fw::ifc;
use crate::fw::init_seg as seg;

fn header_dir() -> Option<PathBuf> {
    if let Ok(d) = std::env::var("MLX5_HEADERS") {
        if d == "none" {
            eprintln!("MLX5_HEADERS=none: header checks skipped");
            return None;
        }
        return Some(PathBuf::from(d));
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/src")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("include/linux/mlx5"))
        .filter(|p| p.join("mlx5_ifc.h").is_file())
        .collect();
    found.sort();
    match found.pop() {
        Some(p) => Some(p),
        None => panic!(
            "kernel mlx5 headers not found: install linux-headers, set MLX5_HEADERS=<dir>, \
             or MLX5_HEADERS=none to skip"
        ),
    }
}

fn strip_comments(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("/*") {
        out.push_str(&rest[..i]);
        rest = rest[i..].find("*/").map_or("", |j| &rest[i + j + 2..]);
    }
    out.push_str(rest);
    out.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// Parse a number as C writes it (decimal or hex).
fn num(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

#[derive(Debug)]
enum Kind {
    /// `u8 name[bits]`.
    Bits(u64),
    /// A member of a named `mlx5_ifc_*` type.
    Named(String),
    /// An anonymous struct or union.
    Inline(Box<Def>),
}

/// An array count given by a name (an enum constant); only an error if its size is needed.
const SYMBOLIC: u64 = u64::MAX;

#[derive(Debug)]
struct Member {
    name: String,
    kind: Kind,
    /// None: one; Some(0): flexible array; Some(n): n elements.
    count: Option<u64>,
}

#[derive(Debug)]
struct Def {
    union: bool,
    members: Vec<Member>,
}

/// Split a structure body into its top-level member declarations.
fn items(body: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0i32);
    for c in body.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ';' if depth == 0 => {
                out.push(std::mem::take(&mut cur).trim().to_string());
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.into_iter().filter(|s| !s.is_empty()).collect()
}

/// `[a][b]` suffixes of a declarator, as strings.
fn dims(decl: &str) -> (String, Vec<String>) {
    let name_end = decl.find('[').unwrap_or(decl.len());
    let name = decl[..name_end].trim().to_string();
    let dims = decl[name_end..]
        .split('[')
        .skip(1)
        .map(|d| d.trim_end().trim_end_matches(']').trim().to_string())
        .collect();
    (name, dims)
}

fn parse_member(item: &str) -> Member {
    let item = item.trim();
    if let Some(rest) = item.strip_prefix("u8") {
        let (name, d) = dims(rest);
        // `u8 x[]` (a flexible byte blob in a few structures) occupies nothing.
        let n = |s: &str| if s.is_empty() { 0 } else { num(s).unwrap_or(SYMBOLIC) };
        return match d.as_slice() {
            [w] => Member { name, kind: Kind::Bits(n(w)), count: None },
            [c, w] => Member {
                name,
                kind: Kind::Bits(n(w)),
                count: Some(if c.is_empty() { 0 } else { num(c).unwrap_or(SYMBOLIC) }),
            },
            _ => panic!("unexpected declarator {item:?}"),
        };
    }
    let union = item.starts_with("union");
    if let (Some(open), Some(close)) = (item.find('{'), item.rfind('}')) {
        let def = Def {
            union,
            members: items(&item[open + 1..close]).iter().map(|i| parse_member(i)).collect(),
        };
        let (name, _) = dims(&item[close + 1..]);
        return Member { name, kind: Kind::Inline(Box::new(def)), count: None };
    }
    let mut words = item.split_whitespace();
    let _struct_or_union = words.next();
    let ty = words.next().expect("type").trim_start_matches("mlx5_ifc_").to_string();
    let (name, d) = dims(&words.collect::<Vec<_>>().join(" "));
    let count = d.first().map(|c| if c.is_empty() { 0 } else { num(c).unwrap_or(SYMBOLIC) });
    Member { name, kind: Kind::Named(ty), count }
}

/// Every `struct|union mlx5_ifc_<name> { ... };` of the text.
fn parse_defs(text: &str) -> HashMap<String, Def> {
    let mut defs = HashMap::new();
    for kw in ["struct mlx5_ifc_", "union mlx5_ifc_"] {
        let mut at = 0;
        while let Some(i) = text[at..].find(kw) {
            let start = at + i;
            at = start + kw.len();
            let head_end = text[at..].find(['{', ';', ')']).map_or(text.len(), |j| at + j);
            if !text[head_end..].starts_with('{') {
                continue;
            }
            let name = text[at..head_end].trim().to_string();
            if name.contains(char::is_whitespace) {
                continue;
            }
            let mut depth = 0;
            let mut end = head_end;
            for (j, c) in text[head_end..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = head_end + j;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let body = &text[head_end + 1..end];
            let def = Def {
                union: kw.starts_with("union"),
                members: items(body).iter().map(|i| parse_member(i)).collect(),
            };
            defs.insert(name, def);
            at = end;
        }
    }
    defs
}

struct Ifc {
    defs: HashMap<String, Def>,
}

impl Ifc {
    fn def(&self, name: &str) -> &Def {
        self.defs.get(name).unwrap_or_else(|| panic!("mlx5_ifc_{name} not in the headers"))
    }

    fn elem_bits(&self, k: &Kind) -> u64 {
        match k {
            Kind::Bits(b) => {
                assert_ne!(*b, SYMBOLIC, "symbolic field width");
                *b
            }
            Kind::Named(t) => self.size(self.def(t)),
            Kind::Inline(d) => self.size(d),
        }
    }

    fn member_bits(&self, m: &Member) -> u64 {
        assert_ne!(m.count, Some(SYMBOLIC), "symbolic array size of {}", m.name);
        self.elem_bits(&m.kind) * m.count.unwrap_or(1)
    }

    fn size(&self, d: &Def) -> u64 {
        let sizes = d.members.iter().map(|m| self.member_bits(m));
        if d.union {
            sizes.max().unwrap_or(0)
        } else {
            sizes.sum()
        }
    }

    /// (bit offset, width) of `path` (dotted) in `mlx5_ifc_<top>_bits`. Width: the whole
    /// array for fixed arrays, one element for flexible ones.
    fn field(&self, top: &str, path: &str) -> (u64, u64) {
        let mut def = self.def(&format!("{top}_bits"));
        let mut base = 0;
        let parts: Vec<&str> = path.split('.').collect();
        for (i, part) in parts.iter().enumerate() {
            let mut off = 0;
            let mut hit = None;
            for m in &def.members {
                if m.name == *part {
                    hit = Some(m);
                    break;
                }
                if !def.union {
                    off += self.member_bits(m);
                }
            }
            let m = hit.unwrap_or_else(|| panic!("{top}.{path}: no member {part}"));
            base += off;
            if i + 1 == parts.len() {
                let w = match m.count {
                    Some(0) => self.elem_bits(&m.kind),
                    _ => self.member_bits(m),
                };
                return (base, w);
            }
            def = match &m.kind {
                Kind::Named(t) => self.def(t),
                Kind::Inline(d) => d,
                Kind::Bits(_) => panic!("{top}.{path}: {part} is not a structure"),
            };
        }
        unreachable!()
    }
}

/// `NAME = value` and `#define NAME value` of the headers, where the value is a plain number
/// or `1 << n`.
fn constants(text: &str) -> HashMap<String, u64> {
    let mut out = HashMap::new();
    // The value of the previous enumerator, for one written without `= value` (C: previous
    // plus one; the first of an enum is 0).
    let mut last: Option<u64> = None;
    for line in text.lines() {
        let line = line.trim().trim_end_matches(',');
        if line.starts_with("enum") && line.ends_with('{') {
            last = None;
            continue;
        }
        let bare = !line.is_empty()
            && line.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && line.starts_with("MLX5_");
        if bare {
            let v = last.map_or(0, |v| v + 1);
            out.insert(line.to_string(), v);
            last = Some(v);
            continue;
        }
        let (name, value) = if let Some(d) = line.strip_prefix("#define") {
            let mut w = d.split_whitespace();
            match (w.next(), w.next()) {
                (Some(n), Some(v)) => (n, v.to_string()),
                _ => continue,
            }
        } else if let Some((n, v)) = line.split_once('=') {
            (n.trim(), v.trim().to_string())
        } else {
            continue;
        };
        if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') || name.is_empty() {
            continue;
        }
        let val = |s: &str| num(s).or_else(|| out.get(s.trim()).copied());
        let v = match value.split_once("<<") {
            Some((a, b)) => val(a).zip(val(b)).map(|(a, b)| a << b),
            None => val(&value),
        };
        if let Some(v) = v {
            out.insert(name.to_string(), v);
        }
        last = v;
    }
    out
}

/// Byte offsets of the members of a plain C structure (`u8`, `__be16/32/64`, nested structs
/// already measured), as `device.h` declares them.
fn c_struct(
    text: &str,
    name: &str,
    known: &HashMap<String, u64>,
    consts: &HashMap<String, u64>,
) -> (HashMap<String, u64>, u64) {
    let start = text.find(&format!("struct {name} {{")).unwrap_or_else(|| panic!("struct {name}"));
    let body_start = start + text[start..].find('{').expect("{") + 1;
    let body_end = body_start + text[body_start..].find("};").expect("};");
    let mut offs = HashMap::new();
    let mut off = 0u64;
    for item in items(&text[body_start..body_end]) {
        let words: Vec<&str> = item.split_whitespace().collect();
        let (ty, decl) = match words.as_slice() {
            ["struct", ty, rest @ ..] => (format!("struct {ty}"), rest.join(" ")),
            [ty, rest @ ..] => (ty.to_string(), rest.join(" ")),
            _ => panic!("{item}"),
        };
        let size = match ty.as_str() {
            "u8" => 1,
            "__be16" => 2,
            "__be32" => 4,
            "__be64" => 8,
            other => *known.get(other).unwrap_or_else(|| panic!("type {other}")),
        };
        let (field, d) = dims(&decl);
        let count = d.first().map_or(1, |c| num(c).or_else(|| consts.get(c).copied()).expect(c));
        off = off.next_multiple_of(size.min(8));
        offs.insert(field, off);
        off += size * count;
    }
    (offs, off)
}

struct Headers {
    ifc: Ifc,
    consts: HashMap<String, u64>,
    device: String,
}

fn headers() -> Option<Headers> {
    let dir = header_dir()?;
    assert!(dir.join("mlx5_ifc.h").is_file(), "no mlx5_ifc.h in {}", dir.display());
    let read = |f: &str| strip_comments(&std::fs::read_to_string(dir.join(f)).unwrap_or_default());
    let mut ifc_text = String::new();
    for f in ["mlx5_ifc.h", "mlx5_ifc_fpga.h", "mlx5_ifc_vdpa.h"] {
        ifc_text.push_str(&read(f));
    }
    let device = read("device.h");
    let mut consts = constants(&ifc_text);
    consts.extend(constants(&device));
    consts.extend(constants(&read("driver.h")));
    consts.extend(constants(&read("qp.h")));
    consts.extend(constants(&read("vport.h")));
    Some(Headers { ifc: Ifc { defs: parse_defs(&ifc_text) }, consts, device })
}

#[test]
fn every_ifc_field_matches_the_header() {
    let Some(h) = headers() else { return };
    let mut checked = 0;
    for (name, size, fields) in ifc::ALL {
        let bits = h.ifc.size(h.ifc.def(&format!("{name}_bits")));
        assert_eq!(bits, 8 * *size as u64, "size of mlx5_ifc_{name}_bits");
        for (path, f) in *fields {
            let (bit, width) = h.ifc.field(name, path);
            assert_eq!((bit, width), (u64::from(f.bit), u64::from(f.width)), "{name}.{path}");
            checked += 1;
        }
    }
    assert!(checked > 150, "only {checked} fields checked");
}

#[test]
fn every_code_matches_the_header() {
    let Some(h) = headers() else { return };
    let tables: [&[(&str, u64)]; 8] = [
        Opcode::HEADER,
        CmdStatus::HEADER,
        PagesStage::HEADER,
        ManagePagesMode::HEADER,
        CapType::HEADER,
        QpState::HEADER,
        EventType::HEADER,
        &[
            ("MLX5_PCI_CMD_XPORT", PCI_CMD_XPORT as u64),
            ("MLX5_REG_HOST_ENDIANNESS", REG_HOST_ENDIANNESS as u64),
            ("MLX5_REG_PTYS", REG_PTYS as u64),
            ("MLX5_REG_NODE_DESC", REG_NODE_DESC as u64),
            ("MLX5_PTYS_EN", PTYS_EN as u64),
            ("MLX5_PORT_CHANGE_SUBTYPE_DOWN", PORT_CHANGE_DOWN as u64),
            ("MLX5_PORT_CHANGE_SUBTYPE_ACTIVE", PORT_CHANGE_ACTIVE as u64),
            ("MLX5_CAP_PORT_TYPE_ETH", PORT_TYPE_ETH as u64),
            ("MLX5_QPC_ST_RC", QPC_ST_RC as u64),
            ("MLX5_QPC_ST_UD", QPC_ST_UD as u64),
            ("MLX5_QPC_ST_QP1", QPC_ST_QP1 as u64),
            ("MLX5_QPC_ST_REG_UMR", QPC_ST_REG_UMR as u64),
            ("MLX5_ATOMIC_MODE_8B", ATOMIC_MODE_MAX_8B as u64),
            ("MLX5_ZERO_LEN_RQ", ZERO_LEN_RQ as u64),
            ("MLX5_MKC_ACCESS_MODE_PA", MKC_ACCESS_MODE_PA as u64),
            ("MLX5_MKC_ACCESS_MODE_MTT", MKC_ACCESS_MODE_MTT as u64),
            ("MLX5_MKC_ACCESS_MODE_KSM", MKC_ACCESS_MODE_KSM as u64),
            ("MLX5_TEARDOWN_HCA_IN_PROFILE_GRACEFUL_CLOSE", TEARDOWN_GRACEFUL as u64),
            ("MLX5_TEARDOWN_HCA_IN_PROFILE_FORCE_CLOSE", TEARDOWN_FORCE as u64),
            ("CMD_OWNER_HW", entry::OWNER_HW as u64),
            ("MLX5_CMD_DATA_BLOCK_SIZE", mailbox::DATA as u64),
            ("MLX5_ROCE_VERSION_1", ROCE_VERSION_1 as u64),
            ("MLX5_ROCE_VERSION_1_CAP", 1 << ROCE_VERSION_1),
            ("MLX5_ROCE_VERSION_2_CAP", 1 << 2),
            ("MLX5_ROCE_VERSION_2", ROCE_VERSION_2 as u64),
            ("MLX5_ROCE_L3_TYPE_IPV4", ROCE_L3_TYPE_IPV4 as u64),
            ("MLX5_ROCE_L3_TYPE_IPV6", ROCE_L3_TYPE_IPV6 as u64),
            ("MLX5_VPORT_ADMIN_STATE_UP", VPORT_STATE_UP as u64),
            ("MLX5_ROCE_L3_TYPE_IPV4_CAP", 1 << 1),
            ("MLX5_ROCE_L3_TYPE_IPV6_CAP", 1 << 2),
            ("MLX5_SQC_STATE_RST", WQ_STATE_RST as u64),
            ("MLX5_SQC_STATE_RDY", WQ_STATE_RDY as u64),
            ("MLX5_SQC_STATE_ERR", WQ_STATE_ERR as u64),
            ("MLX5_RQC_STATE_RST", WQ_STATE_RST as u64),
            ("MLX5_RQC_STATE_RDY", WQ_STATE_RDY as u64),
            ("MLX5_RQC_STATE_ERR", WQ_STATE_ERR as u64),
            ("MLX5_WQ_TYPE_CYCLIC", WQ_TYPE_CYCLIC as u64),
            ("MLX5_TIRC_DISP_TYPE_DIRECT", TIRC_DISP_TYPE_DIRECT as u64),
            ("MLX5_FLOW_TABLE_TYPE_NIC_RX", FLOW_TABLE_TYPE_NIC_RX as u64),
            (
                "MLX5_CREATE_FLOW_GROUP_IN_MATCH_CRITERIA_ENABLE_OUTER_HEADERS",
                MATCH_CRITERIA_OUTER_HEADERS as u64,
            ),
            ("MLX5_FLOW_CONTEXT_ACTION_FWD_DEST", FLOW_ACTION_FWD_DEST as u64),
            ("MLX5_FLOW_CONTEXT_DEST_TYPE_TIR", FLOW_DEST_TYPE_TIR as u64),
            ("MLX5_INLINE_MODE_NONE", INLINE_MODE_NONE as u64),
            ("MLX5_INLINE_MODE_L2", INLINE_MODE_L2 as u64),
            ("MLX5_INLINE_MODE_IP", INLINE_MODE_IP as u64),
            ("MLX5_INLINE_MODE_TCP_UDP", INLINE_MODE_TCP_UDP as u64),
            ("MLX5_CAP_INLINE_MODE_L2", CAP_INLINE_MODE_L2 as u64),
        ],
    ];
    for (name, v) in tables.iter().flat_map(|t| t.iter()) {
        assert_eq!(h.consts.get(*name), Some(v), "{name}");
    }
}

#[test]
fn init_segment_and_command_layouts_match_device_h() {
    let Some(h) = headers() else { return };
    let mut known = HashMap::new();
    let (health, health_size) = c_struct(&h.device, "health_buffer", &known, &h.consts);
    assert_eq!(health_size, seg::HEALTH_SIZE as u64);
    assert_eq!(health["synd"], (seg::HEALTH_SYND - seg::HEALTH) as u64);
    assert_eq!(health["ext_synd"], (seg::HEALTH_EXT_SYND - seg::HEALTH) as u64);
    assert_eq!(health["fw_ver"], (seg::HEALTH_FW_VER - seg::HEALTH) as u64);
    assert_eq!(health["hw_id"], (seg::HEALTH_HW_ID - seg::HEALTH) as u64);
    assert_eq!(health["rfr_severity"], (seg::HEALTH_RFR_SEVERITY - seg::HEALTH) as u64);
    assert_eq!(health["irisc_index"], (seg::HEALTH_IRISC_INDEX - seg::HEALTH) as u64);
    known.insert("struct health_buffer".to_string(), health_size);
    let (iseg, _) = c_struct(&h.device, "mlx5_init_seg", &known, &h.consts);
    for (name, off) in [
        ("fw_rev", seg::FW_REV),
        ("cmdif_rev_fw_sub", seg::CMDIF_REV_FW_SUB),
        ("cmdq_addr_h", seg::CMDQ_ADDR_H),
        ("cmdq_addr_l_sz", seg::CMDQ_ADDR_L_SZ),
        ("cmd_dbell", seg::CMD_DBELL),
        ("initializing", seg::INITIALIZING),
        ("health", seg::HEALTH),
        ("cmd_exec_to", seg::CMD_EXEC_TO),
        ("cmd_q_init_to", seg::CMD_Q_INIT_TO),
        ("internal_timer_h", seg::INTERNAL_TIMER_H),
        ("internal_timer_l", seg::INTERNAL_TIMER_L),
        ("health_counter", seg::HEALTH_COUNTER),
    ] {
        assert_eq!(iseg[name], off as u64, "mlx5_init_seg.{name}");
    }
    let (lay, lay_size) = c_struct(&h.device, "mlx5_cmd_layout", &known, &h.consts);
    assert_eq!(lay_size, entry::SIZE as u64);
    for (name, off) in [
        ("type", entry::TYPE),
        ("inlen", entry::INLEN),
        ("in_ptr", entry::IN_PTR),
        ("in", entry::IN),
        ("out", entry::OUT),
        ("out_ptr", entry::OUT_PTR),
        ("outlen", entry::OUTLEN),
        ("token", entry::TOKEN),
        ("sig", entry::SIG),
        ("status_own", entry::STATUS_OWN),
    ] {
        assert_eq!(lay[name], off as u64, "mlx5_cmd_layout.{name}");
    }
    let (blk, blk_size) = c_struct(&h.device, "mlx5_cmd_prot_block", &known, &h.consts);
    assert_eq!(blk_size, mailbox::SIZE as u64);
    for (name, off) in [
        ("data", 0),
        ("next", mailbox::NEXT),
        ("block_num", mailbox::BLOCK_NUM),
        ("token", mailbox::TOKEN),
        ("ctrl_sig", mailbox::CTRL_SIG),
        ("sig", mailbox::SIG),
    ] {
        assert_eq!(blk[name], off as u64, "mlx5_cmd_prot_block.{name}");
    }
}

#[test]
fn parser_reads_nested_and_flexible_members() {
    let text =
        "struct mlx5_ifc_a_bits { u8 x[0x4]; u8 y[0xc]; union { u8 p[0x8]; u8 q[0x10]; } u; \
                u8 r[4][0x8]; };\n struct mlx5_ifc_b_bits { u8 h[0x20]; struct mlx5_ifc_a_bits a; \
                u8 pas[][0x40]; };";
    let ifc = Ifc { defs: parse_defs(text) };
    assert_eq!(ifc.size(ifc.def("a_bits")), 0x4 + 0xc + 0x10 + 32);
    assert_eq!(ifc.field("b", "a.u.q"), (0x20 + 0x10, 0x10));
    assert_eq!(ifc.field("b", "a.r"), (0x20 + 0x20, 32));
    assert_eq!(ifc.field("b", "pas"), (0x20 + 0x40, 0x40));
    let c = constants("enum {\n\tFOO = 0x1a,\n\tBAR = 1 << 3,\n};\n#define BAZ 7\n");
    assert_eq!((c["FOO"], c["BAR"], c["BAZ"]), (0x1a, 8, 7));
}
