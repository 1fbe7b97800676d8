//! [`NullControl`]: a control seam that hands out numbers and records every call.

use heapless::Vec;
use rdma_pmd::{Errno, Error, QpNum};

use crate::control::{
    Control, CqParams, Cqn, DeviceCaps, Mkey, MkeyParams, Pdn, QpParams, Transition, Uar,
};

/// Capacity of each of [`NullControl`]'s tables; a call that would record more is refused
/// with `ENOMEM`, as firmware out of resources would refuse it.
pub const TABLE: usize = 32;

/// One of [`NullControl`]'s records: at most [`TABLE`] entries, oldest first.
pub type Table<T> = Vec<T, TABLE>;

/// The limits [`NullControl::default`] reports: send queues up to 2^15 basic blocks, CQs up to
/// 2^22 entries, send WQEs up to 1 KiB, BlueFlame registers of 512 bytes.
pub const CAPS: DeviceCaps =
    DeviceCaps { log_max_qp_sz: 15, log_max_cq_sz: 22, max_wqe_sz_sq: 1024, log_bf_reg_size: 9 };

/// A [`Control`] without a device behind it.
///
/// Numbers: UAR `k` (1-based, in allocation order) at BAR offset `k * 4096`; PD 3; MKEY, CQ and
/// QP numbers from one counter (MKEY `n << 8 | 0x42`, CQ `n`, QP `0x100 + n`). Every object
/// created, every transition and every object destroyed is recorded, with its parameters; the
/// live UAR and PD counts say whether everything allocated was given back.
///
/// To read the records after the device is gone, open the device over `&mut NullControl`.
#[derive(Debug)]
pub struct NullControl {
    caps: DeviceCaps,
    next: u32,
    /// UARs allocated, in order.
    pub uars: Table<Uar>,
    /// UARs allocated and not yet given back.
    pub live_uars: i32,
    /// PDs allocated and not yet given back.
    pub live_pds: i32,
    /// Memory keys created, with their parameters.
    pub mkeys: Table<(Mkey, MkeyParams)>,
    /// Memory keys destroyed, in order.
    pub destroyed_mkeys: Table<Mkey>,
    /// CQs created, with their parameters.
    pub cqs: Table<(Cqn, CqParams)>,
    /// CQs destroyed, in order.
    pub destroyed_cqs: Table<Cqn>,
    /// QPs created, with their parameters.
    pub qps: Table<(QpNum, QpParams)>,
    /// QPs destroyed, in order.
    pub destroyed_qps: Table<QpNum>,
    /// QP state transitions, in order.
    pub transitions: Vec<(QpNum, Transition), { 2 * TABLE }>,
}

impl Default for NullControl {
    fn default() -> Self {
        NullControl::new(CAPS)
    }
}

impl NullControl {
    /// A control reporting `caps`.
    pub const fn new(caps: DeviceCaps) -> Self {
        NullControl {
            caps,
            next: 0x10,
            uars: Vec::new(),
            live_uars: 0,
            live_pds: 0,
            mkeys: Vec::new(),
            destroyed_mkeys: Vec::new(),
            cqs: Vec::new(),
            destroyed_cqs: Vec::new(),
            qps: Vec::new(),
            destroyed_qps: Vec::new(),
            transitions: Vec::new(),
        }
    }

    /// [`CAPS`] with another BlueFlame register size (0: no BlueFlame).
    pub const fn with_bf(log_bf_reg_size: u8) -> Self {
        NullControl::new(DeviceCaps { log_bf_reg_size, ..CAPS })
    }

    /// The parameters QP `qpn` was created with.
    pub fn qp(&self, qpn: QpNum) -> Option<QpParams> {
        self.qps.iter().find(|(n, _)| *n == qpn).map(|(_, p)| *p)
    }

    /// The parameters CQ `cqn` was created with.
    pub fn cq(&self, cqn: Cqn) -> Option<CqParams> {
        self.cqs.iter().find(|(n, _)| *n == cqn).map(|(_, p)| *p)
    }

    /// The transitions QP `qpn` went through, in order.
    pub fn transitions_of(&self, qpn: QpNum) -> impl Iterator<Item = Transition> + '_ {
        self.transitions.iter().filter(move |(n, _)| *n == qpn).map(|(_, t)| *t)
    }

    fn number(&mut self) -> u32 {
        self.next += 1;
        self.next
    }
}

/// Record `v` in `table`, or refuse as firmware out of resources would.
fn record<T, const N: usize>(table: &mut Vec<T, N>, v: T) -> Result<(), Error> {
    table.push(v).map_err(|_| Error::Device(Errno::ENOMEM))
}

impl Control for NullControl {
    fn caps(&self) -> DeviceCaps {
        self.caps
    }
    fn alloc_uar(&mut self) -> Result<Uar, Error> {
        let index = self.uars.len() as u32 + 1;
        let u = Uar { index, bar_offset: index as usize * 4096 };
        record(&mut self.uars, u)?;
        self.live_uars += 1;
        Ok(u)
    }
    fn dealloc_uar(&mut self, _: Uar) -> Result<(), Error> {
        self.live_uars -= 1;
        Ok(())
    }
    fn alloc_pd(&mut self) -> Result<Pdn, Error> {
        self.live_pds += 1;
        Ok(Pdn(3))
    }
    fn dealloc_pd(&mut self, _: Pdn) -> Result<(), Error> {
        self.live_pds -= 1;
        Ok(())
    }
    fn create_mkey(&mut self, p: &MkeyParams) -> Result<Mkey, Error> {
        let k = Mkey(self.number() << 8 | 0x42);
        record(&mut self.mkeys, (k, *p))?;
        Ok(k)
    }
    fn destroy_mkey(&mut self, key: Mkey) -> Result<(), Error> {
        record(&mut self.destroyed_mkeys, key)
    }
    fn create_cq(&mut self, p: &CqParams) -> Result<Cqn, Error> {
        let n = Cqn(self.number());
        record(&mut self.cqs, (n, *p))?;
        Ok(n)
    }
    fn destroy_cq(&mut self, cq: Cqn) -> Result<(), Error> {
        record(&mut self.destroyed_cqs, cq)
    }
    fn create_qp(&mut self, p: &QpParams) -> Result<QpNum, Error> {
        let n = QpNum(0x100 + self.number());
        record(&mut self.qps, (n, *p))?;
        Ok(n)
    }
    fn modify_qp(&mut self, qp: QpNum, t: &Transition) -> Result<(), Error> {
        record(&mut self.transitions, (qp, *t))
    }
    fn destroy_qp(&mut self, qp: QpNum) -> Result<(), Error> {
        record(&mut self.destroyed_qps, qp)
    }
}
