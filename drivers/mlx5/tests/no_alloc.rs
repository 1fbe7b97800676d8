//! The data path allocates nothing: after setup (device, regions, queue pairs), posting in every
//! form, polling, receiving, refusals and the error/flush path run under a counting global
//! allocator that must see zero allocations on the driver's thread.
//!
//! The model reacts to doorbells inside the BAR store (its handler runs on the caller's thread),
//! and that is the device's work, not the driver's: the BAR is wrapped so that the counter is
//! paused while a store is inside the model. The model's own thread is not counted.

mod common;

use rdma_pmd::RecvQueue;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use common::*;
use rdma_pmd::{Completion, Error, Post, RemoteBuf, Rkey, SendFlags, SendQueue, WcStatus};
use rdma_pmd_hal::mem::MemBar;
use rdma_pmd_hal::Mmio;
use rdma_pmd_mlx5::QpConfig;
use rdma_pmd_mlx5_model::Model;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

fn note() {
    let _ = ARMED.try_with(|a| {
        if a.get() {
            let _ = COUNT.try_with(|c| c.set(c.get() + 1));
        }
    });
}

struct Counting;

// SAFETY: every call is forwarded to the system allocator unchanged; counting touches only
// const-initialised thread-locals, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note();
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        note();
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        note();
        // SAFETY: forwarded with the caller's pointer and layouts.
        unsafe { System.realloc(p, l, new) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Count allocations on this thread while `f` runs.
fn counted<T>(f: impl FnOnce() -> T) -> (T, u64) {
    COUNT.with(|c| c.set(0));
    ARMED.with(|a| a.set(true));
    let r = f();
    ARMED.with(|a| a.set(false));
    (r, COUNT.with(|c| c.get()))
}

/// The model's side of a BAR store, not counted.
fn device<T>(f: impl FnOnce() -> T) -> T {
    let was = ARMED.with(|a| a.replace(false));
    let r = f();
    ARMED.with(|a| a.set(was));
    r
}

/// The model's BAR, with the model's reaction to each access left out of the count.
struct DeviceSide(MemBar);

// SAFETY: every access is forwarded unchanged to `MemBar`, which upholds the contract.
unsafe impl Mmio for DeviceSide {
    fn size(&self) -> usize {
        self.0.size()
    }
    fn read_u32(&self, off: usize) -> u32 {
        device(|| self.0.read_u32(off))
    }
    fn write_u32(&self, off: usize, value: u32) {
        device(|| self.0.write_u32(off, value))
    }
    fn read_u64(&self, off: usize) -> u64 {
        device(|| self.0.read_u64(off))
    }
    fn write_u64(&self, off: usize, value: u64) {
        device(|| self.0.write_u64(off, value))
    }
    fn write_wc64(&self, off: usize, block: &[u64; 8]) {
        device(|| self.0.write_wc64(off, block))
    }
}

/// Poll until `n` completions are in `out` (bounded).
fn reap<'r, Q: SendQueue<'r>>(q: &mut Q, out: &mut [Completion], n: usize) {
    let mut got = 0;
    let mut spins = 0u64;
    while got < n {
        got += q.poll(&mut out[got..n]).expect("poll");
        spins += 1;
        assert!(spins < 2_000_000_000, "completions did not arrive");
        std::hint::spin_loop();
    }
}

#[test]
fn the_counter_sees_an_allocation() {
    let ((), n) = counted(|| drop(std::hint::black_box(Vec::<u8>::with_capacity(8))));
    assert_eq!(n, 1);
}

#[test]
fn posting_and_polling_allocate_nothing() {
    let model = Model::new();
    let dev = open_with(&model, DeviceSide);
    let src = dev.reg(1 << 16, TARGET).unwrap();
    let dst = dev.reg(1 << 16, TARGET).unwrap();
    src.write(0, &pattern(1, 1 << 16)).unwrap();
    let (mut a, mut b) = pair::<_, _, 64>(&dev, &QpConfig::default());
    let inline = pattern(2, 200);

    let ((), n) = counted(|| {
        let mut out = [Completion::default(); 16];
        for round in 0..300usize {
            // A batch of gather writes, one doorbell.
            let mut bt = a.batch();
            for k in 0..8usize {
                let sgl =
                    [src.slice(round * 7 + k, 16).unwrap(), src.slice(4096 + k * 64, 48).unwrap()];
                let f = if k == 7 { SendFlags::SIGNALED } else { SendFlags::empty() };
                bt.post_writev(k as u64, &sgl, f, dst.remote(k * 64)).unwrap();
            }
            bt.commit();
            // A single post (BlueFlame), an inline write, a write with immediate.
            let one = src.slice(round, 64).unwrap();
            a.post_write(100, one, SendFlags::SIGNALED, dst.remote(1024)).unwrap();
            a.post_write_inline(101, &[&inline[..]], SendFlags::SIGNALED, dst.remote(2048))
                .unwrap();
            b.post_recv_empty(7).unwrap();
            let buf = src.slice(0, 32).unwrap();
            a.post_write_imm(102, &[buf], SendFlags::SIGNALED, dst.remote(4096), 5).unwrap();
            // A batch dropped uncommitted.
            let mut dropped = a.batch();
            dropped
                .post_writev(9, &[src.slice(0, 8).unwrap()], SendFlags::empty(), dst.remote(0))
                .unwrap();
            drop(dropped);
            reap(&mut a, &mut out, 4);
            assert!(out[..4].iter().all(|c| c.status == WcStatus::Success));
            let mut got = 0;
            while got == 0 {
                got = b.poll_recv(&mut out).unwrap();
            }
            assert_eq!(out[0].imm, Some(5));
        }
        // Refusals.
        for i in 0..64u64 {
            a.post_write(i, src.slice(0, 8).unwrap(), SendFlags::empty(), dst.remote(0)).unwrap();
        }
        let full = a.post_write(99, src.slice(0, 8).unwrap(), SendFlags::SIGNALED, dst.remote(0));
        assert!(matches!(full, Err(Error::QueueFull { .. })));
        let big = [0u8; 1000];
        let e = b.post_write_inline(1, &[&big[..]], SendFlags::empty(), dst.remote(0));
        assert!(matches!(e, Err(Error::InlineTooLarge { .. })));
        // The error and flush path: everything outstanding completes, in error.
        let bad = RemoteBuf::new(dst.addr(), Rkey(0x00dead00));
        b.post_write(1, src.slice(0, 8).unwrap(), SendFlags::empty(), bad).unwrap();
        b.post_write(2, src.slice(0, 8).unwrap(), SendFlags::SIGNALED, dst.remote(0)).unwrap();
        reap(&mut b, &mut out, 2);
        assert_eq!((out[0].status, out[1].status), (WcStatus::RemAccessErr, WcStatus::WrFlushErr));
    });
    assert_eq!(n, 0, "allocations on the data path");
    // The 64 unsignalled writes of `a` retire on teardown.
}

#[test]
fn reads_sends_receives_and_atomics_allocate_nothing() {
    use rdma_pmd_mlx5::control::{Access, Path};
    use rdma_pmd_mlx5::ConnectOpts;
    let all =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let model = Model::new();
    let dev = open_with(&model, DeviceSide);
    let src = dev.reg(1 << 16, all).unwrap();
    src.write(0, &pattern(3, 1 << 16)).unwrap();
    let mut mine = dev.reg(1 << 16, Access::LOCAL_WRITE).unwrap();
    let mut theirs = dev.reg(1 << 16, Access::LOCAL_WRITE).unwrap();
    let opts = ConnectOpts { access: all, ..ConnectOpts::default() };
    let mut a = dev.create_qp::<64, 16>(&QpConfig::default()).unwrap();
    let mut b = dev.create_qp::<64, 16>(&QpConfig::default()).unwrap();
    let (na, nb) = (a.qp_num(), b.qp_num());
    a.connect(nb, Path::Loopback, &opts).unwrap();
    b.connect(na, Path::Loopback, &opts).unwrap();
    // Setup, not counted: the destination buffers, carved once.
    let mut rd = mine.dest().unwrap();
    let mut rd_tail = rd.split_off(512).unwrap();
    let mut atom = rd_tail.split_off(64).unwrap();
    let _ = atom.split_off(8).unwrap();
    let mut rx = theirs.dest().unwrap();
    let mut rx2 = rx.split_off(100).unwrap();
    let _ = rx2.split_off(400).unwrap();

    let ((), n) = counted(|| {
        let mut out = [Completion::default(); 16];
        let (mut rd, mut rd_tail, mut atom, mut rx, mut rx2) = (rd, rd_tail, atom, rx, rx2);
        for round in 0..200u64 {
            let pr = b.post_recvv(round, [rx, rx2]).unwrap();
            let sgl = [src.slice(0, 150).unwrap(), src.slice(1000, 300).unwrap()];
            let mut bt = a.batch();
            let p1 = bt.post_readv(1, [rd, rd_tail], SendFlags::empty(), src.remote(64)).unwrap();
            bt.post_sendv(2, &sgl, SendFlags::empty()).unwrap();
            let p2 = bt.post_faa(3, atom, SendFlags::SIGNALED, src.remote(8192), 1).unwrap();
            bt.commit();
            reap(&mut a, &mut out, 1);
            assert_eq!((out[0].wr_id, out[0].status), (3, WcStatus::Success));
            [rd, rd_tail] = p1.reclaim(&a).unwrap();
            atom = p2.reclaim(&a).unwrap();
            let mut got = 0;
            while got == 0 {
                got = b.poll_recv(&mut out).unwrap();
            }
            assert_eq!((out[0].wr_id, out[0].byte_len), (round, 450));
            [rx, rx2] = pr.reclaim(&b).unwrap();
        }
        // A refused receive hands its buffers back, allocating nothing either.
        let more: [rdma_pmd::DestBuf<'_>; 5] = {
            let mut r = rx;
            let mut v = [None, None, None, None, None];
            for slot in v.iter_mut() {
                let rest = r.split_off(10).unwrap();
                *slot = Some(r);
                r = rest;
            }
            v.map(|d| d.unwrap())
        };
        let refused = b.post_recvv(9, more).unwrap_err();
        assert!(matches!(refused.error, Error::TooManyRecvSges { .. }));
        let _ = (rd, rd_tail, atom, rx2, refused);
    });
    assert_eq!(n, 0, "allocations on the data path");
}

#[test]
fn arp_and_the_neighbour_table_allocate_nothing() {
    use rdma_pmd::Mac;
    use rdma_pmd_mlx5::net::{Arp, ArpRepr, NeighConfig};
    use std::net::Ipv4Addr;
    let us = Mac([0x02, 0, 0, 0, 0, 1]);
    let our_ip = Ipv4Addr::new(10, 0, 0, 1);
    let mut arp: Arp<4, 2> = Arp::new(us, NeighConfig::default());
    arp.add_address(our_ip).unwrap();
    let mut out = [0u8; 60];
    let mut frames = [[0u8; 60]; 8];
    for (i, f) in frames.iter_mut().enumerate() {
        let peer = Mac([0x02, 0, 0, 0, 1, i as u8]);
        ArpRepr::request(peer, Ipv4Addr::new(10, 0, 1, i as u8), our_ip).emit(f).unwrap();
    }
    let ((), n) = counted(|| {
        let mut t = 0;
        // Requests for us (answered, learned, the table evicting what went stale 31 s on),
        // junk, and a resolution that runs out of retries.
        for f in &frames {
            t += 31_000_000_000;
            let _ = arp.on_frame(f, t, &mut out);
            let _ = arp.on_frame(&f[..30], t, &mut out);
        }
        let target = Ipv4Addr::new(10, 0, 9, 9);
        while arp.poll_resolve(target, t, &mut out).is_ok() {
            t += 100_000_000;
        }
        assert!(arp.lookup(Ipv4Addr::new(10, 0, 1, 7), t).is_some());
    });
    assert_eq!(n, 0, "the ARP path allocated");
}

#[test]
fn the_connection_manager_allocates_nothing() {
    use rdma_pmd::cm::{AcceptParams, Cm, CmConfig, ConnectParams, EventKind, Micros, QpParams};
    use rdma_pmd::{Gid, Mac};
    use rdma_pmd_mlx5::cm::{GsiPort, GSI_RQ, RX_SLOT};
    use rdma_pmd_mlx5::control::Access;
    use rdma_pmd_mlx5_model::{ModelConfig, Wire};
    use std::net::SocketAddr;

    let wire = Wire::new();
    let cfg = || ModelConfig { wire: Some(wire.clone()), ..ModelConfig::default() };
    let (m1, m2) = (Model::with_config(cfg()).unwrap(), Model::with_config(cfg()).unwrap());
    let (d1, d2) = (open_with(&m1, DeviceSide), open_with(&m2, DeviceSide));
    let (g1, g2) = (m1.gids()[0], m2.gids()[0]);
    let (gid1, gid2) = (Gid(g1.gid), Gid(g2.gid));
    let ip = |g: Gid| -> std::net::IpAddr {
        g.ipv4().map(std::net::IpAddr::from).unwrap_or(std::net::IpAddr::from(g.0))
    };
    let mut rx1 = d1.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap();
    let mut rx2 = d2.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap();
    let mut p1: GsiPort<_, _, _> = GsiPort::new(&d1, &mut rx1, 1).unwrap();
    let mut p2: GsiPort<_, _, _> = GsiPort::new(&d2, &mut rx2, 1).unwrap();
    p1.add_neighbour(gid2, Mac(g2.mac)).unwrap();
    p2.add_neighbour(gid1, Mac(g1.mac)).unwrap();
    let mut a: Cm<_, 4> = Cm::new(p1, CmConfig::new(0xa1, 1)).unwrap();
    let mut b: Cm<_, 4> = Cm::new(p2, CmConfig::new(0xb2, 2)).unwrap();
    b.listen(7174).unwrap();
    let mut qa = d1.create_qp::<64, 16>(&QpConfig::default()).unwrap();
    let mut qb = d2.create_qp::<64, 16>(&QpConfig::default()).unwrap();
    let start = std::time::Instant::now();
    let now = || Micros(start.elapsed().as_micros() as u64);
    let params = ConnectParams {
        local: SocketAddr::new(ip(gid1), 40000),
        remote: SocketAddr::new(ip(gid2), 7174),
        local_gid: gid1,
        remote_gid: gid2,
        remote_mac: Mac(g2.mac),
        private_data: b"no alloc",
        qp: QpParams::default(),
    };

    let ((), n) = counted(|| {
        for _round in 0..3 {
            let ida = a.connect(&mut qa, &params, now()).unwrap();
            let mut idb = None;
            let mut spins = 0u64;
            while idb.is_none() {
                let _ = a.poll(now(), core::slice::from_mut(&mut qa));
                if let Some(e) = b.poll(now(), core::slice::from_mut(&mut qb)) {
                    assert_eq!(e.kind, EventKind::ConnectRequest);
                    idb = Some(e.id);
                }
                spins += 1;
                assert!(spins < 50_000_000, "no request");
            }
            let idb = idb.unwrap();
            assert_eq!(&b.get_request(idb).unwrap().private_data[..8], b"no alloc");
            b.accept(idb, &mut qb, &AcceptParams::default(), now()).unwrap();
            let (mut ua, mut ub) = (false, false);
            while !(ua && ub) {
                ua |= a
                    .poll(now(), core::slice::from_mut(&mut qa))
                    .is_some_and(|e| e.kind == EventKind::Established);
                ub |= b
                    .poll(now(), core::slice::from_mut(&mut qb))
                    .is_some_and(|e| e.kind == EventKind::Established);
            }
            a.disconnect(ida, &mut qa, now()).unwrap();
            let (mut da, mut db) = (false, false);
            while !(da && db) {
                da |= a
                    .poll(now(), core::slice::from_mut(&mut qa))
                    .is_some_and(|e| e.kind == EventKind::Disconnected);
                db |= b
                    .poll(now(), core::slice::from_mut(&mut qb))
                    .is_some_and(|e| e.kind == EventKind::Disconnected);
            }
            // A refusal too: nobody on port 1.
            let mut qc = device(|| d1.create_qp::<64, 16>(&QpConfig::default()).unwrap());
            let p = ConnectParams { remote: SocketAddr::new(ip(gid2), 1), ..params };
            a.connect(&mut qc, &p, now()).unwrap();
            let mut refused = false;
            while !refused {
                refused |= a
                    .poll(now(), core::slice::from_mut(&mut qc))
                    .is_some_and(|e| matches!(e.kind, EventKind::Rejected { .. }));
                let _ = b.poll(now(), core::slice::from_mut(&mut qb));
            }
            device(|| drop(qc));
            // New QPs for the next round (their creation is setup, not counted).
            device(|| {
                qa = d1.create_qp::<64, 16>(&QpConfig::default()).unwrap();
                qb = d2.create_qp::<64, 16>(&QpConfig::default()).unwrap();
            });
        }
    });
    assert_eq!(n, 0, "allocations in the connection manager");
    assert_eq!(a.stats().malformed + b.stats().malformed, 0);
}

/// The same with neighbours by ARP: two drivers on one in-process hub, each CM over an
/// `ArpGsiPort`. The resolution (request, reply, the table), the Ethernet port's polling
/// inside the CM's, and a connection made and closed run with nothing allocated.
#[test]
fn arp_resolution_and_the_cm_over_it_allocate_nothing() {
    use rdma_pmd::cm::{AcceptParams, Cm, CmConfig, ConnectParams, EventKind, Micros, QpParams};
    use rdma_pmd::{Gid, Mac};
    use rdma_pmd_hal::{Clock, StdClock};
    use rdma_pmd_mlx5::cm::{ArpGsiPort, GsiPort, GSI_RQ, RX_SLOT};
    use rdma_pmd_mlx5::control::Access;
    use rdma_pmd_mlx5::EthConfig;
    use rdma_pmd_mlx5_model::roce::Hub;
    use rdma_pmd_mlx5_model::{Gid as ModelGid, ModelConfig};
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};

    let hub = Hub::new();
    let on_hub = |mac: [u8; 6], ip: Ipv4Addr| {
        let gids = vec![ModelGid { gid: Gid::from_ipv4(ip.octets()).0, mac }];
        let cfg = ModelConfig { gids, ..ModelConfig::default() }.with_port(hub.port(Mac(mac)));
        Model::with_config(cfg).unwrap()
    };
    let (ip1, ip2) = (Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 2));
    let (mac1, mac2) = ([2, 0x4d, 0x41, 0, 0, 1], [2, 0x4d, 0x42, 0, 0, 2]);
    let (m1, m2) = (on_hub(mac1, ip1), on_hub(mac2, ip2));
    let (d1, d2) = (open_with(&m1, DeviceSide), open_with(&m2, DeviceSide));
    let mut rx1 = d1.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap();
    let mut rx2 = d2.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).unwrap();
    let mut e1 = d1.eth_port(&EthConfig::default()).unwrap();
    let mut e2 = d2.eth_port(&EthConfig::default()).unwrap();
    e1.add_address(ip1).unwrap();
    e2.add_address(ip2).unwrap();
    let clock = StdClock::default();
    let p1 = ArpGsiPort::new(GsiPort::<_, _, _>::new(&d1, &mut rx1, 1).unwrap(), e1, clock);
    let p2 = ArpGsiPort::new(GsiPort::<_, _, _>::new(&d2, &mut rx2, 1).unwrap(), e2, clock);
    let mut a: Cm<_, 4> = Cm::new(p1, CmConfig::new(0xa1, 1)).unwrap();
    let mut b: Cm<_, 4> = Cm::new(p2, CmConfig::new(0xb2, 2)).unwrap();
    b.listen(7174).unwrap();
    let mut qa = d1.create_qp::<64, 16>(&QpConfig::default()).unwrap();
    let mut qb = d2.create_qp::<64, 16>(&QpConfig::default()).unwrap();
    let start = std::time::Instant::now();
    let now = || Micros(start.elapsed().as_micros() as u64);
    let bound = std::time::Duration::from_secs(60);

    let (mac, n) = counted(|| {
        let mac = loop {
            let eth = a.port_mut().eth_mut();
            if let Some(m) = eth.poll_resolve(ip2, clock.now_ns()).unwrap() {
                break m;
            }
            eth.poll_eth(clock.now_ns()).unwrap();
            let _ = b.poll(now(), core::slice::from_mut(&mut qb));
            assert!(start.elapsed() < bound, "no ARP reply");
        };
        let params = ConnectParams {
            local: SocketAddr::new(IpAddr::V4(ip1), 40000),
            remote: SocketAddr::new(IpAddr::V4(ip2), 7174),
            local_gid: Gid::from_ipv4(ip1.octets()),
            remote_gid: Gid::from_ipv4(ip2.octets()),
            remote_mac: mac,
            private_data: b"arp, no alloc",
            qp: QpParams::default(),
        };
        let ida = a.connect(&mut qa, &params, now()).unwrap();
        let idb = loop {
            let _ = a.poll(now(), core::slice::from_mut(&mut qa));
            if let Some(e) = b.poll(now(), core::slice::from_mut(&mut qb)) {
                assert_eq!(e.kind, EventKind::ConnectRequest);
                break e.id;
            }
            assert!(start.elapsed() < bound, "no request");
        };
        b.accept(idb, &mut qb, &AcceptParams::default(), now()).unwrap();
        let (mut ua, mut ub) = (false, false);
        while !(ua && ub) {
            ua |= a
                .poll(now(), core::slice::from_mut(&mut qa))
                .is_some_and(|e| e.kind == EventKind::Established);
            ub |= b
                .poll(now(), core::slice::from_mut(&mut qb))
                .is_some_and(|e| e.kind == EventKind::Established);
            assert!(start.elapsed() < bound, "not established");
        }
        b.disconnect(idb, &mut qb, now()).unwrap();
        let (mut da, mut db) = (false, false);
        while !(da && db) {
            da |= a
                .poll(now(), core::slice::from_mut(&mut qa))
                .is_some_and(|e| e.kind == EventKind::Disconnected);
            db |= b
                .poll(now(), core::slice::from_mut(&mut qb))
                .is_some_and(|e| e.kind == EventKind::Disconnected);
            assert!(start.elapsed() < bound, "not disconnected");
        }
        let _ = ida;
        mac
    });
    assert_eq!(mac, Mac(mac2));
    assert_eq!(n, 0, "allocations in ARP or the CM over it");
    assert_eq!(b.stats().unresolved, 0, "B learned A from A's ARP request");
    assert_eq!((a.port_mut().eth_errors, b.port_mut().eth_errors), (0, 0));
}
