//! # The mlx5 device model on a PCI bus, over vfio-user
//!
//! A vfio-user server (QEMU `docs/interop/vfio-user.rst`) that puts the software ConnectX of
//! `rdma-pmd-mlx5-model` behind QEMU's `vfio-user-pci` client, so that a guest kernel's own
//! `mlx5_core`/`mlx5_ib` drive it as a PCI function. The protocol is written here rather than
//! taken from rust-vmm's `vfio-user` crate: that crate's error replies carry errno 0 unless the
//! error is `InvalidInput`, so QEMU can read a failed DMA map as success, and it refuses some
//! messages without reading their bodies; the part this device needs is small (ten commands),
//! and owning it lets every failure reach QEMU with a real errno.
//!
//! | module | holds |
//! |---|---|
//! | [`proto`] | the header, command numbers, payload layouts and errnos |
//! | [`sock`] | framing over the UNIX socket, fds as `SCM_RIGHTS` |
//! | [`config`] | the PCI configuration space of a ConnectX-5 PF with MSI-X |
//! | [`regions`] | region info, BAR0 accesses to the model's BAR, BAR2 (MSI-X table) |
//! | [`msix`] | MSI-X vectors as eventfds: the model's `Interrupts` sink |
//! | [`device`] | the device: what each command does |
//! | [`server`] | the connection loop |
//!
//! Guest memory is `rdma_pmd_hal::guest_ram::GuestRam`: the fds of DMA_MAP mapped shared.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod config;
pub mod device;
pub mod msix;
pub mod proto;
pub mod regions;
pub mod server;
pub mod sock;
