//! The device context: what every region, completion queue and queue pair is created from.
//!
//! [`Mlx5`] owns the three platform handles the driver reaches hardware through (the BAR as
//! [`Mmio`], device-visible memory as [`Dma`], firmware as [`Control`]), and the resources that
//! live as long as the device is open: the protection domain every key and QP belongs to, and
//! the UAR page completion queues are created on. Regions ([`crate::mr::Region`]) and queue
//! pairs ([`crate::qp::Qp`]) borrow it, so it is closed (PD and UAR given back) only after they
//! are gone.
//!
//! [`Control`] takes `&mut self`; it is used only on the setup and teardown paths, behind a spin
//! lock, never while posting or polling. So `Mlx5` is `Sync` when its handles are (`M: Sync`,
//! `D: Sync`, `C: Send`), and a queue pair, which borrows it, can be created at start-up and
//! moved to the worker thread that polls it (see [`crate::qp`]).
//!
//! # The data path, module by module
//!
//! | module | what | rdma-core counterpart |
//! |---|---|---|
//! | `device` | [`Mlx5`]: platform handles, PD, CQ UAR; [`SharedDma`] | `mlx5_alloc_context` |
//! | `mr` | `Region`: DMA block, memory key, in-flight count | `ibv_reg_mr` |
//! | `cq` | `CqRing`: CQE ring, ownership test, consumer index | `cq.c` `get_sw_cqe` |
//! | `sq` | `SendRing`: per-WQE bookkeeping, retirement | `qp.c` `wrid`, `cq.c` |
//! | `uar` | `SqDoorbell`: the doorbell store sequence | `qp.c` `post_send_db` |
//! | `rq` | `RecvRing`: receives for WRITE WITH IMMEDIATE | `qp.c` `mlx5_post_recv` |
//! | `qp` | `Qp`: state machine, `SendQueue`, teardown | `verbs.c` `mlx5_modify_qp` |
//!
//! Use: [`Mlx5::open`] → [`Mlx5::reg`] (regions first: they must outlive the QPs) →
//! [`Mlx5::create_qp`] → [`Qp::connect`](crate::qp::Qp::connect) → the
//! [`rdma_pmd::Post`] calls and [`rdma_pmd::SendQueue::poll`]; see [`crate::qp`] for a
//! runnable example. Nothing on the data path allocates, locks or enters the kernel; the
//! bookkeeping is fixed-size, inside the `Qp` (about `56 * SQ + 8 * RQ` bytes: box it, or keep
//! it in a `static`, for large rings).

use core::net::IpAddr;

use spin::{Mutex, MutexGuard};

use rdma_pmd::{Error, Gid, Mac, Result};
use rdma_pmd_hal::{Dma, Mmio};

use crate::control::{Control, DeviceCaps, Pdn, PortMtu, Uar};
use crate::layout::uar;

/// An open mlx5 device. See the module docs.
pub struct Mlx5<M: Mmio, D: Dma, C: Control> {
    mmio: M,
    dma: D,
    ctl: Mutex<C>,
    caps: DeviceCaps,
    uar: Uar,
    pd: Pdn,
}

impl<M: Mmio, D: Dma, C: Control> Mlx5<M, D, C> {
    /// Open the device: read its limits, allocate the UAR page for completion queues and the
    /// protection domain.
    pub fn open(mmio: M, dma: D, mut ctl: C) -> Result<Self> {
        let caps = ctl.caps();
        let uar = ctl.alloc_uar()?;
        if let Err(e) = check_uar(&mmio, uar, &caps) {
            let _ = ctl.dealloc_uar(uar);
            return Err(e);
        }
        let pd = match ctl.alloc_pd() {
            Ok(pd) => pd,
            Err(e) => {
                let _ = ctl.dealloc_uar(uar);
                return Err(e);
            }
        };
        Ok(Mlx5 { mmio, dma, ctl: Mutex::new(ctl), caps, uar, pd })
    }

    /// The device's limits (`QUERY_HCA_CAP`).
    pub fn caps(&self) -> DeviceCaps {
        self.caps
    }

    /// The protection domain of every region and QP created here.
    pub fn pd(&self) -> Pdn {
        self.pd
    }

    /// The UAR page completion queues are created on.
    pub fn cq_uar(&self) -> Uar {
        self.uar
    }

    /// The BAR.
    pub fn mmio(&self) -> &M {
        &self.mmio
    }

    /// The DMA allocator.
    pub fn dma(&self) -> &D {
        &self.dma
    }

    /// The firmware seam, for setup and teardown only: held by one thread at a time (others
    /// spin until it is free), and never by the data path.
    ///
    /// Holding the guard while calling back into the device (creating a QP, registering a
    /// region) would wait for itself: a `Control` implementation must not reach the device.
    pub fn control(&self) -> MutexGuard<'_, C> {
        self.ctl.lock()
    }

    /// The port's MAC, as firmware reports it (the NIC vport context's permanent address).
    pub fn mac(&self) -> Result<Mac> {
        self.ctl.lock().mac()
    }

    /// Give the port the IP address `addr` as RoCE v2 GID table entry `index` (IPv4 becomes
    /// the IPv4-mapped GID), with the port's MAC. The kernel does this for every address of
    /// its netdev; a driver that owns its function does it for the addresses its user gives.
    pub fn set_gid(&self, index: u16, addr: IpAddr) -> Result<()> {
        self.ctl.lock().set_gid(index, addr)
    }

    /// Clear GID table entry `index`.
    pub fn clear_gid(&self, index: u16) -> Result<()> {
        self.ctl.lock().clear_gid(index)
    }

    /// GID table entry `index`: its GID and MAC, `None` when empty.
    pub fn gid(&self, index: u16) -> Result<Option<(Gid, Mac)>> {
        self.ctl.lock().gid(index)
    }

    /// The RoCE path MTU the port allows, and where that figure came from.
    pub fn port_mtu(&self) -> Result<PortMtu> {
        self.ctl.lock().port_mtu()
    }

    /// Half of the BlueFlame register (`mlx5dv_qp.bf.size`): `(1 << log_bf_reg_size) / 2`,
    /// 0 when the device has none.
    pub fn bf_half(&self) -> usize {
        bf_half(&self.caps)
    }
}

/// `(1 << log_bf_reg_size) / 2`; 0 when the register size is 0 or 1 byte (no BlueFlame).
pub(crate) fn bf_half(caps: &DeviceCaps) -> usize {
    uar::bf_half(caps.log_bf_reg_size)
}

/// The UAR's doorbell/BlueFlame register (both halves) lies inside the BAR.
pub(crate) fn check_uar<M: Mmio + ?Sized>(mmio: &M, uar: Uar, caps: &DeviceCaps) -> Result<()> {
    if uar_in_bar(mmio.size(), uar, caps) {
        Ok(())
    } else {
        Err(Error::InvalidArgument("UAR page outside the BAR"))
    }
}

/// [`uar::uar_in_bar`] of UAR page `uar` on a device of `caps`.
pub(crate) fn uar_in_bar(bar_size: usize, uar: Uar, caps: &DeviceCaps) -> bool {
    uar::uar_in_bar(bar_size, uar.bar_offset, caps.log_bf_reg_size)
}

impl<M: Mmio, D: Dma, C: Control> Drop for Mlx5<M, D, C> {
    fn drop(&mut self) {
        let ctl = self.ctl.get_mut();
        // Every region and QP borrowed the device and is gone; nothing uses the PD or UAR.
        let _ = ctl.dealloc_pd(self.pd);
        let _ = ctl.dealloc_uar(self.uar);
    }
}

/// A shared handle to a DMA allocator (`&D`, `Arc<D>`, ...) used as the allocator itself, so a
/// device model and the driver can draw from the same space.
#[derive(Clone, Debug)]
pub struct SharedDma<P>(pub P);

// SAFETY: every call is forwarded unchanged to the allocator behind the handle, which upholds
// the contract itself.
unsafe impl<P> Dma for SharedDma<P>
where
    P: core::ops::Deref,
    P::Target: Dma,
{
    fn alloc(
        &self,
        len: usize,
        align: usize,
    ) -> Result<rdma_pmd_hal::DmaBuf, rdma_pmd_hal::HalError> {
        self.0.alloc(len, align)
    }

    unsafe fn free(&self, buf: rdma_pmd_hal::DmaBuf) {
        // SAFETY: forwarded to our caller.
        unsafe { self.0.free(buf) }
    }

    fn page_size(&self) -> usize {
        self.0.page_size()
    }
}
