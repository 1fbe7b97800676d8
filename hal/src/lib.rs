//! # rdma-pmd-hal: what a poll-mode driver needs from the platform
//!
//! The mlx5 backend reaches hardware only through these contracts, so the same driver runs over
//! VFIO on Linux, identity-mapped on bare metal, and against an in-memory device model in tests:
//!
//! | trait | what it gives | implementations |
//! |---|---|---|
//! | [`Mmio`] | explicit-width volatile access to a PCI BAR, one 64-bit doorbell store, a 64-byte write-combining copy | [`RawWindow`] (the volatile accesses, shared by [`baremetal::IdentityBar`] and VFIO), [`mem::MemBar`] (std) |
//! | [`Dma`] | zeroed, aligned, device-visible memory with its CPU pointer and bus address; [`DmaRing`], a ring of fixed-size entries in it whose bounds are checked once | [`mem::HeapDma`] (std), [`baremetal::StaticDma`], VFIO |
//! | [`Clock`] | a monotonic time source so that every wait has a bound | [`StdClock`] (std), [`baremetal::TscClock`] |
//! | [`barrier`] | the orderings rdma-core names `udma_to_device_barrier`, `udma_from_device_barrier`, `mmio_flush_writes` | x86_64, aarch64 |
//! | [`mem::BusMemory`] | memory as a device model reaches it, by bus address, one DMA transaction per call | [`mem::HeapDma`] (std), `guest_ram::GuestRam` (feature `guest-ram`: a VMM's guest RAM mapped from its DMA_MAP fds) |
//! | [`access`] | the loads and stores of DMA memory: relaxed atomics of one width, and byte copies split the same way on both sides | used by [`DmaBuf`], the drivers' rings, [`mem`] |
//!
//! The traits are `unsafe` to implement: the driver trusts what they report (that a bus address
//! reaches the CPU memory it is paired with, that a store is one store). Calling them is safe;
//! their methods never hand out Rust references into memory the device can touch.
//!
//! Memory the device shares with the CPU is read and written only through [`access`]: relaxed
//! atomic accesses, which are single instructions like volatile ones, but which also keep the
//! in-memory device model (another Rust thread) free of data races. Ordering is [`barrier`]'s,
//! whose functions are Release/Acquire fences as well as the hardware barriers; [`access`]
//! explains how the two sides' fences pair up.
#![cfg_attr(not(any(feature = "std", test)), no_std)]
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub use rdma_pmd::access;
pub mod baremetal;
pub mod barrier;
mod clock;
mod dma;
mod dma_ring;
mod error;
mod mmio;

#[cfg(all(feature = "guest-ram", target_os = "linux"))]
pub mod guest_ram;
#[cfg(feature = "std")]
pub mod mem;
#[cfg(feature = "vfio")]
pub mod vfio;

#[cfg(feature = "std")]
pub use clock::StdClock;
pub use clock::{Clock, Deadline};
pub use dma::{Dma, DmaBuf};
pub use dma_ring::DmaRing;
pub use error::HalError;
pub use mmio::{Mmio, RawWindow};
pub use rdma_pmd::BusAddr;
