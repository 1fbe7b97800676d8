//! The HCA's resource tables: UARs, PDs, memory keys, CQs, QPs, and the per-UAR BlueFlame
//! assembly state. Everything here lives under the model's device lock.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use rdma_pmd::BusAddr;
use rdma_pmd_hal::mem::BusMemory;

/// Device limits the model enforces and reports (`QUERY_HCA_CAP` general capabilities).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelCaps {
    /// log2 of the largest send/receive queue (WQEBBs / WQEs).
    pub log_max_qp_sz: u8,
    /// log2 of the largest CQ.
    pub log_max_cq_sz: u8,
    /// Largest send WQE in bytes.
    pub max_wqe_sz_sq: u32,
    /// log2 of the BlueFlame register size; each register has two halves. The model's UAR
    /// layout is fixed at 9 (two 256-byte halves at 0x800 and 0x900).
    pub log_bf_reg_size: u8,
}

impl Default for ModelCaps {
    /// Values of a ConnectX-5-class device: 32 Ki WQEBBs, 4 Mi CQEs, 1 KiB send WQEs.
    fn default() -> Self {
        ModelCaps { log_max_qp_sz: 15, log_max_cq_sz: 22, max_wqe_sz_sq: 1024, log_bf_reg_size: 9 }
    }
}

/// Rights of a memory key or of a QP as responder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rights {
    /// Local write.
    pub local_write: bool,
    /// Remote write.
    pub remote_write: bool,
    /// Remote read.
    pub remote_read: bool,
    /// Remote atomic (`mkc.a`; on a QP `qpc.rae`).
    pub remote_atomic: bool,
}

/// How a memory key turns its virtual addresses into bus addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Xlate {
    /// MTT mode with bus-contiguous pages: the page containing `start` is at `base`, the next
    /// page at `base + page`, ... (PRM: the offset of `start_addr` inside the first page is kept).
    Mtt {
        /// Bus address of the first page (page aligned).
        base: u64,
        /// log2 of the page size.
        page_shift: u8,
    },
    /// MTT mode with one entry per page, each page anywhere (`CREATE_MKEY`'s MTT list as the
    /// kernel and rdma-core build it from pinned, scattered pages): page *k* of the range
    /// (counting from the page containing `start`) is at `pages[k]`.
    Pages {
        /// Bus address of each page (page aligned).
        pages: std::sync::Arc<[u64]>,
        /// log2 of the page size.
        page_shift: u8,
    },
    /// Physical-address mode: virtual address = bus address.
    Physical,
}

/// A memory key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Mkey {
    pub pd: u32,
    pub start: u64,
    pub len: u64,
    pub rights: Rights,
    pub xlate: Xlate,
}

impl Mkey {
    /// Whether `[addr, addr + len)` lies inside the key's range.
    pub fn covers(&self, addr: u64, len: u64) -> bool {
        let Some(end) = addr.checked_add(len) else { return false };
        addr >= self.start && end <= self.start + self.len
    }

    /// The bus address of virtual address `va` (inside the range). With a page list, an
    /// address past the list yields one no memory answers (a DMA fault, not a panic).
    pub fn bus(&self, va: u64) -> u64 {
        match &self.xlate {
            Xlate::Physical => va,
            Xlate::Mtt { base, page_shift } => {
                let first_page = self.start & !((1u64 << page_shift) - 1);
                base.wrapping_add(va.wrapping_sub(first_page))
            }
            Xlate::Pages { pages, page_shift } => {
                let mask = (1u64 << page_shift) - 1;
                let off = va.wrapping_sub(self.start & !mask);
                match pages.get((off >> page_shift) as usize) {
                    Some(p) => p + (off & mask),
                    None => !0xfff,
                }
            }
        }
    }

    /// `[va, va + len)` as bus-contiguous pieces `(bus, len)`, in order: one piece unless the
    /// key is a page list, then one per page touched.
    pub fn segments(&self, va: u64, len: u64) -> Vec<(u64, u64)> {
        let Xlate::Pages { page_shift, .. } = &self.xlate else {
            return vec![(self.bus(va), len)];
        };
        let pg = 1u64 << page_shift;
        let mut out = Vec::new();
        let (mut at, mut left) = (va, len);
        while left > 0 {
            let n = left.min(pg - (at & (pg - 1)));
            out.push((self.bus(at), n));
            at = at.wrapping_add(n);
            left -= n;
        }
        out
    }

    /// Read `buf.len()` bytes at `va` through the key; the bus address of the piece that did
    /// not translate, if one did not.
    pub fn read(&self, dma: &dyn BusMemory, va: u64, buf: &mut [u8]) -> Result<(), u64> {
        let mut off = 0usize;
        for (bus, n) in self.segments(va, buf.len() as u64) {
            let end = off + n as usize;
            if !dma.read(BusAddr(bus), &mut buf[off..end]) {
                return Err(bus);
            }
            off = end;
        }
        Ok(())
    }

    /// Write `data` at `va` through the key; the bus address of the piece that did not
    /// translate, if one did not.
    pub fn write(&self, dma: &dyn BusMemory, va: u64, data: &[u8]) -> Result<(), u64> {
        let mut off = 0usize;
        for (bus, n) in self.segments(va, data.len() as u64) {
            let end = off + n as usize;
            if !dma.write(BusAddr(bus), &data[off..end]) {
                return Err(bus);
            }
            off = end;
        }
        Ok(())
    }

    /// Whether every byte of `[va, va + len)` translates; the first bus address that does not.
    pub fn mapped(&self, dma: &dyn BusMemory, va: u64, len: u64) -> Result<(), u64> {
        for (bus, n) in self.segments(va, len) {
            if !dma.mapped(BusAddr(bus), n as usize) {
                return Err(bus);
            }
        }
        Ok(())
    }
}

/// A queue buffer as hardware addresses it: pages of `1 << page_shift` bytes, each anywhere in
/// bus memory, listed in queue order (a PAS list: PRM "Physical Address Structure"; the
/// kernel's CQ, EQ and WQ buffers are `mlx5_frag_buf`s of separately allocated pages). Byte
/// `off` of the queue is at byte `start + off` of the listed pages: `start` is the context's
/// `page_offset` in bytes (user queues start where the application's buffer starts inside the
/// first page the kernel lists). A bus-contiguous buffer is one page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct QueueBuf {
    pages: std::sync::Arc<[u64]>,
    page_shift: u32,
    start: u64,
}

impl QueueBuf {
    /// A buffer that is bus-contiguous from `base`.
    pub fn contiguous(base: u64) -> QueueBuf {
        QueueBuf { pages: std::sync::Arc::from([base]), page_shift: 63, start: 0 }
    }

    /// A buffer in `pages` of `1 << page_shift` bytes each, starting `start` bytes into the
    /// first (less than one page).
    pub fn pages(pages: &[u64], page_shift: u32, start: u64) -> QueueBuf {
        let page_shift = page_shift.min(63);
        let start = start & ((1u64 << page_shift) - 1);
        QueueBuf { pages: std::sync::Arc::from(pages), page_shift, start }
    }

    /// Bus address of the first listed page.
    pub fn base(&self) -> u64 {
        self.pages.first().copied().unwrap_or(u64::MAX)
    }

    /// Bus address of byte `off` of the queue. Callers access at most to the end of an
    /// aligned entry (CQE, EQE, WQEBB, receive WQE), which never crosses a page. An offset
    /// past the listed pages yields an address no memory answers (a DMA fault, not a panic).
    pub fn at(&self, off: u64) -> u64 {
        let off = off.wrapping_add(self.start);
        let mask = (1u64 << self.page_shift) - 1;
        match self.pages.get((off >> self.page_shift) as usize) {
            Some(p) => p.wrapping_add(off & mask),
            None => !0xfff,
        }
    }
}

/// A completion queue.
#[derive(Debug)]
pub(crate) struct Cq {
    pub log_size: u8,
    pub buf: QueueBuf,
    pub dbrec: u64,
    pub uar: u32,
    /// Producer index (free running).
    pub pi: u32,
    pub armed: bool,
    /// The EQ its completion events go to (`cqc.c_eqn`), for a CQ the firmware created.
    pub eqn: Option<u8>,
    /// Overflowed or faulted: no more CQEs are written.
    pub error: bool,
}

/// QP state (`qp_state` of the QP context).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    /// RST.
    Reset,
    /// INIT.
    Init,
    /// RTR: can receive.
    Rtr,
    /// RTS: can send.
    Rts,
    /// ERR: everything is flushed.
    Error,
}

/// Where a QP's peer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Same port.
    Loopback,
    /// RoCE v2 to a GID.
    RoceV2 {
        /// Destination GID.
        dgid: [u8; 16],
        /// Destination MAC.
        dmac: [u8; 6],
        /// Our GID index.
        sgid_index: u8,
        /// Traffic class (IPv4 TOS) of the QP's packets (`ads.tclass`).
        tclass: u8,
        /// Hop limit (IPv4 TTL) of the QP's packets (`ads.hop_limit`).
        hop_limit: u8,
        /// IPv6 flow label (`ads.flow_label`, 20 bits).
        flow_label: u32,
        /// UDP source port (`ads.udp_sport`; 0: the model derives one from both QPNs).
        udp_sport: u16,
    },
}

/// A doorbell waiting for the engine: the 8 bytes, the send doorbell record read when it
/// arrived, and the BlueFlame copy if it was one.
#[derive(Clone, Debug)]
pub(crate) struct Doorbell {
    pub head: [u8; 8],
    /// Send counter in the doorbell record when the doorbell arrived (16 bits).
    pub target: u16,
    pub bf: Option<Vec<u8>>,
    /// Made up by the model (flush on a transition to ERR): no doorbell checks.
    pub synthetic: bool,
    /// A WQE was executed under this doorbell.
    pub touched: bool,
}

/// The transport service of a QP (`qpc.st`, `MLX5_QPC_ST_*` of `mlx5_ifc.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    /// Reliable connected (`MLX5_QPC_ST_RC`, 0x0).
    Rc,
    /// Unreliable datagram (`MLX5_QPC_ST_UD`, 0x2).
    Ud,
    /// The port's general services QP (`MLX5_QPC_ST_QP1`, 0x8): a UD QP that datagrams
    /// addressed to destination QP 1 reach, and whose own datagrams carry source QP 1.
    Gsi,
}

impl Service {
    /// Whether the QP sends and receives datagrams (UD or GSI).
    pub fn datagram(self) -> bool {
        self != Service::Rc
    }
}

/// What a QP is created with (`CREATE_QP`'s fields, as the model keeps them).
#[derive(Clone, Debug)]
pub(crate) struct QpSpec {
    pub service: Service,
    pub pd: u32,
    pub send_cq: u32,
    pub recv_cq: u32,
    pub log_sq_size: u8,
    /// `None`: a zero-length receive queue.
    pub log_rq_size: Option<u8>,
    /// log2 of the receive WQE stride in bytes.
    pub log_rq_stride: u8,
    /// The queue buffer (receive queue, then send queue).
    pub buf: QueueBuf,
    /// Bus address of the doorbell record (`dbrec[0]` receive, `dbrec[1]` send).
    pub dbrec: u64,
    pub uar: u32,
}

/// A queue pair.
#[derive(Debug)]
pub(crate) struct Qp {
    /// Fixed at creation.
    pub spec: QpSpec,
    pub state: QpState,
    pub rights: Rights,
    pub remote_qpn: u32,
    pub route: Route,
    /// The Q_Key datagrams must carry to be accepted (UD and GSI; RST2INIT `q_key`).
    pub qkey: u32,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// Next PSN expected as responder.
    pub epsn: u32,
    /// Next PSN to send.
    pub npsn: u32,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    /// The local ACK timeout field (4.096 µs × 2^`ack_timeout`; see [`crate::transport::timer`]).
    pub ack_timeout: u8,
    /// The requester's outstanding WQEs and timers.
    pub req: crate::transport::ReqState,
    /// The responder's message in progress, MSN and saved atomics.
    pub resp: crate::transport::RespState,
    /// The HCA's send counter (next WQEBB to execute), 16 bits like the WQE index.
    pub sq_pi: u16,
    /// The HCA's receive counter (next receive WQE to consume).
    pub rq_ci: u16,
    pub pending: VecDeque<Doorbell>,
    /// Changes on reset and destroy, so that an in-flight result is dropped.
    pub gen: u64,
}

impl Qp {
    pub fn sq_cnt(&self) -> u32 {
        1 << self.spec.log_sq_size
    }

    pub fn rq_cnt(&self) -> u32 {
        self.spec.log_rq_size.map_or(0, |l| 1 << l)
    }

    /// Receive WQEs software has posted and the HCA has not consumed (`dbrec[0]` counter
    /// minus the HCA's). 0 with no receive queue, or when the record is unreadable or claims
    /// more than the ring holds (nothing then is safe to consume).
    pub fn rq_posted(&self, sh: &crate::model::Shared) -> u32 {
        if self.spec.log_rq_size.is_none() {
            return 0;
        }
        let Some(rec) = sh.read_be32(self.spec.dbrec) else { return 0 };
        let posted = u32::from((rec as u16).wrapping_sub(self.rq_ci));
        if posted > self.rq_cnt() {
            0
        } else {
            posted
        }
    }

    /// Bus address of the receive WQE the HCA consumes next.
    pub fn rq_slot(&self) -> u64 {
        let slot = u64::from(u32::from(self.rq_ci) & (self.rq_cnt().max(1) - 1));
        self.spec.buf.at(slot << self.spec.log_rq_stride)
    }

    /// Bus address of send WQEBB slot `slot`: the send queue follows the receive queue (PRM
    /// order), each WQEBB translated through the page list on its own.
    pub fn sq_slot(&self, counter: u32) -> u64 {
        let sq = u64::from(self.rq_cnt()) << self.spec.log_rq_stride;
        self.spec.buf.at(sq + u64::from(counter & (self.sq_cnt() - 1)) * 64)
    }
}

/// BlueFlame blocks gathered so far in one half of one UAR.
#[derive(Debug, Default)]
pub(crate) struct BfAsm {
    pub buf: Vec<u8>,
    pub need: usize,
}

/// Per-UAR state.
#[derive(Debug, Default)]
pub(crate) struct UarState {
    /// Half (0 = 0x800, 1 = 0x900) of the last send doorbell.
    pub last_half: Option<u8>,
    pub bf: [BfAsm; 2],
}

/// All resources of one model.
#[derive(Debug)]
pub(crate) struct Device {
    pub caps: ModelCaps,
    pub uar_pages: u32,
    pub uars: BTreeMap<u32, UarState>,
    pub pds: BTreeSet<u32>,
    pub mkeys: BTreeMap<u32, Mkey>,
    pub cqs: BTreeMap<u32, Cq>,
    pub qps: BTreeMap<u32, Qp>,
    /// QPs with work for the engine.
    pub ready: BTreeSet<u32>,
    pub next_pd: u32,
    pub next_mkey: u32,
    pub mkey_variant: u8,
    pub next_cqn: u32,
    pub next_qpn: u32,
    pub next_gen: u64,
    /// The Ethernet objects (SQs and RQs take numbers from `next_qpn`).
    pub eth: crate::eth::Tables,
}

impl Device {
    pub fn new(caps: ModelCaps, uar_pages: u32) -> Self {
        Device {
            caps,
            uar_pages,
            uars: BTreeMap::new(),
            pds: BTreeSet::new(),
            mkeys: BTreeMap::new(),
            cqs: BTreeMap::new(),
            qps: BTreeMap::new(),
            ready: BTreeSet::new(),
            next_pd: 1,
            next_mkey: 1,
            mkey_variant: 0x5a,
            next_cqn: 1,
            next_qpn: 0x48,
            next_gen: 1,
            eth: Default::default(),
        }
    }
}
