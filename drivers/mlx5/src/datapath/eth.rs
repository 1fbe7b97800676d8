//! The Ethernet (raw packet) rings: an SQ of frames and a cyclic RQ of frame buffers, as the
//! kernel's mlx5e drives them (`en_tx.c` `mlx5e_sq_xmit`, `en_rx.c` for the legacy cyclic RQ).
//!
//! **Send.** One 64-byte basic block per frame: a control segment (opcode SEND 0x0a, the
//! WQE counter, the SQ number, `ds`, `CQ_UPDATE`: every frame completes), an Ethernet segment
//! carrying the first `inline` bytes of the frame (its first two in the segment, the rest in
//! the next 16-byte unit), and one data segment for the rest of the frame, which the caller
//! has written to a registered buffer. `inline` is what the SQ's inline mode demands
//! ([`inline_len`]). Then the doorbell: the SQ doorbell record and the 8-byte doorbell store
//! ([`SqDoorbell`], without BlueFlame, since the SQ's UAR page is the driver's only once).
//!
//! **Receive.** `N` receive WQEs of one data segment each (16 bytes, `log_wq_stride` 4)
//! naming `N` frame buffers of [`FRAME_BUF`] bytes; the device fills them in order. A
//! completion names its WQE by `wqe_counter` and the frame's length by `byte_cnt`; the frame is
//! copied out (no reference into DMA memory), and the same WQE is handed back by moving the
//! receive counter (`dbrec[RCV_DBR]`, as `mlx5_wq_cyc_update_db_record`).
//!
//! Nothing here allocates after [`EthTx::alloc`] / [`EthRx::alloc`].

use rdma_pmd::{BusAddr, DeviceFault, Error, Lkey, Result, Sge};
use rdma_pmd_hal::{barrier, Dma, DmaBuf, Mmio};

use crate::control::eth::{InlineMode, Sqn};
use crate::control::Uar;
use crate::datapath::doorbell::{BlueFlame, Last, RingAt, SqDoorbell};
use crate::layout::codes::{CqeOpcode, FmCeSe, SendOpcode, SEND_WQE_BB};
use crate::layout::cqe::Cqe;
use crate::layout::wqe::{
    CtrlSeg, DataSeg, EthSeg, ETH_INLINE_START, ETH_MIN_INLINE, RCV_DBR, SEG_LEN,
};

/// Bytes of one frame buffer (send and receive): room for a 1518-byte frame.
pub const FRAME_BUF: usize = 2048;

/// Bytes of a frame's head the Ethernet segment carries inline for an SQ of inline mode
/// `mode`: none, or the kernel's minimum of 18 (`MLX5E_MIN_INLINE`) for every mode that asks
/// for any. For a frame without an IP header (ARP, the only kind this path sends) the L3 and
/// L4 modes ask for no more than the L2 header (`mlx5e_calc_min_inline`: the network header
/// offset, 14); a frame shorter than that is inlined whole.
pub const fn inline_len(mode: InlineMode, frame_len: usize) -> usize {
    let want = match mode {
        InlineMode::None => 0,
        InlineMode::L2 | InlineMode::Ip | InlineMode::TcpUdp => ETH_MIN_INLINE,
    };
    if frame_len < want {
        frame_len
    } else {
        want
    }
}

/// The send WQE of one frame of `len` bytes at `addr` (key-space address of its buffer,
/// `lkey`) whose first bytes `head` (at most [`ETH_MIN_INLINE`]) are inline: the 64-byte
/// block and its size in 16-byte units.
pub fn frame_wqe(
    sqn: Sqn,
    pi: u16,
    head: &[u8],
    len: usize,
    addr: u64,
    lkey: Lkey,
) -> ([u8; SEND_WQE_BB], u8) {
    debug_assert!(head.len() <= ETH_MIN_INLINE && head.len() <= len);
    let mut w = [0u8; SEND_WQE_BB];
    let mut at = 2 * SEG_LEN;
    w[SEG_LEN..at].copy_from_slice(&EthSeg::encode(head));
    if head.len() > ETH_INLINE_START {
        let rest = &head[ETH_INLINE_START..];
        w[at..at + rest.len()].copy_from_slice(rest);
        at += rest.len().div_ceil(SEG_LEN) * SEG_LEN;
    }
    let tail = len - head.len();
    if tail > 0 {
        let sge = Sge::new(addr + head.len() as u64, tail as u32, lkey);
        w[at..at + SEG_LEN].copy_from_slice(&DataSeg::encode(&sge));
        at += SEG_LEN;
    }
    let ds = (at / SEG_LEN) as u8;
    let ctrl = CtrlSeg::encode(pi, SendOpcode::Send, qpn(sqn), ds, FmCeSe::CQ_UPDATE, 0);
    w[..SEG_LEN].copy_from_slice(&ctrl);
    (w, ds)
}

fn qpn(sqn: Sqn) -> rdma_pmd::QpNum {
    rdma_pmd::QpNum(sqn.0)
}

/// What a send completion said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxDone {
    /// The frame left.
    Sent,
    /// The SQ reported an error (it is now in the error state): the syndrome.
    Failed(u8),
}

/// The Ethernet send ring.
#[derive(Debug)]
pub struct EthTx {
    ring: DmaBuf,
    dbrec: DmaBuf,
    log_size: u8,
    /// Counter of the next WQE.
    pi: u16,
    /// Counter of the oldest WQE not completed.
    done: u16,
    sqn: Sqn,
    db: SqDoorbell,
}

impl EthTx {
    /// Allocate a ring of `2^log_size` blocks and its doorbell record, ringing on `uar`.
    pub fn alloc<D: Dma>(dma: &D, log_size: u8, uar: Uar) -> Result<Self> {
        if !(1..=12).contains(&log_size) {
            return Err(Error::InvalidArgument("Ethernet send ring of 2..4096 blocks"));
        }
        let ring = dma.alloc(SEND_WQE_BB << log_size, dma.page_size().max(4096))?;
        let dbrec = match dma.alloc(64, 64) {
            Ok(d) => d,
            Err(e) => {
                // SAFETY: never handed to the device.
                unsafe { dma.free(ring) };
                return Err(e.into());
            }
        };
        let db = SqDoorbell::new(uar, 0, BlueFlame::Off);
        Ok(EthTx { ring, dbrec, log_size, pi: 0, done: 0, sqn: Sqn(0), db })
    }

    /// The ring's and the doorbell record's bus addresses, for `CREATE_SQ`.
    pub fn bus(&self) -> (BusAddr, BusAddr) {
        (self.ring.bus(), self.dbrec.bus())
    }

    /// log2 of the ring size.
    pub fn log_size(&self) -> u8 {
        self.log_size
    }

    /// Name the SQ firmware created over the ring.
    pub fn set_sqn(&mut self, sqn: Sqn) {
        self.sqn = sqn;
    }

    /// Frames posted and not completed.
    pub fn outstanding(&self) -> u16 {
        self.pi.wrapping_sub(self.done)
    }

    /// The counter the next frame gets; its slot is this modulo the ring size.
    pub fn next(&self) -> Option<u16> {
        (self.outstanding() < (1 << self.log_size)).then_some(self.pi)
    }

    /// Post the frame of `len` bytes whose buffer is at key-space address `addr` (`lkey`) and
    /// whose first bytes are `head` (the inline part, [`inline_len`]); ring the doorbell.
    /// The frame's bytes must be in its buffer before the call.
    pub fn post<M: Mmio>(
        &mut self,
        mmio: &M,
        head: &[u8],
        len: usize,
        addr: u64,
        lkey: Lkey,
    ) -> Result<u16> {
        let pi = self.next().ok_or(Error::QueueFull { needed: 1, free: 0 })?;
        if len > FRAME_BUF || head.len() > ETH_MIN_INLINE || head.len() > len {
            return Err(Error::InvalidArgument("frame longer than its buffer"));
        }
        let (w, ds) = frame_wqe(self.sqn, pi, head, len, addr, lkey);
        let slot = (pi as usize) & ((1 << self.log_size) - 1);
        self.ring.write_bytes(slot * SEND_WQE_BB, &w);
        self.pi = pi.wrapping_add(1);
        let ring = RingAt { buf: &self.ring, off: 0, wqe_cnt: 1 << self.log_size };
        // The frame buffer and the WQE before the doorbell record: `ring` issues the
        // to-device barrier first.
        self.db.ring(mmio, &self.dbrec, &ring, Last { pi, ds, inline: false }, 1, self.pi);
        Ok(pi)
    }

    /// Take a completion of the send CQ: retire every frame up to the one it names.
    pub fn on_cqe<T: AsRef<[u8]>>(&mut self, c: &Cqe<T>) -> Result<TxDone> {
        let counter = c.wqe_counter();
        if counter.wrapping_sub(self.done) >= self.outstanding() {
            return Err(Error::Fault(DeviceFault::NotOutstanding { counter }));
        }
        let r = match c.opcode() {
            CqeOpcode::Req => TxDone::Sent,
            CqeOpcode::ReqErr => TxDone::Failed(u8::from(c.syndrome())),
            other => {
                return Err(Error::Fault(DeviceFault::UnexpectedOpcode { opcode: other.into() }))
            }
        };
        self.done = counter.wrapping_add(1);
        Ok(r)
    }

    /// Give the memory back.
    ///
    /// # Safety
    /// The device must no longer read the ring: the SQ was destroyed (or never created).
    pub unsafe fn free<D: Dma>(self, dma: &D) {
        // SAFETY: forwarded to our caller.
        unsafe {
            dma.free(self.ring);
            dma.free(self.dbrec);
        }
    }
}

/// A received frame: which buffer holds it and how long it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxFrame {
    /// The buffer (receive WQE) index.
    pub slot: usize,
    /// Bytes received.
    pub len: usize,
}

/// What a receive completion said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxDone {
    /// A frame.
    Frame(RxFrame),
    /// A frame the device took a VLAN tag from (the RQ is created not to strip; a tagged
    /// frame is not ours to answer): the buffer is handed back.
    Tagged,
    /// The RQ reported an error (flushed, or a local error): the syndrome.
    Failed(u8),
}

/// The Ethernet receive ring (cyclic, one data segment per WQE).
#[derive(Debug)]
pub struct EthRx {
    ring: DmaBuf,
    dbrec: DmaBuf,
    log_size: u8,
    /// Receive WQEs handed to the device (free-running).
    head: u16,
    /// Counter of the next WQE the device fills.
    tail: u16,
}

impl EthRx {
    /// Allocate a ring of `2^log_size` receive WQEs and its doorbell record.
    pub fn alloc<D: Dma>(dma: &D, log_size: u8) -> Result<Self> {
        if !(1..=12).contains(&log_size) {
            return Err(Error::InvalidArgument("Ethernet receive ring of 2..4096 WQEs"));
        }
        let ring = dma.alloc((SEG_LEN << log_size).max(4096), dma.page_size().max(4096))?;
        let dbrec = match dma.alloc(64, 64) {
            Ok(d) => d,
            Err(e) => {
                // SAFETY: never handed to the device.
                unsafe { dma.free(ring) };
                return Err(e.into());
            }
        };
        Ok(EthRx { ring, dbrec, log_size, head: 0, tail: 0 })
    }

    /// The ring's and the doorbell record's bus addresses, for `CREATE_RQ`.
    pub fn bus(&self) -> (BusAddr, BusAddr) {
        (self.ring.bus(), self.dbrec.bus())
    }

    /// log2 of the ring size.
    pub fn log_size(&self) -> u8 {
        self.log_size
    }

    /// Number of WQEs (and frame buffers).
    pub fn size(&self) -> usize {
        1 << self.log_size
    }

    /// Write every WQE (WQE `i` names buffer `i`: `FRAME_BUF` bytes at `base + i * FRAME_BUF`
    /// under `lkey`) and hand them all to the device. Called once the RQ is ready.
    pub fn post_all(&mut self, base: u64, lkey: Lkey) {
        for i in 0..self.size() {
            let sge = Sge::new(base + (i * FRAME_BUF) as u64, FRAME_BUF as u32, lkey);
            self.ring.write_bytes(i * SEG_LEN, &DataSeg::encode(&sge));
        }
        self.head = self.tail.wrapping_add(self.size() as u16);
        self.publish();
    }

    fn publish(&mut self) {
        // The WQEs before the counter that hands them over (udma_to_device_barrier).
        barrier::to_device();
        self.dbrec.write_u32(RCV_DBR * 4, u32::from_ne_bytes((self.head as u32).to_be_bytes()));
    }

    /// Take a completion of the receive CQ. The buffer it names stays the caller's until
    /// [`recycle`](Self::recycle).
    pub fn on_cqe<T: AsRef<[u8]>>(&mut self, c: &Cqe<T>) -> Result<RxDone> {
        if self.head == self.tail {
            return Err(Error::Fault(DeviceFault::NoReceivePosted));
        }
        // The CQE names the WQE it completes, the oldest handed over, modulo the ring
        // (`mlx5_wq_cyc_ctr2ix`); a duplicated or skipping CQE takes no buffer.
        let counter = c.wqe_counter();
        let mask = self.size() - 1;
        if (counter ^ self.tail) as usize & mask != 0 {
            return Err(Error::Fault(DeviceFault::WrongReceive { counter, expected: self.tail }));
        }
        let slot = self.tail as usize & mask;
        let done = match c.opcode() {
            CqeOpcode::RespSend if c.vlan_stripped() => RxDone::Tagged,
            CqeOpcode::RespSend => RxDone::Frame(RxFrame { slot, len: c.byte_cnt() as usize }),
            CqeOpcode::RespErr => RxDone::Failed(u8::from(c.syndrome())),
            // Checked before the ring moves: a CQE of the wrong kind takes no buffer.
            other => {
                return Err(Error::Fault(DeviceFault::UnexpectedOpcode { opcode: other.into() }))
            }
        };
        self.tail = self.tail.wrapping_add(1);
        match done {
            RxDone::Frame(f) if f.len > FRAME_BUF => {
                Err(Error::Fault(DeviceFault::BadFirmwareValue {
                    field: "cqe.byte_cnt",
                    value: f.len as u64,
                }))
            }
            done => Ok(done),
        }
    }

    /// Hand the oldest taken buffer back to the device (its WQE is unchanged: a cyclic RQ
    /// reuses it as it is).
    pub fn recycle(&mut self) {
        if self.head.wrapping_sub(self.tail) < self.size() as u16 {
            self.head = self.head.wrapping_add(1);
            self.publish();
        }
    }

    /// Give the memory back.
    ///
    /// # Safety
    /// The device must no longer use the ring: the RQ was destroyed (or never created).
    pub unsafe fn free<D: Dma>(self, dma: &D) {
        // SAFETY: forwarded to our caller.
        unsafe {
            dma.free(self.ring);
            dma.free(self.dbrec);
        }
    }
}

#[cfg(test)]
mod tests;
