//! What the NIC's parser finds in a frame: the L2 header (with at most one VLAN tag), the
//! IPv4 or IPv6 header and the TCP or UDP header, as far as the frame holds them.
//!
//! The steering, the send path's inline-header check and the receive CQE all read the frame
//! through this one parse:
//!
//! * [`Headers::match_set`] lays the fields out as `fte_match_set_lyr_2_4` (`mlx5_ifc.h`), so
//!   that an entry matches when `(set & criteria) == (value & criteria)` byte for byte;
//! * [`Headers::inline_len`] is how many bytes an inline mode (`MLX5_INLINE_MODE_*`) covers,
//!   as mlx5e's `mlx5e_calc_min_inline` (`en/txrx.h`) counts them: L2 = the Ethernet header
//!   and its tag, IP = up to the end of the IP header, TCP/UDP = up to the end of the L4 header;
//! * [`Headers::cqe_hdr_type`] is the CQE's `l4_l3_hdr_type` byte (kernel `device.h`
//!   `get_cqe_l4_hdr_type`, `cqe_has_vlan`; rdma-core `cq.c` `get_cqe_l3_hdr_type`).
//!
//! Byte positions are the packet layer's views ([`crate::roce`]: Ethernet and its tags, IPv4,
//! IPv6, UDP), so each header's layout is stated once in the model; only TCP (RFC 9293: data
//! offset in byte 12, flags in byte 13), which RoCE never carries, is read here. The views are
//! used unchecked behind this parser's own bounds: the NIC parses as far as a frame holds
//! headers, where the RoCE receive path refuses anything malformed.

use crate::fw::ifc::fte_match_set_lyr_2_4 as m;
use crate::roce::ethernet::{EtherType, Frame, HEADER_LEN as ETH_HEADER};
use crate::roce::ipv4::{self, Ipv4Packet};
use crate::roce::ipv6::{self, Ipv6Packet};
use crate::roce::udp::{self, UdpPacket};
pub use crate::roce::ROCE_V2_PORT;

/// EtherType of IPv4.
pub const ETH_P_IP: u16 = EtherType::Ipv4.raw();
/// EtherType of ARP.
pub const ETH_P_ARP: u16 = EtherType::Arp.raw();
/// EtherType of IPv6.
pub const ETH_P_IPV6: u16 = EtherType::Ipv6.raw();
/// TPID of a customer VLAN tag (802.1Q).
pub const ETH_P_8021Q: u16 = EtherType::Vlan.raw();
/// TPID of a service VLAN tag (802.1ad).
pub const ETH_P_8021AD: u16 = EtherType::ServiceVlan.raw();
/// IP protocol of UDP.
pub const IPPROTO_UDP: u8 = ipv4::PROTO_UDP;
/// IP protocol of TCP.
pub const IPPROTO_TCP: u8 = 6;

/// Bytes of an Ethernet header without a tag.
pub const ETH_HLEN: usize = ETH_HEADER;
/// Bytes of one VLAN tag.
pub const VLAN_HLEN: usize = crate::roce::ethernet::VLAN_TAG_LEN;

/// A VLAN tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag {
    /// TPID: [`ETH_P_8021Q`] or [`ETH_P_8021AD`].
    pub tpid: u16,
    /// Tag control: priority 15:13, CFI/DEI 12, VID 11:0.
    pub tci: u16,
}

/// The L4 header found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4 {
    /// UDP: source and destination port.
    Udp {
        /// Source port.
        sport: u16,
        /// Destination port.
        dport: u16,
    },
    /// TCP: ports, flags (byte 13), and whether a payload follows the header.
    Tcp {
        /// Source port.
        sport: u16,
        /// Destination port.
        dport: u16,
        /// Flags byte (ACK = 0x10).
        flags: u8,
        /// Bytes after the TCP header inside the IP packet.
        payload: bool,
    },
}

/// What the parser found in one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Headers {
    /// Destination MAC.
    pub dmac: [u8; 6],
    /// Source MAC.
    pub smac: [u8; 6],
    /// The first VLAN tag, if any.
    pub tag: Option<Tag>,
    /// EtherType of the payload (after the tag).
    pub ethertype: u16,
    /// Bytes of the L2 header (14, or 18 with a tag).
    pub l2_len: usize,
    /// IP version (4 or 6) and protocol, if an IP header is complete.
    pub ip: Option<(u8, u8)>,
    /// End of the IP header (from the frame's start).
    pub l3_end: usize,
    /// The L4 header, if complete.
    pub l4: Option<L4>,
    /// End of the L4 header (from the frame's start).
    pub l4_end: usize,
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

impl Headers {
    /// Parse `frame`; `None` if it is shorter than an Ethernet header (or than its tag).
    pub fn parse(frame: &[u8]) -> Option<Headers> {
        if frame.len() < ETH_HLEN {
            return None;
        }
        let f = Frame::new_unchecked(frame);
        let outer = f.outer_type();
        let (tag, ethertype, l2_len) = match outer {
            EtherType::Vlan | EtherType::ServiceVlan => {
                let (tci, inner) = f.any_tag()?;
                (Some(Tag { tpid: outer.raw(), tci }), inner.raw(), ETH_HLEN + VLAN_HLEN)
            }
            _ => (None, outer.raw(), ETH_HLEN),
        };
        let mut h = Headers {
            dmac: f.dst_addr().0,
            smac: f.src_addr().0,
            tag,
            ethertype,
            l2_len,
            ip: None,
            l3_end: l2_len,
            l4: None,
            l4_end: l2_len,
        };
        let ip = &frame[l2_len..];
        let (proto, l3_len, ip_total) = match ethertype {
            ETH_P_IP if ip.len() >= ipv4::HEADER_LEN => {
                let v4 = Ipv4Packet::new_unchecked(ip);
                let ihl = usize::from(v4.ihl()) * 4;
                if v4.version() != 4 || ihl < ipv4::HEADER_LEN || ip.len() < ihl {
                    return Some(h);
                }
                h.ip = Some((4, v4.protocol()));
                (v4.protocol(), ihl, usize::from(v4.total_len()))
            }
            ETH_P_IPV6 if ip.len() >= ipv6::HEADER_LEN => {
                let v6 = Ipv6Packet::new_unchecked(ip);
                if v6.version() != 6 {
                    return Some(h);
                }
                h.ip = Some((6, v6.next_header()));
                (
                    v6.next_header(),
                    ipv6::HEADER_LEN,
                    ipv6::HEADER_LEN + usize::from(v6.payload_len()),
                )
            }
            _ => return Some(h),
        };
        h.l3_end = l2_len + l3_len;
        h.l4_end = h.l3_end;
        let l4 = &frame[h.l3_end..];
        match proto {
            IPPROTO_UDP if l4.len() >= udp::HEADER_LEN => {
                let u = UdpPacket::new_unchecked(l4);
                h.l4 = Some(L4::Udp { sport: u.src_port(), dport: u.dst_port() });
                h.l4_end = h.l3_end + udp::HEADER_LEN;
            }
            IPPROTO_TCP if l4.len() >= 20 => {
                let off = usize::from(l4[12] >> 4) * 4;
                if off >= 20 && l4.len() >= off {
                    h.l4 = Some(L4::Tcp {
                        sport: be16(l4, 0),
                        dport: be16(l4, 2),
                        flags: l4[13],
                        payload: ip_total > l3_len + off,
                    });
                    h.l4_end = h.l3_end + off;
                }
            }
            _ => {}
        }
        Some(h)
    }

    /// Whether this is a RoCE v2 packet (UDP to port 4791 over IPv4 or IPv6): the RDMA
    /// transport's, not the Ethernet receive path's.
    pub fn is_roce_v2(&self) -> bool {
        matches!(self.l4, Some(L4::Udp { dport: ROCE_V2_PORT, .. }))
    }

    /// The frame's fields as an `fte_match_set_lyr_2_4`.
    pub fn match_set(&self) -> [u8; m::SIZE] {
        let mut s = [0u8; m::SIZE];
        let mac = |a: [u8; 6]| u64::from_be_bytes([0, 0, a[0], a[1], a[2], a[3], a[4], a[5]]);
        m::SMAC_47_16.set(&mut s, mac(self.smac) >> 16);
        m::SMAC_15_0.set(&mut s, mac(self.smac) & 0xffff);
        m::DMAC_47_16.set(&mut s, mac(self.dmac) >> 16);
        m::DMAC_15_0.set(&mut s, mac(self.dmac) & 0xffff);
        m::ETHERTYPE.set(&mut s, u64::from(self.ethertype));
        if let Some(t) = self.tag {
            m::FIRST_PRIO.set(&mut s, u64::from(t.tci >> 13));
            m::FIRST_CFI.set(&mut s, u64::from(t.tci >> 12 & 1));
            m::FIRST_VID.set(&mut s, u64::from(t.tci & 0xfff));
            let f = if t.tpid == ETH_P_8021Q { m::CVLAN_TAG } else { m::SVLAN_TAG };
            f.set(&mut s, 1);
        }
        if let Some((version, proto)) = self.ip {
            m::IP_VERSION.set(&mut s, u64::from(version));
            m::IP_PROTOCOL.set(&mut s, u64::from(proto));
        }
        if let Some(L4::Udp { sport, dport }) = self.l4 {
            m::UDP_SPORT.set(&mut s, u64::from(sport));
            m::UDP_DPORT.set(&mut s, u64::from(dport));
        }
        s
    }

    /// The bytes an inline mode covers in this frame (never more than the frame).
    pub fn inline_len(&self, mode: u8, frame_len: usize) -> usize {
        use crate::fw::codes::{INLINE_MODE_IP, INLINE_MODE_L2, INLINE_MODE_TCP_UDP};
        let n = match mode {
            INLINE_MODE_L2 => self.l2_len,
            INLINE_MODE_IP => self.l3_end,
            INLINE_MODE_TCP_UDP => self.l4_end,
            _ => 0,
        };
        n.min(frame_len)
    }

    /// The CQE's `l4_l3_hdr_type`: L4 type in bits 6:4 (`CQE_L4_HDR_TYPE_*`), L3 type in
    /// 3:2 (none 0, IPv6 1, IPv4 2), bit 0 = a VLAN tag was stripped (`stripped`).
    pub fn cqe_hdr_type(&self, stripped: bool) -> u8 {
        let l3 = match self.ip {
            Some((6, _)) => 1,
            Some((4, _)) => 2,
            _ => 0,
        };
        let l4 = match self.l4 {
            None => 0,
            Some(L4::Udp { .. }) => 2,
            Some(L4::Tcp { flags, payload, .. }) if flags & 0x10 != 0 => {
                if payload {
                    4
                } else {
                    3
                }
            }
            Some(L4::Tcp { .. }) => 1,
        };
        l4 << 4 | l3 << 2 | u8::from(stripped)
    }
}
