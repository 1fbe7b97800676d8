//! The 40 bytes a UD or GSI receiver finds at the start of its scatter list: the network
//! header of the datagram as it arrived.
//!
//! On a RoCE v2 port a datagram has no IB GRH on the wire, yet the verbs contract (a UD
//! receive buffer starts with 40 bytes for the GRH, `ibv_post_recv(3)`) is kept by placing
//! the IP header there instead:
//!
//! * IPv4 (both GIDs IPv4-mapped, `::ffff:a.b.c.d`): 20 bytes of zeros, then the 20-byte
//!   IPv4 header, so the IP header ends where a GRH would. This is the layout of the kernel's
//!   `union rdma_network_hdr` (`include/rdma/ib_verbs.h`: `u8 reserved[20]; struct iphdr
//!   roce4grh;`), which rxe fills from the received skb (`rxe_recv.c`/`rxe_resp.c` copy
//!   `ip_hdr(skb)` into `roce4grh`), and which `ib_get_gids_from_rdma_hdr` reads back for
//!   an mlx5 completion (`IB_WC_WITH_NETWORK_HDR_TYPE` = IPv4).
//! * IPv6: the 40-byte IPv6 header itself (where the GRH's fields sit in the same places).
//!
//! The IPv4 header is the one the sender put on the wire (`roce-wire` notes, rxe
//! `prepare_ipv4_hdr`): version 4, IHL 5, TOS = the address vector's traffic class, total
//! length over IP + UDP + BTH + DETH (+ ImmDt) + payload + pad + ICRC, identification 0, DF,
//! TTL = the hop limit, protocol 17 (UDP), a valid header checksum, source and destination
//! addresses from the GIDs.

/// Bytes of the GRH area of a UD receive.
pub const GRH_LEN: usize = 40;

/// `flags_rqpn` bits 25:24, the RoCE L3 header type of a responder CQE
/// (`MLX5_CQE_ROCE_L3_HEADER_TYPE_*`, kernel `include/linux/mlx5/device.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum L3 {
    /// `MLX5_CQE_ROCE_L3_HEADER_TYPE_IPV6` (1).
    Ipv6 = 1,
    /// `MLX5_CQE_ROCE_L3_HEADER_TYPE_IPV4` (2).
    Ipv4 = 2,
}

/// Bytes after the IP header of a RoCE v2 UD SEND: UDP (8), BTH (12), DETH (8), the ImmDt
/// (4) if any, the payload, its pad to 4 bytes and the ICRC (4).
fn after_ip(payload: usize, imm: bool) -> usize {
    let pad = (4 - payload % 4) % 4;
    8 + 12 + 8 + if imm { 4 } else { 0 } + payload + pad + 4
}

/// The IPv4 address of an IPv4-mapped GID.
fn v4(gid: &[u8; 16]) -> Option<[u8; 4]> {
    let mapped = gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff;
    mapped.then(|| [gid[12], gid[13], gid[14], gid[15]])
}

/// What the datagram's network header carries.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Hdr {
    pub sgid: [u8; 16],
    pub dgid: [u8; 16],
    pub tclass: u8,
    pub hop_limit: u8,
    pub flow_label: u32,
    pub payload: usize,
    pub imm: bool,
}

impl Hdr {
    /// The 40 bytes and the header type the receiver's CQE reports.
    pub fn emit(&self) -> ([u8; GRH_LEN], L3) {
        let mut g = [0u8; GRH_LEN];
        let rest = after_ip(self.payload, self.imm);
        match (v4(&self.sgid), v4(&self.dgid)) {
            (Some(src), Some(dst)) => {
                let ip = &mut g[20..];
                ip[0] = 0x45;
                ip[1] = self.tclass;
                ip[2..4].copy_from_slice(&((20 + rest) as u16).to_be_bytes());
                // identification 0; flags DF, fragment offset 0
                ip[6] = 0x40;
                ip[8] = self.hop_limit;
                ip[9] = 17;
                ip[12..16].copy_from_slice(&src);
                ip[16..20].copy_from_slice(&dst);
                let sum = checksum(ip);
                ip[10..12].copy_from_slice(&sum.to_be_bytes());
                (g, L3::Ipv4)
            }
            _ => {
                let w = 6u32 << 28 | u32::from(self.tclass) << 20 | (self.flow_label & 0xf_ffff);
                g[0..4].copy_from_slice(&w.to_be_bytes());
                g[4..6].copy_from_slice(&(rest as u16).to_be_bytes());
                g[6] = 17;
                g[7] = self.hop_limit;
                g[8..24].copy_from_slice(&self.sgid);
                g[24..40].copy_from_slice(&self.dgid);
                (g, L3::Ipv6)
            }
        }
    }
}

/// The IPv4 header checksum (RFC 791: the ones' complement of the ones' complement sum of
/// the header's 16-bit words, the checksum field counted as 0).
fn checksum(ip: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for (i, w) in ip[..20].chunks(2).enumerate() {
        if i != 5 {
            sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gid4(a: [u8; 4]) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&a);
        g
    }

    /// An independent vector: the IPv4 header of a 256-byte MAD (RDMA CM) from 10.0.0.1 to
    /// 10.0.0.2, TTL 64: total length 20+8+12+8+256+0+4 = 308 (0x134); its checksum worked
    /// by hand: 0x4500 + 0x0134 + 0x4000 + 0x4011 + 0x0a00 + 0x0001 + 0x0a00 + 0x0002 =
    /// 0xda48, no carry, so !0xda48 = 0x25b7.
    #[test]
    fn ipv4_grh_is_twenty_zeros_then_the_ip_header() {
        let h = Hdr {
            sgid: gid4([10, 0, 0, 1]),
            dgid: gid4([10, 0, 0, 2]),
            tclass: 0,
            hop_limit: 64,
            flow_label: 0,
            payload: 256,
            imm: false,
        };
        let (g, l3) = h.emit();
        assert_eq!(l3, L3::Ipv4);
        assert_eq!(g[..20], [0u8; 20]);
        let want = [
            0x45, 0x00, 0x01, 0x34, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x25, 0xb7, 10, 0, 0, 1,
            10, 0, 0, 2,
        ];
        assert_eq!(g[20..], want);
    }

    #[test]
    fn ipv6_grh_is_the_ipv6_header() {
        let mut s = [0u8; 16];
        s[0] = 0xfe;
        s[1] = 0x80;
        s[15] = 1;
        let mut d = s;
        d[15] = 2;
        let h = Hdr {
            sgid: s,
            dgid: d,
            tclass: 0x12,
            hop_limit: 7,
            flow_label: 0xabcde,
            payload: 5,
            imm: true,
        };
        let (g, l3) = h.emit();
        assert_eq!(l3, L3::Ipv6);
        assert_eq!(g[..8], [0x61, 0x2a, 0xbc, 0xde, 0x00, 44, 17, 7]); // 8+12+8+4+5+3+4 = 44
        assert_eq!((&g[8..24], &g[24..]), (&s[..], &d[..]));
    }
}
