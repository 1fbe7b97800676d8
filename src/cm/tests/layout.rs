//! The CM layouts against `include/rdma/ibta_vol1_c12.h`, field by field.
//!
//! Each row below is one `CM_*` definition transcribed from the kernel header in its own
//! notation (`CM_FIELD32_LOC(struct, byte, width)`, `CM_FIELD_BLOC(struct, byte, bit, width)`,
//! ...). The expected bytes are computed the way `include/rdma/iba.h` does it: the macro names
//! a container (8, 16, 32 or 64 bits, big-endian, at the byte offset rounded down to the
//! container size, plus the 24-byte MAD header) and a `GENMASK` within it; `IBA_SET` is
//! `container = (container & ~mask) | FIELD_PREP(mask, value)`. That arithmetic shares nothing
//! with the bit walk of [`crate::cm::field`], so a wrong row in our tables shows here.

use crate::cm::cma::{service_id, CmaHdr, RDMA_PS_TCP};
use crate::cm::mad::*;

/// Where a field is, in the header's macro notation (CM offsets, after the MAD header).
#[derive(Clone, Copy, Debug)]
enum Loc {
    /// `CM_FIELD_BLOC(s, byte, bit, width)`.
    B(usize, u32, u32),
    /// `CM_FIELD8_LOC(s, byte, width)`.
    L8(usize, u32),
    /// `CM_FIELD16_LOC(s, byte, width)`.
    L16(usize, u32),
    /// `CM_FIELD32_LOC(s, byte, width)`.
    L32(usize, u32),
    /// `CM_FIELD64_LOC(s, byte)`.
    L64(usize),
    /// A MAD header field (`struct ib_mad_hdr`): byte offset and size in bytes, whole bytes.
    Hdr(usize, usize),
}

use Loc::*;

/// `GENMASK_ULL(h, l)`.
fn genmask(h: u32, l: u32) -> u64 {
    (u64::MAX >> (63 - h)) & !((1u64 << l) - 1)
}

/// `(container offset in the MAD, container bytes, mask)` as `iba.h` computes them.
fn container(loc: Loc) -> (usize, usize, u64) {
    let hdr = MAD_HDR_LEN;
    match loc {
        B(o, bit, w) => (o + hdr, 1, genmask(7 - bit, 7 - bit - (w - 1))),
        L8(o, w) => container(B(o, 0, w)),
        L16(o, w) => {
            let o = o + hdr;
            let h = 15 - (o as u32 % 2) * 8;
            (o & 0xfffe, 2, genmask(h, h - (w - 1)))
        }
        L32(o, w) => {
            let o = o + hdr;
            let h = 31 - (o as u32 % 4) * 8;
            (o & 0xfffc, 4, genmask(h, h - (w - 1)))
        }
        L64(o) => (o + hdr, 8, u64::MAX),
        Hdr(o, n) => (o, n, if n == 8 { u64::MAX } else { (1u64 << (8 * n)) - 1 }),
    }
}

fn width(loc: Loc) -> u32 {
    match loc {
        B(_, _, w) | L8(_, w) | L16(_, w) | L32(_, w) => w,
        L64(_) => 64,
        Hdr(_, n) => 8 * n as u32,
    }
}

/// `IBA_SET` on a copy of `buf`.
fn iba_set(buf: &[u8; MAD_LEN], loc: Loc, v: u64) -> [u8; MAD_LEN] {
    let (off, n, mask) = container(loc);
    let mut out = *buf;
    let mut c = 0u64;
    for &b in &out[off..off + n] {
        c = (c << 8) | b as u64;
    }
    let shift = mask.trailing_zeros();
    c = (c & !mask) | ((v << shift) & mask);
    for i in 0..n {
        out[off + n - 1 - i] = (c >> (8 * i)) as u8;
    }
    out
}

struct Row {
    name: &'static str,
    loc: Loc,
    set: fn(&mut [u8; MAD_LEN], u64),
    get: fn(&[u8; MAD_LEN]) -> u64,
}

macro_rules! rows {
    ($($msg:ident { $($get:ident / $set:ident = $loc:expr;)* })*) => {
        &[ $($( Row {
            name: concat!(stringify!($msg), ".", stringify!($get)),
            loc: $loc,
            set: |b, v| $msg::new_checked(&mut b[..]).unwrap().$set(v as _),
            get: |b| $msg::new_checked(&b[..]).unwrap().$get() as u64,
        }, )*)* ]
    };
}

/// Every field of the seven messages, as `ibta_vol1_c12.h` defines it (tables 106 to 113),
/// and the MAD header as `struct ib_mad_hdr` lays it out.
const ROWS: &[Row] = rows! {
    MadHdr {
        base_version / set_base_version = Hdr(0, 1);
        mgmt_class / set_mgmt_class = Hdr(1, 1);
        class_version / set_class_version = Hdr(2, 1);
        method / set_method = Hdr(3, 1);
        status / set_status = Hdr(4, 2);
        class_specific / set_class_specific = Hdr(6, 2);
        tid / set_tid = Hdr(8, 8);
        attr_id / set_attr_id = Hdr(16, 2);
        resv / set_resv = Hdr(18, 2);
        attr_mod / set_attr_mod = Hdr(20, 4);
    }
    Req {
        local_comm_id / set_local_comm_id = L32(0, 32);
        service_id / set_service_id = L64(8);
        local_ca_guid / set_local_ca_guid = L64(16);
        local_qkey / set_local_qkey = L32(28, 32);
        local_qpn / set_local_qpn = L32(32, 24);
        responder_resources / set_responder_resources = L8(35, 8);
        local_eecn / set_local_eecn = L32(36, 24);
        initiator_depth / set_initiator_depth = L8(39, 8);
        remote_eecn / set_remote_eecn = L32(40, 24);
        remote_cm_response_timeout / set_remote_cm_response_timeout = L8(43, 5);
        transport_service_type / set_transport_service_type = B(43, 5, 2);
        end_to_end_flow_control / set_end_to_end_flow_control = B(43, 7, 1);
        starting_psn / set_starting_psn = L32(44, 24);
        local_cm_response_timeout / set_local_cm_response_timeout = L8(47, 5);
        retry_count / set_retry_count = B(47, 5, 3);
        partition_key / set_partition_key = L16(48, 16);
        path_mtu / set_path_mtu = L8(50, 4);
        rdc_exists / set_rdc_exists = B(50, 4, 1);
        rnr_retry_count / set_rnr_retry_count = B(50, 5, 3);
        max_cm_retries / set_max_cm_retries = L8(51, 4);
        srq / set_srq = B(51, 4, 1);
        extended_transport_type / set_extended_transport_type = B(51, 5, 3);
        primary_local_lid / set_primary_local_lid = L16(52, 16);
        primary_remote_lid / set_primary_remote_lid = L16(54, 16);
        primary_flow_label / set_primary_flow_label = L32(88, 20);
        primary_packet_rate / set_primary_packet_rate = B(91, 2, 6);
        primary_traffic_class / set_primary_traffic_class = L8(92, 8);
        primary_hop_limit / set_primary_hop_limit = L8(93, 8);
        primary_sl / set_primary_sl = L8(94, 4);
        primary_subnet_local / set_primary_subnet_local = B(94, 4, 1);
        primary_local_ack_timeout / set_primary_local_ack_timeout = L8(95, 5);
        alternate_local_lid / set_alternate_local_lid = L16(96, 16);
        alternate_remote_lid / set_alternate_remote_lid = L16(98, 16);
        alternate_flow_label / set_alternate_flow_label = L32(132, 20);
        alternate_packet_rate / set_alternate_packet_rate = B(135, 2, 6);
        alternate_traffic_class / set_alternate_traffic_class = L8(136, 8);
        alternate_hop_limit / set_alternate_hop_limit = L8(137, 8);
        alternate_sl / set_alternate_sl = L8(138, 4);
        alternate_subnet_local / set_alternate_subnet_local = B(138, 4, 1);
        alternate_local_ack_timeout / set_alternate_local_ack_timeout = L8(139, 5);
        sap_supported / set_sap_supported = B(139, 5, 1);
    }
    Mra {
        local_comm_id / set_local_comm_id = L32(0, 32);
        remote_comm_id / set_remote_comm_id = L32(4, 32);
        message_mraed / set_message_mraed = L8(8, 2);
        service_timeout / set_service_timeout = L8(9, 5);
    }
    Rej {
        local_comm_id / set_local_comm_id = L32(0, 32);
        remote_comm_id / set_remote_comm_id = L32(4, 32);
        message_rejected / set_message_rejected = L8(8, 2);
        rejected_info_length / set_rejected_info_length = L8(9, 7);
        reason / set_reason = L16(10, 16);
    }
    Rep {
        local_comm_id / set_local_comm_id = L32(0, 32);
        remote_comm_id / set_remote_comm_id = L32(4, 32);
        local_qkey / set_local_qkey = L32(8, 32);
        local_qpn / set_local_qpn = L32(12, 24);
        local_eecn / set_local_eecn = L32(16, 24);
        starting_psn / set_starting_psn = L32(20, 24);
        responder_resources / set_responder_resources = L8(24, 8);
        initiator_depth / set_initiator_depth = L8(25, 8);
        target_ack_delay / set_target_ack_delay = L8(26, 5);
        failover_accepted / set_failover_accepted = B(26, 5, 2);
        end_to_end_flow_control / set_end_to_end_flow_control = B(26, 7, 1);
        rnr_retry_count / set_rnr_retry_count = L8(27, 3);
        srq / set_srq = B(27, 3, 1);
        local_ca_guid / set_local_ca_guid = L64(28);
    }
    Rtu {
        local_comm_id / set_local_comm_id = L32(0, 32);
        remote_comm_id / set_remote_comm_id = L32(4, 32);
    }
    Dreq {
        local_comm_id / set_local_comm_id = L32(0, 32);
        remote_comm_id / set_remote_comm_id = L32(4, 32);
        remote_qpn_eecn / set_remote_qpn_eecn = L32(8, 24);
    }
    Drep {
        local_comm_id / set_local_comm_id = L32(0, 32);
        remote_comm_id / set_remote_comm_id = L32(4, 32);
    }
};

/// A value of `w` bits, different for every row and with both ends of the field set.
fn value(i: usize, w: u32) -> u64 {
    let mask = if w == 64 { u64::MAX } else { (1u64 << w) - 1 };
    let x = (0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i as u64 + 1)) ^ 0xa5a5_5a5a_0f0f_f0f0;
    (x | 1 | (1u64 << (w - 1))) & mask
}

#[test]
fn every_field_lands_where_ibta_vol1_c12_puts_it() {
    for (i, r) in ROWS.iter().enumerate() {
        let w = width(r.loc);
        for poison in [0x00u8, 0xff, 0xa5] {
            let base = [poison; MAD_LEN];
            let v = value(i, w);
            let mut got = base;
            (r.set)(&mut got, v);
            assert_eq!(got, iba_set(&base, r.loc, v), "{} set to {v:#x} over {poison:#x}", r.name);
            assert_eq!((r.get)(&got), v, "{} reads back", r.name);
            // A value wider than the field keeps only its low bits and touches nothing else.
            let mut wide = base;
            (r.set)(&mut wide, u64::MAX);
            assert_eq!(wide, iba_set(&base, r.loc, u64::MAX), "{} set to all ones", r.name);
        }
    }
}

#[test]
fn the_fields_of_each_message_are_disjoint() {
    // All fields of one message set to distinct values on one buffer: each reads back, so no
    // two rows of a table overlap.
    let mut start = 0;
    while start < ROWS.len() {
        let msg = ROWS[start].name.split('.').next().unwrap();
        let end = start + ROWS[start..].iter().take_while(|r| r.name.starts_with(msg)).count();
        let mut buf = [0u8; MAD_LEN];
        let mut want = [0u8; MAD_LEN];
        for (i, r) in ROWS[start..end].iter().enumerate() {
            let v = value(i + 100, width(r.loc));
            (r.set)(&mut buf, v);
            want = iba_set(&want, r.loc, v);
        }
        assert_eq!(buf, want, "{msg}");
        for (i, r) in ROWS[start..end].iter().enumerate() {
            assert_eq!((r.get)(&buf), value(i + 100, width(r.loc)), "{}", r.name);
        }
        start = end;
    }
}

#[test]
fn private_data_and_byte_fields_sit_at_their_iba_field_mloc() {
    // CM_FIELD_MLOC offsets and sizes (bits / 8), and IB_CM_*_PRIVATE_DATA_SIZE.
    assert_eq!(
        (Req::<&[u8]>::PRIVATE_DATA_OFFSET, Req::<&[u8]>::PRIVATE_DATA_LEN),
        (24 + 140, 736 / 8)
    );
    assert_eq!(
        (Mra::<&[u8]>::PRIVATE_DATA_OFFSET, Mra::<&[u8]>::PRIVATE_DATA_LEN),
        (24 + 10, 1776 / 8)
    );
    assert_eq!(
        (Rej::<&[u8]>::PRIVATE_DATA_OFFSET, Rej::<&[u8]>::PRIVATE_DATA_LEN),
        (24 + 84, 1184 / 8)
    );
    assert_eq!(
        (Rep::<&[u8]>::PRIVATE_DATA_OFFSET, Rep::<&[u8]>::PRIVATE_DATA_LEN),
        (24 + 36, 1568 / 8)
    );
    assert_eq!(
        (Rtu::<&[u8]>::PRIVATE_DATA_OFFSET, Rtu::<&[u8]>::PRIVATE_DATA_LEN),
        (24 + 8, 1792 / 8)
    );
    assert_eq!(
        (Dreq::<&[u8]>::PRIVATE_DATA_OFFSET, Dreq::<&[u8]>::PRIVATE_DATA_LEN),
        (24 + 12, 1760 / 8)
    );
    assert_eq!(
        (Drep::<&[u8]>::PRIVATE_DATA_OFFSET, Drep::<&[u8]>::PRIVATE_DATA_LEN),
        (24 + 8, 1792 / 8)
    );
    // Each message's private data ends at the end of the MAD (CM_STRUCT's total length).
    for (off, len) in [(164, 92), (34, 222), (108, 148), (60, 196), (32, 224), (36, 220)] {
        assert_eq!(off + len, MAD_LEN);
    }
    let mut buf = [0x5au8; MAD_LEN];
    let mut req = Req::new_checked(&mut buf[..]).unwrap();
    let g: [u8; 16] = core::array::from_fn(|i| i as u8 + 1);
    req.set_primary_local_gid(&g);
    req.set_primary_remote_gid(&g.map(|b| b + 0x10));
    req.set_alternate_local_gid(&g.map(|b| b + 0x20));
    req.set_alternate_remote_gid(&g.map(|b| b + 0x30));
    req.set_private_data(&[0xee; 3]);
    // CM_REQ_PRIMARY_LOCAL_PORT_GID at 56, REMOTE at 72, ALTERNATE at 100 and 116.
    assert_eq!(&buf[24 + 56..24 + 72], &g);
    assert_eq!(buf[24 + 72], 0x11);
    assert_eq!(buf[24 + 100], 0x21);
    assert_eq!(buf[24 + 116], 0x31);
    assert_eq!(&buf[164..167], &[0xee; 3]);
    assert!(buf[167..].iter().all(|&b| b == 0), "the rest of the private data is zeroed");
    assert_eq!(buf[163], 0x5a, "the byte before is untouched");
    let mut rej = [0u8; MAD_LEN];
    Rej::new_checked(&mut rej[..]).unwrap().set_ari(&[0xcc; 72]);
    assert!(rej[24 + 12..24 + 84].iter().all(|&b| b == 0xcc) && rej[24 + 84] == 0);
}

#[test]
fn short_buffers_are_refused_and_the_header_is_checked() {
    assert_eq!(Req::new_checked(&[0u8; 255][..]).unwrap_err(), MadError::TooShort { len: 255 });
    let mut buf = [0u8; MAD_LEN];
    Rtu::new_checked(&mut buf[..]).unwrap().hdr_mut().emit_cm(AttrId::Rtu, 0x1122_3344_5566_7788);
    // cm_format_mad_hdr: base version 1, class 7, class version 2, method 3; tid; attr 0x14.
    assert_eq!(
        &buf[..24],
        &[
            1, 7, 2, 3, 0, 0, 0, 0, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0, 0x14, 0, 0,
            0, 0, 0, 0
        ]
    );
    assert_eq!(MadHdr::new_checked(&buf[..]).unwrap().check_cm(), Ok(AttrId::Rtu));
    buf[2] = 1;
    assert!(matches!(
        MadHdr::new_checked(&buf[..]).unwrap().check_cm(),
        Err(MadError::NotCm { .. })
    ));
    // Attribute IDs as include/rdma/ib_cm.h numbers them.
    let ids = [
        AttrId::Req,
        AttrId::Mra,
        AttrId::Rej,
        AttrId::Rep,
        AttrId::Rtu,
        AttrId::Dreq,
        AttrId::Drep,
    ];
    for (i, a) in ids.iter().enumerate() {
        assert_eq!(a.raw(), 0x10 + i as u16);
    }
}

#[test]
fn the_cma_header_and_service_id_follow_cma_c() {
    // cma_get_service_id: (RDMA_PS_TCP << 16) + port; rping's port 7174.
    assert_eq!(service_id(RDMA_PS_TCP, 7174), 0x0000_0000_0106_1c06);
    let mut b = [0xffu8; 40];
    let src = core::net::SocketAddr::from(([192, 168, 1, 2], 0x1234));
    CmaHdr::new_checked(&mut b[..]).unwrap().emit(src, [10, 0, 0, 9].into()).unwrap();
    let mut want = [0u8; 36];
    want[1] = 0x40;
    want[2..4].copy_from_slice(&[0x12, 0x34]);
    want[16..20].copy_from_slice(&[192, 168, 1, 2]);
    want[32..36].copy_from_slice(&[10, 0, 0, 9]);
    assert_eq!(&b[..36], &want);
    assert_eq!(b[36], 0xff);
    let h = CmaHdr::new_checked(&b[..]).unwrap();
    assert_eq!(h.addrs(), Some((src, [10, 0, 0, 9].into())));
    b[0] = 1;
    assert_eq!(CmaHdr::new_checked(&b[..]).unwrap().addrs(), None, "cma_version must be 0");
}

#[test]
fn the_grh_source_is_read_for_ipv4_and_ipv6() {
    let mut grh = [0u8; 40];
    grh[20] = 0x45;
    grh[32..36].copy_from_slice(&[10, 1, 2, 3]);
    assert_eq!(grh_source(&grh), Ok(crate::Gid::from_ipv4([10, 1, 2, 3])));
    let mut v6 = [0u8; 40];
    v6[0] = 0x60;
    v6[8..24].copy_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(grh_source(&v6).unwrap().0[0], 0xfe);
    assert_eq!(grh_source(&[0u8; 40]), Err(MadError::BadGrh));
}

/// SIDR_REQ and SIDR_REP (IBTA tables 119, 120) against bytes written by hand from
/// `ibta_vol1_c12.h`. Offsets are the header's plus the 24-byte MAD header:
/// `CM_SIDR_REQ_REQUESTID CM_FIELD32_LOC(.., 0, 32)` → MAD bytes 24..28;
/// `CM_SIDR_REQ_PARTITION_KEY CM_FIELD16_LOC(.., 4, 16)` → 28..30 (30..32 reserved);
/// `CM_SIDR_REQ_SERVICEID CM_FIELD64_LOC(.., 8)` → 32..40; private data from 16 → 40..256.
/// `CM_SIDR_REP_REQUESTID (0, 32)` → 24..28; `STATUS CM_FIELD8_LOC(.., 4, 8)` → 28;
/// `ADDITIONAL_INFORMATION_LENGTH (5, 8)` → 29 (30..32 reserved);
/// `QPN CM_FIELD32_LOC(.., 8, 24)` → the high 24 bits of 32..36, so 32..35 (35 reserved);
/// `SERVICEID CM_FIELD64_LOC(.., 12)` → 36..44; `Q_KEY (20, 32)` → 44..48;
/// `ADDITIONAL_INFORMATION CM_FIELD_MLOC(.., 24, 576)` → 48..120; private data from 96
/// (1088 bits, 136 bytes) → 120..256.
#[test]
fn sidr_messages_sit_where_ibta_vol1_c12_puts_them() {
    let mut req = [0u8; MAD_LEN];
    req[24..28].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    req[28..30].copy_from_slice(&[0x7f, 0xff]);
    req[32..40].copy_from_slice(&[0, 0, 0, 0, 0x01, 0x06, 0x1c, 0x06]);
    req[40] = 0xaa;
    let r = SidrReq::new_checked(&req[..]).unwrap();
    assert_eq!((r.request_id(), r.partition_key()), (0xdead_beef, 0x7fff));
    assert_eq!(r.service_id(), 0x0106_1c06);
    assert_eq!(SidrReq::<&[u8]>::PRIVATE_DATA_OFFSET, 40);
    assert_eq!(r.private_data().len(), 216);
    assert_eq!(r.private_data()[0], 0xaa);

    // Every field set through the view, into a buffer of poison bytes.
    let mut m = [0xeeu8; MAD_LEN];
    let mut rep = SidrRep::new_checked(&mut m[..]).unwrap();
    rep.set_request_id(0x0102_0304);
    rep.set_status(SidrStatus::Unsupported.raw());
    rep.set_additional_information_length(0x06);
    rep.set_qpn(0x0a0b0c);
    rep.set_service_id(0x1112_1314_1516_1718);
    rep.set_q_key(0x2122_2324);
    let mut want = [0xeeu8; MAD_LEN];
    want[24..28].copy_from_slice(&[1, 2, 3, 4]);
    want[28] = 1; // IB_SIDR_UNSUPPORTED
    want[29] = 6;
    want[32..35].copy_from_slice(&[0x0a, 0x0b, 0x0c]);
    want[36..44].copy_from_slice(&[0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18]);
    want[44..48].copy_from_slice(&[0x21, 0x22, 0x23, 0x24]);
    assert_eq!(m[..], want[..]);
    assert_eq!(SidrRep::<&[u8]>::PRIVATE_DATA_OFFSET, 120);
    assert_eq!(SidrRep::new_checked(&m[..]).unwrap().private_data().len(), 136);
    assert_eq!(AttrId::SidrReq.raw(), 0x0017);
    assert_eq!(AttrId::SidrRep.raw(), 0x0018);
}
