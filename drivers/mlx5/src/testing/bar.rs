//! The BAR fake of the data path's unit tests: a handler that records every store (test-only,
//! std).

use std::sync::{Arc, Mutex};
use std::vec::Vec;

use rdma_pmd_hal::mem::{BarHandler, BarMem, MemBar};

/// One store the driver made to the BAR: offset and the bytes that landed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Store {
    pub off: usize,
    pub bytes: Vec<u8>,
}

/// Records every store to a [`MemBar`].
#[derive(Default)]
pub struct Recorder {
    pub stores: Mutex<Vec<Store>>,
}

impl BarHandler for Recorder {
    fn on_write(&self, mem: &BarMem, off: usize, len: usize) {
        let mut bytes = std::vec![0u8; len];
        mem.read_bytes(off, &mut bytes);
        self.stores.lock().unwrap().push(Store { off, bytes });
    }
}

impl Recorder {
    /// Take the stores recorded so far.
    pub fn take(&self) -> Vec<Store> {
        core::mem::take(&mut *self.stores.lock().unwrap())
    }
}

/// A 64 KiB BAR whose stores `Recorder` sees.
pub fn bar() -> (MemBar, Arc<Recorder>) {
    let r = Arc::new(Recorder::default());
    (MemBar::with_handler(64 * 1024, r.clone()), r)
}
