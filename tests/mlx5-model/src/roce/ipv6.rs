//! IPv6 headers (RFC 8200; the kernel's `struct ipv6hdr`), without extension headers.
//!
//! Layout, 40 bytes, big-endian: version (4 bits), traffic class (8) and flow label (20) in
//! the word at 0..4, payload length 4..6, next header 6, hop limit 7, source 8..24,
//! destination 24..40. rxe (`prepare_ipv6_hdr`) writes traffic class, flow label and hop
//! limit from the address vector and next header UDP; RoCE v2 uses no extension headers.

use std::net::Ipv6Addr;

use super::{need, Layer, Malformed};
use crate::be::{get16, get32, put16, put32};

/// Bytes of the fixed header.
pub const HEADER_LEN: usize = 40;

mod field {
    use core::ops::Range;
    pub const VER_TC_FL: usize = 0;
    pub const PAYLOAD_LEN: usize = 4;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: Range<usize> = 8..24;
    pub const DST: Range<usize> = 24..40;
}

/// A read/write view of an IPv6 header (and what follows it).
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

fn addr(b: &[u8]) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(b);
    Ipv6Addr::from(a)
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// A view with no length check.
    pub fn new_unchecked(buffer: T) -> Ipv6Packet<T> {
        Ipv6Packet { buffer }
    }

    /// A view of a buffer holding the header and the payload length it declares.
    pub fn new_checked(buffer: T) -> Result<Ipv6Packet<T>, Malformed> {
        let p = Ipv6Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// The buffer holds 40 bytes and the declared payload (Ethernet padding may follow).
    pub fn check_len(&self) -> Result<(), Malformed> {
        let b = self.buffer.as_ref();
        need(b, HEADER_LEN, Layer::Ipv6)?;
        if HEADER_LEN + usize::from(self.payload_len()) > b.len() {
            return Err(Malformed::IpLength);
        }
        Ok(())
    }

    fn word0(&self) -> u32 {
        get32(self.buffer.as_ref(), field::VER_TC_FL)
    }
    /// Version (bits 31:28 of the first word).
    pub fn version(&self) -> u8 {
        (self.word0() >> 28) as u8
    }
    /// Traffic class (bits 27:20).
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }
    /// Flow label (bits 19:0).
    pub fn flow_label(&self) -> u32 {
        self.word0() & 0x000f_ffff
    }
    /// Payload length (big-endian).
    pub fn payload_len(&self) -> u16 {
        get16(self.buffer.as_ref(), field::PAYLOAD_LEN)
    }
    /// Next header.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    /// Source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        addr(&self.buffer.as_ref()[field::SRC])
    }
    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        addr(&self.buffer.as_ref()[field::DST])
    }
    /// The payload (payload-length bytes after the header).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..HEADER_LEN + usize::from(self.payload_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Set version, traffic class and flow label (20 bits).
    pub fn set_ver_tc_fl(&mut self, version: u8, tc: u8, flow: u32) {
        let w = (u32::from(version) << 28) | (u32::from(tc) << 20) | (flow & 0x000f_ffff);
        put32(self.buffer.as_mut(), field::VER_TC_FL, w);
    }
    /// Set the payload length.
    pub fn set_payload_len(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::PAYLOAD_LEN, v);
    }
    /// Set the next header.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NEXT_HEADER] = v;
    }
    /// Set the hop limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }
    /// Set the source address.
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.octets());
    }
    /// Set the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.octets());
    }
}

/// An IPv6 header as values (the payload length is derived).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6Repr {
    /// Source address (a RoCE v2 GID).
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
    /// Next header.
    pub next_header: u8,
    /// Bytes after the header.
    pub payload_len: usize,
}

impl Ipv6Repr {
    /// Parse a header: length, version.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Result<Ipv6Repr, Malformed> {
        need(p.buffer.as_ref(), HEADER_LEN, Layer::Ipv6)?;
        if p.version() != 6 {
            return Err(Malformed::IpVersion(p.version()));
        }
        p.check_len()?;
        Ok(Ipv6Repr {
            src: p.src_addr(),
            dst: p.dst_addr(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
            hop_limit: p.hop_limit(),
            next_header: p.next_header(),
            payload_len: usize::from(p.payload_len()),
        })
    }

    /// Write the header through the view.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Ipv6Packet<T>) {
        p.set_ver_tc_fl(6, self.traffic_class, self.flow_label);
        p.set_payload_len(self.payload_len as u16);
        p.set_next_header(self.next_header);
        p.set_hop_limit(self.hop_limit);
        p.set_src_addr(self.src);
        p.set_dst_addr(self.dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Version 6, traffic class 0xb8 (DSCP EF), flow label 0x12345, payload 8 bytes, UDP,
    // hop limit 64, fe80::1 → fe80::2 (RFC 8200 field order).
    const HDR: [u8; 40] = [
        0x6b, 0x81, 0x23, 0x45, 0x00, 0x08, 0x11, 0x40, 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 1, 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2,
    ];

    #[test]
    fn parses_and_emits() {
        let mut b = HDR.to_vec();
        b.extend_from_slice(&[0; 8]);
        let r = Ipv6Repr::parse(&Ipv6Packet::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!((r.traffic_class, r.flow_label, r.hop_limit), (0xb8, 0x12345, 64));
        assert_eq!((r.next_header, r.payload_len), (17, 8));
        assert_eq!(r.src, "fe80::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(r.dst, "fe80::2".parse::<Ipv6Addr>().unwrap());
        let mut out = [0xa5u8; 40];
        r.emit(&mut Ipv6Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, HDR);
    }

    #[test]
    fn errors() {
        assert_eq!(
            Ipv6Repr::parse(&Ipv6Packet::new_unchecked(&HDR[..39])),
            Err(Malformed::Truncated(Layer::Ipv6))
        );
        assert_eq!(Ipv6Repr::parse(&Ipv6Packet::new_unchecked(&HDR[..])), Err(Malformed::IpLength));
        let mut b = HDR;
        b[0] = 0x4b;
        assert_eq!(
            Ipv6Repr::parse(&Ipv6Packet::new_unchecked(&b[..])),
            Err(Malformed::IpVersion(4))
        );
    }
}
