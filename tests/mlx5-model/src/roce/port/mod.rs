//! Ports: where frames leave and arrive. A [`Port`] sends one Ethernet frame (destination
//! MAC first, no FCS) and hands over a received one without blocking.
//!
//! * [`Hub`] / [`HubPort`]: an in-process segment joining several ports, delivering by
//!   destination MAC as a learning-free switch with static addresses would: a unicast frame
//!   to the port(s) with that MAC, a group (multicast or broadcast) frame to every port but
//!   the sender; frames for no port are dropped and counted ([`HubStats`]).
//! * [`PacketSocket`] (Linux): an `AF_PACKET` raw socket bound to a named interface, to put
//!   the model's frames on a real (or loopback, or veth) wire.
//!
//! Wrappers compose: [`crate::roce::FaultPort`] (seeded faults) and
//! [`crate::roce::PcapTap`] (capture) take any `Port`.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use rdma_pmd::Mac;

use super::ethernet::{self, is_group};

#[cfg(target_os = "linux")]
mod packet_socket;
#[cfg(target_os = "linux")]
pub use packet_socket::PacketSocket;

/// Why a port could not send or receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortError {
    /// A system call failed (`op` names it) with this errno.
    Io {
        /// The call.
        op: &'static str,
        /// `errno`.
        errno: i32,
    },
    /// A frame longer than the port carries.
    TooLong {
        /// The frame's length.
        len: usize,
        /// The longest frame the port carries.
        max: usize,
    },
    /// A frame shorter than an Ethernet header.
    Runt {
        /// The frame's length.
        len: usize,
    },
    /// No such interface.
    NoInterface,
}

impl fmt::Display for PortError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortError::Io { op, errno } => {
                write!(f, "{op}: {}", std::io::Error::from_raw_os_error(*errno))
            }
            PortError::TooLong { len, max } => write!(f, "{len}-byte frame, at most {max}"),
            PortError::Runt { len } => write!(f, "{len}-byte frame, shorter than a header"),
            PortError::NoInterface => f.write_str("no such interface"),
        }
    }
}

impl std::error::Error for PortError {}

/// A place to send Ethernet frames to and receive them from.
pub trait Port: Send {
    /// Send one frame (destination MAC first, no FCS).
    fn send(&mut self, frame: &[u8]) -> Result<(), PortError>;

    /// The next frame received, or `None` if none is waiting. Never blocks.
    fn recv(&mut self) -> Result<Option<Vec<u8>>, PortError>;
}

impl<P: Port + ?Sized> Port for Box<P> {
    fn send(&mut self, frame: &[u8]) -> Result<(), PortError> {
        (**self).send(frame)
    }
    fn recv(&mut self) -> Result<Option<Vec<u8>>, PortError> {
        (**self).recv()
    }
}

/// What a [`Hub`] did with the frames sent into it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HubStats {
    /// Frames sent into the hub.
    pub sent: u64,
    /// Copies queued at a receiving port.
    pub delivered: u64,
    /// Unicast frames no port has the MAC of.
    pub unknown_dst: u64,
    /// Copies dropped because the receiving port's queue was full.
    pub overflow: u64,
}

/// The longest frame a default hub carries: 1500 bytes of IP, the header and a tag.
pub const DEFAULT_MAX_FRAME: usize = 1500 + ethernet::HEADER_LEN + ethernet::VLAN_TAG_LEN;
/// Frames a default hub port queues before it drops.
pub const DEFAULT_QUEUE: usize = 4096;

struct Slot {
    id: u64,
    mac: Mac,
    queue: VecDeque<Vec<u8>>,
}

struct HubInner {
    slots: Vec<Slot>,
    next_id: u64,
    max_frame: usize,
    queue_depth: usize,
    stats: HubStats,
}

/// An in-process Ethernet segment. Cheap to clone (a handle).
#[derive(Clone)]
pub struct Hub {
    inner: Arc<Mutex<HubInner>>,
}

impl fmt::Debug for Hub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.lock();
        write!(f, "Hub({} ports, {:?})", g.slots.len(), g.stats)
    }
}

impl Default for Hub {
    fn default() -> Hub {
        Hub::with_limits(DEFAULT_MAX_FRAME, DEFAULT_QUEUE)
    }
}

impl Hub {
    /// A hub carrying frames of up to [`DEFAULT_MAX_FRAME`] bytes, [`DEFAULT_QUEUE`] frames
    /// queued per port.
    pub fn new() -> Hub {
        Hub::default()
    }

    /// A hub with its own frame limit (a jumbo MTU) and queue depth.
    pub fn with_limits(max_frame: usize, queue_depth: usize) -> Hub {
        Hub {
            inner: Arc::new(Mutex::new(HubInner {
                slots: Vec::new(),
                next_id: 0,
                max_frame,
                queue_depth,
                stats: HubStats::default(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HubInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new port with MAC `mac`; it receives frames for `mac` and group frames.
    pub fn port(&self, mac: Mac) -> HubPort {
        let mut g = self.lock();
        let id = g.next_id;
        g.next_id += 1;
        g.slots.push(Slot { id, mac, queue: VecDeque::new() });
        HubPort { hub: self.clone(), id, mac }
    }

    /// What the hub did so far.
    pub fn stats(&self) -> HubStats {
        self.lock().stats
    }
}

/// One port of a [`Hub`]; dropping it detaches it (its queued frames are lost).
pub struct HubPort {
    hub: Hub,
    id: u64,
    mac: Mac,
}

impl fmt::Debug for HubPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HubPort({}, {:?})", self.id, self.mac)
    }
}

impl HubPort {
    /// The port's MAC.
    pub fn mac(&self) -> Mac {
        self.mac
    }
}

impl Port for HubPort {
    fn send(&mut self, frame: &[u8]) -> Result<(), PortError> {
        let mut g = self.hub.lock();
        if frame.len() < ethernet::HEADER_LEN {
            return Err(PortError::Runt { len: frame.len() });
        }
        if frame.len() > g.max_frame {
            return Err(PortError::TooLong { len: frame.len(), max: g.max_frame });
        }
        g.stats.sent += 1;
        let mut dst = [0u8; 6];
        dst.copy_from_slice(&frame[..6]);
        let dst = Mac(dst);
        let group = is_group(&dst);
        let depth = g.queue_depth;
        let (mut delivered, mut overflow, mut matched) = (0, 0, false);
        for s in g.slots.iter_mut().filter(|s| s.id != self.id) {
            if group || s.mac == dst {
                matched = true;
                if s.queue.len() >= depth {
                    overflow += 1;
                } else {
                    s.queue.push_back(frame.to_vec());
                    delivered += 1;
                }
            }
        }
        g.stats.delivered += delivered;
        g.stats.overflow += overflow;
        if !matched && !group {
            g.stats.unknown_dst += 1;
        }
        Ok(())
    }

    fn recv(&mut self) -> Result<Option<Vec<u8>>, PortError> {
        let mut g = self.hub.lock();
        Ok(g.slots.iter_mut().find(|s| s.id == self.id).and_then(|s| s.queue.pop_front()))
    }
}

impl Drop for HubPort {
    fn drop(&mut self) {
        let id = self.id;
        self.hub.lock().slots.retain(|s| s.id != id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(dst: Mac, src: Mac, tag: u8) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[..6].copy_from_slice(&dst.0);
        f[6..12].copy_from_slice(&src.0);
        f[12..14].copy_from_slice(&[0x88, 0xb5]);
        f[14] = tag;
        f
    }

    const A: Mac = Mac([2, 0, 0, 0, 0, 0xa]);
    const B: Mac = Mac([2, 0, 0, 0, 0, 0xb]);
    const C: Mac = Mac([2, 0, 0, 0, 0, 0xc]);

    #[test]
    fn unicast_goes_to_its_mac_only() {
        let hub = Hub::new();
        let (mut a, mut b, mut c) = (hub.port(A), hub.port(B), hub.port(C));
        a.send(&frame(B, A, 1)).unwrap();
        assert_eq!(b.recv().unwrap().map(|f| f[14]), Some(1));
        assert_eq!(b.recv().unwrap(), None);
        assert_eq!(c.recv().unwrap(), None);
        assert_eq!(a.recv().unwrap(), None);
        a.send(&frame(Mac([2, 0, 0, 0, 0, 0xd]), A, 2)).unwrap();
        let s = hub.stats();
        assert_eq!((s.sent, s.delivered, s.unknown_dst), (2, 1, 1));
    }

    #[test]
    fn broadcast_reaches_all_but_the_sender_in_order() {
        let hub = Hub::new();
        let (mut a, mut b, mut c) = (hub.port(A), hub.port(B), hub.port(C));
        for i in 0..3 {
            b.send(&frame(ethernet::BROADCAST, B, i)).unwrap();
        }
        for p in [&mut a, &mut c] {
            for i in 0..3 {
                assert_eq!(p.recv().unwrap().map(|f| f[14]), Some(i));
            }
        }
        assert_eq!(b.recv().unwrap(), None);
    }

    #[test]
    fn limits_and_detach() {
        let hub = Hub::with_limits(100, 2);
        let (mut a, b) = (hub.port(A), hub.port(B));
        assert_eq!(a.send(&[0; 13]), Err(PortError::Runt { len: 13 }));
        assert_eq!(a.send(&[0; 101]), Err(PortError::TooLong { len: 101, max: 100 }));
        for i in 0..3 {
            a.send(&frame(B, A, i)).unwrap();
        }
        assert_eq!(hub.stats().overflow, 1);
        drop(b);
        a.send(&frame(B, A, 9)).unwrap();
        assert_eq!(hub.stats().unknown_dst, 1);
    }
}
