//! The Ethernet rings on their bytes: the send WQE against `struct mlx5_wqe_ctrl_seg`,
//! `mlx5_wqe_eth_seg` and `mlx5_wqe_data_seg` as mlx5dv.h lays them out (offsets written out
//! by hand), the doorbell record and store, and receive completions.

use super::*;
use crate::layout::cqe::Cqe;
use rdma_pmd_hal::mem::{HeapDma, MemBar};

const SQN: Sqn = Sqn(0x00_1234);
const LKEY: Lkey = Lkey(0x0000_4201);

fn arp_frame() -> [u8; 60] {
    core::array::from_fn(|i| i as u8 + 1)
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}

#[test]
fn inline_lengths_follow_the_mode() {
    assert_eq!(inline_len(InlineMode::None, 60), 0);
    assert_eq!(inline_len(InlineMode::L2, 60), 18);
    assert_eq!(inline_len(InlineMode::Ip, 60), 18);
    assert_eq!(inline_len(InlineMode::TcpUdp, 60), 18);
    assert_eq!(inline_len(InlineMode::L2, 14), 14, "a runt is inlined whole");
}

#[test]
fn an_l2_inline_frame_wqe_byte_for_byte() {
    let f = arp_frame();
    let (w, ds) = frame_wqe(SQN, 0x0102, &f[..18], 60, 0x7f00_0000_1000, LKEY);
    assert_eq!(ds, 4, "ctrl, eth, 16 more inline bytes, data");
    // Control: opmod 0 | index 0x0102 | opcode SEND 0x0a; qpn << 8 | ds; CQ_UPDATE.
    assert_eq!(w[0..4], [0x00, 0x01, 0x02, 0x0a]);
    assert_eq!(w[4..8], [0x00, 0x12, 0x34, 4]);
    assert_eq!(w[8..11], [0, 0, 0]);
    assert_eq!(w[11], 0x08);
    assert_eq!(w[12..16], [0; 4]);
    // Ethernet segment: no offload bits; inline_hdr_sz 18 at 12..14, first two bytes at 14.
    assert_eq!(w[16..28], [0; 12]);
    assert_eq!(w[28..30], [0, 18]);
    assert_eq!(w[30..32], f[0..2]);
    assert_eq!(w[32..48], f[2..18]);
    // Data segment: the 42 bytes after the inline head.
    assert_eq!(be32(&w, 48), 42);
    assert_eq!(be32(&w, 52), LKEY.0);
    assert_eq!(w[56..64], (0x7f00_0000_1000u64 + 18).to_be_bytes());
}

#[test]
fn a_frame_without_inline_is_ctrl_eth_data() {
    let (w, ds) = frame_wqe(SQN, 7, &[], 60, 0x1000, LKEY);
    assert_eq!(ds, 3);
    assert_eq!(w[7], 3);
    assert_eq!(w[16..32], [0; 16], "inline_hdr_sz 0");
    assert_eq!(be32(&w, 32), 60);
    assert_eq!(w[40..48], 0x1000u64.to_be_bytes());
    assert_eq!(w[48..], [0; 16]);
    // A frame entirely inline needs no data segment.
    let f = arp_frame();
    let (w, ds) = frame_wqe(SQN, 7, &f[..14], 14, 0x1000, LKEY);
    assert_eq!((ds, &w[32..44]), (3, &f[2..14]));
}

#[test]
fn send_ring_posts_rings_and_retires() {
    let dma = HeapDma::new();
    let bar = MemBar::new(0x4000);
    let uar = Uar { index: 2, bar_offset: 0x2000 };
    let mut tx = EthTx::alloc(&*dma, 2, uar).unwrap();
    tx.set_sqn(SQN);
    let f = arp_frame();
    for i in 0..4u16 {
        assert_eq!(tx.post(&bar, &f[..18], 60, 0x9000, LKEY), Ok(i));
    }
    assert_eq!(tx.outstanding(), 4);
    assert!(matches!(tx.post(&bar, &f[..18], 60, 0x9000, LKEY), Err(Error::QueueFull { .. })));
    let (ring, dbrec) = tx.bus();
    let mut rec = [0u8; 8];
    assert!(dma.read(dbrec, &mut rec));
    assert_eq!(rec[4..8], [0, 0, 0, 4], "dbrec[SND_DBR] = htobe32(pi)");
    let mut w = [0u8; 64];
    assert!(dma.read(ring.add(3 * 64), &mut w));
    assert_eq!(w[0..4], [0, 0, 3, 0x0a]);
    // The doorbell: the last WQE's first 8 bytes at the UAR's BlueFlame offset.
    assert_eq!(bar.read_u64(0x2000 + 0x800).to_ne_bytes(), w[0..8]);

    let mut c = [0u8; 64];
    let mut cqe = Cqe::new_unchecked(&mut c[..]);
    cqe.set_wqe_counter(1);
    cqe.set_op_own(0);
    assert_eq!(tx.on_cqe(&Cqe::new_unchecked(&c[..])), Ok(TxDone::Sent));
    assert_eq!(tx.outstanding(), 2, "a completion retires everything up to its WQE");
    let mut cqe = Cqe::new_unchecked(&mut c[..]);
    cqe.set_wqe_counter(1);
    assert!(matches!(
        tx.on_cqe(&Cqe::new_unchecked(&c[..])),
        Err(Error::Fault(DeviceFault::NotOutstanding { counter: 1 }))
    ));
    let mut cqe = Cqe::new_unchecked(&mut c[..]);
    cqe.set_wqe_counter(3);
    cqe.set_op_own(0x20);
    assert!(matches!(
        tx.on_cqe(&Cqe::new_unchecked(&c[..])),
        Err(Error::Fault(DeviceFault::UnexpectedOpcode { opcode: 2 }))
    ));
    c[55] = 0x05;
    c[63] = 0xd0;
    assert_eq!(tx.on_cqe(&Cqe::new_unchecked(&c[..])), Ok(TxDone::Failed(0x05)));
    assert_eq!(tx.outstanding(), 0);
    // SAFETY: no device.
    unsafe { tx.free(&*dma) };
    assert_eq!(dma.live_blocks(), 0);
}

fn rx_cqe(counter: u16, len: u32, op_own: u8) -> [u8; 64] {
    let mut c = [0u8; 64];
    let mut cqe = Cqe::new_unchecked(&mut c[..]);
    cqe.set_wqe_counter(counter);
    cqe.set_byte_cnt(len);
    cqe.set_op_own(op_own);
    c
}

#[test]
fn receive_ring_hands_out_frames_in_order() {
    let dma = HeapDma::new();
    let mut rx = EthRx::alloc(&*dma, 2).unwrap();
    let c = rx_cqe(0, 60, 0x20);
    assert!(matches!(
        rx.on_cqe(&Cqe::new_unchecked(&c[..])),
        Err(Error::Fault(DeviceFault::NoReceivePosted))
    ));
    rx.post_all(0x10_0000, LKEY);
    let (ring, dbrec) = rx.bus();
    let mut seg = [0u8; 16];
    assert!(dma.read(ring.add(2 * 16), &mut seg));
    assert_eq!(be32(&seg, 0), 2048);
    assert_eq!(be32(&seg, 4), LKEY.0);
    assert_eq!(seg[8..16], (0x10_0000u64 + 2 * 2048).to_be_bytes());
    let mut rec = [0u8; 4];
    assert!(dma.read(dbrec, &mut rec));
    assert_eq!(rec, [0, 0, 0, 4], "dbrec[RCV_DBR] = htobe32(head)");

    let c = rx_cqe(0, 60, 0x20);
    assert_eq!(
        rx.on_cqe(&Cqe::new_unchecked(&c[..])),
        Ok(RxDone::Frame(RxFrame { slot: 0, len: 60 }))
    );
    rx.recycle();
    assert!(dma.read(dbrec, &mut rec));
    assert_eq!(rec, [0, 0, 0, 5]);
    let c = rx_cqe(2, 60, 0x20);
    assert_eq!(
        rx.on_cqe(&Cqe::new_unchecked(&c[..])),
        Err(Error::Fault(DeviceFault::WrongReceive { counter: 2, expected: 1 }))
    );
    let mut c = rx_cqe(1, 60, 0x20);
    c[29] = 1;
    assert_eq!(rx.on_cqe(&Cqe::new_unchecked(&c[..])), Ok(RxDone::Tagged));
    rx.recycle();
    let c = rx_cqe(2, 4096, 0x20);
    assert!(matches!(
        rx.on_cqe(&Cqe::new_unchecked(&c[..])),
        Err(Error::Fault(DeviceFault::BadFirmwareValue { .. }))
    ));
    rx.recycle();
    let mut c = rx_cqe(3, 0, 0xe0);
    c[55] = 0x05;
    assert_eq!(rx.on_cqe(&Cqe::new_unchecked(&c[..])), Ok(RxDone::Failed(0x05)));
    // SAFETY: no device.
    unsafe { rx.free(&*dma) };
    assert_eq!(dma.live_blocks(), 0);
}

#[test]
fn a_duplicated_or_misdirected_receive_cqe_takes_no_buffer() {
    let dma = HeapDma::new();
    let mut rx = EthRx::alloc(&*dma, 2).unwrap();
    rx.post_all(0x10_0000, LKEY);
    let first = rx_cqe(0, 60, 0x20);
    assert_eq!(
        rx.on_cqe(&Cqe::new_unchecked(&first[..])),
        Ok(RxDone::Frame(RxFrame { slot: 0, len: 60 }))
    );
    // The same CQE again: buffer 1 is still the device's.
    assert_eq!(
        rx.on_cqe(&Cqe::new_unchecked(&first[..])),
        Err(Error::Fault(DeviceFault::WrongReceive { counter: 0, expected: 1 }))
    );
    // A send opcode naming the right WQE takes nothing either.
    let c = rx_cqe(1, 60, 0x00);
    assert_eq!(
        rx.on_cqe(&Cqe::new_unchecked(&c[..])),
        Err(Error::Fault(DeviceFault::UnexpectedOpcode { opcode: 0 }))
    );
    // The counter modulo the ring (4) names it too.
    let c = rx_cqe(5, 42, 0x20);
    assert_eq!(
        rx.on_cqe(&Cqe::new_unchecked(&c[..])),
        Ok(RxDone::Frame(RxFrame { slot: 1, len: 42 }))
    );
    // SAFETY: no device.
    unsafe { rx.free(&*dma) };
}

mod hostile {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever a hostile device writes into a CQE, the rings answer a value or a typed
        /// fault, never panic, and never retire more than was posted.
        #[test]
        fn random_cqes_never_panic(cqes in proptest::collection::vec(any::<[u8; 32]>(), 1..40)) {
            let dma = HeapDma::new();
            let bar = MemBar::new(0x4000);
            let mut tx = EthTx::alloc(&*dma, 3, Uar { index: 1, bar_offset: 0x1000 }).unwrap();
            let mut rx = EthRx::alloc(&*dma, 3).unwrap();
            rx.post_all(0x10_0000, LKEY);
            let f = arp_frame();
            for half in &cqes {
                let _ = tx.post(&bar, &f[..18], 60, 0x9000, LKEY);
                let mut c = [0u8; 64];
                c[32..].copy_from_slice(half);
                c[..32].copy_from_slice(half);
                let view = Cqe::new_unchecked(&c[..]);
                let before = tx.outstanding();
                if tx.on_cqe(&view).is_ok() {
                    prop_assert!(tx.outstanding() < before);
                }
                match rx.on_cqe(&view) {
                    Ok(RxDone::Frame(fr)) => {
                        prop_assert!(fr.len <= FRAME_BUF && fr.slot < rx.size());
                        rx.recycle();
                    }
                    Ok(_) => rx.recycle(),
                    Err(Error::Fault(_)) => {}
                    Err(e) => prop_assert!(false, "untyped {e:?}"),
                }
            }
            // SAFETY: no device.
            unsafe {
                tx.free(&*dma);
                rx.free(&*dma);
            }
        }
    }
}
