//! How a send queue's batch is published to the HCA: the doorbell record, then one 8-byte
//! doorbell or a BlueFlame copy of the last WQE, to alternating halves of the QP's BlueFlame
//! register. The send ring ([`super::send`]) decides what to announce; this is the store
//! sequence itself, and where the copied WQE is read from.

use rdma_pmd_hal::{barrier, DmaBuf, Mmio};

use crate::control::Uar;
use crate::datapath::wqe::FixedRing;
use crate::layout::codes::SEND_WQE_BB;
use crate::layout::wqe::{sq_dbrec, SND_DBR};

// ---------------------------------------------------------------------------------------------
// The doorbell: the store sequence of rdma-core's `post_send_db` (`providers/mlx5/qp.c`), once
// for every way of posting.
//
// 1. the WQEs are already in the ring (stores through `RawRing`);
// 2. `barrier::to_device`: those stores reach memory before the doorbell record says so;
// 3. `dbrec[SND_DBR] = htobe32(pi & 0xffff)` (`layout::wqe::sq_dbrec`);
// 4. `barrier::wc_start` (`mmio_wc_start`): the record before any write-combining store;
// 5. either a BlueFlame copy of the last WQE (one WQE posted, the policy allows it, and
//    `1 < ds <= bf_size / 16`: `layout::wqe::bf_len` bytes in 64-byte write-combining chunks,
//    the source wrapping at the ring's end), or one 64-bit store of the last WQE's first 8 bytes;
// 6. `barrier::wc_flush` (`mmio_flush_writes`): the write-combining buffer leaves the CPU now;
// 7. the next doorbell uses the other half of the BlueFlame register (`offset ^= bf_size`).
//
// The register is at byte `BF_OFFSET` of the QP's UAR page (`MLX5_BF_OFFSET` in rdma-core's
// `providers/mlx5/mlx5.h`; the PRM's UAR page layout puts BlueFlame register 0 there).
// ---------------------------------------------------------------------------------------------

/// When a single post's doorbell is a BlueFlame copy of its WQE: the provider's
/// `(inl || ctx->prefer_bf)` and `shut_up_bf` conditions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BlueFlame {
    /// Every single post whose WQE fits (rdma-core's default: `MLX5_POST_SEND_PREFER_BF`
    /// unset).
    #[default]
    Prefer,
    /// Single inline posts only (`MLX5_POST_SEND_PREFER_BF=0`).
    InlineOnly,
    /// Never: always the 8-byte doorbell (`MLX5_SHUT_UP_BF=1`).
    Off,
}

pub use crate::layout::uar::BF_OFFSET;

/// One send queue's doorbell: the BlueFlame register it rings and which half is next.
#[derive(Debug)]
pub struct SqDoorbell {
    /// BAR offset of the register's first half.
    reg: usize,
    /// Size of one half (`mlx5dv_qp.bf.size`); 0 disables BlueFlame.
    half: usize,
    /// The half the next doorbell goes to (0 or `half`).
    offset: usize,
    /// Below which `ds - 2` a BlueFlame copy carries a WQE, for a WQE that is not inline
    /// (index 0) and one that is (index 1): the largest `ds` the policy allows, `half / 16`
    /// (`bf_len`'s `ds * 16 <= bf_size`) or 0, less one, so that `1 < ds <= max` is one
    /// compare (`ds - 2 < max - 1`, wrapping). Worked out once here rather than per doorbell.
    bf_lim: [u8; 2],
}

/// The last WQE a doorbell announces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Last {
    /// Its WQE counter.
    pub pi: u16,
    /// Its size in 16-byte units.
    pub ds: u8,
    /// Whether its payload is inline.
    pub inline: bool,
}

/// Where a doorbell reads the last WQE back from: the first 8 bytes for the 8-byte doorbell,
/// whole blocks for a BlueFlame copy (`post_send_db` copies from the ring, as this does).
pub trait RingSource {
    /// The first 8 bytes (memory order, as a native word) of the slot of WQE counter
    /// `counter` (taken modulo the ring's size).
    fn head(&self, counter: u16) -> u64;

    /// The 64 bytes of that slot, as eight native words in memory order.
    fn block(&self, counter: u16) -> [u64; 8];
}

/// The first block of the WQE at counter `pi`, as its push stored it (a
/// [`Capture`](crate::datapath::wqe::Capture)), over the `ring` it was stored in.
pub(crate) struct Captured<'a, R: ?Sized> {
    pub(crate) pi: u16,
    pub(crate) block: [u64; 8],
    pub(crate) ring: &'a R,
}

impl<R: RingSource + ?Sized> RingSource for Captured<'_, R> {
    #[inline(always)]
    fn head(&self, counter: u16) -> u64 {
        if counter == self.pi {
            self.block[0]
        } else {
            self.ring.head(counter)
        }
    }

    #[inline(always)]
    fn block(&self, counter: u16) -> [u64; 8] {
        if counter == self.pi {
            self.block
        } else {
            self.ring.block(counter)
        }
    }
}

/// The send queue's ring, whose size and place were established when it was made
/// ([`RawRing::new`](crate::datapath::wqe::RawRing::new)'s contract): nothing is checked per
/// doorbell.
impl<const N: usize> RingSource for FixedRing<N> {
    #[inline(always)]
    fn head(&self, counter: u16) -> u64 {
        FixedRing::head(self, counter)
    }

    #[inline(always)]
    fn block(&self, counter: u16) -> [u64; 8] {
        FixedRing::block(self, counter)
    }
}

/// A ring in a block of DMA memory, for queues that do not keep a [`FixedRing`].
#[derive(Clone, Copy, Debug)]
pub struct RingAt<'a> {
    /// The block holding the ring.
    pub buf: &'a DmaBuf,
    /// Byte offset of slot 0 in `buf`.
    pub off: usize,
    /// Number of 64-byte slots (a power of two).
    pub wqe_cnt: u32,
}

impl RingAt<'_> {
    /// Byte offset in `buf` of the slot of `counter`.
    #[inline(always)]
    fn slot_off(&self, counter: u16) -> usize {
        self.off + (counter as u32 & (self.wqe_cnt - 1)) as usize * SEND_WQE_BB
    }
}

impl RingSource for RingAt<'_> {
    #[inline]
    fn head(&self, counter: u16) -> u64 {
        self.buf.read_u64(self.slot_off(counter))
    }

    #[inline]
    fn block(&self, counter: u16) -> [u64; 8] {
        self.buf.read_u64s(self.slot_off(counter))
    }
}

impl SqDoorbell {
    /// The doorbell of a QP on `uar` whose BlueFlame halves are `half` bytes (0: none).
    pub fn new(uar: Uar, half: usize, policy: BlueFlame) -> Self {
        // The copy is whole 64-byte blocks, each stored aligned, so a half takes as many units
        // as its whole blocks hold (`half / 16` for the powers of two devices report, none for
        // a half under one block, which could not take the smallest copy).
        let max = (half / SEND_WQE_BB * 4).min(u8::MAX as usize) as u8;
        let (plain, inline) = match policy {
            BlueFlame::Prefer => (max, max),
            BlueFlame::InlineOnly => (0, max),
            BlueFlame::Off => (0, 0),
        };
        let bf_lim = [plain.saturating_sub(1), inline.saturating_sub(1)];
        SqDoorbell { reg: uar.bar_offset + BF_OFFSET, half, offset: 0, bf_lim }
    }

    /// Bytes of the BlueFlame copy for `nreq` requests ending with `last`, 0 for the 8-byte
    /// doorbell: [`crate::layout::wqe::bf_len`] under the policy (the provider's
    /// `(inl || prefer_bf)`), with the size limit taken from `bf_lim`.
    #[inline(always)]
    fn bf_bytes(&self, last: Last, nreq: u32) -> usize {
        let lim = self.bf_lim[last.inline as usize];
        if nreq == 1 && last.ds.wrapping_sub(2) < lim {
            (last.ds as usize).div_ceil(4) * SEND_WQE_BB
        } else {
            0
        }
    }

    /// BAR offset the next doorbell goes to.
    pub fn next_offset(&self) -> usize {
        self.reg + self.offset
    }

    /// Publish every WQE up to counter `pi` (exclusive): `nreq` requests were pushed since the
    /// last doorbell, the last of them at counter `last.pi` with size `last.ds`, inline or not.
    /// `dbrec` is the QP's doorbell record; the last WQE is read back from `ring`.
    #[inline(always)]
    pub fn ring<M: Mmio, R: RingSource + ?Sized>(
        &mut self,
        mmio: &M,
        dbrec: &DmaBuf,
        ring: &R,
        last: Last,
        nreq: u32,
        pi: u16,
    ) {
        // The WQE stores (relaxed atomics, to DMA memory) must be visible to the device before
        // the doorbell record that announces them (udma_to_device_barrier; for the model, the
        // Release fence that its Acquire after loading the record pairs with).
        barrier::to_device();
        dbrec.write_u32(SND_DBR * 4, u32::from_ne_bytes(sq_dbrec(pi)));
        // The record before any write-combining store (mmio_wc_start).
        barrier::wc_start();
        let at = self.reg + self.offset;
        let len = self.bf_bytes(last, nreq);
        let last_pi = last.pi;
        if len == 0 {
            // The first 8 bytes of the last WQE's control segment, as they are in the ring.
            mmio.write_u64(at, ring.head(last_pi));
        } else if len == SEND_WQE_BB {
            // One block (every WQE of up to four segments): no loop.
            mmio.write_wc64(at, &ring.block(last_pi));
        } else {
            for i in 0..len / SEND_WQE_BB {
                mmio.write_wc64(at + i * SEND_WQE_BB, &ring.block(last_pi.wrapping_add(i as u16)));
            }
        }
        // The doorbell (or BlueFlame burst) leaves the write-combining buffer before anything
        // that follows, in particular before the next doorbell to the other half
        // (mmio_flush_writes).
        barrier::wc_flush();
        self.offset ^= self.half;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::wqe::bf_len;

    /// The doorbell's BlueFlame decision is `bf_len` under each policy, for every size.
    #[test]
    fn bf_bytes_is_bf_len_under_the_policy() {
        let uar = Uar { index: 0, bar_offset: 0 };
        for policy in [BlueFlame::Prefer, BlueFlame::InlineOnly, BlueFlame::Off] {
            for half in [0, 16, 32, 64, 100, 128, 256, 512, 2048, 8192] {
                let db = SqDoorbell::new(uar, half, policy);
                for (nreq, ds, inline) in (0..4)
                    .flat_map(|n| (0..=u8::MAX).flat_map(move |ds| [(n, ds, false), (n, ds, true)]))
                {
                    let bf = match policy {
                        BlueFlame::Prefer => true,
                        BlueFlame::InlineOnly => inline,
                        BlueFlame::Off => false,
                    };
                    // rdma-core's rule over the half's whole blocks: a half under one
                    // block (a device reporting a 32-byte register) rings the plain doorbell
                    // instead of copying a block past it.
                    let whole = (half / SEND_WQE_BB * SEND_WQE_BB) as u32;
                    let want = if bf { bf_len(nreq, ds, whole) } else { 0 };
                    assert!(want <= half, "{policy:?} {half} {nreq} {ds}");
                    let last = Last { pi: 0, ds, inline };
                    assert_eq!(db.bf_bytes(last, nreq), want, "{policy:?} {half} {nreq} {ds}");
                }
            }
        }
    }
}
