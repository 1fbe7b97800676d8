//! The invariant CRC of a RoCE v2 packet, exactly as the kernel's rxe computes it
//! (`drivers/infiniband/sw/rxe/rxe_icrc.c`: `rxe_icrc_hdr`, `rxe_icrc_generate`,
//! `rxe_icrc_check`; IBTA vol 1 §7.8.1 and annex A17.3.3).
//!
//! * The CRC is the reflected CRC-32 of IEEE 802.3 (polynomial 0x04C11DB7, reflected
//!   0xEDB88320: the kernel's `crc32_le`, zlib's `crc32`), not CRC-32C.
//! * The register starts as if the eight bytes of a masked LRH (all 0xFF) had been fed to a
//!   register of all ones: rxe starts from the constant 0xdebb20e3, which is that state
//!   (checked in the tests below).
//! * Then, over a copy with the variant fields masked to ones: the IP header (IPv4: TOS,
//!   TTL and header checksum; IPv6: traffic class, flow label and hop limit — rxe sets
//!   `priority` to 0xf and the three `flow_lbl` bytes to 0xff, which covers the whole traffic
//!   class and flow label), the UDP header with its checksum set to 0xFFFF, and the BTH with
//!   byte 4 (FECN, BECN and the six reserved bits) set to 0xFF; then the rest unmasked: the
//!   extension headers, the payload and the pad (everything up to the ICRC).
//! * The result is complemented and stored in the last four bytes of the UDP payload
//!   little-endian (rxe stores the CPU-order `u32` through a `__be32` pointer on a
//!   little-endian host; scapy's `contrib/roce.py` packs it reversed the same way).
//!
//! The value this module returns is that complemented CRC as a number: the bytes on the wire
//! are its `to_le_bytes()`, and it equals zlib's `crc32` over the 8 ones and the masked bytes.

use super::{bth, ipv4, ipv6, need, udp, Layer, Malformed};

const fn table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { 0xedb8_8320 ^ (c >> 1) } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

static TABLE: [u32; 256] = table();

/// The slice-by-8 tables: `T8[k][i]` is the register after byte `i` and `k` zero bytes
/// (Intel's "slicing-by-8"), so eight bytes are folded with eight lookups.
const fn tables8() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    t[0] = table();
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            i += 1;
        }
        k += 1;
    }
    t
}

static T8: [[u32; 256]; 8] = tables8();

/// A reflected CRC-32 register (no implicit pre- or post-inversion: `crc32_le` semantics).
#[derive(Clone, Copy, Debug)]
pub struct Crc32(u32);

impl Crc32 {
    /// A register holding `v`.
    pub fn with_state(v: u32) -> Crc32 {
        Crc32(v)
    }

    /// Feed `data`.
    pub fn update(&mut self, data: &[u8]) {
        let mut c = self.0;
        let mut words = data.chunks_exact(8);
        for w in &mut words {
            let lo = c ^ u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            let hi = u32::from_le_bytes([w[4], w[5], w[6], w[7]]);
            c = T8[7][(lo & 0xff) as usize]
                ^ T8[6][((lo >> 8) & 0xff) as usize]
                ^ T8[5][((lo >> 16) & 0xff) as usize]
                ^ T8[4][(lo >> 24) as usize]
                ^ T8[3][(hi & 0xff) as usize]
                ^ T8[2][((hi >> 8) & 0xff) as usize]
                ^ T8[1][((hi >> 16) & 0xff) as usize]
                ^ T8[0][(hi >> 24) as usize];
        }
        for &b in words.remainder() {
            c = TABLE[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
        }
        self.0 = c;
    }

    /// The register.
    pub fn state(&self) -> u32 {
        self.0
    }
}

/// zlib's `crc32(data)`: register all ones, fed, complemented.
pub fn crc32(data: &[u8]) -> u32 {
    let mut c = Crc32::with_state(!0);
    c.update(data);
    !c.state()
}

/// The register after the masked LRH: rxe's starting constant.
pub const SEED: u32 = 0xdebb_20e3;

/// The ICRC of a RoCE v2 packet. `l3` runs from the first byte of the IP header to the last
/// byte of the UDP datagram (the ICRC included, which is not hashed); its version nibble
/// says IPv4 or IPv6. Only the lengths are checked here (the parser checks the rest).
pub fn compute(l3: &[u8]) -> Result<u32, Malformed> {
    let v6 = l3.first().map(|b| b >> 4) == Some(6);
    let ip_len = if v6 { ipv6::HEADER_LEN } else { ipv4::HEADER_LEN };
    let hdr = ip_len + udp::HEADER_LEN + bth::LEN;
    need(l3, ip_len, if v6 { Layer::Ipv6 } else { Layer::Ipv4 })?;
    need(l3, ip_len + udp::HEADER_LEN, Layer::Udp)?;
    need(l3, hdr, Layer::Bth)?;
    need(l3, hdr + 4, Layer::Payload)?;

    let mut masked = [0u8; ipv6::HEADER_LEN + udp::HEADER_LEN + bth::LEN];
    let m = &mut masked[..hdr];
    m.copy_from_slice(&l3[..hdr]);
    if v6 {
        m[0] |= 0x0f; // traffic class, high nibble
        m[1] = 0xff; // traffic class low nibble, flow label
        m[2] = 0xff;
        m[3] = 0xff;
        m[7] = 0xff; // hop limit
    } else {
        m[1] = 0xff; // TOS
        m[8] = 0xff; // TTL
        m[10] = 0xff; // header checksum
        m[11] = 0xff;
    }
    m[ip_len + 6] = 0xff; // UDP checksum
    m[ip_len + 7] = 0xff;
    m[ip_len + udp::HEADER_LEN + 4] = 0xff; // BTH FECN, BECN, reserved

    let mut c = Crc32::with_state(SEED);
    c.update(m);
    c.update(&l3[hdr..l3.len() - 4]);
    Ok(!c.state())
}

/// The ICRC stored in the last four bytes of `l3` (little-endian), if there are four.
pub fn stored(l3: &[u8]) -> Option<u32> {
    let n = l3.len();
    (n >= 4).then(|| u32::from_le_bytes([l3[n - 4], l3[n - 3], l3[n - 2], l3[n - 1]]))
}

/// Compute the ICRC of `l3` and store it in its last four bytes.
pub fn fill(l3: &mut [u8]) -> Result<u32, Malformed> {
    let v = compute(l3)?;
    let n = l3.len();
    l3[n - 4..].copy_from_slice(&v.to_le_bytes());
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_check_value() {
        // The CRC-32 catalogue's check value for "123456789".
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }

    #[test]
    fn rxe_seed_is_eight_ones_fed_to_all_ones() {
        let mut c = Crc32::with_state(!0);
        c.update(&[0xff; 8]);
        assert_eq!(c.state(), SEED);
    }

    #[test]
    fn short_input_is_an_error_not_a_panic() {
        for n in 0..64 {
            let mut b = vec![0x45u8; n];
            let _ = compute(&b);
            b.iter_mut().for_each(|x| *x = 0x60);
            let _ = compute(&b);
        }
        assert_eq!(compute(&[0x45; 39]), Err(Malformed::Truncated(Layer::Bth)));
        assert_eq!(compute(&[0x45; 43]), Err(Malformed::Truncated(Layer::Payload)));
        assert_eq!(stored(&[1, 2, 3]), None);
    }
}
