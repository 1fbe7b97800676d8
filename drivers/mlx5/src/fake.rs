//! Test doubles for the unit tests of the data path: a [`Control`] that hands out numbers and
//! records every call, and a BAR handler that records every store.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::vec::Vec;

use rdma_pmd::{Error, QpNum};
use rdma_pmd_hal::mem::{BarHandler, BarMem, MemBar};

use crate::control::{
    Control, CqParams, Cqn, DeviceCaps, Mkey, MkeyParams, Pdn, QpParams, Transition, Uar,
};

/// Everything a [`FakeControl`] was asked.
#[derive(Debug, Default)]
pub struct Log {
    next: u32,
    pub uars: Vec<Uar>,
    pub live_uars: i32,
    pub live_pds: i32,
    pub mkeys: Vec<(Mkey, MkeyParams)>,
    pub destroyed_mkeys: Vec<Mkey>,
    pub cqs: Vec<(Cqn, CqParams)>,
    pub destroyed_cqs: Vec<Cqn>,
    pub qps: Vec<(QpNum, QpParams)>,
    pub destroyed_qps: Vec<QpNum>,
    pub transitions: Vec<(QpNum, Transition)>,
}

/// A [`Control`] without a device behind it.
pub struct FakeControl {
    pub log: Rc<RefCell<Log>>,
    pub caps: DeviceCaps,
}

impl FakeControl {
    pub fn new(log_bf_reg_size: u8) -> (Self, Rc<RefCell<Log>>) {
        let log = Rc::new(RefCell::new(Log { next: 0x10, ..Log::default() }));
        let caps = DeviceCaps {
            log_max_qp_sz: 15,
            log_max_cq_sz: 22,
            max_wqe_sz_sq: 1024,
            log_bf_reg_size,
        };
        (FakeControl { log: log.clone(), caps }, log)
    }
}

impl Control for FakeControl {
    fn caps(&self) -> DeviceCaps {
        self.caps
    }
    fn alloc_uar(&mut self) -> Result<Uar, Error> {
        let mut l = self.log.borrow_mut();
        let index = l.uars.len() as u32 + 1;
        let u = Uar { index, bar_offset: index as usize * 4096 };
        l.uars.push(u);
        l.live_uars += 1;
        Ok(u)
    }
    fn dealloc_uar(&mut self, _: Uar) -> Result<(), Error> {
        self.log.borrow_mut().live_uars -= 1;
        Ok(())
    }
    fn alloc_pd(&mut self) -> Result<Pdn, Error> {
        self.log.borrow_mut().live_pds += 1;
        Ok(Pdn(3))
    }
    fn dealloc_pd(&mut self, _: Pdn) -> Result<(), Error> {
        self.log.borrow_mut().live_pds -= 1;
        Ok(())
    }
    fn create_mkey(&mut self, p: &MkeyParams) -> Result<Mkey, Error> {
        let mut l = self.log.borrow_mut();
        l.next += 1;
        let k = Mkey(l.next << 8 | 0x42);
        l.mkeys.push((k, *p));
        Ok(k)
    }
    fn destroy_mkey(&mut self, key: Mkey) -> Result<(), Error> {
        self.log.borrow_mut().destroyed_mkeys.push(key);
        Ok(())
    }
    fn create_cq(&mut self, p: &CqParams) -> Result<Cqn, Error> {
        let mut l = self.log.borrow_mut();
        l.next += 1;
        let n = Cqn(l.next);
        l.cqs.push((n, *p));
        Ok(n)
    }
    fn destroy_cq(&mut self, cq: Cqn) -> Result<(), Error> {
        self.log.borrow_mut().destroyed_cqs.push(cq);
        Ok(())
    }
    fn create_qp(&mut self, p: &QpParams) -> Result<QpNum, Error> {
        let mut l = self.log.borrow_mut();
        l.next += 1;
        let n = QpNum(0x100 + l.next);
        l.qps.push((n, *p));
        Ok(n)
    }
    fn modify_qp(&mut self, qp: QpNum, t: &Transition) -> Result<(), Error> {
        self.log.borrow_mut().transitions.push((qp, *t));
        Ok(())
    }
    fn destroy_qp(&mut self, qp: QpNum) -> Result<(), Error> {
        self.log.borrow_mut().destroyed_qps.push(qp);
        Ok(())
    }
}

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
