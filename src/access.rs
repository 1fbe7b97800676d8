//! Loads and stores of memory the device may touch at the same time: the one place where the
//! CPU side (and the in-memory device model) reads or writes DMA memory. It lives in the core
//! because the core's own buffers ([`crate::DestBuf`], inline copies of registered sources)
//! read device memory too; the HAL re-exports it as `rdma_pmd_hal::access`.
//!
//! # Why atomics, not volatile
//!
//! A real device is outside the Rust memory model: what it does to host memory is whatever the
//! bus does, and volatile accesses (which the compiler neither elides, merges nor splits) were
//! enough. The device model of the tests is not: it is another Rust thread, and a volatile
//! access racing with an access of another thread is a data race — undefined behaviour —
//! because volatile is not atomic. So every access to memory both sides touch is a **relaxed
//! atomic** access (`AtomicU8`/`AtomicU32`/`AtomicU64::from_ptr`), on both sides:
//!
//! * the driver's accessors (the HAL's `DmaBuf`, the mlx5 send ring, BlueFlame copies, region
//!   copies) and the model's (the HAL's `HeapDma::read`/`write` and `BarMem`) all go through the functions below, so no access to shared memory
//!   is non-atomic, and no data race can occur whatever either side does — by construction,
//!   not by protocol. The one exception is the mlx5 send ring's 16-byte segment store on
//!   x86_64 (Rust has no 16-byte atomic), which the send queue's protocol orders by
//!   happens-before with every access of the device; `wqe/sink.rs` `store16` shows how;
//! * a relaxed atomic load or store of an aligned `u8`/`u32`/`u64` compiles to the same single
//!   `mov` (x86_64) or `ldr`/`str` (aarch64) a volatile access does, so real hardware sees the
//!   same bus accesses as before, and the data path costs the same.
//!
//! Relaxed accesses order nothing. Ordering comes, as on hardware, from the barriers in
//! the HAL's `barrier` module, whose functions are also Rust fences: `to_device` is
//! (among other things) a `Release` fence and `from_device` an
//! `Acquire` fence. A relaxed store after a release fence, read by a relaxed load that is
//! followed by an acquire fence, makes everything before the release fence happen before
//! everything after the acquire fence (fence–fence synchronization). That is how the driver's
//! WQE stores are ordered before the model's reads of them (driver: WQE stores, `to_device`,
//! doorbell-record store; model: doorbell-record load, acquire), and how the model's CQE body
//! is ordered before the driver's reads of it (model: body stores, release, owner-word store;
//! driver: owner-word load, `from_device`, body loads).
//!
//! # Access sizes
//!
//! Rust also forbids unsynchronized *mixed-size* atomic accesses to overlapping bytes where one
//! is a store (an 8-byte load racing with a 1-byte store inside it). Two rules keep the words
//! that the two sides access concurrently — ownership words, doorbell records — the same size
//! on both sides:
//!
//! * the byte copies ([`load_bytes`], [`store_bytes`], [`fill_bytes`]) split a range the same
//!   way whoever calls them: at each address, one `u64` access if it is 8-byte aligned and at
//!   least 8 bytes remain, else one `u32` if 4-byte aligned and at least 4 remain, else one
//!   `u8`. So a 4-byte doorbell record copied by the model is one `u32` access, matching the
//!   driver's `write_u32`, and the last 8 bytes of a CQE are one `u64`, matching the driver's
//!   owner-word load;
//! * a layout that is polled (an ownership byte or word) is written by the producer with one
//!   access of the width the consumer reads it with, and the rest of the entry only before
//!   that (under the release that the consumer's acquire pairs with).
//!
//! Accesses that are ordered by that synchronization (a CQE body, the WQEs of a ring) may use
//! any sizes.

#![allow(unsafe_code)]

use core::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};

/// One relaxed atomic 8-bit load.
///
/// # Safety
/// `p` must be valid for reads, and every access to it that is not ordered with this one by
/// happens-before must be an atomic access of one byte (the module's rules), so in particular
/// no Rust reference to it may be live.
#[inline(always)]
pub unsafe fn load_u8(p: *const u8) -> u8 {
    // SAFETY: the caller vouches for validity and for atomic-only, same-size racing accesses;
    // a byte is always aligned. Relaxed: the caller orders with the HAL's barriers.
    unsafe { AtomicU8::from_ptr(p.cast_mut()) }.load(Relaxed)
}

/// One relaxed atomic 8-bit store.
///
/// # Safety
/// As for [`load_u8`], with `p` valid for writes.
#[inline(always)]
pub unsafe fn store_u8(p: *mut u8, v: u8) {
    // SAFETY: as in `load_u8`.
    unsafe { AtomicU8::from_ptr(p) }.store(v, Relaxed)
}

/// One relaxed atomic 32-bit load.
///
/// # Safety
/// `p` must be 4-byte aligned and valid for reads of 4 bytes, and every access to those bytes
/// that is not ordered with this one by happens-before must be an atomic access of these
/// same 4 bytes (the module's rules).
#[inline(always)]
pub unsafe fn load_u32(p: *const u32) -> u32 {
    // SAFETY: the caller vouches for alignment, validity and atomic-only, same-size racing
    // accesses. Relaxed: the caller orders with the HAL's barriers.
    unsafe { AtomicU32::from_ptr(p.cast_mut()) }.load(Relaxed)
}

/// One relaxed atomic 32-bit store.
///
/// # Safety
/// As for [`load_u32`], with `p` valid for writes.
#[inline(always)]
pub unsafe fn store_u32(p: *mut u32, v: u32) {
    // SAFETY: as in `load_u32`.
    unsafe { AtomicU32::from_ptr(p) }.store(v, Relaxed)
}

/// One relaxed atomic 64-bit load.
///
/// # Safety
/// `p` must be 8-byte aligned and valid for reads of 8 bytes, and every access to those bytes
/// that is not ordered with this one by happens-before must be an atomic access of these
/// same 8 bytes (the module's rules).
#[inline(always)]
pub unsafe fn load_u64(p: *const u64) -> u64 {
    // SAFETY: the caller vouches for alignment, validity and atomic-only, same-size racing
    // accesses. Relaxed: the caller orders with the HAL's barriers.
    unsafe { AtomicU64::from_ptr(p.cast_mut()) }.load(Relaxed)
}

/// One relaxed atomic 64-bit store.
///
/// # Safety
/// As for [`load_u64`], with `p` valid for writes.
#[inline(always)]
pub unsafe fn store_u64(p: *mut u64, v: u64) {
    // SAFETY: as in `load_u64`.
    unsafe { AtomicU64::from_ptr(p) }.store(v, Relaxed)
}

/// The width of the access a byte copy makes at address `addr` with `left` bytes to go: the
/// splitting rule of the module docs, shared by every copy so both sides split alike.
#[inline(always)]
fn step(addr: usize, left: usize) -> usize {
    if addr % 8 == 0 && left >= 8 {
        8
    } else if addr % 4 == 0 && left >= 4 {
        4
    } else {
        1
    }
}

/// Copy `out.len()` bytes from `src` with relaxed atomic loads, split by the module's rule.
///
/// # Safety
/// `src` must be valid for reads of `out.len()` bytes, with every access to them not ordered
/// with this copy being an atomic access split the same way (the module's rules); `out` is
/// ordinary memory, so it cannot overlap them.
#[inline]
pub unsafe fn load_bytes(src: *const u8, out: &mut [u8]) {
    let mut i = 0;
    while i < out.len() {
        let p = src.wrapping_add(i);
        let w = step(p as usize, out.len() - i);
        // SAFETY: `i + w <= out.len()`, so `[p, p + w)` is inside the source the caller vouched
        // for; `step` picked `w` so that `p` is aligned to it.
        unsafe {
            match w {
                8 => out[i..i + 8].copy_from_slice(&load_u64(p.cast()).to_ne_bytes()),
                4 => out[i..i + 4].copy_from_slice(&load_u32(p.cast()).to_ne_bytes()),
                _ => out[i] = load_u8(p),
            }
        }
        i += w;
    }
}

/// Copy `data` to `dst` with relaxed atomic stores, split by the module's rule.
///
/// # Safety
/// As for [`load_bytes`], with `dst` valid for writes of `data.len()` bytes.
#[inline]
pub unsafe fn store_bytes(dst: *mut u8, data: &[u8]) {
    let mut i = 0;
    while i < data.len() {
        let p = dst.wrapping_add(i);
        let w = step(p as usize, data.len() - i);
        // SAFETY: as in `load_bytes`: in range, aligned to `w`.
        unsafe {
            match w {
                8 => store_u64(p.cast(), u64::from_ne_bytes(data[i..i + 8].try_into().unwrap())),
                4 => store_u32(p.cast(), u32::from_ne_bytes(data[i..i + 4].try_into().unwrap())),
                _ => store_u8(p, data[i]),
            }
        }
        i += w;
    }
}

/// Store `byte` into each of the `len` bytes at `dst` with relaxed atomic stores, split by the
/// module's rule.
///
/// # Safety
/// As for [`store_bytes`], for `len` bytes.
#[inline]
pub unsafe fn fill_bytes(dst: *mut u8, len: usize, byte: u8) {
    let mut i = 0;
    while i < len {
        let p = dst.wrapping_add(i);
        let w = step(p as usize, len - i);
        // SAFETY: as in `load_bytes`: in range, aligned to `w`.
        unsafe {
            match w {
                8 => store_u64(p.cast(), u64::from_ne_bytes([byte; 8])),
                4 => store_u32(p.cast(), u32::from_ne_bytes([byte; 4])),
                _ => store_u8(p, byte),
            }
        }
        i += w;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(align(8))]
    struct Words([u8; 32]);

    #[test]
    fn splits_by_alignment_and_length() {
        assert_eq!((step(0, 8), step(0, 7), step(4, 8), step(4, 3), step(3, 100)), (8, 4, 4, 1, 1));
        let mut w = Words([0; 32]);
        let base = w.0.as_mut_ptr();
        let data: [u8; 29] = core::array::from_fn(|i| i as u8 + 1);
        // SAFETY: `w` is ours and no reference to it is used until the copies are done.
        unsafe { store_bytes(base.add(1), &data) };
        let mut out = [0u8; 29];
        // SAFETY: as above.
        unsafe { load_bytes(base.add(1), &mut out) };
        assert_eq!(out, data);
        assert_eq!((w.0[0], w.0[1], w.0[29], w.0[30]), (0, 1, 29, 0));
        // A second buffer for the fill: its split differs from the copies' above, and Miri's
        // weak-memory emulation cannot mix access sizes on one byte even when they are ordered.
        let mut f = Words([0; 32]);
        // SAFETY: as above, for `f`.
        unsafe { fill_bytes(f.0.as_mut_ptr().add(3), 20, 0xa5) };
        let f = f.0;
        assert_eq!((f[2], f[3], f[22], f[23]), (0, 0xa5, 0xa5, 0));
    }
}
