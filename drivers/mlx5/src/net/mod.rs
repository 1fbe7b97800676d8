//! Network protocols the driver speaks itself, because the HCA does not: ARP for IPv4 over
//! Ethernet ([`arp`]: the wire format) and the neighbour table with address resolution
//! ([`neigh`]). Both are pure (no device, no allocation) and tested on bytes; the Ethernet
//! path that carries their frames is the Ethernet port (`crate::eth`).

pub mod arp;
pub mod neigh;

pub use arp::{ArpError, ArpOp, ArpRepr};
pub use neigh::{Arp, ArpStats, Handled, NeighConfig, NeighState, Neighbour, Resolve};
