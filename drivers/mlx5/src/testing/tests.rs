//! The fakes checked against what the driver expects of the device: the CQE writer's entries
//! as the poller's ownership test and the CQE view read them, the null control's records.

use std::vec::Vec;

use rdma_pmd::{BusAddr, Errno, Error, QpNum, WcStatus};

use super::*;
use crate::control::{Access, Control, CqParams, MkeyParams, Pdn, Translation, Uar};
use crate::layout::codes::{CqeOpcode, SendOpcode, Syndrome};
use crate::layout::cqe::{sw_owned, Cqe, CqeRepr, LEN};

const CQ: CqParams = CqParams {
    log_size: 1,
    buf: BusAddr(0x10_0000),
    dbrec: BusAddr(0x20_0000),
    uar: Uar { index: 1, bar_offset: 4096 },
};

#[test]
fn cqe_writer_stores_the_body_then_op_own_with_each_laps_owner_bit() {
    let mut ring = [[0xeeu8; LEN]; 2];
    let mut stores: Vec<(u64, usize)> = Vec::new();
    let mut w = CqWriter::new(CQ);
    for pi in 0..5u32 {
        let error = (pi == 3).then_some((Syndrome::RemoteAccessErr, 0x88));
        w.requester(QpNum(0x1234), pi as u16 * 2, error, |at, bytes| {
            let off = (at.0 - CQ.buf.0) as usize;
            let (slot, at) = (off / LEN, off % LEN);
            ring[slot][at..at + bytes.len()].copy_from_slice(bytes);
            stores.push((at as u64, bytes.len()));
        });
        assert_eq!(w.produced(), pi + 1);
        // Two stores per entry: bytes 0..63 of its slot, then op_own.
        assert_eq!(core::mem::take(&mut stores), [(0, 63), (63, 1)]);
        let entry = &ring[(pi & 1) as usize];
        // The consumer index the driver polls this entry at sees it as software's.
        assert!(sw_owned(entry[63], pi, 2), "entry {pi}");
        assert_eq!(entry[63] & 1, ((pi >> 1) & 1) as u8, "owner bit of lap {}", pi >> 1);
        let r = CqeRepr::parse(&Cqe::new_checked(&entry[..]).unwrap()).unwrap();
        assert_eq!(
            (r.qpn, r.wqe_counter, r.s_wqe_opcode),
            (QpNum(0x1234), pi as u16 * 2, SendOpcode::RdmaWrite)
        );
        if pi == 3 {
            assert_eq!(
                (r.opcode, r.status(), r.vendor_err()),
                (CqeOpcode::ReqErr, WcStatus::RemAccessErr, 0x88)
            );
        } else {
            assert_eq!((r.opcode, r.status()), (CqeOpcode::Req, WcStatus::Success));
        }
    }
}

#[test]
fn cqe_writer_writes_any_body_and_replaces_only_op_own() {
    let mut got = [0u8; LEN];
    let body = core::array::from_fn(|i| i as u8);
    let mut w = CqWriter::new(CQ);
    for _ in 0..2 {
        w.write(&body, CqeOpcode::RespWrImm, |_, _| {});
    }
    // Third entry: slot 0 of the second lap.
    w.write(&body, CqeOpcode::RespWrImm, |at, bytes| {
        let off = (at.0 - CQ.buf.0) as usize;
        got[off..off + bytes.len()].copy_from_slice(bytes);
    });
    assert_eq!(&got[..63], &body[..63]);
    assert_eq!(got[63], u8::from(CqeOpcode::RespWrImm) << 4 | 1);
    assert_eq!(w.cq(), CQ);
}

#[test]
fn null_control_numbers_and_records_every_call_and_refuses_past_its_tables() {
    let mut c = NullControl::default();
    assert_eq!(c.caps(), CAPS);
    assert_eq!(NullControl::with_bf(0).caps().log_bf_reg_size, 0);
    let u = c.alloc_uar().unwrap();
    assert_eq!((u.index, u.bar_offset), (1, 4096));
    let pd = c.alloc_pd().unwrap();
    assert_eq!((c.live_uars, c.live_pds), (1, 1));
    let cqn = c.create_cq(&CQ).unwrap();
    assert_eq!(c.cq(cqn), Some(CQ));
    let qp = crate::control::QpParams {
        service: crate::control::Service::Rc,
        pd,
        send_cq: cqn,
        recv_cq: cqn,
        log_sq_size: 6,
        log_rq_size: None,
        log_rq_stride: 4,
        buf: BusAddr(0x30_0000),
        dbrec: BusAddr(0x40_0000),
        uar: u,
    };
    let qpn = c.create_qp(&qp).unwrap();
    assert_eq!((c.qp(qpn), c.qp(QpNum(1))), (Some(qp), None));
    c.modify_qp(qpn, &crate::control::Transition::ToErr).unwrap();
    assert_eq!(c.transitions.as_slice(), [(qpn, crate::control::Transition::ToErr)]);
    c.destroy_qp(qpn).unwrap();
    c.destroy_cq(cqn).unwrap();
    assert_eq!(
        (c.destroyed_qps.as_slice(), c.destroyed_cqs.as_slice()),
        ([qpn].as_slice(), [cqn].as_slice())
    );
    c.dealloc_pd(pd).unwrap();
    c.dealloc_uar(u).unwrap();
    assert_eq!((c.live_uars, c.live_pds), (0, 0));

    let p = MkeyParams {
        pd: Pdn(3),
        start: 0x1000,
        len: 64,
        access: Access::LOCAL_WRITE,
        translation: Translation::Physical,
    };
    let keys: Vec<_> = (0..TABLE).map(|_| c.create_mkey(&p).unwrap()).collect();
    let mut distinct: Vec<u32> = keys.iter().map(|k| k.0).collect();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), TABLE, "every key its own number");
    assert_eq!(c.mkeys.iter().map(|(k, _)| *k).collect::<Vec<_>>(), keys);
    // Full: refused as firmware out of resources, nothing recorded.
    assert_eq!(c.create_mkey(&p), Err(Error::Device(Errno::ENOMEM)));
    assert_eq!(c.mkeys.len(), TABLE);
}

#[test]
fn a_lent_null_control_keeps_its_records_after_the_user_is_gone() {
    let mut c = NullControl::default();
    {
        let mut lent: &mut NullControl = &mut c;
        let u = Control::alloc_uar(&mut lent).unwrap();
        Control::dealloc_uar(&mut lent, u).unwrap();
        assert_eq!(Control::caps(&lent), CAPS);
    }
    assert_eq!((c.uars.len(), c.live_uars), (1, 0));
}
