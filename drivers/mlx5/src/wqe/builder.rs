//! The RDMA WRITE / WRITE WITH IMMEDIATE WQE builder.
//!
//! [`WqeBuilder::write`] turns one [`WriteRequest`] into the bytes rdma-core's mlx5 provider
//! (`providers/mlx5/qp.c` `_mlx5_post_send`, RC QP) would put in the send ring, and stores them
//! straight into the ring's slots through a [`WqeSink`]:
//!
//! | WQE bytes | what | rule |
//! |---|---|---|
//! | 0..16 | control segment | opcode 0x08, or 0x09 with immediate; `ds`; `fm_ce_se`; bytes 8..11 zero |
//! | 16..32 | remote-address segment | `raddr`, `rkey`, reserved word zero |
//! | 32.. | one data segment per SGE of non-zero length | zero-length SGEs are skipped (`qp.c`) |
//! | 32.. | *or* one inline segment | `len \| 0x80000000`, payload, zero padding to 16 bytes |
//!
//! * `ds = 2 + (SGEs with length != 0)`, or `2 + ceil((4 + inline_len) / 16)` (0 extra units
//!   for an empty inline payload); it must fit the 6-bit field, so `ds <= 63`.
//! * `wqebbs = ceil(ds * 16 / 64)`; block *i* goes to slot `(pi + i) & (wqe_cnt - 1)`.
//! * `fm_ce_se = (signaled || sq_sig_all ? CQ_UPDATE : 0) | (fence ? FENCE : 0) |
//!   (solicited ? SOLICITED : 0)`.
//! * immediate data is stored big-endian, so the peer reads `be32toh(wc.imm_data) == imm`.
//!
//! Every check runs before the first store: a refused request leaves the ring untouched. The
//! control segment is stored last. Bytes between the end of the payload and `ds * 16` are
//! written as zeros; the tail of the last block (past `ds * 16`) is left as it was, as the
//! provider does (the device never reads it).
//!
//! The data path then publishes the WQE: barrier, [`crate::doorbell::sq_dbrec`] at
//! `dbrec[SND_DBR]`, then either a BlueFlame copy of [`crate::doorbell::bf_len`] bytes or one
//! 64-bit store of [`WqeInfo::doorbell`] to the UAR.

use rdma_pmd::post::SourceKind;
use rdma_pmd::{Error, QpNum, RemoteBuf, Result, SendFlags, Sge, WriteRequest};

use super::data;
use super::inline;
use super::sink::WqeSink;
use crate::opcode::{FmCeSe, SendOpcode, INLINE_SEG, MAX_DS, SEND_WQE_BB, SEND_WQE_DS};

/// `ds` of the control and remote-address segments.
const HEADER_DS: u32 = 2;
/// Most data segments one WQE can hold: `ds` is 6 bits.
pub const MAX_SGE: u32 = MAX_DS - HEADER_DS;
/// Most inline bytes one WQE can hold: `2 + ceil((4 + n) / 16) <= 63`.
pub const MAX_INLINE: u32 = MAX_SGE * SEND_WQE_DS as u32 - inline::HEADER_LEN as u32;

/// The size of one WQE: what the ring and the doorbell need to know about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WqeShape {
    /// Size in 16-byte units, as written in the control segment.
    pub ds: u8,
    /// Size in 64-byte blocks (ring slots): `ceil(ds * 16 / 64)`.
    pub wqebbs: u8,
}

impl WqeShape {
    /// The shape of a WQE of `ds` units.
    #[inline]
    pub const fn from_ds(ds: u8) -> Self {
        // ceil(ds * 16 / 64), with 64 / 16 == 4 units per block.
        WqeShape { ds, wqebbs: ((ds as u32 + 3) >> 2) as u8 }
    }
}

/// What [`WqeBuilder::write`] stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WqeInfo {
    /// The WQE counter it was written at (`sq.cur_post & 0xffff` before the post).
    pub pi: u16,
    /// Its opcode.
    pub opcode: SendOpcode,
    /// Its size.
    pub shape: WqeShape,
    /// Its `fm_ce_se` byte.
    pub fm_ce_se: FmCeSe,
    /// The first 8 bytes of its control segment: the value of the 64-bit UAR doorbell store
    /// when this is the last WQE of a post (`mmio_write64_be` in `qp.c` `post_send_db`).
    pub doorbell: [u8; 8],
}

impl WqeInfo {
    /// A placeholder before a WQE is written.
    pub const EMPTY: WqeInfo = WqeInfo {
        pi: 0,
        opcode: SendOpcode::RdmaWrite,
        shape: WqeShape { ds: 0, wqebbs: 0 },
        fm_ce_se: FmCeSe::empty(),
        doorbell: [0; 8],
    };

    /// The WQE counter after this WQE (`cur_post + wqebbs`, 16 bits).
    #[inline]
    pub const fn next_pi(&self) -> u16 {
        self.pi.wrapping_add(self.shape.wqebbs as u16)
    }

    /// Whether the device will generate a completion for this WQE.
    #[inline]
    pub fn signaled(&self) -> bool {
        self.fm_ce_se.contains(FmCeSe::CQ_UPDATE)
    }

    /// The ring slot of block `i` in a ring of `wqe_cnt` slots.
    #[inline]
    pub const fn slot(&self, i: u32, wqe_cnt: u32) -> u32 {
        (self.pi as u32).wrapping_add(i) & (wqe_cnt - 1)
    }
}

/// Builds RDMA WRITE WQEs for one RC send queue.
///
/// ```
/// use rdma_pmd::{QpNum, RemoteBuf, Rkey, SendFlags, Source, WriteRequest};
/// use rdma_pmd_mlx5::wqe::{SliceRing, WqeBuilder};
///
/// let b = WqeBuilder::new(QpNum(0x123));
/// let mut ring = [0u8; 64 * 64];
/// let mut sink = SliceRing::new(&mut ring, 64).unwrap();
/// let data: [&[u8]; 1] = [b"hello"];
/// let req = WriteRequest {
///     wr_id: 1,
///     source: Source::inline(&data),
///     flags: SendFlags::SIGNALED | SendFlags::INLINE,
///     remote: RemoteBuf::new(0x1000, Rkey(7)),
///     imm: None,
/// };
/// let info = b.write(&mut sink, 5, 64, &req).unwrap();
/// assert_eq!((info.shape.ds, info.shape.wqebbs, info.next_pi()), (3, 1, 6));
/// assert_eq!(&ring[5 * 64 + 36..5 * 64 + 41], b"hello");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WqeBuilder {
    qpn: QpNum,
    sig_all: bool,
    max_sge: u32,
    max_inline: u32,
}

impl WqeBuilder {
    /// A builder for the QP `qpn`, without `sq_sig_all`, accepting up to [`MAX_SGE`] SGEs and
    /// [`MAX_INLINE`] inline bytes.
    pub const fn new(qpn: QpNum) -> Self {
        WqeBuilder { qpn, sig_all: false, max_sge: u32::MAX, max_inline: MAX_INLINE }
    }

    /// The QP was created with `sq_sig_all = 1`: every WQE asks for a completion.
    pub const fn sq_sig_all(mut self, on: bool) -> Self {
        self.sig_all = on;
        self
    }

    /// Refuse requests with more than `n` SGEs (or inline pieces), zero-length ones included
    /// (`ibv_qp_cap.max_send_sge`; `qp.c` compares `wr->num_sge > qp->sq.max_gs` for every
    /// request, inline ones too).
    pub const fn max_sge(mut self, n: u32) -> Self {
        self.max_sge = n;
        self
    }

    /// Refuse inline payloads above `n` bytes (`ibv_qp_cap.max_inline_data`); capped at
    /// [`MAX_INLINE`].
    pub const fn max_inline(mut self, n: u32) -> Self {
        self.max_inline = if n < MAX_INLINE { n } else { MAX_INLINE };
        self
    }

    /// The QP number written into every WQE.
    pub const fn qpn(&self) -> QpNum {
        self.qpn
    }

    /// The `fm_ce_se` byte for a request with `flags`.
    #[inline]
    pub fn fm_ce_se(&self, flags: SendFlags) -> FmCeSe {
        let mut f = FmCeSe::empty();
        if self.sig_all || flags.contains(SendFlags::SIGNALED) {
            f |= FmCeSe::CQ_UPDATE;
        }
        if flags.contains(SendFlags::FENCE) {
            f |= FmCeSe::FENCE;
        }
        if flags.contains(SendFlags::SOLICITED) {
            f |= FmCeSe::SOLICITED;
        }
        f
    }

    /// The size `req` will take, with every check [`write`](Self::write) makes except the
    /// free-space one. Nothing is written.
    pub fn shape(&self, req: &WriteRequest<'_, '_>) -> Result<WqeShape> {
        if req.is_inline() {
            self.check_count(req.source.count())?;
            let len = inline_len(req)?;
            self.check_inline(len)?;
            return Ok(WqeShape::from_ds((HEADER_DS as usize + inline::ds_units(len)) as u8));
        }
        match *req.source.kind() {
            SourceKind::Sgl(s) => self.gather_shape(s, |b| b.len() as u32),
            SourceKind::Raw { 0: s, .. } => self.gather_shape(s, |e| e.length),
            // is_inline() is true for this kind.
            SourceKind::Inline(_) => Err(Error::InvalidArgument("inline source")),
        }
    }

    /// Write `req` as the WQE at counter `pi` into `sink`, using at most `room` free slots.
    ///
    /// Fails, with the ring untouched, if the request has more SGEs than allowed
    /// ([`Error::TooManySges`]), more inline bytes ([`Error::InlineTooLarge`]), or needs more
    /// than `room` (or the ring's `wqe_cnt`) slots ([`Error::QueueFull`]).
    #[inline]
    pub fn write<S: WqeSink + ?Sized>(
        &self,
        sink: &mut S,
        pi: u16,
        room: u32,
        req: &WriteRequest<'_, '_>,
    ) -> Result<WqeInfo> {
        let mut info = WqeInfo::EMPTY;
        self.write_into(sink, pi, room, req, &mut info)?;
        Ok(info)
    }

    /// [`write`](Self::write), storing what was written into `info` instead of returning it.
    ///
    /// This is the data path's form: a `Result<WqeInfo>` returned by value is assembled on the
    /// stack byte by byte and reloaded with wider loads, which stalls store forwarding on every
    /// post; an out-parameter keeps the fields' stores and loads the same width.
    #[inline(always)]
    pub fn write_into<S: WqeSink + ?Sized>(
        &self,
        sink: &mut S,
        pi: u16,
        room: u32,
        req: &WriteRequest<'_, '_>,
        info: &mut WqeInfo,
    ) -> Result<()> {
        if req.is_inline() {
            return self.write_inline(sink, pi, room, req, info);
        }
        match *req.source.kind() {
            SourceKind::Sgl(s) => self.write_gather(
                sink,
                pi,
                room,
                s,
                |b| b.sge(),
                req.flags,
                req.remote,
                req.imm,
                info,
            ),
            SourceKind::Raw { 0: s, .. } => {
                self.write_gather(sink, pi, room, s, |e| *e, req.flags, req.remote, req.imm, info)
            }
            SourceKind::Inline(_) => Err(Error::InvalidArgument("inline source")),
        }
    }

    /// Write a gather WRITE from raw elements: [`write`](Self::write) without the
    /// [`WriteRequest`] (the elements are only copied into the WQE, never dereferenced).
    /// The arguments are those of `rdma_post_writev` plus the ring position.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn write_sges<S: WqeSink + ?Sized>(
        &self,
        sink: &mut S,
        pi: u16,
        room: u32,
        sgl: &[Sge],
        flags: SendFlags,
        remote: RemoteBuf,
        imm: Option<u32>,
    ) -> Result<WqeInfo> {
        let mut info = WqeInfo::EMPTY;
        self.write_gather(sink, pi, room, sgl, |e| *e, flags, remote, imm, &mut info)?;
        Ok(info)
    }

    /// `qp.c` refuses `wr->num_sge > qp->sq.max_gs` first, for inline requests too.
    fn check_count(&self, n: usize) -> Result<()> {
        if n > self.max_sge as usize {
            return Err(Error::TooManySges { given: n, max: self.max_sge as usize });
        }
        Ok(())
    }

    fn gather_shape<T>(&self, items: &[T], len: impl Fn(&T) -> u32) -> Result<WqeShape> {
        self.check_count(items.len())?;
        let n = items.iter().filter(|i| len(i) != 0).count();
        if n > MAX_SGE as usize {
            return Err(Error::TooManySges { given: n, max: MAX_SGE as usize });
        }
        Ok(WqeShape::from_ds((HEADER_DS as usize + n) as u8))
    }

    fn check_inline(&self, len: usize) -> Result<()> {
        if len > self.max_inline as usize {
            return Err(Error::InlineTooLarge { len, max: self.max_inline as usize });
        }
        Ok(())
    }

    #[inline(always)]
    fn check_room(wqebbs: u32, room: u32, wqe_cnt: u32) -> Result<()> {
        let free = if room < wqe_cnt { room } else { wqe_cnt };
        if wqebbs > free {
            return Err(Error::QueueFull { needed: wqebbs, free });
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn write_gather<S: WqeSink + ?Sized, T>(
        &self,
        sink: &mut S,
        pi: u16,
        room: u32,
        items: &[T],
        sge: impl Fn(&T) -> Sge,
        flags: SendFlags,
        remote: RemoteBuf,
        imm: Option<u32>,
        info: &mut WqeInfo,
    ) -> Result<()> {
        let wqe_cnt = sink.wqe_cnt();
        // Fast path: the size if every element is non-empty bounds the real size, so when it
        // fits no extra pass over the list is needed.
        let upper = HEADER_DS + items.len() as u32;
        if items.len() > self.max_sge as usize
            || upper > MAX_DS
            || upper.div_ceil(4) > room.min(wqe_cnt)
        {
            let shape = self.gather_shape(items, |i| sge(i).length)?;
            Self::check_room(shape.wqebbs as u32, room, wqe_cnt)?;
        }
        // Offsets are not wrapped here: the sink stores modulo the ring size.
        let base = pi as usize * SEND_WQE_BB;
        let mut off = base + 2 * SEND_WQE_DS;
        for item in items {
            let e = sge(item);
            if e.length != 0 {
                let (w0, w1) = data::words(&e);
                sink.put16(off, w0, w1);
                off += SEND_WQE_DS;
            }
        }
        let ds = ((off - base) / SEND_WQE_DS) as u8;
        self.finish(sink, pi, base, ds, flags, remote, imm, info);
        Ok(())
    }

    fn write_inline<S: WqeSink + ?Sized>(
        &self,
        sink: &mut S,
        pi: u16,
        room: u32,
        req: &WriteRequest<'_, '_>,
        info: &mut WqeInfo,
    ) -> Result<()> {
        self.check_count(req.source.count())?;
        let len = inline_len(req)?;
        self.check_inline(len)?;
        let shape = WqeShape::from_ds((HEADER_DS as usize + inline::ds_units(len)) as u8);
        let wqe_cnt = sink.wqe_cnt();
        Self::check_room(shape.wqebbs as u32, room, wqe_cnt)?;
        let base = pi as usize * SEND_WQE_BB;
        if len != 0 {
            let header = (len as u32 | INLINE_SEG).to_be_bytes();
            let mut w = InlineWriter {
                sink: &mut *sink,
                off: base + 2 * SEND_WQE_DS,
                acc: [header[0], header[1], header[2], header[3], 0, 0, 0, 0],
                n: 4,
            };
            match *req.source.kind() {
                SourceKind::Inline(pieces) => {
                    for p in pieces {
                        // SAFETY: `p` is a live slice, readable for its length.
                        unsafe { w.push(p.as_ptr(), p.len()) }
                    }
                }
                SourceKind::Sgl(bufs) => {
                    for b in bufs {
                        // SAFETY: `LocalBuf::from_raw_parts`' contract: `as_ptr` points to
                        // `len` bytes that stay allocated for the buffer's lifetime.
                        unsafe { w.push(b.as_ptr(), b.len()) }
                    }
                }
                SourceKind::Raw { 0: sges, .. } => {
                    for e in sges {
                        // SAFETY: `Source::raw`'s contract: with `INLINE`, every `addr` is a
                        // CPU address readable for `length` bytes during the post.
                        unsafe { w.push(e.addr as usize as *const u8, e.length as usize) }
                    }
                }
            }
            w.finish(base + shape.ds as usize * SEND_WQE_DS);
        }
        self.finish(sink, pi, base, shape.ds, req.flags, req.remote, req.imm, info);
        Ok(())
    }

    /// Store the remote-address and control segments (control last).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn finish<S: WqeSink + ?Sized>(
        &self,
        sink: &mut S,
        pi: u16,
        base: usize,
        ds: u8,
        flags: SendFlags,
        remote: RemoteBuf,
        imm: Option<u32>,
        info: &mut WqeInfo,
    ) {
        let (opcode, imm) = match imm {
            Some(v) => (SendOpcode::RdmaWriteImm, v),
            None => (SendOpcode::RdmaWrite, 0),
        };
        let fm_ce_se = self.fm_ce_se(flags);
        sink.put16(
            base + 16,
            remote.addr.to_be_bytes(),
            ((remote.rkey.0 as u64) << 32).to_be_bytes(),
        );
        let head = ((pi as u64) << 40
            | (u8::from(opcode) as u64) << 32
            | ((self.qpn.0 & QpNum::MAX) as u64) << 8
            | ds as u64)
            .to_be_bytes();
        let tail = ((fm_ce_se.bits() as u64) << 32 | imm as u64).to_be_bytes();
        sink.put16(base, head, tail);
        *info = WqeInfo { pi, opcode, shape: WqeShape::from_ds(ds), fm_ce_se, doorbell: head };
    }
}

/// Total inline bytes of a request, refusing sums that overflow.
fn inline_len(req: &WriteRequest<'_, '_>) -> Result<usize> {
    req.source
        .total_len()
        .map(|l| l as usize)
        .ok_or(Error::InlineTooLarge { len: usize::MAX, max: MAX_INLINE as usize })
}

/// Streams inline payload into the ring as aligned 8-byte words.
struct InlineWriter<'s, S: WqeSink + ?Sized> {
    sink: &'s mut S,
    /// Ring offset (unwrapped) of the word `acc` will become.
    off: usize,
    acc: [u8; 8],
    n: usize,
}

impl<S: WqeSink + ?Sized> InlineWriter<'_, S> {
    #[inline(always)]
    fn flush(&mut self) {
        self.sink.put8(self.off, self.acc);
        self.off += 8;
        self.n = 0;
    }

    /// Append `len` bytes read from `p`.
    ///
    /// # Safety
    /// `p` must be readable for `len` bytes.
    #[inline]
    unsafe fn push(&mut self, mut p: *const u8, mut len: usize) {
        while self.n != 0 && len != 0 {
            // SAFETY: `len > 0` bytes remain readable at `p`.
            self.acc[self.n] = unsafe { p.read() };
            // SAFETY: stays within (or one past) the readable range.
            p = unsafe { p.add(1) };
            len -= 1;
            self.n += 1;
            if self.n == 8 {
                self.flush();
            }
        }
        while len >= 8 {
            // SAFETY: 8 readable bytes at `p`; no alignment assumed.
            let w = unsafe { p.cast::<[u8; 8]>().read_unaligned() };
            self.sink.put8(self.off, w);
            self.off += 8;
            // SAFETY: as above.
            p = unsafe { p.add(8) };
            len -= 8;
        }
        while len != 0 {
            // SAFETY: `len > 0` bytes remain readable at `p`.
            self.acc[self.n] = unsafe { p.read() };
            // SAFETY: as above.
            p = unsafe { p.add(1) };
            len -= 1;
            self.n += 1;
        }
    }

    /// Zero-pad the last word and every word up to ring offset `end` (the WQE's `ds * 16`).
    #[inline]
    fn finish(mut self, end: usize) {
        if self.n != 0 {
            self.acc[self.n..].fill(0);
            self.flush();
        }
        while self.off < end {
            self.sink.put8(self.off, [0; 8]);
            self.off += 8;
        }
    }
}

#[cfg(test)]
mod tests;
