//! The send WQE encoder: the builder of every send WQE (RDMA WRITE, READ, SEND, atomics, UD
//! datagrams; see [`Head`]), and the ring sinks it stores through.
//!
//! [`WqeBuilder::write`] turns one [`SendRequest`] into the bytes rdma-core's mlx5 provider
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
//! Every check runs before the first store, so a refused request leaves the ring untouched, but
//! for a gather's message checks ([`rdma_pmd::post::check_message`], made on the length its
//! data segments sum to) and its `each` callback: those refuse after the data segments were
//! written into the free blocks the WQE would have taken, which nothing reads until a commit.
//! The control segment is stored last. Bytes between the end of the payload and `ds * 16` are
//! written as zeros; the tail of the last block (past `ds * 16`) is left as it was, as the
//! provider does (the device never reads it).
//!
//! The send queue then publishes the WQE ([`super::send`]): barrier, [`crate::layout::wqe::sq_dbrec`] at
//! `dbrec[SND_DBR]`, then either a BlueFlame copy of [`crate::layout::wqe::bf_len`] bytes or one
//! 64-bit store of [`WqeInfo::doorbell`] to the UAR.
//!
//! ## Where the bytes go
//!
//! The send ring is `wqe_cnt` slots of 64 bytes. The builder never holds a Rust reference into
//! the ring. It hands each aligned 8- or 16-byte piece to a [`WqeSink`] together with its byte offset counted from the start of the ring *as
//! if the ring repeated forever* (`pi * 64 + offset in the WQE`); the sink wraps it modulo the
//! ring size, so block *i* of a WQE posted at WQE counter `pi` lands in slot
//! `(pi + i) & (wqe_cnt - 1)`, and so does any inline payload that runs past the end of a block.
//! Wrapping in the sink costs one `and` per store and makes every sink memory-safe for any
//! offset. Three sinks ship here:
//!
//! * [`RawRing`]: a ring in DMA memory, written through a raw pointer (house rule: no
//!   references into live DMA memory) with 8-byte relaxed atomic stores
//!   (`rdma_pmd_hal::access`) and, on x86_64, one 16-byte store per segment (see `store16`). The data path creates it once
//!   per send queue from the ring's CPU address.
//! * [`FixedRing`]: the same with the size a compile-time constant; the send queue uses it.
//! * [`SliceRing`]: a ring over a plain `&mut [u8]`, for tests, conformance vectors and
//!   BlueFlame staging.

use core::marker::PhantomData;
use core::ptr::NonNull;

use rdma_pmd::post::{check_message, SourceKind, ATOMIC_LEN};
use rdma_pmd::{
    AtomicOp, DestKind, Error, QpNum, RemoteBuf, Result, SendFlags, SendOp, SendRequest, Sge,
    Source, UdDest,
};
use rdma_pmd_hal::access;

use crate::layout::codes::{FmCeSe, SendOpcode, MAX_DS, SEND_WQE_BB, SEND_WQE_DS};
use crate::layout::wqe::{
    halves, inline_ds_units, AtomicSeg, CtrlSeg, DataSeg, DatagramSeg, InlineSeg, RaddrSeg,
    DATAGRAM_LEN, INLINE_HEADER_LEN, SEG_LEN,
};

/// `ds` of the control and remote-address segments.
pub(crate) const HEADER_DS: u32 = 2;
/// Most data segments one WQE can hold: `ds` is 6 bits.
pub const MAX_SGE: u32 = MAX_DS - HEADER_DS;
/// Most inline bytes one WQE can hold: `2 + ceil((4 + n) / 16) <= 63`.
pub const MAX_INLINE: u32 = MAX_SGE * SEND_WQE_DS as u32 - INLINE_HEADER_LEN as u32;

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

/// The segments between a WQE's control segment and its payload, with the opcode they go
/// with: what distinguishes the operations (`_mlx5_post_send`'s `switch (ibqp->qp_type)` and
/// `switch (wr->opcode)`).
///
/// | head | opcode | segments after ctrl | `ds` units |
/// |---|---|---|---|
/// | `Write` | 0x08, 0x09 with immediate | raddr | 1 |
/// | `Read` | 0x10 | raddr | 1 |
/// | `Send` (RC) | 0x0a, 0x0b with immediate | none | 0 |
/// | `SendUd` | 0x0a, 0x0b | datagram (the 48-byte address vector) | 3 |
/// | `Atomic` | 0x11, 0x12 | raddr, atomic | 2 |
#[derive(Clone, Copy, Debug)]
pub enum Head<'a> {
    /// RDMA WRITE (WITH IMMEDIATE).
    Write {
        /// Where the payload goes.
        remote: RemoteBuf,
        /// Immediate data.
        imm: Option<u32>,
    },
    /// RDMA READ.
    Read {
        /// What is read.
        remote: RemoteBuf,
    },
    /// SEND (WITH IMMEDIATE) on a connected QP.
    Send {
        /// Immediate data.
        imm: Option<u32>,
    },
    /// SEND (WITH IMMEDIATE) of a datagram.
    SendUd {
        /// Immediate data.
        imm: Option<u32>,
        /// Where it goes (encoded by [`DatagramSeg::encode`] when the WQE is stored).
        dest: &'a UdDest,
    },
    /// Compare-and-swap or fetch-and-add.
    Atomic {
        /// The remote 8 bytes.
        remote: RemoteBuf,
        /// The operation and operands.
        op: AtomicOp,
    },
}

impl Head<'_> {
    /// `ds` units of the control segment and the segments of this head.
    #[inline(always)]
    pub const fn units(&self) -> usize {
        match self {
            Head::Write { .. } | Head::Read { .. } => 2,
            Head::Send { .. } => 1,
            Head::SendUd { .. } => 1 + DATAGRAM_LEN / SEG_LEN,
            Head::Atomic { .. } => 3,
        }
    }

    /// The WQE's opcode.
    #[inline(always)]
    pub const fn opcode(&self) -> SendOpcode {
        match self {
            Head::Write { imm: None, .. } => SendOpcode::RdmaWrite,
            Head::Write { imm: Some(_), .. } => SendOpcode::RdmaWriteImm,
            Head::Read { .. } => SendOpcode::RdmaRead,
            Head::Send { imm: None } | Head::SendUd { imm: None, .. } => SendOpcode::Send,
            Head::Send { imm: Some(_) } | Head::SendUd { imm: Some(_), .. } => SendOpcode::SendImm,
            Head::Atomic { op: AtomicOp::CompareSwap { .. }, .. } => SendOpcode::AtomicCs,
            Head::Atomic { op: AtomicOp::FetchAdd { .. }, .. } => SendOpcode::AtomicFa,
        }
    }

    /// The control segment's immediate word (0 without immediate data: `send_ieth`).
    #[inline(always)]
    const fn imm(&self) -> u32 {
        match self {
            Head::Write { imm: Some(i), .. }
            | Head::Send { imm: Some(i) }
            | Head::SendUd { imm: Some(i), .. } => *i,
            _ => 0,
        }
    }

    /// Refuse a message of `len` bytes this head cannot carry ([`check_message`] against the
    /// remote range, if any).
    #[inline(always)]
    fn check_len(&self, len: u64) -> Result<()> {
        match self {
            Head::Write { remote, .. } | Head::Read { remote } | Head::Atomic { remote, .. } => {
                check_message(len, *remote)
            }
            _ => check_message(len, RemoteBuf::default()),
        }
    }

    /// Store the segments after the control segment of the WQE at `base`.
    #[inline(always)]
    fn store<S: WqeSink + ?Sized>(&self, sink: &mut S, base: usize) {
        match self {
            Head::Write { remote, .. } | Head::Read { remote } => {
                let (raddr, rkey) = halves(RaddrSeg::encode(*remote));
                sink.put16(base + SEG_LEN, raddr, rkey);
            }
            Head::Send { .. } => {}
            Head::SendUd { dest, .. } => {
                let av = DatagramSeg::encode(dest);
                for k in 0..DATAGRAM_LEN / SEG_LEN {
                    let mut seg = [0u8; SEG_LEN];
                    seg.copy_from_slice(&av[k * SEG_LEN..(k + 1) * SEG_LEN]);
                    let (lo, hi) = halves(seg);
                    sink.put16(base + (1 + k) * SEG_LEN, lo, hi);
                }
            }
            Head::Atomic { remote, op } => {
                let (raddr, rkey) = halves(RaddrSeg::encode(*remote));
                sink.put16(base + SEG_LEN, raddr, rkey);
                let (swap, cmp) = halves(AtomicSeg::encode(*op));
                sink.put16(base + 2 * SEG_LEN, swap, cmp);
            }
        }
    }
}

/// Builds the send WQEs of one send queue (RC or UD).
///
/// ```
/// use rdma_pmd::{QpNum, RemoteBuf, Rkey, SendFlags, SendRequest, Source};
/// use rdma_pmd_mlx5::datapath::wqe::{SliceRing, WqeBuilder};
///
/// let b = WqeBuilder::new(QpNum(0x123));
/// let mut ring = [0u8; 64 * 64];
/// let mut sink = SliceRing::new(&mut ring, 64).unwrap();
/// let data: [&[u8]; 1] = [b"hello"];
/// let remote = RemoteBuf::new(0x1000, Rkey(7));
/// let flags = SendFlags::SIGNALED | SendFlags::INLINE;
/// let req = SendRequest::write(1, Source::inline(&data), flags, remote, None);
/// let info = b.write(&mut sink, 5, 64, &req).unwrap();
/// assert_eq!((info.shape.ds, info.shape.wqebbs, info.next_pi()), (3, 1, 6));
/// assert_eq!(&ring[5 * 64 + 36..5 * 64 + 41], b"hello");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WqeBuilder {
    qpn: QpNum,
    /// `IBV_SEND_SIGNALED` if the QP signals every request (`sq_sig_all`), else 0: or-ed
    /// into each request's flags.
    sig_bits: u8,
    max_sge: u32,
    /// `min(max_sge, MAX_SGE)`: a list no longer than this fits without counting its
    /// non-empty elements.
    fast_sge: u32,
    max_inline: u32,
    /// The QP is a datagram QP (UD or GSI): sends carry a destination, nothing else posts.
    datagram: bool,
}

impl WqeBuilder {
    /// A builder for the RC QP `qpn`, without `sq_sig_all`, accepting up to [`MAX_SGE`] SGEs
    /// and [`MAX_INLINE`] inline bytes.
    pub const fn new(qpn: QpNum) -> Self {
        WqeBuilder {
            qpn,
            sig_bits: 0,
            max_sge: u32::MAX,
            fast_sge: MAX_SGE,
            max_inline: MAX_INLINE,
            datagram: false,
        }
    }

    /// The QP is a UD or GSI QP: only SENDs, each with a datagram destination.
    pub const fn datagram(mut self, on: bool) -> Self {
        self.datagram = on;
        self
    }

    /// The QP was created with `sq_sig_all = 1`: every WQE asks for a completion.
    pub const fn sq_sig_all(mut self, on: bool) -> Self {
        self.sig_bits = if on { SendFlags::SIGNALED.bits() as u8 } else { 0 };
        self
    }

    /// Refuse requests with more than `n` SGEs (or inline pieces), zero-length ones included
    /// (`ibv_qp_cap.max_send_sge`; `qp.c` compares `wr->num_sge > qp->sq.max_gs` for every
    /// request, inline ones too).
    pub const fn max_sge(mut self, n: u32) -> Self {
        self.max_sge = n;
        self.fast_sge = if n < MAX_SGE { n } else { MAX_SGE };
        self
    }

    /// Refuse inline payloads above `n` bytes (`ibv_qp_cap.max_inline_data`); capped at
    /// [`MAX_INLINE`].
    pub const fn max_inline(mut self, n: u32) -> Self {
        self.max_inline = if n < MAX_INLINE { n } else { MAX_INLINE };
        self
    }

    /// Whether the QP is a datagram QP.
    #[inline(always)]
    pub const fn is_datagram(&self) -> bool {
        self.datagram
    }

    /// The QP number written into every WQE.
    pub const fn qpn(&self) -> QpNum {
        self.qpn
    }

    /// Whether a request with `flags` asks the device for a completion (`CQ_UPDATE`).
    #[inline(always)]
    pub fn signals(&self, flags: SendFlags) -> bool {
        (flags.bits() as u8 | self.sig_bits) & SendFlags::SIGNALED.bits() as u8 != 0
    }

    /// The `fm_ce_se` byte for a request with `flags`: each of the three flags that has a
    /// control-segment bit moved to it (shifts rather than a table, so that a flag known at
    /// the call site folds away). The provider adds no fence of its own after a READ or an
    /// atomic (`_mlx5_post_send` takes the fence from `IBV_SEND_FENCE` or its `fm_cache`,
    /// which only LOCAL_INV and BIND_MW set, and this API posts neither).
    #[inline(always)]
    pub fn fm_ce_se(&self, flags: SendFlags) -> FmCeSe {
        let f = flags.bits() as u8 | self.sig_bits;
        FmCeSe::from_bits_retain(
            (f & FENCE) << FENCE_TO_FM | (f & SIGNALED) << SIGNALED_TO_FM | (f & SOLICITED) >> 1,
        )
    }

    /// The head of `req` on this QP, or the error the provider gives a request this QP
    /// cannot post (EINVAL).
    #[inline(always)]
    pub fn head<'a>(&self, req: &'a SendRequest<'_, '_>) -> Result<Head<'a>> {
        match (&req.op, self.datagram) {
            (SendOp::Write { remote, imm, .. }, false) => {
                Ok(Head::Write { remote: *remote, imm: *imm })
            }
            (SendOp::Send { imm, ud: None, .. }, false) => Ok(Head::Send { imm: *imm }),
            (SendOp::Send { imm, ud: Some(dest), .. }, true) => {
                Ok(Head::SendUd { imm: *imm, dest })
            }
            (SendOp::Read { remote, .. }, false) => Ok(Head::Read { remote: *remote }),
            (SendOp::Atomic { remote, op, .. }, false) => {
                Ok(Head::Atomic { remote: *remote, op: *op })
            }
            (SendOp::Send { ud: Some(_), .. }, false) => {
                Err(Error::InvalidArgument("a datagram destination on a connected QP"))
            }
            (SendOp::Send { ud: None, .. }, true) => {
                Err(Error::InvalidArgument("a send on a datagram QP needs a destination"))
            }
            (_, true) => Err(Error::InvalidArgument("a datagram QP posts only sends")),
        }
    }

    /// The size `req` will take, with every check [`write`](Self::write) makes except the
    /// free-space one. Nothing is written.
    pub fn shape(&self, req: &SendRequest<'_, '_>) -> Result<WqeShape> {
        let head = self.head(req)?;
        let hdr = head.units();
        let (shape, len) = match &req.op {
            SendOp::Write { source, .. } | SendOp::Send { source, .. } => {
                if req.is_inline() {
                    self.check_count(source.count())?;
                    let len = inline_len(source)?;
                    self.check_inline(len, hdr)?;
                    (WqeShape::from_ds((hdr + inline_ds_units(len)) as u8), len as u64)
                } else {
                    let shape = match *source.kind() {
                        SourceKind::Sgl(s) => self.gather_shape(s, |b| b.len() as u32, hdr)?,
                        SourceKind::Raw { 0: s, .. } => self.gather_shape(s, |e| e.length, hdr)?,
                        SourceKind::Inline(_) => {
                            return Err(Error::InvalidArgument("inline source"))
                        }
                    };
                    let len =
                        source.total_len().ok_or(Error::InvalidArgument("message above 2 GiB"))?;
                    (shape, len as u64)
                }
            }
            SendOp::Read { dest, .. } => {
                let n = dest.count();
                self.check_count(n)?;
                let sizes = (0..n).filter_map(|i| dest.sge(i)).collect::<FixedSges>();
                if sizes.over > 0 {
                    return Err(Error::TooManySges { given: n, max: MAX_DS as usize - hdr });
                }
                let shape = self.gather_shape(sizes.as_slice(), |e| e.length, hdr)?;
                (
                    shape,
                    dest.total_len().ok_or(Error::InvalidArgument("message above 2 GiB"))? as u64,
                )
            }
            SendOp::Atomic { dest, .. } => {
                atomic_sge(dest.sge(0).ok_or(Error::InvalidArgument("atomic result"))?)?;
                (WqeShape::from_ds((hdr + 1) as u8), ATOMIC_LEN as u64)
            }
        };
        head.check_len(len)?;
        Ok(shape)
    }

    /// Write `req` as the WQE at counter `pi` into `sink`, using at most `room` free slots.
    ///
    /// Fails, with the ring untouched, if the request has more SGEs than allowed
    /// ([`Error::TooManySges`]), more inline bytes ([`Error::InlineTooLarge`]), needs more
    /// than `room` (or the ring's `wqe_cnt`) slots ([`Error::QueueFull`]), or is not one this
    /// QP posts ([`Error::InvalidArgument`]).
    #[inline]
    pub fn write<S: WqeSink + ?Sized>(
        &self,
        sink: &mut S,
        pi: u16,
        room: u32,
        req: &SendRequest<'_, '_>,
    ) -> Result<WqeInfo> {
        let head = self.head(req)?;
        let shape = self.emit_head(sink, pi, room, req, head)?;
        Ok(self.info(pi, shape, req.flags, head))
    }

    /// [`write`](Self::write), returning only the size: the data path's form. The send ring
    /// needs nothing else, and a [`WqeInfo`] that is not used costs stores on every post when
    /// the compiler cannot see that it is dead.
    #[inline(always)]
    pub fn emit<S: WqeSink + ?Sized>(
        &self,
        sink: &mut S,
        pi: u16,
        room: u32,
        req: &SendRequest<'_, '_>,
    ) -> Result<WqeShape> {
        let head = self.head(req)?;
        self.emit_head(sink, pi, room, req, head)
    }

    /// [`emit`](Self::emit) with the head already made.
    #[inline(always)]
    pub fn emit_head<S: WqeSink + ?Sized>(
        &self,
        sink: &mut S,
        pi: u16,
        room: u32,
        req: &SendRequest<'_, '_>,
        head: Head<'_>,
    ) -> Result<WqeShape> {
        let flags = req.flags;
        match &req.op {
            SendOp::Write { source, .. } | SendOp::Send { source, .. } => {
                if req.is_inline() {
                    return self.write_inline(sink, pi, room, source, flags, head);
                }
                match *source.kind() {
                    SourceKind::Sgl(s) => {
                        self.write_gather(sink, pi, room, s, |b| b.sge(), flags, head)
                    }
                    SourceKind::Raw { 0: s, .. } => {
                        self.write_gather(sink, pi, room, s, |e| *e, flags, head)
                    }
                    SourceKind::Inline(_) => Err(Error::InvalidArgument("inline source")),
                }
            }
            SendOp::Read { dest, .. } => match *dest.kind() {
                DestKind::Bufs(b) => self.write_gather(sink, pi, room, b, |d| d.sge(), flags, head),
                DestKind::Raw(s) => self.write_gather(sink, pi, room, s, |e| *e, flags, head),
            },
            SendOp::Atomic { dest, .. } => {
                let e = atomic_sge(dest.sge(0).ok_or(Error::InvalidArgument("atomic result"))?)?;
                self.emit_gather(sink, pi, room, &[e], |e| *e, |_| Ok(()), flags, head)
            }
        }
    }

    /// Write a gather WRITE from raw elements: [`write`](Self::write) without the
    /// [`SendRequest`] (the elements are only copied into the WQE, never dereferenced).
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
        if self.datagram {
            return Err(Error::InvalidArgument("a datagram QP posts only sends"));
        }
        let head = Head::Write { remote, imm };
        let shape = self.write_gather(sink, pi, room, sgl, |e| *e, flags, head)?;
        Ok(self.info(pi, shape, flags, head))
    }

    /// Write a gather WRITE of one element, the common case, straight-line: one block, with
    /// one data segment unless the element is empty, so the checks reduce to "one SGE
    /// allowed" and "one block free". The WQE's `ds` is 3, or 2 for an empty element.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn emit_one<S: WqeSink + ?Sized>(
        &self,
        sink: &mut S,
        pi: u16,
        room: u32,
        e: Sge,
        flags: SendFlags,
        remote: RemoteBuf,
        imm: Option<u32>,
    ) -> Result<()> {
        if self.max_sge == 0 {
            return Err(Error::TooManySges { given: 1, max: 0 });
        }
        if self.datagram {
            return Err(Error::InvalidArgument("a datagram QP posts only sends"));
        }
        self.emit_one_head(sink, pi, room, e, flags, Head::Write { remote, imm }).map(|_| ())
    }

    /// [`emit_one`](Self::emit_one) after any head of at most three units (a WRITE, a READ,
    /// an RC SEND, an atomic): one block, straight-line. Returns the WQE's `ds`.
    #[inline(always)]
    pub fn emit_one_head<S: WqeSink + ?Sized>(
        &self,
        sink: &mut S,
        pi: u16,
        room: u32,
        e: Sge,
        flags: SendFlags,
        head: Head<'_>,
    ) -> Result<u8> {
        self.emit_one_with(sink, pi, room, e, flags, head, || Ok(()))
    }

    /// [`emit_one_head`](Self::emit_one_head), calling `each` once, after the checks and
    /// before anything is written, if the element is not empty (and so gets a data segment):
    /// the send queue counts its region there, on the same test of the length that decides
    /// the WQE's size. An error from `each` is returned with the ring untouched.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn emit_one_with<S: WqeSink + ?Sized>(
        &self,
        sink: &mut S,
        pi: u16,
        room: u32,
        e: Sge,
        flags: SendFlags,
        head: Head<'_>,
        each: impl FnOnce() -> Result<()>,
    ) -> Result<u8> {
        let hdr = head.units();
        debug_assert!(hdr <= 3, "one block holds the head and one data segment");
        if self.max_sge == 0 {
            return Err(Error::TooManySges { given: 1, max: 0 });
        }
        Self::check_room(1, room, sink.wqe_cnt())?;
        head.check_len(e.length as u64)?;
        let base = pi as usize * SEND_WQE_BB;
        let ds = if e.length != 0 {
            each()?;
            let (w0, w1) = halves(DataSeg::encode(&e));
            sink.put16(base + hdr * SEND_WQE_DS, w0, w1);
            hdr as u8 + 1
        } else {
            hdr as u8
        };
        self.finish(sink, pi, base, ds, flags, head);
        Ok(ds)
    }

    /// What a WQE of `shape` written at `pi` for a request with `flags` and `head` holds.
    fn info(&self, pi: u16, shape: WqeShape, flags: SendFlags, head: Head<'_>) -> WqeInfo {
        let opcode = head.opcode();
        WqeInfo {
            pi,
            opcode,
            shape,
            fm_ce_se: self.fm_ce_se(flags),
            doorbell: halves(CtrlSeg::encode(pi, opcode, self.qpn, shape.ds, FmCeSe::empty(), 0)).0,
        }
    }

    /// `qp.c` refuses `wr->num_sge > qp->sq.max_gs` first, for inline requests too.
    #[inline(always)]
    fn check_count(&self, n: usize) -> Result<()> {
        if n > self.max_sge as usize {
            return Err(Error::TooManySges { given: n, max: self.max_sge as usize });
        }
        Ok(())
    }

    fn gather_shape<T>(
        &self,
        items: &[T],
        len: impl Fn(&T) -> u32,
        hdr: usize,
    ) -> Result<WqeShape> {
        self.check_count(items.len())?;
        let n = items.iter().filter(|i| len(i) != 0).count();
        if hdr + n > MAX_DS as usize {
            let max = MAX_DS as usize - hdr;
            return Err(Error::TooManySges { given: n, max });
        }
        Ok(WqeShape::from_ds((hdr + n) as u8))
    }

    #[inline(always)]
    fn check_inline(&self, len: usize, hdr: usize) -> Result<()> {
        let fits = (MAX_DS as usize - hdr) * SEND_WQE_DS - INLINE_HEADER_LEN;
        let max = (self.max_inline as usize).min(fits);
        if len > max {
            return Err(Error::InlineTooLarge { len, max });
        }
        Ok(())
    }

    #[inline(always)]
    fn check_room(wqebbs: u32, room: u32, wqe_cnt: u32) -> Result<()> {
        if wqebbs > room || wqebbs > wqe_cnt {
            let free = if room < wqe_cnt { room } else { wqe_cnt };
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
        head: Head<'_>,
    ) -> Result<WqeShape> {
        if let ([one], Head::Write { remote, imm }) = (items, head) {
            let e = sge(one);
            self.emit_one(sink, pi, room, e, flags, remote, imm)?;
            return Ok(WqeShape::from_ds(HEADER_DS as u8 + (e.length != 0) as u8));
        }
        self.emit_gather(sink, pi, room, items, sge, |_| Ok(()), flags, head)
    }

    /// Write a gather (WRITE, SEND) or scatter (READ, atomic result) of `items` after `head`,
    /// calling `each` on every element that gets a data segment (the non-empty ones), in
    /// order, right after writing it: the send queue counts the regions it names in the same
    /// pass. An error from `each` is returned at once, and a message that [`check_message`]
    /// refuses after the last element, with the ring written only in the free blocks the WQE
    /// would have taken (nothing reads them until they are committed); either way the caller
    /// releases what `each` counted.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn emit_gather<S: WqeSink + ?Sized, T>(
        &self,
        sink: &mut S,
        pi: u16,
        room: u32,
        items: &[T],
        sge: impl Fn(&T) -> Sge,
        mut each: impl FnMut(&T) -> Result<()>,
        flags: SendFlags,
        head: Head<'_>,
    ) -> Result<WqeShape> {
        // Offsets are not wrapped here: the sink stores modulo the ring size.
        let base = pi as usize * SEND_WQE_BB;
        let wqe_cnt = sink.wqe_cnt();
        let hdr = head.units();
        // The size if every element is non-empty bounds the real size, so when it fits no
        // extra pass over the list is needed. The ring-size test comes after the `ds` one,
        // which bounds the blocks: a ring of at least `MAX_DS / 4` blocks needs no test.
        let upper = hdr + items.len();
        if items.len() > self.fast_sge as usize
            || upper > MAX_DS as usize
            || upper.div_ceil(4) > room as usize
            || upper.div_ceil(4) > wqe_cnt as usize
        {
            let shape = self.gather_shape(items, |i| sge(i).length, hdr)?;
            Self::check_room(shape.wqebbs as u32, room, wqe_cnt)?;
        }
        let mut off = base + hdr * SEND_WQE_DS;
        let mut total = 0u64;
        for item in items {
            let e = sge(item);
            if e.length != 0 {
                let (w0, w1) = halves(DataSeg::encode(&e));
                sink.put8x2(off, w0, w1);
                off += SEND_WQE_DS;
                total += e.length as u64;
                each(item)?;
            }
        }
        head.check_len(total)?;
        let ds = ((off - base) / SEND_WQE_DS) as u8;
        self.finish(sink, pi, base, ds, flags, head);
        Ok(WqeShape::from_ds(ds))
    }

    /// An inline request's WQE: head, then its payload copied after the 4-byte inline
    /// header, zero-padded to whole 16-byte units.
    // Always inlined: out of line, the caller's copy of the builder (its cursor's) is stored
    // to the stack to be passed by reference, and the nine arguments with it.
    #[inline(always)]
    pub fn write_inline<S: WqeSink + ?Sized>(
        &self,
        sink: &mut S,
        pi: u16,
        room: u32,
        source: &Source<'_, '_>,
        flags: SendFlags,
        head: Head<'_>,
    ) -> Result<WqeShape> {
        let hdr = head.units();
        self.check_count(source.count())?;
        let len = inline_len(source)?;
        self.check_inline(len, hdr)?;
        head.check_len(len as u64)?;
        let shape = WqeShape::from_ds((hdr + inline_ds_units(len)) as u8);
        let wqe_cnt = sink.wqe_cnt();
        Self::check_room(shape.wqebbs as u32, room, wqe_cnt)?;
        let base = pi as usize * SEND_WQE_BB;
        if len != 0 {
            let header = InlineSeg::encode_header(len as u32);
            let mut w = InlineWriter::new(&mut *sink, base + hdr * SEND_WQE_DS, header);
            // Plain pieces, the common case, are pushed in this loop so that the writer
            // stays in registers; buffers go through the core's bounce copy.
            match source.kind() {
                SourceKind::Inline(pieces) => {
                    for p in pieces.iter() {
                        w.push(p);
                    }
                }
                _ => source.for_each_inline_chunk(|bytes| w.push(bytes)),
            }
            w.finish(base + shape.ds as usize * SEND_WQE_DS);
        }
        self.finish(sink, pi, base, shape.ds, flags, head);
        Ok(shape)
    }

    /// Store the head's segments and the control segment (control last).
    #[inline(always)]
    fn finish<S: WqeSink + ?Sized>(
        &self,
        sink: &mut S,
        pi: u16,
        base: usize,
        ds: u8,
        flags: SendFlags,
        head: Head<'_>,
    ) {
        head.store(sink, base);
        let ctrl =
            CtrlSeg::encode(pi, head.opcode(), self.qpn, ds, self.fm_ce_se(flags), head.imm());
        let (lo, hi) = halves(ctrl);
        sink.put16(base, lo, hi);
    }
}

const FENCE: u8 = SendFlags::FENCE.bits() as u8;
const SIGNALED: u8 = SendFlags::SIGNALED.bits() as u8;
const SOLICITED: u8 = SendFlags::SOLICITED.bits() as u8;
/// `IBV_SEND_FENCE` (bit 0) to `MLX5_WQE_CTRL_FENCE` (bit 7).
const FENCE_TO_FM: u32 = FmCeSe::FENCE.bits().trailing_zeros() - FENCE.trailing_zeros();
/// `IBV_SEND_SIGNALED` (bit 1) to `MLX5_WQE_CTRL_CQ_UPDATE` (bit 3).
const SIGNALED_TO_FM: u32 = FmCeSe::CQ_UPDATE.bits().trailing_zeros() - SIGNALED.trailing_zeros();
// `IBV_SEND_SOLICITED` (bit 2) to `MLX5_WQE_CTRL_SOLICITED` (bit 1): one to the right.
const _: () = assert!(SOLICITED >> 1 == FmCeSe::SOLICITED.bits());

/// Up to [`MAX_DS`] elements collected without allocation, for [`WqeBuilder::shape`].
struct FixedSges {
    e: [Sge; MAX_DS as usize],
    n: usize,
    /// Elements beyond the capacity (counted, so that the count check still refuses them).
    over: usize,
}

impl FixedSges {
    fn as_slice(&self) -> &[Sge] {
        &self.e[..self.n]
    }
}

impl FromIterator<Sge> for FixedSges {
    fn from_iter<I: IntoIterator<Item = Sge>>(it: I) -> Self {
        let mut f =
            FixedSges { e: [Sge::new(0, 0, rdma_pmd::Lkey(0)); MAX_DS as usize], n: 0, over: 0 };
        for e in it {
            if f.n < f.e.len() {
                f.e[f.n] = e;
                f.n += 1;
            } else {
                f.over += 1;
            }
        }
        f
    }
}

/// The data segment of an atomic's result: the element's first 8 bytes
/// (`set_data_ptr_seg_atomic` writes `MLX5_ATOMIC_SIZE` as the byte count).
#[inline]
pub fn atomic_sge(e: Sge) -> Result<Sge> {
    if e.length < ATOMIC_LEN {
        return Err(Error::InvalidArgument("an atomic's result needs at least 8 bytes"));
    }
    Ok(Sge::new(e.addr, ATOMIC_LEN, e.lkey))
}

/// Total inline bytes of a request, refusing sums that overflow.
#[inline(always)]
fn inline_len(source: &Source<'_, '_>) -> Result<usize> {
    source
        .total_len()
        .map(|l| l as usize)
        .ok_or(Error::InlineTooLarge { len: usize::MAX, max: MAX_INLINE as usize })
}

/// Streams inline payload into the ring as aligned 8-byte words.
///
/// The payload follows the 4-byte inline header, so its bytes sit 4 (or, after an odd
/// piece, any number) bytes into a ring word. The writer keeps the partial word in a
/// register as a little-endian `u64` (byte `i` of the word in bits `8i..8i + 8`) and merges
/// each 8-byte load of the payload into it with two shifts: no byte-by-byte copy and no
/// read of a word assembled in memory.
struct InlineWriter<'s, S: WqeSink + ?Sized> {
    sink: &'s mut S,
    /// Ring offset (unwrapped) of the word `acc` will become.
    off: usize,
    /// The word being filled: its first `n` bytes (in memory order), zero above them.
    acc: u64,
    /// Bytes in `acc`, below 8.
    n: usize,
}

impl<'s, S: WqeSink + ?Sized> InlineWriter<'s, S> {
    /// A writer whose first word starts with the inline header at ring offset `off`.
    #[inline(always)]
    fn new(sink: &'s mut S, off: usize, header: [u8; INLINE_HEADER_LEN]) -> Self {
        InlineWriter { sink, off, acc: u32::from_le_bytes(header) as u64, n: INLINE_HEADER_LEN }
    }

    /// Append the low `k` bytes of `w` (`1 <= k <= 8`; the bytes above them zero).
    #[inline(always)]
    fn put(&mut self, w: u64, k: usize) {
        debug_assert!(self.n < 8 && (1..=8).contains(&k));
        debug_assert!(k == 8 || w >> (8 * k) == 0);
        let shift = 8 * self.n as u32;
        self.acc |= w << shift;
        let filled = self.n + k;
        if filled >= 8 {
            self.sink.put8(self.off, self.acc.to_le_bytes());
            self.off += 8;
            // The bytes of `w` that did not fit; none when the word was empty (`shift`
            // 0: two shifts, so that no shift reaches 64).
            self.acc = (w >> (63 - shift)) >> 1;
            self.n = filled - 8;
        } else {
            self.n = filled;
        }
    }

    /// Append `bytes`.
    #[inline(always)]
    fn push(&mut self, bytes: &[u8]) {
        let mut bytes = bytes;
        // The common case: the payload starts right after the 4-byte header (or after pieces
        // that left the word half full), the word being filled the first of a 16-byte unit.
        // Then every 16 bytes of payload make one whole unit, stored with one 16-byte store
        // (`put16`, the store every segment is written with), the shifts by a constant.
        const SHIFT: u32 = 8 * INLINE_HEADER_LEN as u32;
        if self.n == INLINE_HEADER_LEN && self.off.is_multiple_of(SEND_WQE_DS) {
            let mut units = bytes.chunks_exact(16);
            for u in &mut units {
                let (mut a, mut b) = ([0u8; 8], [0u8; 8]);
                a.copy_from_slice(&u[..8]);
                b.copy_from_slice(&u[8..]);
                let (a, b) = (u64::from_le_bytes(a), u64::from_le_bytes(b));
                let lo = self.acc | a << SHIFT;
                let hi = a >> (64 - SHIFT) | b << SHIFT;
                self.sink.put16(self.off, lo.to_le_bytes(), hi.to_le_bytes());
                self.off += SEND_WQE_DS;
                self.acc = b >> (64 - SHIFT);
            }
            bytes = units.remainder();
        }
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            self.put(u64::from_le_bytes(b), 8);
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            self.put(load_le_short(rest), rest.len());
        }
    }

    /// Zero-pad the last word and every word up to ring offset `end` (the WQE's `ds * 16`).
    #[inline]
    fn finish(mut self, end: usize) {
        if self.n != 0 {
            self.sink.put8(self.off, self.acc.to_le_bytes());
            self.off += 8;
        }
        while self.off < end {
            self.sink.put8(self.off, [0; 8]);
            self.off += 8;
        }
    }
}

/// `b` (1 to 7 bytes) as a little-endian `u64`, zero above: a few overlapping loads rather
/// than a copy of variable length.
#[inline(always)]
fn load_le_short(b: &[u8]) -> u64 {
    let n = b.len();
    debug_assert!((1..8).contains(&n));
    if n >= 4 {
        // Two 4-byte loads that overlap when `n < 8`; the overlap holds the same bytes.
        let lo = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64;
        let hi = u32::from_le_bytes([b[n - 4], b[n - 3], b[n - 2], b[n - 1]]) as u64;
        lo | hi << (8 * (n - 4))
    } else {
        // First, middle and last byte: for 1 to 3 bytes that is every byte.
        (b[0] as u64) | (b[n / 2] as u64) << (8 * (n / 2)) | (b[n - 1] as u64) << (8 * (n - 1))
    }
}

/// A send ring of 64-byte slots that accepts aligned 8- and 16-byte stores.
///
/// Contract for implementors: [`put8`](WqeSink::put8) stores the 8 bytes, in the order given,
/// at byte `off mod (wqe_cnt * 64)` of the ring; [`put16`](WqeSink::put16) stores 16 bytes the
/// same way. The builder passes `off` multiples of 8 (of 16 for `put16`), not reduced modulo
/// the ring size; an implementation must stay memory-safe for any `off` (masking it with
/// `wqe_cnt * 64 - 1` is enough).
pub trait WqeSink {
    /// Number of 64-byte slots; a power of two, at least 1.
    fn wqe_cnt(&self) -> u32;

    /// Store `bytes` (memory order) at byte `off mod (wqe_cnt * 64)` of the ring.
    fn put8(&mut self, off: usize, bytes: [u8; 8]);

    /// Store `lo` then `hi` (memory order) at bytes `off..off + 16` (mod the ring size) of the
    /// ring; `off` is a multiple of 16, so the two words never straddle the ring's end.
    #[inline(always)]
    fn put16(&mut self, off: usize, lo: [u8; 8], hi: [u8; 8]) {
        self.put8(off, lo);
        self.put8(off + 8, hi);
    }

    /// Store the same 16 bytes as [`put16`](WqeSink::put16), as two 8-byte stores at one
    /// wrapped offset: a gather's data segments, where building the 16-byte value from two
    /// words would cost more instructions than the second store.
    #[inline(always)]
    fn put8x2(&mut self, off: usize, lo: [u8; 8], hi: [u8; 8]) {
        self.put8(off, lo);
        self.put8(off + 8, hi);
    }
}

impl<S: WqeSink + ?Sized> WqeSink for &mut S {
    #[inline(always)]
    fn wqe_cnt(&self) -> u32 {
        (**self).wqe_cnt()
    }

    #[inline(always)]
    fn put8(&mut self, off: usize, bytes: [u8; 8]) {
        (**self).put8(off, bytes)
    }

    #[inline(always)]
    fn put16(&mut self, off: usize, lo: [u8; 8], hi: [u8; 8]) {
        (**self).put16(off, lo, hi)
    }

    #[inline(always)]
    fn put8x2(&mut self, off: usize, lo: [u8; 8], hi: [u8; 8]) {
        (**self).put8x2(off, lo, hi)
    }
}

fn check_wqe_cnt(wqe_cnt: u32) -> Result<usize> {
    if wqe_cnt == 0 || !wqe_cnt.is_power_of_two() || wqe_cnt > 1 << 24 {
        return Err(Error::InvalidArgument("wqe_cnt must be a power of two up to 2^24"));
    }
    Ok(wqe_cnt as usize * SEND_WQE_BB)
}

/// A send ring in device-visible memory, written only with stores of 8 bytes (relaxed atomic)
/// and 16 bytes (see `store16`).
///
/// Nothing orders these stores with respect to the device: after the last WQE of a batch the
/// caller issues the `udma_to_device_barrier` equivalent before writing the doorbell record.
#[derive(Debug)]
pub struct RawRing {
    base: NonNull<u64>,
    /// `wqe_cnt * 64 - 1`: wraps an offset into the ring.
    mask: usize,
    wqe_cnt: u32,
}

// SAFETY: a RawRing is an exclusive writer handle to memory it does not own; moving it to
// another thread moves that exclusivity with it.
unsafe impl Send for RawRing {}

impl RawRing {
    /// A ring of `wqe_cnt` slots starting at `base`.
    ///
    /// # Safety
    /// `base` must be 16-byte aligned and valid for reads and writes of `wqe_cnt * 64` bytes for
    /// as long as the returned value lives, and nothing may hold a Rust reference into those bytes
    /// meanwhile (the device, and readers using `rdma_pmd_hal::access`, may access them).
    pub unsafe fn new(base: NonNull<u8>, wqe_cnt: u32) -> Result<Self> {
        let len = check_wqe_cnt(wqe_cnt)?;
        // 16: a segment is stored in one 16-byte store (`store16`). The device asks for more
        // (the queue's buffer is page-aligned, the send ring a whole number of blocks into it).
        if base.as_ptr() as usize & 15 != 0 {
            return Err(Error::InvalidArgument("send ring not 16-byte aligned"));
        }
        Ok(RawRing { base: base.cast(), mask: len - 1, wqe_cnt })
    }

    /// The ring's first byte.
    pub fn base(&self) -> NonNull<u8> {
        self.base.cast()
    }
}

impl WqeSink for RawRing {
    #[inline(always)]
    fn wqe_cnt(&self) -> u32 {
        self.wqe_cnt
    }

    #[inline(always)]
    fn put8(&mut self, off: usize, bytes: [u8; 8]) {
        // SAFETY: `new`'s caller vouched for `wqe_cnt * 64` bytes at `base`, 16-byte aligned;
        // `mask` is that length minus one.
        unsafe { store8(self.base, self.mask, off, bytes) }
    }

    #[inline(always)]
    fn put16(&mut self, off: usize, lo: [u8; 8], hi: [u8; 8]) {
        // SAFETY: as in `put8`.
        unsafe { store16(self.base, self.mask, off, lo, hi) }
    }
}

/// Store `bytes` at byte `off & mask & !7` of the ring at `base`.
///
/// # Safety
/// `base` must be 16-byte aligned and valid for writes of `mask + 1` bytes, a power of two and
/// a multiple of 64 (a whole number of slots).
#[inline(always)]
unsafe fn store8(base: NonNull<u64>, mask: usize, off: usize, bytes: [u8; 8]) {
    let word = (off & mask & !7) >> 3;
    // SAFETY: `word * 8 <= mask - 7`, so the 8 bytes lie inside the block the caller vouched
    // for; aligned because `base` is. Atomic (`access`): the device (or the model's thread)
    // accesses the ring atomically too; the barrier before the doorbell record orders it.
    unsafe { access::store_u64(base.as_ptr().add(word), u64::from_ne_bytes(bytes)) }
}

/// Store `lo`, `hi` at byte `off & mask & !15` of the ring at `base` as two 8-byte stores,
/// the offset wrapped once.
///
/// # Safety
/// As for [`store8`].
#[inline(always)]
unsafe fn store8x2(base: NonNull<u64>, mask: usize, off: usize, lo: [u8; 8], hi: [u8; 8]) {
    let word = (off & mask & !15) >> 3;
    // SAFETY: `word * 8` is a multiple of 16 at most `mask - 15` (`mask + 1` is a multiple of
    // 64), so both words lie inside the block the caller vouched for; aligned because `base`
    // is. Atomic (`access`), as in `store8`.
    unsafe {
        let p = base.as_ptr().add(word);
        access::store_u64(p, u64::from_ne_bytes(lo));
        access::store_u64(p.add(1), u64::from_ne_bytes(hi));
    }
}

/// Store the 16 bytes `lo`, `hi` at byte `off & mask & !15` of the ring at `base`: one
/// segment, the unit every ring sink writes.
///
/// On x86_64 this is one 16-byte store rather than two of 8. A WQE then takes three stores
/// instead of six, so half as many wait in the store queue while the ring's cache lines are
/// fetched (the ring is larger than the L1 cache, so every lap misses), and fewer of the loop's
/// loads are held back behind them. The device sees no difference: it reads the ring after the doorbell, and the
/// barrier before the doorbell record orders these stores like any others.
///
/// This store is the one access to DMA memory that is not a `rdma_pmd_hal::access` atomic
/// (Rust has no 16-byte atomic, and two 8-byte atomic stores would double the stores per WQE,
/// the cost described above). It is free of data races not by construction but by the send queue's protocol,
/// which orders it by happens-before with every access of another thread to these bytes; see
/// the SAFETY comment inside.
///
/// # Safety
/// As for [`store8`], and the ring must be used as a send queue's: the device reads a slot only
/// after a doorbell record that covers it, never writes the ring, and the caller rewrites a
/// slot only after a completion for its WQE (or a later one) has been seen.
#[inline(always)]
unsafe fn store16(base: NonNull<u64>, mask: usize, off: usize, lo: [u8; 8], hi: [u8; 8]) {
    let word = (off & mask & !15) >> 3;
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::__m128i;
        let words = [u64::from_ne_bytes(lo), u64::from_ne_bytes(hi)];
        // SAFETY: `__m128i` is 16 plain bytes, as `words` is (in memory order). `word * 8` is a
        // multiple of 16 at most `mask - 15` (`mask + 1` is a multiple of 64), so the 16 bytes
        // lie inside the block the caller vouched for, 16-byte aligned because `base` is.
        //
        // Not atomic, so every access to these bytes from another thread (the device model) must
        // be ordered with it by happens-before; the send queue's protocol provides both edges:
        // * this store → the model's loads of the WQE: program order puts it before
        //   `barrier::to_device` (a Release fence) and the doorbell-record store after it; the
        //   model reads a slot only once a doorbell record it loaded covers it, and that load is
        //   followed by an Acquire fence (`HeapDma::read`; the doorbell handler also hands the
        //   work to the engine thread under a mutex), so fence–fence synchronization orders
        //   this store before the model's reads.
        // * the model's loads of an earlier lap → this store: the model never writes the ring
        //   and reads a WQE before it writes the CQE completing it (or a later WQE); that CQE's
        //   owner word is stored after a Release fence (`HeapDma::write`), and the caller
        //   reuses the slot only after loading that owner word and issuing
        //   `barrier::from_device` (an Acquire fence).
        // The driver's own loads of the ring (BlueFlame copies) are on this thread,
        // ordered by program order. A real device is outside the Rust memory model.
        unsafe {
            let v = core::mem::transmute::<[u64; 2], __m128i>(words);
            base.as_ptr().add(word).cast::<__m128i>().write_volatile(v)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as above (bounds, alignment), for two 8-byte words; atomic (`access`), so these
    // need no protocol argument.
    unsafe {
        let p = base.as_ptr().add(word);
        access::store_u64(p, u64::from_ne_bytes(lo));
        access::store_u64(p.add(1), u64::from_ne_bytes(hi));
    }
}

/// A [`RawRing`] whose size `N` is a compile-time constant, so wrapping an offset is an `and`
/// with a constant and the stores of one block share one address computation. The send
/// queue's data path writes through this.
#[derive(Debug)]
pub struct FixedRing<const N: usize> {
    base: NonNull<u64>,
}

// SAFETY: as for RawRing: an exclusive writer handle, moved with its exclusivity.
unsafe impl<const N: usize> Send for FixedRing<N> {}

impl<const N: usize> FixedRing<N> {
    /// `N * 64 - 1`: wraps an offset into the ring.
    const MASK: usize = N * SEND_WQE_BB - 1;

    /// The same ring, which must have `N` slots.
    pub fn new(ring: RawRing) -> Result<Self> {
        if ring.wqe_cnt as usize != N {
            return Err(Error::InvalidArgument("ring size differs from N"));
        }
        Ok(FixedRing { base: ring.base })
    }
}

impl<const N: usize> FixedRing<N> {
    /// A handle for one post: its base address is read once, so the compiler need not reload
    /// it after every store to the ring.
    #[inline(always)]
    pub fn view(&mut self) -> RingView<'_, N> {
        RingView { base: self.base, _ring: PhantomData }
    }

    /// The first 8 bytes (memory order, as a native word) of the slot of WQE counter
    /// `counter`.
    #[inline(always)]
    pub fn head(&self, counter: u16) -> u64 {
        let slot = counter as usize & (N - 1);
        // SAFETY: `slot < N`, so the word lies inside the `N * 64` bytes at `base` that the
        // RawRing's creator vouched for (valid for reads, 16-byte aligned). Atomic (`access`),
        // as every other thread's access to the ring is; the ring's own stores are this
        // thread's, ordered by program order.
        unsafe { access::load_u64(self.base.as_ptr().add(slot * (SEND_WQE_BB / 8))) }
    }

    /// The 64 bytes of the slot of WQE counter `counter`, as eight native words in memory
    /// order: the source of a BlueFlame copy.
    #[inline(always)]
    pub fn block(&self, counter: u16) -> [u64; 8] {
        let slot = counter as usize & (N - 1);
        // SAFETY: as in `head`: the 64 bytes of slot `slot < N` lie inside the ring.
        let p = unsafe { self.base.as_ptr().add(slot * (SEND_WQE_BB / 8)) };
        // SAFETY: `k < 8`, inside the slot; atomic, as in `head`.
        core::array::from_fn(|k| unsafe { access::load_u64(p.add(k)) })
    }
}

/// A [`FixedRing`] borrowed for one post (see [`FixedRing::view`]).
#[derive(Debug)]
pub struct RingView<'a, const N: usize> {
    base: NonNull<u64>,
    _ring: PhantomData<&'a mut FixedRing<N>>,
}

impl<const N: usize> WqeSink for RingView<'_, N> {
    #[inline(always)]
    fn wqe_cnt(&self) -> u32 {
        N as u32
    }

    #[inline(always)]
    fn put8(&mut self, off: usize, bytes: [u8; 8]) {
        // SAFETY: the view borrows a FixedRing, built from a RawRing of `N` slots whose creator
        // vouched for `N * 64` bytes at `base`, 16-byte aligned.
        unsafe { store8(self.base, FixedRing::<N>::MASK, off, bytes) }
    }

    #[inline(always)]
    fn put16(&mut self, off: usize, lo: [u8; 8], hi: [u8; 8]) {
        // SAFETY: as in `put8`.
        unsafe { store16(self.base, FixedRing::<N>::MASK, off, lo, hi) }
    }

    #[inline(always)]
    fn put8x2(&mut self, off: usize, lo: [u8; 8], hi: [u8; 8]) {
        // SAFETY: as in `put8`.
        unsafe { store8x2(self.base, FixedRing::<N>::MASK, off, lo, hi) }
    }
}

/// A sink that passes every store of a one-block WQE on to `sink` and keeps the block's words:
/// the source of a one-block BlueFlame burst, which then need not read the block back from the
/// ring. Words the WQE does not store stay 0 (the HCA reads only the WQE's own `ds` units of a
/// BlueFlame copy).
///
/// Every store must lie in that one block (`emit_one_with`'s WQEs): a word is placed by its
/// offset within a block. Meant for straight-line writers, whose offsets fold to constants, so
/// that the block lives in registers.
#[derive(Debug)]
pub struct Capture<S> {
    sink: S,
    /// The block's words, in memory order.
    pub block: [u64; 8],
}

impl<S: WqeSink> Capture<S> {
    /// Capture the stores of a one-block WQE into `sink`.
    #[inline(always)]
    pub fn new(sink: S) -> Self {
        Capture { sink, block: [0; 8] }
    }

    /// The index in the block of the word at byte `off` of the ring.
    #[inline(always)]
    fn word(off: usize) -> usize {
        (off % SEND_WQE_BB) / 8
    }

    /// Keep the 16 bytes stored at `off`, a multiple of 16: words `2k, 2k + 1`, never past
    /// the block.
    #[inline(always)]
    fn keep16(&mut self, off: usize, lo: [u8; 8], hi: [u8; 8]) {
        let i = Self::word(off) & !1;
        self.block[i] = u64::from_ne_bytes(lo);
        self.block[i | 1] = u64::from_ne_bytes(hi);
    }
}

impl<S: WqeSink> WqeSink for Capture<S> {
    #[inline(always)]
    fn wqe_cnt(&self) -> u32 {
        self.sink.wqe_cnt()
    }

    #[inline(always)]
    fn put8(&mut self, off: usize, bytes: [u8; 8]) {
        self.sink.put8(off, bytes);
        self.block[Self::word(off)] = u64::from_ne_bytes(bytes);
    }

    #[inline(always)]
    fn put16(&mut self, off: usize, lo: [u8; 8], hi: [u8; 8]) {
        self.sink.put16(off, lo, hi);
        self.keep16(off, lo, hi);
    }

    #[inline(always)]
    fn put8x2(&mut self, off: usize, lo: [u8; 8], hi: [u8; 8]) {
        self.sink.put8x2(off, lo, hi);
        self.keep16(off, lo, hi);
    }
}

/// A send ring over an ordinary byte buffer.
#[derive(Debug)]
pub struct SliceRing<'a> {
    buf: &'a mut [u8],
    mask: usize,
    wqe_cnt: u32,
}

impl<'a> SliceRing<'a> {
    /// The first `wqe_cnt * 64` bytes of `buf` as a ring of `wqe_cnt` slots.
    pub fn new(buf: &'a mut [u8], wqe_cnt: u32) -> Result<Self> {
        let len = check_wqe_cnt(wqe_cnt)?;
        if buf.len() < len {
            return Err(Error::InvalidArgument("buffer shorter than wqe_cnt * 64"));
        }
        Ok(SliceRing { buf, mask: len - 1, wqe_cnt })
    }

    /// The ring's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..=self.mask]
    }

    /// The 64 bytes of one slot (`slot` is masked).
    pub fn slot(&self, slot: u32) -> &[u8] {
        let s = (slot & (self.wqe_cnt - 1)) as usize * SEND_WQE_BB;
        &self.buf[s..s + SEND_WQE_BB]
    }

    /// Copy `wqebbs` blocks of the WQE posted at counter `pi` into `out`, unwrapped (block 0
    /// first): the logical WQE, and the source of a BlueFlame copy. Returns the bytes copied.
    pub fn copy_wqe(&self, pi: u16, wqebbs: usize, out: &mut [u8]) -> usize {
        let mut n = 0;
        for (i, dst) in out.chunks_exact_mut(SEND_WQE_BB).take(wqebbs).enumerate() {
            dst.copy_from_slice(self.slot(pi as u32 + i as u32));
            n += SEND_WQE_BB;
        }
        n
    }
}

impl WqeSink for SliceRing<'_> {
    #[inline(always)]
    fn wqe_cnt(&self) -> u32 {
        self.wqe_cnt
    }

    #[inline(always)]
    fn put8(&mut self, off: usize, bytes: [u8; 8]) {
        let off = off & self.mask & !7;
        self.buf[off..off + 8].copy_from_slice(&bytes);
    }
}

#[cfg(test)]
mod tests;
