//! The queue pair: the core's [`SendQueue`] over `ibv_post_send` / `ibv_poll_cq`, plus the
//! receive side a write with immediate needs.
//!
//! Send-side accounting uses free-running sequence numbers: `head` (oldest request whose
//! completion is not reaped) ≤ `committed` (first request not yet given to the device) ≤ `tail`
//! (next request to push). Each request carries its sequence number as the verbs `wr_id`; a
//! completion for sequence `s` retires every request up to `s` (an RC send queue completes in
//! order, and unsignalled requests before a signalled one complete with it), releasing the
//! regions they held. Error and flush completions are reported for every request, signalled or
//! not, so they retire one request each.

use core::ffi::c_int;
use core::ptr::{self, NonNull};

use rdma_pmd::post::SourceKind;
use rdma_pmd::region::{acquire_all, for_each_run};
use rdma_pmd::{
    Caps, Completion, Errno, Error, LocalBuf, QpNum, QueueId, RegionUse, Result, Retired,
    SendFlags, SendOp, SendQueue, SendRequest, Sge, Side, Source, WcOpcode, WcStatus,
};

use crate::cm::Conn;
use crate::{ffi, last_errno};

/// What to ask for when creating a queue pair; the device may grant more (see
/// [`SendQueue::caps`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpConfig {
    /// Send queue depth (`max_send_wr`).
    pub max_send_wr: u32,
    /// Receive queue depth (`max_recv_wr`), for writes with immediate.
    pub max_recv_wr: u32,
    /// Scatter-gather elements per send request (rxe allows up to 32).
    pub max_sge: u32,
    /// Inline bytes per request.
    pub max_inline: u32,
}

impl Default for QpConfig {
    fn default() -> Self {
        QpConfig { max_send_wr: 128, max_recv_wr: 16, max_sge: 8, max_inline: 64 }
    }
}

/// Scatter-gather elements per request at most: rxe's limit (`RXE_MAX_SGE`), and the room
/// each staged request has.
pub const MAX_SGE: u32 = 32;

/// Per send-queue slot: what to report and what to release when the request retires. The
/// first region is kept here, the rest (gathers over several regions) in `RxeQp::runs`.
#[derive(Clone, Copy, Debug, Default)]
struct Slot<'r> {
    wr_id: u64,
    runs: u32,
    first: Option<&'r RegionUse>,
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

/// An RC queue pair on rxe, connected through its [`Conn`], posting from regions that live
/// for `'r` (the queue pair is destroyed first, so no request outlives its buffers).
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
    slots: Vec<Slot<'r>>,
    /// `slots.len() - 1`: `slots` has a power-of-two length of at least `max_send_wr` (rxe
    /// grants `2^k - 1`), so a sequence number finds its slot with a mask, not a division.
    slot_mask: u64,
    /// `max_sge` entries per slot, the first unused (it is `Slot::first`): the further regions
    /// a request acquired, released when it retires.
    runs: Vec<Option<&'r RegionUse>>,
    /// The second and later requests pushed since the last commit; all are chained and posted
    /// by one `ibv_post_send`. `Sge` is `struct ibv_sge`.
    staged: Vec<Staged>,
    /// Inline payloads (`max_inline` bytes per pushed request), copied at push time.
    inline: Vec<u8>,
    /// A post that failed at commit (`commit` cannot return it), reported by the next `poll`.
    deferred: Option<Error>,
    recv_head: u64,
    recv_tail: u64,
    /// A power of two of at least `max_recv` entries, indexed like `slots`.
    recv_slots: Vec<(u64, Option<&'r RegionUse>)>,
    recv_mask: u64,
    max_recv: u32,
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

impl<'r> RxeQp<'r> {
    /// Create an RC queue pair on `conn` with its own send and receive completion queues (no
    /// completion channel). It cannot post until [`connect`](Self::connect) or
    /// [`accept`](Self::accept) succeeded ([`Error::NotConnected`]).
    pub fn create(conn: &'r Conn, cfg: QpConfig) -> Result<RxeQp<'r>> {
        if cfg.max_send_wr == 0 || cfg.max_sge == 0 || cfg.max_sge > MAX_SGE {
            return Err(Error::InvalidArgument(
                "max_send_wr and max_sge must be 1.. (max_sge ..=32)",
            ));
        }
        let send_cq = cq(conn, cfg.max_send_wr)?;
        let recv_cq = match cq(conn, cfg.max_recv_wr.max(1)) {
            Ok(c) => c,
            Err(e) => {
                // SAFETY: created above, unused.
                unsafe { ffi::ibv_destroy_cq(send_cq.as_ptr()) };
                return Err(e);
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
                max_recv_sge: 1,
                max_inline_data: cfg.max_inline,
            },
            qp_type: ffi::IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: a bound id without a QP; both CQs belong to its device; a null PD selects the
        // id's (the one regions are registered with).
        let rc = unsafe { ffi::rdma_create_qp(conn.id(), ptr::null_mut(), &mut attr) };
        // SAFETY: after a successful create the id holds the QP.
        let qp = (rc == 0).then(|| unsafe { ffi::rxe_shim_id_qp(conn.id()) });
        let Some(qp) = qp.and_then(NonNull::new) else {
            let e = last_errno();
            // SAFETY: created above, unused by any QP.
            unsafe {
                ffi::ibv_destroy_cq(send_cq.as_ptr());
                ffi::ibv_destroy_cq(recv_cq.as_ptr());
            }
            return Err(e);
        };
        // rdma_create_qp writes back what the device granted (our staging holds MAX_SGE).
        let caps = Caps {
            max_send_wr: attr.cap.max_send_wr,
            max_sge: attr.cap.max_send_sge.min(MAX_SGE),
            max_inline: attr.cap.max_inline_data,
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
            // SAFETY: created above, unused.
            unsafe {
                ffi::rdma_destroy_qp(conn.id());
                ffi::ibv_destroy_cq(send_cq.as_ptr());
                ffi::ibv_destroy_cq(recv_cq.as_ptr());
            }
            return Err(Error::Device(Errno::EOPNOTSUPP));
        };
        let n = caps.max_send_wr as usize;
        let slots = n.next_power_of_two();
        let sge = caps.max_sge as usize;
        // SAFETY: a live QP.
        let qpn = QpNum(unsafe { ffi::rxe_shim_qp_num(qp.as_ptr()) });
        let max_recv = attr.cap.max_recv_wr;
        let recv_slots = (max_recv as usize).next_power_of_two();
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
            slots: vec![Slot::default(); slots],
            slot_mask: slots as u64 - 1,
            runs: vec![None; slots * sge],
            staged: vec![Staged::ZERO; n.saturating_sub(1)],
            inline: vec![0; n * caps.max_inline as usize],
            deferred: None,
            recv_head: 0,
            recv_tail: 0,
            recv_slots: vec![(0, None); recv_slots],
            recv_mask: recv_slots as u64 - 1,
            max_recv,
        })
    }

    fn conn_param(private: &[u8]) -> Result<ffi::rdma_conn_param> {
        let len = u8::try_from(private.len())
            .map_err(|_| Error::InvalidArgument("private data above 255 bytes"))?;
        Ok(ffi::rdma_conn_param {
            private_data: if private.is_empty() { ptr::null() } else { private.as_ptr().cast() },
            private_data_len: len,
            responder_resources: 1,
            initiator_depth: 1,
            flow_control: 0,
            retry_count: 7,
            rnr_retry_count: 7,
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
        let mut p = Self::conn_param(private)?;
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

    /// The connection this queue pair belongs to.
    pub fn conn(&self) -> &'r Conn {
        self.conn
    }

    /// Forget every request pushed since the last commit, releasing its regions.
    fn rollback(&mut self) {
        while self.tail > self.committed {
            self.tail -= 1;
            self.release_slot(self.tail);
        }
    }

    #[inline]
    fn release_slot(&mut self, seq: u64) {
        let s = (seq & self.slot_mask) as usize;
        let slot = &mut self.slots[s];
        let runs = slot.runs as usize;
        slot.runs = 0;
        if let Some(r) = slot.first.take() {
            // SAFETY: acquired by the push that filled the slot, taken out once; the caller
            // releases a slot only once the provider no longer reads its request.
            unsafe { r.release() };
        }
        let base = s * self.caps.max_sge as usize;
        for i in 1..runs {
            if let Some(r) = self.runs[base + i].take() {
                // SAFETY: as above.
                unsafe { r.release() };
            }
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

    /// Post a receive for an incoming write with immediate (its payload lands where the writer
    /// said; a buffer here is only needed for SENDs). Allowed before the connection is up.
    pub fn post_recv(&mut self, wr_id: u64, buf: Option<LocalBuf<'r>>) -> Result<()> {
        let free = self.max_recv as u64 - (self.recv_tail - self.recv_head);
        if free == 0 {
            return Err(Error::QueueFull { needed: 1, free: 0 });
        }
        let region = match &buf {
            Some(b) => {
                b.region().acquire()?;
                Some(b.region())
            }
            None => None,
        };
        let mut sge = buf.map(|b| b.sge()).unwrap_or_default();
        let mut wr = ffi::ibv_recv_wr {
            wr_id: self.recv_tail,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: buf.is_some() as c_int,
        };
        let mut bad = ptr::null_mut();
        // SAFETY: a live QP; `wr` and `sge` outlive the call (the provider copies them); the
        // buffer stays registered until the completion is reaped (acquired above).
        let rc = unsafe { ffi::rxe_shim_post_recv(self.qp.as_ptr(), &mut wr, &mut bad) };
        if rc != 0 {
            if let Some(r) = region {
                // SAFETY: acquired above for a receive the provider refused.
                unsafe { r.release() };
            }
            return Err(device_error(rc));
        }
        let slot = (self.recv_tail & self.recv_mask) as usize;
        self.recv_slots[slot] = (wr_id, region);
        self.recv_tail += 1;
        Ok(())
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

    /// Reap receive completions (writes with immediate, sends); never blocks.
    pub fn poll_recv(&mut self, out: &mut [Completion]) -> Result<usize> {
        let n = self.poll_into(self.recv_cq, out.len())?;
        for (i, wc) in self.wcs[..n].iter().enumerate() {
            let slot = (wc.wr_id & self.recv_mask) as usize;
            let (wr_id, region) = self.recv_slots[slot];
            if let Some(r) = region {
                // SAFETY: acquired by `post_recv` for this receive, whose completion this is;
                // the slot is cleared below, so it is released once.
                unsafe { r.release() };
            }
            self.recv_slots[slot] = (0, None);
            self.recv_head = self.recv_head.max(wc.wr_id + 1);
            out[i] = completion(wc, wr_id);
        }
        Ok(n)
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
}

impl<'r> SendQueue<'r> for RxeQp<'r> {
    type Cursor = ();

    #[inline]
    fn caps(&self) -> Caps {
        self.caps
    }

    fn qp_num(&self) -> QpNum {
        self.qpn
    }

    /// Requests a forgotten batch pushed (`mem::forget`) are rolled back here, so they are
    /// never posted and their regions are released.
    #[inline]
    unsafe fn begin(&mut self) {
        if self.tail != self.committed {
            self.rollback();
        }
    }

    #[inline]
    unsafe fn push(&mut self, _: &mut (), req: &SendRequest<'_, 'r>) -> Result<()> {
        if !self.connected {
            return Err(Error::NotConnected);
        }
        req.check(&self.caps)?;
        let SendOp::Write { source, remote, imm } = &req.op else {
            return Err(Error::Unsupported("only writes on rxe so far"));
        };
        let cap = self.caps.max_send_wr as u64;
        let free = (cap - (self.tail - self.head)) as u32;
        if free == 0 {
            return Err(Error::QueueFull { needed: 1, free });
        }
        let seq = self.tail;
        let idx = (seq - self.committed) as usize;
        let slot = (seq & self.slot_mask) as usize;
        let mut first = None;
        let mut runs = 0u32;
        let num_sge = if req.is_inline() {
            let len = self.stage_inline(idx, source);
            let at = self.inline[idx * self.caps.max_inline as usize..].as_ptr();
            // Inline data needs no key: the provider copies the bytes into the WQE.
            self.staged(idx).sge[0] = Sge::new(at as u64, len as u32, rdma_pmd::Lkey(0));
            (len > 0) as usize
        } else {
            match *source.kind() {
                SourceKind::Sgl(bufs) => {
                    acquire_all(bufs)?;
                    let base = slot * self.caps.max_sge as usize;
                    let more = &mut self.runs;
                    for_each_run(bufs, |r| {
                        if runs == 0 {
                            first = Some(r);
                        } else {
                            more[base + runs as usize] = Some(r);
                        }
                        runs += 1;
                    });
                    let st = self.staged(idx);
                    for (e, b) in st.sge.iter_mut().zip(bufs) {
                        *e = b.sge();
                    }
                    bufs.len()
                }
                SourceKind::Raw { 0: sges, .. } => {
                    self.staged(idx).sge[..sges.len()].copy_from_slice(sges);
                    sges.len()
                }
                SourceKind::Inline(_) => unreachable!("inline sources are inline requests"),
            }
        };
        let mut flags = req.flags;
        if req.is_inline() {
            flags |= SendFlags::INLINE;
        }
        // Only the fields a write uses: the rest stay zero from `Staged::ZERO`.
        let wr = &mut self.staged(idx).wr;
        wr.wr_id = seq;
        wr.num_sge = num_sge as c_int;
        wr.opcode =
            if imm.is_some() { ffi::IBV_WR_RDMA_WRITE_WITH_IMM } else { ffi::IBV_WR_RDMA_WRITE };
        wr.send_flags = flags.bits();
        wr.imm_data = imm.unwrap_or(0).to_be();
        wr.remote_addr = remote.addr;
        wr.rkey = remote.rkey.get();
        self.slots[slot] = Slot { wr_id: req.wr_id, runs, first };
        self.tail = seq + 1;
        Ok(())
    }

    #[inline]
    fn pushed(&self, _: &()) -> u32 {
        (self.tail - self.committed) as u32
    }

    #[inline]
    fn posted(&self) -> u64 {
        self.committed
    }

    #[inline]
    unsafe fn commit(&mut self, _: ()) {
        let n = (self.tail - self.committed) as usize;
        if n == 0 {
            return;
        }
        // Chain the staged requests, last to first, pointing each at its own list.
        let mut head: *mut ffi::ibv_send_wr = ptr::null_mut();
        for i in (0..n).rev() {
            let st = self.staged(i);
            st.wr.sg_list = st.sge.as_mut_ptr();
            st.wr.next = head;
            head = &mut st.wr;
        }
        let mut bad: *mut ffi::ibv_send_wr = ptr::null_mut();
        // SAFETY: the provider's post_send for this live QP (what ibv_post_send calls); the
        // chain lives in `self` until the call returns; every request's SGEs name memory
        // acquired until its completion, or inline bytes staged in `inline` (copied by the
        // provider during this call).
        let rc = unsafe { (self.post_send)(self.qp.as_ptr(), head, &mut bad) };
        if rc == 0 {
            self.committed = self.tail;
            return;
        }
        // Requests before `bad` were posted; `bad` and later ones were not (rdma-core leaves
        // `bad` null when it refused the whole list).
        let posted = (0..n).find(|&i| ptr::eq(&self.staged(i).wr, bad)).unwrap_or(0) as u64;
        self.committed += posted;
        self.rollback();
        self.deferred = Some(device_error(rc));
    }

    unsafe fn abort(&mut self, _: ()) {
        self.rollback();
    }

    #[inline]
    fn poll(&mut self, out: &mut [Completion]) -> Result<usize> {
        if let Some(e) = self.deferred.take() {
            return Err(e);
        }
        let n = self.poll_into(self.send_cq, out.len())?;
        for (i, o) in out.iter_mut().enumerate().take(n) {
            let wc = self.wcs[i];
            let seq = wc.wr_id;
            let wr_id = self.slots[(seq & self.slot_mask) as usize].wr_id;
            if seq >= self.head && seq < self.committed {
                while self.head <= seq {
                    self.release_slot(self.head);
                    self.head += 1;
                }
            }
            *o = completion(&wc, wr_id);
        }
        Ok(n)
    }

    #[inline]
    fn outstanding(&self) -> u32 {
        (self.committed - self.head) as u32
    }
}

// SAFETY: sends are numbered by their sequence (`committed` is the next one's), and `head`
// passes a request only when its completion, or a later one, was reaped, or at teardown.
// Receives are not numbered yet: none is ever reported retired.
unsafe impl Retired for RxeQp<'_> {
    fn queue_id(&self) -> QueueId {
        self.id
    }
    fn retired(&self, side: Side) -> u64 {
        match side {
            Side::Send => self.head,
            Side::Recv => 0,
        }
    }
}

impl Drop for RxeQp<'_> {
    fn drop(&mut self) {
        // SAFETY: our QP on the id; after this the device reads and writes none of our
        // buffers, so every region a pending request held can be released.
        unsafe { ffi::rdma_destroy_qp(self.conn.id()) };
        self.rollback();
        while self.head < self.committed {
            self.release_slot(self.head);
            self.head += 1;
        }
        for (_, r) in self.recv_slots.iter_mut() {
            if let Some(r) = r.take() {
                // SAFETY: the QP is destroyed; each receive's region is taken out once.
                unsafe { r.release() };
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
