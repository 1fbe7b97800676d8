//! UDP headers (RFC 768; IPv6 pseudo-header RFC 8200 §8.1).
//!
//! Layout, 8 bytes, big-endian: source port 0..2, destination port 2..4, length 4..6
//! (header included), checksum 6..8. RoCE v2 goes to port 4791; rxe sends checksum 0 ("no
//! checksum") over IPv4 and IPv6 alike (`rxe_net.c` `prepare_udp_hdr`), since the ICRC
//! covers the packet, and its IPv6 receive socket accepts zero (`rxe_setup_udp_tunnel`
//! leaves `use_udp6_rx_checksums` unset, as RFC 6935 allows for tunnels). The source port
//! carries entropy (the kernel's convention: 0xC000 | 14 bits of a flow hash) and is not
//! checked by the receiver.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::ipv4::{ones_sum, PROTO_UDP};
use super::{need, Layer, Malformed};
use crate::be::{get16, put16};

/// Bytes of the header.
pub const HEADER_LEN: usize = 8;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LEN: usize = 4;
    pub const CHECKSUM: usize = 6;
}

/// The addresses the UDP checksum's pseudo-header takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PseudoHeader {
    /// IPv4 source and destination.
    V4(Ipv4Addr, Ipv4Addr),
    /// IPv6 source and destination.
    V6(Ipv6Addr, Ipv6Addr),
}

impl PseudoHeader {
    fn sum(&self, udp_len: usize) -> u32 {
        let mut s = 0u32;
        let mut add = |b: &[u8]| s = u32::from(ones_sum(s, b));
        match self {
            PseudoHeader::V4(a, b) => {
                add(&a.octets());
                add(&b.octets());
                add(&[0, PROTO_UDP]);
                add(&(udp_len as u16).to_be_bytes());
            }
            PseudoHeader::V6(a, b) => {
                add(&a.octets());
                add(&b.octets());
                add(&(udp_len as u32).to_be_bytes());
                add(&[0, 0, 0, PROTO_UDP]);
            }
        }
        s
    }
}

/// A read/write view of a UDP datagram.
#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// A view with no length check.
    pub fn new_unchecked(buffer: T) -> UdpPacket<T> {
        UdpPacket { buffer }
    }

    /// A view of a buffer whose length is exactly the UDP length field.
    pub fn new_checked(buffer: T) -> Result<UdpPacket<T>, Malformed> {
        let p = UdpPacket::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// The buffer holds the header, and the length field equals the buffer's length (the
    /// IP payload: the kernel drops a datagram whose UDP length disagrees with it).
    pub fn check_len(&self) -> Result<(), Malformed> {
        let b = self.buffer.as_ref();
        need(b, HEADER_LEN, Layer::Udp)?;
        if usize::from(self.len()) != b.len() {
            return Err(Malformed::UdpLength);
        }
        Ok(())
    }

    /// Source port (big-endian).
    pub fn src_port(&self) -> u16 {
        get16(self.buffer.as_ref(), field::SRC_PORT)
    }
    /// Destination port (big-endian).
    pub fn dst_port(&self) -> u16 {
        get16(self.buffer.as_ref(), field::DST_PORT)
    }
    /// Length, header included (big-endian).
    pub fn len(&self) -> u16 {
        get16(self.buffer.as_ref(), field::LEN)
    }
    /// Never: a UDP header is 8 bytes (clippy's `len` companion).
    pub fn is_empty(&self) -> bool {
        false
    }
    /// Checksum (big-endian); 0 means none.
    pub fn checksum(&self) -> u16 {
        get16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// The checksum is 0 (none) or verifies over the pseudo-header and the datagram.
    pub fn verify_checksum(&self, ph: &PseudoHeader) -> bool {
        let b = self.buffer.as_ref();
        self.checksum() == 0 || ones_sum(ph.sum(b.len()), b) == 0xffff
    }
    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Set the source port.
    pub fn set_src_port(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::SRC_PORT, v);
    }
    /// Set the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::DST_PORT, v);
    }
    /// Set the length.
    pub fn set_len(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::LEN, v);
    }
    /// Set the checksum field to a raw value.
    pub fn set_checksum(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::CHECKSUM, v);
    }
    /// Compute and store the checksum over the whole buffer (0 is sent as 0xffff).
    pub fn fill_checksum(&mut self, ph: &PseudoHeader) {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let c = !ones_sum(ph.sum(b.len()), b);
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }
    /// The payload, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// A UDP header as values (length derived; checksum 0, as RoCE v2 senders write it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

impl UdpRepr {
    /// Parse a checked datagram, verifying a non-zero checksum.
    pub fn parse<T: AsRef<[u8]>>(
        p: &UdpPacket<T>,
        ph: &PseudoHeader,
    ) -> Result<UdpRepr, Malformed> {
        p.check_len()?;
        if !p.verify_checksum(ph) {
            return Err(Malformed::UdpChecksum);
        }
        Ok(UdpRepr { src_port: p.src_port(), dst_port: p.dst_port() })
    }

    /// Write the header for `payload_len` bytes of payload, checksum 0.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut UdpPacket<T>, payload_len: usize) {
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_len((HEADER_LEN + payload_len) as u16);
        p.set_checksum(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_round_trip_both_families() {
        let v4 = PseudoHeader::V4(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let v6 = PseudoHeader::V6("fe80::1".parse().unwrap(), "fe80::2".parse().unwrap());
        for ph in [v4, v6] {
            let mut b = [0u8; 8 + 5];
            b[8..].copy_from_slice(b"hello");
            let mut p = UdpPacket::new_unchecked(&mut b[..]);
            UdpRepr { src_port: 0xc001, dst_port: 4791 }.emit(&mut p, 5);
            assert!(p.verify_checksum(&ph), "zero means none");
            p.fill_checksum(&ph);
            assert_ne!(p.checksum(), 0);
            assert!(p.verify_checksum(&ph));
            b[9] ^= 1;
            assert!(!UdpPacket::new_unchecked(&b[..]).verify_checksum(&ph));
        }
    }

    #[test]
    fn known_ipv4_checksum() {
        // 10.0.0.1:1234 → 10.0.0.2:4791, payload "ab": the sum by hand (RFC 768):
        // 0a00+0001+0a00+0002+0011+000a + 04d2+12b7+000a + 6162 = 0x8d13 → !0x8d13 = 0x72ec.
        let ph = PseudoHeader::V4(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let mut b = [0x04, 0xd2, 0x12, 0xb7, 0x00, 0x0a, 0, 0, b'a', b'b'];
        UdpPacket::new_unchecked(&mut b[..]).fill_checksum(&ph);
        assert_eq!(&b[6..8], &[0x72, 0xec]);
    }

    #[test]
    fn length_must_match() {
        let b = [0, 1, 0x12, 0xb7, 0, 9, 0, 0, 0, 0];
        assert_eq!(UdpPacket::new_checked(&b[..]).unwrap_err(), Malformed::UdpLength);
        assert_eq!(UdpPacket::new_checked(&b[..7]).unwrap_err(), Malformed::Truncated(Layer::Udp));
    }
}
