//! Ethernet II headers and ARP packets for IPv4 over Ethernet (RFC 826, RFC 5227 for probes).
//!
//! Typed views over byte buffers ([`EthFrame`], [`ArpPacket`]: field byte ranges in one
//! private table each, big-endian getters, `set_*` where the buffer is writable,
//! `new_checked`), and [`ArpRepr`], what a frame says, with [`ArpRepr::parse`] (strict: every
//! field ARP for IPv4 over Ethernet fixes is checked, each refusal a typed [`ArpError`]) and
//! [`ArpRepr::emit`] writing through the same views.
//!
//! An ARP frame: destination MAC, source MAC, ethertype 0x0806 (14 bytes), then hardware
//! type 1 (Ethernet), protocol type 0x0800 (IPv4), hardware length 6, protocol length 4,
//! operation (1 request, 2 reply), sender MAC, sender IPv4, target MAC, target IPv4
//! (28 bytes). Sent frames are padded with zeros to the 60-byte Ethernet minimum.

use core::fmt;
use core::net::Ipv4Addr;

use rdma_pmd::Mac;

/// `ETH_P_ARP`.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// `ETH_P_IP`.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// `ETH_P_8021Q`: a C-VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// `ARPHRD_ETHER`.
pub const HTYPE_ETHERNET: u16 = 1;
/// Bytes of an Ethernet II header.
pub const ETH_HEADER_LEN: usize = 14;
/// Bytes of an ARP packet for IPv4 over Ethernet.
pub const ARP_LEN: usize = 28;
/// Bytes of an ARP frame before padding.
pub const ARP_FRAME_LEN: usize = ETH_HEADER_LEN + ARP_LEN;
/// The Ethernet minimum frame without its FCS: what an ARP frame is padded to.
pub const MIN_FRAME_LEN: usize = 60;
/// The broadcast MAC.
pub const BROADCAST: Mac = Mac([0xff; 6]);

/// Whether `m` is a group (multicast or broadcast) address: the I/G bit of its first byte.
pub const fn is_group(m: Mac) -> bool {
    m.0[0] & 1 != 0
}

mod eth_field {
    use core::ops::Range;
    pub const DST: Range<usize> = 0..6;
    pub const SRC: Range<usize> = 6..12;
    pub const ETHERTYPE: Range<usize> = 12..14;
}

mod arp_field {
    use core::ops::Range;
    pub const HTYPE: Range<usize> = 0..2;
    pub const PTYPE: Range<usize> = 2..4;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: Range<usize> = 6..8;
    pub const SHA: Range<usize> = 8..14;
    pub const SPA: Range<usize> = 14..18;
    pub const THA: Range<usize> = 18..24;
    pub const TPA: Range<usize> = 24..28;
}

fn mac_at(b: &[u8], r: core::ops::Range<usize>) -> Mac {
    let mut m = [0u8; 6];
    m.copy_from_slice(&b[r]);
    Mac(m)
}

fn ip_at(b: &[u8], r: core::ops::Range<usize>) -> Ipv4Addr {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[r]);
    Ipv4Addr::from(a)
}

fn be16_at(b: &[u8], r: core::ops::Range<usize>) -> u16 {
    u16::from_be_bytes([b[r.start], b[r.start + 1]])
}

/// Why a received frame was not taken. Every one is counted and the frame dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArpError {
    /// Shorter than the headers it claims.
    Truncated {
        /// Bytes received.
        len: usize,
    },
    /// Not an ARP frame (another ethertype, or a VLAN tag).
    NotArp {
        /// The ethertype.
        ethertype: u16,
    },
    /// Hardware type or length other than Ethernet's (1, 6).
    BadHardware {
        /// `htype`.
        htype: u16,
        /// `hlen`.
        hlen: u8,
    },
    /// Protocol type or length other than IPv4's (0x0800, 4).
    BadProtocol {
        /// `ptype`.
        ptype: u16,
        /// `plen`.
        plen: u8,
    },
    /// An operation other than request (1) or reply (2).
    BadOperation(u16),
    /// A group (multicast, broadcast) or all-zero sender MAC: no station has it.
    BadSenderMac(Mac),
    /// A sender IPv4 address no station has (broadcast, multicast).
    BadSenderIp(Ipv4Addr),
    /// The Ethernet source is not the ARP sender (a reply or request on another's behalf is
    /// not taken: it would let a third party bind an address to a MAC it does not own).
    SenderMismatch,
    /// The frame came from our own MAC (our broadcast looped back).
    FromUs,
    /// Addressed to another station (neither our MAC nor broadcast), or asking for an
    /// address that is not ours.
    NotForUs,
    /// Another station claims one of our addresses as its own (RFC 5227's conflict): not
    /// learned, not answered.
    Conflict(Ipv4Addr),
}

impl fmt::Display for ArpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArpError::Truncated { len } => write!(f, "{len}-byte frame too short for ARP"),
            ArpError::NotArp { ethertype } => write!(f, "ethertype {ethertype:#06x} is not ARP"),
            ArpError::BadHardware { htype, hlen } => {
                write!(f, "hardware type {htype} length {hlen} is not Ethernet")
            }
            ArpError::BadProtocol { ptype, plen } => {
                write!(f, "protocol type {ptype:#06x} length {plen} is not IPv4")
            }
            ArpError::BadOperation(op) => write!(f, "ARP operation {op}"),
            ArpError::BadSenderMac(m) => write!(f, "sender {m:?} is not a station address"),
            ArpError::BadSenderIp(ip) => write!(f, "sender {ip} is not a station address"),
            ArpError::SenderMismatch => write!(f, "Ethernet source differs from the ARP sender"),
            ArpError::FromUs => write!(f, "our own frame"),
            ArpError::NotForUs => write!(f, "frame for another station"),
            ArpError::Conflict(ip) => write!(f, "another station claims our {ip}"),
        }
    }
}

/// A view of an Ethernet II header and what follows it.
#[derive(Debug, Clone, Copy)]
pub struct EthFrame<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> EthFrame<T> {
    /// A view over `buf`, which must hold at least the 14-byte header.
    pub fn new_checked(buf: T) -> Result<Self, ArpError> {
        let len = buf.as_ref().len();
        if len < ETH_HEADER_LEN {
            return Err(ArpError::Truncated { len });
        }
        Ok(EthFrame { buf })
    }
    /// Destination MAC.
    pub fn dst(&self) -> Mac {
        mac_at(self.buf.as_ref(), eth_field::DST)
    }
    /// Source MAC.
    pub fn src(&self) -> Mac {
        mac_at(self.buf.as_ref(), eth_field::SRC)
    }
    /// Ethertype (big-endian on the wire).
    pub fn ethertype(&self) -> u16 {
        be16_at(self.buf.as_ref(), eth_field::ETHERTYPE)
    }
    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[ETH_HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthFrame<T> {
    /// Set the destination MAC.
    pub fn set_dst(&mut self, m: Mac) {
        self.buf.as_mut()[eth_field::DST].copy_from_slice(&m.0);
    }
    /// Set the source MAC.
    pub fn set_src(&mut self, m: Mac) {
        self.buf.as_mut()[eth_field::SRC].copy_from_slice(&m.0);
    }
    /// Set the ethertype.
    pub fn set_ethertype(&mut self, t: u16) {
        self.buf.as_mut()[eth_field::ETHERTYPE].copy_from_slice(&t.to_be_bytes());
    }
    /// The bytes after the header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buf.as_mut()[ETH_HEADER_LEN..]
    }
}

/// A view of an ARP packet (the bytes after the Ethernet header).
#[derive(Debug, Clone, Copy)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// A view over `buf`, which must hold the 28 bytes of an IPv4-over-Ethernet packet.
    pub fn new_checked(buf: T) -> Result<Self, ArpError> {
        let len = buf.as_ref().len();
        if len < ARP_LEN {
            return Err(ArpError::Truncated { len: len + ETH_HEADER_LEN });
        }
        Ok(ArpPacket { buf })
    }
    /// Hardware type.
    pub fn htype(&self) -> u16 {
        be16_at(self.buf.as_ref(), arp_field::HTYPE)
    }
    /// Protocol type.
    pub fn ptype(&self) -> u16 {
        be16_at(self.buf.as_ref(), arp_field::PTYPE)
    }
    /// Hardware address length.
    pub fn hlen(&self) -> u8 {
        self.buf.as_ref()[arp_field::HLEN]
    }
    /// Protocol address length.
    pub fn plen(&self) -> u8 {
        self.buf.as_ref()[arp_field::PLEN]
    }
    /// Operation.
    pub fn oper(&self) -> u16 {
        be16_at(self.buf.as_ref(), arp_field::OPER)
    }
    /// Sender hardware address.
    pub fn sha(&self) -> Mac {
        mac_at(self.buf.as_ref(), arp_field::SHA)
    }
    /// Sender protocol address.
    pub fn spa(&self) -> Ipv4Addr {
        ip_at(self.buf.as_ref(), arp_field::SPA)
    }
    /// Target hardware address.
    pub fn tha(&self) -> Mac {
        mac_at(self.buf.as_ref(), arp_field::THA)
    }
    /// Target protocol address.
    pub fn tpa(&self) -> Ipv4Addr {
        ip_at(self.buf.as_ref(), arp_field::TPA)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    /// Set the fixed fields of IPv4 over Ethernet: types 1 and 0x0800, lengths 6 and 4.
    pub fn set_ipv4_over_ethernet(&mut self) {
        let b = self.buf.as_mut();
        b[arp_field::HTYPE].copy_from_slice(&HTYPE_ETHERNET.to_be_bytes());
        b[arp_field::PTYPE].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        b[arp_field::HLEN] = 6;
        b[arp_field::PLEN] = 4;
    }
    /// Set the operation.
    pub fn set_oper(&mut self, op: u16) {
        self.buf.as_mut()[arp_field::OPER].copy_from_slice(&op.to_be_bytes());
    }
    /// Set the sender.
    pub fn set_sender(&mut self, mac: Mac, ip: Ipv4Addr) {
        let b = self.buf.as_mut();
        b[arp_field::SHA].copy_from_slice(&mac.0);
        b[arp_field::SPA].copy_from_slice(&ip.octets());
    }
    /// Set the target.
    pub fn set_target(&mut self, mac: Mac, ip: Ipv4Addr) {
        let b = self.buf.as_mut();
        b[arp_field::THA].copy_from_slice(&mac.0);
        b[arp_field::TPA].copy_from_slice(&ip.octets());
    }
}

/// An ARP operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArpOp {
    /// `ARPOP_REQUEST` (1).
    Request,
    /// `ARPOP_REPLY` (2).
    Reply,
}

impl ArpOp {
    /// The wire value.
    pub const fn raw(self) -> u16 {
        match self {
            ArpOp::Request => 1,
            ArpOp::Reply => 2,
        }
    }
}

/// What an ARP frame says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArpRepr {
    /// Ethernet destination.
    pub eth_dst: Mac,
    /// Request or reply.
    pub op: ArpOp,
    /// Sender MAC (also the Ethernet source: [`ArpRepr::parse`] refuses a frame where they
    /// differ, [`ArpRepr::emit`] writes it to both).
    pub sender_mac: Mac,
    /// Sender IPv4 address (0.0.0.0 in an RFC 5227 probe).
    pub sender_ip: Ipv4Addr,
    /// Target MAC (zero in a request).
    pub target_mac: Mac,
    /// Target IPv4 address.
    pub target_ip: Ipv4Addr,
}

impl ArpRepr {
    /// Parse an Ethernet frame as ARP for IPv4 over Ethernet. Bytes after the 42 are padding
    /// and ignored. Checks, in order: length, ethertype, hardware and protocol type and
    /// length, operation, sender MAC a station address and equal to the Ethernet source,
    /// sender IPv4 address not broadcast or multicast.
    pub fn parse(frame: &[u8]) -> Result<ArpRepr, ArpError> {
        let eth = EthFrame::new_checked(frame)?;
        let ethertype = eth.ethertype();
        if ethertype != ETHERTYPE_ARP {
            return Err(ArpError::NotArp { ethertype });
        }
        let p = ArpPacket::new_checked(eth.payload())?;
        if p.htype() != HTYPE_ETHERNET || p.hlen() != 6 {
            return Err(ArpError::BadHardware { htype: p.htype(), hlen: p.hlen() });
        }
        if p.ptype() != ETHERTYPE_IPV4 || p.plen() != 4 {
            return Err(ArpError::BadProtocol { ptype: p.ptype(), plen: p.plen() });
        }
        let op = match p.oper() {
            1 => ArpOp::Request,
            2 => ArpOp::Reply,
            other => return Err(ArpError::BadOperation(other)),
        };
        let sha = p.sha();
        if is_group(sha) || sha.0 == [0; 6] {
            return Err(ArpError::BadSenderMac(sha));
        }
        if sha != eth.src() {
            return Err(ArpError::SenderMismatch);
        }
        let spa = p.spa();
        if spa.is_broadcast() || spa.is_multicast() {
            return Err(ArpError::BadSenderIp(spa));
        }
        Ok(ArpRepr {
            eth_dst: eth.dst(),
            op,
            sender_mac: sha,
            sender_ip: spa,
            target_mac: p.tha(),
            target_ip: p.tpa(),
        })
    }

    /// Write the frame into `buf` (at least [`MIN_FRAME_LEN`] bytes), padded with zeros to
    /// [`MIN_FRAME_LEN`]; returns the frame's length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, ArpError> {
        let len = buf.len();
        if len < MIN_FRAME_LEN {
            return Err(ArpError::Truncated { len });
        }
        let buf = &mut buf[..MIN_FRAME_LEN];
        buf.fill(0);
        let mut eth = EthFrame { buf: &mut *buf };
        eth.set_dst(self.eth_dst);
        eth.set_src(self.sender_mac);
        eth.set_ethertype(ETHERTYPE_ARP);
        let mut p = ArpPacket { buf: eth.payload_mut() };
        p.set_ipv4_over_ethernet();
        p.set_oper(self.op.raw());
        p.set_sender(self.sender_mac, self.sender_ip);
        p.set_target(self.target_mac, self.target_ip);
        Ok(MIN_FRAME_LEN)
    }

    /// A broadcast request from `mac`/`ip` for `target`.
    pub const fn request(mac: Mac, ip: Ipv4Addr, target: Ipv4Addr) -> ArpRepr {
        ArpRepr {
            eth_dst: BROADCAST,
            op: ArpOp::Request,
            sender_mac: mac,
            sender_ip: ip,
            target_mac: Mac([0; 6]),
            target_ip: target,
        }
    }

    /// The unicast reply from `mac` to this request (whose target address is ours).
    pub const fn reply_from(&self, mac: Mac) -> ArpRepr {
        ArpRepr {
            eth_dst: self.sender_mac,
            op: ArpOp::Reply,
            sender_mac: mac,
            sender_ip: self.target_ip,
            target_mac: self.sender_mac,
            target_ip: self.sender_ip,
        }
    }
}

#[cfg(test)]
mod tests;
