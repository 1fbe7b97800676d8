//! The ring sinks: where a WQE builder's stores go.
//!
//! The send ring is `wqe_cnt` slots of 64 bytes. The builder never holds a Rust reference into
//! the ring. It hands each aligned 8- or 16-byte piece to a [`WqeSink`] together with its byte offset counted from the start of the ring *as
//! if the ring repeated forever* (`pi * 64 + offset in the WQE`); the sink wraps it modulo the
//! ring size, so block *i* of a WQE posted at WQE counter `pi` lands in slot
//! `(pi + i) & (wqe_cnt - 1)`, and so does any inline payload that runs past the end of a block.
//! Wrapping in the sink costs one `and` per store and makes every sink memory-safe for any
//! offset. Three sinks ship here:
//!
//! * [`RawRing`]: a ring in DMA memory, written through a raw pointer (house rule: no
//!   references into live DMA memory) with 8-byte relaxed atomic stores
//!   (`rdma_pmd_hal::access`) and, on x86_64, one 16-byte store per segment (see `store16`). The data path creates it once
//!   per send queue from the ring's CPU address.
//! * [`FixedRing`]: the same with the size a compile-time constant; the send queue uses it.
//! * [`SliceRing`]: a ring over a plain `&mut [u8]`, for tests, conformance vectors and
//!   BlueFlame staging.

use core::marker::PhantomData;
use core::ptr::NonNull;

use rdma_pmd::{Error, Result};
use rdma_pmd_hal::access;

use crate::layout::codes::SEND_WQE_BB;

/// A send ring of 64-byte slots that accepts aligned 8- and 16-byte stores.
///
/// Contract for implementors: [`put8`](WqeSink::put8) stores the 8 bytes, in the order given,
/// at byte `off mod (wqe_cnt * 64)` of the ring; [`put16`](WqeSink::put16) stores 16 bytes the
/// same way. The builder passes `off` multiples of 8 (of 16 for `put16`), not reduced modulo
/// the ring size; an implementation must stay memory-safe for any `off` (masking it with
/// `wqe_cnt * 64 - 1` is enough).
pub trait WqeSink {
    /// Number of 64-byte slots; a power of two, at least 1.
    fn wqe_cnt(&self) -> u32;

    /// Store `bytes` (memory order) at byte `off mod (wqe_cnt * 64)` of the ring.
    fn put8(&mut self, off: usize, bytes: [u8; 8]);

    /// Store `lo` then `hi` (memory order) at bytes `off..off + 16` (mod the ring size) of the
    /// ring; `off` is a multiple of 16, so the two words never straddle the ring's end.
    #[inline(always)]
    fn put16(&mut self, off: usize, lo: [u8; 8], hi: [u8; 8]) {
        self.put8(off, lo);
        self.put8(off + 8, hi);
    }

    /// Store the same 16 bytes as [`put16`](WqeSink::put16), as two 8-byte stores at one
    /// wrapped offset: a gather's data segments, where building the 16-byte value from two
    /// words would cost more instructions than the second store.
    #[inline(always)]
    fn put8x2(&mut self, off: usize, lo: [u8; 8], hi: [u8; 8]) {
        self.put8(off, lo);
        self.put8(off + 8, hi);
    }
}

impl<S: WqeSink + ?Sized> WqeSink for &mut S {
    #[inline(always)]
    fn wqe_cnt(&self) -> u32 {
        (**self).wqe_cnt()
    }

    #[inline(always)]
    fn put8(&mut self, off: usize, bytes: [u8; 8]) {
        (**self).put8(off, bytes)
    }

    #[inline(always)]
    fn put16(&mut self, off: usize, lo: [u8; 8], hi: [u8; 8]) {
        (**self).put16(off, lo, hi)
    }

    #[inline(always)]
    fn put8x2(&mut self, off: usize, lo: [u8; 8], hi: [u8; 8]) {
        (**self).put8x2(off, lo, hi)
    }
}

fn check_wqe_cnt(wqe_cnt: u32) -> Result<usize> {
    if wqe_cnt == 0 || !wqe_cnt.is_power_of_two() || wqe_cnt > 1 << 24 {
        return Err(Error::InvalidArgument("wqe_cnt must be a power of two up to 2^24"));
    }
    Ok(wqe_cnt as usize * SEND_WQE_BB)
}

/// A send ring in device-visible memory, written only with stores of 8 bytes (relaxed atomic)
/// and 16 bytes (see `store16`).
///
/// Nothing orders these stores with respect to the device: after the last WQE of a batch the
/// caller issues the `udma_to_device_barrier` equivalent before writing the doorbell record.
#[derive(Debug)]
pub struct RawRing {
    base: NonNull<u64>,
    /// `wqe_cnt * 64 - 1`: wraps an offset into the ring.
    mask: usize,
    wqe_cnt: u32,
}

// SAFETY: a RawRing is an exclusive writer handle to memory it does not own; moving it to
// another thread moves that exclusivity with it.
unsafe impl Send for RawRing {}

impl RawRing {
    /// A ring of `wqe_cnt` slots starting at `base`.
    ///
    /// # Safety
    /// `base` must be 16-byte aligned and valid for reads and writes of `wqe_cnt * 64` bytes for
    /// as long as the returned value lives, and nothing may hold a Rust reference into those bytes
    /// meanwhile (the device, and readers using `rdma_pmd_hal::access`, may access them).
    pub unsafe fn new(base: NonNull<u8>, wqe_cnt: u32) -> Result<Self> {
        let len = check_wqe_cnt(wqe_cnt)?;
        // 16: a segment is stored in one 16-byte store (`store16`). The device asks for more
        // (the queue's buffer is page-aligned, the send ring a whole number of blocks into it).
        if base.as_ptr() as usize & 15 != 0 {
            return Err(Error::InvalidArgument("send ring not 16-byte aligned"));
        }
        Ok(RawRing { base: base.cast(), mask: len - 1, wqe_cnt })
    }

    /// The ring's first byte.
    pub fn base(&self) -> NonNull<u8> {
        self.base.cast()
    }
}

impl WqeSink for RawRing {
    #[inline(always)]
    fn wqe_cnt(&self) -> u32 {
        self.wqe_cnt
    }

    #[inline(always)]
    fn put8(&mut self, off: usize, bytes: [u8; 8]) {
        // SAFETY: `new`'s caller vouched for `wqe_cnt * 64` bytes at `base`, 16-byte aligned;
        // `mask` is that length minus one.
        unsafe { store8(self.base, self.mask, off, bytes) }
    }

    #[inline(always)]
    fn put16(&mut self, off: usize, lo: [u8; 8], hi: [u8; 8]) {
        // SAFETY: as in `put8`.
        unsafe { store16(self.base, self.mask, off, lo, hi) }
    }
}

/// Store `bytes` at byte `off & mask & !7` of the ring at `base`.
///
/// # Safety
/// `base` must be 16-byte aligned and valid for writes of `mask + 1` bytes, a power of two and
/// a multiple of 64 (a whole number of slots).
#[inline(always)]
unsafe fn store8(base: NonNull<u64>, mask: usize, off: usize, bytes: [u8; 8]) {
    let word = (off & mask & !7) >> 3;
    // SAFETY: `word * 8 <= mask - 7`, so the 8 bytes lie inside the block the caller vouched
    // for; aligned because `base` is. Atomic (`access`): the device (or the model's thread)
    // accesses the ring atomically too; the barrier before the doorbell record orders it.
    unsafe { access::store_u64(base.as_ptr().add(word), u64::from_ne_bytes(bytes)) }
}

/// Store `lo`, `hi` at byte `off & mask & !15` of the ring at `base` as two 8-byte stores,
/// the offset wrapped once.
///
/// # Safety
/// As for [`store8`].
#[inline(always)]
unsafe fn store8x2(base: NonNull<u64>, mask: usize, off: usize, lo: [u8; 8], hi: [u8; 8]) {
    let word = (off & mask & !15) >> 3;
    // SAFETY: `word * 8` is a multiple of 16 at most `mask - 15` (`mask + 1` is a multiple of
    // 64), so both words lie inside the block the caller vouched for; aligned because `base`
    // is. Atomic (`access`), as in `store8`.
    unsafe {
        let p = base.as_ptr().add(word);
        access::store_u64(p, u64::from_ne_bytes(lo));
        access::store_u64(p.add(1), u64::from_ne_bytes(hi));
    }
}

/// Store the 16 bytes `lo`, `hi` at byte `off & mask & !15` of the ring at `base`: one
/// segment, the unit every ring sink writes.
///
/// On x86_64 this is one 16-byte store rather than two of 8. A WQE then takes three stores
/// instead of six, so half as many wait in the store queue while the ring's cache lines are
/// fetched (the ring is larger than the L1 cache, so every lap misses), and fewer of the loop's
/// loads are held back behind them. The device sees no difference: it reads the ring after the doorbell, and the
/// barrier before the doorbell record orders these stores like any others.
///
/// This store is the one access to DMA memory that is not a `rdma_pmd_hal::access` atomic
/// (Rust has no 16-byte atomic, and two 8-byte atomic stores would double the stores per WQE,
/// the cost described above). It is free of data races not by construction but by the send queue's protocol,
/// which orders it by happens-before with every access of another thread to these bytes; see
/// the SAFETY comment inside.
///
/// # Safety
/// As for [`store8`], and the ring must be used as a send queue's: the device reads a slot only
/// after a doorbell record that covers it, never writes the ring, and the caller rewrites a
/// slot only after a completion for its WQE (or a later one) has been seen.
#[inline(always)]
unsafe fn store16(base: NonNull<u64>, mask: usize, off: usize, lo: [u8; 8], hi: [u8; 8]) {
    let word = (off & mask & !15) >> 3;
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::__m128i;
        let words = [u64::from_ne_bytes(lo), u64::from_ne_bytes(hi)];
        // SAFETY: `__m128i` is 16 plain bytes, as `words` is (in memory order). `word * 8` is a
        // multiple of 16 at most `mask - 15` (`mask + 1` is a multiple of 64), so the 16 bytes
        // lie inside the block the caller vouched for, 16-byte aligned because `base` is.
        //
        // Not atomic, so every access to these bytes from another thread (the device model) must
        // be ordered with it by happens-before; the send queue's protocol provides both edges:
        // * this store → the model's loads of the WQE: program order puts it before
        //   `barrier::to_device` (a Release fence) and the doorbell-record store after it; the
        //   model reads a slot only once a doorbell record it loaded covers it, and that load is
        //   followed by an Acquire fence (`HeapDma::read`; the doorbell handler also hands the
        //   work to the engine thread under a mutex), so fence–fence synchronization orders
        //   this store before the model's reads.
        // * the model's loads of an earlier lap → this store: the model never writes the ring
        //   and reads a WQE before it writes the CQE completing it (or a later WQE); that CQE's
        //   owner word is stored after a Release fence (`HeapDma::write`), and the caller
        //   reuses the slot only after loading that owner word and issuing
        //   `barrier::from_device` (an Acquire fence).
        // The driver's own loads of the ring (BlueFlame copies) are on this thread,
        // ordered by program order. A real device is outside the Rust memory model.
        unsafe {
            let v = core::mem::transmute::<[u64; 2], __m128i>(words);
            base.as_ptr().add(word).cast::<__m128i>().write_volatile(v)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as above (bounds, alignment), for two 8-byte words; atomic (`access`), so these
    // need no protocol argument.
    unsafe {
        let p = base.as_ptr().add(word);
        access::store_u64(p, u64::from_ne_bytes(lo));
        access::store_u64(p.add(1), u64::from_ne_bytes(hi));
    }
}

/// A [`RawRing`] whose size `N` is a compile-time constant, so wrapping an offset is an `and`
/// with a constant and the stores of one block share one address computation. The send
/// queue's data path writes through this.
#[derive(Debug)]
pub struct FixedRing<const N: usize> {
    base: NonNull<u64>,
}

// SAFETY: as for RawRing: an exclusive writer handle, moved with its exclusivity.
unsafe impl<const N: usize> Send for FixedRing<N> {}

impl<const N: usize> FixedRing<N> {
    /// `N * 64 - 1`: wraps an offset into the ring.
    const MASK: usize = N * SEND_WQE_BB - 1;

    /// The same ring, which must have `N` slots.
    pub fn new(ring: RawRing) -> Result<Self> {
        if ring.wqe_cnt as usize != N {
            return Err(Error::InvalidArgument("ring size differs from N"));
        }
        Ok(FixedRing { base: ring.base })
    }
}

impl<const N: usize> FixedRing<N> {
    /// A handle for one post: its base address is read once, so the compiler need not reload
    /// it after every store to the ring.
    #[inline(always)]
    pub fn view(&mut self) -> RingView<'_, N> {
        RingView { base: self.base, _ring: PhantomData }
    }

    /// The first 8 bytes (memory order, as a native word) of the slot of WQE counter
    /// `counter`.
    #[inline(always)]
    pub fn head(&self, counter: u16) -> u64 {
        let slot = counter as usize & (N - 1);
        // SAFETY: `slot < N`, so the word lies inside the `N * 64` bytes at `base` that the
        // RawRing's creator vouched for (valid for reads, 16-byte aligned). Atomic (`access`),
        // as every other thread's access to the ring is; the ring's own stores are this
        // thread's, ordered by program order.
        unsafe { access::load_u64(self.base.as_ptr().add(slot * (SEND_WQE_BB / 8))) }
    }

    /// The 64 bytes of the slot of WQE counter `counter`, as eight native words in memory
    /// order: the source of a BlueFlame copy.
    #[inline(always)]
    pub fn block(&self, counter: u16) -> [u64; 8] {
        let slot = counter as usize & (N - 1);
        // SAFETY: as in `head`: the 64 bytes of slot `slot < N` lie inside the ring.
        let p = unsafe { self.base.as_ptr().add(slot * (SEND_WQE_BB / 8)) };
        // SAFETY: `k < 8`, inside the slot; atomic, as in `head`.
        core::array::from_fn(|k| unsafe { access::load_u64(p.add(k)) })
    }
}

/// A [`FixedRing`] borrowed for one post (see [`FixedRing::view`]).
#[derive(Debug)]
pub struct RingView<'a, const N: usize> {
    base: NonNull<u64>,
    _ring: PhantomData<&'a mut FixedRing<N>>,
}

impl<const N: usize> WqeSink for RingView<'_, N> {
    #[inline(always)]
    fn wqe_cnt(&self) -> u32 {
        N as u32
    }

    #[inline(always)]
    fn put8(&mut self, off: usize, bytes: [u8; 8]) {
        // SAFETY: the view borrows a FixedRing, built from a RawRing of `N` slots whose creator
        // vouched for `N * 64` bytes at `base`, 16-byte aligned.
        unsafe { store8(self.base, FixedRing::<N>::MASK, off, bytes) }
    }

    #[inline(always)]
    fn put16(&mut self, off: usize, lo: [u8; 8], hi: [u8; 8]) {
        // SAFETY: as in `put8`.
        unsafe { store16(self.base, FixedRing::<N>::MASK, off, lo, hi) }
    }

    #[inline(always)]
    fn put8x2(&mut self, off: usize, lo: [u8; 8], hi: [u8; 8]) {
        // SAFETY: as in `put8`.
        unsafe { store8x2(self.base, FixedRing::<N>::MASK, off, lo, hi) }
    }
}

/// A sink that passes every store of a one-block WQE on to `sink` and keeps the block's words:
/// the source of a one-block BlueFlame burst, which then need not read the block back from the
/// ring. Words the WQE does not store stay 0 (the HCA reads only the WQE's own `ds` units of a
/// BlueFlame copy).
///
/// Every store must lie in that one block (`emit_one_with`'s WQEs): a word is placed by its
/// offset within a block. Meant for straight-line writers, whose offsets fold to constants, so
/// that the block lives in registers.
#[derive(Debug)]
pub struct Capture<S> {
    sink: S,
    /// The block's words, in memory order.
    pub block: [u64; 8],
}

impl<S: WqeSink> Capture<S> {
    /// Capture the stores of a one-block WQE into `sink`.
    #[inline(always)]
    pub fn new(sink: S) -> Self {
        Capture { sink, block: [0; 8] }
    }

    /// The index in the block of the word at byte `off` of the ring.
    #[inline(always)]
    fn word(off: usize) -> usize {
        (off % SEND_WQE_BB) / 8
    }

    /// Keep the 16 bytes stored at `off`, a multiple of 16: words `2k, 2k + 1`, never past
    /// the block.
    #[inline(always)]
    fn keep16(&mut self, off: usize, lo: [u8; 8], hi: [u8; 8]) {
        let i = Self::word(off) & !1;
        self.block[i] = u64::from_ne_bytes(lo);
        self.block[i | 1] = u64::from_ne_bytes(hi);
    }
}

impl<S: WqeSink> WqeSink for Capture<S> {
    #[inline(always)]
    fn wqe_cnt(&self) -> u32 {
        self.sink.wqe_cnt()
    }

    #[inline(always)]
    fn put8(&mut self, off: usize, bytes: [u8; 8]) {
        self.sink.put8(off, bytes);
        self.block[Self::word(off)] = u64::from_ne_bytes(bytes);
    }

    #[inline(always)]
    fn put16(&mut self, off: usize, lo: [u8; 8], hi: [u8; 8]) {
        self.sink.put16(off, lo, hi);
        self.keep16(off, lo, hi);
    }

    #[inline(always)]
    fn put8x2(&mut self, off: usize, lo: [u8; 8], hi: [u8; 8]) {
        self.sink.put8x2(off, lo, hi);
        self.keep16(off, lo, hi);
    }
}

/// A send ring over an ordinary byte buffer.
#[derive(Debug)]
pub struct SliceRing<'a> {
    buf: &'a mut [u8],
    mask: usize,
    wqe_cnt: u32,
}

impl<'a> SliceRing<'a> {
    /// The first `wqe_cnt * 64` bytes of `buf` as a ring of `wqe_cnt` slots.
    pub fn new(buf: &'a mut [u8], wqe_cnt: u32) -> Result<Self> {
        let len = check_wqe_cnt(wqe_cnt)?;
        if buf.len() < len {
            return Err(Error::InvalidArgument("buffer shorter than wqe_cnt * 64"));
        }
        Ok(SliceRing { buf, mask: len - 1, wqe_cnt })
    }

    /// The ring's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..=self.mask]
    }

    /// The 64 bytes of one slot (`slot` is masked).
    pub fn slot(&self, slot: u32) -> &[u8] {
        let s = (slot & (self.wqe_cnt - 1)) as usize * SEND_WQE_BB;
        &self.buf[s..s + SEND_WQE_BB]
    }

    /// Copy `wqebbs` blocks of the WQE posted at counter `pi` into `out`, unwrapped (block 0
    /// first): the logical WQE, and the source of a BlueFlame copy. Returns the bytes copied.
    pub fn copy_wqe(&self, pi: u16, wqebbs: usize, out: &mut [u8]) -> usize {
        let mut n = 0;
        for (i, dst) in out.chunks_exact_mut(SEND_WQE_BB).take(wqebbs).enumerate() {
            dst.copy_from_slice(self.slot(pi as u32 + i as u32));
            n += SEND_WQE_BB;
        }
        n
    }
}

impl WqeSink for SliceRing<'_> {
    #[inline(always)]
    fn wqe_cnt(&self) -> u32 {
        self.wqe_cnt
    }

    #[inline(always)]
    fn put8(&mut self, off: usize, bytes: [u8; 8]) {
        let off = off & self.mask & !7;
        self.buf[off..off + 8].copy_from_slice(&bytes);
    }
}
