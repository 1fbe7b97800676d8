//! End-to-end: READ destinations and receive buffers kept in place in `DestSlot`s on the
//! software mlx5 model. Each slot is posted, found out of reach until its completion is reaped,
//! read back where it lies, and posted again, lap after lap, with the bytes of every lap
//! checked.

mod common;

use std::time::Instant;

use common::*;
use rdma_pmd::{
    Completion, DestBuf, DestSlot, Post, RecvQueue, SendFlags, SendQueue, WcOpcode, WcStatus,
};
use rdma_pmd_hal::mem::MemBar;
use rdma_pmd_mlx5::control::{Access, Control, Path};
use rdma_pmd_mlx5::{ConnectOpts, Mlx5, Qp, QpConfig, SharedDma};
use rdma_pmd_mlx5_model::Model;

const SIG: SendFlags = SendFlags::SIGNALED;
const ALL: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC);

type D = SharedDma<std::sync::Arc<rdma_pmd_hal::mem::HeapDma>>;
type Q<'r, C> = Qp<'r, MemBar, D, C, 64, 16, 4>;

/// Two RC QPs of `dev` connected in loopback.
fn rc_pair<C: Control>(dev: &Mlx5<MemBar, D, C>) -> (Q<'_, C>, Q<'_, C>) {
    let cfg = QpConfig::default();
    let opts = ConnectOpts { access: ALL, ..ConnectOpts::default() };
    let mut a = dev.create_qp_with::<64, 16, 4>(&cfg).expect("qp a");
    let mut b = dev.create_qp_with::<64, 16, 4>(&cfg).expect("qp b");
    let (na, nb) = (a.qp_num(), b.qp_num());
    a.connect(nb, Path::Loopback, &opts).expect("connect a");
    b.connect(na, Path::Loopback, &opts).expect("connect b");
    (a, b)
}

fn contents(d: &DestBuf<'_>) -> Vec<u8> {
    let mut v = vec![0u8; d.len()];
    d.read(0, &mut v).unwrap();
    v
}

/// `d` cut into pieces of `lens` bytes (the rest is dropped).
fn pieces<'r, const N: usize>(mut d: DestBuf<'r>, lens: [usize; N]) -> [DestBuf<'r>; N] {
    lens.map(|l| {
        let rest = d.split_off(l).unwrap();
        core::mem::replace(&mut d, rest)
    })
}

#[test]
fn read_slots_are_posted_again_in_place_and_hold_each_laps_bytes() {
    let model = Model::new();
    let dev = open(&model);
    let src = dev.reg(4096, ALL).unwrap();
    let data = pattern(3, 4096);
    src.write(0, &data).unwrap();
    let mut dst = dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let (mut a, _b) = rc_pair(&dev);
    let mut rest = dst.dest().unwrap();
    let lens = [10, 1, 100];
    let mut slots: Vec<DestSlot<[DestBuf<'_>; 3]>> = (0..4)
        .map(|_| {
            let tail = rest.split_off(256).unwrap();
            DestSlot::new(pieces(core::mem::replace(&mut rest, tail), lens))
        })
        .collect();
    for lap in 0..5usize {
        let at = |k: usize| lap * 400 + k * 111;
        let mut batch = a.batch();
        for (k, s) in slots.iter_mut().enumerate() {
            batch.post_readv_in(k as u64, s, SIG, src.remote(at(k))).unwrap();
        }
        assert_eq!(batch.commit(), 4);
        // Not reaped yet: out of reach, and not posted twice.
        assert!(slots.iter_mut().all(|s| s.get(&a).is_none() && s.get_idle().is_none()));
        assert!(a.post_readv_in(9, &mut slots[0], SIG, src.remote(0)).is_err());
        let c = wait(&mut a, 4);
        assert!(c.iter().all(|c| c.status == WcStatus::Success && c.opcode == WcOpcode::RdmaRead));
        for (k, s) in slots.iter_mut().enumerate() {
            let bufs = s.get(&a).expect("retired");
            let got: Vec<u8> = bufs.iter().flat_map(contents).collect();
            assert_eq!(got, &data[at(k)..at(k) + 111], "lap {lap}, slot {k}");
            assert_eq!(bufs[0].region().in_flight(), 0);
        }
    }
    quiet(&mut a);
    clean(&model);
}

#[test]
fn receive_slots_are_posted_again_in_place() {
    let model = Model::new();
    let dev = open(&model);
    let src = dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let data = pattern(5, 4096);
    src.write(0, &data).unwrap();
    let mut rx = dev.reg(4096, Access::LOCAL_WRITE).unwrap();
    let (mut a, mut b) = rc_pair(&dev);
    let mut slot = DestSlot::new(pieces(rx.dest().unwrap(), [20, 300]));
    let mut out = [Completion::default(); 4];
    for lap in 0..4u64 {
        b.post_recvv_in(lap, &mut slot).unwrap();
        assert!(b.post_recvv_in(99, &mut slot).is_err(), "a busy slot is not posted twice");
        assert!(slot.get(&b).is_none());
        let off = lap as usize * 500;
        a.post_send(lap, src.slice(off, 320).unwrap(), SIG).unwrap();
        wait(&mut a, 1);
        let start = Instant::now();
        while b.poll_recv(&mut out).unwrap() == 0 {
            assert!(start.elapsed() < WAIT, "no receive completion");
            std::thread::yield_now();
        }
        assert_eq!((out[0].wr_id, out[0].byte_len, out[0].status), (lap, 320, WcStatus::Success));
        let [p0, p1] = slot.get(&b).expect("retired");
        assert_eq!(contents(p0), &data[off..off + 20]);
        assert_eq!(contents(p1), &data[off + 20..off + 320]);
    }
    quiet(&mut a);
    clean(&model);
}
