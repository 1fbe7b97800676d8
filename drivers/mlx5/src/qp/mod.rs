//! A queue pair (RC, UD or GSI/QP1): the send ring with its completion queue
//! (`qp/send.rs`: WRITE, WRITE WITH IMMEDIATE, SEND and READ), the receive ring with its own
//! (`qp/recv.rs`: SEND and WRITE WITH IMMEDIATE targets), the state machine, and teardown.
//!
//! [`Qp`] implements [`rdma_pmd::SendQueue`], so every posting form of [`rdma_pmd::Post`]
//! (`post_writev`, `post_write`, `post_write_imm`, `post_write_inline`, `post_writev_raw`,
//! `batch`) works on it. The four primitives map onto mlx5 as:
//!
//! * `push`: the QP must be in RTS ([`Error::NotConnected`] otherwise); the request is checked
//!   against the QP's [`Caps`] and the ring's free blocks ([`Error::QueueFull`], ENOMEM) and
//!   written into the ring by the [`WqeBuilder`]; the regions its buffers come from are
//!   counted busy. A refused request changes nothing.
//! * `commit`: the doorbell sequence of `post_send_db` ([`crate::datapath::send`]), once per batch.
//! * `abort`: the WQEs since the last commit are forgotten and their regions released.
//! * `poll`: send CQEs are copied out and turned into completions as [`crate::datapath::send`] describes
//!   (selective signalling; error, then flush of everything outstanding, each reported once).
//!
//! The receive side ([`rdma_pmd::RecvQueue`], in `qp/recv.rs`) takes `post_recvv` and its forms:
//! each incoming SEND, or WRITE WITH IMMEDIATE, consumes one posted receive and completes it
//! ([`rdma_pmd::WcOpcode::RecvRdmaWithImm`] with [`rdma_pmd::Completion::imm`] for the latter).
//!
//! The QP borrows its device and may read any region whose buffers it was given for `'r`; it
//! is dropped before them. Dropping it moves it to ERR and RST, destroys it and its CQs, and
//! only then releases the regions of requests that never completed and frees its memory.
//!
//! ```
//! use rdma_pmd::{Completion, Post, SendFlags, SendQueue};
//! use rdma_pmd_mlx5::{control::Access, Mlx5, QpConfig, SharedDma};
//! use rdma_pmd_mlx5_model::Model;
//!
//! // A software device; on hardware the three handles come from VFIO or bare metal.
//! let model = Model::new();
//! let dev = Mlx5::open(model.bar(), SharedDma(model.dma()), model.control())?;
//! let src = dev.reg(4096, Access::LOCAL_WRITE)?;
//! let dst = dev.reg(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
//! let mut a = dev.create_qp::<64, 16>(&QpConfig::default())?;
//! let mut b = dev.create_qp::<64, 16>(&QpConfig::default())?;
//! let (na, nb) = (a.qp_num(), b.qp_num());
//! a.connect_loopback(nb)?;
//! b.connect_loopback(na)?;
//!
//! src.write(0, b"hello, mlx5")?;
//! a.post_write(7, src.slice(0, 11)?, SendFlags::SIGNALED, dst.remote(100))?;
//! let mut wc = [Completion::default(); 4];
//! let n = a.poll_bounded(&mut wc, 1_000_000_000)?;
//! assert_eq!((n, wc[0].wr_id, wc[0].status.is_ok()), (1, 7, true));
//! let mut got = [0u8; 11];
//! dst.read(100, &mut got)?;
//! assert_eq!(&got, b"hello, mlx5");
//! # Ok::<(), rdma_pmd::Error>(())
//! ```
//!
//! A region must outlive every QP that may read it; posting from one declared after the QP
//! (so dropped before it) does not compile:
//!
//! ```compile_fail,E0597
//! # use rdma_pmd::{Post, RemoteBuf, SendFlags};
//! # use rdma_pmd_mlx5::{control::Access, Mlx5, QpConfig, SharedDma};
//! # let model = rdma_pmd_mlx5_model::Model::new();
//! # let dev = Mlx5::open(model.bar(), SharedDma(model.dma()), model.control())?;
//! let mut qp = dev.create_qp::<64, 16>(&QpConfig::default())?;
//! let src = dev.reg(4096, Access::LOCAL_WRITE)?;
//! qp.post_write(1, src.slice(0, 8)?, SendFlags::SIGNALED, RemoteBuf::default())?;
//! # Ok::<(), rdma_pmd::Error>(())
//! ```

//! # One queue pair per thread
//!
//! A `Qp` is `Send` (when its device's handles are: `M: Sync`, `D: Sync`, `C: Send`), so an
//! application can create its queue pairs at start-up and give one to each worker thread, the
//! way a DPDK application owns one queue per lcore. It is not `Sync`: posting and polling take
//! `&mut self`, and one thread drives a queue pair at a time. What it holds for requests in
//! flight are their regions' [`rdma_pmd::Released`] counts (atomic, `Sync`); the buffers it is
//! given ([`rdma_pmd::LocalBuf`], [`rdma_pmd::DestBuf`]) are `!Send`, so a worker posts only
//! from regions it holds itself (see [`rdma_pmd::region`]). The device's control path is
//! behind a spin lock taken only at setup and teardown ([`crate::device`]).
//!
//! ```
//! use rdma_pmd::{Completion, Post, SendFlags, SendQueue};
//! use rdma_pmd_mlx5::{control::Access, Mlx5, QpConfig, SharedDma};
//!
//! let model = rdma_pmd_mlx5_model::Model::new();
//! let dev = Mlx5::open(model.bar(), SharedDma(model.dma()), model.control())?;
//! let dst = dev.reg(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
//! let (mut a, mut b) = (dev.create_qp::<64, 16>(&QpConfig::default())?,
//!                       dev.create_qp::<64, 16>(&QpConfig::default())?);
//! let (na, nb) = (a.qp_num(), b.qp_num());
//! a.connect_loopback(nb)?;
//! b.connect_loopback(na)?;
//! let (remote, dev) = (dst.remote(0), &dev);
//! std::thread::scope(|s| {
//!     s.spawn(move || -> rdma_pmd::Result<()> {
//!         // The worker registers what it posts from, and moves `a` in.
//!         let src = dev.reg(64, Access::LOCAL_WRITE)?;
//!         let mut a = a;
//!         a.post_write(1, src.slice(0, 8)?, SendFlags::SIGNALED, remote)?;
//!         let mut wc = [Completion::default(); 1];
//!         assert_eq!(a.poll_bounded(&mut wc, 1_000_000_000)?, 1);
//!         Ok(())
//!     }).join().unwrap()
//! })?;
//! # drop(b);
//! # Ok::<(), rdma_pmd::Error>(())
//! ```
//!
//! Not `Sync`: two threads cannot share one.
//!
//! ```compile_fail,E0277
//! fn sync<T: Sync>() {}
//! sync::<rdma_pmd_mlx5::qp::Qp<'static, rdma_pmd_hal::mem::MemBar,
//!     rdma_pmd_mlx5::SharedDma<std::sync::Arc<rdma_pmd_hal::mem::HeapDma>>,
//!     rdma_pmd_mlx5_model::ModelControl>>();
//! ```
//!
//! And a buffer cannot follow it to another thread: a worker posts from its own regions.
//!
//! ```compile_fail,E0277
//! use rdma_pmd::{Post, SendFlags};
//! use rdma_pmd_mlx5::{control::Access, Mlx5, QpConfig, SharedDma};
//! # let model = rdma_pmd_mlx5_model::Model::new();
//! # let dev = Mlx5::open(model.bar(), SharedDma(model.dma()), model.control()).unwrap();
//! let src = dev.reg(64, Access::LOCAL_WRITE).unwrap();
//! let buf = src.slice(0, 8).unwrap();
//! let mut qp = dev.create_qp::<64, 16>(&QpConfig::default()).unwrap();
//! std::thread::scope(|s| {
//!     s.spawn(move || qp.post_write(1, buf, SendFlags::SIGNALED, Default::default()));
//! });
//! ```

use core::mem::ManuallyDrop;

use rdma_pmd::{Caps, Error, QpNum, QueueId, Result, Retired, Side};
use rdma_pmd_hal::{Dma, DmaBuf, Mmio};

use crate::control::{Access, Control, Cqn, Path, QpParams, Service, Transition, Uar};
use crate::datapath::cq::CqRing;
use crate::datapath::doorbell::{BlueFlame, SqDoorbell};
use crate::datapath::recv::RecvRing;
use crate::datapath::send::SendRing;
use crate::datapath::wqe::{RawRing, WqeBuilder};
use crate::device::{check_uar, Mlx5};
use crate::layout::codes::{MAX_DS, SEND_WQE_BB, SEND_WQE_DS};
use crate::layout::wqe::{DATAGRAM_LEN, INLINE_HEADER_LEN, RCV_DBR, SND_DBR};

/// Where a QP is in its life (`ibv_qp_state`, the states this driver moves through).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    /// Created, not yet initialised.
    Reset,
    /// `RST2INIT` done: receives may be posted.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send: posting allowed.
    Rts,
    /// In error: outstanding requests are flushed; nothing can be posted.
    Error,
}

/// How a QP is created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpConfig {
    /// Every request asks for a completion (`sq_sig_all`).
    pub sq_sig_all: bool,
    /// Lower the SGE limit below what the device and ring allow.
    pub max_send_sge: Option<u32>,
    /// Lower the inline limit below what the device and ring allow.
    pub max_inline: Option<u32>,
    /// When a single post rings with a BlueFlame copy (rdma-core's default: whenever it fits).
    pub blueflame: BlueFlame,
    /// Transport service: RC (the default), UD, or the port's GSI QP (QP1).
    pub service: Service,
}

/// The fields of the `RST2INIT`, `INIT2RTR` and `RTR2RTS` transitions that do not depend on
/// the peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectOpts {
    /// Physical port (1-based).
    pub port: u8,
    /// Remote access the QP grants as a responder.
    pub access: Access,
    /// Path MTU as an `ibv_mtu` value (1 = 256 ... 5 = 4096).
    pub mtu: u8,
    /// Expected first receive PSN (the peer's `sq_psn`).
    pub rq_psn: u32,
    /// First send PSN. The default 0 suits tests; a connection to a real peer should draw it
    /// from [`rdma_pmd::PsnGen`] and tell the peer.
    pub sq_psn: u32,
    /// Local ACK timeout exponent (4.096 µs × 2^timeout).
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7: infinite).
    pub rnr_retry: u8,
}

impl Default for ConnectOpts {
    /// Port 1, remote write allowed, MTU 1024, PSNs 0, timeout 14 (≈ 67 ms), 7 retries.
    fn default() -> Self {
        ConnectOpts {
            port: 1,
            access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            mtu: 3,
            rq_psn: 0,
            sq_psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
        }
    }
}

/// The device memory a QP owns.
pub(crate) struct Mem {
    /// Receive ring, then send ring (PRM order).
    pub(crate) wq: DmaBuf,
    /// `[RCV_DBR]`, `[SND_DBR]`.
    pub(crate) dbrec: DmaBuf,
    pub(crate) scq: CqRing,
    rcq: CqRing,
}

/// A queue pair (RC, UD or GSI) with `SQ` send blocks and `RQ` receive WQEs of `RS` scatter
/// entries. See the module docs.
pub struct Qp<
    'r,
    M: Mmio,
    D: Dma,
    C: Control,
    const SQ: usize = 256,
    const RQ: usize = 16,
    const RS: usize = 4,
> {
    pub(crate) dev: &'r Mlx5<M, D, C>,
    pub(crate) qpn: QpNum,
    pub(crate) state: QpState,
    pub(crate) caps: Caps,
    uar: Uar,
    scqn: Cqn,
    rcqn: Cqn,
    pub(crate) db: SqDoorbell,
    pub(crate) sq: SendRing<'r, SQ>,
    rq: RecvRing<'r, RQ, RS>,
    pub(crate) service: Service,
    id: QueueId,
    /// A receive fault found after completions were written, for the next `poll_recv`.
    recv_fault: Option<Error>,
    pub(crate) mem: ManuallyDrop<Mem>,
}

/// The compile-time check that a queue pair can be moved to another thread whenever its
/// device's handles allow it (the module docs show it is not `Sync`).
const _: () = {
    const fn send<T: Send>() {}
    #[allow(dead_code)]
    const fn qp_is_send<
        'r,
        M: Mmio + Sync + 'r,
        D: Dma + Sync + 'r,
        C: Control + Send + 'r,
        const SQ: usize,
        const RQ: usize,
        const RS: usize,
    >() {
        send::<Qp<'r, M, D, C, SQ, RQ, RS>>();
    }
};

impl<M: Mmio, D: Dma, C: Control> Mlx5<M, D, C> {
    /// Create an RC QP with `SQ` send blocks (a power of two up to 2^15) and `RQ` receive WQEs
    /// (a power of two, at least 4), each with its own completion queue. It starts in RESET;
    /// [`Qp::connect`] brings it to RTS.
    ///
    /// The send CQ has `SQ` entries and the receive CQ `RQ`: enough for one CQE per WQE, which
    /// is what a flush produces, so neither can overflow. The bookkeeping lives in the returned
    /// value (about `56 * SQ + 8 * RQ` bytes).
    pub fn create_qp<const SQ: usize, const RQ: usize>(
        &self,
        cfg: &QpConfig,
    ) -> Result<Qp<'_, M, D, C, SQ, RQ>> {
        Qp::create(self, cfg)
    }

    /// [`create_qp`](Self::create_qp) with `RS` scatter entries per receive (a power of two
    /// up to 128; [`create_qp`](Self::create_qp) takes 4).
    pub fn create_qp_with<const SQ: usize, const RQ: usize, const RS: usize>(
        &self,
        cfg: &QpConfig,
    ) -> Result<Qp<'_, M, D, C, SQ, RQ, RS>> {
        Qp::create(self, cfg)
    }
}

/// Undoes a half-built QP on early return.
struct Building<'a, M: Mmio, D: Dma, C: Control> {
    dev: &'a Mlx5<M, D, C>,
    uar: Option<Uar>,
    scq: Option<CqRing>,
    scqn: Option<Cqn>,
    rcq: Option<CqRing>,
    rcqn: Option<Cqn>,
    wq: Option<DmaBuf>,
    dbrec: Option<DmaBuf>,
}

impl<M: Mmio, D: Dma, C: Control> Drop for Building<'_, M, D, C> {
    fn drop(&mut self) {
        let mut ctl = self.dev.control();
        let dma = self.dev.dma();
        let scq_gone = self.scqn.is_none_or(|n| ctl.destroy_cq(n).is_ok());
        let rcq_gone = self.rcqn.is_none_or(|n| ctl.destroy_cq(n).is_ok());
        if let Some(u) = self.uar.take() {
            let _ = ctl.dealloc_uar(u);
        }
        // A CQ whose destroy failed keeps its ring (leaked): the device may still write it.
        if let (Some(r), true) = (self.scq.take(), scq_gone) {
            // SAFETY: the CQ is destroyed (or was never created); no QP was created over it.
            unsafe { r.free(dma) };
        }
        if let (Some(r), true) = (self.rcq.take(), rcq_gone) {
            // SAFETY: as above.
            unsafe { r.free(dma) };
        }
        if let Some(b) = self.wq.take() {
            // SAFETY: no QP was created over this block.
            unsafe { dma.free(b) };
        }
        if let Some(b) = self.dbrec.take() {
            // SAFETY: no QP was created over this block.
            unsafe { dma.free(b) };
        }
    }
}

fn log2(n: usize) -> u8 {
    n.trailing_zeros() as u8
}

impl<'r, M: Mmio, D: Dma, C: Control, const SQ: usize, const RQ: usize, const RS: usize>
    Qp<'r, M, D, C, SQ, RQ, RS>
{
    const GEOMETRY: () = assert!(
        SQ.is_power_of_two() && SQ <= 1 << 15 && RQ.is_power_of_two() && RQ >= 4 && RQ <= 1 << 15,
        "SQ: power of two up to 2^15; RQ: power of two in 4..=2^15"
    );

    fn create(dev: &'r Mlx5<M, D, C>, cfg: &QpConfig) -> Result<Self> {
        #[allow(clippy::let_unit_value)]
        let () = Self::GEOMETRY;
        let dcaps = dev.caps();
        if log2(SQ) > dcaps.log_max_qp_sz || log2(RQ) > dcaps.log_max_qp_sz {
            return Err(Error::InvalidArgument("queue larger than the device's log_max_qp_sz"));
        }
        if log2(SQ) > dcaps.log_max_cq_sz {
            return Err(Error::InvalidArgument("send CQ larger than the device's log_max_cq_sz"));
        }
        let caps = qp_caps(dcaps.max_wqe_sz_sq, SQ, cfg)?;
        let stride = RecvRing::<'r, RQ, RS>::STRIDE;

        let mut b = Building {
            dev,
            uar: None,
            scq: None,
            scqn: None,
            rcq: None,
            rcqn: None,
            wq: None,
            dbrec: None,
        };
        let uar = dev.control().alloc_uar()?;
        b.uar = Some(uar);
        check_uar(dev.mmio(), uar, &dcaps)?;

        let scq = b.scq.insert(CqRing::alloc(dev.dma(), log2(SQ))?);
        b.scqn = Some(dev.control().create_cq(&scq.params(dev.cq_uar()))?);
        let rcq = b.rcq.insert(CqRing::alloc(dev.dma(), log2(RQ))?);
        b.rcqn = Some(dev.control().create_cq(&rcq.params(dev.cq_uar()))?);

        let sq_off = RQ * stride;
        let page = dev.dma().page_size().max(SEND_WQE_BB);
        let wq = b.wq.insert(dev.dma().alloc(sq_off + SQ * SEND_WQE_BB, page)?);
        let dbrec = b.dbrec.insert(dev.dma().alloc(64, 64)?);
        let params = QpParams {
            service: cfg.service,
            pd: dev.pd(),
            send_cq: b.scqn.expect("set above"),
            recv_cq: b.rcqn.expect("set above"),
            log_sq_size: log2(SQ),
            log_rq_size: Some(log2(RQ)),
            log_rq_stride: log2(stride),
            buf: wq.bus(),
            dbrec: dbrec.bus(),
            uar,
        };
        let cpu = wq.cpu();
        let qpn = dev.control().create_qp(&params)?;

        // SAFETY: the send ring is `SQ * 64` bytes at `sq_off` (a multiple of 64) of the block,
        // which the QP owns until its drop, after the RawRing (a field of the same QP) is last
        // used; nothing forms a reference into it.
        let sink = unsafe {
            RawRing::new(core::ptr::NonNull::new_unchecked(cpu.as_ptr().add(sq_off)), SQ as u32)
        };
        let sink = match sink {
            Ok(s) => s,
            Err(e) => {
                let _ = dev.control().destroy_qp(qpn);
                return Err(e);
            }
        };
        let builder = WqeBuilder::new(qpn)
            .sq_sig_all(cfg.sq_sig_all)
            .max_sge(caps.max_sge)
            .max_inline(caps.max_inline)
            .datagram(cfg.service != Service::Rc);
        let sq = match SendRing::new(sink, builder) {
            Ok(s) => s,
            Err(e) => {
                let _ = dev.control().destroy_qp(qpn);
                return Err(e);
            }
        };
        let mem = Mem {
            wq: b.wq.take().expect("set above"),
            dbrec: b.dbrec.take().expect("set above"),
            scq: b.scq.take().expect("set above"),
            rcq: b.rcq.take().expect("set above"),
        };
        let qp = Qp {
            dev,
            qpn,
            state: QpState::Reset,
            caps,
            uar,
            scqn: b.scqn.take().expect("set above"),
            rcqn: b.rcqn.take().expect("set above"),
            db: SqDoorbell::new(uar, dev.bf_half(), cfg.blueflame),
            sq,
            rq: RecvRing::new(0),
            service: cfg.service,
            id: QueueId::new(),
            recv_fault: None,
            mem: ManuallyDrop::new(mem),
        };
        b.uar = None;
        Ok(qp)
    }

    /// The QP's state as this driver last moved it (or saw it fail).
    pub fn state(&self) -> QpState {
        self.state
    }

    /// The UAR page whose BlueFlame register this QP rings.
    pub fn uar(&self) -> Uar {
        self.uar
    }

    /// Send and receive CQ numbers.
    pub fn cq_nums(&self) -> (Cqn, Cqn) {
        (self.scqn, self.rcqn)
    }

    /// The send ring's WQE counter (the next free block).
    pub fn sq_pi(&self) -> u16 {
        self.sq.pi()
    }

    /// Free blocks in the send ring.
    pub fn sq_room(&self) -> u32 {
        self.sq.room()
    }

    /// Receive WQEs posted and not completed.
    pub fn rq_outstanding(&self) -> u32 {
        self.rq.outstanding()
    }

    fn modify(&mut self, t: Transition, to: QpState) -> Result<()> {
        self.dev.control().modify_qp(self.qpn, &t)?;
        self.state = to;
        Ok(())
    }

    /// `RST2INIT`: lets receives be posted before the peer is known.
    pub fn init(&mut self, opts: &ConnectOpts) -> Result<()> {
        if self.state != QpState::Reset {
            return Err(Error::InvalidArgument("QP not in RESET"));
        }
        self.modify(Transition::RstToInit { port: opts.port, access: opts.access }, QpState::Init)
    }

    /// Bring the QP to RTS facing `remote` over `path`: `RST2INIT` (unless already in INIT),
    /// `INIT2RTR`, `RTR2RTS`.
    pub fn connect(&mut self, remote: QpNum, path: Path, opts: &ConnectOpts) -> Result<()> {
        if self.state == QpState::Reset {
            self.init(opts)?;
        }
        self.to_rtr(remote, path, opts.mtu, opts.rq_psn)?;
        self.to_rts(opts)
    }

    /// `INIT2RTR`: receive from `remote` over `path` with path MTU `mtu` (an `ibv_mtu`),
    /// expecting `rq_psn` first.
    pub fn to_rtr(&mut self, remote: QpNum, path: Path, mtu: u8, rq_psn: u32) -> Result<()> {
        if self.state != QpState::Init {
            return Err(Error::InvalidArgument("QP not in INIT"));
        }
        self.modify(Transition::InitToRtr { remote_qpn: remote, path, mtu, rq_psn }, QpState::Rtr)
    }

    /// `RTR2RTS` with `opts`' send PSN, ACK timeout and retries.
    pub fn to_rts(&mut self, opts: &ConnectOpts) -> Result<()> {
        if self.state != QpState::Rtr {
            return Err(Error::InvalidArgument("QP not in RTR"));
        }
        self.modify(
            Transition::RtrToRts {
                sq_psn: opts.sq_psn,
                timeout: opts.timeout,
                retry_cnt: opts.retry_cnt,
                rnr_retry: opts.rnr_retry,
            },
            QpState::Rts,
        )
    }

    /// Connect to a QP on the same port, with default options.
    pub fn connect_loopback(&mut self, remote: QpNum) -> Result<()> {
        self.connect(remote, Path::Loopback, &ConnectOpts::default())
    }

    /// Connect over RoCE v2 to the peer QP `remote` at `dgid`/`dmac`, from source GID index
    /// `sgid_index`, with UDP source port `udp_sport`.
    pub fn connect_roce_v2(
        &mut self,
        remote: QpNum,
        dgid: [u8; 16],
        dmac: [u8; 6],
        sgid_index: u8,
        udp_sport: u16,
        opts: &ConnectOpts,
    ) -> Result<()> {
        let path = Path::RoceV2 {
            dgid,
            dmac,
            sgid_index,
            udp_sport,
            hop_limit: 0,
            traffic_class: 0,
            flow_label: 0,
            sl: 0,
        };
        self.connect(remote, path, opts)
    }

    /// Move the QP to ERR (`2ERR_QP`): the device flushes every request it has not executed,
    /// and each is reported once with `WrFlushErr` by [`poll`](rdma_pmd::SendQueue::poll) (receives by
    /// [`poll_recv`](rdma_pmd::RecvQueue::poll_recv)). Requests that executed before the move and were not
    /// signalled get no CQE, as in rdma-core: they retire silently with the next CQE after
    /// them, or, when none follows (every outstanding request had executed), stay in
    /// [`outstanding`](rdma_pmd::SendQueue::outstanding), their regions busy, until the QP is dropped.
    pub fn to_error(&mut self) -> Result<()> {
        self.modify(Transition::ToErr, QpState::Error)
    }

    /// `2RST_QP`: back to RESET with both rings empty and restarted at their first entry,
    /// ready to be connected again (`init`, `connect`, `ready_datagram`) without a new QP,
    /// as a verbs application reuses one through `ibv_modify_qp` to `IBV_QPS_RESET` (rdma-core's
    /// `mlx5_modify_qp` then cleans the CQs of the QP's entries, restarts the ring indices and
    /// zeroes both doorbell records; this does the same).
    ///
    /// Refused with nothing changed while a poll still owes a completion: a signalled send
    /// or any receive outstanding, a completion or fault found and not yet returned, or, after
    /// an error CQE, any send outstanding (each gets a flush). Reap them first. Unsignalled
    /// sends still outstanding otherwise (ones that executed before a move to ERR and get
    /// no CQE, or ones the reset discards) retire with no completion, their regions
    /// released: in RESET the device reads neither ring. Entries left in the QP's CQs (the
    /// flushes of such sends) are discarded.
    pub fn reset(&mut self) -> Result<()> {
        if self.state == QpState::Reset {
            return Ok(());
        }
        if self.sq.owes_completions() || self.rq.outstanding() != 0 || self.recv_fault.is_some() {
            return Err(Error::InvalidArgument("a poll still owes completions: reap them first"));
        }
        self.modify(Transition::ToRst, QpState::Reset)?;
        // The CQs are this QP's alone; a device in contract wrote every entry already, and
        // at most a ring's worth can be software-owned.
        let mem = &mut *self.mem;
        for cq in [&mut mem.scq, &mut mem.rcq] {
            for _ in 0..cq.size() {
                if cq.pop().is_none() {
                    break;
                }
            }
            cq.publish();
        }
        self.sq.restart();
        self.rq.restart();
        self.mem.dbrec.write_u32(RCV_DBR * 4, 0);
        self.mem.dbrec.write_u32(SND_DBR * 4, 0);
        Ok(())
    }

    /// Bring a UD or GSI QP to RTS: `RST2INIT` with its Q_Key (QP1: [`rdma_pmd::GSI_QKEY`]),
    /// `INIT2RTR`, `RTR2RTS` with `sq_psn`, as the kernel's `mlx5_ib` moves its GSI QP.
    pub fn ready_datagram(&mut self, port: u8, qkey: u32, sq_psn: u32) -> Result<()> {
        if self.service == Service::Rc {
            return Err(Error::InvalidArgument("not a datagram QP"));
        }
        if self.state != QpState::Reset {
            return Err(Error::InvalidArgument("QP not in RESET"));
        }
        let gsi = self.service == Service::Gsi;
        self.modify(Transition::RstToInitUd { port, qkey, gsi }, QpState::Init)?;
        self.modify(Transition::InitToRtrUd { gsi }, QpState::Rtr)?;
        self.modify(Transition::RtrToRtsUd { sq_psn, gsi }, QpState::Rts)
    }

    /// The QP's transport service.
    pub fn service(&self) -> Service {
        self.service
    }
}

// SAFETY: `retired` counts, per direction, requests whose completion, a later completion of
// the same queue (send queue), or flush was reaped, or that `Drop` released after the QP was
// destroyed: the rings' `posted - outstanding`, in the numbering of `posted`/`recv_posted`.
// The id is the QP's own, from `QueueId::new`.
unsafe impl<M: Mmio, D: Dma, C: Control, const SQ: usize, const RQ: usize, const RS: usize> Retired
    for Qp<'_, M, D, C, SQ, RQ, RS>
{
    #[inline]
    fn queue_id(&self) -> QueueId {
        self.id
    }

    #[inline]
    fn retired(&self, side: Side) -> u64 {
        match side {
            Side::Send => self.sq.retired(),
            Side::Recv => self.rq.retired(),
        }
    }
}

/// The epilogue of both polls: completions written before a fault are reported now (`Ok(n)`)
/// and the fault is kept in `fault` for the next poll, so that every request's completion
/// reaches the caller exactly once; with none written, `res` is returned as it is.
#[inline(always)]
fn defer_fault(res: Result<usize>, n: usize, fault: &mut Option<Error>) -> Result<usize> {
    match res {
        Err(e) if n > 0 => {
            *fault = Some(e);
            Ok(n)
        }
        res => res,
    }
}

/// The limits of a QP of `sq` blocks on a device whose largest send WQE is `max_wqe_sz`.
fn qp_caps(max_wqe_sz: u32, sq: usize, cfg: &QpConfig) -> Result<Caps> {
    let bytes = (max_wqe_sz as usize).min(sq * SEND_WQE_BB);
    let units = (bytes / SEND_WQE_DS).min(MAX_DS as usize);
    // The largest head before the payload: control and remote address on RC (a WRITE or
    // READ), control and the 48-byte datagram segment on UD (`qp.c` `sq_overhead`).
    let hdr = match cfg.service {
        Service::Rc => 2,
        Service::Ud | Service::Gsi => 1 + DATAGRAM_LEN / SEND_WQE_DS,
    };
    if units < hdr + 1 {
        return Err(Error::Unsupported("send WQEs too small for one data segment"));
    }
    let max_sge = (units - hdr) as u32;
    let max_inline = ((units - hdr) * SEND_WQE_DS - INLINE_HEADER_LEN) as u32;
    Ok(Caps {
        max_send_wr: sq as u32,
        max_sge: cfg.max_send_sge.map_or(max_sge, |n| n.min(max_sge)),
        max_inline: cfg.max_inline.map_or(max_inline, |n| n.min(max_inline)),
    })
}

impl<M: Mmio, D: Dma, C: Control, const SQ: usize, const RQ: usize, const RS: usize> Drop
    for Qp<'_, M, D, C, SQ, RQ, RS>
{
    fn drop(&mut self) {
        let dev = self.dev;
        let (qp_gone, scq_gone, rcq_gone) = {
            let mut ctl = dev.control();
            if self.state != QpState::Reset {
                let _ = ctl.modify_qp(self.qpn, &Transition::ToErr);
                let _ = ctl.modify_qp(self.qpn, &Transition::ToRst);
            }
            let qp_gone = ctl.destroy_qp(self.qpn).is_ok();
            let scq_gone = ctl.destroy_cq(self.scqn).is_ok();
            let rcq_gone = ctl.destroy_cq(self.rcqn).is_ok();
            let _ = ctl.dealloc_uar(self.uar);
            (qp_gone, scq_gone, rcq_gone)
        };
        // SAFETY: `mem` is taken exactly once, here, and not used afterwards.
        let mem = unsafe { ManuallyDrop::take(&mut self.mem) };
        if !qp_gone {
            // The device may still read the ring and the regions it names: keep both (the
            // regions stay busy, so their memory is kept too).
            return;
        }
        // The QP no longer exists, so nothing reads the regions of requests that never
        // completed: release them.
        self.sq.release_everything();
        self.rq.release_everything();
        let dma = dev.dma();
        // SAFETY: the QP is destroyed: the device no longer reads its rings or doorbell record.
        unsafe {
            dma.free(mem.wq);
            dma.free(mem.dbrec);
        }
        if scq_gone {
            // SAFETY: the CQ is destroyed.
            unsafe { mem.scq.free(dma) };
        }
        if rcq_gone {
            // SAFETY: the CQ is destroyed.
            unsafe { mem.rcq.free(dma) };
        }
    }
}

mod recv;
mod send;

#[cfg(test)]
mod tests;
