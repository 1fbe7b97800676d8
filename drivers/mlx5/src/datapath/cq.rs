//! A completion queue ring in DMA memory and the polling loop over it.
//!
//! `2^log_size` entries of 64 bytes (`struct mlx5_cqe64`), all initialised with
//! `op_own = 0xf0` (opcode `MLX5_CQE_INVALID`) as rdma-core's `cq.c` does, plus an 8-byte
//! doorbell record (`[0]` consumer index, `[1]` arm; this poll-mode driver never arms).
//!
//! Polling follows `cq.c` `get_sw_cqe` / `mlx5_poll_cq`, with one change of order:
//! 1. load the entry's `op_own` at consumer index `ci`; it is software's iff the opcode is not
//!    `0xf` and the owner bit equals `!!(ci & cqe_cnt)` ([`crate::layout::cqe::sw_owned`]);
//!    and so on for the entries after it, up to [`LOOKAHEAD`] and the ring's last slot (so
//!    one scan expects one owner bit), stopping at the first that is not software's;
//! 2. [`barrier::from_device`], once for all of them, so that no body is read before its
//!    ownership byte;
//! 3. copy each entry out in turn (no reference into DMA memory is ever formed) and parse
//!    the copy;
//! 4. after the batch, `dbrec[CQ_SET_CI] = htobe32(ci & 0xffffff)` hands the entries back.
//!
//! The provider takes the barrier for every entry (`mlx5_get_next_cqe`); on x86 it is an
//! `lfence`, which holds back every later instruction until the earlier ones are done, so a
//! barrier per entry serialises the loop. One barrier after a scan of several ownership bytes
//! orders the same loads: every body is read after the ownership byte that handed it over.
//! An entry found software's stays so until the consumer index is published past it (the
//! device writes an entry only once it is handed back), so what a scan found may be consumed
//! by a later poll without another look.
//!
//! The entries are read through a [`DmaRing`], which checked once, when the ring was made,
//! that every entry lies in its block: a consumer index is masked into the ring and a field's
//! place is a constant, so the scan and the copies need no bounds check per entry.

use rdma_pmd::{BusAddr, Error, Result};
use rdma_pmd_hal::{barrier, Dma, DmaBuf, DmaRing};

use crate::control::{CqParams, Uar};
use crate::layout::cqe::{self, OP_OWN_INVALID};
use crate::layout::cqe::{cq_ci_dbrec, CQ_SET_CI};

/// A completion queue's memory and consumer index.
#[derive(Debug)]
pub struct CqRing {
    /// The entries; a consumer index is masked into the ring by its accesses.
    ring: DmaRing<{ cqe::LEN }>,
    dbrec: DmaBuf,
    log_size: u8,
    /// `2^log_size - 1`: the slot of a consumer index.
    mask: u32,
    ci: u32,
    /// The consumer index up to which a scan found entries software's, after which the body
    /// barrier was taken (equal to `ci` when none is known to be).
    ready_end: u32,
    /// Consumer index last written to the doorbell record.
    published: u32,
}

/// The words of an entry, from its end, that a requester CQE's parse reads
/// ([`CqRing::pop_req`]).
const REQ_WORDS: usize = 3;

/// The byte of an entry where those words start.
const REQ_AT: usize = cqe::LEN - 8 * REQ_WORDS;

/// The byte of an entry where its last word, holding `op_own`, starts.
const LAST_WORD: usize = cqe::LEN - 8;

/// `op_own` of an unwritten entry, as the last 8-byte word of the entry in memory order.
const INVALID_WORD: u64 = u64::from_ne_bytes([0, 0, 0, 0, 0, 0, 0, OP_OWN_INVALID]);

/// The most entries one scan of ownership bytes looks at (see the module docs): as many as a
/// typical poll asks for, so that a poll takes the barrier once.
pub const LOOKAHEAD: u32 = 32;

impl CqRing {
    /// Allocate and initialise a ring of `2^log_size` entries and its doorbell record.
    pub fn alloc<D: Dma>(dma: &D, log_size: u8) -> Result<Self> {
        if log_size > 24 {
            return Err(Error::InvalidArgument("CQ log size above 24"));
        }
        let entries = 1usize << log_size;
        let buf = dma.alloc(entries * cqe::LEN, dma.page_size().max(cqe::LEN))?;
        let dbrec = match dma.alloc(64, 64) {
            Ok(d) => d,
            Err(e) => {
                // SAFETY: the block was never handed to the device.
                unsafe { dma.free(buf) };
                return Err(e.into());
            }
        };
        let ring = match DmaRing::new(buf, log_size) {
            Ok(r) => r,
            Err((buf, e)) => {
                // SAFETY: neither block was handed to the device.
                unsafe {
                    dma.free(buf);
                    dma.free(dbrec);
                }
                return Err(e.into());
            }
        };
        for i in 0..entries as u32 {
            ring.store_u64::<LAST_WORD>(i, INVALID_WORD);
        }
        let mask = (1u32 << log_size) - 1;
        Ok(CqRing { ring, dbrec, log_size, mask, ci: 0, ready_end: 0, published: 0 })
    }

    /// The `CREATE_CQ` fields for this ring on `uar`.
    pub fn params(&self, uar: Uar) -> CqParams {
        CqParams { log_size: self.log_size, buf: self.bus(), dbrec: self.dbrec.bus(), uar }
    }

    /// Number of entries.
    pub fn size(&self) -> u32 {
        1 << self.log_size
    }

    /// The consumer index (free-running).
    pub fn ci(&self) -> u32 {
        self.ci
    }

    /// Bus address of the entries.
    pub fn bus(&self) -> BusAddr {
        self.ring.buf().bus()
    }

    /// Take the next entry if software owns it: a copy of its 64 bytes. Advances the
    /// consumer index; call [`publish`](Self::publish) after a batch.
    #[inline]
    pub fn pop(&mut self) -> Option<[u8; 64]> {
        let idx = self.next_owned()?;
        let words: [u64; cqe::LEN / 8] = self.ring.load_u64s::<0, { cqe::LEN / 8 }>(idx);
        let mut out = [0u8; 64];
        for (chunk, w) in out.chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&w.to_ne_bytes());
        }
        Some(out)
    }

    /// [`pop`](Self::pop) for a send CQ, where every entry is a requester CQE (or a stray
    /// one, which its parse refuses): only the entry's last three words are copied (bytes
    /// 40..64: `byte_cnt`, the error syndromes or timestamp, `sop_drop_qpn`, `wqe_counter`,
    /// `op_own`), which is all the requester path parses, as `cq.c` reads only those fields of
    /// a send completion. The other bytes of the copy are zero.
    #[inline]
    pub fn pop_req(&mut self) -> Option<[u8; 64]> {
        let idx = self.next_owned()?;
        let words: [u64; REQ_WORDS] = self.ring.load_u64s::<REQ_AT, REQ_WORDS>(idx);
        let mut out = [0u8; 64];
        for (k, w) in words.iter().enumerate() {
            let at = REQ_AT + 8 * k;
            out[at..at + 8].copy_from_slice(&w.to_ne_bytes());
        }
        Some(out)
    }

    /// The consumer index of the entry there if software owns it, moving the index past it;
    /// its body may be read from there on. Scans ahead when no entry is known to be
    /// software's.
    #[inline(always)]
    fn next_owned(&mut self) -> Option<u32> {
        if self.ci == self.ready_end {
            let found = self.scan();
            if found == 0 {
                return None;
            }
            self.ready_end = self.ci.wrapping_add(found);
        }
        let idx = self.ci;
        self.ci = idx.wrapping_add(1);
        Some(idx)
    }

    /// How many entries from the consumer index on software owns (at most [`LOOKAHEAD`], and
    /// none past the ring's last slot), then the body barrier if any.
    #[inline]
    fn scan(&self) -> u32 {
        let size = self.mask + 1;
        let slot = self.ci & self.mask;
        // Up to the ring's end the lap, and so the owner bit software expects, is one; the
        // entries after the end are the next scan's.
        let max = LOOKAHEAD.min(size - slot);
        let owner = (self.ci & size != 0) as u8;
        let mut k = 0;
        while k < max {
            let word = self.ring.load_u64::<LAST_WORD>(self.ci.wrapping_add(k));
            if !cqe::sw_owned_in_lap(word.to_ne_bytes()[7], owner) {
                break;
            }
            k += 1;
        }
        if k != 0 {
            // The bodies of the entries found software's must not be read before their
            // ownership bytes said they are complete (udma_from_device_barrier).
            barrier::from_device();
        }
        k
    }

    /// Entries from the consumer index on that a scan found software's.
    #[cfg(test)]
    fn ready(&self) -> u32 {
        self.ready_end.wrapping_sub(self.ci)
    }

    /// Tell the device every entry before the consumer index is free
    /// (`dbrec[CQ_SET_CI] = htobe32(ci & 0xffffff)`), if it moved.
    #[inline]
    pub fn publish(&mut self) {
        if self.published != self.ci {
            // The entries' loads come before the store that lets the device overwrite them.
            barrier::to_device();
            self.dbrec.write_u32(CQ_SET_CI * 4, u32::from_ne_bytes(cq_ci_dbrec(self.ci)));
            self.published = self.ci;
        }
    }

    /// Give the memory back.
    ///
    /// # Safety
    /// The device must no longer write the ring: the CQ was destroyed (or never created).
    pub unsafe fn free<D: Dma>(self, dma: &D) {
        // SAFETY: forwarded to our caller.
        unsafe {
            dma.free(self.ring.into_buf());
            dma.free(self.dbrec);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::codes::{CqeOpcode, SendOpcode};
    use crate::layout::cqe::Cqe;
    use rdma_pmd::QpNum;
    use rdma_pmd_hal::mem::HeapDma;

    /// Write a CQE as the device would at consumer index `idx`.
    pub(crate) fn put_cqe(dma: &HeapDma, ring: &CqRing, idx: u32, op: CqeOpcode, counter: u16) {
        let mut b = [0u8; 64];
        let mut c = Cqe::new_unchecked(&mut b[..]);
        c.set_s_wqe_opcode_qpn(SendOpcode::RdmaWrite, QpNum(7));
        c.set_wqe_counter(counter);
        let owner = (idx & ring.size() != 0) as u8;
        c.set_op_own(u8::from(op) << 4 | owner);
        let slot = idx & (ring.size() - 1);
        assert!(dma.write(ring.bus().add(slot as u64 * 64), &b));
    }

    fn dbrec(dma: &HeapDma, ring: &CqRing) -> [u8; 4] {
        let mut b = [0u8; 4];
        assert!(dma.read(ring.params(Uar { index: 0, bar_offset: 0 }).dbrec, &mut b));
        b
    }

    #[test]
    fn fresh_ring_is_all_invalid_and_empty() {
        let dma = HeapDma::new();
        let mut r = CqRing::alloc(&*dma, 3).unwrap();
        for i in 0..8u64 {
            let mut b = [0u8; 64];
            assert!(dma.read(r.bus().add(i * 64), &mut b));
            assert_eq!(b[63], 0xf0);
        }
        assert!(r.pop().is_none());
        // SAFETY: no device.
        unsafe { r.free(&*dma) };
        assert_eq!(dma.live_blocks(), 0);
    }

    #[test]
    fn ownership_flips_each_lap_and_ci_is_published() {
        let dma = HeapDma::new();
        let mut r = CqRing::alloc(&*dma, 2).unwrap();
        for idx in 0..4 * 4 + 2 {
            // Not yet written for this lap: the old entry (previous lap's owner) is refused.
            assert!(r.pop().is_none(), "idx {idx}");
            put_cqe(&dma, &r, idx, CqeOpcode::Req, idx as u16);
            let c = r.pop().expect("owned");
            assert_eq!(Cqe::new_unchecked(&c[..]).wqe_counter(), idx as u16);
            assert_eq!(r.ci(), idx + 1);
            assert_eq!(dbrec(&dma, &r), idx.to_be_bytes(), "published only on demand");
            r.publish();
            assert_eq!(dbrec(&dma, &r), (idx + 1).to_be_bytes());
        }
        // An entry with the right owner bit but the invalid opcode is not software's.
        let idx = r.ci();
        let slot = idx & 3;
        let owner = (idx & 4 != 0) as u8;
        assert!(dma.write(r.bus().add(slot as u64 * 64 + 63), &[0xf0 | owner]));
        assert!(r.pop().is_none());
        // SAFETY: no device.
        unsafe { r.free(&*dma) };
    }

    #[test]
    fn a_requester_pop_copies_the_last_three_words() {
        let dma = HeapDma::new();
        let mut r = CqRing::alloc(&*dma, 1).unwrap();
        assert!(r.pop_req().is_none());
        let mut b = [0u8; 64];
        for (i, x) in b.iter_mut().enumerate() {
            *x = i as u8 | 0x80;
        }
        // op_own: opcode REQ (0), owner 0 for the first lap.
        b[63] = u8::from(CqeOpcode::Req) << 4;
        assert!(dma.write(r.bus(), &b));
        let c = r.pop_req().expect("owned");
        assert_eq!(c[..40], [0u8; 40]);
        assert_eq!(c[40..], b[40..]);
        assert_eq!(r.ci(), 1);
        assert!(r.pop_req().is_none(), "the next entry is not written");
        // SAFETY: no device.
        unsafe { r.free(&*dma) };
    }

    #[test]
    fn a_scan_finds_the_owned_run_and_later_entries_are_seen_by_the_next() {
        let dma = HeapDma::new();
        let mut r = CqRing::alloc(&*dma, 2).unwrap();
        for idx in 0..3 {
            put_cqe(&dma, &r, idx, CqeOpcode::Req, idx as u16);
        }
        let c = r.pop_req().expect("owned");
        assert_eq!(Cqe::new_unchecked(&c[..]).wqe_counter(), 0);
        assert_eq!(r.ready(), 2, "the scan stopped at the first entry not written");
        // Written after the scan: found by the scan after the two already found.
        put_cqe(&dma, &r, 3, CqeOpcode::Req, 3);
        for idx in 1..4 {
            let c = r.pop().expect("owned");
            assert_eq!(Cqe::new_unchecked(&c[..]).wqe_counter(), idx as u16);
        }
        assert!(r.pop().is_none());
        // A whole lap written at once: a scan looks at no more entries than the ring has,
        // and the next lap's entries (owner bit flipped) are not taken for this one's.
        r.publish();
        for idx in 4..8 {
            put_cqe(&dma, &r, idx, CqeOpcode::Req, idx as u16);
        }
        assert!(r.pop().is_some());
        assert_eq!(r.ready(), 3);
        for _ in 0..3 {
            assert!(r.pop().is_some());
        }
        assert!(r.pop().is_none(), "the entries of the lap just read are not the next lap's");
        assert_eq!(r.ci(), 8);
        // Entries across the ring's end: a scan stops at the last slot, and the next one,
        // on the following lap, expects the other owner bit.
        r.publish();
        for idx in 8..11 {
            put_cqe(&dma, &r, idx, CqeOpcode::Req, idx as u16);
        }
        for _ in 0..3 {
            assert!(r.pop().is_some());
        }
        r.publish();
        for idx in 11..14 {
            put_cqe(&dma, &r, idx, CqeOpcode::Req, idx as u16);
        }
        let c = r.pop().expect("owned");
        assert_eq!(Cqe::new_unchecked(&c[..]).wqe_counter(), 11);
        assert_eq!(r.ready(), 0, "slot 3 is the ring's last: the scan stopped there");
        for idx in 12..14 {
            let c = r.pop().expect("owned, on the next lap");
            assert_eq!(Cqe::new_unchecked(&c[..]).wqe_counter(), idx as u16);
        }
        assert_eq!(r.ready(), 0);
        assert!(r.pop().is_none());
        // SAFETY: no device.
        unsafe { r.free(&*dma) };
    }

    #[test]
    fn ci_doorbell_keeps_24_bits() {
        let dma = HeapDma::new();
        let mut r = CqRing::alloc(&*dma, 0).unwrap();
        r.ci = 0x0100_0000 - 1;
        r.published = 0;
        put_cqe(&dma, &r, r.ci, CqeOpcode::Req, 1);
        assert!(r.pop().is_some());
        r.publish();
        assert_eq!(dbrec(&dma, &r), [0, 0, 0, 0]);
        // SAFETY: no device.
        unsafe { r.free(&*dma) };
    }
}
