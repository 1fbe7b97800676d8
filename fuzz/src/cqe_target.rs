//! `cqe`: the completions the mlx5 driver reads, through its real polling path.
//!
//! A driver opened on the data path's fakes (a BAR in memory, heap DMA, [`NullControl`]):
//! the script posts work and writes CQEs of every kind into the CQs the way the HCA does
//! ([`CqWriter`]: body, fence, `op_own` with the lap's owner bit), any opcode, counter, QP
//! number, syndrome or plain garbage, and polls. Two rigs, chosen by the first byte:
//!
//! * an RC QP: RDMA WRITEs (signalled or not) and empty receives posted, CQEs on both CQs,
//!   [`SendQueue::poll`] and [`RecvQueue::poll_recv`], moves to ERR (flush);
//! * the GSI QP under the CM ([`GsiPort`] + [`Cm`]): a receive CQE with a datagram (GRH +
//!   MAD, any length) in the receive buffers, taken by [`Cm::poll`], and send CQEs of the
//!   MADs the CM sends.
//!
//! Each 64-byte entry also goes through the pure decoders ([`CqeRepr::parse`],
//! [`responder_completion`]). Checked besides "no panic, no hang": no completion reports a
//! request that was not posted, none is reported twice, and once everything is dropped no
//! DMA block is left allocated.

use std::collections::HashSet;

use rdma_pmd::cm::{Cm, CmConfig, NoQps};
use rdma_pmd::{
    BusAddr, Completion, Gid, Mac, Post, QpNum, RecvQueue, RemoteBuf, Rkey, SendFlags, SendQueue,
    WcStatus,
};
use rdma_pmd_hal::mem::{HeapDma, MemBar};
use rdma_pmd_mlx5::cm::{GsiPort, RX_SLOT};
use rdma_pmd_mlx5::control::{Access, CqParams};
use rdma_pmd_mlx5::datapath::recv::responder_completion;
use rdma_pmd_mlx5::layout::cqe::{Cqe, CqeRepr};
use rdma_pmd_mlx5::testing::{CqWriter, NullControl};
use rdma_pmd_mlx5::{CqeOpcode, Mlx5, QpConfig, SendOpcode, SharedDma};

use crate::cm_target::{grh_v4, ME, PEER, PORT};
use crate::input::{Script, Writer};
use crate::Trace;

type Dev = Mlx5<MemBar, SharedDma<std::sync::Arc<HeapDma>>, NullControl>;

/// Steps of one script.
const MAX_STEPS: usize = 192;
/// Receive slots of the GSI port.
const GSI_RQ: usize = 4;
/// Where the writes go.
const REMOTE: RemoteBuf = RemoteBuf::new(0x7000_0000, Rkey(0x99));
/// Byte offset of `flags_rqpn` in `struct mlx5_cqe64` (mlx5dv.h): bits 28..29 the GRH
/// flags, 0..23 the source QPN.
const FLAGS_RQPN: usize = 24;

/// Script opcodes (low 3 bits of a step's first byte).
pub mod op {
    /// RC: post an RDMA WRITE (flags byte: bit 0 signalled), length byte.
    /// GSI: time passes (`u16` ms).
    pub const POST: u8 = 0;
    /// RC: post an empty receive. GSI: a datagram (`u16` length, bytes) in every receive
    /// buffer.
    pub const POST_RECV: u8 = 1;
    /// A CQE on the send CQ: opcode nibble, 64 bytes; with the high bit, the counter and QP
    /// number are set to the oldest outstanding request's.
    pub const SEND_CQE: u8 = 2;
    /// A CQE on the receive CQ: as [`SEND_CQE`]; the GSI rig also sets the GRH flag, source
    /// QP 1 and the byte count of the last datagram.
    pub const RECV_CQE: u8 = 3;
    /// RC: poll the send CQ (array size byte). (The GSI rig polls the CM after every step.)
    pub const POLL: u8 = 4;
    /// RC: poll the receive CQ (array size byte).
    pub const POLL_RECV: u8 = 5;
    /// Move the QP to ERR (RC only).
    pub const ERROR: u8 = 6;
    /// Decode 64 bytes with the pure decoders only.
    pub const DECODE: u8 = 7;
}

/// The driver's CQE handling, driven by `data` (see the module docs).
pub fn run(data: &[u8]) -> Trace {
    let mut t = Trace::new();
    let mut s = Script::new(data);
    let mode = s.byte();
    let dma = HeapDma::new();
    {
        let dev: Dev =
            Mlx5::open(MemBar::new(64 * 1024), SharedDma(dma.clone()), NullControl::default())
                .expect("the fake device opens");
        if mode & 1 == 0 {
            rc(&mut s, &dev, &dma, &mut t);
        } else {
            gsi(&mut s, &dev, &dma, &mut t);
        }
    }
    // Whatever the CQEs said, the QPs, regions and rings are given back once dropped (the
    // fake control seam never refuses a destroy).
    assert_eq!(dma.live_blocks(), 0, "DMA blocks leaked");
    t
}

/// Write `body` as the next CQE of `w`, with opcode `op`, through the DMA space.
fn put(w: &mut CqWriter, dma: &HeapDma, body: &[u8; 64], op: CqeOpcode) {
    w.write(body, op, |bus, bytes| {
        assert!(dma.write(bus, bytes), "the CQ is mapped");
    });
}

/// The pure decoders over one entry.
fn decode(body: &[u8; 64], qpn: QpNum) {
    let c = Cqe::new_unchecked(&body[..]);
    if let Ok(r) = CqeRepr::parse(&c) {
        let _ = r.completion(7);
        let _ = responder_completion(&c, &r, 7, qpn);
    }
    let _ = (c.flags_rqpn(), c.vlan_info(), c.l4_hdr_type_etc(), c.s_wqe_opcode_raw());
}

fn cq_writers(
    dev: &Dev,
    (scq, rcq): (rdma_pmd_mlx5::control::Cqn, rdma_pmd_mlx5::control::Cqn),
) -> (CqWriter, CqWriter) {
    let c = dev.control();
    let p = |n| -> CqParams { c.cq(n).expect("the CQ was created") };
    (CqWriter::new(p(scq)), CqWriter::new(p(rcq)))
}

fn rc(s: &mut Script<'_>, dev: &Dev, dma: &HeapDma, t: &mut Trace) {
    let region = dev.reg_physical(4096, Access::LOCAL_WRITE).expect("a region");
    let mut qp = dev.create_qp::<16, 16>(&QpConfig::default()).expect("a QP");
    qp.connect_loopback(QpNum(0x777)).expect("to RTS");
    let qpn = qp.qp_num();
    let (mut sw, mut rw) = cq_writers(dev, qp.cq_nums());
    // Posted and not yet reported; reported.
    let mut sends: Vec<(u64, u16)> = Vec::new();
    let mut recvs: Vec<u64> = Vec::new();
    let mut seen: HashSet<u64> = HashSet::new();
    let mut next_id = 1u64;
    let mut out = [Completion::default(); 8];

    for _ in 0..MAX_STEPS {
        if s.is_empty() {
            break;
        }
        let b = s.byte();
        match b & 7 {
            op::POST => {
                let flags =
                    if s.byte() & 1 != 0 { SendFlags::SIGNALED } else { SendFlags::empty() };
                let len = usize::from(s.byte());
                let pi = qp.sq_pi();
                let buf = region.slice(0, len).expect("inside the region");
                if qp.post_write(next_id, buf, flags, REMOTE).is_ok() {
                    sends.push((next_id, pi));
                    next_id += 1;
                }
            }
            op::POST_RECV => {
                if qp.post_recv_empty(next_id).is_ok() {
                    recvs.push(next_id);
                    next_id += 1;
                }
            }
            op::SEND_CQE | op::RECV_CQE => {
                let nib = s.byte() & 0xf;
                let mut body: [u8; 64] = s.array();
                if b & 0x80 != 0 {
                    let mut c = Cqe::new_unchecked(&mut body[..]);
                    let counter = if b & 7 == op::SEND_CQE {
                        sends.first().map_or(0, |&(_, pi)| pi)
                    } else {
                        (recvs.len() as u16).wrapping_sub(1)
                    };
                    c.set_s_wqe_opcode_qpn(SendOpcode::RdmaWrite, qpn);
                    c.set_wqe_counter(counter);
                }
                decode(&body, qpn);
                let w = if b & 7 == op::SEND_CQE { &mut sw } else { &mut rw };
                put(w, dma, &body, CqeOpcode::from(nib));
            }
            op::POLL => {
                let k = 1 + usize::from(s.byte()) % out.len();
                if let Ok(n) = qp.poll(&mut out[..k]) {
                    for c in &out[..n] {
                        let i = sends.iter().position(|&(id, _)| id == c.wr_id);
                        let i =
                            i.unwrap_or_else(|| panic!("send completion for {c:?}: not posted"));
                        assert!(seen.insert(c.wr_id), "send completion twice: {c:?}");
                        sends.drain(..=i);
                        t.insert(if c.status == WcStatus::Success {
                            "send-ok"
                        } else {
                            "send-error"
                        });
                    }
                }
            }
            op::POLL_RECV => {
                let k = 1 + usize::from(s.byte()) % out.len();
                if let Ok(n) = qp.poll_recv(&mut out[..k]) {
                    for c in &out[..n] {
                        let i = recvs.iter().position(|&id| id == c.wr_id);
                        let i =
                            i.unwrap_or_else(|| panic!("receive completion for {c:?}: not posted"));
                        assert!(seen.insert(c.wr_id), "receive completion twice: {c:?}");
                        recvs.remove(i);
                        t.insert(if c.status == WcStatus::Success {
                            "recv-ok"
                        } else {
                            "recv-error"
                        });
                    }
                }
            }
            op::ERROR => {
                let _ = qp.to_error();
            }
            _ => decode(&s.array(), qpn),
        }
    }
}

fn gsi(s: &mut Script<'_>, dev: &Dev, dma: &HeapDma, t: &mut Trace) {
    let mut rx = dev
        .reg_physical(
            GsiPort::<MemBar, SharedDma<std::sync::Arc<HeapDma>>, NullControl, GSI_RQ>::RX_BYTES,
            Access::LOCAL_WRITE,
        )
        .expect("a receive region");
    // Physical mode: key-space addresses are bus addresses.
    let base = rx.addr();
    let mut port: GsiPort<_, _, _, GSI_RQ> = GsiPort::new(dev, &mut rx, 1).expect("the GSI QP");
    port.add_neighbour(Gid::from_ipv4(PEER), Mac([2, 0, 0, 0, 0, 2])).expect("room");
    // The number the device gave the GSI QP (what its CQEs carry; `qp_num` says 1).
    let qpn = dev.control().qps.last().expect("the GSI QP was created").0;
    let (mut sw, mut rw) = cq_writers(dev, port.qp().cq_nums());
    let mut cm: Cm<_, 4> = Cm::new(port, CmConfig::new(0x0002_c903_0000_0001, 42)).expect("a CM");
    cm.listen(PORT).expect("a listener");
    let mut now = rdma_pmd::cm::Micros(0);
    let mut len = 0u32;

    for _ in 0..MAX_STEPS {
        if s.is_empty() {
            break;
        }
        let b = s.byte();
        match b & 7 {
            op::POST => now = now.plus_ms(u64::from(s.u16())),
            op::POST_RECV => {
                let n = usize::from(s.u16()) % (RX_SLOT + 1);
                let d = s.take(n);
                len = d.len() as u32;
                for i in 0..GSI_RQ {
                    assert!(dma.write(BusAddr(base + (i * RX_SLOT) as u64), d), "mapped");
                }
            }
            op::SEND_CQE | op::RECV_CQE => {
                let nib = s.byte() & 0xf;
                let mut body: [u8; 64] = s.array();
                if b & 0x80 != 0 {
                    let mut c = Cqe::new_unchecked(&mut body[..]);
                    c.set_s_wqe_opcode_qpn(SendOpcode::Send, qpn);
                    if b & 7 == op::RECV_CQE {
                        c.set_byte_cnt(len);
                        // A GRH present (bits 28..29), source QP 1.
                        body[FLAGS_RQPN..FLAGS_RQPN + 4]
                            .copy_from_slice(&(1u32 << 28 | 1).to_be_bytes());
                    }
                }
                decode(&body, qpn);
                let w = if b & 7 == op::SEND_CQE { &mut sw } else { &mut rw };
                put(w, dma, &body, CqeOpcode::from(nib));
            }
            op::DECODE => decode(&s.array(), qpn),
            _ => {}
        }
        for _ in 0..8 {
            let Some(ev) = cm.poll(now, &mut NoQps) else { break };
            if ev.kind == rdma_pmd::cm::EventKind::ConnectRequest {
                t.insert("gsi-connect-request");
            }
        }
    }
    drop(cm);
}

/// Seed scripts: a signalled WRITE completed, a receive completed, an error CQE then the
/// flush; and a REQ arriving on the GSI QP (GRH, MAD, the receive CQE with the GRH flag).
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();
    let body = [0u8; 64];

    let mut w = Writer::default();
    w.byte(0);
    w.byte(op::POST).byte(1).byte(64);
    w.byte(op::SEND_CQE | 0x80).byte(0).put(&body);
    w.byte(op::POLL).byte(4);
    w.byte(op::POST_RECV);
    w.byte(op::RECV_CQE | 0x80).byte(2).put(&{
        let mut b = [0u8; 64];
        Cqe::new_unchecked(&mut b[..]).set_byte_cnt(0);
        b
    });
    w.byte(op::POLL_RECV).byte(4);
    out.push(("rc-write-and-recv", w.bytes.clone()));

    let mut w = Writer::default();
    w.byte(0);
    w.byte(op::POST).byte(0).byte(8).byte(op::POST).byte(1).byte(8);
    let mut err = [0u8; 64];
    {
        let mut c = Cqe::new_unchecked(&mut err[..]);
        c.set_error(rdma_pmd_mlx5::Syndrome::from(0x05), 0x32);
    }
    w.byte(op::SEND_CQE | 0x80).byte(13).put(&err);
    w.byte(op::POLL).byte(8).byte(op::ERROR).byte(op::POLL).byte(8);
    out.push(("rc-error-cqe", w.bytes.clone()));

    // The REQ a peer CM sends, as the GSI QP receives it.
    let cm_seed = crate::cm_target::seeds();
    let req = {
        let s = &cm_seed[0].1;
        // `[cfg, cfg, RAW, len(2), datagram]`
        let n = usize::from(u16::from_le_bytes([s[3], s[4]]));
        s[5..5 + n].to_vec()
    };
    assert_eq!(&req[..40], &grh_v4(PEER, ME)[..]);
    let mut w = Writer::default();
    w.byte(1);
    w.byte(op::POST_RECV).u16(req.len() as u16).put(&req);
    w.byte(op::RECV_CQE | 0x80).byte(2).put(&body);
    w.byte(op::POST).u16(10);
    w.byte(op::SEND_CQE | 0x80).byte(0).put(&body);
    out.push(("gsi-req", w.bytes.clone()));
    out
}
