//! End-to-end: the driver posts RDMA WRITEs through the software mlx5 model, which parses every
//! byte it is given independently, executes the writes and answers with CQEs. Every completion
//! and every destination byte is checked, and the model's validation log must stay empty
//! unless a test provokes an error on purpose.

mod common;

use common::*;
use rdma_pmd::{
    Completion, Errno, Error, Post, RemoteBuf, Rkey, SendFlags, SendQueue, WcOpcode, WcStatus,
};
use rdma_pmd::{RecvQueue, Retired, Side};
use rdma_pmd_mlx5::{QpConfig, QpState};
use rdma_pmd_mlx5_model::{Model, ModelConfig, Syndrome, Wire};

const SIG: SendFlags = SendFlags::SIGNALED;
const NONE: SendFlags = SendFlags::empty();

#[test]
fn writev_with_every_sge_count_lands_every_byte() {
    let model = Model::new();
    let dev = open(&model);
    let src = dev.reg(1 << 16, TARGET).unwrap();
    let dst = dev.reg(1 << 16, TARGET).unwrap();
    let (mut a, _b) = pair::<_, _, 256>(&dev, &QpConfig::default());
    src.write(0, &pattern(1, 1 << 16)).unwrap();
    let max = a.caps().max_sge as usize;
    assert_eq!(max, 61);
    for n in 1..=max {
        dst.fill(0xee);
        let mut sgl = Vec::new();
        let mut expect = Vec::new();
        let mut off = (n * 131) % 4096;
        for k in 0..n {
            let len = 1 + (k * 37 + n) % 97;
            sgl.push(src.slice(off, len).unwrap());
            expect.extend(bytes(&src, off, len));
            off += len + 3;
        }
        let at = 1000 + n;
        a.post_writev(n as u64, &sgl, SIG, dst.remote(at)).unwrap();
        let c = wait(&mut a, 1);
        assert_eq!(
            (c[0].wr_id, c[0].status, c[0].opcode),
            (n as u64, WcStatus::Success, WcOpcode::RdmaWrite)
        );
        assert_eq!(bytes(&dst, at, expect.len()), expect, "{n} SGEs");
        assert_eq!(bytes(&dst, at - 8, 8), [0xee; 8]);
        assert_eq!(bytes(&dst, at + expect.len(), 8), [0xee; 8]);
        assert_eq!(src.usage().in_flight(), 0);
    }
    // Zero-length elements are skipped; a write of nothing at all is valid.
    dst.fill(0xee);
    let sgl = [src.slice(10, 5).unwrap(), src.slice(0, 0).unwrap(), src.slice(100, 7).unwrap()];
    a.post_writev(100, &sgl, SIG, dst.remote(64)).unwrap();
    a.post_writev(101, &[], SIG, dst.remote(0)).unwrap();
    let c = wait(&mut a, 2);
    assert!(c.iter().all(|c| c.status == WcStatus::Success));
    let mut expect = bytes(&src, 10, 5);
    expect.extend(bytes(&src, 100, 7));
    assert_eq!(bytes(&dst, 64, 12), expect);
    assert_eq!(bytes(&dst, 76, 4), [0xee; 4]);
    quiet(&mut a);
    clean(&model);
}

#[test]
fn inline_writes_of_every_size_class_land() {
    let model = Model::new();
    let dev = open(&model);
    let dst = dev.reg(1 << 16, TARGET).unwrap();
    let src = dev.reg(4096, TARGET).unwrap();
    let (mut a, _b) = pair::<_, _, 64>(&dev, &QpConfig::default());
    let max = a.caps().max_inline as usize;
    assert_eq!(max, 972);
    let sizes = [1, 3, 4, 7, 8, 12, 13, 28, 29, 60, 64, 100, 200, 236, 237, 500, 971, 972];
    for round in 0..4u64 {
        for (i, &len) in sizes.iter().enumerate() {
            let data = pattern(round * 100 + i as u64, len);
            let at = 128 + i * 1024;
            // Split into up to three pieces at odd places.
            let (p, q) = (len / 3, len - len / 5);
            let pieces: [&[u8]; 3] = [&data[..p], &data[p..q], &data[q..]];
            let id = round * 100 + i as u64;
            a.post_write_inline(id, &pieces, SIG, dst.remote(at)).unwrap();
            let c = wait(&mut a, 1);
            assert_eq!((c[0].wr_id, c[0].status), (id, WcStatus::Success));
            assert_eq!(bytes(&dst, at, len), data, "inline {len} bytes");
        }
    }
    // Registered bytes sent inline (INLINE flag on a gather list) need no registration hold.
    src.write(0, &pattern(9, 300)).unwrap();
    let sgl = [src.slice(0, 100).unwrap(), src.slice(200, 100).unwrap()];
    a.post_writev(7, &sgl, SIG | SendFlags::INLINE, dst.remote(0)).unwrap();
    assert_eq!(src.usage().in_flight(), 0);
    wait(&mut a, 1);
    let mut expect = bytes(&src, 0, 100);
    expect.extend(bytes(&src, 200, 100));
    assert_eq!(bytes(&dst, 0, 200), expect);
    assert_eq!(
        a.post_write_inline(8, &[&[0u8; 973][..]], SIG, dst.remote(0)),
        Err(Error::InlineTooLarge { len: 973, max: 972 })
    );
    assert!(model.counters().wqes_from_blueflame > 0, "single small posts use BlueFlame");
    quiet(&mut a);
    clean(&model);
}

#[test]
fn write_with_immediate_reaches_the_target_with_its_immediate() {
    let model = Model::new();
    let dev = open(&model);
    let src = dev.reg(4096, TARGET).unwrap();
    let dst = dev.reg(4096, TARGET).unwrap();
    let (mut a, mut b) = pair::<_, _, 64>(&dev, &QpConfig::default());
    src.write(0, &pattern(3, 4096)).unwrap();
    for i in 0..40u64 {
        b.post_recv_empty(500 + i).unwrap();
        let flags = if i % 4 == 3 { SIG } else { NONE };
        let len = 1 + (i as usize * 53) % 700;
        let imm = 0xfeed_0000 | i as u32;
        a.post_write_imm(i, &[src.slice(i as usize, len).unwrap()], flags, dst.remote(64), imm)
            .unwrap();
        let mut out = [Completion::default(); 2];
        let start = std::time::Instant::now();
        let n = loop {
            let n = b.poll_recv(&mut out).unwrap();
            if n > 0 {
                break n;
            }
            assert!(start.elapsed() < WAIT, "no receive completion");
            std::thread::yield_now();
        };
        assert_eq!(n, 1);
        let c = out[0];
        assert_eq!(
            (c.wr_id, c.status, c.opcode),
            (500 + i, WcStatus::Success, WcOpcode::RecvRdmaWithImm)
        );
        assert_eq!((c.imm, c.byte_len, c.qp_num), (Some(imm), len as u32, b.qp_num()));
        assert_eq!(bytes(&dst, 64, len), bytes(&src, i as usize, len));
        if i % 4 == 3 {
            let s = wait(&mut a, 1);
            assert_eq!((s[0].wr_id, s[0].opcode, s[0].imm), (i, WcOpcode::RdmaWrite, None));
        }
    }
    assert_eq!(b.rq_outstanding(), 0);
    quiet(&mut a);
    clean(&model);
}

#[test]
fn batches_wrap_the_ring_over_many_laps() {
    let model = Model::new();
    let dev = open(&model);
    let src = dev.reg(1 << 16, TARGET).unwrap();
    let dst = dev.reg(1 << 20, TARGET).unwrap();
    src.write(0, &pattern(5, 1 << 16)).unwrap();
    let (mut a, _b) = pair::<_, _, 64>(&dev, &QpConfig::default());
    let mut id = 0u64;
    let mut slot = 0usize;
    // (wr_id of the batch's signalled request, (target offset, expected bytes) per request)
    type Checks = Vec<(usize, Vec<u8>)>;
    let mut pending: Vec<(u64, Checks)> = Vec::new();
    for batch in 0..2500usize {
        let n = 1 + batch % 13;
        let mut checks = Vec::new();
        let mut b = a.batch();
        for k in 0..n {
            let nsge = 1 + (batch + k) % 6;
            let mut sgl = Vec::new();
            let mut expect = Vec::new();
            for j in 0..nsge {
                let off = (batch * 389 + k * 97 + j * 1013) % 60_000;
                let len = 1 + (batch + 7 * k + 3 * j) % 120;
                sgl.push(src.slice(off, len).unwrap());
                expect.extend(bytes(&src, off, len));
            }
            let at = (slot % 1024) * 1024;
            slot += 1;
            let flags = if k + 1 == n { SIG } else { NONE };
            b.post_writev(id, &sgl, flags, dst.remote(at)).unwrap();
            checks.push((at, expect));
            id += 1;
        }
        assert_eq!(b.commit(), n as u32);
        pending.push((id - 1, checks));
        // Two batches in flight: reap the older one.
        if pending.len() == 2 || batch == 2499 {
            let want = pending.len();
            let c = wait(&mut a, want);
            for (c, (last, checks)) in c.iter().zip(pending.drain(..)) {
                assert_eq!((c.wr_id, c.status), (last, WcStatus::Success));
                for (at, expect) in checks {
                    assert_eq!(bytes(&dst, at, expect.len()), expect, "write at {at}");
                }
            }
        }
    }
    assert!(a.sq_pi() as u64 > 64 * 100 || id > 64 * 100, "many laps");
    assert_eq!((a.outstanding(), src.usage().in_flight()), (0, 0));
    let cnt = model.counters();
    assert_eq!(cnt.wqes_executed, id);
    assert_eq!(cnt.req_cqes, 2500);
    quiet(&mut a);
    clean(&model);
}

#[test]
fn selective_signalling_reports_only_signalled_requests_and_retires_all() {
    let model = Model::new();
    let dev = open(&model);
    let src = dev.reg(4096, TARGET).unwrap();
    let dst = dev.reg(1 << 16, TARGET).unwrap();
    src.write(0, &pattern(11, 4096)).unwrap();
    let (mut a, _b) = pair::<_, _, 256>(&dev, &QpConfig::default());
    for i in 0..100u64 {
        let flags = if i % 10 == 9 { SIG } else { NONE };
        a.post_write(i, src.slice(i as usize, 64).unwrap(), flags, dst.remote(i as usize * 64))
            .unwrap();
    }
    let c = wait(&mut a, 10);
    let ids: Vec<u64> = c.iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, (0..10).map(|k| k * 10 + 9).collect::<Vec<_>>());
    assert!(c.iter().all(|c| c.status == WcStatus::Success));
    assert_eq!((a.outstanding(), src.usage().in_flight()), (0, 0));
    for i in 0..100usize {
        assert_eq!(bytes(&dst, i * 64, 64), bytes(&src, i, 64));
    }
    assert_eq!((model.counters().wqes_executed, model.counters().req_cqes), (100, 10));
    quiet(&mut a);

    // With sq_sig_all every request completes, whatever its flags.
    let (mut s, _t) = pair::<_, _, 64>(&dev, &QpConfig { sq_sig_all: true, ..QpConfig::default() });
    for i in 0..50u64 {
        s.post_write(i, src.slice(0, 8).unwrap(), NONE, dst.remote(0)).unwrap();
    }
    let c = wait(&mut s, 50);
    assert_eq!(c.iter().map(|c| c.wr_id).collect::<Vec<_>>(), (0..50).collect::<Vec<_>>());
    quiet(&mut s);
    clean(&model);
}

#[test]
fn full_send_queue_refuses_with_enomem_and_stays_intact() {
    let model = Model::new();
    let dev = open(&model);
    let src = dev.reg(4096, TARGET).unwrap();
    let dst = dev.reg(1 << 16, TARGET).unwrap();
    src.write(0, &pattern(13, 4096)).unwrap();
    let (mut a, _b) = pair::<_, _, 16>(&dev, &QpConfig::default());
    for round in 0..3usize {
        for i in 0..16usize {
            let flags = if i == 15 { SIG } else { NONE };
            let at = (round * 16 + i) * 64;
            a.post_write(i as u64, src.slice(i * 8, 64).unwrap(), flags, dst.remote(at)).unwrap();
        }
        let e = a.post_write(99, src.slice(0, 64).unwrap(), SIG, dst.remote(0)).unwrap_err();
        assert_eq!((e, e.errno()), (Error::QueueFull { needed: 1, free: 0 }, Errno::ENOMEM));
        let mut b = a.batch();
        assert!(b.post_writev(98, &[src.slice(0, 8).unwrap()], SIG, dst.remote(0)).is_err());
        drop(b);
        assert_eq!((a.outstanding(), src.usage().in_flight()), (16, 16));
        let c = wait(&mut a, 1);
        assert_eq!((c[0].wr_id, c[0].status), (15, WcStatus::Success));
        for i in 0..16usize {
            let at = (round * 16 + i) * 64;
            assert_eq!(bytes(&dst, at, 64), bytes(&src, i * 8, 64));
        }
        assert_eq!((a.outstanding(), a.sq_room()), (0, 16));
    }
    quiet(&mut a);
    clean(&model);
}

#[test]
fn wrong_rkey_fails_with_remote_access_error_then_everything_after_is_flushed() {
    let model = Model::new();
    let dev = open(&model);
    let src = dev.reg(4096, TARGET).unwrap();
    let dst = dev.reg(4096, TARGET).unwrap();
    src.write(0, &pattern(17, 4096)).unwrap();
    dst.fill(0xee);
    let (mut a, _b) = pair::<_, _, 64>(&dev, &QpConfig::default());
    let bad = RemoteBuf::new(dst.addr(), Rkey(dst.rkey().0 ^ 0x0000_ff00));
    let mut bt = a.batch();
    bt.post_writev(0, &[src.slice(0, 32).unwrap()], NONE, dst.remote(0)).unwrap();
    bt.post_writev(1, &[src.slice(32, 32).unwrap()], NONE, dst.remote(32)).unwrap();
    bt.post_writev(2, &[src.slice(64, 32).unwrap()], NONE, bad).unwrap();
    bt.post_writev(3, &[src.slice(96, 32).unwrap()], NONE, dst.remote(96)).unwrap();
    bt.post_writev(4, &[src.slice(128, 32).unwrap()], SIG, dst.remote(128)).unwrap();
    bt.commit();
    // Posted after the failure, before the driver has seen it: flushed as well.
    a.post_write(5, src.slice(160, 32).unwrap(), NONE, dst.remote(160)).unwrap();
    a.post_write(6, src.slice(192, 32).unwrap(), SIG, dst.remote(192)).unwrap();
    let c = wait(&mut a, 5);
    assert_eq!((c[0].wr_id, c[0].status), (2, WcStatus::RemAccessErr));
    assert_ne!(c[0].vendor_err, 0, "the vendor syndrome says which check failed");
    for (k, c) in c[1..].iter().enumerate() {
        assert_eq!((c.wr_id, c.status), (3 + k as u64, WcStatus::WrFlushErr));
    }
    assert_eq!(a.state(), QpState::Error);
    assert_eq!(
        a.post_write(7, src.slice(0, 8).unwrap(), SIG, dst.remote(0)),
        Err(Error::NotConnected)
    );
    assert_eq!((a.outstanding(), src.usage().in_flight()), (0, 0));
    assert_eq!(bytes(&dst, 0, 64), bytes(&src, 0, 64), "requests before the error executed");
    assert_eq!(bytes(&dst, 64, 160), vec![0xee; 160], "nothing after it did");
    quiet(&mut a);
    let cnt = model.counters();
    assert_eq!((cnt.errors(Syndrome::RemoteAccess), cnt.errors(Syndrome::WrFlush)), (1, 4));
    assert_eq!(model.violations().len(), 1, "only the provoked error: {:?}", model.violations());
}

#[test]
fn a_reset_queue_pair_connects_again_and_writes_from_block_zero() {
    let model = Model::new();
    let dev = open(&model);
    let src = dev.reg(4096, TARGET).unwrap();
    let dst = dev.reg(4096, TARGET).unwrap();
    src.write(0, &pattern(23, 4096)).unwrap();
    let (mut a, mut b) = pair::<_, _, 64>(&dev, &QpConfig::default());
    // Half a ring in, so that the restart at block 0 is visible.
    for i in 0..40 {
        a.post_write(i, src.slice(0, 8).unwrap(), NONE, dst.remote(0)).unwrap();
    }
    let bad = RemoteBuf::new(dst.addr(), Rkey(dst.rkey().0 ^ 0x0000_ff00));
    a.post_write(40, src.slice(0, 8).unwrap(), NONE, bad).unwrap();
    a.post_write(41, src.slice(0, 8).unwrap(), SIG, dst.remote(0)).unwrap();
    let c = wait(&mut a, 2);
    assert_eq!((c[0].status, c[1].status), (WcStatus::RemAccessErr, WcStatus::WrFlushErr));
    quiet(&mut a);
    b.to_error().unwrap();
    quiet(&mut b);
    let posted = a.posted();
    a.reset().unwrap();
    b.reset().unwrap();
    assert_eq!((a.state(), a.sq_pi(), a.retired(Side::Send)), (QpState::Reset, 0, posted));
    a.connect_loopback(b.qp_num()).unwrap();
    b.connect_loopback(a.qp_num()).unwrap();
    dst.fill(0);
    // More than a lap of the restarted ring, every write landing where it should.
    for lap in 0..3u64 {
        let mut bt = a.batch();
        for k in 0..32u64 {
            let at = (lap * 32 + k) as usize * 8;
            let f = if k == 31 { SIG } else { NONE };
            bt.post_writev(100 + k, &[src.slice(at, 8).unwrap()], f, dst.remote(at)).unwrap();
        }
        bt.commit();
        let c = wait(&mut a, 1);
        assert_eq!((c[0].wr_id, c[0].status), (131, WcStatus::Success));
    }
    assert_eq!(bytes(&dst, 0, 768), bytes(&src, 0, 768));
    assert_eq!((a.outstanding(), src.usage().in_flight()), (0, 0));
    quiet(&mut a);
    assert_eq!(model.violations().len(), 1, "only the provoked error: {:?}", model.violations());
}

#[test]
fn out_of_bounds_remote_addresses_fail_with_remote_access_error() {
    let model = Model::new();
    let dev = open(&model);
    let src = dev.reg(4096, TARGET).unwrap();
    let dst = dev.reg(4096, TARGET).unwrap();
    for (k, remote) in
        [dst.remote(4096 - 10), RemoteBuf::new(dst.addr() - 8, dst.rkey())].into_iter().enumerate()
    {
        let (mut a, _b) = pair::<_, _, 64>(&dev, &QpConfig::default());
        a.post_write(k as u64, src.slice(0, 64).unwrap(), SIG, remote).unwrap();
        let c = wait(&mut a, 1);
        assert_eq!((c[0].wr_id, c[0].status), (k as u64, WcStatus::RemAccessErr));
        assert_eq!(src.usage().in_flight(), 0);
    }
    assert_eq!(model.counters().errors(Syndrome::RemoteAccess), 2);
}

#[test]
fn deregistration_is_refused_while_writes_are_in_flight() {
    let model = Model::new();
    let dev = open(&model);
    let src = dev.reg(4096, TARGET).unwrap();
    let dst = dev.reg(4096, TARGET).unwrap();
    let other = dev.reg(4096, TARGET).unwrap();
    let (mut a, _b) = pair::<_, _, 64>(&dev, &QpConfig::default());
    let stale = src.slice(0, 16).unwrap();
    a.post_write(1, src.slice(0, 64).unwrap(), NONE, dst.remote(0)).unwrap();
    a.post_write(2, src.slice(64, 64).unwrap(), SIG, dst.remote(64)).unwrap();
    let e = src.dereg().unwrap_err();
    assert_eq!((e, e.errno()), (Error::RegionBusy { in_flight: 2 }, Errno::EBUSY));
    wait(&mut a, 1);
    src.dereg().unwrap();
    assert_eq!(src.slice(0, 8).unwrap_err(), Error::BadLkey);
    assert_eq!(a.post_write(3, stale, SIG, dst.remote(0)), Err(Error::BadLkey));
    assert_eq!(a.outstanding(), 0);
    // The target deregistered: a peer's write to it now fails at the responder.
    dst.dereg().unwrap();
    a.post_write(4, other.slice(0, 8).unwrap(), SIG, dst.remote(0)).unwrap();
    let c = wait(&mut a, 1);
    assert_eq!((c[0].wr_id, c[0].status), (4, WcStatus::RemAccessErr));
}

#[test]
fn dropping_queue_pairs_with_requests_in_flight_leaves_everything_consistent() {
    let model = Model::new();
    let dma = model.dma();
    let dev = open(&model);
    // After bring-up: the command queue, firmware pages and EQs belong to the HCA.
    let baseline = dma.live_blocks();
    {
        let src = dev.reg(4096, TARGET).unwrap();
        let dst = dev.reg(4096, TARGET).unwrap();
        {
            let (mut a, b) = pair::<_, _, 64>(&dev, &QpConfig::default());
            for i in 0..20 {
                a.post_write(i, src.slice(0, 64).unwrap(), NONE, dst.remote(0)).unwrap();
            }
            assert_eq!(src.usage().in_flight(), 20);
            // The sender goes first: its requests may still be executing, but their target
            // stays there until it is gone.
            drop(a);
            drop(b);
        }
        assert_eq!(src.usage().in_flight(), 0);
        src.dereg().unwrap();
    }
    assert_eq!(dma.live_blocks(), baseline, "every ring, record and region freed");
    clean(&model);
}

#[test]
fn roce_v2_between_two_devices_on_a_wire() {
    let wire = Wire::new();
    let m1 = Model::with_config(ModelConfig { wire: Some(wire.clone()), ..ModelConfig::default() })
        .unwrap();
    let m2 =
        Model::with_config(ModelConfig { wire: Some(wire), ..ModelConfig::default() }).unwrap();
    let (d1, d2) = (open(&m1), open(&m2));
    let src = d1.reg(4096, TARGET).unwrap();
    let dst = d2.reg(4096, TARGET).unwrap();
    src.write(0, &pattern(23, 4096)).unwrap();
    let mut a = d1.create_qp::<64, 16>(&QpConfig::default()).unwrap();
    let mut b = d2.create_qp::<64, 16>(&QpConfig::default()).unwrap();
    let (g1, g2) = (m1.gids()[0], m2.gids()[0]);
    let opts = rdma_pmd_mlx5::ConnectOpts::default();
    a.connect_roce_v2(b.qp_num(), g2.gid, g2.mac, 0, 0xc000, &opts).unwrap();
    b.connect_roce_v2(a.qp_num(), g1.gid, g1.mac, 0, 0xc001, &opts).unwrap();
    b.post_recv_empty(9).unwrap();
    a.post_write_imm(1, &[src.slice(0, 3000).unwrap()], SIG, dst.remote(100), 0xabcd).unwrap();
    let c = wait(&mut a, 1);
    assert_eq!((c[0].wr_id, c[0].status), (1, WcStatus::Success));
    let mut out = [Completion::default(); 1];
    let start = std::time::Instant::now();
    while b.poll_recv(&mut out).unwrap() == 0 {
        assert!(start.elapsed() < WAIT);
        std::thread::yield_now();
    }
    assert_eq!((out[0].wr_id, out[0].imm, out[0].byte_len), (9, Some(0xabcd), 3000));
    assert_eq!(bytes(&dst, 100, 3000), bytes(&src, 0, 3000));
    clean(&m1);
    clean(&m2);
}

#[test]
fn physical_mode_regions_carry_bus_addresses() {
    let model = Model::new();
    let dev = open(&model);
    let src = dev.reg_physical(8192, TARGET).unwrap();
    let dst = dev.reg_physical(8192, TARGET).unwrap();
    let mtt = dev.reg(8192, TARGET).unwrap();
    src.write(0, &pattern(29, 8192)).unwrap();
    mtt.write(0, &pattern(31, 8192)).unwrap();
    let (mut a, _b) = pair::<_, _, 64>(&dev, &QpConfig::default());
    // Physical to physical, crossing a page boundary on both sides.
    a.post_write(1, src.slice(4000, 500).unwrap(), SIG, dst.remote(3900)).unwrap();
    // MTT source into a physical target, and back.
    a.post_write(2, mtt.slice(10, 300).unwrap(), SIG, dst.remote(7000)).unwrap();
    a.post_write(3, src.slice(0, 4096).unwrap(), SIG, mtt.remote(4096)).unwrap();
    let c = wait(&mut a, 3);
    assert!(c.iter().all(|c| c.status == WcStatus::Success), "{c:?}");
    assert_eq!(bytes(&dst, 3900, 500), bytes(&src, 4000, 500));
    assert_eq!(bytes(&dst, 7000, 300), bytes(&mtt, 10, 300));
    assert_eq!(bytes(&mtt, 4096, 4096), bytes(&src, 0, 4096));
    quiet(&mut a);
    clean(&model);
}

#[test]
fn moving_to_error_flushes_posted_receives_once_each() {
    let model = Model::new();
    let dev = open(&model);
    let src = dev.reg(4096, TARGET).unwrap();
    let dst = dev.reg(4096, TARGET).unwrap();
    let (mut a, mut b) = pair::<_, _, 64>(&dev, &QpConfig::default());
    for i in 0..5u64 {
        b.post_recv_empty(40 + i).unwrap();
    }
    // One receive is consumed by a write with immediate, the rest are flushed.
    a.post_write_imm(1, &[src.slice(0, 16).unwrap()], SIG, dst.remote(0), 77).unwrap();
    wait(&mut a, 1);
    let mut out = [Completion::default(); 8];
    let start = std::time::Instant::now();
    let mut got = Vec::new();
    while got.is_empty() {
        let n = b.poll_recv(&mut out).unwrap();
        got.extend_from_slice(&out[..n]);
        assert!(start.elapsed() < WAIT);
    }
    assert_eq!((got[0].wr_id, got[0].imm), (40, Some(77)));
    b.to_error().unwrap();
    assert_eq!(b.state(), QpState::Error);
    assert_eq!(b.post_recv_empty(99), Err(Error::NotConnected));
    let mut flushed = Vec::new();
    while flushed.len() < 4 {
        let n = b.poll_recv(&mut out).unwrap();
        flushed.extend(out[..n].iter().map(|c| (c.wr_id, c.status)));
        assert!(start.elapsed() < WAIT, "flushes: {flushed:?}");
        std::thread::yield_now();
    }
    let want: Vec<_> = (41..45).map(|i| (i, WcStatus::WrFlushErr)).collect();
    assert_eq!(flushed, want);
    assert_eq!(b.rq_outstanding(), 0);
    for _ in 0..100 {
        assert_eq!(b.poll_recv(&mut out).unwrap(), 0);
    }
    clean(&model);
}

#[test]
fn unreachable_peer_fails_with_retry_exceeded_then_flushes() {
    let model = Model::new();
    let dev = open(&model);
    let src = dev.reg(4096, TARGET).unwrap();
    let dst = dev.reg(4096, TARGET).unwrap();
    let mut a = dev.create_qp::<64, 16>(&QpConfig::default()).unwrap();
    // No QP answers to this number.
    a.connect_loopback(rdma_pmd::QpNum(0x00ab_cdef)).unwrap();
    for i in 0..3u64 {
        let f = if i == 2 { SIG } else { NONE };
        a.post_write(i, src.slice(0, 8).unwrap(), f, dst.remote(0)).unwrap();
    }
    let c = wait(&mut a, 3);
    let got: Vec<_> = c.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        got,
        [(0, WcStatus::RetryExcErr), (1, WcStatus::WrFlushErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!((a.outstanding(), src.usage().in_flight()), (0, 0));
    quiet(&mut a);
}
