//! The connection manager (`rdma_pmd::cm` over the mlx5 driver's QP1, `GsiPort`) against the
//! Linux kernel's rdma_cm on a real Ethernet wire: the device model's port is an `AF_PACKET`
//! socket on our end of a veth pair, rdma_rxe is on the other, and the peers are unmodified
//! librdmacm programs (`rping`, `rdma_server`/`rdma_client`, `ucmatose`) and the project's C
//! `rdma_post_writev` program (`examples/c/cm_writev.c`). Every byte is checked on our side, and
//! each peer checks its own (`rping -V`, exit codes, what it prints). Run by xtask's `wire`
//! tier (see `xtask/src/tiers/wire.rs`); ignored elsewhere. Each test saves a pcap of our end.
//!
//!
//! The rig ([`common::wire_cm`]): the model on our end of the wire, the driver on it, our CM
//! over its QP1 with the driver's ARP for neighbours; each test says only what it tests.

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::Child;
use std::time::{Duration, Instant};

use common::wire::*;
use common::wire_cm::*;
use common::*;
use rdma_pmd::cm::mad::RejReason;
use rdma_pmd::cm::{AcceptParams, CmConfig, ConnectParams, Event, EventKind, NoQps};
use rdma_pmd::{
    Completion, DestBuf, Errno, Gid, Mac, Post, RecvQueue, SendFlags, SendQueue, WcOpcode, WcStatus,
};
use rdma_pmd_hal::mem::MemBar;
use rdma_pmd_mlx5::control::Access;
use rdma_pmd_mlx5::{QpConfig, QpState, Region};
use rdma_pmd_mlx5_model::peers::guest::PATIENCE;
use rdma_pmd_mlx5_model::ModelConfig;

const SIG: SendFlags = SendFlags::SIGNALED;
/// rping's port.
const RPING_PORT: u16 = 7174;
/// rdma_server's and rdma_client's port.
const RDMA_SERVER_PORT: u16 = 7471;
const ALL: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE).union(Access::REMOTE_READ);

// ---- rping ----

/// The bytes of rping's ping `n` of `size` bytes (`rping_test_client`): "rdma-ping-<n>: ",
/// then letters from 'A' + n mod 58 cycling through 'A'..='z', and a NUL last.
fn rping_msg(n: u32, size: usize) -> Vec<u8> {
    let mut v = format!("rdma-ping-{n}: ").into_bytes();
    v.truncate(size - 1);
    let mut c = 65 + (n % 58) as u8;
    while v.len() < size {
        v.push(c);
        c = if c >= 122 { 65 } else { c + 1 };
    }
    v[size - 1] = 0;
    v
}

/// rping's exit: as [`finish`], except that the race rdma-core fixed in rping in 2025
/// (linux-rdma/rdma-core#1622, "rping: Fix spurious failure return codes": its CM thread
/// calls `rdma_get_cm_event` again after the last event, on a channel the main thread is
/// destroying, and exits with a failure) counts as the success it was. The guest's rping
/// predates the fix.
fn rping_finish(child: Child, what: &str) -> (bool, String) {
    let (ok, out) = finish(child, what);
    let raced = out.lines().any(|l| l == "rdma_get_cm_event: Bad file descriptor");
    if !ok && raced {
        eprintln!("{what}: its teardown race (rdma-core#1622); the test had finished");
        return (true, out);
    }
    (ok, out)
}

/// rping's advertisement: {be64 addr, be32 rkey, be32 size}.
fn rping_adv(addr: u64, rkey: u32, size: u32) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..8].copy_from_slice(&addr.to_be_bytes());
    a[8..12].copy_from_slice(&rkey.to_be_bytes());
    a[12..].copy_from_slice(&size.to_be_bytes());
    a
}

fn parse_adv(b: &[u8]) -> (u64, u32, u32) {
    (
        u64::from_be_bytes(b[..8].try_into().unwrap()),
        u32::from_be_bytes(b[8..12].try_into().unwrap()),
        u32::from_be_bytes(b[12..16].try_into().unwrap()),
    )
}

const RPING_COUNT: u32 = 20;
const RPING_SIZE: usize = 3000;

/// `rping -s` on rxe, our CM as rping's client: per ping, SEND the start buffer's address
/// (the server READs it), wait for the go-ahead, SEND the sink's (the server WRITEs the data
/// back), wait, compare; then disconnect from our side. The server prints what it read
/// (`-v`): every ping must be there.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_cm_client_pings_rping_server_and_disconnects() {
    cm_on_wire(CmSide::active("rping_server", 1), |rig| {
        let dev = rig.dev;
        let server =
            peer_runs(&format!("rping -s -a {} -v -V -C {RPING_COUNT} -S {RPING_SIZE}", theirs()));
        let start_buf = dev.reg(RPING_SIZE, ALL).unwrap();
        let sink = dev.reg(RPING_SIZE, ALL).unwrap();
        let send = dev.reg(16, Access::LOCAL_WRITE).unwrap();
        let mut recv = dev.reg(16, Access::LOCAL_WRITE).unwrap();
        let (id, mut qp) = rig.connect(RPING_PORT);
        let mut r = qp.post_recv(0, recv.dest().unwrap()).map_err(|r| r.error).unwrap();
        for n in 0..RPING_COUNT {
            let msg = rping_msg(n, RPING_SIZE);
            start_buf.write(0, &msg).unwrap();
            sink.write(0, &vec![0u8; RPING_SIZE]).unwrap();
            for (k, region) in [&start_buf, &sink].into_iter().enumerate() {
                let at = region.remote(0);
                send.write(0, &rping_adv(at.addr, at.rkey.0, RPING_SIZE as u32)).unwrap();
                qp.post_send(1, send.slice(0, 16).unwrap(), SIG).unwrap();
                wait_send(&mut qp, 1, WcOpcode::Send, 16);
                recv_ok(&mut qp, 16);
                let d = r.reclaim(&qp).unwrap_or_else(|_| panic!("ping {n}: receive handed back"));
                // The server's go-ahead is its zeroed send buffer.
                assert_eq!(contents(&d, 16), [0u8; 16], "ping {n} go-ahead {k}");
                r = qp.post_recv(0, d).map_err(|r| r.error).unwrap();
            }
            let mut got = vec![0u8; RPING_SIZE];
            sink.read(0, &mut got).unwrap();
            assert!(got == msg, "ping {n}: the server wrote back what it read");
        }
        // rping -s never disconnects first: nothing may have come from its CM meanwhile.
        assert_eq!(
            rig.cm.poll(rig.now(), std::slice::from_mut(&mut qp)),
            None,
            "{:?}",
            rig.cm.stats()
        );
        rig.cm.disconnect(id, &mut qp, rig.now()).unwrap();
        let e = rig.pump(std::slice::from_mut(&mut qp));
        assert_eq!(e, Event { id, kind: EventKind::Disconnected });
        let (ok, out) = rping_finish(server, "rping -s");
        if !ok {
            dmesg_tail();
        }
        assert!(ok, "rping -s failed");
        let seen = out.lines().filter(|l| l.starts_with("server ping data: rdma-ping-")).count();
        assert_eq!(seen, RPING_COUNT as usize, "the server printed every ping");
        rig.no_cm_errors();
        drop(r);
    });
}

/// `rping -c -V` on rxe against our listener on 7174, our side as rping's server: READ the
/// client's start buffer, check it is ping n, SEND the go-ahead, WRITE it into the client's
/// sink, SEND the go-ahead; the client compares every byte (`-V`) and disconnects.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_rping_client_pings_cm_listener_and_disconnects() {
    rping_server_side("rping_client", false);
}

/// As above, but we leave the request unanswered until the client's kernel sends its REQ
/// again (after 2 × 2^(16−8) + 2^(20−8) ms): our CM answers the repeat with an MRA (service
/// timeout 24), the kernel then waits without sending more, and the connection accepted
/// seconds later works.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_rping_client_waits_on_our_mra_while_we_delay_accepting() {
    rping_server_side("rping_client_mra", true);
}

fn rping_server_side(name: &'static str, delay_accept: bool) {
    cm_on_wire(CmSide::listening(name, 2, RPING_PORT), |rig| {
        let dev = rig.dev;
        let mut rd = dev.reg(RPING_SIZE, Access::LOCAL_WRITE).unwrap();
        let wr = dev.reg(RPING_SIZE, Access::LOCAL_WRITE).unwrap();
        let send = dev.reg(16, Access::LOCAL_WRITE).unwrap();
        send.write(0, &[0u8; 16]).unwrap();
        let mut recv = dev.reg(16, Access::LOCAL_WRITE).unwrap();
        let client =
            peer_runs(&format!("rping -c -a {} -v -V -C {RPING_COUNT} -S {RPING_SIZE}", ours()));
        let id = rig.await_request(RPING_PORT);
        if delay_accept {
            let t0 = Instant::now();
            while rig.cm.stats().duplicates == 0 {
                assert_eq!(rig.poll(), None);
                assert!(t0.elapsed() < PATIENCE, "no repeated REQ; {:?}", rig.cm.stats());
                std::thread::sleep(Duration::from_millis(1));
            }
            let (first_repeat, sent) = (t0.elapsed(), rig.cm.stats().sent);
            assert_eq!(sent, 1, "one MRA for the repeated REQ: {:?}", rig.cm.stats());
            // Longer than the kernel's REQ timeout again: the MRA holds it.
            let t1 = Instant::now();
            while t1.elapsed() < Duration::from_secs(6) {
                assert_eq!(rig.poll(), None);
                std::thread::sleep(Duration::from_millis(1));
            }
            let s = rig.cm.stats();
            assert_eq!((s.duplicates, s.sent), (1, 1), "the kernel waited on the MRA: {s:?}");
            eprintln!("repeated REQ after {first_repeat:?}; accepting {:?} later", t1.elapsed());
        }
        let (mut qp, mut r) = rig.accept(id, &[], recv.dest().unwrap());
        let mut dest = Some(rd.dest().unwrap());
        for n in 0..RPING_COUNT {
            let msg = rping_msg(n, RPING_SIZE);
            for k in 0..2 {
                recv_ok(&mut qp, 16);
                let d = r.reclaim(&qp).unwrap_or_else(|_| panic!("ping {n}: receive handed back"));
                let (addr, rkey, len) = parse_adv(&contents(&d, 16));
                assert_eq!(len as usize, RPING_SIZE, "ping {n} advertisement {k}");
                r = qp.post_recv(0, d).map_err(|r| r.error).unwrap();
                let remote = rdma_pmd::RemoteBuf::new(addr, rdma_pmd::Rkey(rkey));
                if k == 0 {
                    let p = qp
                        .post_read(2, dest.take().unwrap(), SIG, remote)
                        .map_err(|r| r.error)
                        .unwrap();
                    wait_send(&mut qp, 2, WcOpcode::RdmaRead, RPING_SIZE);
                    let back = p.reclaim(&qp).unwrap_or_else(|_| panic!("READ {n} handed back"));
                    assert!(contents(&back, RPING_SIZE) == msg, "ping {n}: the client's bytes");
                    wr.write(0, &contents(&back, RPING_SIZE)).unwrap();
                    dest = Some(back);
                } else {
                    qp.post_write(3, wr.slice(0, RPING_SIZE).unwrap(), SIG, remote).unwrap();
                    wait_send(&mut qp, 3, WcOpcode::RdmaWrite, RPING_SIZE);
                }
                qp.post_send(4, send.slice(0, 16).unwrap(), SIG).unwrap();
                if (n, k) != (RPING_COUNT - 1, 1) {
                    wait_send(&mut qp, 4, WcOpcode::Send, 16);
                }
            }
        }
        // The last go-ahead ends the client's last ping; its DREQ follows.
        if !rig.last_send(&mut qp, id, 4) {
            let e = rig.pump(std::slice::from_mut(&mut qp));
            assert_eq!(e, Event { id, kind: EventKind::Disconnected }, "the client's DREQ");
        }
        let (ok, out) = rping_finish(client, "rping -c");
        if !ok {
            dmesg_tail();
        }
        assert!(ok, "rping -c failed (it compares every byte)");
        let seen = out.lines().filter(|l| l.starts_with("ping data: rdma-ping-")).count();
        assert_eq!(seen, RPING_COUNT as usize, "the client printed every ping");
        rig.no_cm_errors();
        drop(r);
    });
}

// ---- rdma_server and rdma_client ----

/// `rdma_server` on rxe, our CM as `rdma_client`: SEND 16 bytes, receive its 16 (zeros: its
/// static buffer); the server disconnects once its SEND completed, and we see it.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_cm_client_talks_to_rdma_server_which_disconnects() {
    cm_on_wire(CmSide::active("rdma_server", 5), |rig| {
        let dev = rig.dev;
        let server = peer_runs(&format!("rdma_server -s {}", theirs()));
        let send = dev.reg(16, Access::LOCAL_WRITE).unwrap();
        send.write(0, b"from the mlx5 CM").unwrap();
        let mut recv = dev.reg(16, Access::LOCAL_WRITE).unwrap();
        recv.write(0, &[0xa5; 16]).unwrap();
        let (id, mut qp) = rig.connect(RDMA_SERVER_PORT);
        let r = qp.post_recv(0, recv.dest().unwrap()).map_err(|r| r.error).unwrap();
        qp.post_send(1, send.slice(0, 16).unwrap(), SIG).unwrap();
        wait_send(&mut qp, 1, WcOpcode::Send, 16);
        recv_ok(&mut qp, 16);
        let d = r.reclaim(&qp).unwrap_or_else(|_| panic!("receive handed back"));
        assert_eq!(contents(&d, 16), [0u8; 16], "rdma_server's reply");
        let e = rig.pump(std::slice::from_mut(&mut qp));
        assert_eq!(e, Event { id, kind: EventKind::Disconnected }, "the server's DREQ");
        assert_eq!(qp.state(), QpState::Error);
        let (ok, out) = finish(server, "rdma_server");
        assert!(ok && out.contains("rdma_server: end 0"), "rdma_server failed");
        rig.no_cm_errors();
    });
}

/// `rdma_client` on rxe against our listener on 7471, our side as `rdma_server`: receive its
/// 16 bytes (zeros), SEND 16 back and disconnect as soon as the SEND completed, as
/// `rdma_server` does; the client disconnects once it received, so the DREQs may cross.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_rdma_client_talks_to_cm_listener_and_both_disconnect() {
    rdma_client_side("rdma_client", false);
}

/// As above, but the client's kernel already knows our MAC (a static neighbour), so no ARP
/// request precedes its REQ and our CM has not heard of it: the REQ goes unanswered while our
/// ARP request goes out, and the kernel's next try (2 × 2^(16−8) + 2^(20−8) ms later) is
/// accepted.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_a_request_from_a_peer_not_yet_resolved_is_accepted_on_its_retry() {
    rdma_client_side("rdma_client_unresolved", true);
}

fn rdma_client_side(name: &'static str, peer_knows_us: bool) {
    cm_on_wire(CmSide::listening(name, 6, RDMA_SERVER_PORT), |rig| {
        let dev = rig.dev;
        if peer_knows_us {
            common::wire::peer_knows_us();
        }
        let send = dev.reg(16, Access::LOCAL_WRITE).unwrap();
        send.write(0, b"mlx5 CM listener").unwrap();
        let mut recv = dev.reg(16, Access::LOCAL_WRITE).unwrap();
        recv.write(0, &[0xa5; 16]).unwrap();
        let client = peer_runs(&format!("rdma_client -s {}", ours()));
        let start = Instant::now();
        let id = rig.await_request(RDMA_SERVER_PORT);
        let s = rig.cm.stats();
        if peer_knows_us {
            assert_eq!((s.received, s.unresolved), (2, 1), "the first REQ unanswered: {s:?}");
            assert_eq!(s.sent, 0, "{s:?}");
            eprintln!("the repeated REQ came {:?} after the start", start.elapsed());
        } else {
            assert_eq!((s.received, s.unresolved), (1, 0), "{s:?}");
        }
        let (mut qp, r) = rig.accept(id, &[], recv.dest().unwrap());
        recv_ok(&mut qp, 16);
        let d = r.reclaim(&qp).unwrap_or_else(|_| panic!("receive handed back"));
        assert_eq!(contents(&d, 16), [0u8; 16], "rdma_client's message");
        qp.post_send(1, send.slice(0, 16).unwrap(), SIG).unwrap();
        if !rig.last_send(&mut qp, id, 1) {
            rig.cm.disconnect(id, &mut qp, rig.now()).unwrap();
            let e = rig.pump(std::slice::from_mut(&mut qp));
            assert_eq!(e, Event { id, kind: EventKind::Disconnected });
        }
        let (ok, out) = finish(client, "rdma_client");
        assert!(ok && out.contains("rdma_client: end 0"), "rdma_client failed");
        let s = rig.cm.stats();
        let unresolved = u64::from(peer_knows_us);
        assert_eq!((s.malformed, s.send_errors, s.unresolved), (0, 0, unresolved), "{s:?}");
    });
}

/// `rdma_client` against our listener, which rejects it (`rdma_reject` with private data):
/// its `rdma_connect` fails with `ECONNREFUSED`.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_rdma_client_is_rejected_by_cm_listener() {
    cm_on_wire(CmSide::listening("rdma_client_rejected", 11, RDMA_SERVER_PORT), |rig| {
        let client = peer_runs(&format!("rdma_client -s {}", ours()));
        let id = rig.await_request(RDMA_SERVER_PORT);
        rig.cm.reject(id, b"not today").unwrap();
        assert_eq!(rig.cm.live(), 0);
        let (ok, out) = finish(client, "rdma_client");
        assert!(!ok, "rdma_client connected");
        assert!(out.contains("rdma_connect: Connection refused"), "{out}");
        let s = rig.cm.stats();
        assert_eq!((s.sent, s.malformed, s.send_errors), (1, 0, 0), "{s:?}");
    });
}

// ---- the project's rdma_post_writev program ----

/// `examples/c/cm_writev.c`'s region, messages and plan.
mod writev {
    pub const PORT: u16 = 7472;
    pub const REGION_LEN: usize = 256 * 1024;
    pub const MSG_LEN: usize = 16;
    pub const WRITE_LENS: [usize; 11] = [1, 2, 3, 64, 100, 1000, 1024, 1025, 4096, 5000, 16384];

    pub fn pattern(seed: u32, i: u64) -> u8 {
        (i.wrapping_mul(131).wrapping_add(u64::from(seed) * 7).wrapping_add(i >> 8)) as u8
    }

    /// A WRITE's SGL: (offset in the region's image, length, from the second buffer).
    pub type Sgl = Vec<(usize, usize, bool)>;

    /// Each WRITE: its offset in the region and its SGL.
    pub fn plan() -> Vec<(usize, Sgl)> {
        let (mut off, mut k, mut out) = (0, 0, Vec::new());
        while off < REGION_LEN {
            let len = WRITE_LENS[k % WRITE_LENS.len()].min(REGION_LEN - off);
            let third = len / 3;
            let sgl = if len >= 3 {
                vec![
                    (off, third, false),
                    (off + third, third, true),
                    (off + 2 * third, len - 2 * third, false),
                ]
            } else {
                vec![(off, len, false)]
            };
            out.push((off, sgl));
            off += len;
            k += 1;
        }
        out
    }
}

/// `cm_writev -s` on rxe, our CM as its client: the advertisement from the REP's private
/// data, the plan's WRITEs (SGLs of three elements from two regions), "done"; the server
/// compares its region and answers "ok"; we disconnect.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_cm_client_writev_into_cm_writev_server() {
    use writev::*;
    cm_on_wire(CmSide::active("cm_writev_server", 7), |rig| {
        let dev = rig.dev;
        let seed = 13u32;
        let server = peer_runs(&format!("/t/cm_writev -s {} -p {PORT} -S {seed}", theirs()));
        let image: Vec<u8> = (0..REGION_LEN as u64).map(|i| pattern(seed, i)).collect();
        let a = dev.reg(REGION_LEN, Access::LOCAL_WRITE).unwrap();
        let b = dev.reg(REGION_LEN, Access::LOCAL_WRITE).unwrap();
        a.write(0, &image).unwrap();
        b.write(0, &image).unwrap();
        let msg = dev.reg(MSG_LEN, Access::LOCAL_WRITE).unwrap();
        let mut verdict = dev.reg(MSG_LEN, Access::LOCAL_WRITE).unwrap();
        let (id, mut qp) = rig.connect(PORT);
        let (addr, rkey, len) =
            parse_adv(&rig.cm.private_data(id).expect("the REP's private data")[..16]);
        assert_eq!(len as usize, REGION_LEN, "the server's advertisement");
        let remote = rdma_pmd::RemoteBuf::new(addr, rdma_pmd::Rkey(rkey));
        let r = qp.post_recv(0, verdict.dest().unwrap()).map_err(|r| r.error).unwrap();
        let plan = plan();
        for (k, (off, sgl)) in plan.iter().enumerate() {
            let bufs: Vec<_> = sgl
                .iter()
                .map(|&(at, n, second)| {
                    if second { b.slice(at, n) } else { a.slice(at, n) }.unwrap()
                })
                .collect();
            qp.post_writev(k as u64, &bufs, SIG, remote.offset(*off as u64)).unwrap();
            wait_send(&mut qp, k as u64, WcOpcode::RdmaWrite, 0);
        }
        let mut m = [0u8; MSG_LEN];
        m[..4].copy_from_slice(b"done");
        m[4..8].copy_from_slice(&(plan.len() as u32).to_be_bytes());
        m[8..].copy_from_slice(&(REGION_LEN as u64).to_be_bytes());
        msg.write(0, &m).unwrap();
        qp.post_send(9999, msg.slice(0, MSG_LEN).unwrap(), SIG).unwrap();
        wait_send(&mut qp, 9999, WcOpcode::Send, MSG_LEN);
        let c = wait_recv(&mut qp);
        assert_eq!((c.status, c.byte_len as usize), (WcStatus::Success, MSG_LEN), "{c:?}");
        let v =
            contents(&r.reclaim(&qp).unwrap_or_else(|_| panic!("verdict handed back")), MSG_LEN);
        rig.cm.disconnect(id, &mut qp, rig.now()).unwrap();
        let e = rig.pump(std::slice::from_mut(&mut qp));
        assert_eq!(e, Event { id, kind: EventKind::Disconnected });
        let (ok, out) = finish(server, "cm_writev -s");
        assert_eq!(&v[..3], b"ok\0", "the server's verdict: {v:?}");
        assert!(ok && out.contains("region ok"), "cm_writev -s failed");
    });
}

/// `cm_writev -c` on rxe against our listener: our region advertised in the REP, the
/// client's WRITEs land in it; on "done" we compare every byte, answer, and see the client's
/// disconnect.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_cm_writev_client_writes_into_cm_listener() {
    use writev::*;
    cm_on_wire(CmSide::listening("cm_writev_client", 8, PORT), |rig| {
        let dev = rig.dev;
        let seed = 14u32;
        let region = dev.reg(REGION_LEN, TARGET).unwrap();
        let mut done = dev.reg(MSG_LEN, Access::LOCAL_WRITE).unwrap();
        let verdict = dev.reg(MSG_LEN, Access::LOCAL_WRITE).unwrap();
        let client = peer_runs(&format!("/t/cm_writev -c {} -p {PORT} -S {seed}", ours()));
        let id = rig.await_request(PORT);
        let at = region.remote(0);
        let adv = rping_adv(at.addr, at.rkey.0, REGION_LEN as u32);
        let (mut qp, r) = rig.accept(id, &adv, done.dest().unwrap());
        let c = wait_recv(&mut qp);
        assert_eq!((c.status, c.byte_len as usize), (WcStatus::Success, MSG_LEN), "{c:?}");
        let m = contents(&r.reclaim(&qp).unwrap_or_else(|_| panic!("done handed back")), MSG_LEN);
        assert_eq!(&m[..4], b"done");
        let writes = u32::from_be_bytes(m[4..8].try_into().unwrap());
        let bytes = u64::from_be_bytes(m[8..].try_into().unwrap());
        assert_eq!((writes as usize, bytes as usize), (plan().len(), REGION_LEN));
        let mut got = vec![0u8; REGION_LEN];
        region.read(0, &mut got).unwrap();
        let bad = (0..REGION_LEN).find(|&i| got[i] != pattern(seed, i as u64));
        let mut v = [0u8; MSG_LEN];
        match bad {
            None => v[..2].copy_from_slice(b"ok"),
            Some(i) => {
                v[..3].copy_from_slice(b"bad");
                v[8..].copy_from_slice(&(i as u64).to_be_bytes());
            }
        }
        verdict.write(0, &v).unwrap();
        qp.post_send(1, verdict.slice(0, MSG_LEN).unwrap(), SIG).unwrap();
        if !rig.last_send(&mut qp, id, 1) {
            let e = rig.pump(std::slice::from_mut(&mut qp));
            assert_eq!(e, Event { id, kind: EventKind::Disconnected }, "the client's DREQ");
        }
        let (ok, out) = finish(client, "cm_writev -c");
        assert_eq!(bad, None, "region byte {bad:?} differs from the pattern");
        assert!(ok && out.contains("verdict ok"), "cm_writev -c failed");
    });
}

// ---- ucmatose ----

/// ucmatose's defaults on our side: connections, messages each way per connection, bytes.
const UCMA_CONNS: usize = 4;
const UCMA_COUNT: usize = 10;
const UCMA_SIZE: usize = 100;

/// Post `UCMA_COUNT` receives of `UCMA_SIZE` bytes from `region` on `qp`.
fn ucma_recvs<'r>(
    qp: &mut RcQp<'r>,
    region: &'r mut Region<'_, MemBar, D, C>,
) -> Vec<rdma_pmd::Pending<DestBuf<'r>>> {
    let mut rest = region.dest().unwrap();
    let mut out = Vec::new();
    for k in 0..UCMA_COUNT {
        let tail = rest.split_off(UCMA_SIZE).unwrap();
        let slot = std::mem::replace(&mut rest, tail);
        out.push(qp.post_recv(k as u64, slot).map_err(|r| r.error).unwrap());
    }
    out
}

/// Wait for `UCMA_COUNT` receives of `UCMA_SIZE` bytes on `qp` (ucmatose sends bytes it never
/// set: only the lengths are the protocol).
fn ucma_await_recvs(qp: &mut RcQp<'_>, which: usize) {
    for k in 0..UCMA_COUNT {
        let c = wait_recv(qp);
        assert_eq!(
            (c.wr_id, c.status, c.opcode, c.byte_len as usize),
            (k as u64, WcStatus::Success, WcOpcode::Recv, UCMA_SIZE),
            "connection {which}, message {k}"
        );
    }
}

/// SEND `UCMA_COUNT` messages of `UCMA_SIZE` bytes from `src` on `qp`, waiting for each
/// completion but the last's.
fn ucma_sends<'r>(qp: &mut RcQp<'r>, src: &'r Region<'_, MemBar, D, C>) {
    for k in 0..UCMA_COUNT {
        qp.post_send(k as u64, src.slice(k * UCMA_SIZE, UCMA_SIZE).unwrap(), SIG).unwrap();
        if k + 1 < UCMA_COUNT {
            wait_send(qp, k as u64, WcOpcode::Send, UCMA_SIZE);
        }
    }
}

/// `ucmatose` as the server on rxe (four connections, ten 100-byte messages each way), our CM
/// as the client: it SENDs first, we answer with as many, it disconnects every connection.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_cm_client_opens_four_connections_to_ucmatose_server() {
    cm_on_wire(CmSide::active("ucmatose_server", 9), |rig| {
        let dev = rig.dev;
        let server = peer_runs(&format!(
            "ucmatose -b {} -c {UCMA_CONNS} -C {UCMA_COUNT} -S {UCMA_SIZE}",
            theirs()
        ));
        let src = dev.reg(UCMA_COUNT * UCMA_SIZE, Access::LOCAL_WRITE).unwrap();
        src.write(0, &pattern(9, UCMA_COUNT * UCMA_SIZE)).unwrap();
        let mut rxr: Vec<_> = (0..UCMA_CONNS)
            .map(|_| dev.reg(UCMA_COUNT * UCMA_SIZE, Access::LOCAL_WRITE).unwrap())
            .collect();
        let (mut ids, mut qps, mut posted) = (Vec::new(), Vec::new(), Vec::new());
        for region in rxr.iter_mut() {
            let (id, mut qp) = rig.connect(RDMA_SERVER_PORT);
            posted.push(ucma_recvs(&mut qp, region));
            ids.push(id);
            qps.push(qp);
        }
        for (i, qp) in qps.iter_mut().enumerate() {
            ucma_await_recvs(qp, i);
        }
        // Our replies. Each connection's last one is the last message before the server's DREQs
        // (it disconnects them all once every reply came): as in `last_send`, it may be
        // delivered yet never acknowledged, and then completes in error, with the DREQ.
        for qp in qps.iter_mut() {
            ucma_sends(qp, &src);
        }
        // The QPs are lent to the CM, which moves each to ERR on its DREQ (see `last_send`).
        let (mut last, mut gone) = (vec![None; UCMA_CONNS], Vec::new());
        let t0 = Instant::now();
        while last.iter().any(Option::is_none) || gone.len() < UCMA_CONNS {
            match rig.cm.poll(rig.now(), &mut qps[..]) {
                None => {}
                Some(Event { id, kind: EventKind::TimewaitExit }) if gone.contains(&id) => {}
                Some(e) => {
                    assert_eq!(e.kind, EventKind::Disconnected, "{e:?}");
                    assert!(ids.contains(&e.id) && !gone.contains(&e.id), "{e:?}");
                    gone.push(e.id);
                }
            }
            for (l, qp) in last.iter_mut().zip(qps.iter_mut()).filter(|(l, _)| l.is_none()) {
                let mut out = [Completion::default(); 1];
                if qp.poll(&mut out).unwrap() == 1 {
                    assert_eq!(out[0].wr_id, UCMA_COUNT as u64 - 1, "{:?}", out[0]);
                    *l = Some(out[0].status);
                }
            }
            assert!(t0.elapsed() < EXCHANGE, "last replies {last:?}, {} disconnected", gone.len());
        }
        for (i, s) in last.iter().enumerate() {
            let s = s.expect("completed");
            assert!(
                s == WcStatus::Success || matches!(s, WcStatus::WrFlushErr | WcStatus::RetryExcErr),
                "connection {i}: {s:?}"
            );
        }
        assert!(qps.iter().all(|q| q.state() == QpState::Error));
        let (ok, out) = finish(server, "ucmatose (server)");
        assert!(ok && out.contains("data transfers complete"), "ucmatose failed");
        rig.no_cm_errors();
        drop(posted);
    });
}

/// `ucmatose -s` (the client) on rxe against our listener on 7471 with four connections: we
/// accept each, SEND ten messages on each, receive its ten replies, and disconnect them all.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_ucmatose_client_opens_four_connections_to_cm_listener() {
    cm_on_wire(CmSide::listening("ucmatose_client", 10, RDMA_SERVER_PORT), |rig| {
        let dev = rig.dev;
        let src = dev.reg(UCMA_COUNT * UCMA_SIZE, Access::LOCAL_WRITE).unwrap();
        src.write(0, &pattern(10, UCMA_COUNT * UCMA_SIZE)).unwrap();
        let mut rxr: Vec<_> = (0..UCMA_CONNS)
            .map(|_| dev.reg(UCMA_COUNT * UCMA_SIZE, Access::LOCAL_WRITE).unwrap())
            .collect();
        let mut qps: Vec<RcQp> =
            (0..UCMA_CONNS).map(|_| dev.create_qp(&QpConfig::default()).unwrap()).collect();
        let client = peer_runs(&format!(
            "ucmatose -s {} -c {UCMA_CONNS} -C {UCMA_COUNT} -S {UCMA_SIZE}",
            ours()
        ));
        let (mut ids, mut posted, mut established) = (Vec::new(), Vec::new(), 0);
        let mut regions = rxr.iter_mut();
        let t0 = Instant::now();
        while established < UCMA_CONNS {
            assert!(t0.elapsed() < PATIENCE, "{} accepted, {established} up", ids.len());
            let Some(e) = rig.cm.poll(rig.now(), &mut qps[..]) else {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            };
            match e.kind {
                EventKind::ConnectRequest => {
                    let r = rig.cm.get_request(e.id).unwrap();
                    assert_eq!((r.peer.ip(), r.port), (IpAddr::V4(theirs()), RDMA_SERVER_PORT));
                    let qp = &mut qps[ids.len()];
                    rig.cm.accept(e.id, qp, &AcceptParams::default(), rig.now()).unwrap();
                    posted.push(ucma_recvs(qp, regions.next().expect("a region")));
                    ids.push(e.id);
                }
                EventKind::Established => {
                    assert!(ids.contains(&e.id), "{e:?}");
                    established += 1;
                }
                k => panic!("{k:?}"),
            }
        }
        for qp in qps.iter_mut() {
            ucma_sends(qp, &src);
            wait_send(qp, UCMA_COUNT as u64 - 1, WcOpcode::Send, UCMA_SIZE);
        }
        for (i, qp) in qps.iter_mut().enumerate() {
            ucma_await_recvs(qp, i);
        }
        for (id, qp) in ids.iter().zip(qps.iter_mut()) {
            rig.cm.disconnect(*id, qp, rig.now()).unwrap();
        }
        rig.await_each(&mut qps, UCMA_CONNS, EventKind::Disconnected);
        let (ok, out) = finish(client, "ucmatose (client)");
        assert!(ok && out.contains("data transfers complete"), "ucmatose -s failed");
        rig.no_cm_errors();
        drop(posted);
    });
}

// ---- many connections at once ----

/// Connections `cmtime` opens and closes at once.
const CMTIME_CONNS: usize = 100;

/// What the peer kernel's CM sent again after a timeout, summed over its message types
/// (`rig.cm.c`'s `cm_tx_retries` counters of the rxe device's port 1: a group of the port's
/// attributes since Linux 5.14, under `infiniband_cm` before).
fn peer_cm_retries() -> u64 {
    let dirs = [
        "/sys/class/infiniband/rxep/ports/1/cm_tx_retries",
        "/sys/class/infiniband_cm/rxep/1/cm_tx_retries",
    ];
    let dir = dirs
        .iter()
        .find(|d| std::path::Path::new(d).is_dir())
        .unwrap_or_else(|| panic!("the peer's CM counters: none of {dirs:?}"));
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{dir}: {e}"));
    entries
        .map(|e| {
            let p = e.unwrap().path();
            let t = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            t.trim().parse::<u64>().unwrap_or_else(|e| panic!("{}: {t:?}: {e}", p.display()))
        })
        .sum()
}

/// `cmtime` (rdma-core's connection-rate test) as the client on rxe: 100 REQs at once to our
/// listener, which accepts each on a QP of its own, then 100 DREQs at once. Everything must
/// fit the first time: our CM retransmits nothing, drops nothing at its receive ring, and the
/// peer kernel's CM retransmits nothing either. (The model gets enough UAR pages for 100 QPs,
/// each of which takes a page of its own today.)
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_cmtime_client_opens_and_closes_100_connections_at_once_without_retries() {
    let model = ModelConfig { uar_pages: 256, ..ModelConfig::default() };
    let side = CmSide { model, ..CmSide::listening("cmtime", 12, RDMA_SERVER_PORT) };
    cm_on_wire_sized::<128, 256>(side, |rig| {
        let dev = rig.dev;
        let mut qps: Vec<RcQp> =
            (0..CMTIME_CONNS).map(|_| dev.create_qp(&QpConfig::default()).unwrap()).collect();
        let retries_before = peer_cm_retries();
        let client = peer_runs(&format!("cmtime -s {} -c {CMTIME_CONNS}", ours()));
        let (mut accepted, mut up, mut down) = (Vec::new(), 0, 0);
        let t0 = Instant::now();
        while down < CMTIME_CONNS {
            assert!(
                t0.elapsed() < PATIENCE,
                "{} accepted, {up} up, {down} down; {:?}",
                accepted.len(),
                rig.cm.stats()
            );
            let Some(e) = rig.cm.poll(rig.now(), &mut qps[..]) else {
                std::thread::sleep(Duration::from_micros(100));
                continue;
            };
            match e.kind {
                EventKind::ConnectRequest => {
                    assert!(accepted.len() < CMTIME_CONNS, "more requests than connections: {e:?}");
                    let qp = &mut qps[accepted.len()];
                    rig.cm.accept(e.id, qp, &AcceptParams::default(), rig.now()).unwrap();
                    accepted.push(e.id);
                }
                EventKind::Established => {
                    assert!(accepted.contains(&e.id), "{e:?}");
                    up += 1;
                }
                EventKind::Disconnected => {
                    assert!(accepted.contains(&e.id), "{e:?}");
                    down += 1;
                }
                EventKind::TimewaitExit => {}
                k => panic!("{k:?}"),
            }
        }
        assert_eq!(up, CMTIME_CONNS);
        let (ok, out) = finish(client, "cmtime (client)");
        assert!(ok && out.contains("disconnect"), "cmtime -s failed");
        let s = rig.cm.stats();
        let g = rig.cm.port_mut().gsi_mut().stats();
        eprintln!("our CM: {s:?}; the GSI port: {g:?}");
        assert_eq!(
            (s.retransmits, s.duplicates, s.send_errors, s.malformed),
            (0, 0, 0, 0),
            "{s:?}"
        );
        assert_eq!((g.ring_exhausted, g.dropped, g.send_full), (0, 0, 0), "{g:?}");
        assert_eq!(peer_cm_retries(), retries_before, "the peer's CM retransmitted");
    });
}

/// `udaddy` (UD over rdma_cm) asks our CM to resolve a UD service with SIDR_REQs. UD service
/// resolution is not supported here, so each is answered at once with a SIDR_REP that refuses
/// it: udaddy reports UNREACHABLE and exits long before its own retries (about 70 s) would end.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_udaddy_is_refused_at_once_by_a_sidr_rep() {
    cm_on_wire(CmSide::listening("udaddy", 13, RPING_PORT), |rig| {
        let mut child = peer_runs(&format!("udaddy -s {}", ours()));
        let start = Instant::now();
        while child.try_wait().unwrap().is_none() {
            assert!(start.elapsed() < EXCHANGE, "udaddy still waiting; {:?}", rig.cm.stats());
            assert_eq!(rig.cm.poll(rig.now(), &mut NoQps), None);
            std::thread::sleep(Duration::from_micros(200));
        }
        let (ok, out) = finish(child, "udaddy (client)");
        assert!(!ok && out.contains("RDMA_CM_EVENT_UNREACHABLE"), "udaddy was not refused");
        let s = rig.cm.stats();
        assert!(s.sidr_refused >= 1, "{s:?}");
        assert_eq!((s.malformed, s.send_errors, rig.cm.live()), (0, 0, 0), "{s:?}");
    });
}

// ---- refused and unreachable ----

/// A port nobody listens on at the peer: its kernel's REJ (invalid service ID) comes back as
/// `ECONNREFUSED`.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_cm_connect_to_a_port_nobody_listens_on_is_refused() {
    cm_on_wire(CmSide::active("refused", 3), |rig| {
        let dev = rig.dev;
        let start = Instant::now();
        let mut qp: RcQp = dev.create_qp(&QpConfig::default()).unwrap();
        let remote = SocketAddr::new(IpAddr::V4(theirs()), 9);
        let mac = rig.mac.expect("the peer's MAC");
        let id = rig.cm.connect(&mut qp, &connect_params(remote, mac, &[]), rig.now()).unwrap();
        let e = rig.pump(std::slice::from_mut(&mut qp));
        assert_eq!(
            e,
            Event { id, kind: EventKind::Rejected { reason: RejReason::InvalidServiceId } }
        );
        assert_eq!(e.kind.errno(), Some(Errno::ECONNREFUSED));
        assert!(start.elapsed() < Duration::from_secs(5), "a REJ, not a timeout");
        assert_eq!(rig.cm.live(), 0);
    });
}

/// An address that never answers (a static neighbour to a MAC nobody has): the REQ and its
/// retries go out, and the connection fails with `ETIMEDOUT` within the configured bound.
#[test]
#[ignore = "needs the wire tier's veth pair and an rxe peer"]
fn on_wire_cm_connect_to_an_address_that_never_answers_times_out_within_the_bound() {
    // 2 × 2^(10-8) + 2^(16-8) = 264 ms a try, 3 tries.
    let cm = CmConfig {
        cm_response_timeout: 16,
        packet_life_time: 10,
        max_cm_retries: 2,
        ..CmConfig::new(CA_GUID, 4)
    };
    cm_on_wire(CmSide { cm, ..CmSide::new("unreachable", 4) }, |rig| {
        let dev = rig.dev;
        let ghost = Ipv4Addr::new(10, 3, 0, 99);
        let hole = Mac([0x02, 0x00, 0x00, 0xde, 0xad, 0x99]);
        rig.cm.port_mut().gsi_mut().add_neighbour(Gid::from_ipv4(ghost.octets()), hole).unwrap();
        let start = Instant::now();
        let mut qp: RcQp = dev.create_qp(&QpConfig::default()).unwrap();
        let p = ConnectParams {
            remote_gid: Gid::from_ipv4(ghost.octets()),
            ..connect_params(SocketAddr::new(IpAddr::V4(ghost), RPING_PORT), hole, &[])
        };
        let id = rig.cm.connect(&mut qp, &p, rig.now()).unwrap();
        let e = rig.pump(std::slice::from_mut(&mut qp));
        let took = start.elapsed();
        assert_eq!(e, Event { id, kind: EventKind::Unreachable });
        assert_eq!(e.kind.errno(), Some(Errno::ETIMEDOUT));
        let s = rig.cm.stats();
        assert_eq!((s.sent, s.retransmits, s.received), (3, 2, 0), "{s:?}");
        assert!(took >= Duration::from_millis(3 * 264), "three tries of 264 ms: {took:?}");
        assert!(took < Duration::from_secs(3), "within the bound: {took:?}");
        assert_eq!(rig.cm.live(), 0);
    });
}
