//! End-to-end: the device model breaks the completion contract once (`Model::break_next_cqe`),
//! and the driver names what it did with a typed `DeviceFault` (errno EIO at the surface),
//! consumes the entry, and keeps counting right.

mod common;

use rdma_pmd::RecvQueue;
use std::time::Instant;

use common::*;
use rdma_pmd::{Completion, DeviceFault, Errno, Error, Post, QpNum, SendFlags, SendQueue};
use rdma_pmd_mlx5::QpConfig;
use rdma_pmd_mlx5_model::{CqeFault, CqeOpcode, Model};

const SIG: SendFlags = SendFlags::SIGNALED;

/// Poll until `poll` returns an error (failing after [`WAIT`]).
fn fault_of(mut poll: impl FnMut(&mut [Completion]) -> rdma_pmd::Result<usize>) -> Error {
    let mut out = [Completion::default(); 4];
    let start = Instant::now();
    loop {
        match poll(&mut out) {
            Err(e) => return e,
            Ok(n) => assert_eq!(n, 0, "a completion instead of a fault: {:?}", out[0]),
        }
        assert!(start.elapsed() < WAIT, "no fault reported");
        std::thread::yield_now();
    }
}

type Fw = rdma_pmd_mlx5::control::fw::FwControl<'static, 'static>;
type Region<'d> = rdma_pmd_mlx5::Region<'d, rdma_pmd_hal::mem::MemBar, Dma, Fw>;
type Dma = rdma_pmd_mlx5::SharedDma<std::sync::Arc<rdma_pmd_hal::mem::HeapDma>>;
type Q<'d> = TQp<'d, rdma_pmd_hal::mem::MemBar, Fw, 64>;

/// The regions a case writes from and to.
struct Src<'d> {
    src: Region<'d>,
    dst: Region<'d>,
}

/// One model, one device, a connected pair, a source and a target region; `f` runs the case.
fn with_pair(f: impl for<'d> FnOnce(&Model, &mut Q<'d>, &mut Q<'d>, &'d Src<'d>)) {
    let model = Model::new();
    let dev = open(&model);
    let r = Src { src: dev.reg(4096, TARGET).unwrap(), dst: dev.reg(4096, TARGET).unwrap() };
    let (mut a, mut b) = pair::<_, _, 64>(&dev, &QpConfig::default());
    f(&model, &mut a, &mut b, &r);
}

#[test]
fn a_completion_for_another_qp_is_a_wrong_qp_fault() {
    with_pair(|model, a, _b, r| {
        model.break_next_cqe(CqeFault::Qpn(0x4242));
        a.post_write(1, r.src.slice(0, 64).unwrap(), SIG, r.dst.remote(0)).unwrap();
        let e = fault_of(|out| a.poll(out));
        assert_eq!(
            (e, e.errno()),
            (DeviceFault::WrongQp { qpn: QpNum(0x4242) }.into(), Errno::EIO)
        );
        // The entry was consumed; the write stays outstanding, its region busy.
        assert_eq!((a.outstanding(), r.src.usage().in_flight()), (1, 1));
    });
}

#[test]
fn a_completion_for_a_wqe_not_posted_is_a_not_outstanding_fault() {
    with_pair(|model, a, _b, r| {
        model.break_next_cqe(CqeFault::WqeCounter(40));
        a.post_write(1, r.src.slice(0, 64).unwrap(), SIG, r.dst.remote(0)).unwrap();
        let e = fault_of(|out| a.poll(out));
        assert_eq!(e, DeviceFault::NotOutstanding { counter: 40 }.into());
        assert_eq!(a.outstanding(), 1);
    });
}

#[test]
fn a_completion_inside_a_multi_block_wqe_is_an_inside_wqe_fault() {
    with_pair(|model, a, _b, r| {
        // Three SGEs: ds = 5, two blocks at counters 0 and 1; the CQE names block 1.
        let sgl =
            [r.src.slice(0, 8).unwrap(), r.src.slice(64, 8).unwrap(), r.src.slice(128, 8).unwrap()];
        model.break_next_cqe(CqeFault::WqeCounter(1));
        a.post_writev(1, &sgl, SIG, r.dst.remote(0)).unwrap();
        let e = fault_of(|out| a.poll(out));
        assert_eq!(e, DeviceFault::InsideWqe { counter: 1 }.into());
    });
}

#[test]
fn a_responder_opcode_on_the_send_cq_is_an_unexpected_opcode_fault() {
    with_pair(|model, a, _b, r| {
        model.break_next_cqe(CqeFault::Opcode(CqeOpcode::RespSend));
        a.post_write(1, r.src.slice(0, 64).unwrap(), SIG, r.dst.remote(0)).unwrap();
        let e = fault_of(|out| a.poll(out));
        let op = u8::from(CqeOpcode::RespSend);
        assert_eq!(e, DeviceFault::UnexpectedOpcode { opcode: op }.into());
    });
}

#[test]
fn a_second_completion_for_one_write_is_a_not_outstanding_fault_after_the_first() {
    with_pair(|model, a, _b, r| {
        model.break_next_cqe(CqeFault::Twice);
        a.post_write(7, r.src.slice(0, 64).unwrap(), SIG, r.dst.remote(0)).unwrap();
        let done = wait(a, 1);
        assert_eq!(done.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [7]);
        let e = fault_of(|out| a.poll(out));
        assert_eq!(e, DeviceFault::NotOutstanding { counter: 0 }.into());
        assert_eq!((a.outstanding(), r.src.usage().in_flight()), (0, 0));
    });
}

#[test]
fn a_second_receive_completion_with_none_posted_is_a_no_receive_posted_fault() {
    with_pair(|model, a, b, r| {
        b.post_recv_empty(500).unwrap();
        model.break_next_cqe(CqeFault::Twice);
        a.post_write_imm(1, &[r.src.slice(0, 64).unwrap()], SIG, r.dst.remote(0), 0xabc).unwrap();
        let mut got = Vec::new();
        let mut out = [Completion::default(); 4];
        let start = Instant::now();
        let e = loop {
            match b.poll_recv(&mut out) {
                Ok(n) => got.extend_from_slice(&out[..n]),
                Err(e) => break e,
            }
            assert!(start.elapsed() < WAIT, "no fault reported");
            std::thread::yield_now();
        };
        assert_eq!(got.iter().map(|c| (c.wr_id, c.imm)).collect::<Vec<_>>(), [(500, Some(0xabc))]);
        assert_eq!((e, e.errno()), (DeviceFault::NoReceivePosted.into(), Errno::EIO));
        assert_eq!(b.rq_outstanding(), 0);
        assert_eq!(wait(a, 1)[0].wr_id, 1);
    });
}

/// Poll `b`'s receive queue until a completion or a fault comes (failing after [`WAIT`]).
fn next_recv(b: &mut Q<'_>) -> rdma_pmd::Result<Completion> {
    let mut out = [Completion::default(); 1];
    let start = Instant::now();
    loop {
        if b.poll_recv(&mut out)? == 1 {
            return Ok(out[0]);
        }
        assert!(start.elapsed() < WAIT, "no receive completion");
        std::thread::yield_now();
    }
}

#[test]
fn a_receive_completion_written_twice_is_a_wrong_receive_fault_and_keeps_the_next_receive() {
    let model = Model::new();
    let dev = open(&model);
    let src = dev.reg(4096, TARGET).unwrap();
    let mut rx = dev.reg(4096, TARGET).unwrap();
    let (mut a, mut b) = pair::<_, _, 64>(&dev, &QpConfig::default());
    let mut first = rx.dest().unwrap();
    let second = first.split_off(64).unwrap();
    let p0 = b.post_recv(500, first).unwrap();
    let p1 = b.post_recv(501, second).unwrap();
    src.write(0, &[0xaa; 64]).unwrap();
    model.break_next_cqe(CqeFault::Twice);
    a.post_send(1, src.slice(0, 64).unwrap(), SIG).unwrap();
    assert_eq!(next_recv(&mut b).unwrap().wr_id, 500);
    let e = next_recv(&mut b).unwrap_err();
    assert_eq!(
        (e, e.errno()),
        (DeviceFault::WrongReceive { counter: 0, expected: 1 }.into(), Errno::EIO)
    );
    assert_eq!(b.rq_outstanding(), 1);
    let got = p0.reclaim(&b).unwrap();
    let mut bytes = [0u8; 64];
    got.read(0, &mut bytes).unwrap();
    assert_eq!(bytes, [0xaa; 64]);
    // The second receive was not retired: its buffer stays out of the application's reach.
    let p1 = p1.reclaim(&b).unwrap_err();
    assert_eq!(wait(&mut a, 1)[0].wr_id, 1);
    // The device's next message lands in it, and only then is it handed back.
    src.write(0, &[0xbb; 64]).unwrap();
    a.post_send(2, src.slice(0, 64).unwrap(), SIG).unwrap();
    assert_eq!(next_recv(&mut b).unwrap().wr_id, 501);
    let got = p1.reclaim(&b).unwrap();
    got.read(0, &mut bytes).unwrap();
    assert_eq!(bytes, [0xbb; 64]);
    assert_eq!(wait(&mut a, 1)[0].wr_id, 2);
}
