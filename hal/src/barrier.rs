//! Memory barriers with the meaning rdma-core gives them (`util/udma_barrier.h`).
//!
//! Each function orders CPU accesses against a device that reads and writes host memory (DMA)
//! and receives MMIO stores. They are also Rust memory-model fences, so they order accesses
//! against the in-memory device model running on another thread: [`to_device`] is a `Release`
//! fence and [`from_device`] an `Acquire` fence. With the relaxed atomic accesses of
//! [`crate::access`] these pair with the model's fences (`mem::HeapDma::read` ends with an
//! `Acquire` fence, `write` starts with a `Release` fence):
//!
//! * driver: WQE stores, [`to_device`], doorbell-record store — model: doorbell-record load,
//!   acquire, WQE loads. The model's load seeing the record makes the WQE stores happen before
//!   the WQE loads.
//! * model: CQE body stores, release, owner-word store — driver: owner-word load,
//!   [`from_device`], body loads. The driver's load seeing the new owner makes the body stores
//!   happen before the body loads.

use core::sync::atomic::{fence, Ordering};

/// `udma_to_device_barrier`: stores to DMA memory before this point (WQEs) become visible to
/// the device before any store after it (the doorbell record, a doorbell).
///
/// x86_64: stores to write-back memory are not reordered with later stores, so only the
/// compiler must be stopped. aarch64: `dmb oshst`. Rust: a `Release` fence (no instruction on
/// x86_64), so that a later relaxed store read by the model carries the earlier stores.
#[inline(always)]
pub fn to_device() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; touches no memory.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags))
    };
    // Orders every earlier access before every later store, for the Rust memory model (the
    // model's thread); the instruction above (none on x86_64) does it for a real device.
    fence(Ordering::Release);
}

/// `udma_from_device_barrier`: loads after this point (the body of a CQE) are not satisfied
/// before loads before it (the CQE's ownership byte).
///
/// x86_64: `lfence`. aarch64: `dmb oshld`. Rust: an `Acquire` fence, so that an earlier relaxed
/// load that saw the model's release-published store (a CQE's owner word) makes the model's
/// earlier stores (the body) visible to the loads after this point.
#[inline(always)]
pub fn from_device() {
    // Orders the earlier ownership load before every later load, for the Rust memory model
    // (the model's thread); the instructions below do it for a real device.
    fence(Ordering::Acquire);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a barrier instruction; touches no memory.
    unsafe {
        core::arch::asm!("lfence", options(nostack, preserves_flags))
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; touches no memory.
    unsafe {
        core::arch::asm!("dmb oshld", options(nostack, preserves_flags))
    };
}

/// `mmio_flush_writes`: write-combining stores (BlueFlame, doorbells) before this point leave the
/// CPU's WC buffers now, before anything after it.
///
/// x86_64: `sfence`. aarch64: `dsb st`.
#[inline(always)]
pub fn wc_flush() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a barrier instruction; touches no memory.
    unsafe {
        core::arch::asm!("sfence", options(nostack, preserves_flags))
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; touches no memory.
    unsafe {
        core::arch::asm!("dsb st", options(nostack, preserves_flags))
    };
    // Orders the stores for the Rust memory model too (no instruction on x86_64: the `sfence`
    // above already drains the write-combining buffers; an `mfence` here would only add a
    // full pipeline drain to every BlueFlame post).
    fence(Ordering::Release);
}

/// `mmio_wc_start`: the stores before this point (the doorbell record in write-back memory)
/// reach the device before the write-combining stores after it (BlueFlame, the doorbell), so
/// the device never sees a doorbell ahead of the record it announces. rdma-core defines it as
/// `mmio_flush_writes` on every architecture; so does this.
#[inline(always)]
pub fn wc_start() {
    wc_flush();
}
