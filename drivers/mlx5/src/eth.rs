//! The Ethernet port: the driver's own raw-packet path, which answers ARP for the port's
//! IPv4 addresses and resolves peers' MACs. A ConnectX answers no ARP by itself, and a peer's
//! RDMA CM (or its rxe) resolves our MAC by ARP before it connects.
//!
//! [`Mlx5::eth_port`] creates, through the [`Control`] seam ([`crate::control::eth`]): a
//! transport domain, a TIS and an SQ (RST→RDY) to send; an RQ (RST→RDY) of frame buffers, a
//! TIR dispatching to it, and a NIC receive flow table (level 0) with one group and one entry
//! that forwards untagged ARP (ethertype 0x0806) to the TIR, made the NIC receive root. Every
//! other frame goes on as it would without the table. Dropping the port destroys them in
//! reverse order.
//!
//! The busy loop calls [`EthPort::poll_eth`] (frames in: ARP answered and learned; send
//! completions retired) and [`EthPort::resolve`] (a bounded wait for a peer's MAC, polling
//! the receive path while it waits, [`Error::Unreachable`] after the retries). Nothing here
//! allocates after creation; the neighbour table is fixed-size ([`Arp`]).
//!
//! ```no_run
//! use std::net::Ipv4Addr;
//! use rdma_pmd_hal::{Clock, StdClock};
//! use rdma_pmd_mlx5::{EthConfig, Mlx5, SharedDma};
//! # let model = rdma_pmd_mlx5_model::Model::new();
//! # let dev = Mlx5::open(model.bar(), SharedDma(model.dma()), model.control())?;
//! // `dev` over the firmware seam (`FwControl`: on VFIO, bare metal, or the device model's
//! // firmware as `tests/arp.rs` runs it); the model's direct seam used here to keep the
//! // example short has no Ethernet path, so this example only compiles.
//! let mut eth = dev.eth_port(&EthConfig::default())?;
//! eth.add_address(Ipv4Addr::new(192, 0, 2, 1))?;
//! let clock = StdClock::default();
//! let peer = eth.resolve(Ipv4Addr::new(192, 0, 2, 2), &clock)?; // or Error::Unreachable
//! # let _ = peer;
//! loop {
//!     eth.poll_eth(clock.now_ns())?; // answer ARP while the QPs run
//! #   break;
//! }
//! # Ok::<(), rdma_pmd::Error>(())
//! ```
//!
//! Untested on real hardware: the command images follow the kernel's and are checked against
//! `mlx5_ifc.h`, and the rings against mlx5dv.h; they run against the device model's firmware
//! (`tests/arp.rs`, and the `wire` tier against the kernel's ARP), but no ConnectX has run
//! them (see `drivers/mlx5/ETH.md`).

use core::net::Ipv4Addr;

use heapless::Vec;
use rdma_pmd::{Error, Mac, Result};
use rdma_pmd_hal::{Clock, Dma, Mmio};

use crate::control::eth::{EthCreate, EthObject, RqParams, SqParams, Tdn};
use crate::control::{Access, Control, Cqn};
use crate::datapath::cq::CqRing;
use crate::datapath::eth::{inline_len, EthRx, EthTx, RxDone, TxDone, FRAME_BUF};
use crate::device::{check_uar, Mlx5};
use crate::layout::cqe::Cqe;
use crate::mr::Region;
use crate::net::arp::{ETHERTYPE_ARP, MIN_FRAME_LEN};
use crate::net::{Arp, ArpStats, Handled, NeighConfig, Resolve};

/// How an Ethernet port is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EthConfig {
    /// log2 of the send ring size (frames in flight), 1..=12.
    pub log_sq: u8,
    /// log2 of the receive ring size (frame buffers), 1..=12.
    pub log_rq: u8,
    /// Address resolution timing.
    pub neigh: NeighConfig,
}

impl Default for EthConfig {
    /// 16 frames in flight, 32 receive buffers, the kernel's resolution timing.
    fn default() -> Self {
        EthConfig { log_sq: 4, log_rq: 5, neigh: NeighConfig::default() }
    }
}

/// Counters of the Ethernet port (the ARP ones are [`EthPort::arp`]'s).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EthStats {
    /// Frames received.
    pub rx_frames: u64,
    /// Frames received with a VLAN tag the device stripped, dropped.
    pub rx_tagged: u64,
    /// Error completions of the RQ (the RQ is then in error: flushed).
    pub rx_errors: u64,
    /// Frames posted.
    pub tx_frames: u64,
    /// Error completions of the SQ.
    pub tx_errors: u64,
    /// ARP replies dropped because the send ring was full.
    pub tx_dropped: u64,
    /// The last error completion's syndrome.
    pub last_syndrome: u8,
}

/// Neighbours an Ethernet port's table holds.
pub const NEIGHBOURS: usize = 64;
/// IPv4 addresses of our own a port answers for.
pub const ADDRESSES: usize = 8;

/// The Ethernet port of an open device. See the module docs.
pub struct EthPort<'d, M: Mmio, D: Dma, C: Control> {
    dev: &'d Mlx5<M, D, C>,
    uar: crate::control::Uar,
    tx_cq: Option<(CqRing, Option<Cqn>)>,
    rx_cq: Option<(CqRing, Option<Cqn>)>,
    tx: Option<EthTx>,
    rx: Option<EthRx>,
    /// The frame buffers: `2^log_sq` send buffers, then `2^log_rq` receive buffers.
    bufs: Option<Region<'d, M, D, C>>,
    /// Firmware objects in creation order.
    objs: Vec<EthObject, 10>,
    inline: crate::control::InlineMode,
    arp: Arp<NEIGHBOURS, ADDRESSES>,
    stats: EthStats,
    /// A received frame, copied out of its buffer.
    frame: [u8; FRAME_BUF],
}

impl<M: Mmio, D: Dma, C: Control> Mlx5<M, D, C> {
    /// Create the port's Ethernet path with its ARP flow rule (see [`crate::eth`]). The
    /// port answers for no address until [`EthPort::add_address`].
    pub fn eth_port(&self, cfg: &EthConfig) -> Result<EthPort<'_, M, D, C>> {
        let mac = self.mac()?;
        let (cap, inline) = self.control().eth_inline()?;
        let uar = self.control().alloc_uar()?;
        let mut p = EthPort {
            dev: self,
            uar,
            tx_cq: None,
            rx_cq: None,
            tx: None,
            rx: None,
            bufs: None,
            objs: Vec::new(),
            inline,
            arp: Arp::new(mac, cfg.neigh),
            stats: EthStats::default(),
            frame: [0; FRAME_BUF],
        };
        check_uar(self.mmio(), uar, &self.caps())?;
        let dma = self.dma();
        let tx_cq = p.tx_cq.insert((CqRing::alloc(dma, cfg.log_sq)?, None));
        let tx_cqn = self.control().create_cq(&tx_cq.0.params(self.cq_uar()))?;
        tx_cq.1 = Some(tx_cqn);
        let rx_cq = p.rx_cq.insert((CqRing::alloc(dma, cfg.log_rq)?, None));
        let rx_cqn = self.control().create_cq(&rx_cq.0.params(self.cq_uar()))?;
        rx_cq.1 = Some(rx_cqn);
        let (sq_buf, sq_dbrec) = p.tx.insert(EthTx::alloc(dma, cfg.log_sq, uar)?).bus();
        let (rq_buf, rq_dbrec) = p.rx.insert(EthRx::alloc(dma, cfg.log_rq)?).bus();
        let nbufs = (1usize << cfg.log_sq) + (1usize << cfg.log_rq);
        let bufs = p.bufs.insert(self.reg(nbufs * FRAME_BUF, Access::LOCAL_WRITE)?);
        let (lkey, rx_base) = (bufs.lkey(), bufs.addr() + (FRAME_BUF << cfg.log_sq) as u64);

        let EthObject::TransportDomain(td) = p.create(&EthCreate::TransportDomain)? else {
            return Err(Error::InvalidArgument("transport domain"));
        };
        let EthObject::Tis(tis) = p.create(&EthCreate::Tis(td))? else {
            return Err(Error::InvalidArgument("TIS"));
        };
        let sq = p.create(&EthCreate::Sq(SqParams {
            pd: self.pd(),
            cq: tx_cqn,
            uar,
            tis,
            log_size: cfg.log_sq,
            buf: sq_buf,
            dbrec: sq_dbrec,
            min_inline: inline,
            wqe_inline_cap: cap,
        }))?;
        if let (EthObject::Sq(sqn), Some(tx)) = (sq, p.tx.as_mut()) {
            tx.set_sqn(sqn);
        }
        self.control().eth_ready(sq)?;
        let rq = p.create(&EthCreate::Rq(RqParams {
            pd: self.pd(),
            cq: rx_cqn,
            log_size: cfg.log_rq,
            buf: rq_buf,
            dbrec: rq_dbrec,
        }))?;
        self.control().eth_ready(rq)?;
        if let Some(rx) = p.rx.as_mut() {
            rx.post_all(rx_base, lkey);
        }
        let EthObject::Rq(rqn) = rq else { return Err(Error::InvalidArgument("RQ")) };
        p.steer(td, rqn)?;
        Ok(p)
    }
}

impl<'d, M: Mmio, D: Dma, C: Control> EthPort<'d, M, D, C> {
    fn create(&mut self, what: &EthCreate) -> Result<EthObject> {
        let o = self.dev.control().eth_create(what)?;
        if self.objs.push(o).is_err() {
            let _ = self.dev.control().eth_destroy(o);
            return Err(Error::InvalidArgument("more Ethernet objects than the port tracks"));
        }
        Ok(o)
    }

    /// The TIR and the flow table steering untagged ARP to it.
    fn steer(&mut self, td: Tdn, rq: crate::control::eth::Rqn) -> Result<()> {
        let EthObject::Tir(tir) = self.create(&EthCreate::Tir { td, rq })? else {
            return Err(Error::InvalidArgument("TIR"));
        };
        let EthObject::FlowTable(table) =
            self.create(&EthCreate::FlowTable { level: 0, log_size: 0 })?
        else {
            return Err(Error::InvalidArgument("flow table"));
        };
        let EthObject::FlowGroup { group, .. } =
            self.create(&EthCreate::EthertypeGroup { table, start: 0, end: 0 })?
        else {
            return Err(Error::InvalidArgument("flow group"));
        };
        let entry =
            EthCreate::EthertypeEntry { table, group, index: 0, ethertype: ETHERTYPE_ARP, tir };
        self.create(&entry)?;
        self.create(&EthCreate::Root(table))?;
        Ok(())
    }

    /// The port's MAC.
    pub fn mac(&self) -> Mac {
        self.arp.mac()
    }

    /// Answer ARP for `ip` (the first address added is the source of our requests).
    pub fn add_address(&mut self, ip: Ipv4Addr) -> Result<()> {
        self.arp.add_address(ip)
    }

    /// A static neighbour: `ip` is at `mac`.
    pub fn set_static(&mut self, ip: Ipv4Addr, mac: Mac) -> Result<()> {
        self.arp.set_static(ip, mac)
    }

    /// The ARP state: addresses, neighbours, counters.
    pub fn arp(&self) -> &Arp<NEIGHBOURS, ADDRESSES> {
        &self.arp
    }

    /// The port's counters.
    pub fn stats(&self) -> EthStats {
        self.stats
    }

    /// ARP's counters.
    pub fn arp_stats(&self) -> ArpStats {
        self.arp.stats()
    }

    /// Firmware objects of the port, in creation order.
    pub fn objects(&self) -> &[EthObject] {
        &self.objs
    }

    /// Send one Ethernet frame (at most [`FRAME_BUF`] bytes; a frame shorter than the 60-byte
    /// minimum is sent as it is: the caller pads). Retires finished sends first if the ring is
    /// full.
    pub fn send_frame(&mut self, frame: &[u8]) -> Result<()> {
        if frame.is_empty() || frame.len() > FRAME_BUF {
            return Err(Error::InvalidArgument("frame length"));
        }
        let (Some(tx), Some(bufs)) = (self.tx.as_mut(), self.bufs.as_ref()) else {
            return Err(Error::NotConnected);
        };
        if tx.next().is_none() {
            Self::reap_tx(&mut self.tx_cq, tx, &mut self.stats)?;
        }
        let pi = tx.next().ok_or(Error::QueueFull { needed: 1, free: 0 })?;
        let slot = pi as usize & ((1 << tx.log_size()) - 1);
        let off = slot * FRAME_BUF;
        bufs.write(off, frame)?;
        let head = &frame[..inline_len(self.inline, frame.len())];
        let addr = bufs.addr() + off as u64;
        tx.post(self.dev.mmio(), head, frame.len(), addr, bufs.lkey())?;
        self.stats.tx_frames += 1;
        Ok(())
    }

    fn reap_tx(
        cq: &mut Option<(CqRing, Option<Cqn>)>,
        tx: &mut EthTx,
        stats: &mut EthStats,
    ) -> Result<usize> {
        let Some((cq, _)) = cq.as_mut() else { return Ok(0) };
        let mut n = 0;
        while let Some(c) = cq.pop() {
            let r = tx.on_cqe(&Cqe::new_unchecked(&c[..]));
            n += 1;
            match r {
                Ok(TxDone::Sent) => {}
                Ok(TxDone::Failed(s)) => {
                    stats.tx_errors += 1;
                    stats.last_syndrome = s;
                }
                Err(e) => {
                    cq.publish();
                    return Err(e);
                }
            }
        }
        cq.publish();
        Ok(n)
    }

    /// One pass of the busy loop at `now_ns`: take every received frame (ARP answered and
    /// learned, anything else dropped and counted) and retire finished sends. Returns the
    /// number of frames received.
    pub fn poll_eth(&mut self, now_ns: u64) -> Result<usize> {
        let mut got = 0;
        let mut reply = [0u8; MIN_FRAME_LEN];
        loop {
            let (Some((cq, _)), Some(rx), Some(bufs)) =
                (self.rx_cq.as_mut(), self.rx.as_mut(), self.bufs.as_ref())
            else {
                return Err(Error::NotConnected);
            };
            let Some(c) = cq.pop() else {
                cq.publish();
                break;
            };
            let done = rx.on_cqe(&Cqe::new_unchecked(&c[..]));
            let mut send = None;
            match done {
                Ok(RxDone::Frame(f)) => {
                    let tx_bufs = FRAME_BUF << self.tx.as_ref().map_or(0, |t| t.log_size());
                    let frame = &mut self.frame[..f.len];
                    bufs.read(tx_bufs + f.slot * FRAME_BUF, frame)?;
                    rx.recycle();
                    self.stats.rx_frames += 1;
                    got += 1;
                    if let Ok(Handled::Reply(n)) = self.arp.on_frame(frame, now_ns, &mut reply) {
                        send = Some(n);
                    }
                }
                Ok(RxDone::Tagged) => {
                    rx.recycle();
                    self.stats.rx_tagged += 1;
                }
                Ok(RxDone::Failed(s)) => {
                    self.stats.rx_errors += 1;
                    self.stats.last_syndrome = s;
                }
                Err(e) => {
                    cq.publish();
                    return Err(e);
                }
            }
            if let Some(n) = send {
                // A reply that finds the send ring full is dropped (the requester asks
                // again), as a netdev drops on a full queue.
                match self.send_frame(&reply[..n]) {
                    Err(Error::QueueFull { .. }) => self.stats.tx_dropped += 1,
                    r => r?,
                }
            }
        }
        if let Some(tx) = self.tx.as_mut() {
            Self::reap_tx(&mut self.tx_cq, tx, &mut self.stats)?;
        }
        Ok(got)
    }

    /// One step of resolving `ip` at `now_ns` without waiting: the MAC if known, else a
    /// request is sent (or is out) and `None` comes back; [`Error::Unreachable`] once the
    /// retries ran out. Call [`poll_eth`](Self::poll_eth) between steps.
    pub fn poll_resolve(&mut self, ip: Ipv4Addr, now_ns: u64) -> Result<Option<Mac>> {
        let mut req = [0u8; MIN_FRAME_LEN];
        match self.arp.poll_resolve(ip, now_ns, &mut req)? {
            Resolve::Ready(m) => Ok(Some(m)),
            Resolve::Send(n) => {
                self.send_frame(&req[..n])?;
                Ok(None)
            }
            Resolve::Pending => Ok(None),
        }
    }

    /// The MAC of `ip`: from the table, or by ARP, polling the receive path until the reply
    /// comes or the retries run out ([`Error::Unreachable`], `EHOSTUNREACH`). The wait is
    /// bounded by the resolution timing ([`NeighConfig::max_wait_ns`]) on `clock`.
    pub fn resolve(&mut self, ip: Ipv4Addr, clock: &impl Clock) -> Result<Mac> {
        let start = clock.now_ns();
        // A margin over the protocol's own bound, for a clock that jumps.
        let bound = self.arp.config().max_wait_ns().saturating_mul(2).max(1);
        loop {
            let now = clock.now_ns();
            if let Some(m) = self.poll_resolve(ip, now)? {
                return Ok(m);
            }
            self.poll_eth(now)?;
            if now.saturating_sub(start) > bound {
                return Err(Error::Unreachable(core::net::IpAddr::V4(ip)));
            }
            core::hint::spin_loop();
        }
    }
}

impl<M: Mmio, D: Dma, C: Control> Drop for EthPort<'_, M, D, C> {
    fn drop(&mut self) {
        let dev = self.dev;
        let mut queues_gone = true;
        {
            let mut ctl = dev.control();
            while let Some(o) = self.objs.pop() {
                let ok = ctl.eth_destroy(o).is_ok();
                if !ok && matches!(o, EthObject::Sq(_) | EthObject::Rq(_)) {
                    queues_gone = false;
                }
            }
        }
        let dma = dev.dma();
        if !queues_gone {
            // The device may still use the rings and the buffers: keep them (the region is
            // not deregistered; the rings, dropped without `free`, stay allocated).
            core::mem::forget(self.bufs.take());
            self.tx = None;
            self.rx = None;
        }
        // The buffers' key goes before the CQs (as a QP's regions outlive it).
        drop(self.bufs.take());
        if let Some(tx) = self.tx.take() {
            // SAFETY: the SQ was destroyed (or never created): nothing reads the ring.
            unsafe { tx.free(dma) };
        }
        if let Some(rx) = self.rx.take() {
            // SAFETY: the RQ was destroyed (or never created).
            unsafe { rx.free(dma) };
        }
        let mut ctl = dev.control();
        for cq in [self.tx_cq.take(), self.rx_cq.take()].into_iter().flatten() {
            match cq {
                (ring, Some(cqn)) => {
                    if ctl.destroy_cq(cqn).is_ok() && queues_gone {
                        // SAFETY: the CQ is destroyed: the device writes it no more.
                        unsafe { ring.free(dma) };
                    }
                    // Otherwise the ring, dropped without `free`, stays allocated.
                }
                // SAFETY: never given to the device.
                (ring, None) => unsafe { ring.free(dma) },
            }
        }
        let _ = ctl.dealloc_uar(self.uar);
    }
}

#[cfg(test)]
mod tests;
