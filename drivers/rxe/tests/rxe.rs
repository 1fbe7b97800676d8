//! End-to-end tests on a soft-RoCE device. They need an rxe device on the netdev that owns
//! `RXE_ADDR` (default 10.0.0.1), so they are `#[ignore]`d on ordinary hosts; `cargo xtask test
//! --tier rxe` runs them (natively or in its VM) with `--ignored --test-threads=1`: soft-RoCE
//! loses completions when several queue pairs drive it at once.
//!
//! Every test drives the backend through the core traits (`Post`, `SendQueue`), the same
//! surface a generic load generator uses.

mod support;
#[path = "rxe/verbs.rs"]
mod verbs;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts this thread's allocations, to show that posting and polling allocate nothing.
struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the counter is a const-initialised thread-local
// `Cell`, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(|c| c.get())
}

use rdma_pmd::{Completion, Errno, Error, Post, SendFlags, SendQueue, WcOpcode, WcStatus};
use rdma_pmd_rxe::peer;
use rdma_pmd_rxe::{QpConfig, Region, RxeQp};
use support::*;

const NEEDS_RXE: &str = "needs an rxe device; run by `cargo xtask test --tier rxe`";

fn connect<'r>(conn: &'r rdma_pmd_rxe::Conn, cfg: QpConfig) -> RxeQp<'r> {
    let mut qp = RxeQp::create(conn, cfg).expect("create qp");
    qp.connect(&[]).expect("connect");
    qp
}

fn ok_write(c: &Completion, wr_id: u64) {
    assert_eq!((c.wr_id, c.status, c.opcode), (wr_id, WcStatus::Success, WcOpcode::RdmaWrite));
}

#[test]
#[ignore = "needs an rxe device; run by `cargo xtask test --tier rxe`"]
fn writev_one_to_max_sges() {
    let _ = NEEDS_RXE;
    let ip = addr();
    let t = Target::spawn(&ip, 7471, 1 << 16, 0, None);
    let conn = resolve(&ip, 7471);
    let a = Region::msgs(&conn, 8192).unwrap();
    let b = Region::msgs(&conn, 8192).unwrap();
    a.write(0, &pattern(1, 8192)).unwrap();
    b.write(0, &pattern(2, 8192)).unwrap();
    let e = RxeQp::create(&conn, QpConfig { max_sge: 33, ..QpConfig::default() });
    assert!(matches!(e, Err(Error::InvalidArgument(_))), "33 SGEs are above rxe's limit");
    let mut qp = connect(&conn, QpConfig { max_sge: 32, ..QpConfig::default() });
    let (remote, _) = remote_of(&conn);
    let max = qp.caps().max_sge as usize;
    assert!(max >= 2, "rxe grants several SGEs, got {max}");
    let (mut expect, mut off) = (Vec::new(), 0usize);
    for n in 1..=max {
        let mut sgl = Vec::new();
        for i in 0..n {
            let (r, seed) = if i % 2 == 0 { (&a, 1) } else { (&b, 2) };
            let (at, len) = ((i * 211 + n * 17) % 4096, (n * 7 + i * 13) % 97 + 1);
            sgl.push(r.buf(at, len).unwrap());
            expect.extend_from_slice(&pattern(seed, 8192)[at..at + len]);
        }
        let total: usize = sgl.iter().map(|s| s.len()).sum();
        qp.post_writev(n as u64, &sgl, SendFlags::SIGNALED, remote.offset(off as u64)).unwrap();
        assert!(a.usage().in_flight() > 0);
        let c = wait_send(&mut qp, 1);
        ok_write(&c[0], n as u64);
        off += total;
    }
    assert_eq!((a.usage().in_flight(), b.usage().in_flight(), qp.outstanding()), (0, 0, 0));
    same_bytes(&t.read(0, off), &expect, "target bytes after 1..=max SGE writes");
    let too_many: Vec<_> = (0..=max).map(|i| a.buf(i, 1).unwrap()).collect();
    let e = qp.post_writev(99, &too_many, SendFlags::SIGNALED, remote).unwrap_err();
    assert_eq!(e, Error::TooManySges { given: max + 1, max });
    assert_eq!(e.errno(), Errno::ENOMEM);
    assert_eq!(a.usage().in_flight(), 0);
}

#[test]
#[ignore = "needs an rxe device; run by `cargo xtask test --tier rxe`"]
fn posting_and_polling_allocate_nothing() {
    let ip = addr();
    let t = Target::spawn(&ip, 7482, 1 << 17, 0, None);
    let conn = resolve(&ip, 7482);
    let src = Region::msgs(&conn, 1 << 16).unwrap();
    src.write(0, &pattern(12, 1 << 16)).unwrap();
    let mut qp = connect(&conn, QpConfig::default());
    let (remote, _) = remote_of(&conn);
    let mut wcs = [Completion::default(); 16];
    let before = allocs();
    let mut reaped = 0;
    for i in 0..64u64 {
        let at = i as usize * 1024;
        let sgl = [src.buf(at, 512).unwrap(), src.buf(at + 512, 512).unwrap()];
        let flags = if i % 16 == 15 { SendFlags::SIGNALED } else { SendFlags::empty() };
        qp.post_writev(i, &sgl, flags, remote.offset(at as u64)).unwrap();
    }
    let mut b = qp.batch();
    for i in 64..72u64 {
        let flags = if i == 71 { SendFlags::SIGNALED } else { SendFlags::empty() };
        b.post_write_inline(i, &[b"inline"], flags, remote.offset(70000)).unwrap();
    }
    b.commit();
    let deadline = std::time::Instant::now() + WAIT;
    while reaped < 5 {
        reaped += qp.poll(&mut wcs).unwrap();
        assert!(std::time::Instant::now() < deadline, "completions");
    }
    assert_eq!(allocs() - before, 0, "allocations while posting and polling");
    same_bytes(&t.read(0, 64 * 1024), &pattern(12, 1 << 16)[..64 * 1024], "writev data");
    same_bytes(&t.read(70000, 6), b"inline", "inline batch data");
}

#[test]
#[ignore = "needs an rxe device; run by `cargo xtask test --tier rxe`"]
fn inline_writes_copy_at_post_time() {
    let ip = addr();
    let t = Target::spawn(&ip, 7472, 4096, 0, None);
    let conn = resolve(&ip, 7472);
    let src = Region::msgs(&conn, 4096).unwrap();
    let mut qp = connect(&conn, QpConfig { max_inline: 128, ..QpConfig::default() });
    let (remote, _) = remote_of(&conn);
    let max = qp.caps().max_inline as usize;
    assert!(max >= 64, "rxe grants inline data, got {max}");

    // Plain bytes: reusable as soon as the post returns.
    let mut data = pattern(3, 64);
    let (x, y) = data.split_at(20);
    qp.post_write_inline(1, &[x, y], SendFlags::SIGNALED, remote).unwrap();
    let sent = data.clone();
    data.iter_mut().for_each(|b| *b = 0xee);
    ok_write(&wait_send(&mut qp, 1)[0], 1);
    same_bytes(&t.read(0, 64), &sent, "inline bytes");

    // Registered bytes with INLINE: copied too, so the region is not held.
    src.write(0, &pattern(4, 48)).unwrap();
    qp.post_writev(
        2,
        &[src.buf(0, 48).unwrap()],
        SendFlags::SIGNALED | SendFlags::INLINE,
        remote.offset(100),
    )
    .unwrap();
    assert_eq!(src.usage().in_flight(), 0);
    src.write(0, &[0xdd; 48]).unwrap();
    ok_write(&wait_send(&mut qp, 1)[0], 2);
    same_bytes(&t.read(100, 48), &pattern(4, 48), "registered inline bytes");

    let big = vec![0u8; max + 1];
    let e = qp.post_write_inline(3, &[&big], SendFlags::SIGNALED, remote).unwrap_err();
    assert_eq!(e, Error::InlineTooLarge { len: max + 1, max });
    assert_eq!(e.errno(), Errno::ENOMEM);
}

#[test]
#[ignore = "needs an rxe device; run by `cargo xtask test --tier rxe`"]
fn write_with_immediate() {
    let ip = addr();
    let t = Target::spawn(&ip, 7473, 4096, 2, None);
    let conn = resolve(&ip, 7473);
    let src = Region::msgs(&conn, 4096).unwrap();
    src.write(0, &pattern(5, 300)).unwrap();
    let mut qp = connect(&conn, QpConfig::default());
    let (remote, _) = remote_of(&conn);
    let sgl = [src.buf(0, 100).unwrap(), src.buf(100, 200).unwrap()];
    qp.post_write_imm(1, &sgl, SendFlags::SIGNALED, remote, 0xdead_beef).unwrap();
    ok_write(&wait_send(&mut qp, 1)[0], 1);
    qp.post_write_imm(2, &[], SendFlags::SIGNALED, remote.offset(1000), 7).unwrap();
    ok_write(&wait_send(&mut qp, 1)[0], 2);
    let r = t.recv(2);
    assert_eq!(
        (r[0].wr_id, r[0].status, r[0].opcode),
        (0, WcStatus::Success, WcOpcode::RecvRdmaWithImm)
    );
    assert_eq!((r[0].imm, r[0].byte_len), (Some(0xdead_beef), 300));
    assert_eq!(
        (r[1].wr_id, r[1].opcode, r[1].imm, r[1].byte_len),
        (1, WcOpcode::RecvRdmaWithImm, Some(7), 0)
    );
    same_bytes(&t.read(0, 300), &pattern(5, 300), "write with immediate data");
}

#[test]
#[ignore = "needs an rxe device; run by `cargo xtask test --tier rxe`"]
fn batch_posts_with_one_doorbell_and_drop_posts_nothing() {
    let ip = addr();
    let t = Target::spawn(&ip, 7474, 1 << 15, 0, None);
    let conn = resolve(&ip, 7474);
    let src = Region::msgs(&conn, 1 << 15).unwrap();
    src.write(0, &pattern(6, 1 << 15)).unwrap();
    let mut qp = connect(&conn, QpConfig::default());
    let (remote, _) = remote_of(&conn);

    // Dropped uncommitted: nothing reaches the wire, nothing stays acquired.
    {
        let mut b = qp.batch();
        for i in 0..3u64 {
            b.post_writev(
                100 + i,
                &[src.buf(0, 512).unwrap()],
                SendFlags::SIGNALED,
                remote.offset(16384),
            )
            .unwrap();
        }
        assert_eq!(b.len(), 3);
        assert_eq!(src.usage().in_flight(), 3);
    }
    assert_eq!((qp.outstanding(), src.usage().in_flight()), (0, 0));

    let mut b = qp.batch();
    for i in 0..16u64 {
        let flags = if i == 15 { SendFlags::SIGNALED } else { SendFlags::empty() };
        let sgl = [
            src.buf(i as usize * 512, 256).unwrap(),
            src.buf(i as usize * 512 + 256, 256).unwrap(),
        ];
        b.post_writev(i, &sgl, flags, remote.offset(i * 512)).unwrap();
    }
    assert_eq!(b.commit(), 16);
    assert_eq!(qp.outstanding(), 16);
    let c = wait_send(&mut qp, 1);
    ok_write(&c[0], 15);
    assert_eq!((qp.outstanding(), src.usage().in_flight()), (0, 0));
    same_bytes(&t.read(0, 16 * 512), &pattern(6, 1 << 15)[..16 * 512], "batch data");
    same_bytes(&t.read(16384, 512), &[0; 512], "the dropped batch wrote nothing");
    let mut none = [Completion::default(); 4];
    assert_eq!(qp.poll(&mut none).unwrap(), 0, "no completion for the dropped batch");

    // A leaked batch's request is never posted: the next batch rolls it back (releasing its
    // region) before it stages its own, even after the queue pair moved.
    let before = t.read(20000, 64);
    let mut b = qp.batch();
    b.post_writev(200, &[src.buf(0, 64).unwrap()], SendFlags::empty(), remote.offset(20000))
        .unwrap();
    std::mem::forget(b);
    assert_eq!(src.usage().in_flight(), 1);
    let mut moved = Box::new(qp);
    moved
        .post_write(201, src.buf(64, 64).unwrap(), SendFlags::SIGNALED, remote.offset(20064))
        .unwrap();
    let c = wait_send(&mut *moved, 1);
    ok_write(&c[0], 201);
    assert_eq!((moved.outstanding(), src.usage().in_flight()), (0, 0));
    same_bytes(&t.read(20000, 64), &before, "the leaked request was not sent");
    same_bytes(&t.read(20064, 64), &pattern(6, 1 << 15)[64..128], "the later request");
}

#[test]
#[ignore = "needs an rxe device; run by `cargo xtask test --tier rxe`"]
fn selective_signalling_and_queue_full() {
    let ip = addr();
    let t = Target::spawn(&ip, 7475, 1 << 16, 0, None);
    let conn = resolve(&ip, 7475);
    let src = Region::msgs(&conn, 1 << 16).unwrap();
    src.write(0, &pattern(7, 1 << 16)).unwrap();
    let mut qp = connect(&conn, QpConfig { max_send_wr: 64, ..QpConfig::default() });
    let (remote, _) = remote_of(&conn);
    for i in 0..64u64 {
        let flags = if i % 8 == 7 { SendFlags::SIGNALED } else { SendFlags::empty() };
        let at = i as usize * 256;
        qp.post_write(i, src.buf(at, 256).unwrap(), flags, remote.offset(at as u64)).unwrap();
    }
    let c = wait_send(&mut qp, 8);
    let ids: Vec<u64> = c.iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, (0..8).map(|k| k * 8 + 7).collect::<Vec<u64>>());
    assert!(c.iter().all(|c| c.status == WcStatus::Success));
    assert_eq!((qp.outstanding(), src.usage().in_flight()), (0, 0));
    same_bytes(
        &t.read(0, 64 * 256),
        &pattern(7, 1 << 16)[..64 * 256],
        "selectively signalled data",
    );

    // Unsignalled requests keep their slots until a later signalled one completes.
    let depth = qp.caps().max_send_wr as u64;
    for i in 0..depth {
        let flags = if i + 1 == depth { SendFlags::SIGNALED } else { SendFlags::empty() };
        qp.post_write(1000 + i, src.buf(0, 8).unwrap(), flags, remote).unwrap();
    }
    let e = qp.post_write(1, src.buf(0, 8).unwrap(), SendFlags::SIGNALED, remote).unwrap_err();
    assert_eq!(e, Error::QueueFull { needed: 1, free: 0 });
    assert_eq!(e.errno(), Errno::ENOMEM);
    ok_write(&wait_send(&mut qp, 1)[0], 1000 + depth - 1);
    assert_eq!((qp.outstanding(), src.usage().in_flight()), (0, 0));
}

#[test]
#[ignore = "needs an rxe device; run by `cargo xtask test --tier rxe`"]
fn wrong_rkey_fails_then_flushes() {
    let ip = addr();
    let _t = Target::spawn(&ip, 7476, 4096, 0, None);
    let conn = resolve(&ip, 7476);
    let src = Region::msgs(&conn, 4096).unwrap();
    let mut qp = connect(&conn, QpConfig::default());
    let (remote, _) = remote_of(&conn);
    let mut bad = remote;
    bad.rkey = rdma_pmd::Rkey(remote.rkey.get() ^ 0x5a5a_0000);
    let mut b = qp.batch();
    b.post_writev(1, &[src.buf(0, 64).unwrap()], SendFlags::SIGNALED, bad).unwrap();
    for i in 2..5 {
        b.post_writev(i, &[src.buf(0, 64).unwrap()], SendFlags::empty(), remote).unwrap();
    }
    b.commit();
    let c = wait_send(&mut qp, 4);
    assert_eq!((c[0].wr_id, c[0].status), (1, WcStatus::RemAccessErr));
    for (k, c) in c[1..].iter().enumerate() {
        assert_eq!(
            (c.wr_id, c.status),
            (2 + k as u64, WcStatus::WrFlushErr),
            "unsignalled requests are flushed"
        );
    }
    assert_eq!((qp.outstanding(), src.usage().in_flight()), (0, 0));
    assert_eq!(src.dereg(), Ok(()));
}

#[test]
#[ignore = "needs an rxe device; run by `cargo xtask test --tier rxe`"]
fn posting_before_connect_is_refused() {
    let ip = addr();
    let conn = resolve(&ip, 7477);
    let src = Region::msgs(&conn, 4096).unwrap();
    let mut qp = RxeQp::create(&conn, QpConfig::default()).unwrap();
    assert!(!qp.is_connected());
    let remote = src.remote();
    let e = qp.post_writev(1, &[src.buf(0, 8).unwrap()], SendFlags::SIGNALED, remote).unwrap_err();
    assert_eq!(e, Error::NotConnected);
    assert_eq!(e.errno(), Errno::EINVAL);
    assert_eq!(
        qp.post_write_inline(2, &[b"x"], SendFlags::SIGNALED, remote),
        Err(Error::NotConnected)
    );
    assert_eq!(
        qp.batch().post_writev(3, &[], SendFlags::empty(), remote),
        Err(Error::NotConnected)
    );
    assert_eq!((qp.outstanding(), src.usage().in_flight()), (0, 0));
}

#[test]
#[ignore = "needs an rxe device; run by `cargo xtask test --tier rxe`"]
fn dereg_is_refused_while_in_flight() {
    let ip = addr();
    let t = Target::spawn(&ip, 7478, 4096, 0, None);
    let conn = resolve(&ip, 7478);
    let src = Region::msgs(&conn, 4096).unwrap();
    src.write(0, b"registered").unwrap();
    let mut qp = connect(&conn, QpConfig::default());
    let (remote, _) = remote_of(&conn);
    qp.post_write(1, src.buf(0, 10).unwrap(), SendFlags::SIGNALED, remote).unwrap();
    let e = src.dereg().unwrap_err();
    assert_eq!(e, Error::RegionBusy { in_flight: 1 });
    assert_eq!(e.errno(), Errno::EBUSY);
    ok_write(&wait_send(&mut qp, 1)[0], 1);
    assert_eq!(src.dereg(), Ok(()));
    assert_eq!(
        qp.post_write(2, src.buf(0, 10).unwrap(), SendFlags::SIGNALED, remote),
        Err(Error::BadLkey)
    );
    assert_eq!(t.read(0, 10), b"registered");
}

#[test]
#[ignore = "needs an rxe device; run by `cargo xtask test --tier rxe`"]
fn interop_our_writer_fills_the_c_target() {
    let ip = addr();
    let len = 3000u32;
    let (tx, rx) = std::sync::mpsc::channel();
    let ip2 = ip.clone();
    let c = std::thread::spawn(move || peer::c_target(&ip2, 7479, len, tx));
    rx.recv_timeout(WAIT).expect("C target listening");
    let conn = resolve(&ip, 7479);
    let src = Region::msgs(&conn, 4096).unwrap();
    let data = pattern(9, len as usize);
    src.write(0, &data).unwrap();
    let mut qp = connect(&conn, QpConfig::default());
    let (remote, rlen) = remote_of(&conn);
    assert_eq!(rlen, len);
    let sgl = [src.buf(0, 1000).unwrap(), src.buf(1000, 500).unwrap(), src.buf(1500, 500).unwrap()];
    qp.post_writev(1, &sgl, SendFlags::empty(), remote).unwrap();
    qp.post_write_imm(
        2,
        &[src.buf(2000, 1000).unwrap()],
        SendFlags::SIGNALED,
        remote.offset(2000),
        0xc0ffee,
    )
    .unwrap();
    ok_write(&wait_send(&mut qp, 1)[0], 2);
    let (bytes, imm) = c.join().unwrap().expect("C target");
    assert_eq!(imm, 0xc0ffee);
    same_bytes(&bytes, &data, "the C target's buffer, byte for byte");
}

/// Both ends of one of the bench's C controls on `port`: (passive, active).
fn both_ends<T: Send + 'static>(
    port: u16,
    run: impl Fn(&str, u16, peer::PingPongEnd) -> rdma_pmd::Result<T> + Clone + Send + 'static,
) -> (T, T) {
    peer::both_ends(&addr(), port, std::time::Duration::from_secs(30), run).expect("both ends")
}

#[test]
#[ignore = "needs an rxe device; run by `cargo xtask test --tier rxe`"]
fn c_pingpong_control_times_every_round() {
    // The bench's latency control (`rxe_bench lat --impl c`): both ends in C.
    let (passive, t) = both_ends(7483, |ip, port, end| peer::c_pingpong(ip, port, end, 64, 200));
    assert!(passive.is_empty());
    assert_eq!(t.len(), 200);
    let second = std::time::Duration::from_secs(1);
    assert!(t.iter().all(|d| !d.is_zero() && *d < second), "every round trip timed: {t:?}");
}

#[test]
#[ignore = "needs an rxe device; run by `cargo xtask test --tier rxe`"]
fn c_writes_control_streams_to_its_target() {
    // The bench's bandwidth control (`rxe_bench bw --impl c`): both ends in C.
    let (target, t) =
        both_ends(7484, |ip, port, end| peer::c_writes(ip, port, end, 4096, 300, 32, 8));
    assert_eq!(target, None);
    let t = t.expect("the writer's run time");
    assert!(!t.is_zero() && t < std::time::Duration::from_secs(60), "run time {t:?}");
}

#[test]
#[ignore = "needs an rxe device; run by `cargo xtask test --tier rxe`"]
fn interop_the_c_writer_fills_our_target() {
    let ip = addr();
    let t = Target::spawn(&ip, 7480, 5000, 1, None);
    let data = pattern(10, 4321);
    peer::c_writer(&ip, 7480, &data, 0x5eed_0001).expect("C writer");
    let r = t.recv(1);
    assert_eq!((r[0].status, r[0].opcode, r[0].byte_len), (WcStatus::Success, WcOpcode::Recv, 4));
    assert_eq!(t.read_recv(0, 4), 0x5eed_0001u32.to_ne_bytes());
    same_bytes(&t.read(0, data.len()), &data, "our buffer, byte for byte");
    same_bytes(
        &t.read(data.len(), 5000 - data.len()),
        &vec![0; 5000 - data.len()],
        "beyond the C writer's data",
    );
}

/// Whether this thread's network namespace has a UDP socket on RoCE v2's port 4791 (0x12B7),
/// i.e. whether rxe can receive RoCE v2 here.
fn roce_socket_here() -> bool {
    let udp =
        std::fs::read_to_string("/proc/thread-self/net/udp").expect("/proc/thread-self/net/udp");
    udp.lines().skip(1).any(|l| l.split_whitespace().nth(1).is_some_and(|a| a.ends_with(":12B7")))
}

/// Transmitted packets of `dev` in this thread's namespace (`/proc/thread-self/net/dev`).
fn tx_packets(dev: &str) -> u64 {
    let t =
        std::fs::read_to_string("/proc/thread-self/net/dev").expect("/proc/thread-self/net/dev");
    let line = t.lines().find(|l| l.trim_start().starts_with(&format!("{dev}:"))).expect("device");
    // "dev: rx_bytes rx_packets (6 more rx) tx_bytes tx_packets ..."
    line.split_once(':').unwrap().1.split_whitespace().nth(9).unwrap().parse().unwrap()
}

/// Two hosts: the target in namespace A, the writer in namespace B, joined by a veth pair with
/// an rxe device on each end, so RoCE v2 crosses a real (virtual) wire.
///
/// On Debian's 6.1 kernel this cannot connect: the RoCE path is resolved and carried in the
/// initial network namespace only. ib_core resolves the route of the connection request's
/// address handle with `dev_addr.net = &init_net` and the netdev's ifindex as bound device
/// (`roce_resolve_route_from_path` in `sa_query.c`, whose comment says it limits itself to
/// init_net), rxe routes what it sends with `ip_route_output_key(&init_net, ...)`, and rxe's
/// RoCE v2 receive socket (UDP 4791) exists in init_net only. For netdevs inside other
/// namespaces the request is never sent and `rdma_connect` fails within milliseconds. The test
/// checks whichever the kernel provides: a connection with every byte delivered where the
/// namespace has its own RoCE socket, or exactly that quick failure (not a hang) where it has
/// none.
#[test]
#[ignore = "needs two network namespaces joined by a veth pair with an rxe device on each end"]
fn two_namespaces_over_veth() {
    let env = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"));
    let (ns_a, ns_b, ip_a) = (env("RXE_NETNS_A"), env("RXE_NETNS_B"), env("RXE_ADDR_A"));
    let t = Target::spawn(&ip_a, 7481, 8192, 1, Some(ns_a));
    enter_netns(&ns_b);
    let socket_in_b = roce_socket_here();
    let conn = resolve(&ip_a, 7481);
    let src = Region::msgs(&conn, 8192).unwrap();
    let data = pattern(11, 8192);
    src.write(0, &data).unwrap();
    let mut qp = RxeQp::create(&conn, QpConfig::default()).unwrap();
    let dev_b = std::env::var("RXE_NETDEV_B").unwrap_or_else(|_| "vb".into());
    let tx0 = tx_packets(&dev_b);
    let t0 = std::time::Instant::now();
    let r = qp.connect(&[]);
    let (took, sent) = (t0.elapsed(), tx_packets(&dev_b) - tx0);
    eprintln!(
        "two namespaces: RoCE v2 socket in namespace B: {socket_in_b}; rdma_connect -> {r:?} \
         after {took:.1?}; {dev_b} sent {sent} packets meanwhile"
    );
    // The guest's kernel is chosen for namespace support (xtask's wire and rxe tiers); where it
    // says so, the quick failure is a regression, not an accepted outcome.
    if std::env::var_os("RXE_NETNS_ROCE").is_some() {
        assert!(socket_in_b, "the kernel should give namespace B its own RoCE v2 socket");
    }
    if !socket_in_b {
        let e = r.expect_err("connected although namespace B has no RoCE v2 socket");
        assert!(matches!(e, Error::Device(_)), "{e:?}");
        assert_eq!(sent, 0, "no connection request should leave {dev_b}");
        // The target never got a request; leave it waiting.
        t.detach();
        return;
    }
    r.expect("connect across namespaces");
    let (remote, _) = remote_of(&conn);
    let sgl = [src.buf(0, 4096).unwrap(), src.buf(4096, 4000).unwrap()];
    qp.post_writev(1, &sgl, SendFlags::empty(), remote).unwrap();
    qp.post_write_imm(
        2,
        &[src.buf(8096, 96).unwrap()],
        SendFlags::SIGNALED,
        remote.offset(8096),
        42,
    )
    .unwrap();
    ok_write(&wait_send(&mut qp, 1)[0], 2);
    let r = t.recv(1);
    assert_eq!((r[0].status, r[0].imm), (WcStatus::Success, Some(42)));
    same_bytes(&t.read(0, 8192), &data, "data across namespaces");
}
