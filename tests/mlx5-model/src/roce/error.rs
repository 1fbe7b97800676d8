//! What can be wrong with a received frame: one [`Malformed`] per check, in the order rxe's
//! receive path (and the IP stack before it) makes them, and [`DropCounters`], the count of
//! dropped frames by reason.

use std::fmt;

/// A header of the RoCE v2 stack (or the part of the frame after the headers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layer {
    /// Ethernet II: addresses and EtherType.
    Ethernet,
    /// The 802.1Q tag.
    Vlan,
    /// ARP (IPv4 over Ethernet).
    Arp,
    /// IPv4 header.
    Ipv4,
    /// IPv6 header.
    Ipv6,
    /// UDP header.
    Udp,
    /// Base transport header.
    Bth,
    /// The extension headers the opcode names (RETH, AETH, …).
    Extension,
    /// The payload, its pad and the ICRC.
    Payload,
}

/// Why a frame was not accepted as a RoCE v2 packet: which check failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Malformed {
    /// The buffer ends before the header of this layer (or the length it declares) does.
    Truncated(Layer),
    /// The EtherType is neither IPv4 (0x0800) nor IPv6 (0x86dd).
    EtherType(u16),
    /// The IPv4 version nibble is not 4 (or the IPv6 one not 6).
    IpVersion(u8),
    /// The IPv4 header length is not 5 words. Below 5 is malformed; above, options, which
    /// RoCE v2 senders do not use and rxe's ICRC does not cover (it hashes 20 bytes).
    Ipv4HeaderLen(u8),
    /// The IPv4 header checksum does not verify.
    Ipv4Checksum,
    /// A fragment (MF set or a non-zero offset): RoCE v2 packets are sent with DF.
    Ipv4Fragment,
    /// The IP total length (IPv4) or payload length (IPv6) exceeds the frame or is too
    /// short for a UDP header.
    IpLength,
    /// The IP protocol (next header) is not UDP (17).
    IpProtocol(u8),
    /// The UDP length is not exactly the IP payload length.
    UdpLength,
    /// The UDP destination port is not 4791.
    UdpPort(u16),
    /// A non-zero UDP checksum that does not verify (zero means "none", as rxe sends).
    UdpChecksum,
    /// BTH TVer is not 0.
    BthVersion(u8),
    /// An opcode with no RC, UC or UD meaning (or a CNP) in the table.
    Opcode(u8),
    /// The UDP payload is shorter than the headers, the pad count and the ICRC together.
    PadCount(u8),
    /// The ICRC does not match (both values as [`crate::roce::icrc`] numbers them).
    Icrc {
        /// The value in the frame's last four bytes (read little-endian).
        stored: u32,
        /// The value computed over the frame.
        computed: u32,
    },
    /// ARP that is not Ethernet/IPv4 (hardware type 1, protocol 0x0800, lengths 6 and 4)
    /// or whose operation is neither request nor reply.
    ArpFormat,
}

impl Malformed {
    /// Short name of the failed check, also the key of [`DropCounters`].
    pub fn reason(&self) -> &'static str {
        match self {
            Malformed::Truncated(l) => match l {
                Layer::Ethernet => "truncated ethernet",
                Layer::Vlan => "truncated vlan",
                Layer::Arp => "truncated arp",
                Layer::Ipv4 => "truncated ipv4",
                Layer::Ipv6 => "truncated ipv6",
                Layer::Udp => "truncated udp",
                Layer::Bth => "truncated bth",
                Layer::Extension => "truncated extension header",
                Layer::Payload => "truncated payload",
            },
            Malformed::EtherType(_) => "ethertype",
            Malformed::IpVersion(_) => "ip version",
            Malformed::Ipv4HeaderLen(_) => "ipv4 header length",
            Malformed::Ipv4Checksum => "ipv4 checksum",
            Malformed::Ipv4Fragment => "ipv4 fragment",
            Malformed::IpLength => "ip length",
            Malformed::IpProtocol(_) => "ip protocol",
            Malformed::UdpLength => "udp length",
            Malformed::UdpPort(_) => "udp port",
            Malformed::UdpChecksum => "udp checksum",
            Malformed::BthVersion(_) => "bth tver",
            Malformed::Opcode(_) => "opcode",
            Malformed::PadCount(_) => "pad count",
            Malformed::Icrc { .. } => "icrc",
            Malformed::ArpFormat => "arp format",
        }
    }
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Malformed::EtherType(t) => write!(f, "ethertype {t:#06x}"),
            Malformed::IpVersion(v) => write!(f, "ip version {v}"),
            Malformed::Ipv4HeaderLen(l) => write!(f, "ipv4 header length {l} words"),
            Malformed::IpProtocol(p) => write!(f, "ip protocol {p}"),
            Malformed::UdpPort(p) => write!(f, "udp port {p}"),
            Malformed::BthVersion(v) => write!(f, "bth tver {v}"),
            Malformed::Opcode(o) => write!(f, "opcode {o:#04x}"),
            Malformed::PadCount(p) => write!(f, "pad count {p} does not fit"),
            Malformed::Icrc { stored, computed } => {
                write!(f, "icrc {stored:#010x}, computed {computed:#010x}")
            }
            other => f.write_str(other.reason()),
        }
    }
}

impl std::error::Error for Malformed {}

/// Frames dropped by reason ([`Malformed::reason`]), for a receiver that drops and counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DropCounters {
    counts: std::collections::BTreeMap<&'static str, u64>,
}

impl DropCounters {
    /// No drops yet.
    pub fn new() -> DropCounters {
        DropCounters::default()
    }

    /// Count one frame dropped for `why`.
    pub fn count(&mut self, why: &Malformed) {
        *self.counts.entry(why.reason()).or_insert(0) += 1;
    }

    /// Frames dropped for reason `reason` (a [`Malformed::reason`] string).
    pub fn get(&self, reason: &str) -> u64 {
        self.counts.get(reason).copied().unwrap_or(0)
    }

    /// Frames dropped for the reason `why` has.
    pub fn of(&self, why: &Malformed) -> u64 {
        self.get(why.reason())
    }

    /// Every frame dropped.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }

    /// Each reason with its count, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.counts.iter().map(|(k, v)| (*k, *v))
    }
}
