//! ARP against byte vectors written from RFC 826's packet format (and the layout of a real
//! captured request, trailing padding included), not from this module's code.

use super::*;
use proptest::prelude::*;

/// A broadcast request as captured on a cable network (Wireshark's `arp-storm` sample
/// layout): who has 24.166.173.159, tell 24.166.172.1 (00:07:0d:af:f4:54); 18 bytes of
/// non-zero padding after the 42 the packet needs.
const CAPTURED_REQUEST: [u8; 60] = [
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // destination: broadcast
    0x00, 0x07, 0x0d, 0xaf, 0xf4, 0x54, // source
    0x08, 0x06, // ethertype ARP
    0x00, 0x01, // hardware type Ethernet
    0x08, 0x00, // protocol type IPv4
    0x06, 0x04, // lengths
    0x00, 0x01, // request
    0x00, 0x07, 0x0d, 0xaf, 0xf4, 0x54, // sender MAC
    0x18, 0xa6, 0xac, 0x01, // sender IP 24.166.172.1
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // target MAC unknown
    0x18, 0xa6, 0xad, 0x9f, // target IP 24.166.173.159
    0x06, 0x01, 0x04, 0x00, 0x00, 0x00, 0x00, 0x02, 0x01, 0x00, 0x03, 0x02, 0x00, 0x00, 0x05, 0x01,
    0x03, 0x01, // padding
];

/// RFC 826's reply to that request from 02:00:00:00:00:01, padded with zeros to 60 bytes.
const REPLY: [u8; 60] = {
    let mut f = [0u8; 60];
    let head: [u8; 42] = [
        0x00, 0x07, 0x0d, 0xaf, 0xf4, 0x54, // to the requester
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // from us
        0x08, 0x06, 0x00, 0x01, 0x08, 0x00, 0x06, 0x04, //
        0x00, 0x02, // reply
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x18, 0xa6, 0xad, 0x9f, // sender: us
        0x00, 0x07, 0x0d, 0xaf, 0xf4, 0x54, 0x18, 0xa6, 0xac, 0x01, // target: requester
    ];
    let mut i = 0;
    while i < 42 {
        f[i] = head[i];
        i += 1;
    }
    f
};

const US: Mac = Mac([0x02, 0, 0, 0, 0, 1]);
const THEM: Mac = Mac([0x00, 0x07, 0x0d, 0xaf, 0xf4, 0x54]);

#[test]
fn parses_a_captured_request_field_by_field() {
    let eth = EthFrame::new_checked(&CAPTURED_REQUEST[..]).unwrap();
    assert_eq!(eth.dst(), BROADCAST);
    assert_eq!(eth.src(), THEM);
    assert_eq!(eth.ethertype(), 0x0806);
    let p = ArpPacket::new_checked(eth.payload()).unwrap();
    assert_eq!((p.htype(), p.ptype(), p.hlen(), p.plen(), p.oper()), (1, 0x0800, 6, 4, 1));
    let r = ArpRepr::parse(&CAPTURED_REQUEST).unwrap();
    assert_eq!(
        r,
        ArpRepr {
            eth_dst: BROADCAST,
            op: ArpOp::Request,
            sender_mac: THEM,
            sender_ip: Ipv4Addr::new(24, 166, 172, 1),
            target_mac: Mac([0; 6]),
            target_ip: Ipv4Addr::new(24, 166, 173, 159),
        }
    );
    // Exactly the 42 bytes of the packet are enough; padding is not needed to parse.
    assert_eq!(ArpRepr::parse(&CAPTURED_REQUEST[..42]), Ok(r));
}

#[test]
fn the_reply_matches_rfc_826_byte_for_byte_over_poison() {
    let req = ArpRepr::parse(&CAPTURED_REQUEST).unwrap();
    let mut buf = [0xa5u8; 64];
    assert_eq!(req.reply_from(US).emit(&mut buf), Ok(60));
    assert_eq!(buf[..60], REPLY);
    assert_eq!(buf[60..], [0xa5; 4], "nothing past the frame written");
    assert!(matches!(req.emit(&mut [0u8; 59]), Err(ArpError::Truncated { len: 59 })));
}

#[test]
fn a_request_we_build_matches_the_captured_layout() {
    let mut buf = [0xa5u8; 60];
    let r =
        ArpRepr::request(THEM, Ipv4Addr::new(24, 166, 172, 1), Ipv4Addr::new(24, 166, 173, 159));
    r.emit(&mut buf).unwrap();
    assert_eq!(buf[..42], CAPTURED_REQUEST[..42]);
    assert_eq!(buf[42..], [0; 18], "zero padding");
}

fn with(at: usize, bytes: &[u8]) -> [u8; 60] {
    let mut f = CAPTURED_REQUEST;
    f[at..at + bytes.len()].copy_from_slice(bytes);
    f
}

#[test]
fn every_malformed_field_has_its_error() {
    let p = |f: &[u8]| ArpRepr::parse(f);
    assert_eq!(p(&CAPTURED_REQUEST[..13]), Err(ArpError::Truncated { len: 13 }));
    assert_eq!(p(&CAPTURED_REQUEST[..41]), Err(ArpError::Truncated { len: 41 }));
    assert_eq!(p(&with(12, &[0x08, 0x00])), Err(ArpError::NotArp { ethertype: 0x0800 }));
    assert_eq!(p(&with(12, &[0x81, 0x00])), Err(ArpError::NotArp { ethertype: 0x8100 }));
    assert_eq!(p(&with(14, &[0x00, 0x06])), Err(ArpError::BadHardware { htype: 6, hlen: 6 }));
    assert_eq!(p(&with(18, &[0x08])), Err(ArpError::BadHardware { htype: 1, hlen: 8 }));
    assert_eq!(p(&with(16, &[0x86, 0xdd])), Err(ArpError::BadProtocol { ptype: 0x86dd, plen: 4 }));
    assert_eq!(p(&with(19, &[16])), Err(ArpError::BadProtocol { ptype: 0x0800, plen: 16 }));
    assert_eq!(p(&with(20, &[0, 3])), Err(ArpError::BadOperation(3)), "RARP request");
    assert_eq!(p(&with(20, &[0, 0])), Err(ArpError::BadOperation(0)));
    let bcast = with(22, &[0xff; 6]);
    assert_eq!(p(&bcast), Err(ArpError::BadSenderMac(BROADCAST)));
    assert_eq!(p(&with(22, &[0; 6])), Err(ArpError::BadSenderMac(Mac([0; 6]))));
    assert_eq!(p(&with(22, &[0x02, 0, 0, 0, 0, 9])), Err(ArpError::SenderMismatch));
    assert_eq!(
        p(&with(28, &[255, 255, 255, 255])),
        Err(ArpError::BadSenderIp(Ipv4Addr::BROADCAST))
    );
    assert_eq!(
        p(&with(28, &[224, 0, 0, 1])),
        Err(ArpError::BadSenderIp(Ipv4Addr::new(224, 0, 0, 1)))
    );
    // An RFC 5227 probe (sender 0.0.0.0) is well formed.
    assert!(p(&with(28, &[0, 0, 0, 0])).is_ok());
}

proptest! {
    /// Random frames never panic, and whatever parses re-emits to the same 42 bytes.
    #[test]
    fn random_frames_never_panic(frame in proptest::collection::vec(any::<u8>(), 0..100)) {
        if let Ok(r) = ArpRepr::parse(&frame) {
            let mut out = [0u8; 60];
            r.emit(&mut out).unwrap();
            prop_assert_eq!(&out[..42], &frame[..42]);
        }
    }

    /// Frames that are ARP up to one random byte: the parse decides, never panics, and a
    /// mutated fixed field is always refused.
    #[test]
    fn mutated_requests_never_panic(at in 0usize..60, v: u8, cut in 0usize..=60) {
        let mut f = CAPTURED_REQUEST;
        f[at] = v;
        let r = ArpRepr::parse(&f[..cut]);
        if (12..20).contains(&at) && v != CAPTURED_REQUEST[at] {
            prop_assert!(r.is_err());
        }
    }
}
