//! An in-process Ethernet segment joining models for RoCE v2: a [`Hub`] of frames.
//!
//! Each model attached to a [`Wire`] gets one hub port per MAC of its GID table and sends
//! and receives real RoCE v2 frames through them (see [`crate::transport`]); the hub
//! delivers by destination MAC, so a frame to a wrong MAC reaches nobody and is counted in
//! [`Wire::stats`]. The wire also keeps the GID table of every model, to refuse a GID
//! attached twice, and wakes the other models' engines when a frame is sent so that they do
//! not wait for their next idle scan.
//!
//! The hub carries frames of up to [`WIRE_MAX_FRAME`] bytes (a 4096-byte path MTU and its
//! headers) and queues [`WIRE_QUEUE`] frames per port; a full queue drops, as a switch
//! would, and the requester's retransmission recovers.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};

use rdma_pmd::{Error, Mac};

use crate::model::Shared;
use crate::roce::port::HubStats;
use crate::roce::{Hub, HubPort, Port, PortError};

/// The longest frame the wire's hub carries: a 4096-byte payload with every header.
pub const WIRE_MAX_FRAME: usize = 4096 + 256;
/// Frames queued per port of the wire's hub.
pub const WIRE_QUEUE: usize = 16384;

#[derive(Clone)]
struct PortEntry {
    model: u64,
    shared: Weak<Shared>,
}

struct Inner {
    gids: BTreeMap<[u8; 16], PortEntry>,
}

/// An in-process network shared by models. Cheap to clone (a handle).
#[derive(Clone)]
pub struct Wire {
    inner: Arc<Mutex<Inner>>,
    hub: Hub,
}

impl Default for Wire {
    fn default() -> Wire {
        Wire {
            inner: Arc::new(Mutex::new(Inner { gids: BTreeMap::new() })),
            hub: Hub::with_limits(WIRE_MAX_FRAME, WIRE_QUEUE),
        }
    }
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.inner.lock().map(|p| p.gids.len()).unwrap_or(0);
        write!(f, "Wire({n} GIDs, {:?})", self.hub.stats())
    }
}

/// A model's ports on the wire's hub: it sends through the first and receives from all.
pub(crate) struct WirePorts {
    ports: Vec<HubPort>,
    next: usize,
}

impl Port for WirePorts {
    fn send(&mut self, frame: &[u8]) -> Result<(), PortError> {
        match self.ports.first_mut() {
            Some(p) => p.send(frame),
            None => Err(PortError::NoInterface),
        }
    }

    fn recv(&mut self) -> Result<Option<Vec<u8>>, PortError> {
        let n = self.ports.len();
        for i in 0..n {
            let k = (self.next + i) % n;
            if let Some(f) = self.ports[k].recv()? {
                self.next = (k + 1) % n;
                return Ok(Some(f));
            }
        }
        Ok(None)
    }
}

impl Wire {
    /// An empty wire.
    pub fn new() -> Wire {
        Wire::default()
    }

    /// What the hub did with the frames so far.
    pub fn stats(&self) -> HubStats {
        self.hub.stats()
    }

    /// Register the model's GIDs and give it its ports.
    pub(crate) fn attach(&self, sh: &Arc<Shared>) -> Result<WirePorts, Error> {
        let mut p = self.inner.lock().expect("wire poisoned");
        if sh.gids.iter().any(|g| p.gids.contains_key(&g.gid)) {
            return Err(Error::InvalidArgument("GID already on the wire"));
        }
        for g in &sh.gids {
            p.gids.insert(g.gid, PortEntry { model: sh.id, shared: Arc::downgrade(sh) });
        }
        let mut macs: Vec<[u8; 6]> = sh.gids.iter().map(|g| g.mac).collect();
        macs.sort_unstable();
        macs.dedup();
        let ports = macs.into_iter().map(|m| self.hub.port(Mac(m))).collect();
        Ok(WirePorts { ports, next: 0 })
    }

    pub(crate) fn detach(&self, model: u64) {
        self.inner.lock().expect("wire poisoned").gids.retain(|_, e| e.model != model);
    }

    /// Wake every other model's engine (a frame may be waiting for it).
    pub(crate) fn kick_others(&self, model: u64) {
        let p = self.inner.lock().expect("wire poisoned");
        let mut last = None;
        for e in p.gids.values().filter(|e| e.model != model) {
            if last == Some(e.model) {
                continue;
            }
            last = Some(e.model);
            if let Some(s) = e.shared.upgrade() {
                s.kick();
            }
        }
    }
}
