//! Ringing a send queue's doorbell: the store sequence of rdma-core's `post_send_db`
//! (`providers/mlx5/qp.c`), once for every way of posting.
//!
//! 1. the WQEs are already in the ring (volatile stores through [`crate::datapath::wqe::RawRing`]);
//! 2. [`barrier::to_device`]: those stores reach memory before the doorbell record says so;
//! 3. `dbrec[SND_DBR] = htobe32(pi & 0xffff)` ([`crate::layout::doorbell::sq_dbrec`]);
//! 4. either a BlueFlame copy of the last WQE (one WQE posted and `1 < ds <= bf_size / 16`:
//!    [`crate::layout::doorbell::bf_len`] bytes in 64-byte write-combining chunks, the source wrapping
//!    at the ring's end), or one 64-bit store of the last WQE's first 8 bytes;
//! 5. [`barrier::wc_flush`]: the write-combining buffer leaves the CPU now;
//! 6. the next doorbell uses the other half of the BlueFlame register (`offset ^= bf_size`).
//!
//! The register is at byte [`BF_OFFSET`] of the QP's UAR page (`MLX5_BF_OFFSET` in rdma-core's
//! `providers/mlx5/mlx5.h`; the PRM's UAR page layout puts BlueFlame register 0 there).

use rdma_pmd_hal::{access, barrier, DmaBuf, Mmio};

use crate::control::Uar;
use crate::layout::codes::SEND_WQE_BB;
use crate::layout::doorbell::{bf_len, sq_dbrec, SND_DBR};

/// Byte offset of the first BlueFlame (doorbell) register in a UAR page (`MLX5_BF_OFFSET`).
pub const BF_OFFSET: usize = 0x800;

/// One send queue's doorbell: the BlueFlame register it rings and which half is next.
#[derive(Debug)]
pub struct SqDoorbell {
    /// BAR offset of the register's first half.
    reg: usize,
    /// Size of one half (`mlx5dv_qp.bf.size`); 0 disables BlueFlame.
    half: usize,
    /// The half the next doorbell goes to (0 or `half`).
    offset: usize,
}

/// Where the send ring lives, for the BlueFlame copy (which reads the WQE back).
#[derive(Clone, Copy, Debug)]
pub struct RingAt<'a> {
    /// The block holding the ring.
    pub buf: &'a DmaBuf,
    /// Byte offset of slot 0 in `buf`.
    pub off: usize,
    /// Number of 64-byte slots (a power of two).
    pub wqe_cnt: u32,
}

impl SqDoorbell {
    /// The doorbell of a QP on `uar` whose BlueFlame halves are `half` bytes (0: none).
    pub fn new(uar: Uar, half: usize) -> Self {
        SqDoorbell { reg: uar.bar_offset + BF_OFFSET, half, offset: 0 }
    }

    /// BAR offset the next doorbell goes to.
    pub fn next_offset(&self) -> usize {
        self.reg + self.offset
    }

    /// Publish every WQE up to counter `pi` (exclusive): `nreq` requests were pushed since the
    /// last doorbell, the last of them at counter `last.0` with size `last.1` (`ds`). `dbrec` is
    /// the QP's doorbell record.
    #[inline]
    pub fn ring<M: Mmio>(
        &mut self,
        mmio: &M,
        dbrec: &DmaBuf,
        ring: RingAt<'_>,
        last: (u16, u8),
        nreq: u32,
        pi: u16,
    ) {
        // The WQE stores (relaxed atomics, to DMA memory) must be visible to the device before
        // the doorbell record that announces them (udma_to_device_barrier; for the model, the
        // Release fence that its Acquire after loading the record pairs with).
        barrier::to_device();
        dbrec.write_u32(SND_DBR * 4, u32::from_ne_bytes(sq_dbrec(pi)));
        let at = self.reg + self.offset;
        let (last_pi, ds) = last;
        let mask = ring.wqe_cnt - 1;
        let len = bf_len(nreq, ds, self.half as u32);
        if len == 0 {
            // The first 8 bytes of the last WQE's control segment, as they are in the ring.
            let head = ring.off + (last_pi as u32 & mask) as usize * SEND_WQE_BB;
            mmio.write_u64(at, ring.buf.read_u64(head));
        } else {
            assert!(
                (ring.buf.cpu().as_ptr() as usize + ring.off).is_multiple_of(8)
                    && ring.off + ring.wqe_cnt as usize * SEND_WQE_BB <= ring.buf.len(),
                "send ring outside its block"
            );
            let base = ring.buf.cpu().as_ptr().wrapping_add(ring.off).cast::<u64>();
            for i in 0..len / SEND_WQE_BB {
                let slot = ((last_pi as u32).wrapping_add(i as u32) & mask) as usize;
                let src = base.wrapping_add(slot * (SEND_WQE_BB / 8));
                // SAFETY: `slot < wqe_cnt`, so the 64 bytes at `src` lie inside the ring, which
                // lies inside the block (asserted above) and is 8-byte aligned; the block is
                // valid for reads while `ring.buf` is borrowed. Atomic (`access`): the device
                // may read (never write) these bytes concurrently, and every access to the ring
                // is atomic.
                let block: [u64; 8] =
                    core::array::from_fn(|k| unsafe { access::load_u64(src.add(k)) });
                mmio.write_wc64(at + i * SEND_WQE_BB, &block);
            }
        }
        // The doorbell (or BlueFlame burst) leaves the write-combining buffer before anything
        // that follows, in particular before the next doorbell to the other half
        // (mmio_flush_writes).
        barrier::wc_flush();
        self.offset ^= self.half;
    }
}
