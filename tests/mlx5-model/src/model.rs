//! The model itself: its shared state, its engine thread, and the handle tests hold.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use rdma_pmd::{BusAddr, Errno, Error};
use rdma_pmd_hal::mem::{BusMemory, HeapDma, MemBar};

use crate::bar::Handler;
use crate::counters::{Counters, Event, Reason, Stats, Violation};
use crate::objects::{Device, ModelCaps, QpState};
use crate::roce::{DropCounters, Port};
use crate::transport::Link;
use crate::wire::Wire;

/// Bytes of one UAR page (the system page size the model reports).
pub const UAR_PAGE: usize = 4096;

/// One entry of the port's GID table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gid {
    /// The GID (for RoCE v2 over IPv4, `::ffff:a.b.c.d`).
    pub gid: [u8; 16],
    /// The port's MAC for that GID.
    pub mac: [u8; 6],
}

/// Where the model's MSI-X messages go when it is served on a PCI bus: the vector named by the
/// EQ that received an event (`eqc.intr`), raised after the EQE is written. In process, with no
/// sink, events are only written to the EQ and the driver polls.
pub trait Interrupts: Send + Sync + std::fmt::Debug {
    /// Deliver MSI-X vector `vector`. The sink drops vectors the VMM has not configured.
    fn raise(&self, vector: u16);
}

/// How to build a [`Model`].
#[derive(Clone, Debug)]
pub struct ModelConfig {
    /// Limits enforced and reported.
    pub caps: ModelCaps,
    /// UAR pages in the BAR, including page 0 (reserved for the initialization segment).
    pub uar_pages: u32,
    /// The port's GID table; empty = one GID made up from the model's number
    /// (`::ffff:10.77.hi.lo`, MAC `02:4d:00:00:hi:lo`).
    pub gids: Vec<Gid>,
    /// The wire to attach the port to (RoCE v2 between models).
    pub wire: Option<Wire>,
    /// Any other port to send and receive the model's frames on (a [`crate::roce::FaultPort`]
    /// or [`crate::roce::PcapTap`] around a hub port, a [`crate::roce::port::PacketSocket`]);
    /// exclusive with `wire`. See [`ModelConfig::with_port`].
    pub port: Option<PortSlot>,
    /// The DMA space to use; `None` = a fresh [`HeapDma`].
    pub dma: Option<Arc<HeapDma>>,
    /// Memory the device reaches instead of `dma` (a guest's RAM when the model is served on
    /// a PCI bus); `None` = the `dma` space.
    pub memory: Option<Arc<dyn BusMemory>>,
    /// Where MSI-X vectors go; `None` = nowhere (the driver polls its EQs).
    pub interrupts: Option<Arc<dyn Interrupts>>,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            caps: ModelCaps::default(),
            uar_pages: 64,
            gids: Vec::new(),
            wire: None,
            port: None,
            dma: None,
            memory: None,
            interrupts: None,
        }
    }
}

impl ModelConfig {
    /// This configuration with the model's frames on `port` instead of a wire.
    pub fn with_port(mut self, port: impl Port + 'static) -> ModelConfig {
        self.port = Some(PortSlot::new(Box::new(port)));
        self
    }
}

/// A port handed to [`ModelConfig`], taken by the model it builds (a configuration is
/// `Clone`; the port goes to the first model built from it, a second one fails).
#[derive(Clone)]
pub struct PortSlot(Arc<Mutex<Option<Box<dyn Port>>>>);

impl PortSlot {
    /// Hold `port` for a model.
    pub fn new(port: Box<dyn Port>) -> PortSlot {
        PortSlot(Arc::new(Mutex::new(Some(port))))
    }

    fn take(&self) -> Option<Box<dyn Port>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

impl std::fmt::Debug for PortSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PortSlot")
    }
}

static NEXT_MODEL: AtomicU64 = AtomicU64::new(1);

/// State shared by the handle, the BAR handler, the engine thread and the wire.
pub(crate) struct Shared {
    pub id: u64,
    pub dev: Mutex<Device>,
    pub dma: Arc<dyn BusMemory>,
    /// The MSI-X sink, if the model is on a bus.
    pub interrupts: Option<Arc<dyn Interrupts>>,
    pub stats: Stats,
    pub gids: Vec<Gid>,
    pub wire: Option<Wire>,
    /// The port and the loopback queue.
    pub link: Mutex<Link>,
    pub start: Instant,
    /// Doorbells (and flush requests) not yet fully processed.
    pub outstanding: AtomicU64,
    /// Set when there is new work; cleared by the engine before it looks.
    pub work: AtomicBool,
    pub busy: AtomicBool,
    pub stop: AtomicBool,
    pub thread: OnceLock<Thread>,
    /// The firmware started on this model, if any: it owns BAR0 page 0 and the EQ doorbells.
    pub fw: OnceLock<std::sync::Weak<crate::fw::FwShared>>,
    /// A contract the model breaks on the next CQE it writes ([`Model::break_next_cqe`]).
    pub cqe_fault: Mutex<Option<CqeFault>>,
}

/// A way the model breaks the CQE contract once, so that tests can watch the driver refuse
/// it: what a faulty or hostile HCA could write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqeFault {
    /// The CQE names another QP.
    Qpn(u32),
    /// The CQE names this WQE counter instead of the completed WQE's.
    WqeCounter(u16),
    /// The CQE carries this opcode.
    Opcode(crate::codes::CqeOpcode),
    /// The CQE is written twice: a second completion for the same work.
    Twice,
}

impl Shared {
    pub fn dev(&self) -> MutexGuard<'_, Device> {
        self.dev.lock().expect("model state poisoned")
    }

    /// The link. Never taken before the device lock while the link is held.
    pub fn link(&self) -> MutexGuard<'_, Link> {
        self.link.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Raise MSI-X vector `vector`, if the model is on a bus.
    pub fn raise(&self, vector: u16) {
        if let Some(sink) = &self.interrupts {
            sink.raise(vector);
        }
    }

    /// Wake the engine.
    pub fn kick(&self) {
        self.work.store(true, Ordering::Release);
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }

    pub fn note(&self, qpn: u32, idx: Option<u16>, r: Reason) {
        self.stats.violation(qpn, idx, r);
    }

    /// Nanoseconds since the model started (CQE timestamps).
    pub fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Read a big-endian 32-bit word at a bus address.
    pub fn read_be32(&self, bus: u64) -> Option<u32> {
        let mut w = [0u8; 4];
        self.dma.read(BusAddr(bus), &mut w).then(|| u32::from_be_bytes(w))
    }

    /// Whether `gid` is ours; its MAC if so.
    pub fn own_gid(&self, gid: &[u8; 16]) -> Option<[u8; 6]> {
        self.gids.iter().find(|g| &g.gid == gid).map(|g| g.mac)
    }
}

/// A software mlx5 HCA: a BAR, a DMA space, resources created through
/// [`ModelControl`](crate::direct::ModelControl), and an engine thread that executes what the
/// driver posts. Dropping the handle stops the thread.
pub struct Model {
    shared: Arc<Shared>,
    heap: Arc<HeapDma>,
    bar: MemBar,
    thread: Option<JoinHandle<()>>,
}

impl Model {
    /// A model with the default configuration, not attached to any wire.
    pub fn new() -> Model {
        Model::with_config(ModelConfig::default()).expect("default configuration")
    }

    /// A model as configured. Fails if a GID is already on the wire or the BAR is too small.
    pub fn with_config(cfg: ModelConfig) -> Result<Model, Error> {
        if cfg.uar_pages < 2 {
            return Err(Error::InvalidArgument("a model needs at least 2 BAR pages"));
        }
        if cfg.caps.log_bf_reg_size != 9 {
            return Err(Error::Unsupported("BlueFlame register size other than 512 bytes"));
        }
        let id = NEXT_MODEL.fetch_add(1, Ordering::Relaxed);
        let gids = if cfg.gids.is_empty() {
            let (hi, lo) = ((id >> 8) as u8, id as u8);
            let mut gid = [0u8; 16];
            gid[10] = 0xff;
            gid[11] = 0xff;
            gid[12..].copy_from_slice(&[10, 77, hi, lo]);
            vec![Gid { gid, mac: [0x02, 0x4d, 0, 0, hi, lo] }]
        } else {
            cfg.gids.clone()
        };
        let heap = cfg.dma.clone().unwrap_or_default();
        let memory: Arc<dyn BusMemory> = match &cfg.memory {
            Some(m) => m.clone(),
            None => heap.clone(),
        };
        let shared = Arc::new(Shared {
            id,
            dev: Mutex::new(Device::new(cfg.caps, cfg.uar_pages)),
            dma: memory,
            interrupts: cfg.interrupts.clone(),
            stats: Stats::default(),
            gids,
            wire: cfg.wire.clone(),
            link: Mutex::new(Link::default()),
            start: Instant::now(),
            outstanding: AtomicU64::new(0),
            work: AtomicBool::new(false),
            busy: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            thread: OnceLock::new(),
            fw: OnceLock::new(),
            cqe_fault: Mutex::new(None),
        });
        let port: Option<Box<dyn Port>> = match (&cfg.wire, &cfg.port) {
            (Some(_), Some(_)) => {
                return Err(Error::InvalidArgument("a model takes a wire or a port, not both"))
            }
            (Some(w), None) => Some(Box::new(w.attach(&shared)?)),
            (None, Some(p)) => {
                Some(p.take().ok_or(Error::InvalidArgument("the port was taken already"))?)
            }
            (None, None) => None,
        };
        shared.link().port = port;
        let bar = MemBar::with_handler(
            cfg.uar_pages as usize * UAR_PAGE,
            Arc::new(Handler(shared.clone())),
        );
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("mlx5-model-{id}"))
            .spawn(move || crate::engine::run(&sh))
            .map_err(|_| Error::Device(Errno::EAGAIN))?;
        let _ = shared.thread.set(thread.thread().clone());
        Ok(Model { shared, heap, bar, thread: Some(thread) })
    }

    /// A model whose port is the Linux interface `ifname`, through an `AF_PACKET` socket
    /// ([`crate::roce::port::PacketSocket`], all EtherTypes; needs `CAP_NET_RAW`), with the
    /// GID table `gids` — for a test against the kernel's rxe over a veth pair: give the
    /// model's end of the pair an address-less role, put the model's GID (`::ffff:a.b.c.d`)
    /// and a MAC different from the veth's own in `gids`. Like a ConnectX, the model answers
    /// no ARP itself: non-RoCE frames go to the Ethernet receive queues the driver steered,
    /// so the kernel side learns the model's MAC for a.b.c.d from a driver that answers ARP
    /// there, or from a static neighbour entry.
    /// Frames the host sends out of `ifname` are not taken as received.
    #[cfg(target_os = "linux")]
    pub fn on_interface(ifname: &str, gids: Vec<Gid>) -> Result<Model, Error> {
        if gids.is_empty() {
            return Err(Error::InvalidArgument("a model on an interface needs its GID table"));
        }
        let sock = crate::roce::port::PacketSocket::open(ifname, None).map_err(|e| match e {
            crate::roce::PortError::NoInterface => Error::InvalidArgument("no such interface"),
            crate::roce::PortError::Io { errno, .. } => Error::Device(Errno(errno)),
            _ => Error::Device(Errno::EIO),
        })?;
        Model::with_config(ModelConfig { gids, ..Default::default() }.with_port(sock))
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The BAR the driver maps (a clone of the same window).
    pub fn bar(&self) -> MemBar {
        self.bar.clone()
    }

    /// The DMA space an in-process driver allocates its rings and buffers from (the device
    /// reaches it unless [`ModelConfig::memory`] named other memory).
    pub fn dma(&self) -> Arc<HeapDma> {
        self.heap.clone()
    }

    /// Frames dropped on receive before reaching a QP because they did not parse, by reason
    /// (the counters' `drop_*` fields count the well-formed ones).
    pub fn frame_drops(&self) -> DropCounters {
        self.shared.link().drops.clone()
    }

    /// The port's GID table.
    pub fn gids(&self) -> &[Gid] {
        &self.shared.gids
    }

    /// A snapshot of the counters.
    pub fn counters(&self) -> Counters {
        self.shared.stats.snapshot()
    }

    /// The validation log (fatal reasons and notes), oldest first.
    pub fn violations(&self) -> Vec<Violation> {
        self.shared.stats.log.lock().expect("log poisoned").clone()
    }

    /// Asynchronous events so far, oldest first.
    pub fn events(&self) -> Vec<Event> {
        self.shared.stats.events.lock().expect("events poisoned").clone()
    }

    /// The state of QP `qpn`, if it exists.
    pub fn qp_state(&self, qpn: u32) -> Option<QpState> {
        self.shared.dev().qps.get(&qpn).map(|q| q.state)
    }

    /// Break the CQE contract once: the next CQE the model writes, on any CQ, carries `fault`.
    pub fn break_next_cqe(&self, fault: CqeFault) {
        *self.shared.cqe_fault.lock().expect("model state poisoned") = Some(fault);
    }

    /// Whether CQ `cqn` is in error (overflowed), if it exists.
    pub fn cq_in_error(&self, cqn: u32) -> Option<bool> {
        self.shared.dev().cqs.get(&cqn).map(|c| c.error)
    }

    /// Wait until every doorbell received so far has been processed (a QP stalled on RNR
    /// retries counts as busy). False if `timeout` passed first.
    pub fn quiesce(&self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        loop {
            if self.shared.outstanding.load(Ordering::Acquire) == 0
                && !self.shared.work.load(Ordering::Acquire)
                && !self.shared.busy.load(Ordering::Acquire)
            {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

impl Default for Model {
    fn default() -> Self {
        Model::new()
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.kick();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(w) = &self.shared.wire {
            w.detach(self.shared.id);
        }
    }
}
