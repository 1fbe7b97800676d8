//! End-to-end: the verbs family on the software mlx5 model (RDMA READ, SEND/RECV with scatter
//! lists, immediate data, inline sends, atomics, UD datagrams to a QP number and to QP1), with
//! both sides' bytes checked, every request completing exactly once, buffers the device writes
//! handed back only after their completion, and the error completions hardware gives for bad
//! requests.

mod common;

use std::sync::Arc;
use std::time::Instant;

use common::*;
use rdma_pmd::{
    Completion, DestBuf, Errno, Error, Gid, LocalBuf, Mac, Post, QpNum, RecvQueue, RemoteBuf,
    RoceAddr, SendFlags, SendQueue, Source, UdDest, WcOpcode, WcStatus, GSI_QKEY,
};
use rdma_pmd_hal::mem::{HeapDma, MemBar};
use rdma_pmd_mlx5::control::{Access, Control, Path, Service};
use rdma_pmd_mlx5::{ConnectOpts, Mlx5, Qp, QpConfig, SharedDma};
use rdma_pmd_mlx5_model::{Model, ModelConfig, Wire};

const SIG: SendFlags = SendFlags::SIGNALED;
const NONE: SendFlags = SendFlags::empty();
const ALL: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC);

type D = SharedDma<Arc<HeapDma>>;
type Q<'r, C> = Qp<'r, MemBar, D, C, 64, 16, 4>;

fn opts() -> ConnectOpts {
    ConnectOpts { access: ALL, ..ConnectOpts::default() }
}

/// Two RC QPs of `dev` connected in loopback with `opts`.
fn rc_pair_with<'d, C: Control>(
    dev: &'d Mlx5<MemBar, D, C>,
    opts: &ConnectOpts,
) -> (Q<'d, C>, Q<'d, C>) {
    let cfg = QpConfig::default();
    let mut a = dev.create_qp_with::<64, 16, 4>(&cfg).expect("qp a");
    let mut b = dev.create_qp_with::<64, 16, 4>(&cfg).expect("qp b");
    let (na, nb) = (a.qp_num(), b.qp_num());
    a.connect(nb, Path::Loopback, opts).expect("connect a");
    b.connect(na, Path::Loopback, opts).expect("connect b");
    (a, b)
}

fn rc_pair<C: Control>(dev: &Mlx5<MemBar, D, C>) -> (Q<'_, C>, Q<'_, C>) {
    rc_pair_with(dev, &opts())
}

/// Poll the receive side until `n` completions arrived, then check no more come.
fn wait_recv<'r, R: RecvQueue<'r>>(q: &mut R, n: usize) -> Vec<Completion> {
    let mut got = Vec::new();
    let mut out = [Completion::default(); 16];
    let start = Instant::now();
    while got.len() < n {
        let k = q.poll_recv(&mut out).expect("poll_recv");
        got.extend_from_slice(&out[..k]);
        assert!(start.elapsed() < WAIT, "only {} of {n} receive completions", got.len());
        if k == 0 {
            std::thread::yield_now();
        }
    }
    for _ in 0..100 {
        assert_eq!(q.poll_recv(&mut out).unwrap(), 0, "unexpected receive completion");
    }
    assert_eq!(got.len(), n, "more receive completions than expected: {got:?}");
    got
}

fn contents(d: &DestBuf<'_>) -> Vec<u8> {
    let mut v = vec![0u8; d.len()];
    d.read(0, &mut v).unwrap();
    v
}

/// Split `d` into pieces of `lens` bytes; whatever is left is returned last.
fn carve<'r>(mut d: DestBuf<'r>, lens: &[usize]) -> (Vec<DestBuf<'r>>, DestBuf<'r>) {
    let mut out = Vec::new();
    for &l in lens {
        let rest = d.split_off(l).unwrap();
        out.push(d);
        d = rest;
    }
    (out, d)
}

#[test]
fn readv_with_1_to_max_sges_fills_every_piece_after_its_completion() {
    let model = Model::new();
    let dev = open(&model);
    let src = dev.reg(16384, ALL).unwrap();
    let data = pattern(7, 16384);
    src.write(0, &data).unwrap();
    let mut dst = dev.reg(1 << 20, Access::LOCAL_WRITE).unwrap();
    let (mut a, _b) = rc_pair(&dev);
    let max = a.caps().max_sge as usize;
    assert!(max >= 16, "a 64-block ring holds long scatter lists");
    // Each round carves its pieces from what the earlier rounds left.
    let mut left = dst.dest().unwrap();
    for n in 1..=max {
        let lens: Vec<usize> = (0..n).map(|i| 1 + (i * 37 + n) % 200).collect();
        let total: usize = lens.iter().sum();
        let (bufs, rest) = carve(left, &lens);
        left = rest;
        let at = n * 5;
        let p = a.post_readv(n as u64, bufs, SIG, src.remote(at)).unwrap();
        // Not reaped yet: the buffers stay out of reach, whatever the device has done.
        let p = p.reclaim(&a).unwrap_err();
        let c = wait(&mut a, 1);
        assert_eq!(
            (c[0].wr_id, c[0].status, c[0].opcode),
            (n as u64, WcStatus::Success, WcOpcode::RdmaRead)
        );
        assert_eq!(c[0].byte_len as usize, total);
        let back = p.reclaim(&a).unwrap();
        let mut off = at;
        for (b, l) in back.iter().zip(&lens) {
            assert_eq!(contents(b), &data[off..off + l], "a piece of a {n}-element READ");
            off += l;
        }
        assert_eq!(back[0].region().in_flight(), 0, "the completion released the region");
    }
    // The source was only read.
    assert_eq!(bytes(&src, 0, 16384), data);
    quiet(&mut a);
    clean(&model);
}

#[test]
fn sendv_and_recvv_scatter_on_both_ends_with_immediate_and_inline_sends() {
    let model = Model::new();
    let dev = open(&model);
    let src = dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let data = pattern(11, 4096);
    src.write(0, &data).unwrap();
    let mut rx = dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let (mut a, mut b) = rc_pair(&dev);
    let (pieces, rest) = carve(rx.dest().unwrap(), &[100, 7, 300, 1000]);
    let mut pieces = pieces.into_iter();
    let r0: [DestBuf<'_>; 3] =
        [pieces.next().unwrap(), pieces.next().unwrap(), pieces.next().unwrap()];
    let r1 = pieces.next().unwrap();
    let (r2, r3) = {
        let mut r2 = rest;
        let r3 = r2.split_off(64).unwrap();
        (r2, r3)
    };
    let p0 = b.post_recvv(10, r0).unwrap();
    let p1 = b.post_recv(11, r1).unwrap();
    let p2 = b.post_recv(12, r2).unwrap();
    let p3 = b.post_recvv(13, vec![r3]).unwrap();
    // A gather of three pieces (407 bytes) into a scatter of 100 + 7 + 300.
    let sgl =
        [src.slice(0, 200).unwrap(), src.slice(1000, 7).unwrap(), src.slice(2000, 200).unwrap()];
    a.post_sendv(1, &sgl, SIG).unwrap();
    a.post_send_imm(2, &[src.slice(3000, 999).unwrap()], SIG, 0xabad_cafe).unwrap();
    a.post_send_inline(3, &[b"inline ", b"bytes"], SIG).unwrap();
    a.post_send_imm(4, &[], SIG, 7).unwrap();
    let sent = wait(&mut a, 4);
    assert!(sent.iter().all(|c| c.status == WcStatus::Success && c.opcode == WcOpcode::Send));
    let got = wait_recv(&mut b, 4);
    let ids: Vec<u64> = got.iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, [10, 11, 12, 13]);
    assert!(got.iter().all(|c| c.status == WcStatus::Success && c.opcode == WcOpcode::Recv));
    assert_eq!(got.iter().map(|c| c.byte_len).collect::<Vec<_>>(), [407, 999, 12, 0]);
    assert_eq!(
        got.iter().map(|c| c.imm).collect::<Vec<_>>(),
        [None, Some(0xabad_cafe), None, Some(7)]
    );
    let [s0, s1, s2] = p0.reclaim(&b).unwrap();
    let mut want = data[..200].to_vec();
    want.extend_from_slice(&data[1000..1007]);
    want.extend_from_slice(&data[2000..2200]);
    assert_eq!(contents(&s0), &want[..100]);
    assert_eq!(contents(&s1), &want[100..107]);
    assert_eq!(contents(&s2), &want[107..]);
    assert_eq!(contents(&p1.reclaim(&b).unwrap())[..999], data[3000..3999]);
    assert_eq!(&contents(&p2.reclaim(&b).unwrap())[..12], b"inline bytes");
    let r3 = p3.reclaim(&b).unwrap();
    assert_eq!(r3[0].region().in_flight(), 0);
    quiet(&mut a);
    clean(&model);
}

/// The 8 bytes at `off` of a region as the HCA keeps an atomic's operand: big-endian.
fn remote_u64<M: rdma_pmd_hal::Mmio, C: Control>(
    r: &rdma_pmd_mlx5::Region<'_, M, D, C>,
    off: usize,
) -> u64 {
    let mut w = [0u8; 8];
    r.read(off, &mut w).unwrap();
    u64::from_be_bytes(w)
}

#[test]
fn atomics_compare_and_swap_and_fetch_and_add_return_the_original_value() {
    let model = Model::new();
    let dev = open(&model);
    let target = dev.reg(4096, ALL).unwrap();
    target.write(64, &100u64.to_be_bytes()).unwrap();
    let mut res = dev.reg(64, Access::LOCAL_WRITE).unwrap();
    let (mut a, _b) = rc_pair(&dev);
    let (bufs, _) = carve(res.dest().unwrap(), &[8, 8, 8]);
    let mut bufs = bufs.into_iter();
    let (r0, r1, r2) = (bufs.next().unwrap(), bufs.next().unwrap(), bufs.next().unwrap());
    // A hit, a miss, an add, in one batch under one doorbell.
    let mut batch = a.batch();
    let p0 = batch.post_cas(1, r0, SIG, target.remote(64), 100, 555).unwrap();
    let p1 = batch.post_cas(2, r1, SIG, target.remote(64), 100, 777).unwrap();
    let p2 = batch.post_faa(3, r2, SIG, target.remote(64), 45).unwrap();
    assert_eq!(batch.commit(), 3);
    let c = wait(&mut a, 3);
    let ops: Vec<_> = c.iter().map(|c| (c.wr_id, c.status, c.opcode, c.byte_len)).collect();
    assert_eq!(
        ops,
        [
            (1, WcStatus::Success, WcOpcode::CompSwap, 8),
            (2, WcStatus::Success, WcOpcode::CompSwap, 8),
            (3, WcStatus::Success, WcOpcode::FetchAdd, 8)
        ]
    );
    let be = |d: &DestBuf<'_>| {
        let mut w = [0u8; 8];
        d.read(0, &mut w).unwrap();
        u64::from_be_bytes(w)
    };
    assert_eq!(be(&p0.reclaim(&a).unwrap()), 100, "the swap found 100 and stored 555");
    assert_eq!(be(&p1.reclaim(&a).unwrap()), 555, "the second compare missed");
    assert_eq!(be(&p2.reclaim(&a).unwrap()), 555, "the add found 555");
    assert_eq!(remote_u64(&target, 64), 600);
    quiet(&mut a);
    clean(&model);
}

#[test]
fn a_mixed_batch_of_every_operation_completes_each_request_once() {
    let model = Model::new();
    let dev = open(&model);
    let src = dev.reg(4096, ALL).unwrap();
    let data = pattern(5, 4096);
    src.write(0, &data).unwrap();
    let far = dev.reg(4096, ALL).unwrap();
    far.write(0, &data).unwrap();
    let mut mine = dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let mut rx = dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let (mut a, mut b) = rc_pair(&dev);
    let rxbuf = b.post_recv(50, rx.dest().unwrap()).unwrap();
    let (d, _) = carve(mine.dest().unwrap(), &[256, 8]);
    let mut d = d.into_iter();
    let (rd, at) = (d.next().unwrap(), d.next().unwrap());
    let mut batch = a.batch();
    batch.post_write(1, src.slice(0, 128).unwrap(), NONE, far.remote(1024)).unwrap();
    let pr = batch.post_read(2, rd, NONE, far.remote(512)).unwrap();
    batch.post_send(3, src.slice(100, 50).unwrap(), NONE).unwrap();
    let pa = batch.post_faa(4, at, NONE, far.remote(2048), 1).unwrap();
    batch.post_write_inline(5, &[b"tail"], SIG, far.remote(3000)).unwrap();
    assert_eq!(batch.commit(), 5);
    let c = wait(&mut a, 1);
    assert_eq!((c[0].wr_id, c[0].status), (5, WcStatus::Success));
    // The unsignalled READ and atomic retired with the signalled request after them.
    assert_eq!(contents(&pr.reclaim(&a).unwrap()), &data[512..768]);
    let mut w = [0u8; 8];
    pa.reclaim(&a).unwrap().read(0, &mut w).unwrap();
    assert_eq!(w, data[2048..2056]);
    assert_eq!(bytes(&far, 1024, 128), &data[..128]);
    assert_eq!(bytes(&far, 3000, 4), b"tail");
    let r = wait_recv(&mut b, 1);
    assert_eq!((r[0].wr_id, r[0].byte_len), (50, 50));
    assert_eq!(&contents(&rxbuf.reclaim(&b).unwrap())[..50], &data[100..150]);
    assert_eq!(a.outstanding(), 0);
    quiet(&mut a);
    clean(&model);
}

/// A UD or GSI QP of `dev`, ready.
fn ud_qp<C: Control>(dev: &Mlx5<MemBar, D, C>, service: Service, qkey: u32) -> Q<'_, C> {
    let cfg = QpConfig { service, ..QpConfig::default() };
    let mut q = dev.create_qp_with::<64, 16, 4>(&cfg).expect("ud qp");
    q.ready_datagram(1, qkey, 0).expect("ready");
    q
}

fn to_port(model: &Model, qpn: QpNum, qkey: u32) -> UdDest {
    let g = &model.gids()[0];
    UdDest {
        addr: RoceAddr {
            dgid: Gid(g.gid),
            dmac: Mac(g.mac),
            sgid_index: 0,
            udp_sport: 0xc000,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            sl: 0,
            static_rate: 0,
        },
        qpn,
        qkey,
    }
}

/// Check one UD receive: a GRH of 20 zero bytes and an IPv4 header (RoCE v2 over IPv4), then
/// `want`; the source QP and immediate as sent.
fn check_datagram<'r, R: RecvQueue<'r>>(
    q: &mut R,
    p: rdma_pmd::Pending<DestBuf<'r>>,
    want: &[u8],
    src_qp: QpNum,
    imm: Option<u32>,
) {
    let r = wait_recv(q, 1);
    assert_eq!((r[0].status, r[0].opcode), (WcStatus::Success, WcOpcode::Recv));
    assert_eq!(r[0].byte_len as usize, 40 + want.len(), "byte_len counts the GRH");
    assert!(r[0].grh);
    assert_eq!(r[0].src_qp, src_qp);
    assert_eq!(r[0].imm, imm);
    let got = contents(&p.reclaim(q).unwrap());
    assert_eq!(&got[40..40 + want.len()], want);
    assert!(got[..20].iter().all(|&b| b == 0), "20 zero bytes first: {:02x?}", &got[..40]);
    assert_eq!(got[20] >> 4, 4, "then an IPv4 header: {:02x?}", &got[..40]);
}

#[test]
fn ud_datagrams_arrive_behind_a_grh_with_their_source_qp() {
    let model = Model::new();
    let dev = open(&model);
    let src = dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let data = pattern(21, 4096);
    src.write(0, &data).unwrap();
    let mut rx = dev.reg(8192, Access::LOCAL_WRITE).unwrap();
    let mut a = ud_qp(&dev, Service::Ud, 0x1111_2222);
    let mut b = ud_qp(&dev, Service::Ud, 0x1111_2222);
    let (bufs, _) = carve(rx.dest().unwrap(), &[40 + 512, 40 + 256]);
    let mut bufs = bufs.into_iter();
    let p1 = b.post_recv(7, bufs.next().unwrap()).unwrap();
    let p2 = b.post_recv(8, bufs.next().unwrap()).unwrap();
    let to_b = to_port(&model, b.qp_num(), 0x1111_2222);
    a.post_send_ud(1, Source::sgl(&[src.slice(0, 512).unwrap()]), SIG, &to_b, Some(9)).unwrap();
    a.post_send_ud(2, Source::inline(&[&data[1000..1256]]), SIG | SendFlags::INLINE, &to_b, None)
        .unwrap();
    let c = wait(&mut a, 2);
    assert!(c.iter().all(|c| c.status == WcStatus::Success), "{c:?}");
    let r = wait_recv(&mut b, 2);
    assert_eq!((r[0].wr_id, r[1].wr_id), (7, 8), "receives are consumed in order");
    for (c, p, want, imm) in
        [(r[0], p1, &data[..512], Some(9)), (r[1], p2, &data[1000..1256], None)]
    {
        assert_eq!(
            (c.status, c.opcode, c.byte_len as usize),
            (WcStatus::Success, WcOpcode::Recv, 40 + want.len())
        );
        assert!(c.grh);
        assert_eq!((c.src_qp, c.imm), (a.qp_num(), imm));
        let got = contents(&p.reclaim(&b).unwrap());
        assert_eq!(&got[40..40 + want.len()], want);
        assert!(got[..20].iter().all(|&b| b == 0) && got[20] >> 4 == 4, "{:02x?}", &got[..40]);
    }
    quiet(&mut a);
    clean(&model);
}

/// What a datagram QP answers to a WRITE, a READ into `into` and a SEND without a
/// destination (one element, several, inline) posted at `p`.
fn refusals<'r, P: Post<'r>>(
    p: &mut P,
    bufs: [LocalBuf<'r>; 2],
    into: DestBuf<'r>,
    far: RemoteBuf,
) -> Vec<rdma_pmd::Result<()>> {
    vec![
        p.post_write(1, bufs[0], SIG, far),
        p.post_writev(2, &bufs, SIG, far),
        p.post_write_inline(3, &[b"x"], SIG, far),
        p.post_send(4, bufs[0], SIG),
        p.post_sendv(5, &bufs, SIG),
        p.post_send_inline(6, &[b"x"], SIG),
        p.post_read(7, into, SIG, far).map(drop).map_err(|r| r.error),
    ]
}

/// A datagram QP posts only SENDs with a destination: a WRITE, a READ and a SEND without one
/// are refused with the same error alone (each kind has a path of its own for a single post)
/// as in a batch, and nothing reaches the device.
#[test]
fn a_datagram_qp_refuses_writes_reads_and_bare_sends_alone_as_in_a_batch() {
    let model = Model::new();
    let dev = open(&model);
    let src = dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let (mut d1, mut d2) =
        (dev.reg(64, Access::LOCAL_WRITE).unwrap(), dev.reg(64, Access::LOCAL_WRITE).unwrap());
    let mut a = ud_qp(&dev, Service::Ud, 5);
    let bufs = [src.slice(0, 64).unwrap(), src.slice(64, 64).unwrap()];
    let far = src.remote(0);
    let only = Err(Error::InvalidArgument("a datagram QP posts only sends"));
    let bare = Err(Error::InvalidArgument("a send on a datagram QP needs a destination"));
    let want = vec![only, only, only, bare, bare, bare, only];
    assert_eq!(refusals(&mut a, bufs, d1.dest().unwrap(), far), want, "alone");
    let mut b = a.batch();
    assert_eq!(refusals(&mut b, bufs, d2.dest().unwrap(), far), want, "in a batch");
    assert_eq!(b.commit(), 0);
    assert_eq!((a.posted(), a.outstanding()), (0, 0));
    assert_eq!(src.usage().in_flight(), 0);
    quiet(&mut a);
    clean(&model);
}

/// QP1 to QP1 across a wire, as connection management sends its MADs: the GSI Q_Key, source
/// QP 1 at the receiver.
#[test]
fn gsi_datagrams_go_from_qp1_to_qp1_with_the_gsi_qkey() {
    let wire = Wire::new();
    let cfg = || ModelConfig { wire: Some(wire.clone()), ..ModelConfig::default() };
    let (m1, m2) = (Model::with_config(cfg()).unwrap(), Model::with_config(cfg()).unwrap());
    let (d1, d2) = (open(&m1), open(&m2));
    let src = d1.reg(4096, Access::LOCAL_WRITE).unwrap();
    let data = pattern(22, 256);
    src.write(0, &data).unwrap();
    let mut rx = d2.reg(4096, Access::LOCAL_WRITE).unwrap();
    let mut g1 = ud_qp(&d1, Service::Gsi, GSI_QKEY);
    let mut g2 = ud_qp(&d2, Service::Gsi, GSI_QKEY);
    assert_eq!((g1.qp_num(), g2.qp_num()), (QpNum(1), QpNum(1)), "the GSI QP is QP1");
    let p = g2.post_recv(3, rx.dest().unwrap()).unwrap();
    let to = to_port(&m2, QpNum(1), GSI_QKEY);
    g1.post_send_ud(4, Source::sgl(&[src.slice(0, 256).unwrap()]), SIG, &to, None).unwrap();
    let c = wait(&mut g1, 1);
    assert_eq!((c[0].wr_id, c[0].status), (4, WcStatus::Success));
    check_datagram(&mut g2, p, &data, QpNum(1), None);
    quiet(&mut g1);
    clean(&m1);
    clean(&m2);
}

#[test]
fn a_ud_datagram_with_the_wrong_qkey_is_dropped_and_counted_and_the_sender_completes() {
    let model = Model::new();
    let dev = open(&model);
    let src = dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let mut rx = dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let mut a = ud_qp(&dev, Service::Ud, 5);
    let mut b = ud_qp(&dev, Service::Ud, 6);
    let p = b.post_recv(1, rx.dest().unwrap()).unwrap();
    let before = model.counters();
    let to_b = to_port(&model, b.qp_num(), 5);
    a.post_send_ud(9, Source::sgl(&[src.slice(0, 64).unwrap()]), SIG, &to_b, None).unwrap();
    let c = wait(&mut a, 1);
    assert_eq!(c[0].status, WcStatus::Success, "UD is unreliable: the sender does not know");
    for _ in 0..200 {
        let mut out = [Completion::default(); 1];
        assert_eq!(b.poll_recv(&mut out).unwrap(), 0);
        std::thread::yield_now();
    }
    let after = model.counters();
    assert!(after != before, "the drop is counted");
    // The receive is still posted: its buffer is not handed back.
    assert!(p.reclaim(&b).is_err());
    assert_eq!(b.recv_outstanding(), 1);
}

#[test]
fn bad_requests_get_typed_errors_and_leave_the_queues_usable() {
    let model = Model::new();
    let dev = open(&model);
    let mut rx = dev.reg(256, Access::LOCAL_WRITE).unwrap();
    let (_a, mut b) = rc_pair(&dev);
    // Too many receive elements: EINVAL, as mlx5_post_recv.
    let (bufs, _) = carve(rx.dest().unwrap(), &[8, 8, 8, 8, 8]);
    let refused = b.post_recvv(1, bufs).unwrap_err();
    assert_eq!(refused.error, Error::TooManyRecvSges { given: 5, max: 4 });
    assert_eq!(refused.error.errno(), Errno::EINVAL);
    // A full receive queue: ENOMEM.
    for i in 0..16 {
        b.post_recv_empty(100 + i).unwrap();
    }
    let e = b.post_recv_empty(200).unwrap_err();
    assert_eq!(e.errno(), Errno::ENOMEM);
    // The refused buffers came back untouched and are usable.
    let mut back = refused.bufs;
    back[0].write(0, b"mine").unwrap();
    assert_eq!(back[0].region().in_flight(), 0);
    clean(&model);
}

/// Wait for one completion on each side of an error and check both QPs are in error with
/// everything else flushed exactly once.
fn expect_error<'r, C: Control>(q: &mut Q<'r, C>, status: WcStatus) {
    let c = wait(q, 1);
    assert_eq!(c[0].status, status, "{c:?}");
}

#[test]
fn errors_the_hardware_reports_complete_once_and_flush_the_rest() {
    // A READ into memory without local write: local protection error at the requester.
    {
        let model = Model::new();
        let dev = open(&model);
        let src = dev.reg(256, ALL).unwrap();
        let mut ro = dev.reg(256, Access::empty()).unwrap();
        let (mut a, _b) = rc_pair(&dev);
        let p = a.post_read(1, ro.dest().unwrap(), SIG, src.remote(0)).unwrap();
        a.post_write(2, src.slice(0, 8).unwrap(), SIG, src.remote(100)).unwrap();
        let c = wait(&mut a, 2);
        assert_eq!(c[0].status, WcStatus::LocProtErr, "{c:?}");
        assert_eq!(c[1].status, WcStatus::WrFlushErr);
        assert!(p.reclaim(&a).is_ok(), "an error completion hands the buffer back");
    }
    // An unaligned atomic, and an rkey without the right: remote errors.
    for (off, access, want) in [
        (4usize, ALL, WcStatus::RemInvReqErr),
        (8, Access::LOCAL_WRITE | Access::REMOTE_WRITE, WcStatus::RemAccessErr),
    ] {
        let model = Model::new();
        let dev = open(&model);
        let target = dev.reg(256, access).unwrap();
        let mut res = dev.reg(8, Access::LOCAL_WRITE).unwrap();
        let (mut a, _b) = rc_pair(&dev);
        let p = a.post_faa(1, res.dest().unwrap(), SIG, target.remote(off), 1).unwrap();
        expect_error(&mut a, want);
        assert!(p.reclaim(&a).is_ok());
        quiet(&mut a);
    }
    // A READ of a region without remote read: remote access error.
    {
        let model = Model::new();
        let dev = open(&model);
        let src = dev.reg(256, TARGET).unwrap();
        let mut dst = dev.reg(256, Access::LOCAL_WRITE).unwrap();
        let (mut a, _b) = rc_pair(&dev);
        let p = a.post_read(1, dst.dest().unwrap(), SIG, src.remote(0)).unwrap();
        expect_error(&mut a, WcStatus::RemAccessErr);
        assert!(p.reclaim(&a).is_ok());
    }
    // A message longer than the receive: local length error at the receiver, remote invalid
    // request at the sender.
    {
        let model = Model::new();
        let dev = open(&model);
        let src = dev.reg(4096, Access::LOCAL_WRITE).unwrap();
        let mut rx = dev.reg(64, Access::LOCAL_WRITE).unwrap();
        let (mut a, mut b) = rc_pair(&dev);
        let p = b.post_recv(1, rx.dest().unwrap()).unwrap();
        b.post_recv_empty(2).unwrap();
        a.post_send(5, src.slice(0, 65).unwrap(), SIG).unwrap();
        expect_error(&mut a, WcStatus::RemInvReqErr);
        let r = wait_recv(&mut b, 2);
        assert_eq!((r[0].wr_id, r[0].status), (1, WcStatus::LocLenErr));
        assert_eq!((r[1].wr_id, r[1].status), (2, WcStatus::WrFlushErr));
        assert!(p.reclaim(&b).is_ok());
    }
    // A receive buffer without local write: local protection error at the receiver.
    {
        let model = Model::new();
        let dev = open(&model);
        let src = dev.reg(4096, Access::LOCAL_WRITE).unwrap();
        let mut rx = dev.reg(64, Access::empty()).unwrap();
        let (mut a, mut b) = rc_pair(&dev);
        let p = b.post_recv(1, rx.dest().unwrap()).unwrap();
        a.post_send(5, src.slice(0, 16).unwrap(), SIG).unwrap();
        let r = wait_recv(&mut b, 1);
        assert_eq!(r[0].status, WcStatus::LocProtErr);
        let c = wait(&mut a, 1);
        assert_ne!(c[0].status, WcStatus::Success);
        assert!(p.reclaim(&b).is_ok());
    }
    // No receive posted and few RNR retries: RNR_RETRY_EXC_ERR.
    {
        let model = Model::new();
        let dev = open(&model);
        let src = dev.reg(4096, Access::LOCAL_WRITE).unwrap();
        let (mut a, _b) = rc_pair_with(&dev, &ConnectOpts { rnr_retry: 1, ..opts() });
        a.post_send(5, src.slice(0, 16).unwrap(), SIG).unwrap();
        expect_error(&mut a, WcStatus::RnrRetryExcErr);
    }
}

#[test]
fn deregistration_and_teardown_stay_safe_with_device_writes_pending() {
    let model = Model::new();
    let dev = open(&model);
    let mut rx = dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    {
        let (a, mut b) = rc_pair(&dev);
        let p = b.post_recv(1, rx.dest().unwrap()).unwrap();
        // The QP goes away with the receive posted: the pending buffer can no longer be
        // reclaimed (leaked, safely), and the teardown releases the region.
        drop(b);
        assert!(p.reclaim(&a).is_err(), "another queue cannot hand it back");
        drop(a);
    }
    assert_eq!(rx.usage().in_flight(), 0, "the destroyed QP released the region");
    assert!(rx.is_registered());
    {
        let (a, mut b) = rc_pair(&dev);
        let p = b.post_recv(2, rx.dest().unwrap()).unwrap();
        // `mem::forget` of the pending request: its buffer is gone for good, the receive
        // stays posted and its region busy until the QP is destroyed.
        #[allow(clippy::forget_non_drop)]
        std::mem::forget(p);
        assert_eq!(b.recv_outstanding(), 1);
        drop(b);
        drop(a);
    }
    assert_eq!(rx.usage().in_flight(), 0);
    // And the region deregisters now that nothing can write it.
    drop(rx);
    clean(&model);
}
