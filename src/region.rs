//! Keeping registered buffers alive and registered while the device still reads them.
//!
//! A posted RDMA WRITE reads its source buffers some time after the post returns, until its
//! completion is reaped (or the queue is flushed). The rules here make that safe without `unsafe`
//! at the call site:
//!
//! 1. **Lifetime, at compile time.** A [`LocalBuf<'r>`] borrows its region for `'r`, and a send
//!    queue that accepts `LocalBuf<'r>` lives no longer than `'r`. So the region (and the memory
//!    behind it) cannot be dropped while the queue that may still read it exists.
//! 2. **Registration, at run time.** Each region carries a [`RegionUse`]: a count of posted
//!    requests that reference it. Backends [`acquire`](RegionUse::acquire) it when a request is
//!    written to the ring and [`release`](RegionUse::release) it when the request's completion
//!    (or flush) is reaped. Deregistration calls [`begin_dereg`](RegionUse::begin_dereg), which is
//!    refused with [`Error::RegionBusy`] while the count is non-zero; once deregistered, a region
//!    can no longer be posted from ([`Error::BadLkey`]).
//!
//! Only the backends move the count down or the region into deregistration: `release`,
//! `begin_dereg` and `cancel_dereg` are `unsafe`, because safe code that could call them could
//! deregister a region the device still reads. `acquire` is safe: counting a request that never
//! happens only keeps the region busy (a leak), and the count saturates instead of overflowing
//! into the "deregistered" bit ([`Error::TooManyInFlight`]).
//!
//! ```compile_fail,E0133
//! # use rdma_pmd::RegionUse;
//! let usage = RegionUse::new();
//! usage.acquire().unwrap();
//! usage.release(); // safe code cannot count a request finished
//! ```
//!
//! ```compile_fail,E0133
//! # use rdma_pmd::RegionUse;
//! let usage = RegionUse::new();
//! usage.begin_dereg().unwrap(); // nor mark a region deregistered behind its backend's back
//! ```
//!
//! # Threads
//!
//! The count is two counters, so that counting a post needs no atomic read-modify-write and a
//! queue pair can still be moved to another thread with requests in flight:
//!
//! * **acquired** (a `Cell`): requests counted by [`acquire`](RegionUse::acquire), mod 2^32.
//!   `RegionUse` is `!Sync`, so a `&RegionUse`, and every [`LocalBuf`] and
//!   [`DestBuf`](crate::DestBuf) holding one, stays on one thread: acquires are made only by
//!   the thread that holds the region, one at a time, as plain loads and stores.
//! * **released** (a [`Released`], an atomic): requests finished, mod 2^32, plus 2^31 while the
//!   region is deregistered. A backend keeps `&Released` for what it has in flight (that is
//!   `Send`), so a queue pair moved to another thread retires its requests there; each release
//!   is one atomic add (`Release` ordering), made per run of retired requests, not per request.
//!
//! The in-flight count is `acquired - released`; read by the holding thread it is never less
//! than the truth (a release not yet seen only delays deregistration), and
//! [`begin_dereg`](RegionUse::begin_dereg) reads `released` with `Acquire`, so everything the
//! retiring thread did before its release happens before the region is deregistered. The
//! "deregistered" state is the count at 2^31: it is entered only with nothing in flight, so no
//! release races it, and a saturated count (2^31 - 1) stays below it.
//!
//! ```
//! fn send<T: Send>() {}
//! send::<&rdma_pmd::region::Released>();
//! send::<rdma_pmd::RegionUse>();
//! ```
//!
//! ```compile_fail,E0277
//! fn send<T: Send>() {}
//! send::<&rdma_pmd::RegionUse>(); // acquires stay on the region's thread
//! ```
//!
//! ```compile_fail,E0277
//! fn send<T: Send>() {}
//! send::<rdma_pmd::LocalBuf<'static>>(); // and so do its buffers
//! ```

use core::cell::Cell;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, Ordering};

use crate::addr::Lkey;
use crate::error::{Error, Result};
use crate::sge::Sge;

/// In-flight accounting and registration state of one registered region.
///
/// Requests counted by [`acquire`](Self::acquire) on the region's thread, and requests
/// finished ([`Released`], from any thread); see the module docs.
#[derive(Debug, Default)]
pub struct RegionUse {
    acquired: Cell<u32>,
    released: Released,
}

/// The finished-request count of a [`RegionUse`]: what a backend keeps for a request in
/// flight, and releases when the device can no longer read the region for it. `Sync`: the
/// queue pair holding it may live on another thread than the region.
#[derive(Debug, Default)]
pub struct Released(AtomicU32);

/// The in-flight count of a deregistered region (with nothing in flight).
const DEREGISTERED: u32 = 1 << 31;

/// The most requests a region counts at once: the count stays below the "deregistered" value.
pub const MAX_IN_FLIGHT: u32 = DEREGISTERED - 1;

impl RegionUse {
    /// A registered region with nothing in flight.
    pub const fn new() -> Self {
        Self { acquired: Cell::new(0), released: Released(AtomicU32::new(0)) }
    }

    /// `acquired - released`: the in-flight count, or [`DEREGISTERED`].
    #[inline(always)]
    fn state(&self, order: Ordering) -> u32 {
        self.acquired.get().wrapping_sub(self.released.0.load(order))
    }

    /// Posted requests that still reference the region.
    #[inline]
    pub fn in_flight(&self) -> u32 {
        self.state(Ordering::Acquire) & !DEREGISTERED
    }

    /// Whether the region is still registered.
    #[inline]
    pub fn is_registered(&self) -> bool {
        self.state(Ordering::Relaxed) < DEREGISTERED
    }

    /// Count one more posted request. Fails if the region was deregistered
    /// ([`Error::BadLkey`]) or already counts [`MAX_IN_FLIGHT`] requests
    /// ([`Error::TooManyInFlight`]; only requests leaked by `mem::forget` get there).
    #[inline]
    pub fn acquire(&self) -> Result<()> {
        // A release not seen yet only makes the count look higher (refusing sooner); the
        // deregistered value is set by this thread, so it is always seen.
        let s = self.state(Ordering::Relaxed);
        // One compare covers both refusals: a deregistered count is at least the value, and a
        // saturated live one is the value minus one.
        if s >= MAX_IN_FLIGHT {
            return Err(if s >= DEREGISTERED { Error::BadLkey } else { Error::TooManyInFlight });
        }
        self.acquired.set(self.acquired.get().wrapping_add(1));
        Ok(())
    }

    /// The finished-request count, for a backend to keep while the request is in flight.
    #[inline(always)]
    pub fn released(&self) -> &Released {
        &self.released
    }

    /// Count one request finished (completed or flushed).
    ///
    /// # Safety
    /// As [`Released::release_many`] with `n = 1`.
    #[allow(unsafe_code)]
    #[inline]
    pub unsafe fn release(&self) {
        // SAFETY: forwarded to our caller.
        unsafe { self.released.release_many(1) }
    }

    /// Count `n` requests finished at once.
    ///
    /// # Safety
    /// As [`Released::release_many`].
    #[allow(unsafe_code)]
    #[inline]
    pub unsafe fn release_many(&self, n: u32) {
        debug_assert!(self.in_flight() >= n, "region released more often than acquired");
        // SAFETY: forwarded to our caller.
        unsafe { self.released.release_many(n) }
    }

    /// Mark the region deregistered, unless requests still use it.
    ///
    /// # Safety
    /// Only the owner of the region calls it, as the first step of deregistering the region
    /// with the device: on `Ok` it either deregisters it or, if the device refuses, calls
    /// [`cancel_dereg`](Self::cancel_dereg). A backend must not read "deregistered" as
    /// "the device no longer knows the key": it keeps that fact itself.
    #[allow(unsafe_code)]
    pub unsafe fn begin_dereg(&self) -> Result<()> {
        // `Acquire`: every release read here happens before the deregistration. With nothing
        // in flight no release can come, so the add below races none.
        match self.state(Ordering::Acquire) {
            0 => {
                self.released.0.fetch_add(DEREGISTERED, Ordering::Relaxed);
                Ok(())
            }
            DEREGISTERED => Ok(()),
            s => Err(Error::RegionBusy { in_flight: s & !DEREGISTERED }),
        }
    }

    /// Undo [`begin_dereg`](Self::begin_dereg) after the device refused to deregister: the
    /// region can be posted from again.
    ///
    /// # Safety
    /// As for `begin_dereg`: only the region's owner calls it, and only when the device still
    /// holds the key registered.
    #[allow(unsafe_code)]
    pub unsafe fn cancel_dereg(&self) {
        if self.state(Ordering::Relaxed) == DEREGISTERED {
            self.released.0.fetch_sub(DEREGISTERED, Ordering::Relaxed);
        }
    }
}

impl Released {
    /// Count `n` requests of the region finished, in one atomic add: a backend retiring a run
    /// of requests that all read the region.
    ///
    /// # Safety
    /// The `n` must answer `n` successful [`RegionUse::acquire`]s of this region, not
    /// released before, made for requests the device can no longer read: their completion or
    /// flush was reaped, they were rolled back before their doorbell, or their queue pair was
    /// destroyed. A release without that would let [`RegionUse::begin_dereg`] succeed while
    /// the device still reads the region.
    #[allow(unsafe_code)]
    #[inline]
    pub unsafe fn release_many(&self, n: u32) {
        // `Release`: the retirement (the CQE read that says the device is done) happens
        // before a deregistration that sees this count.
        self.0.fetch_add(n, Ordering::Release);
    }
}

/// A borrowed byte range of a registered region: the safe source of a scatter-gather element.
///
/// Only backends create these (from their region types), through [`LocalBuf::from_raw_parts`],
/// whose contract ties the CPU pointer and the key-space address to the same live bytes.
#[derive(Clone, Copy, Debug)]
pub struct LocalBuf<'r> {
    region: &'r RegionUse,
    ptr: NonNull<u8>,
    addr: u64,
    len: u32,
    lkey: Lkey,
}

impl<'r> LocalBuf<'r> {
    /// Assemble a buffer from its parts.
    ///
    /// # Safety
    /// `ptr` must point to `len` bytes that stay allocated for `'r` and that the device reaches
    /// as `addr` under `lkey` for as long as `region` is registered; `region` must be the
    /// [`RegionUse`] of the region `lkey` names. The bytes are read through `ptr` only by
    /// atomic accesses (an inline copy), never by a reference, so `ptr` must carry a
    /// provenance that permits them: memory the backend mapped or allocated, or cells, not a
    /// pointer taken from a plain `&[u8]`.
    #[allow(unsafe_code)]
    #[inline]
    pub const unsafe fn from_raw_parts(
        region: &'r RegionUse,
        ptr: NonNull<u8>,
        addr: u64,
        len: u32,
        lkey: Lkey,
    ) -> Self {
        Self { region, ptr, addr, len, lkey }
    }

    /// The region's in-flight accounting.
    #[inline]
    pub fn region(&self) -> &'r RegionUse {
        self.region
    }

    /// The scatter-gather element the device is given.
    #[inline]
    pub fn sge(&self) -> Sge {
        Sge::new(self.addr, self.len, self.lkey)
    }

    /// CPU address of the first byte (for inline copies by a backend).
    #[inline]
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A sub-range `[off, off + len)` of this buffer.
    pub fn slice(&self, off: usize, len: usize) -> Result<LocalBuf<'r>> {
        let end = off.checked_add(len).ok_or(Error::OutOfBounds)?;
        if end > self.len as usize {
            return Err(Error::OutOfBounds);
        }
        Ok(LocalBuf {
            region: self.region,
            // In bounds of the same allocation: checked above.
            ptr: NonNull::new(self.ptr.as_ptr().wrapping_add(off)).ok_or(Error::OutOfBounds)?,
            addr: self.addr + off as u64,
            len: len as u32,
            lkey: self.lkey,
        })
    }
}

/// Acquire every distinct region of `sgl` once per consecutive run, so a request whose elements
/// all come from one region costs one counter update. On failure nothing stays acquired.
#[inline]
pub fn acquire_all(sgl: &[LocalBuf<'_>]) -> Result<()> {
    let mut prev: Option<*const RegionUse> = None;
    for (i, b) in sgl.iter().enumerate() {
        let r = b.region as *const RegionUse;
        if prev == Some(r) {
            continue;
        }
        if let Err(e) = b.region.acquire() {
            // SAFETY: exactly the runs acquired above, for a request never handed to a device.
            #[allow(unsafe_code)]
            unsafe {
                release_all(&sgl[..i])
            };
            return Err(e);
        }
        prev = Some(r);
    }
    Ok(())
}

/// Undo [`acquire_all`] for the same slice.
///
/// # Safety
/// As [`RegionUse::release`]: `sgl` was acquired with [`acquire_all`] for a request the device
/// can no longer read, and is released once.
#[allow(unsafe_code)]
#[inline]
pub unsafe fn release_all(sgl: &[LocalBuf<'_>]) {
    let mut prev: Option<*const RegionUse> = None;
    for b in sgl {
        let r = b.region as *const RegionUse;
        if prev != Some(r) {
            // SAFETY: forwarded to our caller.
            unsafe { b.region.release() };
            prev = Some(r);
        }
    }
}

/// Call `f` once per consecutive run of the same region in `sgl`: the regions
/// [`acquire_all`] counted, in order. Backends use it to remember what to release.
#[inline]
pub fn for_each_run<'r>(sgl: &[LocalBuf<'r>], mut f: impl FnMut(&'r RegionUse)) {
    let mut prev: Option<*const RegionUse> = None;
    for b in sgl {
        let r = b.region as *const RegionUse;
        if prev != Some(r) {
            f(b.region);
            prev = Some(r);
        }
    }
}

#[cfg(test)]
#[allow(unsafe_code)]
mod tests {
    use super::*;

    fn buf<'r>(r: &'r RegionUse, mem: &'r [u8]) -> LocalBuf<'r> {
        // SAFETY: mem lives for 'r; the test's "device" never touches it.
        #[allow(unsafe_code)]
        unsafe {
            LocalBuf::from_raw_parts(
                r,
                NonNull::from(mem).cast(),
                0x1000,
                mem.len() as u32,
                Lkey(7),
            )
        }
    }

    #[test]
    fn dereg_refused_while_in_flight() {
        let r = RegionUse::new();
        r.acquire().unwrap();
        // SAFETY (this test): the test owns the region and plays both the poster and the
        // device; every release answers one acquire.
        unsafe {
            assert_eq!(r.begin_dereg(), Err(Error::RegionBusy { in_flight: 1 }));
            r.release();
            assert_eq!(r.begin_dereg(), Ok(()));
        }
        assert_eq!(r.acquire(), Err(Error::BadLkey));
    }

    #[test]
    fn the_count_saturates_below_the_deregistered_bit() {
        let r = RegionUse { acquired: Cell::new(MAX_IN_FLIGHT - 1), ..RegionUse::new() };
        assert_eq!(r.acquire(), Ok(()));
        assert_eq!(r.in_flight(), MAX_IN_FLIGHT);
        assert_eq!(r.acquire(), Err(Error::TooManyInFlight));
        assert!(r.is_registered());
        assert_eq!(r.in_flight(), MAX_IN_FLIGHT);
        // SAFETY: the test owns the region; nothing reads it.
        assert_eq!(unsafe { r.begin_dereg() }, Err(Error::RegionBusy { in_flight: MAX_IN_FLIGHT }));
    }

    #[test]
    fn release_many_answers_that_many_acquires() {
        let r = RegionUse::new();
        for _ in 0..5 {
            r.acquire().unwrap();
        }
        // SAFETY: the test plays the backend; three of the five requests finished.
        unsafe { r.release_many(3) };
        assert_eq!(r.in_flight(), 2);
        // SAFETY: as above: the two others, then none.
        unsafe {
            r.release_many(2);
            r.release_many(0);
        }
        assert_eq!(r.in_flight(), 0);
        // SAFETY: the test owns the region; nothing is in flight.
        assert_eq!(unsafe { r.begin_dereg() }, Ok(()));
    }

    #[test]
    fn a_refused_deregistration_can_be_cancelled() {
        let r = RegionUse::new();
        // SAFETY: the test owns the region and plays its backend.
        unsafe {
            r.begin_dereg().unwrap();
            assert_eq!(r.acquire(), Err(Error::BadLkey));
            r.cancel_dereg();
        }
        assert!(r.is_registered());
        assert_eq!(r.acquire(), Ok(()));
    }

    #[test]
    fn runs_are_counted_once() {
        let (a, b) = (RegionUse::new(), RegionUse::new());
        let (ma, mb) = ([0u8; 64], [0u8; 64]);
        let sgl = [buf(&a, &ma), buf(&a, &ma), buf(&b, &mb), buf(&a, &ma)];
        acquire_all(&sgl).unwrap();
        assert_eq!((a.in_flight(), b.in_flight()), (2, 1));
        let mut n = 0;
        for_each_run(&sgl, |_| n += 1);
        assert_eq!(n, 3);
        // SAFETY: released once, for the acquire above; no device.
        unsafe { release_all(&sgl) };
        assert_eq!((a.in_flight(), b.in_flight()), (0, 0));
    }

    #[test]
    fn failed_acquire_rolls_back() {
        let (a, b) = (RegionUse::new(), RegionUse::new());
        // SAFETY: the test owns `b` and deregisters it from nothing.
        unsafe { b.begin_dereg().unwrap() };
        let (ma, mb) = ([0u8; 8], [0u8; 8]);
        let sgl = [buf(&a, &ma), buf(&b, &mb)];
        assert_eq!(acquire_all(&sgl), Err(Error::BadLkey));
        assert_eq!(a.in_flight(), 0);
    }

    #[test]
    fn slices_stay_in_bounds() {
        let a = RegionUse::new();
        let m = [0u8; 64];
        let b = buf(&a, &m);
        let s = b.slice(16, 32).unwrap();
        assert_eq!(s.sge().addr, 0x1010);
        assert_eq!(s.len(), 32);
        assert_eq!(b.slice(40, 32).unwrap_err(), Error::OutOfBounds);
        assert_eq!(b.slice(usize::MAX, 2).unwrap_err(), Error::OutOfBounds);
    }
}
