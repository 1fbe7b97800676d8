//! The conformance vectors (format v1: `case` and `cqe` records), when the repository has them:
//! the model's parser must read every field of each vector WQE, and its CQE writer must produce
//! each vector CQE byte for byte. The replays cover the v1 forms (RC WRITE and WRITE WITH IMM,
//! requester CQEs); the verbs-family records (READ, SEND, atomics, UD, responder CQEs) are read
//! here at the control segment and replayed by the driver's vector runner.

use crate::codes::{CqeOpcode, Syndrome};
use crate::cqe::CqeRepr;
use crate::wqe::{wqebbs, CtrlSeg, DataSeg, RaddrSeg};

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn num(s: &str) -> u64 {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap(),
        None => s.parse().unwrap(),
    }
}

pub(super) struct Record {
    name: String,
    kind: String,
    kv: std::collections::BTreeMap<String, String>,
    body: std::collections::BTreeMap<String, String>,
}

/// Every record of every vector file in the repository's `tests/data` (format v1).
fn records() -> Option<Vec<Record>> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/data");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).ok()?;
        if text.lines().any(|l| l.starts_with("case ") || l.starts_with("cqe ")) {
            parse(&text, &mut out);
        }
    }
    Some(out)
}

/// A v1 `case`: an RC WRITE or WRITE WITH IMM.
fn is_write(r: &Record) -> bool {
    r.kind == "case"
        && r.kv.get("qp_type").is_none_or(|t| t == "rc")
        && matches!(r.kv["opcode"].as_str(), "0x08" | "0x09")
}

fn parse(text: &str, out: &mut Vec<Record>) {
    let mut cur: Option<Record> = None;
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let mut words = line.split_whitespace();
        let key = words.next().unwrap();
        match (key, &mut cur) {
            ("end", c) => out.push(c.take().unwrap()),
            (k, None) => {
                let mut kv = std::collections::BTreeMap::new();
                let name = words.next().unwrap_or("").to_string();
                for w in words {
                    if let Some((a, b)) = w.split_once('=') {
                        kv.insert(a.to_string(), b.to_string());
                    }
                }
                cur = Some(Record { name, kind: k.to_string(), kv, body: Default::default() });
            }
            (k, Some(r)) => {
                r.body.insert(k.to_string(), words.next().unwrap_or("").to_string());
            }
        }
    }
}

#[test]
fn vector_wqes_parse_field_by_field() {
    let Some(recs) = records() else { return };
    let mut n = 0;
    for r in recs.iter().filter(|r| r.kind == "case") {
        let w = hex(&r.body["wqe"]);
        let c = CtrlSeg::new_checked(&w[..]).unwrap();
        assert_eq!(u64::from(c.opcode_raw()), num(&r.kv["opcode"]));
        assert_eq!(u64::from(c.opmod()), num(&r.kv["opmod"]));
        assert_eq!(u64::from(c.wqe_index()), num(&r.kv["pi"]));
        assert_eq!(u64::from(c.qpn()), num(&r.kv["qpn"]));
        assert_eq!(u64::from(c.ds()), num(&r.kv["ds"]));
        assert_eq!(u64::from(wqebbs(c.ds())), num(&r.kv["wqebbs"]));
        assert_eq!(u64::from(c.fm_ce_se()), num(&r.kv["fm_ce_se"]));
        assert_eq!(u64::from(u32::from_be_bytes(c.imm())), num(&r.kv["imm"]));
        assert_eq!(c.head().to_vec(), hex(&r.body["uar"]));
        n += 1;
        if !is_write(r) {
            continue;
        }
        let ra = RaddrSeg::new_checked(&w[16..]).unwrap();
        assert_eq!(ra.raddr(), num(&r.kv["raddr"]));
        assert_eq!(u64::from(ra.rkey()), num(&r.kv["rkey"]));
        if r.kv["sges"] != "-" {
            let sges: Vec<_> = r.kv["sges"]
                .split(',')
                .map(|s| s.split(':').map(num).collect::<Vec<_>>())
                .collect();
            for (k, s) in sges.iter().filter(|s| s[1] != 0).enumerate() {
                let d = DataSeg::new_checked(&w[32 + 16 * k..]).unwrap();
                assert!(!d.is_inline());
                assert_eq!((d.addr(), d.length(), u64::from(d.lkey())), (s[0], s[1], s[2]));
            }
        } else if r.kv["inline"] != "-" {
            let d = DataSeg::new_checked(&w[32..]).unwrap();
            assert!(d.is_inline());
            let data = hex(&r.kv["inline"]);
            assert_eq!(d.inline_len(), data.len());
            assert_eq!(&w[36..36 + data.len()], &data[..]);
        }
    }
    assert!(n > 0);
}

#[test]
fn vector_cqes_are_reproduced_byte_for_byte() {
    let Some(recs) = records() else { return };
    let mut n = 0;
    for r in recs
        .iter()
        .filter(|r| r.kind == "cqe" && matches!(r.kv["kind"].as_str(), "req" | "req_err"))
    {
        let op = CqeOpcode::from(num(&r.kv["opcode"]) as u8);
        let mut c = CqeRepr::new(op, num(&r.kv["qpn"]) as u32);
        c.owner = num(&r.kv["owner"]) == 1;
        c.wqe_counter = num(&r.kv["wqe_counter"]) as u16;
        c.s_wqe_opcode = num(&r.kv["s_wqe_opcode"]) as u8;
        c.byte_cnt = num(&r.kv["byte_cnt"]) as u32;
        c.timestamp = num(&r.kv["timestamp"]);
        c.srqn_uidx = num(&r.kv["srqn_uidx"]) as u32;
        if op == CqeOpcode::ReqErr {
            c.syndrome = Some(Syndrome::from(num(&r.kv["syndrome"]) as u8));
            c.vendor_err = num(&r.kv["vendor_err"]) as u8;
        }
        let mut out = [0u8; 64];
        c.emit(&mut out);
        assert_eq!(out.to_vec(), hex(&r.body["bytes"]), "{}", r.name);
        n += 1;
    }
    assert!(n > 0);
}

/// One WR of a replay: the `case` record it comes from and its WQE index.
struct Post<'a> {
    case: &'a Record,
    pi: u16,
}

/// The payload of a case: `(addr, len, lkey)` of each non-zero SGE, or the inline bytes.
enum Payload {
    Sges(Vec<(u64, u64, u32)>),
    Inline(Vec<u8>),
}

fn payload(r: &Record) -> Payload {
    if r.kv["sges"] == "-" {
        let inl = &r.kv["inline"];
        return Payload::Inline(if inl == "-" { Vec::new() } else { hex(inl) });
    }
    Payload::Sges(
        r.kv["sges"]
            .split(',')
            .map(|s| s.split(':').map(num).collect::<Vec<_>>())
            .filter(|s| s[1] != 0)
            .map(|s| (s[0], s[1], s[2] as u32))
            .collect(),
    )
}

/// Replay WRs through a model exactly as the vectors lay them out (ring blocks, doorbell
/// record, doorbell or BlueFlame bytes) and check everything the HCA must do: the data each
/// lands, one REQ CQE per signaled WR with its index and opcode, responder CQEs for WRITE WITH
/// IMM, and no validation failure.
/// Whether every range of the WRs fits the 64-bit address space (a key covering a range that
/// wraps cannot be registered, so such a vector cannot be replayed end to end).
fn registrable(posts: &[Post]) -> bool {
    posts.iter().all(|p| {
        let (sges_ok, len) = match payload(p.case) {
            Payload::Sges(s) => (
                s.iter().all(|&(at, len, _)| at.checked_add(len).is_some()),
                s.iter().map(|s| s.1).sum::<u64>(),
            ),
            Payload::Inline(d) => (true, d.len() as u64),
        };
        sges_ok && num(&p.case.kv["raddr"]).checked_add(len).is_some()
    })
}

#[allow(clippy::too_many_arguments)]
fn replay(
    name: &str,
    posts: &[Post],
    sq_cnt: u64,
    start_pi: u16,
    blocks: &[(u64, Vec<u8>)],
    dbrec: &[u8],
    uar: &[u8],
    bf: &[u8],
) {
    use std::collections::BTreeMap;

    use super::harness::*;
    use crate::objects::{Mkey, Rights, Xlate};
    use rdma_pmd_hal::{barrier, Dma, Mmio};

    let qpn = num(&posts[0].case.kv["qpn"]) as u32;
    let mut env = Env::new();
    let mut cq_a = env.cq(6);
    let mut cq_b = env.cq(6);
    let mut a = env.qp(&cq_a, &cq_a, sq_cnt.trailing_zeros() as u8, None);
    let mut b = env.qp(&cq_b, &cq_b, 6, Some(6));
    let sh = env.model.shared().clone();
    sh.test_renumber_qp(a.qpn, qpn);
    a.qpn = qpn;
    env.connect_loopback(&a, &b);
    sh.test_set_sq_counter(qpn, start_pi);

    // Every key the WRs use, with the span it must cover.
    let mut spans: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    let mut widen = |key: u32, at: u64, len: u64| {
        let e = spans.entry(key).or_insert((at, at + len));
        e.0 = e.0.min(at);
        e.1 = e.1.max(at + len);
    };
    let mut total = Vec::new();
    for p in posts {
        let len = match payload(p.case) {
            Payload::Sges(s) => {
                s.iter().for_each(|&(at, len, key)| widen(key, at, len));
                s.iter().map(|s| s.1).sum()
            }
            Payload::Inline(d) => d.len() as u64,
        };
        if len > 0 {
            widen(num(&p.case.kv["rkey"]) as u32, num(&p.case.kv["raddr"]), len);
        }
        total.push(len);
    }
    // One buffer per key; `shadow` is what it must hold at the end.
    let mut bufs = BTreeMap::new();
    let mut shadow: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
    for (&key, &(lo, hi)) in &spans {
        let page = lo & !0xfff;
        let len = (hi - page) as usize;
        let buf = env.dma.alloc(len, 4096).unwrap();
        // A key-dependent pattern with a prime period, built with memcpy (MBs per case).
        let period: Vec<u8> = (0..251u32).map(|i| (i ^ key).wrapping_mul(0x9e37) as u8).collect();
        let mut init = period.repeat(len / 251 + 1);
        init.truncate(len);
        assert!(env.dma.write(buf.bus(), &init)); // memcpy: these buffers can be MBs
        let mk = Mkey {
            pd: env.pd.0,
            start: lo,
            len: hi - lo,
            rights: Rights {
                local_write: true,
                remote_write: true,
                remote_read: false,
                remote_atomic: false,
            },
            xlate: Xlate::Mtt { base: buf.bus().0, page_shift: 12 },
        };
        sh.test_mkey_with_key(key, mk);
        bufs.insert(key, (page, buf));
        shadow.insert(key, init);
    }
    let mut imms = Vec::new();
    for p in posts {
        let data = match payload(p.case) {
            Payload::Inline(d) => d,
            Payload::Sges(s) => {
                let mut d = Vec::new();
                for (at, len, key) in s {
                    let o = (at - bufs[&key].0) as usize;
                    d.extend_from_slice(&shadow[&key][o..o + len as usize]);
                }
                d
            }
        };
        if !data.is_empty() {
            let key = num(&p.case.kv["rkey"]) as u32;
            let o = (num(&p.case.kv["raddr"]) - bufs[&key].0) as usize;
            shadow.get_mut(&key).unwrap()[o..o + data.len()].copy_from_slice(&data);
        }
        if p.case.kv["opcode"] == "0x09" {
            post_recv(&mut b, 0, 0, 0x100);
            imms.push((num(&p.case.kv["imm"]) as u32, data.len() as u32));
        }
    }

    for (slot, blk) in blocks {
        a.buf.write_bytes(a.sq_off + *slot as usize * 64, blk);
    }
    barrier::to_device();
    a.dbrec.write_bytes(4, dbrec);
    barrier::to_device();
    let reg = a.uar_off + 0x800;
    if bf.is_empty() {
        env.bar.write_bytes8(reg, uar.try_into().unwrap());
    } else {
        for (i, chunk) in bf.chunks(64).enumerate() {
            let mut w = [0u64; 8];
            for (j, c) in chunk.chunks(8).enumerate() {
                w[j] = u64::from_ne_bytes(c.try_into().unwrap());
            }
            env.bar.write_wc64(reg + i * 64, &w);
        }
    }
    barrier::wc_flush();

    for (p, len) in posts.iter().zip(&total) {
        if num(&p.case.kv["fm_ce_se"]) & 0x08 != 0 {
            let c = poll(&mut cq_a);
            assert_eq!(c.opcode(), 0, "{name}: {c:?} {:?}", env.model.violations());
            assert_eq!(c.wqe_counter(), p.pi, "{name}");
            assert_eq!(c.sop_qpn(), (num(&p.case.kv["opcode"]) as u32) << 24 | qpn, "{name}");
            assert_eq!(u64::from(c.byte_cnt()), *len, "{name}");
        }
    }
    assert_empty(&env.model, &cq_a);
    for (i, (imm, len)) in imms.iter().enumerate() {
        let c = poll(&mut cq_b);
        assert_eq!((c.opcode(), c.imm(), c.byte_cnt()), (1, imm.to_be_bytes(), *len), "{name}");
        assert_eq!(c.wqe_counter(), i as u16, "{name}");
    }
    for (key, (_, buf)) in &bufs {
        let mut got = vec![0u8; buf.len()];
        assert!(env.dma.read(buf.bus(), &mut got));
        assert!(got == shadow[key], "{name}: memory of key {key:#x}");
    }
    let wq_sig = posts.iter().any(|p| p.case.kv["flags"].contains("wq_sig"));
    let v: Vec<_> = env
        .model
        .violations()
        .into_iter()
        .filter(|v| !(wq_sig && matches!(v.reason, crate::Reason::Reserved { what } if what.starts_with("signature"))))
        .collect();
    assert!(v.is_empty(), "{name}: {v:?}");
}

#[test]
fn vector_cases_execute_on_the_model() {
    let Some(recs) = records() else { return };
    let (mut n, mut skipped) = (0, 0);
    for r in recs.iter().filter(|r| is_write(r)) {
        let pi = num(&r.kv["pi"]) as u16;
        if !registrable(&[Post { case: r, pi }]) {
            skipped += 1;
            continue;
        }
        let w = hex(&r.body["wqe"]);
        let blocks: Vec<(u64, Vec<u8>)> =
            r.kv["slots"].split(',').map(num).zip(w.chunks(64).map(<[u8]>::to_vec)).collect();
        let bf_len = num(&r.body["bf"]) as usize;
        replay(
            &r.name,
            &[Post { case: r, pi }],
            num(&r.kv["sq_wqe_cnt"]),
            pi,
            &blocks,
            &hex(&r.body["dbrec"]),
            &hex(&r.body["uar"]),
            &w[..bf_len],
        );
        n += 1;
    }
    assert!(n > 0 && skipped * 10 < n, "{n} replayed, {skipped} skipped");
}

#[test]
fn vector_rings_execute_on_the_model() {
    let Some(recs) = records() else { return };
    let cases: std::collections::BTreeMap<&str, &Record> =
        recs.iter().filter(|r| r.kind == "case").map(|r| (r.name.as_str(), r)).collect();
    let mut n = 0;
    let writes_only = |r: &&Record| r.kv["posts"].split(',').all(|p| is_write(cases[p]));
    for r in recs.iter().filter(|r| r.kind == "ring").filter(writes_only) {
        let start = num(&r.kv["start_pi"]) as u16;
        let mut pi = start;
        let mut posts = Vec::new();
        for name in r.kv["posts"].split(',') {
            let case = cases[name];
            posts.push(Post { case, pi });
            pi = pi.wrapping_add(num(&case.kv["wqebbs"]) as u16);
        }
        assert_eq!(u64::from(pi), num(&r.kv["end_pi"]), "{}", r.name);
        let image = hex(&r.body["image"]);
        let blocks: Vec<(u64, Vec<u8>)> =
            image.chunks(64).enumerate().map(|(i, b)| (i as u64, b.to_vec())).collect();
        // A BlueFlame copy (one WR only) is the last WQE, read from the image with wrap.
        let bf_len = num(&r.body["bf"]) as usize;
        let last = posts.last().unwrap().pi as usize;
        let bf: Vec<u8> =
            (0..bf_len / 64).flat_map(|i| blocks[(last + i) % blocks.len()].1.clone()).collect();
        replay(
            &r.name,
            &posts,
            num(&r.kv["wqe_cnt"]),
            start,
            &blocks,
            &hex(&r.body["dbrec"]),
            &hex(&r.body["uar"]),
            &bf,
        );
        n += 1;
    }
    assert!(n > 0);
}
