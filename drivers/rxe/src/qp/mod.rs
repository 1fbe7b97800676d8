//! The queue pair: the core's [`SendQueue`] over `ibv_post_send` / `ibv_poll_cq` and its
//! [`RecvQueue`] over `ibv_post_recv`, for RC (connected through librdmacm) and UD.
//!
//! Both directions number their requests with free-running sequence numbers, which go to the
//! provider as the verbs `wr_id` (the user's `wr_id` stays in the slot table).
//!
//! Send side: `head` (oldest request whose completion is not reaped) ≤ `committed` (first
//! request not yet given to the device) ≤ `tail` (next request to push). A completion for
//! sequence `s` retires every request up to `s` (a send queue completes in order, and
//! unsignalled requests before a signalled one complete with it), releasing the regions they
//! held: the sources of writes and sends, and the destinations of READs and atomics. Error and
//! flush completions are reported for every request, signalled or not, so they retire one
//! request each.
//!
//! Receive side: `recv_head` (receives retired) ≤ `recv_tail` (receives posted). Every receive
//! completes, successfully, in error or flushed, exactly once and in order (a receive queue is
//! a FIFO); `recv_head` passes a receive only once its completion is reaped, and a completion
//! that names no outstanding receive is refused as a device fault instead of being counted.

use core::ffi::c_int;
use core::ptr::{self, NonNull};
use std::collections::HashMap;

use rdma_pmd::post::{SourceKind, ATOMIC_LEN};
use rdma_pmd::{
    Caps, Completion, Dest, DestKind, DeviceFault, Errno, Error, QpNum, QueueId, RecvCaps,
    RecvQueue, RegionUse, Result, Retired, RoceAddr, SendFlags, SendOp, SendQueue, SendRequest,
    Sge, Side, Source, WcOpcode, WcStatus,
};

use crate::cm::Conn;
use crate::{ffi, last_errno};

mod recv;
mod send;

/// What to ask for when creating a queue pair; the device may grant more (see
/// [`SendQueue::caps`] and [`RecvQueue::recv_caps`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpConfig {
    /// Send queue depth (`max_send_wr`).
    pub max_send_wr: u32,
    /// Receive queue depth (`max_recv_wr`).
    pub max_recv_wr: u32,
    /// Scatter-gather elements per send request (rxe allows up to 32).
    pub max_sge: u32,
    /// Scatter elements per receive (rxe allows up to 32).
    pub max_recv_sge: u32,
    /// Inline bytes per request.
    pub max_inline: u32,
    /// RNR retry count (`rdma_conn_param.rnr_retry_count`, 7 = retry for ever) this end
    /// announces when it connects or accepts. The IB CM carries it in the REQ or REP, and each
    /// end's QP takes the count from the message it receives: the active side retries as the
    /// passive side's accept says (the kernel's `cm_rep_handler`).
    pub rnr_retry: u8,
    /// Transport retry count (`rdma_conn_param.retry_count`), announced the same way.
    pub retry_count: u8,
}

impl Default for QpConfig {
    fn default() -> Self {
        QpConfig {
            max_send_wr: 128,
            max_recv_wr: 16,
            max_sge: 8,
            max_recv_sge: 4,
            max_inline: 64,
            rnr_retry: 7,
            retry_count: 7,
        }
    }
}

/// Scatter-gather elements per request at most: rxe's limit (`RXE_MAX_SGE`), and the room
/// each staged request has.
pub const MAX_SGE: u32 = 32;

/// Per slot (of either direction): what to report and what to release when the request
/// retires. The first region is kept here, the rest (lists over several regions) in the
/// direction's run table.
#[derive(Clone, Copy, Debug, Default)]
struct Slot<'r> {
    wr_id: u64,
    runs: u32,
    first: Option<&'r RegionUse>,
}

/// One direction's slot table: a power-of-two number of [`Slot`]s of at least the queue's
/// depth (rxe grants `2^k - 1`), so a sequence number finds its slot with a mask, and `per`
/// run entries per slot (entry 0 unused: it is `Slot::first`).
struct Slots<'r> {
    slots: Vec<Slot<'r>>,
    mask: u64,
    per: usize,
    runs: Vec<Option<&'r RegionUse>>,
}

impl<'r> Slots<'r> {
    fn new(depth: u32, per: u32) -> Self {
        let n = (depth.max(1) as usize).next_power_of_two();
        let per = per.max(1) as usize;
        Slots {
            slots: vec![Slot::default(); n],
            mask: n as u64 - 1,
            per,
            runs: vec![None; n * per],
        }
    }

    #[inline]
    fn index(&self, seq: u64) -> usize {
        (seq & self.mask) as usize
    }

    /// Count the regions of one request busy: each run of consecutive elements from the same
    /// region once, so a request over one region costs one counter update. Returns the first
    /// run's region and the number of runs; the further ones are recorded in the run table of
    /// slot `s`. On failure nothing stays acquired.
    #[inline]
    fn hold(
        &mut self,
        s: usize,
        regions: impl Iterator<Item = &'r RegionUse>,
    ) -> Result<(Option<&'r RegionUse>, u32)> {
        let base = s * self.per;
        let (mut first, mut runs): (Option<&'r RegionUse>, u32) = (None, 0);
        let mut prev: Option<*const RegionUse> = None;
        for r in regions {
            if prev == Some(r as *const RegionUse) {
                continue;
            }
            if let Err(e) = r.acquire() {
                // SAFETY: exactly the runs acquired above, for a request never posted.
                unsafe { self.release_runs(s, first, runs) };
                return Err(e);
            }
            if runs == 0 {
                first = Some(r);
            } else {
                self.runs[base + runs as usize] = Some(r);
            }
            runs += 1;
            prev = Some(r);
        }
        Ok((first, runs))
    }

    /// Release `first` and the further `runs - 1` regions recorded for slot `s`.
    ///
    /// # Safety
    /// They were acquired by [`hold`](Self::hold) for a request the device no longer reads or
    /// writes (retired, refused, rolled back, or its QP destroyed), and are released once.
    #[inline]
    unsafe fn release_runs(&mut self, s: usize, first: Option<&'r RegionUse>, runs: u32) {
        if let Some(r) = first {
            // SAFETY: forwarded to our caller.
            unsafe { r.release() };
        }
        let base = s * self.per;
        for i in 1..runs as usize {
            if let Some(r) = self.runs[base + i].take() {
                // SAFETY: forwarded to our caller.
                unsafe { r.release() };
            }
        }
    }

    /// Release what the request numbered `seq` holds and empty its slot; returns its `wr_id`.
    ///
    /// # Safety
    /// As [`release_runs`](Self::release_runs), for the request in the slot.
    #[inline]
    unsafe fn release(&mut self, seq: u64) -> u64 {
        let s = self.index(seq);
        let slot = core::mem::take(&mut self.slots[s]);
        // SAFETY: forwarded to our caller; the slot was emptied, so it is released once.
        unsafe { self.release_runs(s, slot.first, slot.runs) };
        slot.wr_id
    }
}

/// One request as `ibv_post_send` takes it, with room for its scatter-gather list. `next` and
/// `sg_list` are set when the batch is posted, so they never point at a place the queue pair
/// has since moved from.
#[derive(Clone, Copy)]
struct Staged {
    wr: ffi::ibv_send_wr,
    sge: [Sge; MAX_SGE as usize],
}

impl Staged {
    const ZERO: Staged = Staged {
        wr: ffi::ibv_send_wr::ZERO,
        sge: [Sge::new(0, 0, rdma_pmd::Lkey(0)); MAX_SGE as usize],
    };
}

/// Completions fetched per `ibv_poll_cq` call.
const WC_BATCH: usize = 16;

/// What a UD queue pair keeps: its Q_Key and port, and an address handle per destination.
struct Ud {
    port: u8,
    /// `ibv_create_ah` per distinct [`RoceAddr`], made on the first send there and kept until
    /// the queue pair is destroyed (a posted request names its handle until it retires).
    ahs: HashMap<RoceAddr, NonNull<ffi::ibv_ah>>,
}

/// A queue pair on rxe, posting from and receiving into regions that live for `'r` (the queue
/// pair is destroyed first, so no request outlives its buffers): RC, connected through its
/// [`Conn`] ([`create`](Self::create)), or UD on the `Conn`'s device
/// ([`create_ud`](Self::create_ud)).
///
/// Layout: what a single post touches (the first staged request, the completion array, the
/// counters) lives in this struct, the per-slot tables each in one allocation. A post is a
/// few hundred instructions around a system call, so the pages and cache lines it touches,
/// not its instructions, are much of its cost, above all under an emulator (QEMU's TCG),
/// where each new page and translated block is slow to reach.
pub struct RxeQp<'r> {
    conn: &'r Conn,
    qp: NonNull<ffi::ibv_qp>,
    send_cq: NonNull<ffi::ibv_cq>,
    recv_cq: NonNull<ffi::ibv_cq>,
    caps: Caps,
    qpn: QpNum,
    connected: bool,
    /// This queue's identity, for `Pending::reclaim`.
    id: QueueId,
    head: u64,
    committed: u64,
    tail: u64,
    /// The provider's `post_send` and `poll_cq` (what `ibv_post_send`/`ibv_poll_cq` call).
    post_send: ffi::PostSendFn,
    poll_cq: ffi::PollCqFn,
    /// The first request pushed since the last commit (the only one of a single post).
    first: Staged,
    /// Completions as `ibv_poll_cq` fills them.
    wcs: [ffi::ibv_wc; WC_BATCH],
    sq: Slots<'r>,
    /// The second and later requests pushed since the last commit; all are chained and posted
    /// by one `ibv_post_send`. `Sge` is `struct ibv_sge`.
    staged: Vec<Staged>,
    /// Inline payloads (`max_inline` bytes per pushed request), copied at push time.
    inline: Vec<u8>,
    /// A post that failed at commit (`commit` cannot return it), reported by the next `poll`.
    deferred: Option<Error>,
    recv_head: u64,
    recv_tail: u64,
    rq: Slots<'r>,
    /// Per receive slot: its completion was reaped (receives retire in `recv_head` order).
    recv_done: Vec<bool>,
    recv_caps: RecvCaps,
    /// `rnr_retry`, `retry_count` of the configuration, for connecting.
    retries: (u8, u8),
    /// `Some` for a UD queue pair.
    ud: Option<Ud>,
}

fn cq(conn: &Conn, entries: u32) -> Result<NonNull<ffi::ibv_cq>> {
    // SAFETY: the context is live; no completion channel: completions are busy-polled.
    let cq = unsafe {
        ffi::ibv_create_cq(conn.verbs(), entries as c_int, ptr::null_mut(), ptr::null_mut(), 0)
    };
    NonNull::new(cq).ok_or_else(last_errno)
}

fn device_error(rc: c_int) -> Error {
    match rc {
        0 => Error::Device(Errno::EIO),
        rc => Error::Device(Errno(rc.abs())),
    }
}

/// Destroy a queue pair made by [`RxeQp::build`].
///
/// # Safety
/// `qp` is live, unused by any further call, and was created for `conn` as `ud` says.
unsafe fn destroy_qp(conn: &Conn, qp: NonNull<ffi::ibv_qp>, ud: bool) {
    if ud {
        // SAFETY: forwarded to our caller.
        unsafe { ffi::ibv_destroy_qp(qp.as_ptr()) };
    } else {
        // SAFETY: forwarded to our caller: the id's QP.
        unsafe { ffi::rdma_destroy_qp(conn.id()) };
    }
}

impl<'r> RxeQp<'r> {
    /// Create an RC queue pair on `conn` with its own send and receive completion queues (no
    /// completion channel). It cannot post sends until [`connect`](Self::connect) or
    /// [`accept`](Self::accept) succeeded ([`Error::NotConnected`]); receives may be posted
    /// before.
    pub fn create(conn: &'r Conn, cfg: QpConfig) -> Result<RxeQp<'r>> {
        Self::build(conn, cfg, None)
    }

    /// Create a UD queue pair on `conn`'s device and port (`ibv_create_qp` in the id's
    /// protection domain, so it posts from the `conn`'s regions), taken through INIT (P_Key
    /// index 0, `qkey`), RTR and RTS: it can post at once. Sends need a
    /// [`UdDest`](rdma_pmd::UdDest) ([`Post::post_send_ud`](rdma_pmd::Post::post_send_ud));
    /// each receive's first 40 bytes get the datagram's GRH (on RoCE v2 over IPv4: 20 bytes
    /// of zero, then the IPv4 header).
    pub fn create_ud(conn: &'r Conn, cfg: QpConfig, qkey: u32) -> Result<RxeQp<'r>> {
        let mut qp = Self::build(conn, cfg, Some(qkey))?;
        qp.connected = true;
        Ok(qp)
    }

    fn build(conn: &'r Conn, cfg: QpConfig, qkey: Option<u32>) -> Result<RxeQp<'r>> {
        if cfg.max_send_wr == 0
            || cfg.max_sge == 0
            || cfg.max_sge > MAX_SGE
            || cfg.max_recv_sge > MAX_SGE
        {
            return Err(Error::InvalidArgument(
                "max_send_wr and max_sge must be 1.. (max_sge, max_recv_sge ..=32)",
            ));
        }
        let ud = qkey.is_some();
        let send_cq = cq(conn, cfg.max_send_wr)?;
        let recv_cq = match cq(conn, cfg.max_recv_wr.max(1)) {
            Ok(c) => c,
            Err(e) => {
                // SAFETY: created above, unused.
                unsafe { ffi::ibv_destroy_cq(send_cq.as_ptr()) };
                return Err(e);
            }
        };
        let destroy_cqs = || {
            // SAFETY: created above, used by no QP any more.
            unsafe {
                ffi::ibv_destroy_cq(send_cq.as_ptr());
                ffi::ibv_destroy_cq(recv_cq.as_ptr());
            }
        };
        let mut attr = ffi::ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: send_cq.as_ptr(),
            recv_cq: recv_cq.as_ptr(),
            srq: ptr::null_mut(),
            cap: ffi::ibv_qp_cap {
                max_send_wr: cfg.max_send_wr,
                max_recv_wr: cfg.max_recv_wr.max(1),
                max_send_sge: cfg.max_sge,
                max_recv_sge: cfg.max_recv_sge.max(1),
                max_inline_data: cfg.max_inline,
            },
            qp_type: if ud { ffi::IBV_QPT_UD } else { ffi::IBV_QPT_RC },
            sq_sig_all: 0,
        };
        let qp = if ud {
            // SAFETY: the id's live PD; both CQs belong to its device. The provider writes
            // back what it granted.
            unsafe { ffi::ibv_create_qp(conn.pd(), &mut attr) }
        } else {
            // SAFETY: a bound id without a QP; both CQs belong to its device; a null PD
            // selects the id's (the one regions are registered with).
            let rc = unsafe { ffi::rdma_create_qp(conn.id(), ptr::null_mut(), &mut attr) };
            if rc == 0 {
                // SAFETY: after a successful create the id holds the QP.
                unsafe { ffi::rxe_shim_id_qp(conn.id()) }
            } else {
                ptr::null_mut()
            }
        };
        let Some(qp) = NonNull::new(qp) else {
            let e = last_errno();
            destroy_cqs();
            return Err(e);
        };
        let fail = |e: Error| {
            // SAFETY: created above for `conn` as `ud` says, unused.
            unsafe { destroy_qp(conn, qp, ud) };
            destroy_cqs();
            Err(e)
        };
        if let Some(qkey) = qkey {
            // SAFETY: a live UD QP in RESET.
            let rc = unsafe { ffi::rxe_shim_ud_ready(qp.as_ptr(), conn.port(), qkey) };
            if rc != 0 {
                return fail(device_error(rc));
            }
        }
        // What the device granted (our staging holds MAX_SGE).
        let caps = Caps {
            max_send_wr: attr.cap.max_send_wr,
            max_sge: attr.cap.max_send_sge.min(MAX_SGE),
            max_inline: attr.cap.max_inline_data,
        };
        let recv_caps = RecvCaps {
            max_recv_wr: attr.cap.max_recv_wr,
            max_recv_sge: attr.cap.max_recv_sge.min(MAX_SGE),
        };
        // SAFETY: a live QP and CQ. Both CQs were created on `conn`'s context, so the send
        // CQ's poll entry serves the receive CQ too.
        let entries = unsafe {
            (
                ffi::rxe_shim_post_send_entry(qp.as_ptr()),
                ffi::rxe_shim_poll_cq_entry(send_cq.as_ptr()),
            )
        };
        let (Some(post_send), Some(poll_cq)) = entries else {
            return fail(Error::Device(Errno::EOPNOTSUPP));
        };
        let n = caps.max_send_wr as usize;
        // SAFETY: a live QP.
        let qpn = QpNum(unsafe { ffi::rxe_shim_qp_num(qp.as_ptr()) });
        let rq = Slots::new(recv_caps.max_recv_wr, recv_caps.max_recv_sge);
        Ok(RxeQp {
            conn,
            qp,
            send_cq,
            recv_cq,
            caps,
            qpn,
            connected: false,
            id: QueueId::new(),
            head: 0,
            committed: 0,
            tail: 0,
            post_send,
            poll_cq,
            first: Staged::ZERO,
            wcs: [ffi::ibv_wc::default(); WC_BATCH],
            sq: Slots::new(caps.max_send_wr, caps.max_sge),
            staged: vec![Staged::ZERO; n.saturating_sub(1)],
            inline: vec![0; n * caps.max_inline as usize],
            deferred: None,
            recv_head: 0,
            recv_tail: 0,
            recv_done: vec![false; rq.slots.len()],
            rq,
            recv_caps,
            retries: (cfg.rnr_retry, cfg.retry_count),
            ud: qkey.map(|_| Ud { port: conn.port(), ahs: HashMap::new() }),
        })
    }

    fn conn_param(&self, private: &[u8]) -> Result<ffi::rdma_conn_param> {
        let len = u8::try_from(private.len())
            .map_err(|_| Error::InvalidArgument("private data above 255 bytes"))?;
        Ok(ffi::rdma_conn_param {
            private_data: if private.is_empty() { ptr::null() } else { private.as_ptr().cast() },
            private_data_len: len,
            // One READ or atomic in flight each way: the CM also grants the QP remote read
            // and atomic access only with responder resources (the kernel's
            // `cm_init_qp_init_attr`), which librdmacm applies at RTR.
            responder_resources: 1,
            initiator_depth: 1,
            flow_control: 0,
            retry_count: self.retries.1,
            rnr_retry_count: self.retries.0,
            srq: 0,
            qp_num: 0,
        })
    }

    /// Active side: `rdma_connect`, sending `private` (at most 56 bytes on RoCE). Returns when
    /// the connection is established; the peer's accept data is then in
    /// [`Conn::peer_data`].
    pub fn connect(&mut self, private: &[u8]) -> Result<()> {
        // SAFETY: a resolved id with our QP; the parameters and their data outlive the call.
        self.establish(private, |id, p| unsafe { ffi::rdma_connect(id, p) })
    }

    /// Passive side: `rdma_accept` a request from [`Listener::get_request`](crate::Listener),
    /// sending `private` (at most 196 bytes on RoCE). Read the request's data with
    /// [`Conn::peer_data`] before accepting.
    pub fn accept(&mut self, private: &[u8]) -> Result<()> {
        // SAFETY: a requested id with our QP; the parameters and their data outlive the call.
        self.establish(private, |id, p| unsafe { ffi::rdma_accept(id, p) })
    }

    /// Run `call` (`rdma_connect` or `rdma_accept`) on our id with `private` as the
    /// connection's private data; the queue pair may post once it succeeded.
    fn establish(
        &mut self,
        private: &[u8],
        call: impl FnOnce(*mut ffi::rdma_cm_id, *mut ffi::rdma_conn_param) -> c_int,
    ) -> Result<()> {
        if self.ud.is_some() {
            return Err(Error::InvalidArgument("a UD queue pair does not connect"));
        }
        let mut p = self.conn_param(private)?;
        if call(self.conn.id(), &mut p) != 0 {
            return Err(last_errno());
        }
        self.connected = true;
        Ok(())
    }

    /// Whether the queue pair may post sends.
    pub fn is_connected(&self) -> bool {
        self.connected
    }

    /// Whether this is a UD queue pair.
    pub fn is_ud(&self) -> bool {
        self.ud.is_some()
    }

    /// The connection this queue pair belongs to.
    pub fn conn(&self) -> &'r Conn {
        self.conn
    }

    /// Forget every request pushed since the last commit, releasing its regions.
    fn rollback(&mut self) {
        while self.tail > self.committed {
            self.tail -= 1;
            // SAFETY: never given to the provider.
            unsafe { self.sq.release(self.tail) };
        }
    }

    /// The staging entry of the `idx`-th request pushed since the last commit.
    #[inline]
    fn staged(&mut self, idx: usize) -> &mut Staged {
        match idx.checked_sub(1) {
            None => &mut self.first,
            Some(i) => &mut self.staged[i],
        }
    }

    /// Poll up to `want` (at most [`WC_BATCH`]) work completions of `cq` into `wcs`.
    #[inline]
    fn poll_into(&mut self, cq: NonNull<ffi::ibv_cq>, want: usize) -> Result<usize> {
        let want = want.min(WC_BATCH);
        if want == 0 {
            return Ok(0);
        }
        // SAFETY: a live CQ of this queue pair; `wcs` has room for `want` entries.
        let n = unsafe { (self.poll_cq)(cq.as_ptr(), want as c_int, self.wcs.as_mut_ptr()) };
        if n < 0 {
            return Err(device_error(n));
        }
        Ok(n as usize)
    }

    /// Copy an inline payload into staging slot `idx`; returns its length.
    fn stage_inline(&mut self, idx: usize, source: &Source<'_, 'r>) -> usize {
        let max = self.caps.max_inline as usize;
        let dst = &mut self.inline[idx * max..(idx + 1) * max];
        let mut at = 0;
        // `check` bounded the total by `max_inline`, the size of `dst`.
        source.for_each_inline_chunk(|bytes| {
            dst[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        });
        at
    }

    /// The address handle for `addr`, created on first use (`ibv_create_ah`, global route).
    /// rxe resolves the destination MAC from the GID itself, and derives the UDP source port
    /// from the QP number, so `dmac` and `udp_sport` go unused here.
    fn ah(&mut self, addr: &RoceAddr) -> Result<NonNull<ffi::ibv_ah>> {
        let pd = self.conn.pd();
        let Some(ud) = self.ud.as_mut() else {
            return Err(Error::InvalidArgument("a datagram destination on a connected QP"));
        };
        if let Some(ah) = ud.ahs.get(addr) {
            return Ok(*ah);
        }
        // SAFETY: the id's live PD; `dgid` is 16 readable bytes.
        let ah = unsafe {
            ffi::rxe_shim_create_ah(
                pd,
                ud.port,
                addr.dgid.0.as_ptr(),
                addr.sgid_index,
                addr.hop_limit,
                addr.traffic_class,
                addr.flow_label,
                addr.sl,
                addr.static_rate,
            )
        };
        let ah = NonNull::new(ah).ok_or_else(last_errno)?;
        ud.ahs.insert(*addr, ah);
        Ok(ah)
    }

    /// Stage the payload of a WRITE or SEND at `idx` for slot `s`: the inline bytes, or the
    /// elements (registered buffers counted busy). Returns the number of elements, the first
    /// region held and the runs.
    fn stage_source(
        &mut self,
        idx: usize,
        s: usize,
        req: &SendRequest<'_, 'r>,
        source: &Source<'_, 'r>,
    ) -> Result<(usize, Option<&'r RegionUse>, u32)> {
        if req.is_inline() {
            let len = self.stage_inline(idx, source);
            let at = self.inline[idx * self.caps.max_inline as usize..].as_ptr();
            // Inline data needs no key: the provider copies the bytes into the WQE.
            self.staged(idx).sge[0] = Sge::new(at as u64, len as u32, rdma_pmd::Lkey(0));
            return Ok(((len > 0) as usize, None, 0));
        }
        match *source.kind() {
            SourceKind::Sgl(bufs) => {
                let (first, runs) = self.sq.hold(s, bufs.iter().map(|b| b.region()))?;
                let st = self.staged(idx);
                for (e, b) in st.sge.iter_mut().zip(bufs) {
                    *e = b.sge();
                }
                Ok((bufs.len(), first, runs))
            }
            SourceKind::Raw { 0: sges, .. } => {
                self.staged(idx).sge[..sges.len()].copy_from_slice(sges);
                Ok((sges.len(), None, 0))
            }
            SourceKind::Inline(_) => unreachable!("inline sources are inline requests"),
        }
    }

    /// Stage the destination of a READ or atomic (at most `limit` bytes of its first element
    /// for an atomic), counting owned buffers' regions busy.
    fn stage_dest(
        &mut self,
        idx: usize,
        s: usize,
        dest: &Dest<'_, 'r>,
        atomic: bool,
    ) -> Result<(usize, Option<&'r RegionUse>, u32)> {
        let (n, first, runs) = match *dest.kind() {
            DestKind::Bufs(bufs) => {
                let bufs = if atomic { &bufs[..1] } else { bufs };
                let (first, runs) = self.sq.hold(s, bufs.iter().map(|b| b.region()))?;
                let st = self.staged(idx);
                for (e, b) in st.sge.iter_mut().zip(bufs) {
                    *e = b.sge();
                }
                (bufs.len(), first, runs)
            }
            DestKind::Raw(sges) => {
                let sges = if atomic { &sges[..1] } else { sges };
                self.staged(idx).sge[..sges.len()].copy_from_slice(sges);
                (sges.len(), None, 0)
            }
        };
        if atomic {
            // The device writes exactly the 8 bytes of the original value.
            self.staged(idx).sge[0].length = ATOMIC_LEN;
        }
        Ok((n, first, runs))
    }
}

impl RxeQp<'_> {
    /// Report a receive-side fault found after good completions with the next send poll (the
    /// queue pair's one place for errors a call could not return).
    fn deferred_recv(&mut self, fault: DeviceFault) {
        self.deferred.get_or_insert(Error::Fault(fault));
    }
}

// SAFETY: sends are numbered by their sequence (`committed` is the next one's), and `head`
// passes a request only when its completion, or a later one, was reaped, or at teardown.
// Receives are numbered by `recv_tail` at posting, and `recv_head` passes one only once its
// own completion was reaped (and every earlier one's), or at teardown.
unsafe impl Retired for RxeQp<'_> {
    fn queue_id(&self) -> QueueId {
        self.id
    }
    fn retired(&self, side: Side) -> u64 {
        match side {
            Side::Send => self.head,
            Side::Recv => self.recv_head,
        }
    }
}

impl Drop for RxeQp<'_> {
    fn drop(&mut self) {
        // SAFETY: our QP; after this the device reads and writes none of our buffers, so
        // every region a pending request held can be released.
        unsafe { destroy_qp(self.conn, self.qp, self.ud.is_some()) };
        self.rollback();
        while self.head < self.committed {
            // SAFETY: the QP is destroyed.
            unsafe { self.sq.release(self.head) };
            self.head += 1;
        }
        while self.recv_head < self.recv_tail {
            let s = self.rq.index(self.recv_head);
            if !self.recv_done[s] {
                // SAFETY: the QP is destroyed; a receive not yet completed is released once.
                unsafe { self.rq.release(self.recv_head) };
            }
            self.recv_head += 1;
        }
        if let Some(ud) = self.ud.take() {
            for ah in ud.ahs.into_values() {
                // SAFETY: created by `ah`; the QP whose requests named it is gone.
                unsafe { ffi::ibv_destroy_ah(ah.as_ptr()) };
            }
        }
        // SAFETY: the QP using them is gone.
        unsafe {
            ffi::ibv_destroy_cq(self.send_cq.as_ptr());
            ffi::ibv_destroy_cq(self.recv_cq.as_ptr());
        }
    }
}

/// The completion the user sees for `wc`, whose request the user knows as `wr_id`: `ibv_wc`
/// field for field, the immediate only where `IBV_WC_WITH_IMM` says there is one.
fn completion(wc: &ffi::ibv_wc, wr_id: u64) -> Completion {
    Completion {
        wr_id,
        status: WcStatus::from(wc.status),
        opcode: WcOpcode::from(wc.opcode),
        vendor_err: wc.vendor_err,
        byte_len: wc.byte_len,
        qp_num: QpNum(wc.qp_num),
        imm: (wc.wc_flags & ffi::IBV_WC_WITH_IMM != 0).then(|| u32::from_be(wc.imm_data)),
        src_qp: QpNum(wc.src_qp),
        grh: wc.wc_flags & ffi::IBV_WC_GRH != 0,
    }
}
