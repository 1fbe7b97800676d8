//! The packet layer against independent vectors, and against hostile bytes.
//!
//! `vectors/roce-scapy.txt` holds frames built by scapy (`vectors/roce_gen.py`: scapy's
//! Ether/Dot1Q/IP/IPv6/UDP layers and `contrib.roce`'s BTH, which computes the ICRC; the
//! extension headers packed with Python's `struct`). Every vector is parsed field by field,
//! its ICRC recomputed, and the frame re-emitted from its parsed headers byte for byte. No
//! Python runs at test time.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use rdma_pmd::Mac;

use super::bth::{Opcode, Operation, Transport};
use super::ext::{Aeth, AtomicEth, Deth, ExtRepr, Reth, Syndrome};
use super::packet::{bth, ipv4_gids, IpRepr, RocePacket, RoceRepr, MIN_FRAME};
use super::{icrc, Layer, Malformed};
use crate::roce::rng::SplitMix;

const VECTORS: &str = include_str!("../../vectors/roce-scapy.txt");

struct Vector {
    name: String,
    expect: String,
    frame: Vec<u8>,
    payload: Vec<u8>,
    fields: BTreeMap<String, String>,
}

fn unhex(s: &str) -> Vec<u8> {
    if s == "-" {
        return Vec::new();
    }
    assert!(s.len() % 2 == 0, "odd hex {s}");
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn vectors() -> Vec<Vector> {
    let mut out = Vec::new();
    let mut cur: Option<Vector> = None;
    for line in VECTORS.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (k, v) = line.split_once(' ').unwrap_or((line, ""));
        match k {
            "vector" => {
                cur = Some(Vector {
                    name: v.to_string(),
                    expect: String::new(),
                    frame: Vec::new(),
                    payload: Vec::new(),
                    fields: BTreeMap::new(),
                })
            }
            "end" => out.push(cur.take().expect("end without vector")),
            _ => {
                let c = cur.as_mut().expect("field outside a vector");
                match k {
                    "expect" => c.expect = v.to_string(),
                    "frame" => c.frame = unhex(v),
                    "payload" => c.payload = unhex(v),
                    _ => {
                        c.fields.insert(k.to_string(), v.to_string());
                    }
                }
            }
        }
    }
    assert!(cur.is_none(), "unterminated vector");
    out
}

fn mac(m: &Mac) -> String {
    let b = m.0;
    format!("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2], b[3], b[4], b[5])
}

/// The parsed packet in the vector file's vocabulary.
fn fields_of(p: &RocePacket<'_>, frame: &[u8]) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        m.insert(k.to_string(), v);
    };
    let h = |v: u64| format!("{v:#x}");
    put("eth.dst", mac(&p.eth.dst));
    put("eth.src", mac(&p.eth.src));
    if let Some(t) = p.eth.vlan {
        put("eth.vlan", format!("{}/{}", t.pcp, t.vid));
    }
    match p.ip {
        IpRepr::V4(r) => {
            put("ip.version", h(4));
            put("ip.src", r.src.to_string());
            put("ip.dst", r.dst.to_string());
            put("ip.tc", h(r.tos.into()));
            put("ip.hop", h(r.ttl.into()));
            put("ip.id", h(r.ident.into()));
        }
        IpRepr::V6(r) => {
            put("ip.version", h(6));
            put("ip.src", r.src.to_string());
            put("ip.dst", r.dst.to_string());
            put("ip.tc", h(r.traffic_class.into()));
            put("ip.hop", h(r.hop_limit.into()));
            put("ip.flow", h(r.flow_label.into()));
        }
    }
    put("udp.sport", h(p.udp.src_port.into()));
    let b = &p.bth;
    put("bth.opcode", h(b.opcode.0.into()));
    put("bth.se", h(b.solicited.into()));
    put("bth.mig", h(b.mig_req.into()));
    put("bth.pad", h(p.pad.into()));
    put("bth.pkey", h(b.pkey.into()));
    put("bth.fecn", h(b.fecn.into()));
    put("bth.becn", h(b.becn.into()));
    put("bth.destqp", h(b.dest_qp.into()));
    put("bth.ackreq", h(b.ack_req.into()));
    put("bth.psn", h(b.psn.into()));
    let e = &p.ext;
    if let Some(r) = e.reth {
        put("reth.va", h(r.va));
        put("reth.rkey", h(r.rkey.into()));
        put("reth.len", h(r.dma_len.into()));
    }
    if let Some(a) = e.aeth {
        put("aeth.syndrome", h(a.syndrome.to_byte().into()));
        put("aeth.msn", h(a.msn.into()));
    }
    if let Some(a) = e.atomic_eth {
        put("atomic.va", h(a.va));
        put("atomic.rkey", h(a.rkey.into()));
        put("atomic.swap", h(a.swap_add));
        put("atomic.compare", h(a.compare));
    }
    if let Some(v) = e.atomic_ack {
        put("atomicack.orig", h(v));
    }
    if let Some(v) = e.immdt {
        put("immdt", h(v.into()));
    }
    if let Some(v) = e.ieth {
        put("ieth", h(v.into()));
    }
    if let Some(d) = e.deth {
        put("deth.qkey", h(d.qkey.into()));
        put("deth.srcqp", h(d.src_qp.into()));
    }
    put("payload.len", h(p.payload.len() as u64));
    let end = p.eth.header_len() + p.ip.header_len() + p.ip_payload_len();
    put("icrc", frame[end - 4..end].iter().map(|b| format!("{b:02x}")).collect());
    m
}

impl RocePacket<'_> {
    fn ip_payload_len(&self) -> usize {
        match self.ip {
            IpRepr::V4(r) => r.payload_len,
            IpRepr::V6(r) => r.payload_len,
        }
    }
}

fn l3_of<'a>(p: &RocePacket<'_>, frame: &'a [u8]) -> &'a [u8] {
    let s = p.eth.header_len();
    &frame[s..s + p.ip.header_len() + p.ip_payload_len()]
}

#[test]
fn scapy_vectors_parse_field_by_field() {
    let vs = vectors();
    assert_eq!(vs.len(), 103, "the vector file changed: update this count");
    let mut opcodes = BTreeSet::new();
    let (mut v4, mut v6, mut tagged, mut failing) = (0, 0, 0, 0);
    for v in &vs {
        let got = RocePacket::parse(&v.frame);
        match v.expect.as_str() {
            "ok" => {}
            "icrc" => {
                failing += 1;
                match got {
                    Err(Malformed::Icrc { stored, computed }) => {
                        // scapy wrote the field's value 0x12345678 big-endian.
                        assert_eq!(stored, u32::from_le_bytes([0x12, 0x34, 0x56, 0x78]));
                        assert_ne!(stored, computed, "{}", v.name);
                    }
                    other => panic!("{}: {other:?}, expected an ICRC error", v.name),
                }
                continue;
            }
            "ipv4 checksum" => {
                failing += 1;
                assert_eq!(got.unwrap_err(), Malformed::Ipv4Checksum, "{}", v.name);
                continue;
            }
            other => panic!("{}: unknown expectation {other}", v.name),
        }
        let p = got.unwrap_or_else(|e| panic!("{}: {e}", v.name));
        let mine = fields_of(&p, &v.frame);
        for (k, want) in &v.fields {
            let have = mine.get(k).unwrap_or_else(|| panic!("{}: no field {k} parsed", v.name));
            if k == "ip.src" || k == "ip.dst" {
                let a: IpAddr = want.parse().unwrap();
                let b: IpAddr = have.parse().unwrap();
                assert_eq!(a, b, "{}: {k}", v.name);
            } else {
                assert_eq!(have, want, "{}: {k}", v.name);
            }
        }
        for k in mine.keys() {
            assert!(v.fields.contains_key(k), "{}: parsed {k}, which the vector lacks", v.name);
        }
        assert_eq!(p.payload, &v.payload[..], "{}: payload", v.name);
        // The ICRC recomputed over the frame is the one scapy stored.
        let l3 = l3_of(&p, &v.frame);
        assert_eq!(icrc::compute(l3).unwrap(), icrc::stored(l3).unwrap(), "{}", v.name);
        assert_eq!(p.icrc, icrc::stored(l3).unwrap());
        opcodes.insert(p.bth.opcode.0);
        match p.ip {
            IpRepr::V4(_) => v4 += 1,
            IpRepr::V6(_) => v6 += 1,
        }
        tagged += usize::from(p.eth.vlan.is_some());
    }
    // Every opcode of the table (RC 23, UC 12, UD 2) is covered, over both IP versions.
    let table: BTreeSet<u8> = (0..=255u8)
        .filter(|o| Opcode(*o).headers().is_some() && Opcode(*o).transport() != Transport::Cnp)
        .collect();
    assert_eq!(opcodes, table);
    assert!(v4 >= 45 && v6 >= 45 && tagged == 4 && failing == 5, "{v4} {v6} {tagged} {failing}");
}

#[test]
fn scapy_vectors_re_emit_byte_for_byte() {
    for v in vectors().iter().filter(|v| v.expect == "ok") {
        let p = RocePacket::parse(&v.frame).unwrap();
        let mut buf = vec![0xa5u8; v.frame.len().max(MIN_FRAME) + 8];
        let n = p.repr().emit(p.payload, &mut buf).unwrap();
        assert_eq!(n, v.frame.len().max(MIN_FRAME), "{}", v.name);
        assert_eq!(&buf[..v.frame.len()], &v.frame[..], "{}", v.name);
        assert!(buf[v.frame.len()..n].iter().all(|b| *b == 0), "{}: Ethernet pad", v.name);
        // A frame with Ethernet padding parses to the same packet.
        assert_eq!(RocePacket::parse(&buf[..n]).unwrap(), p, "{}", v.name);
    }
}

#[test]
fn flipping_any_covered_bit_fails_the_icrc() {
    // A flip anywhere before the ICRC is caught, by the ICRC or an earlier check, except in
    // the fields the ICRC masks: IPv6 traffic class, flow label and hop limit, and the BTH's
    // FECN/BECN byte. (The masked UDP checksum is still checked by UDP when non-zero.)
    let vs = vectors();
    let v = vs.iter().find(|v| v.name.starts_with("RC_WRITE_ONLY_IMM_v6")).unwrap();
    let p = RocePacket::parse(&v.frame).unwrap();
    let s = p.eth.header_len();
    let l3_len = p.ip.header_len() + p.ip_payload_len();
    let masked6 = [0usize, 1, 2, 3, 7, 48 + 4];
    for off in 0..l3_len - 4 {
        let mut f = v.frame.clone();
        f[s + off] ^= if off == 0 { 0x01 } else { 0x80 };
        let r = RocePacket::parse(&f);
        if masked6.contains(&off) {
            assert!(r.is_ok(), "offset {off}: masked field, ICRC unaffected: {r:?}");
        } else {
            assert!(r.is_err(), "offset {off}: flip not detected");
        }
    }
}

/// Frames of several opcodes built with the model's builder, for the port tests.
pub(crate) fn sample_frames(dst: Mac, src: Mac) -> Vec<Vec<u8>> {
    let (g4s, g4d) = ipv4_gids([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
    let g6s = "fd00::1".parse::<std::net::Ipv6Addr>().unwrap().octets();
    let g6d = "fd00::2".parse::<std::net::Ipv6Addr>().unwrap().octets();
    let mut out = Vec::new();
    for (i, (s, d)) in [(g4s, g4d), (g6s, g6d)].into_iter().enumerate() {
        let ip = IpRepr::between(s, d, 0x68, 64);
        let base = |op: Opcode, ext: ExtRepr| RoceRepr {
            dst_mac: dst,
            src_mac: src,
            vlan: None,
            ip,
            udp_src_port: 0xc000 | i as u16,
            bth: bth(op, 0x12, 100),
            ext,
        };
        let reth = Some(Reth { va: 0x1000, rkey: 0x77, dma_len: 3000 });
        let ack = Some(Aeth { syndrome: Syndrome::Ack { credits: 0x1f }, msn: 3 });
        let cases: Vec<(RoceRepr, Vec<u8>)> = vec![
            (base(Opcode::RC_SEND_ONLY, ExtRepr::default()), vec![]),
            (base(Opcode::RC_SEND_ONLY, ExtRepr::default()), vec![1; 5]),
            (base(Opcode::RC_WRITE_FIRST, ExtRepr { reth, ..ExtRepr::default() }), vec![2; 1024]),
            (base(Opcode::RC_WRITE_MIDDLE, ExtRepr::default()), vec![3; 1024]),
            (
                base(Opcode::RC_WRITE_LAST_IMM, ExtRepr { immdt: Some(9), ..ExtRepr::default() }),
                vec![4; 3],
            ),
            (base(Opcode::RC_READ_REQUEST, ExtRepr { reth, ..ExtRepr::default() }), vec![]),
            (base(Opcode::RC_ACKNOWLEDGE, ExtRepr { aeth: ack, ..ExtRepr::default() }), vec![]),
            (
                base(
                    Opcode::RC_COMPARE_SWAP,
                    ExtRepr {
                        atomic_eth: Some(AtomicEth { va: 8, rkey: 1, swap_add: 2, compare: 3 }),
                        ..ExtRepr::default()
                    },
                ),
                vec![],
            ),
            (
                base(
                    Opcode::UD_SEND_ONLY_IMM,
                    ExtRepr {
                        deth: Some(Deth { qkey: 0x8001_0000, src_qp: 1 }),
                        immdt: Some(0xdead_beef),
                        ..ExtRepr::default()
                    },
                ),
                vec![5; 256],
            ),
            (base(Opcode::CNP, ExtRepr::default()), vec![0; 16]),
        ];
        for (r, pl) in cases {
            out.push(r.to_frame(&pl).unwrap());
        }
    }
    out
}

#[test]
fn builder_round_trips_through_the_parser() {
    let (a, b) = (Mac([2, 0, 0, 0, 0, 1]), Mac([2, 0, 0, 0, 0, 2]));
    for f in sample_frames(b, a) {
        let p = RocePacket::parse(&f).unwrap();
        assert_eq!(p.eth.dst, b);
        assert_eq!(p.repr().to_frame(p.payload).unwrap(), f);
        assert!(f.len() >= MIN_FRAME);
        let l3 = l3_of(&p, &f);
        assert_eq!(p.icrc, crate::roce::icrc::compute(l3).unwrap());
    }
}

#[test]
fn builder_refuses_a_wrong_shape() {
    let (s, d) = ipv4_gids([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
    let r = RoceRepr {
        dst_mac: Mac([2, 0, 0, 0, 0, 2]),
        src_mac: Mac([2, 0, 0, 0, 0, 1]),
        vlan: None,
        ip: IpRepr::between(s, d, 0, 64),
        udp_src_port: 0xc000,
        bth: bth(Opcode::RC_WRITE_ONLY, 1, 0),
        ext: ExtRepr::default(),
    };
    use super::packet::BuildError;
    assert!(matches!(r.to_frame(b"x"), Err(BuildError::Headers { .. })));
    let r2 = RoceRepr { bth: bth(Opcode::RC_ACKNOWLEDGE, 1, 0), ..r };
    let ack = ExtRepr {
        aeth: Some(Aeth { syndrome: Syndrome::Ack { credits: 0 }, msn: 0 }),
        ..ExtRepr::default()
    };
    assert_eq!(RoceRepr { ext: ack, ..r2 }.to_frame(b"x"), Err(BuildError::Payload));
    assert_eq!(
        RoceRepr { bth: bth(Opcode(0x44), 1, 0), ..r }.to_frame(b""),
        Err(BuildError::Opcode(0x44))
    );
    let mut small = [0u8; 10];
    assert_eq!(
        RoceRepr { bth: bth(Opcode::RC_SEND_ONLY, 1, 0), ..r }.emit(b"", &mut small),
        Err(BuildError::Buffer { need: MIN_FRAME })
    );
    assert_eq!(Operation::from(0x15), Operation::Unknown(0x15));
}

#[test]
fn each_receive_check_names_itself() {
    let (a, b) = (Mac([2, 0, 0, 0, 0, 1]), Mac([2, 0, 0, 0, 0, 2]));
    let frames = sample_frames(b, a);
    let v4 = &frames[1]; // RC SEND_ONLY, 5 bytes, IPv4: 14 + 20 + 8 + 12 + 5 + 3 + 4 = 66
    let v6 = &frames[11];
    let case = |base: &Vec<u8>, f: &dyn Fn(&mut Vec<u8>)| {
        let mut x = base.clone();
        f(&mut x);
        RocePacket::parse(&x).unwrap_err()
    };
    let fix_csum = |x: &mut Vec<u8>| {
        let mut p = super::ipv4::Ipv4Packet::new_unchecked(&mut x[14..34]);
        p.fill_checksum();
    };
    assert_eq!(case(v4, &|x| x.truncate(10)), Malformed::Truncated(Layer::Ethernet));
    assert_eq!(case(v4, &|x| x.truncate(30)), Malformed::Truncated(Layer::Ipv4));
    assert_eq!(case(v4, &|x| x[13] = 0x06), Malformed::EtherType(0x0806));
    assert_eq!(case(v4, &|x| x[14] = 0x55), Malformed::IpVersion(5));
    assert_eq!(case(v4, &|x| x[14] = 0x44), Malformed::Ipv4HeaderLen(4));
    assert_eq!(case(v4, &|x| x[22] ^= 1), Malformed::Ipv4Checksum);
    assert_eq!(
        case(v4, &|x| {
            x[20] = 0x20;
            fix_csum(x)
        }),
        Malformed::Ipv4Fragment
    );
    assert_eq!(
        case(v4, &|x| {
            x[23] = 6;
            fix_csum(x)
        }),
        Malformed::IpProtocol(6)
    );
    assert_eq!(
        case(v4, &|x| {
            x[17] += 1;
            fix_csum(x)
        }),
        Malformed::IpLength
    );
    assert_eq!(case(v4, &|x| x[39] += 1), Malformed::UdpLength);
    assert_eq!(case(v4, &|x| x[37] = 0xb8), Malformed::UdpPort(4792));
    assert_eq!(case(v4, &|x| x[40] = 0x12), Malformed::UdpChecksum);
    assert_eq!(case(v4, &|x| x[43] |= 1), Malformed::BthVersion(1));
    assert_eq!(case(v4, &|x| x[42] = 0x15), Malformed::Opcode(0x15));
    assert_eq!(case(v4, &|x| x[42] = 0x13), Malformed::Truncated(Layer::Extension));
    assert!(matches!(case(v4, &|x| x[60] ^= 1), Malformed::Icrc { .. }));
    assert_eq!(case(v6, &|x| x[14] = 0x40), Malformed::IpVersion(4));
    assert_eq!(case(v6, &|x| x[20] = 0x3a), Malformed::IpProtocol(0x3a));
    assert_eq!(case(v6, &|x| x[19] += 1), Malformed::IpLength);
}

#[test]
fn hostile_bytes_never_panic() {
    let mut rng = SplitMix::new(0x5eed);
    let (a, b) = (Mac([2, 0, 0, 0, 0, 1]), Mac([2, 0, 0, 0, 0, 2]));
    let mut seeds: Vec<Vec<u8>> = sample_frames(b, a);
    seeds.extend(vectors().into_iter().map(|v| v.frame));
    let cases: usize =
        std::env::var("RDMA_PMD_HOSTILE_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let mut accepted = 0usize;
    for i in 0..cases {
        let base = &seeds[i % seeds.len()];
        let mut f = match i % 4 {
            // Pure noise of any length, with a RoCE-looking prefix half the time.
            0 => {
                let n = rng.below(200) as usize;
                let mut f: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
                if i % 8 == 0 && n > 14 {
                    f[..14].copy_from_slice(&base[..14]);
                }
                f
            }
            // A valid frame cut anywhere.
            1 => base[..rng.below(base.len() as u64 + 1) as usize].to_vec(),
            // A valid frame with a few random bytes rewritten.
            _ => {
                let mut f = base.clone();
                for _ in 0..1 + rng.below(4) {
                    let at = rng.below(f.len() as u64) as usize;
                    f[at] = rng.next_u64() as u8;
                }
                f
            }
        };
        if let Ok(p) = RocePacket::parse(&f) {
            accepted += 1;
            // Whatever is accepted re-emits and re-parses to the same headers.
            let again = p.repr().to_frame(p.payload).unwrap();
            let q = RocePacket::parse(&again).unwrap();
            assert_eq!((q.bth, q.ext, q.payload), (p.bth, p.ext, p.payload));
        }
        f.clear();
    }
    assert!(accepted > 0, "some unharmed frames must parse");
}
