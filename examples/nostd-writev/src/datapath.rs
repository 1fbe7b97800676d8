//! The mlx5 data path, freestanding, through the bare-metal HAL.
//!
//! The device context, regions, a QP and its CQ are created over [`IdentityBar`] (a static
//! array standing in for BAR0) and [`StaticDma`] (a static page pool, identity mapped: bus
//! address = CPU address), with the driver's null control seam ([`NullControl`]) that hands
//! out numbers and remembers what it was given, so the check can look where the HCA would. A
//! writev and a batch are posted through the core `Post` API; the check then reads the
//! doorbell record, the UAR doorbell and the WQE in the ring, plays the HCA by writing a
//! requester CQE through the driver's CQE writer ([`CqWriter`]), and polls the completion back.
//! No allocator, no std.

use core::ptr::{addr_of_mut, NonNull};

use rdma_pmd::{BusAddr, Completion, Post, QpNum, SendFlags, SendQueue, WcStatus};
use rdma_pmd_hal::baremetal::{IdentityBar, StaticDma};
use rdma_pmd_mlx5::control::Access;
use rdma_pmd_mlx5::testing::{CqWriter, NullControl};
use rdma_pmd_mlx5::Mlx5;

const PAGES: usize = 64;
const BAR_LEN: usize = 4 * 4096;

#[repr(C, align(4096))]
struct Pool([u8; PAGES * 4096]);
#[repr(C, align(4096))]
struct Bar([u8; BAR_LEN]);

/// DMA memory: reached only through the HAL (raw pointers, volatile accesses).
static mut POOL: Pool = Pool([0; PAGES * 4096]);
/// The stand-in BAR0: reached only through `IdentityBar`.
static mut BAR: Bar = Bar([0; BAR_LEN]);

fn read8(addr: u64) -> u8 {
    // SAFETY: callers pass addresses inside POOL or BAR (identity mapped), read volatile.
    unsafe { (addr as *const u8).read_volatile() }
}

fn read_be32(addr: u64) -> u32 {
    u32::from_be_bytes([read8(addr), read8(addr + 1), read8(addr + 2), read8(addr + 3)])
}

/// Run the data-path check; 0 on success, else the number of the failed check (from 40).
pub fn check() -> i32 {
    let Some(pool) = NonNull::new(addr_of_mut!(POOL).cast::<u8>()) else { return 40 };
    // SAFETY: POOL is 4 KiB aligned, PAGES pages long, used by nothing but this allocator, and
    // in this process its addresses stand for bus addresses (identity mapping).
    let dma = unsafe { StaticDma::<PAGES>::new(pool) };
    let bar_addr = addr_of_mut!(BAR) as u64;
    // SAFETY: BAR is BAR_LEN bytes reached only through this handle.
    let Ok(bar) = (unsafe { IdentityBar::new(BusAddr(bar_addr), BAR_LEN) }) else { return 57 };
    let Ok(dev) = Mlx5::open(bar, dma, NullControl::default()) else { return 41 };
    let Ok(src) = dev.reg_physical(4096, Access::LOCAL_WRITE) else { return 42 };
    let Ok(dst) = dev.reg_physical(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE) else {
        return 43;
    };
    let Ok(mut qp) = dev.create_qp::<64, 4>(&Default::default()) else { return 44 };
    if qp.connect_loopback(QpNum(0x322)).is_err() {
        return 45;
    }
    let (Ok(a), Ok(b)) = (src.slice(0, 100), src.slice(1024, 28)) else { return 46 };
    if qp.post_writev(7, &[a, b], SendFlags::empty(), dst.remote(0)).is_err() {
        return 47;
    }
    let mut batch = qp.batch();
    for i in 0..3u64 {
        let Ok(s) = src.slice(i as usize * 64, 64) else { return 48 };
        let flags = if i == 2 { SendFlags::SIGNALED } else { SendFlags::empty() };
        if batch.post_writev(8 + i, &[s], flags, dst.remote(i as usize * 64)).is_err() {
            return 49;
        }
    }
    batch.commit();
    let qpn = qp.qp_num();
    let recorded = {
        let ctl = dev.control();
        let qpp = ctl.qp(qpn);
        (qpp, qpp.and_then(|p| ctl.cq(p.send_cq)))
    };
    let (Some(qpp), Some(cqp)) = recorded else { return 50 };

    // Where the HCA looks: the doorbell record (index 1), the UAR doorbell, the ring.
    let pi = qp.sq_pi();
    if pi != 4 || read_be32(qpp.dbrec.0 + 4) != pi as u32 {
        return 51;
    }
    let sq = qpp.buf.0 + ((1u64 << qpp.log_rq_size.unwrap_or(0)) << qpp.log_rq_stride);
    let last = sq + 3 * 64;
    let uar = bar_addr + qpp.uar.bar_offset as u64 + 0x800;
    let mut ok = true;
    for k in 0..8 {
        // BlueFlame halves alternate: the batch's doorbell went to the second half.
        ok &= read8(uar + 256 + k) == read8(last + k);
    }
    if !ok || read8(last + 3) != 0x08 || read_be32(last + 4) >> 8 != qpn.0 {
        return 52;
    }
    // The first WQE: two data segments (ds 4), the second one's lkey and length.
    if read8(sq + 7) != 4 || read_be32(sq + 48) != 28 || read_be32(sq + 52) != src.lkey().0 {
        return 53;
    }

    // Play the HCA: one requester CQE for the last WQE (counter 3) retires all four.
    CqWriter::new(cqp).requester(qpn, 3, None, |at: BusAddr, bytes: &[u8]| {
        for (k, byte) in bytes.iter().enumerate() {
            // SAFETY: the CQ buffer lies in POOL (identity mapped: bus address = CPU address);
            // the driver only reads it, and these are byte-wide volatile stores.
            unsafe { ((at.0 + k as u64) as *mut u8).write_volatile(*byte) };
        }
    });
    let mut wc = [Completion::default(); 4];
    let Ok(n) = qp.poll(&mut wc) else { return 54 };
    if n != 1 || wc[0].wr_id != 10 || wc[0].status != WcStatus::Success || qp.outstanding() != 0 {
        return 55;
    }
    if src.usage().in_flight() != 0 || read_be32(cqp.dbrec.0) != 1 {
        return 56;
    }
    0
}
