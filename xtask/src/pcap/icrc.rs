//! The tier's own check of the ICRC of every RoCE v2 frame in a capture (`tshark` does not
//! check it), so that a frame the model got wrong fails the tier while the frames a test
//! corrupted on purpose (listed beside the capture) are tolerated — and only those.
//!
//! The ICRC (IBTA vol 1 §7.8.1, annex A17.3.3, as the kernel's `rxe_icrc.c` computes it): the
//! reflected CRC-32 of IEEE 802.3 (zlib's `crc32`) over eight 0xff bytes (the masked LRH), then
//! the IPv4 header with TOS, TTL and header checksum set to ones, the UDP header with its
//! checksum set to ones, the BTH with byte 4 set to ones, then everything after the BTH up to
//! the ICRC; stored little-endian in the last four bytes of the UDP payload. IPv6 frames are
//! not checked (the tier's wire is IPv4 only) and are counted apart.

/// UDP port of RoCE v2.
const ROCE_V2_PORT: u16 = 4791;
const BTH_LEN: usize = 12;

/// The register after one byte, for each byte value (reflected polynomial 0xedb88320).
fn table() -> &'static [u32; 256] {
    static T: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    T.get_or_init(|| {
        let mut t = [0u32; 256];
        for (i, e) in t.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 { 0xedb8_8320 ^ (c >> 1) } else { c >> 1 };
            }
            *e = c;
        }
        t
    })
}

fn crc32(data: impl IntoIterator<Item = u8>) -> u32 {
    let t = table();
    let mut c = !0u32;
    for b in data {
        c = t[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

/// What one frame is, as far as the ICRC goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Icrc {
    /// Not RoCE v2 over IPv4 (ARP, IPv6, other UDP).
    NotChecked,
    /// RoCE v2, ICRC right.
    Good,
    /// RoCE v2, ICRC wrong (or the frame too short for its headers).
    Bad,
}

/// Check one Ethernet frame (destination MAC first, no FCS).
pub fn check(frame: &[u8]) -> Icrc {
    let be16 = |b: &[u8], at: usize| u16::from_be_bytes([b[at], b[at + 1]]);
    if frame.len() < 14 {
        return Icrc::NotChecked;
    }
    let mut l3 = 14;
    let mut ethertype = be16(frame, 12);
    if ethertype == 0x8100 && frame.len() >= 18 {
        ethertype = be16(frame, 16);
        l3 = 18;
    }
    if ethertype != 0x0800 || frame.len() < l3 + 20 {
        return Icrc::NotChecked;
    }
    let ip = &frame[l3..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let total = usize::from(be16(ip, 2));
    if ip[0] >> 4 != 4 || ip[9] != 17 || ihl < 20 || ip.len() < ihl + 8 {
        return Icrc::NotChecked;
    }
    if be16(ip, ihl + 2) != ROCE_V2_PORT {
        return Icrc::NotChecked;
    }
    // The IP total length bounds the packet (a short frame carries Ethernet padding).
    if total > ip.len() || total < ihl + 8 + BTH_LEN + 4 {
        return Icrc::Bad;
    }
    let pkt = &ip[..total];
    let end = total - 4;
    let mut masked = pkt[..end].to_vec();
    masked[1] = 0xff; // TOS
    masked[8] = 0xff; // TTL
    masked[10] = 0xff; // header checksum
    masked[11] = 0xff;
    masked[ihl + 6] = 0xff; // UDP checksum
    masked[ihl + 7] = 0xff;
    masked[ihl + 8 + 4] = 0xff; // BTH: FECN, BECN, reserved
    let computed = crc32(std::iter::repeat_n(0xffu8, 8).chain(masked));
    let stored = u32::from_le_bytes([pkt[end], pkt[end + 1], pkt[end + 2], pkt[end + 3]]);
    if computed == stored {
        Icrc::Good
    } else {
        Icrc::Bad
    }
}

/// The frames of a classic pcap file (either byte order, micro- or nanosecond stamps), in
/// order; `None` if it is not one.
pub fn frames(bytes: &[u8]) -> Option<Vec<&[u8]>> {
    let magic = bytes.get(..4)?;
    let le = match magic {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        _ => return None,
    };
    let u32_at = |at: usize| -> Option<u32> {
        let b: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
        Some(if le { u32::from_le_bytes(b) } else { u32::from_be_bytes(b) })
    };
    let mut out = Vec::new();
    let mut at = 24;
    while at < bytes.len() {
        let incl = u32_at(at + 8)? as usize;
        let data = bytes.get(at + 16..at + 16 + incl)?;
        out.push(data);
        at += 16 + incl;
    }
    Some(out)
}

/// The capture numbers (from 1, as tshark counts) of the RoCE v2 frames with a bad ICRC, and
/// how many were checked; `None` if the file is not a pcap.
pub fn bad_frames(bytes: &[u8]) -> Option<(Vec<u64>, usize)> {
    let mut bad = Vec::new();
    let mut checked = 0;
    for (i, f) in frames(bytes)?.into_iter().enumerate() {
        match check(f) {
            Icrc::NotChecked => {}
            Icrc::Good => checked += 1,
            Icrc::Bad => {
                checked += 1;
                bad.push(i as u64 + 1);
            }
        }
    }
    Some((bad, checked))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_is_zlibs() {
        // The check value of CRC-32/ISO-HDLC (zlib's crc32).
        assert_eq!(crc32(*b"123456789"), 0xcbf4_3926);
    }

    #[test]
    fn a_flipped_payload_bit_fails_and_masked_fields_do_not_count() {
        // An RC SEND-only of 4 payload bytes between 10.3.0.1 and 10.3.0.2, ICRC filled here.
        let mut f = vec![0u8; 14 + 20 + 8 + 12 + 4 + 4];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let ip = &mut f[14..];
        ip[0] = 0x45;
        let total = (20 + 8 + 12 + 4 + 4) as u16;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&[10, 3, 0, 1]);
        ip[16..20].copy_from_slice(&[10, 3, 0, 2]);
        ip[22..24].copy_from_slice(&4791u16.to_be_bytes());
        ip[24..26].copy_from_slice(&(total - 20).to_be_bytes());
        ip[28] = 0x04; // SEND only
        ip[28 + 12..28 + 16].copy_from_slice(b"abcd");
        let mut masked = ip[..total as usize - 4].to_vec();
        for i in [1, 8, 10, 11, 26, 27, 32] {
            masked[i] = 0xff;
        }
        let icrc = crc32(std::iter::repeat_n(0xff, 8).chain(masked));
        let end = 14 + total as usize - 4;
        f[end..].copy_from_slice(&icrc.to_le_bytes());
        assert_eq!(check(&f), Icrc::Good);
        let mut g = f.clone();
        g[14 + 8] = 1; // TTL: masked
        g[14 + 1] = 0x2e; // TOS: masked
        assert_eq!(check(&g), Icrc::Good);
        g[14 + 28 + 12] ^= 0x10; // a payload bit
        assert_eq!(check(&g), Icrc::Bad);
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(check(&arp), Icrc::NotChecked);
    }
}
