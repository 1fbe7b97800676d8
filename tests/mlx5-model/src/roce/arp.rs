//! ARP for IPv4 over Ethernet (RFC 826; the kernel's `struct arphdr` followed by the
//! Ethernet/IPv4 addresses, `net/ipv4/arp.c`).
//!
//! Layout, 28 bytes, big-endian: hardware type 0..2 (1, Ethernet), protocol type 2..4
//! (0x0800), hardware length 4 (6), protocol length 5 (4), operation 6..8 (1 request,
//! 2 reply), sender MAC 8..14, sender IPv4 14..18, target MAC 18..24, target IPv4 24..28.
//! A peer of the kernel's rxe must answer ARP for its address: rxe resolves the destination
//! MAC through the neighbour table.

use std::net::Ipv4Addr;

use rdma_pmd::code_enum;
use rdma_pmd::Mac;

use super::ethernet::EtherType;
use super::{need, Layer, Malformed};
use crate::be::{get16, put16};

/// Bytes of an Ethernet/IPv4 ARP packet.
pub const LEN: usize = 28;

mod field {
    use core::ops::Range;
    pub const HTYPE: usize = 0;
    pub const PTYPE: usize = 2;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: usize = 6;
    pub const SHA: Range<usize> = 8..14;
    pub const SPA: Range<usize> = 14..18;
    pub const THA: Range<usize> = 18..24;
    pub const TPA: Range<usize> = 24..28;
}

code_enum! {
    /// ARP operation (`ARPOP_*`).
    ArpOp: u16 {
        /// `ARPOP_REQUEST`.
        Request = 1,
        /// `ARPOP_REPLY`.
        Reply = 2,
    }
}

/// A read/write view of an ARP packet.
#[derive(Debug, Clone)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

fn mac(b: &[u8]) -> Mac {
    let mut m = [0; 6];
    m.copy_from_slice(b);
    Mac(m)
}

fn ip4(b: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(b[0], b[1], b[2], b[3])
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// A view with no length check.
    pub fn new_unchecked(buffer: T) -> ArpPacket<T> {
        ArpPacket { buffer }
    }

    /// A view of a buffer of at least 28 bytes.
    pub fn new_checked(buffer: T) -> Result<ArpPacket<T>, Malformed> {
        let p = ArpPacket::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// The buffer holds 28 bytes.
    pub fn check_len(&self) -> Result<(), Malformed> {
        need(self.buffer.as_ref(), LEN, Layer::Arp)
    }

    /// Hardware type (big-endian).
    pub fn hardware_type(&self) -> u16 {
        get16(self.buffer.as_ref(), field::HTYPE)
    }
    /// Protocol type (big-endian).
    pub fn protocol_type(&self) -> u16 {
        get16(self.buffer.as_ref(), field::PTYPE)
    }
    /// Hardware address length.
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }
    /// Protocol address length.
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }
    /// Operation (big-endian).
    pub fn operation(&self) -> ArpOp {
        ArpOp::from(get16(self.buffer.as_ref(), field::OPER))
    }
    /// Sender hardware address.
    pub fn sender_mac(&self) -> Mac {
        mac(&self.buffer.as_ref()[field::SHA])
    }
    /// Sender protocol address (network order).
    pub fn sender_ip(&self) -> Ipv4Addr {
        ip4(&self.buffer.as_ref()[field::SPA])
    }
    /// Target hardware address.
    pub fn target_mac(&self) -> Mac {
        mac(&self.buffer.as_ref()[field::THA])
    }
    /// Target protocol address (network order).
    pub fn target_ip(&self) -> Ipv4Addr {
        ip4(&self.buffer.as_ref()[field::TPA])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    /// Write the fixed Ethernet/IPv4 format words (types and lengths).
    pub fn set_ethernet_ipv4(&mut self) {
        let b = self.buffer.as_mut();
        put16(b, field::HTYPE, 1);
        put16(b, field::PTYPE, EtherType::Ipv4.raw());
        b[field::HLEN] = 6;
        b[field::PLEN] = 4;
    }
    /// Set the operation.
    pub fn set_operation(&mut self, op: ArpOp) {
        put16(self.buffer.as_mut(), field::OPER, op.raw());
    }
    /// Set the sender hardware address.
    pub fn set_sender_mac(&mut self, m: Mac) {
        self.buffer.as_mut()[field::SHA].copy_from_slice(&m.0);
    }
    /// Set the sender protocol address.
    pub fn set_sender_ip(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SPA].copy_from_slice(&a.octets());
    }
    /// Set the target hardware address.
    pub fn set_target_mac(&mut self, m: Mac) {
        self.buffer.as_mut()[field::THA].copy_from_slice(&m.0);
    }
    /// Set the target protocol address.
    pub fn set_target_ip(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::TPA].copy_from_slice(&a.octets());
    }
}

/// An Ethernet/IPv4 ARP request or reply as values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArpRepr {
    /// Request or reply.
    pub op: ArpOp,
    /// Sender MAC.
    pub sender_mac: Mac,
    /// Sender IPv4 address.
    pub sender_ip: Ipv4Addr,
    /// Target MAC (zeros in a request).
    pub target_mac: Mac,
    /// Target IPv4 address.
    pub target_ip: Ipv4Addr,
}

impl ArpRepr {
    /// Parse a checked packet; anything but Ethernet/IPv4 request or reply is `ArpFormat`.
    pub fn parse<T: AsRef<[u8]>>(p: &ArpPacket<T>) -> Result<ArpRepr, Malformed> {
        p.check_len()?;
        let format_ok = p.hardware_type() == 1
            && p.protocol_type() == EtherType::Ipv4.raw()
            && p.hardware_len() == 6
            && p.protocol_len() == 4;
        let op = p.operation();
        if !format_ok || matches!(op, ArpOp::Unknown(_)) {
            return Err(Malformed::ArpFormat);
        }
        Ok(ArpRepr {
            op,
            sender_mac: p.sender_mac(),
            sender_ip: p.sender_ip(),
            target_mac: p.target_mac(),
            target_ip: p.target_ip(),
        })
    }

    /// The reply to this request from the owner of `mac` (RFC 826: swap, fill in).
    pub fn reply(&self, mac: Mac) -> ArpRepr {
        ArpRepr {
            op: ArpOp::Reply,
            sender_mac: mac,
            sender_ip: self.target_ip,
            target_mac: self.sender_mac,
            target_ip: self.sender_ip,
        }
    }

    /// Write the 28 bytes through the view.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut ArpPacket<T>) {
        p.set_ethernet_ipv4();
        p.set_operation(self.op);
        p.set_sender_mac(self.sender_mac);
        p.set_sender_ip(self.sender_ip);
        p.set_target_mac(self.target_mac);
        p.set_target_ip(self.target_ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // "who-has 10.0.0.2 tell 10.0.0.1", RFC 826 field order.
    const REQUEST: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 10, 0,
        0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2,
    ];

    #[test]
    fn parses_and_emits_a_request() {
        let r = ArpRepr::parse(&ArpPacket::new_checked(&REQUEST[..]).unwrap()).unwrap();
        assert_eq!(r.op, ArpOp::Request);
        assert_eq!(r.sender_mac, Mac([2, 0, 0, 0, 0, 1]));
        assert_eq!(r.sender_ip, Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(r.target_ip, Ipv4Addr::new(10, 0, 0, 2));
        let mut buf = [0x5au8; 28];
        r.emit(&mut ArpPacket::new_unchecked(&mut buf[..]));
        assert_eq!(buf, REQUEST);
        let rep = r.reply(Mac([2, 0, 0, 0, 0, 2]));
        assert_eq!(
            (rep.op, rep.sender_ip, rep.target_mac),
            (ArpOp::Reply, r.target_ip, r.sender_mac)
        );
    }

    #[test]
    fn rejects_other_formats() {
        let mut b = REQUEST;
        b[5] = 16;
        assert_eq!(ArpRepr::parse(&ArpPacket::new_unchecked(&b[..])), Err(Malformed::ArpFormat));
        let mut b = REQUEST;
        b[7] = 9;
        assert_eq!(ArpRepr::parse(&ArpPacket::new_unchecked(&b[..])), Err(Malformed::ArpFormat));
        assert_eq!(
            ArpPacket::new_checked(&REQUEST[..27]).unwrap_err(),
            Malformed::Truncated(Layer::Arp)
        );
    }
}
