//! What a post asks for: the request, its source and operation, and the message checks.

use crate::addr::{RemoteBuf, UdDest};
use crate::dest::Dest;
use crate::error::{Error, Result};
use crate::flags::SendFlags;
use crate::region::LocalBuf;
use crate::sge::Sge;

/// What a send queue accepts, fixed when it is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Caps {
    /// Requests of the smallest size that fit at once (`ibv_qp_cap.max_send_wr`).
    pub max_send_wr: u32,
    /// Scatter-gather elements per request (`ibv_qp_cap.max_send_sge`).
    pub max_sge: u32,
    /// Inline payload bytes per request (`ibv_qp_cap.max_inline_data`).
    pub max_inline: u32,
}

/// Where a write's payload comes from.
#[derive(Clone, Copy, Debug)]
pub enum SourceKind<'a, 'r> {
    /// Registered buffers, gathered in order.
    Sgl(&'a [LocalBuf<'r>]),
    /// Plain bytes, copied into the request (no registration).
    Inline(&'a [&'a [u8]]),
    /// Raw scatter-gather elements; only reachable through `unsafe` ([`Source::raw`]).
    #[non_exhaustive]
    Raw(&'a [Sge]),
}

/// The payload of a write request. Construct with [`Source::sgl`], [`Source::inline`] or the
/// `unsafe` [`Source::raw`].
#[derive(Clone, Copy, Debug)]
pub struct Source<'a, 'r>(SourceKind<'a, 'r>);

impl<'a, 'r> Source<'a, 'r> {
    /// Registered buffers.
    #[inline]
    pub const fn sgl(sgl: &'a [LocalBuf<'r>]) -> Self {
        Source(SourceKind::Sgl(sgl))
    }

    /// Bytes to copy inline.
    #[inline]
    pub const fn inline(data: &'a [&'a [u8]]) -> Self {
        Source(SourceKind::Inline(data))
    }

    /// Raw elements, as `ibv_post_send` takes them.
    ///
    /// # Safety
    /// Every element must name memory registered under its `lkey` that stays allocated and
    /// registered until the request's completion is reaped. With [`SendFlags::INLINE`] each
    /// `addr` must instead be a CPU address readable for `length` bytes during the post.
    #[allow(unsafe_code)]
    pub const unsafe fn raw(sgl: &'a [Sge]) -> Self {
        Source(SourceKind::Raw(sgl))
    }

    /// The payload, for backends.
    #[inline]
    pub const fn kind(&self) -> &SourceKind<'a, 'r> {
        &self.0
    }

    /// Number of elements (buffers or inline pieces).
    #[inline]
    pub fn count(&self) -> usize {
        match self.0 {
            SourceKind::Sgl(s) => s.len(),
            SourceKind::Inline(s) => s.len(),
            SourceKind::Raw(s) => s.len(),
        }
    }

    /// Hand the payload's bytes, in order, to `f` for an inline copy. Plain inline pieces go
    /// as they are; the bytes of registered buffers (and, under [`Source::raw`]'s contract,
    /// raw elements) are first copied into a bounce buffer of [`INLINE_CHUNK`] bytes on the
    /// stack, so that no reference into memory the device shares is ever formed. This is the
    /// one place that reads a source's bytes through its raw parts: backends stay safe.
    #[inline]
    pub fn for_each_inline_chunk(&self, mut f: impl FnMut(&[u8])) {
        match self.0 {
            SourceKind::Inline(pieces) => pieces.iter().for_each(|p| f(p)),
            SourceKind::Sgl(bufs) => {
                for b in bufs {
                    bounce(b.as_ptr(), b.len(), &mut f);
                }
            }
            SourceKind::Raw(sges) => {
                for e in sges {
                    bounce(e.addr as usize as *const u8, e.length as usize, &mut f);
                }
            }
        }
    }

    /// Total payload bytes, or `None` if it overflows 32 bits (an RDMA message is at most
    /// 2^31 bytes).
    #[inline]
    pub fn total_len(&self) -> Option<u32> {
        let mut total: u64 = 0;
        match self.0 {
            SourceKind::Sgl(s) => s.iter().for_each(|b| total += b.len() as u64),
            SourceKind::Inline(s) => s.iter().for_each(|b| total += b.len() as u64),
            SourceKind::Raw(s) => s.iter().for_each(|e| total += e.length as u64),
        }
        if total > 1 << 31 {
            None
        } else {
            Some(total as u32)
        }
    }
}

/// Bytes of a registered or raw source copied out per step of [`Source::for_each_inline_chunk`].
pub const INLINE_CHUNK: usize = 64;

/// Copy `len` bytes at `p` through a stack buffer into `f`, a chunk at a time.
#[inline]
fn bounce(p: *const u8, len: usize, f: &mut impl FnMut(&[u8])) {
    let mut buf = [0u8; INLINE_CHUNK];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(INLINE_CHUNK);
        // SAFETY: `p` is readable for `len` bytes: a `LocalBuf`'s pointer is, by
        // `LocalBuf::from_raw_parts`' contract, for as long as the buffer is borrowed (it is,
        // by the source), and a raw element's address is, by `Source::raw`'s contract, for the
        // duration of the post. The copy is made of atomic accesses (a peer may be writing the
        // region) and forms no reference into that memory.
        #[allow(unsafe_code)]
        unsafe {
            crate::access::load_bytes(p.add(done), &mut buf[..n])
        };
        f(&buf[..n]);
        done += n;
    }
}

/// What a send-queue request does (`ibv_send_wr.opcode` and the fields it uses).
#[derive(Clone, Copy, Debug)]
pub enum SendOp<'a, 'r> {
    /// `IBV_WR_RDMA_WRITE`, or `IBV_WR_RDMA_WRITE_WITH_IMM` with `imm`.
    Write {
        /// The payload.
        source: Source<'a, 'r>,
        /// Where it goes.
        remote: RemoteBuf,
        /// Immediate data: a number, sent big-endian, that the peer reads back as
        /// `be32toh(wc.imm_data)`.
        imm: Option<u32>,
    },
    /// `IBV_WR_SEND`, or `IBV_WR_SEND_WITH_IMM` with `imm`; to a datagram destination on a UD
    /// or GSI queue pair.
    Send {
        /// The payload.
        source: Source<'a, 'r>,
        /// Immediate data, as for writes.
        imm: Option<u32>,
        /// The destination of a datagram (UD and GSI queue pairs only).
        ud: Option<UdDest>,
    },
    /// `IBV_WR_RDMA_READ`: the remote bytes are scattered into `dest`.
    Read {
        /// Where the bytes land.
        dest: Dest<'a, 'r>,
        /// What is read.
        remote: RemoteBuf,
    },
    /// `IBV_WR_ATOMIC_CMP_AND_SWP` or `IBV_WR_ATOMIC_FETCH_AND_ADD` on the 8 bytes at `remote`
    /// (8-aligned); the value found there is written into the first 8 bytes of `dest`.
    Atomic {
        /// Where the original value lands (one element of at least 8 bytes).
        dest: Dest<'a, 'r>,
        /// The remote 8 bytes.
        remote: RemoteBuf,
        /// Which operation, with its operands.
        op: AtomicOp,
    },
}

/// The two atomics of the verbs (8 bytes each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    /// Store `swap` if the remote value equals `compare`.
    CompareSwap {
        /// The value expected.
        compare: u64,
        /// The value stored on a match.
        swap: u64,
    },
    /// Add `add` to the remote value.
    FetchAdd {
        /// The addend.
        add: u64,
    },
}

/// Bytes an atomic reads and writes.
pub const ATOMIC_LEN: u32 = 8;

/// One send-queue request: `ibv_send_wr` for the operations this API posts.
#[derive(Clone, Copy, Debug)]
pub struct SendRequest<'a, 'r> {
    /// Comes back as the completion's `wr_id` (`context` of `rdma_post_writev`).
    pub wr_id: u64,
    /// `ibv_send_flags`.
    pub flags: SendFlags,
    /// The operation.
    pub op: SendOp<'a, 'r>,
}

impl<'a, 'r> SendRequest<'a, 'r> {
    /// An RDMA WRITE (with immediate if `imm` is set).
    #[inline(always)]
    pub const fn write(
        wr_id: u64,
        source: Source<'a, 'r>,
        flags: SendFlags,
        remote: RemoteBuf,
        imm: Option<u32>,
    ) -> Self {
        SendRequest { wr_id, flags, op: SendOp::Write { source, remote, imm } }
    }

    /// The payload of a WRITE or SEND.
    #[inline(always)]
    pub fn source(&self) -> Option<&Source<'a, 'r>> {
        match &self.op {
            SendOp::Write { source, .. } | SendOp::Send { source, .. } => Some(source),
            _ => None,
        }
    }

    /// The request's payload is copied inline: a WRITE or SEND whose flag asks for it or whose
    /// source is plain bytes.
    #[inline]
    pub fn is_inline(&self) -> bool {
        match self.source() {
            Some(s) => {
                self.flags.contains(SendFlags::INLINE) || matches!(s.0, SourceKind::Inline(_))
            }
            None => false,
        }
    }

    /// Check the request against a queue's capabilities, as rdma-core's provider does before it
    /// writes anything, and its size and remote range as an RDMA message allows
    /// ([`check_message`]). Service-specific rules (a datagram destination only on UD
    /// queue pairs) are the backend's.
    #[inline]
    pub fn check(&self, caps: &Caps) -> Result<()> {
        match &self.op {
            SendOp::Write { source, remote, .. } => {
                let len =
                    source.total_len().ok_or(Error::InvalidArgument("message above 2 GiB"))?;
                check_message(len as u64, *remote)?;
                self.check_payload(source, len, caps)
            }
            SendOp::Send { source, .. } => {
                let len =
                    source.total_len().ok_or(Error::InvalidArgument("message above 2 GiB"))?;
                check_message(len as u64, RemoteBuf::default())?;
                self.check_payload(source, len, caps)
            }
            SendOp::Read { dest, remote } => {
                if self.flags.contains(SendFlags::INLINE) {
                    return Err(Error::InvalidArgument("an RDMA READ cannot be inline"));
                }
                let len = dest.total_len().ok_or(Error::InvalidArgument("message above 2 GiB"))?;
                check_message(len as u64, *remote)?;
                if dest.count() > caps.max_sge as usize {
                    return Err(Error::TooManySges {
                        given: dest.count(),
                        max: caps.max_sge as usize,
                    });
                }
                Ok(())
            }
            SendOp::Atomic { dest, remote, .. } => {
                if self.flags.contains(SendFlags::INLINE) {
                    return Err(Error::InvalidArgument("an atomic cannot be inline"));
                }
                match dest.sge(0) {
                    Some(e) if dest.count() == 1 && e.length >= ATOMIC_LEN => {}
                    _ => {
                        return Err(Error::InvalidArgument(
                            "an atomic's result needs one buffer of at least 8 bytes",
                        ))
                    }
                }
                check_message(ATOMIC_LEN as u64, *remote)
            }
        }
    }

    #[inline(always)]
    fn check_payload(&self, source: &Source<'_, '_>, len: u32, caps: &Caps) -> Result<()> {
        if self.is_inline() {
            if len > caps.max_inline {
                return Err(Error::InlineTooLarge {
                    len: len as usize,
                    max: caps.max_inline as usize,
                });
            }
        } else if source.count() > caps.max_sge as usize {
            return Err(Error::TooManySges { given: source.count(), max: caps.max_sge as usize });
        }
        Ok(())
    }
}

/// The largest RDMA message: 2^31 bytes (IBTA vol. 1 §9.4, "message size"; the kernel's
/// rdma_rxe refuses longer sends with EINVAL).
pub const MAX_MESSAGE: u64 = 1 << 31;

/// Refuse a message of `len` bytes to `remote` that no RDMA transport can carry: longer than
/// [`MAX_MESSAGE`], or a remote range that wraps past 2^64 (one ending at byte 2^64 - 1 is
/// fine). The first check every backend's
/// push makes; the fast paths call it with the length they sum anyway.
#[inline(always)]
pub fn check_message(len: u64, remote: RemoteBuf) -> Result<()> {
    // Both rules in one compare: `len` may not pass the smaller of `MAX_MESSAGE` and the
    // bytes from `addr` to 2^64 (a range may end at byte 2^64 - 1, not past it). Those bytes
    // are `!addr + 1`, which is 2^64 for `addr == 0` (no 64-bit value) and above
    // `MAX_MESSAGE` whenever `!addr >= MAX_MESSAGE - 1`, so the bound is taken as
    // `min(!addr, MAX_MESSAGE - 1) + 1`, which neither overflows nor exceeds `MAX_MESSAGE`.
    if len > (!remote.addr).min(MAX_MESSAGE - 1) + 1 {
        return Err(message_refused(len));
    }
    Ok(())
}

/// The error of a message [`check_message`] refuses: too long, or else a remote range that
/// wraps.
#[cold]
fn message_refused(len: u64) -> Error {
    if len > MAX_MESSAGE {
        Error::InvalidArgument("message above 2 GiB")
    } else {
        Error::InvalidArgument("remote range wraps past 2^64")
    }
}
