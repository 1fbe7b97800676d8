//! The command queue: entries, mailboxes, and moving a command's bytes in and out.
//!
//! Layouts (kernel `include/linux/mlx5/device.h`; big-endian):
//!
//! `struct mlx5_cmd_layout`, one 64-byte entry per slot (slot *i* at queue address
//! `+ i << log_cmdq_stride`):
//!
//! | offset | field | |
//! |---|---|---|
//! | 0 | `type` | 7 = PCIe command interface |
//! | 4 | `inlen` | input length in bytes |
//! | 8 | `in_ptr` | first input mailbox (when `inlen > 16`) |
//! | 16 | `in[4]` | the first 16 input bytes |
//! | 32 | `out[4]` | the first 16 output bytes |
//! | 48 | `out_ptr` | first output mailbox (when `outlen > 16`) |
//! | 56 | `outlen` | output length in bytes |
//! | 60 | `token` | must match every mailbox's `token` |
//! | 61 | `sig` | signature (not checked: the model reports `cmdif_checksum` 0) |
//! | 63 | `status_own` | bit 0: owner (1 = hardware); bits 7:1: delivery status |
//!
//! `struct mlx5_cmd_prot_block`, a 576-byte mailbox: 512 data bytes, 48 reserved, `next` (BE64)
//! at 560, `block_num` (BE32) at 568, `token` at 573, `ctrl_sig` at 574, `sig` at 575. Input
//! bytes 16.. fill the input chain's data in order, block *k* holding bytes
//! `16 + 512k .. 16 + 512(k+1)`; the output chain likewise. Mailbox pointers must be 512-byte
//! aligned (the PRM reserves the low bits; the kernel allocates them 1 KiB aligned).
//!
//! The sequence is the kernel's `cmd.c` seen from the other side: the driver fills the entry
//! and mailboxes, sets the owner bit, and writes `1 << slot` to `cmd_dbell`; the firmware
//! reads the entry, checks it, gathers the input, executes, scatters the output, writes the
//! delivery status and, last, after a release fence, clears the owner bit.

use std::sync::atomic::{fence, Ordering};

use rdma_pmd::BusAddr;
use rdma_pmd_hal::mem::BusMemory;

use super::codes::{DeliveryStatus, PCI_CMD_XPORT};

/// Layout of one command entry.
pub mod entry {
    /// Bytes of an entry.
    pub const SIZE: usize = 64;
    /// `type` (byte).
    pub const TYPE: usize = 0;
    /// `inlen` (BE32).
    pub const INLEN: usize = 4;
    /// `in_ptr` (BE64).
    pub const IN_PTR: usize = 8;
    /// `in[4]`: first 16 input bytes.
    pub const IN: usize = 16;
    /// `out[4]`: first 16 output bytes.
    pub const OUT: usize = 32;
    /// `out_ptr` (BE64).
    pub const OUT_PTR: usize = 48;
    /// `outlen` (BE32).
    pub const OUTLEN: usize = 56;
    /// `token` (byte).
    pub const TOKEN: usize = 60;
    /// `sig` (byte).
    pub const SIG: usize = 61;
    /// `status_own` (byte).
    pub const STATUS_OWN: usize = 63;
    /// Bytes of input or output carried inline.
    pub const INLINE: usize = 16;
    /// Owner bit of `status_own`: set while the hardware owns the entry (`CMD_OWNER_HW`).
    pub const OWNER_HW: u8 = 1;
}

/// Layout of one mailbox.
pub mod mailbox {
    /// Bytes of a mailbox.
    pub const SIZE: usize = 576;
    /// Data bytes per mailbox (`MLX5_CMD_DATA_BLOCK_SIZE`).
    pub const DATA: usize = 512;
    /// `next` (BE64).
    pub const NEXT: usize = 560;
    /// `block_num` (BE32).
    pub const BLOCK_NUM: usize = 568;
    /// `token` (byte).
    pub const TOKEN: usize = 573;
    /// `ctrl_sig` (byte).
    pub const CTRL_SIG: usize = 574;
    /// `sig` (byte).
    pub const SIG: usize = 575;
    /// Alignment the model requires of a mailbox address.
    pub const ALIGN: u64 = 512;
}

/// The largest input or output the model accepts (bytes); more is a length error.
pub const MAX_LEN: usize = 1 << 20;

/// One command entry, copied out of the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry(pub [u8; entry::SIZE]);

fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

fn be64(b: &[u8], off: usize) -> u64 {
    u64::from_be_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

impl Entry {
    /// `type`.
    pub fn kind(&self) -> u8 {
        self.0[entry::TYPE]
    }
    /// `inlen`.
    pub fn inlen(&self) -> usize {
        be32(&self.0, entry::INLEN) as usize
    }
    /// `in_ptr`.
    pub fn in_ptr(&self) -> u64 {
        be64(&self.0, entry::IN_PTR)
    }
    /// `outlen`.
    pub fn outlen(&self) -> usize {
        be32(&self.0, entry::OUTLEN) as usize
    }
    /// `out_ptr`.
    pub fn out_ptr(&self) -> u64 {
        be64(&self.0, entry::OUT_PTR)
    }
    /// `token`.
    pub fn token(&self) -> u8 {
        self.0[entry::TOKEN]
    }
    /// Whether the owner bit says the hardware owns the entry.
    pub fn hw_owned(&self) -> bool {
        self.0[entry::STATUS_OWN] & entry::OWNER_HW != 0
    }
}

/// Number of mailboxes a message of `len` bytes needs beyond the 16 inline bytes.
pub fn blocks_for(len: usize) -> usize {
    len.saturating_sub(entry::INLINE).div_ceil(mailbox::DATA)
}

/// Walk a mailbox chain of `n` blocks from `first`, checking each block's alignment,
/// reachability, block number and token; returns the block addresses.
fn walk(
    dma: &dyn BusMemory,
    first: u64,
    n: usize,
    token: u8,
    ptr_err: DeliveryStatus,
) -> Result<Vec<u64>, DeliveryStatus> {
    let mut addrs = Vec::with_capacity(n);
    let mut at = first;
    let mut tail = [0u8; mailbox::SIZE - mailbox::NEXT];
    for k in 0..n {
        if at == 0 || at % mailbox::ALIGN != 0 || !dma.mapped(BusAddr(at), mailbox::SIZE) {
            return Err(ptr_err);
        }
        if !dma.read(BusAddr(at + mailbox::NEXT as u64), &mut tail) {
            return Err(ptr_err);
        }
        let block_num = be32(&tail, mailbox::BLOCK_NUM - mailbox::NEXT);
        if block_num as usize != k {
            return Err(DeliveryStatus::BadBlockNumber);
        }
        if tail[mailbox::TOKEN - mailbox::NEXT] != token {
            return Err(DeliveryStatus::TokenErr);
        }
        addrs.push(at);
        at = be64(&tail, 0);
    }
    Ok(addrs)
}

/// A command ready to execute: its input bytes and where its output goes.
#[derive(Debug)]
pub struct Delivered {
    /// The whole input (`inlen` bytes).
    pub input: Vec<u8>,
    /// `outlen`.
    pub outlen: usize,
    /// Output mailbox addresses, in order.
    pub out_blocks: Vec<u64>,
}

/// Check an entry and gather its input; on failure, the delivery status to report.
pub fn deliver(dma: &dyn BusMemory, e: &Entry) -> Result<Delivered, DeliveryStatus> {
    if e.kind() != PCI_CMD_XPORT {
        return Err(DeliveryStatus::CmdDescrErr);
    }
    let (inlen, outlen) = (e.inlen(), e.outlen());
    // Every input carries at least the opcode/op_mod header, every output the status and
    // syndrome.
    if !(8..=MAX_LEN).contains(&inlen) {
        return Err(DeliveryStatus::InLengthErr);
    }
    if !(8..=MAX_LEN).contains(&outlen) {
        return Err(DeliveryStatus::OutLengthErr);
    }
    let in_blocks =
        walk(dma, e.in_ptr(), blocks_for(inlen), e.token(), DeliveryStatus::InPtrAlignErr)?;
    let out_blocks =
        walk(dma, e.out_ptr(), blocks_for(outlen), e.token(), DeliveryStatus::OutPtrAlignErr)?;
    let mut input = vec![0u8; inlen];
    let inline = inlen.min(entry::INLINE);
    input[..inline].copy_from_slice(&e.0[entry::IN..entry::IN + inline]);
    for (k, at) in in_blocks.iter().enumerate() {
        let start = entry::INLINE + k * mailbox::DATA;
        let end = (start + mailbox::DATA).min(inlen);
        if !dma.read(BusAddr(*at), &mut input[start..end]) {
            return Err(DeliveryStatus::InPtrAlignErr);
        }
    }
    Ok(Delivered { input, outlen, out_blocks })
}

/// Write `output` (exactly `outlen` bytes) back: mailboxes first, then the inline part.
/// The entry's status byte is written separately by [`complete`].
pub fn scatter(dma: &dyn BusMemory, slot: BusAddr, out_blocks: &[u64], output: &[u8]) -> bool {
    let mut ok = true;
    for (k, at) in out_blocks.iter().enumerate() {
        let start = entry::INLINE + k * mailbox::DATA;
        let end = (start + mailbox::DATA).min(output.len());
        ok &= dma.write(BusAddr(*at), &output[start..end]);
    }
    let inline = output.len().min(entry::INLINE);
    ok &= dma.write(slot.add(entry::OUT as u64), &output[..inline]);
    ok
}

/// Hand the entry back: write the delivery status with the owner bit clear, after a release
/// fence that orders every output byte written before it.
pub fn complete(dma: &dyn BusMemory, slot: BusAddr, status: DeliveryStatus) -> bool {
    // Orders the output (mailboxes, inline out) before the ownership change the driver polls.
    fence(Ordering::Release);
    dma.write(slot.add(entry::STATUS_OWN as u64), &[u8::from(status) << 1])
}

/// Read the entry of slot `slot` of a queue at `base` with stride `1 << log_stride`.
pub fn read_entry(
    dma: &dyn BusMemory,
    base: u64,
    log_stride: u8,
    slot: u32,
) -> Option<(BusAddr, Entry)> {
    let at = BusAddr(base + (u64::from(slot) << log_stride));
    let mut raw = [0u8; entry::SIZE];
    if !dma.read(at, &mut raw) {
        return None;
    }
    // Orders the entry's body after the ownership byte we are about to trust.
    fence(Ordering::Acquire);
    Some((at, Entry(raw)))
}
