//! The load generator's accounting and verification, on the mlx5 driver over the software
//! device model (which performs each write and completes it): every write lands and is
//! verified, every region count returns to zero, and a wrong destination byte is caught.
//!
//! The send queue is the driver's `Qp`, not a software stand-in: the one fake of the
//! `SendQueue` seam is the core's own (`src/post/tests.rs`), which checks the posting forms.

use std::sync::Arc;

use loadgen::{fill_pattern, Buffers, Host, Plan};
use rdma_pmd::SendQueue;
use rdma_pmd_hal::mem::{HeapDma, MemBar};
use rdma_pmd_mlx5::control::Access;
use rdma_pmd_mlx5::{Mlx5, QpConfig, Region, SharedDma};
use rdma_pmd_mlx5_model::{Model, ModelControl};

type Reg<'a> = Region<'a, MemBar, SharedDma<Arc<HeapDma>>, ModelControl>;

/// The host side: stamps are CPU writes into their region, the destination is read back.
struct RegionHost<'a> {
    stamps: &'a Reg<'a>,
    dst: &'a Reg<'a>,
}

impl Host for RegionHost<'_> {
    fn write_stamp(&mut self, cell: usize, value: u64) {
        self.stamps.write(cell * 8, &value.to_le_bytes()).expect("stamp cell in bounds");
    }
    fn read_dest(&mut self, off: usize, out: &mut [u8]) {
        self.dst.read(off, out).expect("destination in bounds");
    }
}

/// Run `plan` over `stamp_cells` cells, `pieces` pattern pieces of `piece_len` bytes and
/// `slots` destination slots of `slot_len` bytes, through the host `wrap` makes; checks that
/// the model saw no protocol violation and that no region is left counting a request.
fn run(
    stamp_cells: usize,
    pieces: usize,
    piece_len: usize,
    slots: usize,
    slot_len: usize,
    plan: &Plan,
    wrap: impl FnOnce(RegionHost<'_>) -> Box<dyn Host + '_>,
) -> rdma_pmd::Result<loadgen::Report> {
    let model = Model::new();
    let dev = Mlx5::open(model.bar(), SharedDma(model.dma()), model.control()).expect("open");
    let stamps = dev.reg(stamp_cells * 8, Access::LOCAL_WRITE).expect("stamps");
    let pool = dev.reg(pieces * piece_len, Access::LOCAL_WRITE).expect("pieces");
    let dst = dev.reg(slots * slot_len, Access::LOCAL_WRITE | Access::REMOTE_WRITE).expect("dst");
    let mut tmp = vec![0u8; piece_len];
    for p in 0..pieces {
        fill_pattern(p, &mut tmp);
        pool.write(p * piece_len, &tmp).expect("fill pattern");
    }
    // 64 requests, 8 SGEs, 128 inline bytes: longer inline candidates are gathered instead.
    let cfg = QpConfig { max_send_sge: Some(8), max_inline: Some(128), ..QpConfig::default() };
    let mut a = dev.create_qp::<64, 16>(&cfg).expect("create qp a");
    let mut b = dev.create_qp::<64, 16>(&cfg).expect("create qp b");
    assert_eq!((a.caps().max_send_wr, a.caps().max_sge, a.caps().max_inline), (64, 8, 128));
    let (na, nb) = (a.qp_num(), b.qp_num());
    a.connect_loopback(nb).expect("connect a");
    b.connect_loopback(na).expect("connect b");
    let bufs = Buffers {
        stamps: (0..stamp_cells).map(|c| stamps.slice(c * 8, 8).unwrap()).collect(),
        pieces: (0..pieces).map(|p| pool.slice(p * piece_len, piece_len).unwrap()).collect(),
        remote: dst.remote(0),
        slots: slots as u64,
        slot_len,
    };
    let mut host = wrap(RegionHost { stamps: &stamps, dst: &dst });
    let rep = loadgen::run(&mut a, &bufs, &mut *host, plan);
    assert!(model.violations().is_empty(), "model saw {:?}", model.violations());
    if rep.is_ok() {
        assert_eq!(stamps.usage().in_flight() + pool.usage().in_flight(), 0);
    }
    rep
}

#[test]
fn every_write_lands_and_is_verified() {
    let plan = Plan { writes: 10_000, batch: 7, signal_every: 3, ..Plan::default() };
    let rep = run(32, 4, 64, 16, 512, &plan, |h| Box::new(h)).unwrap();
    assert_eq!(rep.writes, 10_000);
    assert_eq!(rep.verified, 10_000);
    // One write in five is an inline candidate; those longer than 128 bytes went gathered.
    assert!(rep.inline > 0 && rep.inline < 2_000, "{} inline", rep.inline);
}

#[test]
fn a_wrong_destination_byte_is_caught() {
    struct Liar<'a>(RegionHost<'a>);
    impl Host for Liar<'_> {
        fn write_stamp(&mut self, cell: usize, value: u64) {
            self.0.write_stamp(cell, value)
        }
        fn read_dest(&mut self, off: usize, out: &mut [u8]) {
            self.0.read_dest(off, out);
            if out.len() > 20 {
                out[20] ^= 1;
            }
        }
    }
    let plan = Plan { writes: 100, pieces: vec![1], inline_every: 0, ..Plan::default() };
    let e = run(8, 2, 64, 8, 128, &plan, |h| Box::new(Liar(h))).unwrap_err();
    assert_eq!(e, rdma_pmd::Error::Device(rdma_pmd::Errno::EIO));
}
