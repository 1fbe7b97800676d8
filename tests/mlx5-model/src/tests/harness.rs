//! Test scaffolding: a "driver" written from the PRM/rdma-core layouts, just enough to post.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_pmd::QpNum;
use rdma_pmd_hal::mem::{HeapDma, MemBar};
use rdma_pmd_hal::{barrier, Dma, DmaBuf, Mmio};
use rdma_pmd_mlx5::control::{
    Access, Control, CqParams, Cqn, Mkey, MkeyParams, Path, Pdn, QpParams, Service, Transition,
    Translation, Uar,
};

use crate::{Model, ModelControl};

// 30 s: the vector cases move tens of MB through the packet transport, a few MB/s in a debug
// build on a loaded machine; every wait ends as soon as its condition holds.
pub const WAIT: Duration = Duration::from_secs(30);

/// One model with a UAR and a PD.
pub struct Env {
    pub model: Model,
    pub ctl: ModelControl,
    pub bar: MemBar,
    pub dma: Arc<HeapDma>,
    pub uar: Uar,
    pub pd: Pdn,
}

pub struct TCq {
    pub cqn: Cqn,
    pub buf: DmaBuf,
    pub dbrec: DmaBuf,
    pub log: u8,
    pub ci: u32,
}

pub struct TQp {
    pub qpn: u32,
    pub buf: DmaBuf,
    pub dbrec: DmaBuf,
    pub log_sq: u8,
    pub sq_off: usize,
    pub log_rq: Option<u8>,
    pub stride: u8,
    /// Driver's send counter (16 bits).
    pub pi: u16,
    pub rq_pi: u16,
    pub half: usize,
    pub uar_off: usize,
}

pub struct Region {
    pub buf: DmaBuf,
    pub key: Mkey,
    pub va: u64,
}

/// A parsed CQE.
#[derive(Debug, Clone, Copy)]
pub struct Cqe {
    pub raw: [u8; 64],
}

impl Cqe {
    pub fn opcode(&self) -> u8 {
        self.raw[63] >> 4
    }
    pub fn owner(&self) -> u8 {
        self.raw[63] & 1
    }
    pub fn wqe_counter(&self) -> u16 {
        u16::from_be_bytes([self.raw[60], self.raw[61]])
    }
    pub fn sop_qpn(&self) -> u32 {
        u32::from_be_bytes(self.raw[56..60].try_into().unwrap())
    }
    pub fn syndrome(&self) -> u8 {
        self.raw[55]
    }
    pub fn vendor_err(&self) -> u8 {
        self.raw[54]
    }
    pub fn byte_cnt(&self) -> u32 {
        u32::from_be_bytes(self.raw[44..48].try_into().unwrap())
    }
    pub fn imm(&self) -> [u8; 4] {
        self.raw[36..40].try_into().unwrap()
    }
    pub fn rqpn(&self) -> u32 {
        u32::from_be_bytes(self.raw[24..28].try_into().unwrap()) & 0xff_ffff
    }
    /// `flags_rqpn` bits 29:28 ("GRH present", cq.c `handle_responder`).
    pub fn grh(&self) -> u8 {
        (self.raw[24] >> 4) & 3
    }
    /// `flags_rqpn` bits 25:24 (RoCE L3 header type, kernel `handle_responder`).
    pub fn l3_type(&self) -> u8 {
        self.raw[24] & 3
    }
}

impl Env {
    pub fn new() -> Env {
        Env::with_model(Model::new())
    }

    pub fn with_model(model: Model) -> Env {
        let mut ctl = model.control();
        let uar = ctl.alloc_uar().unwrap();
        let pd = ctl.alloc_pd().unwrap();
        Env { bar: model.bar(), dma: model.dma(), ctl, model, uar, pd }
    }

    pub fn cq(&mut self, log: u8) -> TCq {
        let buf = self.dma.alloc(64 << log, 4096).unwrap();
        // Software initialises every entry to opcode INVALID (rdma-core cq.c).
        for i in 0..(1usize << log) {
            buf.write_bytes(i * 64 + 63, &[0xf0]);
        }
        let dbrec = self.dma.alloc(8, 8).unwrap();
        let cqn = self
            .ctl
            .create_cq(&CqParams {
                log_size: log,
                buf: buf.bus(),
                dbrec: dbrec.bus(),
                uar: self.uar,
            })
            .unwrap();
        TCq { cqn, buf, dbrec, log, ci: 0 }
    }

    pub fn qp(&mut self, scq: &TCq, rcq: &TCq, log_sq: u8, log_rq: Option<u8>) -> TQp {
        self.qp_with(Service::Rc, scq, rcq, log_sq, log_rq, 4)
    }

    /// A QP of `service` whose receive WQEs are `1 << stride` bytes.
    pub fn qp_with(
        &mut self,
        service: Service,
        scq: &TCq,
        rcq: &TCq,
        log_sq: u8,
        log_rq: Option<u8>,
        stride: u8,
    ) -> TQp {
        let rq_bytes = log_rq.map_or(0, |l| (1usize << l) << stride);
        let len = rq_bytes + (64usize << log_sq);
        let buf = self.dma.alloc(len, 4096).unwrap();
        let dbrec = self.dma.alloc(8, 8).unwrap();
        let qpn = self
            .ctl
            .create_qp(&QpParams {
                service,
                pd: self.pd,
                send_cq: scq.cqn,
                recv_cq: rcq.cqn,
                log_sq_size: log_sq,
                log_rq_size: log_rq,
                log_rq_stride: stride,
                buf: buf.bus(),
                dbrec: dbrec.bus(),
                uar: self.uar,
            })
            .unwrap();
        TQp {
            qpn: qpn.0,
            buf,
            dbrec,
            log_sq,
            sq_off: rq_bytes,
            log_rq,
            stride,
            pi: 0,
            rq_pi: 0,
            half: 0,
            uar_off: self.uar.bar_offset,
        }
    }

    /// An MTT region of `len` bytes at virtual address `va`.
    pub fn region(&mut self, len: usize, va: u64, access: Access) -> Region {
        let buf = self.dma.alloc(len, 4096).unwrap();
        let key = self
            .ctl
            .create_mkey(&MkeyParams {
                pd: self.pd,
                start: va,
                len: len as u64,
                access,
                translation: Translation::Mtt { base: buf.bus(), page_shift: 12 },
            })
            .unwrap();
        Region { buf, key, va }
    }

    /// Bring `a` and `b` (on this model) to RTS, connected by loopback.
    pub fn connect_loopback(&mut self, a: &TQp, b: &TQp) {
        let ctl = &mut self.ctl;
        for (x, y) in [(a, b), (b, a)] {
            rts(ctl, x.qpn, y.qpn, Path::Loopback, 0x100, 0x100, 7);
        }
    }

    pub fn ring(&self, qp: &mut TQp, wqe: &[u8]) {
        post(&self.bar, qp, wqe, Ring::Db);
    }
}

/// Two QPs on one model, each with its CQ: `a` (no receive queue) sends to `b` (8 receive
/// WQEs); a 4 KiB source and destination region.
pub struct Pair {
    pub env: Env,
    pub cq_a: TCq,
    pub cq_b: TCq,
    pub a: TQp,
    pub b: TQp,
    pub src: Region,
    pub dst: Region,
}

impl Pair {
    /// Build the pair; `connect` brings `a` and `b` to RTS.
    pub fn new(connect: impl FnOnce(&mut Env, &TQp, &TQp)) -> Pair {
        let mut env = Env::new();
        let cq_a = env.cq(4);
        let cq_b = env.cq(4);
        let a = env.qp(&cq_a, &cq_a, 4, None);
        let b = env.qp(&cq_b, &cq_b, 4, Some(3));
        connect(&mut env, &a, &b);
        let src = env.region(4096, 0x10_0000, RW);
        let dst = env.region(4096, 0x20_0000, RW);
        Pair { env, cq_a, cq_b, a, b, src, dst }
    }
}

pub fn rts(
    ctl: &mut ModelControl,
    qpn: u32,
    remote: u32,
    path: Path,
    sq_psn: u32,
    rq_psn: u32,
    rnr: u8,
) {
    rts_with(ctl, qpn, remote, path, (sq_psn, rq_psn), rnr, RW);
}

/// The local ACK timeout exponent most tests use: 4.096 µs << 14, 67 ms.
pub const ACK_TIMEOUT: u8 = 14;

/// [`rts`] with the QP's responder rights `access`; `psn` is (send, receive).
pub fn rts_with(
    ctl: &mut ModelControl,
    qpn: u32,
    remote: u32,
    path: Path,
    psn: (u32, u32),
    rnr: u8,
    access: Access,
) {
    rts_timed(ctl, qpn, remote, path, psn, (rnr, ACK_TIMEOUT), access);
}

/// [`rts_with`] with the local ACK timeout exponent `timeout` (`(rnr_retry, timeout)`).
pub fn rts_timed(
    ctl: &mut ModelControl,
    qpn: u32,
    remote: u32,
    path: Path,
    (sq_psn, rq_psn): (u32, u32),
    (rnr, timeout): (u8, u8),
    access: Access,
) {
    ctl.modify_qp(QpNum(qpn), &Transition::RstToInit { port: 1, access }).unwrap();
    ctl.modify_qp(
        QpNum(qpn),
        &Transition::InitToRtr { remote_qpn: QpNum(remote), path, mtu: 3, rq_psn },
    )
    .unwrap();
    ctl.modify_qp(
        QpNum(qpn),
        &Transition::RtrToRts { sq_psn, timeout, retry_cnt: 7, rnr_retry: rnr },
    )
    .unwrap();
}

/// Bring a UD or GSI QP to RTS with Q_Key `qkey`.
pub fn ud_rts(ctl: &mut ModelControl, qpn: u32, qkey: u32) {
    let gsi = false;
    ctl.modify_qp(QpNum(qpn), &Transition::RstToInitUd { port: 1, qkey, gsi }).unwrap();
    ctl.modify_qp(QpNum(qpn), &Transition::InitToRtrUd { gsi }).unwrap();
    ctl.modify_qp(QpNum(qpn), &Transition::RtrToRtsUd { sq_psn: 0, gsi }).unwrap();
}

/// How to ring.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Ring {
    /// 8-byte doorbell.
    Db,
    /// BlueFlame copy.
    Bf,
    /// Write the WQE and the doorbell record, ring nothing.
    None,
}

/// Build an RDMA WRITE (opcode 0x08) or WRITE WITH IMM (0x09) WQE as rdma-core's
/// `_mlx5_post_send` does (FORMAT table): ctrl, raddr, one data segment per non-zero SGE.
// The arguments are the inputs of a FORMAT `case` record, in its order.
#[allow(clippy::too_many_arguments)]
pub fn wqe(
    pi: u16,
    qpn: u32,
    opcode: u8,
    fm_ce_se: u8,
    imm: u32,
    raddr: u64,
    rkey: u32,
    sges: &[(u64, u32, u32)],
) -> Vec<u8> {
    let ds = 2 + sges.len();
    let mut w = vec![0u8; (ds * 16).div_ceil(64) * 64];
    w[0..4].copy_from_slice(&((u32::from(pi) << 8) | u32::from(opcode)).to_be_bytes());
    w[4..8].copy_from_slice(&((qpn << 8) | ds as u32).to_be_bytes());
    w[11] = fm_ce_se;
    w[12..16].copy_from_slice(&imm.to_be_bytes());
    w[16..24].copy_from_slice(&raddr.to_be_bytes());
    w[24..28].copy_from_slice(&rkey.to_be_bytes());
    for (k, (addr, len, lkey)) in sges.iter().enumerate() {
        let o = 32 + 16 * k;
        w[o..o + 4].copy_from_slice(&len.to_be_bytes());
        w[o + 4..o + 8].copy_from_slice(&lkey.to_be_bytes());
        w[o + 8..o + 16].copy_from_slice(&addr.to_be_bytes());
    }
    w
}

/// An inline RDMA WRITE: `htobe32(len | 0x80000000)` then the bytes, padded to 16.
pub fn inline_wqe(pi: u16, qpn: u32, fm_ce_se: u8, raddr: u64, rkey: u32, data: &[u8]) -> Vec<u8> {
    let ds = 2 + (4 + data.len()).div_ceil(16);
    let mut w = wqe(pi, qpn, 0x08, fm_ce_se, 0, raddr, rkey, &[]);
    w.resize((ds * 16).div_ceil(64) * 64, 0);
    w[7] = ds as u8;
    w[32..36].copy_from_slice(&(data.len() as u32 | 0x8000_0000).to_be_bytes());
    w[36..36 + data.len()].copy_from_slice(data);
    w
}

/// The control segment alone: `opmod_idx_opcode`, `qpn_ds` (DS filled by [`finish`]),
/// `fm_ce_se`, `imm`.
pub fn ctrl(pi: u16, qpn: u32, opcode: u8, fm_ce_se: u8, imm: u32) -> Vec<u8> {
    let mut w = vec![0u8; 16];
    w[0..4].copy_from_slice(&((u32::from(pi) << 8) | u32::from(opcode)).to_be_bytes());
    w[4..8].copy_from_slice(&(qpn << 8).to_be_bytes());
    w[11] = fm_ce_se;
    w[12..16].copy_from_slice(&imm.to_be_bytes());
    w
}

/// Append one `struct mlx5_wqe_data_seg` per SGE (`set_data_ptr_seg`).
fn data_segs(w: &mut Vec<u8>, sges: &[(u64, u32, u32)]) {
    for &(addr, len, lkey) in sges {
        w.extend_from_slice(&len.to_be_bytes());
        w.extend_from_slice(&lkey.to_be_bytes());
        w.extend_from_slice(&addr.to_be_bytes());
    }
}

/// Append an inline segment (`htobe32(len | MLX5_INLINE_SEG)`, bytes, padding to 16).
fn inline_seg(w: &mut Vec<u8>, data: &[u8]) {
    w.extend_from_slice(&(data.len() as u32 | 0x8000_0000).to_be_bytes());
    w.extend_from_slice(data);
    w.resize(w.len().next_multiple_of(16), 0);
}

/// Set DS from the length and pad the WQE to whole WQEBBs.
pub fn finish(mut w: Vec<u8>) -> Vec<u8> {
    let ds = w.len() / 16;
    w[7] = ds as u8;
    w.resize(w.len().next_multiple_of(64), 0);
    w
}

/// RC SEND (0x0a) or SEND WITH IMM (0x0b): ctrl then data segments.
pub fn send_wqe(pi: u16, qpn: u32, opcode: u8, imm: u32, sges: &[(u64, u32, u32)]) -> Vec<u8> {
    let mut w = ctrl(pi, qpn, opcode, 0x08, imm);
    data_segs(&mut w, sges);
    finish(w)
}

/// RC SEND with its payload inline.
pub fn send_inline_wqe(pi: u16, qpn: u32, data: &[u8]) -> Vec<u8> {
    let mut w = ctrl(pi, qpn, 0x0a, 0x08, 0);
    inline_seg(&mut w, data);
    finish(w)
}

/// RC RDMA READ (0x10): ctrl, raddr, one data segment per destination SGE.
pub fn read_wqe(pi: u16, qpn: u32, raddr: u64, rkey: u32, sges: &[(u64, u32, u32)]) -> Vec<u8> {
    wqe(pi, qpn, 0x10, 0x08, 0, raddr, rkey, sges)
}

/// RC CAS (0x11) or FAA (0x12): ctrl, raddr, atomic segment (`_set_atomic_seg`: CAS swap then
/// compare, FAA the addend), one 8-byte data segment for the result.
pub fn atomic_wqe(
    pi: u16,
    qpn: u32,
    opcode: u8,
    (raddr, rkey): (u64, u32),
    (swap_add, compare): (u64, u64),
    result: (u64, u32),
) -> Vec<u8> {
    let mut w = ctrl(pi, qpn, opcode, 0x08, 0);
    w.extend_from_slice(&raddr.to_be_bytes());
    w.extend_from_slice(&rkey.to_be_bytes());
    w.extend_from_slice(&[0; 4]);
    w.extend_from_slice(&swap_add.to_be_bytes());
    w.extend_from_slice(&compare.to_be_bytes());
    data_segs(&mut w, &[(result.0, 8, result.1)]);
    finish(w)
}

/// An address handle as `mlx5_create_ah` fills `struct mlx5_wqe_av` on RoCE v2.
#[derive(Clone, Copy)]
pub struct Av {
    pub qkey: u32,
    pub dqpn: u32,
    pub dgid: [u8; 16],
    pub dmac: [u8; 6],
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub tclass: u8,
    pub udp_sport: u16,
}

impl Av {
    /// The 48 bytes (`set_datagram_seg`: the AH's AV, then `dqp_dct` = QPN |
    /// `MLX5_EXTENDED_UD_AV` and the Q_Key).
    fn bytes(&self) -> [u8; 48] {
        let mut a = [0u8; 48];
        a[0..4].copy_from_slice(&self.qkey.to_be_bytes());
        a[8..12].copy_from_slice(&(self.dqpn | 0x8000_0000).to_be_bytes());
        a[14..16].copy_from_slice(&self.udp_sport.to_be_bytes());
        a[20..26].copy_from_slice(&self.dmac);
        a[26] = self.tclass;
        a[27] = self.hop_limit;
        // grh bit 30 stays 0 on RoCE; sgid_index in 27:20; flow label 0.
        a[28..32].copy_from_slice(&(u32::from(self.sgid_index) << 20).to_be_bytes());
        a[32..48].copy_from_slice(&self.dgid);
        a
    }
}

/// UD SEND (WITH IMM): ctrl, datagram segment, data segments (or an inline payload).
pub fn ud_wqe(
    pi: u16,
    qpn: u32,
    imm: Option<u32>,
    av: &Av,
    sges: &[(u64, u32, u32)],
    inline: Option<&[u8]>,
) -> Vec<u8> {
    let opcode = if imm.is_some() { 0x0b } else { 0x0a };
    let mut w = ctrl(pi, qpn, opcode, 0x08, imm.unwrap_or(0));
    w.extend_from_slice(&av.bytes());
    data_segs(&mut w, sges);
    if let Some(d) = inline {
        inline_seg(&mut w, d);
    }
    finish(w)
}

/// Write `wqe` into the send ring at the QP's counter, advance it, update `dbrec[1]`, ring.
pub fn post(bar: &MemBar, qp: &mut TQp, wqe: &[u8], how: Ring) {
    let n = wqe.len() / 64;
    let cnt = 1usize << qp.log_sq;
    for i in 0..n {
        let slot = (usize::from(qp.pi) + i) & (cnt - 1);
        qp.buf.write_bytes(qp.sq_off + slot * 64, &wqe[i * 64..(i + 1) * 64]);
    }
    qp.pi = qp.pi.wrapping_add(n as u16);
    // WQEs before the doorbell record (udma_to_device_barrier).
    barrier::to_device();
    qp.dbrec.write_u32(4, u32::from(qp.pi).to_be());
    barrier::to_device();
    let reg = qp.uar_off + 0x800 + qp.half * 0x100;
    match how {
        Ring::Db => bar.write_bytes8(reg, wqe[..8].try_into().unwrap()),
        Ring::Bf => {
            let len = (usize::from(wqe[7] & 0x3f) * 16).div_ceil(64) * 64;
            for (i, chunk) in wqe[..len].chunks(64).enumerate() {
                let mut block = [0u64; 8];
                for (j, w) in chunk.chunks(8).enumerate() {
                    block[j] = u64::from_ne_bytes(w.try_into().unwrap());
                }
                bar.write_wc64(reg + i * 64, &block);
            }
        }
        Ring::None => return,
    }
    barrier::wc_flush();
    qp.half ^= 1;
}

/// Post a receive WQE with one (possibly zero-length) scatter entry; update `dbrec[0]`.
pub fn post_recv(qp: &mut TQp, addr: u64, len: u32, lkey: u32) {
    let cnt = 1usize << qp.log_rq.unwrap();
    let slot = usize::from(qp.rq_pi) & (cnt - 1);
    let mut w = [0u8; 16];
    w[0..4].copy_from_slice(&len.to_be_bytes());
    w[4..8].copy_from_slice(&lkey.to_be_bytes());
    w[8..16].copy_from_slice(&addr.to_be_bytes());
    qp.buf.write_bytes(slot << qp.stride, &w);
    qp.rq_pi = qp.rq_pi.wrapping_add(1);
    barrier::to_device();
    qp.dbrec.write_u32(0, u32::from(qp.rq_pi).to_be());
}

/// Post a receive WQE with scatter entries, ended by an `MLX5_INVALID_LKEY` entry when the
/// WQE has room (rdma-core `mlx5_post_recv`); update `dbrec[0]`.
pub fn post_recv_sges(qp: &mut TQp, sges: &[(u64, u32, u32)]) {
    let cnt = 1usize << qp.log_rq.unwrap();
    let size = 1usize << qp.stride;
    let slot = usize::from(qp.rq_pi) & (cnt - 1);
    let mut w = Vec::new();
    data_segs(&mut w, sges);
    if w.len() < size {
        data_segs(&mut w, &[(0, 0, 0x100)]);
    }
    w.resize(size, 0);
    qp.buf.write_bytes(slot << qp.stride, &w);
    qp.rq_pi = qp.rq_pi.wrapping_add(1);
    barrier::to_device();
    qp.dbrec.write_u32(0, u32::from(qp.rq_pi).to_be());
}

/// The next CQE, if software owns it (rdma-core `get_sw_cqe`), without consuming it.
pub fn peek(cq: &TCq) -> Option<Cqe> {
    let size = 1u32 << cq.log;
    let at = (cq.ci & (size - 1)) as usize * 64;
    let mut op = [0u8; 1];
    cq.buf.read_bytes(at + 63, &mut op);
    let owner_ok = (op[0] & 1 == 1) == (cq.ci & size != 0);
    if op[0] >> 4 == 0xf || !owner_ok {
        return None;
    }
    barrier::from_device();
    let mut raw = [0u8; 64];
    cq.buf.read_bytes(at, &mut raw);
    Some(Cqe { raw })
}

/// Wait (bounded) for the next CQE, consume it and update the CQ doorbell record.
pub fn poll(cq: &mut TCq) -> Cqe {
    let end = Instant::now() + WAIT;
    loop {
        if let Some(c) = peek(cq) {
            cq.ci = cq.ci.wrapping_add(1);
            cq.dbrec.write_u32(0, (cq.ci & 0xff_ffff).to_be());
            return c;
        }
        assert!(Instant::now() < end, "no CQE within {WAIT:?}");
        std::thread::sleep(Duration::from_micros(20));
    }
}

/// Let the model finish, then assert no CQE is pending.
pub fn assert_empty(model: &Model, cq: &TCq) {
    assert!(model.quiesce(WAIT));
    assert!(peek(cq).is_none(), "unexpected CQE {:?}", peek(cq));
}

pub fn fill(buf: &DmaBuf, off: usize, len: usize, seed: u8) {
    let data: Vec<u8> = (0..len).map(|i| seed.wrapping_add(i as u8)).collect();
    buf.write_bytes(off, &data);
}

pub fn bytes(buf: &DmaBuf, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    buf.read_bytes(off, &mut v);
    v
}

pub const RW: Access = Access::REMOTE_WRITE.union(Access::LOCAL_WRITE);
