//! Reader and runner for mlx5 conformance vectors, format v1 (`std` feature).
//!
//! A vector file is line-oriented text: `#` comments, and records made of a header line, body
//! lines and a final `end`. Three record kinds are checked:
//!
//! * `case`: one RDMA WRITE posted alone. It is rebuilt with [`WqeBuilder`] into a ring filled
//!   with a poison byte, and compared on `ds`, `wqebbs`, `fm_ce_se`, `sig`, `slots`, the WQE
//!   bytes (inline padding and the tail past `ds * 16` are don't-care), the doorbell record,
//!   the UAR value and the BlueFlame length. The expected WQE is also parsed back with the
//!   segment views and checked against the header. Bytes outside the WQE's slots must keep the
//!   poison.
//! * `ring`: several named cases posted with one doorbell into a zeroed ring; compared on the
//!   whole ring image, the doorbell record, the UAR value and the BlueFlame length.
//! * `cqe`: a 64-byte CQE parsed with [`Cqe`]; every field, the ownership test and the CQ
//!   doorbell-record value are compared.
//!
//! Header fields are `key=value`; unknown keys are ignored. Records that need features the
//! builder does not model (`wq_sig`, `small_fence_pending`, other opcodes) are counted as
//! unsupported, as are unknown record kinds.

use std::collections::HashMap;

use rdma_pmd::{Lkey, QpNum, RemoteBuf, Rkey, SendFlags, SendRequest, Sge, Source};

use crate::datapath::wqe::{SliceRing, WqeBuilder, WqeInfo, WqeSink};
use crate::layout::codes::{CqeOpcode, SendOpcode, SEND_WQE_BB, SEND_WQE_DS};
use crate::layout::cqe::{self, Cqe, CqeRepr};
use crate::layout::wqe as seg;
use crate::layout::wqe::{CtrlSeg, DataSeg, InlineSeg, RaddrSeg};

/// BlueFlame half-register size the vectors assume (`bf_reg_size` 512 / 2).
pub const BF_SIZE: u32 = 256;
/// Poison byte the ring is filled with before a `case` is built.
const POISON: u8 = 0xa5;

/// One record, as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// `case`, `ring`, `cqe`, or another keyword.
    pub kind: String,
    /// The record's name (second word of the header).
    pub name: String,
    /// Line number of the header (1-based).
    pub line: usize,
    /// Header `key=value` fields.
    pub fields: HashMap<String, String>,
    /// Body lines: keyword and the rest of the line.
    pub body: HashMap<String, String>,
}

/// How one record fared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Everything matched.
    Pass,
    /// Something did not match, or the record is malformed; the text says what.
    Fail(String),
    /// The record needs something the project does not model.
    Unsupported(String),
}

/// Counts and per-record verdicts of a run.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Records that passed.
    pub passed: u32,
    /// Records that failed.
    pub failed: u32,
    /// Records counted as unsupported.
    pub unsupported: u32,
    /// `(record name, verdict)` for every record, in file order.
    pub verdicts: Vec<(String, Verdict)>,
}

impl Report {
    /// Count one verdict.
    pub fn add(&mut self, name: &str, v: Verdict) {
        match v {
            Verdict::Pass => self.passed += 1,
            Verdict::Fail(_) => self.failed += 1,
            Verdict::Unsupported(_) => self.unsupported += 1,
        }
        self.verdicts.push((name.to_string(), v));
    }

    /// Add another report's counts and verdicts.
    pub fn merge(&mut self, other: Report) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.unsupported += other.unsupported;
        self.verdicts.extend(other.verdicts);
    }

    /// The summary line: `vectors: N passed, N failed, N unsupported`.
    pub fn summary(&self) -> String {
        format!(
            "vectors: {} passed, {} failed, {} unsupported",
            self.passed, self.failed, self.unsupported
        )
    }
}

/// Split a file into records. Malformed structure (a body line outside a record, a record
/// without `end`) is an error naming the line.
pub fn parse(text: &str) -> Result<Vec<Record>, String> {
    let mut out = Vec::new();
    let mut cur: Option<Record> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let key = words.next().unwrap_or_default();
        match cur.as_mut() {
            None => {
                let name = words.next().ok_or(format!("line {}: record without a name", i + 1))?;
                let mut fields = HashMap::new();
                for w in words {
                    if let Some((k, v)) = w.split_once('=') {
                        fields.insert(k.to_string(), v.to_string());
                    }
                }
                cur = Some(Record {
                    kind: key.to_string(),
                    name: name.to_string(),
                    line: i + 1,
                    fields,
                    body: HashMap::new(),
                });
            }
            Some(rec) => {
                if key == "end" {
                    out.push(cur.take().expect("inside a record"));
                } else {
                    let rest: Vec<&str> = words.collect();
                    rec.body.insert(key.to_string(), rest.join(""));
                }
            }
        }
    }
    if let Some(rec) = cur {
        return Err(format!("line {}: record {} has no `end`", rec.line, rec.name));
    }
    Ok(out)
}

/// A scalar: `0x` prefix for hex, decimal otherwise.
pub fn scalar(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse::<u64>(),
    };
    r.map_err(|_| format!("bad number {s:?}"))
}

/// A lowercase hex byte string.
pub fn hex(s: &str) -> Result<Vec<u8>, String> {
    if s.len() & 1 != 0 {
        return Err(format!("odd-length hex string ({} digits)", s.len()));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|_| format!("bad hex at {i}")))
        .collect()
}

fn hexs(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A comma-separated list; `-` (or nothing) is the empty list.
fn list(s: Option<&String>) -> Vec<&str> {
    match s.map(|s| s.as_str()) {
        None | Some("-") | Some("") => Vec::new(),
        Some(s) => s.split(',').collect(),
    }
}

impl Record {
    fn get(&self, k: &str) -> Result<&str, String> {
        self.fields.get(k).map(|s| s.as_str()).ok_or(format!("header lacks {k}="))
    }

    fn num(&self, k: &str) -> Result<u64, String> {
        scalar(self.get(k)?)
    }

    fn body_hex(&self, k: &str) -> Result<Vec<u8>, String> {
        hex(self.body.get(k).ok_or(format!("body lacks `{k}`"))?)
    }

    fn body_num(&self, k: &str) -> Result<u64, String> {
        scalar(self.body.get(k).ok_or(format!("body lacks `{k}`"))?)
    }
}

/// The inputs of a `case` record, decoded.
#[derive(Clone, Debug)]
struct CaseInput {
    opcode: u8,
    opmod: u8,
    pi: u16,
    qpn: u32,
    imm: u32,
    raddr: u64,
    rkey: u32,
    flags: SendFlags,
    sig_all: bool,
    wqe_cnt: u32,
    sges: Vec<Sge>,
    inline_pieces: Vec<Vec<u8>>,
}

impl CaseInput {
    fn decode(r: &Record) -> Result<Result<CaseInput, String>, String> {
        let mut flags = SendFlags::empty();
        let mut sig_all = false;
        for f in list(r.fields.get("flags")) {
            match f {
                "signaled" => flags |= SendFlags::SIGNALED,
                "solicited" => flags |= SendFlags::SOLICITED,
                "fence" => flags |= SendFlags::FENCE,
                "inline" => flags |= SendFlags::INLINE,
                "sq_sig_all" => sig_all = true,
                other => return Ok(Err(format!("flag {other} is not modelled"))),
            }
        }
        let opcode = r.num("opcode")? as u8;
        let opmod = r.num("opmod").unwrap_or(0) as u8;
        if !matches!(SendOpcode::from(opcode), SendOpcode::RdmaWrite | SendOpcode::RdmaWriteImm)
            || opmod != 0
        {
            return Ok(Err(format!("opcode {opcode:#x}/opmod {opmod:#x} is not an RDMA WRITE")));
        }
        let mut sges = Vec::new();
        for s in list(r.fields.get("sges")) {
            let p: Vec<&str> = s.split(':').collect();
            if p.len() != 3 {
                return Err(format!("bad sge {s:?}"));
            }
            sges.push(Sge::new(scalar(p[0])?, scalar(p[1])? as u32, Lkey(scalar(p[2])? as u32)));
        }
        let payload = match r.fields.get("inline").map(|s| s.as_str()) {
            None | Some("-") => Vec::new(),
            Some(h) => hex(h)?,
        };
        let mut inline_pieces = Vec::new();
        if flags.contains(SendFlags::INLINE) {
            let lens = list(r.fields.get("inline_lens"));
            if lens.is_empty() {
                inline_pieces.push(payload.clone());
            } else {
                let mut at = 0usize;
                for l in lens {
                    let l = scalar(l)? as usize;
                    let piece = payload.get(at..at + l).ok_or("inline_lens exceed the payload")?;
                    inline_pieces.push(piece.to_vec());
                    at += l;
                }
                if at != payload.len() {
                    return Err("inline_lens do not add up to the payload".to_string());
                }
            }
        }
        Ok(Ok(CaseInput {
            opcode,
            opmod,
            pi: r.num("pi")? as u16,
            qpn: r.num("qpn")? as u32,
            imm: r.num("imm").unwrap_or(0) as u32,
            raddr: r.num("raddr")?,
            rkey: r.num("rkey")? as u32,
            flags,
            sig_all,
            wqe_cnt: r.num("sq_wqe_cnt").unwrap_or(64) as u32,
            sges,
            inline_pieces,
        }))
    }

    fn inline_len(&self) -> usize {
        self.inline_pieces.iter().map(|p| p.len()).sum()
    }

    /// Build the case into `ring` at counter `pi`.
    fn build(&self, ring: &mut SliceRing<'_>, pi: u16) -> Result<WqeInfo, String> {
        let b = WqeBuilder::new(QpNum(self.qpn)).sq_sig_all(self.sig_all);
        let imm = (self.opcode == u8::from(SendOpcode::RdmaWriteImm)).then_some(self.imm);
        let remote = RemoteBuf::new(self.raddr, Rkey(self.rkey));
        let room = ring.wqe_cnt();
        let r = if self.flags.contains(SendFlags::INLINE) {
            let pieces: Vec<&[u8]> = self.inline_pieces.iter().map(|p| p.as_slice()).collect();
            let req = SendRequest::write(0, Source::inline(&pieces), self.flags, remote, imm);
            b.write(ring, pi, room, &req)
        } else {
            b.write_sges(ring, pi, room, &self.sges, self.flags, remote, imm)
        };
        r.map_err(|e| format!("builder refused: {e}"))
    }
}

fn unsupported_flags(r: &Record) -> Option<String> {
    list(r.fields.get("flags"))
        .into_iter()
        .find(|f| matches!(*f, "wq_sig" | "small_fence_pending"))
        .map(|f| format!("flag {f} is not supported"))
}

macro_rules! expect_eq {
    ($what:expr, $got:expr, $want:expr) => {{
        let (g, w) = ($got, $want);
        if g != w {
            return Err(format!("{}: got {:?}, want {:?}", $what, g, w));
        }
    }};
}

/// Byte `k` of a WQE of `ds` units with an inline payload of `inline_len` (0 if none) is
/// don't-care: never written by the provider.
fn dont_care(k: usize, ds: usize, inline: Option<usize>) -> bool {
    if k >= ds * SEND_WQE_DS {
        return true;
    }
    matches!(inline, Some(l) if l > 0 && k >= 36 + l)
}

fn run_case(r: &Record) -> Result<Verdict, String> {
    if let Some(why) = unsupported_flags(r) {
        return Ok(Verdict::Unsupported(why));
    }
    let input = match CaseInput::decode(r)? {
        Ok(i) => i,
        Err(why) => return Ok(Verdict::Unsupported(why)),
    };
    let want_wqe = r.body_hex("wqe")?;
    let (want_ds, want_bbs) = (r.num("ds")? as usize, r.num("wqebbs")? as usize);
    let wqe_cnt = input.wqe_cnt;
    let mut mem = vec![POISON; wqe_cnt as usize * SEND_WQE_BB];
    let mut ring = SliceRing::new(&mut mem, wqe_cnt).map_err(|e| format!("ring: {e}"))?;
    let info = input.build(&mut ring, input.pi)?;

    expect_eq!("ds", info.shape.ds as usize, want_ds);
    expect_eq!("wqebbs", info.shape.wqebbs as usize, want_bbs);
    expect_eq!("fm_ce_se", info.fm_ce_se.bits() as u64, r.num("fm_ce_se")?);
    let slots: Vec<u64> = (0..want_bbs as u32).map(|i| info.slot(i, wqe_cnt) as u64).collect();
    let want_slots: Vec<u64> =
        list(r.fields.get("slots")).into_iter().map(scalar).collect::<Result<_, _>>()?;
    expect_eq!("slots", slots, want_slots);
    expect_eq!("wqe length", want_wqe.len(), want_bbs * SEND_WQE_BB);

    let mut got = vec![0u8; want_bbs * SEND_WQE_BB];
    ring.copy_wqe(input.pi, want_bbs, &mut got);
    let inline = input.flags.contains(SendFlags::INLINE).then(|| input.inline_len());
    for k in 0..got.len() {
        if !dont_care(k, want_ds, inline) && got[k] != want_wqe[k] {
            return Err(format!(
                "wqe byte {k}: got {:02x}, want {:02x}\n  got  {}\n  want {}",
                got[k],
                want_wqe[k],
                hexs(&got),
                hexs(&want_wqe)
            ));
        }
    }
    // Nothing outside the WQE's slots was touched.
    let used: Vec<u32> = (0..want_bbs as u32).map(|i| info.slot(i, wqe_cnt)).collect();
    for s in 0..wqe_cnt {
        if !used.contains(&s) && ring.slot(s).iter().any(|b| *b != POISON) {
            return Err(format!("slot {s} outside the WQE was written"));
        }
    }
    expect_eq!("sig", CtrlSeg::new_unchecked(&got[..]).signature() as u64, r.num("sig")?);
    expect_eq!("dbrec", seg::sq_dbrec(info.next_pi()).to_vec(), r.body_hex("dbrec")?);
    expect_eq!("uar", info.doorbell.to_vec(), r.body_hex("uar")?);
    let bf = seg::bf_len(1, info.shape.ds, BF_SIZE);
    expect_eq!("bf", bf as u64, r.body_num("bf")?);
    check_views(r, &input, &want_wqe)?;
    Ok(Verdict::Pass)
}

/// Parse the expected WQE with the segment views and check it against the header.
fn check_views(r: &Record, input: &CaseInput, wqe: &[u8]) -> Result<(), String> {
    let c = CtrlSeg::new_checked(wqe).map_err(|e| e.to_string())?;
    expect_eq!("view opcode", u8::from(c.opcode()), input.opcode);
    expect_eq!("view opmod", c.opmod(), input.opmod);
    expect_eq!("view wqe_index", c.wqe_index(), input.pi);
    expect_eq!("view qpn", c.qpn(), QpNum(input.qpn & QpNum::MAX));
    expect_eq!("view ds", c.ds() as u64, r.num("ds")?);
    expect_eq!("view fm_ce_se", c.fm_ce_se().bits() as u64, r.num("fm_ce_se")?);
    expect_eq!("view imm", c.imm(), input.imm);
    let ra = RaddrSeg::new_checked(&wqe[16..]).map_err(|e| e.to_string())?;
    expect_eq!("view raddr", ra.raddr(), input.raddr);
    expect_eq!("view rkey", ra.rkey(), Rkey(input.rkey));
    if input.flags.contains(SendFlags::INLINE) {
        let want: Vec<u8> = input.inline_pieces.concat();
        if !want.is_empty() {
            let s = InlineSeg::new_checked(&wqe[32..]).map_err(|e| e.to_string())?;
            expect_eq!("view inline", s.payload(), &want[..]);
        }
    } else {
        let nz: Vec<Sge> = input.sges.iter().copied().filter(|e| e.length != 0).collect();
        for (j, e) in nz.iter().enumerate() {
            let d = DataSeg::new_checked(&wqe[32 + 16 * j..]).map_err(|e| e.to_string())?;
            expect_eq!(format!("view data seg {j}"), d.sge(), *e);
        }
    }
    Ok(())
}

fn run_ring(r: &Record, cases: &HashMap<&str, &Record>) -> Result<Verdict, String> {
    let wqe_cnt = r.num("wqe_cnt")? as u32;
    let mut pi = r.num("start_pi")? as u16;
    let mut mem = vec![0u8; wqe_cnt as usize * SEND_WQE_BB];
    // Per byte: Some(true) written by a later-or-only WQE, Some(false) don't-care, None untouched.
    let mut care: Vec<Option<bool>> = vec![None; mem.len()];
    let posts = list(r.fields.get("posts"));
    if posts.is_empty() {
        return Err("ring without posts".to_string());
    }
    let mut last: Option<WqeInfo> = None;
    {
        let mut ring = SliceRing::new(&mut mem, wqe_cnt).map_err(|e| format!("ring: {e}"))?;
        for name in &posts {
            let c = cases.get(name).ok_or(format!("post {name}: no such case"))?;
            if let Some(why) = unsupported_flags(c) {
                return Ok(Verdict::Unsupported(format!("post {name}: {why}")));
            }
            let input = match CaseInput::decode(c)? {
                Ok(i) => i,
                Err(why) => return Ok(Verdict::Unsupported(format!("post {name}: {why}"))),
            };
            let info = input.build(&mut ring, pi).map_err(|e| format!("post {name}: {e}"))?;
            let inline = input.flags.contains(SendFlags::INLINE).then(|| input.inline_len());
            for k in 0..info.shape.wqebbs as usize * SEND_WQE_BB {
                let at = info.slot((k / SEND_WQE_BB) as u32, wqe_cnt) as usize * SEND_WQE_BB
                    + k % SEND_WQE_BB;
                care[at] = Some(!dont_care(k, info.shape.ds as usize, inline));
            }
            pi = info.next_pi();
            last = Some(info);
        }
    }
    let last = last.expect("at least one post");
    expect_eq!("end_pi", pi as u64, r.num("end_pi")?);
    let want = r.body_hex("image")?;
    expect_eq!("image length", want.len(), mem.len());
    for k in 0..mem.len() {
        let check = care[k] != Some(false);
        if check && mem[k] != want[k] {
            return Err(format!(
                "image byte {k} (slot {}, offset {}): got {:02x}, want {:02x}",
                k / SEND_WQE_BB,
                k % SEND_WQE_BB,
                mem[k],
                want[k]
            ));
        }
    }
    expect_eq!("dbrec", seg::sq_dbrec(pi).to_vec(), r.body_hex("dbrec")?);
    expect_eq!("uar", last.doorbell.to_vec(), r.body_hex("uar")?);
    let bf = seg::bf_len(posts.len() as u32, last.shape.ds, BF_SIZE);
    expect_eq!("bf", bf as u64, r.body_num("bf")?);
    Ok(Verdict::Pass)
}

fn run_cqe(r: &Record) -> Result<Verdict, String> {
    let bytes = r.body_hex("bytes")?;
    expect_eq!("cqe length", bytes.len(), cqe::LEN);
    let c = Cqe::new_checked(&bytes[..]).map_err(|e| e.to_string())?;
    let p = CqeRepr::parse(&c).map_err(|e| e.to_string())?;
    let kind = r.get("kind")?;
    let want_op = match kind {
        "req" => CqeOpcode::Req,
        "req_err" => CqeOpcode::ReqErr,
        "invalid" => CqeOpcode::Invalid,
        other => return Ok(Verdict::Unsupported(format!("cqe kind {other}"))),
    };
    expect_eq!("kind", p.opcode, want_op);
    expect_eq!("op_own", p.op_own as u64, r.num("op_own")?);
    expect_eq!("opcode", u8::from(p.opcode) as u64, r.num("opcode")?);
    expect_eq!("owner", p.owner as u64, r.num("owner")?);
    expect_eq!("wqe_counter", p.wqe_counter as u64, r.num("wqe_counter")?);
    expect_eq!("qpn", p.qpn.0 as u64, r.num("qpn")?);
    expect_eq!("s_wqe_opcode", u8::from(p.s_wqe_opcode) as u64, r.num("s_wqe_opcode")?);
    expect_eq!("byte_cnt", p.byte_cnt as u64, r.num("byte_cnt")?);
    expect_eq!("srqn_uidx", p.srqn_uidx as u64, r.num("srqn_uidx")?);
    match p.error {
        Some((syn, vendor)) => {
            expect_eq!("syndrome", u8::from(syn) as u64, r.num("syndrome")?);
            expect_eq!("vendor_err", vendor as u64, r.num("vendor_err")?);
            expect_eq!("vendor_err (wc)", p.completion(0).vendor_err as u64, r.num("vendor_err")?);
            expect_eq!("status", p.status(), syn.wc_status());
        }
        None => {
            expect_eq!("timestamp", p.timestamp, Some(r.num("timestamp")?));
        }
    }
    let (ci, cnt) = (r.num("cq_index")? as u32, r.num("cqe_cnt")? as u32);
    expect_eq!("sw_owned", c.sw_owned(ci, cnt) as u64, r.num("sw_owned")?);
    expect_eq!("ci_dbrec", cqe::cq_ci_dbrec(ci.wrapping_add(1)).to_vec(), r.body_hex("ci_dbrec")?);
    Ok(Verdict::Pass)
}

/// Run every record of `records`.
pub fn run(records: &[Record]) -> Report {
    let cases: HashMap<&str, &Record> =
        records.iter().filter(|r| r.kind == "case").map(|r| (r.name.as_str(), r)).collect();
    let mut rep = Report::default();
    for r in records {
        let v = match r.kind.as_str() {
            "case" => run_case(r),
            "ring" => run_ring(r, &cases),
            "cqe" => run_cqe(r),
            other => Ok(Verdict::Unsupported(format!("record kind {other}"))),
        };
        rep.add(&r.name, v.unwrap_or_else(|e| Verdict::Fail(format!("line {}: {e}", r.line))));
    }
    rep
}

/// Parse and run a vector file's text; a file that cannot be split into records counts as one
/// failure.
pub fn run_text(name: &str, text: &str) -> Report {
    match parse(text) {
        Ok(records) => run(&records),
        Err(e) => {
            let mut rep = Report::default();
            rep.add(name, Verdict::Fail(e));
            rep
        }
    }
}

/// Read and run a vector file.
pub fn run_file(path: &std::path::Path) -> std::io::Result<Report> {
    let text = std::fs::read_to_string(path)?;
    Ok(run_text(&path.display().to_string(), &text))
}

#[cfg(test)]
mod tests;
