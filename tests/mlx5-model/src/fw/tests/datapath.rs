//! Objects created through the command interface carry traffic: the model's engine executes
//! an RDMA WRITE posted on a QP, CQ, keys and UAR that only commands created, rung through the
//! firmware's BAR0 (whose UAR pages are the model's).

use super::*;

/// What one side of a connection created through commands.
struct Side {
    d: Dev,
    uar: u32,
    pd: u32,
    cq: u32,
    qpn: u32,
    qp_buf: u64,
    qp_dbr: u64,
    cq_buf: u64,
    cq_dbr: u64,
    key: u32,
    buf: u64,
}

fn side(model: Model, variant: u8) -> Side {
    let mut d = Dev::on(model, FwConfig::default());
    d.up();
    let uar = d.alloc_uar();
    let (eqn, _) = d.create_eq(uar, 4, &[EventType::Cmd]);
    let pd = d.alloc_pd();
    let (inp, buf) = d.mkey_input(pd, 4096, variant);
    let out = d.ok(&inp, 16);
    let key = (ifc::create_mkey_out::MKEY_INDEX.get(&out) as u32) << 8 | u32::from(variant);
    let cq = d.create_cq(uar, eqn, 4);
    let (cq_buf, cq_dbr) = d.last_queue;
    let qpn = d.create_qp(pd, cq, uar);
    let (qp_buf, qp_dbr) = d.last_queue;
    Side { d, uar, pd, cq, qpn, qp_buf, qp_dbr, cq_buf, cq_dbr, key, buf }
}

const VA: u64 = 0x7f00_0000_0000;

/// Post one signalled RDMA WRITE of `len` bytes from `src` (offset 100 of its buffer) to
/// `rkey` at `VA + 1000`, as rdma-core's `_mlx5_post_send` lays it out, and ring the doorbell
/// through the model's BAR.
fn write(src: &mut Side, rkey: u32, len: u32) {
    write_at(src, rkey, len, 0);
}

/// [`write`] as send WQE `n` (the `n`-th posted on the QP).
fn write_at(src: &mut Side, rkey: u32, len: u32, n: u16) {
    let wqe = write_wqe(n, src.qpn, src.key, rkey, len);
    // The send queue follows the receive queue (16 WQEs of 32 bytes) in the QP buffer.
    let at = src.qp_buf + 16 * 32 + 64 * u64::from(n);
    src.d.ring_send(at, &wqe, src.qp_dbr, u32::from(n) + 1, src.uar);
}

/// Send WQE `n` of QP `qpn`: a signalled RDMA WRITE of `len` bytes from `lkey` at `VA + 100`
/// to `rkey` at `VA + 1000`: ctrl (mlx5dv.h `mlx5_wqe_ctrl_seg`), raddr
/// (`mlx5_wqe_raddr_seg`), data (`mlx5_wqe_data_seg`).
fn write_wqe(n: u16, qpn: u32, lkey: u32, rkey: u32, len: u32) -> [u8; 64] {
    let mut wqe = [0u8; 64];
    wqe[0..4].copy_from_slice(&(u32::from(n) << 8 | 0x08).to_be_bytes()); // index n, RDMA WRITE
    wqe[4..8].copy_from_slice(&(qpn << 8 | 3).to_be_bytes());
    wqe[11] = 0x08; // MLX5_WQE_CTRL_CQ_UPDATE
    wqe[16..24].copy_from_slice(&(VA + 1000).to_be_bytes());
    wqe[24..28].copy_from_slice(&rkey.to_be_bytes());
    wqe[32..36].copy_from_slice(&len.to_be_bytes());
    wqe[36..40].copy_from_slice(&lkey.to_be_bytes());
    wqe[40..48].copy_from_slice(&(VA + 100).to_be_bytes());
    wqe
}

/// One device up with a UAR, a command EQ, a PD and two 4 KiB keys on it: the source (index
/// variant 0x11) and the destination (0x22) of the WRITEs the queue-placement tests post.
struct TwoKeys {
    d: Dev,
    uar: u32,
    eqn: u8,
    pd: u32,
    src: (u32, u64),
    dst: (u32, u64),
}

fn two_keys() -> TwoKeys {
    let mut d = Dev::on(Model::new(), FwConfig::default());
    d.up();
    let uar = d.alloc_uar();
    let (eqn, _) = d.create_eq(uar, 4, &[EventType::Cmd]);
    let pd = d.alloc_pd();
    let key = |d: &mut Dev, variant: u8| {
        let (inp, buf) = d.mkey_input(pd, 4096, variant);
        let index = ifc::create_mkey_out::MKEY_INDEX.get(&d.ok(&inp, 16)) as u32;
        (index << 8 | u32::from(variant), buf)
    };
    let src = key(&mut d, 0x11);
    let dst = key(&mut d, 0x22);
    TwoKeys { d, uar, eqn, pd, src, dst }
}

impl TwoKeys {
    /// Post a 200-byte WRITE as send WQE 0 of `qpn` (at `wqe_at`), wait for its CQE at
    /// `cqe_at`, consume it, and check it and the bytes that arrived.
    fn write_and_check(&mut self, qpn: u32, wqe_at: u64, qp_dbr: u64, cqe_at: u64, cq_dbr: u64) {
        let d = &mut self.d;
        let p: Vec<u8> = (0..200u32).map(|i| (i * 5 + 1) as u8).collect();
        assert!(d.dma.write(BusAddr(self.src.1 + 100), &p));
        let wqe = write_wqe(0, qpn, self.src.0, self.dst.0, p.len() as u32);
        d.ring_send(wqe_at, &wqe, qp_dbr, 1, self.uar);
        let cqe = d.wait_cqe(cqe_at);
        assert_eq!(cqe[63], 0x00, "a successful requester CQE of the first pass");
        assert_eq!(u32::from_be_bytes(cqe[56..60].try_into().unwrap()) & 0xff_ffff, qpn);
        assert!(d.dma.write(BusAddr(cq_dbr), &1u32.to_be_bytes()));
        let mut got = vec![0u8; p.len()];
        assert!(d.dma.read(BusAddr(self.dst.1 + 1000), &mut got));
        assert_eq!(got, p);
        assert_eq!(d.model.counters().validation_failures, 0);
    }
}

/// The first CQE of a side's CQ, once written; consumed.
fn first_cqe(s: &Side) -> [u8; 64] {
    let cqe = s.d.wait_cqe(s.cq_buf);
    // Consume it: the CQ doorbell record carries the consumer index.
    assert!(s.d.dma.write(BusAddr(s.cq_dbr), &1u32.to_be_bytes()));
    cqe
}

fn payload(src: &Side) -> Vec<u8> {
    let p: Vec<u8> = (0..200u32).map(|i| (i * 7 + 3) as u8).collect();
    assert!(src.d.dma.write(BusAddr(src.buf + 100), &p));
    p
}

#[test]
fn objects_created_by_commands_carry_an_rdma_write() {
    let mut a = side(Model::new(), 0x11);
    // A second QP and key on the same device, reached over force-loopback.
    let (pd, cq, uar) = (a.pd, a.cq, a.uar);
    let d = &mut a.d;
    let (inp, dst) = d.mkey_input(pd, 4096, 0x22);
    let out = d.ok(&inp, 16);
    let dst_key = (ifc::create_mkey_out::MKEY_INDEX.get(&out) as u32) << 8 | 0x22;
    let b = d.create_qp(pd, cq, uar);
    d.connect(a.qpn, b);
    d.connect(b, a.qpn);
    let p = payload(&a);
    write(&mut a, dst_key, p.len() as u32);
    let cqe = first_cqe(&a);
    assert_eq!(cqe[63], 0x00, "a requester CQE (opcode 0) of the first pass (owner 0)");
    assert_eq!(u32::from_be_bytes(cqe[56..60].try_into().unwrap()) & 0xff_ffff, a.qpn);
    let mut got = vec![0u8; p.len()];
    assert!(a.d.dma.read(BusAddr(dst + 1000), &mut got));
    assert_eq!(got, p);
    assert_eq!(a.d.model.counters().validation_failures, 0);
}

#[test]
fn roce_paths_from_init2rtr_reach_the_peer_model() {
    let wire = crate::Wire::new();
    let model = || {
        Model::with_config(crate::ModelConfig { wire: Some(wire.clone()), ..Default::default() })
            .unwrap()
    };
    let mut a = side(model(), 0x11);
    let mut b = side(model(), 0x22);
    let (ga, gb) = (a.d.model.gids()[0], b.d.model.gids()[0]);
    assert_ne!(ga.gid, gb.gid);
    let (qa, qb) = (a.qpn, b.qpn);
    a.d.connect_via(qa, qb, Some((gb.gid, gb.mac)));
    b.d.connect_via(qb, qa, Some((ga.gid, ga.mac)));
    let p = payload(&a);
    write(&mut a, b.key, p.len() as u32);
    let cqe = first_cqe(&a);
    assert_eq!(cqe[63], 0x00, "success, not an error CQE: the path decoded to the peer");
    let mut got = vec![0u8; p.len()];
    assert!(b.d.dma.read(BusAddr(b.buf + 1000), &mut got));
    assert_eq!(got, p);
    // A wrong remote MAC in the path: the frame never reaches B (an error CQE at A).
    let mut c = side(model(), 0x33);
    let qc = c.qpn;
    let mut wrong = gb.mac;
    wrong[5] ^= 0xff;
    c.d.connect_via(qc, qb, Some((gb.gid, wrong)));
    let _ = payload(&c);
    write(&mut c, b.key, 8);
    let cqe = first_cqe(&c);
    assert_eq!(cqe[63] >> 4, 0xd, "MLX5_CQE_REQ_ERR");
}

/// The kernel's queue buffers are page lists, not contiguous memory (6.12 `mlx5_frag_buf_alloc_node`,
/// `mlx5_fill_page_frag_array`; mlx5_ib's CQ and QP buffers, PRM PAS): `CREATE_CQ` and
/// `CREATE_QP` take pages anywhere, and the engine addresses each entry through the list. Here
/// the send queue starts in the QP's second page (the receive queue fills the first) and that
/// page lies before the first in memory; the WRITE posted there executes.
#[test]
fn queues_in_scattered_pages_carry_an_rdma_write() {
    let mut k = two_keys();
    let (uar, eqn, pd) = (k.uar, k.eqn, k.pd);
    let d = &mut k.d;
    // A 128-entry CQ in two pages listed in reverse order of their addresses.
    let (c1, _gap, c0) = (d.alloc(4096, 4096), d.alloc(4096, 4096), d.alloc(4096, 4096));
    for p in [c0, c1] {
        for k in 0..64 {
            assert!(d.dma.write(BusAddr(p + 64 * k + 63), &[0xf1]));
        }
    }
    let mut cin = d.cq_input(uar, eqn, 7);
    let cq_dbr = d.last_queue.1;
    ifc::create_cq_in::PAS.index(0).set(&mut cin, c0);
    ifc::create_cq_in::PAS.index(1).set(&mut cin, c1);
    let cq = ifc::create_cq_out::CQN.get(&d.ok(&cin, 16)) as u32;
    {
        let dev = d.model.shared().dev();
        let buf = &dev.cqs[&cq].buf;
        assert_eq!((buf.at(0), buf.at(64 * 64), buf.at(64 * 127)), (c0, c1, c1 + 63 * 64));
    }

    // An RC QP: 128 receive WQEs of 32 bytes fill page 0; the send queue is page 1, which
    // lies below page 0.
    let (q1, _gap, q0) = (d.alloc(4096, 4096), d.alloc(4096, 4096), d.alloc(4096, 4096));
    let mut qin = d.qp_input(pd, cq, uar, 6);
    let qp_dbr = d.last_queue.1;
    set_in(&mut qin, ifc::create_qp_in::QPC, ifc::qpc::LOG_RQ_SIZE, 7);
    ifc::create_qp_in::PAS.index(0).set(&mut qin, q0);
    ifc::create_qp_in::PAS.index(1).set(&mut qin, q1);
    let qpn = ifc::create_qp_out::QPN.get(&d.ok(&qin, 16)) as u32;
    let peer = d.create_qp(pd, cq, uar);
    d.connect(qpn, peer);
    d.connect(peer, qpn);
    // Send WQE 0 is the first byte of page 1.
    k.write_and_check(qpn, q1, qp_dbr, c0, cq_dbr);
}

/// Kernel 6.12 `eq.c` `mlx5_eq_comp_int` and `cq.c` `mlx5_cq_arm` (PRM CQ arming): a CQE
/// written to an armed CQ posts a completion EQE (type 0, the CQ number in `comp_event`) to the
/// CQ's EQ (`cqc.c_eqn`) and raises that EQ's vector if the EQ is armed; the CQ is then
/// disarmed, so the next CQE posts nothing until the CQ is armed again, and arming it over
/// waiting CQEs posts the event at once.
#[test]
fn cqes_in_an_armed_cq_post_completion_events_with_the_eqs_vector() {
    use super::kernel::{eq_doorbell, wait_eqe, Vectors};
    let sink = Arc::new(Vectors::default());
    let cfg = crate::ModelConfig { interrupts: Some(sink.clone()), ..Default::default() };
    let mut a = side(Model::with_config(cfg).unwrap(), 0x11);
    let (pd, uar) = (a.pd, a.uar);
    let d = &mut a.d;
    let (inp, _dst) = d.mkey_input(pd, 4096, 0x22);
    let out = d.ok(&inp, 16);
    let dst_key = (ifc::create_mkey_out::MKEY_INDEX.get(&out) as u32) << 8 | 0x22;
    // A completion EQ (no async events) on vector 5, and a CQ and QP on it.
    let (mut inp, eq_buf) = d.eq_input(uar, 4, &[]);
    set_in(&mut inp, ifc::create_eq_in::EQ_CONTEXT, ifc::eqc::INTR, 5);
    let eqn = ifc::create_eq_out::EQ_NUMBER.get(&d.ok(&inp, 16)) as u8;
    let cq = d.create_cq(uar, eqn, 4);
    let (cq_buf, cq_dbr) = d.last_queue;
    let qpn = d.create_qp(pd, cq, uar);
    let (qp_buf, qp_dbr) = d.last_queue;
    let peer = d.create_qp(pd, a.cq, uar);
    d.connect(qpn, peer);
    d.connect(peer, qpn);
    (a.cq, a.qpn, a.cq_buf, a.cq_dbr, a.qp_buf, a.qp_dbr) =
        (cq, qpn, cq_buf, cq_dbr, qp_buf, qp_dbr);
    let arm_cq = |s: &Side, ci: u32| {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&(1u32 << 28 | ci).to_be_bytes());
        b[4..].copy_from_slice(&cq.to_be_bytes());
        s.d.bar.write_bytes8(uar as usize * crate::UAR_PAGE + crate::uar::CQ_DOORBELL, b);
    };
    eq_doorbell(&a.d, uar, eqn, 0, true);
    arm_cq(&a, 0);
    assert!(sink.seen().is_empty());

    let p = payload(&a);
    write_at(&mut a, dst_key, p.len() as u32, 0);
    let cqe = first_cqe(&a);
    assert_eq!(cqe[63], 0x00);
    let e = wait_eqe(&a.d, eq_buf, 4, 0);
    assert_eq!(ifc::eqe::EVENT_TYPE.get(&e), u64::from(u8::from(EventType::Completion)));
    let data = ifc::eqe::EVENT_DATA.slice(&e);
    assert_eq!(ifc::comp_event::CQ_NUMBER.get(data), u64::from(cq));
    assert_eq!(sink.wait(1), vec![5], "the EQ's vector");

    // Not re-armed: the second CQE posts no event.
    write_at(&mut a, dst_key, 8, 1);
    a.d.wait_cqe(cq_buf + 64);
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(a.d.eqe(eq_buf, 4, 1)[63], 1, "EQE 1 untouched");
    // Armed with CQE 1 waiting (consumer index 1): the event is posted at once; the EQ fired
    // and was not re-armed, so no vector until the driver arms it.
    arm_cq(&a, 1);
    let e = wait_eqe(&a.d, eq_buf, 4, 1);
    assert_eq!(ifc::comp_event::CQ_NUMBER.get(ifc::eqe::EVENT_DATA.slice(&e)), u64::from(cq));
    assert_eq!(sink.seen(), vec![5]);
    eq_doorbell(&a.d, uar, eqn, 1, true);
    assert_eq!(sink.seen(), vec![5, 5], "armed over an unconsumed EQE: fires at once");
}

/// A CQ that overruns reports a CQ error event (type 0x04, `cq_error.cqn` and syndrome 1,
/// overrun) on the EQ subscribed to CQ errors, the kernel's async EQ (6.12 `eq.c`
/// `cq_err_event_notifier`), with that EQ's vector.
#[test]
fn a_cq_overrun_posts_a_cq_error_event() {
    use super::kernel::{eq_doorbell, wait_eqe, Vectors};
    let sink = Arc::new(Vectors::default());
    let cfg = crate::ModelConfig { interrupts: Some(sink.clone()), ..Default::default() };
    let mut a = side(Model::with_config(cfg).unwrap(), 0x11);
    let (pd, uar, cmd_cq) = (a.pd, a.uar, a.cq);
    let d = &mut a.d;
    let (inp, _dst) = d.mkey_input(pd, 4096, 0x22);
    let out = d.ok(&inp, 16);
    let dst_key = (ifc::create_mkey_out::MKEY_INDEX.get(&out) as u32) << 8 | 0x22;
    let (mut inp, async_buf) = d.eq_input(uar, 4, &[EventType::CqError]);
    set_in(&mut inp, ifc::create_eq_in::EQ_CONTEXT, ifc::eqc::INTR, 7);
    let async_eqn = ifc::create_eq_out::EQ_NUMBER.get(&d.ok(&inp, 16)) as u8;
    // A one-entry CQ: the second CQE, with the first unconsumed, overruns it.
    let (eqn, _) = d.create_eq(uar, 4, &[]);
    let cq = d.create_cq(uar, eqn, 0);
    let (cq_buf, cq_dbr) = d.last_queue;
    let qpn = d.create_qp(pd, cq, uar);
    let (qp_buf, qp_dbr) = d.last_queue;
    let peer = d.create_qp(pd, cmd_cq, uar);
    d.connect(qpn, peer);
    d.connect(peer, qpn);
    (a.cq, a.qpn, a.cq_buf, a.cq_dbr, a.qp_buf, a.qp_dbr) =
        (cq, qpn, cq_buf, cq_dbr, qp_buf, qp_dbr);
    eq_doorbell(&a.d, uar, async_eqn, 0, true);
    let _ = payload(&a);
    write_at(&mut a, dst_key, 8, 0);
    write_at(&mut a, dst_key, 8, 1);
    let e = wait_eqe(&a.d, async_buf, 4, 0);
    assert_eq!(ifc::eqe::EVENT_TYPE.get(&e), u64::from(u8::from(EventType::CqError)));
    let data = ifc::eqe::EVENT_DATA.slice(&e);
    assert_eq!(ifc::cq_error::CQN.get(data), u64::from(cq));
    assert_eq!(ifc::cq_error::SYNDROME.get(data), 1, "overrun");
    assert_eq!(sink.wait(1), vec![7]);
}

/// A memory key's MTT lists pinned pages wherever they lie (kernel `mlx5_ib` `mr.c`
/// `mlx5_ib_populate_pas`, rdma-core's registered user memory): `CREATE_MKEY` takes such a list
/// and every access through the key is split at page boundaries. Here a 4000-byte RDMA WRITE
/// gathers across a page boundary of its source key and lands across one of its destination
/// key, each key's second page lying below its first.
#[test]
fn memory_keys_over_scattered_pages_carry_a_write_across_page_boundaries() {
    let mut a = side(Model::new(), 0x11);
    let pd = a.pd;
    let d = &mut a.d;
    let scattered = |d: &mut Dev, variant: u8| {
        let (mut inp, _) = d.mkey_input(pd, 8192, variant);
        let (p1, _gap, p0) = (d.alloc(4096, 4096), d.alloc(4096, 4096), d.alloc(4096, 4096));
        let mtt = Field::new(ifc::create_mkey_in::KLM_PAS_MTT.bit, 64);
        mtt.index(0).set(&mut inp, p0 | 3);
        mtt.index(1).set(&mut inp, p1 | 3);
        let out = d.ok(&inp, 16);
        ((ifc::create_mkey_out::MKEY_INDEX.get(&out) as u32) << 8 | u32::from(variant), p0, p1)
    };
    let (src_key, s0, s1) = scattered(d, 0x33);
    let (dst_key, t0, t1) = scattered(d, 0x44);
    let b = d.create_qp(pd, a.cq, a.uar);
    d.connect(a.qpn, b);
    d.connect(b, a.qpn);
    // Source bytes VA+100 .. VA+4100: 3996 in page 0, 4 in page 1.
    let p: Vec<u8> = (0..4000u32).map(|i| (i * 13 + 7) as u8).collect();
    assert!(d.dma.write(BusAddr(s0 + 100), &p[..3996]));
    assert!(d.dma.write(BusAddr(s1), &p[3996..]));
    a.key = src_key;
    write(&mut a, dst_key, p.len() as u32);
    let cqe = first_cqe(&a);
    assert_eq!(cqe[63], 0x00, "a successful requester CQE");
    // Destination VA+1000 .. VA+5000: 3096 in page 0, 904 in page 1.
    let mut got = vec![0u8; 4000];
    assert!(a.d.dma.read(BusAddr(t0 + 1000), &mut got[..3096]));
    assert!(a.d.dma.read(BusAddr(t1), &mut got[3096..]));
    assert_eq!(got, p);
    assert_eq!(a.d.model.counters().validation_failures, 0);
}

/// A user QP starts where the application's buffer starts. When that buffer lies in a
/// physically contiguous region, 6.12 `mlx5_ib` lists it in pages larger than 4 KiB and says in
/// `page_offset` how many 64ths of a page into the first one the queue begins
/// (`create_user_qp`: `mlx5_umem_find_best_quantized_pgoff`, scale 64). Here an RC QP begins
/// 0x3000 into a 16 KiB page (`log_page_size` 2, `page_offset` 48) and runs on into the next;
/// the engine addresses every WQE from there, and a WRITE posted at its start completes.
#[test]
fn a_qp_starting_inside_its_first_page_carries_an_rdma_write() {
    use ifc::qpc;
    const PAGE: u64 = 16384;
    const START: u64 = 0x3000;
    let mut k = two_keys();
    let (uar, eqn, pd) = (k.uar, k.eqn, k.pd);
    let d = &mut k.d;
    let cq = d.create_cq(uar, eqn, 4);
    let (cq_buf, cq_dbr) = d.last_queue;

    let qp_pages = d.alloc(2 * PAGE as usize, PAGE as usize);
    let qp_start = qp_pages + START;
    let mut qin = d.qp_input(pd, cq, uar, 6);
    let qp_dbr = d.last_queue.1;
    set_in(&mut qin, ifc::create_qp_in::QPC, qpc::LOG_PAGE_SIZE, 2);
    set_in(&mut qin, ifc::create_qp_in::QPC, qpc::PAGE_OFFSET, START / (PAGE / 64));
    ifc::create_qp_in::PAS.index(0).set(&mut qin, qp_pages);
    ifc::create_qp_in::PAS.index(1).set(&mut qin, qp_pages + PAGE);
    let qpn = ifc::create_qp_out::QPN.get(&d.ok(&qin, 16)) as u32;
    // 16 receive WQEs of 32 bytes, then the send queue: WQEBB 56 is the second page's first.
    let sq = qp_start + 16 * 32;
    {
        let dev = d.model.shared().dev();
        let qp = &dev.qps[&qpn];
        assert_eq!((qp.rq_slot(), qp.sq_slot(0)), (qp_start, sq));
        assert_eq!(qp.sq_slot(56), qp_pages + PAGE);
    }
    let peer = d.create_qp(pd, cq, uar);
    d.connect(qpn, peer);
    d.connect(peer, qpn);
    k.write_and_check(qpn, sq, qp_dbr, cq_buf, cq_dbr);
}
