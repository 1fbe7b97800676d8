//! A whole RoCE v2 frame: [`RocePacket::parse`] (bytes → typed headers and the payload,
//! every malformed frame a [`Malformed`]) and [`RoceRepr::emit`] (typed headers and a
//! payload → bytes, lengths, pad, checksum and ICRC filled in).
//!
//! The parser makes the checks of the receive path in its order: the IP stack's (an
//! IPv4/IPv6 EtherType, a well-formed IP header with a valid IPv4 checksum and a length
//! within the frame, UDP, a UDP length equal to the IP payload, port 4791) and then rxe's
//! packet checks that need no QP (`rxe_recv.c` `rxe_rcv`/`hdr_check`: BTH present, TVer 0,
//! the headers the opcode names present, then `rxe_icrc_check`). What depends on the
//! receiving port and QP (GIDs, DestQP, P_Key, Q_Key, PSN, state) is the transport's.
//!
//! The builder writes what rxe sends (`rxe_net.c` `prepare4`/`prepare6`, `rxe_req.c`
//! `init_req_packet`): UDP checksum 0, the pad count of the payload, TVer 0, and pads a
//! frame shorter than 60 bytes with zeros to the Ethernet minimum, as a NIC does (the IP
//! length tells the receiver where the packet ends).

use std::net::{Ipv4Addr, Ipv6Addr};

use rdma_pmd::Mac;

use super::bth::{self, Bth, BthRepr, Headers};
use super::ethernet::{self, EtherType, EthernetRepr, Frame, VlanTag};
use super::ext::ExtRepr;
use super::ipv4::{self, Ipv4Packet, Ipv4Repr, PROTO_UDP};
use super::ipv6::{self, Ipv6Packet, Ipv6Repr};
use super::udp::{self, PseudoHeader, UdpPacket, UdpRepr};
use super::{icrc, Layer, Malformed, ROCE_V2_PORT};

/// The Ethernet minimum frame length without FCS (`ETH_ZLEN`).
pub const MIN_FRAME: usize = 60;
/// Bytes of the ICRC.
pub const ICRC_LEN: usize = 4;

/// The IP header of a RoCE v2 packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpRepr {
    /// IPv4 (both GIDs IPv4-mapped).
    V4(Ipv4Repr),
    /// IPv6.
    V6(Ipv6Repr),
}

impl IpRepr {
    /// Bytes of the header.
    pub fn header_len(&self) -> usize {
        match self {
            IpRepr::V4(_) => ipv4::HEADER_LEN,
            IpRepr::V6(_) => ipv6::HEADER_LEN,
        }
    }

    /// The source as a GID (`::ffff:a.b.c.d` for IPv4).
    pub fn src_gid(&self) -> [u8; 16] {
        match self {
            IpRepr::V4(r) => r.src.to_ipv6_mapped().octets(),
            IpRepr::V6(r) => r.src.octets(),
        }
    }

    /// The destination as a GID.
    pub fn dst_gid(&self) -> [u8; 16] {
        match self {
            IpRepr::V4(r) => r.dst.to_ipv6_mapped().octets(),
            IpRepr::V6(r) => r.dst.octets(),
        }
    }

    /// The traffic class (IPv4 TOS).
    pub fn traffic_class(&self) -> u8 {
        match self {
            IpRepr::V4(r) => r.tos,
            IpRepr::V6(r) => r.traffic_class,
        }
    }

    /// The hop limit (IPv4 TTL).
    pub fn hop_limit(&self) -> u8 {
        match self {
            IpRepr::V4(r) => r.ttl,
            IpRepr::V6(r) => r.hop_limit,
        }
    }

    /// An IP header between two GIDs as rxe writes it: IPv4 (DF, identification 0) when
    /// both are IPv4-mapped, else IPv6 (flow label 0). The payload length is filled in by
    /// [`RoceRepr::emit`].
    pub fn between(src: [u8; 16], dst: [u8; 16], traffic_class: u8, hop_limit: u8) -> IpRepr {
        let (s, d) = (Ipv6Addr::from(src), Ipv6Addr::from(dst));
        match (s.to_ipv4_mapped(), d.to_ipv4_mapped()) {
            (Some(s4), Some(d4)) => IpRepr::V4(Ipv4Repr {
                src: s4,
                dst: d4,
                tos: traffic_class,
                ttl: hop_limit,
                ident: 0,
                dont_frag: true,
                protocol: PROTO_UDP,
                payload_len: 0,
            }),
            _ => IpRepr::V6(Ipv6Repr {
                src: s,
                dst: d,
                traffic_class,
                flow_label: 0,
                hop_limit,
                next_header: PROTO_UDP,
                payload_len: 0,
            }),
        }
    }
}

/// A parsed RoCE v2 frame: every header as values, the payload borrowed from the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RocePacket<'a> {
    /// Ethernet header.
    pub eth: EthernetRepr,
    /// IP header (`payload_len` as received).
    pub ip: IpRepr,
    /// UDP header.
    pub udp: UdpRepr,
    /// BTH.
    pub bth: BthRepr,
    /// The BTH's pad count.
    pub pad: u8,
    /// The extension headers the opcode names.
    pub ext: ExtRepr,
    /// The payload, without pad and ICRC.
    pub payload: &'a [u8],
    /// The ICRC (verified; the number whose little-endian bytes end the packet).
    pub icrc: u32,
}

impl<'a> RocePacket<'a> {
    /// Parse and check a frame (as a port delivers it: from the destination MAC, no FCS).
    /// Never panics; the error names the first check that failed.
    pub fn parse(frame: &'a [u8]) -> Result<RocePacket<'a>, Malformed> {
        let f = Frame::new_checked(frame)?;
        let eth = EthernetRepr::parse(&f);
        let l3_all = &frame[f.header_len()..];
        let (ip, l3, l4) = match eth.ethertype {
            EtherType::Ipv4 => {
                let p = Ipv4Packet::new_unchecked(l3_all);
                let r = Ipv4Repr::parse(&p)?;
                if r.protocol != PROTO_UDP {
                    return Err(Malformed::IpProtocol(r.protocol));
                }
                let total = ipv4::HEADER_LEN + r.payload_len;
                (IpRepr::V4(r), &l3_all[..total], &l3_all[ipv4::HEADER_LEN..total])
            }
            EtherType::Ipv6 => {
                let p = Ipv6Packet::new_unchecked(l3_all);
                let r = Ipv6Repr::parse(&p)?;
                if r.next_header != PROTO_UDP {
                    return Err(Malformed::IpProtocol(r.next_header));
                }
                let total = ipv6::HEADER_LEN + r.payload_len;
                (IpRepr::V6(r), &l3_all[..total], &l3_all[ipv6::HEADER_LEN..total])
            }
            other => return Err(Malformed::EtherType(other.raw())),
        };
        let ph = match &ip {
            IpRepr::V4(r) => PseudoHeader::V4(r.src, r.dst),
            IpRepr::V6(r) => PseudoHeader::V6(r.src, r.dst),
        };
        let u = UdpPacket::new_unchecked(l4);
        let udp = UdpRepr::parse(&u, &ph)?;
        if udp.dst_port != ROCE_V2_PORT {
            return Err(Malformed::UdpPort(udp.dst_port));
        }
        let l5 = &l4[udp::HEADER_LEN..];
        let b = Bth::new_checked(l5)?;
        if b.tver() != 0 {
            return Err(Malformed::BthVersion(b.tver()));
        }
        let op = b.opcode();
        let headers = op.headers().ok_or(Malformed::Opcode(op.0))?;
        let hdrs = bth::LEN + headers.len();
        if l5.len() < hdrs + ICRC_LEN {
            return Err(Malformed::Truncated(Layer::Extension));
        }
        let pad = b.pad_count();
        if l5.len() < hdrs + usize::from(pad) + ICRC_LEN {
            return Err(Malformed::PadCount(pad));
        }
        let computed = icrc::compute(l3)?;
        let stored = icrc::stored(l3).ok_or(Malformed::Truncated(Layer::Payload))?;
        if stored != computed {
            return Err(Malformed::Icrc { stored, computed });
        }
        let ext = ExtRepr::parse(&headers, &l5[bth::LEN..])?;
        let payload = &l5[hdrs..l5.len() - ICRC_LEN - usize::from(pad)];
        Ok(RocePacket { eth, ip, udp, bth: BthRepr::parse(&b), pad, ext, payload, icrc: stored })
    }

    /// The headers as a builder, to emit the same packet again (or a changed copy).
    pub fn repr(&self) -> RoceRepr {
        RoceRepr {
            dst_mac: self.eth.dst,
            src_mac: self.eth.src,
            vlan: self.eth.vlan,
            ip: self.ip,
            udp_src_port: self.udp.src_port,
            bth: self.bth,
            ext: self.ext,
        }
    }
}

/// Why a packet could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuildError {
    /// The opcode is not in the table ([`bth::Opcode::headers`]).
    Opcode(u8),
    /// The extension headers given are not the ones the opcode carries.
    Headers {
        /// What the opcode carries.
        expected: Headers,
        /// What was given.
        given: Headers,
    },
    /// A payload on an opcode that carries none.
    Payload,
    /// More than an IP packet can hold.
    TooLong,
    /// The output buffer is shorter than the frame.
    Buffer {
        /// Bytes needed.
        need: usize,
    },
}

/// A RoCE v2 packet's headers as values, to emit a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoceRepr {
    /// Destination MAC.
    pub dst_mac: Mac,
    /// Source MAC.
    pub src_mac: Mac,
    /// An 802.1Q tag, if any.
    pub vlan: Option<VlanTag>,
    /// IP header (its `payload_len` is ignored and derived).
    pub ip: IpRepr,
    /// UDP source port (the destination is 4791).
    pub udp_src_port: u16,
    /// BTH.
    pub bth: BthRepr,
    /// Extension headers: exactly those the opcode carries.
    pub ext: ExtRepr,
}

impl RoceRepr {
    fn udp_len(&self, payload: usize) -> usize {
        let pad = (4 - payload % 4) % 4;
        udp::HEADER_LEN + bth::LEN + self.ext.shape().len() + payload + pad + ICRC_LEN
    }

    /// Bytes of the frame for `payload` bytes of payload (60 at least).
    pub fn frame_len(&self, payload: usize) -> usize {
        let eth = ethernet::HEADER_LEN + if self.vlan.is_some() { 4 } else { 0 };
        (eth + self.ip.header_len() + self.udp_len(payload)).max(MIN_FRAME)
    }

    /// Write the frame into the start of `buf`; returns its length.
    pub fn emit(&self, payload: &[u8], buf: &mut [u8]) -> Result<usize, BuildError> {
        let op = self.bth.opcode;
        let mut expected = op.headers().ok_or(BuildError::Opcode(op.0))?;
        let given = self.ext.shape();
        let carries_payload = expected.payload;
        expected.payload = false;
        if given != expected {
            return Err(BuildError::Headers { expected, given });
        }
        if !carries_payload && !payload.is_empty() {
            return Err(BuildError::Payload);
        }
        let udp_len = self.udp_len(payload.len());
        if self.ip.header_len() + udp_len > usize::from(u16::MAX) {
            return Err(BuildError::TooLong);
        }
        let n = self.frame_len(payload.len());
        if buf.len() < n {
            return Err(BuildError::Buffer { need: n });
        }
        let buf = &mut buf[..n];
        buf.fill(0);

        let ethertype = match self.ip {
            IpRepr::V4(_) => EtherType::Ipv4,
            IpRepr::V6(_) => EtherType::Ipv6,
        };
        let eth = EthernetRepr { dst: self.dst_mac, src: self.src_mac, vlan: self.vlan, ethertype };
        let mut f = Frame::new_unchecked(&mut *buf);
        eth.emit(&mut f);
        let l3_start = eth.header_len();
        let l3_len = self.ip.header_len() + udp_len;
        let l3 = &mut buf[l3_start..l3_start + l3_len];
        let ip_len = self.ip.header_len();
        match self.ip {
            IpRepr::V4(r) => {
                let r = Ipv4Repr { payload_len: udp_len, protocol: PROTO_UDP, ..r };
                r.emit(&mut Ipv4Packet::new_unchecked(&mut l3[..ip_len]));
            }
            IpRepr::V6(r) => {
                let r = Ipv6Repr { payload_len: udp_len, next_header: PROTO_UDP, ..r };
                r.emit(&mut Ipv6Packet::new_unchecked(&mut l3[..ip_len]));
            }
        }
        let udp_repr = UdpRepr { src_port: self.udp_src_port, dst_port: ROCE_V2_PORT };
        let mut u = UdpPacket::new_unchecked(&mut l3[ip_len..]);
        udp_repr.emit(&mut u, udp_len - udp::HEADER_LEN);
        let l5 = u.payload_mut();
        let pad = ((4 - payload.len() % 4) % 4) as u8;
        self.bth.emit(&mut Bth::new_unchecked(&mut l5[..bth::LEN]), pad);
        let e = self.ext.emit(&mut l5[bth::LEN..]);
        let at = bth::LEN + e;
        l5[at..at + payload.len()].copy_from_slice(payload);
        icrc::fill(l3).map_err(|_| BuildError::Buffer { need: n })?;
        Ok(n)
    }

    /// The frame as a new vector.
    pub fn to_frame(&self, payload: &[u8]) -> Result<Vec<u8>, BuildError> {
        let mut v = vec![0u8; self.frame_len(payload.len())];
        let n = self.emit(payload, &mut v)?;
        v.truncate(n);
        Ok(v)
    }
}

/// A BTH with the defaults rxe sends (P_Key 0xffff, no flags) for `opcode` to `dest_qp`.
pub fn bth(opcode: bth::Opcode, dest_qp: u32, psn: u32) -> BthRepr {
    BthRepr {
        opcode,
        solicited: false,
        mig_req: false,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp,
        ack_req: false,
        psn,
    }
}

/// An IPv4 source/destination pair as GIDs (`::ffff:a.b.c.d`), for tests and examples.
pub fn ipv4_gids(src: Ipv4Addr, dst: Ipv4Addr) -> ([u8; 16], [u8; 16]) {
    (src.to_ipv6_mapped().octets(), dst.to_ipv6_mapped().octets())
}
