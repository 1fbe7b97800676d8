//! RoCE v2 on an Ethernet wire: the frame formats, the ICRC, ports that carry frames, fault
//! injection and packet capture — the packet layer a packet-level transport runs on.
//!
//! A RoCE v2 frame is Ethernet II (optionally one 802.1Q tag) / IPv4 or IPv6 / UDP to port
//! 4791 / BTH / the extension headers the opcode names / payload / pad to 4 bytes / ICRC
//! (IBTA vol 1 annex A17; the kernel's rxe: `rxe_hdr.h`, `rxe_opcode.c`, `rxe_net.c`,
//! `rxe_icrc.c`, `rxe_recv.c`; `include/rdma/ib_pack.h`).
//!
//! * Typed views over byte buffers, one file per header family, each as smoltcp's
//!   `wire/*`: a `…Packet<T: AsRef<[u8]>>` (or `…Header`) with `new_checked`/`check_len`,
//!   getters that state the byte order (every field here is big-endian, network order, except
//!   the ICRC, which rxe stores little-endian), setters on `AsMut`, and a `…Repr` whose `emit`
//!   writes through the view: [`ethernet`], [`arp`], [`ipv4`], [`ipv6`], [`udp`], [`bth`]
//!   (and the opcode table), [`ext`] (RETH, AETH, ImmDt, IETH, DETH, AtomicETH,
//!   AtomicAckETH).
//! * [`icrc`]: the invariant CRC exactly as `rxe_icrc.c` computes it.
//! * [`packet`]: [`RocePacket::parse`] of a whole frame into typed headers and the payload,
//!   and [`RoceRepr::emit`], the builder. Parsing never panics: a malformed frame is a
//!   [`Malformed`] naming the check that failed, so the receiver can drop and count it
//!   ([`DropCounters`]).
//! * [`port`]: the [`Port`] trait (send a frame, receive one without blocking), an
//!   in-process [`Hub`] and, on Linux, an `AF_PACKET` socket ([`port::PacketSocket`]).
//! * [`fault`]: [`FaultPort`], seeded schedules of drops, duplicates, reordering and
//!   corruption on a port, one for what it sends and one for what it receives. [`pcap`]: a classic libpcap writer and [`PcapTap`], the port
//!   wrapper that records every frame.
//!
//! The model's transport does not use this layer yet: its engine delivers whole messages
//! synchronously over [`crate::Wire`]. This is the foundation that delivery will move onto.

pub mod arp;
pub mod bth;
mod error;
pub mod ethernet;
pub mod ext;
pub mod fault;
pub mod icrc;
pub mod ipv4;
pub mod ipv6;
pub mod packet;
pub mod pcap;
pub mod port;
mod rng;
pub mod udp;

#[cfg(test)]
mod tests;

pub use error::{DropCounters, Layer, Malformed};
pub use fault::{Exempt, FaultCounts, FaultEvent, FaultKind, FaultPlan, FaultPort};
pub use packet::{IpRepr, RocePacket, RoceRepr};
pub use pcap::{PcapTap, PcapWriter};
pub use port::{Hub, HubPort, Port, PortError};

/// The UDP destination port of RoCE v2 (IANA "roce", IBTA annex A17.2.2).
pub const ROCE_V2_PORT: u16 = 4791;

/// Fail with `Truncated(layer)` unless `buf` holds at least `need` bytes.
fn need(buf: &[u8], need: usize, layer: Layer) -> Result<(), Malformed> {
    if buf.len() < need {
        Err(Malformed::Truncated(layer))
    } else {
        Ok(())
    }
}
