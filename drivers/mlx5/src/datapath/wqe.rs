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
//! The ring sinks the builder stores through are in `wqe/sink.rs`, the inline payload writer
//! in `wqe/inline.rs`.

use rdma_pmd::post::{check_message, SourceKind, ATOMIC_LEN};
use rdma_pmd::{
    AtomicOp, DestKind, Error, QpNum, RemoteBuf, Result, SendFlags, SendOp, SendRequest, Sge,
    Source, UdDest,
};

use crate::layout::codes::{FmCeSe, SendOpcode, MAX_DS, SEND_WQE_BB, SEND_WQE_DS};
use crate::layout::wqe::{
    halves, inline_ds_units, AtomicSeg, CtrlSeg, DataSeg, DatagramSeg, InlineSeg, RaddrSeg,
    DATAGRAM_LEN, INLINE_HEADER_LEN, SEG_LEN,
};

mod inline;
mod sink;

use inline::{inline_len, InlineWriter};
pub use sink::{Capture, FixedRing, RawRing, RingView, SliceRing, WqeSink};

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

#[cfg(test)]
mod tests;
