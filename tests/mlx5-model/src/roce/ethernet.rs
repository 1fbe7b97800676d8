//! Ethernet II frames, with at most one IEEE 802.1Q tag.
//!
//! Layout (IEEE 802.3 clause 3, 802.1Q clause 9; as the kernel's `struct ethhdr` and
//! `struct vlan_ethhdr`): destination MAC 0..6, source MAC 6..12, EtherType 12..14
//! (big-endian). With a tag, bytes 12..14 are the TPID 0x8100, 14..16 the TCI (PCP 3 bits,
//! DEI 1, VID 12; big-endian) and 16..18 the EtherType of the payload. The FCS is not part
//! of what a port hands over (AF_PACKET neither delivers nor expects it).

use rdma_pmd::code_enum;
use rdma_pmd::Mac;

use super::{need, Layer, Malformed};
use crate::be::{get16, put16};

code_enum! {
    /// EtherType (IEEE registry; the kernel's `ETH_P_*`).
    EtherType: u16 {
        /// `ETH_P_IP`.
        Ipv4 = 0x0800,
        /// `ETH_P_ARP`.
        Arp = 0x0806,
        /// `ETH_P_8021Q`: an 802.1Q tag follows.
        Vlan = 0x8100,
        /// `ETH_P_IPV6`.
        Ipv6 = 0x86dd,
        /// `ETH_P_8021AD`: an 802.1ad service tag follows (same layout as 802.1Q). The NIC's
        /// parser takes it ([`crate::eth`]); a RoCE frame ([`super::packet`]) may not carry it.
        ServiceVlan = 0x88a8,
    }
}

/// The broadcast address.
pub const BROADCAST: Mac = Mac([0xff; 6]);

/// Bytes of the untagged header.
pub const HEADER_LEN: usize = 14;
/// Bytes an 802.1Q tag adds.
pub const VLAN_TAG_LEN: usize = 4;

mod field {
    use core::ops::Range;
    pub const DST: Range<usize> = 0..6;
    pub const SRC: Range<usize> = 6..12;
    /// EtherType, or the TPID of a tag.
    pub const TYPE: usize = 12;
    /// The tag's TCI, when tagged.
    pub const TCI: usize = 14;
    /// The inner EtherType, when tagged.
    pub const INNER_TYPE: usize = 16;
}

/// True for a group address (multicast or broadcast): the I/G bit, bit 0 of the first byte.
pub fn is_group(mac: &Mac) -> bool {
    mac.0[0] & 1 != 0
}

/// An 802.1Q tag's TCI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VlanTag {
    /// Priority code point (3 bits).
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier (12 bits).
    pub vid: u16,
}

impl VlanTag {
    /// The TCI word (host order).
    pub fn tci(&self) -> u16 {
        (u16::from(self.pcp & 7) << 13) | (u16::from(self.dei) << 12) | (self.vid & 0x0fff)
    }

    /// The tag of a TCI word.
    pub fn from_tci(tci: u16) -> VlanTag {
        VlanTag { pcp: (tci >> 13) as u8, dei: tci & 0x1000 != 0, vid: tci & 0x0fff }
    }
}

/// A read/write view of an Ethernet II frame.
#[derive(Debug, Clone)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// A view with no length check (accessors may panic on a short buffer).
    pub fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }

    /// A view of a buffer long enough for its header (and tag).
    pub fn new_checked(buffer: T) -> Result<Frame<T>, Malformed> {
        let f = Frame::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// The buffer holds the header, and the tag if the TPID says there is one.
    pub fn check_len(&self) -> Result<(), Malformed> {
        let b = self.buffer.as_ref();
        need(b, HEADER_LEN, Layer::Ethernet)?;
        if get16(b, field::TYPE) == EtherType::Vlan.raw() {
            need(b, HEADER_LEN + VLAN_TAG_LEN, Layer::Vlan)?;
        }
        Ok(())
    }

    /// The buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The EtherType or TPID at 12, as it stands (big-endian).
    pub fn outer_type(&self) -> EtherType {
        EtherType::from(get16(self.buffer.as_ref(), field::TYPE))
    }

    /// The TCI and inner EtherType of a tag of either kind ([`EtherType::Vlan`] or
    /// [`EtherType::ServiceVlan`] at 12), if the buffer holds them; the NIC's parser reads
    /// both kinds, where [`Frame::vlan`] is the 802.1Q tag a RoCE frame may carry.
    pub fn any_tag(&self) -> Option<(u16, EtherType)> {
        let b = self.buffer.as_ref();
        let tagged = matches!(self.outer_type(), EtherType::Vlan | EtherType::ServiceVlan);
        (tagged && b.len() >= HEADER_LEN + VLAN_TAG_LEN)
            .then(|| (get16(b, field::TCI), EtherType::from(get16(b, field::INNER_TYPE))))
    }

    /// Destination MAC.
    pub fn dst_addr(&self) -> Mac {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        Mac(m)
    }

    /// Source MAC.
    pub fn src_addr(&self) -> Mac {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        Mac(m)
    }

    fn tagged(&self) -> bool {
        get16(self.buffer.as_ref(), field::TYPE) == EtherType::Vlan.raw()
    }

    /// The 802.1Q tag (TCI big-endian at 14), if the TPID at 12 is 0x8100.
    pub fn vlan(&self) -> Option<VlanTag> {
        self.tagged().then(|| VlanTag::from_tci(get16(self.buffer.as_ref(), field::TCI)))
    }

    /// The payload's EtherType (big-endian; after the tag if there is one).
    pub fn ethertype(&self) -> EtherType {
        let off = if self.tagged() { field::INNER_TYPE } else { field::TYPE };
        EtherType::from(get16(self.buffer.as_ref(), off))
    }

    /// Bytes of the header: 14, or 18 with a tag.
    pub fn header_len(&self) -> usize {
        if self.tagged() {
            HEADER_LEN + VLAN_TAG_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Everything after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Set the destination MAC.
    pub fn set_dst_addr(&mut self, m: Mac) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&m.0);
    }

    /// Set the source MAC.
    pub fn set_src_addr(&mut self, m: Mac) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&m.0);
    }

    /// Write the TPID and TCI of a tag (the buffer then has the tagged layout).
    pub fn set_vlan(&mut self, tag: VlanTag) {
        let b = self.buffer.as_mut();
        put16(b, field::TYPE, EtherType::Vlan.raw());
        put16(b, field::TCI, tag.tci());
    }

    /// Set the payload's EtherType (after the tag if the TPID says there is one).
    pub fn set_ethertype(&mut self, t: EtherType) {
        let off = if self.tagged() { field::INNER_TYPE } else { field::TYPE };
        put16(self.buffer.as_mut(), off, t.raw());
    }

    /// Everything after the header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let h = self.header_len();
        &mut self.buffer.as_mut()[h..]
    }
}

/// An Ethernet II header as values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EthernetRepr {
    /// Destination MAC.
    pub dst: Mac,
    /// Source MAC.
    pub src: Mac,
    /// An 802.1Q tag, if any.
    pub vlan: Option<VlanTag>,
    /// The payload's EtherType.
    pub ethertype: EtherType,
}

impl EthernetRepr {
    /// The header of a checked frame.
    pub fn parse<T: AsRef<[u8]>>(f: &Frame<T>) -> EthernetRepr {
        EthernetRepr {
            dst: f.dst_addr(),
            src: f.src_addr(),
            vlan: f.vlan(),
            ethertype: f.ethertype(),
        }
    }

    /// Bytes the header takes.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + if self.vlan.is_some() { VLAN_TAG_LEN } else { 0 }
    }

    /// Write the header into the first [`header_len`](Self::header_len) bytes of `f`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, f: &mut Frame<T>) {
        f.set_dst_addr(self.dst);
        f.set_src_addr(self.src);
        match self.vlan {
            Some(tag) => f.set_vlan(tag),
            // An untagged layout: anything but the TPID at 12 before the EtherType is set.
            None => put16(f.buffer.as_mut(), field::TYPE, 0),
        }
        f.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A tagged ARP broadcast as the kernel sends it (802.1Q: PCP 5, VID 100).
    const TAGGED: [u8; 18] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x81, 0x00, 0xa0,
        0x64, 0x08, 0x06,
    ];

    #[test]
    fn parses_a_tagged_header() {
        let f = Frame::new_checked(&TAGGED[..]).unwrap();
        assert_eq!(f.dst_addr(), BROADCAST);
        assert_eq!(f.src_addr(), Mac([2, 0, 0, 0, 0, 1]));
        assert_eq!(f.vlan(), Some(VlanTag { pcp: 5, dei: false, vid: 100 }));
        assert_eq!(f.ethertype(), EtherType::Arp);
        assert_eq!(f.header_len(), 18);
        assert!(f.payload().is_empty());
    }

    #[test]
    fn emit_matches_bytes_over_poison() {
        let r = EthernetRepr::parse(&Frame::new_checked(&TAGGED[..]).unwrap());
        let mut buf = [0xa5u8; 18];
        r.emit(&mut Frame::new_unchecked(&mut buf[..]));
        assert_eq!(buf, TAGGED);
        let untagged = EthernetRepr { vlan: None, ethertype: EtherType::Ipv6, ..r };
        let mut buf = [0xa5u8; 14];
        untagged.emit(&mut Frame::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[12..], &[0x86, 0xdd]);
        assert_eq!(Frame::new_checked(&buf[..]).unwrap().vlan(), None);
    }

    #[test]
    fn short_buffers_are_typed_errors() {
        assert_eq!(
            Frame::new_checked(&TAGGED[..13]).unwrap_err(),
            Malformed::Truncated(Layer::Ethernet)
        );
        assert_eq!(
            Frame::new_checked(&TAGGED[..16]).unwrap_err(),
            Malformed::Truncated(Layer::Vlan)
        );
    }

    #[test]
    fn group_bit() {
        assert!(is_group(&BROADCAST));
        assert!(is_group(&Mac([0x01, 0x00, 0x5e, 0, 0, 1])));
        assert!(!is_group(&Mac([0x02, 0, 0, 0, 0, 1])));
    }
}
