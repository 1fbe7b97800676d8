//! The C reference loops of `bench post` and `bench poll` (`examples/c`), over memory of the
//! same kinds as ours: a send ring, its doorbell record and a BlueFlame page in heap DMA memory
//! (the "BAR" is plain memory, as `MemBar` is for ours), and a send CQ whose entries the bench
//! writes as the device would, through the same [`CqWriter`] that plays the device for ours.

// Each benchmark uses its part of this module.
#![allow(dead_code)]

use std::sync::Arc;

use rdma_pmd::{QpNum, RemoteBuf, Sge};
use rdma_pmd_hal::mem::HeapDma;
use rdma_pmd_hal::{Dma, DmaBuf};
use rdma_pmd_mlx5::control::{CqParams, Uar};
use rdma_pmd_mlx5::testing::CqWriter;
use rdma_pmd_mlx5::Syndrome;

/// The C side's `struct bench_qp`, never looked into from Rust.
#[repr(C)]
pub struct RawQp {
    _opaque: [u8; 0],
}

/// `struct ibv_wc` (`infiniband/verbs.h`), as the C poll loop fills it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct IbvWc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

const _: () = assert!(core::mem::size_of::<IbvWc>() == 48, "struct ibv_wc is 48 bytes");

/// What a reaping loop saw: completions, the sum of their `wr_id`s, how many were errors.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reaped {
    pub n: u64,
    pub wr_id_sum: u64,
    pub errors: u64,
}

#[link(name = "benchc", kind = "static")]
extern "C" {
    fn c_qp_new(
        sq_buf: *mut u8,
        wqe_cnt: u32,
        db: *mut u32,
        bf_reg: *mut u8,
        bf_size: u32,
        qp_num: u32,
        max_gs: i32,
        cq_buf: *mut u8,
        log_cqe_cnt: u32,
        cq_dbrec: *mut u32,
    ) -> *mut RawQp;
    fn c_qp_free(qp: *mut RawQp);
    fn c_qp_cur_post(qp: *const RawQp) -> u32;
    fn c_post_mlx5dv(
        qp: *mut RawQp,
        n: u64,
        batch: u32,
        sges: *const Sge,
        nsge: u32,
        raddr: u64,
        rkey: u32,
        wr_id: u64,
    ) -> i32;
    fn c_post_floor(
        ring: *mut u8,
        wqe_cnt: u32,
        dbrec: *mut u32,
        bf_reg: *mut u8,
        bf_size: u32,
        pi: u32,
        n: u64,
        batch: u32,
        sges: *const Sge,
        nsge: u32,
        qpn: u32,
        raddr: u64,
        rkey: u32,
        use_bf: i32,
    ) -> u32;
    fn c_reap_mlx5(qp: *mut RawQp, expected: u64, wc: *mut IbvWc, ne: i32) -> Reaped;
    fn c_qp_set_max_inline(qp: *mut RawQp, max_inline_data: i32);
    fn c_post_mlx5dv_read(
        qp: *mut RawQp,
        n: u64,
        batch: u32,
        sges: *const Sge,
        nsge: u32,
        stride: u32,
        raddr: u64,
        rkey: u32,
        wr_id: u64,
    ) -> i32;
    fn c_post_mlx5dv_send(
        qp: *mut RawQp,
        n: u64,
        batch: u32,
        sges: *const Sge,
        nsge: u32,
        stride: u32,
        inl: i32,
        wr_id: u64,
    ) -> i32;
    fn c_post_floor_op(
        ring: *mut u8,
        wqe_cnt: u32,
        dbrec: *mut u32,
        bf_reg: *mut u8,
        bf_size: u32,
        pi: u32,
        n: u64,
        batch: u32,
        opcode: u32,
        sges: *const Sge,
        nsge: u32,
        stride: u32,
        inl: i32,
        qpn: u32,
        raddr: u64,
        rkey: u32,
        use_bf: i32,
    ) -> u32;
}

/// What the C loops post besides RDMA WRITE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// `IBV_WR_RDMA_READ` (`MLX5_OPCODE_RDMA_READ`).
    Read,
    /// `IBV_WR_SEND` (`MLX5_OPCODE_SEND`).
    Send,
    /// `IBV_WR_SEND` with `IBV_SEND_INLINE`: the SGEs' addresses are CPU addresses.
    SendInline,
}

impl Verb {
    fn opcode(self) -> u32 {
        match self {
            Verb::Read => 0x10,
            Verb::Send | Verb::SendInline => 0x0a,
        }
    }
}

/// The SGE lists of a batch of requests: `nsge` elements each, either the same list for every
/// request (`stride` 0) or a list of its own per request, `stride == nsge` elements apart.
#[derive(Clone, Copy, Debug)]
pub struct Sgls<'a> {
    /// The elements.
    pub sges: &'a [Sge],
    /// Elements per request.
    pub nsge: usize,
    /// Elements between two requests' lists (0: one list for all).
    pub stride: usize,
}

impl Sgls<'_> {
    /// Whether `n` requests stay inside the elements.
    fn covers(&self, n: usize) -> bool {
        self.nsge <= self.sges.len() && (self.stride == 0 || n * self.stride <= self.sges.len())
    }
}

/// Size of one BlueFlame half (`mlx5dv_qp.bf.size`), as our device reports it.
const BF_SIZE: u32 = 256;
/// Offset of the BlueFlame register in the UAR page (`MLX5_BF_OFFSET`).
const BF_OFFSET: usize = 0x800;

/// One C QP with its memory, and the device side of its send CQ.
pub struct CQp {
    heap: Arc<HeapDma>,
    qp: *mut RawQp,
    ring: Option<DmaBuf>,
    dbrec: Option<DmaBuf>,
    bar: Option<DmaBuf>,
    cq: Option<DmaBuf>,
    cq_dbrec: Option<DmaBuf>,
    cqw: CqWriter,
    qpn: QpNum,
    wqe_cnt: u32,
    /// The floor's producer index (it keeps no other state).
    floor_pi: u32,
}

impl CQp {
    /// A QP of `wqe_cnt` send blocks and a send CQ of as many entries, numbered `qpn`.
    pub fn new(heap: &Arc<HeapDma>, wqe_cnt: usize, qpn: QpNum) -> Self {
        let ring = heap.alloc(wqe_cnt * 64, 4096).expect("ring");
        let dbrec = heap.alloc(64, 64).expect("dbrec");
        let bar = heap.alloc(4096, 4096).expect("bar page");
        let cq = heap.alloc(wqe_cnt * 64, 4096).expect("cq");
        let cq_dbrec = heap.alloc(64, 64).expect("cq dbrec");
        let log = wqe_cnt.trailing_zeros();
        let cqw = CqWriter::new(CqParams {
            log_size: log as u8,
            buf: cq.bus(),
            dbrec: cq_dbrec.bus(),
            uar: Uar { index: 0, bar_offset: 0 },
        });
        // SAFETY: every block is live, of the size the C side assumes (ring and CQ of
        // `wqe_cnt` 64-byte entries, 64-byte records, a 4 KiB page holding both BlueFlame
        // halves at 0x800), and is freed only in `drop`, after `c_qp_free`.
        let qp = unsafe {
            c_qp_new(
                ring.cpu().as_ptr(),
                wqe_cnt as u32,
                dbrec.cpu().as_ptr().cast(),
                bar.cpu().as_ptr().add(BF_OFFSET),
                BF_SIZE,
                qpn.0,
                16,
                cq.cpu().as_ptr(),
                log,
                cq_dbrec.cpu().as_ptr().cast(),
            )
        };
        assert!(!qp.is_null(), "C QP allocated");
        CQp {
            heap: heap.clone(),
            qp,
            ring: Some(ring),
            dbrec: Some(dbrec),
            bar: Some(bar),
            cq: Some(cq),
            cq_dbrec: Some(cq_dbrec),
            cqw,
            qpn,
            wqe_cnt: wqe_cnt as u32,
            floor_pi: 0,
        }
    }

    fn buf(b: &Option<DmaBuf>) -> &DmaBuf {
        b.as_ref().expect("held until drop")
    }

    /// Fill the send ring with a poison byte.
    pub fn poison_ring(&mut self) {
        let r = Self::buf(&self.ring);
        assert!(self.heap.write(r.bus(), &vec![0xa5; self.wqe_cnt as usize * 64]), "ring");
    }

    /// The send ring's bytes (to compare what the variants wrote).
    pub fn ring_bytes(&self) -> Vec<u8> {
        let r = Self::buf(&self.ring);
        let mut v = vec![0u8; self.wqe_cnt as usize * 64];
        assert!(self.heap.read(r.bus(), &mut v), "ring readable");
        v
    }

    /// Post `n` RDMA WRITEs of `sges` to `remote` in doorbell batches of `batch`, the last
    /// of each signalled, `wr_id` counting up from `wr_id`: the provider's loop.
    #[inline(always)]
    pub fn post(&mut self, n: usize, batch: u32, sges: &[Sge], remote: RemoteBuf, wr_id: u64) {
        // SAFETY: `qp` is live and its memory too (see `new`); the SGE array outlives the
        // call; the caller keeps the ring from overflowing (the C side refuses otherwise).
        let rc = unsafe {
            c_post_mlx5dv(
                self.qp,
                n as u64,
                batch,
                sges.as_ptr(),
                sges.len() as u32,
                remote.addr,
                remote.rkey.0,
                wr_id,
            )
        };
        assert_eq!(rc, 0, "C ring has room");
    }

    /// The floor: the same bytes, doorbell record and doorbell as [`post`](Self::post), into
    /// the same ring, computing nothing else.
    #[inline(always)]
    pub fn floor(&mut self, n: usize, batch: u32, sges: &[Sge], remote: RemoteBuf, bf: bool) {
        let ring = Self::buf(&self.ring).cpu().as_ptr();
        let dbrec = Self::buf(&self.dbrec).cpu().as_ptr().cast();
        // SAFETY: as in `new`: live blocks of the sizes the floor assumes.
        let bar = unsafe { Self::buf(&self.bar).cpu().as_ptr().add(BF_OFFSET) };
        // SAFETY: as above; the SGE array outlives the call.
        self.floor_pi = unsafe {
            c_post_floor(
                ring,
                self.wqe_cnt,
                dbrec,
                bar,
                BF_SIZE,
                self.floor_pi,
                n as u64,
                batch,
                sges.as_ptr(),
                sges.len() as u32,
                self.qpn.0,
                remote.addr,
                remote.rkey.0,
                bf as i32,
            )
        };
    }

    /// `ibv_qp_cap.max_inline_data` of the QP (0 until set).
    pub fn set_max_inline(&mut self, n: u32) {
        // SAFETY: `qp` is live.
        unsafe { c_qp_set_max_inline(self.qp, n as i32) };
    }

    /// Post `n` requests of `verb` (READs of `remote`) with the lists `sgls`, in doorbell
    /// batches of `batch`, the last of each signalled: the provider's loop.
    #[inline(always)]
    pub fn post_verb(
        &mut self,
        verb: Verb,
        n: usize,
        batch: u32,
        sgls: Sgls<'_>,
        remote: RemoteBuf,
        wr_id: u64,
    ) {
        assert!(sgls.covers(n), "one SGE list per request");
        let (sges, nsge, stride) = (sgls.sges.as_ptr(), sgls.nsge as u32, sgls.stride as u32);
        // SAFETY: `qp` is live and its memory too (see `new`); the SGE lists cover the `n`
        // requests (checked above) and outlive the call, and an inline request's elements
        // name readable CPU memory (`Verb::SendInline`); the caller keeps the ring from
        // overflowing (the C side refuses otherwise).
        let rc = unsafe {
            match verb {
                Verb::Read => c_post_mlx5dv_read(
                    self.qp,
                    n as u64,
                    batch,
                    sges,
                    nsge,
                    stride,
                    remote.addr,
                    remote.rkey.0,
                    wr_id,
                ),
                Verb::Send | Verb::SendInline => c_post_mlx5dv_send(
                    self.qp,
                    n as u64,
                    batch,
                    sges,
                    nsge,
                    stride,
                    (verb == Verb::SendInline) as i32,
                    wr_id,
                ),
            }
        };
        assert_eq!(rc, 0, "C ring has room");
    }

    /// The floor of [`post_verb`](Self::post_verb): the same bytes, doorbell record and
    /// doorbell, computing nothing else.
    #[inline(always)]
    pub fn floor_verb(
        &mut self,
        verb: Verb,
        n: usize,
        batch: u32,
        sgls: Sgls<'_>,
        remote: RemoteBuf,
        bf: bool,
    ) {
        assert!(sgls.covers(n), "one SGE list per request");
        assert!(
            sgls.stride == 0 || sgls.sges.iter().all(|e| e.length != 0),
            "the floor's own lists are of non-empty elements"
        );
        let ring = Self::buf(&self.ring).cpu().as_ptr();
        let dbrec = Self::buf(&self.dbrec).cpu().as_ptr().cast();
        // SAFETY: as in `new`: live blocks of the sizes the floor assumes.
        let bar = unsafe { Self::buf(&self.bar).cpu().as_ptr().add(BF_OFFSET) };
        // SAFETY: as above; the lists cover the `n` requests and outlive the call; inline
        // elements name readable CPU memory.
        self.floor_pi = unsafe {
            c_post_floor_op(
                ring,
                self.wqe_cnt,
                dbrec,
                bar,
                BF_SIZE,
                self.floor_pi,
                n as u64,
                batch,
                verb.opcode(),
                sgls.sges.as_ptr(),
                sgls.nsge as u32,
                sgls.stride as u32,
                (verb == Verb::SendInline) as i32,
                self.qpn.0,
                remote.addr,
                remote.rkey.0,
                bf as i32,
            )
        };
    }

    /// The next free block of the C loop's ring (free-running).
    pub fn cur_post(&self) -> u32 {
        // SAFETY: `qp` is live.
        unsafe { c_qp_cur_post(self.qp) }
    }

    /// Play the device: the requester CQE for the WQE at `counter`, success or `error`.
    pub fn complete(&mut self, counter: u16, error: Option<(Syndrome, u8)>) {
        let heap = &self.heap;
        self.cqw.requester(self.qpn, counter, error, |at, bytes| {
            assert!(heap.write(at, bytes), "CQ reachable")
        });
    }

    /// Reap `expected` completions with the provider's poll loop, `wc.len()` per call.
    #[inline(always)]
    pub fn reap(&mut self, expected: usize, wc: &mut [IbvWc]) -> Reaped {
        // SAFETY: `qp` and its CQ are live; `wc` holds `wc.len()` entries.
        unsafe { c_reap_mlx5(self.qp, expected as u64, wc.as_mut_ptr(), wc.len() as i32) }
    }
}

impl Drop for CQp {
    fn drop(&mut self) {
        // SAFETY: `qp` came from `c_qp_new` and is freed once; nothing uses it afterwards.
        unsafe { c_qp_free(self.qp) };
        for b in [&mut self.ring, &mut self.dbrec, &mut self.bar, &mut self.cq, &mut self.cq_dbrec]
        {
            if let Some(b) = b.take() {
                // SAFETY: the C side is done with the block (`c_qp_free` above).
                unsafe { self.heap.free(b) };
            }
        }
    }
}
