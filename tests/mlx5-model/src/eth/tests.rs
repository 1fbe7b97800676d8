//! The parser, the match set and the CQE header types against hand-built frames (the byte
//! positions of RFC 826/791/768/9293 and IEEE 802.1Q, and `fte_match_set_lyr_2_4` offsets
//! written out from `mlx5_ifc.h`, not from the field table).

use super::headers::*;

/// An ARP request (RFC 826): 42 bytes.
fn arp() -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[0x02, 0x4d, 0, 0, 0, 1, 0x08, 0x06]);
    f.extend_from_slice(&[0, 1, 0x08, 0x00, 6, 4, 0, 1]);
    f.extend_from_slice(&[0x02, 0x4d, 0, 0, 0, 1, 10, 0, 0, 1]);
    f.extend_from_slice(&[0, 0, 0, 0, 0, 0, 10, 0, 0, 2]);
    f
}

/// A tagged (VID 0x123, priority 5) IPv4 UDP frame to `dport`, 8 payload bytes.
fn tagged_udp(dport: u16) -> Vec<u8> {
    let mut f = vec![0x02, 0x4d, 0, 0, 0, 1, 0x02, 0x50, 0, 0, 0, 2];
    f.extend_from_slice(&[0x81, 0x00, 0xa1, 0x23, 0x08, 0x00]);
    f.extend_from_slice(&[0x45, 0, 0, 36, 0, 0, 0x40, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&[10, 0, 0, 2, 10, 0, 0, 1]);
    f.extend_from_slice(&0xc000u16.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&[0, 16, 0, 0]);
    f.extend_from_slice(&[0xaa; 8]);
    f
}

#[test]
fn an_arp_frame_is_l2_only() {
    let f = arp();
    let h = Headers::parse(&f).unwrap();
    assert_eq!((h.dmac, h.smac, h.ethertype), ([0xff; 6], [0x02, 0x4d, 0, 0, 0, 1], ETH_P_ARP));
    assert_eq!((h.tag, h.l2_len, h.ip, h.l4), (None, 14, None, None));
    assert!(!h.is_roce_v2());
    assert_eq!(h.cqe_hdr_type(false), 0);
    assert_eq!(h.inline_len(crate::fw::codes::INLINE_MODE_L2, f.len()), 14);
    assert_eq!(h.inline_len(crate::fw::codes::INLINE_MODE_TCP_UDP, f.len()), 14);
    assert_eq!(h.inline_len(crate::fw::codes::INLINE_MODE_NONE, f.len()), 0);
}

#[test]
fn a_tagged_udp_frame_has_every_layer() {
    let f = tagged_udp(4791);
    let h = Headers::parse(&f).unwrap();
    assert_eq!(h.tag, Some(Tag { tpid: ETH_P_8021Q, tci: 0xa123 }));
    assert_eq!((h.ethertype, h.l2_len, h.l3_end, h.l4_end), (ETH_P_IP, 18, 38, 46));
    assert_eq!(h.ip, Some((4, IPPROTO_UDP)));
    assert!(h.is_roce_v2());
    assert!(!Headers::parse(&tagged_udp(53)).unwrap().is_roce_v2());
    // UDP (2) << 4 | IPv4 (2) << 2 | stripped.
    assert_eq!(h.cqe_hdr_type(true), 0x29);
    assert_eq!(h.inline_len(crate::fw::codes::INLINE_MODE_IP, f.len()), 38);
}

#[test]
fn the_match_set_has_the_ifc_byte_positions() {
    let s = Headers::parse(&tagged_udp(4791)).unwrap().match_set();
    // fte_match_set_lyr_2_4: smac_47_16 @0, smac_15_0 @4, ethertype @6, dmac_47_16 @8,
    // dmac_15_0 @12, first_prio/cfi/vid @14, ip_protocol @16, cvlan_tag bit 7 of byte 18,
    // ip_version bits 4:1 of byte 18, udp_sport @28, udp_dport @30.
    assert_eq!(&s[0..6], &[0x02, 0x50, 0, 0, 0, 2]);
    assert_eq!(&s[6..8], &[0x08, 0x00]);
    assert_eq!(&s[8..14], &[0x02, 0x4d, 0, 0, 0, 1]);
    assert_eq!(&s[14..16], &[0xa1, 0x23]);
    assert_eq!(s[16], 17);
    assert_eq!(s[18], 0x80 | 4 << 1);
    assert_eq!(&s[28..32], &[0xc0, 0x00, 0x12, 0xb7]);
    assert!(s[32..].iter().all(|b| *b == 0));
}

#[test]
fn tcp_header_types_follow_the_ack_and_payload() {
    let mut f = vec![0u8; 12];
    f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 20, 6, 64]);
    f.extend_from_slice(&[0u8; 32]);
    let mut tcp = [0u8; 20];
    tcp[12] = 5 << 4;
    tcp[13] = 0x10;
    f.extend_from_slice(&tcp);
    let h = Headers::parse(&f).unwrap();
    assert_eq!(h.ip, Some((6, IPPROTO_TCP)));
    assert_eq!(h.cqe_hdr_type(false), 3 << 4 | 1 << 2, "ACK, no data, IPv6");
    assert_eq!(h.l4_end, 14 + 40 + 20);
}

#[test]
fn runts_and_cut_headers_parse_as_far_as_they_go() {
    assert_eq!(Headers::parse(&[0u8; 13]), None);
    let mut tagged = vec![0u8; 12];
    tagged.extend_from_slice(&[0x81, 0x00, 0, 1]);
    assert_eq!(Headers::parse(&tagged), None, "a tag without its EtherType");
    let cut = &tagged_udp(4791)[..30];
    let h = Headers::parse(cut).unwrap();
    assert_eq!((h.ip, h.l4), (None, None), "an IPv4 header cut short");
}

#[test]
fn a_service_tag_is_parsed_and_matched_as_svlan() {
    let mut f = tagged_udp(4791);
    f[12..14].copy_from_slice(&[0x88, 0xa8]);
    let h = Headers::parse(&f).unwrap();
    assert_eq!(h.tag, Some(Tag { tpid: ETH_P_8021AD, tci: 0xa123 }));
    assert_eq!((h.ethertype, h.l2_len, h.l4_end), (ETH_P_IP, 18, 46));
    let s = h.match_set();
    // svlan_tag is bit 6 of byte 18, beside cvlan_tag (bit 7), which stays clear.
    assert_eq!(s[18], 0x40 | 4 << 1);
    let mut cut = vec![0u8; 12];
    cut.extend_from_slice(&[0x88, 0xa8, 0, 1]);
    assert_eq!(Headers::parse(&cut), None, "a service tag without its EtherType");
}
