//! An in-process Ethernet segment joining models for RoCE v2.
//!
//! Each model attached to a [`Wire`] registers its GID table (GID → MAC). A requester whose
//! path is `RoceV2 { dgid, dmac, .. }` reaches the model owning `dgid`, provided `dmac` is that
//! GID's MAC (a wrong MAC means the frame is not for that port: dropped); a datagram goes the
//! same way to its address vector's GID and MAC. Delivery is
//! synchronous: the requester's engine runs the responder's checks and writes into the
//! responder's memory, then completes the WQE; there is no loss and no reordering.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};

use rdma_pmd::Error;

use crate::model::Shared;

#[derive(Clone)]
struct PortEntry {
    model: u64,
    mac: [u8; 6],
    shared: Weak<Shared>,
}

/// An in-process network shared by models. Cheap to clone (a handle).
#[derive(Clone, Default)]
pub struct Wire {
    ports: Arc<Mutex<BTreeMap<[u8; 16], PortEntry>>>,
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.ports.lock().map(|p| p.len()).unwrap_or(0);
        write!(f, "Wire({n} GIDs)")
    }
}

impl Wire {
    /// An empty wire.
    pub fn new() -> Wire {
        Wire::default()
    }

    pub(crate) fn attach(&self, sh: &Arc<Shared>) -> Result<(), Error> {
        let mut p = self.ports.lock().expect("wire poisoned");
        if sh.gids.iter().any(|g| p.contains_key(&g.gid)) {
            return Err(Error::InvalidArgument("GID already on the wire"));
        }
        for g in &sh.gids {
            p.insert(g.gid, PortEntry { model: sh.id, mac: g.mac, shared: Arc::downgrade(sh) });
        }
        Ok(())
    }

    pub(crate) fn detach(&self, model: u64) {
        self.ports.lock().expect("wire poisoned").retain(|_, e| e.model != model);
    }

    /// The model owning `dgid`, if the frame addressed to `dmac` reaches it.
    pub(crate) fn route(&self, dgid: &[u8; 16], dmac: &[u8; 6]) -> Option<Arc<Shared>> {
        let p = self.ports.lock().expect("wire poisoned");
        let e = p.get(dgid)?;
        if &e.mac != dmac {
            return None;
        }
        e.shared.upgrade()
    }
}
