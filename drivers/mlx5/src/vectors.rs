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

use rdma_pmd::{
    AtomicOp, Dest, Gid, Lkey, Mac, QpNum, RemoteBuf, Rkey, RoceAddr, SendFlags, SendOp,
    SendRequest, Sge, Source, UdDest, WcStatus,
};

use crate::datapath::recv::{recv_entries, responder_completion};
use crate::datapath::send::requester_byte_len;
use crate::datapath::wqe::{SliceRing, WqeBuilder, WqeInfo, WqeSink};
use crate::layout::codes::{CqeOpcode, SendOpcode, SEND_WQE_BB, SEND_WQE_DS};
use crate::layout::cqe::{self, Cqe, CqeRepr};
use crate::layout::wqe as seg;
use crate::layout::wqe::{CtrlSeg, DataSeg, InlineSeg, RaddrSeg, SEG_LEN};

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
    /// The atomic's operation, for opcodes 0x11 and 0x12.
    atomic: Option<AtomicOp>,
    /// The datagram destination of a UD case.
    ud: Option<UdDest>,
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
        let ud_qp = match r.fields.get("qp_type").map(|s| s.as_str()) {
            None | Some("rc") => false,
            Some("ud") => true,
            Some(other) => return Ok(Err(format!("qp_type {other} is not modelled"))),
        };
        use SendOpcode::*;
        let posted = match SendOpcode::from(opcode) {
            RdmaWrite | RdmaWriteImm | RdmaRead | AtomicCs | AtomicFa => !ud_qp,
            Send | SendImm => true,
            _ => false,
        };
        if !posted || opmod != 0 {
            return Ok(Err(format!(
                "opcode {opcode:#x}/opmod {opmod:#x} is not one this API posts"
            )));
        }
        let atomic = match SendOpcode::from(opcode) {
            AtomicCs => {
                Some(AtomicOp::CompareSwap { compare: r.num("compare")?, swap: r.num("swap")? })
            }
            AtomicFa => Some(AtomicOp::FetchAdd { add: r.num("add")? }),
            _ => None,
        };
        if atomic.is_some() && list(r.fields.get("sges")).len() != 1 {
            return Ok(Err("an atomic's result is one buffer in this API".to_string()));
        }
        let ud = if ud_qp {
            let mut dgid = [0u8; 16];
            dgid.copy_from_slice(&hex(r.get("dgid")?)?);
            let mut dmac = [0u8; 6];
            dmac.copy_from_slice(&hex(r.get("dmac")?)?);
            Some(UdDest {
                addr: RoceAddr {
                    dgid: Gid(dgid),
                    dmac: Mac(dmac),
                    sgid_index: r.num("sgid_index")? as u8,
                    udp_sport: r.num("sport")? as u16,
                    hop_limit: r.num("hop_limit")? as u8,
                    traffic_class: r.num("tclass")? as u8,
                    flow_label: r.num("flow_label")? as u32,
                    sl: r.num("sl")? as u8,
                    static_rate: r.num("static_rate")? as u8,
                },
                qpn: QpNum(r.num("dqpn")? as u32),
                qkey: r.num("qkey")? as u32,
            })
        } else {
            None
        };
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
            atomic,
            ud,
        }))
    }

    /// `ds` units before the payload (control segment included), as the builder's head.
    fn header_units(&self) -> usize {
        match SendOpcode::from(self.opcode) {
            _ if self.ud.is_some() => 4,
            SendOpcode::Send | SendOpcode::SendImm => 1,
            SendOpcode::AtomicCs | SendOpcode::AtomicFa => 3,
            _ => 2,
        }
    }

    fn inline_len(&self) -> usize {
        self.inline_pieces.iter().map(|p| p.len()).sum()
    }

    /// Build the case into `ring` at counter `pi`.
    fn build(&self, ring: &mut SliceRing<'_>, pi: u16) -> Result<WqeInfo, String> {
        let b =
            WqeBuilder::new(QpNum(self.qpn)).sq_sig_all(self.sig_all).datagram(self.ud.is_some());
        let op = SendOpcode::from(self.opcode);
        let imm = matches!(op, SendOpcode::RdmaWriteImm | SendOpcode::SendImm).then_some(self.imm);
        let remote = RemoteBuf::new(self.raddr, Rkey(self.rkey));
        let room = ring.wqe_cnt();
        let pieces: Vec<&[u8]> = self.inline_pieces.iter().map(|p| p.as_slice()).collect();
        let source = if self.flags.contains(SendFlags::INLINE) {
            Source::inline(&pieces)
        } else {
            // SAFETY: the elements are only copied into the WQE, never dereferenced.
            unsafe { Source::raw(&self.sges) }
        };
        // SAFETY: as above.
        let dest = unsafe { Dest::raw(&self.sges) };
        let op = match op {
            SendOpcode::RdmaWrite | SendOpcode::RdmaWriteImm => {
                SendOp::Write { source, remote, imm }
            }
            SendOpcode::Send | SendOpcode::SendImm => SendOp::Send { source, imm, ud: self.ud },
            SendOpcode::RdmaRead => SendOp::Read { dest, remote },
            _ => SendOp::Atomic { dest, remote, op: self.atomic.ok_or("atomic without operands")? },
        };
        let req = SendRequest { wr_id: 0, flags: self.flags, op };
        b.write(ring, pi, room, &req).map_err(|e| format!("builder refused: {e}"))
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

/// Byte `k` of a WQE of `ds` units, whose payload starts after `hdr` units, with an inline
/// payload of `inline_len` (0 if none) is don't-care: never written by the provider (the tail
/// past `ds`, inline padding, and the `compare` word of a fetch-and-add).
fn dont_care(k: usize, ds: usize, hdr: usize, inline: Option<usize>, fetch_add: bool) -> bool {
    if k >= ds * SEND_WQE_DS {
        return true;
    }
    if fetch_add && (40..48).contains(&k) {
        return true;
    }
    matches!(inline, Some(l) if l > 0 && k >= hdr * SEND_WQE_DS + 4 + l)
}

impl CaseInput {
    fn dont_care(&self, k: usize, ds: usize) -> bool {
        let inline = self.flags.contains(SendFlags::INLINE).then(|| self.inline_len());
        let fa = SendOpcode::from(self.opcode) == SendOpcode::AtomicFa;
        dont_care(k, ds, self.header_units(), inline, fa)
    }
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
    for k in 0..got.len() {
        if !input.dont_care(k, want_ds) && got[k] != want_wqe[k] {
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
    let hdr = input.header_units() * SEND_WQE_DS;
    if hdr >= 32 && input.ud.is_none() {
        let ra = RaddrSeg::new_checked(&wqe[16..]).map_err(|e| e.to_string())?;
        expect_eq!("view raddr", ra.raddr(), input.raddr);
        expect_eq!("view rkey", ra.rkey(), Rkey(input.rkey));
    }
    if let Some(d) = &input.ud {
        let av = &wqe[16..16 + seg::DATAGRAM_LEN];
        expect_eq!("view av qkey", be32(&av[seg::av::QKEY..]), d.qkey);
        expect_eq!(
            "view av dqpn",
            be32(&av[seg::av::DQP_DCT..]) & QpNum::MAX,
            d.qpn.0 & QpNum::MAX
        );
        expect_eq!("view av rgid", &av[seg::av::RGID..seg::av::RGID + 16], &d.addr.dgid.0[..]);
        expect_eq!("view av rmac", &av[seg::av::RMAC..seg::av::RMAC + 6], &d.addr.dmac.0[..]);
    }
    if input.flags.contains(SendFlags::INLINE) {
        let want: Vec<u8> = input.inline_pieces.concat();
        if !want.is_empty() {
            let s = InlineSeg::new_checked(&wqe[hdr..]).map_err(|e| e.to_string())?;
            expect_eq!("view inline", s.payload(), &want[..]);
        }
    } else {
        let atomic = input.atomic.is_some();
        let nz: Vec<Sge> = input.sges.iter().copied().filter(|e| e.length != 0).collect();
        for (j, e) in nz.iter().enumerate() {
            let d = DataSeg::new_checked(&wqe[hdr + 16 * j..]).map_err(|e| e.to_string())?;
            // An atomic's data segment counts 8 bytes whatever the element's length.
            let want = if atomic { Sge::new(e.addr, 8, e.lkey) } else { *e };
            expect_eq!(format!("view data seg {j}"), d.sge(), want);
        }
    }
    Ok(())
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
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
            for k in 0..info.shape.wqebbs as usize * SEND_WQE_BB {
                let at = info.slot((k / SEND_WQE_BB) as u32, wqe_cnt) as usize * SEND_WQE_BB
                    + k % SEND_WQE_BB;
                care[at] = Some(!input.dont_care(k, info.shape.ds as usize));
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

/// A `recv` record: one `ibv_post_recv` into a receive queue of `stride`-byte WQEs.
fn run_recv(r: &Record) -> Result<Verdict, String> {
    let stride = r.num("stride")? as usize;
    let max = stride / SEG_LEN;
    let head = r.num("head")? as u16;
    let wqe_cnt = r.num("wqe_cnt")? as u32;
    let mut sges = Vec::new();
    for e in list(r.fields.get("sges")) {
        let p: Vec<&str> = e.split(':').collect();
        if p.len() != 3 {
            return Err(format!("bad sge {e:?}"));
        }
        sges.push(Sge::new(scalar(p[0])?, scalar(p[1])? as u32, Lkey(scalar(p[2])? as u32)));
    }
    if sges.len() > max {
        return Err(format!("{} elements for {max} entries", sges.len()));
    }
    let mut got = vec![POISON; stride];
    let n = recv_entries(sges.iter().copied(), max, |k, e| {
        got[k * SEG_LEN..(k + 1) * SEG_LEN].copy_from_slice(&DataSeg::encode(&e));
    });
    let want = r.body_hex("wqe")?;
    expect_eq!("wqe length", want.len(), stride);
    // Entries past the last one written are never touched by the provider.
    for k in 0..n * SEG_LEN {
        if got[k] != want[k] {
            return Err(format!("wqe byte {k}: got {}, want {}", hexs(&got), hexs(&want)));
        }
    }
    if let Ok(e) = r.num("entries") {
        let term = r.num("terminator").unwrap_or(0);
        expect_eq!("entries written", n as u64, e + term);
    }
    expect_eq!("slot", (head as u32 & (wqe_cnt - 1)) as u64, r.body_num("slot")?);
    let dbrec = (head.wrapping_add(1) as u32).to_be_bytes().to_vec();
    expect_eq!("dbrec", dbrec, r.body_hex("dbrec")?);
    Ok(Verdict::Pass)
}

/// Compare an optional decimal/hex header value (`-` means "not set by the provider").
fn want_opt(r: &Record, k: &str) -> Result<Option<u64>, String> {
    match r.get(k)? {
        "-" => Ok(None),
        v => scalar(v).map(Some),
    }
}

/// The `ibv_wc` fields of a `cqe` record that carries them (`wc_status` present).
fn check_wc(r: &Record, c: &Cqe<&[u8]>, p: &CqeRepr, kind: &str) -> Result<(), String> {
    let wc = match kind {
        "resp_send" | "resp_send_imm" | "resp_wr_imm" | "resp_err" => {
            responder_completion(c, p, 0, p.qpn).map_err(|e| e.to_string())?
        }
        _ => {
            let mut wc = p.completion(0);
            if wc.status == WcStatus::Success {
                if let Some(op) = p.s_wqe_opcode.wc_opcode() {
                    wc.opcode = op;
                }
                wc.byte_len = requester_byte_len(p.s_wqe_opcode, p.byte_cnt);
            }
            wc
        }
    };
    expect_eq!("wc_status", u32::from(wc.status) as u64, r.num("wc_status")?);
    expect_eq!("wc_qp_num", wc.qp_num.0 as u64, r.num("wc_qp_num")?);
    if let Some(v) = want_opt(r, "wc_vendor_err")? {
        expect_eq!("wc_vendor_err", wc.vendor_err as u64, v);
    }
    // The rest is defined for successful completions only.
    if wc.status != WcStatus::Success {
        return Ok(());
    }
    if let Some(op) = want_opt(r, "wc_opcode")? {
        expect_eq!("wc_opcode", u32::from(wc.opcode) as u64, op);
    }
    if let Some(n) = want_opt(r, "wc_byte_len")? {
        expect_eq!("wc_byte_len", wc.byte_len as u64, n);
    }
    let mut flags = wc.flags().bits() as u64;
    // A requester completion of a SEND or WRITE WITH IMMEDIATE: the provider sets
    // IBV_WC_WITH_IMM with no immediate data to go with it; this API reports the immediate
    // only where there is one (`Completion::imm`), so the flag is absent here by design.
    let req_imm =
        kind == "req" && matches!(p.s_wqe_opcode, SendOpcode::RdmaWriteImm | SendOpcode::SendImm);
    if req_imm {
        flags |= rdma_pmd::WcFlags::WITH_IMM.bits() as u64;
    }
    expect_eq!("wc_flags", flags, r.num("wc_flags")?);
    if let Some(imm) = want_opt(r, "wc_imm")? {
        expect_eq!("wc_imm", wc.imm.map(u64::from), Some(imm));
    } else if !req_imm {
        expect_eq!("wc_imm", wc.imm, None);
    }
    if let Some(q) = want_opt(r, "wc_src_qp")? {
        expect_eq!("wc_src_qp", wc.src_qp.0 as u64, q);
    }
    Ok(())
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
        "resp_send" => CqeOpcode::RespSend,
        "resp_send_imm" => CqeOpcode::RespSendImm,
        "resp_wr_imm" => CqeOpcode::RespWrImm,
        "resp_err" => CqeOpcode::RespErr,
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
    if r.fields.contains_key("wc_status") {
        let view = Cqe::new_checked(&bytes[..]).map_err(|e| e.to_string())?;
        check_wc(r, &view, &p, kind)?;
    }
    if let Ok(f) = r.num("flags_rqpn") {
        expect_eq!("flags_rqpn", c.flags_rqpn() as u64, f);
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
            "recv" => run_recv(r),
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
