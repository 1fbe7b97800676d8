//! A fake network of MAD ports and fake data QPs, for the CM's unit tests.

extern crate std;

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::vec::Vec;

use crate::cm::backend::{CmQp, MadAddr, MadPort, QpStep};
use crate::cm::mad::{GRH_LEN, MAD_LEN};
use crate::{Error, Gid, Mac, QpNum, Result};

/// A datagram in flight: destination, source and the MAD.
#[derive(Clone)]
pub struct Datagram {
    #[allow(dead_code)]
    pub to: MadAddr,
    pub from: Gid,
    pub mad: [u8; MAD_LEN],
}

#[derive(Default)]
pub struct Net {
    /// Every port's GID and MAC.
    pub hosts: Vec<(Gid, Mac)>,
    pub inbox: Vec<VecDeque<Datagram>>,
    /// Raw receives (GRH and MAD as the port hands them over), taken before `inbox`.
    pub raw: Vec<VecDeque<Vec<u8>>>,
    /// Everything sent, in order.
    pub log: Vec<Datagram>,
    /// Sends to these GIDs vanish.
    pub blackhole: Vec<Gid>,
    /// Per port, sends its queue still takes (`None`: no limit): at 0 a send fails with
    /// `Error::QueueFull`, as mlx5's GSI send queue does when about ten MADs are in flight.
    pub room: Vec<Option<usize>>,
}

impl Net {
    /// Deliver `mad` to port `to` as if sent from `from`.
    pub fn inject(&mut self, to: usize, from: Gid, mad: [u8; MAD_LEN]) {
        self.inbox[to].push_back(Datagram { to: MadAddr::default(), from, mad });
    }
}

pub type Shared = Rc<RefCell<Net>>;

pub struct Port {
    pub net: Shared,
    pub me: usize,
}

pub fn host(net: &Shared, last: u8) -> Port {
    let mut n = net.borrow_mut();
    n.hosts.push((Gid::from_ipv4([10, 0, 0, last]), Mac([2, 0, 0, 0, 0, last])));
    n.inbox.push(VecDeque::new());
    n.raw.push(VecDeque::new());
    n.room.push(None);
    Port { net: net.clone(), me: n.hosts.len() - 1 }
}

/// The GRH a RoCE v2 IPv4 receive carries: 20 zero bytes, then an IPv4 header.
pub fn grh(from: Gid, to: Gid) -> [u8; GRH_LEN] {
    let mut g = [0u8; GRH_LEN];
    g[20] = 0x45;
    g[32..36].copy_from_slice(&from.0[12..]);
    g[36..40].copy_from_slice(&to.0[12..]);
    g
}

impl MadPort for Port {
    fn send_mad(&mut self, to: &MadAddr, mad: &[u8; MAD_LEN]) -> Result<()> {
        let mut n = self.net.borrow_mut();
        match &mut n.room[self.me] {
            Some(0) => return Err(Error::QueueFull { needed: 1, free: 0 }),
            Some(k) => *k -= 1,
            None => {}
        }
        let from = n.hosts[self.me].0;
        let d = Datagram { to: *to, from, mad: *mad };
        n.log.push(d.clone());
        if n.blackhole.contains(&to.dgid) {
            return Ok(());
        }
        if let Some(i) = n.hosts.iter().position(|h| h.0 == to.dgid && h.1 == to.dmac) {
            n.inbox[i].push_back(d);
        }
        Ok(())
    }

    fn recv_mad(&mut self, buf: &mut [u8; GRH_LEN + MAD_LEN]) -> Result<Option<usize>> {
        let mut n = self.net.borrow_mut();
        let me = n.hosts[self.me].0;
        if let Some(r) = n.raw[self.me].pop_front() {
            let k = r.len().min(buf.len());
            buf[..k].copy_from_slice(&r[..k]);
            return Ok(Some(r.len()));
        }
        let Some(d) = n.inbox[self.me].pop_front() else { return Ok(None) };
        buf[..GRH_LEN].copy_from_slice(&grh(d.from, me));
        buf[GRH_LEN..].copy_from_slice(&d.mad);
        Ok(Some(GRH_LEN + MAD_LEN))
    }

    fn resolve(&mut self, gid: &Gid) -> Option<Mac> {
        self.net.borrow().hosts.iter().find(|h| h.0 == *gid).map(|h| h.1)
    }
}

/// A QP that records its transitions.
#[derive(Debug, Default)]
pub struct FakeQp {
    pub qpn: u32,
    pub steps: Vec<QpStep>,
    /// Fail the transition with this index.
    pub fail_at: Option<usize>,
}

impl FakeQp {
    pub fn new(qpn: u32) -> FakeQp {
        FakeQp { qpn, ..FakeQp::default() }
    }
    pub fn rts(&self) -> bool {
        matches!(self.steps.last(), Some(QpStep::Rts { .. }))
    }
}

impl CmQp for FakeQp {
    fn qp_num(&self) -> QpNum {
        QpNum(self.qpn)
    }
    fn modify(&mut self, step: &QpStep) -> Result<()> {
        if self.fail_at == Some(self.steps.len()) {
            return Err(Error::InvalidArgument("refused by the test"));
        }
        self.steps.push(*step);
        Ok(())
    }
}
