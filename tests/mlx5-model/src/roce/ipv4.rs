//! IPv4 headers without options (RFC 791; the kernel's `struct iphdr`).
//!
//! Layout, 20 bytes, big-endian: version (high nibble) and IHL (low nibble, 32-bit words)
//! 0, TOS 1 (DSCP 6 bits, ECN 2), total length 2..4, identification 4..6, flags and fragment
//! offset 6..8 (DF 0x4000, MF 0x2000, offset 13 bits), TTL 8, protocol 9, header checksum
//! 10..12 (RFC 1071 ones' complement), source 12..16, destination 16..20.
//!
//! What rxe puts there (`rxe_net.c` `prepare_ipv4_hdr`): version 4, IHL 5, TOS = the traffic
//! class, DF, TTL = the hop limit, protocol UDP, the checksum; the IP stack on receive
//! drops a bad checksum or a total length beyond the frame. Options are not accepted here:
//! RoCE v2 senders do not use them and rxe's ICRC covers a 20-byte header.

use std::net::Ipv4Addr;

use super::{need, Layer, Malformed};
use crate::be::{get16, put16};

/// Bytes of an option-less header.
pub const HEADER_LEN: usize = 20;
/// The "don't fragment" flag in the flags/offset word.
pub const DF: u16 = 0x4000;
/// The "more fragments" flag.
pub const MF: u16 = 0x2000;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;

mod field {
    use core::ops::Range;
    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const LEN: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLAGS_FRAG: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTO: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: Range<usize> = 12..16;
    pub const DST: Range<usize> = 16..20;
}

/// The RFC 1071 sum of `data` as big-endian 16-bit words (a trailing odd byte padded with
/// zero), folded to 16 bits but not complemented; `start` carries an earlier partial sum.
pub(crate) fn ones_sum(start: u32, data: &[u8]) -> u16 {
    let mut sum = start;
    let mut chunks = data.chunks_exact(2);
    for w in &mut chunks {
        sum = sum.wrapping_add(u32::from(u16::from_be_bytes([w[0], w[1]])));
        sum = (sum & 0xffff) + (sum >> 16);
    }
    if let [last] = chunks.remainder() {
        sum = sum.wrapping_add(u32::from(*last) << 8);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// A read/write view of an IPv4 header (and what follows it).
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// A view with no length check.
    pub fn new_unchecked(buffer: T) -> Ipv4Packet<T> {
        Ipv4Packet { buffer }
    }

    /// A view of a buffer that holds a 20-byte header and the total length it declares.
    pub fn new_checked(buffer: T) -> Result<Ipv4Packet<T>, Malformed> {
        let p = Ipv4Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// The buffer holds the fixed header, and the total length is at least that and no
    /// more than the buffer (a frame may carry Ethernet padding after it).
    pub fn check_len(&self) -> Result<(), Malformed> {
        let b = self.buffer.as_ref();
        need(b, HEADER_LEN, Layer::Ipv4)?;
        let total = usize::from(self.total_len());
        if total < HEADER_LEN || total > b.len() {
            return Err(Malformed::IpLength);
        }
        Ok(())
    }

    /// Version (high nibble of byte 0).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }
    /// Header length in 32-bit words (low nibble of byte 0).
    pub fn ihl(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] & 0x0f
    }
    /// TOS byte (DSCP and ECN): the traffic class.
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[field::TOS]
    }
    /// Total length (big-endian), header included.
    pub fn total_len(&self) -> u16 {
        get16(self.buffer.as_ref(), field::LEN)
    }
    /// Identification (big-endian).
    pub fn ident(&self) -> u16 {
        get16(self.buffer.as_ref(), field::IDENT)
    }
    /// Flags and fragment offset word (big-endian).
    pub fn flags_frag(&self) -> u16 {
        get16(self.buffer.as_ref(), field::FLAGS_FRAG)
    }
    /// DF is set.
    pub fn dont_frag(&self) -> bool {
        self.flags_frag() & DF != 0
    }
    /// MF set or a non-zero fragment offset.
    pub fn is_fragment(&self) -> bool {
        self.flags_frag() & (MF | 0x1fff) != 0
    }
    /// Time to live: the hop limit.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }
    /// Protocol of the payload.
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTO]
    }
    /// Header checksum (big-endian).
    pub fn checksum(&self) -> u16 {
        get16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SRC];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }
    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::DST];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }
    /// The 20 header bytes sum to 0xffff (RFC 1071 verification).
    pub fn verify_checksum(&self) -> bool {
        ones_sum(0, &self.buffer.as_ref()[..HEADER_LEN]) == 0xffff
    }
    /// The payload: from the header's end to the total length.
    pub fn payload(&self) -> &[u8] {
        let h = usize::from(self.ihl()) * 4;
        &self.buffer.as_ref()[h..usize::from(self.total_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Set version and header length (words).
    pub fn set_version_ihl(&mut self, version: u8, ihl: u8) {
        self.buffer.as_mut()[field::VER_IHL] = (version << 4) | (ihl & 0x0f);
    }
    /// Set the TOS byte.
    pub fn set_tos(&mut self, v: u8) {
        self.buffer.as_mut()[field::TOS] = v;
    }
    /// Set the total length.
    pub fn set_total_len(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::LEN, v);
    }
    /// Set the identification.
    pub fn set_ident(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::IDENT, v);
    }
    /// Set the flags and fragment offset word.
    pub fn set_flags_frag(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::FLAGS_FRAG, v);
    }
    /// Set the TTL.
    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }
    /// Set the protocol.
    pub fn set_protocol(&mut self, v: u8) {
        self.buffer.as_mut()[field::PROTO] = v;
    }
    /// Set the checksum field to a raw value.
    pub fn set_checksum(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::CHECKSUM, v);
    }
    /// Set the source address.
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.octets());
    }
    /// Set the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.octets());
    }
    /// Compute and store the header checksum over the other 18 bytes.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let sum = ones_sum(0, &self.buffer.as_ref()[..HEADER_LEN]);
        self.set_checksum(!sum);
    }
}

/// An option-less IPv4 header as values (total length and checksum are derived).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// TOS byte: DSCP and ECN (rxe: the traffic class).
    pub tos: u8,
    /// TTL (rxe: the hop limit).
    pub ttl: u8,
    /// Identification.
    pub ident: u16,
    /// DF (rxe always sets it).
    pub dont_frag: bool,
    /// Protocol of the payload.
    pub protocol: u8,
    /// Bytes after the header.
    pub payload_len: usize,
}

impl Ipv4Repr {
    /// Parse a header in the order the IP stack checks it: length, version, IHL, checksum,
    /// fragment.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Result<Ipv4Repr, Malformed> {
        need(p.buffer.as_ref(), HEADER_LEN, Layer::Ipv4)?;
        if p.version() != 4 {
            return Err(Malformed::IpVersion(p.version()));
        }
        if p.ihl() != 5 {
            return Err(Malformed::Ipv4HeaderLen(p.ihl()));
        }
        p.check_len()?;
        if !p.verify_checksum() {
            return Err(Malformed::Ipv4Checksum);
        }
        if p.is_fragment() {
            return Err(Malformed::Ipv4Fragment);
        }
        Ok(Ipv4Repr {
            src: p.src_addr(),
            dst: p.dst_addr(),
            tos: p.tos(),
            ttl: p.ttl(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            protocol: p.protocol(),
            payload_len: usize::from(p.total_len()) - HEADER_LEN,
        })
    }

    /// Write the header (checksum included) through the view.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Ipv4Packet<T>) {
        p.set_version_ihl(4, 5);
        p.set_tos(self.tos);
        p.set_total_len((HEADER_LEN + self.payload_len) as u16);
        p.set_ident(self.ident);
        p.set_flags_frag(if self.dont_frag { DF } else { 0 });
        p.set_ttl(self.ttl);
        p.set_protocol(self.protocol);
        p.set_src_addr(self.src);
        p.set_dst_addr(self.dst);
        p.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The worked example of RFC 1071 practice (192.168.0.1 → 192.168.0.199, UDP, DF,
    // TTL 64, total length 0x73): the checksum is 0xb861.
    const HDR: [u8; 20] = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];

    fn with_payload() -> Vec<u8> {
        let mut v = HDR.to_vec();
        v.resize(0x73, 0);
        v
    }

    #[test]
    fn parses_a_known_header() {
        let b = with_payload();
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum());
        let r = Ipv4Repr::parse(&p).unwrap();
        assert_eq!(r.src, Ipv4Addr::new(192, 168, 0, 1));
        assert_eq!(r.dst, Ipv4Addr::new(192, 168, 0, 199));
        assert_eq!((r.tos, r.ttl, r.ident, r.dont_frag, r.protocol), (0, 64, 0, true, 17));
        assert_eq!(r.payload_len, 0x73 - 20);
    }

    #[test]
    fn emit_over_poison_gives_the_same_bytes() {
        let b = with_payload();
        let r = Ipv4Repr::parse(&Ipv4Packet::new_checked(&b[..]).unwrap()).unwrap();
        let mut out = [0xa5u8; 20];
        r.emit(&mut Ipv4Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, HDR);
    }

    #[test]
    fn each_check_has_its_error() {
        let good = with_payload();
        let case = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut b = good.clone();
            f(&mut b);
            Ipv4Repr::parse(&Ipv4Packet::new_unchecked(&b[..])).unwrap_err()
        };
        assert_eq!(case(&|b| b.truncate(19)), Malformed::Truncated(Layer::Ipv4));
        assert_eq!(case(&|b| b[0] = 0x65), Malformed::IpVersion(6));
        assert_eq!(case(&|b| b[0] = 0x46), Malformed::Ipv4HeaderLen(6));
        assert_eq!(case(&|b| b[3] = 0x74), Malformed::IpLength);
        assert_eq!(case(&|b| b[8] = 0x3f), Malformed::Ipv4Checksum);
        let frag = case(&|b| {
            let mut p = Ipv4Packet::new_unchecked(&mut b[..]);
            p.set_flags_frag(MF);
            p.fill_checksum();
        });
        assert_eq!(frag, Malformed::Ipv4Fragment);
    }

    #[test]
    fn ones_sum_odd_length_and_carry() {
        assert_eq!(ones_sum(0, &[0xff, 0xff, 0x00, 0x01]), 0x0001);
        assert_eq!(ones_sum(0, &[0x12]), 0x1200);
    }
}
