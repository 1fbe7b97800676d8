//! The connection manager's backend on mlx5: MADs through the port's GSI QP (QP1)
//! ([`GsiPort`]), and RC queue pairs the CM moves through their states ([`CmQp`] for
//! [`Qp`]).
//!
//! The GSI QP sends each MAD inline (256 bytes, no buffer to keep), signalled, reaping send
//! completions as it goes; its send ring holds [`GSI_SENDS`] MADs in flight, and a MAD that
//! finds it full after reaping is refused with [`Error::QueueFull`] (the CM keeps it and sends
//! it later). It receives into `RQ` slots of one region ([`GSI_RQ`] by default), each a
//! 40-byte GRH and a MAD, reposted as soon as the MAD is copied out. A burst of datagrams
//! larger than the ring finds no receive posted, and the device drops the excess (UD has no
//! RNR): [`GsiPort::stats`] counts every poll that found the ring exhausted, and what the port
//! itself discarded. The peer's MAC comes from static entries of the driver's neighbour
//! table ([`Neighbours`]) the application fills ([`GsiPort::add_neighbour`]), or from the
//! port's ARP: [`ArpGsiPort`] pairs a `GsiPort` with the driver's [`EthPort`], answers ARP whenever
//! the CM polls, and resolves from what ARP learned.
//!
//! ```
//! use rdma_pmd::cm::{Cm, CmConfig};
//! use rdma_pmd_mlx5::{cm::{GsiPort, GSI_RQ, RX_SLOT}, control::Access, Mlx5, SharedDma};
//! use rdma_pmd_mlx5_model::Model;
//!
//! let model = Model::new();
//! let dev = Mlx5::open(model.bar(), SharedDma(model.dma()), model.control())?;
//! let mut rx = dev.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE)?;
//! let mut port: GsiPort<_, _, _> = GsiPort::new(&dev, &mut rx, 1)?;
//! let peer = rdma_pmd::Gid::from_ipv4([192, 168, 0, 2]);
//! port.add_neighbour(peer, rdma_pmd::Mac([2, 0, 0, 0, 0, 2]))?;
//! let mut cm: Cm<_, 4> = Cm::new(port, CmConfig::new(0x0002_c903_0000_0001, 42))?;
//! cm.listen(7174)?;
//! # Ok::<(), rdma_pmd::Error>(())
//! ```

use rdma_pmd::cm::mad::{GRH_LEN, MAD_LEN};
use rdma_pmd::cm::{CmQp, MadAddr, MadPort, QpStep};
use rdma_pmd::{
    Completion, DestBuf, Error, Gid, Mac, Pending, Post, QpNum, RecvQueue, Result, RoceAddr,
    SendFlags, SendQueue, Source, UdDest, WcStatus, GSI_QKEY,
};
use rdma_pmd_hal::{Clock, Dma, Mmio};

use crate::control::{Access, Control, Path, Service};
use crate::device::Mlx5;
use crate::eth::EthPort;
use crate::mr::Region;
use crate::net::neigh::Neighbours;
use crate::qp::{ConnectOpts, Qp, QpConfig, QpState};

/// Send blocks of the GSI QP: 1024 blocks of 64 bytes, [`GSI_SENDS`] inline MADs (a burst of
/// REPs or DREPs for a full CM table goes out without waiting).
const GSI_SQ: usize = 1024;
/// Blocks of one inline MAD on the GSI QP: control (16), datagram (48), the inline header (4)
/// and 256 bytes, 324 bytes in 64-byte blocks.
const MAD_BLOCKS: usize = (16 + 48 + 4 + MAD_LEN).div_ceil(64);
/// MADs the GSI send ring holds in flight.
pub const GSI_SENDS: usize = GSI_SQ / MAD_BLOCKS;
/// Receive slots of a [`GsiPort`] by default (the `RQ` parameter): enough for a burst of
/// REQs or DREQs a CM table of that size can take at once. The kernel's MAD layer posts 512
/// (`IB_MAD_QP_RECV_SIZE`).
pub const GSI_RQ: usize = 128;
/// Bytes of one receive slot: a GRH and the largest single-packet UD message (4096 bytes,
/// the largest MTU), rounded up to 64. A MAD needs only 296, but a datagram longer than its
/// receive fails the receive and moves the QP to ERR, and anyone may send QP1 a datagram:
/// every one that can arrive must fit. The receive region of a [`GsiPort`] with `RQ` slots
/// has `RQ * RX_SLOT` bytes.
pub const RX_SLOT: usize = 4160;
const SLOT: usize = RX_SLOT;
/// Neighbour table entries of a [`GsiPort`].
pub const NEIGHBOURS: usize = 16;

/// What a [`GsiPort`] counted ([`GsiPort::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GsiStats {
    /// Datagrams handed to the CM.
    pub received: u64,
    /// Polls that found every posted receive consumed: the device had no receive for the next
    /// datagram and dropped any that came then (its own count of them, a Q counter's
    /// `out_of_buffer`, is not read by this driver).
    pub ring_exhausted: u64,
    /// Datagrams the port itself discarded: completions for a slot it did not post, and
    /// completions left staged when a receive failed.
    pub dropped: u64,
    /// Receive completions in error (flushed, or the device refused a slot).
    pub recv_errors: u64,
    /// Send completions in error.
    pub send_errors: u64,
    /// MADs refused because the send ring was full after reaping.
    pub send_full: u64,
}

/// MADs on QP1 of one port, with `RQ` receive slots. See the module docs.
pub struct GsiPort<'r, M: Mmio, D: Dma, C: Control, const RQ: usize = 128> {
    qp: Qp<'r, M, D, C, GSI_SQ, RQ, 1>,
    pending: [Option<Pending<DestBuf<'r>>>; RQ],
    /// Receive completions reaped and not yet handed out: `staged[next..count]`.
    staged: [Completion; RQ],
    next: usize,
    count: usize,
    stats: GsiStats,
    neighbours: Neighbours<Gid, NEIGHBOURS>,
    /// Receive completions in error (flushed, or the device refused a slot).
    pub recv_errors: u64,
    /// Send completions in error.
    pub send_errors: u64,
    /// A receive failed: the GSI QP is in ERR.
    failed: bool,
}

impl<'r, M: Mmio, D: Dma, C: Control, const RQ: usize> GsiPort<'r, M, D, C, RQ> {
    /// Bytes of the receive region [`new`](Self::new) takes.
    pub const RX_BYTES: usize = RQ * SLOT;

    /// Create the GSI QP of `port`, bring it to RTS with the GSI Q_Key, and post every slot
    /// of `rx` (at least [`Self::RX_BYTES`] bytes, local write) as a receive.
    pub fn new<'d: 'r>(
        dev: &'d Mlx5<M, D, C>,
        rx: &'r mut Region<'d, M, D, C>,
        port: u8,
    ) -> Result<Self> {
        if rx.len() < Self::RX_BYTES || !rx.access().contains(Access::LOCAL_WRITE) {
            return Err(Error::InvalidArgument("GSI receive region too small or not writable"));
        }
        let cfg = QpConfig { service: Service::Gsi, ..QpConfig::default() };
        let mut qp = dev.create_qp_with::<GSI_SQ, RQ, 1>(&cfg)?;
        qp.ready_datagram(port, GSI_QKEY, 0)?;
        let mut rest = rx.dest()?;
        let mut pending: [Option<Pending<DestBuf<'r>>>; RQ] = core::array::from_fn(|_| None);
        for (i, p) in pending.iter_mut().enumerate() {
            let tail = rest.split_off(SLOT)?;
            let slot = core::mem::replace(&mut rest, tail);
            *p = Some(qp.post_recv(i as u64, slot).map_err(Error::from)?);
        }
        Ok(GsiPort {
            qp,
            pending,
            staged: [Completion::default(); RQ],
            next: 0,
            count: 0,
            stats: GsiStats::default(),
            neighbours: Neighbours::default(),
            recv_errors: 0,
            send_errors: 0,
            failed: false,
        })
    }

    /// Record that `gid` is reached through `mac` (a static neighbour entry); replaces an
    /// entry for the same GID. Refused for a MAC no station has (group, zero) and when the
    /// table is full ([`Neighbours::set_static`]).
    pub fn add_neighbour(&mut self, gid: Gid, mac: Mac) -> Result<()> {
        self.neighbours.set_static(gid, mac)
    }

    /// Whether a receive failed, leaving the GSI QP in ERR (see [`MadPort::recv_mad`]).
    pub fn is_failed(&self) -> bool {
        self.failed
    }

    /// What the port counted.
    pub fn stats(&self) -> GsiStats {
        GsiStats { recv_errors: self.recv_errors, send_errors: self.send_errors, ..self.stats }
    }

    /// The GSI QP.
    pub fn qp(&self) -> &Qp<'r, M, D, C, GSI_SQ, RQ, 1> {
        &self.qp
    }

    /// Reap send completions (every MAD is signalled).
    fn reap(&mut self) -> Result<()> {
        let mut wc = [Completion::default(); 8];
        loop {
            let n = self.qp.poll(&mut wc)?;
            self.send_errors +=
                wc[..n].iter().filter(|c| c.status != WcStatus::Success).count() as u64;
            if n < wc.len() {
                return Ok(());
            }
        }
    }
}

impl<M: Mmio, D: Dma, C: Control, const RQ: usize> MadPort for GsiPort<'_, M, D, C, RQ> {
    fn send_mad(&mut self, to: &MadAddr, mad: &[u8; MAD_LEN]) -> Result<()> {
        self.reap()?;
        let dest = UdDest {
            addr: RoceAddr {
                dgid: to.dgid,
                dmac: to.dmac,
                sgid_index: to.sgid_index,
                udp_sport: 0,
                hop_limit: to.hop_limit,
                traffic_class: to.traffic_class,
                flow_label: 0,
                sl: 0,
                static_rate: 0,
            },
            qpn: QpNum(1),
            qkey: GSI_QKEY,
        };
        let flags = SendFlags::SIGNALED | SendFlags::INLINE;
        match self.qp.post_send_ud(0, Source::inline(&[&mad[..]]), flags, &dest, None) {
            Err(e @ Error::QueueFull { .. }) => {
                self.stats.send_full += 1;
                Err(e)
            }
            r => r,
        }
    }

    /// A datagram of any length up to a slot is taken, and its true length returned (the CM
    /// refuses every length but a GRH and a MAD). A receive completing in error means the
    /// GSI QP went to ERR ("receive errors indicate that the QP has entered the error
    /// state", the kernel's `ib_mad_recv_done`): the port reports [`Error::NotConnected`]
    /// from then on, and must be re-created.
    fn recv_mad(&mut self, buf: &mut [u8; GRH_LEN + MAD_LEN]) -> Result<Option<usize>> {
        if self.failed {
            return Err(Error::NotConnected);
        }
        self.reap()?;
        if self.next == self.count {
            // Reap every receive completion there is (at most `RQ`: one per posted slot), so
            // that what the device still holds is known: none left is an exhausted ring.
            self.next = 0;
            self.count = 0;
            let n = self.qp.poll_recv(&mut self.staged)?;
            if n == 0 {
                return Ok(None);
            }
            self.count = n;
            if self.qp.rq_outstanding() == 0 {
                self.stats.ring_exhausted += 1;
            }
        }
        let c = self.staged[self.next];
        self.next += 1;
        let i = c.wr_id as usize;
        let Some(p) = self.pending.get_mut(i).and_then(Option::take) else {
            self.stats.dropped += 1;
            return Err(Error::InvalidArgument("receive completion for an unknown slot"));
        };
        let slot = match p.reclaim(&self.qp) {
            Ok(s) => s,
            Err(p) => {
                self.pending[i] = Some(p);
                self.stats.dropped += 1;
                return Err(Error::InvalidArgument("receive not retired"));
            }
        };
        if c.status != WcStatus::Success {
            self.recv_errors += 1;
            self.failed = true;
            // What was staged after it is not handed out any more.
            self.stats.dropped += (self.count - self.next) as u64;
            self.next = self.count;
            return Err(Error::NotConnected);
        }
        let len = c.byte_len as usize;
        let n = len.min(buf.len()).min(slot.len());
        slot.read(0, &mut buf[..n])?;
        // The slot goes back to the device before the MAD is handed on.
        self.pending[i] = Some(self.qp.post_recv(i as u64, slot).map_err(Error::from)?);
        self.stats.received += 1;
        Ok(Some(len))
    }

    fn resolve(&mut self, gid: &Gid) -> Option<Mac> {
        self.neighbours.static_mac(*gid)
    }
}

/// A [`GsiPort`] whose neighbours come from the port's ARP ([`EthPort`], its clock `K`): each
/// [`MadPort::recv_mad`] first takes the Ethernet port's frames (a peer's ARP request is
/// answered, and its sender learned, before the peer's REQ arrives), and [`MadPort::resolve`]
/// looks in the GSI port's own table, then in ARP's, sending an ARP request for an IPv4 GID
/// it does not know (a MAD that needed it is not answered; the peer sends it again).
///
/// The active side resolves its peer before [`rdma_pmd::cm::Cm::connect`] with
/// [`ArpGsiPort::resolve_ipv4`], a bounded wait. Keep polling the CM while connections run:
/// a peer's kernel probes our MAC again once its entry goes stale (by unicast ARP, seconds
/// apart), and drops its traffic to us if nobody answers.
pub struct ArpGsiPort<'r, 'd, M: Mmio, D: Dma, C: Control, K: Clock, const RQ: usize = 128> {
    gsi: GsiPort<'r, M, D, C, RQ>,
    eth: EthPort<'d, M, D, C>,
    clock: K,
    /// Errors the Ethernet port returned while it was polled.
    pub eth_errors: u64,
}

impl<'r, 'd, M: Mmio, D: Dma, C: Control, K: Clock, const RQ: usize>
    ArpGsiPort<'r, 'd, M, D, C, K, RQ>
{
    /// Pair `gsi` with `eth` (which answers for our addresses: [`EthPort::add_address`]).
    pub fn new(gsi: GsiPort<'r, M, D, C, RQ>, eth: EthPort<'d, M, D, C>, clock: K) -> Self {
        ArpGsiPort { gsi, eth, clock, eth_errors: 0 }
    }

    /// The MAC of `ip` by ARP, polling the Ethernet port until the answer comes
    /// ([`Error::Unreachable`] after the retries: [`EthPort::resolve`]).
    pub fn resolve_ipv4(&mut self, ip: core::net::Ipv4Addr) -> Result<Mac> {
        self.eth.resolve(ip, &self.clock)
    }

    /// The GSI port.
    pub fn gsi_mut(&mut self) -> &mut GsiPort<'r, M, D, C, RQ> {
        &mut self.gsi
    }

    /// The Ethernet port.
    pub fn eth_mut(&mut self) -> &mut EthPort<'d, M, D, C> {
        &mut self.eth
    }
}

impl<M: Mmio, D: Dma, C: Control, K: Clock, const RQ: usize> MadPort
    for ArpGsiPort<'_, '_, M, D, C, K, RQ>
{
    fn send_mad(&mut self, to: &MadAddr, mad: &[u8; MAD_LEN]) -> Result<()> {
        self.gsi.send_mad(to, mad)
    }

    fn recv_mad(&mut self, buf: &mut [u8; GRH_LEN + MAD_LEN]) -> Result<Option<usize>> {
        if self.eth.poll_eth(self.clock.now_ns()).is_err() {
            self.eth_errors += 1;
        }
        self.gsi.recv_mad(buf)
    }

    fn resolve(&mut self, gid: &Gid) -> Option<Mac> {
        if let Some(m) = self.gsi.resolve(gid) {
            return Some(m);
        }
        let ip = core::net::Ipv4Addr::from(gid.ipv4()?);
        match self.eth.poll_resolve(ip, self.clock.now_ns()) {
            Ok(m) => m,
            Err(_) => {
                self.eth_errors += 1;
                None
            }
        }
    }
}

/// The CM moves an RC QP by its own transitions, so the QP's state (which posting checks)
/// stays true. The RDMA READ depths the CM negotiates (`max_rd_atomic`,
/// `max_dest_rd_atomic`) are not passed on: this driver's transitions always set
/// `log_sra_max` and `log_rra_max` to min(cap, 4), up to 16 outstanding each way (`QPC.md`);
/// a negotiation of more than that is not honoured.
impl<M: Mmio, D: Dma, C: Control, const SQ: usize, const RQ: usize, const RS: usize> CmQp
    for Qp<'_, M, D, C, SQ, RQ, RS>
{
    fn qp_num(&self) -> QpNum {
        SendQueue::qp_num(self)
    }

    fn modify(&mut self, step: &QpStep) -> Result<()> {
        match *step {
            QpStep::Init { port, access } => {
                if self.state() != QpState::Reset {
                    return Err(Error::InvalidArgument("QP not in RESET"));
                }
                let mut a = Access::LOCAL_WRITE;
                if access.write {
                    a |= Access::REMOTE_WRITE;
                }
                if access.read {
                    a |= Access::REMOTE_READ;
                }
                if access.atomic {
                    a |= Access::REMOTE_ATOMIC;
                }
                self.init(&ConnectOpts { port, access: a, ..ConnectOpts::default() })
            }
            QpStep::Rtr { remote_qpn, rq_psn, mtu, path, .. } => {
                let path = Path::RoceV2 {
                    dgid: path.dgid.0,
                    dmac: path.dmac.0,
                    sgid_index: path.sgid_index,
                    udp_sport: 0,
                    hop_limit: path.hop_limit,
                    traffic_class: path.traffic_class,
                    flow_label: path.flow_label,
                    sl: path.sl,
                };
                self.to_rtr(remote_qpn, path, mtu, rq_psn)
            }
            QpStep::Rts { sq_psn, timeout, retry_cnt, rnr_retry, .. } => {
                self.to_rts(&ConnectOpts {
                    sq_psn,
                    timeout,
                    retry_cnt,
                    rnr_retry,
                    ..ConnectOpts::default()
                })
            }
            QpStep::Error => self.to_error(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rdma_pmd::cm::{MadAddr, MadPort};
    use rdma_pmd_hal::mem::{HeapDma, MemBar};

    use super::*;
    use crate::device::SharedDma;
    use crate::testing::{bar, NullControl};

    type Port<'r> = GsiPort<'r, MemBar, SharedDma<Arc<HeapDma>>, NullControl>;

    /// The rig: the driver opened on the fake BAR (a device that completes nothing), and the
    /// GSI port of port 1, handed to `test`.
    fn with_port(test: impl FnOnce(&mut Port<'_>)) {
        let (b, _rec) = bar::bar();
        let dev = Mlx5::open(b, SharedDma(HeapDma::new()), NullControl::with_bf(9)).unwrap();
        let mut rx = dev.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap();
        test(&mut GsiPort::new(&dev, &mut rx, 1).unwrap());
    }

    /// The port's neighbours are static entries of the driver's one neighbour table: one
    /// per GID (a second replaces the first), never a MAC no station has, at most
    /// [`NEIGHBOURS`] of them, and what resolves a GID for the CM.
    #[test]
    fn the_gsi_ports_neighbours_are_the_driver_tables_static_entries() {
        with_port(|port| {
            let peer = Gid::from_ipv4([192, 0, 2, 2]);
            assert_eq!(port.resolve(&peer), None);
            port.add_neighbour(peer, Mac([2, 0, 0, 0, 0, 2])).unwrap();
            port.add_neighbour(peer, Mac([2, 0, 0, 0, 0, 3])).unwrap();
            assert_eq!(port.resolve(&peer), Some(Mac([2, 0, 0, 0, 0, 3])));
            for bad in [Mac([0xff; 6]), Mac([0x01, 0, 0x5e, 0, 0, 1]), Mac([0; 6])] {
                let e = port.add_neighbour(Gid::from_ipv4([192, 0, 2, 9]), bad);
                assert!(matches!(e, Err(Error::InvalidArgument(_))), "{bad:?}: {e:?}");
            }
            assert_eq!(port.resolve(&Gid::from_ipv4([192, 0, 2, 9])), None);
            for i in 1..NEIGHBOURS as u8 {
                port.add_neighbour(Gid::from_ipv4([198, 51, 100, i]), Mac([2, 0, 0, 1, 0, i]))
                    .unwrap();
            }
            let full =
                port.add_neighbour(Gid::from_ipv4([203, 0, 113, 1]), Mac([2, 0, 0, 2, 0, 1]));
            assert_eq!(full, Err(Error::TableFull("neighbour")));
            assert_eq!(port.resolve(&peer), Some(Mac([2, 0, 0, 0, 0, 3])));
        });
    }

    /// The GSI send ring holds a burst of 128 MADs (REPs or DREPs for a full CM table) with no
    /// completion reaped, and the MAD after the last that fits is refused with
    /// [`Error::QueueFull`], counted, so that the CM keeps it for later.
    #[test]
    fn the_gsi_send_ring_holds_a_burst_and_then_says_queue_full() {
        with_port(|port| {
            let to = MadAddr {
                dgid: Gid::from_ipv4([192, 0, 2, 2]),
                dmac: Mac([2, 0, 0, 0, 0, 2]),
                sgid_index: 0,
                hop_limit: 64,
                traffic_class: 0,
            };
            let mad = [0x5au8; MAD_LEN];
            // The fake device completes nothing: every MAD stays in flight.
            let mut sent = 0;
            let e = loop {
                match port.send_mad(&to, &mad) {
                    Ok(()) => sent += 1,
                    Err(e) => break e,
                }
                assert!(sent <= GSI_SQ, "the ring never filled");
            };
            assert!(matches!(e, Error::QueueFull { .. }), "{e:?}");
            assert_eq!(e.errno(), rdma_pmd::Errno::ENOMEM);
            assert_eq!(sent, GSI_SENDS);
            assert!(sent >= 128, "{sent} MADs in flight");
            assert_eq!(port.stats().send_full, 1);
            // Still full, still the same error: nothing was posted.
            assert!(matches!(port.send_mad(&to, &mad), Err(Error::QueueFull { .. })));
            assert_eq!(port.stats().send_full, 2);
        });
    }
}
