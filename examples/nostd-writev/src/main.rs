//! Freestanding `no_std` link check for the mlx5 WQE builder and data path.
//!
//! Built by `cargo xtask nostd` with `--cfg nostd_check`, `-C panic=abort` and the linker flags
//! `-nostartfiles -nostdlib -static`: no std, no libc, no start files, no allocator. `_start`
//! (below) calls [`check`], which builds the WQEs of a small writev batch (a three-SGE gather
//! write, an inline write and a write with immediate) into a static, 64-byte aligned send ring
//! through [`RawRing`] volatile stores, reads a few bytes back, and exits through the raw
//! `exit_group` system call with status 0 on success or the number of the first failed check.
//! [`datapath::check`] then drives the mlx5 data path itself (device context, regions, QP,
//! doorbells, CQ polling) through the bare-metal HAL over static memory, and [`cm::check`]
//! connects and disconnects two connection managers over an in-memory wire.
//!
//! Without the cfg it is an ordinary hosted binary running the same checks, so workspace builds,
//! tests and lints need no special flags.
#![cfg_attr(nostd_check, no_std, no_main)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod cm;
mod datapath;

use core::ptr::{addr_of_mut, NonNull};

use rdma_pmd::SendRequest;
use rdma_pmd::{Lkey, LocalBuf, QpNum, RegionUse, RemoteBuf, Rkey, SendFlags, Sge, Source};
use rdma_pmd_mlx5::datapath::wqe::{RawRing, WqeBuilder, WqeInfo};
use rdma_pmd_mlx5::layout::wqe::{bf_len, sq_dbrec};

/// Slots of the static send ring.
const SLOTS: u32 = 8;

#[repr(C, align(64))]
struct SendRing([u8; SLOTS as usize * 64]);

/// The send ring: only ever reached through raw pointers.
static mut RING: SendRing = SendRing([0; SLOTS as usize * 64]);

fn ring_byte(slot: u32, off: usize) -> u8 {
    let base = addr_of_mut!(RING).cast::<u8>();
    let at = (slot & (SLOTS - 1)) as usize * 64 + off;
    // SAFETY: `at < SLOTS * 64`, inside RING; read with a raw pointer, no reference is formed.
    unsafe { base.add(at).read_volatile() }
}

fn ring_bytes<const N: usize>(slot: u32, off: usize) -> [u8; N] {
    let mut out = [0u8; N];
    for (i, b) in out.iter_mut().enumerate() {
        // Offsets past 64 continue in the next slot, as a WQE does.
        let o = off + i;
        *b = ring_byte(slot + (o / 64) as u32, o % 64);
    }
    out
}

/// The checks in turn: the WQE builder alone, the mlx5 data path through the bare-metal HAL,
/// the connection manager.
pub fn check() -> i32 {
    match check_builder() {
        0 => match datapath::check() {
            0 => cm::check(),
            n => n,
        },
        code => code,
    }
}

/// Build the batch and check it; 0 on success, else the number of the failed check.
fn check_builder() -> i32 {
    let Some(base) = NonNull::new(addr_of_mut!(RING).cast::<u8>()) else { return 1 };
    // SAFETY: RING is 64-byte aligned, SLOTS * 64 bytes, lives for the whole program, and is
    // only read through raw pointers (`ring_byte`) while `ring` exists.
    let Ok(mut ring) = (unsafe { RawRing::new(base, SLOTS) }) else { return 2 };
    let builder = WqeBuilder::new(QpNum(0x123)).max_sge(4).max_inline(64);
    let remote = RemoteBuf::new(0x7f00_1122_3344, Rkey(0xa1b2_c3d4));

    // 1. A three-SGE gather write from a "registered" buffer, with a zero-length element that
    //    the provider (and the builder) skips. Starts at slot 7 so that it wraps to slot 0.
    let region = RegionUse::new();
    let payload = [0x5au8; 256];
    // SAFETY: `payload` outlives `buf`; the "device" never reads it (nothing is rung).
    let buf = unsafe {
        LocalBuf::from_raw_parts(
            &region,
            NonNull::from(&payload).cast(),
            0x7fab_0000_1000,
            256,
            Lkey(0x0102_0304),
        )
    };
    let (Ok(a), Ok(z), Ok(c), Ok(d)) =
        (buf.slice(0, 64), buf.slice(64, 0), buf.slice(64, 128), buf.slice(192, 64))
    else {
        return 3;
    };
    let sgl = [a, z, c, d];
    let req = SendRequest::write(1, Source::sgl(&sgl), SendFlags::empty(), remote, None);
    let mut pi: u16 = 0xfff7;
    let Ok(w1) = builder.write(&mut ring, pi, SLOTS, &req) else { return 4 };
    if (w1.shape.ds, w1.shape.wqebbs) != (5, 2) || w1.slot(1, SLOTS) != 0 {
        return 5;
    }
    // ctrl: opmod 0, counter 0xfff7, opcode 0x08; qpn 0x000123, ds 5.
    if ring_bytes::<8>(7, 0) != [0x00, 0xff, 0xf7, 0x08, 0x00, 0x01, 0x23, 0x05] {
        return 6;
    }
    // Third data segment (bytes 64..80 of the WQE) is in slot 0: 64 bytes at 0x7fab_0000_10c0.
    let want: [u8; 16] = [0, 0, 0, 0x40, 1, 2, 3, 4, 0, 0, 0x7f, 0xab, 0, 0, 0x10, 0xc0];
    if ring_bytes::<16>(0, 0) != want {
        return 7;
    }
    pi = w1.next_pi();

    // 2. An inline write of two pieces, signaled.
    let pieces: [&[u8]; 2] = [b"no_std ", b"writev"];
    let flags = SendFlags::SIGNALED | SendFlags::INLINE;
    let req = SendRequest::write(2, Source::inline(&pieces), flags, remote, None);
    let Ok(w2) = builder.write(&mut ring, pi, SLOTS - 2, &req) else { return 8 };
    let slot = w2.slot(0, SLOTS);
    if ring_bytes::<4>(slot, 32) != [0x80, 0, 0, 13]
        || &ring_bytes::<13>(slot, 36) != b"no_std writev"
    {
        return 9;
    }
    if w2.fm_ce_se.bits() != 0x08 || ring_byte(slot, 11) != 0x08 {
        return 10;
    }
    pi = w2.next_pi();

    // 3. A write with immediate from raw elements, fenced and solicited.
    let raw = [Sge::new(0x7fab_0000_2000, 4096, Lkey(9))];
    let Ok(w3) = builder.write_sges(
        &mut ring,
        pi,
        SLOTS - 3,
        &raw,
        SendFlags::FENCE | SendFlags::SOLICITED,
        remote,
        Some(0xdead_beef),
    ) else {
        return 11;
    };
    let slot = w3.slot(0, SLOTS);
    if ring_bytes::<8>(slot, 8) != [0, 0, 0, 0x82, 0xde, 0xad, 0xbe, 0xef]
        || ring_byte(slot, 3) != 0x09
    {
        return 12;
    }

    // Refusals leave the ring alone: a fifth SGE is one too many.
    let five = [Sge::new(1, 1, Lkey(1)); 5];
    if builder
        .write_sges(&mut ring, w3.next_pi(), 4, &five, SendFlags::empty(), remote, None)
        .is_ok()
    {
        return 13;
    }

    // Doorbell values for the batch: counter after the last WQE, no BlueFlame for 3 WQEs.
    let last: WqeInfo = w3;
    if sq_dbrec(last.next_pi()) != [0, 0, 0xff, 0xfb] || bf_len(3, last.shape.ds, 256) != 0 {
        return 14;
    }
    if last.doorbell != ring_bytes::<8>(slot, 0) {
        return 15;
    }
    0
}

#[cfg(not(nostd_check))]
fn main() {
    let code = check();
    println!("nostd-writev (hosted): {}", if code == 0 { "ok" } else { "FAILED" });
    std::process::exit(code);
}

#[cfg(nostd_check)]
mod freestanding {
    use core::arch::{asm, global_asm};
    use core::panic::PanicInfo;

    // The kernel enters `_start` with a 16-byte aligned stack and no return address; align it
    // explicitly, as the SysV ABI expects before a call, and never return.
    global_asm!(
        ".globl _start",
        "_start:",
        "xor ebp, ebp",
        "and rsp, -16",
        "call {entry}",
        "ud2",
        entry = sym entry,
    );

    extern "C" fn entry() -> ! {
        exit(super::check())
    }

    fn exit(code: i32) -> ! {
        // SAFETY: exit_group(2) takes one integer argument and does not return.
        unsafe {
            asm!("syscall", in("rax") 231, in("rdi") code as isize, options(noreturn, nostack));
        }
    }

    #[panic_handler]
    fn panic(_: &PanicInfo) -> ! {
        exit(101)
    }

    /// The prebuilt `core` was compiled for unwinding, so its unwind tables name the
    /// personality routine. With `panic = "abort"` nothing unwinds and it is never called; the
    /// symbol only has to exist.
    #[no_mangle]
    extern "C" fn rust_eh_personality() {}

    // Without libc, the memory intrinsics the compiler emits calls to must be defined here.
    // Volatile byte accesses keep the optimiser from turning these loops back into calls to
    // themselves.

    /// `memcpy(3)`.
    ///
    /// # Safety
    /// `src` readable and `dst` writable for `n` bytes, not overlapping.
    #[no_mangle]
    pub unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
        for i in 0..n {
            // SAFETY: in bounds by the caller's contract.
            unsafe { dst.add(i).write_volatile(src.add(i).read_volatile()) };
        }
        dst
    }

    /// `memmove(3)`.
    ///
    /// # Safety
    /// `src` readable and `dst` writable for `n` bytes.
    #[no_mangle]
    pub unsafe extern "C" fn memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
        if (dst as usize) < (src as usize) {
            for i in 0..n {
                // SAFETY: in bounds by the caller's contract; forward copy is safe here.
                unsafe { dst.add(i).write_volatile(src.add(i).read_volatile()) };
            }
        } else {
            for i in (0..n).rev() {
                // SAFETY: in bounds by the caller's contract; backward copy is safe here.
                unsafe { dst.add(i).write_volatile(src.add(i).read_volatile()) };
            }
        }
        dst
    }

    /// `memset(3)`.
    ///
    /// # Safety
    /// `dst` writable for `n` bytes.
    #[no_mangle]
    pub unsafe extern "C" fn memset(dst: *mut u8, c: i32, n: usize) -> *mut u8 {
        for i in 0..n {
            // SAFETY: in bounds by the caller's contract.
            unsafe { dst.add(i).write_volatile(c as u8) };
        }
        dst
    }

    /// `memcmp(3)`.
    ///
    /// # Safety
    /// `a` and `b` readable for `n` bytes.
    #[no_mangle]
    pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
        for i in 0..n {
            // SAFETY: in bounds by the caller's contract.
            let (x, y) = unsafe { (a.add(i).read_volatile(), b.add(i).read_volatile()) };
            if x != y {
                return x as i32 - y as i32;
            }
        }
        0
    }

    /// `bcmp(3)`.
    ///
    /// # Safety
    /// As [`memcmp`].
    #[no_mangle]
    pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
        // SAFETY: forwarded contract.
        unsafe { memcmp(a, b, n) }
    }
}
