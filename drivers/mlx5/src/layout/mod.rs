//! Every byte layout the driver shares with the HCA, and nothing else: send WQE segments, the
//! CQE, doorbell records, opcodes and syndromes, and the `#[repr(C)]`
//! mirrors of rdma-core's `mlx5dv.h` that pin the tables, and the command layouts generated
//! from the kernel's `mlx5_ifc.h` ([`ifc`]).
//!
//! Each layout is stated once: a table of field byte ranges, and a typed view over any byte
//! buffer whose getters and setters go through [`be`]. The code that writes a layout (the WQE
//! builder, the receive ring) and the code that reads it (completion polling, tests, the
//! conformance vectors, the BlueFlame copy) use the same view; the builder's per-post forms
//! ([`wqe::DataSeg::encode`], [`wqe::CtrlSeg::encode`], …) are the setters applied to a local
//! array, which the compiler turns into the same byte swaps and stores a hand-written shift
//! would be.
//!
//! | module | what |
//! |---|---|
//! | [`wqe`] | control, remote-address, data and inline segments of a send WQE; receive WQE entries; the work queues' doorbell record and BlueFlame rule |
//! | [`cqe`] | the 64-byte CQE (success and error views), ownership test, the consumer-index record |
//! | [`codes`] | send and CQE opcodes, CQE syndromes (→ [`rdma_pmd::WcStatus`]), `fm_ce_se` bits, sizes |
//! | [`abi`] | `#[repr(C)]` mirrors of the mlx5dv.h structs, for the tests that pin the tables |
//! | [`cmd`] | the command queue entry and the mailbox block of the command interface |
//! | [`uar`] | the UAR page: the BlueFlame register's offset and halves, which registers must lie in the BAR |
//! | [`ifc`] | command and context layouts, generated from `mlx5_ifc.h` by `cargo xtask ifc` |

pub mod abi;
#[cfg(test)]
mod c_header;
pub mod cmd;
pub mod codes;
pub mod cqe;
pub mod ifc;
pub mod uar;
pub mod wqe;

/// Big-endian fields at byte offsets of a buffer: every multi-byte field the HCA reads or
/// writes is big-endian, and this is the crate's one set of accessors for them. Out-of-range
/// offsets panic (a view's `check_len` rules them out first).
pub mod be {
    /// The big-endian `u16` at `at`.
    #[inline(always)]
    pub fn get16(b: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([b[at], b[at + 1]])
    }

    /// The big-endian `u32` at `at`.
    #[inline(always)]
    pub fn get32(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }

    /// The big-endian `u64` at `at`.
    #[inline(always)]
    pub fn get64(b: &[u8], at: usize) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[at..at + 8]);
        u64::from_be_bytes(w)
    }

    /// Store `v` big-endian at `at`.
    #[inline(always)]
    pub fn set16(b: &mut [u8], at: usize, v: u16) {
        b[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }

    /// Store `v` big-endian at `at`.
    #[inline(always)]
    pub fn set32(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }

    /// Store `v` big-endian at `at`.
    #[inline(always)]
    pub fn set64(b: &mut [u8], at: usize, v: u64) {
        b[at..at + 8].copy_from_slice(&v.to_be_bytes());
    }
}

/// A typed view over any byte buffer of at least `$len` bytes: the struct, and
/// `new_unchecked`, `new_checked`, `check_len`, `into_inner`, `as_bytes` (and `as_bytes_mut`
/// where the buffer is writable). The one copy of the view scaffolding; each layout adds its
/// own getters and setters.
macro_rules! view {
    ($(#[$meta:meta])* $name:ident, $len:expr, $what:literal) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wrap a buffer without checking its length (accessors panic if it is short).
            #[inline(always)]
            pub const fn new_unchecked(buffer: T) -> Self {
                $name { buffer }
            }

            /// Wrap a buffer long enough for the layout.
            pub fn new_checked(buffer: T) -> rdma_pmd::Result<Self> {
                let s = Self::new_unchecked(buffer);
                s.check_len()?;
                Ok(s)
            }

            /// Whether the buffer holds the whole layout.
            pub fn check_len(&self) -> rdma_pmd::Result<()> {
                if self.buffer.as_ref().len() < $len {
                    return Err(rdma_pmd::Error::InvalidArgument(concat!(
                        "buffer shorter than ",
                        $what
                    )));
                }
                Ok(())
            }

            /// The wrapped buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// The bytes.
            #[inline(always)]
            pub fn as_bytes(&self) -> &[u8] {
                self.buffer.as_ref()
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            /// The bytes, for writing.
            #[inline(always)]
            pub fn as_bytes_mut(&mut self) -> &mut [u8] {
                self.buffer.as_mut()
            }
        }
    };
}
pub(crate) use view;
