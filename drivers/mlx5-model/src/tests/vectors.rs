//! The conformance vectors (format v1: `case` and `cqe` records), when the repository has them:
//! the model's parser must read every field of each vector WQE, and its CQE writer must produce
//! each vector CQE byte for byte.

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

struct Record {
    kind: String,
    kv: std::collections::BTreeMap<String, String>,
    body: std::collections::BTreeMap<String, String>,
}

fn records() -> Option<Vec<Record>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/data/mlx5-public.txt");
    let text = std::fs::read_to_string(path).ok()?;
    let mut out = Vec::new();
    let mut cur: Option<Record> = None;
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let mut words = line.split_whitespace();
        let key = words.next().unwrap();
        match (key, &mut cur) {
            ("end", c) => out.push(c.take().unwrap()),
            (k, None) => {
                let mut kv = std::collections::BTreeMap::new();
                for w in words.skip(1) {
                    if let Some((a, b)) = w.split_once('=') {
                        kv.insert(a.to_string(), b.to_string());
                    }
                }
                cur = Some(Record { kind: k.to_string(), kv, body: Default::default() });
            }
            (k, Some(r)) => {
                r.body.insert(k.to_string(), words.next().unwrap_or("").to_string());
            }
        }
    }
    Some(out)
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
        } else {
            let d = DataSeg::new_checked(&w[32..]).unwrap();
            assert!(d.is_inline());
            let data = hex(&r.kv["inline"]);
            assert_eq!(d.inline_len(), data.len());
            assert_eq!(&w[36..36 + data.len()], &data[..]);
        }
        n += 1;
    }
    assert!(n > 0);
}

#[test]
fn vector_cqes_are_reproduced_byte_for_byte() {
    let Some(recs) = records() else { return };
    let mut n = 0;
    for r in recs.iter().filter(|r| r.kind == "cqe") {
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
        assert_eq!(out.to_vec(), hex(&r.body["bytes"]), "{}", r.kv.get("kind").unwrap());
        n += 1;
    }
    assert!(n > 0);
}
