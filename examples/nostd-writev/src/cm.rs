//! The connection manager, freestanding: two CMs over an in-memory wire of fixed queues
//! connect (REQ, REP, RTU), and disconnect (DREQ, DREP), moving two fake QPs to RTS and ERR.
//! Nothing allocates; the check returns 0 or the number of the step that failed (200 + n).

use core::cell::RefCell;

use rdma_pmd::cm::mad::{GRH_LEN, MAD_LEN};
use rdma_pmd::cm::{
    AcceptParams, Cm, CmConfig, CmQp, ConnectParams, EventKind, MadAddr, MadPort, Micros, QpParams,
    QpStep,
};
use rdma_pmd::{Gid, Mac, QpNum, Result};

const DEPTH: usize = 4;

/// One direction of the wire: a ring of datagrams (GRH and MAD).
struct Queue {
    slots: [[u8; GRH_LEN + MAD_LEN]; DEPTH],
    head: usize,
    len: usize,
}

struct Wire {
    q: [RefCell<Queue>; 2],
}

struct Port<'w> {
    wire: &'w Wire,
    me: usize,
}

fn gid(i: usize) -> Gid {
    Gid::from_ipv4([10, 0, 0, 1 + i as u8])
}

impl MadPort for Port<'_> {
    fn send_mad(&mut self, _to: &MadAddr, mad: &[u8; MAD_LEN]) -> Result<()> {
        let mut q = self.wire.q[1 - self.me].borrow_mut();
        if q.len == DEPTH {
            return Err(rdma_pmd::Error::TableFull("wire"));
        }
        let at = (q.head + q.len) % DEPTH;
        let d = &mut q.slots[at];
        d[..GRH_LEN].fill(0);
        d[20] = 0x45;
        d[32..36].copy_from_slice(&gid(self.me).0[12..]);
        d[GRH_LEN..].copy_from_slice(mad);
        q.len += 1;
        Ok(())
    }

    fn recv_mad(&mut self, buf: &mut [u8; GRH_LEN + MAD_LEN]) -> Result<Option<usize>> {
        let mut q = self.wire.q[self.me].borrow_mut();
        if q.len == 0 {
            return Ok(None);
        }
        *buf = q.slots[q.head];
        q.head = (q.head + 1) % DEPTH;
        q.len -= 1;
        Ok(Some(GRH_LEN + MAD_LEN))
    }

    fn resolve(&mut self, _gid: &Gid) -> Option<Mac> {
        Some(Mac([2, 0, 0, 0, 0, 9]))
    }
}

struct FakeQp {
    qpn: u32,
    rts: bool,
    err: bool,
}

impl CmQp for FakeQp {
    fn qp_num(&self) -> QpNum {
        QpNum(self.qpn)
    }
    fn modify(&mut self, step: &QpStep) -> Result<()> {
        match step {
            QpStep::Rts { .. } => self.rts = true,
            QpStep::Error => self.err = true,
            _ => {}
        }
        Ok(())
    }
}

/// Connect, check both ends, disconnect.
pub fn check() -> i32 {
    let empty = || RefCell::new(Queue { slots: [[0; GRH_LEN + MAD_LEN]; DEPTH], head: 0, len: 0 });
    let wire = Wire { q: [empty(), empty()] };
    let Ok(mut a) = Cm::<_, 2, 4>::new(Port { wire: &wire, me: 0 }, CmConfig::new(0xa1, 1)) else {
        return 201;
    };
    let Ok(mut b) = Cm::<_, 2, 4>::new(Port { wire: &wire, me: 1 }, CmConfig::new(0xb2, 2)) else {
        return 202;
    };
    if b.listen(7174).is_err() {
        return 203;
    }
    let mut qa = [FakeQp { qpn: 0x11, rts: false, err: false }];
    let mut qb = [FakeQp { qpn: 0x22, rts: false, err: false }];
    let p = ConnectParams {
        local: ([10, 0, 0, 1], 40000).into(),
        remote: ([10, 0, 0, 2], 7174).into(),
        local_gid: gid(0),
        remote_gid: gid(1),
        remote_mac: Mac([2, 0, 0, 0, 0, 9]),
        private_data: b"freestanding",
        qp: QpParams::default(),
    };
    let t = Micros(0);
    let Ok(ida) = a.connect(&mut qa[0], &p, t) else { return 204 };
    let Some(req) = b.poll(t, &mut qb[..]) else { return 205 };
    if req.kind != EventKind::ConnectRequest {
        return 206;
    }
    match b.get_request(req.id) {
        Some(r) if &r.private_data[..12] == b"freestanding" => {}
        _ => return 207,
    }
    if b.accept(req.id, &mut qb[0], &AcceptParams::default(), t).is_err() {
        return 208;
    }
    let ea = a.poll(t, &mut qa[..]);
    let eb = b.poll(t, &mut qb[..]);
    if ea.map(|e| e.kind) != Some(EventKind::Established)
        || eb.map(|e| e.kind) != Some(EventKind::Established)
        || !qa[0].rts
        || !qb[0].rts
    {
        return 209;
    }
    if a.disconnect(ida, &mut qa[0], t).is_err() {
        return 210;
    }
    let eb = b.poll(t, &mut qb[..]);
    let ea = a.poll(t, &mut qa[..]);
    if ea.map(|e| e.kind) != Some(EventKind::Disconnected)
        || eb.map(|e| e.kind) != Some(EventKind::Disconnected)
        || !qa[0].err
        || !qb[0].err
    {
        return 211;
    }
    0
}
