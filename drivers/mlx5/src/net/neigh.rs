//! The driver's neighbour table ([`Neighbours`]: peers' MACs, given or learned, at most `N`
//! of them) and the ARP state machine over it: our IPv4 addresses, and address resolution
//! polled from the busy loop. No allocation (`heapless::Vec`). The same table keeps the GSI
//! port's neighbours by GID (`crate::cm::GsiPort`), where the application gives them.
//!
//! Receiving follows RFC 826's algorithm: a well-formed frame ([`ArpRepr::parse`]) not from
//! us and addressed to us or broadcast first refreshes an entry we already have for its
//! sender ("merge"); then, if its target is one of our addresses, the sender is added when
//! it was not merged, and a request is answered. Anything else is dropped and counted
//! ([`ArpStats`]). Static entries are never overwritten; a sender of 0.0.0.0 (an RFC 5227
//! probe) is answered but not learned; a sender claiming one of our addresses (a conflict,
//! or a gratuitous ARP for it) is neither learned nor answered.
//!
//! **What a flood can do.** Anyone on the segment can send ARP, with any sender. The table
//! is fixed (`N` entries), so memory is bounded whatever arrives, and:
//!
//! * A sender learned from the wire (an unsolicited request or reply) takes a free entry, or
//!   the place of a learned entry gone stale (which would be resolved again anyway); never a
//!   fresh learned entry, an address being resolved, or a static one. With none to spare it is
//!   answered, not learned, and counted (`table_full`). Only a resolution the caller asked for
//!   ([`Arp::poll_resolve`]) may push out the least recently confirmed learned entry.
//! * The MAC of a learned entry changes only if the entry was last confirmed at least
//!   `locktime_ns` ago (the kernel's `locktime`, 1 s: `arp_process` passes `override` to
//!   `neigh_update` only then): a flood of spoofed senders for a peer's address moves that
//!   peer's traffic at most once per lock time, not with every frame, and each refusal is
//!   counted (`locked`). The first answer to a request wins for that long.
//!
//! Resolving ([`Arp::poll_resolve`]) is a step of the caller's loop, never a wait: it answers
//! a MAC, or a request frame to send, or "pending"; after `retries` requests, each given
//! `retrans_ns` for its reply (the kernel's `mcast_solicit` 3 and `retrans_time` 1 s by
//! default), the entry is dropped and the peer reported unreachable
//! ([`Error::Unreachable`], `EHOSTUNREACH`). A learned entry is trusted for `reachable_ns`
//! (30 s, the kernel's `base_reachable_time`), then resolved again.

use core::net::{IpAddr, Ipv4Addr};

use heapless::Vec;
use rdma_pmd::{Error, Mac};

use super::arp::{is_group, ArpError, ArpOp, ArpRepr, MIN_FRAME_LEN};

/// Resolution timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighConfig {
    /// Requests sent before the peer is unreachable (at least 1).
    pub retries: u8,
    /// Time each request is given for its reply, in nanoseconds.
    pub retrans_ns: u64,
    /// How long a learned MAC is used before it is resolved again, in nanoseconds.
    pub reachable_ns: u64,
    /// How long after a learned MAC was confirmed the wire may not change it, in nanoseconds
    /// (the kernel's `locktime`).
    pub locktime_ns: u64,
}

impl Default for NeighConfig {
    /// The kernel's defaults: 3 requests 1 s apart, entries reachable for 30 s, a lock time
    /// of 1 s.
    fn default() -> Self {
        NeighConfig {
            retries: 3,
            retrans_ns: 1_000_000_000,
            reachable_ns: 30_000_000_000,
            locktime_ns: 1_000_000_000,
        }
    }
}

impl NeighConfig {
    /// The longest a resolution can take: every request's wait.
    pub const fn max_wait_ns(&self) -> u64 {
        self.retrans_ns.saturating_mul(if self.retries == 0 { 1 } else { self.retries as u64 })
    }
}

/// What a neighbour entry knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NeighState {
    /// Given by the user; never replaced or aged.
    Static(Mac),
    /// Learned from the wire at `since_ns`.
    Reachable {
        /// The MAC.
        mac: Mac,
        /// When it was last confirmed.
        since_ns: u64,
    },
    /// Being resolved: `sent` requests so far, the last one's wait ends at `until_ns`.
    Incomplete {
        /// Requests sent.
        sent: u8,
        /// End of the current request's wait.
        until_ns: u64,
    },
}

/// One neighbour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Neighbour<A = Ipv4Addr> {
    /// Its address: an IPv4 address for ARP, a GID (an IP address, RoCE v2) for the GSI port.
    pub ip: A,
    /// What is known of it.
    pub state: NeighState,
}

/// A table of at most `N` neighbours by address `A`. A static entry is replaced only by
/// another static one; a learned or unresolved one gives way as [`Arp`] decides.
#[derive(Debug)]
pub struct Neighbours<A, const N: usize> {
    table: Vec<Neighbour<A>, N>,
}

impl<A: Copy + Eq, const N: usize> Default for Neighbours<A, N> {
    fn default() -> Self {
        Neighbours { table: Vec::new() }
    }
}

impl<A: Copy + Eq, const N: usize> Neighbours<A, N> {
    /// The entries.
    pub fn entries(&self) -> &[Neighbour<A>] {
        &self.table
    }

    /// What is known of `a`.
    pub fn state(&self, a: A) -> Option<NeighState> {
        self.table.iter().find(|n| n.ip == a).map(|n| n.state)
    }

    /// The MAC of `a` if it is a static entry.
    pub fn static_mac(&self, a: A) -> Option<Mac> {
        match self.state(a)? {
            NeighState::Static(m) => Some(m),
            _ => None,
        }
    }

    /// A static neighbour: `a` is at `mac`, whatever the wire says; replaces any entry for
    /// `a`. Refused for a group or zero MAC (no station has it), and when every entry is
    /// static or being resolved ([`Error::TableFull`]).
    pub fn set_static(&mut self, a: A, mac: Mac) -> Result<(), Error> {
        if is_group(mac) || mac.0 == [0; 6] {
            return Err(Error::InvalidArgument("not a station MAC"));
        }
        self.put(a, NeighState::Static(mac), true)
            .then_some(())
            .ok_or(Error::TableFull("neighbour"))
    }

    /// Forget `a` (static or learned).
    pub fn remove(&mut self, a: A) {
        self.table.retain(|n| n.ip != a);
    }

    fn state_mut(&mut self, a: A) -> Option<&mut NeighState> {
        self.table.iter_mut().find(|n| n.ip == a).map(|n| &mut n.state)
    }

    /// Add a sender the wire told of (not in the table): into a free entry, or in place of
    /// the least recently confirmed learned entry if that one is stale at `now_ns` (learned
    /// more than `reachable_ns` before). False if neither.
    fn learn(&mut self, a: A, state: NeighState, now_ns: u64, reachable_ns: u64) -> bool {
        let room = !self.table.is_full()
            || self.evict_oldest(|since_ns| !fresh(since_ns, now_ns, reachable_ns));
        room && self.table.push(Neighbour { ip: a, state }).is_ok()
    }

    /// Set `a`'s state, adding it if new; a full table gives up its least recently
    /// confirmed learned entry (for a resolution the caller asked for). A static entry is
    /// replaced only by another static one (`over_static`). False if nothing could make room.
    fn put(&mut self, a: A, state: NeighState, over_static: bool) -> bool {
        if let Some(n) = self.table.iter_mut().find(|n| n.ip == a) {
            if matches!(n.state, NeighState::Static(_)) && !over_static {
                return false;
            }
            n.state = state;
            return true;
        }
        let room = !self.table.is_full() || self.evict_oldest(|_| true);
        room && self.table.push(Neighbour { ip: a, state }).is_ok()
    }

    /// Drop the least recently confirmed learned entry among those confirmed at a time
    /// `may_go` accepts. False if there is none.
    fn evict_oldest(&mut self, may_go: impl Fn(u64) -> bool) -> bool {
        let oldest = self
            .table
            .iter()
            .enumerate()
            .filter_map(|(i, n)| match n.state {
                NeighState::Reachable { since_ns, .. } if may_go(since_ns) => Some((since_ns, i)),
                _ => None,
            })
            .min();
        oldest.map(|(_, i)| self.table.swap_remove(i)).is_some()
    }
}

/// A learned entry confirmed at `since_ns` is still trusted at `now_ns`.
fn fresh(since_ns: u64, now_ns: u64, reachable_ns: u64) -> bool {
    now_ns.saturating_sub(since_ns) < reachable_ns
}

/// Counters of what the ARP path received and did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArpStats {
    /// Frames handed to [`Arp::on_frame`].
    pub received: u64,
    /// Requests for our addresses answered.
    pub replied: u64,
    /// Requests sent by resolution.
    pub requests_sent: u64,
    /// Entries added or refreshed from the wire.
    pub learned: u64,
    /// Frames dropped as malformed (every [`ArpError`] but `NotForUs`, `FromUs` and `Conflict`).
    pub malformed: u64,
    /// Frames dropped as meant for another station or address.
    pub not_for_us: u64,
    /// Our own frames seen again.
    pub from_us: u64,
    /// Frames whose sender claimed one of our addresses.
    pub conflicts: u64,
    /// Senders not learned because no entry was free or stale (the table was full of
    /// fresh, static and unresolved entries).
    pub table_full: u64,
    /// Frames that would have changed a learned MAC within its lock time: not taken.
    pub locked: u64,
    /// Resolutions that ended unreachable.
    pub unreachable: u64,
}

/// One step of a resolution ([`Arp::poll_resolve`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolve {
    /// The MAC is known.
    Ready(Mac),
    /// Send the request frame of this many bytes written into the caller's buffer, then poll
    /// again.
    Send(usize),
    /// A request is out; poll the receive path and then again.
    Pending,
}

/// What [`Arp::on_frame`] did with a frame it took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handled {
    /// A request for one of our addresses: send the reply of this many bytes written into
    /// the caller's buffer.
    Reply(usize),
    /// A reply (or other frame for us) whose sender was learned or refreshed.
    Learned,
    /// For us, but nothing to learn (a probe from 0.0.0.0 answered elsewhere, a static
    /// sender, a full table).
    Nothing,
}

/// The ARP state of one port: its MAC, its addresses, its neighbours.
#[derive(Debug)]
pub struct Arp<const N: usize, const A: usize> {
    mac: Mac,
    addrs: Vec<Ipv4Addr, A>,
    table: Neighbours<Ipv4Addr, N>,
    cfg: NeighConfig,
    stats: ArpStats,
}

impl<const N: usize, const A: usize> Arp<N, A> {
    /// ARP for a port whose MAC is `mac`.
    pub fn new(mac: Mac, cfg: NeighConfig) -> Self {
        Arp {
            mac,
            addrs: Vec::new(),
            table: Neighbours::default(),
            cfg,
            stats: ArpStats::default(),
        }
    }

    /// The port's MAC.
    pub fn mac(&self) -> Mac {
        self.mac
    }

    /// What was counted.
    pub fn stats(&self) -> ArpStats {
        self.stats
    }

    /// The timing in use.
    pub fn config(&self) -> NeighConfig {
        self.cfg
    }

    /// Answer ARP for `ip` (the first address added is the source of our requests).
    pub fn add_address(&mut self, ip: Ipv4Addr) -> Result<(), Error> {
        if !station_ip(ip) {
            return Err(Error::InvalidArgument("not a unicast IPv4 address"));
        }
        if self.addrs.contains(&ip) {
            return Ok(());
        }
        self.addrs.push(ip).map_err(|_| Error::InvalidArgument("address table full"))
    }

    /// Stop answering for `ip`.
    pub fn remove_address(&mut self, ip: Ipv4Addr) {
        self.addrs.retain(|a| *a != ip);
    }

    /// Our addresses.
    pub fn addresses(&self) -> &[Ipv4Addr] {
        &self.addrs
    }

    /// The neighbours.
    pub fn neighbours(&self) -> &[Neighbour] {
        self.table.entries()
    }

    /// A static neighbour: `ip` is at `mac`, whatever the wire says.
    pub fn set_static(&mut self, ip: Ipv4Addr, mac: Mac) -> Result<(), Error> {
        if !station_ip(ip) {
            return Err(Error::InvalidArgument("not a unicast IPv4 address"));
        }
        self.table.set_static(ip, mac)
    }

    /// Forget `ip` (static or learned).
    pub fn remove(&mut self, ip: Ipv4Addr) {
        self.table.remove(ip);
    }

    /// The MAC of `ip` if it is known and fresh at `now_ns`, without resolving.
    pub fn lookup(&self, ip: Ipv4Addr, now_ns: u64) -> Option<Mac> {
        if self.addrs.contains(&ip) {
            return Some(self.mac);
        }
        match self.table.state(ip)? {
            NeighState::Static(m) => Some(m),
            NeighState::Reachable { mac, since_ns }
                if fresh(since_ns, now_ns, self.cfg.reachable_ns) =>
            {
                Some(mac)
            }
            _ => None,
        }
    }

    /// One step of resolving `ip` at `now_ns`; a request to send is written into `out`.
    pub fn poll_resolve(
        &mut self,
        ip: Ipv4Addr,
        now_ns: u64,
        out: &mut [u8; MIN_FRAME_LEN],
    ) -> Result<Resolve, Error> {
        if !station_ip(ip) {
            return Err(Error::InvalidArgument("not a unicast IPv4 address"));
        }
        if let Some(m) = self.lookup(ip, now_ns) {
            return Ok(Resolve::Ready(m));
        }
        let Some(&src) = self.addrs.first() else {
            return Err(Error::InvalidArgument("no IPv4 address of our own to ask from"));
        };
        let until_ns = now_ns.saturating_add(self.cfg.retrans_ns);
        let sent = match self.table.state(ip) {
            Some(NeighState::Incomplete { until_ns: u, .. }) if now_ns < u => {
                return Ok(Resolve::Pending)
            }
            Some(NeighState::Incomplete { sent, .. }) if sent >= self.cfg.retries.max(1) => {
                self.remove(ip);
                self.stats.unreachable += 1;
                return Err(Error::Unreachable(IpAddr::V4(ip)));
            }
            Some(NeighState::Incomplete { sent, .. }) => sent + 1,
            // Unknown, or learned and gone stale.
            _ => 1,
        };
        if !self.table.put(ip, NeighState::Incomplete { sent, until_ns }, false) {
            return Err(Error::InvalidArgument(
                "neighbour table full of static and unresolved entries",
            ));
        }
        let n = ArpRepr::request(self.mac, src, ip).emit(out).unwrap_or(0);
        self.stats.requests_sent += 1;
        Ok(Resolve::Send(n))
    }

    /// Take a received frame at `now_ns` (RFC 826's receive algorithm, see the module docs);
    /// a reply to send is written into `out`. A frame not taken is counted and its reason
    /// returned.
    pub fn on_frame(
        &mut self,
        frame: &[u8],
        now_ns: u64,
        out: &mut [u8; MIN_FRAME_LEN],
    ) -> Result<Handled, ArpError> {
        self.stats.received += 1;
        let r = self.check(frame).inspect_err(|e| self.count(e))?;
        let reachable = NeighState::Reachable { mac: r.sender_mac, since_ns: now_ns };
        let learnable = r.sender_ip != Ipv4Addr::UNSPECIFIED;
        let mut merged = false;
        if learnable {
            if let Some(state) = self.table.state_mut(r.sender_ip) {
                match *state {
                    NeighState::Static(_) => {}
                    NeighState::Reachable { mac, since_ns }
                        if mac != r.sender_mac
                            && now_ns.saturating_sub(since_ns) < self.cfg.locktime_ns =>
                    {
                        self.stats.locked += 1;
                    }
                    _ => {
                        *state = reachable;
                        self.stats.learned += 1;
                    }
                }
                merged = true;
            }
        }
        if !self.addrs.contains(&r.target_ip) {
            self.stats.not_for_us += 1;
            return Err(ArpError::NotForUs);
        }
        let mut done = if merged { Handled::Learned } else { Handled::Nothing };
        if learnable && !merged {
            if self.table.learn(r.sender_ip, reachable, now_ns, self.cfg.reachable_ns) {
                self.stats.learned += 1;
                done = Handled::Learned;
            } else {
                self.stats.table_full += 1;
            }
        }
        if r.op == ArpOp::Request {
            let n = r.reply_from(self.mac).emit(out).unwrap_or(0);
            self.stats.replied += 1;
            return Ok(Handled::Reply(n));
        }
        Ok(done)
    }

    /// Parse and apply the checks that do not depend on the table.
    fn check(&self, frame: &[u8]) -> Result<ArpRepr, ArpError> {
        let r = ArpRepr::parse(frame)?;
        if r.sender_mac == self.mac {
            return Err(ArpError::FromUs);
        }
        if r.eth_dst != self.mac && r.eth_dst != super::arp::BROADCAST {
            return Err(ArpError::NotForUs);
        }
        if self.addrs.contains(&r.sender_ip) {
            return Err(ArpError::Conflict(r.sender_ip));
        }
        Ok(r)
    }

    fn count(&mut self, e: &ArpError) {
        match e {
            ArpError::NotForUs => self.stats.not_for_us += 1,
            ArpError::FromUs => self.stats.from_us += 1,
            ArpError::Conflict(_) => self.stats.conflicts += 1,
            _ => self.stats.malformed += 1,
        }
    }
}

/// A unicast IPv4 address a station can have.
fn station_ip(ip: Ipv4Addr) -> bool {
    !(ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast())
}

#[cfg(test)]
mod tests;
