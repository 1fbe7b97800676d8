//! Unit tests of the data path against the null control seam, a recording BAR and heap DMA:
//! the test plays the device, reading the rings and writing CQEs through the CQE writer.

use rdma_pmd::post::{SendOp, SendRequest, Source};
use rdma_pmd::RecvQueue;
use std::sync::Arc;
use std::vec::Vec;

use rdma_pmd::{
    BusAddr, Completion, DeviceFault, Errno, Error, Post, QpNum, RemoteBuf, Rkey, SendFlags,
    SendQueue, WcOpcode, WcStatus,
};
use rdma_pmd_hal::mem::{HeapDma, MemBar};

use super::*;
use crate::control::Translation;
use crate::device::SharedDma;
use crate::layout::codes::{CqeOpcode, SendOpcode, Syndrome};
use crate::layout::cqe::Cqe;
use crate::layout::wqe::CtrlSeg;
use crate::testing::bar::{self, Recorder};
use crate::testing::{CqWriter, NullControl};

type Dev<C = NullControl> = Mlx5<MemBar, SharedDma<Arc<HeapDma>>, C>;

pub(super) struct Rig<C: Control = NullControl> {
    pub(super) dev: Dev<C>,
    pub(super) dma: Arc<HeapDma>,
    bar: Arc<Recorder>,
}

pub(super) fn rig(log_bf_reg_size: u8) -> Rig {
    rig_over(NullControl::with_bf(log_bf_reg_size))
}

/// A rig whose device uses `ctl` (`&mut NullControl` keeps the records past the device).
fn rig_over<C: Control>(ctl: C) -> Rig<C> {
    let (bar, rec) = bar::bar();
    let dma = HeapDma::new();
    let dev = Mlx5::open(bar, SharedDma(dma.clone()), ctl).unwrap();
    Rig { dev, dma, bar: rec }
}

impl<C: Control> Rig<C> {
    /// What the control seam recorded.
    fn log(&self) -> spin::MutexGuard<'_, C> {
        self.dev.control()
    }
}

pub(super) const REMOTE: RemoteBuf = RemoteBuf::new(0x7000_0000, Rkey(0x99));

/// The device side of one QP.
pub(super) struct Hw {
    dma: Arc<HeapDma>,
    qp: QpParams,
    qpn: QpNum,
    scq: CqWriter,
    rcq: CqWriter,
    rq_bytes: usize,
}

impl Hw {
    fn of(r: &Rig, qpn: QpNum) -> Hw {
        let log = r.log();
        let qp = log.qp(qpn).unwrap();
        let rq_bytes = (1usize << qp.log_rq_size.unwrap()) << qp.log_rq_stride;
        Hw {
            dma: r.dma.clone(),
            qp,
            qpn,
            scq: CqWriter::new(log.cq(qp.send_cq).unwrap()),
            rcq: CqWriter::new(log.cq(qp.recv_cq).unwrap()),
            rq_bytes,
        }
    }

    fn sq_block(&self, counter: u32) -> [u8; 64] {
        let slot = counter & ((1 << self.qp.log_sq_size) - 1);
        let mut b = [0u8; 64];
        let at = self.qp.buf.add(self.rq_bytes as u64 + slot as u64 * 64);
        assert!(self.dma.read(at, &mut b));
        b
    }

    fn be32(&self, at: BusAddr) -> u32 {
        let mut b = [0u8; 4];
        assert!(self.dma.read(at, &mut b));
        u32::from_be_bytes(b)
    }

    /// `dbrec[RCV_DBR]`, `dbrec[SND_DBR]`.
    fn qp_dbrec(&self) -> (u32, u32) {
        (self.be32(self.qp.dbrec), self.be32(self.qp.dbrec.add(4)))
    }

    /// How the device's stores reach memory.
    fn store(dma: &HeapDma) -> impl FnMut(BusAddr, &[u8]) + '_ {
        |at, bytes| assert!(dma.write(at, bytes), "CQ buffer reachable")
    }

    /// Write the next send CQE as `fill` makes it, with opcode `op` and the right owner bit.
    pub(super) fn send_cqe_raw(&mut self, b: &[u8; 64], op: CqeOpcode) {
        self.scq.write(b, op, Self::store(&self.dma));
    }

    /// The QP number the device answers for.
    pub(super) fn qpn(&self) -> QpNum {
        self.qpn
    }

    pub(super) fn send_cqe(&mut self, counter: u16, error: Option<(Syndrome, u8)>) {
        self.scq.requester(self.qpn, counter, error, Self::store(&self.dma));
    }

    /// Overwrite `bytes` at byte `off` of the send-ring block at `counter`: a device that
    /// writes the ring it should only read.
    pub(super) fn scribble_sq(&self, counter: u16, off: usize, bytes: &[u8]) {
        let slot = counter as u64 & ((1 << self.qp.log_sq_size) - 1);
        let at = self.qp.buf.add(self.rq_bytes as u64 + slot * 64 + off as u64);
        assert!(self.dma.write(at, bytes));
    }

    /// Write the next receive CQE as `fill` shapes it from a valid one.
    pub(super) fn recv_cqe_with(
        &mut self,
        imm: u32,
        byte_cnt: u32,
        op: CqeOpcode,
        fill: impl FnOnce(&mut Cqe<&mut [u8]>),
    ) {
        let mut b = [0u8; 64];
        let mut c = Cqe::new_unchecked(&mut b[..]);
        c.set_imm_inval_pkey(imm);
        c.set_byte_cnt(byte_cnt);
        c.set_s_wqe_opcode_qpn(SendOpcode::Nop, self.qpn);
        c.set_wqe_counter(self.rcq.produced() as u16);
        fill(&mut c);
        self.rcq.write(&b, op, Self::store(&self.dma));
    }

    pub(super) fn recv_cqe(&mut self, imm: u32, byte_cnt: u32) {
        self.recv_cqe_with(imm, byte_cnt, CqeOpcode::RespWrImm, |_| {});
    }

    fn scq_ci(&self) -> u32 {
        self.be32(self.scq.cq().dbrec)
    }
}

pub(super) fn connected<const SQ: usize>(
    r: &Rig,
) -> (Qp<'_, MemBar, SharedDma<Arc<HeapDma>>, NullControl, SQ, 16>, Hw) {
    let mut qp = r.dev.create_qp::<SQ, 16>(&QpConfig::default()).unwrap();
    qp.connect_loopback(QpNum(0x777)).unwrap();
    let hw = Hw::of(r, qp.qp_num());
    (qp, hw)
}

pub(super) fn poll_all<'r, Q: SendQueue<'r>>(q: &mut Q) -> Vec<Completion> {
    let mut v = Vec::new();
    let mut out = [Completion::default(); 3];
    loop {
        let n = q.poll(&mut out).unwrap();
        if n == 0 {
            return v;
        }
        v.extend_from_slice(&out[..n]);
    }
}

#[test]
fn single_posts_use_blueflame_and_alternate_halves_batches_ring_the_doorbell() {
    let r = rig(9);
    let region = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let (mut qp, hw) = connected::<64>(&r);
    let bf = qp.uar().bar_offset + 0x800;
    r.bar.take();

    qp.post_write(1, region.slice(0, 64).unwrap(), SendFlags::SIGNALED, REMOTE).unwrap();
    let s = r.bar.take();
    assert_eq!(s.len(), 1);
    assert_eq!((s[0].off, s[0].bytes.as_slice()), (bf, &hw.sq_block(0)[..]));
    assert_eq!(hw.qp_dbrec().1, 1);
    let ctrl = CtrlSeg::new_checked(&s[0].bytes[..]).unwrap();
    assert_eq!((ctrl.wqe_index(), ctrl.ds(), ctrl.qpn()), (0, 3, qp.qp_num()));

    qp.post_write(2, region.slice(64, 64).unwrap(), SendFlags::empty(), REMOTE).unwrap();
    let s = r.bar.take();
    assert_eq!((s.len(), s[0].off, s[0].bytes.len()), (1, bf + 256, 64));

    let mut b = qp.batch();
    b.post_writev(3, &[region.slice(0, 8).unwrap()], SendFlags::empty(), REMOTE).unwrap();
    b.post_writev(4, &[region.slice(8, 8).unwrap()], SendFlags::SIGNALED, REMOTE).unwrap();
    assert_eq!(b.commit(), 2);
    let s = r.bar.take();
    assert_eq!(s.len(), 1, "one doorbell per batch");
    assert_eq!((s[0].off, s[0].bytes.as_slice()), (bf, &hw.sq_block(3)[..8]));
    assert_eq!(hw.qp_dbrec().1, 4);
    assert_eq!(region.usage().in_flight(), 4);
}

#[test]
fn blueflame_copy_follows_a_wqe_across_the_ring_end() {
    let r = rig(9);
    let region = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let (mut qp, mut hw) = connected::<8>(&r);
    for i in 0..7 {
        let f = if i == 6 { SendFlags::SIGNALED } else { SendFlags::empty() };
        qp.post_write(i, region.slice(0, 8).unwrap(), f, REMOTE).unwrap();
    }
    hw.send_cqe(6, None);
    assert_eq!(poll_all(&mut qp).len(), 1);
    r.bar.take();
    // 200 inline bytes: ds = 2 + 13 = 15, four blocks at slots 7, 0, 1, 2; BlueFlame copies
    // 256 bytes (15 * 16 <= 256).
    let data: Vec<u8> = (0..200u8).collect();
    qp.post_write_inline(9, &[&data], SendFlags::SIGNALED, REMOTE).unwrap();
    assert_eq!(qp.sq_pi(), 11);
    let s = r.bar.take();
    // Seven doorbells so far: this one goes to the second half.
    let at = qp.uar().bar_offset + 0x800 + 256;
    assert_eq!(s.len(), 4);
    for (i, st) in s.iter().enumerate() {
        assert_eq!(st.off, at + 64 * i);
        assert_eq!(st.bytes.as_slice(), &hw.sq_block(7 + i as u32)[..], "chunk {i}");
    }
    assert_eq!(&s[0].bytes[36..64], &data[..28]);
    assert_eq!(&s[1].bytes[..64], &data[28..92]);
}

#[test]
fn a_one_block_burst_is_the_wqe_as_its_push_stored_it_not_the_slot_read_back() {
    let r = rig(9);
    let region = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let (mut qp, mut hw) = connected::<8>(&r);
    // Two 200-byte inline writes leave payload bytes in all eight slots.
    let data = [0xa5u8; 200];
    qp.post_write_inline(1, &[&data], SendFlags::empty(), REMOTE).unwrap();
    qp.post_write_inline(2, &[&data], SendFlags::SIGNALED, REMOTE).unwrap();
    hw.send_cqe(4, None);
    assert_eq!(poll_all(&mut qp).len(), 1);
    r.bar.take();
    let (buf, f) = (region.slice(0, 64).unwrap(), SendFlags::SIGNALED);
    for (k, ds) in [(0u16, 3usize), (1, 2), (2, 3)] {
        let pi = qp.sq_pi();
        match k {
            1 => qp.post_send(10 + k as u64, buf, f),
            _ => qp.post_write(10 + k as u64, buf, f, REMOTE),
        }
        .unwrap();
        let s = r.bar.take();
        let slot = hw.sq_block(pi as u32);
        assert_eq!(s.len(), 1);
        assert_eq!(CtrlSeg::new_checked(&s[0].bytes[..]).unwrap().ds(), ds as u8);
        // The WQE's own units are the ring's; past them the slot still holds the old
        // payload, which the burst does not carry.
        assert_eq!(&s[0].bytes[..ds * 16], &slot[..ds * 16], "post {k}");
        assert!(slot[ds * 16..].iter().all(|&b| b == 0xa5), "post {k}");
        assert!(s[0].bytes[ds * 16..].iter().all(|&b| b == 0), "post {k}");
    }
}

#[test]
fn without_blueflame_every_doorbell_is_one_8_byte_store_at_the_same_offset() {
    let r = rig(0);
    let region = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let (mut qp, hw) = connected::<64>(&r);
    let bf = qp.uar().bar_offset + 0x800;
    r.bar.take();
    for i in 0..3u16 {
        qp.post_write(i as u64, region.slice(0, 64).unwrap(), SendFlags::SIGNALED, REMOTE).unwrap();
        let s = r.bar.take();
        assert_eq!(s.len(), 1);
        assert_eq!((s[0].off, s[0].bytes.as_slice()), (bf, &hw.sq_block(i as u32)[..8]));
    }
}

#[test]
fn full_ring_refuses_with_enomem_and_changes_nothing() {
    let r = rig(9);
    let region = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let (mut qp, mut hw) = connected::<8>(&r);
    for i in 0..8 {
        let f = if i == 7 { SendFlags::SIGNALED } else { SendFlags::empty() };
        qp.post_write(i, region.slice(0, 8).unwrap(), f, REMOTE).unwrap();
    }
    r.bar.take();
    let e = qp.post_write(8, region.slice(0, 8).unwrap(), SendFlags::SIGNALED, REMOTE);
    assert_eq!(e, Err(Error::QueueFull { needed: 1, free: 0 }));
    assert_eq!(e.unwrap_err().errno(), Errno::ENOMEM);
    assert!(r.bar.take().is_empty(), "no doorbell for a refused post");
    assert_eq!((qp.sq_pi(), qp.outstanding(), region.usage().in_flight()), (8, 8, 8));
    assert_eq!(hw.qp_dbrec().1, 8);

    hw.send_cqe(7, None);
    let c = poll_all(&mut qp);
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].wr_id, c[0].status, c[0].opcode), (7, WcStatus::Success, WcOpcode::RdmaWrite));
    assert_eq!((qp.outstanding(), qp.sq_room(), region.usage().in_flight()), (0, 8, 0));
    assert_eq!(hw.scq_ci(), 1);
    qp.post_write(8, region.slice(0, 8).unwrap(), SendFlags::SIGNALED, REMOTE).unwrap();
}

#[test]
fn selective_signalling_retires_multi_block_wqes_and_their_regions() {
    let r = rig(9);
    let a = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let b = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let (mut qp, mut hw) = connected::<64>(&r);
    // a, b, a, b: four runs, ds = 6, two blocks each; WR k starts at counter 2k.
    let sgl = [
        a.slice(0, 16).unwrap(),
        b.slice(0, 16).unwrap(),
        a.slice(16, 16).unwrap(),
        b.slice(16, 16).unwrap(),
    ];
    for i in 0..6u64 {
        let f = if i == 2 || i == 5 { SendFlags::SIGNALED } else { SendFlags::empty() };
        qp.post_writev(i, &sgl, f, REMOTE).unwrap();
    }
    assert_eq!((a.usage().in_flight(), b.usage().in_flight()), (12, 12));
    assert_eq!(qp.sq_pi(), 12);
    hw.send_cqe(4, None);
    let c = poll_all(&mut qp);
    assert_eq!(c.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [2]);
    assert_eq!((a.usage().in_flight(), b.usage().in_flight(), qp.outstanding()), (6, 6, 3));
    hw.send_cqe(10, None);
    let c = poll_all(&mut qp);
    assert_eq!(c.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [5]);
    assert_eq!((a.usage().in_flight(), b.usage().in_flight(), qp.outstanding()), (0, 0, 0));
}

#[test]
fn error_then_flushes_report_every_outstanding_request_once() {
    let r = rig(9);
    let region = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let (mut qp, mut hw) = connected::<64>(&r);
    for i in 0..6 {
        let f = if i == 5 { SendFlags::SIGNALED } else { SendFlags::empty() };
        qp.post_write(i, region.slice(0, 8).unwrap(), f, REMOTE).unwrap();
    }
    // WR 1 fails at the responder; WR 0 had completed (unsignalled: silent).
    hw.send_cqe(1, Some((Syndrome::RemoteAccessErr, 0x88)));
    let mut out = [Completion::default(); 1];
    assert_eq!(qp.poll(&mut out).unwrap(), 1);
    assert_eq!((out[0].wr_id, out[0].status, out[0].vendor_err), (1, WcStatus::RemAccessErr, 0x88));
    assert_eq!(qp.state(), QpState::Error);
    assert_eq!(
        qp.post_write(9, region.slice(0, 8).unwrap(), SendFlags::SIGNALED, REMOTE),
        Err(Error::NotConnected)
    );
    // Flushes: one for WR 2, then one for WR 5 that covers 3 and 4 as well.
    hw.send_cqe(2, Some((Syndrome::WrFlushErr, 0)));
    hw.send_cqe(5, Some((Syndrome::WrFlushErr, 0)));
    let mut got = Vec::new();
    loop {
        // One slot at a time: a CQE that reports several requests resumes on the next poll.
        let n = qp.poll(&mut out).unwrap();
        if n == 0 {
            break;
        }
        got.push((out[0].wr_id, out[0].status));
    }
    let flushed = WcStatus::WrFlushErr;
    assert_eq!(got, [(2, flushed), (3, flushed), (4, flushed), (5, flushed)]);
    assert_eq!((qp.outstanding(), region.usage().in_flight()), (0, 0));
    assert!(poll_all(&mut qp).is_empty());
}

#[test]
fn first_flush_after_a_requested_error_keeps_executed_requests_silent() {
    let r = rig(9);
    let region = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let (mut qp, mut hw) = connected::<64>(&r);
    for i in 0..3 {
        qp.post_write(i, region.slice(0, 8).unwrap(), SendFlags::empty(), REMOTE).unwrap();
    }
    qp.to_error().unwrap();
    // WR 0 had executed; the device flushes 1 and 2.
    hw.send_cqe(1, Some((Syndrome::WrFlushErr, 0)));
    hw.send_cqe(2, Some((Syndrome::WrFlushErr, 0)));
    let c = poll_all(&mut qp);
    let ids: Vec<_> = c.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(ids, [(1, WcStatus::WrFlushErr), (2, WcStatus::WrFlushErr)]);
    assert_eq!((qp.outstanding(), region.usage().in_flight()), (0, 0));
}

#[test]
fn completions_for_requests_not_outstanding_are_refused() {
    let r = rig(9);
    let region = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let (mut qp, mut hw) = connected::<64>(&r);
    let sgl =
        [region.slice(0, 8).unwrap(), region.slice(8, 8).unwrap(), region.slice(16, 8).unwrap()];
    qp.post_writev(0, &sgl, SendFlags::SIGNALED, REMOTE).unwrap(); // 2 blocks
    hw.send_cqe(5, None);
    let e = poll_all_err(&mut qp);
    assert_eq!((e, e.errno()), (DeviceFault::NotOutstanding { counter: 5 }.into(), Errno::EIO));
    hw.send_cqe(1, None); // inside WR 0, not its first block
    assert_eq!(poll_all_err(&mut qp), DeviceFault::InsideWqe { counter: 1 }.into());
    // A completion for another QP.
    let mut b = [0u8; 64];
    Cqe::new_unchecked(&mut b[..]).set_s_wqe_opcode_qpn(SendOpcode::RdmaWrite, QpNum(0x4242));
    hw.send_cqe_raw(&b, CqeOpcode::Req);
    assert_eq!(poll_all_err(&mut qp), DeviceFault::WrongQp { qpn: QpNum(0x4242) }.into());
    // A responder opcode on the send CQ.
    let mut b = [0u8; 64];
    Cqe::new_unchecked(&mut b[..]).set_s_wqe_opcode_qpn(SendOpcode::RdmaWrite, hw.qpn());
    hw.send_cqe_raw(&b, CqeOpcode::RespSend);
    let e = poll_all_err(&mut qp);
    assert_eq!(e, DeviceFault::UnexpectedOpcode { opcode: CqeOpcode::RespSend.into() }.into());
    // The queue still counts right: the real completion retires the write.
    hw.send_cqe(0, None);
    assert_eq!(poll_all(&mut qp).len(), 1);
    assert_eq!((qp.outstanding(), region.usage().in_flight()), (0, 0));
}

fn poll_all_err<'r, Q: SendQueue<'r>>(q: &mut Q) -> Error {
    let mut out = [Completion::default(); 4];
    loop {
        match q.poll(&mut out) {
            Ok(0) => panic!("no error"),
            Ok(_) => {}
            Err(e) => return e,
        }
    }
}

#[test]
fn dropped_batch_and_failed_push_roll_back() {
    let r = rig(9);
    let a = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let gone = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let stale = gone.slice(0, 8).unwrap();
    gone.dereg().unwrap();
    let (mut qp, hw) = connected::<64>(&r);
    r.bar.take();
    {
        let mut b = qp.batch();
        for i in 0..3 {
            b.post_writev(i, &[a.slice(0, 8).unwrap()], SendFlags::SIGNALED, REMOTE).unwrap();
        }
        assert_eq!(a.usage().in_flight(), 3);
    }
    assert_eq!((qp.sq_pi(), a.usage().in_flight(), qp.outstanding()), (0, 0, 0));
    assert!(r.bar.take().is_empty());
    assert_eq!(hw.qp_dbrec().1, 0);

    let mut b = qp.batch();
    b.post_writev(0, &[a.slice(0, 8).unwrap()], SendFlags::SIGNALED, REMOTE).unwrap();
    let e = b.post_writev(1, &[a.slice(0, 8).unwrap(), stale], SendFlags::SIGNALED, REMOTE);
    assert_eq!(e, Err(Error::BadLkey));
    assert_eq!(a.usage().in_flight(), 1, "the refused request released what it took");
    assert_eq!(b.commit(), 1);
    assert_eq!((qp.sq_pi(), qp.outstanding()), (1, 1));
    assert_eq!(hw.qp_dbrec().1, 1);
}

#[test]
fn dereg_is_refused_while_requests_use_the_region() {
    let r = rig(9);
    let region = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let (mut qp, mut hw) = connected::<64>(&r);
    qp.post_write(1, region.slice(0, 8).unwrap(), SendFlags::SIGNALED, REMOTE).unwrap();
    let e = region.dereg().unwrap_err();
    assert_eq!((e, e.errno()), (Error::RegionBusy { in_flight: 1 }, Errno::EBUSY));
    assert!(region.is_registered());
    hw.send_cqe(0, None);
    assert_eq!(poll_all(&mut qp).len(), 1);
    region.dereg().unwrap();
    assert_eq!(r.log().destroyed_mkeys, [region.mkey()]);
    assert_eq!(region.slice(0, 8).unwrap_err(), Error::BadLkey);
    region.dereg().unwrap();
    assert_eq!(r.log().destroyed_mkeys.len(), 1, "second dereg is a no-op");
}

#[test]
fn posting_needs_rts_and_connect_walks_the_transitions() {
    let r = rig(9);
    let region = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let mut qp = r.dev.create_qp::<64, 16>(&QpConfig::default()).unwrap();
    let buf = region.slice(0, 8).unwrap();
    assert_eq!(qp.post_write(1, buf, SendFlags::SIGNALED, REMOTE), Err(Error::NotConnected));
    assert_eq!(qp.post_recv_empty(1), Err(Error::NotConnected));
    qp.connect_loopback(QpNum(0x55)).unwrap();
    assert_eq!(qp.state(), QpState::Rts);
    let t: Vec<_> = r.log().transitions.iter().map(|(_, t)| *t).collect();
    assert!(matches!(t[0], Transition::RstToInit { port: 1, .. }));
    assert!(matches!(
        t[1],
        Transition::InitToRtr { remote_qpn: QpNum(0x55), path: Path::Loopback, .. }
    ));
    assert!(matches!(t[2], Transition::RtrToRts { .. }));
    assert!(qp.connect_loopback(QpNum(0x55)).is_err());
    qp.post_write(1, buf, SendFlags::SIGNALED, REMOTE).unwrap();
}

#[test]
fn caps_follow_the_device_and_are_enforced() {
    let r = rig(9);
    let region = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let (mut qp, _hw) = connected::<64>(&r);
    // max_wqe_sz_sq = 1024: 64 units, capped at the 6-bit ds (63): 61 SGEs, 61*16-4 inline.
    let caps = qp.caps();
    assert_eq!((caps.max_send_wr, caps.max_sge, caps.max_inline), (64, 61, 972));
    let bufs: Vec<_> = (0..62).map(|i| region.slice(i * 16, 16).unwrap()).collect();
    assert_eq!(
        qp.post_writev(1, &bufs, SendFlags::SIGNALED, REMOTE),
        Err(Error::TooManySges { given: 62, max: 61 })
    );
    qp.post_writev(1, &bufs[..61], SendFlags::SIGNALED, REMOTE).unwrap();
    assert_eq!(qp.sq_pi(), 16, "ds 63 takes 16 blocks");
    let big = [0u8; 973];
    assert_eq!(
        qp.post_write_inline(2, &[&big], SendFlags::empty(), REMOTE),
        Err(Error::InlineTooLarge { len: 973, max: 972 })
    );
    let small = r
        .dev
        .create_qp::<4, 16>(&QpConfig { max_send_sge: Some(2), ..QpConfig::default() })
        .unwrap();
    assert_eq!(small.caps().max_sge, 2);
    assert_eq!(small.caps().max_inline, 4 * 64 - 36);
}

#[test]
fn write_with_immediate_target_reaps_the_immediate() {
    let r = rig(9);
    let mut qp = r.dev.create_qp::<64, 16>(&QpConfig::default()).unwrap();
    let mut hw = Hw::of(&r, qp.qp_num());
    qp.init(&ConnectOpts::default()).unwrap();
    qp.post_recv_empty(77).unwrap();
    qp.post_recv_empty(78).unwrap();
    assert_eq!(hw.qp_dbrec().0, 2);
    let mut wqe = [0u8; 16];
    assert!(r.dma.read(hw.qp.buf, &mut wqe));
    assert_eq!(wqe, [0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    qp.connect_loopback(QpNum(0x55)).unwrap();
    hw.recv_cqe(0xdead_beef, 64);
    let mut out = [Completion::default(); 4];
    assert_eq!(qp.poll_recv(&mut out).unwrap(), 1);
    let c = out[0];
    assert_eq!((c.wr_id, c.status, c.opcode), (77, WcStatus::Success, WcOpcode::RecvRdmaWithImm));
    assert_eq!((c.imm, c.byte_len, c.qp_num), (Some(0xdead_beef), 64, qp.qp_num()));
    assert_eq!(qp.rq_outstanding(), 1);
    for i in 0..15 {
        qp.post_recv_empty(100 + i).unwrap();
    }
    assert_eq!(qp.post_recv_empty(200), Err(Error::QueueFull { needed: 1, free: 0 }));
}

#[test]
fn drop_tears_down_and_leaves_regions_and_memory_consistent() {
    // The control is lent, so what it recorded outlives the device.
    let mut ctl = NullControl::with_bf(9);
    let r = rig_over(&mut ctl);
    {
        let region = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
        {
            let mut qp = r.dev.create_qp::<64, 16>(&QpConfig::default()).unwrap();
            qp.connect_loopback(QpNum(0x777)).unwrap();
            for i in 0..3 {
                qp.post_write(i, region.slice(0, 8).unwrap(), SendFlags::empty(), REMOTE).unwrap();
            }
            let mut b = qp.batch();
            b.post_writev(9, &[region.slice(0, 8).unwrap()], SendFlags::empty(), REMOTE).unwrap();
            drop(b);
            assert_eq!(region.usage().in_flight(), 3);
        }
        assert_eq!(region.usage().in_flight(), 0);
        let log = r.log();
        let t: Vec<_> = log.transitions.iter().map(|(_, t)| *t).collect();
        assert_eq!(t[3..], [Transition::ToErr, Transition::ToRst]);
        assert_eq!((log.destroyed_qps.len(), log.destroyed_cqs.len()), (1, 2));
    }
    assert_eq!(r.log().destroyed_mkeys.len(), 1);
    let dma = r.dma.clone();
    drop(r);
    assert_eq!(dma.live_blocks(), 0);
    assert_eq!((ctl.live_uars, ctl.live_pds), (0, 0));
}

#[test]
fn regions_register_in_mtt_or_physical_mode_and_copy_bytes() {
    let r = rig(9);
    let m = r.dev.reg(10_000, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
    let p = r.dev.reg_physical(100, Access::LOCAL_WRITE).unwrap();
    let log = r.log();
    let (km, pm) = log.mkeys[0];
    assert_eq!(km, m.mkey());
    assert_eq!((pm.start, pm.len, pm.pd), (m.addr(), 10_000, r.dev.pd()));
    assert!(matches!(pm.translation, Translation::Mtt { page_shift: 12, .. }));
    let Translation::Mtt { base, .. } = pm.translation else { unreachable!() };
    let (_, pp) = log.mkeys[1];
    assert_eq!(pp.translation, Translation::Physical);
    assert_eq!(pp.start, p.addr());
    drop(log);

    let data: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
    m.fill(0xee);
    m.write(13, &data).unwrap();
    let mut back = std::vec![0u8; 302];
    m.read(12, &mut back).unwrap();
    assert_eq!((back[0], back[301]), (0xee, 0xee));
    assert_eq!(&back[1..301], &data[..]);
    let mut via_bus = [0u8; 300];
    assert!(r.dma.read(base.add(13), &mut via_bus));
    assert_eq!(&via_bus[..], &data[..]);
    assert_eq!(m.write(9_990, &data), Err(Error::OutOfBounds));
    let s = m.slice(100, 50).unwrap();
    assert_eq!((s.sge().addr, s.sge().length, s.sge().lkey), (m.addr() + 100, 50, m.lkey()));
    assert_eq!(m.slice(9_999, 2).unwrap_err(), Error::OutOfBounds);
    assert_eq!(m.remote(8), RemoteBuf::new(m.addr() + 8, m.rkey()));
}

#[test]
fn a_leaked_batch_leaks_its_region_counts_and_leaves_the_queue_usable() {
    let r = rig(9);
    let region = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    {
        let (mut qp, _hw) = connected::<64>(&r);
        let mut b = qp.batch();
        b.post_writev(1, &[region.slice(0, 8).unwrap()], SendFlags::empty(), REMOTE).unwrap();
        core::mem::forget(b);
        // Never posted: the ring did not move, and the next post takes its place.
        assert_eq!((qp.sq_pi(), qp.outstanding()), (0, 0));
        qp.post_write(2, region.slice(0, 8).unwrap(), SendFlags::SIGNALED, REMOTE).unwrap();
        assert_eq!((qp.sq_pi(), qp.outstanding()), (1, 1));
        assert_eq!(region.usage().in_flight(), 2);
    }
    // The QP released what it posted; the leaked request's count stays, so the region can
    // never be deregistered (and its memory is leaked rather than freed under the device).
    assert_eq!(region.usage().in_flight(), 1);
    assert_eq!(region.dereg(), Err(Error::RegionBusy { in_flight: 1 }));
}

#[test]
fn a_gather_refused_at_its_third_region_releases_the_first_two() {
    let r = rig(9);
    let a = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let b = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let gone = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let stale = gone.slice(0, 8).unwrap();
    gone.dereg().unwrap();
    let (mut qp, _hw) = connected::<64>(&r);
    let (sa, sb) = (a.slice(0, 8).unwrap(), b.slice(0, 8).unwrap());
    // An empty element is not in the WQE and holds nothing: the two pieces of `a` around it
    // are one run, counted once.
    let empty = b.slice(8, 0).unwrap();
    qp.post_writev(1, &[sa, empty, sa, sb], SendFlags::SIGNALED, REMOTE).unwrap();
    assert_eq!((a.usage().in_flight(), b.usage().in_flight()), (1, 1));
    assert_eq!(qp.sq_pi(), 2, "ds = 2 + 3 data segments: two blocks");
    let e = qp.post_writev(2, &[sa, sb, stale, sa], SendFlags::SIGNALED, REMOTE);
    assert_eq!(e, Err(Error::BadLkey));
    assert_eq!((a.usage().in_flight(), b.usage().in_flight()), (1, 1));
    assert_eq!((qp.sq_pi(), qp.outstanding()), (2, 1));
}

#[test]
fn the_blueflame_policy_follows_prefer_bf_and_shut_up_bf() {
    use crate::datapath::doorbell::BlueFlame;
    let r = rig(9);
    let region = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    for (policy, plain_bf, inline_bf) in [
        (BlueFlame::Prefer, true, true),
        (BlueFlame::InlineOnly, false, true),
        (BlueFlame::Off, false, false),
    ] {
        let mut qp = r
            .dev
            .create_qp::<64, 16>(&QpConfig { blueflame: policy, ..QpConfig::default() })
            .unwrap();
        qp.connect_loopback(QpNum(0x777)).unwrap();
        r.bar.take();
        qp.post_write(1, region.slice(0, 8).unwrap(), SendFlags::SIGNALED, REMOTE).unwrap();
        let s = r.bar.take();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].bytes.len(), if plain_bf { 64 } else { 8 }, "{policy:?}, registered");
        qp.post_write_inline(2, &[b"sixteen bytes..."], SendFlags::SIGNALED, REMOTE).unwrap();
        let s = r.bar.take();
        assert_eq!(s[0].bytes.len(), if inline_bf { 64 } else { 8 }, "{policy:?}, inline");
    }
}

#[test]
fn reset_after_an_error_restarts_the_rings_and_the_qp_connects_again() {
    let r = rig(9);
    let region = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let (mut qp, mut hw) = connected::<64>(&r);
    for i in 0..3 {
        let f = if i == 2 { SendFlags::SIGNALED } else { SendFlags::empty() };
        qp.post_write(i, region.slice(0, 8).unwrap(), f, REMOTE).unwrap();
    }
    qp.post_recv_empty(50).unwrap();
    hw.send_cqe(0, Some((Syndrome::RemoteAccessErr, 0)));
    let mut out = [Completion::default(); 1];
    assert_eq!(qp.poll(&mut out).unwrap(), 1);
    // WRs 1 and 2 and the receive are still owed their flushes.
    let busy = Err(Error::InvalidArgument("a poll still owes completions: reap them first"));
    assert_eq!(qp.reset(), busy);
    hw.send_cqe(2, Some((Syndrome::WrFlushErr, 0)));
    assert_eq!(poll_all(&mut qp).len(), 2);
    assert_eq!(qp.reset(), busy, "the receive is still owed");
    hw.recv_cqe_with(0, 0, CqeOpcode::RespErr, |c| c.set_error(Syndrome::WrFlushErr, 0));
    let mut rout = [Completion::default(); 2];
    assert_eq!(qp.poll_recv(&mut rout).unwrap(), 1);
    assert_eq!(qp.state(), QpState::Error);
    let (posted, recv_posted) = (qp.posted(), qp.recv_posted());

    qp.reset().unwrap();
    assert_eq!(qp.state(), QpState::Reset);
    assert_eq!(*r.log().transitions.last().map(|(_, t)| t).unwrap(), Transition::ToRst);
    assert_eq!((qp.sq_pi(), qp.sq_room(), hw.qp_dbrec()), (0, 64, (0, 0)));
    assert_eq!((qp.posted(), qp.retired(Side::Send)), (posted, posted));
    assert_eq!((qp.recv_posted(), qp.retired(Side::Recv)), (recv_posted, recv_posted));
    assert_eq!(qp.reset(), Ok(()), "a QP in RESET stays there");

    // Connected again, the ring starts at block 0 and completions name counters from 0.
    qp.connect_loopback(QpNum(0x777)).unwrap();
    qp.post_write(7, region.slice(0, 8).unwrap(), SendFlags::SIGNALED, REMOTE).unwrap();
    assert_eq!(CtrlSeg::new_checked(&hw.sq_block(0)[..]).unwrap().wqe_index(), 0);
    assert_eq!(hw.qp_dbrec().1, 1);
    hw.send_cqe(0, None);
    assert_eq!(qp.poll(&mut out).unwrap(), 1);
    assert_eq!((out[0].wr_id, out[0].status), (7, WcStatus::Success));
    assert_eq!((qp.outstanding(), region.usage().in_flight()), (0, 0));
    assert_eq!(qp.retired(Side::Send), posted + 1);
}

#[test]
fn reset_retires_unsignalled_sends_silently_and_discards_their_stray_entries() {
    let r = rig(9);
    let region = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let (mut qp, mut hw) = connected::<64>(&r);
    qp.post_write(1, region.slice(0, 8).unwrap(), SendFlags::SIGNALED, REMOTE).unwrap();
    assert!(qp.reset().is_err(), "a signalled request is owed its completion");
    assert_eq!(qp.state(), QpState::Rts);
    hw.send_cqe(0, None);
    assert_eq!(poll_all(&mut qp).len(), 1);
    for i in 0..4 {
        qp.post_write(i, region.slice(0, 8).unwrap(), SendFlags::empty(), REMOTE).unwrap();
    }
    qp.to_error().unwrap();
    // A flush the device wrote before the reset: the reset cleans it from the CQ.
    hw.send_cqe(3, Some((Syndrome::WrFlushErr, 0)));
    assert_eq!(region.usage().in_flight(), 4);
    qp.reset().unwrap();
    assert_eq!((qp.outstanding(), region.usage().in_flight()), (0, 0));
    assert_eq!(qp.retired(Side::Send), 5);
    assert_eq!(hw.scq_ci(), 2, "both entries consumed");
    qp.connect_loopback(QpNum(0x777)).unwrap();
    assert!(poll_all(&mut qp).is_empty());
}

/// Everything a script of posts leaves behind: the ring's blocks, the doorbell record, the
/// BAR stores, the counters, each post's result, the regions' counts and the completions.
#[derive(Debug, PartialEq)]
struct Trace {
    blocks: Vec<[u8; 64]>,
    dbrec: (u32, u32),
    stores: Vec<(usize, Vec<u8>)>,
    results: Vec<Result<()>>,
    counts: (u16, u32, u32, u32),
    done: Vec<(u64, WcStatus, WcOpcode)>,
}

/// Post `req` on its own or as a batch of one. Out of line: one copy of the posting paths
/// for the script, not one per request.
#[inline(never)]
fn post_as<'r, Q: SendQueue<'r>>(
    qp: &mut Q,
    single: bool,
    req: &SendRequest<'_, 'r>,
) -> Result<()> {
    if single {
        return qp.post(req);
    }
    let mut batch = qp.batch();
    let res = batch.post(req);
    batch.commit();
    res
}

/// Run one script of requests, each posted on its own (`Post::post`, the queue's
/// `post_one`) or as a batch of one (`begin`, `push`, `commit` through [`Batch`]).
fn post_script(single: bool) -> Trace {
    let r = rig(9);
    let a = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let b = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let gone = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let stale = gone.slice(0, 8).unwrap();
    let gone_at = stale.sge().addr;
    gone.dereg().unwrap();
    let (mut qp, mut hw) = connected::<16>(&r);
    r.bar.take();
    let (sa, sb) = (a.slice(0, 8).unwrap(), b.slice(16, 24).unwrap());
    let big = [7u8; 4096];
    let some: Vec<u8> = (0..37).collect();
    let mut results = Vec::new();
    let mut starts = Vec::new();
    let mut stores = Vec::new();
    let f = SendFlags::SIGNALED;
    let write = |wr_id, source| SendRequest::write(wr_id, source, f, REMOTE, None);
    let inline =
        |wr_id, source| SendRequest::write(wr_id, source, f | SendFlags::INLINE, REMOTE, None);
    let send = |wr_id, sgl| SendRequest {
        wr_id,
        flags: f,
        op: SendOp::Send { source: Source::sgl(sgl), imm: None, ud: None },
    };
    let (some, tail): (&[u8], &[u8]) = (&some, b"tail");
    let (pieces, bigs, x) = ([some, tail], [&big[..]], [&b"x"[..]]);
    let (g1, g2, g3, g4, g5) = ([sa], [sa, sb, sa], [sa, stale], [sb], [sa, sb, stale, sa]);
    let script = [
        write(1, Source::sgl(&g1)),
        write(2, Source::sgl(&g2)),
        inline(3, Source::inline(&pieces)),
        write(4, Source::sgl(&g3)),
        send(5, &g4),
        inline(6, Source::inline(&bigs)),
        write(7, Source::sgl(&g5)),
        inline(8, Source::inline(&x)),
    ];
    for req in &script {
        let pi = qp.sq_pi();
        let res = post_as(&mut qp, single, req);
        if res.is_ok() {
            starts.push(pi);
        }
        let mut burst: Vec<_> = r.bar.take().into_iter().map(|s| (s.off, s.bytes)).collect();
        // The HCA reads only the WQE's `ds` units of a BlueFlame copy: past them a single
        // post's one-block burst carries zeros, a batch's the slot's old bytes.
        if let Some((_, first)) = burst.first_mut() {
            let units = (first[7] & 0x3f) as usize * 16;
            first.iter_mut().skip(units).for_each(|b| *b = 0);
        }
        stores.extend(burst);
        results.push(res);
    }
    // The regions' addresses differ from rig to rig: name them by region and offset.
    // (A refused request's bytes stay in the free blocks it was written to, the deregistered
    // region's address among them.)
    let bases = [a.slice(0, 1).unwrap().sge().addr, b.slice(0, 1).unwrap().sge().addr, gone_at];
    let unbase = |bytes: &mut [u8]| {
        for w in bytes.chunks_exact_mut(8) {
            let v = u64::from_be_bytes(w.try_into().unwrap());
            for (k, &base) in bases.iter().enumerate() {
                if (base..base + 4096).contains(&v) {
                    w.copy_from_slice(&((k as u64 + 1) << 48 | (v - base)).to_be_bytes());
                }
            }
        }
    };
    let mut blocks: Vec<[u8; 64]> = (0..16).map(|i| hw.sq_block(i)).collect();
    blocks.iter_mut().for_each(|b| unbase(b));
    stores.iter_mut().for_each(|(_, b)| unbase(b));
    let dbrec = hw.qp_dbrec();
    let counts = (qp.sq_pi(), qp.outstanding(), a.usage().in_flight(), b.usage().in_flight());
    for &pi in &starts {
        hw.send_cqe(pi, None);
    }
    let done = poll_all(&mut qp).iter().map(|c| (c.wr_id, c.status, c.opcode)).collect();
    assert_eq!((a.usage().in_flight(), b.usage().in_flight()), (0, 0));
    Trace { blocks, dbrec, stores, results, counts, done }
}

#[test]
fn a_single_post_leaves_the_queue_as_a_batch_of_one_would() {
    let one = post_script(true);
    assert_eq!(one, post_script(false));
    assert_eq!(one.results.iter().filter(|r| r.is_ok()).count(), 5);
    assert_eq!(one.done.len(), 5);
    // BlueFlame copies, one store per block: 1, 2 (ds 5), 2 (41 inline bytes: ds 5), 1, 1.
    assert_eq!(one.stores.len(), 7);
}

#[test]
fn a_duplicated_receive_cqe_is_a_wrong_receive_fault_and_retires_nothing() {
    let r = rig(9);
    let (mut qp, mut hw) = connected::<64>(&r);
    qp.post_recv_empty(77).unwrap();
    qp.post_recv_empty(78).unwrap();
    // The device completes receive 0, then writes the same CQE again.
    hw.recv_cqe_with(1, 8, CqeOpcode::RespWrImm, |c| c.set_wqe_counter(0));
    hw.recv_cqe_with(1, 8, CqeOpcode::RespWrImm, |c| c.set_wqe_counter(0));
    let mut out = [Completion::default(); 4];
    assert_eq!(qp.poll_recv(&mut out).unwrap(), 1);
    assert_eq!(out[0].wr_id, 77);
    let e = qp.poll_recv(&mut out).unwrap_err();
    assert_eq!(
        (e, e.errno()),
        (DeviceFault::WrongReceive { counter: 0, expected: 1 }.into(), Errno::EIO)
    );
    // Receive 78 is still the device's; its own completion retires it.
    assert_eq!(qp.rq_outstanding(), 1);
    hw.recv_cqe_with(2, 8, CqeOpcode::RespWrImm, |c| c.set_wqe_counter(1));
    assert_eq!(qp.poll_recv(&mut out).unwrap(), 1);
    assert_eq!((out[0].wr_id, out[0].imm), (78, Some(2)));
    assert_eq!(qp.rq_outstanding(), 0);
}

#[test]
fn a_receive_cqe_is_matched_to_its_wqe_modulo_the_ring() {
    let r = rig(9);
    let (mut qp, mut hw) = connected::<64>(&r);
    let mut out = [Completion::default(); 4];
    // Around the 16-entry ring more than once; each CQE names its receive by the slot only
    // (as the kernel's `mlx5_wq_cyc_ctr2ix` reads it) or by the whole counter.
    for i in 0..40u16 {
        qp.post_recv_empty(i as u64).unwrap();
        let counter = if i % 2 == 0 { i & 15 } else { i };
        hw.recv_cqe_with(0, 0, CqeOpcode::RespSend, |c| c.set_wqe_counter(counter));
        assert_eq!(qp.poll_recv(&mut out).unwrap(), 1, "receive {i}");
        assert_eq!(out[0].wr_id, i as u64);
    }
    // A CQE that skips a receive names the wrong one.
    qp.post_recv_empty(100).unwrap();
    qp.post_recv_empty(101).unwrap();
    hw.recv_cqe_with(0, 0, CqeOpcode::RespSend, |c| c.set_wqe_counter(41));
    let e = qp.poll_recv(&mut out).unwrap_err();
    assert_eq!(e, DeviceFault::WrongReceive { counter: 41, expected: 40 }.into());
    assert_eq!(qp.rq_outstanding(), 2);
}

/// The hostile device and caller (a reference model run over seeds).
mod hostile;
/// The hostile caller's model driven by proptest.
mod prop;
/// Retirement order and release of regions under errors and flushes.
mod retire;
/// What the safe posting API guarantees about buffers under the device.
mod safety;
