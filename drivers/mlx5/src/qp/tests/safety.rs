//! Regression tests of the safety review (one per finding it made against the data path): a
//! caller that leaks batches or misuses cursors, and a device that writes what it should only
//! read or completes what was never posted. Each failed, hung or was accepted before its fix.

use rdma_pmd::RecvQueue;
use rdma_pmd::{
    DeviceFault, Error, Post, QpNum, RemoteBuf, Rkey, SendFlags, SendQueue, Sge, WcStatus,
};

use super::{connected, poll_all, rig, REMOTE};
use crate::control::Access;
use crate::layout::codes::CqeOpcode;

/// Finding 1: a batch leaked after pushing a two-region gather left that slot's "further
/// references" count behind; a later WQE in the slot inherited it, and the reference queue's
/// tail ran one entry ahead, so completing W1 released a region W2 still reads.
#[test]
fn a_forgotten_gather_batch_does_not_shift_later_accounting() {
    let r = rig(9);
    let regs: [_; 7] = core::array::from_fn(|_| r.dev.reg(4096, Access::LOCAL_WRITE).unwrap());
    let [a, b, c, d, e, f, g] = &regs;
    let s: [_; 7] = core::array::from_fn(|i| regs[i].slice(0, 8).unwrap());
    let [sa, sb, sc, sd, se, sf, sg] = s;
    let (mut qp, mut hw) = connected::<16>(&r);

    let mut batch = qp.batch();
    batch.post_writev(1, &[sa, sb], SendFlags::SIGNALED, REMOTE).unwrap();
    core::mem::forget(batch);

    qp.post_write(2, sc, SendFlags::SIGNALED, REMOTE).unwrap();
    hw.send_cqe(0, None);
    assert_eq!(poll_all(&mut qp).len(), 1);
    assert_eq!(c.usage().in_flight(), 0);

    // W1 (d, e) at counter 1, W2 (f, g) at counter 2: one block each.
    qp.post_writev(3, &[sd, se], SendFlags::SIGNALED, REMOTE).unwrap();
    qp.post_writev(4, &[sf, sg], SendFlags::SIGNALED, REMOTE).unwrap();
    hw.send_cqe(1, None);
    let done = poll_all(&mut qp);
    assert_eq!(done.iter().map(|c| c.wr_id).collect::<std::vec::Vec<_>>(), [3]);
    assert_eq!((d.usage().in_flight(), e.usage().in_flight()), (0, 0));
    assert_eq!((f.usage().in_flight(), g.usage().in_flight()), (1, 1), "W2 still reads f, g");
    assert_eq!(g.dereg(), Err(Error::RegionBusy { in_flight: 1 }));

    hw.send_cqe(2, None);
    assert_eq!(poll_all(&mut qp).len(), 1);
    assert_eq!((f.usage().in_flight(), g.usage().in_flight()), (0, 0));
    drop(qp);
    // The leaked batch's own regions stay counted (a leak); nothing else moved.
    assert_eq!((a.usage().in_flight(), b.usage().in_flight()), (1, 1));
    for x in [c, d, e, f, g] {
        assert_eq!(x.usage().in_flight(), 0);
    }
}

/// Finding 1, at the teardown: the shifted queue made `Drop` walk 2^32 - 1 entries (or trip a
/// debug assertion). Many leaked gathers, interleaved with posts, end with every count right.
#[test]
fn leaked_gathers_interleaved_with_posts_leave_a_consistent_teardown() {
    let r = rig(9);
    let (x, y, z) = (
        r.dev.reg(4096, Access::LOCAL_WRITE).unwrap(),
        r.dev.reg(4096, Access::LOCAL_WRITE).unwrap(),
        r.dev.reg(4096, Access::LOCAL_WRITE).unwrap(),
    );
    let (sx, sy, sz) = (x.slice(0, 8).unwrap(), y.slice(0, 8).unwrap(), z.slice(0, 8).unwrap());
    {
        let (mut qp, mut hw) = connected::<16>(&r);
        for i in 0..40u64 {
            let mut b = qp.batch();
            b.post_writev(i, &[sx, sy, sz], SendFlags::empty(), REMOTE).unwrap();
            core::mem::forget(b);
            // Single-region writes take the straight-line path, which once left a stale
            // count of further references in the slot.
            if i % 2 == 0 {
                qp.post_write(100 + i, sx, SendFlags::SIGNALED, REMOTE).unwrap();
            } else {
                qp.post_writev(100 + i, &[sz, sx], SendFlags::SIGNALED, REMOTE).unwrap();
            }
            hw.send_cqe(qp.sq_pi().wrapping_sub(1), None);
            assert_eq!(poll_all(&mut qp).len(), 1);
        }
        qp.post_writev(999, &[sy, sz, sx], SendFlags::empty(), REMOTE).unwrap();
    }
    // 40 leaked batches each hold x, y and z once; the QP released the rest at its drop.
    assert_eq!((x.usage().in_flight(), y.usage().in_flight(), z.usage().in_flight()), (40, 40, 40));
}

/// Finding 5: the cursor primitives are `unsafe`; used wrongly anyway (a stale cursor aborted,
/// a cursor committed twice, one from a bigger queue), the ring stays bounded and consistent.
#[test]
fn misused_cursors_neither_hang_nor_overcount() {
    let r = rig(9);
    let a = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let (mut small, mut hw) = connected::<16>(&r);
    let (mut big, _) = connected::<64>(&r);
    let inline = [0u8; 100];
    // SAFETY: these calls break the primitives' contract on purpose; the queue
    // promises to stay memory-safe, bounded and consistent regardless.
    unsafe {
        let mut c = small.begin();
        small
            .push(
                &mut c,
                &rdma_pmd::SendRequest::write(
                    1,
                    rdma_pmd::Source::inline(&[&inline]),
                    SendFlags::INLINE | SendFlags::SIGNALED,
                    REMOTE,
                    None,
                ),
            )
            .unwrap();
        small.commit(c);
        small.commit(c);
        assert_eq!(small.outstanding(), 1, "a second commit of one cursor is dropped");
        // Abort a stale cursor that claims blocks never written at all.
        small.abort(c);
        assert_eq!(small.outstanding(), 1);

        // A cursor of a 64-block queue claims more room than the small one has.
        let mut foreign = big.begin();
        for i in 0..20 {
            let _ = small.push(
                &mut foreign,
                &rdma_pmd::SendRequest::write(
                    10 + i,
                    rdma_pmd::Source::sgl(&[a.slice(0, 8).unwrap()]),
                    SendFlags::empty(),
                    REMOTE,
                    None,
                ),
            );
        }
        small.commit(foreign);
        assert!(small.outstanding() <= 16, "outstanding {}", small.outstanding());
        assert!(small.sq_room() <= 16);
    }
    // The foreign pushes overwrote slots of the outstanding WQE, so what its CQE reports is
    // unspecified; it still retires, without a panic, a hang or a count gone wrong.
    hw.send_cqe(0, None);
    assert!(poll_all(&mut small).len() <= 1);
    assert_eq!(small.outstanding(), 0);
    drop(small);
    assert!(a.usage().in_flight() <= 20);
}

/// Finding 6: retirement read each WQE's size and signalled bit back from the send ring, which
/// the device can write: `ds = 0` hung `poll`, a cleared CQ_UPDATE lost a signalled write.
#[test]
fn a_device_rewriting_posted_wqes_changes_no_retirement() {
    let r = rig(9);
    let a = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let (mut qp, mut hw) = connected::<16>(&r);
    qp.post_write(1, a.slice(0, 8).unwrap(), SendFlags::empty(), REMOTE).unwrap();
    qp.post_write(2, a.slice(0, 8).unwrap(), SendFlags::SIGNALED, REMOTE).unwrap();
    qp.post_writev(
        3,
        &[a.slice(0, 8).unwrap(), a.slice(8, 8).unwrap()],
        SendFlags::SIGNALED,
        REMOTE,
    )
    .unwrap();
    // The device zeroes every control segment: ds = 0, no CQ_UPDATE.
    for counter in 0..3 {
        hw.scribble_sq(counter, 0, &[0; 16]);
    }
    hw.send_cqe(2, None);
    let done = poll_all(&mut qp);
    assert_eq!(done.iter().map(|c| c.wr_id).collect::<std::vec::Vec<_>>(), [2, 3]);
    assert_eq!((a.usage().in_flight(), qp.outstanding()), (0, 0));
}

/// Finding 9: the mlx5 push accepted a message above 2^31 bytes and a remote range wrapping
/// 2^64 (rdma_rxe refuses the first with EINVAL).
#[test]
fn impossible_messages_are_refused_before_the_ring_moves() {
    let r = rig(9);
    let a = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let (mut qp, _hw) = connected::<16>(&r);
    let huge = Sge::new(a.addr(), (1 << 31) + 1, a.lkey());
    // SAFETY: refused before anything is written; the device never sees the element.
    let e = unsafe { qp.post_writev_raw(1, &[huge], SendFlags::SIGNALED, REMOTE, None) };
    assert_eq!(e, Err(Error::InvalidArgument("message above 2 GiB")));
    let top = RemoteBuf::new(u64::MAX - 4, Rkey(1));
    let e = qp.post_write(2, a.slice(0, 8).unwrap(), SendFlags::SIGNALED, top);
    assert_eq!(e.map_err(|e| e.errno()), Err(rdma_pmd::Errno::EINVAL));
    let e = qp.post_writev(
        3,
        &[a.slice(0, 8).unwrap(), a.slice(8, 8).unwrap()],
        SendFlags::empty(),
        top,
    );
    assert_eq!(e, Err(Error::InvalidArgument("remote range wraps past 2^64")));
    let e = qp.post_write_inline(4, &[b"0123456789"], SendFlags::empty(), top);
    assert_eq!(e, Err(Error::InvalidArgument("remote range wraps past 2^64")));
    // The highest range there is still goes.
    qp.post_write(5, a.slice(0, 5).unwrap(), SendFlags::SIGNALED, top).unwrap();
    assert_eq!((qp.sq_pi(), qp.outstanding(), a.usage().in_flight()), (1, 1, 1));
}

/// Finding 10: a bogus receive CQE advanced the receive ring before it was checked, so every
/// later `wr_id` was shifted by one and a receive was lost.
#[test]
fn bogus_receive_cqes_consume_no_receive() {
    let r = rig(9);
    let (mut qp, mut hw) = connected::<16>(&r);
    qp.post_recv_empty(70).unwrap();
    qp.post_recv_empty(71).unwrap();
    let mut out = [rdma_pmd::Completion::default(); 4];
    // Another QP's completion, then a requester opcode on the receive CQ.
    hw.recv_cqe_with(1, 8, CqeOpcode::RespWrImm, |c| {
        c.set_s_wqe_opcode_qpn(crate::layout::codes::SendOpcode::Nop, QpNum(0x4242))
    });
    assert_eq!(qp.poll_recv(&mut out), Err(DeviceFault::WrongQp { qpn: QpNum(0x4242) }.into()));
    hw.recv_cqe_with(1, 8, CqeOpcode::Req, |_| {});
    let e = qp.poll_recv(&mut out);
    assert_eq!(e, Err(DeviceFault::UnexpectedOpcode { opcode: CqeOpcode::Req.into() }.into()));
    assert_eq!(qp.rq_outstanding(), 2);
    // The first good CQE names receive 0 (the fake numbers CQEs by how many it wrote).
    hw.recv_cqe_with(0xabcd, 16, CqeOpcode::RespWrImm, |c| c.set_wqe_counter(0));
    assert_eq!(qp.poll_recv(&mut out).unwrap(), 1);
    assert_eq!((out[0].wr_id, out[0].imm, out[0].status), (70, Some(0xabcd), WcStatus::Success));
    assert_eq!(qp.rq_outstanding(), 1);
}

/// Finding 12: after a move to ERR, executed unsignalled writes get no CQE (as in rdma-core);
/// `outstanding` keeps counting them until a later CQE or the QP's drop retires them.
#[test]
fn executed_unsignalled_writes_stay_outstanding_until_retired() {
    let r = rig(9);
    let a = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    {
        let (mut qp, _hw) = connected::<16>(&r);
        for i in 0..3 {
            qp.post_write(i, a.slice(0, 8).unwrap(), SendFlags::empty(), REMOTE).unwrap();
        }
        qp.to_error().unwrap();
        // The device executed all three before the move: nothing to flush, no CQE.
        assert!(poll_all(&mut qp).is_empty());
        assert_eq!((qp.outstanding(), a.usage().in_flight()), (3, 3));
        assert_eq!(a.dereg(), Err(Error::RegionBusy { in_flight: 3 }));
    }
    assert_eq!(a.usage().in_flight(), 0);
    a.dereg().unwrap();
}

/// `mem::forget` of the QP itself: the device may still read what it posted, so those regions
/// stay busy and their memory is never freed.
#[test]
fn a_forgotten_qp_keeps_its_regions_busy_and_their_memory() {
    let r = rig(9);
    let blocks_before;
    {
        let a = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
        let (mut qp, _hw) = connected::<16>(&r);
        qp.post_write(1, a.slice(0, 8).unwrap(), SendFlags::SIGNALED, REMOTE).unwrap();
        core::mem::forget(qp);
        assert_eq!(a.dereg(), Err(Error::RegionBusy { in_flight: 1 }));
        blocks_before = r.dma.live_blocks();
    }
    // The region's block (and the QP's rings) stay allocated after the region's drop.
    assert_eq!(r.dma.live_blocks(), blocks_before);
}

/// A poll that meets a bogus CQE after good ones returns the good completions first and the
/// fault on the next call: returning the fault at once lost completions the driver had
/// already retired (found by the end-to-end fault tests on the model).
#[test]
fn completions_before_a_fault_reach_the_caller() {
    let r = rig(9);
    let a = r.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let (mut qp, mut hw) = connected::<16>(&r);
    qp.post_write(1, a.slice(0, 8).unwrap(), SendFlags::SIGNALED, REMOTE).unwrap();
    hw.send_cqe(0, None);
    hw.send_cqe(0, None); // the same WQE again: no longer outstanding
    let mut out = [rdma_pmd::Completion::default(); 4];
    assert_eq!(qp.poll(&mut out), Ok(1));
    assert_eq!(out[0].wr_id, 1);
    assert_eq!(qp.poll(&mut out), Err(DeviceFault::NotOutstanding { counter: 0 }.into()));
    assert_eq!(qp.poll(&mut out), Ok(0));
    assert_eq!((qp.outstanding(), a.usage().in_flight()), (0, 0));
}

/// A foreign handle: a buffer of another device's region, posted on this device's QP. Its
/// region is counted like any other, so it cannot be deregistered or freed under the write.
#[test]
fn a_buffer_of_another_device_is_counted_like_our_own() {
    let (r, other) = (rig(9), rig(9));
    let theirs = other.dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let (mut qp, mut hw) = connected::<16>(&r);
    qp.post_write(1, theirs.slice(0, 8).unwrap(), SendFlags::SIGNALED, REMOTE).unwrap();
    assert_eq!(theirs.dereg(), Err(Error::RegionBusy { in_flight: 1 }));
    hw.send_cqe(0, None);
    assert_eq!(poll_all(&mut qp).len(), 1);
    assert_eq!(theirs.usage().in_flight(), 0);
    theirs.dereg().unwrap();
}
