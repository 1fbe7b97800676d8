//! Objects created through the command interface carry traffic: the model's engine executes
//! an RDMA WRITE posted on a QP, CQ, keys and UAR that only commands created, rung through the
//! firmware's BAR0 (whose UAR pages are the model's).

use super::*;

#[test]
fn objects_created_by_commands_carry_an_rdma_write() {
    let mut d = up();
    let uar = d.alloc_uar();
    let (eqn, _) = d.create_eq(uar, 4, &[EventType::Cmd]);
    let pd = d.alloc_pd();
    let key = |d: &mut Dev, variant: u8| {
        let (inp, buf) = d.mkey_input(pd, 4096, variant);
        let out = d.ok(&inp, 16);
        ((ifc::create_mkey_out::MKEY_INDEX.get(&out) as u32) << 8 | u32::from(variant), buf)
    };
    let (src_key, src) = key(&mut d, 0x11);
    let (dst_key, dst) = key(&mut d, 0x22);
    let cq = d.create_cq(uar, eqn, 4);
    let (cq_buf, cq_dbr) = d.last_queue;
    let a = d.create_qp(pd, cq, uar);
    let (qp_buf, qp_dbr) = d.last_queue;
    let b = d.create_qp(pd, cq, uar);
    d.connect(a, b);
    d.connect(b, a);

    let payload: Vec<u8> = (0..200u32).map(|i| (i * 7 + 3) as u8).collect();
    assert!(d.dma.write(BusAddr(src + 100), &payload));
    let va = 0x7f00_0000_0000u64;
    // ctrl (mlx5dv.h mlx5_wqe_ctrl_seg), raddr (mlx5_wqe_raddr_seg), data (mlx5_wqe_data_seg).
    let mut wqe = [0u8; 64];
    wqe[0..4].copy_from_slice(&0x08u32.to_be_bytes()); // wqe index 0, RDMA WRITE
    wqe[4..8].copy_from_slice(&(a << 8 | 3).to_be_bytes());
    wqe[11] = 0x08; // MLX5_WQE_CTRL_CQ_UPDATE
    wqe[16..24].copy_from_slice(&(va + 1000).to_be_bytes());
    wqe[24..28].copy_from_slice(&dst_key.to_be_bytes());
    wqe[32..36].copy_from_slice(&(payload.len() as u32).to_be_bytes());
    wqe[36..40].copy_from_slice(&src_key.to_be_bytes());
    wqe[40..48].copy_from_slice(&(va + 100).to_be_bytes());
    // The send queue follows the receive queue (16 WQEs of 32 bytes) in the QP buffer.
    assert!(d.dma.write(BusAddr(qp_buf + 16 * 32), &wqe));
    rdma_pmd_hal::barrier::to_device();
    assert!(d.dma.write(BusAddr(qp_dbr + 4), &1u32.to_be_bytes()));
    rdma_pmd_hal::barrier::to_device();
    let uar_off = uar as usize * crate::UAR_PAGE;
    d.bar.write_bytes8(uar_off + crate::uar::BF_BASE, wqe[..8].try_into().unwrap());

    let end = Instant::now() + WAIT;
    let mut cqe = [0u8; 64];
    loop {
        assert!(d.dma.read(BusAddr(cq_buf), &mut cqe));
        if cqe[63] >> 4 != 0xf {
            break;
        }
        assert!(Instant::now() < end, "no CQE");
        std::thread::sleep(Duration::from_micros(50));
    }
    rdma_pmd_hal::barrier::from_device();
    assert!(d.dma.read(BusAddr(cq_buf), &mut cqe));
    assert_eq!(cqe[63], 0x00, "a requester CQE (opcode 0) of the first pass (owner 0)");
    assert_eq!(u32::from_be_bytes(cqe[56..60].try_into().unwrap()) & 0xff_ffff, a);
    let mut got = vec![0u8; payload.len()];
    assert!(d.dma.read(BusAddr(dst + 1000), &mut got));
    assert_eq!(got, payload);
    // Consume it: the CQ doorbell record carries the consumer index.
    assert!(d.dma.write(BusAddr(cq_dbr), &1u32.to_be_bytes()));
    assert_eq!(d.model.counters().validation_failures, 0);
}
