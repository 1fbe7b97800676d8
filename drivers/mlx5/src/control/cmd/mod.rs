//! The command queue: how the driver talks to firmware.
//!
//! Firmware tells the driver the queue's geometry in `cmdq_addr_l_sz` (2^log_size entries of
//! 2^log_stride bytes, at most one 4 KiB page); the driver allocates the page and writes its bus
//! address back (kernel `cmd.c` `mlx5_cmd_init`). A command is posted by filling an entry
//! ([`crate::layout::cmd::Entry`]): the first 16 bytes of the input travel inline, the rest in a chain of
//! 512-byte mailbox blocks ([`crate::layout::cmd::Block`]); the output comes back the same way. The driver
//! sets the ownership bit, rings the doorbell bit of the slot, and polls until firmware clears
//! ownership, within a bound ([`CmdConfig::timeout_ns`]). Then the delivery status (could firmware
//! read it?) and the command status + syndrome (did it execute?) become a [`CmdError`].
//!
//! Two slots are used: [`SLOT_CMD`] for the driver's commands, [`SLOT_PAGES`] for the
//! `MANAGE_PAGES` answers to page requests that firmware may raise while a command on
//! [`SLOT_CMD`] waits for memory (rdma-core's VFIO driver reserves its last slot the same way).
//! All memory comes from the HAL's [`Dma`] when the queue is set up, sized by [`CmdConfig`]; no
//! allocator is needed. Inputs are built in local buffers and copied in with volatile stores;
//! nothing holds a reference into memory the device writes.

pub mod status;

use rdma_pmd_hal::{barrier, Clock, Deadline, Dma, DmaBuf, Mmio};

use crate::control::init_seg::InitSeg;
use crate::layout::be;
use crate::layout::cmd::{
    Block, Entry, BLOCK_CTRL, BLOCK_DATA, BLOCK_SIZE, BLOCK_STRIDE, BLOCK_TOKEN, CMD_TYPE_PCI,
    ENTRY_SIZE, INLINE, OWNER_HW, STATUS_OWN_OFFSET,
};
pub use status::{CmdError, CmdStatus, DeliveryStatus};

/// Slot of the driver's own commands.
pub const SLOT_CMD: usize = 0;
/// Slot of page-request answers posted while [`SLOT_CMD`] is busy.
pub const SLOT_PAGES: usize = 1;
/// Slots used.
pub const SLOTS: usize = 2;

/// How the command queue is sized and bounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmdConfig {
    /// Mailbox blocks per slot for inputs (each carries 512 bytes beyond the inline 16).
    pub in_blocks: usize,
    /// Mailbox blocks per slot for outputs.
    pub out_blocks: usize,
    /// How long a command may take, in nanoseconds (the kernel allows 60 s).
    pub timeout_ns: u64,
}

impl Default for CmdConfig {
    /// 16 blocks each way (8 KiB: `QUERY_HCA_CAP`'s 4112-byte output, 1000 pages or MTT entries
    /// per command) and the kernel's 60 s bound.
    fn default() -> Self {
        CmdConfig { in_blocks: 16, out_blocks: 16, timeout_ns: 60_000_000_000 }
    }
}

/// A list of 64-bit bus addresses that follows a command's fixed part (`pas[]`, `klm_pas_mtt[]`).
#[derive(Clone, Copy, Debug)]
pub enum Pas<'a> {
    /// No list.
    None,
    /// These addresses.
    List(&'a [u64]),
    /// `count` addresses `base`, `base + step`, ... (a bus-contiguous buffer, page by page).
    Linear {
        /// First address.
        base: u64,
        /// Distance between entries.
        step: u64,
        /// Number of entries.
        count: usize,
    },
    /// As [`Pas::Linear`], followed by zero entries up to `total` (an MTT list padded to
    /// whole octwords: the pad entry is 0, as the kernel's zeroed command buffer leaves it,
    /// not the address of a page the key does not cover).
    LinearPadded {
        /// First address.
        base: u64,
        /// Distance between entries.
        step: u64,
        /// Number of address entries.
        count: usize,
        /// Number of entries including the zero pad (`>= count`).
        total: usize,
    },
}

impl Pas<'_> {
    /// Number of entries.
    pub fn len(&self) -> usize {
        match self {
            Pas::None => 0,
            Pas::List(l) => l.len(),
            Pas::Linear { count, .. } => *count,
            Pas::LinearPadded { count, total, .. } => (*total).max(*count),
        }
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub(crate) fn get(&self, i: usize) -> u64 {
        match self {
            Pas::None => unreachable!("empty list"),
            Pas::List(l) => l[i],
            Pas::Linear { base, step, .. } => base + step * i as u64,
            Pas::LinearPadded { base, step, count, .. } => {
                if i < *count {
                    base + step * i as u64
                } else {
                    0
                }
            }
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    opcode: u16,
    op_mod: u16,
    /// The token stamped on the entry and on every mailbox.
    token: u8,
    /// Output mailboxes linked.
    out_blocks: usize,
}

#[derive(Debug)]
struct Slot {
    inbox: DmaBuf,
    outbox: DmaBuf,
    pending: Option<Pending>,
}

/// Number of mailbox blocks a message of `len` bytes needs beyond the inline 16.
pub fn blocks_for(len: usize) -> usize {
    len.saturating_sub(INLINE).div_ceil(BLOCK_DATA)
}

/// The command queue of one HCA.
pub struct CmdQueue<'a> {
    bar: &'a dyn Mmio,
    entries: DmaBuf,
    log_stride: u8,
    slots: [Option<Slot>; SLOTS],
    token: u8,
    cfg: CmdConfig,
}

impl<'a> CmdQueue<'a> {
    /// Allocate the queue and its mailboxes and tell firmware where the queue is.
    ///
    /// Fails with [`CmdError::BadGeometry`] if firmware offers fewer than [`SLOTS`] entries or
    /// entries smaller than 64 bytes or more than a page of them.
    pub fn new(bar: &'a dyn Mmio, dma: &dyn Dma, cfg: CmdConfig) -> Result<Self, CmdError> {
        let seg = InitSeg::new(bar);
        let (log_size, log_stride) = seg.cmdq_geometry();
        let usable = (1usize << log_size) >= SLOTS
            && (1usize << log_stride) >= ENTRY_SIZE
            && (1usize << (log_size + log_stride)) <= 4096;
        if !usable {
            return Err(CmdError::BadGeometry { log_size, log_stride });
        }
        let entries = dma.alloc(4096, 4096)?;
        let mut q = CmdQueue { bar, entries, log_stride, slots: [None, None], token: 0, cfg };
        for i in 0..SLOTS {
            match Self::alloc_slot(dma, &cfg) {
                Ok(s) => q.slots[i] = Some(s),
                Err(e) => {
                    q.release(dma);
                    return Err(e);
                }
            }
        }
        seg.set_cmdq_addr(q.entries.bus().0);
        Ok(q)
    }

    fn alloc_slot(dma: &dyn Dma, cfg: &CmdConfig) -> Result<Slot, CmdError> {
        let inbox = dma.alloc(cfg.in_blocks.max(1) * BLOCK_STRIDE, 4096)?;
        let outbox = match dma.alloc(cfg.out_blocks.max(1) * BLOCK_STRIDE, 4096) {
            Ok(o) => o,
            Err(e) => {
                // SAFETY: the block was never handed to the device.
                unsafe { dma.free(inbox) };
                return Err(e.into());
            }
        };
        Ok(Slot { inbox, outbox, pending: None })
    }

    /// Give the queue's memory back.
    ///
    /// Only once firmware no longer uses the queue: after `DISABLE_HCA` succeeded with no
    /// command left pending, or when the function was never enabled (no command posted, or
    /// `ENABLE_HCA` refused, as the kernel's `mlx5_function_setup` unwinds). Bring-up's
    /// `release_queue` keeps the queue otherwise.
    pub(crate) fn release(self, dma: &dyn Dma) {
        let CmdQueue { entries, slots, .. } = self;
        for s in slots.into_iter().flatten() {
            // SAFETY: the caller guarantees firmware is done with the queue (see above).
            unsafe {
                dma.free(s.inbox);
                dma.free(s.outbox);
            }
        }
        // SAFETY: as above.
        unsafe { dma.free(entries) };
    }

    /// The configuration the queue was built with.
    pub fn config(&self) -> &CmdConfig {
        &self.cfg
    }

    /// Largest input a command may have, in bytes.
    pub fn max_in(&self) -> usize {
        INLINE + self.cfg.in_blocks * BLOCK_DATA
    }

    /// Largest output a command may have, in bytes.
    pub fn max_out(&self) -> usize {
        INLINE + self.cfg.out_blocks * BLOCK_DATA
    }

    fn entry_off(&self, slot: usize) -> usize {
        slot << self.log_stride
    }

    fn slot(&self, slot: usize) -> &Slot {
        self.slots[slot].as_ref().expect("slot allocated in new")
    }

    fn hw_owned(&self, slot: usize) -> bool {
        let mut b = [0u8; 1];
        self.entries.read_bytes(self.entry_off(slot) + STATUS_OWN_OFFSET, &mut b);
        b[0] & OWNER_HW != 0
    }

    /// Write `data` at logical offset `off` of slot `slot`'s input message: bytes below 16 go
    /// to `inline`, the rest to the mailbox chain.
    fn write_in(&self, slot: usize, inline: &mut [u8; INLINE], mut off: usize, mut data: &[u8]) {
        let inbox = &self.slot(slot).inbox;
        while !data.is_empty() {
            if off < INLINE {
                let n = (INLINE - off).min(data.len());
                inline[off..off + n].copy_from_slice(&data[..n]);
                off += n;
                data = &data[n..];
            } else {
                let rel = off - INLINE;
                let (blk, at) = (rel / BLOCK_DATA, rel % BLOCK_DATA);
                let n = (BLOCK_DATA - at).min(data.len());
                inbox.write_bytes(blk * BLOCK_STRIDE + at, &data[..n]);
                off += n;
                data = &data[n..];
            }
        }
    }

    /// Link `n` blocks of `buf` into a chain stamped with `token` (data bytes untouched).
    fn link(buf: &DmaBuf, n: usize, token: u8) {
        for i in 0..n {
            let mut b = Block::new_checked([0u8; BLOCK_SIZE]).expect("full block");
            let next = if i + 1 < n { buf.bus().0 + ((i + 1) * BLOCK_STRIDE) as u64 } else { 0 };
            b.set_next(next);
            b.set_block_num(i as u32);
            b.set_token(token);
            let raw = b.into_inner();
            buf.write_bytes(i * BLOCK_STRIDE + BLOCK_CTRL.start, &raw[BLOCK_CTRL]);
        }
    }

    fn next_token(&mut self) -> u8 {
        // Tokens run 1..=255; 0 is never used, as in the kernel's `alloc_token`.
        self.token = if self.token == 255 { 1 } else { self.token + 1 };
        self.token
    }

    /// Post a command on `slot`: `head` is its fixed part (opcode in bytes 0..2, op_mod in 6..8),
    /// `pas` the address list that follows it, `outlen` the output length firmware may write.
    pub fn post(
        &mut self,
        slot: usize,
        head: &[u8],
        pas: Pas<'_>,
        outlen: usize,
    ) -> Result<(), CmdError> {
        assert!(head.len() >= 8 && slot < SLOTS, "command without header or bad slot");
        let opcode = be::get16(head, 0);
        let op_mod = be::get16(head, 6);
        let inlen = head.len() + 8 * pas.len();
        if inlen > self.max_in() {
            return Err(CmdError::TooLarge { opcode, len: inlen, max: self.max_in() });
        }
        if outlen > self.max_out() || outlen < 16 {
            return Err(CmdError::TooLarge { opcode, len: outlen, max: self.max_out() });
        }
        if self.hw_owned(slot) {
            return Err(CmdError::SlotBusy { slot });
        }
        let token = self.next_token();
        let mut inline = [0u8; INLINE];
        self.write_in(slot, &mut inline, 0, head);
        for i in 0..pas.len() {
            self.write_in(slot, &mut inline, head.len() + 8 * i, &pas.get(i).to_be_bytes());
        }
        let (n_in, n_out) = (blocks_for(inlen), blocks_for(outlen));
        let s = self.slot(slot);
        Self::link(&s.inbox, n_in, token);
        Self::link(&s.outbox, n_out, token);

        let mut e = Entry::new_checked([0u8; ENTRY_SIZE]).expect("full entry");
        e.set_cmd_type(CMD_TYPE_PCI);
        e.set_inlen(inlen as u32);
        e.set_in_ptr(if n_in > 0 { s.inbox.bus().0 } else { 0 });
        e.inline_in_mut().copy_from_slice(&inline);
        e.set_out_ptr(if n_out > 0 { s.outbox.bus().0 } else { 0 });
        e.set_outlen(outlen as u32);
        e.set_token(token);
        e.set_status_own(0, false);
        let off = self.entry_off(slot);
        self.entries.write_bytes(off, &e.into_inner());
        // The entry and mailboxes are complete before ownership passes to firmware.
        barrier::to_device();
        self.entries.write_bytes(off + STATUS_OWN_OFFSET, &[OWNER_HW]);
        // The ownership store is visible before the doorbell makes firmware read the entry.
        barrier::to_device();
        InitSeg::new(self.bar).ring_cmd_doorbell(1 << slot);
        self.slots[slot].as_mut().expect("slot").pending =
            Some(Pending { opcode, op_mod, token, out_blocks: n_out });
        Ok(())
    }

    /// Whether the command on `slot` is done: `None` while firmware owns it, else its outcome.
    pub fn poll(&mut self, slot: usize) -> Option<Result<(), CmdError>> {
        if self.hw_owned(slot) {
            return None;
        }
        // The entry and output mailboxes are read only after ownership came back.
        barrier::from_device();
        let pending = self.slots[slot].as_mut().expect("slot").pending.take()?;
        let mut raw = [0u8; ENTRY_SIZE];
        self.entries.read_bytes(self.entry_off(slot), &mut raw);
        let e = Entry::new_checked(&raw[..]).expect("full entry");
        // Firmware writes the output and the status, never the tokens: another token means the
        // answer is not to this command, or the control fields were overwritten.
        let mismatch = |found: u8| {
            Some(Err(CmdError::TokenMismatch {
                opcode: pending.opcode,
                expected: pending.token,
                found,
            }))
        };
        if e.token() != pending.token {
            return mismatch(e.token());
        }
        let outbox = &self.slot(slot).outbox;
        for i in 0..pending.out_blocks {
            let mut t = [0u8; 1];
            outbox.read_bytes(i * BLOCK_STRIDE + BLOCK_TOKEN, &mut t);
            if t[0] != pending.token {
                return mismatch(t[0]);
            }
        }
        let delivery = DeliveryStatus::from(e.delivery_status());
        if delivery != DeliveryStatus::Ok {
            return Some(Err(CmdError::Delivery { opcode: pending.opcode, status: delivery }));
        }
        let out = e.inline_out();
        let status = CmdStatus::from(out[0]);
        if status != CmdStatus::Ok {
            let syndrome = be::get32(out, 4);
            return Some(Err(CmdError::Failed {
                opcode: pending.opcode,
                op_mod: pending.op_mod,
                status,
                syndrome,
            }));
        }
        Some(Ok(()))
    }

    /// Opcode of the command pending on `slot`, if any.
    pub fn pending_opcode(&self, slot: usize) -> Option<u16> {
        self.slot(slot).pending.map(|p| p.opcode)
    }

    /// Copy `out.len()` bytes of `slot`'s output message from logical offset `off`.
    pub fn read_out(&self, slot: usize, mut off: usize, out: &mut [u8]) {
        let outbox = &self.slot(slot).outbox;
        let entry = self.entry_off(slot);
        let mut done = 0;
        while done < out.len() {
            if off < INLINE {
                let n = (INLINE - off).min(out.len() - done);
                self.entries.read_bytes(entry + 32 + off, &mut out[done..done + n]);
                off += n;
                done += n;
            } else {
                let rel = off - INLINE;
                let (blk, at) = (rel / BLOCK_DATA, rel % BLOCK_DATA);
                let n = (BLOCK_DATA - at).min(out.len() - done);
                outbox.read_bytes(blk * BLOCK_STRIDE + at, &mut out[done..done + n]);
                off += n;
                done += n;
            }
        }
    }

    /// Poll `slot` until it completes or `timeout_ns` passes. On a timeout the health buffer is
    /// consulted: a syndrome there is the better explanation.
    pub fn wait(
        &mut self,
        slot: usize,
        clock: &(impl Clock + ?Sized),
        timeout_ns: u64,
    ) -> Result<(), CmdError> {
        let deadline = Deadline::after(clock, timeout_ns);
        loop {
            if let Some(r) = self.poll(slot) {
                return r;
            }
            if deadline.expired(clock) {
                return Err(self.timeout_error(slot, timeout_ns));
            }
            core::hint::spin_loop();
        }
    }

    /// The error for a command on `slot` that did not complete within `waited_ns`.
    pub fn timeout_error(&self, slot: usize, waited_ns: u64) -> CmdError {
        let opcode = self.pending_opcode(slot).unwrap_or(0);
        match InitSeg::new(self.bar).health() {
            Some(health) => CmdError::Health { opcode, health },
            None => CmdError::Timeout { opcode, waited_ns },
        }
    }

    /// Post on `slot`, wait within the configured bound, copy the output into `out` (whose
    /// length is the output length).
    pub fn exec_on(
        &mut self,
        slot: usize,
        clock: &(impl Clock + ?Sized),
        head: &[u8],
        pas: Pas<'_>,
        out: &mut [u8],
    ) -> Result<(), CmdError> {
        self.post(slot, head, pas, out.len())?;
        self.wait(slot, clock, self.cfg.timeout_ns)?;
        self.read_out(slot, 0, out);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
